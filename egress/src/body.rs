//! Where the body of a plain-HTTP request ends, so the proxy forwards the
//! request it decided and nothing after it.
//!
//! Pure: no IO. A [`BodyFramer`] is fed the bytes the client sends after a
//! parsed request head and says how many of them belong to the body
//! (`Content-Length` bytes, or a strictly checked chunked body up to and
//! including its trailer section). Whatever follows (a pipelined second
//! request) is never forwarded. The chunked grammar is the strict one of
//! RFC 9112 section 7.1 without chunk extensions: hex sizes of at most 16
//! digits, CRLF line ends only, trailer fields with a token name, all
//! bounded.

use crate::head::RequestHead;

/// Longest chunk-size line, bytes (16 hex digits and CRLF).
const MAX_SIZE_DIGITS: u8 = 16;
/// Largest trailer section, bytes.
pub const MAX_TRAILER_BYTES: usize = 8 * 1024;

/// How a request body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// Exactly this many bytes (no framing header means no body: 0).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

impl Framing {
    /// The framing of a head [`crate::head::parse_head`] accepted (which
    /// refuses both headers together, repeated ones, invalid lengths and
    /// codings other than `chunked`).
    pub fn of(head: &RequestHead) -> Self {
        if head.header("transfer-encoding").is_some() {
            return Self::Chunked;
        }
        let length = head
            .header("content-length")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        Self::Length(length)
    }
}

/// Why a chunked body was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed chunked body: {0}")]
pub struct BodyError(pub &'static str);

impl BodyError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        "bad_chunked_body"
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading `Length` bytes.
    Length(u64),
    /// Reading the hex digits of a chunk size.
    Size { digits: u8, value: u64 },
    /// After the CR of a chunk-size line.
    SizeLf { value: u64 },
    /// Inside chunk data.
    Data(u64),
    /// Expecting the CR after chunk data.
    DataCr,
    /// Expecting the LF after chunk data.
    DataLf,
    /// Reading a trailer line (or the final empty line).
    Trailer { len: usize, in_name: bool },
    /// After the CR of a trailer line; `empty` ends the body.
    TrailerLf { empty: bool },
    /// The body is complete.
    Done,
}

/// Tracks where a request body ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BodyFramer {
    state: State,
    trailer_bytes: usize,
}

