//! The `${{ … }}` expression language of hub workflows: lexer, parser, AST
//! and a pure evaluator.
//!
//! Grammar (spec §2): literals `true`, `false`, `null`, JSON numbers,
//! `"…"` strings with JSON escapes and `'…'` strings escaping only `\\` and
//! `\'`; paths of identifiers `[a-z][a-z0-9_-]*` joined by `.`; array and
//! object literals holding only JSON literals; prefix `!`; binary operators
//! by increasing precedence `??`, `||`, `&&`, `==`/`!=`, all
//! left-associative; parentheses.
//!
//! Semantics are JavaScript-like: [`truthy`] is false only for `false`,
//! `null`, `0` and `""`; `&&`/`||` return an operand; `a ?? b` is `b` only
//! when `a` is null; `==` compares type and JSON text.
//!
//! Lexing follows the Hub's tokenizer (`workflows/expression.ts`) where it
//! is quirky: `true`, `false` and `null` are read as literals wherever
//! they begin a word, so `nullable` is `null` followed by `able` (no
//! identifier or path segment can start with them); a backslash before
//! anything but `\\` or `'` in a single-quoted string stays as written;
//! whitespace is JavaScript's `\s`. A template ends each expression at
//! the first `}}` after `${{`, as the Hub does, even inside a string or an
//! object literal. Fields the Hub reads as one expression (`if`, `values`)
//! go through [`Template::parse_unwrapped`]: the whole value, trimmed, is
//! the expression, optionally wrapped in one `${{ … }}`.

use std::fmt;

use serde_json::Value;

/// The longest expression source palisade parses, in bytes.
pub const MAX_EXPR_BYTES: usize = 4096;
/// The deepest nesting of an expression (parentheses, `!`, operators).
pub const MAX_EXPR_DEPTH: usize = 32;

/// A byte range inside an expression's source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

/// A binary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `??`: the right operand when the left is null.
    Coalesce,
    /// `||`: the left operand when truthy, else the right.
    Or,
    /// `&&`: the left operand when falsy, else the right.
    And,
    /// `==`: same type and same JSON text.
    Eq,
    /// `!=`: the negation of `==`.
    Ne,
}

impl BinOp {
    fn precedence(self) -> u8 {
        match self {
            Self::Coalesce => 1,
            Self::Or => 2,
            Self::And => 3,
            Self::Eq | Self::Ne => 4,
        }
    }

    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Coalesce => "??",
            Self::Or => "||",
            Self::And => "&&",
            Self::Eq => "==",
            Self::Ne => "!=",
        }
    }
}

/// An expression node.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A JSON literal (scalars, or arrays/objects of literals).
    Literal {
        /// The value.
        value: Value,
        /// Where it was written.
        span: Span,
    },
    /// A dotted path such as `steps.classify.outputs.kind`.
    Path {
        /// The segments, in order.
        segments: Vec<String>,
        /// Where it was written.
        span: Span,
    },
    /// `!operand`.
    Not {
        /// The negated expression.
        operand: Box<Expr>,
        /// Where it was written.
        span: Span,
    },
    /// `lhs op rhs`.
    Binary {
        /// The operator.
        op: BinOp,
        /// Left operand.
        lhs: Box<Expr>,
        /// Right operand.
        rhs: Box<Expr>,
        /// Where it was written.
        span: Span,
    },
}

impl Expr {
    /// Where this node was written.
    pub fn span(&self) -> Span {
        match self {
            Self::Literal { span, .. }
            | Self::Path { span, .. }
            | Self::Not { span, .. }
            | Self::Binary { span, .. } => *span,
        }
    }

    /// Every path read by this expression, in source order.
    pub fn paths(&self) -> Vec<(&[String], Span)> {
        let mut out = Vec::new();
        self.collect_paths(&mut out);
        out
    }

    fn collect_paths<'a>(&'a self, out: &mut Vec<(&'a [String], Span)>) {
        match self {
            Self::Literal { .. } => {}
            Self::Path { segments, span } => out.push((segments, *span)),
            Self::Not { operand, .. } => operand.collect_paths(out),
            Self::Binary { lhs, rhs, .. } => {
                lhs.collect_paths(out);
                rhs.collect_paths(out);
            }
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Literal { value, .. } => write!(f, "{value}"),
            Self::Path { segments, .. } => f.write_str(&segments.join(".")),
            Self::Not { operand, .. } => write!(f, "!({operand})"),
            Self::Binary { op, lhs, rhs, .. } => write!(f, "({lhs} {} {rhs})", op.as_str()),
        }
    }
}

