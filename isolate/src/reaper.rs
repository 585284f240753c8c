//! The background reaper: a dropped [`crate::SandboxChild`] that was still
//! running is stopped by its `Drop` (its stop pipe closed, so that the
//! supervisor kills init and waits for it) and handed over here, so that
//! `drop` never blocks on `waitpid`. Each hand-over gets a short-lived
//! thread of its own, which reaps the supervisor and then removes the
//! placeholders its launch created: by then init has ended, and with it
//! every process of the sandbox. A supervisor that has not ended after
//! [`GRACE`] (stopped, say) is killed outright. (One thread per hand-over
//! rather than a resident one: a process forked after a first hand-over
//! would inherit a reaper's channel without its thread, and leave zombies.)

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use crate::cgroup::Cgroup;
use crate::plan::{self, Placeholder};

/// How long a stopped supervisor has to kill init and leave before it is
/// sent `SIGKILL` itself.
const GRACE: Duration = Duration::from_secs(10);

/// Test hook: while held, the reaper reaps nothing (see
/// `crate::__escape::hold_reaper_for_tests`).
#[cfg(any(fuzzing, feature = "testing"))]
pub(crate) static HOLD: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether `pidfd`'s process ends within `within`.
fn ends_within(pidfd: &OwnedFd, within: Duration) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let deadline = std::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = u16::try_from(left.as_millis().min(60_000)).unwrap_or(60_000);
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(n) if n > 0 => return true,
            Ok(_) if left.is_zero() => return false,
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
}

fn reap(
    pid: nix::unistd::Pid,
    pidfd: Option<&OwnedFd>,
    placeholders: &[Placeholder],
    cgroup: Option<Cgroup>,
) {
    #[cfg(any(fuzzing, feature = "testing"))]
    drop(HOLD.lock());
    match pidfd {
        Some(fd) => {
            if !ends_within(fd, GRACE) {
                let _ = crate::sys::pidfd_send_signal(fd, libc::SIGKILL);
            }
        }
        // No pidfd to wait on: the supervisor, our unreaped child, is
        // killed at once.
        None => {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
    let _ = crate::spawn::wait_code(pid);
    plan::remove_placeholders(placeholders);
    // Whatever is left in the sandbox's cgroup is killed, the cgroup removed.
    drop(cgroup);
}

/// Reap `pid` (its stop pipe already closed) in the background, then
/// remove `placeholders` and the sandbox's `cgroup`. Should no thread start, the caller's thread
/// reaps it.
pub(crate) fn hand_over(
    pid: nix::unistd::Pid,
    pidfd: Option<OwnedFd>,
    placeholders: Vec<Placeholder>,
    cgroup: Option<Cgroup>,
) {
    type Job = (Option<OwnedFd>, Vec<Placeholder>, Option<Cgroup>);
    let job: std::sync::Arc<std::sync::Mutex<Option<Job>>> =
        std::sync::Arc::new(std::sync::Mutex::new(Some((pidfd, placeholders, cgroup))));
    let theirs = std::sync::Arc::clone(&job);
    let take = |j: &std::sync::Mutex<Option<Job>>| {
        j.lock()
            .map(|mut p| p.take().unwrap_or_default())
            .unwrap_or_default()
    };
    let started = std::thread::Builder::new()
        .name(String::from("palisade-reaper"))
        .spawn(move || {
            let (fd, placeholders, cg) = take(&theirs);
            reap(pid, fd.as_ref(), &placeholders, cg);
        });
    if started.is_err() {
        let (fd, placeholders, cg) = take(&job);
        reap(pid, fd.as_ref(), &placeholders, cg);
    }
}
