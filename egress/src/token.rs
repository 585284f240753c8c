//! Host token files for the OAuth credential kinds, refreshed by the host.
//!
//! A relay with `credential.kind = "anthropic_oauth"` or `"chatgpt"`
//! reads its access token from a host file (`credential.from_file`) on
//! each dispatch ([`fetch`]). When the token expires within
//! [`REFRESH_MARGIN_MS`], the host refreshes it against the token
//! endpoint (`credential.token_url`, else [`default_token_url`]), one
//! refresh at a time (an exclusive `flock` on `<file>.lock`, the file
//! re-read once the lock is held, so a second launcher uses the first
//! one's result), and saves the rotated tokens atomically (a 0600 temp
//! file in the same directory, fsync, rename, fsync of the directory).
//! The worker never sees this file, the refresh token or the endpoint.
//!
//! File formats (recognised by their keys; the rotated tokens are written
//! back in the same format, other keys kept):
//! - palisade's: `{"access_token", "refresh_token", "expires_at"` (unix
//!   milliseconds)`, "account_id"?}`;
//! - Claude Code's `~/.claude/.credentials.json`:
//!   `{"claudeAiOauth": {"accessToken", "refreshToken", "expiresAt"}}`;
//! - Codex's `$CODEX_HOME/auth.json`: `{"tokens": {"id_token",
//!   "access_token", "refresh_token", "account_id"}, "last_refresh"}`
//!   (the expiry is the access token's JWT `exp`).
//!
//! Errors name the file or endpoint and what went wrong, never a token.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use palisade_schema::host_policy::CredentialKind;
use zeroize::Zeroizing;

use crate::relay::Secret;

/// A token expiring within this many milliseconds is refreshed first (5
/// minutes).
pub const REFRESH_MARGIN_MS: u64 = 5 * 60 * 1000;

/// The OAuth client id Claude Code refreshes with.
pub const ANTHROPIC_CLIENT_ID: &str = "9d1c250a-e61b-44d9-88ed-5944d1962f5e";

/// The OAuth client id Codex refreshes with.
pub const OPENAI_CLIENT_ID: &str = "app_EMoamEEZ73f0CkXaXp7hrann";

/// The largest token endpoint response read (64 KiB).
const MAX_RESPONSE: usize = 64 * 1024;

/// The token endpoint of a kind when `token_url` is absent.
pub fn default_token_url(kind: CredentialKind) -> Option<&'static str> {
    match kind {
        CredentialKind::AnthropicOauth => Some("https://platform.claude.com/v1/oauth/token"),
        CredentialKind::ChatGpt => Some("https://auth.openai.com/oauth/token"),
        _ => None,
    }
}

/// Why a token could not be had. Never carries a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The file could not be read, locked or written.
    #[error("token file {path}: {reason}")]
    File {
        /// The token file.
        path: String,
        /// What failed (an OS error, no file content).
        reason: String,
    },
    /// The file is not one of the recognised formats.
    #[error("token file {path}: {reason}")]
    Format {
        /// The token file.
        path: String,
        /// What is missing.
        reason: &'static str,
    },
    /// The token expires soon and the refresh failed.
    #[error(
        "token file {path}: the access token {when} and refreshing it at {url} failed: {reason}"
    )]
    Refresh {
        /// The token file.
        path: String,
        /// `has expired` or `expires within 5 minutes`.
        when: &'static str,
        /// The token endpoint.
        url: String,
        /// What failed (a status and the OAuth `error` code at most).
        reason: String,
    },
    /// The kind has no token file.
    #[error("credential kind `{0}` is not read from a token file")]
    NotOauth(&'static str),
}

/// Where a credential's tokens live and how they are refreshed.
#[derive(Clone)]
pub struct TokenSource {
    path: PathBuf,
    kind: CredentialKind,
    token_url: String,
    roots: rustls::RootCertStore,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("path", &self.path)
            .field("kind", &self.kind)
            .field("token_url", &self.token_url)
            .finish_non_exhaustive()
    }
}

/// A usable access token.
#[derive(Debug)]
#[non_exhaustive]
pub struct Fetched {
    /// The access token the relay injects.
    pub access_token: Secret,
    /// The ChatGPT account id (not secret), when the file has one.
    pub account_id: Option<String>,
    /// Expiry, unix milliseconds, when known.
    pub expires_at: Option<u64>,
    /// Whether this call refreshed it.
    pub refreshed: bool,
}

