//! Model-based property test: a deliberately naive reference model of taint,
//! egress, outward and routing decisions, checked against the real code on
//! random policies and random event histories.

use std::collections::BTreeSet;

use palisade_policy::egress::{self, ConnectRequest};
use palisade_policy::outward::{OutwardRequest, OutwardTable};
use palisade_policy::route::{ProviderHosts, RouteTable};
use palisade_policy::verdict::Decision;
use palisade_schema::host_policy::{
    Cidr, HostPattern, HostPolicy, OutwardDefault, OutwardKind, OutwardRule, PathGlob, RoutingRule,
    TaintSourceKind, TargetGlob,
};
use palisade_taint::{Event, Rules, Session, ToolClass};
use proptest::prelude::*;

const NAMES: &[&str] = &[
    "example.com",
    "a.example.com",
    "b.a.example.com",
    "evil-example.com",
    "example.org",
    "x.example.org",
];
/// Request hosts: every name above plus IP literals (rules never name these).
const HOSTS: &[&str] = &[
    "example.com",
    "a.example.com",
    "b.a.example.com",
    "evil-example.com",
    "example.org",
    "x.example.org",
    "10.1.2.3",
    "10.9.9.9",
    "::ffff:10.1.2.3",
];
const RANGES: &[&str] = &["10.1.0.0/16", "10.9.9.9/32"];
const PORTS: &[u16] = &[443, 8443];
const KINDS: &[&str] = &[
    "git.push",
    "github.post",
    "github.post.comment",
    "payment",
    "mail.send",
];
const TARGETS: &[&str] = &["t1", "t2", "t3"];
const PATHS: &[&str] = &["private/a", "private/m/b", "pub/c", "inbox/d", "src/e"];
const PATH_GLOBS: &[&str] = &["private/**", "private/m/**", "pub/*", "src/e"];
const PROVIDERS: &[&str] = &["p1", "p2", "p3"];

/// A host rule in model form: (wildcard, name index, port).
#[derive(Clone, Debug)]
struct MHost(bool, usize, Option<u16>);

impl MHost {
    fn text(&self) -> String {
        let mut s = String::new();
        if self.0 {
            s.push_str("*.");
        }
        s.push_str(NAMES[self.1]);
        if let Some(p) = self.2 {
            s.push_str(&format!(":{p}"));
        }
        s
    }
    /// Naive string matching, independent of the real matcher.
    fn matches(&self, host: &str, port: u16) -> bool {
        let base = NAMES[self.1];
        let name_ok = if self.0 {
            host.ends_with(&format!(".{base}"))
        } else {
            host == base
        };
        name_ok && self.2.is_none_or(|p| p == port)
    }
}

/// An outward rule in model form: (kind index or None for `*`, target index).
#[derive(Clone, Debug)]
struct MOut(Option<usize>, Option<usize>);

impl MOut {
    fn matches(&self, kind: &str, target: &str) -> bool {
        let kind_ok = match self.0 {
            None => true,
            Some(k) => kind == KINDS[k] || kind.starts_with(&format!("{}.", KINDS[k])),
        };
        kind_ok && self.1.is_none_or(|t| TARGETS[t] == target)
    }
}

#[derive(Clone, Debug)]
struct MPolicy {
    allow: Vec<MHost>,
    deny: Vec<MHost>,
    taint_allow: Vec<MHost>,
    sources: BTreeSet<usize>,
    out_default_deny: bool,
    out_allow: Vec<MOut>,
    out_deny: Vec<MOut>,
    routing: Vec<(Vec<usize>, BTreeSet<usize>)>,
    ranges: BTreeSet<usize>,
    /// `egress.provider_hosts`: for each of `PROVIDERS`, host rules without
    /// a port (the parser refuses ports there).
    provider_hosts: Vec<Vec<MHost>>,
    /// `[[egress.relay]]`: (origin host index into `HOSTS`, origin port,
    /// whether the relay has an outward route).
    relays: Vec<(usize, u16, bool)>,
}

#[derive(Clone, Debug)]
enum MEvent {
    Connect(usize, u16, bool),
    Tool(usize),
    Read(usize),
    Input,
}

