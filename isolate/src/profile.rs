//! Sandbox profiles: `strict`, `governed`, `maintenance` and custom
//! profiles refined from them with tightening-only methods (the weakening
//! ones are on [`crate::DangerousSandbox`], recorded as deviations).
//!
//! A [`Profile`] says what the worker sees (root view, read-only binds,
//! host masks), what it may write, which paths stay read-only inside the
//! writable roots, how it reaches the network, which environment variables
//! pass and which resource limits apply. `docs/sandbox.md` documents the
//! three built-in profiles as tables; [`Profile::by_name`] returns them.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::SandboxError;

/// Whether a variable name looks like it holds a credential: such launcher
/// variables are never passed to the worker, even when allowlisted.
///
/// A name is credential-like when it contains `KEY`, `SECRET`, `TOKEN`,
/// `PASSWORD`, `PASSWD`, `CREDENTIAL` or `AUTH`, except that `AUTHOR` (as
/// in `GIT_AUTHOR_NAME`) is not taken for `AUTH`; `AUTHORIZATION` and
/// `AUTHORISATION` still are.
pub(crate) fn sensitive_env(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if ["KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL"]
        .iter()
        .any(|w| upper.contains(w))
    {
        return true;
    }
    // `AUTH` anywhere but as the start of `AUTHOR`, unless that is the
    // start of `AUTHORIZ…`/`AUTHORIS…`.
    upper.match_indices("AUTH").any(|(at, _)| {
        let rest = upper.get(at..).unwrap_or_default();
        !rest.starts_with("AUTHOR") || rest.starts_with("AUTHORIZ") || rest.starts_with("AUTHORIS")
    })
}

/// What the sandbox's `/` starts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RootView {
    /// An empty tmpfs with only the system directories, the selected
    /// `/etc` files and explicit read paths bound in (strict).
    Empty,
    /// The host's `/` bound read-only, with the host masks on top
    /// (governed, maintenance).
    HostReadOnly,
}

/// How the worker reaches the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NetworkMode {
    /// A network namespace with loopback only; no bridge.
    None,
    /// A network namespace with loopback plus the bridges given to the
    /// sandbox (the egress proxy, relays): nothing else leaves.
    Proxy,
}

/// What to do with a Unix socket found by the socket walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SocketPolicy {
    /// Refuse to launch, naming the socket.
    Refuse,
    /// Hide the socket behind an empty read-only file and go on.
    Mask,
}

/// Resource limits applied with `setrlimit` (soft = hard). `None` keeps the
/// launcher's limit. Read through [`Profile::rlimits`]; set through
/// [`Profile::limit`] (and [`crate::DangerousSandbox::set_limit`]). More
/// limits may be added, so it cannot be built by a struct literal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rlimits {
    /// `RLIMIT_AS` in bytes.
    pub address_space: Option<u64>,
    /// `RLIMIT_NPROC` (counted per real uid).
    pub processes: Option<u64>,
    /// `RLIMIT_FSIZE` in bytes.
    pub file_size: Option<u64>,
    /// `RLIMIT_NOFILE`.
    pub open_files: Option<u64>,
    /// `RLIMIT_CPU` in seconds.
    pub cpu_seconds: Option<u64>,
    /// `RLIMIT_CORE` in bytes (0: no core dumps).
    pub core: Option<u64>,
}

impl Default for Rlimits {
    fn default() -> Self {
        Rlimits {
            address_space: None,
            processes: Some(4096),
            file_size: Some(4 << 30),
            open_files: Some(4096),
            cpu_seconds: Some(3600),
            core: Some(0),
        }
    }
}

/// One of the [`Rlimits`], for [`Profile::limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// `RLIMIT_AS` in bytes.
    AddressSpace,
    /// `RLIMIT_NPROC`: processes and threads of the worker's uid, which the
    /// kernel counts per uid per user namespace (so: in this sandbox).
    Processes,
    /// `RLIMIT_FSIZE` in bytes.
    FileSize,
    /// `RLIMIT_NOFILE`.
    OpenFiles,
    /// `RLIMIT_CPU` in seconds.
    CpuSeconds,
    /// `RLIMIT_CORE` in bytes.
    Core,
}

impl Limit {
    /// The `setrlimit` resource name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Limit::AddressSpace => "RLIMIT_AS",
            Limit::Processes => "RLIMIT_NPROC",
            Limit::FileSize => "RLIMIT_FSIZE",
            Limit::OpenFiles => "RLIMIT_NOFILE",
            Limit::CpuSeconds => "RLIMIT_CPU",
            Limit::Core => "RLIMIT_CORE",
        }
    }
}

