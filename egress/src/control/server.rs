//! The control server: accepts connections on a worker endpoint and a host
//! endpoint, parses one request per line, asks the [`ControlBackend`] and
//! holds outward actions that need approval until the host settles them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Semaphore, oneshot, watch};

use super::protocol::{
    Approval, AskAnswer, CheckpointSummary, MAX_LINE_BYTES, OutwardAction, OutwardAnswer,
    OutwardResult, PendingAction, ProtocolError, Request, Response, SessionView, TaintKind,
    parse_request,
};

/// Which endpoint a connection arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// The endpoint the worker reaches from inside the sandbox.
    Worker,
    /// The host-only endpoint (`palisade approve`, orchestrators).
    Host,
}

/// The policy's first answer to an outward request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyAnswer {
    /// Allow, ask or deny.
    pub verdict: AskAnswer,
    /// The rule that matched, when one did.
    pub rule: Option<String>,
    /// A human-readable reason.
    pub reason: String,
}

/// What the server needs from the session: decisions, state and recording.
///
/// The session that embeds the server implements this over the same shared
/// state the proxy reads, so that a taint report changes the proxy's rules
/// for every new connection before the `taint` answer is sent.
pub trait ControlBackend: Send + Sync + 'static {
    /// Called before every request is handled (e.g. to hash steering paths).
    fn before_request(&self, _endpoint: Endpoint, _op: &str) {}
    /// Raises taint (sticky) and returns the new state.
    fn taint(&self, source: TaintKind, detail: &str) -> SessionView;
    /// The policy's decision for an outward action in the current session state.
    fn decide_outward(&self, kind: &str, target: &str) -> PolicyAnswer;
    /// An outward action now waits for approval.
    fn outward_pending(&self, _pending: &PendingAction) {}
    /// An outward request was settled (allow or deny, after any approval).
    fn outward_settled(&self, kind: &str, target: &str, answer: &OutwardAnswer);
    /// The worker reports that an allowed outward action was executed.
    fn outward_executed(&self, ticket: u64, kind: &str, target: &str, status: Option<i32>);
    /// An outward action a relay asked about was settled
    /// ([`ControlServer::request_outward`], [`ControlServer::refuse_outward`]).
    /// The default records it as a worker's request would be.
    fn relay_outward_settled(&self, action: &OutwardAction, answer: &OutwardAnswer) {
        self.outward_settled(&action.kind, &action.target, answer);
    }
    /// A relay carried out an allowed outward action and saw `result`
    /// ([`ControlServer::relay_executed`]). The default records it as a
    /// worker's report would be.
    fn relay_outward_executed(&self, ticket: u64, action: &OutwardAction, result: &OutwardResult) {
        self.outward_executed(ticket, &action.kind, &action.target, result.status);
    }
    /// The current session state.
    fn state(&self) -> SessionView;
    /// Host only: the staged change set as it is now, read without touching
    /// the stage, recorded as a checkpoint. A session without a stage says
    /// so (the default), and the host gets that error.
    ///
    /// # Errors
    /// A message for the host (`checkpoint_unavailable`).
    fn checkpoint(&self) -> Result<CheckpointSummary, String> {
        Err(String::from("this session has no staged writes"))
    }
}

/// Server limits.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ControlConfig {
    /// How long an `ask` waits for the host before it is denied.
    pub approval_timeout: Duration,
    /// How long a connection may stay silent between requests.
    pub idle_timeout: Duration,
    /// Concurrent connections per endpoint.
    pub max_connections: usize,
}

impl ControlConfig {
    /// How long an `ask` waits for the host before it is denied.
    #[must_use]
    pub fn with_approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = timeout;
        self
    }
}

impl PolicyAnswer {
    /// The answer a [`ControlBackend`] gives: allow, ask or deny, the rule
    /// that matched and a human reason.
    pub fn new(verdict: AskAnswer, rule: Option<String>, reason: impl Into<String>) -> Self {
        Self {
            verdict,
            rule,
            reason: reason.into(),
        }
    }
}

