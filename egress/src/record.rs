//! Records of proxy connections, relay requests and the taint sources a
//! decider's session takes in, and the [`Recorder`] seam through which they
//! reach the evidence journal.
//!
//! Records carry hosts, ports, addresses, decisions, byte counts and
//! durations; never payload bytes, header values or credentials.
//!
//! A connection the proxy lets through has two records: an
//! [`ProxyEvent::Admitted`] it waits on ([`Recorder::record_accepted`]) before
//! the worker gets its `200` or a byte is forwarded, and the
//! [`ProxyEvent::Connection`] written when it ends. A recorder that cannot
//! accept the first turns the connection into a `503`.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// The proxy protocol of a connection attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyKind {
    /// The request head was never parsed.
    Unknown,
    /// `CONNECT host:port`.
    Connect,
    /// Absolute-form plain HTTP.
    Http,
    /// SOCKS5 `CONNECT`.
    Socks5,
}

impl ProxyKind {
    /// Stable name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Connect => "connect",
            Self::Http => "http",
            Self::Socks5 => "socks5",
        }
    }
}

/// Whether an attempt was let through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Connected to the upstream.
    Allowed,
    /// Refused (policy, address, limit, malformed request, SNI, auth, ...).
    Denied,
    /// Allowed by policy but the upstream could not be reached.
    Failed,
}

impl Outcome {
    /// Stable name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Allowed => "allow",
            Self::Denied => "deny",
            Self::Failed => "error",
        }
    }
}

/// How a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// Refused before any tunnel existed.
    Refused,
    /// Both sides finished normally.
    Completed,
    /// A byte limit was crossed; the tunnel was cut.
    LimitExceeded,
    /// No bytes moved for the idle timeout.
    IdleTimeout,
    /// The client side failed.
    ClientError,
    /// The upstream side failed.
    UpstreamError,
    /// The proxy is shutting down.
    Shutdown,
}

impl CloseReason {
    /// Stable name (`limit_exceeded`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::Completed => "completed",
            Self::LimitExceeded => "limit_exceeded",
            Self::IdleTimeout => "idle_timeout",
            Self::ClientError => "client_error",
            Self::UpstreamError => "upstream_error",
            Self::Shutdown => "shutdown",
        }
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One proxy connection attempt, allowed or not.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionRecord {
    /// Per-proxy sequence number of the attempt.
    pub id: u64,
    /// The client's address (`unix` for the Unix socket).
    pub peer: String,
    /// When the connection was accepted.
    pub started_at: SystemTime,
    /// CONNECT or plain HTTP.
    pub kind: ProxyKind,
    /// The requested host, as normalised by the parser.
    pub host: Option<String>,
    /// The requested port.
    pub port: Option<u16>,
    /// The checked address that was dialled.
    pub resolved: Option<SocketAddr>,
    /// The SNI seen in the ClientHello, when inspected.
    pub sni: Option<String>,
    /// The decision.
    pub outcome: Outcome,
    /// The policy rule that decided, when known.
    pub rule: Option<String>,
    /// A stable reason code (`allowed`, `host_not_allowed`, `address_not_allowed:loopback`, ...).
    pub reason: String,
    /// The HTTP status sent to the client, if any.
    pub status: Option<u16>,
    /// Bytes from client to upstream.
    pub bytes_up: u64,
    /// Bytes from upstream to client.
    pub bytes_down: u64,
    /// Time from accept to close.
    pub duration: Duration,
    /// How it ended.
    pub close: CloseReason,
}

impl ConnectionRecord {
    /// A fresh record for an accepted connection (denied until decided).
    pub fn new(id: u64, peer: String, started_at: SystemTime) -> Self {
        Self {
            id,
            peer,
            started_at,
            kind: ProxyKind::Unknown,
            host: None,
            port: None,
            resolved: None,
            sni: None,
            outcome: Outcome::Denied,
            rule: None,
            reason: String::new(),
            status: None,
            bytes_up: 0,
            bytes_down: 0,
            duration: Duration::ZERO,
            close: CloseReason::Refused,
        }
    }
}

/// Whether a relay request reached the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RelayOutcome {
    /// Sent to the upstream (whatever it answered).
    Forwarded,
    /// Refused by the relay.
    Refused,
    /// Refused because the session's routing state keeps content from the
    /// relay's provider ([`crate::relay::RelayGate::admit`]).
    RoutingDenied,
    /// An outward route whose action the gate did not allow (denied by
    /// the policy or the host, timed out, or no session to decide it):
    /// never sent upstream ([`crate::relay::RelayGate::outward`]).
    OutwardDenied,
}

