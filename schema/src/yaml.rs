//! Loading YAML text into a positioned node tree, fail-closed on hostile input.
//!
//! The tree keeps the 1-based line and column of every node and every mapping
//! key, so later checks can point at the exact place of a finding. Scanning
//! is done by `granit-parser` (the maintained, panic-free YAML 1.2 event
//! parser under `serde-saphyr`); this module builds the tree from its events
//! without recursion and enforces palisade's limits: an input size cap, a
//! nesting cap, an alias cap and a total node cap (so alias bombs stop), YAML
//! 1.2 core-schema scalars only (`on`/`yes` are strings, as in the Hub's
//! js-yaml; `.nan`/`.inf` are refused as they are not JSON), no custom tags,
//! duplicate keys rejected, and exactly one document.
//!
//! Scalars and merge keys are read as js-yaml 4.1.1's default schema reads
//! them (the Hub loads its files with it): its `int` (`0b`/`0o`/`0x`, `_`
//! between digits), `float` (`1.`, `.5`, `1_0.5`) and `timestamp`
//! (`2024-01-01`, kept as [`Value::Date`]) forms; numbers are JavaScript
//! numbers, so `3.0` and `3e0` are the integer 3; and `<<` merges mappings
//! (a list merges each in order, earlier keys win, explicit keys override
//! merged ones).

use std::borrow::Cow;
use std::collections::HashMap;

use granit_parser::{Event, Marker, Parser, ScalarStyle, ScanError, Span, Tag};

use crate::diagnostic::{Diagnostic, Diagnostics, LineIndex, Parsed, Path};

/// The largest YAML file palisade reads, in bytes (1 MiB).
pub const MAX_FILE_BYTES: usize = 1024 * 1024;
/// The deepest nesting of mappings and sequences palisade accepts.
pub const MAX_DEPTH: usize = 64;
/// The most alias references (`*name`) a document may contain.
pub const MAX_ALIASES: usize = 64;
/// The most nodes a document may contain, counting every alias expansion.
pub const MAX_NODES: usize = 250_000;

/// A position in the source text: 1-based line and column (in characters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, counted in characters.
    pub column: u32,
}

/// A YAML node with its position.
#[derive(Clone, Debug, PartialEq)]
pub struct Node<'a> {
    /// Where the node starts.
    pub pos: Pos,
    /// Where the node ends: the position just after its last character
    /// (exclusive, as SARIF's `endColumn`); for a block collection, just
    /// after its last entry. Equal to `pos` when not known (an alias, a
    /// tree built from JSON).
    pub end: Pos,
    /// The node's value.
    pub value: Value<'a>,
}

/// A mapping key with its position.
#[derive(Clone, Debug, PartialEq)]
pub struct Key<'a> {
    /// Where the key starts.
    pub pos: Pos,
    /// Just after the key's last character (exclusive).
    pub end: Pos,
    /// The key's text, borrowed from the source where YAML allows.
    pub text: Cow<'a, str>,
}

/// The value of a YAML node after YAML 1.2 core-schema resolution.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    /// `null`, `~` or an empty value.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer or a float.
    Number(serde_json::Number),
    /// A string (quoted, or a plain scalar that is not a null, bool, number
    /// or timestamp).
    String(Cow<'a, str>),
    /// A plain scalar that js-yaml reads as a timestamp (`2024-01-01`,
    /// `2024-01-01T10:00:00Z`), holding the authored text. The Hub sees a
    /// JavaScript `Date`, which no string field accepts.
    Date(Cow<'a, str>),
    /// A sequence.
    Seq(Vec<Node<'a>>),
    /// A mapping, in authored order; keys are unique.
    Map(Vec<(Key<'a>, Node<'a>)>),
}

impl Value<'_> {
    /// The JSON-schema-like name of this value's type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Bool(_) => "boolean",
            Self::Number(_) => "number",
            Self::String(_) => "string",
            Self::Date(_) => "Date",
            Self::Seq(_) => "array",
            Self::Map(_) => "object",
        }
    }
}

impl<'a> Node<'a> {
    /// The tree of a JSON value, every position 0 (JSON text positions are
    /// not kept by `serde_json::Value`). The inverse of [`Node::to_json`].
    pub fn from_json(value: &'a serde_json::Value) -> Self {
        let value = match value {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => Value::Number(n.clone()),
            serde_json::Value::String(s) => Value::String(Cow::Borrowed(s)),
            serde_json::Value::Array(items) => {
                Value::Seq(items.iter().map(Node::from_json).collect())
            }
            serde_json::Value::Object(entries) => Value::Map(
                entries
                    .iter()
                    .map(|(k, v)| {
                        let key = Key {
                            pos: Pos::default(),
                            end: Pos::default(),
                            text: Cow::Borrowed(k.as_str()),
                        };
                        (key, Node::from_json(v))
                    })
                    .collect(),
            ),
        };
        Self {
            pos: Pos::default(),
            end: Pos::default(),
            value,
        }
    }

    /// Converts the node to a JSON value (positions are dropped).
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => serde_json::Value::Number(n.clone()),
            Value::String(s) | Value::Date(s) => serde_json::Value::String(s.to_string()),
            Value::Seq(items) => {
                serde_json::Value::Array(items.iter().map(Node::to_json).collect())
            }
            Value::Map(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.text.to_string(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// The value of `key` if this node is a mapping that has it.
    pub fn get(&self, key: &str) -> Option<&Node<'a>> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|(k, _)| k.text == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The key node of `key` if this node is a mapping that has it.
    pub fn get_key(&self, key: &str) -> Option<&Key<'a>> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|(k, _)| k.text == key).map(|(k, _)| k),
            _ => None,
        }
    }

