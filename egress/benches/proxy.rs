//! Egress proxy benchmark (`cargo bench -p palisade-egress --bench proxy`,
//! driven by `cargo xtask bench`). Loopback only. Prints one JSON object:
//!
//! * `throughput`: bulk download through a CONNECT tunnel vs a direct
//!   connection (Gbit/s);
//! * `connect_latency`: new connection + CONNECT + 1-byte echo round trip,
//!   p50/p99 in µs, vs a direct connect + echo; `added_*` is the difference;
//! * `idle_tunnels`: RSS growth per idle tunnel (whole process: the client
//!   and origin sockets of a direct run of the same size are subtracted);
//! * `concurrent`: 1,000 tunnels open at once, each echoing a byte.
//!
//! With `PALISADE_BENCH_PROXY=127.0.0.1:PORT` the same client measures an
//! external proxy (tinyproxy, squid, `palisade proxy --no-auth`) instead of
//! the in-process one; the target it CONNECTs to is `127.0.0.1:ORIGIN_PORT`.
//! `PALISADE_BENCH_BYTES` sets the bulk size (default 1 GiB),
//! `PALISADE_BENCH_CONNS` the latency sample count (default 2,000).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::indexing_slicing,
    clippy::cast_precision_loss,
    missing_docs,
    reason = "benchmark harness"
)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use palisade_egress::addr::AddressPolicy;
use palisade_egress::decide::HostRules;
use palisade_egress::proxy::{Limits, Listener, Proxy, ProxyConfig, shutdown_channel};
use palisade_egress::record::NullRecorder;
use palisade_egress::resolve::StaticResolver;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const CHUNK: usize = 256 * 1024;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn firehose(total: usize) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let buf = vec![0x5a_u8; CHUNK];
                let mut left = total;
                while left > 0 {
                    let n = left.min(CHUNK);
                    if s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
                let _ = s.shutdown().await;
            });
        }
    });
    a
}

async fn echo() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    a
}

async fn tunnel(proxy: SocketAddr, target: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.set_nodelay(true).unwrap();
    let req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::with_capacity(64);
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut b).await.unwrap();
        assert!(n == 1, "proxy closed during CONNECT");
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

async fn drain(mut s: TcpStream) -> usize {
    let mut buf = vec![0u8; CHUNK];
    let mut n = 0;
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return n,
            Ok(k) => n += k,
        }
    }
}

fn gbps(bytes: usize, d: Duration) -> f64 {
    (bytes as f64 * 8.0) / d.as_secs_f64() / 1e9
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn rtt(s: &mut TcpStream) {
    s.write_all(b"x").await.unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).await.unwrap();
}

fn raise_nofile() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

fn main() {
    raise_nofile();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let bytes = env_usize("PALISADE_BENCH_BYTES", 1 << 30);
    let samples = env_usize("PALISADE_BENCH_CONNS", 2000);
    let tunnels = env_usize("PALISADE_BENCH_TUNNELS", 1000);
    let external: Option<SocketAddr> = std::env::var("PALISADE_BENCH_PROXY")
        .ok()
        .and_then(|v| v.parse().ok());
    let proxy_addr = match external {
        Some(a) => a,
        None => {
            let config = {
                let mut built = ProxyConfig::default();
                built.addresses = AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
                built.limits = {
                    let mut built = Limits::default();
                    built.max_connections = 100_000;
                    built
                };
                built
            };
            let rules = HostRules::new(&["127.0.0.1"], &[] as &[&str]).unwrap();
            let proxy = Proxy::new(
                config,
                Arc::new(rules),
                Arc::new(StaticResolver::new()),
                Arc::new(NullRecorder),
            );
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let a = l.local_addr().unwrap();
            let (shutdown, signal) = shutdown_channel();
            std::mem::forget(shutdown);
            tokio::spawn(async move { proxy.serve(Listener::Tcp(l), signal).await });
            a
        }
    };

    // throughput
    let fh = firehose(bytes).await;
    let t = Instant::now();
    let s = TcpStream::connect(fh).await.unwrap();
    let got = drain(s).await;
    let direct = gbps(got, t.elapsed());
    assert_eq!(got, bytes);
    let t = Instant::now();
    let s = tunnel(proxy_addr, fh).await;
    let got = drain(s).await;
    let proxied = gbps(got, t.elapsed());
    assert_eq!(got, bytes);

    // new-connection latency
    let e = echo().await;
    let mut direct_us = Vec::with_capacity(samples);
    let mut proxy_us = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        let mut s = TcpStream::connect(e).await.unwrap();
        s.set_nodelay(true).unwrap();
        rtt(&mut s).await;
        direct_us.push(t.elapsed().as_secs_f64() * 1e6);
        drop(s);
        let t = Instant::now();
        let mut s = tunnel(proxy_addr, e).await;
        rtt(&mut s).await;
        proxy_us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (d50, d99) = (pct(&mut direct_us, 0.5), pct(&mut direct_us, 0.99));
    let (p50, p99) = (pct(&mut proxy_us, 0.5), pct(&mut proxy_us, 0.99));

    // idle tunnels: RSS growth, minus the same number of direct connections
    tokio::time::sleep(Duration::from_millis(200)).await;
    let base = rss_kib();
    let mut direct_conns = Vec::with_capacity(tunnels);
    for _ in 0..tunnels {
        let mut s = TcpStream::connect(e).await.unwrap();
        rtt(&mut s).await;
        direct_conns.push(s);
    }
    let after_direct = rss_kib();
    let t = Instant::now();
    let mut open = Vec::with_capacity(tunnels);
    for _ in 0..tunnels {
        open.push(tunnel(proxy_addr, e).await);
    }
    let established = t.elapsed();
    let mut ok = 0;
    for s in &mut open {
        rtt(s).await;
        ok += 1;
    }
    let after_tunnels = rss_kib();
    let direct_kib = after_direct.saturating_sub(base) as f64 / tunnels as f64;
    let tunnel_kib = after_tunnels.saturating_sub(after_direct) as f64 / tunnels as f64;
    let per_tunnel = (tunnel_kib - direct_kib).max(0.0);
    drop(open);
    drop(direct_conns);

    let out = serde_json::json!({
        "bench": "egress_proxy",
        "proxy": external.map_or_else(|| "palisade (in-process)".to_owned(), |a| format!("external {a}")),
        "throughput": {
            "bytes": bytes,
            "direct_gbit_s": direct,
            "proxy_gbit_s": proxied,
            "ratio": proxied / direct,
        },
        "connect_latency": {
            "samples": samples,
            "direct_p50_us": d50,
            "direct_p99_us": d99,
            "proxy_p50_us": p50,
            "proxy_p99_us": p99,
            "added_p50_us": p50 - d50,
            "added_p99_us": p99 - d99,
        },
        "idle_tunnels": {
            "tunnels": tunnels,
            "rss_kib_per_tunnel_including_client_and_origin": tunnel_kib,
            "rss_kib_per_direct_connection": direct_kib,
            "rss_kib_per_tunnel_proxy_only": per_tunnel,
            "note": if external.is_some() { "external proxy: only the client process is measured; read the proxy's RSS separately" } else { "in-process" },
        },
        "concurrent": {
            "tunnels": tunnels,
            "echo_ok": ok,
            "establish_ms": established.as_secs_f64() * 1e3,
        },
    });
    println!("{out}");
}
