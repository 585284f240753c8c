//! An incremental pack reader: it inflates every object to find where the
//! next begins, hashes each commit (and each delta it can resolve against a
//! commit in the same pack) and keeps its parents, so that
//! [`PackScanner::fast_forward`] can prove `old` an ancestor of `new` from
//! commits whose ids it computed itself. What it cannot prove is
//! [`Ancestry::Unproven`], which the relay treats as a force push.

use super::{GitError, ObjectId};

/// Most bytes of commit objects kept for the ancestry walk (64 MiB).
pub const MAX_COMMIT_BYTES: usize = 64 << 20;

/// Whether an update is a fast-forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ancestry {
    /// `old` is an ancestor of `new` through commits of this pack (or equal).
    FastForward,
    /// Not proven from this pack (a rewind, a fork, or history the pack
    /// does not carry): decided as `git.force_push`.
    Unproven,
}

/// The pack reader.
#[derive(Debug, Default)]
pub struct PackScanner {
    _private: (),
}

impl PackScanner {
    /// A reader for a pack of `object_format` (`sha1` or `sha256`).
    pub fn new(object_format: &str) -> Self {
        let _ = object_format;
        Self::default()
    }

    /// Feeds the next bytes of the pack.
    ///
    /// # Errors
    /// A malformed pack, or more commit bytes than [`MAX_COMMIT_BYTES`].
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), GitError> {
        let _ = bytes;
        Err(GitError::Pack("CONTRACT: not implemented yet".into()))
    }

    /// The pack ended: checks it is complete (trailer included).
    ///
    /// # Errors
    /// A truncated pack or a trailer that does not match.
    pub fn finish(&mut self) -> Result<(), GitError> {
        Err(GitError::Pack("CONTRACT: not implemented yet".into()))
    }

    /// Whether `new` fast-forwards `old`, from the commits read so far.
    pub fn fast_forward(&self, old: &ObjectId, new: &ObjectId) -> Ancestry {
        if old == new {
            Ancestry::FastForward
        } else {
            Ancestry::Unproven
        }
    }

    /// Bytes of the pack's trailer (the checksum) the relay must hold back
    /// from the origin until the push is decided: 20 (SHA-1) or 32.
    pub fn trailer_len(&self) -> usize {
        20
    }
}
