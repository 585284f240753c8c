//! How a sandboxed worker ended ([`Exit`]) and the signals a launcher can
//! send it ([`Signal`]), plus the fixed-size status record that carries an
//! [`Exit`] from init to the supervisor and from the supervisor to the
//! launcher.

use std::fmt;

/// A signal number, checked to lie in the kernel's range (1 to 64).
///
/// The usual ones are associated constants (`Signal::TERM`,
/// `Signal::KILL`, …); [`Signal::from_raw`] accepts any other valid number
/// (real-time signals included).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Signal(i32);

impl Signal {
    /// `SIGHUP`.
    pub const HUP: Signal = Signal(libc::SIGHUP);
    /// `SIGINT`.
    pub const INT: Signal = Signal(libc::SIGINT);
    /// `SIGQUIT`.
    pub const QUIT: Signal = Signal(libc::SIGQUIT);
    /// `SIGABRT`.
    pub const ABRT: Signal = Signal(libc::SIGABRT);
    /// `SIGKILL`: cannot be caught; sent to a [`crate::SandboxChild`] it
    /// kills the supervisor, and with it the whole sandbox.
    pub const KILL: Signal = Signal(libc::SIGKILL);
    /// `SIGSEGV`.
    pub const SEGV: Signal = Signal(libc::SIGSEGV);
    /// `SIGPIPE`.
    pub const PIPE: Signal = Signal(libc::SIGPIPE);
    /// `SIGALRM`.
    pub const ALRM: Signal = Signal(libc::SIGALRM);
    /// `SIGTERM`.
    pub const TERM: Signal = Signal(libc::SIGTERM);
    /// `SIGUSR1`.
    pub const USR1: Signal = Signal(libc::SIGUSR1);
    /// `SIGUSR2`.
    pub const USR2: Signal = Signal(libc::SIGUSR2);
    /// `SIGXCPU` (the CPU-time rlimit).
    pub const XCPU: Signal = Signal(libc::SIGXCPU);
    /// `SIGXFSZ` (the file-size rlimit).
    pub const XFSZ: Signal = Signal(libc::SIGXFSZ);
    /// `SIGWINCH`.
    pub const WINCH: Signal = Signal(libc::SIGWINCH);

    /// The signal numbered `raw`, or `None` outside 1 to 64.
    pub fn from_raw(raw: i32) -> Option<Signal> {
        (1..=64).contains(&raw).then_some(Signal(raw))
    }

    /// The signal's number.
    pub fn as_raw(self) -> i32 {
        self.0
    }

    /// The conventional name (`SIGTERM`), when the signal has one.
    pub fn name(self) -> Option<&'static str> {
        nix::sys::signal::Signal::try_from(self.0)
            .ok()
            .map(nix::sys::signal::Signal::as_str)
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "signal {}", self.0),
        }
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// How the worker of a sandbox ended.
///
/// Unlike a shell's status, the variants keep apart what a number cannot:
/// a worker that exited with 137, one killed by a `SIGKILL` from anyone,
/// and one the sandbox's init killed because it overran its wall-clock
/// limit. [`Exit::code`] gives the shell's number when one is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exit {
    /// The worker exited with this status.
    Exited(i32),
    /// The worker was killed by this signal (or, when the supervisor
    /// itself was killed, e.g. by [`crate::SandboxChild::kill`] with
    /// [`Signal::KILL`], the signal that killed the supervisor).
    Signaled(Signal),
    /// The sandbox's init killed the worker because it ran longer than the
    /// profile's wall-clock limit ([`crate::Profile::limit_wall`]).
    WallLimit,
    /// The kernel's OOM killer ended the worker inside the sandbox's own
    /// memory cgroup (`[worker] limits.memory`): the worker died of
    /// `SIGKILL` and the cgroup's `oom_kill` counter (v2 `memory.events`,
    /// v1 `memory.oom_control`) is above zero. A worker the host's OOM
    /// killer ends outside such a cgroup shows as
    /// [`Exit::Signaled`]`(`[`Signal::KILL`]`)`, never guessed to be an OOM
    /// kill.
    OomKilled,
}

