//! Invocation inputs: the leading `name=value` tokens of a message that set a
//! trigger's declared inputs (spec §2, Hub `triggers/invocation.ts`).
//!
//! After the bot mention (and the `pattern`/`contains` marker, if the trigger
//! has one), tokens `name=value` for **declared** inputs are consumed; the
//! first token that is not one starts the prompt. Values are typed by the
//! declaration: numbers `-?(0|[1-9]\d*)(\.\d+)?`, booleans `true`/`false`.
//! Declared inputs that were not given take their default, or fail when
//! required.

use serde_json::{Number, Value};

/// The type of a declared input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// Any text without whitespace.
    String,
    /// A JSON-like number.
    Number,
    /// `true` or `false`.
    Boolean,
}

/// A declared invocation input.
#[derive(Clone, Debug, PartialEq)]
pub struct InputSpec {
    /// The input's name.
    pub name: String,
    /// Its type.
    pub kind: InputKind,
    /// Whether it must be given (or defaulted).
    pub required: bool,
    /// Its default value.
    pub default: Option<Value>,
    /// The allowed values, if finite.
    pub choices: Option<Vec<Value>>,
}

/// Parsed inputs and the remaining prompt.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Invocation {
    /// Every declared input with a value (given or default), in declaration order.
    pub inputs: Vec<(String, Value)>,
    /// The text after the consumed tokens.
    pub prompt: String,
}

/// A rejected invocation.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvocationError {
    /// A value is not one of the declared choices.
    #[error("input `{name}` must be one of {choices}")]
    InvalidChoice {
        /// The input.
        name: String,
        /// The allowed values, as JSON, comma-separated.
        choices: String,
    },
    /// A value does not have the declared type.
    #[error("input `{name}` must be a {kind}")]
    InvalidType {
        /// The input.
        name: String,
        /// `string`, `number` or `boolean`.
        kind: &'static str,
    },
    /// An input was given twice.
    #[error("input `{name}` is given more than once")]
    DuplicateInput {
        /// The input.
        name: String,
    },
    /// A required input was not given and has no default.
    #[error("input `{name}` is required")]
    MissingRequired {
        /// The input.
        name: String,
    },
    /// A default does not have the declared type.
    #[error("the default of input `{name}` must be a {kind}")]
    InvalidDefaultType {
        /// The input.
        name: String,
        /// `string`, `number` or `boolean`.
        kind: &'static str,
    },
    /// A default is not one of the declared choices.
    #[error("the default of input `{name}` is not one of its choices")]
    InvalidDefaultChoice {
        /// The input.
        name: String,
    },
}

impl InvocationError {
    /// The stable code, as the Hub names it.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidChoice { .. } => "invalid_choice",
            Self::InvalidType { .. } => "invalid_type",
            Self::DuplicateInput { .. } => "duplicate_input",
            Self::MissingRequired { .. } => "missing_required",
            Self::InvalidDefaultType { .. } => "invalid_default_type",
            Self::InvalidDefaultChoice { .. } => "invalid_default_choice",
        }
    }
}

impl InputKind {
    fn name(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Number => "number",
            Self::Boolean => "boolean",
        }
    }

    fn accepts(self, v: &Value) -> bool {
        matches!(
            (self, v),
            (Self::String, Value::String(_))
                | (Self::Number, Value::Number(_))
                | (Self::Boolean, Value::Bool(_))
        )
    }
}

/// Parses the leading input tokens of `text` for the declared `specs`.
///
/// # Errors
///
/// [`InvocationError`] with the Hub's rejection code.
pub fn parse(text: &str, specs: &[InputSpec]) -> Result<Invocation, InvocationError> {
    let mut given: Vec<(String, Value)> = Vec::new();
    let mut rest = text.trim_start();
    while let Some((name, raw, after)) = next_token(rest) {
        let Some(spec) = specs.iter().find(|s| s.name == name) else {
            break;
        };
        if given.iter().any(|(n, _)| *n == name) {
            return Err(InvocationError::DuplicateInput {
                name: name.to_owned(),
            });
        }
        let value = typed(spec.kind, raw).ok_or_else(|| InvocationError::InvalidType {
            name: name.to_owned(),
            kind: spec.kind.name(),
        })?;
        check_choice(spec, &value)?;
        given.push((name.to_owned(), value));
        rest = after;
    }
    let inputs = complete(&given, specs)?;
    Ok(Invocation {
        inputs,
        prompt: rest.trim().to_owned(),
    })
}

