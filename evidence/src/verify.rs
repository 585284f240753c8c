//! Verification: replays the MAC chain with every epoch's own key and reports
//! the first failing record.
//!
//! The verifier works over the exact line bytes: it slices each line into
//! its header fields and the canonical part (see `format`), MACs the
//! canonical bytes, and never re-serializes. It never panics and allocates
//! nothing per record, so its memory is bounded by the caller's input.
//!
//! There is one chain check, [`Replay`]; [`verify`] runs it over bytes in
//! memory, [`Verifier`] over a reader, handing out each record (as a line or
//! as a [`VerifiedEntry`]) only once it has verified, and the writer runs it
//! when it reopens a journal.

use std::fmt;
use std::io::Read;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use subtle::ConstantTimeEq;

use crate::format::{self, JournalId, MacBytes, Parsed};
use crate::key::{JournalKey, MacState};
use crate::record::{Flags, Kind, Timestamp};

/// How far past its own epoch a failing record's MAC is tried, to tell a
/// record sealed with a later epoch's key (`epoch_key_mismatch`) from plain
/// corruption.
const LATER_KEYS_TRIED: u64 = 64;

/// Longest line accepted: a 1 MiB body plus the header, an escaped
/// 256-byte session and the MAC, with room to spare.
pub const MAX_LINE_LEN: usize = crate::record::MAX_BODY_LEN + 8 * 1024;
/// Bytes read at a time by [`verify_reader`].
const READ_CHUNK: usize = 1 << 20;

/// Verifies a journal read from `reader` (e.g. an open file) in 1 MiB
/// chunks, holding at most one line beyond the chunk in memory. The report
/// is the one [`verify`] gives for the same bytes, except that telling
/// `reordered` from `seq_gap` only looks ahead within the bytes already
/// read. It is [`Verifier`] read to the end.
///
/// # Errors
/// Only the reader's errors; every problem with the journal is in the
/// report.
pub fn verify_reader<R: Read>(
    reader: R,
    key: &JournalKey,
    anchor: Option<&Anchor>,
) -> std::io::Result<Report> {
    let mut verifier = Verifier::new(reader, key, anchor.cloned());
    while verifier.next_line()?.is_some() {}
    Ok(verifier.finish())
}

/// One record the verifier has checked: its MAC matched under its own
/// epoch's key, it follows the record before it in the chain, and it passed
/// every structural check up to it.
///
/// Only a [`Verifier`] makes one, from the very bytes it MAC-checked (the
/// fields are read from the in-memory line after its MAC matched, never
/// from the file again), so a `VerifiedEntry` cannot be forged or built
/// from unverified text. It proves the record is authentic and in order,
/// not that the journal is complete: that is the [`JournalState`] of
/// [`Verifier::finish`].
#[derive(Clone, Debug, PartialEq)]
pub struct VerifiedEntry {
    seq: u64,
    epoch: u64,
    time: Timestamp,
    kind: Kind,
    session: String,
    flags: Flags,
    body: Value,
    line: Vec<u8>,
}

impl VerifiedEntry {
    /// The record's sequence number (0 is `journal_opened`).
    #[must_use]
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The epoch whose key sealed it.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The time the writer's caller gave it.
    #[must_use]
    pub fn time(&self) -> Timestamp {
        self.time
    }

    /// What it is about.
    #[must_use]
    pub fn kind(&self) -> &Kind {
        &self.kind
    }

    /// The session it belongs to.
    #[must_use]
    pub fn session(&self) -> &str {
        &self.session
    }

    /// Its flags.
    #[must_use]
    pub fn flags(&self) -> Flags {
        self.flags
    }

    /// Its body.
    #[must_use]
    pub fn body(&self) -> &Value {
        &self.body
    }

    /// The exact line that verified, without its newline.
    #[must_use]
    pub fn line(&self) -> &[u8] {
        &self.line
    }

    /// Reads the fields of a line whose MAC has just been checked.
    fn from_verified_line(line: &[u8]) -> Option<Self> {
        let rec = format::parse_line(line).ok()?;
        let kind = Kind::from_valid(std::str::from_utf8(rec.kind).ok()?);
        let mut quoted = Vec::with_capacity(rec.session.len() + 2);
        quoted.push(b'"');
        quoted.extend_from_slice(rec.session);
        quoted.push(b'"');
        let session: String = serde_json::from_slice(&quoted).ok()?;
        let body: Value = serde_json::from_slice(rec.body).ok()?;
        Some(Self {
            seq: rec.seq,
            epoch: rec.epoch,
            time: Timestamp(rec.time),
            kind,
            session,
            flags: rec.flags,
            body,
            line: line.to_vec(),
        })
    }
}

