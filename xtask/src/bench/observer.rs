//! The observer suite: what the read observer (issue 17) costs on a
//! read-heavy workload inside the sandbox, through `palisade run --policy`.
//!
//! Two workloads in one generated tree: `rg` over 100,000 small files (the
//! arm is not measured when `rg` is not installed) and `cat` of a 1 GiB file
//! to `/dev/null`. Three arms, interleaved round by round with the order
//! rotated: the same command on the host (the floor), a governed session
//! with the observer off (`taint.observe = "self_report"`), and the same
//! session with it on (the default `kernel`) and a marked file and a
//! routing glob inside the tree. The goal: observer on at most 1.05× off.
//! The "on" arm counts only when the session's `sandbox_status` says the
//! observer ran (`layers.read_observer`), never a session that silently
//! did without it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::stats::{Better, Cmp, GoalCheck, Row};
use super::{Ctx, SuiteResult, sys};

/// The arms on the page.
const HOST: &str = "host, no sandbox (floor)";
const OFF: &str = "palisade, observer off (self_report)";
const ON: &str = "palisade, observer on";

/// Observer on may take at most this many times observer off.
const ON_OVER_OFF: f64 = 1.05;
/// One run's upper bound (a hung run fails the suite rather than hang it).
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// The sizes of one run.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    files: usize,
    big_bytes: u64,
}

impl Sizes {
    fn of(quick: bool) -> Self {
        if quick {
            Self {
                files: 2_000,
                big_bytes: 32 << 20,
            }
        } else {
            Self {
                files: 100_000,
                big_bytes: 1 << 30,
            }
        }
    }
}

/// Removes the suite's scratch directory (the 1 GiB file with it) however
/// the suite ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn run(ctx: &Ctx) -> Result<SuiteResult, String> {
    let mut res = SuiteResult::default();
    let sizes = Sizes::of(ctx.opts.quick);
    let scratch = Scratch(ctx.tmp.join("observer"));
    let dir = scratch.0.clone();
    let tree = dir.join("tree");
    write_tree(&tree, sizes)?;
    let workloads = workloads(sizes, &mut res);
    let palisade = match ctx.palisade_with("run", "h-session") {
        Ok(bin) => Some(Session::new(&bin, &dir, &tree)?),
        Err(e) => {
            res.unavailable(OFF, e.clone());
            res.unavailable(ON, e);
            None
        }
    };
    // The observer must be seen running, or the "on" arm is not measured.
    let mut on_ok = palisade.is_some();
    if let Some(s) = &palisade {
        match s.observer_state() {
            Ok(state) if state == "active" || state.starts_with("degraded") => {
                res.notes.push(format!(
                    "The \"on\" arm's sandbox_status says `read_observer: {state}`."
                ));
            }
            Ok(state) => {
                on_ok = false;
                res.unavailable(
                    ON,
                    format!(
                        "the read observer did not run in this build (sandbox_status read_observer: {state}; merge branches `h-observe`, `h-session`)"
                    ),
                );
            }
            Err(e) => {
                on_ok = false;
                res.unavailable(ON, e);
            }
        }
    }
    for (case, argv) in &workloads {
        let mut arms: Vec<(&str, Vec<String>)> = vec![(HOST, argv.clone())];
        if let Some(s) = &palisade {
            arms.push((OFF, s.argv(Arm::Off, argv)));
            if on_ok {
                arms.push((ON, s.argv(Arm::On, argv)));
            }
        }
        let mut samples = Vec::new();
        for (subject, r) in measure(ctx, &tree, palisade.as_ref(), &arms) {
            match r {
                Ok(v) => samples.push((subject, v)),
                Err(e) => res.unavailable(&format!("{subject} ({case})"), e),
            }
        }
        push(&mut res, case, &samples);
    }
    res.notes.push(format!(
        "A generated tree of {} files (100 per directory, about 300 bytes each, one in ten \
         holding the word `needle`) plus a {} MiB file of pseudo-random bytes, all on the \
         harness's scratch file system. The sessions run `palisade run --profile governed \
         --cwd TREE --policy P` with the default staged writes (the tree is the overlay's \
         lower layer; nothing is written) and a journal per run, removed untimed after it. \
         Both policies mark `notes/untrusted.md` (`taint.marked`) and restrict `private/**` \
         (`[[routing]]`, providers `anthropic`), both inside the tree; they differ only in \
         `taint.observe`. Each figure is the wall time of the whole `palisade run` (launch, \
         the workload, the journal's close) or, for the floor, of the same command on the \
         host. {} measured runs per arm after {} warm-up round(s).",
        sizes.files,
        sizes.big_bytes >> 20,
        ctx.opts.runs,
        ctx.opts.warmup
    ));
    drop(scratch);
    Ok(res)
}

