//! When the worker gets its answer relative to its record, and what
//! shutdown does to connections still setting up; loopback only.
//!
//! * A connection is answered `200` (or forwarded) only after the
//!   recorder accepted its admission record; a recorder that fails turns
//!   that connection and every later one into a `503`. Checked with a
//!   recorder that fails after N records (through the public seam) and
//!   with the journal recorder on a full tmpfs in a private mount
//!   namespace (root only).
//! * Shutdown cuts connections still sending a head, a SOCKS handshake or
//!   a ClientHello at once and records them as `shutdown`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use palisade_egress::addr::AddressPolicy;
use palisade_egress::decide::HostRules;
use palisade_egress::proxy::{Limits, Listener, Proxy, ProxyConfig, shutdown_channel};
use palisade_egress::record::{Acceptance, CloseReason, Outcome, ProxyEvent, Recorder};
use palisade_egress::resolve::StaticResolver;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn lo() -> IpAddr {
    "127.0.0.1".parse().unwrap()
}

fn cfg() -> ProxyConfig {
    {
        let mut built = ProxyConfig::default();
        built.addresses = AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
        built.limits = {
            let mut built = Limits::default();
            built.max_connections = 4096;
            built
        };
        built
    }
}

/// A recorder that accepts its first `limit` records and fails every
/// record after them (a disk that fills up).
#[derive(Debug)]
struct FailsAfter {
    limit: usize,
    accepted: Mutex<Vec<ProxyEvent>>,
    failed: AtomicBool,
}

impl FailsAfter {
    fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            accepted: Mutex::new(Vec::new()),
            failed: AtomicBool::new(false),
        })
    }

    fn accept(&self, event: &ProxyEvent) -> bool {
        let mut a = self.accepted.lock().unwrap();
        if a.len() < self.limit && !self.failed.load(Ordering::SeqCst) {
            a.push(event.clone());
            true
        } else {
            self.failed.store(true, Ordering::SeqCst);
            false
        }
    }

    /// Connection ids with at least one accepted record.
    fn recorded_ids(&self) -> BTreeSet<u64> {
        self.accepted
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                ProxyEvent::Admitted(r) | ProxyEvent::Connection(r) => Some(r.id),
                _ => None,
            })
            .collect()
    }
}

impl Recorder for FailsAfter {
    fn record(&self, event: &ProxyEvent) {
        let _ = self.accept(event);
    }

    fn record_accepted(&self, event: &ProxyEvent) -> Acceptance {
        Acceptance::ready(self.accept(event))
    }

    fn healthy(&self) -> bool {
        !self.failed.load(Ordering::SeqCst)
    }
}

async fn start(recorder: Arc<dyn Recorder>) -> std::net::SocketAddr {
    let proxy = Proxy::new(
        cfg(),
        Arc::new(HostRules::new(&["127.0.0.1"], &[] as &[&str]).unwrap()),
        Arc::new(StaticResolver::new()),
        recorder,
    );
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (shutdown, signal) = shutdown_channel();
    // The proxy lives as long as the test's runtime.
    std::mem::forget(shutdown);
    tokio::spawn(async move { proxy.serve(Listener::Tcp(l), signal).await });
    addr
}

#[tokio::test]
async fn a_failing_recorder_answers_503_before_any_tunnel_opens_and_ever_after() {
    let origin = echo_origin().await;
    let recorder = FailsAfter::new(10);
    let addr = start(recorder.clone()).await;
    let auth = format!("127.0.0.1:{}", origin.port());
    // 20 tunnels held open together: none has ended, so the only records
    // so far are admissions; the recorder can take ten.
    let mut open = Vec::new();
    for _ in 0..20 {
        open.push(tokio::spawn({
            let auth = auth.clone();
            async move { connect_tunnel(addr, &auth, "").await }
        }));
    }
    let mut answered = Vec::new();
    let mut unavailable = 0;
    for t in open {
        let (s, head) = t.await.unwrap();
        if head.starts_with("HTTP/1.1 200") {
            answered.push(s);
        } else {
            assert!(
                head.starts_with("HTTP/1.1 503") && head.contains("recording_unavailable"),
                "{head}"
            );
            unavailable += 1;
        }
    }
    // positive control: the admitted tunnels work
    for s in &mut answered {
        assert!(tunnel_works(s).await);
    }
    assert_eq!(
        answered.len(),
        recorder.recorded_ids().len(),
        "every answered connection has an accepted record, and only those"
    );
    assert_eq!((answered.len(), unavailable), (10, 10));
    drop(answered);
    // every later connection is refused too
    for _ in 0..3 {
        let (_s, head) = connect_tunnel(addr, &auth, "").await;
        assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    }
}

