//! The output ledger: a pure state machine for the outputs of one execution.
//!
//! Each output tool call first reserves an attempt against the declaration's
//! `max` (an attempt counts whether or not the outbound call later succeeds,
//! so a failing or duplicated call cannot exceed the budget). A successful
//! call is then recorded as an emission. `finish_execution` is refused until
//! every `required: true` type has at least one emission.

use crate::capability::{CapabilityRegistry, OutputContext};
use crate::derive::OutputDecl;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    kind: String,
    /// The tool name, or `None` when the type is unavailable in this context.
    tool: Option<String>,
    /// `None`: unlimited.
    max: Option<u32>,
    required: bool,
    attempts: u32,
    emitted: u32,
}

/// A reserved attempt for one output type; pass it back to
/// [`OutputLedger::record`] when the outbound call succeeded.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an attempt is spent either way; record it when the call succeeds"]
pub struct Reservation {
    kind: String,
}

impl Reservation {
    /// The output type the attempt is for.
    pub fn kind(&self) -> &str {
        &self.kind
    }
}

/// A refused ledger operation.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum LedgerError {
    /// The type's `max` attempts are used up.
    #[error("Output limit reached for {kind}")]
    LimitReached {
        /// The output type.
        kind: String,
    },
    /// No available declaration exposes this tool.
    #[error("Tool {tool} not found")]
    ToolNotFound {
        /// The tool name.
        tool: String,
    },
    /// Required outputs were not emitted yet.
    #[error(
        "Required output missing: {}. Call the named Hub tool, then retry `finish_execution`.",
        missing.iter().map(|(k, t)| format!("{k} (call `{t}`)")).collect::<Vec<_>>().join(", ")
    )]
    RequiredOutputMissing {
        /// `(type, tool name or "unavailable")` per missing type, in declaration order.
        missing: Vec<(String, String)>,
    },
    /// `finish_execution` succeeded already.
    #[error("execution already finished")]
    Finished,
}

impl LedgerError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::LimitReached { .. } => "output_limit_reached",
            Self::ToolNotFound { .. } => "tool_not_found",
            Self::RequiredOutputMissing { .. } => "required_output_missing",
            Self::Finished => "execution_finished",
        }
    }
}

/// The output budget of one execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputLedger {
    entries: Vec<Entry>,
    finished: bool,
}

impl OutputLedger {
    /// A ledger for a step's declarations in the run's output context.
    ///
    /// The first declaration of a type decides its `max`; `required` holds if
    /// any declaration of the type requires it.
    pub fn new(
        decls: &[OutputDecl],
        ctx: Option<&OutputContext>,
        registry: &CapabilityRegistry,
    ) -> Self {
        let mut entries: Vec<Entry> = Vec::new();
        for d in decls {
            if let Some(e) = entries.iter_mut().find(|e| e.kind == d.kind) {
                e.required |= d.required;
                continue;
            }
            let tool = registry
                .get(&d.kind)
                .filter(|c| c.availability.is_available(ctx))
                .map(|c| c.tool.name.clone());
            entries.push(Entry {
                kind: d.kind.clone(),
                tool,
                max: d.max,
                required: d.required,
                attempts: 0,
                emitted: 0,
            });
        }
        Self {
            entries,
            finished: false,
        }
    }

    /// Reserves an attempt for a call of output tool `tool`.
    ///
    /// # Errors
    ///
    /// [`LedgerError::ToolNotFound`], [`LedgerError::LimitReached`] or [`LedgerError::Finished`].
    pub fn reserve_tool(&mut self, tool: &str) -> Result<Reservation, LedgerError> {
        if self.finished {
            return Err(LedgerError::Finished);
        }
        let Some(entry) = self
            .entries
            .iter_mut()
            .find(|e| e.tool.as_deref() == Some(tool))
        else {
            return Err(LedgerError::ToolNotFound {
                tool: tool.to_owned(),
            });
        };
        if entry.max.is_some_and(|max| entry.attempts >= max) {
            return Err(LedgerError::LimitReached {
                kind: entry.kind.clone(),
            });
        }
        entry.attempts = entry.attempts.saturating_add(1);
        Ok(Reservation {
            kind: entry.kind.clone(),
        })
    }