/// Checks structured inputs (a manual run's payload) by the same rules:
/// types, choices, defaults and required inputs. Undeclared names are dropped.
///
/// # Errors
///
/// [`InvocationError`] with the Hub's rejection code.
pub fn check_structured(
    given: &[(String, Value)],
    specs: &[InputSpec],
) -> Result<Vec<(String, Value)>, InvocationError> {
    let mut seen: Vec<(String, Value)> = Vec::new();
    for (name, value) in given {
        let Some(spec) = specs.iter().find(|s| s.name == *name) else {
            continue;
        };
        if seen.iter().any(|(n, _)| n == name) {
            return Err(InvocationError::DuplicateInput { name: name.clone() });
        }
        if !spec.kind.accepts(value) {
            return Err(InvocationError::InvalidType {
                name: name.clone(),
                kind: spec.kind.name(),
            });
        }
        check_choice(spec, value)?;
        seen.push((name.clone(), value.clone()));
    }
    complete(&seen, specs)
}

/// Every declared input with its given or default value, in declaration order.
fn complete(
    given: &[(String, Value)],
    specs: &[InputSpec],
) -> Result<Vec<(String, Value)>, InvocationError> {
    let mut inputs = Vec::new();
    for spec in specs {
        if let Some((_, v)) = given.iter().find(|(n, _)| *n == spec.name) {
            inputs.push((spec.name.clone(), v.clone()));
            continue;
        }
        match &spec.default {
            Some(d) => {
                if !spec.kind.accepts(d) {
                    return Err(InvocationError::InvalidDefaultType {
                        name: spec.name.clone(),
                        kind: spec.kind.name(),
                    });
                }
                if spec.choices.as_ref().is_some_and(|c| !c.contains(d)) {
                    return Err(InvocationError::InvalidDefaultChoice {
                        name: spec.name.clone(),
                    });
                }
                inputs.push((spec.name.clone(), d.clone()));
            }
            None if spec.required => {
                return Err(InvocationError::MissingRequired {
                    name: spec.name.clone(),
                });
            }
            None => {}
        }
    }
    Ok(inputs)
}

/// `^([a-z][a-z0-9_-]*)=([^\s]*)(?:\s+|$)`: name, raw value and the rest.
fn next_token(s: &str) -> Option<(&str, &str, &str)> {
    let (name, after_eq) = s.split_once('=')?;
    if !crate::capability::is_identifier(name) {
        return None;
    }
    let end = after_eq.find(char::is_whitespace).unwrap_or(after_eq.len());
    let (raw, rest) = after_eq.split_at(end);
    Some((name, raw, rest.trim_start()))
}

fn typed(kind: InputKind, raw: &str) -> Option<Value> {
    match kind {
        InputKind::String => Some(Value::String(raw.to_owned())),
        InputKind::Boolean => match raw {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        InputKind::Number => {
            if !is_number(raw) {
                return None;
            }
            if let Ok(i) = raw.parse::<i64>() {
                return Some(Value::Number(i.into()));
            }
            raw.parse::<f64>()
                .ok()
                .and_then(Number::from_f64)
                .map(Value::Number)
        }
    }
}

/// `-?(0|[1-9]\d*)(\.\d+)?`
fn is_number(s: &str) -> bool {
    let s = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s, None),
    };
    let int_ok = int == "0"
        || (int.starts_with(|c: char| matches!(c, '1'..='9'))
            && int.bytes().all(|b| b.is_ascii_digit()));
    int_ok && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
}

