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
//!
//! Host policy decisions: [`egress::decide`], [`outward::decide`] and
//! [`route::decide_route`] / [`route::decide_dispatch`] take a parsed host
//! policy (`palisade_schema::host_policy::HostPolicy`), a session state
//! (`palisade_taint::Session`) and a request, and return a
//! [`verdict::Verdict`]: allow, ask or deny, the rule that decided and why.
#![forbid(unsafe_code)]

pub mod admission;
pub mod capability;
pub mod derive;
pub mod digest;
pub mod egress;
pub mod grant;
pub mod host_pattern;
pub mod ledger;
pub mod outward;
pub mod plan;
pub mod route;
pub mod translate;
pub mod verdict;
pub mod webhook;
