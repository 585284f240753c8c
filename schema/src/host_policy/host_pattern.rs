//! Host patterns (`api.github.com:443`, `*.githubusercontent.com`) and
//! normalised request hosts.
//!
//! The grammar follows the rules shared by smokescreen, sandbox-runtime and
//! zed: a pattern is an exact DNS name or a name with one leading `*.`, which
//! matches strict subdomains only (never the bare name). Names are compared
//! case-insensitively, a single trailing dot is ignored and internationalised
//! names are compared in punycode (IDNA UTS #46, via the `idna` crate). An
//! optional `:port` limits the pattern to that port; without one the pattern
//! covers every port.
//!
//! Rejected patterns: `*` alone, `*.` , a `*` anywhere but as the whole first
//! label, `*.<tld>` (a wildcard over a single label; palisade carries no
//! public-suffix list, so `*.co.uk` is accepted and documented as such),
//! URLs, paths, IP literals and `localhost` (an address belongs in
//! `egress.allow_addresses`, not in a name rule).

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// Longest DNS name accepted, in ASCII bytes, without the trailing dot.
const MAX_NAME_LEN: usize = 253;
/// Longest DNS label accepted.
const MAX_LABEL_LEN: usize = 63;

/// Why a host pattern or a request host was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostError {
    /// The text is empty (or only a dot).
    Empty,
    /// `*` or `*.` alone: it would match every host.
    MatchAll,
    /// A `*` that is not the whole first label followed by a dot.
    MisplacedWildcard,
    /// `*.<single label>`: a wildcard over a whole top-level domain.
    WildcardTld,
    /// A scheme, path, user info, query or whitespace.
    NotAHost,
    /// An IP address where a name is needed.
    IpLiteral,
    /// `localhost` or a name under it.
    Localhost,
    /// A name that URL parsers would read as an IPv4 address (`0x7f.1`, `2130706433`).
    NumericName,
    /// IDNA processing failed or left characters outside `[a-z0-9_-]`.
    InvalidName(String),
    /// An empty label (`a..b`) or more than one trailing dot.
    EmptyLabel,
    /// A label longer than 63 bytes or a name longer than 253 bytes.
    TooLong,
    /// The port is not a number in 1..=65535.
    InvalidPort(String),
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("the host is empty"),
            Self::MatchAll => f.write_str("`*` alone would match every host"),
            Self::MisplacedWildcard => {
                f.write_str("a wildcard is only allowed as a leading `*.` label")
            }
            Self::WildcardTld => {
                f.write_str("a wildcard over a single label would match a whole top-level domain")
            }
            Self::NotAHost => f.write_str("expected a host name, not a URL or path"),
            Self::IpLiteral => f.write_str("an IP address is not a host name"),
            Self::Localhost => f.write_str("`localhost` names the host's loopback"),
            Self::NumericName => f.write_str("a numeric name would be read as an IPv4 address"),
            Self::InvalidName(why) => write!(f, "not a valid host name: {why}"),
            Self::EmptyLabel => f.write_str("the name has an empty label"),
            Self::TooLong => f.write_str("the name is longer than DNS allows"),
            Self::InvalidPort(p) => write!(f, "`{p}` is not a port in 1..=65535"),
        }
    }
}

impl std::error::Error for HostError {}

/// A validated egress host pattern.
///
/// Construct it with [`HostPattern::parse`]; the stored name is already
/// lowercase punycode without a trailing dot.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostPattern {
    // INVARIANT: `name` is a normalised ASCII DNS name with at least one label;
    // when `wildcard` is true it has at least two labels.
    name: String,
    wildcard: bool,
    port: Option<u16>,
}