impl Rlimits {
    /// Each limit as `NAME=value` (`inherited` when unset: the
    /// launcher's own limit stays, `RLIMIT_AS` by default), in `setrlimit`
    /// order.
    pub fn describe(&self) -> Vec<String> {
        [
            (Limit::AddressSpace, self.address_space),
            (Limit::Processes, self.processes),
            (Limit::FileSize, self.file_size),
            (Limit::OpenFiles, self.open_files),
            (Limit::CpuSeconds, self.cpu_seconds),
            (Limit::Core, self.core),
        ]
        .into_iter()
        .map(|(l, v)| match v {
            Some(v) => format!("{}={v}", l.name()),
            None => format!("{}=inherited", l.name()),
        })
        .collect()
    }

    fn slot(&mut self, which: Limit) -> &mut Option<u64> {
        match which {
            Limit::AddressSpace => &mut self.address_space,
            Limit::Processes => &mut self.processes,
            Limit::FileSize => &mut self.file_size,
            Limit::OpenFiles => &mut self.open_files,
            Limit::CpuSeconds => &mut self.cpu_seconds,
            Limit::Core => &mut self.core,
        }
    }
}

/// The system directories bound read-only into an empty root.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// The `/etc` entries bound read-only into an empty root.
pub const SYSTEM_ETC: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "localtime",
    "os-release",
    "ssl",
    "ca-certificates",
];

/// The host masks of the host-view profiles: each becomes an empty
/// read-only tmpfs.
pub const HOST_MASKS: &[&str] = &[
    "/var", "/run", "/home", "/root", "/mnt", "/media", "/srv", "/boot",
];

/// Paths, relative to each writable root, kept read-only inside it
/// (and created as read-only placeholders when absent).
pub const PROTECTED_NAMES: &[&str] = &[
    ".git/hooks",
    ".git/config",
    ".palisade",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".gitconfig",
];

/// Paths kept read-only when they exist, but never created.
pub const PROTECTED_IF_PRESENT: &[&str] =
    &[".vscode", ".idea", ".mcp.json", ".claude", ".gitmodules"];

/// The deviation [`Profile::allow_nested_sandbox`] records in the launch
/// report.
pub const NESTED_SANDBOX_DEVIATION: &str = "nested sandbox: user namespaces (CLONE_NEWUSER and the namespaces it owns), AF_UNIX stream/seqpacket sockets bound in /tmp only, socketpair(AF_UNIX, SOCK_SEQPACKET), /proc writable as far as the kernel's checks allow";

/// The default environment allowlist (names passed from the launcher).
pub const ENV_ALLOW: &[&str] = &["LANG", "LC_ALL", "TERM"];

