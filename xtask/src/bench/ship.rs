//! The ship suite (issue 21): what shipping the journal to a collector
//! costs. A local rsyslogd of the harness's own (imrelp on loopback, the
//! configuration `docs/journal.md` gives operators) is the collector.
//!
//! - The journal's group commit, with and without a shipper tailing the
//!   same journal: `palisade-evidence`'s `ship` bench binary alternates, in
//!   one process, no shipping, shipping to an in-process RELP sink that
//!   only answers `200` (the floor: what the shipper itself costs), and
//!   shipping to rsyslog; and how fast a shipper catches up on a finished
//!   journal, per second and per CPU-second of its thread.
//! - `palisade proxy`'s new-connection rate with `--journal`, with and
//!   without `--ship relp://…`, the two proxies alternated round by round,
//!   sequentially and with concurrent clients. After the rounds the shipped
//!   proxy is stopped with SIGTERM and `palisade journal verify
//!   --from-syslog` must find its whole journal, closed, in the
//!   collector's file: a shipper that fell behind for good would make
//!   shipping look free.
//!
//! The reference of each pair is the same palisade without shipping (the
//! floor shipping adds to); the goal is a ratio of at least 0.90.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::proxy::{self, Origin, Target};
use super::stats::{self, Better, Cmp, GoalCheck, Row};
use super::{Ctx, SuiteResult, sys};

/// The least a shipped figure may keep of the unshipped one (issue 21).
const GOAL_RATIO: f64 = 0.90;

const NEEDS: &str = "apt-get install rsyslog rsyslog-relp";

/// The journal cases of the `ship` bench binary: (figure prefix, case).
const JOURNAL_CASES: &[(&str, &str)] = &[
    (
        "group_commit_batch16_256B",
        "journal group commit, batches of 16, 256 B bodies",
    ),
    (
        "group_commit_16_threads_256B",
        "journal group commit, 16 threads appending, 256 B bodies",
    ),
];

const SEQ_CASE: &str = "proxy new connections/s, one client (connect, CONNECT, 1-byte echo, close)";
const CONC_CASE: &str = "proxy new connections/s, 4 concurrent clients";
const CLIENTS: usize = 4;

const UNSHIPPED: &str = "palisade, no shipping";
const SHIPPED: &str = "palisade, shipping over relp:// to rsyslog";
const SINK: &str =
    "palisade, shipping to a RELP sink that only answers 200 (the collector's floor)";

pub(crate) fn run(ctx: &Ctx) -> Result<SuiteResult, String> {
    let mut res = SuiteResult::default();
    let Some(rsyslogd) = rsyslogd() else {
        res.unavailable(
            "shipping",
            format!("rsyslogd with imrelp is not installed ({NEEDS})"),
        );
        return Ok(res);
    };
    let dir = ctx.tmp.join("ship");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    journal_part(ctx, &rsyslogd, &dir.join("journal"), &mut res);
    if let Err(e) = proxy_part(ctx, &rsyslogd, &dir.join("proxy"), &mut res) {
        res.unavailable("palisade proxy --ship", e);
    }
    goals(&mut res);
    res.notes.push(format!(
        "Collector: rsyslogd {} started by the harness on 127.0.0.1 with imrelp, a `Direct` queue and omfile writing `%rawmsg%` (the configuration of docs/journal.md), one instance per part. \
         Journal: `palisade-evidence`'s `ship` bench binary, group commit with `Durability::Synced`; no shipping, shipping to an in-process RELP sink that only answers `200` (the floor of any collector) and shipping to rsyslog rotated each round in one process; a shipped run counts only if the shipper ends with every record and `journal_closed` acknowledged. \
         Proxy: two `palisade proxy --journal` instances, one with `--ship relp://…`, alternated each round; connections/s is connections over wall time, one client, then {CLIENTS} clients at once; the shipped proxy's journal is then checked with `palisade journal verify --from-syslog`. \
         Goal: shipped ≥ {GOAL_RATIO} × unshipped (median of the per-round ratios). Clients, proxy, shipper and rsyslogd share the same {} cores.",
        rsyslog_version(&rsyslogd),
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
    ));
    Ok(res)
}

