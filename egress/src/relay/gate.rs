//! The relay's session seam: routing admission before a request is
//! forwarded ([`RelayGate::admit`]), and provider-side tool results seen in
//! responses ([`RelayGate::server_tool_result`], found by the pure,
//! incremental [`ToolResultScanner`]).

use std::fmt;

use crate::control::{AskAnswer, OutwardAction, OutwardAnswer, OutwardResult};

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

/// A provider-side tool result a relay saw in a response: untrusted
/// outside content (a web page, a remote MCP server's answer) brought in by
/// the provider itself.
///
/// Only tools that reach outside the provider are listed: web search and
/// fetch, and remote MCP servers (whose URL the request, so the worker,
/// names). Code execution, file search and computer use are not: their
/// results come from the provider's sandbox or from what the request (or
/// the worker's own account files) put there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerToolResult {
    /// Anthropic `web_search_tool_result` content block.
    AnthropicWebSearch,
    /// Anthropic `web_fetch_tool_result` content block.
    AnthropicWebFetch,
    /// OpenAI `web_search_call` output item.
    OpenAiWebSearch,
    /// Anthropic `mcp_tool_result` content block (the MCP connector,
    /// `mcp_servers` in the request).
    AnthropicMcpToolResult,
    /// OpenAI Responses `mcp_call` output item (a remote MCP tool call and
    /// its `output`).
    OpenAiMcpCall,
    /// OpenAI Responses `mcp_list_tools` output item (a remote MCP
    /// server's tool names and descriptions).
    OpenAiMcpListTools,
    /// OpenAI `url_citation` annotation: web content cited by a search
    /// model (chat completions with `web_search_options`, which report no
    /// `web_search_call`).
    OpenAiUrlCitation,
}

impl ServerToolResult {
    /// The wire type name (`web_search_tool_result`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AnthropicWebSearch => "web_search_tool_result",
            Self::AnthropicWebFetch => "web_fetch_tool_result",
            Self::OpenAiWebSearch => "web_search_call",
            Self::AnthropicMcpToolResult => "mcp_tool_result",
            Self::OpenAiMcpCall => "mcp_call",
            Self::OpenAiMcpListTools => "mcp_list_tools",
            Self::OpenAiUrlCitation => "url_citation",
        }
    }

    /// The family of the result: an Anthropic content block, an OpenAI
    /// Responses output item, or an annotation.
    fn family(self) -> Family {
        match self {
            Self::AnthropicWebSearch | Self::AnthropicWebFetch | Self::AnthropicMcpToolResult => {
                Family::AnthropicBlock
            }
            Self::OpenAiWebSearch | Self::OpenAiMcpCall | Self::OpenAiMcpListTools => {
                Family::OpenAiItem
            }
            Self::OpenAiUrlCitation => Family::Annotation,
        }
    }
}

/// Where a [`ServerToolResult`]'s type name appears in a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// An Anthropic content block's `type`.
    AnthropicBlock,
    /// An OpenAI Responses output item's `type`.
    OpenAiItem,
    /// An annotation's `type` (OpenAI chat completions and Responses).
    Annotation,
}

/// What a relay asks its session before forwarding, and tells it about
/// responses. The governed session implements it over its taint and
/// routing state; a relay without a gate forwards every allowed plain
/// route and refuses every outward route (the defaults of the outward
/// methods deny).
pub trait RelayGate: Send + Sync + fmt::Debug {
    /// May a request of relay `relay`, bound to `provider`, go upstream
    /// now? Asked for every request after its route matched and before it
    /// is admitted; a refusal is answered 403 with a JSON body naming the
    /// rule and the path, recorded as outcome `routing_denied`.
    fn admit(&self, relay: &str, provider: &str) -> Result<(), RouteRefusal>;

    /// A response of relay `relay` carried `result`. Called (once per
    /// result seen) before the bytes that completed it are passed to the
    /// worker; the session raises `web` taint here. It is called from the
    /// response body's poll, so the bytes wait for it: it should record and
    /// return, not wait on anything the worker controls. `false` means the
    /// result could not be recorded: the relay then cuts the response
    /// before those bytes (fail closed), so the worker never holds web
    /// content the session does not know about.
    fn server_tool_result(&self, relay: &str, provider: &str, result: ServerToolResult) -> bool;

    /// The policy's answer for an outward action now, without asking
    /// anyone and without a record: a git push's all-or-nothing pre-check
    /// (one ref denied refuses the whole push before anything is asked).
    /// The default, for a gate with no outward policy, is deny.
    fn outward_policy(&self, relay: &str, action: &OutwardAction) -> AskAnswer {
        let _ = (relay, action);
        AskAnswer::Deny
    }

