//! The background reaper: a dropped [`crate::SandboxChild`] that was still
//! running is killed by its `Drop` and handed over here, so that `drop`
//! never blocks on `waitpid`. Each hand-over gets a short-lived thread of
//! its own, which reaps the supervisor and then removes the placeholders
//! its launch created. (One thread per hand-over rather than a resident
//! one: a process forked after a first hand-over would inherit a reaper's
//! channel without its thread, and leave zombies.)

use crate::plan::{self, Placeholder};

/// Test hook: while held, the reaper reaps nothing (see
/// `crate::__escape::hold_reaper_for_tests`).
#[cfg(any(fuzzing, feature = "testing"))]
pub(crate) static HOLD: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn reap(pid: nix::unistd::Pid, placeholders: &[Placeholder]) {
    #[cfg(any(fuzzing, feature = "testing"))]
    drop(HOLD.lock());
    let _ = crate::spawn::wait_code(pid);
    plan::remove_placeholders(placeholders);
}

/// Reap `pid` (already sent `SIGKILL`) in the background, then remove
/// `placeholders`. Should no thread start, the caller's thread reaps it
/// (the supervisor is being killed, so that wait is short).
pub(crate) fn hand_over(pid: nix::unistd::Pid, placeholders: Vec<Placeholder>) {
    let job = std::sync::Arc::new(std::sync::Mutex::new(Some(placeholders)));
    let theirs = std::sync::Arc::clone(&job);
    let started = std::thread::Builder::new()
        .name(String::from("palisade-reaper"))
        .spawn(move || {
            let placeholders = theirs
                .lock()
                .map(|mut p| p.take().unwrap_or_default())
                .unwrap_or_default();
            reap(pid, &placeholders);
        });
    if started.is_err() {
        let placeholders = job
            .lock()
            .map(|mut p| p.take().unwrap_or_default())
            .unwrap_or_default();
        reap(pid, &placeholders);
    }
}
