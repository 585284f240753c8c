//! Whether a step's provider options turn on the provider's own sandbox,
//! which cannot start inside palisade's: Claude Code's sandbox-runtime and
//! Codex's Linux sandbox are built on bubblewrap, and bubblewrap must mount,
//! which palisade's seccomp filter and Landlock refuse in every profile,
//! `nested_sandbox = true` included (`docs/agents.md`, "Provider sandboxes
//! inside palisade").

use serde_json::Value;

/// The stable code of the finding.
pub const CODE: &str = "provider_sandbox_unavailable";

/// A provider sandbox the options turn on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSandbox {
    /// The provider (`claude` or `codex`).
    pub provider: &'static str,
    /// The authored option path that turns it on (`sandbox.enabled`,
    /// `settings.sandbox.enabled`, `sandbox_mode`).
    pub key: &'static str,
    /// Whether the provider refuses to work when its sandbox cannot start
    /// (Claude `failIfUnavailable: true`, Codex always): then the step
    /// cannot run inside palisade, an error; otherwise the provider runs
    /// its commands unsandboxed, a warning.
    pub fails_closed: bool,
}

impl ProviderSandbox {
    /// The sentence of the finding, naming the way out.
    pub fn message(&self) -> String {
        let what = match self.provider {
            "claude" => "Claude Code's sandbox-runtime",
            _ => "Codex's bubblewrap sandbox",
        };
        let then = if self.fails_closed {
            "so the step cannot run"
        } else {
            "so it would run its commands unsandboxed"
        };
        format!(
            "{provider} option `{key}` turns on {what}, which cannot start inside palisade's sandbox ({then}): bubblewrap must mount, which palisade's seccomp and Landlock refuse in every profile, `nested_sandbox = true` included (that option allows the user namespace and Unix sockets these sandboxes also need, never a mount); turn the provider's sandbox off ({off}) and let palisade be the boundary",
            provider = self.provider,
            key = self.key,
            off = match self.provider {
                "claude" => "`sandbox.enabled: false`",
                _ => "`sandbox_mode: danger-full-access`",
            },
        )
    }
}

/// The provider sandbox `options` of `provider` turn on, if any.
///
/// ```
/// use palisade_policy::provider_sandbox::check;
/// let on = serde_json::json!({"sandbox": {"enabled": true, "failIfUnavailable": true}});
/// assert!(check("claude", &on).unwrap().fails_closed);
/// let off = serde_json::json!({"sandbox_mode": "danger-full-access"});
/// assert_eq!(check("codex", &off), None);
/// ```
pub fn check(provider: &str, options: &Value) -> Option<ProviderSandbox> {
    match provider {
        "claude" => claude(options),
        "codex" => codex(options),
        _ => None,
    }
}

fn claude(options: &Value) -> Option<ProviderSandbox> {
    let places: [(Option<&Value>, &'static str); 2] = [
        (options.get("sandbox"), "sandbox.enabled"),
        (
            options.get("settings").and_then(|s| s.get("sandbox")),
            "settings.sandbox.enabled",
        ),
    ];
    places.into_iter().find_map(|(sandbox, key)| {
        let sandbox = sandbox?;
        (sandbox.get("enabled") == Some(&Value::Bool(true))).then(|| ProviderSandbox {
            provider: "claude",
            key,
            fails_closed: sandbox.get("failIfUnavailable") == Some(&Value::Bool(true)),
        })
    })
}

fn codex(options: &Value) -> Option<ProviderSandbox> {
    let mode = options.get("sandbox_mode")?.as_str()?;
    (mode != "danger-full-access").then_some(ProviderSandbox {
        provider: "codex",
        key: "sandbox_mode",
        fails_closed: true,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::json;

    use super::*;

    #[test]
    fn claude_sandbox_on_is_found_in_both_places() {
        let direct = check("claude", &json!({"sandbox": {"enabled": true}})).unwrap();
        assert_eq!(direct.key, "sandbox.enabled");
        assert!(!direct.fails_closed);
        let nested = json!({"settings": {"sandbox": {"enabled": true, "failIfUnavailable": true}}});
        let nested = check("claude", &nested).unwrap();
        assert_eq!(nested.key, "settings.sandbox.enabled");
        assert!(nested.fails_closed);
        assert!(nested.message().contains("nested_sandbox = true"));
        assert!(nested.message().contains("sandbox.enabled: false"));
        // Positive controls: off, absent, another provider.
        assert_eq!(
            check("claude", &json!({"sandbox": {"enabled": false}})),
            None
        );
        assert_eq!(check("claude", &json!({})), None);
        assert_eq!(
            check("opencode", &json!({"sandbox": {"enabled": true}})),
            None
        );
    }

    #[test]
    fn codex_modes_other_than_full_access_are_found() {
        for mode in ["workspace-write", "read-only"] {
            let f = check("codex", &json!({ "sandbox_mode": mode })).unwrap();
            assert!(f.fails_closed, "{mode}");
            assert!(f.message().contains("danger-full-access"));
        }
        assert_eq!(
            check("codex", &json!({"sandbox_mode": "danger-full-access"})),
            None
        );
        assert_eq!(check("codex", &json!({})), None);
    }
}
