//! The staging suite: what staged writes (issue 16) cost, from
//! `palisade-isolate`'s `staging` bench target.
//!
//! Three workloads inside one writable root (a `git clone` of a generated
//! repository, a `git status` in a checkout, a `cargo build` of a generated
//! crate), each timed on the host directly (the floor), in a `governed`
//! sandbox with direct writes, and in the same sandbox with the root
//! staged, the arms interleaved round by round. The goal: staged at most
//! 1.10× direct writes. Then the commit of 10,000 changed files (change
//! set, filter, commit, through the library) against the floor of moving
//! the same files with plain `std::fs`, with the goal of under 1 s.

use super::crates::{Figure, Unavailable};
use super::spawn::ns_row;
use super::stats::{Cmp, GoalCheck};
use super::{Ctx, SuiteResult};

/// The package and bench target that measure this suite.
pub(crate) const PACKAGE: &str = "palisade-isolate";
pub(crate) const BENCH: &str = "staging";

/// The arms, as the bench names them, and their subjects on the page.
const HOST: &str = "host, no sandbox (floor)";
const DIRECT: &str = "palisade direct writes";
const STAGED: &str = "palisade staged writes";
const ARMS: &[(&str, &str)] = &[("host", HOST), ("direct", DIRECT), ("staged", STAGED)];

/// The workloads the bench names (`true`: launch and teardown alone).
const WORKLOADS: &[&str] = &["true", "clone", "status", "build"];
/// The workloads the 10 % goal is about (the work, not the launch).
const GOAL_WORKLOADS: &[&str] = &["clone", "status", "build"];

/// Staged may take at most this many times direct writes.
const STAGED_OVER_DIRECT: f64 = 1.10;
/// Committing 10,000 files takes under this many ms.
const COMMIT_MS: f64 = 1000.0;
/// The commit size the absolute goal is about.
const COMMIT_GOAL_FILES: usize = 10_000;

pub(crate) fn run(ctx: &Ctx) -> Result<SuiteResult, String> {
    let mut res = SuiteResult::default();
    let Some(bench) = ctx.crates.find(PACKAGE, BENCH) else {
        res.unavailable(
            "palisade staged writes",
            format!("{PACKAGE} has no `{BENCH}` bench target in this build"),
        );
        return Ok(res);
    };
    let mut env = Vec::new();
    if !ctx.opts.quick {
        // Each round runs three builds and three clones per arm: fewer
        // rounds than the spawn suite's runs, at least 5.
        env.push((
            "PALISADE_BENCH_RUNS",
            ctx.opts.runs.div_ceil(3).max(5).to_string(),
        ));
    }
    let (figs, missing) = ctx.crates.run_reporting(&bench, "staging", &env)?;
    push(&mut res, &figs, &missing);
    Ok(res)
}

/// The sizes the bench printed, by name.
fn fact(figs: &[Figure], name: &str) -> Option<f64> {
    figs.iter()
        .find(|f| f.name == name && f.spread.is_none())
        .map(|f| f.value)
}

#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "file counts the bench printed as whole numbers"
)]
fn count(v: Option<f64>) -> Option<usize> {
    v.filter(|x| x.is_finite() && *x >= 0.0).map(|x| x as usize)
}

/// The case label of a workload.
fn case(workload: &str, figs: &[Figure]) -> String {
    let n = |name| count(fact(figs, name)).map_or_else(|| "?".to_owned(), |v| v.to_string());
    match workload {
        "clone" => format!(
            "`git clone --no-local` of a {}-file repository ({} commits)",
            n("fixture_repo_files"),
            n("fixture_repo_commits")
        ),
        "status" => "`git status` in a checkout of it".to_owned(),
        "true" => "`/bin/true` (launch and teardown only)".to_owned(),
        "build" => format!(
            "`cargo build --offline` of a crate of {} modules",
            n("fixture_crate_modules")
        ),
        other => other.to_owned(),
    }
}

fn commit_case(files: usize) -> String {
    format!("commit of {files} changed files")
}