/// A journal verified as it is read, the reader of verified records.
///
/// [`Verifier::next_entry`] (or the [`Iterator`] impl) hands out each record
/// as a [`VerifiedEntry`] only after it has verified, and stops at the first
/// failure, so a caller that rebuilds state or summarises the journal reads
/// exactly what was verified, with no second parser and no second read of
/// the file (no time-of-check/time-of-use gap); [`Verifier::next_line`] is
/// the same without the decoding. Once the records run out,
/// [`Verifier::finish`] gives the [`Report`] and its [`JournalState`]: the
/// entries prove each record authentic and in order, the state whether the
/// journal is complete.
///
/// Memory is bounded by one read chunk (1 MiB) plus one line of at most
/// [`MAX_LINE_LEN`] bytes, whatever the journal's size; the only allocation
/// per record is the entry handed out, which the caller owns.
///
/// ```
/// use palisade_evidence::{Body, Entry, JournalKey, JournalState, JournalWriter, Kind, Timestamp, Verifier, WriterOptions};
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("run.jsonl");
/// let key = JournalKey::generate()?;
/// let writer = JournalWriter::create(&path, &key, &WriterOptions::default(), Timestamp(1_000))?;
/// let body = Body::from_value(&serde_json::json!({"n": 1}))?;
/// writer.append(&Entry::new(Timestamp(1_001), "s", Kind::custom("my.kind")?, body))?;
/// writer.close(Timestamp(1_002))?;
///
/// let mut verifier = Verifier::new(std::fs::File::open(&path)?, &key, None);
/// let mut mine = Vec::new();
/// for entry in verifier.by_ref() {
///     let entry = entry?;
///     if entry.kind().as_str() == "my.kind" {
///         mine.push(entry.body().clone());
///     }
/// }
/// assert_eq!(verifier.finish().state(), JournalState::Closed);
/// assert_eq!(mine, [serde_json::json!({"n": 1})]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Verifier<R> {
    reader: R,
    replay: Replay,
    buf: Vec<u8>,
    /// Where the unconsumed bytes of `buf` start.
    start: usize,
    /// The read buffer, allocated once.
    chunk: Vec<u8>,
    eof: bool,
}

impl<R> fmt::Debug for Verifier<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("replay", &self.replay)
            .field("eof", &self.eof)
            .finish_non_exhaustive()
    }
}

impl<R: Read> Verifier<R> {
    /// Verifies the journal `reader` yields from its first record; `key`
    /// must be the initial key (see [`verify`]).
    #[must_use]
    pub fn new(reader: R, key: &JournalKey, anchor: Option<Anchor>) -> Self {
        Self {
            reader,
            replay: Replay::new(key, anchor),
            buf: Vec::new(),
            start: 0,
            chunk: vec![0u8; READ_CHUNK],
            eof: false,
        }
    }

    /// Whether a failure is classified precisely (the default). Precise
    /// classification costs extra work once, on the failure path: up to 64
    /// later epoch keys are derived to recognise a record re-sealed with a
    /// later key (`epoch_key_mismatch` rather than `mac_mismatch`), and the
    /// bytes already read are scanned to tell `reordered` from `seq_gap`.
    /// Detection is unaffected when it is off; only the kind gets coarser.
    pub fn set_classify(&mut self, classify: bool) -> &mut Self {
        self.replay.set_classify(classify);
        self
    }

    /// The next verified record, decoded, or `None` at the end of the input
    /// or at the first failure; then call [`Verifier::finish`] for the
    /// state.
    ///
    /// # Errors
    /// Only the reader's errors.
    pub fn next_entry(&mut self) -> std::io::Result<Option<VerifiedEntry>> {
        let Some(line) = self.next_line()? else {
            return Ok(None);
        };
        match VerifiedEntry::from_verified_line(line) {
            Some(entry) => Ok(Some(entry)),
            None => {
                // The chain checks the body is JSON and the session canonical,
                // and the writer nests bodies at most `MAX_BODY_DEPTH` deep; only
                // the key's holder can seal a body nested too deep to decode.
                // Fail closed rather than hand out less.
                let msg = format!(
                    "record seq {} verified but could not be decoded",
                    self.replay.st.next_seq.saturating_sub(1)
                );
                self.replay.fail(FailureKind::Malformed, msg);
                Ok(None)
            }
        }
    }

