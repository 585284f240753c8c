//! A writable root that is, or holds, the invoking user's `$HOME`: the
//! commit refuses the home's dot entries and `~/bin` (rule
//! `home_startup`), through the `palisade` binary as root, checked from
//! the host after the run; ordinary files in the home land.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_palisade");

fn skip() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    if !root {
        assert!(std::env::var_os("CI").is_none(), "CI runs this as root");
        eprintln!("skipped: needs root");
    }
    !root
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `script` in the root `work` with `HOME=home`, the stage beside.
fn run(work: &Path, home: &Path, script: &str) -> Output {
    Command::new(BIN)
        .arg("run")
        .arg("--cwd")
        .arg(work)
        .arg("--stage-dir")
        .arg(work.parent().unwrap().join("stages"))
        .env("HOME", home)
        .args(["--", "/bin/sh", "-c", script])
        .output()
        .unwrap()
}

/// A root open to the worker uid, with `rel` (a home, `""` for the root
/// itself) made inside it and open too.
fn tree(rel: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let home = work.join(rel);
    std::fs::create_dir_all(&home).unwrap();
    let mut d = home.as_path();
    loop {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        if d == work {
            break;
        }
        d = d.parent().unwrap();
    }
    (dir, work)
}

const SCRIPT: &str = "mkdir -p .aws bin projects/app/src && echo x > .anything && echo '[default]' > .aws/config && echo '#!/bin/sh' > bin/tool && echo n > notes.txt && echo 'fn main() {}' > projects/app/src/main.rs";

#[test]
fn a_root_that_is_the_home_refuses_its_dot_entries_and_bin() {
    if skip() {
        return;
    }
    let (_dir, work) = tree("");
    let out = run(&work, &work, SCRIPT);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Positive controls: ordinary files of the home land.
    for p in ["notes.txt", "projects/app/src/main.rs"] {
        assert!(work.join(p).is_file(), "{p} did not land: {}", text(&out));
    }
    for p in [".anything", ".aws/config", "bin/tool"] {
        assert!(
            !work.join(p).exists(),
            "{p} reached the home: {}",
            text(&out)
        );
    }
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("home_startup"),
        "the summary names the rule: {}",
        text(&out)
    );
}

#[test]
fn a_root_that_holds_the_home_refuses_them_there_only() {
    if skip() {
        return;
    }
    let (_dir, work) = tree("home/u");
    let home = work.join("home/u");
    let script = format!(
        "cd home/u && {SCRIPT} && cd ../.. && mkdir -p bin && echo t > bin/tool && echo y > .other"
    );
    let out = run(&work, &home, &script);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Positive controls: the home's ordinary files, and the same names
    // outside the home (`bin/tool` at the root is not `~/bin`).
    for p in [
        "home/u/notes.txt",
        "home/u/projects/app/src/main.rs",
        "bin/tool",
        ".other",
    ] {
        assert!(work.join(p).is_file(), "{p} did not land: {}", text(&out));
    }
    for p in ["home/u/.anything", "home/u/.aws/config", "home/u/bin/tool"] {
        assert!(
            !work.join(p).exists(),
            "{p} reached the home: {}",
            text(&out)
        );
    }
}
