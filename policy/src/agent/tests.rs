//! Tests of `plan` (the merge rules) and `render` (the template syntax and
//! its escaping), on a synthetic preset so they do not depend on the data
//! files.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "tests"
)]

use super::*;
use palisade_schema::host_policy::{self, HostPolicy};
use proptest::prelude::*;

fn policy(text: &str) -> HostPolicy {
    host_policy::parse("p.toml", text).unwrap().value().clone()
}

const CREDS: &[CredentialKind] = &[CredentialKind::ApiKey];

fn synthetic() -> AgentPreset {
    AgentPreset {
        name: AgentName::Claude,
        tested: TestedWith {
            package: "x",
            version: "1",
            bin: "x",
        },
        relays: vec![PresetRelay {
            name: "anthropic",
            provider: "anthropic",
            preset: RelayPreset::Anthropic,
            origin: "https://api.anthropic.com",
            credentials: CREDS,
            api_key: ("x-api-key", "ANTHROPIC_API_KEY", ""),
        }],
        env: vec![
            ("ANTHROPIC_BASE_URL", EnvValue::RelayUrl("anthropic")),
            ("ANTHROPIC_API_KEY", EnvValue::Placeholder("anthropic")),
            ("DISABLE_TELEMETRY", EnvValue::Literal("1")),
            ("CLAUDE_CONFIG_DIR", EnvValue::Home),
        ],
        files: Vec::new(),
        state_dirs: Vec::new(),
        protected_home: Vec::new(),
        protected_workdir: vec![".claude"],
        staged_only: Vec::new(),
        denied_hosts: Vec::new(),
    }
}

#[test]
fn a_preset_adds_its_relay_env_and_keeps_home_for_the_session() {
    let p = merge(&policy("[worker]\nprofile = \"governed\"\n"), synthetic()).unwrap();
    let r = &p.policy.egress.relays[0];
    assert_eq!(r.name, "anthropic");
    assert_eq!(r.origin.host, "api.anthropic.com");
    assert_eq!(r.routes, RelayPreset::Anthropic.routes());
    assert_eq!(r.credential.header, "x-api-key");
    assert_eq!(r.credential.from_env, "ANTHROPIC_API_KEY");
    assert_eq!(r.worker_env["ANTHROPIC_BASE_URL"], "relay");
    assert_eq!(r.worker_env["ANTHROPIC_API_KEY"], "placeholder");
    assert_eq!(p.policy.worker.env.set["DISABLE_TELEMETRY"], "1");
    assert!(p.env.contains(&("CLAUDE_CONFIG_DIR", EnvValue::Home)));
}

#[test]
fn the_policys_relay_and_env_win() {
    let text = r#"
[worker.env]
set = { DISABLE_TELEMETRY = "0" }

[[egress.relay]]
name = "anthropic"
origin = "http://127.0.0.1:9"
routes = ["POST /v1/messages"]
credential = { header = "x-api-key", from_env = "MY_KEY" }
worker_env = { ANTHROPIC_API_KEY = "placeholder" }
"#;
    let p = merge(&policy(text), synthetic()).unwrap();
    assert_eq!(
        p.policy.egress.relays.len(),
        1,
        "no second relay of the name"
    );
    let r = &p.policy.egress.relays[0];
    assert_eq!(r.origin.host, "127.0.0.1");
    assert_eq!(r.credential.from_env, "MY_KEY");
    assert_eq!(r.routes.len(), 1, "the policy's routes kept");
    // The preset's URL variable now points at the policy's relay.
    assert_eq!(r.worker_env["ANTHROPIC_BASE_URL"], "relay");
    assert_eq!(p.policy.worker.env.set["DISABLE_TELEMETRY"], "0");
    assert!(!p.env.iter().any(|(n, _)| *n == "DISABLE_TELEMETRY"));
    assert!(!p.env.iter().any(|(n, _)| *n == "ANTHROPIC_API_KEY"));
}

