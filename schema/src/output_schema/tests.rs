//! Unit tests of the strict compile: each rule refused, with the nearest
//! strict-valid schema accepted beside it.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use serde_json::json;

use super::{SchemaError, check};
use crate::diagnostic::PathSegment;

fn refused(v: serde_json::Value) -> SchemaError {
    check(&v).expect_err("refused")
}

fn accepted(v: serde_json::Value) {
    assert_eq!(check(&v), Ok(()), "{v}");
}

fn k(s: &str) -> PathSegment {
    PathSegment::Key(s.into())
}

#[test]
fn unknown_keyword() {
    let e = refused(json!({"type": "object", "x_unknown": true}));
    assert_eq!(e.message, "strict mode: unknown keyword: \"x_unknown\"");
    assert_eq!(e.at, vec![k("x_unknown")]);
    accepted(json!({"type": "object", "properties": {"x_unknown": true}}));
    accepted(
        json!({"type": "object", "title": "t", "description": "d", "examples": [], "default": {}}),
    );
}

#[test]
fn unknown_keyword_in_a_skipped_subschema() {
    let e = refused(json!({"type": "object", "properties": {"a": {"x": 1}}}));
    assert_eq!(e.at, vec![k("properties"), k("a"), k("x")]);
    accepted(json!({"type": "object", "properties": {"a": {"title": "x"}}}));
    // Never compiled: ajv does not look.
    accepted(json!({"type": "object", "definitions": {"a": {"x": 1}}}));
}

#[test]
fn keyword_without_its_type() {
    let e = refused(json!({"properties": {"kind": {"enum": ["a"]}}, "required": ["kind"]}));
    assert_eq!(
        e.message,
        "strict mode: missing type \"object\" for keyword \"required\" at \"#\" (strictTypes)"
    );
    accepted(
        json!({"type": "object", "properties": {"kind": {"enum": ["a"]}}, "required": ["kind"]}),
    );
    let e = refused(json!({"type": "object", "properties": {"n": {"minimum": 1}}}));
    assert_eq!(
        e.message,
        "strict mode: missing type \"number\" for keyword \"minimum\" at \"#/properties/n\" (strictTypes)"
    );
    accepted(json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}));
    accepted(json!({"type": "object", "properties": {"kind": {"const": "a"}}}));
}

#[test]
fn types_narrow_through_in_place_subschemas() {
    accepted(json!({"type": "string", "allOf": [{"minLength": 1}]}));
    accepted(json!({"type": "number", "allOf": [{"type": "integer"}]}));
    let e = refused(json!({"type": "integer", "allOf": [{"type": "number"}]}));
    assert_eq!(
        e.message,
        "strict mode: type \"number\" not allowed by context \"integer\" at \"#/allOf/0\" (strictTypes)"
    );
    refused(json!({"type": "object", "properties": {"a": {"not": {"minLength": 1}}}}));
    accepted(
        json!({"type": "object", "properties": {"a": {"type": "string", "not": {"minLength": 1}}}}),
    );
    // propertyNames' data are strings.
    accepted(json!({"type": "object", "propertyNames": {"pattern": "^a"}}));
}

#[test]
fn union_types() {
    let e = refused(json!({"type": ["string", "number"]}));
    assert_eq!(
        e.message,
        "strict mode: use allowUnionTypes to allow union type keyword at \"#\" (strictTypes)"
    );
    accepted(json!({"type": ["string", "null"]}));
    accepted(json!({"type": "string", "nullable": true}));
}

#[test]
fn nullable_rules() {
    refused(json!({"nullable": true}));
    refused(json!({"type": "null", "nullable": false}));
    refused(json!({"type": "string", "nullable": "x"}));
    accepted(json!({"type": "string", "nullable": false}));
}

