//! The host policy file `palisade.toml`: a strict parser and its typed model.
//!
//! The host policy says what a worker may touch: its filesystem view and
//! limits (`[worker]`), which hosts it may reach and through which relays
//! (`[egress]`), which outward actions taken in the user's name need a human
//! (`[outward]`), what taints a session and what a tainted session may still
//! do (`[taint]`), and which providers may receive which files
//! (`[[routing]]`). Every key is documented in `docs/policy.md`.
//!
//! [`parse`] reads the text and returns the model with its warnings, or
//! every [`Diagnostic`]: unknown keys, wrong types and invalid values are
//! errors with the authored path, line and column; risky but valid choices
//! are warnings (lints). A policy with any error is refused: [`parse`]
//! returns no model for it.
//!
//! This module does no IO: the caller reads the file.

mod host_pattern;
mod reader;
mod values;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;

pub use host_pattern::{HostError, HostPattern, RequestHost, split_authority};
use reader::{Cx, Table};
pub use values::{
    Cidr, Origin, PathGlob, RelayRoute, RouteOutward, parse_duration, parse_size, placeholder_name,
};

use crate::{Diagnostic, Diagnostics, Parsed, Path};

/// Largest policy file accepted, in bytes.
pub const MAX_POLICY_BYTES: usize = 1 << 20;

/// A parsed, validated `palisade.toml`.
///
/// [`HostPolicy::default()`] is exactly what an empty file parses to (every
/// section's `Default` is its empty table), so a policy built in code by
/// changing fields of the default is never looser than the file would be.
///
/// Outside this crate it is built from [`Default`] or [`parse`], never by
/// a struct literal (it is `#[non_exhaustive]`):
///
/// ```compile_fail,E0639
/// let p = palisade_schema::host_policy::HostPolicy { ..Default::default() };
/// ```
///
/// ```rust
/// let mut p = palisade_schema::host_policy::HostPolicy::default();
/// p.egress.allow.push(palisade_schema::host_policy::HostPattern::parse("api.github.com:443").map_err(|e| format!("{e:?}"))?);
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostPolicy {
    /// `[worker]`: profile, filesystem view, environment and limits.
    pub worker: Worker,
    /// `[egress]`: host rules, address exceptions, limits and relays.
    pub egress: Egress,
    /// `[outward]`: approval rules for actions taken in the user's name.
    pub outward: Outward,
    /// `[taint]`: what taints a session and what a tainted session may do.
    pub taint: Taint,
    /// `[[routing]]`: which providers may receive which paths.
    pub routing: Vec<RoutingRule>,
    /// `[profiles.<name>]`: custom sandbox profiles, each a built-in base
    /// plus refinements that can only tighten it.
    pub profiles: BTreeMap<String, CustomProfile>,
    /// `[evidence]`: where the journal is shipped off the host.
    pub evidence: Evidence,
}

/// `[evidence]`: shipping the journal to the operator's log pipeline
/// (`docs/journal.md`). The URLs come from the host policy (or the CLI),
/// never from the worker.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Evidence {
    /// `ship`: collector URLs, `relp://HOST:PORT`, `syslog+tcp://HOST:PORT`
    /// or `syslog+tls://HOST:PORT` (the latter only with `tls_ca`).
    pub ship: Vec<String>,
    /// `on_backlog`: what happens once a shipper lags more than
    /// `ship_buffer` records.
    pub on_backlog: OnBacklog,
    /// `ship_buffer`: how many sealed records a shipper may lag behind
    /// the journal before the gap is recorded (`ship_gap`).
    pub ship_buffer: u64,
    /// `tls_ca`: the PEM CA certificates that verify a `syslog+tls://`
    /// collector (absolute path on the host). The only trust anchors:
    /// there are no public roots. Required by any `syslog+tls://` URL.
    pub tls_ca: Option<String>,
    /// `tls_cert`: the PEM client certificate chain presented to a
    /// `syslog+tls://` collector; only together with `tls_key`.
    pub tls_cert: Option<String>,
    /// `tls_key`: the PEM private key of `tls_cert`, a file other users
    /// cannot read (checked when shipping starts).
    pub tls_key: Option<String>,
}

/// The default `evidence.ship_buffer`.
pub const DEFAULT_SHIP_BUFFER: u64 = 10_000;

impl Default for Evidence {
    fn default() -> Self {
        Self {
            ship: Vec::new(),
            on_backlog: OnBacklog::Record,
            ship_buffer: DEFAULT_SHIP_BUFFER,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// `evidence.on_backlog`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnBacklog {
    /// Record the gap (`ship_gap`) and keep serving.
    #[default]
    Record,
    /// Record the gap and refuse new connections until the shipper
    /// catches up.
    Refuse,
}

/// Checks a collector URL's form: `relp://HOST:PORT`,
/// `syslog+tcp://HOST:PORT` or `syslog+tls://HOST:PORT`. (Whether a TLS
/// URL has its CA is [`Evidence::tls_ca`]'s business.)
///
/// ```
/// use palisade_schema::host_policy::check_ship_url;
/// assert!(check_ship_url("relp://127.0.0.1:2514").is_ok());
/// assert!(check_ship_url("syslog+tls://logs:6514").is_ok());
/// assert!(check_ship_url("https://logs:443").is_err());
/// ```
///
/// # Errors
/// The reason, for a diagnostic or a CLI error.
pub fn check_ship_url(url: &str) -> Result<(), String> {
    let Some(addr) = url
        .strip_prefix("relp://")
        .or_else(|| url.strip_prefix("syslog+tcp://"))
        .or_else(|| url.strip_prefix("syslog+tls://"))
    else {
        return Err(format!(
            "`{url}`: expected relp://HOST:PORT, syslog+tcp://HOST:PORT or syslog+tls://HOST:PORT"
        ));
    };
    let port_ok = addr
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
    if !port_ok || addr.contains('/') || addr.contains('@') {
        return Err(format!("`{url}`: expected HOST:PORT after the scheme"));
    }
    Ok(())
}

/// `[profiles.<name>]`: a custom sandbox profile. It starts from a built-in
/// `base` and may only add to it: more read-only binds, more masks, more
/// writable roots, lower limits, no network where the base has the proxy.
/// Nothing here can turn off a layer (namespaces, Landlock, seccomp,
/// capabilities) or remove a built-in mask; keys that would are refused
/// with `weakens_base`.
///
/// Deliberately not `#[non_exhaustive]`: the code that applies it to the
/// sandbox destructures it field by field, so a key added here fails to
/// compile there until it is applied, instead of being parsed and silently
/// ignored. A new field is a breaking change on purpose.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CustomProfile {
    /// The built-in profile it refines.
    pub base: Profile,
    /// Extra absolute paths bound read-only.
    pub read_only: Vec<String>,
    /// Extra absolute paths hidden behind an empty read-only mask.
    pub masks: Vec<String>,
    /// Extra absolute paths bound writable.
    pub writable: Vec<String>,
    /// `network = "none"`: no bridge at all, even where the base has the
    /// proxy. `None`: the base's network.
    pub network: Option<ProfileNetwork>,
    /// Resource limits; each may only lower the base's.
    pub limits: ProfileLimits,
    /// `nested_sandbox = true`: permit what a provider's own sandbox
    /// (bubblewrap, sandbox-runtime) needs inside: user-namespace creation
    /// with the rest of seccomp kept, `SOCK_SEQPACKET` socketpairs, and
    /// Unix sockets confined to the worker's own `/tmp`. Wider kernel attack
    /// surface; off by default.
    pub nested_sandbox: bool,
}

/// `network` of a custom profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProfileNetwork {
    /// Loopback only, no bridge.
    None,
    /// Loopback plus the proxy and relay bridges (not allowed on `strict`).
    Proxy,
}

/// `[profiles.<name>.limits]`: resource limits (soft = hard).
///
/// Deliberately not `#[non_exhaustive]`: the code that applies it to the
/// sandbox destructures it field by field, so a key added here fails to
/// compile there until it is applied, instead of being parsed and silently
/// ignored. A new field is a breaking change on purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfileLimits {
    /// `RLIMIT_AS` in bytes.
    pub address_space: Option<u64>,
    /// `RLIMIT_NPROC`.
    pub processes: Option<u64>,
    /// `RLIMIT_FSIZE` in bytes.
    pub file_size: Option<u64>,
    /// `RLIMIT_NOFILE`.
    pub open_files: Option<u64>,
    /// `RLIMIT_CPU` in seconds.
    pub cpu: Option<u64>,
}

/// Keys that would weaken a base profile; refused with `weakens_base`.
const WEAKENING_KEYS: &[&str] = &[
    "landlock",
    "seccomp",
    "namespaces",
    "capabilities",
    "no_new_privs",
    "unmask",
    "root",
    "socket_policy",
    "allowed_sockets",
    "dangerously_disable",
    "env_allow",
];

/// `[worker]`.
///
/// Deliberately not `#[non_exhaustive]`: the code that applies it to the
/// sandbox destructures it field by field, so a key added here fails to
/// compile there until it is applied, instead of being parsed and silently
/// ignored. A new field is a breaking change on purpose.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Worker {
    /// The base of the sandbox profile: the built-in one named, or the
    /// `base` of the custom one named (see [`Worker::custom_profile`]).
    pub profile: Profile,
    /// The custom profile (`[profiles.<name>]`) `profile` names, if any.
    pub custom_profile: Option<String>,
    /// Working directory inside the sandbox; relative paths in the policy are
    /// taken relative to it.
    pub cwd: Option<String>,
    /// Absolute paths the worker may write.
    pub writable: Vec<String>,
    /// Absolute paths the worker may read but not write.
    pub read_only: Vec<String>,
    /// Absolute paths hidden from the worker, on top of the built-in masks.
    pub masks: Vec<String>,
    /// Environment passed to and set for the worker.
    pub env: WorkerEnv,
    /// Resource limits.
    pub limits: WorkerLimits,
    /// How the writable roots reach the host (`writes`).
    pub writes: Writes,
    /// The commit filter's additions (`[worker.commit]`).
    pub commit: WorkerCommit,
    /// `agent = "claude" | "codex" | "opencode" | "pi"`: the agent preset
    /// the session adds to this policy (relays, environment, config files,
    /// state directory, protected files); what the policy says wins.
    pub agent: Option<AgentName>,
    /// `agent_state = "fresh" | "persistent"`: the agent's state directory
    /// (its HOME) is fresh for every session (the default), or kept per
    /// policy under the launching user's state directory.
    pub agent_state: AgentState,
}

/// `[worker] agent`: a coding agent palisade has a preset for.
///
/// Deliberately not `#[non_exhaustive]`: the preset table matches it
/// exhaustively, so a new agent fails to compile there until it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AgentName {
    /// Claude Code (`@anthropic-ai/claude-code`).
    Claude,
    /// Codex CLI (`@openai/codex`).
    Codex,
    /// OpenCode (`opencode-ai`).
    OpenCode,
    /// The Pi coding agent (`@mariozechner/pi-coding-agent`).
    Pi,
}

impl AgentName {
    /// Every agent, in documentation order.
    pub const ALL: [AgentName; 4] = [Self::Claude, Self::Codex, Self::OpenCode, Self::Pi];

    /// The agent named `name` in the policy file or on the command line.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == name)
    }

    /// The name used in the policy file and by `--agent`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Claude => "claude",
            Self::Codex => "codex",
            Self::OpenCode => "opencode",
            Self::Pi => "pi",
        }
    }
}

/// `[worker] agent_state`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AgentState {
    /// A fresh, seeded state directory for every session.
    #[default]
    Fresh,
    /// One state directory per policy and agent, kept between sessions
    /// under the launching user's state directory.
    Persistent,
}

impl AgentState {
    /// The name used in the policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fresh => "fresh",
            Self::Persistent => "persistent",
        }
    }
}

/// `[worker] writes`: how the worker's writes reach the host.
///
/// Deliberately not `#[non_exhaustive]`: the sandbox matches it
/// exhaustively, so a new mode fails to compile there until it is applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Writes {
    /// `"staged"`: each writable root is seen through an overlay and its
    /// changes reach the host only through the commit filter.
    #[default]
    Staged,
    /// `"direct"`: the writable roots are bound as they are (the weaker
    /// mode, reported as a downgrade).
    Direct,
}

impl Writes {
    /// The name used in the policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Staged => "staged",
            Self::Direct => "direct",
        }
    }
}

/// `[worker.commit]`: what the commit filter refuses on top of its
/// built-in list (a policy can only add).
///
/// Deliberately not `#[non_exhaustive]`: the code that applies it
/// destructures it field by field, so a key added here fails to compile
/// there until it is applied, instead of being parsed and silently
/// ignored. A new field is a breaking change on purpose.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerCommit {
    /// Globs relative to each writable root; a matching path and
    /// everything below it is refused (rule `policy_refused`).
    pub refuse: Vec<PathGlob>,
}

/// The worker's sandbox profile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Profile {
    /// Writable project, egress only through the proxy and relays.
    #[default]
    Governed,
    /// No writes outside scratch, egress only through relays.
    Strict,
    /// Wider filesystem access for an operator's maintenance run.
    Maintenance,
}

impl Worker {
    /// The name of the worker's profile: the custom one, else the built-in.
    pub fn profile_name(&self) -> &str {
        self.custom_profile
            .as_deref()
            .unwrap_or_else(|| self.profile.as_str())
    }
}

impl Profile {
    /// The built-in profile named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "governed" => Some(Self::Governed),
            "strict" => Some(Self::Strict),
            "maintenance" => Some(Self::Maintenance),
            _ => None,
        }
    }

    /// The name used in the policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Governed => "governed",
            Self::Strict => "strict",
            Self::Maintenance => "maintenance",
        }
    }
}

/// `[worker.env]`.
///
/// Deliberately not `#[non_exhaustive]`: the code that applies it to the
/// sandbox destructures it field by field, so a key added here fails to
/// compile there until it is applied, instead of being parsed and silently
/// ignored. A new field is a breaking change on purpose.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerEnv {
    /// Host variables passed through by name.
    pub pass: Vec<String>,
    /// Variables set to fixed values.
    pub set: BTreeMap<String, String>,
}

