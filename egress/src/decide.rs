//! The decision seam: the proxy asks a [`Decider`] whether a host name (or
//! IP literal) and port may be contacted, **before** any DNS lookup.
//!
//! There is one egress decision API: a decider returns
//! `palisade_policy`'s [`Verdict`] (decision, typed
//! [`Reason`](palisade_policy::Reason), rule, detail) over
//! `palisade_schema`'s [`RequestHost`], and the proxy records
//! the verdict's reason code as it is. [`crate::policy::PolicyDecider`] is
//! the decider over a host policy and a live taint session; [`HostRules`]
//! is the same policy decision for a session that is never tainted, for
//! tests and simple embeddings.
//!
//! ```
//! use palisade_egress::decide::{Decider, HostRules};
//! use palisade_policy::Reason;
//! use palisade_schema::host_policy::RequestHost;
//!
//! let rules = HostRules::new(&["*.example.com:443", "127.0.0.1"], &["bad.example.com"])?;
//! let host = |h: &str| RequestHost::parse(h).unwrap();
//! assert!(rules.decide(&host("api.example.com"), 443, 0).is_allow());
//! assert_eq!(rules.decide(&host("bad.example.com"), 443, 0).reason, Reason::HostDenied);
//! assert_eq!(rules.decide(&host("other.org"), 443, 0).reason, Reason::HostNotAllowed);
//! assert!(rules.decide(&host("127.0.0.1"), 8080, 0).is_allow());
//! assert_eq!(rules.decide(&host("10.0.0.1"), 80, 0).reason, Reason::IpLiteralNotAllowed);
//! # Ok::<(), palisade_egress::decide::PatternError>(())
//! ```

use std::fmt;

use palisade_policy::verdict::Verdict;
use palisade_schema::host_policy::{Cidr, HostPattern, HostPolicy, RequestHost};
use palisade_taint::Session;

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
///
/// Anything but [`Decision::Allow`](palisade_policy::Decision::Allow) refuses the connection (403), and the
/// connection's record carries [`Verdict::record_reason`].
///
/// ```
/// use palisade_egress::decide::Decider;
/// use palisade_policy::{Decision, Reason, Verdict};
/// use palisade_schema::host_policy::RequestHost;
///
/// /// Allows one name, on any port.
/// #[derive(Debug)]
/// struct Only(&'static str);
///
/// impl Decider for Only {
///     fn decide(&self, host: &RequestHost, _port: u16, _at_ms: u64) -> Verdict {
///         if host.name() == Some(self.0) {
///             Verdict::new(Decision::Allow, Reason::Allowed, None, "the one name")
///         } else {
///             Verdict::new(Decision::Deny, Reason::HostNotAllowed, None, "not the one name")
///         }
///     }
/// }
///
/// let d = Only("api.example.com");
/// assert!(d.decide(&RequestHost::parse("API.example.com.").unwrap(), 443, 0).is_allow());
/// assert!(!d.decide(&RequestHost::parse("example.com").unwrap(), 443, 0).is_allow());
/// ```
pub trait Decider: Send + Sync + fmt::Debug {
    /// Decide on `host:port` at `at_ms` (Unix milliseconds, read by the
    /// caller: the time any taint the reservation raises is stamped with)
    /// and, when allowed, reserve it.
    fn decide(&self, host: &RequestHost, port: u16, at_ms: u64) -> Verdict;
}

/// A refused pattern or address range given to [`HostRules::new`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid host pattern `{pattern}`: {reason}")]
#[non_exhaustive]
pub struct PatternError {
    /// The pattern as written.
    pub pattern: String,
    /// Why.
    pub reason: String,
}

/// Allow and deny host patterns (`palisade.toml`'s `egress.allow` and
/// `egress.deny` grammar) plus IP literals, decided by
/// `palisade_policy::egress` for a session that is never tainted: deny
/// beats allow, default deny, an IP literal only inside an allowed range.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostRules {
    policy: HostPolicy,
}

impl HostRules {
    /// Build from pattern strings. An allow entry that is an IP address or
    /// CIDR range (`127.0.0.1`, `[::1]`, `10.0.0.0/8`) becomes an
    /// `egress.allow_addresses` range; every other entry is a host pattern.
    pub fn new<A: AsRef<str>, D: AsRef<str>>(
        allow: &[A],
        deny: &[D],
    ) -> Result<Self, PatternError> {
        let err = |pattern: &str, reason: String| PatternError {
            pattern: pattern.to_owned(),
            reason,
        };
        let mut policy = HostPolicy::default();
        for a in allow {
            let a = a.as_ref();
            let ip_like = a.split('/').next().is_some_and(|h| {
                h.trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok()
            });
            if ip_like {
                let range = a.trim_start_matches('[').replacen(']', "", 1);
                policy
                    .egress
                    .allow_addresses
                    .push(Cidr::parse(&range).map_err(|e| err(a, e))?);
            } else {
                policy
                    .egress
                    .allow
                    .push(HostPattern::parse(a).map_err(|e| err(a, e.to_string()))?);
            }
        }
        for d in deny {
            let d = d.as_ref();
            policy
                .egress
                .deny
                .push(HostPattern::parse(d).map_err(|e| err(d, e.to_string()))?);
        }
        Ok(Self { policy })
    }
}

impl Decider for HostRules {
    fn decide(&self, host: &RequestHost, port: u16, _at_ms: u64) -> Verdict {
        palisade_policy::egress::decide_host(&self.policy, &Session::new(), host, port)
    }
}

#[cfg(test)]
mod tests {
    use palisade_policy::verdict::{Decision, Reason};

    use super::*;

    fn name(s: &str) -> RequestHost {
        RequestHost::parse(s).unwrap()
    }

    #[test]
    fn the_rules_follow_the_policy_grammar() {
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
            let r = HostRules::new(&[*pat], &[] as &[&str]).unwrap();
            assert_eq!(
                r.decide(&name(host), *port, 0).is_allow(),
                *want,
                "{pat} vs {host}:{port}"
            );
        }
        let ip = HostRules::new(&["127.0.0.1"], &[] as &[&str]).unwrap();
        assert!(ip.decide(&name("127.0.0.1"), 9, 0).is_allow());
        assert!(!ip.decide(&name("localhost"), 9, 0).is_allow());
        let v6 = HostRules::new(&["[::1]"], &[] as &[&str]).unwrap();
        assert!(v6.decide(&name("[::1]"), 9, 0).is_allow());
        assert!(!v6.decide(&name("::2"), 9, 0).is_allow());
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
            "127.0.0.1/8",
        ] {
            assert!(
                HostRules::new(&[bad], &[] as &[&str]).is_err(),
                "{bad} must be refused"
            );
        }
    }

    #[test]
    fn deny_beats_allow_and_each_refusal_has_its_reason() {
        let r = HostRules::new(&["*.example.com"], &["bad.example.com"]).unwrap();
        let v = r.decide(&name("bad.example.com"), 443, 0);
        assert_eq!(
            (v.decision, v.reason, v.rule.as_deref()),
            (Decision::Deny, Reason::HostDenied, Some("egress.deny[0]"))
        );
        let v = r.decide(&name("good.example.com"), 443, 0);
        assert_eq!(
            (v.decision, v.reason, v.rule.as_deref()),
            (Decision::Allow, Reason::Allowed, Some("egress.allow[0]"))
        );
        assert_eq!(
            r.decide(&name("other.org"), 443, 0).record_reason(),
            "host_not_allowed"
        );
        assert_eq!(
            r.decide(&name("10.0.0.1"), 443, 0).record_reason(),
            "ip_literal_not_allowed"
        );
    }
}
