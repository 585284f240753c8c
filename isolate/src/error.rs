//! Errors of sandbox construction and launch.

use std::path::PathBuf;

use crate::layer::Layer;

/// A setup step in the forked children, reported through the error pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[repr(u16)]
pub enum Step {
    /// Forking the supervisor or init.
    Fork = 1,
    /// Creating the user namespace.
    UnshareUser,
    /// Writing the uid/gid maps.
    IdMap,
    /// Creating the mount namespace.
    UnshareMount,
    /// Creating the PID namespace.
    UnsharePid,
    /// Creating the network namespace.
    UnshareNet,
    /// Creating the IPC namespace.
    UnshareIpc,
    /// Creating the UTS namespace.
    UnshareUts,
    /// Making mount propagation private.
    MountPrivate,
    /// Building the new root (binds, masks, /dev, /proc, /tmp).
    MountPlan,
    /// Switching to the new root.
    PivotRoot,
    /// Bringing up loopback or the network bridge.
    Network,
    /// `setsid`, descriptors, working directory.
    Session,
    /// Resource limits.
    Rlimits,
    /// Changing to the worker uid/gid.
    Identity,
    /// Dropping capabilities and locking securebits.
    Capabilities,
    /// `PR_SET_NO_NEW_PRIVS`.
    NoNewPrivs,
    /// Landlock ruleset.
    Landlock,
    /// Seccomp filter.
    Seccomp,
    /// `execve` of the command.
    Exec,
    /// The parent-death signal or parent check.
    DieWithParent,
    /// Joining the sandbox's cgroup (`[worker] limits`).
    Cgroup,
}

impl Step {
    pub(crate) fn from_u16(v: u16) -> Option<Step> {
        const ALL: [Step; 22] = [
            Step::Fork,
            Step::UnshareUser,
            Step::IdMap,
            Step::UnshareMount,
            Step::UnsharePid,
            Step::UnshareNet,
            Step::UnshareIpc,
            Step::UnshareUts,
            Step::MountPrivate,
            Step::MountPlan,
            Step::PivotRoot,
            Step::Network,
            Step::Session,
            Step::Rlimits,
            Step::Identity,
            Step::Capabilities,
            Step::NoNewPrivs,
            Step::Landlock,
            Step::Seccomp,
            Step::Exec,
            Step::DieWithParent,
            Step::Cgroup,
        ];
        ALL.into_iter().find(|s| *s as u16 == v)
    }

    /// The layer this step enforces, when the step is a layer.
    pub fn layer(self) -> Option<Layer> {
        match self {
            Step::UnshareUser | Step::IdMap => Some(Layer::UserNamespace),
            Step::UnshareMount | Step::MountPrivate | Step::MountPlan | Step::PivotRoot => {
                Some(Layer::MountNamespace)
            }
            Step::UnsharePid => Some(Layer::PidNamespace),
            Step::UnshareNet | Step::Network => Some(Layer::NetworkNamespace),
            Step::UnshareIpc => Some(Layer::IpcNamespace),
            Step::UnshareUts => Some(Layer::UtsNamespace),
            Step::Rlimits => Some(Layer::Rlimits),
            Step::Capabilities | Step::Identity => Some(Layer::Capabilities),
            Step::NoNewPrivs => Some(Layer::NoNewPrivs),
            Step::Landlock => Some(Layer::Landlock),
            Step::Seccomp => Some(Layer::Seccomp),
            Step::Cgroup => Some(Layer::Cgroups),
            Step::Fork | Step::Session | Step::Exec | Step::DieWithParent => None,
        }
    }

    /// Lower-case name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Step::Fork => "fork",
            Step::UnshareUser => "user namespace",
            Step::IdMap => "uid/gid map",
            Step::UnshareMount => "mount namespace",
            Step::UnsharePid => "pid namespace",
            Step::UnshareNet => "network namespace",
            Step::UnshareIpc => "ipc namespace",
            Step::UnshareUts => "uts namespace",
            Step::MountPrivate => "private mount propagation",
            Step::MountPlan => "mount plan",
            Step::PivotRoot => "pivot_root",
            Step::Network => "network setup",
            Step::Session => "session and descriptors",
            Step::Rlimits => "rlimits",
            Step::Identity => "worker uid/gid",
            Step::Capabilities => "capability drop",
            Step::NoNewPrivs => "no_new_privs",
            Step::Landlock => "landlock",
            Step::Seccomp => "seccomp",
            Step::Exec => "exec",
            Step::DieWithParent => "die-with-parent",
            Step::Cgroup => "cgroup",
        }
    }
}

