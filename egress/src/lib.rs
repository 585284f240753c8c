//! A recording, limiting egress proxy and credential-injecting host relays.
//!
//! * [`proxy`]: `CONNECT` and absolute-form plain-HTTP proxy; the name is
//!   decided by a [`decide::Decider`] before any DNS lookup, every resolved
//!   address is checked against [`addr::AddressPolicy`], the checked address
//!   is dialled, the ClientHello's SNI must match the CONNECT host, bytes
//!   and connections are limited, every attempt is recorded through a
//!   [`record::Recorder`].
//! * [`relay`]: a reverse proxy on a private Unix socket to one exact HTTPS
//!   origin with exact `METHOD path` routes, injecting a host-held
//!   credential in place of a per-session placeholder.
//! * [`control`]: the session control channel (taint reports, outward
//!   approvals, session state) between a worker, its session and the host.
//! * [`head`], [`body`], [`sni`], [`addr`]: pure, bounded, fuzzed parsers and
//!   tables.
#![forbid(unsafe_code)]

pub mod addr;
pub mod body;
pub mod control;
pub mod decide;
pub mod head;
pub mod journal;
pub mod net;
pub mod policy;
pub mod proxy;
pub mod record;
pub mod relay;
pub mod resolve;
pub mod sni;

/// Fuzzing entry points: not part of the public API, no semver guarantee
/// (only with `cfg(fuzzing)` or the `testing` feature).
#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __fuzz {
    pub use crate::body::__fuzz::chunked_body;
    pub use crate::head::__fuzz::request_head;
    pub use crate::sni::__fuzz::client_hello;
}
