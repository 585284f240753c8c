//! A minimal loader for the vector bundles: just enough of hub.yml to find
//! each step's agent, `allow_outputs` and `output.schema`. The full strict
//! parser lives in `palisade-schema`; these fixtures are well-formed.

use std::path::Path;

use palisade_policy::derive::OutputDecl;
use serde_json::Value;

/// What `derive` and `translate` need from one step.
#[derive(Debug, Clone)]
pub(crate) struct StepFixture {
    pub(crate) id: String,
    pub(crate) provider: String,
    pub(crate) options: Option<Value>,
    pub(crate) allow_outputs: Vec<OutputDecl>,
    pub(crate) output_schema: Option<Value>,
}

pub(crate) fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub(crate) fn decls(v: Option<&Value>) -> Vec<OutputDecl> {
    v.and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|d| OutputDecl {
                    kind: d["type"].as_str().unwrap().to_owned(),
                    max: Some(
                        d.get("max")
                            .and_then(Value::as_u64)
                            .map_or(1, |m| u32::try_from(m).unwrap()),
                    ),
                    required: d.get("required").and_then(Value::as_bool).unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The steps of `.paseo/workflows/<workflow>` in the bundle at `root`.
pub(crate) fn load_steps(root: &Path, workflow: &str) -> Vec<StepFixture> {
    let hub = yaml(&root.join(".paseo/hub.yml"));
    let wf = yaml(&root.join(".paseo/workflows").join(workflow));
    wf["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let agent = match &s["agent"] {
                Value::String(name) => hub["agents"][name.as_str()].clone(),
                inline => inline.clone(),
            };
            assert!(
                agent.is_object(),
                "step {} has no resolvable agent",
                s["id"]
            );
            StepFixture {
                id: s["id"].as_str().unwrap().to_owned(),
                provider: agent["provider"].as_str().unwrap().to_owned(),
                options: agent.get("options").cloned(),
                allow_outputs: decls(s.get("allow_outputs")),
                output_schema: s.get("output").and_then(|o| o.get("schema")).cloned(),
            }
        })
        .collect()
}
