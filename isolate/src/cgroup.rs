//! The sandbox's own cgroup: `[worker] limits` `memory`, `swap`, `pids` and
//! `cpus` enforced by the kernel, on cgroup v2 or on v1 hierarchies.
//!
//! One small interface over two backends. [`detect`] picks the backend from
//! a cgroupfs root (`/sys/fs/cgroup`, or a fake one in tests) and the
//! launcher's own `/proc/self/cgroup`: v2 when the unified hierarchy
//! (`<root>` or `<root>/unified`) lists every needed controller, else v1
//! when each needed controller has its own hierarchy (`<root>/memory`,
//! `<root>/pids`, `<root>/cpu`). [`Cgroup::create`] makes
//! `palisade-<session>` below the launcher's cgroup in each hierarchy,
//! writes the limits and opens `cgroup.procs`; the supervisor writes `0`
//! there (itself) before it creates anything, so init and the worker are
//! born inside. [`Cgroup::remove`] kills what is left and removes the
//! directories. A limit with no usable controller is an error naming the
//! controller, the hierarchy and how to delegate it: never a fallback.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The cgroup limits of a sandbox (`[worker] limits`). `None` leaves the
/// key unset; a sandbox with none of them set creates no cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CgroupLimits {
    /// Memory in bytes (`memory.max`; v1 `memory.limit_in_bytes`).
    pub memory: Option<u64>,
    /// Swap in bytes (`memory.swap.max`; v1 `memory.memsw.limit_in_bytes`
    /// is memory plus swap). With `memory` set and `swap` unset the worker
    /// gets no swap.
    pub swap: Option<u64>,
    /// Processes and threads of the worker (`pids.max`, which is this
    /// plus the sandbox's supervisor and init).
    pub pids: Option<u64>,
    /// CPU bandwidth in thousandths of a CPU (`cpu.max`, period 100000 µs;
    /// v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`).
    pub cpus: Option<u64>,
}

/// The sandbox's own processes counted by `pids.max` on top of the
/// worker's: the supervisor and init (so `pids` means the worker's
/// processes and threads, as `RLIMIT_NPROC` does).
pub(crate) const OWN_PIDS: u64 = 2;

/// The CPU bandwidth period, in microseconds.
pub(crate) const CPU_PERIOD_US: u64 = 100_000;

impl CgroupLimits {
    /// Whether no limit is set (no cgroup is needed).
    pub fn is_empty(&self) -> bool {
        self.memory.is_none() && self.swap.is_none() && self.pids.is_none() && self.cpus.is_none()
    }

    /// The controllers these limits need, by their cgroup names.
    fn controllers(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.memory.is_some() || self.swap.is_some() {
            out.push("memory");
        }
        if self.pids.is_some() {
            out.push("pids");
        }
        if self.cpus.is_some() {
            out.push("cpu");
        }
        out
    }

    /// The CPU quota in microseconds per [`CPU_PERIOD_US`].
    fn cpu_quota(cpus: u64) -> u64 {
        cpus.saturating_mul(CPU_PERIOD_US) / 1000
    }

    /// Checks the values themselves: swap without memory, a CPU quota
    /// below the kernel's 1 ms minimum.
    fn check(&self) -> Result<(), String> {
        if self.swap.is_some() && self.memory.is_none() {
            return Err(String::from(
                "worker.limits.swap needs worker.limits.memory (swap is counted on top of memory)",
            ));
        }
        if let Some(c) = self.cpus
            && Self::cpu_quota(c) < 1000
        {
            return Err(format!(
                "worker.limits.cpus = {}.{:03}: below the kernel's minimum CPU quota of 0.01 CPU",
                c / 1000,
                c % 1000
            ));
        }
        Ok(())
    }
}

/// Which cgroup backend enforces the limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Backend {
    /// The unified hierarchy: the launcher's cgroup directory, whose
    /// children get the controllers.
    V2 { parent: PathBuf },
    /// One v1 hierarchy per controller: `(controller, parent directory)`.
    V1 {
        parents: Vec<(&'static str, PathBuf)>,
    },
}

