//! The collector links: RELP (acknowledged) and TCP syslog (RFC 6587
//! octet counting, unacknowledged; in clear or through a caller's
//! [`TlsConnector`]), blocking over `std::net::TcpStream` with timeouts.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::wire::{self, MAX_RELP_RESPONSE};

/// What the shipper sends to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ShipUrl {
    /// `relp://host:port`: rsyslog's imrelp, acknowledged delivery.
    Relp {
        /// `host:port`.
        addr: String,
    },
    /// `syslog+tcp://host:port`: RFC 5424 in RFC 6587 octet-counted
    /// framing, no acknowledgement (a record counts as shipped once
    /// written to the socket).
    SyslogTcp {
        /// `host:port`.
        addr: String,
    },
    /// `syslog+tls://host:port`: the same messages and framing as
    /// `syslog+tcp` (RFC 5425), inside TLS. This crate has no TLS: the
    /// caller supplies the handshake ([`crate::ship::ShipOptions::with_tls`]),
    /// and a shipper for this URL without one is refused.
    SyslogTls {
        /// `host:port`.
        addr: String,
    },
}

/// A connected stream to a collector, as a [`TlsConnector`] returns it.
/// Without acknowledgements, these two are all the shipper learns of
/// what the collector did with its messages.
pub trait ShipStream: Read + Write + Send {
    /// Without blocking: an error if the collector closed the connection,
    /// refused it (a TLS alert) or sent anything (a syslog collector
    /// sends nothing); `Ok` while it is open and silent.
    ///
    /// # Errors
    /// The connection is closed, refused, or carries unexpected data.
    fn check_open(&mut self) -> std::io::Result<()>;

    /// Ends the connection once everything was written: the goodbye (TLS
    /// `close_notify`), the end of the writing side, then waits (briefly)
    /// for the collector to close its side, which it does once it read
    /// everything. `Ok` only for that clean end.
    ///
    /// # Errors
    /// The goodbye failed, or the collector reset or refused the
    /// connection, or did not close it in time.
    fn finish(&mut self) -> std::io::Result<()>;
}

/// How long [`ShipStream::finish`] waits for the collector's side to close.
pub const FINISH_WAIT: Duration = Duration::from_secs(2);

impl ShipStream for TcpStream {
    fn check_open(&mut self) -> std::io::Result<()> {
        self.set_nonblocking(true)?;
        let mut probe = [0u8; 1];
        let peeked = self.peek(&mut probe);
        self.set_nonblocking(false)?;
        match peeked {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
            Ok(0) => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the collector closed the connection",
            )),
            Ok(_) => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the collector sent data on a syslog connection",
            )),
        }
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)?;
        // One deadline for the whole wait: a collector trickling bytes
        // cannot stretch it read by read.
        let deadline = Instant::now() + FINISH_WAIT;
        let mut sink = [0u8; 512];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the collector did not close the connection",
                ));
            }
            self.set_read_timeout(Some(left))?;
            match self.read(&mut sink) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// The TLS client of `syslog+tls://` collectors, supplied by the caller
/// (the `palisade` CLI uses rustls with the host's CA and client
/// certificate), so that this crate stays free of TLS and of key files.
pub trait TlsConnector: std::fmt::Debug + Send + Sync {
    /// Wraps `tcp`, already connected to `host` (the URL's host, without
    /// brackets: the name or address to verify) and with the shipper's
    /// read and write timeouts, and completes the handshake before
    /// returning: a collector whose certificate does not verify is an
    /// error here, before any record is sent.
    ///
    /// # Errors
    /// The handshake failed or the certificate did not verify.
    fn connect(&self, host: &str, tcp: TcpStream) -> std::io::Result<Box<dyn ShipStream>>;
}

/// Why a URL is not a ship destination.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a ship URL: {0}")]
pub struct UrlError(String);

