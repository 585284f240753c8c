//! The sticky session-taint state machine.
//!
//! A [`Session`] starts clean. Feeding it [`Event`]s (tool results, file
//! reads and writes, proxy connections, untrusted input) under compiled
//! [`Rules`] may taint it; once tainted it stays tainted for the life of the
//! session: no method clears it, and replaying the same events after a
//! restart ([`Session::rebuild`]) yields the same state. The session also
//! remembers the hosts it contacted (a tainted session may return to them)
//! and the routing-restricted paths it read (a later dispatch must go to a
//! provider allowed for every one of them).
//!
//! **Invariant:** taint is monotone (no API clears it) and replaying the
//! same records yields the same session; the crate does no IO and reads no
//! clock.
//!
//! The decisions themselves (may this connection open, may this action run,
//! may this provider receive the session) live in `palisade-policy`; this
//! crate only keeps the state. It does no IO and reads no clock: the caller
//! passes every timestamp, as Unix milliseconds.
//!
//! # Example
//!
//! ```
//! use palisade_schema::host_policy::parse;
//! use palisade_taint::{Event, Rules, Session, TaintSource};
//!
//! let text = "[taint]\nuntrusted_paths = [\"inbox/**\"]\nsteering_paths = [\"AGENTS.md\"]\n";
//! let (policy, _warnings) = parse("palisade.toml", text).map_err(|d| d.to_string())?.into_parts();
//! let rules = Rules::new(&policy, &[]).map_err(|e| e.to_string())?;
//! let mut session = Session::new();
//!
//! let fx = session.apply(&rules, 1_000, &Event::Read { path: "inbox/mail.eml".into() });
//! assert!(fx.newly_tainted && fx.tainted_by == Some(TaintSource::UntrustedPath));
//!
//! let fx = session.apply(&rules, 2_000, &Event::Write { path: "AGENTS.md".into() });
//! assert!(fx.steering_write.is_some_and(|w| w.tainted)); // record it, flagged
//! assert!(session.is_tainted()); // and it stays so
//! # Ok::<(), String>(())
//! ```
//!
//! # Journal mapping
//!
//! [`Record`] serialises to `{"at_ms":…,"event":{"type":…}}`. A journal
//! (`palisade-evidence`) keeps it as the body of a record of kind
//! [`EVIDENCE_KIND`]. With the `evidence` feature, `Session::rebuild_from`
//! rebuilds a session from the entries `palisade_evidence::Verifier` handed
//! out (each only after its MAC checked, so nothing is parsed again after
//! verification): it replays those records as [`Session::rebuild`] does,
//! also takes the taint of every `taint_raised` record, and the restricted
//! read of every `routing_read` record.
//! The [`Effects`] of each event say which other records the caller writes:
//! `newly_tainted` → a `taint_raised` record, `steering_write` → a
//! `steering_write` record flagged for review, `new_restricted_read` → a
//! `routing_read` record (`ROUTING_READ_KIND` with the `evidence` feature),
//! `irreversible` → the
//! `outward_action` record flagged irreversible.
//!
//! What taint cannot see: content that never passes through palisade (a
//! file written by another process, a tool the embedding orchestrator does
//! not report), or untrusted text that a trusted source relays verbatim.

#![forbid(unsafe_code)]

mod path;
#[cfg(feature = "evidence")]
mod rebuild;
mod session;

pub use path::{normalize_path, parse_marks};
/// The journal record kind whose body is a serialised [`Record`].
pub const EVIDENCE_KIND: &str = "session_event";

#[cfg(feature = "evidence")]
pub use rebuild::{ROUTING_READ_KIND, RebuildError};
pub use session::{
    Effects, Event, MAX_RESTRICTED_READS, MAX_SOURCES, Record, Rules, RulesError, Session, Source,
    SteeringWrite, TaintSource, TaintState, ToolClass,
};
