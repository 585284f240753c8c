//! Provider translation: a [`ToolPolicy`] merged into a provider's authored
//! options, giving the full effective options the daemon starts the provider
//! with (spec §5).
//!
//! - Claude: `allowedTools` gains `mcp__<server>__<tool>` (deduplicated, first
//!   occurrence order kept); `disallowedTools` and `settings.permissions.deny`
//!   are never touched, so an authored deny still wins.
//! - Codex: `mcp_servers.<server>` gains `enabled_tools`,
//!   `default_tools_approval_mode: "prompt"` and `tools.<tool>.approval_mode:
//!   "approve"`; other servers are untouched.
//! - OpenCode: `permission` becomes a rule list; each grant is a rule
//!   `{permission: "<server>_<tool>", pattern: "*", action: "allow"}`. OpenCode
//!   is last-match-wins, so the position of the grants decides whether an
//!   authored deny can override them: see [`OpenCodeOrdering`].
//!
//! Any other provider fails closed with `tool_policy_unsupported`: there is no
//! broad fallback.

use serde_json::{Map, Value, json};

use crate::derive::ToolPolicy;

/// The MCP server name the daemon reserves for itself.
pub const RESERVED_SERVER: &str = "paseo";

/// A provider that can preapprove exact MCP tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Provider {
    /// Anthropic Claude (Agent SDK).
    Claude,
    /// OpenAI Codex.
    Codex,
    /// OpenCode.
    OpenCode,
}

impl Provider {
    /// Parses a provider id; a `provider/model` id uses the part before `/`.
    ///
    /// # Errors
    ///
    /// [`TranslateError::Unsupported`] for any other provider.
    pub fn from_id(id: &str) -> Result<Self, TranslateError> {
        let base = id.split('/').next().unwrap_or(id);
        match base {
            "claude" => Ok(Self::Claude),
            "codex" => Ok(Self::Codex),
            "opencode" => Ok(Self::OpenCode),
            _ => Err(TranslateError::Unsupported {
                provider: id.to_owned(),
            }),
        }
    }

    /// The provider id (`claude`, `codex`, `opencode`).
    pub fn id(self) -> &'static str {
        match self {
            Self::Claude => "claude",
            Self::Codex => "codex",
            Self::OpenCode => "opencode",
        }
    }
}

/// Where OpenCode grant rules go relative to the authored rules.
///
/// OpenCode evaluates rules last-match-wins. The two Paseo versions disagree
/// (spec §5 CONFLICT); palisade makes the choice explicit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OpenCodeOrdering {
    /// Grants, then authored rules: an authored `ask` or `deny` overrides a
    /// grant, as Claude's deny-first evaluation does. The default.
    #[default]
    GrantsFirst,
    /// Authored rules, then grants: grants override authored `ask`/`deny`
    /// (Paseo `opencode/options.ts@222c3798`).
    GrantsLast,
}

/// One translation request.
#[derive(Clone, Copy, Debug)]
pub struct TranslateRequest<'a> {
    /// The provider id, possibly `provider/model`.
    pub provider: &'a str,
    /// The authored options (`agent.options`), if any.
    pub options: Option<&'a Value>,
    /// The derived tool policy.
    pub policy: &'a ToolPolicy,
    /// The names of the MCP servers in the same create request.
    pub mcp_servers: &'a [&'a str],
    /// OpenCode rule ordering.
    pub opencode_ordering: OpenCodeOrdering,
}

/// Why a policy cannot be applied.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum TranslateError {
    /// The provider cannot preapprove exact MCP tools.
    #[error(
        "Provider '{provider}' cannot preapprove exact MCP tools for unattended execution; select Claude, Codex, or OpenCode"
    )]
    Unsupported {
        /// The provider id as given.
        provider: String,
    },
    /// A preapproval names a server that is not in the request.
    #[error(
        "Hub tool preapproval '{server}.{tool}' requires MCP server '{server}' in the same create request"
    )]
    MissingServer {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
    },
    /// The request uses the daemon's reserved server name.
    #[error("Hub execution MCP server name \"paseo\" is reserved by the daemon")]
    ReservedServer,
    /// The authored options are not a JSON object, or a translated key has the wrong shape.
    #[error("provider '{provider}': agent.options{path}: {message}")]
    InvalidOptions {
        /// The provider id.
        provider: String,
        /// The path below `agent.options`, e.g. `.allowedTools[1]`.
        path: String,
        /// What is wrong.
        message: String,
    },
}

