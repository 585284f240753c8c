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
//! The run plan: [`plan::plan`], over `palisade-schema`'s workflow model.
//!
//! Host policy decisions: [`egress::decide`], [`outward::decide`] and
//! [`route::decide_route`] / [`route::decide_dispatch`] take a parsed host
//! policy (`palisade_schema::host_policy::HostPolicy`), a session state
//! (`palisade_taint::Session`) and a request, and return a
//! [`verdict::Verdict`]: allow, ask or deny, the rule that decided and why.
//!
//! What this crate does **not** do: it does not sandbox the agent, and it
//! does not govern the provider's native tools (shell, files, web); those are
//! the provider's options and the host boundary (see `docs/tool-authority.md`).
//!
//! ```
//! use palisade_policy::capability::{CapabilityRegistry, OutputContext};
//! use palisade_policy::derive::OutputDecl;
//! use palisade_policy::grant::{GrantConfig, StepInput, grant_step};
//! use serde_json::json;
//!
//! let options = json!({"allowedTools": ["Read"]});
//! let outputs = [OutputDecl { kind: "slack.reply".into(), max: 1, required: false }];
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
pub mod capability;
pub mod derive;
pub mod digest;
pub mod egress;
pub mod grant;
pub mod host_pattern;
pub mod invocation;
pub mod ledger;
pub mod outward;
pub mod plan;
pub mod route;
pub mod translate;
pub mod verdict;
pub mod webhook;

/// Fuzzing entry points; not part of the public API; no semver guarantee
/// (only with the `testing` feature or under `cfg(fuzzing)`).
#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __fuzz {
    pub use crate::fuzz::derive_translate;
}
#[cfg(any(fuzzing, feature = "testing"))]
mod fuzz;