/// `[worker.limits]`; `None` means the sandbox's built-in default.
///
/// Deliberately not `#[non_exhaustive]`: the code that applies it to the
/// sandbox destructures it field by field, so a key added here fails to
/// compile there until it is applied, instead of being parsed and silently
/// ignored. A new field is a breaking change on purpose.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerLimits {
    /// Memory in bytes: the cgroup's `memory.max`.
    pub memory: Option<u64>,
    /// Swap in bytes: the cgroup's `memory.swap.max` (needs `memory`).
    pub swap: Option<u64>,
    /// Number of processes and threads: the cgroup's `pids.max`.
    pub pids: Option<u64>,
    /// CPU bandwidth in thousandths of a CPU (`cpus = 1.5` is 1500): the
    /// cgroup's `cpu.max`.
    pub cpus: Option<u64>,
    /// CPU time in seconds.
    pub cpu: Option<u64>,
    /// Wall-clock time in seconds.
    pub wall: Option<u64>,
    /// Largest file the worker may write, in bytes.
    pub file_size: Option<u64>,
}

/// `[egress]`. Its [`Default`] is an absent (or empty) `[egress]` table:
/// no host allowed, SNI matching required.
///
/// Deliberately not `#[non_exhaustive]`: `palisade-egress` maps this section
/// onto its configuration naming every field, so a new key fails to compile
/// there until it is applied, instead of being parsed and silently ignored.
/// A new field is a breaking change on purpose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Egress {
    /// Host patterns a worker may connect to through the proxy.
    pub allow: Vec<HostPattern>,
    /// Host patterns always refused; deny beats allow.
    pub deny: Vec<HostPattern>,
    /// Address ranges let through the proxy's built-in address deny set
    /// (private, loopback, link-local, metadata …). They never allow a host
    /// by themselves: the name must still match `allow`.
    pub allow_addresses: Vec<Cidr>,
    /// Byte and connection limits.
    pub limits: EgressLimits,
    /// Host relays that inject credentials the worker never holds.
    pub relays: Vec<Relay>,
    /// Whether the proxy refuses a TLS ClientHello whose SNI differs from the
    /// CONNECT host. Default `true`.
    pub require_sni_match: bool,
    /// `[egress.provider_hosts]`: API hosts of each routing provider, added
    /// to the built-in list (`palisade_policy::route::BUILTIN_PROVIDER_HOSTS`).
    /// A session whose routing state keeps content from a provider refuses
    /// direct proxy connections to that provider's hosts.
    pub provider_hosts: BTreeMap<String, Vec<HostPattern>>,
}

impl Default for Egress {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            deny: Vec::new(),
            allow_addresses: Vec::new(),
            limits: EgressLimits::default(),
            relays: Vec::new(),
            require_sni_match: true,
            provider_hosts: BTreeMap::new(),
        }
    }
}

/// `[egress.limits]`; `None` means unlimited for that dimension.
///
/// Deliberately not `#[non_exhaustive]`: `palisade-egress` maps this section
/// onto its configuration naming every field, so a new key fails to compile
/// there until it is applied, instead of being parsed and silently ignored.
/// A new field is a breaking change on purpose.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressLimits {
    /// Bytes (both directions) per connection.
    pub bytes_per_connection: Option<u64>,
    /// Bytes (both directions) per session.
    pub bytes_per_session: Option<u64>,
    /// Connections per session.
    pub connections: Option<u64>,
    /// New connections per minute.
    pub per_minute: Option<u64>,
}

/// The built-in API hosts of the routing providers palisade knows, as host
/// pattern text: each provider name is one a `[[routing]]` rule can list,
/// and `[egress.provider_hosts]` adds to these (it never removes one).
/// A session whose routing state keeps content from a provider refuses new
/// proxy connections to that provider's hosts, as that provider's relays
/// refuse requests (`palisade_policy::route::ProviderHosts`).
///
/// Only names the host-pattern grammar can express are listed: regional
/// endpoints such as `us-central1-aiplatform.googleapis.com` (Vertex AI) or
/// `bedrock-runtime.us-east-1.amazonaws.com` (Bedrock) are not, so a policy
/// that needs them lists them in `[egress.provider_hosts]`.
pub const BUILTIN_PROVIDER_HOSTS: &[(&str, &[&str])] = &[
    ("anthropic", &["api.anthropic.com"]),
    ("azure", &["*.openai.azure.com"]),
    ("cohere", &["api.cohere.com", "api.cohere.ai"]),
    ("deepseek", &["api.deepseek.com"]),
    (
        "google",
        &[
            "generativelanguage.googleapis.com",
            "aiplatform.googleapis.com",
        ],
    ),
    ("groq", &["api.groq.com"]),
    ("mistral", &["api.mistral.ai", "codestral.mistral.ai"]),
    ("openai", &["api.openai.com", "chatgpt.com"]),
    ("openrouter", &["openrouter.ai"]),
    ("xai", &["api.x.ai"]),
];

/// `[[egress.relay]]`.
///
/// Deliberately not `#[non_exhaustive]`: `palisade-egress` maps this section
/// onto its configuration naming every field, so a new key fails to compile
/// there until it is applied, instead of being parsed and silently ignored.
/// A new field is a breaking change on purpose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relay {
    /// Unique name; also the relay's provider unless `provider` is set.
    pub name: String,
    /// The routing provider this relay sends content to (`provider = …`;
    /// defaults to `name`). `[[routing]]` rules name providers.
    pub provider: String,
    /// The exact upstream origin; the worker cannot change it.
    pub origin: Origin,
    /// The only method and path pairs forwarded.
    pub routes: Vec<RelayRoute>,
    /// Which header carries the credential and where the host reads it.
    pub credential: RelayCredential,
    /// Placeholder variables set in the worker's environment.
    pub worker_env: BTreeMap<String, String>,
    /// `limits = { … }`: the relay's request bounds.
    pub limits: RelayLimits,
    /// `kind = "http"` (the default: exact routes) or `"git"` (git smart
    /// HTTP: clone and fetch are reads, every ref update of a push is an
    /// outward action; `routes` are implicit and must not be given).
    pub kind: RelayKind,
    /// `preset = "github"`: the GitHub REST write routes of
    /// [`GITHUB_REST_PRESET`], each an outward route, added to `routes`
    /// (a listed route with the same method and path is an error).
    pub preset: Option<RelayPreset>,
    /// `repos = ["acme/*", …]` (git relays only): the `OWNER/REPO` paths
    /// the relay serves, as target globs; empty serves every repository
    /// the credential can reach.
    pub repos: Vec<TargetGlob>,
}

impl Relay {
    /// Whether a request through this relay can be an outward action (a
    /// git relay, a preset, or any route with `outward`): the proxy then
    /// refuses direct connections to its origin ("one way out").
    pub fn is_outward(&self) -> bool {
        self.kind == RelayKind::Git
            || self.preset.is_some()
            || self.routes.iter().any(|r| r.outward.is_some())
    }
}

/// `[[egress.relay]] kind`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RelayKind {
    /// Exact `METHOD path` routes (provider APIs, REST).
    #[default]
    Http,
    /// Git smart HTTP (`info/refs`, `git-upload-pack`, `git-receive-pack`).
    Git,
}

/// `[[egress.relay]] preset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RelayPreset {
    /// The GitHub REST API ([`GITHUB_REST_PRESET`]).
    GitHub,
    /// The Anthropic Messages API ([`ANTHROPIC_PRESET`]).
    Anthropic,
    /// The OpenAI Responses and Chat Completions APIs ([`OPENAI_PRESET`]).
    OpenAi,
    /// The ChatGPT-subscription Codex backend ([`CHATGPT_PRESET`]).
    ChatGpt,
}

/// The Anthropic preset's routes (`POST` only, exact paths).
pub const ANTHROPIC_PRESET: &[(&str, &str)] = &[
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
];

/// The OpenAI preset's routes (`POST` only, exact paths).
pub const OPENAI_PRESET: &[(&str, &str)] =
    &[("POST", "/v1/responses"), ("POST", "/v1/chat/completions")];

/// The ChatGPT preset's routes: the Codex backend a ChatGPT subscription
/// uses (`chatgpt.com/backend-api/codex`).
pub const CHATGPT_PRESET: &[(&str, &str)] = &[("POST", "/backend-api/codex/responses")];

/// The GitHub REST preset: `(method, path, outward kind, target template)`.
/// Every write a governed worker may ask for through a `preset = "github"`
/// relay; any other write is refused unless the policy lists it, and reads
/// (`GET`) only on the routes the policy names.
pub const GITHUB_REST_PRESET: &[(&str, &str, &str, &str)] = &[
    (
        "POST",
        "/repos/{owner}/{repo}/issues/{number}/comments",
        "github.post.comment",
        "github.com/{owner}/{repo}/issues/{number}",
    ),
    (
        "PATCH",
        "/repos/{owner}/{repo}/issues/comments/{comment_id}",
        "github.post.comment",
        "github.com/{owner}/{repo}/issues/comments/{comment_id}",
    ),
    (
        "POST",
        "/repos/{owner}/{repo}/issues",
        "github.post.issue",
        "github.com/{owner}/{repo}/issues",
    ),
    (
        "PATCH",
        "/repos/{owner}/{repo}/issues/{number}",
        "github.post.issue",
        "github.com/{owner}/{repo}/issues/{number}",
    ),
    (
        "POST",
        "/repos/{owner}/{repo}/pulls",
        "github.post.pull_request",
        "github.com/{owner}/{repo}/pulls",
    ),
    (
        "PATCH",
        "/repos/{owner}/{repo}/pulls/{number}",
        "github.post.pull_request",
        "github.com/{owner}/{repo}/issues/{number}",
    ),
    (
        "POST",
        "/repos/{owner}/{repo}/pulls/{number}/reviews",
        "github.post.review",
        "github.com/{owner}/{repo}/issues/{number}",
    ),
    (
        "POST",
        "/repos/{owner}/{repo}/pulls/{number}/comments",
        "github.post.review",
        "github.com/{owner}/{repo}/issues/{number}",
    ),
    (
        "PUT",
        "/repos/{owner}/{repo}/pulls/{number}/merge",
        "github.post.merge",
        "github.com/{owner}/{repo}/issues/{number}",
    ),
    (
        "POST",
        "/repos/{owner}/{repo}/releases",
        "github.post.release",
        "github.com/{owner}/{repo}/releases",
    ),
    (
        "POST",
        "/repos/{owner}/{repo}/issues/{number}/labels",
        "github.post.label",
        "github.com/{owner}/{repo}/issues/{number}",
    ),
    (
        "PUT",
        "/repos/{owner}/{repo}/issues/{number}/labels",
        "github.post.label",
        "github.com/{owner}/{repo}/issues/{number}",
    ),
    (
        "DELETE",
        "/repos/{owner}/{repo}/issues/{number}/labels/{name}",
        "github.post.label",
        "github.com/{owner}/{repo}/issues/{number}",
    ),
    (
        "POST",
        "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches",
        "github.post.workflow_dispatch",
        "github.com/{owner}/{repo}/actions/workflows/{workflow_id}",
    ),
];

/// `[[egress.relay]] limits`; `None` means the relay's built-in default
/// (documented in `docs/policy.md`). Every value is at least 1.
///
/// Deliberately not `#[non_exhaustive]`: `palisade-egress` maps this section
/// onto its configuration naming every field, so a new key fails to compile
/// there until it is applied, instead of being parsed and silently ignored.
/// A new field is a breaking change on purpose.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelayLimits {
    /// Largest request body, in bytes.
    pub max_body: Option<u64>,
    /// Request body bytes held across all of the relay's requests at once.
    pub max_buffered: Option<u64>,
    /// Open worker connections.
    pub connections: Option<u64>,
    /// Seconds allowed for a request head.
    pub header_timeout: Option<u64>,
    /// Longest wait for the next request body bytes, in seconds.
    pub body_idle_timeout: Option<u64>,
    /// Seconds allowed for a whole request body, from the request's arrival.
    pub body_timeout: Option<u64>,
}

/// `credential = { header, from_env, prefix }` of a relay.
///
/// Deliberately not `#[non_exhaustive]`: `palisade-egress` maps this section
/// onto its configuration naming every field, so a new key fails to compile
/// there until it is applied, instead of being parsed and silently ignored.
/// A new field is a breaking change on purpose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayCredential {
    /// Header the relay sets (lowercase), after stripping any the worker sent.
    pub header: String,
    /// Host environment variable that holds the secret.
    pub from_env: String,
    /// Text put before the secret, such as `Bearer `.
    pub prefix: String,
    /// `username = "x-access-token"`: send HTTP Basic,
    /// `Basic base64(username:secret)`, in `header` (which must be
    /// `authorization`, with no `prefix`); what git hosts expect.
    pub username: Option<String>,
    /// `kind`: what the credential is (an API key by default).
    pub kind: CredentialKind,
    /// `from_file`: a host token file (the OAuth kinds), read and refreshed
    /// by the host on each dispatch, never seen by the worker. When it is
    /// set, `from_env` is empty.
    pub from_file: Option<String>,
    /// `token_url`: the OAuth token endpoint the host refreshes against
    /// (the kind's default when absent: `https://platform.claude.com/v1/oauth/token`
    /// for `anthropic_oauth`, `https://auth.openai.com/oauth/token` for
    /// `chatgpt`).
    pub token_url: Option<String>,
}

/// `credential.kind`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CredentialKind {
    /// `"api_key"`: a static secret from `from_env`, sent as
    /// `header: prefix + secret` (or HTTP Basic).
    #[default]
    ApiKey,
    /// `"anthropic_oauth"`: a Claude subscription OAuth token: sent as
    /// `authorization: Bearer <access token>` with the OAuth beta header;
    /// the worker presents an `sk-ant-oat`-shaped placeholder in
    /// `authorization`.
    AnthropicOauth,
    /// `"chatgpt"`: a ChatGPT subscription token: the worker sees a
    /// JWT-shaped placeholder that carries the (non-secret) account id.
    ChatGpt,
}

