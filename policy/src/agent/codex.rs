//! The `codex` preset: Codex CLI 0.171.0 (`@openai/codex`, a Rust binary
//! behind a Node launcher) on the OpenAI Responses API, run as
//! `codex exec` with `--sandbox danger-full-access`: palisade is the
//! boundary (Codex's own `workspace-write` sandbox needs user namespaces
//! inside the sandbox, see docs/agents.md, "Codex CLI").
//!
//! Where each value comes from: the config keys are Codex's documented
//! `config.toml` settings (`docs/config.md` of openai/codex:
//! `model_provider`, `[model_providers.<id>] base_url / env_key /
//! wire_api`, `check_for_update_on_startup`, `[analytics] enabled`,
//! `[features]`), and appear in the binary
//! (`@openai/codex-linux-x64/vendor/*/bin/codex`). `CODEX_HOME` defaults
//! to `$HOME/.codex`, the state directory's. The hosts were seen denied in
//! the journal of a governed run (`cli/tests/agents_codex.rs`) or found in
//! the binary.

use super::{AgentName, AgentPreset, EnvValue, FileFormat, PresetFile, PresetRelay, TestedWith};
use palisade_schema::host_policy::{CredentialKind, RelayPreset};

/// `~/.codex/config.toml`: a model provider that is the relay (the
/// Responses API under `/v1`, the placeholder from `OPENAI_API_KEY`),
/// no update check, no analytics, and no plugin sync (`features.plugins`:
/// without it Codex fetches its curated plugins from chatgpt.com and
/// github.com at start). Read-only: `notify` and `[mcp_servers]` here run
/// commands, and `model_providers` says where prompts go.
pub(super) const CONFIG_TOML: &str = r#"# Written by palisade (agent preset `codex`); read-only inside.
model_provider = "palisade-openai"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false

[model_providers.palisade-openai]
name = "OpenAI through palisade"
base_url = "{relay_url:openai}/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
"#;

pub(super) fn preset() -> AgentPreset {
    AgentPreset {
        name: AgentName::Codex,
        tested: TestedWith {
            package: "@openai/codex",
            version: "0.171.0",
            bin: "codex",
        },
        relays: vec![PresetRelay {
            name: "openai",
            provider: "openai",
            preset: RelayPreset::OpenAi,
            origin: "https://api.openai.com",
            // A ChatGPT subscription talks to chatgpt.com/backend-api/codex
            // with a JWT from auth.json: not in this preset yet.
            credentials: &[CredentialKind::ApiKey],
            api_key: ("authorization", "OPENAI_API_KEY", "Bearer "),
        }],
        env: vec![
            // `env_key` of the provider above: the relay's placeholder.
            ("OPENAI_API_KEY", EnvValue::Placeholder("openai")),
        ],
        files: vec![PresetFile {
            path: ".codex/config.toml",
            template: CONFIG_TOML,
            format: FileFormat::Toml,
            read_only: true,
        }],
        // Sessions, sqlite state, shell snapshots, skills it unpacks.
        state_dirs: vec![".codex"],
        // What Codex executes or obeys on its next start: hooks, exec
        // policy rules, global instructions and sub-agents, managed
        // requirements.
        protected_home: vec![
            ".codex/hooks.json",
            ".codex/hooks/",
            ".codex/rules/",
            ".codex/agents/",
            ".codex/AGENTS.md",
            ".codex/AGENTS.override.md",
            ".codex/requirements.toml",
            ".codex/managed_config.toml",
            // User-scope skills and plugins (the HOME counterpart of the
            // project's `.agents/`).
            ".agents/",
        ],
        // The project's Codex config (`.codex/`: config.toml, hooks, rules,
        // run once the project is trusted) and its skills and plugins
        // (`.agents/skills`, `.agents/plugins`). `AGENTS.md` is
        // instructions, not code: list it in `taint.steering_paths`.
        protected_workdir: vec![".codex/", ".agents/"],
        staged_only: Vec::new(),
        denied_hosts: vec![
            // The relay is the only way to the Responses API.
            "api.openai.com",
            // Plugin sync (chatgpt.com/backend-api/plugins, the curated
            // repository on github.com), seen without `features.plugins`.
            "chatgpt.com",
            "github.com",
            "api.github.com",
            // Analytics and ChatGPT login/refresh, in the binary.
            "ab.chatgpt.com",
            "auth.openai.com",
        ],
    }
}

#[cfg(test)]
#[path = "oai_tests.rs"]
mod tests;