/// The sandbox's `PATH`.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// A sandbox profile. Start from [`Profile::strict`], [`Profile::governed`]
/// or [`Profile::maintenance`] and refine it with the methods below, which
/// can only add restrictions or name the paths to bind: lower a limit, add a
/// mask, a read-only bind, a writable root, a protected path, cut the
/// network. The fields are private, so a profile cannot be weakened behind
/// the launch report's back; what weakens (another root view, a removed
/// mask, a lower Landlock minimum, a raised limit, an allowed socket) is only
/// possible through [`crate::Sandbox::dangerous`], and every such change is
/// listed in [`crate::LaunchReport::deviations`].
///
/// ```compile_fail
/// let mut p = palisade_isolate::Profile::strict();
/// p.host_masks.clear(); // private: does not compile
/// ```
///
/// ```
/// let mut p = palisade_isolate::Profile::strict();
/// assert!(!p.host_masks().is_empty()); // read through the accessor
/// p.add_mask("/opt/secrets").network_none();
/// assert!(p.limit(palisade_isolate::Limit::Processes, 1 << 20).is_err()); // raising is refused
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The profile's name, recorded in the launch report.
    pub(crate) name: String,
    /// What `/` starts as.
    pub(crate) root: RootView,
    /// System directories bound read-only ([`RootView::Empty`] only).
    pub(crate) system_dirs: Vec<PathBuf>,
    /// `/etc` entries bound read-only ([`RootView::Empty`] only).
    pub(crate) etc_entries: Vec<String>,
    /// Extra read-only binds (required runtime files).
    pub(crate) read_paths: Vec<PathBuf>,
    /// Writable roots (bound read-write).
    pub(crate) writable: Vec<PathBuf>,
    /// Host masks: each directory becomes an empty read-only tmpfs, each
    /// file an empty read-only file ([`RootView::HostReadOnly`]).
    pub(crate) host_masks: Vec<PathBuf>,
    /// Names kept read-only inside each writable root and inside each
    /// nested repository (for `.git/...` names).
    pub(crate) protected_names: Vec<String>,
    /// Names kept read-only when present, never created.
    pub(crate) protected_if_present: Vec<String>,
    /// Absolute paths kept read-only (e.g. the policy file).
    pub(crate) protected_paths: Vec<PathBuf>,
    /// Writable roots that are a state directory, not a project: the
    /// protected names are not applied in them, only `protected_paths`.
    pub(crate) state_roots: Vec<PathBuf>,
    /// Network access.
    pub(crate) network: NetworkMode,
    /// Launcher environment variables passed through by name.
    pub(crate) env_allow: Vec<String>,
    /// Resource limits.
    pub(crate) rlimits: Rlimits,
    /// Size of the private `/tmp` in bytes.
    pub(crate) tmp_size: u64,
    /// Minimum Landlock ABI; below it the launch is refused.
    pub(crate) min_landlock_abi: u32,
    /// What to do with Unix sockets found by the walk.
    pub(crate) socket_policy: SocketPolicy,
    /// Unix sockets the walk allows (relay and control sockets).
    pub(crate) allowed_sockets: Vec<PathBuf>,
    /// Whether a delegated cgroup is required (otherwise reported only).
    pub(crate) require_cgroups: bool,
    /// Wall-clock limit: init kills the worker (`SIGKILL`, status 137)
    /// when it runs longer. `None`: no limit.
    pub(crate) wall_limit: Option<std::time::Duration>,
    /// Whether the worker may receive provider credentials through relays
    /// (`false` for maintenance). Informational for the caller wiring relays.
    pub(crate) provider_credentials: bool,
    /// Whether a provider's own sandbox may run inside (user namespaces,
    /// `AF_UNIX` sockets bound in `/tmp`, `SOCK_SEQPACKET` pairs); see
    /// [`Profile::allow_nested_sandbox`].
    pub(crate) nested_sandbox: bool,
    /// Weakenings made through [`crate::Sandbox::dangerous`], for the report.
    pub(crate) deviations: Vec<String>,
}

impl Profile {
    fn base(name: &str, root: RootView, network: NetworkMode) -> Profile {
        Profile {
            name: name.to_owned(),
            root,
            system_dirs: SYSTEM_DIRS.iter().map(PathBuf::from).collect(),
            etc_entries: SYSTEM_ETC.iter().map(|s| (*s).to_owned()).collect(),
            read_paths: Vec::new(),
            writable: Vec::new(),
            host_masks: HOST_MASKS.iter().map(PathBuf::from).collect(),
            protected_names: PROTECTED_NAMES.iter().map(|s| (*s).to_owned()).collect(),
            protected_if_present: PROTECTED_IF_PRESENT
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            protected_paths: Vec::new(),
            state_roots: Vec::new(),
            network,
            env_allow: ENV_ALLOW.iter().map(|s| (*s).to_owned()).collect(),
            rlimits: Rlimits::default(),
            tmp_size: 512 << 20,
            min_landlock_abi: 4,
            socket_policy: SocketPolicy::Refuse,
            allowed_sockets: Vec::new(),
            require_cgroups: false,
            wall_limit: None,
            provider_credentials: true,
            nested_sandbox: false,
            deviations: Vec::new(),
        }
    }

    /// `strict`: an empty root with the system directories, selected `/etc`
    /// files and explicit reads; no writable host path unless added; no
    /// network at all (loopback only, no bridge).
    pub fn strict() -> Profile {
        Profile::base("strict", RootView::Empty, NetworkMode::None)
    }

    /// `governed`: the host's root read-only with the host masks; the
    /// caller adds the working directory as writable; network only through
    /// the bridges (the recorded proxy).
    pub fn governed() -> Profile {
        Profile::base("governed", RootView::HostReadOnly, NetworkMode::Proxy)
    }

    /// `maintenance`: governed without provider credentials, for dependency
    /// installs; the egress policy limits it to the registries it names.
    pub fn maintenance() -> Profile {
        let mut p = Profile::base("maintenance", RootView::HostReadOnly, NetworkMode::Proxy);
        p.provider_credentials = false;
        p
    }

