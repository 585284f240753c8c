//! Small value types of `palisade.toml`: sizes, durations, CIDR ranges,
//! relay origins and routes, path globs.

use std::fmt;
use std::net::IpAddr;

/// Parses a byte size: a bare integer (bytes) or a number with a unit
/// `B`, `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024) or `KB`, `MB`, `GB`, `TB`
/// (powers of 1000).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a size such as `256MiB`"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "unknown size unit `{other}` (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// Parses a duration in seconds: a bare integer (seconds) or a sequence of
/// number-unit pairs with units `s`, `m`, `h`, `d` (`90s`, `1h30m`).
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".to_owned());
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map_err(|_| format!("`{text}` is too large"));
    }
    let mut total: u64 = 0;
    let mut num = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let unit: u64 = match c {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            _ => return Err(format!("`{text}` is not a duration such as `1h30m`")),
        };
        let n: u64 = num
            .parse()
            .map_err(|_| format!("`{text}` is not a duration such as `1h30m`"))?;
        num.clear();
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| format!("`{text}` is too large"))?;
    }
    if !num.is_empty() {
        return Err(format!("`{text}` has a number without a unit"));
    }
    Ok(total)
}

/// An IP address range in CIDR notation (`10.0.0.0/8`, `fd00::/8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr {
    // INVARIANT: `prefix` ≤ the address width and the host bits of `addr` are zero.
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `addr/prefix` or a single address (a /32 or /128).
    ///
    /// Host bits must be zero: `10.0.0.1/8` is refused rather than silently widened.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("`{text}` is not an address range such as `10.0.0.0/8`"))?;
        let width: u8 = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => width,
            // Digits only: `u8::from_str` would also take `+8`.
            Some(p) => Some(p)
                .filter(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse::<u8>().ok())
                .filter(|p| *p <= width)
                .ok_or_else(|| format!("`{text}` has a prefix length outside 0..={width}"))?,
        };
        let bits = to_bits(addr);
        if bits & !mask(prefix, width) != 0 {
            return Err(format!(
                "`{text}` has host bits set below the /{prefix} prefix"
            ));
        }
        Ok(Self { addr, prefix })
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` lies in this range. An IPv4-mapped IPv6 address
    /// (`::ffff:a.b.c.d`) is compared as the IPv4 address it carries, and a
    /// range inside `::ffff:0:0/96` as the IPv4 range it maps
    /// (`::ffff:127.0.0.0/104` is `127.0.0.0/8`); other IPv6 ranges never
    /// contain an IPv4 address. The proxy's address checks follow the same
    /// rule, so a literal and a name resolving to it are matched alike.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            IpAddr::V4(_) => ip,
        };
        let (net, prefix) = self.matched_as();
        if ip.is_ipv4() != net.is_ipv4() {
            return false;
        }
        let width: u8 = if ip.is_ipv4() { 32 } else { 128 };
        to_bits(ip) & mask(prefix, width) == to_bits(net)
    }

    /// The range as [`Cidr::contains`] matches it: an IPv4-mapped range as
    /// the IPv4 range, anything else unchanged.
    pub fn matched_as(&self) -> (IpAddr, u8) {
        match self.addr {
            IpAddr::V6(v6) if self.prefix >= 96 => match v6.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), self.prefix - 96),
                None => (self.addr, self.prefix),
            },
            _ => (self.addr, self.prefix),
        }
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;

    /// [`Cidr::parse`].
    fn from_str(text: &str) -> Result<Self, String> {
        Self::parse(text)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn to_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn mask(prefix: u8, width: u8) -> u128 {
    let full: u128 = if width == 32 {
        u128::from(u32::MAX)
    } else {
        u128::MAX
    };
    let host_bits = u32::from(width.saturating_sub(prefix));
    if host_bits >= 128 {
        0
    } else {
        full & !((1u128 << host_bits) - 1)
    }
}

/// The scheme, host and port a relay forwards to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// `https` or `http`.
    pub scheme: String,
    /// Lowercase host: a punycode name or an IP literal (IPv6 in brackets).
    pub host: String,
    /// The port, defaulted from the scheme.
    pub port: u16,
}

impl Origin {
    /// Parses `https://host[:port]` with an optional trailing `/` and nothing else.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (scheme, rest) = text.split_once("://").ok_or_else(|| {
            format!("`{text}` is not an origin such as `https://api.example.com`")
        })?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "https" => 443,
            "http" => 80,
            _ => return Err(format!("scheme `{scheme}` is not `https` or `http`")),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return Err(format!(
                "`{text}` must be an origin only: no path, query, fragment or user info"
            ));
        }
        let (host, port) = match super::host_pattern::split_authority(rest) {
            Ok((h, p)) => (h, p),
            Err(_) => (
                super::host_pattern::RequestHost::parse(rest).map_err(|e| e.to_string())?,
                default_port,
            ),
        };
        Ok(Self {
            scheme,
            host: host.to_string(),
            port,
        })
    }

    /// Parses a URL `https://host[:port]/path` (no query, fragment or user
    /// info) and returns its origin; the path must be present and plain.
    pub fn parse_url(text: &str) -> Result<Self, String> {
        let (scheme, rest) = text.split_once("://").ok_or_else(|| {
            format!("`{text}` is not a URL such as `https://auth.example.com/oauth/token`")
        })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if path.is_empty()
            || path.contains(['?', '#'])
            || path.bytes().any(|b| b <= b' ' || b == 0x7f)
        {
            return Err(format!(
                "`{text}` must be a URL with a path and no query or fragment"
            ));
        }
        Self::parse(&format!("{scheme}://{authority}"))
    }

    /// Whether the host is a loopback address or `localhost`.
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost"
            || self
                .host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

