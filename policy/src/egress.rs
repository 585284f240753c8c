//! The egress decision: may this session open a connection to `host:port`?
//!
//! Order of evaluation, first hit wins:
//!
//! 1. a host that does not normalise is denied; an IP literal is allowed only
//!    inside an `egress.allow_addresses` range (and, in a tainted session,
//!    only if already contacted): name rules never match addresses, and the
//!    proxy's address checks still come after this decision;
//! 2. a match in `egress.deny` denies (deny beats allow);
//! 3. no match in `egress.allow` denies (default deny);
//! 4. a clean session is allowed;
//! 5. a tainted session is allowed only when the host also matches
//!    `taint.egress_allow` or the session already contacted this `host:port`;
//!    otherwise it is denied.
//!
//! Taint therefore only narrows: a tainted session allows a subset of what a
//! clean one allows for the same policy and history. The decision is on the
//! *name* as requested (check before resolve); the caller dials the
//! normalised name from [`RequestHost::parse`] and applies its address deny
//! set to whatever that name resolves to.
//!
//! ```
//! use palisade_policy::egress::{ConnectRequest, decide};
//! use palisade_policy::verdict::Decision;
//! use palisade_schema::host_policy::parse_strict;
//! use palisade_taint::Session;
//!
//! let text = "[egress]\nallow = [\"*.example.com:443\"]\ndeny = [\"evil.example.com\"]\n";
//! let (policy, _) = parse_strict(text, "palisade.toml").map_err(|d| d[0].to_string())?;
//! let session = Session::new();
//! let v = decide(&policy, &session, &ConnectRequest { host: "API.Example.com.", port: 443 });
//! assert_eq!((v.decision, v.rule.as_deref()), (Decision::Allow, Some("egress.allow[0]")));
//! let v = decide(&policy, &session, &ConnectRequest { host: "example.com", port: 443 });
//! assert_eq!(v.decision, Decision::Deny); // `*.` never matches the bare name
//! let v = decide(&policy, &session, &ConnectRequest { host: "evil.example.com", port: 443 });
//! assert_eq!(v.rule.as_deref(), Some("egress.deny[0]"));
//! # Ok::<(), String>(())
//! ```

use palisade_schema::host_policy::HostPolicy;
use palisade_taint::Session;

pub use crate::host_pattern::RequestHost;
use crate::host_pattern::first_match;
use crate::verdict::{Decision, Verdict};

/// A connection request as the proxy sees it (the CONNECT authority).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectRequest<'a> {
    /// The host as requested, without port (IPv6 in brackets or not).
    pub host: &'a str,
    /// The destination port.
    pub port: u16,
}

/// Decides a connection request for `session` under `policy`.
pub fn decide(policy: &HostPolicy, session: &Session, request: &ConnectRequest<'_>) -> Verdict {
    let host = match RequestHost::parse(request.host) {
        Ok(h) => h,
        Err(err) => {
            return Verdict::new(Decision::Deny, None, format!("invalid host: {err}"));
        }
    };
    decide_host(policy, session, &host, request.port)
}

/// Decides a connection to an already normalised host.
pub fn decide_host(
    policy: &HostPolicy,
    session: &Session,
    host: &RequestHost,
    port: u16,
) -> Verdict {
    let target = format!("{host}:{port}");
    if port == 0 {
        return Verdict::new(Decision::Deny, None, "port 0 is not a destination");
    }
    let egress = &policy.egress;
    if let RequestHost::Ip(ip) = host {
        let Some((i, range)) = egress
            .allow_addresses
            .iter()
            .enumerate()
            .find(|(_, c)| c.contains(*ip))
        else {
            return Verdict::new(
                Decision::Deny,
                None,
                format!("`{target}` is an IP literal outside egress.allow_addresses"),
            );
        };
        if !session.is_tainted() || session.has_contacted(host, port) {
            return Verdict::new(
                Decision::Allow,
                Some(format!("egress.allow_addresses[{i}]")),
                format!("`{target}` is in `{range}`"),
            );
        }
        return Verdict::new(
            Decision::Deny,
            Some("taint.egress_allow".to_owned()),
            format!("the session is tainted and the address `{target}` was not contacted before"),
        );
    }
    if let Some((i, p)) = first_match(&egress.deny, host, port) {
        return Verdict::new(
            Decision::Deny,
            Some(format!("egress.deny[{i}]")),
            format!("`{target}` matches deny rule `{p}`"),
        );
    }
    let Some((i, allow)) = first_match(&egress.allow, host, port) else {
        return Verdict::new(
            Decision::Deny,
            None,
            format!("no rule in egress.allow matches `{target}`"),
        );
    };
    if !session.is_tainted() {
        return Verdict::new(
            Decision::Allow,
            Some(format!("egress.allow[{i}]")),
            format!("`{target}` matches allow rule `{allow}`"),
        );
    }
    if let Some((j, p)) = first_match(&policy.taint.egress_allow, host, port) {
        return Verdict::new(
            Decision::Allow,
            Some(format!("taint.egress_allow[{j}]")),
            format!("the session is tainted and `{target}` matches `{p}` in taint.egress_allow"),
        );
    }
    if session.has_contacted(host, port) {
        return Verdict::new(
            Decision::Allow,
            Some(format!("egress.allow[{i}]")),
            format!("the session is tainted but already contacted `{target}`"),
        );
    }
    Verdict::new(
        Decision::Deny,
        Some("taint.egress_allow".to_owned()),
        format!(
            "the session is tainted and `{target}` is neither in taint.egress_allow nor already contacted"
        ),
    )
}