/// Why an expression could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ParseError {
    /// What is wrong.
    pub message: String,
    /// Byte offset inside the expression source.
    pub offset: usize,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at offset {})", self.message, self.offset)
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Lit(Value),
    Ident(String),
    Op(BinOp),
    Bang,
    Dot,
    LParen,
    RParen,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    Comma,
    Colon,
}

fn err(message: impl Into<String>, offset: usize) -> ParseError {
    ParseError {
        message: message.into(),
        offset,
    }
}

/// JavaScript's `\s` (and `String.prototype.trim`'s whitespace): Unicode
/// `White_Space` but U+0085, plus U+FEFF.
pub(crate) fn js_space(c: char) -> bool {
    (c.is_whitespace() && c != '\u{85}') || c == '\u{feff}'
}

fn lex(src: &str) -> Result<Vec<(Tok, Span)>, ParseError> {
    let bytes = src.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let start = i;
        let two = bytes.get(i..i + 2);
        let tok = match b {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => {
                i += 1;
                continue;
            }
            0x80.. => {
                let c = src.get(i..).and_then(|r| r.chars().next()).unwrap_or('?');
                if js_space(c) {
                    i += c.len_utf8();
                    continue;
                }
                return Err(err(format!("unexpected character {c:?}"), i));
            }
            b'.' => {
                i += 1;
                Tok::Dot
            }
            b'(' => {
                i += 1;
                Tok::LParen
            }
            b')' => {
                i += 1;
                Tok::RParen
            }
            b'[' => {
                i += 1;
                Tok::LBracket
            }
            b']' => {
                i += 1;
                Tok::RBracket
            }
            b'{' => {
                i += 1;
                Tok::LBrace
            }
            b'}' => {
                i += 1;
                Tok::RBrace
            }
            b',' => {
                i += 1;
                Tok::Comma
            }
            b':' => {
                i += 1;
                Tok::Colon
            }
            _ if two == Some(b"==") => {
                i += 2;
                Tok::Op(BinOp::Eq)
            }
            _ if two == Some(b"!=") => {
                i += 2;
                Tok::Op(BinOp::Ne)
            }
            _ if two == Some(b"&&") => {
                i += 2;
                Tok::Op(BinOp::And)
            }
            _ if two == Some(b"||") => {
                i += 2;
                Tok::Op(BinOp::Or)
            }
            _ if two == Some(b"??") => {
                i += 2;
                Tok::Op(BinOp::Coalesce)
            }
            b'!' => {
                i += 1;
                Tok::Bang
            }
            b'"' => {
                let (s, next) = lex_double(src, i)?;
                i = next;
                Tok::Lit(Value::String(s))
            }
            b'\'' => {
                let (s, next) = lex_single(src, i)?;
                i = next;
                Tok::Lit(Value::String(s))
            }
            b'-' | b'0'..=b'9' => {
                let (n, next) = lex_number(src, i)?;
                i = next;
                Tok::Lit(Value::Number(n))
            }
            _ if ["true", "false", "null"]
                .iter()
                .any(|k| bytes.get(i..).is_some_and(|r| r.starts_with(k.as_bytes()))) =>
            {
                // The Hub's tokenizer tries the keywords first, with no word
                // boundary: `nullable` is `null` then `able`.
                let (word, value) = if bytes.get(i..).is_some_and(|r| r.starts_with(b"true")) {
                    (4, Value::Bool(true))
                } else if bytes.get(i..).is_some_and(|r| r.starts_with(b"false")) {
                    (5, Value::Bool(false))
                } else {
                    (4, Value::Null)
                };
                i += word;
                Tok::Lit(value)
            }
            b'a'..=b'z' => {
                let mut j = i + 1;
                while matches!(bytes.get(j), Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-')) {
                    j += 1;
                }
                let word = src.get(i..j).unwrap_or("");
                i = j;
                Tok::Ident(word.to_owned())
            }
            _ => {
                let c = src.get(i..).and_then(|r| r.chars().next()).unwrap_or('?');
                return Err(err(format!("unexpected character {c:?}"), i));
            }
        };
        toks.push((tok, Span { start, end: i }));
    }
    Ok(toks)
}

fn lex_double(src: &str, start: usize) -> Result<(String, usize), ParseError> {
    let bytes = src.as_bytes();
    let mut j = start + 1;
    loop {
        match bytes.get(j) {
            None => return Err(err("unterminated string", start)),
            Some(b'\\') => j += 2,
            Some(b'"') => break,
            Some(_) => j += 1,
        }
    }
    let raw = src
        .get(start..=j)
        .ok_or_else(|| err("unterminated string", start))?;
    let s: String =
        serde_json::from_str(raw).map_err(|_| err("invalid escape in string", start))?;
    Ok((s, j + 1))
}

