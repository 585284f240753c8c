//! The `claude` preset: Claude Code 2.1.197 (`@anthropic-ai/claude-code`,
//! a native executable) on the Anthropic Messages API.
//!
//! Where each value comes from: the environment variables are Claude
//! Code's documented settings (docs.claude.com, "Claude Code settings",
//! environment variables) and appear in the executable
//! (`bin/claude.exe`); the first-run state (`hasCompletedOnboarding`,
//! `customApiKeyResponses`) is what Claude Code keeps in `~/.claude.json`.
//! The hosts were seen denied in the journal of a run without the
//! switches (`cli/tests/agents_claude.rs`) or found in the executable.

use super::{AgentName, AgentPreset, EnvValue, FileFormat, PresetFile, PresetRelay, TestedWith};
use palisade_schema::host_policy::{CredentialKind, RelayPreset};

/// `~/.claude.json`: onboarding done, and the relay's placeholder key
/// approved (Claude Code remembers approved keys by their last 20
/// characters, so the placeholder must be stable for the policy and
/// relay: `{placeholder_tail:…}`). Claude Code rewrites this file while it
/// runs, so it stays writable; it holds no hook or command.
const CLAUDE_JSON: &str = r#"{{
  "hasCompletedOnboarding": true,
  "lastOnboardingVersion": "2.1.197",
  "bypassPermissionsModeAccepted": false,
  "autoUpdates": false,
  "customApiKeyResponses": {{
    "approved": ["{placeholder_tail:anthropic}"],
    "rejected": []
  }}
}}
"#;

pub(super) fn preset() -> AgentPreset {
    AgentPreset {
        name: AgentName::Claude,
        tested: TestedWith {
            package: "@anthropic-ai/claude-code",
            version: "2.1.197",
            bin: "claude",
        },
        relays: vec![PresetRelay {
            name: "anthropic",
            provider: "anthropic",
            preset: RelayPreset::Anthropic,
            origin: "https://api.anthropic.com",
            credentials: &[CredentialKind::ApiKey, CredentialKind::AnthropicOauth],
            api_key: ("x-api-key", "ANTHROPIC_API_KEY", ""),
        }],
        env: vec![
            // The relay instead of api.anthropic.com, and its placeholder.
            ("ANTHROPIC_BASE_URL", EnvValue::RelayUrl("anthropic")),
            ("ANTHROPIC_API_KEY", EnvValue::Placeholder("anthropic")),
            // Telemetry (Statsig/Datadog), error reporting, the release
            // notes and `/api/hello` checks: off together.
            (
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
                EnvValue::Literal("1"),
            ),
            ("DISABLE_TELEMETRY", EnvValue::Literal("1")),
            ("DISABLE_ERROR_REPORTING", EnvValue::Literal("1")),
            ("DISABLE_AUTOUPDATER", EnvValue::Literal("1")),
            ("DISABLE_BUG_COMMAND", EnvValue::Literal("1")),
        ],
        files: vec![PresetFile {
            path: ".claude.json",
            template: CLAUDE_JSON,
            format: FileFormat::Json,
            read_only: false,
        }],
        state_dirs: vec![".claude"],
        // Config Claude Code executes or obeys on its next start: settings
        // (hooks, permissions, `apiKeyHelper`, MCP servers), hook scripts,
        // slash commands, sub-agents, skills, plugins and memory.
        protected_home: vec![
            ".claude/settings.json",
            ".claude/settings.local.json",
            ".claude/hooks/",
            ".claude/commands/",
            ".claude/agents/",
            ".claude/skills/",
            ".claude/plugins/",
            ".claude/CLAUDE.md",
            // MCP servers of the project scope: HOME is the working
            // directory when the session names none.
            ".mcp.json",
        ],
        // The project's Claude config: `.claude/` (settings with hooks,
        // commands, agents) and `.mcp.json` (MCP servers started on the
        // next run, on the host when a person runs `claude` there).
        protected_workdir: vec![".claude/", ".mcp.json"],
        staged_only: Vec::new(),
        denied_hosts: vec![
            // `/api/hello`, `/api/claude_code/metrics`, OAuth; the relay is
            // the only way to the Messages API.
            "api.anthropic.com",
            "platform.claude.com",
            "statsig.anthropic.com",
            "http-intake.logs.us5.datadoghq.com",
            "browser-intake-us5-datadoghq.com",
            // The auto-updater's and plugin catalogue's bucket.
            "storage.googleapis.com",
        ],
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
pub(super) mod tests {
    use super::super::{EnvValue, TemplateValues, render};
    use super::preset;

    /// Values for the preset's `anthropic` relay only.
    pub(in super::super) struct Anthropic;

    impl TemplateValues for Anthropic {
        fn relay_url(&self, name: &str) -> Option<String> {
            (name == "anthropic").then(|| "http://127.0.0.1:3130".to_owned())
        }
        fn placeholder(&self, name: &str) -> Option<String> {
            (name == "anthropic")
                .then(|| "sk-ant-api03-PLACEHOLDER-0123456789abcdefghij".to_owned())
        }
        fn home(&self) -> String {
            "/tmp/home".to_owned()
        }
        fn cwd(&self) -> String {
            "/work".to_owned()
        }
    }

    #[test]
    fn claude_json_renders_with_the_placeholders_tail_approved() {
        let p = preset();
        let relays: Vec<&str> = p.relays.iter().map(|r| r.name).collect();
        let f = p.files.iter().find(|f| f.path == ".claude.json").unwrap();
        let v: serde_json::Value = serde_json::from_str(&render(f, &Anthropic).unwrap()).unwrap();
        assert_eq!(v["hasCompletedOnboarding"], true);
        assert_eq!(
            v["customApiKeyResponses"]["approved"][0],
            "0123456789abcdefghij"
        );
        for (_, v) in &p.env {
            if let EnvValue::RelayUrl(n) | EnvValue::Placeholder(n) = v {
                assert!(relays.contains(n), "{n}");
            }
        }
    }

    #[test]
    fn the_project_config_and_the_telemetry_switches_are_in_the_preset() {
        let p = preset();
        for name in [".claude/", ".mcp.json"] {
            assert!(p.protected_workdir.contains(&name), "{name}");
        }
        for var in [
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
            "DISABLE_AUTOUPDATER",
        ] {
            assert!(
                p.env
                    .iter()
                    .any(|(k, v)| *k == var && *v == EnvValue::Literal("1")),
                "{var}"
            );
        }
        for path in p.protected_home.iter().chain(&p.state_dirs) {
            assert!(
                !path.starts_with('/') && !path.split('/').any(|c| c == ".."),
                "{path}"
            );
        }
    }
}
