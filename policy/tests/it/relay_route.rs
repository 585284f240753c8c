//! `relay_route`: placeholders match one plain segment only, literals take
//! precedence, rendered targets carry no placeholder syntax, and the result
//! does not depend on the order of the routes.

use palisade_policy::relay_route::{RouteMatch, is_plain_segment, match_route, render};
use palisade_schema::host_policy::{OutwardKind, RelayRoute, RouteOutward};
use proptest::prelude::*;

fn route(method: &str, path: &str, outward: Option<(&str, &str)>) -> RelayRoute {
    let mut r = RelayRoute::parse(&format!("{method} {path}")).unwrap();
    r.outward = outward.map(|(kind, target)| RouteOutward {
        kind: OutwardKind::parse(kind).unwrap(),
        target: target.to_owned(),
    });
    r
}

/// A comparable form of a match: the matched route's text and action.
fn summary(m: &RouteMatch<'_>) -> String {
    match m {
        RouteMatch::Plain(r) => format!("plain {r}"),
        RouteMatch::Outward(r, a) => format!("outward {r} {} {}", a.kind, a.target),
        RouteMatch::MethodNotAllowed => "405".to_owned(),
        RouteMatch::NoRoute => "403".to_owned(),
        RouteMatch::BadSegment(s) => format!("400 {s}"),
    }
}

fn comment() -> RelayRoute {
    route(
        "POST",
        "/repos/{owner}/{repo}/issues/{number}/comments",
        Some((
            "github.post.comment",
            "github.com/{owner}/{repo}/issues/{number}",
        )),
    )
}

#[test]
fn an_outward_route_renders_its_target() {
    let routes = [comment()];
    let m = match_route(&routes, "POST", "/repos/acme/app/issues/7/comments");
    assert_eq!(
        summary(&m),
        "outward POST /repos/{owner}/{repo}/issues/{number}/comments github.post.comment github.com/acme/app/issues/7"
    );
    assert_eq!(
        summary(&match_route(
            &routes,
            "GET",
            "/repos/acme/app/issues/7/comments"
        )),
        "405"
    );
    assert_eq!(
        summary(&match_route(&routes, "POST", "/repos/acme/app")),
        "403"
    );
    assert_eq!(
        summary(&match_route(
            &routes,
            "POST",
            "/repos/acme/%2e%2e/issues/7/comments"
        )),
        "400 %2e%2e"
    );
}

#[test]
fn a_case_or_slash_lookalike_of_an_outward_route_is_refused_not_forwarded_plain() {
    // A catch-all plain route that would otherwise take the lookalike.
    let routes = [
        comment(),
        route("POST", "/repos/{o}/{r}/{a}/{n}/{b}", None),
        route("POST", "/repos/{o}/{r}/{a}/{n}/{b}/", None),
    ];
    for path in [
        "/repos/acme/app/Issues/7/comments",
        "/repos/acme/app/issues/7/COMMENTS",
        "/repos/acme/app/issues/7/comments/",
    ] {
        let m = match_route(&routes, "POST", path);
        assert!(
            matches!(m, RouteMatch::BadSegment(_)),
            "{path}: {}",
            summary(&m)
        );
    }
    // Positive controls: the exact path is outward, another path plain.
    assert!(matches!(
        match_route(&routes, "POST", "/repos/acme/app/issues/7/comments"),
        RouteMatch::Outward(..)
    ));
    assert!(matches!(
        match_route(&routes, "POST", "/repos/acme/app/pulls/7/reviews"),
        RouteMatch::Plain(_)
    ));
    // A user's explicit plain route for one repository still wins on literals.
    let routes = [
        comment(),
        route("POST", "/repos/acme/app/issues/{n}/comments", None),
    ];
    assert!(matches!(
        match_route(&routes, "POST", "/repos/acme/app/issues/7/comments"),
        RouteMatch::Plain(_)
    ));
}

#[test]
fn a_tie_asks_before_it_forwards_in_either_order() {
    let outward = route("POST", "/a/{x}/c", Some(("github.post", "t/{x}")));
    let plain = route("POST", "/a/b/{y}", None);
    // Same number of literals: the outward route wins, whatever the order.
    for routes in [[outward.clone(), plain.clone()], [plain, outward]] {
        assert!(
            matches!(
                match_route(&routes, "POST", "/a/b/c"),
                RouteMatch::Outward(..)
            ),
            "{routes:?}"
        );
    }
    // Two plain routes with the same count: the leftmost literal wins.
    let left = route("GET", "/a/b/{y}", None);
    let right = route("GET", "/a/{x}/c", None);
    for routes in [[left.clone(), right.clone()], [right, left]] {
        assert_eq!(
            summary(&match_route(&routes, "GET", "/a/b/c")),
            "plain GET /a/b/{y}"
        );
    }
}

/// Segments a hostile worker may send where a placeholder sits.
fn hostile_segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just("%2e%2e".to_owned()),
        Just("a%2Fb".to_owned()),
        Just("a/b".to_owned()),
        Just("{x}".to_owned()),
        Just("}".to_owned()),
        "[A-Za-z0-9._~-]{1,8}",
        "[ -~]{0,8}",
        "\\PC{0,6}",
    ]
}

