//! `derive`: the exact Hub tool policy of one execution (spec §4).
//!
//! Every execution gets `finish_execution`, first. Each `allow_outputs`
//! declaration whose type is registered and available in the run's output
//! context adds the tool its capability exposes, in authored order.
//!
//! **Divergence from the Hub, on purpose:** the Hub keeps duplicates (a type
//! listed twice yields `reply` twice). palisade removes them while keeping the
//! first occurrence, because a tool is either preapproved or not: a repeated
//! grant adds no authority, but it makes every consumer of the policy (digests,
//! provider translation, audits) handle a multiset. The first declaration of a
//! type decides its `max` and `required`.

use serde_json::{Map, Value, json};

use crate::capability::{CapabilityRegistry, OutputContext, ToolSpec};

/// The tool every execution has.
pub const FINISH_EXECUTION: &str = "finish_execution";
/// The name of the MCP server the Hub injects.
pub const HUB_SERVER: &str = "hub";
/// The `$id` added to a step's output schema inside `finish_execution`.
pub const FINISH_OUTPUT_ID: &str = "urn:paseo:hub:finish-execution-output";

const FINISH_DESCRIPTION_SCHEMA: &str =
    "Completes this execution and records the configured structured output.";
const FINISH_DESCRIPTION_OPTIONAL: &str =
    "Completes this execution and records its optional structured output.";

/// One `allow_outputs` declaration of a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputDecl {
    /// The capability type, e.g. `slack.reply`.
    pub kind: String,
    /// How many emissions are allowed (authored default 1); `None` is
    /// unlimited (a trigger document's automatic event-native reply).
    pub max: Option<u32>,
    /// Whether the execution must emit this type before finishing.
    pub required: bool,
}

impl OutputDecl {
    /// An optional declaration with `max: 1`, the authored defaults.
    pub fn optional(kind: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            max: Some(1),
            required: false,
        }
    }
}

/// An exact MCP tool identity: `{kind: "mcp", server, tool}`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct McpToolRef {
    /// The MCP server name (always `hub` for derived policies).
    pub server: String,
    /// The tool name on that server.
    pub tool: String,
}

impl McpToolRef {
    /// A tool on the `hub` server.
    pub fn hub(tool: impl Into<String>) -> Self {
        Self {
            server: HUB_SERVER.to_owned(),
            tool: tool.into(),
        }
    }

    /// `{"kind":"mcp","server":…,"tool":…}`.
    pub fn to_json(&self) -> Value {
        json!({"kind": "mcp", "server": self.server, "tool": self.tool})
    }
}

/// The exact tools an execution may call without a human approval.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolPolicy {
    /// Preapproved tools, in order.
    pub preapproved: Vec<McpToolRef>,
}

impl ToolPolicy {
    /// `{"preapproved":[…]}`, the wire form.
    pub fn to_json(&self) -> Value {
        json!({"preapproved": self.preapproved.iter().map(McpToolRef::to_json).collect::<Vec<_>>()})
    }

    /// The tool names, in order.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.preapproved.iter().map(|r| r.tool.as_str())
    }
}

/// A declaration that became a tool.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Materialized {
    /// The declaration (the first one of its type).
    pub decl: OutputDecl,
    /// The tool its capability exposes.
    pub tool: ToolSpec,
}

/// A tool as the execution's MCP server lists it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ToolDefinition {
    /// Tool name.
    pub name: String,
    /// Listed description.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
}

impl ToolDefinition {
    /// `{"name","description","inputSchema"}`, the MCP `tools/list` shape.
    pub fn to_json(&self) -> Value {
        json!({"name": self.name, "description": self.description, "inputSchema": self.input_schema})
    }
}

/// The result of [`derive()`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Derived {
    /// The exact tool policy.
    pub policy: ToolPolicy,
    /// The declarations that became tools, in authored order, one per type.
    pub materialized: Vec<Materialized>,
    /// The tools the execution's MCP server lists, `finish_execution` first.
    pub tools: Vec<ToolDefinition>,
}

/// A step that must not be dispatched.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DispatchError {
    /// A `required: true` declaration names an unavailable capability.
    #[error(
        "required output capability unavailable: {}; register a Hub output tool for each type or remove required: true",
        kinds.join(", ")
    )]
    RequiredOutputCapabilityUnavailable {
        /// The unavailable types, in declaration order.
        kinds: Vec<String>,
    },
    /// Two different available capabilities expose one tool name.
    #[error(
        "output capabilities {first} and {second} both expose Hub tool {tool}; register unique tool names"
    )]
    DuplicateToolName {
        /// The first type.
        first: String,
        /// The second type.
        second: String,
        /// The shared tool name.
        tool: String,
    },
}