    /// Decide `action` (an outward route matched, or a ref update of a
    /// push): the policy's answer, held for the host's approval on an
    /// `ask`, recorded as `outward_action` decided. The relay forwards only
    /// on `decision == Allow`. The default denies (fail closed): a relay
    /// with outward routes and no session to decide them forwards none.
    fn outward(&self, relay: &str, action: OutwardAction) -> OutwardFuture {
        let _ = relay;
        let reason = format!(
            "no session decides outward actions for this relay, so `{}` on `{}` is refused",
            action.kind, action.target
        );
        Box::pin(std::future::ready(OutwardAnswer {
            ticket: 0,
            decision: AskAnswer::Deny,
            policy: AskAnswer::Deny,
            approval: None,
            rule: None,
            reason,
        }))
    }

    /// Refuse `action` without asking because `reason` (another ref update
    /// of the same push was refused); recorded as decided, deny.
    fn outward_refused(&self, relay: &str, action: OutwardAction, reason: &str) -> OutwardAnswer {
        let _ = (relay, action);
        OutwardAnswer {
            ticket: 0,
            decision: AskAnswer::Deny,
            policy: AskAnswer::Deny,
            approval: None,
            rule: None,
            reason: reason.to_owned(),
        }
    }

    /// An allowed action of `ticket` was carried out: the upstream status
    /// (and, for a ref update, the origin's `ok`/`ng` for it). Recorded as
    /// `outward_action` executed, `irreversible`. Called once per allowed
    /// action whose request reached the origin.
    fn outward_executed(
        &self,
        relay: &str,
        ticket: u64,
        action: &OutwardAction,
        result: &OutwardResult,
    ) {
        let _ = (relay, ticket, action, result);
    }
}

/// What [`RelayGate::outward`] returns: the settled answer, once any
/// approval is in.
pub type OutwardFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = OutwardAnswer> + Send + 'static>>;

/// The longest SSE event `data` (or non-streaming JSON body) the scanner
/// keeps for its structured check (1 MiB); beyond it only the raw match
/// runs, which never needs more than a few bytes of state.
pub const MAX_SCANNED: usize = 1024 * 1024;

/// The wire type names the scanner looks for, with their results.
const NAMES: [(&[u8], ServerToolResult); 7] = [
    (
        b"web_search_tool_result",
        ServerToolResult::AnthropicWebSearch,
    ),
    (
        b"web_fetch_tool_result",
        ServerToolResult::AnthropicWebFetch,
    ),
    (b"web_search_call", ServerToolResult::OpenAiWebSearch),
    (b"mcp_tool_result", ServerToolResult::AnthropicMcpToolResult),
    (b"mcp_call", ServerToolResult::OpenAiMcpCall),
    (b"mcp_list_tools", ServerToolResult::OpenAiMcpListTools),
    (b"url_citation", ServerToolResult::OpenAiUrlCitation),
];

/// How many names there are (a bit each in [`Raw::Value`]'s `alive`).
const N_NAMES: usize = NAMES.len();

/// `"type"`, the key the raw match starts with.
const KEY: &[u8] = b"\"type\"";

/// All of [`NAMES`] still possible.
const ALL_NAMES: u16 = (1 << N_NAMES) - 1;

/// The raw match: a streaming automaton over bytes for the quoted JSON
/// member `"type"` (JSON whitespace) `:` (JSON whitespace) `"<name>"`, with
/// `<name>` one of [`NAMES`] written literally (no escapes). Constant
/// state, one step per byte, every occurrence found (also overlapping
/// ones), whatever the chunking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Raw {
    /// This many bytes of [`KEY`] matched.
    Key(usize),
    /// [`KEY`] matched; `fresh`: no whitespace after it yet (its closing
    /// quote may open another key).
    AfterKey {
        /// No byte after the key yet.
        fresh: bool,
    },
    /// The colon matched; whitespace or the value's opening quote next.
    AfterColon,
    /// Inside the value: `pos` bytes matched of the names in `alive`
    /// (a bit per entry of [`NAMES`]).
    Value {
        /// Bytes of the value matched.
        pos: usize,
        /// Names still possible.
        alive: u16,
    },
}

fn json_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Raw {
    /// One byte; the result it completes, if any.
    fn step(&mut self, b: u8) -> Option<ServerToolResult> {
        // each arm either consumes `b` or moves to a state that consumes it
        // on the next turn of this loop (at most two turns)
        loop {
            match *self {
                Self::Key(k) => {
                    *self = if KEY.get(k) == Some(&b) {
                        if k + 1 == KEY.len() {
                            Self::AfterKey { fresh: true }
                        } else {
                            Self::Key(k + 1)
                        }
                    } else if b == b'"' {
                        Self::Key(1)
                    } else {
                        Self::Key(0)
                    };
                    return None;
                }
                Self::AfterKey { fresh } => {
                    if json_ws(b) {
                        *self = Self::AfterKey { fresh: false };
                        return None;
                    }
                    if b == b':' {
                        *self = Self::AfterColon;
                        return None;
                    }
                    // the key's closing quote may open the next key
                    *self = Self::Key(usize::from(fresh));
                }
                Self::AfterColon => {
                    if json_ws(b) {
                        return None;
                    }
                    if b == b'"' {
                        *self = Self::Value {
                            pos: 0,
                            alive: ALL_NAMES,
                        };
                        return None;
                    }
                    *self = Self::Key(0);
                }
                Self::Value { pos, alive } => {
                    if b == b'"' {
                        let done = NAMES
                            .iter()
                            .enumerate()
                            .find(|(i, (name, _))| alive & (1 << i) != 0 && name.len() == pos)
                            .map(|(_, (_, r))| *r);
                        // a closing quote may open the next key
                        *self = Self::Key(1);
                        return done;
                    }
                    let mut next = 0u16;
                    for (i, (name, _)) in NAMES.iter().enumerate() {
                        if alive & (1 << i) != 0 && name.get(pos) == Some(&b) {
                            next |= 1 << i;
                        }
                    }
                    if next != 0 {
                        *self = Self::Value {
                            pos: pos + 1,
                            alive: next,
                        };
                        return None;
                    }
                    // only the value's opening quote can start a key again
                    *self = Self::Key(usize::from(pos == 0));
                }
            }
        }
    }
}

