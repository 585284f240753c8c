//! Tests of the `palisade.toml` parser: strictness, positions and lints.

use super::*;

fn errors(text: &str) -> Vec<Diagnostic> {
    let (_, d) = findings("palisade.toml", text);
    d
}

fn codes(text: &str) -> Vec<(&'static str, String, u32, u32)> {
    errors(text)
        .into_iter()
        .map(|d| (d.code, d.path.to_string(), d.line, d.column))
        .collect()
}

#[test]
fn example_policy_parses_clean() {
    let text = include_str!("../../../examples/palisade.toml");
    let (policy, diags) = findings("examples/palisade.toml", text);
    assert_eq!(
        diags,
        vec![],
        "the shipped example must parse without findings"
    );
    let policy = policy.unwrap();
    assert_eq!(policy.egress.relays.len(), 1);
    assert!(policy.egress.require_sni_match);
    assert_eq!(policy.outward.default, OutwardDefault::Ask);
    assert_eq!(policy.worker.limits.pids, Some(512));
    assert_eq!(policy.worker.limits.file_size, Some(1 << 30));
}

#[test]
fn empty_policy_is_valid_and_closed() {
    let (policy, diags) = findings("p.toml", "");
    assert!(diags.is_empty());
    let policy = policy.unwrap();
    assert!(policy.egress.allow.is_empty());
    assert!(policy.egress.require_sni_match);
    assert_eq!(policy.outward.default, OutwardDefault::Ask);
    assert_eq!(policy.taint.sources.len(), TaintSourceKind::DEFAULT.len());
}

#[test]
fn unknown_keys_are_reported_with_path_line_and_column() {
    let text = "[egress]\nallow = [\"a.example\"]\nalow = []\n\n[[egress.relay]]\nname = \"x\"\norigin = \"https://x.example\"\nroutes = [\"POST /v1\"]\ncredential = { header = \"x-api-key\", from_env = \"K\", secret = \"s\" }\n";
    let (policy, d) = findings("palisade.toml", text);
    assert!(policy.is_none());
    let got: Vec<_> = d
        .iter()
        .map(|d| (d.code, d.path.to_string(), d.line, d.column))
        .collect();
    assert_eq!(
        got,
        vec![
            ("unknown_key", ".egress.alow".to_owned(), 3, 1),
            (
                "unknown_key",
                ".egress.relay[0].credential.secret".to_owned(),
                9,
                54
            ),
        ]
    );
    assert_eq!(
        d[0].help
            .as_deref()
            .map(|h| h.starts_with("did you mean `allow`")),
        Some(true)
    );
    assert_eq!(
        d[0].to_string(),
        "palisade.toml:3:1: error[unknown_key]: .egress.alow: unknown key `alow`"
    );
}

#[test]
fn type_errors_name_the_expected_type() {
    assert_eq!(
        codes("[egress]\nallow = \"a.example\"\n"),
        vec![("type_mismatch", ".egress.allow".to_owned(), 2, 9)]
    );
    assert_eq!(
        codes("[egress]\nallow = [\"a.example\", 3]\n"),
        vec![("type_mismatch", ".egress.allow[1]".to_owned(), 2, 23)]
    );
    assert_eq!(
        codes("worker = 1\n"),
        vec![("type_mismatch", ".worker".to_owned(), 1, 10)]
    );
}

#[test]
fn syntax_errors_have_a_position() {
    let d = errors("[egress\nallow = []\n");
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].code, "syntax");
    assert_eq!((d[0].line, d[0].column), (1, 8));
}

#[test]
fn bad_host_patterns_are_errors_with_help() {
    let d = errors(
        "[egress]\nallow = [\"*\", \"*.com\", \"api.*.x.com\", \"10.0.0.1\", \"ok.example:443\"]\n",
    );
    let got: Vec<_> = d.iter().map(|d| (d.code, d.path.to_string())).collect();
    assert_eq!(
        got,
        vec![
            ("invalid_host_pattern", ".egress.allow[0]".to_owned()),
            ("invalid_host_pattern", ".egress.allow[1]".to_owned()),
            ("invalid_host_pattern", ".egress.allow[2]".to_owned()),
            ("invalid_host_pattern", ".egress.allow[3]".to_owned()),
        ]
    );
    assert!(d[0].help.is_some());
    assert!(d[3].help.as_deref().unwrap().contains("allow_addresses"));
}

