//! The relay's session seam: routing admission before a request is
//! forwarded, and provider-side tool results seen in responses.
//!
//! SKELETON (issue 17): the contract; the egress helper wires it into
//! [`super::Relay`] and fills in [`ToolResultScanner`].

use std::fmt;

/// Why a relay refused a request on routing grounds (`routing_denied`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RouteRefusal {
    /// The routing rule, as `routing[<index>]`.
    pub rule: String,
    /// The path the session read that keeps its content from the provider
    /// (relative to its root where known).
    pub path: String,
    /// The human sentence.
    pub detail: String,
}

impl RouteRefusal {
    /// A refusal naming `rule` and `path`.
    pub fn new(
        rule: impl Into<String>,
        path: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            rule: rule.into(),
            path: path.into(),
            detail: detail.into(),
        }
    }
}

/// A provider-side tool result a relay saw in a response: untrusted web
/// content brought in by the provider itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerToolResult {
    /// Anthropic `web_search_tool_result` content block.
    AnthropicWebSearch,
    /// Anthropic `web_fetch_tool_result` content block.
    AnthropicWebFetch,
    /// OpenAI `web_search_call` output item.
    OpenAiWebSearch,
}

impl ServerToolResult {
    /// The wire type name (`web_search_tool_result`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AnthropicWebSearch => "web_search_tool_result",
            Self::AnthropicWebFetch => "web_fetch_tool_result",
            Self::OpenAiWebSearch => "web_search_call",
        }
    }
}

/// What a relay asks its session before forwarding, and tells it about
/// responses. The governed session implements it over its taint and
/// routing state; a relay without a gate forwards every allowed route.
pub trait RelayGate: Send + Sync + fmt::Debug {
    /// May a request of relay `relay`, bound to `provider`, go upstream
    /// now? Asked for every request after its route matched and before it
    /// is admitted; a refusal is answered 403 with a JSON body naming the
    /// rule and the path, recorded as outcome `routing_denied`.
    fn admit(&self, relay: &str, provider: &str) -> Result<(), RouteRefusal>;

    /// A response of relay `relay` carried `result`. Called (once per
    /// result seen) before the bytes that completed it are passed to the
    /// worker; the session raises `web` taint here.
    fn server_tool_result(&self, relay: &str, provider: &str, result: ServerToolResult);
}

/// An incremental, bounded scanner of response bodies (SSE streams and
/// plain JSON) for [`ServerToolResult`]s. It never buffers more than a
/// bounded amount and never delays the bytes it is fed.
#[derive(Debug, Default)]
pub struct ToolResultScanner {
    _private: (),
}

impl ToolResultScanner {
    /// A scanner for a response with this `content-type` (or none).
    pub fn new(_content_type: Option<&str>) -> Self {
        Self { _private: () }
    }

    /// Feeds the next body bytes; returns the results completed by them.
    pub fn feed(&mut self, _bytes: &[u8]) -> Vec<ServerToolResult> {
        Vec::new()
    }

    /// The body ended; returns results completed only by its end.
    pub fn finish(&mut self) -> Vec<ServerToolResult> {
        Vec::new()
    }
}
