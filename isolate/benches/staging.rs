//! Staged-writes benchmark (`cargo bench -p palisade-isolate --bench
//! staging`, driven by `cargo xtask bench staging`): what staging a
//! writable root costs the work inside the sandbox, and what committing a
//! stage costs the host.
//!
//! **Workloads.** Three commands a coding agent runs, each in one writable
//! root, timed from spawn to exit in three arms, interleaved round by
//! round (the order rotated each round, so drift hits all arms alike):
//!
//! * `host`: the command started directly by `std::process::Command` (the
//!   floor);
//! * `direct`: in a `governed` [`Sandbox`] whose root is bound writable
//!   (direct writes: `Sandbox::dangerous().disable(Layer::StagedWrites)`);
//! * `staged`: the same sandbox with the root staged (an overlay over the
//!   host root, the upper layer in a stage made by `Sandbox::stage_in`).
//!
//! The workloads: `git clone --no-local` of a generated repository outside
//! the root (a few thousand files, some history: the pack transport, as a
//! clone from a remote); `git status` of a checkout inside the root;
//! `cargo build --offline` of a generated crate with a few modules and no
//! dependencies, its target directory inside the root. Every run starts
//! from the same host tree: what a run wrote is removed, untimed, before
//! the next (the staged arm's stage is removed without committing).
//! `/bin/true` is timed too, for launch and teardown alone. Figures:
//! `workload_<true|clone|status|build>_<host|direct|staged>`.
//!
//! **Commit.** 10,000 small files of a host root rewritten in a stage's
//! upper layer; timed: [`Stage::changes`], [`CommitFilter::check`] and
//! [`Stage::commit`] (figure `commit_10000_files`), against the floor of
//! the same tree moved with plain `std::fs`: walking the source tree and
//! `rename(2)` of each file into place (`floor_rename_10000_files`), and
//! `std::fs::copy` to a temporary name then `rename(2)`
//! (`floor_copy_rename_10000_files`).
//!
//! Prints one JSON line per figure (`crates.rs` in xtask describes the
//! format), plus `{"suite":"staging","name":…,"unavailable":"why"}` for an
//! arm that cannot run here, and `value` lines for the fixture's sizes.
//! `PALISADE_BENCH_RUNS` sets the measured rounds (default 7; 1 with
//! `PALISADE_BENCH_QUICK=1`, which also shrinks every fixture).
//! Needs root (the worker runs as the dedicated uid).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::indexing_slicing,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::panic,
    missing_docs,
    reason = "benchmark harness"
)]

use std::ffi::OsString;
use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use palisade_isolate::stage::{CommitFilter, FilterVerdict, Stage};
use palisade_isolate::{Command, DEFAULT_PATH, DEFAULT_WORKER_UID, Layer, Profile, Sandbox, Stdio};

const SUITE: &str = "staging";

/// Sizes of the fixtures.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    /// Files in the generated repository.
    repo_files: usize,
    /// Commits of its history (each rewrites `repo_files / 10` files).
    repo_commits: usize,
    /// Modules of the generated crate.
    crate_modules: usize,
    /// Functions per module.
    crate_fns: usize,
    /// Files of the commit bench.
    commit_files: usize,
}

const FULL: Sizes = Sizes {
    repo_files: 3000,
    repo_commits: 20,
    crate_modules: 8,
    crate_fns: 40,
    commit_files: 10_000,
};

const QUICK: Sizes = Sizes {
    repo_files: 60,
    repo_commits: 2,
    crate_modules: 2,
    crate_fns: 2,
    commit_files: 200,
};

/// A JSON string literal (the bench has no JSON dependency).
fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn print_samples(name: &str, samples: &mut [f64]) {
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
        "{{\"suite\":\"{SUITE}\",\"name\":{},\"min_ns\":{:.0},\"median_ns\":{median:.0},\"max_ns\":{:.0},\"runs\":{n}}}",
        json_str(name),
        samples[0],
        samples[n - 1]
    );
}