fn host_rule() -> impl Strategy<Value = MHost> {
    // A wildcard over a single-label TLD is never generated: bases have two labels.
    (
        any::<bool>(),
        0..NAMES.len(),
        prop::option::of(prop::sample::select(PORTS)),
    )
        .prop_map(|(w, n, p)| MHost(w, n, p))
}

fn out_rule() -> impl Strategy<Value = MOut> {
    (
        prop::option::weighted(0.9, 0..KINDS.len()),
        prop::option::of(0..TARGETS.len()),
    )
        .prop_map(|(k, t)| MOut(k, t))
}

fn mpolicy() -> impl Strategy<Value = MPolicy> {
    (
        prop::collection::vec(host_rule(), 0..4),
        prop::collection::vec(host_rule(), 0..3),
        prop::collection::vec(host_rule(), 0..3),
        prop::collection::btree_set(0..TaintSourceKind::ALL.len(), 0..=6),
        any::<bool>(),
        prop::collection::vec(out_rule(), 0..4),
        prop::collection::vec(out_rule(), 0..3),
        prop::collection::vec(
            (
                prop::collection::vec(0..PATH_GLOBS.len(), 1..3),
                prop::collection::btree_set(0..PROVIDERS.len(), 0..3),
            ),
            0..3,
        ),
        prop::collection::btree_set(0..RANGES.len(), 0..=2),
        prop::collection::vec(
            prop::collection::vec(
                (any::<bool>(), 0..NAMES.len()).prop_map(|(w, n)| MHost(w, n, None)),
                0..3,
            ),
            PROVIDERS.len(),
        ),
        prop::collection::vec(
            (0..HOSTS.len(), prop::sample::select(PORTS), any::<bool>()),
            0..3,
        ),
    )
        .prop_map(
            |(
                allow,
                deny,
                taint_allow,
                sources,
                d,
                out_allow,
                out_deny,
                routing,
                ranges,
                provider_hosts,
                relays,
            )| {
                MPolicy {
                    allow,
                    deny,
                    taint_allow,
                    sources,
                    out_default_deny: d,
                    out_allow,
                    out_deny,
                    routing,
                    ranges,
                    provider_hosts,
                    relays,
                }
            },
        )
}

fn mevent() -> impl Strategy<Value = MEvent> {
    prop_oneof![
        (0..HOSTS.len(), prop::sample::select(PORTS), any::<bool>())
            .prop_map(|(n, p, r)| MEvent::Connect(n, p, r)),
        (0..4usize).prop_map(MEvent::Tool),
        (0..PATHS.len()).prop_map(MEvent::Read),
        Just(MEvent::Input),
    ]
}

fn real_policy(m: &MPolicy) -> HostPolicy {
    let hosts = |v: &[MHost]| -> Vec<HostPattern> {
        v.iter()
            .map(|h| HostPattern::parse(&h.text()).unwrap())
            .collect()
    };
    let outs = |v: &[MOut]| -> Vec<OutwardRule> {
        v.iter()
            .map(|o| {
                OutwardRule::new(
                    OutwardKind::parse(o.0.map_or("*", |k| KINDS[k])).unwrap(),
                    o.1.map(|t| TargetGlob::parse(TARGETS[t]).unwrap()),
                )
            })
            .collect()
    };
    let mut p = HostPolicy::default();
    p.egress.allow = hosts(&m.allow);
    p.egress.deny = hosts(&m.deny);
    p.taint.egress_allow = hosts(&m.taint_allow);
    p.taint.sources = m.sources.iter().map(|i| TaintSourceKind::ALL[*i]).collect();
    p.taint.untrusted_paths = vec![PathGlob::parse("inbox/**").unwrap()];
    p.outward.default = if m.out_default_deny {
        OutwardDefault::Deny
    } else {
        OutwardDefault::Ask
    };
    p.outward.allow = outs(&m.out_allow);
    p.outward.deny = outs(&m.out_deny);
    p.egress.allow_addresses = m
        .ranges
        .iter()
        .map(|r| Cidr::parse(RANGES[*r]).unwrap())
        .collect();
    p.routing = m
        .routing
        .iter()
        .map(|(globs, provs)| {
            RoutingRule::new(
                globs
                    .iter()
                    .map(|g| PathGlob::parse(PATH_GLOBS[*g]).unwrap())
                    .collect(),
                provs.iter().map(|p| PROVIDERS[*p].to_owned()).collect(),
            )
        })
        .collect();
    for (i, list) in m.provider_hosts.iter().enumerate() {
        if !list.is_empty() {
            p.egress
                .provider_hosts
                .insert(PROVIDERS[i].to_owned(), hosts(list));
        }
    }
    p.egress.relays = m
        .relays
        .iter()
        .enumerate()
        .map(|(i, (h, port, outward))| relay(&format!("r{i}"), HOSTS[*h], *port, *outward))
        .collect();
    p
}

