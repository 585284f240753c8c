//! Integration tests of the control channel over real Unix sockets: taint
//! reports, outward decisions with host approval, timeouts, endpoint
//! separation and strict, bounded parsing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use palisade_egress::control::{
    Approval, AskAnswer, CheckpointRefusal, CheckpointSummary, ClientError, ControlAddr,
    ControlBackend, ControlClient, ControlConfig, ControlListener, ControlServer, Endpoint,
    MAX_LINE_BYTES, OutwardAnswer, PolicyAnswer, SessionView, TaintEntry, TaintKind,
};

/// A tiny session: git.push allowed when clean (ask when tainted), payment denied, else ask.
#[derive(Default)]
struct Fake {
    state: Mutex<SessionView>,
    events: Mutex<Vec<String>>,
}

impl ControlBackend for Fake {
    fn taint(&self, source: TaintKind, detail: &str) -> SessionView {
        let mut s = self.state.lock().unwrap();
        s.tainted = true;
        s.sources.push(TaintEntry {
            source: source.as_str().into(),
            detail: detail.into(),
            at: "t".into(),
        });
        self.events
            .lock()
            .unwrap()
            .push(format!("taint {}", source.as_str()));
        s.clone()
    }
    fn decide_outward(&self, kind: &str, _target: &str) -> PolicyAnswer {
        let tainted = self.state.lock().unwrap().tainted;
        let verdict = match kind {
            "payment" => AskAnswer::Deny,
            "git.push" if !tainted => AskAnswer::Allow,
            _ => AskAnswer::Ask,
        };
        PolicyAnswer::new(verdict, None, format!("fake {}", verdict.as_str()))
    }
    fn outward_settled(&self, kind: &str, _target: &str, answer: &OutwardAnswer) {
        self.events
            .lock()
            .unwrap()
            .push(format!("outward {kind} {}", answer.decision.as_str()));
    }
    fn outward_executed(&self, ticket: u64, kind: &str, _target: &str, status: Option<i32>) {
        self.events
            .lock()
            .unwrap()
            .push(format!("executed {ticket} {kind} {status:?}"));
    }
    fn state(&self) -> SessionView {
        self.state.lock().unwrap().clone()
    }
    fn checkpoint(&self) -> Result<CheckpointSummary, String> {
        self.events.lock().unwrap().push("checkpoint".to_owned());
        Ok(CheckpointSummary {
            changes: 1,
            counts: [("created".to_owned(), 1)].into_iter().collect(),
            refused: vec![CheckpointRefusal {
                root: "/work".into(),
                path: ".git/hooks/pre-commit".into(),
                rule: "git_internal".into(),
            }],
            refused_total: 1,
            digest: "sha256:ab".into(),
        })
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    worker: ControlAddr,
    host: ControlAddr,
    server: ControlServer,
    fake: Arc<Fake>,
}

fn start(timeout: Duration) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(Fake::default());
    let server = ControlServer::new(fake.clone(), {
        let mut built = ControlConfig::default();
        built.approval_timeout = timeout;
        built
    });
    let wp = dir.path().join("control.sock");
    let hp = dir.path().join("host.sock");
    server.serve(
        ControlListener::bind_unix(&wp, 0o600).unwrap(),
        Endpoint::Worker,
    );
    server.serve(
        ControlListener::bind_unix(&hp, 0o600).unwrap(),
        Endpoint::Host,
    );
    Harness {
        _dir: dir,
        worker: ControlAddr::Unix(wp),
        host: ControlAddr::Unix(hp),
        server,
        fake,
    }
}

