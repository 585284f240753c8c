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
//! The governed session enforces it where content leaves: a relay bound to
//! a provider asks [`RouteTable::decide_provider`] (or
//! [`RouteTable::refusal`] for the facts of its refusal body) before every
//! request, and the proxy asks [`RouteTable::decide_host`] whether a new
//! connection goes to the API host of a provider the session's reads are
//! kept from ([`ProviderHosts`]: the built-in list plus
//! `egress.provider_hosts`). Both deny with `routing_denied`.
//!
//! Paths are normalised lexically against `worker.cwd` (see
//! `palisade_taint::normalize_path`); symbolic links are not resolved.

use std::collections::{BTreeMap, BTreeSet};

use globset::{GlobSet, GlobSetBuilder};
use palisade_schema::host_policy::{HostPattern, HostPolicy, RequestHost};
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
/// pattern text (the list lives in `palisade-schema`, whose lints read it
/// too). `egress.provider_hosts` adds to it; [`ProviderHosts`] is the
/// compiled union.
pub use palisade_schema::host_policy::BUILTIN_PROVIDER_HOSTS;

/// Which provider an API host belongs to: the built-in list
/// ([`BUILTIN_PROVIDER_HOSTS`]) plus the policy's `egress.provider_hosts`.
///
/// Matching is on the name only, with the host-pattern grammar
/// (`*.example.com` is strict subdomains): a provider's host is its host on
/// every port. A host can belong to several providers (a policy may list a
/// built-in host under its own name too); each of them counts.
#[derive(Clone, Debug, Default)]
pub struct ProviderHosts {
    entries: Vec<(String, Vec<HostPattern>)>,
}

impl ProviderHosts {
    /// The built-in list extended by `policy`'s `egress.provider_hosts`.
    pub fn new(policy: &HostPolicy) -> Self {
        let mut map: BTreeMap<String, Vec<HostPattern>> = BTreeMap::new();
        for (name, hosts) in BUILTIN_PROVIDER_HOSTS {
            let list = map.entry((*name).to_owned()).or_default();
            // Every built-in entry parses (checked by the schema's tests).
            list.extend(hosts.iter().filter_map(|h| HostPattern::parse(h).ok()));
        }
        for (name, hosts) in &policy.egress.provider_hosts {
            map.entry(name.clone())
                .or_default()
                .extend(hosts.iter().cloned());
        }
        let entries = map
            .into_iter()
            .map(|(name, mut hosts)| {
                hosts.sort();
                hosts.dedup();
                (name, hosts)
            })
            .collect();
        Self { entries }
    }

    /// The providers whose API hosts include `host`, sorted and without
    /// duplicates (usually one, often none). An IP literal is no
    /// provider's host: host patterns name DNS names only.
    pub fn providers_of(&self, host: &RequestHost) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|(_, hosts)| hosts.iter().any(|h| h.matches_name(host)))
            .map(|(p, _)| p.as_str())
            .collect()
    }

    /// The API hosts of `provider` (empty for a provider with none).
    pub fn hosts_of(&self, provider: &str) -> &[HostPattern] {
        self.entries
            .iter()
            .find(|(p, _)| p == provider)
            .map_or(&[], |(_, h)| h.as_slice())
    }

    /// Every provider with at least one API host, sorted.
    pub fn providers(&self) -> impl Iterator<Item = &str> {
        self.entries
            .iter()
            .filter(|(_, h)| !h.is_empty())
            .map(|(p, _)| p.as_str())
    }
}

/// Why a session may no longer send to a provider: the first restricted
/// read (in path order) and the first rule restricting it (in file order)
/// that does not list the provider.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RoutingRefusal {
    /// The refused provider.
    pub provider: String,
    /// The restricted path the session read, as the session keeps it
    /// (absolute when the policy names `worker.cwd`).
    pub path: String,
    /// The index of the `[[routing]]` rule.
    pub rule_index: usize,
    /// The providers that rule lets receive the path.
    pub allowed: BTreeSet<String>,
}

impl RoutingRefusal {
    /// The rule as an authored path, `routing[<index>]`.
    pub fn rule(&self) -> String {
        format!("routing[{}]", self.rule_index)
    }

    /// The refusal as a [`Reason::RoutingDenied`] verdict whose detail names
    /// the rule, the path and the provider.
    pub fn verdict(&self) -> Verdict {
        Verdict::new(
            Decision::Deny,
            Reason::RoutingDenied,
            Some(self.rule()),
            format!(
                "the session read `{}`, which {} lets go only to {}; not to `{}`",
                printable(&self.path),
                self.rule(),
                list(&self.allowed),
                self.provider
            ),
        )
    }
}

impl RouteTable {
    /// Why this session, with everything it read so far, may not send to
    /// `provider`, or `None` when it may. The same decision as
    /// [`RouteTable::decide_dispatch`], with its facts kept apart for a
    /// relay's refusal body.
    pub fn refusal(&self, session: &Session, provider: &str) -> Option<RoutingRefusal> {
        for path in session.restricted_reads() {
            for i in self.restrictions(path) {
                if let Some((_, providers)) = self.rules.get(i)
                    && !providers.contains(provider)
                {
                    return Some(RoutingRefusal {
                        provider: provider.to_owned(),
                        path: path.to_owned(),
                        rule_index: i,
                        allowed: providers.clone(),
                    });
                }
            }
        }
        None
    }

    /// The enforcement form of [`RouteTable::decide_dispatch`], for a relay
    /// bound to `provider`: a deny has [`Reason::RoutingDenied`]
    /// (`routing_denied`) and a detail naming the rule, the path and the
    /// provider; an allow is [`Reason::Allowed`].
    pub fn decide_provider(&self, session: &Session, provider: &str) -> Verdict {
        match self.refusal(session, provider) {
            Some(r) => r.verdict(),
            None => Verdict::new(
                Decision::Allow,
                Reason::Allowed,
                None,
                format!("nothing the session read is kept from `{provider}`"),
            ),
        }
    }

    /// May this session open a new proxy connection to `host`? `None`
    /// when `host` is no provider's API host or routing keeps nothing the
    /// session read from any of its providers (egress rules then decide);
    /// `Some(deny)` with [`Reason::RoutingDenied`] and a detail naming the
    /// host, the provider, the rule and the path otherwise. With several
    /// providers for one host, each counts: one refusal denies.
    pub fn decide_host(
        &self,
        hosts: &ProviderHosts,
        session: &Session,
        host: &RequestHost,
    ) -> Option<Verdict> {
        hosts.providers_of(host).into_iter().find_map(|provider| {
            self.refusal(session, provider).map(|r| {
                let v = r.verdict();
                Verdict::new(
                    v.decision,
                    v.reason,
                    v.rule,
                    format!("`{host}` is an API host of `{provider}`: {}", v.detail),
                )
            })
        })
    }
}

/// `text` with control characters escaped, so a path the worker named
/// cannot break the one-line detail.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}
