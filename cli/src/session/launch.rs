//! `palisade run --policy …`: start the proxy, the relays and the control
//! channel on private Unix sockets, bridge them into the sandbox's network
//! namespace, launch the worker, record everything in one sealed journal,
//! and close it whatever happens to the worker.

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use palisade_egress::control::{ControlConfig, ControlListener, ControlServer, Endpoint};
use palisade_egress::proxy::{Listener, Proxy, ProxyToken, Shutdown, shutdown_channel};
use palisade_egress::relay::{PrivateSocket, Relay};
use palisade_egress::resolve::{BoxFuture, HostsFirstResolver, Resolver};
use palisade_evidence::{Flags, JournalWriter, Kind, Timestamp, WriterOptions};
use palisade_isolate::{Bridge, Command, Sandbox};
use palisade_schema::host_policy::{HostPolicy, TaintObserve};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::core::{Journal, SessionCore, now_ms};
use super::observe::SessionObserver;
use crate::steering::SteeringWatch;

/// Port of the egress proxy inside the sandbox.
pub(crate) const PROXY_PORT: u16 = 3128;
/// Port of the control channel inside the sandbox.
pub(crate) const CONTROL_PORT: u16 = 3129;
/// First relay port inside the sandbox (one port per relay, in policy order).
pub(crate) const FIRST_RELAY_PORT: u16 = 3130;

/// How long a worker has to stop after palisade forwarded a stop signal.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// Exit status of a setup failure (as `palisade run`).
const EXIT_SETUP: u8 = 125;

/// What the policy-driven form of `palisade run` adds to the sandbox.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct GovernedArgs {
    /// The host policy (`palisade.toml`): egress, relays, outward, taint.
    /// With it, the worker runs as a governed session.
    #[arg(long, value_name = "FILE")]
    pub(crate) policy: Option<PathBuf>,
    /// The session's journal (created; an existing file is refused).
    #[arg(long, value_name = "FILE", requires = "policy")]
    pub(crate) journal: Option<PathBuf>,
    /// The journal key file (`palisade journal keygen`).
    #[arg(long, value_name = "FILE", requires = "policy")]
    pub(crate) key: Option<PathBuf>,
    /// Pin a name to an address for the proxy and relays, like curl's
    /// `--resolve` (repeatable, `NAME=IP`). The address still has to pass
    /// the address deny set or `egress.allow_addresses`.
    #[arg(long = "resolve", value_name = "NAME=IP", requires = "policy")]
    pub(crate) resolve: Vec<String>,
    /// Trust only the certificates in this PEM file for relay upstreams
    /// (instead of the public web roots), e.g. a private provider gateway.
    #[arg(long, value_name = "PEM", requires = "policy")]
    pub(crate) relay_ca: Option<PathBuf>,
    /// Where the host endpoint for `palisade approve` listens (default: in
    /// the session's private directory, printed at start).
    #[arg(long, value_name = "SOCKET", requires = "policy")]
    pub(crate) approve_socket: Option<PathBuf>,
    /// Seconds an outward `ask` waits for `palisade approve` before it is denied.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 300,
        requires = "policy"
    )]
    pub(crate) approval_timeout: u64,
    /// The hub workflow (a repository root, a `.paseo` folder or a
    /// single-file workflow) whose step the worker runs. Its exact tool
    /// grant and translated provider options are written, read-only, to
    /// `.palisade/step-grant.json` in the working directory, and recorded.
    #[arg(long, value_name = "PATH", requires_all = ["policy", "trigger", "step"])]
    pub(crate) workflow: Option<PathBuf>,
    /// The workflow trigger.
    #[arg(long, value_name = "T", requires = "workflow")]
    pub(crate) trigger: Option<String>,
    /// The workflow step.
    #[arg(long, value_name = "S", requires = "workflow")]
    pub(crate) step: Option<String>,
    /// The run's output context: slack, discord, github, linear (trigger
    /// documents) or manual.
    #[arg(
        long,
        value_name = "C",
        requires = "workflow",
        default_value = "manual"
    )]
    pub(crate) context: String,
    /// Run this agent's preset (claude, codex, opencode, pi): its relays,
    /// environment, config files, state directory and protected files are
    /// added to the policy (what the policy says wins). The policy's
    /// `[worker] agent`, when set, must name the same agent.
    #[arg(long, value_name = "NAME", requires = "policy")]
    pub(crate) agent: Option<String>,
    /// Ship the session's journal to this collector while it runs
    /// (`relp://HOST:PORT`, `syslog+tcp://HOST:PORT` or
    /// `syslog+tls://HOST:PORT` with the policy's `evidence.tls_ca`;
    /// repeatable; added to the policy's `evidence.ship`).
    #[arg(long, value_name = "URL", requires = "policy")]
    pub(crate) ship: Vec<String>,
}

/// Resolves pinned names from a table and everything else on the host
/// (`/etc/hosts` in process when nsswitch consults it first, as
/// `palisade proxy` does; `getaddrinfo` otherwise).
#[derive(Debug)]
struct PinnedResolver {
    pins: HashMap<String, Vec<IpAddr>>,
    host: HostsFirstResolver,
}

impl Resolver for PinnedResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        match self.pins.get(&name.to_ascii_lowercase()) {
            Some(a) => {
                let a = a.clone();
                Box::pin(async move { Ok(a) })
            }
            None => self.host.resolve(name),
        }
    }
}

fn pins(args: &[String]) -> Result<HashMap<String, Vec<IpAddr>>, String> {
    let mut out: HashMap<String, Vec<IpAddr>> = HashMap::new();
    for a in args {
        let (name, ip) = a
            .split_once('=')
            .ok_or_else(|| format!("--resolve `{a}` is not NAME=IP"))?;
        let ip: IpAddr = ip
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("--resolve `{a}`: `{ip}` is not an IP address"))?;
        out.entry(name.trim_end_matches('.').to_ascii_lowercase())
            .or_default()
            .push(ip);
    }
    Ok(out)
}

fn setup_failure(msg: impl std::fmt::Display) -> Result<ExitCode, String> {
    eprintln!("palisade: {msg}");
    Ok(ExitCode::from(EXIT_SETUP))
}

/// A private directory for this session's sockets.
fn session_dir(id: &str) -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let bases: Vec<PathBuf> = [
        Some(PathBuf::from("/run/palisade")),
        std::env::var_os("XDG_RUNTIME_DIR").map(|d| PathBuf::from(d).join("palisade")),
        Some(std::env::temp_dir().join(format!("palisade-{}", nix::unistd::geteuid()))),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut last = String::new();
    for base in bases {
        if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&base)
        {
            last = format!("{}: {e}", base.display());
            continue;
        }
        let dir = base.join(id);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
                return Ok(dir);
            }
            Err(e) => last = format!("{}: {e}", dir.display()),
        }
    }
    Err(format!(
        "cannot create a private session directory ({last})"
    ))
}

pub(crate) fn random_id() -> Result<String, String> {
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(hex::encode(b))
}

fn load_roots(path: &Path) -> Result<rustls::RootCertStore, String> {
    crate::relay::read_roots(path).map_err(|e| format!("--relay-ca {e}"))
}

/// The shape of a relay's placeholder: credential-shaped for known providers.
/// The variable that gives the worker relay `name`'s base URL.
fn relay_url_var(name: &str) -> String {
    let upper: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("PALISADE_RELAY_{upper}_URL")
}

/// The proxy variables the governed session points at its proxy.
const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// The variables that keep loopback off the proxy.
const NO_PROXY_VARS: &[&str] = &["NO_PROXY", "no_proxy"];

/// The session's own variables (control channel, session id, `palisade`
/// binary, step grant).
const PALISADE_VARS: &[&str] = &[
    "PALISADE_CONTROL",
    "PALISADE_SESSION",
    "PALISADE_BIN",
    "PALISADE_STEP_GRANT",
];

/// What every governed worker gets so that common tools use the proxy as
/// the session means: git's libcurl sends the proxy credentials on the
/// first request (else it tries without, and each git request records a
/// 407 denial), and Node's `fetch` honours `HTTPS_PROXY` (Node 20+ ignores
/// it otherwise, and its requests fail without reaching the journal).
const TOOL_VARS: &[(&str, &str)] = &[
    ("GIT_HTTP_PROXY_AUTHMETHOD", "basic"),
    ("NODE_USE_ENV_PROXY", "1"),
];

