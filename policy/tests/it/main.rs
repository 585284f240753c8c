//! Integration tests of the egress, outward and routing deciders: data-driven
//! cases and a model-based property test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

mod cases;
mod model;
