//! Host relay tests on loopback, mirroring the inference-relay proofs
//! (governed-workers.md §18.2): real relay socket, a local TLS upstream with
//! an rcgen certificate, an HTTP/1.1 client over the Unix socket.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use common::*;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use palisade_egress::addr::AddressPolicy;
use palisade_egress::proxy::{Shutdown, shutdown_channel};
use palisade_egress::record::{Acceptance, MemoryRecorder, ProxyEvent, Recorder, RelayOutcome};
use palisade_egress::relay::{
    Credential, Placeholder, PlaceholderFormat, PrivateSocket, Relay, RelayConfig, Route, Secret,
};
use palisade_egress::resolve::StaticResolver;
use tokio::io::AsyncWriteExt as _;
use tokio::net::UnixStream;

/// The real credential, stored reversed so a leak scan cannot match this file.
fn real_key() -> String {
    "YEK-ECNEREFNI-LAER-edisilap-ks".chars().rev().collect()
}

#[derive(Clone, Debug)]
struct Seen {
    method: String,
    uri: String,
    headers: Vec<(String, String)>,
    body_len: usize,
}

impl Seen {
    fn header(&self, n: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.as_str())
    }
}

/// A TLS upstream for `api.test` that records every request it receives.
async fn upstream() -> (
    std::net::SocketAddr,
    rustls::pki_types::CertificateDer<'static>,
    Arc<Mutex<Vec<Seen>>>,
) {
    let (l, acceptor, cert) = tls_listener(&["api.test"], &[b"http/1.1"]).await;
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
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
                        let method = req.method().to_string();
                        let uri = req.uri().to_string();
                        let headers = req
                            .headers()
                            .iter()
                            .map(|(k, v)| {
                                (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())
                            })
                            .collect();
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        seen.lock().unwrap().push(Seen {
                            method,
                            uri: uri.clone(),
                            headers,
                            body_len: body.len(),
                        });
                        let reflected = headers_of(&seen, &uri);
                        let resp = if uri.starts_with("/v1/reflect") {
                            // an origin that echoes the credential back in headers
                            let key = reflected.unwrap_or_default();
                            let b64 = base64::engine::general_purpose::STANDARD.encode(&key);
                            let part = key.get(5..20).unwrap_or_default().to_owned();
                            Response::builder()
                                .status(200)
                                .header("x-echo-key", key.as_str())
                                .header("x-echo-partial", format!("seen {part} here"))
                                .header("x-echo-b64", b64)
                                .header("x-echo-upper", key.to_ascii_uppercase())
                                .header("x-echo-hex", hex_of(key.as_bytes()))
                                .header(
                                    "x-echo-b64-shifted",
                                    base64::engine::general_purpose::STANDARD
                                        .encode(format!("key: {key}")),
                                )
                                .header(
                                    "x-echo-b64-shifted-1",
                                    base64::engine::general_purpose::URL_SAFE
                                        .encode(format!("k={key}")),
                                )
                                .header("x-echo-pct", pct_all(key.as_bytes()))
                                .extension(
                                    hyper::ext::ReasonPhrase::try_from(format!("OK {key}"))
                                        .unwrap(),
                                )
                                .header("x-upstream", "yes")
                                .header("x-request-id", "req_0123456789abcdefghij")
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from_static(b"{}")))
                                .unwrap()
                        } else if uri.starts_with("/v1/redirect") {
                            Response::builder()
                                .status(302)
                                .header("location", "https://elsewhere.test/steal")
                                .body(Full::new(Bytes::new()))
                                .unwrap()
                        } else {
                            Response::builder()
                                .status(200)
                                .header("set-cookie", "session=upstream")
                                .header("x-upstream", "yes")
                                .body(Full::new(Bytes::from(format!(
                                    "{{\"received\":{}}}",
                                    body.len()
                                ))))
                                .unwrap()
                        };
                        Ok::<_, std::convert::Infallible>(resp)
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

/// Lowercase hex of every byte.
fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Every byte percent-encoded.
fn pct_all(b: &[u8]) -> String {
    b.iter().map(|x| format!("%{x:02X}")).collect()
}

/// The credential header the upstream saw on its latest request to `uri`.
fn headers_of(seen: &Mutex<Vec<Seen>>, uri: &str) -> Option<String> {
    seen.lock()
        .unwrap()
        .iter()
        .rev()
        .find(|s| s.uri == uri)
        .and_then(|s| s.header("x-api-key").map(str::to_owned))
}

struct TestRelay {
    relay: Relay,
    sock: PathBuf,
    dir: PathBuf,
    placeholder: String,
    recorder: Arc<MemoryRecorder>,
    seen: Arc<Mutex<Vec<Seen>>>,
    shutdown: Shutdown,
    task: tokio::task::JoinHandle<()>,
    _tmp: tempfile::TempDir,
}

async fn start_relay(max_body: usize, addresses: AddressPolicy) -> TestRelay {
    start_relay_with(|c| {
        c.max_body = max_body;
        c.addresses = addresses;
    })
    .await
}

async fn start_relay_with(configure: impl FnOnce(&mut RelayConfig)) -> TestRelay {
    start_relay_recorded(configure, |m| m).await
}