impl Default for Raw {
    fn default() -> Self {
        Self::Key(0)
    }
}

/// What a unit (an SSE event, a JSON body) yielded so far: the raw
/// matches that completed in it, per result, so the structured check at its
/// end reports only what the raw match did not, and its bytes for that
/// check.
#[derive(Clone, Debug)]
struct Unit {
    /// Raw matches so far, per entry of [`NAMES`].
    seen: [usize; N_NAMES],
    /// The unit's bytes while at most the cap (`None` once over, or when
    /// no structured check applies).
    kept: Option<Vec<u8>>,
}

impl Unit {
    fn new() -> Self {
        Self {
            seen: [0; N_NAMES],
            kept: Some(Vec::new()),
        }
    }

    fn count(&mut self, r: ServerToolResult) {
        if let Some(c) = NAMES
            .iter()
            .position(|(_, n)| *n == r)
            .and_then(|i| self.seen.get_mut(i))
        {
            *c = c.saturating_add(1);
        }
    }

    fn keep(&mut self, b: u8, cap: usize) {
        if let Some(kept) = &mut self.kept {
            if kept.len() < cap {
                kept.push(b);
            } else {
                // over the cap: the raw match alone, nothing more is kept
                self.kept = None;
            }
        }
    }

    /// The unit ended: the structured results `structured` finds in its
    /// kept bytes that the raw match did not already report.
    fn end(
        &mut self,
        structured: fn(&serde_json::Value) -> Vec<ServerToolResult>,
        out: &mut Vec<ServerToolResult>,
    ) {
        let unit = std::mem::replace(self, Self::new());
        let Some(kept) = unit.kept else { return };
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(&kept) else {
            return;
        };
        let mut seen = unit.seen;
        for r in structured(&value) {
            let slot = NAMES
                .iter()
                .position(|(_, n)| *n == r)
                .and_then(|i| seen.get_mut(i));
            match slot {
                Some(c) if *c > 0 => *c -= 1,
                _ => out.push(r),
            }
        }
    }
}

fn result_named(t: Option<&serde_json::Value>, family: Family) -> Option<ServerToolResult> {
    let t = t?.as_str()?;
    NAMES
        .iter()
        .find(|(n, _)| *n == t.as_bytes())
        .map(|(_, r)| *r)
        .filter(|r| r.family() == family)
}

/// The members of `v`'s array `key` (none when it is not an array).
fn items<'a>(
    v: Option<&'a serde_json::Value>,
    key: &str,
) -> impl Iterator<Item = &'a serde_json::Value> {
    v.and_then(|v| v.get(key))
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
}

/// The annotation results of an object holding `annotations`.
fn annotations(v: Option<&serde_json::Value>) -> impl Iterator<Item = ServerToolResult> + '_ {
    items(v, "annotations").filter_map(|a| result_named(a.get("type"), Family::Annotation))
}

/// The results of one SSE event's `data`: an Anthropic
/// `content_block_start` whose `content_block.type` is a content-block
/// result, an OpenAI Responses `response.output_item.added`/`.done` whose
/// `item.type` is an output-item result, a Responses
/// `response.output_text.annotation.added` whose `annotation.type` is
/// `url_citation`, and an OpenAI chat-completions chunk's
/// `choices[*].delta.annotations[*].type`.
fn sse_results(v: &serde_json::Value) -> Vec<ServerToolResult> {
    let t = v.get("type").and_then(serde_json::Value::as_str);
    let mut out: Vec<ServerToolResult> = match t {
        Some("content_block_start") => result_named(
            v.get("content_block").and_then(|b| b.get("type")),
            Family::AnthropicBlock,
        )
        .into_iter()
        .collect(),
        Some("response.output_item.added" | "response.output_item.done") => result_named(
            v.get("item").and_then(|b| b.get("type")),
            Family::OpenAiItem,
        )
        .into_iter()
        .collect(),
        Some("response.output_text.annotation.added") => result_named(
            v.get("annotation").and_then(|b| b.get("type")),
            Family::Annotation,
        )
        .into_iter()
        .collect(),
        _ => Vec::new(),
    };
    for choice in items(Some(v), "choices") {
        out.extend(annotations(choice.get("delta")));
    }
    out
}

