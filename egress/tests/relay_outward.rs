//! Outward routes on an HTTP relay, on loopback: a GitHub-like origin
//! over TLS (rcgen certificate), the real relay socket, a gate over a real
//! [`ControlServer`] whose backend decides with the real `[outward]` table,
//! so a denial, an ask held for the host and an approval go through the
//! same flow as a worker's `outward` request. Also HTTP Basic credentials
//! and placeholder segments.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use common::*;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use palisade_egress::addr::AddressPolicy;
use palisade_egress::control::{
    AskAnswer, ControlBackend, ControlConfig, ControlServer, OutwardAction, OutwardAnswer,
    OutwardResult, PolicyAnswer, SessionView, TaintKind,
};
use palisade_egress::proxy::{Shutdown, shutdown_channel};
use palisade_egress::record::{MemoryRecorder, ProxyEvent, RelayOutcome, RelayRecord};
use palisade_egress::relay::{
    Credential, OutwardFuture, Placeholder, PlaceholderFormat, PrivateSocket, Relay, RelayConfig,
    RelayGate, Route, RouteRefusal, Secret, ServerToolResult, basic_placeholder,
};
use palisade_egress::resolve::StaticResolver;
use palisade_policy::Decision;
use palisade_policy::outward::{OutwardRequest, OutwardTable};
use tokio::net::UnixStream;

/// The host-held token, stored reversed so a leak scan cannot match this file.
fn real_token() -> String {
    "NEKOT-BUHTIG-LAER-edisilap-phg".chars().rev().collect()
}

/// One request the origin received.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    uri: String,
    authorization: Option<String>,
    body: Bytes,
}

/// A GitHub-like TLS origin for `api.github.test`: `POST` answers 201, any
/// other method 200, a path with a `drop` segment gets no answer (the
/// connection is closed after the request was read).
async fn origin() -> (
    std::net::SocketAddr,
    rustls::pki_types::CertificateDer<'static>,
    Arc<Mutex<Vec<Seen>>>,
) {
    let (l, acceptor, cert) = tls_listener(&["api.github.test"], &[b"http/1.1"]).await;
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
                        let authorization = req
                            .headers()
                            .get("authorization")
                            .map(|v| v.to_str().unwrap().to_owned());
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        seen.lock().unwrap().push(Seen {
                            method: method.clone(),
                            uri: uri.clone(),
                            authorization,
                            body,
                        });
                        if uri.split('/').any(|s| s == "drop") {
                            return Err("no answer".to_owned());
                        }
                        let status = if method == "POST" { 201 } else { 200 };
                        Ok(Response::builder()
                            .status(status)
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from_static(b"{\"id\":1}")))
                            .unwrap())
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

/// What the backend saw, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Ev {
    Settled(OutwardAction, OutwardAnswer),
    Executed(u64, OutwardAction, OutwardResult),
}

/// A session backend deciding with the real `[outward]` table of a policy.
struct Backend {
    table: OutwardTable,
    events: Mutex<Vec<Ev>>,
}

impl ControlBackend for Backend {
    fn taint(&self, _source: TaintKind, _detail: &str) -> SessionView {
        SessionView::default()
    }
    fn decide_outward(&self, kind: &str, target: &str) -> PolicyAnswer {
        let v = self.table.decide(
            &palisade_taint::Session::new(),
            &OutwardRequest { kind, target },
        );
        let verdict = match v.decision {
            Decision::Allow => AskAnswer::Allow,
            Decision::Ask => AskAnswer::Ask,
            _ => AskAnswer::Deny,
        };
        PolicyAnswer::new(verdict, v.rule, v.detail)
    }
    fn outward_settled(&self, _kind: &str, _target: &str, _answer: &OutwardAnswer) {
        panic!("a relay's action is recorded through relay_outward_settled");
    }
    fn outward_executed(&self, _: u64, _: &str, _: &str, _: Option<i32>) {
        panic!("a relay's action is recorded through relay_outward_executed");
    }
    fn relay_outward_settled(&self, action: &OutwardAction, answer: &OutwardAnswer) {
        self.events
            .lock()
            .unwrap()
            .push(Ev::Settled(action.clone(), answer.clone()));
    }
    fn relay_outward_executed(&self, ticket: u64, action: &OutwardAction, result: &OutwardResult) {
        self.events
            .lock()
            .unwrap()
            .push(Ev::Executed(ticket, action.clone(), result.clone()));
    }
    fn state(&self) -> SessionView {
        SessionView::default()
    }
}

