//! The agent suite's harness: where the real agent CLIs are, one governed
//! run (`palisade run --policy P --agent NAME`) with its journal read back
//! and verified, a leak scanner for the real key, and the identity a tool
//! call recorded.
//!
//! Include it with `mod agents_common;` (and the fake providers with
//! `#[path = "agents_common/fake.rs"] mod fake;`). The agent tests are
//! `#[ignore]`d: `cargo xtask agents` installs the pinned CLIs and runs them
//! with `PALISADE_AGENTS_BIN` set. They need root (as CI runs them).

#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr,
    clippy::indexing_slicing,
    clippy::disallowed_methods,
    reason = "tests"
)]

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// `s` reversed: secret markers are kept reversed in the test sources so
/// that no scan matches its own configuration.
pub fn rev(s: &str) -> String {
    s.chars().rev().collect()
}

/// The palisade binary under test.
pub fn palisade() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_palisade"))
}

/// The executable `name` (`claude`, `codex`, `opencode`, `pi`) of the
/// pinned agent CLIs, from `PALISADE_AGENTS_BIN`. Panics, naming the way to
/// set it up, when the variable is unset or the file is missing: an agent
/// test never passes without its agent.
pub fn agent_bin(name: &str) -> PathBuf {
    let Some(dir) = std::env::var_os("PALISADE_AGENTS_BIN") else {
        panic!(
            "PALISADE_AGENTS_BIN is not set: run `cargo xtask agents` (it installs the pinned agent CLIs and runs this suite)"
        );
    };
    let p = PathBuf::from(dir).join(name);
    assert!(
        p.exists(),
        "{} does not exist: run `cargo xtask agents` to install the pinned agent CLIs",
        p.display()
    );
    p
}

/// Whether the test process is root (the suite needs it: the worker runs
/// as a dedicated uid and the sandbox as root's).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Panics unless the suite can run here: root is required, never skipped.
pub fn require_root() {
    assert!(
        is_root(),
        "the agent suite runs as root (cargo xtask agents under CI)"
    );
}

/// A test's governed-session directory: the working directory (writable by
/// the worker uid), the journal key (from `palisade journal keygen`), the
/// launching user's state directory (`XDG_STATE_HOME`, so a persistent
/// HOME lands inside the test's directory) and the stage base.
pub struct Governed {
    /// The temporary directory holding everything.
    pub dir: tempfile::TempDir,
    /// The worker's working directory.
    pub work: PathBuf,
    /// The journal key.
    pub key: PathBuf,
    /// `XDG_STATE_HOME` of the launching user.
    pub state: PathBuf,
    runs: std::cell::Cell<u32>,
}

/// One governed run to make.
pub struct Run<'a> {
    /// The policy text (written to `palisade.toml` in the test directory,
    /// outside the working directory).
    pub policy: &'a str,
    /// `--agent NAME`, if any.
    pub agent: Option<&'a str>,
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Extra environment of `palisade run` (the host's real key).
    pub host_env: Vec<(String, String)>,
    /// Extra `palisade run` arguments before `--`.
    pub args: Vec<OsString>,
    /// How long the run may take before the test fails.
    pub timeout: Duration,
}

impl<'a> Run<'a> {
    /// A run of `command` under `policy` with `--agent agent`, a 120 s limit.
    pub fn new(policy: &'a str, agent: Option<&'a str>, command: &[&str]) -> Run<'a> {
        Run {
            policy,
            agent,
            command: command.iter().map(OsString::from).collect(),
            host_env: Vec::new(),
            args: Vec::new(),
            timeout: Duration::from_secs(120),
        }
    }

    /// Adds a variable to `palisade run`'s environment.
    pub fn env(mut self, k: &str, v: &str) -> Run<'a> {
        self.host_env.push((k.to_owned(), v.to_owned()));
        self
    }

    /// Adds an argument of `palisade run` (before `--`).
    pub fn arg(mut self, a: impl Into<OsString>) -> Run<'a> {
        self.args.push(a.into());
        self
    }
}