    /// The node at `path` below this node, if any.
    pub fn at_path(&self, path: &Path) -> Option<&Node<'a>> {
        let mut node = self;
        for seg in &path.0 {
            node = match (seg, &node.value) {
                (crate::PathSegment::Key(k), Value::Map(_)) => node.get(k)?,
                (crate::PathSegment::Index(i), Value::Seq(items)) => items.get(*i)?,
                _ => return None,
            };
        }
        Some(node)
    }

    /// The best position for `path` below this node: the deepest node that
    /// exists on the path (the key itself when the last segment is a key).
    pub fn pos_of(&self, path: &Path) -> Pos {
        self.span_of(path).0
    }

    /// The start and (exclusive) end of what [`Node::pos_of`] points at:
    /// the value's span, or the key's when the value is a collection.
    pub fn span_of(&self, path: &Path) -> (Pos, Pos) {
        let mut node = self;
        let mut span = (self.pos, self.end);
        for seg in &path.0 {
            let next = match (seg, &node.value) {
                (crate::PathSegment::Key(k), Value::Map(entries)) => {
                    entries.iter().find(|(key, _)| &key.text == k)
                }
                (crate::PathSegment::Index(i), Value::Seq(items)) => match items.get(*i) {
                    Some(n) => {
                        node = n;
                        span = (n.pos, n.end);
                        continue;
                    }
                    None => None,
                },
                _ => None,
            };
            match next {
                Some((key, value)) => {
                    // A key path points at the value, unless the value is a
                    // block collection whose position says little.
                    span = match value.value {
                        Value::Map(_) | Value::Seq(_) => (key.pos, key.end),
                        _ => (value.pos, value.end),
                    };
                    node = value;
                }
                None => return span,
            }
        }
        span
    }
}

/// Parses `text` (the contents of `file`) into a node tree.
///
/// Refused, with at least one error, when the text is not a single
/// well-formed YAML document within palisade's limits.
pub fn parse<'a>(file: &str, text: &'a str) -> Result<Parsed<Node<'a>>, Diagnostics> {
    let (node, diags) = load(file, text);
    crate::diagnostic::outcome(file, node, diags)
}

/// [`parse`] for the crate's own walkers: the tree when there is one, and
/// every finding.
pub(crate) fn load<'a>(file: &str, text: &'a str) -> (Option<Node<'a>>, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    if text.len() > MAX_FILE_BYTES {
        diags.push(
            Diagnostic::error(
                "file_too_large",
                format!(
                    "file is {} bytes; palisade reads YAML files of at most {MAX_FILE_BYTES} bytes",
                    text.len()
                ),
            )
            .in_file(file)
            .at(1, 1),
        );
        return (None, diags);
    }
    if text.contains('\t') {
        // Tabs are never indentation in YAML; inside a scalar they are data,
        // but a tab before any content on a line is almost always a mistake
        // the parser reports poorly, so name it precisely.
        if let Some(line_off) = tab_in_indentation(text) {
            let (line, column) = LineIndex::new(text).line_col(line_off);
            diags.push(
                Diagnostic::error("yaml_tab_indentation", "tab character used for indentation")
                    .in_file(file)
                    .at(line, column)
                    .with_help("YAML indentation must use spaces"),
            );
            return (None, diags);
        }
    }
    match build(text) {
        Ok(node) => (Some(node), diags),
        Err(e) => {
            let (line, column) = if e.pos.line == 0 {
                (1, 1)
            } else {
                (e.pos.line, e.pos.column)
            };
            diags.push(
                Diagnostic::error(e.code, e.message)
                    .in_file(file)
                    .at(line, column),
            );
            (None, diags)
        }
    }
}

/// A refusal while building the tree.
struct BuildError {
    code: &'static str,
    message: String,
    pos: Pos,
}

fn fail<T>(code: &'static str, message: impl Into<String>, pos: Pos) -> Result<T, BuildError> {
    Err(BuildError {
        code,
        message: message.into(),
        pos,
    })
}

fn marker_pos(m: &Marker) -> Pos {
    Pos {
        line: u32::try_from(m.line()).unwrap_or(u32::MAX),
        column: u32::try_from(m.col().saturating_add(1)).unwrap_or(u32::MAX),
    }
}

fn span_pos(s: &Span) -> Pos {
    marker_pos(&s.start)
}

fn span_end(s: &Span) -> Pos {
    marker_pos(&s.end)
}

/// The end of a collection from the end of its last entry and the end of
/// its closing event: a flow collection's `]` or `}` follows its last entry
/// on the same line; a block collection's closing event stands wherever the
/// next token is, so its last entry's end is the better one.
fn collection_end(last: Option<Pos>, closing: Pos) -> Pos {
    match last {
        Some(l) if closing.line == l.line && closing.column >= l.column => closing,
        Some(l) => l,
        None => closing,
    }
}

fn scan_error(e: &ScanError) -> BuildError {
    let info = e.info();
    let lower = info.to_lowercase();
    let code = if lower.contains("recursion") || lower.contains("nesting") {
        "yaml_limit_exceeded"
    } else {
        "yaml_syntax"
    };
    let message = if code == "yaml_limit_exceeded" {
        format!("nesting deeper than {MAX_DEPTH} levels")
    } else {
        info
    };
    BuildError {
        code,
        message,
        pos: marker_pos(e.marker()),
    }
}