    /// The next verified record line (without its newline), or `None` at
    /// the end of the input or at the first failure; then call
    /// [`Verifier::finish`] for the state.
    ///
    /// # Errors
    /// Only the reader's errors.
    pub fn next_line(&mut self) -> std::io::Result<Option<&[u8]>> {
        loop {
            if self.replay.report.failure.is_some() {
                return Ok(None);
            }
            let rest = self.buf.get(self.start..).unwrap_or_default();
            if let Some(nl) = memchr::memchr(b'\n', rest) {
                let line = rest.get(..nl).unwrap_or_default();
                let after = rest.get(nl + 1..).unwrap_or_default();
                self.replay.line(line, after);
                if self.replay.report.failure.is_some() {
                    return Ok(None);
                }
                self.replay.st.offset += (nl + 1) as u64;
                self.replay.st.line += 1;
                let from = self.start;
                self.start += nl + 1;
                return Ok(self.buf.get(from..from + nl));
            }
            if rest.len() > MAX_LINE_LEN {
                let msg = format!(
                    "line {} is longer than {MAX_LINE_LEN} bytes",
                    self.replay.st.line
                );
                self.replay.fail(FailureKind::Malformed, msg);
                return Ok(None);
            }
            if self.eof {
                return Ok(None);
            }
            self.buf.drain(..self.start);
            self.start = 0;
            let n = loop {
                match self.reader.read(&mut self.chunk) {
                    Ok(n) => break n,
                    Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(err) => return Err(err),
                }
            };
            self.buf
                .extend_from_slice(self.chunk.get(..n).unwrap_or_default());
            self.eof = n == 0;
        }
    }

    /// Ends verification and reports. Call it once the records ran out
    /// ([`Verifier::next_entry`] or [`Verifier::next_line`] returned
    /// `None`): called earlier, it reads nothing more and judges the journal
    /// as if it ended there.
    #[must_use]
    pub fn finish(self) -> Report {
        let tail = if self.replay.report.failure.is_some() {
            &[][..]
        } else {
            self.buf.get(self.start..).unwrap_or_default()
        };
        self.replay.finish(tail)
    }
}

impl<R: Read> Iterator for Verifier<R> {
    type Item = std::io::Result<VerifiedEntry>;

    /// As [`Verifier::next_entry`]; a read error ends the iteration after
    /// it is yielded.
    fn next(&mut self) -> Option<Self::Item> {
        match self.next_entry() {
            Ok(Some(entry)) => Some(Ok(entry)),
            Ok(None) => None,
            Err(err) => {
                self.eof = true;
                let msg = format!("the journal could not be read: {err}");
                self.replay.fail(FailureKind::Malformed, msg);
                Some(Err(err))
            }
        }
    }
}

/// Verifies a whole journal.
///
/// `key` must be the initial key (epoch 0). When `anchor` is given, the
/// journal must reach the anchored record and carry the anchored MAC there.
#[must_use]
pub fn verify(bytes: &[u8], key: &JournalKey, anchor: Option<&Anchor>) -> Report {
    let mut verifier = Replay::new(key, anchor.cloned());
    let used = verifier.feed_lines(bytes);
    verifier.finish(bytes.get(used..).unwrap_or_default())
}

/// A point in a journal that the caller keeps elsewhere (another host, the
/// operator, a ticket) so that cutting the journal back past it is detected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anchor {
    /// The journal the anchor belongs to.
    pub journal: JournalId,
    /// The anchored record.
    pub seq: u64,
    /// Its epoch.
    pub epoch: u64,
    /// Its MAC.
    pub mac: [u8; 32],
}

impl Anchor {
    /// The JSON form `{"epoch":E,"journal":"…","mac":"…","seq":S}`.
    #[must_use]
    pub fn to_json(&self) -> String {
        let wire = AnchorWire {
            epoch: self.epoch,
            journal: self.journal.to_hex(),
            mac: hex::encode(self.mac),
            seq: self.seq,
        };
        serde_json::to_string(&wire).unwrap_or_default()
    }

    /// Parses the JSON form.
    ///
    /// # Errors
    /// Fails on anything but that form.
    pub fn from_json(text: &str) -> Result<Self, AnchorError> {
        let wire: AnchorWire =
            serde_json::from_str(text).map_err(|err| AnchorError(err.to_string()))?;
        let journal = JournalId::from_hex(&wire.journal)
            .ok_or_else(|| AnchorError("`journal` is not 32 lowercase hex digits".to_owned()))?;
        let mac = format::parse_lower_hex::<32>(wire.mac.as_bytes())
            .ok_or_else(|| AnchorError("`mac` is not 64 lowercase hex digits".to_owned()))?;
        Ok(Self {
            journal,
            seq: wire.seq,
            epoch: wire.epoch,
            mac,
        })
    }
}

