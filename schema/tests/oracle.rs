//! The Hub's own verdicts (Paseo Hub v0.6.0's compiler, run on the cases
//! under `tests/data/oracle/hub-0.6/`) against `palisade check`'s parser,
//! under the contract of that folder's README and `docs/workflows.md`:
//!
//! - every case the Hub rejects, palisade rejects;
//! - every case the Hub accepts, palisade accepts, except where every error
//!   is a documented stricter-than-Hub finding: under `agent.options` (the
//!   provider option schemas, which the Paseo daemon enforces and the Hub's
//!   compiler passes through) or of a code in [`STRICTER`].
//!
//! Warnings never count as rejections. `PALISADE_ORACLE_DIR=<folder>` runs
//! the same contract over another folder of the same shape (a `cases/`
//! folder and a `verdicts.jsonl`), such as a held-back set.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "tests read fixture files"
)]

use std::path::{Path, PathBuf};

use palisade_schema::{Diagnostic, parse_bundle, parse_workflow_bytes};

/// The codes by which palisade is stricter than the Hub's compiler on
/// purpose, each predicting a failure that the Hub finds only later (at
/// the daemon or at dispatch), or a hardening limit. `docs/workflows.md`
/// gives the reason for each.
pub const STRICTER: &[&str] = &[
    "required_output_unavailable",
    "relative_cwd",
    "unreachable_comparison",
    "unknown_output_field",
    "codex_unattended_full_access",
    "file_too_large",
    "yaml_limit_exceeded",
    "choice_limit_exceeded",
];

fn oracle_dir() -> PathBuf {
    std::env::var_os("PALISADE_ORACLE_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/oracle/hub-0.6"),
        PathBuf::from,
    )
}

/// Every regular file under `dir`, as `(path relative to root, bytes)`.
fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(root, &path, out);
        } else {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push((rel, std::fs::read(&path).unwrap()));
        }
    }
}

/// palisade's errors for one case: a file is a single-file workflow, a
/// folder a repository whose `.paseo/` files form a bundle.
fn errors(case: &Path) -> Vec<Diagnostic> {
    let result = if case.is_dir() {
        let mut files = Vec::new();
        let paseo = case.join(".paseo");
        if paseo.is_dir() {
            walk(case, &paseo, &mut files);
        }
        let borrowed: Vec<(&str, &[u8])> = files
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        parse_bundle(&borrowed)
    } else {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        parse_workflow_bytes(&name, &std::fs::read(case).unwrap())
    };
    match result {
        Ok(_) => Vec::new(),
        Err(d) => d
            .into_vec()
            .into_iter()
            .filter(Diagnostic::is_error)
            .collect(),
    }
}

/// Whether an error is one of the documented stricter-than-Hub findings.
fn allowed(d: &Diagnostic) -> bool {
    let path = d.path.to_string();
    let options = path.contains(".options") && (path.contains("agent"));
    options || STRICTER.contains(&d.code)
}

#[test]
fn palisade_agrees_with_the_hub_compiler_under_the_contract() {
    let dir = oracle_dir();
    let verdicts = std::fs::read_to_string(dir.join("verdicts.jsonl")).unwrap();
    let mut wrong = Vec::new();
    let mut cases = 0;
    for line in verdicts.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let case = v["case"].as_str().unwrap();
        let hub = v["hub"].as_str().unwrap();
        let found = errors(&dir.join("cases").join(case));
        cases += 1;
        match hub {
            "reject" if found.is_empty() => wrong.push(format!(
                "{case}: the Hub rejects ({}), palisade accepts",
                v["hub_issues"]
            )),
            "accept" if !found.iter().all(allowed) => {
                let shown: Vec<String> = found
                    .iter()
                    .filter(|d| !allowed(d))
                    .map(|d| format!("{} at {}: {}", d.code, d.path, d.message))
                    .collect();
                wrong.push(format!(
                    "{case}: the Hub accepts, palisade rejects: {}",
                    shown.join("; ")
                ));
            }
            "reject" | "accept" => {}
            other => panic!("{case}: unknown verdict {other}"),
        }
    }
    assert!(cases > 0, "no verdicts under {}", dir.display());
    assert!(
        wrong.is_empty(),
        "{} of {cases} cases disagree:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
