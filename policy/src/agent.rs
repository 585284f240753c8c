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
use palisade_schema::host_policy::{
    CredentialKind, HostPolicy, Origin, Relay, RelayCredential, RelayKind, RelayLimits, RelayPreset,
};

mod claude;
mod codex;
mod opencode;
mod pi;
#[cfg(test)]
mod tests;

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
    /// `{cwd}`, each replaced by [`render`]; `{{` and `}}` are literal
    /// braces, and so is any brace that does not start such a name (a
    /// JSON object's), but an unknown `{name}` is an error.
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
    /// agent's project config: `.claude/`, `.mcp.json`, `.pi/`); a name
    /// ending in `/` is a directory, created as an empty read-only
    /// directory when absent (a file there would make the agent's read of
    /// a config file under it fail with ENOTDIR instead of ENOENT).
    pub protected_workdir: Vec<&'static str>,
    /// Project config names the agent must write at start (OpenCode writes
    /// `.opencode/.gitignore` and exits when it cannot), so they cannot be
    /// read-only inside. Only staged writes keep them off the host (the
    /// commit filter refuses them), so the session refuses direct writes
    /// for such an agent.
    pub staged_only: Vec<&'static str>,
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

/// Merge `agent`'s preset into `policy`: a preset only adds, what the
/// policy says wins.
///
/// - Each preset relay is added unless the policy has a relay of the same
///   name, which then stands for it (the preset's environment and
///   templates point at the policy's relay).
/// - The preset's environment goes into the merged policy where the
///   session already applies it: relay URLs and placeholders into the
///   relay's `worker_env`, literals into `[worker.env] set`; a variable the
///   policy sets (either way) is left as the policy has it. `Home` and
///   `Cwd` stay in [`AgentPlan::env`] for the session to resolve.
///
/// Refused: a relay (the policy's or the preset's) whose credential kind
/// the agent cannot use ([`AgentError::Credential`]), and a preset
/// environment value naming a relay the preset does not have.
pub fn plan(policy: &HostPolicy, agent: AgentName) -> Result<AgentPlan, AgentError> {
    merge(policy, preset(agent))
}

/// [`plan`] with the preset given.
fn merge(policy: &HostPolicy, preset: AgentPreset) -> Result<AgentPlan, AgentError> {
    let agent = preset.name;
    let mut merged = policy.clone();
    for r in &preset.relays {
        if let Some(own) = merged.egress.relays.iter().find(|x| x.name == r.name) {
            check_credential(agent, r, own.credential.kind)?;
        } else {
            let built = preset_relay(r)?;
            merged.egress.relays.push(built);
        }
    }
    let mut env = Vec::new();
    for (name, value) in &preset.env {
        if sets_env(&merged, name) {
            continue;
        }
        apply_env(&mut merged, &preset, name, *value)?;
        env.push((*name, *value));
    }
    Ok(AgentPlan {
        preset,
        policy: merged,
        env,
    })
}

/// Whether the policy sets `name` for the worker already (`[worker.env]
/// set` or a relay's `worker_env`).
fn sets_env(policy: &HostPolicy, name: &str) -> bool {
    policy.worker.env.set.contains_key(name)
        || policy
            .egress
            .relays
            .iter()
            .any(|r| r.worker_env.contains_key(name))
}

/// Puts one preset variable into the merged policy.
fn apply_env(
    policy: &mut HostPolicy,
    preset: &AgentPreset,
    name: &str,
    value: EnvValue,
) -> Result<(), AgentError> {
    let (relay, word) = match value {
        EnvValue::Literal(v) => {
            policy.worker.env.set.insert(name.to_owned(), v.to_owned());
            return Ok(());
        }
        EnvValue::RelayUrl(r) => (r, "relay"),
        EnvValue::Placeholder(r) => (r, "placeholder"),
        EnvValue::Home | EnvValue::Cwd => return Ok(()),
    };
    if !preset.relays.iter().any(|p| p.name == relay) {
        return Err(AgentError::Template {
            path: "env",
            message: format!("`{name}` names relay `{relay}`, which the preset does not have"),
        });
    }
    let Some(r) = policy.egress.relays.iter_mut().find(|r| r.name == relay) else {
        return Err(AgentError::Template {
            path: "env",
            message: format!("`{name}` names relay `{relay}`, which the plan does not have"),
        });
    };
    r.worker_env.insert(name.to_owned(), word.to_owned());
    Ok(())
}

/// Refuses a credential kind the agent cannot use through `relay`.
fn check_credential(
    agent: AgentName,
    relay: &PresetRelay,
    kind: CredentialKind,
) -> Result<(), AgentError> {
    if relay.credentials.contains(&kind) {
        return Ok(());
    }
    let kinds: Vec<&str> = relay.credentials.iter().map(|k| k.as_str()).collect();
    Err(AgentError::Credential {
        relay: relay.name.to_owned(),
        agent: agent.as_str(),
        kind: kind.as_str(),
        instead: format!(
            "use `kind = \"{}\"` in `[[egress.relay]] name = \"{}\"` credential (the kinds it can use: {})",
            kinds.first().copied().unwrap_or("api_key"),
            relay.name,
            kinds.join(", ")
        ),
    })
}