/// The rows, goals, notes and "not measured" entries from the bench's lines.
fn push(res: &mut SuiteResult, figs: &[Figure], missing: &[Unavailable]) {
    for w in WORKLOADS {
        let case = case(w, figs);
        for (arm, subject) in ARMS {
            let name = format!("workload_{w}_{arm}");
            if let Some(f) = figs.iter().find(|f| f.name == name)
                && let Some(mut row) = ns_row(&case, subject, f)
            {
                // Direct writes are the reference staging is measured against.
                row.palisade = *arm == "staged";
                res.rows.push(row);
            }
            if let Some(u) = missing.iter().find(|u| u.name == name) {
                res.unavailable(&format!("{subject} ({case})"), u.reason.clone());
            }
        }
        let median = |subject: &str| {
            res.rows
                .iter()
                .find(|r| r.case == case && r.subject == subject)
                .map(|r| r.summary.median)
        };
        if GOAL_WORKLOADS.contains(w)
            && let (Some(s), Some(d)) = (median(STAGED), median(DIRECT))
            && d > 0.0
        {
            res.goals.push(GoalCheck {
                what: format!("median wall time staged / direct writes, {case}"),
                value: s / d,
                unit: "×".to_owned(),
                cmp: Cmp::Le,
                target: STAGED_OVER_DIRECT,
            });
        }
    }

    let files = count(fact(figs, "commit_files")).unwrap_or(0);
    let case = commit_case(files);
    let subjects = [
        (
            format!("commit_{files}_files"),
            "palisade Stage::changes + CommitFilter::check + Stage::commit",
        ),
        (
            format!("floor_rename_{files}_files"),
            "std::fs: walk + rename (floor)",
        ),
        (
            format!("floor_copy_rename_{files}_files"),
            "std::fs: walk + copy to a temporary name + rename (floor)",
        ),
    ];
    for (name, subject) in &subjects {
        if let Some(f) = figs.iter().find(|f| &f.name == name)
            && let Some(mut row) = ns_row(&case, subject, f)
        {
            // One unit for the three, so that they pair up as ratios.
            if row.unit == "µs" {
                row.unit = "ms".to_owned();
                for v in [
                    &mut row.summary.min,
                    &mut row.summary.median,
                    &mut row.summary.max,
                ] {
                    *v /= 1000.0;
                }
            }
            res.rows.push(row);
        }
        if let Some(u) = missing.iter().find(|u| &u.name == name) {
            res.unavailable(&format!("{subject} ({case})"), u.reason.clone());
        }
    }
    if files >= COMMIT_GOAL_FILES
        && let Some(row) = res
            .rows
            .iter()
            .find(|r| r.case == case && r.palisade && r.unit == "ms")
    {
        res.goals.push(GoalCheck {
            what: format!("{case}: median time of change set + filter + commit"),
            value: row.summary.median,
            unit: "ms".to_owned(),
            cmp: Cmp::Le,
            target: COMMIT_MS,
        });
    }
    // Anything else the bench could not run, under its own name.
    for u in missing {
        let known = WORKLOADS
            .iter()
            .flat_map(|w| ARMS.iter().map(move |(a, _)| format!("workload_{w}_{a}")))
            .chain(subjects.iter().map(|(n, _)| n.clone()))
            .any(|n| n == u.name);
        if !known {
            res.unavailable(&u.name, u.reason.clone());
        }
    }
    notes(res, figs, files);
}