impl Default for ControlConfig {
    fn default() -> Self {
        Self {
            approval_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(600),
            max_connections: 32,
        }
    }
}

/// Errors from binding the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// Binding a socket failed.
    #[error("cannot bind control socket `{path}`: {source}")]
    Bind {
        /// The socket path or address.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A TCP endpoint was not on loopback.
    #[error("control endpoint `{0}` is not a loopback address")]
    NotLoopback(String),
}

/// A bound listener for one endpoint.
#[derive(Debug)]
pub enum ControlListener {
    /// A Unix socket, removed again when the server stops.
    Unix(UnixListener, PathBuf),
    /// A loopback TCP socket.
    Tcp(TcpListener),
}

impl ControlListener {
    /// Binds a Unix socket at `path` with file mode `mode` (e.g. `0o600`).
    /// A stale socket file at `path` is replaced; any other file is an error.
    ///
    /// # Errors
    /// [`ControlError::Bind`] when the socket cannot be created or chmodded.
    pub fn bind_unix(path: &Path, mode: u32) -> Result<Self, ControlError> {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let err = |source| ControlError::Bind {
            path: path.display().to_string(),
            source,
        };
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if meta.file_type().is_socket() {
                std::fs::remove_file(path).map_err(err)?;
            } else {
                return Err(err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "a file that is not a socket is in the way",
                )));
            }
        }
        let listener = UnixListener::bind(path).map_err(err)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(err)?;
        Ok(Self::Unix(listener, path.to_path_buf()))
    }

    /// Binds a loopback TCP socket (port 0 picks a free port).
    ///
    /// # Errors
    /// [`ControlError::NotLoopback`] for a non-loopback address, [`ControlError::Bind`] on failure.
    pub async fn bind_tcp(addr: std::net::SocketAddr) -> Result<Self, ControlError> {
        if !addr.ip().is_loopback() {
            return Err(ControlError::NotLoopback(addr.to_string()));
        }
        TcpListener::bind(addr)
            .await
            .map(Self::Tcp)
            .map_err(|source| ControlError::Bind {
                path: addr.to_string(),
                source,
            })
    }

    /// The address a client uses (`unix:PATH` or `tcp:IP:PORT`).
    #[must_use]
    pub fn address(&self) -> String {
        match self {
            Self::Unix(_, p) => format!("unix:{}", p.display()),
            Self::Tcp(l) => l
                .local_addr()
                .map(|a| format!("tcp:{a}"))
                .unwrap_or_else(|_| String::from("tcp:?")),
        }
    }
}

struct PendingEntry {
    action: PendingAction,
    reply: oneshot::Sender<Approval>,
}

#[derive(Clone)]
struct Issued {
    kind: String,
    target: String,
    allowed: bool,
    executed: bool,
    /// Issued to a relay ([`ControlServer::request_outward`]): only that
    /// relay reports it executed, never the worker (whose report would
    /// take the place of the relay's record).
    relay: bool,
}

struct Shared {
    backend: Arc<dyn ControlBackend>,
    config: ControlConfig,
    next_ticket: AtomicU64,
    pending: Mutex<BTreeMap<u64, PendingEntry>>,
    issued: Mutex<BTreeMap<u64, Issued>>,
    stop: watch::Sender<bool>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The control server. Cheap to clone; all clones share state.
#[derive(Clone)]
pub struct ControlServer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ControlServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlServer")
            .field("config", &self.shared.config)
            .field("pending", &lock(&self.shared.pending).len())
            .finish_non_exhaustive()
    }
}

impl ControlServer {
    /// A server over `backend` with `config`.
    #[must_use]
    pub fn new(backend: Arc<dyn ControlBackend>, config: ControlConfig) -> Self {
        let (stop, _) = watch::channel(false);
        Self {
            shared: Arc::new(Shared {
                backend,
                config,
                next_ticket: AtomicU64::new(1),
                pending: Mutex::new(BTreeMap::new()),
                issued: Mutex::new(BTreeMap::new()),
                stop,
            }),
        }
    }