fn rsyslogd() -> Option<PathBuf> {
    let bin = sys::which("rsyslogd").or_else(|| {
        ["/usr/sbin/rsyslogd", "/sbin/rsyslogd"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
    })?;
    let imrelp = [
        "/usr/lib/x86_64-linux-gnu/rsyslog",
        "/usr/lib/aarch64-linux-gnu/rsyslog",
        "/usr/lib/rsyslog",
    ]
    .iter()
    .any(|d| Path::new(d).join("imrelp.so").is_file());
    imrelp.then_some(bin)
}

fn rsyslog_version(bin: &Path) -> String {
    Command::new(bin)
        .arg("-v")
        .output()
        .ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.split_whitespace()
                .nth(1)
                .map(|v| v.trim_end_matches(',').to_owned())
        })
        .unwrap_or_else(|| "(version unknown)".to_owned())
}

/// One harness-owned rsyslogd, killed on drop.
struct Collector {
    _guard: sys::Guard,
    port: u16,
    out: PathBuf,
}

impl Collector {
    fn start(bin: &Path, dir: &Path) -> Result<Self, String> {
        let work = dir.join("work");
        std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
        let port = sys::free_port()?;
        let out = dir.join("collected.log");
        let conf = dir.join("rsyslog.conf");
        let text = format!(
            "global(workDirectory=\"{work}\" maxMessageSize=\"2m\")\n\
             module(load=\"imrelp\")\n\
             template(name=\"palisade_raw\" type=\"string\" string=\"%rawmsg%\\n\")\n\
             ruleset(name=\"palisade\" queue.type=\"Direct\") {{\n  \
               action(type=\"omfile\" file=\"{out}\" template=\"palisade_raw\" flushOnTXEnd=\"on\" asyncWriting=\"off\")\n\
             }}\n\
             input(type=\"imrelp\" address=\"127.0.0.1\" port=\"{port}\" ruleset=\"palisade\" maxDataSize=\"2m\")\n",
            work = work.display(),
            out = out.display(),
        );
        std::fs::write(&conf, text).map_err(|e| format!("{}: {e}", conf.display()))?;
        let log = dir.join("rsyslogd.log");
        let argv = [
            bin.display().to_string(),
            "-n".to_owned(),
            "-f".to_owned(),
            conf.display().to_string(),
            "-i".to_owned(),
            dir.join("rsyslogd.pid").display().to_string(),
        ];
        let mut guard = proxy::spawn_logged("rsyslogd", &argv, &log, 4096)?;
        sys::wait_listening(
            &mut guard,
            SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_secs(30),
            &log,
        )?;
        Ok(Self {
            _guard: guard,
            port,
            out,
        })
    }

    fn url(&self) -> String {
        format!("relp://127.0.0.1:{}", self.port)
    }
}

fn journal_part(ctx: &Ctx, rsyslogd: &Path, dir: &Path, res: &mut SuiteResult) {
    let Some(bench) = ctx.crates.find("palisade-evidence", "ship") else {
        res.unavailable(
            "palisade journal + shipping",
            "palisade-evidence has no `ship` bench binary in this build",
        );
        return;
    };
    let collector = match std::fs::create_dir_all(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))
        .and_then(|()| Collector::start(rsyslogd, dir))
    {
        Ok(c) => c,
        Err(e) => return res.unavailable("palisade journal + shipping", e),
    };
    let rounds = if ctx.opts.quick {
        1
    } else {
        ctx.opts.runs.clamp(4, 10)
    };
    let env = [
        ("PALISADE_BENCH_SHIP_URL", collector.url()),
        ("PALISADE_BENCH_SHIP_ROUNDS", rounds.to_string()),
    ];
    let figures = match ctx.crates.run_reporting(&bench, "ship", &env) {
        Ok((figures, unavailable)) => {
            for u in unavailable {
                res.unavailable(&u.name, u.reason);
            }
            figures
        }
        Err(e) => return res.unavailable("palisade journal + shipping", e),
    };
    let values = |name: &str| -> Vec<f64> {
        figures
            .iter()
            .filter(|f| f.name == name)
            .map(|f| f.value)
            .collect()
    };
    for &(prefix, case) in JOURNAL_CASES {
        pair(
            res,
            case,
            "records/s",
            &values(&format!("{prefix}_no_ship")),
            &[
                (SINK, values(&format!("{prefix}_sink"))),
                (SHIPPED, values(&format!("{prefix}_ship"))),
            ],
        );
    }
    for (figure, case, unit, better) in [
        (
            "drain_after_close_batch16_{}_ms",
            "shipper drain after close (batches of 16): last ack − journal_closed",
            "ms",
            Better::Lower,
        ),
        (
            "drain_after_close_16_threads_{}_ms",
            "shipper drain after close (16 threads): last ack − journal_closed",
            "ms",
            Better::Lower,
        ),
        (
            "shipper_catch_up_{}",
            "shipper catching up: a closed journal of 100,000 records shipped from its start",
            "records/s",
            Better::Higher,
        ),
        (
            "shipper_catch_up_{}_per_cpu_second",
            "shipper catching up, per CPU-second of the shipper's thread",
            "records/cpu-s",
            Better::Higher,
        ),
    ] {
        for (suffix, subject) in [("sink", SINK), ("ship", SHIPPED)] {
            let v = values(&figure.replace("{}", suffix));
            if let Some(mut row) = Row::new(case, subject, unit, better, &v) {
                row.palisade = true;
                res.rows.push(row);
            }
        }
    }
}