/// One route a relay forwards: an HTTP method and an exact path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RelayRoute {
    /// Uppercase method such as `POST`.
    pub method: String,
    /// Path beginning with `/`, such as `/v1/messages`. A segment written
    /// `{name}` is a placeholder that matches exactly one non-empty path
    /// segment (see `palisade_policy::relay_route`); every other segment
    /// matches only itself.
    pub path: String,
    /// `outward = …, target = …` of a table route: a request matching this
    /// route is an outward action decided by `[outward]` before it is
    /// forwarded. `None` for a plain (string) route: forwarded as today.
    pub outward: Option<RouteOutward>,
}

/// The outward class of a table route: `{ route = "POST /repos/{owner}/{repo}/issues/{number}/comments",
/// outward = "github.post.comment", target = "github.com/{owner}/{repo}/issues/{number}" }`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RouteOutward {
    /// The outward kind the request is decided as.
    pub kind: super::OutwardKind,
    /// The target template: text with `{name}` placeholders, each one of
    /// the route path's placeholders (checked at parse time).
    pub target: String,
}

impl RelayRoute {
    /// Parses `METHOD /path` (a plain route, no outward class).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (method, path) = text
            .split_once(' ')
            .ok_or_else(|| format!("`{text}` is not a route such as `POST /v1/messages`"))?;
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!("`{method}` is not an uppercase HTTP method"));
        }
        if !path.starts_with('/')
            || path.contains(['?', '#', '%', '\\', ' ', '*'])
            || path.split('/').any(|seg| seg == ".." || seg == ".")
            || path.contains("//")
        {
            return Err(format!(
                "`{path}` must be an exact path starting with `/`, without `.`/`..` segments, `//`, query, `%` or wildcards"
            ));
        }
        let mut names: Vec<&str> = Vec::new();
        for seg in path.split('/') {
            if (seg.contains('{') || seg.contains('}')) && placeholder_name(seg).is_none() {
                return Err(format!(
                    "`{seg}` in `{path}`: a placeholder is a whole segment `{{name}}` (letters, digits, `_`)"
                ));
            }
            if let Some(name) = placeholder_name(seg) {
                if names.contains(&name) {
                    return Err(format!(
                        "placeholder `{{{name}}}` is used twice in `{path}`: each placeholder names one segment"
                    ));
                }
                names.push(name);
            }
        }
        Ok(Self {
            method: method.to_owned(),
            path: path.to_owned(),
            outward: None,
        })
    }

    /// The placeholder names of the path, in order (`owner`, `repo`, …).
    pub fn placeholders(&self) -> impl Iterator<Item = &str> {
        self.path.split('/').filter_map(placeholder_name)
    }

    /// The path with every placeholder written `{}`: two routes with the
    /// same method and shape match exactly the same requests, whatever
    /// their placeholders are called.
    pub fn shape(&self) -> String {
        self.path
            .split('/')
            .map(|seg| {
                if placeholder_name(seg).is_some() {
                    "{}"
                } else {
                    seg
                }
            })
            .collect::<Vec<_>>()
            .join("/")
    }
}

