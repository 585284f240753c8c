//! The [`Sandbox`] builder and the launch: fork, namespaces, mount plan,
//! init, worker hardening, exec.
//!
//! Process tree: the launcher forks a *supervisor* that creates the user,
//! mount, PID, network, IPC and UTS namespaces in one `unshare` (the
//! launcher then writes the uid/gid maps), forks the sandbox's *init* (PID 1
//! of the new PID namespace) at once and brings up loopback while init
//! waits for the launcher's go and builds the root. Init then waits for
//! loopback, binds the bridges, and forks the *worker*, which hardens
//! itself and execs the command. Every setup
//! failure travels to the launcher through a close-on-exec pipe as
//! `(step, errno, detail)`; end-of-file on that pipe means the command was
//! executed.

use std::collections::BTreeSet;
use std::ffi::{CString, OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, Signal as NixSignal};

use crate::error::{SandboxError, Step};
use crate::exit::{Exit, Signal};
use crate::layer::{Layer, LayerStatus, ProbeReport, probe};
use crate::plan::{self, MountPlan, PlanInput};
use crate::profile::{DEFAULT_PATH, NetworkMode, Profile};
use crate::stage::Stage;
use crate::{init, landlock_rules, seccomp, sys};

/// The uid/gid the worker runs as when the launcher is root.
pub const DEFAULT_WORKER_UID: u32 = 64_000;

/// Who the worker is inside the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkerIdentity {
    /// The invoking uid/gid, mapped 1:1 (the default when not root).
    Invoker,
    /// A dedicated uid/gid, mapped 1:1 (the default when root:
    /// [`DEFAULT_WORKER_UID`]).
    Dedicated {
        /// Worker uid (same inside and outside).
        uid: u32,
        /// Worker gid (same inside and outside).
        gid: u32,
    },
}

/// A bridge out of the network namespace: init listens on
/// `127.0.0.1:port` inside and forwards each connection to a host Unix
/// socket (the egress proxy, a relay).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Bridge {
    /// The loopback port inside the sandbox.
    pub port: u16,
    /// The host Unix socket each connection is forwarded to.
    pub target: PathBuf,
}

impl Bridge {
    /// A bridge from `127.0.0.1:port` inside to the host socket `target`.
    pub fn new(port: u16, target: impl Into<PathBuf>) -> Bridge {
        Bridge {
            port,
            target: target.into(),
        }
    }
}

/// Where a standard stream of the worker comes from.
#[derive(Debug, Default)]
#[non_exhaustive]
pub enum Stdio {
    /// The launcher's own descriptor.
    #[default]
    Inherit,
    /// `/dev/null`.
    Null,
    /// A descriptor handed over (a pipe end, a file).
    Fd(OwnedFd),
    /// A new pipe: the worker gets one end, the launcher the other through
    /// [`SandboxChild::take_stdin`], [`SandboxChild::take_stdout`] or
    /// [`SandboxChild::take_stderr`].
    Piped,
}

impl Stdio {
    /// The launcher's own descriptor ([`Stdio::Inherit`]).
    pub fn inherit() -> Stdio {
        Stdio::Inherit
    }

    /// `/dev/null` ([`Stdio::Null`]).
    pub fn null() -> Stdio {
        Stdio::Null
    }

    /// A new pipe to the launcher ([`Stdio::Piped`]).
    pub fn piped() -> Stdio {
        Stdio::Piped
    }
}

impl From<OwnedFd> for Stdio {
    fn from(fd: OwnedFd) -> Stdio {
        Stdio::Fd(fd)
    }
}

/// The command to run and its standard streams: built with
/// [`Command::new`] and refined with [`Command::stdin`],
/// [`Command::stdout`] and [`Command::stderr`].
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Command {
    /// Program and arguments; the program is looked up in the sandbox's
    /// `PATH` unless it contains a `/`.
    pub argv: Vec<OsString>,
    /// Standard input.
    pub stdin: Stdio,
    /// Standard output.
    pub stdout: Stdio,
    /// Standard error.
    pub stderr: Stdio,
}

impl Command {
    /// A command with inherited streams.
    pub fn new<I, S>(argv: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Command {
            argv: argv.into_iter().map(Into::into).collect(),
            ..Command::default()
        }
    }

    /// Set the worker's standard input.
    pub fn stdin(mut self, stdio: impl Into<Stdio>) -> Command {
        self.stdin = stdio.into();
        self
    }

    /// Set the worker's standard output.
    pub fn stdout(mut self, stdio: impl Into<Stdio>) -> Command {
        self.stdout = stdio.into();
        self
    }

    /// Set the worker's standard error.
    pub fn stderr(mut self, stdio: impl Into<Stdio>) -> Command {
        self.stderr = stdio.into();
        self
    }
}

/// A sandbox configuration: a profile plus launch details. One builder can
/// launch many workers.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub(crate) profile: Profile,
    cwd: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
    bridges: Vec<Bridge>,
    identity: Option<WorkerIdentity>,
    disabled: BTreeSet<Layer>,
    simulated: Vec<(Layer, String)>,
    simulated_abi: Option<u32>,
    walk_cache: Option<PathBuf>,
    placeholder_records: Option<PathBuf>,
    root_worker: bool,
    /// Where the stage of a staged launch is created: the base directory
    /// and the session name ([`Sandbox::stage_in`]).
    stage_in: Option<(PathBuf, String)>,
    /// A probe taken by [`Sandbox::reuse_probe`], shared by clones; `None`
    /// probes afresh on every launch.
    probed: Option<std::sync::Arc<ProbeReport>>,
    /// The filter the stage's changes pass before they reach the host.
    commit_filter: crate::stage::CommitFilter,
    /// The cgroup limits (`[worker] limits` memory, swap, pids, cpus).
    cgroup_limits: crate::cgroup::CgroupLimits,
    /// The cgroupfs the sandbox's cgroup is made in (`/sys/fs/cgroup`).
    cgroup_root: PathBuf,
}

/// The explicit, named downgrade door: see [`Sandbox::dangerous`].
#[derive(Debug)]
pub struct DangerousSandbox<'a> {
    pub(crate) sandbox: &'a mut Sandbox,
}

impl DangerousSandbox<'_> {
    /// Run without `layer`. The launch report records it as degraded.
    /// Structural layers (mount and PID namespaces, user namespace,
    /// capabilities, `no_new_privs`, rlimits) cannot be switched off.
    pub fn disable(&mut self, layer: Layer) -> Result<&mut Self, SandboxError> {
        if !layer.downgradable() {
            return Err(SandboxError::NotDowngradable(layer));
        }
        self.sandbox.disabled.insert(layer);
        Ok(self)
    }

    /// Let the worker of a root launcher run as uid 0 or gid 0
    /// ([`WorkerIdentity::Dedicated`] with 0, or [`WorkerIdentity::Invoker`]).
    /// It still has no capability, but root's owner-only files in its view
    /// are its own (the [`crate::SECRET_STORES`] stay masked) and so are
    /// root's files in the writable roots. Without this a launch with
    /// either id 0 is refused ([`SandboxError::RootWorker`]).
    pub fn allow_root_worker(&mut self) -> &mut Self {
        self.sandbox.root_worker = true;
        self
    }
}

/// What a launch enforced: recorded by the caller in its journal.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaunchReport {
    /// The profile name.
    pub profile: String,
    /// `sha256:` digest of the effective mount plan.
    pub mount_plan_digest: String,
    /// The effective mount plan.
    pub mount_plan: MountPlan,
    /// Every layer with its status at launch.
    pub layers: Vec<(Layer, LayerStatus)>,
    /// Layers switched off through [`Sandbox::dangerous`].
    pub downgraded: Vec<Layer>,
    /// Every other weakening of the profile made through
    /// [`Sandbox::dangerous`] (another root view, a removed mask, a raised
    /// limit, …), in order; empty when the profile is its base or tighter.
    pub deviations: Vec<String>,
    /// The worker's uid and gid.
    pub worker_uid: u32,
    /// The worker's gid.
    pub worker_gid: u32,
    /// The bridges (port → host socket).
    pub bridges: Vec<Bridge>,
    /// Names the profile allowlists that were not passed because they look
    /// like credentials (names only, never a value), in allowlist order.
    pub env_dropped: Vec<String>,
    /// Every resource limit applied, with its value, in order: the rlimits
    /// (`RLIMIT_NOFILE=4096`, `RLIMIT_AS=inherited`) and then the cgroup's
    /// files as written (`memory.max=2147483648`, v1
    /// `memory.limit_in_bytes=…`).
    pub limits: Vec<(String, String)>,
}

/// A launched sandbox.
///
/// The handle is async-ready: it is [`AsFd`] through a pidfd of the
/// supervisor, readable once the sandbox is done, so an embedder can put it
/// in its own `poll`/epoll set (or use [`SandboxChild::wait_async`] under
/// the `tokio` feature) and then collect the status with
/// [`SandboxChild::try_wait`] without blocking. Dropping a handle whose
/// sandbox is still running stops it (the supervisor kills init, whose exit
/// waits for every process of the sandbox) and hands the reaping, and then
/// the removal of the placeholders, to a background reaper thread: `drop`
/// never waits.
#[derive(Debug)]
pub struct SandboxChild {
    pid: nix::unistd::Pid,
    /// A pidfd of the supervisor (our unreaped child when it was opened).
    pidfd: OwnedFd,
    report: LaunchReport,
    placeholders: Vec<plan::Placeholder>,
    reaped: bool,
    /// Read end of the supervisor's status pipe: the worker's status once
    /// init has ended (so every process of the sandbox is gone), before the
    /// supervisor tears the namespaces down; end-of-file if it died first.
    ended: Option<OwnedFd>,
    /// Write end of the stop pipe: closing it has the supervisor kill init
    /// (and so the whole sandbox) and wait for it before it exits.
    stop: Option<OwnedFd>,
    /// How the worker ended, once known: read from `ended` (placeholders
    /// removed), or the supervisor's own ending when it died first.
    status: Option<Exit>,
    /// The launcher's ends of the pipes of [`Stdio::Piped`] streams.
    stdin: Option<std::fs::File>,
    stdout: Option<std::fs::File>,
    stderr: Option<std::fs::File>,
    /// The relay between the launcher's terminal and the worker's own pty
    /// (`pty.rs`), when one of fds 0–2 was a terminal; dropped (terminal
    /// restored) once the status is known.
    terminal: Option<crate::pty::Relay>,
    /// The stage of a staged launch. Never removed here: dropping the
    /// child leaves it on disk for the embedder to commit or remove.
    stage: Option<Stage>,
    /// The sandbox's PID namespace ([`SandboxChild::pid_namespace`]).
    pid_ns: PidNs,
    /// The sandbox's own cgroup, when limits asked for one; removed once
    /// the status is known.
    cgroup: Option<crate::cgroup::Cgroup>,
    /// The OOM kills counted in that cgroup when the status became known.
    oom_kills: u64,
}