impl RelayOutcome {
    /// Stable name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Forwarded => "forwarded",
            Self::Refused => "refused",
            Self::RoutingDenied => "routing_denied",
            Self::OutwardDenied => "outward_denied",
        }
    }
}

/// One host-relay request.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayRecord {
    /// The relay's name.
    pub relay: String,
    /// The request method.
    pub method: String,
    /// The request path, query removed.
    pub path: String,
    /// Forwarded or refused.
    pub outcome: RelayOutcome,
    /// The status sent to the worker.
    pub status: u16,
    /// A stable reason code for refusals (`route_not_allowed`, ...), `forwarded` otherwise.
    pub reason: String,
    /// Request body bytes sent upstream.
    pub bytes_up: u64,
    /// Response body bytes passed back.
    pub bytes_down: u64,
    /// The upstream address dialled.
    pub upstream: Option<SocketAddr>,
    /// When the request arrived.
    pub started_at: SystemTime,
    /// Time until the response body ended.
    pub duration: Duration,
    /// The relay's routing provider ([`crate::relay::RelayConfig::provider`]).
    pub provider: String,
    /// For outcome [`RelayOutcome::RoutingDenied`]: the refusal the relay's
    /// gate gave (rule, path read, sentence); journaled as `routing`.
    pub routing: Option<crate::relay::RouteRefusal>,
    /// For a request that matched an outward route: the ticket of its
    /// `outward_action` decision (once decided).
    pub ticket: Option<u64>,
    /// For a request that matched an outward route: its outward kind
    /// (`github.post.comment`).
    pub outward_kind: Option<String>,
}

/// A new taint source of the session behind the proxy's decider (the
/// journal's `taint_raised`, with the same body the governed session
/// writes).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaintRecord {
    /// The source as reported (for the proxy, the class).
    pub source: String,
    /// The source class the taint rules assigned (`proxy_non_relay`, ...).
    pub class: String,
    /// What exactly tainted the session (`host:port` for a connection).
    pub detail: String,
    /// Whether this source turned a clean session tainted.
    pub first: bool,
    /// Who reported it (`proxy`).
    pub reported_by: String,
    /// When the session took the source in.
    pub at: SystemTime,
}

/// A record emitted by the proxy or a relay.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyEvent {
    /// A proxy connection that passed every check before its answer: the
    /// proxy sends `200` (or forwards the request) only once the recorder
    /// accepted this record. Its [`Self::Connection`] record follows when
    /// it ends, with the same `id`.
    Admitted(ConnectionRecord),
    /// A proxy connection attempt.
    Connection(ConnectionRecord),
    /// A relay request about to be sent upstream: the relay sends it only
    /// once the recorder accepted this record (its `outcome`, `status`,
    /// `reason` and byte counts are not known yet and not written). Its
    /// [`Self::Relay`] record follows when the request ends.
    RelayAdmitted(RelayRecord),
    /// A relay request.
    Relay(RelayRecord),
    /// The decider's session took in a new taint source.
    Taint(TaintRecord),
}

/// A `relay_request` (or `relay_admitted`) body, with a `routing` member
/// when the request was refused on routing grounds (`rule`, `path`,
/// `provider`, `detail`), and `outward_kind` and `ticket` when it matched
/// an outward route.
fn with_routing(mut body: Value, r: &RelayRecord) -> Value {
    if let Some(map) = body.as_object_mut() {
        if let Some(kind) = &r.outward_kind {
            map.insert("outward_kind".into(), json!(kind));
        }
        if let Some(ticket) = r.ticket {
            map.insert("ticket".into(), json!(ticket));
        }
    }
    if let (Some(refusal), Some(map)) = (&r.routing, body.as_object_mut()) {
        map.insert(
            "routing".into(),
            json!({
                "rule": refusal.rule,
                "path": refusal.path,
                "provider": r.provider,
                "detail": refusal.detail,
            }),
        );
    }
    body
}

