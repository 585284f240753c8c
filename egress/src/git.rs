//! Git smart HTTP, as a `kind = "git"` relay needs it: the pure, bounded,
//! incremental parsers of what a push sends (`pktline`: the receive-pack
//! command list, capabilities and push options; `pack`: the pack stream,
//! enough to prove a ref update a fast-forward from the commits it carries)
//! and the `report-status` the relay answers with when it refuses a push
//! (`report`), or reads from the origin to record each ref's result.
//!
//! Nothing here does IO; every parser is fuzzed (`egress_git_push`,
//! `egress_git_pack`, `egress_git_report`) and never panics, hangs or
//! allocates without bound on hostile input.

pub mod pack;
pub mod pktline;
pub mod report;

/// A git object id: 20 bytes (SHA-1) or 32 (SHA-256), as lowercase hex.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId(String);

impl ObjectId {
    /// Parses 40 or 64 lowercase hex digits.
    pub fn parse(hex: &str) -> Option<Self> {
        let ok = (hex.len() == 40 || hex.len() == 64)
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| Self(hex.to_owned()))
    }

    /// The id of raw hash bytes (20 or 32 of them).
    pub fn from_bytes(raw: &[u8]) -> Option<Self> {
        if raw.len() != 20 && raw.len() != 32 {
            return None;
        }
        let mut s = String::with_capacity(raw.len() * 2);
        for b in raw {
            for nibble in [b >> 4, b & 15] {
                s.push(char::from(
                    HEX.get(usize::from(nibble)).copied().unwrap_or(b'0'),
                ));
            }
        }
        Some(Self(s))
    }

    /// Whether this is the all-zero id (a create's old id, a delete's new id).
    pub fn is_zero(&self) -> bool {
        self.0.bytes().all(|b| b == b'0')
    }

    /// The hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl std::fmt::Display for ObjectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Most bytes of one pkt-line, its 4 length digits included (git's
/// `LARGE_PACKET_MAX`).
pub const MAX_PKT_LEN: usize = 65520;

/// One pkt-line as the push head and the report read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PktLine<'a> {
    /// `0000`.
    Flush,
    /// A data packet's payload (the length digits stripped).
    Data(&'a [u8]),
}

/// The pkt-line at `pos` of `buf` and the position after it; `None`: the
/// packet is not complete yet. A delim (`0001`), response-end (`0002`), a
/// length of 3 or one over [`MAX_PKT_LEN`] is an error naming its byte.
pub(crate) fn read_pkt(buf: &[u8], pos: usize) -> Result<Option<(PktLine<'_>, usize)>, GitError> {
    let Some(digits) = buf.get(pos..pos.saturating_add(4)) else {
        return Ok(None);
    };
    let mut len = 0usize;
    for &d in digits {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return Err(GitError::PktLength(pos)),
        };
        len = len * 16 + usize::from(v);
    }
    match len {
        0 => Ok(Some((PktLine::Flush, pos + 4))),
        1..=3 => Err(GitError::PktLength(pos)),
        _ if len > MAX_PKT_LEN => Err(GitError::PktLength(pos)),
        _ => Ok(buf
            .get(pos + 4..pos + len)
            .map(|payload| (PktLine::Data(payload), pos + len))),
    }
}

/// A pkt-line of `payload` (at most `MAX_PKT_LEN - 4` bytes).
pub(crate) fn write_pkt(out: &mut Vec<u8>, payload: &[u8]) {
    let len = payload.len() + 4;
    for shift in [12u32, 8, 4, 0] {
        let nibble = (len >> shift) & 15;
        out.push(HEX.get(nibble).copied().unwrap_or(b'0'));
    }
    out.extend_from_slice(payload);
}

