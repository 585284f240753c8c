//! The line format: writing a sealed record and slicing one apart again
//! without a generic JSON parse.
//!
//! A record is one line of canonical JSON with the fields in this fixed
//! order (see `docs/journal.md` for the normative description):
//!
//! ```text
//! {"v":1,"journal":"<32 hex>","seq":S,"epoch":E,"time":T,"kind":"K","session":"…","flags":[…],"body":B,"mac":"<64 hex>"}\n
//! ```
//!
//! The MAC input is `prev_mac ‖ line[..len - 74]`: the previous record's raw
//! 32-byte MAC (32 zero bytes before seq 0) followed by the line bytes up to,
//! not including, `,"mac":"`.

use std::fmt;

use crate::key::{KEY_LEN, MacState};
use crate::record::{Flags, push_json_string};

/// The bytes between the canonical record and the hex MAC.
pub(crate) const MAC_PREFIX: &[u8] = br#","mac":""#;
/// The bytes after the hex MAC.
pub(crate) const MAC_SUFFIX: &[u8] = br#""}"#;
/// Length of `,"mac":"<64 hex>"}`.
pub(crate) const MAC_TRAILER_LEN: usize = MAC_PREFIX.len() + 2 * KEY_LEN + MAC_SUFFIX.len();
/// The start of every line.
const LINE_START: &[u8] = br#"{"v":1,"journal":""#;

/// A raw MAC.
pub(crate) type MacBytes = [u8; KEY_LEN];

/// The random 128-bit id of one journal, written into every record so that
/// records of two journals sealed with the same key cannot be spliced.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JournalId([u8; 16]);

impl JournalId {
    /// A fresh random id.
    ///
    /// # Errors
    /// Fails when the operating system has no randomness to give.
    pub fn generate() -> Result<Self, crate::KeyError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|err| crate::KeyError::Random(err.to_string()))?;
        Ok(Self(bytes))
    }

    /// The id with these bytes.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// The 32 lowercase hex digits written into records.
    #[must_use]
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 32 lowercase hex digits.
    #[must_use]
    pub fn from_hex(text: &str) -> Option<Self> {
        parse_lower_hex::<16>(text.as_bytes()).map(Self)
    }
}

impl fmt::Debug for JournalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JournalId({})", self.to_hex())
    }
}

impl fmt::Display for JournalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// The fields of a record about to be sealed.
pub(crate) struct Fields<'a> {
    pub(crate) journal: &'a [u8; 32],
    pub(crate) seq: u64,
    pub(crate) epoch: u64,
    pub(crate) time: u64,
    pub(crate) kind: &'a str,
    pub(crate) session: &'a str,
    pub(crate) flags: Flags,
    pub(crate) body: &'a str,
}

