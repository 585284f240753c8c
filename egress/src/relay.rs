//! Host relays: a reverse proxy on a private Unix socket (directory 0700,
//! socket 0600) to **one** exact HTTPS origin, with `METHOD path` routes
//! matched on the raw path (a `{name}` segment matches one plain segment,
//! [`palisade_policy::relay_route`]). The worker holds a credential-shaped,
//! per-session random placeholder (for an HTTP Basic credential, as the
//! password of `Basic base64(username:placeholder)`); the relay checks it
//! in constant time, strips it with every
//! other inbound credential and hop-by-hop header, injects the host-held
//! credential, ignores the worker's `Host`, refuses method, URL and host
//! override headers (and a `_method` query parameter), never follows a
//! redirect (502) and redacts the credential from response headers and
//! trailers. Request bodies are buffered under bounds: a per-request cap
//! (413), a total across requests (503), an idle and an overall body
//! deadline (408); connections are capped (503). Refusals carry a JSON body
//! with a stable error type. A request reaches the origin only once its
//! admission record was accepted. Every request attempt gets exactly one record
//! (method, path without query, outcome, status, bytes), never a header
//! value, including heads hyper rejects (400, 414, 431), header timeouts and
//! connections closed mid-head.
//!
//! With a [`RelayGate`] ([`Relay::with_gate`], the governed session's), the
//! relay asks it for every request, once the request's body is read and
//! before the origin is dialled, whether its content may go to the relay's
//! provider (a refusal is 403 `routing_denied`, outcome
//! [`RelayOutcome::RoutingDenied`]), and feeds every response body, of any
//! status, to a [`ToolResultScanner`], telling the gate of each
//! provider-side web result before passing on the bytes that complete it.
//! The upstream is always asked for `accept-encoding: identity`; a response
//! under any other content or transfer coding is refused (502
//! `encoded_response`), never passed on unread.
//!
//! A request matching an outward route ([`Route::outward`]) is an outward
//! action: after admission and before the origin is dialled the relay
//! awaits [`RelayGate::outward`] (a relay without a gate denies), forwards
//! only on `allow`, exactly once, and reports it executed once
//! ([`RelayGate::outward_executed`]) when it was sent; anything else is 403
//! `outward_denied`, outcome [`RelayOutcome::OutwardDenied`], with the ticket.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Frame;
use hyper_util::rt::{TokioIo, TokioTimer};
use subtle::ConstantTimeEq as _;
use tokio::net::{TcpStream, UnixListener};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use zeroize::Zeroizing;

use crate::addr::AddressPolicy;
use crate::control::{AskAnswer, OutwardAction, OutwardAnswer, OutwardResult};
use crate::proxy::ShutdownSignal;
use crate::record::{ProxyEvent, Recorder, RelayOutcome, RelayRecord};
use crate::resolve::Resolver;
use palisade_policy::relay_route::{RouteMatch, match_route};
pub use palisade_schema::host_policy::CredentialKind;
use palisade_schema::host_policy::{
    Origin, OutwardKind, RelayPreset, RelayRoute, RequestHost, RouteOutward, placeholder_name,
};

mod gate;
mod git;
mod overrides;

pub use git::{
    ANOTHER_REF_REFUSED, GIT_DELETE_REF, GIT_FORCE_PUSH, GIT_PUSH, GIT_PUSH_OPTIONS, GitSettings,
    MAX_PACK_TIME,
};

pub use gate::{
    MAX_SCANNED, OutwardFuture, RelayGate, RouteRefusal, ServerToolResult, ToolResultScanner,
};

/// Fuzzing entry points (only with `cfg(fuzzing)` or the `testing` feature).
#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __fuzz {
    pub use super::gate::__fuzz::tool_results;
}

/// Default request body cap (32 MiB).
pub const DEFAULT_MAX_BODY: usize = 32 * 1024 * 1024;

/// Default cap on request body bytes buffered across all of a relay's
/// requests at once (64 MiB).
pub const DEFAULT_MAX_BUFFERED: usize = 64 * 1024 * 1024;

/// Default longest wait for the next request body bytes (10 s).
pub const DEFAULT_BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Default deadline for a whole request body, counted from the request's
/// arrival (60 s).
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// Timeouts are capped at this (30 years): a longer one, which could not
/// be added to a clock reading, means no timeout.
const NO_TIMEOUT: Duration = Duration::from_secs(86_400 * 365 * 30);

/// Default cap on open worker connections (32); one more gets 503.
pub const DEFAULT_MAX_CONNECTIONS: usize = 32;

/// Largest request head (request line and headers) and per-connection read
/// buffer, in bytes; a larger head gets 431.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Request bodies are held in blocks of this size (64 KiB): the bytes held
/// for one request are at most its body plus one block.
const BODY_BLOCK: usize = 64 * 1024;

/// A response header value holding this many consecutive bytes of the
/// credential (or all of it, when shorter) is redacted.
pub const LEAK_WINDOW: usize = 12;

/// What replaces a response header value that carries the credential.
pub const REDACTED: &str = "[redacted by palisade]";

/// Inbound headers that would make the origin route the request to another
/// method, path or host than the exact route matched: refused with 400
/// `override_not_allowed` (as is a `_method` query parameter or a second
/// `Host`).
pub const OVERRIDE_HEADERS: [&str; 14] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-method",
    "x-original-url",
    "x-original-uri",
    "x-rewrite-url",
    "x-envoy-original-path",
    "x-host",
    "x-forwarded-host",
    "x-forwarded-server",
    "x-forwarded-prefix",
    "x-forwarded-path",
    "x-forwarded-uri",
];

/// Query parameter names refused like [`OVERRIDE_HEADERS`] (compared after
/// percent-decoding, ignoring ASCII case).
pub const OVERRIDE_QUERY_KEYS: [&str; 4] = [
    "_method",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Inbound headers never forwarded (credentials, hop-by-hop, forwarding);
/// every other `x-forwarded-*` header is removed too.
pub const STRIPPED: [&str; 21] = [
    "authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
    "host",
    "proxy-authorization",
    "proxy-connection",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
    "accept-encoding",
];

/// Response headers never passed back to the worker.
pub const RESPONSE_STRIPPED: [&str; 8] = [
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "content-encoding",
    "set-cookie",
    "proxy-authenticate",
    "upgrade",
];

/// A refused relay configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RelayConfigError {
    /// The origin is not `https://host[:port]`.
    #[error("relay origin `{origin}` {reason}")]
    Origin {
        /// The origin as written.
        origin: String,
        /// Why.
        reason: &'static str,
    },
    /// A route is not `METHOD /exact/path`.
    #[error(
        "relay route `{0}` must be `METHOD /path` (uppercase method, absolute path, no query, no `..`)"
    )]
    Route(String),
    /// An outward route's kind or target is not one the relay can decide.
    #[error(
        "relay route `{0}`: the outward kind must be a kind such as `github.post.comment` (not `*`) and the target a non-empty template naming only the route's `{{name}}` placeholders"
    )]
    Outward(String),
    /// No route configured.
    #[error("relay `{0}` has no routes")]
    NoRoutes(String),
    /// The credential header name or value could split a request.
    #[error("invalid relay credential header: {0}")]
    Credential(&'static str),
    /// A relay setting this build cannot apply (never silently ignored).
    #[error("relay `{0}` uses a setting this relay cannot apply")]
    Unsupported(String),
    /// A credential kind this relay cannot carry; the message says what
    /// to use instead.
    #[error("relay `{relay}`: a `{kind}` credential {reason}")]
    Kind {
        /// The relay's name.
        relay: String,
        /// `credential.kind`.
        kind: &'static str,
        /// Why, and what to use instead.
        reason: &'static str,
    },
    /// No random bytes for the placeholder.
    #[error("cannot generate a relay placeholder: no random bytes")]
    Placeholder,
}

/// A `METHOD path` route: literal segments match only themselves, a
/// `{name}` segment matches one plain path segment
/// ([`palisade_policy::relay_route::is_plain_segment`]); with an outward
/// class ([`Route::outward`]) a matching request is an outward action the
/// relay's gate decides before it is forwarded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    route: RelayRoute,
}

impl Route {
    /// Parse `POST /v1/messages` or `POST /repos/{owner}/{repo}/issues`
    /// (a plain route).
    pub fn parse(s: &str) -> Result<Self, RelayConfigError> {
        let err = || RelayConfigError::Route(s.to_owned());
        let (m, p) = s.split_once(' ').ok_or_else(err)?;
        if m.is_empty() || !m.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(err());
        }
        if !p.starts_with('/')
            || p.contains(['?', '#', '%', ' ', '\\'])
            || p.split('/').any(|seg| seg == ".." || seg == ".")
            || !p.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(err());
        }
        Method::from_bytes(m.as_bytes()).map_err(|_| err())?;
        // placeholders are whole segments (`{name}`), nothing else braces
        let route = RelayRoute::parse(s).map_err(|_| err())?;
        Ok(Self { route })
    }

    /// The route a policy's `routes` entry asks for, with its outward
    /// class when it has one (checked as [`Route::parse`] and
    /// [`Route::outward`] check them).
    pub fn from_policy(route: &RelayRoute) -> Result<Self, RelayConfigError> {
        let plain = Self::parse(&format!("{} {}", route.method, route.path))?;
        match &route.outward {
            None => Ok(plain),
            Some(o) => plain.outward(o.kind.as_str(), &o.target),
        }
    }

    /// The same route as an outward action of `kind` on `target`, a
    /// template whose `{name}`s are this route's placeholders
    /// (`github.com/{owner}/{repo}/issues/{number}`).
    pub fn outward(mut self, kind: &str, target: &str) -> Result<Self, RelayConfigError> {
        let err = || RelayConfigError::Outward(format!("{self} (`{kind}` on `{target}`)"));
        let kind = OutwardKind::parse(kind).map_err(|_| err())?;
        if kind.as_str() == "*" || !target_names_placeholders(target, &self.route) {
            return Err(err());
        }
        self.route.outward = Some(RouteOutward {
            kind,
            target: target.to_owned(),
        });
        Ok(self)
    }

    /// The method (`POST`).
    pub fn method(&self) -> &str {
        &self.route.method
    }

    /// The path, placeholders as written (`/repos/{owner}/{repo}/issues`).
    pub fn path(&self) -> &str {
        &self.route.path
    }

    /// The outward kind, for an outward route.
    pub fn outward_kind(&self) -> Option<&str> {
        self.route.outward.as_ref().map(|o| o.kind.as_str())
    }

    /// The target template, for an outward route.
    pub fn target(&self) -> Option<&str> {
        self.route.outward.as_ref().map(|o| o.target.as_str())
    }

    /// The route as the policy types spell it.
    pub fn as_policy(&self) -> &RelayRoute {
        &self.route
    }
}

/// Whether every `{name}` of `target` is a placeholder of `route`, and
/// every brace is part of one.
fn target_names_placeholders(target: &str, route: &RelayRoute) -> bool {
    let mut rest = target;
    while let Some(open) = rest.find(['{', '}']) {
        let tail = rest.get(open..).unwrap_or_default();
        let Some(close) = tail.find('}') else {
            return false;
        };
        let Some(name) = placeholder_name(tail.get(..=close).unwrap_or_default()) else {
            return false;
        };
        if !route.placeholders().any(|p| p == name) {
            return false;
        }
        rest = tail.get(close + 1..).unwrap_or_default();
    }
    !target.is_empty()
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.route.method, self.route.path)
    }
}

/// The credential value: `palisade_evidence`'s `Secret` (zeroized on
/// drop, redacted `Debug`, no `Serialize`), the one secret type of the
/// workspace.
pub use palisade_evidence::Secret;

/// How the credential travels: header name and value prefix (`Bearer `),
/// or HTTP Basic with a username ([`Credential::basic`]).
#[derive(Clone, Debug)]
pub struct Credential {
    header: HeaderName,
    prefix: String,
    secret: Secret,
    /// HTTP Basic: `authorization: Basic base64(username:secret)`, and the
    /// worker presents `Basic base64(username:placeholder)`.
    username: Option<String>,
    /// What the secret is: an OAuth kind adds its provider's headers
    /// upstream ([`Credential::oauth`]).
    kind: CredentialKind,
}

