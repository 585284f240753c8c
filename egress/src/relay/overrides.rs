//! Whether a relay request carries something the origin could read as a
//! method, URL or host override: in a header name, a query key, or a key of
//! a form, multipart or JSON body (Rails, Laravel and Symfony read
//! `_method` from the body of a `POST`).
//!
//! Names are compared the way the loosest common server stack reads them
//! ([`loose`]): CGI, WSGI and PHP map `-` and `_` in header names to one
//! environment variable, and PHP reads `.` and space in parameter names as
//! `_` and drops leading spaces, so `X_HTTP_Method_Override`, `.method` and
//! `+_method` are overrides too.
//!
//! Pure: no IO. Bodies are scanned where they lie, in the relay's blocks,
//! without a second copy.

use std::cell::Cell;
use std::collections::VecDeque;
use std::io;

use bytes::Bytes;

use super::{OVERRIDE_HEADERS, OVERRIDE_QUERY_KEYS};

/// A decoded key longer than this (after its leading whitespace) cannot be
/// an override key, so the scanner stops collecting it.
const MAX_KEY: usize = 64;

/// A name as the loosest common server stack reads it: ASCII whitespace
/// trimmed, ASCII lowercase, and `_`, `.` and space read as `-`.
pub(super) fn loose(name: &[u8]) -> Vec<u8> {
    name.trim_ascii()
        .iter()
        .map(|b| match b {
            b'_' | b'.' | b' ' => b'-',
            b => b.to_ascii_lowercase(),
        })
        .collect()
}

/// Whether a header name is an override header in any spelling.
pub(super) fn is_override_header(name: &str) -> bool {
    let n = loose(name.as_bytes());
    OVERRIDE_HEADERS.iter().any(|o| o.as_bytes() == n)
}

/// Whether a decoded parameter name is an override key in any spelling.
pub(super) fn is_override_key(key: &[u8]) -> bool {
    let k = loose(key);
    OVERRIDE_QUERY_KEYS.iter().any(|o| loose(o.as_bytes()) == k)
}

/// How an origin may parse a request body for parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BodyKind {
    Form,
    Multipart,
    Json,
}

/// How the most lenient common origin reads one media type: a form also
/// when the type is empty (Rack reads a `POST` without a type as a form),
/// any `multipart/*` as multipart (Rack parses `mixed` and `related` too),
/// any type containing `/json` or `+json` as JSON (Laravel's rule).
fn kind_of(media_type: &[u8]) -> Option<BodyKind> {
    let mime = media_type
        .split(|b| *b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii()
        .to_ascii_lowercase();
    let contains = |n: &[u8]| mime.windows(n.len()).any(|w| w == n);
    if mime.is_empty() || mime.starts_with(b"application/x-www-form-urlencoded") {
        Some(BodyKind::Form)
    } else if mime.starts_with(b"multipart/") {
        Some(BodyKind::Multipart)
    } else if contains(b"/json") || contains(b"+json") {
        Some(BodyKind::Json)
    } else {
        None
    }
}

/// Whether a buffered request body names an override key, read as every
/// `Content-Type` it carries could make an origin read it (each value, and
/// each `,`-separated type in it, as PHP splits them; none at all counts as
/// a form): any key of a form, any `name=` of a multipart body, any
/// top-level key of a JSON body. Other types are not parsed.
pub(super) fn body_has_override<'a>(
    content_types: impl Iterator<Item = &'a [u8]>,
    chunks: &VecDeque<Bytes>,
) -> bool {
    let mut kinds: Vec<BodyKind> = Vec::new();
    let mut typed = false;
    for value in content_types {
        typed = true;
        for media_type in value.split(|b| *b == b',') {
            if let Some(k) = kind_of(media_type)
                && !kinds.contains(&k)
            {
                kinds.push(k);
            }
        }
    }
    if !typed {
        kinds.push(BodyKind::Form);
    }
    let bytes = || chunks.iter().flat_map(|c| c.iter().copied());
    kinds.iter().any(|k| match k {
        BodyKind::Form => form_has_override(bytes()),
        BodyKind::Multipart => multipart_has_override(bytes()),
        BodyKind::Json => json_has_override(chunks),
    })
}

/// A key being collected: decoded bytes after the leading whitespace, up
/// to [`MAX_KEY`].
#[derive(Default)]
struct Key {
    bytes: Vec<u8>,
    overflow: bool,
}

impl Key {
    fn push(&mut self, b: u8) {
        if self.bytes.is_empty() && b.is_ascii_whitespace() {
            return;
        }
        if self.bytes.len() >= MAX_KEY {
            self.overflow = true;
        } else {
            self.bytes.push(b);
        }
    }

    /// Whether the collected key is an override key; resets it.
    fn take(&mut self) -> bool {
        let hit = !self.overflow && is_override_key(&self.bytes);
        self.bytes.clear();
        self.overflow = false;
        hit
    }
}

