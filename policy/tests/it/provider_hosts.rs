//! `ProviderHosts` and the routing decisions the relays and the proxy
//! enforce: which provider an API host belongs to, and whether a session
//! that read restricted paths may still reach it.

use palisade_policy::route::{BUILTIN_PROVIDER_HOSTS, ProviderHosts, RouteTable};
use palisade_policy::verdict::{Decision, Reason};
use palisade_schema::host_policy::{self, HostPolicy, RequestHost};
use palisade_taint::{Event, Rules, Session};

fn policy(text: &str) -> HostPolicy {
    host_policy::parse("p.toml", text).unwrap().into_value()
}

fn host(h: &str) -> RequestHost {
    RequestHost::parse(h).unwrap()
}

fn read(policy: &HostPolicy, paths: &[&str]) -> Session {
    let rules = Rules::new(policy, &[]).unwrap();
    let mut s = Session::new();
    for (t, p) in paths.iter().enumerate() {
        let _ = s.apply(
            &rules,
            t as u64,
            &Event::Read {
                path: (*p).to_owned(),
            },
        );
    }
    s
}

#[test]
fn builtin_hosts_belong_to_their_provider_exactly() {
    let hosts = ProviderHosts::new(&HostPolicy::default());
    for (name, list) in BUILTIN_PROVIDER_HOSTS {
        for h in *list {
            let probe = h
                .strip_prefix("*.")
                .map_or_else(|| (*h).to_owned(), |b| format!("x.{b}"));
            assert_eq!(hosts.providers_of(&host(&probe)), [*name], "{probe}");
        }
        assert!(!hosts.hosts_of(name).is_empty(), "{name}");
    }
    assert_eq!(
        hosts.providers_of(&host("API.Anthropic.COM.")),
        ["anthropic"]
    );
    assert_eq!(hosts.providers_of(&host("api.openai.com")), ["openai"]);
    assert_eq!(hosts.providers_of(&host("x.openai.azure.com")), ["azure"]);
    // Not a provider's host: look-alikes, parents, children of exact names,
    // IP literals.
    for other in [
        "evil-api.anthropic.com",
        "api.anthropic.com.evil.example",
        "anthropic.com",
        "x.api.openai.com",
        "openai.azure.com",
        "example.com",
        "192.0.2.10",
    ] {
        assert_eq!(
            hosts.providers_of(&host(other)),
            Vec::<&str>::new(),
            "{other}"
        );
    }
    assert!(hosts.providers().any(|p| p == "google"));
}

#[test]
fn policy_hosts_add_to_the_builtin_list() {
    let p = policy(
        "[egress.provider_hosts]\nopenai = [\"llm-gw.corp.example\"]\nlocal = [\"*.llm.corp.example\"]\nmine = [\"api.anthropic.com\"]\n",
    );
    let hosts = ProviderHosts::new(&p);
    assert_eq!(hosts.providers_of(&host("llm-gw.corp.example")), ["openai"]);
    // The built-in openai host is still openai's: a policy only adds.
    assert_eq!(hosts.providers_of(&host("api.openai.com")), ["openai"]);
    assert_eq!(hosts.providers_of(&host("a.llm.corp.example")), ["local"]);
    assert_eq!(
        hosts.providers_of(&host("llm.corp.example")),
        Vec::<&str>::new()
    );
    // A host listed under two providers belongs to both, sorted.
    assert_eq!(
        hosts.providers_of(&host("api.anthropic.com")),
        ["anthropic", "mine"]
    );
    // Positive control: without the policy entries these are no provider's.
    let none = ProviderHosts::new(&HostPolicy::default());
    assert_eq!(
        none.providers_of(&host("llm-gw.corp.example")),
        Vec::<&str>::new()
    );
    assert_eq!(none.providers_of(&host("api.anthropic.com")), ["anthropic"]);
}

const ROUTED: &str =
    "[worker]\ncwd = \"/w\"\n[[routing]]\npaths = [\"private/**\"]\nproviders = [\"anthropic\"]\n";