impl Credential {
    /// `header: prefix + secret`. The name must match `[A-Za-z0-9-]+`; the
    /// prefix and secret must not contain CR, LF or NUL, and the secret
    /// must not be empty.
    pub fn new(header: &str, prefix: &str, secret: Secret) -> Result<Self, RelayConfigError> {
        if header.is_empty()
            || !header
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(RelayConfigError::Credential(
                "header name must match [A-Za-z0-9-]+",
            ));
        }
        let bad = |s: &str| s.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0);
        if secret.expose().is_empty() {
            return Err(RelayConfigError::Credential("empty credential value"));
        }
        if bad(prefix)
            || bad(secret.expose())
            || HeaderValue::from_str(&format!("{prefix}{}", secret.expose())).is_err()
        {
            return Err(RelayConfigError::Credential(
                "value contains CR, LF or another forbidden byte",
            ));
        }
        let header = HeaderName::from_bytes(header.to_ascii_lowercase().as_bytes())
            .map_err(|_| RelayConfigError::Credential("header name must match [A-Za-z0-9-]+"))?;
        Ok(Self {
            header,
            prefix: prefix.to_owned(),
            secret,
            username: None,
            kind: CredentialKind::ApiKey,
        })
    }

    /// An OAuth access token (`kind` is [`CredentialKind::AnthropicOauth`]
    /// or [`CredentialKind::ChatGpt`]): sent as `authorization: Bearer
    /// <token>`, and the worker presents `authorization: Bearer
    /// <placeholder>`. An Anthropic one also gets the OAuth beta header
    /// ([`ANTHROPIC_OAUTH_BETA`]) merged into `anthropic-beta` upstream.
    /// [`CredentialKind::ApiKey`] is refused (use [`Credential::new`]).
    pub fn oauth(kind: CredentialKind, access_token: Secret) -> Result<Self, RelayConfigError> {
        if !kind.is_oauth() {
            return Err(RelayConfigError::Credential(
                "an API key is built with Credential::new",
            ));
        }
        let mut c = Self::new("authorization", "Bearer ", access_token)?;
        c.kind = kind;
        Ok(c)
    }

    /// What the secret is.
    pub fn kind(&self) -> CredentialKind {
        self.kind
    }

    /// HTTP Basic (what git hosts expect): the upstream gets
    /// `authorization: Basic base64(username:secret)`, and the worker must
    /// present `authorization: Basic base64(username:placeholder)`. The
    /// username must be non-empty printable ASCII without `:`; the secret
    /// as for [`Credential::new`].
    pub fn basic(username: &str, secret: Secret) -> Result<Self, RelayConfigError> {
        if username.is_empty()
            || username.contains(':')
            || !username.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(RelayConfigError::Credential(
                "a Basic username must be printable ASCII without `:`",
            ));
        }
        let mut c = Self::new("authorization", "", secret)?;
        c.username = Some(username.to_owned());
        Ok(c)
    }

    /// The header name.
    pub fn header(&self) -> &HeaderName {
        &self.header
    }

    /// The text sent before the secret (`Bearer `).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The HTTP Basic username, for a [`Credential::basic`] credential.
    pub fn username(&self) -> Option<&str> {
        self.username.as_deref()
    }

    /// The credential header value sent upstream (marked sensitive).
    pub(crate) fn upstream_value(&self) -> Option<HeaderValue> {
        let text = match &self.username {
            Some(user) => basic_value(user, self.secret.expose()),
            None => Zeroizing::new(format!("{}{}", self.prefix, self.secret.expose())),
        };
        let mut v = HeaderValue::from_str(&text).ok()?;
        v.set_sensitive(true);
        Some(v)
    }

    /// Whether `headers` carry the worker's `placeholder` in this
    /// credential's header, compared in constant time (a Basic one after
    /// decoding, user and password at once). Never logs either.
    pub(crate) fn presented(&self, headers: &http::HeaderMap, placeholder: &Placeholder) -> bool {
        let Some(value) = headers.get(&self.header).map(HeaderValue::as_bytes) else {
            return false;
        };
        match &self.username {
            None => strip_prefix_ci(value, self.prefix.as_bytes())
                .is_some_and(|p| bool::from(p.ct_eq(placeholder.expose().as_bytes()))),
            Some(user) => {
                use base64::Engine as _;
                let Some(encoded) = strip_prefix_ci(value, b"basic ") else {
                    return false;
                };
                let Ok(decoded) = base64::engine::general_purpose::STANDARD
                    .decode(encoded.trim_ascii())
                    .map(Zeroizing::new)
                else {
                    return false;
                };
                let want = Zeroizing::new(format!("{user}:{}", placeholder.expose()));
                bool::from(decoded.as_slice().ct_eq(want.as_bytes()))
            }
        }
    }
}

/// `Basic base64(user:password)`, zeroized on drop.
fn basic_value(user: &str, password: &str) -> Zeroizing<String> {
    use base64::Engine as _;
    let pair = Zeroizing::new(format!("{user}:{password}"));
    let mut out = Zeroizing::new(String::from("Basic "));
    base64::engine::general_purpose::STANDARD.encode_string(pair.as_bytes(), &mut out);
    out
}

/// The `authorization` value a worker presents to a relay with a Basic
/// credential: `Basic base64(username:placeholder)` (what the session
/// puts in the worker's git configuration).
pub fn basic_placeholder(username: &str, placeholder: &Placeholder) -> Zeroizing<String> {
    basic_value(username, placeholder.expose())
}

/// The shape of a placeholder: random base64url characters between a
/// prefix and a suffix, so client libraries' key-format checks pass.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlaceholderFormat {
    /// Literal prefix (e.g. `sk-ant-api03-`).
    pub prefix: String,
    /// Number of random characters (6 bits each; at least 22 for 128 bits).
    pub random_chars: usize,
    /// Literal suffix.
    pub suffix: String,
    /// `Some(account id)`: the placeholder is JWT-shaped
    /// ([`PlaceholderFormat::chatgpt`]); `prefix` and `suffix` are unused.
    pub jwt_account: Option<String>,
}

impl PlaceholderFormat {
    /// The shape a relay's client library expects, guessed from the
    /// relay: [`Self::anthropic`] when its name, origin host or credential
    /// variable mentions Anthropic or the header is `x-api-key`,
    /// [`Self::openai`] when they mention OpenAI, else [`Self::generic`].
    /// An OAuth kind decides alone: [`Self::anthropic_oauth`] for
    /// `anthropic_oauth`, [`Self::chatgpt`] (with no account id yet: the
    /// caller that read the token file replaces it) for `chatgpt`.
    pub fn for_relay(relay: &palisade_schema::host_policy::Relay) -> Self {
        match relay.credential.kind {
            CredentialKind::AnthropicOauth => return Self::anthropic_oauth(),
            CredentialKind::ChatGpt => return Self::chatgpt(""),
            _ => {}
        }
        let hay = format!(
            "{} {} {}",
            relay.name, relay.origin.host, relay.credential.from_env
        )
        .to_ascii_lowercase();
        if hay.contains("anthropic") || relay.credential.header.eq_ignore_ascii_case("x-api-key") {
            Self::anthropic()
        } else if hay.contains("openai") {
            Self::openai()
        } else {
            Self::generic()
        }
    }

    /// A shape: `prefix`, `random_chars` random base64url characters (at
    /// least 22 are generated), `suffix`.
    pub fn new(prefix: &str, random_chars: usize, suffix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            random_chars,
            suffix: suffix.to_owned(),
            jwt_account: None,
        }
    }

    /// Claude subscription OAuth access token shape: `sk-ant-oat01-` + 93
    /// chars + `AA` (108 chars), which Claude Code and Pi send in
    /// `authorization: Bearer …`.
    pub fn anthropic_oauth() -> Self {
        Self::new("sk-ant-oat01-", 93, "AA")
    }

    /// A ChatGPT access token shape: a JWT (`header.payload.signature`,
    /// base64url without padding) whose payload carries the non-secret
    /// `account_id` in `https://api.openai.com/auth.chatgpt_account_id`,
    /// `exp` far ahead (so the agent never tries to refresh it) and a
    /// random `nonce` of `random_chars` characters; the signature is
    /// random too. Nothing in it is derived from the real token.
    pub fn chatgpt(account_id: &str) -> Self {
        let mut f = Self::new("", 43, "");
        f.jwt_account = Some(account_id.to_owned());
        f
    }

    /// Anthropic API key shape: `sk-ant-api03-` + 93 chars + `AA` (108 chars).
    pub fn anthropic() -> Self {
        Self {
            prefix: "sk-ant-api03-".into(),
            random_chars: 93,
            suffix: "AA".into(),
            jwt_account: None,
        }
    }

    /// OpenAI project key shape: `sk-proj-` + 156 chars.
    pub fn openai() -> Self {
        Self {
            prefix: "sk-proj-".into(),
            random_chars: 156,
            suffix: String::new(),
            jwt_account: None,
        }
    }

    /// A neutral shape: `palisade-` + 43 chars.
    pub fn generic() -> Self {
        Self {
            prefix: "palisade-".into(),
            random_chars: 43,
            suffix: String::new(),
            jwt_account: None,
        }
    }
}

/// The worker-side stand-in for the credential: random per session.
#[derive(Clone)]
pub struct Placeholder(Zeroizing<String>);

impl fmt::Debug for Placeholder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Placeholder(<redacted>)")
    }
}

impl Placeholder {
    /// Generate a fresh placeholder (at least 128 random bits).
    pub fn generate(format: &PlaceholderFormat) -> io::Result<Self> {
        if let Some(account) = &format.jwt_account {
            let n = format.random_chars.max(22);
            let mut raw = Zeroizing::new(vec![0u8; n + 64]);
            getrandom::fill(&mut raw).map_err(|e| io::Error::other(e.to_string()))?;
            return Ok(jwt_placeholder(account, &raw));
        }
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let n = format.random_chars.max(22);
        let mut raw = Zeroizing::new(vec![0u8; n]);
        getrandom::fill(&mut raw).map_err(|e| io::Error::other(e.to_string()))?;
        let mut s = Zeroizing::new(String::with_capacity(
            format.prefix.len() + n + format.suffix.len(),
        ));
        s.push_str(&format.prefix);
        for b in raw.iter() {
            let c = ALPHABET.get(usize::from(*b & 63)).copied().unwrap_or(b'A');
            s.push(char::from(c));
        }
        s.push_str(&format.suffix);
        Ok(Self(s))
    }

    /// A stable placeholder: the same `key` and `label` give the same
    /// value, so an agent that remembers the key it was given (Claude's
    /// "use this custom API key?" answer) sees the same one next session.
    /// The characters are HMAC-SHA256(`key`, `label` ‖ counter) in the
    /// `format`'s shape: without `key` (host-held, 32 random bytes, never
    /// in the worker's view) nothing about the value is predictable, and
    /// it is never derived from the real credential.
    pub fn derive(key: &[u8], label: &str, format: &PlaceholderFormat) -> Self {
        use hmac::Mac as _;
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut n = format.random_chars.max(22);
        if format.jwt_account.is_some() {
            // the nonce and a 64-byte signature, from the same stream
            n += 64;
        }
        let mut s = Zeroizing::new(String::with_capacity(
            format.prefix.len() + n + format.suffix.len(),
        ));
        s.push_str(&format.prefix);
        let mut counter: u32 = 0;
        let mut made = 0;
        while made < n {
            // HMAC accepts a key of any length.
            let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(key) else {
                break;
            };
            mac.update(label.as_bytes());
            mac.update(&counter.to_be_bytes());
            let block: Zeroizing<[u8; 32]> = Zeroizing::new(mac.finalize().into_bytes().into());
            for b in block.iter().take(n - made) {
                let c = ALPHABET.get(usize::from(*b & 63)).copied().unwrap_or(b'A');
                s.push(char::from(c));
                made += 1;
            }
            counter += 1;
        }
        if let Some(account) = &format.jwt_account {
            let bytes = Zeroizing::new(
                s.as_bytes()
                    .get(format.prefix.len()..)
                    .unwrap_or_default()
                    .to_vec(),
            );
            return jwt_placeholder(account, &bytes);
        }
        s.push_str(&format.suffix);
        Self(s)
    }