/// The launcher's cgroup path in a hierarchy, from `/proc/self/cgroup`
/// text: `0::/path` for v2 (`controller` `None`), `N:a,b:/path` for v1.
fn own_path(proc_cgroup: &str, controller: Option<&str>) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = match controller {
            None => names.is_empty(),
            Some(c) => names.split(',').any(|n| n == c),
        };
        hit.then(|| path.trim_start_matches('/').to_owned())
    })
}

/// `root` joined with the launcher's own cgroup path (none: the root).
fn below(root: &Path, own: Option<String>) -> PathBuf {
    match own.filter(|o| !o.is_empty()) {
        Some(o) => root.join(o),
        None => root.to_path_buf(),
    }
}

fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The recipe named in every refusal.
const DELEGATE: &str = "run palisade as root, or under a delegated systemd scope (`systemd-run --user --scope -p Delegate=yes palisade run …`), with the controller enabled in the parent's cgroup.subtree_control; or remove the limit";

/// The backend for `limits` under the cgroupfs `root`, with the launcher's
/// cgroups read from `proc_cgroup` (`/proc/self/cgroup`); an error naming
/// the missing controller and hierarchy.
pub(crate) fn detect(
    root: &Path,
    proc_cgroup: &str,
    limits: &CgroupLimits,
) -> Result<Backend, String> {
    limits.check()?;
    let needed = limits.controllers();
    let mut v2_why = String::new();
    for unified in [root.to_path_buf(), root.join("unified")] {
        let Some(ctrl) = read_trim(&unified.join("cgroup.controllers")) else {
            continue;
        };
        let parent = below(&unified, own_path(proc_cgroup, None));
        let have = read_trim(&parent.join("cgroup.controllers")).unwrap_or(ctrl);
        let missing: Vec<&str> = needed
            .iter()
            .copied()
            .filter(|c| !have.split_whitespace().any(|h| h == *c))
            .collect();
        if missing.is_empty() {
            return Ok(Backend::V2 { parent });
        }
        v2_why = format!(
            "cgroup v2 at {} offers `{have}`, not {}",
            parent.display(),
            missing.join(", ")
        );
    }
    let mut parents = Vec::new();
    for c in &needed {
        let dir = root.join(c);
        if !dir.join("cgroup.procs").exists() {
            let v2 = if v2_why.is_empty() {
                format!(
                    "no cgroup v2 hierarchy at {} or {}/unified",
                    root.display(),
                    root.display()
                )
            } else {
                v2_why
            };
            return Err(format!(
                "the `{c}` controller is not available: {v2}, and no cgroup v1 `{c}` hierarchy at {}; {DELEGATE}",
                dir.display()
            ));
        }
        parents.push((*c, below(&dir, own_path(proc_cgroup, Some(c)))));
    }
    Ok(Backend::V1 { parents })
}

/// A cgroup made for one launch (one directory per hierarchy).
#[derive(Debug)]
pub(crate) struct Cgroup {
    /// `v2` or `v1`.
    backend: &'static str,
    /// `(controller or "", directory)`, in creation order.
    dirs: Vec<(&'static str, PathBuf)>,
    /// `cgroup.procs` of each directory, opened for the supervisor.
    procs: Vec<OwnedFd>,
    /// The values written, e.g. `("memory.max", "67108864")`.
    written: Vec<(String, String)>,
}

fn write(dir: &Path, file: &str, value: &str) -> Result<(), String> {
    std::fs::write(dir.join(file), value).map_err(|e| {
        format!(
            "cannot write `{value}` to {}: {e}",
            dir.join(file).display()
        )
    })
}

fn mkdir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir(dir).map_err(|e| {
        format!(
            "cannot create the sandbox's cgroup {}: {e}; {DELEGATE}",
            dir.display()
        )
    })
}

impl Cgroup {
    /// Make `palisade-<session>` under the backend's parent(s) and write
    /// `limits`; removed again on any failure.
    pub(crate) fn create(
        backend: &Backend,
        session: &str,
        limits: &CgroupLimits,
    ) -> Result<Cgroup, String> {
        let name = format!("palisade-{session}");
        let mut cg = Cgroup {
            backend: "v1",
            dirs: Vec::new(),
            procs: Vec::new(),
            written: Vec::new(),
        };
        let made = match backend {
            Backend::V2 { parent } => {
                cg.backend = "v2";
                cg.create_v2(parent, &name, limits)
            }
            Backend::V1 { parents } => cg.create_v1(parents, &name, limits),
        };
        match made.and_then(|()| cg.open_procs()) {
            Ok(()) => Ok(cg),
            Err(e) => {
                cg.remove();
                Err(e)
            }
        }
    }

