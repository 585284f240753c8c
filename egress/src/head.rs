//! A strict, bounded parser for the head of a proxy request
//! (`CONNECT host:port` or an absolute-form `http://` request).
//!
//! Pure: no IO. It refuses anything a lenient parser might read two ways:
//! bare LF line endings, obs-fold, whitespace before a colon, duplicate
//! `Host`, `Content-Length` together with `Transfer-Encoding`, userinfo,
//! percent-encoded or non-ASCII hosts, ambiguous IPv4 spellings (`0x7f.1`,
//! `017.0.0.1`, `2130706433`), unbracketed IPv6, IPv6 zone identifiers,
//! port 0 or ports with leading zeros, and a `Connection` header that
//! names a header the proxy relies on (`Content-Length`,
//! `Transfer-Encoding`, `Host`): dropping it as hop-by-hop would change how
//! the upstream frames the body.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use palisade_schema::host_policy::RequestHost;

/// Default cap on the size of a request head (request line + headers).
pub const DEFAULT_MAX_HEAD_BYTES: usize = 16 * 1024;
/// Maximum number of header fields.
pub const MAX_HEADERS: usize = 100;
/// Maximum length of a request target.
pub const MAX_TARGET_BYTES: usize = 8 * 1024;
/// Headers a `Connection` header must not name: the proxy frames the body
/// by the first two and regenerates the third, so removing them as
/// hop-by-hop would let the upstream read the body as another request.
pub const CONNECTION_PROTECTED: [&str; 3] = ["content-length", "transfer-encoding", "host"];

/// The request's target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `CONNECT host:port`.
    Authority {
        /// Destination host.
        host: RequestHost,
        /// Destination port.
        port: u16,
    },
    /// `GET http://host[:port]/path?query`.
    Absolute {
        /// Destination host.
        host: RequestHost,
        /// Destination port (80 when absent).
        port: u16,
        /// Origin-form path and query, starting with `/`.
        path_and_query: String,
    },
}

impl Target {
    /// The destination host.
    pub fn host(&self) -> &RequestHost {
        match self {
            Self::Authority { host, .. } | Self::Absolute { host, .. } => host,
        }
    }

    /// The destination port.
    pub fn port(&self) -> u16 {
        match self {
            Self::Authority { port, .. } | Self::Absolute { port, .. } => *port,
        }
    }
}

/// A parsed request head.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestHead {
    /// The method, as sent (uppercase).
    pub method: String,
    /// The parsed target.
    pub target: Target,
    /// `true` for HTTP/1.1, `false` for HTTP/1.0.
    pub http11: bool,
    /// Header fields in order: name as sent, raw value (trimmed).
    pub headers: Vec<(String, Vec<u8>)>,
}

impl RequestHead {
    /// The first header with this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// Whether this is a `CONNECT` request.
    pub fn is_connect(&self) -> bool {
        matches!(self.target, Target::Authority { .. })
    }
}

