//! The verified reader's memory does not grow with the journal: reading a
//! journal four times as long through `Verifier` peaks no higher (beyond
//! noise) than reading the short one, so nothing is kept per record beyond
//! the entry handed out.
//!
//! Its own test binary, with a single test, so that no other test's
//! allocations move the process's peak resident set, which it measures
//! (`VmHWM`, reset through `/proc/self/clear_refs`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::num::NonZeroU64;

use palisade_evidence::{
    Body, Durability, Entry, JournalKey, JournalState, JournalWriter, Kind, SealPolicy, Timestamp,
    Verifier, WriterOptions,
};

fn journal(records: u64, dir: &std::path::Path, key: &JournalKey) -> Vec<u8> {
    let path = dir.join(format!("j{records}"));
    let options = WriterOptions::default()
        .with_durability(Durability::Unsynced)
        .with_seal(SealPolicy::new(NonZeroU64::new(1_000), None));
    let writer = JournalWriter::create(&path, key, &options, Timestamp(0)).unwrap();
    for i in 0..records {
        let body = Body::from_value(&serde_json::json!({"i": i, "pad": "x".repeat(100)})).unwrap();
        writer
            .append(&Entry::new(Timestamp(i), "s", Kind::EgressConnection, body))
            .unwrap();
    }
    writer.close(Timestamp(records)).unwrap();
    std::fs::read(&path).unwrap()
}

fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Peak resident set growth (KiB) while every entry of `bytes` is read and
/// dropped; returns it with the number of entries.
fn peak_growth_reading(bytes: &[u8], key: &JournalKey) -> (u64, u64) {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset VmHWM (Linux 4.0+)");
    let before = peak_kib();
    let mut verifier = Verifier::new(bytes, key, None);
    let mut n = 0u64;
    let mut checksum = 0u64;
    for entry in verifier.by_ref() {
        let entry = entry.unwrap();
        checksum = checksum.wrapping_add(entry.body()["i"].as_u64().unwrap_or(0));
        n += 1;
    }
    assert_eq!(verifier.finish().state(), JournalState::Closed);
    assert!(checksum > 0);
    (peak_kib().saturating_sub(before), n)
}

#[test]
fn reading_a_longer_journal_needs_no_more_memory() {
    let dir = tempfile::tempdir().unwrap();
    let key = JournalKey::from_bytes([7; palisade_evidence::KEY_LEN], 0);
    // Both well past the 1 MiB read chunk (about 200 bytes a line).
    let short = journal(20_000, dir.path(), &key);
    let long = journal(80_000, dir.path(), &key);
    assert!(long.len() > 15 << 20, "{}", long.len());
    // Warm up the allocator so both measured runs start alike.
    let _ = peak_growth_reading(&short, &key);
    let (short_growth, short_n) = peak_growth_reading(&short, &key);
    let (long_growth, long_n) = peak_growth_reading(&long, &key);
    assert!(long_n > 4 * short_n - 1_000);
    // Kept entries would cost far more than 60,000 × 200 bytes (12 MiB);
    // the reader itself holds one chunk plus one line (a few MiB at most).
    assert!(
        long_growth <= short_growth + 4 * 1024,
        "peak grew by {long_growth} KiB reading {long_n} records, {short_growth} KiB reading {short_n}"
    );
    assert!(long_growth < 8 * 1024, "peak grew by {long_growth} KiB");
}
