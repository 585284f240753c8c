//! `palisade run --policy` with a git relay: the worker's git is configured
//! by environment (`GIT_CONFIG_COUNT`/`KEY`/`VALUE`) to send the origin's
//! URLs to the relay with the relay's placeholder, and that placeholder is
//! in no journal record and nowhere in palisade's own output. A
//! `GIT_CONFIG_*` variable given by `--env` is refused (the session sets
//! them), while the same run without it starts (positive control).
//!
//! Nothing is dialled: the relay is only configured. Needs root (as CI
//! runs it) and `git`; without them the test says it was skipped.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::print_stderr,
    reason = "tests"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine as _;

fn rev(s: &str) -> String {
    s.chars().rev().collect()
}

/// The git token the host holds (reversed here).
fn host_token() -> String {
    rev("NEKOT-TIG-TSOH-edasilap-phg")
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Whether to skip on this machine. Under CI (`CI` set) a missing
/// prerequisite is a failure, never a silent pass.
fn skip() -> bool {
    let ci = std::env::var_os("CI").is_some();
    if !is_root() {
        assert!(!ci, "CI must run the git relay smoke test as root");
        eprintln!("skipped: the git relay smoke test runs as root (CI does)");
        return true;
    }
    if !Path::new("/usr/bin/git").exists() {
        assert!(!ci, "CI must provide /usr/bin/git");
        eprintln!("skipped: the worker needs /usr/bin/git");
        return true;
    }
    false
}

const POLICY: &str = r#"[worker]
profile = "governed"

[egress]
allow = []

[[egress.relay]]
name = "github-git"
kind = "git"
origin = "https://git.test:8443"
credential = { header = "authorization", from_env = "SMOKE_GIT_TOKEN", username = "x-access-token" }

[outward]
default = "ask"
"#;

struct Run {
    _dir: tempfile::TempDir,
    journal: PathBuf,
    out: Output,
}

fn run(extra: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::set_permissions(&work, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let policy = dir.path().join("palisade.toml");
    std::fs::write(&policy, POLICY).unwrap();
    let key = dir.path().join("journal.key");
    let k = palisade_evidence::JournalKey::generate().unwrap();
    std::fs::write(&key, k.expose_text().as_bytes()).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let journal = dir.path().join("run.journal");
    let out = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .arg("run")
        .args(["--cwd"])
        .arg(&work)
        .arg("--policy")
        .arg(&policy)
        .arg("--journal")
        .arg(&journal)
        .arg("--key")
        .arg(&key)
        .arg("--stage-dir")
        .arg(dir.path().join("stages"))
        .args(extra)
        .args([
            "--",
            "/usr/bin/git",
            "config",
            "--get-regexp",
            r"^(url|http)\.",
        ])
        .env("SMOKE_GIT_TOKEN", host_token())
        .output()
        .unwrap();
    Run {
        _dir: dir,
        journal,
        out,
    }
}

#[test]
fn the_worker_s_git_goes_to_the_git_relay_and_its_placeholder_is_recorded_nowhere() {
    if skip() {
        return;
    }
    let r = run(&[]);
    let stdout = String::from_utf8_lossy(&r.out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&r.out.stderr).into_owned();
    assert!(r.out.status.success(), "{stdout}\n{stderr}");
    // git prints the variable names in lower case, the URLs as given.
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.contains(&"url.http://127.0.0.1:3130/.insteadof https://git.test:8443/"),
        "{stdout}"
    );
    let header = lines
        .iter()
        .find_map(|l| l.strip_prefix("http.http://127.0.0.1:3130/.extraheader "))
        .unwrap_or_else(|| panic!("no extraHeader for the relay: {stdout}"));
    let encoded = header
        .strip_prefix("authorization: Basic ")
        .unwrap_or_else(|| panic!("not a Basic header: {header}"));
    let decoded = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap(),
    )
    .unwrap();
    let placeholder = decoded
        .strip_prefix("x-access-token:")
        .unwrap_or_else(|| panic!("not the relay's username: {decoded}"))
        .to_owned();
    assert!(
        placeholder.len() >= 16,
        "a short placeholder: {placeholder}"
    );
    assert_ne!(placeholder, host_token(), "the worker got the host's token");

    let journal = std::fs::read_to_string(&r.journal).unwrap();
    // The scan can see what it looks for: the relay is named in the journal.
    assert!(journal.contains("github-git"), "{journal}");
    for (what, secret) in [
        ("the placeholder", placeholder.as_str()),
        ("the Basic value", encoded),
        ("the host token", host_token().as_str()),
    ] {
        assert!(!journal.contains(secret), "{what} is in the journal");
        assert!(!stderr.contains(secret), "{what} is in palisade's output");
    }
}

#[test]
fn a_git_config_variable_given_by_env_is_refused_when_a_relay_is_a_git_relay() {
    if skip() {
        return;
    }
    let r = run(&["--env", "GIT_CONFIG_COUNT=0"]);
    let stderr = String::from_utf8_lossy(&r.out.stderr).into_owned();
    assert_eq!(r.out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("`GIT_CONFIG_COUNT`") && stderr.contains("set by the governed session"),
        "{stderr}"
    );
    // Positive control: another variable is passed and the run starts.
    let r = run(&["--env", "SMOKE_OTHER=1"]);
    assert!(
        r.out.status.success(),
        "{}",
        String::from_utf8_lossy(&r.out.stderr)
    );
}