/// An origin that counts the connections that sent it at least one byte
/// and answers each with `200 ok`.
async fn counting_origin() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                if matches!(s.read(&mut buf).await, Ok(n) if n > 0) {
                    count.fetch_add(1, Ordering::SeqCst);
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        )
                        .await;
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn plain_http_is_forwarded_only_after_its_record_was_accepted() {
    let (origin, seen) = counting_origin().await;
    // Two requests take two records each (admission, end); the third
    // request's admission is the fifth record and fails.
    let recorder = FailsAfter::new(4);
    let addr = start(recorder.clone()).await;
    let port = origin.port();
    let req = format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let resp = raw_exchange(addr, req.as_bytes()).await;
        statuses.push(status_of(&resp));
        // Wait for the end record before the next request.
        for _ in 0..500 {
            if recorder.accepted.lock().unwrap().len().is_multiple_of(2) || !recorder.healthy() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert_eq!(statuses, [200, 200, 503, 503]);
    assert_eq!(
        seen.load(Ordering::SeqCst),
        2,
        "a refused request reached the upstream"
    );
    assert_eq!(recorder.recorded_ids().len(), 2);
}

#[tokio::test]
async fn shutdown_cuts_connections_still_sending_a_head_a_handshake_or_a_hello() {
    let echo = echo_origin().await;
    let web = http_origin().await;
    let res = StaticResolver::new().with("web.test", &[lo()]);
    let config = {
        let mut built = cfg();
        built.// the echo origin's port is inspected for SNI
        sni_ports = vec![echo.port()];
        built
    };
    let mut p = TestProxy::start(config, &["web.test"], &[] as &[&str], res).await;
    // positive control: a complete request before shutdown is recorded
    // normally
    let port = web.port();
    let req = format!("GET http://web.test:{port}/ HTTP/1.1\r\nHost: web.test:{port}\r\n\r\n");
    let resp = raw_exchange(p.addr, req.as_bytes()).await;
    assert_eq!(status_of(&resp), 200, "{resp}");
    let r = p.last_record(1).await;
    assert_eq!(
        (r.outcome, r.reason.as_str(), r.close),
        (Outcome::Allowed, "allowed", CloseReason::Completed)
    );

    // half a head
    let mut head = TcpStream::connect(p.addr).await.unwrap();
    head.write_all(b"CONNECT web.test:443 HTTP/1.1\r\nHost: web")
        .await
        .unwrap();
    // half a SOCKS greeting
    let mut socks = TcpStream::connect(p.addr).await.unwrap();
    socks.write_all(&[5]).await.unwrap();
    // a tunnel whose ClientHello is still arriving (answered 200, so the
    // two connections above were accepted before it)
    let (mut hello, h) = connect_tunnel(p.addr, &format!("web.test:{}", echo.port()), "").await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    hello
        .write_all(&[0x16, 0x03, 0x01, 0x00, 0x40, 0x01, 0x00])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;

    p.shutdown.trigger();
    // Generous hang guard (the head and hello timeouts are 10 s), not a
    // timing assertion.
    let done = tokio::time::timeout(Duration::from_secs(5), &mut p.task).await;
    assert!(
        done.is_ok(),
        "shutdown waited for connections still setting up"
    );
    let records = p.recorder.connections();
    assert_eq!(records.len(), 4, "{records:?}");
    for r in &records[1..] {
        assert_eq!(
            (r.reason.as_str(), r.close),
            ("shutdown", CloseReason::Shutdown),
            "{r:?}"
        );
        assert_ne!(r.outcome, Outcome::Allowed, "{r:?}");
    }
    let cut_head = records
        .iter()
        .find(|r| r.host.is_none() && r.status == Some(503));
    assert!(cut_head.is_some(), "{records:?}");
    let answer = String::from_utf8_lossy(&read_to_end(&mut head).await).into_owned();
    assert_eq!(status_of(&answer), 503, "{answer}");
    assert!(answer.contains("shutdown"), "{answer}");
    assert!(read_to_end(&mut socks).await.is_empty());
    assert!(read_to_end(&mut hello).await.is_empty());
}

#[test]
fn on_a_full_disk_every_answered_connection_has_its_journal_record() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs this test as root (it mounts a tmpfs)"
        );
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    // A thread of its own: the mount namespace it unshares (and the tmpfs
    // in it) is seen by no other thread and goes away with it.
    std::thread::spawn(full_disk_run).join().unwrap();
}

