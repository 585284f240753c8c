//! The JSON Schema (draft 2020-12) of a trigger document, for editors
//! (`palisade schema trigger`). It mirrors the strict parser's structure:
//! unknown keys, types, enums, patterns, the label and schedule rules, the
//! Forgejo filter table and the authoring contract (absolute `cwd`, an
//! explicit `mode`). It admits every release's events and keys (the
//! release gate is `palisade check --hub-release`); compile-stage rules
//! (allowlists, durations up to 24h, expression paths) need
//! `palisade check`.

use serde_json::{Value, json};

const IDENT: &str = "^[a-z][a-z0-9_-]*$";
const EVENT: &str = "^[a-z][a-z0-9_-]*\\.[a-z][a-z0-9_-]*$";
const SLUG: &str = "^[a-z0-9]+(?:-[a-z0-9]+)*$";
const RULE_KEY: &str = "(FREQ|INTERVAL|COUNT|UNTIL|BYSECOND|BYMINUTE|BYHOUR|BYDAY|BYMONTHDAY|BYYEARDAY|BYWEEKNO|BYMONTH|BYSETPOS|WKST)";
const LABEL_EVENTS: &[&str] = &[
    "github.issue_label_added",
    "github.pull_request_label_added",
    "forgejo.issue_label_added",
    "forgejo.pull_request_label_added",
];

fn trigger_defs() -> Vec<(&'static str, Value)> {
    let str1 = json!({"type": "string", "minLength": 1});
    let list1 = json!({"type": "array", "minItems": 1, "items": str1});
    let list = json!({"type": "array", "items": str1});
    let inputs = json!({"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}});
    let unreleased = |d: &str| json!({"description": format!("{d} (unreleased Paseo Hub; palisade check --hub-release unreleased)")});
    let with = |base: &Value, extra: Value| {
        let mut v = base.clone();
        if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
            m.extend(e);
        }
        v
    };
    let filters = json!({"type": "object", "additionalProperties": false, "properties": {
        "pattern": {"type": "string"}, "contains": {"type": "string"},
        "label": str1, "repo": str1, "guild": str1, "workspace": str1, "project": str1,
        "labels": list1, "states": list1, "exclude_labels": list1, "assignees": list1,
        "channels": list, "from_users": list,
        "inputs": inputs,
        "reviewers": with(&list1, unreleased("Forgejo requested reviewers")),
        "branches": with(&list1, unreleased("Forgejo pushed branches")),
        "team": with(&str1, unreleased("a Linear team")),
        "replies_only": with(&json!({"type": "boolean"}), unreleased("Linear replies only")),
        "thread_with_app": with(&json!({"type": "boolean"}), unreleased("Linear threads the app posted in")),
    }});
    let forgejo_filters = json!({"type": "object", "additionalProperties": false, "properties": {
        "from_users": list, "inputs": inputs, "pattern": {"type": "string"}, "contains": {"type": "string"},
        "label": str1, "labels": list1, "repo": str1, "assignees": list1, "reviewers": list1, "branches": list1,
    }});
    let rule = json!({
        "type": "string", "minLength": 1, "maxLength": 2048,
        "pattern": format!("^{RULE_KEY}=[A-Z0-9,+-]+(;{RULE_KEY}=[A-Z0-9,+-]+)*$"),
        "not": {"pattern": "(^|;)COUNT=.*;UNTIL=|(^|;)UNTIL=.*;COUNT="},
        "description": "one RRULE value without the RRULE: prefix, each key once; COUNT or UNTIL, not both",
    });
    let recurrence = json!({"type": "object", "additionalProperties": false, "required": ["timezone", "start", "rule"], "properties": {
        "timezone": {"type": "string", "pattern": "^[A-Za-z]", "description": "an IANA time zone name, e.g. Europe/Berlin"},
        "start": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}$",
                  "description": "local start time; quote it (js-yaml reads an unquoted one as a Date)"},
        "rule": rule,
    }});
    let agent = json!({"allOf": [{"$ref": "#/$defs/agent"}], "required": ["provider", "mode"],
        "description": "mode is required for new triggers (the Hub's authoring contract)"});
    let select = json!({"type": "object", "additionalProperties": false, "required": ["select", "choices"], "properties": {
        "select": str1,
        "choices": {"type": "object", "minProperties": 1, "propertyNames": {"pattern": IDENT},
                    "additionalProperties": {"$ref": "#/$defs/triggerAgent"}},
    }});
    let continuation = json!({"oneOf": [
        {"type": "object", "additionalProperties": false, "required": ["mode"], "properties": {"mode": {"enum": ["conversation", "new"]}}},
        {"type": "object", "additionalProperties": false, "required": ["mode", "key"], "properties": {
            "mode": {"const": "key"},
            "key": {"type": "string", "minLength": 1, "maxLength": 512, "pattern": "\\S"}}},
    ]});
    let step = "#/$defs/step/properties";
    let run = json!({"type": "object", "additionalProperties": false, "required": ["target", "agent", "prompt"], "properties": {
        "target": {"type": "object", "additionalProperties": false, "required": ["daemon", "cwd"], "properties": {
            "daemon": str1,
            "cwd": {"type": "string", "pattern": "^/", "description": "an absolute path (the Hub's authoring contract)"},
            "worktree": {"$ref": "#/$defs/worktree"},
        }},
        "agent": {"oneOf": [{"$ref": "#/$defs/triggerAgent"}, select]},
        "continuation": continuation,
        "title": str1,
        "prompt": str1,
        "max_runtime": {"$ref": "#/$defs/duration", "default": "2h"},
        "idle_timeout": {"$ref": "#/$defs/duration", "default": "10m"},
        "startup_timeout": {"$ref": "#/$defs/duration"},
        "env": {"$ref": format!("{step}/env")},
        "github": {"$ref": format!("{step}/github")},
        "output": {"$ref": format!("{step}/output")},
        "outputs": {"type": "object", "propertyNames": {"pattern": EVENT}, "additionalProperties": {
            "type": "object", "additionalProperties": false, "properties": {
                "max": {"type": "integer", "minimum": 1, "default": 1},
                "required": {"type": "boolean", "default": false},
            }}},
        "auto_archive": {"type": "boolean", "default": true},
    }});
    let entry = |filters: &str| {
        json!({"type": "object", "additionalProperties": false, "properties": {
            "connection": {"type": "string", "pattern": SLUG},
            "filters": {"$ref": format!("#/$defs/{filters}")},
        }})
    };
    let schedule = json!({"type": "object", "additionalProperties": false, "required": ["recurrence"],
        "properties": {"recurrence": recurrence}});
    vec![
        ("triggerFilters", filters),
        ("forgejoFilters", forgejo_filters),
        ("triggerAgent", agent),
        ("eventEntry", entry("triggerFilters")),
        ("forgejoEntry", entry("forgejoFilters")),
        ("scheduleEntry", schedule),
        ("run", run),
    ]
}