impl CredentialKind {
    /// Every kind.
    pub const ALL: [CredentialKind; 3] = [Self::ApiKey, Self::AnthropicOauth, Self::ChatGpt];

    /// The name used in the policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ApiKey => "api_key",
            Self::AnthropicOauth => "anthropic_oauth",
            Self::ChatGpt => "chatgpt",
        }
    }

    /// Whether the secret is an OAuth token pair kept in a host file.
    pub fn is_oauth(self) -> bool {
        !matches!(self, Self::ApiKey)
    }
}

/// `[outward]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Outward {
    /// Decision when no rule matches: ask (default) or deny.
    pub default: OutwardDefault,
    /// Actions allowed without asking (ignored by a tainted session).
    pub allow: Vec<OutwardRule>,
    /// Actions always refused; deny beats allow, taint never lifts it.
    pub deny: Vec<OutwardRule>,
}

/// `outward.default`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OutwardDefault {
    /// Ask a human.
    #[default]
    Ask,
    /// Refuse.
    Deny,
}

/// One `{ kind, target }` outward rule.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutwardRule {
    /// The kind, or a prefix of kinds (`github.post` covers `github.post.comment`), or `*`.
    pub kind: OutwardKind,
    /// Target glob; `None` matches every target.
    pub target: Option<TargetGlob>,
}

impl OutwardRule {
    /// A rule for `kind`, matching every target when `target` is `None`.
    pub fn new(kind: OutwardKind, target: Option<TargetGlob>) -> Self {
        Self { kind, target }
    }
}

/// A dotted outward-action kind such as `git.push` or `github.post.review`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OutwardKind(String);

/// The built-in outward kinds.
pub const BUILTIN_OUTWARD_KINDS: &[&str] = &[
    "git.push",
    "git.force_push",
    "git.delete_ref",
    "git.push_options",
    "github.post",
    "github.post.comment",
    "github.post.issue",
    "github.post.pull_request",
    "github.post.review",
    "github.post.merge",
    "github.post.release",
    "github.post.label",
    "github.post.workflow_dispatch",
    "mail.send",
    "booking",
    "payment",
];

impl OutwardKind {
    /// Parses `*` or dot-separated labels of `[a-z0-9_-]`, starting with a letter.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "*" {
            return Ok(Self(text.to_owned()));
        }
        let ok = !text.is_empty()
            && text.split('.').all(|seg| {
                seg.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
                    && seg.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
                    })
            });
        if ok {
            Ok(Self(text.to_owned()))
        } else {
            Err(format!(
                "`{text}` is not a kind such as `git.push` (lowercase dot-separated names, or `*`)"
            ))
        }
    }

    /// The kind text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this rule kind covers the request kind `kind`: equal, `*`, or a
    /// dot-boundary prefix.
    pub fn covers(&self, kind: &str) -> bool {
        self.0 == "*"
            || kind == self.0
            || kind
                .strip_prefix(self.0.as_str())
                .is_some_and(|rest| rest.starts_with('.'))
    }

    /// Whether this is a built-in kind or a family of them.
    pub fn is_builtin(&self) -> bool {
        self.0 == "*" || BUILTIN_OUTWARD_KINDS.contains(&self.0.as_str())
    }
}

impl fmt::Display for OutwardKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A target glob of an outward rule (`github.com/acme/app:refs/heads/agent/*`,
/// `*@acme.example`).
///
/// Targets are `/`-separated segments, and after the first segment (the
/// host, which may carry `:PORT`) a `:` separates segments too, in the glob
/// and in the target alike: a git target `github.com/acme/app:refs/heads/main`
/// is compared as `github.com/acme/app/refs/heads/main`, so
/// `github.com/acme/app/**` covers every ref of that repository as well as its
/// REST targets ([`TargetGlob::comparable`]).
/// `*` and `?` stay inside one segment, `**` crosses segments.
/// Deny rules match ignoring ASCII case, so a deny on `github.com/acme/*`
/// also catches `github.com/ACME/x`; allow rules match case-sensitively, so
/// an allow for `refs/heads/agent/*` does not also allow `refs/heads/AGENT/x`
/// (git refs are case-sensitive). Both choices err towards asking.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetGlob(String);

impl TargetGlob {
    /// Checks the glob syntax.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("empty target".to_owned());
        }
        Self::compile_text(text).map_err(|e| format!("`{text}`: {e}"))?;
        Ok(Self(text.to_owned()))
    }

    /// The glob text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the glob matches every target (`*`, `**`, …).
    pub fn is_match_all(&self) -> bool {
        self.0.chars().all(|c| c == '*' || c == '/')
    }

    /// The compiled glob; `case_insensitive` for deny rules. It matches
    /// targets in their [`TargetGlob::comparable`] form, never raw.
    pub fn compile(&self, case_insensitive: bool) -> Result<globset::Glob, globset::Error> {
        Self::compile_with(&self.0, case_insensitive)
    }

    /// `text` (a target, or a glob's text) as globs compare it, the same
    /// mapping on both sides:
    ///
    /// - every `:` after the first `/` becomes `/`, so the repository and
    ///   the ref of a git target are separate segments; a host's `:PORT`
    ///   stays as it is;
    /// - a fourth segment `pull` or `pulls` (any case) followed by more
    ///   segments reads as `issues`: GitHub numbers issues and pull requests
    ///   in one sequence and its issues API acts on pull requests, so
    ///   `HOST/OWNER/REPO/pull/7` and `HOST/OWNER/REPO/issues/7` are one
    ///   target (the create target `HOST/OWNER/REPO/pulls` stays itself).
    ///
    /// Apply it to the target before matching it against [`Self::compile`].
    pub fn comparable(text: &str) -> Cow<'_, str> {
        let Some((host, rest)) = text.split_once('/') else {
            return Cow::Borrowed(text);
        };
        let rest = rest.replace(':', "/");
        let mut segs: Vec<&str> = rest.split('/').collect();
        if segs.len() > 3
            && let Some(noun) = segs.get_mut(2)
            && (noun.eq_ignore_ascii_case("pull") || noun.eq_ignore_ascii_case("pulls"))
        {
            *noun = "issues";
        }
        let out = format!("{host}/{}", segs.join("/"));
        if out == text {
            Cow::Borrowed(text)
        } else {
            Cow::Owned(out)
        }
    }

    fn compile_text(text: &str) -> Result<globset::Glob, globset::Error> {
        Self::compile_with(text, false)
    }

    fn compile_with(text: &str, case_insensitive: bool) -> Result<globset::Glob, globset::Error> {
        globset::GlobBuilder::new(&Self::comparable(text))
            .literal_separator(true)
            .case_insensitive(case_insensitive)
            .backslash_escape(true)
            .build()
    }
}

impl fmt::Display for TargetGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `[taint]`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Taint {
    /// Which event classes taint a session.
    pub sources: BTreeSet<TaintSourceKind>,
    /// Reading a path matching one of these taints the session (`untrusted_path`).
    pub untrusted_paths: Vec<PathGlob>,
    /// Files the user marked untrusted in the policy (`marked_file`); the
    /// marks file adds to these.
    pub marked: Vec<PathGlob>,
    /// Where `palisade mark-untrusted` keeps its marks, relative to the policy file.
    pub marks_file: String,
    /// Writes to these paths are flagged for the record (they steer later runs).
    pub steering_paths: Vec<PathGlob>,
    /// Hosts a tainted session may still open new connections to.
    pub egress_allow: Vec<HostPattern>,
    /// `observe`: how reads of marked, untrusted and routed paths are seen.
    pub observe: TaintObserve,
}

/// `taint.observe`: who sees the worker's reads of watched paths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaintObserve {
    /// `"kernel"` (default): the read observer (fanotify permission events
    /// as root, degraded after-the-fact events otherwise); a session whose
    /// policy names watched paths refuses to start when none can run.
    #[default]
    Kernel,
    /// `"self_report"`: only the worker's own `palisade ctl taint` reports
    /// (and an orchestrator's) taint; reads are not observed.
    SelfReport,
}

impl TaintObserve {
    /// Every mode, in documentation order.
    pub const ALL: &'static [Self] = &[Self::Kernel, Self::SelfReport];

    /// Parses the policy-file value (`kernel`, `self_report`).
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.as_str() == text)
    }

    /// The value as written in the policy.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Kernel => "kernel",
            Self::SelfReport => "self_report",
        }
    }
}

/// The default marks file, relative to the policy file.
pub const DEFAULT_MARKS_FILE: &str = ".palisade/untrusted";

impl Default for Taint {
    fn default() -> Self {
        Self {
            sources: TaintSourceKind::DEFAULT.iter().copied().collect(),
            untrusted_paths: Vec::new(),
            marked: Vec::new(),
            marks_file: DEFAULT_MARKS_FILE.to_owned(),
            steering_paths: Vec::new(),
            egress_allow: Vec::new(),
            observe: TaintObserve::Kernel,
        }
    }
}

/// A configurable class of taint source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum TaintSourceKind {
    /// Results of web fetch and web search tools.
    Web,
    /// Results of MCP servers not run by the host.
    ExternalMcp,
    /// Output of shell commands.
    Shell,
    /// Connections through the proxy that do not go through a relay.
    ProxyNonRelay,
    /// Reads of `taint.untrusted_paths`.
    UntrustedPath,
    /// Reads of files the user marked untrusted.
    MarkedFile,
}

impl TaintSourceKind {
    /// Every kind, in file order.
    pub const ALL: &'static [Self] = &[
        Self::Web,
        Self::ExternalMcp,
        Self::Shell,
        Self::ProxyNonRelay,
        Self::UntrustedPath,
        Self::MarkedFile,
    ];
    /// The kinds enabled when `taint.sources` is absent: all but `shell`.
    pub const DEFAULT: &'static [Self] = &[
        Self::Web,
        Self::ExternalMcp,
        Self::ProxyNonRelay,
        Self::UntrustedPath,
        Self::MarkedFile,
    ];

    /// The name used in the policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Web => "web",
            Self::ExternalMcp => "external_mcp",
            Self::Shell => "shell",
            Self::ProxyNonRelay => "proxy_non_relay",
            Self::UntrustedPath => "untrusted_path",
            Self::MarkedFile => "marked_file",
        }
    }

    /// Parses the policy-file name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|k| k.as_str() == text)
    }
}

/// One `[[routing]]` rule.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RoutingRule {
    /// Paths this rule restricts.
    pub paths: Vec<PathGlob>,
    /// Providers that may receive content read from those paths.
    pub providers: BTreeSet<String>,
}

impl RoutingRule {
    /// A rule letting only `providers` receive content read from `paths`.
    pub fn new(paths: Vec<PathGlob>, providers: BTreeSet<String>) -> Self {
        Self { paths, providers }
    }
}

/// Parses `palisade.toml` text; `file` names it in diagnostics only.
///
/// Returns the policy with its warnings (lints) when there is no error, else
/// every finding, errors first. Empty text is the default policy:
/// `parse("p.toml", "")` yields [`HostPolicy::default()`].
///
/// ```rust
/// use palisade_schema::host_policy::{self, HostPolicy};
///
/// let text = "[egress]\nallow = [\"api.github.com:443\"]\n";
/// let policy = host_policy::parse("palisade.toml", text).map_err(|d| d.to_string())?;
/// assert_eq!(policy.value().egress.allow[0].to_string(), "api.github.com:443");
/// assert!(policy.warnings().is_empty());
///
/// assert_eq!(host_policy::parse("p.toml", "").map_err(|d| d.to_string())?.into_value(), HostPolicy::default());
///
/// let refused = host_policy::parse("palisade.toml", "[egress]\nallow = [\"*\"]\n").unwrap_err();
/// assert_eq!(refused.first().code, "invalid_host_pattern");
/// assert_eq!((refused.first().line, refused.first().column), (2, 10));
/// # Ok::<(), String>(())
/// ```
pub fn parse(file: &str, text: &str) -> Result<Parsed<HostPolicy>, Diagnostics> {
    let (policy, diags) = findings(file, text);
    crate::diagnostic::outcome(file, policy, diags)
}

/// The policy when there is no error, and every finding in document order.
fn findings(file: &str, text: &str) -> (Option<HostPolicy>, Vec<Diagnostic>) {
    if text.len() > MAX_POLICY_BYTES {
        return (
            None,
            vec![
                Diagnostic::error(
                    "too_large",
                    format!("the policy is larger than {MAX_POLICY_BYTES} bytes"),
                )
                .in_file(file),
            ],
        );
    }
    let mut cx = Cx::new(file, text);
    let root = match toml::de::DeTable::parse(text) {
        Ok(root) => root,
        Err(err) => {
            let span = err.span().unwrap_or(0..0);
            cx.error(
                "syntax",
                &span,
                &Path::root(),
                err.message().trim().to_owned(),
            );
            return (None, cx.diags);
        }
    };
    let root = Table {
        table: root.get_ref(),
        path: Path::root(),
        span: root.span(),
    };
    let policy = read_policy(&mut cx, &root);
    lint(&mut cx, &root, &policy);
    let mut diags = cx.diags;
    diags.sort_by_key(|d| (d.line, d.column));
    let ok = !diags.iter().any(Diagnostic::is_error);
    (ok.then_some(policy), diags)
}