fn print_value(name: &str, unit: &str, value: f64) {
    println!(
        "{{\"suite\":\"{SUITE}\",\"name\":{},\"unit\":{},\"value\":{value}}}",
        json_str(name),
        json_str(unit)
    );
}

fn print_unavailable(name: &str, why: &str) {
    eprintln!("staging bench: {name}: not measured: {why}");
    println!(
        "{{\"suite\":\"{SUITE}\",\"name\":{},\"unavailable\":{}}}",
        json_str(name),
        json_str(why)
    );
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The first line of a process's stderr, for messages.
fn first_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .chars()
        .take(300)
        .collect()
}

/// The last lines of a process's stderr, for messages (a tool's cause
/// comes after its summary).
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let from = lines.len().saturating_sub(3);
    lines[from..].join(" / ").chars().take(600).collect()
}

/// Chown a tree to the worker (no symlinks are followed).
fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    let meta = std::fs::symlink_metadata(path).unwrap();
    if meta.is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            chown_tree(&e.unwrap().path(), uid);
        }
    }
}

/// The toolchain the crate is built with: the sysroot of the `rustc` on
/// this process's `PATH` (its own `cargo` and `rustc`, not rustup's proxies,
/// so the sandbox needs only that directory).
fn sysroot() -> Result<PathBuf, String> {
    let out = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("rustc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "rustc --print sysroot: {}",
            first_line(&out.stderr)
        ));
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if dir.join("bin").join("cargo").is_file() {
        Ok(dir)
    } else {
        Err(format!("{} has no bin/cargo", dir.display()))
    }
}

/// The environment every arm runs with (the host arm's is exactly this; the
/// sandbox adds its own `HOME`).
fn common_env(sysroot: &Path, cargo_home: &Path, gitconfig: &Path) -> Vec<(OsString, OsString)> {
    let path = format!("{}:{DEFAULT_PATH}", sysroot.join("bin").display());
    [
        ("PATH", path),
        ("RUSTC", sysroot.join("bin/rustc").display().to_string()),
        ("CARGO_HOME", cargo_home.display().to_string()),
        ("CARGO_TERM_COLOR", "never".to_owned()),
        ("GIT_CONFIG_NOSYSTEM", "1".to_owned()),
        // `safe.directory = *`: the host arm runs as root over the
        // worker's files. (In a file: the sandbox drops variables named
        // like credentials, such as `GIT_CONFIG_KEY_0`.)
        ("GIT_CONFIG_GLOBAL", gitconfig.display().to_string()),
        ("LANG", "C".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (OsString::from(k), OsString::from(v)))
    .collect()
}

/// Runs a setup command on the host and fails the bench if it fails.
fn setup(argv: &[&str], cwd: &Path, env: &[(OsString, OsString)], home: &Path) {
    let out = std::process::Command::new(argv[0])
        .args(&argv[1..])
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("HOME", home)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", argv[0]));
    assert!(
        out.status.success(),
        "setup `{}` failed: {}",
        argv.join(" "),
        first_line(&out.stderr)
    );
}

/// A deterministic text file of about `len` bytes.
fn text(seed: usize, len: usize) -> String {
    let mut s = String::with_capacity(len + 64);
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    let mut line = 0;
    while s.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let _ = writeln!(s, "line {line} of file {seed}: {x:016x}");
        line += 1;
    }
    s
}