    /// The value to give the worker.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// `base64url(header).base64url(payload).base64url(signature)`: the
/// payload carries `account` as the ChatGPT account id claim, `exp` in
/// 2100 and a nonce from `random` (all but its last 64 bytes, which
/// are the signature). The same `random` gives the same placeholder.
fn jwt_placeholder(account: &str, random: &[u8]) -> Placeholder {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let split = random.len().saturating_sub(64);
    let (nonce, sig) = random.split_at(split);
    let header = serde_json::json!({"alg": "RS256", "typ": "JWT"});
    let payload = serde_json::json!({
        "iss": "palisade",
        "aud": ["https://api.openai.com/v1"],
        "exp": JWT_PLACEHOLDER_EXP,
        "iat": 0,
        "nonce": b64.encode(nonce),
        "https://api.openai.com/auth": {
            "chatgpt_account_id": account,
            "chatgpt_plan_type": "plus",
        },
    });
    let mut s = Zeroizing::new(String::new());
    b64.encode_string(header.to_string(), &mut s);
    s.push('.');
    b64.encode_string(payload.to_string(), &mut s);
    s.push('.');
    b64.encode_string(sig, &mut s);
    Placeholder(s)
}

/// `exp` of a JWT-shaped placeholder: 2100-01-01, so an agent that checks
/// the expiry never tries to refresh it.
const JWT_PLACEHOLDER_EXP: u64 = 4_102_444_800;

/// The beta flag Anthropic requires with an OAuth access token.
pub const ANTHROPIC_OAUTH_BETA: &str = "oauth-2025-04-20";

/// The `auth.json` Codex reads from `CODEX_HOME` for a ChatGPT login, with
/// the relay's JWT-shaped `placeholder` as both tokens, no refresh token
/// (`""`: Codex never refreshes; the host does) and `last_refresh` set to
/// `now_unix` (seconds), so Codex does not consider it stale.
pub fn chatgpt_auth_json(
    placeholder: &Placeholder,
    account_id: &str,
    now_unix: u64,
) -> Zeroizing<String> {
    let doc = serde_json::json!({
        "OPENAI_API_KEY": null,
        "tokens": {
            "id_token": placeholder.expose(),
            "access_token": placeholder.expose(),
            "refresh_token": "",
            "account_id": account_id,
        },
        "last_refresh": rfc3339(now_unix),
    });
    Zeroizing::new(doc.to_string())
}

/// [`rfc3339`] of unix milliseconds.
pub(crate) fn rfc3339_ms(ms: u64) -> String {
    rfc3339(ms / 1000)
}

/// `YYYY-MM-DDTHH:MM:SSZ` for unix seconds (proleptic Gregorian, UTC).
fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `anthropic-beta` for an OAuth request: the worker's flags (every
/// `anthropic-beta` header, comma-separated, trimmed, each once) and
/// [`ANTHROPIC_OAUTH_BETA`], in one header.
fn merge_oauth_beta(headers: &mut http::HeaderMap) {
    let name = HeaderName::from_static("anthropic-beta");
    let mut flags: Vec<String> = Vec::new();
    for v in headers.get_all(&name) {
        for f in String::from_utf8_lossy(v.as_bytes()).split(',') {
            let f = f.trim();
            if !f.is_empty() && !flags.iter().any(|x| x == f) {
                flags.push(f.to_owned());
            }
        }
    }
    if !flags.iter().any(|x| x == ANTHROPIC_OAUTH_BETA) {
        flags.push(ANTHROPIC_OAUTH_BETA.to_owned());
    }
    if let Ok(v) = HeaderValue::from_str(&flags.join(",")) {
        headers.insert(name, v);
    }
}

/// A relay's configuration.
///
/// Made by [`RelayConfig::from_policy`] from a policy's `[[egress.relay]]`
/// (what `palisade relay` and `palisade run --policy` use), or by
/// [`RelayConfig::new`] from parts; the limits are public fields.
#[derive(Clone)]
#[non_exhaustive]
pub struct RelayConfig {
    /// A name for records.
    pub name: String,
    /// The routing provider this relay sends content to (the policy's
    /// `provider`, defaulting to the name); what [`RelayGate::admit`] is asked about.
    pub provider: String,
    /// The one upstream origin (`https` only; see [`RelayConfig::origin`]).
    origin: Origin,
    /// The origin's host, parsed once when the config is made.
    upstream: RequestHost,
    /// The routes (`METHOD path`, placeholders matching one segment, an
    /// outward class on some); none for a git relay, whose routes are
    /// implicit.
    pub routes: Vec<Route>,
    /// The policy's `preset`, whose routes are among [`Self::routes`]
    /// (kept for records and display).
    pub preset: Option<RelayPreset>,
    /// `kind = "git"`: git smart HTTP, each ref update of a push an
    /// outward action (`relay/git.rs`); `None` for an HTTP relay.
    pub git: Option<GitSettings>,
    /// The host-held credential.
    pub credential: Credential,
    /// The per-session placeholder the worker presents in the credential header.
    pub placeholder: Placeholder,
    /// Request body cap, in bytes ([`DEFAULT_MAX_BODY`]).
    pub max_body: usize,
    /// Cap on request body bytes buffered across all requests at once
    /// ([`DEFAULT_MAX_BUFFERED`]); a request that would pass it gets 503
    /// `relay_busy`.
    pub max_buffered: usize,
    /// Longest wait for the next request body bytes
    /// ([`DEFAULT_BODY_IDLE_TIMEOUT`]); then 408 `body_timeout`.
    pub body_idle_timeout: Duration,
    /// Deadline for the whole request body from the request's arrival
    /// ([`DEFAULT_BODY_TIMEOUT`]); then 408 `body_timeout`.
    pub body_timeout: Duration,
    /// Cap on open worker connections ([`DEFAULT_MAX_CONNECTIONS`]); one
    /// more gets 503 `relay_busy` and is closed.
    pub max_connections: usize,
    /// TLS client configuration (roots) for the upstream.
    pub tls: Arc<rustls::ClientConfig>,
    /// The address deny set (the relay is an egress path too).
    pub addresses: AddressPolicy,
    /// Upstream connect timeout.
    pub connect_timeout: Duration,
    /// Time allowed for a request head on the socket.
    pub header_timeout: Duration,
}

impl fmt::Debug for RelayConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RelayConfig")
            .field("name", &self.name)
            .field("origin", &self.origin)
            .field("routes", &self.routes)
            .field("preset", &self.preset)
            .field("credential_header", &self.credential.header)
            .field("credential_basic", &self.credential.username.is_some())
            .field("max_body", &self.max_body)
            .field("max_buffered", &self.max_buffered)
            .field("body_idle_timeout", &self.body_idle_timeout)
            .field("body_timeout", &self.body_timeout)
            .field("max_connections", &self.max_connections)
            .finish_non_exhaustive()
    }
}

impl RelayConfig {
    /// A config with defaults: 32 MiB body cap, 64 MiB buffered in total,
    /// webpki roots, the default address deny set, 10 s connect timeout,
    /// 30 s header timeout, 10 s body idle timeout, 60 s body deadline, 32
    /// connections.
    pub fn new(
        name: &str,
        origin: Origin,
        routes: Vec<Route>,
        credential: Credential,
        placeholder: Placeholder,
    ) -> Result<Self, RelayConfigError> {
        if routes.is_empty() {
            return Err(RelayConfigError::NoRoutes(name.to_owned()));
        }
        Self::build(name, origin, routes, credential, placeholder)
    }

    /// A `kind = "git"` relay to `origin` (routes implicit), serving the
    /// `OWNER/REPO` paths `git` allows, with the defaults of
    /// [`RelayConfig::new`].
    pub fn new_git(
        name: &str,
        origin: Origin,
        git: GitSettings,
        credential: Credential,
        placeholder: Placeholder,
    ) -> Result<Self, RelayConfigError> {
        let mut config = Self::build(name, origin, Vec::new(), credential, placeholder)?;
        config.git = Some(git);
        Ok(config)
    }

    fn build(
        name: &str,
        origin: Origin,
        routes: Vec<Route>,
        credential: Credential,
        placeholder: Placeholder,
    ) -> Result<Self, RelayConfigError> {
        let origin_err = |reason| RelayConfigError::Origin {
            origin: origin.to_string(),
            reason,
        };
        if origin.scheme != "https" {
            return Err(origin_err("must use https://"));
        }
        let upstream =
            RequestHost::parse(&origin.host).map_err(|_| origin_err("has an invalid host"))?;
        if origin.port == 0 {
            return Err(origin_err("has an invalid port"));
        }
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        Ok(Self {
            name: name.to_owned(),
            provider: name.to_owned(),
            origin,
            upstream,
            routes,
            preset: None,
            git: None,
            credential,
            placeholder,
            max_body: DEFAULT_MAX_BODY,
            max_buffered: DEFAULT_MAX_BUFFERED,
            body_idle_timeout: DEFAULT_BODY_IDLE_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            tls: tls_client_config(roots)?,
            addresses: AddressPolicy::default(),
            connect_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(30),
        })
    }

    /// The configuration a policy's `[[egress.relay]]` asks for, with the
    /// host-held credential `secret` (read by the caller from the host
    /// variable `credential.from_env` names, never from the worker):
    /// `origin` (https only), `routes` (with their outward classes and
    /// placeholders, [`Route::from_policy`]), `preset` (whose routes the
    /// schema added to `routes`: refused if one is missing),
    /// `credential.header` and `credential.prefix`, or
    /// `credential.username` ([`Credential::basic`]; then the header must
    /// be `authorization` and there is no prefix), `limits`
    /// ([`RelayConfig::with_limits`]) and a fresh placeholder in
    /// [`PlaceholderFormat::for_relay`]'s shape (replace it with
    /// [`RelayConfig::with_placeholder`]). `kind = "git"` makes a git relay
    /// ([`RelayConfig::new_git`]) serving `repos`; a git relay with routes
    /// or a preset, or `repos` on an HTTP relay, is refused
    /// ([`RelayConfigError::Unsupported`]).
    ///
    /// Not taken from the relay section: `worker_env` (what the worker's
    /// environment gets, which is the sandbox's business: the CLI sets it
    /// from [`RelayConfig::placeholder`] and the relay's URL) and the
    /// address carve-outs, which are the `[egress]` section's: pass
    /// `ProxyConfig::from_egress(..).addresses` with
    /// [`RelayConfig::with_addresses`], else the default deny set (no
    /// carve-out) applies.
    pub fn from_policy(
        relay: &palisade_schema::host_policy::Relay,
        secret: Secret,
    ) -> Result<Self, RelayConfigError> {
        let palisade_schema::host_policy::Relay {
            name,
            provider,
            origin,
            routes,
            credential,
            worker_env: _,
            limits,
            kind,
            preset,
            repos,
        } = relay;
        let palisade_schema::host_policy::RelayCredential {
            header,
            from_env: _,
            prefix,
            username,
            kind: credential_kind,
            from_file: _,
            token_url: _,
        } = credential;
        check_kind(name, *credential_kind, *kind, *preset, username.is_some())?;
        // a git relay's routes are implicit (a preset adds routes, so it
        // is refused too); `repos` is a git relay's setting
        let git = *kind == palisade_schema::host_policy::RelayKind::Git;
        if (git && (!routes.is_empty() || preset.is_some())) || (!git && !repos.is_empty()) {
            return Err(RelayConfigError::Unsupported(name.clone()));
        }
        let routes = routes
            .iter()
            .map(Route::from_policy)
            .collect::<Result<Vec<_>, _>>()?;
        // the schema adds a preset's routes; a preset whose every route is
        // not here as the outward route it names would be a guard parsed
        // and not applied
        if let Some(palisade_schema::host_policy::RelayPreset::GitHub) = preset {
            let missing =
                palisade_schema::host_policy::GITHUB_REST_PRESET
                    .iter()
                    .any(|(m, p, k, t)| {
                        !routes.iter().any(|r| {
                            r.method() == *m
                                && r.path() == *p
                                && r.outward_kind() == Some(*k)
                                && r.target() == Some(*t)
                        })
                    });
            if missing {
                return Err(RelayConfigError::Unsupported(name.clone()));
            }
        }
        let credential = match username {
            _ if credential_kind.is_oauth() => Credential::oauth(*credential_kind, secret)?,
            Some(user) => {
                if !header.eq_ignore_ascii_case("authorization") || !prefix.is_empty() {
                    return Err(RelayConfigError::Credential(
                        "a Basic credential (`username`) goes in `authorization`, with no `prefix`",
                    ));
                }
                Credential::basic(user, secret)?
            }
            None => Credential::new(header, prefix, secret)?,
        };
        let placeholder = Placeholder::generate(&PlaceholderFormat::for_relay(relay))
            .map_err(|_| RelayConfigError::Placeholder)?;
        let config = if git {
            Self::new_git(
                name,
                origin.clone(),
                GitSettings::new(repos.clone()),
                credential,
                placeholder,
            )?
        } else {
            Self::new(name, origin.clone(), routes, credential, placeholder)?
        };
        let mut config = config.with_limits(limits);
        config.provider = provider.clone();
        config.preset = *preset;
        Ok(config)
    }

