//! The egress decision: may this session open a connection to `host:port`?
//!
//! Order of evaluation, first hit wins:
//!
//! 0. the origin `host:port` of an outward relay ([`Relay::is_outward`]: a
//!    git relay, a preset, or a route with `outward`) is denied
//!    ([`Reason::RelayRequired`], rule `egress.relay[i]`): it is reached
//!    only through that relay, which asks before acting in the user's name
//!    ("one way out"), whatever `egress.allow` and the session say;
//! 1. a host that does not normalise is denied; an unspecified address
//!    (`0.0.0.0/8`, `::`, `::ffff:0.0.0.0`) is denied whatever the ranges
//!    say; an IP literal is allowed only
//!    inside an `egress.allow_addresses` range (and, in a tainted session,
//!    only if already contacted): name rules never match addresses, and the
//!    proxy's address checks still come after this decision;
//! 2. a match in `egress.deny` denies (deny beats allow);
//! 3. no match in `egress.allow` denies (default deny);
//! 4. a clean session is allowed;
//! 5. a tainted session is allowed only when the host also matches
//!    `taint.egress_allow` or the session already contacted this `host:port`;
//!    otherwise it is denied, and the reason says what tainted the session
//!    and when ([`taint_explanation`]).
//!
//! Taint therefore only narrows: a tainted session allows a subset of what a
//! clean one allows for the same policy and history. The decision is on the
//! *name* as requested (check before resolve); the caller dials the
//! normalised name from [`RequestHost::parse`] and applies its address deny
//! set to whatever that name resolves to.
//!
//! ```
//! use palisade_policy::egress::{ConnectRequest, decide};
//! use palisade_policy::verdict::{Decision, Reason};
//! use palisade_schema::host_policy::parse;
//! use palisade_taint::Session;
//!
//! let text = "[egress]\nallow = [\"*.example.com:443\"]\ndeny = [\"evil.example.com\"]\n";
//! let (policy, _) = parse("palisade.toml", text).map_err(|d| d.to_string())?.into_parts();
//! let session = Session::new();
//! let v = decide(&policy, &session, &ConnectRequest { host: "API.Example.com.", port: 443 });
//! assert_eq!((v.decision, v.rule.as_deref()), (Decision::Allow, Some("egress.allow[0]")));
//! let v = decide(&policy, &session, &ConnectRequest { host: "example.com", port: 443 });
//! assert_eq!(v.decision, Decision::Deny); // `*.` never matches the bare name
//! let v = decide(&policy, &session, &ConnectRequest { host: "evil.example.com", port: 443 });
//! assert_eq!(v.rule.as_deref(), Some("egress.deny[0]"));
//! assert_eq!(v.reason, Reason::HostDenied);
//! # Ok::<(), String>(())
//! ```

use std::net::IpAddr;

use palisade_schema::host_policy::{HostPolicy, Relay};
use palisade_taint::Session;

