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
#![forbid(unsafe_code)]

pub mod admission;
pub mod capability;
pub mod derive;
pub mod digest;
pub mod grant;
pub mod ledger;
pub mod plan;
pub mod translate;
pub mod webhook;

/// Fuzzing entry points; not part of the API.
#[doc(hidden)]
pub mod __fuzz {
    pub use crate::fuzz::derive_translate;
}
mod fuzz;
