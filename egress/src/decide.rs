//! The decision seam: the proxy asks a [`Decider`] whether a host name (or
//! IP literal) and port may be contacted, **before** any DNS lookup.
//!
//! `palisade-policy`'s egress decision (host patterns, taint) plugs in
//! here; [`HostRules`] is a small built-in implementation with the same
//! pattern rules (exact names or one leading `*.`, optional `:port`, deny
//! beats allow) for tests and simple embeddings.

use std::fmt;
use std::net::IpAddr;

use crate::head::{Host, parse_host_name};

/// The answer to "may this host and port be contacted?".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Allowed or not.
    pub allow: bool,
    /// The rule that matched, as written in the policy.
    pub rule: Option<String>,
    /// A stable reason code.
    pub reason: String,
}

impl Verdict {
    /// An allow verdict.
    pub fn allow(rule: impl Into<String>) -> Self {
        Self {
            allow: true,
            rule: Some(rule.into()),
            reason: "allowed".into(),
        }
    }

    /// A deny verdict.
    pub fn deny(rule: Option<String>, reason: impl Into<String>) -> Self {
        Self {
            allow: false,
            rule,
            reason: reason.into(),
        }
    }
}

/// Decides on a destination by name, before resolution.
///
/// An allow verdict is also a **reservation**: a decider whose answers
/// depend on what was contacted before (taint rules) must record the
/// contact, and any taint it raises, in the same step and under the same
/// lock as the decision. The proxy asks once per connection, before it
/// resolves or dials, and never tells the decider afterwards, so that many
/// requests sent at once cannot all be decided on the state before any of
/// them was recorded; a connection that later fails (address check, dial,
/// SNI) keeps its reservation and its taint.
pub trait Decider: Send + Sync + fmt::Debug {
    /// Decide on `host:port` and, when allowed, reserve it.
    fn decide(&self, host: &Host, port: u16) -> Verdict;
}

/// One host pattern: `example.com`, `*.example.com`, an IP literal, each
/// with an optional `:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern {
    text: String,
    kind: PatternKind,
    port: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum PatternKind {
    Exact(String),
    Suffix(String),
    Ip(IpAddr),
}

/// A refused host pattern.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid host pattern `{pattern}`: {reason}")]
pub struct PatternError {
    /// The pattern as written.
    pub pattern: String,
    /// Why.
    pub reason: &'static str,
}

impl HostPattern {
    /// Parse a pattern.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let err = |reason| PatternError {
            pattern: text.to_owned(),
            reason,
        };
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (inside, after) = rest.split_once(']').ok_or(err("unterminated IPv6"))?;
            let ip: IpAddr = inside.parse().map_err(|_| err("invalid IPv6"))?;
            let port = match after {
                "" => None,
                p => Some(
                    parse_port(p.strip_prefix(':').ok_or(err("junk after IPv6"))?)
                        .ok_or(err("invalid port"))?,
                ),
            };
            return Ok(Self {
                text: text.to_owned(),
                kind: PatternKind::Ip(ip),
                port,
            });
        } else {
            match text.rsplit_once(':') {
                Some((h, p)) => (h, Some(parse_port(p).ok_or(err("invalid port"))?)),
                None => (text, None),
            }
        };
        let (wild, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        if name.contains('*') {
            return Err(err("only one leading `*.` is allowed"));
        }
        let parsed = parse_host_name(name).map_err(|_| err("not a host name"))?;
        let kind = match (wild, parsed) {
            (false, Host::Ip(ip)) => PatternKind::Ip(ip),
            (true, Host::Ip(_)) => return Err(err("wildcard over an IP address")),
            (false, Host::Name(n)) => PatternKind::Exact(n),
            (true, Host::Name(n)) => {
                if !n.contains('.') {
                    return Err(err("wildcard over a top-level domain"));
                }
                PatternKind::Suffix(n)
            }
        };
        Ok(Self {
            text: text.to_owned(),
            kind,
            port,
        })
    }

    /// Whether this pattern covers `host:port`.
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.kind, host) {
            (PatternKind::Exact(e), Host::Name(n)) => e == n,
            (PatternKind::Suffix(s), Host::Name(n)) => n
                .strip_suffix(s.as_str())
                .is_some_and(|prefix| prefix.len() > 1 && prefix.ends_with('.')),
            (PatternKind::Ip(a), Host::Ip(b)) => a == b,
            _ => false,
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

fn parse_port(p: &str) -> Option<u16> {
    if p.is_empty() || p.starts_with('0') || !p.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    p.parse().ok().filter(|n| *n != 0)
}

/// Allow and deny host patterns; deny beats allow; default deny.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostRules {
    allow: Vec<HostPattern>,
    deny: Vec<HostPattern>,
}

impl HostRules {
    /// Build from pattern strings.
    pub fn new<A: AsRef<str>, D: AsRef<str>>(
        allow: &[A],
        deny: &[D],
    ) -> Result<Self, PatternError> {
        Ok(Self {
            allow: allow
                .iter()
                .map(|p| HostPattern::parse(p.as_ref()))
                .collect::<Result<_, _>>()?,
            deny: deny
                .iter()
                .map(|p| HostPattern::parse(p.as_ref()))
                .collect::<Result<_, _>>()?,
        })
    }
}

impl Decider for HostRules {
    fn decide(&self, host: &Host, port: u16) -> Verdict {
        if let Some(d) = self.deny.iter().find(|p| p.matches(host, port)) {
            return Verdict::deny(Some(format!("egress.deny: {}", d.as_str())), "host_denied");
        }
        match self.allow.iter().find(|p| p.matches(host, port)) {
            Some(a) => Verdict::allow(format!("egress.allow: {}", a.as_str())),
            None => Verdict::deny(None, "host_not_allowed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Host {
        Host::Name(s.into())
    }

    #[test]
    fn pattern_table() {
        let cases: &[(&str, &str, u16, bool)] = &[
            ("example.com", "example.com", 443, true),
            ("example.com", "a.example.com", 443, false),
            ("*.example.com", "a.example.com", 443, true),
            ("*.example.com", "a.b.example.com", 80, true),
            ("*.example.com", "example.com", 443, false),
            ("*.example.com", "evil-example.com", 443, false),
            ("*.example.com", "notexample.com", 443, false),
            ("example.com:443", "example.com", 443, true),
            ("example.com:443", "example.com", 444, false),
            ("Example.COM.", "example.com", 1, true),
        ];
        for (pat, host, port, want) in cases {
            let p = HostPattern::parse(pat).unwrap();
            assert_eq!(
                p.matches(&name(host), *port),
                *want,
                "{pat} vs {host}:{port}"
            );
        }
        let ip = HostPattern::parse("127.0.0.1").unwrap();
        assert!(ip.matches(&Host::Ip("127.0.0.1".parse().unwrap()), 9));
        assert!(!ip.matches(&name("localhost"), 9));
        for bad in [
            "*",
            "*.",
            "*.com",
            "api.*.example.com",
            "*example.com",
            "ex*ample.com",
            "a.com:0",
            "a.com:x",
            "*.1.2.3.4",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn deny_beats_allow() {
        let r = HostRules::new(&["*.example.com"], &["bad.example.com"]).unwrap();
        assert!(!r.decide(&name("bad.example.com"), 443).allow);
        assert!(r.decide(&name("good.example.com"), 443).allow);
        assert_eq!(r.decide(&name("other.org"), 443).reason, "host_not_allowed");
    }
}