    /// The credential the relay injects (its kind, header and prefix).
    pub fn credential(&self) -> &Credential {
        &self.credential
    }

    /// Give the worker this placeholder instead of the generated one.
    #[must_use]
    pub fn with_placeholder(mut self, placeholder: Placeholder) -> Self {
        self.placeholder = placeholder;
        self
    }

    /// Use this address deny set and carve-outs (the proxy's, from the
    /// policy's `[egress]`) for the upstream.
    #[must_use]
    pub fn with_addresses(mut self, addresses: AddressPolicy) -> Self {
        self.addresses = addresses;
        self
    }

    /// The placeholder the worker presents in the credential header.
    pub fn placeholder(&self) -> &Placeholder {
        &self.placeholder
    }

    /// Apply a policy's `[[egress.relay]] limits`: each one set replaces
    /// its default; a `max_body` above the default total raises the total
    /// to it, so a body within the cap can be relayed.
    pub fn with_limits(mut self, limits: &palisade_schema::host_policy::RelayLimits) -> Self {
        // Every field named (no `..`): a key added to `[[egress.relay]]
        // limits` fails to compile here until it is applied.
        let palisade_schema::host_policy::RelayLimits {
            max_body,
            max_buffered,
            connections,
            header_timeout,
            body_idle_timeout,
            body_timeout,
        } = *limits;
        let bytes = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        if let Some(n) = max_body {
            self.max_body = bytes(n);
            self.max_buffered = self.max_buffered.max(self.max_body);
        }
        if let Some(n) = max_buffered {
            self.max_buffered = bytes(n);
        }
        if let Some(n) = connections {
            self.max_connections = bytes(n);
        }
        if let Some(s) = header_timeout {
            self.header_timeout = Duration::from_secs(s);
        }
        if let Some(s) = body_idle_timeout {
            self.body_idle_timeout = Duration::from_secs(s);
        }
        if let Some(s) = body_timeout {
            self.body_timeout = Duration::from_secs(s);
        }
        self
    }

    /// The one upstream origin.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The `Host` header value sent upstream: the origin's host, with the
    /// port unless it is 443.
    pub fn authority(&self) -> String {
        if self.origin.port == 443 {
            self.upstream.to_string()
        } else {
            format!("{}:{}", self.upstream, self.origin.port)
        }
    }

    /// Trust exactly these roots for the upstream (tests use an rcgen CA).
    pub fn with_roots(mut self, roots: rustls::RootCertStore) -> Result<Self, RelayConfigError> {
        self.tls = tls_client_config(roots)?;
        Ok(self)
    }
}

/// Whether a relay can carry a `kind` credential: an OAuth token goes
/// only as `Bearer` (no `username`), only to an HTTP relay, and only to
/// its own provider's preset; the ChatGPT backend takes nothing but a
/// ChatGPT token.
fn check_kind(
    relay: &str,
    kind: CredentialKind,
    relay_kind: palisade_schema::host_policy::RelayKind,
    preset: Option<palisade_schema::host_policy::RelayPreset>,
    basic: bool,
) -> Result<(), RelayConfigError> {
    use palisade_schema::host_policy::{RelayKind, RelayPreset};
    let refuse = |reason| {
        Err(RelayConfigError::Kind {
            relay: relay.to_owned(),
            kind: kind.as_str(),
            reason,
        })
    };
    if kind.is_oauth() && basic {
        return refuse("is sent as `authorization: Bearer …`, not HTTP Basic: remove `username`");
    }
    if kind.is_oauth() && relay_kind == RelayKind::Git {
        return refuse(
            "cannot authenticate a git relay: use `kind = \"api_key\"` with a token in `from_env`",
        );
    }
    match (kind, preset) {
        (CredentialKind::AnthropicOauth, Some(RelayPreset::OpenAi | RelayPreset::ChatGpt)) => {
            refuse(
                "is for the Anthropic API: use `preset = \"anthropic\"`, or `kind = \"chatgpt\"` on a `chatgpt` preset relay",
            )
        }
        (CredentialKind::AnthropicOauth, Some(RelayPreset::GitHub)) => {
            refuse("is for the Anthropic API, not GitHub: use `kind = \"api_key\"`")
        }
        (CredentialKind::ChatGpt, Some(RelayPreset::Anthropic)) => refuse(
            "is for the ChatGPT Codex backend: use `preset = \"chatgpt\"`, or `kind = \"anthropic_oauth\"` (or an API key) on an `anthropic` preset relay",
        ),
        (CredentialKind::ChatGpt, Some(RelayPreset::OpenAi)) => refuse(
            "is not accepted by the OpenAI API: use `preset = \"chatgpt\"`, or `kind = \"api_key\"` with an `sk-…` key on an `openai` preset relay",
        ),
        (CredentialKind::ChatGpt, Some(RelayPreset::GitHub)) => {
            refuse("is for the ChatGPT Codex backend, not GitHub: use `kind = \"api_key\"`")
        }
        (CredentialKind::ApiKey, Some(RelayPreset::ChatGpt)) => refuse(
            "is not accepted by the ChatGPT Codex backend: use `kind = \"chatgpt\"` with a token file, or `preset = \"openai\"` for an API key",
        ),
        _ => Ok(()),
    }
}

fn tls_client_config(
    roots: rustls::RootCertStore,
) -> Result<Arc<rustls::ClientConfig>, RelayConfigError> {
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|_| RelayConfigError::Origin {
        origin: String::new(),
        reason: "TLS configuration failed",
    })?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(cfg))
}

/// A Unix socket in a private directory, removed on drop.
#[derive(Debug)]
pub struct PrivateSocket {
    path: PathBuf,
    listener: Option<UnixListener>,
}

impl PrivateSocket {
    /// Bind `path`. Its directory is created with mode 0700 if missing;
    /// an existing directory must be owned by this user and not accessible
    /// to group or others. The socket is set to 0600. An existing file at
    /// `path` is refused (never replaced).
    pub fn bind(path: &Path) -> io::Result<Self> {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "socket path needs a directory")
            })?;
        match std::fs::symlink_metadata(dir) {
            Ok(meta) => {
                if !meta.is_dir() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{} is not a directory", dir.display()),
                    ));
                }
                if meta.uid() != nix::unistd::geteuid().as_raw() {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!("{} is not owned by this user", dir.display()),
                    ));
                }
                if meta.mode() & 0o077 != 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!(
                            "{} must be private (mode 0700), it is {:o}",
                            dir.display(),
                            meta.mode() & 0o777
                        ),
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
            }
            Err(e) => return Err(e),
        }
        if std::fs::symlink_metadata(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} already exists", path.display()),
            ));
        }
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        Ok(Self {
            path: path.to_owned(),
            listener: Some(listener),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateSocket {
    fn drop(&mut self) {
        drop(self.listener.take());
        let _ = std::fs::remove_file(&self.path);
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type RelayBody = BoxBody<Bytes, BoxError>;

struct Inner {
    config: RelayConfig,
    resolver: Arc<dyn Resolver>,
    recorder: Arc<dyn Recorder>,
    /// Asked before every request is sent upstream and told of the
    /// provider-side tool results in responses ([`Relay::with_gate`]).
    gate: Option<Arc<dyn RelayGate>>,
    leaks: Leaks,
    /// Request body bytes held right now, across requests.
    buffered: AtomicUsize,
    /// The most ever held at once.
    peak_buffered: AtomicUsize,
}

/// A host relay. Cheap to clone.
#[derive(Clone)]
pub struct Relay {
    inner: Arc<Inner>,
}

impl fmt::Debug for Relay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Relay")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// A refusal: status, stable code, message.
type Refusal = (StatusCode, &'static str, &'static str);

/// The header names a message's `Connection` header lists (lowercase):
/// hop-by-hop for that message, so never passed on.
fn connection_tokens(headers: &http::HeaderMap) -> Vec<String> {
    headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| {
            v.split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect()
}

impl Relay {
    /// The origin's response head, checked and cleaned for the worker, for
    /// every relay kind: a redirect is refused (502 `redirect_refused`, never
    /// followed), a response under a content or transfer coding is refused
    /// (502 `encoded_response`), the [`RESPONSE_STRIPPED`] headers and any the
    /// origin's `Connection` lists are removed, the origin's reason phrase is
    /// dropped (hyper would repeat it) and a header carrying the credential
    /// is redacted.
    pub(crate) fn clean_response(
        &self,
        resp: Response<hyper::body::Incoming>,
    ) -> Result<(http::response::Parts, RelayBody), Refusal> {
        if resp.status().is_redirection() {
            return Err((
                StatusCode::BAD_GATEWAY,
                "redirect_refused",
                "Relay upstream redirected; redirects are not followed",
            ));
        }
        let (mut parts, body) = resp.into_parts();
        if is_encoded(&parts.headers) {
            return Err(ENCODED_RESPONSE);
        }
        let listed = connection_tokens(&parts.headers);
        let names: Vec<HeaderName> = parts.headers.keys().cloned().collect();
        for name in names {
            let n = name.as_str();
            if RESPONSE_STRIPPED.contains(&n) || listed.iter().any(|l| l == n) {
                parts.headers.remove(&name);
            }
        }
        parts.extensions.remove::<hyper::ext::ReasonPhrase>();
        let redacted = self.inner.leaks.redact(&mut parts.headers);
        if redacted > 0 {
            tracing::warn!(
                target: "palisade_egress",
                relay = %self.inner.config.name,
                headers = redacted,
                "relay upstream reflected the credential in response headers; redacted"
            );
        }
        Ok((parts, body.map_err(|e| Box::new(e) as BoxError).boxed()))
    }
}

/// The request the origin gets, before its body and credential: the
/// worker's method and origin-form target, its headers less every one
/// [`STRIPPED`] names (compared also as CGI, WSGI and PHP read names:
/// `x_real_ip` is `x-real-ip`), any `proxy-*` or `x-forwarded-*`, any the
/// worker's `Connection` lists, the credential header and `also`; and the
/// `Host` value of the origin. The one header filter of every relay kind.
pub(crate) fn forwarded_request(
    cfg: &RelayConfig,
    parts: &http::request::Parts,
    also: &[HeaderName],
) -> Result<(http::request::Builder, HeaderValue), Refusal> {
    let listed = connection_tokens(&parts.headers);
    let mut builder = Request::builder().method(parts.method.clone()).uri(
        parts
            .uri
            .path_and_query()
            .map_or("/", http::uri::PathAndQuery::as_str),
    );
    for (name, value) in &parts.headers {
        let n = name.as_str();
        let loose = String::from_utf8(overrides::loose(n.as_bytes())).unwrap_or_default();
        if STRIPPED.contains(&n)
            || STRIPPED.contains(&loose.as_str())
            || loose.starts_with("proxy-")
            || loose.starts_with("x-forwarded-")
            || listed.iter().any(|l| l == n)
            || name == cfg.credential.header
            || loose == cfg.credential.header.as_str()
            || also.contains(name)
        {
            continue;
        }
        builder = builder.header(name, value);
    }
    let host = HeaderValue::from_str(&cfg.authority()).map_err(|_| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "origin_invalid",
            "The relay origin is invalid",
        )
    })?;
    Ok((builder, host))
}

const RECORDING_UNAVAILABLE: Refusal = (
    StatusCode::SERVICE_UNAVAILABLE,
    "recording_unavailable",
    "Relay requests cannot be recorded",
);
const OVERRIDE_REFUSED: Refusal = (
    StatusCode::BAD_REQUEST,
    "override_not_allowed",
    "Method, URL and host override headers and parameters are not relayed",
);
const BODY_TOO_LARGE: Refusal = (
    StatusCode::PAYLOAD_TOO_LARGE,
    "body_too_large",
    "The request body exceeds the relay limit",
);
const BODY_TIMEOUT: Refusal = (
    StatusCode::REQUEST_TIMEOUT,
    "body_timeout",
    "The request body did not arrive in time",
);
const RELAY_BUSY: Refusal = (
    StatusCode::SERVICE_UNAVAILABLE,
    "relay_busy",
    "The relay is holding as many request bytes as it may; retry later",
);
const ROUTING_DENIED: Refusal = (
    StatusCode::FORBIDDEN,
    "routing_denied",
    "The session read content its routing rules keep from this relay's provider",
);
const OUTWARD_DENIED: Refusal = (
    StatusCode::FORBIDDEN,
    "outward_denied",
    "This outward action was not allowed",
);
const ENCODED_RESPONSE: Refusal = (
    StatusCode::BAD_GATEWAY,
    "encoded_response",
    "Relay upstream sent an encoded response body, which the relay does not pass on unread",
);
const BODY_READ_FAILED: Refusal = (
    StatusCode::BAD_REQUEST,
    "body_read_failed",
    "The request body could not be read",
);

/// Emits the relay record exactly once: when the response body ends or is
/// dropped, when a refusal is answered, or when the request is cancelled
/// (the worker went away, the relay stopped) before either.
struct RecordGuard {
    recorder: Arc<dyn Recorder>,
    record: RelayRecord,
    down: Arc<AtomicU64>,
    t0: Instant,
}

impl Drop for RecordGuard {
    fn drop(&mut self) {
        let mut r = self.record.clone();
        r.bytes_down = self.down.load(Ordering::Relaxed);
        r.duration = self.t0.elapsed();
        let ev = ProxyEvent::Relay(r);
        ev.trace();
        self.recorder.record(&ev);
    }
}

/// Records a connection whose head never reached the service, once, when
/// the connection task ends or is cut: with hyper's verdict if it gave one
/// (`failure`), else as `cancelled` (the relay stopped mid-head). A
/// connection that never sent a byte is not an attempt and is not recorded
/// (unless hyper failed it, e.g. on the header timeout).
struct HeadAttempt {
    relay: Relay,
    invoked: Arc<AtomicBool>,
    read_any: Arc<AtomicBool>,
    failure: Option<(u16, &'static str)>,
    started: SystemTime,
    t0: Instant,
}

impl Drop for HeadAttempt {
    fn drop(&mut self) {
        if self.invoked.load(Ordering::Acquire) {
            return;
        }
        let read_any = self.read_any.load(Ordering::Acquire);
        let verdict = match self.failure {
            Some((_, "incomplete_head")) if !read_any => None,
            Some(f) => Some(f),
            None if read_any => Some((0, "cancelled")),
            None => None,
        };
        if let Some((status, reason)) = verdict {
            self.relay
                .record_attempt(status, reason, self.started, self.t0);
        }
    }
}

/// A stream that notes whether the peer ever sent a byte.
struct NoticeRead<S> {
    inner: S,
    read_any: Arc<AtomicBool>,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for NoticeRead<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.read_any.store(true, Ordering::Release);
        }
        res
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for NoticeRead<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A share of the relay's total body budget, returned on drop.
struct BufferPermit {
    inner: Arc<Inner>,
    held: usize,
}

impl BufferPermit {
    /// Take `n` more bytes of the budget, or refuse if that would pass it.
    fn grow(&mut self, n: usize) -> bool {
        let max = self.inner.config.max_buffered;
        match self
            .inner
            .buffered
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                cur.checked_add(n).filter(|t| *t <= max)
            }) {
            Ok(prev) => {
                self.held = self.held.saturating_add(n);
                self.inner
                    .peak_buffered
                    .fetch_max(prev.saturating_add(n), Ordering::AcqRel);
                true
            }
            Err(_) => false,
        }
    }
}

impl Drop for BufferPermit {
    fn drop(&mut self) {
        self.inner.buffered.fetch_sub(self.held, Ordering::AcqRel);
    }
}

/// A request body read in full, under the relay's bounds; its budget share
/// is returned when hyper is done sending it upstream (drops it).
struct BufferedBody {
    chunks: VecDeque<Bytes>,
    len: usize,
    permit: BufferPermit,
}

impl hyper::body::Body for BufferedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.chunks.pop_front().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        let left: usize = self.chunks.iter().map(Bytes::len).sum();
        hyper::body::SizeHint::with_exact(left as u64)
    }
}