impl ShipUrl {
    /// Parses `relp://host:port`, `syslog+tcp://host:port` or
    /// `syslog+tls://host:port`.
    ///
    /// # Errors
    /// Any other scheme or a missing port.
    pub fn parse(url: &str) -> Result<Self, UrlError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| UrlError(format!("`{url}` has no scheme")))?;
        let addr = rest.strip_suffix('/').unwrap_or(rest);
        let host_port = addr
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
            .filter(|&(host, port)| !host.is_empty() && port > 0);
        let Some((host, port)) = host_port.filter(|_| !addr.contains('/') && !addr.contains('@'))
        else {
            return Err(UrlError(format!("`{url}`: expected {scheme}://host:port")));
        };
        // One form per collector (host names are case-insensitive, `06514`
        // is `6514`): one shipper and one state file each.
        let addr = format!("{}:{port}", host.to_ascii_lowercase());
        match scheme {
            "relp" => Ok(Self::Relp { addr }),
            "syslog+tcp" => Ok(Self::SyslogTcp { addr }),
            "syslog+tls" => Ok(Self::SyslogTls { addr }),
            other => Err(UrlError(format!("`{url}`: unknown scheme `{other}`"))),
        }
    }

    /// The URL as given to [`ShipUrl::parse`], normalized: no trailing
    /// `/`, the host in lower case, the port without leading zeros.
    #[must_use]
    pub fn as_url(&self) -> String {
        match self {
            Self::Relp { addr } => format!("relp://{addr}"),
            Self::SyslogTcp { addr } => format!("syslog+tcp://{addr}"),
            Self::SyslogTls { addr } => format!("syslog+tls://{addr}"),
        }
    }

    fn addr(&self) -> &str {
        match self {
            Self::Relp { addr } | Self::SyslogTcp { addr } | Self::SyslogTls { addr } => addr,
        }
    }

    /// The host part of the address, brackets of an IPv6 literal removed:
    /// the name a TLS client verifies the collector's certificate for.
    ///
    /// ```
    /// use palisade_evidence::ship::ShipUrl;
    /// let url = ShipUrl::parse("syslog+tls://[::1]:6514").unwrap();
    /// assert_eq!(url.host(), "::1");
    /// let url = ShipUrl::parse("syslog+tls://Logs.Example.NET:06514/").unwrap();
    /// assert_eq!((url.host(), url.tls()), ("logs.example.net", true));
    /// assert_eq!(url.as_url(), "syslog+tls://logs.example.net:6514");
    /// ```
    #[must_use]
    pub fn host(&self) -> &str {
        let addr = self.addr();
        let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
        host.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
    }

    /// Whether the link runs inside TLS (`syslog+tls://`).
    #[must_use]
    pub fn tls(&self) -> bool {
        matches!(self, Self::SyslogTls { .. })
    }

    /// Whether the collector acknowledges each message.
    #[must_use]
    pub fn acknowledged(&self) -> bool {
        matches!(self, Self::Relp { .. })
    }
}

/// A failure to deliver to the collector.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// Connecting, reading or writing failed (or timed out).
    #[error("collector {addr}: {source}")]
    Io {
        /// The collector.
        addr: String,
        /// The error.
        source: std::io::Error,
    },
    /// The collector broke the RELP protocol or refused a message.
    #[error("collector {addr}: {detail}")]
    Protocol {
        /// The collector.
        addr: String,
        /// What went wrong.
        detail: String,
    },
}

/// Queued bytes past which [`Link::send`] writes without waiting for a
/// [`Link::flush`].
const FLUSH_AT: usize = 64 * 1024;

/// Connection timeouts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) io: Duration,
}

/// The stream under a [`Link`]: the socket or the caller's TLS session.
struct Conn(Box<dyn ShipStream>);

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Conn")
    }
}

/// One open connection to a collector.
#[derive(Debug)]
pub(crate) struct Link {
    stream: Conn,
    addr: String,
    relp: bool,
    next_txnr: u32,
    /// Transaction numbers sent and not yet answered, oldest first.
    pending: VecDeque<u32>,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl Link {
    fn io(&self, source: std::io::Error) -> LinkError {
        LinkError::Io {
            addr: self.addr.clone(),
            source,
        }
    }

    fn protocol(&self, detail: impl Into<String>) -> LinkError {
        LinkError::Protocol {
            addr: self.addr.clone(),
            detail: detail.into(),
        }
    }

    /// Connects (through `tls` for `syslog+tls://`, whose handshake is
    /// done when this returns) and, for RELP, opens the session.
    pub(crate) fn connect(
        url: &ShipUrl,
        timeouts: Timeouts,
        tls: Option<&Arc<dyn TlsConnector>>,
    ) -> Result<Self, LinkError> {
        let addr = url.addr().to_owned();
        let io = |source| LinkError::Io {
            addr: addr.clone(),
            source,
        };
        let mut last = None;
        let mut stream = None;
        for sa in addr.to_socket_addrs().map_err(io)? {
            match TcpStream::connect_timeout(&sa, timeouts.connect) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(err) => last = Some(err),
            }
        }
        let stream = stream.ok_or_else(|| {
            io(last.unwrap_or_else(|| std::io::Error::other("no address to connect to")))
        })?;
        stream.set_read_timeout(Some(timeouts.io)).map_err(io)?;
        stream.set_write_timeout(Some(timeouts.io)).map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        let stream: Box<dyn ShipStream> = if url.tls() {
            let tls = tls.ok_or_else(|| LinkError::Protocol {
                addr: addr.clone(),
                detail: "syslog+tls needs a TLS connector".to_owned(),
            })?;
            tls.connect(url.host(), stream).map_err(io)?
        } else {
            Box::new(stream)
        };
        let mut link = Self {
            stream: Conn(stream),
            addr,
            relp: url.acknowledged(),
            next_txnr: 1,
            pending: VecDeque::new(),
            buf: Vec::new(),
            out: Vec::new(),
        };
        if link.relp {
            let offer = concat!(
                "relp_version=0\nrelp_software=palisade,",
                env!("CARGO_PKG_VERSION"),
                "\ncommands=syslog"
            );
            link.send_command("open", offer.as_bytes())?;
            let data = link.await_response()?;
            if !data.windows(15).any(|w| w == b"commands=syslog") {
                return Err(link.protocol("the RELP server does not offer the syslog command"));
            }
        }
        Ok(link)
    }