fn full_disk_run() {
    use nix::mount::{MntFlags, MsFlags, mount, umount2};
    use nix::sched::{CloneFlags, unshare};
    use palisade_egress::journal::JournalRecorder;
    use palisade_evidence::{JournalKey, JournalWriter, Timestamp, WriterOptions};

    unshare(CloneFlags::CLONE_NEWNS).expect("unshare(CLONE_NEWNS)");
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .expect("make the mounts private");
    let dir = tempfile::tempdir().unwrap();
    mount(
        Some("tmpfs"),
        dir.path(),
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("size=32k,mode=0700"),
    )
    .expect("mount a 32 KiB tmpfs");
    let path = dir.path().join("egress.jsonl");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let key = JournalKey::generate().unwrap();
    let writer = JournalWriter::create(&path, &key, &WriterOptions::default(), Timestamp(now))
        .expect("the journal fits at first");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let answered = rt.block_on(async {
        let (rec, thread) = JournalRecorder::start(writer, "full-disk".into());
        let origin = echo_origin().await;
        let proxy = Proxy::new(
            cfg(),
            Arc::new(HostRules::new(&["127.0.0.1"], &[] as &[&str]).unwrap()),
            Arc::new(StaticResolver::new()),
            rec.clone(),
        );
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (shutdown, signal) = shutdown_channel();
        let task = tokio::spawn(async move { proxy.serve(Listener::Tcp(l), signal).await });
        let auth = format!("127.0.0.1:{}", origin.port());
        // Tunnels stay open, so the only records written meanwhile are
        // admissions: the disk fills up on one of them.
        let mut held = Vec::new();
        let mut refused = 0;
        for _ in 0..2000 {
            let (mut s, head) = connect_tunnel(addr, &auth, "").await;
            if head.starts_with("HTTP/1.1 200") {
                if held.is_empty() {
                    // positive control: an admitted tunnel works
                    assert!(tunnel_works(&mut s).await);
                }
                held.push(s);
            } else {
                assert!(
                    head.starts_with("HTTP/1.1 503") && head.contains("recording_unavailable"),
                    "{head}"
                );
                refused += 1;
                if refused == 3 {
                    break;
                }
            }
        }
        assert_eq!(refused, 3, "the 32 KiB journal never filled up");
        assert!(!held.is_empty());
        let answered = held.len();
        drop(held);
        shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the proxy stops")
            .unwrap()
            .unwrap();
        // The disk is full: closing cleanly cannot succeed.
        assert!(thread.finish(&rec).is_err());
        answered
    });
    let bytes = std::fs::read(&path).unwrap();
    let admitted = String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["kind"] == "egress_admitted")
        .count();
    assert_eq!(
        answered, admitted,
        "connections answered 200 vs. admission records in the journal"
    );
    umount2(dir.path(), MntFlags::MNT_DETACH).unwrap();
}
