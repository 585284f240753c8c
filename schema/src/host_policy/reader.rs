//! A strict reader over `toml`'s spanned tables: every key must be known,
//! every value must have the expected type, and every finding carries the
//! authored path, line and column.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::{Diagnostic, LineIndex, Path};

/// Collects diagnostics for one document.
pub(crate) struct Cx<'a> {
    file: &'a str,
    index: LineIndex<'a>,
    pub(crate) diags: Vec<Diagnostic>,
}

impl<'a> Cx<'a> {
    pub(crate) fn new(file: &'a str, text: &'a str) -> Self {
        Self {
            file,
            index: LineIndex::new(text),
            diags: Vec::new(),
        }
    }

    pub(crate) fn error(
        &mut self,
        code: &'static str,
        span: &Range<usize>,
        path: &Path,
        msg: impl Into<String>,
    ) -> Last<'_> {
        self.push(Diagnostic::error(code, msg), span, path)
    }

    pub(crate) fn warning(
        &mut self,
        code: &'static str,
        span: &Range<usize>,
        path: &Path,
        msg: impl Into<String>,
    ) -> Last<'_> {
        self.push(Diagnostic::warning(code, msg), span, path)
    }

    fn push(&mut self, d: Diagnostic, span: &Range<usize>, path: &Path) -> Last<'_> {
        let (line, col) = self.index.line_col(span.start);
        let (end_line, end_col) = self.index.line_col(span.end);
        self.diags.push(
            d.in_file(self.file)
                .at(line, col)
                .until(end_line, end_col)
                .with_path(path.clone()),
        );
        Last(&mut self.diags)
    }
}

/// The diagnostic just pushed, to attach a help text to.
pub(crate) struct Last<'a>(&'a mut Vec<Diagnostic>);

impl Last<'_> {
    pub(crate) fn help(self, help: impl Into<String>) {
        if let Some(d) = self.0.last_mut() {
            d.help = Some(help.into());
        }
    }
}

/// A table being read, with its path and span.
pub(crate) struct Table<'t, 'i> {
    pub(crate) table: &'t DeTable<'i>,
    pub(crate) path: Path,
    pub(crate) span: Range<usize>,
}

impl<'t, 'i> Table<'t, 'i> {
    /// Reports keys outside `known`.
    pub(crate) fn deny_unknown(&self, cx: &mut Cx<'_>, known: &[&str]) {
        self.deny_unknown_but(cx, known, &[]);
    }

    /// Reports keys outside `known`, leaving those in `reported` (already
    /// refused by the caller with a more precise diagnostic).
    pub(crate) fn deny_unknown_but(&self, cx: &mut Cx<'_>, known: &[&str], reported: &[&str]) {
        for key in self.table.keys() {
            let name: &str = key.get_ref();
            if !known.contains(&name) && !reported.contains(&name) {
                let help = match nearest(name, known) {
                    Some(k) => format!("did you mean `{k}`? expected one of: {}", known.join(", ")),
                    None => format!("expected one of: {}", known.join(", ")),
                };
                cx.error(
                    "unknown_key",
                    &key.span(),
                    &self.path.key(name),
                    format!("unknown key `{name}`"),
                )
                .help(help);
            }
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&'t Spanned<DeValue<'i>>> {
        self.table.get(key)
    }

    pub(crate) fn str(&self, cx: &mut Cx<'_>, key: &str) -> Option<(String, Range<usize>)> {
        let v = self.get(key)?;
        match v.get_ref() {
            DeValue::String(s) => Some((s.to_string(), v.span())),
            other => {
                type_error(cx, &v.span(), &self.path.key(key), "a string", other);
                None
            }
        }
    }

    pub(crate) fn bool(&self, cx: &mut Cx<'_>, key: &str) -> Option<bool> {
        let v = self.get(key)?;
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                type_error(cx, &v.span(), &self.path.key(key), "a boolean", other);
                None
            }
        }
    }

