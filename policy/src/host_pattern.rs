//! Host patterns for egress rules, and the normalised request host they match.
//!
//! The pattern grammar is part of the `palisade.toml` file format, so its
//! parser lives in `palisade-schema` (which reports bad patterns with their
//! position); this module is the policy-side entry point. The rules:
//!
//! - `example.com` matches only `example.com`; `*.example.com` matches strict
//!   subdomains (`a.example.com`, `a.b.example.com`), never `example.com`,
//!   `evil-example.com` or `example.com.evil.net`;
//! - names compare case-insensitively, one trailing dot is ignored, and
//!   internationalised names compare as punycode (`münchen.de` is
//!   `xn--mnchen-3ya.de`);
//! - `host:port` limits a pattern to that port; without a port it covers all;
//! - `*`, `*.`, misplaced wildcards, `*.<single label>` (a whole TLD: there is
//!   no public-suffix list, so `*.co.uk` is accepted), URLs, IP literals and
//!   `localhost` are rejected;
//! - request hosts that URL parsers would read as IPv4 (`0x7f.1`,
//!   `2130706433`) are refused rather than guessed at.

pub use palisade_schema::host_policy::{HostError, HostPattern, RequestHost, split_authority};

/// Whether any pattern in `patterns` matches `host:port`, and the first that does.
pub fn first_match<'a>(
    patterns: &'a [HostPattern],
    host: &RequestHost,
    port: u16,
) -> Option<(usize, &'a HostPattern)> {
    patterns
        .iter()
        .enumerate()
        .find(|(_, p)| p.matches(host, port))
}