/// The forms of the credential that must not reach the worker: the secret,
/// its hex and its every-byte percent-encoding, its base64 (standard and
/// URL-safe, unpadded) at each of the three alignments a prefix can give it
/// (`base64("key: " + secret)` shares no run with `base64(secret)`) and,
/// for `Basic` credentials, the decoded `user:password`. Compared ignoring
/// ASCII case.
struct Leaks {
    forms: Vec<Zeroizing<Vec<u8>>>,
}

impl Leaks {
    fn new(credential: &Credential) -> Self {
        use base64::Engine as _;
        use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
        let secret = credential.secret.expose().as_bytes();
        let mut forms = vec![
            Zeroizing::new(secret.to_vec()),
            Zeroizing::new(
                secret
                    .iter()
                    .flat_map(|b| format!("{b:02x}").into_bytes())
                    .collect(),
            ),
            Zeroizing::new(
                secret
                    .iter()
                    .flat_map(|b| format!("%{b:02x}").into_bytes())
                    .collect(),
            ),
        ];
        for shift in 0..3usize {
            // `shift` bytes before the secret; the first 4 characters also
            // encode those bytes, so they are left out
            let mut shifted = Zeroizing::new(vec![0u8; shift]);
            shifted.extend_from_slice(secret);
            let skip = if shift == 0 { 0 } else { 4 };
            for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
                let encoded = Zeroizing::new(engine.encode(shifted.as_slice()).into_bytes());
                forms.push(Zeroizing::new(
                    encoded.get(skip..).unwrap_or_default().to_vec(),
                ));
            }
        }
        if credential.prefix.trim().eq_ignore_ascii_case("basic")
            && let Ok(decoded) = STANDARD.decode(secret)
        {
            forms.push(Zeroizing::new(decoded));
        }
        for f in &mut forms {
            f.make_ascii_lowercase();
        }
        forms.retain(|f| !f.is_empty());
        Self { forms }
    }

    /// Whether `value` holds [`LEAK_WINDOW`] consecutive bytes of any form
    /// (all of it, when a form is shorter), ignoring ASCII case.
    fn found_in(&self, value: &[u8]) -> bool {
        let value = Zeroizing::new(value.to_ascii_lowercase());
        self.forms.iter().any(|form| {
            let w = LEAK_WINDOW.min(form.len());
            if w == 0 || value.len() < w {
                return false;
            }
            let needles: std::collections::HashSet<&[u8]> = form.windows(w).collect();
            value.windows(w).any(|hay| needles.contains(hay))
        })
    }

    /// Replace every header value that carries the credential with
    /// [`REDACTED`] and drop every header whose name does; the count.
    fn redact(&self, headers: &mut http::HeaderMap) -> usize {
        let mut n = 0;
        let names: Vec<HeaderName> = headers
            .keys()
            .filter(|k| self.found_in(k.as_str().as_bytes()))
            .cloned()
            .collect();
        for name in names {
            headers.remove(&name);
            n += 1;
        }
        for v in headers.values_mut() {
            if self.found_in(v.as_bytes()) {
                *v = HeaderValue::from_static(REDACTED);
                n += 1;
            }
        }
        n
    }
}

fn json_error_body(code: &str, message: &str) -> String {
    serde_json::json!({
        "type": "error",
        "error": { "type": "palisade_relay_refused", "code": code, "message": message }
    })
    .to_string()
}

fn json_error(status: StatusCode, code: &str, message: &str) -> Response<RelayBody> {
    let body = json_error_body(code, message);
    let mut resp = Response::new(Full::new(Bytes::from(body)).map_err(|e| match e {}).boxed());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The 403 of a request refused on routing grounds: the shape both the
/// Anthropic and the OpenAI SDKs read (`error.type`, `error.message`), with
/// the rule, the path the session read and the provider; never content.
fn routing_error(refusal: &RouteRefusal, provider: &str) -> Response<RelayBody> {
    let message = if refusal.detail.is_empty() {
        format!(
            "palisade: this session read `{}`, which {} keeps from provider `{provider}`",
            refusal.path, refusal.rule
        )
    } else {
        format!("palisade: {}", refusal.detail)
    };
    let body = serde_json::json!({
        "type": "error",
        "error": {
            "type": "routing_denied",
            "code": "routing_denied",
            "message": message,
            "rule": refusal.rule,
            "path": refusal.path,
            "provider": provider,
        }
    })
    .to_string();
    let mut resp = Response::new(Full::new(Bytes::from(body)).map_err(|e| match e {}).boxed());
    *resp.status_mut() = StatusCode::FORBIDDEN;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Whether a response's body is under a coding the relay cannot read: a
/// `content-encoding` other than `identity`, a `transfer-encoding` other
/// than `chunked` (each value and list item, ignoring case).
fn is_encoded(headers: &http::HeaderMap) -> bool {
    let codings = |name: http::header::HeaderName, plain: &'static str| {
        headers.get_all(name).into_iter().any(move |v| {
            let Ok(v) = v.to_str() else { return true };
            v.split(',')
                .map(str::trim)
                .any(|t| !t.is_empty() && !t.eq_ignore_ascii_case(plain))
        })
    };
    codings(http::header::CONTENT_ENCODING, "identity")
        || codings(http::header::TRANSFER_ENCODING, "chunked")
}

/// A response body passed through a [`ToolResultScanner`]: each data frame
/// is scanned, and the gate told of every result it completes, before the
/// frame is returned; the end (or an error) finishes the scanner first.
/// Nothing is held beyond the frame in hand. It gives no size hint and is
/// never at its end before it has returned `None`, so hyper frames the
/// answer as chunked and always polls it to the end (where the scanner is
/// finished) before it ends the worker's response.
struct ScannedBody {
    inner: RelayBody,
    scanner: ToolResultScanner,
    gate: Arc<dyn RelayGate>,
    relay: String,
    provider: String,
    done: bool,
}

impl ScannedBody {
    /// Tells the gate of each result; whether every one was recorded.
    fn tell(&self, results: Vec<ServerToolResult>) -> bool {
        let mut recorded = true;
        for r in results {
            tracing::info!(
                target: "palisade_egress",
                relay = %self.relay,
                result = r.as_str(),
                "relay response carries a provider-side tool result"
            );
            recorded &= self.gate.server_tool_result(&self.relay, &self.provider, r);
        }
        recorded
    }
}

impl hyper::body::Body for ScannedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let recorded = match &polled {
            Poll::Ready(Some(Ok(frame))) => match frame.data_ref() {
                Some(data) => {
                    let found = self.scanner.feed(data);
                    self.tell(found)
                }
                None => true,
            },
            Poll::Ready(None | Some(Err(_))) => {
                // the end, or a cut: an event left open is checked too
                self.done = true;
                let found = self.scanner.finish();
                self.tell(found)
            }
            Poll::Pending => true,
        };
        if !recorded {
            // Fail closed: the bytes that completed an unrecorded result
            // never reach the worker.
            self.done = true;
            return Poll::Ready(Some(Err(
                "a provider-side tool result could not be recorded; response cut".into(),
            )));
        }
        polled
    }
}

