//! The draft-07 meta-schema check that ajv 8 runs before it compiles a
//! schema (`validateSchema`), reimplemented for the meta-schema's fixed
//! shape, with ajv's error wording and order (every error, as with
//! `allErrors: true`, in the meta-schema's keyword order).

#![allow(
    clippy::ptr_arg,
    reason = "every checker has the table's signature, fn(&Value, &mut Vec<PathSegment>, &mut MetaErrors), and some push onto the path"
)]

use serde_json::{Map, Value};

use crate::diagnostic::PathSegment;

/// At most this many meta-schema errors are kept; the rest are counted.
pub(super) const MAX_META_ERRORS: usize = 32;

/// Meta-schema errors: each the location in the schema and ajv's message.
#[derive(Default)]
pub(super) struct MetaErrors {
    pub(super) errors: Vec<(Vec<PathSegment>, String)>,
    pub(super) more: usize,
}

impl MetaErrors {
    fn push(&mut self, at: &[PathSegment], message: &str) {
        if self.errors.len() < MAX_META_ERRORS {
            self.errors.push((at.to_vec(), message.to_owned()));
        } else {
            self.more += 1;
        }
    }

    /// ajv's `errorsText`: `data/<pointer> <message>`, joined by `, `.
    pub(super) fn text(&self) -> String {
        let mut parts: Vec<String> = self
            .errors
            .iter()
            .map(|(at, m)| format!("data{} {m}", pointer(at)))
            .collect();
        if self.more > 0 {
            parts.push(format!("and {} more", self.more));
        }
        parts.join(", ")
    }
}

/// A JSON pointer (`/a/0/b~1c`) for a location.
pub(super) fn pointer(at: &[PathSegment]) -> String {
    let mut s = String::new();
    for seg in at {
        s.push('/');
        match seg {
            PathSegment::Key(k) => s.push_str(&k.replace('~', "~0").replace('/', "~1")),
            PathSegment::Index(i) => s.push_str(&i.to_string()),
        }
    }
    s
}

/// JavaScript's notion of an integer: a number without a fraction.
pub(super) fn is_integer(v: &Value) -> bool {
    v.as_i64().is_some() || v.as_u64().is_some() || v.as_f64().is_some_and(|f| f.fract() == 0.0)
}

const SIMPLE_TYPES: &[&str] = &[
    "array", "boolean", "integer", "null", "number", "object", "string",
];

/// Validates `v` against the draft-07 meta-schema (`#`).
pub(super) fn schema(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    let Some(m) = v.as_object() else {
        if !v.is_boolean() {
            out.push(at, "must be object,boolean");
        }
        return;
    };
    for &(key, check) in KEYWORDS {
        if let Some(value) = m.get(key) {
            at.push(PathSegment::Key(key.to_owned()));
            check(value, at, out);
            at.pop();
        }
    }
}

type Check = fn(&Value, &mut Vec<PathSegment>, &mut MetaErrors);

/// The meta-schema's `properties`, in its order.
const KEYWORDS: &[(&str, Check)] = &[
    ("$id", string),
    ("$schema", string),
    ("$ref", string),
    ("$comment", string),
    ("title", string),
    ("description", string),
    ("readOnly", boolean),
    ("examples", array),
    ("multipleOf", multiple_of),
    ("maximum", number),
    ("exclusiveMaximum", number),
    ("minimum", number),
    ("exclusiveMinimum", number),
    ("maxLength", non_negative_integer),
    ("minLength", non_negative_integer),
    ("pattern", string),
    ("additionalItems", schema),
    ("items", items),
    ("maxItems", non_negative_integer),
    ("minItems", non_negative_integer),
    ("uniqueItems", boolean),
    ("contains", schema),
    ("maxProperties", non_negative_integer),
    ("minProperties", non_negative_integer),
    ("required", string_array),
    ("additionalProperties", schema),
    ("definitions", schema_map),
    ("properties", schema_map),
    ("patternProperties", schema_map),
    ("dependencies", dependencies),
    ("propertyNames", schema),
    ("enum", enum_),
    ("type", type_),
    ("format", string),
    ("contentMediaType", string),
    ("contentEncoding", string),
    ("if", schema),
    ("then", schema),
    ("else", schema),
    ("allOf", schema_array),
    ("anyOf", schema_array),
    ("oneOf", schema_array),
    ("not", schema),
];

fn string(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    if !v.is_string() {
        out.push(at, "must be string");
    }
}

fn boolean(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    if !v.is_boolean() {
        out.push(at, "must be boolean");
    }
}

fn array(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    if !v.is_array() {
        out.push(at, "must be array");
    }
}

fn number(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    if !v.is_number() {
        out.push(at, "must be number");
    }
}

fn multiple_of(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    match v.as_f64() {
        None => out.push(at, "must be number"),
        Some(f) if f <= 0.0 => out.push(at, "must be > 0"),
        Some(_) => {}
    }
}

fn non_negative_integer(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    if !v.is_number() {
        out.push(at, "must be integer");
        return;
    }
    if !is_integer(v) {
        out.push(at, "must be integer");
    }
    if v.as_f64().is_some_and(|f| f < 0.0) {
        out.push(at, "must be >= 0");
    }
}