/// Why a sandbox could not be built or launched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// A required layer is missing on this host.
    #[error("isolation_layer_unavailable: {layer} ({detail})")]
    LayerUnavailable {
        /// The missing layer.
        layer: Layer,
        /// Kernel facts, e.g. `ABI 3, 4 required`.
        detail: String,
    },
    /// A layer was named in `dangerous()` that cannot be switched off.
    #[error("layer `{0}` cannot be downgraded: the rest of the sandbox depends on it")]
    NotDowngradable(Layer),
    /// A Unix socket is visible through the sandbox's binds.
    #[error(
        "unix_socket_visible: `{path}` is a Unix socket the worker could see ({how}), and through it reach whatever listens on it outside the sandbox; if it is stale (nothing listens on it: an earlier worker may have left it), remove it, then launch again; else move it out of the sandbox's view, or have the profile mask it (`SocketPolicy::Mask`) or allow it"
    )]
    SocketVisible {
        /// The socket path as the sandbox would see it.
        path: PathBuf,
        /// How it was found (`directory walk` or `mount point`).
        how: &'static str,
    },
    /// A path in the profile is invalid (relative, missing, `..`).
    #[error("invalid sandbox path `{path}`: {reason}")]
    InvalidPath {
        /// The offending path.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
    /// A standard stream of the worker is a directory or an `O_PATH`
    /// descriptor: the worker could open host files relative to it
    /// (`openat`), past the sandbox's masks and binds.
    #[error(
        "unsafe_stdio: {name} (fd {fd}) is {kind}; the worker could open host files relative to it, past the sandbox's masks; give it a file, a pipe, a terminal or /dev/null instead"
    )]
    UnsafeStdio {
        /// The descriptor number in the worker (0, 1 or 2).
        fd: i32,
        /// `standard input`, `standard output` or `standard error`.
        name: &'static str,
        /// What it is: `a directory`, `an O_PATH descriptor`.
        kind: &'static str,
    },
    /// The worker of a root launcher would run as uid 0 or gid 0 without
    /// [`crate::DangerousSandbox::allow_root_worker`].
    #[error(
        "worker_uid_root: the worker would run as uid {uid} gid {gid}: with root's ids it reads root's owner-only files in its view and writes root's files in the writable roots (still without any capability); choose another uid, or allow it explicitly (`--dangerously-allow-root-worker`, `Sandbox::dangerous().allow_root_worker()`)"
    )]
    RootWorker {
        /// The worker's uid.
        uid: u32,
        /// The worker's gid.
        gid: u32,
    },
    /// The command is empty or contains a NUL byte.
    #[error("invalid command: {0}")]
    InvalidCommand(String),
    /// A setup step failed in the child before exec.
    #[error("sandbox setup failed at {}: {} ({detail})", step.name(), nix::errno::Errno::from_raw(*errno).desc())]
    Setup {
        /// The failing step.
        step: Step,
        /// The `errno` of the failing call.
        errno: i32,
        /// What the step was doing (a path, a layer).
        detail: String,
    },
    /// The command could not be executed (not found, not executable).
    #[error("cannot execute `{command}`: {}", nix::errno::Errno::from_raw(*errno).desc())]
    Exec {
        /// The command as given.
        command: String,
        /// The `errno` of the last `execve`.
        errno: i32,
    },
    /// A change that would weaken the profile outside [`crate::Sandbox::dangerous`]:
    /// raising a limit, or a variable the sandbox never passes.
    #[error("profile_weakened: {0}")]
    Weakens(String),
    /// An IO error in the launcher itself.
    #[error("sandbox launcher: {0}")]
    Io(#[from] std::io::Error),
}

impl SandboxError {
    /// The layer this error names, when it is about one.
    pub fn layer(&self) -> Option<Layer> {
        match self {
            SandboxError::LayerUnavailable { layer, .. } | SandboxError::NotDowngradable(layer) => {
                Some(*layer)
            }
            SandboxError::Setup { step, .. } => step.layer(),
            _ => None,
        }
    }
}