pub(crate) fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl ProxyEvent {
    /// The evidence record kind: `egress_admitted`, `egress_connection`,
    /// `relay_admitted`, `relay_request` or `taint_raised`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Admitted(_) => "egress_admitted",
            Self::RelayAdmitted(_) => "relay_admitted",
            Self::Connection(_) => "egress_connection",
            Self::Relay(_) => "relay_request",
            Self::Taint(_) => "taint_raised",
        }
    }

    /// The JSON body for the evidence journal.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Admitted(r) => json!({
                "id": r.id,
                "peer": r.peer,
                "started_ms": millis(r.started_at),
                "proxy_type": r.kind.as_str(),
                "host": r.host,
                "port": r.port,
                "resolved": r.resolved.map(|a| a.to_string()),
                "decision": r.outcome.as_str(),
                "rule": r.rule,
                "status": r.status,
            }),
            Self::Connection(r) => json!({
                "id": r.id,
                "peer": r.peer,
                "started_ms": millis(r.started_at),
                "proxy_type": r.kind.as_str(),
                "host": r.host,
                "port": r.port,
                "resolved": r.resolved.map(|a| a.to_string()),
                "sni": r.sni,
                "decision": r.outcome.as_str(),
                "rule": r.rule,
                "reason": r.reason,
                "status": r.status,
                "bytes_up": r.bytes_up,
                "bytes_down": r.bytes_down,
                "duration_ms": u64::try_from(r.duration.as_millis()).unwrap_or(u64::MAX),
                "close": r.close.as_str(),
            }),
            Self::RelayAdmitted(r) => with_routing(
                json!({
                    "relay": r.relay,
                    "method": r.method,
                    "path": r.path,
                    "bytes_up": r.bytes_up,
                    "upstream": r.upstream.map(|a| a.to_string()),
                    "started_ms": millis(r.started_at),
                }),
                r,
            ),
            Self::Relay(r) => with_routing(
                json!({
                    "relay": r.relay,
                    "method": r.method,
                    "path": r.path,
                    "outcome": r.outcome.as_str(),
                    "status": r.status,
                    "reason": r.reason,
                    "bytes_up": r.bytes_up,
                    "bytes_down": r.bytes_down,
                    "upstream": r.upstream.map(|a| a.to_string()),
                    "started_ms": millis(r.started_at),
                    "duration_ms": u64::try_from(r.duration.as_millis()).unwrap_or(u64::MAX),
                }),
                r,
            ),
            Self::Taint(t) => json!({
                "source": t.source,
                "class": t.class,
                "detail": t.detail,
                "first": t.first,
                "reported_by": t.reported_by,
                "at_ms": millis(t.at),
            }),
        }
    }

    /// Emit this record as a `tracing` event (target `palisade_egress`).
    pub fn trace(&self) {
        match self {
            Self::Admitted(r) => tracing::debug!(
                target: "palisade_egress",
                kind = "egress_admitted",
                id = r.id,
                proxy_type = r.kind.as_str(),
                host = r.host.as_deref().unwrap_or(""),
                port = r.port.unwrap_or(0),
            ),
            Self::Connection(r) => tracing::info!(
                target: "palisade_egress",
                kind = "egress_connection",
                id = r.id,
                proxy_type = r.kind.as_str(),
                host = r.host.as_deref().unwrap_or(""),
                port = r.port.unwrap_or(0),
                resolved = %r.resolved.map(|a| a.to_string()).unwrap_or_default(),
                decision = r.outcome.as_str(),
                rule = r.rule.as_deref().unwrap_or(""),
                reason = %r.reason,
                bytes_up = r.bytes_up,
                bytes_down = r.bytes_down,
                duration_ms = u64::try_from(r.duration.as_millis()).unwrap_or(u64::MAX),
                close = r.close.as_str(),
            ),
            Self::RelayAdmitted(r) => tracing::debug!(
                target: "palisade_egress",
                kind = "relay_admitted",
                relay = %r.relay,
                method = %r.method,
                path = %r.path,
                outward_kind = r.outward_kind.as_deref().unwrap_or(""),
                ticket = r.ticket,
            ),
            Self::Relay(r) => tracing::info!(
                target: "palisade_egress",
                kind = "relay_request",
                relay = %r.relay,
                method = %r.method,
                path = %r.path,
                outcome = r.outcome.as_str(),
                status = r.status,
                reason = %r.reason,
                bytes_up = r.bytes_up,
                bytes_down = r.bytes_down,
                rule = r.routing.as_ref().map_or("", |x| x.rule.as_str()),
                outward_kind = r.outward_kind.as_deref().unwrap_or(""),
                ticket = r.ticket,
            ),
            Self::Taint(t) => tracing::info!(
                target: "palisade_egress",
                kind = "taint_raised",
                class = %t.class,
                detail = %t.detail,
                first = t.first,
            ),
        }
    }
}

/// Whether a recorder accepted one record ([`Recorder::record_accepted`]).
#[derive(Debug)]
pub struct Acceptance(AcceptanceState);

#[derive(Debug)]
enum AcceptanceState {
    Ready(bool),
    Waiting(tokio::sync::oneshot::Receiver<bool>),
}

impl Acceptance {
    /// Already settled: `true` accepted, `false` refused.
    pub fn ready(accepted: bool) -> Self {
        Self(AcceptanceState::Ready(accepted))
    }

