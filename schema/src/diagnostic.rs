//! Diagnostics: what went wrong, where, and under which stable code.
//!
//! Every parser in palisade reports through [`Diagnostic`]. A diagnostic is
//! plain data; [`crate::render::Renderer`] draws it rustc-style with its
//! source line, and it serializes to JSON with stable field names.
//!
//! Every parser returns `Result<`[`Parsed<T>`]`, `[`Diagnostics`]`>`: the
//! value with its warnings when there is no error, else every finding,
//! errors first. A value is never returned next to an error.

use std::fmt;

use serde::Serialize;

/// How bad a finding is.
///
/// `palisade check` exits 1 when any diagnostic is an [`Severity::Error`];
/// warnings alone leave the exit status at 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The input is invalid or unsafe; it must not be used.
    Error,
    /// The input is valid but a reviewer should look at it.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Error => "error",
            Self::Warning => "warning",
        })
    }
}

/// One step of an authored path: a mapping key or a sequence index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathSegment {
    /// A key of a mapping.
    Key(String),
    /// A zero-based index into a sequence.
    Index(usize),
}

/// The authored path of a node inside a document, such as
/// `triggers[0].steps[1].agent.options.sandbox_mode`.
///
/// Displayed in the format of Paseo's provider-option errors: an index is
/// `[n]`, a key that looks like an identifier (`^[A-Za-z_$][A-Za-z0-9_$]*$`)
/// is `.key`, any other key is `["json-quoted"]`. The root is empty; callers
/// that want a prefix such as `agent.options` print it themselves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Path(pub Vec<PathSegment>);

impl Path {
    /// The empty (root) path.
    pub fn root() -> Self {
        Self(Vec::new())
    }

    /// This path extended by a mapping key.
    #[must_use]
    pub fn key(&self, key: impl Into<String>) -> Self {
        let mut segments = self.0.clone();
        segments.push(PathSegment::Key(key.into()));
        Self(segments)
    }

    /// This path extended by a sequence index.
    #[must_use]
    pub fn index(&self, index: usize) -> Self {
        let mut segments = self.0.clone();
        segments.push(PathSegment::Index(index));
        Self(segments)
    }

    /// Whether this is the root path.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for segment in &self.0 {
            match segment {
                PathSegment::Index(n) => write!(f, "[{n}]")?,
                PathSegment::Key(k) if is_identifier(k) => write!(f, ".{k}")?,
                PathSegment::Key(k) => {
                    // A JSON string literal is exactly the quoting the format asks for.
                    let quoted = serde_json::Value::String(k.clone()).to_string();
                    write!(f, "[{quoted}]")?;
                }
            }
        }
        Ok(())
    }
}

impl Serialize for Path {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '$' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// A finding about an input document.
///
/// `line` and `column` are 1-based and point at the offending node; both are
/// 0 only when the finding concerns the document as a whole (an empty file,
/// a file that is not UTF-8) and no better position exists. `column` counts
/// Unicode scalar values, not bytes. `end_line` and `end_column` are where
/// the offending node ends, exclusive (the position just after its last
/// character, as SARIF's `endColumn`); both are 0 when the end is not known,
/// and they are then left out of the JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// A stable, machine-readable code such as `unknown_key`.
    pub code: &'static str,
    /// A one-line human message.
    pub message: String,
    /// The file the node came from, as the caller named it.
    pub file: String,
    /// 1-based line of the node.
    pub line: u32,
    /// 1-based column of the node.
    pub column: u32,
    /// 1-based line where the node ends (0: not known).
    #[serde(skip_serializing_if = "is_zero")]
    pub end_line: u32,
    /// 1-based column just after the node's last character (0: not known).
    #[serde(skip_serializing_if = "is_zero")]
    pub end_column: u32,
    /// The authored path of the node.
    pub path: Path,
    /// An optional hint on how to fix the finding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
}

impl Diagnostic {
    /// An error with the given code and message, located at the document root.
    pub fn error(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(Severity::Error, code, message)
    }

    /// A warning with the given code and message, located at the document root.
    pub fn warning(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(Severity::Warning, code, message)
    }

