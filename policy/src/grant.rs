//! One step's complete grant: derive, translate and digest in one call.
//!
//! This is the pipeline a dispatcher runs for every execution it creates:
//! [`derive()`] the exact tool policy, seed the injected
//! `hub` server where the provider keeps MCP servers in its options,
//! [`translate`] into the provider's native
//! options, and compute the [`PolicyDigest`] the daemon must echo.

use serde_json::{Value, json};

use crate::capability::{CapabilityRegistry, OutputContext};
use crate::derive::{Derived, DispatchError, HUB_SERVER, OutputDecl, derive};
use crate::digest::PolicyDigest;
use crate::translate::{
    HUB_URL_PLACEHOLDER, OpenCodeOrdering, Provider, TranslateError, TranslateRequest,
    seed_hub_server, translate,
};

/// What one step asks for.
#[derive(Clone, Copy, Debug)]
pub struct StepInput<'a> {
    /// The provider id (possibly `provider/model`).
    pub provider: &'a str,
    /// The authored `agent.options`.
    pub options: Option<&'a Value>,
    /// The step's `allow_outputs`.
    pub allow_outputs: &'a [OutputDecl],
    /// The step's `output.schema`.
    pub output_schema: Option<&'a Value>,
}

/// Dispatcher settings: [`GrantConfig::default`], adjusted with the `with_`
/// methods.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GrantConfig {
    /// OpenCode rule ordering (default grants first).
    pub opencode_ordering: OpenCodeOrdering,
    /// The URL of the injected `hub` MCP server, shown in Codex options.
    pub hub_url: String,
}

impl GrantConfig {
    /// The same settings with the OpenCode rule ordering `ordering`.
    #[must_use]
    pub fn with_opencode_ordering(mut self, ordering: OpenCodeOrdering) -> Self {
        self.opencode_ordering = ordering;
        self
    }

    /// The same settings with the `hub` MCP server at `url`.
    #[must_use]
    pub fn with_hub_url(mut self, url: impl Into<String>) -> Self {
        self.hub_url = url.into();
        self
    }
}

impl Default for GrantConfig {
    fn default() -> Self {
        Self {
            opencode_ordering: OpenCodeOrdering::default(),
            hub_url: HUB_URL_PLACEHOLDER.to_owned(),
        }
    }
}

/// A step's complete grant.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StepGrant {
    /// The provider's base id (`claude`, `codex`, `opencode`).
    pub provider: Provider,
    /// The derived policy and tool definitions.
    pub derived: Derived,
    /// The provider's full effective options.
    pub provider_options: Option<Value>,
    /// The acknowledgement the daemon must return.
    pub digest: PolicyDigest,
}

impl StepGrant {
    /// `{"provider","tool_policy","provider_options","digest"}`.
    pub fn to_json(&self) -> Value {
        json!({
            "provider": self.provider.id(),
            "tool_policy": self.derived.policy.to_json(),
            "provider_options": self.provider_options.clone().unwrap_or(Value::Null),
            "digest": self.digest.as_str(),
        })
    }
}

/// A step that cannot be dispatched.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepError {
    /// Derivation failed.
    #[error(transparent)]
    Dispatch(#[from] DispatchError),
    /// Translation failed.
    #[error(transparent)]
    Translate(#[from] TranslateError),
}

impl StepError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Dispatch(e) => e.code(),
            Self::Translate(e) => e.code(),
        }
    }

    /// `{"code","message"}`.
    pub fn to_json(&self) -> Value {
        json!({"code": self.code(), "message": self.to_string()})
    }
}

/// Derives, translates and digests one step's grant.
///
/// As in the Hub, derivation (a dispatch-time check) comes before
/// translation (a daemon-side check): a required unavailable output is
/// reported even for an unsupported provider.
///
/// # Errors
///
/// [`StepError`] with the derivation or translation error.
pub fn grant_step(
    input: &StepInput<'_>,
    ctx: Option<&OutputContext>,
    registry: &CapabilityRegistry,
    config: &GrantConfig,
) -> Result<StepGrant, StepError> {
    let derived = derive(input.allow_outputs, ctx, input.output_schema, registry)?;
    let provider = Provider::from_id(input.provider)?;
    let seeded = seed_hub_server(input.provider, input.options, &config.hub_url);
    let provider_options = translate(&TranslateRequest {
        provider: input.provider,
        options: seeded.as_ref(),
        policy: &derived.policy,
        mcp_servers: &[HUB_SERVER],
        opencode_ordering: config.opencode_ordering,
    })?;
    let digest = PolicyDigest::of(provider.id(), &derived.policy, provider_options.as_ref());
    Ok(StepGrant {
        provider,
        derived,
        provider_options,
        digest,
    })
}