#[test]
fn tuples() {
    let e = refused(json!({"type": "array", "items": [{"type": "string"}]}));
    assert_eq!(
        e.message,
        "strict mode: \"items\" is 1-tuple, but minItems or maxItems/additionalItems are not specified or different at path \"#\""
    );
    accepted(json!({"type": "array", "items": [{"type": "string"}], "minItems": 1, "maxItems": 1}));
    accepted(
        json!({"type": "array", "items": [{"type": "string"}], "minItems": 1, "additionalItems": false}),
    );
    refused(json!({"type": "array", "items": [{"type": "string"}], "minItems": 1, "maxItems": 2}));
    let e = refused(json!({"type": "array", "additionalItems": false}));
    assert!(
        e.message.contains("\"additionalItems\" is ignored"),
        "{}",
        e.message
    );
    accepted(json!({"type": "array", "items": {"type": "string"}}));
}

#[test]
fn required_names_a_defined_property() {
    let e = refused(json!({"type": "object", "properties": {"a": {}}, "required": ["b"]}));
    assert_eq!(
        e.message,
        "strict mode: required property \"b\" is not defined at \"#\" (strictRequired)"
    );
    accepted(json!({"type": "object", "properties": {"a": {}, "b": {}}, "required": ["b"]}));
    // A property defined by an earlier in-place subschema counts, as in ajv.
    accepted(json!({"type": "object", "allOf": [{"properties": {"a": {}}}, {"required": ["a"]}]}));
    refused(json!({"type": "object", "allOf": [{"required": ["a"]}, {"properties": {"a": {}}}]}));
}

#[test]
fn every_format_is_unknown() {
    let e = refused(
        json!({"type": "object", "properties": {"kind": {"type": "string", "format": "email"}}}),
    );
    assert_eq!(
        e.message,
        "unknown format \"email\" ignored in schema at path \"#/properties/kind\""
    );
    assert_eq!(e.at, vec![k("properties"), k("kind"), k("format")]);
    accepted(
        json!({"type": "object", "properties": {"kind": {"type": "string", "pattern": "^.+@.+$"}}}),
    );
}

#[test]
fn meta_schema_uri() {
    let e = refused(
        json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}),
    );
    assert_eq!(
        e.message,
        "no schema with key or ref \"https://json-schema.org/draft/2020-12/schema\""
    );
    accepted(json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}));
    accepted(json!({"$schema": "http://json-schema.org/draft-07/schema", "type": "object"}));
    refused(json!({"$schema": 7}));
}

#[test]
fn meta_schema_value_types() {
    let e = refused(json!({"type": "objekt"}));
    assert_eq!(
        e.message,
        "schema is invalid: data/type must be equal to one of the allowed values, data/type must be array, data/type must match a schema in anyOf"
    );
    assert_eq!(e.at, vec![k("type")]);
    let e = refused(json!({"type": "object", "properties": {"a": {"minLength": -1.5}}}));
    assert_eq!(
        e.message,
        "schema is invalid: data/properties/a/minLength must be integer, data/properties/a/minLength must be >= 0"
    );
    let e = refused(json!({"type": "object", "required": ["a", "a"], "properties": {"a": {}}}));
    assert!(
        e.message.ends_with("(items ## 1 and 0 are identical)"),
        "{}",
        e.message
    );
    refused(json!({"enum": []}));
    refused(json!({"type": "object", "properties": {"a": 5}}));
    accepted(json!({"type": "object", "properties": {"a": {"type": "string", "minLength": 0}}}));
}

#[test]
fn regular_expressions() {
    let e = refused(json!({"type": "string", "pattern": "("}));
    assert!(
        e.message.starts_with("Invalid regular expression: /(/u: "),
        "{}",
        e.message
    );
    assert_eq!(e.at, vec![k("pattern")]);
    // The u flag: an identity escape of a non-syntax character is an error.
    refused(json!({"type": "string", "pattern": "\\-"}));
    accepted(json!({"type": "string", "pattern": "^[a-z\\-]+$"}));
    accepted(json!({"type": "string", "pattern": "(?<=a)b\\p{L}"}));
    let e = refused(json!({"type": "object", "patternProperties": {"[a-": {"type": "string"}}}));
    assert_eq!(e.at, vec![k("patternProperties"), k("[a-")]);
    // All pattern schemas always valid: ajv compiles no pattern.
    accepted(json!({"type": "object", "patternProperties": {"(": {}}}));
    accepted(json!({"type": "object", "patternProperties": {"^x-": {"type": "string"}}}));
}

