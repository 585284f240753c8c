//! The worker's own terminal (issue 14, item 20): when fds 0–2 are a
//! terminal, the worker gets a pty of its own, relayed by the launcher.
//!
//! Each test opens a pty pair as the user's "real terminal" and forks a
//! launcher that makes itself a session leader with that terminal as its
//! controlling terminal on fds 0–2, as a shell leaves a job. The launcher
//! reports back on a pipe; every wait is bounded.
//!
//! Checked: the worker's fds are a different tty and never the real one
//! (control: the same probe outside sees the real one); keystrokes reach a
//! foreground worker and its output comes back, in raw mode, restored
//! afterwards even when the worker is killed; a background launcher leaves
//! keystrokes to the foreground job (control: the foreground case);
//! `TIOCSTI` from the worker lands in its own pty, not in the real
//! terminal (control: `TIOCSTI` from the session does reach it); no
//! terminal means no pty and no relay thread.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::termios::{self, LocalFlags, SetArg};
use palisade_isolate::__escape::{
    exit_for_tests, fork_for_tests, pending_input_for_tests, wait_for_tests,
};
use palisade_isolate::{Command, Layer, Profile, Sandbox, Stdio};

const PROBE: &str = env!("CARGO_BIN_EXE_palisade-escape-probe");

/// Under CI (`CI` set) not being root is a failure, never a silent pass.
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

/// The user's terminal, played by a pty pair of the test.
struct Term {
    master: OwnedFd,
    path: PathBuf,
    rdev: u64,
}

fn term() -> Term {
    let ws = nix::pty::Winsize {
        ws_row: 33,
        ws_col: 111,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pair = nix::pty::openpty(&ws, None).unwrap();
    for fd in [&pair.master, &pair.slave] {
        nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )
        .unwrap();
    }
    let path = nix::unistd::ttyname(&pair.slave).unwrap();
    let rdev = std::fs::metadata(&path).unwrap().rdev();
    // The slave stays open through the path the launcher opens.
    Term {
        master: pair.master,
        path,
        rdev,
    }
}

fn probe_dir() -> PathBuf {
    Path::new(PROBE).parent().unwrap().to_owned()
}

fn sandbox() -> Sandbox {
    let mut sb = Sandbox::new(Profile::governed());
    sb.read_only(probe_dir());
    sb
}

/// Run `f` in a forked launcher: a session leader whose controlling
/// terminal is `t`'s slave, on its fds 0–2. Its report (or its error)
/// comes back on a pipe.
fn in_session(t: &Term, f: impl FnOnce(&std::fs::File) -> Result<String, String>) -> String {
    let (r, w) = nix::unistd::pipe().unwrap();
    let pid = fork_for_tests();
    assert!(pid >= 0, "fork");
    if pid == 0 {
        drop(r);
        let report = (|| {
            // Job-control calls of a background launcher (tcflush) must not
            // stop it.
            let mut ttou = nix::sys::signal::SigSet::empty();
            ttou.add(nix::sys::signal::Signal::SIGTTOU);
            ttou.thread_block().map_err(|e| format!("block: {e}"))?;
            nix::unistd::setsid().map_err(|e| format!("setsid: {e}"))?;
            // A session leader opening a terminal gets it as its
            // controlling terminal.
            let ctty = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&t.path)
                .map_err(|e| format!("open the terminal: {e}"))?;
            nix::unistd::dup2_stdin(&ctty)
                .and_then(|()| nix::unistd::dup2_stdout(&ctty))
                .and_then(|()| nix::unistd::dup2_stderr(&ctty))
                .map_err(|e| format!("dup2: {e}"))?;
            f(&ctty)
        })()
        .unwrap_or_else(|e| format!("FAILED {e}"));
        let _ = std::fs::File::from(w).write_all(report.as_bytes());
        exit_for_tests(0)
    }
    drop(w);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::fs::File::from(r).read_to_string(&mut out);
        let _ = tx.send(out);
    });
    let Ok(out) = rx.recv_timeout(Duration::from_secs(120)) else {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        panic!("the launcher timed out");
    };
    assert_eq!(wait_for_tests(pid), 0, "launcher: {out}");
    out
}

