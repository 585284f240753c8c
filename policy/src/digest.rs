//! The applied-policy acknowledgement: a canonical digest of what a daemon
//! must apply, which it returns after applying it.
//!
//! The digest is SHA-256 over the canonical JSON of
//! `{"provider", "tool_policy", "provider_options"}`: object keys sorted by
//! Unicode code point at every level, no insignificant whitespace, strings and
//! numbers as `serde_json` writes them. A dispatcher compares the digest the
//! daemon returns with its own; a missing or different one fails with
//! `tool_policy_not_confirmed`, so a daemon that silently ignored the policy
//! (or applied another) is never treated as a successful create.

use serde_json::Value;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::derive::ToolPolicy;

/// The message of `tool_policy_not_confirmed`, verbatim from the Hub.
pub const NOT_CONFIRMED_MESSAGE: &str = "The connected Paseo daemon did not confirm Hub MCP preapproval; update Paseo before running this workflow";

/// `sha256:<64 lowercase hex>` of the canonical translated grant.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PolicyDigest(String);

impl PolicyDigest {
    /// The digest of `provider` (the base id), the policy and the translated options.
    pub fn of(provider: &str, policy: &ToolPolicy, provider_options: Option<&Value>) -> Self {
        let doc = serde_json::json!({
            "provider": provider,
            "tool_policy": policy.to_json(),
            "provider_options": provider_options.cloned().unwrap_or(Value::Null),
        });
        let canonical = canonical_json(&doc);
        Self(format!(
            "sha256:{}",
            hex::encode(Sha256::digest(canonical.as_bytes()))
        ))
    }

    /// The text form, `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Checks a daemon's acknowledgement against this digest.
    ///
    /// # Errors
    ///
    /// [`NotConfirmed`] when the acknowledgement is missing or differs.
    pub fn confirm(&self, acknowledged: Option<&str>) -> Result<(), NotConfirmed> {
        let Some(ack) = acknowledged else {
            return Err(NotConfirmed {
                acknowledged: false,
            });
        };
        if bool::from(ack.as_bytes().ct_eq(self.0.as_bytes())) {
            Ok(())
        } else {
            Err(NotConfirmed { acknowledged: true })
        }
    }
}

impl std::fmt::Display for PolicyDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The daemon did not confirm the policy that was sent.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("{}", NOT_CONFIRMED_MESSAGE)]
pub struct NotConfirmed {
    /// Whether the daemon returned a digest at all (one that differs).
    pub acknowledged: bool,
}

impl NotConfirmed {
    /// The stable error code, `tool_policy_not_confirmed`.
    pub fn code(&self) -> &'static str {
        "tool_policy_not_confirmed"
    }
}

/// Canonical JSON: keys sorted at every level, no whitespace.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, val)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(val, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derive::McpToolRef;
    use serde_json::json;

    #[test]
    fn canonical_form_ignores_key_order_but_not_array_order() {
        let a = json!({"b": 1, "a": {"y": [1, 2], "x": "é"}});
        let b = json!({"a": {"x": "é", "y": [1, 2]}, "b": 1});
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&a), r#"{"a":{"x":"é","y":[1,2]},"b":1}"#);
        let c = json!({"a": {"x": "é", "y": [2, 1]}, "b": 1});
        assert_ne!(canonical_json(&a), canonical_json(&c));
    }

    #[test]
    fn missing_or_different_acknowledgement_is_not_confirmed() {
        let p = ToolPolicy {
            preapproved: vec![McpToolRef::hub("finish_execution")],
        };
        let opts = json!({"allowedTools": ["mcp__hub__finish_execution"]});
        let d = PolicyDigest::of("claude", &p, Some(&opts));
        assert!(d.as_str().starts_with("sha256:") && d.as_str().len() == 71);
        // Positive control: the same digest confirms.
        let echoed = PolicyDigest::of("claude", &p, Some(&opts));
        assert_eq!(d.confirm(Some(echoed.as_str())), Ok(()));
        let err = d.confirm(None).unwrap_err();
        assert_eq!(err.code(), "tool_policy_not_confirmed");
        assert_eq!(err.to_string(), NOT_CONFIRMED_MESSAGE);
        assert_eq!(
            err.to_string(),
            "The connected Paseo daemon did not confirm Hub MCP preapproval; update Paseo before running this workflow"
        );
        let other = PolicyDigest::of("claude", &p, Some(&json!({"allowedTools": []})));
        assert_eq!(
            d.confirm(Some(other.as_str())),
            Err(NotConfirmed { acknowledged: true })
        );
    }
}
