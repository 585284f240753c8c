//! Runs `tests/data/cases.txt` against `tests/data/policy.toml`.

use palisade_policy::egress::{self, ConnectRequest};
use palisade_policy::outward::{OutwardRequest, OutwardTable};
use palisade_policy::route::RouteTable;
use palisade_policy::verdict::Verdict;
use palisade_schema::host_policy::{HostPolicy, parse};
use palisade_taint::{Event, Rules, Session};

const POLICY: &str = include_str!("../data/policy.toml");
const CASES: &str = include_str!("../data/cases.txt");

fn policy() -> HostPolicy {
    let (p, warnings) = parse("tests/data/policy.toml", POLICY)
        .unwrap()
        .into_parts();
    assert!(warnings.iter().all(|w| !w.is_error()));
    p
}

struct Case<'a> {
    line: usize,
    text: &'a str,
    op: &'a str,
    args: Vec<&'a str>,
    tainted: bool,
    contacted: Vec<&'a str>,
    reads: Vec<&'a str>,
    decision: &'a str,
    rule: Option<&'a str>,
}

fn parse_cases() -> Vec<Case<'static>> {
    let mut out = Vec::new();
    for (i, raw) in CASES.lines().enumerate() {
        let text = raw.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let (lhs, rhs) = text.split_once("=>").expect("case without =>");
        let mut words = lhs.split_whitespace();
        let op = words.next().unwrap();
        let mut case = Case {
            line: i + 1,
            text,
            op,
            args: Vec::new(),
            tainted: false,
            contacted: Vec::new(),
            reads: Vec::new(),
            decision: "",
            rule: None,
        };
        for w in words {
            if w == "tainted" {
                case.tainted = true;
            } else if let Some(list) = w.strip_prefix("contacted=") {
                case.contacted = list.split(',').collect();
            } else if let Some(list) = w.strip_prefix("reads=") {
                case.reads = list.split(',').collect();
            } else {
                case.args.push(w);
            }
        }
        let mut rhs = rhs.split_whitespace();
        case.decision = rhs.next().unwrap();
        case.rule = rhs.next().filter(|r| *r != "-");
        out.push(case);
    }
    out
}

fn session(p: &HostPolicy, case: &Case<'_>) -> Session {
    let rules = Rules::new(p, &[]).unwrap();
    let mut s = Session::new();
    let mut t = 0;
    for c in &case.contacted {
        let (host, port) = c.rsplit_once(':').unwrap();
        t += 1;
        let _ = s.apply(
            &rules,
            t,
            &Event::Connect {
                host: host.into(),
                port: port.parse().unwrap(),
                relay: true,
            },
        );
    }
    for r in &case.reads {
        t += 1;
        let _ = s.apply(&rules, t, &Event::Read { path: (*r).into() });
    }
    if case.tainted {
        let _ = s.apply(
            &rules,
            t + 1,
            &Event::UntrustedInput {
                label: "case".into(),
            },
        );
    }
    assert_eq!(s.is_tainted(), case.tainted, "line {}", case.line);
    s
}

fn run(p: &HostPolicy, case: &Case<'_>) -> Verdict {
    let s = session(p, case);
    match case.op {
        "egress" => egress::decide(
            p,
            &s,
            &ConnectRequest {
                host: case.args[0],
                port: case.args[1].parse().unwrap(),
            },
        ),
        "outward" => OutwardTable::new(p).unwrap().decide(
            &s,
            &OutwardRequest {
                kind: case.args[0],
                target: case.args[1],
            },
        ),
        "route" => RouteTable::new(p)
            .unwrap()
            .decide_route(case.args[0], case.args[1]),
        "dispatch" => RouteTable::new(p)
            .unwrap()
            .decide_dispatch(&s, case.args[0]),
        other => panic!("line {}: unknown operation {other}", case.line),
    }
}

