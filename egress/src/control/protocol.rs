//! The wire format of the control channel: one JSON object per line.
//!
//! Every request and every response carries `"v": 1`. Parsing is strict:
//! unknown fields, unknown operations, a missing or different version,
//! overlong lines, invalid UTF-8, control characters in strings and empty
//! identifiers are refused with a [`ProtocolError`] that names the problem.

use serde::{Deserialize, Serialize};

/// The protocol version this module speaks. A request with any other `v` is refused.
pub const PROTOCOL_VERSION: u32 = 1;

/// Longest accepted line, newline excluded. Longer lines are refused and the
/// connection is closed, so a client cannot make the server buffer without bound.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// Longest accepted `detail`, `kind` or `target` field, in bytes.
pub const MAX_FIELD_BYTES: usize = 4096;

/// Where a taint source came from, as the worker reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaintKind {
    /// A web page, search result or other web tool output.
    Web,
    /// Content read from an inbox (mail, issues, shares).
    Inbox,
    /// The result of an external MCP tool.
    Mcp,
    /// A file the user marked untrusted.
    MarkedFile,
}

impl TaintKind {
    /// The stable lower-case name used on the wire and in records.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Web => "web",
            Self::Inbox => "inbox",
            Self::Mcp => "mcp",
            Self::MarkedFile => "marked_file",
        }
    }

    /// Parses the stable name back (for command-line arguments).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "web" => Some(Self::Web),
            "inbox" => Some(Self::Inbox),
            "mcp" => Some(Self::Mcp),
            "marked_file" | "marked-file" => Some(Self::MarkedFile),
            _ => None,
        }
    }
}

/// One request, after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Report that the worker ingested untrusted content. Taint is sticky.
    Taint {
        /// What kind of source it was.
        source: TaintKind,
        /// A short description (URL, path, tool name); never content.
        detail: String,
    },
    /// Ask whether an outward action may happen. An `ask` answer blocks until
    /// the host approves or denies, or the approval times out (deny).
    Outward {
        /// Action kind, e.g. `git.push`, `github.post`, `mail.send`.
        kind: String,
        /// Action target, e.g. `github.com/acme/app:refs/heads/main`.
        target: String,
    },
    /// Report that an allowed outward action was executed (it is irreversible now).
    Executed {
        /// The ticket returned with the allow answer.
        ticket: u64,
        /// Exit status of the command that carried out the action, when known.
        status: Option<i32>,
    },
    /// Query the session state.
    State,
    /// Host only: list the outward actions waiting for approval.
    Pending,
    /// Host only: approve or deny a pending outward action.
    Resolve {
        /// The pending ticket.
        ticket: u64,
        /// `true` approves, `false` denies.
        approve: bool,
    },
    /// Host only: compute the staged change set while the worker runs (read
    /// only), record it and return its summary.
    Checkpoint,
}

impl Request {
    /// Whether only the host endpoint may send this request.
    #[must_use]
    pub fn host_only(&self) -> bool {
        matches!(
            self,
            Self::Pending | Self::Resolve { .. } | Self::Checkpoint
        )
    }

    /// The stable operation name.
    #[must_use]
    pub fn op(&self) -> &'static str {
        match self {
            Self::Taint { .. } => "taint",
            Self::Outward { .. } => "outward",
            Self::Executed { .. } => "executed",
            Self::State => "state",
            Self::Pending => "pending",
            Self::Resolve { .. } => "resolve",
            Self::Checkpoint => "checkpoint",
        }
    }

    /// Serializes the request as one line (newline included).
    #[must_use]
    pub fn to_line(&self) -> String {
        let wire = match self {
            Self::Taint { source, detail } => WireRequest {
                op: "taint".into(),
                source: Some(*source),
                detail: Some(detail.clone()),
                ..WireRequest::new()
            },
            Self::Outward { kind, target } => WireRequest {
                op: "outward".into(),
                kind: Some(kind.clone()),
                target: Some(target.clone()),
                ..WireRequest::new()
            },
            Self::Executed { ticket, status } => WireRequest {
                op: "executed".into(),
                ticket: Some(*ticket),
                status: *status,
                ..WireRequest::new()
            },
            Self::State => WireRequest {
                op: "state".into(),
                ..WireRequest::new()
            },
            Self::Pending => WireRequest {
                op: "pending".into(),
                ..WireRequest::new()
            },
            Self::Resolve { ticket, approve } => WireRequest {
                op: "resolve".into(),
                ticket: Some(*ticket),
                approve: Some(*approve),
                ..WireRequest::new()
            },
            Self::Checkpoint => WireRequest {
                op: "checkpoint".into(),
                ..WireRequest::new()
            },
        };
        to_line(&wire)
    }
}