impl TranslateError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unsupported { .. } => "tool_policy_unsupported",
            Self::MissingServer { .. } | Self::ReservedServer => "create_failed",
            Self::InvalidOptions { .. } => "provider_options_invalid",
        }
    }
}

/// Checks that every preapproval names a server of the request and that the
/// reserved name `paseo` is not used.
///
/// # Errors
///
/// [`TranslateError::ReservedServer`] or [`TranslateError::MissingServer`].
pub fn check_servers(policy: &ToolPolicy, mcp_servers: &[&str]) -> Result<(), TranslateError> {
    if mcp_servers.contains(&RESERVED_SERVER) {
        return Err(TranslateError::ReservedServer);
    }
    for r in &policy.preapproved {
        if r.server == RESERVED_SERVER {
            return Err(TranslateError::ReservedServer);
        }
        if !mcp_servers.contains(&r.server.as_str()) {
            return Err(TranslateError::MissingServer {
                server: r.server.clone(),
                tool: r.tool.clone(),
            });
        }
    }
    Ok(())
}

/// Translates a policy into the provider's full effective options.
///
/// Returns `None` only when there are no options and no grants.
///
/// # Errors
///
/// Unsupported provider, a server check failure, or options of the wrong shape
/// at a key the translation writes.
pub fn translate(req: &TranslateRequest<'_>) -> Result<Option<Value>, TranslateError> {
    let provider = Provider::from_id(req.provider)?;
    check_servers(req.policy, req.mcp_servers)?;
    if req.options.is_none() && req.policy.preapproved.is_empty() {
        return Ok(None);
    }
    let invalid = |path: &str, message: &str| TranslateError::InvalidOptions {
        provider: req.provider.to_owned(),
        path: path.to_owned(),
        message: message.to_owned(),
    };
    let mut opts = match req.options {
        None => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(invalid("", "expected object")),
    };
    match provider {
        Provider::Claude => apply_claude(&mut opts, req.policy).map_err(|(p, m)| invalid(&p, m))?,
        Provider::Codex => apply_codex(&mut opts, req.policy).map_err(|(p, m)| invalid(&p, m))?,
        Provider::OpenCode => apply_opencode(&mut opts, req.policy, req.opencode_ordering)
            .map_err(|(p, m)| invalid(&p, m))?,
    }
    Ok(Some(Value::Object(opts)))
}

/// The placeholder URL shown for the injected `hub` MCP server when the real,
/// per-execution URL is not known (e.g. in `palisade policy`).
pub const HUB_URL_PLACEHOLDER: &str = "<hub-mcp-url>";

/// Adds the injected `hub` MCP server with `url` to Codex options, which carry
/// MCP servers inside the options (`mcp_servers`); other providers receive MCP
/// servers beside their options, so their options are returned unchanged.
///
/// An existing `mcp_servers.hub.url` is kept. Non-object options are returned
/// unchanged, so that [`translate`] reports them.
pub fn seed_hub_server(provider: &str, options: Option<&Value>, url: &str) -> Option<Value> {
    if Provider::from_id(provider) != Ok(Provider::Codex) {
        return options.cloned();
    }
    let mut opts = match options {
        None => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => return Some(other.clone()),
    };
    if let Value::Object(servers) = opts
        .entry("mcp_servers")
        .or_insert_with(|| Value::Object(Map::new()))
        && let Value::Object(hub) = servers
            .entry(crate::derive::HUB_SERVER)
            .or_insert_with(|| Value::Object(Map::new()))
    {
        hub.entry("url")
            .or_insert_with(|| Value::String(url.to_owned()));
    }
    Some(Value::Object(opts))
}