fn lex_single(src: &str, start: usize) -> Result<(String, usize), ParseError> {
    let mut out = String::new();
    let mut chars = src.get(start + 1..).unwrap_or("").char_indices();
    while let Some((k, c)) = chars.next() {
        match c {
            '\'' => return Ok((out, start + 1 + k + 1)),
            // Only `\\` and `\'` are escapes; any other backslash pair
            // stays as written, as in the Hub (`'a\n'` is `a\n`).
            '\\' => match chars.next() {
                Some((_, c @ ('\\' | '\''))) => out.push(c),
                Some((_, c)) if !matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}') => {
                    out.push('\\');
                    out.push(c);
                }
                _ => return Err(err("unterminated string", start + 1 + k)),
            },
            '\n' | '\r' | '\u{2028}' | '\u{2029}' => {
                return Err(err("unterminated string", start));
            }
            c => out.push(c),
        }
    }
    Err(err("unterminated string", start))
}

fn lex_number(src: &str, start: usize) -> Result<(serde_json::Number, usize), ParseError> {
    let bytes = src.as_bytes();
    let mut j = start;
    if bytes.get(j) == Some(&b'-') {
        j += 1;
    }
    match bytes.get(j) {
        Some(b'0') => j += 1,
        Some(b'1'..=b'9') => {
            while bytes.get(j).is_some_and(u8::is_ascii_digit) {
                j += 1;
            }
        }
        _ => return Err(err("invalid number", start)),
    }
    if bytes.get(j) == Some(&b'.') {
        j += 1;
        if !bytes.get(j).is_some_and(u8::is_ascii_digit) {
            return Err(err("invalid number", start));
        }
        while bytes.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
    }
    if matches!(bytes.get(j), Some(b'e' | b'E')) {
        j += 1;
        if matches!(bytes.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        if !bytes.get(j).is_some_and(u8::is_ascii_digit) {
            return Err(err("invalid number", start));
        }
        while bytes.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
    }
    if bytes
        .get(j)
        .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
    {
        return Err(err("invalid number", start));
    }
    let text = src.get(start..j).unwrap_or("");
    // A JavaScript number: `1.0` is 1, as `Number("1.0")` is.
    let n = text
        .parse::<f64>()
        .ok()
        .and_then(crate::yaml::js_number)
        .ok_or_else(|| err("invalid number", start))?;
    Ok((n, j))
}

struct Parser {
    toks: Vec<(Tok, Span)>,
    pos: usize,
    end: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(t, _)| t)
    }

    fn offset(&self) -> usize {
        self.toks.get(self.pos).map_or(self.end, |(_, s)| s.start)
    }

    fn next(&mut self) -> Option<(Tok, Span)> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_EXPR_DEPTH {
            return Err(err(
                format!("expression nests deeper than {MAX_EXPR_DEPTH} levels"),
                self.offset(),
            ));
        }
        Ok(())
    }

    fn expr(&mut self, min_prec: u8) -> Result<Expr, ParseError> {
        self.enter()?;
        let mut lhs = self.unary()?;
        while let Some(Tok::Op(op)) = self.peek() {
            let op = *op;
            if op.precedence() < min_prec {
                break;
            }
            self.pos += 1;
            let rhs = self.expr(op.precedence() + 1)?;
            let span = Span {
                start: lhs.span().start,
                end: rhs.span().end,
            };
            lhs = Expr::Binary {
                op,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
                span,
            };
        }
        self.depth -= 1;
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        let at = self.offset();
        match self.next() {
            Some((Tok::Bang, span)) => {
                self.enter()?;
                let operand = self.unary()?;
                self.depth -= 1;
                let span = Span {
                    start: span.start,
                    end: operand.span().end,
                };
                Ok(Expr::Not {
                    operand: Box::new(operand),
                    span,
                })
            }
            Some((Tok::LParen, _)) => {
                let inner = self.expr(0)?;
                match self.next() {
                    Some((Tok::RParen, _)) => Ok(inner),
                    _ => Err(err("expected `)`", self.offset().min(self.end))),
                }
            }
            Some((Tok::Lit(value), span)) => Ok(Expr::Literal { value, span }),
            Some((Tok::LBracket | Tok::LBrace, _)) => {
                self.pos -= 1;
                let start = at;
                let value = self.json_literal()?;
                let end = self.toks.get(self.pos - 1).map_or(self.end, |(_, s)| s.end);
                Ok(Expr::Literal {
                    value,
                    span: Span { start, end },
                })
            }
            Some((Tok::Ident(first), span)) => {
                let mut segments = vec![first];
                let mut end = span.end;
                while self.peek() == Some(&Tok::Dot) {
                    self.pos += 1;
                    match self.next() {
                        Some((Tok::Ident(seg), s)) => {
                            segments.push(seg);
                            end = s.end;
                        }
                        _ => {
                            return Err(err(
                                "expected a path segment ([a-z][a-z0-9_-]*) after `.`",
                                self.toks
                                    .get(self.pos - 1)
                                    .map_or(self.end, |(_, s)| s.start),
                            ));
                        }
                    }
                }
                Ok(Expr::Path {
                    segments,
                    span: Span {
                        start: span.start,
                        end,
                    },
                })
            }
            Some(_) => Err(err("expected a value, a path, `!` or `(`", at)),
            None => Err(err("unexpected end of expression", self.end)),
        }
    }

    /// One element of an array or object literal: anything the prefix
    /// grammar reads (so `(1)` too, as in the Hub) that is a literal.
    fn element(&mut self) -> Result<Value, ParseError> {
        let at = self.offset();
        match self.unary()? {
            Expr::Literal { value, .. } => Ok(value),
            _ => Err(err(
                "array and object literals may contain only JSON literals",
                at,
            )),
        }
    }

    fn json_literal(&mut self) -> Result<Value, ParseError> {
        self.enter()?;
        let at = self.offset();
        let v = match self.next() {
            Some((Tok::LBracket, _)) => {
                let mut items = Vec::new();
                if self.peek() == Some(&Tok::RBracket) {
                    self.pos += 1;
                } else {
                    loop {
                        items.push(self.element()?);
                        match self.next() {
                            Some((Tok::Comma, _)) => {}
                            Some((Tok::RBracket, _)) => break,
                            _ => return Err(err("expected `,` or `]`", self.offset())),
                        }
                    }
                }
                Value::Array(items)
            }
            Some((Tok::LBrace, _)) => {
                let mut map = serde_json::Map::new();
                if self.peek() == Some(&Tok::RBrace) {
                    self.pos += 1;
                } else {
                    loop {
                        let key_at = self.offset();
                        let key = match self.next() {
                            Some((Tok::Lit(Value::String(s)), _)) => s,
                            _ => return Err(err("object keys must be strings", key_at)),
                        };
                        if self.next().map(|(t, _)| t) != Some(Tok::Colon) {
                            return Err(err("expected `:`", self.offset()));
                        }
                        let value = self.element()?;
                        map.insert(key, value);
                        match self.next() {
                            Some((Tok::Comma, _)) => {}
                            Some((Tok::RBrace, _)) => break,
                            _ => return Err(err("expected `,` or `}`", self.offset())),
                        }
                    }
                }
                Value::Object(map)
            }
            _ => {
                return Err(err(
                    "array and object literals may contain only JSON literals",
                    at,
                ));
            }
        };
        self.depth -= 1;
        Ok(v)
    }
}