/// The flat wire shape of a request; validated into [`Request`].
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRequest {
    v: u32,
    op: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<TaintKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ticket: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    approve: Option<bool>,
}

impl WireRequest {
    fn new() -> Self {
        Self {
            v: PROTOCOL_VERSION,
            op: String::new(),
            source: None,
            detail: None,
            kind: None,
            target: None,
            ticket: None,
            status: None,
            approve: None,
        }
    }
}

/// Why a request line was refused. The `code` is stable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The line is longer than [`MAX_LINE_BYTES`].
    #[error("request line longer than {MAX_LINE_BYTES} bytes")]
    LineTooLong,
    /// The line is not UTF-8.
    #[error("request line is not valid UTF-8")]
    NotUtf8,
    /// The line is not a JSON object of the expected shape.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// The version is not [`PROTOCOL_VERSION`].
    #[error("unsupported protocol version {0}, expected {PROTOCOL_VERSION}")]
    Version(u32),
    /// The operation is unknown.
    #[error("unknown operation `{0}`")]
    UnknownOp(String),
    /// A required field is missing.
    #[error("operation `{op}` requires field `{field}`")]
    Missing {
        /// The operation.
        op: &'static str,
        /// The missing field.
        field: &'static str,
    },
    /// A field is present that this operation does not take.
    #[error("operation `{op}` does not take field `{field}`")]
    Unexpected {
        /// The operation.
        op: &'static str,
        /// The extra field.
        field: &'static str,
    },
    /// A string field is empty, too long or contains control characters.
    #[error("field `{field}` {problem}")]
    BadField {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The request is valid but not allowed on this endpoint.
    #[error("operation `{0}` is only available on the host endpoint")]
    HostOnly(&'static str),
}

impl ProtocolError {
    /// The stable error code sent on the wire.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::LineTooLong => "line_too_long",
            Self::NotUtf8 => "not_utf8",
            Self::Malformed(_) => "malformed",
            Self::Version(_) => "unsupported_version",
            Self::UnknownOp(_) => "unknown_op",
            Self::Missing { .. } => "missing_field",
            Self::Unexpected { .. } => "unexpected_field",
            Self::BadField { .. } => "bad_field",
            Self::HostOnly(_) => "host_only",
        }
    }
}

fn check_text(field: &'static str, value: &str, allow_empty: bool) -> Result<(), ProtocolError> {
    if value.is_empty() && !allow_empty {
        return Err(ProtocolError::BadField {
            field,
            problem: "is empty",
        });
    }
    if value.len() > MAX_FIELD_BYTES {
        return Err(ProtocolError::BadField {
            field,
            problem: "is longer than 4096 bytes",
        });
    }
    if value.chars().any(char::is_control) {
        return Err(ProtocolError::BadField {
            field,
            problem: "contains control characters",
        });
    }
    Ok(())
}

fn take<T>(op: &'static str, field: &'static str, v: Option<T>) -> Result<T, ProtocolError> {
    v.ok_or(ProtocolError::Missing { op, field })
}