    fn set(&mut self, dir: &Path, file: &str, value: String) -> Result<(), String> {
        write(dir, file, &value)?;
        self.written.push((file.to_owned(), value));
        Ok(())
    }

    fn create_v2(&mut self, parent: &Path, name: &str, l: &CgroupLimits) -> Result<(), String> {
        // The controllers must be on in the parent's subtree_control for the
        // child to have their files. As root at the top this is allowed; in a
        // delegated subtree the operator has done it (or it fails here).
        let wanted: Vec<String> = l.controllers().iter().map(|c| format!("+{c}")).collect();
        let on = read_trim(&parent.join("cgroup.subtree_control")).unwrap_or_default();
        if l.controllers()
            .iter()
            .any(|c| !on.split_whitespace().any(|h| h == *c))
        {
            write(parent, "cgroup.subtree_control", &wanted.join(" ")).map_err(|e| {
                format!(
                    "{e} (cgroup v2 controllers {} are not enabled for the children of {}; {DELEGATE})",
                    l.controllers().join(", "),
                    parent.display()
                )
            })?;
        }
        let dir = parent.join(name);
        mkdir(&dir)?;
        self.dirs.push(("", dir.clone()));
        if let Some(m) = l.memory {
            self.set(&dir, "memory.max", m.to_string())?;
            self.set(&dir, "memory.swap.max", l.swap.unwrap_or(0).to_string())?;
            // One OOM kill ends the whole sandbox, not a random process.
            let _ = write(&dir, "memory.oom.group", "1");
        }
        if let Some(p) = l.pids {
            self.set(&dir, "pids.max", p.saturating_add(OWN_PIDS).to_string())?;
        }
        if let Some(c) = l.cpus {
            let v = format!("{} {CPU_PERIOD_US}", CgroupLimits::cpu_quota(c));
            self.set(&dir, "cpu.max", v)?;
        }
        Ok(())
    }