#[test]
fn positive_control_valid_values_are_accepted() {
    let text = r#"
[worker]
profile = "strict"
cwd = "/w"
limits = { memory = 1048576, cpu = "1h30m", pids = 10 }
[egress]
allow = ["Example.COM.", "*.githubusercontent.com:443"]
allow_addresses = ["10.0.0.0/8", "fd00::/8"]
require_sni_match = false
[outward]
default = "deny"
deny = [{ kind = "payment" }]
allow = [{ kind = "git.push", target = "github.com/acme/*" }]
[taint]
sources = ["web", "shell"]
egress_allow = ["example.com"]
[[routing]]
paths = ["private/**"]
providers = ["claude"]
"#;
    let (policy, d) = findings("p.toml", text);
    let errs: Vec<_> = d.iter().filter(|d| d.is_error()).collect();
    assert!(errs.is_empty(), "{errs:?}");
    let p = policy.unwrap();
    assert_eq!(p.worker.profile, Profile::Strict);
    assert_eq!(p.worker.limits.cpu, Some(5400));
    assert_eq!(p.egress.allow[0].to_string(), "example.com");
    assert_eq!(p.egress.allow_addresses.len(), 2);
    assert!(!p.egress.require_sni_match);
    assert_eq!(p.outward.default, OutwardDefault::Deny);
    assert_eq!(p.taint.sources.len(), 2);
    assert_eq!(p.routing[0].providers.len(), 1);
}

#[test]
fn invalid_values_are_errors() {
    let cases = [
        ("[worker]\nprofile = \"yolo\"\n", ".worker.profile"),
        ("[worker]\ncwd = \"relative\"\n", ".worker.cwd"),
        (
            "[worker]\nlimits = { memory = \"4 gigs\" }\n",
            ".worker.limits.memory",
        ),
        (
            "[egress]\nallow_addresses = [\"10.0.0.1/8\"]\n",
            ".egress.allow_addresses[0]",
        ),
        ("[outward]\ndefault = \"allow\"\n", ".outward.default"),
        (
            "[outward]\nallow = [{ kind = \"Git Push\" }]\n",
            ".outward.allow[0].kind",
        ),
        (
            "[outward]\nallow = [{ target = \"x\" }]\n",
            ".outward.allow[0].kind",
        ),
        ("[taint]\nsources = [\"email\"]\n", ".taint.sources[0]"),
        (
            "[taint]\nsteering_paths = [\"a/[b\"]\n",
            ".taint.steering_paths[0]",
        ),
        ("[[routing]]\npaths = [\"x/**\"]\n", ".routing[0].providers"),
        (
            "[[egress.relay]]\nname = \"a\"\norigin = \"http://api.example\"\nroutes = [\"POST /v1\"]\ncredential = { header = \"h\", from_env = \"E\" }\n",
            ".egress.relay[0].origin",
        ),
        (
            "[[egress.relay]]\nname = \"a\"\norigin = \"https://api.example\"\nroutes = [\"POST /v1/../x\"]\ncredential = { header = \"h\", from_env = \"E\" }\n",
            ".egress.relay[0].routes[0]",
        ),
        (
            "[[egress.relay]]\nname = \"a\"\norigin = \"https://api.example\"\nroutes = []\n",
            ".egress.relay[0].credential",
        ),
    ];
    for (text, path) in cases {
        let (policy, d) = findings("p.toml", text);
        assert!(policy.is_none(), "{text}");
        assert!(
            d.iter().any(|d| d.is_error() && d.path.to_string() == path),
            "{text}: expected an error at {path}, got {d:?}"
        );
    }
}

#[test]
fn lints_flag_risky_choices() {
    let text = r#"
[egress]
allow = ["api.anthropic.com:443", "*.example.com", "a.example.com"]
deny = ["*.example.com"]
[[egress.relay]]
name = "anthropic"
origin = "https://api.anthropic.com"
routes = ["POST /v1/messages"]
credential = { header = "x-api-key", from_env = "ANTHROPIC_API_KEY" }
[outward]
allow = [{ kind = "payment" }, { kind = "*" }, { kind = "github.pots", target = "x" }]
[taint]
egress_allow = ["other.example.org"]
"#;
    let (policy, d) = findings("p.toml", text);
    assert!(policy.is_some(), "lints are warnings: {d:?}");
    let got: BTreeSet<&str> = d.iter().map(|d| d.code).collect();
    for code in [
        "relay_origin_allowed",
        "allow_shadowed",
        "outward_allow_untargeted",
        "outward_allow_everything",
        "unknown_kind",
        "taint_allow_not_allowed",
    ] {
        assert!(got.contains(code), "missing lint {code}: {got:?}");
    }
    assert!(d.iter().all(|d| !d.is_error()));
    // Positive control: the same policy without the risky entries has no findings.
    let clean = r#"
[egress]
allow = ["api.github.com:443"]
[outward]
allow = [{ kind = "payment", target = "stripe:acct_123" }]
[taint]
egress_allow = ["api.github.com:443"]
"#;
    assert_eq!(errors(clean), vec![]);
}

