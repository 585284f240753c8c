//! Sandbox profiles as plain data: `strict`, `governed`, `maintenance` and
//! custom profiles.
//!
//! A [`Profile`] says what the worker sees (root view, read-only binds,
//! host masks), what it may write, which paths stay read-only inside the
//! writable roots, how it reaches the network, which environment variables
//! pass and which resource limits apply. `docs/sandbox.md` documents the
//! three built-in profiles as tables; [`Profile::by_name`] returns them.

use std::path::PathBuf;

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
/// launcher's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
            address_space: Some(16 << 30),
            processes: Some(4096),
            file_size: Some(4 << 30),
            open_files: Some(4096),
            cpu_seconds: Some(3600),
            core: Some(0),
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

/// The default environment allowlist (names passed from the launcher).
pub const ENV_ALLOW: &[&str] = &["LANG", "LC_ALL", "TERM"];

/// The sandbox's `PATH`.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// A sandbox profile. Build one with [`Profile::strict`],
/// [`Profile::governed`], [`Profile::maintenance`] or by hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The profile's name, recorded in the launch report.
    pub name: String,
    /// What `/` starts as.
    pub root: RootView,
    /// System directories bound read-only ([`RootView::Empty`] only).
    pub system_dirs: Vec<PathBuf>,
    /// `/etc` entries bound read-only ([`RootView::Empty`] only).
    pub etc_entries: Vec<String>,
    /// Extra read-only binds (required runtime files).
    pub read_paths: Vec<PathBuf>,
    /// Writable roots (bound read-write).
    pub writable: Vec<PathBuf>,
    /// Host masks: each directory becomes an empty read-only tmpfs, each
    /// file an empty read-only file ([`RootView::HostReadOnly`]).
    pub host_masks: Vec<PathBuf>,
    /// Names kept read-only inside each writable root and inside each
    /// nested repository (for `.git/...` names).
    pub protected_names: Vec<String>,
    /// Names kept read-only when present, never created.
    pub protected_if_present: Vec<String>,
    /// Absolute paths kept read-only (e.g. the policy file).
    pub protected_paths: Vec<PathBuf>,
    /// Network access.
    pub network: NetworkMode,
    /// Launcher environment variables passed through by name.
    pub env_allow: Vec<String>,
    /// Resource limits.
    pub rlimits: Rlimits,
    /// Size of the private `/tmp` in bytes.
    pub tmp_size: u64,
    /// Minimum Landlock ABI; below it the launch is refused.
    pub min_landlock_abi: u32,
    /// What to do with Unix sockets found by the walk.
    pub socket_policy: SocketPolicy,
    /// Unix sockets the walk allows (relay and control sockets).
    pub allowed_sockets: Vec<PathBuf>,
    /// Whether a delegated cgroup is required (otherwise reported only).
    pub require_cgroups: bool,
    /// Wall-clock limit: init kills the worker (`SIGKILL`, status 137)
    /// when it runs longer. `None`: no limit.
    pub wall_limit: Option<std::time::Duration>,
    /// Whether the worker may receive provider credentials through relays
    /// (`false` for maintenance). Informational for the caller wiring relays.
    pub provider_credentials: bool,
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

    /// The names of the built-in profiles.
    pub const BUILT_IN: [&'static str; 3] = ["strict", "governed", "maintenance"];
}
