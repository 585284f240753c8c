//! Tool authority of a Paseo Hub 0.9 trigger document's run
//! (`hub-triggers.md` §4): the grants of one `on` entry are the authored
//! `run.outputs` (`max ?? 1`, `required ?? false`, in map order), then, for
//! a conversational event without an authored `<p>.reply`, the automatic
//! event-native reply `{<p>.reply, max: None (unlimited), required: false}`.
//!
//! The policy is derived per `on` entry, because each event has its own
//! output context; [`CapabilityRegistry::hub_0_9`] is the registry trigger
//! runs use. The Hub keeps duplicates; a document's grants have unique
//! types by construction (`run.outputs` is a map, and the automatic reply
//! is only added when its type is absent), so [`crate::derive::derive`]'s
//! de-duplication never applies here.
//!
//! [`CapabilityRegistry::hub_0_9`]: crate::capability::CapabilityRegistry::hub_0_9

use palisade_schema::Agent;
use palisade_schema::trigger::{
    OutputGrant, Release, RunAgent, TriggerDocument, internal_trigger_name,
};

use crate::capability::{CapabilityRegistry, OutputContext};
use crate::derive::{self, Derived, DispatchError, OutputDecl};
use crate::grant::{GrantConfig, StepError, StepGrant, StepInput, grant_step};

/// The id of a trigger document's one step, as the Hub compiles it.
pub const STEP_ID: &str = "run";

/// The providers whose events get an automatic reply in Paseo Hub 0.9.
pub const AUTOMATIC_REPLY_PROVIDERS: [&str; 4] = ["slack", "discord", "linear", "github"];

/// The automatic reply type of `event` under `release`: `<p>.reply` when
/// `p` (the text before the first `.`) is one of
/// [`AUTOMATIC_REPLY_PROVIDERS`], or `forgejo` on [`Release::Unreleased`].
/// `manual`, `schedule` and unknown providers get none.
pub fn automatic_reply_kind(event: &str, release: Release) -> Option<String> {
    let p = event.split('.').next().unwrap_or_default();
    let conversational = AUTOMATIC_REPLY_PROVIDERS.contains(&p)
        || (p == "forgejo" && release >= Release::Unreleased);
    conversational.then(|| format!("{p}.reply"))
}

/// Authored grants with the compiled defaults: `max ?? 1`,
/// `required ?? false`, in map order.
pub fn authored_decls(outputs: &[OutputGrant]) -> Vec<OutputDecl> {
    outputs
        .iter()
        .map(|o| OutputDecl {
            kind: o.kind.clone(),
            max: Some(o.max.unwrap_or(1)),
            required: o.required.unwrap_or(false),
        })
        .collect()
}

/// The grants of a run started by `event`: `authored` (already defaulted,
/// see [`authored_decls`]) followed, when no grant has the type, by the
/// automatic unlimited reply of [`automatic_reply_kind`].
pub fn event_decls(event: &str, authored: &[OutputDecl], release: Release) -> Vec<OutputDecl> {
    let mut decls = authored.to_vec();
    if let Some(kind) = automatic_reply_kind(event, release)
        && !decls.iter().any(|d| d.kind == kind)
    {
        decls.push(OutputDecl {
            kind,
            max: None,
            required: false,
        });
    }
    decls
}

/// Whether `decl` is the automatic event-native reply of a document's
/// `event`: the only grant without a `max`.
pub fn is_automatic(decl: &OutputDecl) -> bool {
    decl.max.is_none()
}

/// The grants of `on` entry `index` of `doc` ([`event_decls`] over the
/// authored `run.outputs`); `None` when there is no such entry.
pub fn entry_decls(
    doc: &TriggerDocument,
    index: usize,
    release: Release,
) -> Option<Vec<OutputDecl>> {
    let entry = doc.on.get(index)?;
    Some(event_decls(
        &entry.event,
        &authored_decls(&doc.run.outputs),
        release,
    ))
}