    /// A non-negative integer.
    pub(crate) fn uint(&self, cx: &mut Cx<'_>, key: &str) -> Option<u64> {
        let v = self.get(key)?;
        let path = self.path.key(key);
        match v.get_ref() {
            DeValue::Integer(i) => match u64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => Some(n),
                Err(_) => {
                    cx.error(
                        "invalid_value",
                        &v.span(),
                        &path,
                        "expected a non-negative integer",
                    );
                    None
                }
            },
            other => {
                type_error(cx, &v.span(), &path, "an integer", other);
                None
            }
        }
    }

    /// A string or an integer, returned as text (sizes and durations).
    pub(crate) fn quantity(&self, cx: &mut Cx<'_>, key: &str) -> Option<(String, Range<usize>)> {
        let v = self.get(key)?;
        match v.get_ref() {
            DeValue::String(s) => Some((s.to_string(), v.span())),
            DeValue::Integer(i) if i.radix() == 10 => Some((i.as_str().to_owned(), v.span())),
            other => {
                type_error(
                    cx,
                    &v.span(),
                    &self.path.key(key),
                    "a string such as \"4GiB\" or an integer",
                    other,
                );
                None
            }
        }
    }

    pub(crate) fn table(&self, cx: &mut Cx<'_>, key: &str) -> Option<Table<'t, 'i>> {
        let v = self.get(key)?;
        let path = self.path.key(key);
        match v.get_ref() {
            DeValue::Table(t) => Some(Table {
                table: t,
                path,
                span: v.span(),
            }),
            other => {
                type_error(cx, &v.span(), &path, "a table", other);
                None
            }
        }
    }

    /// An array of strings, each with its path and span.
    pub(crate) fn str_array(
        &self,
        cx: &mut Cx<'_>,
        key: &str,
    ) -> Vec<(String, Range<usize>, Path)> {
        let mut out = Vec::new();
        let Some(v) = self.get(key) else {
            return out;
        };
        let path = self.path.key(key);
        let DeValue::Array(items) = v.get_ref() else {
            type_error(cx, &v.span(), &path, "an array of strings", v.get_ref());
            return out;
        };
        for (i, item) in items.iter().enumerate() {
            let p = path.index(i);
            match item.get_ref() {
                DeValue::String(s) => out.push((s.to_string(), item.span(), p)),
                other => type_error(cx, &item.span(), &p, "a string", other),
            }
        }
        out
    }

    /// An array whose items are each a string or a table (relay routes).
    pub(crate) fn str_or_table_array(&self, cx: &mut Cx<'_>, key: &str) -> Vec<Item<'t, 'i>> {
        let mut out = Vec::new();
        let Some(v) = self.get(key) else {
            return out;
        };
        let path = self.path.key(key);
        let DeValue::Array(items) = v.get_ref() else {
            type_error(
                cx,
                &v.span(),
                &path,
                "an array of strings and tables",
                v.get_ref(),
            );
            return out;
        };
        for (i, item) in items.iter().enumerate() {
            let p = path.index(i);
            match item.get_ref() {
                DeValue::String(s) => out.push(Item::Str(s.to_string(), item.span(), p)),
                DeValue::Table(t) => out.push(Item::Table(Table {
                    table: t,
                    path: p,
                    span: item.span(),
                })),
                other => type_error(cx, &item.span(), &p, "a string or a table", other),
            }
        }
        out
    }

    /// An array of tables (`[[x]]` or `x = [{..}]`).
    pub(crate) fn table_array(&self, cx: &mut Cx<'_>, key: &str) -> Vec<Table<'t, 'i>> {
        let mut out = Vec::new();
        let Some(v) = self.get(key) else {
            return out;
        };
        let path = self.path.key(key);
        let DeValue::Array(items) = v.get_ref() else {
            type_error(cx, &v.span(), &path, "an array of tables", v.get_ref());
            return out;
        };
        for (i, item) in items.iter().enumerate() {
            let p = path.index(i);
            match item.get_ref() {
                DeValue::Table(t) => out.push(Table {
                    table: t,
                    path: p,
                    span: item.span(),
                }),
                other => type_error(cx, &item.span(), &p, "a table", other),
            }
        }
        out
    }

    /// A table of string values (`{ CI = "1" }`).
    pub(crate) fn str_map(
        &self,
        cx: &mut Cx<'_>,
        key: &str,
    ) -> Vec<(String, String, Range<usize>, Path)> {
        let mut out = Vec::new();
        let Some(t) = self.table(cx, key) else {
            return out;
        };
        for (k, v) in t.table {
            let p = t.path.key(k.get_ref().to_string());
            match v.get_ref() {
                DeValue::String(s) => {
                    out.push((k.get_ref().to_string(), s.to_string(), k.span(), p))
                }
                other => type_error(cx, &v.span(), &p, "a string", other),
            }
        }
        out
    }
}

/// One item of [`Table::str_or_table_array`].
pub(crate) enum Item<'t, 'i> {
    /// A string, with its span and path.
    Str(String, Range<usize>, Path),
    /// A table.
    Table(Table<'t, 'i>),
}

fn type_error(
    cx: &mut Cx<'_>,
    span: &Range<usize>,
    path: &Path,
    expected: &str,
    found: &DeValue<'_>,
) {
    cx.error(
        "type_mismatch",
        span,
        path,
        format!("expected {expected}, found {}", found.type_str()),
    );
}

pub(crate) use crate::suggest::nearest;
