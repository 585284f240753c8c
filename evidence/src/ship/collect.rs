//! Central verification: rebuilds each journal from what a collector wrote
//! (at-least-once, so with duplicates, possibly out of order) and verifies
//! it with the one chain check, [`crate::Verifier`].
//!
//! Pure: the caller reads the collector's file and feeds its lines.

use std::collections::BTreeMap;
use std::io::Read;

use crate::format::{self, JournalId};
use crate::key::JournalKey;
use crate::verify::{Anchor, Failure, FailureKind, JournalState, Report, Verifier};

use super::wire::{NotShipped, Shipped, parse_message};

/// How many refused lines are kept with their reason (all are counted).
pub const KEPT_OTHER_LINES: usize = 16;

/// A line of the collector's file that carried no record or anchor.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OtherLine {
    /// The 1-based line number in the collector's file.
    pub line: u64,
    /// Why it is not a shipped record or anchor.
    pub reason: NotShipped,
}

/// Two different lines shipped for one `seq` of one journal: a fork or a
/// rewrite on the host, never deduplicated.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fork {
    /// The seq shipped twice with different bytes.
    pub seq: u64,
    /// The collector line of the first version (the one rebuilt).
    pub first_line: u64,
    /// The collector line of the differing version.
    pub other_line: u64,
}

#[derive(Default)]
struct Pending {
    /// seq → (collector line, record line bytes).
    records: BTreeMap<u64, (u64, Vec<u8>)>,
    anchors: Vec<Anchor>,
    duplicates: u64,
    forks: Vec<Fork>,
}

/// Collects the lines of a collector's file, then rebuilds and verifies
/// every journal found in them ([`Collector::finish`]).
///
/// Memory is bounded by the caller's `max_bytes`: the record lines kept
/// (deduplicated) may not exceed it; past it, [`Collector::push_line`]
/// keeps nothing more and every journal is reported over the limit.
pub struct Collector {
    journals: BTreeMap<JournalId, Pending>,
    others: Vec<OtherLine>,
    other_count: u64,
    line: u64,
    kept: usize,
    max_bytes: usize,
    over_limit: bool,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector")
            .field("journals", &self.journals.len())
            .field("lines", &self.line)
            .field("kept", &self.kept)
            .field("over_limit", &self.over_limit)
            .finish_non_exhaustive()
    }
}

impl Collector {
    /// A collector that keeps at most `max_bytes` of record lines.
    #[must_use]
    pub fn new(max_bytes: usize) -> Self {
        Self {
            journals: BTreeMap::new(),
            others: Vec::new(),
            other_count: 0,
            line: 0,
            kept: 0,
            max_bytes,
            over_limit: false,
        }
    }

    /// Counts a line the caller could not even read as a line (longer than
    /// [`super::MAX_MESSAGE_LEN`]): reported like any other refused line.
    pub fn push_overlong(&mut self) {
        self.line += 1;
        self.other(NotShipped::TooLong);
    }

    fn other(&mut self, reason: NotShipped) {
        self.other_count += 1;
        if self.others.len() < KEPT_OTHER_LINES {
            self.others.push(OtherLine {
                line: self.line,
                reason,
            });
        }
    }

    /// Takes one line of the collector's file (without its newline; a
    /// trailing `\r` is ignored).
    pub fn push_line(&mut self, line: &[u8]) {
        self.line += 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match parse_message(line) {
            Err(reason) => self.other(reason),
            Ok(Shipped::Anchor(anchor)) => {
                let pending = self.journals.entry(anchor.journal).or_default();
                if !pending.anchors.contains(&anchor) {
                    pending.anchors.push(anchor);
                }
            }
            Ok(Shipped::Record { journal, seq, line }) => {
                let at = self.line;
                if self.over_limit {
                    return;
                }
                let pending = self.journals.entry(journal).or_default();
                match pending.records.get(&seq) {
                    Some((_, kept)) if kept.as_slice() == line => pending.duplicates += 1,
                    Some((first_line, _)) => pending.forks.push(Fork {
                        seq,
                        first_line: *first_line,
                        other_line: at,
                    }),
                    None => {
                        if self.kept.saturating_add(line.len()) > self.max_bytes {
                            self.over_limit = true;
                            return;
                        }
                        self.kept += line.len();
                        pending.records.insert(seq, (at, line.to_vec()));
                    }
                }
            }
        }
    }

