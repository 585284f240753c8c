//! The crates' own bench targets (`[[bench]]` with `harness = false`): found
//! with `cargo metadata`, built once, run by the suites, and their JSON
//! lines parsed.
//!
//! The agreed line format is one JSON object per line, either
//! `{"suite":"journal","name":"append_unsynced_256B","unit":"records/s","value":123.0}`
//! or `{"suite":…,"name":…,"min_ns":…,"median_ns":…,"max_ns":…,"runs":…}`.
//! A bench that cannot measure a subject says so with
//! `{"suite":…,"name":…,"unavailable":"why"}`, which the suite lists as not
//! measured. Other lines are ignored. `PALISADE_BENCH_QUICK=1` is set in `--quick`
//! runs so a bench can shrink its work.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::{Opts, sys};

/// Which packages' bench targets feed which suite.
const PACKAGES: &[(&str, &str)] = &[
    ("spawn", "palisade-isolate"),
    ("proxy", "palisade-egress"),
    ("journal", "palisade-evidence"),
    ("ship", "palisade-evidence"),
    ("check", "palisade-schema"),
    ("check", "palisade-policy"),
    ("staging", "palisade-isolate"),
    ("git", "palisade-egress"),
];

/// Bench targets that feed only the suite named here, not every suite of
/// their package, and are that suite's only benches of the package:
/// (package, bench, suite).
const DEDICATED: &[(&str, &str, &str)] = &[
    ("palisade-isolate", "staging", "staging"),
    ("palisade-egress", "git_push", "git"),
    ("palisade-evidence", "ship", "ship"),
];

/// Whether `bench` of `package` feeds `suite`.
fn feeds(package: &str, bench: &str, suite: &str) -> bool {
    match DEDICATED
        .iter()
        .find(|(p, b, _)| *p == package && *b == bench)
    {
        Some((_, _, only)) => *only == suite,
        None => {
            PACKAGES.iter().any(|(s, p)| *s == suite && *p == package)
                && !DEDICATED
                    .iter()
                    .any(|(p, _, s)| *p == package && *s == suite)
        }
    }
}

/// One built bench executable.
#[derive(Clone, Debug)]
pub(crate) struct CrateBench {
    pub(crate) package: String,
    pub(crate) name: String,
    pub(crate) exe: PathBuf,
}

/// The bench executables per suite, and why a suite has none.
#[derive(Debug, Default)]
pub(crate) struct CrateBenches {
    benches: Vec<(String, CrateBench)>,
    quick: bool,
}

/// One figure printed by a crate bench.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Figure {
    pub(crate) suite: String,
    pub(crate) name: String,
    pub(crate) unit: String,
    /// `value` lines: the value; `*_ns` lines: the median.
    pub(crate) value: f64,
    /// `*_ns` lines: (min, max, runs).
    pub(crate) spread: Option<(f64, f64, u64)>,
}

impl CrateBenches {
    /// Finds and builds the bench targets of the packages the `suites` use.
    pub(crate) fn build(root: &Path, opts: &Opts, suites: &[&str]) -> Result<Self, String> {
        let mut me = Self {
            benches: Vec::new(),
            quick: opts.quick,
        };
        let wanted: Vec<&str> = PACKAGES
            .iter()
            .filter(|(s, _)| suites.contains(s))
            .map(|(_, p)| *p)
            .collect();
        let with_benches = packages_with_benches(root)?;
        for package in wanted {
            if !with_benches.iter().any(|p| p == package) {
                continue;
            }
            let mut cmd = crate::cargo(root);
            if opts.release {
                cmd.args(["bench", "--no-run"]);
            } else {
                cmd.args(["build", "--benches"]);
            }
            cmd.args(["-p", package, "--message-format=json-render-diagnostics"]);
            eprintln!("xtask: running {cmd:?}");
            let out = cmd
                .stderr(std::process::Stdio::inherit())
                .output()
                .map_err(|e| format!("{cmd:?}: {e}"))?;
            if !out.status.success() {
                return Err(format!("building the benches of {package} failed"));
            }
            for exe in bench_executables(&out.stdout, package) {
                for (suite, _) in PACKAGES {
                    if feeds(package, &exe.name, suite)
                        && !me
                            .benches
                            .iter()
                            .any(|(s, b)| s == suite && b.exe == exe.exe)
                    {
                        me.benches.push(((*suite).to_owned(), exe.clone()));
                    }
                }
            }
        }
        Ok(me)
    }

