//! Loading YAML text into a positioned node tree, fail-closed on hostile input.
//!
//! The tree keeps the 1-based line and column of every node and every mapping
//! key, so later checks can point at the exact place of a finding. Parsing is
//! done by `serde-saphyr` (a maintained, panic-free YAML 1.2 parser with
//! resource budgets); this module only adds palisade's limits on top:
//! an input size cap, a nesting cap, an alias cap, YAML 1.2 core booleans
//! only (`on`/`yes` are strings, as in the Hub's js-yaml), duplicate keys
//! rejected, and exactly one document.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;
use serde_saphyr::budget::Budget;
use serde_saphyr::options::{AliasLimits, DuplicateKeyPolicy};

use crate::diagnostic::{Diagnostic, LineIndex, Path};

/// The largest YAML file palisade reads, in bytes (1 MiB).
pub const MAX_FILE_BYTES: usize = 1024 * 1024;
/// The deepest nesting of mappings and sequences palisade accepts.
pub const MAX_DEPTH: usize = 32;
/// The most alias references (`*name`) a document may contain.
pub const MAX_ALIASES: usize = 64;
/// The most nodes a document may contain.
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
pub struct Node {
    /// Where the node starts.
    pub pos: Pos,
    /// The node's value.
    pub value: Value,
}

/// A mapping key with its position.
#[derive(Clone, Debug, PartialEq)]
pub struct Key {
    /// Where the key starts.
    pub pos: Pos,
    /// The key's text.
    pub text: String,
}

/// The value of a YAML node after YAML 1.2 core-schema resolution.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `null`, `~` or an empty value.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer or a float.
    Number(serde_json::Number),
    /// A string (quoted, or a plain scalar that is not a null, bool or number).
    String(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in authored order; keys are unique.
    Map(Vec<(Key, Node)>),
}

