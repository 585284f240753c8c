//! The change set of a stage's upper layers (owner: change set and commit).

use super::{ChangeSet, Stage, StageError};

impl Stage {
    /// The change set of every root, read from the upper layers (whiteouts
    /// and opaque directories understood) against the host roots. Reading
    /// only: it may run while the worker still runs (a checkpoint).
    pub fn changes(&self) -> Result<ChangeSet, StageError> {
        Err(StageError::Unbuilt("Stage::changes"))
    }
}