/// Read the real terminal's output until `done` holds (or 60 s passed).
fn read_until(master: &OwnedFd, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !done(&String::from_utf8_lossy(&out)) && Instant::now() < deadline {
        let mut fds = [PollFd::new(master.as_fd(), PollFlags::POLLIN)];
        if matches!(poll(&mut fds, PollTimeout::from(100u16)), Ok(n) if n > 0) {
            match nix::unistd::read(master.as_fd(), &mut buf) {
                Ok(n) if n > 0 => out.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The probe's answer starting with `prefix`, up to the end of its line.
fn answer(out: &str, prefix: &str) -> Option<String> {
    let at = out.find(prefix)?;
    let rest = &out[at..];
    let end = rest.find('\n')?;
    Some(rest[..end].trim_end_matches('\r').to_owned())
}

fn answered(prefix: &'static str) -> impl Fn(&str) -> bool {
    move |s| answer(s, prefix).is_some()
}

/// The launcher's threads (it is a forked copy of the test: one thread,
/// plus the relay's while one runs).
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}

/// Until `f` holds, or 20 s passed.
fn wait_for(f: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

fn is_raw(tty: &std::fs::File) -> bool {
    termios::tcgetattr(tty).is_ok_and(|t| !t.local_flags.contains(LocalFlags::ICANON))
}

/// Put the launcher in the background: a job of its session (a sleeper in
/// a process group of its own) becomes the terminal's foreground group.
fn background(ctty: &std::fs::File) -> Result<std::process::Child, String> {
    let sleeper = std::process::Command::new("/bin/sleep")
        .arg("60")
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("sleeper: {e}"))?;
    let pgrp = nix::unistd::Pid::from_raw(i32::try_from(sleeper.id()).unwrap_or(0));
    nix::unistd::tcsetpgrp(ctty, pgrp).map_err(|e| format!("tcsetpgrp: {e}"))?;
    Ok(sleeper)
}

#[test]
fn worker_gets_its_own_terminal_never_the_real_one() {
    if skip_unless_root() {
        return;
    }
    let t = term();
    // Control: the probe outside, on the real terminal, sees it.
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&t.path)
        .unwrap();
    let out = std::process::Command::new(PROBE)
        .arg("ttys")
        .stdin(slave)
        .output()
        .unwrap();
    let control = String::from_utf8_lossy(&out.stdout).trim_end().to_owned();
    assert!(
        control.starts_with("ok tty=true size=33x111 ")
            && control.contains(&format!("0:{}", t.rdev)),
        "control: {control} (rdev {})",
        t.rdev
    );

    let report = in_session(&t, |_| {
        // The worker stays (holding its pty, so the relay runs on) until
        // killed.
        let script = format!("{PROBE} ttys; exec /bin/sleep 60");
        let child = sandbox()
            .spawn(Command::new(["/bin/sh", "-c", &script]))
            .map_err(|e| format!("spawn: {e}"))?;
        let out = read_until(&t.master, answered("ok tty="));
        let relays = threads();
        drop(child);
        Ok(format!(
            "threads={relays} {}",
            answer(&out, "ok tty=").unwrap_or(out)
        ))
    });
    assert!(report.contains(" ok tty=true "), "{report}");
    let fds = report.split("fds=").nth(1).unwrap_or_default();
    let devices: Vec<(&str, u64)> = fds
        .split(',')
        .filter_map(|e| e.split_once(':'))
        .map(|(fd, rdev)| (fd, rdev.parse().unwrap()))
        .collect();
    let fd0 = devices.iter().find(|(fd, _)| *fd == "0");
    assert!(
        fd0.is_some_and(|(_, rdev)| *rdev != t.rdev),
        "fd 0 is not a different tty: {report} (real terminal {})",
        t.rdev
    );
    assert!(
        devices.iter().all(|(_, rdev)| *rdev != t.rdev),
        "the worker holds the real terminal: {report} (real terminal {})",
        t.rdev
    );
    // The size came along; the relay is the launcher's one extra thread.
    assert!(
        report.starts_with("threads=2 ok tty=true size=33x111 fds="),
        "{report}"
    );
}

#[test]
fn keystrokes_reach_a_foreground_worker_in_raw_mode_restored_afterwards() {
    if skip_unless_root() {
        return;
    }
    let t = term();
    let report = in_session(&t, |ctty| {
        let before = termios::tcgetattr(ctty).map_err(|e| format!("tcgetattr: {e}"))?;
        let cooked = before.local_flags.contains(LocalFlags::ICANON);
        let child = sandbox()
            .spawn(Command::new([PROBE, "read-input", "30"]))
            .map_err(|e| format!("spawn: {e}"))?;
        let raw = wait_for(|| is_raw(ctty));
        nix::unistd::write(&t.master, b"hello\n").map_err(|e| format!("write: {e}"))?;
        let out = read_until(&t.master, answered("ok "));
        let code = child
            .wait()
            .map(|e| e.code())
            .map_err(|e| format!("wait: {e}"))?;
        let after = termios::tcgetattr(ctty).map_err(|e| format!("tcgetattr: {e}"))?;
        let restored = after.local_flags == before.local_flags
            && after.input_flags == before.input_flags
            && after.output_flags == before.output_flags;
        // Ctrl-D: end of input for the worker, as on a terminal of its own.
        let child = sandbox()
            .spawn(Command::new([PROBE, "read-input", "30"]))
            .map_err(|e| format!("spawn: {e}"))?;
        let raw_eof = wait_for(|| is_raw(ctty));
        nix::unistd::write(&t.master, b"\x04").map_err(|e| format!("write: {e}"))?;
        let eof = read_until(&t.master, answered("ok "));
        let eof_code = child
            .wait()
            .map(|e| e.code())
            .map_err(|e| format!("wait: {e}"))?;
        let eof = answer(&eof, "ok ").unwrap_or(eof);
        // A worker killed mid-read (the child dropped): restored as well.
        let child = sandbox()
            .spawn(Command::new([PROBE, "read-input", "30"]))
            .map_err(|e| format!("spawn: {e}"))?;
        let raw_again = wait_for(|| is_raw(ctty));
        drop(child);
        let after = termios::tcgetattr(ctty).map_err(|e| format!("tcgetattr: {e}"))?;
        let restored_killed = after.local_flags == before.local_flags;
        Ok(format!(
            "cooked={cooked} raw={raw} code={code} restored={restored} raw_again={raw_again} \
             restored_killed={restored_killed} {} | eof: raw={raw_eof} code={eof_code} {eof:?}",
            answer(&out, "ok ").unwrap_or(out)
        ))
    });
    assert_eq!(
        report,
        "cooked=true raw=true code=0 restored=true raw_again=true restored_killed=true \
         ok got hello\\n | eof: raw=true code=0 \"ok got \""
    );
}

#[test]
fn a_background_launcher_leaves_keystrokes_to_the_foreground_job() {
    if skip_unless_root() {
        return;
    }
    let t = term();
    let report = in_session(&t, |ctty| {
        let mut sleeper = background(ctty)?;
        let fg = i32::try_from(sleeper.id()).unwrap_or(0);
        // The worker waits 3 s for input, with the relay running, then
        // stays (holding its pty, so the relay runs on) until killed.
        let script = format!("{PROBE} read-input 3; exec /bin/sleep 60");
        let child = sandbox()
            .spawn(Command::new(["/bin/sh", "-c", &script]))
            .map_err(|e| format!("spawn: {e}"))?;
        nix::unistd::write(&t.master, b"hello\n").map_err(|e| format!("write: {e}"))?;
        let out = read_until(&t.master, answered("ok "));
        // The relay leaves the terminal's modes to the foreground job.
        let raw = is_raw(ctty);
        let pending = pending_input_for_tests(ctty.as_fd());
        drop(child);
        // The foreground job reads them.
        let reader = std::process::Command::new(PROBE)
            .args(["read-input", "10"])
            .stdin(ctty.try_clone().map_err(|e| format!("dup: {e}"))?)
            .process_group(fg)
            .output()
            .map_err(|e| format!("reader: {e}"))?;
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        Ok(format!(
            "pending={pending} raw={raw} worker={} reader={}",
            answer(&out, "ok ").unwrap_or(out),
            String::from_utf8_lossy(&reader.stdout).trim_end()
        ))
    });
    assert_eq!(
        report,
        "pending=6 raw=false worker=ok none reader=ok got hello\\n"
    );
}

#[test]
fn a_launcher_brought_back_to_the_foreground_relays_again() {
    if skip_unless_root() {
        return;
    }
    let t = term();
    let report = in_session(&t, |ctty| {
        let mut sleeper = background(ctty)?;
        let child = sandbox()
            .spawn(Command::new([PROBE, "read-input", "30"]))
            .map_err(|e| format!("spawn: {e}"))?;
        // `fg`: the launcher's group takes the terminal back.
        nix::unistd::tcsetpgrp(ctty, nix::unistd::getpgrp())
            .map_err(|e| format!("tcsetpgrp: {e}"))?;
        let raw = wait_for(|| is_raw(ctty));
        nix::unistd::write(&t.master, b"again\n").map_err(|e| format!("write: {e}"))?;
        let out = read_until(&t.master, answered("ok "));
        let code = child
            .wait()
            .map(|e| e.code())
            .map_err(|e| format!("wait: {e}"))?;
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        Ok(format!(
            "raw={raw} code={code} {}",
            answer(&out, "ok ").unwrap_or(out)
        ))
    });
    assert_eq!(report, "raw=true code=0 ok got again\\n");
}

#[test]
fn tiocsti_from_the_worker_stays_in_its_own_terminal() {
    if skip_unless_root() {
        return;
    }
    let t = term();
    let report = in_session(&t, |ctty| {
        // Raw, so that the input queue counts every byte; the launcher in
        // the background, so that the relay leaves the queue alone.
        let mut modes = termios::tcgetattr(ctty).map_err(|e| format!("tcgetattr: {e}"))?;
        termios::cfmakeraw(&mut modes);
        termios::tcsetattr(ctty, SetArg::TCSANOW, &modes).map_err(|e| format!("raw: {e}"))?;
        let mut sleeper = background(ctty)?;
        let fg = i32::try_from(sleeper.id()).unwrap_or(0);
        // Control: TIOCSTI from a process of the session lands in the real
        // terminal's queue.
        let control = std::process::Command::new(PROBE)
            .arg("tiocsti")
            .stdin(ctty.try_clone().map_err(|e| format!("dup: {e}"))?)
            .process_group(fg)
            .output()
            .map_err(|e| format!("control: {e}"))?;
        let control_pending = pending_input_for_tests(ctty.as_fd());
        termios::tcflush(ctty, termios::FlushArg::TCIFLUSH).map_err(|e| format!("flush: {e}"))?;
        let flushed = pending_input_for_tests(ctty.as_fd());
        // Seccomp refuses TIOCSTI anyway: without it, only the pty confines.
        let mut sb = sandbox();
        sb.dangerous()
            .disable(Layer::Seccomp)
            .map_err(|e| format!("{e}"))?;
        let child = sb
            .spawn(Command::new([PROBE, "tiocsti-readback"]))
            .map_err(|e| format!("spawn: {e}"))?;
        let out = read_until(&t.master, |s| s.contains('\n'));
        let code = child
            .wait()
            .map(|e| e.code())
            .map_err(|e| format!("wait: {e}"))?;
        let pending = pending_input_for_tests(ctty.as_fd());
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        Ok(format!(
            "control={} control_pending={control_pending} flushed={flushed} code={code} \
             pending={pending} master={:?}",
            String::from_utf8_lossy(&control.stdout).trim_end(),
            out.trim_end()
        ))
    });
    // The worker read its own injected byte back; nothing reached the real
    // terminal's queue, and its output side saw only the answer.
    assert_eq!(
        report,
        "control=ok control_pending=1 flushed=0 code=0 pending=0 master=\"ok x\""
    );
}

#[test]
fn a_new_window_size_reaches_the_worker() {
    if skip_unless_root() {
        return;
    }
    let t = term();
    let report = in_session(&t, |_| {
        // As `palisade run` does: SIGWINCH blocked before the launch, read
        // by `wait_forwarding`.
        let mut winch = nix::sys::signal::SigSet::empty();
        winch.add(nix::sys::signal::Signal::SIGWINCH);
        winch.thread_block().map_err(|e| format!("block: {e}"))?;
        let mut child = sandbox()
            .spawn(Command::new([PROBE, "winch", "30"]))
            .map_err(|e| format!("spawn: {e}"))?;
        let master = t.master.try_clone().map_err(|e| format!("dup: {e}"))?;
        let path = t.path.clone();
        let user = std::thread::spawn(move || {
            let ready = read_until(&master, |s| s.contains("ready"));
            // The user resizes the terminal's window. One dimension only:
            // `stty rows R cols C` is two ioctls, so two SIGWINCHs, and the
            // worker may read the size between them (seen under load).
            let stty = std::fs::File::open(&path).and_then(|tty| {
                std::process::Command::new("stty")
                    .args(["cols", "100"])
                    .stdin(tty)
                    .status()
            });
            let out = read_until(&master, answered("ok "));
            format!(
                "ready={} stty={} {}",
                ready.contains("ready"),
                stty.is_ok_and(|s| s.success()),
                answer(&out, "ok ").unwrap_or(out)
            )
        });
        let code = child
            .wait_forwarding(&[palisade_isolate::Signal::WINCH])
            .map(|e| e.code())
            .map_err(|e| format!("wait: {e}"))?;
        child.detach();
        let seen = user.join().map_err(|_| String::from("user thread"))?;
        Ok(format!("code={code} {seen}"))
    });
    assert_eq!(report, "code=0 ready=true stty=true ok 33x100");
}

#[test]
fn no_terminal_no_pty_and_no_relay() {
    if skip_unless_root() {
        return;
    }
    let t = term();
    let report = in_session(&t, |_| {
        let (r, w) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
        let mut cmd = Command::new([PROBE, "ttys"]);
        cmd.stdin = Stdio::Null;
        cmd.stdout = Stdio::Fd(w);
        cmd.stderr = Stdio::Null;
        let child = sandbox().spawn(cmd).map_err(|e| format!("spawn: {e}"))?;
        let relays = threads();
        let mut out = String::new();
        std::fs::File::from(r)
            .read_to_string(&mut out)
            .map_err(|e| format!("read: {e}"))?;
        let code = child
            .wait()
            .map(|e| e.code())
            .map_err(|e| format!("wait: {e}"))?;
        Ok(format!("code={code} threads={relays} {}", out.trim_end()))
    });
    // fd 0 is /dev/null (1:3), the only character device; no window size.
    assert_eq!(
        report,
        "code=0 threads=1 ok tty=false size=err25 fds=0:259,2:259"
    );
}
