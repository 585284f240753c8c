//! The [`Decider`] backed by `palisade-policy`: host patterns from
//! `palisade.toml` (`egress.allow`, `egress.deny`), deny beats allow, and
//! the taint-aware rule (a tainted session reaches only
//! `taint.egress_allow` or hosts it already contacted).
//!
//! IP-literal targets never match host patterns; `palisade_policy::egress`
//! allows them only inside an explicit `egress.allow_addresses` range (for
//! a clean session, or one that already contacted them); the address deny
//! set then applies as for any target.
//!
//! A decision that allows also reserves: under one session lock the
//! destination is decided, marked contacted and, when `proxy_non_relay` is
//! a taint source, taints the session, before the proxy resolves or dials.
//! A taint denial's reason says what tainted the session and when.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use palisade_policy::egress::decide_host;
use palisade_policy::verdict::{Decision, Reason, Verdict};
use palisade_schema::host_policy::HostPolicy;
use palisade_taint::{Effects, Event as TaintEvent, Rules, Session, TaintState};

use palisade_schema::host_policy::RequestHost;

use crate::decide::Decider;
use crate::record::{ProxyEvent, Recorder, TaintRecord};

/// A decider over a host policy and a live taint session.
pub struct PolicyDecider {
    policy: Arc<HostPolicy>,
    rules: Arc<Rules>,
    session: Arc<Mutex<Session>>,
    recorder: Option<Arc<dyn Recorder>>,
}

impl fmt::Debug for PolicyDecider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyDecider").finish_non_exhaustive()
    }
}

/// What one decision did: the verdict, the taint effects of the
/// reservation, and the new taint source to record, if there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decided {
    /// The answer for the connection.
    pub verdict: Verdict,
    /// What reserving the destination did to the session (default when denied).
    pub effects: Effects,
    /// A taint source the session did not know yet (record it as `taint_raised`).
    pub raised: Option<TaintRecord>,
}

impl PolicyDecider {
    /// A decider sharing `session` with the rest of the orchestrator.
    pub fn new(policy: Arc<HostPolicy>, rules: Arc<Rules>, session: Arc<Mutex<Session>>) -> Self {
        Self {
            policy,
            rules,
            session,
            recorder: None,
        }
    }