/// A relay gate over a control server, as the governed session's is.
#[derive(Debug)]
struct ServerGate {
    server: ControlServer,
    /// `outward_executed` calls the server refused (unknown, denied or
    /// repeated ticket).
    refused_reports: Mutex<usize>,
}

impl RelayGate for ServerGate {
    fn admit(&self, _relay: &str, _provider: &str) -> Result<(), RouteRefusal> {
        Ok(())
    }
    fn server_tool_result(&self, _: &str, _: &str, _: ServerToolResult) -> bool {
        true
    }
    fn outward(&self, _relay: &str, action: OutwardAction) -> OutwardFuture {
        let server = self.server.clone();
        Box::pin(async move { server.request_outward(&action).await })
    }
    fn outward_executed(
        &self,
        _relay: &str,
        ticket: u64,
        action: &OutwardAction,
        result: &OutwardResult,
    ) {
        if !self.server.relay_executed(ticket, action, result) {
            *self.refused_reports.lock().unwrap() += 1;
        }
    }
}

struct TestRelay {
    sock: PathBuf,
    placeholder: Placeholder,
    recorder: Arc<MemoryRecorder>,
    seen: Arc<Mutex<Vec<Seen>>>,
    server: Option<ControlServer>,
    backend: Option<Arc<Backend>>,
    gate: Option<Arc<ServerGate>>,
    _shutdown: Shutdown,
    _tmp: tempfile::TempDir,
}

impl TestRelay {
    fn events(&self) -> Vec<Ev> {
        self.backend
            .as_ref()
            .unwrap()
            .events
            .lock()
            .unwrap()
            .clone()
    }

    fn executed(&self) -> Vec<(u64, OutwardResult)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Ev::Executed(t, _, r) => Some((t, r)),
                Ev::Settled(..) => None,
            })
            .collect()
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The relay records so far, once `n` exist.
    async fn records(&self, n: usize) -> Vec<RelayRecord> {
        for _ in 0..1000 {
            let r = self.recorder.relays();
            if r.len() >= n {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "expected {n} relay records, got {:?}",
            self.recorder.relays()
        );
    }

    /// The worker's credential header for this relay.
    fn key(&self) -> String {
        format!("Bearer {}", self.placeholder.expose())
    }
}

const COMMENTS: &str = "POST /repos/{owner}/{repo}/issues/{number}/comments";

/// The GitHub-like relay: a plain read route and the comment route as an
/// outward route, `credential` (default: bearer), with a gate over a
/// control server deciding `outward` (a policy's `[outward]` body), or no
/// gate at all (`None`).
async fn start(
    outward: Option<&str>,
    basic: Option<&str>,
    approval_timeout: Duration,
) -> TestRelay {
    start_with(outward, basic, approval_timeout, |_| {}).await
}

/// [`start`], with the relay's config changed by `configure`.
async fn start_with(
    outward: Option<&str>,
    basic: Option<&str>,
    approval_timeout: Duration,
    configure: impl FnOnce(&mut RelayConfig),
) -> TestRelay {
    let (addr, cert, seen) = origin().await;
    let origin = palisade_schema::host_policy::Origin::parse(&format!(
        "https://api.github.test:{}",
        addr.port()
    ))
    .unwrap();
    let routes = vec![
        Route::parse("GET /repos/{owner}/{repo}").unwrap(),
        Route::parse(COMMENTS)
            .unwrap()
            .outward(
                "github.post.comment",
                "github.com/{owner}/{repo}/issues/{number}",
            )
            .unwrap(),
    ];
    let credential = match basic {
        Some(user) => Credential::basic(user, Secret::new(real_token())).unwrap(),
        None => Credential::new("authorization", "Bearer ", Secret::new(real_token())).unwrap(),
    };
    let placeholder = Placeholder::generate(&PlaceholderFormat::generic()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let mut config = RelayConfig::new("github", origin, routes, credential, placeholder.clone())
        .unwrap()
        .with_roots(roots)
        .unwrap();
    config.addresses = AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
    configure(&mut config);
    let recorder = Arc::new(MemoryRecorder::new());
    let resolver =
        Arc::new(StaticResolver::new().with("api.github.test", &["127.0.0.1".parse().unwrap()]));
    let mut relay = Relay::new(config, resolver, recorder.clone());
    let (mut server, mut backend, mut gate) = (None, None, None);
    if let Some(section) = outward {
        let policy = palisade_schema::host_policy::parse("palisade.toml", section)
            .map_err(|d| d.iter().map(ToString::to_string).collect::<Vec<_>>())
            .unwrap()
            .into_value();
        let b = Arc::new(Backend {
            table: OutwardTable::new(&policy).unwrap(),
            events: Mutex::new(Vec::new()),
        });
        let s = ControlServer::new(
            b.clone(),
            ControlConfig::default().with_approval_timeout(approval_timeout),
        );
        let g = Arc::new(ServerGate {
            server: s.clone(),
            refused_reports: Mutex::new(0),
        });
        relay = relay.with_gate(g.clone());
        (server, backend, gate) = (Some(s), Some(b), Some(g));
    }
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("relay").join("relay.sock");
    let socket = PrivateSocket::bind(&sock).unwrap();
    let (shutdown, signal) = shutdown_channel();
    tokio::spawn(async move {
        relay.serve(&socket, signal).await.unwrap();
        drop(socket);
    });
    TestRelay {
        sock,
        placeholder,
        recorder,
        seen,
        server,
        backend,
        gate,
        _shutdown: shutdown,
        _tmp: tmp,
    }
}

async fn send(sock: &Path, req: Request<Full<Bytes>>) -> (StatusCode, serde_json::Value) {
    let stream = UnixStream::connect(sock).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    // an upper bound against a hang, never a pass criterion
    let resp = tokio::time::timeout(Duration::from_secs(60), sender.send_request(req))
        .await
        .unwrap()
        .unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&body)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&body).into()));
    (status, json)
}

