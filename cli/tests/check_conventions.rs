//! `palisade check` conventions CI users expect, run through the real
//! binary: several paths and `-` for stdin, `--deny warnings`, `--allow`,
//! `--warn`, `--deny CODE`, suppression comments with a required reason,
//! end columns in JSON and SARIF, completions, the man page and
//! `--version` with the commit. Each refusal has its positive control.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn palisade(args: &[&str]) -> Output {
    palisade_stdin(args, None)
}

fn palisade_stdin(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(args)
        .current_dir(repo())
        .env("NO_COLOR", "1")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

const CLEAN: &str = "examples/guarded-request.yml";
/// Clean but for two warnings of one lint, `unpinned_trigger` (no
/// workspace, no channels).
const WARN_ONLY: &str = "schema/tests/data/invalid/lint-slack-unpinned.yml";
const INVALID: &str = "schema/tests/data/invalid/if-enum-typo.yml";

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap()
}

/// A temporary copy of WARN_ONLY with `extra` appended.
fn warn_only_with(extra: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.yml");
    std::fs::write(&path, format!("{}{extra}", read(WARN_ONLY))).unwrap();
    let p = path.display().to_string();
    (dir, p)
}

fn json(o: &Output) -> Vec<Value> {
    let v: Value = serde_json::from_str(&stdout(o)).unwrap();
    v["diagnostics"].as_array().unwrap().clone()
}