/// What a governed run left.
#[derive(Debug)]
pub struct Outcome {
    /// The exit code (`-1` when killed by a signal).
    pub status: i32,
    /// palisade's (and the worker's) stdout.
    pub stdout: String,
    /// palisade's (and the worker's) stderr.
    pub stderr: String,
    /// The journal's records, each a JSON object.
    pub records: Vec<Value>,
    /// The journal's raw text.
    pub journal_text: String,
    /// Whether `palisade journal verify` exited 0 (valid and closed).
    pub verified: bool,
    /// The journal file.
    pub journal: PathBuf,
}

impl Outcome {
    /// The records of `kind`.
    pub fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.records
            .iter()
            .filter(|r| r["kind"].as_str() == Some(kind))
            .collect()
    }

    /// Panics with stdout and stderr unless the run exited 0.
    pub fn assert_ok(&self) {
        assert_eq!(
            self.status, 0,
            "governed run failed\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
    }

    /// Whether some journal record mentions `host` (a denied telemetry host
    /// is recorded when the agent tries it).
    pub fn mentions_host(&self, host: &str) -> bool {
        self.records.iter().any(|r| r.to_string().contains(host))
    }
}

impl Governed {
    /// A fresh directory with a key made by `palisade journal keygen`.
    pub fn new() -> Governed {
        let dir = tempfile::tempdir().unwrap();
        // The worker uid must reach its working directory below it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        let key = dir.path().join("journal.key");
        let out = Command::new(palisade())
            .args(["journal", "keygen", "--out"])
            .arg(&key)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "palisade journal keygen: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Governed {
            dir,
            work,
            key,
            state,
            runs: std::cell::Cell::new(0),
        }
    }

    /// The `palisade run` command of `run` (not started), its journal path.
    pub fn command(&self, run: &Run<'_>) -> (Command, PathBuf) {
        let n = self.runs.get() + 1;
        self.runs.set(n);
        let policy = self.dir.path().join("palisade.toml");
        std::fs::write(&policy, run.policy).unwrap();
        let journal = self.dir.path().join(format!("run{n}.journal"));
        let mut c = Command::new(palisade());
        c.arg("run")
            .arg("--cwd")
            .arg(&self.work)
            .arg("--policy")
            .arg(&policy)
            .arg("--journal")
            .arg(&journal)
            .arg("--key")
            .arg(&self.key)
            .arg("--approve-socket")
            .arg(self.dir.path().join(format!("approve{n}.sock")))
            .arg("--stage-dir")
            .arg(self.dir.path().join("stages"))
            .arg("--writes")
            .arg("direct");
        if let Some(a) = run.agent {
            c.arg("--agent").arg(a);
        }
        c.args(&run.args)
            .arg("--")
            .args(&run.command)
            .env("XDG_STATE_HOME", &self.state)
            .env("DO_NOT_TRACK", "1")
            .envs(run.host_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        (c, journal)
    }

    /// Runs `run` to the end (panics past its timeout), reads the journal
    /// back and verifies it with `palisade journal verify`.
    pub fn run(&self, run: &Run<'_>) -> Outcome {
        let (mut c, journal) = self.command(run);
        let child = c.spawn().unwrap();
        let (status, stdout, stderr) = wait_with_timeout(child, run.timeout);
        let journal_text = std::fs::read_to_string(&journal).unwrap_or_default();
        let records = journal_text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let anchor = PathBuf::from(format!("{}.anchor", journal.display()));
        let mut v = Command::new(palisade());
        v.args(["journal", "verify"])
            .arg(&journal)
            .arg("--key")
            .arg(&self.key);
        if anchor.exists() {
            v.arg("--anchor").arg(&anchor);
        }
        let verified = journal.exists() && v.output().unwrap().status.success();
        Outcome {
            status,
            stdout,
            stderr,
            records,
            journal_text,
            verified,
            journal,
        }
    }
}

impl Default for Governed {
    fn default() -> Governed {
        Governed::new()
    }
}

