//! JSON Schema documents (draft 2020-12) for `.paseo/hub.yml`, workflow
//! files and the single-file layout, so editors can validate as you type.
//!
//! The schemas mirror the strict parser's structure (unknown keys, types,
//! enums, patterns, durations). Cross-reference rules (step references,
//! finite authority, lints) need `palisade check`.

use serde_json::{Value, json};

const IDENT: &str = "^[a-z][a-z0-9_-]*$";
const EVENT: &str = "^[a-z][a-z0-9_-]*\\.[a-z][a-z0-9_-]*$";
const SLUG: &str = "^[a-z0-9]+(?:-[a-z0-9]+)*$";
const DURATION: &str = "^[1-9][0-9]*(ms|s|m|h)$";

fn env_variants(with_name: bool) -> Value {
    let str1 = json!({"type": "string", "minLength": 1});
    let mut daemon = json!({"type": "object", "additionalProperties": false, "required": ["kind", "daemon", "cwd"],
        "properties": {"kind": {"const": "daemon"}, "daemon": str1, "cwd": str1, "worktree": {"$ref": "#/$defs/worktree"}}});
    let mut image = json!({"type": "object", "additionalProperties": false, "required": ["kind", "image"],
        "properties": {"kind": {"enum": ["fly", "docker"]}, "image": str1, "cwd": str1}});
    if with_name {
        for v in [&mut daemon, &mut image] {
            if let Some(Value::Object(props)) = v.get_mut("properties") {
                props.insert("name".into(), json!({"$ref": "#/$defs/identifier"}));
            }
            if let Some(Value::Array(req)) = v.get_mut("required") {
                req.push(json!("name"));
            }
        }
    }
    json!({"oneOf": [daemon, image]})
}

pub(crate) fn defs() -> Value {
    let str1 = json!({"type": "string", "minLength": 1});
    let str_list = json!({"type": "array", "items": str1});
    let agent_options = json!({
        "type": "object",
        "description": "provider-native options; validated against the provider's strict schema (palisade schema options --provider P)"
    });
    let mut agent_variants = Vec::new();
    for p in crate::options::PROVIDERS {
        let opts = crate::options::json_schema(p).unwrap_or_else(|| json!({}));
        agent_variants.push(json!({
            "if": {"properties": {"provider": {"pattern": format!("^{p}(/.*)?$")}}, "required": ["provider"]},
            "then": {"properties": {"options": opts}},
        }));
    }
    json!({
        "duration": {"type": "string", "pattern": DURATION, "description": "a whole number and ms, s, m or h; at most 24h"},
        "identifier": {"type": "string", "pattern": IDENT},
        "eventName": {"type": "string", "pattern": EVENT},
        "worktree": {"oneOf": [
            {"type": "object", "additionalProperties": false, "required": ["mode", "newBranch"],
             "properties": {"mode": {"const": "branch-off"}, "newBranch": {"type": "string"}, "base": {"type": "string"}}},
            {"type": "object", "additionalProperties": false, "required": ["mode", "branch"],
             "properties": {"mode": {"const": "checkout-branch"}, "branch": {"type": "string"}}},
            {"type": "object", "additionalProperties": false, "required": ["mode", "prNumber"],
             "properties": {"mode": {"const": "checkout-pr"}, "prNumber": {"type": "integer", "minimum": 1}}},
        ]},
        "environmentBody": env_variants(false),
        "environmentItem": env_variants(true),
        "agent": {
            "type": "object", "additionalProperties": false, "required": ["provider"],
            "properties": {
                "provider": {"type": "string", "minLength": 1},
                "model": str1, "mode": str1, "thinkingOptionId": str1,
                "options": agent_options,
            },
            "allOf": agent_variants,
        },
        "filters": {"type": "object", "additionalProperties": false, "properties": {
            "pattern": {"type": "string"}, "contains": {"type": "string"}, "label": str1,
            "labels": {"type": "array", "items": str1, "minItems": 1},
            "repo": str1, "guild": str1, "workspace": str1,
            "channels": str_list, "from_users": str_list,
            "inputs": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}},
            "connection": {"type": "string", "pattern": SLUG},
        }},
        "allowOutputs": {"type": "array", "items": {
            "type": "object", "additionalProperties": false, "required": ["type"],
            "properties": {
                "type": {"$ref": "#/$defs/eventName"},
                "max": {"type": "integer", "minimum": 1, "default": 1},
                "required": {"type": "boolean", "default": false},
            },
        }},
        "step": {
            "type": "object", "additionalProperties": false,
            "required": ["id", "environment", "max_runtime", "idle_timeout", "agent", "prompt"],
            "properties": {
                "id": {"$ref": "#/$defs/identifier"},
                "if": {"type": "string", "pattern": "^\\s*\\$\\{\\{.*\\}\\}\\s*$"},
                "environment": str1,
                "max_runtime": {"$ref": "#/$defs/duration"},
                "idle_timeout": {"$ref": "#/$defs/duration"},
                "agent": {"oneOf": [str1, {"$ref": "#/$defs/agent"}]},
                "prompt": {"type": "array", "minItems": 1, "items": {"oneOf": [
                    {"type": "object", "additionalProperties": false, "required": ["text"], "properties": {"text": {"type": "string"}}},
                    {"type": "object", "additionalProperties": false, "required": ["include"], "properties": {"include": str1}},
                ]}},
                "output": {"type": "object", "additionalProperties": false, "required": ["schema"], "properties": {"schema": {"type": "object"}}},
                "allow_outputs": {"$ref": "#/$defs/allowOutputs"},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
                "github": {"type": "object", "additionalProperties": false, "required": ["connection"], "properties": {
                    "connection": {"type": "string", "pattern": SLUG},
                    "repositories": {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": "^[^/]+/[^/]+$"}},
                    "permissions": {"type": "object", "additionalProperties": {"enum": ["read", "write", "admin"]}},
                    "duration": {"$ref": "#/$defs/duration"},
                }},
                "auto_archive": {"type": "boolean"},
            },
        },
        "trigger": {
            "type": "object", "additionalProperties": false,
            "required": ["name", "on", "max_runtime", "steps"],
            "properties": {
                "name": {"$ref": "#/$defs/identifier"},
                "on": {"$ref": "#/$defs/eventName"},
                "max_runtime": {"$ref": "#/$defs/duration"},
                "filters": {"$ref": "#/$defs/filters"},
                "inputs": {"type": "object", "propertyNames": {"pattern": IDENT}, "additionalProperties": {
                    "type": "object", "additionalProperties": false, "required": ["type"], "properties": {
                        "type": {"enum": ["string", "number", "boolean"]},
                        "required": {"type": "boolean"},
                        "default": {"type": ["string", "number", "boolean"]},
                        "choices": {"type": "array", "minItems": 1, "items": {"type": ["string", "number", "boolean"]}},
                    }}},
                "values": {"type": "object", "propertyNames": {"pattern": IDENT}, "additionalProperties": {"type": "string"}},
                "steps": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/step"}},
            },
        },
    })
}