fn read_policy(cx: &mut Cx<'_>, root: &Table<'_, '_>) -> HostPolicy {
    root.deny_unknown(
        cx,
        &[
            "worker", "egress", "outward", "taint", "routing", "profiles", "evidence",
        ],
    );
    let mut evidence = Evidence::default();
    if let Some(t) = root.table(cx, "evidence") {
        evidence = read_evidence(cx, &t);
    }
    let mut policy = HostPolicy {
        evidence,
        ..HostPolicy::default()
    };
    if let Some(t) = root.table(cx, "profiles") {
        policy.profiles = read_profiles(cx, &t);
    }
    if let Some(t) = root.table(cx, "worker") {
        policy.worker = read_worker(cx, &t, &policy.profiles);
    }
    if let Some(t) = root.table(cx, "egress") {
        policy.egress = read_egress(cx, &t);
    }
    if let Some(t) = root.table(cx, "outward") {
        policy.outward = read_outward(cx, &t);
    }
    if let Some(t) = root.table(cx, "taint") {
        policy.taint = read_taint(cx, &t);
    }
    for t in root.table_array(cx, "routing") {
        t.deny_unknown(cx, &["paths", "providers"]);
        let paths = globs(cx, &t, "paths");
        if paths.is_empty() {
            cx.error(
                "missing_key",
                &t.span,
                &t.path.key("paths"),
                "a routing rule needs `paths`",
            );
        }
        if !t.table.contains_key("providers") {
            cx.error(
                "missing_key",
                &t.span,
                &t.path.key("providers"),
                "a routing rule needs `providers` (use `[]` to send those paths to no provider)",
            );
        }
        let mut providers = BTreeSet::new();
        for (name, span, path) in t.str_array(cx, "providers") {
            if !is_name(&name) {
                cx.error(
                    "invalid_value",
                    &span,
                    &path,
                    format!("`{name}` is not a provider name (letters, digits, `-`, `_`, `.`)"),
                );
            } else if !providers.insert(name.clone()) {
                cx.warning(
                    "duplicate",
                    &span,
                    &path,
                    format!("provider `{name}` is listed twice"),
                );
            }
        }
        policy.routing.push(RoutingRule { paths, providers });
    }
    policy
}

fn read_profiles(cx: &mut Cx<'_>, t: &Table<'_, '_>) -> BTreeMap<String, CustomProfile> {
    let mut out = BTreeMap::new();
    for key in t.table.keys() {
        let name: &str = key.get_ref();
        let Some(p) = t.table(cx, name) else {
            continue;
        };
        if Profile::from_name(name).is_some() {
            cx.error(
                "invalid_value",
                &key.span(),
                &t.path.key(name),
                format!("`{name}` is a built-in profile and cannot be redefined"),
            )
            .help("give the custom profile another name and set `base`");
            continue;
        }
        if !is_name(name) {
            cx.error(
                "invalid_value",
                &key.span(),
                &t.path.key(name),
                format!("`{name}` is not a profile name (letters, digits, `-`, `_`, `.`)"),
            );
            continue;
        }
        if let Some(c) = read_custom_profile(cx, &p) {
            out.insert(name.to_owned(), c);
        }
    }
    out
}

fn read_custom_profile(cx: &mut Cx<'_>, t: &Table<'_, '_>) -> Option<CustomProfile> {
    const KNOWN: &[&str] = &[
        "base",
        "read_only",
        "masks",
        "writable",
        "network",
        "limits",
        "nested_sandbox",
    ];
    for key in t.table.keys() {
        let name: &str = key.get_ref();
        if WEAKENING_KEYS.contains(&name) {
            cx.error(
                "weakens_base",
                &key.span(),
                &t.path.key(name),
                format!("a custom profile cannot set `{name}`: it may only add to its base"),
            )
            .help("layers, built-in masks and the environment allowlist come from the base profile; run `palisade run --dangerously-disable` for an explicit, recorded downgrade");
        }
    }
    t.deny_unknown_but(cx, KNOWN, WEAKENING_KEYS);
    let base = match required_str(cx, t, "base") {
        Some((b, span)) => match Profile::from_name(&b) {
            Some(p) => Some(p),
            None => {
                cx.error(
                    "invalid_value",
                    &span,
                    &t.path.key("base"),
                    format!("unknown base profile `{b}`"),
                )
                .help("expected one of: governed, strict, maintenance");
                None
            }
        },
        None => None,
    };
    let mut c = CustomProfile {
        base: base.unwrap_or_default(),
        read_only: abs_paths(cx, t, "read_only"),
        masks: abs_paths(cx, t, "masks"),
        writable: abs_paths(cx, t, "writable"),
        ..CustomProfile::default()
    };
    if let Some((n, span)) = t.str(cx, "network") {
        match n.as_str() {
            "none" => c.network = Some(ProfileNetwork::None),
            "proxy" if c.base == Profile::Strict => {
                cx.error(
                    "weakens_base",
                    &span,
                    &t.path.key("network"),
                    "`network = \"proxy\"` would weaken the `strict` base, which has no network",
                )
                .help("base the profile on `governed` to reach the proxy");
            }
            "proxy" => c.network = Some(ProfileNetwork::Proxy),
            other => {
                cx.error(
                    "invalid_value",
                    &span,
                    &t.path.key("network"),
                    format!("unknown network `{other}`"),
                )
                .help("expected one of: none, proxy");
            }
        }
    }
    c.nested_sandbox = t.bool(cx, "nested_sandbox").unwrap_or(false);
    if let Some(l) = t.table(cx, "limits") {
        l.deny_unknown(
            cx,
            &[
                "address_space",
                "processes",
                "file_size",
                "open_files",
                "cpu",
            ],
        );
        c.limits.address_space = size(cx, &l, "address_space");
        c.limits.processes = l.uint(cx, "processes");
        c.limits.file_size = size(cx, &l, "file_size");
        c.limits.open_files = l.uint(cx, "open_files");
        c.limits.cpu = duration(cx, &l, "cpu");
    }
    base.map(|_| c)
}

fn read_worker(
    cx: &mut Cx<'_>,
    t: &Table<'_, '_>,
    profiles: &BTreeMap<String, CustomProfile>,
) -> Worker {
    t.deny_unknown(
        cx,
        &[
            "profile",
            "cwd",
            "writable",
            "read_only",
            "masks",
            "env",
            "limits",
            "writes",
            "commit",
            "agent",
            "agent_state",
        ],
    );
    let mut w = Worker::default();
    if let Some((a, span)) = t.str(cx, "agent") {
        match AgentName::from_name(&a) {
            Some(x) => w.agent = Some(x),
            None => {
                let all = AgentName::ALL.map(AgentName::as_str);
                let help = match reader::nearest(&a, &all) {
                    Some(n) => format!("did you mean `{n}`? expected one of: {}", all.join(", ")),
                    None => format!("expected one of: {}", all.join(", ")),
                };
                cx.error(
                    "invalid_value",
                    &span,
                    &t.path.key("agent"),
                    format!("unknown agent `{a}`"),
                )
                .help(help);
            }
        }
    }
    if let Some((m, span)) = t.str(cx, "agent_state") {
        match m.as_str() {
            "fresh" => w.agent_state = AgentState::Fresh,
            "persistent" => w.agent_state = AgentState::Persistent,
            _ => {
                cx.error(
                    "invalid_value",
                    &span,
                    &t.path.key("agent_state"),
                    format!("unknown agent state `{m}`"),
                )
                .help("expected one of: fresh, persistent");
            }
        }
    }
    if let Some((m, span)) = t.str(cx, "writes") {
        match m.as_str() {
            "staged" => w.writes = Writes::Staged,
            "direct" => w.writes = Writes::Direct,
            _ => {
                cx.error(
                    "invalid_value",
                    &span,
                    &t.path.key("writes"),
                    format!("unknown write mode `{m}`"),
                )
                .help("expected one of: staged, direct");
            }
        }
    }
    if let Some(c) = t.table(cx, "commit") {
        c.deny_unknown(cx, &["refuse"]);
        for (text, span, path) in c.str_array(cx, "refuse") {
            if text.starts_with('/') {
                cx.error(
                    "invalid_glob",
                    &span,
                    &path,
                    format!("`{text}`: a commit pattern is relative to each writable root"),
                )
                .help("drop the leading `/`; `**/name` refuses `name` at any depth");
                continue;
            }
            match PathGlob::parse(&text) {
                Ok(g) => w.commit.refuse.push(g),
                Err(msg) => {
                    cx.error("invalid_glob", &span, &path, msg);
                }
            }
        }
    }
    if let Some((p, span)) = t.str(cx, "profile") {
        if let Some(b) = Profile::from_name(&p) {
            w.profile = b;
        } else if let Some(c) = profiles.get(&p) {
            w.profile = c.base;
            w.custom_profile = Some(p);
        } else {
            let mut names: Vec<&str> = vec!["governed", "strict", "maintenance"];
            names.extend(profiles.keys().map(String::as_str));
            cx.error(
                "invalid_value",
                &span,
                &t.path.key("profile"),
                format!("unknown profile `{p}`"),
            )
            .help(format!("expected one of: {}", names.join(", ")));
        }
    }
    if let Some((cwd, span)) = t.str(cx, "cwd")
        && check_abs(cx, &cwd, &span, &t.path.key("cwd"))
    {
        w.cwd = Some(cwd);
    }
    w.writable = abs_paths(cx, t, "writable");
    w.read_only = abs_paths(cx, t, "read_only");
    w.masks = abs_paths(cx, t, "masks");
    if let Some(env) = t.table(cx, "env") {
        env.deny_unknown(cx, &["pass", "set"]);
        for (name, span, path) in env.str_array(cx, "pass") {
            if is_env_name(&name) {
                w.env.pass.push(name);
            } else {
                cx.error(
                    "invalid_value",
                    &span,
                    &path,
                    format!("`{name}` is not a variable name"),
                );
            }
        }
        for (name, value, span, path) in env.str_map(cx, "set") {
            if is_env_name(&name) {
                w.env.set.insert(name, value);
            } else {
                cx.error(
                    "invalid_value",
                    &span,
                    &path,
                    format!("`{name}` is not a variable name"),
                );
            }
        }
    }
    if let Some(l) = t.table(cx, "limits") {
        l.deny_unknown(
            cx,
            &["memory", "swap", "pids", "cpus", "cpu", "wall", "file_size"],
        );
        w.limits.memory = size(cx, &l, "memory");
        w.limits.swap = size(cx, &l, "swap");
        w.limits.cpus = cpus(cx, &l, "cpus");
        w.limits.pids = l.uint(cx, "pids");
        w.limits.cpu = duration(cx, &l, "cpu");
        w.limits.wall = duration(cx, &l, "wall");
        w.limits.file_size = size(cx, &l, "file_size");
    }
    w
}

fn read_egress(cx: &mut Cx<'_>, t: &Table<'_, '_>) -> Egress {
    t.deny_unknown(
        cx,
        &[
            "allow",
            "deny",
            "allow_addresses",
            "limits",
            "relay",
            "require_sni_match",
            "provider_hosts",
        ],
    );
    let mut e = Egress {
        allow: host_patterns(cx, t, "allow"),
        deny: host_patterns(cx, t, "deny"),
        require_sni_match: t
            .bool(cx, "require_sni_match")
            .unwrap_or(Egress::default().require_sni_match),
        ..Egress::default()
    };
    for (text, span, path) in t.str_array(cx, "allow_addresses") {
        match Cidr::parse(&text) {
            Ok(c) => e.allow_addresses.push(c),
            Err(msg) => {
                cx.error("invalid_address", &span, &path, msg);
            }
        }
    }
    if let Some(l) = t.table(cx, "limits") {
        l.deny_unknown(
            cx,
            &[
                "bytes_per_connection",
                "bytes_per_session",
                "connections",
                "per_minute",
            ],
        );
        e.limits.bytes_per_connection = size(cx, &l, "bytes_per_connection");
        e.limits.bytes_per_session = size(cx, &l, "bytes_per_session");
        e.limits.connections = l.uint(cx, "connections");
        e.limits.per_minute = l.uint(cx, "per_minute");
    }
    if let Some(ph) = t.table(cx, "provider_hosts") {
        e.provider_hosts = read_provider_hosts(cx, &ph);
    }
    let mut names = BTreeSet::new();
    for r in t.table_array(cx, "relay") {
        if let Some(relay) = read_relay(cx, &r) {
            if !names.insert(relay.name.clone()) {
                cx.error(
                    "duplicate",
                    &r.span,
                    &r.path.key("name"),
                    format!("relay `{}` is defined twice", relay.name),
                );
            }
            e.relays.push(relay);
        }
    }
    e
}

/// `[egress.provider_hosts]`: provider name → host patterns without a port.
fn read_provider_hosts(cx: &mut Cx<'_>, t: &Table<'_, '_>) -> BTreeMap<String, Vec<HostPattern>> {
    let mut out = BTreeMap::new();
    for key in t.table.keys() {
        let name: &str = key.get_ref();
        if !is_name(name) {
            cx.error(
                "invalid_value",
                &key.span(),
                &t.path.key(name),
                format!("`{name}` is not a provider name (letters, digits, `-`, `_`, `.`)"),
            );
            continue;
        }
        let mut kept: Vec<HostPattern> = Vec::new();
        for (text, span, path) in t.str_array(cx, name) {
            let Some(p) = host_pattern(cx, &kept, &text, &span, &path) else {
                continue;
            };
            if let Some(port) = p.port() {
                cx.error(
                    "invalid_host_pattern",
                    &span,
                    &path,
                    format!(
                        "`{p}`: a provider host is refused on every port, so it takes no `:{port}`"
                    ),
                )
                .help(format!(
                    "write `{}{}`",
                    if p.is_wildcard() { "*." } else { "" },
                    p.base()
                ));
            } else {
                kept.push(p);
            }
        }
        out.insert(name.to_owned(), kept);
    }
    out
}

