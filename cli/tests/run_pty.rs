//! `palisade run` on a terminal end to end: the worker runs on a pty of
//! its own, the exit status passes through, a new window size reaches the
//! worker (palisade forwards SIGWINCH as a resize), and the terminal's modes
//! are restored when palisade exits.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::termios::{self, LocalFlags};

const BIN: &str = env!("CARGO_BIN_EXE_palisade");

fn is_root() -> bool {
    nix::unistd::getuid().is_root()
}

/// Read the terminal's output until it contains `want` (or 60 s passed).
fn read_until(master: &OwnedFd, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&out).contains(want) && Instant::now() < deadline {
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

#[test]
fn a_terminal_run_gets_its_own_pty_resized_and_restored() {
    if !is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the sandbox tests as root"
        );
        eprintln!("skipped: needs root (CI runs as root)");
        return;
    }
    let ws = nix::pty::Winsize {
        ws_row: 33,
        ws_col: 111,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pair = nix::pty::openpty(&ws, None).unwrap();
    let path = nix::unistd::ttyname(&pair.slave).unwrap();
    let before = termios::tcgetattr(&pair.slave).unwrap();
    assert!(before.local_flags.contains(LocalFlags::ICANON));
    let cwd = tempfile::tempdir().unwrap();
    // The worker reports its size, waits for SIGWINCH, reports again.
    let script = "stty size; trap 'stty size; exit 7' WINCH; echo ready; \
                  i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done";
    let tty = || {
        std::fs::File::options()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap()
    };
    // `setsid -c`: palisade leads a session whose controlling terminal is
    // the pty, as under a shell.
    let mut palisade = std::process::Command::new("setsid")
        .args(["-c", "-w", BIN, "run", "--profile", "governed", "--"])
        .args(["/bin/sh", "-c", script])
        .current_dir(cwd.path())
        .stdin(tty())
        .stdout(tty())
        .stderr(tty())
        .spawn()
        .unwrap();
    let first = read_until(&pair.master, "ready");
    let raw =
        termios::tcgetattr(&pair.slave).is_ok_and(|t| !t.local_flags.contains(LocalFlags::ICANON));
    // The user resizes the window.
    let stty = std::process::Command::new("stty")
        .args(["rows", "40", "cols", "100"])
        .stdin(tty())
        .status()
        .unwrap();
    assert!(stty.success());
    let second = read_until(&pair.master, "40 100");
    let deadline = Instant::now() + Duration::from_secs(60);
    let code = loop {
        if let Some(s) = palisade.try_wait().unwrap() {
            break s.code();
        }
        assert!(Instant::now() < deadline, "palisade did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    let after = termios::tcgetattr(&pair.slave).unwrap();
    assert!(first.contains("33 111"), "initial size: {first:?}");
    assert!(raw, "the terminal is in raw mode while relaying");
    assert!(second.contains("40 100"), "new size: {second:?}");
    assert_eq!(code, Some(7), "{first:?} {second:?}");
    assert_eq!(after.local_flags, before.local_flags, "modes restored");
    assert_eq!(after.input_flags, before.input_flags, "modes restored");
    assert_eq!(after.output_flags, before.output_flags, "modes restored");
}