impl AsFd for SandboxChild {
    /// A pidfd of the supervisor: readable (`POLLIN`) once the sandbox has
    /// ended and its namespaces are torn down, when
    /// [`SandboxChild::try_wait`] returns the status without blocking.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }
}

impl SandboxChild {
    /// The supervisor's pid (signals sent to it reach the worker).
    pub fn pid(&self) -> u32 {
        u32::try_from(self.pid.as_raw()).unwrap_or(0)
    }

    /// The sandbox's PID namespace, for
    /// [`crate::observe::ReadObserver::attribute_to`]: the supervisor's
    /// `/proc/<pid>/ns/pid_for_children` (the namespace it unshared, where
    /// init and every process of the sandbox live; a namespace the worker
    /// nests below it counts as the sandbox's for the observer).
    ///
    /// Read during the launch, after the supervisor has unshared and while
    /// it waits for its go: it is then this process's unreaped child (its
    /// pid can name no other process) and has not ended, so neither a
    /// recycled pid nor a sandbox that ends at once can make it wrong. The
    /// value stays valid after the sandbox ended: the child holds the
    /// namespace open, so its inode number is not reused while the child
    /// lives. An error only when the launch could not read it.
    pub fn pid_namespace(&self) -> std::io::Result<crate::observe::PidNamespace> {
        match &self.pid_ns {
            Ok((ns, _)) => Ok(*ns),
            Err(why) => Err(std::io::Error::other(format!(
                "pid_namespace: the supervisor's pid_for_children could not be read at launch: {why}"
            ))),
        }
    }

    /// What was enforced.
    pub fn report(&self) -> &LaunchReport {
        &self.report
    }

    /// The stage of a staged launch (`None` under direct writes or without
    /// writable roots). Its upper layers are the worker's writes; commit
    /// them once the worker has ended.
    pub fn stage(&self) -> Option<&Stage> {
        self.stage.as_ref()
    }

    /// Take the stage out of the handle (e.g. before [`SandboxChild::wait`],
    /// which consumes it). Dropping the handle never removes the stage
    /// either way.
    pub fn take_stage(&mut self) -> Option<Stage> {
        self.stage.take()
    }

    /// The writing end of the worker's standard input, when it was
    /// [`Stdio::Piped`] (once: later calls return `None`). Drop it to give
    /// the worker end-of-file.
    pub fn take_stdin(&mut self) -> Option<std::fs::File> {
        self.stdin.take()
    }

    /// The reading end of the worker's standard output, when it was
    /// [`Stdio::Piped`] (once: later calls return `None`).
    pub fn take_stdout(&mut self) -> Option<std::fs::File> {
        self.stdout.take()
    }

    /// The reading end of the worker's standard error, when it was
    /// [`Stdio::Piped`] (once: later calls return `None`).
    pub fn take_stderr(&mut self) -> Option<std::fs::File> {
        self.stderr.take()
    }

    /// When one of the worker's fds 0–2 was a terminal (it runs on a pty of
    /// its own, see `docs/sandbox.md`): the handle that passes the real
    /// terminal's window size on, for a launcher that watches SIGWINCH
    /// itself rather than through [`SandboxChild::wait_forwarding`].
    pub fn terminal_resize(&self) -> Option<crate::pty::TerminalResize> {
        self.terminal.as_ref().map(|t| t.resizer().clone())
    }

    /// Send `signal` to the sandbox, through the pidfd (no pid-reuse race).
    /// The supervisor and init forward `SIGTERM`, `SIGINT`, `SIGHUP`,
    /// `SIGQUIT`, `SIGUSR1`, `SIGUSR2` and `SIGWINCH` to the worker;
    /// [`Signal::KILL`] kills the supervisor and with it the whole sandbox
    /// (the status is then [`Exit::Signaled`]`(`[`Signal::KILL`]`)`, never
    /// [`Exit::WallLimit`]). Any other signal acts on the supervisor itself.
    /// Fails (`ESRCH`) once the sandbox has been reaped.
    pub fn kill(&self, signal: Signal) -> std::io::Result<()> {
        sys::pidfd_send_signal(&self.pidfd, signal.as_raw())
            .map_err(std::io::Error::from_raw_os_error)
    }

    /// Check without blocking whether the sandbox has ended: how the
    /// worker ended, or `None` while it runs. Once it has returned a status
    /// it returns the same status again.
    pub fn try_wait(&mut self) -> std::io::Result<Option<Exit>> {
        self.wait_timeout(std::time::Duration::ZERO)
    }

    /// Wait at most `timeout` for the sandbox to end: how the worker ended,
    /// or `None` when it still runs at the timeout (it is left running).
    /// Once it has returned a status it returns the same status again.
    pub fn wait_timeout(&mut self, timeout: std::time::Duration) -> std::io::Result<Option<Exit>> {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        if let (true, Some(s)) = (self.reaped, self.status) {
            return Ok(Some(s));
        }
        let deadline = std::time::Instant::now().checked_add(timeout);
        loop {
            let left = deadline.map_or(std::time::Duration::from_millis(60_000), |d| {
                d.saturating_duration_since(std::time::Instant::now())
            });
            let ms = u16::try_from(left.as_millis().min(60_000)).unwrap_or(60_000);
            // Round a fraction of a millisecond up, so a short timeout is
            // not spent busy-polling.
            let ms = if left > std::time::Duration::from_millis(u64::from(ms)) {
                ms.saturating_add(1)
            } else {
                ms
            };
            let mut fds = [PollFd::new(self.pidfd.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(0) | Err(nix::errno::Errno::EINTR) => {}
                Ok(_) => return self.finish().map(Some),
                Err(e) => return Err(e.into()),
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Ok(None);
            }
        }
    }

    /// Wait for the worker and return how it ended. Returns once the
    /// supervisor has been reaped (the namespaces are torn down).
    pub fn wait(mut self) -> std::io::Result<Exit> {
        self.finish()
    }

    /// Wait for the sandbox to end without blocking the runtime, over the
    /// pidfd through `tokio::io::unix::AsyncFd` (needs a tokio runtime with
    /// IO enabled), then collect the status as [`SandboxChild::try_wait`]
    /// does. Cancel-safe: dropping the future leaves the sandbox running.
    #[cfg(feature = "tokio")]
    pub async fn wait_async(&mut self) -> std::io::Result<Exit> {
        if let (true, Some(s)) = (self.reaped, self.status) {
            return Ok(s);
        }
        sys::pidfd_ended(&self.pidfd).await?;
        self.finish()
    }

    /// Collect the status, blocking until the supervisor has ended: init's
    /// record from the status pipe, else (the supervisor died first) the
    /// supervisor's own ending; then reap it and remove the placeholders.
    fn finish(&mut self) -> std::io::Result<Exit> {
        if self.reaped {
            return self
                .status
                .ok_or_else(|| std::io::Error::other("sandbox already reaped"));
        }
        // Once init has ended, no process of the sandbox is left: the
        // placeholders go while the supervisor tears the namespaces down.
        let recorded = self.read_ended();
        let own = reap(self.pid)?;
        self.reaped = true;
        plan::remove_placeholders(&self.placeholders);
        self.placeholders.clear();
        self.terminal = None;
        let exit = self.judge_oom(recorded.unwrap_or(own));
        self.status = Some(exit);
        Ok(exit)
    }

    /// Once the sandbox has ended: count the OOM kills of its cgroup, turn
    /// a `SIGKILL` the memory cgroup's OOM killer dealt into
    /// [`Exit::OomKilled`], then kill what is left in the cgroup and
    /// remove it.
    fn judge_oom(&mut self, exit: Exit) -> Exit {
        let Some(mut cg) = self.cgroup.take() else {
            return exit;
        };
        self.oom_kills = cg.oom_kills();
        cg.remove();
        match exit {
            Exit::Signaled(Signal::KILL) if self.oom_kills > 0 => Exit::OomKilled,
            other => other,
        }
    }

    /// How many processes of the sandbox the kernel's OOM killer ended in
    /// the sandbox's memory cgroup (`[worker] limits.memory`), once the
    /// status is known; 0 without a memory limit. The worker itself shows
    /// as [`Exit::OomKilled`]; this also counts a child of the worker the
    /// worker survived.
    pub fn oom_kills(&self) -> u64 {
        self.oom_kills
    }

    /// Read init's status from the supervisor's pipe (blocking) and, when
    /// it came, remove the placeholders: every process of the sandbox has
    /// ended. End-of-file (the supervisor died first) leaves both to the
    /// reaping.
    fn read_ended(&mut self) -> Option<Exit> {
        if self.status.is_none()
            && let Some(fd) = self.ended.take()
            && let Some(exit) = read_status(&fd)
        {
            plan::remove_placeholders(&self.placeholders);
            self.placeholders.clear();
            let exit = self.judge_oom(exit);
            self.status = Some(exit);
            self.terminal = None;
        }
        self.status
    }

    /// Wait for the worker's status, forwarding `signals` to it as they
    /// arrive (the calling thread must have blocked them before the launch,
    /// so none is lost; they are read through a `signalfd`). When the worker
    /// runs on its own pty, SIGWINCH is not forwarded but passes the real
    /// terminal's new window size on (the kernel signals the worker).
    ///
    /// Returns as soon as the status is known: init has ended, and with it
    /// every process of the sandbox, and the placeholders are removed. The
    /// supervisor may still be tearing the namespaces down: dropping the
    /// child hands it to the background reaper, [`SandboxChild::detach`]
    /// leaves it to whoever inherits it (for a launcher that exits right
    /// away, as `palisade run` does).
    pub fn wait_forwarding(&mut self, signals: &[Signal]) -> std::io::Result<Exit> {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use nix::sys::signalfd::{SfdFlags, SignalFd};
        if let (true, Some(s)) = (self.reaped, self.status) {
            return Ok(s);
        }
        let mut set = SigSet::empty();
        for s in signals {
            set.add(NixSignal::try_from(s.as_raw()).map_err(std::io::Error::from)?);
        }
        let sfd = SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
            .map_err(std::io::Error::from)?;
        if let Some(ended) = &self.ended {
            loop {
                let mut fds = [
                    PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
                    PollFd::new(ended.as_fd(), PollFlags::POLLIN),
                ];
                match poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => return Err(e.into()),
                }
                let [sig_fd, end_fd] = fds;
                let done = end_fd.revents().is_some_and(|r| !r.is_empty());
                if sig_fd.revents().is_some_and(|r| !r.is_empty()) {
                    while let Ok(Some(info)) = sfd.read_signal() {
                        let sig = NixSignal::try_from(i32::try_from(info.ssi_signo).unwrap_or(0));
                        match (sig, &self.terminal) {
                            // The worker's own pty takes the new size; the
                            // kernel signals its foreground group.
                            (Ok(NixSignal::SIGWINCH), Some(t)) => t.resizer().resize(),
                            (Ok(sig), _) => {
                                let _ = sys::pidfd_send_signal(&self.pidfd, sig as i32);
                            }
                            (Err(_), _) => {}
                        }
                    }
                }
                if done {
                    break;
                }
            }
        }
        if let Some(exit) = self.read_ended() {
            return Ok(exit);
        }
        // The supervisor ended without a status (killed): its own.
        self.finish()
    }