/// The workloads: a case label and the command (run in the tree).
fn workloads(sizes: Sizes, res: &mut SuiteResult) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let rg_case = format!(
        "`rg -c needle` over a {}-file tree (marked file and routed paths inside)",
        sizes.files
    );
    match Ctx::peer("rg") {
        Some(rg) => out.push((
            rg_case,
            vec![
                rg.display().to_string(),
                "--no-ignore".to_owned(),
                "--hidden".to_owned(),
                "--glob".to_owned(),
                "!big.bin".to_owned(),
                "--count".to_owned(),
                "needle".to_owned(),
                ".".to_owned(),
            ],
        )),
        None => res.unavailable(&rg_case, "rg not installed (apt-get install ripgrep)"),
    }
    out.push((
        format!("`cat` of a {} MiB file to /dev/null", sizes.big_bytes >> 20),
        vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            "cat big.bin > /dev/null".to_owned(),
        ],
    ));
    out
}

/// Rows for one case, and the goal when both palisade arms were measured.
fn push(res: &mut SuiteResult, case: &str, samples: &[(&str, Vec<f64>)]) {
    for (subject, s) in samples {
        if let Some(mut row) = Row::new(case, subject, "ms", Better::Lower, s) {
            // Observer off is the reference the "on" arm is measured against.
            row.palisade = *subject == ON;
            res.rows.push(row);
        }
    }
    let median = |subject: &str| {
        res.rows
            .iter()
            .find(|r| r.case == case && r.subject == subject)
            .map(|r| r.summary.median)
    };
    if let (Some(on), Some(off)) = (median(ON), median(OFF))
        && off > 0.0
    {
        res.goals.push(GoalCheck {
            what: format!("median wall time observer on / off, {case}"),
            value: on / off,
            unit: "×".to_owned(),
            cmp: Cmp::Le,
            target: ON_OVER_OFF,
        });
    }
}

/// Times every arm, interleaved, the order rotated each round; an arm that
/// fails is dropped (with its reason) and the others go on.
fn measure<'a>(
    ctx: &Ctx,
    tree: &Path,
    session: Option<&Session>,
    arms: &[(&'a str, Vec<String>)],
) -> Vec<(&'a str, Result<Vec<f64>, String>)> {
    let mut out: Vec<(&str, Result<Vec<f64>, String>)> =
        arms.iter().map(|(s, _)| (*s, Ok(Vec::new()))).collect();
    let n = arms.len();
    for round in 0..ctx.opts.warmup.saturating_add(ctx.opts.runs) {
        for k in 0..n {
            let i = (round + k) % n;
            let (Some((_, argv)), Some((_, Ok(v)))) = (arms.get(i), out.get_mut(i)) else {
                continue;
            };
            let r = time(tree, argv);
            if let Some(s) = session {
                s.clean();
            }
            match r {
                Ok(ms) if round >= ctx.opts.warmup => v.push(ms),
                Ok(_) => {}
                Err(e) => {
                    if let Some(slot) = out.get_mut(i) {
                        slot.1 = Err(e);
                    }
                }
            }
        }
    }
    out
}

fn time(cwd: &Path, argv: &[String]) -> Result<f64, String> {
    let (prog, args) = argv.split_first().ok_or("empty command")?;
    let start = Instant::now();
    let mut child = Command::new(prog)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{prog}: {e}"))?;
    let status = sys::wait_within(&mut child, RUN_LIMIT);
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let Some(status) = status else {
        return Err(format!("did not finish within {RUN_LIMIT:?}"));
    };
    if status.success() {
        Ok(ms)
    } else {
        let mut err = Vec::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_end(&mut e, &mut err);
        }
        Err(format!("exited with {status}: {}", sys::first_line(&err)))
    }
}

/// Which session arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arm {
    Off,
    On,
}

/// The palisade side: the binary, the policies, the key and the journal.
struct Session {
    bin: String,
    dir: PathBuf,
    tree: PathBuf,
    key: PathBuf,
    journal: PathBuf,
}

