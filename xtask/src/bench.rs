//! `cargo xtask bench [--quick] [--runs N] [SUITE…]`: palisade measured side
//! by side with the tools users would pick instead, in one run on one
//! machine, with the results written as JSON and rendered into
//! `docs/benchmarks.md` and SVG charts.
//!
//! Every suite alternates palisade and its peers (A B A B …, with the order
//! rotated each round) after a warm-up, and reports min, median and max per
//! subject and the ratio palisade/peer per pair. The harness installs
//! nothing: it says which peers are missing and which palisade pieces are
//! not built yet, and measures what it can. `--quick` is a smoke test for
//! CI: few runs, small sizes, a debug build, no timing assertions, and it
//! writes under `target/bench/` only (never `docs/`).

mod agents;
mod check;
mod crates;
mod git;
mod journal;
mod observer;
mod proxy;
mod report;
mod ship;
mod spawn;
mod staging;
mod stats;
mod svg;
mod sys;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use self::crates::CrateBenches;
use self::stats::{GoalCheck, Row};

/// The suites, in the order they run and appear on the page.
pub(crate) const SUITES: &[&str] = &[
    "spawn", "proxy", "journal", "ship", "check", "staging", "observer", "git", "agents",
];

/// The suites that do not use the `palisade` binary (so a run of only
/// these does not build it; the agents suite builds it through `cargo
/// test`).
const NO_CLI: &[&str] = &["staging", "git", "agents"];

/// The peers the harness looks for, and what each is for.
pub(crate) const PEERS: &[(&str, &str, &str)] = &[
    ("bwrap", "spawn", "apt-get install bubblewrap"),
    ("firejail", "spawn", "apt-get install firejail"),
    (
        "srt",
        "spawn",
        "npm install -g @anthropic-ai/sandbox-runtime (needs bubblewrap, socat, ripgrep)",
    ),
    ("socat", "spawn (srt)", "apt-get install socat"),
    ("codex", "spawn", "npm install -g @openai/codex@0.171.0"),
    ("rg", "spawn (srt), observer", "apt-get install ripgrep"),
    ("tinyproxy", "proxy", "apt-get install tinyproxy"),
    ("squid", "proxy", "apt-get install squid"),
    (
        "hyperfine",
        "spawn (cross-check)",
        "apt-get install hyperfine",
    ),
];

/// Command-line options.
#[derive(Clone, Debug)]
pub(crate) struct Opts {
    pub(crate) quick: bool,
    /// Measured runs per subject (after the warm-up).
    pub(crate) runs: usize,
    pub(crate) warmup: usize,
    /// Build palisade in release mode (default unless `--quick`).
    pub(crate) release: bool,
}

/// What every suite gets: options, paths, the palisade binary and peers.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) opts: Opts,
    /// Scratch space under `target/bench/tmp`, removed at the end.
    pub(crate) tmp: PathBuf,
    /// The `palisade` binary, or why there is none.
    pub(crate) palisade: Result<PathBuf, String>,
    pub(crate) crates: CrateBenches,
}

impl Ctx {
    /// The full path of a peer, or `None` when it is not installed.
    pub(crate) fn peer(name: &str) -> Option<PathBuf> {
        sys::which(name)
    }

    /// The palisade binary if it has `subcommand`, else why not.
    pub(crate) fn palisade_with(&self, subcommand: &str, branch: &str) -> Result<PathBuf, String> {
        let bin = self.palisade.clone()?;
        let out = sys::output_within(
            Command::new(&bin).args([subcommand, "--help"]),
            Duration::from_secs(10),
        )?;
        if out.status.success() {
            Ok(bin)
        } else {
            Err(format!(
                "palisade side not available yet: `palisade {subcommand}` is not in this build \
                 (merge branch `{branch}`): {}",
                sys::first_line(&out.stderr)
            ))
        }
    }
}