    /// Record every new taint source the proxy's decisions raise as an
    /// [`ProxyEvent::Taint`] (the journal's `taint_raised`) into `recorder`.
    #[must_use]
    pub fn with_recorder(mut self, recorder: Arc<dyn Recorder>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// The shared session.
    pub fn session(&self) -> &Arc<Mutex<Session>> {
        &self.session
    }

    /// Decides on `host:port` at `at_ms` (Unix milliseconds) and, when
    /// allowed, reserves it in the same step under the session lock: the
    /// session marks it contacted and takes in the taint a non-relay
    /// connection raises. Nothing is recorded; the caller records
    /// [`Decided::raised`].
    pub fn decide_at(&self, host: &RequestHost, port: u16, at_ms: u64) -> Decided {
        let Ok(mut session) = self.session.lock() else {
            return Decided {
                verdict: Verdict::new(
                    Decision::Deny,
                    Reason::SessionUnavailable,
                    None,
                    "the session state is unavailable",
                ),
                effects: Effects::default(),
                raised: None,
            };
        };
        let verdict = decide_host(&self.policy, &session, host, port);
        if verdict.decision != Decision::Allow {
            return Decided {
                verdict,
                effects: Effects::default(),
                raised: None,
            };
        }
        let known = source_count(&session);
        let effects = session.apply(
            &self.rules,
            at_ms,
            &TaintEvent::Connect {
                host: host.to_string(),
                port,
                relay: false,
            },
        );
        // Taint sources are a set: record only one the session did not
        // hold yet (a `host:port` contacted before raised it then).
        let new_source = source_count(&session) > known;
        drop(session);
        let raised = match effects.tainted_by {
            Some(src) if new_source => Some(TaintRecord {
                source: src.as_str().to_owned(),
                class: src.as_str().to_owned(),
                detail: format!("{host}:{port}"),
                first: effects.newly_tainted,
                reported_by: "proxy".to_owned(),
                at: UNIX_EPOCH + Duration::from_millis(at_ms),
            }),
            _ => None,
        };
        Decided {
            verdict,
            effects,
            raised,
        }
    }
}

fn source_count(session: &Session) -> usize {
    match session.taint() {
        TaintState::Clean => 0,
        TaintState::Tainted { sources, .. } => sources.len(),
    }
}

impl Decider for PolicyDecider {
    fn decide(&self, host: &RequestHost, port: u16, at_ms: u64) -> Verdict {
        let d = self.decide_at(host, port, at_ms);
        if let (Some(raised), Some(rec)) = (d.raised, &self.recorder) {
            rec.record(&ProxyEvent::Taint(raised));
        }
        d.verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decider(toml: &str) -> PolicyDecider {
        let (policy, _) = palisade_schema::host_policy::parse("t.toml", toml)
            .unwrap()
            .into_parts();
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
            "[egress]\nallow = [\"*.example.com:443\"]\ndeny = [\"bad.example.com\"]\nallow_addresses = [\"127.0.0.0/8\"]\n[taint]\nsources = [\"web\"]\n",
        );
        let n = |s: &str| RequestHost::parse(s).unwrap();
        assert!(d.decide(&n("api.example.com"), 443, 1).is_allow());
        assert!(!d.decide(&n("api.example.com"), 444, 1).is_allow());
        assert!(!d.decide(&n("example.com"), 443, 1).is_allow());
        let v = d.decide(&n("bad.example.com"), 443, 1);
        assert_eq!(
            (v.decision, v.reason, v.record_reason().as_str()),
            (Decision::Deny, Reason::HostDenied, "host_denied")
        );
        let v = d.decide(&n("other.example.org"), 443, 1);
        assert_eq!(v.record_reason(), "host_not_allowed");
        let v = d.decide(&RequestHost::Ip("127.0.0.1".parse().unwrap()), 8080, 1);
        assert_eq!(
            (v.is_allow(), v.rule.as_deref()),
            (true, Some("egress.allow_addresses[0]"))
        );
        let v = d.decide(&RequestHost::Ip("10.0.0.1".parse().unwrap()), 8080, 1);
        assert_eq!(
            (v.is_allow(), v.record_reason().as_str()),
            (false, "ip_literal_not_allowed")
        );
    }

    #[test]
    fn a_proxy_connection_taints_and_narrows_later_decisions() {
        let d = decider(
            "[egress]\nallow = [\"*.example.com\"]\n[taint]\nsources = [\"proxy_non_relay\"]\negress_allow = [\"safe.example.com\"]\n",
        );
        let n = |s: &str| RequestHost::parse(s).unwrap();
        // contacted through a relay first: known, but not yet a taint source
        let _ = d.session().lock().unwrap().apply(
            &d.rules,
            1,
            &TaintEvent::Connect {
                host: "a.example.com".into(),
                port: 443,
                relay: true,
            },
        );
        assert!(!d.session().lock().unwrap().is_tainted());
        let first = d.decide_at(&n("a.example.com"), 443, 31_586_000);
        assert!(first.verdict.is_allow());
        assert!(first.effects.newly_tainted, "the allow itself taints");
        let raised = first.raised.unwrap();
        assert_eq!(
            (raised.class.as_str(), raised.detail.as_str(), raised.first),
            ("proxy_non_relay", "a.example.com:443", true)
        );
        assert!(d.session().lock().unwrap().is_tainted());
        // tainted: only taint.egress_allow or already contacted; a known
        // source is not raised again, a new one is (but not as the first)
        let again = d.decide_at(&n("a.example.com"), 443, 31_587_000);
        assert!(again.verdict.is_allow() && again.raised.is_none());
        let safe = d.decide_at(&n("safe.example.com"), 443, 31_588_000);
        assert!(safe.verdict.is_allow());
        assert!(
            safe.raised
                .is_some_and(|r| !r.first && r.detail == "safe.example.com:443")
        );
        let v = d.decide(&n("b.example.com"), 443, 31_589_000);
        assert_eq!(v.reason, Reason::TaintedSession);
        assert_eq!(
            v.record_reason(),
            "tainted_session: tainted by proxy_non_relay (a.example.com:443) at 08:46:26 UTC; \
             only taint.egress_allow and contacted hosts are open"
        );
    }
}
