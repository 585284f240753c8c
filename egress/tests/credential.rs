//! The OAuth credential kinds (issue 19): the Anthropic OAuth relay path
//! (placeholder in `authorization`, Bearer token and the beta flag
//! upstream), the placeholder shapes, the kinds a relay refuses, and the
//! host token files: refreshed once under a race, rotated atomically with
//! mode 0600, and errors that never carry a token.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use common::*;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use palisade_egress::addr::AddressPolicy;
use palisade_egress::proxy::shutdown_channel;
use palisade_egress::record::MemoryRecorder;
use palisade_egress::relay::{
    Credential, CredentialKind, Placeholder, PlaceholderFormat, PrivateSocket, Relay, RelayConfig,
    RelayConfigError, Route, Secret, chatgpt_auth_json,
};
use palisade_egress::resolve::StaticResolver;
use palisade_egress::token::{TokenError, TokenSource, fetch, jwt_account_id};
use tokio::net::UnixStream;

/// Secrets, stored reversed so a leak scan cannot match this file.
fn access_token() -> String {
    "SSECCA-HTUAO-LAER-10tao-tna-ks".chars().rev().collect()
}
fn refresh_token() -> String {
    "HSERFER-HTUAO-LAER-10tro-tna-ks".chars().rev().collect()
}
fn new_access() -> String {
    "SSECCA-DETATOR-10tao-tna-ks".chars().rev().collect()
}
fn new_refresh() -> String {
    "HSERFER-DETATOR-10tro-tna-ks".chars().rev().collect()
}

type Seen = Arc<Mutex<Vec<Vec<(String, String)>>>>;

/// A TLS upstream for `api.test` keeping every request's headers.
async fn upstream() -> (
    std::net::SocketAddr,
    rustls::pki_types::CertificateDer<'static>,
    Seen,
) {
    let (l, acceptor, cert) = tls_listener(&["api.test"], &[b"http/1.1"]).await;
    let addr = l.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let seen2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let acceptor = acceptor.clone();
            let seen = seen2.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let headers = req
                            .headers()
                            .iter()
                            .map(|(k, v)| {
                                (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())
                            })
                            .collect();
                        seen.lock().unwrap().push(headers);
                        let _ = req.into_body().collect().await;
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(
                            Bytes::from_static(b"{}"),
                        )))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, cert, seen)
}

struct Running {
    sock: std::path::PathBuf,
    placeholder: String,
    seen: Seen,
    recorder: Arc<MemoryRecorder>,
    _tmp: tempfile::TempDir,
}

async fn oauth_relay() -> Running {
    oauth_relay_of(
        CredentialKind::AnthropicOauth,
        &PlaceholderFormat::anthropic_oauth(),
        "POST /v1/messages",
    )
    .await
}

async fn oauth_relay_of(kind: CredentialKind, format: &PlaceholderFormat, route: &str) -> Running {
    let (addr, cert, seen) = upstream().await;
    let origin =
        palisade_schema::host_policy::Origin::parse(&format!("https://api.test:{}", addr.port()))
            .unwrap();
    let credential = Credential::oauth(kind, Secret::new(access_token())).unwrap();
    let placeholder = Placeholder::generate(format).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let mut config = RelayConfig::new(
        "anthropic",
        origin,
        vec![Route::parse(route).unwrap()],
        credential,
        placeholder.clone(),
    )
    .unwrap()
    .with_roots(roots)
    .unwrap();
    config.addresses = AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
    let recorder = Arc::new(MemoryRecorder::new());
    let resolver =
        Arc::new(StaticResolver::new().with("api.test", &["127.0.0.1".parse().unwrap()]));
    let relay = Relay::new(config, resolver, recorder.clone());
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("relay").join("relay.sock");
    let socket = PrivateSocket::bind(&sock).unwrap();
    let (shutdown, signal) = shutdown_channel();
    tokio::spawn(async move {
        relay.serve(&socket, signal).await.unwrap();
        drop(socket);
    });
    std::mem::forget(shutdown);
    Running {
        sock,
        placeholder: placeholder.expose().to_owned(),
        seen,
        recorder,
        _tmp: tmp,
    }
}