/// Waits for `child`, killing it and panicking past `limit`.
pub fn wait_with_timeout(mut child: std::process::Child, limit: Duration) -> (i32, String, String) {
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let err = err_t.join().unwrap_or_default();
            panic!("palisade run did not finish within {limit:?}\n--- stderr\n{err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = out_t.join().unwrap_or_default();
    let err = err_t.join().unwrap_or_default();
    (status.code().unwrap_or(-1), out, err)
}

/// Every place `secret` was found: the run's stdout/stderr, the journal,
/// and any file below `roots` (the working directory, where the tool call
/// dumped `env` and `/proc/self/environ`; a persistent HOME below the
/// state directory). An empty list is the pass. Also checks that `secret`
/// is non-empty, so a scan cannot pass vacuously.
pub fn leaks(secret: &str, outcome: &Outcome, roots: &[&Path]) -> Vec<String> {
    assert!(secret.len() >= 8, "a leak scan needs a real secret");
    let mut found = Vec::new();
    if outcome.stdout.contains(secret) {
        found.push("stdout".to_owned());
    }
    if outcome.stderr.contains(secret) {
        found.push("stderr".to_owned());
    }
    if outcome.journal_text.contains(secret) {
        found.push("journal".to_owned());
    }
    for root in roots {
        scan_tree(root, secret.as_bytes(), &mut found);
    }
    found
}

/// Panics (naming the places, never the secret) when `secret` leaked.
pub fn assert_no_leak(secret: &str, outcome: &Outcome, roots: &[&Path]) {
    let found = leaks(secret, outcome, roots);
    assert!(found.is_empty(), "the real key leaked into: {found:?}");
}

fn scan_tree(path: &Path, needle: &[u8], found: &mut Vec<String>) {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if meta.is_dir() {
        let Ok(rd) = std::fs::read_dir(path) else {
            return;
        };
        for e in rd.flatten() {
            scan_tree(&e.path(), needle, found);
        }
    } else if meta.is_file()
        && let Ok(bytes) = std::fs::read(path)
        && bytes.windows(needle.len()).any(|w| w == needle)
    {
        found.push(path.display().to_string());
    }
}

/// What a tool call recorded about itself: its uid and capability sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolIdentity {
    /// `id -u`.
    pub uid: u32,
    /// `CapInh`, `CapPrm`, `CapEff`, `CapBnd`, `CapAmb` as numbers.
    pub caps: Vec<(String, u64)>,
}

impl ToolIdentity {
    /// Whether every capability set except the bounding set is empty.
    pub fn no_caps(&self) -> bool {
        self.caps
            .iter()
            .filter(|(n, _)| n != "CapBnd")
            .all(|(_, v)| *v == 0)
    }
}

/// The shell command a fake provider's tool call runs so that
/// [`tool_identity`] can read it back: `id -u`, the `Cap*` lines of
/// `/proc/self/status`, the environment and `/proc/self/environ`, all into
/// files named `FILE.*` in the working directory.
pub fn identity_command(file: &str) -> String {
    format!(
        "id -u > {file}.id; grep ^Cap /proc/self/status >> {file}.id; env > {file}.env; cat /proc/self/environ > {file}.environ"
    )
}

/// Reads back what [`identity_command`] wrote under `dir`.
pub fn tool_identity(dir: &Path, file: &str) -> ToolIdentity {
    let p = dir.join(format!("{file}.id"));
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("the tool call left no {}: {e}", p.display()));
    let mut lines = text.lines();
    let uid = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no uid in {}", p.display()));
    let caps = lines
        .filter_map(|l| {
            let (n, v) = l.split_once(':')?;
            Some((n.to_owned(), u64::from_str_radix(v.trim(), 16).ok()?))
        })
        .collect::<Vec<_>>();
    assert_eq!(caps.len(), 5, "five Cap lines in {}", p.display());
    ToolIdentity { uid, caps }
}

/// The worker's environment as the tool call dumped it (`FILE.env`).
pub fn tool_env(dir: &Path, file: &str) -> Vec<(String, String)> {
    std::fs::read_to_string(dir.join(format!("{file}.env")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}