/// The exact tool policy of a run of `on` entry `index`, in `ctx`
/// (default: [`OutputContext::for_event`] of the entry's event).
///
/// # Errors
///
/// As [`derive::derive`]; an out-of-range `index` has no grants and gives
/// `finish_execution` alone.
pub fn derive_entry(
    doc: &TriggerDocument,
    index: usize,
    ctx: Option<&OutputContext>,
    registry: &CapabilityRegistry,
    release: Release,
) -> Result<Derived, DispatchError> {
    let decls = entry_decls(doc, index, release).unwrap_or_default();
    let own = doc
        .on
        .get(index)
        .map(|e| OutputContext::for_event(&e.event));
    derive::derive(
        &decls,
        ctx.or(own.as_ref()),
        doc.run.output_schema.as_ref(),
        registry,
    )
}

/// The grant of a run of `on` entry `index` with `agent` (one of
/// [`agents`]), in `ctx`: its tool policy, provider options and digest.
///
/// # Errors
///
/// The run cannot be dispatched ([`StepError`]).
pub fn grant_entry(
    doc: &TriggerDocument,
    index: usize,
    agent: &Agent,
    ctx: &OutputContext,
    registry: &CapabilityRegistry,
    config: &GrantConfig,
    release: Release,
) -> Result<StepGrant, StepError> {
    let decls = entry_decls(doc, index, release).unwrap_or_default();
    grant_step(
        &StepInput {
            provider: &agent.provider,
            options: agent.options.as_ref(),
            allow_outputs: &decls,
            output_schema: doc.run.output_schema.as_ref(),
        },
        Some(ctx),
        registry,
        config,
    )
}

/// The agents a run may get: the inline one (`None` name), or every
/// `select` choice with its name.
pub fn agents(doc: &TriggerDocument) -> Vec<(Option<&str>, &Agent)> {
    match &doc.run.agent {
        RunAgent::Inline(a) => vec![(None, a)],
        RunAgent::Select { choices, .. } => {
            choices.iter().map(|(n, a)| (Some(n.as_str()), a)).collect()
        }
        _ => Vec::new(),
    }
}

/// Why no `on` entry was selected.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SelectError {
    /// No document or internal trigger has the name.
    #[error("no trigger document or internal trigger named `{name}`")]
    UnknownTrigger {
        /// The name.
        name: String,
    },
    /// The document has no `on` entry for the event.
    #[error("trigger `{name}` does not start on `{event}` (its events: {})", events.join(", "))]
    UnknownEvent {
        /// The document's name.
        name: String,
        /// The requested event.
        event: String,
        /// Its events, in order.
        events: Vec<String>,
    },
    /// The document has several `on` entries and none was chosen.
    #[error(
        "trigger `{name}` starts on several events; choose one with --event ({}) or name the internal trigger ({})",
        events.join(", "),
        internal.join(", ")
    )]
    Ambiguous {
        /// The document's name.
        name: String,
        /// Its events, in order.
        events: Vec<String>,
        /// Its internal trigger names, in order.
        internal: Vec<String>,
    },
    /// An internal trigger name and an event that disagree.
    #[error("internal trigger `{internal}` starts on `{actual}`, not `{event}`")]
    Conflict {
        /// The internal name.
        internal: String,
        /// Its event.
        actual: String,
        /// The requested event.
        event: String,
    },
}