fn client(addr: &ControlAddr) -> ControlClient {
    ControlClient::connect(addr, Some(Duration::from_secs(20))).unwrap()
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

async fn wait_pending(host: &ControlAddr) -> u64 {
    for _ in 0..200 {
        let h = host.clone();
        let p = blocking(move || client(&h).pending().unwrap()).await;
        if let Some(first) = p.first() {
            return first.ticket;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no pending action appeared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taint_is_reported_sticky_and_visible_in_state() {
    let h = start(Duration::from_secs(5));
    let w = h.worker.clone();
    let (before, after, again) = blocking(move || {
        let mut c = client(&w);
        let before = c.state().unwrap();
        let after = c
            .taint(TaintKind::MarkedFile, "notes/untrusted.md")
            .unwrap();
        let again = c.state().unwrap();
        (before, after, again)
    })
    .await;
    assert!(!before.tainted);
    assert!(after.tainted);
    assert_eq!(after.sources[0].source, "marked_file");
    assert_eq!(again, after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outward_allow_becomes_ask_once_tainted_and_waits_for_the_host() {
    let h = start(Duration::from_secs(10));
    let w = h.worker.clone();
    // Positive control: clean session, the policy allows git.push outright.
    let clean = blocking(move || {
        client(&w)
            .outward("git.push", "github.com/acme/app:main")
            .unwrap()
    })
    .await;
    assert_eq!(
        (clean.decision, clean.policy, clean.approval),
        (AskAnswer::Allow, AskAnswer::Allow, None)
    );

    let w = h.worker.clone();
    blocking(move || {
        client(&w)
            .taint(TaintKind::Web, "https://example.org")
            .unwrap()
    })
    .await;
    let w = h.worker.clone();
    let asked = tokio::spawn(blocking(move || {
        client(&w)
            .outward("git.push", "github.com/acme/app:main")
            .unwrap()
    }));
    let ticket = wait_pending(&h.host).await;
    let hh = h.host.clone();
    blocking(move || client(&hh).resolve(ticket, true).unwrap()).await;
    let answer = asked.await.unwrap();
    assert_eq!(answer.policy, AskAnswer::Ask);
    assert_eq!(answer.approval, Some(Approval::Approved));
    assert_eq!(answer.decision, AskAnswer::Allow);

    // The host can also deny.
    let w = h.worker.clone();
    let asked = tokio::spawn(blocking(move || {
        client(&w)
            .outward("git.push", "github.com/acme/app:main")
            .unwrap()
    }));
    let ticket = wait_pending(&h.host).await;
    let hh = h.host.clone();
    blocking(move || client(&hh).resolve(ticket, false).unwrap()).await;
    let answer = asked.await.unwrap();
    assert_eq!(
        (answer.decision, answer.approval),
        (AskAnswer::Deny, Some(Approval::Denied))
    );

    let events = h.fake.events.lock().unwrap().clone();
    assert_eq!(
        events,
        [
            "outward git.push allow",
            "taint web",
            "outward git.push allow",
            "outward git.push deny"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_ask_times_out_as_deny_and_a_deny_never_asks() {
    let h = start(Duration::from_millis(200));
    let w = h.worker.clone();
    let (ask, deny) = blocking(move || {
        let mut c = client(&w);
        (
            c.outward("mail.send", "boss@example.com").unwrap(),
            c.outward("payment", "shop").unwrap(),
        )
    })
    .await;
    assert_eq!(
        (ask.policy, ask.decision, ask.approval),
        (AskAnswer::Ask, AskAnswer::Deny, Some(Approval::TimedOut))
    );
    assert_eq!(
        (deny.policy, deny.decision, deny.approval),
        (AskAnswer::Deny, AskAnswer::Deny, None)
    );
    assert!(h.server.pending().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_endpoint_cannot_approve() {
    let h = start(Duration::from_secs(10));
    let w = h.worker.clone();
    let asked = tokio::spawn(blocking(move || {
        client(&w).outward("mail.send", "x@example.com").unwrap()
    }));
    let ticket = wait_pending(&h.host).await;
    let w = h.worker.clone();
    let refused = blocking(move || client(&w).resolve(ticket, true)).await;
    match refused {
        Err(ClientError::Refused { code, .. }) => assert_eq!(code, "host_only"),
        other => panic!("worker resolved its own ask: {other:?}"),
    }
    let w = h.worker.clone();
    assert!(matches!(
        blocking(move || client(&w).pending()).await,
        Err(ClientError::Refused { .. })
    ));
    // Positive control: the same request on the host endpoint settles it.
    assert_eq!(h.server.pending().len(), 1);
    let hh = h.host.clone();
    blocking(move || client(&hh).resolve(ticket, true).unwrap()).await;
    assert_eq!(asked.await.unwrap().decision, AskAnswer::Allow);
    // An unknown ticket is an error, not a silent success.
    let hh = h.host.clone();
    assert!(
        blocking(move || client(&hh).resolve(999, true))
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executed_is_accepted_once_and_only_for_allowed_tickets() {
    let h = start(Duration::from_millis(100));
    let w = h.worker.clone();
    let (ok, twice, denied, unknown) = blocking(move || {
        let mut c = client(&w);
        let allowed = c.outward("git.push", "r").unwrap();
        let denied = c.outward("payment", "p").unwrap();
        let ok = c.executed(allowed.ticket, Some(0));
        let twice = c.executed(allowed.ticket, Some(0));
        let d = c.executed(denied.ticket, None);
        let u = c.executed(12345, None);
        (ok, twice, d, u)
    })
    .await;
    assert!(ok.is_ok());
    assert!(twice.is_err());
    assert!(denied.is_err());
    assert!(unknown.is_err());
    let events = h.fake.events.lock().unwrap().clone();
    assert_eq!(
        events.iter().filter(|e| e.starts_with("executed")).count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_denies_pending_actions() {
    let h = start(Duration::from_secs(30));
    let w = h.worker.clone();
    let asked = tokio::spawn(blocking(move || {
        client(&w).outward("mail.send", "x").unwrap()
    }));
    wait_pending(&h.host).await;
    h.server.shutdown();
    let a = asked.await.unwrap();
    assert_eq!(
        (a.decision, a.approval),
        (AskAnswer::Deny, Some(Approval::Cancelled))
    );
}

fn raw(path: &Path, bytes: &[u8]) -> Vec<String> {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let bytes = bytes.to_vec();
    // The server may close before it read everything (an overlong line): ignore write errors.
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(&bytes);
        let _ = w.shutdown(std::net::Shutdown::Write);
    });
    let lines = BufReader::new(s).lines().map_while(Result::ok).collect();
    writer.join().unwrap();
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_lines_get_errors_and_the_connection_stays_usable() {
    let h = start(Duration::from_secs(1));
    let ControlAddr::Unix(p) = h.worker.clone() else {
        unreachable!()
    };
    let lines = blocking(move || {
        raw(
            &p,
            b"garbage\n{\"v\":1,\"op\":\"state\",\"x\":1}\n{\"v\":9,\"op\":\"state\"}\n{\"v\":1,\"op\":\"state\"}\n",
        )
    })
    .await;
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(lines[0].contains("\"code\":\"malformed\""));
    assert!(lines[1].contains("\"code\":\"malformed\""));
    assert!(lines[2].contains("\"code\":\"unsupported_version\""));
    // Positive control on the same connection.
    assert!(lines[3].contains("\"ok\":true"), "{}", lines[3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlong_line_is_refused_and_the_connection_closed() {
    let h = start(Duration::from_secs(1));
    let ControlAddr::Unix(p) = h.worker.clone() else {
        unreachable!()
    };
    let mut big = vec![b'a'; MAX_LINE_BYTES * 4];
    big.extend_from_slice(b"\n{\"v\":1,\"op\":\"state\"}\n");
    let lines = blocking(move || raw(&p, &big)).await;
    assert_eq!(
        lines.len(),
        1,
        "connection must close after an overlong line"
    );
    assert!(lines[0].contains("line_too_long"));
    // Positive control: a new connection works.
    let w = h.worker.clone();
    assert!(blocking(move || client(&w).state()).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_are_private_and_removed_on_shutdown() {
    use std::os::unix::fs::PermissionsExt;
    let h = start(Duration::from_secs(1));
    let ControlAddr::Unix(p) = h.host.clone() else {
        unreachable!()
    };
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    h.server.shutdown();
    for _ in 0..100 {
        if !p.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("socket left behind after shutdown");
}

#[test]
fn addresses_parse_strictly() {
    assert_eq!(
        ControlAddr::parse("unix:/run/x.sock"),
        Ok(ControlAddr::Unix("/run/x.sock".into()))
    );
    assert_eq!(
        ControlAddr::parse("/run/x.sock"),
        Ok(ControlAddr::Unix("/run/x.sock".into()))
    );
    assert!(ControlAddr::parse("tcp:127.0.0.1:9").is_ok());
    assert!(ControlAddr::parse("tcp:10.0.0.1:9").is_err());
    assert!(ControlAddr::parse("tcp:localhost:9").is_err());
    assert!(ControlAddr::parse("relative.sock").is_err());
    assert!(ControlAddr::parse("unix:").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_endpoint_cannot_take_a_checkpoint() {
    let h = start(Duration::from_secs(10));
    let w = h.worker.clone();
    match blocking(move || client(&w).checkpoint()).await {
        Err(ClientError::Refused { code, .. }) => assert_eq!(code, "host_only"),
        other => panic!("the worker took a checkpoint: {other:?}"),
    }
    // The backend was never asked: a refused request records nothing.
    assert!(
        !h.fake
            .events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e == "checkpoint"),
        "the worker's request reached the backend"
    );
    // Positive control: the host endpoint answers with the backend's summary.
    let hh = h.host.clone();
    let summary = blocking(move || client(&hh).checkpoint().unwrap()).await;
    assert_eq!(summary.changes, 1);
    assert_eq!(summary.refused[0].rule, "git_internal");
    assert_eq!(
        h.fake
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| *e == "checkpoint")
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_ticket_is_reported_executed_by_that_relay_alone() {
    let h = start(Duration::from_millis(100));
    let action = palisade_egress::control::OutwardAction::new(
        "git.push",
        "github.com/acme/app:refs/heads/agent/x",
        Some("github-git"),
    );
    let answer = h.server.request_outward(&action).await;
    assert_eq!(answer.decision, AskAnswer::Allow);
    // The worker guesses the relay's ticket and reports it first: refused,
    // so the relay's own record (with the ref and the upstream status)
    // cannot be replaced by the worker's.
    let w = h.worker.clone();
    let t = answer.ticket;
    match blocking(move || client(&w).executed(t, Some(0))).await {
        Err(ClientError::Refused { code, message }) => {
            assert_eq!(code, "unknown_ticket");
            assert!(message.contains("relay"), "{message}");
        }
        other => panic!("the worker reported a relay's ticket: {other:?}"),
    }
    let result = palisade_egress::control::OutwardResult {
        status: Some(200),
        ..Default::default()
    };
    // Positive control: the relay reports it, once.
    assert!(h.server.relay_executed(t, &action, &result));
    assert!(!h.server.relay_executed(t, &action, &result));
    // And a worker's ticket is the worker's: a relay cannot report it,
    // the worker can (positive control).
    let w = h.worker.clone();
    let own = blocking(move || client(&w).outward("git.push", "r").unwrap()).await;
    assert_eq!(own.decision, AskAnswer::Allow);
    assert!(!h.server.relay_executed(own.ticket, &action, &result));
    let w = h.worker.clone();
    let t = own.ticket;
    blocking(move || client(&w).executed(t, Some(0)).unwrap()).await;
    let events = h.fake.events.lock().unwrap().clone();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.starts_with("executed"))
            .cloned()
            .collect::<Vec<_>>(),
        vec![
            format!("executed {} git.push Some(200)", answer.ticket),
            format!("executed {} git.push Some(0)", own.ticket),
        ],
        "{events:?}"
    );
}
