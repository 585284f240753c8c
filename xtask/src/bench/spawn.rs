//! The spawn suite: the wall time of starting a command and waiting for it,
//! bare and under each sandbox, for `/bin/true` and a small real command,
//! and the in-process launch (`Sandbox::spawn` from a Rust harness, against
//! bwrap started from that same harness) from `palisade-isolate`'s `launch`
//! bench target.
//!
//! The CLI's peer of record is bwrap with the same layers **and** the same
//! seccomp filter: palisade's own compiled program, written by the launch
//! bench (`--write-seccomp`) and handed to `bwrap --seccomp 0` on its
//! standard input, as sandbox-runtime and Codex deploy bwrap. Bare bwrap
//! stays as a reference row.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::crates::Figure;
use super::stats::{Better, Cmp, GoalCheck, Row};
use super::{Ctx, SuiteResult, sys};

/// The CLI goal's peer: bwrap with the same layers and palisade's filter.
const BWRAP_SECCOMP: &str = "bwrap + seccomp";

/// The in-process case and its two subjects.
const IN_PROCESS_CASE: &str = "/bin/true, in process (spawn + wait from a Rust harness)";
const IN_PROCESS_PALISADE: &str = "palisade Sandbox::spawn strict";
const IN_PROCESS_BWRAP: &str = "bwrap via std::process::Command";
/// The launch bench's figure names for them.
const FIG_SPAWN: &str = "launch_sandbox_spawn_strict";
const FIG_BWRAP: &str = "reference_bwrap_command";
const FIG_PROBE: &str = "launch_probe";

/// The commands measured, as (case label, argv).
const CASES: &[(&str, &[&str])] = &[
    ("/bin/true", &["/bin/true"]),
    (
        "sh -c 'ls /usr/bin | wc -l'",
        &["/bin/sh", "-c", "ls /usr/bin | wc -l"],
    ),
];

/// Directories masked with an empty tmpfs in the bwrap row (those that
/// exist), standing in for palisade's host masks.
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

/// The srt settings: read everywhere, write only the working directory, no
/// network destinations, as close to `strict` as srt can express.
const SRT_SETTINGS: &str = r#"{
  "filesystem": { "denyRead": [], "allowWrite": ["."], "denyWrite": [] },
  "network": { "allowedDomains": [], "deniedDomains": [] }
}
"#;

/// How long the harness waits, after a run, for the processes a subject
/// left in its process group before it kills them (see [`sys::drain_group`]).
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// How a subject wraps a command.
#[derive(Debug, Clone)]
struct Subject {
    name: String,
    /// The argv before the command.
    prefix: Vec<String>,
    /// A file for the command's standard input (bwrap's `--seccomp 0`).
    stdin: Option<PathBuf>,
    samples: Vec<f64>,
    failed: Option<String>,
}

pub(crate) fn run(ctx: &Ctx) -> Result<SuiteResult, String> {
    let mut res = SuiteResult::default();
    let cwd = ctx.tmp.join("spawn-cwd");
    std::fs::create_dir_all(&cwd).map_err(|e| format!("{}: {e}", cwd.display()))?;
    let cwd = cwd.canonicalize().map_err(|e| e.to_string())?;
    let (subjects, bwrap_argv) = subjects(ctx, &cwd, &mut res)?;
    let stderr_log = ctx.tmp.join("spawn-stderr.log");

    let mut survivors: Vec<Subject> = Vec::new();
    for (case, argv) in CASES {
        let mut subs = subjects.clone();
        // Warm-up, which also weeds out subjects that cannot run here.
        for s in &mut subs {
            for _ in 0..ctx.opts.warmup.max(1) {
                if let Err(e) = once(s, argv, &cwd, &stderr_log, true) {
                    s.failed = Some(e);
                    break;
                }
            }
        }
        // Measured rounds: every subject once per round, the order rotated.
        let n = subs.len();
        for round in 0..ctx.opts.runs {
            for k in 0..n {
                let Some(s) = subs.get_mut((round + k) % n) else {
                    continue;
                };
                if s.failed.is_some() {
                    continue;
                }
                match once(s, argv, &cwd, &stderr_log, false) {
                    Ok(ms) => s.samples.push(ms),
                    Err(e) => s.failed = Some(e),
                }
            }
        }
        if survivors.is_empty() {
            survivors = subs
                .iter()
                .filter(|s| s.failed.is_none())
                .cloned()
                .collect();
        }
        for s in subs {
            if let Some(why) = s.failed {
                res.unavailable(&format!("{} ({case})", s.name), why);
            } else if let Some(row) = Row::new(case, &s.name, "ms", Better::Lower, &s.samples) {
                res.rows.push(row);
            }
        }
    }
    goals(&mut res);
    if !ctx.opts.quick {
        hyperfine(ctx, &survivors, &cwd, &mut res);
    }
    res.notes.push(format!(
        "Wall time from spawn to exit, {} runs per subject after {} warm-up runs, subjects alternated and the order rotated each round; each run in its own process group, and the next run starts only once every process of that group has ended (processes a subject leaves behind are waited for up to 5 s, then killed; this wait is not timed); run as uid {} in {}.",
        ctx.opts.runs,
        ctx.opts.warmup.max(1),
        current_uid(),
        cwd.display()
    ));
    crate_figures(ctx, bwrap_argv.as_deref(), &mut res);
    Ok(res)
}

