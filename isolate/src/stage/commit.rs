//! Applying a filtered change set to the host (owner: change set and commit).

use std::path::PathBuf;

use super::{Change, ChangeSet, Digest, FilterVerdict, Refusal, Stage, StageError};

/// What became of one change during [`Stage::commit`], in order.
#[derive(Debug)]
#[non_exhaustive]
pub enum CommitEvent<'a> {
    /// Applied to the host: the host node's digest before (`None`: absent,
    /// or a directory) and after (`None`: deleted, or a directory).
    Applied {
        /// The change.
        change: &'a Change,
        /// The host's digest before.
        before: Option<Digest>,
        /// The host's digest after.
        after: Option<Digest>,
    },
    /// Refused by the filter and moved to the quarantine.
    Refused {
        /// The change.
        change: &'a Change,
        /// The filter's reason.
        refusal: &'a Refusal,
        /// Where it is kept now.
        quarantined: PathBuf,
    },
    /// The host path changed since the stage was created: not applied,
    /// left in the stage.
    Conflict {
        /// The change.
        change: &'a Change,
        /// What changed on the host.
        detail: String,
    },
}

/// Totals of one [`Stage::commit`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommitReport {
    /// Changes applied.
    pub applied: usize,
    /// Changes refused and quarantined.
    pub refused: usize,
    /// Conflicts left in the stage.
    pub conflicts: usize,
    /// Changes not selected by `only`, left in the stage.
    pub skipped: usize,
}

impl Stage {
    /// Apply `set` with its filter `verdicts` (one per change, as
    /// [`CommitFilter::check`](super::CommitFilter::check) returns them),
    /// calling `record` after each change; `only` (paths relative to their
    /// root, with the root index) limits the commit to those paths and what
    /// is under them.
    pub fn commit(
        &self,
        set: &ChangeSet,
        verdicts: &[FilterVerdict],
        only: Option<&[(usize, PathBuf)]>,
        record: &mut dyn FnMut(&CommitEvent<'_>) -> Result<(), String>,
    ) -> Result<CommitReport, StageError> {
        let _ = (set, verdicts, only, record);
        Err(StageError::Unbuilt("Stage::commit"))
    }
}
