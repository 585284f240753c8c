//! `palisade policy`, `explain` and `check --migrate` on Paseo Hub 0.9
//! trigger documents and v0.6 bundles, running the real binary.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{Value, json};

fn data(f: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(f)
        .display()
        .to_string()
}

fn vectors(v: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../policy/tests/vectors")
        .join(v)
        .display()
        .to_string()
}

fn palisade(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_palisade"))
        .args(args)
        .output()
        .unwrap()
}

fn json_out(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn tools(v: &Value) -> Vec<&str> {
    v["tool_policy"]["preapproved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tool"].as_str().unwrap())
        .collect()
}

#[test]
fn policy_selects_an_entry_and_shows_the_automatic_reply() {
    let repo = data("trigger-repo");
    // The GitHub entry by its internal name: slack.reply is unavailable,
    // github.reply is automatic and unlimited.
    let o = palisade(&[
        "policy",
        &repo,
        "--trigger",
        "engineering-requests-event-2",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json_out(&o);
    assert_eq!(v["event"], "github.issue_comment_created");
    assert_eq!(v["context"], "github");
    let step = &v["steps"][0];
    assert_eq!(step["step"], "run");
    assert_eq!(tools(step), ["finish_execution", "reply"]);
    assert_eq!(
        step["grants"],
        json!([
            {"type": "slack.reply", "max": 5, "required": false, "automatic": false, "tool": null},
            {"type": "github.reply", "max": null, "required": false, "automatic": true, "tool": "reply"}
        ])
    );
    assert_eq!(
        step["provider_options"]["allowedTools"],
        json!(["Read", "mcp__hub__finish_execution", "mcp__hub__reply"])
    );
    // The Slack entry by document name and event: the authored max 5.
    let o = palisade(&[
        "policy",
        &repo,
        "--trigger",
        "engineering-requests",
        "--event",
        "slack.mention",
    ]);
    assert!(o.status.success());
    let out = text(&o);
    assert!(
        out.contains("preapproved hub tools: finish_execution, reply (up to 5 times; slack.reply)"),
        "{out}"
    );
    assert!(!out.contains("automatic"), "{out}");
    // An unlimited automatic reply reads as such.
    let o = palisade(&["policy", &repo, "--trigger", "t"]);
    let out = text(&o);
    assert!(
        out.contains("reply (automatic, unlimited; slack.reply)"),
        "{out}"
    );
    assert!(
        out.contains("grants: slack.reply unlimited (automatic), tool reply"),
        "{out}"
    );
}

#[test]
fn policy_refuses_an_ambiguous_or_unknown_selection() {
    let repo = data("trigger-repo");
    let o = palisade(&["policy", &repo, "--trigger", "engineering-requests"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("starts on several events; choose one with --event (slack.mention, github.issue_comment_created)"), "{err}");
    let o = palisade(&[
        "policy",
        &repo,
        "--trigger",
        "engineering-requests",
        "--event",
        "discord.mention",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("does not start on `discord.mention`"));
    let o = palisade(&["policy", &repo, "--trigger", "on-push", "--step", "work"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("has one step, `run`, not `work`"));
    let o = palisade(&["policy", &repo, "--trigger", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    // Positive control: the same selection with its step succeeds.
    let o = palisade(&[
        "policy",
        &repo,
        "--trigger",
        "on-push",
        "--step",
        "run",
        "--format",
        "json",
    ]);
    assert!(o.status.success());
    // T5: github.push has no item, so no reply.
    assert_eq!(tools(&json_out(&o)["steps"][0]), ["finish_execution"]);
}

#[test]
fn v06_policy_still_needs_a_context() {
    let o = palisade(&["policy", &vectors("v4"), "--trigger", "manual-job"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--context is required"));
    let o = palisade(&[
        "policy",
        &vectors("v4"),
        "--trigger",
        "manual-job",
        "--context",
        "manual",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(tools(&json_out(&o)[0]), ["finish_execution"]);
}

#[test]
fn explain_admits_a_wildcard_and_plans_the_entry() {
    let repo = data("trigger-repo");
    let o = palisade(&[
        "explain",
        &repo,
        "--event",
        &data("trigger-events/slack-stranger.json"),
    ]);
    // Every document on slack.mention: engineering-requests rejects the
    // stranger, the wildcard document `t` admits them.
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = text(&o);
    assert!(out.contains("trigger document engineering-requests: trigger engineering-requests (output context slack)\n  rejected (user_not_allowed)"), "{out}");
    assert!(out.contains("trigger document t: trigger t (output context slack)\n  admitted\n  step run: runs on target with inline agent (codex); tools: finish_execution, reply (automatic, unlimited; slack.reply)"), "{out}");
    let o = palisade(&[
        "explain",
        &repo,
        "--event",
        &data("trigger-events/github-alice.json"),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json_out(&o);
    assert_eq!(v[0]["document"], "engineering-requests");
    assert_eq!(v[0]["trigger"], "engineering-requests-event-2");
    assert_eq!(v[0]["admission"]["admitted"], true);
    assert_eq!(
        v[0]["steps"][0]["tools"],
        json!(["finish_execution", "reply"])
    );
    assert_eq!(
        v[0]["steps"][0]["grants"],
        json!([{"type": "github.reply", "tool": "reply", "max": null, "required": false, "automatic": true}])
    );
}

#[test]
fn migrate_t14_and_a_multi_step_workflow() {
    // T14: V4 becomes a single run, and nothing widens (exit 0).
    let o = palisade(&["check", "--migrate", &vectors("v4"), "--format", "json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = json_out(&o);
    let m = &v["migrations"][0];
    assert_eq!(m["trigger"], "manual-job");
    assert_eq!(m["format"], "single_run");
    assert_eq!(
        m["document"],
        json!({
            "name": "manual-job", "enabled": true,
            "on": {"manual.run": {"filters": {"from_users": ["automation"]}}},
            "max_runtime": "1h",
            "run": {"continuation": {"mode": "new"}, "target": {"daemon": "laptop", "cwd": "/repo"},
                    "agent": {"provider": "claude", "options": {"allowedTools": ["Read"]}},
                    "prompt": "${{ paseo.prompt }}", "max_runtime": "30m", "idle_timeout": "5m",
                    "outputs": {"slack.reply": {"max": 1}}, "auto_archive": false}
        })
    );
    assert_eq!(v["widens"], false);
    // V1: two steps, so legacy_multistep with the Hub's blocker string.
    let o = palisade(&["check", "--migrate", &vectors("v1")]);
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o);
    assert!(out.contains("trigger slack-mention (on slack.mention): legacy_multistep\n  blocked: trigger has multiple steps\n"), "{out}");
    assert!(out.contains("0 single_run, 2 legacy_multistep"), "{out}");
    // SARIF has no migration form.
    let o = palisade(&["check", "--migrate", &vectors("v1"), "--format", "sarif"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn migrate_reports_a_gained_unlimited_reply_and_exits_1() {
    let o = palisade(&[
        "check",
        "--migrate",
        &data("migrate/github-issue-comment.yml"),
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}\n{}",
        text(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    let out = text(&o);
    assert!(
        out.contains("trigger github-issue-comment (on github.issue_comment_created): single_run"),
        "{out}"
    );
    assert!(
        out.contains("widens [automatic_unlimited_reply]: gains an unlimited `github.reply`"),
        "{out}"
    );
    assert!(out.contains("note [github_permissions_explicit]"), "{out}");
    assert!(
        out.contains("        permissions:\n          contents: read\n        duration: 1h\n"),
        "{out}"
    );
    // Trigger documents are not migrated again.
    let o = palisade(&["check", "--migrate", &data("trigger-repo")]);
    assert_eq!(o.status.code(), Some(2));
}

/// `policy` reads `.paseo/triggers/` as `check` does: a symlinked entry is
/// refused (a worker could point it at a file outside the repository),
/// while the same document as a regular file loads.
#[test]
fn policy_refuses_a_symlinked_trigger_document() {
    let src = std::fs::read(format!("{}/.paseo/triggers/push.yml", data("trigger-repo"))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let triggers = dir.path().join(".paseo/triggers");
    std::fs::create_dir_all(&triggers).unwrap();
    let target = dir.path().join("outside.yml");
    std::fs::write(&target, &src).unwrap();
    std::os::unix::fs::symlink(&target, triggers.join("push.yml")).unwrap();
    let root = dir.path().display().to_string();
    let o = palisade(&["policy", &root, "--trigger", "on-push", "--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("[trigger_unsafe_path]"), "{err}");

    // Control: the same bytes as a regular file.
    std::fs::remove_file(triggers.join("push.yml")).unwrap();
    std::fs::write(triggers.join("push.yml"), &src).unwrap();
    let o = palisade(&["policy", &root, "--trigger", "on-push", "--format", "json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!json_out(&o)["steps"].as_array().unwrap().is_empty());
}