pub use crate::host_pattern::RequestHost;
use crate::host_pattern::first_match;
use crate::verdict::{Decision, Reason, Verdict};

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
            return Verdict::new(
                Decision::Deny,
                Reason::InvalidHost,
                None,
                format!("invalid host: {err}"),
            );
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
    if let Some((i, relay)) = outward_relay_for(policy, host, port) {
        return Verdict::new(
            Decision::Deny,
            Reason::RelayRequired,
            Some(format!("egress.relay[{i}]")),
            format!(
                "`{target}` is reached only through relay `{}`, which asks before acting in the user's name",
                relay.name
            ),
        );
    }
    if port == 0 {
        return Verdict::new(
            Decision::Deny,
            Reason::HostNotAllowed,
            None,
            "port 0 is not a destination",
        );
    }
    let egress = &policy.egress;
    if let RequestHost::Ip(ip) = host
        && is_unspecified(*ip)
    {
        return Verdict::new(
            Decision::Deny,
            Reason::IpLiteralNotAllowed,
            None,
            format!("`{target}` is an unspecified address (0.0.0.0/8, `::`), never a destination"),
        );
    }
    if let RequestHost::Ip(ip) = host {
        let Some((i, range)) = egress
            .allow_addresses
            .iter()
            .enumerate()
            .find(|(_, c)| c.contains(*ip))
        else {
            return Verdict::new(
                Decision::Deny,
                Reason::IpLiteralNotAllowed,
                None,
                format!("`{target}` is an IP literal outside egress.allow_addresses"),
            );
        };
        if !session.is_tainted() || session.has_contacted(host, port) {
            return Verdict::new(
                Decision::Allow,
                Reason::Allowed,
                Some(format!("egress.allow_addresses[{i}]")),
                format!("`{target}` is in `{range}`"),
            );
        }
        return Verdict::new(
            Decision::Deny,
            Reason::TaintedSession,
            Some("taint.egress_allow".to_owned()),
            taint_explanation(session),
        );
    }
    if let Some((i, p)) = first_match(&egress.deny, host, port) {
        return Verdict::new(
            Decision::Deny,
            Reason::HostDenied,
            Some(format!("egress.deny[{i}]")),
            format!("`{target}` matches deny rule `{p}`"),
        );
    }
    let Some((i, allow)) = first_match(&egress.allow, host, port) else {
        return Verdict::new(
            Decision::Deny,
            Reason::HostNotAllowed,
            None,
            format!("no rule in egress.allow matches `{target}`"),
        );
    };
    if !session.is_tainted() {
        return Verdict::new(
            Decision::Allow,
            Reason::Allowed,
            Some(format!("egress.allow[{i}]")),
            format!("`{target}` matches allow rule `{allow}`"),
        );
    }
    if let Some((j, p)) = first_match(&policy.taint.egress_allow, host, port) {
        return Verdict::new(
            Decision::Allow,
            Reason::Allowed,
            Some(format!("taint.egress_allow[{j}]")),
            format!("the session is tainted and `{target}` matches `{p}` in taint.egress_allow"),
        );
    }
    if session.has_contacted(host, port) {
        return Verdict::new(
            Decision::Allow,
            Reason::Allowed,
            Some(format!("egress.allow[{i}]")),
            format!("the session is tainted but already contacted `{target}`"),
        );
    }
    Verdict::new(
        Decision::Deny,
        Reason::TaintedSession,
        Some("taint.egress_allow".to_owned()),
        taint_explanation(session),
    )
}

/// The first relay with [`Relay::is_outward`] whose origin is `host:port`
/// (names compared normalised, IPv4-mapped IPv6 as IPv4, the port exact),
/// with its index in `egress.relay`: the proxy refuses such a connection
/// ("one way out", [`Reason::RelayRequired`]).
pub fn outward_relay_for<'p>(
    policy: &'p HostPolicy,
    host: &RequestHost,
    port: u16,
) -> Option<(usize, &'p Relay)> {
    let host = unmapped(host);
    policy.egress.relays.iter().enumerate().find(|(_, r)| {
        r.is_outward()
            && r.origin.port == port
            && RequestHost::parse(&r.origin.host).is_ok_and(|h| unmapped(&h) == host)
    })
}

/// `host` with an IPv4-mapped IPv6 address written as the IPv4 address.
fn unmapped(host: &RequestHost) -> RequestHost {
    match host {
        RequestHost::Ip(IpAddr::V6(v6)) => v6
            .to_ipv4_mapped()
            .map_or_else(|| host.clone(), |v4| RequestHost::Ip(IpAddr::V4(v4))),
        _ => host.clone(),
    }
}

/// `0.0.0.0/8` ("this network", which Linux dials as the local host), `::`,
/// and their IPv4-mapped forms: never a destination, whatever
/// `egress.allow_addresses` says.
pub fn is_unspecified(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    };
    match ip {
        IpAddr::V4(v4) => u32::from(v4) >> 24 == 0,
        IpAddr::V6(v6) => v6.is_unspecified(),
    }
}

/// Why and since when a session is tainted, for the reason of a taint
/// denial: `tainted by proxy_non_relay (crates.io:443) at 08:46:26 UTC;
/// only taint.egress_allow and contacted hosts are open`. The detail is
/// escaped to printable ASCII (it may come from a worker's report and the
/// reason travels in a response header).
pub fn taint_explanation(session: &Session) -> String {
    let what = session.first_source().map_or_else(
        || "tainted".to_owned(),
        |s| {
            format!(
                "tainted by {} ({})",
                s.source.as_str(),
                s.detail.escape_default()
            )
        },
    );
    let when = session
        .first_tainted_at_ms()
        .map(|ms| {
            let secs = ms / 1000;
            format!(
                " at {:02}:{:02}:{:02} UTC",
                (secs / 3600) % 24,
                (secs / 60) % 60,
                secs % 60
            )
        })
        .unwrap_or_default();
    format!("{what}{when}; only taint.egress_allow and contacted hosts are open")
}
