//! The sandbox's init (PID 1 of its PID namespace) and the supervisor.
//!
//! Init reaps every orphan, forwards the usual termination signals to the
//! worker, leaves with the worker's status (`128 + signal` when it was
//! killed) after writing how it ended (an [`Exit`] record, which alone
//! tells a wall-limit kill from any other `SIGKILL`) to the supervisor, and
//! runs the network bridges: it accepts TCP connections on
//! loopback inside the network namespace and forwards each to the host
//! Unix socket reached through a directory descriptor opened before
//! `pivot_root`. Init is not dumpable, runs under a uid the worker cannot
//! ptrace, and takes no input but the bridge bytes it copies.

use std::ffi::OsString;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::exit::Exit;

/// A bridge listener inside the sandbox.
#[derive(Debug)]
pub(crate) struct BridgeListener {
    pub(crate) listener: TcpListener,
    pub(crate) dir: OwnedFd,
    pub(crate) name: OsString,
}

/// What init (or the supervisor) leaves with when `waitpid` fails.
const LOST: Exit = Exit::Exited(125);

/// The supervisor loop: forward signals to init, return how init ended.
///
/// End-of-file on `stop` (the launcher dropped its handle, or died) kills
/// init, and with it every process of its PID namespace: init's exit waits
/// for them all, so once it is reaped here nothing of the sandbox runs.
pub(crate) fn supervise(init: Pid, mask: &SigSet, stop: &OwnedFd) -> Exit {
    let Ok(sfd) = SignalFd::with_flags(mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK) else {
        return wait_blocking(init);
    };
    let mut stopping = false;
    loop {
        match waitpid(init, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {}
            Ok(st) => {
                if let Some(e) = Exit::from_wait(st) {
                    return e;
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return LOST,
        }
        let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
        if !stopping {
            fds.push(PollFd::new(stop.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return wait_blocking(init),
        }
        let stop_now = fds
            .get(1)
            .and_then(PollFd::revents)
            .is_some_and(|r| !r.is_empty());
        drop(fds);
        if stop_now {
            stopping = true;
            let _ = nix::sys::signal::kill(init, Signal::SIGKILL);
        }
        while let Ok(Some(info)) = sfd.read_signal() {
            let sig = i32::try_from(info.ssi_signo).unwrap_or(0);
            if sig != libc::SIGCHLD
                && let Ok(s) = Signal::try_from(sig)
            {
                let _ = nix::sys::signal::kill(init, s);
            }
        }
    }
}

fn wait_blocking(pid: Pid) -> Exit {
    loop {
        match waitpid(pid, None) {
            Ok(st) => {
                if let Some(e) = Exit::from_wait(st) {
                    return e;
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return LOST,
        }
    }
}

/// The command line init shows in `/proc/1/cmdline` instead of the
/// launcher's.
const INIT_TITLE: &[u8] = b"palisade-init";

/// Largest argument or environment area overwritten (the kernel caps both
/// together at a quarter of the stack limit; this is far above the usual).
const SCRUB_MAX: u64 = 256 << 20;

/// The `arg_start arg_end env_start env_end` addresses of a
/// `/proc/<pid>/stat` line (fields 48 to 51, counted after the command name,
/// which may itself contain spaces or parentheses).
pub(crate) fn arg_env_areas(stat: &str) -> Option<[u64; 4]> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (the state).
    let mut f = rest.split_whitespace().skip(45);
    let mut out = [0u64; 4];
    for v in &mut out {
        *v = f.next()?.parse().ok()?;
    }
    Some(out)
}

/// Overwrite the launcher's command line and environment in this process's
/// memory. Init is a fork of the launcher and shares its argument and
/// environment areas, which `/proc/1/cmdline` shows to every process of the
/// sandbox (`palisade run --env NAME=VALUE …` with it). The areas are
/// rewritten through `/proc/self/mem` (no `unsafe`): the arguments become
/// [`INIT_TITLE`] padded with NULs, the environment NULs. Nothing in init
/// reads either afterwards; the worker's argv and environment were built
/// in the launcher's heap. Any failure is returned (the launch fails
/// closed rather than run with the launcher's command line visible).
pub(crate) fn scrub_launcher_args() -> Result<(), (i32, String)> {
    use std::os::unix::fs::FileExt;
    let fail =
        |e: std::io::Error, what: &str| (e.raw_os_error().unwrap_or(libc::EIO), what.to_owned());
    let stat =
        std::fs::read_to_string("/proc/self/stat").map_err(|e| fail(e, "read /proc/self/stat"))?;
    let [arg_start, arg_end, env_start, env_end] = arg_env_areas(&stat).ok_or((
        libc::EINVAL,
        String::from("parse the argument area of /proc/self/stat"),
    ))?;
    let mem = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/self/mem")
        .map_err(|e| fail(e, "open /proc/self/mem"))?;
    for (start, end, title) in [
        (arg_start, arg_end, INIT_TITLE),
        (env_start, env_end, &b""[..]),
    ] {
        let len = end.saturating_sub(start);
        if len == 0 {
            continue;
        }
        if len > SCRUB_MAX {
            return Err((
                libc::E2BIG,
                String::from("the launcher's argument area is too large to overwrite"),
            ));
        }
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
        // The title only where it fits with a NUL after it: the last byte
        // stays NUL, so the kernel reads the area as plain arguments.
        if title.len() < buf.len()
            && let Some(head) = buf.get_mut(..title.len())
        {
            head.copy_from_slice(title);
        }
        mem.write_all_at(&buf, start)
            .map_err(|e| fail(e, "overwrite the launcher's arguments and environment"))?;
    }
    Ok(())
}

/// One direction of a bridged connection.
struct Pipe {
    buf: Vec<u8>,
    eof: bool,
}

struct Conn {
    tcp: TcpStream,
    unix: UnixStream,
    up: Pipe,
    down: Pipe,
}

const BUF: usize = 64 * 1024;

fn connect_target(l: &BridgeListener) -> std::io::Result<UnixStream> {
    let path = format!(
        "/proc/self/fd/{}/{}",
        l.dir.as_raw_fd(),
        l.name.to_string_lossy()
    );
    UnixStream::connect(path)
}

/// Move bytes from `src` into `p`, then from `p` into `dst`; returns false
/// when the direction is finished.
fn pump(src: &mut impl Read, dst: &mut impl Write, p: &mut Pipe) -> bool {
    if !p.eof && p.buf.len() < BUF {
        let mut tmp = [0u8; BUF];
        match src.read(&mut tmp) {
            Ok(0) => p.eof = true,
            Ok(n) => p.buf.extend_from_slice(tmp.get(..n).unwrap_or(&[])),
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
            Err(_) => p.eof = true,
        }
    }
    if !p.buf.is_empty() {
        match dst.write(&p.buf) {
            Ok(n) => {
                p.buf.drain(..n.min(p.buf.len()));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                p.buf.clear();
                p.eof = true;
            }
        }
    }
    !(p.eof && p.buf.is_empty())
}

/// Init's loop. Returns how the worker ended once it has:
/// [`Exit::WallLimit`] when init killed it at the wall-clock limit and it
/// died of that `SIGKILL`.
pub(crate) fn run(
    worker: Pid,
    mask: &SigSet,
    listeners: Vec<BridgeListener>,
    wall_limit: Option<std::time::Duration>,
) -> Exit {
    // A limit too far away to be represented as an instant can never be
    // reached: no deadline (an overflowing `+` panicked init, and the
    // sandbox ended as if the worker had crashed).
    let deadline = wall_limit.and_then(|d| std::time::Instant::now().checked_add(d));
    let mut walled = false;
    let Ok(sfd) = SignalFd::with_flags(mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK) else {
        return wait_blocking(worker);
    };
    let mut conns: Vec<Conn> = Vec::new();
    loop {
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(1 + listeners.len() + 2 * conns.len());
        fds.push(PollFd::new(sfd.as_fd(), PollFlags::POLLIN));
        for l in &listeners {
            fds.push(PollFd::new(l.listener.as_fd(), PollFlags::POLLIN));
        }
        for c in &conns {
            let mut tf = PollFlags::empty();
            let mut uf = PollFlags::empty();
            if !c.up.eof && c.up.buf.len() < BUF {
                tf |= PollFlags::POLLIN;
            }
            if !c.down.buf.is_empty() {
                tf |= PollFlags::POLLOUT;
            }
            if !c.down.eof && c.down.buf.len() < BUF {
                uf |= PollFlags::POLLIN;
            }
            if !c.up.buf.is_empty() {
                uf |= PollFlags::POLLOUT;
            }
            fds.push(PollFd::new(c.tcp.as_fd(), tf));
            fds.push(PollFd::new(c.unix.as_fd(), uf));
        }
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(d) => {
                let left = d.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    // Over the wall-clock limit: kill the worker; it is
                    // reaped below like any other exit, and reported as
                    // the wall-limit kill it is.
                    let _ = nix::sys::signal::kill(worker, Signal::SIGKILL);
                    walled = true;
                    PollTimeout::from(100u16)
                } else {
                    let ms = u16::try_from(left.as_millis().min(60_000)).unwrap_or(60_000);
                    PollTimeout::from(ms.max(1))
                }
            }
        };
        let ready = poll(&mut fds, timeout);
        let listener_ready: Vec<bool> = fds
            .iter()
            .skip(1)
            .take(listeners.len())
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        if ready.is_err() {
            continue;
        }
        // Signals: reap, forward.
        while let Ok(Some(info)) = sfd.read_signal() {
            let sig = i32::try_from(info.ssi_signo).unwrap_or(0);
            if sig != libc::SIGCHLD
                && let Ok(s) = Signal::try_from(sig)
            {
                let _ = nix::sys::signal::kill(worker, s);
            }
        }
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(st) => {
                    if st.pid() == Some(worker)
                        && let Some(e) = Exit::from_wait(st)
                    {
                        // A worker that exited on its own just before the
                        // kill keeps its own status.
                        return match e {
                            Exit::Signaled(crate::exit::Signal::KILL) if walled => Exit::WallLimit,
                            other => other,
                        };
                    }
                }
            }
        }
        for (l, ready) in listeners.iter().zip(listener_ready) {
            if !ready {
                continue;
            }
            while let Ok((tcp, _)) = l.listener.accept() {
                let Ok(unix) = connect_target(l) else {
                    continue;
                };
                if tcp.set_nonblocking(true).is_err() || unix.set_nonblocking(true).is_err() {
                    continue;
                }
                conns.push(Conn {
                    tcp,
                    unix,
                    up: Pipe {
                        buf: Vec::new(),
                        eof: false,
                    },
                    down: Pipe {
                        buf: Vec::new(),
                        eof: false,
                    },
                });
            }
        }
        conns.retain_mut(|c| {
            let up = pump(&mut c.tcp, &mut c.unix, &mut c.up);
            if !up {
                let _ = c.unix.shutdown(std::net::Shutdown::Write);
            }
            let down = pump(&mut c.unix, &mut c.tcp, &mut c.down);
            if !down {
                let _ = c.tcp.shutdown(std::net::Shutdown::Write);
            }
            up || down
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argument_areas_are_read_after_the_command_name() {
        // A command name with spaces and a parenthesis, as a worker could
        // choose for itself; fields 48 to 51 follow it.
        let mut line = String::from("42 (a) b (c) S");
        for n in 4..=52 {
            line.push_str(&format!(" {n}"));
        }
        assert_eq!(arg_env_areas(&line), Some([48, 49, 50, 51]));
        assert_eq!(arg_env_areas("42 (x) S 1 2 3"), None);
        assert_eq!(arg_env_areas("no parenthesis"), None);
        // This process's own areas: the arguments come before the
        // environment, and neither is empty.
        let own = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let [a0, a1, e0, e1] = arg_env_areas(&own).unwrap_or_default();
        assert!(a0 < a1 && a1 <= e0 && e0 <= e1, "{own}");
    }
}