/// What one suite measured.
#[derive(Debug, Default)]
pub(crate) struct SuiteResult {
    pub(crate) rows: Vec<Row>,
    pub(crate) goals: Vec<GoalCheck>,
    /// Facts a reader needs: sizes, flags, caveats.
    pub(crate) notes: Vec<String>,
    /// Subjects that could not be measured, with the reason.
    pub(crate) unavailable: Vec<(String, String)>,
}

impl SuiteResult {
    pub(crate) fn unavailable(&mut self, subject: &str, reason: impl Into<String>) {
        let reason = reason.into();
        eprintln!("bench: {subject}: not measured: {reason}");
        self.unavailable.push((subject.to_owned(), reason));
    }

    fn to_json(&self, name: &str, opts: &Opts, tmp: &Path) -> Value {
        // The scratch directory changes every run; keep it out of the page.
        let tmp = tmp.display().to_string();
        let scrub = |t: &str| t.replace(&tmp, "<tmp>");
        json!({
            "suite": name,
            "measured_at": sys::utc_now(),
            "quick": opts.quick,
            "release": opts.release,
            "machine": sys::machine(),
            "rows": self.rows.iter().map(Row::to_json).collect::<Vec<_>>(),
            "ratios": report::ratios(&self.rows),
            "goals": self.goals.iter().map(GoalCheck::to_json).collect::<Vec<_>>(),
            "notes": self.notes.iter().map(|n| scrub(n)).collect::<Vec<_>>(),
            "unavailable": self
                .unavailable
                .iter()
                .map(|(s, r)| json!({"subject": s, "reason": scrub(r)}))
                .collect::<Vec<_>>(),
        })
    }
}

const USAGE: &str = "usage: cargo xtask bench [--quick] [--runs N] [--debug] [SUITE…] \
                     | bench --render (suites: spawn proxy journal ship check staging observer git agents)";

