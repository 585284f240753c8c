//! In-process launch benchmark (`cargo bench -p palisade-isolate --bench
//! launch`, driven by `cargo xtask bench spawn`): what an embedder pays per
//! sandboxed command.
//!
//! One `Sandbox` under the `strict` profile (working directory bound
//! writable and entered, the socket-walk cache and placeholder records in a
//! state directory, as `palisade run` sets them up; with direct writes, the
//! same plain bind as bwrap's `--bind`: staged writes are measured by
//! `cargo xtask bench staging`) spawns `/bin/true` and
//! waits for it, alternated A B A B with `bwrap` started from this same
//! process by `std::process::Command` with the same layers. Prints one JSON
//! line per figure (`crates.rs` in xtask describes the format):
//!
//! * `launch_sandbox_spawn_strict`: `Sandbox::spawn` + `wait` of `/bin/true`,
//!   with the host probed once up front (`Sandbox::reuse_probe`);
//! * `reference_bwrap_command`: `bwrap … /bin/true`, spawn + wait;
//! * `launch_probe`: one `probe()` of the host's layers: what a launch
//!   without `Sandbox::reuse_probe` pays on top.
//!
//! `PALISADE_BENCH_BWRAP` (the bwrap argv, one word per line, without the
//! command) replaces the built-in bwrap flags, so the harness measures the
//! very argv of its own bwrap row; `PALISADE_BENCH_RUNS` sets the measured
//! runs per subject (default 60; 5 with `PALISADE_BENCH_QUICK=1`).
//! `--write-seccomp PATH` writes the compiled seccomp program (the bytes
//! `bwrap --seccomp FD` reads) to `PATH` and exits.
//!
//! Needs root or unprivileged user namespaces; a subject that cannot run is
//! named on stderr and its figure left out.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::indexing_slicing,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    missing_docs,
    reason = "benchmark harness"
)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use palisade_isolate::{Command, Layer, Profile, Sandbox, Stdio, probe};

/// Directories masked with an empty tmpfs by the default bwrap argv (those
/// that exist), as in xtask's spawn suite.
const BWRAP_MASKS: &[&str] = &[
    "/home",
    "/root",
    "/run",
    "/srv",
    "/mnt",
    "/media",
    "/boot",
    "/var/mail",
    "/var/spool",
];

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// The bwrap argv (program first, up to and including `--`).
fn bwrap_argv(cwd: &Path) -> Option<Vec<String>> {
    if let Ok(text) = std::env::var("PALISADE_BENCH_BWRAP") {
        let words: Vec<String> = text.lines().map(str::to_owned).collect();
        return (!words.is_empty()).then_some(words);
    }
    let bwrap = which("bwrap")?;
    let cwd = cwd.display().to_string();
    let mut v: Vec<String> = [
        bwrap.display().to_string().as_str(),
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for m in BWRAP_MASKS {
        if Path::new(m).is_dir() && !cwd.starts_with(m) {
            v.extend(["--tmpfs".to_owned(), (*m).to_owned()]);
        }
    }
    v.extend(
        ["--bind", &cwd, &cwd, "--chdir", &cwd, "--"]
            .iter()
            .map(|s| (*s).to_owned()),
    );
    Some(v)
}

/// One in-process launch of `/bin/true`: ns from spawn to reaped.
fn sandbox_once(sb: &Sandbox) -> Result<f64, String> {
    let cmd = Command::new(["/bin/true"])
        .stdin(Stdio::Null)
        .stdout(Stdio::Null)
        .stderr(Stdio::Null);
    let start = Instant::now();
    let child = sb.spawn(cmd).map_err(|e| format!("Sandbox::spawn: {e}"))?;
    let code = child.wait().map_err(|e| format!("wait: {e}"))?;
    let ns = start.elapsed().as_nanos() as f64;
    if code.success() {
        Ok(ns)
    } else {
        Err(format!("/bin/true ended with {code:?} in the sandbox"))
    }
}

/// One `bwrap … /bin/true` from this process: ns from spawn to exit.
fn bwrap_once(argv: &[String], cwd: &Path) -> Result<f64, String> {
    let (program, rest) = argv.split_first().ok_or("empty bwrap argv")?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest)
        .arg("/bin/true")
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let start = Instant::now();
    let child = cmd.spawn().map_err(|e| format!("{program}: {e}"))?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let ns = start.elapsed().as_nanos() as f64;
    if out.status.success() {
        Ok(ns)
    } else {
        Err(format!(
            "bwrap exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .next()
                .unwrap_or("")
        ))
    }
}