/// A relay to `https://host:port`, with an outward route or only a plain one,
/// as the parser builds it.
pub(crate) fn relay(
    name: &str,
    host: &str,
    port: u16,
    outward: bool,
) -> palisade_schema::host_policy::Relay {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    let route = if outward {
        r#"{ route = "POST /c/{n}", outward = "github.post.comment", target = "t/{n}" }"#
    } else {
        r#""POST /c""#
    };
    let text = format!(
        "[[egress.relay]]\nname = \"{name}\"\norigin = \"https://{host}:{port}\"\nroutes = [{route}]\ncredential = {{ header = \"authorization\", from_env = \"T\" }}\n"
    );
    let (mut p, _) = palisade_schema::host_policy::parse("relay.toml", &text)
        .unwrap()
        .into_parts();
    p.egress.relays.remove(0)
}

/// Whether `HOSTS[a]` and `HOSTS[b]` are the same host (an IPv4-mapped
/// address is its IPv4 address).
fn same_host(a: usize, b: usize) -> bool {
    let canon = |i: usize| HOSTS[i].trim_start_matches("::ffff:");
    canon(a) == canon(b)
}

fn real_event(e: &MEvent) -> Event {
    match e {
        MEvent::Connect(n, p, r) => Event::Connect {
            host: HOSTS[*n].to_owned(),
            port: *p,
            relay: *r,
        },
        MEvent::Tool(t) => Event::ToolResult {
            tool: [
                ToolClass::Web,
                ToolClass::ExternalMcp,
                ToolClass::Shell,
                ToolClass::Local,
            ][*t],
            name: "tool".into(),
        },
        MEvent::Read(i) => Event::Read {
            path: PATHS[*i].to_owned(),
        },
        MEvent::Input => Event::UntrustedInput {
            label: "input".into(),
        },
    }
}

/// The reference model's session state.
#[derive(Default, Clone)]
struct MSession {
    tainted: bool,
    contacted: BTreeSet<(usize, u16)>,
    reads: BTreeSet<usize>,
}

fn source_on(m: &MPolicy, kind: TaintSourceKind) -> bool {
    m.sources.iter().any(|i| TaintSourceKind::ALL[*i] == kind)
}

impl MSession {
    fn apply(&mut self, m: &MPolicy, e: &MEvent) {
        match e {
            MEvent::Connect(n, p, relay) => {
                self.contacted.insert((*n, *p));
                if !relay && source_on(m, TaintSourceKind::ProxyNonRelay) {
                    self.tainted = true;
                }
            }
            MEvent::Tool(0) => self.tainted |= source_on(m, TaintSourceKind::Web),
            MEvent::Tool(1) => self.tainted |= source_on(m, TaintSourceKind::ExternalMcp),
            MEvent::Tool(2) => self.tainted |= source_on(m, TaintSourceKind::Shell),
            MEvent::Tool(_) => {}
            MEvent::Read(i) => {
                if PATHS[*i].starts_with("inbox/") && source_on(m, TaintSourceKind::UntrustedPath) {
                    self.tainted = true;
                }
                if restricting(m, *i).next().is_some() {
                    self.reads.insert(*i);
                }
            }
            MEvent::Input => self.tainted = true,
        }
    }
}