/// Entry point of `cargo xtask bench`.
pub(crate) fn bench(args: &[String]) -> Result<(), String> {
    let mut quick = false;
    let mut render_only = false;
    let mut runs = None;
    let mut debug = false;
    let mut suites: Vec<&'static str> = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--debug" => debug = true,
            "--render" => render_only = true,
            "--runs" => {
                let v = it.next().ok_or("--runs needs a number")?;
                let n: usize = v
                    .parse()
                    .map_err(|_| format!("--runs: not a number: {v}"))?;
                if n == 0 {
                    return Err("--runs must be at least 1".to_owned());
                }
                runs = Some(n);
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            s => match SUITES.iter().find(|x| **x == s) {
                Some(name) if !suites.contains(name) => suites.push(name),
                Some(_) => {}
                None => return Err(format!("unknown suite or option {s:?}\n{USAGE}")),
            },
        }
    }
    // A suite named on the command line must measure: the agents suite
    // then fails instead of reporting its agents as not measured.
    let named_agents = suites.contains(&"agents");
    if suites.is_empty() {
        suites = SUITES.to_vec();
    }
    let opts = Opts {
        quick,
        runs: runs.unwrap_or(if quick { 3 } else { 20 }),
        warmup: if quick { 1 } else { 3 },
        release: !quick && !debug,
    };
    let root = crate::workspace_root();
    let bench_dir = root.join("target").join("bench");
    if render_only {
        // Re-render the page and charts from the last results, running nothing.
        let file = bench_dir.join("results.json");
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let results: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        report::write_page(&results, &root.join("docs"))?;
        println!("bench: page re-rendered from {}", file.display());
        return Ok(());
    }
    let tmp = bench_dir
        .join("tmp")
        .join(format!("run-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;

    report_peers();
    // The staging and git suites run the library through their bench targets alone.
    let palisade = if suites.iter().all(|s| NO_CLI.contains(s)) {
        Err(format!(
            "not built: the suites run ({}) do not use the palisade binary",
            suites.join(", ")
        ))
    } else {
        Ok(build_palisade(&root, &opts)?)
    };
    let crates = CrateBenches::build(&root, &opts, &suites)?;
    let ctx = Ctx {
        opts: opts.clone(),

        tmp: tmp.clone(),
        palisade,
        crates,
    };

    let mut failures = Vec::new();
    let mut results = Vec::new();
    for suite in &suites {
        eprintln!("bench: suite {suite}");
        let res = match *suite {
            "spawn" => spawn::run(&ctx),
            "proxy" => proxy::run(&ctx),
            "journal" => journal::run(&ctx),
            "ship" => ship::run(&ctx),
            "staging" => staging::run(&ctx),
            "observer" => observer::run(&ctx),
            "git" => git::run(&ctx),
            "agents" => agents::run(&ctx, named_agents),
            _ => check::run(&ctx),
        };
        match res {
            Ok(r) => {
                print_suite(suite, &r);
                results.push((*suite, r.to_json(suite, &opts, &tmp)));
            }
            Err(e) => {
                eprintln!("bench: suite {suite} failed: {e}");
                failures.push(format!("{suite}: {e}"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);

    let file = bench_dir.join(if quick {
        "results-quick.json"
    } else {
        "results.json"
    });
    // A partial run with no earlier results to keep would render a page of
    // its suites alone over the committed one, losing every other suite.
    let partial = SUITES.iter().any(|s| !suites.contains(s));
    let clobbers = !quick && partial && !file.is_file();
    let merged = merge_results(&file, &results, &opts)?;
    write(
        &file,
        &serde_json::to_string_pretty(&merged).map_err(|e| e.to_string())?,
    )?;
    println!("bench: results in {}", file.display());

    // The page and charts: `docs/` for a real run, `target/bench/` for --quick.
    let docs = if quick || clobbers {
        if clobbers {
            eprintln!(
                "bench: {} holds no earlier results, so docs/benchmarks.md is left alone (a page of these suites alone would drop the others); the page of this run is under {}",
                file.display(),
                bench_dir.join("docs").display()
            );
        }
        bench_dir.join("docs")
    } else {
        root.join("docs")
    };
    std::fs::create_dir_all(&docs).map_err(|e| format!("{}: {e}", docs.display()))?;
    report::write_page(&merged, &docs)?;
    println!("bench: page in {}", docs.join("benchmarks.md").display());

    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "bench: {} suite(s) failed: {}",
            failures.len(),
            failures.join("; ")
        ))
    }
}

/// Keeps earlier results of suites not run this time, so that
/// `cargo xtask bench proxy` refreshes only the proxy section. The page's
/// machine line then stays the one of the run the kept suites came from,
/// and each suite of this run is marked `separate_run` (with its command),
/// so the page says that it comes from a run of its own.
fn merge_results(file: &Path, results: &[(&str, Value)], opts: &Opts) -> Result<Value, String> {
    let mut suites = serde_json::Map::new();
    let mut old_machine = None;
    if let Ok(text) = std::fs::read_to_string(file)
        && let Ok(old) = serde_json::from_str::<Value>(&text)
        && let Some(map) = old.get("suites").and_then(Value::as_object)
    {
        suites.clone_from(map);
        old_machine = old.get("machine").cloned();
    }
    let kept = suites
        .keys()
        .any(|k| !results.iter().any(|(name, _)| name == k));
    let command = std::iter::once("cargo xtask bench")
        .chain(results.iter().map(|(name, _)| *name))
        .collect::<Vec<_>>()
        .join(" ");
    for (name, v) in results {
        let mut v = v.clone();
        if kept && let Some(obj) = v.as_object_mut() {
            obj.insert("separate_run".to_owned(), json!(command));
        }
        suites.insert((*name).to_owned(), v);
    }
    let mut ordered = serde_json::Map::new();
    for name in SUITES {
        if let Some(v) = suites.remove(*name) {
            ordered.insert((*name).to_owned(), v);
        }
    }
    let machine = match old_machine {
        Some(m) if kept => m,
        _ => sys::machine(),
    };
    Ok(json!({
        "format": 1,
        "generated_at": sys::utc_now(),
        "quick": opts.quick,
        "machine": machine,
        "peers": peers_json(),
        "suites": ordered,
    }))
}

fn peers_json() -> Value {
    let list: Vec<Value> = PEERS
        .iter()
        .map(|(name, used_by, install)| {
            let path = sys::which(name);
            json!({
                "name": name,
                "used_by": used_by,
                "install": install,
                "path": path.as_ref().map(|p| p.display().to_string()),
                "version": path.as_ref().map(|p| peer_version(name, p)),
            })
        })
        .collect();
    Value::Array(list)
}

fn peer_version(name: &str, path: &Path) -> String {
    let arg = match name {
        "tinyproxy" | "squid" => "-v",
        "socat" => "-V",
        _ => "--version",
    };
    let out = sys::output_within(Command::new(path).arg(arg), Duration::from_secs(10));
    out.map(|o| {
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        // socat prints a banner line first; the version is on the line naming it.
        text.lines()
            .map(str::trim)
            .find(|l| {
                l.contains("version")
                    || l.contains("Version")
                    || l.chars().any(|c| c.is_ascii_digit())
            })
            .unwrap_or("")
            .chars()
            .take(120)
            .collect()
    })
    .unwrap_or_default()
}

fn report_peers() {
    let mut missing = Vec::new();
    for (name, used_by, install) in PEERS {
        match sys::which(name) {
            Some(p) => eprintln!("bench: peer {name}: {}", p.display()),
            None => missing.push(format!("{name} (for {used_by}: {install})")),
        }
    }
    if !missing.is_empty() {
        eprintln!(
            "bench: missing peers, their rows will be skipped: {}",
            missing.join(", ")
        );
    }
}

/// Builds the `palisade` binary the suites call.
fn build_palisade(root: &Path, opts: &Opts) -> Result<PathBuf, String> {
    let mut cmd = crate::cargo(root);
    cmd.args(["build", "--quiet", "-p", "palisade-cli"]);
    if opts.release {
        cmd.arg("--release");
    }
    crate::run(&mut cmd)?;
    let bin = target_dir(root)
        .join(if opts.release { "release" } else { "debug" })
        .join("palisade");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "built palisade-cli but {} is missing",
            bin.display()
        ))
    }
}

