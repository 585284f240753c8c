//! The egress proxy: HTTP/1.1 `CONNECT` tunnels and absolute-form plain
//! HTTP, both filtered by the same pipeline:
//!
//! 1. read the request head (size cap, header timeout), parse strictly;
//! 2. check `Proxy-Authorization` against the session token (constant time);
//! 3. ask the [`Decider`] about the **name**, before any DNS lookup (an
//!    allow is also the decider's reservation: taint and "already
//!    contacted" are recorded in that same step, never after the dial);
//! 4. resolve on the host, check **every** address against the
//!    [`AddressPolicy`]; dial the checked address (no second lookup);
//! 5. wait until the [`Recorder`] accepted the connection's admission
//!    record ([`ProxyEvent::Admitted`]); only then answer `200` or forward a
//!    byte (503 when it cannot be recorded);
//! 6. for CONNECT to an SNI port, read the ClientHello and require SNI ==
//!    CONNECT host; on any other port, the same when the client speaks
//!    first with a TLS record;
//! 7. pump bytes with per-connection and per-session byte limits and an
//!    idle timeout (plain HTTP: only the first request and its body go
//!    upstream); record the connection when it ends.
//!
//! Shutdown cuts open tunnels and connections still sending a head,
//! handshake or ClientHello; each is recorded as `shutdown`.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use subtle::ConstantTimeEq as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use zeroize::Zeroizing;

use crate::addr::AddressPolicy;
use crate::body::{BodyFramer, Framing};
use crate::decide::Decider;
use crate::head::{RequestHead, Target, parse_head};
use crate::record::{CloseReason, ConnectionRecord, Outcome, ProxyEvent, ProxyKind, Recorder};
use crate::resolve::Resolver;
use crate::sni::{ClientHello, MAX_PEEK, parse_client_hello};
use palisade_schema::host_policy::RequestHost;

mod tunnel;

use tunnel::{Conn, Opaque, Upstream, pump};

/// Limits enforced by the proxy. `None` means unlimited.
///
/// Start from [`Limits::default`] and set fields (`Limits { .. }` cannot be
/// written outside this crate).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Bytes (up + down) one connection may carry.
    pub bytes_per_connection: Option<u64>,
    /// Bytes (up + down) all connections of this proxy may carry together.
    pub bytes_per_session: Option<u64>,
    /// Concurrent client connections (values above
    /// `tokio::sync::Semaphore::MAX_PERMITS` mean unlimited).
    pub max_connections: usize,
    /// New client connections per rolling minute.
    pub per_minute: Option<u32>,
    /// Close a tunnel after this long without bytes in either direction.
    pub idle_timeout: Duration,
    /// Time allowed to send the whole request head (slowloris defence).
    pub header_timeout: Duration,
    /// Largest request head, bytes.
    pub max_header_bytes: usize,
    /// Time allowed for the DNS lookup.
    pub dns_timeout: Duration,
    /// Time allowed to connect to the upstream.
    pub connect_timeout: Duration,
    /// Time allowed for the client to send its ClientHello.
    pub tls_hello_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            bytes_per_connection: None,
            bytes_per_session: None,
            max_connections: 256,
            per_minute: None,
            idle_timeout: Duration::from_secs(300),
            header_timeout: Duration::from_secs(10),
            max_header_bytes: crate::head::DEFAULT_MAX_HEAD_BYTES,
            dns_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            tls_hello_timeout: Duration::from_secs(10),
        }
    }
}

/// The per-session secret a worker must present in `Proxy-Authorization`
/// (`Basic base64(any-user:TOKEN)` or `Bearer TOKEN`).
#[derive(Clone)]
pub struct ProxyToken(Zeroizing<String>);

impl fmt::Debug for ProxyToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProxyToken(<redacted>)")
    }
}

impl ProxyToken {
    /// A fresh random token (256 bits, base64url).
    pub fn generate() -> io::Result<Self> {
        let mut raw = Zeroizing::new([0u8; 32]);
        getrandom::fill(raw.as_mut_slice()).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Self(Zeroizing::new(
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw.as_slice()),
        )))
    }

    /// A token with a given value (e.g. handed over by a launcher).
    pub fn from_secret(value: String) -> Self {
        Self(Zeroizing::new(value))
    }

    /// The value, to hand to the worker (e.g. in its `HTTPS_PROXY` URL).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether a `Proxy-Authorization` header value carries this token.
    pub fn verify(&self, header: &[u8]) -> bool {
        let presented: Zeroizing<Vec<u8>> = if let Some(b) = strip_scheme(header, b"basic ") {
            let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(b) else {
                return false;
            };
            let decoded = Zeroizing::new(decoded);
            match decoded.iter().position(|c| *c == b':') {
                Some(i) => Zeroizing::new(decoded.get(i + 1..).unwrap_or_default().to_vec()),
                None => return false,
            }
        } else if let Some(b) = strip_scheme(header, b"bearer ") {
            Zeroizing::new(b.to_vec())
        } else {
            return false;
        };
        bool::from(presented.as_slice().ct_eq(self.0.as_bytes()))
    }
}

fn strip_scheme<'a>(v: &'a [u8], scheme: &[u8]) -> Option<&'a [u8]> {
    let head = v.get(..scheme.len())?;
    if head.eq_ignore_ascii_case(scheme) {
        v.get(scheme.len()..)
    } else {
        None
    }
}

/// Proxy configuration.
///
/// [`ProxyConfig::from_egress`] makes the configuration a policy's
/// `[egress]` section asks for (what `palisade proxy` and `palisade run
/// --policy` use); [`ProxyConfig::default`] is the built-in one. Fields are
/// public to adjust; `ProxyConfig { .. }` cannot be written outside this
/// crate.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProxyConfig {
    /// Limits.
    pub limits: Limits,
    /// The session token; `None` disables the check (the caller must then
    /// make sure only its worker can reach the listener).
    pub token: Option<ProxyToken>,
    /// Refuse CONNECT tunnels on [`Self::sni_ports`] whose ClientHello has no
    /// SNI or an SNI other than the CONNECT host (default on).
    pub require_sni_match: bool,
    /// Ports on which the ClientHello is inspected (default `[443]`).
    pub sni_ports: Vec<u16>,
    /// The address deny set and carve-outs.
    pub addresses: AddressPolicy,
    /// While set, new connections are refused (503) with the reason code
    /// given to [`ProxyConfig::with_hold`].
    hold: Option<Hold>,
}