/// `a=1&b=2` (also `;`-separated): percent-decoded, `+` as space.
fn form_has_override(bytes: impl Iterator<Item = u8>) -> bool {
    let hex = |b: u8| {
        char::from(b)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    let mut key = Key::default();
    let mut in_key = true;
    // a `%` and maybe one hex digit waiting for the rest of the escape
    let mut escape: Option<Option<u8>> = None;
    for b in bytes {
        if !in_key {
            if b == b'&' || b == b';' {
                in_key = true;
            }
            continue;
        }
        match escape.take() {
            Some(None) => match hex(b) {
                Some(h) => {
                    escape = Some(Some(h));
                    continue;
                }
                None => key.push(b'%'),
            },
            Some(Some(h)) => match hex(b) {
                Some(l) => {
                    key.push(h << 4 | l);
                    continue;
                }
                None => {
                    key.push(b'%');
                    key.push(
                        b"0123456789abcdef"
                            .get(usize::from(h))
                            .copied()
                            .unwrap_or(b'0'),
                    );
                }
            },
            None => {}
        }
        match b {
            b'%' => escape = Some(None),
            b'+' => key.push(b' '),
            b'=' => {
                if key.take() {
                    return true;
                }
                in_key = false;
            }
            b'&' | b';' => {
                if key.take() {
                    return true;
                }
            }
            b => key.push(b),
        }
    }
    in_key && escape.is_none() && key.take()
}

/// Every `name=` parameter (quoted or a token, any case) in the body of a
/// multipart form; conservative: it is not anchored to part headers.
fn multipart_has_override(bytes: impl Iterator<Item = u8>) -> bool {
    const NEEDLE: &[u8; 5] = b"name=";
    let mut window = [0u8; 5];
    // None: looking for `name=`; Some(quoted): reading its value
    let mut value: Option<bool> = None;
    let mut started = false;
    let mut key = Key::default();
    for b in bytes {
        match value {
            None => {
                window.rotate_left(1);
                if let Some(last) = window.last_mut() {
                    *last = b.to_ascii_lowercase();
                }
                if &window == NEEDLE {
                    value = Some(false);
                    started = false;
                }
            }
            Some(quoted) => {
                let end = if quoted {
                    b == b'"'
                } else {
                    b == b';' || b == b'\r' || b == b'\n' || (started && b == b' ')
                };
                if !started && !quoted && b == b'"' {
                    value = Some(true);
                    started = true;
                    continue;
                }
                if end {
                    if key.take() {
                        return true;
                    }
                    value = None;
                    window = [0; 5];
                    continue;
                }
                if !b.is_ascii_whitespace() {
                    started = true;
                }
                key.push(b);
            }
        }
    }
    value.is_some() && key.take()
}

/// Reads the relay's blocks in order.
struct ChunkReader<'a> {
    rest: std::collections::vec_deque::Iter<'a, Bytes>,
    cur: &'a [u8],
}

impl io::Read for ChunkReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rest.next() {
                Some(next) => self.cur = next,
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.cur.len());
        let (now, later) = self.cur.split_at(n);
        if let Some(dst) = out.get_mut(..n) {
            dst.copy_from_slice(now);
        }
        self.cur = later;
        Ok(n)
    }
}

/// Whether a JSON body's top-level object has an override key (escapes
/// decoded); values are skipped without being kept. Not JSON, or not an
/// object: no. A key found before a syntax error still counts.
fn json_has_override(chunks: &VecDeque<Bytes>) -> bool {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};

    struct TopKeys<'a>(&'a Cell<bool>);

    impl<'de> Visitor<'de> for TopKeys<'_> {
        type Value = bool;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON value")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                if is_override_key(key.as_bytes()) {
                    // found: stop reading (what follows may not even parse)
                    self.0.set(true);
                    return Err(serde::de::Error::custom("override key"));
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(false)
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(false)
        }

        fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_str<E>(self, _: &str) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_unit<E>(self) -> Result<bool, E> {
            Ok(false)
        }
    }

    let reader = ChunkReader {
        rest: chunks.iter(),
        cur: &[],
    };
    let hit = Cell::new(false);
    let mut de = serde_json::Deserializer::from_reader(reader);
    let _ = de.deserialize_any(TopKeys(&hit));
    hit.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(parts: &[&str]) -> VecDeque<Bytes> {
        parts.iter().map(|p| Bytes::from(p.to_string())).collect()
    }

    #[test]
    fn keys_split_across_blocks_are_found() {
        let form = || [&b"application/x-www-form-urlencoded"[..]].into_iter();
        assert!(body_has_override(
            form(),
            &blocks(&["a=1&_me", "thod=DELETE"])
        ));
        assert!(body_has_override(
            form(),
            &blocks(&["a=1&%5", "Fmethod=DELETE"])
        ));
        assert!(body_has_override(form(), &blocks(&["_method"])));
        assert!(!body_has_override(form(), &blocks(&["a=_method&b=%", "5"])));
        let json = || [&b"application/json"[..]].into_iter();
        assert!(body_has_override(
            json(),
            &blocks(&["{\"a\":[1,{\"_method\":1}],\"_me", "thod\":2}"])
        ));
        assert!(!body_has_override(
            json(),
            &blocks(&["{\"a\":{\"_method\":1}}"])
        ));
        assert!(!body_has_override(json(), &blocks(&["not json _method"])));
        let mp = || [&b"multipart/form-data; boundary=b"[..]].into_iter();
        assert!(body_has_override(
            mp(),
            &blocks(&[
                "--b\r\nContent-Disposition: form-data; na",
                "me=\"_method\"\r\n"
            ])
        ));
        assert!(!body_has_override(
            mp(),
            &blocks(&[
                "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n_method\r\n--b--"
            ])
        ));
        assert!(body_has_override(
            std::iter::empty(),
            &blocks(&["_method=DELETE"])
        ));
        let text = || [&b"text/plain"[..]].into_iter();
        assert!(!body_has_override(text(), &blocks(&["_method=DELETE"])));
    }

    #[test]
    fn loose_spellings() {
        for h in [
            "X_HTTP_Method_Override",
            "x.http.method.override",
            "x-http-method-override",
        ] {
            assert!(is_override_header(h), "{h}");
        }
        assert!(!is_override_header("x-http-method-overrides"));
        for k in ["_method", ".method", " _method", "-METHOD", "x.http.method"] {
            assert!(is_override_key(k.as_bytes()), "{k}");
        }
        assert!(!is_override_key(b"method"));
    }
}
