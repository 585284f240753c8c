//! The worker's own pseudo-terminal, relayed from the launcher's terminal.
//!
//! After `setsid` the worker is out of the terminal's job control: were it
//! handed the user's terminal, it would keep reading keystrokes after
//! `palisade run … &` put palisade in the background, and it could change
//! the terminal's modes, line discipline or window size. So when any of the
//! worker's descriptors 0–2 would be a terminal, the launcher allocates a
//! pty pair instead (`/dev/ptmx`, `TIOCGPTPEER`): the slave replaces those
//! of fds 0–2 that were terminals and becomes the worker's controlling
//! terminal (`TIOCSCTTY` after `setsid`), so `TIOCSTI` and line-discipline
//! tricks reach only the worker's own pty; the real terminal's descriptor
//! never enters the sandbox.
//!
//! A relay thread in the launcher copies the worker's output to the real
//! terminal always, and keystrokes to the worker only while the launcher's
//! process group is the terminal's foreground group (checked before every
//! read; with SIGTTIN and SIGTTOU blocked in the thread, a read that loses
//! the race fails with `EIO` instead of stopping palisade). While it relays
//! input the real terminal is in raw mode (the worker's pty does the line
//! discipline), restored when the relay ends: the worker's status is known,
//! the child is dropped (the worker is killed), or the pty hangs up. The
//! slave starts with the real terminal's modes and window size;
//! [`TerminalResize::resize`] copies the size again on SIGWINCH.
//!
//! When no descriptor is a terminal nothing here runs: no pty, no thread.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::thread::JoinHandle;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::termios::{self, SetArg, Termios};

use crate::error::{SandboxError, Step};
use crate::spawn::Stdio;
use crate::sys;

/// How many bytes each direction buffers before it stops reading.
const CAP: usize = 16 * 1024;