async fn send(sock: &Path, req: Request<Full<Bytes>>) -> (StatusCode, String) {
    let stream = UnixStream::connect(sock).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
        .await
        .unwrap()
        .unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn messages(bearer: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method("POST")
        .uri("/v1/messages")
        .header("host", "localhost")
        .header("authorization", format!("Bearer {bearer}"))
        .header("x-api-key", "worker-key")
        .header("anthropic-beta", "tools-2024, oauth-2025-04-20")
        .header("anthropic-beta", "files-api")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{\"model\":\"m\"}")))
        .unwrap()
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    h.iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

#[tokio::test]
async fn anthropic_oauth_placeholder_in_authorization_becomes_the_bearer_token_and_beta_flag() {
    let r = oauth_relay().await;
    // control first: a wrong placeholder in the right header is refused
    let wrong = Placeholder::generate(&PlaceholderFormat::anthropic_oauth()).unwrap();
    let (status, body) = send(&r.sock, messages(wrong.expose())).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("placeholder_required"), "{body}");
    // the placeholder in `x-api-key` (where an API key goes) is not enough
    let mut in_key = messages("nothing");
    in_key
        .headers_mut()
        .insert("x-api-key", r.placeholder.parse().unwrap());
    let (status, _) = send(&r.sock, in_key).await;
    assert_eq!(status, 401);
    assert!(r.seen.lock().unwrap().is_empty(), "nothing went upstream");

    let (status, body) = send(&r.sock, messages(&r.placeholder)).await;
    assert_eq!(status, 200, "{body}");
    let seen = r.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let h = &seen[0];
    assert_eq!(
        header(h, "authorization"),
        [format!("Bearer {}", access_token()).as_str()],
        "the real access token upstream"
    );
    assert!(
        header(h, "x-api-key").is_empty(),
        "the worker's x-api-key is stripped"
    );
    assert_eq!(
        header(h, "anthropic-beta"),
        ["tools-2024,oauth-2025-04-20,files-api"],
        "the worker's flags merged with the OAuth flag, each once"
    );
    // no secret in any record
    let records = format!("{:?}", r.recorder.events());
    assert!(!records.contains(&access_token()) && !records.contains(&r.placeholder));
}

#[tokio::test]
async fn the_oauth_beta_flag_is_added_when_the_worker_sent_none() {
    let r = oauth_relay().await;
    let mut req = messages(&r.placeholder);
    req.headers_mut().remove("anthropic-beta");
    let (status, body) = send(&r.sock, req).await;
    assert_eq!(status, 200, "{body}");
    let seen = r.seen.lock().unwrap().clone();
    assert_eq!(header(&seen[0], "anthropic-beta"), ["oauth-2025-04-20"]);
}

fn decode_jwt_part(part: &str) -> serde_json::Value {
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .unwrap(),
    )
    .unwrap()
}

#[test]
fn placeholder_shapes_follow_the_credential_kind() {
    let oat = Placeholder::generate(&PlaceholderFormat::anthropic_oauth()).unwrap();
    let v = oat.expose();
    assert!(v.starts_with("sk-ant-oat01-") && v.ends_with("AA"), "{v}");
    assert_eq!(v.len(), 108);

    let jwt = Placeholder::generate(&PlaceholderFormat::chatgpt("acct-1234")).unwrap();
    let parts: Vec<&str> = jwt.expose().split('.').collect();
    assert_eq!(parts.len(), 3, "header.payload.signature");
    assert_eq!(decode_jwt_part(parts[0])["typ"], "JWT");
    let payload = decode_jwt_part(parts[1]);
    assert_eq!(
        payload["https://api.openai.com/auth"]["chatgpt_account_id"],
        "acct-1234"
    );
    assert!(
        payload["exp"].as_u64().unwrap() > 4_000_000_000,
        "exp far ahead"
    );
    assert_eq!(jwt_account_id(jwt.expose()).as_deref(), Some("acct-1234"));
    let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(parts[2])
        .unwrap();
    assert_eq!(sig.len(), 64);
    // random per session, and stable when derived
    let other = Placeholder::generate(&PlaceholderFormat::chatgpt("acct-1234")).unwrap();
    assert_ne!(jwt.expose(), other.expose());
    let f = PlaceholderFormat::chatgpt("acct-1234");
    let a = Placeholder::derive(b"host-key", "codex", &f);
    assert_eq!(
        a.expose(),
        Placeholder::derive(b"host-key", "codex", &f).expose()
    );
    assert_ne!(
        a.expose(),
        Placeholder::derive(b"other-key", "codex", &f).expose()
    );
    assert_eq!(jwt_account_id(a.expose()).as_deref(), Some("acct-1234"));

    let auth: serde_json::Value =
        serde_json::from_str(&chatgpt_auth_json(&jwt, "acct-1234", 1_767_225_600)).unwrap();
    assert_eq!(auth["OPENAI_API_KEY"], serde_json::Value::Null);
    assert_eq!(auth["tokens"]["access_token"], jwt.expose());
    assert_eq!(auth["tokens"]["account_id"], "acct-1234");
    assert_eq!(auth["tokens"]["refresh_token"], "");
    assert_eq!(auth["last_refresh"], "2026-01-01T00:00:00Z");
}