/// Parses the inside of one `${{ … }}`.
pub fn parse(src: &str) -> Result<Expr, ParseError> {
    if src.len() > MAX_EXPR_BYTES {
        return Err(err(
            format!("expression longer than {MAX_EXPR_BYTES} bytes"),
            0,
        ));
    }
    let toks = lex(src)?;
    if toks.is_empty() {
        return Err(err("empty expression", 0));
    }
    let mut p = Parser {
        toks,
        pos: 0,
        end: src.len(),
        depth: 0,
    };
    let e = p.expr(0)?;
    if p.pos < p.toks.len() {
        return Err(err("unexpected token after expression", p.offset()));
    }
    Ok(e)
}

/// One piece of a [`Template`].
#[derive(Clone, Debug, PartialEq)]
pub enum TemplatePart {
    /// Literal text.
    Text(String),
    /// An interpolated expression, with the byte offset of its source
    /// (just after `${{`) inside the template.
    Expr {
        /// The parsed expression.
        expr: Expr,
        /// Byte offset of the expression source inside the template.
        offset: usize,
    },
}

/// A string that may contain `${{ … }}` interpolations.
#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    /// The authored text.
    pub source: String,
    /// The text split into literal and expression parts.
    pub parts: Vec<TemplatePart>,
}

/// Why a template could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TemplateError {
    /// What is wrong.
    pub message: String,
    /// Byte offset inside the template.
    pub offset: usize,
}

impl Template {
    /// Parses `source`, splitting out every `${{ … }}`.
    pub fn parse(source: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut rest = source;
        let mut base = 0;
        while let Some(open) = rest.find("${{") {
            if open > 0 {
                parts.push(TemplatePart::Text(
                    rest.get(..open).unwrap_or("").to_owned(),
                ));
            }
            let inner_start = open + 3;
            let after = rest.get(inner_start..).unwrap_or("");
            let close = after.find("}}").ok_or_else(|| TemplateError {
                message: "unterminated `${{`: missing `}}`".to_owned(),
                offset: base + open,
            })?;
            let inner = after.get(..close).unwrap_or("");
            let expr = parse(inner).map_err(|e| TemplateError {
                message: e.message,
                offset: base + inner_start + e.offset,
            })?;
            parts.push(TemplatePart::Expr {
                expr,
                offset: base + inner_start,
            });
            let consumed = inner_start + close + 2;
            rest = rest.get(consumed..).unwrap_or("");
            base += consumed;
        }
        if !rest.is_empty() {
            parts.push(TemplatePart::Text(rest.to_owned()));
        }
        Ok(Self {
            source: source.to_owned(),
            parts,
        })
    }

