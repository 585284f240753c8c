//! Integration tests of `palisade-policy`: the spec's vectors as data, property
//! tests and a differential test against a naive reference implementation for
//! tool authority; data-driven cases and a model-based property test for the
//! egress, outward and routing deciders.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "tests; they read fixture files"
)]

mod cases;
mod fixture;
mod model;
mod naive;
mod one_way_out;
mod plan;
mod props;
mod provider_hosts;
mod relay_route;
mod trigger;
mod vectors;
