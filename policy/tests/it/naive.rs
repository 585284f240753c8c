//! A deliberately naive reference implementation of derive + translate,
//! written straight from spec §3–§5 with the production registry hard-coded
//! and no shared code with the crate. The differential test in `props.rs`
//! checks that the real implementation agrees with it on generated workflows.

use serde_json::{Value, json};

/// `(type, max, required)` declarations; `max: None` is unlimited.
pub(crate) type Decl = (String, Option<u32>, bool);

/// An authored trigger-document grant: `(type, max?, required?)`.
pub(crate) type Authored = (String, Option<u32>, Option<bool>);

/// The reference trigger-document derivation (`hub-triggers.md` §4.3),
/// for a run of `event` in its own context: the tool names and their listed
/// descriptions (without `finish_execution`'s), or the error message.
/// No dedup, as the Hub.
pub(crate) fn trigger_derive(
    outputs: &[Authored],
    event: &str,
) -> Result<(Vec<String>, Vec<String>), String> {
    let mut grants: Vec<Decl> = outputs
        .iter()
        .map(|(t, max, req)| (t.clone(), Some(max.unwrap_or(1)), req.unwrap_or(false)))
        .collect();
    let p = event.split('.').next().unwrap_or("");
    let reply = format!("{p}.reply");
    if ["slack", "discord", "linear", "github"].contains(&p) && !grants.iter().any(|g| g.0 == reply)
    {
        grants.push((reply, None, false));
    }
    let available = |t: &str| match p {
        "slack" => t == "slack.reply",
        "discord" => t == "discord.reply",
        "linear" => t == "linear.reply",
        "github" => t == "github.reply" && event != "github.push",
        _ => false,
    };
    let mut missing: Vec<&str> = Vec::new();
    for (t, _, required) in &grants {
        if *required && !available(t) && !missing.contains(&t.as_str()) {
            missing.push(t);
        }
    }
    if !missing.is_empty() {
        return Err(format!(
            "required output capability unavailable: {}; register a Hub output tool for each type or remove required: true",
            missing.join(", ")
        ));
    }
    let mut tools = vec!["finish_execution".to_string()];
    let mut descriptions = Vec::new();
    for (t, max, _) in &grants {
        if available(t) {
            tools.push("reply".to_string());
            let base = "Sends a reply to the conversation that triggered this execution.";
            descriptions.push(match max {
                Some(n) => format!("{base} (up to {n} times)."),
                None => base.to_string(),
            });
        }
    }
    Ok((tools, descriptions))
}

/// The reference derivation: the tool names, or the error message.
pub(crate) fn derive(decls: &[Decl], ctx: Option<&str>) -> Result<Vec<String>, String> {
    let available = |t: &str| match ctx {
        Some("slack") => t == "slack.reply",
        Some("discord") => t == "discord.reply",
        _ => false,
    };
    let mut missing = String::new();
    for (t, _, required) in decls {
        if *required && !available(t) && !missing.split(", ").any(|m| m == t) {
            if !missing.is_empty() {
                missing += ", ";
            }
            missing += t;
        }
    }
    if !missing.is_empty() {
        return Err(format!(
            "required output capability unavailable: {missing}; register a Hub output tool for each type or remove required: true"
        ));
    }
    let mut tools = vec!["finish_execution".to_string()];
    for (t, _, _) in decls {
        if available(t) && !tools.iter().any(|x| x == "reply") {
            tools.push("reply".to_string());
        }
    }
    Ok(tools)
}

/// The reference translation: `(code, message)` on error.
pub(crate) fn translate(
    provider: &str,
    options: Option<&Value>,
    tools: &[String],
    grants_first: bool,
) -> Result<Option<Value>, (String, String)> {
    let base = match provider.find('/') {
        Some(i) => &provider[..i],
        None => provider,
    };
    if base != "claude" && base != "codex" && base != "opencode" {
        return Err((
            "tool_policy_unsupported".into(),
            format!(
                "Provider '{provider}' cannot preapprove exact MCP tools for unattended execution; select Claude, Codex, or OpenCode"
            ),
        ));
    }
    if options.is_none() && tools.is_empty() {
        return Ok(None);
    }
    let mut out = options.cloned().unwrap_or(json!({}));
    if base == "claude" {
        let mut allowed: Vec<Value> = vec![];
        let authored = out.get("allowedTools").cloned().unwrap_or(json!([]));
        for name in authored
            .as_array()
            .unwrap()
            .iter()
            .cloned()
            .chain(tools.iter().map(|t| json!(format!("mcp__hub__{t}"))))
        {
            if !allowed.contains(&name) {
                allowed.push(name);
            }
        }
        out["allowedTools"] = Value::Array(allowed);
    } else if base == "codex" {
        if out.get("mcp_servers").is_none() {
            out["mcp_servers"] = json!({});
        }
        if out["mcp_servers"].get("hub").is_none() {
            out["mcp_servers"]["hub"] = json!({"url": "<hub-mcp-url>"});
        }
        if out["mcp_servers"]["hub"].get("url").is_none() {
            out["mcp_servers"]["hub"]["url"] = json!("<hub-mcp-url>");
        }
        let mut per_tool = json!({});
        for t in tools {
            per_tool[t] = json!({"approval_mode": "approve"});
        }
        if !tools.is_empty() {
            out["mcp_servers"]["hub"]["enabled_tools"] = json!(tools);
            out["mcp_servers"]["hub"]["default_tools_approval_mode"] = json!("prompt");
            out["mcp_servers"]["hub"]["tools"] = per_tool;
        }
    } else {
        let rule =
            |p: &str, pat: &str, a: &Value| json!({"permission": p, "pattern": pat, "action": a});
        let grants: Vec<Value> = tools
            .iter()
            .map(|t| rule(&format!("hub_{t}"), "*", &json!("allow")))
            .collect();
        let mut authored: Vec<Value> = vec![];
        match out.get("permission") {
            None => {}
            Some(Value::String(a)) => authored.push(rule("*", "*", &json!(a))),
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    match v {
                        Value::Object(pats) => {
                            for (pat, a) in pats {
                                authored.push(rule(k, pat, a));
                            }
                        }
                        a => authored.push(rule(k, "*", a)),
                    }
                }
            }
            Some(other) => panic!("naive: unexpected permission {other}"),
        }
        authored.retain(|r| !grants.contains(r));
        let rules = if grants_first {
            grants.into_iter().chain(authored).collect::<Vec<_>>()
        } else {
            authored.into_iter().chain(grants).collect::<Vec<_>>()
        };
        out["permission"] = Value::Array(rules);
    }
    Ok(Some(out))
}
