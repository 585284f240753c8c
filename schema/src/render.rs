//! A rustc-style renderer for [`Diagnostic`]s: the title with its code, the
//! offending source line with a caret under the token, and the help.
//!
//! This is the renderer `palisade check` prints with; an embedder gets the
//! same text. It does no IO: the caller hands it the document's text and
//! says whether to colour (`palisade check` colours only a terminal without
//! `NO_COLOR`).
//!
//! ```rust
//! use palisade_schema::render::Renderer;
//!
//! let text = "[worker]\nbogus = 1\n";
//! let refused = palisade_schema::host_policy::parse("palisade.toml", text).unwrap_err();
//! let shown = Renderer::new().render(refused.first(), Some(text));
//! assert!(shown.starts_with("error[unknown_key]: .worker.bogus: unknown key `bogus`"));
//! assert!(shown.contains(" --> palisade.toml:2:1"));
//! assert!(shown.contains("2 | bogus = 1"));
//! ```

use annotate_snippets::{AnnotationKind, Group, Level, Snippet};

use crate::diagnostic::{Diagnostic, LineIndex, Severity};

/// Renders diagnostics as rustc does; plain text unless [`Renderer::color`]
/// turns ANSI colours on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Renderer {
    color: bool,
}

impl Renderer {
    /// A plain-text renderer.
    pub fn new() -> Self {
        Self::default()
    }

    /// With `true`, the output carries ANSI colour escapes.
    #[must_use]
    pub fn color(mut self, color: bool) -> Self {
        self.color = color;
        self
    }

    /// One diagnostic, without a trailing newline. `source` is the text of
    /// the document `diagnostic.file` names: with it (and a line) the
    /// offending line is shown with a caret under the token at the column;
    /// without it, or for a finding about the whole document (line 0), a
    /// `note:` names the location instead. A help, if any, follows.
    pub fn render(&self, diagnostic: &Diagnostic, source: Option<&str>) -> String {
        let d = diagnostic;
        let renderer = if self.color {
            annotate_snippets::Renderer::styled()
        } else {
            annotate_snippets::Renderer::plain()
        };
        let level = match d.severity {
            Severity::Error => Level::ERROR,
            Severity::Warning => Level::WARNING,
        };
        let title = if d.path.is_root() {
            d.message.clone()
        } else {
            format!("{}: {}", d.path, d.message)
        };
        let line_text = source.and_then(|s| LineIndex::new(s).line_text(d.line));
        let title = level.primary_title(title.as_str()).id(d.code);
        let origin = format!("{}:{}:{}", d.file, d.line, d.column);
        let group = match line_text {
            Some(text) if d.line > 0 => title.element(
                Snippet::source(text)
                    .line_start(usize::try_from(d.line).unwrap_or(1))
                    .path(d.file.as_str())
                    .annotation(AnnotationKind::Primary.span(caret_span(text, d))),
            ),
            _ => title.element(Level::NOTE.message(origin.as_str())),
        };
        let mut report = vec![group];
        if let Some(help) = &d.help {
            report.push(Group::with_title(
                Level::HELP.secondary_title(help.as_str()),
            ));
        }
        renderer.render(&report)
    }
}

/// The byte range of `line` to underline: from the 1-based character column
/// to the diagnostic's end column when it ends on this line, to the end of
/// the line when it ends on a later one, else (no end known) to the end of
/// the token there.
fn caret_span(line: &str, d: &Diagnostic) -> std::ops::Range<usize> {
    let byte_at = |column: u32| {
        let col = usize::try_from(column.max(1)).unwrap_or(1) - 1;
        line.char_indices().nth(col).map_or(line.len(), |(i, _)| i)
    };
    let start = byte_at(d.column);
    let first = line
        .get(start..)
        .and_then(|r| r.chars().next())
        .map_or(0, char::len_utf8);
    if d.end_line == d.line && d.end_column > d.column {
        return start..byte_at(d.end_column).max(start + first);
    }
    if d.end_line > d.line {
        // The rest of the line, without trailing blanks (at least one caret).
        let end = line.trim_end().len().max(start + first);
        return start..end;
    }
    let rest = line.get(start..).unwrap_or("");
    let len = rest
        .find(|c: char| c.is_whitespace() || matches!(c, ',' | ']' | '}' | ':'))
        .unwrap_or(rest.len())
        .max(rest.chars().next().map_or(0, char::len_utf8));
    start..start + len
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Path;

    fn finding() -> Diagnostic {
        Diagnostic::error("unknown_key", "Unrecognized key: \"sandbox\"")
            .in_file("w.yml")
            .at(2, 3)
            .with_path(Path::root().key("agent"))
            .with_help("remove it")
    }

    #[test]
    fn shows_the_line_a_caret_under_the_token_and_the_help() {
        let text = "agent:\n  sandbox: on\n";
        assert_eq!(
            Renderer::new().render(&finding(), Some(text)),
            "error[unknown_key]: .agent: Unrecognized key: \"sandbox\"\n --> w.yml:2:3\n  |\n2 |   sandbox: on\n  |   ^^^^^^^\n  |\nhelp: remove it"
        );
    }

    #[test]
    fn the_caret_spans_the_whole_node_when_its_end_is_known() {
        let text = "limits:\n  memory: \"4 gigs\"\nif: ${{ a == 'b' }}\n";
        let d = Diagnostic::error("invalid_size", "not a size")
            .in_file("w.yml")
            .at(2, 11)
            .until(2, 19);
        let shown = Renderer::new().render(&d, Some(text));
        assert!(
            shown.contains("2 |   memory: \"4 gigs\"\n  |           ^^^^^^^^"),
            "{shown}"
        );
        // Without an end, the caret stops at the token's first blank.
        let d = Diagnostic::error("invalid_size", "not a size")
            .in_file("w.yml")
            .at(2, 11);
        let shown = Renderer::new().render(&d, Some(text));
        assert!(shown.ends_with("  |           ^^"), "{shown}");
        // A node that goes on to a later line is underlined to this line's end.
        let d = Diagnostic::error("x", "y")
            .in_file("w.yml")
            .at(3, 5)
            .until(5, 1);
        let shown = Renderer::new().render(&d, Some(text));
        assert!(
            shown.contains("3 | if: ${{ a == 'b' }}\n  |     ^^^^^^^^^^^^^^^"),
            "{shown}"
        );
    }

    #[test]
    fn without_the_source_or_a_line_a_note_names_the_place() {
        let want = "error[unknown_key]: .agent: Unrecognized key: \"sandbox\"\n |\n = note: w.yml:2:3\nhelp: remove it";
        assert_eq!(Renderer::new().render(&finding(), None), want);
        let whole = Diagnostic::error("empty_file", "the file is empty").in_file("w.yml");
        let shown = Renderer::new().render(&whole, Some(""));
        assert!(shown.contains("note: w.yml:0:0"), "{shown}");
    }

    #[test]
    fn color_adds_escapes_only_when_asked() {
        let text = "agent:\n  sandbox: on\n";
        let plain = Renderer::new().render(&finding(), Some(text));
        let styled = Renderer::new().color(true).render(&finding(), Some(text));
        assert!(!plain.contains('\u{1b}'));
        assert!(styled.contains('\u{1b}'), "{styled:?}");
    }
}
