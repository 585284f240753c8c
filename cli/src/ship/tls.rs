//! The TLS client of `syslog+tls://` collectors (RFC 5425), with rustls:
//! the host's CA is the only trust anchor (no public roots, never an
//! unverified certificate), the collector's certificate is verified for
//! the URL's host (a DNS name or an IP address), and an optional client
//! certificate comes from files on the host, never from the worker.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use palisade_evidence::ship::{ShipStream, TlsConnector};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::input;

/// How long, after a TLS 1.3 handshake, the client waits for the
/// collector to refuse its certificate (or its lack of one). TLS 1.3 ends
/// the client's handshake before the server checked the client; without
/// this wait, messages written into a refused session would count as
/// shipped (the transport has no acknowledgement). Once per connection.
const CLIENT_AUTH_VERDICT: Duration = Duration::from_millis(300);

/// The rustls client of one `[evidence]` TLS configuration.
#[derive(Debug)]
pub(crate) struct RustlsShip {
    config: Arc<rustls::ClientConfig>,
}

impl RustlsShip {
    /// Loads `tls_ca` and, when given, `tls_cert` with `tls_key`. A key
    /// file other users can read (mode & 0o077) is refused.
    pub(crate) fn load(ca: &Path, client: Option<(&Path, &Path)>) -> Result<Self, String> {
        let roots = crate::relay::read_roots(ca).map_err(|e| format!("evidence.tls_ca: {e}"))?;
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration failed: {e}"))?
        .with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = read_chain(cert)?;
                let key = read_key(key)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("evidence.tls_cert / tls_key: {e}"))?
            }
        };
        Ok(Self {
            config: Arc::new(config),
        })
    }
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = input::read(path, input::Kind::Certificates)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("evidence.tls_cert {}: {e}", path.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "evidence.tls_cert {} holds no certificate",
            path.display()
        ));
    }
    Ok(chain)
}

/// The client key, refused when other users can read it. The error names
/// the file and its mode, never its content.
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = input::read_private(path, input::Kind::PrivateKey, "evidence.tls_key")?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| {
        format!(
            "evidence.tls_key {} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)",
            path.display()
        )
    })
}

/// One TLS session over the collector's socket.
struct TlsStream(rustls::StreamOwned<rustls::ClientConnection, TcpStream>);

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl ShipStream for TlsStream {
    fn finish(&mut self) -> io::Result<()> {
        self.0.conn.send_close_notify();
        self.0.flush()
    }
}

impl TlsConnector for RustlsShip {
    fn connect(&self, host: &str, mut tcp: TcpStream) -> io::Result<Box<dyn ShipStream>> {
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{host}` is not a name a certificate can be verified for: {e}"),
            )
        })?;
        let mut conn = rustls::ClientConnection::new(Arc::clone(&self.config), name)
            .map_err(io::Error::other)?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)?;
        }
        if conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3) {
            await_client_auth_verdict(&mut conn, &mut tcp)?;
        }
        Ok(Box::new(TlsStream(rustls::StreamOwned::new(conn, tcp))))
    }
}

/// Reads what the collector sends within [`CLIENT_AUTH_VERDICT`] of the
/// handshake: an alert refusing the client certificate is an error here,
/// before any record is written; silence (or a session ticket) is consent.
fn await_client_auth_verdict(
    conn: &mut rustls::ClientConnection,
    tcp: &mut TcpStream,
) -> io::Result<()> {
    let io_timeout = tcp.read_timeout()?;
    tcp.set_read_timeout(Some(CLIENT_AUTH_VERDICT))?;
    let verdict = loop {
        match conn.complete_io(tcp) {
            // Session tickets: read on until silence. `(0, 0)`: the end
            // of the stream, or plaintext waiting (both seen below).
            Ok((0, 0)) => break Ok(()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break Ok(());
            }
            // An alert: the collector refused the certificate.
            Err(e) => break Err(e),
        }
    };
    tcp.set_read_timeout(io_timeout)?;
    verdict?;
    let mut probe = [0u8; 1];
    match conn.reader().read(&mut probe) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        // Plaintext from the collector is not syslog over TLS.
        Ok(n) if n > 0 => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the collector sent data on a syslog connection",
        )),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "the collector ended the TLS session after the handshake (client certificate refused?)",
        )),
        Err(e) => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!(
                "the collector closed the connection after the handshake (client certificate refused?): {e}"
            ),
        )),
    }
}
