//! The isolation layers, their status, and the kernel probe behind them.
//!
//! [`probe`] reads kernel facts without side effects (Landlock ABI, seccomp
//! mode, namespace limits, overlayfs and the kernel release for staged
//! writes, cgroup controllers); [`probe_thorough`] also forks
//! a child that actually creates every namespace, which is what
//! `palisade probe` reports.

use std::fmt;

use crate::sys;

/// One isolation layer of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Layer {
    /// A user namespace (the worker's uid mapping, capabilities scoped to it).
    UserNamespace,
    /// A mount namespace with a new root (binds, host masks).
    MountNamespace,
    /// A PID namespace with a minimal init.
    PidNamespace,
    /// A network namespace with loopback only.
    NetworkNamespace,
    /// An IPC namespace.
    IpcNamespace,
    /// A UTS namespace (own hostname).
    UtsNamespace,
    /// Staged writes: each writable root is an overlay whose upper layer is
    /// the session's stage directory, so nothing the worker writes reaches
    /// the host tree before a filtered commit. Switching it off
    /// ([`crate::Sandbox::dangerous`]) is "direct writes": the roots are
    /// bound read-write, with placeholders for absent protected names.
    StagedWrites,
    /// Landlock filesystem, TCP and scope rules.
    Landlock,
    /// The seccomp deny list.
    Seccomp,
    /// Dropping every capability set and locking securebits.
    Capabilities,
    /// `PR_SET_NO_NEW_PRIVS`.
    NoNewPrivs,
    /// Resource limits (`setrlimit`).
    Rlimits,
    /// The sandbox's own cgroup (v2, or v1 hierarchies) enforcing
    /// `[worker] limits` memory, swap, pids and cpus: required when one of
    /// them is set, "not configured" otherwise.
    Cgroups,
}

impl Layer {
    /// Every layer, in enforcement order.
    pub const ALL: [Layer; 13] = [
        Layer::UserNamespace,
        Layer::MountNamespace,
        Layer::PidNamespace,
        Layer::NetworkNamespace,
        Layer::IpcNamespace,
        Layer::UtsNamespace,
        Layer::StagedWrites,
        Layer::Rlimits,
        Layer::Cgroups,
        Layer::Capabilities,
        Layer::NoNewPrivs,
        Layer::Landlock,
        Layer::Seccomp,
    ];

    /// Stable short name used in errors, reports and `palisade probe`.
    pub fn name(self) -> &'static str {
        match self {
            Layer::UserNamespace => "user_ns",
            Layer::MountNamespace => "mount_ns",
            Layer::PidNamespace => "pid_ns",
            Layer::NetworkNamespace => "net_ns",
            Layer::IpcNamespace => "ipc_ns",
            Layer::UtsNamespace => "uts_ns",
            Layer::StagedWrites => "staged_writes",
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
            Layer::Capabilities => "capabilities",
            Layer::NoNewPrivs => "no_new_privs",
            Layer::Rlimits => "rlimits",
            Layer::Cgroups => "cgroups",
        }
    }

    /// Parse a name produced by [`Layer::name`].
    pub fn from_name(name: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.name() == name)
    }

    /// Whether an explicit `dangerous()` downgrade may switch this layer
    /// off. The mount and PID namespaces, capabilities, `no_new_privs` and
    /// rlimits are structural: the rest of the sandbox depends on them.
    /// Switching off [`Layer::StagedWrites`] means direct writes.
    pub fn downgradable(self) -> bool {
        matches!(
            self,
            Layer::Landlock
                | Layer::Seccomp
                | Layer::NetworkNamespace
                | Layer::IpcNamespace
                | Layer::UtsNamespace
                | Layer::StagedWrites
                | Layer::Cgroups
        )
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a layer can be (or was) enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayerStatus {
    /// Available and enforced (or enforceable).
    Active {
        /// Kernel facts behind the status, e.g. `ABI 7`.
        detail: String,
    },
    /// Available only in part; `detail` says what is missing.
    Degraded {
        /// What is missing or was switched off, and by whom.
        detail: String,
    },
    /// Not available on this kernel/host.
    Unavailable {
        /// Why, e.g. `ABI 3, 4 required` or `EPERM from unshare`.
        detail: String,
    },
}

impl LayerStatus {
    /// Short status word: `active`, `degraded` or `unavailable`.
    pub fn word(&self) -> &'static str {
        match self {
            LayerStatus::Active { .. } => "active",
            LayerStatus::Degraded { .. } => "degraded",
            LayerStatus::Unavailable { .. } => "unavailable",
        }
    }

    /// The facts behind the status.
    pub fn detail(&self) -> &str {
        match self {
            LayerStatus::Active { detail }
            | LayerStatus::Degraded { detail }
            | LayerStatus::Unavailable { detail } => detail,
        }
    }

    /// Whether the layer is usable as required.
    pub fn is_active(&self) -> bool {
        matches!(self, LayerStatus::Active { .. })
    }
}

