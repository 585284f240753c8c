//! A recording, limiting egress proxy and credential-injecting host relays.
#![forbid(unsafe_code)]

pub mod control;
