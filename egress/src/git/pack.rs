//! An incremental pack reader: it inflates every object to find where the
//! next begins, hashes each commit (and each delta it can resolve against a
//! commit in the same pack) and keeps its parents, so that
//! [`PackScanner::fast_forward`] can prove `old` an ancestor of `new` from
//! commits whose ids it computed itself. What it cannot prove is
//! [`Ancestry::Unproven`], which the relay treats as a force push.
//!
//! Bounded: trees, blobs and tags are inflated into a fixed scratch buffer
//! and dropped; commits (the bodies deltas may need as bases, and their
//! parents) are kept up to [`MAX_COMMIT_BYTES`] in all, and a pack that
//! needs more is refused. Every object must inflate to exactly its declared
//! size; nothing is allocated from a declared size before the bytes arrive.

use std::collections::{HashMap, HashSet, VecDeque};

use flate2::{Decompress, FlushDecompress, Status};
use sha1::{Digest, Sha1};
use sha2::Sha256;

use super::{GitError, ObjectId};

/// Most bytes of commit objects kept for the ancestry walk (64 MiB), each
/// commit counted with [`COMMIT_OVERHEAD`] bytes more for what is kept
/// about it, so that a pack of many tiny commits is bounded too.
pub const MAX_COMMIT_BYTES: usize = 64 << 20;

/// Bytes each kept commit is counted for beyond its body (its id, parents
/// and map entries).
pub const COMMIT_OVERHEAD: usize = 256;

/// Bytes inflated at a time.
const SCRATCH: usize = 64 << 10;

/// Whether an update is a fast-forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ancestry {
    /// `old` is an ancestor of `new` through commits of this pack (or equal).
    FastForward,
    /// Not proven from this pack (a rewind, a fork, or history the pack
    /// does not carry): decided as `git.force_push`.
    Unproven,
}

/// The pack's checksum, SHA-1 or SHA-256 as its object format says.
#[derive(Debug, Clone)]
enum Hasher {
    Sha1(Sha1),
    Sha256(Sha256),
}

impl Hasher {
    fn new(sha256: bool) -> Self {
        if sha256 {
            Self::Sha256(Sha256::new())
        } else {
            Self::Sha1(Sha1::new())
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            Self::Sha1(h) => h.update(bytes),
            Self::Sha256(h) => h.update(bytes),
        }
    }

    fn finish(self) -> Vec<u8> {
        match self {
            Self::Sha1(h) => h.finalize().to_vec(),
            Self::Sha256(h) => h.finalize().to_vec(),
        }
    }

    /// The object id of `kind` with `content`, as git computes it.
    fn object_id(sha256: bool, kind: &str, content: &[u8]) -> Option<ObjectId> {
        let mut h = Self::new(sha256);
        h.update(format!("{kind} {}\0", content.len()).as_bytes());
        h.update(content);
        ObjectId::from_bytes(&h.finish())
    }
}

/// What an object being inflated is kept for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// A tree, blob, tag, or a delta whose base is not a commit of this
    /// pack: inflated and dropped.
    Drop,
    /// A commit: hashed, its parents kept.
    Commit,
    /// A delta against the commit at this pack offset.
    Delta(u64),
}

/// An object whose zlib stream is being read.
#[derive(Debug)]
struct Inflating {
    /// The pack offset of the object's header.
    start: u64,
    /// Its declared (inflated) size.
    size: u64,
    /// Bytes inflated so far.
    produced: u64,
    keep: Keep,
    /// The inflated bytes, when kept.
    data: Vec<u8>,
    z: Decompress,
}

/// Where the reader is in the pack.
#[derive(Debug)]
enum Stage {
    /// The 12-byte pack header.
    Header,
    /// An object's type/size header (and delta base).
    Object,
    /// An object's zlib stream.
    Inflate(Box<Inflating>),
    /// The checksum.
    Trailer,
    /// Read whole, checksum verified.
    Done,
}