fn read_relay(cx: &mut Cx<'_>, r: &Table<'_, '_>) -> Option<Relay> {
    r.deny_unknown(
        cx,
        &[
            "name",
            "origin",
            "routes",
            "credential",
            "worker_env",
            "limits",
            "provider",
            "kind",
            "preset",
            "repos",
        ],
    );
    let name = required_str(cx, r, "name");
    if let Some((n, span)) = &name
        && !is_name(n)
    {
        cx.error(
            "invalid_value",
            span,
            &r.path.key("name"),
            format!("`{n}` is not a relay name (letters, digits, `-`, `_`, `.`)"),
        );
    }
    let kind = read_relay_kind(cx, r);
    let origin = required_str(cx, r, "origin").and_then(|(o, span)| match Origin::parse(&o) {
        Ok(origin) => {
            if origin.scheme == "http" && !origin.is_loopback() {
                cx.error(
                    "insecure_origin",
                    &span,
                    &r.path.key("origin"),
                    "a relay would send the credential in clear text over `http`",
                )
                .help("use `https://`; plain `http` is accepted only for loopback upstreams");
            } else if origin.scheme != "https" && kind == RelayKind::Git {
                cx.error(
                    "insecure_origin",
                    &span,
                    &r.path.key("origin"),
                    "a git relay's origin must be `https://`",
                );
            }
            Some(origin)
        }
        Err(msg) => {
            cx.error("invalid_value", &span, &r.path.key("origin"), msg);
            None
        }
    });
    let preset = read_relay_preset(cx, r, kind);
    let routes = read_relay_routes(cx, r, kind, preset);
    let repos = read_relay_repos(cx, r, kind);
    let credential = match r.table(cx, "credential") {
        Some(c) => read_credential(cx, &c),
        None => {
            cx.error(
                "missing_key",
                &r.span,
                &r.path.key("credential"),
                "a relay needs `credential = { header = \"…\", from_env = \"…\" }`",
            );
            None
        }
    };
    let mut worker_env = BTreeMap::new();
    for (k, v, span, path) in r.str_map(cx, "worker_env") {
        if !is_env_name(&k) {
            cx.error(
                "invalid_value",
                &span,
                &path,
                format!("`{k}` is not a variable name"),
            );
        }
        worker_env.insert(k, v);
    }
    let limits = read_relay_limits(cx, r);
    let provider = match r.str(cx, "provider") {
        Some((p, span)) if !is_name(&p) => {
            cx.error(
                "invalid_value",
                &span,
                &r.path.key("provider"),
                format!("`{p}` is not a provider name (letters, digits, `-`, `_`, `.`)"),
            );
            None
        }
        Some((p, _)) => Some(p),
        None => None,
    };
    let name = name?.0;
    let provider = provider.unwrap_or_else(|| name.clone());
    Some(Relay {
        name,
        provider,
        origin: origin?,
        routes,
        credential: credential?,
        worker_env,
        limits,
        kind,
        preset,
        repos,
    })
}

/// `kind = "http" | "git"` (default `http`).
fn read_relay_kind(cx: &mut Cx<'_>, r: &Table<'_, '_>) -> RelayKind {
    let Some((k, span)) = r.str(cx, "kind") else {
        return RelayKind::Http;
    };
    match k.as_str() {
        "http" => RelayKind::Http,
        "git" => RelayKind::Git,
        other => {
            let all = ["http", "git"];
            let help = match reader::nearest(other, &all) {
                Some(n) => format!("did you mean `{n}`? expected one of: {}", all.join(", ")),
                None => format!("expected one of: {}", all.join(", ")),
            };
            cx.error(
                "invalid_value",
                &span,
                &r.path.key("kind"),
                format!("unknown relay kind `{other}`"),
            )
            .help(help);
            RelayKind::Http
        }
    }
}

/// `preset = "github"` (http relays only).
fn read_relay_preset(cx: &mut Cx<'_>, r: &Table<'_, '_>, kind: RelayKind) -> Option<RelayPreset> {
    let (p, span) = r.str(cx, "preset")?;
    let path = r.path.key("preset");
    let preset = match RelayPreset::ALL.into_iter().find(|x| x.as_str() == p) {
        Some(x) => x,
        None => {
            let other = p.as_str();
            let all = RelayPreset::ALL.map(RelayPreset::as_str);
            let help = match reader::nearest(other, &all) {
                Some(n) => format!("did you mean `{n}`? expected one of: {}", all.join(", ")),
                None => format!("expected one of: {}", all.join(", ")),
            };
            cx.error(
                "invalid_value",
                &span,
                &path,
                format!("unknown relay preset `{other}`"),
            )
            .help(help);
            return None;
        }
    };
    if kind == RelayKind::Git {
        cx.error(
            "invalid_value",
            &span,
            &path,
            "a preset adds REST routes: it is for `kind = \"http\"` relays, and a git relay's routes are implicit",
        )
        .help("remove `preset`, or put the REST API in a relay of its own");
        return None;
    }
    Some(preset)
}

impl RelayPreset {
    /// The preset's routes: GitHub's each an outward route, the provider
    /// presets' plain inference routes.
    pub fn routes(self) -> Vec<RelayRoute> {
        let plain = |table: &[(&str, &str)]| {
            table
                .iter()
                .map(|(method, path)| RelayRoute {
                    method: (*method).to_owned(),
                    path: (*path).to_owned(),
                    outward: None,
                })
                .collect()
        };
        match self {
            Self::Anthropic => plain(ANTHROPIC_PRESET),
            Self::OpenAi => plain(OPENAI_PRESET),
            Self::ChatGpt => plain(CHATGPT_PRESET),
            Self::GitHub => GITHUB_REST_PRESET
                .iter()
                .filter_map(|(method, path, kind, target)| {
                    Some(RelayRoute {
                        method: (*method).to_owned(),
                        path: (*path).to_owned(),
                        outward: Some(RouteOutward {
                            kind: OutwardKind::parse(kind).ok()?,
                            target: (*target).to_owned(),
                        }),
                    })
                })
                .collect(),
        }
    }

    /// The preset's name in the policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::GitHub => "github",
            Self::Anthropic => "anthropic",
            Self::OpenAi => "openai",
            Self::ChatGpt => "chatgpt",
        }
    }

    /// Every preset, by name.
    pub const ALL: [RelayPreset; 4] = [Self::GitHub, Self::Anthropic, Self::OpenAi, Self::ChatGpt];
}

/// `routes`: strings (plain routes) and tables (outward routes), then the
/// preset's routes; a git relay must not list any.
fn read_relay_routes(
    cx: &mut Cx<'_>,
    r: &Table<'_, '_>,
    kind: RelayKind,
    preset: Option<RelayPreset>,
) -> Vec<RelayRoute> {
    if kind == RelayKind::Git {
        if let Some(v) = r.get("routes") {
            cx.error(
                "invalid_value",
                &v.span(),
                &r.path.key("routes"),
                "a git relay has implicit routes (info/refs, git-upload-pack, git-receive-pack): `routes` must not be given",
            )
            .help("remove `routes`; limit what it serves with `repos = [\"OWNER/REPO\"]`");
        }
        return Vec::new();
    }
    let mut routes: Vec<RelayRoute> = Vec::new();
    // (method, shape) → (authored index, text) of the first such route.
    let mut seen: BTreeMap<(String, String), (usize, String)> = BTreeMap::new();
    // The authored index of each kept user route, for the shadow lint.
    let mut authored_at: Vec<usize> = Vec::new();
    let authored = match r.get("routes").map(|v| v.get_ref()) {
        Some(toml::de::DeValue::Array(a)) => a.len(),
        _ => 0,
    };
    let items = r.str_or_table_array(cx, "routes");
    for item in items {
        let (route, span, path) = match item {
            reader::Item::Str(text, span, path) => match RelayRoute::parse(&text) {
                Ok(route) => (route, span, path),
                Err(msg) => {
                    cx.error("invalid_value", &span, &path, msg);
                    continue;
                }
            },
            reader::Item::Table(t) => match read_outward_route(cx, &t) {
                Some(route) => (route, t.span.clone(), t.path.clone()),
                None => continue,
            },
        };
        let key = (route.method.clone(), route.shape());
        if let Some((i, first)) = seen.get(&key) {
            cx.error(
                "duplicate",
                &span,
                &path,
                format!(
                    "`{route}` has the same method and path as `{first}` (routes[{i}]): both match the same requests"
                ),
            )
            .help("keep one of them");
            continue;
        }
        let at = last_index(&path).unwrap_or(routes.len());
        seen.insert(key, (at, route.to_string()));
        authored_at.push(at);
        routes.push(route);
    }
    if authored == 0 && r.table.contains_key("routes") && preset.is_none() {
        cx.warning(
            "empty_routes",
            &r.span,
            &r.path.key("routes"),
            "a relay with no routes forwards nothing",
        );
    }
    if let Some(preset) = preset {
        for route in preset.routes() {
            let key = (route.method.clone(), route.shape());
            if let Some((i, first)) = seen.get(&key) {
                let path = r.path.key("routes").index(*i);
                let outward = route
                    .outward
                    .as_ref()
                    .map(|o| o.kind.to_string())
                    .unwrap_or_default();
                cx.error(
                    "duplicate",
                    &span_of_item(r, *i),
                    &path,
                    format!(
                        "`{first}` is also a route of `preset = \"{}\"` (`{route}`, outward `{outward}`): the preset's route cannot be replaced",
                        preset.as_str()
                    ),
                )
                .help("remove it from `routes`, or drop the preset and list every route yourself");
                continue;
            }
            routes.push(route);
        }
    } else if !r.table.contains_key("routes") {
        cx.error(
            "missing_key",
            &r.span,
            &r.path.key("routes"),
            "a relay needs `routes`, such as [\"POST /v1/messages\"]",
        );
    }
    // A plain route that wins over an outward route for some requests.
    // Compared only within one method and segment count, under a budget of
    // pair comparisons so that a huge route list cannot stall the parser
    // (past it the advisory lint stops; nothing is enforced here).
    let mut outward_by: BTreeMap<(&str, usize), Vec<&RelayRoute>> = BTreeMap::new();
    for o in routes.iter().filter(|o| o.outward.is_some()) {
        outward_by
            .entry((o.method.as_str(), o.path.split('/').count()))
            .or_default()
            .push(o);
    }
    let mut budget: usize = 1 << 20;
    for (j, plain) in routes
        .iter()
        .enumerate()
        .filter(|(_, p)| p.outward.is_none())
    {
        let Some(at) = authored_at.get(j) else {
            continue;
        };
        let group = outward_by
            .get(&(plain.method.as_str(), plain.path.split('/').count()))
            .map_or(&[][..], Vec::as_slice);
        if budget < group.len() {
            break;
        }
        budget -= group.len();
        if let Some(o) = group.iter().find(|o| shadows(plain, o)) {
            let path = r.path.key("routes").index(*at);
            cx.warning(
                "route_shadows_outward",
                &span_of_item(r, *at),
                &path,
                format!(
                    "plain route `{plain}` wins over outward route `{o}` where both match: those requests are forwarded without an `[outward]` decision"
                ),
            )
            .help("if that is not intended, remove the plain route or make it a table route with `outward` and `target`");
        }
    }
    routes
}

/// Whether plain route `p` takes some request that outward route `o` also
/// matches: same method and segment count, no position where both are
/// different literals, and more literal segments (a tie goes to the outward
/// route, `palisade_policy::relay_route`).
fn shadows(p: &RelayRoute, o: &RelayRoute) -> bool {
    if p.method != o.method {
        return false;
    }
    let (ps, os): (Vec<&str>, Vec<&str>) =
        (p.path.split('/').collect(), o.path.split('/').collect());
    let literals = |v: &[&str]| v.iter().filter(|s| placeholder_name(s).is_none()).count();
    ps.len() == os.len()
        && ps
            .iter()
            .zip(&os)
            .all(|(a, b)| a == b || placeholder_name(a).is_some() || placeholder_name(b).is_some())
        && literals(&ps) > literals(&os)
}

/// The last index of `path` (`routes[3]` → 3).
fn last_index(path: &Path) -> Option<usize> {
    match path.0.last() {
        Some(crate::PathSegment::Index(i)) => Some(*i),
        _ => None,
    }
}

/// The span of `routes[i]` of relay table `r`.
fn span_of_item(r: &Table<'_, '_>, i: usize) -> Range<usize> {
    use toml::de::DeValue;
    match r.get("routes").map(|v| (v.span(), v.get_ref())) {
        Some((_, DeValue::Array(items))) if i < items.len() => {
            items.get(i).map_or(r.span.clone(), |v| v.span())
        }
        Some((span, _)) => span,
        None => r.span.clone(),
    }
}

/// `{ route = "METHOD /path", outward = "<kind>", target = "<template>" }`.
fn read_outward_route(cx: &mut Cx<'_>, t: &Table<'_, '_>) -> Option<RelayRoute> {
    t.deny_unknown(cx, &["route", "outward", "target"]);
    let route = required_str(cx, t, "route");
    let outward = required_str(cx, t, "outward");
    let target = required_str(cx, t, "target");
    let route = route.and_then(|(text, span)| match RelayRoute::parse(&text) {
        Ok(route) => Some(route),
        Err(msg) => {
            cx.error("invalid_value", &span, &t.path.key("route"), msg);
            None
        }
    });
    let kind = outward.and_then(|(text, span)| {
        let path = t.path.key("outward");
        match OutwardKind::parse(&text) {
            Ok(k) if k.as_str() == "*" => {
                cx.error(
                    "invalid_value",
                    &span,
                    &path,
                    "a route's outward kind is one kind such as `github.post.comment`, not `*`",
                );
                None
            }
            Ok(k) => {
                if !k.is_builtin() && BUILTIN_FAMILIES.iter().any(|f| k.as_str().starts_with(f)) {
                    cx.warning(
                        "unknown_kind",
                        &span,
                        &path,
                        format!("`{k}` is not a built-in kind; is it a typo?"),
                    )
                    .help(format!(
                        "built-in kinds: {}",
                        BUILTIN_OUTWARD_KINDS.join(", ")
                    ));
                }
                Some(k)
            }
            Err(msg) => {
                cx.error("invalid_value", &span, &path, msg);
                None
            }
        }
    });
    let mut route = route?;
    let (target, tspan) = target?;
    if let Err((msg, help)) = check_target_template(&target, &route) {
        let last = cx.error("invalid_value", &tspan, &t.path.key("target"), msg);
        if let Some(help) = help {
            last.help(help);
        }
        return None;
    }
    route.outward = Some(RouteOutward {
        kind: kind?,
        target,
    });
    Some(route)
}