fn policy(text: &str) -> palisade_schema::host_policy::HostPolicy {
    palisade_schema::host_policy::parse("palisade.toml", text)
        .map_err(|d| d.iter().map(ToString::to_string).collect::<Vec<_>>())
        .unwrap()
        .into_value()
}

fn relay_toml(preset: &str, credential: &str) -> String {
    format!(
        "[[egress.relay]]\nname = \"p\"\norigin = \"https://api.example.com\"\npreset = \"{preset}\"\ncredential = {{ {credential} }}\n"
    )
}

fn from_policy(preset: &str, credential: &str) -> Result<RelayConfig, RelayConfigError> {
    let p = policy(&relay_toml(preset, credential));
    RelayConfig::from_policy(&p.egress.relays[0], Secret::new(access_token()))
}

#[test]
fn a_relay_refuses_a_credential_kind_it_cannot_carry_and_says_what_to_use() {
    let oat = "kind = \"anthropic_oauth\", from_file = \"/h/t.json\"";
    let gpt = "kind = \"chatgpt\", from_file = \"/h/t.json\"";
    let key = "header = \"authorization\", prefix = \"Bearer \", from_env = \"K\"";
    // positive controls: each kind on its own provider's preset
    let c = from_policy("anthropic", oat).unwrap();
    assert_eq!(c.credential().kind(), CredentialKind::AnthropicOauth);
    assert!(c.placeholder().expose().starts_with("sk-ant-oat01-"));
    let c = from_policy("chatgpt", gpt).unwrap();
    assert_eq!(c.credential().kind(), CredentialKind::ChatGpt);
    assert_eq!(c.placeholder().expose().split('.').count(), 3);
    from_policy("openai", key).unwrap();
    for (preset, cred, hint) in [
        ("anthropic", gpt, "preset = \"chatgpt\""),
        ("openai", gpt, "preset = \"chatgpt\""),
        ("openai", oat, "preset = \"anthropic\""),
        ("chatgpt", oat, "preset = \"anthropic\""),
        ("chatgpt", key, "kind = \"chatgpt\""),
    ] {
        let e = from_policy(preset, cred)
            .err()
            .unwrap_or_else(|| panic!("{preset} {cred}"));
        let msg = e.to_string();
        assert!(matches!(e, RelayConfigError::Kind { .. }), "{msg}");
        assert!(msg.contains(hint), "`{msg}` says what to use: {hint}");
        assert!(!msg.contains(&access_token()));
    }
}

/// A loopback token endpoint: counts requests, answers after `delay`
/// with `status` and `body`, keeps the request bodies.
struct TokenEndpoint {
    url: String,
    hits: Arc<AtomicUsize>,
    bodies: Arc<Mutex<Vec<String>>>,
}

async fn token_endpoint(status: u16, body: String, delay: Duration) -> TokenEndpoint {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://127.0.0.1:{}/v1/oauth/token",
        l.local_addr().unwrap().port()
    );
    let hits = Arc::new(AtomicUsize::new(0));
    let bodies: Arc<Mutex<Vec<String>>> = Arc::default();
    let (h2, b2) = (hits.clone(), bodies.clone());
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let (hits, bodies, body) = (h2.clone(), b2.clone(), body.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (hits, bodies, body) = (hits.clone(), bodies.clone(), body.clone());
                    async move {
                        hits.fetch_add(1, Ordering::SeqCst);
                        let got = req.into_body().collect().await.unwrap().to_bytes();
                        bodies
                            .lock()
                            .unwrap()
                            .push(String::from_utf8_lossy(&got).into_owned());
                        tokio::time::sleep(delay).await;
                        Ok::<_, std::convert::Infallible>(
                            Response::builder()
                                .status(status)
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(body)))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    TokenEndpoint { url, hits, bodies }
}

