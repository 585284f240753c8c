//! The record model: kinds, flags, canonical JSON bodies and the entry a
//! caller appends.

use std::fmt;

use serde::Serialize;
use serde_json::Value;

/// Longest accepted record kind, in bytes.
pub const MAX_KIND_LEN: usize = 64;
/// Longest accepted session id, in bytes.
pub const MAX_SESSION_LEN: usize = 256;
/// Largest accepted canonical body, in bytes.
pub const MAX_BODY_LEN: usize = 1 << 20;
/// Deepest accepted nesting of arrays and objects in a body (the verifier
/// checks every body is JSON under serde_json's limit of 127 levels; a body
/// it could not check is never written).
pub const MAX_BODY_DEPTH: usize = 100;

/// What a record is about. The listed kinds are palisade's own; callers may
/// add theirs with [`Kind::custom`].
///
/// A kind is 1 to 64 bytes of `a-z`, `0-9`, `_`, `.`, `:` and `-`, so it is
/// written into the journal without any escaping.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// A worker execution started.
    ExecutionStarted,
    /// A tool policy was applied to a session.
    ToolPolicyApplied,
    /// The sandbox status (full, partial, none) of a run.
    SandboxStatus,
    /// An egress connection attempt and its decision.
    EgressConnection,
    /// A request through a host relay.
    RelayRequest,
    /// An outward action (push, post, mail, payment).
    OutwardAction,
    /// A session became tainted.
    TaintRaised,
    /// A flagged write to steering files.
    SteeringWrite,
    /// A staged change applied to the host tree by a commit (root, path,
    /// change kind, before and after digests).
    CommitApplied,
    /// A staged change the commit filter refused and quarantined (root,
    /// path, rule, quarantine path).
    CommitRefused,
    /// A staged change left in the stage because its host path changed
    /// since the stage was created (root, path, detail).
    CommitConflict,
    /// A read-only look at a stage's change set while the worker ran
    /// (counts per kind, refused paths, a digest of the list).
    StageCheckpoint,
    /// A policy was loaded.
    PolicyLoaded,
    /// Written by the journal: the first record, carrying the seal policy.
    JournalOpened,
    /// Written by the journal: closes an epoch.
    EpochSealed,
    /// Written by the journal: a torn final line was cut after a crash.
    RecoveredTornTail,
    /// Written by the journal: the clean end; also seals the last epoch.
    JournalClosed,
    /// A caller's own kind, made by [`Kind::custom`] or [`Kind::parse`]
    /// (a [`CustomKind`] cannot be built any other way, so it is always a
    /// valid name and never one of the listed kinds).
    Custom(CustomKind),
}

/// The name of a caller's own record kind: 1 to 64 bytes of `a-z`, `0-9`,
/// `_`, `.`, `:` and `-`, other than the names of the listed kinds.
///
/// Only [`Kind::custom`] and [`Kind::parse`] make one, after checking the
/// name, so an invalid or reserved name is refused where it is written, not
/// later when the record is submitted:
///
/// ```
/// use palisade_evidence::Kind;
/// assert_eq!(Kind::custom("deploy.approved")?.as_str(), "deploy.approved");
/// assert!(Kind::custom("Deploy Approved").is_err());
/// # Ok::<(), palisade_evidence::RecordError>(())
/// ```
///
/// and there is no way around the check:
///
/// ```compile_fail
/// let kind = palisade_evidence::Kind::Custom("not\"checked".to_owned());
/// ```
///
/// ```compile_fail
/// let name = palisade_evidence::CustomKind("not\"checked".to_owned());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CustomKind(String);