/// The subjects, and the bare bwrap argv (for the in-process bench).
fn subjects(
    ctx: &Ctx,
    cwd: &Path,
    res: &mut SuiteResult,
) -> Result<(Vec<Subject>, Option<Vec<String>>), String> {
    let mk = |name: &str, prefix: Vec<String>| Subject {
        name: name.to_owned(),
        prefix,
        stdin: None,
        samples: Vec::new(),
        failed: None,
    };
    let mut bwrap_argv = None;
    let mut subs = vec![mk("bare exec", Vec::new())];
    match ctx.palisade_with("run", "isolate") {
        Ok(bin) => {
            let bin = bin.display().to_string();
            let cwd = cwd.display().to_string();
            // The same work as the bwrap row: the working directory bound
            // writable and entered (`governed` makes its cwd writable itself).
            subs.push(mk(
                "palisade strict",
                strings(&[
                    &bin,
                    "run",
                    "--profile",
                    "strict",
                    "--writable",
                    &cwd,
                    "--cwd",
                    &cwd,
                    "--",
                ]),
            ));
            subs.push(mk(
                "palisade governed",
                strings(&[&bin, "run", "--profile", "governed", "--cwd", &cwd, "--"]),
            ));
        }
        Err(e) => {
            res.unavailable("palisade strict", e.clone());
            res.unavailable("palisade governed", e);
        }
    }
    match Ctx::peer("bwrap") {
        Some(bwrap) => {
            let (args, masks) = bwrap_args(&bwrap, cwd);
            res.notes.push(format!(
                "bwrap flags: `{}` ({masks} tmpfs masks).",
                args.get(1..).unwrap_or_default().join(" ")
            ));
            match seccomp_program(ctx).and_then(|bpf| {
                // The filter must be in force in the worker, or the row
                // would be bare bwrap under another name.
                let mode = seccomp_mode_under(&with_seccomp(&args), Some(&bpf), cwd)?;
                if mode == "2" {
                    Ok(bpf)
                } else {
                    Err(format!(
                        "the filter is not in force under `bwrap --seccomp 0` (Seccomp: {mode} in /proc/self/status)"
                    ))
                }
            }) {
                Ok(bpf) => {
                    res.notes.push(format!(
                        "{BWRAP_SECCOMP}: the same flags plus `--seccomp 0`, standard input \
                         open on palisade's compiled seccomp program ({} instructions, written \
                         by `palisade-isolate`'s launch bench), the filter `palisade run` installs.",
                        std::fs::metadata(&bpf).map_or(0, |m| m.len() / 8)
                    ));
                    subs.push(Subject {
                        stdin: Some(bpf),
                        ..mk(BWRAP_SECCOMP, with_seccomp(&args))
                    });
                }
                Err(e) => res.unavailable(BWRAP_SECCOMP, e),
            }
            bwrap_argv = Some(args.clone());
            subs.push(mk("bwrap", args));
        }
        None => {
            res.unavailable("bwrap", "not installed (apt-get install bubblewrap)");
            res.unavailable(
                BWRAP_SECCOMP,
                "bwrap not installed (apt-get install bubblewrap)",
            );
        }
    }
    match Ctx::peer("codex") {
        Some(codex) => match codex_prefix(&codex) {
            Ok(prefix) => {
                res.notes.push(format!(
                    "codex sandbox: `{}` (Codex's own Linux sandbox with its default policy).",
                    prefix.get(1..).unwrap_or_default().join(" ")
                ));
                subs.push(mk("codex sandbox", prefix));
            }
            Err(e) => res.unavailable("codex sandbox", e),
        },
        None => res.unavailable(
            "codex sandbox",
            "not installed (npm install -g @openai/codex@0.171.0)",
        ),
    }
    match Ctx::peer("srt") {
        Some(srt) => {
            let settings = ctx.tmp.join("srt-settings.json");
            std::fs::write(&settings, SRT_SETTINGS)
                .map_err(|e| format!("{}: {e}", settings.display()))?;
            res.notes.push(format!(
                "srt settings: `{}`.",
                SRT_SETTINGS
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
            subs.push(mk(
                "srt",
                strings(&[
                    &srt.display().to_string(),
                    "--settings",
                    &settings.display().to_string(),
                ]),
            ));
        }
        None => res.unavailable(
            "srt",
            "not installed (npm install -g @anthropic-ai/sandbox-runtime)",
        ),
    }
    match Ctx::peer("firejail") {
        Some(fj) => subs.push(mk(
            "firejail --noprofile",
            strings(&[&fj.display().to_string(), "--noprofile", "--quiet", "--"]),
        )),
        None => res.unavailable(
            "firejail --noprofile",
            "not installed (apt-get install firejail)",
        ),
    }
    Ok((subs, bwrap_argv))
}

/// The bwrap argv with `--seccomp 0` before the final `--`.
fn with_seccomp(args: &[String]) -> Vec<String> {
    let mut out = args.to_vec();
    let at = out.iter().rposition(|a| a == "--").unwrap_or(out.len());
    out.splice(at..at, ["--seccomp".to_owned(), "0".to_owned()]);
    out
}

/// Writes palisade's seccomp program with the launch bench and returns
/// the file.
fn seccomp_program(ctx: &Ctx) -> Result<PathBuf, String> {
    let bench = ctx.crates.find("palisade-isolate", "launch").ok_or(
        "palisade-isolate's launch bench is not built, so there is no seccomp program to hand over",
    )?;
    let file = ctx.tmp.join("palisade-seccomp.bpf");
    let out = sys::output_within(
        Command::new(&bench.exe).arg("--write-seccomp").arg(&file),
        Duration::from_secs(60),
    )?;
    if !out.status.success() {
        return Err(format!(
            "the launch bench wrote no seccomp program: {}",
            sys::first_line(&out.stderr)
        ));
    }
    match std::fs::metadata(&file) {
        Ok(m) if m.len() > 0 && m.len() % 8 == 0 => Ok(file),
        Ok(m) => Err(format!(
            "{}: {} bytes is not a sock_filter array",
            file.display(),
            m.len()
        )),
        Err(e) => Err(format!("{}: {e}", file.display())),
    }
}

/// The `Seccomp:` field of `/proc/self/status` of a shell run under
/// `prefix` (`0` none, `2` a filter).
fn seccomp_mode_under(
    prefix: &[String],
    stdin: Option<&Path>,
    cwd: &Path,
) -> Result<String, String> {
    let (program, rest) = prefix.split_first().ok_or("empty command")?;
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .args(["/bin/sh", "-c", "cat /proc/self/status"])
        .current_dir(cwd);
    let input = match stdin {
        Some(f) => Stdio::from(File::open(f).map_err(|e| format!("{}: {e}", f.display()))?),
        None => Stdio::null(),
    };
    let out = sys::output_within_from(&mut cmd, input, Duration::from_secs(60))?;
    if !out.status.success() {
        return Err(format!(
            "{program} exited with {}: {}",
            out.status,
            sys::first_line(&out.stderr)
        ));
    }
    seccomp_field(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| "no Seccomp: line in /proc/self/status".to_owned())
}

/// The value of the `Seccomp:` line of a `/proc/<pid>/status` text.
fn seccomp_field(status: &str) -> Option<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .map(|v| v.trim().to_owned())
}

/// `codex sandbox [linux] --`, whichever the installed version takes
/// (0.171 runs the Linux sandbox directly; older versions had a `linux`
/// subcommand).
fn codex_prefix(codex: &Path) -> Result<Vec<String>, String> {
    let out = sys::output_within(
        Command::new(codex).args(["sandbox", "--help"]),
        Duration::from_secs(30),
    )?;
    if !out.status.success() {
        return Err(format!(
            "`codex sandbox --help` failed: {}",
            sys::first_line(&out.stderr)
        ));
    }
    let help = String::from_utf8_lossy(&out.stdout);
    let codex = codex.display().to_string();
    Ok(if has_linux_subcommand(&help) {
        strings(&[&codex, "sandbox", "linux", "--"])
    } else {
        strings(&[&codex, "sandbox", "--"])
    })
}

/// Whether a `codex sandbox --help` text lists a `linux` subcommand.
fn has_linux_subcommand(help: &str) -> bool {
    let mut in_commands = false;
    for line in help.lines() {
        if line.starts_with("Commands:") {
            in_commands = true;
        } else if !line.starts_with(' ') && !line.is_empty() {
            in_commands = false;
        } else if in_commands && line.split_whitespace().next() == Some("linux") {
            return true;
        }
    }
    false
}

/// bwrap with the layers palisade's `strict` profile has: user, PID, net,
/// IPC and UTS namespaces, a read-only root, fresh `/proc`, minimal `/dev`,
/// a private `/tmp`, the working directory writable, host masks, a new
/// session, no capabilities, die with the parent.
fn bwrap_args(bwrap: &Path, cwd: &Path) -> (Vec<String>, usize) {
    let cwd = cwd.display().to_string();
    let mut args = strings(&[
        &bwrap.display().to_string(),
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
    ]);
    let mut masks = 1;
    for m in BWRAP_MASKS {
        // A mask over a directory that holds the working directory would hide it.
        if Path::new(m).is_dir() && !cwd.starts_with(m) {
            args.extend(strings(&["--tmpfs", m]));
            masks += 1;
        }
    }
    args.extend(strings(&["--bind", &cwd, &cwd, "--chdir", &cwd, "--"]));
    (args, masks)
}

/// Runs the command once under `s` and returns the wall time in ms.
fn once(s: &Subject, argv: &[&str], cwd: &Path, log: &Path, warmup: bool) -> Result<f64, String> {
    let full: Vec<&str> = s
        .prefix
        .iter()
        .map(String::as_str)
        .chain(argv.iter().copied())
        .collect();
    let (program, rest) = full.split_first().ok_or("empty command")?;
    let err = File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let stdin = match &s.stdin {
        Some(f) => Stdio::from(File::open(f).map_err(|e| format!("{}: {e}", f.display()))?),
        None => Stdio::null(),
    };
    let mut cmd = Command::new(program);
    // Its own process group, drained below once the time is taken.
    cmd.process_group(0)
        .args(rest)
        .current_dir(cwd)
        .stdin(stdin)
        .stdout(Stdio::null())
        .stderr(err);
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("{program}: {e}"))?;
    let status = if warmup {
        // The warm-up guards against a subject that hangs here.
        sys::wait_within(&mut child, Duration::from_secs(60))
            .ok_or_else(|| format!("{} did not finish within 60s", s.name))?
    } else {
        child.wait().map_err(|e| e.to_string())?
    };
    let elapsed = start.elapsed();
    sys::drain_group(child.id(), DRAIN_LIMIT);
    if !status.success() {
        let text = std::fs::read(log).unwrap_or_default();
        return Err(format!("exited with {status}: {}", sys::first_line(&text)));
    }
    Ok(elapsed.as_secs_f64() * 1000.0)
}

