//! A small, bounded parser that extracts the SNI host name from the first
//! bytes a client sends through a CONNECT tunnel (a TLS ClientHello),
//! without terminating TLS.
//!
//! Pure: no IO. The handshake message may span several TLS records; the
//! parser reassembles at most [`MAX_CLIENT_HELLO`] bytes.

/// Largest ClientHello handshake message reassembled (bytes).
pub const MAX_CLIENT_HELLO: usize = 16 * 1024;
/// Largest prefix of the stream the parser needs (records headers included).
pub const MAX_PEEK: usize = MAX_CLIENT_HELLO + 5 * 8;

/// What the first bytes of a tunnel say about SNI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientHello {
    /// More bytes are needed.
    Incomplete,
    /// The stream does not start with a TLS handshake record.
    NotTls,
    /// A TLS ClientHello that cannot be parsed (the reason is a stable code).
    Malformed(&'static str),
    /// A ClientHello without a `server_name` host name.
    NoSni,
    /// The SNI host name, lowercased, trailing dot removed.
    Sni(String),
}

impl ClientHello {
    /// A stable code for records.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Incomplete => "incomplete",
            Self::NotTls => "not_tls",
            Self::Malformed(_) => "malformed_tls",
            Self::NoSni => "no_sni",
            Self::Sni(_) => "sni",
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(out)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).and_then(|b| b.first().copied())
    }
    fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
    }
    fn u24(&mut self) -> Option<usize> {
        let b = self.take(3)?;
        Some(
            (usize::from(*b.first()?) << 16)
                | (usize::from(*b.get(1)?) << 8)
                | usize::from(*b.get(2)?),
        )
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
    fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }
}

/// Inspect the first bytes of a tunnel.
pub fn parse_client_hello(data: &[u8]) -> ClientHello {
    // Reassemble the handshake message from consecutive handshake records.
    let mut msg: Vec<u8> = Vec::new();
    let mut rd = Reader::new(data);
    let mut first = true;
    loop {
        let Some(ct) = rd.u8() else {
            return ClientHello::Incomplete;
        };
        if ct != 0x16 {
            return if first {
                ClientHello::NotTls
            } else {
                ClientHello::Malformed("record_type")
            };
        }
        let Some(major) = rd.u8() else {
            return ClientHello::Incomplete;
        };
        if major != 3 {
            return if first {
                ClientHello::NotTls
            } else {
                ClientHello::Malformed("record_version")
            };
        }
        let Some(_minor) = rd.u8() else {
            return ClientHello::Incomplete;
        };
        let Some(len) = rd.u16() else {
            return ClientHello::Incomplete;
        };
        let len = usize::from(len);
        if len == 0 || len > 16384 {
            return ClientHello::Malformed("record_length");
        }
        let Some(frag) = rd.take(len) else {
            return ClientHello::Incomplete;
        };
        if msg.len() + frag.len() > MAX_CLIENT_HELLO + 4 {
            return ClientHello::Malformed("client_hello_too_large");
        }
        msg.extend_from_slice(frag);
        first = false;
        let mut h = Reader::new(&msg);
        let (Some(ht), Some(hlen)) = (h.u8(), h.u24()) else {
            continue;
        };
        if ht != 1 {
            return ClientHello::Malformed("not_client_hello");
        }
        if hlen > MAX_CLIENT_HELLO {
            return ClientHello::Malformed("client_hello_too_large");
        }
        if msg.len() < 4 + hlen {
            continue;
        }
        let body = msg.get(4..4 + hlen).unwrap_or_default();
        return parse_body(body);
    }
}

fn parse_body(body: &[u8]) -> ClientHello {
    let mut r = Reader::new(body);
    let mal = ClientHello::Malformed;
    if r.take(2).is_none() {
        return mal("version");
    }
    if r.take(32).is_none() {
        return mal("random");
    }
    match r.vec8() {
        Some(sid) if sid.len() <= 32 => {}
        _ => return mal("session_id"),
    }
    match r.vec16() {
        Some(cs) if !cs.is_empty() && cs.len() % 2 == 0 => {}
        _ => return mal("cipher_suites"),
    }
    match r.vec8() {
        Some(c) if !c.is_empty() => {}
        _ => return mal("compression"),
    }
    if r.is_empty() {
        return ClientHello::NoSni;
    }
    let Some(exts) = r.vec16() else {
        return mal("extensions");
    };
    if !r.is_empty() {
        return mal("trailing_bytes");
    }
    let mut e = Reader::new(exts);
    let mut seen: Vec<u16> = Vec::new();
    let mut sni: Option<String> = None;
    while !e.is_empty() {
        let (Some(ty), Some(data)) = (e.u16(), e.vec16()) else {
            return mal("extension");
        };
        if seen.contains(&ty) {
            return mal("duplicate_extension");
        }
        if seen.len() >= 256 {
            return mal("too_many_extensions");
        }
        seen.push(ty);
        if ty == 0 {
            match parse_server_name(data) {
                Ok(name) => sni = name,
                Err(code) => return mal(code),
            }
        }
    }
    match sni {
        Some(name) => ClientHello::Sni(name),
        None => ClientHello::NoSni,
    }
}