#[test]
fn a_credential_kind_the_agent_cannot_use_is_refused_with_what_to_use() {
    let text = r#"
[[egress.relay]]
name = "anthropic"
origin = "https://api.anthropic.com"
routes = ["POST /v1/messages"]
credential = { header = "authorization", kind = "anthropic_oauth", from_file = "/t.json" }
"#;
    let e = merge(&policy(text), synthetic()).unwrap_err();
    let AgentError::Credential { kind, instead, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(*kind, "anthropic_oauth");
    assert!(instead.contains("api_key"), "{instead}");
    // Control: the same relay with an API key is accepted.
    let ok = text.replace(
        "credential = { header = \"authorization\", kind = \"anthropic_oauth\", from_file = \"/t.json\" }",
        "credential = { header = \"x-api-key\", from_env = \"K\" }",
    );
    assert!(merge(&policy(&ok), synthetic()).is_ok());
}

#[test]
fn an_env_value_naming_no_relay_is_refused() {
    let mut s = synthetic();
    s.env.push(("X_URL", EnvValue::RelayUrl("nope")));
    let e = merge(&HostPolicy::default(), s).unwrap_err();
    assert!(matches!(e, AgentError::Template { .. }), "{e}");
}

struct Values(String);

impl TemplateValues for Values {
    fn relay_url(&self, name: &str) -> Option<String> {
        (name == "a").then(|| "http://127.0.0.1:1234".to_owned())
    }
    fn placeholder(&self, name: &str) -> Option<String> {
        (name == "a").then(|| self.0.clone())
    }
    fn home(&self) -> String {
        "/home/w".to_owned()
    }
    fn cwd(&self) -> String {
        "/work".to_owned()
    }
}

fn file(template: &'static str, format: FileFormat) -> PresetFile {
    PresetFile {
        path: "f",
        template,
        format,
        read_only: true,
    }
}

#[test]
fn render_replaces_each_name_and_keeps_double_braces() {
    let v = Values("sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUVWXYZ".to_owned());
    let f = file(
        "{{\"u\": \"{relay_url:a}\", \"k\": \"{placeholder:a}\", \"t\": \"{placeholder_tail:a}\", \"h\": \"{home}\", \"c\": \"{cwd}\"}}",
        FileFormat::Json,
    );
    let out: serde_json::Value = serde_json::from_str(&render(&f, &v).unwrap()).unwrap();
    assert_eq!(out["u"], "http://127.0.0.1:1234");
    assert_eq!(out["k"], "sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUVWXYZ");
    assert_eq!(out["t"], "GHIJKLMNOPQRSTUVWXYZ");
    assert_eq!(out["h"], "/home/w");
    assert_eq!(out["c"], "/work");
}

#[test]
fn render_refuses_unknown_names_and_relays_and_keeps_other_braces() {
    let v = Values("p".to_owned());
    assert_eq!(
        render(&file("{\n \"a\": {home}} x {home", FileFormat::Text), &v).unwrap(),
        "{\n \"a\": /home/w} x {home"
    );
    for t in ["{nope}", "{relay_url:b}", "{placeholder:b}", "{nope:a}"] {
        let e = render(&file(t, FileFormat::Text), &v).unwrap_err();
        assert!(
            matches!(e, AgentError::Template { path: "f", .. }),
            "{t}: {e}"
        );
    }
    // Control: the known names render.
    assert_eq!(
        render(&file("{home} {cwd}", FileFormat::Text), &v).unwrap(),
        "/home/w /work"
    );
}

#[test]
fn text_refuses_a_value_with_a_newline() {
    let v = Values("a\nb".to_owned());
    assert!(render(&file("{placeholder:a}", FileFormat::Text), &v).is_err());
    assert_eq!(
        render(&file("{placeholder:a}", FileFormat::Json), &v).unwrap(),
        "a\\nb"
    );
}

proptest! {
    #[test]
    fn render_never_panics(t in "\\PC{0,40}", p in "\\PC{0,20}") {
        let t: &'static str = Box::leak(t.into_boxed_str());
        for f in [FileFormat::Json, FileFormat::Toml, FileFormat::Text] {
            let _ = render(&file(t, f), &Values(p.clone()));
        }
    }

    #[test]
    fn json_escaping_round_trips(p in any::<String>()) {
        let f = file("{{\"k\": \"{placeholder:a}\"}}", FileFormat::Json);
        let out: serde_json::Value = serde_json::from_str(&render(&f, &Values(p.clone())).unwrap()).unwrap();
        prop_assert_eq!(out["k"].as_str().unwrap(), p.as_str());
    }

    #[test]
    fn toml_escaping_round_trips(p in any::<String>()) {
        let f = file("k = \"{placeholder:a}\"\n", FileFormat::Toml);
        let out: toml::Table = toml::from_str(&render(&f, &Values(p.clone())).unwrap()).unwrap();
        prop_assert_eq!(out["k"].as_str().unwrap(), p.as_str());
    }
}