/// The schema of a `.paseo/triggers/<name>.yml` trigger document.
pub fn json_schema() -> Value {
    let labels: Vec<Value> = LABEL_EVENTS
        .iter()
        .map(|e| {
            json!({
                "if": {"properties": {"on": {"required": [e]}}, "required": ["on"]},
                "then": {"properties": {"on": {"properties": {(*e): {
                    "required": ["filters"],
                    "properties": {"filters": {"required": ["label"], "properties": {"label": {"pattern": "\\S"}}}},
                }}}}},
            })
        })
        .collect();
    let schedule_alone = json!({
        "if": {"properties": {"on": {"required": ["schedule.tick"]}}, "required": ["on"]},
        "then": {"properties": {"on": {"maxProperties": 1}}, "not": {"required": ["inputs"]}},
    });
    let mut all_of = labels;
    all_of.push(schedule_alone);
    let mut doc = crate::hub_schema::head(
        "trigger",
        ".paseo/triggers/<name>.yml: a Paseo Hub 0.9 trigger document",
        json!({
            "type": "object", "additionalProperties": false, "required": ["name", "on", "run"],
            "properties": {
                "name": {"$ref": "#/$defs/identifier"},
                "enabled": {"type": "boolean", "default": true},
                "on": {"type": "object", "minProperties": 1, "propertyNames": {"pattern": EVENT},
                       "properties": {"schedule.tick": {"$ref": "#/$defs/scheduleEntry"}},
                       "patternProperties": {"^forgejo\\.": {"$ref": "#/$defs/forgejoEntry"}},
                       "additionalProperties": {"$ref": "#/$defs/eventEntry"}},
                "inputs": {"$ref": "#/$defs/trigger/properties/inputs"},
                "max_runtime": {"$ref": "#/$defs/duration"},
                "run": {"$ref": "#/$defs/run"},
            },
            "allOf": all_of,
        }),
    );
    if let Some(Value::Object(defs)) = doc.get_mut("$defs") {
        for (k, v) in trigger_defs() {
            defs.insert(k.to_owned(), v);
        }
    }
    doc
}
