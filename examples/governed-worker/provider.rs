//! A keyless fake inference provider over TLS on 127.0.0.1, for the
//! governed-worker demo and the end-to-end tests.
//!
//! It serves `POST /v1/messages` with a canned answer, records the method,
//! path and the credential headers it saw (so a test can prove the relay
//! injected the host's key and nothing else), and answers everything else
//! with 404. Its certificate is issued by a throwaway CA whose PEM the
//! caller hands to the relay as its only trust root. It binds loopback only.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the provider saw in one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    /// Request method.
    pub(crate) method: String,
    /// Request path (with query).
    pub(crate) path: String,
    /// `Host` header.
    pub(crate) host: Option<String>,
    /// `x-api-key` header.
    pub(crate) x_api_key: Option<String>,
    /// `authorization` header.
    pub(crate) authorization: Option<String>,
}

/// A running fake provider.
#[derive(Debug, Clone)]
pub(crate) struct FakeProvider {
    /// Where it listens (127.0.0.1).
    pub(crate) addr: SocketAddr,
    /// PEM of the CA that issued its certificate.
    pub(crate) ca_pem: String,
    /// Requests seen so far.
    pub(crate) observed: Arc<Mutex<Vec<Observed>>>,
}

impl FakeProvider {
    /// The requests seen so far.
    pub(crate) fn seen(&self) -> Vec<Observed> {
        self.observed.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

pub(crate) fn tls_config(names: &[&str]) -> Result<(rustls::ServerConfig, String), String> {
    let ca_key = KeyPair::generate().map_err(|e| e.to_string())?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name = DistinguishedName::new();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "palisade demo throwaway CA");
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(|e| e.to_string())?;
    let leaf_key = KeyPair::generate().map_err(|e| e.to_string())?;
    let mut sans: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
    sans.push("127.0.0.1".into());
    let mut leaf_params = CertificateParams::new(sans).map_err(|e| e.to_string())?;
    leaf_params.distinguished_name = DistinguishedName::new();
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "fake provider");
    let leaf = leaf_params
        .signed_by(&leaf_key, &ca)
        .map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone(), ca.der().clone()], key)
    .map_err(|e| e.to_string())?;
    Ok((config, ca.pem()))
}

/// Starts the provider on 127.0.0.1 (port 0 picks one) with a certificate
/// valid for `names`. Runs until the runtime stops.
pub(crate) async fn start(port: u16, names: &[&str]) -> Result<FakeProvider, String> {
    let (config, ca_pem) = tls_config(names)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let observed = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&observed);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let _ = serve(tls, seen).await;
                }
            });
        }
    });
    Ok(FakeProvider {
        addr,
        ca_pem,
        observed,
    })
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

async fn serve<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut s: S,
    seen: Arc<Mutex<Vec<Observed>>>,
) -> std::io::Result<()> {
    loop {
        let mut buf = Vec::new();
        let mut byte = [0u8; 1];
        // Read the head byte by byte (small requests only; bounded at 64 KiB).
        while !buf.ends_with(b"\r\n\r\n") {
            if s.read(&mut byte).await? == 0 || buf.len() > 65536 {
                return Ok(());
            }
            buf.extend_from_slice(&byte);
        }
        let head = String::from_utf8_lossy(&buf).into_owned();
        let mut first = head.lines().next().unwrap_or("").split(' ');
        let method = first.next().unwrap_or("").to_owned();
        let path = first.next().unwrap_or("").to_owned();
        let len: usize = header(&head, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; len.min(1 << 20)];
        s.read_exact(&mut body).await?;
        let obs = Observed {
            method: method.clone(),
            path: path.clone(),
            host: header(&head, "host"),
            x_api_key: header(&head, "x-api-key"),
            authorization: header(&head, "authorization"),
        };
        if let Ok(mut g) = seen.lock() {
            g.push(obs);
        }
        let (status, body) = if method == "POST" && path == "/v1/messages" {
            (
                "200 OK",
                r#"{"type":"message","role":"assistant","content":[{"type":"text","text":"hello from the fake provider"}]}"#,
            )
        } else {
            (
                "404 Not Found",
                r#"{"type":"error","error":{"type":"not_found"}}"#,
            )
        };
        let resp = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(resp.as_bytes()).await?;
        s.flush().await?;
        if header(&head, "connection").is_some_and(|v| v.eq_ignore_ascii_case("close")) {
            return Ok(());
        }
    }
}
