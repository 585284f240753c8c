//! `report-status`: what the relay answers when it refuses a push (so git
//! prints `! [remote rejected] main -> main (refused by palisade: <rule>)`),
//! and what it reads from the origin's answer to record each ref's result.

use super::pktline::{MAX_UPDATES, has_capability};
use super::{GitError, MAX_PKT_LEN, PktLine, read_pkt, write_pkt};

/// The outcome of one ref update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefStatus {
    /// `ok REF`.
    Ok,
    /// `ng REF REASON`.
    Ng(String),
}

/// Most bytes of one side-band packet's data with `side-band-64k`.
const BAND_64K: usize = MAX_PKT_LEN - 5;

/// Most bytes of one side-band packet's data with `side-band`.
const BAND_1K: usize = 1000 - 5;

/// Most bytes of a reason or a message written into a refusal.
const MAX_TEXT: usize = 1024;

/// The side band the client asked for: the most data per packet.
fn band_size(capabilities: &[String]) -> Option<usize> {
    if has_capability(capabilities, "side-band-64k") {
        Some(BAND_64K)
    } else if has_capability(capabilities, "side-band") {
        Some(BAND_1K)
    } else {
        None
    }
}

/// `text` on one line: control bytes become spaces, at most [`MAX_TEXT`]
/// bytes (cut on a character boundary), so a reason can never end a line
/// early and forge another ref's status.
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_TEXT));
    for c in text.chars() {
        if out.len() + c.len_utf8() > MAX_TEXT {
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

/// The body of a `application/x-git-receive-pack-result` response that
/// reports `unpack ok` and one line per ref, wrapped in side band 1 when
/// the client asked for `side-band-64k` (or `side-band`), with `messages`
/// on band 2 (git prints them as `remote: …`).
///
/// Reasons and messages are put on one line (control bytes become spaces)
/// and cut at 1 KiB; without a side band the messages are not sent (git
/// has nowhere to print them).
pub fn refusal_body(
    capabilities: &[String],
    refs: &[(String, RefStatus)],
    messages: &[String],
) -> Vec<u8> {
    let mut report = Vec::new();
    write_pkt(&mut report, b"unpack ok\n");
    for (name, status) in refs {
        let name = one_line(name);
        let line = match status {
            RefStatus::Ok => format!("ok {name}\n"),
            RefStatus::Ng(reason) => format!("ng {name} {}\n", one_line(reason)),
        };
        write_pkt(&mut report, line.as_bytes());
    }
    report.extend_from_slice(b"0000");
    let Some(band) = band_size(capabilities) else {
        return report;
    };
    let mut out = Vec::with_capacity(report.len() + 64);
    for message in messages {
        let line = format!("{}\n", one_line(message));
        for piece in line.as_bytes().chunks(band) {
            let mut payload = Vec::with_capacity(piece.len() + 1);
            payload.push(2);
            payload.extend_from_slice(piece);
            write_pkt(&mut out, &payload);
        }
    }
    for piece in report.chunks(band) {
        let mut payload = Vec::with_capacity(piece.len() + 1);
        payload.push(1);
        payload.extend_from_slice(piece);
        write_pkt(&mut out, &payload);
    }
    out.extend_from_slice(b"0000");
    out
}

/// An incremental reader of the origin's receive-pack result (side band
/// demultiplexed when the client asked for it): `unpack` status and one
/// [`RefStatus`] per ref.
///
/// It keeps at most one incomplete packet of each layer (under 64 KiB
/// each) and at most `MAX_UPDATES` results; band 2 (progress) and band 3
/// (a fatal message) are passed over, `report-status-v2` `option` lines
/// skipped.
#[derive(Debug, Default)]
pub struct ReportReader {
    /// With a side band: the most data per band packet; `None`: no band.
    band: Option<usize>,
    /// Bytes of the outer (side band) layer not yet read whole.
    outer: Vec<u8>,
    /// Bytes of the report's pkt-lines not yet read whole.
    inner: Vec<u8>,
    /// The `unpack` line's status (`ok`, or git's error).
    unpack: Option<String>,
    /// Each ref's status, in order.
    refs: Vec<(String, RefStatus)>,
    /// The report's closing flush was read.
    done: bool,
    /// The side band's closing flush was read.
    outer_done: bool,
    /// Why the reading stopped.
    failed: Option<GitError>,
}

impl ReportReader {
    /// A reader for a push whose client sent `capabilities`.
    pub fn new(capabilities: &[String]) -> Self {
        Self {
            band: band_size(capabilities),
            ..Self::default()
        }
    }

    /// Feeds response bytes (the relay passes them on unchanged).
    ///
    /// # Errors
    /// Never for what a real origin sends; malformed input stops the reading
    /// (the relay then records each ref as `unknown`): this error and every
    /// later call's.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), GitError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = match self.band {
            Some(_) => self.feed_outer(bytes),
            None => self.feed_inner(bytes),
        };
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    /// Whether the report was read to its end (its closing flush).
    pub fn complete(&self) -> bool {
        self.done && self.failed.is_none()
    }

    /// The status of each ref seen so far, in order, and the `unpack` line.
    pub fn results(&self) -> (Option<String>, Vec<(String, RefStatus)>) {
        (self.unpack.clone(), self.refs.clone())
    }

    fn feed_outer(&mut self, bytes: &[u8]) -> Result<(), GitError> {
        if self.outer_done {
            return if bytes.is_empty() {
                Ok(())
            } else {
                Err(GitError::Command(
                    "bytes after the side band's flush".into(),
                ))
            };
        }
        self.outer.extend_from_slice(bytes);
        let mut pos = 0;
        let mut result = Ok(());
        let mut data = Vec::new();
        loop {
            match read_pkt(&self.outer, pos) {
                Ok(None) => break,
                Err(e) => {
                    result = Err(e);
                    break;
                }
                Ok(Some((PktLine::Flush, next))) => {
                    pos = next;
                    self.outer_done = true;
                    if next < self.outer.len() {
                        result = Err(GitError::Command(format!(
                            "bytes after the side band's flush at byte {next}"
                        )));
                    }
                    break;
                }
                Ok(Some((PktLine::Data(payload), next))) => {
                    let at = pos;
                    pos = next;
                    match payload.split_first() {
                        Some((1, rest)) => data.extend_from_slice(rest),
                        Some((2 | 3, _)) => {}
                        _ => {
                            result = Err(GitError::Command(format!(
                                "a side-band packet without band 1, 2 or 3 at byte {at}"
                            )));
                            break;
                        }
                    }
                }
            }
        }
        self.outer.drain(..pos);
        result?;
        self.feed_inner(&data)
    }

    fn feed_inner(&mut self, bytes: &[u8]) -> Result<(), GitError> {
        if self.done {
            return if bytes.is_empty() {
                Ok(())
            } else {
                Err(GitError::Command("bytes after the report's flush".into()))
            };
        }
        let mut inner = std::mem::take(&mut self.inner);
        inner.extend_from_slice(bytes);
        let mut pos = 0;
        let mut result = Ok(());
        loop {
            match read_pkt(&inner, pos) {
                Ok(None) => break,
                Err(e) => {
                    result = Err(e);
                    break;
                }
                Ok(Some((PktLine::Flush, next))) => {
                    pos = next;
                    self.done = true;
                    if next < inner.len() {
                        result = Err(GitError::Command(format!(
                            "bytes after the report's flush at byte {next}"
                        )));
                    }
                    break;
                }
                Ok(Some((PktLine::Data(line), next))) => {
                    let at = pos;
                    pos = next;
                    if let Err(e) = self.line(line, at) {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        inner.drain(..pos);
        self.inner = inner;
        result
    }

    fn line(&mut self, line: &[u8], at: usize) -> Result<(), GitError> {
        let bad = |what: &str| GitError::Command(format!("{what} in the report at byte {at}"));
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = std::str::from_utf8(line).map_err(|_| bad("a line that is not UTF-8"))?;
        if let Some(status) = line.strip_prefix("unpack ") {
            if self.unpack.is_some() || !self.refs.is_empty() {
                return Err(bad("a second unpack line"));
            }
            self.unpack = Some(status.to_owned());
            return Ok(());
        }
        if self.unpack.is_none() {
            return Err(bad("a line before the unpack line"));
        }
        if line.starts_with("option ") {
            return Ok(());
        }
        let (name, status) = if let Some(name) = line.strip_prefix("ok ") {
            (name, RefStatus::Ok)
        } else if let Some(rest) = line.strip_prefix("ng ") {
            let (name, reason) = rest.split_once(' ').unwrap_or((rest, ""));
            (name, RefStatus::Ng(reason.to_owned()))
        } else {
            return Err(bad("a line that is not unpack, ok, ng or option"));
        };
        if name.is_empty() {
            return Err(bad("a status without a ref name"));
        }
        if self.refs.len() >= MAX_UPDATES {
            return Err(GitError::TooLarge("more ref statuses than MAX_UPDATES"));
        }
        self.refs.push((name.to_owned(), status));
        Ok(())
    }
}