/// The rows of one case: the unshipped one as the reference, then each
/// shipped subject with its per-round ratios to it as extra figures.
fn pair(
    res: &mut SuiteResult,
    case: &str,
    unit: &str,
    unshipped: &[f64],
    shipped: &[(&str, Vec<f64>)],
) {
    let Some(mut base) = Row::new(case, UNSHIPPED, unit, Better::Higher, unshipped) else {
        return res.unavailable(case, "no figures without shipping");
    };
    base.palisade = false;
    res.rows.push(base);
    for (subject, values) in shipped {
        let Some(mut with) = Row::new(case, subject, unit, Better::Higher, values) else {
            res.unavailable(&format!("{subject}: {case}"), "no figures");
            continue;
        };
        with.palisade = true;
        let ratios: Vec<f64> = values
            .iter()
            .zip(unshipped)
            .filter(|(_, u)| **u > 0.0)
            .map(|(s, u)| s / u)
            .collect();
        if let Some(m) = stats::Summary::of(&ratios) {
            with.extra.push(("round_ratio_median".to_owned(), m.median));
            with.extra.push(("round_ratio_min".to_owned(), m.min));
        }
        res.rows.push(with);
    }
}

fn proxy_part(ctx: &Ctx, rsyslogd: &Path, dir: &Path, res: &mut SuiteResult) -> Result<(), String> {
    let palisade = ctx.palisade.clone()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let collector = Collector::start(rsyslogd, dir)?;
    let (host, origin_ip) = proxy::origin_host();
    let origin = Origin::start(origin_ip)?;
    let connect_to = format!("{host}:{}", origin.addr.port());
    let key = dir.join("journal.key");
    sys::journal_keygen(&palisade, &key)?;
    let mut targets = Vec::new();
    for (name, ship) in [(UNSHIPPED, false), (SHIPPED, true)] {
        let sub = dir.join(if ship { "shipped" } else { "unshipped" });
        std::fs::create_dir_all(&sub).map_err(|e| format!("{}: {e}", sub.display()))?;
        let mut extra = vec![
            "--journal".to_owned(),
            sub.join("proxy.journal").display().to_string(),
            "--key".to_owned(),
            key.display().to_string(),
        ];
        if ship {
            extra.extend(["--ship".to_owned(), collector.url()]);
        }
        targets.push(proxy::start_palisade(
            ctx,
            &sub,
            &connect_to,
            4096,
            name,
            &extra,
        )?);
    }
    for t in &targets {
        for _ in 0..ctx.opts.warmup.max(1) * 10 {
            proxy::echo_once(t, origin.addr)?;
        }
    }
    let (rounds, per_round) = if ctx.opts.quick {
        (2, 50)
    } else {
        (ctx.opts.runs.max(10), 1000)
    };
    let mut seq = [Vec::new(), Vec::new()];
    let mut conc = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for k in 0..2 {
            let i = (round + k) % 2;
            let (Some(t), Some(s), Some(c)) = (targets.get(i), seq.get_mut(i), conc.get_mut(i))
            else {
                continue;
            };
            s.push(rate(per_round, || {
                proxy::echo_once(t, origin.addr).map(drop)
            })?);
            c.push(concurrent(t, origin.addr, per_round)?);
        }
    }
    let [seq_base, seq_ship] = seq;
    let [conc_base, conc_ship] = conc;
    pair(
        res,
        SEQ_CASE,
        "connections/s",
        &seq_base,
        &[(SHIPPED, seq_ship)],
    );
    pair(
        res,
        CONC_CASE,
        "connections/s",
        &conc_base,
        &[(SHIPPED, conc_ship)],
    );
    let connections = rounds * per_round * 2 + ctx.opts.warmup.max(1) * 10;
    // Stop the shipped proxy as an operator would (SIGTERM: it closes its
    // journal and flushes the shipper), then rebuild it from rsyslog's file.
    let shipped = targets.pop().ok_or("no shipped proxy")?;
    let journal = dir.join("shipped").join("proxy.journal");
    stop(shipped)?;
    let verdict = sys::output_within(
        Command::new(&palisade)
            .args(["journal", "verify", "--key"])
            .arg(&key)
            .arg("--from-syslog")
            .arg(&collector.out),
        Duration::from_secs(120),
    )?;
    let local = std::fs::read_to_string(&journal)
        .map_err(|e| format!("{}: {e}", journal.display()))?
        .lines()
        .count();
    if verdict.status.code() != Some(0) {
        return Err(format!(
            "the shipped proxy's journal ({local} records) did not verify closed from rsyslog's file: {}",
            sys::first_line(&verdict.stdout)
        ));
    }
    res.notes.push(format!(
        "The shipped proxy journalled {local} records for {connections} connections; after SIGTERM, `palisade journal verify --from-syslog` on rsyslog's file said: {}",
        sys::first_line(&verdict.stdout)
    ));
    drop(targets);
    origin.stop();
    Ok(())
}

