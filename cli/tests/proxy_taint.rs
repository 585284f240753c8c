//! `palisade proxy` on its own makes its taint visible: the connection that
//! taints the session is journaled as `taint_raised`, every later taint
//! denial says what tainted the session and when, and `palisade report`
//! shows both. Loopback only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use palisade_evidence::JournalKey;

fn palisade() -> Command {
    Command::new(env!("CARGO_BIN_EXE_palisade"))
}

/// An echo origin on the loopback address `ip`; returns `ip:port`.
fn echo_origin(ip: &str) -> String {
    let l = TcpListener::bind((ip, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut r = s.try_clone().unwrap();
                let _ = std::io::copy(&mut r, &mut s);
            });
        }
    });
    format!("{ip}:{port}")
}

fn connect(port: u16, authority: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).unwrap_or(0) == 0 {
            break;
        }
        head.push(b[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

struct Run {
    heads: Vec<String>,
    records: Vec<serde_json::Value>,
    report: String,
}

/// Runs `palisade proxy` over `policy` with a journal, sends one CONNECT per
/// authority in order (each answered before the next), stops it with
/// SIGTERM and returns the answers, the journal records and the report.
fn run(dir: &Path, policy: &str, authorities: &[String]) -> Run {
    let policy_path = dir.join("palisade.toml");
    std::fs::write(&policy_path, policy).unwrap();
    let key = JournalKey::generate().unwrap();
    let key_path = dir.join("journal.key");
    std::fs::write(&key_path, key.expose_text().as_bytes()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let journal = dir.join("egress.jsonl");
    let mut child = palisade()
        .args(["proxy", "--no-auth", "--listen", "127.0.0.1:0", "--policy"])
        .arg(&policy_path)
        .arg("--journal")
        .arg(&journal)
        .arg("--key")
        .arg(&key_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let listen: std::net::SocketAddr = v["listen"].as_str().unwrap().parse().unwrap();
    let heads = authorities
        .iter()
        .map(|a| connect(listen.port(), a))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let mut stopped = None;
    for _ in 0..400 {
        stopped = child.try_wait().unwrap();
        if stopped.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let Some(st) = stopped else {
        let _ = child.kill();
        panic!("palisade proxy did not stop on SIGTERM");
    };
    assert!(st.success(), "{st:?}");
    let records = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let report = palisade()
        .arg("report")
        .arg(&journal)
        .arg("--key")
        .arg(&key_path)
        .output()
        .unwrap();
    assert!(report.status.success(), "{report:?}");
    Run {
        heads,
        records,
        report: String::from_utf8(report.stdout).unwrap(),
    }
}

const POLICY: &str = "[egress]\nallow_addresses = [\"127.0.0.0/8\"]\nrequire_sni_match = false\n";

#[test]
fn a_standalone_proxy_journals_its_taint_and_every_taint_denial_explains_itself() {
    let dir = tempfile::tempdir().unwrap();
    let (first, later) = (echo_origin("127.0.0.1"), echo_origin("127.0.0.2"));
    // The default taint sources: the first non-relay connection taints.
    let r = run(dir.path(), POLICY, &[first.clone(), later.clone()]);
    assert!(r.heads[0].starts_with("HTTP/1.1 200"), "{:?}", r.heads);
    assert!(
        r.heads[1].starts_with("HTTP/1.1 403") && r.heads[1].contains("tainted_session"),
        "{:?}",
        r.heads
    );
    let taint: Vec<_> = r
        .records
        .iter()
        .filter(|l| l["kind"] == "taint_raised")
        .collect();
    assert_eq!(taint.len(), 1, "{:?}", r.records);
    let body = &taint[0]["body"];
    assert_eq!(
        (&body["class"], &body["detail"], &body["first"]),
        (
            &serde_json::json!("proxy_non_relay"),
            &serde_json::json!(first),
            &serde_json::json!(true)
        )
    );
    assert!(
        taint[0]["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "tainted")
    );
    let at = body["at_ms"].as_u64().unwrap() / 1000;
    let when = format!(
        "{:02}:{:02}:{:02}",
        (at / 3600) % 24,
        (at / 60) % 60,
        at % 60
    );
    let why = format!(
        "tainted_session: tainted by proxy_non_relay ({first}) at {when} UTC; only taint.egress_allow and contacted hosts are open"
    );
    let denied: Vec<_> = r
        .records
        .iter()
        .filter(|l| l["kind"] == "egress_connection" && l["body"]["decision"] == "deny")
        .collect();
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0]["body"]["reason"], serde_json::json!(why));
    // The report shows the taint beside the denial it explains.
    assert!(!r.report.contains("never tainted"), "{}", r.report);
    assert!(
        r.report
            .contains(&format!("source proxy_non_relay {first}")),
        "{}",
        r.report
    );
    assert!(
        r.report.contains(&format!("{later}: {why}")),
        "{}",
        r.report
    );
}

#[test]
fn an_untainted_standalone_run_reports_no_taint() {
    let dir = tempfile::tempdir().unwrap();
    let policy = format!("{POLICY}[taint]\nsources = [\"web\"]\n");
    let hosts = [echo_origin("127.0.0.1"), echo_origin("127.0.0.2")];
    let r = run(dir.path(), &policy, &hosts);
    for h in &r.heads {
        assert!(h.starts_with("HTTP/1.1 200"), "{:?}", r.heads);
    }
    assert!(!r.records.iter().any(|l| l["kind"] == "taint_raised"));
    assert!(r.report.contains("never tainted"), "{}", r.report);
    assert!(r.report.contains("denials (0)"), "{}", r.report);
}