/// The results of a non-streaming JSON body: an Anthropic message's
/// `content[*].type`, an OpenAI Responses object's `output[*].type` and
/// its messages' `output[*].content[*].annotations[*].type`, an OpenAI
/// chat completion's `choices[*].message.annotations[*].type`.
fn json_results(v: &serde_json::Value) -> Vec<ServerToolResult> {
    let mut out: Vec<ServerToolResult> = items(Some(v), "content")
        .filter_map(|item| result_named(item.get("type"), Family::AnthropicBlock))
        .collect();
    for item in items(Some(v), "output") {
        out.extend(result_named(item.get("type"), Family::OpenAiItem));
        for part in items(Some(item), "content") {
            out.extend(annotations(Some(part)));
        }
    }
    for choice in items(Some(v), "choices") {
        out.extend(annotations(choice.get("message")));
    }
    out
}

/// Where the SSE line parser is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
    /// At the start of a line.
    Start,
    /// In a field name (`data` so far matched: the count; `None`: another
    /// field or a comment).
    Field(Option<usize>),
    /// Right after `data:` (an optional space follows).
    DataColon,
    /// In a `data` value.
    Data,
    /// In a value to skip (another field, a comment).
    Skip,
}

/// The body grammar a scanner reads.
#[derive(Clone, Debug)]
enum Mode {
    /// `text/event-stream`.
    Sse {
        line: Line,
        /// The last byte was a CR (a following LF ends nothing more).
        after_cr: bool,
        /// The event has `data` (so a blank line dispatches it).
        has_data: bool,
    },
    /// `application/json` (and `+json`): raw match throughout, the
    /// structured check at the end.
    Json,
    /// Anything else (or none): the raw match alone.
    Raw,
}

/// An incremental, bounded scanner of response bodies (SSE streams and
/// plain JSON) for [`ServerToolResult`]s. It never buffers more than a
/// bounded amount and never delays the bytes it is fed.
///
/// What it matches, in every body whatever its content type (the **raw
/// match**): each occurrence, in the body bytes as they arrive, of the JSON
/// member `"type":"<name>"` (JSON whitespace allowed around the colon, the
/// name written without escapes) for the names `web_search_tool_result`,
/// `web_fetch_tool_result`, `mcp_tool_result` (Anthropic content blocks),
/// `web_search_call`, `mcp_call`, `mcp_list_tools` (OpenAI Responses
/// output items) and `url_citation` (OpenAI annotations, the only sign of
/// a chat-completions web search). Its state is a few
/// bytes, so no size of body or event hides a result from it, and a result
/// is reported by the [`Self::feed`] whose bytes complete the member,
/// before the caller passes them on (the content of a result block follows
/// its `type` on the wire). It also matches such members nested anywhere
/// (an object the model wrote as a tool input, a `response.completed`
/// event repeating its output, an SSE comment): more taint, never less.
/// Text inside a JSON string has its quotes escaped and does not match.
///
/// On top of it, the **structured check** parses units of at most
/// [`MAX_SCANNED`] bytes and reports what the raw match did not (a name
/// spelt with `\u` escapes, a member split over two `data:` lines):
/// * `text/event-stream`: each event (lines ended by `\n`, `\r\n` or `\r`,
///   split anywhere across feeds; comments and other fields ignored; an
///   event unterminated at the end is checked too): an Anthropic
///   `content_block_start` whose `content_block.type` is
///   `web_search_tool_result`, `web_fetch_tool_result` or
///   `mcp_tool_result`, an OpenAI Responses `response.output_item.added`
///   or `response.output_item.done` whose `item.type` is `web_search_call`,
///   `mcp_call` or `mcp_list_tools`, a Responses
///   `response.output_text.annotation.added` whose `annotation.type` is
///   `url_citation`, and an OpenAI chat-completions chunk's
///   `choices[*].delta.annotations[*].type` `url_citation`.
/// * `application/json` (or `…+json`): at the body's end, an Anthropic
///   message's `content[*].type`, an OpenAI Responses object's
///   `output[*].type` and `output[*].content[*].annotations[*].type`, and
///   a chat completion's `choices[*].message.annotations[*].type`.
///
/// A larger unit is left to the raw match. Results are the same whatever
/// the chunking (property-tested, fuzzed by `egress_tool_results`).
#[derive(Debug)]
pub struct ToolResultScanner {
    mode: Mode,
    raw: Raw,
    unit: Unit,
    cap: usize,
    finished: bool,
}

impl Default for ToolResultScanner {
    fn default() -> Self {
        Self::new(None)
    }
}

