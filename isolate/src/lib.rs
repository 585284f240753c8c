//! Linux worker sandboxes that fail closed: namespaces, host masks,
//! Landlock, seccomp, capabilities.
//!
//! A [`Sandbox`] takes a [`Profile`] (`strict`, `governed`, `maintenance`
//! or a custom one), probes every [`Layer`] first, computes the
//! [`MountPlan`], walks the paths the worker will see for Unix sockets, and
//! launches the command in new user, mount, PID, network, IPC and UTS
//! namespaces under a minimal init, with all capabilities dropped,
//! `no_new_privs`, resource limits, a Landlock ruleset and a seccomp deny
//! list, in that order, seccomp last. A missing required layer is a typed
//! [`SandboxError::LayerUnavailable`]; the only way to run weaker is
//! [`Sandbox::dangerous`], which names each layer and is recorded in the
//! [`LaunchReport`].
//!
//! What this crate does **not** do: it does not decide egress (the bridge
//! forwards bytes to a host socket; `palisade-egress` decides), it does not
//! write journals (the caller records the [`LaunchReport`]), and it does not
//! protect against kernel bugs, side channels, or what the worker does with
//! data it is allowed to read. See `docs/sandbox.md`.
//!
//! ```no_run
//! use palisade_isolate::{Command, Profile, Sandbox};
//! let mut sb = Sandbox::new(Profile::governed());
//! sb.writable("/srv/repo").cwd("/srv/repo");
//! let child = sb.spawn(Command::new(["make", "test"]))?;
//! println!("{}", child.report().mount_plan_digest);
//! let code = child.wait()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod caps_drop;
mod error;
mod exit;
mod init;
mod landlock_rules;
mod layer;
mod mounts;
mod placeholder_log;
mod plan;
mod profile;
mod pty;
mod reaper;
mod seccomp;
mod spawn;
#[expect(
    unsafe_code,
    reason = "raw system calls: fork, mount_setattr, close_range, prctl, ioctl"
)]
mod sys;
mod walk_cache;

pub use error::{SandboxError, Step};
pub use exit::{Exit, Signal};
pub use layer::{Layer, LayerStatus, ProbeReport, probe, probe_thorough};
pub use placeholder_log::{StaleCleanup, clean_stale as clean_stale_placeholders};
pub use plan::{MountOp, MountPlan, SECRET_STORES};
pub use profile::{
    DEFAULT_PATH, ENV_ALLOW, HOST_MASKS, Limit, NetworkMode, PROTECTED_IF_PRESENT, PROTECTED_NAMES,
    Profile, Rlimits, RootView, SYSTEM_DIRS, SYSTEM_ETC, SocketPolicy,
};
pub use pty::TerminalResize;
pub use spawn::{
    Bridge, Command, DEFAULT_WORKER_UID, DangerousSandbox, LaunchReport, Sandbox, SandboxChild,
    Stdio, WorkerIdentity,
};

/// The escape suite's attempts. Not part of the public API (the `testing`
/// feature; no semver guarantee).
#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __escape;

/// Fuzzing entry points (`fuzz/fuzz_targets/isolate_proc_tables.rs`). Not
/// part of the public API (the `testing` feature; no semver guarantee).
#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __fuzz {
    /// Parse arbitrary bytes as a `mountinfo` table, a `/proc/net/unix`
    /// table, an error-pipe record, a socket-walk cache file, a placeholder
    /// record and a `/proc/<pid>/stat` line: must never panic.
    pub fn proc_tables(data: &[u8]) {
        let text = String::from_utf8_lossy(data);
        let _ = crate::placeholder_log::parse(&text);
        let _ = crate::init::arg_env_areas(&text);
        let _ = crate::plan::parse_mountinfo(&text);
        let _ = crate::plan::parse_net_unix(&text);
        let _ = crate::spawn::decode_record(data);
        let _ = crate::exit::Exit::decode(data);
        // A socket-walk cache file: what parses renders back to the same cache.
        if let Some(cache) = crate::walk_cache::WalkCache::parse(data) {
            assert_eq!(
                crate::walk_cache::WalkCache::parse(&cache.render()).as_ref(),
                Some(&cache)
            );
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn harness_accepts_garbage() {
            for data in [
                &b""[..],
                b"\\",
                b"\\7",
                b"\\777 x",
                b"\xff\xfe\x00\x01",
                b"palisade-placeholders 1\np 1 2 3 4 5 6 zz\nlauncher x",
                b"1 (a)) S",
                &[0u8; 9],
            ] {
                super::proc_tables(data);
            }
        }
    }
}