#[test]
fn oversized_input_is_refused() {
    let big = "#".repeat(MAX_POLICY_BYTES + 1);
    let d = errors(&big);
    assert_eq!(d[0].code, "too_large");
}

#[test]
fn fuzz_harness_runs() {
    __fuzz::parse(b"[egress]\nallow = [\"*.example.com\"]\n");
    __fuzz::parse(&[0xff, 0xfe]);
    __fuzz::host_pattern(b"*.Example.com.:443");
    __fuzz::host_pattern(b"[::1]:1");
}

#[test]
fn lints_point_at_the_offending_element() {
    let text = "[egress]\nallow = [\"a.example.org\", \"*.herokuapp.com\", \"*.co.uk\"]\nallow_addresses = [\"0.0.0.0/0\", \"10.0.0.0/8\"]\n[taint]\negress_allow = [\"b.example.org\"]\n";
    let got = codes(text);
    assert_eq!(
        got,
        vec![
            (
                "shared_hosting_wildcard",
                ".egress.allow[1]".to_owned(),
                2,
                27
            ),
            (
                "wildcard_public_suffix",
                ".egress.allow[2]".to_owned(),
                2,
                46
            ),
            (
                "wide_address_range",
                ".egress.allow_addresses[0]".to_owned(),
                3,
                20
            ),
            (
                "taint_allow_not_allowed",
                ".taint.egress_allow[0]".to_owned(),
                5,
                17
            ),
        ]
    );
}

#[test]
fn writable_worker_without_steering_paths_is_flagged() {
    let got = codes("[worker]\nwritable = [\"/w\"]\n");
    assert_eq!(
        got,
        vec![("no_steering_paths", ".worker.writable".to_owned(), 2, 12)]
    );
    assert_eq!(
        codes("[worker]\nwritable = [\"/w\"]\n[taint]\nsteering_paths = [\"AGENTS.md\"]\n"),
        vec![]
    );
}

const CUSTOM: &str = r#"[profiles.ci]
base = "governed"
read_only = ["/opt/toolchain"]
masks = ["/etc/ssh"]
writable = ["/tmp/ci-cache"]
network = "none"
limits = { address_space = "2GiB", processes = 256, cpu = "10m" }

[worker]
profile = "ci"
"#;

#[test]
fn custom_profile_parses_and_is_named_by_worker() {
    let (policy, d) = findings("palisade.toml", CUSTOM);
    assert!(d.iter().all(|d| !d.is_error()), "{d:?}");
    let p = policy.unwrap();
    assert_eq!(p.worker.profile_name(), "ci");
    assert_eq!(p.worker.profile, Profile::Governed);
    let c = &p.profiles["ci"];
    assert_eq!(c.base, Profile::Governed);
    assert_eq!(c.read_only, vec!["/opt/toolchain".to_owned()]);
    assert_eq!(c.masks, vec!["/etc/ssh".to_owned()]);
    assert_eq!(c.writable, vec!["/tmp/ci-cache".to_owned()]);
    assert_eq!(c.network, Some(ProfileNetwork::None));
    assert_eq!(c.limits.address_space, Some(2 << 30));
    assert_eq!(c.limits.processes, Some(256));
    assert_eq!(c.limits.cpu, Some(600));
}

#[test]
fn custom_profile_unknown_key_has_position() {
    let text = CUSTOM.replace("network = \"none\"", "netwrok = \"none\"");
    assert_eq!(
        codes(&text),
        vec![("unknown_key", ".profiles.ci.netwrok".to_owned(), 6, 1)]
    );
}

