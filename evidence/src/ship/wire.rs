//! The wire format of shipped evidence: RFC 5424 messages carrying one
//! journal record (or one anchor) each, RFC 6587 octet-counted framing, RELP
//! frames, and the inverse parser for what a collector wrote to a file.
//!
//! Pure: no IO, no clock; every function takes bytes and returns bytes or a
//! value, never panics and allocates at most in proportion to its input
//! (fuzzed by `fuzz/fuzz_targets/ship_parse.rs`).

use std::fmt::Write as _;

use crate::format::{self, JournalId};
use crate::verify::{Anchor, MAX_LINE_LEN};

/// The RFC 5424 APP-NAME of every shipped message.
pub const APP_NAME: &str = "palisade";
/// The structured-data id (`name@<private enterprise number>`).
pub const SD_ID: &str = "palisade@32473";
/// The `kind` structured-data value of a shipped anchor.
pub const ANCHOR_KIND: &str = "anchor";
/// Longest message accepted by [`parse_message`] and written by the
/// encoders: a journal line of [`MAX_LINE_LEN`] plus the header.
pub const MAX_MESSAGE_LEN: usize = MAX_LINE_LEN + 1024;
/// `<PRI>`: facility 13 (log audit), severity 6 (informational).
const PRI: &str = "<110>";
/// The RFC 5424 MSGID of records and anchors.
const MSGID_RECORD: &str = "record";
const MSGID_ANCHOR: &str = "anchor";

/// The RFC 5424 HOSTNAME of shipped messages: 1 to 255 printable US-ASCII
/// characters, or the NILVALUE `-`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hostname(String);

impl Hostname {
    /// `name` if it is a valid RFC 5424 HOSTNAME.
    #[must_use]
    pub fn new(name: &str) -> Option<Self> {
        let ok =
            !name.is_empty() && name.len() <= 255 && name.bytes().all(|b| (33..=126).contains(&b));
        ok.then(|| Self(name.to_owned()))
    }

    /// The NILVALUE `-` (no hostname).
    #[must_use]
    pub fn nil() -> Self {
        Self("-".to_owned())
    }

    /// The hostname as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Why a record line cannot be shipped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The line is not a record in canonical form.
    #[error("not a journal record: {0}")]
    NotARecord(&'static str),
    /// The line is longer than a journal line may be.
    #[error("the record line is longer than {MAX_LINE_LEN} bytes")]
    TooLong,
}

/// Appends `value` to `out` escaped as an RFC 5424 PARAM-VALUE (§6.3.3:
/// `"`, `\` and `]` are preceded by `\`).
pub fn escape_param_value(value: &str, out: &mut String) {
    for ch in value.chars() {
        if matches!(ch, '"' | '\\' | ']') {
            out.push('\\');
        }
        out.push(ch);
    }
}

/// The RFC 3339 TIMESTAMP of a record time (Unix milliseconds), or the
/// NILVALUE when it cannot be written (a year past 9999).
fn timestamp(millis: u64) -> String {
    let nanos = i128::from(millis).saturating_mul(1_000_000);
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .filter(|t| t.year() <= 9999)
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| "-".to_owned())
}

fn header(out: &mut Vec<u8>, ts: &str, host: &Hostname, msgid: &str, sd: &[(&str, &str)]) {
    let mut text = String::with_capacity(160);
    // Writing to a String cannot fail.
    let _ = write!(
        text,
        "{PRI}1 {ts} {} {APP_NAME} - {msgid} [{SD_ID}",
        host.as_str()
    );
    for (name, value) in sd {
        text.push(' ');
        text.push_str(name);
        text.push_str("=\"");
        escape_param_value(value, &mut text);
        text.push('"');
    }
    text.push_str("] ");
    out.extend_from_slice(text.as_bytes());
}