/// Kernel facts and the status of every layer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProbeReport {
    /// `uname -r`.
    pub kernel_release: String,
    /// The machine architecture (`uname -m`).
    pub arch: String,
    /// Real uid of the probing process.
    pub uid: u32,
    /// The Landlock ABI version, when Landlock is enabled.
    pub landlock_abi: Option<u32>,
    /// Each layer with its status, in [`Layer::ALL`] order.
    pub layers: Vec<(Layer, LayerStatus)>,
}

impl ProbeReport {
    /// The status of one layer.
    pub fn status(&self, layer: Layer) -> Option<&LayerStatus> {
        self.layers
            .iter()
            .find(|(l, _)| *l == layer)
            .map(|(_, s)| s)
    }

    /// Replace the status of one layer.
    pub(crate) fn set(&mut self, layer: Layer, status: LayerStatus) {
        if let Some(slot) = self.layers.iter_mut().find(|(l, _)| *l == layer) {
            slot.1 = status;
        } else {
            self.layers.push((layer, status));
        }
    }
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

fn uname() -> (String, String) {
    match nix::sys::utsname::uname() {
        Ok(u) => (
            u.release().to_string_lossy().into_owned(),
            u.machine().to_string_lossy().into_owned(),
        ),
        Err(_) => (String::from("unknown"), String::from("unknown")),
    }
}

fn ns_status(kind: &str, limit_file: &str) -> LayerStatus {
    if std::fs::symlink_metadata(format!("/proc/self/ns/{kind}")).is_err() {
        return LayerStatus::Unavailable {
            detail: format!("kernel has no {kind} namespaces (/proc/self/ns/{kind} missing)"),
        };
    }
    match read_trim(&format!("/proc/sys/user/{limit_file}")).and_then(|s| s.parse::<u64>().ok()) {
        Some(0) => LayerStatus::Unavailable {
            detail: format!("/proc/sys/user/{limit_file} is 0"),
        },
        Some(n) => LayerStatus::Active {
            detail: format!("{limit_file}={n}"),
        },
        None => LayerStatus::Active {
            detail: String::from("namespace present"),
        },
    }
}

fn userns_status(uid: u32) -> LayerStatus {
    let base = ns_status("user", "max_user_namespaces");
    if !base.is_active() {
        return base;
    }
    if uid != 0 {
        if read_trim("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
            return LayerStatus::Unavailable {
                detail: String::from("kernel.unprivileged_userns_clone=0"),
            };
        }
        if read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref()
            == Some("1")
        {
            return LayerStatus::Unavailable {
                detail: String::from(
                    "kernel.apparmor_restrict_unprivileged_userns=1 (AppArmor strips capabilities in new user namespaces)",
                ),
            };
        }
    }
    base
}

fn landlock_status() -> (Option<u32>, LayerStatus) {
    match sys::landlock_abi() {
        Ok(abi) => {
            let abi = u32::try_from(abi).unwrap_or(0);
            let status = if abi >= 6 {
                LayerStatus::Active {
                    detail: format!("ABI {abi}"),
                }
            } else if abi >= 4 {
                LayerStatus::Degraded {
                    detail: format!(
                        "ABI {abi}: filesystem and TCP rules; abstract-socket and signal scoping need ABI 6"
                    ),
                }
            } else {
                LayerStatus::Degraded {
                    detail: format!("ABI {abi}: filesystem rules only; TCP rules need ABI 4"),
                }
            };
            (Some(abi), status)
        }
        Err(libc::EOPNOTSUPP) => (
            None,
            LayerStatus::Unavailable {
                detail: String::from("Landlock built but disabled at boot (EOPNOTSUPP)"),
            },
        ),
        Err(libc::ENOSYS) => (
            None,
            LayerStatus::Unavailable {
                detail: String::from("kernel without Landlock (ENOSYS)"),
            },
        ),
        Err(e) => (
            None,
            LayerStatus::Unavailable {
                detail: format!("landlock_create_ruleset failed: errno {e}"),
            },
        ),
    }
}

fn seccomp_status() -> LayerStatus {
    match sys::get_seccomp_mode() {
        Err(e) => LayerStatus::Unavailable {
            detail: format!("PR_GET_SECCOMP failed: errno {e}"),
        },
        Ok(mode) => {
            let actions = read_trim("/proc/sys/kernel/seccomp/actions_avail").unwrap_or_default();
            let has = |a: &str| actions.split_whitespace().any(|x| x == a);
            if !(actions.is_empty() || has("errno") && has("kill_process")) {
                return LayerStatus::Unavailable {
                    detail: format!("seccomp actions `{actions}` lack errno or kill_process"),
                };
            }
            let arch_ok = cfg!(any(
                target_arch = "x86_64",
                target_arch = "aarch64",
                target_arch = "riscv64"
            ));
            if !arch_ok {
                return LayerStatus::Unavailable {
                    detail: String::from("no seccomp filter for this architecture"),
                };
            }
            LayerStatus::Active {
                detail: format!("filter mode available (current mode {mode})"),
            }
        }
    }
}

/// Whether `release` (`uname -r`, e.g. `6.8.0-45-generic`) is at least
/// `major.minor`; `None` when it does not start with two numbers.
fn kernel_at_least(release: &str, major: u32, minor: u32) -> Option<bool> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let ma: u32 = parts.next()?.parse().ok()?;
    let mi: u32 = parts.next()?.parse().ok()?;
    Some((ma, mi) >= (major, minor))
}

