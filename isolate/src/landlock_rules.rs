//! The Landlock ruleset of the worker: filesystem rules mirroring the mount
//! plan, TCP connect only to the bridge ports (ABI ≥ 4), abstract Unix
//! sockets and signals scoped (ABI ≥ 6). Enforced as a hard requirement:
//! anything but `FullyEnforced` is a launch failure.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

use crate::error::Step;
use crate::plan::MountPlan;
use crate::profile::{Profile, RootView};
use crate::spawn::{Bridge, Fail};

/// Paths and ports, computed in the launcher, opened by the worker after
/// `pivot_root` (so every path names the sandbox's own view).
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    abi: u32,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    optional_write: Vec<PathBuf>,
    ports: Vec<u16>,
    /// Where socket files may be made (`LANDLOCK_ACCESS_FS_MAKE_SOCK`):
    /// only the private `/tmp` under a nested sandbox, every writable
    /// root otherwise (where seccomp refuses `AF_UNIX` sockets anyway).
    sockets_in_tmp_only: bool,
}

impl Rules {
    pub(crate) fn from_plan(
        plan: &MountPlan,
        profile: &Profile,
        bridges: &[Bridge],
        abi: u32,
    ) -> Rules {
        let mut read = plan.read_paths.clone();
        read.push(PathBuf::from("/proc"));
        if profile.root == RootView::Empty {
            read.push(PathBuf::from("/dev/urandom"));
            read.push(PathBuf::from("/dev/random"));
        }
        let write = plan.writable.clone();
        let optional_write = [
            "/dev/null",
            "/dev/zero",
            "/dev/full",
            "/dev/tty",
            "/dev/pts",
            "/dev/ptmx",
            "/dev/shm",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        Rules {
            abi,
            read,
            write,
            optional_write,
            ports: bridges.iter().map(|b| b.port).collect(),
            sockets_in_tmp_only: profile.nested_sandbox,
        }
    }

    /// Create and enforce the ruleset on the calling thread.
    pub(crate) fn enforce(&self) -> Result<(), Fail> {
        // A ruleset the kernel cannot create means Landlock is missing
        // (EOPNOTSUPP, reported as an unavailable layer); a rule that
        // cannot be added is a setup error (EINVAL).
        let err = |what: &str| {
            let what = what.to_owned();
            let errno = if what == "create" || what.starts_with("handle") || what == "scope" {
                libc::EOPNOTSUPP
            } else {
                libc::EINVAL
            };
            move |e: landlock::RulesetError| {
                Fail::new(Step::Landlock, errno, format!("{what}: {e}"))
            }
        };
        let abi_num = i32::try_from(self.abi).unwrap_or(0);
        let abi = ABI::from(abi_num);
        let all = AccessFs::from_all(abi);
        let read = AccessFs::from_read(abi);
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(all)
            .map_err(err("handle fs"))?;
        if self.abi >= 4 {
            ruleset = ruleset
                .handle_access(AccessNet::ConnectTcp)
                .map_err(err("handle net"))?;
        }
        if self.abi >= 6 {
            ruleset = ruleset
                .scope(Scope::AbstractUnixSocket | Scope::Signal)
                .map_err(err("scope"))?;
        }
        let mut created = ruleset.create().map_err(err("create"))?;
        let file = AccessFs::from_file(abi);
        for p in &self.read {
            let access = if p.is_dir() { read } else { read & file };
            let fd = open(p)?;
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(err("read rule"))?;
        }
        let roots = if self.sockets_in_tmp_only {
            all & !AccessFs::MakeSock
        } else {
            all
        };
        for p in &self.write {
            let access = if p.is_dir() { roots } else { file };
            let fd = open(p)?;
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(err("write rule"))?;
        }
        // A nested sandbox writes the uid/gid maps of the user namespaces
        // it makes (`/proc/<pid>/uid_map`, `gid_map`, `setgroups`), whose
        // inodes exist only once the process does: /proc is writable to
        // it as far as the kernel's own checks allow (the files a process
        // owns; the /proc masks are read-only mounts).
        if self.sockets_in_tmp_only {
            created = created
                .add_rule(PathBeneath::new(
                    open(Path::new("/proc"))?,
                    AccessFs::WriteFile | AccessFs::Truncate,
                ))
                .map_err(err("proc rule"))?;
        }
        // The private /tmp: every right, socket files included.
        created = created
            .add_rule(PathBeneath::new(open(Path::new("/tmp"))?, all))
            .map_err(err("write rule"))?;
        for p in &self.optional_write {
            if let Ok(fd) = PathFd::new(p) {
                let access = if p.is_dir() { all } else { file };
                created = created
                    .add_rule(PathBeneath::new(fd, access))
                    .map_err(err("device rule"))?;
            }
        }
        if self.abi >= 4 {
            for port in &self.ports {
                created = created
                    .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                    .map_err(err("port rule"))?;
            }
        }
        let status = created.restrict_self().map_err(err("restrict_self"))?;
        if status.ruleset != RulesetStatus::FullyEnforced {
            return Err(Fail::new(
                Step::Landlock,
                libc::EOPNOTSUPP,
                format!("ruleset {:?}, full enforcement required", status.ruleset),
            ));
        }
        Ok(())
    }
}

fn open(p: &Path) -> Result<PathFd, Fail> {
    PathFd::new(p).map_err(|e| {
        Fail::new(
            Step::Landlock,
            libc::ENOENT,
            format!("open {}: {e}", p.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_access_has_no_write_right() {
        let r = AccessFs::from_read(ABI::V4);
        assert!(!r.contains(AccessFs::WriteFile));
        assert!(r.contains(AccessFs::Execute));
    }
}
