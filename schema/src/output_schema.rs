//! `output.schema` compiled as the Hub compiles it: ajv 8.20.0, its default
//! draft-07 meta-schema, `{ allErrors: true, strict: true }` and no formats
//! added (`src/workflows/json-schema.ts` in getpaseo/hub).
//!
//! [`check`] reimplements what that compile refuses, in ajv's order and
//! wording, so the first error is the one the Hub reports:
//!
//! 1. `$schema`: a string naming the draft-07 meta-schema (ajv knows no
//!    other: a 2020-12 URI is `no schema with key or ref …`);
//! 2. the draft-07 meta-schema: every keyword's value type
//!    (`schema is invalid: data/type must be …`), see `meta.rs`;
//! 3. strict mode, walking the schema as ajv's code generator does: unknown
//!    keywords (`strictSchema`), keywords without their applicable `type`
//!    and union types (`strictTypes`), partial tuples (`strictTuples`),
//!    `required` naming an undefined property (`strictRequired`), any
//!    `format` (no format is defined), `if`/`then`/`else` alone,
//!    `additionalItems` without a tuple, a property matched by a
//!    `patternProperties` pattern, `nullable` misuse, `id`, and local
//!    `$ref`s that do not resolve;
//! 4. every `pattern` and `patternProperties` key as a JavaScript regular
//!    expression with the `u` flag, by the `regress` crate (an ECMAScript
//!    engine); V8's wording of a syntax error is approximated by regress's.
//!
//! Like ajv, subschemas that are never compiled (under `definitions` or
//! `$defs` and not referenced, or beside an always-valid `anyOf` branch)
//! are only checked against the meta-schema. `$ref`s resolve against the
//! root: a JSON pointer, a `$id: "#name"` anchor, the root's own `$id`, or
//! the draft-07 meta-schema; any other URI is unresolvable, as ajv (with no
//! schema loader) finds it. Nested `$id` scopes are not followed.
//!
//! No IO. The walk is bounded: nesting beyond [`MAX_DEPTH`] levels and
//! patterns over [`MAX_PATTERN_LEN`] bytes are refused, each `$ref` target
//! is walked once, and patterns are matched against property names by
//! the `regex` crate's automata in linear time, within a total budget
//! ([`MAX_MATCH_WORK`]); regress only parses (its engines backtrack
//! exponentially on `^(a+)+$`, its PikeVM too).

mod meta;

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

use serde_json::{Map, Value};

use crate::diagnostic::PathSegment;

/// Schemas nested deeper than this (JSON levels) are refused; a YAML
/// document cannot reach it (its limit is [`crate::yaml::MAX_DEPTH`]).
pub const MAX_DEPTH: usize = 256;

/// Longest `pattern` (bytes) compiled.
pub const MAX_PATTERN_LEN: usize = 8 * 1024;

/// The work allowed for matching `patternProperties` patterns against
/// property names (strictness's "property matches pattern"), summed over
/// every pair as (pattern bytes + 1) × (name bytes + 1): a `regex` match
/// is linear in each, but a schema of thousands of patterns and properties
/// would multiply them.
pub const MAX_MATCH_WORK: usize = 1 << 26;

/// The nodes visited, over one schema, looking for `$id: "#name"` anchors
/// (each distinct anchor is looked for once): a schema of many `$ref`s to
/// many anchors would otherwise search the whole schema for each.
pub const MAX_ANCHOR_WORK: usize = 1 << 22;

/// Why the Hub's compiler refuses a schema: where, and ajv's message.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaError {
    /// The location of the offending value, relative to the schema root.
    pub at: Vec<PathSegment>,
    /// ajv's message, as the Hub appends it to
    /// `step <id> output.schema is invalid JSON Schema: `.
    pub message: String,
    /// `true` when the schema passes none of palisade's own hardening
    /// limits ([`MAX_DEPTH`], [`MAX_PATTERN_LEN`]) rather than being
    /// refused by ajv: the Hub may compile it.
    pub limit: bool,
}

impl SchemaError {
    /// [`SchemaError::at`] as a JSON pointer (`/properties/kind`); empty
    /// at the root.
    pub fn pointer(&self) -> String {
        meta::pointer(&self.at)
    }
}

