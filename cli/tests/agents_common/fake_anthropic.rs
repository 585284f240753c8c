//! A fake Anthropic Messages provider for the agent suite (Claude Code,
//! Pi), over [`super::fake`]'s loopback server.
//!
//! It speaks what the real clients parse: `POST /v1/messages` streaming SSE
//! (`message_start`, `content_block_start` / `content_block_delta` /
//! `content_block_stop` for text and `tool_use` with `input_json_delta`,
//! `message_delta` with the stop reason and usage, `message_stop`), the
//! same message as one JSON body when `stream` is not true, and
//! `POST /v1/messages/count_tokens`. It checks the credential it receives
//! (the real key, never a placeholder) and answers 401 otherwise.
//!
//! The script: a request whose last user turn carries a `tool_result`
//! gets the final text [`DONE_TEXT`] (and the tool's output is in the
//! request for the test to read); a request whose user text holds
//! [`TOOL_MARKER`] gets one `tool_use` of the client's shell tool (`Bash`
//! for Claude Code, `bash` for Pi) running [`Anthropic::command`]; any
//! other request gets [`TEXT_REPLY`].

#![allow(dead_code, reason = "each suite uses a part of it")]

use serde_json::{Value, json};

use crate::fake::{Fake, Reply, Seen};

/// The text of a plain turn.
pub(crate) const TEXT_REPLY: &str = "FAKE-ANTHROPIC-TEXT-REPLY";
/// The text of the turn after a tool result came back.
pub(crate) const DONE_TEXT: &str = "FAKE-ANTHROPIC-TOOL-DONE";
/// A user prompt holding this asks for the tool turn.
pub(crate) const TOOL_MARKER: &str = "PLEASE-RUN-THE-TOOL";
/// The model the fake names in its answers.
pub(crate) const MODEL: &str = "claude-sonnet-4-5-20250929";

/// How the fake checks the credential.
#[derive(Clone, Debug)]
pub(crate) enum Expect {
    /// `x-api-key: <key>`.
    ApiKey(String),
    /// `authorization: Bearer <token>` and an `anthropic-beta` naming
    /// `oauth-`.
    Oauth(String),
}

/// The fake Anthropic provider.
pub(crate) struct Anthropic {
    /// The server.
    pub(crate) fake: Fake,
}

impl Anthropic {
    /// Start the fake: `expect` is the credential it accepts, `command`
    /// the shell command of the tool turn.
    pub(crate) fn start(expect: Expect, command: &str) -> Anthropic {
        let command = command.to_owned();
        let fake = Fake::start(move |req, _| answer(req, &expect, &command));
        Anthropic { fake }
    }

    /// `http://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        self.fake.url()
    }

    /// Every request so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.fake.seen()
    }

    /// The `POST /v1/messages` requests.
    pub(crate) fn messages(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == "POST" && s.path.split('?').next() == Some("/v1/messages"))
            .collect()
    }

    /// The tool result texts the clients sent back, in order.
    pub(crate) fn tool_results(&self) -> Vec<String> {
        self.messages()
            .iter()
            .filter_map(|s| last_tool_result(&s.json()))
            .collect()
    }
}

fn unauthorized() -> Reply {
    Reply::json(
        401,
        &json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
    )
}

fn credential_ok(req: &Seen, expect: &Expect) -> bool {
    match expect {
        Expect::ApiKey(k) => req.header("x-api-key") == Some(k.as_str()),
        Expect::Oauth(t) => {
            req.header("authorization") == Some(format!("Bearer {t}").as_str())
                && req
                    .header("anthropic-beta")
                    .is_some_and(|b| b.contains("oauth-"))
        }
    }
}

fn answer(req: &Seen, expect: &Expect, command: &str) -> Reply {
    let path = req.path.split('?').next().unwrap_or_default();
    if req.method != "POST" {
        return Reply::json(
            404,
            &json!({"type": "error", "error": {"type": "not_found_error", "message": "not found"}}),
        );
    }
    if !credential_ok(req, expect) {
        return unauthorized();
    }
    let body = req.json();
    match path {
        "/v1/messages/count_tokens" => Reply::json(200, &json!({"input_tokens": 42})),
        "/v1/messages" => message(&body, command),
        _ => Reply::json(
            404,
            &json!({"type": "error", "error": {"type": "not_found_error", "message": "not found"}}),
        ),
    }
}

