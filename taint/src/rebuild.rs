//! Rebuilding a session from a sealed journal's verified entries (the
//! `evidence` feature).
//!
//! [`Session::rebuild_from`] takes the [`VerifiedEntry`]s that
//! `palisade-evidence`'s `Verifier` handed out, so the records it replays
//! are the very bytes whose MAC was checked: there is no second parse of
//! the journal after verification. This module does no IO either; the
//! caller reads the journal.

use palisade_evidence::{Kind, VerifiedEntry};
use serde::Deserialize;

use crate::EVIDENCE_KIND;
use crate::session::{Effects, Record, Rules, Session, TaintSource};

/// Why a session could not be rebuilt from journal entries. Every variant
/// names the `seq` of the entry at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RebuildError {
    /// A `session_event` entry whose body is not a [`Record`].
    #[error("journal record seq {seq}: not a session event: {message}")]
    Event {
        /// The entry's sequence number.
        seq: u64,
        /// What is wrong with its body.
        message: String,
    },
    /// A `taint_raised` entry without a known `class` or a string `detail`.
    #[error("journal record seq {seq}: not a taint record: {message}")]
    Taint {
        /// The entry's sequence number.
        seq: u64,
        /// What is wrong with its body.
        message: String,
    },
    /// A `routing_read` entry without a string `path`, an array of string
    /// `rules` and a string `by`.
    #[error("journal record seq {seq}: not a routing read: {message}")]
    Routing {
        /// The entry's sequence number.
        seq: u64,
        /// What is wrong with its body.
        message: String,
    },
    /// Entries of two sessions: a session is rebuilt from its own entries
    /// only (filter on [`VerifiedEntry::session`] first).
    #[error("journal record seq {seq} belongs to session `{found}`, not `{expected}`")]
    MixedSessions {
        /// The entry's sequence number.
        seq: u64,
        /// The session of the first entry replayed.
        expected: String,
        /// The session of this entry.
        found: String,
    },
    /// The entries are not in journal order.
    #[error(
        "journal record seq {seq} comes after seq {previous}: entries must be in journal order"
    )]
    OutOfOrder {
        /// The entry's sequence number.
        seq: u64,
        /// The sequence number of the entry before it.
        previous: u64,
    },
}

/// The body of a `taint_raised` record, as far as taint reads it.
#[derive(Deserialize)]
struct TaintRaised {
    class: TaintSource,
    detail: String,
}

/// The journal kind of a routing-restricted read a governed session
/// recorded: body `{"path": "…", "rules": ["routing[0]", …], "by": "observer"}`
/// (`path` as the worker named it or relative to `worker.cwd`, never
/// content; `rules` the rules restricting it; `by` who saw the read).
pub const ROUTING_READ_KIND: &str = "routing_read";

/// The body of a `routing_read` record, as taint reads it.
#[derive(Deserialize)]
struct RoutingRead {
    path: String,
    #[serde(rename = "rules")]
    _rules: Vec<String>,
    #[serde(rename = "by")]
    _by: String,
}