/// A malformed anchor.
#[derive(Debug, thiserror::Error)]
#[error("not a journal anchor: {0}")]
pub struct AnchorError(String);

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct AnchorWire {
    epoch: u64,
    journal: String,
    mac: String,
    seq: u64,
}

/// Why verification failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// The MAC does not match: the record was modified, the key is wrong, or
    /// a record before it was removed or changed.
    MacMismatch,
    /// Records are missing: the next record has a higher `seq`.
    SeqGap,
    /// A record is out of place: its `seq` belongs elsewhere.
    Reordered,
    /// The record is sealed with another epoch's key (re-sealing attack,
    /// CVE-2023-31439).
    EpochKeyMismatch,
    /// An epoch ended without its `epoch_sealed` record (CVE-2023-31438).
    MissingEpochSeal,
    /// The journal ends before the anchored record.
    TruncatedBeforeAnchor,
    /// The record at the anchored `seq` is not the anchored one (a fork or a
    /// rewrite).
    AnchorMismatch,
    /// The final line is incomplete (a crash mid-write, not yet recovered).
    TornTail,
    /// The journal is consistent but has no `journal_closed` record: it is
    /// still open or was truncated.
    NotClosed,
    /// A record from another journal.
    ForeignRecord,
    /// A record's time is earlier than the record before it.
    TimeRegression,
    /// A line is not a record in canonical form, or the records break the
    /// journal's structure (no `journal_opened` first, a record after
    /// `journal_closed`, a wrong seal count, an empty journal).
    Malformed,
    /// The key given is not the initial (epoch 0) key.
    KeyNotInitial,
    /// Two different records were shipped for one `seq` (central
    /// verification of a collector's copy): the host's journal forked or
    /// was rewritten.
    ForkedRecord,
}

impl FailureKind {
    /// The stable snake_case name used in reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MacMismatch => "mac_mismatch",
            Self::SeqGap => "seq_gap",
            Self::Reordered => "reordered",
            Self::EpochKeyMismatch => "epoch_key_mismatch",
            Self::MissingEpochSeal => "missing_epoch_seal",
            Self::TruncatedBeforeAnchor => "truncated_before_anchor",
            Self::AnchorMismatch => "anchor_mismatch",
            Self::TornTail => "torn_tail",
            Self::NotClosed => "not_closed",
            Self::ForeignRecord => "foreign_record",
            Self::TimeRegression => "time_regression",
            Self::Malformed => "malformed",
            Self::KeyNotInitial => "key_not_initial",
            Self::ForkedRecord => "forked_record",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The first failure found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Failure {
    /// What failed.
    pub kind: FailureKind,
    /// The `seq` the failing position should have held (the first record
    /// that does not verify).
    pub seq: u64,
    /// The 1-based line of the failing record.
    pub line: u64,
    /// The byte offset where that line starts.
    pub offset: u64,
    /// A precise human-readable description.
    pub message: String,
}

/// The state a verification leaves a journal in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JournalState {
    /// Every record verifies and the journal ends with `journal_closed`.
    Closed,
    /// Every record verifies but there is no `journal_closed`: the journal is
    /// open or was truncated (never reported as clean).
    Open,
    /// A record fails; see [`Report::failure`].
    Invalid,
}

/// What verification found.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Report {
    /// The journal's id (from its first record), if any line parsed.
    pub journal: Option<JournalId>,
    /// Records verified before the first failure.
    pub records: u64,
    /// Epochs closed by a seal (`epoch_sealed` or `journal_closed`).
    pub sealed_epochs: u64,
    /// Records after the last seal (the unsealed tail of an open journal).
    pub unsealed_records: u64,
    /// The last verified record, usable as an anchor.
    pub last: Option<Anchor>,
    /// Time of the first and last verified record (Unix milliseconds).
    pub time_range: Option<(u64, u64)>,
    /// Whether a verified `journal_closed` ends the journal.
    pub closed: bool,
    /// `recovered_torn_tail` records seen (earlier crashes, recovered).
    pub recovered_torn_tails: u64,
    /// Bytes of an incomplete final line, if any.
    pub torn_tail_bytes: u64,
    /// The first failure, if any.
    pub failure: Option<Failure>,
}