/// One block of the answer.
enum Block {
    Text(String),
    Tool {
        id: String,
        name: String,
        input: Value,
    },
}

fn message(body: &Value, command: &str) -> Reply {
    let blocks = if last_tool_result(body).is_some() {
        vec![Block::Text(DONE_TEXT.to_owned())]
    } else if last_user_text(body).contains(TOOL_MARKER) {
        match shell_tool(body) {
            Some(name) => vec![
                Block::Text("Running the tool.".to_owned()),
                Block::Tool {
                    id: "toolu_01FakeAnthropicTool0001".to_owned(),
                    input: tool_input(&name, command),
                    name,
                },
            ],
            None => vec![Block::Text("no shell tool offered".to_owned())],
        }
    } else {
        vec![Block::Text(TEXT_REPLY.to_owned())]
    };
    let stop = if blocks.iter().any(|b| matches!(b, Block::Tool { .. })) {
        "tool_use"
    } else {
        "end_turn"
    };
    let model = body["model"].as_str().unwrap_or(MODEL).to_owned();
    if body["stream"].as_bool() == Some(true) {
        stream(&model, &blocks, stop)
    } else {
        Reply::json(200, &whole(&model, &blocks, stop))
    }
}

fn tool_input(name: &str, command: &str) -> Value {
    if name == "Bash" {
        json!({"command": command, "description": "Run the test command"})
    } else {
        json!({"command": command})
    }
}

/// The client's shell tool: `Bash` (Claude Code) or `bash` (Pi).
fn shell_tool(body: &Value) -> Option<String> {
    body["tools"]
        .as_array()?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .find(|n| n.eq_ignore_ascii_case("bash"))
        .map(str::to_owned)
}

fn last_user(body: &Value) -> Option<&Value> {
    body["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
}

/// The text of the last user message (string content or text blocks).
fn last_user_text(body: &Value) -> String {
    let Some(m) = last_user(body) else {
        return String::new();
    };
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The text of the `tool_result` in the last user message, if any.
fn last_tool_result(body: &Value) -> Option<String> {
    let blocks = last_user(body)?["content"].as_array()?;
    let r = blocks.iter().find(|b| b["type"] == "tool_result")?;
    Some(match &r["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    })
}

fn usage(output: u64) -> Value {
    json!({"input_tokens": 25, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": output})
}

fn whole(model: &str, blocks: &[Block], stop: &str) -> Value {
    let content: Vec<Value> = blocks
        .iter()
        .map(|b| match b {
            Block::Text(t) => json!({"type": "text", "text": t}),
            Block::Tool { id, name, input } => {
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
        })
        .collect();
    json!({
        "id": "msg_01FakeAnthropicMessage01",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": usage(12),
    })
}

fn stream(model: &str, blocks: &[Block], stop: &str) -> Reply {
    let mut events: Vec<(&str, Value)> = vec![(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_01FakeAnthropicMessage01", "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": usage(1)}}),
    )];
    for (index, b) in blocks.iter().enumerate() {
        match b {
            Block::Text(t) => {
                events.push(("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
                // Two deltas, so the client joins a stream, not one blob.
                let (a, z) = halves(t);
                for part in [a, z] {
                    events.push(("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": part}})));
                }
            }
            Block::Tool { id, name, input } => {
                events.push(("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
                let s = input.to_string();
                let (a, z) = halves(&s);
                for part in [a, z] {
                    events.push(("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": part}})));
                }
            }
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push(("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 12}})));
    events.push(("message_stop", json!({"type": "message_stop"})));
    Reply::sse(&events)
}

/// `s` cut in two at a character boundary near its middle.
fn halves(s: &str) -> (&str, &str) {
    let mut at = s.len() / 2;
    while !s.is_char_boundary(at) {
        at += 1;
    }
    s.split_at(at)
}
