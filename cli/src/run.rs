//! `palisade run`: launch a command in a fail-closed sandbox.
//!
//! The exit code is the command's (`128 + signal` when it was killed); a
//! setup failure, including a missing isolation layer, exits 125 with the
//! reason on stderr.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use palisade_isolate::{Bridge, Command, Layer, LayerStatus, Profile, Sandbox};

/// Exit status of a sandbox setup failure (as `env`, `nice` and `timeout`).
pub(crate) const EXIT_SETUP: u8 = 125;

/// Arguments of `palisade run`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Sandbox profile: strict, governed, maintenance, or with `--policy` a
    /// custom `[profiles.<name>]` of the policy. Default: the policy's
    /// `worker.profile`, else governed.
    #[arg(long)]
    profile: Option<String>,
    /// Working directory of the command, bound writable. Default: the
    /// current directory under governed and maintenance, the scratch HOME
    /// (`/tmp/home`) under strict.
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// An extra writable root (repeatable).
    #[arg(long = "writable", value_name = "DIR")]
    writable: Vec<PathBuf>,
    /// An extra read-only path (repeatable), e.g. a runtime outside the
    /// system directories under strict.
    #[arg(long = "read", value_name = "PATH")]
    read: Vec<PathBuf>,
    /// Set a variable in the worker (repeatable), `NAME=VALUE`.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Forward 127.0.0.1:PORT inside to a host Unix socket (repeatable),
    /// `PORT=SOCKET`.
    #[arg(long = "bridge", value_name = "PORT=SOCKET")]
    bridge: Vec<String>,
    /// Write the launch report (profile, mount-plan digest, layers) as JSON.
    #[arg(long, value_name = "FILE")]
    launch_report: Option<PathBuf>,
    /// Run without a layer (repeatable; recorded as degraded). Only
    /// landlock, seccomp, net_ns, ipc_ns, uts_ns and cgroups can be named.
    #[arg(long = "dangerously-disable", value_name = "LAYER")]
    dangerously_disable: Vec<String>,
    /// The worker's uid (and gid) inside the sandbox, mapped 1:1. Default:
    /// the invoking user, or 64000 when palisade runs as root. As root,
    /// writable roots must be writable by this uid; `--worker-uid 0` keeps
    /// root's file ownership (still without any capability) and needs
    /// `--dangerously-allow-root-worker`.
    #[arg(long, value_name = "UID")]
    worker_uid: Option<u32>,
    /// Allow the worker to run as uid 0 (`--worker-uid 0`): it reads root's
    /// owner-only files in its view (the secret stores stay masked) and
    /// writes root's files in the writable roots.
    #[arg(long)]
    dangerously_allow_root_worker: bool,
    /// List every directory of the read-only trees on each launch, without
    /// the socket-walk cache (kept in `$XDG_RUNTIME_DIR/palisade`, or
    /// `/run/palisade` for root; see docs/sandbox.md).
    #[arg(long)]
    no_walk_cache: bool,
    /// Staged writes: `--writes staged|direct`, `--keep-staged`, `--stage-dir DIR`.
    #[command(flatten)]
    pub(crate) staged: crate::stage::RunArgs,
    /// The governed form: `--policy palisade.toml --journal FILE --key KEY`.
    #[command(flatten)]
    governed: crate::session::launch::GovernedArgs,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

/// Where `palisade run` keeps its state (the socket-walk cache, the
/// placeholder records): the user's runtime directory (`$XDG_RUNTIME_DIR`,
/// a private per-user tmpfs), or `/run/palisade` for root; none for a user
/// without a runtime directory.
pub(crate) fn state_dir() -> Option<PathBuf> {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(d) if d.is_absolute() => Some(d.join("palisade")),
        _ if nix::unistd::geteuid().is_root() => Some(PathBuf::from("/run/palisade")),
        _ => None,
    }
}

/// `palisade run …` parsed on its own, without building the other
/// subcommands: `None` when the first argument is not `run` or when the
/// lean parse fails (help, version, errors), so the full parser handles it.
pub(crate) fn parse_lean() -> Option<Args> {
    use clap::{Args as _, FromArgMatches as _};
    let mut argv = std::env::args_os();
    let _program = argv.next();
    if argv.next().as_deref() != Some(std::ffi::OsStr::new("run")) {
        return None;
    }
    let cmd = Args::augment_args(clap::Command::new("run").bin_name("palisade run"));
    let matches = cmd
        .try_get_matches_from(std::iter::once(OsString::from("run")).chain(argv))
        .ok()?;
    Args::from_arg_matches(&matches).ok()
}

