//! End-to-end tests of `palisade decide`, `palisade mark-untrusted` and
//! `palisade check --policy`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::path::Path;
use std::process::{Command, Output};

const POLICY: &str = r#"
[worker]
cwd = "/w"
[egress]
allow = ["api.github.com:443", "*.example.com"]
deny = ["evil.example.com"]
[outward]
allow = [{ kind = "git.push", target = "github.com/acme/app:refs/heads/agent/*" }]
deny = [{ kind = "payment" }]
[taint]
egress_allow = ["api.github.com:443"]
untrusted_paths = ["inbox/**"]
[[routing]]
paths = ["private/**"]
providers = ["claude"]
"#;

fn palisade(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_palisade"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("palisade.toml"), POLICY).unwrap();
    dir
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn decide_egress_prints_json_and_exit_codes() {
    let dir = setup();
    let d = dir.path();
    let out = palisade(
        d,
        &[
            "decide",
            "egress",
            "--host",
            "a.example.com",
            "--port",
            "443",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        json(&out),
        serde_json::json!({"decision": "allow", "rule": "egress.allow[1]", "code": "allowed",
            "reason": "`a.example.com:443` matches allow rule `*.example.com`"})
    );
    let out = palisade(
        d,
        &[
            "decide",
            "egress",
            "--host",
            "evil.example.com",
            "--port",
            "443",
        ],
    );
    assert_eq!(out.status.code(), Some(11));
    assert_eq!(json(&out)["rule"], "egress.deny[0]");
    assert_eq!(json(&out)["code"], "host_denied");
    // Tainted: the same allowed host is refused unless in taint.egress_allow.
    let out = palisade(
        d,
        &[
            "decide",
            "egress",
            "--host",
            "a.example.com",
            "--port",
            "443",
            "--tainted",
        ],
    );
    assert_eq!(out.status.code(), Some(11));
    let out = palisade(
        d,
        &[
            "decide",
            "egress",
            "--host",
            "api.github.com",
            "--port",
            "443",
            "--tainted",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn decide_outward_asks_denies_and_allows() {
    let dir = setup();
    let d = dir.path();
    let target = "github.com/acme/app:refs/heads/agent/x";
    let out = palisade(
        d,
        &[
            "decide", "outward", "--kind", "git.push", "--target", target,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = palisade(
        d,
        &[
            "decide",
            "outward",
            "--kind",
            "git.push",
            "--target",
            target,
            "--tainted",
        ],
    );
    assert_eq!(out.status.code(), Some(10));
    assert_eq!(json(&out)["decision"], "ask");
    let out = palisade(
        d,
        &["decide", "outward", "--kind", "payment", "--target", "x"],
    );
    assert_eq!(out.status.code(), Some(11));
    let out = palisade(
        d,
        &[
            "decide",
            "outward",
            "--kind",
            "mail.send",
            "--target",
            "a@b.c",
        ],
    );
    assert_eq!(out.status.code(), Some(10));
    assert_eq!(json(&out)["rule"], "outward.default");
}

#[test]
fn decide_route_uses_path_and_session_reads() {
    let dir = setup();
    let d = dir.path();
    let out = palisade(
        d,
        &[
            "decide",
            "route",
            "--path",
            "private/k",
            "--provider",
            "openai",
        ],
    );
    assert_eq!(out.status.code(), Some(11));
    let out = palisade(
        d,
        &[
            "decide",
            "route",
            "--path",
            "private/k",
            "--provider",
            "claude",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let out = palisade(
        d,
        &["decide", "route", "--path", "src/a", "--provider", "openai"],
    );
    assert_eq!(out.status.code(), Some(0));
    // A session that read a restricted file keeps the restriction (sticky).
    let records = r#"{"at_ms":1,"event":{"type":"read","path":"/w/private/k"}}
{"at_ms":2,"event":{"type":"read","path":"src/a"}}
"#;
    std::fs::write(d.join("session.jsonl"), records).unwrap();
    let out = palisade(
        d,
        &[
            "decide",
            "route",
            "--path",
            "src/a",
            "--provider",
            "openai",
            "--session",
            "session.jsonl",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(11),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(json(&out)["rule"], "routing[0]");
}

#[test]
fn decide_egress_refuses_a_provider_host_the_session_reads_are_kept_from() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("palisade.toml"),
        "[worker]\ncwd = \"/w\"\n[egress]\nallow = [\"api.openai.com:443\", \"api.anthropic.com:443\"]\n[[routing]]\npaths = [\"private/**\"]\nproviders = [\"anthropic\"]\n",
    )
    .unwrap();
    std::fs::write(
        d.join("session.jsonl"),
        "{\"at_ms\":1,\"event\":{\"type\":\"read\",\"path\":\"private/x\"}}\n",
    )
    .unwrap();
    let egress = |host: &str, session: bool| {
        let mut args = vec!["decide", "egress", "--host", host, "--port", "443"];
        if session {
            args.extend(["--session", "session.jsonl"]);
        }
        palisade(d, &args)
    };
    let out = egress("api.openai.com", true);
    assert_eq!(out.status.code(), Some(11));
    let v = json(&out);
    assert_eq!(v["code"], "routing_denied");
    assert_eq!(v["rule"], "routing[0]");
    assert!(
        v["reason"].as_str().unwrap().contains("`/w/private/x`"),
        "{v}"
    );
    // Positive controls: the allowed provider's host in the same session,
    // and the same host before the restricted read.
    let out = egress("api.anthropic.com", true);
    assert_eq!(out.status.code(), Some(0), "{}", json(&out));
    let out = egress("api.openai.com", false);
    assert_eq!(out.status.code(), Some(0), "{}", json(&out));
}

#[test]
fn session_files_rebuild_taint() {
    let dir = setup();
    let d = dir.path();
    std::fs::write(
        d.join("s.json"),
        r#"[{"at_ms":1,"event":{"type":"read","path":"inbox/mail.eml"}}]"#,
    )
    .unwrap();
    let out = palisade(
        d,
        &[
            "decide",
            "egress",
            "--host",
            "a.example.com",
            "--port",
            "443",
            "--session",
            "s.json",
        ],
    );
    assert_eq!(out.status.code(), Some(11));
    // Positive control: a clean history allows it.
    std::fs::write(
        d.join("c.json"),
        r#"[{"at_ms":1,"event":{"type":"read","path":"src/x"}}]"#,
    )
    .unwrap();
    let out = palisade(
        d,
        &[
            "decide",
            "egress",
            "--host",
            "a.example.com",
            "--port",
            "443",
            "--session",
            "c.json",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn mark_untrusted_taints_sessions_that_read_marked_files() {
    let dir = setup();
    let d = dir.path();
    std::fs::write(
        d.join("s.json"),
        r#"[{"at_ms":1,"event":{"type":"read","path":"notes/shared.md"}}]"#,
    )
    .unwrap();
    let args = [
        "decide",
        "egress",
        "--host",
        "a.example.com",
        "--port",
        "443",
        "--session",
        "s.json",
    ];
    assert_eq!(
        palisade(d, &args).status.code(),
        Some(0),
        "positive control before marking"
    );
    let out = palisade(d, &["mark-untrusted", "notes/./shared.md"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let marks = std::fs::read_to_string(d.join(".palisade/untrusted")).unwrap();
    assert!(marks.lines().any(|l| l == "notes/shared.md"), "{marks}");
    assert_eq!(palisade(d, &args).status.code(), Some(11));
    // Marking again is idempotent.
    let out = palisade(d, &["mark-untrusted", "notes/shared.md"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("already marked"));
}

#[test]
fn check_policy_reports_errors_with_position() {
    let dir = setup();
    let d = dir.path();
    let out = palisade(d, &["check", "--policy", "palisade.toml"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    std::fs::write(
        d.join("bad.toml"),
        "[egress]\nallow = [\"*.com\"]\n[taint]\nsorces = []\n",
    )
    .unwrap();
    let out = palisade(d, &["check", "--policy", "bad.toml", "--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let report = json(&out);
    let found: Vec<(String, String, u64, u64)> = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["code"].as_str().unwrap().to_owned(),
                d["path"].as_str().unwrap().to_owned(),
                d["line"].as_u64().unwrap(),
                d["column"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        found,
        vec![
            (
                "invalid_host_pattern".to_owned(),
                ".egress.allow[0]".to_owned(),
                2,
                10
            ),
            ("unknown_key".to_owned(), ".taint.sorces".to_owned(), 4, 1),
        ]
    );
    // The human format names the code, the file position and the path.
    let out = palisade(d, &["check", "--policy", "bad.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("invalid_host_pattern") && text.contains("bad.toml:2:10"),
        "{text}"
    );
    // A refused policy makes every decision a usage error, never an allow.
    let out = palisade(
        d,
        &[
            "decide", "egress", "--policy", "bad.toml", "--host", "a.com", "--port", "443",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

#[test]
fn a_sealed_journal_rebuilds_taint_only_from_what_verified() {
    let dir = setup();
    let d = dir.path();
    let ok = |out: &Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ok(&palisade(d, &["journal", "keygen", "--out", "k"]));
    let append = |kind: &str, body: &str, close: bool| {
        let mut args = vec![
            "journal",
            "append",
            "j",
            "--key",
            "k",
            "--session",
            "s1",
            "--kind",
            kind,
            "--body",
            body,
        ];
        if close {
            args.push("--close");
        }
        ok(&palisade(d, &args));
    };
    let decide = |extra: &[&str]| {
        let mut args = vec![
            "decide",
            "egress",
            "--host",
            "a.example.com",
            "--port",
            "443",
            "--journal",
            "j",
            "--key",
            "k",
        ];
        args.extend_from_slice(extra);
        palisade(d, &args)
    };
    append(
        "session_event",
        r#"{"at_ms":1,"event":{"type":"read","path":"src/x"}}"#,
        false,
    );
    append("egress_connection", r#"{"host":"a.example.com"}"#, false);
    // An open journal is refused unless asked for; then the clean history
    // allows the connection (the positive control).
    let out = decide(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("journal_not_closed"));
    assert_eq!(decide(&["--allow-open"]).status.code(), Some(0));
    // A governed session's taint record taints the rebuilt session.
    append(
        "taint_raised",
        r#"{"class":"untrusted_path","detail":"inbox/m.eml","first":true,"reported_by":"worker","source":"untrusted_path"}"#,
        true,
    );
    let out = decide(&[]);
    assert_eq!(
        out.status.code(),
        Some(11),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Rewriting the taint record away is caught: refused, never clean.
    let text = std::fs::read_to_string(d.join("j")).unwrap();
    let forged = text.replacen(r#""class":"untrusted_path""#, r#""class":"inbox_zero_""#, 1);
    assert_ne!(forged, text);
    std::fs::write(d.join("j"), forged).unwrap();
    let out = decide(&[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("journal_invalid") && err.contains("seq 3"),
        "{err}"
    );
}