/// The RFC 5424 message carrying one sealed journal record: `line` is the
/// record's exact line (without its `\n`), which becomes the MSG byte for
/// byte; the structured data `[palisade@32473 journal="…" seq="…" kind="…"]`
/// repeats the record's own fields for the pipeline's filters. Nothing is
/// authenticated here: the collector side verifies the MAC chain.
///
/// # Errors
/// When `line` is not a record in canonical form or is too long.
pub fn encode_record(line: &[u8], host: &Hostname) -> Result<Vec<u8>, WireError> {
    if line.len() > MAX_LINE_LEN {
        return Err(WireError::TooLong);
    }
    let rec = format::parse_line(line).map_err(WireError::NotARecord)?;
    encode_parsed(line, &rec, host)
}

/// [`encode_record`] of a line the caller already parsed (the shipper
/// parses each line once).
pub(crate) fn encode_parsed(
    line: &[u8],
    rec: &format::Parsed<'_>,
    host: &Hostname,
) -> Result<Vec<u8>, WireError> {
    if line.len() > MAX_LINE_LEN {
        return Err(WireError::TooLong);
    }
    let journal = std::str::from_utf8(rec.journal).map_err(|_| WireError::NotARecord("id"))?;
    let kind = std::str::from_utf8(rec.kind).map_err(|_| WireError::NotARecord("kind"))?;
    let seq = rec.seq.to_string();
    let mut out = Vec::with_capacity(line.len() + 200);
    header(
        &mut out,
        &timestamp(rec.time),
        host,
        MSGID_RECORD,
        &[("journal", journal), ("seq", &seq), ("kind", kind)],
    );
    out.extend_from_slice(line);
    Ok(out)
}

/// The RFC 5424 message carrying an anchor: MSG is [`Anchor::to_json`],
/// structured data kind `anchor` with the anchor's journal and seq.
#[must_use]
pub fn encode_anchor(anchor: &Anchor, host: &Hostname) -> Vec<u8> {
    let journal = anchor.journal.to_hex();
    let seq = anchor.seq.to_string();
    let json = anchor.to_json();
    let mut out = Vec::with_capacity(json.len() + 200);
    header(
        &mut out,
        "-",
        host,
        MSGID_ANCHOR,
        &[("journal", &journal), ("seq", &seq), ("kind", ANCHOR_KIND)],
    );
    out.extend_from_slice(json.as_bytes());
    out
}

/// Appends `msg` to `out` in RFC 6587 §3.4.1 octet-counted framing:
/// `MSG-LEN SP SYSLOG-MSG`.
pub fn octet_frame(msg: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(msg.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(msg);
}

/// Appends the RELP frame `TXNR SP COMMAND SP DATALEN [SP DATA] LF` to
/// `out` (librelp's protocol; `DATA` is omitted when empty).
pub fn relp_frame(txnr: u32, command: &str, data: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("{txnr} {command} {}", data.len()).as_bytes());
    if !data.is_empty() {
        out.push(b' ');
        out.extend_from_slice(data);
    }
    out.push(b'\n');
}

/// What one shipped message carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shipped<'a> {
    /// A journal record: its exact line (without `\n`), not yet verified.
    Record {
        /// The journal the line claims.
        journal: JournalId,
        /// The seq the line claims.
        seq: u64,
        /// The line's bytes.
        line: &'a [u8],
    },
    /// An anchor.
    Anchor(Anchor),
}

/// Why a line of a collector's file is not a shipped message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotShipped {
    /// Not an RFC 5424 message, or one with malformed structured data.
    #[error("not an RFC 5424 message: {0}")]
    NotSyslog(&'static str),
    /// An RFC 5424 message of another application (or without palisade's
    /// structured data): someone else's line, not an error.
    #[error("a message of another application")]
    Foreign,
    /// palisade's message whose MSG is not a record or anchor, or whose
    /// structured data contradicts its MSG.
    #[error("a palisade message that does not carry what it claims: {0}")]
    Inconsistent(&'static str),
    /// Longer than [`MAX_MESSAGE_LEN`].
    #[error("longer than {MAX_MESSAGE_LEN} bytes")]
    TooLong,
}

struct Cur<'a> {
    rest: &'a [u8],
}

