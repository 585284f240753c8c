//! Relay routes with placeholders: which route a request matches, and the
//! outward action (kind, rendered target) it is when the route has one.
//!
//! A `{name}` segment matches exactly one path segment whose bytes are all
//! `[A-Za-z0-9._~-]`, other than `.` and `..` (no percent-encoding: a
//! `%2F` or `%65` could name another resource at the origin than the one
//! the target names, so such a request is refused, `BadSegment`). Literal
//! segments match only themselves (case-sensitively). When several routes
//! match, the one with the most literal segments wins, then an outward route
//! over a plain one, then the one whose first literal is leftmost: the
//! result never depends on the order of the routes (the schema refuses two
//! routes with the same method and shape). A request that differs from an
//! outward route only in the case of a literal segment or a trailing `/`,
//! and is not itself an outward route's, is refused (`BadSegment`) rather
//! than forwarded as a plain route: the origin may read it as the outward
//! one.

use palisade_schema::host_policy::{RelayRoute, placeholder_name};

/// The outward action a matched route stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteAction {
    /// The route's outward kind.
    pub kind: String,
    /// The route's target template with the matched segments filled in.
    pub target: String,
}

/// What a request `METHOD path` is under a relay's routes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteMatch<'a> {
    /// A plain route: forwarded as it is.
    Plain(&'a RelayRoute),
    /// An outward route: decided by `[outward]` as `action` first.
    Outward(&'a RelayRoute, RouteAction),
    /// A route has this path but not this method (405).
    MethodNotAllowed,
    /// No route has this path (403).
    NoRoute,
    /// A segment that would fill a placeholder is not a plain segment, or
    /// the request differs from an outward route only in letter case or a
    /// trailing `/` (400). The text is the segment (empty for the slash).
    BadSegment(String),
}

/// A route that matches a request, with what ranks it.
struct Candidate<'a, 'p> {
    /// Which segments are literal (`true`), left to right.
    literals: Vec<bool>,
    route: &'a RelayRoute,
    binds: Vec<(&'a str, &'p str)>,
}

impl Candidate<'_, '_> {
    /// The rank: more literal segments; then an outward route before a
    /// plain one (a tie asks rather than forwards); then the leftmost
    /// literal. Two candidates of one request with the same rank have the
    /// same method and shape (the schema refuses such a pair).
    fn rank(&self) -> (usize, bool, &[bool]) {
        (
            self.literals.iter().filter(|l| **l).count(),
            self.route.outward.is_some(),
            &self.literals,
        )
    }
}

/// Whether `seg` may fill a placeholder.
pub fn is_plain_segment(seg: &str) -> bool {
    !seg.is_empty()
        && seg != "."
        && seg != ".."
        && seg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-'))
}

/// How a route's segments meet a request's.
enum Fit<'a, 'p> {
    /// Every literal equal, every placeholder a plain segment.
    Exact(Vec<bool>, Vec<(&'a str, &'p str)>),
    /// Every placeholder's segment is there but this one is not plain.
    Bad(&'p str),
    /// A literal differs.
    No,
}

fn fit<'a, 'p>(route: &'a RelayRoute, segs: &[&'p str], fold_case: bool) -> Fit<'a, 'p> {
    let rsegs: Vec<&str> = route.path.split('/').collect();
    if rsegs.len() != segs.len() {
        return Fit::No;
    }
    let mut literals = Vec::with_capacity(segs.len());
    let mut binds = Vec::new();
    let mut bad = None;
    for (r, s) in rsegs.iter().zip(segs) {
        match placeholder_name(r) {
            Some(name) => {
                if !is_plain_segment(s) {
                    bad.get_or_insert(*s);
                }
                literals.push(false);
                binds.push((name, *s));
            }
            None if r == s || (fold_case && r.eq_ignore_ascii_case(s)) => literals.push(true),
            None => return Fit::No,
        }
    }
    match bad {
        Some(b) => Fit::Bad(b),
        None => Fit::Exact(literals, binds),
    }
}

/// Matches `method path` (path without query) against `routes`.
///
/// The result does not depend on the order of `routes` (the ranking is in
/// the module documentation). A request that is not an outward route's but
/// differs from one only in the letter case of a literal segment or a
/// trailing `/` is refused (`BadSegment`): an origin that folds case or
/// trailing slashes would act on it as the outward route, and it must not
/// pass as a plain route instead.
pub fn match_route<'a>(routes: &'a [RelayRoute], method: &str, path: &str) -> RouteMatch<'a> {
    let segs: Vec<&str> = path.split('/').collect();
    let mut best: Option<Candidate<'a, '_>> = None;
    let mut path_seen = false;
    let mut bad: Option<String> = None;
    for route in routes {
        let (literals, binds) = match fit(route, &segs, false) {
            Fit::Exact(l, b) => (l, b),
            Fit::Bad(b) => {
                bad.get_or_insert_with(|| b.to_owned());
                continue;
            }
            Fit::No => continue,
        };
        path_seen = true;
        if route.method != method {
            continue;
        }
        let cand = Candidate {
            literals,
            route,
            binds,
        };
        if best.as_ref().is_none_or(|b| cand.rank() > b.rank()) {
            best = Some(cand);
        }
    }
    if best.as_ref().is_none_or(|b| b.route.outward.is_none())
        && let Some(seg) = outward_lookalike(routes, method, path)
    {
        return RouteMatch::BadSegment(seg);
    }
    match best {
        Some(Candidate { route, binds, .. }) => match &route.outward {
            None => RouteMatch::Plain(route),
            Some(o) => RouteMatch::Outward(
                route,
                RouteAction {
                    kind: o.kind.as_str().to_owned(),
                    target: render(&o.target, &binds),
                },
            ),
        },
        None if path_seen => RouteMatch::MethodNotAllowed,
        None => match bad {
            Some(b) => RouteMatch::BadSegment(b),
            None => RouteMatch::NoRoute,
        },
    }
}