    /// Settled later through the returned [`AcceptanceSender`]; a sender
    /// dropped unsettled counts as refused.
    pub fn pending() -> (AcceptanceSender, Self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (AcceptanceSender(tx), Self(AcceptanceState::Waiting(rx)))
    }

    /// Resolves once settled: whether the record was accepted.
    pub async fn accepted(self) -> bool {
        match self.0 {
            AcceptanceState::Ready(ok) => ok,
            AcceptanceState::Waiting(rx) => rx.await.unwrap_or(false),
        }
    }
}

/// Settles a pending [`Acceptance`].
#[derive(Debug)]
pub struct AcceptanceSender(tokio::sync::oneshot::Sender<bool>);

impl AcceptanceSender {
    /// Reports whether the record was accepted (durably written, for a
    /// recorder that syncs).
    pub fn settle(self, accepted: bool) {
        let _ = self.0.send(accepted);
    }
}

/// Where records go. Implementations must not block for long: the proxy
/// calls this on its IO tasks (a journal with group commit hands the
/// record to its writer thread).
///
/// A recorder that counts refusals and stops the proxy (fail closed) once
/// it is told to:
///
/// ```
/// use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
///
/// use palisade_egress::record::{ConnectionRecord, Outcome, ProxyEvent, Recorder};
///
/// #[derive(Debug, Default)]
/// struct Counting {
///     refused: AtomicUsize,
///     broken: AtomicBool,
/// }
///
/// impl Recorder for Counting {
///     fn record(&self, event: &ProxyEvent) {
///         if let ProxyEvent::Connection(c) = event
///             && c.outcome == Outcome::Denied
///         {
///             self.refused.fetch_add(1, Ordering::Relaxed);
///         }
///     }
///
///     fn healthy(&self) -> bool {
///         !self.broken.load(Ordering::Relaxed)
///     }
/// }
///
/// let r = Counting::default();
/// let refused = ConnectionRecord::new(1, "127.0.0.1:9".into(), std::time::SystemTime::now());
/// r.record(&ProxyEvent::Connection(refused));
/// assert_eq!(r.refused.load(Ordering::Relaxed), 1);
/// // the default `record_accepted` records and answers `healthy()`:
/// // once that is false, the proxy answers new connections 503
/// assert!(r.healthy());
/// r.broken.store(true, Ordering::Relaxed);
/// assert!(!r.healthy());
/// ```
pub trait Recorder: Send + Sync + fmt::Debug {
    /// Record one event.
    fn record(&self, event: &ProxyEvent);

    /// Record one event and report when it is accepted. The proxy awaits
    /// this for [`ProxyEvent::Admitted`] before it answers `200` or forwards a
    /// byte, and answers `503` when it resolves `false`. A recorder that
    /// writes durably must resolve only once the record is (the journal
    /// recorder: after the `fdatasync` of its group, in `Synced` mode),
    /// and `false` for this and every later record once a write failed.
    /// The default records and reports [`Self::healthy`] afterwards.
    fn record_accepted(&self, event: &ProxyEvent) -> Acceptance {
        self.record(event);
        Acceptance::ready(self.healthy())
    }

    /// Whether records can still be written. The proxy and the relays
    /// refuse new work while this is `false` (fail closed).
    fn healthy(&self) -> bool {
        true
    }
}

/// A recorder that keeps events in memory (tests, embedding).
#[derive(Debug, Default)]
pub struct MemoryRecorder {
    events: Mutex<Vec<ProxyEvent>>,
}

impl MemoryRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of all events so far.
    pub fn events(&self) -> Vec<ProxyEvent> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Only the connection records.
    pub fn connections(&self) -> Vec<ConnectionRecord> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                ProxyEvent::Connection(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    /// Only the admission records.
    pub fn admitted(&self) -> Vec<ConnectionRecord> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                ProxyEvent::Admitted(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    /// Only the relay admission records.
    pub fn relay_admitted(&self) -> Vec<RelayRecord> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                ProxyEvent::RelayAdmitted(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    /// Only the relay records.
    pub fn relays(&self) -> Vec<RelayRecord> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                ProxyEvent::Relay(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    /// Only the taint records.
    pub fn taints(&self) -> Vec<TaintRecord> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                ProxyEvent::Taint(t) => Some(t),
                _ => None,
            })
            .collect()
    }
}

impl Recorder for MemoryRecorder {
    fn record(&self, event: &ProxyEvent) {
        if let Ok(mut e) = self.events.lock() {
            e.push(event.clone());
        }
    }
}

/// A recorder that only emits `tracing` events (the proxy always does
/// that too); useful when no journal is configured.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullRecorder;

impl Recorder for NullRecorder {
    fn record(&self, _event: &ProxyEvent) {}
}
