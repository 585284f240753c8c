//! The spawn suite: the wall time of starting a command and waiting for it,
//! bare and under each sandbox, for `/bin/true` and a small real command.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::stats::{Better, Cmp, GoalCheck, Row};
use super::{Ctx, SuiteResult, sys};

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

/// How a subject wraps a command.
#[derive(Debug, Clone)]
struct Subject {
    name: String,
    /// The argv before the command.
    prefix: Vec<String>,
    samples: Vec<f64>,
    failed: Option<String>,
}

pub(crate) fn run(ctx: &Ctx) -> Result<SuiteResult, String> {
    let mut res = SuiteResult::default();
    let cwd = ctx.tmp.join("spawn-cwd");
    std::fs::create_dir_all(&cwd).map_err(|e| format!("{}: {e}", cwd.display()))?;
    let cwd = cwd.canonicalize().map_err(|e| e.to_string())?;
    let subjects = subjects(ctx, &cwd, &mut res)?;
    let stderr_log = ctx.tmp.join("spawn-stderr.log");

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
        for s in subs {
            if let Some(why) = s.failed {
                res.unavailable(&format!("{} ({case})", s.name), why);
            } else if let Some(row) = Row::new(case, &s.name, "ms", Better::Lower, &s.samples) {
                res.rows.push(row);
            }
        }
    }
    goals(&mut res);
    res.notes.push(format!(
        "Wall time from spawn to exit, {} runs per subject after {} warm-up runs, subjects alternated and the order rotated each round; run as uid {} in {}.",
        ctx.opts.runs,
        ctx.opts.warmup.max(1),
        current_uid(),
        cwd.display()
    ));
    crate_figures(ctx, &mut res);
    Ok(res)
}

fn subjects(ctx: &Ctx, cwd: &Path, res: &mut SuiteResult) -> Result<Vec<Subject>, String> {
    let mk = |name: &str, prefix: Vec<String>| Subject {
        name: name.to_owned(),
        prefix,
        samples: Vec::new(),
        failed: None,
    };
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
            subs.push(mk("bwrap", args));
        }
        None => res.unavailable("bwrap", "not installed (apt-get install bubblewrap)"),
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
    Ok(subs)
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
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .current_dir(cwd)
        .stdin(Stdio::null())
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
    let mut goals = Vec::new();
    for (case, _) in CASES {
        if let (Some(p), Some(b)) = (median(case, "palisade strict"), median(case, "bwrap"))
            && b > 0.0
        {
            goals.push(GoalCheck {
                what: format!("median wall time palisade strict / bwrap, `{case}`"),
                value: p / b,
                unit: "×".to_owned(),
                cmp: Cmp::Le,
                target: 1.0,
            });
        }
    }
    res.goals.extend(goals);
}

/// Figures from `palisade-isolate`'s own bench target, when it has one.
fn crate_figures(ctx: &Ctx, res: &mut SuiteResult) {
    for b in ctx.crates.for_suite("spawn") {
        match ctx.crates.run(&b, "spawn") {
            Ok(figs) => super::journal::push_figures(res, &figs),
            Err(e) => res.unavailable(&format!("{} bench", b.package), e),
        }
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
