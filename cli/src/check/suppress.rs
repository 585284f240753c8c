//! Suppression comments: `# palisade: allow(code) reason` anywhere in a
//! YAML or TOML file silences that lint's findings in that file.
//!
//! A reason is required: a comment without one is itself a finding
//! (`suppression_without_reason`, an error) and suppresses nothing. A code
//! that is not a lint (a schema error cannot be suppressed, any more than
//! allowed) is `unknown_suppression`; a suppression that silenced nothing
//! is `unused_suppression` (both warnings). Several codes may share one
//! comment: `# palisade: allow(broad_cwd, codex_network_access) reason`.
//!
//! Only comments count: in YAML, a `#` inside a scalar (a quoted string, a
//! block `prompt`) is text, not a comment, and is skipped by its position
//! in the parsed tree. In TOML a comment-like text inside a string is not
//! told apart (TOML files are the operator's own `palisade.toml`).

use palisade_schema::Diagnostic;
use palisade_schema::yaml::{Node, Pos, Value};

use super::levels::{SUPPRESSION_CODES, is_lint, is_lint_code};

/// The marker that starts a suppression comment.
const MARKER: &str = "palisade:";
/// The most suppression comments read from one file; more are findings.
const MAX_PER_FILE: usize = 256;
/// The most codes one comment may name.
const MAX_CODES: usize = 32;

/// One code of one suppression comment.
#[derive(Debug)]
pub(crate) struct Suppression {
    file: String,
    code: String,
    reason: String,
    line: u32,
    column: u32,
    end_column: u32,
    used: bool,
}

/// The suppressions of a file and the findings about malformed ones.
pub(crate) fn scan(file: &str, text: &str) -> (Vec<Suppression>, Vec<Diagnostic>) {
    let mut out = Vec::new();
    let mut findings = Vec::new();
    let lower = file.to_ascii_lowercase();
    let yaml =
        lower.ends_with(".yml") || lower.ends_with(".yaml") || file == crate::bundle::STDIN_NAME;
    let toml = lower.ends_with(".toml");
    if !yaml && !toml {
        // Prompt partials (Markdown) hold text, not comments.
        return (out, findings);
    }
    let scalars = if yaml {
        scalar_spans(file, text)
    } else {
        Vec::new()
    };
    let mut seen = 0usize;
    for (idx, line) in text.lines().enumerate() {
        let line_no = u32::try_from(idx + 1).unwrap_or(u32::MAX);
        let Some((col, comment)) = comment_of(line) else {
            continue;
        };
        let Some(rest) = comment.trim_start().strip_prefix(MARKER) else {
            continue;
        };
        let column = u32::try_from(col + 1).unwrap_or(u32::MAX);
        if scalars
            .iter()
            .any(|(s, e)| within((line_no, column), *s, *e))
        {
            continue;
        }
        seen += 1;
        let end_column = u32::try_from(line.chars().count() + 1).unwrap_or(u32::MAX);
        let at = |d: Diagnostic| {
            d.in_file(file)
                .at(line_no, column)
                .until(line_no, end_column)
        };
        if seen > MAX_PER_FILE {
            findings.push(at(Diagnostic::warning(
                "unknown_suppression",
                format!("more than {MAX_PER_FILE} suppression comments in one file; the rest are ignored"),
            )));
            break;
        }
        let Some((codes, reason)) = parse(rest) else {
            findings.push(at(Diagnostic::warning(
                "unknown_suppression",
                "not a suppression palisade reads",
            )
            .with_help("write `# palisade: allow(code) reason`")));
            continue;
        };
        if reason.is_empty() {
            findings.push(at(Diagnostic::error(
                "suppression_without_reason",
                format!(
                    "`allow({})` gives no reason, so it suppresses nothing",
                    codes.join(", ")
                ),
            )
            .with_help(
                "say why after the parenthesis: `# palisade: allow(code) reason`",
            )));
            continue;
        }
        for code in codes {
            if !is_lint_code(code) || SUPPRESSION_CODES.contains(&code) {
                findings.push(at(Diagnostic::warning(
                    "unknown_suppression",
                    format!("`{code}` is not a lint code; only lints can be suppressed, never a schema error"),
                )));
                continue;
            }
            out.push(Suppression {
                file: file.to_owned(),
                code: code.to_owned(),
                reason: reason.to_owned(),
                line: line_no,
                column,
                end_column,
                used: false,
            });
        }
    }
    (out, findings)
}

