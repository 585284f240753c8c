//! End-to-end tests of `palisade check` and `palisade schema`: exit codes,
//! output formats and the bundled examples.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn palisade(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(args)
        .current_dir(repo())
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

const INVALID: &str = "schema/tests/data/invalid/if-enum-typo.yml";
const WARN_ONLY: &str = "schema/tests/data/invalid/lint-slack-unpinned.yml";

#[test]
fn examples_check_clean() {
    for path in [
        "examples/guarded-request",
        "examples/guarded-request/.paseo",
        "examples/guarded-request.yml",
        "examples/providers/codex.yml",
        "examples/providers/claude.yml",
        "examples/providers/opencode.yml",
    ] {
        let o = palisade(&["check", path]);
        assert_eq!(o.status.code(), Some(0), "{path}: {}", stdout(&o));
        let out = stdout(&o);
        assert!(out.ends_with("no errors, no warnings\n"), "{path}: {out}");
        assert_eq!(
            out.lines().count(),
            1,
            "a clean check prints one line: {out}"
        );
    }
}

#[test]
fn errors_exit_1_with_source_line_and_caret() {
    let o = palisade(&["check", INVALID]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("error[unreachable_comparison]"), "{out}");
    assert!(out.contains(&format!("--> {INVALID}:39:13")), "{out}");
    assert!(
        out.contains("if: ${{ steps.classify.outputs.kind == 'anwser' }}"),
        "{out}"
    );
    assert!(out.contains("^^^"), "{out}");
    assert!(out.ends_with("1 error, 0 warnings\n"), "{out}");
}

#[test]
fn warnings_alone_exit_0() {
    let o = palisade(&["check", WARN_ONLY]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("warning[unpinned_trigger]"));
}

#[test]
fn usage_and_io_errors_exit_2() {
    assert_eq!(
        palisade(&["check", "does/not/exist"]).status.code(),
        Some(2)
    );
    assert_eq!(
        palisade(&["check", "--format", "xml", INVALID])
            .status
            .code(),
        Some(2)
    );
    // A folder without .paseo is neither a bundle nor a workflow.
    assert_eq!(palisade(&["check", "docs"]).status.code(), Some(2));
    // An unreadable --policy file is an IO error.
    let o = palisade(&[
        "check",
        "--policy",
        "does/not/exist.toml",
        "examples/guarded-request",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn json_format_lists_every_field() {
    let o = palisade(&["check", "--format", "json", INVALID]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let d = &v["diagnostics"][0];
    assert_eq!(d["severity"], "error");
    assert_eq!(d["code"], "unreachable_comparison");
    assert_eq!(d["file"], INVALID);
    assert_eq!(d["line"], 39);
    assert_eq!(d["column"], 13);
    assert_eq!(d["path"], ".triggers[0].steps[1].if");
    assert!(d["message"].as_str().unwrap().contains("anwser"));
    // Positive control: a clean file gives an empty list.
    let o = palisade(&["check", "--format", "json", "examples/guarded-request.yml"]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["diagnostics"], serde_json::json!([]));
}

#[test]
fn sarif_format_has_the_2_1_0_shape() {
    let o = palisade(&[
        "check",
        "--format",
        "sarif",
        "schema/tests/data/invalid/lint-claude-sandbox-not-fail-closed.yml",
    ]);
    assert_eq!(o.status.code(), Some(0), "warnings only");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["version"], "2.1.0");
    assert!(v["$schema"].as_str().unwrap().contains("sarif-2.1.0"));
    let run = &v["runs"][0];
    assert_eq!(run["tool"]["driver"]["name"], "palisade");
    let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    for r in results {
        let idx = usize::try_from(r["ruleIndex"].as_u64().unwrap()).unwrap();
        assert_eq!(rules[idx]["id"], r["ruleId"]);
        assert!(matches!(
            r["level"].as_str(),
            Some("error" | "warning" | "note")
        ));
        assert!(!r["message"]["text"].as_str().unwrap().is_empty());
        let loc = &r["locations"][0]["physicalLocation"];
        assert!(
            loc["artifactLocation"]["uri"]
                .as_str()
                .unwrap()
                .ends_with(".yml")
        );
        assert!(loc["region"]["startLine"].as_u64().unwrap() >= 1);
        assert!(loc["region"]["startColumn"].as_u64().unwrap() >= 1);
    }
}

#[test]
fn schema_command_prints_json_schema() {
    for args in [
        &["schema", "hub"][..],
        &["schema", "workflow"],
        &["schema", "single-file"],
        &["schema", "options", "--provider", "codex"],
        &["schema", "options", "--provider", "claude"],
        &["schema", "options", "--provider", "opencode"],
    ] {
        let o = palisade(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["$schema"], "https://json-schema.org/draft/2020-12/schema");
    }
    let v: Value = serde_json::from_str(&stdout(&palisade(&[
        "schema",
        "options",
        "--provider",
        "codex",
    ])))
    .unwrap();
    assert_eq!(v["additionalProperties"], false);
    assert_eq!(
        v["properties"]["sandbox_mode"]["enum"],
        serde_json::json!(["read-only", "workspace-write", "danger-full-access"])
    );
    assert_eq!(
        palisade(&["schema", "options", "--provider", "gemini"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn human_output_is_the_schema_renderer() {
    // `palisade check` prints what `palisade_schema::render::Renderer`
    // renders, one diagnostic after the other, then its summary line.
    for path in [
        INVALID,
        WARN_ONLY,
        "schema/tests/data/invalid/duration-compound.yml",
    ] {
        let o = palisade(&["check", path]);
        let out = stdout(&o);
        let text = std::fs::read_to_string(repo().join(path)).unwrap();
        let diags = match palisade_schema::parse_workflow(path, &text) {
            Ok(parsed) => parsed.into_parts().1,
            Err(refused) => refused.into_vec(),
        };
        assert!(!diags.is_empty(), "{path}: the test needs findings");
        let renderer = palisade_schema::render::Renderer::new();
        let want: String = diags
            .iter()
            .map(|d| renderer.render(d, Some(&text)) + "\n\n")
            .collect();
        let (body, summary) = out.split_at(out.trim_end().rfind('\n').unwrap() + 1);
        assert_eq!(body, want, "{path}");
        assert!(summary.starts_with("palisade check: "), "{summary}");
    }
}