fn goals(res: &mut SuiteResult) {
    let median = |case: &str, subject: &str| {
        res.rows
            .iter()
            .find(|r| r.case == case && r.subject == subject)
            .map(|r| r.summary.median)
    };
    // The CLI against bwrap with the same layers and the same filter.
    let mut goals = Vec::new();
    if let Some((case, _)) = CASES.first()
        && let (Some(p), Some(b)) = (median(case, "palisade strict"), median(case, BWRAP_SECCOMP))
        && b > 0.0
    {
        goals.push(GoalCheck {
            what: format!("CLI: median wall time palisade strict / {BWRAP_SECCOMP}, `{case}`"),
            value: p / b,
            unit: "×".to_owned(),
            cmp: Cmp::Le,
            target: 1.0,
        });
    }
    res.goals.extend(goals);
}

/// The in-process goal: `Sandbox::spawn` against bwrap from the same harness.
fn in_process_goal(res: &mut SuiteResult) {
    let median = |subject: &str| {
        res.rows
            .iter()
            .find(|r| r.case == IN_PROCESS_CASE && r.subject == subject)
            .map(|r| r.summary.median)
    };
    if let (Some(p), Some(b)) = (median(IN_PROCESS_PALISADE), median(IN_PROCESS_BWRAP))
        && b > 0.0
    {
        res.goals.push(GoalCheck {
            what: format!(
                "in process: median {IN_PROCESS_PALISADE} / {IN_PROCESS_BWRAP}, `/bin/true`"
            ),
            value: p / b,
            unit: "×".to_owned(),
            cmp: Cmp::Le,
            target: 0.8,
        });
    }
}