type ShapeError = (String, &'static str);

fn apply_claude(opts: &mut Map<String, Value>, policy: &ToolPolicy) -> Result<(), ShapeError> {
    let mut allowed: Vec<Value> = Vec::new();
    match opts.get("allowedTools") {
        None => {}
        Some(Value::Array(items)) => {
            for (i, v) in items.iter().enumerate() {
                if !v.is_string() {
                    return Err((format!(".allowedTools[{i}]"), "expected string"));
                }
                if !allowed.contains(v) {
                    allowed.push(v.clone());
                }
            }
        }
        Some(_) => return Err((".allowedTools".to_owned(), "expected array")),
    }
    for r in &policy.preapproved {
        let name = Value::String(format!("mcp__{}__{}", r.server, r.tool));
        if !allowed.contains(&name) {
            allowed.push(name);
        }
    }
    opts.insert("allowedTools".to_owned(), Value::Array(allowed));
    Ok(())
}

fn apply_codex(opts: &mut Map<String, Value>, policy: &ToolPolicy) -> Result<(), ShapeError> {
    let servers = opts
        .entry("mcp_servers")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(servers) = servers else {
        return Err((".mcp_servers".to_owned(), "expected object"));
    };
    let mut order: Vec<&str> = Vec::new();
    for r in &policy.preapproved {
        if !order.contains(&r.server.as_str()) {
            order.push(&r.server);
        }
    }
    for server in order {
        let tools: Vec<&str> = policy
            .preapproved
            .iter()
            .filter(|r| r.server == server)
            .map(|r| r.tool.as_str())
            .collect();
        let entry = servers
            .entry(server.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(entry) = entry else {
            return Err((
                format!(".mcp_servers{}", path_key(server)),
                "expected object",
            ));
        };
        let mut per_tool = Map::new();
        for t in &tools {
            per_tool.insert((*t).to_owned(), json!({"approval_mode": "approve"}));
        }
        entry.insert("enabled_tools".to_owned(), json!(tools));
        entry.insert("default_tools_approval_mode".to_owned(), json!("prompt"));
        entry.insert("tools".to_owned(), Value::Object(per_tool));
    }
    Ok(())
}

/// One OpenCode permission rule.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    permission: String,
    pattern: String,
    action: String,
}

impl Rule {
    fn to_json(&self) -> Value {
        json!({"permission": self.permission, "pattern": self.pattern, "action": self.action})
    }
}

fn apply_opencode(
    opts: &mut Map<String, Value>,
    policy: &ToolPolicy,
    ordering: OpenCodeOrdering,
) -> Result<(), ShapeError> {
    let grants: Vec<Rule> = policy
        .preapproved
        .iter()
        .map(|r| Rule {
            permission: format!("{}_{}", r.server, r.tool),
            pattern: "*".to_owned(),
            action: "allow".to_owned(),
        })
        .collect();
    let authored = match opts.get("permission") {
        None => Vec::new(),
        Some(v) => opencode_rules(v)?
            .into_iter()
            // An already translated rule list carries the grants: drop exactly those
            // so that translation is idempotent. Authored asks and denies stay.
            .filter(|r| !grants.contains(r))
            .collect(),
    };
    let rules: Vec<Rule> = match ordering {
        OpenCodeOrdering::GrantsFirst => grants.into_iter().chain(authored).collect(),
        OpenCodeOrdering::GrantsLast => authored.into_iter().chain(grants).collect(),
    };
    opts.insert(
        "permission".to_owned(),
        Value::Array(rules.iter().map(Rule::to_json).collect()),
    );
    Ok(())
}

/// The rules an authored `permission` value stands for, in order.
fn opencode_rules(v: &Value) -> Result<Vec<Rule>, ShapeError> {
    let rule = |permission: &str, pattern: &str, action: &str| Rule {
        permission: permission.to_owned(),
        pattern: pattern.to_owned(),
        action: action.to_owned(),
    };
    let action = |v: &Value, path: String| -> Result<String, ShapeError> {
        match v.as_str() {
            Some(a @ ("ask" | "allow" | "deny")) => Ok(a.to_owned()),
            _ => Err((path, "expected one of \"ask\"|\"allow\"|\"deny\"")),
        }
    };
    match v {
        Value::String(_) => Ok(vec![rule("*", "*", &action(v, ".permission".to_owned())?)]),
        Value::Object(map) => {
            let mut out = Vec::new();
            for (name, val) in map {
                let path = format!(".permission{}", path_key(name));
                match val {
                    Value::Object(patterns) => {
                        for (pattern, a) in patterns {
                            let a = action(a, format!("{path}{}", path_key(pattern)))?;
                            out.push(rule(name, pattern, &a));
                        }
                    }
                    _ => out.push(rule(name, "*", &action(val, path)?)),
                }
            }
            Ok(out)
        }
        Value::Array(items) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let path = format!(".permission[{i}]");
                let field = |k: &str| item.get(k).and_then(Value::as_str);
                match (field("permission"), field("pattern"), item.get("action")) {
                    (Some(p), Some(pat), Some(a)) => {
                        out.push(rule(p, pat, &action(a, format!("{path}.action"))?));
                    }
                    _ => return Err((path, "expected {permission, pattern, action}")),
                }
            }
            Ok(out)
        }
        _ => Err((".permission".to_owned(), "expected string or object")),
    }
}