fn notes(res: &mut SuiteResult, figs: &[Figure], files: usize) {
    let n = |name| count(fact(figs, name)).map_or_else(|| "?".to_owned(), |v| v.to_string());
    res.notes.push(format!(
        "Workloads: each timed from spawn to exit, in one writable root, in three arms interleaved \
         round by round (the order rotated each round): on the host directly, as root, by \
         `std::process::Command` (the floor); in a `governed` `Sandbox` with the root bound \
         writable (direct writes, `Sandbox::dangerous().disable(Layer::StagedWrites)`); and in the \
         same sandbox with the root staged (`Sandbox::stage_in`: an overlay whose lower layer is \
         the host root and whose upper layer is the stage). Every run starts from the same host \
         tree: what a direct or host run wrote is removed after it, untimed, and a staged run's \
         stage is removed, untimed, without committing (the commit is measured below). The \
         repository is generated once per run: {} files in {} commits, cloned with `--no-local` \
         (the pack transport, as from a remote) from outside the root; `git status` runs in a \
         checkout of it inside the root, its index settled on the host first; the crate has {} \
         modules, {} functions and no dependencies, built with the toolchain's own `cargo` (no \
         rustup proxy), debug profile, its target directory inside the root. `/bin/true` is \
         timed in the same three arms for launch and teardown alone (direct writes: the socket \
         walk of the root and its placeholders; staged: the stage's creation, its wait for the \
         file-system clock to tick and the overlay mount), without a goal. The same \
         environment in every arm (`PATH`, `RUSTC`, `CARGO_HOME`, a git config file with \
         `safe.directory = *`). **`cargo build` runs with seccomp disabled in both sandbox arms \
         alike**: Rust's `std::process::Command`, on its fork path (a `pre_exec` hook, which \
         cargo's jobserver uses), opens an `AF_UNIX` `SOCK_SEQPACKET` socketpair that \
         palisade's filter refuses, so under the default filter cargo cannot start rustc at all.",
        n("fixture_repo_files"),
        n("fixture_repo_commits"),
        n("fixture_crate_modules"),
        n("fixture_crate_functions"),
    ));
    res.notes.push(format!(
        "Commit: a host root of {files} small files (about 250 bytes each, 100 per directory) and \
         a fresh stage (`Stage::create`) whose upper layer holds a rewritten copy of every one, \
         written there directly by the harness as the overlay would have left them; timed: \
         `Stage::changes`, `CommitFilter::new().check` and `Stage::commit` with a recorder that \
         only counts (no journal), and the figure counts only if every file was applied with its \
         new content. The floors move the same trees with plain `std::fs` on the same file \
         system: a walk of the source tree and one `rename(2)` per file, or `std::fs::copy` to a \
         temporary name then `rename(2)`; none of them computes a digest or checks for conflicts, \
         which the commit does. Subjects interleaved round by round, setup untimed."
    ));
}

#[cfg(test)]
mod tests {
    use super::super::crates::{parse_lines, parse_unavailable};
    use super::super::report;
    use super::*;

    fn ns_line(name: &str, median_ms: f64) -> String {
        format!(
            "{{\"suite\":\"staging\",\"name\":\"{name}\",\"min_ns\":{},\"median_ns\":{},\"max_ns\":{},\"runs\":7}}\n",
            median_ms * 0.9e6,
            median_ms * 1e6,
            median_ms * 1.2e6
        )
    }

    fn sizes(commit_files: usize) -> String {
        format!(
            "{{\"suite\":\"staging\",\"name\":\"fixture_repo_files\",\"unit\":\"files\",\"value\":3000}}\n\
             {{\"suite\":\"staging\",\"name\":\"fixture_repo_commits\",\"unit\":\"commits\",\"value\":21}}\n\
             {{\"suite\":\"staging\",\"name\":\"fixture_crate_modules\",\"unit\":\"modules\",\"value\":8}}\n\
             {{\"suite\":\"staging\",\"name\":\"commit_files\",\"unit\":\"files\",\"value\":{commit_files}}}\n"
        )
    }

    fn result(text: &str) -> SuiteResult {
        let mut res = SuiteResult::default();
        push(&mut res, &parse_lines(text), &parse_unavailable(text));
        res
    }

