//! The output capability registry: which `allow_outputs` types exist, which
//! Hub tool each exposes, and when each is available for a run.
//!
//! The registry is data. [`CapabilityRegistry::default`] holds the production
//! registrations of the v0.6 Hub (`slack.reply`, `discord.reply`); GitHub and
//! manual contexts register none. [`CapabilityRegistry::hub_0_9`] is the
//! registry trigger documents run with: it adds `github.reply` (available
//! only for a GitHub event with an issue or pull-request item) and
//! `linear.reply`. Callers add further types with
//! [`CapabilityRegistry::register`].

use serde_json::{Value, json};

/// Description of the `reply` tool, verbatim from the Hub.
pub const REPLY_DESCRIPTION: &str =
    "Sends a reply to the conversation that triggered this execution.";

/// The output context of a run: where its outputs would go.
///
/// It belongs to the run, not to a step: every step of a run sees the same
/// context. The provider decides availability of the built-in types; a
/// GitHub reply also needs the event's issue or pull request (`item`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputContext {
    /// The provider the run came from (`slack`, `discord`, `github`, `manual`, …).
    pub provider: String,
    /// Whether the event carries an issue or pull-request item to reply on
    /// (every GitHub event but `github.push`). [`OutputContext::new`] sets
    /// it for GitHub, where it is the common case; [`OutputContext::for_event`]
    /// knows the exception.
    pub item: bool,
}

impl OutputContext {
    /// A context for `provider`; a `github` context has an item (an issue or
    /// pull request), every other one has none.
    pub fn new(provider: impl Into<String>) -> Self {
        let provider = provider.into();
        let item = provider == "github";
        Self { provider, item }
    }

    /// The context of a run started by `event` (e.g. `slack.mention`): its
    /// provider is the text before the first `.`, and it has an item for
    /// every GitHub event except `github.push` (which has no issue or pull
    /// request).
    pub fn for_event(event: &str) -> Self {
        let provider = event.split('.').next().unwrap_or_default();
        let mut ctx = Self::new(provider);
        ctx.item = provider == "github" && event != "github.push";
        ctx
    }

    /// This context with `item` set.
    #[must_use]
    pub fn with_item(mut self, item: bool) -> Self {
        self.item = item;
        self
    }
}

/// When a registered capability is available.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Availability {
    /// Available when the run's output context comes from this provider.
    Provider(String),
    /// Available in every output context (but never without one).
    Always,
    /// Available when the context comes from this provider and has an
    /// issue or pull-request item ([`OutputContext::item`]): `github.reply`.
    ProviderItem(String),
}

impl Availability {
    /// Whether a capability with this rule is available in `ctx`.
    ///
    /// A missing context makes every capability unavailable.
    pub fn is_available(&self, ctx: Option<&OutputContext>) -> bool {
        let Some(ctx) = ctx else { return false };
        match self {
            Self::Provider(p) => ctx.provider == *p,
            Self::Always => true,
            Self::ProviderItem(p) => ctx.provider == *p && ctx.item,
        }
    }
}

/// The Hub tool a capability exposes to the agent.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// The MCP tool name on the `hub` server (e.g. `reply`).
    pub name: String,
    /// The base description; the listed description appends `(up to N times).`.
    pub description: String,
    /// The JSON Schema of the tool's arguments.
    pub input_schema: Value,
}

impl ToolSpec {
    /// The `reply` tool of the Hub: one non-empty `content` string.
    pub fn reply() -> Self {
        Self {
            name: "reply".to_owned(),
            description: REPLY_DESCRIPTION.to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {"content": {"type": "string", "minLength": 1}},
                "required": ["content"],
                "additionalProperties": false
            }),
        }
    }
}

/// One registered output capability type.
#[derive(Clone, Debug, PartialEq)]
pub struct Capability {
    /// The `allow_outputs` type, e.g. `slack.reply`.
    pub kind: String,
    /// The Hub tool it exposes.
    pub tool: ToolSpec,
    /// When it is available.
    pub availability: Availability,
}

/// Errors from registering a capability.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistryError {
    /// The type is registered already.
    #[error("output capability `{kind}` is registered already")]
    Duplicate {
        /// The type.
        kind: String,
    },
    /// The type is not of the form `provider.name`.
    #[error("output capability type `{kind}` must match /^[a-z][a-z0-9_-]*\\.[a-z][a-z0-9_-]*$/")]
    InvalidType {
        /// The type.
        kind: String,
    },
    /// The tool name is reserved or not a plain MCP tool name.
    #[error("output capability `{kind}` cannot expose Hub tool `{tool}`")]
    InvalidTool {
        /// The type.
        kind: String,
        /// The tool name.
        tool: String,
    },
}

/// The set of output capability types a dispatcher knows.
#[derive(Clone, Debug, PartialEq)]
pub struct CapabilityRegistry {
    caps: Vec<Capability>,
}

impl Default for CapabilityRegistry {
    /// The production registrations: `slack.reply` and `discord.reply`, both exposing `reply`.
    fn default() -> Self {
        let caps = ["slack", "discord"]
            .into_iter()
            .map(|p| Capability {
                kind: format!("{p}.reply"),
                tool: ToolSpec::reply(),
                availability: Availability::Provider(p.to_owned()),
            })
            .collect();
        Self { caps }
    }
}