impl HostPattern {
    /// Parses `name`, `*.name`, `name:port` or `*.name:port`.
    pub fn parse(text: &str) -> Result<Self, HostError> {
        let (host, port) = split_port(text)?;
        let (wildcard, rest) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None if host == "*" || host == "*." => return Err(HostError::MatchAll),
            None => (false, host),
        };
        if rest.contains('*') {
            return Err(HostError::MisplacedWildcard);
        }
        if rest.is_empty() || rest == "." {
            return Err(if wildcard {
                HostError::MatchAll
            } else {
                HostError::Empty
            });
        }
        if looks_like_ip(rest) {
            return Err(HostError::IpLiteral);
        }
        let name = normalize_name(rest)?;
        if name == "localhost" || name.ends_with(".localhost") {
            return Err(HostError::Localhost);
        }
        if wildcard && !name.contains('.') {
            return Err(HostError::WildcardTld);
        }
        Ok(Self {
            name,
            wildcard,
            port,
        })
    }

    /// The normalised name, without the `*.` of a wildcard.
    pub fn base(&self) -> &str {
        &self.name
    }

    /// Whether this is a `*.` pattern.
    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// The port this pattern is limited to, if any.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Whether the pattern matches `host` on any port it allows.
    pub fn matches_name(&self, host: &RequestHost) -> bool {
        let RequestHost::Name(name) = host else {
            return false;
        };
        if self.wildcard {
            name.len() > self.name.len()
                && name.ends_with(self.name.as_str())
                && name
                    .as_bytes()
                    .get(name.len() - self.name.len() - 1)
                    .is_some_and(|&b| b == b'.')
        } else {
            *name == self.name
        }
    }

    /// Whether the pattern matches a connection to `host` on `port`.
    pub fn matches(&self, host: &RequestHost, port: u16) -> bool {
        self.port.is_none_or(|p| p == port) && self.matches_name(host)
    }

    /// Whether every connection this pattern matches is also matched by `self`
    /// (`*.github.com` covers `*.api.github.com` and `api.github.com:443`,
    /// not `github.com`).
    pub fn covers(&self, other: &Self) -> bool {
        let port_ok = match (self.port, other.port) {
            (None, _) => true,
            (Some(a), Some(b)) => a == b,
            (Some(_), None) => false,
        };
        if !port_ok {
            return false;
        }
        match (self.wildcard, other.wildcard) {
            (false, false) => self.name == other.name,
            (false, true) => false,
            (true, _) => {
                let probe = RequestHost::Name(other.name.clone());
                // `*.a.b` covers `x.a.b` and `*.x.a.b`; covering `*.a.b` itself needs equal bases.
                (other.wildcard && other.name == self.name) || self.matches_name(&probe)
            }
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        f.write_str(&self.name)?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

/// The host of a connection request, normalised for matching.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RequestHost {
    /// A DNS name: lowercase punycode, no trailing dot.
    Name(String),
    /// An IP literal (`[::1]` is given without brackets).
    Ip(IpAddr),
}

impl RequestHost {
    /// Normalises the host part of a request (no port).
    ///
    /// IP literals are recognised (with or without IPv6 brackets); names that
    /// URL parsers would read as IPv4 (`0x7f.1`, `2130706433`) are refused
    /// rather than guessed at.
    pub fn parse(text: &str) -> Result<Self, HostError> {
        let inner = text
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(text);
        if let Ok(ip) = inner.parse::<IpAddr>() {
            return Ok(Self::Ip(ip));
        }
        if text.starts_with('[') {
            return Err(HostError::NotAHost);
        }
        if inner.contains('*') {
            return Err(HostError::NotAHost);
        }
        normalize_name(inner).map(Self::Name)
    }

    /// The name, if this is not an IP literal.
    pub fn name(&self) -> Option<&str> {
        match self {
            Self::Name(n) => Some(n),
            Self::Ip(_) => None,
        }
    }
}

impl fmt::Display for RequestHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(n) => f.write_str(n),
            Self::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Self::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
        }
    }
}

/// Splits a CONNECT-style authority `host:port` (IPv6 in brackets).
///
/// The port is required.
pub fn split_authority(text: &str) -> Result<(RequestHost, u16), HostError> {
    let (host, port) = split_port(text)?;
    let port = port.ok_or_else(|| HostError::InvalidPort(String::new()))?;
    Ok((RequestHost::parse(host)?, port))
}