impl CustomKind {
    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CustomKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Kind {
    /// A caller's own kind. A name that is one of the listed kinds gives
    /// that kind (`Kind::custom("taint_raised")` is [`Kind::TaintRaised`]).
    ///
    /// # Errors
    /// Fails when the name has a character outside `a-z0-9_.:-`, is empty or
    /// longer than 64 bytes ([`RecordError::InvalidKind`]).
    pub fn custom(name: &str) -> Result<Self, RecordError> {
        Self::parse(name)
    }

    /// The kind for `name`: a listed kind when it matches one, else custom.
    ///
    /// # Errors
    /// As [`Kind::custom`].
    pub fn parse(name: &str) -> Result<Self, RecordError> {
        if !is_valid_kind(name.as_bytes()) {
            return Err(RecordError::InvalidKind {
                kind: name.chars().take(MAX_KIND_LEN).collect(),
            });
        }
        Ok(Self::from_valid(name))
    }

    /// The wire name of this kind.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            Self::ExecutionStarted => "execution_started",
            Self::ToolPolicyApplied => "tool_policy_applied",
            Self::SandboxStatus => "sandbox_status",
            Self::EgressConnection => "egress_connection",
            Self::RelayRequest => "relay_request",
            Self::OutwardAction => "outward_action",
            Self::TaintRaised => "taint_raised",
            Self::SteeringWrite => "steering_write",
            Self::CommitApplied => "commit_applied",
            Self::CommitRefused => "commit_refused",
            Self::CommitConflict => "commit_conflict",
            Self::StageCheckpoint => "stage_checkpoint",
            Self::PolicyLoaded => "policy_loaded",
            Self::JournalOpened => "journal_opened",
            Self::EpochSealed => "epoch_sealed",
            Self::RecoveredTornTail => "recovered_torn_tail",
            Self::JournalClosed => "journal_closed",
            Self::Custom(name) => name.as_str(),
        }
    }

    /// Whether only the journal itself may write this kind.
    #[must_use]
    pub fn is_reserved(&self) -> bool {
        matches!(
            self,
            Self::JournalOpened | Self::EpochSealed | Self::RecoveredTornTail | Self::JournalClosed
        )
    }

    /// Maps an already validated name to its kind.
    pub(crate) fn from_valid(name: &str) -> Self {
        match name {
            "execution_started" => Self::ExecutionStarted,
            "tool_policy_applied" => Self::ToolPolicyApplied,
            "sandbox_status" => Self::SandboxStatus,
            "egress_connection" => Self::EgressConnection,
            "relay_request" => Self::RelayRequest,
            "outward_action" => Self::OutwardAction,
            "taint_raised" => Self::TaintRaised,
            "steering_write" => Self::SteeringWrite,
            "commit_applied" => Self::CommitApplied,
            "commit_refused" => Self::CommitRefused,
            "commit_conflict" => Self::CommitConflict,
            "stage_checkpoint" => Self::StageCheckpoint,
            "policy_loaded" => Self::PolicyLoaded,
            "journal_opened" => Self::JournalOpened,
            "epoch_sealed" => Self::EpochSealed,
            "recovered_torn_tail" => Self::RecoveredTornTail,
            "journal_closed" => Self::JournalClosed,
            other => Self::Custom(CustomKind(other.to_owned())),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether `name` is a well-formed kind.
pub(crate) fn is_valid_kind(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= MAX_KIND_LEN
        && name
            .iter()
            .all(|&b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b':' | b'-'))
}

/// Flags a record carries, written as a sorted JSON array of names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(u8);

impl Flags {
    /// No flag.
    pub const NONE: Self = Self(0);
    /// The action cannot be undone (it completed before any abort).
    pub const IRREVERSIBLE: Self = Self(1);
    /// The session was tainted when the record was written.
    pub const TAINTED: Self = Self(2);
    /// The record was flagged for review (e.g. a steering write).
    pub const FLAGGED: Self = Self(4);

    /// Both sets of flags.
    #[must_use]
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether every flag of `other` is set.
    #[must_use]
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The names of the set flags, sorted.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        FLAG_NAMES
            .iter()
            .filter(move |(flag, _)| self.contains(*flag))
            .map(|(_, name)| *name)
    }

    /// The flag named `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        FLAG_NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(flag, _)| *flag)
    }
}

impl std::ops::BitOr for Flags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

/// Flag names in the order they are written (sorted by name).
const FLAG_NAMES: [(Flags, &str); 3] = [
    (Flags::FLAGGED, "flagged"),
    (Flags::IRREVERSIBLE, "irreversible"),
    (Flags::TAINTED, "tainted"),
];

/// A record body: a JSON value in canonical form.
///
/// Canonical form is serde_json's compact output with the keys of every
/// object sorted by their UTF-8 bytes; strings use serde_json's escaping, so
/// a body never contains a raw newline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body(String);

impl Body {
    /// The empty object `{}`.
    #[must_use]
    pub fn empty() -> Self {
        Self("{}".to_owned())
    }

