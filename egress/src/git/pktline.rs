//! The receive-pack request head: pkt-lines of `OLD NEW REF`, the first
//! carrying `\0` and the capabilities, a flush, then (with the
//! `push-options` capability) option lines and a flush; the pack follows.

use super::{GitError, ObjectId};

/// Most ref updates in one push.
pub const MAX_UPDATES: usize = 4096;

/// Most push options in one push.
pub const MAX_PUSH_OPTIONS: usize = 256;

/// Most bytes of command list and push options together (1 MiB).
pub const MAX_HEAD_BYTES: usize = 1 << 20;

/// One ref update of a push.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefUpdate {
    /// What the client says the ref is now (zero: create).
    pub old: ObjectId,
    /// What it should become (zero: delete).
    pub new: ObjectId,
    /// The full ref name, `refs/heads/main`.
    pub name: String,
}

/// The head of a push request, as read before the pack.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushHead {
    /// The ref updates, in order.
    pub updates: Vec<RefUpdate>,
    /// The capabilities of the first command (`report-status`, `side-band-64k`, …).
    pub capabilities: Vec<String>,
    /// The push options (`-o`), when the `push-options` capability was sent.
    pub push_options: Vec<String>,
    /// Bytes of the body the head took; the pack starts here.
    pub consumed: usize,
}

/// Reads a push head from the start of a receive-pack body. `Ok(None)`:
/// more bytes are needed (within [`MAX_HEAD_BYTES`]); a body that is only
/// a flush (`0000`, git's probe) is a head with no updates.
///
/// # Errors
/// A malformed or oversized head.
pub fn parse_push_head(buf: &[u8]) -> Result<Option<PushHead>, GitError> {
    let _ = buf;
    Err(GitError::Truncated("CONTRACT: not implemented yet"))
}