    /// Let go of a sandbox whose status [`SandboxChild::wait_forwarding`]
    /// has returned without waiting for the supervisor's teardown of the
    /// namespaces (no process of the sandbox is left; whoever inherits the
    /// supervisor reaps it). Before the status is known this is a drop: the
    /// sandbox is killed and reaped in the background.
    pub fn detach(mut self) {
        if self.status.is_some() {
            self.reaped = true;
        }
    }
}

/// Read the supervisor's status record (blocking); `None` on end-of-file
/// (the supervisor died before writing it) or a malformed record.
fn read_status(fd: &OwnedFd) -> Option<Exit> {
    let mut buf = [0u8; crate::exit::RECORD];
    read_full(fd, &mut buf)?;
    Exit::decode(&buf)
}

/// Fill `buf` from `fd` (blocking); `None` on end-of-file or an error.
fn read_full(fd: &OwnedFd, buf: &mut [u8]) -> Option<()> {
    let mut got = 0;
    while got < buf.len() {
        match nix::unistd::read(fd, buf.get_mut(got..).unwrap_or(&mut [])) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return None,
        }
    }
    Some(())
}

impl Drop for SandboxChild {
    /// Never blocks: a sandbox still running is stopped (the stop pipe
    /// closed: the supervisor kills init, whose exit waits for every
    /// process of the sandbox) and handed to the background reaper, which
    /// reaps the supervisor and then removes the launch's placeholders.
    fn drop(&mut self) {
        if !self.reaped {
            self.stop = None;
            self.reaped = true;
            let pidfd = self.pidfd.try_clone().ok();
            crate::reaper::hand_over(
                self.pid,
                pidfd,
                std::mem::take(&mut self.placeholders),
                self.cgroup.take(),
            );
        }
    }
}