    /// Serves `listener` as `endpoint` until [`ControlServer::shutdown`]. Spawns a task.
    pub fn serve(
        &self,
        listener: ControlListener,
        endpoint: Endpoint,
    ) -> tokio::task::JoinHandle<()> {
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move { accept_loop(shared, listener, endpoint).await })
    }

    /// The actions waiting for approval.
    #[must_use]
    pub fn pending(&self) -> Vec<PendingAction> {
        lock(&self.shared.pending)
            .values()
            .map(|p| p.action.clone())
            .collect()
    }

    /// Approves (`true`) or denies a pending action. Returns false for an unknown ticket.
    pub fn resolve(&self, ticket: u64, approve: bool) -> bool {
        resolve(&self.shared, ticket, approve)
    }

    /// Decides an outward action a relay is about to carry out, exactly as
    /// a worker's `outward` request is decided: the backend's policy, held
    /// for the host's approval on an `ask` (listed by `pending` with
    /// `via`), denied on timeout or shutdown; recorded through
    /// [`ControlBackend::relay_outward_settled`]. Report what happened to
    /// an allowed one with [`ControlServer::relay_executed`].
    pub async fn request_outward(&self, action: &OutwardAction) -> OutwardAnswer {
        let answer = outward(
            &self.shared,
            &action.kind,
            &action.target,
            action.via.as_deref(),
        )
        .await;
        self.shared.backend.relay_outward_settled(action, &answer);
        lock(&self.shared.issued).insert(
            answer.ticket,
            Issued {
                kind: action.kind.clone(),
                target: action.target.clone(),
                allowed: answer.decision == AskAnswer::Allow,
                executed: false,
                relay: true,
            },
        );
        answer
    }

    /// The policy's answer for `action` now, without asking anyone and
    /// without a record (a relay's all-or-nothing pre-check).
    #[must_use]
    pub fn outward_policy(&self, action: &OutwardAction) -> PolicyAnswer {
        self.shared
            .backend
            .decide_outward(&action.kind, &action.target)
    }

    /// Refuses `action` without asking, because `reason` (another ref
    /// update of the same push was refused): a ticket, a `deny` answer,
    /// recorded through [`ControlBackend::relay_outward_settled`].
    pub fn refuse_outward(&self, action: &OutwardAction, reason: &str) -> OutwardAnswer {
        let ticket = self.shared.next_ticket.fetch_add(1, Ordering::Relaxed);
        let policy = self
            .shared
            .backend
            .decide_outward(&action.kind, &action.target);
        let answer = OutwardAnswer {
            ticket,
            decision: AskAnswer::Deny,
            policy: policy.verdict,
            approval: None,
            rule: policy.rule,
            reason: reason.to_owned(),
        };
        self.shared.backend.relay_outward_settled(action, &answer);
        answer
    }

    /// A relay carried out the allowed action of `ticket`: recorded once
    /// through [`ControlBackend::relay_outward_executed`]. `false` for a
    /// ticket that is unknown, was not allowed or was already reported.
    pub fn relay_executed(
        &self,
        ticket: u64,
        action: &OutwardAction,
        result: &OutwardResult,
    ) -> bool {
        let ok = {
            let mut issued = lock(&self.shared.issued);
            match issued.get_mut(&ticket) {
                Some(i) if i.relay && i.allowed && !i.executed => {
                    i.executed = true;
                    true
                }
                _ => false,
            }
        };
        if ok {
            self.shared
                .backend
                .relay_outward_executed(ticket, action, result);
        }
        ok
    }

    /// Stops accepting, and denies every pending action as cancelled.
    pub fn shutdown(&self) {
        self.shared.stop.send_replace(true);
        let drained: Vec<PendingEntry> = {
            let mut p = lock(&self.shared.pending);
            std::mem::take(&mut *p).into_values().collect()
        };
        for entry in drained {
            let _ = entry.reply.send(Approval::Cancelled);
        }
    }
}

