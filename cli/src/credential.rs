//! A relay's credential, acquired by the host at dispatch: an API key
//! from the host's environment (`from_env`), or an OAuth access token from
//! a host token file (`from_file`), refreshed first when it expires within
//! five minutes (`palisade_egress::token`). The one place `run --policy`
//! and `palisade relay` read a credential; never from the worker.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use palisade_egress::relay::{CredentialKind, Placeholder, PlaceholderFormat, RelayConfig, Secret};
use palisade_egress::token::{TokenSource, fetch};
use palisade_schema::host_policy::Relay as PolicyRelay;

/// The relay configuration for `relay` with its host-held credential:
/// `roots` (the `--relay-ca` roots) are trusted for the token endpoint
/// too. A `chatgpt` relay's placeholder is a JWT carrying the account id
/// from the token file. Errors name the relay and never carry a secret.
pub(crate) async fn relay_config(
    relay: &PolicyRelay,
    roots: Option<&rustls::RootCertStore>,
) -> Result<RelayConfig, String> {
    let name = &relay.name;
    let (secret, account_id) = acquire(relay, roots)
        .await
        .map_err(|e| format!("relay `{name}`: {e}"))?;
    let mut config =
        RelayConfig::from_policy(relay, secret).map_err(|e| format!("relay `{name}`: {e}"))?;
    if relay.credential.kind == CredentialKind::ChatGpt {
        let account = account_id.ok_or_else(|| {
            format!(
                "relay `{name}`: the token file has no ChatGPT account id (`account_id`, \
                 `tokens.account_id`, or the access token's `chatgpt_account_id` claim): \
                 sign in again with Codex and point `from_file` at its auth.json"
            )
        })?;
        let placeholder = Placeholder::generate(&PlaceholderFormat::chatgpt(&account))
            .map_err(|_| format!("relay `{name}`: cannot generate a placeholder"))?;
        config = config.with_placeholder(placeholder);
    }
    Ok(config)
}

/// The secret (and, for ChatGPT, the account id) per credential kind.
async fn acquire(
    relay: &PolicyRelay,
    roots: Option<&rustls::RootCertStore>,
) -> Result<(Secret, Option<String>), String> {
    let c = &relay.credential;
    if !c.kind.is_oauth() {
        let value = std::env::var(&c.from_env).map_err(|_| {
            format!(
                "the host variable `{}` holding its credential is not set",
                c.from_env
            )
        })?;
        if value.starts_with('!') {
            return Err(format!(
                "the host variable `{}` holds a shell command (`!…`, Pi's key syntax), which \
                 palisade does not run: put the key itself in the variable",
                c.from_env
            ));
        }
        return Ok((Secret::new(value), None));
    }
    let file = c.from_file.as_deref().ok_or_else(|| {
        format!(
            "a `{}` credential needs `from_file` (a host token file)",
            c.kind.as_str()
        )
    })?;
    let mut source = TokenSource::new(Path::new(file), c.kind, c.token_url.as_deref())
        .map_err(|e| e.to_string())?;
    if let Some(roots) = roots {
        source = source.with_roots(roots.clone());
    }
    let fetched = fetch(&source, now_ms())
        .await
        .map_err(|e| format!("{e}; use `kind = \"api_key\"` with `from_env` instead, or sign in again to renew the token file"))?;
    Ok((fetched.access_token, fetched.account_id))
}

/// Unix milliseconds now (the CLI is the crate that reads the clock).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
