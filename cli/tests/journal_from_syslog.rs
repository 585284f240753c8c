//! `palisade journal verify --from-syslog FILE`: central verification of a
//! collector's file, end to end. The collector lines are written here by
//! hand in the RFC 5424 form the shipper sends (an independent encoder),
//! so the command is checked against the format, not against itself.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::path::Path;
use std::process::{Command, Output};

fn palisade(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(args)
        .output()
        .unwrap()
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn field<'a>(line: &'a str, name: &str) -> &'a str {
    let start = line.find(&format!("\"{name}\":")).unwrap() + name.len() + 3;
    let rest = &line[start..];
    let rest = rest.strip_prefix('"').unwrap_or(rest);
    &rest[..rest.find(['"', ',']).unwrap()]
}

/// The collector line rsyslog writes (`%rawmsg%`) for one journal line.
fn syslog_line(line: &str) -> String {
    format!(
        "<110>1 2026-12-02T14:00:00Z host palisade - record [palisade@32473 journal=\"{}\" seq=\"{}\" kind=\"{}\"] {line}\n",
        field(line, "journal"),
        field(line, "seq"),
        field(line, "kind"),
    )
}

struct Setup {
    _dir: tempfile::TempDir,
    key: std::path::PathBuf,
    collected: std::path::PathBuf,
    lines: Vec<String>,
    anchor: String,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let journal = dir.path().join("j.jsonl");
    assert!(
        palisade(&["journal", "keygen", "--out", s(&key)])
            .status
            .success()
    );
    let mut anchor = String::new();
    for i in 0..4 {
        let body = format!(r#"{{"i":{i}}}"#);
        let mut args = vec![
            "journal",
            "append",
            s(&journal),
            "--key",
            s(&key),
            "--kind",
            "taint_raised",
            "--body",
            &body,
        ];
        if i == 3 {
            args.push("--close");
        }
        let out = palisade(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        anchor = String::from_utf8(out.stdout).unwrap();
    }
    let lines: Vec<String> = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let collected = dir.path().join("collected.log");
    Setup {
        key,
        collected,
        lines,
        anchor,
        _dir: dir,
    }
}

impl Setup {
    fn verify(&self, content: &str, extra: &[&str]) -> (i32, String) {
        std::fs::write(&self.collected, content).unwrap();
        let mut args = vec![
            "journal",
            "verify",
            "--from-syslog",
            s(&self.collected),
            "--key",
            s(&self.key),
        ];
        args.extend_from_slice(extra);
        let out = palisade(&args);
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }
}

#[test]
fn a_complete_collector_file_verifies_closed_and_duplicates_are_dropped() {
    let t = setup();
    let all: String = t.lines.iter().map(|l| syslog_line(l)).collect();
    let (code, out) = t.verify(&all, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("valid and closed"), "{out}");
    // At least once, with someone else's lines in between.
    let twice = format!("{all}<13>1 - h sshd - - - hello\n{all}");
    let (code, out) = t.verify(&twice, &["--format", "json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "closed");
    assert_eq!(v["other_lines"], 1);
    assert_eq!(v["journals"][0]["duplicates"], t.lines.len());
}

#[test]
fn a_lost_record_a_fork_or_no_record_at_all_is_invalid() {
    let t = setup();
    let mut lost = t.lines.clone();
    lost.remove(2);
    let (code, out) = t.verify(
        &lost.iter().map(|l| syslog_line(l)).collect::<String>(),
        &[],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("seq_gap"), "{out}");

    let forged = t.lines[2].replace(r#""i":1"#, r#""i":7"#);
    assert_ne!(forged, t.lines[2]);
    let mut forked: String = t.lines.iter().map(|l| syslog_line(l)).collect();
    forked.push_str(&syslog_line(&forged));
    let (code, out) = t.verify(&forked, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("forked_record"), "{out}");

    let (code, out) = t.verify("<13>1 - h sshd - - - hello\n", &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("no palisade record"), "{out}");
}

#[test]
fn an_anchor_kept_elsewhere_catches_a_cut_collector_copy() {
    let t = setup();
    let anchor = t._dir.path().join("anchor.json");
    std::fs::write(&anchor, &t.anchor).unwrap();
    let all: String = t.lines.iter().map(|l| syslog_line(l)).collect();
    // Control: the whole copy reaches the anchor.
    let (code, out) = t.verify(&all, &["--anchor", s(&anchor)]);
    assert_eq!(code, 0, "{out}");
    // Cut after seq 2: open without the anchor, invalid with it.
    let cut: String = t.lines[..3].iter().map(|l| syslog_line(l)).collect();
    let (code, out) = t.verify(&cut, &[]);
    assert_eq!(code, 3, "{out}");
    let (code, out) = t.verify(&cut, &["--anchor", s(&anchor)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("truncated_before_anchor"), "{out}");
}
