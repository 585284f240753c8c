//! `palisade run --policy` with an `anthropic_oauth` relay (issue 19): the
//! host reads the token file, refreshes the near-expiry token against a
//! loopback token endpoint, and the worker's curl, sending only the
//! `sk-ant-oat01-…` placeholder in `authorization`, reaches the fake
//! provider with the rotated access token; a wrong placeholder is
//! refused. An expired token whose refresh fails stops the launch before
//! the worker starts, and the message carries no token. Loopback only;
//! the tokens are stored reversed. Needs root (as CI runs it) and curl.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::print_stderr,
    clippy::disallowed_methods,
    reason = "tests"
)]

#[path = "../../examples/governed-worker/provider.rs"]
#[allow(dead_code, unreachable_pub, reason = "shared with the demo binary")]
mod provider;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn rev(s: &str) -> String {
    s.chars().rev().collect()
}
fn old_access() -> String {
    rev("DLO-SSECCA-edasilap-10tao-tna-ks")
}
fn refresh_token() -> String {
    rev("HSERFER-edasilap-10tro-tna-ks")
}
fn new_access() -> String {
    rev("WEN-SSECCA-edasilap-10tao-tna-ks")
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn skip() -> bool {
    let ci = std::env::var_os("CI").is_some();
    if !is_root() || !Path::new("/usr/bin/curl").exists() {
        assert!(!ci, "CI must run the credential suite as root with curl");
        eprintln!("skipped: needs root and /usr/bin/curl");
        return true;
    }
    false
}

/// A loopback token endpoint answering every request with `status` and
/// `body`; the number of requests.
async fn token_endpoint(status: u16, body: String) -> (u16, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let (h, body) = (h.clone(), body.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // the head, then Content-Length bytes of body
                loop {
                    let n = s.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_ascii_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len: usize = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                h.fetch_add(1, Ordering::SeqCst);
                let resp = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    (port, hits)
}

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

struct Setup {
    dir: tempfile::TempDir,
    work: PathBuf,
    tokens: PathBuf,
}

fn setup(provider_port: u16, token_port: u16, ca_pem: &str, expires_at: u64) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
    // the token file lives outside the worker's tree
    let host = dir.path().join("host");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o700)).unwrap();
    let tokens = host.join("claude-tokens.json");
    std::fs::write(
        &tokens,
        serde_json::json!({
            "access_token": old_access(),
            "refresh_token": refresh_token(),
            "expires_at": expires_at,
        })
        .to_string(),
    )
    .unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let policy = format!(
        r#"[worker]
profile = "governed"

[egress]
allow_addresses = ["127.0.0.0/8"]

[[egress.relay]]
name = "anthropic"
origin = "https://api.test:{provider_port}"
preset = "anthropic"
credential = {{ kind = "anthropic_oauth", from_file = "{}", token_url = "http://127.0.0.1:{token_port}/v1/oauth/token" }}
worker_env = {{ ANTHROPIC_AUTH_TOKEN = "placeholder" }}
"#,
        tokens.display()
    );
    std::fs::write(work.join("palisade.toml"), policy).unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca_pem).unwrap();
    let k = palisade_evidence::JournalKey::generate().unwrap();
    let key = dir.path().join("journal.key");
    std::fs::write(&key, k.expose_text().as_bytes()).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    Setup { dir, work, tokens }
}

fn run(s: &Setup, script: &str) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .arg("run")
        .args(["--profile", "governed", "--cwd"])
        .arg(&s.work)
        .arg("--policy")
        .arg(s.work.join("palisade.toml"))
        .arg("--journal")
        .arg(s.dir.path().join("run.journal"))
        .arg("--key")
        .arg(s.dir.path().join("journal.key"))
        .args(["--resolve", "api.test=127.0.0.1"])
        .arg("--relay-ca")
        .arg(s.dir.path().join("ca.pem"))
        .arg("--stage-dir")
        .arg(s.dir.path().join("stages"))
        .args(["--", "/bin/sh", "-c", script])
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The worker: curl with the placeholder, then with a wrong one of the
/// same shape; prints each status.
const SCRIPT: &str = r#"U="$PALISADE_RELAY_ANTHROPIC_URL/v1/messages"
echo "shape=${ANTHROPIC_AUTH_TOKEN%%${ANTHROPIC_AUTH_TOKEN#sk-ant-oat01-}}"
good=$(curl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer $ANTHROPIC_AUTH_TOKEN" -H 'content-type: application/json' -d '{"model":"m"}' "$U")
echo "good=$good"
bad=$(curl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer sk-ant-oat01-wrongwrongwrongwrongwrongwrongAA" -H "x-api-key: $ANTHROPIC_AUTH_TOKEN" -d '{}' "$U")
echo "bad=$bad"
"#;

#[test]
fn an_anthropic_oauth_relay_carries_the_host_refreshed_token_for_the_placeholder() {
    if skip() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(provider::start(0, &["api.test"])).unwrap();
    let answer = serde_json::json!({"access_token": new_access(), "refresh_token": rev("WEN-HSERFER-10tro-tna-ks"), "expires_in": 28800}).to_string();
    let (token_port, hits) = rt.block_on(token_endpoint(200, answer));
    // expires in one minute: the host refreshes before the launch
    let s = setup(
        fake.addr.port(),
        token_port,
        &fake.ca_pem,
        now_ms() + 60_000,
    );
    let (code, out, err) = run(&s, SCRIPT);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("shape=sk-ant-oat01-"), "{out}");
    assert!(out.contains("good=200"), "{out}\n{err}");
    assert!(
        out.contains("bad=401"),
        "a wrong placeholder is refused: {out}"
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "refreshed once, by the host"
    );
    let seen = fake.seen();
    assert_eq!(
        seen.len(),
        1,
        "only the placeholder's request went upstream: {seen:?}"
    );
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some(format!("Bearer {}", new_access()).as_str()),
        "the rotated token upstream"
    );
    assert_eq!(seen[0].x_api_key, None);
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&s.tokens).unwrap()).unwrap();
    assert_eq!(saved["access_token"], new_access());
    for secret in [old_access(), new_access(), refresh_token()] {
        assert!(
            !out.contains(&secret) && !err.contains(&secret),
            "no token in the output"
        );
    }
}

#[test]
fn an_expired_token_whose_refresh_fails_stops_the_launch_without_the_token() {
    if skip() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(provider::start(0, &["api.test"])).unwrap();
    let echo = serde_json::json!({"error": "invalid_grant", "error_description": refresh_token()})
        .to_string();
    let (token_port, hits) = rt.block_on(token_endpoint(400, echo));
    let s = setup(fake.addr.port(), token_port, &fake.ca_pem, now_ms() - 1000);
    let marker = s.work.join("worker-ran");
    let (code, out, err) = run(&s, "touch worker-ran; echo started");
    assert_ne!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        !marker.exists() && !out.contains("started"),
        "the worker never started"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert!(
        err.contains("relay `anthropic`")
            && err.contains("has expired")
            && err.contains("invalid_grant"),
        "{err}"
    );
    assert!(
        err.contains("use `kind = \"api_key\"`"),
        "says what to use instead: {err}"
    );
    for secret in [old_access(), refresh_token()] {
        assert!(
            !out.contains(&secret) && !err.contains(&secret),
            "no token in: {err}"
        );
    }
    assert!(fake.seen().is_empty());
}