impl<'a> Cur<'a> {
    fn token(&mut self, what: &'static str) -> Result<&'a [u8], NotShipped> {
        let end = memchr::memchr(b' ', self.rest).ok_or(NotShipped::NotSyslog(what))?;
        let (tok, rest) = self.rest.split_at(end);
        self.rest = rest.get(1..).unwrap_or_default();
        if tok.is_empty() {
            return Err(NotShipped::NotSyslog(what));
        }
        Ok(tok)
    }
}

/// One SD-ELEMENT: its id and its (unescaped) params.
type SdElement<'a> = (&'a [u8], Vec<(&'a [u8], Vec<u8>)>);

/// Parses `[id name="value" …]` at the start of `rest`; returns the element
/// and the bytes after it.
fn sd_element(rest: &[u8]) -> Result<(SdElement<'_>, &[u8]), NotShipped> {
    const BAD: NotShipped = NotShipped::NotSyslog("malformed structured data");
    let mut rest = rest.strip_prefix(b"[").ok_or(BAD)?;
    let id_end = rest
        .iter()
        .position(|&b| b == b' ' || b == b']')
        .ok_or(BAD)?;
    let (id, after) = rest.split_at(id_end);
    if id.is_empty() || id.len() > 32 {
        return Err(BAD);
    }
    rest = after;
    let mut params = Vec::new();
    loop {
        match rest.first() {
            Some(b']') => return Ok(((id, params), rest.get(1..).unwrap_or_default())),
            Some(b' ') => rest = rest.get(1..).unwrap_or_default(),
            _ => return Err(BAD),
        }
        let eq = memchr::memchr(b'=', rest).ok_or(BAD)?;
        let (name, after) = rest.split_at(eq);
        if name.is_empty() || name.len() > 32 || name.iter().any(|&b| b" ]\"=".contains(&b)) {
            return Err(BAD);
        }
        rest = after.strip_prefix(b"=\"").ok_or(BAD)?;
        let mut value = Vec::new();
        loop {
            match rest {
                [b'\\', c @ (b'"' | b'\\' | b']'), tail @ ..] => {
                    value.push(*c);
                    rest = tail;
                }
                [b'"', tail @ ..] => {
                    rest = tail;
                    break;
                }
                [c, tail @ ..] => {
                    value.push(*c);
                    rest = tail;
                }
                [] => return Err(BAD),
            }
        }
        params.push((name, value));
    }
}

fn param<'p>(params: &'p [(&[u8], Vec<u8>)], name: &str) -> Option<&'p [u8]> {
    params
        .iter()
        .find(|(n, _)| *n == name.as_bytes())
        .map(|(_, v)| v.as_slice())
}

