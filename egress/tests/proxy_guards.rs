//! The proxy's decision path against a hostile worker, on loopback only:
//! concurrent requests cannot all be decided on the clean taint state, and
//! unspecified addresses are never dialled, whatever the carve-outs say.
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

use common::*;
use palisade_egress::addr::AddressPolicy;
use palisade_egress::policy::PolicyDecider;
use palisade_egress::proxy::{Listener, Proxy, ProxyConfig, Shutdown, shutdown_channel};
use palisade_egress::record::MemoryRecorder;
use palisade_egress::resolve::StaticResolver;
use palisade_taint::Session;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const N: usize = 20;

fn lo() -> IpAddr {
    "127.0.0.1".parse().unwrap()
}

struct Rig {
    addr: SocketAddr,
    recorder: Arc<MemoryRecorder>,
    session: Arc<Mutex<Session>>,
    _shutdown: Shutdown,
}

/// A proxy over `toml` with a [`PolicyDecider`] that records its taint,
/// resolving `t0.wild.test` .. `t19.wild.test` to 127.0.0.1.
async fn rig(toml: &str) -> Rig {
    let (policy, _) = palisade_schema::host_policy::parse("palisade.toml", toml)
        .unwrap()
        .into_parts();
    let rules = palisade_taint::Rules::new(&policy, &[]).unwrap();
    let session = Arc::new(Mutex::new(Session::new()));
    let recorder = Arc::new(MemoryRecorder::new());
    let decider = PolicyDecider::new(Arc::new(policy), Arc::new(rules), session.clone())
        .with_recorder(recorder.clone());
    let mut res = StaticResolver::new();
    for i in 0..N {
        res = res.with(&format!("t{i}.wild.test"), &[lo()]);
    }
    let proxy = Proxy::new(
        {
            let mut built = ProxyConfig::default();
            built.addresses = AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
            built
        },
        Arc::new(decider),
        Arc::new(res),
        recorder.clone(),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (shutdown, signal) = shutdown_channel();
    tokio::spawn(async move { proxy.serve(Listener::Tcp(l), signal).await });
    Rig {
        addr,
        recorder,
        session,
        _shutdown: shutdown,
    }
}

/// Opens `N` connections, sends `CONNECT tI.wild.test` on every one before
/// reading any reply, then returns the status lines in request order.
async fn burst(proxy: SocketAddr, port: u16) -> Vec<String> {
    let mut conns = Vec::new();
    for _ in 0..N {
        conns.push(TcpStream::connect(proxy).await.unwrap());
    }
    for (i, s) in conns.iter_mut().enumerate() {
        let a = format!("t{i}.wild.test:{port}");
        s.write_all(format!("CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n\r\n").as_bytes())
            .await
            .unwrap();
    }
    let mut heads = Vec::new();
    for s in &mut conns {
        heads.push(read_head(s).await);
    }
    // keep the tunnels open until every answer is in
    drop(conns);
    heads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_cannot_outrun_the_taint_they_raise() {
    let origin = echo_origin().await;
    // The default taint sources: a non-relay connection taints.
    let p = rig("[egress]\nallow = [\"*.wild.test\"]\nallow_addresses = [\"127.0.0.0/8\"]\n").await;
    let heads = burst(p.addr, origin.port()).await;
    let allowed: Vec<&String> = heads
        .iter()
        .filter(|h| h.starts_with("HTTP/1.1 200"))
        .collect();
    assert_eq!(
        allowed.len(),
        1,
        "only the first request may be decided on the clean session: {heads:#?}"
    );
    for h in heads.iter().filter(|h| !h.starts_with("HTTP/1.1 200")) {
        assert!(
            h.starts_with("HTTP/1.1 403") && h.contains("tainted_session"),
            "{h}"
        );
    }
    let s = p.session.lock().unwrap();
    assert!(s.is_tainted());
    assert_eq!(s.contacted().count(), 1, "one host reserved");
    drop(s);
    // The taint is recorded once, naming the host that raised it.
    let taints = p.recorder.taints();
    assert_eq!(taints.len(), 1, "{taints:?}");
    assert!(taints[0].first && taints[0].class == "proxy_non_relay");
    assert!(
        taints[0]
            .detail
            .ends_with(&format!(".wild.test:{}", origin.port()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_session_without_a_taint_source_lets_the_whole_burst_through() {
    let origin = echo_origin().await;
    let p = rig(
        "[egress]\nallow = [\"*.wild.test\"]\nallow_addresses = [\"127.0.0.0/8\"]\n[taint]\nsources = [\"web\"]\n",
    )
    .await;
    let heads = burst(p.addr, origin.port()).await;
    for h in &heads {
        assert!(h.starts_with("HTTP/1.1 200"), "{heads:#?}");
    }
    assert!(!p.session.lock().unwrap().is_tainted());
    assert_eq!(p.session.lock().unwrap().contacted().count(), N);
    assert!(p.recorder.taints().is_empty());
}

#[tokio::test]
async fn unspecified_addresses_are_refused_even_inside_a_carve_out() {
    let origin = echo_origin().await;
    let zero: IpAddr = "0.0.0.0".parse().unwrap();
    let mapped_zero: IpAddr = "::ffff:0.0.0.0".parse().unwrap();
    let cfg = {
        let mut built = ProxyConfig::default();
        built.addresses =
            AddressPolicy::new(vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()]);
        built
    };
    // The policy decision already refuses unspecified literals; a decider
    // that allows everything shows the address checks refuse them too.
    let p = TestProxy::start_with(
        cfg,
        std::sync::Arc::new(common::AllowAll),
        StaticResolver::new()
            .with("v4.zero.test", &[zero])
            .with("mapped.zero.test", &[mapped_zero]),
    )
    .await;
    let own = p.addr.port();
    for target in [
        "0.0.0.0",
        "0.1.2.3",
        "[::]",
        "[::ffff:0.0.0.0]",
        "v4.zero.test",
        "mapped.zero.test",
    ] {
        let (_s, h) = connect_tunnel(p.addr, &format!("{target}:{own}"), "").await;
        assert!(
            h.starts_with("HTTP/1.1 403") && h.contains("address_not_allowed:unspecified"),
            "{target}: {h}"
        );
    }
    // positive control: the loopback carve-out (inside 0.0.0.0/0) still tunnels
    let (mut s, h) = connect_tunnel(p.addr, &format!("127.0.0.1:{}", origin.port()), "").await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(tunnel_works(&mut s).await);
}
