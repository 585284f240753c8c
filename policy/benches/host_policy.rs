//! Benchmark of palisade-policy's decisions, for `cargo xtask bench`.
//!
//! Run with `cargo bench -p palisade-policy --bench host_policy`. Prints one
//! JSON line per figure in the harness's format,
//! `{"suite":"check","name":…,"runs":N,"min_ns":…,"median_ns":…,"max_ns":…}`:
//! the tool grant of every step of the generated 100 × 10 bundle (per whole
//! bundle), and the host-policy deciders (per call). Figures depend on the
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

use palisade_policy::capability::{CapabilityRegistry, OutputContext};
use palisade_policy::egress::{self, ConnectRequest};
use palisade_policy::grant::GrantConfig;
use palisade_policy::outward::{OutwardRequest, OutwardTable};
use palisade_policy::plan::{grant_for, static_agent};
use palisade_policy::route::RouteTable;
use palisade_schema::host_policy::{HostPattern, HostPolicy, parse};
use palisade_taint::{Event, Rules, Session};

const EXAMPLE: &str = include_str!("../../examples/palisade.toml");

/// Timed batches per figure; each batch gives one per-call time.
const BATCHES: u32 = 15;

/// Warms up, then times `ops` calls of `f` in [`BATCHES`] batches and prints
/// the per-call min, median and max over the batches.
fn measure(name: &str, ops: u32, mut f: impl FnMut(u32)) {
    for i in 0..ops / 10 {
        f(i);
    }
    let per = (ops / BATCHES).max(1);
    let mut ns: Vec<f64> = (0..BATCHES)
        .map(|b| {
            let start = Instant::now();
            for i in 0..per {
                f(b * per + i);
            }
            start.elapsed().as_nanos() as f64 / f64::from(per)
        })
        .collect();
    ns.sort_by(f64::total_cmp);
    let round = |x: f64| (x * 10.0).round() / 10.0;
    println!(
        "{}",
        serde_json::json!({
            "suite": "check",
            "name": name,
            "runs": BATCHES,
            "min_ns": round(ns[0]),
            "median_ns": round(ns[ns.len() / 2]),
            "max_ns": round(ns[ns.len() - 1]),
        })
    );
}

/// The tool grant (exact policy and provider translation) of every step of
/// the bundle the schema bench validates, as `palisade policy` computes it.
fn grant_every_step() {
    const WORKFLOWS: usize = 100;
    const STEPS: usize = 10;
    let config = palisade_schema::__bench::parsed_bundle(WORKFLOWS, STEPS);
    let registry = CapabilityRegistry::default();
    let grant_config = GrantConfig::default();
    let ctx = OutputContext::new("slack");
    let grant_all = || {
        let mut granted = 0usize;
        for t in &config.triggers {
            for step in &t.steps {
                let agent = static_agent(&config, step).unwrap();
                let g = grant_for(step, &agent.agent, Some(&ctx), &registry, &grant_config);
                granted += usize::from(black_box(g).is_ok());
            }
        }
        granted
    };
    // Sanity: every step gets a grant, so the figure measures the full work.
    assert_eq!(grant_all(), WORKFLOWS * STEPS);
    measure(
        &format!("grant_every_step_{WORKFLOWS}x{STEPS}"),
        300,
        |_| {
            black_box(grant_all());
        },
    );
}

fn big_policy(n: usize) -> HostPolicy {
    let (mut p, _) = parse("examples/palisade.toml", EXAMPLE)
        .unwrap()
        .into_parts();
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
    grant_every_step();
    measure("parse_example_policy", 2_000, |_| {
        black_box(parse("p.toml", black_box(EXAMPLE)).is_ok());
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
    let (p, _) = parse("p.toml", EXAMPLE).unwrap().into_parts();
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
