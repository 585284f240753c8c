//! A sealed, append-only journal that detects tampering, reordering and
//! truncation.
//!
//! Every record is one line of canonical JSON carrying
//! `mac = HMAC-SHA256(k_epoch, prev_mac ‖ canonical(record))`. The key
//! evolves at every epoch (`k(e+1) = HMAC(k(e), "palisade/evolve")`, the old
//! key overwritten), an `epoch_sealed` record closes every epoch (empty ones
//! too), and a clean shutdown ends the journal with `journal_closed`. A
//! verifier holding the initial key detects any modification, deletion,
//! insertion, reordering or splice, and reports a journal without its end
//! marker as open, never as clean; an [`Anchor`] kept elsewhere makes tail
//! truncation detectable too.
//!
//! This crate reads no clock and no environment: callers pass the time of
//! each record. Its only IO is the journal file and its lock file
//! (`<journal>.lock`), and, in [`ship::Shipper`] only, the shipper's state
//! file (`<journal>.ship-<hash>`) and its one blocking `std::net`
//! connection to a collector. It does **not** protect against the holder of the
//! initial key (who can forge a whole journal), nor detect truncation or
//! deletion of the whole file without an anchor kept off the host; see
//! `docs/journal.md`.
//!
//! Main types: [`JournalWriter`] (appends, group commit, [`JournalWriter::close`]),
//! [`Verifier`], the reader of verified records (an iterator of
//! [`VerifiedEntry`], each handed out only after its MAC checked, ending in
//! a [`Report`] and its [`JournalState`]), [`verify`] for a journal in
//! memory, [`JournalKey`], [`Entry`], [`Kind`] and [`Body`], and [`Secret`],
//! which has no `Serialize` so credential values cannot enter a record.
//!
//! **Invariant:** a record is only ever MAC-checked with its own epoch's
//! key, a record is handed out only after it verified, and a journal
//! without `journal_closed` never verifies as [`JournalState::Closed`].
//!
//! Write three records to a journal, close it, and read them back verified:
//!
//! ```
//! use palisade_evidence::{Body, Entry, JournalKey, JournalState, JournalWriter, Kind, Timestamp, Verifier, WriterOptions};
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("run.jsonl");
//! let key = JournalKey::generate()?;
//! let writer = JournalWriter::create(&path, &key, &WriterOptions::default(), Timestamp(1_000))?;
//! for (i, host) in ["example.org", "example.com", "example.net"].into_iter().enumerate() {
//!     let body = Body::from_value(&serde_json::json!({"host": host, "decision": "allow"}))?;
//!     writer.append(&Entry::new(Timestamp(1_001 + i as u64), "session-1", Kind::EgressConnection, body))?;
//! }
//! let anchor = writer.close(Timestamp(1_010))?;
//!
//! let mut verifier = Verifier::new(std::fs::File::open(&path)?, &key, Some(anchor));
//! let mut hosts = Vec::new();
//! for entry in verifier.by_ref() {
//!     let entry = entry?;
//!     if *entry.kind() == Kind::EgressConnection {
//!         hosts.push(entry.body()["host"].as_str().unwrap_or_default().to_owned());
//!     }
//! }
//! assert_eq!(verifier.finish().state(), JournalState::Closed);
//! assert_eq!(hosts, ["example.org", "example.com", "example.net"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

mod format;
mod key;
mod record;
pub mod ship;
mod verify;
mod writer;

pub use format::JournalId;
pub use key::{EVOLVE_LABEL, JournalKey, KEY_LEN, KeyError, Secret};
pub use record::{
    Body, CustomKind, Entry, Flags, Kind, MAX_BODY_DEPTH, MAX_BODY_LEN, MAX_KIND_LEN,
    MAX_SESSION_LEN, RecordError, Timestamp,
};
pub use verify::{
    Anchor, AnchorError, Failure, FailureKind, JournalState, MAX_LINE_LEN, Report, VerifiedEntry,
    Verifier, verify, verify_reader,
};
pub use writer::{
    Durability, JournalError, JournalWriter, OpenReport, Receipt, SealPolicy, Ticket, WriterOptions,
};