/// What a mapping waits for after its key.
enum Pending<'a> {
    /// The next node is a key.
    Key,
    /// The next node is the value of a merge key `<<`.
    Merge,
    /// The next node is the value of `key`, replacing entry `replace` (a
    /// merged entry an explicit key overrides) when set.
    Value {
        key: Key<'a>,
        replace: Option<usize>,
    },
}

/// A mapping being built, with js-yaml's merge-key bookkeeping.
struct MapFrame<'a> {
    pos: Pos,
    anchor: usize,
    entries: Vec<(Key<'a>, Node<'a>)>,
    /// Whether each entry came from a merge and no explicit key has
    /// overridden it yet (js-yaml's `overridableKeys`).
    merged: Vec<bool>,
    pending: Pending<'a>,
    /// Key text to entry index, built once the map is large.
    index: Option<HashMap<Cow<'a, str>, usize>>,
    /// The end of the last node taken (a key, value or merge source), in
    /// source order: a merged entry's own end lies where its anchor is.
    last_end: Option<Pos>,
}

impl<'a> MapFrame<'a> {
    fn new(pos: Pos, anchor: usize) -> Self {
        Self {
            pos,
            anchor,
            entries: Vec::new(),
            merged: Vec::new(),
            pending: Pending::Key,
            index: None,
            last_end: None,
        }
    }

    fn find(&mut self, text: &str) -> Option<usize> {
        if self.index.is_none() && self.entries.len() >= 16 {
            self.index = Some(
                self.entries
                    .iter()
                    .enumerate()
                    .map(|(i, (k, _))| (k.text.clone(), i))
                    .collect(),
            );
        }
        match &self.index {
            Some(index) => index.get(text).copied(),
            None => self.entries.iter().position(|(k, _)| k.text == text),
        }
    }

    fn push(&mut self, key: Key<'a>, value: Node<'a>, merged: bool) {
        if let Some(index) = &mut self.index {
            index.insert(key.text.clone(), self.entries.len());
        }
        self.entries.push((key, value));
        self.merged.push(merged);
    }

    /// Merges the entries of `source` that the map does not have yet, as
    /// js-yaml does: earlier keys (explicit or merged) win.
    fn merge_from(&mut self, source: Node<'a>) -> Result<(), BuildError> {
        let Value::Map(entries) = source.value else {
            return fail(
                "yaml_syntax",
                "cannot merge mappings; the provided source object is unacceptable",
                source.pos,
            );
        };
        for (k, v) in entries {
            if self.find(&k.text).is_none() {
                self.push(k, v, true);
            }
        }
        Ok(())
    }

    /// Takes the next finished node: a key, a merge source or a value.
    fn take(&mut self, node: Node<'a>, merge_key: bool) -> Result<(), BuildError> {
        self.last_end = Some(node.end);
        match std::mem::replace(&mut self.pending, Pending::Key) {
            Pending::Key if merge_key => self.pending = Pending::Merge,
            Pending::Key => {
                let text = match node.value {
                    Value::String(s) | Value::Date(s) => s,
                    Value::Bool(b) => Cow::Owned(b.to_string()),
                    Value::Number(n) => Cow::Owned(n.to_string()),
                    // js-yaml turns a null key into the text "null".
                    Value::Null => Cow::Borrowed("null"),
                    Value::Seq(_) | Value::Map(_) => {
                        return fail("yaml_syntax", "a mapping key must be a scalar", node.pos);
                    }
                };
                let replace = match self.find(&text) {
                    Some(i) if self.merged.get(i) == Some(&true) => Some(i),
                    Some(_) => {
                        return fail("duplicate_key", format!("duplicate key {text:?}"), node.pos);
                    }
                    None => None,
                };
                self.pending = Pending::Value {
                    key: Key {
                        pos: node.pos,
                        end: node.end,
                        text,
                    },
                    replace,
                };
            }
            Pending::Merge => match node.value {
                Value::Seq(items) => {
                    for item in items {
                        self.merge_from(item)?;
                    }
                }
                _ => self.merge_from(node)?,
            },
            Pending::Value { key, replace } => match replace {
                Some(i) => {
                    if let (Some(slot), Some(m)) = (self.entries.get_mut(i), self.merged.get_mut(i))
                    {
                        *slot = (key, node);
                        *m = false;
                    }
                }
                None => self.push(key, node, false),
            },
        }
        Ok(())
    }
}

/// A collection being built.
enum Frame<'a> {
    Seq {
        pos: Pos,
        anchor: usize,
        items: Vec<Node<'a>>,
    },
    Map(MapFrame<'a>),
}

fn count_nodes(n: &Node<'_>) -> usize {
    let mut total = 0;
    let mut stack = vec![n];
    while let Some(n) = stack.pop() {
        total += 1;
        match &n.value {
            Value::Seq(items) => stack.extend(items),
            Value::Map(entries) => stack.extend(entries.iter().map(|(_, v)| v)),
            _ => {}
        }
    }
    total
}

/// Whether a scalar is a merge key `<<` (plain and untagged, or tagged
/// `!!merge`), when it stands where a key goes.
fn is_merge_key(value: &str, style: ScalarStyle, tag: Option<&Tag>) -> bool {
    match tag {
        None => style == ScalarStyle::Plain && value == "<<",
        Some(t) => value == "<<" && tag_name(t).as_deref() == Some("merge"),
    }
}