    fn new(severity: Severity, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            severity,
            code,
            message: message.into(),
            file: String::new(),
            line: 0,
            column: 0,
            end_line: 0,
            end_column: 0,
            path: Path::root(),
            help: None,
        }
    }

    /// Sets the file name.
    #[must_use]
    pub fn in_file(mut self, file: impl Into<String>) -> Self {
        self.file = file.into();
        self
    }

    /// Sets the 1-based line and column.
    #[must_use]
    pub fn at(mut self, line: u32, column: u32) -> Self {
        self.line = line;
        self.column = column;
        self
    }

    /// Sets where the node ends: the 1-based line and the column just after
    /// its last character. Ignored unless it lies after the start.
    #[must_use]
    pub fn until(mut self, line: u32, column: u32) -> Self {
        if (line, column) > (self.line, self.column) && self.line > 0 {
            self.end_line = line;
            self.end_column = column;
        }
        self
    }

    /// Sets the authored path.
    #[must_use]
    pub fn with_path(mut self, path: Path) -> Self {
        self.path = path;
        self
    }

    /// Sets the help text.
    #[must_use]
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Whether this is an error (as opposed to a warning).
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// One line: `file:line:col: error[code]: path: message`. The location is
/// left out when the finding has no file (as from
/// [`crate::options::validate_json`]), the line and column when it concerns
/// the whole document, the path when it is the root. The help is not shown.
impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.file.is_empty() {
            f.write_str(&self.file)?;
            if self.line > 0 {
                write!(f, ":{}:{}", self.line, self.column)?;
            }
            f.write_str(": ")?;
        }
        write!(f, "{}[{}]: ", self.severity, self.code)?;
        if !self.path.is_root() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for Diagnostic {}

/// What a parser returns when it found no error: the value and the warnings
/// (lints) that came with it, in document order.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct Parsed<T> {
    value: T,
    warnings: Vec<Diagnostic>,
}

impl<T> Parsed<T> {
    /// A value with its warnings; `warnings` must hold no error.
    pub(crate) fn new(value: T, warnings: Vec<Diagnostic>) -> Self {
        debug_assert!(!warnings.iter().any(Diagnostic::is_error));
        Self { value, warnings }
    }

    /// The parsed value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The warnings found while parsing, in document order.
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }

    /// The value, dropping the warnings.
    pub fn into_value(self) -> T {
        self.value
    }

    /// The value and the warnings.
    pub fn into_parts(self) -> (T, Vec<Diagnostic>) {
        (self.value, self.warnings)
    }

    /// The same warnings with the value mapped by `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Parsed<U> {
        Parsed {
            value: f(self.value),
            warnings: self.warnings,
        }
    }
}

/// Every finding about an input that was refused: at least one error, the
/// errors first (in document order), then the warnings (in document order).
///
/// Displayed as one line, `N errors, M warnings; first: <the first error>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostics(Vec<Diagnostic>);

impl Diagnostics {
    /// A single error (plus nothing else); `diag` must be an error.
    pub(crate) fn one(diag: Diagnostic) -> Self {
        debug_assert!(diag.is_error());
        Self(vec![diag])
    }

    /// The first error.
    pub fn first(&self) -> &Diagnostic {
        // Never empty and errors first, by construction (see `outcome`).
        self.0.first().unwrap_or(&NO_FINDING)
    }

    /// Every finding, errors first.
    pub fn as_slice(&self) -> &[Diagnostic] {
        &self.0
    }

    /// Every finding, errors first.
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }

    /// The errors, in document order.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| d.is_error())
    }

    /// The warnings, in document order.
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| !d.is_error())
    }

    /// How many errors there are (at least 1).
    pub fn error_count(&self) -> usize {
        self.errors().count()
    }

    /// How many warnings there are.
    pub fn warning_count(&self) -> usize {
        self.0.len() - self.error_count()
    }

    /// How many findings there are (at least 1).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always `false`: refused input has at least one error.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every finding, errors first.
    pub fn into_vec(self) -> Vec<Diagnostic> {
        self.0
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        let (errors, warnings) = (self.error_count(), self.warning_count());
        write!(
            f,
            "{errors} error{}, {warnings} warning{}; first: {}",
            plural(errors),
            plural(warnings),
            self.first()
        )
    }
}