/// The pack reader.
#[derive(Debug)]
pub struct PackScanner {
    sha256: bool,
    stage: Stage,
    /// The header, an object header or the trailer as they arrive.
    small: Vec<u8>,
    /// Bytes of the pack read (and hashed) before the trailer.
    offset: u64,
    /// Objects the header declares, and read so far.
    count: u32,
    seen: u32,
    hasher: Option<Hasher>,
    /// Parents of each commit whose id was computed and whose parent lines
    /// parsed as git parses them.
    parents: HashMap<ObjectId, Vec<ObjectId>>,
    /// Bodies of the pack's commits by pack offset (delta bases).
    bodies: HashMap<u64, Vec<u8>>,
    /// Pack offset of each commit by id (`REF_DELTA` bases).
    by_id: HashMap<ObjectId, u64>,
    /// Bytes of commits kept.
    kept: usize,
    /// Most bytes of commits that may be kept ([`MAX_COMMIT_BYTES`] unless
    /// [`set_limit`](Self::set_limit) lowered it).
    limit: usize,
    scratch: Vec<u8>,
    failed: Option<GitError>,
    finished: bool,
}

impl Default for PackScanner {
    fn default() -> Self {
        Self::new("sha1")
    }
}

impl PackScanner {
    /// A reader for a pack of `object_format` (`sha1` or `sha256`; any
    /// other value reads as `sha1`, whose ids then match nothing of a
    /// push of another format).
    pub fn new(object_format: &str) -> Self {
        let sha256 = object_format == "sha256";
        Self {
            sha256,
            stage: Stage::Header,
            small: Vec::new(),
            offset: 0,
            count: 0,
            seen: 0,
            hasher: Some(Hasher::new(sha256)),
            parents: HashMap::new(),
            bodies: HashMap::new(),
            by_id: HashMap::new(),
            kept: 0,
            limit: MAX_COMMIT_BYTES,
            scratch: Vec::new(),
            failed: None,
            finished: false,
        }
    }