fn resolve(shared: &Shared, ticket: u64, approve: bool) -> bool {
    let entry = lock(&shared.pending).remove(&ticket);
    match entry {
        Some(e) => {
            let answer = if approve {
                Approval::Approved
            } else {
                Approval::Denied
            };
            // The waiter may have timed out in between; that settles it as a deny.
            e.reply.send(answer).is_ok()
        }
        None => false,
    }
}

async fn accept_loop(shared: Arc<Shared>, listener: ControlListener, endpoint: Endpoint) {
    let limit = Arc::new(Semaphore::new(shared.config.max_connections.max(1)));
    let mut stop = shared.stop.subscribe();
    loop {
        if *stop.borrow() {
            break;
        }
        let Ok(permit) = Arc::clone(&limit).acquire_owned().await else {
            break;
        };
        let shared2 = Arc::clone(&shared);
        match &listener {
            ControlListener::Unix(l, _) => {
                let accepted = tokio::select! {
                    r = l.accept() => r,
                    _ = stop.changed() => break,
                };
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(async move {
                        connection(shared2, stream, endpoint).await;
                        drop(permit);
                    });
                }
            }
            ControlListener::Tcp(l) => {
                let accepted = tokio::select! {
                    r = l.accept() => r,
                    _ = stop.changed() => break,
                };
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(async move {
                        connection(shared2, stream, endpoint).await;
                        drop(permit);
                    });
                }
            }
        }
    }
    if let ControlListener::Unix(_, path) = &listener {
        let _ = std::fs::remove_file(path);
    }
}

/// Reads one line of at most [`MAX_LINE_BYTES`]. `Ok(None)` at end of stream.
async fn read_line<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Result<(), ProtocolError>>> {
    buf.clear();
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if buf.is_empty() {
                None
            } else {
                // A final line without newline is still a request.
                Some(Ok(()))
            });
        }
        let (used, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i.saturating_add(1), true),
            None => (chunk.len(), false),
        };
        let take = chunk.get(..used).unwrap_or_default();
        buf.extend_from_slice(take);
        reader.consume(used);
        if done {
            buf.pop();
            if buf.len() > MAX_LINE_BYTES {
                return Ok(Some(Err(ProtocolError::LineTooLong)));
            }
            return Ok(Some(Ok(())));
        }
        if buf.len() > MAX_LINE_BYTES {
            return Ok(Some(Err(ProtocolError::LineTooLong)));
        }
    }
}

async fn connection<S: AsyncRead + AsyncWrite + Unpin>(
    shared: Arc<Shared>,
    stream: S,
    endpoint: Endpoint,
) {
    let (rd, mut wr) = tokio::io::split(stream);
    let mut reader = BufReader::with_capacity(4096, rd);
    let mut buf = Vec::with_capacity(256);
    let mut stop = shared.stop.subscribe();
    loop {
        let read = tokio::select! {
            r = tokio::time::timeout(shared.config.idle_timeout, read_line(&mut reader, &mut buf)) => r,
            _ = stop.changed() => return,
        };
        let line = match read {
            Err(_) | Ok(Err(_)) | Ok(Ok(None)) => return,
            Ok(Ok(Some(line))) => line,
        };
        let (response, close) = match line.and_then(|()| parse_request(&buf)) {
            Err(e) => (
                Response::error(e.code(), e.to_string()),
                matches!(e, ProtocolError::LineTooLong | ProtocolError::NotUtf8),
            ),
            Ok(req) => (handle(&shared, endpoint, req).await, false),
        };
        if wr.write_all(response.to_line().as_bytes()).await.is_err() || wr.flush().await.is_err() {
            return;
        }
        if close {
            return;
        }
    }
}