/// Small route sets over a tiny alphabet, so routes overlap often.
fn route_set() -> impl Strategy<Value = Vec<RelayRoute>> {
    let seg = prop::sample::select(vec!["a", "b", "{x}", "{y}", "{z}"]);
    let one = (
        prop::sample::select(vec!["GET", "POST"]),
        prop::collection::vec(seg, 1..3),
        any::<bool>(),
    )
        .prop_filter_map("one name per path", |(m, segs, outward)| {
            let path = format!("/{}", segs.join("/"));
            let r = RelayRoute::parse(&format!("{m} {path}")).ok()?;
            let target = format!(
                "t/{}",
                r.placeholders()
                    .map(|n| format!("{{{n}}}"))
                    .collect::<Vec<_>>()
                    .join("/")
            );
            Some(route(
                m,
                &path,
                outward.then_some(("github.post", target.as_str())),
            ))
        });
    prop::collection::vec(one, 0..10).prop_map(|v| {
        // As the schema does: one route per method and shape.
        let mut seen = std::collections::BTreeSet::new();
        v.into_iter()
            .filter(|r| seen.insert((r.method.clone(), r.shape())))
            .collect()
    })
}

fn request_path() -> impl Strategy<Value = String> {
    let seg = prop_oneof![
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("A".to_owned()),
        Just("c".to_owned()),
        Just("..".to_owned()),
        Just("%61".to_owned()),
        Just(String::new()),
    ];
    prop_oneof![
        4 => prop::collection::vec(prop::sample::select(vec!["a".to_owned(), "b".to_owned()]), 1..3),
        1 => prop::collection::vec(seg, 1..4),
    ]
    .prop_map(|v| format!("/{}", v.join("/")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A placeholder is filled only by a plain segment: never an empty one,
    /// `.`/`..`, percent-encoded or multi-segment text.
    #[test]
    fn a_placeholder_takes_one_plain_segment(seg in hostile_segment()) {
        let routes = [route("POST", "/a/{x}/c", Some(("github.post", "t/{x}")))];
        let path = format!("/a/{seg}/c");
        match match_route(&routes, "POST", &path) {
            RouteMatch::Outward(_, action) => {
                prop_assert!(is_plain_segment(&seg), "{:?} filled a placeholder", seg);
                prop_assert!(!seg.contains(['%', '/', '{', '}']), "{:?}", seg);
                prop_assert_ne!(seg.as_str(), "..");
                prop_assert_eq!(action.target, format!("t/{seg}"));
            }
            other => prop_assert!(!is_plain_segment(&seg), "{:?} refused: {}", seg, summary(&other)),
        }
    }

    /// A literal route beats a placeholder route for the path it names, in
    /// either order; any other plain segment goes to the placeholder route.
    #[test]
    fn literals_take_precedence(seg in "[a-z0-9]{1,6}", literal_first in any::<bool>()) {
        let lit = route("POST", "/a/lit", None);
        let ph = route("POST", "/a/{x}", Some(("github.post", "t/{x}")));
        let routes = if literal_first { vec![lit, ph] } else { vec![ph, lit] };
        let m = match_route(&routes, "POST", &format!("/a/{seg}"));
        if seg == "lit" {
            prop_assert!(matches!(m, RouteMatch::Plain(_)), "{}", summary(&m));
        } else {
            prop_assert!(matches!(m, RouteMatch::Outward(..)), "{}", summary(&m));
        }
    }

    /// A rendered target has no `{` or `}` when its template names only the
    /// route's placeholders (as the schema requires), and `render` never
    /// copies a brace out of a value it was given.
    #[test]
    fn render_never_yields_placeholder_syntax(segs in prop::collection::vec(hostile_segment(), 3)) {
        let routes = [route("POST", "/r/{a}/{b}/{c}", Some(("github.post", "h/{a}/{b}:{c}")))];
        let path = format!("/r/{}", segs.join("/"));
        if let RouteMatch::Outward(_, action) = match_route(&routes, "POST", &path) {
            prop_assert!(!action.target.contains(['{', '}']), "{}", action.target);
        }
        let binds: Vec<(&str, &str)> = vec![("a", segs[0].as_str()), ("b", segs[1].as_str())];
        let out = render("x/{a}-{b}", &binds);
        let braces_in = segs[0].matches(['{', '}']).count() + segs[1].matches(['{', '}']).count();
        prop_assert_eq!(out.matches(['{', '}']).count(), braces_in);
    }

    /// The result never depends on the order of the routes.
    #[test]
    fn order_does_not_matter(routes in route_set(), method in prop::sample::select(vec!["GET", "POST"]), path in request_path(), k in 0usize..6) {
        let mut reversed = routes.clone();
        reversed.reverse();
        let mut rotated = routes.clone();
        if !rotated.is_empty() {
            let n = k % rotated.len();
            rotated.rotate_left(n);
        }
        let want = summary(&match_route(&routes, method, &path));
        prop_assert_eq!(&summary(&match_route(&reversed, method, &path)), &want);
        prop_assert_eq!(&summary(&match_route(&rotated, method, &path)), &want);
    }
}