impl Report {
    /// The journal's state: `Invalid` on any failure, else `Closed` or
    /// `Open`.
    #[must_use]
    pub fn state(&self) -> JournalState {
        if self.failure.is_some() {
            JournalState::Invalid
        } else if self.closed {
            JournalState::Closed
        } else {
            JournalState::Open
        }
    }

    /// The failure kind, counting an open journal as [`FailureKind::NotClosed`].
    #[must_use]
    pub fn failure_kind(&self) -> Option<FailureKind> {
        match (&self.failure, self.closed) {
            (Some(failure), _) => Some(failure.kind),
            (None, false) => Some(FailureKind::NotClosed),
            (None, true) => None,
        }
    }
}

/// The seal policy written into `journal_opened`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OpenedBody {
    pub(crate) format: u64,
    pub(crate) seal_every_millis: Option<u64>,
    pub(crate) seal_every_records: Option<u64>,
}

/// The body of `epoch_sealed` and `journal_closed`.
#[derive(Clone, Copy, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SealBody {
    pub(crate) epoch: u64,
    pub(crate) records: u64,
}

/// The chain check itself, resumable: feed whole lines, then
/// [`Replay::finish`] with the remainder. [`verify`], [`Verifier`] and the
/// writer's reopening all run it; there is no other.
#[derive(Clone)]
pub(crate) struct Replay {
    pub(crate) st: ChainState,
    anchor: Option<Anchor>,
    pub(crate) report: Report,
    classify: bool,
}

impl fmt::Debug for Replay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replay")
            .field("next_seq", &self.st.next_seq)
            .field("epoch", &self.st.epoch)
            .finish_non_exhaustive()
    }
}

/// The replayed state of the chain after the last verified record.
#[derive(Clone)]
pub(crate) struct ChainState {
    pub(crate) journal: Option<[u8; 32]>,
    pub(crate) next_seq: u64,
    pub(crate) epoch: u64,
    pub(crate) key: JournalKey,
    pub(crate) mac_key: MacState,
    pub(crate) prev_mac: MacBytes,
    pub(crate) last_time: u64,
    pub(crate) epoch_start: u64,
    pub(crate) records_in_epoch: u64,
    pub(crate) policy: OpenedBody,
    pub(crate) closed: bool,
    /// Epochs below this are replayed without MAC checks (a writer that
    /// holds only an evolved key reopening its journal); 0 for `verify`.
    pub(crate) trust_below_epoch: u64,
    /// Byte offset and 1-based number of the next line.
    pub(crate) offset: u64,
    pub(crate) line: u64,
}

impl Replay {
    /// A verifier expecting a journal from its first record.
    #[must_use]
    pub(crate) fn new(key: &JournalKey, anchor: Option<Anchor>) -> Self {
        let mut verifier = Self::with_trust(key, anchor, 0);
        if key.epoch() != 0 {
            verifier.fail(
                FailureKind::KeyNotInitial,
                format!(
                    "verification needs the initial key (epoch 0); this key is at epoch {}",
                    key.epoch()
                ),
            );
        }
        verifier
    }

    /// A verifier whose key may be evolved: epochs below the key's epoch are
    /// replayed without their MACs being checked.
    pub(crate) fn for_writer(key: &JournalKey) -> Self {
        Self::with_trust(key, None, key.epoch())
    }

    fn with_trust(key: &JournalKey, anchor: Option<Anchor>, trust_below_epoch: u64) -> Self {
        Self {
            st: ChainState {
                journal: None,
                next_seq: 0,
                epoch: 0,
                key: key.clone(),
                mac_key: key.mac_state(),
                prev_mac: [0u8; 32],
                last_time: 0,
                epoch_start: 0,
                records_in_epoch: 0,
                policy: OpenedBody::default(),
                closed: false,
                trust_below_epoch,
                offset: 0,
                line: 1,
            },
            anchor,
            classify: true,
            report: Report {
                journal: None,
                records: 0,
                sealed_epochs: 0,
                unsealed_records: 0,
                last: None,
                time_range: None,
                closed: false,
                recovered_torn_tails: 0,
                torn_tail_bytes: 0,
                failure: None,
            },
        }
    }

