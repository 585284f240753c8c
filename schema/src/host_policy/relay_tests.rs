//! Tests of the issue-18 relay settings: table (outward) routes and their
//! placeholders, `kind = "git"`, `repos`, `credential.username`,
//! `preset = "github"`, and the lints over outward relays.

use super::*;

/// `(code, path, line, column)` of every finding, errors and warnings.
fn codes(text: &str) -> Vec<(&'static str, String, u32, u32)> {
    findings("palisade.toml", text)
        .1
        .into_iter()
        .map(|d| (d.code, d.path.to_string(), d.line, d.column))
        .collect()
}

fn diags(text: &str) -> Vec<Diagnostic> {
    findings("palisade.toml", text).1
}

fn policy(text: &str) -> HostPolicy {
    let (p, d) = findings("palisade.toml", text);
    assert!(d.iter().all(|d| !d.is_error()), "unexpected errors: {d:?}");
    p.expect("a policy without errors")
}

/// An http relay with `routes = [ROUTES]` (one line, for stable positions).
fn http(routes: &str) -> String {
    format!(
        "[[egress.relay]]\nname = \"gh\"\norigin = \"https://api.github.com\"\ncredential = {{ header = \"authorization\", from_env = \"GH\", prefix = \"Bearer \" }}\nroutes = [{routes}]\n"
    )
}

const COMMENT: &str = r#"{ route = "POST /repos/{owner}/{repo}/issues/{number}/comments", outward = "github.post.comment", target = "github.com/{owner}/{repo}/issues/{number}" }"#;

#[test]
fn table_routes_parse_into_outward_routes_beside_plain_ones() {
    let p = policy(&http(&format!(
        "\"GET /repos/{{owner}}/{{repo}}/issues/{{number}}\", {COMMENT}"
    )));
    let routes = &p.egress.relays[0].routes;
    assert_eq!(routes.len(), 2);
    assert_eq!(routes[0].outward, None);
    assert_eq!(routes[0].path, "/repos/{owner}/{repo}/issues/{number}");
    let o = routes[1].outward.as_ref().expect("an outward route");
    assert_eq!(routes[1].method, "POST");
    assert_eq!(o.kind.as_str(), "github.post.comment");
    assert_eq!(o.target, "github.com/{owner}/{repo}/issues/{number}");
    assert!(p.egress.relays[0].is_outward());
    // Positive control of `is_outward`: plain routes only.
    let plain = policy(&http("\"GET /repos/{owner}/{repo}\""));
    assert!(!plain.egress.relays[0].is_outward());
}

