//! The tamper suite: every single-bit flip, deletion, duplication, swap,
//! truncation and splice of a 1,000-record journal is detected.
//!
//! Verifying the whole journal after each of ~1.5 million flips would take
//! too long, so the verifier is resumed from a snapshot taken just before
//! the damaged line (a `Verifier` is `Clone`); a sample of cases is also
//! verified from scratch to check that resuming changes nothing.

use std::collections::BTreeMap;

use palisade_evidence::__fuzz::Pieces;
use palisade_evidence::{FailureKind, JournalState, verify};

use crate::util::{Written, every_records, line_starts, written};

const RECORDS: u64 = 1_000;

struct Suite {
    w: Written,
    starts: Vec<usize>,
    /// `snaps[i]`: the verifier (with the final anchor) after lines `..i`.
    snaps: Vec<Pieces>,
    /// The same without an anchor.
    bare: Vec<Pieces>,
}

fn suite() -> Suite {
    // Epochs of 97 records: the journal spans 11 epochs and seals.
    let w = written(RECORDS, every_records(97));
    let starts = line_starts(&w.bytes);
    let mut snaps = Vec::with_capacity(starts.len());
    let mut bare = Vec::with_capacity(starts.len());
    let mut v = Pieces::new(&w.key, Some(w.anchor.clone()));
    let mut b = Pieces::new(&w.key, None);
    // The bare verifier serves the exhaustive loops: it skips the costly
    // failure classification (detection is unaffected).
    b.set_classify(false);
    for pair in starts.windows(2) {
        snaps.push(v.clone());
        bare.push(b.clone());
        let line = &w.bytes[pair[0]..pair[1]];
        assert_eq!(v.feed_lines(line), line.len());
        assert_eq!(b.feed_lines(line), line.len());
    }
    snaps.push(v);
    bare.push(b);
    Suite {
        w,
        starts,
        snaps,
        bare,
    }
}

impl Suite {
    fn lines(&self) -> usize {
        self.starts.len() - 1
    }

    fn line(&self, idx: usize) -> &[u8] {
        &self.w.bytes[self.starts[idx]..self.starts[idx + 1]]
    }

    /// Verifies `rest` as the journal from line `idx` on.
    fn resume(&self, idx: usize, rest: &[u8], anchored: bool) -> palisade_evidence::Report {
        let mut v = if anchored {
            self.snaps[idx].clone()
        } else {
            self.bare[idx].clone()
        };
        let used = v.feed_lines(rest);
        v.finish(&rest[used..])
    }
}

#[test]
fn untouched_journal_verifies_from_scratch_and_from_every_snapshot() {
    let s = suite();
    let report = verify(&s.w.bytes, &s.w.key, Some(&s.w.anchor));
    assert_eq!(report.state(), JournalState::Closed, "{:?}", report.failure);
    assert!(report.sealed_epochs >= 10);
    for idx in 0..s.lines() {
        let rest = &s.w.bytes[s.starts[idx]..];
        assert_eq!(s.resume(idx, rest, true).state(), JournalState::Closed);
    }
}

#[test]
fn every_single_bit_flip_of_every_byte_is_detected() {
    let s = suite();
    let mut bytes = s.w.bytes.clone();
    let mut kinds: BTreeMap<FailureKind, u64> = BTreeMap::new();
    let mut flips = 0u64;
    for idx in 0..s.lines() {
        let (start, end) = (s.starts[idx], s.starts[idx + 1]);
        for pos in start..end {
            for bit in 0..8 {
                bytes[pos] ^= 1 << bit;
                let report = s.resume(idx, &bytes[start..], false);
                let failure = report.failure.as_ref().unwrap_or_else(|| {
                    panic!(
                        "flip of bit {bit} at byte {pos} (line {}) was not detected",
                        idx + 1
                    )
                });
                // The failure is at or right after the damaged record.
                assert!(
                    failure.line == idx as u64 + 1 || failure.line == idx as u64 + 2,
                    "flip at byte {pos}: failure reported at line {}",
                    failure.line
                );
                *kinds.entry(failure.kind).or_default() += 1;
                if flips.is_multiple_of(4_999) {
                    let full = verify(&bytes, &s.w.key, None).failure.unwrap();
                    assert_eq!(
                        (full.seq, full.line, full.offset),
                        (failure.seq, failure.line, failure.offset),
                        "resumed and full verify differ"
                    );
                }
                bytes[pos] ^= 1 << bit;
                flips += 1;
            }
        }
    }
    assert_eq!(bytes, s.w.bytes);
    assert_eq!(flips, 8 * s.w.bytes.len() as u64);
    println!("{flips} flips detected: {kinds:?}");
    assert!(kinds.contains_key(&FailureKind::MacMismatch));
}

