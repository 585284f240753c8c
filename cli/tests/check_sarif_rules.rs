//! `palisade check --format sarif`: every rule links to its section of
//! `docs/check.md` (`helpUri`) and carries the code's documented summary
//! (`shortDescription`), so code-scanning UIs show what a finding means.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "tests"
)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn sarif(path: &str) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(["check", "--format", "sarif", path])
        .current_dir(repo())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn every_rule_has_a_help_uri_to_its_docs_section() {
    let docs = std::fs::read_to_string(repo().join("docs/check.md")).unwrap();
    let mut seen = 0;
    for path in [
        "schema/tests/data/invalid/if-enum-typo.yml",
        "schema/tests/data/invalid/lint-claude-sandbox-not-fail-closed.yml",
        "schema/tests/data/invalid/lint-slack-unpinned.yml",
    ] {
        let v = sarif(path);
        let rules = v["runs"][0]["tool"]["driver"]["rules"].as_array().unwrap();
        assert!(!rules.is_empty(), "{path}: no rules");
        for rule in rules {
            let id = rule["id"].as_str().unwrap();
            assert_eq!(
                rule["helpUri"],
                format!("https://github.com/palisade-rs/palisade/blob/main/docs/check.md#{id}"),
                "{path}"
            );
            assert!(
                docs.contains(&format!("\n### `{id}`\n")),
                "{id}: no section in docs/check.md"
            );
            let summary = palisade_schema::codes::summary(id).unwrap();
            assert_eq!(rule["shortDescription"]["text"], summary);
            assert!(rule["help"]["text"].as_str().unwrap().contains(summary));
            seen += 1;
        }
    }
    assert!(seen >= 3, "{seen} rules seen");
}