/// The schema relay of a preset relay: its provider preset's routes, its
/// default origin and API-key credential.
fn preset_relay(r: &PresetRelay) -> Result<Relay, AgentError> {
    let origin = Origin::parse(r.origin).map_err(|e| AgentError::Template {
        path: "relays",
        message: format!("relay `{}` origin: {e}", r.name),
    })?;
    let (header, from_env, prefix) = r.api_key;
    Ok(Relay {
        name: r.name.to_owned(),
        provider: r.provider.to_owned(),
        origin,
        routes: r.preset.routes(),
        credential: RelayCredential {
            header: header.to_owned(),
            from_env: from_env.to_owned(),
            prefix: prefix.to_owned(),
            username: None,
            kind: CredentialKind::ApiKey,
            from_file: None,
            token_url: None,
        },
        worker_env: std::collections::BTreeMap::new(),
        limits: RelayLimits::default(),
        kind: RelayKind::Http,
        preset: Some(r.preset),
        repos: Vec::new(),
    })
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

/// Render one preset file: each `{…}` of [`PresetFile::template`] replaced
/// by its value escaped for [`PresetFile::format`]; `{{` and `}}` are
/// literal braces, as is a brace that starts no name. An unknown name, an
/// unknown relay, or a value the format cannot hold is
/// [`AgentError::Template`].
pub fn render(file: &PresetFile, values: &dyn TemplateValues) -> Result<String, AgentError> {
    let err = |message: String| AgentError::Template {
        path: file.path,
        message,
    };
    let t = file.template;
    let mut out = String::with_capacity(t.len());
    let mut rest = t;
    while let Some(i) = rest.find(['{', '}']) {
        let (before, at) = rest.split_at(i);
        out.push_str(before);
        if let Some(r) = at.strip_prefix("{{") {
            out.push('{');
            rest = r;
        } else if let Some(r) = at.strip_prefix("}}") {
            out.push('}');
            rest = r;
        } else if let Some((name, after)) = at.strip_prefix('{').and_then(name_at) {
            let value = lookup(name, values).map_err(err)?;
            out.push_str(
                &escape(&value, file.format).map_err(|m| err(format!("`{{{name}}}`: {m}")))?,
            );
            rest = after;
        } else {
            // A brace that does not start a name (JSON's own) is literal.
            out.push_str(at.get(..1).unwrap_or(""));
            rest = at.get(1..).unwrap_or("");
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The name at the start of `s` (`home`, `relay_url:NAME`: lowercase
/// letters and `_`, then optionally `:` and a relay name) up to its `}`,
/// and the text after the `}`.
fn name_at(s: &str) -> Option<(&str, &str)> {
    let close = s.find('}')?;
    let (name, after) = s.split_at(close);
    let (word, arg) = match name.split_once(':') {
        Some((w, a)) => (w, Some(a)),
        None => (name, None),
    };
    let word_ok = !word.is_empty() && word.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    let arg_ok = arg.is_none_or(|a| {
        !a.is_empty()
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    });
    (word_ok && arg_ok).then(|| (name, after.get(1..).unwrap_or("")))
}

/// The value of one template name.
fn lookup(name: &str, values: &dyn TemplateValues) -> Result<String, String> {
    let relay = |r: &str, v: Option<String>| v.ok_or_else(|| format!("no relay `{r}` in the plan"));
    match name.split_once(':') {
        None if name == "home" => Ok(values.home()),
        None if name == "cwd" => Ok(values.cwd()),
        Some(("relay_url", r)) => relay(r, values.relay_url(r)),
        Some(("placeholder", r)) => relay(r, values.placeholder(r)),
        Some(("placeholder_tail", r)) => relay(r, values.placeholder(r)).map(|p| {
            let n = p.chars().count();
            p.chars().skip(n.saturating_sub(20)).collect()
        }),
        _ => Err(format!("unknown template value `{{{name}}}`")),
    }
}

/// `value` escaped for `format` (the contents of a string literal).
fn escape(value: &str, format: FileFormat) -> Result<String, String> {
    match format {
        FileFormat::Json => {
            let quoted = serde_json::to_string(value).map_err(|e| e.to_string())?;
            Ok(quoted
                .get(1..quoted.len().saturating_sub(1))
                .unwrap_or("")
                .to_owned())
        }
        FileFormat::Toml => Ok(toml_basic(value)),
        FileFormat::Text => {
            if value.contains(['\n', '\r']) {
                Err("a value with a newline cannot go into a text file".to_owned())
            } else {
                Ok(value.to_owned())
            }
        }
    }
}

/// The contents of a TOML basic string holding `value`.
fn toml_basic(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}
