//! `palisade proxy` as a process on loopback: SIGTERM does not wait for a
//! client still sending its request head; that connection is answered,
//! recorded as `shutdown`, and the journal still closes cleanly.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::OpenOptionsExt as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use palisade_evidence::{JournalKey, JournalState, verify};

fn echo_origin() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
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
    port
}

/// The `listening` line; stdout keeps being drained afterwards.
fn listening_port(child: &mut Child) -> u16 {
    let mut r = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = r.read_to_end(&mut sink);
    });
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let listen: std::net::SocketAddr = v["listen"].as_str().unwrap().parse().unwrap();
    listen.port()
}

/// Waits for the process to exit; the bound is a hang guard (the head
/// timeout it must not wait for is 10 s), not a timing assertion.
fn exited_within_5s(child: &mut Child) -> Option<std::process::ExitStatus> {
    for _ in 0..200 {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn sigterm_cuts_a_connection_still_sending_its_head_and_records_it() {
    let origin = echo_origin();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("palisade.toml");
    std::fs::write(&policy, "[egress]\nallow_addresses = [\"127.0.0.0/8\"]\n").unwrap();
    let key = JournalKey::generate().unwrap();
    let key_path = dir.path().join("journal.key");
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&key_path)
        .unwrap()
        .write_all(key.expose_text().as_bytes())
        .unwrap();
    let journal = dir.path().join("egress.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["proxy", "--no-auth", "--listen", "127.0.0.1:0", "--policy"])
        .arg(&policy)
        .arg("--journal")
        .arg(&journal)
        .arg("--key")
        .arg(&key_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let port = listening_port(&mut child);

    // positive control: a complete request before the signal is served and
    // recorded normally
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "CONNECT 127.0.0.1:{origin} HTTP/1.1\r\nHost: 127.0.0.1:{origin}\r\n\r\n"
    )
    .unwrap();
    let mut head = [0u8; 39];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head[..], b"HTTP/1.1 200 Connection established\r\n\r\n");
    s.write_all(b"ping").unwrap();
    let mut b = [0u8; 4];
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ping");
    drop(s);

    // half a head, then SIGTERM
    let mut half = TcpStream::connect(("127.0.0.1", port)).unwrap();
    half.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    half.write_all(b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHo")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let st = exited_within_5s(&mut child);
    assert!(
        st.is_some(),
        "palisade proxy waited for a client still sending its head"
    );
    assert!(st.unwrap().success(), "{st:?}");
    let mut answer = Vec::new();
    let _ = half.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");

    let bytes = std::fs::read(&journal).unwrap();
    let report = verify(&bytes, &key, None);
    assert_eq!(report.state(), JournalState::Closed, "{report:?}");
    let records: Vec<serde_json::Value> = String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["kind"] == "egress_connection")
        .collect();
    assert_eq!(records.len(), 2, "{records:?}");
    let closes: Vec<(&str, &str)> = records
        .iter()
        .map(|v| {
            (
                v["body"]["reason"].as_str().unwrap(),
                v["body"]["close"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(closes.contains(&("allowed", "completed")), "{closes:?}");
    assert!(closes.contains(&("shutdown", "shutdown")), "{closes:?}");
}