/// A relay whose records go through `wrap` (to the kept memory recorder).
async fn start_relay_recorded(
    configure: impl FnOnce(&mut RelayConfig),
    wrap: impl FnOnce(Arc<MemoryRecorder>) -> Arc<dyn Recorder>,
) -> TestRelay {
    let (addr, cert, seen) = upstream().await;
    let origin =
        palisade_schema::host_policy::Origin::parse(&format!("https://api.test:{}", addr.port()))
            .unwrap();
    let routes = [
        "POST /v1/messages",
        "POST /v1/messages/count_tokens",
        "POST /v1/redirect",
        "POST /v1/reflect",
    ]
    .iter()
    .map(|r| Route::parse(r).unwrap())
    .collect();
    let credential = Credential::new("x-api-key", "", Secret::new(real_key())).unwrap();
    let placeholder = Placeholder::generate(&PlaceholderFormat::anthropic()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let mut config = RelayConfig::new("anthropic", origin, routes, credential, placeholder.clone())
        .unwrap()
        .with_roots(roots)
        .unwrap();
    config.addresses = loopback();
    configure(&mut config);
    let recorder = Arc::new(MemoryRecorder::new());
    let resolver =
        Arc::new(StaticResolver::new().with("api.test", &["127.0.0.1".parse().unwrap()]));
    let relay = Relay::new(config, resolver, wrap(recorder.clone()));
    let handle = relay.clone();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("relay");
    let sock = dir.join("relay.sock");
    let socket = PrivateSocket::bind(&sock).unwrap();
    let (shutdown, signal) = shutdown_channel();
    let task = tokio::spawn(async move {
        relay.serve(&socket, signal).await.unwrap();
        drop(socket);
    });
    TestRelay {
        relay: handle,
        sock,
        dir,
        placeholder: placeholder.expose().to_owned(),
        recorder,
        seen,
        shutdown,
        task,
        _tmp: tmp,
    }
}

fn loopback() -> AddressPolicy {
    AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()])
}

async fn send(sock: &Path, req: Request<Full<Bytes>>) -> (StatusCode, http::HeaderMap, String) {
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
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

fn post(path: &str, key: &str, body: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method("POST")
        .uri(path)
        .header("host", "localhost")
        .header("x-api-key", key)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

#[tokio::test]
async fn forwards_with_the_host_credential_and_none_of_the_workers() {
    let r = start_relay(1 << 20, loopback()).await;
    let req = Request::builder()
        .method("POST")
        .uri("/v1/messages?beta=true")
        .header("host", "odysseus-exfil.example")
        .header("x-api-key", &r.placeholder)
        .header("authorization", "Bearer worker-token")
        .header("cookie", "a=b")
        .header("x-forwarded-for", "10.0.0.1")
        .header("proxy-authorization", "Basic eDp5")
        .header("anthropic-version", "2023-06-01")
        .header("connection", "x-hop")
        .header("x-hop", "1")
        .body(Full::new(Bytes::from_static(b"{\"model\":\"m\"}")))
        .unwrap();
    let (status, headers, body) = send(&r.sock, req).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "{\"received\":13}");
    assert!(
        headers.get("set-cookie").is_none(),
        "upstream set-cookie is not returned"
    );
    assert_eq!(headers.get("x-upstream").unwrap(), "yes");
    let seen = r.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let s = &seen[0];
    assert_eq!(
        (s.method.as_str(), s.uri.as_str()),
        ("POST", "/v1/messages?beta=true")
    );
    assert_eq!(
        s.header("x-api-key"),
        Some(real_key().as_str()),
        "CREDENTIAL_REPLACED"
    );
    let host = s.header("host").unwrap();
    assert!(
        host.starts_with("api.test:") && !host.contains("exfil"),
        "worker Host ignored: {host}"
    );
    for gone in [
        "authorization",
        "cookie",
        "x-forwarded-for",
        "proxy-authorization",
        "x-hop",
    ] {
        assert!(s.header(gone).is_none(), "{gone} must be stripped");
    }
    assert_eq!(s.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(s.body_len, 13);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let recs = r.recorder.relays();
    assert_eq!(recs.len(), 1);
    assert_eq!(
        (
            recs[0].method.as_str(),
            recs[0].path.as_str(),
            recs[0].outcome,
            recs[0].status
        ),
        ("POST", "/v1/messages", RelayOutcome::Forwarded, 200)
    );
    assert_eq!((recs[0].bytes_up, recs[0].bytes_down), (13, 15));
    let json = palisade_egress::record::ProxyEvent::Relay(recs[0].clone())
        .to_json()
        .to_string();
    assert!(
        !json.contains(&real_key()) && !json.contains(&r.placeholder) && !json.contains("beta"),
        "{json}"
    );
}

#[tokio::test]
async fn refuses_routes_without_reaching_the_upstream() {
    let r = start_relay(1 << 20, loopback()).await;
    let cases: [(&str, &str, u16, &str); 5] = [
        ("GET", "/v1/messages", 405, "method_not_allowed"),
        ("POST", "/v1/files", 403, "route_not_allowed"),
        ("POST", "/v1/messages/batches", 403, "route_not_allowed"),
        (
            "POST",
            "/v1/messages/../../v1/files",
            403,
            "route_not_allowed",
        ),
        ("POST", "/V1/MESSAGES", 403, "route_not_allowed"),
    ];
    for (m, p, want, code) in cases {
        let req = Request::builder()
            .method(m)
            .uri(p)
            .header("host", "localhost")
            .header("x-api-key", &r.placeholder)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (status, headers, body) = send(&r.sock, req).await;
        assert_eq!(status.as_u16(), want, "{m} {p}: {body}");
        assert_eq!(headers.get("content-type").unwrap(), "application/json");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "palisade_relay_refused");
        assert_eq!(v["error"]["code"], code, "{m} {p}");
    }
    assert!(
        r.seen.lock().unwrap().is_empty(),
        "RELAY_REFUSED_BEFORE_UPSTREAM"
    );
    assert_eq!(r.recorder.relays().len(), 5);
    assert!(
        r.recorder
            .relays()
            .iter()
            .all(|x| x.outcome == RelayOutcome::Refused)
    );
    // positive control: the exact route is forwarded
    let (status, _, _) = send(
        &r.sock,
        post("/v1/messages/count_tokens", &r.placeholder, "{}"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(r.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn never_follows_an_upstream_redirect() {
    let r = start_relay(1 << 20, loopback()).await;
    let (status, headers, body) = send(&r.sock, post("/v1/redirect", &r.placeholder, "{}")).await;
    assert_eq!(status, 502, "{body}");
    assert!(headers.get("location").is_none());
    assert!(body.contains("redirect_refused"), "{body}");
    assert_eq!(
        r.seen.lock().unwrap().len(),
        1,
        "exactly one upstream request, no follow"
    );
    // positive control
    let (status, _, _) = send(&r.sock, post("/v1/messages", &r.placeholder, "{}")).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn refuses_an_oversized_body_before_forwarding() {
    let r = start_relay(1024, loopback()).await;
    // declared too large
    let (status, _, body) = send(
        &r.sock,
        post("/v1/messages", &r.placeholder, &"a".repeat(1025)),
    )
    .await;
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("body_too_large"));
    // streamed (chunked, no Content-Length) too large
    let stream = UnixStream::connect(&r.sock).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let chunks = futures_chunks(3, 600);
    let req = Request::builder()
        .method("POST")
        .uri("/v1/messages")
        .header("x-api-key", &r.placeholder)
        .body(chunks)
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 413);
    assert!(r.seen.lock().unwrap().is_empty());
    let recs = records_settled(&r, 2).await;
    assert_eq!(
        reasons(&recs),
        [
            (413, "body_too_large".to_owned()),
            (413, "body_too_large".to_owned())
        ]
    );
    assert_eq!(
        r.relay.buffered_bytes(),
        0,
        "the refused bodies were released"
    );
    // positive control: exactly at the limit passes
    let (status, _, body) = send(
        &r.sock,
        post("/v1/messages", &r.placeholder, &"a".repeat(1024)),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

/// A body of `n` chunks of `size` bytes with no declared length (chunked).
struct Chunks {
    left: usize,
    size: usize,
}

impl hyper::body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        self.left -= 1;
        std::task::Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'a'; self.size])))))
    }
}

