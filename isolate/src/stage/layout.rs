//! Creating, reopening and removing a stage directory (owner: staging mount).

use std::path::{Path, PathBuf};

use super::StageError;

/// A ctime stamp (seconds, nanoseconds) of the host clock at a stage's
/// creation: a host path whose ctime is later changed since then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp {
    /// Seconds since the epoch.
    pub sec: i64,
    /// Nanoseconds.
    pub nsec: i64,
}

/// One staged writable root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedRoot {
    pub(crate) root: PathBuf,
    pub(crate) upper: PathBuf,
    pub(crate) work: PathBuf,
    pub(crate) quarantine: PathBuf,
    pub(crate) started: Stamp,
}

impl StagedRoot {
    /// The host directory (the overlay's lower layer).
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// The upper layer.
    pub fn upper(&self) -> &Path {
        &self.upper
    }
    /// The overlay work directory.
    pub fn work(&self) -> &Path {
        &self.work
    }
    /// Where refused changes are kept.
    pub fn quarantine(&self) -> &Path {
        &self.quarantine
    }
    /// When the stage was created.
    pub fn started(&self) -> Stamp {
        self.started
    }
}

/// A session's stage directory.
#[derive(Debug)]
pub struct Stage {
    pub(crate) dir: PathBuf,
    pub(crate) session: String,
    pub(crate) roots: Vec<StagedRoot>,
}

impl Stage {
    /// Create `<base>/<session>` with one staged root per entry of `roots`.
    pub fn create(
        base: &Path,
        session: &str,
        roots: &[PathBuf],
        owner: (u32, u32),
    ) -> Result<Stage, StageError> {
        let _ = (base, session, roots, owner);
        Err(StageError::Unbuilt("Stage::create"))
    }

    /// Reopen a stage from its manifest.
    pub fn open(dir: &Path) -> Result<Stage, StageError> {
        let _ = dir;
        Err(StageError::Unbuilt("Stage::open"))
    }

    /// The stage directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The session the stage belongs to.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The staged roots, in the order given to [`Stage::create`].
    pub fn roots(&self) -> &[StagedRoot] {
        &self.roots
    }

    /// Remove the stage directory and everything in it (quarantine too).
    pub fn remove(self) -> Result<(), StageError> {
        Err(StageError::Unbuilt("Stage::remove"))
    }
}
