//! Plain-HTTP framing through the proxy, on loopback only, with raw bytes:
//! a `Connection` header may not remove a header the proxy frames the body
//! by, and nothing after the first request's body (a pipelined request,
//! with its `Proxy-Authorization`) ever reaches the upstream.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use palisade_egress::addr::AddressPolicy;
use palisade_egress::proxy::{ProxyConfig, ProxyToken};
use palisade_egress::record::{Outcome, ProxyKind};
use palisade_egress::resolve::StaticResolver;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn lo() -> IpAddr {
    "127.0.0.1".parse().unwrap()
}

fn cfg(token: Option<ProxyToken>) -> ProxyConfig {
    {
        let mut built = ProxyConfig::default();
        built.addresses = AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
        built.token = token;
        built
    }
}

/// Everything each upstream connection received, in accept order.
type Log = Arc<Mutex<Vec<Vec<u8>>>>;

/// A plain HTTP origin that answers the first request of each connection
/// with `200 ok` once it has its head and body, then keeps reading until
/// the proxy closes, and logs every byte the connection received.
async fn recording_origin() -> (SocketAddr, Log) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let log: Log = Arc::default();
    let for_task = log.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let slot = {
                let mut log = for_task.lock().unwrap();
                log.push(Vec::new());
                log.len() - 1
            };
            let log = for_task.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let mut answered = false;
                let _ = tokio::time::timeout(Duration::from_secs(10), async {
                    loop {
                        if !answered && request_complete(&buf) {
                            answered = true;
                            let _ = s
                                .write_all(
                                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                                )
                                .await;
                            // Half-close: the response is complete, keep
                            // reading what else the proxy sends.
                            let _ = s.shutdown().await;
                        }
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                buf.extend_from_slice(&chunk[..n]);
                                log.lock().unwrap()[slot] = buf.clone();
                            }
                        }
                    }
                })
                .await;
            });
        }
    });
    (addr, log)
}

/// Whether `buf` holds a whole first request (head, then a
/// `Content-Length` or chunked body).
fn request_complete(buf: &[u8]) -> bool {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let rest = &buf[end + 4..];
    if head.contains("transfer-encoding: chunked") {
        // a last chunk, then an empty line (after any trailers)
        let last_chunk = rest.starts_with(b"0\r\n") || rest.windows(5).any(|w| w == b"\r\n0\r\n");
        return last_chunk && rest.ends_with(b"\r\n\r\n");
    }
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .map_or(0, |v| v.trim().parse::<usize>().unwrap());
    rest.len() >= length
}