/// The segment by which `method path` differs from an outward route of
/// `method` that it matches only when letter case is ignored or a trailing
/// `/` is dropped; `None` when there is no such route.
fn outward_lookalike(routes: &[RelayRoute], method: &str, path: &str) -> Option<String> {
    let trimmed = path.strip_suffix('/').filter(|t| !t.is_empty());
    let segs: Vec<&str> = path.split('/').collect();
    let trimmed_segs: Option<Vec<&str>> = trimmed.map(|t| t.split('/').collect());
    for route in routes
        .iter()
        .filter(|r| r.outward.is_some() && r.method == method)
    {
        let exact = matches!(fit(route, &segs, false), Fit::Exact(..));
        if !exact && matches!(fit(route, &segs, true), Fit::Exact(..)) {
            let rsegs = route.path.split('/');
            let differing = rsegs
                .zip(&segs)
                .find(|(r, s)| placeholder_name(r).is_none() && r != *s)
                .map_or_else(String::new, |(_, s)| (*s).to_owned());
            return Some(differing);
        }
        if let Some(t) = &trimmed_segs
            && matches!(fit(route, t, true), Fit::Exact(..))
        {
            return Some(String::new());
        }
    }
    None
}

/// Fills `{name}` in `template` from `binds`; an unknown name stays as written
/// (the schema refuses such a template).
pub fn render(template: &str, binds: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let (head, tail) = rest.split_at(open);
        out.push_str(head);
        match tail.find('}') {
            Some(close) => {
                let name = tail.get(1..close).unwrap_or_default();
                match binds.iter().find(|(n, _)| *n == name) {
                    Some((_, v)) => out.push_str(v),
                    None => out.push_str(tail.get(..=close).unwrap_or_default()),
                }
                rest = tail.get(close + 1..).unwrap_or_default();
            }
            None => {
                out.push_str(tail);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}