#[test]
fn custom_profile_unknown_base_is_an_error() {
    let text = CUSTOM.replace("base = \"governed\"", "base = \"lenient\"");
    let c = codes(&text);
    assert!(
        c.contains(&("invalid_value", ".profiles.ci.base".to_owned(), 2, 8)),
        "{c:?}"
    );
    // The worker then names a profile that failed to parse: also an error.
    assert!(c.iter().any(|(_, p, _, _)| p == ".worker.profile"), "{c:?}");
}

#[test]
fn custom_profile_cannot_weaken_its_base() {
    // Positive control: the same profile without the weakening line is clean.
    assert!(codes(CUSTOM).is_empty());
    for (line, path) in [
        ("landlock = false", ".profiles.ci.landlock"),
        ("seccomp = false", ".profiles.ci.seccomp"),
        ("unmask = [\"/home\"]", ".profiles.ci.unmask"),
        ("namespaces = []", ".profiles.ci.namespaces"),
    ] {
        let text = CUSTOM.replace("network = \"none\"", line);
        let c = codes(&text);
        assert_eq!(c, vec![("weakens_base", path.to_owned(), 6, 1)], "{line}");
    }
    let text = CUSTOM
        .replace("base = \"governed\"", "base = \"strict\"")
        .replace("network = \"none\"", "network = \"proxy\"");
    assert_eq!(
        codes(&text),
        vec![("weakens_base", ".profiles.ci.network".to_owned(), 6, 11)]
    );
    // `proxy` on a governed base keeps what the base has: allowed.
    let text = CUSTOM.replace("network = \"none\"", "network = \"proxy\"");
    assert!(codes(&text).is_empty());
}

#[test]
fn unknown_worker_profile_names_the_defined_ones() {
    let text = CUSTOM.replace("profile = \"ci\"", "profile = \"cj\"");
    let d = errors(&text);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].path.to_string(), ".worker.profile");
    let help = d[0].help.clone().unwrap();
    assert!(help.contains("governed, strict, maintenance, ci"), "{help}");
}

#[test]
fn built_in_profiles_cannot_be_redefined() {
    let text = "[profiles.strict]\nbase = \"governed\"\n";
    assert_eq!(
        codes(text),
        vec![("invalid_value", ".profiles.strict".to_owned(), 1, 11)]
    );
}

#[test]
fn a_memory_limit_is_not_flagged_any_more() {
    // The sandbox enforces it in a cgroup of its own (palisade-isolate).
    let got = codes("[worker]\nlimits = { pids = 8, memory = \"1GiB\" }\n");
    assert_eq!(got, Vec::<(&str, String, u32, u32)>::new());
}

#[test]
fn relay_limits_parse_and_bad_ones_are_located() {
    let relay = "[[egress.relay]]\nname = \"a\"\norigin = \"https://api.example\"\nroutes = [\"POST /v1\"]\ncredential = { header = \"h\", from_env = \"E\" }\n";
    // positive control: every key, with units
    let text = format!(
        "{relay}limits = {{ max_body = \"1MiB\", max_buffered = \"4MiB\", connections = 8, header_timeout = \"5s\", body_idle_timeout = 2, body_timeout = \"1m\" }}\n"
    );
    let (policy, d) = findings("p.toml", &text);
    assert!(d.iter().all(|d| !d.is_error()), "{d:?}");
    let l = &policy.unwrap().egress.relays[0].limits;
    assert_eq!(
        (
            l.max_body,
            l.max_buffered,
            l.connections,
            l.header_timeout,
            l.body_idle_timeout,
            l.body_timeout
        ),
        (
            Some(1 << 20),
            Some(4 << 20),
            Some(8),
            Some(5),
            Some(2),
            Some(60)
        )
    );
    // absent: every limit is the relay's default
    let (policy, _) = findings("p.toml", relay);
    assert_eq!(
        policy.unwrap().egress.relays[0].limits,
        RelayLimits::default()
    );
    for (limits, path) in [
        ("{ connections = 0 }", ".egress.relay[0].limits.connections"),
        (
            "{ body_timeout = \"0s\" }",
            ".egress.relay[0].limits.body_timeout",
        ),
        (
            "{ max_body = \"lots\" }",
            ".egress.relay[0].limits.max_body",
        ),
        (
            "{ max_body = \"8MiB\", max_buffered = \"1MiB\" }",
            ".egress.relay[0].limits.max_body",
        ),
        ("{ body_timout = 3 }", ".egress.relay[0].limits.body_timout"),
    ] {
        let text = format!("{relay}limits = {limits}\n");
        let (policy, d) = findings("p.toml", &text);
        assert!(policy.is_none(), "{limits}");
        let e = d
            .iter()
            .find(|d| d.is_error() && d.path.to_string() == path)
            .unwrap_or_else(|| panic!("{limits}: expected an error at {path}, got {d:?}"));
        assert_eq!(e.line, 6, "{limits}: located on the limits line");
    }
}

