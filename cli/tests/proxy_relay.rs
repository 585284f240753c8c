//! `palisade proxy` and `palisade relay` as processes: they start from a
//! real `palisade.toml`, serve on loopback or a Unix socket, stop on
//! SIGTERM and close the journal cleanly.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use palisade_evidence::{JournalKey, JournalState, verify};

fn palisade() -> Command {
    Command::new(env!("CARGO_BIN_EXE_palisade"))
}

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

fn first_line(child: &mut Child) -> String {
    let out = child.stdout.take().unwrap();
    let mut r = BufReader::new(out);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    // keep draining so the child never blocks on a full pipe
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = r.read_to_end(&mut sink);
    });
    line
}

fn sigterm(child: &Child) {
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

fn wait(child: &mut Child) -> std::process::ExitStatus {
    for _ in 0..200 {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let _ = child.kill();
    panic!("process did not stop on SIGTERM");
}

fn connect(port: u16, authority: &str, extra: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{extra}\r\n"
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
    (s, String::from_utf8_lossy(&head).into_owned())
}

/// The output of a command that must exit by itself (a refusal) within
/// ten seconds; panics with `what` if it is still running then.
fn refused_output(mut child: Child, what: &str) -> std::process::Output {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn proxy_serves_from_the_policy_records_to_the_journal_and_stops_cleanly() {
    let origin = echo_origin();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("palisade.toml");
    std::fs::write(
        &policy,
        "[egress]\nallow = [\"api.example.com:443\"]\nallow_addresses = [\"127.0.0.0/8\"]\n",
    )
    .unwrap();
    let key = JournalKey::generate().unwrap();
    let key_path = dir.path().join("journal.key");
    std::fs::write(&key_path, key.expose_text().as_bytes()).unwrap();
    let journal = dir.path().join("egress.jsonl");
    let token_path = dir.path().join("token");
    use std::os::unix::fs::PermissionsExt;
    // The proxy with the key file at `mode`; stdout and stderr piped.
    let start = |mode: u32| {
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(mode)).unwrap();
        palisade()
            .args(["proxy", "--policy"])
            .arg(&policy)
            .args(["--listen", "127.0.0.1:0", "--token-file"])
            .arg(&token_path)
            .arg("--journal")
            .arg(&journal)
            .arg("--key")
            .arg(&key_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // A key other users can read is refused before anything listens.
    let out = refused_output(start(0o644), "the proxy started with a key others can read");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("accessible by other users"), "{err}");
    assert!(!journal.exists() && !token_path.exists(), "{err}");
    // Positive control: the same command with the key at 0600.
    let mut child = start(0o600);
    let line = first_line(&mut child);
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let listen: std::net::SocketAddr = v["listen"].as_str().unwrap().parse().unwrap();
    let token = std::fs::read_to_string(&token_path).unwrap();
    let token = token.trim();
    assert_eq!(
        std::fs::metadata(&token_path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let auth = format!("Proxy-Authorization: Bearer {token}\r\n");
    // refused without the token
    let (_s, head) = connect(listen.port(), &format!("127.0.0.1:{origin}"), "");
    assert!(head.starts_with("HTTP/1.1 407"), "{head}");
    // a name outside the policy is refused
    let (_s, head) = connect(listen.port(), "evil.example.com:443", &auth);
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    // positive control: the loopback range allowed by allow_addresses tunnels
    let (mut s, head) = connect(listen.port(), &format!("127.0.0.1:{origin}"), &auth);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s.write_all(b"ping").unwrap();
    let mut b = [0u8; 4];
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ping");
    drop(s);
    std::thread::sleep(Duration::from_millis(200));
    sigterm(&child);
    let st = wait(&mut child);
    assert!(st.success(), "{st:?}");
    let bytes = std::fs::read(&journal).unwrap();
    let report = verify(&bytes, &key, None);
    assert_eq!(report.state(), JournalState::Closed, "{report:?}");
    let text = String::from_utf8(bytes).unwrap();
    assert_eq!(text.matches("\"egress_connection\"").count(), 3, "{text}");
    assert!(!text.contains(token), "the token never enters a record");
}

#[test]
fn proxy_refuses_to_start_without_an_auth_choice_or_with_a_bad_policy() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("palisade.toml");
    std::fs::write(&policy, "[egress]\nallow = [\"a.example.com\"]\n").unwrap();
    let out = palisade()
        .args(["proxy", "--policy"])
        .arg(&policy)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--token-file"));
    std::fs::write(&policy, "[egress]\nallow = [\"*\"]\nbogus = 1\n").unwrap();
    let out = palisade()
        .args(["proxy", "--policy"])
        .arg(&policy)
        .args(["--listen", "127.0.0.1:0", "--no-auth"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn relay_refuses_a_journal_key_others_can_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("palisade.toml");
    std::fs::write(
        &policy,
        "[egress]\n[[egress.relay]]\nname = \"model\"\norigin = \"https://127.0.0.1:9\"\nroutes = [\"POST /v1/messages\"]\ncredential = { header = \"x-api-key\", from_env = \"PALISADE_TEST_KEY\" }\n",
    )
    .unwrap();
    let key_path = dir.path().join("journal.key");
    std::fs::write(
        &key_path,
        JournalKey::generate().unwrap().expose_text().as_bytes(),
    )
    .unwrap();
    let journal = dir.path().join("relay.jsonl");
    let sock = dir.path().join("run/relay.sock");
    let ph_path = dir.path().join("placeholder");
    let secret: String = "YEK-TSET-LAER".chars().rev().collect();
    let start = |mode: u32| {
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(mode)).unwrap();
        palisade()
            .args(["relay", "--policy"])
            .arg(&policy)
            .args(["--name", "model", "--listen"])
            .arg(format!("unix:{}", sock.display()))
            .arg("--placeholder-file")
            .arg(&ph_path)
            .arg("--journal")
            .arg(&journal)
            .arg("--key")
            .arg(&key_path)
            .env("PALISADE_TEST_KEY", &secret)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let out = refused_output(start(0o640), "the relay started with a key others can read");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("accessible by other users"), "{err}");
    assert!(!sock.exists() && !ph_path.exists() && !journal.exists());
    // Positive control: the same relay with the key at 0600 serves.
    let mut child = start(0o600);
    let line = first_line(&mut child);
    assert!(line.contains("listening"), "{line}");
    sigterm(&child);
    let st = wait(&mut child);
    assert!(st.success(), "{st:?}");
    assert!(journal.exists());
}

#[test]
fn relay_serves_on_a_private_socket_and_stops_cleanly() {
    // A TLS upstream is not needed to prove the process wiring: a request
    // without the placeholder is refused by the relay itself (401), and one
    // with it reaches the dial step (502: nothing listens on the origin).
    let dir = tempfile::tempdir().unwrap();
    let closed_port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let policy = dir.path().join("palisade.toml");
    std::fs::write(
        &policy,
        format!(
            "[egress]\nallow_addresses = [\"127.0.0.0/8\"]\n[[egress.relay]]\nname = \"model\"\norigin = \"https://127.0.0.1:{closed_port}\"\nroutes = [\"POST /v1/messages\"]\ncredential = {{ header = \"x-api-key\", from_env = \"PALISADE_TEST_KEY\" }}\nlimits = {{ max_body = 8 }}\n"
        ),
    )
    .unwrap();
    let sock_dir = dir.path().join("run");
    let sock = sock_dir.join("relay.sock");
    let ph_path = dir.path().join("placeholder");
    let secret: String = "YEK-TSET-LAER".chars().rev().collect();
    let mut child = palisade()
        .args(["relay", "--policy"])
        .arg(&policy)
        .args(["--name", "model", "--listen"])
        .arg(format!("unix:{}", sock.display()))
        .arg("--placeholder-file")
        .arg(&ph_path)
        .env("PALISADE_TEST_KEY", &secret)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let line = first_line(&mut child);
    assert!(line.contains("listening"), "{line}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&sock_dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(
        std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let placeholder = std::fs::read_to_string(&ph_path).unwrap().trim().to_owned();
    // an `x-api-key` relay gets the Anthropic shape, as under `palisade run`
    assert!(placeholder.starts_with("sk-ant-api03-") && placeholder.len() == 108);
    let ask_with = |key: &str, body: &str| {
        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        write!(s, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: {key}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    let ask = |key: &str| ask_with(key, "{}");
    let refused = ask("wrong");
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    let dialled = ask(&placeholder);
    assert!(dialled.starts_with("HTTP/1.1 502"), "{dialled}");
    // the policy's `limits.max_body = 8` reaches the running relay
    let capped = ask_with(&placeholder, "{\"a\":\"0123456789\"}");
    assert!(capped.starts_with("HTTP/1.1 413"), "{capped}");
    assert!(capped.contains("body_too_large"), "{capped}");
    assert!(!dialled.contains(&secret));
    sigterm(&child);
    let st = wait(&mut child);
    assert!(st.success(), "{st:?}");
    assert!(!sock.exists(), "socket removed on stop");
}
