//! Tidy: every diagnostic code is documented. `codes::CODES` lists every
//! code `palisade check` can emit; `docs/check.md` must have a section
//! `` ### `code` `` for each (the SARIF `helpUri` points at it), and no
//! section for a code that is not listed. Every code literal the schema
//! sources pass to a diagnostic constructor must be listed, and every
//! listed code must still occur in the sources of schema, policy or cli.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
#![allow(clippy::indexing_slicing, reason = "tests")]
#![allow(
    clippy::disallowed_methods,
    reason = "tests read fixture and source files"
)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use palisade_schema::codes::{CODES, help_uri, summary};

/// Functions whose string-literal arguments in snake case are codes.
const EMITTERS: &[&str] = &[
    "error",
    "warning",
    "err",
    "err_help",
    "warn",
    "diag_at",
    "fail",
    "file_error",
    "error_at_key",
    "at",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The non-test part of a source file: test files are skipped, and a
/// file's `#[cfg(test)]` module sits at its end (house style).
fn library_text(path: &Path) -> String {
    let name = path.file_name().unwrap().to_string_lossy();
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return String::new();
    }
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("\n#[cfg(test)]\nmod ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

fn is_code(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The name of the call whose argument list holds byte `at`, if any.
fn enclosing_call(text: &str, at: usize) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = at;
    while i > 0 {
        i -= 1;
        match bytes[i] {
            b')' | b']' | b'}' => depth += 1,
            b'(' if depth == 0 => {
                let start = text[..i]
                    .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .map_or(0, |p| p + 1);
                return Some(&text[start..i]);
            }
            b'[' | b'{' if depth == 0 => return None,
            b'(' | b'[' | b'{' => depth -= 1,
            b';' if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

/// The string literals of Rust source `text`, as (byte offset of the
/// opening quote, contents); comments, char literals and raw strings are
/// stepped over so that quotes inside them do not pair up wrongly.
fn string_literals(text: &str) -> Vec<(usize, &str)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                i = text[i..].find('\n').map_or(b.len(), |n| i + n);
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = text[i..].find("*/").map_or(b.len(), |n| i + n + 2);
            }
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                let open = i + 1 + hashes;
                if b.get(open) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let end = text[open + 1..]
                    .find(&close)
                    .map_or(b.len(), |n| open + 1 + n);
                out.push((open, &text[open + 1..end.min(b.len())]));
                i = end + close.len();
            }
            b'\'' => {
                // A char literal ('x', '\n', '\''), else a lifetime.
                if b.get(i + 1) == Some(&b'\\') {
                    i = text[i + 2..].find('\'').map_or(b.len(), |n| i + 2 + n + 1);
                } else if let Some(c) = text[i + 1..].chars().next()
                    && text[i + 1 + c.len_utf8()..].starts_with('\'')
                {
                    i += 1 + c.len_utf8() + 1;
                } else {
                    i += 1;
                }
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                out.push((i, &text[i + 1..j.min(b.len())]));
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// Snake-case string literals passed to an emitter in `text`.
fn emitted_codes(text: &str) -> Vec<String> {
    string_literals(text)
        .into_iter()
        .filter(|(at, lit)| {
            is_code(lit) && enclosing_call(text, *at).is_some_and(|name| EMITTERS.contains(&name))
        })
        .map(|(_, lit)| lit.to_owned())
        .collect()
}

fn docs() -> String {
    std::fs::read_to_string(root().join("docs/check.md")).unwrap()
}

#[test]
fn every_listed_code_has_a_section_and_every_section_is_listed() {
    let docs = docs();
    let sections: BTreeSet<&str> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("### `")?.strip_suffix('`'))
        .collect();
    let listed: BTreeSet<&str> = CODES.iter().map(|c| c.code).collect();
    assert_eq!(listed.len(), CODES.len(), "a code is listed twice");
    let missing: Vec<_> = listed.difference(&sections).collect();
    assert!(
        missing.is_empty(),
        "no section in docs/check.md: {missing:?}"
    );
    let orphan: Vec<_> = sections.difference(&listed).collect();
    assert!(orphan.is_empty(), "sections for unlisted codes: {orphan:?}");
    for c in CODES {
        assert!(!c.summary.is_empty() && !c.summary.contains('`'), "{c:?}");
        assert!(help_uri(c.code).ends_with(&format!("check.md#{}", c.code)));
    }
}

#[test]
fn every_code_the_schema_emits_is_listed() {
    let mut files = Vec::new();
    rust_files(&root().join("schema/src"), &mut files);
    let mut unlisted = BTreeSet::new();
    let mut found = 0;
    for f in &files {
        for code in emitted_codes(&library_text(f)) {
            found += 1;
            if summary(&code).is_none() {
                unlisted.insert(format!("{code} ({})", f.display()));
            }
        }
    }
    // The scanner must see the codes at all (a scanner that finds nothing
    // would pass vacuously).
    assert!(found > 150, "only {found} code literals found");
    assert!(
        unlisted.is_empty(),
        "codes emitted but not in codes::CODES and docs/check.md: {unlisted:?}"
    );
}

#[test]
fn every_listed_code_still_occurs_in_the_sources() {
    let mut text = String::new();
    for dir in ["schema/src", "policy/src", "cli/src"] {
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        for f in files {
            text.push_str(&library_text(&f));
        }
    }
    let stale: Vec<&str> = CODES
        .iter()
        .map(|c| c.code)
        .filter(|c| !text.contains(&format!("\"{c}\"")))
        .collect();
    assert!(stale.is_empty(), "listed but never emitted: {stale:?}");
}

#[test]
fn the_scanner_finds_codes_in_emitter_calls_only() {
    let text = r###"
        w.error("unknown_key", &p, "Unrecognized key");
        let q = '"'; // a quote in a char literal does not open a string
        diag_at(file, root, true, "relative_cwd", "must be \"absolute\"", &p);
        let k = node.get("from_users"); // warn("not_a_call")
        let s = r##"error("in_raw")"##;
        opt_str(n, "base");
        Diagnostic::warning(
            "unexpected_bundle_file",
            format!("{x}"),
        );
    "###;
    assert_eq!(
        emitted_codes(text),
        ["unknown_key", "relative_cwd", "unexpected_bundle_file"]
    );
}