/// Parses one RFC 5424 message (a line of a collector's file, without its
/// newline, as rsyslog writes it with the template `%rawmsg%`) and returns
/// the record or anchor it carries. A message of another application is
/// [`NotShipped::Foreign`]; nothing here panics, whatever the bytes.
///
/// # Errors
/// Whenever the line is not a palisade message carrying exactly what its
/// structured data says.
pub fn parse_message(msg: &[u8]) -> Result<Shipped<'_>, NotShipped> {
    if msg.len() > MAX_MESSAGE_LEN {
        return Err(NotShipped::TooLong);
    }
    let after_pri = msg
        .strip_prefix(b"<")
        .ok_or(NotShipped::NotSyslog("no <PRI>"))?;
    let close = after_pri
        .iter()
        .take(4)
        .position(|&b| b == b'>')
        .ok_or(NotShipped::NotSyslog("no <PRI>"))?;
    let (pri, rest) = after_pri.split_at(close);
    if pri.is_empty() || !pri.iter().all(u8::is_ascii_digit) {
        return Err(NotShipped::NotSyslog("PRI is not a number"));
    }
    let rest = rest
        .strip_prefix(b">1 ")
        .ok_or(NotShipped::NotSyslog("not version 1"))?;
    let mut cur = Cur { rest };
    let _timestamp = cur.token("no TIMESTAMP")?;
    let _hostname = cur.token("no HOSTNAME")?;
    let app = cur.token("no APP-NAME")?;
    let _procid = cur.token("no PROCID")?;
    let _msgid = cur.token("no MSGID")?;
    if app != APP_NAME.as_bytes() {
        return Err(NotShipped::Foreign);
    }
    let mut rest = cur.rest;
    if rest.starts_with(b"- ") || rest == b"-" {
        return Err(NotShipped::Foreign);
    }
    let mut ours = None;
    // At most a handful of elements; bounded by the line anyway.
    while rest.first() == Some(&b'[') {
        let ((id, params), after) = sd_element(rest)?;
        if id == SD_ID.as_bytes() && ours.is_none() {
            ours = Some(params);
        }
        rest = after;
    }
    let params = ours.ok_or(NotShipped::Foreign)?;
    let body = rest
        .strip_prefix(b" ")
        .ok_or(NotShipped::Inconsistent("no MSG"))?;
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let journal = param(&params, "journal")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(JournalId::from_hex)
        .ok_or(NotShipped::Inconsistent("no journal id"))?;
    let seq = param(&params, "seq")
        .and_then(|v| std::str::from_utf8(v).ok())
        .filter(|s| !(s.len() > 1 && s.starts_with('0')))
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or(NotShipped::Inconsistent("no seq"))?;
    let kind = param(&params, "kind").ok_or(NotShipped::Inconsistent("no kind"))?;
    if kind == ANCHOR_KIND.as_bytes() {
        let text = std::str::from_utf8(body).map_err(|_| NotShipped::Inconsistent("anchor"))?;
        let anchor =
            Anchor::from_json(text).map_err(|_| NotShipped::Inconsistent("not an anchor"))?;
        if anchor.journal != journal || anchor.seq != seq {
            return Err(NotShipped::Inconsistent("the anchor is not the one named"));
        }
        return Ok(Shipped::Anchor(anchor));
    }
    let rec = format::parse_line(body).map_err(NotShipped::Inconsistent)?;
    if rec.journal != journal.to_hex().as_bytes() || rec.seq != seq || rec.kind != kind {
        return Err(NotShipped::Inconsistent(
            "the structured data does not match the record",
        ));
    }
    Ok(Shipped::Record {
        journal,
        seq,
        line: body,
    })
}

/// One RELP frame read from a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelpFrame<'a> {
    /// Its transaction number.
    pub txnr: u32,
    /// Its command (`rsp`, `serverclose`, …).
    pub command: &'a [u8],
    /// Its data.
    pub data: &'a [u8],
}

/// Longest RELP frame data accepted from a server (responses are short).
pub const MAX_RELP_RESPONSE: usize = 64 * 1024;