/// Reap `pid` (blocking): how it ended.
fn reap(pid: nix::unistd::Pid) -> std::io::Result<Exit> {
    use nix::sys::wait::waitpid;
    loop {
        match waitpid(pid, None) {
            Ok(st) => {
                if let Some(e) = Exit::from_wait(st) {
                    return Ok(e);
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

pub(crate) fn wait_code(pid: nix::unistd::Pid) -> std::io::Result<i32> {
    reap(pid).map(Exit::code)
}

/// Names of launcher variables never passed through, even when allowlisted.
fn sensitive(name: &OsStr) -> bool {
    crate::profile::sensitive_env(&name.to_string_lossy())
}

impl Sandbox {
    /// A sandbox for a profile.
    pub fn new(profile: Profile) -> Sandbox {
        Sandbox {
            profile,
            cwd: None,
            env: Vec::new(),
            bridges: Vec::new(),
            identity: None,
            disabled: BTreeSet::new(),
            simulated: Vec::new(),
            simulated_abi: None,
            walk_cache: None,
            placeholder_records: None,
            root_worker: false,
            stage_in: None,
            probed: None,
            commit_filter: crate::stage::CommitFilter::new(),
            cgroup_limits: crate::cgroup::CgroupLimits::default(),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
        }
    }

    /// Probe the host's layers now and check later launches of this sandbox
    /// (and of its clones) against that one report instead of probing
    /// before each: what an embedder that launches many workers wants.
    ///
    /// The report is kept inside the sandbox, never handed in by the
    /// caller, so it cannot be edited to claim a layer, or a Landlock ABI,
    /// the host does not have. A stale report cannot weaken a launch either:
    /// every required layer is still enforced by the worker's setup, and one
    /// the kernel no longer grants is a setup error (fail closed), while one
    /// that appeared since is still reported unavailable until the next
    /// `reuse_probe`. Call it again after changing the host (a sysctl, a
    /// kernel module) to take a new report.
    pub fn reuse_probe(&mut self) -> &mut Self {
        self.probed = Some(std::sync::Arc::new(probe()));
        self
    }

    /// The host probe this sandbox launches against: the one
    /// [`Sandbox::reuse_probe`] kept, or a fresh one.
    fn host_probe(&self) -> ProbeReport {
        match &self.probed {
            Some(report) => ProbeReport::clone(report),
            None => probe(),
        }
    }

    /// The profile.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The commit filter for this sandbox's staged writes: the built-in
    /// list plus what [`Sandbox::apply_worker`] added from
    /// `[worker.commit]`.
    pub fn commit_filter(&self) -> &crate::stage::CommitFilter {
        &self.commit_filter
    }

    /// The commit filter, to add refusals to (a filter only grows: it has
    /// no way to remove one).
    pub fn commit_filter_mut(&mut self) -> &mut crate::stage::CommitFilter {
        &mut self.commit_filter
    }

    /// The layers switched off through [`Sandbox::dangerous`].
    #[cfg(test)]
    pub(crate) fn disabled_layers(&self) -> &BTreeSet<Layer> {
        &self.disabled
    }

    /// The working directory set with [`Sandbox::cwd`], if any.
    pub fn working_dir(&self) -> Option<&Path> {
        self.cwd.as_deref()
    }

    /// The variables set with [`Sandbox::env`], in order (later wins).
    pub fn env_vars(&self) -> &[(OsString, OsString)] {
        &self.env
    }

    /// Add a writable root.
    pub fn writable(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.profile.writable.push(path.into());
        self
    }

    /// Add a writable root that is a state directory, without the
    /// protected names ([`Profile::add_writable_state`]).
    pub fn writable_state(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.profile.add_writable_state(path);
        self
    }

    /// Add a read-only bind (a required runtime file or directory).
    pub fn read_only(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.profile.read_paths.push(path.into());
        self
    }

    /// Hide a host path behind an empty read-only tmpfs (a directory) or
    /// an empty read-only file, on top of the profile's host masks.
    pub fn mask(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.profile.host_masks.push(path.into());
        self
    }

    /// Lower one resource limit of the profile ([`Profile::limit`]).
    pub fn limit(
        &mut self,
        which: crate::profile::Limit,
        value: u64,
    ) -> Result<&mut Self, SandboxError> {
        self.profile.limit(which, value)?;
        Ok(self)
    }

    /// The cgroup limits of each launch: only lowered, never raised (an
    /// unset key takes the value given, a set one the smaller of the two).
    /// A launch with any of them set runs in a cgroup of its own, or is
    /// refused naming the controller that is missing.
    pub fn limit_cgroup(&mut self, limits: crate::cgroup::CgroupLimits) -> &mut Self {
        let lower = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        let l = &mut self.cgroup_limits;
        l.memory = lower(l.memory, limits.memory);
        l.swap = lower(l.swap, limits.swap);
        l.pids = lower(l.pids, limits.pids);
        l.cpus = lower(l.cpus, limits.cpus);
        self
    }

    /// The cgroup limits set with [`Sandbox::limit_cgroup`].
    pub fn cgroup_limits(&self) -> &crate::cgroup::CgroupLimits {
        &self.cgroup_limits
    }

    /// Test hook: make the sandbox's cgroup under `root` instead of
    /// `/sys/fs/cgroup` (a fake cgroupfs), taking the launcher's cgroup
    /// there to be `root` itself. Not part of the public API.
    #[cfg(any(fuzzing, feature = "testing"))]
    #[doc(hidden)]
    pub fn __cgroup_root(&mut self, root: impl Into<PathBuf>) -> &mut Self {
        self.cgroup_root = root.into();
        self
    }

    /// Lower the wall-clock limit of the profile ([`Profile::limit_wall`]).
    pub fn limit_wall(&mut self, limit: std::time::Duration) -> Result<&mut Self, SandboxError> {
        self.profile.limit_wall(limit)?;
        Ok(self)
    }

    /// Pass a launcher variable through by name ([`Profile::pass_env`]).
    pub fn pass_env(&mut self, name: &str) -> Result<&mut Self, SandboxError> {
        self.profile.pass_env(name)?;
        Ok(self)
    }

    /// Add an absolute path kept read-only (e.g. the policy file).
    pub fn protect(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.profile.protected_paths.push(path.into());
        self
    }

    /// Keep `name` read-only inside every writable root, created as a
    /// read-only placeholder when absent ([`Profile::protect_name`]).
    pub fn protect_name(&mut self, name: &str) -> &mut Self {
        self.profile.protect_name(name);
        self
    }

    /// The worker's working directory (default: the first writable root,
    /// else the scratch `HOME`).
    pub fn cwd(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.cwd = Some(path.into());
        self
    }

    /// Set an environment variable in the worker (on top of the allowlist).
    pub fn env(&mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> &mut Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Add a network bridge (requires a profile with [`NetworkMode::Proxy`]).
    pub fn bridge(&mut self, bridge: Bridge) -> &mut Self {
        self.bridges.push(bridge);
        self
    }

    /// Keep the socket walk's findings for unchanged directories of the
    /// read-only trees (explicit read paths, `strict`'s `/etc` entries) in
    /// `dir`, so that later launches `stat` such a directory instead of
    /// listing it again. `dir` is created with mode `0700` when absent; a
    /// directory not owned by the effective uid, open to group or others,
    /// or a symlink is not used (every launch then lists everything, as
    /// without a cache). See `docs/sandbox.md` for what an entry proves.
    pub fn walk_cache(&mut self, dir: impl Into<PathBuf>) -> &mut Self {
        self.walk_cache = Some(dir.into());
        self
    }

    /// Record the placeholders each launch creates in `dir` (created with
    /// mode `0700` when absent; one not owned by the effective uid, open to
    /// group or others, or a symlink is not used), and before each launch
    /// remove the placeholders that launchers which are gone (killed) left
    /// behind, when provably theirs: see
    /// [`crate::clean_stale_placeholders`] and `docs/sandbox.md`.
    pub fn placeholder_records(&mut self, dir: impl Into<PathBuf>) -> &mut Self {
        self.placeholder_records = Some(dir.into());
        self
    }

    /// Create the stage of each launch as `<base>/<session>` (see
    /// [`crate::stage::Stage::create`]): with [`Layer::StagedWrites`] on and
    /// writable roots, a launch without it is refused. `base` must lie
    /// outside every writable root; the worker cannot see it. A stage is
    /// never reused: a second launch with the same session is refused
    /// while the first one's stage exists, so give each launch its own
    /// session (call this again before each).
    pub fn stage_in(&mut self, base: impl Into<PathBuf>, session: impl Into<String>) -> &mut Self {
        self.stage_in = Some((base.into(), session.into()));
        self
    }

    /// Choose the worker's identity.
    pub fn identity(&mut self, identity: WorkerIdentity) -> &mut Self {
        self.identity = Some(identity);
        self
    }

    /// The only way to run weaker: name each layer to switch off.
    pub fn dangerous(&mut self) -> DangerousSandbox<'_> {
        DangerousSandbox { sandbox: self }
    }

    /// Test hook: pretend `layer` is unavailable on this host. It can only
    /// make a launch stricter (a refusal), never weaker. Not part of the
    /// public API (the `testing` feature; no semver guarantee).
    #[cfg(any(fuzzing, feature = "testing"))]
    #[doc(hidden)]
    pub fn __simulate_unavailable(&mut self, layer: Layer, detail: &str) -> &mut Self {
        self.simulated.push((layer, detail.to_owned()));
        self
    }

    /// Test hook: pretend the kernel's Landlock ABI is `abi` (if lower than
    /// the real one) for the requirement check. Enforcement always uses the
    /// real ABI, so this can only cause a refusal. Not part of the public
    /// API (the `testing` feature; no semver guarantee).
    #[cfg(any(fuzzing, feature = "testing"))]
    #[doc(hidden)]
    pub fn __simulate_landlock_abi(&mut self, abi: u32) -> &mut Self {
        self.simulated_abi = Some(abi);
        self
    }

    /// The worker's uid and gid as the launch will map them: the
    /// [`Sandbox::identity`] set, else the invoker's, or
    /// [`DEFAULT_WORKER_UID`] when palisade runs as root.
    pub fn worker_ids(&self) -> (u32, u32) {
        let uid = nix::unistd::getuid().as_raw();
        let gid = nix::unistd::getgid().as_raw();
        match self.identity {
            Some(WorkerIdentity::Dedicated { uid, gid }) => (uid, gid),
            Some(WorkerIdentity::Invoker) => (uid, gid),
            None if uid == 0 => (DEFAULT_WORKER_UID, DEFAULT_WORKER_UID),
            None => (uid, gid),
        }
    }

    /// Probe the host and check every required layer. Returns the layer
    /// table of the launch, or the first missing required layer.
    pub fn check(&self) -> Result<Vec<(Layer, LayerStatus)>, SandboxError> {
        self.check_with(self.host_probe()).map(|(layers, _)| layers)
    }

    fn check_with(
        &self,
        mut report: ProbeReport,
    ) -> Result<(Vec<(Layer, LayerStatus)>, u32), SandboxError> {
        let real_abi = report.landlock_abi.unwrap_or(0);
        if let Some(sim) = self.simulated_abi {
            report.landlock_abi = Some(sim.min(real_abi));
        }
        for (layer, detail) in &self.simulated {
            report.set(
                *layer,
                LayerStatus::Unavailable {
                    detail: detail.clone(),
                },
            );
        }
        let mut out = Vec::new();
        for (layer, status) in report.layers {
            let required = match layer {
                Layer::Cgroups => self.profile.require_cgroups,
                // Only a launch with writable roots stages anything.
                Layer::StagedWrites => !self.profile.writable.is_empty(),
                _ => true,
            };
            if layer == Layer::StagedWrites
                && self.profile.writable.is_empty()
                && !self.disabled.contains(&layer)
            {
                out.push((
                    layer,
                    match status {
                        LayerStatus::Active { detail } => LayerStatus::Active {
                            detail: format!("{detail}; no writable root, nothing staged"),
                        },
                        other => other,
                    },
                ));
                continue;
            }
            if self.disabled.contains(&layer) {
                out.push((
                    layer,
                    LayerStatus::Degraded {
                        detail: format!(
                            "disabled by dangerous() (host: {} {})",
                            status.word(),
                            status.detail()
                        ),
                    },
                ));
                continue;
            }
            let abi = report.landlock_abi.unwrap_or(0);
            if layer == Layer::Landlock
                && matches!(
                    status,
                    LayerStatus::Active { .. } | LayerStatus::Degraded { .. }
                )
                && abi < self.profile.min_landlock_abi
            {
                return Err(SandboxError::LayerUnavailable {
                    layer,
                    detail: format!("ABI {abi}, {} required", self.profile.min_landlock_abi),
                });
            }
            match status {
                LayerStatus::Active { .. } => out.push((layer, status)),
                // Landlock below ABI 6 but at or above the profile's minimum
                // runs, reported as degraded (the minimum was checked above).
                LayerStatus::Degraded { .. } if layer == Layer::Landlock => {
                    out.push((layer, status))
                }
                other if required => {
                    return Err(SandboxError::LayerUnavailable {
                        layer,
                        detail: other.detail().to_owned(),
                    });
                }
                other => out.push((layer, other)),
            }
        }
        if !self.bridges.is_empty() && self.profile.network != NetworkMode::Proxy {
            return Err(SandboxError::InvalidPath {
                path: self
                    .bridges
                    .first()
                    .map(|b| b.target.clone())
                    .unwrap_or_default(),
                reason: format!(
                    "profile `{}` has no network; bridges need network = proxy",
                    self.profile.name
                ),
            });
        }
        Ok((out, real_abi))
    }

    /// Probe, plan and launch `command`. Returns once the command has been
    /// executed inside the sandbox, or the typed reason it was not.
    pub fn spawn(&self, mut command: Command) -> Result<SandboxChild, SandboxError> {
        let (layers, landlock_abi) = self.check_with(self.host_probe())?;
        check_stdio([&command.stdin, &command.stdout, &command.stderr])?;
        if command.argv.is_empty() {
            return Err(SandboxError::InvalidCommand(String::from("empty command")));
        }
        // Piped streams: the worker's ends go in as descriptors, the
        // launcher's stay here (close-on-exec, and closed in every process
        // of the sandbox before the worker runs).
        let mut ours: [Option<std::fs::File>; 3] = [None, None, None];
        for (n, (stream, mine)) in [&mut command.stdin, &mut command.stdout, &mut command.stderr]
            .into_iter()
            .zip(ours.iter_mut())
            .enumerate()
        {
            if matches!(stream, Stdio::Piped) {
                let (r, w) = pipe()?;
                let (theirs, kept) = if n == 0 { (r, w) } else { (w, r) };
                *stream = Stdio::Fd(theirs);
                *mine = Some(std::fs::File::from(kept));
            }
        }
        let [stdin, stdout, stderr] = ours;
        // A terminal among fds 0-2 is replaced by the worker's own pty.
        let terminal =
            crate::pty::prepare([&mut command.stdin, &mut command.stdout, &mut command.stderr])?;
        let argv: Vec<CString> = command
            .argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| {
                SandboxError::InvalidCommand(String::from("argument contains a NUL byte"))
            })?;
        let (uid, gid) = self.worker_ids();
        // Root's ids for the worker only by the explicit door. (A launcher
        // that is not root cannot map uid 0, and a primary gid of 0 gives
        // its worker nothing it does not have itself.)
        if nix::unistd::getuid().is_root() && (uid == 0 || gid == 0) && !self.root_worker {
            return Err(SandboxError::RootWorker { uid, gid });
        }
        self.profile
            .check_identity(uid, nix::unistd::getuid().as_raw())?;
        self.check_state_dirs()?;
        // What killed launchers left goes first: a stale placeholder would
        // otherwise be taken for an existing protected file, and stay.
        if let Some(dir) = &self.placeholder_records {
            let _ = crate::placeholder_log::clean_stale(dir);
        }
        self.profile.check_masks()?;
        // The cgroup exists, its limits written, before the supervisor
        // is forked; it joins it before it creates anything.
        let cgroup = self.create_cgroup()?;
        let layers = self.cgroup_layer(layers, cgroup.as_ref());
        // Staged writes: the stage is created now, before anything of the
        // sandbox exists, and removed again if the launch fails.
        let stage = self.create_stage(uid, gid)?;
        let launched = self.spawn_with(
            command,
            &argv,
            stage.as_ref(),
            (uid, gid),
            layers,
            landlock_abi,
            [stdin, stdout, stderr],
            terminal,
            cgroup,
        );
        match launched {
            Ok(mut child) => {
                child.stage = stage;
                Ok(child)
            }
            Err(e) => {
                if let Some(st) = stage {
                    let _ = st.remove();
                }
                Err(e)
            }
        }
    }

    /// The sandbox's cgroup with its limits written, when limits are set;
    /// an error naming the missing controller otherwise (never a launch
    /// without them).
    fn create_cgroup(&self) -> Result<Option<crate::cgroup::Cgroup>, SandboxError> {
        let limits = &self.cgroup_limits;
        if limits.is_empty() {
            return Ok(None);
        }
        let unavailable = |detail: String| SandboxError::LayerUnavailable {
            layer: Layer::Cgroups,
            detail,
        };
        if self.disabled.contains(&Layer::Cgroups) {
            return Err(unavailable(String::from(
                "worker.limits sets memory, swap, pids or cpus, but the cgroups layer was disabled",
            )));
        }
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let backend =
            crate::cgroup::detect(&self.cgroup_root, &own, limits).map_err(unavailable)?;
        crate::cgroup::Cgroup::create(&backend, &crate::cgroup::session_name(), limits)
            .map(Some)
            .map_err(unavailable)
    }

    /// The cgroups layer as launched: enforced (backend, directories,
    /// values) or not configured (with the host's status).
    fn cgroup_layer(
        &self,
        mut layers: Vec<(Layer, LayerStatus)>,
        cgroup: Option<&crate::cgroup::Cgroup>,
    ) -> Vec<(Layer, LayerStatus)> {
        for (layer, status) in &mut layers {
            match (*layer, cgroup) {
                (Layer::Cgroups, Some(cg)) => {
                    *status = LayerStatus::Active {
                        detail: cg.describe(),
                    };
                }
                (Layer::Cgroups, None) if !self.disabled.contains(&Layer::Cgroups) => {
                    *status = LayerStatus::Degraded {
                        detail: format!(
                            "not configured: no worker.limits memory, swap, pids or cpus (host: {} {})",
                            status.word(),
                            status.detail()
                        ),
                    };
                }
                (Layer::Rlimits, _) => {
                    *status = LayerStatus::Active {
                        detail: self.profile.rlimits.describe().join(" "),
                    };
                }
                _ => {}
            }
        }
        layers
    }

    /// The stage of a staged launch: `None` under direct writes
    /// ([`Layer::StagedWrites`] disabled) or without writable roots; an
    /// error naming the layer when it cannot be created.
    fn create_stage(&self, uid: u32, gid: u32) -> Result<Option<Stage>, SandboxError> {
        if self.disabled.contains(&Layer::StagedWrites) {
            return Ok(None);
        }
        let roots = plan::writable_roots(&self.profile)?;
        if roots.is_empty() {
            return Ok(None);
        }
        let Some((base, session)) = &self.stage_in else {
            return Err(SandboxError::LayerUnavailable {
                layer: Layer::StagedWrites,
                detail: String::from(
                    "no stage directory: the sandbox has writable roots but Sandbox::stage_in was not called (palisade run: --stage-dir; or direct writes through dangerous().disable(staged_writes))",
                ),
            });
        };
        Stage::create(base, session, &roots, (uid, gid))
            .map(Some)
            .map_err(|e| SandboxError::LayerUnavailable {
                layer: Layer::StagedWrites,
                detail: e.to_string(),
            })
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "the second half of spawn, handed what the first half prepared"
    )]
    fn spawn_with(
        &self,
        command: Command,
        argv: &[CString],
        stage: Option<&Stage>,
        (uid, gid): (u32, u32),
        layers: Vec<(Layer, LayerStatus)>,
        landlock_abi: u32,
        [stdin, stdout, stderr]: [Option<std::fs::File>; 3],
        terminal: Option<crate::pty::Prepared>,
        cgroup: Option<crate::cgroup::Cgroup>,
    ) -> Result<SandboxChild, SandboxError> {
        let staged = stage.map(|st| plan::Staged {
            base: st.dir().parent().map(Path::to_path_buf).unwrap_or_default(),
            layers: st
                .roots()
                .iter()
                .map(|r| {
                    (
                        r.root().to_path_buf(),
                        r.upper().to_path_buf(),
                        r.work().to_path_buf(),
                    )
                })
                .collect(),
        });
        let input = PlanInput {
            allowed_sockets: self.bridges.iter().map(|b| b.target.clone()).collect(),
            walk_cache: self.walk_cache.clone(),
            placeholder_records: self.placeholder_records.clone(),
            staged,
        };
        let (plan, deferred) = plan::build(&self.profile, &input)?;
        let cwd = match &self.cwd {
            Some(c) => plan::canonical(c)?,
            None => plan
                .writable
                .first()
                .cloned()
                .unwrap_or_else(|| PathBuf::from("/tmp/home")),
        };
        let (envp, env_dropped) = self.environment(|n| std::env::var_os(n))?;
        let filters = if self.disabled.contains(&Layer::Seccomp) {
            None
        } else {
            Some(
                seccomp::build(self.profile.nested_sandbox).map_err(|detail| {
                    SandboxError::LayerUnavailable {
                        layer: Layer::Seccomp,
                        detail,
                    }
                })?,
            )
        };
        let landlock = if self.disabled.contains(&Layer::Landlock) {
            None
        } else {
            Some(landlock_rules::Rules::from_plan(
                &plan,
                &self.profile,
                &self.bridges,
                landlock_abi,
            ))
        };
        let cwd_c = CString::new(cwd.as_os_str().as_bytes())
            .map_err(|_| SandboxError::InvalidCommand(String::from("cwd contains a NUL byte")))?;
        let setup = ChildSetup {
            plan: &plan,
            uid,
            gid,
            launcher_uid: nix::unistd::getuid().as_raw(),
            net: !self.disabled.contains(&Layer::NetworkNamespace),
            ipc: !self.disabled.contains(&Layer::IpcNamespace),
            uts: !self.disabled.contains(&Layer::UtsNamespace),
            bridges: &self.bridges,
            argv,
            envp: &envp,
            cwd: &cwd_c,
            rlimits: self.profile.rlimits,
            wall_limit: self.profile.wall_limit,
            filters: filters.as_ref(),
            landlock: landlock.as_ref(),
            stdio: [&command.stdin, &command.stdout, &command.stderr],
            ctty: terminal.as_ref().map(crate::pty::Prepared::ctty),
            cgroup_procs: cgroup.as_ref().map_or(&[], |c| c.procs()),
        };
        let Launched {
            pid,
            pidfd,
            placeholders,
            ended,
            stop,
            pid_ns,
        } = launch(&setup, &deferred)?;
        let mut downgraded: Vec<Layer> = self.disabled.iter().copied().collect();
        downgraded.sort();
        let report = LaunchReport {
            profile: self.profile.name.clone(),
            mount_plan_digest: plan.digest(),
            mount_plan: plan,
            layers,
            downgraded,
            deviations: self.profile.deviations.clone(),
            worker_uid: uid,
            worker_gid: gid,
            bridges: self.bridges.clone(),
            env_dropped,
            limits: self
                .profile
                .rlimits
                .describe()
                .into_iter()
                .map(|kv| match kv.split_once('=') {
                    Some((k, v)) => (k.to_owned(), v.to_owned()),
                    None => (kv, String::new()),
                })
                .chain(cgroup.iter().flat_map(|c| c.values().iter().cloned()))
                .collect(),
        };
        let mut child = SandboxChild {
            pid,
            pidfd,
            report,
            placeholders,
            reaped: false,
            ended: Some(ended),
            stop: Some(stop),
            status: None,
            stdin,
            stdout,
            stderr,
            terminal: None,
            stage: None,
            pid_ns,
            cgroup,
            oom_kills: 0,
        };
        // The relay thread starts once the forks are done; should it fail,
        // the dropped child kills the sandbox.
        if let Some(t) = terminal {
            child.terminal = Some(t.start()?);
        }
        Ok(child)
    }

    /// Refuses a state directory (the socket-walk cache, the placeholder
    /// records) at or inside a writable root: the worker could write there
    /// and forge what later launches trust, a cache entry that skips a
    /// directory holding a socket, or a record that has a cleanup remove a
    /// file. A directory not made yet is judged by its nearest existing
    /// ancestor.
    fn check_state_dirs(&self) -> Result<(), SandboxError> {
        let roots: Vec<PathBuf> = self
            .profile
            .writable
            .iter()
            .filter_map(|w| std::fs::canonicalize(w).ok())
            .collect();
        for (what, dir) in [
            ("socket-walk cache", &self.walk_cache),
            ("placeholder records", &self.placeholder_records),
        ] {
            let Some(dir) = dir else { continue };
            let resolved = resolve_existing(dir);
            if let Some(root) = roots.iter().find(|r| resolved.starts_with(r)) {
                return Err(SandboxError::InvalidPath {
                    path: dir.clone(),
                    reason: format!(
                        "state_dir_writable: the {what} directory lies inside the writable root `{}`, where the worker could forge what later launches trust; keep the state directory outside every writable root (for `palisade run`: point XDG_RUNTIME_DIR elsewhere, or bind less)",
                        root.display()
                    ),
                });
            }
        }
        Ok(())
    }

    /// The worker's environment from the launcher's (`lookup`), and the
    /// allowlisted names refused as credential-like (for the report).
    fn environment(
        &self,
        lookup: impl Fn(&str) -> Option<OsString>,
    ) -> Result<(Vec<CString>, Vec<String>), SandboxError> {
        let mut vars: Vec<(OsString, OsString)> = vec![
            (OsString::from("PATH"), OsString::from(DEFAULT_PATH)),
            (OsString::from("HOME"), OsString::from("/tmp/home")),
        ];
        let mut dropped = Vec::new();
        for name in &self.profile.env_allow {
            if sensitive(OsStr::new(name)) {
                dropped.push(name.clone());
                continue;
            }
            if let Some(v) = lookup(name) {
                vars.push((OsString::from(name), v));
            }
        }
        for (k, v) in &self.env {
            vars.retain(|(n, _)| n != k);
            vars.push((k.clone(), v.clone()));
        }
        vars.iter()
            .map(|(k, v)| {
                let mut b = k.as_bytes().to_vec();
                b.push(b'=');
                b.extend_from_slice(v.as_bytes());
                CString::new(b)
            })
            .collect::<Result<_, _>>()
            .map(|env| (env, dropped))
            .map_err(|_| {
                SandboxError::InvalidCommand(String::from("environment contains a NUL byte"))
            })
    }
}

/// `path` with symlinks resolved as far as it exists: the canonical form of
/// its nearest existing ancestor, with the rest appended.
fn resolve_existing(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(c) = std::fs::canonicalize(at) {
            return rest.iter().rev().fold(c, |acc, n| acc.join(n));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                at = parent;
            }
            _ => return path.to_owned(),
        }
    }
}

/// Refuse a directory or an `O_PATH` descriptor as a standard stream, the
/// launcher's own (inherited) or one handed over: the worker could
/// `openat` host files relative to it, past every mask and bind (a
/// directory), or reopen it through `/proc/self/fd` (an `O_PATH`
/// descriptor). A closed descriptor is left closed.
fn check_stdio(streams: [&Stdio; 3]) -> Result<(), SandboxError> {
    use std::os::fd::{AsFd, BorrowedFd};
    fn kind(fd: BorrowedFd<'_>) -> Option<&'static str> {
        use nix::fcntl::{FcntlArg, OFlag, fcntl};
        use nix::sys::stat::{SFlag, fstat};
        let st = fstat(fd).ok()?;
        let dir = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR;
        let path = fcntl(fd, FcntlArg::F_GETFL)
            .is_ok_and(|fl| OFlag::from_bits_truncate(fl).contains(OFlag::O_PATH));
        match (dir, path) {
            (true, true) => Some("a directory (an O_PATH descriptor)"),
            (true, false) => Some("a directory"),
            (false, true) => Some("an O_PATH descriptor"),
            (false, false) => None,
        }
    }
    const NAMES: [&str; 3] = ["standard input", "standard output", "standard error"];
    for (n, (s, name)) in streams.iter().zip(NAMES).enumerate() {
        let found = match (s, n) {
            (Stdio::Null | Stdio::Piped, _) => None,
            (Stdio::Fd(fd), _) => kind(fd.as_fd()),
            (Stdio::Inherit, 0) => kind(std::io::stdin().as_fd()),
            (Stdio::Inherit, 1) => kind(std::io::stdout().as_fd()),
            (Stdio::Inherit, _) => kind(std::io::stderr().as_fd()),
        };
        if let Some(kind) = found {
            return Err(SandboxError::UnsafeStdio {
                fd: i32::try_from(n).unwrap_or(0),
                name,
                kind,
            });
        }
    }
    Ok(())
}

/// Everything the children need, computed before the first fork.
struct ChildSetup<'a> {
    plan: &'a MountPlan,
    uid: u32,
    gid: u32,
    launcher_uid: u32,
    net: bool,
    ipc: bool,
    uts: bool,
    bridges: &'a [Bridge],
    argv: &'a [CString],
    envp: &'a [CString],
    cwd: &'a CString,
    rlimits: crate::profile::Rlimits,
    wall_limit: Option<std::time::Duration>,
    filters: Option<&'a seccomp::Filters>,
    landlock: Option<&'a landlock_rules::Rules>,
    stdio: [&'a Stdio; 3],
    /// The one of fds 0-2 that is the worker's pty slave, made its
    /// controlling terminal.
    ctty: Option<RawFd>,
    /// `cgroup.procs` of the sandbox's cgroup (one per hierarchy): the
    /// supervisor writes itself there first.
    cgroup_procs: &'a [OwnedFd],
}

/// A setup failure in a child: written to the error pipe, then `_exit(125)`.
pub(crate) struct Fail {
    pub(crate) step: Step,
    pub(crate) errno: i32,
    pub(crate) detail: String,
}

impl Fail {
    pub(crate) fn new(step: Step, errno: i32, detail: impl Into<String>) -> Fail {
        Fail {
            step,
            errno,
            detail: detail.into(),
        }
    }
}

fn report_and_exit(fd: RawFd, fail: &Fail) -> ! {
    let detail = fail.detail.as_bytes();
    let len = u16::try_from(detail.len().min(1024)).unwrap_or(0);
    let mut buf = Vec::with_capacity(8 + usize::from(len));
    buf.extend_from_slice(&(fail.step as u16).to_le_bytes());
    buf.extend_from_slice(&fail.errno.to_le_bytes());
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(detail.get(..usize::from(len)).unwrap_or(&[]));
    sys::write_all(fd, &buf);
    sys::exit_now(125)
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| SandboxError::Io(e.into()))
}

/// Signals the supervisor and init forward to the worker.
pub(crate) const FORWARDED: [NixSignal; 7] = [
    NixSignal::SIGTERM,
    NixSignal::SIGINT,
    NixSignal::SIGHUP,
    NixSignal::SIGQUIT,
    NixSignal::SIGUSR1,
    NixSignal::SIGUSR2,
    NixSignal::SIGWINCH,
];

pub(crate) fn forwarded_mask() -> SigSet {
    let mut set = SigSet::empty();
    for s in FORWARDED {
        set.add(s);
    }
    set.add(NixSignal::SIGCHLD);
    set
}

/// The sandbox's PID namespace and the open namespace file that keeps it
/// (and its inode number) alive, or why it could not be read.
type PidNs = Result<(crate::observe::PidNamespace, std::fs::File), String>;

/// A launched supervisor, as [`launch`] returns it.
struct Launched {
    pid: nix::unistd::Pid,
    pidfd: OwnedFd,
    placeholders: Vec<plan::Placeholder>,
    /// The read end of the status pipe.
    ended: OwnedFd,
    /// The write end of the stop pipe.
    stop: OwnedFd,
    /// The sandbox's PID namespace, read while the supervisor waited.
    pid_ns: PidNs,
}

/// The namespace the supervisor `pid` unshared for its children: its
/// `/proc/<pid>/ns/pid_for_children`. Read by [`launch`] while the
/// supervisor is our unreaped child waiting for its go, so the pid names it
/// and it has not ended. The descriptor is kept open with the child, so that the namespace (and
/// its inode number) outlives the sandbox and is never reused meanwhile.
///
/// The kernel shows `pid_for_children` only once the namespace has its
/// first process (init, which the supervisor forks right after "ready"):
/// until then the open is `ENOENT`, and is tried again, for at most ten
/// seconds and only while the supervisor runs.
fn supervisor_pid_ns(pid: nix::unistd::Pid, pidfd: &OwnedFd) -> PidNs {
    use std::os::unix::fs::MetadataExt;
    let path = format!("/proc/{}/ns/pid_for_children", pid.as_raw());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let file = loop {
        match std::fs::File::open(&path) {
            Ok(f) => break f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                use nix::poll::{PollFd, PollFlags};
                let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
                let ended =
                    nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).is_ok_and(|n| n > 0);
                if ended || std::time::Instant::now() > deadline {
                    return Err(format!("{e} (no init in the namespace)"));
                }
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    let md = file.metadata().map_err(|e| e.to_string())?;
    Ok((
        crate::observe::PidNamespace {
            dev: md.dev(),
            ino: md.ino(),
        },
        file,
    ))
}

/// Fork the supervisor, run the deferred host-side work (placeholders,
/// socket walk) while it creates the namespaces, then write its id maps and
/// let it go on: nothing of the sandbox's root is built before the
/// host-side work has passed. Returns the supervisor's pid, the
/// placeholders created and the read end of the supervisor's status pipe,
/// once the command has been executed.
fn launch(setup: &ChildSetup<'_>, deferred: &plan::Deferred) -> Result<Launched, SandboxError> {
    let (err_r, err_w) = pipe()?;
    let (ready_r, ready_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    let (end_r, end_w) = pipe()?;
    let (stop_r, stop_w) = pipe()?;
    let launcher = nix::unistd::getpid();
    let child = match sys::fork() {
        Err(errno) => {
            return Err(SandboxError::Setup {
                step: Step::Fork,
                errno,
                detail: String::from("supervisor"),
            });
        }
        Ok(sys::Forked::Child) => {
            drop(err_r);
            drop(ready_r);
            drop(go_w);
            drop(end_r);
            drop(stop_w);
            let fd = err_w.as_raw_fd();
            match supervisor(setup, launcher, ready_w, go_r, end_w, stop_r, &err_w) {
                Ok(never) => match never {},
                Err(fail) => report_and_exit(fd, &fail),
            }
        }
        Ok(sys::Forked::Parent(pid)) => nix::unistd::Pid::from_raw(pid),
    };
    drop(err_w);
    drop(ready_w);
    drop(go_r);
    drop(end_w);
    drop(stop_r);
    let abort = |e: SandboxError| {
        let _ = nix::sys::signal::kill(child, NixSignal::SIGKILL);
        let _ = wait_code(child);
        Err(e)
    };
    // The supervisor is our unreaped child: its pid names no other process.
    let pidfd = match sys::pidfd_open(child.as_raw()) {
        Ok(fd) => fd,
        Err(errno) => {
            return abort(SandboxError::Setup {
                step: Step::Fork,
                errno,
                detail: String::from("pidfd_open of the supervisor"),
            });
        }
    };
    // Let the supervisor run first if it was queued on this CPU, so that it
    // can step aside to another one (see `step_aside`).
    let _ = nix::sched::sched_yield();
    // The host-side work runs while the supervisor creates the namespaces
    // (the network namespace alone takes about half a millisecond), so the
    // two proceed at once on two CPUs. Waiting for `ready` first serialised
    // them: the launcher's wake-up preempted the supervisor on its CPU, and
    // the supervisor resumed only when the host-side work was done. Init
    // builds nothing before the go below, sent once this work has passed.
    let created = match deferred.run() {
        Ok(c) => c,
        Err(e) => return abort(e),
    };
    let mut ready = [0u8; 1];
    let got = nix::unistd::read(&ready_r, &mut ready).unwrap_or(0);
    let mut pid_ns = Err(String::from("the supervisor was not ready"));
    if got == 1 {
        if let Err(e) = write_id_maps(child, setup) {
            plan::remove_placeholders(&created);
            return abort(e);
        }
        // The namespaces exist ("ready" follows the unshare); init, forked
        // right after it, waits for the go below, so the sandbox cannot
        // have ended and the supervisor is alive and ours.
        pid_ns = supervisor_pid_ns(child, &pidfd);
        let _ = nix::unistd::write(&go_w, b"g");
    }
    drop(go_w);
    let mut buf = Vec::new();
    let mut file = std::fs::File::from(err_r);
    let _ = file.read_to_end(&mut buf);
    if buf.is_empty() && got == 1 {
        return Ok(Launched {
            pid: child,
            pidfd,
            placeholders: created,
            ended: end_r,
            stop: stop_w,
            pid_ns,
        });
    }
    let _ = nix::sys::signal::kill(child, NixSignal::SIGKILL);
    let _ = wait_code(child);
    plan::remove_placeholders(&created);
    Err(decode_failure(&buf, setup))
}

/// Decode one `(step, errno, detail)` record of the error pipe.
pub(crate) fn decode_record(buf: &[u8]) -> (Option<u16>, Option<i32>, String) {
    let step = buf
        .get(0..2)
        .and_then(|b| <[u8; 2]>::try_from(b).ok())
        .map(u16::from_le_bytes);
    let errno = buf
        .get(2..6)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(i32::from_le_bytes);
    let len = buf
        .get(6..8)
        .and_then(|b| <[u8; 2]>::try_from(b).ok())
        .map(u16::from_le_bytes);
    let detail = len
        .and_then(|l| buf.get(8..8 + usize::from(l)))
        .map(|d| String::from_utf8_lossy(d).into_owned())
        .unwrap_or_default();
    (step, errno, detail)
}

fn decode_failure(buf: &[u8], setup: &ChildSetup<'_>) -> SandboxError {
    let (step, errno, detail) = decode_record(buf);
    match (step.and_then(Step::from_u16), errno) {
        (Some(Step::Exec), Some(errno)) => SandboxError::Exec {
            command: setup
                .argv
                .first()
                .map(|a| a.to_string_lossy().into_owned())
                .unwrap_or_default(),
            errno,
        },
        // A staged root that could not be mounted: the layer is named,
        // whatever the errno (there is no fallback to a bind).
        (Some(Step::MountPlan), Some(errno))
            if let Some(e) = staged_mount_failure(errno, &detail) =>
        {
            e
        }
        (Some(step), Some(errno)) => {
            if let (Some(layer), true) = (step.layer(), is_unavailable(step, errno)) {
                SandboxError::LayerUnavailable {
                    layer,
                    detail: format!("{}: {}", detail, nix::errno::Errno::from_raw(errno).desc()),
                }
            } else {
                SandboxError::Setup {
                    step,
                    errno,
                    detail,
                }
            }
        }
        _ => SandboxError::Setup {
            step: Step::Fork,
            errno: libc::EIO,
            detail: String::from("sandbox supervisor exited before reporting"),
        },
    }
}

/// A mount-plan failure of a staged root (its detail carries
/// [`crate::mounts::STAGED_PREFIX`]) as the [`Layer::StagedWrites`] layer
/// unavailable, whatever the errno; `None` for any other mount failure.
fn staged_mount_failure(errno: i32, detail: &str) -> Option<SandboxError> {
    let rest = detail.strip_prefix(crate::mounts::STAGED_PREFIX)?;
    Some(SandboxError::LayerUnavailable {
        layer: Layer::StagedWrites,
        detail: format!("{rest}: {}", nix::errno::Errno::from_raw(errno).desc()),
    })
}

/// Whether a failing step means the layer is missing on this host (rather
/// than a bad path or a bug): namespace creation refused, Landlock or
/// seccomp not supported.
fn is_unavailable(step: Step, errno: i32) -> bool {
    match step {
        Step::UnshareUser
        | Step::UnshareMount
        | Step::UnsharePid
        | Step::UnshareNet
        | Step::UnshareIpc
        | Step::UnshareUts => {
            matches!(
                errno,
                libc::EPERM
                    | libc::EINVAL
                    | libc::ENOSYS
                    | libc::ENOSPC
                    | libc::EACCES
                    | libc::EUSERS
            )
        }
        Step::Landlock | Step::Seccomp => matches!(errno, libc::ENOSYS | libc::EOPNOTSUPP),
        // mount_setattr (Linux 5.12) missing.
        Step::MountPlan => errno == libc::ENOSYS,
        _ => false,
    }
}

fn write_id_maps(child: nix::unistd::Pid, setup: &ChildSetup<'_>) -> Result<(), SandboxError> {
    let base = PathBuf::from(format!("/proc/{}", child.as_raw()));
    let fail = |what: &str, e: std::io::Error| SandboxError::Setup {
        step: Step::IdMap,
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        detail: what.to_owned(),
    };
    let launcher_gid = nix::unistd::getgid().as_raw();
    let (uid_map, gid_map) = if setup.launcher_uid == 0 {
        let mut u = String::from("0 0 1\n");
        let mut g = String::from("0 0 1\n");
        if setup.uid != 0 {
            u.push_str(&format!("{0} {0} 1\n", setup.uid));
        }
        if setup.gid != 0 {
            g.push_str(&format!("{0} {0} 1\n", setup.gid));
        }
        (u, g)
    } else {
        std::fs::write(base.join("setgroups"), "deny").map_err(|e| fail("setgroups", e))?;
        (
            format!("{0} {0} 1\n", setup.uid),
            format!("{0} {0} 1\n", launcher_gid),
        )
    };
    std::fs::write(base.join("uid_map"), uid_map).map_err(|e| fail("uid_map", e))?;
    std::fs::write(base.join("gid_map"), gid_map).map_err(|e| fail("gid_map", e))?;
    Ok(())
}

fn nx(s: Step, detail: &str) -> impl FnOnce(nix::errno::Errno) -> Fail + '_ {
    move |e| Fail::new(s, e as i32, detail)
}

/// The supervisor: user namespace, then the other namespaces, then init.
fn supervisor(
    setup: &ChildSetup<'_>,
    launcher: nix::unistd::Pid,
    ready_w: OwnedFd,
    go_r: OwnedFd,
    end_w: OwnedFd,
    stop_r: OwnedFd,
    err_w: &OwnedFd,
) -> Result<std::convert::Infallible, Fail> {
    nix::sys::prctl::set_pdeathsig(NixSignal::SIGKILL)
        .map_err(nx(Step::DieWithParent, "PR_SET_PDEATHSIG"))?;
    if nix::unistd::getppid() != launcher {
        sys::exit_now(125);
    }
    // Into the sandbox's cgroup before anything else: init and the worker
    // are forked from here, so every process of the sandbox is born inside.
    for fd in setup.cgroup_procs {
        nix::unistd::write(fd, b"0").map_err(nx(Step::Cgroup, "join the sandbox's cgroup"))?;
    }
    // Own process group: a terminal's Ctrl-C reaches the launcher only,
    // which forwards it once (the worker is in its own session anyway).
    let _ = nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0));
    // Every namespace in one unshare, the user namespace first (the kernel
    // creates it first and makes it the owner of the others), before the
    // id-map handshake: the costly part (the network namespace) runs while
    // the launcher only waits. If the kernel refuses, retry one namespace at
    // a time so the error names the layer that is missing.
    let steps = [
        (
            true,
            CloneFlags::CLONE_NEWUSER,
            Step::UnshareUser,
            "unshare(CLONE_NEWUSER)",
        ),
        (
            true,
            CloneFlags::CLONE_NEWNS,
            Step::UnshareMount,
            "unshare(CLONE_NEWNS)",
        ),
        (
            true,
            CloneFlags::CLONE_NEWPID,
            Step::UnsharePid,
            "unshare(CLONE_NEWPID)",
        ),
        (
            setup.net,
            CloneFlags::CLONE_NEWNET,
            Step::UnshareNet,
            "unshare(CLONE_NEWNET)",
        ),
        (
            setup.ipc,
            CloneFlags::CLONE_NEWIPC,
            Step::UnshareIpc,
            "unshare(CLONE_NEWIPC)",
        ),
        (
            setup.uts,
            CloneFlags::CLONE_NEWUTS,
            Step::UnshareUts,
            "unshare(CLONE_NEWUTS)",
        ),
    ];
    let all = steps
        .iter()
        .filter(|(on, ..)| *on)
        .fold(CloneFlags::empty(), |acc, (_, f, ..)| acc | *f);
    let home = step_aside();
    if nix::sched::unshare(all).is_err() {
        for (on, flag, step, what) in steps {
            if on {
                nix::sched::unshare(flag).map_err(nx(step, what))?;
            }
        }
    }
    // Back to the launcher's affinity before anything is forked from here
    // (a test checks that the worker has it). Should the CPU set have
    // shrunk meanwhile and the restore be refused, the sandbox keeps the
    // narrower set: a matter of speed, not of containment.
    if let Some(cpus) = home {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &cpus);
    }
    // The launcher writes the id maps and finishes its host-side work
    // meanwhile; init, forked right away, waits for its go before it
    // builds anything.
    let _ = nix::unistd::write(&ready_w, b"r");
    drop(ready_w);
    let mask = forwarded_mask();
    mask.thread_block()
        .map_err(nx(Step::Fork, "block signals"))?;
    // Loopback is brought up here, while init builds the root; init waits
    // for it on this pipe before it binds the bridges and starts the worker.
    let lo = if setup.net {
        Some(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(nx(Step::Network, "pipe"))?)
    } else {
        None
    };
    // Init tells how the worker ended on this pipe (an `Exit` record): its
    // exit status alone cannot tell a wall-limit kill from any SIGKILL.
    let (why_r, why_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(nx(Step::Fork, "pipe"))?;
    let init_pid = match sys::fork() {
        Err(errno) => return Err(Fail::new(Step::Fork, errno, "init")),
        Ok(sys::Forked::Child) => {
            drop(why_r);
            drop(stop_r);
            let lo_r = lo.map(|(r, w)| {
                drop(w);
                r
            });
            let fd = err_w.as_raw_fd();
            match init_stage(setup, fd, go_r, lo_r, why_w) {
                Ok(never) => match never {},
                Err(fail) => report_and_exit(fd, &fail),
            }
        }
        Ok(sys::Forked::Parent(pid)) => nix::unistd::Pid::from_raw(pid),
    };
    drop(why_w);
    drop(go_r);
    if let Some((lo_r, lo_w)) = lo {
        drop(lo_r);
        if let Err(e) = sys::loopback_up() {
            // Init, waiting on the pipe, dies with us (PR_SET_PDEATHSIG).
            report_and_exit(
                err_w.as_raw_fd(),
                &Fail::new(Step::Network, e, "bring up lo"),
            );
        }
        let _ = nix::unistd::write(&lo_w, b"l");
    }
    // Nothing of the launcher's is needed any more (pipes, stdio) but the
    // status pipe, and init's record pipe.
    let _ = sys::close_all_except(&[end_w.as_raw_fd(), why_r.as_raw_fd(), stop_r.as_raw_fd()]);
    // Forward signals to init; once it has ended (and with it every process
    // of its PID namespace), tell the launcher how the worker ended before
    // the namespaces are torn down on our exit, then leave with its status.
    // Every writer of init's record pipe is gone by now: its read does not
    // block. No record (init was killed) leaves init's own ending.
    let init_ended = init::supervise(init_pid, &mask, &stop_r);
    let mut rec = [0u8; crate::exit::RECORD];
    let exit = read_full(&why_r, &mut rec)
        .and_then(|()| Exit::decode(&rec))
        .unwrap_or(init_ended);
    sys::write_all(end_w.as_raw_fd(), &exit.encode());
    sys::exit_now(exit.code())
}