#[test]
fn several_paths_are_checked_in_one_run() {
    let o = palisade(&["check", CLEAN, WARN_ONLY, "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(json(&o).len(), 2);
    let o = palisade(&["check", CLEAN, INVALID, WARN_ONLY]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("error[unreachable_comparison]"), "{out}");
    assert!(out.contains("warning[unpinned_trigger]"), "{out}");
    assert!(out.contains("(3 files"), "{out}");
    // Any unreadable path is an IO error, as for one path.
    assert_eq!(
        palisade(&["check", CLEAN, "does/not/exist"]).status.code(),
        Some(2)
    );
}

#[test]
fn dash_reads_one_document_from_stdin_named_stdin() {
    let o = palisade_stdin(&["check", "-"], Some(&read(CLEAN)));
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).starts_with("palisade check: <stdin> (1 file"));
    let o = palisade_stdin(&["check", "-", "--format", "json"], Some(&read(INVALID)));
    assert_eq!(o.status.code(), Some(1));
    let d = json(&o);
    assert_eq!(d[0]["file"], "<stdin>");
    assert_eq!(d[0]["line"], 39);
    // The human output shows the source line from stdin too.
    let o = palisade_stdin(&["check", "-"], Some(&read(INVALID)));
    assert!(stdout(&o).contains("--> <stdin>:39:13"), "{}", stdout(&o));
    assert!(stdout(&o).contains("39 |         if:"), "{}", stdout(&o));
    // Bounded: more than a workflow file's limit is refused (exit 2).
    let huge = "#".repeat(4 * 1024 * 1024 + 1);
    let o = palisade_stdin(&["check", "-"], Some(&huge));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("input_too_large"), "{}", stderr(&o));
    // `-` once only.
    let o = palisade_stdin(&["check", "-", "-"], Some(""));
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn deny_warnings_fails_on_a_warning_only() {
    // Positive control: a clean file passes under --deny warnings.
    assert_eq!(
        palisade(&["check", "--deny", "warnings", CLEAN])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(palisade(&["check", WARN_ONLY]).status.code(), Some(0));
    let o = palisade(&["check", "--deny", "warnings", WARN_ONLY]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("error[unpinned_trigger]"),
        "{}",
        stdout(&o)
    );
    // --deny CODE denies that lint only.
    assert_eq!(
        palisade(&["check", "--deny", "unpinned_trigger", WARN_ONLY])
            .status
            .code(),
        Some(1)
    );
    assert_eq!(
        palisade(&["check", "--deny", "broad_cwd", WARN_ONLY])
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn allow_drops_a_lint_but_never_a_schema_error() {
    let o = palisade(&["check", "--allow", "unpinned_trigger", WARN_ONLY]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).ends_with("no errors, no warnings\n"),
        "{}",
        stdout(&o)
    );
    // Allowing the lint under --deny warnings passes; another lint's does not.
    assert_eq!(
        palisade(&[
            "check",
            "--allow",
            "unpinned_trigger",
            "--deny",
            "warnings",
            WARN_ONLY
        ])
        .status
        .code(),
        Some(0)
    );
    assert_eq!(
        palisade(&[
            "check",
            "--allow",
            "broad_cwd",
            "--deny",
            "warnings",
            WARN_ONLY
        ])
        .status
        .code(),
        Some(1)
    );
    // A schema error code cannot be allowed or warned: a usage error.
    for flag in ["--allow", "--warn"] {
        let o = palisade(&["check", flag, "unreachable_comparison", INVALID]);
        assert_eq!(o.status.code(), Some(2), "{flag}");
        assert!(stderr(&o).contains("not a lint code"), "{}", stderr(&o));
    }
}

#[test]
fn warn_turns_a_lint_error_into_a_warning() {
    let missing = read(WARN_ONLY).replace("    filters: {from_users: [U1]}\n", "");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.yml");
    std::fs::write(&path, missing).unwrap();
    let p = path.to_str().unwrap();
    let o = palisade(&["check", p]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("error[missing_from_users]"),
        "{}",
        stdout(&o)
    );
    let o = palisade(&["check", "--warn", "missing_from_users", p]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("warning[missing_from_users]"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_suppression_with_a_reason_suppresses_and_is_reported_as_such() {
    let (_d, p) = warn_only_with(
        "# palisade: allow(unpinned_trigger) the workspace is pinned by the daemon\n",
    );
    let o = palisade(&["check", "--deny", "warnings", &p]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(!out.contains("unpinned_trigger"), "{out}");
    assert!(
        out.ends_with("no errors, no warnings, 2 suppressed\n"),
        "{out}"
    );
    let o = palisade(&["check", "--format", "json", &p]);
    let d = json(&o);
    assert_eq!(d.len(), 2);
    for d in &d {
        assert_eq!(d["code"], "unpinned_trigger");
        assert_eq!(
            d["suppressed"]["reason"],
            "the workspace is pinned by the daemon"
        );
    }
    let o = palisade(&["check", "--format", "sarif", &p]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let r = &v["runs"][0]["results"][0];
    assert_eq!(r["suppressions"][0]["kind"], "inSource");
    assert_eq!(
        r["suppressions"][0]["justification"],
        "the workspace is pinned by the daemon"
    );
    // Positive control: without the comment the warning is reported and
    // not suppressed.
    let o = palisade(&["check", "--format", "sarif", WARN_ONLY]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v["runs"][0]["results"][0]["suppressions"],
        serde_json::json!([])
    );
}

#[test]
fn a_suppression_without_a_reason_is_a_finding_and_suppresses_nothing() {
    let (_d, p) = warn_only_with("# palisade: allow(unpinned_trigger)\n");
    let o = palisade(&["check", &p]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("error[suppression_without_reason]"), "{out}");
    assert!(out.contains("warning[unpinned_trigger]"), "{out}");
}

#[test]
fn unknown_and_unused_suppressions_are_warnings() {
    let (_d, p) = warn_only_with(
        "# palisade: allow(unreachable_comparison) schema errors cannot be suppressed\n\
         # palisade: allow(broad_cwd) nothing here is broad\n",
    );
    let o = palisade(&["check", "--format", "json", &p]);
    let codes: Vec<String> = json(&o)
        .iter()
        .map(|d| d["code"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        codes.contains(&"unknown_suppression".to_owned()),
        "{codes:?}"
    );
    assert!(
        codes.contains(&"unused_suppression".to_owned()),
        "{codes:?}"
    );
    assert!(codes.contains(&"unpinned_trigger".to_owned()), "{codes:?}");
    // A schema error is not suppressed by naming it.
    let invalid = read(INVALID) + "# palisade: allow(unreachable_comparison) please\n";
    let o = palisade_stdin(&["check", "-"], Some(&invalid));
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("error[unreachable_comparison]"));
}

#[test]
fn json_and_sarif_carry_the_end_column() {
    let o = palisade(&["check", "--format", "json", INVALID]);
    let d = &json(&o)[0];
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(39), Some(13))
    );
    assert_eq!(d["end_line"], 39);
    assert_eq!(
        d["end_column"],
        13 + "${{ steps.classify.outputs.kind == 'anwser' }}".len() as u64
    );
    let o = palisade(&["check", "--format", "sarif", INVALID]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let region = &v["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"];
    assert_eq!(region["startLine"], 39);
    assert_eq!(region["endLine"], 39);
    assert_eq!(region["endColumn"], d["end_column"]);
    // The human output underlines the whole expression.
    let o = palisade(&["check", INVALID]);
    let carets = "^".repeat("${{ steps.classify.outputs.kind == 'anwser' }}".len());
    assert!(
        stdout(&o).contains(&format!("|             {carets}\n")),
        "{}",
        stdout(&o)
    );
}

#[test]
fn completions_man_and_version() {
    for shell in ["bash", "zsh", "fish"] {
        let o = palisade(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}");
        assert!(stdout(&o).contains("palisade"), "{shell}");
        assert!(stdout(&o).contains("check"), "{shell}");
    }
    assert_eq!(palisade(&["completions", "tcsh"]).status.code(), Some(2));
    let o = palisade(&["man"]);
    assert_eq!(o.status.code(), Some(0));
    let man = stdout(&o);
    assert!(man.contains(".TH palisade 1"), "{man}");
    // One page per subcommand, the check options in it.
    assert!(man.contains(".TH palisade-check 1"));
    assert!(man.contains("\\-\\-deny"), "the man page documents --deny");
    let o = palisade(&["--version"]);
    let version = stdout(&o);
    let want = format!("palisade {} (", env!("CARGO_PKG_VERSION"));
    assert!(version.starts_with(&want), "{version}");
    let commit = version
        .trim_end()
        .trim_end_matches(')')
        .rsplit('(')
        .next()
        .unwrap();
    assert!(
        commit == "unknown" || (commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{version}"
    );
}

/// A repository of one trigger document (`.paseo/triggers/t.yml`) that
/// trips two lint errors (`wildcard_principal`, `full_access_mode`) and
/// lint warnings, with `extra` appended.
fn trigger_repo_with(extra: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let triggers = dir.path().join(".paseo/triggers");
    std::fs::create_dir_all(&triggers).unwrap();
    let doc = read("cli/tests/data/trigger-repo/.paseo/triggers/wildcard.yml");
    std::fs::write(triggers.join("t.yml"), format!("{doc}{extra}")).unwrap();
    let p = dir.path().display().to_string();
    (dir, p)
}

fn codes_of(d: &[Value], severity: &str) -> Vec<String> {
    d.iter()
        .filter(|d| d["severity"] == severity && d.get("suppressed").is_none())
        .map(|d| d["code"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn trigger_documents_take_levels_and_suppression_comments() {
    let (_d, repo) = trigger_repo_with("");
    // Positive control: the trigger lints are errors and fail the run.
    let o = palisade(&["check", "--format", "json", &repo]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let errors = codes_of(&json(&o), "error");
    assert!(
        errors.contains(&"wildcard_principal".to_owned()),
        "{errors:?}"
    );
    assert!(
        errors.contains(&"full_access_mode".to_owned()),
        "{errors:?}"
    );
    // --allow and --warn accept the trigger lint codes.
    let o = palisade(&[
        "check",
        "--format",
        "json",
        "--allow",
        "wildcard_principal",
        "--warn",
        "full_access_mode",
        &repo,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let d = json(&o);
    assert!(codes_of(&d, "error").is_empty(), "{d:#?}");
    assert!(d.iter().all(|d| d["code"] != "wildcard_principal"));
    assert!(codes_of(&d, "warning").contains(&"full_access_mode".to_owned()));
    // --deny turns a trigger lint warning into an error.
    let o = palisade(&[
        "check",
        "--format",
        "json",
        "--allow",
        "wildcard_principal",
        "--warn",
        "full_access_mode",
        "--deny",
        "broad_cwd",
        &repo,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(codes_of(&json(&o), "error").contains(&"broad_cwd".to_owned()));
    // A suppression comment in the trigger document silences both errors.
    let (_d, repo) = trigger_repo_with(
        "# palisade: allow(wildcard_principal, full_access_mode) a throwaway demo workspace\n",
    );
    let o = palisade(&["check", "--format", "json", &repo]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let d = json(&o);
    let suppressed: Vec<&Value> = d.iter().filter(|d| d.get("suppressed").is_some()).collect();
    assert_eq!(suppressed.len(), 2, "{d:#?}");
    for s in suppressed {
        assert!(
            s["file"]
                .as_str()
                .unwrap()
                .ends_with(".paseo/triggers/t.yml")
        );
        assert_eq!(s["suppressed"]["reason"], "a throwaway demo workspace");
    }
    assert!(
        d.iter().all(|d| d["code"] != "unused_suppression"),
        "{d:#?}"
    );
    // A schema error in a trigger document cannot be allowed.
    let o = palisade(&["check", "--allow", "unknown_key", &repo]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_trigger_document_on_stdin_is_checked_as_one() {
    let doc = read("cli/tests/data/trigger-repo/.paseo/triggers/wildcard.yml");
    let o = palisade_stdin(&["check", "-", "--format", "json"], Some(&doc));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let d = json(&o);
    assert!(d.iter().all(|d| d["file"] == "<stdin>"), "{d:#?}");
    assert!(codes_of(&d, "error").contains(&"wildcard_principal".to_owned()));
    // Positive control: the clean example trigger document passes.
    let clean = read("examples/guarded-request-trigger/.paseo/triggers/guarded-request.yml");
    let o = palisade_stdin(&["check", "-"], Some(&clean));
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        stdout(&o).starts_with("palisade check: <stdin> (trigger document, 1 file"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn workflows_and_trigger_documents_add_up_in_one_summary() {
    let trigger = "examples/guarded-request-trigger/.paseo/triggers/guarded-request.yml";
    let o = palisade(&["check", CLEAN, trigger]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains("(2 files, 1 workflow, 3 steps, 1 trigger, 1 event)"),
        "{out}"
    );
    // Positive control: one path alone keeps its own summary and note.
    let o = palisade(&["check", trigger]);
    assert!(
        stdout(&o).contains("(trigger document, 1 file, 1 trigger, 1 event)"),
        "{}",
        stdout(&o)
    );
}