/// A route's target template: text whose `{name}` are placeholders of the
/// route's path, and which, with them filled, is a literal target (no glob
/// metacharacters: an outward rule's glob matches it as text).
fn check_target_template(target: &str, route: &RelayRoute) -> Result<(), (String, Option<String>)> {
    if target.is_empty() {
        return Err(("empty target".to_owned(), None));
    }
    let names: Vec<&str> = route.placeholders().collect();
    let mut literal = String::with_capacity(target.len());
    let mut rest = target;
    while let Some(open) = rest.find(['{', '}']) {
        let (head, tail) = rest.split_at(open);
        literal.push_str(head);
        if tail.starts_with('}') {
            return Err((format!("`}}` without `{{` in target `{target}`"), None));
        }
        let Some(close) = tail.find('}') else {
            return Err((format!("`{{` without `}}` in target `{target}`"), None));
        };
        let seg = tail.get(..=close).unwrap_or_default();
        let Some(name) = placeholder_name(seg) else {
            return Err((
                format!(
                    "`{seg}` in target `{target}` is not a placeholder `{{name}}` (letters, digits, `_`)"
                ),
                None,
            ));
        };
        if !names.contains(&name) {
            let help = match reader::nearest(name, &names) {
                Some(n) => format!(
                    "did you mean `{{{n}}}`? the route's placeholders: {}",
                    placeholder_list(&names)
                ),
                None if names.is_empty() => {
                    "the route has no placeholders: write them in its path as whole segments `{name}`".to_owned()
                }
                None => format!("the route's placeholders: {}", placeholder_list(&names)),
            };
            return Err((
                format!(
                    "target `{target}` uses `{{{name}}}`, which is not a placeholder of `{}`",
                    route.path
                ),
                Some(help),
            ));
        }
        // A stand-in for one plain segment: checked as literal text.
        literal.push('x');
        rest = tail.get(close + 1..).unwrap_or_default();
    }
    literal.push_str(rest);
    if let Some(c) = literal
        .chars()
        .find(|c| matches!(c, '*' | '?' | '[' | ']' | '\\' | '!' | ',') || c.is_control())
    {
        return Err((
            format!(
                "`{}` in target `{target}`: a target is literal text (an outward rule's glob matches it), without glob characters",
                c.escape_default()
            ),
            None,
        ));
    }
    TargetGlob::parse(&literal).map_err(|e| (format!("target `{target}`: {e}"), None))?;
    Ok(())
}

/// Whether two rule targets may match a common target, for lints: a missing
/// or match-all target, equal texts, or one glob matching the other's text.
/// An approximation that errs towards warning.
fn targets_may_overlap(a: Option<&TargetGlob>, b: Option<&TargetGlob>) -> bool {
    target_covers(a, b) || target_covers(b, a)
}

/// Whether rule target `outer` matches everything `inner` does, as far as a
/// lint can tell: `outer` missing or match-all, equal texts, or `outer`'s glob
/// matching `inner`'s text.
fn target_covers(outer: Option<&TargetGlob>, inner: Option<&TargetGlob>) -> bool {
    match (outer, inner) {
        (None, _) => true,
        (Some(o), _) if o.is_match_all() => true,
        (Some(_), None) => false,
        (Some(o), Some(i)) => {
            o == i
                || o.compile(true).is_ok_and(|g| {
                    g.compile_matcher()
                        .is_match(&*TargetGlob::comparable(i.as_str()))
                })
        }
    }
}

fn placeholder_list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{{{n}}}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `repos = ["OWNER/REPO", "acme/*"]` (git relays only).
fn read_relay_repos(cx: &mut Cx<'_>, r: &Table<'_, '_>, kind: RelayKind) -> Vec<TargetGlob> {
    let items = r.str_array(cx, "repos");
    if kind != RelayKind::Git {
        if let Some(v) = r.get("repos") {
            cx.error(
                "invalid_value",
                &v.span(),
                &r.path.key("repos"),
                "`repos` is for `kind = \"git\"` relays",
            )
            .help("set `kind = \"git\"`, or remove `repos`");
        }
        return Vec::new();
    }
    let mut out = Vec::new();
    for (text, span, path) in items {
        let segs: Vec<&str> = text.split('/').collect();
        let shape_ok = segs.len() == 2 && segs.iter().all(|s| !s.is_empty() && !s.contains("**"));
        if !shape_ok {
            cx.error(
                "invalid_value",
                &span,
                &path,
                format!("`{text}` is not `OWNER/REPO` (a glob such as `acme/*` is allowed inside each part)"),
            );
            continue;
        }
        if let Some(stem) = text.strip_suffix(".git") {
            cx.error(
                "invalid_value",
                &span,
                &path,
                format!("`{text}`: repositories are named without `.git`"),
            )
            .help(format!("write `{stem}`"));
            continue;
        }
        match TargetGlob::parse(&text) {
            Ok(g) => out.push(g),
            Err(msg) => {
                cx.error("invalid_value", &span, &path, msg);
            }
        }
    }
    out
}

