//! The [`Decider`] backed by `palisade-policy`: host patterns from
//! `palisade.toml` (`egress.allow`, `egress.deny`), deny beats allow, and
//! the taint-aware rule (a tainted session reaches only
//! `taint.egress_allow` or hosts it already contacted).
//!
//! IP-literal targets never match host patterns; `palisade_policy::egress`
//! allows them only inside an explicit `egress.allow_addresses` range (for
//! a clean session, or one that already contacted them); the address deny
//! set then applies as for any target.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use palisade_policy::egress::{RequestHost, decide_host};
use palisade_policy::verdict::Decision;
use palisade_schema::host_policy::HostPolicy;
use palisade_taint::{Event as TaintEvent, Rules, Session};

use crate::decide::{Decider, Verdict};
use crate::head::Host;

/// A decider over a host policy and a live taint session.
pub struct PolicyDecider {
    policy: Arc<HostPolicy>,
    rules: Arc<Rules>,
    session: Arc<Mutex<Session>>,
}

impl fmt::Debug for PolicyDecider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyDecider").finish_non_exhaustive()
    }
}

impl PolicyDecider {
    /// A decider sharing `session` with the rest of the orchestrator.
    pub fn new(policy: Arc<HostPolicy>, rules: Arc<Rules>, session: Arc<Mutex<Session>>) -> Self {
        Self {
            policy,
            rules,
            session,
        }
    }

    /// The shared session.
    pub fn session(&self) -> &Arc<Mutex<Session>> {
        &self.session
    }
}

fn request_host(host: &Host) -> RequestHost {
    match host {
        Host::Name(n) => RequestHost::Name(n.clone()),
        Host::Ip(ip) => RequestHost::Ip(*ip),
    }
}

impl Decider for PolicyDecider {
    fn decide(&self, host: &Host, port: u16) -> Verdict {
        let Ok(session) = self.session.lock() else {
            return Verdict::deny(None, "session_unavailable");
        };
        let v = decide_host(&self.policy, &session, &request_host(host), port);
        match v.decision {
            Decision::Allow => Verdict::allow(v.rule.unwrap_or_default()),
            _ => {
                let code = match v.rule.as_deref() {
                    Some(r) if r.starts_with("egress.deny") => "host_denied",
                    Some(r) if r.starts_with("taint") => "tainted_session",
                    _ if matches!(host, Host::Ip(_)) => "ip_literal_not_allowed",
                    _ => "host_not_allowed",
                };
                Verdict::deny(v.rule, code)
            }
        }
    }

    fn contacted(&self, host: &Host, port: u16) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        if let Ok(mut s) = self.session.lock() {
            let _ = s.apply(
                &self.rules,
                now,
                &TaintEvent::Connect {
                    host: request_host(host).to_string(),
                    port,
                    relay: false,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decider(toml: &str) -> PolicyDecider {
        let (policy, _) = palisade_schema::host_policy::parse_strict(toml, "t.toml").unwrap();
        let rules = Rules::new(&policy, &[]).unwrap();
        PolicyDecider::new(
            Arc::new(policy),
            Arc::new(rules),
            Arc::new(Mutex::new(Session::new())),
        )
    }

    #[test]
    fn names_follow_the_policy_and_ip_literals_need_a_carve_out() {
        let d = decider(
            "[egress]\nallow = [\"*.example.com:443\"]\ndeny = [\"bad.example.com\"]\nallow_addresses = [\"127.0.0.0/8\"]\n",
        );
        let n = |s: &str| Host::Name(s.into());
        assert!(d.decide(&n("api.example.com"), 443).allow);
        assert!(!d.decide(&n("api.example.com"), 444).allow);
        assert!(!d.decide(&n("example.com"), 443).allow);
        let v = d.decide(&n("bad.example.com"), 443);
        assert_eq!((v.allow, v.reason.as_str()), (false, "host_denied"));
        let v = d.decide(&Host::Ip("127.0.0.1".parse().unwrap()), 8080);
        assert_eq!(
            (v.allow, v.rule.as_deref()),
            (true, Some("egress.allow_addresses[0]"))
        );
        let v = d.decide(&Host::Ip("10.0.0.1".parse().unwrap()), 8080);
        assert_eq!(
            (v.allow, v.reason.as_str()),
            (false, "ip_literal_not_allowed")
        );
    }

    #[test]
    fn a_proxy_connection_taints_and_narrows_later_decisions() {
        let d = decider(
            "[egress]\nallow = [\"*.example.com\"]\n[taint]\nsources = [\"proxy_non_relay\"]\negress_allow = [\"safe.example.com\"]\n",
        );
        let n = |s: &str| Host::Name(s.into());
        assert!(d.decide(&n("a.example.com"), 443).allow);
        d.contacted(&n("a.example.com"), 443);
        assert!(d.session().lock().unwrap().is_tainted());
        // tainted: only taint.egress_allow or already contacted
        assert!(d.decide(&n("a.example.com"), 443).allow);
        assert!(d.decide(&n("safe.example.com"), 443).allow);
        let v = d.decide(&n("b.example.com"), 443);
        assert_eq!((v.allow, v.reason.as_str()), (false, "tainted_session"));
    }
}
