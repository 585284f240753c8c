//! Discovery of `.paseo/triggers/*.yml` as the Hub CLI reads it
//! (`hub-triggers.md` §1): direct-child regular `.yml` files only, read in
//! `localeCompare` order of their names; each file is one document whose
//! identity is its `name`, unique across the directory.
//!
//! The caller (the CLI) reads the files and refuses symlinks
//! (`trigger_unsafe_path`); this module decides from the paths alone.

use std::cmp::Ordering;

use crate::diagnostic::{Diagnostic, Diagnostics, Parsed, Path};

use super::{TriggerDocument, TriggerOptions, trigger_findings};

/// The trigger directory, relative to the repository root.
pub const TRIGGER_DIR: &str = ".paseo/triggers";

/// Whether `path` (relative to the repository root, `/`-separated) is
/// under [`TRIGGER_DIR`]: the v0.6 bundle reader must not see these files.
pub fn is_trigger_path(path: &str) -> bool {
    path.strip_prefix(TRIGGER_DIR)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The file name of a direct-child `.yml` trigger, if `path` is one.
fn direct_child(path: &str) -> Option<&str> {
    let name = path.strip_prefix(TRIGGER_DIR)?.strip_prefix('/')?;
    let stem = name.strip_suffix(".yml")?;
    (!stem.is_empty() && !name.contains('/')).then_some(name)
}

/// ASCII punctuation and symbols in CLDR root collation order (the
/// order of ICU, which `localeCompare` uses), space first.
const ASCII_PUNCTUATION: &str = " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$";

/// An approximation of JavaScript's `a.localeCompare(b)` (ICU root
/// collation) for file names: compared first ignoring case, with
/// punctuation and symbols (in CLDR root order) before digits before
/// letters, digits compared one by one as ICU does by default; ties broken
/// lowercase before uppercase, then by code point. Exact for ASCII names;
/// other characters are ordered by code point within their class (ICU
/// would also ignore accents at the first level).
pub(crate) fn locale_compare(a: &str, b: &str) -> Ordering {
    fn primary(c: char) -> (u8, u32) {
        if let Some(i) = ASCII_PUNCTUATION.find(c) {
            (0, u32::try_from(i).unwrap_or(u32::MAX))
        } else if c.is_alphabetic() {
            (3, u32::from(c.to_lowercase().next().unwrap_or(c)))
        } else if c.is_numeric() {
            (2, u32::from(c))
        } else {
            (1, u32::from(c))
        }
    }
    let pa = a.chars().map(primary);
    let pb = b.chars().map(primary);
    pa.cmp(pb)
        .then_with(|| {
            // Lowercase sorts before uppercase at the tertiary level.
            let ta = a.chars().map(char::is_uppercase);
            let tb = b.chars().map(char::is_uppercase);
            ta.cmp(tb)
        })
        .then_with(|| a.cmp(b))
}

pub(crate) fn parse_dir(
    files: &[(&str, &[u8])],
    options: &TriggerOptions,
) -> Result<Parsed<Vec<TriggerDocument>>, Diagnostics> {
    let mut diags: Vec<Diagnostic> = Vec::new();
    let mut entries: Vec<(&str, &str, &[u8])> = Vec::new();
    for (path, bytes) in files {
        match direct_child(path) {
            Some(name) => entries.push((name, path, bytes)),
            None => diags.push(
                Diagnostic::error(
                    "trigger_path_unsupported",
                    format!("{path} must be a direct-child .yml trigger."),
                )
                .in_file(*path)
                .with_help(
                    "put each trigger document directly in .paseo/triggers/ with a .yml extension",
                ),
            ),
        }
    }
    if files.is_empty() {
        diags.push(
            Diagnostic::error(
                "trigger_missing",
                format!("{TRIGGER_DIR} contains no trigger document"),
            )
            .in_file(TRIGGER_DIR)
            .with_help("add a .paseo/triggers/<name>.yml document, or remove the empty directory"),
        );
    }
    entries.sort_by(|a, b| locale_compare(a.0, b.0));
    if !options.skip_lints {
        let order: Vec<&str> = entries.iter().map(|e| e.1).collect();
        diags.extend(super::lints::non_atomic_deploy(&order));
    }
    let mut docs: Vec<(TriggerDocument, &str)> = Vec::new();
    for (_, path, bytes) in entries {
        let text = match crate::decode(path, bytes) {
            Ok(t) => t,
            Err(d) => {
                diags.extend(d);
                continue;
            }
        };
        let (doc, found) = trigger_findings(path, text, options);
        diags.extend(found);
        let Some(doc) = doc else { continue };
        if let Some((_, other)) = docs.iter().find(|(d, _)| d.name == doc.name) {
            let (line, column) = name_position(text);
            diags.push(
                Diagnostic::error(
                    "duplicate_trigger_name",
                    format!(
                        "trigger name {:?} is also used by {other}; a name identifies one trigger in the organization",
                        doc.name
                    ),
                )
                .in_file(path)
                .at(line, column)
                .with_path(Path::root().key("name"))
                .with_help("give each document its own name; the second install would replace the first"),
            );
            continue;
        }
        docs.push((doc, path));
    }
    let docs = docs.into_iter().map(|(d, _)| d).collect();
    crate::diagnostic::outcome(TRIGGER_DIR, Some(docs), diags)
}

/// Where the top-level `name` value is, for the duplicate finding.
fn name_position(text: &str) -> (u32, u32) {
    match crate::yaml::load("", text).0 {
        Some(root) => {
            let p = root.pos_of(&Path::root().key("name"));
            (p.line, p.column)
        }
        None => (1, 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locale_order() {
        let mut names = vec![
            "b.yml", "B.yml", "a-b.yml", "a_b.yml", "ab.yml", "a1.yml", "A.yml", "a.yml",
        ];
        names.sort_by(|a, b| locale_compare(a, b));
        // As Node's ["…"].sort((a, b) => a.localeCompare(b)) orders them.
        assert_eq!(
            names,
            [
                "a_b.yml", "a-b.yml", "a.yml", "A.yml", "a1.yml", "ab.yml", "b.yml", "B.yml"
            ]
        );
        assert!(is_trigger_path(".paseo/triggers/x.yml"));
        assert!(is_trigger_path(".paseo/triggers"));
        assert!(!is_trigger_path(".paseo/triggersx/a.yml"));
        assert_eq!(direct_child(".paseo/triggers/x.yml"), Some("x.yml"));
        assert_eq!(direct_child(".paseo/triggers/x.yaml"), None);
        assert_eq!(direct_child(".paseo/triggers/d/x.yml"), None);
        assert_eq!(direct_child(".paseo/triggers/.yml"), None);
    }
}
