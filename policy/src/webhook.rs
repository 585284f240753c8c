//! Webhook authentication: GitHub `X-Hub-Signature-256`, Slack signing secret
//! v0 and Discord Ed25519.
//!
//! Every check is constant-time in the signature bytes (HMAC tags are compared
//! with `hmac`'s `verify_slice`, which uses `subtle`), and the current time is
//! passed in. An error never contains the secret, the expected tag or the body.
//!
//! What this does **not** protect against: a leaked signing secret, or a
//! replay of a GitHub delivery (GitHub signs no timestamp; deduplicate on
//! `X-GitHub-Delivery` in the caller).

use ed25519_dalek::{Signature, VerifyingKey};
use hmac::{Hmac, Mac as _};
use sha2::Sha256;

/// How far a Slack or Discord timestamp may be from the current time, in seconds.
pub const REPLAY_WINDOW_SECS: i64 = 300;

/// A rejected webhook delivery.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum WebhookError {
    /// A required header is absent.
    #[error("missing `{header}` header")]
    MissingHeader {
        /// The header name.
        header: &'static str,
    },
    /// A header is not in the documented format.
    #[error("malformed `{header}` header")]
    Malformed {
        /// The header name.
        header: &'static str,
    },
    /// The signature does not match the body.
    #[error("webhook signature does not match")]
    BadSignature,
    /// The timestamp is outside the replay window.
    #[error("webhook timestamp is more than 5 minutes from the current time")]
    Stale,
    /// The configured key or secret is unusable.
    #[error("webhook verification key is invalid")]
    BadKey,
}

impl WebhookError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::MissingHeader { .. } => "webhook_header_missing",
            Self::Malformed { .. } => "webhook_header_malformed",
            Self::BadSignature => "webhook_signature_mismatch",
            Self::Stale => "webhook_timestamp_stale",
            Self::BadKey => "webhook_key_invalid",
        }
    }
}

/// Verifies a GitHub delivery: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`.
///
/// # Errors
///
/// A missing or malformed header, an empty secret, or a mismatching signature.
pub fn verify_github(
    secret: &[u8],
    body: &[u8],
    signature_header: Option<&str>,
) -> Result<(), WebhookError> {
    const H: &str = "X-Hub-Signature-256";
    let header = signature_header.ok_or(WebhookError::MissingHeader { header: H })?;
    let tag = header
        .strip_prefix("sha256=")
        .and_then(|h| hex::decode(h).ok())
        .filter(|t| t.len() == 32)
        .ok_or(WebhookError::Malformed { header: H })?;
    let mut mac = hmac_sha256(secret)?;
    mac.update(body);
    mac.verify_slice(&tag)
        .map_err(|_| WebhookError::BadSignature)
}

/// Verifies a Slack request: `X-Slack-Signature: v0=<hex HMAC-SHA256(secret, "v0:<ts>:<body>")>`
/// with `X-Slack-Request-Timestamp` within 5 minutes of `now_unix`.
///
/// # Errors
///
/// A missing or malformed header, a stale timestamp, an empty secret, or a mismatching signature.
pub fn verify_slack(
    secret: &[u8],
    body: &[u8],
    timestamp_header: Option<&str>,
    signature_header: Option<&str>,
    now_unix: i64,
) -> Result<(), WebhookError> {
    const TS: &str = "X-Slack-Request-Timestamp";
    const SIG: &str = "X-Slack-Signature";
    let ts_text = timestamp_header.ok_or(WebhookError::MissingHeader { header: TS })?;
    let sig = signature_header.ok_or(WebhookError::MissingHeader { header: SIG })?;
    check_window(ts_text, TS, now_unix)?;
    let tag = sig
        .strip_prefix("v0=")
        .and_then(|h| hex::decode(h).ok())
        .filter(|t| t.len() == 32)
        .ok_or(WebhookError::Malformed { header: SIG })?;
    let mut mac = hmac_sha256(secret)?;
    mac.update(b"v0:");
    mac.update(ts_text.as_bytes());
    mac.update(b":");
    mac.update(body);
    mac.verify_slice(&tag)
        .map_err(|_| WebhookError::BadSignature)
}