impl Value {
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

impl Node {
    /// Converts the node to a JSON value (positions are dropped).
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => serde_json::Value::Number(n.clone()),
            Value::String(s) => serde_json::Value::String(s.clone()),
            Value::Seq(items) => {
                serde_json::Value::Array(items.iter().map(Node::to_json).collect())
            }
            Value::Map(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.text.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// The value of `key` if this node is a mapping that has it.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|(k, _)| k.text == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The key node of `key` if this node is a mapping that has it.
    pub fn get_key(&self, key: &str) -> Option<&Key> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|(k, _)| k.text == key).map(|(k, _)| k),
            _ => None,
        }
    }

    /// The node at `path` below this node, if any.
    pub fn at_path(&self, path: &Path) -> Option<&Node> {
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
/// Returns `None` plus at least one error diagnostic when the text is not a
/// single well-formed YAML document within palisade's limits.
pub fn parse(file: &str, text: &str) -> (Option<Node>, Vec<Diagnostic>) {
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
    let index = LineIndex::new(text);
    if let Some(offset) = text.find('\t') {
        // Tabs are never indentation in YAML; inside a scalar they are data,
        // but a tab before any content on a line is almost always a mistake
        // the parser reports poorly, so name it precisely.
        if let Some(line_off) = tab_in_indentation(text) {
            let (line, column) = index.line_col(line_off);
            diags.push(
                Diagnostic::error("yaml_tab_indentation", "tab character used for indentation")
                    .in_file(file)
                    .at(line, column)
                    .with_help("YAML indentation must use spaces"),
            );
            return (None, diags);
        }
        let _ = offset;
    }
    let mut budget = Budget::default();
    budget.max_depth = MAX_DEPTH;
    budget.max_aliases = MAX_ALIASES;
    budget.max_nodes = MAX_NODES;
    budget.max_documents = 1;
    budget.flow_nesting_limit = MAX_DEPTH;
    let mut alias_limits = AliasLimits::default();
    alias_limits.max_total_replayed_events = 10_000;
    alias_limits.max_alias_expansions_per_anchor = 16;
    alias_limits.max_replay_stack_depth = 8;
    let options = serde_saphyr::options! {
        budget: Some(budget),
        alias_limits: alias_limits,
        duplicate_keys: DuplicateKeyPolicy::Error,
        strict_booleans: true,
        emit_comments: false,
    };
    let result: Result<Spanned<Value>, serde_saphyr::Error> =
        serde_saphyr::from_str_with_options(text, options);
    match result {
        Ok(spanned) => (
            Some(Node {
                pos: pos_of(&spanned.referenced),
                value: spanned.value,
            }),
            diags,
        ),
        Err(err) => {
            diags.push(yaml_error(file, text, &err));
            (None, diags)
        }
    }
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

fn yaml_error(file: &str, text: &str, err: &serde_saphyr::Error) -> Diagnostic {
    let raw = err.without_snippet().to_string();
    let first = raw.lines().next().unwrap_or("invalid YAML").trim();
    // The location travels separately; drop the parser's " at line N, column M" tail.
    let message = first
        .find(" at line ")
        .and_then(|i| first.get(..i))
        .unwrap_or(first)
        .to_owned();
    let lower = message.to_lowercase();
    let (code, message) = if lower.starts_with("duplicate mapping key") {
        let key = message
            .strip_prefix("duplicate mapping key: ")
            .and_then(|k| k.split(", set DuplicateKeyPolicy").next())
            .unwrap_or("")
            .to_owned();
        ("duplicate_key", format!("duplicate key {key:?}"))
    } else if lower.contains("documents {") {
        (
            "yaml_multiple_documents",
            "a file must hold exactly one YAML document".to_owned(),
        )
    } else if lower.contains("depth {") || lower.contains("recursion limit") {
        (
            "yaml_limit_exceeded",
            format!("nesting deeper than {MAX_DEPTH} levels"),
        )
    } else if lower.contains("alias") || lower.contains("anchor") {
        (
            "yaml_limit_exceeded",
            format!("alias expansion exceeds palisade's limits ({message})"),
        )
    } else if lower.contains("budget") {
        ("yaml_limit_exceeded", message)
    } else {
        ("yaml_syntax", message)
    };
    let (line, column) = match err.location() {
        Some(loc) => (
            u32::try_from(loc.line()).unwrap_or(0),
            u32::try_from(loc.column()).unwrap_or(0),
        ),
        None => (0, 0),
    };
    let (line, column) = if line == 0 && !text.is_empty() {
        (1, 1)
    } else {
        (line, column)
    };
    Diagnostic::error(code, message)
        .in_file(file)
        .at(line, column)
}

fn pos_of(loc: &serde_saphyr::Location) -> Pos {
    Pos {
        line: u32::try_from(loc.line()).unwrap_or(0),
        column: u32::try_from(loc.column()).unwrap_or(0),
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite numbers (.nan, .inf) are not JSON values"))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_bytes<E: de::Error>(self, _v: &[u8]) -> Result<Value, E> {
        Err(E::custom("binary values are not supported"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Value>>()? {
            items.push(Node {
                pos: pos_of(&item.referenced),
                value: item.value,
            });
        }
        Ok(Value::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries: Vec<(Key, Node)> = Vec::new();
        while let Some(key) = map.next_key::<Spanned<Value>>()? {
            let text = match key.value {
                Value::String(s) => s,
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                Value::Null => return Err(de::Error::custom("a mapping key must not be null")),
                Value::Seq(_) | Value::Map(_) => {
                    return Err(de::Error::custom("a mapping key must be a scalar"));
                }
            };
            let value = map.next_value::<Spanned<Value>>()?;
            if entries.iter().any(|(k, _)| k.text == text) {
                return Err(de::Error::custom(format!(
                    "duplicate mapping key: {text:?}"
                )));
            }
            entries.push((
                Key {
                    pos: pos_of(&key.referenced),
                    text,
                },
                Node {
                    pos: pos_of(&value.referenced),
                    value: value.value,
                },
            ));
        }
        Ok(Value::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Node {
        let (node, diags) = parse("t.yml", text);
        assert!(diags.is_empty(), "{diags:?}");
        node.unwrap()
    }

    fn err(text: &str) -> Diagnostic {
        let (node, diags) = parse("t.yml", text);
        assert!(node.is_none());
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
}
