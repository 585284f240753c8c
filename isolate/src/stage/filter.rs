//! The commit filter: which changes may reach the host (owner: filter).

use super::ChangeSet;

/// Why the filter refused a change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refusal {
    /// The rule's stable snake_case code (`git_internal`, `setuid`, …).
    pub rule: &'static str,
    /// The pattern or fact that matched, for people.
    pub detail: String,
}

/// The filter's answer for one change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FilterVerdict {
    /// May be applied.
    Commit,
    /// Must not reach the host.
    Refuse(Refusal),
}

/// The commit filter: the built-in refused paths and kinds, plus what a
/// policy adds (it can only add).
#[derive(Debug, Clone, Default)]
pub struct CommitFilter {}

impl CommitFilter {
    /// The built-in filter.
    pub fn new() -> CommitFilter {
        CommitFilter {}
    }

    /// One verdict per change of `set`, in order.
    pub fn check(&self, set: &ChangeSet) -> Vec<FilterVerdict> {
        set.changes
            .iter()
            .map(|_| {
                FilterVerdict::Refuse(Refusal {
                    rule: "unbuilt",
                    detail: String::from("the filter is not built yet"),
                })
            })
            .collect()
    }
}