pub(crate) fn head(id: &str, title: &str, mut body: Value) -> Value {
    let mut m = serde_json::Map::new();
    m.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    m.insert("$id".into(), json!(format!("urn:palisade:schema:{id}")));
    m.insert("title".into(), json!(title));
    if let Value::Object(b) = &mut body {
        m.append(b);
    }
    m.insert("$defs".into(), defs());
    Value::Object(m)
}

/// The schema of `.paseo/hub.yml`.
pub fn hub() -> Value {
    head(
        "hub",
        ".paseo/hub.yml: named environments and agents",
        json!({
            "type": "object", "additionalProperties": false, "required": ["environments"],
            "properties": {
                "name": {"type": "string", "pattern": SLUG},
                "environments": {"type": "object", "minProperties": 1, "propertyNames": {"pattern": IDENT},
                                  "additionalProperties": {"$ref": "#/$defs/environmentBody"}},
                "agents": {"type": "object", "propertyNames": {"pattern": IDENT},
                           "additionalProperties": {"$ref": "#/$defs/agent"}},
            },
        }),
    )
}

/// The schema of a `.paseo/workflows/<name>.yml` file (one trigger).
pub fn workflow() -> Value {
    head(
        "workflow",
        ".paseo/workflows/<name>.yml: one trigger and its steps",
        json!({"$ref": "#/$defs/trigger"}),
    )
}

/// The schema of a single-file workflow (`environments:` and `triggers:` lists).
pub fn single_file() -> Value {
    head(
        "single-file",
        "single-file hub workflow: environments and triggers lists",
        json!({
            "type": "object", "additionalProperties": false, "required": ["environments", "triggers"],
            "properties": {
                "environments": {"type": "array", "items": {"$ref": "#/$defs/environmentItem"}},
                "triggers": {"type": "array", "items": {"$ref": "#/$defs/trigger"}},
            },
        }),
    )
}