const NOW_MS: u64 = 1_800_000_000_000;

fn write_tokens(path: &Path, doc: &serde_json::Value) {
    std::fs::write(path, doc.to_string()).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn rotated_answer() -> String {
    serde_json::json!({
        "access_token": new_access(),
        "refresh_token": new_refresh(),
        "expires_in": 28_800,
        "token_type": "Bearer",
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_near_expiry_token_is_refreshed_once_when_two_launchers_race() {
    let ep = token_endpoint(200, rotated_answer(), Duration::from_millis(300)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.json");
    write_tokens(
        &path,
        &serde_json::json!({
            "access_token": access_token(),
            "refresh_token": refresh_token(),
            "expires_at": NOW_MS + 60_000,
        }),
    );
    let source = TokenSource::new(&path, CredentialKind::AnthropicOauth, Some(&ep.url)).unwrap();
    let (s1, s2) = (source.clone(), source.clone());
    let a = tokio::spawn(async move { fetch(&s1, NOW_MS).await });
    let b = tokio::spawn(async move { fetch(&s2, NOW_MS).await });
    let (a, b) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
    assert_eq!(
        ep.hits.load(Ordering::SeqCst),
        1,
        "one refresh for two launchers"
    );
    assert_eq!(a.access_token.expose(), new_access());
    assert_eq!(b.access_token.expose(), new_access());
    assert!(
        a.refreshed != b.refreshed,
        "the second used the first one's result"
    );
    // the refresh request Anthropic expects
    let sent: serde_json::Value = serde_json::from_str(&ep.bodies.lock().unwrap()[0]).unwrap();
    assert_eq!(sent["grant_type"], "refresh_token");
    assert_eq!(sent["refresh_token"], refresh_token());
    assert_eq!(sent["client_id"], "9d1c250a-e61b-44d9-88ed-5944d1962f5e");
    // rotated in place: the new pair, the expiry, mode 0600, no temp file
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(saved["access_token"], new_access());
    assert_eq!(saved["refresh_token"], new_refresh());
    assert_eq!(saved["expires_at"], NOW_MS + 28_800_000);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| n == "tokens.json" || n == "tokens.json.lock"),
        "{names:?}"
    );
    // control: a fresh token is used as it is, without a refresh
    let again = fetch(&source, NOW_MS).await.unwrap();
    assert!(!again.refreshed);
    assert_eq!(ep.hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn claude_codes_credentials_file_is_read_and_rotated_in_its_own_shape() {
    let ep = token_endpoint(200, rotated_answer(), Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".credentials.json");
    write_tokens(
        &path,
        &serde_json::json!({"claudeAiOauth": {
            "accessToken": access_token(),
            "refreshToken": refresh_token(),
            "expiresAt": NOW_MS - 1,
            "scopes": ["user:inference"],
        }}),
    );
    let source = TokenSource::new(&path, CredentialKind::AnthropicOauth, Some(&ep.url)).unwrap();
    let got = fetch(&source, NOW_MS).await.unwrap();
    assert!(got.refreshed);
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(saved["claudeAiOauth"]["accessToken"], new_access());
    assert_eq!(saved["claudeAiOauth"]["refreshToken"], new_refresh());
    assert_eq!(
        saved["claudeAiOauth"]["scopes"][0], "user:inference",
        "other keys kept"
    );
}

#[tokio::test]
async fn codex_auth_json_gives_the_account_id_and_refreshes_with_codexs_client() {
    let jwt = |exp: u64| {
        let b = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.{}",
            b.encode("{\"alg\":\"none\"}"),
            b.encode(
                serde_json::json!({"exp": exp, "https://api.openai.com/auth": {"chatgpt_account_id": "acct-9"}})
                    .to_string()
            ),
            b.encode(access_token())
        )
    };
    let answer = serde_json::json!({"access_token": jwt(NOW_MS / 1000 + 3600), "refresh_token": new_refresh(), "id_token": "x.y.z"}).to_string();
    let ep = token_endpoint(200, answer, Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.json");
    write_tokens(
        &path,
        &serde_json::json!({"OPENAI_API_KEY": null, "tokens": {
            "id_token": "a.b.c", "access_token": jwt(NOW_MS / 1000 + 60),
            "refresh_token": refresh_token(), "account_id": "acct-9"}, "last_refresh": "2020-01-01T00:00:00Z"}),
    );
    let source = TokenSource::new(&path, CredentialKind::ChatGpt, Some(&ep.url)).unwrap();
    let got = fetch(&source, NOW_MS).await.unwrap();
    assert!(got.refreshed, "exp within 5 minutes");
    assert_eq!(got.account_id.as_deref(), Some("acct-9"));
    assert_eq!(got.expires_at, Some((NOW_MS / 1000 + 3600) * 1000));
    let sent: serde_json::Value = serde_json::from_str(&ep.bodies.lock().unwrap()[0]).unwrap();
    assert_eq!(sent["client_id"], "app_EMoamEEZ73f0CkXaXp7hrann");
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(saved["tokens"]["refresh_token"], new_refresh());
    assert_ne!(saved["last_refresh"], "2020-01-01T00:00:00Z");
}

#[tokio::test]
async fn an_expired_token_whose_refresh_fails_is_refused_without_any_token_in_the_message() {
    // the endpoint echoes the refresh token in its error description
    let echo = serde_json::json!({
        "error": "invalid_grant",
        "error_description": format!("bad token {}", refresh_token()),
    })
    .to_string();
    let ep = token_endpoint(400, echo, Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.json");
    let doc = serde_json::json!({
        "access_token": access_token(),
        "refresh_token": refresh_token(),
        "expires_at": NOW_MS - 1000,
    });
    write_tokens(&path, &doc);
    let source = TokenSource::new(&path, CredentialKind::AnthropicOauth, Some(&ep.url)).unwrap();
    let e = fetch(&source, NOW_MS).await.unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, TokenError::Refresh { .. }), "{msg}");
    assert!(
        msg.contains("has expired") && msg.contains("HTTP 400 (invalid_grant)"),
        "{msg}"
    );
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    for secret in [access_token(), refresh_token()] {
        assert!(!msg.contains(&secret), "no token in: {msg}");
        assert!(!format!("{e:?}").contains(&secret));
    }
    assert_eq!(ep.hits.load(Ordering::SeqCst), 1);
    let kept: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(kept, doc, "the file is left as it was");
    // a missing file: named, refused
    let missing = TokenSource::new(
        &dir.path().join("nope.json"),
        CredentialKind::AnthropicOauth,
        None,
    )
    .unwrap();
    let e = fetch(&missing, NOW_MS).await.unwrap_err();
    assert!(e.to_string().contains("nope.json"), "{e}");
}

#[tokio::test]
async fn a_chatgpt_jwt_placeholder_becomes_the_access_token_and_the_account_header_passes() {
    let format = PlaceholderFormat::chatgpt("acct-77");
    let r = oauth_relay_of(
        CredentialKind::ChatGpt,
        &format,
        "POST /backend-api/codex/responses",
    )
    .await;
    let req = |bearer: &str| {
        Request::builder()
            .method("POST")
            .uri("/backend-api/codex/responses")
            .header("host", "localhost")
            .header("authorization", format!("Bearer {bearer}"))
            .header("chatgpt-account-id", "acct-77")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap()
    };
    // control: another JWT for the same account is not the placeholder
    let other = Placeholder::generate(&format).unwrap();
    let (status, body) = send(&r.sock, req(other.expose())).await;
    assert_eq!(status, 401, "{body}");
    assert!(r.seen.lock().unwrap().is_empty());
    let (status, body) = send(&r.sock, req(&r.placeholder)).await;
    assert_eq!(status, 200, "{body}");
    let seen = r.seen.lock().unwrap().clone();
    assert_eq!(
        header(&seen[0], "authorization"),
        [format!("Bearer {}", access_token()).as_str()]
    );
    assert_eq!(header(&seen[0], "chatgpt-account-id"), ["acct-77"]);
    assert!(
        header(&seen[0], "anthropic-beta").is_empty(),
        "no Anthropic flag on ChatGPT"
    );
}