impl ToolResultScanner {
    /// A scanner for a response with this `content-type` (or none).
    pub fn new(content_type: Option<&str>) -> Self {
        Self::with_cap(content_type, MAX_SCANNED)
    }

    /// A scanner whose structured check keeps at most `cap` bytes (tests).
    pub(crate) fn with_cap(content_type: Option<&str>, cap: usize) -> Self {
        let essence = content_type
            .and_then(|c| c.split(';').next())
            .map(|c| c.trim().to_ascii_lowercase())
            .unwrap_or_default();
        let mode = if essence == "text/event-stream" {
            Mode::Sse {
                line: Line::Start,
                after_cr: false,
                has_data: false,
            }
        } else if essence == "application/json"
            || (essence.starts_with("application/") && essence.ends_with("+json"))
        {
            Mode::Json
        } else {
            Mode::Raw
        };
        let mut unit = Unit::new();
        if matches!(mode, Mode::Raw) {
            unit.kept = None;
        }
        Self {
            mode,
            raw: Raw::default(),
            unit,
            cap,
            finished: false,
        }
    }

    /// Feeds the next body bytes; returns the results completed by them.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<ServerToolResult> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        let cap = self.cap;
        for &b in bytes {
            if let Some(r) = self.raw.step(b) {
                self.unit.count(r);
                out.push(r);
            }
            match &mut self.mode {
                Mode::Json => self.unit.keep(b, cap),
                Mode::Raw => {}
                Mode::Sse {
                    line,
                    after_cr,
                    has_data,
                } => sse_step(&mut self.unit, line, after_cr, has_data, b, cap, &mut out),
            }
        }
        out
    }

    /// The body ended; returns results completed only by its end.
    pub fn finish(&mut self) -> Vec<ServerToolResult> {
        let mut out = Vec::new();
        if std::mem::replace(&mut self.finished, true) {
            return out;
        }
        match &self.mode {
            Mode::Json => self.unit.end(json_results, &mut out),
            Mode::Sse { has_data, .. } => {
                if *has_data {
                    self.unit.end(sse_results, &mut out);
                }
            }
            Mode::Raw => {}
        }
        out
    }
}

/// One byte of an SSE stream: the line parser; `data` values go to the
/// unit (joined by `\n`), a blank line after data ends the event.
fn sse_step(
    unit: &mut Unit,
    line: &mut Line,
    after_cr: &mut bool,
    has_data: &mut bool,
    b: u8,
    cap: usize,
    out: &mut Vec<ServerToolResult>,
) {
    const DATA: &[u8] = b"data";
    if std::mem::replace(after_cr, false) && b == b'\n' {
        // the LF of a CRLF: the CR ended the line already
        return;
    }
    if b == b'\r' || b == b'\n' {
        *after_cr = b == b'\r';
        match *line {
            // a blank line dispatches the event (if it has data)
            Line::Start => {
                if std::mem::replace(has_data, false) {
                    unit.end(sse_results, out);
                }
            }
            // `data` alone on its line is a data line with an empty value
            Line::Field(Some(k)) if k == DATA.len() => start_data(unit, has_data, cap),
            Line::Field(_) | Line::DataColon | Line::Data | Line::Skip => {}
        }
        *line = Line::Start;
        return;
    }
    *line = match *line {
        Line::Start | Line::Field(Some(_)) => {
            let k = match *line {
                Line::Field(Some(k)) => k,
                _ => 0,
            };
            if b == b':' {
                if k == DATA.len() {
                    start_data(unit, has_data, cap);
                    Line::DataColon
                } else {
                    // a comment (`:` first) or another field
                    Line::Skip
                }
            } else if DATA.get(k) == Some(&b) {
                Line::Field(Some(k + 1))
            } else {
                Line::Field(None)
            }
        }
        Line::Field(None) => {
            if b == b':' {
                Line::Skip
            } else {
                Line::Field(None)
            }
        }
        Line::DataColon => {
            // one space after the colon is not part of the value
            if b != b' ' {
                unit.keep(b, cap);
            }
            Line::Data
        }
        Line::Data => {
            unit.keep(b, cap);
            Line::Data
        }
        Line::Skip => Line::Skip,
    };
}

/// A `data` line begins: after the event's first, a `\n` joins it to the
/// previous one.
fn start_data(unit: &mut Unit, has_data: &mut bool, cap: usize) {
    if std::mem::replace(has_data, true) {
        unit.keep(b'\n', cap);
    }
}

/// Scans `chunks` in order and then finishes: every result, in order.
#[cfg(any(test, fuzzing, feature = "testing"))]
fn scan_all<'a>(
    scanner: &mut ToolResultScanner,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<ServerToolResult> {
    let mut out = Vec::new();
    for c in chunks {
        out.extend(scanner.feed(c));
    }
    out.extend(scanner.finish());
    out
}

/// Fuzzing entry points (only with `cfg(fuzzing)` or the `testing` feature).
#[cfg(any(fuzzing, feature = "testing"))]
pub(super) mod __fuzz {
    use super::{MAX_SCANNED, ToolResultScanner, scan_all};