impl BodyFramer {
    /// A framer at the start of a body.
    pub fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Size {
                digits: 0,
                value: 0,
            },
        };
        Self {
            state,
            trailer_bytes: 0,
        }
    }

    /// Whether the whole body has been seen.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// An upper bound on the bytes that still belong to the body, when it
    /// is known (`Content-Length` framing, or inside chunk data).
    pub fn remaining_hint(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// Feeds the next bytes from the client; returns how many of them, from
    /// the start, belong to the body. Once [`Self::is_done`], the rest of
    /// `data` (and everything after) does not.
    pub fn feed(&mut self, data: &[u8]) -> Result<usize, BodyError> {
        let mut i = 0;
        while i < data.len() {
            match self.state {
                State::Done => break,
                State::Length(left) | State::Data(left) => {
                    let avail = data.len() - i;
                    let take = usize::try_from(left).map_or(avail, |l| l.min(avail));
                    i += take;
                    let left = left - take as u64;
                    self.state = match (self.state, left) {
                        (State::Length(_), 0) => State::Done,
                        (State::Length(_), n) => State::Length(n),
                        (_, 0) => State::DataCr,
                        (_, n) => State::Data(n),
                    };
                }
                state => {
                    let b = data.get(i).copied().unwrap_or_default();
                    self.state = self.step(state, b)?;
                    i += 1;
                }
            }
        }
        Ok(i)
    }

    /// One byte of a chunk-size line, chunk-data end or trailer section.
    fn step(&mut self, state: State, b: u8) -> Result<State, BodyError> {
        Ok(match state {
            State::Size { digits, value } => match (b, hex(b)) {
                (_, Some(d)) => {
                    if digits >= MAX_SIZE_DIGITS {
                        return Err(BodyError("chunk size too long"));
                    }
                    State::Size {
                        digits: digits + 1,
                        value: (value << 4) | u64::from(d),
                    }
                }
                (b'\r', None) if digits > 0 => State::SizeLf { value },
                (b';', None) if digits > 0 => return Err(BodyError("chunk extension")),
                _ => return Err(BodyError("invalid chunk size")),
            },
            State::SizeLf { value } => match b {
                b'\n' if value == 0 => State::Trailer {
                    len: 0,
                    in_name: true,
                },
                b'\n' => State::Data(value),
                _ => return Err(BodyError("bare CR in chunk size line")),
            },
            State::DataCr => match b {
                b'\r' => State::DataLf,
                _ => return Err(BodyError("chunk data longer than its size")),
            },
            State::DataLf => match b {
                b'\n' => State::Size {
                    digits: 0,
                    value: 0,
                },
                _ => return Err(BodyError("bare CR after chunk data")),
            },
            State::Trailer { len, in_name } => {
                self.trailer_bytes += 1;
                if self.trailer_bytes > MAX_TRAILER_BYTES {
                    return Err(BodyError("trailer section too large"));
                }
                match b {
                    b'\r' if len == 0 => State::TrailerLf { empty: true },
                    b'\r' if !in_name => State::TrailerLf { empty: false },
                    b':' if in_name && len > 0 => State::Trailer {
                        len: len + 1,
                        in_name: false,
                    },
                    _ if in_name && is_tchar(b) => State::Trailer {
                        len: len + 1,
                        in_name,
                    },
                    _ if !in_name && (b == b'\t' || (b >= 0x20 && b != 0x7f)) => State::Trailer {
                        len: len + 1,
                        in_name,
                    },
                    _ => return Err(BodyError("malformed trailer field")),
                }
            }
            State::TrailerLf { empty } => match (b, empty) {
                (b'\n', true) => State::Done,
                (b'\n', false) => State::Trailer {
                    len: 0,
                    in_name: true,
                },
                _ => return Err(BodyError("bare CR in trailer section")),
            },
            State::Length(_) | State::Data(_) | State::Done => state,
        })
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __fuzz {
    use super::{BodyFramer, Framing};

    /// Fuzz entry: frame arbitrary bytes as a chunked body, whole and in
    /// two pieces; must never panic and both must agree.
    pub fn chunked_body(data: &[u8]) {
        let mut whole = BodyFramer::new(Framing::Chunked);
        let all = whole.feed(data);
        if let Ok(n) = all {
            assert!(n <= data.len());
            assert!(n == data.len() || whole.is_done());
        }
        let cut = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
        let (a, b) = data.split_at(cut);
        let mut split = BodyFramer::new(Framing::Chunked);
        let pieces = split.feed(a).and_then(|n| {
            if split.is_done() {
                Ok(n)
            } else {
                split.feed(b).map(|m| n + m)
            }
        });
        assert_eq!(all, pieces);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(data: &[u8]) -> (Result<usize, BodyError>, bool) {
        let mut f = BodyFramer::new(Framing::Chunked);
        let r = f.feed(data);
        (r, f.is_done())
    }

    #[test]
    fn a_length_body_ends_after_its_bytes() {
        let mut f = BodyFramer::new(Framing::Length(5));
        assert_eq!(f.remaining_hint(), Some(5));
        assert_eq!(f.feed(b"hel"), Ok(3));
        assert!(!f.is_done());
        assert_eq!(f.feed(b"loGET / HTTP/1.1\r\n"), Ok(2));
        assert!(f.is_done());
        assert_eq!(f.feed(b"more"), Ok(0));
        let mut none = BodyFramer::new(Framing::Length(0));
        assert!(none.is_done());
        assert_eq!(none.feed(b"GET "), Ok(0));
    }

    #[test]
    fn a_chunked_body_ends_after_its_last_chunk_and_trailers() {
        let body = b"5\r\nhello\r\nA\r\n0123456789\r\n0\r\n\r\n";
        let mut data = body.to_vec();
        data.extend_from_slice(b"GET http://x/ HTTP/1.1\r\n");
        assert_eq!(chunked(&data), (Ok(body.len()), true));
        let trailers = b"1\r\nx\r\n0\r\nX-Sum: abc\r\nY: \r\n\r\n";
        let mut data = trailers.to_vec();
        data.extend_from_slice(b"0\r\n\r\n");
        assert_eq!(chunked(&data), (Ok(trailers.len()), true));
        // byte by byte gives the same end
        let mut f = BodyFramer::new(Framing::Chunked);
        let mut taken = 0;
        for b in &data {
            taken += f.feed(std::slice::from_ref(b)).unwrap();
        }
        assert_eq!((taken, f.is_done()), (trailers.len(), true));
        // incomplete: everything belongs to the body so far
        assert_eq!(chunked(b"5\r\nhel"), (Ok(6), false));
    }

    #[test]
    fn malformed_chunked_bodies_are_refused() {
        for bad in [
            &b"5\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhelloX\r\n0\r\n\r\n",
            b"5;ext=1\r\nhello\r\n0\r\n\r\n",
            b" 5\r\nhello\r\n0\r\n\r\n",
            b"\r\n",
            b"-1\r\n",
            b"11111111111111111\r\n",
            b"0\r\nX-Bad header\r\n\r\n",
            b"0\r\n: v\r\n\r\n",
            b"0\r\nX: a\x01\r\n\r\n",
            b"0\r\n\n",
            b"5\r\nhello\r\r",
        ] {
            assert!(
                chunked(bad).0.is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let big = format!("0\r\nX: {}\r\n\r\n", "a".repeat(MAX_TRAILER_BYTES));
        assert_eq!(
            chunked(big.as_bytes()).0,
            Err(BodyError("trailer section too large"))
        );
        // positive control: the largest size parses (and waits for data)
        assert_eq!(chunked(b"ffffffffffffffff\r\nab"), (Ok(20), false));
    }

    #[test]
    fn fuzz_entry_accepts_anything() {
        __fuzz::chunked_body(b"");
        __fuzz::chunked_body(b"\x035\r\nhello\r\n0\r\n\r\nrest");
        __fuzz::chunked_body(&[0xff; 64]);
        __fuzz::chunked_body(b"\x010\r\n\r\n");
    }
}