/// The upstream repository (outside the root) and, inside the root, a
/// checkout of it and the crate.
fn fixtures(scratch: &Path, root: &Path, sizes: Sizes, env: &[(OsString, OsString)], home: &Path) {
    let work = scratch.join("gen");
    std::fs::create_dir_all(&work).unwrap();
    setup(
        &["git", "init", "--quiet", "-b", "main", "."],
        &work,
        env,
        home,
    );
    let dirs = (sizes.repo_files / 50).max(1);
    for i in 0..sizes.repo_files {
        let dir = work.join(format!("src/d{:03}", i % dirs));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("f{i:05}.txt")),
            text(i, 1024 + (i % 7) * 512),
        )
        .unwrap();
    }
    setup(&["git", "add", "-A"], &work, env, home);
    setup(
        &["git", "commit", "--quiet", "-m", "initial"],
        &work,
        env,
        home,
    );
    for c in 1..=sizes.repo_commits {
        for i in (0..sizes.repo_files).filter(|i| (i + c) % 10 == 0) {
            let file = work.join(format!("src/d{:03}/f{i:05}.txt", i % dirs));
            std::fs::write(file, text(i * 1000 + c, 1024 + (i % 5) * 512)).unwrap();
        }
        setup(
            &[
                "git",
                "commit",
                "--quiet",
                "-a",
                "-m",
                &format!("change {c}"),
            ],
            &work,
            env,
            home,
        );
    }
    let upstream = scratch.join("upstream.git");
    setup(
        &[
            "git",
            "clone",
            "--quiet",
            "--bare",
            work.to_str().unwrap(),
            upstream.to_str().unwrap(),
        ],
        scratch,
        env,
        home,
    );
    std::fs::remove_dir_all(&work).unwrap();
    setup(
        &[
            "git",
            "clone",
            "--quiet",
            upstream.to_str().unwrap(),
            "repo",
        ],
        root,
        env,
        home,
    );

    let krate = root.join("crate");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"bench-crate\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(
        krate.join("Cargo.lock"),
        "# This file is automatically @generated by Cargo.\n# It is not intended for manual editing.\nversion = 4\n\n[[package]]\nname = \"bench-crate\"\nversion = \"0.1.0\"\n",
    )
    .unwrap();
    let mut main = String::new();
    for m in 0..sizes.crate_modules {
        let _ = writeln!(main, "mod m{m};");
        let mut module = String::from("//! A generated module.\n\n");
        for f in 0..sizes.crate_fns {
            let _ = writeln!(
                module,
                "/// Generated.\npub fn f{f}(v: &[u64]) -> u64 {{\n    v.iter().enumerate().map(|(i, x)| x.wrapping_mul(i as u64 + {f})).fold({m}, |a, b| a ^ b.rotate_left({f} % 63))\n}}\n"
            );
        }
        let _ = writeln!(
            module,
            "/// All of them.\npub fn all(v: &[u64]) -> u64 {{\n    0{}\n}}",
            (0..sizes.crate_fns)
                .map(|f| format!(" ^ f{f}(v)"))
                .collect::<String>()
        );
        std::fs::write(krate.join(format!("src/m{m}.rs")), module).unwrap();
    }
    let _ = writeln!(
        main,
        "\nfn main() {{\n    let v: Vec<u64> = (0..100).collect();\n    println!(\"{{}}\", 0{});\n}}",
        (0..sizes.crate_modules)
            .map(|m| format!(" ^ m{m}::all(&v)"))
            .collect::<String>()
    );
    std::fs::write(krate.join("src/main.rs"), main).unwrap();
}

/// One workload: its figure stem, argv, working directory (relative to the
/// root) and what it leaves in the root (removed after a run).
struct Workload {
    name: &'static str,
    argv: Vec<String>,
    cwd: &'static str,
    leaves: Option<String>,
    /// Run with seccomp disabled in both sandbox arms alike: Rust's
    /// `std::process::Command` on its fork path (a `pre_exec` hook, as
    /// cargo's jobserver and rustc's linker call use) opens an `AF_UNIX`
    /// `SOCK_SEQPACKET` socketpair, which palisade's filter refuses, so
    /// cargo cannot start rustc under it.
    without_seccomp: bool,
}

fn workloads(upstream: &Path, cargo: &Path, k: usize) -> Vec<Workload> {
    let clone = format!("clone-{k}");
    vec![
        // Launch and teardown alone: what every run below pays on top.
        Workload {
            name: "true",
            argv: vec!["/bin/true".into()],
            cwd: ".",
            leaves: None,
            without_seccomp: false,
        },
        Workload {
            name: "clone",
            argv: vec![
                "git".into(),
                "clone".into(),
                "--quiet".into(),
                "--no-local".into(),
                upstream.display().to_string(),
                clone.clone(),
            ],
            cwd: ".",
            leaves: Some(clone),
            without_seccomp: false,
        },
        Workload {
            name: "status",
            argv: vec!["git".into(), "status".into(), "--porcelain".into()],
            cwd: "repo",
            leaves: None,
            without_seccomp: false,
        },
        Workload {
            name: "build",
            argv: vec![
                cargo.display().to_string(),
                "build".into(),
                "--offline".into(),
                "--quiet".into(),
            ],
            cwd: "crate",
            leaves: Some("crate/target".into()),
            without_seccomp: true,
        },
    ]
}

