//! A fake OpenAI provider for the Codex and OpenCode suites: the
//! Responses API (`POST /v1/responses`, streamed SSE) as Codex CLI 0.171.0
//! and OpenCode 1.18.33 (its `openai` provider, the AI SDK's Responses
//! client) read it, behind a TLS front with a throwaway CA (palisade's
//! relays only dial `https://` origins).
//!
//! The script: a request whose tools include the agent's shell tool
//! (`exec_command` for Codex, `bash` for OpenCode) and no tool result yet
//! gets one `function_call` running [`FakeOpenAi::tool_cmd`]; the request
//! that carries the `function_call_output` gets the final text
//! [`FINAL_TEXT`]; a request without tools (OpenCode's title generation)
//! gets a short title. Every request must carry `authorization: Bearer
//! <the real key>`, else 401. Chat Completions are not served: neither
//! agent uses them with these presets (404).
//!
//! Include it with its server:
//! `#[path = "agents_common/fake.rs"] mod fake;` and
//! `#[path = "agents_common/fake_openai.rs"] mod fake_openai;`.

#![allow(dead_code, reason = "each suite uses part of it")]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::fake::{Fake, Reply, Seen};

/// The text of the final turn; the agent's output must hold it.
pub const FINAL_TEXT: &str = "FAKE-OPENAI-TURN-DONE";

/// The fake's hostname (resolved to 127.0.0.1 with `palisade run
/// --resolve`), on its certificate.
pub const HOST: &str = "api.openai.test";

/// A running fake OpenAI provider.
pub struct FakeOpenAi {
    /// The plain HTTP server behind the TLS front (what it saw).
    pub fake: Fake,
    /// The TLS front's loopback port.
    pub tls_port: u16,
    /// PEM of the throwaway CA that issued the front's certificate
    /// (`palisade run --relay-ca`).
    pub ca_pem: String,
    /// The shell command of the tool-call turn.
    pub tool_cmd: String,
}

impl FakeOpenAi {
    /// Start the fake: it accepts only `Bearer <key>`, and its tool-call
    /// turn runs `tool_cmd`.
    pub fn start(key: &str, tool_cmd: &str) -> FakeOpenAi {
        let (k, cmd) = (format!("Bearer {key}"), tool_cmd.to_owned());
        let fake = Fake::start(move |req, _| reply(req, &k, &cmd));
        let (tls_port, ca_pem) = tls_front(fake.addr);
        FakeOpenAi {
            fake,
            tls_port,
            ca_pem,
            tool_cmd: tool_cmd.to_owned(),
        }
    }

    /// The origin a relay names: `https://api.openai.test:PORT`.
    pub fn origin(&self) -> String {
        format!("https://{HOST}:{}", self.tls_port)
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.fake.seen()
    }
}