/// Selects one `on` entry across `docs`: `name` is a document's `name`
/// (then `event` chooses among its entries, required when it has several)
/// or an internal trigger name (`<name>-event-<n>`, see
/// [`internal_trigger_name`]). A document name wins over an internal name
/// of another document. Returns `(document index, entry index)`.
///
/// # Errors
///
/// [`SelectError`].
pub fn select(
    docs: &[TriggerDocument],
    name: &str,
    event: Option<&str>,
) -> Result<(usize, usize), SelectError> {
    if let Some((d, doc)) = docs.iter().enumerate().find(|(_, d)| d.name == name) {
        let events: Vec<String> = doc.on.iter().map(|e| e.event.clone()).collect();
        return match event {
            Some(ev) => events
                .iter()
                .position(|e| e == ev)
                .map(|i| (d, i))
                .ok_or_else(|| SelectError::UnknownEvent {
                    name: doc.name.clone(),
                    event: ev.to_owned(),
                    events: events.clone(),
                }),
            None if events.len() == 1 => Ok((d, 0)),
            None => Err(SelectError::Ambiguous {
                name: doc.name.clone(),
                internal: (0..events.len())
                    .map(|i| internal_trigger_name(&doc.name, i))
                    .collect(),
                events,
            }),
        };
    }
    for (d, doc) in docs.iter().enumerate() {
        for (i, entry) in doc.on.iter().enumerate().skip(1) {
            if internal_trigger_name(&doc.name, i) != name {
                continue;
            }
            if let Some(ev) = event
                && ev != entry.event
            {
                return Err(SelectError::Conflict {
                    internal: name.to_owned(),
                    actual: entry.event.clone(),
                    event: ev.to_owned(),
                });
            }
            return Ok((d, i));
        }
    }
    Err(SelectError::UnknownTrigger {
        name: name.to_owned(),
    })
}

/// How a grant reads in `palisade policy`/`explain`: `reply (automatic,
/// unlimited)`, `reply (up to 5 times)`, and ` required` when required.
pub fn describe_grant(tool: &str, decl: &OutputDecl) -> String {
    let limit = match decl.max {
        None => "automatic, unlimited".to_owned(),
        Some(1) => "up to 1 time".to_owned(),
        Some(n) => format!("up to {n} times"),
    };
    let required = if decl.required { ", required" } else { "" };
    format!("{tool} ({limit}{required}; {})", decl.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn automatic_reply_kinds() {
        for (event, want) in [
            ("slack.mention", Some("slack.reply")),
            ("discord.mention", Some("discord.reply")),
            ("github.push", Some("github.reply")),
            ("linear.comment_created", Some("linear.reply")),
            ("manual.run", None),
            ("schedule.tick", None),
            ("future.thing", None),
            ("forgejo.issue_created", None),
        ] {
            assert_eq!(
                automatic_reply_kind(event, Release::V0_9_0).as_deref(),
                want,
                "{event}"
            );
        }
        assert_eq!(
            automatic_reply_kind("forgejo.issue_created", Release::Unreleased).as_deref(),
            Some("forgejo.reply")
        );
        assert_eq!(
            automatic_reply_kind("forgejo.issue_created", Release::Main),
            None
        );
    }

    #[test]
    fn authored_grant_suppresses_the_automatic_one() {
        let authored = [OutputDecl {
            kind: "slack.reply".into(),
            max: Some(5),
            required: false,
        }];
        let slack = event_decls("slack.mention", &authored, Release::V0_9_0);
        assert_eq!(slack, authored);
        let github = event_decls("github.issue_comment", &authored, Release::V0_9_0);
        assert_eq!(github.len(), 2);
        assert_eq!(github[0], authored[0]);
        assert_eq!(
            github[1],
            OutputDecl {
                kind: "github.reply".into(),
                max: None,
                required: false
            }
        );
        assert!(is_automatic(&github[1]) && !is_automatic(&github[0]));
        // Positive control for the suppression: without the grant, Slack gets one.
        let bare = event_decls("slack.mention", &[], Release::V0_9_0);
        assert_eq!(bare.len(), 1);
        assert!(is_automatic(&bare[0]));
        assert!(event_decls("manual.run", &[], Release::V0_9_0).is_empty());
    }

    #[test]
    fn describe_grant_reads_the_limit() {
        let auto = OutputDecl {
            kind: "slack.reply".into(),
            max: None,
            required: false,
        };
        assert_eq!(
            describe_grant("reply", &auto),
            "reply (automatic, unlimited; slack.reply)"
        );
        let five = OutputDecl {
            kind: "slack.reply".into(),
            max: Some(5),
            required: true,
        };
        assert_eq!(
            describe_grant("reply", &five),
            "reply (up to 5 times, required; slack.reply)"
        );
    }
}