impl TokenSource {
    /// `path` (absolute) refreshed against `token_url` (or the kind's
    /// default) with the webpki roots; an API key kind is refused.
    pub fn new(
        path: &Path,
        kind: CredentialKind,
        token_url: Option<&str>,
    ) -> Result<Self, TokenError> {
        let url = token_url
            .or_else(|| default_token_url(kind))
            .ok_or(TokenError::NotOauth(kind.as_str()))?;
        Ok(Self {
            path: path.to_owned(),
            kind,
            token_url: url.to_owned(),
            roots: rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            },
        })
    }

    /// Trust these roots for the token endpoint instead (tests, `--relay-ca`).
    #[must_use]
    pub fn with_roots(mut self, roots: rustls::RootCertStore) -> Self {
        self.roots = roots;
        self
    }

    /// The token file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn file_err(&self, reason: impl std::fmt::Display) -> TokenError {
        TokenError::File {
            path: self.path.display().to_string(),
            reason: reason.to_string(),
        }
    }

    fn format_err(&self, reason: &'static str) -> TokenError {
        TokenError::Format {
            path: self.path.display().to_string(),
            reason,
        }
    }
}

/// The tokens as read, with the document they came from.
struct Stored {
    doc: serde_json::Value,
    shape: Shape,
    access: Secret,
    refresh: Option<Secret>,
    expires_at: Option<u64>,
    account_id: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Palisade,
    Claude,
    Codex,
}

/// The access token of `source`, refreshed first when it expires within
/// [`REFRESH_MARGIN_MS`] of `now_ms` (unix milliseconds). An expired
/// token whose refresh fails is an error; one that is only near expiry
/// is too (the session would lose it mid-run), with the reason.
pub async fn fetch(source: &TokenSource, now_ms: u64) -> Result<Fetched, TokenError> {
    let stored = read(source).await?;
    if !needs_refresh(&stored, now_ms) {
        return Ok(fetched(stored, false));
    }
    // one refresh at a time: take the lock, then read again
    let lock = lock(source).await?;
    let stored = read(source).await?;
    if !needs_refresh(&stored, now_ms) {
        drop(lock);
        return Ok(fetched(stored, false));
    }
    let when = if stored.expires_at.is_some_and(|e| e <= now_ms) {
        "has expired"
    } else {
        "expires within 5 minutes"
    };
    let refresh_err = |reason: String| TokenError::Refresh {
        path: source.path.display().to_string(),
        when,
        url: source.token_url.clone(),
        reason,
    };
    let Some(refresh_token) = stored.refresh.clone() else {
        return Err(refresh_err("the file has no refresh token".into()));
    };
    let answer = refresh(source, &refresh_token).await.map_err(refresh_err)?;
    let expires_at = answer
        .expires_in
        .map(|s| now_ms.saturating_add(s.saturating_mul(1000)))
        .or_else(|| jwt_exp_ms(answer.access.expose()));
    let updated = update(stored, answer, expires_at, now_ms);
    write_atomic(source, &updated.doc).await?;
    drop(lock);
    Ok(fetched(updated, true))
}

fn fetched(s: Stored, refreshed: bool) -> Fetched {
    Fetched {
        access_token: s.access,
        account_id: s.account_id,
        expires_at: s.expires_at,
        refreshed,
    }
}

fn needs_refresh(s: &Stored, now_ms: u64) -> bool {
    s.expires_at
        .is_some_and(|e| e <= now_ms.saturating_add(REFRESH_MARGIN_MS))
}

async fn read(source: &TokenSource) -> Result<Stored, TokenError> {
    let bytes = Zeroizing::new(
        tokio::fs::read(&source.path)
            .await
            .map_err(|e| source.file_err(e.kind()))?,
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|_| source.format_err("is not JSON"))?;
    parse(source, doc)
}