#[test]
fn worker_writes_and_commit_refuse_parse() {
    let (policy, diags) = findings(
        "palisade.toml",
        "[worker]\nwrites = \"direct\"\n\n[worker.commit]\nrefuse = [\"deploy/**\", \"./**/*.pem\"]\n",
    );
    let codes: Vec<&str> = diags.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["direct_writes"], "only the lint: {diags:?}");
    let w = policy.unwrap().worker;
    assert_eq!(w.writes, Writes::Direct);
    let globs: Vec<&str> = w.commit.refuse.iter().map(PathGlob::as_str).collect();
    assert_eq!(globs, ["deploy/**", "**/*.pem"]);
    // The defaults: staged, nothing added.
    let w = findings("palisade.toml", "[worker]\n").0.unwrap().worker;
    assert_eq!(w.writes, Writes::Staged);
    assert_eq!(w.commit, WorkerCommit::default());
    assert_eq!(
        findings("palisade.toml", "[worker]\nwrites = \"staged\"\n")
            .0
            .unwrap()
            .worker
            .writes,
        Writes::Staged
    );
}

#[test]
fn worker_writes_and_commit_refuse_errors_are_located() {
    assert_eq!(
        codes("[worker]\nwrites = \"overlay\"\n"),
        vec![("invalid_value", ".worker.writes".to_owned(), 2, 10)]
    );
    assert_eq!(
        codes(
            "[worker.commit]\nrefuse = [\"ok/**\", \"/etc/**\", \"a/../b\", \"src/[\"]\nallow = []\n"
        ),
        vec![
            ("invalid_glob", ".worker.commit.refuse[1]".to_owned(), 2, 20),
            ("invalid_glob", ".worker.commit.refuse[2]".to_owned(), 2, 31),
            ("invalid_glob", ".worker.commit.refuse[3]".to_owned(), 2, 41),
            ("unknown_key", ".worker.commit.allow".to_owned(), 3, 1),
        ]
    );
    let e = errors("[worker.commit]\nrefuse = [\"/etc/**\"]\n");
    assert!(e[0].message.contains("`/etc/**`"), "{:?}", e[0].message);
    assert_eq!(
        codes("[worker.commit]\nrefuse = \"x\"\n")[0].0,
        "type_mismatch"
    );
}

#[test]
fn direct_writes_are_flagged() {
    assert_eq!(
        codes("[worker]\nwrites = \"direct\"\n"),
        vec![("direct_writes", ".worker.writes".to_owned(), 2, 10)]
    );
    // Positive control: staged, said or not, is clean.
    assert_eq!(codes("[worker]\nwrites = \"staged\"\n"), vec![]);
    assert_eq!(codes("[worker]\n"), vec![]);
}

const RELAY: &str = "[[egress.relay]]\nname = \"claude\"\norigin = \"https://api.anthropic.com\"\nroutes = [\"POST /v1/messages\"]\ncredential = { header = \"x-api-key\", from_env = \"K\" }\n";

#[test]
fn taint_observe_parses_and_defaults_to_kernel() {
    let p = findings("p.toml", "[taint]\nobserve = \"self_report\"\n")
        .0
        .unwrap();
    assert_eq!(p.taint.observe, TaintObserve::SelfReport);
    let p = findings("p.toml", "[taint]\nobserve = \"kernel\"\n")
        .0
        .unwrap();
    assert_eq!(p.taint.observe, TaintObserve::Kernel);
    assert_eq!(
        findings("p.toml", "[taint]\n").0.unwrap().taint.observe,
        TaintObserve::Kernel
    );
    for v in TaintObserve::ALL {
        assert_eq!(TaintObserve::parse(v.as_str()), Some(*v));
    }
}