impl Exit {
    /// The shell's number for this ending: the exit status, or `128 +
    /// signal`; [`Exit::WallLimit`] and [`Exit::OomKilled`] are `137`
    /// (`128 + SIGKILL`, the signal they are carried out with).
    pub fn code(self) -> i32 {
        match self {
            Exit::Exited(c) => c,
            Exit::Signaled(s) => 128 + s.as_raw(),
            Exit::WallLimit | Exit::OomKilled => 128 + libc::SIGKILL,
        }
    }

    /// Whether the worker exited with status 0.
    pub fn success(self) -> bool {
        self == Exit::Exited(0)
    }

    /// The ending of a reaped process, or `None` for a stop or continue.
    pub(crate) fn from_wait(st: nix::sys::wait::WaitStatus) -> Option<Exit> {
        use nix::sys::wait::WaitStatus;
        match st {
            WaitStatus::Exited(_, c) => Some(Exit::Exited(c)),
            WaitStatus::Signaled(_, s, _) => Some(
                Signal::from_raw(s as i32).map_or(Exit::Exited(128 + s as i32), Exit::Signaled),
            ),
            _ => None,
        }
    }

    /// The 8-byte status record: a tag and a value, little-endian.
    pub(crate) fn encode(self) -> [u8; RECORD] {
        let (tag, value): (u32, i32) = match self {
            Exit::Exited(c) => (1, c),
            Exit::Signaled(s) => (2, s.as_raw()),
            Exit::WallLimit => (3, 0),
            Exit::OomKilled => (4, 0),
        };
        let [t0, t1, t2, t3] = tag.to_le_bytes();
        let [v0, v1, v2, v3] = value.to_le_bytes();
        [t0, t1, t2, t3, v0, v1, v2, v3]
    }

    /// Decode a status record; `None` for anything [`Exit::encode`] does not
    /// produce.
    pub(crate) fn decode(buf: &[u8]) -> Option<Exit> {
        let tag = u32::from_le_bytes(buf.get(..4)?.try_into().ok()?);
        let value = i32::from_le_bytes(buf.get(4..RECORD)?.try_into().ok()?);
        match (tag, value) {
            (1, c) if (0..=255).contains(&c) => Some(Exit::Exited(c)),
            (2, s) => Signal::from_raw(s).map(Exit::Signaled),
            (3, 0) => Some(Exit::WallLimit),
            (4, 0) => Some(Exit::OomKilled),
            _ => None,
        }
    }
}

/// The size of a status record.
pub(crate) const RECORD: usize = 8;

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Exited(c) => write!(f, "exited with status {c}"),
            Exit::Signaled(s) => write!(f, "killed by {s}"),
            Exit::WallLimit => f.write_str("killed at the wall-clock limit"),
            Exit::OomKilled => f.write_str("killed by the OOM killer"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        for e in [
            Exit::Exited(0),
            Exit::Exited(137),
            Exit::Signaled(Signal::KILL),
            Exit::Signaled(Signal::from_raw(40).unwrap_or(Signal::TERM)),
            Exit::WallLimit,
            Exit::OomKilled,
        ] {
            assert_eq!(Exit::decode(&e.encode()), Some(e));
        }
        for bad in [
            &[][..],
            &[1, 0, 0, 0],
            &[9, 0, 0, 0, 0, 0, 0, 0],
            &[2, 0, 0, 0, 0, 0, 0, 0],
        ] {
            assert_eq!(Exit::decode(bad), None, "{bad:?}");
        }
        // A wall-limit kill and a SIGKILL share the shell's 137, not the variant.
        assert_eq!(Exit::WallLimit.code(), Exit::Signaled(Signal::KILL).code());
        assert_ne!(Exit::WallLimit, Exit::Signaled(Signal::KILL));
        assert_eq!(Signal::KILL.to_string(), "SIGKILL");
        assert_eq!(Signal::from_raw(0), None);
        assert_eq!(Signal::from_raw(65), None);
    }
}
