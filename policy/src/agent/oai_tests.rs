//! The codex and opencode presets' data: each applies to an empty policy,
//! and each config file renders to what the agent parses (TOML, JSON)
//! with the relay URL where the agent reads its base URL, even for a URL
//! that needs escaping.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "tests"
)]

use crate::agent::*;
use palisade_schema::host_policy::HostPolicy;

/// Values with characters each format must escape.
struct Values;

const URL: &str = "http://127.0.0.1:3130/a\"b\\c";

impl TemplateValues for Values {
    fn relay_url(&self, name: &str) -> Option<String> {
        (name == "openai").then(|| URL.to_owned())
    }
    fn placeholder(&self, name: &str) -> Option<String> {
        (name == "openai").then(|| "sk-proj-placeholder".to_owned())
    }
    fn home(&self) -> String {
        "/home/agent".to_owned()
    }
    fn cwd(&self) -> String {
        "/work".to_owned()
    }
}

fn only_file(agent: AgentName, path: &str) -> PresetFile {
    let p = preset(agent);
    assert_eq!(p.files.len(), 1, "{agent:?}");
    let f = p.files[0];
    assert_eq!(f.path, path);
    assert!(f.read_only, "{path} runs commands: read-only inside");
    f
}

#[test]
fn both_presets_apply_to_an_empty_policy() {
    for agent in [AgentName::Codex, AgentName::OpenCode] {
        let plan = plan(&HostPolicy::default(), agent).unwrap();
        assert!(
            plan.policy.egress.relays.iter().any(|r| r.name == "openai"),
            "{agent:?}: the openai relay is added"
        );
    }
}

#[test]
fn codex_config_renders_to_toml_with_the_relay_as_its_provider() {
    let f = only_file(AgentName::Codex, ".codex/config.toml");
    let text = render(&f, &Values).unwrap();
    let v: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(v["model_provider"].as_str(), Some("palisade-openai"));
    let p = &v["model_providers"]["palisade-openai"];
    assert_eq!(p["base_url"].as_str(), Some(format!("{URL}/v1").as_str()));
    assert_eq!(p["env_key"].as_str(), Some("OPENAI_API_KEY"));
    assert_eq!(p["wire_api"].as_str(), Some("responses"));
    assert_eq!(v["features"]["plugins"].as_bool(), Some(false));
    assert_eq!(v["analytics"]["enabled"].as_bool(), Some(false));
    assert_eq!(v["check_for_update_on_startup"].as_bool(), Some(false));
}

#[test]
fn opencode_config_renders_to_json_with_the_relay_as_the_openai_base_url() {
    let f = only_file(AgentName::OpenCode, ".config/opencode/opencode.json");
    let text = render(&f, &Values).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["provider"]["openai"]["options"]["baseURL"].as_str(),
        Some(format!("{URL}/v1").as_str())
    );
    assert_eq!(v["autoupdate"], serde_json::json!(false));
    assert_eq!(v["share"], serde_json::json!("disabled"));
}