#[test]
fn table_route_keys_are_required_and_unknown_ones_refused() {
    let missing = http(r#"{ route = "POST /x/{a}", outward = "github.post.comment" }"#);
    assert_eq!(
        codes(&missing),
        [(
            "missing_key",
            ".egress.relay[0].routes[0].target".to_owned(),
            5,
            11
        )]
    );
    let unknown = http(
        r#"{ route = "POST /x/{a}", outward = "github.post.comment", target = "t/{a}", targte = "y" }"#,
    );
    let d = diags(&unknown);
    assert_eq!(
        d.iter()
            .map(|d| (d.code, d.path.to_string()))
            .collect::<Vec<_>>(),
        [(
            "unknown_key",
            ".egress.relay[0].routes[0].targte".to_owned()
        )]
    );
    assert!(
        d[0].help
            .as_deref()
            .is_some_and(|h| h.starts_with("did you mean `target`?")),
        "{d:?}"
    );
    // A route that is neither a string nor a table.
    assert_eq!(
        codes(&http("3")),
        [(
            "type_mismatch",
            ".egress.relay[0].routes[0]".to_owned(),
            5,
            11
        )]
    );
}

#[test]
fn a_placeholder_used_twice_is_an_error() {
    let d = diags(&http(r#""GET /x/{a}/y/{a}""#));
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        (d[0].code, d[0].path.to_string(), d[0].line, d[0].column),
        (
            "invalid_value",
            ".egress.relay[0].routes[0]".to_owned(),
            5,
            11
        )
    );
    assert!(d[0].message.contains("`{a}` is used twice"), "{}", d[0]);
    // Positive control: two different names.
    policy(&http(r#""GET /x/{a}/y/{b}""#));
}

#[test]
fn target_placeholders_must_be_the_routes_own() {
    let d = diags(&http(
        r#"{ route = "POST /repos/{owner}/{repo}", outward = "github.post.issue", target = "github.com/{ownr}/{repo}" }"#,
    ));
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        (d[0].code, d[0].path.to_string()),
        (
            "invalid_value",
            ".egress.relay[0].routes[0].target".to_owned()
        )
    );
    assert!(d[0].message.contains("`{ownr}`"), "{}", d[0]);
    assert_eq!(
        d[0].help.as_deref(),
        Some("did you mean `{owner}`? the route's placeholders: {owner}, {repo}")
    );
    for (target, needle) in [
        ("github.com/*/x", "glob characters"),
        ("github.com/{owner}/[ab]", "glob characters"),
        ("github.com/{owner", "without `}`"),
        ("github.com/owner}", "without `{`"),
        ("github.com/{1x}", "not a placeholder"),
        ("", "empty target"),
    ] {
        let text = http(&format!(
            "{{ route = \"POST /repos/{{owner}}\", outward = \"github.post.issue\", target = \"{target}\" }}"
        ));
        let d = diags(&text);
        assert_eq!(d.len(), 1, "{target}: {d:?}");
        assert_eq!(d[0].path.to_string(), ".egress.relay[0].routes[0].target");
        assert!(d[0].message.contains(needle), "{target}: {}", d[0]);
    }
    // Positive control: a placeholder inside a segment of the target.
    let p = policy(&http(
        r#"{ route = "POST /repos/{owner}/{repo}/git/refs/{ref}", outward = "git.push", target = "github.com/{owner}/{repo}:refs/heads/{ref}" }"#,
    ));
    assert_eq!(
        p.egress.relays[0].routes[0]
            .outward
            .as_ref()
            .map(|o| o.target.as_str()),
        Some("github.com/{owner}/{repo}:refs/heads/{ref}")
    );
}

#[test]
fn the_outward_kind_is_one_kind() {
    for (kind, code) in [("*", "invalid_value"), ("GitHub.Post", "invalid_value")] {
        let d = diags(&http(&format!(
            "{{ route = \"POST /x\", outward = \"{kind}\", target = \"x\" }}"
        )));
        assert_eq!(
            d.iter()
                .map(|d| (d.code, d.path.to_string()))
                .collect::<Vec<_>>(),
            [(code, ".egress.relay[0].routes[0].outward".to_owned())],
            "{kind}"
        );
    }
    // A typo of a built-in family is a warning, not an error.
    let d = diags(&http(
        r#"{ route = "POST /x", outward = "github.post.coment", target = "x" }"#,
    ));
    assert_eq!(
        d.iter().map(|d| d.code).collect::<Vec<_>>(),
        ["unknown_kind"]
    );
    assert!(!d[0].is_error());
    // Positive control: a user kind outside the built-in families.
    assert_eq!(
        diags(&http(
            r#"{ route = "POST /x", outward = "crm.note", target = "x" }"#
        )),
        vec![]
    );
}

#[test]
fn two_routes_with_the_same_method_and_shape_are_an_error() {
    let d = diags(&http(r#""GET /a/{x}", "GET /a/{y}""#));
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        (d[0].code, d[0].path.to_string(), d[0].line, d[0].column),
        ("duplicate", ".egress.relay[0].routes[1]".to_owned(), 5, 25)
    );
    assert!(
        d[0].message.contains("`GET /a/{x}` (routes[0])"),
        "{}",
        d[0]
    );
    // A table route and a string route with the same shape.
    let d = diags(&http(&format!(
        "\"POST /repos/{{o}}/{{r}}/issues/{{n}}/comments\", {COMMENT}"
    )));
    assert_eq!(
        d.iter().map(|d| d.code).collect::<Vec<_>>(),
        ["duplicate"],
        "{d:?}"
    );
    // Positive controls: another method, a literal where the other has a placeholder.
    policy(&http(r#""GET /a/{x}", "POST /a/{y}", "GET /a/b""#));
}

#[test]
fn git_relays_have_implicit_routes_and_serve_repos() {
    let git = "[[egress.relay]]\nname = \"github-git\"\nkind = \"git\"\norigin = \"https://github.com\"\ncredential = { header = \"authorization\", from_env = \"GH\", username = \"x-access-token\" }\n";
    let p = policy(&format!("{git}repos = [\"acme/*\", \"acme/app\"]\n"));
    let r = &p.egress.relays[0];
    assert_eq!(r.kind, RelayKind::Git);
    assert!(r.routes.is_empty());
    assert_eq!(
        r.repos.iter().map(TargetGlob::as_str).collect::<Vec<_>>(),
        ["acme/*", "acme/app"]
    );
    assert_eq!(r.credential.username.as_deref(), Some("x-access-token"));
    assert!(r.is_outward());
    // Without repos: every repository (empty list), still valid.
    assert!(policy(git).egress.relays[0].repos.is_empty());
    assert_eq!(
        codes(&format!("{git}routes = [\"GET /x\"]\n")),
        [("invalid_value", ".egress.relay[0].routes".to_owned(), 6, 10)]
    );
    for (repo, needle) in [
        ("acme/app.git", "without `.git`"),
        ("acme", "not `OWNER/REPO`"),
        ("acme/app/x", "not `OWNER/REPO`"),
        ("acme/**", "not `OWNER/REPO`"),
        ("/app", "not `OWNER/REPO`"),
        ("acme/[", "acme/["),
    ] {
        let d = diags(&format!("{git}repos = [\"{repo}\"]\n"));
        assert_eq!(d.len(), 1, "{repo}: {d:?}");
        assert_eq!(
            (d[0].code, d[0].path.to_string(), d[0].line),
            ("invalid_value", ".egress.relay[0].repos[0]".to_owned(), 6),
            "{repo}"
        );
        assert!(d[0].message.contains(needle), "{repo}: {}", d[0]);
    }
    // A git relay speaks https, even to loopback.
    let loopback = git.replace("https://github.com", "http://127.0.0.1:8080");
    assert_eq!(
        codes(&loopback),
        [(
            "insecure_origin",
            ".egress.relay[0].origin".to_owned(),
            4,
            10
        )]
    );
    // Positive control: an http relay may use a loopback http origin.
    policy(&http("\"GET /x\"").replace("https://api.github.com", "http://127.0.0.1:8080"));
    // `repos` is for git relays only.
    assert_eq!(
        codes(&format!("{}repos = [\"acme/app\"]\n", http("\"GET /x\""))),
        [("invalid_value", ".egress.relay[0].repos".to_owned(), 6, 9)]
    );
    // A preset on a git relay.
    assert_eq!(
        codes(&format!("{git}preset = \"github\"\n")),
        [("invalid_value", ".egress.relay[0].preset".to_owned(), 6, 10)]
    );
}

#[test]
fn an_unknown_relay_kind_lists_the_allowed_ones() {
    let text = http("\"GET /x\"").replace("name = \"gh\"\n", "name = \"gh\"\nkind = \"gti\"\n");
    let d = diags(&text);
    assert_eq!(
        d.iter()
            .map(|d| (d.code, d.path.to_string(), d.line, d.column))
            .collect::<Vec<_>>(),
        [("invalid_value", ".egress.relay[0].kind".to_owned(), 3, 8)]
    );
    assert_eq!(
        d[0].help.as_deref(),
        Some("did you mean `git`? expected one of: http, git")
    );
    // Positive control: `kind = "http"` is the default, written out.
    let p = policy(&text.replace("\"gti\"", "\"http\""));
    assert_eq!(p.egress.relays[0].kind, RelayKind::Http);
}

#[test]
fn username_needs_the_authorization_header_and_no_prefix() {
    let relay = |cred: &str| {
        format!(
            "[[egress.relay]]\nname = \"g\"\norigin = \"https://example.com\"\nroutes = [\"GET /x\"]\ncredential = {{ {cred} }}\n"
        )
    };
    let ok = policy(&relay(
        "header = \"Authorization\", from_env = \"T\", username = \"x-access-token\"",
    ));
    assert_eq!(
        ok.egress.relays[0].credential.username.as_deref(),
        Some("x-access-token")
    );
    // Positive control: no username, no Basic.
    let plain = policy(&relay("header = \"x-api-key\", from_env = \"T\""));
    assert_eq!(plain.egress.relays[0].credential.username, None);
    for (cred, needle) in [
        (
            "header = \"x-api-key\", from_env = \"T\", username = \"u\"",
            "`header` is `x-api-key`",
        ),
        (
            "header = \"authorization\", from_env = \"T\", username = \"u\", prefix = \"Bearer \"",
            "`prefix`",
        ),
        (
            "header = \"authorization\", from_env = \"T\", username = \"a:b\"",
            "no `:`",
        ),
        (
            "header = \"authorization\", from_env = \"T\", username = \"\"",
            "not an HTTP Basic user name",
        ),
    ] {
        let d = diags(&relay(cred));
        assert_eq!(d.len(), 1, "{cred}: {d:?}");
        assert_eq!(
            (d[0].code, d[0].path.to_string(), d[0].line),
            (
                "invalid_value",
                ".egress.relay[0].credential.username".to_owned(),
                5
            ),
            "{cred}"
        );
        assert!(d[0].message.contains(needle), "{cred}: {}", d[0]);
    }
}

#[test]
fn the_github_preset_adds_its_outward_routes() {
    let text = "[[egress.relay]]\nname = \"gh\"\npreset = \"github\"\norigin = \"https://api.github.com\"\ncredential = { header = \"authorization\", from_env = \"GH\", prefix = \"Bearer \" }\n";
    // `routes` is optional with a preset.
    let p = policy(text);
    let routes = &p.egress.relays[0].routes;
    assert_eq!(routes.len(), GITHUB_REST_PRESET.len());
    for (route, (method, path, kind, target)) in routes.iter().zip(GITHUB_REST_PRESET) {
        assert_eq!(
            (route.method.as_str(), route.path.as_str()),
            (*method, *path)
        );
        let o = route
            .outward
            .as_ref()
            .expect("every preset route is outward");
        assert_eq!((o.kind.as_str(), o.target.as_str()), (*kind, *target));
        assert!(o.kind.is_builtin(), "{kind}");
        // Each preset route is itself a valid table route.
        check_target_template(target, route).expect("a valid target template");
    }
    assert_eq!(p.egress.relays[0].preset, Some(RelayPreset::GitHub));
    // Reads listed by the user come first, the preset's writes after.
    let with_reads = policy(&format!(
        "{text}routes = [\"GET /repos/{{owner}}/{{repo}}/issues/{{number}}\"]\n"
    ));
    let routes = &with_reads.egress.relays[0].routes;
    assert_eq!(routes.len(), GITHUB_REST_PRESET.len() + 1);
    assert_eq!(routes[0].outward, None);
    // A user route with the same method and path as a preset route.
    let d = diags(&format!(
        "{text}routes = [\"GET /x\", \"POST /repos/{{o}}/{{r}}/issues/{{n}}/comments\"]\n"
    ));
    assert_eq!(
        d.iter()
            .map(|d| (d.code, d.path.to_string(), d.line, d.column))
            .collect::<Vec<_>>(),
        [("duplicate", ".egress.relay[0].routes[1]".to_owned(), 6, 21)]
    );
    assert!(
        d[0].message
            .contains("`POST /repos/{owner}/{repo}/issues/{number}/comments`"),
        "{}",
        d[0]
    );
    // An unknown preset.
    let d = diags(&text.replace("\"github\"", "\"gitlab\""));
    assert_eq!(
        d.iter()
            .map(|d| (d.code, d.path.to_string()))
            .collect::<Vec<_>>(),
        [
            ("missing_key", ".egress.relay[0].routes".to_owned()),
            ("invalid_value", ".egress.relay[0].preset".to_owned())
        ]
    );
    assert_eq!(
        d[1].help.as_deref(),
        Some("did you mean `github`? expected one of: github, anthropic, openai, chatgpt")
    );
}

#[test]
fn an_outward_relays_origin_in_egress_allow_is_flagged_as_refused() {
    let outward = format!("[egress]\nallow = [\"api.github.com\"]\n{}", http(COMMENT));
    let d = diags(&outward);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        (d[0].code, d[0].path.to_string(), d[0].is_error()),
        ("relay_origin_allowed", ".egress.allow[0]".to_owned(), false)
    );
    assert!(d[0].message.contains("relay_required"), "{}", d[0]);
    // Positive control: a relay without outward routes keeps the old text.
    let plain = format!(
        "[egress]\nallow = [\"api.github.com\"]\n{}",
        http("\"GET /x\"")
    );
    let d = diags(&plain);
    assert_eq!(
        d.iter().map(|d| d.code).collect::<Vec<_>>(),
        ["relay_origin_allowed"]
    );
    assert!(
        d[0].message.contains("around the relay's route list"),
        "{}",
        d[0]
    );
}

#[test]
fn untargeted_force_push_and_delete_ref_rules_are_flagged() {
    for kind in ["git.force_push", "git.delete_ref", "git"] {
        let d = diags(&format!("[outward]\nallow = [{{ kind = \"{kind}\" }}]\n"));
        assert_eq!(
            d.iter()
                .map(|d| (d.code, d.path.to_string()))
                .collect::<Vec<_>>(),
            [("outward_allow_untargeted", ".outward.allow[0]".to_owned())],
            "{kind}"
        );
        assert!(
            d[0].message.contains("rewrites or deletes"),
            "{kind}: {}",
            d[0]
        );
    }
    // Positive control: with a target, nothing to say.
    assert_eq!(
        diags(
            "[outward]\nallow = [{ kind = \"git.force_push\", target = \"github.com/acme/app:refs/heads/agent/*\" }]\n"
        ),
        vec![]
    );
}

#[test]
fn duplicate_routes_are_named_by_their_authored_index() {
    // routes[0] is refused, so the kept routes are renumbered; the
    // diagnostic still names what the user wrote.
    let d = diags(&http(r#""BAD", "GET /a/{x}", "GET /a/{y}""#));
    let dup = d
        .iter()
        .find(|d| d.code == "duplicate")
        .expect("a duplicate");
    assert_eq!(dup.path.to_string(), ".egress.relay[0].routes[2]");
    assert!(dup.message.contains("(routes[1])"), "{dup}");
}

#[test]
fn a_plain_route_that_wins_over_an_outward_one_is_flagged() {
    let d = diags(&http(&format!(
        "\"POST /repos/acme/app/issues/{{n}}/comments\", {COMMENT}"
    )));
    assert_eq!(
        d.iter()
            .map(|d| (d.code, d.path.to_string(), d.is_error()))
            .collect::<Vec<_>>(),
        [(
            "route_shadows_outward",
            ".egress.relay[0].routes[0]".to_owned(),
            false
        )]
    );
    // Also against a preset's route.
    let preset = "[[egress.relay]]\nname = \"gh\"\npreset = \"github\"\norigin = \"https://api.github.com\"\ncredential = { header = \"authorization\", from_env = \"GH\" }\nroutes = [\"PUT /repos/acme/app/pulls/{n}/merge\"]\n";
    assert_eq!(
        diags(preset).iter().map(|d| d.code).collect::<Vec<_>>(),
        ["route_shadows_outward"]
    );
    // Positive controls: a tie goes to the outward route; another method;
    // a plain route that never meets the outward one.
    for plain in [
        "\"POST /repos/acme/{r}/issues/{n}/{c}\"",
        "\"GET /repos/acme/app/issues/{n}/comments\"",
        "\"POST /repos/acme/app/pulls/{n}/comments\"",
    ] {
        assert_eq!(
            diags(&http(&format!("{plain}, {COMMENT}"))),
            vec![],
            "{plain}"
        );
    }
}

#[test]
fn a_huge_route_list_is_parsed_in_bounded_work() {
    // Near the size limit: thousands of plain and outward routes of one
    // method and length, every pair compatible (the shadow lint's worst case).
    let mut routes = Vec::new();
    let mut len = 0;
    let mut i = 0;
    while len < MAX_POLICY_BYTES - 4096 {
        let plain = format!("\"POST /p/{{x}}/{i}\"");
        let outward = format!(
            "{{ route = \"POST /p/{i}/{{y}}\", outward = \"github.post\", target = \"t/{{y}}\" }}"
        );
        len += plain.len() + outward.len() + 4;
        routes.push(plain);
        routes.push(outward);
        i += 1;
    }
    let text = http(&routes.join(", "));
    assert!(text.len() <= MAX_POLICY_BYTES);
    let p = policy(&text);
    assert_eq!(p.egress.relays[0].routes.len(), routes.len());
}

#[test]
fn a_target_is_compared_with_the_ref_and_the_pull_number_as_segments() {
    let c = |t: &str| TargetGlob::comparable(t).into_owned();
    // the repository and the ref of a git target are separate segments
    assert_eq!(
        c("github.com/acme/app:refs/heads/main"),
        "github.com/acme/app/refs/heads/main"
    );
    // a host's port stays in the host segment
    assert_eq!(
        c("github.test:8443/acme/app:refs/heads/x"),
        "github.test:8443/acme/app/refs/heads/x"
    );
    assert_eq!(c("stripe:acct_big"), "stripe:acct_big");
    assert_eq!(c("*@acme.example"), "*@acme.example");
    // pull requests are issues to GitHub; the create targets stay apart
    assert_eq!(
        c("github.com/acme/app/pull/7"),
        "github.com/acme/app/issues/7"
    );
    assert_eq!(
        c("github.com/acme/app/Pulls/7/x"),
        "github.com/acme/app/issues/7/x"
    );
    assert_eq!(c("github.com/acme/app/pulls"), "github.com/acme/app/pulls");
    assert_eq!(c("github.com/acme/pull/x/7"), "github.com/acme/pull/x/7");
    // the glob is compiled in the same form: `**` below a repository
    // covers its refs, and `*` does not cross the `:`
    let m = |g: &str, t: &str| {
        TargetGlob::parse(g)
            .unwrap()
            .compile(false)
            .unwrap()
            .compile_matcher()
            .is_match(&*TargetGlob::comparable(t))
    };
    assert!(m(
        "github.com/acme/app/**",
        "github.com/acme/app:refs/heads/main"
    ));
    assert!(m(
        "github.test:*/acme/app:refs/heads/agent/*",
        "github.test:8443/acme/app:refs/heads/agent/x"
    ));
    assert!(!m(
        "github.test:*/acme/app:refs/heads/agent/*",
        "github.test:8443/acme/app:refs/heads/agent/x/y"
    ));
    assert!(!m(
        "github.com/acme/*",
        "github.com/acme/app:refs/heads/main"
    ));
    assert!(m("stripe:acct_big*", "stripe:acct_big_2"));
}

#[test]
fn an_allowed_delete_where_force_pushes_are_denied_is_flagged() {
    let lint = |allow: &str, deny: &str| {
        diags(&format!("[outward]\nallow = [{allow}]\ndeny = [{deny}]\n"))
            .into_iter()
            .filter(|d| d.code == "outward_delete_allowed_with_force_denied")
            .map(|d| (d.path.to_string(), d.message))
            .collect::<Vec<_>>()
    };
    let force_main =
        r#"{ kind = "git.force_push", target = "github.com/acme/app:refs/heads/main" }"#;
    let d = lint(
        r#"{ kind = "git", target = "github.com/acme/**" }"#,
        force_main,
    );
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].0, ".outward.allow[0]");
    assert!(d[0].1.contains(".outward.deny[0]"), "{}", d[0].1);
    // a force-push deny on every ref, a delete allowed on some of them
    let d = lint(
        r#"{ kind = "git.delete_ref", target = "github.com/acme/app:refs/heads/agent/*" }"#,
        r#"{ kind = "git.force_push" }"#,
    );
    assert_eq!(d.len(), 1, "{d:?}");
    // positive controls: no delete allowed, deletes denied too, or the
    // allowed deletes never reach the denied refs
    assert_eq!(
        lint(
            r#"{ kind = "git.push", target = "github.com/acme/**" }"#,
            force_main
        ),
        vec![]
    );
    assert_eq!(
        lint(
            r#"{ kind = "git", target = "github.com/acme/**" }"#,
            &format!(
                r#"{force_main}, {{ kind = "git.delete_ref", target = "github.com/acme/app:refs/heads/main" }}"#
            )
        ),
        vec![]
    );
    assert_eq!(
        lint(
            r#"{ kind = "git", target = "github.com/acme/app:refs/heads/agent/*" }"#,
            force_main
        ),
        vec![]
    );
}