async fn handle(shared: &Arc<Shared>, endpoint: Endpoint, req: Request) -> Response {
    if endpoint == Endpoint::Worker && req.host_only() {
        let e = ProtocolError::HostOnly(req.op());
        return Response::error(e.code(), e.to_string());
    }
    shared.backend.before_request(endpoint, req.op());
    match req {
        Request::State => Response::with_state(shared.backend.state()),
        Request::Taint { source, detail } => {
            Response::with_state(shared.backend.taint(source, &detail))
        }
        Request::Pending => Response {
            pending: Some(
                lock(&shared.pending)
                    .values()
                    .map(|p| p.action.clone())
                    .collect(),
            ),
            ..Response::ok()
        },
        Request::Checkpoint => match shared.backend.checkpoint() {
            Ok(summary) => Response {
                checkpoint: Some(summary),
                ..Response::ok()
            },
            Err(why) => Response::error("checkpoint_unavailable", why),
        },
        Request::Resolve { ticket, approve } => {
            if resolve(shared, ticket, approve) {
                Response::ok()
            } else {
                Response::error(
                    "unknown_ticket",
                    format!("no pending action with ticket {ticket}"),
                )
            }
        }
        Request::Executed { ticket, status } => {
            let found = {
                let mut issued = lock(&shared.issued);
                match issued.get_mut(&ticket) {
                    Some(i) if i.relay => Err("belongs to a relay, which reports it itself"),
                    Some(i) if i.allowed && !i.executed => {
                        i.executed = true;
                        Ok(i.clone())
                    }
                    Some(i) if i.executed => Err("already reported as executed"),
                    Some(_) => Err("was not allowed"),
                    None => Err("is unknown"),
                }
            };
            match found {
                Ok(i) => {
                    shared
                        .backend
                        .outward_executed(ticket, &i.kind, &i.target, status);
                    Response::ok()
                }
                Err(why) => Response::error("unknown_ticket", format!("ticket {ticket} {why}")),
            }
        }
        Request::Outward { kind, target } => {
            let answer = outward(shared, &kind, &target, None).await;
            shared.backend.outward_settled(&kind, &target, &answer);
            lock(&shared.issued).insert(
                answer.ticket,
                Issued {
                    kind,
                    target,
                    allowed: answer.decision == AskAnswer::Allow,
                    executed: false,
                    relay: false,
                },
            );
            Response {
                outward: Some(answer),
                ..Response::ok()
            }
        }
    }
}

async fn outward(
    shared: &Arc<Shared>,
    kind: &str,
    target: &str,
    via: Option<&str>,
) -> OutwardAnswer {
    let ticket = shared.next_ticket.fetch_add(1, Ordering::Relaxed);
    let policy = shared.backend.decide_outward(kind, target);
    let mut answer = OutwardAnswer {
        ticket,
        decision: policy.verdict,
        policy: policy.verdict,
        approval: None,
        rule: policy.rule,
        reason: policy.reason,
    };
    if policy.verdict != AskAnswer::Ask {
        return answer;
    }
    let (tx, rx) = oneshot::channel();
    let action = PendingAction {
        ticket,
        kind: kind.to_owned(),
        target: target.to_owned(),
        reason: answer.reason.clone(),
        tainted: shared.backend.state().tainted,
        via: via.map(str::to_owned),
    };
    if *shared.stop.borrow() {
        answer.decision = AskAnswer::Deny;
        answer.approval = Some(Approval::Cancelled);
        return answer;
    }
    lock(&shared.pending).insert(
        ticket,
        PendingEntry {
            action: action.clone(),
            reply: tx,
        },
    );
    shared.backend.outward_pending(&action);
    let settled = match tokio::time::timeout(shared.config.approval_timeout, rx).await {
        Ok(Ok(a)) => a,
        Ok(Err(_)) => Approval::Cancelled,
        Err(_) => {
            lock(&shared.pending).remove(&ticket);
            Approval::TimedOut
        }
    };
    answer.approval = Some(settled);
    answer.decision = if settled == Approval::Approved {
        AskAnswer::Allow
    } else {
        AskAnswer::Deny
    };
    answer.reason = match settled {
        Approval::Approved => format!("approved by the host ({})", answer.reason),
        Approval::Denied => format!("denied by the host ({})", answer.reason),
        Approval::TimedOut => format!("approval timed out ({})", answer.reason),
        Approval::Cancelled => format!("session ended before approval ({})", answer.reason),
    };
    answer
}
