//! The verified reader: `Verifier` hands out a record only after it
//! verified, with exactly the fields that were written.

use palisade_evidence::{FailureKind, Flags, JournalState, Kind, Timestamp, Verifier, verify};

use crate::util::{entry, every_records, line_starts, written};

/// Every record, decoded, then the final report, reading `bytes` through
/// the verifier in small steps.
fn read_all(
    bytes: &[u8],
    key: &palisade_evidence::JournalKey,
) -> (
    Vec<palisade_evidence::VerifiedEntry>,
    palisade_evidence::Report,
) {
    let mut verifier = Verifier::new(bytes, key, None);
    let entries: Vec<_> = verifier.by_ref().map(Result::unwrap).collect();
    (entries, verifier.finish())
}

#[test]
fn an_intact_journal_hands_out_every_record_as_written() {
    let w = written(30, every_records(7));
    let (entries, report) = read_all(&w.bytes, &w.key);
    assert_eq!(report.state(), JournalState::Closed, "{:?}", report.failure);
    assert_eq!(entries.len() as u64, report.records);
    let lines: Vec<&[u8]> = w.bytes.split(|&b| b == b'\n').collect();
    for (idx, e) in entries.iter().enumerate() {
        assert_eq!(e.seq(), idx as u64);
        assert_eq!(e.line(), lines[idx], "seq {idx}");
    }
    assert_eq!(*entries[0].kind(), Kind::JournalOpened);
    assert_eq!(*entries.last().unwrap().kind(), Kind::JournalClosed);
    let mine: Vec<_> = entries
        .iter()
        .filter(|e| e.session() == "s1")
        .cloned()
        .collect();
    assert_eq!(mine.len(), 30);
    for (i, e) in mine.iter().enumerate() {
        let want = entry(i as u64);
        assert_eq!(*e.kind(), want.kind, "record {i}");
        assert_eq!(e.time(), want.time, "record {i}");
        assert_eq!(e.flags(), want.flags, "record {i}");
        assert_eq!(e.body(), &serde_json::json!({ "i": i }), "record {i}");
    }
    assert!(mine[2].flags().contains(Flags::IRREVERSIBLE));
    assert!(mine.iter().all(|e| e.time() >= Timestamp(1_000_000)));
}

#[test]
fn a_tampered_record_is_never_handed_out() {
    let w = written(30, every_records(7));
    let starts = line_starts(&w.bytes);
    let whole = read_all(&w.bytes, &w.key).0;
    for line in 0..starts.len() - 1 {
        // Change one digit of the record's time: still a canonical line,
        // only its MAC gives it away.
        let mut damaged = w.bytes.clone();
        let at = starts[line]
            + w.bytes[starts[line]..]
                .windows(8)
                .position(|p| p == b"\"time\":1")
                .unwrap()
            + 8;
        damaged[at] = if damaged[at] == b'1' { b'2' } else { b'1' };
        let (entries, report) = read_all(&damaged, &w.key);
        assert_eq!(report.state(), JournalState::Invalid, "line {line}");
        let failure = report.failure.unwrap();
        assert_eq!(failure.kind, FailureKind::MacMismatch, "line {line}");
        assert_eq!(failure.seq, line as u64);
        assert_eq!(entries.len(), line, "only the records before it");
        assert_eq!(entries[..], whole[..line], "line {line}");
        assert!(
            entries
                .iter()
                .all(|e| e.line() != &damaged[starts[line]..starts[line + 1] - 1])
        );
    }
}

#[test]
fn a_body_that_is_not_json_fails_even_when_its_mac_matches() {
    // Only the key's holder can seal such a line; both verifiers refuse it.
    let w = written(5, every_records(100));
    let text = String::from_utf8(w.bytes.clone()).unwrap();
    let broken = text.replacen(r#""body":{"i":2}"#, r#""body":{"i":2"#, 1);
    assert_ne!(broken, text);
    let resealed = palisade_evidence::__fuzz::reseal(broken.as_bytes(), &w.key);
    let report = verify(&resealed, &w.key, None);
    let failure = report.failure.clone().unwrap();
    assert_eq!(failure.kind, FailureKind::Malformed);
    assert!(failure.message.contains("not JSON"), "{}", failure.message);
    let (entries, streamed) = read_all(&resealed, &w.key);
    assert_eq!(streamed.failure, report.failure);
    assert_eq!(entries.len() as u64, failure.seq);
    // The control: resealing the intact journal keeps it valid.
    let intact = palisade_evidence::__fuzz::reseal(&w.bytes, &w.key);
    assert_eq!(verify(&intact, &w.key, None).state(), JournalState::Closed);
}