fn check_choice(spec: &InputSpec, v: &Value) -> Result<(), InvocationError> {
    match &spec.choices {
        Some(c) if !c.iter().any(|x| same(x, v)) => Err(InvocationError::InvalidChoice {
            name: spec.name.clone(),
            choices: c
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        }),
        _ => Ok(()),
    }
}

/// Numbers compare by value (`1 == 1.0`), everything else structurally.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(name: &str, kind: InputKind) -> InputSpec {
        InputSpec {
            name: name.into(),
            kind,
            required: false,
            default: None,
            choices: None,
        }
    }

    #[test]
    fn declared_leading_tokens_are_consumed() {
        let specs = [
            InputSpec {
                choices: Some(vec![json!("prod"), json!("dev")]),
                ..spec("env", InputKind::String)
            },
            spec("count", InputKind::Number),
            spec("dry", InputKind::Boolean),
        ];
        let inv = parse("env=prod count=-1.5 dry=true deploy it now count=3", &specs).unwrap();
        assert_eq!(
            inv.inputs,
            vec![
                ("env".into(), json!("prod")),
                ("count".into(), json!(-1.5)),
                ("dry".into(), json!(true))
            ]
        );
        assert_eq!(inv.prompt, "deploy it now count=3");
        // An undeclared token starts the prompt, even if declared ones follow.
        let inv = parse("other=1 env=prod go", &specs).unwrap();
        assert_eq!(
            (inv.inputs.len(), inv.prompt.as_str()),
            (0, "other=1 env=prod go")
        );
        // Positive control for a whole-number value.
        assert_eq!(
            parse("count=3", &specs).unwrap().inputs,
            vec![("count".into(), json!(3))]
        );
    }

    #[test]
    fn every_rejection_code_and_message() {
        let env = InputSpec {
            choices: Some(vec![json!("prod"), json!("dev")]),
            ..spec("env", InputKind::String)
        };
        let n = spec("n", InputKind::Number);
        let b = spec("b", InputKind::Boolean);
        let cases: Vec<(Vec<InputSpec>, &str, &str, &str)> = vec![
            (
                vec![env.clone()],
                "env=staging x",
                "invalid_choice",
                "input `env` must be one of \"prod\", \"dev\"",
            ),
            (
                vec![n.clone()],
                "n=01 x",
                "invalid_type",
                "input `n` must be a number",
            ),
            (
                vec![n.clone()],
                "n=1. x",
                "invalid_type",
                "input `n` must be a number",
            ),
            (
                vec![b.clone()],
                "b=yes x",
                "invalid_type",
                "input `b` must be a boolean",
            ),
            (
                vec![n.clone()],
                "n=1 n=2 x",
                "duplicate_input",
                "input `n` is given more than once",
            ),
            (
                vec![InputSpec {
                    required: true,
                    ..n.clone()
                }],
                "x",
                "missing_required",
                "input `n` is required",
            ),
            (
                vec![InputSpec {
                    default: Some(json!("1")),
                    ..n.clone()
                }],
                "x",
                "invalid_default_type",
                "the default of input `n` must be a number",
            ),
            (
                vec![InputSpec {
                    default: Some(json!("qa")),
                    ..env.clone()
                }],
                "x",
                "invalid_default_choice",
                "the default of input `env` is not one of its choices",
            ),
        ];
        for (specs, text, code, message) in cases {
            let err = parse(text, &specs).unwrap_err();
            assert_eq!(
                (err.code(), err.to_string().as_str()),
                (code, message),
                "{text}"
            );
        }
        // Positive controls: a valid choice, a default, a required input given.
        assert!(parse("env=dev x", std::slice::from_ref(&env)).is_ok());
        let with_default = InputSpec {
            default: Some(json!("prod")),
            ..env
        };
        assert_eq!(
            parse("x", &[with_default]).unwrap().inputs,
            vec![("env".into(), json!("prod"))]
        );
        assert!(
            parse(
                "n=0 x",
                &[InputSpec {
                    required: true,
                    ..n
                }]
            )
            .is_ok()
        );
    }
}
