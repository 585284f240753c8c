//! `palisade policy` and `palisade explain` end to end, over the policy
//! crate's vector bundles.
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

fn vectors(v: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../policy/tests/vectors")
        .join(v)
}

fn data(f: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(f)
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

#[test]
fn policy_prints_v1_grants_as_the_vector_expects() {
    let root = vectors("v1");
    let o = palisade(&[
        "policy",
        root.to_str().unwrap(),
        "--trigger",
        "slack-mention",
        "--context",
        "slack",
        "--format",
        "json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let got = json_out(&o);
    let case: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("cases/slack.json")).unwrap())
            .unwrap();
    let want = case["expect"]["steps"].as_array().unwrap();
    let got = got.as_array().unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g["step"], w["step"]);
        assert_eq!(g["provider"], w["provider"]);
        assert_eq!(g["tool_policy"], w["tool_policy"]);
        assert_eq!(g["provider_options"], w["provider_options"]);
        assert!(g["digest"].as_str().unwrap().starts_with("sha256:"));
        let keys: Vec<&String> = g.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "step",
                "provider",
                "tool_policy",
                "provider_options",
                "digest"
            ]
        );
    }
}

#[test]
fn policy_dispatch_error_prints_code_and_message_and_exits_1() {
    let root = vectors("v3");
    // answer requires slack.reply: in a Discord context it cannot be dispatched.
    let o = palisade(&[
        "policy",
        root.to_str().unwrap(),
        "--trigger",
        "guarded-request",
        "--step",
        "answer",
        "--context",
        "discord",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        json_out(&o),
        json!({"error": {"code": "required_output_capability_unavailable",
            "message": "required output capability unavailable: slack.reply; register a Hub output tool for each type or remove required: true"}})
    );
    // Positive control: the same step in its Slack context.
    let o = palisade(&[
        "policy",
        root.to_str().unwrap(),
        "--trigger",
        "guarded-request",
        "--step",
        "answer",
        "--context",
        "slack",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        json_out(&o)["tool_policy"]["preapproved"][1]["tool"],
        "reply"
    );

    // An unsupported provider never gets a grant. palisade-schema loads a
    // provider without a strict schema (with an `unsupported_provider`
    // warning when it has no options), so the refusal is the dispatcher's
    // own `tool_policy_unsupported`, printed as a dispatch error (exit 1).
    let unsupported = vectors("unsupported");
    let o = palisade(&[
        "policy",
        unsupported.to_str().unwrap(),
        "--trigger",
        "unsupported",
        "--step",
        "s",
        "--context",
        "slack",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        json_out(&o),
        json!({"error": {
            "code": "tool_policy_unsupported",
            "message": "Provider 'gemini' cannot preapprove exact MCP tools for unattended execution; select Claude, Codex, or OpenCode"
        }})
    );
}

#[test]
fn policy_opencode_order_is_selectable() {
    let root = vectors("v3");
    let first = |order: &str| {
        let o = palisade(&[
            "policy",
            root.to_str().unwrap(),
            "--trigger",
            "guarded-request",
            "--step",
            "implement",
            "--context",
            "slack",
            "--format",
            "json",
            "--opencode-order",
            order,
        ]);
        assert_eq!(o.status.code(), Some(0));
        json_out(&o)["provider_options"]["permission"][0]["permission"].clone()
    };
    assert_eq!(first("grants-first"), "hub_finish_execution");
    assert_eq!(first("grants-last"), "read");
}

#[test]
fn policy_unknown_trigger_is_a_usage_error() {
    let root = vectors("v3");
    let o = palisade(&[
        "policy",
        root.to_str().unwrap(),
        "--trigger",
        "nope",
        "--context",
        "slack",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no trigger named `nope`"));
}

#[test]
fn explain_shows_admission_and_steps() {
    let root = vectors("v3");
    let ev = data("slack-event.json");
    let o = palisade(&[
        "explain",
        root.to_str().unwrap(),
        "--event",
        ev.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let plan = &json_out(&o)[0];
    assert_eq!(
        plan["admission"],
        json!({"admitted": true, "prompt": "please add a test"})
    );
    let status: Vec<&str> = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(status, ["run", "waiting", "waiting"]);

    let out = data("classify-answer.json");
    let arg = format!("classify={}", out.display());
    let o = palisade(&[
        "explain",
        root.to_str().unwrap(),
        "--event",
        ev.to_str().unwrap(),
        "--output",
        &arg,
        "--format",
        "json",
    ]);
    let plan = &json_out(&o)[0];
    let steps = plan["steps"].as_array().unwrap();
    assert_eq!(steps[1]["status"], "run");
    assert_eq!(steps[1]["tools"], json!(["finish_execution", "reply"]));
    assert_eq!(
        steps[2],
        json!({"step": "implement", "status": "skipped", "reason": "condition_false"})
    );

    let o = palisade(&[
        "explain",
        root.to_str().unwrap(),
        "--event",
        ev.to_str().unwrap(),
        "--output",
        &arg,
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(
            "step answer: runs on project with answerer (claude); tools: finish_execution, reply"
        ),
        "{text}"
    );
}

#[test]
fn explain_rejected_event_exits_1_with_the_reason() {
    let root = vectors("v3");
    let ev = data("slack-event-stranger.json");
    let o = palisade(&[
        "explain",
        root.to_str().unwrap(),
        "--event",
        ev.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("rejected (user_not_allowed)"), "{text}");
    assert!(text.contains("step classify: not run"), "{text}");
}

#[test]
fn agent_chosen_by_an_expression_shows_every_choice_and_the_plan_resolves_it() {
    let root = data("dynamic");
    let o = palisade(&[
        "policy",
        root.to_str().unwrap(),
        "--trigger",
        "pick",
        "--step",
        "work",
        "--context",
        "slack",
        "--format",
        "json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let got = json_out(&o);
    let agents: Vec<(&str, &str)> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["agent"].as_str().unwrap(),
                e["provider"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(agents, [("reader", "claude"), ("writer", "codex")]);

    let ev = data("dynamic-event.json");
    let out = data("route-writer.json");
    let arg = format!("route={}", out.display());
    let o = palisade(&[
        "explain",
        root.to_str().unwrap(),
        "--event",
        ev.to_str().unwrap(),
        "--output",
        &arg,
        "--format",
        "json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let work = &json_out(&o)[0]["steps"][1];
    assert_eq!(
        (work["agent"].as_str(), work["provider"].as_str()),
        (Some("writer"), Some("codex"))
    );
    assert_eq!(work["tools"], json!(["finish_execution", "reply"]));
}