    /// Whether a failure is classified precisely (the default). Precise
    /// classification costs extra work once, on the failure path: up to 64
    /// later epoch keys are derived to recognise a record re-sealed with a
    /// later key (`epoch_key_mismatch` rather than `mac_mismatch`), and the
    /// rest of the input is scanned to tell `reordered` from `seq_gap`.
    /// Turn it off when verifying very many candidate journals (fuzzing,
    /// exhaustive tamper tests); detection is unaffected, only the reported
    /// kind gets coarser.
    pub(crate) fn set_classify(&mut self, classify: bool) -> &mut Self {
        self.classify = classify;
        self
    }

    /// Verifies every complete line of `bytes` (which must start at a line
    /// boundary) and returns how many bytes were consumed; it stops at the
    /// first failure. Pass the rest to [`Replay::finish`].
    pub(crate) fn feed_lines(&mut self, bytes: &[u8]) -> usize {
        let mut used = 0;
        while self.report.failure.is_none() {
            let rest = bytes.get(used..).unwrap_or_default();
            let Some(nl) = memchr::memchr(b'\n', rest) else {
                break;
            };
            let line = rest.get(..nl).unwrap_or_default();
            let after = rest.get(nl + 1..).unwrap_or_default();
            self.line(line, after);
            if self.report.failure.is_some() {
                break;
            }
            used += nl + 1;
            self.st.offset += (nl + 1) as u64;
            self.st.line += 1;
        }
        used
    }