/// `credential = { … }`: an API key from `from_env` in `header`, or an
/// OAuth kind (`kind = "anthropic_oauth" | "chatgpt"`) from a host token
/// file, `from_file`, sent as `authorization: Bearer …`.
fn read_credential(cx: &mut Cx<'_>, c: &Table<'_, '_>) -> Option<RelayCredential> {
    c.deny_unknown(
        cx,
        &[
            "header",
            "from_env",
            "prefix",
            "username",
            "kind",
            "from_file",
            "token_url",
        ],
    );
    let mut ok = true;
    let kind = match c.str(cx, "kind") {
        None => CredentialKind::ApiKey,
        Some((k, span)) => match CredentialKind::ALL.into_iter().find(|x| x.as_str() == k) {
            Some(x) => x,
            None => {
                let all = CredentialKind::ALL.map(CredentialKind::as_str);
                cx.error(
                    "invalid_value",
                    &span,
                    &c.path.key("kind"),
                    format!("unknown credential kind `{k}`"),
                )
                .help(format!("expected one of: {}", all.join(", ")));
                return None;
            }
        },
    };
    let header = if kind.is_oauth() {
        match c.str(cx, "header") {
            Some((h, span)) if !h.eq_ignore_ascii_case("authorization") => {
                cx.error(
                    "invalid_value",
                    &span,
                    &c.path.key("header"),
                    format!("an OAuth credential is sent in `authorization`, not `{h}`"),
                )
                .help("remove `header`");
                ok = false;
                None
            }
            Some(h) => Some(h),
            None => Some(("authorization".to_owned(), 0..0)),
        }
    } else {
        required_str(cx, c, "header")
    };
    if let Some((h, span)) = &header
        && (h.is_empty() || !h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    {
        cx.error(
            "invalid_value",
            span,
            &c.path.key("header"),
            format!("`{h}` is not a header name"),
        );
    }
    let (from_env, from_file) = if kind.is_oauth() {
        if let Some(v) = c.get("from_env") {
            cx.error(
                "invalid_value",
                &v.span(),
                &c.path.key("from_env"),
                format!(
                    "a `{}` credential is a refreshable token pair read from a host file, not a variable",
                    kind.as_str()
                ),
            )
            .help("use `from_file = \"/path/to/tokens.json\"`");
            ok = false;
        }
        let file = required_str(cx, c, "from_file");
        if let Some((f, span)) = &file
            && !check_abs(cx, f, span, &c.path.key("from_file"))
        {
            ok = false;
        }
        (Some((String::new(), 0..0)), file.map(|(f, _)| f))
    } else {
        for key in ["from_file", "token_url"] {
            if let Some(v) = c.get(key) {
                cx.error(
                    "invalid_value",
                    &v.span(),
                    &c.path.key(key),
                    format!("`{key}` is for the OAuth credential kinds"),
                )
                .help(
                    "set `kind = \"anthropic_oauth\"` or `kind = \"chatgpt\"`, or use `from_env`",
                );
                ok = false;
            }
        }
        let from_env = required_str(cx, c, "from_env");
        if let Some((v, span)) = &from_env
            && !is_env_name(v)
        {
            cx.error(
                "invalid_value",
                span,
                &c.path.key("from_env"),
                format!("`{v}` is not a variable name"),
            );
        }
        (from_env, None)
    };
    let token_url = match c.str(cx, "token_url") {
        Some((u, span)) if kind.is_oauth() => match Origin::parse_url(&u) {
            Ok(o) if o.scheme == "https" || o.is_loopback() => Some(u),
            Ok(_) => {
                cx.error(
                    "insecure_origin",
                    &span,
                    &c.path.key("token_url"),
                    "the token endpoint would receive the refresh token in clear text over `http`",
                )
                .help("use `https://`; plain `http` is accepted only for loopback");
                ok = false;
                None
            }
            Err(msg) => {
                cx.error("invalid_value", &span, &c.path.key("token_url"), msg);
                ok = false;
                None
            }
        },
        _ => None,
    };
    let prefix = match c.str(cx, "prefix") {
        Some((p, span)) if kind.is_oauth() => {
            cx.error(
                "invalid_value",
                &span,
                &c.path.key("prefix"),
                format!("an OAuth credential is always sent as `Bearer …`, not `{p}…`"),
            )
            .help("remove `prefix`");
            ok = false;
            String::new()
        }
        Some((p, _)) => p,
        None if kind.is_oauth() => "Bearer ".to_owned(),
        None => String::new(),
    };
    let username = read_username(cx, c, header.as_ref().map(|(h, _)| h.as_str()));
    match (header, from_env, username) {
        (Some((h, _)), Some((v, _)), Ok(username)) if ok => Some(RelayCredential {
            header: h.to_ascii_lowercase(),
            from_env: v,
            prefix,
            username,
            kind,
            from_file,
            token_url,
        }),
        _ => None,
    }
}

/// `credential.username`: HTTP Basic in `authorization`, no `prefix`.
/// `Err(())` when it was given and is refused (reported).
fn read_username(
    cx: &mut Cx<'_>,
    c: &Table<'_, '_>,
    header: Option<&str>,
) -> Result<Option<String>, ()> {
    let Some((u, span)) = c.str(cx, "username") else {
        return if c.table.contains_key("username") {
            Err(())
        } else {
            Ok(None)
        };
    };
    let path = c.path.key("username");
    let mut ok = true;
    if u.is_empty() || u.contains(':') || !u.bytes().all(|b| b.is_ascii_graphic()) {
        cx.error(
            "invalid_value",
            &span,
            &path,
            format!(
                "`{}` is not an HTTP Basic user name (printable ASCII, no spaces, no `:`)",
                u.escape_default()
            ),
        );
        ok = false;
    }
    if let Some(h) = header
        && !h.eq_ignore_ascii_case("authorization")
    {
        cx.error(
            "invalid_value",
            &span,
            &path,
            format!("`username` sends HTTP Basic in `authorization`, but `header` is `{h}`"),
        )
        .help("set `header = \"authorization\"`, or remove `username`");
        ok = false;
    }
    if c.table.contains_key("prefix") {
        cx.error(
            "invalid_value",
            &span,
            &path,
            "`username` and `prefix` cannot both be set: the relay sends `Basic base64(username:secret)`",
        )
        .help("remove `prefix`");
        ok = false;
    }
    if ok { Ok(Some(u)) } else { Err(()) }
}

fn read_relay_limits(cx: &mut Cx<'_>, r: &Table<'_, '_>) -> RelayLimits {
    let Some(l) = r.table(cx, "limits") else {
        return RelayLimits::default();
    };
    l.deny_unknown(
        cx,
        &[
            "max_body",
            "max_buffered",
            "connections",
            "header_timeout",
            "body_idle_timeout",
            "body_timeout",
        ],
    );
    let mut limits = RelayLimits {
        max_body: size(cx, &l, "max_body"),
        max_buffered: size(cx, &l, "max_buffered"),
        connections: l.uint(cx, "connections"),
        header_timeout: duration(cx, &l, "header_timeout"),
        body_idle_timeout: duration(cx, &l, "body_idle_timeout"),
        body_timeout: duration(cx, &l, "body_timeout"),
    };
    for (key, value) in [
        ("max_body", &mut limits.max_body),
        ("max_buffered", &mut limits.max_buffered),
        ("connections", &mut limits.connections),
        ("header_timeout", &mut limits.header_timeout),
        ("body_idle_timeout", &mut limits.body_idle_timeout),
        ("body_timeout", &mut limits.body_timeout),
    ] {
        if *value == Some(0)
            && let Some(item) = l.get(key)
        {
            cx.error(
                "invalid_value",
                &item.span(),
                &l.path.key(key),
                format!("`{key}` must be at least 1 (0 would refuse every request)"),
            );
            *value = None;
        }
    }
    if let (Some(body), Some(total)) = (limits.max_body, limits.max_buffered)
        && body > total
        && let Some(item) = l.get("max_body")
    {
        cx.error(
            "invalid_value",
            &item.span(),
            &l.path.key("max_body"),
            "`max_body` is larger than `max_buffered`: such a body could never be relayed",
        );
    }
    limits
}

/// Most `evidence.ship` URLs (each runs a shipper thread).
const MAX_SHIP_URLS: usize = 16;

fn read_evidence(cx: &mut Cx<'_>, t: &Table<'_, '_>) -> Evidence {
    t.deny_unknown(
        cx,
        &[
            "ship",
            "on_backlog",
            "ship_buffer",
            "tls_ca",
            "tls_cert",
            "tls_key",
        ],
    );
    let mut e = Evidence::default();
    let urls = t.str_array(cx, "ship");
    if urls.len() > MAX_SHIP_URLS {
        cx.error(
            "invalid_value",
            &t.span,
            &t.path.key("ship"),
            format!("at most {MAX_SHIP_URLS} collector URLs"),
        );
    }
    let mut tls_urls = Vec::new();
    for (url, span, path) in urls.into_iter().take(MAX_SHIP_URLS) {
        if url.starts_with("syslog+tls://") {
            tls_urls.push((url.clone(), span.clone(), path.clone()));
        }
        match check_ship_url(&url) {
            Ok(()) if e.ship.contains(&url) => {
                cx.error(
                    "invalid_value",
                    &span,
                    &path,
                    format!("`{url}` is listed twice"),
                );
            }
            Ok(()) => e.ship.push(url),
            Err(msg) => {
                cx.error("invalid_value", &span, &path, msg);
            }
        }
    }
    if let Some((v, span)) = t.str(cx, "on_backlog") {
        match v.as_str() {
            "record" => e.on_backlog = OnBacklog::Record,
            "refuse" => e.on_backlog = OnBacklog::Refuse,
            other => {
                cx.error(
                    "invalid_value",
                    &span,
                    &t.path.key("on_backlog"),
                    format!("unknown on_backlog `{other}`"),
                )
                .help("expected `record` or `refuse`");
            }
        }
    }
    let mut tls_path = |key: &str| {
        let (text, span) = t.str(cx, key)?;
        check_abs(cx, &text, &span, &t.path.key(key)).then_some(text)
    };
    e.tls_ca = tls_path("tls_ca");
    e.tls_cert = tls_path("tls_cert");
    e.tls_key = tls_path("tls_key");
    if e.tls_cert.is_some() != e.tls_key.is_some() {
        let (given, missing) = if e.tls_cert.is_some() {
            ("tls_cert", "tls_key")
        } else {
            ("tls_key", "tls_cert")
        };
        let span = t.get(given).map_or(t.span.clone(), |v| v.span());
        cx.error(
            "invalid_value",
            &span,
            &t.path.key(given),
            format!("`{given}` without `{missing}`: a client certificate needs its key"),
        );
    }
    if e.tls_ca.is_none() {
        for (url, span, path) in tls_urls {
            cx.error(
                "ship_tls_ca_missing",
                &span,
                &path,
                format!("`{url}`: syslog+tls needs `tls_ca`, the CA that signed the collector's certificate; refusing rather than trusting any certificate or shipping in clear text"),
            )
            .help("set `tls_ca = \"/etc/palisade/collector-ca.pem\"` in [evidence]");
        }
    }
    if let Some(n) = t.uint(cx, "ship_buffer") {
        if n == 0 {
            let span = t.get("ship_buffer").map_or(t.span.clone(), |v| v.span());
            cx.error(
                "invalid_value",
                &span,
                &t.path.key("ship_buffer"),
                "ship_buffer must be at least 1 record",
            );
        } else {
            e.ship_buffer = n;
        }
    }
    e
}

fn read_outward(cx: &mut Cx<'_>, t: &Table<'_, '_>) -> Outward {
    t.deny_unknown(cx, &["default", "allow", "deny"]);
    let mut o = Outward::default();
    if let Some((d, span)) = t.str(cx, "default") {
        match d.as_str() {
            "ask" => o.default = OutwardDefault::Ask,
            "deny" => o.default = OutwardDefault::Deny,
            "allow" => {
                cx.error(
                    "invalid_value",
                    &span,
                    &t.path.key("default"),
                    "`allow` as the default would approve every outward action",
                )
                .help("use `ask` or `deny`, and list what may run unasked in `outward.allow`");
            }
            other => {
                cx.error(
                    "invalid_value",
                    &span,
                    &t.path.key("default"),
                    format!("unknown default `{other}`"),
                )
                .help("expected `ask` or `deny`");
            }
        }
    }
    o.allow = outward_rules(cx, t, "allow");
    o.deny = outward_rules(cx, t, "deny");
    o
}

fn outward_rules(cx: &mut Cx<'_>, t: &Table<'_, '_>, key: &str) -> Vec<OutwardRule> {
    let mut out = Vec::new();
    for r in t.table_array(cx, key) {
        r.deny_unknown(cx, &["kind", "target"]);
        let Some((kind, kspan)) = required_str(cx, &r, "kind") else {
            continue;
        };
        let kind = match OutwardKind::parse(&kind) {
            Ok(k) => k,
            Err(msg) => {
                cx.error("invalid_value", &kspan, &r.path.key("kind"), msg);
                continue;
            }
        };
        let target = match r.str(cx, "target") {
            None => None,
            Some((text, span)) => match TargetGlob::parse(&text) {
                Ok(g) => Some(g),
                Err(msg) => {
                    cx.error("invalid_value", &span, &r.path.key("target"), msg);
                    continue;
                }
            },
        };
        out.push(OutwardRule { kind, target });
    }
    out
}

fn read_taint(cx: &mut Cx<'_>, t: &Table<'_, '_>) -> Taint {
    t.deny_unknown(
        cx,
        &[
            "sources",
            "untrusted_paths",
            "marked",
            "marks_file",
            "steering_paths",
            "egress_allow",
            "observe",
        ],
    );
    let mut taint = Taint::default();
    if let Some((o, span)) = t.str(cx, "observe") {
        match TaintObserve::parse(&o) {
            Some(v) => taint.observe = v,
            None => {
                let all: Vec<&str> = TaintObserve::ALL.iter().map(|v| v.as_str()).collect();
                let help = match reader::nearest(&o, &all) {
                    Some(n) => format!("did you mean `{n}`? expected one of: {}", all.join(", ")),
                    None => format!("expected one of: {}", all.join(", ")),
                };
                cx.error(
                    "invalid_value",
                    &span,
                    &t.path.key("observe"),
                    format!("unknown observe mode `{o}`"),
                )
                .help(help);
            }
        }
    }
    if t.table.contains_key("sources") {
        taint.sources.clear();
        for (name, span, path) in t.str_array(cx, "sources") {
            match TaintSourceKind::parse(&name) {
                Some(k) => {
                    taint.sources.insert(k);
                }
                None => {
                    let all: Vec<&str> = TaintSourceKind::ALL.iter().map(|k| k.as_str()).collect();
                    cx.error(
                        "invalid_value",
                        &span,
                        &path,
                        format!("unknown taint source `{name}`"),
                    )
                    .help(format!("expected one of: {}", all.join(", ")));
                }
            }
        }
    }
    taint.untrusted_paths = globs(cx, t, "untrusted_paths");
    taint.marked = globs(cx, t, "marked");
    if let Some((f, span)) = t.str(cx, "marks_file") {
        if f.is_empty() || f.contains('\0') {
            cx.error(
                "invalid_value",
                &span,
                &t.path.key("marks_file"),
                "expected a file path",
            );
        } else {
            taint.marks_file = f;
        }
    }
    taint.steering_paths = globs(cx, t, "steering_paths");
    taint.egress_allow = host_patterns(cx, t, "egress_allow");
    taint
}

/// Lints over the whole model: valid but risky or contradictory choices.
fn lint(cx: &mut Cx<'_>, root: &Table<'_, '_>, p: &HostPolicy) {
    let span_of = |path: &Path| span_at(root, path);
    let egress_path = Path::root().key("egress");
    // A relay origin that the worker may also reach directly.
    for (i, relay) in p.egress.relays.iter().enumerate() {
        let host = RequestHost::parse(&relay.origin.host);
        if let Ok(host) = host
            && let Some(j) = p
                .egress
                .allow
                .iter()
                .position(|a| a.matches(&host, relay.origin.port))
        {
            let path = egress_path.key("allow").index(j);
            if relay.is_outward() {
                cx.warning(
                    "relay_origin_allowed",
                    &span_of(&path),
                    &path,
                    format!(
                        "`{}` names relay `{}`'s origin, which the proxy refuses anyway: an outward relay's origin is reached only through the relay (`relay_required`)",
                        p.egress.allow.get(j).map(ToString::to_string).unwrap_or_default(),
                        relay.name
                    ),
                )
                .help(format!("remove the allow entry; the worker reaches `{}` through relay index {i}", relay.origin));
                continue;
            }
            cx.warning(
                    "relay_origin_allowed",
                    &span_of(&path),
                    &path,
                    format!(
                        "`{}` also lets the worker reach relay `{}`'s origin directly, around the relay's route list",
                        p.egress.allow.get(j).map(ToString::to_string).unwrap_or_default(),
                        relay.name
                    ),
                )
                .help(format!("remove the allow entry; the worker reaches `{}` through relay index {i}", relay.origin));
        }
    }
    // An allow entry that a deny entry fully covers: dead.
    for (j, a) in p.egress.allow.iter().enumerate() {
        if let Some(d) = p.egress.deny.iter().find(|d| d.covers(a)) {
            let path = egress_path.key("allow").index(j);
            cx.warning(
                "allow_shadowed",
                &span_of(&path),
                &path,
                format!("`{a}` can never match: `{d}` in `egress.deny` covers it"),
            );
        }
    }
    // taint.egress_allow entries outside egress.allow have no effect.
    for (j, a) in p.taint.egress_allow.iter().enumerate() {
        if !p.egress.allow.iter().any(|e| e.covers(a)) {
            let path = Path::root().key("taint").key("egress_allow").index(j);
            cx.warning(
                "taint_allow_not_allowed",
                &span_of(&path),
                &path,
                format!("`{a}` is not covered by `egress.allow`, so a tainted session still cannot reach it"),
            )
            .help("taint only narrows egress; add the host to `egress.allow` as well");
        }
    }
    // Wildcards over domains where anyone can publish a subdomain, and over
    // two-label public suffixes.
    for (key, list) in [
        ("allow", &p.egress.allow),
        ("egress_allow", &p.taint.egress_allow),
    ] {
        let base_path = if key == "allow" {
            egress_path.key("allow")
        } else {
            Path::root().key("taint").key("egress_allow")
        };
        for (j, pat) in list.iter().enumerate() {
            if !pat.is_wildcard() {
                continue;
            }
            let path = base_path.index(j);
            if let Some(shared) = SHARED_HOSTING
                .iter()
                .find(|d| pat.base() == **d || pat.base().ends_with(&format!(".{d}")))
            {
                cx.warning(
                    "shared_hosting_wildcard",
                    &span_of(&path),
                    &path,
                    format!("anyone can run a server under `{shared}`: `{pat}` lets the worker reach (and send data to) hosts an attacker controls"),
                )
                .help("list the exact hosts the worker needs");
            } else if PUBLIC_SUFFIXES_2.contains(&pat.base()) {
                cx.warning(
                    "wildcard_public_suffix",
                    &span_of(&path),
                    &path,
                    format!(
                        "`{}` is a public suffix: `{pat}` matches every domain registered under it",
                        pat.base()
                    ),
                );
            }
        }
    }
    // Address ranges wider than a /8 (IPv4) or /16 (IPv6) let almost everything through.
    for (j, c) in p.egress.allow_addresses.iter().enumerate() {
        let wide = if c.addr().is_ipv4() {
            c.prefix() < 8
        } else {
            c.prefix() < 16
        };
        if wide {
            let path = egress_path.key("allow_addresses").index(j);
            cx.warning(
                "wide_address_range",
                &span_of(&path),
                &path,
                format!(
                    "`{c}` lets most of the address space through the proxy's address deny set"
                ),
            );
        }
    }
    // Outward allow rules that approve too much.
    let outward_path = Path::root().key("outward").key("allow");
    for (j, r) in p.outward.allow.iter().enumerate() {
        let span = span_of(&outward_path.index(j));
        let any_target = r.target.as_ref().is_none_or(TargetGlob::is_match_all);
        if r.kind.as_str() == "*" {
            cx.warning(
                "outward_allow_everything",
                &span,
                &outward_path.index(j),
                "an allow rule for every kind approves every outward action without asking",
            );
        } else if any_target
            && (r.kind.covers("payment")
                || r.kind.covers("booking")
                || r.kind.as_str() == "payment"
                || r.kind.as_str() == "booking")
        {
            cx.warning(
                "outward_allow_untargeted",
                &span,
                &outward_path.index(j),
                format!(
                    "`{}` is allowed for every target: money and bookings should name a target",
                    r.kind
                ),
            )
            .help("add `target = \"…\"` naming the merchant or account");
        } else if any_target && (r.kind.covers("git.force_push") || r.kind.covers("git.delete_ref"))
        {
            cx.warning(
                "outward_allow_untargeted",
                &span,
                &outward_path.index(j),
                format!(
                    "`{}` is allowed for every target: it rewrites or deletes any branch of any repository the credential reaches, unasked",
                    r.kind
                ),
            )
            .help("add `target = \"github.com/OWNER/REPO:refs/heads/agent/*\"` naming the refs");
        } else if any_target {
            cx.warning(
                "outward_allow_untargeted",
                &span,
                &outward_path.index(j),
                format!("`{}` is allowed for every target", r.kind),
            );
        }
        if !r.kind.is_builtin()
            && BUILTIN_FAMILIES
                .iter()
                .any(|f| r.kind.as_str().starts_with(f))
        {
            cx.warning(
                "unknown_kind",
                &span,
                &outward_path.index(j).key("kind"),
                format!("`{}` is not a built-in kind; is it a typo?", r.kind),
            )
            .help(format!(
                "built-in kinds: {}",
                BUILTIN_OUTWARD_KINDS.join(", ")
            ));
        }
    }
    // A force push in two steps: delete the ref, then push it anew.
    let deny_path = Path::root().key("outward").key("deny");
    for (j, a) in p.outward.allow.iter().enumerate() {
        if !a.kind.covers("git.delete_ref") {
            continue;
        }
        let force_denied = p.outward.deny.iter().enumerate().find(|(_, d)| {
            d.kind.covers("git.force_push")
                && !d.kind.covers("git.delete_ref")
                && targets_may_overlap(a.target.as_ref(), d.target.as_ref())
                && !p.outward.deny.iter().any(|e| {
                    e.kind.covers("git.delete_ref")
                        && target_covers(e.target.as_ref(), d.target.as_ref())
                })
        });
        if let Some((i, _)) = force_denied {
            let path = outward_path.index(j);
            cx.warning(
                "outward_delete_allowed_with_force_denied",
                &span_of(&path),
                &path,
                format!(
                    "`{}` lets `git.delete_ref` run unasked where {} denies `git.force_push`: deleting a ref and pushing it again is a force push in two steps",
                    a.kind,
                    deny_path.index(i)
                ),
            )
            .help("deny or ask `git.delete_ref` on the same targets (allow `git.push` rather than `git`)");
        }
    }
    // The weaker write mode, chosen on purpose or by accident.
    if p.worker.writes == Writes::Direct {
        let path = Path::root().key("worker").key("writes");
        cx.warning(
            "direct_writes",
            &span_of(&path),
            &path,
            "the worker writes the host tree directly: nothing it leaves in a writable root passes the commit filter, only the protected names are kept read-only",
        )
        .help("remove it (staged is the default), unless the worker must write through to the host while it runs");
    }
    // A writable worker whose steering writes nobody will see.
    if p.taint.steering_paths.is_empty() && !p.worker.writable.is_empty() {
        let path = Path::root().key("worker").key("writable");
        cx.warning(
            "no_steering_paths",
            &span_of(&path),
            &path,
            "the worker can write, but `taint.steering_paths` is empty: writes to workflows, agent instructions or this policy are not flagged",
        )
        .help("add e.g. steering_paths = [\".paseo/**\", \"AGENTS.md\", \"CLAUDE.md\", \"palisade.toml\"]");
    }
    // Routing rules that send to no provider.
    for (i, r) in p.routing.iter().enumerate() {
        if r.providers.is_empty() {
            let path = Path::root().key("routing").index(i).key("providers");
            cx.warning(
                "route_nowhere",
                &span_of(&path),
                &path,
                "no provider may receive these paths; a session that reads them cannot dispatch anywhere",
            );
        }
    }
    // Reads of watched paths seen only when the worker reports them.
    if p.taint.observe == TaintObserve::SelfReport {
        let watched = [
            ("taint.marked", !p.taint.marked.is_empty()),
            ("taint.untrusted_paths", !p.taint.untrusted_paths.is_empty()),
            ("[[routing]] paths", !p.routing.is_empty()),
        ];
        let named: Vec<&str> = watched
            .iter()
            .filter(|(_, on)| *on)
            .map(|(k, _)| *k)
            .collect();
        if !named.is_empty() {
            let path = Path::root().key("taint").key("observe");
            cx.warning(
                "observe_self_report",
                &span_of(&path),
                &path,
                format!(
                    "reads of the paths in {} are seen only when the worker reports them with `palisade ctl taint`; a worker that does not report them is never tainted or routed by them",
                    named.join(", ")
                ),
            )
            .help("remove `observe` (the default `kernel` observes the reads without the worker's help)");
        }
    }
    // Routing providers that nothing is bound to: likely a typo.
    let mut known: BTreeSet<&str> = BUILTIN_PROVIDER_HOSTS.iter().map(|(n, _)| *n).collect();
    known.extend(p.egress.relays.iter().map(|r| r.provider.as_str()));
    known.extend(
        p.egress
            .provider_hosts
            .iter()
            .filter(|(_, hosts)| !hosts.is_empty())
            .map(|(name, _)| name.as_str()),
    );
    let known: Vec<&str> = known.into_iter().collect();
    let routing_path = Path::root().key("routing");
    for (i, r) in p.routing.iter().enumerate() {
        let providers_path = routing_path.index(i).key("providers");
        let listed = span_at(root, &providers_path);
        for name in &r.providers {
            if known.contains(&name.as_str()) {
                continue;
            }
            // The element's own span: the rule's providers array in file order.
            let j = provider_index(root, &providers_path, name);
            let path = j.map_or_else(|| providers_path.clone(), |j| providers_path.index(j));
            let span = if j.is_some() {
                span_at(root, &path)
            } else {
                listed.clone()
            };
            let help = match reader::nearest(name, &known) {
                Some(n) => format!(
                    "did you mean `{n}`? providers with a relay or API hosts: {}",
                    known.join(", ")
                ),
                None => format!(
                    "bind a relay to it (`[[egress.relay]] provider = \"{name}\"`) or list its API hosts in `[egress.provider_hosts]`"
                ),
            };
            cx.warning(
                "routing_provider_unbound",
                &span,
                &path,
                format!(
                    "no relay is bound to provider `{name}` and it has no API hosts: is it a typo?"
                ),
            )
            .help(help);
        }
    }
    // A relay bound to one provider whose origin is another provider's API host.
    for (i, relay) in p.egress.relays.iter().enumerate() {
        let Ok(host) = RequestHost::parse(&relay.origin.host) else {
            continue;
        };
        let mut owners: BTreeSet<&str> = BTreeSet::new();
        for (name, hosts) in BUILTIN_PROVIDER_HOSTS {
            if hosts
                .iter()
                .filter_map(|h| HostPattern::parse(h).ok())
                .any(|h| h.matches_name(&host))
            {
                owners.insert(name);
            }
        }
        for (name, hosts) in &p.egress.provider_hosts {
            if hosts.iter().any(|h| h.matches_name(&host)) {
                owners.insert(name);
            }
        }
        if !owners.is_empty() && !owners.contains(relay.provider.as_str()) {
            let path = egress_path.key("relay").index(i);
            let owners: Vec<&str> = owners.into_iter().collect();
            cx.warning(
                "relay_provider_mismatch",
                &span_of(&path),
                &path,
                format!(
                    "relay `{}` is bound to provider `{}`, but its origin `{}` is an API host of `{}`: routing rules decide its requests by `{}`",
                    relay.name,
                    relay.provider,
                    relay.origin.host,
                    owners.join("`, `"),
                    relay.provider
                ),
            )
            .help(format!("set `provider = \"{}\"` on the relay", owners.first().copied().unwrap_or_default()));
        }
    }
    // A worker that can write the policy file or its steering paths is worth a look.
    if p.taint.sources.is_empty() {
        let path = Path::root().key("taint").key("sources");
        cx.warning(
            "taint_disabled",
            &span_of(&path),
            &path,
            "no taint source is enabled: untrusted content never tightens the session",
        );
    }
}

/// Domains under which anyone can get a subdomain that runs their own code
/// or receives their own traffic. Not exhaustive.
const SHARED_HOSTING: &[&str] = &[
    "amazonaws.com",
    "appspot.com",
    "azurewebsites.net",
    "cloudfront.net",
    "cloudfunctions.net",
    "fly.dev",
    "github.io",
    "glitch.me",
    "herokuapp.com",
    "netlify.app",
    "ngrok.io",
    "ngrok-free.app",
    "onrender.com",
    "pages.dev",
    "repl.co",
    "run.app",
    "trycloudflare.com",
    "vercel.app",
    "workers.dev",
];

/// Common two-label public suffixes (palisade carries no full public-suffix list).
const PUBLIC_SUFFIXES_2: &[&str] = &[
    "ac.uk", "co.in", "co.jp", "co.kr", "co.nz", "co.uk", "co.za", "com.au", "com.br", "com.cn",
    "com.mx", "com.tr", "gov.uk", "net.au", "org.au", "org.uk",
];

/// The span of the node at `path`, or of the nearest ancestor that exists.
fn span_at(root: &Table<'_, '_>, path: &Path) -> Range<usize> {
    use crate::PathSegment;
    use toml::de::DeValue;
    let mut span = root.span.clone();
    let mut cur: Option<&DeValue<'_>> = None;
    let mut table = Some(root.table);
    for seg in &path.0 {
        let next = match (seg, table, cur) {
            (PathSegment::Key(k), Some(t), _) => t.get(k.as_str()),
            (PathSegment::Index(i), _, Some(DeValue::Array(items))) => items.get(*i),
            _ => None,
        };
        let Some(v) = next else { break };
        span = v.span();
        cur = Some(v.get_ref());
        table = match v.get_ref() {
            DeValue::Table(t) => Some(t),
            _ => None,
        };
    }
    span
}

/// The index of `name` in the string array at `path` (its first occurrence).
fn provider_index(root: &Table<'_, '_>, path: &Path, name: &str) -> Option<usize> {
    use crate::PathSegment;
    use toml::de::DeValue;
    let mut cur: Option<&DeValue<'_>> = None;
    let mut table = Some(root.table);
    for seg in &path.0 {
        let next = match (seg, table, cur) {
            (PathSegment::Key(k), Some(t), _) => t.get(k.as_str()),
            (PathSegment::Index(i), _, Some(DeValue::Array(items))) => items.get(*i),
            _ => None,
        }?;
        cur = Some(next.get_ref());
        table = match next.get_ref() {
            DeValue::Table(t) => Some(t),
            _ => None,
        };
    }
    match cur? {
        DeValue::Array(items) => items
            .iter()
            .position(|v| matches!(v.get_ref(), DeValue::String(s) if s.as_ref() == name)),
        _ => None,
    }
}

const BUILTIN_FAMILIES: &[&str] = &["git.", "github.", "mail.", "booking.", "payment."];

fn host_patterns(cx: &mut Cx<'_>, t: &Table<'_, '_>, key: &str) -> Vec<HostPattern> {
    let mut out: Vec<HostPattern> = Vec::new();
    for (text, span, path) in t.str_array(cx, key) {
        if let Some(p) = host_pattern(cx, &out, &text, &span, &path) {
            out.push(p);
        }
    }
    out
}

/// One authored host pattern, unless it is invalid (an error) or already in
/// `seen` (a warning).
fn host_pattern(
    cx: &mut Cx<'_>,
    seen: &[HostPattern],
    text: &str,
    span: &Range<usize>,
    path: &Path,
) -> Option<HostPattern> {
    match HostPattern::parse(text) {
        Ok(p) => {
            if seen.contains(&p) {
                cx.warning("duplicate", span, path, format!("`{p}` is listed twice"));
                None
            } else {
                if p.to_string() != text && p.to_string() != text.to_ascii_lowercase() {
                    cx.warning(
                        "not_normalised",
                        span,
                        path,
                        format!("`{text}` is compared as `{p}`"),
                    )
                    .help(format!("write `{p}`"));
                }
                Some(p)
            }
        }
        Err(err) => {
            let diag = cx.error(
                "invalid_host_pattern",
                span,
                path,
                format!("`{text}`: {err}"),
            );
            match err {
                HostError::MatchAll | HostError::WildcardTld => {
                    diag.help("list the hosts the worker needs, such as `api.github.com:443`");
                }
                HostError::IpLiteral | HostError::Localhost => {
                    diag.help("name rules take DNS names; let addresses through with `egress.allow_addresses`");
                }
                _ => {}
            }
            None
        }
    }
}

fn globs(cx: &mut Cx<'_>, t: &Table<'_, '_>, key: &str) -> Vec<PathGlob> {
    let mut out = Vec::new();
    for (text, span, path) in t.str_array(cx, key) {
        match PathGlob::parse(&text) {
            Ok(g) => out.push(g),
            Err(msg) => {
                cx.error("invalid_glob", &span, &path, msg);
            }
        }
    }
    out
}

fn abs_paths(cx: &mut Cx<'_>, t: &Table<'_, '_>, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (text, span, path) in t.str_array(cx, key) {
        if check_abs(cx, &text, &span, &path) {
            out.push(text);
        }
    }
    out
}

