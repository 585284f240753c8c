//! Shared loopback fixtures for the proxy and relay integration tests.
#![allow(dead_code, unreachable_pub, reason = "each test binary uses a subset")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use palisade_egress::decide::{Decider, HostRules};
use palisade_egress::proxy::{Listener, Proxy, ProxyConfig, Shutdown, shutdown_channel};
use palisade_egress::record::MemoryRecorder;
use palisade_egress::resolve::StaticResolver;
use palisade_policy::{Decision, Reason, Verdict};
use palisade_schema::host_policy::RequestHost;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A running proxy under test.
pub struct TestProxy {
    pub addr: SocketAddr,
    pub recorder: Arc<MemoryRecorder>,
    pub resolver: Arc<StaticResolver>,
    pub shutdown: Shutdown,
    pub task: JoinHandle<std::io::Result<()>>,
    pub proxy: Proxy,
}

impl TestProxy {
    pub async fn start(
        config: ProxyConfig,
        allow: &[&str],
        deny: &[&str],
        resolver: StaticResolver,
    ) -> Self {
        let rules = HostRules::new(allow, deny).unwrap();
        Self::start_with(config, Arc::new(rules), resolver).await
    }

    /// A proxy whose names and literals `decider` decides.
    pub async fn start_with(
        config: ProxyConfig,
        decider: Arc<dyn Decider>,
        resolver: StaticResolver,
    ) -> Self {
        let recorder = Arc::new(MemoryRecorder::new());
        let resolver = Arc::new(resolver);
        let proxy = Proxy::new(config, decider, resolver.clone(), recorder.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (shutdown, signal) = shutdown_channel();
        let p = proxy.clone();
        let task = tokio::spawn(async move { p.serve(Listener::Tcp(listener), signal).await });
        Self {
            addr,
            recorder,
            resolver,
            shutdown,
            task,
            proxy,
        }
    }

    /// Wait until `n` connection records exist, then return them.
    pub async fn records(&self, n: usize) -> Vec<palisade_egress::record::ConnectionRecord> {
        for _ in 0..400 {
            let r = self.recorder.connections();
            if r.len() >= n {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "expected {n} records, got {:?}",
            self.recorder.connections()
        );
    }

    pub async fn last_record(&self, n: usize) -> palisade_egress::record::ConnectionRecord {
        self.records(n).await.into_iter().nth(n - 1).unwrap()
    }
}

/// An origin that echoes every byte back.
pub async fn echo_origin() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// An origin that sends `n` bytes of `b'x'` then closes.
pub async fn firehose_origin(n: usize) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let data = vec![b'x'; n];
                let _ = s.write_all(&data).await;
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

/// A plain HTTP origin that answers each connection's first request with
/// the request head it received as the body.
pub async fn http_origin() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    buf.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
                let _ = s.write_all(&buf).await;
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

/// A self-signed certificate for `names`, as (cert DER, key DER).
pub fn self_signed(names: &[&str]) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let ck =
        rcgen::generate_simple_self_signed(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
    let cert = ck.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    (cert, key)
}

/// A loopback listener on a free port and a TLS acceptor for it, with a
/// fresh self-signed certificate for `names` (returned, to trust) and the
/// ALPN protocols `alpn`.
pub async fn tls_listener(
    names: &[&str],
    alpn: &[&[u8]],
) -> (
    TcpListener,
    tokio_rustls::TlsAcceptor,
    CertificateDer<'static>,
) {
    let (cert, key) = self_signed(names);
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    (l, acceptor, cert)
}

/// A TLS origin for `name` that answers `pong` to anything and closes.
pub async fn tls_origin(name: &str) -> (SocketAddr, CertificateDer<'static>) {
    let (l, acceptor, cert) = tls_listener(&[name], &[]).await;
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let mut buf = [0u8; 64];
                let _ = tls.read(&mut buf).await;
                let _ = tls.write_all(b"pong").await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (addr, cert)
}

pub fn tls_connector(root: &CertificateDer<'static>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

pub fn server_name(s: &str) -> ServerName<'static> {
    ServerName::try_from(s.to_owned()).unwrap()
}

/// Read a response head (up to the blank line) or everything until close.
pub async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    let res = tokio::time::timeout(Duration::from_secs(5), async {
        while !buf.ends_with(b"\r\n\r\n") {
            match s.read(&mut b).await {
                Ok(0) | Err(_) => break,
                Ok(_) => buf.push(b[0]),
            }
        }
    })
    .await;
    assert!(
        res.is_ok(),
        "timed out reading a response head: {:?}",
        String::from_utf8_lossy(&buf)
    );
    String::from_utf8_lossy(&buf).into_owned()
}

/// Read until EOF (bounded by 5 s).
pub async fn read_to_end<S: AsyncRead + Unpin>(s: &mut S) -> Vec<u8> {
    let mut buf = Vec::new();
    let res = tokio::time::timeout(Duration::from_secs(5), async {
        let _ = s.read_to_end(&mut buf).await;
    })
    .await;
    assert!(res.is_ok(), "timed out reading to EOF");
    buf
}

/// Open a CONNECT tunnel; returns the stream and the response head.
pub async fn connect_tunnel(
    proxy: SocketAddr,
    authority: &str,
    extra: &str,
) -> (TcpStream, String) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let req = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{extra}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let head = read_head(&mut s).await;
    (s, head)
}

/// Send raw bytes and read the whole answer.
pub async fn raw_exchange(proxy: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let _ = s.write_all(bytes).await;
    String::from_utf8_lossy(&read_to_end(&mut s).await).into_owned()
}

pub fn status_of(resp: &str) -> u16 {
    resp.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

pub async fn tunnel_works<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> bool {
    if s.write_all(b"ping").await.is_err() {
        return false;
    }
    let mut b = [0u8; 4];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut b)).await,
        Ok(Ok(_))
    ) && &b == b"ping"
}

/// A decider that allows every name and literal, so that a test reaches
/// the proxy's own address checks behind it.
#[derive(Debug)]
pub struct AllowAll;

impl Decider for AllowAll {
    fn decide(&self, _host: &RequestHost, _port: u16, _at_ms: u64) -> Verdict {
        Verdict::new(Decision::Allow, Reason::Allowed, None, "test: everything")
    }
}
