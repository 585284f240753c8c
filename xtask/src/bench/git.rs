//! The git suite: what a `kind = "git"` relay (issue 18) costs a real
//! `git push`, from `palisade-egress`'s `git_push` bench target.
//!
//! A 50 MiB pack of random files pushed with real git to a fresh loopback
//! origin (TLS, `git http-backend`) three ways, the arms interleaved round
//! by round: directly, through the relay (library, a gate that allows every
//! outward action, reached over a loopback TCP to Unix socket bridge), and
//! through a plain loopback TCP copy (the floor). The goal: the relay at
//! most 1.2× the direct push.

use super::crates::{Figure, Unavailable};
use super::spawn::ns_row;
use super::stats::{Cmp, GoalCheck};
use super::{Ctx, SuiteResult};

/// The package and bench target that measure this suite.
pub(crate) const PACKAGE: &str = "palisade-egress";
pub(crate) const BENCH: &str = "git_push";

const DIRECT: &str = "git push directly to the origin";
const RELAY: &str = "palisade git relay";
const FLOOR: &str = "git push through a loopback TCP copy (floor)";
const ARMS: &[(&str, &str)] = &[
    ("push_direct", DIRECT),
    ("push_relay", RELAY),
    ("push_floor", FLOOR),
];

/// The relay may take at most this many times the direct push.
const RELAY_OVER_DIRECT: f64 = 1.2;

pub(crate) fn run(ctx: &Ctx) -> Result<SuiteResult, String> {
    let mut res = SuiteResult::default();
    let Some(bench) = ctx.crates.find(PACKAGE, BENCH) else {
        res.unavailable(
            RELAY,
            format!("{PACKAGE} has no `{BENCH}` bench target in this build"),
        );
        return Ok(res);
    };
    let mut env = Vec::new();
    if !ctx.opts.quick {
        // Three 50 MiB pushes a round: fewer rounds than the spawn suite's
        // runs, at least 5.
        env.push((
            "PALISADE_BENCH_RUNS",
            ctx.opts.runs.div_ceil(3).max(5).to_string(),
        ));
    }
    let (figs, missing) = ctx.crates.run_reporting(&bench, "git", &env)?;
    push(&mut res, &figs, &missing);
    Ok(res)
}

fn fact(figs: &[Figure], name: &str) -> Option<f64> {
    figs.iter()
        .find(|f| f.name == name && f.spread.is_none())
        .map(|f| f.value)
}

fn push(res: &mut SuiteResult, figs: &[Figure], missing: &[Unavailable]) {
    let n = |name| fact(figs, name).map_or_else(|| "?".to_owned(), |v| format!("{v:.0}"));
    let case = format!(
        "`git push` of a {} MiB pack ({} files of random bytes)",
        n("pack_mib"),
        n("pack_files")
    );
    for (name, subject) in ARMS {
        if let Some(f) = figs.iter().find(|f| f.name == *name)
            && let Some(mut row) = ns_row(&case, subject, f)
        {
            row.palisade = *name == "push_relay";
            res.rows.push(row);
        }
    }
    let median = |subject: &str| {
        res.rows
            .iter()
            .find(|r| r.subject == subject)
            .map(|r| r.summary.median)
    };
    if let (Some(r), Some(d)) = (median(RELAY), median(DIRECT))
        && d > 0.0
    {
        res.goals.push(GoalCheck {
            what: format!("median wall time relay / direct, {case}"),
            value: r / d,
            unit: "×".to_owned(),
            cmp: Cmp::Le,
            target: RELAY_OVER_DIRECT,
        });
    }
    res.notes.push(
        "The origin is `git http-backend` behind a loopback TLS server; git speaks plain HTTP \
         to the relay's bridge and the relay TLS to the origin, so the relay arm has one TLS \
         hop like the direct one. Each push is checked to have landed."
            .to_owned(),
    );
    for u in missing {
        let subject = ARMS
            .iter()
            .find(|(name, _)| *name == u.name)
            .map_or(u.name.as_str(), |(_, s)| s);
        res.unavailable(subject, u.reason.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(name: &str, median: f64) -> Figure {
        Figure {
            suite: "git".to_owned(),
            name: name.to_owned(),
            unit: "ns".to_owned(),
            value: median,
            spread: Some((median * 0.9, median * 1.1, 5)),
        }
    }

    #[test]
    fn the_relay_is_measured_against_the_direct_push() {
        let figs = vec![
            Figure {
                suite: "git".to_owned(),
                name: "pack_mib".to_owned(),
                unit: "MiB".to_owned(),
                value: 50.0,
                spread: None,
            },
            fig("push_direct", 2e9),
            fig("push_relay", 2.2e9),
            fig("push_floor", 2.1e9),
        ];
        let mut res = SuiteResult::default();
        push(&mut res, &figs, &[]);
        assert_eq!(res.rows.len(), 3);
        assert!(res.rows[0].case.contains("50 MiB"), "{}", res.rows[0].case);
        assert_eq!(
            res.rows.iter().filter(|r| r.palisade).count(),
            1,
            "only the relay is palisade's"
        );
        let goal = &res.goals[0];
        assert!((goal.value - 1.1).abs() < 1e-9, "{}", goal.value);
        assert!(goal.met());
    }
}
