//! `palisade journal keygen|verify|show|append`, end to end.

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

fn palisade(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(args)
        .output()
        .unwrap()
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap()
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn keygen_append_verify_show_round_trip_with_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let journal = dir.path().join("j.jsonl");

    let out = palisade(&["journal", "keygen", "--out", s(&key)]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let key_text = std::fs::read_to_string(&key).unwrap();
    // Refuses to overwrite, and leaves the key alone.
    let out = palisade(&["journal", "keygen", "--out", s(&key)]);
    assert_eq!(code(&out), 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to overwrite"));
    assert_eq!(std::fs::read_to_string(&key).unwrap(), key_text);

    let append = |kind: &str, body: &str, extra: &[&str]| {
        let mut args = vec![
            "journal",
            "append",
            s(&journal),
            "--key",
            s(&key),
            "--kind",
            kind,
            "--body",
            body,
        ];
        args.extend_from_slice(extra);
        palisade(&args)
    };
    let out = append(
        "outward_action",
        r#"{"target":"git push"}"#,
        &["--flag", "irreversible", "--session", "s1"],
    );
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let out = append("egress_connection", r#"{"host":"example.org"}"#, &[]);
    assert_eq!(code(&out), 0);
    let anchor_json = String::from_utf8(out.stdout).unwrap();
    let anchor = dir.path().join("anchor.json");
    std::fs::write(&anchor, &anchor_json).unwrap();

    // Open journal: exit 3.
    let out = palisade(&["journal", "verify", s(&journal), "--key", s(&key)]);
    assert_eq!(code(&out), 3, "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("NOT CLOSED"));

    let out = append("policy_loaded", "{}", &["--close"]);
    assert_eq!(code(&out), 0);
    // Closed journal: exit 0, with the earlier anchor too.
    let out = palisade(&[
        "journal",
        "verify",
        s(&journal),
        "--key",
        s(&key),
        "--anchor",
        s(&anchor),
    ]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stdout));
    let out = palisade(&[
        "journal",
        "verify",
        s(&journal),
        "--key",
        s(&key),
        "--format",
        "json",
    ]);
    assert_eq!(code(&out), 0);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["verdict"], "closed");
    assert_eq!(report["records"], 5);
    assert_eq!(report["failure"], serde_json::Value::Null);
    // Appending to a closed journal fails.
    assert_eq!(code(&append("policy_loaded", "{}", &[])), 2);

    // show, filtered.
    let out = palisade(&[
        "journal",
        "show",
        s(&journal),
        "--kind",
        "outward_action",
        "--format",
        "json",
    ]);
    assert_eq!(code(&out), 0);
    let shown = String::from_utf8(out.stdout).unwrap();
    assert_eq!(shown.lines().count(), 1);
    assert!(shown.contains(r#""flags":["irreversible"]"#));
    let out = palisade(&["journal", "show", s(&journal)]);
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 5);

    // Tampering: exit 1, with the failure in JSON.
    let mut bytes = std::fs::read(&journal).unwrap();
    let at = bytes.windows(11).position(|w| w == b"example.org").unwrap();
    bytes[at] = b'E';
    std::fs::write(&journal, &bytes).unwrap();
    let out = palisade(&[
        "journal",
        "verify",
        s(&journal),
        "--key",
        s(&key),
        "--format",
        "json",
    ]);
    assert_eq!(code(&out), 1);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["verdict"], "invalid");
    assert_eq!(report["failure"]["kind"], "mac_mismatch");
    assert_eq!(report["failure"]["seq"], 2);
}

#[test]
fn truncation_before_the_anchor_is_invalid_not_just_open() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let journal = dir.path().join("j.jsonl");
    assert_eq!(code(&palisade(&["journal", "keygen", "--out", s(&key)])), 0);
    let mut anchor_json = String::new();
    for i in 0..3 {
        let body = format!(r#"{{"i":{i}}}"#);
        let out = palisade(&[
            "journal",
            "append",
            s(&journal),
            "--key",
            s(&key),
            "--kind",
            "taint_raised",
            "--body",
            &body,
        ]);
        assert_eq!(code(&out), 0);
        anchor_json = String::from_utf8(out.stdout).unwrap();
    }
    let anchor = dir.path().join("anchor.json");
    std::fs::write(&anchor, anchor_json).unwrap();
    // Positive control: the whole journal reaches the anchor (open: 3).
    let verify = || {
        palisade(&[
            "journal",
            "verify",
            s(&journal),
            "--key",
            s(&key),
            "--anchor",
            s(&anchor),
        ])
    };
    assert_eq!(code(&verify()), 3);
    // Drop the last record: without the anchor it only looks open...
    let bytes = std::fs::read(&journal).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let cut: String = text.lines().take(3).map(|l| format!("{l}\n")).collect();
    std::fs::write(&journal, cut).unwrap();
    assert_eq!(
        code(&palisade(&[
            "journal",
            "verify",
            s(&journal),
            "--key",
            s(&key)
        ])),
        3
    );
    // ... with it, the truncation is an error.
    let out = verify();
    assert_eq!(code(&out), 1);
    assert!(String::from_utf8_lossy(&out.stdout).contains("truncated_before_anchor"));
}

#[test]
fn a_key_readable_by_others_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let journal = dir.path().join("j.jsonl");
    assert_eq!(code(&palisade(&["journal", "keygen", "--out", s(&key)])), 0);
    let args = [
        "journal",
        "append",
        s(&journal),
        "--key",
        s(&key),
        "--kind",
        "sandbox_status",
        "--body",
        "{}",
    ];
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = palisade(&args);
    assert_eq!(code(&out), 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 600"));
    assert!(!journal.exists());
    // Positive control.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(code(&palisade(&args)), 0);
    // Reserved kinds are refused.
    let out = palisade(&[
        "journal",
        "append",
        s(&journal),
        "--key",
        s(&key),
        "--kind",
        "journal_closed",
        "--body",
        "{}",
    ]);
    assert_eq!(code(&out), 2);
}

#[test]
fn evolve_key_moves_the_host_key_forward_and_only_the_initial_key_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let initial = dir.path().join("initial.key");
    let journal = dir.path().join("j.jsonl");
    assert_eq!(code(&palisade(&["journal", "keygen", "--out", s(&key)])), 0);
    std::fs::copy(&key, &initial).unwrap();
    let append = |close: bool| {
        let mut args = vec![
            "journal",
            "append",
            s(&journal),
            "--key",
            s(&key),
            "--kind",
            "steering_write",
            "--body",
            "{}",
            "--evolve-key",
            "--seal-every-records",
            "2",
        ];
        if close {
            args.push("--close");
        }
        palisade(&args)
    };
    for _ in 0..4 {
        assert_eq!(code(&append(false)), 0);
    }
    assert_eq!(code(&append(true)), 0);
    let host_key = std::fs::read_to_string(&key).unwrap();
    let epoch: u64 = host_key.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(epoch >= 2, "{epoch}");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The initial key verifies the whole journal ...
    let out = palisade(&["journal", "verify", s(&journal), "--key", s(&initial)]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stdout));
    // ... the evolved host key cannot.
    let out = palisade(&[
        "journal",
        "verify",
        s(&journal),
        "--key",
        s(&key),
        "--format",
        "json",
    ]);
    assert_eq!(code(&out), 1);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["failure"]["kind"], "key_not_initial");
}