    /// Adds an anchor kept elsewhere (not shipped): the rebuilt journal it
    /// names must reach it and match it, as a shipped one.
    pub fn push_anchor(&mut self, anchor: Anchor) {
        let pending = self.journals.entry(anchor.journal).or_default();
        if !pending.anchors.contains(&anchor) {
            pending.anchors.push(anchor);
        }
    }

    /// Feeds every line `reader` yields (a collector's file, streamed): a
    /// line longer than [`super::MAX_MESSAGE_LEN`] is skipped to its end and
    /// counted as refused, so memory stays bounded whatever the file holds.
    /// A final line without a newline is taken as a line.
    ///
    /// # Errors
    /// Only the reader's.
    pub fn push_reader<R: Read>(&mut self, mut reader: R) -> std::io::Result<()> {
        let mut chunk = vec![0u8; 1 << 16];
        let mut line: Vec<u8> = Vec::new();
        let mut skipping = false;
        loop {
            let n = match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            let mut data = chunk.get(..n).unwrap_or_default();
            while !data.is_empty() {
                let (piece, ends) = match memchr::memchr(b'\n', data) {
                    Some(nl) => (data.get(..nl).unwrap_or_default(), Some(nl + 1)),
                    None => (data, None),
                };
                if !skipping {
                    if line.len() + piece.len() > super::MAX_MESSAGE_LEN {
                        skipping = true;
                        line.clear();
                    } else {
                        line.extend_from_slice(piece);
                    }
                }
                match ends {
                    Some(used) => {
                        if skipping {
                            self.push_overlong();
                        } else {
                            self.push_line(&line);
                        }
                        line.clear();
                        skipping = false;
                        data = data.get(used..).unwrap_or_default();
                    }
                    None => data = &[],
                }
            }
        }
        if skipping {
            self.push_overlong();
        } else if !line.is_empty() {
            self.push_line(&line);
        }
        Ok(())
    }

    /// Rebuilds and verifies every journal, in journal-id order.
    #[must_use]
    pub fn finish(self, key: &JournalKey) -> CentralReport {
        let over_limit = self.over_limit;
        let journals = self
            .journals
            .into_iter()
            .map(|(id, pending)| rebuild(id, pending, key, over_limit))
            .collect();
        CentralReport {
            journals,
            other_lines: self.other_count,
            first_other_lines: self.others,
            lines: self.line,
        }
    }
}

/// What central verification found in a collector's file.
#[derive(Debug)]
#[non_exhaustive]
pub struct CentralReport {
    /// One verdict per journal id seen, in id order.
    pub journals: Vec<RebuiltJournal>,
    /// Lines that carried no record or anchor (other applications, damage).
    pub other_lines: u64,
    /// The first [`KEPT_OTHER_LINES`] of them, with their reasons.
    pub first_other_lines: Vec<OtherLine>,
    /// Lines read.
    pub lines: u64,
}

/// One journal rebuilt from a collector's file.
#[derive(Debug)]
#[non_exhaustive]
pub struct RebuiltJournal {
    /// Its id.
    pub journal: JournalId,
    /// The verifier's report over the rebuilt journal (deduplicated, in seq
    /// order), with the shipped anchors checked; a fork, an anchor the
    /// records do not reach or an anchor that does not match is its failure.
    pub report: Report,
    /// Distinct records rebuilt.
    pub records: u64,
    /// Identical copies dropped (at-least-once delivery).
    pub duplicates: u64,
    /// Differing copies of one seq (never dropped silently).
    pub forks: Vec<Fork>,
    /// Distinct anchors shipped.
    pub anchors: Vec<Anchor>,
}