/// Verifies a Discord interaction: `X-Signature-Ed25519` (hex) over
/// `X-Signature-Timestamp` followed by the body, with the application's
/// 32-byte public key; the timestamp must be within 5 minutes of `now_unix`.
///
/// # Errors
///
/// A missing or malformed header, a stale timestamp, a bad key, or a mismatching signature.
pub fn verify_discord(
    public_key: &[u8],
    body: &[u8],
    timestamp_header: Option<&str>,
    signature_header: Option<&str>,
    now_unix: i64,
) -> Result<(), WebhookError> {
    const TS: &str = "X-Signature-Timestamp";
    const SIG: &str = "X-Signature-Ed25519";
    let ts_text = timestamp_header.ok_or(WebhookError::MissingHeader { header: TS })?;
    let sig = signature_header.ok_or(WebhookError::MissingHeader { header: SIG })?;
    check_window(ts_text, TS, now_unix)?;
    let key: [u8; 32] = public_key.try_into().map_err(|_| WebhookError::BadKey)?;
    let key = VerifyingKey::from_bytes(&key).map_err(|_| WebhookError::BadKey)?;
    let sig: [u8; 64] = hex::decode(sig)
        .ok()
        .and_then(|s| s.try_into().ok())
        .ok_or(WebhookError::Malformed { header: SIG })?;
    let sig = Signature::from_bytes(&sig);
    let mut msg = Vec::with_capacity(ts_text.len().saturating_add(body.len()));
    msg.extend_from_slice(ts_text.as_bytes());
    msg.extend_from_slice(body);
    key.verify_strict(&msg, &sig)
        .map_err(|_| WebhookError::BadSignature)
}

fn hmac_sha256(secret: &[u8]) -> Result<Hmac<Sha256>, WebhookError> {
    if secret.is_empty() {
        return Err(WebhookError::BadKey);
    }
    Hmac::<Sha256>::new_from_slice(secret).map_err(|_| WebhookError::BadKey)
}

fn check_window(ts_text: &str, header: &'static str, now_unix: i64) -> Result<(), WebhookError> {
    let valid =
        !ts_text.is_empty() && ts_text.len() <= 12 && ts_text.bytes().all(|b| b.is_ascii_digit());
    let ts: i64 = if valid { ts_text.parse().ok() } else { None }
        .ok_or(WebhookError::Malformed { header })?;
    if now_unix.abs_diff(ts) > REPLAY_WINDOW_SECS.unsigned_abs() {
        return Err(WebhookError::Stale);
    }
    Ok(())
}