/// Parses one request line (without its newline). Never panics.
///
/// # Errors
/// A [`ProtocolError`] naming the first problem found.
pub fn parse_request(line: &[u8]) -> Result<Request, ProtocolError> {
    if line.len() > MAX_LINE_BYTES {
        return Err(ProtocolError::LineTooLong);
    }
    let text = std::str::from_utf8(line).map_err(|_| ProtocolError::NotUtf8)?;
    let text = text.strip_suffix('\r').unwrap_or(text);
    let wire: WireRequest =
        serde_json::from_str(text).map_err(|e| ProtocolError::Malformed(e.to_string()))?;
    if wire.v != PROTOCOL_VERSION {
        return Err(ProtocolError::Version(wire.v));
    }
    let op: &'static str = match wire.op.as_str() {
        "taint" => "taint",
        "outward" => "outward",
        "executed" => "executed",
        "state" => "state",
        "pending" => "pending",
        "resolve" => "resolve",
        "checkpoint" => "checkpoint",
        _ => {
            let mut shown = wire.op;
            shown.truncate(shown.floor_char_boundary(64));
            return Err(ProtocolError::UnknownOp(shown.escape_debug().to_string()));
        }
    };
    // Each operation lists the fields it takes; any other present field is refused.
    let present: [(&'static str, bool); 7] = [
        ("source", wire.source.is_some()),
        ("detail", wire.detail.is_some()),
        ("kind", wire.kind.is_some()),
        ("target", wire.target.is_some()),
        ("ticket", wire.ticket.is_some()),
        ("status", wire.status.is_some()),
        ("approve", wire.approve.is_some()),
    ];
    let allowed: &[&str] = match op {
        "taint" => &["source", "detail"],
        "outward" => &["kind", "target"],
        "executed" => &["ticket", "status"],
        "resolve" => &["ticket", "approve"],
        _ => &[],
    };
    if let Some((field, _)) = present
        .iter()
        .find(|(name, is)| *is && !allowed.contains(name))
    {
        return Err(ProtocolError::Unexpected { op, field });
    }
    let req = match op {
        "taint" => {
            let source = take(op, "source", wire.source)?;
            let detail = wire.detail.unwrap_or_default();
            check_text("detail", &detail, true)?;
            Request::Taint { source, detail }
        }
        "outward" => {
            let kind = take(op, "kind", wire.kind)?;
            let target = take(op, "target", wire.target)?;
            check_text("kind", &kind, false)?;
            check_text("target", &target, true)?;
            Request::Outward { kind, target }
        }
        "executed" => Request::Executed {
            ticket: take(op, "ticket", wire.ticket)?,
            status: wire.status,
        },
        "resolve" => Request::Resolve {
            ticket: take(op, "ticket", wire.ticket)?,
            approve: take(op, "approve", wire.approve)?,
        },
        "pending" => Request::Pending,
        "checkpoint" => Request::Checkpoint,
        _ => Request::State,
    };
    Ok(req)
}

/// The three answers a policy can give to an outward action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AskAnswer {
    /// The action may proceed.
    Allow,
    /// A human must approve first.
    Ask,
    /// The action must not happen.
    Deny,
}

impl AskAnswer {
    /// The stable lower-case name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Ask => "ask",
            Self::Deny => "deny",
        }
    }
}

/// How an `ask` was settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// The host approved it.
    Approved,
    /// The host denied it.
    Denied,
    /// Nobody answered in time; a timeout denies.
    TimedOut,
    /// The session ended while the request was pending.
    Cancelled,
}

/// The final answer to an outward request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutwardAnswer {
    /// Ticket of this request; quote it in `executed` and `resolve`.
    pub ticket: u64,
    /// The final decision: `allow` or `deny` (an `ask` is always settled first).
    pub decision: AskAnswer,
    /// What the policy said before any approval.
    pub policy: AskAnswer,
    /// How an `ask` was settled, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// The rule that matched, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// A human-readable reason.
    pub reason: String,
}

/// A pending outward action, as the host sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingAction {
    /// Ticket to approve or deny.
    pub ticket: u64,
    /// Action kind.
    pub kind: String,
    /// Action target.
    pub target: String,
    /// Why the policy asks.
    pub reason: String,
    /// Whether the session was tainted when it asked.
    pub tainted: bool,
    /// The relay that holds the request, when a relay asks (a worker's
    /// `outward` request has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

/// An outward action a relay is about to carry out for the worker: what
/// the relay asks the session about, and what the journal records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutwardAction {
    /// The kind (`git.push`, `github.post.comment`, …).
    pub kind: String,
    /// The target (`github.com/acme/app:refs/heads/agent/x`).
    pub target: String,
    /// The relay that carries it out; `None` for a worker's own request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// Facts for the record (`method`, `path`, `ref`, `old`, `new`); never
    /// a header value or a body.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub detail: std::collections::BTreeMap<String, String>,
}

impl OutwardAction {
    /// An action of `kind` on `target` carried out by relay `via`.
    pub fn new(kind: impl Into<String>, target: impl Into<String>, via: Option<&str>) -> Self {
        Self {
            kind: kind.into(),
            target: target.into(),
            via: via.map(str::to_owned),
            detail: std::collections::BTreeMap::new(),
        }
    }

    /// The same action with one more fact for the record.
    #[must_use]
    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.detail.insert(key.to_owned(), value.into());
        self
    }
}

/// How an allowed outward action ended, as the relay that carried it out
/// saw it (or the worker reported it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutwardResult {
    /// The exit status (`ctl outward -- CMD`) or the upstream HTTP status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<i32>,
    /// Facts for the record (`result: ok` or `ng <reason>` for a ref update).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub detail: std::collections::BTreeMap<String, String>,
}

/// One recorded taint source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaintEntry {
    /// Source kind (`web`, `inbox`, `mcp`, `marked_file`, or a host-side kind such as `proxy_non_relay`).
    pub source: String,
    /// Short description.
    pub detail: String,
    /// When it was reported (RFC 3339, UTC), as the host's clock saw it.
    pub at: String,
}