fn print(name: &str, samples: &mut [f64]) {
    if samples.is_empty() {
        return;
    }
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let median = if n % 2 == 1 {
        samples[n / 2]
    } else {
        f64::midpoint(samples[n / 2 - 1], samples[n / 2])
    };
    println!(
        "{}",
        serde_json_line(name, samples[0], median, samples[n - 1], n)
    );
}

/// The agreed line, written by hand (this bench has no JSON dependency).
fn serde_json_line(name: &str, min: f64, median: f64, max: f64, runs: usize) -> String {
    format!(
        "{{\"suite\":\"spawn\",\"name\":\"{name}\",\"min_ns\":{min:.0},\"median_ns\":{median:.0},\"max_ns\":{max:.0},\"runs\":{runs}}}"
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--write-seccomp") {
        let path = args.get(i + 1).expect("--write-seccomp needs a path");
        let bytes = palisade_isolate::__bench::seccomp_program().unwrap_or_else(|e| {
            eprintln!("launch bench: no seccomp program: {e}");
            std::process::exit(1);
        });
        std::fs::write(path, &bytes).unwrap_or_else(|e| {
            eprintln!("launch bench: {path}: {e}");
            std::process::exit(1);
        });
        return;
    }
    let quick = std::env::var_os("PALISADE_BENCH_QUICK").is_some();
    let runs = env_usize("PALISADE_BENCH_RUNS").unwrap_or(if quick { 5 } else { 60 });
    let warmup = if quick { 1 } else { 5 };

    // Under the target directory, not /tmp (which strict replaces), and
    // open to the worker's uid.
    let scratch = tempfile::Builder::new()
        .prefix("palisade-launch-bench")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("scratch directory");
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cwd = scratch.path().join("cwd");
    let state = scratch.path().join("state");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let cwd = cwd.canonicalize().unwrap();

    let mut sb = Sandbox::new(Profile::strict());
    sb.writable(cwd.clone()).cwd(cwd.clone());
    sb.walk_cache(&state).placeholder_records(&state);
    // A plain read-write bind, like bwrap's `--bind`: the overlay of staged
    // writes (one stage per launch) is what `cargo xtask bench staging`
    // measures against it.
    sb.dangerous()
        .disable(Layer::StagedWrites)
        .expect("staged writes can be switched off");
    // Probe once, as an embedder launching many workers does.
    sb.reuse_probe();
    let bwrap = bwrap_argv(&cwd);

    let mut sandbox_ok = true;
    let mut bwrap_ok = bwrap.is_some();
    if bwrap.is_none() {
        eprintln!("launch bench: bwrap: not installed, reference row left out");
    }
    for _ in 0..warmup {
        if sandbox_ok && let Err(e) = sandbox_once(&sb) {
            eprintln!("launch bench: palisade strict: {e}");
            sandbox_ok = false;
        }
        if bwrap_ok
            && let Some(argv) = &bwrap
            && let Err(e) = bwrap_once(argv, &cwd)
        {
            eprintln!("launch bench: bwrap: {e}");
            bwrap_ok = false;
        }
    }
    let (mut ours, mut theirs, mut probes) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..runs {
        // A B A B, the order swapped each round.
        for k in 0..2 {
            if (round + k) % 2 == 0 {
                if sandbox_ok {
                    match sandbox_once(&sb) {
                        Ok(ns) => ours.push(ns),
                        Err(e) => {
                            eprintln!("launch bench: palisade strict: {e}");
                            sandbox_ok = false;
                        }
                    }
                }
            } else if bwrap_ok && let Some(argv) = &bwrap {
                match bwrap_once(argv, &cwd) {
                    Ok(ns) => theirs.push(ns),
                    Err(e) => {
                        eprintln!("launch bench: bwrap: {e}");
                        bwrap_ok = false;
                    }
                }
            }
        }
        let start = Instant::now();
        std::hint::black_box(probe());
        probes.push(start.elapsed().as_nanos() as f64);
    }
    if sandbox_ok {
        print("launch_sandbox_spawn_strict", &mut ours);
    }
    if bwrap_ok {
        print("reference_bwrap_command", &mut theirs);
    }
    print("launch_probe", &mut probes);
}