impl Session {
    fn new(bin: &Path, dir: &Path, tree: &Path) -> Result<Self, String> {
        let key = dir.join("journal.key");
        sys::journal_keygen(bin, &key)?;
        for arm in [Arm::Off, Arm::On] {
            let p = policy_path(dir, arm);
            std::fs::write(&p, policy(arm)).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        Ok(Self {
            bin: bin.display().to_string(),
            dir: dir.to_path_buf(),
            tree: tree.to_path_buf(),
            key,
            journal: dir.join("run.journal"),
        })
    }

    fn argv(&self, arm: Arm, cmd: &[String]) -> Vec<String> {
        let mut v: Vec<String> = [
            self.bin.as_str(),
            "run",
            "--profile",
            "governed",
            "--cwd",
            &self.tree.display().to_string(),
            "--policy",
            &policy_path(&self.dir, arm).display().to_string(),
            "--journal",
            &self.journal.display().to_string(),
            "--key",
            &self.key.display().to_string(),
            "--stage-dir",
            &self.dir.join("stages").display().to_string(),
            "--",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        v.extend(cmd.iter().cloned());
        v
    }

    /// Removes the last run's journal and its companions.
    fn clean(&self) {
        for suffix in ["", ".anchor", ".lock"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.journal.display()));
        }
    }

    /// Runs `cat notes/untrusted.md` in the "on" arm (untimed) and returns
    /// what its `sandbox_status` says of the read observer.
    fn observer_state(&self) -> Result<String, String> {
        let argv = self.argv(
            Arm::On,
            &["/bin/cat".to_owned(), "notes/untrusted.md".to_owned()],
        );
        let r = time(&self.tree, &argv);
        let text = std::fs::read_to_string(&self.journal).unwrap_or_default();
        self.clean();
        r.map_err(|e| format!("the observer-on session failed: {e}"))?;
        Ok(observer_layer(&text))
    }
}

/// The status of the `read_observer` layer in a journal's
/// `sandbox_status` (`layers` is a list of `{layer, status, detail}`), or
/// what is missing.
fn observer_layer(journal: &str) -> String {
    let Some(status) = journal
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r.get("kind").and_then(Value::as_str) == Some("sandbox_status"))
    else {
        return "no sandbox_status record".to_owned();
    };
    status
        .pointer("/body/layers")
        .and_then(Value::as_array)
        .and_then(|layers| {
            layers
                .iter()
                .find(|l| l.get("layer").and_then(Value::as_str) == Some("read_observer"))
        })
        .and_then(|l| l.get("status").and_then(Value::as_str))
        .unwrap_or("absent")
        .to_owned()
}

fn policy_path(dir: &Path, arm: Arm) -> PathBuf {
    dir.join(match arm {
        Arm::Off => "observer-off.toml",
        Arm::On => "observer-on.toml",
    })
}

fn policy(arm: Arm) -> String {
    let observe = match arm {
        Arm::Off => "observe = \"self_report\"\n",
        Arm::On => "",
    };
    format!(
        "[worker]\nprofile = \"governed\"\n\n[egress]\nallow = []\n\n[taint]\n{observe}\
         marked = [\"notes/untrusted.md\"]\n\n[[routing]]\npaths = [\"private/**\"]\n\
         providers = [\"anthropic\"]\n"
    )
}