#[test]
fn taint_observe_errors_are_located_with_a_suggestion() {
    assert_eq!(
        codes("[taint]\nobserve = \"self-report\"\n"),
        vec![("invalid_value", ".taint.observe".to_owned(), 2, 11)]
    );
    let e = errors("[taint]\nobserve = \"self-report\"\n");
    assert_eq!(
        e[0].help.as_deref(),
        Some("did you mean `self_report`? expected one of: kernel, self_report")
    );
    let e = errors("[taint]\nobserve = \"never\"\n");
    assert_eq!(
        e[0].help.as_deref(),
        Some("expected one of: kernel, self_report")
    );
    assert_eq!(
        codes("[taint]\nobserve = true\n"),
        vec![("type_mismatch", ".taint.observe".to_owned(), 2, 11)]
    );
    assert_eq!(
        codes("[taint]\nobserv = \"kernel\"\n"),
        vec![("unknown_key", ".taint.observ".to_owned(), 2, 1)]
    );
    assert!(
        errors("[taint]\nobserv = \"kernel\"\n")[0]
            .help
            .as_deref()
            .is_some_and(|h| h.starts_with("did you mean `observe`"))
    );
}

#[test]
fn relay_provider_parses_and_defaults_to_the_name() {
    let p = findings("p.toml", RELAY).0.unwrap();
    assert_eq!(p.egress.relays[0].provider, "claude");
    let text = RELAY.replace(
        "name = \"claude\"\n",
        "name = \"claude\"\nprovider = \"anthropic\"\n",
    );
    let (p, d) = findings("p.toml", &text);
    assert_eq!(d, vec![]);
    assert_eq!(p.unwrap().egress.relays[0].provider, "anthropic");
    let bad = RELAY
        .replace("api.anthropic.com", "llm.corp.example")
        .replace(
            "name = \"claude\"\n",
            "name = \"claude\"\nprovider = \"an thropic\"\n",
        );
    assert_eq!(
        codes(&bad),
        vec![(
            "invalid_value",
            ".egress.relay[0].provider".to_owned(),
            3,
            12
        )]
    );
    let bad = RELAY.replace("name = \"claude\"\n", "name = \"claude\"\nprovider = 1\n");
    assert!(codes(&bad).contains(&(
        "type_mismatch",
        ".egress.relay[0].provider".to_owned(),
        3,
        12
    )));
}

#[test]
fn provider_hosts_parse_as_host_patterns() {
    let text = "[egress.provider_hosts]\nopenai = [\"API.example-llm.com\", \"*.llm.example\"]\nlocal-llm = []\n";
    let (p, d) = findings("p.toml", text);
    assert!(d.iter().all(|d| !d.is_error()), "{d:?}");
    let hosts = p.unwrap().egress.provider_hosts;
    let openai: Vec<String> = hosts["openai"].iter().map(ToString::to_string).collect();
    assert_eq!(openai, ["api.example-llm.com", "*.llm.example"]);
    assert_eq!(hosts["local-llm"], vec![]);
    assert_eq!(hosts.len(), 2);
}

#[test]
fn provider_hosts_errors_are_located() {
    assert_eq!(
        codes("[egress.provider_hosts]\nopenai = [\"ok.example\", \"*\", \"api.x.example:443\"]\n"),
        vec![
            (
                "invalid_host_pattern",
                ".egress.provider_hosts.openai[1]".to_owned(),
                2,
                25
            ),
            (
                "invalid_host_pattern",
                ".egress.provider_hosts.openai[2]".to_owned(),
                2,
                30
            ),
        ]
    );
    let e = errors("[egress.provider_hosts]\nopenai = [\"*.x.example:443\"]\n");
    assert_eq!(e[0].help.as_deref(), Some("write `*.x.example`"));
    assert_eq!(
        codes("[egress.provider_hosts]\n\"open ai\" = [\"x.example\"]\n"),
        vec![(
            "invalid_value",
            ".egress.provider_hosts[\"open ai\"]".to_owned(),
            2,
            1
        )]
    );
    assert_eq!(
        codes("[egress.provider_hosts]\nopenai = \"x.example\"\n"),
        vec![(
            "type_mismatch",
            ".egress.provider_hosts.openai".to_owned(),
            2,
            10
        )]
    );
    assert_eq!(
        codes("[egress]\nprovider_hosts = [\"x.example\"]\n"),
        vec![("type_mismatch", ".egress.provider_hosts".to_owned(), 2, 18)]
    );
    assert_eq!(codes("[egress]\nprovider_host = {}\n")[0].0, "unknown_key");
}