#[test]
fn deleting_any_record_is_detected() {
    let s = suite();
    for idx in 0..s.lines() {
        let rest = &s.w.bytes[s.starts[idx + 1]..];
        // Without an anchor, only deleting the final `journal_closed` leaves
        // a consistent journal, and that one is reported open, never clean.
        let report = s.resume(idx, rest, false);
        if idx + 1 == s.lines() {
            assert_eq!(report.state(), JournalState::Open);
        } else {
            let kind = report.failure.unwrap().kind;
            assert!(
                matches!(kind, FailureKind::SeqGap | FailureKind::Malformed),
                "deleting line {}: {kind}",
                idx + 1
            );
        }
        // With the anchor it is an error in every case.
        assert_eq!(s.resume(idx, rest, true).state(), JournalState::Invalid);
    }
    // A sample verified from scratch.
    for idx in [0, 1, 97, 500, s.lines() - 2, s.lines() - 1] {
        let mut bytes = s.w.bytes[..s.starts[idx]].to_vec();
        bytes.extend_from_slice(&s.w.bytes[s.starts[idx + 1]..]);
        let report = verify(&bytes, &s.w.key, Some(&s.w.anchor));
        assert_eq!(report.state(), JournalState::Invalid, "line {}", idx + 1);
    }
}

#[test]
fn duplicating_any_record_is_detected() {
    let s = suite();
    for idx in 0..s.lines() {
        // Line `idx` again right after itself.
        let mut spliced = s.line(idx).to_vec();
        spliced.extend_from_slice(&s.w.bytes[s.starts[idx + 1]..]);
        let report = s.resume(idx + 1, &spliced, false);
        let failure = report.failure.unwrap();
        assert!(
            matches!(
                failure.kind,
                FailureKind::Reordered | FailureKind::Malformed
            ),
            "duplicating line {}: {}",
            idx + 1,
            failure.kind
        );
        assert_eq!(failure.line, idx as u64 + 2);
    }
}

#[test]
fn swapping_any_two_adjacent_records_is_detected() {
    let s = suite();
    for idx in 0..s.lines() - 1 {
        let mut swapped = s.line(idx + 1).to_vec();
        swapped.extend_from_slice(s.line(idx));
        swapped.extend_from_slice(&s.w.bytes[s.starts[idx + 2]..]);
        let report = s.resume(idx, &swapped, true);
        let failure = report.failure.unwrap();
        assert_eq!(
            failure.kind,
            FailureKind::Reordered,
            "swapping line {}",
            idx + 1
        );
        assert_eq!(failure.seq, idx as u64);
    }
    // Swapping distant records (first epoch with last) from scratch.
    let mut lines: Vec<&[u8]> = (0..s.lines()).map(|i| s.line(i)).collect();
    lines.swap(5, 900);
    let report = verify(&lines.concat(), &s.w.key, None);
    assert_eq!(report.failure.unwrap().kind, FailureKind::Reordered);
}

#[test]
fn truncating_at_every_record_boundary_is_detected_with_the_anchor() {
    let s = suite();
    for keep in 0..s.lines() {
        let with_anchor = s.resume(keep, &[], true);
        let failure = with_anchor.failure.unwrap();
        let expected = if keep == 0 {
            FailureKind::Malformed // An empty journal.
        } else {
            FailureKind::TruncatedBeforeAnchor
        };
        assert_eq!(failure.kind, expected, "keeping {keep} lines");
        // From scratch, on the truncated bytes.
        if keep % 50 == 0 {
            let report = verify(&s.w.bytes[..s.starts[keep]], &s.w.key, Some(&s.w.anchor));
            assert_eq!(report.failure.unwrap().kind, expected);
        }
        // Without the anchor it is never reported clean.
        assert_ne!(s.resume(keep, &[], false).state(), JournalState::Closed);
    }
    // Positive control: the whole journal with its anchor.
    assert_eq!(s.resume(s.lines(), &[], true).state(), JournalState::Closed);
}