/// Staged writes need overlayfs (`/proc/filesystems`), mountable in a user
/// namespace (kernel 5.11 or later) through the new mount API's
/// `lowerdir+` (6.8, so a path needs no escaping: the kernel palisade
/// requires), and user namespaces themselves. The probe is cheap: a real
/// mount failure at setup still fails closed, naming the layer.
fn staged_writes_status(
    release: &str,
    filesystems: Option<&str>,
    userns: &LayerStatus,
) -> LayerStatus {
    if !userns.is_active() {
        return LayerStatus::Unavailable {
            detail: format!("needs user namespaces ({})", userns.detail()),
        };
    }
    let Some(filesystems) = filesystems else {
        return LayerStatus::Unavailable {
            detail: String::from("/proc/filesystems unreadable"),
        };
    };
    let overlay = filesystems
        .lines()
        .any(|l| l.split_whitespace().last() == Some("overlay"));
    if !overlay {
        return LayerStatus::Unavailable {
            detail: String::from(
                "no overlay in /proc/filesystems (overlayfs not built or not loaded)",
            ),
        };
    }
    match kernel_at_least(release, 6, 8) {
        Some(true) => LayerStatus::Active {
            detail: format!("overlayfs in user namespaces (kernel {release})"),
        },
        Some(false) => LayerStatus::Unavailable {
            detail: format!(
                "kernel {release}: overlayfs in a user namespace needs 5.11, its lowerdir+ option (the new mount API palisade mounts it with) 6.8"
            ),
        },
        None => LayerStatus::Unavailable {
            detail: format!("kernel release `{release}` unreadable, 6.8 required"),
        },
    }
}

/// Which cgroup backend could enforce `[worker] limits` (memory, pids and
/// cpu) from the launcher's own cgroups: v2, v1 hierarchies, or neither.
fn cgroup_status() -> LayerStatus {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    crate::cgroup::probe_status(std::path::Path::new("/sys/fs/cgroup"), &own)
}