fn parse_server_name(data: &[u8]) -> Result<Option<String>, &'static str> {
    let mut r = Reader::new(data);
    let list = r.vec16().ok_or("server_name")?;
    if !r.is_empty() {
        return Err("server_name");
    }
    let mut l = Reader::new(list);
    let mut host: Option<String> = None;
    while !l.is_empty() {
        let ty = l.u8().ok_or("server_name")?;
        let name = l.vec16().ok_or("server_name")?;
        if ty != 0 {
            continue;
        }
        if host.is_some() {
            return Err("duplicate_server_name");
        }
        let s = std::str::from_utf8(name).map_err(|_| "server_name_not_ascii")?;
        let s = s.strip_suffix('.').unwrap_or(s);
        if s.is_empty()
            || s.len() > 253
            || !s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        {
            return Err("server_name_invalid");
        }
        host = Some(s.to_ascii_lowercase());
    }
    Ok(host)
}

#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __fuzz {
    /// Fuzz entry: inspect arbitrary bytes; must never panic.
    pub fn client_hello(data: &[u8]) {
        let _ = super::parse_client_hello(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Build a minimal ClientHello with the given extensions.
    pub(crate) fn hello(exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(0);
        body.extend([0, 2, 0x13, 0x01]);
        body.extend([1, 0]);
        let mut e = Vec::new();
        for (ty, d) in exts {
            e.extend(ty.to_be_bytes());
            e.extend((d.len() as u16).to_be_bytes());
            e.extend(d);
        }
        body.extend((e.len() as u16).to_be_bytes());
        body.extend(e);
        let mut hs = vec![1];
        hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend(body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend((hs.len() as u16).to_be_bytes());
        rec.extend(hs);
        rec
    }

    fn sni_ext(name: &str) -> (u16, Vec<u8>) {
        let mut entry = vec![0u8];
        entry.extend((name.len() as u16).to_be_bytes());
        entry.extend(name.as_bytes());
        let mut d = (entry.len() as u16).to_be_bytes().to_vec();
        d.extend(entry);
        (0, d)
    }

    #[test]
    fn extracts_sni() {
        let h = hello(&[(10, vec![0, 2, 0, 29]), sni_ext("API.Example.com.")]);
        assert_eq!(
            parse_client_hello(&h),
            ClientHello::Sni("api.example.com".into())
        );
        // every strict prefix is incomplete, never a wrong answer
        for n in 0..h.len() {
            assert_eq!(
                parse_client_hello(&h[..n]),
                ClientHello::Incomplete,
                "prefix {n}"
            );
        }
    }

    #[test]
    fn reassembles_across_records() {
        let h = hello(&[sni_ext("a.example")]);
        let hs = &h[5..];
        let (a, b) = hs.split_at(10);
        let mut two = vec![0x16, 3, 1];
        two.extend((a.len() as u16).to_be_bytes());
        two.extend(a);
        two.extend([0x16, 3, 1]);
        two.extend((b.len() as u16).to_be_bytes());
        two.extend(b);
        assert_eq!(
            parse_client_hello(&two),
            ClientHello::Sni("a.example".into())
        );
    }

    #[test]
    fn refusals() {
        assert_eq!(
            parse_client_hello(b"GET / HTTP/1.1\r\n"),
            ClientHello::NotTls
        );
        assert_eq!(parse_client_hello(&hello(&[])), ClientHello::NoSni);
        assert_eq!(
            parse_client_hello(&hello(&[sni_ext("a.example"), sni_ext("b.example")])),
            ClientHello::Malformed("duplicate_extension")
        );
        assert_eq!(
            parse_client_hello(&hello(&[sni_ext("a b")])),
            ClientHello::Malformed("server_name_invalid")
        );
        let mut bad = hello(&[sni_ext("a.example")]);
        bad[5] = 2; // ServerHello
        assert_eq!(
            parse_client_hello(&bad),
            ClientHello::Malformed("not_client_hello")
        );
    }
}
