//! Pi as a governed worker, against the fake Anthropic Messages provider
//! on 127.0.0.1. Each test is ignored by default (it needs the agent
//! CLIs): `PALISADE_AGENTS_BIN=…/node_modules/.bin cargo test -p
//! palisade-cli --test agents_pi -- --ignored`, as root.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::print_stderr,
    clippy::disallowed_methods,
    reason = "tests"
)]

#[path = "agents_common/fake.rs"]
#[allow(
    unreachable_pub,
    clippy::allow_attributes_without_reason,
    reason = "the shared fake server, included as a private module"
)]
mod fake;
#[path = "agents_common/fake_anthropic.rs"]
mod fake_anthropic;
#[path = "../../examples/governed-worker/provider.rs"]
#[allow(dead_code, unreachable_pub, reason = "shared with the demo binary")]
mod provider;
#[path = "agents_common/anthropic_rig.rs"]
mod rig;

use std::time::Duration;

use fake_anthropic::{Anthropic, Expect};
use palisade_policy::agent::{AgentName, EnvValue, TemplateValues, preset, render};
use rig::Rig;

const LIMIT: Duration = Duration::from_secs(90);

/// The relay's URL inside: the first relay of the policy listens on
/// 127.0.0.1:3130 (docs/governed-worker.md).
const RELAY_URL: &str = "http://127.0.0.1:3130";

/// The template values of the hand-written policy's relay.
struct Relay;

impl TemplateValues for Relay {
    fn relay_url(&self, name: &str) -> Option<String> {
        (name == "anthropic").then(|| RELAY_URL.to_owned())
    }
    fn placeholder(&self, _: &str) -> Option<String> {
        None
    }
    fn home(&self) -> String {
        "/tmp/home".to_owned()
    }
    fn cwd(&self) -> String {
        String::new()
    }
}

fn pi() -> String {
    rig::agent_bin("pi").display().to_string()
}

/// The preset's fixed environment, and `PI_CODING_AGENT_DIR` pointing at
/// an agent directory in the working directory holding the preset's
/// `models.json` and `settings.json` (rendered here by hand), for the
/// control without the switches; the tool turn runs `--agent pi`, which
/// writes them into the state directory.
fn setup(r: &Rig, switches: bool) -> Vec<(String, String)> {
    let p = preset(AgentName::Pi);
    let agent_dir = r.work.join("pi-agent");
    std::fs::create_dir_all(&agent_dir).unwrap();
    for f in &p.files {
        let rel = f.path.strip_prefix(".pi/agent/").unwrap();
        let text = render(f, &Relay).unwrap();
        std::fs::write(agent_dir.join(rel), text).unwrap();
    }
    std::fs::set_permissions(
        &agent_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let mut env = vec![(
        "PI_CODING_AGENT_DIR".to_owned(),
        agent_dir.display().to_string(),
    )];
    if switches {
        env.extend(p.env.iter().filter_map(|(k, v)| match v {
            EnvValue::Literal(l) => Some(((*k).to_owned(), (*l).to_owned())),
            _ => None,
        }));
    }
    env
}

fn rig_for(f: &Anthropic, switches: bool) -> (Rig, Vec<(String, String)>) {
    // The policy is written before the agent dir; build it twice: once to
    // know the working directory, once with the environment.
    let probe = Rig::new(f.fake.addr, &[], "");
    let env = setup(&probe, switches);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let r = Rig::new_in(probe, f.fake.addr, &pairs, "");
    (r, env)
}

fn denials(r: &Rig) -> Vec<String> {
    r.records()
        .iter()
        .filter(|x| x["kind"] == "egress_connection" && x["body"]["decision"] == "deny")
        .map(|x| {
            format!(
                "{}:{} {}",
                x["body"]["host"].as_str().unwrap_or(""),
                x["body"]["port"],
                x["body"]["reason"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// Pi completes a tool turn through the relay (its base URL from the
/// preset's `models.json`): the tool runs as the worker uid without
/// capabilities, its output reaches the provider, the real key reaches
/// only the fake upstream, the journal verifies, and with the preset's
/// switches Pi tries no other host.
#[test]
#[ignore = "needs the agent CLIs: cargo xtask agents"]
fn pi_tool_turn_is_governed_and_the_key_stays_on_the_host() {
    assert!(rig::is_root(), "the agent suite runs as root");
    let f = Anthropic::start(Expect::ApiKey(rig::real_key()), &rig::probe_command());
    // Under `--agent pi`: the preset's env and files in HOME, HOME a
    // state root (Pi locks `~/.pi/agent/settings.json`).
    let r = Rig::with_agent(f.fake.addr, "pi");
    let p = pi();
    let o = r.run(
        &[
            &p,
            "-p",
            "--provider",
            "anthropic",
            "--model",
            "claude-sonnet-4-5",
            "Check the sandbox. PLEASE-RUN-THE-TOOL",
        ],
        LIMIT,
    );
    assert_eq!(o.code, 0, "pi failed: {}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains(fake_anthropic::DONE_TEXT), "{}", o.stdout);
    let results = f.tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    rig::assert_governed_tool_output(&results[0]);
    let msgs = f.messages();
    assert!(
        msgs.len() >= 2,
        "a tool turn and its follow-up: {}",
        msgs.len()
    );
    for m in &msgs {
        assert!(
            m.header("x-api-key") == Some(rig::real_key().as_str()),
            "a request without the real key reached the fake"
        );
    }
    rig::assert_key_only_upstream(&r, &o);
    let d = denials(&r);
    assert!(
        d.is_empty(),
        "with the preset's switches Pi tries no other host: {d:?}"
    );
}

/// Without the preset's switches, in print mode, Pi 0.73.1 still sends
/// nothing but its Messages requests: every record of the session's
/// traffic is the relay's, and the proxy saw no connection at all. (Node's
/// `fetch` ignores `HTTPS_PROXY`: a direct attempt would fail at name
/// resolution inside the sandbox's network namespace and leave no proxy
/// record, so the relay records are the check: the fake saw exactly the
/// requests the relay forwarded.)
#[test]
#[ignore = "needs the agent CLIs: cargo xtask agents"]
fn pi_without_the_switches_sends_only_relay_traffic() {
    assert!(rig::is_root(), "the agent suite runs as root");
    let f = Anthropic::start(Expect::ApiKey(rig::real_key()), "true");
    let (r, _) = rig_for(&f, false);
    let p = pi();
    let o = r.run(
        &[
            &p,
            "-p",
            "--provider",
            "anthropic",
            "--model",
            "claude-sonnet-4-5",
            "Say hello.",
        ],
        LIMIT,
    );
    assert_eq!(o.code, 0, "pi failed: {}\n{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains(fake_anthropic::TEXT_REPLY),
        "{}",
        o.stdout
    );
    let recs = r.records();
    let proxied = recs
        .iter()
        .filter(|x| x["kind"] == "egress_connection")
        .count();
    assert_eq!(proxied, 0, "no proxy connection: {:?}", denials(&r));
    let forwarded = recs
        .iter()
        .filter(|x| x["kind"] == "relay_request" && x["body"]["outcome"] == "forwarded")
        .count();
    assert!(forwarded >= 1, "the turn went through the relay");
    assert_eq!(
        forwarded,
        f.seen().len(),
        "the fake saw only what the relay forwarded"
    );
    rig::assert_key_only_upstream(&r, &o);
}
