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

fn lex(src: &str) -> Result<Vec<(Tok, Span)>, ParseError> {
    let bytes = src.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let start = i;
        let two = bytes.get(i..i + 2);
        let tok = match b {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
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
            b'a'..=b'z' => {
                let mut j = i + 1;
                while matches!(bytes.get(j), Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-')) {
                    j += 1;
                }
                let word = src.get(i..j).unwrap_or("");
                i = j;
                match word {
                    "true" => Tok::Lit(Value::Bool(true)),
                    "false" => Tok::Lit(Value::Bool(false)),
                    "null" => Tok::Lit(Value::Null),
                    _ => Tok::Ident(word.to_owned()),
                }
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
            '\\' => match chars.next() {
                Some((_, '\\')) => out.push('\\'),
                Some((_, '\'')) => out.push('\''),
                _ => {
                    return Err(err(
                        "only \\\\ and \\' are escapes in single-quoted strings",
                        start + 1 + k,
                    ));
                }
            },
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
    let n: serde_json::Number =
        serde_json::from_str(text).map_err(|_| err("invalid number", start))?;
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
                        // `true`/`false`/`null` are literals, but fine as path segments.
                        Some((Tok::Lit(Value::Bool(b)), s)) => {
                            segments.push(b.to_string());
                            end = s.end;
                        }
                        Some((Tok::Lit(Value::Null), s)) => {
                            segments.push("null".to_owned());
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

    fn json_literal(&mut self) -> Result<Value, ParseError> {
        self.enter()?;
        let at = self.offset();
        let v = match self.next() {
            Some((Tok::Lit(v), _)) => v,
            Some((Tok::LBracket, _)) => {
                let mut items = Vec::new();
                if self.peek() == Some(&Tok::RBracket) {
                    self.pos += 1;
                } else {
                    loop {
                        items.push(self.json_literal()?);
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
                        let value = self.json_literal()?;
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
            let close = find_close(after).ok_or_else(|| TemplateError {
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
                TemplatePart::Expr { expr, .. } => match eval(expr, context)? {
                    Value::String(s) => out.push_str(&s),
                    other => out.push_str(&other.to_string()),
                },
            }
        }
        Ok(Value::String(out))
    }
}

/// The offset of the `}}` closing an expression, skipping string literals
/// and the braces of object literals.
fn find_close(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    while let Some(&b) = bytes.get(i) {
        match quote {
            Some(q) => {
                if b == b'\\' {
                    i += 1;
                } else if b == q {
                    quote = None;
                }
            }
            None => match b {
                b'"' | b'\'' => quote = Some(b),
                b'{' => depth += 1,
                b'}' if depth == 0 && bytes.get(i + 1) == Some(&b'}') => return Some(i),
                b'}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        i += 1;
    }
    None
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
        assert_eq!(ev("-1.5e3", &c), json!(-1500.0));
        assert_eq!(
            ev(r#"["a", 1, {"k": null}]"#, &c),
            json!(["a", 1, {"k": null}])
        );
        assert!(parse("01").is_err());
        assert!(parse("'a\\n'").is_err());
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
        let t = Template::parse("${{ {\"a\": {\"b\": 1}} }}").unwrap();
        assert_eq!(t.eval(&c).unwrap(), json!({"a": {"b": 1}}));
        let e = Template::parse("x ${{ 'a' == }}").unwrap_err();
        assert_eq!(e.offset, 13);
    }
}
