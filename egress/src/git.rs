//! Git smart HTTP, as a `kind = "git"` relay needs it: the pure, bounded,
//! incremental parsers of what a push sends (`pktline`: the receive-pack
//! command list, capabilities and push options; `pack`: the pack stream,
//! enough to prove a ref update a fast-forward from the commits it carries)
//! and the `report-status` the relay answers with when it refuses a push
//! (`report`), or reads from the origin to record each ref's result.
//!
//! Nothing here does IO; every parser is fuzzed (`egress_git_push`,
//! `egress_git_pack`, `egress_git_report`) and never panics, hangs or
//! allocates without bound on hostile input.

pub mod pack;
pub mod pktline;
pub mod report;

/// A git object id: 20 bytes (SHA-1) or 32 (SHA-256), as lowercase hex.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId(String);

impl ObjectId {
    /// Parses 40 or 64 lowercase hex digits.
    pub fn parse(hex: &str) -> Option<Self> {
        let ok = (hex.len() == 40 || hex.len() == 64)
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| Self(hex.to_owned()))
    }

    /// The id of raw hash bytes (20 or 32 of them).
    pub fn from_bytes(raw: &[u8]) -> Option<Self> {
        if raw.len() != 20 && raw.len() != 32 {
            return None;
        }
        let mut s = String::with_capacity(raw.len() * 2);
        for b in raw {
            for nibble in [b >> 4, b & 15] {
                s.push(char::from(
                    HEX.get(usize::from(nibble)).copied().unwrap_or(b'0'),
                ));
            }
        }
        Some(Self(s))
    }

    /// Whether this is the all-zero id (a create's old id, a delete's new id).
    pub fn is_zero(&self) -> bool {
        self.0.bytes().all(|b| b == b'0')
    }

    /// The hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl std::fmt::Display for ObjectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a push could not be read; the relay refuses it whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GitError {
    /// A pkt-line length that is not 4 hex digits, or out of range.
    #[error("bad pkt-line length at byte {0}")]
    PktLength(usize),
    /// A command line that is not `OLD NEW REF`.
    #[error("bad ref update command: {0}")]
    Command(String),
    /// More ref updates, push options or bytes of command list than allowed.
    #[error("push too large: {0}")]
    TooLarge(&'static str),
    /// The pack stream is malformed.
    #[error("bad pack: {0}")]
    Pack(String),
    /// The stream ended early.
    #[error("truncated {0}")]
    Truncated(&'static str),
}