/// Appends the sealed line for `fields` to `out` and returns its MAC.
///
/// `kind` must already be valid and `session` at most 256 bytes; the body
/// must be canonical JSON.
pub(crate) fn encode_line(
    out: &mut Vec<u8>,
    fields: &Fields<'_>,
    prev_mac: &MacBytes,
    mac_key: &MacState,
) -> MacBytes {
    let start = out.len();
    out.extend_from_slice(LINE_START);
    out.extend_from_slice(fields.journal);
    out.extend_from_slice(br#"","seq":"#);
    push_u64(out, fields.seq);
    out.extend_from_slice(br#","epoch":"#);
    push_u64(out, fields.epoch);
    out.extend_from_slice(br#","time":"#);
    push_u64(out, fields.time);
    out.extend_from_slice(br#","kind":""#);
    out.extend_from_slice(fields.kind.as_bytes());
    out.extend_from_slice(br#"","session":"#);
    push_session(out, fields.session);
    out.extend_from_slice(br#","flags":["#);
    for (idx, name) in fields.flags.names().enumerate() {
        if idx > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(name.as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(br#"],"body":"#);
    out.extend_from_slice(fields.body.as_bytes());
    let mac = compute_mac(mac_key, prev_mac, out.get(start..).unwrap_or_default());
    out.extend_from_slice(MAC_PREFIX);
    let mut hex_buf = [0u8; 2 * KEY_LEN];
    // INVARIANT: the buffer is exactly twice the MAC length.
    if hex::encode_to_slice(mac, &mut hex_buf).is_err() {
        hex_buf = [b'0'; 2 * KEY_LEN];
    }
    out.extend_from_slice(&hex_buf);
    out.extend_from_slice(MAC_SUFFIX);
    out.push(b'\n');
    mac
}

/// `HMAC(key, prev_mac ‖ canonical)`.
pub(crate) fn compute_mac(key: &MacState, prev_mac: &MacBytes, canonical: &[u8]) -> MacBytes {
    key.mac(prev_mac, canonical)
}

/// A line sliced into the parts the verifier needs. Nothing here is
/// authenticated until the MAC over `canonical` has been checked.
#[derive(Debug)]
pub(crate) struct Parsed<'a> {
    pub(crate) journal: &'a [u8],
    pub(crate) seq: u64,
    pub(crate) epoch: u64,
    pub(crate) time: u64,
    pub(crate) kind: &'a [u8],
    /// The session string's contents as written (JSON-escaped).
    pub(crate) session: &'a [u8],
    pub(crate) flags: Flags,
    pub(crate) body: &'a [u8],
    pub(crate) canonical: &'a [u8],
    pub(crate) mac: MacBytes,
}

/// Slices a line (without its `\n`). `Err` names the first thing that is
/// not in canonical form.
pub(crate) fn parse_line(line: &[u8]) -> Result<Parsed<'_>, &'static str> {
    let split = line
        .len()
        .checked_sub(MAC_TRAILER_LEN)
        .ok_or("line too short for a record")?;
    let (canonical, trailer) = line.split_at_checked(split).ok_or("line too short")?;
    let hex_part = trailer
        .strip_prefix(MAC_PREFIX)
        .and_then(|t| t.strip_suffix(MAC_SUFFIX))
        .ok_or("the line does not end with the `mac` field")?;
    let mac =
        parse_lower_hex::<KEY_LEN>(hex_part).ok_or("the mac is not 64 lowercase hex digits")?;

    let mut cur = Cursor { rest: canonical };
    cur.literal(
        LINE_START,
        "the line does not start with `{\"v\":1,\"journal\":\"`",
    )?;
    let journal = cur.take(32, "the journal id is cut short")?;
    if parse_lower_hex::<16>(journal).is_none() {
        return Err("the journal id is not 32 lowercase hex digits");
    }
    cur.literal(br#"","seq":"#, "expected `\"seq\"` after the journal id")?;
    let seq = cur.number("seq")?;
    cur.literal(br#","epoch":"#, "expected `\"epoch\"` after `seq`")?;
    let epoch = cur.number("epoch")?;
    cur.literal(br#","time":"#, "expected `\"time\"` after `epoch`")?;
    let time = cur.number("time")?;
    cur.literal(br#","kind":""#, "expected `\"kind\"` after `time`")?;
    let kind = cur.until_quote("kind")?;
    if !crate::record::is_valid_kind(kind) {
        return Err("the kind is not 1 to 64 of a-z 0-9 _ . : -");
    }
    cur.literal(br#"","session":""#, "expected `\"session\"` after `kind`")?;
    let session = cur.json_string_body()?;
    cur.literal(br#","flags":["#, "expected `\"flags\"` after `session`")?;
    let mut flags = Flags::NONE;
    if !cur.rest.starts_with(b"]") {
        loop {
            cur.literal(b"\"", "a flag must be a string")?;
            let name = cur.until_quote("flag")?;
            let Some(flag) = std::str::from_utf8(name).ok().and_then(Flags::from_name) else {
                return Err("unknown flag");
            };
            flags = flags | flag;
            cur.literal(b"\"", "unterminated flag")?;
            if cur.rest.starts_with(b",") {
                cur.literal(b",", "")?;
            } else {
                break;
            }
        }
    }
    cur.literal(br#"],"body":"#, "expected `\"body\"` after `flags`")?;
    let body = cur.rest;
    if body.is_empty() {
        return Err("the body is empty");
    }
    Ok(Parsed {
        journal,
        seq,
        epoch,
        time,
        kind,
        session,
        flags,
        body,
        canonical,
        mac,
    })
}

/// Reads the `seq` of a line that may not be a valid record, for
/// classifying failures; `None` when it has none.
pub(crate) fn peek_seq(line: &[u8]) -> Option<u64> {
    let mut cur = Cursor {
        rest: line.get(LINE_START.len() + 32..)?,
    };
    cur.literal(br#"","seq":"#, "").ok()?;
    cur.number("seq").ok()
}

/// Parses exactly `2 * N` lowercase hex digits.
pub(crate) fn parse_lower_hex<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

/// Appends `n` in decimal.
pub(crate) fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut idx = digits.len();
    loop {
        idx -= 1;
        if let Some(slot) = digits.get_mut(idx) {
            // INVARIANT: `n % 10` is below 10, so this is an ASCII digit.
            *slot = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 || idx == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(idx..).unwrap_or_default());
}

fn push_session(out: &mut Vec<u8>, session: &str) {
    let mut text = String::with_capacity(session.len() + 2);
    if push_json_string(session, &mut text).is_err() {
        text = "\"\"".to_owned();
    }
    out.extend_from_slice(text.as_bytes());
}

/// A forward-only reader over canonical bytes.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn literal(&mut self, lit: &[u8], err: &'static str) -> Result<(), &'static str> {
        self.rest = self.rest.strip_prefix(lit).ok_or(err)?;
        Ok(())
    }

    fn take(&mut self, n: usize, err: &'static str) -> Result<&'a [u8], &'static str> {
        let (head, tail) = self.rest.split_at_checked(n).ok_or(err)?;
        self.rest = tail;
        Ok(head)
    }

    /// A canonical unsigned decimal: no sign, no leading zero, fits in u64.
    fn number(&mut self, what: &'static str) -> Result<u64, &'static str> {
        let len = self
            .rest
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(self.rest.len());
        let digits = self.take(len, what)?;
        match digits {
            [] => Err(number_error(what)),
            [b'0', _, ..] => Err(number_error(what)),
            _ => {
                let mut n: u64 = 0;
                for &d in digits {
                    n = n
                        .checked_mul(10)
                        .and_then(|n| n.checked_add(u64::from(d - b'0')))
                        .ok_or(number_error(what))?;
                }
                Ok(n)
            }
        }
    }

    /// Bytes up to the next `"` (no escapes allowed), which stays unread.
    fn until_quote(&mut self, what: &'static str) -> Result<&'a [u8], &'static str> {
        let len = memchr::memchr(b'"', self.rest).ok_or(match what {
            "kind" => "unterminated kind",
            _ => "unterminated string",
        })?;
        self.take(len, what)
    }

    /// The contents of a JSON string whose opening quote was read, in the
    /// canonical form the writer produces (serde_json's escapes: `\"`, `\\`,
    /// `\b`, `\f`, `\n`, `\r`, `\t` and `\u00xx` for other control
    /// characters; UTF-8 otherwise), so that every line that parses decodes;
    /// consumes the closing quote.
    fn json_string_body(&mut self) -> Result<&'a [u8], &'static str> {
        let mut idx = 0;
        loop {
            match self.rest.get(idx) {
                None => return Err("unterminated session string"),
                Some(b'\\') => {
                    let escape = self.rest.get(idx + 1..).unwrap_or_default();
                    idx += match escape {
                        [b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't', ..] => 2,
                        [b'u', b'0', b'0', b'0' | b'1', b, ..]
                            if b.is_ascii_digit() || (b'a'..=b'f').contains(b) =>
                        {
                            6
                        }
                        _ => return Err("a non-canonical escape in the session"),
                    };
                }
                Some(b'"') => break,
                Some(b) if *b < 0x20 => return Err("raw control character in the session"),
                Some(_) => idx += 1,
            }
        }
        let body = self.take(idx, "unterminated session string")?;
        if std::str::from_utf8(body).is_err() {
            return Err("the session is not UTF-8");
        }
        self.literal(b"\"", "unterminated session string")?;
        Ok(body)
    }
}

fn number_error(what: &'static str) -> &'static str {
    match what {
        "seq" => "`seq` is not a canonical unsigned number",
        "epoch" => "`epoch` is not a canonical unsigned number",
        _ => "`time` is not a canonical unsigned number",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JournalKey;

    fn sample(seq: u64, session: &str) -> (Vec<u8>, MacBytes) {
        let key = JournalKey::from_bytes([3u8; KEY_LEN], 0);
        let id = [b'a'; 32];
        let mut out = Vec::new();
        let mac = encode_line(
            &mut out,
            &Fields {
                journal: &id,
                seq,
                epoch: 0,
                time: 1_700_000_000_000,
                kind: "outward_action",
                session,
                flags: Flags::IRREVERSIBLE | Flags::TAINTED,
                body: r#"{"a":1}"#,
            },
            &[0u8; KEY_LEN],
            &key.mac_state(),
        );
        (out, mac)
    }

    #[test]
    fn encoded_line_is_json_and_parses_back() {
        let (line, mac) = sample(42, "s\"1\n");
        assert_eq!(line.last(), Some(&b'\n'));
        let text = std::str::from_utf8(&line).unwrap();
        let value: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(value["seq"], 42);
        assert_eq!(value["session"], "s\"1\n");
        assert_eq!(
            value["flags"],
            serde_json::json!(["irreversible", "tainted"])
        );
        let parsed = parse_line(line.strip_suffix(b"\n").unwrap()).unwrap();
        assert_eq!(parsed.seq, 42);
        assert_eq!(parsed.time, 1_700_000_000_000);
        assert_eq!(parsed.kind, b"outward_action");
        assert_eq!(parsed.body, br#"{"a":1}"#);
        assert_eq!(parsed.mac, mac);
    }

    #[test]
    fn non_canonical_forms_are_rejected() {
        let (line, _) = sample(7, "s");
        let line = line.strip_suffix(b"\n").unwrap().to_vec();
        assert!(parse_line(&line).is_ok());
        let text = String::from_utf8(line).unwrap();
        let cases = [
            text.replace(r#""seq":7"#, r#""seq":07"#),
            text.replace(r#""seq":7"#, r#""seq": 7"#),
            text.replace(r#""seq":7"#, r#""seq":-7"#),
            text.replace(r#""v":1"#, r#""v":2"#),
            text.replace(r#","mac":""#, r#", "mac":""#),
            text.replacen(
                |c: char| c.is_ascii_hexdigit() && c.is_ascii_lowercase(),
                "A",
                1,
            ),
            text[..text.len() - 1].to_owned(),
            text.replace(r#""flags":["irreversible""#, r#""flags":["irreversibl""#),
        ];
        for case in cases {
            assert!(parse_line(case.as_bytes()).is_err(), "{case}");
        }
    }

    /// Line 2 of `tests/data/golden.jsonl`, written by an independent
    /// implementation: the encoder reproduces it byte for byte.
    #[test]
    fn encoder_matches_the_golden_vector() {
        let key = JournalKey::from_bytes([0x42; KEY_LEN], 0);
        let mut prev = [0u8; KEY_LEN];
        hex::decode_to_slice(
            "a4000cc1a801b77a03d0cec54c65cb7c2100b068e464b025e9a61cfcf739e637",
            &mut prev,
        )
        .unwrap();
        let mut out = Vec::new();
        encode_line(
            &mut out,
            &Fields {
                journal: b"00112233445566778899aabbccddeeff",
                seq: 1,
                epoch: 0,
                time: 1_700_000_000_005,
                kind: "outward_action",
                session: "s-1",
                flags: Flags::IRREVERSIBLE,
                body: r#"{"target":"git push"}"#,
            },
            &prev,
            &key.mac_state(),
        );
        let golden = include_str!("../tests/data/golden.jsonl");
        let expected = golden.lines().nth(1).unwrap();
        assert_eq!(std::str::from_utf8(&out).unwrap(), format!("{expected}\n"));
    }

    #[test]
    fn numbers_are_written_in_plain_decimal() {
        for n in [0, 9, 10, 12345, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }
}