    fn create_v1(
        &mut self,
        parents: &[(&'static str, PathBuf)],
        name: &str,
        l: &CgroupLimits,
    ) -> Result<(), String> {
        for (c, parent) in parents {
            let dir = parent.join(name);
            mkdir(&dir)?;
            self.dirs.push((c, dir.clone()));
            match *c {
                "memory" => self.v1_memory(&dir, l)?,
                "pids" => {
                    if let Some(p) = l.pids {
                        self.set(&dir, "pids.max", p.saturating_add(OWN_PIDS).to_string())?;
                    }
                }
                "cpu" => {
                    if let Some(q) = l.cpus {
                        self.set(&dir, "cpu.cfs_period_us", CPU_PERIOD_US.to_string())?;
                        let quota = CgroupLimits::cpu_quota(q).to_string();
                        self.set(&dir, "cpu.cfs_quota_us", quota)?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// v1 memory: the limit, then memory plus swap. Without swap
    /// accounting (`memory.memsw.*` absent) swap cannot be capped: refused
    /// when a swap limit is asked for or the host has swap.
    fn v1_memory(&mut self, dir: &Path, l: &CgroupLimits) -> Result<(), String> {
        let Some(m) = l.memory else { return Ok(()) };
        self.set(dir, "memory.limit_in_bytes", m.to_string())?;
        let memsw = m.saturating_add(l.swap.unwrap_or(0));
        if dir.join("memory.memsw.limit_in_bytes").exists() {
            self.set(dir, "memory.memsw.limit_in_bytes", memsw.to_string())?;
        } else {
            let host_swap =
                read_trim(Path::new("/proc/swaps")).is_some_and(|s| s.lines().count() > 1);
            if l.swap.is_some_and(|s| s > 0) || host_swap {
                return Err(format!(
                    "cgroup v1 at {} has no swap accounting (memory.memsw.limit_in_bytes): the worker's swap cannot be capped; boot with swapaccount=1, or use cgroup v2",
                    dir.display()
                ));
            }
        }
        Ok(())
    }

    fn open_procs(&mut self) -> Result<(), String> {
        for (_, dir) in &self.dirs {
            let path = dir.join("cgroup.procs");
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            self.procs.push(OwnedFd::from(f));
        }
        Ok(())
    }

    /// The `cgroup.procs` descriptors the supervisor joins through.
    pub(crate) fn procs(&self) -> &[OwnedFd] {
        &self.procs
    }

    /// `cgroup v2 <dir>` or `cgroup v1 <dirs>`, and each value written.
    pub(crate) fn describe(&self) -> String {
        let dirs: Vec<String> = self
            .dirs
            .iter()
            .map(|(_, d)| d.display().to_string())
            .collect();
        let vals: Vec<String> = self
            .written
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!(
            "enforced: cgroup {} {}: {}",
            self.backend,
            dirs.join(", "),
            vals.join(" ")
        )
    }

    /// Each value written, as `(file, value)`.
    pub(crate) fn values(&self) -> &[(String, String)] {
        &self.written
    }

    fn memory_dir(&self) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(c, _)| *c == "memory" || (self.backend == "v2" && c.is_empty()))
            .map(|(_, d)| d.as_path())
            .filter(|d| d.join("memory.events").exists() || d.join("memory.oom_control").exists())
    }

    /// How many processes the kernel's OOM killer ended in this cgroup:
    /// v2 `memory.events` `oom_kill`, v1 `memory.oom_control` `oom_kill`.
    pub(crate) fn oom_kills(&self) -> u64 {
        let Some(dir) = self.memory_dir() else {
            return 0;
        };
        let text = read_trim(&dir.join("memory.events"))
            .or_else(|| read_trim(&dir.join("memory.oom_control")))
            .unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Kill whatever is left in the cgroup and remove its directories
    /// (innermost first), retrying for up to two seconds while the last
    /// processes exit. What cannot be removed is left (and said nowhere:
    /// the caller has its status already).
    pub(crate) fn remove(&mut self) {
        self.procs.clear();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        for (_, dir) in self.dirs.drain(..).rev() {
            loop {
                if let Some(pids) = read_trim(&dir.join("cgroup.procs")) {
                    for pid in pids.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
                let gone = match std::fs::remove_dir(&dir) {
                    Ok(()) => true,
                    Err(e) => e.kind() == std::io::ErrorKind::NotFound,
                };
                if gone || std::time::Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A session name for a launch's cgroup: the launcher's pid, a counter and
/// the time, so two launches never share one.
pub(crate) fn session_name() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{n}-{t:x}", std::process::id())
}

/// The cgroup layer's status from the host's hierarchies, for the probe:
/// which backend could enforce memory, pids and cpu.
pub(crate) fn probe_status(root: &Path, proc_cgroup: &str) -> crate::LayerStatus {
    let all = CgroupLimits {
        memory: Some(1),
        swap: None,
        pids: Some(1),
        cpus: Some(1000),
    };
    match detect(root, proc_cgroup, &all) {
        Ok(Backend::V2 { parent }) => crate::LayerStatus::Active {
            detail: format!("cgroup v2 at {}: memory, pids, cpu", parent.display()),
        },
        Ok(Backend::V1 { parents }) => crate::LayerStatus::Active {
            detail: format!(
                "cgroup v1: {}",
                parents
                    .iter()
                    .map(|(c, d)| format!("{c} at {}", d.display()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        Err(e) => crate::LayerStatus::Unavailable { detail: e },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_v2(dir: &Path) {
        std::fs::write(dir.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        std::fs::write(dir.join("cgroup.subtree_control"), "").unwrap();
        std::fs::write(dir.join("cgroup.procs"), "").unwrap();
    }

    #[test]
    fn v2_backend_writes_each_limit_to_its_file() {
        let tmp = tempfile::tempdir().unwrap();
        fake_v2(tmp.path());
        let l = CgroupLimits {
            memory: Some(64 << 20),
            swap: None,
            pids: Some(20),
            cpus: Some(1500),
        };
        let b = detect(tmp.path(), "0::/\n", &l).unwrap();
        assert_eq!(
            b,
            Backend::V2 {
                parent: tmp.path().to_path_buf()
            }
        );
        // On a plain directory the kernel's files do not appear: make the
        // child's files exist by creating the directory first.
        let dir = tmp.path().join("palisade-t");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("cgroup.procs"), "").unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let mut cg = Cgroup {
            backend: "v2",
            dirs: Vec::new(),
            procs: Vec::new(),
            written: Vec::new(),
        };
        cg.create_v2(tmp.path(), "palisade-t", &l).unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(read("memory.max"), "67108864");
        assert_eq!(read("memory.swap.max"), "0");
        assert_eq!(read("pids.max"), "22");
        assert_eq!(read("cpu.max"), "150000 100000");
        let sub = std::fs::read_to_string(tmp.path().join("cgroup.subtree_control")).unwrap();
        assert_eq!(sub, "+memory +pids +cpu");
        assert!(
            cg.describe().contains("memory.max=67108864"),
            "{}",
            cg.describe()
        );
        cg.dirs.clear();
    }

    #[test]
    fn no_controller_is_an_error_naming_it_and_how_to_delegate() {
        let tmp = tempfile::tempdir().unwrap();
        let l = CgroupLimits {
            memory: Some(1 << 30),
            ..CgroupLimits::default()
        };
        let e = detect(tmp.path(), "0::/\n", &l).unwrap_err();
        assert!(e.contains("`memory` controller is not available"), "{e}");
        assert!(e.contains("Delegate=yes"), "{e}");
        // A v2 hierarchy without the controller is named as such.
        std::fs::write(tmp.path().join("cgroup.controllers"), "pids\n").unwrap();
        let e = detect(tmp.path(), "0::/\n", &l).unwrap_err();
        assert!(e.contains("offers `pids`, not memory"), "{e}");
        // Positive control: the controller present.
        std::fs::write(tmp.path().join("cgroup.controllers"), "pids memory\n").unwrap();
        assert!(detect(tmp.path(), "0::/\n", &l).is_ok());
    }

    #[test]
    fn v1_is_chosen_per_controller_under_the_launchers_own_cgroup() {
        let tmp = tempfile::tempdir().unwrap();
        for c in ["memory", "pids"] {
            std::fs::create_dir(tmp.path().join(c)).unwrap();
            std::fs::write(tmp.path().join(c).join("cgroup.procs"), "").unwrap();
        }
        let l = CgroupLimits {
            memory: Some(1 << 30),
            pids: Some(10),
            ..CgroupLimits::default()
        };
        let own = "4:memory:/a/b\n8:pids:/\n0::/\n";
        let b = detect(tmp.path(), own, &l).unwrap();
        assert_eq!(
            b,
            Backend::V1 {
                parents: vec![
                    ("memory", tmp.path().join("memory/a/b")),
                    ("pids", tmp.path().join("pids")),
                ]
            }
        );
        let cpu = CgroupLimits {
            cpus: Some(500),
            ..CgroupLimits::default()
        };
        let e = detect(tmp.path(), own, &cpu).unwrap_err();
        assert!(e.contains("`cpu` controller"), "{e}");
    }

    #[test]
    fn values_that_cannot_be_enforced_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        fake_v2(tmp.path());
        let swap_only = CgroupLimits {
            swap: Some(1),
            ..CgroupLimits::default()
        };
        assert!(
            detect(tmp.path(), "0::/", &swap_only)
                .unwrap_err()
                .contains("needs worker.limits.memory")
        );
        let tiny = CgroupLimits {
            cpus: Some(5),
            ..CgroupLimits::default()
        };
        assert!(
            detect(tmp.path(), "0::/", &tiny)
                .unwrap_err()
                .contains("0.005")
        );
        let ok = CgroupLimits {
            cpus: Some(10),
            ..CgroupLimits::default()
        };
        assert!(detect(tmp.path(), "0::/", &ok).is_ok());
    }

    #[test]
    fn oom_kills_are_read_from_memory_events() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("memory.events"),
            "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
        )
        .unwrap();
        let cg = Cgroup {
            backend: "v2",
            dirs: vec![("", tmp.path().to_path_buf())],
            procs: Vec::new(),
            written: Vec::new(),
        };
        assert_eq!(cg.oom_kills(), 1);
        std::mem::forget(cg);
    }
}