/// Why a request head was refused. Each has a stable code and an HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeadError {
    /// The head exceeds the size cap.
    #[error("request head too large")]
    TooLarge,
    /// A line ends in a bare LF or contains a bare CR.
    #[error("bare LF or CR in request head")]
    BadLineEnding,
    /// The request line is not `METHOD SP target SP version`.
    #[error("malformed request line")]
    BadRequestLine,
    /// The method is not one the proxy forwards.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The version is not HTTP/1.0 or HTTP/1.1.
    #[error("HTTP version not supported")]
    BadVersion,
    /// The target is not a valid authority or absolute `http://` URL.
    #[error("malformed request target: {0}")]
    BadTarget(&'static str),
    /// A header line is malformed.
    #[error("malformed header field: {0}")]
    BadHeader(&'static str),
    /// Too many header fields.
    #[error("too many header fields")]
    TooManyHeaders,
    /// More than one `Host` header.
    #[error("duplicate Host header")]
    DuplicateHost,
    /// An HTTP/1.1 request without `Host`.
    #[error("missing Host header")]
    MissingHost,
    /// `Host` names another authority than the target.
    #[error("Host header does not match the request target")]
    HostMismatch,
    /// A framing combination used for request smuggling.
    #[error("ambiguous message framing: {0}")]
    Framing(&'static str),
    /// A `Connection` header that is malformed or names a header the
    /// proxy relies on ([`CONNECTION_PROTECTED`]).
    #[error("Connection header not allowed: {0}")]
    BadConnection(&'static str),
}

impl HeadError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::TooLarge => "header_too_large",
            Self::BadLineEnding => "bad_line_ending",
            Self::BadRequestLine => "bad_request_line",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::BadVersion => "bad_version",
            Self::BadTarget(_) => "bad_target",
            Self::BadHeader(_) => "bad_header",
            Self::TooManyHeaders => "too_many_headers",
            Self::DuplicateHost => "duplicate_host",
            Self::MissingHost => "missing_host",
            Self::HostMismatch => "host_mismatch",
            Self::Framing(_) => "ambiguous_framing",
            Self::BadConnection(_) => "bad_connection",
        }
    }

    /// The HTTP status to answer with.
    pub fn status(&self) -> u16 {
        match self {
            Self::TooLarge | Self::TooManyHeaders => 431,
            Self::MethodNotAllowed => 405,
            Self::BadVersion => 400,
            _ => 400,
        }
    }
}

/// Methods forwarded in absolute form (`TRACE` and extension methods are refused).
const FORWARD_METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"];