/// Move the calling process off the CPU it shares with the launcher, when
/// another CPU is allowed; returns the affinity to restore afterwards.
///
/// A forked child starts on its parent's CPU, and with a 250 Hz tick the
/// idle CPU may not pull it over before the launch is over: the
/// supervisor's namespace creation and the launcher's host-side work would
/// then take turns on one CPU while another idles.
fn step_aside() -> Option<nix::sched::CpuSet> {
    use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
    let me = nix::unistd::Pid::from_raw(0);
    let allowed = sched_getaffinity(me).ok()?;
    let here = sys::current_cpu()?;
    let mut other = CpuSet::new();
    let mut any = false;
    for cpu in 0..CpuSet::count() {
        if cpu != here && allowed.is_set(cpu).unwrap_or(false) {
            other.set(cpu).ok()?;
            any = true;
        }
    }
    if !any {
        return None;
    }
    sched_setaffinity(me, &other).ok()?;
    Some(allowed)
}

/// Init: PID 1 of the new PID namespace. Builds the root, the network,
/// forks the worker, then reaps, forwards signals and runs the bridges.
fn init_stage(
    setup: &ChildSetup<'_>,
    err_fd: RawFd,
    go_r: OwnedFd,
    lo_r: Option<OwnedFd>,
    why_w: OwnedFd,
) -> Result<std::convert::Infallible, Fail> {
    nix::sys::prctl::set_pdeathsig(NixSignal::SIGKILL)
        .map_err(nx(Step::DieWithParent, "PR_SET_PDEATHSIG"))?;
    // The launcher's go: its id maps are written and its host-side work
    // (socket walk, placeholders) has passed. End-of-file is a refusal or
    // a failure the launcher reports itself: leave without building
    // anything.
    let mut go = [0u8; 1];
    if nix::unistd::read(&go_r, &mut go).unwrap_or(0) != 1 {
        sys::exit_now(125);
    }
    drop(go_r);
    // The launcher's command line and environment, shared by the fork, must
    // not be readable in /proc/1/cmdline inside.
    init::scrub_launcher_args()
        .map_err(|(errno, detail)| Fail::new(Step::Session, errno, detail))?;
    // Bridge targets must be reachable after pivot_root: keep a path
    // descriptor on each target's directory.
    let mut targets = Vec::new();
    for b in setup.bridges {
        let dir = b.target.parent().unwrap_or(Path::new("/"));
        let name = b
            .target
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        let fd = nix::fcntl::open(
            dir,
            nix::fcntl::OFlag::O_PATH
                | nix::fcntl::OFlag::O_DIRECTORY
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(nx(Step::Network, "open bridge target directory"))?;
        targets.push((b.port, fd, name));
    }
    crate::mounts::apply(setup.plan, setup.uid, setup.gid)
        .map_err(|(errno, detail)| Fail::new(Step::MountPlan, errno, detail))?;
    let mut listeners = Vec::new();
    if setup.net {
        // The supervisor brings loopback up meanwhile; one byte when done,
        // end-of-file if it failed (its error is on the error pipe).
        let mut b = [0u8; 1];
        let up = lo_r.map(|r| nix::unistd::read(&r, &mut b));
        if !matches!(up, Some(Ok(1))) {
            return Err(Fail::new(Step::Network, libc::ECANCELED, "loopback not up"));
        }
        for (port, dirfd, name) in targets {
            let l = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port)).map_err(
                |e| {
                    Fail::new(
                        Step::Network,
                        e.raw_os_error().unwrap_or(libc::EIO),
                        format!("bridge listen 127.0.0.1:{port}"),
                    )
                },
            )?;
            l.set_nonblocking(true).map_err(|e| {
                Fail::new(
                    Step::Network,
                    e.raw_os_error().unwrap_or(libc::EIO),
                    "bridge nonblocking",
                )
            })?;
            listeners.push(init::BridgeListener {
                listener: l,
                dir: dirfd,
                name,
            });
        }
    }
    if setup.uts {
        nix::unistd::sethostname("palisade").map_err(nx(Step::UnshareUts, "sethostname"))?;
    }
    nix::sys::prctl::set_dumpable(false).map_err(nx(Step::Session, "PR_SET_DUMPABLE"))?;
    let worker = match sys::fork() {
        Err(errno) => return Err(Fail::new(Step::Fork, errno, "worker")),
        Ok(sys::Forked::Child) => {
            drop(listeners);
            match worker_stage(setup, err_fd) {
                Ok(never) => match never {},
                Err(fail) => report_and_exit(err_fd, &fail),
            }
        }
        Ok(sys::Forked::Parent(pid)) => nix::unistd::Pid::from_raw(pid),
    };
    let mut keep = vec![why_w.as_raw_fd()];
    for l in &listeners {
        keep.push(l.listener.as_raw_fd());
        keep.push(l.dir.as_raw_fd());
    }
    let _ = sys::close_all_except(&keep);
    let mask = forwarded_mask();
    let exit = init::run(worker, &mask, listeners, setup.wall_limit);
    sys::write_all(why_w.as_raw_fd(), &exit.encode());
    sys::exit_now(exit.code())
}