    /// Feeds the next bytes of the pack.
    ///
    /// # Errors
    /// A malformed pack, or more commit bytes than [`MAX_COMMIT_BYTES`]:
    /// this error, and the same for every later call.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), GitError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.feed_inner(bytes);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
            // Nothing kept is needed any more.
            self.bodies = HashMap::new();
            self.parents = HashMap::new();
            self.by_id = HashMap::new();
            self.stage = Stage::Done;
        }
        result
    }

    /// The pack ended: checks it is complete (trailer included).
    ///
    /// # Errors
    /// A truncated pack or a trailer that does not match.
    pub fn finish(&mut self) -> Result<(), GitError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if !matches!(self.stage, Stage::Done) {
            let what = match self.stage {
                Stage::Trailer => "pack: its trailer (checksum) is incomplete",
                Stage::Header => "pack: its header is incomplete",
                _ => "pack: it ends before its last object",
            };
            let e = GitError::Truncated(what);
            self.failed = Some(e.clone());
            return Err(e);
        }
        self.finished = true;
        Ok(())
    }

    /// Whether `new` fast-forwards `old`, from the commits read so far.
    /// Only a pack that [`finish`](Self::finish)ed without error proves
    /// anything: before that (or after an error) an update is
    /// [`Ancestry::FastForward`] only when `old == new`.
    pub fn fast_forward(&self, old: &ObjectId, new: &ObjectId) -> Ancestry {
        if old == new {
            return Ancestry::FastForward;
        }
        if !self.finished || self.failed.is_some() {
            return Ancestry::Unproven;
        }
        let mut queue = VecDeque::from([new]);
        let mut visited = HashSet::from([new]);
        while let Some(id) = queue.pop_front() {
            for parent in self.parents.get(id).into_iter().flatten() {
                if parent == old {
                    return Ancestry::FastForward;
                }
                if visited.insert(parent) {
                    queue.push_back(parent);
                }
            }
        }
        Ancestry::Unproven
    }

    /// Lets this reader keep at most `room` more bytes of commits from the
    /// next [`feed`](Self::feed) on (never more than [`MAX_COMMIT_BYTES`]
    /// in all): the relay gives it what its buffer budget has left, so a
    /// commit (or delta) whose declared size does not fit is refused from
    /// its header, before it is inflated. Going past it is
    /// [`GitError::TooLarge`], as for [`MAX_COMMIT_BYTES`].
    pub fn set_room(&mut self, room: usize) {
        self.limit = self.kept.saturating_add(room).min(MAX_COMMIT_BYTES);
    }

    /// The bytes this reader holds now: the commits kept (each with its
    /// [`COMMIT_OVERHEAD`]), the object being inflated when it is kept (a
    /// commit or a delta against one), the scratch buffer and the header
    /// bytes. What the relay charges to its buffer budget.
    pub fn kept_bytes(&self) -> usize {
        let inflating = match &self.stage {
            Stage::Inflate(obj) => obj.data.capacity(),
            _ => 0,
        };
        self.kept
            .saturating_add(inflating)
            .saturating_add(self.scratch.capacity())
            .saturating_add(self.small.capacity())
    }

    /// Bytes of the pack's trailer (the checksum) the relay must hold back
    /// from the origin until the push is decided: 20 (SHA-1) or 32.
    pub fn trailer_len(&self) -> usize {
        if self.sha256 { 32 } else { 20 }
    }

    /// Objects the pack's header declares (0 before it is read).
    pub fn object_count(&self) -> u32 {
        self.count
    }

    /// The commits whose ids this reader computed and whose parents it
    /// parsed, with those parents.
    pub fn commits(&self) -> impl Iterator<Item = (&ObjectId, &[ObjectId])> {
        self.parents.iter().map(|(id, p)| (id, p.as_slice()))
    }

    fn hash_len(&self) -> usize {
        self.trailer_len()
    }

    fn consume(&mut self, bytes: &[u8]) {
        if let Some(h) = &mut self.hasher {
            h.update(bytes);
        }
        self.offset += bytes.len() as u64;
    }

    fn feed_inner(&mut self, mut input: &[u8]) -> Result<(), GitError> {
        while !input.is_empty() {
            match &mut self.stage {
                Stage::Header => {
                    let (now, rest) = input.split_at(input.len().min(12 - self.small.len()));
                    self.small.extend_from_slice(now);
                    self.consume(now);
                    input = rest;
                    if self.small.len() == 12 {
                        self.header()?;
                    }
                }
                Stage::Object => {
                    let (now, rest) = input.split_at(1);
                    self.small.extend_from_slice(now);
                    input = rest;
                    if let Some(inflating) = self.object_header()? {
                        let used = std::mem::take(&mut self.small);
                        self.consume(&used);
                        self.stage = Stage::Inflate(Box::new(inflating));
                    }
                }
                Stage::Inflate(_) => input = self.inflate(input)?,
                Stage::Trailer => {
                    let want = self.trailer_len() - self.small.len();
                    if input.len() > want {
                        return Err(GitError::Pack(format!(
                            "bytes after the pack's trailer at byte {}",
                            self.offset + self.trailer_len() as u64
                        )));
                    }
                    self.small.extend_from_slice(input);
                    input = &[];
                    if self.small.len() == self.trailer_len() {
                        let sum = self.hasher.take().map(Hasher::finish).unwrap_or_default();
                        if sum != self.small {
                            return Err(GitError::Pack(format!(
                                "the trailer at byte {} is not the pack's checksum",
                                self.offset
                            )));
                        }
                        self.stage = Stage::Done;
                    }
                }
                Stage::Done => {
                    return Err(GitError::Pack(format!(
                        "bytes after the pack's trailer at byte {}",
                        self.offset + self.trailer_len() as u64
                    )));
                }
            }
        }
        Ok(())
    }

    /// `PACK`, version 2 or 3, the object count.
    fn header(&mut self) -> Result<(), GitError> {
        let word = |at: usize| -> u32 {
            let mut b = [0u8; 4];
            if let Some(src) = self.small.get(at..at + 4) {
                b.copy_from_slice(src);
            }
            u32::from_be_bytes(b)
        };
        if self.small.get(..4) != Some(b"PACK".as_slice()) {
            return Err(GitError::Pack("no PACK signature at byte 0".into()));
        }
        let version = word(4);
        if version != 2 && version != 3 {
            return Err(GitError::Pack(format!(
                "pack version {version} at byte 4 (2 or 3 expected)"
            )));
        }
        self.count = word(8);
        self.small.clear();
        self.stage = if self.count == 0 {
            Stage::Trailer
        } else {
            Stage::Object
        };
        Ok(())
    }

    /// The object header in `small`, when complete: what to inflate.
    fn object_header(&self) -> Result<Option<Inflating>, GitError> {
        let start = self.offset;
        let bad = |what: &str| GitError::Pack(format!("{what} in the object at byte {start}"));
        let b = &self.small;
        let Some(&first) = b.first() else {
            return Ok(None);
        };
        let kind = (first >> 4) & 7;
        let mut size = u64::from(first & 15);
        let mut c = first;
        let mut shift = 4u32;
        let mut i = 1;
        while c & 0x80 != 0 {
            let Some(&next) = b.get(i) else {
                return Ok(None);
            };
            if shift > 57 {
                return Err(bad("a size over 2^60"));
            }
            c = next;
            i += 1;
            size |= u64::from(c & 0x7f) << shift;
            shift += 7;
        }
        let keep = match kind {
            1 => {
                self.within_budget(size)
                    .map_err(|()| GitError::TooLarge("commit objects over MAX_COMMIT_BYTES"))?;
                Keep::Commit
            }
            2..=4 => Keep::Drop,
            6 => {
                let Some(&c0) = b.get(i) else {
                    return Ok(None);
                };
                i += 1;
                let mut c = c0;
                let mut ofs = u64::from(c & 0x7f);
                while c & 0x80 != 0 {
                    let Some(&next) = b.get(i) else {
                        return Ok(None);
                    };
                    i += 1;
                    c = next;
                    ofs = ofs
                        .checked_add(1)
                        .filter(|o| o.leading_zeros() >= 7)
                        .ok_or_else(|| bad("a delta base offset out of range"))?;
                    ofs = (ofs << 7) | u64::from(c & 0x7f);
                }
                if ofs == 0 || ofs >= start {
                    return Err(bad("a delta base offset out of range"));
                }
                let base = start - ofs;
                if self.bodies.contains_key(&base) && self.within_budget(size).is_ok() {
                    Keep::Delta(base)
                } else {
                    Keep::Drop
                }
            }
            7 => {
                let hash_len = self.hash_len();
                let Some(raw) = b.get(i..i + hash_len) else {
                    return Ok(None);
                };
                i += hash_len;
                let base = ObjectId::from_bytes(raw).and_then(|id| self.by_id.get(&id).copied());
                match base {
                    Some(base) if self.within_budget(size).is_ok() => Keep::Delta(base),
                    _ => Keep::Drop,
                }
            }
            _ => return Err(bad(&format!("object type {kind}"))),
        };
        debug_assert_eq!(i, b.len(), "the header is read one byte at a time");
        Ok(Some(Inflating {
            start,
            size,
            produced: 0,
            keep,
            data: Vec::new(),
            z: Decompress::new(true),
        }))
    }

    /// Whether `size` more bytes of commits may be kept.
    fn within_budget(&self, size: u64) -> Result<(), ()> {
        let left = self.limit.saturating_sub(self.kept);
        if size <= left as u64 { Ok(()) } else { Err(()) }
    }

    /// Inflates what of `input` belongs to the current object; returns the
    /// rest.
    fn inflate<'a>(&mut self, mut input: &'a [u8]) -> Result<&'a [u8], GitError> {
        if self.scratch.len() != SCRATCH {
            self.scratch = vec![0; SCRATCH];
        }
        let Stage::Inflate(obj) = &mut self.stage else {
            return Ok(input);
        };
        let start = obj.start;
        let bad = |what: &str| GitError::Pack(format!("{what} in the object at byte {start}"));
        loop {
            let (in0, out0) = (obj.z.total_in(), obj.z.total_out());
            let status = obj
                .z
                .decompress(input, &mut self.scratch, FlushDecompress::None)
                .map_err(|_| bad("a bad zlib stream"))?;
            let used = usize::try_from(obj.z.total_in() - in0).unwrap_or(usize::MAX);
            let made = usize::try_from(obj.z.total_out() - out0).unwrap_or(usize::MAX);
            let (now, rest) = input.split_at(used.min(input.len()));
            if let Some(h) = &mut self.hasher {
                h.update(now);
            }
            self.offset += now.len() as u64;
            input = rest;
            obj.produced += made as u64;
            if obj.produced > obj.size {
                return Err(bad("more bytes than its declared size"));
            }
            if obj.keep != Keep::Drop {
                // grown by doubling but never past the declared size, so
                // what is held is what the budget was checked for
                let len = obj.data.len();
                if obj.data.capacity() < len.saturating_add(made) {
                    let size = usize::try_from(obj.size).unwrap_or(usize::MAX);
                    let want = len
                        .saturating_mul(2)
                        .max(len.saturating_add(made))
                        .min(size);
                    obj.data.reserve_exact(want.saturating_sub(len));
                }
                obj.data
                    .extend_from_slice(self.scratch.get(..made).unwrap_or_default());
            }
            if status == Status::StreamEnd {
                if obj.produced != obj.size {
                    return Err(bad("fewer bytes than its declared size"));
                }
                break;
            }
            if used == 0 && made == 0 {
                if input.is_empty() {
                    return Ok(input);
                }
                return Err(bad("a zlib stream that does not progress"));
            }
            if input.is_empty() && made < self.scratch.len() {
                return Ok(input);
            }
        }
        // The object is whole.
        let Stage::Inflate(obj) = std::mem::replace(&mut self.stage, Stage::Object) else {
            return Ok(input);
        };
        match obj.keep {
            Keep::Drop => {}
            Keep::Commit => self.record(obj.start, obj.data)?,
            Keep::Delta(base) => {
                let limit = self.limit.saturating_sub(self.kept);
                let base = self
                    .bodies
                    .get(&base)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let result = apply_delta(base, &obj.data, limit).map_err(|e| {
                    if e == DeltaError::TooLarge {
                        GitError::TooLarge("commit objects over MAX_COMMIT_BYTES")
                    } else {
                        bad(&format!("a bad delta against a commit ({e:?})"))
                    }
                })?;
                self.record(obj.start, result)?;
            }
        }
        self.seen += 1;
        if self.seen == self.count {
            self.stage = Stage::Trailer;
        }
        Ok(input)
    }

    /// Keeps a commit read whole at pack offset `start`.
    fn record(&mut self, start: u64, body: Vec<u8>) -> Result<(), GitError> {
        self.kept = self
            .kept
            .saturating_add(body.len())
            .saturating_add(COMMIT_OVERHEAD);
        if self.kept > self.limit {
            return Err(GitError::TooLarge("commit objects over MAX_COMMIT_BYTES"));
        }
        let hex_len = self.hash_len() * 2;
        let Some(id) = Hasher::object_id(self.sha256, "commit", &body) else {
            return Ok(());
        };
        if let Some(parents) = commit_parents(&body, hex_len) {
            self.parents.insert(id.clone(), parents);
        }
        self.by_id.insert(id, start);
        self.bodies.insert(start, body);
        Ok(())
    }
}