/// Parse a request head from the start of `buf`.
///
/// `Ok(None)`: incomplete (read more, unless `buf.len() >= max`, which is
/// reported as [`HeadError::TooLarge`]). `Ok(Some((head, n)))`: the head
/// ends after `n` bytes; what follows belongs to the body or tunnel.
pub fn parse_head(buf: &[u8], max: usize) -> Result<Option<(RequestHead, usize)>, HeadError> {
    let window = buf.get(..buf.len().min(max)).unwrap_or(buf);
    let end = find(window, b"\r\n\r\n");
    // Only the head is scanned: bytes after it belong to the body or tunnel.
    let region = match end {
        Some(e) => window.get(..e + 4).unwrap_or(window),
        None => window,
    };
    // Any LF not preceded by CR is refused early, so `\n\n` cannot hang.
    for (i, b) in region.iter().enumerate() {
        if *b == b'\n' && (i == 0 || region.get(i - 1) != Some(&b'\r')) {
            return Err(HeadError::BadLineEnding);
        }
        if *b == b'\r' && region.get(i + 1).is_some_and(|n| *n != b'\n') {
            return Err(HeadError::BadLineEnding);
        }
    }
    let Some(end) = end else {
        if buf.len() >= max {
            return Err(HeadError::TooLarge);
        }
        return Ok(None);
    };
    let head = window.get(..end).ok_or(HeadError::TooLarge)?;
    let consumed = end + 4;
    let mut lines = head
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let request_line = lines.next().ok_or(HeadError::BadRequestLine)?;
    let (method, target_raw, http11) = parse_request_line(request_line)?;

    let mut headers = Vec::new();
    for line in lines {
        if headers.len() >= MAX_HEADERS {
            return Err(HeadError::TooManyHeaders);
        }
        headers.push(parse_header_line(line)?);
    }

    let target = if method == "CONNECT" {
        let (host, port) = parse_authority(target_raw, None)?;
        Target::Authority { host, port }
    } else if FORWARD_METHODS.contains(&method) {
        parse_absolute(target_raw)?
    } else {
        return Err(HeadError::MethodNotAllowed);
    };

    let head = RequestHead {
        method: method.to_owned(),
        target,
        http11,
        headers,
    };
    check_semantics(&head)?;
    Ok(Some((head, consumed)))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn parse_request_line(line: &[u8]) -> Result<(&str, &[u8], bool), HeadError> {
    let line = std::str::from_utf8(line).map_err(|_| HeadError::BadRequestLine)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::BadRequestLine);
    };
    if method.is_empty() || method.len() > 16 || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(HeadError::BadRequestLine);
    }
    if target.is_empty() || target.len() > MAX_TARGET_BYTES {
        return Err(HeadError::BadTarget("empty or too long"));
    }
    if !target.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(HeadError::BadTarget("control or non-ASCII byte"));
    }
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        v if v.starts_with("HTTP/") => return Err(HeadError::BadVersion),
        _ => return Err(HeadError::BadRequestLine),
    };
    Ok((method, target.as_bytes(), http11))
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn parse_header_line(line: &[u8]) -> Result<(String, Vec<u8>), HeadError> {
    if line.first().is_some_and(|b| *b == b' ' || *b == b'\t') {
        return Err(HeadError::BadHeader("obsolete line folding"));
    }
    let colon = line
        .iter()
        .position(|b| *b == b':')
        .ok_or(HeadError::BadHeader("missing colon"))?;
    let (name, rest) = line.split_at(colon);
    if name.is_empty() {
        return Err(HeadError::BadHeader("empty name"));
    }
    if !name.iter().all(|b| is_tchar(*b)) {
        return Err(HeadError::BadHeader("invalid character in name"));
    }
    let value = rest.get(1..).unwrap_or_default();
    if value
        .iter()
        .any(|b| (*b < 0x20 && *b != b'\t') || *b == 0x7f)
    {
        return Err(HeadError::BadHeader("control character in value"));
    }
    let value = trim_ows(value);
    let name = String::from_utf8(name.to_vec()).map_err(|_| HeadError::BadHeader("name"))?;
    Ok((name, value.to_vec()))
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// Parse `host[:port]`. With `default_port` `None` the port is required.
pub fn parse_authority(
    raw: &[u8],
    default_port: Option<u16>,
) -> Result<(RequestHost, u16), HeadError> {
    let s = std::str::from_utf8(raw).map_err(|_| HeadError::BadTarget("not ASCII"))?;
    if s.contains('@') {
        return Err(HeadError::BadTarget("userinfo"));
    }
    if s.contains('%') {
        return Err(HeadError::BadTarget("percent-encoding"));
    }
    if s.contains(['/', '\\', '?', '#']) {
        return Err(HeadError::BadTarget("path in authority"));
    }
    let (host_part, port_part) = if let Some(rest) = s.strip_prefix('[') {
        let (inside, after) = rest
            .split_once(']')
            .ok_or(HeadError::BadTarget("unterminated IPv6 literal"))?;
        let v6: Ipv6Addr = inside
            .parse()
            .map_err(|_| HeadError::BadTarget("invalid IPv6 literal"))?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or(HeadError::BadTarget("junk after IPv6 literal"))?,
            ),
        };
        (RequestHost::Ip(IpAddr::V6(v6)), port)
    } else {
        let (h, p) = match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        if h.contains(':') {
            return Err(HeadError::BadTarget("unbracketed IPv6 literal"));
        }
        (parse_host_name(h)?, p)
    };
    let port = match (port_part, default_port) {
        (Some(p), _) => parse_port(p)?,
        (None, Some(d)) => d,
        (None, None) => return Err(HeadError::BadTarget("missing port")),
    };
    Ok((host_part, port))
}

fn parse_port(p: &str) -> Result<u16, HeadError> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) || p.starts_with('0') {
        return Err(HeadError::BadTarget("invalid port"));
    }
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(HeadError::BadTarget("invalid port")),
        Ok(n) => Ok(n),
    }
}

