//! `palisade run` and `palisade probe` end to end: exit codes (the
//! command's, 125 on setup failure), the launch report, the probe JSON.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_palisade");

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

#[test]
fn exit_code_is_the_commands() {
    if !is_root() {
        eprintln!("skipped: needs root (CI runs as root)");
        return;
    }
    let cwd = tempfile::tempdir().unwrap();
    for profile in ["strict", "governed", "maintenance"] {
        let out = Command::new(BIN)
            .args(["run", "--profile", profile, "--", "/bin/sh", "-c", "exit 3"])
            .current_dir(cwd.path())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(3),
            "{profile}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = Command::new(BIN)
        .args(["run", "--profile", "strict", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn setup_failure_exits_125_with_the_reason() {
    let mut cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["run", "--profile", "nope", "--", "/bin/true"],
            "unknown profile `nope`",
        ),
        (
            vec![
                "run",
                "--dangerously-disable",
                "mount_ns",
                "--",
                "/bin/true",
            ],
            "layer `mount_ns` cannot be downgraded",
        ),
        (
            vec![
                "run",
                "--profile",
                "strict",
                "--cwd",
                "relative/dir",
                "--",
                "/bin/true",
            ],
            "must be absolute",
        ),
    ];
    if is_root() {
        cases.push((
            vec!["run", "--profile", "strict", "--", "/nonexistent/program"],
            "cannot execute `/nonexistent/program`",
        ));
    }
    for (args, want) in cases {
        let out = Command::new(BIN)
            .args(&args)
            .current_dir("/")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn launch_report_is_written() {
    if !is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("launch.json");
    let out = Command::new(BIN)
        .args([
            "run",
            "--profile",
            "strict",
            "--launch-report",
            report.to_str().unwrap(),
            "--dangerously-disable",
            "uts_ns",
            "--",
            "/bin/true",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("dangerously disabled"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["profile"], "strict");
    assert!(
        v["mount_plan_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(v["downgraded"], serde_json::json!(["uts_ns"]));
    let layers = v["layers"].as_array().unwrap();
    assert!(
        layers
            .iter()
            .any(|l| l["layer"] == "landlock" && l["status"] == "active")
    );
    assert!(
        layers
            .iter()
            .any(|l| l["layer"] == "uts_ns" && l["status"] == "degraded")
    );
}

#[test]
fn probe_json_lists_every_layer() {
    let out = Command::new(BIN)
        .args(["probe", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["layer"].as_str().unwrap())
        .collect();
    for want in [
        "user_ns",
        "mount_ns",
        "pid_ns",
        "net_ns",
        "ipc_ns",
        "uts_ns",
        "landlock",
        "seccomp",
        "capabilities",
        "no_new_privs",
        "rlimits",
        "cgroups",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let ready = v["ready"].as_bool().unwrap();
    assert_eq!(out.status.code(), Some(if ready { 0 } else { 1 }));
}