#[cfg(any(fuzzing, feature = "testing"))]
thread_local! {
    /// How many probes this thread ran (`__bench::probes_on_this_thread`).
    pub(crate) static PROBES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Probe every layer from kernel facts, without creating anything.
pub fn probe() -> ProbeReport {
    #[cfg(any(fuzzing, feature = "testing"))]
    PROBES.with(|n| n.set(n.get() + 1));
    let (kernel_release, arch) = uname();
    let uid = nix::unistd::getuid().as_raw();
    let (landlock_abi, landlock) = landlock_status();
    let userns = userns_status(uid);
    let filesystems = std::fs::read_to_string("/proc/filesystems").ok();
    let staged = staged_writes_status(&kernel_release, filesystems.as_deref(), &userns);
    let layers = vec![
        (Layer::UserNamespace, userns),
        (
            Layer::MountNamespace,
            ns_status("mnt", "max_mnt_namespaces"),
        ),
        (Layer::PidNamespace, ns_status("pid", "max_pid_namespaces")),
        (
            Layer::NetworkNamespace,
            ns_status("net", "max_net_namespaces"),
        ),
        (Layer::IpcNamespace, ns_status("ipc", "max_ipc_namespaces")),
        (Layer::UtsNamespace, ns_status("uts", "max_uts_namespaces")),
        (Layer::StagedWrites, staged),
        (
            Layer::Rlimits,
            LayerStatus::Active {
                detail: String::from("setrlimit"),
            },
        ),
        (Layer::Cgroups, cgroup_status()),
        (
            Layer::Capabilities,
            LayerStatus::Active {
                detail: String::from("all five sets droppable; securebits lockable"),
            },
        ),
        (
            Layer::NoNewPrivs,
            LayerStatus::Active {
                detail: String::from("PR_SET_NO_NEW_PRIVS"),
            },
        ),
        (Layer::Landlock, landlock),
        (Layer::Seccomp, seccomp_status()),
    ];
    ProbeReport {
        kernel_release,
        arch,
        uid,
        landlock_abi,
        layers,
    }
}

/// Probe every layer, and also fork a child that creates a user namespace
/// and then the mount, PID, network, IPC and UTS namespaces inside it, so a
/// policy that blocks creation (AppArmor, seccomp of a container) is seen.
pub fn probe_thorough() -> ProbeReport {
    let mut report = probe();
    let steps: [(Layer, nix::sched::CloneFlags); 6] = [
        (Layer::UserNamespace, nix::sched::CloneFlags::CLONE_NEWUSER),
        (Layer::MountNamespace, nix::sched::CloneFlags::CLONE_NEWNS),
        (Layer::PidNamespace, nix::sched::CloneFlags::CLONE_NEWPID),
        (
            Layer::NetworkNamespace,
            nix::sched::CloneFlags::CLONE_NEWNET,
        ),
        (Layer::IpcNamespace, nix::sched::CloneFlags::CLONE_NEWIPC),
        (Layer::UtsNamespace, nix::sched::CloneFlags::CLONE_NEWUTS),
    ];
    for (i, (layer, _)) in steps.iter().enumerate() {
        if report.status(*layer).is_some_and(|s| !s.is_active()) {
            continue;
        }
        // Each child unshares the user namespace and then the namespace
        // under test, exiting with the errno of the first failure.
        let code = crate::spawn::run_in_child(|| {
            let mut flags = nix::sched::CloneFlags::CLONE_NEWUSER;
            if let Some((_, f)) = steps.get(i) {
                flags |= *f;
            }
            match nix::sched::unshare(flags) {
                Ok(()) => 0,
                Err(e) => e as i32,
            }
        });
        match code {
            Ok(0) => {}
            Ok(errno) => report.set(
                *layer,
                LayerStatus::Unavailable {
                    detail: format!(
                        "unshare failed: {}",
                        nix::errno::Errno::from_raw(errno).desc()
                    ),
                },
            ),
            Err(e) => report.set(
                *layer,
                LayerStatus::Unavailable {
                    detail: format!("probe child failed: {e}"),
                },
            ),
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    const WITH_OVERLAY: &str = "nodev\tsysfs\nnodev\ttmpfs\n\text4\nnodev\toverlay\n";
    const WITHOUT_OVERLAY: &str = "nodev\tsysfs\nnodev\ttmpfs\n\text4\n";

    fn userns() -> LayerStatus {
        LayerStatus::Active {
            detail: String::from("max_user_namespaces=1"),
        }
    }

    #[test]
    fn staged_writes_needs_overlay_a_recent_kernel_and_user_namespaces() {
        // Positive control: everything present.
        assert!(
            staged_writes_status("6.8.0-45-generic", Some(WITH_OVERLAY), &userns()).is_active()
        );
        assert!(staged_writes_status("6.8.0", Some(WITH_OVERLAY), &userns()).is_active());
        let no_lowerdir_plus = staged_writes_status("6.7.12", Some(WITH_OVERLAY), &userns());
        assert!(!no_lowerdir_plus.is_active());
        assert!(
            no_lowerdir_plus.detail().contains("6.8"),
            "{no_lowerdir_plus:?}"
        );
        let no_overlay = staged_writes_status("6.8.0", Some(WITHOUT_OVERLAY), &userns());
        assert!(!no_overlay.is_active());
        assert!(no_overlay.detail().contains("overlay"), "{no_overlay:?}");
        let old = staged_writes_status("5.10.200", Some(WITH_OVERLAY), &userns());
        assert!(!old.is_active());
        assert!(old.detail().contains("5.11"), "{old:?}");
        assert!(staged_writes_status("10.0", Some(WITH_OVERLAY), &userns()).is_active());
        let odd = staged_writes_status("weird", Some(WITH_OVERLAY), &userns());
        assert!(!odd.is_active());
        let no_userns = LayerStatus::Unavailable {
            detail: String::from("/proc/sys/user/max_user_namespaces is 0"),
        };
        let s = staged_writes_status("6.8.0", Some(WITH_OVERLAY), &no_userns);
        assert!(!s.is_active());
        assert!(s.detail().contains("max_user_namespaces"), "{s:?}");
        assert!(!staged_writes_status("6.8.0", None, &userns()).is_active());
    }

    #[test]
    fn staged_writes_is_named_and_downgradable() {
        assert_eq!(Layer::from_name("staged_writes"), Some(Layer::StagedWrites));
        assert!(Layer::StagedWrites.downgradable());
        assert!(Layer::ALL.contains(&Layer::StagedWrites));
    }
}