/// Checks `schema` as the Hub's `compileJsonSchema` does; `Ok` when ajv
/// compiles it.
pub fn check(schema: &Value) -> Result<(), SchemaError> {
    let err = |message: &str| SchemaError {
        at: Vec::new(),
        message: message.to_owned(),
        limit: false,
    };
    let Some(root) = schema.as_object() else {
        return Err(err("JSON Schema must be an object"));
    };
    if depth(schema, 0) > MAX_DEPTH {
        return Err(SchemaError {
            limit: true,
            ..err(&format!(
                "schema nests deeper than {MAX_DEPTH} levels (palisade's limit)"
            ))
        });
    }
    match root.get("$schema") {
        None => {}
        Some(Value::String(s)) if s.is_empty() || is_meta_uri(s) => {}
        Some(Value::String(s)) => {
            return Err(SchemaError {
                at: vec![key("$schema")],
                message: format!("no schema with key or ref \"{s}\""),
                limit: false,
            });
        }
        Some(_) => {
            return Err(SchemaError {
                at: vec![key("$schema")],
                message: "$schema must be a string".into(),
                limit: false,
            });
        }
    }
    let mut errors = meta::MetaErrors::default();
    meta::schema(schema, &mut Vec::new(), &mut errors);
    if let Some((at, _)) = errors.errors.first() {
        return Err(SchemaError {
            at: at.clone(),
            message: format!("schema is invalid: {}", errors.text()),
            limit: false,
        });
    }
    let base = match root.get("$id") {
        Some(Value::String(id)) => normalize_id(id).to_owned(),
        _ => String::new(),
    };
    let mut walker = Walker {
        root: schema,
        base,
        refs_done: HashSet::new(),
        match_budget: MAX_MATCH_WORK,
        anchor_budget: MAX_ANCHOR_WORK,
        anchors: std::collections::HashMap::new(),
    };
    let cx = Cx {
        at: Vec::new(),
        err_path: "#".into(),
        data_types: Vec::new(),
        defined: Rc::default(),
        depth: 0,
    };
    walker.visit(schema, cx)
}

fn key(k: &str) -> PathSegment {
    PathSegment::Key(k.to_owned())
}

/// The JSON nesting depth of `v`, stopping once past the limit.
fn depth(v: &Value, d: usize) -> usize {
    if d > MAX_DEPTH {
        return d;
    }
    let children: Box<dyn Iterator<Item = &Value>> = match v {
        Value::Array(a) => Box::new(a.iter()),
        Value::Object(m) => Box::new(m.values()),
        _ => return d,
    };
    children.map(|c| depth(c, d + 1)).max().unwrap_or(d)
}

/// ajv's `normalizeId`: a trailing `#` or `#/` is dropped.
fn normalize_id(id: &str) -> &str {
    id.strip_suffix("#/")
        .or_else(|| id.strip_suffix('#'))
        .unwrap_or(id)
}

/// The keys under which ajv finds its draft-07 meta-schema.
fn is_meta_uri(s: &str) -> bool {
    matches!(
        normalize_id(s),
        "http://json-schema.org/draft-07/schema" | "http://json-schema.org/schema"
    )
}

/// JSON types as ajv names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    String,
    Number,
    Integer,
    Boolean,
    Null,
    Object,
    Array,
}

impl Ty {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "string" => Self::String,
            "number" => Self::Number,
            "integer" => Self::Integer,
            "boolean" => Self::Boolean,
            "null" => Self::Null,
            "object" => Self::Object,
            "array" => Self::Array,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Number => "number",
            Self::Integer => "integer",
            Self::Boolean => "boolean",
            Self::Null => "null",
            Self::Object => "object",
            Self::Array => "array",
        }
    }
}

fn join(ts: &[Ty]) -> String {
    ts.iter().map(|t| t.name()).collect::<Vec<_>>().join(",")
}

/// Every keyword ajv's draft-07 instance knows (`RULES.keywords`).
const KNOWN: &[&str] = &[
    "$async",
    "$schema",
    "$id",
    "$defs",
    "$vocabulary",
    "$comment",
    "definitions",
    "id",
    "$ref",
    "maximum",
    "minimum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "multipleOf",
    "maxLength",
    "minLength",
    "pattern",
    "maxProperties",
    "minProperties",
    "required",
    "maxItems",
    "minItems",
    "uniqueItems",
    "type",
    "nullable",
    "const",
    "enum",
    "not",
    "anyOf",
    "oneOf",
    "allOf",
    "if",
    "then",
    "else",
    "propertyNames",
    "additionalProperties",
    "dependencies",
    "properties",
    "patternProperties",
    "additionalItems",
    "items",
    "contains",
    "format",
    "title",
    "description",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "examples",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
];

