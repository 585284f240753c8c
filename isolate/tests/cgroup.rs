//! The sandbox's own cgroup, for real (root, this host's cgroup v1
//! hierarchies or v2): a memory limit OOM-kills a worker that allocates
//! past it (`Exit::OomKilled`), `pids` stops a loop of forks, `cpus` writes
//! the CPU quota the worker runs under, a limit with no controller refuses
//! the launch naming it, and `RLIMIT_AS` is inherited unless a profile sets
//! it. Every refusal has its positive control.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::io::Read;

use palisade_isolate::{CgroupLimits, Command, Exit, Layer, Limit, Profile, Sandbox, Stdio};

fn skip_unless_root() -> bool {
    if !nix::unistd::getuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the sandbox tests as root"
        );
        eprintln!("skipped: the sandbox tests run as root (CI does)");
        return true;
    }
    false
}

/// A strict sandbox that can run python3 and a shell.
fn sandbox(limits: CgroupLimits) -> Sandbox {
    let mut sb = Sandbox::new(Profile::strict());
    sb.limit_cgroup(limits);
    sb
}

/// Run `script` under `sh -c`, returning how it ended and its stdout.
fn run(sb: &Sandbox, script: &str) -> (Exit, String, u64) {
    let mut child = sb
        .spawn(
            Command::new(["/bin/sh", "-c", script])
                .stdout(Stdio::piped())
                .stderr(Stdio::null()),
        )
        .unwrap();
    let mut out = String::new();
    child
        .take_stdout()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut child = child;
    let exit = child
        .wait_timeout(std::time::Duration::from_secs(60))
        .unwrap();
    (exit.expect("the worker ended"), out, child.oom_kills())
}

const ALLOC_256M: &str = "exec python3 -c 'b = bytearray(256 << 20); b[::4096] = b\"x\" * len(b[::4096]); print(\"allocated\")'";

#[test]
fn a_worker_over_its_memory_limit_is_oom_killed() {
    if skip_unless_root() {
        return;
    }
    let mut small = CgroupLimits::default();
    small.memory = Some(64 << 20);
    let sb = sandbox(small);
    let (exit, out, ooms) = run(&sb, ALLOC_256M);
    assert_eq!(exit, Exit::OomKilled, "stdout: {out}");
    assert!(ooms >= 1, "{ooms}");
    assert!(!out.contains("allocated"), "{out}");
    // Positive control: the same allocation under 512 MiB succeeds.
    let mut big = CgroupLimits::default();
    big.memory = Some(512 << 20);
    let (exit, out, ooms) = run(&sandbox(big), ALLOC_256M);
    assert_eq!(exit, Exit::Exited(0), "stdout: {out}");
    assert!(out.contains("allocated"), "{out}");
    assert_eq!(ooms, 0);
}

const FORK_50: &str = "exec python3 -c '\nimport subprocess\nps = []\nfor _ in range(50):\n    try: ps.append(subprocess.Popen([\"sleep\", \"5\"]))\n    except OSError: pass\nprint(\"forked\", len(ps))\nfor p in ps: p.kill()\n'";

#[test]
fn pids_stops_a_loop_of_forks() {
    if skip_unless_root() {
        return;
    }
    let mut few = CgroupLimits::default();
    few.pids = Some(20);
    let sb = sandbox(few);
    let (exit, out, _) = run(&sb, FORK_50);
    assert_eq!(exit, Exit::Exited(0), "{out}");
    let forked: u32 = out
        .trim()
        .trim_start_matches("forked ")
        .parse()
        .unwrap_or(999);
    assert!(
        forked <= 19,
        "pids = 20 let the worker fork {forked}: {out}"
    );
    // Positive control: 100 lets all 50 run.
    let mut many = CgroupLimits::default();
    many.pids = Some(100);
    let (exit, out, _) = run(&sandbox(many), FORK_50);
    assert_eq!(exit, Exit::Exited(0), "{out}");
    assert_eq!(out.trim(), "forked 50");
}