#[test]
fn a_property_matched_by_a_pattern() {
    let e = refused(
        json!({"type": "object", "properties": {"ab": {}}, "patternProperties": {"^a": {"type": "string"}}}),
    );
    assert_eq!(
        e.message,
        "strict mode: property ab matches pattern ^a (use allowMatchingProperties)"
    );
    accepted(
        json!({"type": "object", "properties": {"b": {}}, "patternProperties": {"^a": {"type": "string"}}}),
    );
}

#[test]
fn catastrophic_patterns_do_not_hang() {
    let name = format!("{}b", "a".repeat(5000));
    let schema = json!({
        "type": "object",
        "properties": {name: {}},
        "patternProperties": {"^(a+)+$": {"type": "string"}}
    });
    accepted(schema);
}

#[test]
fn conditionals() {
    refused(json!({"type": "string", "if": {"minLength": 1}}));
    refused(json!({"type": "string", "then": {"minLength": 1}}));
    accepted(json!({"type": "string", "if": {"minLength": 1}, "then": {"maxLength": 3}}));
}

#[test]
fn references() {
    let e =
        refused(json!({"type": "object", "properties": {"a": {"$ref": "#/definitions/missing"}}}));
    assert_eq!(
        e.message,
        "can't resolve reference #/definitions/missing from id #"
    );
    accepted(
        json!({"type": "object", "properties": {"a": {"$ref": "#/definitions/k"}}, "definitions": {"k": {"enum": ["x"]}}}),
    );
    // A referenced definition is compiled with no known type.
    let e = refused(
        json!({"type": "object", "properties": {"a": {"$ref": "#/definitions/k"}}, "definitions": {"k": {"minLength": 1}}}),
    );
    assert_eq!(
        e.message,
        "strict mode: missing type \"string\" for keyword \"minLength\" at \"#/definitions/k\" (strictTypes)"
    );
    assert_eq!(e.at, vec![k("definitions"), k("k"), k("minLength")]);
    refused(json!({"type": "object", "properties": {"a": {"$ref": "other.json"}}}));
    accepted(
        json!({"type": "object", "properties": {"a": {"$ref": "#a1"}}, "definitions": {"x": {"$id": "#a1", "type": "string"}}}),
    );
    // Recursion terminates.
    accepted(
        json!({"type": "object", "properties": {"a": {"$ref": "#/definitions/n"}}, "definitions": {"n": {"type": "object", "properties": {"next": {"$ref": "#/definitions/n"}}}}}),
    );
    refused(json!({"id": "x"}));
}

#[test]
fn depth_is_bounded() {
    let mut v = json!({"type": "string"});
    for _ in 0..300 {
        v = json!({"type": "object", "properties": {"a": v}});
    }
    let e = refused(v);
    assert!(e.message.contains("deeper than"), "{}", e.message);
    assert!(e.limit, "palisade's bound, not ajv's verdict");
    let mut v = json!({"type": "string"});
    for _ in 0..70 {
        v = json!({"type": "object", "properties": {"a": v}});
    }
    accepted(v);
}

#[test]
fn the_root_must_be_an_object() {
    refused(json!(true));
    refused(json!("x"));
    accepted(json!({}));
}

#[test]
fn pattern_length_is_bounded() {
    let schema = |n: usize| json!({"type": "string", "pattern": "a".repeat(n)});
    accepted(schema(super::MAX_PATTERN_LEN));
    let e = refused(schema(super::MAX_PATTERN_LEN + 1));
    assert!(e.limit, "{}", e.message);
    assert_eq!(e.at, vec![k("pattern")]);
    // ajv's own refusal of a pattern is not a limit.
    assert!(!refused(json!({"type": "string", "pattern": "("})).limit);
}