/// The keywords that generate code (`RULES.all`), in ajv's order, with the
/// data types they apply to (empty: every type).
const RULES: &[(&str, &[Ty])] = &[
    ("$comment", &[]),
    ("id", &[]),
    ("$ref", &[]),
    ("maximum", &[Ty::Number]),
    ("minimum", &[Ty::Number]),
    ("exclusiveMaximum", &[Ty::Number]),
    ("exclusiveMinimum", &[Ty::Number]),
    ("multipleOf", &[Ty::Number]),
    ("maxLength", &[Ty::String]),
    ("minLength", &[Ty::String]),
    ("pattern", &[Ty::String]),
    ("maxProperties", &[Ty::Object]),
    ("minProperties", &[Ty::Object]),
    ("required", &[Ty::Object]),
    ("maxItems", &[Ty::Array]),
    ("minItems", &[Ty::Array]),
    ("uniqueItems", &[Ty::Array]),
    ("type", &[]),
    ("nullable", &[]),
    ("const", &[]),
    ("enum", &[]),
    ("not", &[]),
    ("anyOf", &[]),
    ("oneOf", &[]),
    ("allOf", &[]),
    ("if", &[]),
    ("then", &[]),
    ("else", &[]),
    ("propertyNames", &[Ty::Object]),
    ("additionalProperties", &[Ty::Object]),
    ("dependencies", &[Ty::Object]),
    ("properties", &[Ty::Object]),
    ("patternProperties", &[Ty::Object]),
    ("additionalItems", &[Ty::Array]),
    ("items", &[Ty::Array]),
    ("contains", &[Ty::Array]),
    ("format", &[Ty::Number, Ty::String]),
];

/// Names an ajv lookup in a plain JavaScript object finds on
/// `Object.prototype`: ajv takes them for known keywords and rules, and
/// `properties[name]` for defined.
const PROTOTYPE: &[&str] = &[
    "constructor",
    "__proto__",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "toLocaleString",
    "toString",
    "valueOf",
    "__defineGetter__",
    "__defineSetter__",
    "__lookupGetter__",
    "__lookupSetter__",
];

fn is_rule(k: &str) -> bool {
    RULES.iter().any(|(r, _)| *r == k) || PROTOTYPE.contains(&k)
}

fn has_rules(m: &Map<String, Value>) -> bool {
    m.keys().any(|k| is_rule(k))
}

/// The context of one subschema: where it is, ajv's schema path for
/// messages, the data types already known for its data, and the property
/// names defined so far at its data level (shared by in-place subschemas).
struct Cx {
    at: Vec<PathSegment>,
    err_path: String,
    data_types: Vec<Ty>,
    defined: Rc<RefCell<HashSet<String>>>,
    depth: usize,
}

impl Cx {
    fn err(&self, message: String) -> SchemaError {
        SchemaError {
            at: self.at.clone(),
            message,
            limit: false,
        }
    }

    fn err_at(&self, k: &str, message: String) -> SchemaError {
        let mut at = self.at.clone();
        at.push(key(k));
        SchemaError {
            at,
            message,
            limit: false,
        }
    }

    fn strict(&self, k: Option<&str>, message: &str) -> SchemaError {
        let message = format!("strict mode: {message}");
        match k {
            Some(k) => self.err_at(k, message),
            None => self.err(message),
        }
    }

    /// A subschema for the same data (`allOf`, `not`, `if`, …).
    fn in_place(&self, segs: &[PathSegment]) -> Self {
        let mut at = self.at.clone();
        at.extend_from_slice(segs);
        Self {
            err_path: extend_path(&self.err_path, segs),
            at,
            data_types: self.data_types.clone(),
            defined: Rc::clone(&self.defined),
            depth: self.depth + 1,
        }
    }

    /// A subschema for a part of the data (a property, an item, a key);
    /// as in ajv, the parent's defined names start afresh afterwards.
    fn for_data(&mut self, segs: &[PathSegment], data_types: Vec<Ty>) -> Self {
        let mut child = self.in_place(segs);
        child.data_types = data_types;
        child.defined = Rc::default();
        self.defined = Rc::default();
        child
    }
}

