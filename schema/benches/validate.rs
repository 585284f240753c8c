//! Benchmark: validate a generated bundle of 100 workflows × 10 steps.
//!
//! Prints one JSON line per measurement for `cargo xtask bench`:
//! `{"suite":"check","name":"validate_100x10","runs":N,"min_ns":..,"median_ns":..,"max_ns":..}`.
//! Run with `cargo bench -p palisade-schema --bench validate`.

#![allow(
    clippy::disallowed_methods,
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "a benchmark measures time and prints its figures"
)]

use std::hint::black_box;
use std::time::Instant;

const WORKFLOWS: usize = 100;
const STEPS: usize = 10;

fn main() {
    let files = palisade_schema::__bench::bundle(WORKFLOWS, STEPS);
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_bytes()))
        .collect();
    // Sanity: the generated bundle is valid, so the figure measures a full check.
    let (config, warnings) = palisade_schema::parse_bundle(&refs).unwrap().into_parts();
    assert!(warnings.is_empty(), "{warnings:#?}");
    assert_eq!(config.triggers.len(), WORKFLOWS);
    assert!(config.triggers.iter().all(|t| t.steps.len() == STEPS));

    let runs = std::env::var("PALISADE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30usize);
    for _ in 0..3 {
        black_box(palisade_schema::parse_bundle(black_box(&refs)).is_ok());
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        black_box(palisade_schema::parse_bundle(black_box(&refs)).is_ok());
        times.push(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    times.sort_unstable();
    let bytes: usize = files.iter().map(|(_, t)| t.len()).sum();
    println!(
        "{{\"suite\":\"check\",\"name\":\"validate_100x10\",\"runs\":{runs},\"min_ns\":{},\"median_ns\":{},\"max_ns\":{},\"bytes\":{bytes}}}",
        times[0],
        times[runs / 2],
        times[runs - 1]
    );
}