#[test]
fn builtin_provider_hosts_are_valid_names_and_patterns() {
    let mut names = BTreeSet::new();
    for (name, hosts) in BUILTIN_PROVIDER_HOSTS {
        assert!(is_name(name), "{name}");
        assert!(names.insert(*name), "{name} is listed twice");
        assert!(!hosts.is_empty(), "{name} has no hosts");
        for h in *hosts {
            let p = HostPattern::parse(h).unwrap_or_else(|e| panic!("{h}: {e}"));
            assert_eq!(p.to_string(), *h, "written in normal form");
            assert_eq!(p.port(), None, "{h}: provider hosts take no port");
        }
    }
    for n in ["anthropic", "openai", "google", "mistral"] {
        assert!(names.contains(n), "{n}");
    }
}

#[test]
fn observe_self_report_is_flagged_when_paths_are_watched() {
    for watched in [
        "marked = [\"notes/**\"]\n",
        "untrusted_paths = [\"inbox/**\"]\n",
    ] {
        let text = format!("[taint]\nobserve = \"self_report\"\n{watched}");
        assert_eq!(
            codes(&text),
            vec![("observe_self_report", ".taint.observe".to_owned(), 2, 11)],
            "{watched}"
        );
    }
    let routed = "[taint]\nobserve = \"self_report\"\n[[routing]]\npaths = [\"private/**\"]\nproviders = [\"anthropic\"]\n";
    assert_eq!(
        codes(routed),
        vec![("observe_self_report", ".taint.observe".to_owned(), 2, 11)]
    );
    // Positive controls: self_report with nothing watched, and kernel with
    // everything watched, are clean.
    assert_eq!(codes("[taint]\nobserve = \"self_report\"\n"), vec![]);
    let kernel = routed.replace("self_report", "kernel");
    assert_eq!(codes(&kernel), vec![]);
    assert_eq!(
        codes("[taint]\nmarked = [\"notes/**\"]\nuntrusted_paths = [\"inbox/**\"]\n"),
        vec![]
    );
}

#[test]
fn routing_provider_unbound_is_flagged() {
    let text = "[[routing]]\npaths = [\"private/**\"]\nproviders = [\"anthropic\", \"antropic\"]\n";
    assert_eq!(
        codes(text),
        vec![(
            "routing_provider_unbound",
            ".routing[0].providers[1]".to_owned(),
            3,
            27
        )]
    );
    let e = errors(text);
    assert!(
        e[0].help
            .as_deref()
            .is_some_and(|h| h.starts_with("did you mean `anthropic`?")),
        "{:?}",
        e[0].help
    );
    // Positive controls: a built-in provider, a relay's name, a relay's
    // provider and a provider with policy hosts are all bound.
    assert_eq!(
        codes("[[routing]]\npaths = [\"p/**\"]\nproviders = [\"openai\", \"xai\"]\n"),
        vec![]
    );
    let relay = format!("{RELAY}[[routing]]\npaths = [\"p/**\"]\nproviders = [\"claude\"]\n");
    assert_eq!(
        codes(&relay),
        vec![(
            "relay_provider_mismatch",
            ".egress.relay[0]".to_owned(),
            1,
            1
        )]
    );
    let bound = RELAY.replace(
        "name = \"claude\"\n",
        "name = \"claude\"\nprovider = \"anthropic\"\n",
    );
    let by_provider =
        format!("{bound}[[routing]]\npaths = [\"p/**\"]\nproviders = [\"anthropic\"]\n");
    assert_eq!(codes(&by_provider), vec![]);
    let hosts = "[egress.provider_hosts]\nlocal-llm = [\"llm.corp.example\"]\n[[routing]]\npaths = [\"p/**\"]\nproviders = [\"local-llm\"]\n";
    assert_eq!(codes(hosts), vec![]);
    // A provider given an empty host list still has no hosts.
    let empty = hosts.replace("[\"llm.corp.example\"]", "[]");
    assert_eq!(
        codes(&empty),
        vec![(
            "routing_provider_unbound",
            ".routing[0].providers[0]".to_owned(),
            5,
            14
        )]
    );
    // No providers at all is route_nowhere, not unbound.
    assert_eq!(
        codes("[[routing]]\npaths = [\"p/**\"]\nproviders = []\n")
            .iter()
            .map(|c| c.0)
            .collect::<Vec<_>>(),
        ["route_nowhere"]
    );
}

