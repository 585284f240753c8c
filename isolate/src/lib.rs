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
//! **Invariant:** fail closed. A required layer that cannot be enforced is
//! an error naming it, never a silent downgrade; every weakening goes
//! through [`Sandbox::dangerous`] and is listed in the [`LaunchReport`]; the
//! worker never holds a descriptor of the launcher's terminal or of a
//! directory outside its view; and `unsafe` lives only in one `sys` module.
//!
//! The launched [`SandboxChild`] is async-ready: it is `AsFd` through a
//! pidfd (readable once the sandbox is done, for an embedder's epoll or
//! tokio), has [`SandboxChild::wait_timeout`], [`SandboxChild::kill`] with a
//! typed [`Signal`], piped standard streams ([`Stdio::piped`]), a `Drop`
//! that never blocks (it kills and hands the reaping to a background
//! thread), and, with the `tokio` feature, [`SandboxChild::wait_async`]. How
//! the worker ended is an [`Exit`], which tells a wall-limit kill
//! ([`Exit::WallLimit`]) from any other `SIGKILL`.
//!
//! What this crate does **not** do: it does not decide egress (the bridge
//! forwards bytes to a host socket; `palisade-egress` decides), it does not
//! write journals (the caller records the [`LaunchReport`]), and it does not
//! protect against kernel bugs, side channels, or what the worker does with
//! data it is allowed to read. See `docs/sandbox.md`.
//!
//! From a host policy (`palisade.toml`, parsed by `palisade-schema`),
//! [`Profile::resolve`] gives the profile it names and
//! [`Sandbox::apply_worker`] applies its `[worker]` section, exactly as
//! `palisade run` does; both only tighten and name the policy key they refuse.
//!
//! A worker under the `strict` profile, with pipes, a bounded wait and a
//! typed signal (this runs a real sandbox: it needs user namespaces,
//! Landlock and seccomp, as on CI):
//!
//! ```rust
//! use std::io::{Read, Write};
//! use std::time::Duration;
//!
//! use palisade_isolate::{Command, Exit, Profile, Sandbox, Signal, Stdio};
//!
//! let sandbox = Sandbox::new(Profile::strict());
//!
//! let done = sandbox.spawn(Command::new(["/bin/true"]))?;
//! assert!(done.report().downgraded.is_empty());
//! assert!(done.wait()?.success());
//!
//! // What the worker reads and writes goes through the launcher's pipe ends.
//! let mut child = sandbox.spawn(
//!     Command::new(["/bin/sh", "-c", "read name; echo \"hello $name\""])
//!         .stdin(Stdio::piped())
//!         .stdout(Stdio::piped()),
//! )?;
//! let mut stdin = child.take_stdin().ok_or("stdin is piped")?;
//! stdin.write_all(b"worker\n")?;
//! drop(stdin);
//! let mut out = String::new();
//! child.take_stdout().ok_or("stdout is piped")?.read_to_string(&mut out)?;
//! assert_eq!(out, "hello worker\n");
//! assert_eq!(child.wait_timeout(Duration::from_secs(60))?, Some(Exit::Exited(0)));
//!
//! // Still running at the timeout: stopped with a typed signal.
//! let mut sleeper = sandbox.spawn(Command::new(["/bin/sleep", "600"]))?;
//! assert_eq!(sleeper.wait_timeout(Duration::from_millis(10))?, None);
//! sleeper.kill(Signal::TERM)?;
//! assert_eq!(sleeper.wait()?, Exit::Signaled(Signal::TERM));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod caps_drop;
mod cgroup;
mod error;
mod exit;
mod from_policy;
mod init;
mod landlock_rules;
mod layer;
mod mounts;
pub mod observe;
mod placeholder_log;
mod plan;
mod profile;
mod pty;
mod reaper;
mod seccomp;
mod spawn;
pub mod stage;
#[expect(
    unsafe_code,
    reason = "raw system calls: fork, mount_setattr, close_range, prctl, ioctl"
)]
mod sys;
mod walk_cache;