#[test]
fn pattern_property_matching_is_bounded() {
    // `n` long patterns against `n` long property names, none matching:
    // every pair is matched, at (8002 × 202) work each: 36 pairs fit
    // in `MAX_MATCH_WORK`, 49 do not.
    let schema = |n: usize| {
        let patterns: serde_json::Map<_, _> = (0..n)
            .map(|i| {
                (
                    format!("{i}{}", "b".repeat(8000)),
                    json!({"type": "string"}),
                )
            })
            .collect();
        let props: serde_json::Map<_, _> = (0..n)
            .map(|i| (format!("{i}{}", "a".repeat(200)), json!({})))
            .collect();
        json!({"type": "object", "properties": props, "patternProperties": patterns})
    };
    accepted(schema(6));
    let e = refused(schema(7));
    assert!(e.limit, "{}", e.message);
    assert!(
        e.message.contains("exceeds palisade's limit"),
        "{}",
        e.message
    );
}

#[test]
fn a_pattern_regex_cannot_match_in_linear_time_is_a_limit_beside_properties() {
    let schema = |props: serde_json::Value| json!({"type": "object", "properties": props, "patternProperties": {"^(?=x)y": {"type": "string"}}});
    // No property to match it against: ajv's verdict, compiled by regress.
    accepted(schema(json!({})));
    let e = refused(schema(json!({"b": {}})));
    assert!(e.limit, "{}", e.message);
    assert_eq!(e.at, vec![k("patternProperties"), k("^(?=x)y")]);
    accepted(
        json!({"type": "object", "properties": {"b": {}}, "patternProperties": {"^y": {"type": "string"}}}),
    );
}

#[test]
fn enum_uniqueness_is_linear_and_deep() {
    // 200,000 distinct values: ajv's pairwise loop would be 2e10 steps.
    let many: Vec<serde_json::Value> = (0..200_000).map(|i| json!(i)).collect();
    accepted(json!({"enum": many.clone()}));
    let mut dup = many;
    dup.push(json!(7.0));
    let e = refused(json!({"enum": dup}));
    assert!(
        e.message.ends_with("(items ## 7 and 200000 are identical)"),
        "{}",
        e.message
    );
    // The last duplicate, with its nearest earlier twin; deep equality.
    let e = refused(json!({"enum": [{"a": 1, "b": [1]}, "x", {"b": [1.0], "a": 1}, "x"]}));
    assert!(
        e.message.ends_with("(items ## 1 and 3 are identical)"),
        "{}",
        e.message
    );
    accepted(json!({"enum": [{"a": 1}, {"a": "1"}, [1], ["1"], 0, "0", null, false]}));
}

#[test]
fn canonical_forms_agree_with_deep_equality() {
    let values = [
        json!(1),
        json!(1.0),
        json!(-0.0),
        json!(0),
        json!("1"),
        json!(null),
        json!(false),
        json!([1, "a"]),
        json!(["a", 1]),
        json!({"a": 1, "b": 2}),
        json!({"b": 2.0, "a": 1}),
        json!({"a": [1]}),
        json!({"a": "[1]"}),
        json!([[]]),
        json!([{}]),
        json!("s\"x"),
    ];
    for a in &values {
        for b in &values {
            let (mut ka, mut kb) = (String::new(), String::new());
            super::meta::canonical(a, &mut ka);
            super::meta::canonical(b, &mut kb);
            assert_eq!(ka == kb, super::meta::json_equal(a, b), "{a} {b}");
        }
    }
}

#[test]
fn anchor_search_is_bounded() {
    // Many `$ref`s to distinct missing anchors, in a large schema: each
    // search would visit every node.
    let schema = |n: usize| {
        let props: serde_json::Map<_, _> = (0..n)
            .map(|i| (format!("p{i}"), json!({"$ref": format!("#a{i}")})))
            .collect();
        let defs: serde_json::Map<_, _> = (0..n)
            .map(|i| {
                (
                    format!("d{i}"),
                    json!({"$id": format!("#a{i}"), "type": "string"}),
                )
            })
            .collect();
        json!({"type": "object", "properties": props, "definitions": defs})
    };
    accepted(schema(100));
    let e = refused(schema(3000));
    assert!(e.limit, "{}", e.message);
    assert!(e.message.contains("anchors"), "{}", e.message);
}
