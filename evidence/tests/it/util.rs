//! Helpers shared by the integration tests.

use std::num::NonZeroU64;
use std::path::PathBuf;

use hmac::{Hmac, Mac};
use palisade_evidence::{
    Anchor, Body, Durability, Entry, Flags, JournalKey, JournalWriter, Kind, SealPolicy, Timestamp,
    WriterOptions,
};
use sha2::Sha256;

/// A journal written for a test, kept in its own temporary directory.
pub(crate) struct Written {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) path: PathBuf,
    pub(crate) key: JournalKey,
    pub(crate) anchor: Anchor,
    pub(crate) bytes: Vec<u8>,
}

pub(crate) fn test_key() -> JournalKey {
    JournalKey::from_bytes(*b"palisade-test-key-0123456789abcd", 0)
}

pub(crate) fn unsynced(seal: SealPolicy) -> WriterOptions {
    WriterOptions::default()
        .with_durability(Durability::Unsynced)
        .with_seal(seal)
}

pub(crate) fn every_records(n: u64) -> SealPolicy {
    SealPolicy::new(NonZeroU64::new(n), None)
}

pub(crate) fn entry(i: u64) -> Entry {
    let kinds = [
        Kind::EgressConnection,
        Kind::RelayRequest,
        Kind::OutwardAction,
        Kind::TaintRaised,
    ];
    let kind = kinds[(i % 4) as usize].clone();
    let mut entry = Entry::new(
        Timestamp(1_000_000 + i),
        "s1",
        kind,
        Body::from_value(&serde_json::json!({ "i": i })).unwrap(),
    );
    if i % 4 == 2 {
        entry = entry.with_flags(Flags::IRREVERSIBLE);
    }
    entry
}

/// Writes `n` caller records (plus the journal's own), closed.
pub(crate) fn written(n: u64, seal: SealPolicy) -> Written {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let key = test_key();
    let writer = JournalWriter::create(&path, &key, &unsynced(seal), Timestamp(1_000_000)).unwrap();
    for i in 0..n {
        writer.append(&entry(i)).unwrap();
    }
    let anchor = writer.close(Timestamp(1_000_000 + n)).unwrap();
    drop(writer);
    let bytes = std::fs::read(&path).unwrap();
    Written {
        _dir: dir,
        path,
        key,
        anchor,
        bytes,
    }
}

/// Start offsets of every line, plus the total length at the end.
pub(crate) fn line_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = vec![0];
    for (idx, b) in bytes.iter().enumerate() {
        if *b == b'\n' {
            starts.push(idx + 1);
        }
    }
    if *starts.last().unwrap() != bytes.len() {
        starts.push(bytes.len());
    }
    starts
}

/// Recomputes the MAC of every line from `from` on, as an attacker would,
/// with `key_for(epoch)`; an independent implementation of the format's
/// MAC rule (`HMAC(k, prev_mac ‖ line[..len-74])`).
pub(crate) fn rechain(bytes: &[u8], from: usize, key_for: &dyn Fn(u64) -> [u8; 32]) -> Vec<u8> {
    let starts = line_starts(bytes);
    let lines: Vec<&[u8]> = starts.windows(2).map(|w| &bytes[w[0]..w[1] - 1]).collect();
    let mut out = Vec::new();
    let mut prev = [0u8; 32];
    for (idx, line) in lines.iter().enumerate() {
        let split = line.len() - 74;
        let canonical = &line[..split];
        if idx < from {
            out.extend_from_slice(line);
            out.push(b'\n');
            hex::decode_to_slice(&line[split + 8..split + 72], &mut prev).unwrap();
            continue;
        }
        let epoch = epoch_of(canonical);
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key_for(epoch)).unwrap();
        mac.update(&prev);
        mac.update(canonical);
        prev = mac.finalize().into_bytes().into();
        out.extend_from_slice(canonical);
        out.extend_from_slice(br#","mac":""#);
        out.extend_from_slice(hex::encode(prev).as_bytes());
        out.extend_from_slice(b"\"}\n");
    }
    out
}

/// The `epoch` field of a canonical line.
pub(crate) fn epoch_of(line: &[u8]) -> u64 {
    let text = std::str::from_utf8(line).unwrap();
    let at = text.find(r#""epoch":"#).unwrap() + 8;
    text[at..].split(',').next().unwrap().parse().unwrap()
}

/// The raw key bytes of `key` evolved to `epoch`, derived independently of
/// the crate: `k(e+1) = HMAC(k(e), "palisade/evolve")`.
pub(crate) fn raw_key(k0: &[u8; 32], epoch: u64) -> [u8; 32] {
    let mut key = *k0;
    for _ in 0..epoch {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
        mac.update(b"palisade/evolve");
        key = mac.finalize().into_bytes().into();
    }
    key
}

pub(crate) const TEST_KEY_BYTES: &[u8; 32] = b"palisade-test-key-0123456789abcd";

/// Opens a journal, retrying while another process briefly holds its lock:
/// a child spawned by a concurrent test inherits the lock file's open file
/// description between `fork` and `exec`.
pub(crate) fn open_retry(
    path: &std::path::Path,
    key: &JournalKey,
    options: &WriterOptions,
    now: Timestamp,
) -> Result<(JournalWriter, palisade_evidence::OpenReport), palisade_evidence::JournalError> {
    for _ in 0..200 {
        match JournalWriter::open(path, key, options, now) {
            Err(palisade_evidence::JournalError::Locked { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
    JournalWriter::open(path, key, options, now)
}
