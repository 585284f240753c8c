//! Helpers shared by the evidence bench binaries.

use std::num::NonZeroU64;

use palisade_evidence::{Body, Durability, Entry, Kind, SealPolicy, Timestamp, WriterOptions};

/// A body whose canonical form is exactly `len` bytes.
pub(crate) fn body_of_len(len: usize) -> Body {
    let overhead = r#"{"pad":""}"#.len();
    let body = Body::from_value(&serde_json::json!({ "pad": "x".repeat(len - overhead) })).unwrap();
    assert_eq!(body.as_str().len(), len);
    body
}

pub(crate) fn entry(body: Body, t: u64) -> Entry {
    Entry::new(
        Timestamp(1_000_000 + t / 1000),
        "session-0001",
        Kind::EgressConnection,
        body,
    )
}

pub(crate) fn options(durability: Durability) -> WriterOptions {
    WriterOptions::default()
        .with_durability(durability)
        .with_seal(SealPolicy::new(
            NonZeroU64::new(10_000),
            NonZeroU64::new(15 * 60 * 1000),
        ))
}

/// CPU time of the calling thread in seconds (`/proc/thread-self/schedstat`),
/// so single-threaded figures stay meaningful on a loaded machine.
pub(crate) fn thread_cpu() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |ns| ns / 1e9)
}