/// Call `f` with the launcher's own descriptor `target` (0, 1 or 2).
fn inherited<R>(target: usize, f: impl FnOnce(BorrowedFd<'_>) -> R) -> R {
    match target {
        0 => f(std::io::stdin().as_fd()),
        1 => f(std::io::stdout().as_fd()),
        _ => f(std::io::stderr().as_fd()),
    }
}

fn is_terminal(stdio: &Stdio, target: usize) -> bool {
    match stdio {
        Stdio::Inherit => inherited(target, |fd| nix::unistd::isatty(fd).unwrap_or(false)),
        Stdio::Fd(fd) => nix::unistd::isatty(fd).unwrap_or(false),
        Stdio::Null | Stdio::Piped => false,
    }
}

fn setup_error(errno: i32, detail: &str) -> SandboxError {
    SandboxError::Setup {
        step: Step::Session,
        errno,
        detail: format!("the worker's terminal: {detail}"),
    }
}

/// A pty pair allocated for a launch, before its relay starts.
#[derive(Debug)]
pub(crate) struct Prepared {
    master: OwnedFd,
    /// The real terminal keystrokes are read from (fd 0 was a terminal).
    input: Option<OwnedFd>,
    /// The real terminal the worker's output is written to.
    output: OwnedFd,
    /// The first of fds 0–2 that is the slave: made the controlling
    /// terminal in the worker.
    ctty: i32,
}

/// When any of `stdio` is a terminal, allocate the worker's pty: each
/// terminal entry is replaced by the slave and its real descriptor kept for
/// the relay. `None` (and `stdio` untouched) when none is a terminal.
pub(crate) fn prepare(stdio: [&mut Stdio; 3]) -> Result<Option<Prepared>, SandboxError> {
    let ttys: Vec<bool> = stdio
        .iter()
        .enumerate()
        .map(|(t, s)| is_terminal(s, t))
        .collect();
    let Some(ctty) = ttys.iter().position(|t| *t) else {
        return Ok(None);
    };
    let master = nix::fcntl::open(
        "/dev/ptmx",
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| setup_error(e as i32, "open /dev/ptmx"))?;
    sys::pty_unlock(master.as_raw_fd()).map_err(|e| setup_error(e, "unlock the pty"))?;
    let slave = sys::pty_peer(
        master.as_raw_fd(),
        libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
    )
    .map_err(|e| setup_error(e, "open the pty slave"))?;
    let mut real: [Option<OwnedFd>; 3] = [None, None, None];
    for ((target, s), slot) in stdio.into_iter().enumerate().zip(real.iter_mut()) {
        if !ttys.get(target).copied().unwrap_or(false) {
            continue;
        }
        let mine = slave
            .try_clone()
            .map_err(|e| setup_error(e.raw_os_error().unwrap_or(libc::EIO), "dup the slave"))?;
        *slot = match std::mem::replace(s, Stdio::Fd(mine)) {
            Stdio::Fd(fd) => Some(fd),
            _ => Some(
                inherited(target, |fd| fd.try_clone_to_owned()).map_err(|e| {
                    setup_error(e.raw_os_error().unwrap_or(libc::EIO), "dup the terminal")
                })?,
            ),
        };
    }
    let [r0, r1, r2] = real;
    // Output to the terminal of fd 1, else fd 2, else fd 0 (a terminal
    // descriptor is normally open for reading and writing).
    let (input, output) = match (r0, r1.or(r2)) {
        (input, Some(out)) => (input, out),
        (Some(input), None) => {
            let out = input.try_clone().map_err(|e| {
                setup_error(e.raw_os_error().unwrap_or(libc::EIO), "dup the terminal")
            })?;
            (Some(input), out)
        }
        (None, None) => return Err(setup_error(libc::ENOTTY, "no terminal left")),
    };
    // The worker starts with the user's modes and window size. Cosmetic:
    // a terminal that refuses (hung up) leaves the pty's defaults.
    let source = input.as_ref().unwrap_or(&output);
    if let Ok(modes) = termios::tcgetattr(source) {
        let _ = termios::tcsetattr(&slave, SetArg::TCSANOW, &modes);
    }
    if let Ok(ws) = sys::window_size(source.as_raw_fd()) {
        let _ = sys::set_window_size(master.as_raw_fd(), &ws);
    }
    Ok(Some(Prepared {
        master,
        input,
        output,
        ctty: i32::try_from(ctty).unwrap_or(0),
    }))
}

impl Prepared {
    /// The descriptor (0, 1 or 2) the worker makes its controlling terminal.
    pub(crate) fn ctty(&self) -> i32 {
        self.ctty
    }

    /// Start the relay thread.
    pub(crate) fn start(self) -> Result<Relay, SandboxError> {
        fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> SandboxError {
            move |e| setup_error(e.raw_os_error().unwrap_or(libc::EIO), what)
        }
        let (stop_r, stop_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)
            .map_err(|e| setup_error(e as i32, "relay stop pipe"))?;
        let stop_keep = stop_r.try_clone().map_err(io("relay stop pipe"))?;
        let master = Arc::new(self.master);
        let size_from = Arc::new(self.output);
        let size = TerminalResize {
            master: Arc::clone(&master),
            from: Arc::clone(&size_from),
        };
        let (m, out, input) = (master, size_from, self.input);
        let thread = std::thread::Builder::new()
            .name(String::from("palisade-pty"))
            .spawn(move || relay(&m, input.as_ref(), &out, &stop_r))
            .map_err(io("relay thread"))?;
        Ok(Relay {
            size,
            stop_w,
            _stop_r: stop_keep,
            thread: Some(thread),
        })
    }
}

/// The running relay between the real terminal and the worker's pty.
/// Dropping it stops the relay once the worker's output has drained (at
/// most 100 ms of silence) and restores the real terminal's modes.
#[derive(Debug)]
pub(crate) struct Relay {
    size: TerminalResize,
    stop_w: OwnedFd,
    /// Kept open so that a stop written after the thread ended never meets
    /// a closed pipe (no SIGPIPE).
    _stop_r: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    /// The handle that copies the real terminal's window size.
    pub(crate) fn resizer(&self) -> &TerminalResize {
        &self.size
    }
}

/// Copies the launcher's terminal's window size to the worker's own pty:
/// call [`TerminalResize::resize`] on SIGWINCH
/// ([`crate::SandboxChild::wait_forwarding`] does when SIGWINCH is among
/// its signals). Obtained from [`crate::SandboxChild::terminal_resize`].
#[derive(Debug, Clone)]
pub struct TerminalResize {
    master: Arc<OwnedFd>,
    from: Arc<OwnedFd>,
}

impl TerminalResize {
    /// Copy the real terminal's window size to the worker's pty (the
    /// kernel then sends SIGWINCH to the pty's foreground group). A
    /// terminal that refuses (hung up) changes nothing.
    pub fn resize(&self) {
        if let Ok(ws) = sys::window_size(self.from.as_raw_fd()) {
            let _ = sys::set_window_size(self.master.as_raw_fd(), &ws);
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = nix::unistd::write(&self.stop_w, b"s");
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether the launcher may read keystrokes from `tty` now: its process
/// group is the terminal's foreground group. A terminal that is not the
/// launcher's controlling terminal has no job control for it (`ENOTTY`):
/// reading it is what the caller handed it over for.
fn foreground(tty: &OwnedFd) -> bool {
    match nix::unistd::tcgetpgrp(tty) {
        Ok(pgrp) => pgrp == nix::unistd::getpgrp(),
        Err(Errno::ENOTTY) => true,
        Err(_) => false,
    }
}

/// The real terminal's modes while the relay has it in raw mode; restores
/// them when dropped (every way out of [`relay`], a panic included).
struct RawMode<'a> {
    tty: &'a OwnedFd,
    saved: Option<Termios>,
}

impl RawMode<'_> {
    fn enter(&mut self) {
        if self.saved.is_some() {
            return;
        }
        let Ok(saved) = termios::tcgetattr(self.tty) else {
            return;
        };
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        if termios::tcsetattr(self.tty, SetArg::TCSANOW, &raw).is_ok() {
            self.saved = Some(saved);
        }
    }
}

impl Drop for RawMode<'_> {
    fn drop(&mut self) {
        if let Some(saved) = self.saved.take() {
            let _ = termios::tcsetattr(self.tty, SetArg::TCSANOW, &saved);
        }
    }
}

fn ready(fd: Option<&PollFd<'_>>, flags: PollFlags) -> bool {
    fd.and_then(PollFd::revents)
        .is_some_and(|r| r.intersects(flags))
}

/// The relay loop (its own thread).
fn relay(master: &OwnedFd, input: Option<&OwnedFd>, output: &OwnedFd, stop: &OwnedFd) {
    // Background reads fail with EIO and background writes and mode
    // changes go through, instead of stopping palisade.
    let mut tty_signals = SigSet::empty();
    tty_signals.add(Signal::SIGTTIN);
    tty_signals.add(Signal::SIGTTOU);
    let _ = tty_signals.thread_block();
    // The master is ours alone: non-blocking, so a worker that does not
    // read its input never blocks the relay.
    if nix::fcntl::fcntl(master, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).is_err() {
        return;
    }
    let mut raw = RawMode {
        tty: input.unwrap_or(output),
        saved: None,
    };
    let mut to_worker: Vec<u8> = Vec::new();
    let mut to_user: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; CAP];
    let mut input_open = input.is_some();
    let mut master_open = true;
    let mut output_open = true;
    let mut stopping = false;
    loop {
        let fg = input_open && !stopping && input.is_some_and(foreground);
        if fg {
            raw.enter();
        }
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(4);
        let mut master_events = PollFlags::empty();
        if to_user.len() < CAP {
            master_events |= PollFlags::POLLIN;
        }
        if !to_worker.is_empty() {
            master_events |= PollFlags::POLLOUT;
        }
        let at_master = master_open.then(|| {
            fds.push(PollFd::new(master.as_fd(), master_events));
            fds.len() - 1
        });
        let at_input = match input {
            Some(i) if fg && to_worker.len() < CAP => {
                fds.push(PollFd::new(i.as_fd(), PollFlags::POLLIN));
                Some(fds.len() - 1)
            }
            _ => None,
        };
        let at_output = (output_open && !to_user.is_empty()).then(|| {
            fds.push(PollFd::new(output.as_fd(), PollFlags::POLLOUT));
            fds.len() - 1
        });
        let at_stop = (!stopping).then(|| {
            fds.push(PollFd::new(stop.as_fd(), PollFlags::POLLIN));
            fds.len() - 1
        });
        // In the background, look again for the foreground now and then;
        // once stopping, 100 ms of silence ends the relay.
        let timeout = if stopping {
            PollTimeout::from(100u16)
        } else if input_open && !fg {
            PollTimeout::from(250u16)
        } else {
            PollTimeout::NONE
        };
        match poll(&mut fds, timeout) {
            Ok(0) if stopping => break,
            Ok(_) => {}
            Err(Errno::EINTR | Errno::EAGAIN) => continue,
            Err(_) => break,
        }
        let any = PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR;
        let m_in = ready(at_master.and_then(|i| fds.get(i)), any);
        let m_out = ready(at_master.and_then(|i| fds.get(i)), PollFlags::POLLOUT);
        let i_in = ready(at_input.and_then(|i| fds.get(i)), any);
        let o_out = ready(
            at_output.and_then(|i| fds.get(i)),
            PollFlags::POLLOUT | PollFlags::POLLHUP | PollFlags::POLLERR,
        );
        let s_in = ready(at_stop.and_then(|i| fds.get(i)), any);
        drop(fds);
        if s_in {
            stopping = true;
        }
        if m_in {
            let room = CAP.saturating_sub(to_user.len()).max(1);
            match nix::unistd::read(master, buf.get_mut(..room).unwrap_or(&mut [])) {
                // End-of-file or EIO: no process holds the slave any more.
                Ok(0) | Err(Errno::EIO) => master_open = false,
                Ok(n) if output_open => to_user.extend_from_slice(buf.get(..n).unwrap_or(&[])),
                Ok(_) | Err(Errno::EAGAIN | Errno::EINTR) => {}
                Err(_) => master_open = false,
            }
        }
        if m_out {
            match nix::unistd::write(master, &to_worker) {
                Ok(n) => {
                    to_worker.drain(..n.min(to_worker.len()));
                }
                Err(Errno::EAGAIN | Errno::EINTR) => {}
                Err(_) => to_worker.clear(),
            }
        }
        if !master_open {
            to_worker.clear();
        }
        // Check again right before the read: the foreground may have moved
        // since the poll began.
        if i_in
            && let Some(i) = input
            && foreground(i)
        {
            let room = CAP.saturating_sub(to_worker.len()).max(1);
            match nix::unistd::read(i, buf.get_mut(..room).unwrap_or(&mut [])) {
                Ok(0) => input_open = false,
                Ok(n) => to_worker.extend_from_slice(buf.get(..n).unwrap_or(&[])),
                Err(Errno::EAGAIN | Errno::EINTR) => {}
                // Lost the race to the background (SIGTTIN is blocked).
                Err(Errno::EIO) if !foreground(i) => {}
                Err(_) => input_open = false,
            }
        }
        if o_out {
            let chunk = to_user.len().min(4096);
            match nix::unistd::write(output, to_user.get(..chunk).unwrap_or(&[])) {
                Ok(n) => {
                    to_user.drain(..n.min(to_user.len()));
                }
                Err(Errno::EAGAIN | Errno::EINTR) => {}
                Err(_) => {
                    output_open = false;
                    to_user.clear();
                }
            }
        }
        if !master_open && (to_user.is_empty() || !output_open) {
            break;
        }
    }
}