/// The name of a `tag:yaml.org,2002:` tag (`str`, `int`, `timestamp`, …).
fn tag_name(t: &Tag) -> Option<Cow<'_, str>> {
    t.core_suffix()
        .map(Cow::Borrowed)
        .or_else(|| t.suffix_in_namespace("tag:yaml.org,2002:"))
}

fn build(text: &str) -> Result<Node<'_>, BuildError> {
    let mut options = granit_parser::Options::default();
    options.flow_nesting_limit = MAX_DEPTH;
    options.block_nesting_limit = MAX_DEPTH;
    let parser = Parser::new_from_str_with_options(text, options);
    let mut stack: Vec<Frame<'_>> = Vec::new();
    let mut anchors: HashMap<usize, Node<'_>> = HashMap::new();
    let mut root: Option<Node<'_>> = None;
    let mut documents = 0usize;
    let mut nodes = 0usize;
    let mut aliases = 0usize;
    for item in parser {
        let (event, span) = item.map_err(|e| scan_error(&e))?;
        let pos = span_pos(&span);
        let end = span_end(&span);
        let mut merge_key = false;
        let finished: Option<(Node, usize)> = match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => None,
            Event::DocumentStart(..) => {
                documents += 1;
                if documents > 1 {
                    return fail(
                        "yaml_multiple_documents",
                        "a file must hold exactly one YAML document",
                        pos,
                    );
                }
                None
            }
            Event::Alias(id) => {
                aliases += 1;
                if aliases > MAX_ALIASES {
                    return fail(
                        "yaml_limit_exceeded",
                        format!("more than {MAX_ALIASES} aliases"),
                        pos,
                    );
                }
                let Some(target) = anchors.get(&id) else {
                    return fail("yaml_syntax", "alias to an unknown anchor", pos);
                };
                nodes += count_nodes(target);
                if nodes > MAX_NODES {
                    return fail(
                        "yaml_limit_exceeded",
                        format!("alias expansion exceeds palisade's limit of {MAX_NODES} nodes"),
                        pos,
                    );
                }
                let mut copy = target.clone();
                copy.pos = pos;
                copy.end = end;
                Some((copy, 0))
            }
            Event::Scalar(value, style, anchor, tag) => {
                nodes += 1;
                let at_key = matches!(
                    stack.last(),
                    Some(Frame::Map(MapFrame {
                        pending: Pending::Key,
                        ..
                    }))
                );
                merge_key = at_key && is_merge_key(&value, style, tag.as_deref());
                let v = if merge_key {
                    Value::String(value)
                } else {
                    resolve_scalar(value, style, tag.as_deref(), pos)?
                };
                Some((Node { pos, end, value: v }, anchor))
            }
            Event::SequenceStart(_, anchor, tag) => {
                check_collection_tag(tag.as_deref(), "seq", pos)?;
                nodes += 1;
                if stack.len() >= MAX_DEPTH {
                    return fail(
                        "yaml_limit_exceeded",
                        format!("nesting deeper than {MAX_DEPTH} levels"),
                        pos,
                    );
                }
                stack.push(Frame::Seq {
                    pos,
                    anchor,
                    items: Vec::new(),
                });
                None
            }
            Event::MappingStart(_, anchor, tag) => {
                check_collection_tag(tag.as_deref(), "map", pos)?;
                nodes += 1;
                if stack.len() >= MAX_DEPTH {
                    return fail(
                        "yaml_limit_exceeded",
                        format!("nesting deeper than {MAX_DEPTH} levels"),
                        pos,
                    );
                }
                stack.push(Frame::Map(MapFrame::new(pos, anchor)));
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq { pos, anchor, items }) => Some((
                    Node {
                        pos,
                        end: collection_end(items.last().map(|n| n.end), end),
                        value: Value::Seq(items),
                    },
                    anchor,
                )),
                _ => return fail("yaml_syntax", "unbalanced sequence", pos),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map(m)) => Some((
                    Node {
                        pos: m.pos,
                        end: collection_end(m.last_end, end),
                        value: Value::Map(m.entries),
                    },
                    m.anchor,
                )),
                _ => return fail("yaml_syntax", "unbalanced mapping", pos),
            },
            _ => None,
        };
        if nodes > MAX_NODES {
            return fail(
                "yaml_limit_exceeded",
                format!("more than {MAX_NODES} nodes"),
                pos,
            );
        }
        let Some((node, anchor)) = finished else {
            continue;
        };
        if anchor != 0 {
            anchors.insert(anchor, node.clone());
        }
        match stack.last_mut() {
            None => {
                if root.is_some() {
                    return fail(
                        "yaml_multiple_documents",
                        "a file must hold exactly one YAML document",
                        node.pos,
                    );
                }
                root = Some(node);
            }
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map(m)) => m.take(node, merge_key)?,
        }
    }
    Ok(root.unwrap_or(Node {
        pos: Pos { line: 1, column: 1 },
        end: Pos { line: 1, column: 1 },
        value: Value::Null,
    }))
}

fn check_collection_tag(tag: Option<&Tag>, expected: &str, pos: Pos) -> Result<(), BuildError> {
    match tag {
        None => Ok(()),
        Some(t) if t.core_suffix() == Some(expected) => Ok(()),
        Some(t) => fail(
            "yaml_unsupported_tag",
            format!("tag {} is not supported", t.original()),
            pos,
        ),
    }
}

/// A plain scalar as js-yaml 4's default schema resolves it.
enum Plain {
    Null,
    Bool(bool),
    /// An integer or a float, as the JavaScript number js-yaml builds.
    Number(f64),
    Date,
    Str,
}