fn extend_path(base: &str, segs: &[PathSegment]) -> String {
    let mut s = base.to_owned();
    for seg in segs {
        s.push('/');
        match seg {
            PathSegment::Key(k) => s.push_str(&escape_fragment(k)),
            PathSegment::Index(i) => s.push_str(&i.to_string()),
        }
    }
    s
}

/// ajv's `escapeFragment`: a JSON pointer token, URI-component encoded.
fn escape_fragment(k: &str) -> String {
    let token = k.replace('~', "~0").replace('/', "~1");
    let mut out = String::new();
    for b in token.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

struct Walker<'r> {
    root: &'r Value,
    base: String,
    refs_done: HashSet<String>,
    /// What is left of [`MAX_MATCH_WORK`].
    match_budget: usize,
    /// What is left of [`MAX_ANCHOR_WORK`].
    anchor_budget: usize,
    /// Each anchor looked for, and where it was found.
    anchors: std::collections::HashMap<String, Option<Vec<PathSegment>>>,
}

type R = Result<(), SchemaError>;

impl Walker<'_> {
    /// ajv's `subschemaCode`: checks one (sub)schema and what it compiles.
    fn visit(&mut self, schema: &Value, mut cx: Cx) -> R {
        let Some(m) = schema.as_object() else {
            return Ok(());
        };
        if cx.depth > MAX_DEPTH {
            return Err(SchemaError {
                limit: true,
                ..cx.err(format!("schema nests deeper than {MAX_DEPTH} levels"))
            });
        }
        check_unknown(m, &cx)?;
        if !has_rules(m) {
            return Ok(());
        }
        let types = schema_types(m, &cx)?;
        let only_ref = m.contains_key("$ref") && !m.keys().any(|k| k != "$ref" && is_rule(k));
        if only_ref {
            return self.reference(m, &cx);
        }
        strict_types(m, &types, &self.base, &mut cx)?;
        self.untyped(m, &mut cx)?;
        if let Some(f) = m.get("format").and_then(Value::as_str) {
            return Err(cx.err_at(
                "format",
                format!(
                    "unknown format \"{f}\" ignored in schema at path \"{}\"",
                    cx.err_path
                ),
            ));
        }
        if let Some(p) = m.get("pattern").and_then(Value::as_str) {
            compile_pattern(p, true).map_err(|(e, limit)| SchemaError {
                limit,
                ..cx.err_at("pattern", e)
            })?;
        }
        self.array(m, &mut cx)?;
        self.object(m, &mut cx)
    }

    /// ajv's `alwaysValidSchema`: unknown keywords are checked even when
    /// the subschema is then skipped.
    fn always_valid(
        &self,
        schema: &Value,
        cx: &Cx,
        segs: &[PathSegment],
    ) -> Result<bool, SchemaError> {
        match schema {
            Value::Bool(b) => Ok(*b),
            Value::Object(m) if m.is_empty() => Ok(true),
            Value::Object(m) => {
                check_unknown(m, &cx.in_place(segs))?;
                Ok(!has_rules(m))
            }
            _ => Ok(false),
        }
    }

    /// The keywords of the untyped group, in ajv's order.
    fn untyped(&mut self, m: &Map<String, Value>, cx: &mut Cx) -> R {
        if m.contains_key("id") {
            return Err(cx.err_at(
                "id",
                "NOT SUPPORTED: keyword \"id\", use \"$id\" for schema ID".into(),
            ));
        }
        if m.contains_key("$ref") {
            self.reference(m, cx)?;
        }
        if let Some(n) = m.get("nullable")
            && !n.is_boolean()
        {
            return Err(cx.err_at("nullable", "nullable value must be [\"boolean\"]".into()));
        }
        if let Some(s) = m.get("not")
            && !self.always_valid(s, cx, &[key("not")])?
        {
            self.visit(s, cx.in_place(&[key("not")]))?;
        }
        if let Some(Value::Array(branches)) = m.get("anyOf") {
            let mut any_valid = false;
            for (i, b) in branches.iter().enumerate() {
                if self.always_valid(b, cx, &[key("anyOf"), PathSegment::Index(i)])? {
                    any_valid = true;
                    break;
                }
            }
            if !any_valid {
                for (i, b) in branches.iter().enumerate() {
                    self.visit(b, cx.in_place(&[key("anyOf"), PathSegment::Index(i)]))?;
                }
            }
        }
        for kw in ["oneOf", "allOf"] {
            if let Some(Value::Array(branches)) = m.get(kw) {
                for (i, b) in branches.iter().enumerate() {
                    let segs = [key(kw), PathSegment::Index(i)];
                    if !self.always_valid(b, cx, &segs)? {
                        self.visit(b, cx.in_place(&segs))?;
                    }
                }
            }
        }
        if let Some(cond) = m.get("if") {
            if !m.contains_key("then") && !m.contains_key("else") {
                return Err(cx.strict(
                    Some("if"),
                    "\"if\" without \"then\" and \"else\" is ignored",
                ));
            }
            let mut branches = Vec::new();
            for kw in ["then", "else"] {
                if let Some(s) = m.get(kw)
                    && !self.always_valid(s, cx, &[key(kw)])?
                {
                    branches.push((kw, s));
                }
            }
            if !branches.is_empty() {
                self.visit(cond, cx.in_place(&[key("if")]))?;
                for (kw, s) in branches {
                    self.visit(s, cx.in_place(&[key(kw)]))?;
                }
            }
        }
        for kw in ["then", "else"] {
            if m.contains_key(kw) && !m.contains_key("if") {
                return Err(cx.strict(Some(kw), &format!("\"{kw}\" without \"if\" is ignored")));
            }
        }
        Ok(())
    }

    /// The array group: `additionalItems`, `items`, `contains`.
    fn array(&mut self, m: &Map<String, Value>, cx: &mut Cx) -> R {
        let items = m.get("items");
        if let Some(extra) = m.get("additionalItems") {
            let Some(Value::Array(_)) = items else {
                return Err(cx.strict(
                    Some("additionalItems"),
                    "\"additionalItems\" is ignored when \"items\" is not an array of schemas",
                ));
            };
            if extra.is_object() && !self.always_valid(extra, cx, &[key("additionalItems")])? {
                let child = cx.for_data(&[key("additionalItems")], Vec::new());
                self.visit(extra, child)?;
            }
        }
        match items {
            Some(Value::Array(tuple)) => {
                let l = tuple.len();
                let num = |k: &str| m.get(k).and_then(Value::as_f64);
                #[allow(clippy::cast_precision_loss, reason = "a tuple's length is small")]
                let lf = l as f64;
                let full = num("minItems") == Some(lf)
                    && (num("maxItems") == Some(lf)
                        || m.get("additionalItems") == Some(&Value::Bool(false)));
                if !full {
                    return Err(cx.strict(
                        Some("items"),
                        &format!(
                            "\"items\" is {l}-tuple, but minItems or maxItems/additionalItems are not specified or different at path \"{}\"",
                            cx.err_path
                        ),
                    ));
                }
                for (i, s) in tuple.iter().enumerate() {
                    let segs = [key("items"), PathSegment::Index(i)];
                    if !self.always_valid(s, cx, &segs)? {
                        let child = cx.for_data(&segs, Vec::new());
                        self.visit(s, child)?;
                    }
                }
            }
            Some(s) => self.data_child(s, cx, "items", Vec::new())?,
            None => {}
        }
        if let Some(s) = m.get("contains") {
            self.data_child(s, cx, "contains", Vec::new())?;
        }
        Ok(())
    }

    /// A subschema under `kw` for a part of the data, unless always valid.
    fn data_child(&mut self, s: &Value, cx: &mut Cx, kw: &str, types: Vec<Ty>) -> R {
        if self.always_valid(s, cx, &[key(kw)])? {
            return Ok(());
        }
        let child = cx.for_data(&[key(kw)], types);
        self.visit(s, child)
    }

    /// The object group, in ajv's order.
    fn object(&mut self, m: &Map<String, Value>, cx: &mut Cx) -> R {
        let props = m.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(required)) = m.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                let in_props =
                    props.is_some_and(|p| p.contains_key(name) || PROTOTYPE.contains(&name));
                if !in_props && !cx.defined.borrow().contains(name) {
                    return Err(cx.strict(
                        Some("required"),
                        &format!(
                            "required property \"{name}\" is not defined at \"{}{}\" (strictRequired)",
                            self.base, cx.err_path
                        ),
                    ));
                }
            }
        }
        if let Some(s) = m.get("propertyNames") {
            self.data_child(s, cx, "propertyNames", vec![Ty::String])?;
        }
        if let Some(s) = m.get("additionalProperties")
            && s.is_object()
        {
            self.data_child(s, cx, "additionalProperties", Vec::new())?;
        }
        if let Some(Value::Object(deps)) = m.get("dependencies") {
            for (name, dep) in deps {
                let segs = [key("dependencies"), key(name)];
                if !dep.is_array() && !self.always_valid(dep, cx, &segs)? {
                    self.visit(dep, cx.in_place(&segs))?;
                }
            }
        }
        if let Some(props) = props {
            cx.defined.borrow_mut().extend(props.keys().cloned());
            for (name, s) in props {
                let segs = [key("properties"), key(name)];
                if !self.always_valid(s, cx, &segs)? {
                    let child = cx.for_data(&segs, Vec::new());
                    self.visit(s, child)?;
                    cx.defined.borrow_mut().insert(name.clone());
                }
            }
        }
        if let Some(Value::Object(patterns)) = m.get("patternProperties") {
            self.pattern_properties(patterns, props, cx)?;
        }
        Ok(())
    }

    fn pattern_properties(
        &mut self,
        patterns: &Map<String, Value>,
        props: Option<&Map<String, Value>>,
        cx: &mut Cx,
    ) -> R {
        let mut valid = Vec::new();
        for (pat, s) in patterns {
            valid.push(self.always_valid(s, cx, &[key("patternProperties"), key(pat)])?);
        }
        if valid.iter().all(|v| *v) {
            return Ok(());
        }
        for ((pat, s), always) in patterns.iter().zip(valid) {
            let at = |cx: &Cx, e: String, limit: bool| SchemaError {
                at: [cx.at.clone(), vec![key("patternProperties"), key(pat)]].concat(),
                message: e,
                limit,
            };
            if let Some(props) = props.filter(|p| !p.is_empty())
                && compile_pattern(pat, false).is_ok()
            {
                let re = linear_matcher(pat).map_err(|e| at(cx, e, true))?;
                for name in props.keys() {
                    let work = (pat.len() + 1).saturating_mul(name.len() + 1);
                    let Some(left) = self.match_budget.checked_sub(work) else {
                        return Err(at(
                            cx,
                            format!(
                                "matching patternProperties against properties exceeds palisade's limit ({MAX_MATCH_WORK})"
                            ),
                            true,
                        ));
                    };
                    self.match_budget = left;
                    if re.is_match(name) {
                        return Err(at(
                            cx,
                            format!(
                                "strict mode: property {name} matches pattern {pat} (use allowMatchingProperties)"
                            ),
                            false,
                        ));
                    }
                }
            }
            compile_pattern(pat, true).map_err(|(e, limit)| at(cx, e, limit))?;
            if !always {
                let child = cx.for_data(&[key("patternProperties"), key(pat)], Vec::new());
                self.visit(s, child)?;
            }
        }
        Ok(())
    }

    /// `$ref`: resolved within the root and walked once, with no known
    /// data types (ajv's `inlineRefSchema` / a separate compile).
    fn reference(&mut self, m: &Map<String, Value>, cx: &Cx) -> R {
        let Some(r) = m.get("$ref").and_then(Value::as_str) else {
            return Ok(());
        };
        let missing = || {
            let from = if self.base.is_empty() {
                "#"
            } else {
                self.base.as_str()
            };
            cx.err_at(
                "$ref",
                format!("can't resolve reference {r} from id {from}"),
            )
        };
        let (uri, fragment) = r.split_once('#').unwrap_or((r, ""));
        if !uri.is_empty() && uri != self.base {
            return if is_meta_uri(uri) {
                Ok(())
            } else {
                Err(missing())
            };
        }
        if fragment.is_empty() || fragment == "/" {
            return Ok(());
        }
        let found = if let Some(ptr) = fragment.strip_prefix('/') {
            resolve_pointer(self.root, ptr)
        } else {
            let anchor = format!("#{fragment}");
            let path = match self.anchors.get(&anchor) {
                Some(path) => path.clone(),
                None => {
                    let path = find_anchor(self.root, &anchor, 0, &mut self.anchor_budget)
                        .ok_or_else(|| SchemaError {
                            limit: true,
                            ..cx.err_at(
                                "$ref",
                                format!(
                                    "resolving $ref {r} exceeds palisade's limit of {MAX_ANCHOR_WORK} nodes searched for anchors"
                                ),
                            )
                        })?
                        .map(|(_, at)| at);
                    self.anchors.insert(anchor, path.clone());
                    path
                }
            };
            path.and_then(|at| Some((value_at(self.root, &at)?, at)))
        };
        let Some((target, at)) = found else {
            return Err(missing());
        };
        if !self.refs_done.insert(meta::pointer(&at)) {
            return Ok(());
        }
        let child = Cx {
            at,
            err_path: if uri.is_empty() {
                r.to_owned()
            } else {
                format!("#{fragment}")
            },
            data_types: Vec::new(),
            defined: Rc::clone(&cx.defined),
            depth: cx.depth + 1,
        };
        self.visit(target, child)
    }
}