/// The status hyper answered (0: none) and the reason code for a request
/// head that never reached the relay's service.
fn head_failure(e: &hyper::Error) -> (u16, &'static str) {
    if e.is_parse_too_large() {
        if e.to_string().to_ascii_lowercase().contains("uri") {
            (StatusCode::URI_TOO_LONG.as_u16(), "uri_too_long")
        } else {
            (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE.as_u16(),
                "head_too_large",
            )
        }
    } else if e.is_parse() {
        (StatusCode::BAD_REQUEST.as_u16(), "bad_request")
    } else if e.is_timeout() {
        (0, "header_timeout")
    } else if e.is_incomplete_message() {
        (0, "incomplete_head")
    } else {
        (0, "connection_error")
    }
}

/// Whether a request would make the origin route it differently from the
/// exact route it matched: an override header, a second `Host`, or an
/// override query parameter.
fn has_override(headers: &http::HeaderMap, uri: &http::Uri) -> bool {
    headers
        .keys()
        .any(|n| overrides::is_override_header(n.as_str()))
        || headers.get_all(http::header::HOST).iter().count() > 1
        || uri.query().is_some_and(query_has_override)
}

fn query_has_override(query: &str) -> bool {
    query.split(['&', ';']).any(|pair| {
        let key = pair.split('=').next().unwrap_or_default();
        overrides::is_override_key(&percent_decode(key.as_bytes()))
    })
}