/// The worker: session, descriptors, limits, identity, capabilities, a new
/// session keyring, no_new_privs, Landlock, seccomp, exec.
fn worker_stage(setup: &ChildSetup<'_>, err_fd: RawFd) -> Result<std::convert::Infallible, Fail> {
    nix::sys::prctl::set_pdeathsig(NixSignal::SIGKILL)
        .map_err(nx(Step::DieWithParent, "PR_SET_PDEATHSIG"))?;
    if nix::unistd::getppid().as_raw() != 1 {
        sys::exit_now(125);
    }
    nix::unistd::setsid().map_err(nx(Step::Session, "setsid"))?;
    // Standard streams.
    for (target, s) in setup.stdio.iter().enumerate() {
        let target = i32::try_from(target).unwrap_or(0);
        match s {
            Stdio::Inherit => {}
            // Resolved into `Stdio::Fd` before the fork.
            Stdio::Piped => {
                return Err(Fail::new(
                    Step::Session,
                    libc::EBADF,
                    "a piped stream without its pipe",
                ));
            }
            Stdio::Null => {
                let fd = nix::fcntl::open(
                    "/dev/null",
                    nix::fcntl::OFlag::O_RDWR,
                    nix::sys::stat::Mode::empty(),
                )
                .map_err(nx(Step::Session, "open /dev/null"))?;
                sys::dup2(fd.as_raw_fd(), target)
                    .map_err(|e| Fail::new(Step::Session, e, "dup2 stdio"))?;
            }
            Stdio::Fd(fd) => {
                if fd.as_raw_fd() == target {
                    sys::clear_cloexec(target)
                        .map_err(|e| Fail::new(Step::Session, e, "stdio cloexec"))?;
                } else {
                    sys::dup2(fd.as_raw_fd(), target)
                        .map_err(|e| Fail::new(Step::Session, e, "dup2 stdio"))?;
                }
            }
        }
    }
    if let Some(tty) = setup.ctty {
        sys::set_controlling_tty(tty).map_err(|e| Fail::new(Step::Session, e, "TIOCSCTTY"))?;
    }
    // Every descriptor but 0-2 and the error pipe (close-on-exec).
    let err_u = u32::try_from(err_fd).unwrap_or(3);
    sys::close_range(3, err_u.saturating_sub(1))
        .map_err(|e| Fail::new(Step::Session, e, "close_range"))?;
    sys::close_range(err_u.saturating_add(1), u32::MAX)
        .map_err(|e| Fail::new(Step::Session, e, "close_range"))?;
    sys::reset_signals();
    SigSet::empty()
        .thread_set_mask()
        .map_err(nx(Step::Session, "unblock signals"))?;
    nix::unistd::chdir(setup.cwd.as_c_str())
        .map_err(nx(Step::Session, "chdir to the working directory"))?;
    apply_rlimits(&setup.rlimits)?;
    crate::caps_drop::drop_all(setup.uid, setup.gid, setup.launcher_uid == 0)?;
    // A session keyring of the worker's own: the launcher's, and the keys it
    // holds, are not inherited (seccomp, which denies keyctl, may be off).
    // A kernel without keyrings (ENOSYS) has nothing to inherit.
    match sys::join_new_session_keyring() {
        Ok(_) | Err(libc::ENOSYS) => {}
        Err(e) => return Err(Fail::new(Step::Session, e, "join a new session keyring")),
    }
    nix::sys::prctl::set_no_new_privs().map_err(nx(Step::NoNewPrivs, "PR_SET_NO_NEW_PRIVS"))?;
    if !nix::sys::prctl::get_no_new_privs().unwrap_or(false) {
        return Err(Fail::new(
            Step::NoNewPrivs,
            libc::EPERM,
            "no_new_privs not set",
        ));
    }
    if let Some(rules) = setup.landlock {
        rules.enforce()?;
    }
    if let Some(filters) = setup.filters {
        seccomp::install(filters).map_err(|e| Fail::new(Step::Seccomp, e, "install filter"))?;
    }
    exec(setup)
}