    /// Parses a field the Hub reads as exactly one expression (`if`,
    /// `values`): the value, trimmed, is the expression, written bare
    /// (`paseo.inputs.x == 'a'`) or wrapped in one `${{ … }}` that ends
    /// the value. Text around it, or a second expression, is refused.
    pub fn parse_unwrapped(source: &str) -> Result<Self, TemplateError> {
        let lead = source.len() - source.trim_start_matches(js_space).len();
        let trimmed = source.trim_matches(js_space);
        let (inner, offset) = match trimmed.strip_prefix("${{") {
            None => (trimmed, lead),
            Some(rest) => {
                let Some(body) = rest.strip_suffix("}}") else {
                    return Err(TemplateError {
                        message: "unterminated expression: a value that starts with `${{` must end with `}}` and hold one expression".to_owned(),
                        offset: lead,
                    });
                };
                let inner_lead = body.len() - body.trim_start_matches(js_space).len();
                (body.trim_matches(js_space), lead + 3 + inner_lead)
            }
        };
        let expr = parse(inner).map_err(|e| TemplateError {
            message: e.message,
            offset: offset + e.offset,
        })?;
        Ok(Self {
            source: source.to_owned(),
            parts: vec![TemplatePart::Expr { expr, offset }],
        })
    }

    /// Parses a step `env` value as the Hub's connection templates
    /// (`config/connection-template.ts`): text with any number of
    /// `${{ paseo.connections.<slug>.<value> }}`, where `<slug>` is
    /// `[a-z0-9]+(-[a-z0-9]+)*` and `<value>` `[a-z][a-z0-9_-]*`, and
    /// nothing else inside `${{ … }}`. Each reference becomes a path
    /// expression `paseo.connections.<slug>.<value>`.
    pub fn parse_connections(source: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut cursor = 0;
        while let Some(found) = source.get(cursor..).and_then(|r| r.find("${{")) {
            let start = cursor + found;
            let inner_start = start + 3;
            let Some(close) = source.get(inner_start..).and_then(|r| r.find("}}")) else {
                return Err(TemplateError {
                    message: "unterminated `${{`: missing `}}`; expected paseo.connections.<slug>.<value>".to_owned(),
                    offset: start,
                });
            };
            if start > cursor {
                parts.push(TemplatePart::Text(
                    source.get(cursor..start).unwrap_or("").to_owned(),
                ));
            }
            let inner = source.get(inner_start..inner_start + close).unwrap_or("");
            let lead = inner.len() - inner.trim_start_matches(js_space).len();
            let reference = inner.trim_matches(js_space);
            let segments = connection_reference(reference).ok_or_else(|| TemplateError {
                message: format!(
                    "unsupported interpolation ${{{{{inner}}}}}; env values may contain only ${{{{ paseo.connections.<slug>.<value> }}}}"
                ),
                offset: start,
            })?;
            parts.push(TemplatePart::Expr {
                expr: Expr::Path {
                    segments,
                    span: Span {
                        start: lead,
                        end: lead + reference.len(),
                    },
                },
                offset: inner_start,
            });
            cursor = inner_start + close + 2;
        }
        if cursor < source.len() {
            parts.push(TemplatePart::Text(
                source.get(cursor..).unwrap_or("").to_owned(),
            ));
        }
        Ok(Self {
            source: source.to_owned(),
            parts,
        })
    }

    /// Whether the template contains at least one expression.
    pub fn has_expressions(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, TemplatePart::Expr { .. }))
    }

    /// The expression when the whole template (ignoring surrounding
    /// whitespace) is exactly one `${{ … }}`.
    pub fn single_expression(&self) -> Option<&Expr> {
        let mut found = None;
        for part in &self.parts {
            match part {
                TemplatePart::Text(t) if t.trim().is_empty() => {}
                TemplatePart::Expr { expr, .. } if found.is_none() => found = Some(expr),
                _ => return None,
            }
        }
        found
    }

    /// Every expression in the template with its byte offset.
    pub fn expressions(&self) -> impl Iterator<Item = (&Expr, usize)> {
        self.parts.iter().filter_map(|p| match p {
            TemplatePart::Expr { expr, offset } => Some((expr, *offset)),
            TemplatePart::Text(_) => None,
        })
    }

    /// Evaluates the template: a single expression yields its value; text
    /// with interpolations yields a string (strings inserted raw, other
    /// values as JSON).
    pub fn eval(&self, context: &Value) -> Result<Value, EvalError> {
        if let Some(e) = self.single_expression() {
            return eval(e, context);
        }
        let mut out = String::new();
        for part in &self.parts {
            match part {
                TemplatePart::Text(t) => out.push_str(t),
                TemplatePart::Expr { expr, .. } => {
                    out.push_str(&interpolated(&eval(expr, context)?));
                }
            }
        }
        Ok(Value::String(out))
    }
}