/// Signing helpers for tests and fuzzing; not for production use, not part
/// of the public API; no semver guarantee (only with the `testing` feature
/// or under `cfg(fuzzing)`).
#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __sign {
    use hmac::Mac as _;

    /// `sha256=<hex>` for a GitHub body.
    pub fn github(secret: &[u8], body: &[u8]) -> String {
        match super::hmac_sha256(secret) {
            Ok(mut mac) => {
                mac.update(body);
                format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
            }
            Err(_) => String::new(),
        }
    }

    /// `v0=<hex>` for a Slack body at `ts`.
    pub fn slack(secret: &[u8], ts: &str, body: &[u8]) -> String {
        match super::hmac_sha256(secret) {
            Ok(mut mac) => {
                mac.update(format!("v0:{ts}:").as_bytes());
                mac.update(body);
                format!("v0={}", hex::encode(mac.finalize().into_bytes()))
            }
            Err(_) => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer as _, SigningKey};

    fn secret() -> Vec<u8> {
        "terces-kooh".chars().rev().collect::<String>().into_bytes()
    }

    #[test]
    fn github_signature_roundtrip_and_forgeries() {
        let body = br#"{"action":"created"}"#;
        let good = __sign::github(&secret(), body);
        assert_eq!(verify_github(&secret(), body, Some(&good)), Ok(()));
        assert_eq!(
            verify_github(&secret(), b"{}", Some(&good)),
            Err(WebhookError::BadSignature)
        );
        assert_eq!(
            verify_github(b"other", body, Some(&good)),
            Err(WebhookError::BadSignature)
        );
        let err = verify_github(&secret(), body, None).unwrap_err();
        assert_eq!(err.to_string(), "missing `X-Hub-Signature-256` header");
        let sha1 = good.replace("sha256=", "sha1=");
        assert_eq!(
            verify_github(&secret(), body, Some(&sha1))
                .unwrap_err()
                .code(),
            "webhook_header_malformed"
        );
        assert_eq!(
            verify_github(&secret(), body, Some("sha256=abcd"))
                .unwrap_err()
                .code(),
            "webhook_header_malformed"
        );
        assert_eq!(
            verify_github(b"", body, Some(&good)),
            Err(WebhookError::BadKey)
        );
    }

    /// The example from Slack's "Verifying requests from Slack" documentation.
    #[test]
    fn slack_documented_example_verifies() {
        let secret = b"8f742231b10e8888abcd99yyyzzz85a5";
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let sig = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(
            verify_slack(secret, body, Some("1531420618"), Some(sig), 1_531_420_618),
            Ok(())
        );
        assert_eq!(
            verify_slack(
                secret,
                body,
                Some("1531420618"),
                Some(sig),
                1_531_420_618 + 300
            ),
            Ok(())
        );
        assert_eq!(
            verify_slack(
                secret,
                body,
                Some("1531420618"),
                Some(sig),
                1_531_420_618 + 301
            ),
            Err(WebhookError::Stale)
        );
        assert_eq!(
            verify_slack(
                secret,
                body,
                Some("1531420618"),
                Some(sig),
                1_531_420_618 - 301
            ),
            Err(WebhookError::Stale)
        );
        assert_eq!(
            verify_slack(secret, body, Some("1531420619"), Some(sig), 1_531_420_618),
            Err(WebhookError::BadSignature)
        );
        assert_eq!(
            verify_slack(secret, body, Some("+1531420618"), Some(sig), 1_531_420_618)
                .unwrap_err()
                .code(),
            "webhook_header_malformed"
        );
    }

    #[test]
    fn discord_ed25519_roundtrip_and_forgeries() {
        let sk = SigningKey::from_bytes(&[7u8; 32]);
        let pk = sk.verifying_key().to_bytes();
        let body = br#"{"type":1}"#;
        let ts = "1700000000";
        let mut msg = ts.as_bytes().to_vec();
        msg.extend_from_slice(body);
        let sig = hex::encode(sk.sign(&msg).to_bytes());
        assert_eq!(
            verify_discord(&pk, body, Some(ts), Some(&sig), 1_700_000_010),
            Ok(())
        );
        assert_eq!(
            verify_discord(&pk, b"{}", Some(ts), Some(&sig), 1_700_000_010),
            Err(WebhookError::BadSignature)
        );
        assert_eq!(
            verify_discord(&pk, body, Some(ts), Some(&sig), 1_700_001_000),
            Err(WebhookError::Stale)
        );
        assert_eq!(
            verify_discord(&pk[..31], body, Some(ts), Some(&sig), 1_700_000_010),
            Err(WebhookError::BadKey)
        );
        assert_eq!(
            verify_discord(&pk, body, Some(ts), None, 1_700_000_010),
            Err(WebhookError::MissingHeader {
                header: "X-Signature-Ed25519"
            })
        );
    }

    #[test]
    fn every_webhook_error_has_its_exact_message() {
        let cases = [
            (
                WebhookError::MissingHeader {
                    header: "X-Slack-Signature",
                },
                "webhook_header_missing",
                "missing `X-Slack-Signature` header",
            ),
            (
                WebhookError::Malformed {
                    header: "X-Slack-Request-Timestamp",
                },
                "webhook_header_malformed",
                "malformed `X-Slack-Request-Timestamp` header",
            ),
            (
                WebhookError::BadSignature,
                "webhook_signature_mismatch",
                "webhook signature does not match",
            ),
            (
                WebhookError::Stale,
                "webhook_timestamp_stale",
                "webhook timestamp is more than 5 minutes from the current time",
            ),
            (
                WebhookError::BadKey,
                "webhook_key_invalid",
                "webhook verification key is invalid",
            ),
        ];
        for (err, code, message) in cases {
            assert_eq!((err.code(), err.to_string().as_str()), (code, message));
        }
        // Each arises from verification; a genuine request is the positive control.
        let body = b"x";
        let sig = __sign::slack(&secret(), "100", body);
        assert_eq!(
            verify_slack(&secret(), body, Some("100"), Some(&sig), 100),
            Ok(())
        );
        assert_eq!(
            verify_slack(&secret(), body, Some("100"), None, 100),
            Err(WebhookError::MissingHeader {
                header: "X-Slack-Signature"
            })
        );
        assert_eq!(
            verify_slack(&secret(), body, Some("1e2"), Some(&sig), 100),
            Err(WebhookError::Malformed {
                header: "X-Slack-Request-Timestamp"
            })
        );
        assert_eq!(
            verify_slack(b"", body, Some("100"), Some(&sig), 100),
            Err(WebhookError::BadKey)
        );
    }
}
