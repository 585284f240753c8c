//! The async-ready `SandboxChild`: piped standard streams, the pidfd behind
//! `AsFd`, `wait_timeout`, `kill` with a typed signal, the `Exit` enum, the
//! non-blocking drop handing the reaping to the background reaper, and
//! (`tokio` feature) `wait_async`. Every sandbox here is a real one (root,
//! user namespaces, as on CI); each refusal or negative answer has its
//! positive control in the same test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use palisade_isolate::{Command, Exit, Profile, Sandbox, Signal, Stdio};

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

fn strict() -> Sandbox {
    Sandbox::new(Profile::strict())
}

/// Whether the pidfd behind `AsFd` reports the sandbox as ended, now.
fn pidfd_readable(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO).unwrap() > 0
}

/// Until `f` holds, or 30 s passed (an upper bound against hangs only).
fn wait_for(f: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// The state letter of `/proc/<pid>/stat`, or `None` once the process is
/// gone (reaped).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.trim_start().chars().next()
}

/// How many processes have `marker` on their command line.
fn count_cmdline(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.windows(marker.len()).any(|w| w == marker.as_bytes()))
        })
        .count()
}

#[test]
fn piped_streams_carry_a_real_workers_bytes() {
    if skip_unless_root() {
        return;
    }
    let script = r#"read line; echo "out:$line"; echo "err:$line" >&2; exit 3"#;
    let cmd = Command::new(["/bin/sh", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = strict().spawn(cmd).unwrap();
    let mut stdin = child.take_stdin().expect("stdin piped");
    let mut stdout = child.take_stdout().expect("stdout piped");
    let mut stderr = child.take_stderr().expect("stderr piped");
    // Each end is handed out once.
    assert!(child.take_stdin().is_none() && child.take_stdout().is_none());
    stdin.write_all(b"hello\n").unwrap();
    drop(stdin);
    let mut out = String::new();
    stdout.read_to_string(&mut out).unwrap();
    let mut err = String::new();
    stderr.read_to_string(&mut err).unwrap();
    assert_eq!(out, "out:hello\n");
    assert_eq!(err, "err:hello\n");
    assert_eq!(child.wait().unwrap(), Exit::Exited(3));
    // Without `piped()` there is no launcher end to take.
    let mut plain = strict()
        .spawn(Command::new(["/bin/true"]).stdout(Stdio::null()))
        .unwrap();
    assert!(plain.take_stdout().is_none());
    assert_eq!(plain.wait().unwrap(), Exit::Exited(0));
}

#[test]
fn the_pidfd_wait_timeout_and_a_typed_kill() {
    if skip_unless_root() {
        return;
    }
    let mut child = strict()
        .spawn(Command::new(["/bin/sleep", "600"]).stdin(Stdio::null()))
        .unwrap();
    // Running: the pidfd is not readable and a short wait times out.
    assert!(!pidfd_readable(child.as_fd()));
    assert_eq!(
        child.wait_timeout(Duration::from_millis(100)).unwrap(),
        None
    );
    assert_eq!(child.try_wait().unwrap(), None);
    // SIGTERM is forwarded to the worker, which dies of it.
    child.kill(Signal::TERM).unwrap();
    let exit = child.wait_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(exit, Some(Exit::Signaled(Signal::TERM)));
    assert!(pidfd_readable(child.as_fd()));
    // The status stays, and a reaped sandbox takes no more signals.
    assert_eq!(child.try_wait().unwrap(), exit);
    assert!(child.kill(Signal::TERM).is_err());

    // SIGKILL kills the whole sandbox, and is no wall-limit kill.
    let mut child = strict().spawn(Command::new(["/bin/sleep", "600"])).unwrap();
    child.kill(Signal::KILL).unwrap();
    let exit = child.wait_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(exit, Some(Exit::Signaled(Signal::KILL)));
    assert_eq!(exit.map(Exit::code), Some(137));
    // A worker exiting with 137 itself is neither.
    let c = strict()
        .spawn(Command::new(["/bin/sh", "-c", "exit 137"]))
        .unwrap();
    assert_eq!(c.wait().unwrap(), Exit::Exited(137));
}

#[test]
fn a_reused_probe_is_taken_once_and_launches_alike() {
    if skip_unless_root() {
        return;
    }
    let probes = palisade_isolate::__bench::probes_on_this_thread;
    // The control: without `reuse_probe` every launch probes the host.
    let fresh = strict();
    let before = probes();
    let a = fresh.spawn(Command::new(["/bin/true"])).unwrap();
    let fresh_layers = a.report().layers.clone();
    assert_eq!(a.wait().unwrap(), Exit::Exited(0));
    assert_eq!(probes() - before, 1, "a launch without reuse_probe probes");
    // With it: one probe, then none for any number of launches, clones too.
    let mut reused = strict();
    let before = probes();
    reused.reuse_probe();
    let clone = reused.clone();
    for sb in [&reused, &clone, &reused] {
        let c = sb.spawn(Command::new(["/bin/true"])).unwrap();
        assert_eq!(c.report().layers, fresh_layers, "the same layer table");
        assert_eq!(c.wait().unwrap(), Exit::Exited(0));
    }
    assert_eq!(
        probes() - before,
        1,
        "three launches after reuse_probe probed again"
    );
}

#[test]
fn a_wall_limit_too_far_to_reach_is_no_deadline() {
    if skip_unless_root() {
        return;
    }
    // `Instant::now() + u64::MAX s` overflowed in init (PID 1), which
    // panicked, and the launch ended `Signaled(SIGSEGV)` as if the worker
    // had crashed.
    let mut p = Profile::strict();
    p.limit_wall(Duration::from_secs(u64::MAX)).unwrap();
    let c = Sandbox::new(p).spawn(Command::new(["/bin/true"])).unwrap();
    assert_eq!(c.wait().unwrap(), Exit::Exited(0));
}

#[test]
fn a_wall_limit_kill_is_its_own_exit() {
    if skip_unless_root() {
        return;
    }
    let mut p = Profile::strict();
    p.limit_wall(Duration::from_secs(1)).unwrap();
    let timed = Sandbox::new(p);
    let c = timed.spawn(Command::new(["/bin/sleep", "600"])).unwrap();
    let walled = c.wait().unwrap();
    assert_eq!(walled, Exit::WallLimit);
    assert_eq!(walled.code(), 137);
    // The positive control: under the same limit a short command exits.
    let c = timed.spawn(Command::new(["/bin/true"])).unwrap();
    assert_eq!(c.wait().unwrap(), Exit::Exited(0));
}

#[test]
fn drop_hands_reaping_to_the_background_reaper() {
    if skip_unless_root() {
        return;
    }
    // A marker only this test's worker has on its command line.
    let marker = format!("{}.{}", 600 + std::process::id() % 100, std::process::id());
    let child = strict()
        .spawn(Command::new(["/bin/sleep", marker.as_str()]))
        .unwrap();
    let pid = child.pid();
    assert_eq!(proc_state(pid).map(|s| s != 'Z'), Some(true), "running");
    assert!(
        wait_for(|| count_cmdline(&marker) == 1),
        "worker did not start"
    );
    {
        // While the reaper is held, whatever reaps the supervisor is not
        // `drop`: it must have returned with the supervisor unreaped.
        let _hold = palisade_isolate::__escape::hold_reaper_for_tests();
        drop(child);
        assert!(
            proc_state(pid).is_some(),
            "drop reaped the supervisor itself"
        );
        // Stopped by the drop: the supervisor kills init, waits for it,
        // leaves, and is a zombie awaiting the reaper; by then no process
        // of the sandbox runs (init's exit waits for them all).
        assert!(
            wait_for(|| proc_state(pid) == Some('Z')),
            "the dropped sandbox was not stopped: {:?}",
            proc_state(pid)
        );
        assert_eq!(count_cmdline(&marker), 0, "the worker outlived its sandbox");
    }
    // Released, the reaper reaps it: no zombie is left.
    assert!(
        wait_for(|| proc_state(pid).is_none()),
        "the dropped sandbox was never reaped: {:?}",
        proc_state(pid)
    );
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
}

#[cfg(feature = "tokio")]
#[test]
fn wait_async_over_the_pidfd() {
    if skip_unless_root() {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut child = strict()
        .spawn(Command::new(["/bin/sh", "-c", "exit 5"]))
        .unwrap();
    let exit = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), child.wait_async()).await
    });
    assert_eq!(exit.unwrap().unwrap(), Exit::Exited(5));
    // A sandbox still running is not reported as ended: the wait is
    // cancelled by the (upper-bound) timeout, then it is killed.
    let mut sleeper = strict().spawn(Command::new(["/bin/sleep", "600"])).unwrap();
    let early = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(200), sleeper.wait_async()).await
    });
    assert!(early.is_err(), "ended early: {early:?}");
    sleeper.kill(Signal::KILL).unwrap();
    let exit = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), sleeper.wait_async()).await
    });
    assert_eq!(exit.unwrap().unwrap(), Exit::Signaled(Signal::KILL));
}
