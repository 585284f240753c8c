//! Data-to-provider routing: may content from this path, or this whole
//! session, go to this provider?
//!
//! Each `[[routing]]` rule maps path globs to the providers allowed to
//! receive content read from those paths. A path that matches no rule is
//! unrestricted. A path that matches several rules may go only to providers
//! that every one of them allows (the intersection: the strictest wins).
//!
//! Routing is sticky, like taint: once a session read a restricted path
//! (`palisade_taint::Session::restricted_reads`), dispatching that session
//! to a provider not allowed for that path is refused for the rest of the
//! session ([`RouteTable::decide_dispatch`]).
//!
//! Paths are normalised lexically against `worker.cwd` (see
//! `palisade_taint::normalize_path`); symbolic links are not resolved.

use std::collections::BTreeSet;

use globset::{GlobSet, GlobSetBuilder};
use palisade_schema::host_policy::HostPolicy;
use palisade_taint::{Session, normalize_path};

use crate::verdict::{Decision, Reason, Verdict};

/// The `[[routing]]` rules, compiled.
#[derive(Clone, Debug)]
pub struct RouteTable {
    rules: Vec<(GlobSet, BTreeSet<String>)>,
    cwd: Option<String>,
}

/// A routing glob did not compile (the schema parser should have refused it).
#[derive(Debug, thiserror::Error)]
#[error("routing glob `{glob}` does not compile: {message}")]
#[non_exhaustive]
pub struct RouteError {
    /// The glob text.
    pub glob: String,
    /// The compiler's message.
    pub message: String,
}

impl RouteTable {
    /// Compiles the `[[routing]]` rules of `policy`.
    pub fn new(policy: &HostPolicy) -> Result<Self, RouteError> {
        let mut rules = Vec::with_capacity(policy.routing.len());
        for r in &policy.routing {
            let mut b = GlobSetBuilder::new();
            for g in &r.paths {
                b.add(g.compile().map_err(|e| RouteError {
                    glob: g.as_str().to_owned(),
                    message: e.to_string(),
                })?);
            }
            let set = b.build().map_err(|e| RouteError {
                glob: String::new(),
                message: e.to_string(),
            })?;
            rules.push((set, r.providers.clone()));
        }
        Ok(Self {
            rules,
            cwd: policy.worker.cwd.clone(),
        })
    }

    /// Indices of the rules that restrict `path`.
    pub fn restrictions(&self, path: &str) -> Vec<usize> {
        let forms = normalize_path(path, self.cwd.as_deref());
        self.rules
            .iter()
            .enumerate()
            .filter(|(_, (set, _))| forms.iter().any(|f| set.is_match(f)))
            .map(|(i, _)| i)
            .collect()
    }

    /// The providers allowed for `path`, or `None` when no rule restricts it.
    pub fn allowed_providers(&self, path: &str) -> Option<BTreeSet<String>> {
        let mut out: Option<BTreeSet<String>> = None;
        for i in self.restrictions(path) {
            let Some((_, providers)) = self.rules.get(i) else {
                continue;
            };
            out = Some(match out {
                None => providers.clone(),
                Some(acc) => acc.intersection(providers).cloned().collect(),
            });
        }
        out
    }

    /// May content read from `path` go to `provider`?
    pub fn decide_route(&self, path: &str, provider: &str) -> Verdict {
        let restrictions = self.restrictions(path);
        if restrictions.is_empty() {
            return Verdict::new(
                Decision::Allow,
                Reason::Allowed,
                None,
                format!("no routing rule restricts `{path}`"),
            );
        }
        for i in &restrictions {
            if let Some((_, providers)) = self.rules.get(*i)
                && !providers.contains(provider)
            {
                return Verdict::new(
                    Decision::Deny,
                    Reason::RouteDenied,
                    Some(format!("routing[{i}]")),
                    format!(
                        "`{path}` may go only to {}; not to `{provider}`",
                        list(providers)
                    ),
                );
            }
        }
        let first = restrictions.first().copied().unwrap_or_default();
        Verdict::new(
            Decision::Allow,
            Reason::Allowed,
            Some(format!("routing[{first}]")),
            format!("`{provider}` may receive `{path}`"),
        )
    }

    /// May this session, with everything it read so far, be dispatched to
    /// `provider`?
    pub fn decide_dispatch(&self, session: &Session, provider: &str) -> Verdict {
        let mut last_rule = None;
        for path in session.restricted_reads() {
            let v = self.decide_route(path, provider);
            if v.decision != Decision::Allow {
                return Verdict::new(
                    Decision::Deny,
                    v.reason,
                    v.rule,
                    format!("the session read `{path}` earlier: {}", v.detail),
                );
            }
            last_rule = v.rule.or(last_rule);
        }
        Verdict::new(
            Decision::Allow,
            Reason::Allowed,
            last_rule,
            format!("nothing the session read is kept from `{provider}`"),
        )
    }
}

/// Compiles `policy` and decides whether `path` may go to `provider`; a
/// policy that does not compile denies.
pub fn decide_route(policy: &HostPolicy, path: &str, provider: &str) -> Verdict {
    match RouteTable::new(policy) {
        Ok(t) => t.decide_route(path, provider),
        Err(err) => Verdict::new(Decision::Deny, Reason::PolicyInvalid, None, err.to_string()),
    }
}

/// Compiles `policy` and decides whether `session` may be dispatched to `provider`.
pub fn decide_dispatch(policy: &HostPolicy, session: &Session, provider: &str) -> Verdict {
    match RouteTable::new(policy) {
        Ok(t) => t.decide_dispatch(session, provider),
        Err(err) => Verdict::new(Decision::Deny, Reason::PolicyInvalid, None, err.to_string()),
    }
}

fn list(providers: &BTreeSet<String>) -> String {
    if providers.is_empty() {
        "no provider".to_owned()
    } else {
        providers
            .iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The built-in API hosts of the routing providers palisade knows, as host
/// patterns (`egress.provider_hosts` adds to them). A session whose routing
/// state keeps content from a provider refuses new proxy connections to
/// these hosts, as that provider's relays refuse requests.
///
/// SKELETON (issue 17): the policy helper fills in the list and its docs.
pub const BUILTIN_PROVIDER_HOSTS: &[(&str, &[&str])] = &[
    ("anthropic", &["api.anthropic.com"]),
    ("openai", &["api.openai.com"]),
];

/// Which provider an API host belongs to: the built-in list plus the
/// policy's `egress.provider_hosts`.
#[derive(Clone, Debug, Default)]
pub struct ProviderHosts {
    entries: Vec<(String, Vec<palisade_schema::host_policy::HostPattern>)>,
}

impl ProviderHosts {
    /// The built-in list extended by `policy`'s `egress.provider_hosts`.
    pub fn new(_policy: &HostPolicy) -> Self {
        Self::default()
    }

    /// The providers whose API hosts include `host` (usually one).
    pub fn providers_of(&self, host: &palisade_schema::host_policy::RequestHost) -> Vec<&str> {
        let _ = host;
        self.entries
            .iter()
            .map(|(p, _)| p.as_str())
            .take(0)
            .collect()
    }
}
