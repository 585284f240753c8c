//! Spec §9 vectors V1–V6 and the edge vectors, as data: each
//! `tests/vectors/<v>/cases/*.json` names a workflow of the bundle
//! `tests/vectors/<v>/.paseo`, an output context and the expected per-step
//! result; `tests/vectors/v6.json` holds the daemon translation unit vectors.

use std::path::{Path, PathBuf};

use palisade_policy::capability::{CapabilityRegistry, OutputContext};
use palisade_policy::derive::{McpToolRef, ToolPolicy};
use palisade_policy::digest::PolicyDigest;
use palisade_policy::grant::{GrantConfig, StepInput, grant_step};
use palisade_policy::translate::{OpenCodeOrdering, TranslateRequest, translate};
use serde_json::{Value, json};

use crate::fixture::load_steps;

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

pub(crate) fn ordering(v: Option<&Value>) -> OpenCodeOrdering {
    match v.and_then(Value::as_str) {
        None | Some("grants-first") => OpenCodeOrdering::GrantsFirst,
        Some("grants-last") => OpenCodeOrdering::GrantsLast,
        Some(other) => panic!("unknown ordering {other}"),
    }
}

/// Everything the vectors can check about one step.
fn actual_step(
    step: &crate::fixture::StepFixture,
    ctx: Option<&OutputContext>,
    ord: OpenCodeOrdering,
) -> Value {
    let input = StepInput {
        provider: &step.provider,
        options: step.options.as_ref(),
        allow_outputs: &step.allow_outputs,
        output_schema: step.output_schema.as_ref(),
    };
    let config = GrantConfig::default().with_opencode_ordering(ord);
    match grant_step(&input, ctx, &CapabilityRegistry::default(), &config) {
        Ok(g) => {
            // The digest is recomputable from the printed parts.
            let again = PolicyDigest::of(
                g.provider.id(),
                &g.derived.policy,
                g.provider_options.as_ref(),
            );
            assert_eq!(g.digest, again);
            json!({
                "step": step.id,
                "provider": step.provider,
                "allow_outputs": step.allow_outputs.iter()
                    .map(|d| json!({"type": d.kind, "max": d.max, "required": d.required}))
                    .collect::<Vec<_>>(),
                "tool_policy": g.derived.policy.to_json(),
                "provider_options": g.provider_options.unwrap_or(Value::Null),
                "finish_execution_schema": g.derived.tools[0].input_schema,
                "tools": g.derived.tools.iter()
                    .map(|t| json!({"name": t.name, "description": t.description}))
                    .collect::<Vec<_>>(),
            })
        }
        Err(e) => json!({"step": step.id, "error": e.to_json()}),
    }
}

#[test]
fn workflow_vectors() {
    let mut n_cases = 0;
    let mut dirs: Vec<_> = std::fs::read_dir(vectors_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        let mut cases: Vec<_> = std::fs::read_dir(dir.join("cases"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        cases.sort();
        for case_path in cases {
            let case: Value =
                serde_json::from_str(&std::fs::read_to_string(&case_path).unwrap()).unwrap();
            let name = case_path
                .strip_prefix(vectors_dir())
                .unwrap()
                .display()
                .to_string();
            let steps = load_steps(dir, case["workflow"].as_str().unwrap());
            let ctx = case["context"].as_str().map(OutputContext::new);
            let ord = ordering(case.get("opencode_ordering"));
            let expected = case["expect"]["steps"].as_array().unwrap();
            assert_eq!(steps.len(), expected.len(), "{name}: step count");
            for (step, want) in steps.iter().zip(expected) {
                let got = actual_step(step, ctx.as_ref(), ord);
                assert!(
                    want.get("error").is_some()
                        || (want.get("tool_policy").is_some()
                            && want.get("provider_options").is_some()),
                    "{name}: every expected step pins tool_policy and provider_options, or an error"
                );
                for (key, want_val) in want.as_object().unwrap() {
                    assert_eq!(
                        got.get(key),
                        Some(want_val),
                        "{name}: step {} key {key}\n got: {got:#}",
                        step.id
                    );
                }
            }
            n_cases += 1;
        }
    }
    assert!(n_cases >= 15, "only {n_cases} vector cases found");
}

#[test]
fn v6_translation_unit_vectors() {
    let cases: Value =
        serde_json::from_str(&std::fs::read_to_string(vectors_dir().join("v6.json")).unwrap())
            .unwrap();
    let cases = cases.as_array().unwrap();
    assert!(cases.len() >= 8);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let policy = ToolPolicy {
            preapproved: case["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| McpToolRef::hub(t.as_str().unwrap()))
                .collect(),
        };
        let options = case.get("options").filter(|o| !o.is_null());
        let res = translate(&TranslateRequest {
            provider: case["provider"].as_str().unwrap(),
            options,
            policy: &policy,
            mcp_servers: &["hub"],
            opencode_ordering: ordering(case.get("opencode_ordering")),
        });
        match (res, case.get("error")) {
            (Ok(got), None) => assert_eq!(got.unwrap_or(Value::Null), case["expect"], "{name}"),
            (Err(e), Some(err)) => {
                assert_eq!(e.code(), err["code"], "{name}");
                assert_eq!(e.to_string(), err["message"].as_str().unwrap(), "{name}");
            }
            (got, _) => panic!("{name}: unexpected {got:?}"),
        }
    }
}