impl std::error::Error for Diagnostics {}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Diagnostics {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// The result of every parser from its value and all its findings (in
/// document order): the value with its warnings when there is no error,
/// else every finding. A parser that returned neither a value nor an error
/// is refused too, with an `internal` error naming `file`: it fails closed.
pub(crate) fn outcome<T>(
    file: &str,
    value: Option<T>,
    mut diags: Vec<Diagnostic>,
) -> Result<Parsed<T>, Diagnostics> {
    if !diags.iter().any(Diagnostic::is_error) {
        match value {
            Some(value) => return Ok(Parsed::new(value, diags)),
            None => diags.insert(
                0,
                Diagnostic::error(
                    "internal",
                    "the parser returned neither a value nor an error",
                )
                .in_file(file),
            ),
        }
    }
    let (mut errors, warnings): (Vec<_>, Vec<_>) =
        diags.into_iter().partition(Diagnostic::is_error);
    errors.extend(warnings);
    Err(Diagnostics(errors))
}

/// What [`Diagnostics::first`] would return for an empty collection, which
/// the constructors never build.
static NO_FINDING: Diagnostic = Diagnostic {
    severity: Severity::Error,
    code: "internal",
    message: String::new(),
    file: String::new(),
    line: 0,
    column: 0,
    end_line: 0,
    end_column: 0,
    path: Path(Vec::new()),
    help: None,
};

/// Maps byte offsets of a text to 1-based lines and columns.
///
/// Build it once per document; each lookup is a binary search.
#[derive(Clone, Debug)]
pub struct LineIndex<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    /// Indexes `text`.
    pub fn new(text: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Self { text, line_starts }
    }

    /// The 1-based line and column (in characters) of a byte offset.
    ///
    /// Offsets past the end map to the end of the text; an offset inside a
    /// multi-byte character maps to that character.
    pub fn line_col(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.text.len());
        let line = self
            .line_starts
            .partition_point(|&start| start <= offset)
            .max(1);
        let start = self.line_starts.get(line - 1).copied().unwrap_or(0);
        let column = self.text.get(start..).map_or(0, |rest| {
            rest.char_indices()
                .take_while(|(i, _)| start + i < offset)
                .count()
        });
        (saturate(line), saturate(column + 1))
    }

    /// The text of a 1-based line, without its line terminator.
    pub fn line_text(&self, line: u32) -> Option<&'a str> {
        let idx = usize::try_from(line).ok()?.checked_sub(1)?;
        let start = *self.line_starts.get(idx)?;
        let end = self
            .line_starts
            .get(idx + 1)
            .map_or(self.text.len(), |&next| next - 1);
        self.text
            .get(start..end)
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
    }
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_display_follows_paseo_format() {
        let p = Path::root()
            .key("sandbox_workspace_write")
            .key("network-access")
            .key("writable_roots")
            .index(2);
        assert_eq!(
            p.to_string(),
            r#".sandbox_workspace_write["network-access"].writable_roots[2]"#
        );
        assert_eq!(
            Path::root().key("$ref").key("1a").to_string(),
            r#".$ref["1a"]"#
        );
        assert_eq!(Path::root().key("").to_string(), r#"[""]"#);
        assert_eq!(Path::root().key("a\"b").to_string(), r#"["a\"b"]"#);
    }

    #[test]
    fn line_index_maps_offsets() {
        let text = "ab\ncé\n\nx";
        let idx = LineIndex::new(text);
        assert_eq!(idx.line_col(0), (1, 1));
        assert_eq!(idx.line_col(1), (1, 2));
        assert_eq!(idx.line_col(3), (2, 1));
        // 'é' is two bytes; the character after it is column 3.
        assert_eq!(idx.line_col(6), (2, 3));
        assert_eq!(idx.line_col(7), (3, 1));
        assert_eq!(idx.line_col(8), (4, 1));
        assert_eq!(idx.line_col(999), (4, 2));
        assert_eq!(idx.line_text(2), Some("cé"));
        assert_eq!(idx.line_text(3), Some(""));
        assert_eq!(idx.line_text(4), Some("x"));
        assert_eq!(idx.line_text(5), None);
        assert_eq!(idx.line_text(0), None);
    }

    #[test]
    fn diagnostic_serializes_with_stable_field_names() {
        let d = Diagnostic::error("unknown_key", "Unrecognized key: \"sandbox\"")
            .in_file(".paseo/workflows/t.yml")
            .at(7, 9)
            .with_path(Path::root().key("steps").index(0));
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "severity": "error",
                "code": "unknown_key",
                "message": "Unrecognized key: \"sandbox\"",
                "file": ".paseo/workflows/t.yml",
                "line": 7,
                "column": 9,
                "path": ".steps[0]",
            })
        );
    }
}
