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

/// Yields the first `good` bytes, then fails.
struct FailingAfter<'a> {
    data: &'a [u8],
    good: usize,
}

impl std::io::Read for FailingAfter<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.good == 0 {
            return Err(std::io::Error::other("disk on fire"));
        }
        let n = buf.len().min(self.good).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        self.good -= n;
        Ok(n)
    }
}

#[test]
fn a_read_error_ends_the_entries_and_the_journal_is_not_valid() {
    let w = written(10, every_records(100));
    let starts = line_starts(&w.bytes);
    // The error comes exactly at a line boundary, after three records.
    let reader = FailingAfter {
        data: &w.bytes,
        good: starts[3],
    };
    let mut verifier = Verifier::new(reader, &w.key, None);
    let items: Vec<_> = verifier.by_ref().collect();
    assert_eq!(items.len(), 4, "three entries, then the error");
    assert!(items[..3].iter().all(Result::is_ok));
    assert_eq!(items[3].as_ref().unwrap_err().to_string(), "disk on fire");
    assert!(verifier.next().is_none());
    let report = verifier.finish();
    assert_eq!(report.state(), JournalState::Invalid);
    assert!(
        report
            .failure
            .unwrap()
            .message
            .contains("could not be read"),
        "a journal whose reading failed is never reported valid"
    );
    // The control: the same bytes read without an error verify.
    let (entries, report) = read_all(&w.bytes, &w.key);
    assert_eq!(report.state(), JournalState::Closed);
    assert_eq!(entries.len() as u64, report.records);
}

#[test]
fn sessions_decode_exactly_and_a_non_canonical_one_never_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j");
    let key = crate::util::test_key();
    let writer = palisade_evidence::JournalWriter::create(
        &path,
        &key,
        &crate::util::unsynced(every_records(100)),
        Timestamp(0),
    )
    .unwrap();
    let odd = "a\"b\\c\nd\t\u{1}\u{7f}é/";
    for session in [odd, "plain"] {
        writer
            .append(&palisade_evidence::Entry::new(
                Timestamp(1),
                session,
                Kind::EgressConnection,
                palisade_evidence::Body::empty(),
            ))
            .unwrap();
    }
    writer.close(Timestamp(2)).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let (entries, report) = read_all(&bytes, &key);
    assert_eq!(report.state(), JournalState::Closed);
    assert_eq!(entries[1].session(), odd);
    assert_eq!(entries[2].session(), "plain");
    // Only the key's holder could seal an escape the writer never writes;
    // it is refused where the line is read, by both verifiers alike.
    let text = String::from_utf8(bytes).unwrap();
    let forged = text.replacen(r#""session":"plain""#, r#""session":"pl\qain""#, 1);
    assert_ne!(forged, text);
    let resealed = palisade_evidence::__fuzz::reseal(forged.as_bytes(), &key);
    let whole = verify(&resealed, &key, None);
    let failure = whole.failure.clone().unwrap();
    assert_eq!((failure.kind, failure.seq), (FailureKind::Malformed, 2));
    assert!(failure.message.contains("escape"), "{}", failure.message);
    let (entries, streamed) = read_all(&resealed, &key);
    assert_eq!(streamed.failure, whole.failure);
    assert_eq!(entries.len(), 2);
}

#[test]
fn the_deepest_body_the_writer_accepts_verifies() {
    let mut deep = serde_json::Value::Null;
    for _ in 0..palisade_evidence::MAX_BODY_DEPTH {
        deep = serde_json::json!({ "x": deep });
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j");
    let key = crate::util::test_key();
    let writer = palisade_evidence::JournalWriter::create(
        &path,
        &key,
        &crate::util::unsynced(every_records(100)),
        Timestamp(0),
    )
    .unwrap();
    let body = palisade_evidence::Body::from_value(&deep).unwrap();
    writer
        .append(&palisade_evidence::Entry::new(
            Timestamp(1),
            "s",
            Kind::OutwardAction,
            body,
        ))
        .unwrap();
    writer.close(Timestamp(2)).unwrap();
    let (entries, report) = read_all(&std::fs::read(&path).unwrap(), &key);
    assert_eq!(report.state(), JournalState::Closed, "{:?}", report.failure);
    assert_eq!(entries[1].body(), &deep);
}