fn request(method: &str, path: &str, authorization: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("authorization", authorization)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{\"body\":\"LGTM\"}")))
        .unwrap()
}

/// Allow comments on `other/*`, deny everything of `acme`, ask for the rest.
const POLICY: &str = r#"
[outward]
default = "ask"
allow = [{ kind = "github.post.comment", target = "github.com/other/*/issues/*" }]
deny = [{ kind = "github.post", target = "github.com/acme/**" }]
"#;

/// Whether no relay record and no backend event carries the token or the
/// placeholder.
fn assert_no_secret(r: &TestRelay) {
    let token = real_token();
    let placeholder = r.placeholder.expose().to_owned();
    let mut text = String::new();
    for rec in r.recorder.relays() {
        text.push_str(&ProxyEvent::Relay(rec).to_json().to_string());
    }
    if r.backend.is_some() {
        text.push_str(&format!("{:?}", r.events()));
    }
    assert!(!text.contains(&token), "the token leaked into a record");
    assert!(!text.contains(&placeholder), "the placeholder leaked");
}

#[tokio::test]
async fn a_denied_outward_route_never_reaches_the_origin_and_an_allowed_one_once() {
    let r = start(Some(POLICY), None, Duration::from_secs(300)).await;
    // denied by target: `github.com/acme/**`
    let (status, body) = send(
        &r.sock,
        request("POST", "/repos/acme/app/issues/7/comments", &r.key()),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let err = &body["error"];
    assert_eq!(err["type"], "outward_denied", "{body}");
    assert_eq!(err["code"], "outward_denied", "{body}");
    assert_eq!(err["rule"], "outward.deny[0]", "{body}");
    assert_eq!(err["kind"], "github.post.comment", "{body}");
    assert_eq!(err["target"], "github.com/acme/app/issues/7", "{body}");
    assert!(err["ticket"].as_u64().is_some(), "{body}");
    assert!(
        err["message"].as_str().unwrap().contains("deny rule"),
        "{body}"
    );
    assert_eq!(r.seen().len(), 0, "nothing reached the origin");
    let rec = &r.records(1).await[0];
    assert_eq!(
        (rec.outcome, rec.status, rec.reason.as_str()),
        (RelayOutcome::OutwardDenied, 403, "outward_denied")
    );
    assert_eq!(rec.outward_kind.as_deref(), Some("github.post.comment"));
    assert_eq!(rec.ticket, err["ticket"].as_u64());
    assert_eq!(rec.bytes_up, 0);
    assert_eq!(rec.upstream, None, "never dialled");
    let json = ProxyEvent::Relay(rec.clone()).to_json();
    assert_eq!(json["outcome"], "outward_denied");
    assert_eq!(json["outward_kind"], "github.post.comment");
    assert_eq!(json["ticket"], err["ticket"]);
    match &r.events()[..] {
        [Ev::Settled(action, answer)] => {
            assert_eq!(action.kind, "github.post.comment");
            assert_eq!(action.target, "github.com/acme/app/issues/7");
            assert_eq!(action.via.as_deref(), Some("github"));
            assert_eq!(action.detail["method"], "POST");
            assert_eq!(action.detail["path"], "/repos/acme/app/issues/7/comments");
            assert_eq!(answer.decision, AskAnswer::Deny);
        }
        other => panic!("{other:?}"),
    }

    // positive control: allowed by target, forwarded exactly once
    let (status, body) = send(
        &r.sock,
        request("POST", "/repos/other/x/issues/7/comments", &r.key()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let seen = r.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].method.as_str(), seen[0].uri.as_str()),
        ("POST", "/repos/other/x/issues/7/comments")
    );
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some(format!("Bearer {}", real_token()).as_str()),
        "the host token, not the placeholder"
    );
    assert_eq!(seen[0].body.as_ref(), b"{\"body\":\"LGTM\"}");
    let recs = r.records(2).await;
    assert_eq!(recs[1].outcome, RelayOutcome::Forwarded);
    assert_eq!(recs[1].status, 201);
    let ticket = recs[1].ticket.unwrap();
    let executed = r.executed();
    assert_eq!(executed.len(), 1, "{executed:?}");
    assert_eq!(executed[0].0, ticket);
    assert_eq!(executed[0].1.status, Some(201));

    // a plain route is forwarded without any outward decision
    let before = r.events().len();
    let (status, _) = send(&r.sock, request("GET", "/repos/acme/app", &r.key())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(r.seen().len(), 2);
    assert_eq!(
        r.events().len(),
        before,
        "no outward call for a plain route"
    );
    let recs = r.records(3).await;
    assert_eq!(
        (recs[2].ticket, recs[2].outward_kind.as_deref()),
        (None, None)
    );
    assert_eq!(*r.gate.as_ref().unwrap().refused_reports.lock().unwrap(), 0);
    assert_no_secret(&r);
}

