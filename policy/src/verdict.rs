//! The result of an egress, outward or routing decision: one [`Verdict`]
//! type for every host-policy decider, with a typed [`Reason`] whose
//! stable snake_case code is what journals record.
//!
//! ```
//! use palisade_policy::verdict::{Decision, Reason, Verdict};
//!
//! let v = Verdict::new(Decision::Deny, Reason::HostDenied, Some("egress.deny[0]".into()), "why");
//! assert_eq!(v.reason.to_string(), "host_denied");
//! let json = serde_json::to_value(&v).unwrap();
//! assert_eq!(json["reason"], "host_denied");
//! assert_eq!(serde_json::from_value::<Verdict>(json).unwrap(), v);
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

/// Allow, ask a human, or deny.
///
/// Not `#[non_exhaustive]`: a new outcome should break every caller's match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Go ahead.
    Allow,
    /// Ask a human first (outward actions only).
    Ask,
    /// Refuse.
    Deny,
}

impl Decision {
    /// `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Ask => "ask",
            Self::Deny => "deny",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a decision came out as it did, as a stable code.
///
/// The code ([`Reason::code`], also its `Display` and its serde form) is
/// what the proxy writes into `egress_connection` records (`docs/journal.md`)
/// and what callers match on; the human sentence is [`Verdict::detail`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reason {
    /// An allow rule (or a built-in allow, such as an unrestricted route) decided.
    Allowed,
    /// Egress: the host matches an `egress.deny` rule (deny beats allow).
    HostDenied,
    /// Egress: no `egress.allow` rule matches, or the port is 0.
    HostNotAllowed,
    /// Egress: the host is not a host name or IP literal.
    InvalidHost,
    /// Egress: an IP literal outside `egress.allow_addresses`, or an
    /// unspecified address.
    IpLiteralNotAllowed,
    /// Egress: the session is tainted and the destination is neither in
    /// `taint.egress_allow` nor already contacted.
    TaintedSession,
    /// Egress: the session state could not be read (a poisoned lock), so
    /// nothing is allowed.
    SessionUnavailable,
    /// Outward: the action matches an `outward.deny` rule.
    OutwardDenied,
    /// Outward: the action matches an `outward.allow` rule but the session
    /// is tainted, so it asks.
    TaintedAsk,
    /// Outward: no rule matches; `outward.default` decided.
    OutwardDefault,
    /// Outward: the kind is not a valid outward kind.
    InvalidOutwardKind,
    /// Routing: a `routing` rule keeps the content (or something the
    /// session read) from this provider.
    RouteDenied,
    /// Routing enforced: the session read a path whose `[[routing]]` rule
    /// does not list this provider, so the provider's relays refuse its
    /// requests and the proxy refuses connections to its API hosts. The
    /// detail names the rule, the path and the provider.
    RoutingDenied,
    /// Egress: the host is the origin of an outward relay (a git relay, a
    /// preset or an outward route), so it is reached only through that
    /// relay, which asks before acting in the user's name; the detail names
    /// the relay.
    RelayRequired,
    /// The host policy section could not be compiled; everything is denied.
    PolicyInvalid,
}

impl Reason {
    /// The stable snake_case code (`host_denied`, `tainted_session`, …).
    pub fn code(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::HostDenied => "host_denied",
            Self::HostNotAllowed => "host_not_allowed",
            Self::InvalidHost => "invalid_host",
            Self::IpLiteralNotAllowed => "ip_literal_not_allowed",
            Self::TaintedSession => "tainted_session",
            Self::SessionUnavailable => "session_unavailable",
            Self::OutwardDenied => "outward_denied",
            Self::TaintedAsk => "tainted_ask",
            Self::OutwardDefault => "outward_default",
            Self::InvalidOutwardKind => "invalid_outward_kind",
            Self::RouteDenied => "route_denied",
            Self::RoutingDenied => "routing_denied",
            Self::RelayRequired => "relay_required",
            Self::PolicyInvalid => "policy_invalid",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A decision with its typed reason, the rule that made it and a human
/// sentence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Verdict {
    /// The outcome.
    pub decision: Decision,
    /// Why, as a stable code.
    pub reason: Reason,
    /// The deciding rule as an authored path into `palisade.toml`
    /// (`egress.deny[0]`, `outward.default`, `routing[2]`), or `None` when
    /// no rule matched and a built-in default or an input error decided.
    pub rule: Option<String>,
    /// Why, in one human line (printable; it may travel in a header).
    pub detail: String,
}

impl Verdict {
    /// A verdict; deciders outside this crate (a test double, an
    /// embedder's own [`Decision`] source) build theirs with it.
    pub fn new(
        decision: Decision,
        reason: Reason,
        rule: Option<String>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            decision,
            reason,
            rule,
            detail: detail.into(),
        }
    }

    /// Whether the decision is [`Decision::Allow`].
    pub fn is_allow(&self) -> bool {
        self.decision == Decision::Allow
    }

    /// The reason as a journal record carries it: the code, and for a
    /// [`Reason::TaintedSession`] denial the code followed by `: ` and the
    /// detail (what tainted the session and when), as `docs/egress.md`
    /// shows; likewise for a [`Reason::RoutingDenied`] denial (the rule,
    /// the path and the provider) and a [`Reason::RelayRequired`] one (the
    /// relay to use).
    pub fn record_reason(&self) -> String {
        match self.reason {
            Reason::TaintedSession | Reason::RoutingDenied | Reason::RelayRequired => {
                format!("{}: {}", self.reason, self.detail)
            }
            r => r.code().to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_serde_form_and_display() {
        for r in [
            Reason::Allowed,
            Reason::HostDenied,
            Reason::HostNotAllowed,
            Reason::InvalidHost,
            Reason::IpLiteralNotAllowed,
            Reason::TaintedSession,
            Reason::SessionUnavailable,
            Reason::OutwardDenied,
            Reason::TaintedAsk,
            Reason::OutwardDefault,
            Reason::InvalidOutwardKind,
            Reason::RouteDenied,
            Reason::RoutingDenied,
            Reason::PolicyInvalid,
        ] {
            let json = serde_json::to_value(r).unwrap();
            assert_eq!(json, serde_json::Value::from(r.code()));
            assert_eq!(r.to_string(), r.code());
            assert_eq!(serde_json::from_value::<Reason>(json).unwrap(), r);
        }
    }

    #[test]
    fn only_taint_and_routing_denials_carry_their_detail_into_the_record() {
        let t = Verdict::new(Decision::Deny, Reason::TaintedSession, None, "tainted by x");
        assert_eq!(t.record_reason(), "tainted_session: tainted by x");
        let d = Verdict::new(Decision::Deny, Reason::HostDenied, None, "`a` matches `b`");
        assert_eq!(d.record_reason(), "host_denied");
        let r = Verdict::new(Decision::Deny, Reason::RoutingDenied, None, "read `p`");
        assert_eq!(r.record_reason(), "routing_denied: read `p`");
        let o = Verdict::new(Decision::Deny, Reason::RouteDenied, None, "read `p`");
        assert_eq!(o.record_reason(), "route_denied");
    }
}