/// Figures from `palisade-isolate`'s bench targets: the in-process launch
/// against bwrap with the very argv of the bwrap row, and any other figure.
fn crate_figures(ctx: &Ctx, bwrap_argv: Option<&[String]>, res: &mut SuiteResult) {
    let benches = ctx.crates.for_suite("spawn");
    if benches.is_empty() {
        res.unavailable(
            IN_PROCESS_PALISADE,
            "palisade-isolate has no launch bench target in this build",
        );
    }
    let mut env = Vec::new();
    if let Some(argv) = bwrap_argv {
        env.push(("PALISADE_BENCH_BWRAP", argv.join("\n")));
    }
    if !ctx.opts.quick {
        // Cheap runs: three times the CLI's count.
        env.push(("PALISADE_BENCH_RUNS", (ctx.opts.runs * 3).to_string()));
    }
    for b in benches {
        match ctx.crates.run_with_env(&b, "spawn", &env) {
            Ok(figs) => push_launch_figures(res, &figs),
            Err(e) => res.unavailable(&format!("{} bench", b.package), e),
        }
    }
    in_process_goal(res);
    if res.rows.iter().any(|r| r.case == IN_PROCESS_CASE) {
        res.notes.push(
            "In process: `palisade-isolate`'s launch bench spawns `/bin/true` with one `Sandbox` \
             under `strict` (the working directory bound writable and entered, the socket-walk \
             cache and placeholder records in a state directory, as `palisade run` sets them up) \
             and waits for it (`SandboxChild::wait`, which returns once the namespaces are torn \
             down), alternated A B A B with the bare bwrap row's argv spawned by \
             `std::process::Command` from the same process and waited for. The sandbox probes \
             the host's layers once up front (`Sandbox::reuse_probe`), as an embedder \
             launching many workers does; the `probe()` row is what a launch without it pays \
             on top."
                .to_owned(),
        );
    }
}