/// The segments of `paseo.connections.<slug>.<value>`, exactly.
fn connection_reference(s: &str) -> Option<Vec<String>> {
    let rest = s.strip_prefix("paseo.connections.")?;
    let (slug, value) = rest.split_once('.')?;
    let slug_ok = !slug.is_empty()
        && slug.split('-').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    let value_ok = value.starts_with(|c: char| c.is_ascii_lowercase())
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    (slug_ok && value_ok).then(|| {
        ["paseo", "connections", slug, value]
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    })
}

/// A value as the Hub interpolates it into text: a string raw, anything
/// else as JavaScript's `JSON.stringify` writes it (`1.0` as `1`, `1e21`
/// as `1e+21`).
pub fn interpolated(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => json_text(other),
    }
}

/// JavaScript's `JSON.stringify` of a value (numbers as JavaScript writes
/// them, keys in map order).
pub fn json_text(v: &Value) -> String {
    let mut out = String::new();
    js_stringify(v, &mut out);
    out
}

/// JavaScript's `Number.prototype.toString` for a finite number.
fn js_number_text(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    if f == 0.0 {
        return "0".to_owned();
    }
    let abs = f.abs();
    if (1e-7..1e21).contains(&abs) {
        // Rust's shortest round-trip digits, in fixed notation, as JS.
        format!("{f}")
    } else {
        // Exponent form: JS writes `1e+21` and `1.5e-8`.
        let e = format!("{f:e}");
        match e.split_once('e') {
            Some((m, x)) if !x.starts_with('-') => format!("{m}e+{x}"),
            _ => e,
        }
    }
}

fn js_stringify(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&js_number_text(n)),
        Value::String(s) => out.push_str(&Value::String(s.clone()).to_string()),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                js_stringify(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                js_stringify(item, out);
            }
            out.push('}');
        }
    }
}

/// Why an expression could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EvalError {
    /// The expression reads `steps.<id>` and step `<id>` did not succeed
    /// (it is absent from the context's `steps`).
    OutputUnavailable {
        /// The step id.
        step: String,
    },
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutputUnavailable { step } => write!(f, "output from step {step} is unavailable"),
        }
    }
}

