//! Agent presets: what a governed session adds to the host policy so that
//! a real coding agent (Claude Code, Codex CLI, OpenCode, Pi) runs as a
//! governed worker out of the box.
//!
//! A preset is data ([`AgentPreset`], one per [`AgentName`], each in its own
//! file under `agent/`): the relays of the agent's provider APIs, the
//! environment that points the agent at them and turns its telemetry and
//! auto-update off, the config files written into its state directory when
//! the session starts (from templates that know the relay URLs and
//! placeholders), the files kept read-only inside, and the hosts it
//! contacts that stay denied. [`plan`] merges a preset into a policy:
//! **a preset only adds to the policy; what the policy says wins** (a relay
//! of the same name, an environment variable the policy sets).
//!
//! Pure: no IO. `palisade-cli` writes the files and starts the relays.

pub use palisade_schema::host_policy::AgentName;
use palisade_schema::host_policy::{CredentialKind, HostPolicy, RelayPreset};

mod claude;
mod codex;
mod opencode;
mod pi;

/// The npm package an agent preset was tested with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestedWith {
    /// The npm package name (`@anthropic-ai/claude-code`).
    pub package: &'static str,
    /// The exact version tested (`2.1.197`).
    pub version: &'static str,
    /// The executable the package installs (`claude`).
    pub bin: &'static str,
}

/// A value of the worker's environment or of a config template, resolved
/// when the session starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnvValue {
    /// A fixed text.
    Literal(&'static str),
    /// The base URL of the preset relay named (`http://127.0.0.1:PORT`).
    RelayUrl(&'static str),
    /// The placeholder of the preset relay named.
    Placeholder(&'static str),
    /// The agent's state directory (its HOME inside the sandbox).
    Home,
    /// The worker's working directory.
    Cwd,
}

/// A relay the preset adds when the policy has none of the same name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PresetRelay {
    /// The relay name (`anthropic`); a policy relay of this name replaces
    /// this one, and the preset's environment and templates then point at
    /// the policy's.
    pub name: &'static str,
    /// The routing provider (`anthropic`).
    pub provider: &'static str,
    /// The routes, from the schema's provider presets.
    pub preset: RelayPreset,
    /// The default upstream origin (`https://api.anthropic.com`).
    pub origin: &'static str,
    /// The credential kinds this agent can use through this relay; any
    /// other kind is refused before launch with [`AgentError::Credential`].
    pub credentials: &'static [CredentialKind],
    /// The default API-key credential: `(header, host variable, prefix)`.
    pub api_key: (&'static str, &'static str, &'static str),
}

/// What a config file of the preset is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileFormat {
    /// JSON: template values are inserted as JSON string contents.
    Json,
    /// TOML: template values are inserted as TOML basic-string contents.
    Toml,
    /// Plain text: values inserted as they are (refused if they hold a
    /// newline).
    Text,
}

/// A config file written into the agent's state directory when the
/// session starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PresetFile {
    /// The path relative to the state directory (`.pi/agent/models.json`).
    pub path: &'static str,
    /// The template: text with `{relay_url:NAME}`, `{placeholder:NAME}`,
    /// `{placeholder_tail:NAME}` (its last 20 characters), `{home}` and
    /// `{cwd}`, each replaced by [`render`]; `{{` and `}}` are literal braces.
    pub template: &'static str,
    /// How values are escaped.
    pub format: FileFormat,
    /// Whether the file stays read-only for the worker (config and hooks).
    pub read_only: bool,
}

/// One agent's preset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentPreset {
    /// The agent.
    pub name: AgentName,
    /// The npm package and version it was tested with.
    pub tested: TestedWith,
    /// The relays of its provider APIs.
    pub relays: Vec<PresetRelay>,
    /// The worker's environment (a variable the policy sets wins).
    pub env: Vec<(&'static str, EnvValue)>,
    /// Config files written into the state directory at session start.
    pub files: Vec<PresetFile>,
    /// Directories under the state directory the agent writes (created
    /// writable).
    pub state_dirs: Vec<&'static str>,
    /// Paths relative to the state directory kept read-only inside (config
    /// and hook files; created as read-only placeholders when absent).
    pub protected_home: Vec<&'static str>,
    /// Names relative to each writable root kept read-only inside (the
    /// agent's project config: `.claude`, `.mcp.json`, `.pi/extensions`).
    pub protected_workdir: Vec<&'static str>,
    /// Hosts the agent contacts that stay denied (telemetry, update
    /// checks, OAuth refresh): documented, and recorded when tried.
    pub denied_hosts: Vec<&'static str>,
}

/// The preset of `agent`.
pub fn preset(agent: AgentName) -> AgentPreset {
    match agent {
        AgentName::Claude => claude::preset(),
        AgentName::Codex => codex::preset(),
        AgentName::OpenCode => opencode::preset(),
        AgentName::Pi => pi::preset(),
    }
}

/// Why a preset cannot be applied to a policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// A relay's credential kind is one the agent cannot use; the message
    /// says what to use instead.
    #[error("relay `{relay}`: {agent} cannot use a `{kind}` credential; {instead}")]
    Credential {
        /// The relay.
        relay: String,
        /// The agent.
        agent: &'static str,
        /// The kind refused.
        kind: &'static str,
        /// What to use instead.
        instead: String,
    },
    /// A template names a relay the plan does not have, or a value that
    /// cannot be written in the file's format.
    #[error("agent preset file `{path}`: {message}")]
    Template {
        /// The file.
        path: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// A preset merged into a policy: what the session does.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgentPlan {
    /// The preset.
    pub preset: AgentPreset,
    /// The policy with the preset's relays added (the policy's own relays
    /// of the same name kept as they are).
    pub policy: HostPolicy,
    /// The environment the preset adds, names the policy sets removed.
    pub env: Vec<(&'static str, EnvValue)>,
}

/// Merge `agent`'s preset into `policy`. CONTRACT(i19-presets): the
/// machinery work implements it; the data helpers fill the presets.
pub fn plan(policy: &HostPolicy, agent: AgentName) -> Result<AgentPlan, AgentError> {
    let _ = (policy, agent);
    unimplemented!("CONTRACT(i19-presets)")
}

/// The values a template may name, resolved by the session.
pub trait TemplateValues {
    /// The base URL of relay `name`, if the plan has it.
    fn relay_url(&self, name: &str) -> Option<String>;
    /// The placeholder of relay `name`, if the plan has it.
    fn placeholder(&self, name: &str) -> Option<String>;
    /// The state directory (HOME inside).
    fn home(&self) -> String;
    /// The working directory inside.
    fn cwd(&self) -> String;
}

/// Render one preset file. CONTRACT(i19-presets).
pub fn render(file: &PresetFile, values: &dyn TemplateValues) -> Result<String, AgentError> {
    let _ = (file, values);
    unimplemented!("CONTRACT(i19-presets)")
}