/// The launch report as JSON.
pub(crate) fn report_json(r: &palisade_isolate::LaunchReport) -> serde_json::Value {
    serde_json::json!({
        "profile": r.profile,
        "mount_plan_digest": r.mount_plan_digest,
        "worker_uid": r.worker_uid,
        "worker_gid": r.worker_gid,
        "downgraded": r.downgraded.iter().map(|l| l.name()).collect::<Vec<_>>(),
        "deviations": r.deviations,
        "env_dropped": r.env_dropped,
        "limits": r.limits.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        "layers": r.layers.iter().map(|(l, s)| layer_json(*l, s)).collect::<Vec<_>>(),
        "mount_plan": r.mount_plan.text().lines().collect::<Vec<_>>(),
        "bridges": r.bridges.iter().map(|b| serde_json::json!({"port": b.port, "target": b.target.display().to_string()})).collect::<Vec<_>>(),
    })
}

/// One layer as JSON.
pub(crate) fn layer_json(l: Layer, s: &LayerStatus) -> serde_json::Value {
    serde_json::json!({"layer": l.name(), "status": s.word(), "detail": s.detail()})
}

/// The signals `palisade run` forwards to the worker.
const FORWARDED: [nix::sys::signal::Signal; 7] = [
    nix::sys::signal::Signal::SIGINT,
    nix::sys::signal::Signal::SIGTERM,
    nix::sys::signal::Signal::SIGHUP,
    nix::sys::signal::Signal::SIGQUIT,
    nix::sys::signal::Signal::SIGUSR1,
    nix::sys::signal::Signal::SIGUSR2,
    // On the worker's own pty, a new window size (see `docs/sandbox.md`).
    nix::sys::signal::Signal::SIGWINCH,
];

fn forwarded_signals() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    for s in FORWARDED {
        set.add(s);
    }
    set
}

fn setup_failure(msg: impl std::fmt::Display) -> Result<ExitCode, String> {
    eprintln!("palisade: {msg}");
    Ok(ExitCode::from(EXIT_SETUP))
}

