//! Forward security: an attacker who steals the key of epoch `e` cannot
//! rewrite any record of an earlier epoch undetected (systemd
//! CVE-2023-31439 re-sealing), nor skip epochs (CVE-2023-31438).

use palisade_evidence::{FailureKind, JournalState, verify};

use crate::util::{
    TEST_KEY_BYTES, epoch_of, every_records, line_starts, raw_key, rechain, written,
};

/// Replaces `"i":N` by `"i":N+1000000` in line `idx`.
fn edit_line(bytes: &[u8], idx: usize) -> Vec<u8> {
    let starts = line_starts(bytes);
    let line = std::str::from_utf8(&bytes[starts[idx]..starts[idx + 1]]).unwrap();
    let edited = if let Some(at) = line.find(r#""body":{"i":"#) {
        let at = at + r#""body":{"i":"#.len();
        format!("{}9{}", &line[..at], &line[at..])
    } else {
        // A journal record (opened, seal): change its session instead.
        line.replacen(r#""session":"""#, r#""session":"x""#, 1)
    };
    assert_ne!(edited, line);
    let mut out = bytes[..starts[idx]].to_vec();
    out.extend_from_slice(edited.as_bytes());
    out.extend_from_slice(&bytes[starts[idx + 1]..]);
    out
}

#[test]
fn holding_only_a_later_key_cannot_rewrite_earlier_epochs() {
    // 200 records in epochs of 10: about 20 epochs.
    let w = written(200, every_records(10));
    let starts = line_starts(&w.bytes);
    let lines = starts.len() - 1;
    let epochs: Vec<u64> = (0..lines)
        .map(|i| epoch_of(&w.bytes[starts[i]..starts[i + 1]]))
        .collect();
    let stolen_epoch = 12;
    let stolen = raw_key(TEST_KEY_BYTES, stolen_epoch);
    let mut attempts = 0;
    for idx in (0..lines).filter(|&i| epochs[i] < stolen_epoch) {
        let edited = edit_line(&w.bytes, idx);
        // Best effort of the attacker: every key it can derive for epochs
        // at or after the stolen one, the stolen key for earlier epochs.
        let forged = rechain(&edited, idx, &|epoch| {
            if epoch >= stolen_epoch {
                raw_key(&stolen, epoch - stolen_epoch)
            } else {
                stolen
            }
        });
        let report = verify(&forged, &w.key, None);
        let failure = report.failure.unwrap();
        assert_eq!(failure.seq, idx as u64, "rewriting line {}", idx + 1);
        assert_eq!(
            failure.kind,
            FailureKind::EpochKeyMismatch,
            "line {}",
            idx + 1
        );
        attempts += 1;
    }
    assert!(attempts > 100);

    // Positive control 1: rewriting a record of the stolen epoch or later
    // is possible: this is what forward security does not cover, and shows
    // the attacker's tool works.
    let idx = epochs.iter().position(|&e| e == stolen_epoch + 1).unwrap() + 1;
    let edited = edit_line(&w.bytes, idx);
    let forged = rechain(&edited, idx, &|epoch| {
        raw_key(&stolen, epoch - stolen_epoch)
    });
    assert_eq!(verify(&forged, &w.key, None).state(), JournalState::Closed);
    // ... but an anchor taken before the theft still exposes it.
    let report = verify(&forged, &w.key, Some(&w.anchor));
    assert_eq!(report.failure.unwrap().kind, FailureKind::AnchorMismatch);

    // Positive control 2: the holder of the initial key can forge anything.
    let edited = edit_line(&w.bytes, 3);
    let forged = rechain(&edited, 3, &|epoch| raw_key(TEST_KEY_BYTES, epoch));
    assert_eq!(verify(&forged, &w.key, None).state(), JournalState::Closed);
}

#[test]
fn re_sealing_everything_with_the_current_key_is_detected() {
    // CVE-2023-31439: strip the old seals and re-seal with the current key.
    let w = written(60, every_records(10));
    let stolen_epoch = 5;
    let stolen = raw_key(TEST_KEY_BYTES, stolen_epoch);
    let forged = rechain(&w.bytes, 0, &|epoch| {
        raw_key(&stolen, epoch.saturating_sub(stolen_epoch))
    });
    let report = verify(&forged, &w.key, None);
    let failure = report.failure.unwrap();
    assert_eq!(failure.seq, 0);
    assert_eq!(failure.kind, FailureKind::EpochKeyMismatch);
}

#[test]
fn dropping_a_seal_or_skipping_an_epoch_is_detected() {
    let w = written(60, every_records(10));
    let starts = line_starts(&w.bytes);
    let text = std::str::from_utf8(&w.bytes).unwrap();
    let seal_idx = text
        .lines()
        .position(|l| l.contains(r#""kind":"epoch_sealed""#))
        .unwrap();
    // Remove the first seal and re-chain with the true keys (an attacker
    // holding the initial key would succeed differently; this one keeps the
    // epoch numbers, so the next record claims an unsealed epoch).
    let mut cut = w.bytes[..starts[seal_idx]].to_vec();
    cut.extend_from_slice(&w.bytes[starts[seal_idx + 1]..]);
    let report = verify(&cut, &w.key, None);
    assert_eq!(report.failure.unwrap().seq, seal_idx as u64);
    // Truncate an open journal right after a seal and continue in a later
    // epoch with the keys derived from a stolen later key: a gap in epochs.
    let stolen = raw_key(TEST_KEY_BYTES, 3);
    let mut skipped = w.bytes[..starts[seal_idx + 1]].to_vec();
    let after_epoch3 = text
        .lines()
        .position(|l| epoch_of(l.as_bytes()) == 3)
        .unwrap();
    skipped.extend_from_slice(&w.bytes[starts[after_epoch3]..]);
    let forged = rechain(&renumber(&skipped), seal_idx + 1, &|epoch| {
        raw_key(&stolen, epoch - 3)
    });
    let report = verify(&forged, &w.key, None);
    assert_eq!(report.failure.unwrap().kind, FailureKind::MissingEpochSeal);
}

/// Rewrites the `seq` fields to run 0, 1, 2, ... (MACs left stale).
fn renumber(bytes: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(bytes).unwrap();
    let mut out = String::new();
    for (seq, line) in text.lines().enumerate() {
        let at = line.find(r#""seq":"#).unwrap() + 6;
        let end = at + line[at..].find(',').unwrap();
        out.push_str(&line[..at]);
        out.push_str(&seq.to_string());
        out.push_str(&line[end..]);
        out.push('\n');
    }
    out.into_bytes()
}