/// A flag the host sets to refuse new connections for a while (evidence
/// shipping that lags too far behind: `ship_backlog`), and the reason code
/// those refusals are recorded with. Read once per new connection.
#[derive(Clone, Debug)]
struct Hold {
    flag: Arc<std::sync::atomic::AtomicBool>,
    code: &'static str,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            token: None,
            require_sni_match: true,
            sni_ports: vec![443],
            addresses: AddressPolicy::default(),
            hold: None,
        }
    }
}

impl ProxyConfig {
    /// The configuration a policy's `[egress]` section asks for:
    /// `limits` (an absent `connections` or `per_minute` means unlimited,
    /// as `docs/policy.md` states; a count too large for this platform is
    /// unlimited too), `require_sni_match`, and the address deny set with
    /// the `allow_addresses` carve-outs plus this host's own interface
    /// addresses, which are listed now. No token: set one with
    /// [`ProxyConfig::with_token`] (or leave it off only when nothing but
    /// the worker can reach the listener).
    ///
    /// Not taken from the section: `allow` and `deny`, which are the
    /// [`Decider`]'s ([`crate::policy::PolicyDecider`] reads them from the
    /// same policy), and `relay`, which is [`crate::relay::RelayConfig::from_policy`]'s.
    ///
    /// Fails, rather than leave the host's own addresses open, when they
    /// cannot be listed.
    ///
    /// ```
    /// use palisade_egress::proxy::ProxyConfig;
    /// use palisade_schema::host_policy::parse;
    ///
    /// let text = "[egress]\nallow = [\"api.example.com\"]\nallow_addresses = [\"127.0.0.0/8\"]\n\
    ///             limits = { connections = 4 }\n";
    /// let policy = parse("palisade.toml", text).map_err(|d| d.to_string())?.into_value();
    /// let config = ProxyConfig::from_egress(&policy.egress).map_err(|e| e.to_string())?;
    /// assert_eq!(config.limits.max_connections, 4);
    /// assert_eq!(config.limits.per_minute, None);
    /// assert!(config.require_sni_match && config.token.is_none());
    /// assert!(config.addresses.check("127.0.0.1".parse().unwrap()).is_ok());
    /// assert!(config.addresses.check("10.0.0.1".parse().unwrap()).is_err());
    /// # Ok::<(), String>(())
    /// ```
    pub fn from_egress(egress: &palisade_schema::host_policy::Egress) -> io::Result<Self> {
        let own = crate::net::interface_addresses()?;
        Ok(Self::from_egress_with_own(egress, own))
    }

    /// [`ProxyConfig::from_egress`] with the host's own addresses given.
    pub fn from_egress_with_own(
        egress: &palisade_schema::host_policy::Egress,
        own: Vec<IpAddr>,
    ) -> Self {
        // Every key of the section, so a new one cannot be parsed and left unapplied.
        let palisade_schema::host_policy::Egress {
            allow: _,
            deny: _,
            allow_addresses,
            limits,
            relays: _,
            require_sni_match,
            // Decided by the session's `Decider` (routing state), not by the
            // proxy's static config: `palisade_policy::route::ProviderHosts`.
            provider_hosts: _,
        } = egress;
        let palisade_schema::host_policy::EgressLimits {
            bytes_per_connection,
            bytes_per_session,
            connections,
            per_minute,
        } = limits;
        let limits = Limits {
            bytes_per_connection: *bytes_per_connection,
            bytes_per_session: *bytes_per_session,
            max_connections: connections
                .map_or(usize::MAX, |c| usize::try_from(c).unwrap_or(usize::MAX)),
            per_minute: per_minute.map(|p| u32::try_from(p).unwrap_or(u32::MAX)),
            ..Limits::default()
        };
        Self {
            limits,
            token: None,
            require_sni_match: *require_sni_match,
            sni_ports: vec![443],
            addresses: AddressPolicy::new(allow_addresses.clone()).with_own_addresses(own),
            hold: None,
        }
    }

    /// Refuse every new connection (503, recorded with reason `code`)
    /// while `flag` is set; connections already served are not cut. The
    /// flag is read once per connection, before anything else is done.
    #[must_use]
    pub fn with_hold(
        mut self,
        flag: Arc<std::sync::atomic::AtomicBool>,
        code: &'static str,
    ) -> Self {
        self.hold = Some(Hold { flag, code });
        self
    }

    /// Require this per-session token in `Proxy-Authorization`.
    #[must_use]
    pub fn with_token(mut self, token: ProxyToken) -> Self {
        self.token = Some(token);
        self
    }
}

struct Inner {
    config: ProxyConfig,
    decider: Arc<dyn Decider>,
    resolver: Arc<dyn Resolver>,
    recorder: Arc<dyn Recorder>,
    session_bytes: AtomicU64,
    next_id: AtomicU64,
    conns: Arc<Semaphore>,
    recent: Mutex<VecDeque<Instant>>,
    /// The proxy's own listening addresses (a CONNECT to them would loop).
    own_listen: Mutex<Vec<SocketAddr>>,
}

impl Inner {
    /// Bytes still allowed for a connection that has used `used`, under the
    /// per-connection and per-session limits.
    fn remaining_budget(&self, used: u64) -> Option<u64> {
        let l = &self.config.limits;
        let conn = l.bytes_per_connection.map(|c| c.saturating_sub(used));
        let sess = l
            .bytes_per_session
            .map(|s| s.saturating_sub(self.session_bytes.load(Ordering::Relaxed)));
        match (conn, sess) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A running proxy's shared state. Cheap to clone.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("config", &self.inner.config)
            .field("decider", &self.inner.decider)
            .finish_non_exhaustive()
    }
}