    /// Feeds every complete line `reader` yields; returns the bytes after
    /// the last complete line (empty after a failure).
    pub(crate) fn feed_reader<R: Read>(&mut self, reader: &mut R) -> std::io::Result<Vec<u8>> {
        let mut buf: Vec<u8> = Vec::with_capacity(2 * READ_CHUNK);
        let mut chunk = vec![0u8; READ_CHUNK];
        loop {
            let n = match reader.read(&mut chunk) {
                Ok(n) => n,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            if n == 0 {
                return Ok(buf);
            }
            buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
            let used = self.feed_lines(&buf);
            if self.report.failure.is_some() {
                return Ok(Vec::new());
            }
            buf.drain(..used);
            if buf.len() > MAX_LINE_LEN {
                let msg = format!("line {} is longer than {MAX_LINE_LEN} bytes", self.st.line);
                self.fail(FailureKind::Malformed, msg);
                return Ok(Vec::new());
            }
        }
    }

    /// Ends verification; `tail` is whatever followed the last complete line.
    #[must_use]
    pub(crate) fn finish(mut self, tail: &[u8]) -> Report {
        if self.report.failure.is_none() {
            if tail.len() > MAX_LINE_LEN {
                // Too long to be a line cut short by a crash: the same
                // verdict `verify_reader` gives without reading it whole.
                let msg = format!("line {} is longer than {MAX_LINE_LEN} bytes", self.st.line);
                self.fail(FailureKind::Malformed, msg);
            } else if !tail.is_empty() {
                self.report.torn_tail_bytes = tail.len() as u64;
                let msg = format!(
                    "the journal ends with an incomplete line of {} bytes (a crash mid-write; reopening the journal recovers it)",
                    tail.len()
                );
                self.fail(FailureKind::TornTail, msg);
            } else if self.st.journal.is_none() {
                self.fail(FailureKind::Malformed, "the journal is empty".to_owned());
            } else if let Some(anchor) = &self.anchor
                && anchor.seq >= self.st.next_seq
            {
                let msg = match self.st.next_seq.checked_sub(1) {
                    Some(last) => format!(
                        "the journal ends at seq {last}, before the anchored seq {}",
                        anchor.seq
                    ),
                    None => format!("the journal ends before the anchored seq {}", anchor.seq),
                };
                self.fail(FailureKind::TruncatedBeforeAnchor, msg);
            }
        }
        self.report.closed = self.st.closed && self.report.failure.is_none();
        self.report
    }

    /// The replayed state, for the writer.
    pub(crate) fn state(&self) -> &ChainState {
        &self.st
    }

    /// The report so far.
    pub(crate) fn report(&self) -> &Report {
        &self.report
    }

    pub(crate) fn fail(&mut self, kind: FailureKind, message: String) {
        if self.report.failure.is_none() {
            self.report.failure = Some(Failure {
                kind,
                seq: self.st.next_seq,
                line: self.st.line,
                offset: self.st.offset,
                message,
            });
        }
    }

    /// Verifies one line; `after` is the rest of the input (used only to
    /// classify a failure).
    pub(crate) fn line(&mut self, line: &[u8], after: &[u8]) {
        let expected = self.st.next_seq;
        if line.len() > MAX_LINE_LEN {
            let msg = format!("line {} is longer than {MAX_LINE_LEN} bytes", self.st.line);
            return self.fail(FailureKind::Malformed, msg);
        }
        let rec = match format::parse_line(line) {
            Ok(rec) => rec,
            Err(why) => {
                let msg = format!("line {} is not a canonical record: {why}", self.st.line);
                return self.fail(FailureKind::Malformed, msg);
            }
        };
        if self.st.closed {
            return self.fail(
                FailureKind::Malformed,
                format!("record seq {} follows `journal_closed`", rec.seq),
            );
        }
        match &self.st.journal {
            Some(id) if id.as_slice() != rec.journal => {
                return self.fail(
                    FailureKind::ForeignRecord,
                    format!(
                        "record seq {} belongs to journal {}, not this one",
                        rec.seq,
                        String::from_utf8_lossy(rec.journal)
                    ),
                );
            }
            _ => {}
        }
        if rec.seq != expected {
            return self.misplaced(&rec, after);
        }
        if rec.epoch != self.st.epoch {
            let (kind, msg) = if rec.epoch > self.st.epoch {
                (
                    FailureKind::MissingEpochSeal,
                    format!(
                        "record seq {expected} claims epoch {} but epoch {} was never sealed",
                        rec.epoch, self.st.epoch
                    ),
                )
            } else {
                (
                    FailureKind::EpochKeyMismatch,
                    format!(
                        "record seq {expected} claims epoch {}, which was already sealed (current epoch {})",
                        rec.epoch, self.st.epoch
                    ),
                )
            };
            return self.fail(kind, msg);
        }
        if self.st.epoch >= self.st.trust_below_epoch {
            let mac = format::compute_mac(&self.st.mac_key, &self.st.prev_mac, rec.canonical);
            if !bool::from(mac.ct_eq(&rec.mac)) {
                return self.bad_mac(&rec);
            }
        }
        self.accept(&rec);
    }

    fn misplaced(&mut self, rec: &Parsed<'_>, after: &[u8]) {
        let expected = self.st.next_seq;
        if rec.seq < expected {
            let msg = format!(
                "record seq {} appears where seq {expected} belongs (duplicated or moved back)",
                rec.seq
            );
            return self.fail(FailureKind::Reordered, msg);
        }
        let later = self.classify
            && after
                .split(|&b| b == b'\n')
                .any(|l| format::peek_seq(l) == Some(expected));
        if later {
            let msg = format!(
                "record seq {} appears where seq {expected} belongs; seq {expected} comes later (records swapped)",
                rec.seq
            );
            self.fail(FailureKind::Reordered, msg);
        } else {
            let msg = format!(
                "records seq {expected} to {} are missing",
                rec.seq.saturating_sub(1)
            );
            self.fail(FailureKind::SeqGap, msg);
        }
    }

    fn bad_mac(&mut self, rec: &Parsed<'_>) {
        let expected = self.st.next_seq;
        let mut later = self.st.key.clone();
        let tries = if self.classify { LATER_KEYS_TRIED } else { 0 };
        for _ in 0..tries {
            later.evolve();
            let mac = format::compute_mac(&later.mac_state(), &self.st.prev_mac, rec.canonical);
            if bool::from(mac.ct_eq(&rec.mac)) {
                let msg = format!(
                    "record seq {expected} of epoch {} is sealed with the key of epoch {} (re-sealed with a later key)",
                    self.st.epoch,
                    later.epoch()
                );
                return self.fail(FailureKind::EpochKeyMismatch, msg);
            }
        }
        let msg = if expected == 0 {
            "the first record's MAC does not match: wrong key, or the record was modified"
                .to_owned()
        } else {
            format!(
                "the MAC of record seq {expected} does not match: it was modified, or the record before it was removed or changed"
            )
        };
        self.fail(FailureKind::MacMismatch, msg);
    }

    /// Checks structure and time of an authentic record and advances.
    fn accept(&mut self, rec: &Parsed<'_>) {
        let seq = rec.seq;
        if rec.time < self.st.last_time {
            let msg = format!(
                "record seq {seq} has time {} before the previous record's {}",
                rec.time, self.st.last_time
            );
            return self.fail(FailureKind::TimeRegression, msg);
        }
        // The writer only seals canonical JSON bodies; a body that is not
        // JSON could only come from the key's holder, and is refused here so
        // that every verified record can be handed out decoded.
        if serde_json::from_slice::<serde::de::IgnoredAny>(rec.body).is_err() {
            return self.fail(
                FailureKind::Malformed,
                format!("the body of record seq {seq} is not JSON"),
            );
        }
        let kind = rec.kind;
        if seq == 0 {
            if kind != b"journal_opened" {
                return self.fail(
                    FailureKind::Malformed,
                    "the first record is not `journal_opened`".to_owned(),
                );
            }
            match serde_json::from_slice::<OpenedBody>(rec.body) {
                Ok(body) if body.format == 1 => self.st.policy = body,
                _ => {
                    return self.fail(
                        FailureKind::Malformed,
                        "the `journal_opened` body is not a format-1 seal policy".to_owned(),
                    );
                }
            }
            self.st.epoch_start = rec.time;
            let mut id = [0u8; 32];
            id.copy_from_slice(rec.journal);
            self.st.journal = Some(id);
            self.report.journal =
                format::parse_lower_hex::<16>(rec.journal).map(JournalId::from_bytes);
        } else if kind == b"journal_opened" {
            return self.fail(
                FailureKind::Malformed,
                format!("record seq {seq} is a second `journal_opened`"),
            );
        }
        let deadline = self
            .st
            .policy
            .seal_every_millis
            .map(|d| self.st.epoch_start.saturating_add(d));
        let is_seal = kind == b"epoch_sealed" || kind == b"journal_closed";
        if kind != b"epoch_sealed"
            && let Some(deadline) = deadline
            && rec.time >= deadline
        {
            let msg = format!(
                "record seq {seq} has time {} but epoch {} ended at {deadline} without a seal",
                rec.time, self.st.epoch
            );
            return self.fail(FailureKind::MissingEpochSeal, msg);
        }
        if is_seal {
            let body = serde_json::from_slice::<SealBody>(rec.body).ok();
            let consistent = body
                .is_some_and(|b| b.epoch == self.st.epoch && b.records == self.st.records_in_epoch);
            if !consistent {
                let msg = format!(
                    "seal seq {seq} does not match epoch {} with {} records",
                    self.st.epoch, self.st.records_in_epoch
                );
                return self.fail(FailureKind::Malformed, msg);
            }
            if kind == b"epoch_sealed"
                && let Some(deadline) = deadline
                && rec.time > deadline
            {
                let msg = format!(
                    "seal seq {seq} of epoch {} has time {}, after the epoch's end {deadline}",
                    self.st.epoch, rec.time
                );
                return self.fail(FailureKind::MissingEpochSeal, msg);
            }
        } else {
            if let Some(max) = self.st.policy.seal_every_records
                && self.st.records_in_epoch >= max
            {
                let msg = format!(
                    "record seq {seq} is past the {max} records of epoch {} without a seal",
                    self.st.epoch
                );
                return self.fail(FailureKind::MissingEpochSeal, msg);
            }
            self.st.records_in_epoch += 1;
            if kind == b"recovered_torn_tail" {
                self.report.recovered_torn_tails += 1;
            }
        }
        if let Some(anchor) = &self.anchor
            && anchor.seq == seq
        {
            let matches = anchor.journal.to_hex().as_bytes() == rec.journal
                && anchor.epoch == rec.epoch
                && bool::from(anchor.mac.ct_eq(&rec.mac));
            if !matches {
                return self.fail(
                    FailureKind::AnchorMismatch,
                    format!("record seq {seq} is not the anchored record (the journal was rewritten or forked)"),
                );
            }
        }

        // Advance.
        self.st.prev_mac = rec.mac;
        self.st.last_time = rec.time;
        self.st.next_seq = seq.saturating_add(1);
        self.report.records += 1;
        self.report.time_range = Some(match self.report.time_range {
            Some((first, _)) => (first, rec.time),
            None => (rec.time, rec.time),
        });
        if let Some(journal) = self.report.journal {
            self.report.last = Some(Anchor {
                journal,
                seq,
                epoch: rec.epoch,
                mac: rec.mac,
            });
        }
        if is_seal {
            self.report.sealed_epochs += 1;
            self.report.unsealed_records = 0;
            if kind == b"journal_closed" {
                self.st.closed = true;
            } else {
                self.st.epoch += 1;
                // A writer reopening with an evolved key replays earlier
                // epochs without keys; its key only moves past its own epoch.
                if self.st.epoch > self.st.key.epoch() {
                    self.st.key.evolve();
                    self.st.mac_key = self.st.key.mac_state();
                }
                self.st.epoch_start = rec.time;
                self.st.records_in_epoch = 0;
            }
        } else {
            self.report.unsealed_records += 1;
        }
    }
}