/// Whether `name` is one of git's configuration-by-environment variables
/// (`GIT_CONFIG_COUNT`, `GIT_CONFIG_KEY_<n>`, `GIT_CONFIG_VALUE_<n>`), which
/// a session with a git relay sets for the worker.
fn is_git_config_var(name: &str) -> bool {
    name == GIT_CONFIG_COUNT
        || name.starts_with("GIT_CONFIG_KEY_")
        || name.starts_with("GIT_CONFIG_VALUE_")
}

/// git's count of configuration entries given by environment.
const GIT_CONFIG_COUNT: &str = "GIT_CONFIG_COUNT";

/// What a git relay needs from the worker's git: the relay's base URL and
/// the placeholder it presents.
struct GitRelayView<'a> {
    relay: &'a palisade_schema::host_policy::Relay,
    base_url: &'a str,
    placeholder: &'a str,
}

/// The worker's git configuration for the session's git relays, all
/// together, as git reads it from the environment: for each relay,
/// `url.<base>/.insteadOf = <origin>/` (so `git clone https://github.com/…`
/// goes to the relay) and `http.<base>/.extraHeader = <header>: <value>`
/// (the placeholder, as HTTP Basic `base64(<username>:<placeholder>)` when
/// the relay has a `username`, else `<prefix><placeholder>`). Empty without
/// git relays. Two git relays for one origin are an error (git would pick
/// one of them), and so is a header that is not one line of text.
fn git_config_vars(relays: &[GitRelayView<'_>]) -> Result<Vec<(String, String)>, String> {
    use base64::Engine as _;
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut origins: Vec<(String, &str)> = Vec::new();
    for g in relays {
        let r = g.relay;
        if r.kind != palisade_schema::host_policy::RelayKind::Git {
            continue;
        }
        let o = &r.origin;
        let default_port = if o.scheme == "http" { 80 } else { 443 };
        let origin = if o.port == default_port {
            format!("{}://{}/", o.scheme, o.host)
        } else {
            format!("{}://{}:{}/", o.scheme, o.host, o.port)
        };
        if let Some((_, other)) = origins.iter().find(|(seen, _)| *seen == origin) {
            return Err(format!(
                "relays `{other}` and `{}` are both git relays for {origin}: the worker's git can be sent to one of them only; keep one",
                r.name
            ));
        }
        origins.push((origin.clone(), &r.name));
        let value = match &r.credential.username {
            Some(user) => format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD
                    .encode(format!("{user}:{}", g.placeholder))
            ),
            None => format!("{}{}", r.credential.prefix, g.placeholder),
        };
        let header = format!("{}: {value}", r.credential.header);
        if header.chars().any(char::is_control) {
            return Err(format!(
                "relay `{}`: its credential header is not one line of text",
                r.name
            ));
        }
        let base = format!("{}/", g.base_url);
        entries.push((format!("url.{base}.insteadOf"), origin));
        entries.push((format!("http.{base}.extraHeader"), header));
    }
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    let mut vars = vec![(GIT_CONFIG_COUNT.to_owned(), entries.len().to_string())];
    for (i, (k, v)) in entries.into_iter().enumerate() {
        vars.push((format!("GIT_CONFIG_KEY_{i}"), k));
        vars.push((format!("GIT_CONFIG_VALUE_{i}"), v));
    }
    Ok(vars)
}

/// Refuses a variable that `--env` or `[worker] env` sets or passes but the
/// session would set over it (its proxy, control and relay variables, and
/// git's configuration variables when a relay is a git relay): the setting
/// would be silently not applied.
fn check_session_env(sb: &Sandbox, policy: &HostPolicy, policy_path: &Path) -> Result<(), String> {
    // Every variable the session sets in the worker itself, over whatever
    // the flags or the policy's `[worker] env` gave.
    let mut ours: Vec<String> = [PROXY_VARS, NO_PROXY_VARS, PALISADE_VARS]
        .concat()
        .into_iter()
        .map(str::to_owned)
        .collect();
    ours.extend(TOOL_VARS.iter().map(|(k, _)| (*k).to_owned()));
    for r in &policy.egress.relays {
        ours.push(relay_url_var(&r.name));
        ours.extend(r.worker_env.keys().cloned());
    }
    let git = policy
        .egress
        .relays
        .iter()
        .any(|r| r.kind == palisade_schema::host_policy::RelayKind::Git);
    let given = sb
        .env_vars()
        .iter()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .chain(sb.profile().env_allow().iter().cloned());
    for name in given {
        if ours.contains(&name) || (git && is_git_config_var(&name)) {
            return Err(format!(
                "{}: the variable `{name}` (from --env or [worker] env) is set by the governed session itself (its proxy, control or relay variables), so the value given would not reach the worker; remove it",
                policy_path.display()
            ));
        }
    }
    Ok(())
}

/// A relay ready to serve, with what the worker needs to reach it.
struct ReadyRelay {
    relay: Relay,
    socket: PrivateSocket,
    port: u16,
    env: Vec<(String, String)>,
}

/// Environment variables for the worker, in order.
type EnvVars = Vec<(String, String)>;

/// The relays, ready to serve, and the worker's git configuration for
/// the git relays among them ([`git_config_vars`]).
async fn build_relays(
    policy: &HostPolicy,
    dir: &Path,
    roots: Option<&rustls::RootCertStore>,
    resolver: &Arc<PinnedResolver>,
    core: &Arc<SessionCore>,
    addresses: &palisade_egress::addr::AddressPolicy,
    placeholder_key: Option<&[u8]>,
) -> Result<(Vec<ReadyRelay>, EnvVars), String> {
    let mut out = Vec::new();
    let mut git: Vec<(usize, String, palisade_egress::relay::Placeholder)> = Vec::new();
    for (i, r) in policy.egress.relays.iter().enumerate() {
        let port = FIRST_RELAY_PORT
            .checked_add(u16::try_from(i).map_err(|_| "too many relays".to_owned())?)
            .ok_or("too many relays")?;
        // The one place a credential is read: the host's environment or
        // token file (refreshed by the host), never the worker's.
        let mut config = crate::credential::relay_config(r, roots)
            .await?
            .with_addresses(addresses.clone());
        if let Some(roots) = roots {
            config = config
                .with_roots(roots.clone())
                .map_err(|e| format!("relay `{}`: {e}", r.name))?;
        }
        // An agent session's placeholders are stable per policy and relay
        // (keyed by the host-held key), so the agent's remembered answer
        // to "use this key?" stays valid; still never the real key.
        // (A ChatGPT placeholder carries the token file's account id: it
        // keeps the shape the credential made.)
        if let Some(key) = placeholder_key
            && r.credential.kind != palisade_schema::host_policy::CredentialKind::ChatGpt
        {
            let label = format!(
                "{}\n{}://{}:{}",
                r.name, r.origin.scheme, r.origin.host, r.origin.port
            );
            let format = palisade_egress::relay::PlaceholderFormat::for_relay(r);
            config = config.with_placeholder(palisade_egress::relay::Placeholder::derive(
                key, &label, &format,
            ));
        }
        let placeholder = config.placeholder().clone();
        let socket = PrivateSocket::bind(&dir.join(format!("relay-{i}.sock")))
            .map_err(|e| format!("relay `{}`: cannot bind its socket: {e}", r.name))?;
        let base_url = format!("http://127.0.0.1:{port}");
        let mut env = vec![(relay_url_var(&r.name), base_url.clone())];
        for (k, v) in &r.worker_env {
            let value = match v.as_str() {
                "placeholder" => placeholder.expose().to_owned(),
                "relay" | "base_url" => base_url.clone(),
                other => other.to_owned(),
            };
            env.push((k.clone(), value));
        }
        if r.kind == palisade_schema::host_policy::RelayKind::Git {
            git.push((i, base_url.clone(), placeholder.clone()));
        }
        // The session's routing state admits every request, and sees the
        // provider-side web results in the responses.
        let relay = Relay::new(config, resolver.clone(), core.clone()).with_gate(core.clone());
        out.push(ReadyRelay {
            relay,
            socket,
            port,
            env,
        });
    }
    let views: Vec<GitRelayView<'_>> = git
        .iter()
        .filter_map(|(i, base_url, placeholder)| {
            Some(GitRelayView {
                relay: policy.egress.relays.get(*i)?,
                base_url,
                placeholder: placeholder.expose(),
            })
        })
        .collect();
    let git_env = git_config_vars(&views)?;
    Ok((out, git_env))
}