#[test]
fn truncating_at_every_byte_offset_is_never_clean() {
    let s = suite();
    for idx in 0..s.lines() {
        for cut in s.starts[idx]..s.starts[idx + 1] {
            let report = s.resume(idx, &s.w.bytes[s.starts[idx]..cut], false);
            assert_ne!(report.state(), JournalState::Closed, "cut at {cut}");
            if cut > s.starts[idx] {
                assert_eq!(report.failure.unwrap().kind, FailureKind::TornTail);
            }
        }
    }
}

#[test]
fn splicing_two_journals_written_with_the_same_key_is_detected() {
    let a = suite();
    let b = written(RECORDS, every_records(97));
    assert_eq!(verify(&b.bytes, &b.key, None).state(), JournalState::Closed);
    let b_starts = line_starts(&b.bytes);
    // Replace any one record of A by B's record at the same position.
    for idx in (0..a.lines()).step_by(7) {
        let mut spliced = b.bytes[b_starts[idx]..b_starts[idx + 1]].to_vec();
        spliced.extend_from_slice(&a.w.bytes[a.starts[idx + 1]..]);
        let report = a.resume(idx, &spliced, false);
        let failure = report.failure.unwrap();
        // B's opening record is a valid start on its own; A's next record
        // then belongs to another journal.
        assert_eq!(failure.kind, FailureKind::ForeignRecord, "line {}", idx + 1);
        assert_eq!(failure.line, idx.max(1) as u64 + 1);
    }
    // A's head with B's tail.
    let mut spliced = a.w.bytes[..a.starts[500]].to_vec();
    spliced.extend_from_slice(&b.bytes[b_starts[500]..]);
    let report = verify(&spliced, &a.w.key, None);
    assert_eq!(report.failure.unwrap().kind, FailureKind::ForeignRecord);
    // A's anchor does not fit B.
    let report = verify(&b.bytes, &b.key, Some(&a.w.anchor));
    assert_eq!(report.state(), JournalState::Invalid);
}

/// A small deterministic generator (xorshift64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn random_multi_byte_mutations_insertions_and_deletions_are_detected() {
    let w = written(100, every_records(9));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let len = w.bytes.len();
    for round in 0..3_000 {
        let mut bytes = w.bytes.clone();
        let what = round % 4;
        match what {
            0 => {
                // XOR 1 to 4 bytes with non-zero masks.
                for _ in 0..=rng.below(4) {
                    let at = rng.below(len);
                    bytes[at] ^= (rng.below(255) + 1) as u8;
                }
            }
            1 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(600));
                bytes.drain(at..at + n);
            }
            2 => {
                let at = rng.below(len + 1);
                let junk: Vec<u8> = (0..1 + rng.below(40)).map(|_| rng.next() as u8).collect();
                bytes.splice(at..at, junk);
            }
            _ => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(600));
                let copy = bytes[at..at + n].to_vec();
                bytes.splice(at + n..at + n, copy);
            }
        }
        if bytes == w.bytes {
            continue; // A mutation that changed nothing (XOR twice).
        }
        let report = verify(&bytes, &w.key, Some(&w.anchor));
        assert_eq!(
            report.state(),
            JournalState::Invalid,
            "round {round} (mutation {what}) went undetected"
        );
    }
}

/// A reader that hands out a few bytes at a time.
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
}

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.step.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

#[test]
fn streaming_verification_agrees_with_whole_buffer_verification() {
    let w = written(300, every_records(31));
    let starts = line_starts(&w.bytes);
    let mut flipped = w.bytes.clone();
    flipped[starts[150] + 40] ^= 4;
    let torn = &w.bytes[..w.bytes.len() - 9];
    let truncated = &w.bytes[..starts[200]];
    for (name, bytes) in [
        ("intact", &w.bytes[..]),
        ("flipped", &flipped[..]),
        ("torn", torn),
        ("truncated", truncated),
    ] {
        let whole = verify(bytes, &w.key, Some(&w.anchor));
        for step in [1, 7, 4096, usize::MAX] {
            let streamed = palisade_evidence::verify_reader(
                Trickle { data: bytes, step },
                &w.key,
                Some(&w.anchor),
            )
            .unwrap();
            assert_eq!(streamed.state(), whole.state(), "{name} step {step}");
            assert_eq!(streamed.failure, whole.failure, "{name} step {step}");
            assert_eq!(streamed.records, whole.records, "{name} step {step}");
            assert_eq!(streamed.torn_tail_bytes, whole.torn_tail_bytes, "{name}");
        }
    }
    // Positive control for the verdicts compared above.
    assert_eq!(
        verify(&w.bytes, &w.key, Some(&w.anchor)).state(),
        JournalState::Closed
    );
}

