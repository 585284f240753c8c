//! Evidence off the host: streams the sealed journal's records and anchors
//! to the log pipeline an operator already runs, and rebuilds and verifies
//! a journal from what the collector wrote.
//!
//! - [`wire`] (pure, fuzzed): the RFC 5424 message of one record (its exact
//!   line as MSG, structured data `[palisade@32473 journal= seq= kind=]`)
//!   or anchor, RFC 6587 octet-counted framing, RELP frames, and the parser
//!   of a collector's file ([`parse_message`]).
//! - [`Collector`] (pure): central verification; drops at-least-once
//!   duplicates, reports forks (two different lines for one seq), orders by
//!   seq, verifies the chain with [`crate::Verifier`] and checks the
//!   shipped anchors.
//! - [`Shipper`]: the local journal is the spool; it ships the complete
//!   lines from the last acknowledged record on (persisted next to the
//!   journal in `<journal>.ship-<hash of url>`), over RELP (acknowledged)
//!   or `syslog+tcp` / `syslog+tls` (unacknowledged), retrying an outage
//!   with backoff. It reads the journal as lines and needs no key. TLS is
//!   the caller's: a [`TlsConnector`] given in [`ShipOptions::tls`].
//!
//! The only IO of this module is in [`Shipper`]: reading the journal,
//! writing its state file, and one blocking `std::net` connection to the
//! collector (wrapped by the caller's [`TlsConnector`] for `syslog+tls`).

mod collect;
mod net;
mod shipper;
pub mod wire;

pub use collect::{CentralReport, Collector, Fork, KEPT_OTHER_LINES, OtherLine, RebuiltJournal};
pub use net::{FINISH_WAIT, LinkError, ShipStream, ShipUrl, TlsConnector, UrlError};
pub use shipper::{Progress, ShipError, ShipOptions, ShipState, Shipper};
pub use wire::{Hostname, MAX_MESSAGE_LEN, NotShipped, Shipped, parse_message};