/// The upstream log once `n` connections finished (bounded wait).
async fn upstream_log(log: &Log, n: usize) -> Vec<Vec<u8>> {
    for _ in 0..500 {
        let snapshot = log.lock().unwrap().clone();
        if snapshot.len() >= n && snapshot.iter().all(|c| request_complete(c)) {
            // Let a pipelined tail that is still on its way arrive.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let again = log.lock().unwrap().clone();
            if again == snapshot {
                return again;
            }
            continue;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "expected {n} complete upstream connections, got {}",
        log.lock().unwrap().len()
    );
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// `bytes` as text with `secret` replaced, safe to print.
fn redacted(bytes: &[u8], secret: &str) -> String {
    String::from_utf8_lossy(bytes).replace(secret, "<token>")
}

#[tokio::test]
async fn a_connection_header_naming_a_framing_header_is_refused_and_nothing_is_forwarded() {
    let (origin, log) = recording_origin().await;
    let res = StaticResolver::new().with("web.test", &[lo()]);
    let p = TestProxy::start(cfg(None), &["web.test"], &[] as &[&str], res).await;
    let port = origin.port();
    let smuggled = "GET http://web.test/smuggled HTTP/1.1\r\nHost: web.test\r\n\r\n";
    let chunked = format!("{:x}\r\n{smuggled}\r\n0\r\n\r\n", smuggled.len());
    let cases = [
        ("content-length", false),
        ("Keep-Alive, Content-Length", false),
        ("transfer-encoding", true),
        ("host", false),
        ("close, HOST", true),
    ];
    for (i, (value, is_chunked)) in cases.iter().enumerate() {
        let (framing, body) = if *is_chunked {
            ("Transfer-Encoding: chunked".to_owned(), chunked.clone())
        } else {
            (
                format!("Content-Length: {}", smuggled.len()),
                smuggled.to_owned(),
            )
        };
        let req = format!(
            "POST http://web.test:{port}/upload HTTP/1.1\r\nHost: web.test:{port}\r\n{framing}\r\nConnection: {value}\r\n\r\n{body}"
        );
        let resp = raw_exchange(p.addr, req.as_bytes()).await;
        assert_eq!(status_of(&resp), 400, "{value}: {resp}");
        assert!(resp.contains("bad_connection"), "{value}: {resp}");
        let r = p.last_record(i + 1).await;
        assert_eq!(
            (r.outcome, r.reason.as_str(), r.status),
            (Outcome::Denied, "bad_request:bad_connection", Some(400)),
            "{value}"
        );
    }
    assert_eq!(
        log.lock().unwrap().len(),
        0,
        "a refused request reached the upstream"
    );

    // positive control: keep-alive, close and a custom hop-by-hop token
    // still work; the framing header and the body arrive intact.
    let controls = ["keep-alive", "close", "Keep-Alive, X-Hop"];
    for (i, value) in controls.iter().enumerate() {
        let req = format!(
            "POST http://web.test:{port}/upload HTTP/1.1\r\nHost: web.test:{port}\r\nContent-Length: 5\r\nX-Hop: drop-me\r\nConnection: {value}\r\n\r\nhello"
        );
        let resp = raw_exchange(p.addr, req.as_bytes()).await;
        assert_eq!(status_of(&resp), 200, "{value}: {resp}");
        let r = p.last_record(cases.len() + i + 1).await;
        assert_eq!((r.kind, r.outcome), (ProxyKind::Http, Outcome::Allowed));
        let got = upstream_log(&log, i + 1).await;
        let text = String::from_utf8_lossy(&got[i]).into_owned();
        assert!(text.starts_with("POST /upload HTTP/1.1\r\n"), "{text}");
        assert!(text.contains("\r\nContent-Length: 5\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nhello"), "{text}");
        assert_eq!(
            text.contains("X-Hop"),
            !value.contains("X-Hop"),
            "{value}: {text}"
        );
    }
}

#[tokio::test]
async fn pipelined_requests_are_never_forwarded_and_the_token_never_reaches_the_upstream() {
    let (origin, log) = recording_origin().await;
    let res = StaticResolver::new().with("web.test", &[lo()]);
    let secret: String = "nekot-noisses-ym".chars().rev().collect();
    let token = ProxyToken::from_secret(secret.clone());
    let p = TestProxy::start(cfg(Some(token)), &["web.test"], &[] as &[&str], res).await;
    let port = origin.port();
    let auth = format!("Proxy-Authorization: Bearer {secret}\r\n");
    let get = |path: &str| {
        format!("GET http://web.test:{port}/{path} HTTP/1.1\r\nHost: web.test:{port}\r\n{auth}\r\n")
    };
    let post = format!(
        "POST http://web.test:{port}/form HTTP/1.1\r\nHost: web.test:{port}\r\n{auth}Content-Length: 5\r\n\r\nhello"
    );
    let chunked = format!(
        "POST http://web.test:{port}/stream HTTP/1.1\r\nHost: web.test:{port}\r\n{auth}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    );

    // positive control: a single request is forwarded and recorded.
    let resp = raw_exchange(p.addr, get("single").as_bytes()).await;
    assert_eq!(
        status_of(&resp),
        200,
        "{}",
        redacted(resp.as_bytes(), &secret)
    );
    let r = p.last_record(1).await;
    assert_eq!((r.kind, r.outcome), (ProxyKind::Http, Outcome::Allowed));
    let got = upstream_log(&log, 1).await;
    assert!(
        got[0].starts_with(b"GET /single HTTP/1.1\r\n"),
        "{}",
        redacted(&got[0], &secret)
    );

    // two and three requests in one write, with bodies of both framings
    let batches = [
        vec![get("a1"), get("a2")],
        vec![post.clone(), get("b2"), get("b3")],
        vec![chunked.clone(), post.clone(), get("c3")],
    ];
    for (i, batch) in batches.iter().enumerate() {
        let conn = i + 2;
        let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
        s.write_all(batch.concat().as_bytes()).await.unwrap();
        let resp = read_to_end(&mut s).await;
        // The proxy closed after one answer; a client then closes too.
        drop(s);
        assert_eq!(
            count(&resp, b"HTTP/1.1 200 OK"),
            1,
            "one answer: {}",
            redacted(&resp, &secret)
        );
        let got = upstream_log(&log, conn).await;
        assert_eq!(got.len(), conn, "one upstream connection per client one");
        let up = &got[conn - 1];
        assert_eq!(
            count(up, secret.as_bytes()),
            0,
            "the token reached the upstream: {}",
            redacted(up, &secret)
        );
        assert_eq!(
            count(up, b" HTTP/1.1\r\n"),
            1,
            "only the first request is forwarded: {}",
            redacted(up, &secret)
        );
        let first = batch[0].split_once("\r\n\r\n").unwrap().1;
        assert!(
            up.ends_with(format!("\r\n\r\n{first}").as_bytes()),
            "the first body arrives exactly: {}",
            redacted(up, &secret)
        );
        // every forwarded request was decided and recorded
        let records = p.records(conn).await;
        assert_eq!(records.len(), conn);
        let r = &records[conn - 1];
        assert_eq!(
            (r.kind, r.outcome, r.reason.as_str()),
            (ProxyKind::Http, Outcome::Allowed, "allowed")
        );
        assert_eq!(r.bytes_up, up.len() as u64, "bytes_up counts what was sent");
    }
    // nothing anywhere carries the token
    let all = log.lock().unwrap().concat();
    assert_eq!(count(&all, secret.as_bytes()), 0);
    assert_eq!(count(&all, b"Proxy-Authorization"), 0);
}

#[tokio::test]
async fn a_malformed_chunked_body_is_cut_and_what_follows_is_not_forwarded() {
    let (origin, log) = recording_origin().await;
    let res = StaticResolver::new().with("web.test", &[lo()]);
    let p = TestProxy::start(cfg(None), &["web.test"], &[] as &[&str], res).await;
    let port = origin.port();
    let head = format!(
        "POST http://web.test:{port}/x HTTP/1.1\r\nHost: web.test:{port}\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    // A chunk with an extension, then a request that a lenient reader
    // might take for the next message.
    let bad =
        format!("{head}5;x=y\r\nhello\r\n0\r\n\r\nGET /after HTTP/1.1\r\nHost: web.test\r\n\r\n");
    let resp = raw_exchange(p.addr, bad.as_bytes()).await;
    assert_eq!(status_of(&resp), 400, "{resp}");
    assert!(resp.contains("bad_chunked_body"), "{resp}");
    let r = p.last_record(1).await;
    assert_eq!(r.reason, "bad_request:bad_chunked_body");
    assert!(log.lock().unwrap().iter().all(|c| count(c, b"/after") == 0));
    // positive control: the same body without the extension is forwarded
    let good = format!("{head}5\r\nhello\r\n0\r\n\r\n");
    let resp = raw_exchange(p.addr, good.as_bytes()).await;
    assert_eq!(status_of(&resp), 200, "{resp}");
    let got = upstream_log(&log, 1).await;
    let last = got.last().unwrap();
    assert!(
        last.ends_with(b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        "{last:?}"
    );
}

#[tokio::test]
async fn a_body_arriving_after_the_head_is_framed_too() {
    let (origin, log) = recording_origin().await;
    let res = StaticResolver::new().with("web.test", &[lo()]);
    let secret: String = "dnoces-nekot-ym".chars().rev().collect();
    let token = ProxyToken::from_secret(secret.clone());
    let p = TestProxy::start(cfg(Some(token)), &["web.test"], &[] as &[&str], res).await;
    let port = origin.port();
    let auth = format!("Proxy-Authorization: Bearer {secret}\r\n");
    let next =
        format!("GET http://web.test:{port}/after HTTP/1.1\r\nHost: web.test:{port}\r\n{auth}\r\n");
    // (head, then body and a pipelined request in later writes, expected
    // upstream tail)
    let cases = [
        (
            format!(
                "POST http://web.test:{port}/cl HTTP/1.1\r\nHost: web.test:{port}\r\n{auth}Content-Length: 10\r\n\r\n"
            ),
            vec!["hello".to_owned(), format!("world{next}")],
            "\r\n\r\nhelloworld".to_owned(),
        ),
        (
            format!(
                "POST http://web.test:{port}/te HTTP/1.1\r\nHost: web.test:{port}\r\n{auth}Transfer-Encoding: chunked\r\n\r\n"
            ),
            vec![
                "5\r\nhel".to_owned(),
                format!("lo\r\n0\r\nX-Sum: 1\r\n\r\n{next}"),
            ],
            "\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n".to_owned(),
        ),
    ];
    for (i, (head, later, tail)) in cases.iter().enumerate() {
        let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        for part in later {
            // Separate reads on the proxy's side: wait until the previous
            // bytes reached the upstream.
            let want = i + 1;
            for _ in 0..500 {
                if log.lock().unwrap().len() >= want {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            s.write_all(part.as_bytes()).await.unwrap();
        }
        let resp = read_to_end(&mut s).await;
        drop(s);
        assert_eq!(
            count(&resp, b"HTTP/1.1 200 OK"),
            1,
            "{}",
            redacted(&resp, &secret)
        );
        let got = upstream_log(&log, i + 1).await;
        let up = &got[i];
        assert!(up.ends_with(tail.as_bytes()), "{}", redacted(up, &secret));
        assert_eq!(count(up, b"/after"), 0, "{}", redacted(up, &secret));
        assert_eq!(count(up, secret.as_bytes()), 0, "{}", redacted(up, &secret));
        let r = p.last_record(i + 1).await;
        assert_eq!((r.outcome, r.bytes_up), (Outcome::Allowed, up.len() as u64));
    }
}

#[tokio::test]
async fn a_chunked_body_that_turns_malformed_later_is_cut_there() {
    let (origin, log) = recording_origin().await;
    let res = StaticResolver::new().with("web.test", &[lo()]);
    let p = TestProxy::start(cfg(None), &["web.test"], &[] as &[&str], res).await;
    let port = origin.port();
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    s.write_all(
        format!(
            "POST http://web.test:{port}/x HTTP/1.1\r\nHost: web.test:{port}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    for _ in 0..500 {
        if log
            .lock()
            .unwrap()
            .first()
            .is_some_and(|c| c.ends_with(b"hello\r\n"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // positive control: the valid prefix went through
    assert!(log.lock().unwrap()[0].ends_with(b"\r\n\r\n5\r\nhello\r\n"));
    s.write_all(b"3;ext\r\nabc\r\n0\r\n\r\nGET /after HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let _ = read_to_end(&mut s).await;
    let r = p.last_record(1).await;
    assert_eq!(
        (r.outcome, r.close),
        (
            Outcome::Allowed,
            palisade_egress::record::CloseReason::ClientError
        )
    );
    let up = log.lock().unwrap()[0].clone();
    assert!(up.ends_with(b"\r\n\r\n5\r\nhello\r\n"), "{up:?}");
}

#[tokio::test]
async fn a_stream_that_is_not_a_socket_is_framed_the_same() {
    use palisade_egress::decide::HostRules;
    use palisade_egress::proxy::{Proxy, shutdown_channel};
    use palisade_egress::record::MemoryRecorder;
    let (origin, log) = recording_origin().await;
    let recorder = Arc::new(MemoryRecorder::new());
    let proxy = Proxy::new(
        cfg(None),
        Arc::new(HostRules::new(&["web.test"], &[] as &[&str]).unwrap()),
        Arc::new(StaticResolver::new().with("web.test", &[lo()])),
        recorder.clone(),
    );
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let (_shutdown, signal) = shutdown_channel();
    let task = tokio::spawn(async move { proxy.handle(server, "duplex".into(), signal).await });
    let port = origin.port();
    client
        .write_all(
            format!("POST http://web.test:{port}/d HTTP/1.1\r\nHost: web.test:{port}\r\nContent-Length: 5\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    for _ in 0..500 {
        if !log.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    client
        .write_all(
            format!(
                "helloGET http://web.test:{port}/after HTTP/1.1\r\nHost: web.test:{port}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let resp = read_to_end(&mut client).await;
    drop(client);
    assert_eq!(count(&resp, b"HTTP/1.1 200 OK"), 1, "{resp:?}");
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    let got = upstream_log(&log, 1).await;
    assert!(
        got[0].ends_with(b"\r\n\r\nhello"),
        "{:?}",
        String::from_utf8_lossy(&got[0])
    );
    assert_eq!(count(&got[0], b"/after"), 0);
    let r = &recorder.connections()[0];
    assert_eq!(
        (r.outcome, r.bytes_up),
        (Outcome::Allowed, got[0].len() as u64)
    );
}