/// Rows from the launch bench's figures: the in-process pair in one case,
/// `probe()` in its own, anything else under its own name.
fn push_launch_figures(res: &mut SuiteResult, figs: &[Figure]) {
    let mut rest = Vec::new();
    for f in figs {
        let (case, subject) = match f.name.as_str() {
            FIG_SPAWN => (IN_PROCESS_CASE, IN_PROCESS_PALISADE),
            FIG_BWRAP => (IN_PROCESS_CASE, IN_PROCESS_BWRAP),
            FIG_PROBE => (
                "probe() of the host's layers, per launch",
                "palisade probe()",
            ),
            _ => {
                rest.push(f.clone());
                continue;
            }
        };
        if let Some(row) = ns_row(case, subject, f) {
            res.rows.push(row);
        }
    }
    super::journal::push_figures(res, &rest);
}

/// A row in ms (µs below 1 ms) from a `*_ns` figure.
pub(crate) fn ns_row(case: &str, subject: &str, f: &Figure) -> Option<Row> {
    let (min, max, runs) = f.spread?;
    let (unit, div) = if f.value >= 1e6 {
        ("ms", 1e6)
    } else {
        ("µs", 1e3)
    };
    let mut row = Row::new(case, subject, unit, Better::Lower, &[f.value / div])?;
    row.summary.min = min / div;
    row.summary.max = max / div;
    row.summary.runs = usize::try_from(runs).unwrap_or(0);
    Some(row)
}

