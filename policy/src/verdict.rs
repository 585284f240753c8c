//! The result of an egress, outward or routing decision.

use std::fmt;

/// Allow, ask a human, or deny.
///
/// Not `#[non_exhaustive]`: a new outcome should break every caller's match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Decision {
    /// Go ahead.
    Allow,
    /// Ask a human first (outward actions only).
    Ask,
    /// Refuse.
    Deny,
}

impl Decision {
    /// `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Ask => "ask",
            Self::Deny => "deny",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A decision with the rule that made it and a human reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The outcome.
    pub decision: Decision,
    /// The deciding rule as an authored path into `palisade.toml`
    /// (`egress.deny[0]`, `outward.default`, `routing[2]`), or `None` when
    /// no rule matched and a built-in default or an input error decided.
    pub rule: Option<String>,
    /// Why, in one line.
    pub reason: String,
}

impl Verdict {
    pub(crate) fn new(decision: Decision, rule: Option<String>, reason: impl Into<String>) -> Self {
        Self {
            decision,
            rule,
            reason: reason.into(),
        }
    }
}