#[test]
fn an_overlong_line_is_refused_without_buffering_it_whole() {
    let w = written(3, every_records(10));
    let mut bytes = w.bytes.clone();
    bytes.extend(std::iter::repeat_n(
        b'x',
        palisade_evidence::MAX_LINE_LEN + 10,
    ));
    bytes.push(b'\n');
    let whole = verify(&bytes, &w.key, None).failure.unwrap();
    assert_eq!(whole.kind, FailureKind::Malformed);
    assert!(whole.message.contains("longer than"), "{}", whole.message);
    let streamed = palisade_evidence::verify_reader(&bytes[..], &w.key, None).unwrap();
    assert_eq!(streamed.failure.unwrap().kind, FailureKind::Malformed);
}

#[test]
fn an_overlong_unterminated_tail_is_malformed_whole_or_streamed() {
    // No newline at all, and valid records followed by an over-long
    // unterminated line: too long to be a crash's torn tail, so both
    // entry points say `malformed`, never one `torn_tail` and the other
    // `malformed`.
    let w = written(3, every_records(10));
    let long = vec![b'x'; palisade_evidence::MAX_LINE_LEN + 10];
    let mut after_records = w.bytes.clone();
    after_records.extend_from_slice(&long);
    for (name, bytes) in [
        ("no newline", &long[..]),
        ("after records", &after_records[..]),
    ] {
        let whole = verify(bytes, &w.key, None).failure.unwrap();
        assert_eq!(
            whole.kind,
            FailureKind::Malformed,
            "{name}: {}",
            whole.message
        );
        assert!(whole.message.contains("longer than"), "{}", whole.message);
        for step in [4096, usize::MAX] {
            let streamed =
                palisade_evidence::verify_reader(Trickle { data: bytes, step }, &w.key, None)
                    .unwrap()
                    .failure
                    .unwrap();
            assert_eq!(streamed, whole, "{name} step {step}");
        }
    }
    // Positive control: a short unterminated tail is still a torn tail.
    let torn = &w.bytes[..w.bytes.len() - 9];
    let whole = verify(torn, &w.key, None).failure.unwrap();
    assert_eq!(whole.kind, FailureKind::TornTail);
    let streamed = palisade_evidence::verify_reader(torn, &w.key, None).unwrap();
    assert_eq!(streamed.failure.unwrap(), whole);
}

#[test]
fn verified_lines_yield_exactly_the_verified_records() {
    let w = written(50, every_records(7));
    let starts = line_starts(&w.bytes);
    let mut flipped = w.bytes.clone();
    flipped[starts[20] + 40] ^= 4;
    for (name, bytes, expect) in [
        ("intact", &w.bytes[..], JournalState::Closed),
        ("flipped", &flipped[..], JournalState::Invalid),
    ] {
        let whole = verify(bytes, &w.key, None);
        let mut lines = palisade_evidence::Verifier::new(
            Trickle {
                data: bytes,
                step: 333,
            },
            &w.key,
            None,
        );
        let mut seen = Vec::new();
        while let Some(line) = lines.next_line().unwrap() {
            seen.push(line.to_vec());
        }
        let report = lines.finish();
        assert_eq!(report.state(), expect, "{name}");
        assert_eq!(report.failure, whole.failure, "{name}");
        assert_eq!(seen.len() as u64, whole.records, "{name}");
        let expected: Vec<Vec<u8>> = bytes
            .split(|&b| b == b'\n')
            .take(seen.len())
            .map(<[u8]>::to_vec)
            .collect();
        assert_eq!(seen, expected, "{name}");
    }
}