fn resolve_null(v: &str) -> bool {
    matches!(v, "" | "~" | "null" | "Null" | "NULL")
}

fn resolve_bool(v: &str) -> Option<bool> {
    match v {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// js-yaml's `int`: an optional sign, then `0b`/`0o`/`0x` digits or
/// decimal digits, `_` allowed between digits but not first or last.
fn resolve_int(v: &str) -> Option<f64> {
    let (negative, body) = match v.as_bytes().first() {
        Some(b'-') => (true, v.get(1..)?),
        Some(b'+') => (false, v.get(1..)?),
        _ => (false, v),
    };
    let (radix, digits) = match body.as_bytes() {
        [b'0'] => return Some(0.0),
        [b'0', b'b', ..] => (2, body.get(2..)?),
        [b'0', b'o', ..] => (8, body.get(2..)?),
        [b'0', b'x', ..] => (16, body.get(2..)?),
        // A decimal may not start with `_` (nor `0_`, where js-yaml looks
        // past the zero).
        [b'0', b'_', ..] | [b'_', ..] => return None,
        _ => (10, body),
    };
    if digits.ends_with('_') || !digits.bytes().any(|b| b != b'_') {
        return None;
    }
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    if !clean.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = if radix == 10 {
        clean.parse::<f64>().ok()?
    } else {
        clean.chars().fold(0.0_f64, |acc, c| {
            acc * f64::from(radix) + f64::from(c.to_digit(radix).unwrap_or(0))
        })
    };
    // js-yaml strips the sign before reading `0`, so `-0` is 0.
    Some(if negative && magnitude != 0.0 {
        -magnitude
    } else {
        magnitude
    })
}

/// js-yaml's `float`:
/// `[-+]?[0-9][0-9_]*(\.[0-9_]*)?([eE][-+]?[0-9]+)?`, `\.[0-9_]+(…)?`,
/// `[-+]?\.inf` and `\.nan` (in three spellings), not ending in `_`.
fn resolve_float(v: &str) -> Option<f64> {
    if v.ends_with('_') {
        return None;
    }
    let (negative, body) = match v.as_bytes().first() {
        Some(b'-') => (true, v.get(1..)?),
        Some(b'+') => (false, v.get(1..)?),
        _ => (false, v),
    };
    if matches!(body, ".inf" | ".Inf" | ".INF") {
        return Some(if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if matches!(v, ".nan" | ".NaN" | ".NAN") {
        return Some(f64::NAN);
    }
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (body.get(..i)?, Some(body.get(i + 1..)?)),
        None => (body, None),
    };
    let digits_ = |t: &str| t.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    let mantissa_ok = match mantissa.split_once('.') {
        // `.5` takes no sign.
        Some(("", frac)) => body.len() == v.len() && !frac.is_empty() && digits_(frac),
        Some((int, frac)) => {
            int.starts_with(|c: char| c.is_ascii_digit()) && digits_(int) && digits_(frac)
        }
        None => mantissa.starts_with(|c: char| c.is_ascii_digit()) && digits_(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())
    });
    if !mantissa_ok || !exponent_ok {
        return None;
    }
    let clean: String = body.chars().filter(|c| *c != '_').collect();
    let clean = if clean.ends_with('.') || clean.contains(".e") || clean.contains(".E") {
        clean.replacen('.', ".0", 1)
    } else {
        clean
    };
    let clean = if clean.starts_with('.') {
        format!("0{clean}")
    } else {
        clean
    };
    let f: f64 = clean.parse().ok()?;
    Some(if negative { -f } else { f })
}

fn two_digits(s: &str) -> bool {
    s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit())
}

fn one_or_two_digits(s: &str) -> bool {
    (1..=2).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
}

/// js-yaml's `timestamp`: `YYYY-MM-DD`, or `YYYY-M-D` followed by `T`/`t`
/// or spaces and `H:MM:SS`, an optional fraction and an optional zone
/// (`Z`, `±H`, `±HH:MM`).
fn resolve_timestamp(v: &str) -> bool {
    let b = v.as_bytes();
    if b.len() == 10
        && b.get(4) == Some(&b'-')
        && b.get(7) == Some(&b'-')
        && v.get(..4)
            .is_some_and(|y| y.bytes().all(|c| c.is_ascii_digit()))
        && v.get(5..7).is_some_and(two_digits)
        && v.get(8..).is_some_and(two_digits)
    {
        return true;
    }
    let Some(date_end) = v.find(['T', 't', ' ', '\t']) else {
        return false;
    };
    let (date, rest) = v.split_at(date_end);
    let mut parts = date.splitn(3, '-');
    let (Some(y), Some(m), Some(d)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let year = y.len() == 4 && y.bytes().all(|c| c.is_ascii_digit());
    if !(year && one_or_two_digits(m) && one_or_two_digits(d)) {
        return false;
    }
    let rest = match rest.strip_prefix(['T', 't']) {
        Some(r) => r,
        None => rest.trim_start_matches([' ', '\t']),
    };
    let time_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == ':'))
        .unwrap_or(rest.len());
    let (time, mut rest) = rest.split_at(time_end);
    let mut hms = time.split(':');
    let (Some(h), Some(mi), Some(s), None) = (hms.next(), hms.next(), hms.next(), hms.next())
    else {
        return false;
    };
    if !one_or_two_digits(h) || !two_digits(mi) || !two_digits(s) {
        return false;
    }
    if let Some(r) = rest.strip_prefix('.') {
        rest = r.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let zone = rest.trim_start_matches([' ', '\t']);
    if zone.is_empty() {
        return rest.is_empty();
    }
    if zone == "Z" {
        return true;
    }
    let Some(offset) = zone.strip_prefix(['+', '-']) else {
        return false;
    };
    match offset.split_once(':') {
        Some((h, m)) => one_or_two_digits(h) && two_digits(m),
        None => one_or_two_digits(offset),
    }
}

/// Resolves an untagged plain scalar in js-yaml's order: null, bool, int,
/// float, timestamp, and otherwise a string.
fn resolve_plain(v: &str) -> Plain {
    if resolve_null(v) {
        Plain::Null
    } else if let Some(b) = resolve_bool(v) {
        Plain::Bool(b)
    } else if let Some(n) = resolve_int(v).or_else(|| resolve_float(v)) {
        Plain::Number(n)
    } else if resolve_timestamp(v) {
        Plain::Date
    } else {
        Plain::Str
    }
}

/// The largest integer a JavaScript number holds exactly
/// (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// A JavaScript number as JSON: integral values in the safe range become
/// integers (JavaScript has one number type, so `3.0`, `3e0` and `3` are
/// the same value, which zod's `int()` accepts), others stay floats;
/// `None` when not finite.
pub(crate) fn js_number(f: f64) -> Option<serde_json::Number> {
    if !f.is_finite() {
        return None;
    }
    if f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER {
        #[allow(
            clippy::cast_possible_truncation,
            reason = "integral and within the safe integer range"
        )]
        return Some(serde_json::Number::from(f as i64));
    }
    serde_json::Number::from_f64(f)
}