/// ajv's `checkUnknownRules` (strictSchema).
fn check_unknown(m: &Map<String, Value>, cx: &Cx) -> R {
    for k in m.keys() {
        if !KNOWN.contains(&k.as_str()) && !PROTOTYPE.contains(&k.as_str()) {
            return Err(cx.strict(Some(k), &format!("unknown keyword: \"{k}\"")));
        }
    }
    Ok(())
}

/// ajv's `getSchemaTypes`: `type` plus `nullable`.
fn schema_types(m: &Map<String, Value>, cx: &Cx) -> Result<Vec<Ty>, SchemaError> {
    let mut types: Vec<Ty> = match m.get("type") {
        Some(Value::String(s)) => Ty::parse(s).into_iter().collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|t| t.as_str().and_then(Ty::parse))
            .collect(),
        _ => Vec::new(),
    };
    let nullable = m.get("nullable");
    if types.contains(&Ty::Null) {
        if nullable == Some(&Value::Bool(false)) {
            return Err(cx.err_at("nullable", "type: null contradicts nullable: false".into()));
        }
    } else {
        if types.is_empty() && nullable.is_some() {
            return Err(cx.err_at(
                "nullable",
                "\"nullable\" cannot be used without \"type\"".into(),
            ));
        }
        if nullable == Some(&Value::Bool(true)) {
            types.push(Ty::Null);
        }
    }
    Ok(types)
}