/// The tree: `src/dNNNN/fNN.txt` (100 per directory), the marked file,
/// the routed files and `big.bin`.
fn write_tree(tree: &Path, sizes: Sizes) -> Result<(), String> {
    let err = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    for d in ["notes", "private"] {
        std::fs::create_dir_all(tree.join(d)).map_err(|e| err(&tree.join(d), e))?;
    }
    let w = |p: PathBuf, t: &str| std::fs::write(&p, t).map_err(|e| err(&p, e));
    w(tree.join("notes/untrusted.md"), "a marked file: needle\n")?;
    w(
        tree.join("private/secret-plan.md"),
        "routed to anthropic only: needle\n",
    )?;
    w(tree.join("private/x"), "restricted\n")?;
    let line = "lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor\n";
    for i in 0..sizes.files {
        let d = tree.join("src").join(format!("d{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&d).map_err(|e| err(&d, e))?;
        }
        let mut text = format!("file {i}\n{line}{line}{line}");
        if i % 10 == 0 {
            text.push_str("needle\n");
        }
        w(d.join(format!("f{:02}.txt", i % 100)), &text)?;
    }
    // 1 MiB of xorshift bytes, written over and over: real blocks, not a
    // sparse file, so `cat` reads what a real file would give it.
    let big = tree.join("big.bin");
    let mut f = std::fs::File::create(&big).map_err(|e| err(&big, e))?;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut chunk = vec![0u8; 1 << 20];
    for b in chunk.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for (o, v) in b.iter_mut().zip(x.to_le_bytes()) {
            *o = v;
        }
    }
    let mut left = sizes.big_bytes;
    while left > 0 {
        let n = usize::try_from(left.min(1 << 20)).unwrap_or(1 << 20);
        f.write_all(chunk.get(..n).unwrap_or_default())
            .map_err(|e| err(&big, e))?;
        left = left.saturating_sub(1 << 20);
    }
    f.sync_all().map_err(|e| err(&big, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::report;
    use super::*;

    fn samples(on: f64, off: f64) -> Vec<(&'static str, Vec<f64>)> {
        vec![
            (HOST, vec![80.0, 100.0, 120.0]),
            (OFF, vec![off * 0.9, off, off * 1.1]),
            (ON, vec![on * 0.9, on, on * 1.1]),
        ]
    }

    #[test]
    fn observer_on_is_held_to_five_percent_over_off_not_over_the_host() {
        let mut res = SuiteResult::default();
        push(&mut res, "cat", &samples(208.0, 200.0));
        assert_eq!(res.goals.len(), 1, "{:?}", res.goals);
        let g = &res.goals[0];
        assert!((g.value - 1.04).abs() < 1e-9, "{g:?}");
        assert!(g.met());
        // Positive control of the refusal: 6 % over misses the goal.
        let mut res = SuiteResult::default();
        push(&mut res, "cat", &samples(212.0, 200.0));
        assert!(!res.goals[0].met(), "{:?}", res.goals);
        // Ratios: on over off and over the host; off is a reference.
        let ratios = report::ratios(&res.rows);
        let peers: Vec<&str> = ratios
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["peer"].as_str().unwrap())
            .collect();
        assert_eq!(peers, [HOST, OFF], "{ratios}");
    }

    #[test]
    fn the_page_has_the_suite_its_ratios_and_its_goal() {
        let mut res = SuiteResult::default();
        push(&mut res, "`cat` of a 1024 MiB file", &samples(230.0, 200.0));
        res.unavailable(
            "`rg -c needle` over a 100000-file tree",
            "rg not installed (apt-get install ripgrep)",
        );
        let opts = super::super::Opts {
            quick: false,
            runs: 3,
            warmup: 1,
            release: true,
        };
        let tmp =
            std::env::temp_dir().join(format!("palisade-observer-page-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let results = serde_json::json!({
            "generated_at": "now",
            "suites": {"observer": res.to_json("observer", &opts, &tmp)},
        });
        report::write_page(&results, &tmp).unwrap();
        let page = std::fs::read_to_string(tmp.join("benchmarks.md")).unwrap();
        let _ = std::fs::remove_dir_all(&tmp);
        let section = page
            .split("### Suite `observer`")
            .nth(1)
            .unwrap_or_else(|| panic!("{page}"));
        assert!(
            section.contains(ON) && section.contains(OFF) && section.contains(HOST),
            "{section}"
        );
        assert!(section.contains("rg not installed"), "{section}");
        assert!(page.contains("observer on / off"), "{page}");
        assert!(page.contains("missed"), "1.15× misses the 5 % goal: {page}");
    }

    #[test]
    fn without_the_on_arm_no_goal_is_checked() {
        let mut res = SuiteResult::default();
        let mut s = samples(1.0, 200.0);
        s.pop();
        push(&mut res, "rg", &s);
        assert!(res.goals.is_empty(), "{:?}", res.goals);
        assert_eq!(res.rows.len(), 2);
    }

    #[test]
    fn the_observer_layer_is_read_from_sandbox_status() {
        let j = "{\"kind\":\"execution_started\",\"body\":{}}\n\
                 {\"kind\":\"sandbox_status\",\"body\":{\"layers\":[\
                 {\"layer\":\"user_ns\",\"status\":\"active\"},\
                 {\"layer\":\"read_observer\",\"status\":\"degraded (after the fact, not attributed)\"}]}}\n";
        assert_eq!(
            observer_layer(j),
            "degraded (after the fact, not attributed)"
        );
        assert_eq!(
            observer_layer(
                "{\"kind\":\"sandbox_status\",\"body\":{\"layers\":[{\"layer\":\"user_ns\",\"status\":\"active\"}]}}"
            ),
            "absent"
        );
        assert_eq!(observer_layer("not json\n"), "no sandbox_status record");
    }

    #[test]
    fn the_policies_differ_only_in_taint_observe() {
        let off = policy(Arm::Off);
        let on = policy(Arm::On);
        assert!(off.contains("observe = \"self_report\""));
        assert!(!on.contains("observe"));
        assert_eq!(off.replace("observe = \"self_report\"\n", ""), on);
        assert!(on.contains("marked = [\"notes/untrusted.md\"]"));
        assert!(on.contains("paths = [\"private/**\"]"));
    }
}