/// Calls `step` `n` times; steps per second.
fn rate(n: usize, mut step: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    let start = Instant::now();
    for _ in 0..n {
        step()?;
    }
    Ok(count(n) / start.elapsed().as_secs_f64())
}

/// `n` new connections through `t` from [`CLIENTS`] threads at once.
fn concurrent(t: &Target, origin: SocketAddr, n: usize) -> Result<f64, String> {
    let per = n.div_ceil(CLIENTS);
    let start = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|_| {
                s.spawn(move || {
                    for _ in 0..per {
                        proxy::echo_once(t, origin)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("client thread panicked".to_owned()))
            })
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    for r in results {
        r?;
    }
    Ok(count(per * CLIENTS) / secs)
}

/// SIGTERM, then wait for the clean exit (journal closed, final flush).
fn stop(mut t: Target) -> Result<(), String> {
    let mut guard = t.guard.take().ok_or("no process")?;
    let pid = guard.pid().to_string();
    let status = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .map_err(|e| format!("kill: {e}"))?;
    if !status.success() {
        return Err(format!("kill -TERM {pid} failed"));
    }
    match sys::wait_within(&mut guard.child, Duration::from_secs(60)) {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(format!("{} exited with {s} after SIGTERM", t.name)),
        None => Err(format!("{} did not exit within 60 s of SIGTERM", t.name)),
    }
}

fn goals(res: &mut SuiteResult) {
    let mut goals = Vec::new();
    // The goal is the issue's: shipping to a local rsyslog.
    for row in res
        .rows
        .iter()
        .filter(|r| r.palisade && r.subject == SHIPPED)
    {
        if let Some(&(_, ratio)) = row.extra.iter().find(|(k, _)| k == "round_ratio_median") {
            goals.push(GoalCheck {
                what: format!("shipped / unshipped, {}", row.case),
                value: ratio,
                unit: "×".to_owned(),
                cmp: Cmp::Ge,
                target: GOAL_RATIO,
            });
        }
    }
    res.goals.extend(goals);
}

#[allow(clippy::cast_precision_loss, reason = "small counts")]
fn count(n: usize) -> f64 {
    n as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_keeps_the_unshipped_row_as_the_reference_and_sets_the_goal() {
        let mut res = SuiteResult::default();
        pair(
            &mut res,
            "c",
            "records/s",
            &[100.0, 200.0],
            &[(SHIPPED, vec![95.0, 150.0])],
        );
        assert_eq!(res.rows.len(), 2);
        assert!(!res.rows[0].palisade && res.rows[1].palisade);
        goals(&mut res);
        // Per-round ratios 0.95 and 0.75: the median of two is their mean.
        let g = &res.goals[0];
        assert!((g.value - 0.85).abs() < 1e-9, "{}", g.value);
        assert!(!g.met());
        let mut ok = SuiteResult::default();
        pair(
            &mut ok,
            "c",
            "records/s",
            &[100.0, 200.0],
            &[(SHIPPED, vec![99.0, 190.0])],
        );
        goals(&mut ok);
        assert!(ok.goals[0].met());
    }

    #[test]
    fn a_case_without_figures_is_reported_not_measured() {
        let mut res = SuiteResult::default();
        pair(&mut res, "c", "records/s", &[], &[(SHIPPED, vec![1.0])]);
        assert!(res.rows.is_empty());
        assert_eq!(res.unavailable.len(), 1);
    }
}