/// ajv's `checkStrictTypes`: the context's types, union types and each
/// keyword's applicable types. Its messages name the schema path after the
/// root's `$id` (ajv's `baseId + errSchemaPath`).
fn strict_types(m: &Map<String, Value>, types: &[Ty], base: &str, cx: &mut Cx) -> R {
    let error = |cx: &Cx, k: Option<&str>, msg: String| {
        cx.strict(
            k,
            &format!("{msg} at \"{base}{}\" (strictTypes)", cx.err_path),
        )
    };
    if !types.is_empty() {
        if cx.data_types.is_empty() {
            cx.data_types = types.to_vec();
        } else {
            for t in types {
                if !includes(&cx.data_types, *t) {
                    return Err(error(
                        cx,
                        Some("type"),
                        format!(
                            "type \"{}\" not allowed by context \"{}\"",
                            t.name(),
                            join(&cx.data_types)
                        ),
                    ));
                }
            }
            cx.data_types = cx
                .data_types
                .iter()
                .filter_map(|t| {
                    if includes(types, *t) {
                        Some(*t)
                    } else if types.contains(&Ty::Integer) && *t == Ty::Number {
                        Some(Ty::Integer)
                    } else {
                        None
                    }
                })
                .collect();
        }
    }
    if types.len() > 1 && !(types.len() == 2 && types.contains(&Ty::Null)) {
        return Err(error(
            cx,
            Some("type"),
            "use allowUnionTypes to allow union type keyword".into(),
        ));
    }
    for (kw, applies) in RULES {
        if applies.is_empty() || !m.contains_key(*kw) {
            continue;
        }
        let ok = applies.iter().any(|t| {
            cx.data_types.contains(t) || (*t == Ty::Number && cx.data_types.contains(&Ty::Integer))
        });
        if !ok {
            return Err(error(
                cx,
                Some(kw),
                format!("missing type \"{}\" for keyword \"{kw}\"", join(applies)),
            ));
        }
    }
    Ok(())
}