impl RebuiltJournal {
    /// `Invalid` on any failure (forks included), else `Closed` or `Open`.
    #[must_use]
    pub fn state(&self) -> JournalState {
        self.report.state()
    }
}

/// The rebuilt journal's bytes, one record line and `\n` after another.
struct Lines<'a> {
    iter: std::collections::btree_map::Values<'a, u64, (u64, Vec<u8>)>,
    current: &'a [u8],
    newline_due: bool,
}

impl Read for Lines<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            if self.current.is_empty() {
                if self.newline_due {
                    if let Some(slot) = buf.get_mut(done) {
                        *slot = b'\n';
                    }
                    done += 1;
                    self.newline_due = false;
                    continue;
                }
                match self.iter.next() {
                    Some((_, line)) => {
                        self.current = line;
                        self.newline_due = true;
                    }
                    None => break,
                }
                continue;
            }
            let n = self.current.len().min(buf.len() - done);
            let (head, tail) = self.current.split_at(n);
            if let Some(dst) = buf.get_mut(done..done + n) {
                dst.copy_from_slice(head);
            }
            self.current = tail;
            done += n;
        }
        Ok(done)
    }
}

fn fail(report: &mut Report, kind: FailureKind, seq: u64, line: u64, message: String) {
    report.failure = Some(Failure {
        kind,
        seq,
        line,
        offset: 0,
        message,
    });
}

fn rebuild(id: JournalId, pending: Pending, key: &JournalKey, over_limit: bool) -> RebuiltJournal {
    let Pending {
        records,
        mut anchors,
        duplicates,
        forks,
    } = pending;
    anchors.sort_by_key(|a| a.seq);
    let last_anchor = anchors.last().cloned();
    let reader = Lines {
        iter: records.values(),
        current: &[],
        newline_due: false,
    };
    let mut verifier = Verifier::new(reader, key, last_anchor);
    // Reading from memory cannot fail.
    while let Ok(Some(_)) = verifier.next_line() {}
    let mut report = verifier.finish();
    if report.failure.is_none() {
        // The verifier checked the last anchor; check the others against the
        // verified lines.
        for anchor in &anchors {
            let Some((at, line)) = records.get(&anchor.seq) else {
                let msg = format!(
                    "the shipped anchor at seq {} is beyond the last record shipped",
                    anchor.seq
                );
                fail(
                    &mut report,
                    FailureKind::TruncatedBeforeAnchor,
                    anchor.seq,
                    0,
                    msg,
                );
                break;
            };
            let matches = format::parse_line(line)
                .is_ok_and(|rec| rec.epoch == anchor.epoch && rec.mac == anchor.mac);
            if !matches {
                let msg = format!(
                    "the record shipped at seq {} is not the one the shipped anchor names",
                    anchor.seq
                );
                fail(
                    &mut report,
                    FailureKind::AnchorMismatch,
                    anchor.seq,
                    *at,
                    msg,
                );
                break;
            }
        }
    }
    if let Some(fork) = forks.first() {
        let msg = format!(
            "two different records were shipped for seq {} (collector lines {} and {}): the host's journal forked or was rewritten",
            fork.seq, fork.first_line, fork.other_line
        );
        fail(
            &mut report,
            FailureKind::ForkedRecord,
            fork.seq,
            fork.other_line,
            msg,
        );
    }
    if over_limit {
        let msg =
            "the collector's file holds more record bytes than the limit: not all of it was read"
                .to_owned();
        fail(&mut report, FailureKind::Malformed, 0, 0, msg);
    }
    RebuiltJournal {
        journal: id,
        report,
        records: records.len() as u64,
        duplicates,
        forks,
        anchors,
    }
}