/// The cgroups layer's detail in the launch report (`enforced: cgroup v1
/// <dirs>: <values>`).
fn cgroup_detail(report: &palisade_isolate::LaunchReport) -> String {
    let (_, status) = report
        .layers
        .iter()
        .find(|(l, _)| *l == Layer::Cgroups)
        .unwrap();
    status.detail().to_owned()
}

#[test]
fn cpus_writes_the_quota_the_worker_runs_under() {
    if skip_unless_root() {
        return;
    }
    let mut l = CgroupLimits::default();
    l.cpus = Some(1500);
    let sb = sandbox(l);
    let child = sb
        .spawn(Command::new(["/bin/sh", "-c", "sleep 2"]).stdout(Stdio::null()))
        .unwrap();
    let detail = cgroup_detail(child.report());
    assert!(detail.starts_with("enforced: cgroup"), "{detail}");
    // Read the quota back from the cgroup directory while the worker runs,
    // and check the supervisor (and so every process below it) is in it.
    let dirs = detail
        .split_once(' ')
        .and_then(|(_, r)| r.split_once(' '))
        .and_then(|(_, r)| r.split_once(' '))
        .map(|(_, r)| r.split_once(':').unwrap().0.to_owned())
        .unwrap();
    let dir = std::path::Path::new(dirs.split(", ").next().unwrap());
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).map(|s| s.trim().to_owned());
    match read("cpu.max") {
        Ok(v2) => assert_eq!(v2, "150000 100000"),
        Err(_) => {
            assert_eq!(read("cpu.cfs_quota_us").unwrap(), "150000");
            assert_eq!(read("cpu.cfs_period_us").unwrap(), "100000");
        }
    }
    let procs = read("cgroup.procs").unwrap();
    assert!(
        procs.lines().any(|p| p == child.pid().to_string()),
        "supervisor {} not in {procs}",
        child.pid()
    );
    assert!(
        procs.lines().count() >= 3,
        "supervisor, init and the worker: {procs}"
    );
    assert!(
        child
            .report()
            .limits
            .iter()
            .any(|(k, v)| k.starts_with("cpu.") && v.starts_with("150000")),
        "{:?}",
        child.report().limits
    );
    let exit = child.wait().unwrap();
    assert_eq!(exit, Exit::Exited(0));
    // Removed once the worker ended.
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[test]
fn a_limit_without_a_controller_refuses_the_launch_naming_it() {
    if skip_unless_root() {
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    let mut l = CgroupLimits::default();
    l.memory = Some(1 << 30);
    let mut sb = sandbox(l);
    sb.__cgroup_root(empty.path());
    let e = sb
        .spawn(Command::new(["/bin/true"]))
        .map(|_| ())
        .unwrap_err();
    let msg = e.to_string();
    assert_eq!(e.layer(), Some(Layer::Cgroups), "{msg}");
    assert!(
        msg.contains("isolation_layer_unavailable: cgroups")
            && msg.contains("`memory` controller is not available")
            && msg.contains("Delegate=yes"),
        "{msg}"
    );
    // Positive control: the real cgroupfs has the controller.
    let (exit, _, _) = run(&sandbox(l), "exit 0");
    assert_eq!(exit, Exit::Exited(0));
}

fn limit_line(out: &str) -> String {
    out.lines()
        .find(|l| l.starts_with("Max address space"))
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn rlimit_as_is_inherited_by_default_and_set_when_a_profile_asks() {
    if skip_unless_root() {
        return;
    }
    let sb = Sandbox::new(Profile::strict());
    let (exit, out, _) = run(&sb, "cat /proc/self/limits");
    assert_eq!(exit, Exit::Exited(0));
    assert_eq!(
        limit_line(&out),
        "Max address space unlimited unlimited bytes"
    );
    let mut sb = Sandbox::new(Profile::strict());
    sb.limit(Limit::AddressSpace, 1 << 30).unwrap();
    let (exit, out, _) = run(&sb, "cat /proc/self/limits");
    assert_eq!(exit, Exit::Exited(0));
    assert_eq!(
        limit_line(&out),
        "Max address space 1073741824 1073741824 bytes"
    );
}