impl Session {
    /// Rebuilds a session from a journal's verified entries, in journal
    /// order, under `rules`.
    ///
    /// - A `session_event` entry ([`EVIDENCE_KIND`]) is a [`Record`] and is
    ///   replayed as [`Session::rebuild`] replays it, so over entries that
    ///   hold the same records the two give the same session.
    /// - A `taint_raised` entry taints the session with its `class` and
    ///   `detail` at the entry's time, whatever `rules` say now: the journal
    ///   proves the session was tainted, and taint never goes away. This is
    ///   how a governed session's journal (which records taint, not every
    ///   event) is rebuilt; such a journal does not carry the hosts a
    ///   session contacted or the restricted paths it read, so a session
    ///   rebuilt from it may return to fewer hosts, never more.
    /// - A `routing_read` entry ([`ROUTING_READ_KIND`]) adds its `path` to
    ///   the session's restricted reads, whatever `rules` say now (routing
    ///   is sticky: a path no rule restricts any more keeps nothing from any
    ///   provider, so keeping it never allows more).
    /// - Every other entry is skipped.
    ///
    /// The entries prove each record authentic and in order; whether the
    /// journal is complete is its `JournalState`, which the caller checks
    /// (a journal cut short loses the taint recorded after the cut unless an
    /// anchor kept elsewhere catches the cut).
    ///
    /// ```
    /// use palisade_evidence::{Body, Entry, JournalKey, JournalState, JournalWriter, Kind, Timestamp, Verifier, WriterOptions};
    /// use palisade_schema::host_policy::parse;
    /// use palisade_taint::{EVIDENCE_KIND, Event, Record, Rules, Session};
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("run.jsonl");
    /// let policy = parse("palisade.toml", "[taint]\nuntrusted_paths = [\"inbox/**\"]\n")?
    ///     .into_value();
    /// let rules = Rules::new(&policy, &[])?;
    ///
    /// let key = JournalKey::generate()?;
    /// let writer = JournalWriter::create(&path, &key, &WriterOptions::default(), Timestamp(0))?;
    /// let read = Record::new(5, Event::Read { path: "inbox/mail.eml".into() });
    /// let body = Body::from_serialize(&read)?;
    /// writer.append(&Entry::new(Timestamp(5), "s1", Kind::custom(EVIDENCE_KIND)?, body))?;
    /// writer.close(Timestamp(6))?;
    ///
    /// let mut verifier = Verifier::new(std::fs::File::open(&path)?, &key, None);
    /// let entries = verifier.by_ref().collect::<Result<Vec<_>, _>>()?;
    /// assert_eq!(verifier.finish().state(), JournalState::Closed);
    /// let session = Session::rebuild_from(&rules, &entries)?;
    /// assert!(session.is_tainted());
    /// assert_eq!(session, Session::rebuild(&rules, [&read]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// An entry of either kind that does not have its body's shape, entries
    /// of more than one session, or entries out of journal order: nothing is
    /// guessed.
    pub fn rebuild_from(rules: &Rules, entries: &[VerifiedEntry]) -> Result<Self, RebuildError> {
        let mut session = Self::new();
        let mut owner: Option<&str> = None;
        let mut previous: Option<u64> = None;
        for entry in entries {
            let seq = entry.seq();
            if let Some(previous) = previous
                && seq <= previous
            {
                return Err(RebuildError::OutOfOrder { seq, previous });
            }
            previous = Some(seq);
            let kind = entry.kind();
            let is_event = kind.as_str() == EVIDENCE_KIND;
            let is_routing = kind.as_str() == ROUTING_READ_KIND;
            if !is_event && !is_routing && *kind != Kind::TaintRaised {
                continue;
            }
            match owner {
                None => owner = Some(entry.session()),
                Some(expected) if expected != entry.session() => {
                    return Err(RebuildError::MixedSessions {
                        seq,
                        expected: expected.to_owned(),
                        found: entry.session().to_owned(),
                    });
                }
                Some(_) => {}
            }
            if is_event {
                let record =
                    Record::deserialize(entry.body()).map_err(|e| RebuildError::Event {
                        seq,
                        message: e.to_string(),
                    })?;
                let _ = session.apply(rules, record.at_ms, &record.event);
            } else if is_routing {
                let read =
                    RoutingRead::deserialize(entry.body()).map_err(|e| RebuildError::Routing {
                        seq,
                        message: e.to_string(),
                    })?;
                session.add_restricted_read(rules, &read.path);
            } else {
                let raised =
                    TaintRaised::deserialize(entry.body()).map_err(|e| RebuildError::Taint {
                        seq,
                        message: e.to_string(),
                    })?;
                let mut fx = Effects::default();
                session.taint_with(
                    &mut fx,
                    raised.class,
                    &raised.detail,
                    entry.time().as_unix_millis(),
                );
            }
        }
        Ok(session)
    }
}