fn check_abs(cx: &mut Cx<'_>, text: &str, span: &Range<usize>, path: &Path) -> bool {
    if !text.starts_with('/')
        || text.contains('\0')
        || text.split('/').any(|s| s == ".." || s == ".")
    {
        cx.error(
            "invalid_path",
            span,
            path,
            format!("`{text}` must be an absolute path without `.` or `..` segments"),
        );
        false
    } else {
        true
    }
}

fn size(cx: &mut Cx<'_>, t: &Table<'_, '_>, key: &str) -> Option<u64> {
    let (text, span) = t.quantity(cx, key)?;
    match parse_size(&text) {
        Ok(n) => Some(n),
        Err(msg) => {
            cx.error("invalid_value", &span, &t.path.key(key), msg);
            None
        }
    }
}

/// `cpus = 1.5` (or `"1.5"`, or `2`): thousandths of a CPU, at least 1
/// thousandth and at most three decimals.
fn cpus(cx: &mut Cx<'_>, t: &Table<'_, '_>, key: &str) -> Option<u64> {
    let v = t.get(key)?;
    let text = match v.get_ref() {
        toml::de::DeValue::Float(f) => f.as_str().to_owned(),
        toml::de::DeValue::Integer(i) if i.radix() == 10 => i.as_str().to_owned(),
        toml::de::DeValue::String(s) => s.to_string(),
        _ => {
            cx.error(
                "invalid_value",
                &v.span(),
                &t.path.key(key),
                "expected a number of CPUs such as `1.5`",
            );
            return None;
        }
    };
    match parse_millis(&text) {
        Some(n) if n > 0 => Some(n),
        _ => {
            cx.error(
                "invalid_value",
                &v.span(),
                &t.path.key(key),
                format!("`{text}` is not a positive number of CPUs with at most three decimals"),
            )
            .help("for example `cpus = 1.5`");
            None
        }
    }
}

/// `"1.5"` as 1500; `None` for anything but digits with an optional
/// fraction of at most three digits.
fn parse_millis(text: &str) -> Option<u64> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    if int.is_empty()
        || frac.len() > 3
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: u64 = int.parse().ok()?;
    let mut f: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    for _ in frac.len()..3 {
        f *= 10;
    }
    whole.checked_mul(1000)?.checked_add(f)
}

fn duration(cx: &mut Cx<'_>, t: &Table<'_, '_>, key: &str) -> Option<u64> {
    let (text, span) = t.quantity(cx, key)?;
    match parse_duration(&text) {
        Ok(n) => Some(n),
        Err(msg) => {
            cx.error("invalid_value", &span, &t.path.key(key), msg);
            None
        }
    }
}

fn required_str(cx: &mut Cx<'_>, t: &Table<'_, '_>, key: &str) -> Option<(String, Range<usize>)> {
    if !t.table.contains_key(key) {
        cx.error(
            "missing_key",
            &t.span,
            &t.path.key(key),
            format!("missing required key `{key}`"),
        );
        return None;
    }
    t.str(cx, key)
}

fn is_env_name(s: &str) -> bool {
    s.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __fuzz {
    //! Fuzz entry points; not part of the public API, no semver guarantee
    //! (feature `testing`).

    /// Parses arbitrary bytes as a policy; must never panic.
    pub fn parse(data: &[u8]) {
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = super::parse("fuzz.toml", text);
        }
    }

    /// Parses arbitrary bytes as a host pattern and checks invariants.
    pub fn host_pattern(data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        if let Ok(p) = super::HostPattern::parse(text) {
            // Normalisation is idempotent and the pattern covers itself.
            let again = super::HostPattern::parse(&p.to_string());
            assert_eq!(again.as_ref(), Ok(&p), "normalisation is not idempotent");
            assert!(p.covers(&p));
            if p.is_wildcard() {
                let bare = super::RequestHost::parse(p.base());
                assert!(
                    bare.is_ok_and(|h| !p.matches_name(&h)),
                    "wildcard matched its base"
                );
            }
        }
        let _ = super::RequestHost::parse(text);
        let _ = super::split_authority(text);
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod relay_tests;