fn reply(req: &Seen, key: &str, tool_cmd: &str) -> Reply {
    if req.header("authorization") != Some(key) {
        return Reply::json(
            401,
            &json!({"error": {"message": "fake: wrong credential", "type": "invalid_request_error", "code": "invalid_api_key"}}),
        );
    }
    if req.method != "POST" || req.path.split('?').next() != Some("/v1/responses") {
        return Reply::json(404, &json!({"error": {"message": "fake: no such route"}}));
    }
    let body = req.json();
    let input = body["input"].as_array().cloned().unwrap_or_default();
    let tools: Vec<String> = body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["name"].as_str().map(ToOwned::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let answered = input
        .iter()
        .any(|i| i["type"].as_str() == Some("function_call_output"));
    let shell = ["exec_command", "bash"]
        .into_iter()
        .find(|n| tools.iter().any(|t| t == n));
    match (shell, answered) {
        (Some(tool), false) => tool_call(tool, tool_cmd),
        (Some(_), true) => text(FINAL_TEXT),
        (None, _) => text("Fake title"),
    }
}

fn usage() -> Value {
    json!({"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0},
           "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 0},
           "total_tokens": 19})
}

fn created(id: &str) -> (&'static str, Value) {
    (
        "response.created",
        json!({"type": "response.created", "sequence_number": 0,
               "response": {"id": id, "object": "response", "status": "in_progress", "output": []}}),
    )
}

fn completed(id: &str, output: Value) -> (&'static str, Value) {
    (
        "response.completed",
        json!({"type": "response.completed", "sequence_number": 9,
               "response": {"id": id, "object": "response", "status": "completed",
                            "output": output, "usage": usage()}}),
    )
}

/// One `function_call` item: Codex's `exec_command` takes `cmd`, OpenCode's
/// `bash` takes `command` and `description`.
fn tool_call(tool: &str, cmd: &str) -> Reply {
    let args = if tool == "exec_command" {
        json!({"cmd": cmd})
    } else {
        json!({"command": cmd, "description": "Run the fake's command"})
    }
    .to_string();
    let item = json!({"type": "function_call", "id": "fc_fake1", "call_id": "call_fake1",
                      "name": tool, "arguments": args, "status": "completed"});
    let mut added = item.clone();
    added["arguments"] = json!("");
    added["status"] = json!("in_progress");
    Reply::sse(&[
        created("resp_fake_tool"),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": added}),
        ),
        (
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta", "sequence_number": 2,
                   "output_index": 0, "item_id": "fc_fake1", "delta": args}),
        ),
        (
            "response.function_call_arguments.done",
            json!({"type": "response.function_call_arguments.done", "sequence_number": 3,
                   "output_index": 0, "item_id": "fc_fake1", "arguments": args}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "sequence_number": 4, "output_index": 0, "item": item}),
        ),
        completed("resp_fake_tool", json!([item])),
    ])
}

/// One assistant `message` streamed as one text delta.
fn text(t: &str) -> Reply {
    let done = json!({"type": "message", "id": "msg_fake1", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": t, "annotations": []}]});
    let part = json!({"type": "output_text", "text": "", "annotations": []});
    Reply::sse(&[
        created("resp_fake_text"),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
                   "item": {"type": "message", "id": "msg_fake1", "role": "assistant",
                            "status": "in_progress", "content": []}}),
        ),
        (
            "response.content_part.added",
            json!({"type": "response.content_part.added", "sequence_number": 2, "output_index": 0,
                   "item_id": "msg_fake1", "content_index": 0, "part": part}),
        ),
        (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "sequence_number": 3, "output_index": 0,
                   "item_id": "msg_fake1", "content_index": 0, "delta": t}),
        ),
        (
            "response.output_text.done",
            json!({"type": "response.output_text.done", "sequence_number": 4, "output_index": 0,
                   "item_id": "msg_fake1", "content_index": 0, "text": t}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "sequence_number": 5, "output_index": 0, "item": done}),
        ),
        completed("resp_fake_text", json!([done])),
    ])
}

/// The tool results the fake received (`function_call_output` items'
/// `output`), in order.
pub fn tool_outputs(seen: &[Seen]) -> Vec<String> {
    seen.iter()
        .flat_map(|s| s.json()["input"].as_array().cloned().unwrap_or_default())
        .filter(|i| i["type"].as_str() == Some("function_call_output"))
        .map(|i| match &i["output"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// A TLS terminator on a fresh loopback port in front of `plain`, with a
/// certificate for [`HOST`] and 127.0.0.1 issued by a throwaway CA.
fn tls_front(plain: std::net::SocketAddr) -> (u16, String) {
    let (config, ca_pem) = tls_config();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the TLS front");
    let port = listener.local_addr().expect("front addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(Ok(mut tls)) =
                        tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
                    else {
                        return;
                    };
                    let Ok(mut up) = tokio::net::TcpStream::connect(plain).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
    });
    (port, ca_pem)
}

fn tls_config() -> (rustls::ServerConfig, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA");
    let leaf_key = KeyPair::generate().expect("leaf key");
    let leaf = CertificateParams::new(vec![HOST.to_owned(), "127.0.0.1".to_owned()])
        .expect("leaf params")
        .signed_by(&leaf_key, &ca)
        .expect("leaf");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocols")
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone(), ca.der().clone()], key)
    .expect("server config");
    (config, ca.pem())
}