/// The arms, in the order of the first round.
const ARMS: [&str; 3] = ["host", "direct", "staged"];

struct Arms {
    root: PathBuf,
    env: Vec<(OsString, OsString)>,
    host_home: PathBuf,
    /// Where the staged arm's stages are made (outside the root).
    stages: PathBuf,
    direct: Result<Sandbox, String>,
    staged: Result<Sandbox, String>,
}

/// Runs `w` in `arm` once; ns from spawn to exit.
fn run_once(arms: &Arms, arm: &str, w: &Workload, k: usize) -> Result<f64, String> {
    let cwd = arms.root.join(w.cwd);
    let ns = match arm {
        "host" => {
            let mut cmd = std::process::Command::new(&w.argv[0]);
            cmd.args(&w.argv[1..])
                .current_dir(&cwd)
                .env_clear()
                .envs(arms.env.iter().map(|(k, v)| (k, v)))
                .env("HOME", &arms.host_home)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .process_group(0);
            let start = Instant::now();
            let out = cmd
                .spawn()
                .and_then(std::process::Child::wait_with_output)
                .map_err(|e| format!("{}: {e}", w.argv[0]))?;
            let ns = start.elapsed().as_nanos() as f64;
            if !out.status.success() {
                return Err(format!(
                    "{} (`{}`) exited with {}: {}",
                    w.name,
                    w.argv.join(" "),
                    out.status,
                    tail(&out.stderr)
                ));
            }
            ns
        }
        "direct" => {
            let sb = arms.direct.as_ref().map_err(Clone::clone)?;
            sandbox_once(sb, w, &cwd, None)?.0
        }
        _ => {
            let sb = arms.staged.as_ref().map_err(Clone::clone)?;
            let session = format!("run-{k}");
            let (ns, stage) = sandbox_once(sb, w, &cwd, Some((&arms.stages, &session)))?;
            let stage =
                stage.ok_or("the staged arm's launch made no stage (it ran with direct writes)")?;
            // The worker's writes are in the upper layer and nowhere else.
            let checked = match &w.leaves {
                Some(rel) => {
                    let upper = stage.roots()[0].upper().join(rel);
                    if arms.root.join(rel).exists() {
                        Err(format!("the staged run wrote {rel} into the host root"))
                    } else if !upper.exists() {
                        Err(format!(
                            "the staged run left no {} in its upper layer",
                            upper.display()
                        ))
                    } else {
                        Ok(())
                    }
                }
                None => Ok(()),
            };
            stage.remove().map_err(|e| format!("Stage::remove: {e}"))?;
            checked?;
            ns
        }
    };
    // What the run left in the host root goes, untimed.
    if arm != "staged"
        && let Some(rel) = &w.leaves
    {
        let p = arms.root.join(rel);
        if !p.exists() {
            return Err(format!("the {arm} run left no {} in the root", p.display()));
        }
        std::fs::remove_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(ns)
}

/// One sandboxed run (staged when `stage_in` names a stage base and a
/// session): ns from spawn to reaped, and the stage it made.
fn sandbox_once(
    sb: &Sandbox,
    w: &Workload,
    cwd: &Path,
    stage_in: Option<(&Path, &str)>,
) -> Result<(f64, Option<Stage>), String> {
    let mut sb = sb.clone();
    sb.cwd(cwd);
    if let Some((base, session)) = stage_in {
        sb.stage_in(base, session);
    }
    if w.without_seccomp {
        sb.dangerous()
            .disable(Layer::Seccomp)
            .map_err(|e| format!("disable seccomp: {e}"))?;
    }
    let stderr = tempfile::tempfile().map_err(|e| e.to_string())?;
    let cmd = Command::new(&w.argv)
        .stdin(Stdio::Null)
        .stdout(Stdio::Null)
        .stderr(Stdio::from(std::os::fd::OwnedFd::from(
            stderr.try_clone().map_err(|e| e.to_string())?,
        )));
    let start = Instant::now();
    let mut child = sb.spawn(cmd).map_err(|e| format!("Sandbox::spawn: {e}"))?;
    let stage = child.take_stage();
    let code = child.wait().map_err(|e| format!("wait: {e}"))?;
    let ns = start.elapsed().as_nanos() as f64;
    if code.success() {
        Ok((ns, stage))
    } else {
        if let Some(st) = stage {
            let _ = st.remove();
        }
        let mut f = stderr;
        let mut text = Vec::new();
        use std::io::{Read, Seek};
        let _ = f.rewind();
        let _ = f.read_to_end(&mut text);
        Err(format!(
            "{} (`{}`) ended with {code:?}: {}",
            w.name,
            w.argv.join(" "),
            tail(&text)
        ))
    }
}

fn governed(
    root: &Path,
    state: &Path,
    env: &[(OsString, OsString)],
    sysroot: &Path,
    cargo_home: &Path,
    upstream: &Path,
) -> Sandbox {
    let mut sb = Sandbox::new(Profile::governed());
    // The clone's source is read where it lies: under `/tmp` (a clone of
    // the repository there, as on CI) the sandbox's own `/tmp` hides it.
    sb.writable(root.to_path_buf())
        .read_only(sysroot.to_path_buf())
        .read_only(cargo_home.to_path_buf())
        .read_only(upstream.to_path_buf())
        .walk_cache(state)
        .placeholder_records(state);
    for (k, v) in env {
        sb.env(k.clone(), v.clone());
    }
    sb.reuse_probe();
    sb
}

fn workloads_bench(scratch: &Path, sizes: Sizes, runs: usize, warmup: usize) {
    let sysroot = match sysroot() {
        Ok(s) => s,
        Err(e) => {
            for w in ["true", "clone", "status", "build"] {
                for arm in ARMS {
                    print_unavailable(&format!("workload_{w}_{arm}"), &e);
                }
            }
            return;
        }
    };
    let root = scratch.join("root");
    let host_home = scratch.join("home");
    let cargo_home = scratch.join("cargo-home");
    let state = scratch.join("state");
    for d in [&root, &host_home, &cargo_home, &state] {
        std::fs::create_dir_all(d).unwrap();
    }
    let gitconfig = scratch.join("gitconfig");
    std::fs::write(&gitconfig, "[safe]\n\tdirectory = *\n").unwrap();
    let env = common_env(&sysroot, &cargo_home, &gitconfig);
    fixtures(scratch, &root, sizes, &env, &host_home);
    chown_tree(&root, DEFAULT_WORKER_UID);
    let upstream = scratch.join("upstream.git");
    chown_tree(&upstream, DEFAULT_WORKER_UID);
    let cargo = sysroot.join("bin/cargo");
    // Settle the checkout's index once, so no arm pays its refresh.
    setup(
        &["git", "status", "--porcelain"],
        &root.join("repo"),
        &env,
        &host_home,
    );
    print_value("fixture_repo_files", "files", sizes.repo_files as f64);
    print_value(
        "fixture_repo_commits",
        "commits",
        (sizes.repo_commits + 1) as f64,
    );
    print_value(
        "fixture_crate_modules",
        "modules",
        sizes.crate_modules as f64,
    );
    print_value(
        "fixture_crate_functions",
        "functions",
        (sizes.crate_modules * (sizes.crate_fns + 1)) as f64,
    );

    let staged = governed(&root, &state, &env, &sysroot, &cargo_home, &upstream);
    let mut direct = staged.clone();
    let direct = match direct.dangerous().disable(Layer::StagedWrites) {
        Ok(_) => Ok(direct),
        Err(e) => Err(format!("direct writes: {e}")),
    };
    let arms = Arms {
        root: root.clone(),
        env,
        host_home,
        stages: scratch.join("stages"),
        direct,
        staged: Ok(staged),
    };
    let names = ["true", "clone", "status", "build"];
    let mut samples: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); ARMS.len()]; names.len()];
    let mut failed: Vec<Vec<Option<String>>> = vec![vec![None; ARMS.len()]; names.len()];
    for (a, arm) in ARMS.iter().enumerate() {
        let why = match *arm {
            "direct" => arms.direct.as_ref().err(),
            "staged" => arms.staged.as_ref().err(),
            _ => None,
        };
        if let Some(why) = why {
            for f in &mut failed {
                f[a] = Some(why.clone());
            }
        }
    }
    let mut k = 0;
    for round in 0..warmup + runs {
        for step in 0..ARMS.len() {
            let a = (round + step) % ARMS.len();
            for (wi, w) in workloads(&upstream, &cargo, k).iter().enumerate() {
                k += 1;
                if failed[wi][a].is_some() {
                    continue;
                }
                match run_once(&arms, ARMS[a], w, k) {
                    Ok(ns) if round >= warmup => samples[wi][a].push(ns),
                    Ok(_) => {}
                    Err(e) => failed[wi][a] = Some(e),
                }
            }
        }
    }
    for (wi, w) in names.iter().enumerate() {
        for (a, arm) in ARMS.iter().enumerate() {
            let name = format!("workload_{w}_{arm}");
            match &failed[wi][a] {
                Some(why) => print_unavailable(&name, why),
                None => print_samples(&name, &mut samples[wi][a]),
            }
        }
    }
}