fn apply_rlimits(r: &crate::profile::Rlimits) -> Result<(), Fail> {
    use nix::sys::resource::{Resource, setrlimit};
    let pairs = [
        (Resource::RLIMIT_AS, r.address_space, "RLIMIT_AS"),
        (Resource::RLIMIT_NPROC, r.processes, "RLIMIT_NPROC"),
        (Resource::RLIMIT_FSIZE, r.file_size, "RLIMIT_FSIZE"),
        (Resource::RLIMIT_NOFILE, r.open_files, "RLIMIT_NOFILE"),
        (Resource::RLIMIT_CPU, r.cpu_seconds, "RLIMIT_CPU"),
        (Resource::RLIMIT_CORE, r.core, "RLIMIT_CORE"),
    ];
    for (res, value, name) in pairs {
        if let Some(v) = value {
            let (_, hard) = nix::sys::resource::getrlimit(res).map_err(nx(Step::Rlimits, name))?;
            // Never raise above the launcher's hard limit.
            let v = v.min(hard);
            setrlimit(res, v, v).map_err(nx(Step::Rlimits, name))?;
        }
    }
    Ok(())
}

fn exec(setup: &ChildSetup<'_>) -> Result<std::convert::Infallible, Fail> {
    let Some(prog) = setup.argv.first() else {
        return Err(Fail::new(Step::Exec, libc::ENOENT, "empty command"));
    };
    let bytes = prog.as_bytes();
    if bytes.contains(&b'/') {
        let e = nix::unistd::execve(prog, setup.argv, setup.envp)
            .err()
            .map_or(libc::ENOEXEC, |e| e as i32);
        return Err(Fail::new(Step::Exec, e, "execve"));
    }
    let mut last = libc::ENOENT;
    for dir in DEFAULT_PATH.split(':') {
        let mut full = dir.as_bytes().to_vec();
        full.push(b'/');
        full.extend_from_slice(bytes);
        let Ok(c) = CString::new(full) else { continue };
        let e = nix::unistd::execve(&c, setup.argv, setup.envp)
            .err()
            .map_or(libc::ENOEXEC, |e| e as i32);
        if e != libc::ENOENT && e != libc::ENOTDIR {
            last = e;
        }
    }
    Err(Fail::new(Step::Exec, last, "execve"))
}