fn str_at(v: &serde_json::Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(serde_json::Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn parse(source: &TokenSource, doc: serde_json::Value) -> Result<Stored, TokenError> {
    let (shape, access, refresh, expires_at, account_id) = if let Some(c) = doc.get("claudeAiOauth")
    {
        (
            Shape::Claude,
            str_at(c, "accessToken"),
            str_at(c, "refreshToken"),
            c.get("expiresAt").and_then(serde_json::Value::as_u64),
            None,
        )
    } else if let Some(t) = doc.get("tokens").filter(|t| t.is_object()) {
        let access = str_at(t, "access_token");
        let exp = access.as_deref().and_then(jwt_exp_ms);
        (
            Shape::Codex,
            access,
            str_at(t, "refresh_token"),
            exp,
            str_at(t, "account_id"),
        )
    } else {
        (
            Shape::Palisade,
            str_at(&doc, "access_token"),
            str_at(&doc, "refresh_token"),
            doc.get("expires_at").and_then(serde_json::Value::as_u64),
            str_at(&doc, "account_id"),
        )
    };
    let access = access.ok_or_else(|| source.format_err("has no access token (expected `access_token`, `claudeAiOauth.accessToken` or `tokens.access_token`)"))?;
    let account_id = account_id.or_else(|| {
        if source.kind == CredentialKind::ChatGpt {
            jwt_account_id(&access)
        } else {
            None
        }
    });
    Ok(Stored {
        doc,
        shape,
        access: Secret::new(access),
        refresh: refresh.map(Secret::new),
        expires_at,
        account_id,
    })
}

/// The JSON payload of a JWT-shaped `token`, when it is one.
fn jwt_payload(token: &str) -> Option<serde_json::Value> {
    use base64::Engine as _;
    let mut parts = token.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    let raw = Zeroizing::new(
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload.trim_end_matches('='))
            .ok()?,
    );
    serde_json::from_slice(&raw).ok()
}

/// A JWT's `exp` in unix milliseconds.
fn jwt_exp_ms(token: &str) -> Option<u64> {
    jwt_payload(token)?
        .get("exp")?
        .as_u64()
        .map(|s| s.saturating_mul(1000))
}

/// A JWT's `https://api.openai.com/auth.chatgpt_account_id`.
pub fn jwt_account_id(token: &str) -> Option<String> {
    str_at(
        jwt_payload(token)?.get("https://api.openai.com/auth")?,
        "chatgpt_account_id",
    )
}

/// Held while refreshing: an exclusive `flock` on `<file>.lock`.
struct Lock(std::fs::File);

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

async fn lock(source: &TokenSource) -> Result<Lock, TokenError> {
    let mut name = source.path.as_os_str().to_owned();
    name.push(".lock");
    let path = PathBuf::from(name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| source.file_err(format!("cannot open its lock file: {}", e.kind())))?;
    tokio::task::spawn_blocking(move || file.lock().map(|()| Lock(file)))
        .await
        .map_err(|_| source.file_err("the lock task failed"))?
        .map_err(|e| source.file_err(format!("cannot lock: {}", e.kind())))
}

/// What the token endpoint answered.
struct Answer {
    access: Secret,
    refresh: Option<Secret>,
    id_token: Option<Secret>,
    expires_in: Option<u64>,
}

/// The refresh request body for the kind.
fn refresh_body(kind: CredentialKind, refresh_token: &Secret) -> Zeroizing<String> {
    let body = match kind {
        CredentialKind::ChatGpt => serde_json::json!({
            "client_id": OPENAI_CLIENT_ID,
            "grant_type": "refresh_token",
            "refresh_token": refresh_token.expose(),
            "scope": "openid profile email",
        }),
        _ => serde_json::json!({
            "grant_type": "refresh_token",
            "refresh_token": refresh_token.expose(),
            "client_id": ANTHROPIC_CLIENT_ID,
        }),
    };
    Zeroizing::new(body.to_string())
}

/// `POST token_url` with the refresh token; the reason of a failure has
/// no token in it.
async fn refresh(source: &TokenSource, refresh_token: &Secret) -> Result<Answer, String> {
    let (scheme, rest) = source
        .token_url
        .split_once("://")
        .ok_or("the token URL has no scheme")?;
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
    let origin = palisade_schema::host_policy::Origin::parse(&format!("{scheme}://{authority}"))?;
    if origin.scheme != "https" && !origin.is_loopback() {
        return Err("plain http is allowed only for a loopback token endpoint".into());
    }
    let host = origin
        .host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let tcp = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::net::TcpStream::connect((host.as_str(), origin.port)),
    )
    .await
    .map_err(|_| "connecting timed out".to_owned())?
    .map_err(|e| format!("cannot connect: {}", e.kind()))?;
    let body = refresh_body(source.kind, refresh_token);
    let req = http::Request::builder()
        .method("POST")
        .uri(path)
        .header(http::header::HOST, authority)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::USER_AGENT, "palisade-token-refresh")
        .body(Full::new(Bytes::from(body.as_bytes().to_vec())))
        .map_err(|_| "the request could not be built".to_owned())?;
    let exchange = async {
        if origin.scheme == "https" {
            let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|_| "TLS configuration failed".to_owned())?
            .with_root_certificates(source.roots.clone())
            .with_no_client_auth();
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|_| "the token endpoint host is not a TLS name".to_owned())?;
            let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS failed: {e}"))?;
            send(TokioIo::new(tls), req).await
        } else {
            send(TokioIo::new(tcp), req).await
        }
    };
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .map_err(|_| "the token endpoint did not answer in 30 s".to_owned())?
}

