//! Data-driven tests: every input under `tests/data/invalid/` against its
//! expected-diagnostics snapshot (`<case>.expected`, one JSON diagnostic
//! per line). Regenerate with `PALISADE_BLESS=1 cargo test -p
//! palisade-schema --test corpus`, then review every changed snapshot.
//!
//! Case kinds, by file name:
//! - `<case>.yml`: a single-file workflow ([`parse_workflow_bytes`]);
//! - `<case>.fragment.yml`: a fragment ([`parse_fragment`]);
//! - `<case>.bundle`: a bundle, files introduced by `=== <path> ===` lines;
//! - `<case>.gen`: a generated input (too large to commit), named inside.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "tests read and bless fixture files"
)]

use std::path::{Path, PathBuf};

use palisade_schema::{
    Diagnostic, Diagnostics, Parsed, parse_bundle, parse_fragment, parse_workflow_bytes,
};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/invalid")
}

fn split_bundle(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        if let Some(rest) = line.strip_prefix(b"=== ")
            && let Some(path) = rest.strip_suffix(b" ===\n")
        {
            files.push((String::from_utf8(path.to_vec()).unwrap(), Vec::new()));
            continue;
        }
        files
            .last_mut()
            .expect("a bundle case starts with a === path === line")
            .1
            .extend_from_slice(line);
    }
    files
}

fn generated(name: &str) -> Vec<u8> {
    match name {
        // 10 MB of a valid-looking workflow padded with comments.
        "10mb" => {
            let mut s = String::from("environments: []\ntriggers: []\n");
            while s.len() < 10 * 1024 * 1024 {
                s.push_str("# padding padding padding padding padding padding padding padding\n");
            }
            s.into_bytes()
        }
        // 1,000 levels of block mappings, one space of indentation each (10,000
        // would exceed the file size limit before the depth limit).
        "deep-block-1000" => {
            let mut s = String::new();
            for i in 0..1_000 {
                s.push_str(&" ".repeat(i));
                s.push_str("a:\n");
            }
            s.into_bytes()
        }
        other => panic!("unknown generator {other}"),
    }
}

/// Every finding of a parse, in document order (as the snapshots list them).
fn findings<T>(result: Result<Parsed<T>, Diagnostics>) -> Vec<Diagnostic> {
    let mut all = match result {
        Ok(parsed) => parsed.into_parts().1,
        Err(refused) => {
            assert!(refused.first().is_error(), "errors come first");
            refused.into_vec()
        }
    };
    all.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
    all
}

fn run_case(path: &Path) -> Vec<Diagnostic> {
    let name = path.file_name().unwrap().to_str().unwrap().to_owned();
    let bytes = std::fs::read(path).unwrap();
    if let Some(stem) = name.strip_suffix(".fragment.yml") {
        let text = String::from_utf8(bytes).unwrap();
        findings(parse_fragment(&format!("{stem}.yml"), &text))
    } else if name.ends_with(".yml") {
        findings(parse_workflow_bytes(&name, &bytes))
    } else if name.ends_with(".bundle") {
        let files = split_bundle(&bytes);
        let refs: Vec<(&str, &[u8])> = files
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        findings(parse_bundle(&refs))
    } else if let Some(stem) = name.strip_suffix(".gen") {
        let input = generated(String::from_utf8(bytes).unwrap().trim());
        findings(parse_workflow_bytes(&format!("{stem}.yml"), &input))
    } else {
        panic!("unknown case kind: {name}")
    }
}

/// One JSON line per finding. The node's end (`end_line`, `end_column`) is
/// left out: `tests/check_ux.rs` checks it, and the snapshots stay the
/// record of codes, messages, starts and helps.
fn snapshot(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| {
            let mut v = serde_json::to_value(d).unwrap();
            if let Some(m) = v.as_object_mut() {
                m.retain(|k, _| k != "end_line" && k != "end_column");
            }
            serde_json::to_string(&v).unwrap() + "\n"
        })
        .collect()
}

#[test]
fn invalid_corpus_matches_snapshots() {
    let bless = std::env::var_os("PALISADE_BLESS").is_some();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(data_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e != "expected"))
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 60,
        "the corpus must hold at least 60 invalid inputs, has {}",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let diags = run_case(case);
        let stem = case
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .split('.')
            .next()
            .unwrap()
            .to_owned();
        // Every case is invalid: it must produce at least one finding.
        if diags.is_empty() {
            failures.push(format!("{stem}: no diagnostics for an invalid input"));
        }
        let expected_path = data_dir().join(format!("{stem}.expected"));
        let actual = snapshot(&diags);
        if bless {
            std::fs::write(&expected_path, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if expected != actual {
            failures.push(format!(
                "{stem}:\n--- expected\n{expected}+++ actual\n{actual}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) differ (PALISADE_BLESS=1 regenerates):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_code_in_the_corpus_is_documented() {
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/check.md"))
            .unwrap();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(data_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "expected") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let code = v["code"].as_str().unwrap().to_owned();
            if !docs.contains(&format!("`{code}`")) && !missing.contains(&code) {
                missing.push(code);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "codes missing from docs/check.md: {missing:?}"
    );
}
