//! Evidence off the host: the wire format of shipped records and anchors.
//!
//! - [`wire`] (pure, fuzzed): the RFC 5424 message of one record (its exact
//!   line as MSG, structured data `[palisade@32473 journal= seq= kind=]`)
//!   or anchor, RFC 6587 octet-counted framing, RELP frames, and the parser
//!   of a collector's file ([`parse_message`]).

pub mod wire;

pub use wire::{Hostname, MAX_MESSAGE_LEN, NotShipped, Shipped, parse_message};