/// ajv's `uniqueItems` for items of one scalar type: scanning from the
/// end, the first value seen again at a later index `j`; `## j and i`.
fn unique_typed(items: &[Value], at: &[PathSegment], out: &mut MetaErrors) {
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, item) in items.iter().enumerate().rev() {
        let Some(s) = item.as_str() else { continue };
        if let Some(j) = seen.insert(s, i) {
            out.push(
                at,
                &format!("must NOT have duplicate items (items ## {j} and {i} are identical)"),
            );
            return;
        }
    }
}

/// ajv's `uniqueItems` by deep equality: the last `i` with an equal
/// earlier `j` (the nearest); `## j and i`. ajv compares every pair; this
/// hashes each item's canonical form ([`canonical`], equal exactly when
/// [`json_equal`]) once, so an `enum` of many values stays linear.
fn unique_deep(items: &[Value], at: &[PathSegment], out: &mut MetaErrors) {
    let mut last: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut found = None;
    for (i, item) in items.iter().enumerate() {
        let mut key = String::new();
        canonical(item, &mut key);
        if let Some(j) = last.insert(key, i) {
            found = Some((j, i));
        }
    }
    if let Some((j, i)) = found {
        out.push(
            at,
            &format!("must NOT have duplicate items (items ## {j} and {i} are identical)"),
        );
    }
}

/// A text of `v` that two values share exactly when [`json_equal`]:
/// numbers by value (`1` is `1.0`, `-0` is `0`), object keys sorted. The
/// recursion is bounded by the schema's depth, checked before.
pub(super) fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            let f = if f == 0.0 { 0.0 } else { f };
            out.push_str(&format!("n{f:?}"));
        }
        Value::String(s) => {
            out.push('s');
            out.push_str(&Value::String(s.clone()).to_string());
        }
        Value::Array(a) => {
            out.push('[');
            for item in a {
                canonical(item, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for k in keys {
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(item) = m.get(k) {
                    canonical(item, out);
                }
                out.push(',');
            }
            out.push('}');
        }
        Value::Bool(b) => out.push_str(if *b { "t" } else { "f" }),
        Value::Null => out.push('z'),
    }
}

/// Deep equality as `fast-deep-equal` sees JSON (the specification of
/// [`canonical`], kept for its test): numbers by value, objects
/// regardless of key order.
#[cfg(test)]
pub(super) fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

fn string_array(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    let Some(items) = v.as_array() else {
        out.push(at, "must be array");
        return;
    };
    for (i, item) in items.iter().enumerate() {
        if !item.is_string() {
            at.push(PathSegment::Index(i));
            out.push(at, "must be string");
            at.pop();
        }
    }
    unique_typed(items, at, out);
}

fn schema_array(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    let Some(items) = v.as_array() else {
        out.push(at, "must be array");
        return;
    };
    if items.is_empty() {
        out.push(at, "must NOT have fewer than 1 items");
    }
    for (i, item) in items.iter().enumerate() {
        at.push(PathSegment::Index(i));
        schema(item, at, out);
        at.pop();
    }
}

fn schema_map(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    let Some(m) = v.as_object() else {
        out.push(at, "must be object");
        return;
    };
    each(m, at, out, schema);
}

fn each(m: &Map<String, Value>, at: &mut Vec<PathSegment>, out: &mut MetaErrors, f: Check) {
    for (k, value) in m {
        at.push(PathSegment::Key(k.clone()));
        f(value, at, out);
        at.pop();
    }
}

/// `anyOf` over two checks: every branch's errors, then ajv's own, unless
/// a branch passes.
fn any_of(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors, branches: &[Check]) {
    let mut collected = MetaErrors::default();
    for branch in branches {
        let mut one = MetaErrors::default();
        branch(v, at, &mut one);
        if one.errors.is_empty() && one.more == 0 {
            return;
        }
        for (p, m) in one.errors {
            collected.push(&p, &m);
        }
        collected.more += one.more;
    }
    for (p, m) in collected.errors {
        out.push(&p, &m);
    }
    out.more += collected.more;
    out.push(at, "must match a schema in anyOf");
}

fn items(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    any_of(v, at, out, &[schema, schema_array]);
}

fn dependencies(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    let Some(m) = v.as_object() else {
        out.push(at, "must be object");
        return;
    };
    each(m, at, out, |v, at, out| {
        any_of(v, at, out, &[schema, string_array])
    });
}

fn enum_(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    let Some(items) = v.as_array() else {
        out.push(at, "must be array");
        return;
    };
    if items.is_empty() {
        out.push(at, "must NOT have fewer than 1 items");
    }
    unique_deep(items, at, out);
}

fn simple_type(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    if !v.as_str().is_some_and(|s| SIMPLE_TYPES.contains(&s)) {
        out.push(at, "must be equal to one of the allowed values");
    }
}

fn simple_type_array(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    let Some(items) = v.as_array() else {
        out.push(at, "must be array");
        return;
    };
    if items.is_empty() {
        out.push(at, "must NOT have fewer than 1 items");
    }
    for (i, item) in items.iter().enumerate() {
        at.push(PathSegment::Index(i));
        simple_type(item, at, out);
        at.pop();
    }
    unique_deep(items, at, out);
}

fn type_(v: &Value, at: &mut Vec<PathSegment>, out: &mut MetaErrors) {
    any_of(v, at, out, &[simple_type, simple_type_array]);
}