/// `n` small files in `dirs` directories under `dir`, each `tag`ged.
fn small_tree(dir: &Path, n: usize, tag: &str) {
    let dirs = (n / 100).max(1);
    for i in 0..n {
        let d = dir.join(format!("d{:03}", i % dirs));
        if i < dirs {
            std::fs::create_dir_all(&d).unwrap();
        }
        std::fs::write(
            d.join(format!("f{i:05}.txt")),
            format!("{tag} {}\n", text(i, 200)),
        )
        .unwrap();
    }
}

/// Every file under `dir` (depth 2), with its path relative to `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(dir).unwrap() {
        let d = d.unwrap();
        let name = PathBuf::from(d.file_name());
        for f in std::fs::read_dir(d.path()).unwrap() {
            out.push(name.join(f.unwrap().file_name()));
        }
    }
    out
}

/// One commit round: a host root of `n` files, all rewritten in a fresh
/// stage's upper layer; times changes + filter + commit.
fn commit_once(base: &Path, round: usize, n: usize) -> Result<f64, String> {
    let host = base.join(format!("commit-host-{round}"));
    std::fs::create_dir_all(&host).map_err(|e| e.to_string())?;
    small_tree(&host, n, "before");
    let stages = base.join("stages");
    std::fs::create_dir_all(&stages).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&stages, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| e.to_string())?;
    let stage = Stage::create(
        &stages,
        &format!("commit-{round}"),
        std::slice::from_ref(&host),
        (0, 0),
    )
    .map_err(|e| format!("Stage::create: {e}"))?;
    let upper = stage.roots()[0].upper().to_path_buf();
    small_tree(&upper, n, "after");
    let filter = CommitFilter::new();
    let start = Instant::now();
    let set = stage
        .changes()
        .map_err(|e| format!("Stage::changes: {e}"))?;
    let verdicts = filter.check(&set);
    let report = stage
        .commit(&set, &verdicts, None, &mut |_| Ok(()))
        .map_err(|e| format!("Stage::commit: {e}"))?;
    let ns = start.elapsed().as_nanos() as f64;
    // The figure counts only if every file landed.
    let refused = verdicts
        .iter()
        .filter(|v| matches!(v, FilterVerdict::Refuse(_)))
        .count();
    if refused > 0 || report.applied < n || report.conflicts > 0 {
        return Err(format!(
            "the commit did not apply the {n} files: {} applied, {refused} refused by the filter, {} conflicts",
            report.applied, report.conflicts
        ));
    }
    let probe = host.join("d000/f00000.txt");
    let now = std::fs::read_to_string(&probe).map_err(|e| format!("{}: {e}", probe.display()))?;
    if !now.starts_with("after ") {
        return Err(format!(
            "{} does not have the staged content after the commit",
            probe.display()
        ));
    }
    stage.remove().map_err(|e| format!("Stage::remove: {e}"))?;
    std::fs::remove_dir_all(&host).map_err(|e| e.to_string())?;
    Ok(ns)
}