    /// The bench executables feeding `suite`.
    pub(crate) fn for_suite(&self, suite: &str) -> Vec<CrateBench> {
        self.benches
            .iter()
            .filter(|(s, _)| s == suite)
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// The packages that would feed `suite`, for "not available" messages.
    pub(crate) fn packages_of(suite: &str) -> Vec<&'static str> {
        PACKAGES
            .iter()
            .filter(|(s, _)| *s == suite)
            .map(|(_, p)| *p)
            .collect()
    }

    /// The bench executable `name` of `package`, if it was built: the
    /// suites also use some bench binaries as helpers (the proxy floor, the
    /// seccomp program for bwrap).
    pub(crate) fn find(&self, package: &str, name: &str) -> Option<CrateBench> {
        self.benches
            .iter()
            .map(|(_, b)| b)
            .find(|b| b.package == package && b.name == name)
            .cloned()
    }

    /// Runs one bench executable and returns its figures for `suite`.
    pub(crate) fn run(&self, bench: &CrateBench, suite: &str) -> Result<Vec<Figure>, String> {
        self.run_with_env(bench, suite, &[])
    }

    /// [`CrateBenches::run`] with extra environment variables.
    pub(crate) fn run_with_env(
        &self,
        bench: &CrateBench,
        suite: &str,
        env: &[(&str, String)],
    ) -> Result<Vec<Figure>, String> {
        self.run_reporting(bench, suite, env).map(|(f, _)| f)
    }

    /// [`CrateBenches::run_with_env`], also returning the subjects the bench
    /// said it could not measure.
    pub(crate) fn run_reporting(
        &self,
        bench: &CrateBench,
        suite: &str,
        env: &[(&str, String)],
    ) -> Result<(Vec<Figure>, Vec<Unavailable>), String> {
        let mut cmd = Command::new(&bench.exe);
        cmd.arg("--bench");
        for (k, v) in env {
            cmd.env(k, v);
        }
        if self.quick {
            cmd.env("PALISADE_BENCH_QUICK", "1");
        }
        let limit = Duration::from_secs(if self.quick { 120 } else { 900 });
        let out = sys::output_within(&mut cmd, limit)?;
        if !out.status.success() {
            return Err(format!(
                "bench {} of {} failed ({}): {}",
                bench.name,
                bench.package,
                out.status,
                sys::first_line(&out.stderr)
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        Ok((
            parse_lines(&text)
                .into_iter()
                .filter(|f| f.suite == suite)
                .collect(),
            parse_unavailable(&text)
                .into_iter()
                .filter(|u| u.suite == suite)
                .collect(),
        ))
    }
}

fn packages_with_benches(root: &Path) -> Result<Vec<String>, String> {
    let out = sys::output_within(
        crate::cargo(root).args(["metadata", "--no-deps", "--format-version", "1"]),
        Duration::from_secs(120),
    )?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            sys::first_line(&out.stderr)
        ));
    }
    let meta: Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata: {e}"))?;
    let mut names = Vec::new();
    for pkg in meta
        .get("packages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let has_bench = pkg
            .get("targets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(is_bench_target);
        if has_bench && let Some(name) = pkg.get("name").and_then(Value::as_str) {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

fn is_bench_target(t: &Value) -> bool {
    t.get("kind")
        .and_then(Value::as_array)
        .is_some_and(|k| k.iter().any(|x| x == "bench"))
}

/// The bench executables in cargo's `--message-format=json` output.
fn bench_executables(stdout: &[u8], package: &str) -> Vec<CrateBench> {
    let text = String::from_utf8_lossy(stdout);
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if msg.get("reason").and_then(Value::as_str) != Some("compiler-artifact") {
            continue;
        }
        let Some(target) = msg.get("target") else {
            continue;
        };
        if !is_bench_target(target) {
            continue;
        }
        if let Some(exe) = msg.get("executable").and_then(Value::as_str) {
            let name = target
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            out.push(CrateBench {
                package: package.to_owned(),
                name,
                exe: PathBuf::from(exe),
            });
        }
    }
    out
}

/// A subject a bench could not measure, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unavailable {
    pub(crate) suite: String,
    pub(crate) name: String,
    pub(crate) reason: String,
}

/// The `unavailable` lines of a bench's output.
pub(crate) fn parse_unavailable(text: &str) -> Vec<Unavailable> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .filter_map(|v| {
            Some(Unavailable {
                suite: v.get("suite")?.as_str()?.to_owned(),
                name: v.get("name")?.as_str()?.to_owned(),
                reason: v.get("unavailable")?.as_str()?.to_owned(),
            })
        })
        .collect()
}

/// Parses the agreed JSON lines; anything else on stdout is ignored.
pub(crate) fn parse_lines(text: &str) -> Vec<Figure> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .filter_map(|v| parse_figure(&v))
        .collect()
}

