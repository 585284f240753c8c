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

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

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
    /// The node's value.
    pub value: Value<'a>,
}

/// A mapping key with its position.
#[derive(Clone, Debug, PartialEq)]
pub struct Key<'a> {
    /// Where the key starts.
    pub pos: Pos,
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
    /// A string (quoted, or a plain scalar that is not a null, bool or number).
    String(Cow<'a, str>),
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
                            text: Cow::Borrowed(k.as_str()),
                        };
                        (key, Node::from_json(v))
                    })
                    .collect(),
            ),
        };
        Self {
            pos: Pos::default(),
            value,
        }
    }

    /// Converts the node to a JSON value (positions are dropped).
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => serde_json::Value::Number(n.clone()),
            Value::String(s) => serde_json::Value::String(s.to_string()),
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
        let mut node = self;
        let mut pos = self.pos;
        for seg in &path.0 {
            let next = match (seg, &node.value) {
                (crate::PathSegment::Key(k), Value::Map(entries)) => {
                    entries.iter().find(|(key, _)| &key.text == k)
                }
                (crate::PathSegment::Index(i), Value::Seq(items)) => match items.get(*i) {
                    Some(n) => {
                        node = n;
                        pos = n.pos;
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
                    pos = match value.value {
                        Value::Map(_) | Value::Seq(_) => key.pos,
                        _ => value.pos,
                    };
                    node = value;
                }
                None => return pos,
            }
        }
        pos
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

/// A collection being built.
enum Frame<'a> {
    Seq {
        pos: Pos,
        anchor: usize,
        items: Vec<Node<'a>>,
    },
    Map {
        pos: Pos,
        anchor: usize,
        entries: Vec<(Key<'a>, Node<'a>)>,
        pending: Option<Key<'a>>,
        seen: Option<HashSet<Cow<'a, str>>>,
    },
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
                Some((copy, 0))
            }
            Event::Scalar(value, style, anchor, tag) => {
                nodes += 1;
                let v = resolve_scalar(value, style, tag.as_deref(), pos)?;
                Some((Node { pos, value: v }, anchor))
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
                stack.push(Frame::Map {
                    pos,
                    anchor,
                    entries: Vec::new(),
                    pending: None,
                    seen: None,
                });
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq { pos, anchor, items }) => Some((
                    Node {
                        pos,
                        value: Value::Seq(items),
                    },
                    anchor,
                )),
                _ => return fail("yaml_syntax", "unbalanced sequence", pos),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map {
                    pos,
                    anchor,
                    entries,
                    ..
                }) => Some((
                    Node {
                        pos,
                        value: Value::Map(entries),
                    },
                    anchor,
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
            Some(Frame::Map {
                entries,
                pending,
                seen,
                ..
            }) => match pending.take() {
                None => {
                    let text = match node.value {
                        Value::String(s) => s,
                        Value::Bool(b) => Cow::Owned(b.to_string()),
                        Value::Number(n) => Cow::Owned(n.to_string()),
                        Value::Null => {
                            return fail("yaml_syntax", "a mapping key must not be null", node.pos);
                        }
                        Value::Seq(_) | Value::Map(_) => {
                            return fail("yaml_syntax", "a mapping key must be a scalar", node.pos);
                        }
                    };
                    let duplicate = match seen {
                        Some(set) => !set.insert(text.clone()),
                        None => {
                            let dup = entries.iter().any(|(k, _)| k.text == text);
                            if entries.len() >= 16 {
                                *seen = Some(
                                    entries
                                        .iter()
                                        .map(|(k, _)| k.text.clone())
                                        .chain([text.clone()])
                                        .collect(),
                                );
                            }
                            dup
                        }
                    };
                    if duplicate {
                        return fail("duplicate_key", format!("duplicate key {text:?}"), node.pos);
                    }
                    *pending = Some(Key {
                        pos: node.pos,
                        text,
                    });
                }
                Some(key) => entries.push((key, node)),
            },
        }
    }
    Ok(root.unwrap_or(Node {
        pos: Pos { line: 1, column: 1 },
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

fn resolve_scalar<'a>(
    value: Cow<'a, str>,
    style: ScalarStyle,
    tag: Option<&Tag>,
    pos: Pos,
) -> Result<Value<'a>, BuildError> {
    let core = match tag {
        None => None,
        Some(t) => match t.core_suffix() {
            Some(s @ ("str" | "int" | "float" | "bool" | "null")) => Some(s),
            _ => {
                return fail(
                    "yaml_unsupported_tag",
                    format!("tag {} is not supported", t.original()),
                    pos,
                );
            }
        },
    };
    if core == Some("str") || (core.is_none() && style != ScalarStyle::Plain) {
        return Ok(Value::String(value));
    }
    let v: &str = &value;
    let resolved = match v {
        "" | "~" | "null" | "Null" | "NULL" => Value::Null,
        "true" | "True" | "TRUE" => Value::Bool(true),
        "false" | "False" | "FALSE" => Value::Bool(false),
        _ => match number(v) {
            Some(Ok(n)) => Value::Number(n),
            Some(Err(())) => {
                return fail(
                    "yaml_non_finite_number",
                    format!("{v} is not a JSON number; quote it if you mean a string"),
                    pos,
                );
            }
            None => Value::String(value.clone()),
        },
    };
    // An explicit core tag must agree with the resolved type.
    let agrees = matches!(
        (core, &resolved),
        (None, _)
            | (Some("null"), Value::Null)
            | (Some("bool"), Value::Bool(_))
            | (Some("int" | "float"), Value::Number(_))
    );
    if !agrees {
        return fail("yaml_syntax", format!("{v:?} does not match its tag"), pos);
    }
    Ok(resolved)
}

/// YAML 1.2 core-schema numbers: `Some(Ok)` for a finite number,
/// `Some(Err)` for `.inf`/`.nan`, `None` when `s` is not a number.
fn number(s: &str) -> Option<Result<serde_json::Number, ()>> {
    let unsigned = s.strip_prefix(['-', '+']).unwrap_or(s);
    if matches!(unsigned, ".inf" | ".Inf" | ".INF")
        || (unsigned == s && matches!(s, ".nan" | ".NaN" | ".NAN"))
    {
        return Some(Err(()));
    }
    if let Some(oct) = s.strip_prefix("0o") {
        return u64::from_str_radix(oct, 8).ok().map(|n| Ok(n.into()));
    }
    if let Some(hex) = s.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16).ok().map(|n| Ok(n.into()));
    }
    let digits = unsigned.bytes().all(|b| b.is_ascii_digit());
    if !unsigned.is_empty() && digits {
        if let Ok(n) = s.parse::<i64>() {
            return Some(Ok(n.into()));
        }
        if let Ok(n) = s.parse::<u64>() {
            return Some(Ok(n.into()));
        }
    }
    // [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(i) => (unsigned.get(..i)?, Some(unsigned.get(i + 1..)?)),
        None => (unsigned, None),
    };
    let (int, frac) = match mantissa.split_once('.') {
        Some((a, b)) => (a, Some(b)),
        None => (mantissa, None),
    };
    let is_digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match frac {
        Some(f) => is_digits(int) && is_digits(f) && !(int.is_empty() && f.is_empty()),
        None => !int.is_empty() && is_digits(int),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && is_digits(e)
    });
    if !mantissa_ok || !exponent_ok {
        return None;
    }
    let f: f64 = s.parse().ok()?;
    Some(serde_json::Number::from_f64(f).ok_or(()))
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
        assert_eq!(n.get("c").unwrap().to_json(), serde_json::json!(1000.0));
        assert_eq!(n.get("d").unwrap().value, Value::String("yes".into()));
        assert_eq!(n.get("e").unwrap().value, Value::String("true".into()));
        assert_eq!(n.get("f").unwrap().to_json(), serde_json::json!(-0.5));
        assert_eq!(n.get("g").unwrap().value, Value::Number(15.into()));
        assert_eq!(n.get("h").unwrap().value, Value::String("1_000".into()));
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
}