    /// A built-in profile by name.
    pub fn by_name(name: &str) -> Option<Profile> {
        match name {
            "strict" => Some(Profile::strict()),
            "governed" => Some(Profile::governed()),
            "maintenance" => Some(Profile::maintenance()),
            _ => None,
        }
    }

    /// The profile's name, recorded in the launch report.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What `/` starts as.
    pub fn root(&self) -> RootView {
        self.root
    }

    /// System directories bound read-only ([`RootView::Empty`] only).
    pub fn system_dirs(&self) -> &[PathBuf] {
        &self.system_dirs
    }

    /// `/etc` entries bound read-only ([`RootView::Empty`] only).
    pub fn etc_entries(&self) -> &[String] {
        &self.etc_entries
    }

    /// Extra read-only binds.
    pub fn read_paths(&self) -> &[PathBuf] {
        &self.read_paths
    }

    /// Writable roots.
    pub fn writable(&self) -> &[PathBuf] {
        &self.writable
    }

    /// Host masks.
    pub fn host_masks(&self) -> &[PathBuf] {
        &self.host_masks
    }

    /// Names kept read-only inside each writable root.
    pub fn protected_names(&self) -> &[String] {
        &self.protected_names
    }

    /// Names kept read-only when present, never created.
    pub fn protected_if_present(&self) -> &[String] {
        &self.protected_if_present
    }

    /// Absolute paths kept read-only.
    pub fn protected_paths(&self) -> &[PathBuf] {
        &self.protected_paths
    }

    /// The writable roots added with [`Profile::add_writable_state`]: no
    /// protected name is applied in them.
    pub fn state_roots(&self) -> &[PathBuf] {
        &self.state_roots
    }

    /// Network access.
    pub fn network(&self) -> NetworkMode {
        self.network
    }

    /// Launcher environment variables passed through by name.
    pub fn env_allow(&self) -> &[String] {
        &self.env_allow
    }

    /// Resource limits.
    pub fn rlimits(&self) -> Rlimits {
        self.rlimits
    }

    /// Size of the private `/tmp` in bytes.
    pub fn tmp_size(&self) -> u64 {
        self.tmp_size
    }

    /// Minimum Landlock ABI; below it the launch is refused.
    pub fn min_landlock_abi(&self) -> u32 {
        self.min_landlock_abi
    }

    /// What to do with Unix sockets found by the walk.
    pub fn socket_policy(&self) -> SocketPolicy {
        self.socket_policy
    }

    /// Unix sockets the walk allows.
    pub fn allowed_sockets(&self) -> &[PathBuf] {
        &self.allowed_sockets
    }

    /// Whether a delegated cgroup is required.
    pub fn requires_cgroups(&self) -> bool {
        self.require_cgroups
    }

    /// Wall-clock limit, if any.
    pub fn wall_limit(&self) -> Option<Duration> {
        self.wall_limit
    }

    /// Whether the worker may receive provider credentials through relays.
    pub fn provider_credentials(&self) -> bool {
        self.provider_credentials
    }

    /// Whether a provider's own sandbox may run inside
    /// ([`Profile::allow_nested_sandbox`]).
    pub fn nested_sandbox(&self) -> bool {
        self.nested_sandbox
    }

    /// Let a provider's own sandbox (bubblewrap, Claude Code's
    /// sandbox-runtime, Codex's Linux sandbox) start inside this one: the
    /// seccomp filter then allows `unshare`/`clone` with `CLONE_NEWUSER` and
    /// the namespaces a user namespace's owner may create (mount, PID,
    /// network, IPC, UTS, cgroup; never `CLONE_NEWTIME`), `socket(AF_UNIX)`
    /// of the stream and seqpacket types and `socketpair(AF_UNIX,
    /// SOCK_SEQPACKET)`; Landlock lets the worker create socket files only
    /// under its private `/tmp`, and write the files of `/proc` that the
    /// kernel's own checks let it write (the uid and gid maps of the
    /// namespaces it makes are there). Every other rule stays: the mount syscalls,
    /// `setns`, `ptrace`, `keyctl`, `bpf`, `perf_event_open` stay refused,
    /// and Landlock, the masks and the dropped capabilities are inherited by
    /// every namespace the worker makes. It is wider kernel attack surface
    /// (user namespaces), so it is off by default and recorded as a
    /// deviation in the launch report. bubblewrap still cannot start: its
    /// first `mount` is refused by seccomp and by Landlock (a domain that
    /// restricts the filesystem may not change the mount topology).
    pub fn allow_nested_sandbox(&mut self) -> &mut Self {
        if !self.nested_sandbox {
            self.nested_sandbox = true;
            self.deviations.push(String::from(NESTED_SANDBOX_DEVIATION));
        }
        self
    }