/// `allow(a, b) reason` → the codes and the trimmed reason.
fn parse(rest: &str) -> Option<(Vec<&str>, &str)> {
    let inner = rest.trim_start().strip_prefix("allow(")?;
    let (list, reason) = inner.split_once(')')?;
    let codes: Vec<&str> = list.split(',').map(str::trim).collect();
    if codes.len() > MAX_CODES
        || codes.iter().any(|c| {
            c.is_empty()
                || !c
                    .chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
        })
    {
        return None;
    }
    Some((codes, reason.trim()))
}

/// The character column (0-based) and text after a `#` that starts a
/// comment: at the line start or after a blank.
fn comment_of(line: &str) -> Option<(usize, &str)> {
    let mut prev_blank = true;
    for (col, (i, c)) in line.char_indices().enumerate() {
        if c == '#' && prev_blank {
            return line.get(i + 1..).map(|rest| (col, rest));
        }
        prev_blank = c == ' ' || c == '\t';
    }
    None
}

fn within(at: (u32, u32), start: Pos, end: Pos) -> bool {
    (start.line, start.column) <= at && at < (end.line, end.column)
}

/// The spans of every string scalar of a YAML file (nothing when it does
/// not parse: then its findings are errors no suppression touches).
fn scalar_spans(file: &str, text: &str) -> Vec<(Pos, Pos)> {
    let Ok(parsed) = palisade_schema::yaml::parse(file, text) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut stack: Vec<&Node<'_>> = vec![parsed.value()];
    while let Some(n) = stack.pop() {
        match &n.value {
            Value::String(_) => out.push((n.pos, n.end)),
            Value::Seq(items) => stack.extend(items),
            Value::Map(entries) => stack.extend(entries.iter().map(|(_, v)| v)),
            _ => {}
        }
    }
    out
}

/// Marks the findings the suppressions silence: the reason for each
/// finding (in order), `None` for one that stands. Only lints are
/// silenced. Returns the `unused_suppression` warnings too.
pub(crate) fn apply(
    diags: &[Diagnostic],
    suppressions: &mut [Suppression],
) -> (Vec<Option<String>>, Vec<Diagnostic>) {
    let reasons = diags
        .iter()
        .map(|d| {
            if !is_lint(d) {
                return None;
            }
            let s = suppressions
                .iter_mut()
                .find(|s| s.file == d.file && s.code == d.code)?;
            s.used = true;
            Some(s.reason.clone())
        })
        .collect();
    let unused = suppressions
        .iter()
        .filter(|s| !s.used)
        .map(|s| {
            Diagnostic::warning(
                "unused_suppression",
                format!("`allow({})` suppresses nothing in this file", s.code),
            )
            .in_file(s.file.clone())
            .at(s.line, s.column)
            .until(s.line, s.end_column)
            .with_help("remove the comment, or check the code's spelling")
        })
        .collect();
    (reasons, unused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_comments_with_a_reason_and_refuses_the_rest() {
        let text = "a: 1 # palisade: allow(broad_cwd) the daemon's cwd is a scratch VM\n\
                    # palisade: allow(broad_cwd)\n\
                    # palisade: allow(unknown_key) nope\n\
                    # palisade: alow(broad_cwd) typo\n\
                    b: \"x # palisade: allow(broad_cwd) inside a string\"\n\
                    c: |\n  # palisade: allow(broad_cwd) inside a block scalar\n";
        let (sups, findings) = scan("w.yml", text);
        assert_eq!(sups.len(), 1, "{sups:?}");
        assert_eq!(sups[0].reason, "the daemon's cwd is a scratch VM");
        assert_eq!((sups[0].line, sups[0].column), (1, 6));
        let codes: Vec<(&str, u32)> = findings.iter().map(|d| (d.code, d.line)).collect();
        assert_eq!(
            codes,
            [
                ("suppression_without_reason", 2),
                ("unknown_suppression", 3),
                ("unknown_suppression", 4)
            ]
        );
        // Markdown partials hold no comments.
        assert!(
            scan("p.md", "# palisade: allow(broad_cwd) x\n")
                .0
                .is_empty()
        );
    }

    #[test]
    fn suppresses_lints_of_its_own_file_only_and_reports_unused_ones() {
        let (mut sups, _) = scan(
            "w.yml",
            "# palisade: allow(broad_cwd, unknown_event) reviewed\n",
        );
        let diags = vec![
            Diagnostic::warning("broad_cwd", "x").in_file("w.yml"),
            Diagnostic::warning("broad_cwd", "x").in_file("other.yml"),
        ];
        let (reasons, unused) = apply(&diags, &mut sups);
        assert_eq!(reasons, [Some("reviewed".to_owned()), None]);
        assert_eq!(unused.len(), 1);
        assert!(unused[0].message.contains("unknown_event"));
    }
}