/// Runs `palisade run`.
pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    // The policy is read and parsed once: the profile is resolved from it
    // and the governed session runs (and records the digest of) the same text.
    let loaded = match &args.governed.policy {
        Some(path) => match crate::host_policy_file::load_policy(path) {
            Ok(l) => Some(l),
            Err(e) => return setup_failure(e),
        },
        None => None,
    };
    let profile = match &loaded {
        Some(loaded) => {
            let policy = &loaded.policy;
            let name = args
                .profile
                .clone()
                .unwrap_or_else(|| policy.worker.profile_name().to_owned());
            match Profile::resolve(policy, &name) {
                Ok(p) => p,
                Err(e) => return setup_failure(e),
            }
        }
        None => {
            let name = args.profile.as_deref().unwrap_or("governed");
            let Some(p) = Profile::by_name(name) else {
                return setup_failure(format!(
                    "unknown profile `{name}` (expected one of {}; custom profiles need --policy)",
                    Profile::BUILT_IN.join(", ")
                ));
            };
            p
        }
    };
    let host_view = profile.root() == palisade_isolate::RootView::HostReadOnly;
    let mut sb = Sandbox::new(profile);
    let state = state_dir();
    if !args.no_walk_cache
        && let Some(dir) = &state
    {
        sb.walk_cache(dir);
    }
    // The placeholders of each launch are recorded there, and what killed
    // launches left is removed before this one (`palisade cleanup` too).
    if let Some(dir) = state {
        sb.placeholder_records(dir);
    }
    // The working directory is a writable root. Under the host-view
    // profiles it defaults to the current directory; under strict only an
    // explicit --cwd is bound in, otherwise the command starts in the
    // scratch HOME.
    // A policy's `worker.cwd` is the working directory (applied with the
    // rest of `[worker]`, not bound writable by itself); a different --cwd
    // is refused rather than one of the two silently ignored.
    let policy_cwd = loaded
        .as_ref()
        .and_then(|l| l.policy.worker.cwd.as_deref().map(PathBuf::from));
    if let (Some(flag), Some(p)) = (&args.cwd, &policy_cwd)
        && flag != p
    {
        return setup_failure(format!(
            "--cwd {} differs from the policy's worker.cwd {}",
            flag.display(),
            p.display()
        ));
    }
    let cwd = match (args.cwd, host_view) {
        (Some(c), _) => Some(c),
        (None, _) if policy_cwd.is_some() => None,
        (None, true) => match std::env::current_dir() {
            Ok(c) => Some(c),
            Err(e) => return setup_failure(format!("cannot read the current directory: {e}")),
        },
        (None, false) => None,
    };
    if let Some(cwd) = cwd {
        sb.writable(cwd.clone());
        sb.cwd(cwd);
    }
    for w in args.writable {
        sb.writable(w);
    }
    for r in args.read {
        sb.read_only(r);
    }
    for kv in &args.env {
        let Some((k, v)) = kv.split_once('=') else {
            return setup_failure(format!("--env `{kv}` is not NAME=VALUE"));
        };
        sb.env(k, v);
    }
    for b in &args.bridge {
        let parsed = b
            .split_once('=')
            .and_then(|(p, s)| p.parse::<u16>().ok().map(|p| (p, PathBuf::from(s))));
        let Some((port, target)) = parsed else {
            return setup_failure(format!("--bridge `{b}` is not PORT=SOCKET"));
        };
        sb.bridge(Bridge::new(port, target));
    }
    if let Some(uid) = args.worker_uid {
        sb.identity(palisade_isolate::WorkerIdentity::Dedicated { uid, gid: uid });
        // The kernel does not apply RLIMIT_NPROC to host root: say so and
        // record it (a process limit a policy sets is then refused).
        if uid == 0 && nix::unistd::geteuid().is_root() {
            sb.dangerous()
                .set_limit(palisade_isolate::Limit::Processes, None);
            eprintln!(
                "palisade: warning: --worker-uid 0 runs without a process limit (the kernel does not apply RLIMIT_NPROC to root)"
            );
        }
    }
    if args.dangerously_allow_root_worker {
        sb.dangerous().allow_root_worker();
        eprintln!("palisade: warning: the worker may run as root's uid (dangerously allowed)");
    }
    for name in &args.dangerously_disable {
        let Some(layer) = Layer::from_name(name) else {
            return setup_failure(format!("unknown layer `{name}`"));
        };
        if let Err(e) = sb.dangerous().disable(layer) {
            return setup_failure(e);
        }
        eprintln!("palisade: warning: running without `{name}` (dangerously disabled)");
    }
    match args.staged.writes {
        Some(crate::stage::Writes::Direct) => {
            if args.staged.keep_staged {
                return setup_failure("--keep-staged needs staged writes, not --writes direct");
            }
            if let Err(e) = sb.dangerous().disable(Layer::StagedWrites) {
                return setup_failure(e);
            }
            eprintln!(
                "palisade: warning: writes go straight to the host (--writes direct): nothing filters what the worker leaves in the writable roots"
            );
        }
        Some(crate::stage::Writes::Staged) | None => {}
    }
    if let Some(loaded) = loaded {
        return crate::session::launch::run(
            sb,
            loaded,
            args.governed,
            args.staged,
            args.command,
            args.launch_report,
        );
    }
    // Staged writes: the stage is named by a fresh session id, in a base
    // outside every writable root.
    let session = match crate::session::launch::random_id() {
        Ok(id) => id,
        Err(e) => return setup_failure(e),
    };
    if args.staged.writes != Some(crate::stage::Writes::Direct)
        && !sb.profile().writable().is_empty()
    {
        let base =
            match crate::stage::run_base(args.staged.stage_dir.as_deref(), sb.profile().writable())
            {
                Ok(b) => b,
                Err(e) => return setup_failure(format!("staged_writes: {e}")),
            };
        sb.stage_in(base, session.clone());
    }
    // Termination signals are forwarded to the worker (through the
    // supervisor and init) instead of killing palisade; the worker's exit
    // status then becomes ours. Blocked before the fork, so none is lost.
    let forwarded = forwarded_signals();
    if let Err(e) = forwarded.thread_block() {
        return setup_failure(format!("cannot block signals: {e}"));
    }
    // The built-in list (a plain run has no policy to add to it).
    let sb_filter = sb.commit_filter().clone();
    let mut child = match sb.spawn(Command::new(args.command)) {
        Ok(c) => c,
        Err(e) => return setup_failure(e),
    };
    if let Some(path) = &args.launch_report {
        let text = report_json(child.report()).to_string();
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!(
                "palisade: warning: cannot write the launch report {}: {e}",
                path.display()
            );
        }
    }
    let signals: Vec<palisade_isolate::Signal> = FORWARDED
        .iter()
        .filter_map(|s| palisade_isolate::Signal::from_raw(*s as i32))
        .collect();
    let stage = child.take_stage();
    if stage.is_some() {
        eprintln!("palisade: session {session}: writes are staged");
    }
    let waited = child.wait_forwarding(&signals);
    // The command's status is known and every process of the sandbox is
    // gone: exit now, as bwrap does, rather than wait for the kernel to tear
    // the namespaces down (the orphaned supervisor is reaped by our parent's
    // init).
    child.detach();
    let code = match waited {
        // The shell's number: a wall-limit kill is 137, as documented.
        Ok(exit) => {
            if exit == palisade_isolate::Exit::OomKilled {
                eprintln!(
                    "palisade: the worker was killed by the kernel's OOM killer at its memory limit (worker.limits.memory)"
                );
            }
            u8::try_from(exit.code()).unwrap_or(EXIT_SETUP)
        }
        Err(e) => {
            if let Some(stage) = &stage {
                eprintln!(
                    "palisade: the stage is kept in {} (session {session})",
                    crate::stage::show_path(stage.dir())
                );
            }
            return setup_failure(format!("waiting for the sandbox: {e}"));
        }
    };
    let Some(stage) = stage else {
        return Ok(ExitCode::from(code));
    };
    let mut filter = sb_filter;
    crate::stage::mark_homes(&mut filter, &stage);
    Ok(ExitCode::from(crate::stage::finish(
        stage,
        &filter,
        args.staged.keep_staged,
        None,
        code,
    )))
}