/// Decode `%XX` escapes and `+` (a malformed escape stays as written).
fn percent_decode(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| {
        char::from(b)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while let Some(&b) = s.get(i) {
        match (
            b,
            s.get(i + 1).copied().and_then(hex),
            s.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(h << 4 | l);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// The gate a relay without one asks about an outward route: the trait's
/// defaults, which deny (no session decides outward actions).
#[derive(Debug)]
struct NoGate;

impl RelayGate for NoGate {
    fn admit(&self, _relay: &str, _provider: &str) -> Result<(), RouteRefusal> {
        Ok(())
    }

    fn server_tool_result(&self, _relay: &str, _provider: &str, _: ServerToolResult) -> bool {
        true
    }
}

/// An allowed outward action: reported executed to the gate exactly once
/// if its request was handed to the origin connection ([`Executed::sending`]):
/// with the status seen ([`Executed::report`]), or with none when the
/// sending failed or was cut (dropped), since the origin may have acted.
/// Never reported when nothing was sent (the dial or the admission record
/// failed first).
struct Executed {
    gate: Option<Arc<dyn RelayGate>>,
    relay: String,
    ticket: u64,
    action: OutwardAction,
    sending: bool,
}

impl Executed {
    /// The request is about to be handed to the origin connection.
    fn sending(&mut self) {
        self.sending = true;
    }

    /// The response head arrived (`Some` status) or the sending failed.
    fn report(mut self, status: Option<i32>) {
        self.tell(status);
    }

    fn tell(&mut self, status: Option<i32>) {
        if !std::mem::take(&mut self.sending) {
            return;
        }
        if let Some(gate) = &self.gate {
            let result = OutwardResult {
                status,
                detail: std::collections::BTreeMap::new(),
            };
            gate.outward_executed(&self.relay, self.ticket, &self.action, &result);
        }
    }
}

impl Drop for Executed {
    fn drop(&mut self) {
        // cut while sending (the worker went away, the relay stopped)
        self.tell(None);
    }
}

/// The 403 of an outward route the gate did not allow: the same error
/// shape as every refusal, with the ticket, the rule and how an ask was
/// settled (never the body or a header).
fn outward_error(action: &OutwardAction, answer: &OutwardAnswer) -> Response<RelayBody> {
    let message = format!(
        "palisade: outward action `{}` on `{}` was not allowed: {}",
        action.kind, action.target, answer.reason
    );
    let body = serde_json::json!({
        "type": "error",
        "error": {
            "type": "outward_denied",
            "code": "outward_denied",
            "message": message,
            "kind": action.kind,
            "target": action.target,
            "ticket": answer.ticket,
            "policy": answer.policy.as_str(),
            "rule": answer.rule,
            "approval": answer.approval,
        }
    })
    .to_string();
    let mut resp = Response::new(Full::new(Bytes::from(body)).map_err(|e| match e {}).boxed());
    *resp.status_mut() = StatusCode::FORBIDDEN;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

impl Relay {
    /// A relay with the given seams.
    pub fn new(
        config: RelayConfig,
        resolver: Arc<dyn Resolver>,
        recorder: Arc<dyn Recorder>,
    ) -> Self {
        let leaks = Leaks::new(&config.credential);
        Self {
            inner: Arc::new(Inner {
                config,
                resolver,
                recorder,
                gate: None,
                leaks,
                buffered: AtomicUsize::new(0),
                peak_buffered: AtomicUsize::new(0),
            }),
        }
    }

    /// The same relay, asking `gate` before every request it forwards and
    /// telling it about provider-side tool results in responses.
    #[must_use]
    pub fn with_gate(self, gate: Arc<dyn RelayGate>) -> Self {
        let inner = match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                inner.gate = Some(gate);
                inner
            }
            Err(shared) => Inner {
                config: shared.config.clone(),
                resolver: Arc::clone(&shared.resolver),
                recorder: Arc::clone(&shared.recorder),
                gate: Some(gate),
                leaks: Leaks::new(&shared.config.credential),
                buffered: AtomicUsize::new(0),
                peak_buffered: AtomicUsize::new(0),
            },
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The relay's configuration.
    pub fn config(&self) -> &RelayConfig {
        &self.inner.config
    }

    /// Request body bytes the relay holds right now, across requests.
    pub fn buffered_bytes(&self) -> usize {
        self.inner.buffered.load(Ordering::Acquire)
    }

    /// The most request body bytes the relay ever held at once (never above
    /// [`RelayConfig::max_buffered`]).
    pub fn peak_buffered_bytes(&self) -> usize {
        self.inner.peak_buffered.load(Ordering::Acquire)
    }

    /// Serve on `socket` until `signal` fires.
    pub async fn serve(
        &self,
        socket: &PrivateSocket,
        mut signal: ShutdownSignal,
    ) -> io::Result<()> {
        let listener = socket
            .listener
            .as_ref()
            .ok_or_else(|| io::Error::other("socket already closed"))?;
        // a cap above what a semaphore counts means no cap (never a panic)
        let cap = self
            .inner
            .config
            .max_connections
            .min(Semaphore::MAX_PERMITS);
        let slots = Arc::new(Semaphore::new(cap));
        let mut tasks = JoinSet::new();
        loop {
            let stream = tokio::select! {
                () = signal.wait() => break,
                r = listener.accept() => r,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            };
            let Ok((stream, _)) = stream else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                self.refuse_busy(&stream);
                continue;
            };
            let this = self.clone();
            tasks.spawn(async move {
                let _slot = slot;
                this.serve_connection(stream).await;
            });
        }
        // give in-flight requests a moment, then cut them (their records are
        // written when their bodies or handlers are dropped)
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        Ok(())
    }

    /// One request per connection (no keep-alive), so that a connection
    /// whose head never reached [`Relay::handle`] is exactly one attempt to
    /// record here: when hyper gives up on it, or when the relay stops
    /// while it is mid-head.
    async fn serve_connection(&self, stream: tokio::net::UnixStream) {
        let mut attempt = HeadAttempt {
            relay: self.clone(),
            invoked: Arc::new(AtomicBool::new(false)),
            read_any: Arc::new(AtomicBool::new(false)),
            failure: None,
            started: SystemTime::now(),
            t0: Instant::now(),
        };
        let flag = attempt.invoked.clone();
        let this = self.clone();
        let svc = hyper::service::service_fn(move |req| {
            flag.store(true, Ordering::Release);
            let this = this.clone();
            async move { Ok::<_, Infallible>(this.handle(req).await) }
        });
        let io = NoticeRead {
            inner: stream,
            read_any: attempt.read_any.clone(),
        };
        let res = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.inner.config.header_timeout.min(NO_TIMEOUT))
            .keep_alive(false)
            .max_buf_size(MAX_HEAD_BYTES)
            .serve_connection(TokioIo::new(io), svc)
            .await;
        attempt.failure = Some(match res {
            Err(e) => head_failure(&e),
            // bytes but no request (blank lines, then a close)
            Ok(()) => (0, "incomplete_head"),
        });
    }

    /// Answer a connection over the cap with 503 without reading it, and
    /// record it. Never blocks: what the socket does not take is dropped.
    fn refuse_busy(&self, stream: &tokio::net::UnixStream) {
        let started = SystemTime::now();
        let t0 = Instant::now();
        let body = json_error_body("relay_busy", "The relay has too many open connections");
        let resp = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.try_write(resp.as_bytes());
        self.record_attempt(
            StatusCode::SERVICE_UNAVAILABLE.as_u16(),
            "relay_busy",
            started,
            t0,
        );
    }

    /// Record an attempt refused before its head was parsed (method and
    /// path unknown, left empty).
    fn record_attempt(&self, status: u16, reason: &str, started_at: SystemTime, t0: Instant) {
        let ev = ProxyEvent::Relay(RelayRecord {
            relay: self.inner.config.name.clone(),
            method: String::new(),
            path: String::new(),
            outcome: RelayOutcome::Refused,
            status,
            reason: reason.to_owned(),
            bytes_up: 0,
            bytes_down: 0,
            upstream: None,
            started_at,
            duration: t0.elapsed(),
            provider: self.inner.config.provider.clone(),
            routing: None,
            ticket: None,
            outward_kind: None,
        });
        ev.trace();
        self.inner.recorder.record(&ev);
    }

    /// Handle one request (public so it can be driven without a socket).
    pub async fn handle<B>(&self, req: Request<B>) -> Response<RelayBody>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let t0 = Instant::now();
        let cfg = &self.inner.config;
        let mut guard = RecordGuard {
            recorder: self.inner.recorder.clone(),
            record: RelayRecord {
                relay: cfg.name.clone(),
                method: req.method().to_string(),
                path: req.uri().path().to_owned(),
                outcome: RelayOutcome::Refused,
                status: 0,
                reason: "cancelled".into(),
                bytes_up: 0,
                bytes_down: 0,
                upstream: None,
                started_at: SystemTime::now(),
                duration: Duration::ZERO,
                provider: cfg.provider.clone(),
                routing: None,
                ticket: None,
                outward_kind: None,
            },
            down: Arc::new(AtomicU64::new(0)),
            t0,
        };
        let mut denied = None;
        let answer = if cfg.git.is_some() {
            self.forward_git(req, &mut guard.record, t0).await
        } else {
            self.forward(req, &mut guard.record, &mut denied, t0).await
        };
        match answer {
            Ok(resp) => {
                // a refused push is answered (a report git prints) but
                // keeps its outcome
                if guard.record.outcome != RelayOutcome::OutwardDenied {
                    guard.record.outcome = RelayOutcome::Forwarded;
                    guard.record.reason = "forwarded".into();
                }
                guard.record.status = resp.status().as_u16();
                let inner = self.inner.clone();
                let (parts, body) = resp.into_parts();
                let body = body
                    .map_frame(move |f| {
                        let f = match f.into_trailers() {
                            Ok(mut trailers) => {
                                inner.leaks.redact(&mut trailers);
                                Frame::trailers(trailers)
                            }
                            Err(f) => f,
                        };
                        if let Some(d) = f.data_ref() {
                            guard.down.fetch_add(d.len() as u64, Ordering::Relaxed);
                        }
                        f
                    })
                    .boxed();
                Response::from_parts(parts, body)
            }
            Err((status, code, message)) => {
                guard.record.status = status.as_u16();
                guard.record.reason = code.to_owned();
                let routing = guard.record.routing.clone();
                drop(guard);
                match (routing, denied) {
                    (Some(refusal), _) => routing_error(&refusal, &cfg.provider),
                    (None, Some((action, answer))) => outward_error(&action, &answer),
                    (None, None) => json_error(status, code, message),
                }
            }
        }
    }

    /// Read the request body under the relay's bounds: the per-request
    /// cap, the total budget, the idle timeout and the overall deadline.
    async fn read_body<B>(&self, body: B, t0: Instant) -> Result<BufferedBody, Refusal>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let cfg = &self.inner.config;
        // a timeout too long to add is no timeout (never an overflow panic)
        let after = |from: tokio::time::Instant, d: Duration| from + d.min(NO_TIMEOUT);
        let deadline = after(tokio::time::Instant::from_std(t0), cfg.body_timeout);
        let mut body = std::pin::pin!(body);
        let mut block = BytesMut::new();
        let mut out = BufferedBody {
            chunks: VecDeque::new(),
            len: 0,
            permit: BufferPermit {
                inner: self.inner.clone(),
                held: 0,
            },
        };
        loop {
            let wait = after(tokio::time::Instant::now(), cfg.body_idle_timeout).min(deadline);
            let frame = match tokio::time::timeout_at(wait, body.as_mut().frame()).await {
                Err(_) => return Err(BODY_TIMEOUT),
                Ok(None) => break,
                Ok(Some(Err(_))) => return Err(BODY_READ_FAILED),
                Ok(Some(Ok(frame))) => frame,
            };
            // request trailers are not forwarded
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let len = out.len.saturating_add(data.len());
            if len > cfg.max_body {
                return Err(BODY_TOO_LARGE);
            }
            if !out.permit.grow(data.len()) {
                return Err(RELAY_BUSY);
            }
            out.len = len;
            // copy into blocks, so that a body sent as many tiny chunks
            // costs its bytes, not a `Bytes` handle per chunk
            let mut rest: &[u8] = &data;
            while !rest.is_empty() {
                if block.len() == block.capacity() {
                    let full = std::mem::replace(&mut block, BytesMut::with_capacity(BODY_BLOCK));
                    if !full.is_empty() {
                        out.chunks.push_back(full.freeze());
                    }
                }
                let room = block.capacity().saturating_sub(block.len());
                let (now, later) = rest.split_at(room.min(rest.len()));
                block.extend_from_slice(now);
                rest = later;
            }
        }
        if !block.is_empty() {
            out.chunks.push_back(block.freeze());
        }
        Ok(out)
    }

    async fn forward<B>(
        &self,
        req: Request<B>,
        record: &mut RelayRecord,
        denied: &mut Option<(OutwardAction, OutwardAnswer)>,
        t0: Instant,
    ) -> Result<Response<RelayBody>, Refusal>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let cfg = &self.inner.config;
        if !self.inner.recorder.healthy() {
            return Err(RECORDING_UNAVAILABLE);
        }
        // 1. placeholder, compared in constant time
        if !cfg.credential.presented(req.headers(), &cfg.placeholder) {
            return Err((
                StatusCode::UNAUTHORIZED,
                "placeholder_required",
                "The relay placeholder credential is missing or wrong",
            ));
        }
        // 2. a route, matched on the raw path (never decoded); origin-form only
        if req.uri().scheme().is_some() || req.uri().authority().is_some() {
            return Err((
                StatusCode::BAD_REQUEST,
                "origin_form_required",
                "Requests to the relay must use origin-form",
            ));
        }
        // 3. nothing that re-routes the request behind the route matched
        if has_override(req.headers(), req.uri()) {
            return Err(OVERRIDE_REFUSED);
        }
        let path = req.uri().path();
        let policy_routes: Vec<RelayRoute> =
            cfg.routes.iter().map(|r| r.as_policy().clone()).collect();
        let outward = match match_route(&policy_routes, req.method().as_str(), path) {
            RouteMatch::Plain(_) => None,
            RouteMatch::Outward(_, action) => Some(action),
            RouteMatch::MethodNotAllowed => {
                return Err((
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method_not_allowed",
                    "This method is not relayed for this path",
                ));
            }
            RouteMatch::NoRoute => {
                return Err((
                    StatusCode::FORBIDDEN,
                    "route_not_allowed",
                    "This path is not an authorized relay route",
                ));
            }
            RouteMatch::BadSegment(_) => {
                return Err((
                    StatusCode::BAD_REQUEST,
                    "invalid_segment",
                    "A path segment is not one the relay forwards: a route placeholder takes one \
                     plain segment (letters, digits, `.`, `_`, `~`, `-`; no percent-encoding, `.` \
                     or `..`), and a near-miss of an outward route (letter case, trailing `/`) is \
                     refused",
                ));
            }
        };
        let outward = outward.map(|a| {
            record.outward_kind = Some(a.kind.clone());
            OutwardAction::new(a.kind, a.target, Some(&cfg.name))
                .with("method", req.method().as_str())
                .with("path", path)
        });
        // 4. body: capped per request and in total, with deadlines
        let declared = req
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > cfg.max_body as u64) {
            return Err(BODY_TOO_LARGE);
        }
        let (parts, body) = req.into_parts();
        let body = self.read_body(body, t0).await?;
        let body_len = body.len;
        record.bytes_up = body_len as u64;

        // 5. headers: strip, then inject
        let (builder, host) = forwarded_request(cfg, &parts, &[])?;
        let cred = cfg.credential.upstream_value().ok_or((
            StatusCode::INTERNAL_SERVER_ERROR,
            "credential_invalid",
            "The relay credential is invalid",
        ))?;
        let mut upstream_req = builder
            .header(http::header::HOST, host)
            .header(http::header::CONTENT_LENGTH, body_len)
            .body(body)
            .map_err(|_| {
                (
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "The request could not be rebuilt",
                )
            })?;
        // the body as the origin will read it: under the Content-Type
        // headers actually forwarded (one named in `Connection` is dropped)
        let content_types = upstream_req
            .headers()
            .get_all(http::header::CONTENT_TYPE)
            .into_iter()
            .map(HeaderValue::as_bytes);
        if overrides::body_has_override(content_types, &upstream_req.body().chunks) {
            return Err(OVERRIDE_REFUSED);
        }
        upstream_req
            .headers_mut()
            .insert(cfg.credential.header.clone(), cred);
        if cfg.credential.kind == CredentialKind::AnthropicOauth {
            merge_oauth_beta(upstream_req.headers_mut());
        }
        // the response must be readable by the tool-result scanner: the
        // worker's own `accept-encoding` was stripped above
        upstream_req.headers_mut().insert(
            http::header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );

        // 5b. routing: asked per request, once its whole body is here (so a
        // read the session saw before the body's last byte is taken into
        // account) and before anything reaches the origin
        if let Some(gate) = &self.inner.gate
            && let Err(refusal) = gate.admit(&cfg.name, &cfg.provider)
        {
            record.outcome = RelayOutcome::RoutingDenied;
            record.routing = Some(refusal);
            // read, but none of it went upstream
            record.bytes_up = 0;
            return Err(ROUTING_DENIED);
        }

        // 5c. an outward route: decided (asked, held for the host's
        // approval) before anything is dialled; forwarded only when allowed
        // (no gate: denied). The body stays buffered meanwhile, bounded by
        // the session's approval timeout.
        let mut executed = None;
        if let Some(action) = outward {
            let answer = match &self.inner.gate {
                Some(gate) => gate.outward(&cfg.name, action.clone()).await,
                None => NoGate.outward(&cfg.name, action.clone()).await,
            };
            record.ticket = Some(answer.ticket);
            if answer.decision != AskAnswer::Allow {
                record.outcome = RelayOutcome::OutwardDenied;
                record.bytes_up = 0;
                *denied = Some((action, answer));
                return Err(OUTWARD_DENIED);
            }
            executed = Some(Executed {
                gate: self.inner.gate.clone(),
                relay: cfg.name.clone(),
                ticket: answer.ticket,
                action,
                sending: false,
            });
        }

        // 6. dial the origin through the same address checks as the proxy;
        // 6b. nothing reaches the origin before the journal accepted the
        // admission record (a disk that fills now refuses this request)
        let (mut sender, _conn) = self.dial_admitted(record).await?;
        // sent at most once: no retry, whatever fails from here on
        if let Some(e) = &mut executed {
            e.sending();
        }
        let sent = sender.send_request(upstream_req).await;
        // an allowed outward action reached the origin, which may have acted
        // even when no response came: reported executed once, with the
        // status seen (or none), before any later refusal
        if let Some(e) = executed.take() {
            e.report(sent.as_ref().ok().map(|r| i32::from(r.status().as_u16())));
        }
        let resp = sent.map_err(|_| {
            (
                StatusCode::BAD_GATEWAY,
                "upstream_unreachable",
                "Relay upstream unreachable",
            )
        })?;

        // 7. never follow a redirect; a body under a content or transfer
        // coding (other than chunked framing, which hyper removes) cannot be
        // scanned for provider-side tool results: refused, never passed on
        // unread; 8. the credential never comes back in a header, nor in the
        // status line
        let (parts, body) = self.clean_response(resp)?;
        // 9. provider-side tool results are told to the gate before the
        // bytes that complete them are passed on
        let body = match &self.inner.gate {
            Some(gate) => {
                let content_type = parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok());
                ScannedBody {
                    inner: body,
                    scanner: ToolResultScanner::new(content_type),
                    gate: Arc::clone(gate),
                    relay: cfg.name.clone(),
                    provider: cfg.provider.clone(),
                    done: false,
                }
                .boxed()
            }
            None => body,
        };
        Ok(Response::from_parts(parts, body))
    }

    /// Dials the origin through the same address checks as the proxy,
    /// completes TLS and the HTTP/1 handshake (the connection driven by the
    /// returned task), and has the recorder accept the request's
    /// `relay_admitted` record: only then may a byte go upstream (a disk
    /// that fills now refuses the request). For every relay kind.
    pub(crate) async fn dial_admitted<B>(
        &self,
        record: &mut RelayRecord,
    ) -> Result<
        (
            hyper::client::conn::http1::SendRequest<B>,
            tokio::task::JoinHandle<()>,
        ),
        Refusal,
    >
    where
        B: hyper::body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        let cfg = &self.inner.config;
        let (stream, addr) = self.connect_upstream().await?;
        record.upstream = Some(addr);
        let server_name = match &cfg.upstream {
            RequestHost::Name(n) => rustls::pki_types::ServerName::try_from(n.clone()),
            RequestHost::Ip(ip) => Ok(rustls::pki_types::ServerName::IpAddress((*ip).into())),
        }
        .map_err(|_| {
            (
                StatusCode::BAD_GATEWAY,
                "origin_invalid",
                "The relay origin is invalid",
            )
        })?;
        let tls = tokio_rustls::TlsConnector::from(cfg.tls.clone())
            .connect(server_name, stream)
            .await
            .map_err(|_| {
                (
                    StatusCode::BAD_GATEWAY,
                    "upstream_tls_failed",
                    "Relay upstream TLS handshake failed",
                )
            })?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|_| {
                (
                    StatusCode::BAD_GATEWAY,
                    "upstream_unreachable",
                    "Relay upstream unreachable",
                )
            })?;
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        let admitted = ProxyEvent::RelayAdmitted(record.clone());
        admitted.trace();
        if !self
            .inner
            .recorder
            .record_accepted(&admitted)
            .accepted()
            .await
        {
            conn.abort();
            return Err(RECORDING_UNAVAILABLE);
        }
        Ok((sender, conn))
    }

    async fn connect_upstream(
        &self,
    ) -> Result<(TcpStream, SocketAddr), (StatusCode, &'static str, &'static str)> {
        let cfg = &self.inner.config;
        let addrs: Vec<IpAddr> = match &cfg.upstream {
            RequestHost::Ip(ip) => vec![*ip],
            RequestHost::Name(n) => {
                tokio::time::timeout(Duration::from_secs(5), self.inner.resolver.resolve(n))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .filter(|a| !a.is_empty())
                    .ok_or((
                        StatusCode::BAD_GATEWAY,
                        "dns_failed",
                        "Relay upstream name resolution failed",
                    ))?
            }
        };
        if addrs.iter().any(|ip| cfg.addresses.check(*ip).is_err()) {
            return Err((
                StatusCode::BAD_GATEWAY,
                "address_not_allowed",
                "Relay upstream address is not allowed",
            ));
        }
        for ip in addrs {
            let sa = SocketAddr::new(ip, cfg.origin.port);
            if let Ok(Ok(s)) =
                tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(sa)).await
            {
                let _ = s.set_nodelay(true);
                return Ok((s, sa));
            }
        }
        Err((
            StatusCode::BAD_GATEWAY,
            "upstream_unreachable",
            "Relay upstream unreachable",
        ))
    }
}

