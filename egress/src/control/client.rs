//! A small blocking client for the control channel, used by `palisade ctl`,
//! `palisade approve` and embedding orchestrators.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use super::protocol::{
    CheckpointSummary, MAX_LINE_BYTES, OutwardAnswer, PendingAction, ProtocolError, Request,
    Response, SessionView, TaintKind,
};

/// Environment variable that tells a worker where its control endpoint is.
pub const CONTROL_ENV: &str = "PALISADE_CONTROL";

/// Where a control endpoint listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlAddr {
    /// A Unix socket path.
    Unix(PathBuf),
    /// A loopback TCP address.
    Tcp(SocketAddr),
}

impl ControlAddr {
    /// Parses `unix:PATH`, `tcp:IP:PORT` or a bare absolute path.
    ///
    /// # Errors
    /// A message naming the problem (unknown scheme, bad address, not loopback).
    pub fn parse(s: &str) -> Result<Self, String> {
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err(String::from("empty socket path"));
            }
            return Ok(Self::Unix(PathBuf::from(p)));
        }
        if let Some(a) = s.strip_prefix("tcp:") {
            let addr: SocketAddr = a
                .parse()
                .map_err(|_| format!("`{a}` is not an IP:PORT address"))?;
            if !addr.ip().is_loopback() {
                return Err(format!("`{a}` is not a loopback address"));
            }
            return Ok(Self::Tcp(addr));
        }
        if s.starts_with('/') {
            return Ok(Self::Unix(PathBuf::from(s)));
        }
        Err(format!("`{s}` is not `unix:PATH` or `tcp:IP:PORT`"))
    }
}

impl std::fmt::Display for ControlAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unix(p) => write!(f, "unix:{}", p.display()),
            Self::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

/// Client failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Connecting, reading or writing failed.
    #[error("control channel `{addr}`: {source}")]
    Io {
        /// The endpoint.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The server closed the connection without answering.
    #[error("control channel closed without an answer")]
    Closed,
    /// The answer could not be parsed.
    #[error("bad answer from the control channel: {0}")]
    Protocol(#[from] ProtocolError),
    /// The server refused the request.
    #[error("control request refused ({code}): {message}")]
    Refused {
        /// Stable error code.
        code: String,
        /// Message.
        message: String,
    },
    /// The answer lacked the part the request asks for.
    #[error("answer lacks `{0}`")]
    Incomplete(&'static str),
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// A connection to a control endpoint. Requests are answered in order.
pub struct ControlClient {
    addr: String,
    reader: BufReader<Box<dyn Stream>>,
}

impl std::fmt::Debug for ControlClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlClient")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl ControlClient {
    /// Connects. `timeout` bounds each read (None waits as long as an approval may take).
    ///
    /// # Errors
    /// [`ClientError::Io`] when the endpoint cannot be reached.
    pub fn connect(addr: &ControlAddr, timeout: Option<Duration>) -> Result<Self, ClientError> {
        let name = addr.to_string();
        let io = |source| ClientError::Io {
            addr: name.clone(),
            source,
        };
        let stream: Box<dyn Stream> = match addr {
            ControlAddr::Unix(p) => {
                let s = UnixStream::connect(p).map_err(io)?;
                s.set_read_timeout(timeout).map_err(io)?;
                Box::new(s)
            }
            ControlAddr::Tcp(a) => {
                let s = TcpStream::connect_timeout(a, Duration::from_secs(5)).map_err(io)?;
                s.set_read_timeout(timeout).map_err(io)?;
                Box::new(s)
            }
        };
        Ok(Self {
            addr: name,
            reader: BufReader::new(stream),
        })
    }

    /// Sends one request and returns the raw response (which may be an error response).
    ///
    /// # Errors
    /// IO and protocol failures.
    pub fn send(&mut self, req: &Request) -> Result<Response, ClientError> {
        let io = |source| ClientError::Io {
            addr: self.addr.clone(),
            source,
        };
        let stream = self.reader.get_mut();
        stream.write_all(req.to_line().as_bytes()).map_err(io)?;
        stream.flush().map_err(io)?;
        let mut line = Vec::new();
        let limit = u64::try_from(MAX_LINE_BYTES.saturating_mul(8)).unwrap_or(u64::MAX);
        let n = (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut line)
            .map_err(|source| ClientError::Io {
                addr: self.addr.clone(),
                source,
            })?;
        if n == 0 {
            return Err(ClientError::Closed);
        }
        Ok(Response::parse(&line)?)
    }

    /// Sends a request and turns an error response into [`ClientError::Refused`].
    ///
    /// # Errors
    /// IO, protocol or refusal.
    pub fn request(&mut self, req: &Request) -> Result<Response, ClientError> {
        let resp = self.send(req)?;
        if resp.ok {
            return Ok(resp);
        }
        let (code, message) = resp
            .error
            .map(|e| (e.code, e.message))
            .unwrap_or_else(|| (String::from("unknown"), String::from("no error detail")));
        Err(ClientError::Refused { code, message })
    }

    /// Reports a taint source; returns the new state.
    ///
    /// # Errors
    /// See [`ControlClient::request`].
    pub fn taint(&mut self, source: TaintKind, detail: &str) -> Result<SessionView, ClientError> {
        self.request(&Request::Taint {
            source,
            detail: detail.to_owned(),
        })?
        .state
        .ok_or(ClientError::Incomplete("state"))
    }

    /// Asks for an outward action; blocks while the host decides an `ask`.
    ///
    /// # Errors
    /// See [`ControlClient::request`].
    pub fn outward(&mut self, kind: &str, target: &str) -> Result<OutwardAnswer, ClientError> {
        self.request(&Request::Outward {
            kind: kind.to_owned(),
            target: target.to_owned(),
        })?
        .outward
        .ok_or(ClientError::Incomplete("outward"))
    }

    /// Reports that an allowed action was executed.
    ///
    /// # Errors
    /// See [`ControlClient::request`].
    pub fn executed(&mut self, ticket: u64, status: Option<i32>) -> Result<(), ClientError> {
        self.request(&Request::Executed { ticket, status })
            .map(|_| ())
    }

    /// The session state.
    ///
    /// # Errors
    /// See [`ControlClient::request`].
    pub fn state(&mut self) -> Result<SessionView, ClientError> {
        self.request(&Request::State)?
            .state
            .ok_or(ClientError::Incomplete("state"))
    }

    /// Host only: the pending actions.
    ///
    /// # Errors
    /// See [`ControlClient::request`].
    pub fn pending(&mut self) -> Result<Vec<PendingAction>, ClientError> {
        self.request(&Request::Pending)?
            .pending
            .ok_or(ClientError::Incomplete("pending"))
    }

    /// Host only: a checkpoint of the session's staged writes.
    ///
    /// # Errors
    /// See [`ControlClient::request`].
    pub fn checkpoint(&mut self) -> Result<CheckpointSummary, ClientError> {
        self.request(&Request::Checkpoint)?
            .checkpoint
            .ok_or(ClientError::Incomplete("checkpoint"))
    }

    /// Host only: approve or deny a pending action.
    ///
    /// # Errors
    /// See [`ControlClient::request`].
    pub fn resolve(&mut self, ticket: u64, approve: bool) -> Result<(), ClientError> {
        self.request(&Request::Resolve { ticket, approve })
            .map(|_| ())
    }
}
