//! Relay routes with placeholders: which route a request matches, and the
//! outward action (kind, rendered target) it is when the route has one.
//!
//! A `{name}` segment matches exactly one path segment whose bytes are all
//! `[A-Za-z0-9._~-]`, other than `.` and `..` (no percent-encoding: a
//! `%2F` or `%65` could name another resource at the origin than the one
//! the target names, so such a request is refused, `BadSegment`). Literal
//! segments match only themselves. When several routes match, the one with
//! the most literal segments wins, then the earliest.

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
    /// A segment that would fill a placeholder is not a plain segment (400).
    BadSegment(String),
}

/// The best match so far: literal segments, route, placeholder bindings.
type Best<'a, 'p> = (usize, &'a RelayRoute, Vec<(&'a str, &'p str)>);

/// Whether `seg` may fill a placeholder.
pub fn is_plain_segment(seg: &str) -> bool {
    !seg.is_empty()
        && seg != "."
        && seg != ".."
        && seg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-'))
}

/// Matches `method path` (path without query) against `routes`.
pub fn match_route<'a>(routes: &'a [RelayRoute], method: &str, path: &str) -> RouteMatch<'a> {
    let segs: Vec<&str> = path.split('/').collect();
    let mut best: Option<Best<'a, '_>> = None;
    let mut path_seen = false;
    let mut bad: Option<String> = None;
    for route in routes {
        let rsegs: Vec<&str> = route.path.split('/').collect();
        if rsegs.len() != segs.len() {
            continue;
        }
        let mut literal = 0usize;
        let mut binds = Vec::new();
        let mut ok = true;
        let mut this_bad = None;
        for (r, s) in rsegs.iter().zip(&segs) {
            match placeholder_name(r) {
                Some(name) => {
                    if !is_plain_segment(s) {
                        this_bad = Some((*s).to_owned());
                    }
                    binds.push((name, *s));
                }
                None if r == s => literal += 1,
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            continue;
        }
        if let Some(b) = this_bad {
            bad.get_or_insert(b);
            continue;
        }
        path_seen = true;
        if route.method != method {
            continue;
        }
        if best.as_ref().is_none_or(|(l, _, _)| literal > *l) {
            best = Some((literal, route, binds));
        }
    }
    match best {
        Some((_, route, binds)) => match &route.outward {
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
