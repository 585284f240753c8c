//! One way out: the proxy refuses a direct connection to the origin of an
//! outward relay (`relay_required`), whatever `egress.allow` says; the
//! same host stays reachable when its relay has no outward route.

use palisade_policy::egress::{self, ConnectRequest};
use palisade_policy::verdict::{Decision, Reason, Verdict};
use palisade_schema::host_policy::{HostPolicy, parse};
use palisade_taint::Session;

fn policy(text: &str) -> HostPolicy {
    let (p, d) = parse("palisade.toml", text).unwrap().into_parts();
    assert!(d.iter().all(|d| !d.is_error()), "{d:?}");
    p
}

fn decide(p: &HostPolicy, host: &str, port: u16) -> Verdict {
    egress::decide(p, &Session::new(), &ConnectRequest { host, port })
}

const ALLOW: &str = "[egress]\nallow = [\"github.com\", \"api.github.com\", \"example.com\"]\n";
const CRED: &str = "credential = { header = \"authorization\", from_env = \"GH\" }\n";

#[test]
fn a_git_relays_origin_is_refused_directly_naming_the_relay() {
    let p = policy(&format!(
        "{ALLOW}[[egress.relay]]\nname = \"github-git\"\nkind = \"git\"\norigin = \"https://github.com\"\n{CRED}"
    ));
    for host in ["github.com", "GitHub.COM.", "github.com."] {
        let v = decide(&p, host, 443);
        assert_eq!(
            (v.decision, v.reason, v.rule.as_deref()),
            (
                Decision::Deny,
                Reason::RelayRequired,
                Some("egress.relay[0]")
            ),
            "{host}"
        );
        assert_eq!(
            v.detail,
            "`github.com:443` is reached only through relay `github-git`, which asks before acting in the user's name"
        );
    }
    // The port is exact and other hosts are untouched (positive controls).
    assert_eq!(decide(&p, "github.com", 22).decision, Decision::Allow);
    assert_eq!(decide(&p, "example.com", 443).decision, Decision::Allow);
}

#[test]
fn a_preset_or_an_outward_route_makes_a_relay_outward() {
    for relay in [
        "preset = \"github\"\n".to_owned(),
        "routes = [{ route = \"POST /repos/{o}/{r}/issues\", outward = \"github.post.issue\", target = \"github.com/{o}/{r}\" }]\n".to_owned(),
    ] {
        let p = policy(&format!(
            "{ALLOW}[[egress.relay]]\nname = \"gh\"\norigin = \"https://api.github.com\"\n{relay}{CRED}"
        ));
        let v = decide(&p, "api.github.com", 443);
        assert_eq!((v.decision, v.reason), (Decision::Deny, Reason::RelayRequired), "{relay}");
        assert_eq!(v.reason.code(), "relay_required");
    }
    // Positive control: the same relay with plain routes only.
    let p = policy(&format!(
        "{ALLOW}[[egress.relay]]\nname = \"gh\"\norigin = \"https://api.github.com\"\nroutes = [\"GET /repos/{{o}}/{{r}}\"]\n{CRED}"
    ));
    let v = decide(&p, "api.github.com", 443);
    assert_eq!((v.decision, v.reason), (Decision::Allow, Reason::Allowed));
}

#[test]
fn an_ip_origin_is_refused_in_every_spelling() {
    let p = policy(
        "[egress]\nallow_addresses = [\"127.0.0.0/8\", \"::ffff:127.0.0.0/104\"]\n[[egress.relay]]\nname = \"g\"\nkind = \"git\"\norigin = \"https://127.0.0.1:8443\"\ncredential = { header = \"authorization\", from_env = \"GH\" }\n",
    );
    for host in ["127.0.0.1", "::ffff:127.0.0.1", "[::ffff:127.0.0.1]"] {
        assert_eq!(
            decide(&p, host, 8443).reason,
            Reason::RelayRequired,
            "{host}"
        );
    }
    // Positive control: another port of the same address.
    assert_eq!(decide(&p, "127.0.0.1", 8444).decision, Decision::Allow);
}