/// The session state a worker may see.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionView {
    /// Session id.
    pub session: String,
    /// Whether the session is tainted. Once true, it stays true.
    pub tainted: bool,
    /// When taint was first raised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tainted_at: Option<String>,
    /// Every taint source in order.
    #[serde(default)]
    pub sources: Vec<TaintEntry>,
    /// Hosts contacted so far (`host:port`).
    #[serde(default)]
    pub contacted: Vec<String>,
    /// Outward actions waiting for approval.
    #[serde(default)]
    pub pending: usize,
}

/// A response line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Response {
    /// Always [`PROTOCOL_VERSION`].
    pub v: u32,
    /// Whether the request was understood and handled.
    pub ok: bool,
    /// The state, for `state` and `taint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<SessionView>,
    /// The answer, for `outward`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outward: Option<OutwardAnswer>,
    /// The pending actions, for `pending`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Vec<PendingAction>>,
    /// The staged change set's summary, for `checkpoint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointSummary>,
    /// The failure, when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<WireError>,
}

/// Most refused paths a [`CheckpointSummary`] lists ([`CheckpointSummary::refused_total`]
/// counts them all), so that its line stays well under the response limit.
pub const MAX_CHECKPOINT_REFUSED: usize = 64;

/// The answer to `checkpoint`: the staged change set as it is now.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSummary {
    /// Changes in the set.
    pub changes: usize,
    /// Changes per kind (`created`, `modified`, `mode_changed`, `deleted`,
    /// `renamed`); kinds with no change are absent.
    pub counts: std::collections::BTreeMap<String, usize>,
    /// The changes the commit filter would refuse, at most
    /// [`MAX_CHECKPOINT_REFUSED`] of them.
    pub refused: Vec<CheckpointRefusal>,
    /// How many changes the filter would refuse in all.
    pub refused_total: usize,
    /// `sha256:<hex>` of the change list (root, kind, path of each change),
    /// as recorded in the journal's `stage_checkpoint` record.
    pub digest: String,
}

/// One change the commit filter would refuse, in a [`CheckpointSummary`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointRefusal {
    /// The writable root it is under (its host path).
    pub root: String,
    /// The path relative to the root.
    pub path: String,
    /// The filter rule's stable code.
    pub rule: String,
}

/// An error on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireError {
    /// Stable code, e.g. `malformed`, `line_too_long`, `host_only`, `unknown_ticket`.
    pub code: String,
    /// Human-readable message.
    pub message: String,
}

impl Response {
    /// A bare success.
    #[must_use]
    pub fn ok() -> Self {
        Self {
            v: PROTOCOL_VERSION,
            ok: true,
            state: None,
            outward: None,
            pending: None,
            checkpoint: None,
            error: None,
        }
    }

    /// A success carrying the session state.
    #[must_use]
    pub fn with_state(state: SessionView) -> Self {
        Self {
            state: Some(state),
            ..Self::ok()
        }
    }

    /// A failure with a stable code.
    #[must_use]
    pub fn error(code: &str, message: impl Into<String>) -> Self {
        Self {
            ok: false,
            error: Some(WireError {
                code: code.to_owned(),
                message: message.into(),
            }),
            ..Self::ok()
        }
    }

    /// Serializes the response as one line (newline included).
    #[must_use]
    pub fn to_line(&self) -> String {
        to_line(self)
    }

    /// Parses a response line strictly.
    ///
    /// # Errors
    /// [`ProtocolError`] when the line is too long, not UTF-8, malformed or of another version.
    pub fn parse(line: &[u8]) -> Result<Self, ProtocolError> {
        if line.len() > MAX_LINE_BYTES * 8 {
            return Err(ProtocolError::LineTooLong);
        }
        let text = std::str::from_utf8(line).map_err(|_| ProtocolError::NotUtf8)?;
        let resp: Self = serde_json::from_str(text.trim_end())
            .map_err(|e| ProtocolError::Malformed(e.to_string()))?;
        if resp.v != PROTOCOL_VERSION {
            return Err(ProtocolError::Version(resp.v));
        }
        Ok(resp)
    }
}

