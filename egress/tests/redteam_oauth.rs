//! Red team of the OAuth relay path (`anthropic_oauth`): a worker holding
//! the right placeholder tries to have the relay attach the Bearer access
//! token to a request outside its one route (another path, another
//! method, dot segments, an encoded slash), or to a value that
//! only starts with the placeholder; and looks for the token in what the
//! relay answers. The guard: nothing goes upstream and the answer carries
//! no token; the control: the exact route with the exact placeholder
//! reaches the upstream with the token. A query on the exact route passes
//! by design (Claude Code sends `/v1/messages?beta=true`): it goes to the
//! one origin and cannot name another.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    Route, Secret,
};
use palisade_egress::resolve::StaticResolver;
use tokio::net::UnixStream;

type Seen = Arc<Mutex<Vec<Vec<(String, String)>>>>;

fn header<'a>(h: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    h.iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The access token, stored reversed so a leak scan cannot match this file.
fn access_token() -> String {
    "SSECCA-MAETDER-HTUAO-10tao-tna-ks".chars().rev().collect()
}

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

fn request(method: &str, uri: &str, authorization: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "localhost")
        .header("authorization", authorization)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{\"model\":\"m\"}")))
        .unwrap()
}

#[tokio::test]
async fn the_bearer_token_goes_only_to_the_exact_route_for_the_exact_placeholder() {
    let r = oauth_relay().await;
    let ph = r.placeholder.clone();
    let bearer = format!("Bearer {ph}");
    let attempts: Vec<(&str, String, String)> = vec![
        ("GET", "/v1/messages".into(), bearer.clone()),
        ("POST", "/v1/models".into(), bearer.clone()),
        ("POST", "/v1/messages/../complete".into(), bearer.clone()),
        ("POST", "/v1/./messages".into(), bearer.clone()),
        ("POST", "/v1/messages/".into(), bearer.clone()),
        ("POST", "/v1%2fmessages".into(), bearer.clone()),
        ("POST", "//evil.test/v1/messages".into(), bearer.clone()),
        ("POST", "/v1/messages".into(), format!("{bearer}x")),
        ("POST", "/v1/messages".into(), format!("Bearer x{ph}")),
        (
            "POST",
            "/v1/messages".into(),
            format!("{bearer}, Bearer other"),
        ),
        ("POST", "/v1/messages".into(), ph.clone()),
    ];
    for (method, uri, auth) in &attempts {
        let (status, body) = send(&r.sock, request(method, uri, auth)).await;
        assert!(
            !body.contains(&access_token()),
            "HOLE: the relay's answer to {method} {uri} carries the access token"
        );
        assert!(
            r.seen.lock().unwrap().is_empty(),
            "HOLE: {method} {uri} (authorization {} the placeholder) went upstream with the Bearer token (status {status})",
            if auth == &bearer { "exactly" } else { "around" }
        );
        assert!(!status.is_success(), "{method} {uri}: {status} {body}");
    }
    // Control: the exact route and placeholder reach the upstream with the token.
    let (status, body) = send(&r.sock, request("POST", "/v1/messages", &bearer)).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains(&access_token()));
    let seen = r.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        header(&seen[0], "authorization"),
        [format!("Bearer {}", access_token()).as_str()],
        "control: the real access token upstream"
    );
    let records = format!("{:?}", r.recorder.events());
    assert!(
        !records.contains(&access_token()) && !records.contains(&ph),
        "a secret in the records"
    );
}