/// `.key` for identifier-like keys, `["json-quoted"]` otherwise (spec §6).
fn path_key(key: &str) -> String {
    let mut chars = key.chars();
    let ident = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if ident {
        format!(".{key}")
    } else {
        format!("[{}]", Value::String(key.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derive::McpToolRef;

    fn policy(tools: &[&str]) -> ToolPolicy {
        ToolPolicy {
            preapproved: tools.iter().map(|t| McpToolRef::hub(*t)).collect(),
        }
    }

    fn run(
        provider: &str,
        opts: Option<Value>,
        p: &ToolPolicy,
        ord: OpenCodeOrdering,
    ) -> Result<Option<Value>, TranslateError> {
        translate(&TranslateRequest {
            provider,
            options: opts.as_ref(),
            policy: p,
            mcp_servers: &["hub"],
            opencode_ordering: ord,
        })
    }

    #[test]
    fn unsupported_provider_fails_closed_with_the_exact_message() {
        let p = policy(&["finish_execution"]);
        let err = run("gemini", None, &p, OpenCodeOrdering::default()).unwrap_err();
        assert_eq!(err.code(), "tool_policy_unsupported");
        assert_eq!(
            err.to_string(),
            "Provider 'gemini' cannot preapprove exact MCP tools for unattended execution; select Claude, Codex, or OpenCode"
        );
        // A provider/model id uses the part before the slash; positive control.
        assert!(run("claude/opus", None, &p, OpenCodeOrdering::default()).is_ok());
        assert!(run("claudex/opus", None, &p, OpenCodeOrdering::default()).is_err());
    }

    #[test]
    fn preapproval_needs_its_server_in_the_request() {
        let p = policy(&["finish_execution"]);
        let req = |servers: &'static [&'static str]| {
            translate(&TranslateRequest {
                provider: "codex",
                options: None,
                policy: &p,
                mcp_servers: servers,
                opencode_ordering: OpenCodeOrdering::default(),
            })
        };
        let err = req(&[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Hub tool preapproval 'hub.finish_execution' requires MCP server 'hub' in the same create request"
        );
        let err = req(&["hub", "paseo"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Hub execution MCP server name \"paseo\" is reserved by the daemon"
        );
        assert!(req(&["hub"]).is_ok());
    }

    #[test]
    fn wrong_shapes_are_errors_with_paths() {
        let p = policy(&["finish_execution"]);
        let err = run(
            "claude",
            Some(json!({"allowedTools": ["Read", 4]})),
            &p,
            OpenCodeOrdering::default(),
        )
        .unwrap_err();
        assert_eq!(err.code(), "provider_options_invalid");
        assert_eq!(
            err.to_string(),
            "provider 'claude': agent.options.allowedTools[1]: expected string"
        );
        let err = run(
            "opencode",
            Some(json!({"permission": {"bash": {"git status": "sometimes"}}})),
            &p,
            OpenCodeOrdering::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "provider 'opencode': agent.options.permission.bash[\"git status\"]: expected one of \"ask\"|\"allow\"|\"deny\""
        );
        let err = run("codex", Some(json!([])), &p, OpenCodeOrdering::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "provider 'codex': agent.options: expected object"
        );
        // Positive controls: the same keys with the right shapes translate.
        for (provider, opts) in [
            ("claude", json!({"allowedTools": ["Read"]})),
            (
                "opencode",
                json!({"permission": {"bash": {"git status": "allow"}}}),
            ),
            ("codex", json!({})),
        ] {
            assert!(
                run(provider, Some(opts), &p, OpenCodeOrdering::default())
                    .unwrap()
                    .is_some()
            );
        }
    }
}