fn to_line<T: Serialize>(value: &T) -> String {
    // Serializing these plain structs cannot fail; fall back to a fixed error line anyway.
    let mut s = serde_json::to_string(value).unwrap_or_else(|_| {
        String::from(
            r#"{"v":1,"ok":false,"error":{"code":"internal","message":"serialization failed"}}"#,
        )
    });
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_round_trips() {
        let reqs = [
            Request::Taint {
                source: TaintKind::MarkedFile,
                detail: "notes/inbox.md".into(),
            },
            Request::Outward {
                kind: "git.push".into(),
                target: "github.com/acme/app:refs/heads/main".into(),
            },
            Request::Executed {
                ticket: 3,
                status: Some(0),
            },
            Request::State,
            Request::Pending,
            Request::Resolve {
                ticket: 9,
                approve: false,
            },
            Request::Checkpoint,
        ];
        for r in reqs {
            let line = r.to_line();
            assert!(line.ends_with('\n'));
            assert_eq!(parse_request(line.trim_end().as_bytes()), Ok(r));
        }
    }

    #[test]
    fn strict_parsing_refuses_with_stable_codes() {
        let cases: &[(&[u8], &str)] = &[
            (br#"{"v":2,"op":"state"}"#, "unsupported_version"),
            (br#"{"op":"state"}"#, "malformed"),
            (br#"{"v":1,"op":"stat"}"#, "unknown_op"),
            (br#"{"v":1,"op":"state","extra":1}"#, "malformed"),
            (br#"{"v":1,"op":"state","kind":"x"}"#, "unexpected_field"),
            (br#"{"v":1,"op":"taint"}"#, "missing_field"),
            (br#"{"v":1,"op":"taint","source":"email"}"#, "malformed"),
            (
                br#"{"v":1,"op":"outward","kind":"","target":"t"}"#,
                "bad_field",
            ),
            (
                br#"{"v":1,"op":"outward","kind":"git.push\u0007","target":"t"}"#,
                "bad_field",
            ),
            (
                br#"{"v":1,"op":"outward","kind":"git.push"}"#,
                "missing_field",
            ),
            (br#"{"v":1,"op":"resolve","ticket":1}"#, "missing_field"),
            (
                br#"{"v":1,"op":"checkpoint","ticket":1}"#,
                "unexpected_field",
            ),
            (br#"[1,2]"#, "malformed"),
            (b"\xff\xfe", "not_utf8"),
            (b"", "malformed"),
        ];
        for (line, code) in cases {
            let err = parse_request(line).expect_err("must refuse");
            assert_eq!(err.code(), *code, "{}", String::from_utf8_lossy(line));
        }
        // Positive control: the well-formed versions of the same requests parse.
        assert_eq!(
            parse_request(br#"{"v":1,"op":"state"}"#),
            Ok(Request::State)
        );
        assert!(parse_request(br#"{"v":1,"op":"taint","source":"web"}"#).is_ok());
    }

    #[test]
    fn overlong_lines_and_fields_are_refused() {
        let long = format!(
            r#"{{"v":1,"op":"taint","source":"web","detail":"{}"}}"#,
            "a".repeat(MAX_LINE_BYTES)
        );
        assert_eq!(
            parse_request(long.as_bytes()),
            Err(ProtocolError::LineTooLong)
        );
        let field = format!(
            r#"{{"v":1,"op":"taint","source":"web","detail":"{}"}}"#,
            "a".repeat(MAX_FIELD_BYTES + 1)
        );
        assert_eq!(
            parse_request(field.as_bytes()).map_err(|e| e.code()),
            Err("bad_field")
        );
        let fits = format!(
            r#"{{"v":1,"op":"taint","source":"web","detail":"{}"}}"#,
            "a".repeat(MAX_FIELD_BYTES)
        );
        assert!(parse_request(fits.as_bytes()).is_ok());
    }

    #[test]
    fn responses_round_trip() {
        let r = Response {
            outward: Some(OutwardAnswer {
                ticket: 1,
                decision: AskAnswer::Deny,
                policy: AskAnswer::Ask,
                approval: Some(Approval::TimedOut),
                rule: None,
                reason: "approval timed out".into(),
            }),
            ..Response::ok()
        };
        assert_eq!(Response::parse(r.to_line().as_bytes()), Ok(r));
        let e = Response::error("host_only", "no");
        assert_eq!(Response::parse(e.to_line().as_bytes()), Ok(e));
        let c = Response {
            checkpoint: Some(CheckpointSummary {
                changes: 2,
                counts: [("created".to_owned(), 2)].into_iter().collect(),
                refused: vec![CheckpointRefusal {
                    root: "/w".into(),
                    path: ".git/hooks/pre-commit".into(),
                    rule: "git_internal".into(),
                }],
                refused_total: 1,
                digest: "sha256:00".into(),
            }),
            ..Response::ok()
        };
        assert_eq!(Response::parse(c.to_line().as_bytes()), Ok(c));
    }
}