/// One floor round: the same trees, moved with plain `std::fs`.
fn floor_once(base: &Path, round: usize, n: usize, copy: bool) -> Result<f64, String> {
    let host = base.join(format!("floor-host-{round}"));
    let src = base.join(format!("floor-src-{round}"));
    small_tree(&host, n, "before");
    small_tree(&src, n, "after");
    let start = Instant::now();
    for rel in walk(&src) {
        let (from, to) = (src.join(&rel), host.join(&rel));
        if copy {
            let tmp = to.with_extension("palisade-tmp");
            std::fs::copy(&from, &tmp).map_err(|e| e.to_string())?;
            std::fs::rename(&tmp, &to).map_err(|e| e.to_string())?;
        } else {
            std::fs::rename(&from, &to).map_err(|e| e.to_string())?;
        }
    }
    let ns = start.elapsed().as_nanos() as f64;
    let probe = std::fs::read_to_string(host.join("d000/f00000.txt")).map_err(|e| e.to_string())?;
    if !probe.starts_with("after ") {
        return Err("the floor did not move the files".to_owned());
    }
    std::fs::remove_dir_all(&host).map_err(|e| e.to_string())?;
    std::fs::remove_dir_all(&src).map_err(|e| e.to_string())?;
    Ok(ns)
}