/// Splits an optional `:port` suffix off `text`.
fn split_port(text: &str) -> Result<(&str, Option<u16>), HostError> {
    if text.is_empty() {
        return Err(HostError::Empty);
    }
    if text.contains("://")
        || text.contains('/')
        || text.contains('@')
        || text.contains('?')
        || text.contains('#')
        || text.contains('\\')
        || text.chars().any(char::is_whitespace)
    {
        return Err(HostError::NotAHost);
    }
    if let Some(rest) = text.strip_prefix('[') {
        // A bracketed IPv6 literal, optionally followed by `:port`.
        let Some(close) = rest.find(']') else {
            return Err(HostError::NotAHost);
        };
        let (addr, after) = rest.split_at(close);
        let after = after.strip_prefix(']').unwrap_or(after);
        let host = text.get(..close + 2).ok_or(HostError::NotAHost)?;
        if addr.parse::<Ipv6Addr>().is_err() {
            return Err(HostError::NotAHost);
        }
        return match after.strip_prefix(':') {
            None if after.is_empty() => Ok((host, None)),
            None => Err(HostError::NotAHost),
            Some(p) => Ok((host, Some(parse_port(p)?))),
        };
    }
    match text.rsplit_once(':') {
        None => Ok((text, None)),
        Some((host, _)) if host.contains(':') => {
            // Several colons: an unbracketed IPv6 literal.
            if text.parse::<Ipv6Addr>().is_ok() {
                Ok((text, None))
            } else {
                Err(HostError::NotAHost)
            }
        }
        Some((host, port)) => Ok((host, Some(parse_port(port)?))),
    }
}

fn parse_port(text: &str) -> Result<u16, HostError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || text.len() > 5 {
        return Err(HostError::InvalidPort(text.to_owned()));
    }
    match text.parse::<u16>() {
        Ok(0) | Err(_) => Err(HostError::InvalidPort(text.to_owned())),
        Ok(p) => Ok(p),
    }
}

fn looks_like_ip(text: &str) -> bool {
    let inner = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    inner.parse::<IpAddr>().is_ok()
}

/// Lowercase punycode, trailing dot removed, labels checked.
fn normalize_name(text: &str) -> Result<String, HostError> {
    if text.is_empty() || text == "." {
        return Err(HostError::Empty);
    }
    let ascii = idna::domain_to_ascii_cow(text.as_bytes(), idna::AsciiDenyList::URL)
        .map_err(|e| HostError::InvalidName(e.to_string()))?;
    // Exactly one trailing dot (after UTS #46 mapped ideographic and
    // fullwidth full stops to `.`) is the root; a second one is an empty label.
    let ascii = ascii.strip_suffix('.').unwrap_or(&ascii);
    if ascii.is_empty() {
        return Err(HostError::Empty);
    }
    if ascii.len() > MAX_NAME_LEN {
        return Err(HostError::TooLong);
    }
    let mut last = "";
    for label in ascii.split('.') {
        if label.is_empty() {
            return Err(HostError::EmptyLabel);
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(HostError::TooLong);
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(HostError::InvalidName(format!(
                "`{label}` has characters outside a-z, 0-9, `-` and `_`"
            )));
        }
        last = label;
    }
    // WHATWG URL parsing treats a name whose last label is numeric as IPv4.
    if last.bytes().all(|b| b.is_ascii_digit())
        || last
            .strip_prefix("0x")
            .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(HostError::NumericName);
    }
    Ok(ascii.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &str) -> RequestHost {
        RequestHost::parse(s).unwrap()
    }

    #[test]
    fn wildcard_matches_strict_subdomains_only() {
        let p = HostPattern::parse("*.example.com").unwrap();
        assert!(p.matches(&host("a.example.com"), 443));
        assert!(p.matches(&host("a.b.example.com"), 1));
        assert!(!p.matches(&host("example.com"), 443));
        assert!(!p.matches(&host("evil-example.com"), 443));
        assert!(!p.matches(&host("notexample.com"), 443));
    }

    #[test]
    fn rejected_patterns_name_their_reason() {
        for (text, err) in [
            ("*", HostError::MatchAll),
            ("*.", HostError::MatchAll),
            ("*.com", HostError::WildcardTld),
            ("api.*.example.com", HostError::MisplacedWildcard),
            ("*example.com", HostError::MisplacedWildcard),
            ("example.*", HostError::MisplacedWildcard),
            ("https://example.com", HostError::NotAHost),
            ("example.com/x", HostError::NotAHost),
            ("10.0.0.1", HostError::IpLiteral),
            ("[::1]:443", HostError::IpLiteral),
            ("localhost", HostError::Localhost),
            ("*.localhost", HostError::Localhost),
            ("example.com:0", HostError::InvalidPort("0".into())),
            ("example.com:65536", HostError::InvalidPort("65536".into())),
            ("a..b", HostError::EmptyLabel),
            ("0x7f.1", HostError::NumericName),
            ("example.com..", HostError::EmptyLabel),
            (".example.com", HostError::EmptyLabel),
        ] {
            assert_eq!(HostPattern::parse(text), Err(err), "{text}");
        }
    }

    #[test]
    fn idna_and_case_are_normalised() {
        let p = HostPattern::parse("MÜNCHEN.de.").unwrap();
        assert_eq!(p.to_string(), "xn--mnchen-3ya.de");
        assert!(p.matches(&host("xn--mnchen-3ya.de"), 80));
        assert!(p.matches(&host("münchen.DE."), 80));
    }

    #[test]
    fn covers_is_a_lattice() {
        let w = HostPattern::parse("*.github.com").unwrap();
        assert!(w.covers(&HostPattern::parse("*.api.github.com").unwrap()));
        assert!(w.covers(&HostPattern::parse("api.github.com:443").unwrap()));
        assert!(w.covers(&w));
        assert!(!w.covers(&HostPattern::parse("github.com").unwrap()));
        let ported = HostPattern::parse("*.github.com:443").unwrap();
        assert!(!ported.covers(&HostPattern::parse("api.github.com").unwrap()));
    }

    #[test]
    fn authority_splits_ipv6_and_names() {
        assert_eq!(
            split_authority("[::1]:443").unwrap(),
            (RequestHost::Ip("::1".parse().unwrap()), 443)
        );
        assert_eq!(
            split_authority("Example.COM.:8443").unwrap(),
            (host("example.com"), 8443)
        );
        assert!(split_authority("example.com").is_err());
        assert!(split_authority("::1:443").is_err());
    }
}

