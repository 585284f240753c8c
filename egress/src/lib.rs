//! A recording, limiting egress proxy and credential-injecting host relays.
//!
//! The crate's job is to be the worker's only way out: every connection
//! attempt goes through a [`proxy::Proxy`] that decides the name, checks
//! the address, limits bytes and connections and records the attempt, and
//! provider credentials stay on the host behind [`relay::Relay`]s.
//!
//! **Invariant:** every connection attempt and relay request, allowed or
//! refused, produces exactly one `egress_connection` or `relay_request`
//! record; a connection is answered (or has a byte forwarded) only after
//! the [`record::Recorder`] accepted its `egress_admitted` record, and a
//! relay request is sent upstream only after its `relay_admitted` record
//! was accepted and, when the relay has a [`relay::RelayGate`], only after
//! the gate admitted that very request; with a gate, every provider-side web
//! result in a response is told to it before the bytes completing it reach
//! the worker; the name is decided before any DNS lookup and the checked
//! address is the one dialled; no payload bytes, header values or
//! credential values are ever recorded or logged.
//!
//! * [`proxy`]: `CONNECT` and absolute-form plain-HTTP proxy; the name is
//!   decided by a [`decide::Decider`] (which returns `palisade_policy`'s
//!   [`Verdict`](palisade_policy::Verdict)) before any DNS lookup, every resolved
//!   address is checked against [`addr::AddressPolicy`], the checked address
//!   is dialled, the ClientHello's SNI must match the CONNECT host, bytes
//!   and connections are limited, every attempt is recorded through a
//!   [`record::Recorder`]. [`proxy::ProxyConfig::from_egress`] is the
//!   configuration a policy's `[egress]` asks for.
//! * [`relay`]: a reverse proxy on a private Unix socket to one exact HTTPS
//!   origin with exact `METHOD path` routes, injecting a host-held
//!   credential in place of a per-session placeholder
//!   ([`relay::RelayConfig::from_policy`] maps an `[[egress.relay]]`).
//! * [`policy`]: the [`decide::Decider`] over a host policy and a live
//!   taint session.
//! * [`control`]: the session control channel (taint reports, outward
//!   approvals, session state) between a worker, its session and the host.
//! * [`head`], [`body`], [`sni`], [`addr`]: pure, bounded, fuzzed parsers and
//!   tables.
//!
//! A proxy on loopback that refuses a name outside its rules, before any
//! lookup, and records the refusal:
//!
//! ```
//! use std::sync::Arc;
//!
//! use palisade_egress::decide::HostRules;
//! use palisade_egress::proxy::{Listener, Proxy, ProxyConfig, shutdown_channel};
//! use palisade_egress::record::{MemoryRecorder, Outcome};
//! use palisade_egress::resolve::StaticResolver;
//! use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! rt.block_on(async {
//!     let rules = HostRules::new(&["api.example.com:443"], &[] as &[&str])?;
//!     let recorder = Arc::new(MemoryRecorder::new());
//!     let proxy = Proxy::new(
//!         ProxyConfig::default(),
//!         Arc::new(rules),
//!         Arc::new(StaticResolver::new()), // no name is ever looked up here
//!         recorder.clone(),
//!     );
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//!     let addr = listener.local_addr()?;
//!     let (shutdown, signal) = shutdown_channel();
//!     let served = tokio::spawn(async move { proxy.serve(Listener::Tcp(listener), signal).await });
//!
//!     let mut client = tokio::net::TcpStream::connect(addr).await?;
//!     client
//!         .write_all(b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n")
//!         .await?;
//!     let mut answer = Vec::new();
//!     client.read_to_end(&mut answer).await?;
//!     assert!(answer.starts_with(b"HTTP/1.1 403"));
//!
//!     // the refusal is recorded once the connection has ended
//!     let mut records = recorder.connections();
//!     for _ in 0..500 {
//!         if !records.is_empty() {
//!             break;
//!         }
//!         tokio::time::sleep(std::time::Duration::from_millis(10)).await;
//!         records = recorder.connections();
//!     }
//!     let record = records.first().ok_or("no record")?;
//!     assert_eq!(record.outcome, Outcome::Denied);
//!     assert_eq!(record.host.as_deref(), Some("evil.example"));
//!     assert_eq!(record.reason, "host_not_allowed");
//!
//!     shutdown.trigger();
//!     served.await??;
//!     Ok(())
//! })
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod addr;
pub mod body;
pub mod control;
pub mod decide;
pub mod git;
pub mod head;
pub mod journal;
pub mod net;
pub mod policy;
pub mod proxy;
pub mod record;
pub mod relay;
pub mod resolve;
pub mod sni;
pub mod token;

/// A loopback git origin over the real `git http-backend`, for tests: not
/// part of the public API, no semver guarantee (only with `cfg(fuzzing)` or
/// the `testing` feature).
#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __git_origin;

/// Fuzzing entry points: not part of the public API, no semver guarantee
/// (only with `cfg(fuzzing)` or the `testing` feature).
#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __fuzz {
    pub use crate::body::__fuzz::chunked_body;
    pub use crate::git::__fuzz::{pack as git_pack, push_head as git_push, report as git_report};
    pub use crate::head::__fuzz::request_head;
    pub use crate::relay::__fuzz::tool_results;
    pub use crate::sni::__fuzz::client_hello;
}