fn commit_bench(scratch: &Path, sizes: Sizes, runs: usize, warmup: usize) {
    let n = sizes.commit_files;
    let base = scratch.join("commit");
    std::fs::create_dir_all(&base).unwrap();
    print_value("commit_files", "files", n as f64);
    let names = [
        format!("commit_{n}_files"),
        format!("floor_rename_{n}_files"),
        format!("floor_copy_rename_{n}_files"),
    ];
    let mut samples = vec![Vec::new(); 3];
    let mut failed: Vec<Option<String>> = vec![None; 3];
    for round in 0..warmup + runs {
        for step in 0..3 {
            let s = (round + step) % 3;
            if failed[s].is_some() {
                continue;
            }
            let r = match s {
                0 => commit_once(&base, round, n),
                1 => floor_once(&base, round, n, false),
                _ => floor_once(&base, round, n, true),
            };
            match r {
                Ok(ns) if round >= warmup => samples[s].push(ns),
                Ok(_) => {}
                Err(e) => failed[s] = Some(e),
            }
        }
    }
    for (s, name) in names.iter().enumerate() {
        match &failed[s] {
            Some(why) => print_unavailable(name, why),
            None => print_samples(name, &mut samples[s]),
        }
    }
}

fn main() {
    let quick = std::env::var_os("PALISADE_BENCH_QUICK").is_some();
    let sizes = if quick { QUICK } else { FULL };
    let runs = env_usize("PALISADE_BENCH_RUNS").unwrap_or(if quick { 1 } else { 7 });
    let warmup = usize::from(!quick);
    if !nix::unistd::getuid().is_root() {
        eprintln!("staging bench: needs root (the worker runs as uid {DEFAULT_WORKER_UID})");
        std::process::exit(1);
    }
    // Under the target directory (governed masks /tmp's host view), open to
    // the worker's uid.
    let scratch = tempfile::Builder::new()
        .prefix("palisade-staging-bench")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("scratch directory");
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let scratch_path = scratch.path().canonicalize().unwrap();
    workloads_bench(&scratch_path, sizes, runs, warmup);
    commit_bench(&scratch_path, sizes, runs, warmup);
}