/// Everything bound and built before the worker starts.
struct Services {
    proxy: Proxy,
    proxy_listener: Option<Listener>,
    relays: Vec<ReadyRelay>,
    /// The worker's git configuration for the git relays.
    git_env: Vec<(String, String)>,
    control: ControlServer,
    worker_listener: Option<ControlListener>,
    host_listener: Option<ControlListener>,
    host_path: PathBuf,
    proxy_path: PathBuf,
    control_path: PathBuf,
    token: ProxyToken,
}

/// Runs the worker as a governed session. `sb` is the sandbox `palisade run`
/// configured from its flags; the policy adds the rest.
pub(crate) fn run(
    mut sb: Sandbox,
    loaded: crate::host_policy_file::Loaded,
    args: GovernedArgs,
    staged: crate::stage::RunArgs,
    command: Vec<OsString>,
    launch_report: Option<PathBuf>,
) -> Result<ExitCode, String> {
    let (Some(journal_path), Some(key_path)) = (args.journal.clone(), args.key.clone()) else {
        return setup_failure("a governed session needs --journal FILE and --key KEY");
    };
    let crate::host_policy_file::Loaded {
        policy,
        path: policy_path,
        text,
    } = loaded;
    let policy_digest = format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())));
    let pins = pins(&args.resolve).map_err(|e| e.to_string())?;
    let roots = match &args.relay_ca {
        Some(p) => Some(load_roots(p)?),
        None => None,
    };
    let key = crate::journal::read_key(&key_path)?;
    let id = random_id()?;
    // The agent preset is merged before anything else: the session runs
    // (relays, env, files) from the merged policy.
    let agent = match super::agent::choose(args.agent.as_deref(), &policy) {
        Ok(Some(a)) => {
            match super::agent::AgentSession::prepare(
                &policy,
                &policy_path,
                a,
                sb.worker_ids(),
                &id,
            ) {
                Ok(s) => Some(s),
                Err(e) => return setup_failure(e),
            }
        }
        Ok(None) => None,
        Err(e) => {
            eprintln!("palisade: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let policy = match &agent {
        Some(a) => a.policy().clone(),
        None => policy,
    };
    // Collector URLs and TLS files from the host only; a syslog+tls URL
    // without its CA, or with a key other users can read, refuses the run
    // before anything is created.
    let plan = match crate::ship::Plan::new(&policy.evidence, &args.ship) {
        Ok(p) => p,
        Err(e) => return setup_failure(e),
    };
    // The step's exact grant, computed before anything starts: a step that
    // cannot be dispatched refuses the run.
    let grant = match &args.workflow {
        Some(w) => match step_grant(
            w,
            args.trigger.as_deref(),
            args.step.as_deref(),
            &args.context,
        ) {
            Ok(g) => Some(g),
            Err(e) => return setup_failure(e),
        },
        None => None,
    };

    // The policy's worker section adds to what the flags gave: every key,
    // or an error before anything starts.
    if let Err(e) = sb.apply_worker(&policy.worker) {
        // The keys are named as in the file; a profile mismatch comes
        // from the flags, so it says which flag fixes it.
        return setup_failure(match &e {
            palisade_isolate::WorkerError::ProfileMismatch { policy, .. } => {
                format!("{e}: pass --profile {policy}")
            }
            _ => format!("{}: {e}", policy_path.display()),
        });
    }
    // A step whose provider sandbox cannot start: refused when the provider
    // would then refuse to work, before anything is made; otherwise said on
    // stderr and recorded once the journal is open.
    let sandbox_warning = match grant.as_ref().and_then(|(_, _, s)| s.as_ref()) {
        Some(found) => {
            let step = args.step.as_deref().unwrap_or_default();
            let what = format!(
                "{}: step `{step}`, profile `{}`{}: {}",
                palisade_policy::provider_sandbox::CODE,
                sb.profile().name(),
                if sb.profile().nested_sandbox() {
                    " (nested_sandbox = true)"
                } else {
                    ""
                },
                found.message()
            );
            if found.fails_closed {
                return setup_failure(what);
            }
            eprintln!("palisade: warning: {what}");
            Some(json!({
                "code": palisade_policy::provider_sandbox::CODE,
                "step": step,
                "provider": found.provider,
                "key": found.key,
                "profile": sb.profile().name(),
                "detail": found.message(),
            }))
        }
        None => None,
    };
    if let Some(a) = &agent
        && let Err(e) = a.apply(&mut sb)
    {
        a.finish();
        return setup_failure(e);
    }
    // An OAuth relay's host token file (and its lock) is the host's:
    // masked inside whatever its mode, or a worker of the same uid, or any
    // uid when the file is readable by others, reads the refresh token.
    // Under `/tmp` it is out of view already (the sandbox's `/tmp` is its
    // own); inside a writable root the mask refuses the launch.
    for r in &policy.egress.relays {
        if let Some(f) = &r.credential.from_file
            && !Path::new(f).starts_with("/tmp")
        {
            sb.mask(f);
            sb.mask(format!("{f}.lock"));
        }
    }
    if let Err(e) = check_session_env(&sb, &policy, &policy_path) {
        if let Some(a) = &agent {
            a.finish();
        }
        return setup_failure(e);
    }
    if sb.profile().network() == palisade_isolate::NetworkMode::None {
        return setup_failure(format!(
            "profile `{}` has no network (`strict`, or `network = \"none\"`), but a governed session reaches its worker only through bridges (the recording proxy, `palisade ctl`, the relays); use a profile with the proxy network, or run the strict profile without --policy",
            sb.profile().name()
        ));
    }
    // The policy file stays read-only for the worker when it lies inside a
    // writable root (elsewhere the host view is read-only already).
    if let Ok(abs) = std::fs::canonicalize(&policy_path)
        && sb
            .profile()
            .writable()
            .iter()
            .filter_map(|w| std::fs::canonicalize(w).ok())
            .any(|w| abs.starts_with(w))
    {
        sb.protect(abs);
    }
    // Staged writes: the stage is named by the session id, in a base outside
    // every writable root (the policy's included).
    // The policy's `[worker] writes = "direct"` was applied with `[worker]`
    // (the layer switched off); `--writes direct` did the same earlier.
    let staged_on = staged.writes != Some(crate::stage::Writes::Direct)
        && policy.worker.writes == palisade_schema::host_policy::Writes::Staged;
    if staged.writes == Some(crate::stage::Writes::Staged) && !staged_on {
        return setup_failure(format!(
            "--writes staged: the policy {} sets worker.writes = \"direct\", and a flag cannot turn staging back on; change the policy",
            policy_path.display()
        ));
    }
    if staged.keep_staged && !staged_on {
        return setup_failure("--keep-staged needs staged writes, not direct writes");
    }
    if let Some(a) = &agent
        && !staged_on
        && let Some(name) = a.staged_only().first()
    {
        return setup_failure(format!(
            "agent `{}` writes `{name}` in the working directory, code it runs on its next start; only staged writes keep it off the host (the commit filter refuses it): remove `worker.writes = \"direct\"` / `--writes direct`",
            a.name()
        ));
    }
    if staged_on && !sb.profile().writable().is_empty() {
        let base =
            match crate::stage::run_base(staged.stage_dir.as_deref(), sb.profile().writable()) {
                Ok(b) => b,
                Err(e) => return setup_failure(format!("staged_writes: {e}")),
            };
        sb.stage_in(base, id.clone());
    }
    // The built-in list plus `[worker.commit]` (applied with `[worker]`);
    // the policy file is added once the stage's roots are known.
    let mut commit_filter = sb.commit_filter().clone();
    let steering_set = match crate::steering::glob_set(
        &policy
            .taint
            .steering_paths
            .iter()
            .map(|g| g.as_str().to_owned())
            .collect::<Vec<_>>(),
    ) {
        Ok(g) => g,
        Err(e) => return setup_failure(e),
    };
    let provider_credentials = sb.profile().provider_credentials();
    let roots_for_steering: Vec<PathBuf> = sb.profile().writable().to_vec();
    let steering_globs: Vec<String> = policy
        .taint
        .steering_paths
        .iter()
        .map(|g| g.as_str().to_owned())
        .collect();
    // A symlink at a steering path (or a prefix of one) is refused.
    if let Err(e) = crate::stage::refuse_steering_symlinks(&mut commit_filter, &steering_globs) {
        return setup_failure(e);
    }

    let lock_path = PathBuf::from(format!("{}.lock", journal_path.display()));
    let lock_existed = std::fs::symlink_metadata(&lock_path).is_ok();
    let writer = match JournalWriter::create(
        &journal_path,
        &key,
        &WriterOptions::default(),
        Timestamp(now_ms()),
    ) {
        Ok(w) => w,
        Err(e) => {
            // The writer may have made the lock file before it refused.
            if !lock_existed {
                let _ = std::fs::remove_file(&lock_path);
            }
            return Err(format!("journal `{}`: {e}", journal_path.display()));
        }
    };
    let ship_writer = writer.clone();
    let journal = Journal::new(writer, id.clone());
    // From here on, a refusal before the worker starts removes what the
    // session created, so that nothing is left behind and a retry can use
    // the same journal path.
    let mut left = Leftovers::new(&journal_path, !lock_existed);
    let dir = match session_dir(&id) {
        Ok(d) => d,
        Err(e) => return left.refuse(Some(&journal), e),
    };
    left.dir = Some(dir.clone());
    let host_path = args
        .approve_socket
        .clone()
        .unwrap_or_else(|| dir.join("host.sock"));
    if args.approve_socket.is_some() {
        left.host_socket = Some(host_path.clone());
    }
    let steering = match SteeringWatch::new(&roots_for_steering, &steering_globs) {
        Ok(w) => Some(w),
        Err(e) => return left.refuse(Some(&journal), e),
    };
    let marks = match policy_marks(&policy, &policy_path) {
        Ok(m) => m,
        Err(e) => {
            let _ = journal.close();
            return setup_failure(e);
        }
    };
    // Relative taint and routing globs are the worker's working directory's:
    // when the policy names none, the sandbox's is that directory, so the
    // rules (and the observer's host paths) are placed against it.
    let mut session_policy = policy.clone();
    if session_policy.worker.cwd.is_none()
        && let Some(c) = sb.working_dir()
    {
        session_policy.worker.cwd = Some(c.display().to_string());
    }
    let watch_set = if policy.taint.observe == TaintObserve::Kernel {
        match super::observe::watches(&session_policy, &marks) {
            Ok(w) => w,
            Err(e) => {
                return left.refuse(Some(&journal), format!("{}: {e}", policy_path.display()));
            }
        }
    } else {
        Vec::new()
    };
    let core = match SessionCore::new(
        id.clone(),
        session_policy,
        &marks,
        journal,
        steering,
        Some(host_path.display().to_string()),
    ) {
        Ok(c) => Arc::new(c),
        // The journal went down with the session core; its files go too.
        Err(e) => return left.refuse(None, e),
    };

    if let Some(body) = &sandbox_warning {
        match Kind::custom(palisade_policy::provider_sandbox::CODE) {
            Ok(kind) => {
                core.journal().record(kind, body, Flags::NONE);
            }
            Err(e) => return left.refuse(Some(core.journal()), e.to_string()),
        }
    }
    if let Some((info, grant_json, _)) = &grant {
        match write_grant(&mut sb, grant_json, &mut left) {
            Ok(path) => {
                let mut body = info.clone();
                if let Some(o) = body.as_object_mut() {
                    o.insert("written_to".into(), json!(path.display().to_string()));
                }
                core.journal()
                    .record(Kind::ToolPolicyApplied, &body, Flags::NONE);
            }
            Err(e) => return left.refuse(Some(core.journal()), e),
        }
    }

    // The read observer starts before the sandbox: its marks are in place
    // before the worker runs (opens wait for the sandbox's namespace).
    let support = palisade_isolate::observe::probe();
    let read_observer = match super::observe::start(
        &core,
        &watch_set,
        policy.taint.observe,
        (support.mode, &support.facts),
    ) {
        Ok(o) => o,
        Err(e) => return left.refuse(Some(core.journal()), e),
    };

    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return left.refuse(
                Some(core.journal()),
                format!("cannot start the session runtime: {e}"),
            );
        }
    };
    // The shippers start with the services, for the session's lifetime.
    let mut shipping = if plan.is_empty() {
        None
    } else {
        match crate::ship::Shipping::start(&plan, &journal_path, &ship_writer, &id) {
            Ok(s) => Some(s),
            Err(e) => return left.refuse(Some(core.journal()), e),
        }
    };
    let hold = shipping
        .as_ref()
        .filter(|_| plan.refuses())
        .map(crate::ship::Shipping::hold);
    let approval_timeout = Duration::from_secs(args.approval_timeout);
    // Whether the worker was launched: until then, a failure is a refusal.
    let mut started = false;
    let result = rt.block_on(async {
        let services = bind_services(
            &policy,
            &dir,
            &host_path,
            roots.as_ref(),
            pins,
            &core,
            provider_credentials,
            approval_timeout,
            agent.as_ref().map(|a| a.key.as_slice()),
            hold,
        )
        .await?;
        let mut sb = sb;
        if let Some(a) = &agent {
            let values = super::agent::Values {
                relays: services
                    .relays
                    .iter()
                    .map(|r| {
                        (
                            r.relay.config().name.clone(),
                            format!("http://127.0.0.1:{}", r.port),
                            r.relay.config().placeholder().expose().to_owned(),
                        )
                    })
                    .collect(),
                home: a.home.display().to_string(),
                cwd: sb
                    .working_dir()
                    .map(|c| c.display().to_string())
                    .unwrap_or_else(|| a.home.display().to_string()),
            };
            a.write_files(&mut sb, &values)?;
        }
        supervise(
            sb,
            services,
            &core,
            &mut started,
            &id,
            &command,
            &policy_path,
            &policy_digest,
            launch_report.as_deref(),
            (
                commit_filter,
                &steering_set,
                &steering_globs,
                staged.keep_staged,
            ),
            read_observer,
        )
        .await
    });
    drop(rt);
    if let Some(a) = &agent {
        a.finish();
    }
    // The server held the core as its backend: the relays are gone, and the
    // cycle between the two ends here.
    core.clear_control();
    if !started {
        let e = result.err().unwrap_or_default();
        if let Some(s) = shipping.take() {
            let _ = s.finish(Duration::ZERO);
        }
        return left.refuse(Some(core.journal()), e);
    }
    // A session that failed after the launch did not commit: its stage is
    // kept, and said so.
    if let Some((stage, _)) = core.take_stage() {
        eprintln!(
            "palisade: the stage of session {id} is kept in {}, not committed; inspect it with `palisade diff {id}`",
            crate::stage::show_path(stage.dir())
        );
    }
    let anchor = core.journal().close();
    // After `journal_closed`: the final flush, bounded.
    if let Some(s) = shipping.take() {
        for warning in s.finish(crate::ship::FINAL_FLUSH) {
            eprintln!("palisade: warning: {warning}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    match anchor {
        Ok(a) => {
            let anchor_path = PathBuf::from(format!("{}.anchor", journal_path.display()));
            if let Err(e) = std::fs::write(&anchor_path, format!("{a}\n")) {
                eprintln!(
                    "palisade: warning: cannot write the anchor {}: {e}",
                    anchor_path.display()
                );
            }
            eprintln!(
                "palisade: journal sealed: {} (anchor {}); summary: palisade report {} --key {}",
                journal_path.display(),
                anchor_path.display(),
                journal_path.display(),
                key_path.display()
            );
        }
        Err(e) => eprintln!("palisade: the journal could not be closed cleanly: {e}"),
    }
    match result {
        Ok(code) => Ok(code),
        Err(e) => setup_failure(e),
    }
}

/// What a session created before its worker started. A setup refusal
/// removes all of it (the journal, its lock and anchor, the private socket
/// directory, an `--approve-socket` socket, the step grant), so a refused
/// run leaves no files and can be retried with the same paths.
#[derive(Debug, Default)]
struct Leftovers {
    journal: PathBuf,
    /// Whether the journal's lock file is ours (it outlives a closed journal).
    lock_created: bool,
    dir: Option<PathBuf>,
    host_socket: Option<PathBuf>,
    grant: Option<PathBuf>,
    grant_dir: Option<PathBuf>,
}

impl Leftovers {
    fn new(journal: &Path, lock_created: bool) -> Leftovers {
        Leftovers {
            journal: journal.to_path_buf(),
            lock_created,
            ..Leftovers::default()
        }
    }

    /// Closes `journal` (releasing its lock), removes everything the session
    /// created, and reports the refusal.
    fn refuse(
        &self,
        journal: Option<&Journal>,
        why: impl std::fmt::Display,
    ) -> Result<ExitCode, String> {
        if let Some(j) = journal {
            let _ = j.close();
        }
        self.discard();
        setup_failure(format!("{why} (nothing was started; no journal was kept)"))
    }

    fn discard(&self) {
        use std::os::unix::fs::FileTypeExt;
        let with = |suffix: &str| PathBuf::from(format!("{}{suffix}", self.journal.display()));
        let _ = std::fs::remove_file(&self.journal);
        // The shippers' state files of this journal (`<journal>.ship-*`).
        if let (Some(parent), Some(name)) = (self.journal.parent(), self.journal.file_name()) {
            let mut prefix = name.to_os_string();
            prefix.push(".ship-");
            let prefix = prefix.to_string_lossy().into_owned();
            let dir = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        if self.lock_created {
            let _ = std::fs::remove_file(with(".lock"));
        }
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
        if let Some(s) = &self.host_socket
            && std::fs::symlink_metadata(s).is_ok_and(|m| m.file_type().is_socket())
        {
            let _ = std::fs::remove_file(s);
        }
        if let Some(g) = &self.grant {
            let _ = std::fs::remove_file(g);
        }
        if let Some(d) = &self.grant_dir {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Computes one workflow step's grant: `(record body, file contents)`.
/// The third value is the provider sandbox the step's provider options turn
/// on, if any (`provider_sandbox_unavailable`, as `palisade check --policy`
/// reports it).
fn step_grant(
    workflow: &Path,
    trigger: Option<&str>,
    step: Option<&str>,
    context: &str,
) -> Result<StepGrant, String> {
    use palisade_policy::capability::{CapabilityRegistry, OutputContext};
    use palisade_policy::grant::GrantConfig;
    use palisade_policy::plan::{find_trigger, grant_for, static_agent};
    let (Some(trigger), Some(step)) = (trigger, step) else {
        return Err(String::from("--workflow needs --trigger and --step"));
    };
    if !matches!(
        context,
        "slack" | "discord" | "github" | "linear" | "manual"
    ) {
        return Err(format!(
            "--context `{context}` is not slack, discord, github, linear or manual"
        ));
    }
    let config = match crate::bundle::load(workflow)? {
        crate::bundle::Loaded::Workflow(c) => c,
        crate::bundle::Loaded::Triggers(docs) => {
            return document_step_grant(workflow, &docs, trigger, step, context);
        }
    };
    let t = find_trigger(&config, trigger).map_err(|e| e.to_string())?;
    let s = t
        .steps
        .iter()
        .find(|x| x.id == step)
        .ok_or_else(|| format!("trigger `{trigger}` has no step `{step}`"))?;
    let agent = static_agent(&config, s).ok_or_else(|| {
        format!("step `{step}` chooses its agent at run time or names an undefined agent; palisade run needs a fixed agent")
    })?;
    let ctx = OutputContext::new(context);
    let grant = grant_for(
        s,
        &agent.agent,
        Some(&ctx),
        &CapabilityRegistry::default(),
        &GrantConfig::default(),
    )
    .map_err(|e| format!("step `{step}` cannot be dispatched: {} ({})", e, e.code()))?;
    let info = json!({
        "workflow": workflow.display().to_string(),
        "trigger": trigger,
        "step": step,
        "agent": agent.name,
        "context": context,
    });
    Ok(granted(&grant, info))
}

/// The [`StepGrant`] of a derived grant: `info` (the record body) gains the
/// provider, tools and digest.
fn granted(grant: &palisade_policy::grant::StepGrant, mut info: serde_json::Value) -> StepGrant {
    let tools: Vec<String> = grant
        .derived
        .policy
        .tool_names()
        .map(str::to_owned)
        .collect();
    if let Some(o) = info.as_object_mut() {
        o.insert("provider".into(), json!(grant.provider.id()));
        o.insert("tools".into(), json!(tools));
        o.insert("digest".into(), json!(grant.digest.as_str()));
    }
    // The options the provider will get (the authored ones plus the grant):
    // a provider sandbox there cannot start inside palisade's.
    let sandbox = grant
        .provider_options
        .as_ref()
        .and_then(|o| palisade_policy::provider_sandbox::check(grant.provider.id(), o));
    (info, grant.to_json(), sandbox)
}

/// [`step_grant`] for a Paseo Hub 0.9 trigger document: `trigger` is the
/// document's name (one `on` entry) or an internal trigger name
/// (`NAME-event-N`), `step` is `run`, and the agent must be inline.
fn document_step_grant(
    workflow: &Path,
    docs: &[palisade_schema::trigger::TriggerDocument],
    trigger: &str,
    step: &str,
    context: &str,
) -> Result<StepGrant, String> {
    use palisade_policy::capability::{CapabilityRegistry, OutputContext};
    use palisade_policy::grant::GrantConfig;
    use palisade_policy::trigger as tp;
    let (d, index) = tp::select(docs, trigger, None).map_err(|e| e.to_string())?;
    let doc = docs.get(d).ok_or("no such trigger document")?;
    let entry = doc.on.get(index).ok_or("no such on entry")?;
    if step != tp::STEP_ID {
        return Err(format!(
            "trigger document `{}` has one step, `{}`, not `{step}`",
            doc.name,
            tp::STEP_ID
        ));
    }
    let agent = match tp::agents(doc).as_slice() {
        [(None, agent)] => (*agent).clone(),
        _ => {
            return Err(format!(
                "trigger document `{}` chooses its agent at run time (select); palisade run needs a fixed agent",
                doc.name
            ));
        }
    };
    let ctx = crate::policy_cmd::document_context(Some(OutputContext::new(context)), &entry.event);
    let release = palisade_schema::trigger::Release::default();
    let grant = tp::grant_entry(
        doc,
        index,
        &agent,
        &ctx,
        &CapabilityRegistry::hub_0_9(),
        &GrantConfig::default(),
        release,
    )
    .map_err(|e| format!("step `{step}` cannot be dispatched: {} ({})", e, e.code()))?;
    let info = json!({
        "workflow": workflow.display().to_string(),
        "document": doc.name,
        "event": entry.event,
        "trigger": palisade_schema::trigger::internal_trigger_name(&doc.name, index),
        "step": step,
        "agent": serde_json::Value::Null,
        "context": ctx.provider,
        "grants": crate::policy_cmd::tool_labels(&grant),
    });
    Ok(granted(&grant, info))
}

/// A step's `(record body, file contents, provider sandbox)`.
type StepGrant = (
    serde_json::Value,
    serde_json::Value,
    Option<palisade_policy::provider_sandbox::ProviderSandbox>,
);

/// Writes the grant to `.palisade/step-grant.json` in the working directory
/// (read-only for the worker: `.palisade` is protected in every writable root).
fn write_grant(
    sb: &mut Sandbox,
    grant: &serde_json::Value,
    left: &mut Leftovers,
) -> Result<PathBuf, String> {
    // The working directory when it is a writable root (`.palisade` is kept
    // read-only at the top of each writable root, not deeper), else the
    // first writable root.
    let writable = sb.profile().writable();
    let root = sb
        .working_dir()
        .and_then(|c| writable.iter().find(|w| w.as_path() == c))
        .or_else(|| writable.first());
    let cwd = match root {
        Some(c) => c.clone(),
        None => {
            return Err(String::from(
                "a workflow step needs a writable working directory",
            ));
        }
    };
    let dir = cwd.join(".palisade");
    if std::fs::symlink_metadata(&dir).is_err() {
        left.grant_dir = Some(dir.clone());
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("step-grant.json");
    left.grant = Some(path.clone());
    let text = serde_json::to_string_pretty(grant).map_err(|e| e.to_string())?;
    std::fs::write(&path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    sb.env("PALISADE_STEP_GRANT", &path);
    Ok(path)
}

/// The marks of `taint.marks_file`, relative to the policy file's folder
/// as `mark-untrusted` writes them; a missing file means no marks, any
/// other failure to read it refuses the run.
fn policy_marks(policy: &HostPolicy, policy_path: &Path) -> Result<Vec<String>, String> {
    let path = &policy.taint.marks_file;
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let dir = policy_path.parent().unwrap_or_else(|| Path::new("."));
    crate::host_policy_file::read_marks(&dir.join(path))
}

#[expect(
    clippy::too_many_arguments,
    reason = "one call site; the pieces are distinct"
)]
async fn bind_services(
    policy: &HostPolicy,
    dir: &Path,
    host_path: &Path,
    roots: Option<&rustls::RootCertStore>,
    pins: HashMap<String, Vec<IpAddr>>,
    core: &Arc<SessionCore>,
    provider_credentials: bool,
    approval_timeout: Duration,
    placeholder_key: Option<&[u8]>,
    hold: Option<Arc<std::sync::atomic::AtomicBool>>,
) -> Result<Services, String> {
    use std::os::unix::fs::PermissionsExt;
    let mut config = super::proxy_config(policy)?;
    if let Some(flag) = hold {
        config = config.with_hold(flag, crate::ship::BACKLOG_REASON);
    }
    let token = ProxyToken::generate().map_err(|e| format!("cannot make the proxy token: {e}"))?;
    config.token = Some(token.clone());
    let addresses = config.addresses.clone();
    let resolver = Arc::new(PinnedResolver {
        pins,
        host: HostsFirstResolver::system(),
    });
    let proxy = Proxy::new(config, core.clone(), resolver.clone(), core.clone());
    let proxy_path = dir.join("proxy.sock");
    let proxy_listener = tokio::net::UnixListener::bind(&proxy_path)
        .map_err(|e| format!("cannot bind the proxy socket: {e}"))?;
    std::fs::set_permissions(&proxy_path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", proxy_path.display()))?;
    let (relays, git_env) = if provider_credentials {
        build_relays(
            policy,
            dir,
            roots,
            &resolver,
            core,
            &addresses,
            placeholder_key,
        )
        .await?
    } else {
        if !policy.egress.relays.is_empty() {
            eprintln!(
                "palisade: this profile gets no provider credentials: relays are not started"
            );
        }
        (Vec::new(), Vec::new())
    };
    let control = ControlServer::new(
        core.clone(),
        ControlConfig::default().with_approval_timeout(approval_timeout),
    );
    // The relays' outward actions are decided by this same server (asks
    // listed by `palisade approve`); until now they were denied.
    core.set_control(control.clone());
    let control_path = dir.join("control.sock");
    let worker_listener =
        ControlListener::bind_unix(&control_path, 0o600).map_err(|e| e.to_string())?;
    let host_listener = ControlListener::bind_unix(host_path, 0o600).map_err(|e| e.to_string())?;
    Ok(Services {
        proxy,
        proxy_listener: Some(Listener::Unix(proxy_listener)),
        relays,
        git_env,
        control,
        worker_listener: Some(worker_listener),
        host_listener: Some(host_listener),
        host_path: host_path.to_path_buf(),
        proxy_path,
        control_path,
        token,
    })
}

#[expect(
    clippy::too_many_arguments,
    reason = "one call site; the pieces are distinct"
)]
async fn supervise(
    mut sb: Sandbox,
    mut s: Services,
    core: &Arc<SessionCore>,
    started: &mut bool,
    id: &str,
    command: &[OsString],
    policy_path: &Path,
    policy_digest: &str,
    launch_report: Option<&Path>,
    (filter, steering, steering_globs, keep): (
        palisade_isolate::stage::CommitFilter,
        &globset::GlobSet,
        &[String],
        bool,
    ),
    read_observer: SessionObserver,
) -> Result<ExitCode, String> {
    // The worker's view: proxy, control and relays on loopback ports, bridged to our sockets.
    let proxy_url = format!(
        "http://palisade:{}@127.0.0.1:{PROXY_PORT}",
        s.token.expose()
    );
    for k in PROXY_VARS {
        sb.env(k, &proxy_url);
    }
    for k in NO_PROXY_VARS {
        sb.env(k, "127.0.0.1,localhost,::1");
    }
    sb.env("PALISADE_CONTROL", format!("tcp:127.0.0.1:{CONTROL_PORT}"));
    sb.env("PALISADE_SESSION", id);
    for (k, v) in TOOL_VARS {
        sb.env(k, v);
    }
    // The worker runs `palisade ctl` from the binary that launched it; bind
    // that one file read-only at its own path, wherever it lives (under a
    // masked `/home` or the private `/tmp` it would otherwise be invisible).
    if let Ok(exe) = std::env::current_exe() {
        sb.read_only(&exe);
        sb.env("PALISADE_BIN", exe);
    }
    sb.bridge(Bridge::new(PROXY_PORT, s.proxy_path.clone()));
    sb.bridge(Bridge::new(CONTROL_PORT, s.control_path.clone()));
    for r in &s.relays {
        sb.bridge(Bridge::new(r.port, r.socket.path().to_path_buf()));
        for (k, v) in &r.env {
            sb.env(k, v);
        }
    }
    // git goes to the git relays (`git clone https://github.com/…`), with
    // the placeholder each one expects.
    for (k, v) in &s.git_env {
        sb.env(k, v);
    }

    let relay_names: Vec<&str> = s
        .relays
        .iter()
        .map(|r| r.relay.config().name.as_str())
        .collect();
    core.journal().record(
        Kind::ExecutionStarted,
        &json!({
            "session": id,
            "profile": sb.profile().name(),
            "command": command.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>(),
            "policy": policy_path.display().to_string(),
            "policy_digest": policy_digest,
            "relays": relay_names,
            "writable": sb.profile().writable().iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        }),
        Flags::NONE,
    );

    // Watch the stop signals before the worker exists: a SIGTERM that
    // arrives once it runs must be forwarded and recorded, not kill palisade
    // with the default action. (Registering starts no thread.)
    let mut term = signal_stream(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = signal_stream(tokio::signal::unix::SignalKind::interrupt())?;
    let mut hup = signal_stream(tokio::signal::unix::SignalKind::hangup())?;
    // On the worker's own pty (a terminal on fds 0-2), a new window size.
    let mut winch = signal_stream(tokio::signal::unix::SignalKind::window_change())?;

    let writable: Vec<PathBuf> = sb.profile().writable().to_vec();
    // Fork while this runtime is still single-threaded: nothing has been polled yet.
    // A refusal here is a setup refusal: the caller removes the journal.
    let mut child = sb
        .spawn(Command::new(command.to_vec()))
        .map_err(|e| e.to_string())?;
    *started = true;
    // Before anything else: until it knows the sandbox's PID namespace, a
    // permission-mode observer holds every watched open.
    if let Some(o) = &read_observer.observer {
        match child.pid_namespace() {
            Ok(ns) => o.attribute_to(ns),
            Err(e) => {
                drop(child);
                core.journal().record(
                    Kind::custom("execution_ended").map_err(|e| e.to_string())?,
                    &json!({"exit_code": null, "signal": null, "killed": true, "killed_by": "read_observer"}),
                    Flags::NONE,
                );
                return Err(format!(
                    "isolation_layer_unavailable: read_observer (cannot name the sandbox's PID namespace: {e}); the worker was stopped"
                ));
            }
        }
    }
    // Steering writes are observed as they happen: in the stage's upper
    // layers, or in the writable roots under direct writes (what was
    // written before the watches existed is found by their first listing).
    // A staged worker: checkpoints read its stage, and the commit records
    // the steering writes that reach the host (the point-in-time checks stop).
    let observer = core.observe_steering(child.stage(), &writable, steering, steering_globs);
    let staged = match child.take_stage() {
        Some(stage) => {
            let filter = crate::stage::filter_for(filter, Some(policy_path), &stage);
            core.set_stage(stage, filter);
            true
        }
        None => false,
    };
    let report = crate::run::report_json(child.report());
    let degraded = !child.report().downgraded.is_empty()
        || !child.report().deviations.is_empty()
        || read_observer.degraded();
    let mut status = report.clone();
    if let Some(o) = status.as_object_mut() {
        o.insert(
            "status".into(),
            json!(if degraded { "degraded" } else { "full" }),
        );
        o.remove("mount_plan");
        if let Some(layers) = o.get_mut("layers").and_then(|l| l.as_array_mut()) {
            layers.push(read_observer.layer_json());
        }
    }
    core.journal()
        .record(Kind::SandboxStatus, &status, Flags::NONE);
    if let Some(path) = launch_report
        && let Err(e) = std::fs::write(path, report.to_string() + "\n")
    {
        eprintln!(
            "palisade: warning: cannot write the launch report {}: {e}",
            path.display()
        );
    }
    eprintln!(
        "palisade: governed session {id}: approvals with `palisade approve --socket {}`{}",
        s.host_path.display(),
        if staged {
            format!(
                "; writes are staged, checkpoint with `palisade ctl --socket {} checkpoint`",
                s.host_path.display()
            )
        } else {
            String::new()
        }
    );

    // Serve.
    let (stop, signal) = shutdown_channel();
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(l) = s.proxy_listener.take() {
        let p = s.proxy.clone();
        let sig = signal.clone();
        tasks.spawn(async move {
            let _ = p.serve(l, sig).await;
        });
    }
    for r in std::mem::take(&mut s.relays) {
        let sig = signal.clone();
        tasks.spawn(async move {
            let _ = r.relay.serve(&r.socket, sig).await;
        });
    }
    if let Some(l) = s.worker_listener.take() {
        drop(s.control.serve(l, Endpoint::Worker));
    }
    if let Some(l) = s.host_listener.take() {
        drop(s.control.serve(l, Endpoint::Host));
    }

    let pid = child.pid();
    let resize = child.terminal_resize();
    let memory_limit = memory_limit(child.report());
    let mut waiter = tokio::task::spawn_blocking(move || wait_counting_ooms(child));
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut killed_by: Option<&'static str> = None;
    let mut forwarded = false;
    // When palisade is asked to stop, the worker gets the same signal, then
    // SIGKILL after a grace period.
    let mut grace: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    let worker = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(0));
    let code = loop {
        tokio::select! {
            r = &mut waiter => break r.map_err(|e| e.to_string()).and_then(|w| w.map_err(|e| e.to_string())),
            _ = term.recv(), if killed_by.is_none() => killed_by = Some("SIGTERM"),
            _ = int.recv(), if killed_by.is_none() => killed_by = Some("SIGINT"),
            _ = hup.recv(), if killed_by.is_none() => killed_by = Some("SIGHUP"),
            _ = winch.recv() => {
                if let Some(r) = &resize {
                    r.resize();
                }
            }
            () = async { if let Some(g) = grace.as_mut() { g.as_mut().await } else { std::future::pending().await } } => {
                let _ = nix::sys::signal::kill(worker, nix::sys::signal::Signal::SIGKILL);
                grace = None;
            }
            _ = tick.tick() => {
                if core.journal().failed() && killed_by.is_none() {
                    killed_by = Some("journal_failure");
                }
                // An observer that stopped sees no more reads: its watched
                // opens wait (it keeps its group), and the worker is stopped.
                if read_observer.failed() && killed_by.is_none() {
                    killed_by = Some("read_observer");
                }
            }
        }
        if let Some(why) = killed_by
            && !forwarded
        {
            forwarded = true;
            let (sig, action) = match why {
                "SIGTERM" => (
                    nix::sys::signal::Signal::SIGTERM,
                    "forwarded to the worker; SIGKILL after 5 s",
                ),
                "SIGINT" => (
                    nix::sys::signal::Signal::SIGINT,
                    "forwarded to the worker; SIGKILL after 5 s",
                ),
                "SIGHUP" => (
                    nix::sys::signal::Signal::SIGHUP,
                    "forwarded to the worker; SIGKILL after 5 s",
                ),
                "read_observer" => (
                    nix::sys::signal::Signal::SIGKILL,
                    "worker killed: the read observer stopped, so its reads could no longer be seen",
                ),
                _ => (
                    nix::sys::signal::Signal::SIGKILL,
                    "worker killed: the journal cannot be written",
                ),
            };
            if why == "read_observer" {
                core.journal().record(
                    Kind::custom("execution_killed").map_err(|e| e.to_string())?,
                    &json!({"signal": "SIGKILL", "by": "palisade", "reason": "read_observer_failed", "action": action}),
                    Flags::NONE,
                );
            } else if why != "journal_failure" {
                core.journal().record(
                    Kind::custom("execution_killed").map_err(|e| e.to_string())?,
                    &json!({"signal": why, "by": "palisade", "action": action}),
                    Flags::NONE,
                );
            }
            let _ = nix::sys::signal::kill(worker, sig);
            grace = Some(Box::pin(tokio::time::sleep(KILL_GRACE)));
        }
    };

    // The worker is gone: the read observer stops before palisade's own
    // reads (the last steering check, the commit) could be taken for the
    // worker's. Then what the steering observer has pending, the last
    // steering check, then the end record.
    drop(read_observer);
    if let Some(o) = observer {
        o.stop();
    }
    core.check_steering("exit");
    let (exit, oom_kills) = code?;
    if oom_kills > 0 {
        record_oom(core, exit, oom_kills, memory_limit.as_ref())?;
    }
    // The exit status keeps the shell's number (137 for a wall-limit kill,
    // as documented); the journal says what the library tells apart,
    // init's own report, never guessed from the SIGKILL it is done with.
    let code = exit.code();
    if exit == palisade_isolate::Exit::WallLimit {
        killed_by = killed_by.or(Some("wall_limit"));
    }
    if exit == palisade_isolate::Exit::OomKilled {
        killed_by = killed_by.or(Some("memory_limit"));
    }
    let signal_no = code.checked_sub(128).filter(|s| *s > 0 && code > 128);
    core.journal().record(
        Kind::custom("execution_ended").map_err(|e| e.to_string())?,
        &json!({
            "exit_code": code,
            "signal": signal_no,
            "killed": signal_no.is_some() || killed_by.is_some(),
            "killed_by": killed_by,
        }),
        if core.is_tainted() {
            Flags::TAINTED
        } else {
            Flags::NONE
        },
    );
    // The control channel is down before the commit: no checkpoint reads
    // the stage while it is applied.
    stop_all(&stop, &s.control, &mut tasks).await;
    if killed_by == Some("read_observer") {
        // Reads may have waited unanswered, never unseen; but the session's
        // taint is no longer known to be complete: nothing is committed.
        return Err(String::from(
            "isolation_layer_unavailable: read_observer (the observer stopped during the run); the worker was stopped",
        ));
    }
    let code = u8::try_from(code).unwrap_or(EXIT_SETUP);
    let stage = core.take_stage();
    if core.journal().failed() {
        // The journal must hold every applied path: without it, nothing is
        // committed.
        if let Some((stage, _)) = &stage {
            eprintln!(
                "palisade: the stage of session {id} is kept in {}, not committed",
                crate::stage::show_path(stage.dir())
            );
        }
        return Err(String::from(
            "the journal could not be written; the worker was stopped",
        ));
    }
    let code = match stage {
        Some((stage, filter)) => {
            let journaling = crate::stage::Journaling {
                journal: core.journal(),
                steering: Some(steering),
                tainted: Some(core.is_tainted()),
            };
            crate::stage::finish(stage, &filter, keep, Some(&journaling), code)
        }
        None if staged => {
            eprintln!("palisade: the stage of session {id} is still in use; not committed");
            crate::stage::EXIT_COMMIT
        }
        None => code,
    };
    Ok(ExitCode::from(code))
}

fn signal_stream(
    kind: tokio::signal::unix::SignalKind,
) -> Result<tokio::signal::unix::Signal, String> {
    tokio::signal::unix::signal(kind).map_err(|e| format!("cannot watch signals: {e}"))
}

async fn stop_all(stop: &Shutdown, control: &ControlServer, tasks: &mut tokio::task::JoinSet<()>) {
    control.shutdown();
    stop.trigger();
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
}

/// The memory limit of the sandbox's cgroup as the launch report lists it:
/// the file (`memory.max`, v1 `memory.limit_in_bytes`) and its value.
fn memory_limit(report: &palisade_isolate::LaunchReport) -> Option<(String, String)> {
    report
        .limits
        .iter()
        .find(|(k, _)| k == "memory.max" || k == "memory.limit_in_bytes")
        .cloned()
}

/// Wait for the sandbox (blocking), then how many OOM kills its memory
/// cgroup counted.
fn wait_counting_ooms(
    mut child: palisade_isolate::SandboxChild,
) -> std::io::Result<(palisade_isolate::Exit, u64)> {
    loop {
        if let Some(exit) = child.wait_timeout(Duration::from_secs(3600))? {
            return Ok((exit, child.oom_kills()));
        }
    }
}

/// `memory_limit_exceeded`: the kernel's OOM killer ended processes of the
/// sandbox in its memory cgroup; whether it was the worker itself
/// (`worker_killed`, the exit is `oom_killed`) or only some of its
/// children, and the limit they ran into.
fn record_oom(
    core: &SessionCore,
    exit: palisade_isolate::Exit,
    oom_kills: u64,
    limit: Option<&(String, String)>,
) -> Result<(), String> {
    let (file, value) = limit.cloned().unzip();
    core.journal().record(
        Kind::custom("memory_limit_exceeded").map_err(|e| e.to_string())?,
        &json!({
            "limit": "worker.limits.memory",
            "cgroup_file": file,
            "bytes": value.and_then(|v| v.parse::<u64>().ok()),
            "oom_kills": oom_kills,
            "worker_killed": exit == palisade_isolate::Exit::OomKilled,
        }),
        if core.is_tainted() {
            Flags::TAINTED
        } else {
            Flags::NONE
        },
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn the_grant_goes_to_the_working_directory_when_it_is_a_writable_root() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir_all(b.join("sub")).unwrap();
        std::fs::create_dir_all(&a).unwrap();
        let grant = json!({"tools": []});
        let mut sb = Sandbox::new(palisade_isolate::Profile::governed());
        sb.writable(&a).writable(&b).cwd(&b);
        let mut left = Leftovers::new(&d.path().join("j"), false);
        let path = write_grant(&mut sb, &grant, &mut left).unwrap();
        assert_eq!(path, b.join(".palisade/step-grant.json"));
        // A working directory below a root: the first root, where `.palisade`
        // is protected (it is not protected deeper down).
        sb.cwd(b.join("sub"));
        let path = write_grant(&mut sb, &grant, &mut left).unwrap();
        assert_eq!(path, a.join(".palisade/step-grant.json"));
    }

    #[test]
    fn discarding_a_refused_session_removes_only_what_it_created() {
        let d = tempfile::tempdir().unwrap();
        let journal = d.path().join("run.journal");
        let sockets = d.path().join("session");
        let grant_dir = d.path().join("work/.palisade");
        std::fs::create_dir_all(sockets.join("sub")).unwrap();
        std::fs::create_dir_all(&grant_dir).unwrap();
        let grant = grant_dir.join("step-grant.json");
        let keep = d.path().join("work/keep.txt");
        for f in [&journal, &grant, &keep, &sockets.join("sub/proxy.sock")] {
            std::fs::write(f, "x").unwrap();
        }
        let lock = d.path().join("run.journal.lock");
        std::fs::write(&lock, "").unwrap();
        let host = d.path().join("host.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&host).unwrap();
        let left = Leftovers {
            dir: Some(sockets.clone()),
            host_socket: Some(host.clone()),
            grant: Some(grant.clone()),
            grant_dir: Some(grant_dir.clone()),
            ..Leftovers::new(&journal, true)
        };
        left.discard();
        for gone in [&journal, &lock, &sockets, &host, &grant, &grant_dir] {
            assert!(!gone.exists(), "{} is left", gone.display());
        }
        // Positive control: what the session did not make stays.
        assert!(keep.exists());
        // A lock file that was there before the session is not ours to remove.
        std::fs::write(&journal, "x").unwrap();
        std::fs::write(&lock, "").unwrap();
        Leftovers::new(&journal, false).discard();
        assert!(!journal.exists() && lock.exists());
    }

    /// The policy's first relay, made a git relay (the parser's `kind`,
    /// `username` are set directly: this tests the worker's side only).
    fn git_relay(
        origin: &str,
        name: &str,
        username: Option<&str>,
    ) -> palisade_schema::host_policy::Relay {
        let text = format!(
            "[[egress.relay]]\nname = \"{name}\"\norigin = \"{origin}\"\nroutes = [\"GET /x\"]\ncredential = {{ header = \"authorization\", from_env = \"GIT_TOKEN\", prefix = \"Bearer \" }}\n"
        );
        let (policy, _) = palisade_schema::host_policy::parse("palisade.toml", &text)
            .unwrap()
            .into_parts();
        let mut r = policy.egress.relays.into_iter().next().unwrap();
        r.kind = palisade_schema::host_policy::RelayKind::Git;
        r.credential.username = username.map(str::to_owned);
        if username.is_some() {
            r.credential.prefix = String::new();
        }
        r
    }

    fn placeholder() -> String {
        "redlohecalp-ym".chars().rev().collect()
    }

    #[test]
    fn git_relays_configure_the_worker_s_git_by_environment() {
        use base64::Engine as _;
        let ph = placeholder();
        let basic = git_relay("https://github.com", "github-git", Some("x-access-token"));
        let bearer = git_relay("https://git.test:8443", "other-git", None);
        let vars = git_config_vars(&[
            GitRelayView {
                relay: &basic,
                base_url: "http://127.0.0.1:41001",
                placeholder: &ph,
            },
            GitRelayView {
                relay: &bearer,
                base_url: "http://127.0.0.1:41002",
                placeholder: &ph,
            },
        ])
        .unwrap();
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("{k} is not set: {vars:?}"))
        };
        assert_eq!(get("GIT_CONFIG_COUNT"), "4");
        assert_eq!(vars.len(), 9, "{vars:?}");
        assert_eq!(
            get("GIT_CONFIG_KEY_0"),
            "url.http://127.0.0.1:41001/.insteadOf"
        );
        assert_eq!(get("GIT_CONFIG_VALUE_0"), "https://github.com/");
        assert_eq!(
            get("GIT_CONFIG_KEY_1"),
            "http.http://127.0.0.1:41001/.extraHeader"
        );
        let header = get("GIT_CONFIG_VALUE_1");
        let encoded = header.strip_prefix("authorization: Basic ").unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        assert_eq!(
            String::from_utf8(decoded).unwrap(),
            format!("x-access-token:{ph}")
        );
        // Not on 443: the origin keeps its port; no username: the prefix.
        assert_eq!(
            get("GIT_CONFIG_KEY_2"),
            "url.http://127.0.0.1:41002/.insteadOf"
        );
        assert_eq!(get("GIT_CONFIG_VALUE_2"), "https://git.test:8443/");
        assert_eq!(
            get("GIT_CONFIG_VALUE_3"),
            format!("authorization: Bearer {ph}")
        );
    }

    #[test]
    fn only_git_relays_configure_git_and_one_origin_has_one_git_relay() {
        let ph = placeholder();
        let mut http = git_relay("https://api.test", "api", None);
        http.kind = palisade_schema::host_policy::RelayKind::Http;
        let view = |r| GitRelayView {
            relay: r,
            base_url: "http://127.0.0.1:41001",
            placeholder: &ph,
        };
        assert!(git_config_vars(&[view(&http)]).unwrap().is_empty());
        let a = git_relay("https://github.com", "a", None);
        let b = git_relay("https://github.com:443", "b", None);
        let e = git_config_vars(&[view(&a), view(&b)]).unwrap_err();
        assert!(e.contains("`a` and `b`"), "{e}");
        // Positive control: either one alone is fine.
        assert_eq!(git_config_vars(&[view(&b)]).unwrap().len(), 5);
    }

    #[test]
    fn a_given_git_config_variable_is_refused_when_a_relay_is_a_git_relay() {
        let text = "[[egress.relay]]\nname = \"github-git\"\norigin = \"https://github.com\"\nroutes = [\"GET /x\"]\ncredential = { header = \"authorization\", from_env = \"GIT_TOKEN\" }\n";
        let (mut policy, _) = palisade_schema::host_policy::parse("palisade.toml", text)
            .unwrap()
            .into_parts();
        let mut sb = Sandbox::new(palisade_isolate::Profile::governed());
        sb.env("GIT_CONFIG_KEY_0", "core.hooksPath");
        // Positive control: an HTTP relay sets no git variable, so it passes.
        check_session_env(&sb, &policy, Path::new("palisade.toml")).unwrap();
        policy.egress.relays[0].kind = palisade_schema::host_policy::RelayKind::Git;
        let e = check_session_env(&sb, &policy, Path::new("palisade.toml")).unwrap_err();
        assert!(e.contains("`GIT_CONFIG_KEY_0`"), "{e}");
        let mut sb = Sandbox::new(palisade_isolate::Profile::governed());
        sb.env("GIT_CONFIG_COUNT", "1");
        let e = check_session_env(&sb, &policy, Path::new("palisade.toml")).unwrap_err();
        assert!(e.contains("`GIT_CONFIG_COUNT`"), "{e}");
    }
}
