//! The `opencode` preset: OpenCode 1.18.33 (`opencode-ai`, a Bun-compiled
//! executable) with its `openai` provider, which speaks the Responses API
//! (`POST /v1/responses`, the AI SDK's OpenAI client), run as
//! `opencode run`.
//!
//! Where each value comes from: the config keys are OpenCode's documented
//! `opencode.json` settings (opencode.ai/docs/config: `autoupdate`,
//! `share`, `provider.<id>.options.baseURL`) and the `OPENCODE_DISABLE_*`
//! switches its docs list (opencode.ai/docs/cli, environment variables);
//! all appear in the executable (`opencode-ai/bin/opencode.exe`). The
//! global config is `$XDG_CONFIG_HOME/opencode/opencode.json`, i.e. under
//! the state directory's `.config`. The hosts were seen denied in the
//! journal of a governed run (`cli/tests/agents_opencode.rs`) or found in
//! the executable.

use super::{AgentName, AgentPreset, EnvValue, FileFormat, PresetFile, PresetRelay, TestedWith};
use palisade_schema::host_policy::{CredentialKind, RelayPreset};

/// `~/.config/opencode/opencode.json`: the `openai` provider at the relay
/// (its key from `OPENAI_API_KEY`, the placeholder), no auto-update, no
/// sharing (`{{`/`}}` are the JSON's braces). Read-only: `mcp` entries run commands, `plugin` loads code,
/// `provider` says where prompts go.
pub(super) const OPENCODE_JSON: &str = r#"{{
  "$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "provider": {{
    "openai": {{
      "options": {{ "baseURL": "{relay_url:openai}/v1" }}
    }}
  }}
}}
"#;

const DIR: &str = ".config/opencode";

pub(super) fn preset() -> AgentPreset {
    AgentPreset {
        name: AgentName::OpenCode,
        tested: TestedWith {
            package: "opencode-ai",
            version: "1.18.33",
            bin: "opencode",
        },
        relays: vec![PresetRelay {
            name: "openai",
            provider: "openai",
            preset: RelayPreset::OpenAi,
            origin: "https://api.openai.com",
            credentials: &[CredentialKind::ApiKey],
            api_key: ("authorization", "OPENAI_API_KEY", "Bearer "),
        }],
        env: vec![
            // Read by the AI SDK's OpenAI provider: the placeholder.
            ("OPENAI_API_KEY", EnvValue::Placeholder("openai")),
            ("OPENCODE_DISABLE_AUTOUPDATE", EnvValue::Literal("1")),
            // Else the model list comes from models.opencode.ai at start.
            ("OPENCODE_DISABLE_MODELS_FETCH", EnvValue::Literal("1")),
            ("OPENCODE_DISABLE_SHARE", EnvValue::Literal("1")),
            ("OPENCODE_DISABLE_LSP_DOWNLOAD", EnvValue::Literal("1")),
            ("OPENCODE_DISABLE_DEFAULT_PLUGINS", EnvValue::Literal("1")),
        ],
        files: vec![PresetFile {
            path: ".config/opencode/opencode.json",
            template: OPENCODE_JSON,
            format: FileFormat::Json,
            read_only: true,
        }],
        // Its database, logs, caches, locks; and the config directory,
        // where it writes package.json and node_modules itself.
        state_dirs: vec![
            ".local/share/opencode",
            ".local/state/opencode",
            ".cache/opencode",
            DIR,
        ],
        // What OpenCode loads or obeys on its next start: other config
        // files, plugins, custom tools, agents, commands, instructions.
        protected_home: vec![
            ".config/opencode/opencode.jsonc",
            ".config/opencode/config.json",
            ".config/opencode/plugin/",
            ".config/opencode/plugins/",
            ".config/opencode/tool/",
            ".config/opencode/tools/",
            ".config/opencode/agent/",
            ".config/opencode/agents/",
            ".config/opencode/command/",
            ".config/opencode/commands/",
            ".config/opencode/AGENTS.md",
            // The project names too: HOME is the working directory when
            // the session names none.
            "opencode.json",
            "opencode.jsonc",
            // Not `.opencode/`: OpenCode writes `.opencode/.gitignore` there
            // at start and exits when it cannot (see `staged_only`).
        ],
        // The project's config (`opencode.json[c]`: MCP commands, plugins,
        // providers).
        protected_workdir: vec!["opencode.json", "opencode.jsonc"],
        // `.opencode/` (plugins and tools are code it runs) cannot be
        // read-only: OpenCode writes `.opencode/.gitignore` at start and
        // exits when it cannot (seen with 1.18.33). The commit filter's
        // `tool_config` rule refuses every `.opencode/**` change, so with
        // staged writes nothing planted there reaches the host.
        staged_only: vec![".opencode/"],
        denied_hosts: vec![
            // The relay is the only way to the Responses API.
            "api.openai.com",
            // Its config directory's `npm install` (seen in every run).
            "registry.npmjs.org",
            // The model list, seen without OPENCODE_DISABLE_MODELS_FETCH.
            "models.opencode.ai",
            "models.dev",
            // Sharing, the config schema, its API, in the executable.
            "opencode.ai",
            "api.opencode.ai",
        ],
    }
}
