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
        &["schema", "trigger"],
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
    let t: Value = serde_json::from_str(&stdout(&palisade(&["schema", "trigger"]))).unwrap();
    assert_eq!(t["$id"], "urn:palisade:schema:trigger");
    assert_eq!(t["required"], serde_json::json!(["name", "on", "run"]));
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

// ----- trigger documents (hub-triggers.md §1) --------------------------

const TRIGGER_EXAMPLE: &str = "examples/guarded-request-trigger";

fn write(root: &std::path::Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn check_dir(dir: &std::path::Path, extra: &[&str]) -> (Option<i32>, String) {
    let mut args = vec!["check", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = palisade(&args);
    (o.status.code(), stdout(&o))
}

/// A document that checks clean at 0.9.0 (no lint finding either).
const CLEAN_TRIGGER: &str = "name: hello\non: {manual.run: {filters: {from_users: [automation]}}}\nrun:\n  target: {daemon: host, cwd: /w, worktree: {mode: branch-off, newBranch: \"hub/${{ paseo.execution.id }}\"}}\n  agent: {provider: codex, mode: auto, options: {approval_policy: never, sandbox_mode: read-only}}\n  continuation: {mode: new}\n  prompt: Say hello.\n";

#[test]
fn trigger_example_checks_clean_as_folder_and_file() {
    for path in [
        TRIGGER_EXAMPLE.to_owned(),
        format!("{TRIGGER_EXAMPLE}/.paseo"),
        format!("{TRIGGER_EXAMPLE}/.paseo/triggers/guarded-request.yml"),
    ] {
        let o = palisade(&["check", &path]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{path}: {out}");
        assert!(out.ends_with("no errors, no warnings\n"), "{path}: {out}");
        assert!(out.contains("1 trigger, 1 event"), "{path}: {out}");
        assert_eq!(out.lines().count(), 1, "{path}: {out}");
    }
}

#[test]
fn legacy_bundle_is_named_legacy_in_the_summary() {
    let o = palisade(&["check", "examples/guarded-request"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("(legacy bundle layout, "), "{out}");
    // The trigger layout is not called legacy.
    let o = palisade(&["check", TRIGGER_EXAMPLE]);
    assert!(!stdout(&o).contains("legacy"), "{}", stdout(&o));
}

#[test]
fn trigger_directory_refuses_other_entries() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), ".paseo/triggers/hello.yml", CLEAN_TRIGGER);
    // Positive control: the regular direct-child .yml file alone is clean.
    let (code, out) = check_dir(dir.path(), &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.ends_with("no errors, no warnings\n"), "{out}");
    write(dir.path(), ".paseo/triggers/other.yaml", CLEAN_TRIGGER);
    write(dir.path(), ".paseo/triggers/nested/deep.yml", CLEAN_TRIGGER);
    let (code, out) = check_dir(dir.path(), &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("error[trigger_path_unsupported]: .paseo/triggers/other.yaml must be a direct-child .yml trigger."),
        "{out}"
    );
    assert!(
        out.contains(".paseo/triggers/nested/ must be a direct-child .yml trigger."),
        "{out}"
    );
}

#[test]
fn trigger_symlinks_are_refused_and_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "elsewhere/hello.yml", CLEAN_TRIGGER);
    std::fs::create_dir_all(dir.path().join(".paseo/triggers")).unwrap();
    std::os::unix::fs::symlink(
        dir.path().join("elsewhere/hello.yml"),
        dir.path().join(".paseo/triggers/hello.yml"),
    )
    .unwrap();
    let (code, out) = check_dir(dir.path(), &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(
            "error[trigger_unsafe_path]: .paseo/triggers/hello.yml must not use a symlink."
        ),
        "{out}"
    );
    // A linked trigger folder is refused too.
    let dir2 = tempfile::tempdir().unwrap();
    write(dir2.path(), "elsewhere/hello.yml", CLEAN_TRIGGER);
    std::fs::create_dir_all(dir2.path().join(".paseo")).unwrap();
    std::os::unix::fs::symlink(
        dir2.path().join("elsewhere"),
        dir2.path().join(".paseo/triggers"),
    )
    .unwrap();
    let (code, out) = check_dir(dir2.path(), &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(".paseo/triggers must not use a symlink."),
        "{out}"
    );
}

#[test]
fn both_layouts_are_checked_and_a_shared_name_warns() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo();
    for rel in [".paseo/hub.yml", ".paseo/workflows/guarded-request.yml"] {
        let text =
            std::fs::read_to_string(repo.join("examples/guarded-request").join(rel)).unwrap();
        write(dir.path(), rel, &text);
    }
    write(dir.path(), ".paseo/triggers/hello.yml", CLEAN_TRIGGER);
    // Positive control: different names, both checked, no finding (the
    // bundle reader does not see the trigger file as a stray file).
    let (code, out) = check_dir(dir.path(), &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.ends_with("no errors, no warnings\n"), "{out}");
    assert!(
        out.contains("1 trigger") && out.contains("1 workflow"),
        "{out}"
    );
    // The same name: a warning at the document's name.
    write(
        dir.path(),
        ".paseo/triggers/hello.yml",
        &CLEAN_TRIGGER.replace("name: hello", "name: guarded-request"),
    );
    let (code, out) = check_dir(dir.path(), &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("warning[trigger_workflow_name_clash]"),
        "{out}"
    );
    assert!(out.contains(".paseo/triggers/hello.yml:1:7"), "{out}");
}

#[test]
fn hub_release_gates_schedules() {
    let dir = tempfile::tempdir().unwrap();
    let text = CLEAN_TRIGGER.replace(
        "{manual.run: {filters: {from_users: [automation]}}}",
        "{schedule.tick: {recurrence: {timezone: UTC, start: \"2026-09-09T09:00:00\", rule: \"FREQ=DAILY;BYHOUR=9\"}}}",
    );
    write(dir.path(), ".paseo/triggers/tick.yml", &text);
    let (code, out) = check_dir(dir.path(), &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("error[unreleased_event]"), "{out}");
    assert!(out.contains("--hub-release main"), "{out}");
    // Positive control: the release that has it accepts it.
    let (code, out) = check_dir(dir.path(), &["--hub-release", "main"]);
    assert_eq!(code, Some(0), "{out}");
    let o = palisade(&[
        "check",
        dir.path().to_str().unwrap(),
        "--hub-release",
        "0.8",
    ]);
    assert_eq!(o.status.code(), Some(2));
}
