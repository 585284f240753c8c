//! The `pi` preset: Pi 0.73.1 (`@mariozechner/pi-coding-agent`, Node) on
//! the Anthropic Messages API.
//!
//! Where each value comes from: the package's `docs/usage.md`
//! (environment variables), `docs/models.md` (`models.json`, "Overriding
//! Built-in Providers"), `docs/extensions.md`, `docs/settings.md`,
//! `docs/skills.md`, `docs/prompt-templates.md` and `docs/packages.md`
//! (what Pi loads and runs from `~/.pi/agent` and the project's `.pi/`).

use super::{AgentName, AgentPreset, EnvValue, FileFormat, PresetFile, PresetRelay, TestedWith};
use palisade_schema::host_policy::{CredentialKind, RelayPreset};

/// `~/.pi/agent/models.json`: Pi takes base URLs only from here (it
/// ignores `ANTHROPIC_BASE_URL`); the built-in `anthropic` provider is
/// pointed at the relay and keeps its models. The key comes from
/// `ANTHROPIC_API_KEY` (the placeholder). Read-only: an `apiKey` or header
/// value starting with `!` is a shell command Pi runs.
const MODELS_JSON: &str = r#"{{
  "providers": {{
    "anthropic": {{
      "baseUrl": "{relay_url:anthropic}"
    }}
  }}
}}
"#;

/// `~/.pi/agent/settings.json`: no packages, extensions or skills beyond
/// the defaults; read-only, since `packages` are installed and
/// `extensions` run on start.
const SETTINGS_JSON: &str = r#"{{
  "packages": [],
  "extensions": []
}}
"#;

pub(super) fn preset() -> AgentPreset {
    AgentPreset {
        name: AgentName::Pi,
        tested: TestedWith {
            package: "@mariozechner/pi-coding-agent",
            version: "0.73.1",
            bin: "pi",
        },
        relays: vec![PresetRelay {
            name: "anthropic",
            provider: "anthropic",
            preset: RelayPreset::Anthropic,
            origin: "https://api.anthropic.com",
            // A key shaped `sk-ant-oat…` makes Pi send it as an OAuth
            // Bearer token with the `oauth-` beta header.
            credentials: &[CredentialKind::ApiKey, CredentialKind::AnthropicOauth],
            api_key: ("x-api-key", "ANTHROPIC_API_KEY", ""),
        }],
        env: vec![
            ("ANTHROPIC_API_KEY", EnvValue::Placeholder("anthropic")),
            // No update check, package update check or install telemetry
            // (pi.dev).
            ("PI_OFFLINE", EnvValue::Literal("1")),
            ("PI_SKIP_VERSION_CHECK", EnvValue::Literal("1")),
            ("PI_TELEMETRY", EnvValue::Literal("0")),
        ],
        files: vec![
            PresetFile {
                path: ".pi/agent/models.json",
                template: MODELS_JSON,
                format: FileFormat::Json,
                read_only: true,
            },
            PresetFile {
                path: ".pi/agent/settings.json",
                template: SETTINGS_JSON,
                format: FileFormat::Json,
                read_only: true,
            },
        ],
        // Sessions (`sessions/`) and the key store Pi writes (`auth.json`
        // is written in `.pi/agent` itself).
        state_dirs: vec![".pi/agent", ".pi/agent/sessions"],
        // What Pi runs or obeys on start: extensions (TypeScript it
        // executes), skills, prompt templates, themes, installed packages
        // (`npm/`, `git/`), global instructions and the system prompt.
        protected_home: vec![
            ".pi/agent/extensions/",
            ".pi/agent/skills/",
            ".pi/agent/prompts/",
            ".pi/agent/themes/",
            ".pi/agent/npm/",
            ".pi/agent/git/",
            ".pi/agent/AGENTS.md",
            ".pi/agent/SYSTEM.md",
            ".pi/agent/keybindings.json",
        ],
        // The project's `.pi/`: `extensions/*.ts` run on the next start
        // (on the host when a person runs `pi` there), `settings.json`
        // installs packages, and skills, prompts and `SYSTEM.md` steer.
        protected_workdir: vec![".pi/"],
        staged_only: Vec::new(),
        denied_hosts: vec!["pi.dev"],
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::super::claude::tests::Anthropic;
    use super::super::{EnvValue, render};
    use super::preset;

    #[test]
    fn models_json_points_the_builtin_anthropic_provider_at_the_relay() {
        let p = preset();
        let models = p
            .files
            .iter()
            .find(|f| f.path == ".pi/agent/models.json")
            .unwrap();
        assert!(models.read_only, "an `!cmd` apiKey would run on the host");
        let text = render(models, &Anthropic).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v["providers"]["anthropic"]["baseUrl"],
            "http://127.0.0.1:3130"
        );
        assert_eq!(p.relays[0].name, "anthropic");
        for f in &p.files {
            let v: serde_json::Value =
                serde_json::from_str(&render(f, &Anthropic).unwrap()).unwrap();
            assert!(v.is_object(), "{}", f.path);
            assert!(f.read_only, "{}", f.path);
        }
    }

    #[test]
    fn the_project_pi_dir_and_the_offline_switch_are_in_the_preset() {
        let p = preset();
        assert!(p.protected_workdir.contains(&".pi/"));
        assert!(p.protected_home.contains(&".pi/agent/extensions/"));
        assert!(
            p.env
                .iter()
                .any(|(k, v)| *k == "PI_OFFLINE" && *v == EnvValue::Literal("1"))
        );
        assert!(
            p.env
                .iter()
                .any(|(k, v)| *k == "ANTHROPIC_API_KEY" && *v == EnvValue::Placeholder("anthropic"))
        );
    }
}