/// Parse a host name or dotted-quad IPv4 literal.
pub fn parse_host_name(h: &str) -> Result<RequestHost, HeadError> {
    let h = h.strip_suffix('.').unwrap_or(h);
    if h.is_empty() {
        return Err(HeadError::BadTarget("empty host"));
    }
    if h.len() > 253 {
        return Err(HeadError::BadTarget("host too long"));
    }
    if !h.is_ascii() {
        return Err(HeadError::BadTarget("non-ASCII host"));
    }
    let labels: Vec<&str> = h.split('.').collect();
    let last = labels.last().copied().unwrap_or_default();
    let numeric_like = |l: &str| {
        l.bytes().all(|b| b.is_ascii_digit())
            || (l.len() > 1 && (l.starts_with("0x") || l.starts_with("0X")))
    };
    if last.bytes().all(|b| b.is_ascii_digit()) || numeric_like(last) {
        // WHATWG URL parsers read such names as IPv4; accept only canonical dotted quads.
        let v4: Ipv4Addr = h
            .parse()
            .map_err(|_| HeadError::BadTarget("ambiguous IPv4 spelling"))?;
        if v4.to_string() != h {
            return Err(HeadError::BadTarget("ambiguous IPv4 spelling"));
        }
        return Ok(RequestHost::Ip(IpAddr::V4(v4)));
    }
    for label in &labels {
        if label.is_empty() || label.len() > 63 {
            return Err(HeadError::BadTarget("empty or long label"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(HeadError::BadTarget("label starts or ends with '-'"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(HeadError::BadTarget("invalid character in host"));
        }
    }
    Ok(RequestHost::Name(h.to_ascii_lowercase()))
}

fn parse_absolute(raw: &[u8]) -> Result<Target, HeadError> {
    let s = std::str::from_utf8(raw).map_err(|_| HeadError::BadTarget("not ASCII"))?;
    let lower_scheme = s.get(..8).map(str::to_ascii_lowercase).unwrap_or_default();
    let rest = if lower_scheme.starts_with("http://") {
        s.get(7..).unwrap_or_default()
    } else if lower_scheme.starts_with("https://") {
        return Err(HeadError::BadTarget("https:// must use CONNECT"));
    } else if s.starts_with('/') {
        return Err(HeadError::BadTarget("origin-form request to a proxy"));
    } else {
        return Err(HeadError::BadTarget("not an absolute http:// URL"));
    };
    if s.contains('#') {
        return Err(HeadError::BadTarget("fragment"));
    }
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.is_empty() {
        return Err(HeadError::BadTarget("empty authority"));
    }
    let (host, port) = parse_authority(authority.as_bytes(), Some(80))?;
    if path.contains('\\') {
        return Err(HeadError::BadTarget("backslash in path"));
    }
    let path_and_query = if path.is_empty() {
        "/".to_owned()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    Ok(Target::Absolute {
        host,
        port,
        path_and_query,
    })
}

fn check_semantics(head: &RequestHead) -> Result<(), HeadError> {
    let count = |name: &str| {
        head.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .count()
    };
    match count("host") {
        0 if head.http11 => return Err(HeadError::MissingHost),
        0 => {}
        1 => {
            let value = head.header("host").unwrap_or_default();
            let default = match head.target {
                Target::Authority { port, .. } => Some(port),
                Target::Absolute { .. } => Some(80),
            };
            let (h, p) = parse_authority(value, default).map_err(|_| HeadError::HostMismatch)?;
            if &h != head.target.host() || p != head.target.port() {
                return Err(HeadError::HostMismatch);
            }
        }
        _ => return Err(HeadError::DuplicateHost),
    }
    let te = count("transfer-encoding");
    let cl = count("content-length");
    if count("proxy-authorization") > 1 {
        return Err(HeadError::BadHeader("duplicate Proxy-Authorization"));
    }
    if head.is_connect() && (te > 0 || cl > 0) {
        return Err(HeadError::Framing("CONNECT with a body"));
    }
    check_connection(head)?;
    if te > 0 && cl > 0 {
        return Err(HeadError::Framing("Content-Length with Transfer-Encoding"));
    }
    if te > 1 || cl > 1 {
        return Err(HeadError::Framing("repeated framing header"));
    }
    if te == 1 {
        if !head.http11 {
            return Err(HeadError::Framing("Transfer-Encoding in HTTP/1.0"));
        }
        let v = head.header("transfer-encoding").unwrap_or_default();
        if !v.eq_ignore_ascii_case(b"chunked") {
            return Err(HeadError::Framing("Transfer-Encoding other than chunked"));
        }
    }
    if cl == 1 {
        let v = head.header("content-length").unwrap_or_default();
        if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
            return Err(HeadError::Framing("invalid Content-Length"));
        }
    }
    Ok(())
}

/// The options of every `Connection` header, lowercased, in order
/// (empty list elements skipped). `Err` when an option is not a token.
pub fn connection_options(head: &RequestHead) -> Result<Vec<String>, HeadError> {
    let mut out = Vec::new();
    for (_, value) in head
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
    {
        for option in value.split(|b| *b == b',') {
            let option = trim_ows(option);
            if option.is_empty() {
                continue;
            }
            if !option.iter().all(|b| is_tchar(*b)) {
                return Err(HeadError::BadConnection("option is not a token"));
            }
            out.push(String::from_utf8_lossy(option).to_ascii_lowercase());
        }
    }
    Ok(out)
}

/// Refuses a `Connection` header naming a header the proxy relies on.
fn check_connection(head: &RequestHead) -> Result<(), HeadError> {
    for option in connection_options(head)? {
        match option.as_str() {
            "content-length" => return Err(HeadError::BadConnection("names Content-Length")),
            "transfer-encoding" => {
                return Err(HeadError::BadConnection("names Transfer-Encoding"));
            }
            "host" => return Err(HeadError::BadConnection("names Host")),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __fuzz {
    /// Fuzz entry: parse arbitrary bytes; must never panic.
    pub fn request_head(data: &[u8]) {
        let _ = super::parse_head(data, super::DEFAULT_MAX_HEAD_BYTES);
        if let Ok(Some((head, n))) = super::parse_head(data, super::DEFAULT_MAX_HEAD_BYTES) {
            assert!(n <= data.len());
            assert!(!head.method.is_empty());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> RequestHead {
        match parse_head(s.as_bytes(), DEFAULT_MAX_HEAD_BYTES) {
            Ok(Some((h, n))) => {
                assert_eq!(n, s.find("\r\n\r\n").unwrap() + 4);
                h
            }
            other => panic!("{s:?}: {other:?}"),
        }
    }

    fn err(s: &str) -> HeadError {
        match parse_head(s.as_bytes(), DEFAULT_MAX_HEAD_BYTES) {
            Err(e) => e,
            other => panic!("{s:?} must be refused, got {other:?}"),
        }
    }

    #[test]
    fn accepts_plain_connect_and_absolute_forms() {
        let h = ok("CONNECT Example.COM.:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
        assert_eq!(
            h.target,
            Target::Authority {
                host: RequestHost::Name("example.com".into()),
                port: 443
            }
        );
        let h = ok("CONNECT [::1]:8443 HTTP/1.1\r\nHost: [::1]:8443\r\n\r\n");
        assert_eq!(h.target.host(), &RequestHost::Ip("::1".parse().unwrap()));
        let h = ok("GET http://a.example/x?y=1 HTTP/1.1\r\nHost: a.example\r\nAccept: */*\r\n\r\n");
        assert_eq!(
            h.target,
            Target::Absolute {
                host: RequestHost::Name("a.example".into()),
                port: 80,
                path_and_query: "/x?y=1".into()
            }
        );
        let h = ok("GET HTTP://a.example:8080?q HTTP/1.0\r\n\r\n");
        assert_eq!(h.target.port(), 8080);
        assert!(
            matches!(&h.target, Target::Absolute { path_and_query, .. } if path_and_query == "/?q")
        );
        let h = ok(
            "POST http://127.0.0.1:81/ HTTP/1.1\r\nHost: 127.0.0.1:81\r\nContent-Length: 5\r\n\r\nhello",
        );
        assert_eq!(h.header("content-length"), Some(&b"5"[..]));
    }

    #[test]
    fn incomplete_then_too_large() {
        assert_eq!(
            parse_head(b"CONNECT a.example:443 HTTP/1.1\r\n", 1024),
            Ok(None)
        );
        let big = format!(
            "CONNECT a.example:443 HTTP/1.1\r\nX: {}\r\n",
            "a".repeat(2000)
        );
        assert_eq!(parse_head(big.as_bytes(), 1024), Err(HeadError::TooLarge));
    }

    #[test]
    fn refuses_ambiguous_ip_spellings() {
        for t in [
            "0x7f.1:443",
            "017.0.0.1:443",
            "2130706433:443",
            "127.1:443",
            "127.0.0.01:443",
            "1.2.3.0x4:80",
        ] {
            let s = format!("CONNECT {t} HTTP/1.0\r\n\r\n");
            assert_eq!(err(&s).code(), "bad_target", "{t}");
        }
        // positive control: the canonical spelling parses
        ok("CONNECT 127.0.0.1:443 HTTP/1.0\r\n\r\n");
    }

    #[test]
    fn refuses_smuggling_forms() {
        assert_eq!(
            err(
                "POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
            ),
            HeadError::Framing("Content-Length with Transfer-Encoding")
        );
        assert_eq!(
            err("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").code(),
            "ambiguous_framing"
        );
        assert_eq!(
            err("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip, chunked\r\n\r\n").code(),
            "ambiguous_framing"
        );
        assert_eq!(
            err("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length : 1\r\n\r\n")
                .code(),
            "bad_header"
        );
        assert_eq!(
            err("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nX: a\r\n b\r\n\r\n").code(),
            "bad_header"
        );
        assert_eq!(
            err("GET http://a.example/ HTTP/1.1\nHost: a.example\n\n"),
            HeadError::BadLineEnding
        );
        // positive control
        ok(
            "POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
    }

    #[test]
    fn a_connection_header_naming_a_header_the_proxy_relies_on_is_refused() {
        for (value, want) in [
            ("content-length", "names Content-Length"),
            ("Keep-Alive, Content-Length", "names Content-Length"),
            ("close,TRANSFER-ENCODING", "names Transfer-Encoding"),
            ("host", "names Host"),
            ("x-a, , host ", "names Host"),
            ("keep-alive, a b", "option is not a token"),
            ("\"close\"", "option is not a token"),
        ] {
            let s = format!(
                "POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1\r\nConnection: {value}\r\n\r\nx"
            );
            assert_eq!(err(&s), HeadError::BadConnection(want), "{value}");
            assert_eq!(err(&s).code(), "bad_connection");
            assert_eq!(err(&s).status(), 400);
        }
        // also in a second Connection header, and on CONNECT
        assert_eq!(
            err("GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\nConnection: transfer-encoding\r\n\r\n").code(),
            "bad_connection"
        );
        assert_eq!(
            err(
                "CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\nConnection: host\r\n\r\n"
            )
            .code(),
            "bad_connection"
        );
        // positive control: ordinary options and custom hop-by-hop tokens
        for value in ["keep-alive", "close", "Keep-Alive, X-Trace", "x-a,,x-b", ""] {
            let h = ok(&format!(
                "POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1\r\nConnection: {value}\r\n\r\n"
            ));
            assert!(connection_options(&h).is_ok(), "{value}");
        }
    }

    #[test]
    fn fuzz_entry_accepts_anything() {
        __fuzz::request_head(b"");
        __fuzz::request_head(b"\r\n\r\n");
        __fuzz::request_head(&[0xff; 64]);
        __fuzz::request_head(b"CONNECT [:443 HTTP/1.1\r\n\r\n");
    }
}