/// Why a push could not be read; the relay refuses it whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GitError {
    /// A pkt-line length that is not 4 hex digits, or out of range.
    #[error("bad pkt-line length at byte {0}")]
    PktLength(usize),
    /// A command line that is not `OLD NEW REF`.
    #[error("bad ref update command: {0}")]
    Command(String),
    /// More ref updates, push options or bytes of command list than allowed.
    #[error("push too large: {0}")]
    TooLarge(&'static str),
    /// The pack stream is malformed.
    #[error("bad pack: {0}")]
    Pack(String),
    /// The stream ended early.
    #[error("truncated {0}")]
    Truncated(&'static str),
}

/// Fuzzing entry points (`egress_git_push`, `egress_git_pack`,
/// `egress_git_report`): no panic, and the same answer whatever the
/// chunking.
#[cfg(any(fuzzing, feature = "testing"))]
pub mod __fuzz {
    use super::ObjectId;
    use super::pack::PackScanner;
    use super::pktline::parse_push_head;
    use super::report::{RefStatus, ReportReader, refusal_body};

    /// Splits `data` into pieces of 0 to 7 bytes from `seed`.
    fn pieces(data: &[u8], mut seed: u32) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut rest = data;
        seed |= 1;
        while !rest.is_empty() {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let n = usize::try_from(seed % 8).unwrap_or(1).min(rest.len());
            let (now, later) = rest.split_at(n);
            out.push(now);
            rest = later;
        }
        out
    }

    /// A push head: a complete head reads the same from exactly its bytes,
    /// and every shorter prefix wants more.
    pub fn push_head(data: &[u8]) {
        let whole = parse_push_head(data);
        if let Ok(Some(head)) = &whole {
            assert!(head.consumed <= data.len(), "consumed within the body");
            assert!(
                head.updates.len() <= super::pktline::MAX_UPDATES,
                "bounded updates"
            );
            let exact = data.get(..head.consumed).unwrap_or_default();
            assert_eq!(parse_push_head(exact), whole, "the head is its own bytes");
            let short = head.consumed.saturating_sub(1 + data.len() % 7);
            if short < head.consumed {
                let prefix = data.get(..short).unwrap_or_default();
                assert_eq!(parse_push_head(prefix), Ok(None), "a prefix wants more");
            }
        }
    }

    /// The id of a `commit` object of `content`.
    fn commit_id(sha256: bool, content: &[u8]) -> Option<ObjectId> {
        use sha1::Digest as _;
        let head = format!("commit {}\0", content.len());
        if sha256 {
            let mut h = sha2::Sha256::new();
            h.update(head.as_bytes());
            h.update(content);
            ObjectId::from_bytes(&h.finalize())
        } else {
            let mut h = sha1::Sha1::new();
            h.update(head.as_bytes());
            h.update(content);
            ObjectId::from_bytes(&h.finalize())
        }
    }

    /// A valid pack built from `spec` (records of kind, length, bytes:
    /// blobs, commits with parents among the earlier ones, offset and ref
    /// deltas appending to an earlier object), the commits it must prove
    /// and their parent edges.
    fn build_pack(spec: &[u8], sha256: bool) -> (Vec<u8>, Vec<(ObjectId, Vec<ObjectId>)>) {
        use std::io::Write as _;
        let hex_len = if sha256 { 64 } else { 40 };
        // (offset, content, commit id when it is a commit)
        let mut objects: Vec<(u64, Vec<u8>, Option<ObjectId>)> = Vec::new();
        let mut commits: Vec<(ObjectId, Vec<ObjectId>)> = Vec::new();
        let mut body = Vec::new();
        let mut rest = spec;
        while let [k, n, tail @ ..] = rest {
            if objects.len() >= 64 {
                break;
            }
            let n = usize::from(*n).min(tail.len());
            let (data, next) = tail.split_at(n);
            rest = next;
            let offset = 12 + body.len() as u64;
            let pick = |i: u8| usize::from(i) % objects.len().max(1);
            let (kind, content, parents) = match k % 4 {
                1 => {
                    let mut text = format!("tree {}\n", "4".repeat(hex_len));
                    let mut parents = Vec::new();
                    for &i in data.iter().take(usize::from(k >> 2) % 3) {
                        if let Some((_, _, Some(id))) = objects.get(pick(i)) {
                            text.push_str(&format!("parent {id}\n"));
                            parents.push(id.clone());
                        }
                    }
                    text.push_str("author a <a@example.com> 1 +0000\n\n");
                    let mut content = text.into_bytes();
                    content.extend_from_slice(data);
                    (1u8, content, parents)
                }
                kind @ (2 | 3) if !objects.is_empty() => {
                    let base_index = pick(data.first().copied().unwrap_or(0));
                    let Some((base_offset, base, base_id)) = objects.get(base_index).cloned()
                    else {
                        continue;
                    };
                    if kind == 3 && base_id.is_none() {
                        continue;
                    }
                    // Copy the base whole (in 64 KiB pieces at most), insert `data`.
                    let mut delta = Vec::new();
                    for v in [base.len(), base.len() + data.len()] {
                        let mut v = v;
                        loop {
                            let byte = u8::try_from(v & 0x7f).unwrap_or(0);
                            v >>= 7;
                            if v == 0 {
                                delta.push(byte);
                                break;
                            }
                            delta.push(byte | 0x80);
                        }
                    }
                    let mut at = 0usize;
                    while at < base.len() {
                        let len = (base.len() - at).min(0xffff);
                        delta.push(0x80 | 0x0f | 0x30);
                        delta.extend_from_slice(&u32::try_from(at).unwrap_or(0).to_le_bytes());
                        delta.extend_from_slice(&u16::try_from(len).unwrap_or(0).to_le_bytes());
                        at += len;
                    }
                    for piece in data.chunks(127) {
                        delta.push(u8::try_from(piece.len()).unwrap_or(0));
                        delta.extend_from_slice(piece);
                    }
                    let mut result = base.clone();
                    result.extend_from_slice(data);
                    let extra = if kind == 2 {
                        let mut ofs = offset - base_offset;
                        let mut enc = vec![u8::try_from(ofs & 0x7f).unwrap_or(0)];
                        ofs >>= 7;
                        while ofs != 0 {
                            ofs -= 1;
                            enc.insert(0, 0x80 | u8::try_from(ofs & 0x7f).unwrap_or(0));
                            ofs >>= 7;
                        }
                        enc
                    } else {
                        let hex = base_id.as_ref().map(ObjectId::as_str).unwrap_or_default();
                        (0..hex.len() / 2)
                            .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
                            .collect()
                    };
                    // The delta's own object, then what it resolves to.
                    let mut z =
                        flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
                    let _ = z.write_all(&delta);
                    let packed = z.finish().unwrap_or_default();
                    let mut size = delta.len();
                    let mut c = (if kind == 2 { 6u8 } else { 7u8 } << 4)
                        | u8::try_from(size & 15).unwrap_or(0);
                    size >>= 4;
                    while size != 0 {
                        body.push(c | 0x80);
                        c = u8::try_from(size & 0x7f).unwrap_or(0);
                        size >>= 7;
                    }
                    body.push(c);
                    body.extend_from_slice(&extra);
                    body.extend_from_slice(&packed);
                    let id = base_id.as_ref().and_then(|_| commit_id(sha256, &result));
                    if let (Some(id), Some(parents)) = (
                        &id,
                        base_id.as_ref().and_then(|b| {
                            commits.iter().find(|(c, _)| c == b).map(|(_, p)| p.clone())
                        }),
                    ) {
                        commits.push((id.clone(), parents));
                    }
                    objects.push((offset, result, id));
                    continue;
                }
                _ => (3u8, data.to_vec(), Vec::<ObjectId>::new()),
            };
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            let _ = z.write_all(&content);
            let packed = z.finish().unwrap_or_default();
            let mut size = content.len();
            let mut c = (kind << 4) | u8::try_from(size & 15).unwrap_or(0);
            size >>= 4;
            while size != 0 {
                body.push(c | 0x80);
                c = u8::try_from(size & 0x7f).unwrap_or(0);
                size >>= 7;
            }
            body.push(c);
            body.extend_from_slice(&packed);
            let id = (kind == 1).then(|| commit_id(sha256, &content)).flatten();
            if let Some(id) = &id {
                commits.push((id.clone(), parents));
            }
            objects.push((offset, content, id));
        }
        let mut pack = b"PACK\0\0\0\x02".to_vec();
        pack.extend_from_slice(&u32::try_from(objects.len()).unwrap_or(0).to_be_bytes());
        pack.extend_from_slice(&body);
        let sum = {
            use sha1::Digest as _;
            if sha256 {
                sha2::Sha256::digest(&pack).to_vec()
            } else {
                sha1::Sha1::digest(&pack).to_vec()
            }
        };
        pack.extend_from_slice(&sum);
        (pack, commits)
    }

    /// A pack (first byte: `sha256` when odd; with bit 2, `data` describes
    /// a valid pack to build, whose commits must all be proven, and with
    /// bit 3 as well one byte of it is flipped; the next two bytes a split
    /// seed): the same result whole and in pieces.
    pub fn pack(data: &[u8]) {
        let (head, body) = data.split_at(data.len().min(3));
        let flags = head.first().copied().unwrap_or(0);
        let sha256 = flags & 1 == 1;
        let format = if sha256 { "sha256" } else { "sha1" };
        let seed = u32::from(head.get(1).copied().unwrap_or(1))
            | u32::from(head.get(2).copied().unwrap_or(7)) << 8;
        let built;
        let mut expected = Vec::new();
        let body = if flags & 2 != 0 {
            let (mut pack, commits) = build_pack(body, sha256);
            if flags & 4 != 0 {
                let at = usize::try_from(seed).unwrap_or(0) % pack.len().max(1);
                if let Some(b) = pack.get_mut(at) {
                    *b ^= 1 << (flags >> 5);
                }
            } else {
                expected = commits;
            }
            built = pack;
            built.as_slice()
        } else {
            body
        };
        let run = |chunks: Vec<&[u8]>| {
            let mut scanner = PackScanner::new(format);
            let mut result = Ok(());
            for chunk in chunks {
                result = scanner.feed(chunk);
                if result.is_err() {
                    break;
                }
            }
            let result = result.and_then(|()| scanner.finish());
            let mut commits: Vec<_> = scanner
                .commits()
                .map(|(id, p)| (id.clone(), p.to_vec()))
                .collect();
            commits.sort();
            (result, commits)
        };
        let whole = run(vec![body]);
        let split = run(pieces(body, seed));
        // Refused or not, with the same commits (which error a corrupt
        // stream is noticed by first may depend on the chunking).
        assert_eq!(
            (whole.0.is_ok(), &whole.1),
            (split.0.is_ok(), &split.1),
            "the same pack whatever the chunking"
        );
        if flags & 2 != 0 && flags & 4 == 0 {
            assert_eq!(whole.0, Ok(()), "a valid pack scans");
            for (id, parents) in &expected {
                let found = whole.1.iter().find(|(c, _)| c == id);
                assert_eq!(found.map(|(_, p)| p), Some(parents), "commit {id} hashed");
            }
            let mut scanner = PackScanner::new(format);
            let _ = scanner.feed(body);
            let _ = scanner.finish();
            for (id, parents) in &expected {
                for parent in parents {
                    assert_eq!(
                        scanner.fast_forward(parent, id),
                        super::pack::Ancestry::FastForward,
                        "{parent} is a parent of {id}"
                    );
                }
            }
        }
    }

    /// A receive-pack result (first byte: the capabilities, the next two a
    /// split seed): the same statuses whole and in pieces; and a refusal
    /// built from the input's lines reads back as written.
    pub fn report(data: &[u8]) {
        let (head, body) = data.split_at(data.len().min(3));
        let pick = head.first().copied().unwrap_or(0);
        let mut caps = vec!["report-status".to_owned()];
        match pick % 3 {
            0 => caps.push("side-band-64k".to_owned()),
            1 => caps.push("side-band".to_owned()),
            _ => {}
        }
        let seed = u32::from(head.get(1).copied().unwrap_or(1))
            | u32::from(head.get(2).copied().unwrap_or(7)) << 8;
        let run = |chunks: Vec<&[u8]>| {
            let mut reader = ReportReader::new(&caps);
            let mut ok = true;
            for chunk in chunks {
                if reader.feed(chunk).is_err() {
                    ok = false;
                    break;
                }
            }
            (ok, reader.results())
        };
        let whole = run(vec![body]);
        let split = run(pieces(body, seed));
        if whole.0 && split.0 {
            assert_eq!(whole, split, "the same report whatever the chunking");
        }
        // A refusal of the input's words reads back ref for ref.
        let text = String::from_utf8_lossy(body);
        let refs: Vec<(String, RefStatus)> = text
            .split('\n')
            .take(64)
            .enumerate()
            .map(|(i, reason)| {
                let status = if i % 3 == 0 {
                    RefStatus::Ok
                } else {
                    RefStatus::Ng(reason.to_owned())
                };
                (format!("refs/heads/b{i}"), status)
            })
            .collect();
        let refusal = refusal_body(&caps, &refs, &[text.to_string()]);
        let mut reader = ReportReader::new(&caps);
        assert_eq!(reader.feed(&refusal), Ok(()), "a refusal reads back");
        assert!(reader.complete(), "a refusal is complete");
        let (unpack, got) = reader.results();
        assert_eq!(unpack.as_deref(), Some("ok"), "unpack ok");
        assert_eq!(got.len(), refs.len(), "one status per ref");
        for ((name, want), (got_name, got)) in refs.iter().zip(&got) {
            assert_eq!(name, got_name, "ref names kept");
            let same = match (want, got) {
                (RefStatus::Ok, RefStatus::Ok) => true,
                (RefStatus::Ng(_), RefStatus::Ng(reason)) => !reason.contains('\n'),
                _ => false,
            };
            assert!(same, "the status of {name} kept, on one line");
        }
    }
}