/// `Some(name)` when `seg` is a whole-segment placeholder `{name}`.
pub fn placeholder_name(seg: &str) -> Option<&str> {
    let name = seg.strip_prefix('{')?.strip_suffix('}')?;
    let ok = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    ok.then_some(name)
}

impl fmt::Display for RelayRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

/// A validated path glob (`inbox/**`, `AGENTS.md`, `/srv/data/**`).
///
/// Syntax is `globset`'s with `literal_separator` on: `*` and `?` stay inside
/// one path segment, `**` crosses segments. Paths are matched case-sensitively.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PathGlob(String);

impl PathGlob {
    /// Checks the glob syntax.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("empty glob".to_owned());
        }
        if text.split('/').any(|seg| seg == "..") {
            return Err(format!("`{text}` must not contain `..`"));
        }
        let glob = text.strip_prefix("./").unwrap_or(text);
        Self::compile_text(glob).map_err(|e| format!("`{text}`: {e}"))?;
        Ok(Self(glob.to_owned()))
    }

    /// The glob text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The compiled glob.
    pub fn compile(&self) -> Result<globset::Glob, globset::Error> {
        Self::compile_text(&self.0)
    }

    fn compile_text(text: &str) -> Result<globset::Glob, globset::Error> {
        globset::GlobBuilder::new(text)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
    }
}

impl fmt::Display for PathGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("2MB"), Ok(2_000_000));
        assert!(parse_size("4 gigs").is_err());
        assert!(parse_size("99999999999TiB").is_err());
        assert_eq!(parse_duration("1h30m"), Ok(5400));
        assert_eq!(parse_duration("45"), Ok(45));
        assert!(parse_duration("1h30").is_err());
        assert!(parse_duration("1w").is_err());
    }

    #[test]
    fn cidr_contains_and_refuses_host_bits() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains("10.1.2.3".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!c.contains("11.0.0.0".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.1/8").is_err());
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(
            Cidr::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
        assert_eq!(Cidr::parse("192.168.1.5").unwrap().prefix(), 32);
        // An IPv4-mapped range is the IPv4 range, for both spellings.
        let mapped = Cidr::parse("::ffff:127.0.0.0/104").unwrap();
        assert!(mapped.contains("127.0.0.1".parse().unwrap()));
        assert!(mapped.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!mapped.contains("128.0.0.1".parse().unwrap()));
        assert!(!mapped.contains("::127.0.0.1".parse().unwrap()));
        // ... and a wider IPv6 range does not reach into IPv4.
        assert!(
            !Cidr::parse("::/0")
                .unwrap()
                .contains("127.0.0.1".parse().unwrap())
        );
    }

    #[test]
    fn origins_and_routes() {
        let o = Origin::parse("https://API.anthropic.com").unwrap();
        assert_eq!(o.to_string(), "https://api.anthropic.com:443");
        assert_eq!(Origin::parse("http://127.0.0.1:8080/").unwrap().port, 8080);
        assert!(
            Origin::parse("http://127.0.0.1:8080/")
                .unwrap()
                .is_loopback()
        );
        assert!(Origin::parse("https://api.x.com/v1").is_err());
        assert!(Origin::parse("ftp://x.com").is_err());
        assert!(Origin::parse("https://user@x.com").is_err());
        assert!(RelayRoute::parse("POST /v1/messages").is_ok());
        assert!(RelayRoute::parse("post /v1/messages").is_err());
        assert!(RelayRoute::parse("POST /v1/../admin").is_err());
        assert!(RelayRoute::parse("POST /v1/*").is_err());
    }
}