impl DispatchError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::RequiredOutputCapabilityUnavailable { .. } => {
                "required_output_capability_unavailable"
            }
            Self::DuplicateToolName { .. } => "output_capability_conflict",
        }
    }
}

/// Derives the exact tool policy of one execution (spec §4).
///
/// `output_schema` is the step's `output.schema`, used for the
/// `finish_execution` input schema. `ctx` is the run's output context; without
/// one, no capability is available.
///
/// # Errors
///
/// [`DispatchError::RequiredOutputCapabilityUnavailable`] when a required
/// declaration is unavailable; [`DispatchError::DuplicateToolName`] when two
/// available types expose one tool.
pub fn derive(
    decls: &[OutputDecl],
    ctx: Option<&OutputContext>,
    output_schema: Option<&Value>,
    registry: &CapabilityRegistry,
) -> Result<Derived, DispatchError> {
    let mut missing: Vec<String> = Vec::new();
    for d in decls.iter().filter(|d| d.required) {
        if !registry.is_available(&d.kind, ctx) && !missing.contains(&d.kind) {
            missing.push(d.kind.clone());
        }
    }
    if !missing.is_empty() {
        return Err(DispatchError::RequiredOutputCapabilityUnavailable { kinds: missing });
    }
    let mut materialized: Vec<Materialized> = Vec::new();
    for d in decls {
        let Some(cap) = registry.get(&d.kind) else {
            continue;
        };
        if !cap.availability.is_available(ctx) || materialized.iter().any(|m| m.decl.kind == d.kind)
        {
            continue;
        }
        if let Some(other) = materialized.iter().find(|m| m.tool.name == cap.tool.name) {
            return Err(DispatchError::DuplicateToolName {
                first: other.decl.kind.clone(),
                second: d.kind.clone(),
                tool: cap.tool.name.clone(),
            });
        }
        materialized.push(Materialized {
            decl: d.clone(),
            tool: cap.tool.clone(),
        });
    }
    let mut preapproved = vec![McpToolRef::hub(FINISH_EXECUTION)];
    preapproved.extend(
        materialized
            .iter()
            .map(|m| McpToolRef::hub(m.tool.name.clone())),
    );
    let mut tools = vec![finish_execution_tool(output_schema)];
    tools.extend(materialized.iter().map(|m| ToolDefinition {
        name: m.tool.name.clone(),
        description: listed_description(&m.tool.description, m.decl.max),
        input_schema: m.tool.input_schema.clone(),
    }));
    Ok(Derived {
        policy: ToolPolicy { preapproved },
        materialized,
        tools,
    })
}

/// `<description> (up to <max> times).`, as the Hub lists an output tool;
/// an unlimited one (`None`) is listed with its description alone.
pub fn listed_description(description: &str, max: Option<u32>) -> String {
    match max {
        Some(max) => format!("{description} (up to {max} times)."),
        None => description.to_owned(),
    }
}

/// The `reply` tool definition for a declaration with `max` (`None`:
/// unlimited).
pub fn reply_tool(max: Option<u32>) -> ToolDefinition {
    let spec = ToolSpec::reply();
    ToolDefinition {
        name: spec.name,
        description: listed_description(&spec.description, max),
        input_schema: spec.input_schema,
    }
}

/// The `finish_execution` tool definition for a step with or without `output.schema`.
pub fn finish_execution_tool(output_schema: Option<&Value>) -> ToolDefinition {
    let description = if output_schema.is_some() {
        FINISH_DESCRIPTION_SCHEMA
    } else {
        FINISH_DESCRIPTION_OPTIONAL
    };
    ToolDefinition {
        name: FINISH_EXECUTION.to_owned(),
        description: description.to_owned(),
        input_schema: finish_execution_schema(output_schema),
    }
}