fn futures_chunks(n: usize, size: usize) -> Chunks {
    Chunks { left: n, size }
}

#[tokio::test]
async fn a_request_without_the_placeholder_is_refused() {
    let r = start_relay(1 << 20, loopback()).await;
    let (status, _, body) = send(&r.sock, post("/v1/messages", "", "{}")).await;
    assert_eq!(status, 401, "{body}");
    let wrong = Placeholder::generate(&PlaceholderFormat::anthropic()).unwrap();
    let (status, _, _) = send(&r.sock, post("/v1/messages", wrong.expose(), "{}")).await;
    assert_eq!(status, 401);
    // the real key itself is not accepted either (the worker must not hold it)
    let (status, _, _) = send(&r.sock, post("/v1/messages", &real_key(), "{}")).await;
    assert_eq!(status, 401);
    assert!(r.seen.lock().unwrap().is_empty());
    // positive control
    let (status, _, _) = send(&r.sock, post("/v1/messages", &r.placeholder, "{}")).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn socket_and_directory_are_private_and_removed_on_stop() {
    let r = start_relay(1 << 20, loopback()).await;
    let dmode = std::fs::metadata(&r.dir).unwrap().permissions().mode() & 0o777;
    let smode = std::fs::metadata(&r.sock).unwrap().permissions().mode() & 0o777;
    assert_eq!((dmode, smode), (0o700, 0o600));
    let (status, _, _) = send(&r.sock, post("/v1/messages", &r.placeholder, "{}")).await;
    assert_eq!(status, 200, "positive control: the socket serves");
    r.shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(5), r.task)
        .await
        .unwrap()
        .unwrap();
    assert!(!r.sock.exists(), "socket removed on stop");
    // a directory others can enter is refused
    let tmp = tempfile::tempdir().unwrap();
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = PrivateSocket::bind(&open.join("relay.sock")).unwrap_err();
    assert!(err.to_string().contains("must be private"), "{err}");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(
        PrivateSocket::bind(&open.join("relay.sock")).is_ok(),
        "positive control"
    );
}

#[tokio::test]
async fn the_relay_checks_upstream_addresses_like_the_proxy() {
    let r = start_relay(1 << 20, AddressPolicy::default()).await;
    let (status, _, body) = send(&r.sock, post("/v1/messages", &r.placeholder, "{}")).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("address_not_allowed"), "{body}");
    assert!(r.seen.lock().unwrap().is_empty());
    // positive control: with loopback allowed it forwards (other tests)
    let r2 = start_relay(1 << 20, loopback()).await;
    let (status, _, _) = send(&r2.sock, post("/v1/messages", &r2.placeholder, "{}")).await;
    assert_eq!(status, 200);
}

/// Send raw bytes on a fresh relay connection and read the whole answer.
async fn raw(sock: &Path, bytes: &[u8]) -> String {
    let mut s = UnixStream::connect(sock).await.unwrap();
    let _ = s.write_all(bytes).await;
    String::from_utf8_lossy(&read_to_end(&mut s).await).into_owned()
}

