//! Staged writes: each writable root seen through an overlay whose upper
//! layer is a private staging directory, and the host-side change set,
//! commit filter and atomic, conflict-aware commit of what the worker left
//! there.
//!
//! The worker writes into the overlay; nothing it writes reaches the host
//! tree until [`Stage::commit`] applies the [`ChangeSet`] that
//! [`Stage::changes`] computed, change by change, after the
//! [`CommitFilter`] let it through. A refused change is moved to the stage's
//! quarantine; a change whose host path moved on since the stage was
//! created is a conflict, left in the stage.
//!
//! On disk a stage is one directory (owned by the launcher, mode `0700`):
//!
//! ```text
//! <stage>/manifest.json        the session, each root, its stamp
//! <stage>/<n>/upper/           root n's overlay upper layer
//! <stage>/<n>/work/            root n's overlay work directory
//! <stage>/<n>/quarantine/      refused changes of root n, at their paths
//! ```
//!
//! Shared types live here; `layout.rs` creates and reopens stages, `scan.rs`
//! computes the change set, `filter.rs` is the pure commit filter and
//! `commit.rs` applies a filtered change set to the host.

use std::fmt;
use std::path::PathBuf;

mod commit;
mod filter;
pub(crate) mod layout;
mod scan;

pub use commit::{CommitEvent, CommitReport};
pub use filter::{BuiltinRule, CommitFilter, FilterError, FilterVerdict, Refusal};
pub use layout::{Stage, StagedRoot, Stamp};

/// What a staged root's upper layer changed, relative to its host root.
///
/// Ordered by root, then path in byte order; a created directory comes
/// before what it contains and a deleted directory after what it
/// contained, so applying the changes in order never needs a parent that
/// is not there yet nor removes a directory that is not empty yet.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ChangeSet {
    /// The changes, in the order above.
    pub changes: Vec<Change>,
    /// The git directories the changes lie in, by root index then path
    /// (relative to the root, `""` for the root itself): each directory
    /// above a change (or a changed directory itself, or above a rename's
    /// old path) that is a git directory on the host or in the worker's
    /// view (a `HEAD` with `refs` beside it, or a `commondir`), whatever its
    /// name. The filter judges everything below one as below a `.git`
    /// (a bare repository `vendor/up.git` keeps its `hooks/` and `config`),
    /// except one the worker created outside every `.git`, whose new `HEAD`
    /// it refuses anyway.
    pub git_dirs: Vec<(usize, PathBuf)>,
}

/// One changed path of one staged root.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Change {
    /// Index of the root in [`Stage::roots`].
    pub root: usize,
    /// The path relative to the root: never empty, never absolute, no `.`
    /// or `..` component. Not necessarily UTF-8.
    pub path: PathBuf,
    /// What happened to it.
    pub kind: ChangeKind,
    /// The node as the worker left it; for [`ChangeKind::Deleted`], the
    /// node the host root had.
    pub node: Node,
}

/// What happened to a path.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChangeKind {
    /// The host root has nothing at the path.
    Created,
    /// Content changed (a file's bytes, a symlink's target, or the node's
    /// kind); the mode may have changed too.
    Modified,
    /// Only the mode bits changed.
    ModeChanged,
    /// The worker removed the path (an overlayfs whiteout, or a path of the
    /// host root hidden by an opaque directory).
    Deleted,
    /// The node at `path` is the one the host root had at `from` (same
    /// kind, content and mode), which the worker removed; `from` is not
    /// listed as [`ChangeKind::Deleted`] as well.
    Renamed {
        /// The old path, relative to the same root.
        from: PathBuf,
    },
}

/// A filesystem node as far as the commit needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Node {
    /// Its kind.
    pub kind: NodeKind,
    /// `st_mode & 0o7777`: permission bits with setuid, setgid and sticky.
    pub mode: u32,
    /// Size in bytes (files; 0 otherwise).
    pub size: u64,
    /// A symlink's target as stored, unresolved.
    pub link_target: Option<PathBuf>,
    /// Whether the node carries file capabilities (`security.capability`).
    pub file_caps: bool,
}

/// The kind of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A character device (other than an overlayfs whiteout).
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
}

/// A SHA-256 content digest; shown as `sha256:<hex>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub [u8; 32]);

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", hex::encode(self.0))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a stage could not be created, read or committed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StageError {
    /// A filesystem operation failed; `path` is the path it was about.
    #[error("stage_io: {what} `{}`: {source}", path.display())]
    Io {
        /// What was being done, e.g. `create the upper directory`.
        what: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The stage directory is not usable (inside a writable root, not owned
    /// by the launcher, a symlink, a manifest of another version, …).
    #[error("stage_invalid: `{}`: {reason}", path.display())]
    Invalid {
        /// The stage (or manifest) path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The caller's recorder refused an event; the commit stopped there.
    /// Every path applied before is in the events already delivered; `path`
    /// was applied but its event not recorded.
    #[error("stage_record: the record of `{}` was refused ({detail}); the commit stopped after applying it", path.display())]
    Record {
        /// The path applied whose event was refused.
        path: PathBuf,
        /// The recorder's message.
        detail: String,
    },
}
