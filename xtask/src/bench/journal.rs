//! The journal suite: palisade's journal bench (append unsynced and with
//! group commit, verify) alternated with the physical reference, a plain
//! `write` + `fdatasync` loop on the same file system, and a plain
//! sequential read for verify.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::crates::{CrateBenches, Figure};
use super::stats::{Better, Cmp, GoalCheck, Row};
use super::{Ctx, SuiteResult};

const RECORD: usize = 256;
const BATCHES: &[usize] = &[1, 16, 256];

pub(crate) fn run(ctx: &Ctx) -> Result<SuiteResult, String> {
    let mut res = SuiteResult::default();
    // The journal bench's tempfile lives in the temp dir; measure the same place.
    let dir = std::env::temp_dir().join(format!("palisade-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let benches = ctx.crates.for_suite("journal");
    if benches.is_empty() {
        res.unavailable(
            "palisade journal",
            format!(
                "palisade side not available yet: no bench target in {} (merge branch `evidence`)",
                CrateBenches::packages_of("journal").join(", ")
            ),
        );
    }
    let budget = if ctx.opts.quick {
        Duration::from_millis(100)
    } else {
        Duration::from_millis(1000)
    };
    // The journal bench is long (it syncs thousands of batches per figure),
    // so it repeats 3 times at the default 20 runs; each repeat is itself
    // many operations.
    let rounds = if ctx.opts.quick {
        1
    } else {
        (ctx.opts.runs / 7).clamp(3, 10)
    };
    let mut reference: Vec<(String, String, Vec<f64>)> = Vec::new();
    let mut palisade: Vec<Vec<Figure>> = Vec::new();
    let mut failed = Vec::new();
    for round in 0..rounds {
        // A B A B: the crate bench, then the reference, swapped every round.
        let order: [bool; 2] = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for crate_first in order {
            if crate_first {
                for b in &benches {
                    if failed.contains(&b.name) {
                        continue;
                    }
                    match ctx.crates.run(b, "journal") {
                        Ok(f) => palisade.push(f),
                        Err(e) => {
                            res.unavailable(&format!("palisade journal ({})", b.name), e);
                            failed.push(b.name.clone());
                        }
                    }
                }
            } else {
                for (name, unit, v) in reference_round(&dir, budget)? {
                    match reference.iter_mut().find(|(n, _, _)| *n == name) {
                        Some((_, _, s)) => s.push(v),
                        None => reference.push((name, unit, vec![v])),
                    }
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    for (name, unit, samples) in &reference {
        if let Some(row) = Row::new(
            name,
            "plain write/fdatasync/read loop",
            unit,
            Better::Higher,
            samples,
        ) {
            res.rows.push(row);
        }
    }
    let all: Vec<Figure> = palisade.into_iter().flatten().collect();
    push_figures(&mut res, &all);
    goals(&mut res);
    res.notes.push(format!(
        "Reference: {RECORD}-byte records written with one `write(2)` each to a file in {}, \
         unsynced, or with one `fdatasync` per batch of {BATCHES:?}; each figure runs for {} ms; \
         verify reference: one sequential read of a 64 MiB file from the page cache. {rounds} rounds, \
         palisade's bench and the reference alternated.",
        std::env::temp_dir().display(),
        budget.as_millis()
    ));
    Ok(res)
}

/// Case names shared by the reference and palisade's figures, so each
/// palisade figure lands in the row group of its physical reference.
fn reference_case(batch: Option<usize>) -> String {
    match batch {
        None => format!("append {RECORD} B unsynced"),
        Some(b) => format!("append {RECORD} B, sync every {b}"),
    }
}
const VERIFY_CASE: &str = "verify (read) throughput";

fn reference_round(dir: &Path, budget: Duration) -> Result<Vec<(String, String, f64)>, String> {
    let mut out = Vec::new();
    let path = dir.join("reference.log");
    let record = [0x42_u8; RECORD];
    let open = || {
        OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))
    };
    // Unsynced: write(2) per record.
    let mut f = open()?;
    out.push((
        reference_case(None),
        "records/s".to_owned(),
        rate(budget, 4096, |_| {
            f.write_all(&record).map_err(|e| e.to_string())
        })?,
    ));
    for &batch in BATCHES {
        let mut f = open()?;
        let r = rate(budget, batch, |i| {
            f.write_all(&record).map_err(|e| e.to_string())?;
            if (i + 1) % batch == 0 {
                f.sync_data().map_err(|e| e.to_string())?;
            }
            Ok(())
        })?;
        out.push((reference_case(Some(batch)), "records/s".to_owned(), r));
    }
    // Verify reference: read a 64 MiB file sequentially (page cache).
    let big = dir.join("reference-read.bin");
    {
        let f = open_for(&big)?;
        let chunk = vec![0x17_u8; 1 << 20];
        for i in 0..64_u64 {
            f.write_all_at(&chunk, i << 20).map_err(|e| e.to_string())?;
        }
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut f = File::open(&big).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let mut total = 0_u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    #[allow(clippy::cast_precision_loss, reason = "small sizes")]
    out.push((
        VERIFY_CASE.to_owned(),
        "MB/s".to_owned(),
        total as f64 / 1e6 / start.elapsed().as_secs_f64(),
    ));
    let _ = std::fs::remove_file(&big);
    let _ = std::fs::remove_file(&path);
    Ok(out)
}

fn open_for(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs `step(i)` in batches of `every` until `budget` is spent; returns
/// steps per second.
fn rate(
    budget: Duration,
    every: usize,
    mut step: impl FnMut(usize) -> Result<(), String>,
) -> Result<f64, String> {
    let start = Instant::now();
    let mut i = 0_usize;
    while start.elapsed() < budget || i == 0 {
        for _ in 0..every {
            step(i)?;
            i += 1;
        }
    }
    #[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
    Ok(i as f64 / start.elapsed().as_secs_f64())
}

/// Adds crate-bench figures as rows: figures with the same name across
/// rounds are one row (min, median, max over rounds; `*_ns` figures keep
/// their own min and max).
pub(crate) fn push_figures(res: &mut SuiteResult, figs: &[Figure]) {
    let mut names: Vec<&str> = Vec::new();
    for f in figs {
        if !names.contains(&f.name.as_str()) {
            names.push(&f.name);
        }
    }
    for name in names {
        let same: Vec<&Figure> = figs.iter().filter(|f| f.name == name).collect();
        let Some(first) = same.first() else { continue };
        let unit = first.unit.clone();
        // Rates (`records/s`, `MB/s`) grow; durations and sizes shrink.
        let better = if unit.contains('/') {
            Better::Higher
        } else {
            Better::Lower
        };
        let values: Vec<f64> = same.iter().map(|f| f.value).collect();
        let case = case_for(&first.suite, name);
        // A crate bench may print its own physical reference next to its
        // figures; that is a peer row, not palisade's.
        let reference = name.starts_with("reference");
        let subject = if reference {
            format!("{name} (crate bench)")
        } else {
            format!("palisade {name}")
        };
        let Some(mut row) = Row::new(&case, &subject, &unit, better, &values) else {
            continue;
        };
        row.palisade = !reference;
        let spreads: Vec<(f64, f64, u64)> = same.iter().filter_map(|f| f.spread).collect();
        if !spreads.is_empty() {
            row.summary.min = spreads.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
            row.summary.max = spreads
                .iter()
                .map(|s| s.1)
                .fold(f64::NEG_INFINITY, f64::max);
            row.summary.runs =
                usize::try_from(spreads.iter().map(|s| s.2).sum::<u64>()).unwrap_or(0);
        }
        readable_time(&mut row);
        res.rows.push(row);
    }
}

/// Shows nanosecond figures in ms or µs when they are that large.
fn readable_time(row: &mut Row) {
    if row.unit != "ns" {
        return;
    }
    let (unit, div) = if row.summary.median >= 1e6 {
        ("ms", 1e6)
    } else if row.summary.median >= 1e3 {
        ("µs", 1e3)
    } else {
        return;
    };
    row.unit = unit.to_owned();
    row.summary.min /= div;
    row.summary.median /= div;
    row.summary.max /= div;
}

/// Puts a journal figure next to its reference by its name:
/// `…unsynced…` → unsynced append, `…16…` with `batch`/`group`/`sync` → sync
/// every 16, `…verify…` → read throughput. Other figures keep their name.
fn case_for(suite: &str, name: &str) -> String {
    if suite != "journal" {
        return name.to_owned();
    }
    let lower = name.to_ascii_lowercase();
    if lower.contains("verify") {
        return VERIFY_CASE.to_owned();
    }
    if lower.contains("unsynced") || lower.contains("nosync") || lower.contains("no_sync") {
        return reference_case(None);
    }
    if lower.contains("batch") || lower.contains("group") || lower.contains("sync") {
        let mut numbers = batch_numbers(&lower);
        numbers.dedup();
        if let [b] = numbers.as_slice() {
            return reference_case(Some(*b));
        }
    }
    name.to_owned()
}

/// The numbers in a figure name that can be batch sizes: digit runs not
/// followed by `b` (`256B` is the record size, not a batch).
fn batch_numbers(name: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut digits = String::new();
    for c in name.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if !digits.is_empty()
            && c != 'b'
            && let Ok(n) = digits.parse::<usize>()
            && BATCHES.contains(&n)
        {
            out.push(n);
        }
        digits.clear();
    }
    out
}

fn goals(res: &mut SuiteResult) {
    let find = |case: &str| {
        res.rows
            .iter()
            .find(|r| r.palisade && r.case == case)
            .map(|r| (r.summary.median, r.unit.clone()))
    };
    let mut goals = Vec::new();
    for (case, target, what) in [
        (
            reference_case(None),
            1e6,
            "append rate unsynced, 256 B bodies",
        ),
        (
            reference_case(Some(16)),
            5e4,
            "append rate, group commit batches of 16",
        ),
        (VERIFY_CASE.to_owned(), 300.0, "verify throughput"),
    ] {
        if let Some((v, unit)) = find(&case) {
            goals.push(GoalCheck {
                what: what.to_owned(),
                value: v,
                unit,
                cmp: Cmp::Ge,
                target,
            });
        }
    }
    res.goals.extend(goals);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_figures_land_next_to_their_reference() {
        assert_eq!(
            case_for("journal", "append_unsynced_256B"),
            reference_case(None)
        );
        assert_eq!(
            case_for("journal", "append_group_commit_batch_16"),
            reference_case(Some(16))
        );
        assert_eq!(
            case_for("journal", "append_batch256_256B"),
            reference_case(Some(256))
        );
        assert_eq!(
            case_for("journal", "append_batch16_256B"),
            reference_case(Some(16))
        );
        assert_eq!(
            case_for("journal", "append_synced_batch_1"),
            reference_case(Some(1))
        );
        assert_eq!(case_for("journal", "verify_MBps"), VERIFY_CASE);
        assert_eq!(
            case_for("journal", "reference_write_fdatasync_every16_473B"),
            reference_case(Some(16))
        );
        assert_eq!(case_for("journal", "open"), "open");
        assert_eq!(case_for("check", "verify"), "verify");
    }

    #[test]
    fn a_crate_reference_is_a_peer_row() {
        let fig = |name: &str, value| Figure {
            suite: "journal".into(),
            name: name.into(),
            unit: "records/s".into(),
            value,
            spread: None,
        };
        let mut res = SuiteResult::default();
        push_figures(
            &mut res,
            &[
                fig("append_group_commit_batch16_256B", 10.0),
                fig("reference_write_fdatasync_every16_473B", 20.0),
                fig("append_group_commit_batch16_256B", 30.0),
            ],
        );
        assert_eq!(res.rows.len(), 2);
        let mut ns = Row::new("c", "palisade v", "ns", Better::Lower, &[2.5e7]).unwrap();
        readable_time(&mut ns);
        assert_eq!((ns.unit.as_str(), ns.summary.median), ("ms", 25.0));
        assert!(res.rows[0].palisade && !res.rows[1].palisade);
        assert_eq!(
            res.rows[0].summary.median, 20.0,
            "rounds of one figure form one row"
        );
        assert_eq!(res.rows[0].case, res.rows[1].case);
    }

    #[test]
    fn the_reference_loop_measures_something() {
        let dir = std::env::temp_dir().join(format!("xtask-ref-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let r = reference_round(&dir, Duration::from_millis(5)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(r.len(), 2 + BATCHES.len());
        assert!(r.iter().all(|(_, _, v)| *v > 0.0));
    }
}