/// The pending action of the relay, once it is listed.
async fn pending(server: &ControlServer) -> palisade_egress::control::PendingAction {
    for _ in 0..2000 {
        if let Some(p) = server.pending().into_iter().next() {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no action became pending");
}

#[tokio::test]
async fn an_ask_holds_the_request_until_the_host_answers() {
    let r = start(Some(POLICY), None, Duration::from_secs(300)).await;
    let server = r.server.clone().unwrap();
    let sock = r.sock.clone();
    let key = r.key();
    let asked = tokio::spawn(async move {
        send(
            &sock,
            request("POST", "/repos/third/app/issues/1/comments", &key),
        )
        .await
    });
    let p = pending(&server).await;
    assert_eq!(p.kind, "github.post.comment");
    assert_eq!(p.target, "github.com/third/app/issues/1");
    assert_eq!(p.via.as_deref(), Some("github"));
    assert_eq!(r.seen().len(), 0, "held: nothing reached the origin yet");
    assert!(server.resolve(p.ticket, true));
    let (status, body) = asked.await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(r.seen().len(), 1, "approved: sent exactly once");
    assert_eq!(
        r.executed(),
        [(
            p.ticket,
            OutwardResult {
                status: Some(201),
                detail: Default::default()
            }
        )]
    );

    // the host denies: never sent, the answer says how it was settled
    let sock = r.sock.clone();
    let key = r.key();
    let asked = tokio::spawn(async move {
        send(
            &sock,
            request("POST", "/repos/third/app/issues/2/comments", &key),
        )
        .await
    });
    let p = pending(&server).await;
    assert!(server.resolve(p.ticket, false));
    let (status, body) = asked.await.unwrap();
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["type"], "outward_denied");
    assert_eq!(body["error"]["approval"], "denied");
    assert_eq!(body["error"]["policy"], "ask");
    assert_eq!(body["error"]["ticket"], p.ticket);
    assert_eq!(r.seen().len(), 1, "denied: the origin saw nothing more");
    assert_eq!(r.executed().len(), 1);
    let recs = r.records(2).await;
    assert_eq!(recs[1].outcome, RelayOutcome::OutwardDenied);
    assert_eq!(recs[1].ticket, Some(p.ticket));
    assert_no_secret(&r);
}

#[tokio::test]
async fn the_body_deadlines_do_not_bound_the_approval_wait() {
    // a body deadline of 2 s, an approval given after more than that
    let r = start_with(Some(POLICY), None, Duration::from_secs(300), |c| {
        c.body_timeout = Duration::from_secs(2);
        c.body_idle_timeout = Duration::from_secs(2);
    })
    .await;
    let server = r.server.clone().unwrap();
    let sock = r.sock.clone();
    let key = r.key();
    let asked = tokio::spawn(async move {
        send(
            &sock,
            request("POST", "/repos/third/app/issues/4/comments", &key),
        )
        .await
    });
    let p = pending(&server).await;
    // a wait, not a measurement: the held request outlives both deadlines
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(server.resolve(p.ticket, true), "still pending");
    let (status, body) = asked.await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(r.seen().len(), 1);
    assert_eq!(r.seen()[0].body.as_ref(), b"{\"body\":\"LGTM\"}");
}

#[tokio::test]
async fn an_unanswered_ask_is_denied_by_the_approval_timeout() {
    // the timeout bounds how long a held request (and its buffered body) waits
    let r = start(Some(POLICY), None, Duration::from_millis(300)).await;
    let (status, body) = send(
        &r.sock,
        request("POST", "/repos/third/app/issues/3/comments", &r.key()),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["approval"], "timed_out", "{body}");
    assert_eq!(r.seen().len(), 0);
    assert!(r.executed().is_empty());
}

#[tokio::test]
async fn a_sent_request_without_an_answer_is_still_reported_executed() {
    let r = start(Some(POLICY), None, Duration::from_secs(300)).await;
    // the origin reads the request and closes without answering: it may have acted
    let (status, body) = send(
        &r.sock,
        request("POST", "/repos/other/drop/issues/1/comments", &r.key()),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(r.seen().len(), 1, "sent once, never retried");
    let executed = r.executed();
    assert_eq!(executed.len(), 1, "{executed:?}");
    assert_eq!(executed[0].1.status, None);
    let rec = &r.records(1).await[0];
    assert_eq!(rec.ticket, Some(executed[0].0));
}

#[tokio::test]
async fn segments_that_fill_placeholders_must_be_plain() {
    let r = start(
        Some("[outward]\nallow = [{ kind = \"github.post.comment\" }]\n"),
        None,
        Duration::from_secs(300),
    )
    .await;
    for path in [
        "/repos/acme%2Fother/app/issues/1/comments",
        "/repos/acme/%2e%2e/issues/1/comments",
        "/repos/acme/../issues/1/comments",
        "/repos/acme/./issues/1/comments",
        "/repos//app/issues/1/comments",
        "/repos/acme/app/issues/1%3F/comments",
        // a near-miss of the outward route an origin that folds case could act on
        "/repos/acme/app/ISSUES/1/comments",
        "/repos/acme/app/issues/1/comments/",
    ] {
        let (status, body) = send(&r.sock, request("POST", path, &r.key())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(body["error"]["code"], "invalid_segment", "{path}: {body}");
    }
    assert_eq!(r.seen().len(), 0, "the origin was never reached");
    assert!(r.events().is_empty(), "nothing was asked");
    // a literal segment that differs is no route, a known path with another method 405
    let (status, body) = send(
        &r.sock,
        request("POST", "/repos/a/b/pulls/1/comments", &r.key()),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (StatusCode::FORBIDDEN, &"route_not_allowed".into())
    );
    let (status, body) = send(
        &r.sock,
        request("DELETE", "/repos/a/b/issues/1/comments", &r.key()),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (StatusCode::METHOD_NOT_ALLOWED, &"method_not_allowed".into())
    );
    // positive control: plain segments fill the placeholders
    let (status, body) = send(
        &r.sock,
        request("POST", "/repos/acme-1/app.rs/issues/1/comments", &r.key()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(r.seen().len(), 1);
    match &r.events()[0] {
        Ev::Settled(action, _) => assert_eq!(action.target, "github.com/acme-1/app.rs/issues/1"),
        other => panic!("{other:?}"),
    }
}

fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

#[tokio::test]
async fn a_basic_credential_is_injected_and_the_workers_basic_placeholder_checked() {
    let r = start(None, Some("x-access-token"), Duration::from_secs(300)).await;
    let placeholder = r.placeholder.expose().to_owned();
    for wrong in [
        basic("x-access-token", "wrong"),
        basic("someone-else", &placeholder),
        basic("x-access-token", &format!("{placeholder}x")),
        format!("Bearer {placeholder}"),
        placeholder.clone(),
        "Basic !!not-base64!!".to_owned(),
    ] {
        let (status, body) = send(&r.sock, request("GET", "/repos/acme/app", &wrong)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert_eq!(body["error"]["code"], "placeholder_required");
    }
    assert_eq!(r.seen().len(), 0);
    // positive control: the worker's Basic placeholder (any case of the scheme)
    let presented = basic_placeholder("x-access-token", &r.placeholder);
    assert_eq!(*presented, basic("x-access-token", &placeholder));
    for auth in [
        presented.to_string(),
        presented.replacen("Basic", "basic", 1),
    ] {
        let (status, body) = send(&r.sock, request("GET", "/repos/acme/app", &auth)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let seen = r.seen();
    assert_eq!(seen.len(), 2);
    for s in &seen {
        assert_eq!(
            s.authorization.as_deref(),
            Some(basic("x-access-token", &real_token()).as_str()),
            "the host credential as Basic"
        );
    }
    assert_no_secret(&r);
}

#[tokio::test]
async fn a_relay_without_a_gate_refuses_outward_routes_and_forwards_plain_ones() {
    let r = start(None, None, Duration::from_secs(300)).await;
    let (status, body) = send(
        &r.sock,
        request("POST", "/repos/other/x/issues/7/comments", &r.key()),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["type"], "outward_denied", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no session decides outward actions"),
        "{body}"
    );
    assert_eq!(r.seen().len(), 0);
    let rec = &r.records(1).await[0];
    assert_eq!(rec.outcome, RelayOutcome::OutwardDenied);
    // positive control: the plain route is forwarded
    let (status, body) = send(&r.sock, request("GET", "/repos/other/x", &r.key())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(r.seen().len(), 1);
}

#[tokio::test]
async fn curl_posts_an_approved_comment_through_the_relay() {
    let r = start(Some(POLICY), None, Duration::from_secs(300)).await;
    let run = |path: &'static str| {
        let sock = r.sock.clone();
        let key = r.key();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new("curl")
                .args(["-sS", "--max-time", "60", "--unix-socket"])
                .arg(&sock)
                .args(["-o", "-", "-w", "\n%{http_code}", "-X", "POST"])
                .args(["-H", &format!("Authorization: {key}")])
                .args(["-H", "Content-Type: application/json"])
                .args(["--data", "{\"body\":\"hi\"}"])
                .arg(format!("http://localhost{path}"))
                .output()
                .expect("curl is installed")
        })
    };
    let out = run("/repos/other/x/issues/9/comments").await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.ends_with("\n201"), "{text}");
    let out = run("/repos/acme/x/issues/9/comments").await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.ends_with("\n403"), "{text}");
    assert!(text.contains("outward_denied"), "{text}");
    assert_eq!(r.seen().len(), 1, "only the allowed one reached the origin");
    assert_eq!(r.executed().len(), 1);
}

#[tokio::test]
async fn concurrent_outward_requests_are_each_decided_and_executed_once() {
    let r = start(Some(POLICY), None, Duration::from_secs(300)).await;
    let mut tasks = Vec::new();
    for i in 0..6 {
        for owner in ["other", "acme"] {
            let sock = r.sock.clone();
            let key = r.key();
            tasks.push(tokio::spawn(async move {
                let path = format!("/repos/{owner}/x/issues/{i}/comments");
                (owner, send(&sock, request("POST", &path, &key)).await.0)
            }));
        }
    }
    for t in tasks {
        let (owner, status) = t.await.unwrap();
        let want = if owner == "other" {
            StatusCode::CREATED
        } else {
            StatusCode::FORBIDDEN
        };
        assert_eq!(status, want, "{owner}");
    }
    let mut seen: Vec<String> = r.seen().into_iter().map(|s| s.uri).collect();
    seen.sort();
    let want: Vec<String> = (0..6)
        .map(|i| format!("/repos/other/x/issues/{i}/comments"))
        .collect();
    assert_eq!(seen, want, "each allowed one once, no denied one");
    let mut tickets: Vec<u64> = r.executed().into_iter().map(|(t, _)| t).collect();
    tickets.sort_unstable();
    tickets.dedup();
    assert_eq!(tickets.len(), 6, "six executed, each its own ticket");
    let recs = r.records(12).await;
    let mut forwarded: Vec<u64> = recs
        .iter()
        .filter(|x| x.outcome == RelayOutcome::Forwarded)
        .map(|x| x.ticket.unwrap())
        .collect();
    forwarded.sort_unstable();
    assert_eq!(forwarded, tickets, "each record names its own ticket");
    assert_eq!(
        recs.iter()
            .filter(|x| x.outcome == RelayOutcome::OutwardDenied)
            .count(),
        6
    );
    assert_eq!(*r.gate.as_ref().unwrap().refused_reports.lock().unwrap(), 0);
}
