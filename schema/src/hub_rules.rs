//! Rules of the Paseo Hub's compiler (getpaseo/hub v0.6.0 @ 8682093,
//! `src/config/compiler.ts`, `bundle.ts`, `src/project-slug.ts`) that are
//! not a key-by-key schema: the removed `timeout` key anywhere, JavaScript's
//! `===` between input values, and the project-name slug.

use serde_json::Value as Json;

use crate::diagnostic::{Diagnostic, Path};
use crate::yaml::{Node, Value as Y};

/// The Hub's `===` between two input values (string, number, boolean):
/// numbers compare by value, so `1` and `1.0` are the same choice.
pub(crate) fn same_primitive(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => x == y,
        },
        _ => a == b,
    }
}

/// JavaScript's `\s` (ECMAScript WhiteSpace and LineTerminator): not
/// Rust's `char::is_whitespace`, which adds U+0085 and lacks U+FEFF.
pub(crate) fn is_js_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200a}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202f}'
                | '\u{205f}'
                | '\u{3000}'
                | '\u{feff}'
    )
}

/// The message of the Hub's `rejectTimeoutAnywhere`.
pub(crate) const TIMEOUT_REMOVED: &str = "timeout was removed; use max_runtime";

/// The Hub's `rejectTimeoutAnywhere` (compiler.ts): before any schema, the
/// raw configuration is walked and a mapping with a `timeout` key anywhere
/// is refused, whatever it means there (an env name, an input name, a JSON
/// Schema property, a provider option). `root` is walked without
/// recursion; the YAML loader already bounds its size and depth.
pub(crate) fn removed_timeout(file: &str, root: &Node, base: &Path) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut stack: Vec<(&Node, Path)> = vec![(root, base.clone())];
    while let Some((node, path)) = stack.pop() {
        match &node.value {
            Y::Map(entries) => {
                for (k, v) in entries {
                    if k.text == "timeout" {
                        out.push(timeout_diagnostic(file, k.pos.line, k.pos.column, &path));
                    }
                    stack.push((v, path.key(k.text.to_string())));
                }
            }
            Y::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    stack.push((item, path.index(i)));
                }
            }
            _ => {}
        }
    }
    out
}

/// The diagnostic for a `timeout` key at `line:column`, under the mapping
/// at `path`.
pub(crate) fn timeout_diagnostic(file: &str, line: u32, column: u32, path: &Path) -> Diagnostic {
    Diagnostic::error("removed_field", TIMEOUT_REMOVED)
        .in_file(file)
        .at(line, column)
        .with_path(path.key("timeout"))
        .with_help("the Hub refuses a `timeout` key at any depth of a workflow, even as an env, input or schema property name; rename it (durations are max_runtime and idle_timeout)")
}

/// Drops exact repeats of one finding (the walker's strict objects and
/// [`removed_timeout`] both report a `timeout` key on a trigger or step).
pub(crate) fn dedup(diags: &mut Vec<Diagnostic>) {
    let mut seen = std::collections::BTreeSet::new();
    diags.retain(|d| seen.insert((d.file.clone(), d.line, d.column, d.code, d.message.clone())));
}

/// `projectSlugSchema` (src/project-slug.ts): `z.string().trim()` then the
/// slug pattern and at most 100 characters. The trim is JavaScript's
/// ([`is_js_space`]). Returns the trimmed name or the Hub's
/// message.
pub(crate) fn project_name(raw: &str) -> Result<String, String> {
    let trimmed = raw.trim_matches(is_js_space);
    if !crate::hub::is_slug(trimmed) {
        return Err("name must contain only lowercase letters, numbers, and single hyphens (^[a-z0-9]+(?:-[a-z0-9]+)*$)".to_owned());
    }
    if trimmed.chars().count() > crate::bundle::MAX_PROJECT_NAME_CHARS {
        return Err(format!(
            "Too big: expected string to have <={} characters",
            crate::bundle::MAX_PROJECT_NAME_CHARS
        ));
    }
    Ok(trimmed.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_by_value_as_javascript_does() {
        assert!(same_primitive(
            &serde_json::json!(1),
            &serde_json::json!(1.0)
        ));
        assert!(!same_primitive(
            &serde_json::json!(1),
            &serde_json::json!("1")
        ));
        assert!(same_primitive(
            &serde_json::json!("a"),
            &serde_json::json!("a")
        ));
    }

    #[test]
    fn javascript_white_space_is_not_rusts() {
        assert!(is_js_space('\u{feff}') && !'\u{feff}'.is_whitespace());
        assert!(!is_js_space('\u{85}') && '\u{85}'.is_whitespace());
        assert!(is_js_space(' ') && is_js_space('\u{3000}') && !is_js_space('a'));
    }

    #[test]
    fn project_names_are_trimmed_slugs_of_at_most_100_characters() {
        assert_eq!(project_name(" my-proj\n").as_deref(), Ok("my-proj"));
        assert!(project_name(&"a".repeat(100)).is_ok());
        let long = project_name(&"a".repeat(101)).unwrap_err();
        assert!(long.contains("<=100"), "{long}");
        assert!(project_name("My_Proj").is_err());
        assert!(project_name("").is_err());
    }
}