fn parse_figure(v: &Value) -> Option<Figure> {
    let suite = v.get("suite")?.as_str()?.to_owned();
    let name = v.get("name")?.as_str()?.to_owned();
    if let Some(value) = v.get("value").and_then(Value::as_f64) {
        let unit = v
            .get("unit")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        return value.is_finite().then_some(Figure {
            suite,
            name,
            unit,
            value,
            spread: None,
        });
    }
    let median = v.get("median_ns")?.as_f64()?;
    let min = v.get("min_ns").and_then(Value::as_f64).unwrap_or(median);
    let max = v.get("max_ns").and_then(Value::as_f64).unwrap_or(median);
    let runs = v.get("runs").and_then(Value::as_u64).unwrap_or(1);
    (median.is_finite() && min.is_finite() && max.is_finite()).then_some(Figure {
        suite,
        name,
        unit: "ns".to_owned(),
        value: median,
        spread: Some((min, max, runs)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_line_forms_parse_and_noise_is_ignored() {
        let text = "warming up\n\
            {\"suite\":\"journal\",\"name\":\"append_unsynced_256B\",\"unit\":\"records/s\",\"value\":123.0}\n\
            {\"suite\":\"check\",\"name\":\"validate\",\"min_ns\":1,\"median_ns\":2.5,\"max_ns\":4,\"runs\":10}\n\
            {\"suite\":\"check\",\"name\":\"no figure\"}\n\
            {\"name\":\"no suite\",\"value\":1}\n";
        let f = parse_lines(text);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].unit, "records/s");
        assert_eq!(f[0].value, 123.0);
        assert_eq!(f[1].unit, "ns");
        assert_eq!(f[1].spread, Some((1.0, 4.0, 10)));
        assert!(parse_unavailable(text).is_empty());
    }

    #[test]
    fn an_unavailable_line_names_the_subject_and_is_no_figure() {
        let text = "{\"suite\":\"staging\",\"name\":\"workload_clone_staged\",\"unavailable\":\"not built\"}\n\
            {\"suite\":\"staging\",\"name\":\"workload_clone_direct\",\"min_ns\":1,\"median_ns\":2,\"max_ns\":3,\"runs\":1}\n";
        assert_eq!(
            parse_unavailable(text),
            [Unavailable {
                suite: "staging".into(),
                name: "workload_clone_staged".into(),
                reason: "not built".into()
            }]
        );
        let figs = parse_lines(text);
        assert_eq!(figs.len(), 1);
        assert_eq!(figs[0].name, "workload_clone_direct");
    }

    #[test]
    fn the_staging_bench_feeds_only_its_suite() {
        assert!(feeds("palisade-isolate", "staging", "staging"));
        assert!(!feeds("palisade-isolate", "staging", "spawn"));
        // Positive control: the launch bench still feeds spawn, not staging.
        assert!(feeds("palisade-isolate", "launch", "spawn"));
        assert!(!feeds("palisade-isolate", "launch", "staging"));
        // The git push bench feeds the git suite only; the proxy benches
        // of the same package still feed proxy, not git.
        assert!(feeds("palisade-egress", "git_push", "git"));
        assert!(!feeds("palisade-egress", "git_push", "proxy"));
        assert!(feeds("palisade-egress", "floor", "proxy"));
        assert!(!feeds("palisade-egress", "floor", "git"));
        assert!(feeds("palisade-schema", "anything", "check"));
    }
}