fn resolve_scalar<'a>(
    value: Cow<'a, str>,
    style: ScalarStyle,
    tag: Option<&Tag>,
    pos: Pos,
) -> Result<Value<'a>, BuildError> {
    let v: &str = &value;
    let resolved = match tag {
        None if style != ScalarStyle::Plain => return Ok(Value::String(value)),
        None => resolve_plain(v),
        Some(t) => {
            let name = tag_name(t);
            let explicit = match name.as_deref() {
                Some("str") => return Ok(Value::String(value)),
                Some("null") => resolve_null(v).then_some(Plain::Null),
                Some("bool") => resolve_bool(v).map(Plain::Bool),
                Some("int") => resolve_int(v).map(Plain::Number),
                Some("float") => resolve_float(v).map(Plain::Number),
                Some("timestamp") => resolve_timestamp(v).then_some(Plain::Date),
                Some("merge") => (v == "<<").then_some(Plain::Str),
                _ => {
                    return fail(
                        "yaml_unsupported_tag",
                        format!("tag {} is not supported", t.original()),
                        pos,
                    );
                }
            };
            match explicit {
                Some(p) => p,
                None => {
                    return fail("yaml_syntax", format!("{v:?} does not match its tag"), pos);
                }
            }
        }
    };
    Ok(match resolved {
        Plain::Null => Value::Null,
        Plain::Bool(b) => Value::Bool(b),
        Plain::Number(f) => match js_number(f) {
            Some(n) => Value::Number(n),
            None => {
                return fail(
                    "yaml_non_finite_number",
                    format!("{v} is not a JSON number; quote it if you mean a string"),
                    pos,
                );
            }
        },
        Plain::Date => Value::Date(value),
        Plain::Str => Value::String(value),
    })
}