/// The parents of a commit body, parsed as git's `parse_commit_buffer`
/// does (a `tree` line, then consecutive `parent` lines, each followed by
/// more bytes), but stricter: a parent id must be lowercase hex. `None`
/// when git would call the commit bogus or the parse could differ from
/// git's; such a commit proves nothing.
fn commit_parents(body: &[u8], hex_len: usize) -> Option<Vec<ObjectId>> {
    let tree_len = 5 + hex_len;
    if body.len() <= tree_len + 1
        || body.get(..5) != Some(b"tree ".as_slice())
        || body.get(tree_len) != Some(&b'\n')
    {
        return None;
    }
    let mut rest = body.get(tree_len + 1..)?;
    let parent_len = 7 + hex_len;
    let mut parents = Vec::new();
    while rest.len() > parent_len && rest.starts_with(b"parent ") {
        if rest.len() <= parent_len + 1 || rest.get(parent_len) != Some(&b'\n') {
            return None;
        }
        let hex = std::str::from_utf8(rest.get(7..parent_len)?).ok()?;
        parents.push(ObjectId::parse(hex).filter(|id| id.as_str().len() == hex_len)?);
        rest = rest.get(parent_len + 1..)?;
    }
    Some(parents)
}

/// Why a delta could not be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeltaError {
    /// The base size it names is not its base's.
    BaseSize,
    /// A size varint that does not end or overflows.
    Varint,
    /// A copy outside the base, or an insert past the delta's end.
    Range,
    /// Opcode 0 (reserved).
    Opcode,
    /// The result is not the size it declares.
    ResultSize,
    /// The result is over the commit budget.
    TooLarge,
}

