//! The policy-to-config glue: every key of `[egress]` and of an
//! `[[egress.relay]]` reaches `ProxyConfig::from_egress` and
//! `RelayConfig::from_policy` (the only mapping the CLI uses), checked by
//! exhaustive destructuring so that a new key cannot be parsed and left
//! unapplied.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::net::IpAddr;
use std::time::Duration;

use palisade_egress::proxy::{Limits, ProxyConfig};
use palisade_egress::relay::{RelayConfig, RelayConfigError, Secret};
use palisade_schema::host_policy::{
    Egress, EgressLimits, GITHUB_REST_PRESET, HostPolicy, OutwardKind, Relay, RelayCredential,
    RelayKind, RelayLimits, RelayPreset, RelayRoute, RouteOutward, parse,
};

fn policy(text: &str) -> HostPolicy {
    parse("palisade.toml", text)
        .map_err(|d| d.iter().map(ToString::to_string).collect::<Vec<_>>())
        .unwrap()
        .into_value()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

const FULL: &str = r#"
[egress]
allow = ["api.example.com:443"]
deny = ["bad.example.com"]
allow_addresses = ["10.9.0.0/16"]
require_sni_match = false
limits = { bytes_per_connection = "1KiB", bytes_per_session = "2KiB", connections = 3, per_minute = 4 }

[[egress.relay]]
name = "anthropic"
origin = "https://api.anthropic.example:8443"
routes = ["POST /v1/messages", "GET /v1/models"]
credential = { header = "x-api-key", from_env = "HOST_KEY", prefix = "Key " }
worker_env = { ANTHROPIC_API_KEY = "placeholder" }
limits = { max_body = "1MiB", max_buffered = "3MiB", connections = 5, header_timeout = "6s", body_idle_timeout = "7s", body_timeout = "8s" }
"#;

#[test]
fn every_egress_key_reaches_the_proxy_config() {
    let p = policy(FULL);
    // A key added to `[egress]` fails to compile here until it is mapped.
    let Egress {
        allow,
        deny,
        allow_addresses,
        limits,
        relays,
        require_sni_match,
        // Not the proxy's config: the governed session's decider reads it
        // (`palisade_policy::route::ProviderHosts`).
        provider_hosts: _,
    } = &p.egress;
    let EgressLimits {
        bytes_per_connection,
        bytes_per_session,
        connections,
        per_minute,
    } = limits;
    let own = vec![ip("8.8.4.4")];
    let c = ProxyConfig::from_egress_with_own(&p.egress, own.clone());
    assert_eq!(*bytes_per_connection, Some(1024));
    assert_eq!(c.limits.bytes_per_connection, Some(1024));
    assert_eq!(*bytes_per_session, Some(2048));
    assert_eq!(c.limits.bytes_per_session, Some(2048));
    assert_eq!(*connections, Some(3));
    assert_eq!(c.limits.max_connections, 3);
    assert_eq!(*per_minute, Some(4));
    assert_eq!(c.limits.per_minute, Some(4));
    assert!(!require_sni_match);
    assert!(!c.require_sni_match);
    // the carve-out lets its range through, and only it
    assert_eq!(c.addresses.allow_ranges(), allow_addresses.as_slice());
    assert!(c.addresses.check(ip("10.9.1.1")).is_ok());
    assert!(c.addresses.check(ip("10.8.1.1")).is_err());
    // the host's own addresses are denied; a public address is the control
    assert_eq!(c.addresses.own_addresses(), own.as_slice());
    assert!(c.addresses.check(ip("8.8.4.4")).is_err());
    assert!(c.addresses.check(ip("8.8.8.8")).is_ok());
    // no token unless the caller sets one
    assert!(c.token.is_none());
    // `allow` and `deny` are the decider's, `relay` is RelayConfig's
    // (checked below): they are not the proxy config's to hold.
    assert_eq!((allow.len(), deny.len(), relays.len()), (1, 1, 1));
}

#[test]
fn absent_egress_limits_are_unlimited_as_documented() {
    let p = policy("[egress]\nallow = [\"api.example.com\"]\n");
    let c = ProxyConfig::from_egress_with_own(&p.egress, Vec::new());
    // docs/policy.md: `connections` and `per_minute` default to unlimited
    assert_eq!(c.limits.max_connections, usize::MAX);
    assert_eq!(c.limits.per_minute, None);
    assert_eq!(c.limits.bytes_per_connection, None);
    assert_eq!(c.limits.bytes_per_session, None);
    assert!(c.require_sni_match, "the default is on");
    // the rest are the library's defaults
    let d = Limits::default();
    assert_eq!(
        (
            c.limits.idle_timeout,
            c.limits.header_timeout,
            c.limits.dns_timeout
        ),
        (d.idle_timeout, d.header_timeout, d.dns_timeout)
    );
    assert_eq!(c.sni_ports, [443]);
}

#[test]
fn from_egress_lists_this_hosts_own_addresses() {
    let p = policy("[egress]\n");
    let c = ProxyConfig::from_egress(&p.egress).unwrap();
    let own = palisade_egress::net::interface_addresses().unwrap();
    assert!(!own.is_empty(), "loopback at least");
    assert_eq!(c.addresses.own_addresses(), own.as_slice());
}

#[test]
fn every_relay_key_reaches_the_relay_config() {
    let p = policy(FULL);
    let relay = &p.egress.relays[0];
    // A key added to `[[egress.relay]]` fails to compile here until it is mapped.
    let Relay {
        name,
        provider,
        origin,
        routes,
        credential,
        worker_env,
        limits,
        // CONTRACT (issue 18): the git relay maps these and asserts them here.
        kind: _,
        repos: _,
        // mapped, and asserted in `outward_routes_presets_and_basic_credentials_reach_the_config`
        preset,
    } = relay;
    let RelayCredential {
        header,
        from_env,
        prefix,
        username,
        // CONTRACT (issue 19): the OAuth kinds are asserted by the credentials work.
        kind: _,
        from_file: _,
        token_url: _,
    } = credential;
    let RelayLimits {
        max_body,
        max_buffered,
        connections,
        header_timeout,
        body_idle_timeout,
        body_timeout,
    } = limits;
    let marker: String = "terces-yler-ym".chars().rev().collect();
    // one secret type: the relay's is evidence's (zeroized, redacted, no Serialize)
    let secret: palisade_evidence::Secret = Secret::new(marker.clone());
    assert!(!format!("{secret:?}").contains(&marker));
    let c = RelayConfig::from_policy(relay, secret).unwrap();
    assert_eq!(c.name, *name);
    assert_eq!(c.provider, *provider);
    assert_eq!(c.origin(), origin);
    assert_eq!(c.authority(), "api.anthropic.example:8443");
    let shown: Vec<String> = c.routes.iter().map(ToString::to_string).collect();
    let want: Vec<String> = routes.iter().map(ToString::to_string).collect();
    assert_eq!(shown, want);
    assert_eq!(shown, ["POST /v1/messages", "GET /v1/models"]);
    assert_eq!(c.credential.header().as_str(), header);
    assert_eq!(c.credential.prefix(), prefix);
    assert_eq!(prefix, "Key ");
    assert_eq!((c.preset, *preset), (None, None));
    assert_eq!((c.credential.username(), username.as_deref()), (None, None));
    assert!(c.routes.iter().all(|r| r.outward_kind().is_none()));
    // `from_env` names where the caller read the secret; `worker_env` is the
    // sandbox's: the placeholder it gets is the config's.
    assert_eq!(from_env, "HOST_KEY");
    assert_eq!(
        worker_env.get("ANTHROPIC_API_KEY").map(String::as_str),
        Some("placeholder")
    );
    assert!(c.placeholder().expose().starts_with("sk-ant-api03-"));
    assert_eq!(c.max_body, 1 << 20);
    assert_eq!(*max_body, Some(1 << 20));
    assert_eq!(c.max_buffered, 3 << 20);
    assert_eq!(*max_buffered, Some(3 << 20));
    assert_eq!(c.max_connections, 5);
    assert_eq!(*connections, Some(5));
    assert_eq!(c.header_timeout, Duration::from_secs(6));
    assert_eq!(*header_timeout, Some(6));
    assert_eq!(c.body_idle_timeout, Duration::from_secs(7));
    assert_eq!(*body_idle_timeout, Some(7));
    assert_eq!(c.body_timeout, Duration::from_secs(8));
    assert_eq!(*body_timeout, Some(8));
    // the credential never shows
    let debug = format!("{c:?}");
    assert!(!debug.contains(&marker), "{debug}");
    assert!(!debug.contains(c.placeholder().expose()), "{debug}");
}

#[test]
fn a_relay_to_a_plain_http_origin_is_refused() {
    let text = "[[egress.relay]]\nname = \"local\"\norigin = \"http://127.0.0.1:9\"\n\
                routes = [\"POST /v1\"]\ncredential = { header = \"authorization\", from_env = \"K\" }\n";
    let p = policy(text);
    let secret = || Secret::new("k".to_owned());
    let e = RelayConfig::from_policy(&p.egress.relays[0], secret()).unwrap_err();
    assert!(e.to_string().contains("must use https://"), "{e}");
    // positive control: the same relay over https is taken
    let p = policy(&text.replace("http://", "https://"));
    let c = RelayConfig::from_policy(&p.egress.relays[0], secret()).unwrap();
    assert_eq!(c.authority(), "127.0.0.1:9");
    assert!(c.placeholder().expose().starts_with("palisade-"));
}

const GITHUB: &str = "[[egress.relay]]\nname = \"github\"\norigin = \"https://api.github.example\"\n\
                      routes = [\"GET /repos/{owner}/{repo}\"]\n\
                      credential = { header = \"authorization\", from_env = \"GH\" }\n";

/// `route` with the outward class `kind` on `target`.
fn outward_route(route: &str, kind: &str, target: &str) -> RelayRoute {
    let mut r = RelayRoute::parse(route).unwrap();
    r.outward = Some(RouteOutward {
        kind: OutwardKind::parse(kind).unwrap(),
        target: target.to_owned(),
    });
    r
}

#[test]
fn outward_routes_presets_and_basic_credentials_reach_the_config() {
    // set on the parsed relay, as the schema reads them
    let mut relay = policy(GITHUB).egress.relays[0].clone();
    let secret = || Secret::new("k".to_owned());
    let plain = RelayConfig::from_policy(&relay, secret()).unwrap();
    assert_eq!(plain.routes.len(), 1);
    assert_eq!(plain.routes[0].outward_kind(), None);
    assert_eq!(plain.routes[0].path(), "/repos/{owner}/{repo}");

    relay.routes.push(outward_route(
        "POST /repos/{owner}/{repo}/issues/{number}/comments",
        "github.post.comment",
        "github.com/{owner}/{repo}/issues/{number}",
    ));
    relay.credential.username = Some("x-access-token".to_owned());
    let c = RelayConfig::from_policy(&relay, secret()).unwrap();
    let r = &c.routes[1];
    assert_eq!(
        (r.method(), r.path(), r.outward_kind(), r.target()),
        (
            "POST",
            "/repos/{owner}/{repo}/issues/{number}/comments",
            Some("github.post.comment"),
            Some("github.com/{owner}/{repo}/issues/{number}")
        )
    );
    assert_eq!(c.credential.username(), Some("x-access-token"));
    assert_eq!(c.credential.header().as_str(), "authorization");
    assert_eq!(c.credential.prefix(), "");

    // Basic goes in `authorization` with no prefix
    let mut bad = relay.clone();
    bad.credential.prefix = "Bearer ".to_owned();
    let e = RelayConfig::from_policy(&bad, secret()).unwrap_err();
    assert!(matches!(e, RelayConfigError::Credential(_)), "{e}");
    let mut bad = relay.clone();
    bad.credential.header = "x-api-key".to_owned();
    assert!(RelayConfig::from_policy(&bad, secret()).is_err());
    let mut bad = relay.clone();
    bad.credential.username = Some("a:b".to_owned());
    assert!(RelayConfig::from_policy(&bad, secret()).is_err());

    // a target naming a placeholder the route does not have is refused
    let mut bad = relay.clone();
    bad.routes.push(outward_route(
        "POST /repos/{owner}/{repo}/pulls",
        "github.post.pull_request",
        "github.com/{owner}/{repo}/pull/{number}",
    ));
    let e = RelayConfig::from_policy(&bad, secret()).unwrap_err();
    assert!(matches!(e, RelayConfigError::Outward(_)), "{e}");
    assert!(e.to_string().contains("/repos/{owner}/{repo}/pulls"), "{e}");

    // a preset is applied only with all of its routes (the schema adds
    // them); one missing is refused, never a preset parsed and not applied
    let mut preset = relay.clone();
    preset.preset = Some(RelayPreset::GitHub);
    let e = RelayConfig::from_policy(&preset, secret()).unwrap_err();
    assert_eq!(e, RelayConfigError::Unsupported("github".to_owned()));
    for (m, p, k, t) in GITHUB_REST_PRESET {
        if !preset.routes.iter().any(|r| r.method == *m && r.path == *p) {
            preset.routes.push(outward_route(&format!("{m} {p}"), k, t));
        }
    }
    let c = RelayConfig::from_policy(&preset, secret()).unwrap();
    assert_eq!(c.preset, Some(RelayPreset::GitHub));
    assert!(c.routes.len() >= GITHUB_REST_PRESET.len());
    let mut bad = preset.clone();
    bad.routes
        .retain(|r| r.path != "/repos/{owner}/{repo}/releases");
    assert!(RelayConfig::from_policy(&bad, secret()).is_err());

    // the git relay's settings stay refused here until it applies them
    let mut git = relay.clone();
    git.kind = RelayKind::Git;
    let e = RelayConfig::from_policy(&git, secret()).unwrap_err();
    assert_eq!(e, RelayConfigError::Unsupported("github".to_owned()));
}

#[test]
fn a_parsed_github_relay_reaches_the_config_with_its_preset_and_basic_credential() {
    let text = r#"
[[egress.relay]]
name = "github-api"
origin = "https://api.github.com"
preset = "github"
routes = ["GET /repos/{owner}/{repo}", { route = "POST /repos/{owner}/{repo}/dispatches", outward = "github.post.workflow_dispatch", target = "github.com/{owner}/{repo}" }]
credential = { header = "authorization", from_env = "GH_TOKEN", username = "x-access-token" }
"#;
    let p = policy(text);
    let c = RelayConfig::from_policy(&p.egress.relays[0], Secret::new("k".to_owned())).unwrap();
    assert_eq!(c.preset, Some(RelayPreset::GitHub));
    assert_eq!(c.credential.username(), Some("x-access-token"));
    for (m, path, k, t) in GITHUB_REST_PRESET {
        assert!(
            c.routes.iter().any(|r| r.method() == *m
                && r.path() == *path
                && r.outward_kind() == Some(*k)
                && r.target() == Some(*t)),
            "{m} {path}"
        );
    }
    let dispatch = c
        .routes
        .iter()
        .find(|r| r.path() == "/repos/{owner}/{repo}/dispatches")
        .unwrap();
    assert_eq!(
        (dispatch.outward_kind(), dispatch.target()),
        (
            Some("github.post.workflow_dispatch"),
            Some("github.com/{owner}/{repo}")
        )
    );
    let read = c.routes.iter().find(|r| r.method() == "GET").unwrap();
    assert_eq!(read.outward_kind(), None, "a string route stays plain");
}
