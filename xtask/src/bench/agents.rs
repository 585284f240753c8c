//! The agents suite: per agent (Claude Code, Codex, OpenCode, Pi), one
//! turn run directly against a fake provider on loopback and the same
//! turn governed (`palisade run --policy P --agent NAME`, through the
//! relay to the same fake), interleaved, plus the floor
//! (`palisade run --policy P -- /bin/true`, the session's fixed cost).
//!
//! The measuring is the ignored test `cli/tests/agents_bench.rs` (it
//! reuses the agent suite's fakes without copying them); this suite runs
//! it with `--nocapture` and reads its `PALISADE-BENCH {json}` lines. The
//! agent CLIs come from `PALISADE_AGENTS_BIN`, else
//! `target/agents/npm/node_modules/.bin` (`cargo xtask agents` installs
//! them there).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::stats::{self, Better, Cmp, GoalCheck, Row};
use super::{Ctx, SuiteResult};

/// The agents, in the order they are measured.
const AGENTS: &[&str] = &["claude", "codex", "opencode", "pi"];
/// Issue 19's goal: the governed turn at most this many ms over the direct.
const GOAL_MS: f64 = 40.0;
const PREFIX: &str = "PALISADE-BENCH ";

/// The directory of the agent CLIs, or why there is none.
fn agents_bin(
    root: &std::path::Path,
    from_env: Option<std::ffi::OsString>,
) -> Result<PathBuf, String> {
    let dir = from_env.map_or_else(
        || root.join("target/agents/npm/node_modules/.bin"),
        PathBuf::from,
    );
    let missing: Vec<&str> = AGENTS
        .iter()
        .copied()
        .filter(|a| !dir.join(a).exists())
        .collect();
    if missing.is_empty() {
        Ok(dir)
    } else {
        Err(format!(
            "agent CLIs missing in {} ({}): run `cargo xtask agents` (installs them under target/agents/npm) \
             or set PALISADE_AGENTS_BIN",
            dir.display(),
            missing.join(", ")
        ))
    }
}

