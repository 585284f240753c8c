//! The TLS client of `syslog+tls://` collectors (RFC 5425), with rustls:
//! the host's CA is the only trust anchor (no public roots, never an
//! unverified certificate), the collector's certificate is verified for
//! the URL's host (a DNS name or an IP address), and an optional client
//! certificate comes from files on the host, never from the worker.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use palisade_evidence::ship::{FINISH_WAIT, ShipStream, TlsConnector};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::input;

/// The least time, after a TLS 1.3 handshake, the client waits for the
/// collector to refuse its certificate (or its lack of one); it waits
/// twice the handshake's duration when that is longer, at most
/// [`VERDICT_MAX`]. TLS 1.3 ends the client's handshake before the server
/// checked the client. A later refusal is still caught: the shipper
/// counts a message as shipped only once the connection was found open
/// a while after it was written (`ShipOptions::confirm_after`); this wait
/// only spares sending the first messages twice.
const VERDICT_MIN: Duration = Duration::from_millis(300);

/// The longest wait for the collector's verdict on the client.
const VERDICT_MAX: Duration = Duration::from_secs(3);

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
    input::read_certificates(path).map_err(|e| format!("evidence.tls_cert {e}"))
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

fn closed(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, what.to_owned())
}

impl ShipStream for TlsStream {
    fn check_open(&mut self) -> io::Result<()> {
        let rustls::StreamOwned { conn, sock } = &mut self.0;
        read_collector(conn, sock, None, "")
    }

    fn finish(&mut self) -> io::Result<()> {
        self.0.conn.send_close_notify();
        self.0.flush()?;
        self.0.sock.shutdown(std::net::Shutdown::Write)?;
        let deadline = Instant::now() + FINISH_WAIT;
        let mut sink = [0u8; 512];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the collector did not close the TLS session",
                ));
            }
            self.0.sock.set_read_timeout(Some(left))?;
            match self.0.read(&mut sink) {
                // Its close_notify, or its end of the stream without one:
                // everything before it was read.
                Ok(0) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // An alert (a refusal), a reset, a timeout.
                Err(e) => return Err(e),
            }
        }
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
        // One deadline for the whole handshake (the socket's timeout is per
        // read: a collector trickling bytes would hold the shipper).
        let io_timeout = tcp.read_timeout()?;
        let started = Instant::now();
        let deadline = started + io_timeout.unwrap_or(Duration::from_secs(10));
        while conn.is_handshaking() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the TLS handshake with the collector did not end in time",
                ));
            }
            tcp.set_read_timeout(Some(left))?;
            conn.complete_io(&mut tcp)?;
        }
        tcp.set_read_timeout(io_timeout)?;
        if conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3) {
            let wait = started
                .elapsed()
                .saturating_mul(2)
                .clamp(VERDICT_MIN, VERDICT_MAX);
            // The collector's verdict on the client: an alert refusing
            // its certificate, or a close, is an error here, before any
            // record is written; silence (or a session ticket) lets the
            // first records go (still to be confirmed, see VERDICT_MIN).
            read_collector(
                &mut conn,
                &mut tcp,
                Some(Instant::now() + wait),
                " after the handshake (client certificate refused?)",
            )?;
        }
        Ok(Box::new(TlsStream(rustls::StreamOwned::new(conn, tcp))))
    }
}

/// Reads and processes what the collector sent: without blocking
/// (`until` is `None`), or until `until` passes in silence. An error for
/// an alert (a refusal), a reset, or the end of the stream; then for what
/// the session holds: its end (`close_notify`) or data (a syslog
/// collector sends none). `Ok` while it is open and silent. `when` is
/// added to the messages about an end.
fn read_collector(
    conn: &mut rustls::ClientConnection,
    sock: &mut TcpStream,
    until: Option<Instant>,
    when: &str,
) -> io::Result<()> {
    let io_timeout = sock.read_timeout()?;
    if until.is_none() {
        sock.set_nonblocking(true)?;
    }
    let read = loop {
        if let Some(until) = until {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break Ok(());
            }
            if let Err(e) = sock.set_read_timeout(Some(left)) {
                break Err(e);
            }
        }
        match conn.read_tls(sock) {
            Ok(0) => {
                break Err(closed(&format!(
                    "the collector closed the connection{when}"
                )));
            }
            // Session tickets, or an alert.
            Ok(_) => {
                if let Err(e) = conn.process_new_packets() {
                    break Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    if until.is_none() {
        sock.set_nonblocking(false)?;
    } else {
        sock.set_read_timeout(io_timeout)?;
    }
    read?;
    let mut probe = [0u8; 1];
    match conn.reader().read(&mut probe) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Ok(0) => Err(closed(&format!(
            "the collector ended the TLS session{when}"
        ))),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the collector sent data on a syslog connection",
        )),
        Err(e) => Err(closed(&format!(
            "the collector closed the connection{when}: {e}"
        ))),
    }
}
