//! Benchmark of the host-policy deciders, for `cargo xtask bench`.
//!
//! Run with `cargo bench -p palisade-policy --bench host_policy`. Prints one
//! JSON object per line: `{"bench","ops","ns_per_op"}`. Figures depend on the
//! machine and its load; nothing here asserts a speed.

#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::disallowed_methods,
    clippy::print_stdout,
    reason = "a benchmark binary: it reads the clock and prints"
)]

use std::hint::black_box;
use std::time::Instant;

use palisade_policy::egress::{self, ConnectRequest};
use palisade_policy::outward::{OutwardRequest, OutwardTable};
use palisade_policy::route::RouteTable;
use palisade_schema::host_policy::{HostPattern, HostPolicy, parse_strict};
use palisade_taint::{Event, Rules, Session};

const EXAMPLE: &str = include_str!("../../examples/palisade.toml");

fn measure(name: &str, ops: u32, mut f: impl FnMut(u32)) {
    // Warm up, then time.
    for i in 0..ops / 10 {
        f(i);
    }
    let start = Instant::now();
    for i in 0..ops {
        f(i);
    }
    let ns = start.elapsed().as_nanos() as f64 / f64::from(ops);
    println!(
        "{}",
        serde_json::json!({"bench": name, "ops": ops, "ns_per_op": (ns * 10.0).round() / 10.0})
    );
}

fn big_policy(n: usize) -> HostPolicy {
    let (mut p, _) = parse_strict(EXAMPLE, "examples/palisade.toml").unwrap();
    for i in 0..n {
        p.egress
            .allow
            .push(HostPattern::parse(&format!("*.svc{i}.example.com:443")).unwrap());
        p.egress
            .deny
            .push(HostPattern::parse(&format!("bad{i}.example.net")).unwrap());
    }
    p
}

fn main() {
    measure("parse_example_policy", 2_000, |_| {
        black_box(parse_strict(black_box(EXAMPLE), "p.toml").is_ok());
    });
    let clean = Session::new();
    for n in [0usize, 100, 1000] {
        let p = big_policy(n);
        let rules = Rules::new(&p, &[]).unwrap();
        let mut tainted = Session::new();
        let _ = tainted.apply(&rules, 0, &Event::UntrustedInput { label: "x".into() });
        let hosts = [
            "api.github.com",
            "objects.githubusercontent.com",
            "evil.example.org",
        ];
        measure(&format!("egress_decide_clean_{n}_rules"), 200_000, |i| {
            let host = hosts[i as usize % hosts.len()];
            black_box(egress::decide(
                &p,
                &clean,
                &ConnectRequest { host, port: 443 },
            ));
        });
        measure(&format!("egress_decide_tainted_{n}_rules"), 200_000, |i| {
            let host = hosts[i as usize % hosts.len()];
            black_box(egress::decide(
                &p,
                &tainted,
                &ConnectRequest { host, port: 443 },
            ));
        });
    }
    let (p, _) = parse_strict(EXAMPLE, "p.toml").unwrap();
    let table = OutwardTable::new(&p).unwrap();
    measure("outward_decide", 200_000, |_| {
        black_box(table.decide(
            &clean,
            &OutwardRequest {
                kind: "git.push",
                target: "github.com/acme/app:refs/heads/agent/x",
            },
        ));
    });
    let routes = RouteTable::new(&p).unwrap();
    measure("route_decide", 200_000, |_| {
        black_box(routes.decide_route("private/notes/a.md", "anthropic"));
    });
    let rules = Rules::new(&p, &[]).unwrap();
    measure("taint_apply_read", 200_000, |i| {
        let mut s = Session::new();
        let path = if i % 2 == 0 {
            "inbox/m.eml"
        } else {
            "src/lib.rs"
        };
        let _ = black_box(s.apply(&rules, 0, &Event::Read { path: path.into() }));
    });
}