fn strip_prefix_ci<'a>(v: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    let head = v.get(..prefix.len())?;
    if head.eq_ignore_ascii_case(prefix) {
        v.get(prefix.len()..)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_for(origin: &str) -> Result<RelayConfig, RelayConfigError> {
        RelayConfig::new(
            "r",
            Origin::parse(origin).unwrap(),
            vec![Route::parse("POST /v1").unwrap()],
            Credential::new("x-api-key", "", Secret::new("k".into())).unwrap(),
            Placeholder::generate(&PlaceholderFormat::generic()).unwrap(),
        )
    }

    #[test]
    fn the_origin_is_schemas_and_must_be_https() {
        assert_eq!(
            config_for("https://api.example.com").unwrap().authority(),
            "api.example.com"
        );
        assert_eq!(
            config_for("https://127.0.0.1:8443/").unwrap().authority(),
            "127.0.0.1:8443"
        );
        assert_eq!(
            config_for("https://[::1]:8443").unwrap().authority(),
            "[::1]:8443"
        );
        // schema's grammar takes `http`; a relay never speaks plain text
        let e = config_for("http://api.example.com").unwrap_err();
        assert!(e.to_string().contains("must use https://"), "{e}");
        for bad in [
            "ftp://api.example.com",
            "https://user:pw@api.example.com",
            "https://api.example.com/?key=1",
            "https://api.example.com/#f",
            "https://api.example.com/v1",
            "https://api.example.com:0",
            "https://",
        ] {
            assert!(Origin::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn encoded_responses_are_recognised() {
        let with = |pairs: &[(&str, &[u8])]| {
            let mut h = http::HeaderMap::new();
            for (k, v) in pairs {
                h.append(
                    HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_bytes(v).unwrap(),
                );
            }
            is_encoded(&h)
        };
        for plain in [
            &[][..],
            &[("content-encoding", &b"identity"[..])],
            &[("content-encoding", b"IDENTITY")],
            &[("transfer-encoding", b"chunked")],
            &[("content-encoding", b"identity, identity")],
        ] {
            assert!(!with(plain), "{plain:?}");
        }
        for encoded in [
            &[("content-encoding", &b"gzip"[..])][..],
            &[("content-encoding", b"identity, br")],
            &[
                ("content-encoding", b"identity"),
                ("content-encoding", b"zstd"),
            ],
            &[("transfer-encoding", b"gzip, chunked")],
            &[("content-encoding", b"\xffgzip")],
        ] {
            assert!(with(encoded), "{encoded:?}");
        }
    }

    #[test]
    fn route_parsing() {
        assert!(Route::parse("POST /v1/messages").is_ok());
        for bad in [
            "post /v1",
            "POST v1",
            "POST /v1/../x",
            "POST /v1?x",
            "POST",
            "POST /a b",
            "POST /%2e%2e",
            "POST /repos/{owner",
            "POST /repos/x{owner}",
            "POST /repos/{}",
            "POST /repos/{1x}",
        ] {
            assert!(Route::parse(bad).is_err(), "{bad}");
        }
        let r = Route::parse("POST /repos/{owner}/{repo}/issues").unwrap();
        assert_eq!(
            (r.method(), r.path(), r.outward_kind()),
            ("POST", "/repos/{owner}/{repo}/issues", None)
        );
        let o = r
            .clone()
            .outward("github.post.issue", "github.com/{owner}/{repo}")
            .unwrap();
        assert_eq!(
            (o.outward_kind(), o.target()),
            (Some("github.post.issue"), Some("github.com/{owner}/{repo}"))
        );
        assert_eq!(o.to_string(), "POST /repos/{owner}/{repo}/issues");
        for (kind, target) in [
            ("*", "github.com/{owner}"),
            ("GitHub", "github.com/{owner}"),
            ("github.post", "github.com/{number}"),
            ("github.post", "github.com/{owner"),
            ("github.post", "github.com/owner}"),
            ("github.post", "github.com/{}"),
            ("github.post", ""),
        ] {
            assert!(
                matches!(
                    r.clone().outward(kind, target),
                    Err(RelayConfigError::Outward(_))
                ),
                "{kind} {target}"
            );
        }
    }

    #[test]
    fn a_basic_placeholder_is_checked_after_decoding() {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let secret: String = "terces-cisab".chars().rev().collect();
        let c = Credential::basic("x-access-token", Secret::new(secret.clone())).unwrap();
        let p = Placeholder::generate(&PlaceholderFormat::generic()).unwrap();
        let with = |v: &str| {
            let mut h = http::HeaderMap::new();
            h.insert("authorization", HeaderValue::from_str(v).unwrap());
            c.presented(&h, &p)
        };
        let good = format!("x-access-token:{}", p.expose());
        assert!(with(&format!("Basic {}", b64(&good))));
        assert!(with(&format!("BASIC {}", b64(&good))));
        assert_eq!(
            *basic_placeholder("x-access-token", &p),
            format!("Basic {}", b64(&good))
        );
        for bad in [
            format!("Basic {}", b64(&format!("other:{}", p.expose()))),
            format!("Basic {}", b64(&format!("x-access-token:{}x", p.expose()))),
            format!("Basic {}", b64("x-access-token:")),
            format!("Bearer {}", p.expose()),
            p.expose().to_owned(),
            format!("Basic {good}"),
            "Basic".to_owned(),
        ] {
            assert!(!with(&bad), "{bad}");
        }
        assert!(!c.presented(&http::HeaderMap::new(), &p));
        let sent = c.upstream_value().unwrap();
        assert!(sent.is_sensitive());
        assert_eq!(
            sent,
            format!("Basic {}", b64(&format!("x-access-token:{secret}"))).as_str()
        );
        for user in ["", "a:b", "a b", "a\nb"] {
            assert!(
                Credential::basic(user, Secret::new("k".into())).is_err(),
                "{user:?}"
            );
        }
        assert!(!format!("{c:?}").contains(&secret));
    }

    #[test]
    fn credential_validation() {
        let s = |v: &str| Secret::new(v.into());
        assert!(Credential::new("x-api-key", "", s("k")).is_ok());
        assert!(Credential::new("authorization", "Bearer ", s("k")).is_ok());
        assert!(Credential::new("x api", "", s("k")).is_err());
        assert!(Credential::new("x-api-key", "", s("a\r\nX-Evil: 1")).is_err());
        assert!(Credential::new("x-api-key", "", s("")).is_err());
        assert!(!format!("{:?}", s("hunter2")).contains("hunter2"));
    }

    #[test]
    fn leaks_cover_substrings_base64_and_basic_credentials() {
        use base64::Engine as _;
        let pair: String = "drowssap-gnol-terces:resu".chars().rev().collect();
        let encoded = base64::engine::general_purpose::STANDARD.encode(&pair);
        let basic =
            Credential::new("authorization", "Basic ", Secret::new(encoded.clone())).unwrap();
        let leaks = Leaks::new(&basic);
        assert!(leaks.found_in(format!("echo: Basic {encoded}").as_bytes()));
        assert!(leaks.found_in(pair.as_bytes()), "decoded user:password");
        assert!(
            leaks.found_in(&pair.as_bytes()[3..3 + LEAK_WINDOW]),
            "a window"
        );
        assert!(!leaks.found_in(&pair.as_bytes()[3..3 + LEAK_WINDOW - 1]));
        assert!(
            !leaks.found_in(b"req_0123456789abcdefghij"),
            "positive control"
        );
        let short = Credential::new("x-api-key", "", Secret::new("k3y".into())).unwrap();
        let leaks = Leaks::new(&short);
        assert!(leaks.found_in(b"is k3y here"));
        assert!(!leaks.found_in(b"is k3 here"));
        let mut h = http::HeaderMap::new();
        h.insert("x-echo", HeaderValue::from_static("k3y"));
        h.insert("x-other", HeaderValue::from_static("fine"));
        assert_eq!(leaks.redact(&mut h), 1);
        assert_eq!(h["x-echo"], REDACTED);
        assert_eq!(h["x-other"], "fine");
    }

    #[test]
    fn policy_limits_replace_the_defaults() {
        let cfg = || {
            RelayConfig::new(
                "r",
                Origin::parse("https://api.example").unwrap(),
                vec![Route::parse("POST /v1").unwrap()],
                Credential::new("x-api-key", "", Secret::new("k".into())).unwrap(),
                Placeholder::generate(&PlaceholderFormat::generic()).unwrap(),
            )
            .unwrap()
        };
        let none = cfg().with_limits(&Default::default());
        assert_eq!(
            (none.max_body, none.max_buffered, none.max_connections),
            (
                DEFAULT_MAX_BODY,
                DEFAULT_MAX_BUFFERED,
                DEFAULT_MAX_CONNECTIONS
            )
        );
        assert_eq!(
            (none.body_idle_timeout, none.body_timeout),
            (DEFAULT_BODY_IDLE_TIMEOUT, DEFAULT_BODY_TIMEOUT)
        );
        let limits = palisade_schema::host_policy::RelayLimits {
            max_body: Some(1000),
            max_buffered: Some(5000),
            connections: Some(3),
            header_timeout: Some(4),
            body_idle_timeout: Some(5),
            body_timeout: Some(6),
        };
        let set = cfg().with_limits(&limits);
        assert_eq!(
            (set.max_body, set.max_buffered, set.max_connections),
            (1000, 5000, 3)
        );
        assert_eq!(
            (set.header_timeout, set.body_idle_timeout, set.body_timeout),
            (
                Duration::from_secs(4),
                Duration::from_secs(5),
                Duration::from_secs(6)
            )
        );
        let limits = palisade_schema::host_policy::RelayLimits {
            max_body: Some(100 << 20),
            ..Default::default()
        };
        let big = cfg().with_limits(&limits);
        assert_eq!(
            big.max_buffered,
            100 << 20,
            "the total follows a larger cap"
        );
    }

    /// A body of `n` one-byte frames.
    struct Drip(usize);

    impl hyper::body::Body for Drip {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            if self.0 == 0 {
                return Poll::Ready(None);
            }
            self.0 -= 1;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"a")))))
        }
    }

    #[tokio::test]
    async fn tiny_frames_are_held_in_blocks_and_released() {
        let cfg = RelayConfig::new(
            "r",
            Origin::parse("https://api.example").unwrap(),
            vec![Route::parse("POST /v1").unwrap()],
            Credential::new("x-api-key", "", Secret::new("k".into())).unwrap(),
            Placeholder::generate(&PlaceholderFormat::generic()).unwrap(),
        )
        .unwrap();
        let relay = Relay::new(
            cfg,
            Arc::new(crate::resolve::StaticResolver::new()),
            Arc::new(crate::record::MemoryRecorder::new()),
        );
        let n = BODY_BLOCK + 10;
        let body = relay.read_body(Drip(n), Instant::now()).await.unwrap();
        assert_eq!(body.len, n);
        assert_eq!(body.chunks.len(), 2, "one handle per block, not per frame");
        assert_eq!(
            body.chunks.iter().map(Bytes::len).collect::<Vec<_>>(),
            [BODY_BLOCK, 10]
        );
        assert_eq!(relay.buffered_bytes(), n);
        drop(body);
        assert_eq!(relay.buffered_bytes(), 0, "released on drop");
    }

    #[test]
    fn override_query_keys_are_found_after_decoding() {
        for q in [
            "_method=GET",
            "a=1&%5Fmethod=PUT",
            "b;_METHOD",
            "+_method=x",
        ] {
            assert!(query_has_override(q), "{q}");
        }
        for q in [
            "method=GET",
            "beta=true",
            "a=_method",
            "%zz=1",
            "_methods=1",
        ] {
            assert!(!query_has_override(q), "{q}");
        }
        assert_eq!(percent_decode(b"%41%2"), b"A%2");
    }

    #[test]
    fn placeholders_are_shaped_and_random() {
        let f = PlaceholderFormat::anthropic();
        let a = Placeholder::generate(&f).unwrap();
        let b = Placeholder::generate(&f).unwrap();
        assert_ne!(a.expose(), b.expose());
        assert_eq!(a.expose().len(), 108);
        assert!(a.expose().starts_with("sk-ant-api03-") && a.expose().ends_with("AA"));
        assert!(
            a.expose()
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        assert!(
            Placeholder::generate(&PlaceholderFormat::openai())
                .unwrap()
                .expose()
                .starts_with("sk-proj-")
        );
        assert!(!format!("{a:?}").contains(a.expose()));
    }
}