#[test]
fn a_restricted_read_refuses_the_other_providers_hosts_and_keeps_the_allowed_one() {
    let p = policy(ROUTED);
    let routes = RouteTable::new(&p).unwrap();
    let hosts = ProviderHosts::new(&p);
    let clean = read(&p, &["pub/readme", "private/../pub/x"]);
    // Before a restricted read, routing says nothing about any host.
    for h in ["api.openai.com", "api.anthropic.com", "example.com"] {
        assert_eq!(routes.decide_host(&hosts, &clean, &host(h)), None, "{h}");
    }
    let s = read(&p, &["pub/readme", "private/x"]);
    let v = routes
        .decide_host(&hosts, &s, &host("api.openai.com"))
        .expect("openai's host is refused");
    assert_eq!(v.decision, Decision::Deny);
    assert_eq!(v.reason, Reason::RoutingDenied);
    assert_eq!(v.rule.as_deref(), Some("routing[0]"));
    assert_eq!(
        v.detail,
        "`api.openai.com` is an API host of `openai`: the session read `/w/private/x`, which routing[0] lets go only to `anthropic`; not to `openai`"
    );
    assert!(
        v.record_reason()
            .starts_with("routing_denied: `api.openai.com`")
    );
    for h in [
        "chatgpt.com",
        "api.mistral.ai",
        "generativelanguage.googleapis.com",
    ] {
        assert_eq!(
            routes.decide_host(&hosts, &s, &host(h)).map(|v| v.reason),
            Some(Reason::RoutingDenied),
            "{h}"
        );
    }
    // Positive controls: the allowed provider's host and a host of no
    // provider are left to the egress rules.
    assert_eq!(
        routes.decide_host(&hosts, &s, &host("api.anthropic.com")),
        None
    );
    assert_eq!(routes.decide_host(&hosts, &s, &host("crates.io")), None);
    // The relay side: the same decision by provider.
    assert_eq!(
        routes.decide_provider(&s, "openai").reason,
        Reason::RoutingDenied
    );
    assert!(routes.decide_provider(&s, "anthropic").is_allow());
    assert!(routes.decide_provider(&clean, "openai").is_allow());
    let r = routes.refusal(&s, "openai").unwrap();
    assert_eq!(
        (r.rule().as_str(), r.path.as_str()),
        ("routing[0]", "/w/private/x")
    );
    assert!(routes.refusal(&s, "anthropic").is_none());
    // decide_dispatch keeps its own code for `palisade decide route`.
    assert_eq!(
        routes.decide_dispatch(&s, "openai").reason,
        Reason::RouteDenied
    );
}

#[test]
fn a_host_of_two_providers_is_refused_when_either_is() {
    let p = policy(&format!(
        "{ROUTED}[egress.provider_hosts]\nanthropic = [\"gw.corp.example\"]\nopenai = [\"gw.corp.example\"]\n"
    ));
    let routes = RouteTable::new(&p).unwrap();
    let hosts = ProviderHosts::new(&p);
    let s = read(&p, &["private/x"]);
    let v = routes
        .decide_host(&hosts, &s, &host("gw.corp.example"))
        .unwrap();
    assert!(v.detail.contains("`openai`"), "{}", v.detail);
    // Positive control: bound to the allowed provider only, it stays open.
    let p = policy(&format!(
        "{ROUTED}[egress.provider_hosts]\nanthropic = [\"gw.corp.example\"]\n"
    ));
    let routes = RouteTable::new(&p).unwrap();
    let s = read(&p, &["private/x"]);
    assert_eq!(
        routes.decide_host(&ProviderHosts::new(&p), &s, &host("gw.corp.example")),
        None
    );
}

#[test]
fn a_path_the_worker_named_cannot_break_the_detail_line() {
    let p = policy(ROUTED);
    let routes = RouteTable::new(&p).unwrap();
    let s = read(&p, &["private/a\nb\u{1b}[2J"]);
    let v = routes.decide_provider(&s, "openai");
    assert_eq!(v.reason, Reason::RoutingDenied);
    assert!(!v.detail.chars().any(char::is_control), "{:?}", v.detail);
    assert!(v.detail.contains("private/a\\nb\\u{1b}[2J"), "{}", v.detail);
}

#[test]
fn the_bound_on_restricted_reads_changes_no_routing_decision() {
    let p = policy(
        "[worker]\ncwd = \"/w\"\n[[routing]]\npaths = [\"private/**\"]\nproviders = [\"anthropic\", \"openai\"]\n[[routing]]\npaths = [\"hr/**\"]\nproviders = [\"anthropic\"]\n",
    );
    let routes = RouteTable::new(&p).unwrap();
    let hosts = ProviderHosts::new(&p);
    let mut paths: Vec<String> = (0..palisade_taint::MAX_RESTRICTED_READS + 50)
        .map(|i| format!("private/f{i}"))
        .collect();
    let before = read(&p, &paths.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(before.more_restricted_reads() > 0);
    // Positive control: openai is still allowed for everything read so far.
    assert_eq!(
        routes.decide_host(&hosts, &before, &host("api.openai.com")),
        None
    );
    paths.push("hr/salaries".to_owned());
    let after = read(&p, &paths.iter().map(String::as_str).collect::<Vec<_>>());
    let v = routes
        .decide_host(&hosts, &after, &host("api.openai.com"))
        .unwrap();
    assert_eq!(v.rule.as_deref(), Some("routing[1]"));
    assert!(v.detail.contains("/w/hr/salaries"), "{}", v.detail);
    assert!(routes.decide_provider(&after, "anthropic").is_allow());
}