    /// The canonical form of any serializable value.
    ///
    /// Credential values cannot get here: [`crate::Secret`] has no
    /// `Serialize`.
    ///
    /// # Errors
    /// Fails when the value does not serialize to JSON or its canonical form
    /// exceeds 1 MiB.
    pub fn from_serialize<T: Serialize + ?Sized>(value: &T) -> Result<Self, RecordError> {
        let value =
            serde_json::to_value(value).map_err(|err| RecordError::Body(err.to_string()))?;
        Self::from_value(&value)
    }

    /// The canonical form of a JSON value.
    ///
    /// # Errors
    /// Fails when the canonical form exceeds 1 MiB.
    pub fn from_value(value: &Value) -> Result<Self, RecordError> {
        let mut out = String::new();
        write_canonical(value, &mut out, MAX_BODY_DEPTH)?;
        if out.len() > MAX_BODY_LEN {
            return Err(RecordError::BodyTooLarge { len: out.len() });
        }
        Ok(Self(out))
    }

    /// Parses JSON text (e.g. from the command line) into its canonical form.
    ///
    /// # Errors
    /// Fails when the text is not JSON or is too large.
    pub fn from_json_text(text: &str) -> Result<Self, RecordError> {
        if text.len() > MAX_BODY_LEN {
            return Err(RecordError::BodyTooLarge { len: text.len() });
        }
        let value: Value =
            serde_json::from_str(text).map_err(|err| RecordError::Body(err.to_string()))?;
        Self::from_value(&value)
    }

    /// The canonical JSON text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Milliseconds since the Unix epoch, as passed in by the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The time `ms` milliseconds after the Unix epoch.
    #[must_use]
    pub const fn from_unix_millis(ms: u64) -> Self {
        Self(ms)
    }

    /// Milliseconds since the Unix epoch.
    #[must_use]
    pub const fn as_unix_millis(self) -> u64 {
        self.0
    }
}

/// What a caller appends; the journal adds `seq`, `epoch`, the journal id
/// and the MAC. Made with [`Entry::new`] (and [`Entry::with_flags`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Entry {
    /// When it happened (the journal never reads a clock).
    pub time: Timestamp,
    /// The session it belongs to (at most 256 bytes; any text).
    pub session: String,
    /// What it is.
    pub kind: Kind,
    /// Flags such as [`Flags::IRREVERSIBLE`].
    pub flags: Flags,
    /// The details.
    pub body: Body,
}

impl Entry {
    /// An entry without flags.
    #[must_use]
    pub fn new(time: Timestamp, session: impl Into<String>, kind: Kind, body: Body) -> Self {
        Self {
            time,
            session: session.into(),
            kind,
            flags: Flags::NONE,
            body,
        }
    }

    /// The same entry with `flags` added.
    #[must_use]
    pub fn with_flags(mut self, flags: Flags) -> Self {
        self.flags = self.flags | flags;
        self
    }
}

/// Errors from building a record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The kind has a bad character or length.
    #[error("invalid record kind `{kind}`: use 1 to 64 of a-z 0-9 _ . : -")]
    InvalidKind {
        /// The offending kind, shortened.
        kind: String,
    },
    /// Only the journal writes this kind.
    #[error("record kind `{kind}` is written by the journal itself")]
    ReservedKind {
        /// The reserved kind.
        kind: String,
    },
    /// The session id is too long.
    #[error("session id is {len} bytes, more than the 256 allowed")]
    SessionTooLong {
        /// Its length.
        len: usize,
    },
    /// The body is not valid JSON.
    #[error("record body: {0}")]
    Body(String),
    /// The body is too large.
    #[error("record body is {len} bytes, more than the 1 MiB allowed")]
    BodyTooLarge {
        /// Its length.
        len: usize,
    },
}

