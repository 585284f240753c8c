//! Integration tests of the sealed journal: round trips, the tamper suite,
//! forward security, truncation with anchors and the SIGKILL crash test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::print_stdout,
    reason = "tests"
)]

mod basics;
mod crash;
mod forward;
mod reader;
mod tamper;
mod util;