fn includes(ts: &[Ty], t: Ty) -> bool {
    ts.contains(&t) || (t == Ty::Integer && ts.contains(&Ty::Number))
}

/// `new RegExp(pattern, unicode ? "u" : "")`, with V8's message shape;
/// the error's flag is `true` for palisade's length limit.
fn compile_pattern(pattern: &str, unicode: bool) -> Result<regress::Regex, (String, bool)> {
    let flags = if unicode { "u" } else { "" };
    if pattern.len() > MAX_PATTERN_LEN {
        return Err((
            format!(
                "Invalid regular expression: pattern is longer than {MAX_PATTERN_LEN} bytes (palisade's limit)"
            ),
            true,
        ));
    }
    regress::Regex::with_flags(pattern, flags).map_err(|e| {
        (
            format!("Invalid regular expression: /{pattern}/{flags}: {e}"),
            false,
        )
    })
}

/// `pattern` (valid JavaScript, without the `u` flag) for matching
/// property names in linear time: by the `regex` crate, whose finite
/// automata cannot backtrack, unlike regress, whose engines (the PikeVM
/// too) take exponential time on `^(a+)+$`. The two dialects agree on the
/// patterns schemas use (anchors, classes, quantifiers, groups, `\d`,
/// `\w`); a JavaScript-only construct (a lookaround, a backreference, `[^]`)
/// is refused as palisade's limit rather than matched without a bound.
/// They differ on names outside ASCII and on line breaks: `regex`'s `\d`,
/// `\w` and `\b` are Unicode-aware (JavaScript's, without `u`, ASCII),
/// and its `.` takes `\r`, U+2028 and U+2029 (JavaScript's does not).
fn linear_matcher(pattern: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .unicode(true)
        .size_limit(1 << 22)
        .dfa_size_limit(1 << 22)
        .nest_limit(u32::try_from(MAX_DEPTH).unwrap_or(u32::MAX))
        .build()
        .map_err(|_| {
            format!(
                "patternProperties pattern {pattern} cannot be matched in bounded time by palisade (a lookaround, backreference or other JavaScript-only form next to defined properties; palisade's limit)"
            )
        })
}