/// Cargo's target directory (honours `CARGO_TARGET_DIR`).
pub(crate) fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn print_suite(name: &str, r: &SuiteResult) {
    for row in &r.rows {
        println!(
            "{name:8} {:34} {:28} median {:>10} {} (min {}, max {}, n={})",
            row.case,
            row.subject,
            stats::fmt_num(row.summary.median),
            row.unit,
            stats::fmt_num(row.summary.min),
            stats::fmt_num(row.summary.max),
            row.summary.runs
        );
    }
    for g in &r.goals {
        println!(
            "{name:8} goal {}: {} {} → {}",
            g.what,
            stats::fmt_num(g.value),
            g.goal_text(),
            g.verdict()
        );
    }
    for (s, why) in &r.unavailable {
        println!("{name:8} not measured: {s}: {why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake `palisade` that knows only the subcommands in `known`.
    fn fake_palisade(dir: &Path, known: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let bin = dir.join("palisade");
        let script = format!(
            "#!/bin/sh\ncase \" {known} \" in *\" $1 \"*) exit 0;; esac\n\
             echo \"error: unrecognized subcommand '$1'\" >&2\nexit 2\n"
        );
        std::fs::write(&bin, script).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        bin
    }

    fn ctx(palisade: Result<PathBuf, String>, tmp: PathBuf) -> Ctx {
        Ctx {
            opts: Opts {
                quick: true,
                runs: 1,
                warmup: 1,
                release: false,
            },
            tmp,
            palisade,
            crates: CrateBenches::default(),
        }
    }

    #[test]
    fn a_missing_subcommand_is_reported_as_not_available_yet() {
        let dir = std::env::temp_dir().join(format!("xtask-fake-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = ctx(Ok(fake_palisade(&dir, "check")), dir.clone());
        let err = c.palisade_with("run", "isolate").unwrap_err();
        assert!(err.contains("palisade side not available yet"), "{err}");
        assert!(err.contains("merge branch `isolate`"), "{err}");
        assert!(err.contains("unrecognized subcommand 'run'"), "{err}");
        // Positive control: the same binary with `run` is accepted.
        let c = ctx(Ok(fake_palisade(&dir, "check run")), dir.clone());
        assert!(c.palisade_with("run", "isolate").is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_check_suite_degrades_to_not_measured_without_palisade() {
        let dir = std::env::temp_dir().join(format!("xtask-nopal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = ctx(Err("no binary".to_owned()), dir.clone());
        let r = check::run(&c).unwrap();
        assert!(r.rows.is_empty());
        assert!(
            r.unavailable
                .iter()
                .any(|(s, why)| s == "palisade check" && why == "no binary")
        );
        assert!(
            r.unavailable
                .iter()
                .any(|(_, why)| why.contains("no bench target in palisade-schema"))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_partial_run_keeps_the_other_suites_results() {
        let dir = std::env::temp_dir().join(format!("xtask-merge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("results.json");
        let opts = Opts {
            quick: false,
            runs: 1,
            warmup: 1,
            release: true,
        };
        std::fs::write(
            &file,
            json!({
                "machine": {"loadavg_1m_at_start": "old"},
                "suites": {"proxy": {"old": true}, "spawn": {"old": true}},
            })
            .to_string(),
        )
        .unwrap();
        let merged = merge_results(&file, &[("spawn", json!({"new": true}))], &opts).unwrap();
        let suites = merged["suites"].as_object().unwrap();
        assert_eq!(suites.keys().collect::<Vec<_>>(), ["spawn", "proxy"]);
        assert_eq!(
            suites["spawn"],
            json!({"new": true, "separate_run": "cargo xtask bench spawn"})
        );
        assert_eq!(suites["proxy"], json!({"old": true}));
        // The page's machine stays the one of the run the kept suites came from.
        assert_eq!(merged["machine"], json!({"loadavg_1m_at_start": "old"}));
        // Positive control: a run of every stored suite replaces the machine
        // and marks nothing as a separate run.
        let merged = merge_results(
            &file,
            &[
                ("spawn", json!({"new": true})),
                ("proxy", json!({"new": true})),
            ],
            &opts,
        )
        .unwrap();
        assert_eq!(merged["suites"]["spawn"], json!({"new": true}));
        assert_ne!(merged["machine"], json!({"loadavg_1m_at_start": "old"}));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_page_reports_rows_ratios_and_missed_goals() {
        let mut r = SuiteResult::default();
        r.rows.push(
            Row::new(
                "/bin/true",
                "palisade strict",
                "ms",
                stats::Better::Lower,
                &[3.0, 3.0],
            )
            .unwrap(),
        );
        r.rows.push(
            Row::new(
                "/bin/true",
                "bwrap",
                "ms",
                stats::Better::Lower,
                &[2.0, 2.0],
            )
            .unwrap(),
        );
        r.goals.push(GoalCheck {
            what: "ratio".into(),
            value: 1.5,
            unit: "×".into(),
            cmp: stats::Cmp::Le,
            target: 1.0,
        });
        r.unavailable("srt", "not installed");
        let opts = Opts {
            quick: false,
            runs: 2,
            warmup: 1,
            release: true,
        };
        let results = json!({
            "generated_at": "now",
            "quick": false,
            "suites": {"spawn": r.to_json("spawn", &opts, Path::new("/nowhere"))},
        });
        let dir = std::env::temp_dir().join(format!("xtask-page-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        report::write_page(&results, &dir).unwrap();
        let page = std::fs::read_to_string(dir.join("benchmarks.md")).unwrap();
        assert!(
            page.contains("| /bin/true | **palisade strict** | 3.00 ms |"),
            "{page}"
        );
        assert!(
            page.contains("| /bin/true | palisade strict | bwrap | 1.50× | **behind**"),
            "{page}"
        );
        assert!(page.contains("**missed**: 0.500× over (50%)"), "{page}");
        assert!(page.contains("- srt: not installed"), "{page}");
        assert!(page.contains("![spawn chart](bench-spawn.svg)"));
        assert!(dir.join("bench-spawn.svg").is_file());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