fn tab_in_indentation(text: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let indent_len = line.len() - line.trim_start_matches([' ', '\t']).len();
        if let Some(tab) = line.get(..indent_len).and_then(|ind| ind.find('\t')) {
            let rest = line.get(indent_len..).unwrap_or("").trim_end();
            // A tab-indented continuation inside a block scalar is content;
            // we cannot tell cheaply, so only flag lines that look like keys
            // or sequence entries.
            if rest.starts_with("- ") || rest == "-" || rest.contains(": ") || rest.ends_with(':') {
                return Some(offset + tab);
            }
        }
        offset += line.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Node<'_> {
        let parsed = parse("t.yml", text).unwrap();
        assert!(parsed.warnings().is_empty(), "{:?}", parsed.warnings());
        parsed.into_value()
    }

    fn err(text: &str) -> Diagnostic {
        let diags = parse("t.yml", text).unwrap_err();
        assert_eq!(diags.len(), 1, "{diags:?}");
        diags.into_iter().next().unwrap()
    }

    #[test]
    fn positions_and_core_schema() {
        let n = ok("a: 1\non: yes\nq: '12'\nl:\n  - x\n  - {b: true, c: ~}\n");
        let Value::Map(entries) = &n.value else {
            panic!()
        };
        assert_eq!(entries[0].0.text, "a");
        assert_eq!(entries[0].1.value, Value::Number(1.into()));
        assert_eq!(entries[1].0.text, "on");
        assert_eq!(entries[1].1.value, Value::String("yes".into()));
        assert_eq!(entries[2].1.value, Value::String("12".into()));
        assert_eq!(entries[1].0.pos, Pos { line: 2, column: 1 });
        assert_eq!(entries[1].1.pos, Pos { line: 2, column: 5 });
        let l = n.get("l").unwrap();
        let Value::Seq(items) = &l.value else {
            panic!()
        };
        assert_eq!(items[1].pos.line, 6);
        let c = items[1].get_key("c").unwrap();
        assert_eq!(
            c.pos,
            Pos {
                line: 6,
                column: 15
            }
        );
        assert_eq!(items[1].get("c").unwrap().value, Value::Null);
    }

    #[test]
    fn hostile_inputs_are_refused() {
        assert_eq!(err("a: 1\na: 2\n").code, "duplicate_key");
        assert_eq!(err("a: 1\n---\nb: 2\n").code, "yaml_multiple_documents");
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(err(&deep).code, "yaml_limit_exceeded");
        let bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n";
        assert_eq!(err(bomb).code, "yaml_limit_exceeded");
        assert_eq!(err(&"a".repeat(MAX_FILE_BYTES + 1)).code, "file_too_large");
        assert_eq!(err("a:\n\tb: 1\n").code, "yaml_tab_indentation");
        // positive controls
        ok("a: &a [x]\nb: *a\n");
        ok(&format!("{}{}", "[".repeat(20), "]".repeat(20)));
    }

    #[test]
    fn core_schema_scalars_and_tags() {
        let n = ok(
            "a: !!str 12\nb: 0x1F\nc: 1e3\nd: yes\ne: \"true\"\nf: -0.5\ng: 0o17\nh: 1_000\ni: ~\n",
        );
        assert_eq!(n.get("a").unwrap().value, Value::String("12".into()));
        assert_eq!(n.get("b").unwrap().value, Value::Number(31.into()));
        // JavaScript has one number type: an integral float is the integer.
        assert_eq!(n.get("c").unwrap().value, Value::Number(1000.into()));
        assert_eq!(n.get("d").unwrap().value, Value::String("yes".into()));
        assert_eq!(n.get("e").unwrap().value, Value::String("true".into()));
        assert_eq!(n.get("f").unwrap().to_json(), serde_json::json!(-0.5));
        assert_eq!(n.get("g").unwrap().value, Value::Number(15.into()));
        assert_eq!(n.get("h").unwrap().value, Value::Number(1000.into()));
        assert_eq!(n.get("i").unwrap().value, Value::Null);
        assert_eq!(err("a: !custom x\n").code, "yaml_unsupported_tag");
        assert_eq!(err("a: !!int abc\n").code, "yaml_syntax");
        assert_eq!(err("a: .inf\n").code, "yaml_non_finite_number");
        assert_eq!(err("a: -.inf\n").code, "yaml_non_finite_number");
        assert_eq!(err("a: *nope\n").code, "yaml_syntax");
        // Large maps use the hashed duplicate check.
        let big: String = (0..100).map(|i| format!("k{i}: 1\n")).collect();
        ok(&big);
        assert_eq!(err(&format!("{big}k7: 2\n")).code, "duplicate_key");
    }

    impl Value<'_> {
        fn to_json_number(&self) -> Option<f64> {
            match self {
                Value::Number(n) => n.as_f64(),
                _ => None,
            }
        }
    }

    fn num(text: &str) -> Value<'_> {
        ok(text).get("a").unwrap().value.clone()
    }

    #[test]
    fn numbers_as_js_yaml_reads_them() {
        let int = |n: i64| Value::Number(n.into());
        // Integral floats are integers (one JavaScript number type).
        assert_eq!(num("a: 3.0\n"), int(3));
        assert_eq!(num("a: 3e0\n"), int(3));
        assert_eq!(num("a: 1_000\n"), int(1000));
        assert_eq!(num("a: -0\n"), int(0));
        assert_eq!(num("a: 012\n"), int(12));
        assert_eq!(num("a: 0b1_01\n"), int(5));
        assert_eq!(num("a: -0x1F\n"), int(-31));
        assert_eq!(num("a: +0o17\n"), int(15));
        assert_eq!(num("a: 0_1\n"), int(1));
        assert_eq!(num("a: 1.\n"), int(1));
        assert_eq!(num("a: 1_0.5\n").to_json_number(), Some(10.5));
        assert_eq!(num("a: .5\n").to_json_number(), Some(0.5));
        assert_eq!(num("a: 1.5E+1\n").to_json_number(), Some(15.0));
        // Beyond the safe integer range a number stays a float.
        assert!(matches!(num("a: 9007199254740993\n"), Value::Number(n) if n.is_f64()));
        // Not numbers for js-yaml: strings.
        for s in [
            "-.5", "1_", "_1", "0x", "0b2", "0X1F", "1e", "1.2.3", "0x1_",
        ] {
            assert_eq!(num(&format!("a: {s}\n")), Value::String(s.into()), "{s}");
        }
        assert_eq!(err("a: .nan\n").code, "yaml_non_finite_number");
        assert_eq!(err("a: +.inf\n").code, "yaml_non_finite_number");
        assert_eq!(
            err(&format!("a: 1{}\n", "0".repeat(400))).code,
            "yaml_non_finite_number"
        );
        // Booleans and nulls only in js-yaml's three spellings.
        assert_eq!(num("a: TRUE\n"), Value::Bool(true));
        assert_eq!(num("a: False\n"), Value::Bool(false));
        assert_eq!(num("a: tRUE\n"), Value::String("tRUE".into()));
        assert_eq!(num("a: NULL\n"), Value::Null);
        assert_eq!(num("a: nULL\n"), Value::String("nULL".into()));
        // Explicit tags use that type's resolver only.
        assert_eq!(num("a: !!int '12'\n"), int(12));
        assert_eq!(num("a: !!float 1\n"), int(1));
        assert_eq!(err("a: !!int 1.5\n").code, "yaml_syntax");
        assert_eq!(err("a: !!binary aGk=\n").code, "yaml_unsupported_tag");
    }

    #[test]
    fn timestamps_are_dates() {
        for s in [
            "2024-01-01",
            "2024-1-1T10:00:00",
            "2024-01-01t1:02:03.5Z",
            "2024-01-01 10:00:00 +05:00",
            "2024-01-01 10:00:00-5",
        ] {
            let text = format!("a: {s}\n");
            let n = ok(&text);
            assert_eq!(n.get("a").unwrap().value, Value::Date(s.into()), "{s}");
            assert_eq!(n.get("a").unwrap().value.type_name(), "Date");
        }
        // Positive controls: near misses are strings, quoted dates too.
        for s in [
            "2024-1-1",
            "2024-01-01T10:00",
            "2024-01-01T10:00:00Q",
            "24-01-01",
        ] {
            assert_eq!(num(&format!("a: {s}\n")), Value::String(s.into()), "{s}");
        }
        assert_eq!(num("a: '2024-01-01'\n"), Value::String("2024-01-01".into()));
        assert_eq!(
            num("a: !!timestamp 2024-01-01\n"),
            Value::Date("2024-01-01".into())
        );
    }

    fn json(text: &str) -> serde_json::Value {
        ok(text).to_json()
    }

    #[test]
    fn merge_keys_as_js_yaml_merges_them() {
        use serde_json::json;
        let base = "b: &b {x: 1, y: 2}\nc: &c {y: 3, z: 4}\n";
        assert_eq!(
            json(&format!("{base}a:\n  <<: *b\n  w: 0\n"))["a"],
            json!({"x": 1, "y": 2, "w": 0})
        );
        // An explicit key overrides a merged one, before or after the merge.
        assert_eq!(
            json(&format!("{base}a:\n  <<: *b\n  y: 9\n"))["a"],
            json!({"x": 1, "y": 9})
        );
        assert_eq!(
            json(&format!("{base}a:\n  y: 9\n  <<: *b\n"))["a"],
            json!({"y": 9, "x": 1})
        );
        // A list merges in order; the earlier source wins.
        assert_eq!(
            json(&format!("{base}a:\n  <<: [*b, *c]\n"))["a"],
            json!({"x": 1, "y": 2, "z": 4})
        );
        // Two merge keys in one mapping are not duplicates.
        assert_eq!(
            json(&format!("{base}a:\n  <<: *c\n  <<: *b\n"))["a"],
            json!({"y": 3, "z": 4, "x": 1})
        );
        assert_eq!(json("a: {<<: {k: v}}\n")["a"], json!({"k": "v"}));
        assert_eq!(json("a: {!!merge <<: {k: v}}\n")["a"], json!({"k": "v"}));
        assert_eq!(err("a: {!!merge x: {k: v}}\n").code, "yaml_syntax");
        // Positive controls: a quoted `<<` is an ordinary key, and `<<` as a
        // value is text.
        assert_eq!(json("a: {'<<': {k: v}}\n")["a"], json!({"<<": {"k": "v"}}));
        assert_eq!(json("a: <<\n")["a"], json!("<<"));
        // Refusals: a merged key overridden twice, a scalar source, an
        // explicit duplicate.
        assert_eq!(
            err(&format!("{base}a:\n  <<: *b\n  y: 9\n  y: 8\n")).code,
            "duplicate_key"
        );
        assert_eq!(err("a:\n  <<: 1\n").code, "yaml_syntax");
        assert_eq!(err("a:\n  <<: [{k: v}, x]\n").code, "yaml_syntax");
        assert_eq!(err("a: {k: 1, k: 2}\n").code, "duplicate_key");
        // Large mappings use the hashed index for merges too.
        let big: String = (0..40).map(|i| format!("  k{i}: {i}\n")).collect();
        let text = format!("b: &b\n{big}a:\n  <<: *b\n  k3: x\n");
        assert_eq!(json(&text)["a"]["k3"], json!("x"));
        assert_eq!(json(&text)["a"]["k39"], json!(39));
        assert_eq!(err(&format!("{text}  k3: y\n")).code, "duplicate_key");
        // Merges stay inside the alias and node limits.
        let refs = vec!["*b"; MAX_ALIASES + 1].join(", ");
        assert_eq!(
            err(&format!("b: &b {{x: 1}}\na: {{<<: [{refs}]}}\n")).code,
            "yaml_limit_exceeded"
        );
    }

    #[test]
    fn a_map_ends_at_its_last_written_node_not_a_merged_anchor() {
        // The merge is written last, so its entry `x` is the map's last
        // entry, but `x` was written on line 1: the map `b` ends where its
        // own text ends, after the alias on line 4.
        let n = ok("a: &s {x: 1}\nb:\n  y: 2\n  <<: *s\n");
        let b = n.get("b").unwrap();
        let Value::Map(entries) = &b.value else {
            panic!()
        };
        assert_eq!(entries[1].0.text, "x");
        assert_eq!(entries[1].1.end.line, 1);
        assert_eq!(b.end, Pos { line: 4, column: 9 });
        // A key spans its text.
        let (k, _) = &entries[0];
        assert_eq!(k.text, "y");
        assert_eq!(
            (k.pos, k.end),
            (Pos { line: 3, column: 3 }, Pos { line: 3, column: 4 })
        );
        // Positive control: an explicit key written last ends the map.
        let n = ok("a: &s {x: 1}\nb:\n  <<: *s\n  y: 22\n");
        assert_eq!(n.get("b").unwrap().end, Pos { line: 4, column: 8 });
    }
}
