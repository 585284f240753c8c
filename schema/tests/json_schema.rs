//! The JSON Schema documents `palisade schema` prints agree with the strict
//! parser: the examples validate, and structural mistakes the parser
//! rejects are rejected by the schema too (checked with the `jsonschema`
//! crate, an independent validator).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "tests read fixture files"
)]

use std::path::Path;

use palisade_schema::{hub_schema, options, yaml};
use serde_json::{Value, json};

fn repo(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)).unwrap()
}

fn as_json(text: &str) -> Value {
    let parsed = yaml::parse("t.yml", text).unwrap();
    assert!(parsed.warnings().is_empty(), "{:?}", parsed.warnings());
    parsed.value().to_json()
}

fn errors(schema: &Value, instance: &Value) -> Vec<String> {
    let validator = jsonschema::validator_for(schema).unwrap();
    validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

#[test]
fn examples_validate_against_the_printed_schemas() {
    let single = hub_schema::single_file();
    for f in [
        "examples/guarded-request.yml",
        "examples/providers/codex.yml",
        "examples/providers/claude.yml",
        "examples/providers/opencode.yml",
    ] {
        let e = errors(&single, &as_json(&repo(f)));
        assert!(e.is_empty(), "{f}: {e:#?}");
    }
    let e = errors(
        &hub_schema::hub(),
        &as_json(&repo("examples/guarded-request/.paseo/hub.yml")),
    );
    assert!(e.is_empty(), "{e:#?}");
    let e = errors(
        &hub_schema::workflow(),
        &as_json(&repo(
            "examples/guarded-request/.paseo/workflows/guarded-request.yml",
        )),
    );
    assert!(e.is_empty(), "{e:#?}");
}

#[test]
fn structural_mistakes_are_rejected_by_the_schema_too() {
    let single = hub_schema::single_file();
    for case in [
        "codex-unknown-key-top",
        "claude-unknown-key-sandbox-network",
        "opencode-unknown-key-hub-reply",
        "unknown-step-key-sandbox",
        "duration-decimal",
        "duration-days",
        "output-max-zero",
        "removed-timeout-on-step",
        "event-name-bad",
        "environment-kind-bad",
        "prompt-empty",
        "codex-approval-on-failure",
    ] {
        let text = repo(&format!("schema/tests/data/invalid/{case}.yml"));
        assert!(
            !errors(&single, &as_json(&text)).is_empty(),
            "{case} passed the JSON Schema"
        );
    }
}

#[test]
fn option_schemas_match_the_spec_vectors() {
    let accept = [
        (
            "codex",
            json!({"approval_policy": "never", "sandbox_mode": "workspace-write",
            "sandbox_workspace_write": {"writable_roots": ["/var/cache/npm"], "network_access": false},
            "web_search": "disabled",
            "features": {"network_proxy": {"enabled": true, "domains": {"packages.example.com": "allow", "*": "deny"}}}}),
        ),
        (
            "claude",
            json!({"allowedTools": ["Read"], "disallowedTools": ["Bash(rm *)"],
            "sandbox": {"enabled": true, "failIfUnavailable": true, "filesystem": {"denyRead": ["~/.ssh/**"]},
                "network": {"allowedDomains": ["api.anthropic.com"], "allowLocalBinding": false, "allowUnixSockets": ["/var/run/docker.sock"]}},
            "settings": {"permissions": {"ask": ["Bash(*)"], "deny": ["Edit(.env)"]}}}),
        ),
        (
            "opencode",
            json!({"permission": {"bash": {"*": "ask", "git status": "allow"},
            "external_directory": {"*": "deny", "/var/cache/npm/**": "allow"}}}),
        ),
        ("opencode", json!({"permission": "deny"})),
    ];
    for (p, v) in accept {
        let e = errors(&options::json_schema(p).unwrap(), &v);
        assert!(e.is_empty(), "{p} {v}: {e:#?}");
    }
    let reject = [
        ("codex", json!({"cwd": "/"})),
        ("codex", json!({"mcp_servers": {"hub": {}}})),
        (
            "codex",
            json!({"sandbox_workspace_write": {"writable_roots": ["/a", 42]}}),
        ),
        ("codex", json!({"approval_policy": "on-failure"})),
        ("codex", json!({"features": {"multi_agent": true}})),
        ("claude", json!({"hooks": {}})),
        ("opencode", json!({"permission": "sometimes"})),
        (
            "opencode",
            json!({"permission": {"bash": {"git status": "sometimes"}}}),
        ),
        ("opencode", json!({"permission": {"hub_reply": "deny"}})),
        ("opencode", json!({"mcp": {}})),
    ];
    for (p, v) in reject {
        assert!(
            !errors(&options::json_schema(p).unwrap(), &v).is_empty(),
            "{p} {v} passed"
        );
    }
}