    /// The weakenings made through [`crate::Sandbox::dangerous`] (they
    /// travel with the profile and are listed in the launch report).
    pub fn deviations(&self) -> &[String] {
        &self.deviations
    }

    /// Name a refined profile (recorded in the launch report). A built-in
    /// name is refused: the report must not say `strict` of a profile that
    /// is not [`Profile::strict`].
    pub fn rename(&mut self, name: &str) -> Result<&mut Self, SandboxError> {
        if Profile::BUILT_IN.contains(&name) {
            return Err(SandboxError::Weakens(format!(
                "a refined profile cannot take the built-in name `{name}`"
            )));
        }
        name.clone_into(&mut self.name);
        Ok(self)
    }

    /// Add a read-only bind (a required runtime file or directory).
    pub fn add_read_only(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.read_paths.push(path.into());
        self
    }

    /// Add a writable root.
    pub fn add_writable(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.writable.push(path.into());
        self
    }

    /// Add a writable root that is a program's state directory (an agent's
    /// HOME), not a project: the protected names ([`PROTECTED_NAMES`],
    /// [`PROTECTED_IF_PRESENT`], [`Profile::protect_name`]) are project
    /// config and are not applied in it, so the program can write its own
    /// `.claude/` or `.pi/`. Only the paths given to [`Profile::protect`]
    /// stay read-only there: the caller must protect every file in it that
    /// a shell, a tool or the program itself runs or obeys. Repositories
    /// found in it keep their `.git/` names. If the same path is also added
    /// with [`Profile::add_writable`], it is a project root: the names apply.
    pub fn add_writable_state(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        let path = path.into();
        self.writable.push(path.clone());
        self.state_roots.push(path);
        self
    }

    /// Add a host mask (an empty read-only tmpfs or file).
    pub fn add_mask(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.host_masks.push(path.into());
        self
    }

    /// Keep an absolute path read-only.
    pub fn protect(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.protected_paths.push(path.into());
        self
    }

    /// Keep `name` read-only inside every writable root (created as a
    /// placeholder when absent), like the built-in protected names. A name
    /// that is empty, absolute or has `.` or `..` components is refused at
    /// launch ([`SandboxError::InvalidPath`]): its placeholder would be made
    /// outside the roots.
    pub fn protect_name(&mut self, name: &str) -> &mut Self {
        if !self.protected_names.iter().any(|n| n == name) {
            self.protected_names.push(name.to_owned());
        }
        self
    }

    /// No network at all: loopback only, no bridge.
    pub fn network_none(&mut self) -> &mut Self {
        self.network = NetworkMode::None;
        self
    }

    /// Hide the Unix sockets the walk finds behind empty read-only files
    /// instead of refusing the launch (either way the worker cannot reach them).
    pub fn mask_sockets(&mut self) -> &mut Self {
        self.socket_policy = SocketPolicy::Mask;
        self
    }

    /// Lower the size of the private `/tmp`; a larger size is refused.
    pub fn limit_tmp_size(&mut self, bytes: u64) -> Result<&mut Self, SandboxError> {
        if bytes > self.tmp_size {
            return Err(SandboxError::Weakens(format!(
                "a /tmp of {bytes} bytes is above the profile's {}; a limit can only be lowered",
                self.tmp_size
            )));
        }
        self.tmp_size = bytes;
        Ok(self)
    }

    /// Require at least Landlock ABI `abi` (a lower value keeps the profile's).
    pub fn require_landlock_abi(&mut self, abi: u32) -> &mut Self {
        self.min_landlock_abi = self.min_landlock_abi.max(abi);
        self
    }

    /// Require a delegated cgroup: without one the launch is refused.
    pub fn require_cgroups(&mut self) -> &mut Self {
        self.require_cgroups = true;
        self
    }

    /// Give the worker no provider credentials (as `maintenance`).
    pub fn without_provider_credentials(&mut self) -> &mut Self {
        self.provider_credentials = false;
        self
    }