/// Entry points for `cargo fuzz` (see `fuzz/fuzz_targets/`) and the tamper
/// suite; not part of the public API; no semver guarantee (only with the
/// `testing` feature or under `cfg(fuzzing)`).
#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __fuzz {
    use crate::{Anchor, JournalKey, verify};

    /// Feeds arbitrary bytes to the verifier, with and without an anchor.
    pub fn verify_bytes(data: &[u8]) {
        let key = JournalKey::from_bytes([0x5a; crate::KEY_LEN], 0);
        let report = verify(data, &key, None);
        // A report is internally consistent whatever the input.
        if report.failure.is_none() && report.records == 0 {
            // An empty journal must never pass; reaching here is a bug the
            // fuzzer should surface, but library code may not panic.
            std::process::abort();
        }
        if let Some(anchor) = report.last.as_ref() {
            let again = verify(data, &key, Some(anchor));
            if again.failure.is_some() != report.failure.is_some() {
                std::process::abort();
            }
        }
        let far = Anchor {
            journal: crate::JournalId::from_bytes([0; 16]),
            seq: u64::MAX,
            epoch: 0,
            mac: [0; 32],
        };
        let _ = verify(data, &key, Some(&far));
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = Anchor::from_json(text);
            let _ = JournalKey::from_text(text);
        }
        // The fuzzer cannot forge MACs, so also re-seal every well-formed
        // line with the right key: the structural checks behind the MAC
        // (seals, epochs, times, anchors) then see arbitrary input too.
        let resealed = reseal(data, &key);
        let _ = verify(&resealed, &key, None);
    }

    /// Feeds arbitrary bytes to the shipping parsers: a collector's file
    /// (line by line and streamed into central verification), one message,
    /// and RELP frames. What parses as a record must survive re-encoding.
    pub fn ship_parse(data: &[u8]) {
        use crate::ship::{Collector, Hostname, Shipped, parse_message, wire};
        let key = JournalKey::from_bytes([0x5a; crate::KEY_LEN], 0);
        for line in data.split(|&b| b == b'\n') {
            if let Ok(Shipped::Record { line: rec, seq, .. }) = parse_message(line) {
                let again = wire::encode_record(rec, &Hostname::nil());
                match again.as_deref().map(parse_message) {
                    Ok(Ok(Shipped::Record {
                        line: back, seq: s, ..
                    })) if back == rec && s == seq => {}
                    _ => std::process::abort(),
                }
            }
        }
        let mut collector = Collector::new(1 << 20);
        if collector.push_reader(data).is_err() {
            std::process::abort();
        }
        let report = collector.finish(&key);
        if report
            .journals
            .iter()
            .any(|j| !j.forks.is_empty() && j.report.failure.is_none())
        {
            std::process::abort();
        }
        let mut rest = data;
        while let Ok(Some((_, used))) = wire::parse_relp_frame(rest) {
            if used == 0 {
                std::process::abort();
            }
            rest = rest.get(used..).unwrap_or_default();
        }
        // A URL that parses keeps its form: it normalizes to itself, and
        // its host (the name TLS verifies) is part of its address.
        if let Ok(Ok(url)) = std::str::from_utf8(data).map(crate::ship::ShipUrl::parse) {
            let again = crate::ship::ShipUrl::parse(&url.as_url());
            if again.as_ref() != Ok(&url) || !url.as_url().contains(url.host()) {
                std::process::abort();
            }
        }
    }

    /// Recomputes the MAC of every line that parses, chaining as a writer
    /// would, with the key of the epoch the line claims (up to epoch 64).
    pub fn reseal(data: &[u8], key: &JournalKey) -> Vec<u8> {
        let mut out = Vec::with_capacity(data.len());
        let mut prev = [0u8; 32];
        let mut lines = data.split(|&b| b == b'\n').peekable();
        while let Some(line) = lines.next() {
            let last = lines.peek().is_none();
            match crate::format::parse_line(line) {
                Ok(rec) if rec.epoch <= 64 => {
                    let epoch_key = key.derive(rec.epoch).unwrap_or_else(|| key.clone());
                    let mac =
                        crate::format::compute_mac(&epoch_key.mac_state(), &prev, rec.canonical);
                    out.extend_from_slice(rec.canonical);
                    out.extend_from_slice(crate::format::MAC_PREFIX);
                    out.extend_from_slice(hex::encode(mac).as_bytes());
                    out.extend_from_slice(crate::format::MAC_SUFFIX);
                    prev = mac;
                }
                _ => out.extend_from_slice(line),
            }
            if !last {
                out.push(b'\n');
            }
        }
        out
    }

    /// The chain check fed in pieces, for the exhaustive tamper suite: a
    /// snapshot (`Clone`) after every line of an intact journal, then the
    /// damaged rest fed to it, costs one line per case instead of a whole
    /// journal. Not part of the public API.
    #[derive(Clone, Debug)]
    pub struct Pieces(crate::verify::Replay);

    impl Pieces {
        /// A check expecting a journal from its first record.
        #[must_use]
        pub fn new(key: &JournalKey, anchor: Option<Anchor>) -> Self {
            Self(crate::verify::Replay::new(key, anchor))
        }

        /// As [`crate::Verifier::set_classify`].
        pub fn set_classify(&mut self, classify: bool) -> &mut Self {
            self.0.set_classify(classify);
            self
        }

        /// Checks every complete line of `bytes` (from a line boundary);
        /// returns the bytes consumed, stopping at the first failure.
        pub fn feed_lines(&mut self, bytes: &[u8]) -> usize {
            self.0.feed_lines(bytes)
        }

        /// Ends the check; `tail` is what followed the last complete line.
        #[must_use]
        pub fn finish(self, tail: &[u8]) -> crate::Report {
            self.0.finish(tail)
        }
    }
}