/// Writes `value` in canonical form.
fn write_canonical(value: &Value, out: &mut String, depth: usize) -> Result<(), RecordError> {
    if matches!(value, Value::Object(_) | Value::Array(_)) && depth == 0 {
        return Err(RecordError::Body(format!(
            "the body nests arrays and objects deeper than {MAX_BODY_DEPTH} levels"
        )));
    }
    let inner = depth.saturating_sub(1);
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (idx, (key, val)) in entries.into_iter().enumerate() {
                if idx > 0 {
                    out.push(',');
                }
                push_json_string(key, out)?;
                out.push(':');
                write_canonical(val, out, inner)?;
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (idx, item) in items.iter().enumerate() {
                if idx > 0 {
                    out.push(',');
                }
                write_canonical(item, out, inner)?;
            }
            out.push(']');
        }
        Value::String(s) => push_json_string(s, out)?,
        other => {
            let text =
                serde_json::to_string(other).map_err(|e| RecordError::Body(e.to_string()))?;
            out.push_str(&text);
        }
    }
    if out.len() > MAX_BODY_LEN {
        return Err(RecordError::BodyTooLarge { len: out.len() });
    }
    Ok(())
}

/// Appends `s` as a JSON string literal (serde_json escaping).
pub(crate) fn push_json_string(s: &str, out: &mut String) -> Result<(), RecordError> {
    let text = serde_json::to_string(s).map_err(|e| RecordError::Body(e.to_string()))?;
    out.push_str(&text);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_body_sorts_keys_recursively_and_is_compact() {
        let value = serde_json::json!({"b": 1, "a": {"z": [true, null, "x\ny"], "c": 2.5}});
        let body = Body::from_value(&value).unwrap();
        assert_eq!(
            body.as_str(),
            r#"{"a":{"c":2.5,"z":[true,null,"x\ny"]},"b":1}"#
        );
        let again =
            Body::from_json_text(r#"{ "b" : 1, "a": {"c": 2.5, "z": [true, null, "x\ny"]}}"#)
                .unwrap();
        assert_eq!(body, again);
    }

    #[test]
    fn kinds_round_trip_and_reject_bad_names() {
        for name in ["egress_connection", "journal_closed", "my.own:kind-1"] {
            assert_eq!(Kind::parse(name).unwrap().as_str(), name);
        }
        assert_eq!(Kind::parse("taint_raised").unwrap(), Kind::TaintRaised);
        for bad in ["", "Upper", "with space", "quote\"", &"a".repeat(65)] {
            assert!(Kind::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Kind::JournalClosed.is_reserved());
        assert!(!Kind::OutwardAction.is_reserved());
        // The staged-writes kinds are listed kinds, not custom ones, and a
        // caller may write them.
        for (name, kind) in [
            ("commit_applied", Kind::CommitApplied),
            ("commit_refused", Kind::CommitRefused),
            ("commit_conflict", Kind::CommitConflict),
            ("stage_checkpoint", Kind::StageCheckpoint),
        ] {
            assert_eq!(Kind::parse(name).unwrap(), kind, "{name}");
            assert_eq!(kind.as_str(), name);
            assert!(!kind.is_reserved(), "{name}");
        }
        // Positive control: an unlisted name stays custom.
        assert!(matches!(
            Kind::parse("commit_other").unwrap(),
            Kind::Custom(_)
        ));
    }

    #[test]
    fn flags_are_named_in_sorted_order() {
        let flags = Flags::TAINTED | Flags::IRREVERSIBLE;
        assert_eq!(
            flags.names().collect::<Vec<_>>(),
            ["irreversible", "tainted"]
        );
        assert_eq!(Flags::from_name("flagged"), Some(Flags::FLAGGED));
        assert_eq!(Flags::from_name("nope"), None);
    }

    #[test]
    fn a_body_nested_deeper_than_the_verifier_checks_is_refused() {
        let nest = |levels: usize| {
            let mut v = Value::Null;
            for _ in 0..levels {
                v = Value::Array(vec![v]);
            }
            v
        };
        assert!(Body::from_value(&nest(MAX_BODY_DEPTH)).is_ok());
        let err = Body::from_value(&nest(MAX_BODY_DEPTH + 1)).unwrap_err();
        assert!(err.to_string().contains("deeper than 100"), "{err}");
        assert!(Body::from_value(&nest(1_000)).is_err());
    }

    #[test]
    fn oversized_body_is_refused() {
        let big = "x".repeat(MAX_BODY_LEN);
        assert!(matches!(
            Body::from_value(&Value::String(big)),
            Err(RecordError::BodyTooLarge { .. })
        ));
        assert!(Body::from_value(&Value::String("x".repeat(100))).is_ok());
    }
}