/// A JSON pointer (URI-fragment encoded) within `root`.
fn resolve_pointer<'v>(root: &'v Value, ptr: &str) -> Option<(&'v Value, Vec<PathSegment>)> {
    let mut cur = root;
    let mut at = Vec::new();
    for raw in ptr.split('/') {
        let tok = percent_decode(raw)?.replace("~1", "/").replace("~0", "~");
        cur = match cur {
            Value::Object(m) => {
                let next = m.get(&tok)?;
                at.push(PathSegment::Key(tok));
                next
            }
            Value::Array(a) => {
                let i: usize = tok.parse().ok()?;
                at.push(PathSegment::Index(i));
                a.get(i)?
            }
            _ => return None,
        };
    }
    Some((cur, at))
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The value at `at` within `root`.
fn value_at<'v>(root: &'v Value, at: &[PathSegment]) -> Option<&'v Value> {
    at.iter().try_fold(root, |v, seg| match (v, seg) {
        (Value::Object(m), PathSegment::Key(k)) => m.get(k),
        (Value::Array(a), PathSegment::Index(i)) => a.get(*i),
        _ => None,
    })
}

/// An anchor's subschema and its location, if there is one.
type Found<'v> = Option<(&'v Value, Vec<PathSegment>)>;

/// Where the subschema whose `$id` is `anchor` (`#name`) is, depth-first:
/// `Some(None)` when there is none, `None` once `budget` nodes are spent.
fn find_anchor<'v>(v: &'v Value, anchor: &str, d: usize, budget: &mut usize) -> Option<Found<'v>> {
    *budget = budget.checked_sub(1)?;
    if d > MAX_DEPTH {
        return Some(None);
    }
    let prefix = |found: Found<'v>, seg: PathSegment| {
        found.map(|(t, mut at)| {
            at.insert(0, seg);
            (t, at)
        })
    };
    match v {
        Value::Object(m) => {
            if m.get("$id").and_then(Value::as_str) == Some(anchor) {
                return Some(Some((v, Vec::new())));
            }
            for (k, c) in m {
                if let Some(hit) = find_anchor(c, anchor, d + 1, budget)? {
                    return Some(prefix(Some(hit), key(k)));
                }
            }
            Some(None)
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                if let Some(hit) = find_anchor(c, anchor, d + 1, budget)? {
                    return Some(prefix(Some(hit), PathSegment::Index(i)));
                }
            }
            Some(None)
        }
        _ => Some(None),
    }
}

#[cfg(test)]
mod tests;