/// The `finish_execution` input schema (spec §4).
///
/// Without an output schema: `{type:"object", properties:{}, additionalProperties:false}`.
/// With one: `{type:"object", required:["output"], properties:{output: <schema>},
/// additionalProperties:false}`, where an object schema without `$id` gets
/// `$id: "urn:paseo:hub:finish-execution-output"` appended.
pub fn finish_execution_schema(output_schema: Option<&Value>) -> Value {
    let Some(schema) = output_schema else {
        return json!({"type": "object", "properties": {}, "additionalProperties": false});
    };
    let mut output = schema.clone();
    if let Value::Object(map) = &mut output
        && !map.contains_key("$id")
    {
        map.insert("$id".to_owned(), Value::String(FINISH_OUTPUT_ID.to_owned()));
    }
    let mut props = Map::new();
    props.insert("output".to_owned(), output);
    json!({"type": "object", "required": ["output"], "properties": props, "additionalProperties": false})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(d: &Derived) -> Vec<&str> {
        d.policy.tool_names().collect()
    }

    #[test]
    fn finish_execution_alone_without_declarations() {
        let reg = CapabilityRegistry::default();
        let d = derive(&[], Some(&OutputContext::new("slack")), None, &reg).unwrap();
        assert_eq!(tools(&d), ["finish_execution"]);
        assert_eq!(d.tools.len(), 1);
        assert_eq!(d.tools[0].description, FINISH_DESCRIPTION_OPTIONAL);
    }

    #[test]
    fn duplicate_type_is_deduplicated_keeping_the_first_max() {
        let reg = CapabilityRegistry::default();
        let decls = [
            OutputDecl {
                kind: "slack.reply".into(),
                max: Some(2),
                required: false,
            },
            OutputDecl {
                kind: "slack.reply".into(),
                max: Some(7),
                required: false,
            },
        ];
        let d = derive(&decls, Some(&OutputContext::new("slack")), None, &reg).unwrap();
        assert_eq!(tools(&d), ["finish_execution", "reply"]);
        assert_eq!(
            d.tools[1].description,
            format!("{REPLY_DESC} (up to 2 times).")
        );
    }

    const REPLY_DESC: &str = crate::capability::REPLY_DESCRIPTION;

    #[test]
    fn required_unavailable_lists_each_type_once_in_order() {
        let reg = CapabilityRegistry::default();
        let decls = [
            OutputDecl {
                kind: "github.reply".into(),
                max: Some(1),
                required: true,
            },
            OutputDecl {
                kind: "slack.reply".into(),
                max: Some(1),
                required: true,
            },
            OutputDecl {
                kind: "github.reply".into(),
                max: Some(1),
                required: true,
            },
        ];
        let err = derive(&decls, Some(&OutputContext::new("discord")), None, &reg).unwrap_err();
        assert_eq!(err.code(), "required_output_capability_unavailable");
        assert_eq!(
            err.to_string(),
            "required output capability unavailable: github.reply, slack.reply; register a Hub output tool for each type or remove required: true"
        );
        // Positive control: in a Slack context only github.reply is missing.
        let err = derive(&decls, Some(&OutputContext::new("slack")), None, &reg).unwrap_err();
        assert_eq!(
            err.to_string(),
            "required output capability unavailable: github.reply; register a Hub output tool for each type or remove required: true"
        );
        let d = derive(&decls[1..2], Some(&OutputContext::new("slack")), None, &reg).unwrap();
        assert_eq!(tools(&d), ["finish_execution", "reply"]);
    }

    #[test]
    fn two_available_capabilities_with_one_tool_name_fail() {
        use crate::capability::{Availability, Capability};
        let mut reg = CapabilityRegistry::default();
        reg.register(Capability {
            kind: "manual.reply".into(),
            tool: ToolSpec::reply(),
            availability: Availability::Always,
        })
        .unwrap();
        let decls = [
            OutputDecl::optional("slack.reply"),
            OutputDecl::optional("manual.reply"),
        ];
        let err = derive(&decls, Some(&OutputContext::new("slack")), None, &reg).unwrap_err();
        assert_eq!(err.code(), "output_capability_conflict");
        assert_eq!(
            err.to_string(),
            "output capabilities slack.reply and manual.reply both expose Hub tool reply; register unique tool names"
        );
        // Positive control: in a Discord context slack.reply is unavailable, so no conflict.
        let d = derive(&decls, Some(&OutputContext::new("discord")), None, &reg).unwrap();
        assert_eq!(tools(&d), ["finish_execution", "reply"]);
    }

    #[test]
    fn finish_schema_keeps_an_authored_id() {
        let s = json!({"type": "object", "$id": "urn:mine"});
        assert_eq!(
            finish_execution_schema(Some(&s)),
            json!({"type":"object","required":["output"],"properties":{"output":{"type":"object","$id":"urn:mine"}},"additionalProperties":false})
        );
        assert_eq!(
            reply_tool(Some(5)).description,
            "Sends a reply to the conversation that triggered this execution. (up to 5 times)."
        );
        assert_eq!(
            finish_execution_tool(Some(&s)).description,
            FINISH_DESCRIPTION_SCHEMA
        );
    }
}