fn glob_matches(glob: &str, path: &str) -> bool {
    if let Some(dir) = glob.strip_suffix("/**") {
        path.starts_with(&format!("{dir}/"))
    } else if let Some(dir) = glob.strip_suffix("/*") {
        path.strip_prefix(&format!("{dir}/"))
            .is_some_and(|rest| !rest.contains('/'))
    } else {
        glob == path
    }
}

fn restricting(m: &MPolicy, path: usize) -> impl Iterator<Item = &(Vec<usize>, BTreeSet<usize>)> {
    m.routing.iter().filter(move |(globs, _)| {
        globs
            .iter()
            .any(|g| glob_matches(PATH_GLOBS[*g], PATHS[path]))
    })
}

/// Naive address-range membership: a fixed table, not CIDR arithmetic.
fn in_range(host: usize, range: usize) -> bool {
    matches!(
        (HOSTS[host], RANGES[range]),
        ("10.1.2.3" | "::ffff:10.1.2.3", "10.1.0.0/16") | ("10.9.9.9", "10.9.9.9/32")
    )
}

fn model_egress(m: &MPolicy, s: &MSession, n: usize, port: u16) -> Decision {
    // One way out: an outward relay's origin only through the relay.
    if m.relays
        .iter()
        .any(|(h, p, outward)| *outward && *p == port && same_host(*h, n))
    {
        return Decision::Deny;
    }
    if n >= NAMES.len() {
        // An IP literal: only inside an allow_addresses range, and a tainted
        // session only back to an address it contacted.
        let inside = m.ranges.iter().any(|r| in_range(n, *r));
        return if inside && (!s.tainted || s.contacted.contains(&(n, port))) {
            Decision::Allow
        } else {
            Decision::Deny
        };
    }
    let host = NAMES[n];
    if m.deny.iter().any(|r| r.matches(host, port)) {
        return Decision::Deny;
    }
    if !m.allow.iter().any(|r| r.matches(host, port)) {
        return Decision::Deny;
    }
    if !s.tainted
        || m.taint_allow.iter().any(|r| r.matches(host, port))
        || s.contacted.contains(&(n, port))
    {
        Decision::Allow
    } else {
        Decision::Deny
    }
}

fn model_outward(m: &MPolicy, s: &MSession, kind: &str, target: &str) -> Decision {
    if m.out_deny.iter().any(|r| r.matches(kind, target)) {
        Decision::Deny
    } else if m.out_allow.iter().any(|r| r.matches(kind, target)) {
        if s.tainted {
            Decision::Ask
        } else {
            Decision::Allow
        }
    } else if m.out_default_deny {
        Decision::Deny
    } else {
        Decision::Ask
    }
}

fn model_route(m: &MPolicy, path: usize, provider: usize) -> Decision {
    if restricting(m, path).all(|(_, provs)| provs.contains(&provider)) {
        Decision::Allow
    } else {
        Decision::Deny
    }
}

fn model_dispatch(m: &MPolicy, s: &MSession, provider: usize) -> Decision {
    if s.reads
        .iter()
        .all(|p| model_route(m, *p, provider) == Decision::Allow)
    {
        Decision::Allow
    } else {
        Decision::Deny
    }
}

/// A proxy connection to a provider's API host: denied when the host is an
/// API host of some provider the session's reads are kept from, else
/// routing says nothing (`Allow` here: egress rules decide).
fn model_host(m: &MPolicy, s: &MSession, host: &str) -> Decision {
    let refused = m.provider_hosts.iter().enumerate().any(|(p, hosts)| {
        hosts.iter().any(|h| h.matches(host, 0)) && model_dispatch(m, s, p) == Decision::Deny
    });
    if refused {
        Decision::Deny
    } else {
        Decision::Allow
    }
}

/// Routing's answer for a proxy connection, as a decision (`None` is `Allow`).
fn real_host(routes: &RouteTable, hosts: &ProviderHosts, s: &Session, host: &str) -> Decision {
    let h = palisade_schema::host_policy::RequestHost::parse(host).unwrap();
    routes
        .decide_host(hosts, s, &h)
        .map_or(Decision::Allow, |v| v.decision)
}

