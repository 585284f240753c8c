//! Pure decisions: tool authority and provider translation, trigger admission, egress, outward actions and routing.
//!
//! This crate does no IO, reads no clock and no environment: callers pass
//! every input (including the current time) and get a decision back. Loading
//! files and printing belong to `palisade-cli`.
//!
//! Tool authority, in order of use:
//! - [`capability::CapabilityRegistry`]: which output types exist and when they are available;
//! - [`derive::derive`]: the exact tool policy of one execution;
//! - [`translate::translate`]: that policy merged into a provider's native options;
//! - [`digest::PolicyDigest`]: the acknowledgement a daemon returns after applying it;
//! - [`ledger::OutputLedger`]: output budgets while the execution runs.
//!
//! Trigger admission: [`admission::admit`], after [`webhook`] authentication.
//! The run plan: [`plan::plan`], over `palisade-schema`'s workflow model;
//! [`plan::plan_document`] for a Paseo Hub 0.9 trigger document.
//!
//! Trigger documents (Hub 0.9): [`trigger`] derives each `on` entry's grants
//! (the authored ones, then the automatic unlimited reply) with
//! [`capability::CapabilityRegistry::hub_0_9`]; [`migrate`] previews the
//! Hub's migration of a v0.6 bundle and every authority change it implies.
//!
//! Host policy decisions: [`egress::decide`], [`outward::decide`] and
//! [`route::decide_route`] / [`route::decide_dispatch`] take a parsed host
//! policy (`palisade_schema::host_policy::HostPolicy`), a session state
//! (`palisade_taint::Session`) and a request, and return a
//! [`Verdict`]: allow, ask or deny, a typed [`Reason`] with a stable code,
//! the rule that decided and a human sentence. The proxy's `Decider` in
//! `palisade-egress` returns the same type.
//!
//! **Invariant:** every decision is a total, pure function of its inputs
//! (no IO, clock or environment); a tool grant depends only on
//! `allow_outputs`, the output context and the capability registry; adding a
//! filter condition never admits more events; taint only narrows.
//!
//! What this crate does **not** do: it does not sandbox the agent, and it
//! does not govern the provider's native tools (shell, files, web); those are
//! the provider's options and the host boundary (see `docs/tool-authority.md`).
//!
//! Admit a Slack mention against the guarded-request workflow, then derive
//! and translate the grant of its `answer` step:
//!
//! ```
//! use palisade_policy::admission::{Admission, TriggerEvent, admit};
//! use palisade_policy::capability::{CapabilityRegistry, OutputContext};
//! use palisade_policy::grant::GrantConfig;
//! use palisade_policy::plan::{grant_for, static_agent};
//!
//! let text = include_str!("../../examples/guarded-request.yml");
//! let config = palisade_schema::parse_workflow("guarded-request.yml", text)?.into_value();
//! let trigger = &config.triggers[0];
//!
//! let mut event = TriggerEvent::default();
//! event.name = "slack.mention".into();
//! event.actor_id = Some("U01234567".into());
//! event.workspace = Some("T01234567".into());
//! event.channel = Some("C01234567".into());
//! event.bot_mentions = vec!["<@UBOT>".into()];
//! event.text = "<@UBOT> how do I build?".into();
//! let admission = admit(&trigger.on, trigger.filters.as_ref(), &event);
//! assert_eq!(admission, Admission::Admitted { prompt: "how do I build?".into() });
//!
//! // Another author is not admitted.
//! let mut stranger = event.clone();
//! stranger.actor_id = Some("U0STRANGER".into());
//! assert!(!admit(&trigger.on, trigger.filters.as_ref(), &stranger).is_admitted());
//!
//! let answer = trigger.steps.iter().find(|s| s.id == "answer").ok_or("no answer step")?;
//! let agent = static_agent(&config, answer).ok_or("no static agent")?.agent;
//! let config = GrantConfig::default().with_hub_url("http://127.0.0.1:7000/mcp");
//! let grant = grant_for(answer, &agent, Some(&OutputContext::new("slack")), &CapabilityRegistry::default(), &config)?;
//! assert_eq!(grant.derived.policy.tool_names().collect::<Vec<_>>(), ["finish_execution", "reply"]);
//! let options = grant.provider_options.ok_or("no provider options")?.to_string();
//! assert!(options.contains("http://127.0.0.1:7000/mcp"), "{options}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The same for one step's inputs, without a workflow:
//!
//! ```
//! use palisade_policy::capability::{CapabilityRegistry, OutputContext};
//! use palisade_policy::derive::OutputDecl;
//! use palisade_policy::grant::{GrantConfig, StepInput, grant_step};
//! use serde_json::json;
//!
//! let options = json!({"allowedTools": ["Read"]});
//! let outputs = [OutputDecl { kind: "slack.reply".into(), max: Some(1), required: false }];
//! let grant = grant_step(
//!     &StepInput { provider: "claude", options: Some(&options), allow_outputs: &outputs, output_schema: None },
//!     Some(&OutputContext::new("slack")),
//!     &CapabilityRegistry::default(),
//!     &GrantConfig::default(),
//! )?;
//! assert_eq!(grant.derived.policy.tool_names().collect::<Vec<_>>(), ["finish_execution", "reply"]);
//! assert_eq!(
//!     grant.provider_options,
//!     Some(json!({"allowedTools": ["Read", "mcp__hub__finish_execution", "mcp__hub__reply"]}))
//! );
//! # Ok::<(), palisade_policy::grant::StepError>(())
//! ```
#![forbid(unsafe_code)]

pub mod admission;
pub mod agent;
pub mod capability;
pub mod derive;
pub mod digest;
pub mod egress;
pub mod grant;
pub mod host_pattern;
pub mod invocation;
pub mod ledger;
pub mod migrate;
pub mod outward;
pub mod plan;
pub mod provider_sandbox;
pub mod relay_route;
pub mod route;
pub mod translate;
pub mod trigger;
pub mod verdict;
pub mod webhook;

pub use verdict::{Decision, Reason, Verdict};

/// Fuzzing entry points; not part of the public API; no semver guarantee
/// (only with the `testing` feature or under `cfg(fuzzing)`).
#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __fuzz {
    pub use crate::fuzz::derive_translate;
}
#[cfg(any(fuzzing, feature = "testing"))]
mod fuzz;
