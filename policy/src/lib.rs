//! Pure decisions: tool authority and provider translation, trigger admission, egress, outward actions and routing.
//!
//! The egress, outward and routing deciders take a parsed host policy
//! (`palisade_schema::host_policy::HostPolicy`), a session state
//! (`palisade_taint::Session`) and a request, and return a
//! [`verdict::Verdict`]: allow, ask or deny, the rule that decided and why.
//! They do no IO, read no clock and never panic.
#![forbid(unsafe_code)]

pub mod egress;
pub mod host_pattern;
pub mod outward;
pub mod route;
pub mod verdict;
