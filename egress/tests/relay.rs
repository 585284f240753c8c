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

use bytes::Bytes;
use common::*;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use palisade_egress::addr::AddressPolicy;
use palisade_egress::proxy::{Shutdown, shutdown_channel};
use palisade_egress::record::{MemoryRecorder, RelayOutcome};
use palisade_egress::relay::{
    Credential, Origin, Placeholder, PlaceholderFormat, PrivateSocket, Relay, RelayConfig, Route,
    Secret,
};
use palisade_egress::resolve::StaticResolver;
use tokio::net::{TcpListener, UnixStream};

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
    let (cert, key) = self_signed(&["api.test"]);
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
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
                        let resp = if uri.starts_with("/v1/redirect") {
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

struct TestRelay {
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
    let (addr, cert, seen) = upstream().await;
    let origin = Origin::parse(&format!("https://api.test:{}", addr.port())).unwrap();
    let routes = [
        "POST /v1/messages",
        "POST /v1/messages/count_tokens",
        "POST /v1/redirect",
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
    config.max_body = max_body;
    config.addresses = addresses;
    let recorder = Arc::new(MemoryRecorder::new());
    let resolver =
        Arc::new(StaticResolver::new().with("api.test", &["127.0.0.1".parse().unwrap()]));
    let relay = Relay::new(config, resolver, recorder.clone());
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
    let json = palisade_egress::record::Event::Relay(recs[0].clone())
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