fn delta_varint(delta: &[u8], i: &mut usize) -> Result<usize, DeltaError> {
    let mut value = 0usize;
    let mut shift = 0u32;
    loop {
        let c = *delta.get(*i).ok_or(DeltaError::Varint)?;
        *i += 1;
        if shift > 56 {
            return Err(DeltaError::Varint);
        }
        value |= usize::from(c & 0x7f)
            .checked_shl(shift)
            .ok_or(DeltaError::Varint)?;
        shift += 7;
        if c & 0x80 == 0 {
            return Ok(value);
        }
    }
}

/// Applies a git delta (copy and insert ops) to `base`; the result is at
/// most `limit` bytes.
fn apply_delta(base: &[u8], delta: &[u8], limit: usize) -> Result<Vec<u8>, DeltaError> {
    let mut i = 0;
    if delta_varint(delta, &mut i)? != base.len() {
        return Err(DeltaError::BaseSize);
    }
    let size = delta_varint(delta, &mut i)?;
    if size > limit {
        return Err(DeltaError::TooLarge);
    }
    let mut out = Vec::with_capacity(size.min(SCRATCH));
    while let Some(&cmd) = delta.get(i) {
        i += 1;
        let piece = if cmd & 0x80 != 0 {
            let mut field = |bits: &[(u8, u32)]| -> Result<usize, DeltaError> {
                let mut v = 0usize;
                for &(bit, shift) in bits {
                    if cmd & bit != 0 {
                        v |= usize::from(*delta.get(i).ok_or(DeltaError::Range)?) << shift;
                        i += 1;
                    }
                }
                Ok(v)
            };
            let offset = field(&[(1, 0), (2, 8), (4, 16), (8, 24)])?;
            let mut len = field(&[(0x10, 0), (0x20, 8), (0x40, 16)])?;
            if len == 0 {
                len = 0x10000;
            }
            base.get(offset..offset.checked_add(len).ok_or(DeltaError::Range)?)
                .ok_or(DeltaError::Range)?
        } else if cmd != 0 {
            let len = usize::from(cmd);
            let piece = delta.get(i..i + len).ok_or(DeltaError::Range)?;
            i += len;
            piece
        } else {
            return Err(DeltaError::Opcode);
        };
        if out.len() + piece.len() > size {
            return Err(DeltaError::ResultSize);
        }
        out.extend_from_slice(piece);
    }
    if out.len() != size {
        return Err(DeltaError::ResultSize);
    }
    Ok(out)
}
