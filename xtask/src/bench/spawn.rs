//! The spawn suite: the wall time of starting a command and waiting for it,
//! bare and under each sandbox, for `/bin/true` and a small real command.

use std::fs::File;
use std::os::unix::process::CommandExt;
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

/// How long the harness waits, after a run, for the processes a subject
/// left in its process group before it kills them (see [`sys::drain_group`]).
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

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
    // Its own process group, drained below once the time is taken.
    cmd.process_group(0)
        .args(rest)
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
    for s in subjects {
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
    fn a_failing_subject_is_reported_with_its_stderr() {
        let dir = std::env::temp_dir().join(format!("xtask-spawn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("err.log");
        let s = Subject {
            name: "fails".into(),
            prefix: strings(&["/bin/sh", "-c", "echo nope >&2; exit 3", "x"]),
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