/// Every decision of the real code for `session` under `policy`, in a fixed order.
fn all_decisions(policy: &HostPolicy, session: &Session) -> Vec<Decision> {
    let mut out = Vec::new();
    for n in HOSTS {
        for port in PORTS {
            out.push(
                egress::decide(
                    policy,
                    session,
                    &ConnectRequest {
                        host: n,
                        port: *port,
                    },
                )
                .decision,
            );
        }
    }
    let table = OutwardTable::new(policy).unwrap();
    for k in KINDS
        .iter()
        .chain(["github.post.review", "payment.card"].iter())
    {
        for t in TARGETS {
            out.push(
                table
                    .decide(session, &OutwardRequest { kind: k, target: t })
                    .decision,
            );
        }
    }
    let routes = RouteTable::new(policy).unwrap();
    for p in PATHS {
        for prov in PROVIDERS {
            out.push(routes.decide_route(p, prov).decision);
        }
    }
    for prov in PROVIDERS {
        out.push(routes.decide_dispatch(session, prov).decision);
        out.push(routes.decide_provider(session, prov).decision);
    }
    let hosts = ProviderHosts::new(policy);
    for h in HOSTS {
        out.push(real_host(&routes, &hosts, session, h));
    }
    out
}

fn run_real(policy: &HostPolicy, events: &[MEvent]) -> Session {
    let rules = Rules::new(policy, &[]).unwrap();
    let mut s = Session::new();
    for (t, e) in events.iter().enumerate() {
        let _ = s.apply(&rules, t as u64, &real_event(e));
    }
    s
}