    /// Lower one resource limit to `value`. Raising it (a value above the
    /// profile's) is refused, never clamped: only [`crate::Sandbox::dangerous`]
    /// can raise a limit.
    pub fn limit(&mut self, which: Limit, value: u64) -> Result<&mut Self, SandboxError> {
        let slot = self.rlimits.slot(which);
        if let Some(current) = *slot
            && value > current
        {
            return Err(SandboxError::Weakens(format!(
                "{} = {value} is above the profile's {current}; a limit can only be lowered",
                which.name()
            )));
        }
        *slot = Some(value);
        Ok(self)
    }

    /// Lower the wall-clock limit to `limit` (init kills the worker when it
    /// runs longer). A limit above the profile's is refused.
    pub fn limit_wall(&mut self, limit: Duration) -> Result<&mut Self, SandboxError> {
        if let Some(current) = self.wall_limit
            && limit > current
        {
            return Err(SandboxError::Weakens(format!(
                "wall limit {} s is above the profile's {} s; a limit can only be lowered",
                limit.as_secs(),
                current.as_secs()
            )));
        }
        self.wall_limit = Some(limit);
        Ok(self)
    }

    /// Pass the launcher's variable `name` through to the worker (when it is
    /// set). A credential-like name (`KEY`, `SECRET`, `TOKEN`, `PASSWORD`,
    /// `PASSWD`, `CREDENTIAL`, `AUTH` but not `AUTHOR`) is refused: the sandbox never passes
    /// those, so accepting it would be a setting that is silently not applied.
    pub fn pass_env(&mut self, name: &str) -> Result<&mut Self, SandboxError> {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(SandboxError::Weakens(format!(
                "`{name}` is not an environment variable name"
            )));
        }
        if name == "PATH" || name == "HOME" {
            return Err(SandboxError::Weakens(format!(
                "the sandbox sets `{name}` itself and would not pass the launcher's; set a value explicitly instead"
            )));
        }
        if sensitive_env(name) {
            return Err(SandboxError::Weakens(format!(
                "the sandbox never passes the credential-like variable `{name}`; hand credentials over through a relay"
            )));
        }
        if !self.env_allow.iter().any(|n| n == name) {
            self.env_allow.push(name.to_owned());
        }
        Ok(self)
    }

    /// Refuses a host mask the mount plan would not apply: one at or under
    /// a mount made after the masks (a read path, a writable root, the
    /// private `/tmp`, `/dev`, `/proc`, and on
    /// an empty root also the system directories and `/etc` entries, since
    /// masks there are not mounted at all). Such a mask would hide nothing
    /// while the launch looked configured. Missing masks and binds are left
    /// to the plan (a missing mask hides nothing there is; a missing bind is
    /// an error of its own). A mask that is relative or has `..` components
    /// is refused too: the plan would look it up from the launcher's working
    /// directory, or skip it as missing, and hide nothing it was meant to.
    pub(crate) fn check_masks(&self) -> Result<(), SandboxError> {
        for m in &self.host_masks {
            if let Some(reason) = crate::plan::not_plain(m) {
                return Err(SandboxError::InvalidPath {
                    path: m.clone(),
                    reason: format!("a mask {reason}"),
                });
            }
        }
        let resolve = |p: &PathBuf| std::fs::canonicalize(p).ok();
        let mut binds: Vec<PathBuf> = self
            .read_paths
            .iter()
            .chain(&self.writable)
            .filter_map(resolve)
            .collect();
        // The sandbox's own /tmp, /dev and /proc are mounted after the masks too.
        binds.extend(["/tmp", "/dev", "/proc"].map(PathBuf::from));
        if self.root == RootView::Empty {
            binds.extend(self.system_dirs.iter().filter_map(resolve));
            binds.extend(
                self.etc_entries
                    .iter()
                    .filter_map(|e| resolve(&PathBuf::from("/etc").join(e))),
            );
        }
        for m in &self.host_masks {
            let Some(mask) = resolve(m) else { continue };
            if let Some(bind) = binds.iter().find(|b| mask.starts_with(b)) {
                return Err(SandboxError::InvalidPath {
                    path: m.clone(),
                    reason: format!(
                        "mask_uncovered: the mask lies inside the bind `{}`, which is mounted over the masks, so it would hide nothing; bind less, or mask outside the binds",
                        bind.display()
                    ),
                });
            }
        }
        Ok(())
    }

    /// Refuses a process limit the kernel would not apply: `RLIMIT_NPROC`
    /// does not bind host root, and a worker uid 0 launched by root is host
    /// root (uids are mapped 1:1).
    pub(crate) fn check_identity(
        &self,
        worker_uid: u32,
        launcher_uid: u32,
    ) -> Result<(), SandboxError> {
        if worker_uid == 0
            && launcher_uid == 0
            && let Some(n) = self.rlimits.processes
        {
            return Err(SandboxError::LayerUnavailable {
                layer: crate::Layer::Rlimits,
                detail: format!(
                    "RLIMIT_NPROC {n} is not enforced for a worker that is host root (uid 0); use a dedicated worker uid, or remove the limit with Sandbox::dangerous().set_limit(Limit::Processes, None)"
                ),
            });
        }
        Ok(())
    }

    /// The names of the built-in profiles.
    pub const BUILT_IN: [&'static str; 3] = ["strict", "governed", "maintenance"];
}