#[test]
fn data_driven_decisions() {
    let p = policy();
    let cases = parse_cases();
    assert!(cases.len() >= 80, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let v = run(&p, case);
        let got_rule = v.rule.as_deref();
        if v.decision.as_str() != case.decision || got_rule != case.rule {
            failures.push(format!(
                "line {}: `{}`\n    got {} {} ({})",
                case.line,
                case.text,
                v.decision,
                got_rule.unwrap_or("-"),
                v.detail
            ));
        }
        assert!(!v.detail.is_empty());
    }
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_operation_has_allow_and_refusal_cases() {
    // Positive controls exist for every refusal class in the data file.
    let cases = parse_cases();
    for op in ["egress", "outward", "route", "dispatch"] {
        let decisions: Vec<&str> = cases
            .iter()
            .filter(|c| c.op == op)
            .map(|c| c.decision)
            .collect();
        assert!(decisions.contains(&"allow"), "{op} has no allow case");
        assert!(decisions.contains(&"deny"), "{op} has no deny case");
    }
}

#[test]
fn a_taint_denial_says_what_tainted_the_session_and_since_when() {
    let text = "[egress]\nallow = [\"*.wild.test\"]\nallow_addresses = [\"127.0.0.0/8\"]\n[taint]\nsources = [\"proxy_non_relay\"]\n";
    let (p, _) = parse("palisade.toml", text).unwrap().into_parts();
    let rules = Rules::new(&p, &[]).unwrap();
    let mut s = Session::new();
    let req = |host| ConnectRequest { host, port: 443 };
    // Positive control: clean, every allowed name and carved-out address is open.
    for host in ["a.wild.test", "b.wild.test", "127.0.0.2"] {
        let v = egress::decide(&p, &s, &req(host));
        assert_eq!(
            v.decision,
            palisade_policy::verdict::Decision::Allow,
            "{host}"
        );
    }
    // 08:46:26.500 UTC on some day.
    let at = 1_796_000_000_000 - 1_796_000_000_000 % 86_400_000 + 31_586_500;
    let _ = s.apply(
        &rules,
        at,
        &Event::Connect {
            host: "a.wild.test".into(),
            port: 443,
            relay: false,
        },
    );
    let why = "tainted by proxy_non_relay (a.wild.test:443) at 08:46:26 UTC; only taint.egress_allow and contacted hosts are open";
    for host in ["b.wild.test", "127.0.0.2"] {
        let v = egress::decide(&p, &s, &req(host));
        assert_eq!(
            v.decision,
            palisade_policy::verdict::Decision::Deny,
            "{host}"
        );
        assert!(v.detail.ends_with(why), "{host}: {}", v.detail);
    }
    // Control characters in a detail never reach the reason.
    let mut s = Session::new();
    let _ = s.apply(
        &rules,
        at,
        &Event::UntrustedInput {
            label: "x\r\nInjected: 1".into(),
        },
    );
    let v = egress::decide(&p, &s, &req("b.wild.test"));
    assert!(
        v.detail
            .contains("tainted by input (x\\r\\nInjected: 1) at 08:46:26 UTC"),
        "{}",
        v.detail
    );
}

#[test]
fn unspecified_addresses_are_never_a_destination() {
    let text = "[egress]\nallow_addresses = [\"0.0.0.0/0\", \"::/0\", \"127.0.0.0/8\"]\n";
    let (p, _) = parse("palisade.toml", text).unwrap().into_parts();
    let s = Session::new();
    for host in [
        "0.0.0.0",
        "0.1.2.3",
        "::",
        "::ffff:0.0.0.0",
        "::ffff:0.9.9.9",
    ] {
        let v = egress::decide(&p, &s, &ConnectRequest { host, port: 80 });
        assert_eq!(
            v.decision,
            palisade_policy::verdict::Decision::Deny,
            "{host}"
        );
        assert!(v.detail.contains("unspecified"), "{host}: {}", v.detail);
    }
    // Positive control: the carve-outs still let other addresses through.
    for host in ["127.0.0.1", "1.0.0.0", "::1"] {
        let v = egress::decide(&p, &s, &ConnectRequest { host, port: 80 });
        assert_eq!(
            v.decision,
            palisade_policy::verdict::Decision::Allow,
            "{host}"
        );
    }
}