/// A handle that stops a serving proxy.
#[derive(Debug, Clone)]
pub struct Shutdown {
    tx: watch::Sender<bool>,
}

impl Shutdown {
    /// Stop accepting, cut open tunnels and connections still sending a
    /// head, handshake or ClientHello (recorded with `shutdown`).
    pub fn trigger(&self) {
        let _ = self.tx.send(true);
    }
}

/// A receiver side of [`Shutdown`].
#[derive(Debug, Clone)]
pub struct ShutdownSignal {
    rx: watch::Receiver<bool>,
}

impl ShutdownSignal {
    /// Resolves once shutdown was triggered.
    pub async fn wait(&mut self) {
        while !*self.rx.borrow() {
            if self.rx.changed().await.is_err() {
                // sender gone: never fires
                std::future::pending::<()>().await;
            }
        }
    }
}

/// A shutdown pair.
pub fn shutdown_channel() -> (Shutdown, ShutdownSignal) {
    let (tx, rx) = watch::channel(false);
    (Shutdown { tx }, ShutdownSignal { rx })
}

/// What a listener accepts.
#[derive(Debug)]
pub enum Listener {
    /// A TCP listener.
    Tcp(TcpListener),
    /// A Unix stream listener.
    Unix(UnixListener),
}

impl Proxy {
    /// A proxy with the given policy seams.
    pub fn new(
        config: ProxyConfig,
        decider: Arc<dyn Decider>,
        resolver: Arc<dyn Resolver>,
        recorder: Arc<dyn Recorder>,
    ) -> Self {
        let max = config.limits.max_connections.min(Semaphore::MAX_PERMITS);
        Self {
            inner: Arc::new(Inner {
                config,
                decider,
                resolver,
                recorder,
                session_bytes: AtomicU64::new(0),
                next_id: AtomicU64::new(1),
                conns: Arc::new(Semaphore::new(max)),
                recent: Mutex::new(VecDeque::new()),
                own_listen: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Bytes carried by all connections so far.
    pub fn session_bytes(&self) -> u64 {
        self.inner.session_bytes.load(Ordering::Relaxed)
    }

    /// Serve until `signal` fires, then cut open tunnels and connections
    /// still setting up, and wait for their records to be written.
    pub async fn serve(&self, listener: Listener, mut signal: ShutdownSignal) -> io::Result<()> {
        if let Listener::Tcp(l) = &listener
            && let (Ok(a), Ok(mut own)) = (l.local_addr(), self.inner.own_listen.lock())
        {
            own.push(a);
        }
        let mut tasks = JoinSet::new();
        loop {
            let accepted = tokio::select! {
                () = signal.wait() => break,
                r = accept(&listener) => r,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            };
            let this = self.clone();
            let sig = signal.clone();
            match accepted {
                Ok(Accepted::Tcp(stream, peer)) => {
                    tasks.spawn(async move { this.handle_conn(stream, peer, sig).await });
                }
                Ok(Accepted::Unix(stream)) => {
                    tasks.spawn(
                        async move { this.handle_conn(stream, "unix".to_owned(), sig).await },
                    );
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(target: "palisade_egress", error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        while tasks.join_next().await.is_some() {}
        Ok(())
    }

    /// Handle one client connection to completion and record it. The
    /// tunnel copies through user space; connections accepted by
    /// [`Proxy::serve`] splice instead where they can.
    pub async fn handle<S>(&self, client: S, peer: String, signal: ShutdownSignal)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        self.handle_conn(Opaque(client), peer, signal).await;
    }

    async fn handle_conn<S: Conn>(&self, mut client: S, peer: String, signal: ShutdownSignal) {
        let inner = &self.inner;
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let t0 = Instant::now();
        let mut rec = ConnectionRecord::new(id, peer, SystemTime::now());
        let permit = inner.conns.clone().try_acquire_owned();
        let held = inner
            .config
            .hold
            .as_ref()
            .filter(|h| h.flag.load(Ordering::SeqCst))
            .map(|h| h.code);
        // Refused before the request was read: the client may already be
        // writing it, and closing with its bytes unread would reset the
        // connection and lose the refusal; they are drained after.
        let mut early = true;
        if !inner.recorder.healthy() {
            refuse(
                &mut client,
                &mut rec,
                503,
                "recording_unavailable",
                "connections cannot be recorded",
            )
            .await;
        } else if let Some(code) = held {
            refuse(
                &mut client,
                &mut rec,
                503,
                code,
                "new connections are held by the host",
            )
            .await;
        } else {
            match permit {
                Err(_) => {
                    refuse(
                        &mut client,
                        &mut rec,
                        503,
                        "concurrency_limit",
                        "too many connections",
                    )
                    .await;
                }
                Ok(_permit) => {
                    if self.rate_limited(t0) {
                        refuse(
                            &mut client,
                            &mut rec,
                            429,
                            "rate_limited",
                            "too many new connections",
                        )
                        .await;
                    } else {
                        early = false;
                        self.serve_one(&mut client, &mut rec, signal).await;
                    }
                }
            }
        }
        rec.duration = t0.elapsed();
        let ev = ProxyEvent::Connection(rec);
        ev.trace();
        inner.recorder.record(&ev);
        if early {
            drain_briefly(&mut client).await;
        }
    }

    fn rate_limited(&self, now: Instant) -> bool {
        let Some(limit) = self.inner.config.limits.per_minute else {
            return false;
        };
        let Ok(mut q) = self.inner.recent.lock() else {
            return true;
        };
        while q
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= Duration::from_secs(60))
        {
            q.pop_front();
        }
        if q.len() >= usize::try_from(limit).unwrap_or(usize::MAX) {
            return true;
        }
        q.push_back(now);
        false
    }

    async fn serve_one<S: Conn>(
        &self,
        client: &mut S,
        rec: &mut ConnectionRecord,
        signal: ShutdownSignal,
    ) {
        let cfg = &self.inner.config;
        let limits = &cfg.limits;
        // 1. request head
        let mut buf: Vec<u8> = Vec::with_capacity(1024);
        let deadline = tokio::time::Instant::now() + limits.header_timeout;
        // The first byte tells SOCKS5 (0x05) from HTTP. Shutdown does not
        // wait for a client still sending its head.
        let mut stop = signal.clone();
        let first = unless_shutdown(
            &mut stop,
            tokio::time::timeout_at(deadline, fill(client, &mut buf, 1)),
        )
        .await;
        let Some(first) = first else {
            refuse_shutdown(client, rec).await;
            return;
        };
        match first {
            Err(_) => {
                refuse(
                    client,
                    rec,
                    408,
                    "header_timeout",
                    "request head not received in time",
                )
                .await;
                return;
            }
            Ok(false) => {
                rec.reason = "client_closed_before_head".into();
                return;
            }
            Ok(true) => {}
        }
        if buf.first() == Some(&5) {
            self.serve_socks(client, rec, buf, deadline, signal).await;
            return;
        }
        let parsing = tokio::time::timeout_at(deadline, async {
            let mut chunk = [0u8; 2048];
            // Re-parse only when a read brought a line end (or filled the cap),
            // so a client dribbling bytes cannot make parsing quadratic.
            let mut fresh_line_end = buf.contains(&b'\n');
            loop {
                if fresh_line_end || buf.len() >= limits.max_header_bytes {
                    match parse_head(&buf, limits.max_header_bytes) {
                        Ok(Some(done)) => return Ok(Some(done)),
                        Ok(None) => {}
                        Err(e) => return Err(Some(e)),
                    }
                }
                let room = limits
                    .max_header_bytes
                    .saturating_sub(buf.len())
                    .clamp(1, chunk.len());
                let Some(slot) = chunk.get_mut(..room) else {
                    return Err(None);
                };
                match client.read(slot).await {
                    Ok(0) | Err(_) => return Ok(None),
                    Ok(n) => {
                        let got = slot.get(..n).unwrap_or_default();
                        fresh_line_end = got.contains(&b'\n');
                        buf.extend_from_slice(got);
                    }
                }
            }
        });
        let parsed = unless_shutdown(&mut stop, parsing).await;
        let Some(parsed) = parsed else {
            refuse_shutdown(client, rec).await;
            return;
        };
        let (head, consumed) = match parsed {
            Err(_) => {
                refuse(
                    client,
                    rec,
                    408,
                    "header_timeout",
                    "request head not received in time",
                )
                .await;
                return;
            }
            Ok(Ok(None)) => {
                rec.reason = "client_closed_before_head".into();
                return;
            }
            Ok(Err(Some(e))) => {
                let code = format!("bad_request:{}", e.code());
                refuse(client, rec, e.status(), &code, &e.to_string()).await;
                return;
            }
            Ok(Err(None)) => {
                refuse(client, rec, 400, "bad_request", "bad request").await;
                return;
            }
            Ok(Ok(Some(h))) => h,
        };
        let leftover = buf.get(consumed..).unwrap_or_default().to_vec();
        rec.kind = if head.is_connect() {
            ProxyKind::Connect
        } else {
            ProxyKind::Http
        };
        let host = head.target.host().clone();
        let port = head.target.port();
        rec.host = Some(host.to_string());
        rec.port = Some(port);

        // 2. session token
        if let Some(token) = &cfg.token {
            let ok = head
                .header("proxy-authorization")
                .is_some_and(|v| token.verify(v));
            if !ok {
                refuse(
                    client,
                    rec,
                    407,
                    "proxy_auth_required",
                    "proxy authentication required",
                )
                .await;
                return;
            }
        }

        // Plain HTTP: where this request's body ends in what already
        // arrived (a CONNECT head has no body); a malformed start is
        // refused before anything is dialled.
        let mut framer = BodyFramer::new(Framing::of(&head));
        let in_body = match framer.feed(&leftover) {
            Ok(n) => n,
            Err(e) => {
                let code = format!("bad_request:{}", e.code());
                refuse(client, rec, 400, &code, &e.to_string()).await;
                return;
            }
        };
        let declared = head
            .header("content-length")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.parse::<u64>().ok());
        let mut up = match self.open_upstream(&host, port, declared, rec).await {
            Ok(up) => up,
            Err(r) => {
                refuse(client, rec, r.status, &r.code, r.message).await;
                rec.outcome = r.outcome;
                rec.close = r.close;
                return;
            }
        };
        // No answer and no forwarded byte before the record is accepted.
        let status = head.is_connect().then_some(200);
        match self.admit(rec, status, &mut stop).await {
            Some(true) => {}
            Some(false) => {
                refuse_unrecorded(client, rec).await;
                return;
            }
            None => {
                refuse_shutdown(client, rec).await;
                return;
            }
        }

        if head.is_connect() {
            if client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_err()
            {
                rec.reason = "client_closed".into();
                rec.close = CloseReason::ClientError;
                return;
            }
            rec.status = Some(200);
            self.run_tunnel(client, &mut up, leftover, &host, port, rec, signal)
                .await;
        } else {
            // One request per connection: only this request's body follows
            // its head upstream; a pipelined request after it is dropped
            // (it would reach the upstream undecided, unrecorded and with
            // its Proxy-Authorization intact). The upstream is told
            // `Connection: close`, and so is the client by the close.
            let mut first_up = rewrite_http_head(&head);
            first_up.extend_from_slice(leftover.get(..in_body).unwrap_or_default());
            rec.outcome = Outcome::Allowed;
            rec.reason = "allowed".into();
            let (up_bytes, down_bytes, close) = pump(
                client,
                &mut up,
                &first_up,
                Some(framer),
                &self.inner,
                signal,
            )
            .await;
            rec.bytes_up = up_bytes;
            rec.bytes_down = down_bytes;
            rec.close = close;
        }
    }

    /// After the client was told the tunnel is open: the SNI check (on SNI
    /// ports), then the metered pump.
    #[allow(clippy::too_many_arguments, reason = "one call per protocol")]
    async fn run_tunnel<S: Conn>(
        &self,
        client: &mut S,
        up: &mut Upstream,
        mut first_up: Vec<u8>,
        host: &RequestHost,
        port: u16,
        rec: &mut ConnectionRecord,
        signal: ShutdownSignal,
    ) {
        let cfg = &self.inner.config;
        // 5. SNI check: required on the SNI ports; on any other port, done
        // when the client speaks first with a TLS record (a CDN routes by
        // SNI on 8443 as on 443). A server that speaks first is no TLS one.
        let check = if !cfg.require_sni_match {
            false
        } else if cfg.sni_ports.contains(&port) {
            true
        } else {
            match self
                .client_opens_with_tls(client, up, &mut first_up, rec, &signal)
                .await
            {
                Some(tls) => tls,
                None => return,
            }
        };
        if check {
            let mut stop = signal.clone();
            let hello = unless_shutdown(
                &mut stop,
                read_client_hello(client, &mut first_up, cfg.limits.tls_hello_timeout),
            )
            .await;
            let Some(hello) = hello else {
                deny_after_200(rec, "shutdown");
                rec.close = CloseReason::Shutdown;
                return;
            };
            match hello {
                Ok(ClientHello::Sni(sni)) => {
                    rec.sni = Some(sni.clone());
                    let matches = matches!(host, RequestHost::Name(n) if *n == sni);
                    if !matches {
                        deny_after_200(rec, "sni_mismatch");
                        return;
                    }
                }
                Ok(ClientHello::NoSni) => {
                    deny_after_200(rec, "sni_missing");
                    return;
                }
                Ok(other) => {
                    deny_after_200(rec, other.code());
                    return;
                }
                Err(code) => {
                    deny_after_200(rec, code);
                    return;
                }
            }
        }
        rec.outcome = Outcome::Allowed;
        rec.reason = "allowed".into();
        // 6. pump with limits
        let (up_bytes, down_bytes, close) =
            pump(client, up, &first_up, None, &self.inner, signal).await;
        rec.bytes_up = up_bytes;
        rec.bytes_down = down_bytes;
        rec.close = close;
    }

    /// On a port outside [`ProxyConfig::sni_ports`]: waits (up to the idle
    /// timeout) for the first bytes of either side; `Some(true)` when the
    /// client spoke first and its bytes start a TLS handshake record
    /// (they are kept in `first_up`). `None` with the record closed when
    /// shutdown came first or the client went away.
    async fn client_opens_with_tls<S: Conn>(
        &self,
        client: &mut S,
        up: &mut Upstream,
        first_up: &mut Vec<u8>,
        rec: &mut ConnectionRecord,
        signal: &ShutdownSignal,
    ) -> Option<bool> {
        let mut chunk = [0u8; 4096];
        let mut peek = [0u8; 1];
        if first_up.is_empty() {
            let mut stop = signal.clone();
            let first = unless_shutdown(
                &mut stop,
                tokio::time::timeout(self.inner.config.limits.idle_timeout, async {
                    tokio::select! {
                        r = client.read(&mut chunk) => Some(r),
                        _ = up.stream.peek(&mut peek) => None,
                    }
                }),
            )
            .await;
            match first {
                None => {
                    deny_after_200(rec, "shutdown");
                    rec.close = CloseReason::Shutdown;
                    return None;
                }
                // idle, or the server spoke first: not a TLS client
                Some(Err(_) | Ok(None)) => return Some(false),
                Some(Ok(Some(Ok(n)))) if n > 0 => {
                    first_up.extend_from_slice(chunk.get(..n).unwrap_or_default());
                }
                Some(Ok(Some(_))) => {
                    rec.reason = "client_closed".into();
                    rec.close = CloseReason::ClientError;
                    return None;
                }
            }
        }
        Some(first_up.first() == Some(&0x16))
    }

    /// SOCKS5 (RFC 1928) with CONNECT only; username/password (RFC 1929)
    /// carries the session token as the password when one is configured.
    async fn serve_socks<S: Conn>(
        &self,
        client: &mut S,
        rec: &mut ConnectionRecord,
        mut buf: Vec<u8>,
        deadline: tokio::time::Instant,
        signal: ShutdownSignal,
    ) {
        rec.kind = ProxyKind::Socks5;
        let cfg = &self.inner.config;
        let mut stop = signal.clone();
        let handshaking = tokio::time::timeout_at(deadline, async {
            // greeting: VER NMETHODS METHODS
            if !fill(client, &mut buf, 2).await {
                return Err(("socks:client_closed", None));
            }
            let n = usize::from(buf.get(1).copied().unwrap_or(0));
            if n == 0 || !fill(client, &mut buf, 2 + n).await {
                return Err(("socks:bad_greeting", None));
            }
            let methods = buf.get(2..2 + n).unwrap_or_default();
            let want = if cfg.token.is_some() { 2u8 } else { 0u8 };
            if !methods.contains(&want) {
                return Err(("socks:no_acceptable_auth", Some(vec![5u8, 0xff])));
            }
            if client.write_all(&[5, want]).await.is_err() {
                return Err(("socks:client_closed", None));
            }
            let mut pos = 2 + n;
            if let Some(token) = &cfg.token {
                // VER=1 ULEN UNAME PLEN PASSWD
                if !fill(client, &mut buf, pos + 2).await || buf.get(pos) != Some(&1) {
                    return Err(("socks:bad_auth", Some(vec![1u8, 1])));
                }
                let ulen = usize::from(buf.get(pos + 1).copied().unwrap_or(0));
                if !fill(client, &mut buf, pos + 2 + ulen + 1).await {
                    return Err(("socks:bad_auth", Some(vec![1u8, 1])));
                }
                let plen = usize::from(buf.get(pos + 2 + ulen).copied().unwrap_or(0));
                let pstart = pos + 3 + ulen;
                if !fill(client, &mut buf, pstart + plen).await {
                    return Err(("socks:bad_auth", Some(vec![1u8, 1])));
                }
                let password = buf.get(pstart..pstart + plen).unwrap_or_default();
                if !bool::from(password.ct_eq(token.expose().as_bytes())) {
                    return Err(("proxy_auth_required", Some(vec![1u8, 1])));
                }
                if client.write_all(&[1, 0]).await.is_err() {
                    return Err(("socks:client_closed", None));
                }
                pos = pstart + plen;
            }
            // request: VER CMD RSV ATYP DST.ADDR DST.PORT
            if !fill(client, &mut buf, pos + 5).await {
                return Err(("socks:bad_request", None));
            }
            let (ver, cmd, rsv, atyp) = (
                buf.get(pos).copied(),
                buf.get(pos + 1).copied(),
                buf.get(pos + 2).copied(),
                buf.get(pos + 3).copied(),
            );
            if ver != Some(5) || rsv != Some(0) {
                return Err(("socks:bad_request", Some(socks_reply(1))));
            }
            let addr_len = match atyp {
                Some(1) => 4,
                Some(4) => 16,
                Some(3) => 1 + usize::from(buf.get(pos + 4).copied().unwrap_or(0)),
                _ => return Err(("socks:bad_address_type", Some(socks_reply(8)))),
            };
            let end = pos + 4 + addr_len + 2;
            if !fill(client, &mut buf, end).await {
                return Err(("socks:bad_request", None));
            }
            if cmd != Some(1) {
                return Err(("socks:command_not_supported", Some(socks_reply(7))));
            }
            let addr = buf.get(pos + 4..pos + 4 + addr_len).unwrap_or_default();
            let host = match atyp {
                Some(1) => <[u8; 4]>::try_from(addr)
                    .ok()
                    .map(|a| RequestHost::Ip(IpAddr::from(a))),
                Some(4) => <[u8; 16]>::try_from(addr)
                    .ok()
                    .map(|a| RequestHost::Ip(IpAddr::from(a))),
                _ => addr
                    .get(1..)
                    .and_then(|n| std::str::from_utf8(n).ok())
                    .and_then(|n| crate::head::parse_host_name(n).ok()),
            };
            let port_bytes = buf.get(end - 2..end).unwrap_or_default();
            let port = match port_bytes {
                [a, b] => u16::from_be_bytes([*a, *b]),
                _ => 0,
            };
            match host {
                Some(h) if port != 0 => Ok((h, port, buf.get(end..).unwrap_or_default().to_vec())),
                _ => Err(("socks:bad_target", Some(socks_reply(1)))),
            }
        });
        let handshake = unless_shutdown(&mut stop, handshaking).await;
        let Some(handshake) = handshake else {
            let _ = client.shutdown().await;
            deny_after_200(rec, "shutdown");
            rec.close = CloseReason::Shutdown;
            return;
        };
        let (host, port, leftover) = match handshake {
            Err(_) => {
                deny_after_200(rec, "header_timeout");
                return;
            }
            Ok(Err((code, reply))) => {
                if let Some(r) = reply {
                    let _ = client.write_all(&r).await;
                }
                let _ = client.shutdown().await;
                deny_after_200(rec, code);
                return;
            }
            Ok(Ok(t)) => t,
        };
        rec.host = Some(host.to_string());
        rec.port = Some(port);
        let mut up = match self.open_upstream(&host, port, None, rec).await {
            Ok(up) => up,
            Err(r) => {
                let code = match (r.status, r.code.as_str()) {
                    (_, c) if c.starts_with("dns") => 4,
                    (_, "connect_failed") => 5,
                    (504, _) => 4,
                    _ => 2,
                };
                let _ = client.write_all(&socks_reply(code)).await;
                let _ = client.shutdown().await;
                rec.outcome = r.outcome;
                rec.reason = r.code;
                rec.close = r.close;
                return;
            }
        };
        let admitted = self.admit(rec, None, &mut stop).await;
        if admitted != Some(true) {
            let _ = client.write_all(&socks_reply(1)).await;
            let _ = client.shutdown().await;
            if admitted.is_some() {
                deny_after_200(rec, "recording_unavailable");
            } else {
                deny_after_200(rec, "shutdown");
                rec.close = CloseReason::Shutdown;
            }
            return;
        }
        if client.write_all(&socks_reply(0)).await.is_err() {
            rec.reason = "client_closed".into();
            rec.close = CloseReason::ClientError;
            return;
        }
        self.run_tunnel(client, &mut up, leftover, &host, port, rec, signal)
            .await;
    }

    /// Waits until the recorder accepted the admission record of a
    /// connection about to be let through (`status`: the answer it gets).
    /// `Some(false)`: the recorder refused it; `None`: shutdown came first.
    async fn admit(
        &self,
        rec: &ConnectionRecord,
        status: Option<u16>,
        stop: &mut ShutdownSignal,
    ) -> Option<bool> {
        let mut admitted = rec.clone();
        admitted.outcome = Outcome::Allowed;
        admitted.status = status;
        let ev = ProxyEvent::Admitted(admitted);
        ev.trace();
        let acceptance = self.inner.recorder.record_accepted(&ev);
        unless_shutdown(stop, acceptance.accepted()).await
    }

    /// Steps 3–5 shared by every protocol: decide the name, resolve once,
    /// check every address, refuse loops, dial the checked address.
    async fn open_upstream(
        &self,
        host: &RequestHost,
        port: u16,
        declared_body: Option<u64>,
        rec: &mut ConnectionRecord,
    ) -> Result<Upstream, Refusal> {
        let cfg = &self.inner.config;
        let limits = &cfg.limits;
        // 3. name decision, before any lookup
        let verdict =
            self.inner
                .decider
                .decide(host, port, crate::record::millis(SystemTime::now()));
        rec.rule = verdict.rule.clone();
        if !verdict.is_allow() {
            return Err(Refusal::deny(
                403,
                verdict.record_reason(),
                "destination not allowed by policy",
            ));
        }
        // Plain HTTP: refuse a declared body larger than the budget up front.
        if let Some(cl) = declared_body
            && self.inner.remaining_budget(0).is_some_and(|rem| cl > rem)
        {
            let mut r = Refusal::deny(
                413,
                "limit_exceeded".into(),
                "request body exceeds the byte limit",
            );
            r.close = CloseReason::LimitExceeded;
            return Err(r);
        }
        // 4. resolve once, check every address
        let addrs: Vec<IpAddr> = match host {
            RequestHost::Ip(ip) => vec![*ip],
            RequestHost::Name(name) => {
                match tokio::time::timeout(limits.dns_timeout, self.inner.resolver.resolve(name))
                    .await
                {
                    Err(_) => {
                        return Err(Refusal::failed(
                            504,
                            "dns_timeout",
                            "name resolution timed out",
                        ));
                    }
                    Ok(Err(_)) => {
                        return Err(Refusal::failed(502, "dns_failed", "name resolution failed"));
                    }
                    Ok(Ok(a)) if a.is_empty() => {
                        return Err(Refusal::failed(502, "dns_failed", "name has no addresses"));
                    }
                    Ok(Ok(a)) => a,
                }
            }
        };
        for ip in &addrs {
            if let Err(denied) = cfg.addresses.check(*ip) {
                let code = format!("address_not_allowed:{}", denied.class);
                return Err(Refusal::deny(403, code, "destination address not allowed"));
            }
        }
        if self.is_own_listener(&addrs, port) {
            return Err(Refusal::deny(
                403,
                "proxy_loop".into(),
                "the proxy does not connect to itself",
            ));
        }
        // dial the checked address, never a second lookup
        let mut last_err = "connect_failed";
        for ip in &addrs {
            let sa = SocketAddr::new(*ip, port);
            let dialled = Instant::now();
            match tokio::time::timeout(limits.connect_timeout, TcpStream::connect(sa)).await {
                Ok(Ok(s)) => {
                    // The handshake took one round trip (plus scheduling,
                    // which only makes the estimate err towards "far").
                    let near = dialled.elapsed() < tunnel::NEAR_RTT;
                    let _ = s.set_nodelay(true);
                    rec.resolved = Some(sa);
                    return Ok(Upstream { stream: s, near });
                }
                Ok(Err(_)) => last_err = "connect_failed",
                Err(_) => last_err = "connect_timeout",
            }
        }
        let status = if last_err == "connect_timeout" {
            504
        } else {
            502
        };
        Err(Refusal::failed(status, last_err, "upstream unreachable"))
    }

    fn is_own_listener(&self, addrs: &[IpAddr], port: u16) -> bool {
        let Ok(own) = self.inner.own_listen.lock() else {
            return true;
        };
        own.iter().any(|l| {
            l.port() == port
                && addrs
                    .iter()
                    .any(|ip| l.ip().is_unspecified() || canonical(*ip) == canonical(l.ip()))
        })
    }
}

/// Why a request was not connected, protocol-neutral.
#[derive(Debug)]
struct Refusal {
    status: u16,
    code: String,
    message: &'static str,
    outcome: Outcome,
    close: CloseReason,
}

impl Refusal {
    fn deny(status: u16, code: String, message: &'static str) -> Self {
        Self {
            status,
            code,
            message,
            outcome: Outcome::Denied,
            close: CloseReason::Refused,
        }
    }

    fn failed(status: u16, code: &str, message: &'static str) -> Self {
        Self {
            status,
            code: code.to_owned(),
            message,
            outcome: Outcome::Failed,
            close: CloseReason::Refused,
        }
    }
}

/// Runs `fut` unless the proxy shuts down first (`None`): a connection
/// still sending its head, handshake or ClientHello, or waiting for its
/// record to be accepted, is cut at once instead of holding up the
/// shutdown.
async fn unless_shutdown<F: Future>(signal: &mut ShutdownSignal, fut: F) -> Option<F::Output> {
    tokio::select! {
        biased;
        () = signal.wait() => None,
        out = fut => Some(out),
    }
}

/// After a refusal sent before the request was read: reads and drops what
/// the client sends until it closes, at most [`DRAIN_BYTES`] for at most
/// [`DRAIN_TIME`], so that the socket is not closed with unread bytes
/// (which sends a reset that can overtake the refusal).
async fn drain_briefly<S: AsyncRead + Unpin>(client: &mut S) {
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        let mut chunk = [0u8; 4096];
        let mut left = DRAIN_BYTES;
        while left > 0 {
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

/// Most bytes [`drain_briefly`] reads.
const DRAIN_BYTES: usize = 64 * 1024;
/// Longest [`drain_briefly`] waits.
const DRAIN_TIME: Duration = Duration::from_secs(1);

/// Answers 503 to a connection whose admission the recorder refused.
async fn refuse_unrecorded<S>(client: &mut S, rec: &mut ConnectionRecord)
where
    S: AsyncWrite + Unpin,
{
    refuse(
        client,
        rec,
        503,
        "recording_unavailable",
        "connections cannot be recorded",
    )
    .await;
}

/// Answers 503 to a connection cut by shutdown before it was connected;
/// its record says `shutdown`.
async fn refuse_shutdown<S>(client: &mut S, rec: &mut ConnectionRecord)
where
    S: AsyncWrite + Unpin,
{
    refuse(client, rec, 503, "shutdown", "the proxy is shutting down").await;
    rec.close = CloseReason::Shutdown;
}

/// A SOCKS5 reply with a zero bound address.
fn socks_reply(code: u8) -> Vec<u8> {
    vec![5, code, 0, 1, 0, 0, 0, 0, 0, 0]
}

/// Read until `buf` holds at least `need` bytes (bounded by the caller's
/// deadline); `false` on EOF or error.
async fn fill<S: AsyncRead + Unpin>(client: &mut S, buf: &mut Vec<u8>, need: usize) -> bool {
    let mut chunk = [0u8; 1024];
    while buf.len() < need {
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(chunk.get(..n).unwrap_or_default()),
        }
    }
    true
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    }
}

fn deny_after_200(rec: &mut ConnectionRecord, code: &str) {
    rec.outcome = Outcome::Denied;
    rec.reason = code.to_owned();
    rec.close = CloseReason::Refused;
}

async fn read_client_hello<S>(
    client: &mut S,
    buf: &mut Vec<u8>,
    timeout: Duration,
) -> Result<ClientHello, &'static str>
where
    S: AsyncRead + Unpin,
{
    let fut = async {
        loop {
            let res = parse_client_hello(buf);
            if res != ClientHello::Incomplete {
                return Ok(res);
            }
            if buf.len() >= MAX_PEEK {
                return Ok(ClientHello::Malformed("client_hello_too_large"));
            }
            let mut chunk = [0u8; 4096];
            let room = MAX_PEEK.saturating_sub(buf.len()).clamp(1, chunk.len());
            let slot = chunk.get_mut(..room).ok_or("not_tls")?;
            match client.read(slot).await {
                Ok(0) | Err(_) => return Err("client_closed_before_hello"),
                Ok(n) => buf.extend_from_slice(slot.get(..n).unwrap_or_default()),
            }
        }
    };
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or(Err("tls_hello_timeout"))
}

/// Hop-by-hop and proxy headers never forwarded upstream.
const HOP_BY_HOP: [&str; 9] = [
    "host",
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// Rewrite an absolute-form request into origin-form for the upstream,
/// regenerating `Host` from the URL and closing after one response.
fn rewrite_http_head(head: &RequestHead) -> Vec<u8> {
    let Target::Absolute {
        host,
        port,
        path_and_query,
    } = &head.target
    else {
        return Vec::new();
    };
    // The parser refused a `Connection` header naming a protected header;
    // never drop one here either (the body is framed by them).
    let listed: Vec<String> = crate::head::connection_options(head)
        .unwrap_or_default()
        .into_iter()
        .filter(|o| !crate::head::CONNECTION_PROTECTED.contains(&o.as_str()))
        .collect();
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(format!("{} {} HTTP/1.1\r\n", head.method, path_and_query).as_bytes());
    if *port == 80 {
        out.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
    } else {
        out.extend_from_slice(format!("Host: {host}:{port}\r\n").as_bytes());
    }
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&lower.as_str())
            || lower.starts_with("proxy-")
            || listed.contains(&lower)
        {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

async fn refuse<S>(client: &mut S, rec: &mut ConnectionRecord, status: u16, code: &str, msg: &str)
where
    S: AsyncWrite + Unpin,
{
    rec.outcome = Outcome::Denied;
    rec.reason = code.to_owned();
    rec.status = Some(status);
    rec.close = CloseReason::Refused;
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    };
    let body = format!("palisade: {msg} ({code})\n");
    let mut resp = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Palisade-Error: {code}\r\nProxy-Status: palisade; error=\"{code}\"\r\n",
        body.len()
    );
    if status == 407 {
        resp.push_str("Proxy-Authenticate: Basic realm=\"palisade\"\r\n");
    }
    if status == 429 {
        resp.push_str("Retry-After: 60\r\n");
    }
    resp.push_str("\r\n");
    resp.push_str(&body);
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        let _ = client.write_all(resp.as_bytes()).await;
        let _ = client.shutdown().await;
    })
    .await;
}

/// A client stream of either listener kind.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A freshly accepted client.
enum Accepted {
    Tcp(TcpStream, String),
    Unix(UnixStream),
}

async fn accept(listener: &Listener) -> io::Result<Accepted> {
    match listener {
        Listener::Tcp(l) => {
            let (s, peer) = l.accept().await?;
            let _ = s.set_nodelay(true);
            Ok(Accepted::Tcp(s, peer.to_string()))
        }
        Listener::Unix(l) => {
            let (s, _) = l.accept().await?;
            Ok(Accepted::Unix(s))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_accepts_basic_and_bearer_and_refuses_others() {
        let t = ProxyToken::from_secret("s3cr3t-token".into());
        let basic = base64::engine::general_purpose::STANDARD.encode("worker:s3cr3t-token");
        assert!(t.verify(format!("Basic {basic}").as_bytes()));
        assert!(t.verify(b"Bearer s3cr3t-token"));
        assert!(t.verify(b"bearer s3cr3t-token"));
        assert!(!t.verify(b"Bearer s3cr3t-tokeN"));
        assert!(!t.verify(b"Bearer s3cr3t-token "));
        assert!(!t.verify(b"s3cr3t-token"));
        let wrong = base64::engine::general_purpose::STANDARD.encode("worker:nope");
        assert!(!t.verify(format!("Basic {wrong}").as_bytes()));
        assert!(!t.verify(b"Basic !!!"));
        assert!(!format!("{t:?}").contains("s3cr3t"));
    }

    #[test]
    fn http_rewrite_regenerates_host_and_strips_proxy_headers() {
        let raw = "GET http://a.example:8080/p?q HTTP/1.1\r\nHost: a.example:8080\r\nProxy-Authorization: Basic x\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nAccept: */*\r\n\r\n";
        let (head, _) = parse_head(raw.as_bytes(), 4096).unwrap().unwrap();
        let out = String::from_utf8(rewrite_http_head(&head)).unwrap();
        assert_eq!(
            out,
            "GET /p?q HTTP/1.1\r\nHost: a.example:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
    }
}