    /// Queues one RELP command; it goes out with the next [`Link::flush`]
    /// (or before waiting for an answer).
    fn send_command(&mut self, command: &str, data: &[u8]) -> Result<(), LinkError> {
        let txnr = self.next_txnr;
        self.next_txnr = if txnr >= 999_999_999 { 1 } else { txnr + 1 };
        wire::relp_frame(txnr, command, data, &mut self.out);
        self.pending.push_back(txnr);
        self.flush_if_full()
    }

    /// Queues one syslog message (RELP `syslog` command, or an
    /// octet-counted frame); it goes out with the next [`Link::flush`].
    pub(crate) fn send(&mut self, msg: &[u8]) -> Result<(), LinkError> {
        if self.relp {
            return self.send_command("syslog", msg);
        }
        wire::octet_frame(msg, &mut self.out);
        self.flush_if_full()
    }

    /// Writes what is queued once it passes [`FLUSH_AT`], so the queue
    /// stays bounded whatever the window.
    fn flush_if_full(&mut self) -> Result<(), LinkError> {
        if self.out.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes every queued message to the socket, in one write when it can.
    pub(crate) fn flush(&mut self) -> Result<(), LinkError> {
        if self.out.is_empty() {
            return Ok(());
        }
        // `flush` pushes what a TLS session still holds onto the socket.
        let written = self
            .stream
            .0
            .write_all(&self.out)
            .and_then(|()| self.stream.0.flush());
        self.out.clear();
        written.map_err(|e| self.io(e))
    }

    /// Whether a whole answer was already received, so that
    /// [`Link::await_response`] returns without reading the socket.
    pub(crate) fn answer_buffered(&self) -> bool {
        matches!(wire::parse_relp_frame(&self.buf), Ok(Some(_)))
    }

    /// Waits for the answer to the oldest pending command; `Ok` only for a
    /// `rsp` with code 200. Returns the response data.
    pub(crate) fn await_response(&mut self) -> Result<Vec<u8>, LinkError> {
        let data = self.await_rsp()?;
        if !data.starts_with(b"200") {
            let code = String::from_utf8_lossy(data.get(..data.len().min(80)).unwrap_or_default())
                .into_owned();
            return Err(self.protocol(format!("the collector refused: {code}")));
        }
        Ok(data)
    }

    /// Waits for the `rsp` to the oldest pending command, whatever its code.
    fn await_rsp(&mut self) -> Result<Vec<u8>, LinkError> {
        self.flush()?;
        let Some(&expected) = self.pending.front() else {
            return Err(self.protocol("no command awaits an answer"));
        };
        let mut chunk = [0u8; 4096];
        loop {
            match wire::parse_relp_frame(&self.buf) {
                Err(detail) => return Err(self.protocol(detail)),
                Ok(Some((frame, used))) => {
                    let txnr = frame.txnr;
                    let command = frame.command.to_vec();
                    let data = frame.data.to_vec();
                    self.buf.drain(..used);
                    if command == b"serverclose" {
                        return Err(self.protocol("the server closed the RELP session"));
                    }
                    if command != b"rsp" {
                        return Err(self.protocol("unexpected RELP command from the server"));
                    }
                    if txnr != expected {
                        return Err(self.protocol(format!(
                            "RELP answer for txnr {txnr}, expected {expected}"
                        )));
                    }
                    self.pending.pop_front();
                    return Ok(data);
                }
                Ok(None) => {
                    if self.buf.len() > MAX_RELP_RESPONSE + 64 {
                        return Err(self.protocol("RELP response too long"));
                    }
                    let n = loop {
                        match self.stream.0.read(&mut chunk) {
                            Ok(n) => break n,
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(self.io(e)),
                        }
                    };
                    if n == 0 {
                        return Err(self.io(std::io::ErrorKind::UnexpectedEof.into()));
                    }
                    self.buf
                        .extend_from_slice(chunk.get(..n).unwrap_or_default());
                }
            }
        }
    }

    /// Without acknowledgements: whether the collector still holds the
    /// connection open ([`ShipStream::check_open`]).
    pub(crate) fn check_open(&mut self) -> Result<(), LinkError> {
        let open = self.stream.0.check_open();
        open.map_err(|e| self.io(e))
    }

    /// Closes the RELP session cleanly (every answer awaited), or flushes
    /// and ends a syslog stream ([`ShipStream::finish`]: `Ok` only once
    /// the collector closed its side too).
    pub(crate) fn close(mut self) -> Result<(), LinkError> {
        if self.relp {
            while !self.pending.is_empty() {
                self.await_response()?;
            }
            self.send_command("close", &[])?;
            // librelp answers `close` with an empty `rsp`.
            self.await_rsp()?;
            self.flush()?;
            // Everything was acknowledged: how the socket ends is moot.
            let _ = self.stream.0.finish();
            return Ok(());
        }
        self.flush()?;
        let ended = self.stream.0.flush().and_then(|()| self.stream.0.finish());
        ended.map_err(|e| self.io(e))
    }
}