fn rank(d: Decision) -> u8 {
    match d {
        Decision::Allow => 0,
        Decision::Ask => 1,
        Decision::Deny => 2,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The real code agrees with the model after every event, and taint is monotone.
    #[test]
    fn real_code_agrees_with_the_model(m in mpolicy(), events in prop::collection::vec(mevent(), 0..12)) {
        let policy = real_policy(&m);
        let rules = Rules::new(&policy, &[]).unwrap();
        let mut real = Session::new();
        let mut model = MSession::default();
        let mut was_tainted = false;
        for (t, e) in events.iter().enumerate() {
            let _ = real.apply(&rules, t as u64, &real_event(e));
            model.apply(&m, e);
            prop_assert_eq!(real.is_tainted(), model.tainted, "taint after {:?}", e);
            prop_assert!(!was_tainted || real.is_tainted(), "taint was cleared by {:?}", e);
            was_tainted = real.is_tainted();
            for (n, name) in HOSTS.iter().enumerate() {
                for port in PORTS {
                    let got = egress::decide(&policy, &real, &ConnectRequest { host: name, port: *port }).decision;
                    prop_assert_eq!(got, model_egress(&m, &model, n, *port), "egress {}:{}", name, port);
                }
            }
            let table = OutwardTable::new(&policy).unwrap();
            for k in KINDS.iter().chain(["github.post.review", "payment.card"].iter()) {
                for t in TARGETS {
                    let got = table.decide(&real, &OutwardRequest { kind: k, target: t }).decision;
                    prop_assert_eq!(got, model_outward(&m, &model, k, t), "outward {} {}", k, t);
                }
            }
            let routes = RouteTable::new(&policy).unwrap();
            for (pi, p) in PATHS.iter().enumerate() {
                for (vi, prov) in PROVIDERS.iter().enumerate() {
                    prop_assert_eq!(routes.decide_route(p, prov).decision, model_route(&m, pi, vi), "route {} {}", p, prov);
                }
            }
            for (vi, prov) in PROVIDERS.iter().enumerate() {
                prop_assert_eq!(routes.decide_dispatch(&real, prov).decision, model_dispatch(&m, &model, vi), "dispatch {}", prov);
                prop_assert_eq!(routes.decide_provider(&real, prov).decision, model_dispatch(&m, &model, vi), "provider {}", prov);
            }
            let hosts = ProviderHosts::new(&policy);
            for h in HOSTS {
                prop_assert_eq!(real_host(&routes, &hosts, &real, h), model_host(&m, &model, h), "provider host {}", h);
            }
        }
        // Rebuilding from the recorded events gives the same session.
        let records: Vec<_> = events.iter().enumerate().map(|(t, e)| palisade_taint::Record::new(t as u64, real_event(e))).collect();
        prop_assert_eq!(Session::rebuild(&rules, &records), real);
    }

    /// For the same history, a tainted session allows a subset of what a clean one allows.
    #[test]
    fn taint_only_narrows(m in mpolicy(), events in prop::collection::vec(mevent(), 0..12)) {
        let policy = real_policy(&m);
        let tainted = {
            let mut ev = events.clone();
            ev.push(MEvent::Input);
            run_real(&policy, &ev)
        };
        // The same history with every taint source off and no untrusted input.
        let mut quiet = policy.clone();
        quiet.taint.sources.clear();
        let clean_events: Vec<MEvent> = events.iter().filter(|e| !matches!(e, MEvent::Input)).cloned().collect();
        let clean = run_real(&quiet, &clean_events);
        prop_assert!(tainted.is_tainted());
        prop_assert!(!clean.is_tainted());
        for (t, c) in all_decisions(&policy, &tainted).into_iter().zip(all_decisions(&policy, &clean)) {
            prop_assert!(rank(t) >= rank(c), "tainted {:?} is wider than clean {:?}", t, c);
        }
    }

    /// A matching deny always wins, tainted or not.
    #[test]
    fn deny_always_wins(m in mpolicy(), events in prop::collection::vec(mevent(), 0..8), n in 0..NAMES.len(), port in prop::sample::select(PORTS), k in 0..KINDS.len(), t in 0..TARGETS.len()) {
        let mut m = m;
        m.deny.push(MHost(false, n, None));
        m.out_deny.push(MOut(Some(k), Some(t)));
        // Also allow them everywhere, so only the deny can refuse.
        m.allow.push(MHost(false, n, None));
        m.taint_allow.push(MHost(false, n, None));
        m.out_allow.push(MOut(Some(k), Some(t)));
        let policy = real_policy(&m);
        let s = run_real(&policy, &events);
        prop_assert_eq!(egress::decide(&policy, &s, &ConnectRequest { host: NAMES[n], port }).decision, Decision::Deny);
        let table = OutwardTable::new(&policy).unwrap();
        prop_assert_eq!(table.decide(&s, &OutwardRequest { kind: KINDS[k], target: TARGETS[t] }).decision, Decision::Deny);
    }

    /// Adding a deny rule never widens any decision.
    #[test]
    fn adding_a_deny_never_widens(m in mpolicy(), events in prop::collection::vec(mevent(), 0..8), extra in host_rule(), extra_out in out_rule()) {
        let policy = real_policy(&m);
        let mut m2 = m.clone();
        m2.deny.push(extra);
        m2.out_deny.push(extra_out);
        let stricter = real_policy(&m2);
        let s1 = run_real(&policy, &events);
        let s2 = run_real(&stricter, &events);
        for (a, b) in all_decisions(&policy, &s1).into_iter().zip(all_decisions(&stricter, &s2)) {
            prop_assert!(rank(b) >= rank(a), "adding a deny widened {:?} to {:?}", a, b);
        }
    }

    /// Decisions do not depend on rule order or duplicates.
    #[test]
    fn order_and_duplicates_do_not_matter(m in mpolicy(), events in prop::collection::vec(mevent(), 0..8)) {
        let policy = real_policy(&m);
        let mut m2 = m.clone();
        for v in [&mut m2.allow, &mut m2.deny, &mut m2.taint_allow] {
            v.reverse();
            let dup = v.clone();
            v.extend(dup);
        }
        for v in [&mut m2.out_allow, &mut m2.out_deny] {
            v.reverse();
            let dup = v.clone();
            v.extend(dup);
        }
        m2.routing.reverse();
        let dup = m2.routing.clone();
        m2.routing.extend(dup);
        for v in &mut m2.provider_hosts {
            v.reverse();
            let dup = v.clone();
            v.extend(dup);
        }
        let shuffled = real_policy(&m2);
        let s1 = run_real(&policy, &events);
        let s2 = run_real(&shuffled, &events);
        prop_assert_eq!(all_decisions(&policy, &s1), all_decisions(&shuffled, &s2));
    }

    /// One way out: with an outward relay for `H:port`, no policy and no
    /// session history ever allows a direct connection to `H:port`, even
    /// when `egress.allow`, `taint.egress_allow` and `allow_addresses` all
    /// name it; the same relay without an outward route leaves it allowed.
    #[test]
    fn an_outward_relays_origin_is_never_reached_directly(m in mpolicy(), events in prop::collection::vec(mevent(), 0..12), h in 0..HOSTS.len(), port in prop::sample::select(PORTS)) {
        let mut m = m;
        if h < NAMES.len() {
            m.allow.push(MHost(false, h, Some(port)));
            m.taint_allow.push(MHost(false, h, Some(port)));
        } else {
            m.ranges = (0..RANGES.len()).collect();
        }
        m.deny.retain(|d| !(h < NAMES.len() && d.matches(NAMES[h], port)));
        m.relays.retain(|r| !same_host(r.0, h) || r.1 != port);
        let mut plain = m.clone();
        plain.relays.push((h, port, false));
        m.relays.push((h, port, true));
        let policy = real_policy(&m);
        let s = run_real(&policy, &events);
        let v = egress::decide(&policy, &s, &ConnectRequest { host: HOSTS[h], port });
        prop_assert_eq!(v.decision, Decision::Deny);
        prop_assert_eq!(v.reason, palisade_policy::verdict::Reason::RelayRequired);
        prop_assert_eq!(v.rule, Some(format!("egress.relay[{}]", policy.egress.relays.len() - 1)));
        // Every spelling of the same host: case, trailing dot, mapped IPv4.
        let spellings: Vec<String> = if h < NAMES.len() {
            vec![HOSTS[h].to_ascii_uppercase(), format!("{}.", HOSTS[h])]
        } else {
            vec![HOSTS[h].trim_start_matches("::ffff:").to_owned(), format!("::ffff:{}", HOSTS[h].trim_start_matches("::ffff:"))]
        };
        for spelled in &spellings {
            let v = egress::decide(&policy, &s, &ConnectRequest { host: spelled, port });
            prop_assert_eq!(v.reason, palisade_policy::verdict::Reason::RelayRequired, "{}", spelled);
        }
        // Positive control: a clean session with the relay made plain is allowed.
        let policy = real_policy(&plain);
        let v = egress::decide(&policy, &Session::new(), &ConnectRequest { host: HOSTS[h], port });
        prop_assert_eq!(v.decision, Decision::Allow, "{:?}", v);
    }

    /// Routing only narrows: a session that read more is refused at least
    /// what a session that read less is refused, at relays and proxy alike;
    /// the refusal names a rule that restricts the path it names and does
    /// not list the provider.
    #[test]
    fn reading_more_never_allows_more(m in mpolicy(), reads in prop::collection::vec(0..PATHS.len(), 0..6), more in prop::collection::vec(0..PATHS.len(), 0..4)) {
        let policy = real_policy(&m);
        let less: Vec<MEvent> = reads.iter().map(|r| MEvent::Read(*r)).collect();
        let mut all = less.clone();
        all.extend(more.iter().map(|r| MEvent::Read(*r)));
        let s1 = run_real(&policy, &less);
        let s2 = run_real(&policy, &all);
        for (a, b) in all_decisions(&policy, &s1).into_iter().zip(all_decisions(&policy, &s2)) {
            prop_assert!(rank(b) >= rank(a), "reading more widened {:?} to {:?}", a, b);
        }
        let routes = RouteTable::new(&policy).unwrap();
        for prov in PROVIDERS {
            if let Some(r) = routes.refusal(&s2, prov) {
                prop_assert!(routes.restrictions(&r.path).contains(&r.rule_index));
                prop_assert!(!r.allowed.contains(*prov));
                prop_assert!(s2.restricted_reads().any(|p| p == r.path));
            }
        }
    }
}