/// The weakenings, behind [`crate::Sandbox::dangerous`]. Each one that
/// changes the profile is recorded and reported in
/// [`crate::LaunchReport::deviations`].
impl crate::DangerousSandbox<'_> {
    fn deviate(&mut self, what: String) {
        self.sandbox.profile.deviations.push(what);
    }

    /// Use another root view: [`RootView::HostReadOnly`] on `strict` shows
    /// the host's `/` (through the masks).
    pub fn root_view(&mut self, root: RootView) -> &mut Self {
        let was = self.sandbox.profile.root;
        if was != root {
            self.sandbox.profile.root = root;
            self.deviate(format!("root view {was:?} -> {root:?}"));
        }
        self
    }

    /// Remove a host mask (built-in or added).
    pub fn remove_mask(&mut self, path: impl AsRef<std::path::Path>) -> &mut Self {
        let path = path.as_ref();
        let masks = &mut self.sandbox.profile.host_masks;
        let before = masks.len();
        masks.retain(|m| m != path);
        if masks.len() != before {
            self.deviate(format!("host mask {} removed", path.display()));
        }
        self
    }

    /// Lower the minimum Landlock ABI.
    pub fn min_landlock_abi(&mut self, abi: u32) -> &mut Self {
        let was = self.sandbox.profile.min_landlock_abi;
        if abi < was {
            self.sandbox.profile.min_landlock_abi = abi;
            self.deviate(format!("minimum Landlock ABI {was} -> {abi}"));
        }
        self
    }

    /// Set a resource limit to any value, raised or removed (`None`: the
    /// launcher's).
    pub fn set_limit(&mut self, which: Limit, value: Option<u64>) -> &mut Self {
        let slot = self.sandbox.profile.rlimits.slot(which);
        let was = *slot;
        let raised = match (was, value) {
            (Some(w), Some(v)) => v > w,
            (Some(_), None) => true,
            (None, _) => false,
        };
        *slot = value;
        if raised {
            self.deviate(format!("{} {was:?} -> {value:?}", which.name()));
        }
        self
    }

    /// Set or remove the wall-clock limit.
    pub fn set_wall_limit(&mut self, limit: Option<Duration>) -> &mut Self {
        let was = self.sandbox.profile.wall_limit;
        let raised = match (was, limit) {
            (Some(w), Some(l)) => l > w,
            (Some(_), None) => true,
            (None, _) => false,
        };
        self.sandbox.profile.wall_limit = limit;
        if raised {
            self.deviate(format!("wall limit {was:?} -> {limit:?}"));
        }
        self
    }

    /// Let the socket walk allow this Unix socket (the worker sees it).
    pub fn allow_socket(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        let path = path.into();
        self.deviate(format!("unix socket {} allowed", path.display()));
        self.sandbox.profile.allowed_sockets.push(path);
        self
    }

    /// Stop keeping `name` read-only inside the writable roots.
    pub fn unprotect_name(&mut self, name: &str) -> &mut Self {
        let p = &mut self.sandbox.profile;
        let before = p.protected_names.len() + p.protected_if_present.len();
        p.protected_names.retain(|n| n != name);
        p.protected_if_present.retain(|n| n != name);
        if p.protected_names.len() + p.protected_if_present.len() != before {
            self.deviate(format!("protected name {name} removed"));
        }
        self
    }

    /// Set the network mode: [`NetworkMode::Proxy`] on `strict` allows bridges.
    pub fn network(&mut self, mode: NetworkMode) -> &mut Self {
        let was = self.sandbox.profile.network;
        if was == NetworkMode::None && mode == NetworkMode::Proxy {
            self.deviate(format!("network {was:?} -> {mode:?}"));
        }
        self.sandbox.profile.network = mode;
        self
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::path::Path;

    use super::*;

    #[test]
    fn limits_only_go_down() {
        let mut p = Profile::governed();
        p.limit(Limit::Processes, 16).unwrap();
        assert_eq!(p.rlimits.processes, Some(16));
        let e = p.limit(Limit::Processes, 17).unwrap_err().to_string();
        assert!(
            e.contains("RLIMIT_NPROC = 17 is above the profile's 16"),
            "{e}"
        );
        assert_eq!(
            p.rlimits.processes,
            Some(16),
            "a refused raise changes nothing"
        );
        p.limit_wall(Duration::from_secs(10)).unwrap();
        assert!(p.limit_wall(Duration::from_secs(11)).is_err());
        p.limit_wall(Duration::from_secs(5)).unwrap();
        assert_eq!(p.wall_limit, Some(Duration::from_secs(5)));
    }

    #[test]
    fn a_process_limit_on_host_root_is_refused() {
        let mut p = Profile::governed();
        assert!(p.check_identity(0, 0).is_err(), "root launches root");
        // Positive controls: a dedicated uid, or a non-root launcher's uid 0
        // (an unprivileged uid on the host), are limited by the kernel.
        p.check_identity(64000, 0).unwrap();
        p.check_identity(0, 1000).unwrap();
        p.rlimits.processes = None;
        p.check_identity(0, 0).unwrap();
    }

    #[test]
    fn credential_like_variables_are_refused_not_dropped() {
        let mut p = Profile::governed();
        p.pass_env("E2E_PLAIN").unwrap();
        assert!(p.env_allow.iter().any(|n| n == "E2E_PLAIN"));
        for bad in [
            "GITHUB_TOKEN",
            "aws_secret_access_key",
            "X=Y",
            "",
            "PATH",
            "HOME",
        ] {
            assert!(p.pass_env(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_mask_inside_a_later_bind_is_refused() {
        // Outside /tmp, which is a mount of its own in the sandbox: the
        // build tree, unless it lies under /tmp itself (a clone there), then
        // directly under `/` (CI runs as root).
        let target = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target")
            .canonicalize()
            .unwrap();
        let target = if target.starts_with("/tmp") {
            PathBuf::from("/")
        } else {
            target
        };
        let dir = tempfile::Builder::new()
            .prefix(".palisade-mask-test-")
            .tempdir_in(target)
            .unwrap();
        let inner = dir.path().join("inner");
        std::fs::create_dir(&inner).unwrap();
        // Positive control: a mask beside the binds (and one above a bind) is fine.
        let mut p = Profile::governed();
        p.read_paths.push(inner.clone());
        p.host_masks.push(dir.path().to_path_buf());
        p.check_masks().unwrap();
        for at in [inner.clone(), inner.join(".")] {
            let mut p = Profile::governed();
            p.writable.push(dir.path().to_path_buf());
            p.host_masks.push(at);
            let e = p.check_masks().unwrap_err().to_string();
            assert!(e.contains("mask_uncovered"), "{e}");
        }
        // The private /tmp is mounted over the host's (masking there would
        // fail at mount time, obscurely).
        let tmp = tempfile::tempdir_in("/tmp").unwrap();
        let mut p = Profile::governed();
        p.host_masks.push(tmp.path().to_path_buf());
        let e = p.check_masks().unwrap_err().to_string();
        assert!(e.contains("inside the bind `/tmp`"), "{e}");
        // On an empty root the system directories are binds too.
        let mut p = Profile::strict();
        p.check_masks().unwrap();
        p.host_masks.push(PathBuf::from("/usr/bin"));
        assert!(p.check_masks().is_err());
    }

    #[test]
    fn a_mask_that_is_relative_or_climbs_is_refused() {
        // Positive control: an absolute mask, present or not, passes.
        let mut p = Profile::governed();
        p.add_mask("/opt/palisade-absent-mask");
        p.check_masks().unwrap();
        // `target` exists relative to the tests' working directory, so
        // the plan would find it there and mount it at the wrong place.
        for (bad, why) in [
            ("target", "a mask must be absolute"),
            ("", "a mask must be absolute"),
            ("/opt/../var/x", "a mask must not contain `..`"),
        ] {
            let mut p = Profile::governed();
            p.add_mask(bad);
            let e = p.check_masks().unwrap_err().to_string();
            assert_eq!(e, format!("invalid sandbox path `{bad}`: {why}"));
        }
    }
}