/// JavaScript-like truthiness: everything but `false`, `null`, `0` and `""`.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// `==` of the language: same JSON type and same JSON text (numbers compare
/// by value, so `1 == 1.0`).
pub fn loose_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// Evaluates `expr` against `context`.
///
/// The context is a JSON object shaped like the Hub's: `paseo.prompt`,
/// `paseo.context`, `paseo.inputs.<name>`, `paseo.execution.id`,
/// `values.<name>`, and `steps.<id>.outputs` for each step that succeeded.
/// A missing path reads `null`, except `steps.<id>` for a step absent from
/// `steps`, which is [`EvalError::OutputUnavailable`].
pub fn eval(expr: &Expr, context: &Value) -> Result<Value, EvalError> {
    match expr {
        Expr::Literal { value, .. } => Ok(value.clone()),
        Expr::Path { segments, .. } => {
            if let (Some("steps"), Some(step)) =
                (segments.first().map(String::as_str), segments.get(1))
            {
                let present = context
                    .get("steps")
                    .and_then(|s| s.get(step))
                    .is_some_and(|s| !s.is_null());
                if !present {
                    return Err(EvalError::OutputUnavailable { step: step.clone() });
                }
            }
            let mut cur = context;
            for seg in segments {
                match cur.get(seg) {
                    Some(next) => cur = next,
                    None => return Ok(Value::Null),
                }
            }
            Ok(cur.clone())
        }
        Expr::Not { operand, .. } => Ok(Value::Bool(!truthy(&eval(operand, context)?))),
        Expr::Binary { op, lhs, rhs, .. } => {
            let l = eval(lhs, context)?;
            match op {
                BinOp::And => {
                    if truthy(&l) {
                        eval(rhs, context)
                    } else {
                        Ok(l)
                    }
                }
                BinOp::Or => {
                    if truthy(&l) {
                        Ok(l)
                    } else {
                        eval(rhs, context)
                    }
                }
                BinOp::Coalesce => {
                    if l.is_null() {
                        eval(rhs, context)
                    } else {
                        Ok(l)
                    }
                }
                BinOp::Eq => Ok(Value::Bool(loose_eq(&l, &eval(rhs, context)?))),
                BinOp::Ne => Ok(Value::Bool(!loose_eq(&l, &eval(rhs, context)?))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(src: &str, ctx: &Value) -> Value {
        eval(&parse(src).unwrap(), ctx).unwrap()
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(
            parse("a ?? b || c && d == e").unwrap().to_string(),
            "(a ?? (b || (c && (d == e))))"
        );
        assert_eq!(parse("a == b == c").unwrap().to_string(), "((a == b) == c)");
        assert_eq!(parse("!a && b").unwrap().to_string(), "(!(a) && b)");
        assert_eq!(
            parse("(a || b) && c").unwrap().to_string(),
            "((a || b) && c)"
        );
        assert_eq!(parse("a-b.c_d").unwrap().to_string(), "a-b.c_d");
    }

    #[test]
    fn literals() {
        let c = json!({});
        assert_eq!(ev("'it\\'s'", &c), json!("it's"));
        assert_eq!(ev(r#""a\nb""#, &c), json!("a\nb"));
        // JavaScript numbers: an integral value is the integer.
        assert_eq!(ev("-1.5e3", &c), json!(-1500));
        assert_eq!(ev("2.5", &c), json!(2.5));
        assert_eq!(
            ev(r#"["a", 1, {"k": null}]"#, &c),
            json!(["a", 1, {"k": null}])
        );
        assert!(parse("01").is_err());
        // Only `\\` and `\'` are escapes; others stay as written (Hub).
        assert_eq!(ev("'a\\n\\'b\\\\'", &c), json!("a\\n'b\\"));
        assert!(parse("'a\\\nb'").is_err());
        assert!(parse("'a\nb'").is_err());
        // Parenthesised literals are literals inside arrays, as in the Hub.
        assert_eq!(ev("[(1), ('a')]", &c), json!([1, "a"]));
        assert!(parse("[!true]").is_err());
        assert!(parse("[1,]").is_err());
        assert!(parse("[a]").is_err());
        assert!(parse("a.").is_err());
        assert!(parse("A").is_err());
        assert!(parse("a b").is_err());
        assert!(parse("").is_err());
        assert!(parse(&"(".repeat(100)).is_err());
        assert!(parse(&"!".repeat(100)).is_err());
    }

    #[test]
    fn semantics() {
        let c = json!({"steps": {"classify": {"outputs": {"kind": "answer", "n": 0}}}, "paseo": {"inputs": {}}});
        assert_eq!(
            ev("steps.classify.outputs.kind == 'answer'", &c),
            json!(true)
        );
        assert_eq!(
            ev("steps.classify.outputs.kind != 'answer'", &c),
            json!(false)
        );
        assert_eq!(ev("steps.classify.outputs.n || 'x'", &c), json!("x"));
        assert_eq!(ev("steps.classify.outputs.n ?? 'x'", &c), json!(0));
        assert_eq!(ev("paseo.inputs.missing ?? 'd'", &c), json!("d"));
        assert_eq!(ev("'' && 1", &c), json!(""));
        assert_eq!(ev("1 == 1.0", &c), json!(true));
        assert_eq!(ev("1 == '1'", &c), json!(false));
        assert_eq!(ev("!null", &c), json!(true));
        assert_eq!(
            eval(&parse("steps.other.outputs.kind").unwrap(), &c),
            Err(EvalError::OutputUnavailable {
                step: "other".into()
            })
        );
        assert!(!truthy(&json!(0.0)));
        assert!(truthy(&json!([])));
    }

    #[test]
    fn templates() {
        let c = json!({"paseo": {"prompt": "hi"}, "values": {"n": 3}});
        let t = Template::parse("Request: ${{ paseo.prompt }} (${{ values.n }})").unwrap();
        assert_eq!(t.eval(&c).unwrap(), json!("Request: hi (3)"));
        let t = Template::parse("${{ values.n }}").unwrap();
        assert_eq!(t.eval(&c).unwrap(), json!(3));
        assert!(Template::parse("${{ values.n ").is_err());
        // An expression ends at the first `}}`, as in the Hub, even inside
        // an object literal; a field read as one expression has no such end.
        assert!(Template::parse("${{ {\"a\": {\"b\": 1}} }}").is_err());
        let t = Template::parse_unwrapped("${{ {\"a\": {\"b\": 1}} }}").unwrap();
        assert_eq!(t.eval(&c).unwrap(), json!({"a": {"b": 1}}));
        assert!(Template::parse("${{ 'a}}' }}").is_err());
        let t = Template::parse("${{ {\"a\": 1} }}").unwrap();
        assert_eq!(t.eval(&c).unwrap(), json!({"a": 1}));
        let e = Template::parse("x ${{ 'a' == }}").unwrap_err();
        assert_eq!(e.offset, 13);
    }

    #[test]
    fn unwrapped_fields_hold_exactly_one_expression() {
        let c = json!({"paseo": {"inputs": {"x": "a"}}});
        for src in [
            "paseo.inputs.x == 'a'",
            "  paseo.inputs.x == 'a'\n",
            "${{ paseo.inputs.x == 'a' }}",
            " ${{paseo.inputs.x == 'a'}} ",
            "true",
        ] {
            let t = Template::parse_unwrapped(src).unwrap();
            assert_eq!(t.eval(&c).unwrap(), json!(true), "{src:?}");
            assert!(t.single_expression().is_some());
            assert_eq!(t.source, src);
        }
        // The offset points at the expression inside the value.
        let t = Template::parse_unwrapped("  ${{  hello }}").unwrap();
        assert_eq!(t.expressions().next().map(|(_, o)| o), Some(7));
        assert_eq!(
            Template::parse_unwrapped("${{ 'a' == }}")
                .unwrap_err()
                .offset,
            10
        );
        // Text around the expression, or two of them, is refused.
        for src in [
            "${{ true }} and more",
            "x ${{ true }}",
            "${{ true }} ${{ false }}",
            "${{ true",
            "",
            "   ",
            "${{ }}",
        ] {
            assert!(Template::parse_unwrapped(src).is_err(), "{src:?}");
        }
        // Positive control: the same text is a fine template.
        assert!(Template::parse("${{ true }} and more").is_ok());
    }

    #[test]
    fn keywords_begin_words_as_in_the_hub() {
        // `true`/`false`/`null` are read first, with no word boundary.
        assert!(parse("paseo.inputs.nullable").is_err());
        assert!(parse("steps.a.outputs.true").is_err());
        assert!(parse("trueish").is_err());
        assert_eq!(ev("null", &json!({})), json!(null));
        // Positive controls: identifiers that merely contain them.
        assert_eq!(
            parse("paseo.inputs.is_null").unwrap().to_string(),
            "paseo.inputs.is_null"
        );
        assert_eq!(parse("values.untrue").unwrap().to_string(), "values.untrue");
    }

    #[test]
    fn javascript_whitespace_and_interpolation() {
        let c = json!({"values": {"n": 1.5, "big": 1e21, "o": {"a": [1.0, "x"]}}});
        assert_eq!(ev("\u{a0}true\u{feff}\u{3000}", &c), json!(true));
        assert!(parse("true\u{85}").is_err());
        assert_eq!(interpolated(&json!(1.0)), "1");
        assert_eq!(interpolated(&json!(1.5)), "1.5");
        assert_eq!(interpolated(&json!(1e21)), "1e+21");
        assert_eq!(interpolated(&json!(1.5e-8)), "1.5e-8");
        assert_eq!(interpolated(&json!(null)), "null");
        assert_eq!(interpolated(&json!("a\"b")), "a\"b");
        assert_eq!(interpolated(&json!({"a": [1.0, "x"]})), r#"{"a":[1,"x"]}"#);
        let t = Template::parse("n=${{ values.n }} ${{ values.big }} ${{ values.o }}").unwrap();
        assert_eq!(t.eval(&c).unwrap(), json!(r#"n=1.5 1e+21 {"a":[1,"x"]}"#));
    }

    #[test]
    fn connection_templates_as_the_hub_reads_them() {
        let t = Template::parse_connections("Bearer ${{ paseo.connections.1password.api-token }}!")
            .unwrap();
        let paths: Vec<String> = t
            .expressions()
            .flat_map(|(e, _)| e.paths().into_iter().map(|(p, _)| p.join(".")))
            .collect();
        assert_eq!(paths, ["paseo.connections.1password.api-token"]);
        assert_eq!(t.parts.len(), 3);
        // `null…` slugs are fine here, unlike in expressions.
        assert!(Template::parse_connections("${{paseo.connections.nullco.key}}").is_ok());
        assert!(Template::parse_connections("plain text }}").is_ok());
        for bad in [
            "${{ 'literal' }}",
            "${{ paseo.connections.a.b || 'x' }}",
            "${{ paseo.inputs.x }}",
            "${{ paseo.connections.A.b }}",
            "${{ paseo.connections.a-.b }}",
            "${{ paseo.connections.a.1b }}",
            "${{ paseo.connections.a.b.c }}",
            "${{ paseo.connections.a.b",
        ] {
            assert!(Template::parse_connections(bad).is_err(), "{bad}");
        }
    }
}