#[cfg(test)]
mod props {
    use proptest::prelude::*;

    use super::*;

    fn label() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "a",
            "B",
            "ex",
            "Example",
            "com",
            "evil-example",
            "xn--mnchen-3ya",
            "münchen",
        ])
        .prop_map(str::to_owned)
    }

    fn name() -> impl Strategy<Value = String> {
        prop::collection::vec(label(), 2..4).prop_map(|ls| ls.join("."))
    }

    fn pattern() -> impl Strategy<Value = (bool, String, Option<u16>)> {
        (
            any::<bool>(),
            name(),
            prop::option::of(prop::sample::select(vec![80u16, 443])),
        )
    }

    fn text((w, n, p): &(bool, String, Option<u16>)) -> String {
        let mut s = if *w { format!("*.{n}") } else { n.clone() };
        if let Some(p) = p {
            s.push_str(&format!(":{p}"));
        }
        s
    }

    /// A naive reference: lowercase, punycode via the same IDNA call, suffix test.
    fn naive(w: bool, base: &str, host: &str) -> bool {
        let b = idna::domain_to_ascii(base).unwrap();
        let h = idna::domain_to_ascii(host.trim_end_matches('.')).unwrap();
        if w {
            h.ends_with(&format!(".{b}"))
        } else {
            h == b
        }
    }

    proptest! {
        #[test]
        fn matcher_properties(p in pattern(), q in pattern(), host in name(), port in prop::sample::select(vec![80u16, 443, 8080]), dot in any::<bool>()) {
            let pat = HostPattern::parse(&text(&p)).unwrap();
            // Normalisation is idempotent.
            prop_assert_eq!(HostPattern::parse(&pat.to_string()).unwrap(), pat.clone());
            let h = RequestHost::parse(&host).unwrap();
            // Case and trailing-dot invariance.
            let spelled = format!("{}{}", host.to_uppercase(), if dot { "." } else { "" });
            let h2 = RequestHost::parse(&spelled).unwrap();
            prop_assert_eq!(pat.matches(&h, port), pat.matches(&h2, port));
            // Agreement with the naive reference.
            prop_assert_eq!(pat.matches(&h, port), naive(p.0, &p.1, &host) && p.2.is_none_or(|x| x == port));
            // `*.d` never matches `d`.
            if pat.is_wildcard() {
                prop_assert!(!pat.matches_name(&RequestHost::parse(pat.base()).unwrap()));
            }
            // A port-less rule matches exactly what the same rule for that port matches.
            let unported = HostPattern::parse(&text(&(p.0, p.1.clone(), None))).unwrap();
            let ported = HostPattern::parse(&text(&(p.0, p.1.clone(), Some(port)))).unwrap();
            prop_assert_eq!(unported.matches(&h, port), ported.matches(&h, port));
            // covers(a, b) and b matches ⇒ a matches.
            let other = HostPattern::parse(&text(&q)).unwrap();
            if pat.covers(&other) && other.matches(&h, port) {
                prop_assert!(pat.matches(&h, port));
            }
        }
    }
}