/// An independent cross-check of the first case with hyperfine (`-N`, no
/// shell), when it is installed. hyperfine runs each command's runs in a
/// block, not alternated, so these rows are a sanity check of the harness's
/// own timing, not a replacement for it.
fn hyperfine(ctx: &Ctx, subjects: &[Subject], cwd: &Path, res: &mut SuiteResult) {
    let Some(hf) = Ctx::peer("hyperfine") else {
        res.unavailable(
            "hyperfine cross-check",
            "not installed (apt-get install hyperfine)",
        );
        return;
    };
    let Some((case, argv)) = CASES.first() else {
        return;
    };
    let json = ctx.tmp.join("hyperfine.json");
    let mut cmd = Command::new(hf);
    cmd.current_dir(cwd).args([
        "-N",
        "--style",
        "none",
        "--warmup",
        &ctx.opts.warmup.max(1).to_string(),
        "--runs",
        &ctx.opts.runs.to_string(),
        "--export-json",
        &json.display().to_string(),
    ]);
    // hyperfine cannot open a file on a command's standard input here.
    for s in subjects.iter().filter(|s| s.stdin.is_none()) {
        let words: Vec<String> = s
            .prefix
            .iter()
            .map(String::as_str)
            .chain(argv.iter().copied())
            .map(shell_quote)
            .collect();
        cmd.arg("-n").arg(&s.name).arg(words.join(" "));
    }
    let out = match sys::output_within(&mut cmd, Duration::from_secs(900)) {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            res.unavailable(
                "hyperfine cross-check",
                format!("hyperfine failed: {}", sys::first_line(&o.stderr)),
            );
            return;
        }
        Err(e) => {
            res.unavailable("hyperfine cross-check", e);
            return;
        }
    };
    drop(out);
    let parsed = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    let case = format!("{case} (hyperfine -N cross-check)");
    for r in parsed
        .as_ref()
        .and_then(|v| v.get("results"))
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = r
            .get("command")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("?");
        let times: Vec<f64> = r
            .get("times")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_f64)
            .map(|t| t * 1000.0)
            .collect();
        if let Some(row) = Row::new(&case, name, "ms", Better::Lower, &times) {
            res.rows.push(row);
        }
    }
}