    /// Fuzz entry: the first byte picks the content type and the cap (a
    /// small one, so the over-cap path is reached), the next two a split
    /// seed; the rest is the body. Scanned whole and in seeded pieces, the
    /// results must be the same; never a panic.
    pub fn tool_results(data: &[u8]) {
        let (head, body) = data.split_at(data.len().min(3));
        let pick = head.first().copied().unwrap_or(0);
        let ct = match pick % 4 {
            0 => Some("text/event-stream"),
            1 => Some("application/json; charset=utf-8"),
            2 => Some("text/plain"),
            _ => None,
        };
        let cap = if pick & 0x80 != 0 { 16 } else { MAX_SCANNED };
        let whole = scan_all(&mut ToolResultScanner::with_cap(ct, cap), [body]);
        let mut seed = u32::from(head.get(1).copied().unwrap_or(1))
            | u32::from(head.get(2).copied().unwrap_or(7)) << 8
            | 1;
        let mut pieces = Vec::new();
        let mut rest = body;
        while !rest.is_empty() {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let n = usize::try_from(seed % 8).unwrap_or(1).min(rest.len());
            let (now, later) = rest.split_at(n);
            pieces.push(now);
            rest = later;
        }
        let split = scan_all(&mut ToolResultScanner::with_cap(ct, cap), pieces);
        assert_eq!(whole, split, "the same results whatever the chunking");
        assert!(whole.len() <= body.len(), "at most one result per byte");
    }
}

#[cfg(test)]
mod tests {
    use super::ServerToolResult::{
        AnthropicMcpToolResult, AnthropicWebFetch, AnthropicWebSearch, OpenAiMcpCall,
        OpenAiMcpListTools, OpenAiUrlCitation, OpenAiWebSearch,
    };
    use super::*;
    use proptest::prelude::*;

    const SSE: Option<&str> = Some("text/event-stream; charset=utf-8");
    const JSON: Option<&str> = Some("application/json");

    fn scan(ct: Option<&str>, body: &[u8]) -> Vec<ServerToolResult> {
        scan_all(&mut ToolResultScanner::new(ct), [body])
    }

    /// Every overlapping occurrence of the raw member, found naively.
    fn naive_raw(body: &[u8]) -> Vec<ServerToolResult> {
        let mut out = Vec::new();
        for start in 0..body.len() {
            let Some(rest) = body.get(start..).and_then(|r| r.strip_prefix(KEY)) else {
                continue;
            };
            let rest = &rest[rest.iter().take_while(|b| json_ws(**b)).count()..];
            let Some(rest) = rest.strip_prefix(b":") else {
                continue;
            };
            let rest = &rest[rest.iter().take_while(|b| json_ws(**b)).count()..];
            let Some(rest) = rest.strip_prefix(b"\"") else {
                continue;
            };
            for (name, r) in NAMES {
                if rest
                    .strip_prefix(name)
                    .is_some_and(|t| t.first() == Some(&b'"'))
                {
                    out.push(r);
                }
            }
        }
        out
    }