/// Runs the suite. `explicit` is whether `agents` was named on the command
/// line: then missing agent CLIs (or not being root) are an error, not a
/// "not measured" line. An agent whose turn failed is "not measured" with
/// the reason, and the other agents are still measured.
pub(crate) fn run(ctx: &Ctx, explicit: bool) -> Result<SuiteResult, String> {
    let mut res = SuiteResult::default();
    let root = crate::workspace_root();
    let bin = match agents_bin(&root, std::env::var_os("PALISADE_AGENTS_BIN")) {
        Ok(b) => b,
        Err(e) if explicit => return Err(e),
        Err(e) => {
            res.unavailable("agents", e);
            return Ok(res);
        }
    };
    if !is_root() {
        let e = "the agent bench runs as root (the governed session needs it)".to_owned();
        if explicit {
            return Err(e);
        }
        res.unavailable("agents", e);
        return Ok(res);
    }
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(&root)
        .args(["test", "-p", "palisade-cli", "--test", "agents_bench"]);
    if ctx.opts.release {
        cmd.arg("--release");
    }
    cmd.args([
        "--",
        "--ignored",
        "--nocapture",
        "--exact",
        "governed_turn_overhead",
    ])
    .env("PALISADE_AGENTS_BIN", &bin)
    .env("PALISADE_BENCH_TURNS", ctx.opts.runs.to_string())
    .env("PALISADE_BENCH_AGENTS", AGENTS.join(" "));
    eprintln!(
        "bench: agents: {} turns per subject and agent",
        ctx.opts.runs
    );
    let out = cmd
        .output()
        .map_err(|e| format!("cargo test --test agents_bench: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let errors = parse(&stdout, &mut res)?;
    if !out.status.success() && errors == 0 {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
        return Err(format!(
            "cargo test --test agents_bench failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    goals(&mut res);
    res.notes.push(format!(
        "Per agent, {} rounds after one warm-up round, each round running the direct turn, the governed turn and the floor in a rotated order. \
         Direct: the agent CLI on the host as root with the preset's environment and files (rendered with the fake's plain `http://127.0.0.1` URL and the real key) in a HOME of its own, kept across turns. \
         Governed: `palisade run --policy P --agent NAME` (profile `governed`, `--writes direct`, a new journal per turn, the agent's state directory kept across turns) through the preset's relay to the same fake behind a loopback TLS front (relays dial only `https://`), so the governed turn also pays one TLS handshake to the front. \
         Floor: `palisade run --policy P -- /bin/true` with the same policy, the session's fixed cost; the governed turn minus the direct turn minus the floor is what the relay and the preset cost per turn. \
         Claude Code and Pi get a text-only turn (`-p hi`); the OpenAI fake answers Codex and OpenCode, whose requests always offer a shell tool, with one tool call (`true`) and then the final text, so their turn is two requests. \
         Wall clock of the whole process, `timeout 120` around both sides; medians and p90 (nearest rank). Compare figures only within one run: the machine drifts 5-10% from hour to hour.",
        ctx.opts.runs
    ));
    Ok(res)
}

/// Reads the `PALISADE-BENCH` lines of the test's output into rows (one
/// per agent and subject, with p90) and "not measured" entries; returns
/// how many agents failed.
fn parse(stdout: &str, res: &mut SuiteResult) -> Result<usize, String> {
    let mut errors = 0_usize;
    for line in stdout.lines() {
        let Some(json) = line.strip_prefix(PREFIX) else {
            continue;
        };
        let v: Value =
            serde_json::from_str(json).map_err(|e| format!("agents_bench line {json:?}: {e}"))?;
        let agent = v.get("agent").and_then(Value::as_str).unwrap_or("?");
        if let Some(why) = v.get("error").and_then(Value::as_str) {
            res.unavailable(agent, why);
            errors += 1;
            continue;
        }
        let subject = v.get("subject").and_then(Value::as_str).unwrap_or("?");
        let ms: Vec<f64> = v
            .get("ms")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        let name = match subject {
            "governed" => "palisade governed",
            "floor" => "palisade floor",
            _ => "direct",
        };
        let case = if subject == "floor" {
            format!("{agent}: /bin/true")
        } else {
            format!("{agent}: one turn")
        };
        if let Some(mut row) = Row::new(&case, name, "ms", Better::Lower, &ms) {
            let s = stats::sorted(&ms);
            if let Some(p90) = stats::quantile(&s, 0.9) {
                row.extra.push(("p90".to_owned(), p90));
            }
            res.rows.push(row);
        }
    }
    Ok(errors)
}

/// Issue 19's goal per agent: median governed − median direct ≤ 40 ms, and
/// the same with the floor taken off (the per-turn relay cost).
fn goals(res: &mut SuiteResult) {
    let median = |case: &str, subject: &str| {
        res.rows
            .iter()
            .find(|r| r.case == case && r.subject == subject)
            .map(|r| r.summary.median)
    };
    let mut goals = Vec::new();
    for agent in AGENTS {
        let turn = format!("{agent}: one turn");
        let (Some(g), Some(d)) = (median(&turn, "palisade governed"), median(&turn, "direct"))
        else {
            continue;
        };
        goals.push(GoalCheck {
            what: format!("{agent}: median governed turn − median direct turn"),
            value: g - d,
            unit: "ms".to_owned(),
            cmp: Cmp::Le,
            target: GOAL_MS,
        });
        if let Some(floor) = median(&format!("{agent}: /bin/true"), "palisade floor") {
            goals.push(GoalCheck {
                what: format!(
                    "{agent}: median governed turn − median direct turn − median floor (per-turn relay and preset cost)"
                ),
                value: g - d - floor,
                unit: "ms".to_owned(),
                cmp: Cmp::Le,
                target: GOAL_MS,
            });
        }
    }
    res.goals.extend(goals);
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_become_rows_and_goals_and_errors_not_measured() {
        let out = "noise\n\
            PALISADE-BENCH {\"agent\":\"claude\",\"subject\":\"direct\",\"ms\":[100.0,110.0,120.0]}\n\
            PALISADE-BENCH {\"agent\":\"claude\",\"subject\":\"governed\",\"ms\":[150.0,160.0,170.0]}\n\
            PALISADE-BENCH {\"agent\":\"claude\",\"subject\":\"floor\",\"ms\":[30.0,30.0,30.0]}\n\
            PALISADE-BENCH {\"agent\":\"pi\",\"error\":\"pi governed: exit status: 1\"}\n";
        let mut res = SuiteResult::default();
        assert_eq!(parse(out, &mut res), Ok(1));
        assert_eq!(res.rows.len(), 3);
        let g = res
            .rows
            .iter()
            .find(|r| r.subject == "palisade governed")
            .map(|r| (r.case.clone(), r.summary.median));
        assert_eq!(g, Some(("claude: one turn".to_owned(), 160.0)));
        assert_eq!(res.unavailable.len(), 1);
        assert_eq!(res.unavailable.first().map(|u| u.0.as_str()), Some("pi"));
        goals(&mut res);
        // 160 - 110 = 50 ms: over the 40 ms goal; minus the floor, 20 ms: met.
        let v: Vec<(f64, bool)> = res.goals.iter().map(|g| (g.value, g.met())).collect();
        assert_eq!(v, vec![(50.0, false), (20.0, true)]);
    }

    #[test]
    fn a_malformed_line_is_an_error() {
        let mut res = SuiteResult::default();
        assert!(parse("PALISADE-BENCH {not json", &mut res).is_err());
        assert!(res.rows.is_empty());
    }

    #[test]
    fn missing_agent_clis_are_named_with_the_way_to_install_them() {
        let dir = std::env::temp_dir().join(format!("agents-bench-{}", std::process::id()));
        let bin = dir.join("target/agents/npm/node_modules/.bin");
        assert!(std::fs::create_dir_all(&bin).is_ok());
        let err = agents_bin(&dir, None);
        assert!(
            err.as_ref()
                .is_err_and(|e| e.contains("cargo xtask agents") && e.contains("claude")),
            "{err:?}"
        );
        // Control: with the four CLIs there, the default directory is used.
        for a in AGENTS {
            assert!(std::fs::write(bin.join(a), "").is_ok());
        }
        assert_eq!(agents_bin(&dir, None), Ok(bin.clone()));
        // PALISADE_AGENTS_BIN wins over the default.
        assert!(agents_bin(&dir, Some(dir.join("elsewhere").into())).is_err());
        assert!(std::fs::remove_dir_all(&dir).is_ok());
    }
}