/// Parses one RELP frame at the start of `buf`: `Ok(Some((frame, used)))`,
/// `Ok(None)` when more bytes are needed, `Err` when `buf` cannot start a
/// frame (or announces data over [`MAX_RELP_RESPONSE`]).
///
/// # Errors
/// A malformed frame.
pub fn parse_relp_frame(buf: &[u8]) -> Result<Option<(RelpFrame<'_>, usize)>, &'static str> {
    fn number(field: &[u8], max_digits: usize) -> Result<u64, &'static str> {
        if field.is_empty() || field.len() > max_digits || !field.iter().all(u8::is_ascii_digit) {
            return Err("not a RELP number");
        }
        field
            .iter()
            .try_fold(0u64, |n, &d| {
                n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
            })
            .ok_or("not a RELP number")
    }
    // Header: TXNR SP COMMAND SP DATALEN, at most 9 + 1 + 32 + 1 + 9 bytes.
    let head_max = 9 + 1 + 32 + 1 + 9 + 1;
    let window = buf.get(..head_max.min(buf.len())).unwrap_or_default();
    let Some(sp1) = memchr::memchr(b' ', window) else {
        return if window.len() >= 10 {
            Err("RELP txnr too long")
        } else if window.iter().all(u8::is_ascii_digit) {
            Ok(None)
        } else {
            Err("not a RELP frame")
        };
    };
    let txnr = u32::try_from(number(window.get(..sp1).unwrap_or_default(), 9)?)
        .map_err(|_| "not a RELP number")?;
    let after = window.get(sp1 + 1..).unwrap_or_default();
    let Some(sp2) = memchr::memchr(b' ', after) else {
        return if after.len() > 32 || !after.iter().all(u8::is_ascii_alphabetic) {
            Err("RELP command malformed")
        } else {
            Ok(None)
        };
    };
    let command = after.get(..sp2).unwrap_or_default();
    if command.is_empty() || !command.iter().all(u8::is_ascii_alphabetic) {
        return Err("RELP command malformed");
    }
    let len_start = sp1 + 1 + sp2 + 1;
    let rest = buf.get(len_start..).unwrap_or_default();
    let Some(len_end) = rest.iter().take(10).position(|&b| b == b' ' || b == b'\n') else {
        return if rest.len() >= 10 || !rest.iter().all(u8::is_ascii_digit) {
            Err("RELP datalen malformed")
        } else {
            Ok(None)
        };
    };
    let datalen = usize::try_from(number(rest.get(..len_end).unwrap_or_default(), 9)?)
        .map_err(|_| "RELP datalen malformed")?;
    if datalen > MAX_RELP_RESPONSE {
        return Err("RELP response too long");
    }
    let sep = rest.get(len_end).copied();
    let data_start = len_start + len_end + 1;
    if datalen == 0 {
        return match sep {
            Some(b'\n') => Ok(Some((
                RelpFrame {
                    txnr,
                    command,
                    data: &[],
                },
                data_start,
            ))),
            // A space and a trailer: some peers write `0 ` then LF.
            Some(b' ') => match buf.get(data_start) {
                Some(b'\n') => Ok(Some((
                    RelpFrame {
                        txnr,
                        command,
                        data: &[],
                    },
                    data_start + 1,
                ))),
                Some(_) => Err("RELP frame without trailer"),
                None => Ok(None),
            },
            _ => Err("RELP datalen malformed"),
        };
    }
    if sep != Some(b' ') {
        return Err("RELP frame: no data after datalen");
    }
    let Some(data) = buf.get(data_start..data_start + datalen) else {
        return Ok(None);
    };
    match buf.get(data_start + datalen) {
        Some(b'\n') => Ok(Some((
            RelpFrame {
                txnr,
                command,
                data,
            },
            data_start + datalen + 1,
        ))),
        Some(_) => Err("RELP frame without trailer"),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn param_values_escape_the_three_characters() {
        let mut out = String::new();
        escape_param_value(r#"a"b\c]d"#, &mut out);
        assert_eq!(out, r#"a\"b\\c\]d"#);
        let msg = format!(
            "<110>1 - h palisade - x [{SD_ID} journal=\"{}\" seq=\"0\" kind=\"anchor\" odd=\"{out}\"] {{}}",
            "00".repeat(16)
        );
        let ((_, params), _) = sd_element(
            msg.as_bytes()
                .get(msg.find('[').unwrap_or(0)..)
                .unwrap_or_default(),
        )
        .unwrap_or_else(|_| (("".as_bytes(), Vec::new()), &[]));
        assert_eq!(param(&params, "odd"), Some(&br#"a"b\c]d"#[..]));
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(timestamp(1_000), "1970-01-01T00:00:01Z");
        assert_eq!(timestamp(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(timestamp(u64::MAX), "-");
    }

    #[test]
    fn relp_frames_parse_and_wait_for_more() {
        let mut out = Vec::new();
        relp_frame(7, "rsp", b"200 OK", &mut out);
        assert_eq!(out, b"7 rsp 6 200 OK\n");
        assert_eq!(
            parse_relp_frame(&out),
            Ok(Some((
                RelpFrame {
                    txnr: 7,
                    command: b"rsp",
                    data: b"200 OK"
                },
                out.len()
            )))
        );
        for cut in 0..out.len() {
            assert_eq!(
                parse_relp_frame(out.get(..cut).unwrap_or_default()),
                Ok(None)
            );
        }
        assert_eq!(
            parse_relp_frame(b"0 serverclose 0\n"),
            Ok(Some((
                RelpFrame {
                    txnr: 0,
                    command: b"serverclose",
                    data: b""
                },
                16
            )))
        );
        assert!(parse_relp_frame(b"x rsp 0\n").is_err());
        assert!(parse_relp_frame(b"1 rsp 99999999 ").is_err());
        assert!(parse_relp_frame(b"1 rsp 2 okX").is_err());
    }
}