    fn goal<'a>(res: &'a SuiteResult, what: &str) -> &'a GoalCheck {
        res.goals
            .iter()
            .find(|g| g.what.contains(what))
            .unwrap_or_else(|| panic!("no goal about {what}: {:?}", res.goals))
    }

    #[test]
    fn staged_is_held_to_ten_percent_over_direct_writes_not_over_the_host() {
        let text = sizes(10_000)
            + &ns_line("workload_clone_host", 50.0)
            + &ns_line("workload_clone_direct", 100.0)
            + &ns_line("workload_clone_staged", 109.0)
            + &ns_line("workload_status_host", 5.0)
            + &ns_line("workload_status_direct", 50.0)
            + &ns_line("workload_status_staged", 56.0)
            + &ns_line("workload_true_direct", 40.0)
            + &ns_line("workload_true_staged", 60.0);
        let res = result(&text);
        // Launch alone is a row, not a goal.
        assert!(res.rows.iter().any(|r| r.case.contains("/bin/true")));
        assert_eq!(res.goals.len(), 2, "{:?}", res.goals);
        let clone = goal(
            &res,
            "`git clone --no-local` of a 3000-file repository (21 commits)",
        );
        assert!((clone.value - 1.09).abs() < 1e-9, "{clone:?}");
        assert!(clone.met(), "1.09× is within 10 % of direct writes");
        assert_eq!((clone.cmp, clone.target), (Cmp::Le, 1.10));
        let status = goal(&res, "`git status`");
        assert!((status.value - 1.12).abs() < 1e-9, "{status:?}");
        assert!(!status.met(), "1.12× misses the 10 % goal");
        assert!(status.verdict().contains("missed"), "{}", status.verdict());
        // No build figures: no build goal rather than a vacuous one.
        assert!(!res.goals.iter().any(|g| g.what.contains("cargo build")));
        // The ratio table pairs staged with direct writes and with the host.
        let ratios = report::ratios(&res.rows);
        let pairs: Vec<(String, String, f64)> = ratios
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["case"].as_str().unwrap().contains("git clone"))
            .map(|r| {
                (
                    r["palisade"].as_str().unwrap().to_owned(),
                    r["peer"].as_str().unwrap().to_owned(),
                    r["ratio"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(pairs.len(), 2, "{pairs:?}");
        assert!(pairs.iter().all(|(p, _, _)| p == STAGED), "{pairs:?}");
        let over_host = pairs.iter().find(|(_, q, _)| q == HOST).unwrap();
        assert!((over_host.2 - 109.0 / 50.0).abs() < 1e-9, "{pairs:?}");
        let over_direct = pairs.iter().find(|(_, q, _)| q == DIRECT).unwrap();
        assert!((over_direct.2 - 1.09).abs() < 1e-9, "{pairs:?}");
    }

    #[test]
    fn an_arm_the_bench_could_not_run_is_listed_with_its_reason_and_checks_no_goal() {
        let text = sizes(10_000)
            + &ns_line("workload_clone_host", 50.0)
            + &ns_line("workload_clone_direct", 100.0)
            + "{\"suite\":\"staging\",\"name\":\"workload_clone_staged\",\"unavailable\":\"staged writes are not in this build\"}\n";
        let res = result(&text);
        assert!(res.goals.is_empty(), "{:?}", res.goals);
        let (subject, why) = res
            .unavailable
            .iter()
            .find(|(s, _)| s.starts_with(STAGED))
            .expect("the staged arm is listed as not measured");
        assert!(subject.contains("git clone"), "{subject}");
        assert_eq!(why, "staged writes are not in this build");
        // Positive control: with the staged figure the goal is checked.
        let text = text.replace(
            "{\"suite\":\"staging\",\"name\":\"workload_clone_staged\",\"unavailable\":\"staged writes are not in this build\"}\n",
            &ns_line("workload_clone_staged", 105.0),
        );
        let res = result(&text);
        assert!(res.unavailable.is_empty(), "{:?}", res.unavailable);
        assert!(goal(&res, "git clone").met());
    }

    #[test]
    fn the_commit_of_10000_files_is_held_to_one_second_and_paired_with_its_floors() {
        let text = sizes(10_000)
            + &ns_line("commit_10000_files", 900.0)
            + &ns_line("floor_rename_10000_files", 0.6)
            + &ns_line("floor_copy_rename_10000_files", 300.0);
        let res = result(&text);
        let g = goal(&res, "commit of 10000 changed files");
        assert_eq!((g.value, g.unit.as_str(), g.target), (900.0, "ms", 1000.0));
        assert!(g.met());
        // All three rows in ms, so the ratios pair the commit with each floor.
        assert!(
            res.rows
                .iter()
                .all(|r| r.unit == "ms" && r.case == "commit of 10000 changed files"),
            "{:?}",
            res.rows
        );
        let floor = res
            .rows
            .iter()
            .find(|r| r.subject.contains("walk + rename"))
            .unwrap();
        assert!((floor.summary.median - 0.6).abs() < 1e-9 && !floor.palisade);
        let ratios = report::ratios(&res.rows);
        assert_eq!(ratios.as_array().unwrap().len(), 2, "{ratios}");
        // Over a second misses.
        let res = result(&(sizes(10_000) + &ns_line("commit_10000_files", 1100.0)));
        assert!(!goal(&res, "commit of 10000").met());
        // A smoke run's few files check no absolute goal.
        let res = result(&(sizes(200) + &ns_line("commit_200_files", 50.0)));
        assert!(res.goals.is_empty(), "{:?}", res.goals);
        assert_eq!(res.rows.len(), 1);
    }
}
