//! `cargo xtask`: the project's automation, written in Rust so that it needs
//! nothing but cargo.
//!
//! - `cargo xtask ci` runs every gate CI runs: rustfmt, clippy, the
//!   public-API snapshots, the test suite, the orchestrator example, and a
//!   short smoke run of every fuzz target.
//! - `cargo xtask fuzz [TARGET] [--time SECONDS]` runs fuzz targets.
//! - `cargo xtask bench [--quick] [SUITE…]` measures palisade against its
//!   peers and regenerates `docs/benchmarks.md` (see `bench.rs`).
//! - `cargo xtask agents` installs the pinned agent CLIs from npm and runs
//!   the agent suite with them (see `agents.rs`).
//! - `cargo xtask api [--bless]` checks (or rewrites) the public-API
//!   snapshots under `api/` (see `api.rs`).

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, reason = "a command-line tool")]

mod agents;
mod api;
mod bench;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("fuzz") => fuzz(args.get(1..).unwrap_or_default()),
        Some("bench") => bench::bench(args.get(1..).unwrap_or_default()),
        Some("api") => api::api(args.get(1..).unwrap_or_default()),
        Some("agents") => agents::agents(&workspace_root()),
        _ => Err(USAGE.to_owned()),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: cargo xtask ci | fuzz [TARGET] [--time SECONDS] | bench [--quick] [SUITE…] | api [--bless] | agents";

/// Seconds each fuzz target runs during `cargo xtask ci`.
const FUZZ_SMOKE_SECONDS: u32 = 10;

fn ci() -> Result<(), String> {
    let root = workspace_root();
    run(cargo(&root).args(["fmt", "--all", "--check"]))?;
    run(cargo(&root.join("fuzz")).args(["fmt", "--all", "--check"]))?;
    run(cargo(&root).args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    // The public API of every library crate matches its snapshot in api/.
    api::api(&[])?;
    // The README's test command, exactly.
    run(cargo(&root).args(["test", "--workspace"]))?;
    // The orchestrator example: the public API end to end, a real sandbox
    // included when run as root (CI is); it exits non-zero on any surprise.
    run(cargo(&root).args(["run", "--quiet", "-p", "palisade-example-orchestrator"]))?;
    // An unoptimised build compiles in about half the time, which matters
    // more than execution speed for a 10-second smoke run.
    fuzz_smoke(&root, FUZZ_SMOKE_SECONDS, FuzzBuild::Dev)?;
    // A smoke run of the benchmark harness: no timing is asserted.
    bench::bench(&["--quick".to_owned()])?;
    println!("xtask ci: all gates passed");
    Ok(())
}

fn fuzz(args: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let mut seconds = 60;
    let mut target = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--time" => {
                let value = it.next().ok_or("--time needs a number of seconds")?;
                seconds = value
                    .parse()
                    .map_err(|_| format!("--time: not a number: {value}"))?;
            }
            t if target.is_none() && !t.starts_with('-') => target = Some(t.to_owned()),
            other => return Err(format!("unexpected argument {other:?}\n{USAGE}")),
        }
    }
    match target {
        Some(t) => fuzz_run(&root, &t, seconds, FuzzBuild::Release),
        None => fuzz_smoke(&root, seconds, FuzzBuild::Release),
    }
}

/// How cargo-fuzz builds the targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FuzzBuild {
    /// Optimised (cargo-fuzz's default): for real fuzzing campaigns.
    Release,
    /// Unoptimised (`--dev`): for the CI smoke run.
    Dev,
}

impl FuzzBuild {
    fn flags(self) -> &'static [&'static str] {
        match self {
            Self::Release => &[],
            Self::Dev => &["--dev"],
        }
    }
}

fn fuzz_smoke(root: &Path, seconds: u32, build: FuzzBuild) -> Result<(), String> {
    let targets = fuzz_targets(root)?;
    if targets.is_empty() {
        return Err("no fuzz targets found under fuzz/fuzz_targets".to_owned());
    }
    run(cargo_fuzz(root).arg("build").args(build.flags()))?;
    for target in &targets {
        fuzz_run(root, target, seconds, build)?;
    }
    println!(
        "fuzz: {} targets ran {seconds}s each without a finding",
        targets.len()
    );
    Ok(())
}

fn fuzz_run(root: &Path, target: &str, seconds: u32, build: FuzzBuild) -> Result<(), String> {
    run(cargo_fuzz(root).arg("run").args(build.flags()).args([
        target.to_owned(),
        "--".to_owned(),
        format!("-max_total_time={seconds}"),
        "-rss_limit_mb=2048".to_owned(),
    ]))
}

/// The fuzz targets, one per file under `fuzz/fuzz_targets/`.
fn fuzz_targets(root: &Path) -> Result<Vec<String>, String> {
    let dir = root.join("fuzz").join("fuzz_targets");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut targets = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "rs")
            && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
        {
            targets.push(stem.to_owned());
        }
    }
    targets.sort();
    Ok(targets)
}

fn cargo_fuzz(root: &Path) -> Command {
    let mut cmd = cargo(&root.join("fuzz"));
    cmd.arg("fuzz");
    // cargo-fuzz needs nightly-only flags (sanitizers); this unlocks them on stable.
    cmd.env("RUSTC_BOOTSTRAP", "1");
    cmd
}

fn cargo(dir: &Path) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(dir);
    cmd
}

fn run(cmd: &mut Command) -> Result<(), String> {
    eprintln!("xtask: running {cmd:?}");
    let status = cmd.status().map_err(|e| format!("{cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed: {status}"))
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}