async fn send<I>(io: I, req: http::Request<Full<Bytes>>) -> Result<Answer, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|_| "the HTTP handshake failed".to_owned())?;
    tokio::spawn(conn);
    let resp = sender
        .send_request(req)
        .await
        .map_err(|_| "the request failed".to_owned())?;
    let status = resp.status();
    let body = http_body_util::Limited::new(resp.into_body(), MAX_RESPONSE)
        .collect()
        .await
        .map_err(|_| "the response body could not be read (or exceeds 64 KiB)".to_owned())?
        .to_bytes();
    let body = Zeroizing::new(body.to_vec());
    let doc: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    if !status.is_success() {
        // only the OAuth error code, and only when it is a plain word
        let code = doc
            .as_ref()
            .and_then(|d| str_at(d, "error"))
            .filter(|c| c.len() <= 64 && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        return Err(match code {
            Some(c) => format!("HTTP {} ({c})", status.as_u16()),
            None => format!("HTTP {}", status.as_u16()),
        });
    }
    let doc = doc.ok_or("the response is not JSON")?;
    let access = str_at(&doc, "access_token").ok_or("the response has no access_token")?;
    Ok(Answer {
        access: Secret::new(access),
        refresh: str_at(&doc, "refresh_token").map(Secret::new),
        id_token: str_at(&doc, "id_token").map(Secret::new),
        expires_in: doc.get("expires_in").and_then(serde_json::Value::as_u64),
    })
}

/// The stored document with the rotated tokens (a refresh token the
/// endpoint did not rotate is kept).
fn update(mut s: Stored, a: Answer, expires_at: Option<u64>, now_ms: u64) -> Stored {
    use serde_json::Value;
    let refresh = a.refresh.or(s.refresh.take());
    let set = |obj: &mut Value, key: &str, v: Value| {
        if let Some(m) = obj.as_object_mut() {
            m.insert(key.to_owned(), v);
        }
    };
    let exp = expires_at.map_or(Value::Null, Value::from);
    let r = refresh
        .as_ref()
        .map_or(Value::Null, |r| Value::from(r.expose()));
    match s.shape {
        Shape::Palisade => {
            set(&mut s.doc, "access_token", a.access.expose().into());
            set(&mut s.doc, "refresh_token", r);
            set(&mut s.doc, "expires_at", exp);
        }
        Shape::Claude => {
            if let Some(c) = s.doc.get_mut("claudeAiOauth") {
                set(c, "accessToken", a.access.expose().into());
                set(c, "refreshToken", r);
                set(c, "expiresAt", exp);
            }
        }
        Shape::Codex => {
            if let Some(t) = s.doc.get_mut("tokens") {
                set(t, "access_token", a.access.expose().into());
                set(t, "refresh_token", r);
                if let Some(id) = &a.id_token {
                    set(t, "id_token", id.expose().into());
                }
            }
            set(
                &mut s.doc,
                "last_refresh",
                Value::from(crate::relay::rfc3339_ms(now_ms)),
            );
        }
    }
    Stored {
        doc: s.doc,
        shape: s.shape,
        access: a.access,
        refresh,
        expires_at,
        account_id: s.account_id,
    }
}

/// Replace the token file with `doc`: a 0600 temp file beside it, fsync,
/// rename over it, fsync of the directory.
async fn write_atomic(source: &TokenSource, doc: &serde_json::Value) -> Result<(), TokenError> {
    let text = Zeroizing::new(
        serde_json::to_vec_pretty(doc).map_err(|_| source.file_err("cannot serialise"))?,
    );
    let path = source.path.clone();
    let err = source.clone();
    tokio::task::spawn_blocking(move || write_atomic_blocking(&path, &text))
        .await
        .map_err(|_| err.file_err("the write task failed"))?
        .map_err(|e| err.file_err(format!("cannot save the rotated tokens: {e}")))
}

fn write_atomic_blocking(path: &Path, text: &[u8]) -> Result<(), String> {
    let dir = path.parent().ok_or("the file has no directory")?;
    let name = path
        .file_name()
        .ok_or("the path has no file name")?
        .to_string_lossy()
        .into_owned();
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(|_| "no random bytes".to_owned())?;
    let hex: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = dir.join(format!(".{name}.{hex}.tmp"));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text)?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|e| e.kind().to_string())
}