    /// Records that the reserved call succeeded.
    pub fn record(&mut self, reservation: Reservation) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.kind == reservation.kind) {
            e.emitted = e.emitted.saturating_add(1);
        }
    }

    /// Emissions recorded so far for `kind`.
    pub fn emitted(&self, kind: &str) -> u32 {
        self.entries
            .iter()
            .find(|e| e.kind == kind)
            .map_or(0, |e| e.emitted)
    }

    /// Attempts reserved so far for `kind`.
    pub fn attempts(&self, kind: &str) -> u32 {
        self.entries
            .iter()
            .find(|e| e.kind == kind)
            .map_or(0, |e| e.attempts)
    }

    /// A `finish_execution` call: succeeds once every required type was emitted.
    ///
    /// # Errors
    ///
    /// [`LedgerError::RequiredOutputMissing`] or [`LedgerError::Finished`].
    pub fn finish(&mut self) -> Result<(), LedgerError> {
        if self.finished {
            return Err(LedgerError::Finished);
        }
        let missing: Vec<(String, String)> = self
            .entries
            .iter()
            .filter(|e| e.required && e.emitted == 0)
            .map(|e| {
                (
                    e.kind.clone(),
                    e.tool.clone().unwrap_or_else(|| "unavailable".to_owned()),
                )
            })
            .collect();
        if !missing.is_empty() {
            return Err(LedgerError::RequiredOutputMissing { missing });
        }
        self.finished = true;
        Ok(())
    }

    /// Whether `finish_execution` succeeded.
    pub fn is_finished(&self) -> bool {
        self.finished
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(kind: &str, max: u32, required: bool) -> OutputDecl {
        OutputDecl {
            kind: kind.to_owned(),
            max: Some(max),
            required,
        }
    }

    #[test]
    fn max_counts_attempts_and_the_limit_message_is_exact() {
        let reg = CapabilityRegistry::default();
        let mut l = OutputLedger::new(
            &[decl("slack.reply", 2, false)],
            Some(&OutputContext::new("slack")),
            &reg,
        );
        let r = l.reserve_tool("reply").unwrap();
        assert_eq!(r.kind(), "slack.reply");
        l.record(r);
        // A failed outbound call still spends its attempt.
        let _failed = l.reserve_tool("reply").unwrap();
        let err = l.reserve_tool("reply").unwrap_err();
        assert_eq!(err.to_string(), "Output limit reached for slack.reply");
        assert_eq!(err.code(), "output_limit_reached");
        assert_eq!(
            (l.attempts("slack.reply"), l.emitted("slack.reply")),
            (2, 1)
        );
    }

    #[test]
    fn finish_waits_for_required_outputs() {
        let reg = CapabilityRegistry::default();
        let decls = [decl("slack.reply", 1, true), decl("github.reply", 1, true)];
        let mut l = OutputLedger::new(&decls, Some(&OutputContext::new("slack")), &reg);
        let err = l.finish().unwrap_err();
        assert_eq!(
            err.to_string(),
            "Required output missing: slack.reply (call `reply`), github.reply (call `unavailable`). Call the named Hub tool, then retry `finish_execution`."
        );
        let mut l = OutputLedger::new(&decls[..1], Some(&OutputContext::new("slack")), &reg);
        assert_eq!(
            l.finish().unwrap_err().to_string(),
            "Required output missing: slack.reply (call `reply`). Call the named Hub tool, then retry `finish_execution`."
        );
        // Positive control: after one emission, finish succeeds, once.
        let r = l.reserve_tool("reply").unwrap();
        l.record(r);
        assert_eq!(l.finish(), Ok(()));
        assert!(l.is_finished());
        assert_eq!(l.finish(), Err(LedgerError::Finished));
        assert_eq!(
            LedgerError::Finished.to_string(),
            "execution already finished"
        );
        assert_eq!(LedgerError::Finished.code(), "execution_finished");
        assert_eq!(l.reserve_tool("reply"), Err(LedgerError::Finished));
    }

    #[test]
    fn unknown_or_unavailable_tools_are_not_found() {
        let reg = CapabilityRegistry::default();
        let mut l = OutputLedger::new(
            &[decl("slack.reply", 1, false)],
            Some(&OutputContext::new("discord")),
            &reg,
        );
        assert_eq!(
            l.reserve_tool("reply").unwrap_err().to_string(),
            "Tool reply not found"
        );
        let mut l = OutputLedger::new(
            &[decl("discord.reply", 1, false)],
            Some(&OutputContext::new("discord")),
            &reg,
        );
        assert!(l.reserve_tool("reply").is_ok());
    }
}