pub use cgroup::CgroupLimits;
pub use error::{SandboxError, Step};
pub use exit::{Exit, Signal};
pub use from_policy::{ResolveError, WorkerError};
pub use layer::{Layer, LayerStatus, ProbeReport, probe, probe_thorough};
pub use placeholder_log::{StaleCleanup, clean_stale as clean_stale_placeholders};
pub use plan::{MountOp, MountPlan, SECRET_STORES};
pub use profile::{
    DEFAULT_PATH, ENV_ALLOW, HOST_MASKS, Limit, NESTED_SANDBOX_DEVIATION, NetworkMode,
    PROTECTED_IF_PRESENT, PROTECTED_NAMES, Profile, Rlimits, RootView, SYSTEM_DIRS, SYSTEM_ETC,
    SocketPolicy,
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

/// Benchmark entry points (`isolate/benches/launch.rs`). Not part of the
/// public API; no semver guarantee.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod __bench {
    /// How many host probes ([`crate::probe`]) the calling thread has run,
    /// so a test can tell a reused probe from a fresh one.
    pub fn probes_on_this_thread() -> u64 {
        crate::layer::PROBES.with(std::cell::Cell::get)
    }

    /// The seccomp program every profile installs, as the bytes of its
    /// `struct sock_filter` array in native byte order (8 bytes per
    /// instruction: `code` u16, `jt` u8, `jf` u8, `k` u32), the format
    /// `bwrap --seccomp FD` reads, so a peer can run with the same filter.
    pub fn seccomp_program() -> Result<Vec<u8>, String> {
        let filters = crate::seccomp::build(false)?;
        let mut out = Vec::with_capacity(filters.program.len() * 8);
        for insn in &filters.program {
            out.extend_from_slice(&insn.code.to_ne_bytes());
            out.push(insn.jt);
            out.push(insn.jf);
            out.extend_from_slice(&insn.k.to_ne_bytes());
        }
        Ok(out)
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn the_bytes_are_the_installed_program_in_sock_filter_layout() {
            let program = crate::seccomp::build(false).unwrap().program;
            let bytes = super::seccomp_program().unwrap();
            assert_eq!(bytes.len(), program.len() * 8);
            for (chunk, insn) in bytes.chunks_exact(8).zip(&program) {
                let code = u16::from_ne_bytes([chunk[0], chunk[1]]);
                let k = u32::from_ne_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
                assert_eq!(
                    (code, chunk[2], chunk[3], k),
                    (insn.code, insn.jt, insn.jf, insn.k)
                );
            }
            // The program starts by loading seccomp_data.arch (offset 4):
            // BPF_LD | BPF_W | BPF_ABS.
            assert_eq!(bytes[..2], 0x20u16.to_ne_bytes());
            assert_eq!(bytes[4..8], 4u32.to_ne_bytes());
        }
    }
}

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

    /// Parse arbitrary bytes as a stage manifest (`manifest.json` of a
    /// kept stage, which `palisade commit` reopens): must never panic, and
    /// what it accepts names absolute roots with in-range stamps.
    pub fn stage_manifest(data: &[u8]) {
        let text = String::from_utf8_lossy(data);
        let path = std::path::Path::new("/fuzz/manifest.json");
        if let Ok((_, roots)) = crate::stage::layout::parse_manifest(&text, path) {
            for (root, stamp, _) in roots {
                assert!(root.is_absolute());
                assert!((0..1_000_000_000).contains(&stamp.nsec));
            }
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn the_manifest_harness_accepts_garbage_and_reads_a_manifest() {
            for data in [
                &b""[..],
                b"{}",
                b"{\"version\":1,\"session\":\"s\",\"roots\":[{\"root\":\"rel\",\"stamp\":{\"sec\":1,\"nsec\":2},\"same_fs\":true}]}",
                b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
                b"\xff\xfe",
            ] {
                super::stage_manifest(data);
            }
            let good = br#"{"version":1,"session":"s","roots":[{"root":"/r","stamp":{"sec":1,"nsec":2},"same_fs":true}]}"#;
            let (session, roots) = crate::stage::layout::parse_manifest(
                &String::from_utf8_lossy(good),
                std::path::Path::new("/m"),
            )
            .unwrap();
            assert_eq!(session, "s");
            assert_eq!(roots.len(), 1);
        }

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