impl CapabilityRegistry {
    /// The registry of Paseo Hub 0.9 trigger runs (`hub-triggers.md` §4.2):
    /// the v0.6 ones, then `github.reply` (tool `reply`, posts an issue
    /// comment; available iff the context is GitHub with an item, so never
    /// for `github.push`) and `linear.reply` (tool `reply`, posts to the
    /// issue). `linear.progress` and `linear.plan` are not registered.
    /// v0.6 bundles keep [`CapabilityRegistry::default`], where a
    /// `github.reply` grant is dropped as unregistered.
    pub fn hub_0_9() -> Self {
        let mut reg = Self::default();
        reg.caps.push(Capability {
            kind: "github.reply".to_owned(),
            tool: ToolSpec::reply(),
            availability: Availability::ProviderItem("github".to_owned()),
        });
        reg.caps.push(Capability {
            kind: "linear.reply".to_owned(),
            tool: ToolSpec::reply(),
            availability: Availability::Provider("linear".to_owned()),
        });
        reg
    }

    /// A registry with no capability at all.
    pub fn empty() -> Self {
        Self { caps: Vec::new() }
    }

    /// Registers a further capability type.
    ///
    /// # Errors
    ///
    /// The type is registered already, is not an event-name-shaped type, or its
    /// tool name is `finish_execution` or not a plain identifier.
    pub fn register(&mut self, cap: Capability) -> Result<&mut Self, RegistryError> {
        if !is_event_name(&cap.kind) {
            return Err(RegistryError::InvalidType { kind: cap.kind });
        }
        if cap.tool.name == crate::derive::FINISH_EXECUTION || !is_tool_name(&cap.tool.name) {
            return Err(RegistryError::InvalidTool {
                kind: cap.kind,
                tool: cap.tool.name,
            });
        }
        if self.get(&cap.kind).is_some() {
            return Err(RegistryError::Duplicate { kind: cap.kind });
        }
        self.caps.push(cap);
        Ok(self)
    }

    /// The capability registered for `kind`.
    pub fn get(&self, kind: &str) -> Option<&Capability> {
        self.caps.iter().find(|c| c.kind == kind)
    }

    /// Whether `kind` is registered and available in `ctx`.
    pub fn is_available(&self, kind: &str, ctx: Option<&OutputContext>) -> bool {
        self.get(kind)
            .is_some_and(|c| c.availability.is_available(ctx))
    }

    /// All registered capabilities, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &Capability> {
        self.caps.iter()
    }
}

/// `^[a-z][a-z0-9_-]*\.[a-z][a-z0-9_-]*$`, the Hub's `EVENT_NAME`.
pub(crate) fn is_event_name(s: &str) -> bool {
    let mut parts = s.split('.');
    let ok = |p: Option<&str>| p.is_some_and(is_identifier);
    ok(parts.next()) && ok(parts.next()) && parts.next().is_none()
}

/// `^[a-z][a-z0-9_-]*$`, the Hub's `IDENTIFIER`.
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

fn is_tool_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn production_registry_matches_the_hub() {
        let reg = CapabilityRegistry::default();
        let slack = OutputContext::new("slack");
        let discord = OutputContext::new("discord");
        assert!(reg.is_available("slack.reply", Some(&slack)));
        assert!(!reg.is_available("slack.reply", Some(&discord)));
        assert!(reg.is_available("discord.reply", Some(&discord)));
        for p in ["github", "manual"] {
            let ctx = OutputContext::new(p);
            assert!(reg.iter().all(|c| !c.availability.is_available(Some(&ctx))));
        }
        assert!(!reg.is_available("github.reply", Some(&OutputContext::new("github"))));
        assert!(!reg.is_available("slack.reply", None));
    }

    #[test]
    fn register_rejects_duplicates_bad_types_and_reserved_tools() {
        let mut reg = CapabilityRegistry::default();
        let cap = |kind: &str, tool: &str| Capability {
            kind: kind.to_owned(),
            tool: ToolSpec {
                name: tool.to_owned(),
                ..ToolSpec::reply()
            },
            availability: Availability::Always,
        };
        assert!(reg.register(cap("linear.progress", "progress")).is_ok());
        assert_eq!(
            reg.register(cap("slack.reply", "reply"))
                .unwrap_err()
                .to_string(),
            "output capability `slack.reply` is registered already"
        );
        assert!(matches!(
            reg.register(cap("Slack.reply", "reply")),
            Err(RegistryError::InvalidType { .. })
        ));
        assert!(matches!(
            reg.register(cap("x.finish", "finish_execution")),
            Err(RegistryError::InvalidTool { .. })
        ));
        assert!(reg.is_available("linear.progress", Some(&OutputContext::new("manual"))));
    }

    #[test]
    fn hub_0_9_registers_github_reply_only_with_an_item() {
        let reg = CapabilityRegistry::hub_0_9();
        let issue = OutputContext::for_event("github.issue_comment_created");
        let push = OutputContext::for_event("github.push");
        assert!(issue.item && !push.item);
        assert!(reg.is_available("github.reply", Some(&issue)));
        assert!(!reg.is_available("github.reply", Some(&push)));
        assert!(!reg.is_available(
            "github.reply",
            Some(&OutputContext::for_event("slack.mention"))
        ));
        assert!(reg.is_available(
            "linear.reply",
            Some(&OutputContext::for_event("linear.comment_created"))
        ));
        assert!(!reg.is_available("linear.reply", Some(&issue)));
        assert!(!reg.is_available("linear.progress", Some(&OutputContext::new("linear"))));
        assert!(reg.is_available(
            "slack.reply",
            Some(&OutputContext::for_event("slack.mention"))
        ));
        for kind in ["github.reply", "linear.reply"] {
            assert_eq!(reg.get(kind).map(|c| c.tool.name.as_str()), Some("reply"));
        }
        // The v0.6 registry is unchanged: GitHub and Linear register nothing.
        let v06 = CapabilityRegistry::default();
        assert!(!v06.is_available("github.reply", Some(&issue)));
        assert!(!v06.is_available("linear.reply", Some(&OutputContext::new("linear"))));
    }
}