#[test]
fn relay_provider_mismatch_is_flagged() {
    let d = errors(RELAY);
    assert_eq!(
        d.iter()
            .map(|d| (d.code, d.path.to_string()))
            .collect::<Vec<_>>(),
        [("relay_provider_mismatch", ".egress.relay[0]".to_owned())]
    );
    assert_eq!(
        d[0].help.as_deref(),
        Some("set `provider = \"anthropic\"` on the relay")
    );
    // A policy host counts as much as a built-in one.
    let own = "[egress.provider_hosts]\nlocal-llm = [\"llm.corp.example\"]\n[[egress.relay]]\nname = \"x\"\norigin = \"https://llm.corp.example\"\nroutes = [\"POST /v1\"]\ncredential = { header = \"h\", from_env = \"K\" }\n";
    assert_eq!(codes(own)[0].0, "relay_provider_mismatch");
    // Positive controls: bound to the host's provider, or an origin that is
    // no provider's host.
    assert_eq!(
        codes(&own.replace("name = \"x\"", "name = \"local-llm\"")),
        vec![]
    );
    assert_eq!(
        codes(&RELAY.replace("api.anthropic.com", "llm.corp.example")),
        vec![]
    );
}

#[test]
fn evidence_section_parses_and_refuses_tls_without_its_ca_and_bad_values() {
    // Positive control: the valid section is read as written.
    let ok = r#"
[evidence]
ship = ["relp://127.0.0.1:2514", "syslog+tcp://logs.example:514"]
on_backlog = "refuse"
ship_buffer = 50
"#;
    let (policy, d) = findings("p.toml", ok);
    assert!(d.iter().all(|d| !d.is_error()), "{d:?}");
    let e = policy.unwrap().evidence;
    assert_eq!(
        e.ship,
        ["relp://127.0.0.1:2514", "syslog+tcp://logs.example:514"]
    );
    assert_eq!(e.on_backlog, OnBacklog::Refuse);
    assert_eq!(e.ship_buffer, 50);
    let (policy, _) = findings("p.toml", "");
    let e = policy.unwrap().evidence;
    assert!(e.ship.is_empty());
    assert_eq!(
        (e.on_backlog, e.ship_buffer),
        (OnBacklog::Record, DEFAULT_SHIP_BUFFER)
    );

    let bad = |text: &str| -> Vec<&'static str> { codes(text).into_iter().map(|c| c.0).collect() };
    assert_eq!(
        bad("[evidence]\nship = [\"syslog+tls://logs:6514\"]\n"),
        ["ship_tls_ca_missing"]
    );
    let tls = errors("[evidence]\nship = [\"syslog+tls://logs:6514\"]\n");
    assert!(
        tls[0].message.contains("tls_ca") && tls[0].message.contains("clear text"),
        "{tls:?}"
    );
    // Positive control: with its CA (and a client certificate) it parses.
    let (policy, diags) = findings(
        "p.toml",
        "[evidence]\nship = [\"syslog+tls://logs:6514\"]\ntls_ca = \"/etc/ca.pem\"\ntls_cert = \"/etc/c.pem\"\ntls_key = \"/etc/c.key\"\n",
    );
    assert!(diags.is_empty(), "{diags:?}");
    let e = policy.unwrap().evidence;
    assert_eq!(e.ship, ["syslog+tls://logs:6514"]);
    assert_eq!(
        (
            e.tls_ca.as_deref(),
            e.tls_cert.as_deref(),
            e.tls_key.as_deref()
        ),
        (Some("/etc/ca.pem"), Some("/etc/c.pem"), Some("/etc/c.key"))
    );
    assert_eq!(
        bad("[evidence]\ntls_ca = \"/e/ca.pem\"\ntls_cert = \"/e/c.pem\"\n"),
        ["invalid_value"]
    );
    assert_eq!(
        bad("[evidence]\ntls_ca = \"/e/ca.pem\"\ntls_key = \"/e/c.key\"\n"),
        ["invalid_value"]
    );
    assert_eq!(bad("[evidence]\ntls_ca = \"ca.pem\"\n"), ["invalid_path"]);
    assert_eq!(
        bad("[evidence]\nship = [\"http://logs:80\"]\n"),
        ["invalid_value"]
    );
    assert_eq!(
        bad("[evidence]\nship = [\"relp://logs\"]\n"),
        ["invalid_value"]
    );
    assert_eq!(
        bad("[evidence]\non_backlog = \"drop\"\n"),
        ["invalid_value"]
    );
    assert_eq!(bad("[evidence]\nship_buffer = 0\n"), ["invalid_value"]);
    assert_eq!(bad("[evidence]\nshipp = []\n"), ["unknown_key"]);
}