    fn anthropic_stream(with_result: bool) -> String {
        let mut s = String::from(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"content\":[]}}\n\n\
             event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"s\",\"name\":\"web_search\",\"input\":{}}}\n\n",
        );
        if with_result {
            s.push_str(
                "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"web_search_tool_result\",\"tool_use_id\":\"s\",\"content\":[{\"type\":\"web_search_result\",\"title\":\"t\",\"url\":\"https://x.test\"}]}}\n\n",
            );
        }
        s.push_str(
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"text_delta\",\"text\":\"see \\\"type\\\":\\\"web_search_tool_result\\\"\"}}\n\n\
             event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        s
    }

    #[test]
    fn anthropic_stream_results_and_positive_control() {
        assert_eq!(
            scan(SSE, anthropic_stream(true).as_bytes()),
            [AnthropicWebSearch]
        );
        // escaped quotes inside text, a web_search tool *use*: nothing
        assert_eq!(scan(SSE, anthropic_stream(false).as_bytes()), []);
        let fetch = "data: {\"type\":\"content_block_start\",\"content_block\":{\"type\" : \"web_fetch_tool_result\"}}\r\n\r\n";
        assert_eq!(scan(SSE, fetch.as_bytes()), [AnthropicWebFetch]);
    }

    #[test]
    fn openai_responses_stream_and_chat_completions() {
        let s = "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"ws\",\"type\":\"web_search_call\",\"status\":\"in_progress\"}}\n\n\
                 event: response.web_search_call.completed\ndata: {\"type\":\"response.web_search_call.completed\",\"item_id\":\"ws\"}\n\n\
                 event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"web_search_call\",\"status\":\"completed\"}}\n\n";
        assert_eq!(scan(SSE, s.as_bytes()), [OpenAiWebSearch, OpenAiWebSearch]);
        let chat = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"content\":\"web_search_call\"}}]}\n\ndata: [DONE]\n\n";
        assert_eq!(scan(SSE, chat.as_bytes()), []);
    }

    #[test]
    fn remote_mcp_and_citations_are_results_and_their_calls_are_not() {
        // the MCP connector's call (`mcp_tool_use`) is not content; its
        // result is
        let anthropic = "data: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"mcp_tool_use\",\"name\":\"f\"}}\n\n\
                         data: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"mcp\\u005ftool_result\"}}\n\n";
        assert_eq!(scan(SSE, anthropic.as_bytes()), [AnthropicMcpToolResult]);
        let openai = "data: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"mcp\\u005flist_tools\"}}\n\n\
                      data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"mcp_call\",\"output\":\"x\"}}\n\n\
                      data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"mcp_approval_request\"}}\n\n";
        assert_eq!(
            scan(SSE, openai.as_bytes()),
            [OpenAiMcpListTools, OpenAiMcpCall],
            "each at its event: the escaped name at the first event's end"
        );
        let chunk = "data: {\"choices\":[{\"delta\":{\"annotations\":[{\"type\":\"url\\u005fcitation\"}]}}]}\n\n";
        assert_eq!(scan(SSE, chunk.as_bytes()), [OpenAiUrlCitation]);
        let added = "data: {\"type\":\"response.output_text.annotation.added\",\"annotation\":{\"type\":\"url\\u005fcitation\"}}\n\n";
        assert_eq!(scan(SSE, added.as_bytes()), [OpenAiUrlCitation]);
        // a name in the wrong place is left to the raw match (here: none)
        let wrong = "data: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"mcp\\u005fcall\"}}\n\n";
        assert_eq!(scan(SSE, wrong.as_bytes()), []);
        // non-streaming bodies
        let msg = br#"{"content":[{"type":"mcp_tool_use"},{"type":"mcp\u005ftool_result"}]}"#;
        assert_eq!(scan(JSON, msg), [AnthropicMcpToolResult]);
        let resp = br#"{"output":[{"type":"mcp\u005fcall"},{"type":"message","content":[{"type":"output_text","annotations":[{"type":"url\u005fcitation"}]}]}]}"#;
        assert_eq!(scan(JSON, resp), [OpenAiMcpCall, OpenAiUrlCitation]);
        let chat = br#"{"choices":[{"message":{"content":"x","annotations":[{"type":"url_citation","url_citation":{"url":"https://x.test"}}]}}]}"#;
        assert_eq!(scan(JSON, chat), [OpenAiUrlCitation]);
        let plain =
            br#"{"choices":[{"message":{"content":"mcp_call url_citation","annotations":[]}}]}"#;
        assert_eq!(scan(JSON, plain), [], "positive control: no result");
    }

    #[test]
    fn the_structured_check_sees_what_the_raw_match_cannot() {
        // a member split over two data lines, a name with an escape
        let split = "data: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\ndata: \"web_search_tool_result\"}}\n\n";
        assert_eq!(naive_raw(split.as_bytes()), []);
        assert_eq!(scan(SSE, split.as_bytes()), [AnthropicWebSearch]);
        let escaped = "data: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"web\\u005ffetch_tool_result\"}}\r\r";
        assert_eq!(scan(SSE, escaped.as_bytes()), [AnthropicWebFetch]);
        // and not twice what both see
        let both = "data: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"web_fetch_tool_result\"}}\n\n";
        assert_eq!(scan(SSE, both.as_bytes()), [AnthropicWebFetch]);
        // an event unterminated at the end is checked too
        let open = "data: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"web\\u005fsearch_tool_result\"}}";
        assert_eq!(scan(SSE, open.as_bytes()), [AnthropicWebSearch]);
        // comments and other fields are not data
        let comment = ": {\"type\":\"content_block_start\"}\nid: 1\ndata: {}\n\n";
        assert_eq!(scan(SSE, comment.as_bytes()), []);
    }

    #[test]
    fn json_bodies() {
        let anthropic = br#"{"type":"message","content":[{"type":"server_tool_use","name":"web_search"},{"type": "web_search_tool_result","content":[]},{"type":"text","text":"x"}]}"#;
        assert_eq!(scan(JSON, anthropic), [AnthropicWebSearch]);
        let openai = br#"{"object":"response","output":[{"type":"web_search_call","status":"completed"},{"type":"message"}]}"#;
        assert_eq!(
            scan(Some("application/json; charset=utf-8"), openai),
            [OpenAiWebSearch]
        );
        let escaped = br#"{"content":[{"type":"web\u005fsearch_tool_result"}]}"#;
        assert_eq!(scan(JSON, escaped), [AnthropicWebSearch]);
        let clean = br#"{"type":"message","content":[{"type":"text","text":"\"type\":\"web_search_tool_result\""}]}"#;
        assert_eq!(scan(JSON, clean), [], "positive control: no result");
        assert_eq!(scan(JSON, b"{not json"), []);
    }

    #[test]
    fn over_the_cap_the_raw_match_still_sees_results() {
        // an event larger than the cap, its result member at the end
        let mut big = String::from("data: {\"type\":\"content_block_start\",\"pad\":\"");
        big.push_str(&"x".repeat(MAX_SCANNED + 10));
        big.push_str("\",\"content_block\":{\"type\":\"web_search_tool_result\"}}\n\n");
        assert_eq!(scan(SSE, big.as_bytes()), [AnthropicWebSearch]);
        let mut body = String::from("{\"pad\":\"");
        body.push_str(&"y".repeat(MAX_SCANNED + 10));
        body.push_str("\",\"output\":[{\"type\":\"web_search_call\"}]}");
        assert_eq!(scan(JSON, body.as_bytes()), [OpenAiWebSearch]);
        // what only the structured check sees is lost over the cap, by design
        let mut s = ToolResultScanner::with_cap(SSE, 8);
        let escaped = "data: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"web\\u005ffetch_tool_result\"}}\n\n";
        assert_eq!(scan_all(&mut s, [escaped.as_bytes()]), []);
        // unknown content types: the raw match alone
        assert_eq!(
            scan(None, b"..\"type\":\"web_search_call\".."),
            [OpenAiWebSearch]
        );
        assert_eq!(scan(Some("text/html"), b"<p>web_search_call</p>"), []);
    }

    #[test]
    fn a_result_is_reported_by_the_feed_that_completes_it() {
        let body = anthropic_stream(true);
        let at = body.find("web_search_tool_result").unwrap() + "web_search_tool_result\"".len();
        let (a, b) = body.as_bytes().split_at(at - 1);
        let mut s = ToolResultScanner::new(SSE);
        assert_eq!(s.feed(a), [], "the closing quote is not there yet");
        let (quote, rest) = b.split_at(1);
        assert_eq!(
            s.feed(quote),
            [AnthropicWebSearch],
            "before the block's content"
        );
        assert_eq!(s.feed(rest), []);
        assert_eq!(s.finish(), []);
        assert_eq!(s.finish(), [], "finish once");
    }

    #[test]
    fn the_fuzz_entry_runs() {
        __fuzz::tool_results(b"");
        __fuzz::tool_results(format!("\x00\x05\x09{}", anthropic_stream(true)).as_bytes());
        __fuzz::tool_results(b"\x81\x01\x01data: {\"type\":\r\ndata:\"web_search_call\"}\r\n\r\n");
        __fuzz::tool_results(b"\x01\xff\xff{\"output\":[{\"type\":\"web_search_call\"}]}");
    }

    fn body_strategy() -> impl Strategy<Value = Vec<u8>> {
        let atoms = prop::sample::select(vec![
            "\"type\"",
            "\"type\":",
            " ",
            "\n",
            "\r",
            "\r\n",
            ":",
            "\"",
            "data:",
            "data: ",
            "event: x",
            ": c",
            "{",
            "}",
            "[",
            "]",
            ",",
            "\\",
            "\\u005f",
            "\"web_search_tool_result\"",
            "\"web_fetch_tool_result\"",
            "\"web_search_call\"",
            "\"mcp_tool_result\"",
            "\"mcp_call\"",
            "\"mcp_list_tools\"",
            "\"url_citation\"",
            "\"mcp_\"",
            "mcp_",
            "web_search",
            "\"content_block_start\"",
            "\"content_block\":{",
            "\"response.output_item.done\"",
            "\"item\":{",
            "\"choices\":[{\"delta\":{\"annotations\":[",
            "\"annotation\":{",
            "\"content\":[",
            "\"output\":[",
            "x",
            "\u{e9}",
        ]);
        prop::collection::vec(atoms, 0..60).prop_map(|v| v.concat().into_bytes())
    }

    proptest! {
        #[test]
        fn the_raw_match_finds_every_occurrence(body in body_strategy()) {
            let ours = scan_all(&mut ToolResultScanner::new(Some("text/plain")), [body.as_slice()]);
            prop_assert_eq!(ours, naive_raw(&body));
        }

        #[test]
        fn results_do_not_depend_on_the_chunking(
            body in body_strategy(),
            cuts in prop::collection::vec(0usize..400, 0..12),
            ct in 0usize..4,
            small in any::<bool>(),
        ) {
            let ct = [SSE, JSON, Some("text/plain"), None][ct];
            let cap = if small { 12 } else { MAX_SCANNED };
            let whole = scan_all(&mut ToolResultScanner::with_cap(ct, cap), [body.as_slice()]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(body.len())).collect();
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut from = 0;
            for c in cuts.into_iter().chain([body.len()]) {
                pieces.push(&body[from..c]);
                from = c;
            }
            let split = scan_all(&mut ToolResultScanner::with_cap(ct, cap), pieces);
            prop_assert_eq!(whole.clone(), split);
            // never fewer than the raw match
            prop_assert!(whole.len() >= naive_raw(&body).len());
        }
    }
}