/// Run `f` in a forked child and return its exit code (for probes).
pub(crate) fn run_in_child(f: impl FnOnce() -> i32) -> std::io::Result<i32> {
    match sys::fork() {
        Err(e) => Err(std::io::Error::from_raw_os_error(e)),
        Ok(sys::Forked::Child) => {
            let code = f();
            sys::exit_now(code)
        }
        Ok(sys::Forked::Parent(pid)) => wait_code(nix::unistd::Pid::from_raw(pid)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_dir_inside_a_writable_root_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        let beside = t.path().join("beside");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&beside).unwrap();
        std::os::unix::fs::symlink(root.join("sub"), t.path().join("link")).unwrap();
        let sandbox = |dir: &Path, records: bool| {
            let mut sb = Sandbox::new(crate::Profile::governed());
            sb.writable(&root);
            if records {
                sb.placeholder_records(dir);
            } else {
                sb.walk_cache(dir);
            }
            sb
        };
        for records in [false, true] {
            // Positive controls: beside the root, made yet or not.
            for dir in [beside.clone(), beside.join("palisade")] {
                sandbox(&dir, records).check_state_dirs().unwrap();
            }
            // Inside the root: at it, below it (not made yet), through a symlink.
            for dir in [
                root.clone(),
                root.join("sub/palisade"),
                t.path().join("link/palisade"),
            ] {
                let e = sandbox(&dir, records)
                    .check_state_dirs()
                    .unwrap_err()
                    .to_string();
                assert!(e.contains("state_dir_writable"), "{}: {e}", dir.display());
            }
        }
    }

    #[test]
    fn a_failed_overlay_mount_names_the_staged_writes_layer() {
        let e = staged_mount_failure(
            libc::EINVAL,
            "staged_writes: create the overlay of /oldroot/w [e overlay: bad]",
        )
        .unwrap();
        assert_eq!(e.layer(), Some(Layer::StagedWrites));
        assert_eq!(
            e.to_string(),
            "isolation_layer_unavailable: staged_writes (create the overlay of /oldroot/w [e overlay: bad]: Invalid argument)"
        );
        // Control: any other mount failure stays a mount-plan error.
        assert!(staged_mount_failure(libc::EINVAL, "bind /a -> /b").is_none());
    }

    #[test]
    fn sensitive_names_are_stripped() {
        for name in [
            "GITHUB_TOKEN",
            "aws_secret_access_key",
            "AUTH",
            "GH_AUTH",
            "OAUTH_CLIENT",
            "HTTP_AUTHORIZATION",
            "PROXY_AUTHORISATION",
            "AUTHOR_AUTH",
            "NPM_AUTHTOKEN",
        ] {
            assert!(sensitive(OsStr::new(name)), "{name} passed");
        }
        // `AUTHOR` is not `AUTH`: a name, not a credential.
        for name in ["LANG", "AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "AUTHORS"] {
            assert!(!sensitive(OsStr::new(name)), "{name} refused");
        }
    }

    #[test]
    fn dropped_names_are_reported_and_never_their_values() {
        let value = "terces-ym".chars().rev().collect::<String>();
        let mut sb = Sandbox::new(crate::Profile::strict());
        // Only `pass_env` adds names, and it refuses credential-like ones:
        // the launch-time filter is the second line, reported when it acts.
        sb.pass_env("AUTHOR_NAME").unwrap();
        assert!(sb.pass_env("GITHUB_TOKEN").is_err());
        sb.profile.env_allow.push(String::from("GITHUB_TOKEN"));
        sb.profile.env_allow.push(String::from("NPM_AUTH"));
        let lookup = |n: &str| Some(OsString::from(format!("{n}-{value}")));
        let (env, dropped) = sb.environment(lookup).unwrap();
        assert_eq!(dropped, ["GITHUB_TOKEN", "NPM_AUTH"]);
        let env: Vec<String> = env
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        // The positive control: the allowlisted plain names pass.
        assert!(
            env.contains(&format!("AUTHOR_NAME=AUTHOR_NAME-{value}")),
            "{env:?}"
        );
        assert!(env.contains(&format!("LANG=LANG-{value}")), "{env:?}");
        assert!(
            !env.iter()
                .any(|e| e.starts_with("GITHUB_TOKEN") || e.starts_with("NPM_AUTH"))
        );
        assert!(!dropped.iter().any(|d| d.contains(&value)));
    }

    #[test]
    fn root_views_differ() {
        use crate::profile::RootView;
        assert_eq!(Profile::strict().root, RootView::Empty);
        assert_eq!(Profile::governed().root, RootView::HostReadOnly);
    }
}