/// Read until the relay closes, or give up after `limit` and return what
/// arrived (so a missing answer fails on the caller's status assertion).
async fn read_answer(s: &mut UnixStream, limit: Duration) -> String {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(limit, tokio::io::AsyncReadExt::read_to_end(s, &mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

/// A raw `POST` head with the placeholder and a declared body length.
fn raw_head(target: &str, key: &str, extra: &str, len: usize) -> String {
    format!(
        "POST {target} HTTP/1.1\r\nHost: localhost\r\nx-api-key: {key}\r\n{extra}content-length: {len}\r\n\r\n"
    )
}

/// Wait until at least `n` relay records exist, give stragglers a moment,
/// and return them all (so callers can assert *exactly* `n`).
async fn records_settled(r: &TestRelay, n: usize) -> Vec<palisade_egress::record::RelayRecord> {
    for _ in 0..1000 {
        if r.recorder.relays().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    r.recorder.relays()
}

fn reasons(recs: &[palisade_egress::record::RelayRecord]) -> Vec<(u16, String)> {
    recs.iter().map(|x| (x.status, x.reason.clone())).collect()
}

#[tokio::test]
async fn override_headers_and_parameters_are_refused() {
    let r = start_relay(1 << 20, loopback()).await;
    let cases: [(&str, &str); 14] = [
        ("x-http-method-override", "GET"),
        ("x-http-method", "DELETE"),
        ("x-method-override", "PUT"),
        ("x-original-url", "/v1/files"),
        ("x-rewrite-url", "/v1/files"),
        ("x-original-uri", "/v1/files"),
        ("x-forwarded-host", "evil.example"),
        ("x-host", "evil.example"),
        ("x-forwarded-prefix", "/v1/files"),
        ("x-forwarded-path", "/v1/files"),
        ("x-forwarded-uri", "/v1/files"),
        ("x-forwarded-server", "evil.example"),
        ("x-envoy-original-path", "/v1/files"),
        ("X-HTTP-Method-Override", "GET"),
    ];
    for (name, value) in cases {
        let mut req = post("/v1/messages", &r.placeholder, "{}");
        req.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_static(value),
        );
        let (status, _, body) = send(&r.sock, req).await;
        assert_eq!(status, 400, "{name}: {body}");
        assert!(body.contains("override_not_allowed"), "{name}: {body}");
    }
    for query in [
        "_method=GET",
        "a=1&_method=DELETE",
        "%5Fmethod=GET",
        "%5fMETHOD=GET",
        "a=1;_method=GET",
        "x-http-method-override=GET",
        "_method",
    ] {
        let (status, _, body) = send(
            &r.sock,
            post(&format!("/v1/messages?{query}"), &r.placeholder, "{}"),
        )
        .await;
        assert_eq!(status, 400, "?{query}: {body}");
        assert!(body.contains("override_not_allowed"), "?{query}: {body}");
    }
    // a second Host header
    let answer = raw(
        &r.sock,
        raw_head("/v1/messages", &r.placeholder, "Host: evil.example\r\n", 2).as_bytes(),
    )
    .await;
    assert_eq!(status_of(&answer), 400, "{answer}");
    assert!(answer.contains("override_not_allowed"), "{answer}");
    assert!(
        r.seen.lock().unwrap().is_empty(),
        "no override reached the origin"
    );
    let recs = records_settled(&r, 22).await;
    assert_eq!(recs.len(), 22);
    assert!(
        recs.iter()
            .all(|x| x.reason == "override_not_allowed" && x.status == 400),
        "{:?}",
        reasons(&recs)
    );
    // positive control: the same POST without the header (and with an
    // ordinary query, and a forwarding header that is only stripped) passes
    let mut req = post("/v1/messages?beta=true&method=x", &r.placeholder, "{}");
    req.headers_mut()
        .insert("x-forwarded-port", http::HeaderValue::from_static("443"));
    let (status, _, body) = send(&r.sock, req).await;
    assert_eq!(status, 200, "{body}");
    let seen = r.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].header("x-forwarded-port").is_none(),
        "x-forwarded-* stripped"
    );
}

#[tokio::test]
async fn path_tricks_do_not_reach_the_origin() {
    let r = start_relay(1 << 20, loopback()).await;
    let cases: [(&str, u16, &str); 11] = [
        ("/v1%2Fmessages", 403, "route_not_allowed"),
        ("/v1/messages%2Fcount_tokens", 403, "route_not_allowed"),
        ("/v1/%6Dessages", 403, "route_not_allowed"),
        ("/v1/./messages", 403, "route_not_allowed"),
        ("/v1/%2e%2e/v1/messages", 403, "route_not_allowed"),
        ("/v1/x/../messages", 403, "route_not_allowed"),
        ("//v1/messages", 403, "route_not_allowed"),
        ("/v1//messages", 403, "route_not_allowed"),
        ("/v1/messages;x=1", 403, "route_not_allowed"),
        ("/v1/messages/", 403, "route_not_allowed"),
        ("https://api.test/v1/messages", 400, "origin_form_required"),
    ];
    for (target, want, code) in cases {
        let answer = raw(
            &r.sock,
            format!("{}{{}}", raw_head(target, &r.placeholder, "", 2)).as_bytes(),
        )
        .await;
        assert_eq!(status_of(&answer), want, "{target}: {answer}");
        assert!(answer.contains(code), "{target}: {answer}");
    }
    assert!(r.seen.lock().unwrap().is_empty());
    let recs = records_settled(&r, cases.len()).await;
    assert_eq!(recs.len(), cases.len(), "{:?}", reasons(&recs));
    assert!(recs.iter().all(|x| x.outcome == RelayOutcome::Refused));
    // positive control: the exact target, raw, is forwarded
    let answer = raw(
        &r.sock,
        format!("{}{{}}", raw_head("/v1/messages", &r.placeholder, "", 2)).as_bytes(),
    )
    .await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    // a fragment is dropped by the parser: the origin sees the exact route
    let answer = raw(
        &r.sock,
        format!(
            "{}{{}}",
            raw_head("/v1/messages#/../files", &r.placeholder, "", 2)
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    let seen = r.seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().map(|s| s.uri.as_str()).collect::<Vec<_>>(),
        ["/v1/messages", "/v1/messages"]
    );
}

#[tokio::test]
async fn every_attempt_gets_exactly_one_record() {
    let r = start_relay_with(|c| c.header_timeout = Duration::from_secs(1)).await;
    // positive control: a valid request has exactly one record
    let (status, _, _) = send(&r.sock, post("/v1/messages", &r.placeholder, "{}")).await;
    assert_eq!(status, 200);
    let recs = records_settled(&r, 1).await;
    assert_eq!(reasons(&recs), [(200, "forwarded".to_owned())]);

    // a garbage request line: hyper answers 400 before the service runs
    let answer = raw(&r.sock, b"GARBAGE\r\n\r\n").await;
    assert_eq!(status_of(&answer), 400, "{answer}");
    let recs = records_settled(&r, 2).await;
    assert_eq!(recs.len(), 2, "{:?}", reasons(&recs));
    assert_eq!(
        (recs[1].status, recs[1].reason.as_str(), recs[1].outcome),
        (400, "bad_request", RelayOutcome::Refused)
    );

    // 200 headers: 431
    let many: String = (0..200).map(|i| format!("x-h{i}: v\r\n")).collect();
    let answer = raw(
        &r.sock,
        raw_head("/v1/messages", &r.placeholder, &many, 0).as_bytes(),
    )
    .await;
    assert_eq!(status_of(&answer), 431, "{answer}");
    let recs = records_settled(&r, 3).await;
    assert_eq!(recs.len(), 3, "{:?}", reasons(&recs));
    assert_eq!(
        (recs[2].status, recs[2].reason.as_str()),
        (431, "head_too_large")
    );

    // a head that never finishes: the header timeout closes it
    let mut s = UnixStream::connect(&r.sock).await.unwrap();
    s.write_all(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let _ = read_to_end(&mut s).await;
    let recs = records_settled(&r, 4).await;
    assert_eq!(recs.len(), 4, "{:?}", reasons(&recs));
    assert_eq!(
        (recs[3].status, recs[3].reason.as_str()),
        (0, "header_timeout")
    );

    // a connection that closes mid-head
    let mut s = UnixStream::connect(&r.sock).await.unwrap();
    s.write_all(b"POST /v1/mess").await.unwrap();
    s.shutdown().await.unwrap();
    let _ = read_to_end(&mut s).await;
    let recs = records_settled(&r, 5).await;
    assert_eq!(recs.len(), 5, "{:?}", reasons(&recs));
    assert_eq!(
        (recs[4].status, recs[4].reason.as_str()),
        (0, "incomplete_head")
    );

    // blank lines only, then a close: bytes but no head
    let mut s = UnixStream::connect(&r.sock).await.unwrap();
    s.write_all(b"\r\n\r\n").await.unwrap();
    s.shutdown().await.unwrap();
    let _ = read_to_end(&mut s).await;
    let recs = records_settled(&r, 6).await;
    assert_eq!(recs.len(), 6, "{:?}", reasons(&recs));
    assert_eq!(
        (recs[5].status, recs[5].reason.as_str()),
        (0, "incomplete_head")
    );

    // a connection that closes before sending anything is not an attempt
    drop(UnixStream::connect(&r.sock).await.unwrap());
    // a request whose body the worker abandons is recorded once, as refused
    let mut s = UnixStream::connect(&r.sock).await.unwrap();
    s.write_all(raw_head("/v1/messages", &r.placeholder, "", 100).as_bytes())
        .await
        .unwrap();
    s.write_all(b"{").await.unwrap();
    s.shutdown().await.unwrap();
    let _ = read_to_end(&mut s).await;
    let recs = records_settled(&r, 7).await;
    assert_eq!(recs.len(), 7, "{:?}", reasons(&recs));
    assert_eq!(recs[6].reason, "body_read_failed");
    assert_eq!(
        r.seen.lock().unwrap().len(),
        1,
        "only the valid request went upstream"
    );
}

#[tokio::test]
async fn a_stalled_body_is_cut_and_recorded() {
    let r = start_relay_with(|c| c.body_idle_timeout = Duration::from_secs(1)).await;
    // positive control: a normal body at normal speed passes
    let (status, _, body) = send(&r.sock, post("/v1/messages", &r.placeholder, "{\"a\":1}")).await;
    assert_eq!(status, 200, "{body}");
    // one byte, then nothing
    let mut s = UnixStream::connect(&r.sock).await.unwrap();
    s.write_all(raw_head("/v1/messages", &r.placeholder, "", 10).as_bytes())
        .await
        .unwrap();
    s.write_all(b"{").await.unwrap();
    let answer = read_answer(&mut s, Duration::from_secs(8)).await;
    assert_eq!(status_of(&answer), 408, "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
    let recs = records_settled(&r, 2).await;
    assert_eq!(recs.len(), 2, "{:?}", reasons(&recs));
    assert_eq!(
        (recs[1].status, recs[1].reason.as_str()),
        (408, "body_timeout")
    );
    assert_eq!(
        r.seen.lock().unwrap().len(),
        1,
        "the stalled body never went upstream"
    );
}

#[tokio::test]
async fn a_trickled_body_meets_the_overall_deadline() {
    let r = start_relay_with(|c| {
        c.body_idle_timeout = Duration::from_secs(20);
        c.body_timeout = Duration::from_secs(1);
    })
    .await;
    // positive control: a normal body passes under the same deadline
    let (status, _, body) = send(&r.sock, post("/v1/messages", &r.placeholder, "{}")).await;
    assert_eq!(status, 200, "{body}");
    // one byte every 100 ms, never idle for long, but 300 bytes take 30 s
    let mut s = UnixStream::connect(&r.sock).await.unwrap();
    s.write_all(raw_head("/v1/messages", &r.placeholder, "", 300).as_bytes())
        .await
        .unwrap();
    let (mut rd, mut wr) = s.into_split();
    let trickle = tokio::spawn(async move {
        for _ in 0..300 {
            if wr.write_all(b"a").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let answer = tokio::time::timeout(Duration::from_secs(20), async {
        let mut buf = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut rd, &mut buf).await;
        String::from_utf8_lossy(&buf).into_owned()
    })
    .await
    .expect("the relay cut the body before the trickle ended");
    trickle.abort();
    assert_eq!(status_of(&answer), 408, "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
    let recs = records_settled(&r, 2).await;
    assert_eq!(recs.len(), 2, "{:?}", reasons(&recs));
    assert_eq!(
        (recs[1].status, recs[1].reason.as_str()),
        (408, "body_timeout")
    );
    assert_eq!(r.seen.lock().unwrap().len(), 1);
}

/// Open a connection, send a head declaring `len` bytes and `first` of them.
async fn partial_body(r: &TestRelay, len: usize, first: usize) -> UnixStream {
    let mut s = UnixStream::connect(&r.sock).await.unwrap();
    s.write_all(raw_head("/v1/messages", &r.placeholder, "", len).as_bytes())
        .await
        .unwrap();
    s.write_all(&vec![b'a'; first]).await.unwrap();
    s
}

async fn gauge_reaches(r: &TestRelay, n: usize) {
    for _ in 0..1000 {
        if r.relay.buffered_bytes() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "buffered bytes {} never reached {n}",
        r.relay.buffered_bytes()
    );
}

#[tokio::test]
async fn the_total_body_budget_holds_across_concurrent_requests() {
    let r = start_relay_with(|c| {
        c.max_body = 4096;
        c.max_buffered = 6000;
        c.body_idle_timeout = Duration::from_secs(30);
    })
    .await;
    let mut a = partial_body(&r, 3000, 2500).await;
    gauge_reaches(&r, 2500).await;
    let mut b = partial_body(&r, 3000, 2500).await;
    gauge_reaches(&r, 5000).await;
    // a third request would take the relay past its budget: refused
    let mut c = partial_body(&r, 3000, 1500).await;
    let answer = read_answer(&mut c, Duration::from_secs(5)).await;
    assert_eq!(status_of(&answer), 503, "{answer}");
    assert!(answer.contains("relay_busy"), "{answer}");
    assert!(r.relay.peak_buffered_bytes() <= 6000);
    // positive control: the two within the budget complete and are forwarded
    a.write_all(&[b'a'; 500]).await.unwrap();
    let answer = String::from_utf8_lossy(&read_to_end(&mut a).await).into_owned();
    assert_eq!(status_of(&answer), 200, "{answer}");
    b.write_all(&[b'a'; 500]).await.unwrap();
    let answer = String::from_utf8_lossy(&read_to_end(&mut b).await).into_owned();
    assert_eq!(status_of(&answer), 200, "{answer}");
    let peak = r.relay.peak_buffered_bytes();
    assert!(
        (5000..=6000).contains(&peak),
        "the gauge saw both bodies and never passed the budget: {peak}"
    );
    gauge_reaches(&r, 0).await;
    let recs = records_settled(&r, 3).await;
    let mut got = reasons(&recs);
    got.sort();
    assert_eq!(
        got,
        [
            (200, "forwarded".to_owned()),
            (200, "forwarded".to_owned()),
            (503, "relay_busy".to_owned())
        ]
    );
    let seen = r.seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().map(|s| s.body_len).collect::<Vec<_>>(),
        [3000, 3000]
    );
}

#[tokio::test]
async fn connections_over_the_cap_are_refused_and_recorded() {
    let r = start_relay_with(|c| c.max_connections = 2).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = UnixStream::connect(&r.sock).await.unwrap();
        s.write_all(b"POST /v1/mess").await.unwrap();
        held.push(s);
    }
    // the relay accepts in order: the third connection is over the cap
    let mut third = UnixStream::connect(&r.sock).await.unwrap();
    let answer = read_answer(&mut third, Duration::from_secs(5)).await;
    assert_eq!(status_of(&answer), 503, "{answer}");
    assert!(answer.contains("relay_busy"), "{answer}");
    let recs = records_settled(&r, 1).await;
    assert_eq!(reasons(&recs), [(503, "relay_busy".to_owned())]);
    // positive control: once a slot is free, a request is served
    drop(held.pop());
    let mut ok = false;
    for _ in 0..100 {
        let (status, _, _) = send(&r.sock, post("/v1/messages", &r.placeholder, "{}")).await;
        if status == 200 {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok, "a freed slot serves again");
}

#[tokio::test]
async fn the_credential_is_redacted_from_response_headers() {
    let r = start_relay(1 << 20, loopback()).await;
    let mut s = UnixStream::connect(&r.sock).await.unwrap();
    s.write_all(format!("{}{{}}", raw_head("/v1/reflect", &r.placeholder, "", 2)).as_bytes())
        .await
        .unwrap();
    let answer = String::from_utf8_lossy(&read_to_end(&mut s).await).into_owned();
    assert_eq!(status_of(&answer), 200, "{answer}");
    let key = real_key();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&key);
    assert!(
        !answer.contains(&key) && !answer.contains(&key[5..20]) && !answer.contains(&b64),
        "CREDENTIAL_REFLECTED"
    );
    let head: Vec<&str> = answer.split("\r\n").collect();
    for name in ["x-echo-key", "x-echo-partial", "x-echo-b64"] {
        assert!(
            head.contains(&format!("{name}: [redacted by palisade]").as_str()),
            "{name} redacted"
        );
    }
    // positive control: the other headers arrive unchanged, and the origin
    // did receive (and reflect) the credential
    assert!(head.contains(&"x-upstream: yes"));
    assert!(head.contains(&"x-request-id: req_0123456789abcdefghij"));
    assert!(head.contains(&"content-type: application/json"));
    assert_eq!(
        r.seen.lock().unwrap()[0].header("x-api-key"),
        Some(key.as_str())
    );
}

#[tokio::test]
async fn attempts_cut_by_the_relay_stopping_are_recorded() {
    let r = start_relay(1 << 20, loopback()).await;
    // positive control: a valid request first, one record
    let (status, _, _) = send(&r.sock, post("/v1/messages", &r.placeholder, "{}")).await;
    assert_eq!(status, 200);
    assert_eq!(records_settled(&r, 1).await.len(), 1);
    // one connection mid-head, one mid-body, one idle (not an attempt)
    let mut mid_head = UnixStream::connect(&r.sock).await.unwrap();
    mid_head.write_all(b"POST /v1/mess").await.unwrap();
    let _mid_body = partial_body(&r, 100, 10).await;
    let _idle = UnixStream::connect(&r.sock).await.unwrap();
    gauge_reaches(&r, 10).await;
    r.shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(20), r.task)
        .await
        .unwrap()
        .unwrap();
    let recs = r.recorder.relays();
    let mut got = reasons(&recs[1..]);
    got.sort();
    assert_eq!(
        got,
        [(0, "cancelled".to_owned()), (0, "cancelled".to_owned())],
        "{:?}",
        reasons(&recs)
    );
    assert!(
        recs[1..]
            .iter()
            .any(|x| x.method == "POST" && x.path == "/v1/messages"),
        "the mid-body request keeps its method and path"
    );
}

/// A `POST /v1/messages` with the placeholder, this content type and body.
fn post_typed(r: &TestRelay, path: &str, content_type: &str, body: &str) -> Request<Full<Bytes>> {
    let mut req = post(path, &r.placeholder, body);
    req.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_str(content_type).unwrap(),
    );
    req
}

#[tokio::test]
async fn override_spellings_a_cgi_or_php_origin_reads_alike_are_refused() {
    let r = start_relay(1 << 20, loopback()).await;
    // CGI, WSGI and PHP map `-` and `_` (PHP also `.` and space) to one
    // name: each of these reaches such an origin as the override.
    for name in [
        "x_http_method_override",
        "X_HTTP_Method_Override",
        "x-http_method-override",
        "x_original_url",
        "x_forwarded_host",
        "x.http.method.override",
    ] {
        let mut req = post("/v1/messages", &r.placeholder, "{}");
        req.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_static("DELETE"),
        );
        let (status, _, body) = send(&r.sock, req).await;
        assert_eq!(status, 400, "{name}: {body}");
        assert!(body.contains("override_not_allowed"), "{name}: {body}");
    }
    for query in [
        ".method=DELETE",
        "%2Emethod=DELETE",
        "+_method=GET",
        "x.http.method=GET",
    ] {
        let (status, _, body) = send(
            &r.sock,
            post(&format!("/v1/messages?{query}"), &r.placeholder, "{}"),
        )
        .await;
        assert_eq!(status, 400, "?{query}: {body}");
        assert!(body.contains("override_not_allowed"), "?{query}: {body}");
    }
    assert!(
        r.seen.lock().unwrap().is_empty(),
        "no override reached the origin"
    );
    // forwarding and credential headers in that spelling are stripped
    let mut req = post("/v1/messages?methods=1", &r.placeholder, "{}");
    for (name, value) in [
        ("x_forwarded_for", "10.0.0.1"),
        ("x_real_ip", "10.0.0.1"),
        ("x_api_key", "worker-own-key"),
        ("x_trace_id", "kept"),
    ] {
        req.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_static(value),
        );
    }
    let (status, _, body) = send(&r.sock, req).await;
    // positive control: an ordinary underscore header and query key pass
    assert_eq!(status, 200, "{body}");
    let seen = r.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    for gone in ["x_forwarded_for", "x_real_ip", "x_api_key"] {
        assert!(seen[0].header(gone).is_none(), "{gone} must be stripped");
    }
    assert_eq!(seen[0].header("x_trace_id"), Some("kept"));
    assert_eq!(seen[0].header("x-api-key"), Some(real_key().as_str()));
}

#[tokio::test]
async fn a_method_override_in_the_request_body_is_refused() {
    let r = start_relay(1 << 20, loopback()).await;
    let form = "application/x-www-form-urlencoded";
    let multipart = "multipart/form-data; boundary=XyZ";
    let part = |name: &str| {
        format!("--XyZ\r\nContent-Disposition: form-data; {name}\r\n\r\nDELETE\r\n--XyZ--\r\n")
    };
    let cases = [
        (form, "_method=DELETE".to_owned()),
        (
            "Application/X-WWW-Form-Urlencoded; charset=utf-8",
            "a=1&_method=DELETE".to_owned(),
        ),
        (form, "a=1&%5Fmethod=DELETE".to_owned()),
        (form, format!("{}_method=DELETE", "+".repeat(3000))),
        (form, ".method=DELETE".to_owned()),
        (form, "x-http-method-override=GET".to_owned()),
        (multipart, part("name=\"_method\"")),
        (multipart, part("NAME=_method")),
        (
            "application/json",
            r#"{"model":"m","_method":"DELETE"}"#.to_owned(),
        ),
        (
            "application/json",
            r#"{"\u005fmethod":"DELETE"}"#.to_owned(),
        ),
        (
            "application/vnd.api+json",
            r#"{"_METHOD":"DELETE"}"#.to_owned(),
        ),
    ];
    for (ct, body) in &cases {
        let (status, _, answer) = send(&r.sock, post_typed(&r, "/v1/messages", ct, body)).await;
        assert_eq!(status, 400, "{ct} {body:.80}: {answer}");
        assert!(answer.contains("override_not_allowed"), "{ct}: {answer}");
    }
    assert!(
        r.seen.lock().unwrap().is_empty(),
        "no override reached the origin"
    );
    let recs = records_settled(&r, cases.len()).await;
    assert!(
        recs.iter()
            .all(|x| x.reason == "override_not_allowed" && x.status == 400),
        "{:?}",
        reasons(&recs)
    );
    // positive controls: the same types without an override key pass,
    // even when `_method` is a value or nested deeper
    let fine = [
        (form, "a=1&method=x&note=_method".to_owned()),
        (multipart, part("name=\"file\"; filename=\"a.txt\"")),
        (
            "application/json",
            r#"{"model":"m","meta":{"_method":"x"},"text":"_method"}"#.to_owned(),
        ),
        ("text/plain", "_method=DELETE".to_owned()),
    ];
    for (ct, body) in &fine {
        let (status, _, answer) = send(&r.sock, post_typed(&r, "/v1/messages", ct, body)).await;
        assert_eq!(status, 200, "{ct} {body}: {answer}");
    }
    assert_eq!(r.seen.lock().unwrap().len(), fine.len());
}

#[tokio::test]
async fn a_body_override_hidden_behind_the_content_type_is_refused() {
    let r = start_relay(1 << 20, loopback()).await;
    let body = "a=1&_method=DELETE";
    // Rack reads a POST without Content-Type as a form; PHP splits the
    // type at `,`; Laravel reads any `/json` type as JSON; a second
    // Content-Type may be the one the origin reads.
    let mut no_type = post("/v1/messages", &r.placeholder, body);
    no_type.headers_mut().remove(http::header::CONTENT_TYPE);
    let mut empty_type = post("/v1/messages", &r.placeholder, body);
    empty_type.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(""),
    );
    let mut second = post_typed(&r, "/v1/messages", "text/plain", body);
    second.headers_mut().append(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    // the worker names Content-Type in Connection: the relay drops it, and
    // the origin sees a typeless body
    let mut dropped = post_typed(&r, "/v1/messages", "text/plain", body);
    dropped.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("content-type"),
    );
    let cases = [
        ("dropped by Connection", dropped),
        ("none", no_type),
        ("empty", empty_type),
        ("second", second),
        (
            "list",
            post_typed(
                &r,
                "/v1/messages",
                "text/plain, application/x-www-form-urlencoded",
                body,
            ),
        ),
        (
            "text/json",
            post_typed(&r, "/v1/messages", "text/json", r#"{"_method":"DELETE"}"#),
        ),
    ];
    let n = cases.len();
    for (what, req) in cases {
        let (status, _, answer) = send(&r.sock, req).await;
        assert_eq!(status, 400, "{what}: {answer}");
        assert!(answer.contains("override_not_allowed"), "{what}: {answer}");
    }
    assert!(
        r.seen.lock().unwrap().is_empty(),
        "no override reached the origin"
    );
    assert_eq!(records_settled(&r, n).await.len(), n);
    // positive control: the same body as text/plain, and JSON without the key
    let (status, _, answer) =
        send(&r.sock, post_typed(&r, "/v1/messages", "text/plain", body)).await;
    assert_eq!(status, 200, "{answer}");
    let mut plain = post("/v1/messages", &r.placeholder, r#"{"model":"m"}"#);
    plain.headers_mut().remove(http::header::CONTENT_TYPE);
    let (status, _, answer) = send(&r.sock, plain).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(r.seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn the_credential_is_redacted_in_other_spellings_too() {
    let r = start_relay(1 << 20, loopback()).await;
    let mut s = UnixStream::connect(&r.sock).await.unwrap();
    s.write_all(format!("{}{{}}", raw_head("/v1/reflect", &r.placeholder, "", 2)).as_bytes())
        .await
        .unwrap();
    let answer = String::from_utf8_lossy(&read_to_end(&mut s).await).into_owned();
    assert_eq!(status_of(&answer), 200, "{answer}");
    let head: Vec<&str> = answer.split("\r\n").collect();
    // case changed, hex, percent-encoded, and base64 of the credential
    // behind a prefix (another alignment than the credential's own base64)
    for name in [
        "x-echo-upper",
        "x-echo-hex",
        "x-echo-pct",
        "x-echo-b64-shifted",
        "x-echo-b64-shifted-1",
    ] {
        assert!(
            head.contains(&format!("{name}: [redacted by palisade]").as_str()),
            "{name} must be redacted"
        );
    }
    let key = real_key();
    assert!(
        !answer.contains(&key.to_ascii_uppercase()) && !answer.contains(&hex_of(key.as_bytes())),
        "CREDENTIAL_REFLECTED"
    );
    // nor in the status line's reason phrase (hyper passes a custom one on)
    assert!(head[0].starts_with("HTTP/1.1 200"), "{}", head[0]);
    assert!(
        !head[0].contains(&key[..LEAK]),
        "CREDENTIAL_REFLECTED in the reason phrase"
    );
    // positive control: unrelated headers arrive unchanged
    assert!(head.contains(&"x-upstream: yes"));
    assert!(head.contains(&"x-request-id: req_0123456789abcdefghij"));
}

/// A run of the credential the relay must never pass back.
const LEAK: usize = 12;

#[tokio::test]
async fn limits_too_large_to_count_mean_unlimited_not_a_panic() {
    let r = start_relay_with(|c| {
        c.addresses = loopback();
        c.max_connections = usize::MAX;
        c.header_timeout = Duration::MAX;
        c.body_idle_timeout = Duration::MAX;
        c.body_timeout = Duration::MAX;
    })
    .await;
    let (status, _, body) = send(&r.sock, post("/v1/messages", &r.placeholder, "{}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(r.seen.lock().unwrap().len(), 1);
    assert!(!r.task.is_finished(), "the relay still serves");
}

/// Records into memory but refuses relay admission records while `refuse`
/// is set (a disk that fills between the health check and the write).
#[derive(Debug)]
struct RefusesAdmission {
    mem: Arc<MemoryRecorder>,
    refuse: Arc<std::sync::atomic::AtomicBool>,
}

impl Recorder for RefusesAdmission {
    fn record(&self, event: &ProxyEvent) {
        self.mem.record(event);
    }

    fn record_accepted(&self, event: &ProxyEvent) -> Acceptance {
        let refuse = matches!(event, ProxyEvent::RelayAdmitted(_))
            && self.refuse.load(std::sync::atomic::Ordering::SeqCst);
        if !refuse {
            self.mem.record(event);
        }
        Acceptance::ready(!refuse)
    }
}

#[tokio::test]
async fn nothing_reaches_the_origin_before_its_admission_is_recorded() {
    let refuse = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flag = refuse.clone();
    let r = start_relay_recorded(
        |c| c.addresses = loopback(),
        move |mem| Arc::new(RefusesAdmission { mem, refuse: flag }),
    )
    .await;
    let (status, _, body) = send(&r.sock, post("/v1/messages", &r.placeholder, "{}")).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("recording_unavailable"), "{body}");
    assert!(
        r.seen.lock().unwrap().is_empty(),
        "an unrecorded request never reaches the origin"
    );
    let recs = records_settled(&r, 1).await;
    assert_eq!(
        reasons(&recs),
        vec![(503, "recording_unavailable".to_owned())]
    );
    // positive control: once admissions are accepted, the request passes,
    // and its admission was recorded before the origin answered
    refuse.store(false, std::sync::atomic::Ordering::SeqCst);
    let (status, _, body) = send(&r.sock, post("/v1/messages", &r.placeholder, "{}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(r.seen.lock().unwrap().len(), 1);
    let admitted = r.recorder.relay_admitted();
    assert_eq!(admitted.len(), 1);
    assert_eq!(
        (admitted[0].method.as_str(), admitted[0].path.as_str()),
        ("POST", "/v1/messages")
    );
    let events = r.recorder.events();
    let first_admit = events
        .iter()
        .position(|e| matches!(e, ProxyEvent::RelayAdmitted(_)));
    let last_relay = events
        .iter()
        .rposition(|e| matches!(e, ProxyEvent::Relay(_)));
    assert!(
        first_admit < last_relay,
        "admission before the request's record"
    );
}