/// Quotes a word for hyperfine's shell-words splitting.
fn shell_quote(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-=:,+@".contains(c))
    {
        w.to_owned()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

fn current_uid() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next().map(str::to_owned))
        })
        .unwrap_or_else(|| "?".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_hyperfine() {
        assert_eq!(shell_quote("/usr/bin/bwrap"), "/usr/bin/bwrap");
        assert_eq!(shell_quote("ls /usr/bin | wc -l"), "'ls /usr/bin | wc -l'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn bwrap_binds_the_cwd_and_never_masks_its_parent() {
        let (args, masks) = bwrap_args(Path::new("/usr/bin/bwrap"), Path::new("/home/u/w"));
        let line = args.join(" ");
        assert!(
            line.contains("--bind /home/u/w /home/u/w --chdir /home/u/w --"),
            "{line}"
        );
        assert!(!line.contains("--tmpfs /home "), "{line}");
        assert_eq!(line.matches("--tmpfs").count(), masks);
    }

    #[test]
    fn the_seccomp_flag_goes_before_the_command() {
        let (args, _) = bwrap_args(Path::new("/usr/bin/bwrap"), Path::new("/w"));
        let with = with_seccomp(&args);
        assert_eq!(with.len(), args.len() + 2);
        let tail: Vec<&str> = with
            .iter()
            .rev()
            .take(3)
            .rev()
            .map(String::as_str)
            .collect();
        assert_eq!(tail, ["--seccomp", "0", "--"]);
        // Nothing else moved.
        assert_eq!(with.get(..args.len() - 1), args.get(..args.len() - 1));
    }

    #[test]
    fn the_seccomp_mode_is_read_from_the_status_text() {
        let text = "Name:\tsh\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n";
        assert_eq!(seccomp_field(text).as_deref(), Some("2"));
        assert_eq!(seccomp_field("Name:\tsh\n"), None);
        // Live: this harness itself runs without a filter.
        let dir = std::env::temp_dir();
        let mode = seccomp_mode_under(&strings(&["/usr/bin/env"]), None, &dir).unwrap();
        assert_eq!(mode, "0");
    }

    #[test]
    fn codex_syntax_follows_its_help() {
        let new = "Run commands within a Codex-provided sandbox\n\nUsage: codex sandbox [OPTIONS] [COMMAND]...\n\n\
                   Commands:\n  uninstall  Remove the legacy Windows sandbox\n  help       Print this message\n\n\
                   Arguments:\n  [COMMAND]...\n";
        let old = "Usage: codex sandbox <COMMAND>\n\nCommands:\n  macos  Run under Seatbelt\n  \
                   linux  Run under Landlock+seccomp\n  help   Print this message\n\nOptions:\n  -h, --help\n";
        assert!(!has_linux_subcommand(new));
        assert!(has_linux_subcommand(old));
        // `linux` in prose outside the command list is not a subcommand.
        assert!(!has_linux_subcommand(
            "Options:\n  linux is mentioned here\n"
        ));
    }

    fn row(case: &str, subject: &str, median: f64) -> Row {
        Row::new(case, subject, "ms", Better::Lower, &[median]).unwrap()
    }

    #[test]
    fn the_cli_goal_is_against_bwrap_with_the_same_filter() {
        let mut res = SuiteResult::default();
        res.rows.push(row("/bin/true", "palisade strict", 5.0));
        res.rows.push(row("/bin/true", "bwrap", 4.0));
        res.rows.push(row("/bin/true", BWRAP_SECCOMP, 5.5));
        goals(&mut res);
        assert_eq!(res.goals.len(), 1, "{:?}", res.goals);
        let g = &res.goals[0];
        assert!(g.what.contains(BWRAP_SECCOMP), "{}", g.what);
        assert!((g.value - 5.0 / 5.5).abs() < 1e-9);
        assert!(g.met());
        // Without the seccomp row there is no CLI goal (bare bwrap is a reference only).
        let mut bare = SuiteResult::default();
        bare.rows.push(row("/bin/true", "palisade strict", 5.0));
        bare.rows.push(row("/bin/true", "bwrap", 4.0));
        goals(&mut bare);
        assert!(bare.goals.is_empty(), "{:?}", bare.goals);
    }

    #[test]
    fn the_in_process_goal_is_at_most_0_8_of_bwrap() {
        let figs = super::super::crates::parse_lines(
            "{\"suite\":\"spawn\",\"name\":\"launch_sandbox_spawn_strict\",\"min_ns\":3000000,\"median_ns\":3600000,\"max_ns\":5000000,\"runs\":60}\n\
             {\"suite\":\"spawn\",\"name\":\"reference_bwrap_command\",\"min_ns\":4000000,\"median_ns\":4000000,\"max_ns\":6000000,\"runs\":60}\n\
             {\"suite\":\"spawn\",\"name\":\"launch_probe\",\"min_ns\":90000,\"median_ns\":100000,\"max_ns\":300000,\"runs\":60}\n",
        );
        let mut res = SuiteResult::default();
        push_launch_figures(&mut res, &figs);
        in_process_goal(&mut res);
        let ours = res
            .rows
            .iter()
            .find(|r| r.subject == IN_PROCESS_PALISADE)
            .unwrap();
        assert_eq!((ours.unit.as_str(), ours.summary.median), ("ms", 3.6));
        assert_eq!((ours.summary.min, ours.summary.runs), (3.0, 60));
        assert!(ours.palisade);
        let peer = res
            .rows
            .iter()
            .find(|r| r.subject == IN_PROCESS_BWRAP)
            .unwrap();
        assert!(!peer.palisade && peer.case == ours.case);
        let probe = res
            .rows
            .iter()
            .find(|r| r.subject == "palisade probe()")
            .unwrap();
        assert_eq!((probe.unit.as_str(), probe.summary.median), ("µs", 100.0));
        assert_eq!(res.goals.len(), 1);
        let g = &res.goals[0];
        assert!((g.value - 0.9).abs() < 1e-9 && g.target == 0.8);
        assert!(!g.met(), "0.9× misses ≤ 0.8×");
    }

    #[test]
    fn a_failing_subject_is_reported_with_its_stderr() {
        let dir = std::env::temp_dir().join(format!("xtask-spawn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("err.log");
        let s = Subject {
            name: "fails".into(),
            prefix: strings(&["/bin/sh", "-c", "echo nope >&2; exit 3", "x"]),
            stdin: None,
            samples: Vec::new(),
            failed: None,
        };
        let err = once(&s, &["/bin/true"], &dir, &log, true).unwrap_err();
        assert!(err.contains("nope") && err.contains('3'), "{err}");
        // Positive control: the same wrapper shape that exits 0 is timed.
        let ok = Subject {
            prefix: strings(&["/bin/sh", "-c", "exec \"$@\"", "x"]),
            ..s
        };
        assert!(once(&ok, &["/bin/true"], &dir, &log, false).unwrap() > 0.0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
