//! The journal writer: one per journal file (a lock file enforces it),
//! shared cheaply between threads, with group commit.
//!
//! Appends are sealed in order under a mutex (the chain is sequential by
//! nature) into a pending buffer. In [`Durability::Synced`] mode an append
//! returns only once a `write` plus `fdatasync` covering its record has
//! completed; whichever waiting appender finds no flush in progress becomes
//! the leader and flushes everything pending, so concurrent appends share
//! one `fdatasync` (group commit).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::num::NonZeroU64;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::format::{self, Fields, JournalId, MacBytes};
use crate::key::{JournalKey, KeyError, MacState};
use crate::record::{Body, Entry, Flags, Kind, MAX_SESSION_LEN, RecordError, Timestamp};
use crate::verify::{Anchor, Failure, OpenedBody, Replay, SealBody};

/// Most empty epochs sealed in one go before the writer refuses (a clock
/// jump of years with short epochs).
const MAX_CATCH_UP_SEALS: u64 = 1_000_000;
/// In unsynced mode, pending bytes are handed to the OS past this size.
const UNSYNCED_BUFFER: usize = 1 << 20;

/// When epochs end. Fixed when the journal is created (it is written into
/// the `journal_opened` record) and enforced by the verifier.
///
/// Made with [`SealPolicy::default`] or [`SealPolicy::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SealPolicy {
    /// Seal after this many records in the epoch.
    pub every_records: Option<NonZeroU64>,
    /// Seal when this many milliseconds have passed since the epoch began
    /// (checked at each append, at [`JournalWriter::tick`] and at close;
    /// elapsed empty epochs are sealed too).
    pub every_millis: Option<NonZeroU64>,
}

impl SealPolicy {
    /// Seal after `every_records` records in an epoch and/or when
    /// `every_millis` milliseconds have passed since it began (`None`: no
    /// such limit).
    #[must_use]
    pub const fn new(every_records: Option<NonZeroU64>, every_millis: Option<NonZeroU64>) -> Self {
        Self {
            every_records,
            every_millis,
        }
    }
}

impl Default for SealPolicy {
    /// Every 10,000 records or every 15 minutes, whichever comes first.
    fn default() -> Self {
        Self {
            every_records: NonZeroU64::new(10_000),
            every_millis: NonZeroU64::new(15 * 60 * 1000),
        }
    }
}

/// When an append is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// An append returns once its record is written and `fdatasync`ed.
    /// Pending records are flushed as soon as `batch` are pending, when a
    /// waiting appender has waited `max_latency` without a flush, or at once
    /// when only one appender is waiting (a lone appender never waits for
    /// company; records that arrive during a flush form the next batch).
    Synced {
        /// Records that trigger a flush at once (1 = every record).
        batch: usize,
        /// Longest an acknowledged append waits for its batch to fill.
        max_latency: Duration,
    },
    /// An append returns once its record is in the writer's buffer. Records
    /// reach the OS in 1 MiB chunks and disk only at [`JournalWriter::sync`]
    /// or close: **a crash loses them**. Meant for benchmarks and tests.
    Unsynced,
}

impl Default for Durability {
    /// Group commit of up to 64 records, waiting at most 2 ms.
    fn default() -> Self {
        Self::Synced {
            batch: 64,
            max_latency: Duration::from_millis(2),
        }
    }
}

/// How a writer behaves: [`WriterOptions::default`] (synced group commit,
/// the default seal policy), adjusted with the `with_` methods.
///
/// ```
/// use palisade_evidence::{Durability, SealPolicy, WriterOptions};
/// let options = WriterOptions::default()
///     .with_durability(Durability::Unsynced)
///     .with_seal(SealPolicy::new(std::num::NonZeroU64::new(100), None));
/// assert_eq!(options.durability, Durability::Unsynced);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriterOptions {
    /// When appends are acknowledged.
    pub durability: Durability,
    /// When epochs end (used only when creating a journal).
    pub seal: SealPolicy,
}

impl WriterOptions {
    /// The same options with `durability`.
    #[must_use]
    pub const fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The same options with the seal policy `seal`.
    #[must_use]
    pub const fn with_seal(mut self, seal: SealPolicy) -> Self {
        self.seal = seal;
        self
    }
}

/// An acknowledged append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Receipt {
    /// The record's sequence number.
    pub seq: u64,
    /// The epoch that sealed it.
    pub epoch: u64,
}

/// What [`JournalWriter::open`] found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenReport {
    /// Records already in the journal (after recovery).
    pub records: u64,
    /// The current epoch.
    pub epoch: u64,
    /// When a torn final line was cut: its length; a `recovered_torn_tail`
    /// record at `recovery_seq` describes it.
    pub cut_bytes: Option<u64>,
    /// The `seq` of the `recovered_torn_tail` record, if one was written.
    pub recovery_seq: Option<u64>,
}

/// Errors from the journal writer. Messages never contain key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// A file operation failed.
    #[error("{op} `{path}`: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Another writer holds the journal's lock file.
    #[error("journal `{path}` is locked by another writer (lock file `{lock}`)")]
    Locked {
        /// The journal.
        path: PathBuf,
        /// Its lock file.
        lock: PathBuf,
    },
    /// `create` found an existing file.
    #[error("journal `{path}` already exists")]
    Exists {
        /// The journal.
        path: PathBuf,
    },
    /// The journal ends with `journal_closed` and takes no more records.
    #[error("the journal is closed")]
    Closed,
    /// Opening found an invalid record before the tail: tampering, which is
    /// never repaired.
    #[error("the journal does not verify ({kind} at seq {seq}, line {line}): {message}", kind = .0.kind, seq = .0.seq, line = .0.line, message = .0.message)]
    Tampered(Box<Failure>),
    /// The journal has no records.
    #[error("the journal is empty")]
    Empty,
    /// The key is for an epoch the journal has not reached.
    #[error("the key is for epoch {key_epoch} but the journal is at epoch {journal_epoch}")]
    KeyTooNew {
        /// The key's epoch.
        key_epoch: u64,
        /// The journal's current epoch.
        journal_epoch: u64,
    },
    /// A new journal must start with the initial key.
    #[error("a new journal needs the initial key (epoch 0); this key is at epoch {0}")]
    KeyNotInitial(u64),
    /// A bad entry.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Key generation failed.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// An earlier write or sync failed; the writer takes no more records
    /// (reopen the journal to recover).
    #[error("an earlier write failed, the writer is stopped: {0}")]
    Failed(String),
    /// The time moved so far that too many empty epochs would be sealed.
    #[error("time moved forward by {epochs} epochs at once; refusing to seal that many")]
    TimeJump {
        /// Epochs that would have been sealed.
        epochs: u64,
    },
}

/// A writer for one journal file. Cloning is cheap (an `Arc`); clones may
/// append from any thread. Use `tokio::task::spawn_blocking` from async code,
/// since a synced append blocks until its batch is on disk.
#[derive(Clone, Debug)]
pub struct JournalWriter {
    inner: Arc<Inner>,
}

/// A record submitted but not yet known to be durable; see
/// [`JournalWriter::submit`].
#[derive(Debug)]
#[must_use = "a ticket must be waited on to know the record is durable"]
pub struct Ticket {
    inner: Arc<Inner>,
    receipt: Receipt,
}

impl Ticket {
    /// The record's position.
    pub fn receipt(&self) -> Receipt {
        self.receipt
    }

    /// Blocks until the record is durable (in unsynced mode: returns at once).
    ///
    /// # Errors
    /// Fails when the write or sync of its batch failed.
    pub fn wait(self) -> Result<Receipt, JournalError> {
        self.inner.wait_durable(self.receipt.seq)?;
        Ok(self.receipt)
    }
}

struct Inner {
    state: Mutex<State>,
    flushed: Condvar,
    file: File,
    path: PathBuf,
    durability: Durability,
    /// Held for the writer's lifetime; the OS releases the lock on close.
    _lock: File,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalWriter")
            .field("path", &self.path)
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

struct State {
    chain: Chain,
    /// Sealed lines not yet handed to the OS.
    buf: Vec<u8>,
    spare: Vec<u8>,
    pending_records: usize,
    /// The newest sealed record (durable or not).
    newest: Option<Anchor>,
    /// The newest record known durable (or written, in unsynced mode).
    durable: Option<Anchor>,
    flushing: bool,
    /// Appenders blocked in `wait_durable`.
    waiters: usize,
    failed: Option<String>,
    closed: bool,
}

/// The sealing state: what the next record chains onto.
struct Chain {
    id: JournalId,
    id_hex: [u8; 32],
    next_seq: u64,
    epoch: u64,
    key: JournalKey,
    mac_key: MacState,
    prev_mac: MacBytes,
    last_time: u64,
    epoch_start: u64,
    records_in_epoch: u64,
    policy: OpenedBody,
}

impl JournalWriter {
    /// Creates a new journal at `path` (refusing to overwrite), writes its
    /// `journal_opened` record with the seal policy, and syncs it and its
    /// directory.
    ///
    /// # Errors
    /// Fails when the file exists, is locked, cannot be written, or `key` is
    /// not an initial key.
    pub fn create(
        path: &Path,
        key: &JournalKey,
        options: &WriterOptions,
        now: Timestamp,
    ) -> Result<Self, JournalError> {
        if key.epoch() != 0 {
            return Err(JournalError::KeyNotInitial(key.epoch()));
        }
        let lock = take_lock(path)?;
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|source| {
                if source.kind() == std::io::ErrorKind::AlreadyExists {
                    JournalError::Exists {
                        path: path.to_owned(),
                    }
                } else {
                    io_err("create", path, source)
                }
            })?;
        let id = JournalId::generate()?;
        let mut id_hex = [0u8; 32];
        id_hex.copy_from_slice(id.to_hex().as_bytes());
        let policy = OpenedBody {
            format: 1,
            seal_every_millis: options.seal.every_millis.map(NonZeroU64::get),
            seal_every_records: options.seal.every_records.map(NonZeroU64::get),
        };
        let chain = Chain {
            id,
            id_hex,
            next_seq: 0,
            epoch: 0,
            key: key.clone(),
            mac_key: key.mac_state(),
            prev_mac: [0u8; 32],
            last_time: now.0,
            epoch_start: now.0,
            records_in_epoch: 0,
            policy,
        };
        let writer = Self::from_parts(path, file, lock, chain, options.durability, None);
        let body = Body::from_serialize(&policy)?;
        let mut st = writer.inner.lock();
        st.seal_internal(now.0, &Kind::JournalOpened, &body)?;
        st.seal_if_full(now.0)?;
        let st = writer.inner.flush_locked(st, true);
        let failed = st.failed.clone();
        drop(st);
        if let Some(err) = failed {
            return Err(JournalError::Failed(err));
        }
        sync_parent_dir(path)?;
        Ok(writer)
    }

    /// Opens an existing journal for appending. The whole file is replayed
    /// first; epochs from the key's epoch on are verified with their keys.
    /// A torn final line is cut and a `recovered_torn_tail` record written;
    /// any other invalid record refuses the open.
    ///
    /// `key` may be the initial key or an evolved one (forward security: a
    /// host that keeps only the current epoch's key).
    ///
    /// # Errors
    /// Fails when the journal is locked, closed, empty, invalid before its
    /// tail, cannot be read or written, or the key is for a later epoch.
    pub fn open(
        path: &Path,
        key: &JournalKey,
        options: &WriterOptions,
        now: Timestamp,
    ) -> Result<(Self, OpenReport), JournalError> {
        let lock = take_lock(path)?;
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(|source| io_err("open", path, source))?;
        // A FIFO would block the replay forever and a device would feed it
        // without end: only a regular file is a journal (checked on the
        // opened descriptor).
        let meta = file
            .metadata()
            .map_err(|source| io_err("stat", path, source))?;
        if !meta.file_type().is_file() {
            let source = std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file (a journal must be one)",
            );
            return Err(io_err("open", path, source));
        }
        let mut verifier = Replay::for_writer(key);
        let tail = verifier
            .feed_reader(&mut file)
            .map_err(|source| io_err("read", path, source))?;
        if let Some(failure) = &verifier.report().failure {
            return Err(JournalError::Tampered(Box::new(failure.clone())));
        }
        let st = verifier.state();
        if st.closed {
            return Err(JournalError::Closed);
        }
        let Some(id_hex) = st.journal else {
            return Err(JournalError::Empty);
        };
        if key.epoch() > st.epoch {
            return Err(JournalError::KeyTooNew {
                key_epoch: key.epoch(),
                journal_epoch: st.epoch,
            });
        }
        let id = format::parse_lower_hex::<16>(&id_hex)
            .map(JournalId::from_bytes)
            .ok_or(JournalError::Empty)?;
        let chain = Chain {
            id,
            id_hex,
            next_seq: st.next_seq,
            epoch: st.epoch,
            key: st.key.clone(),
            mac_key: st.key.mac_state(),
            prev_mac: st.prev_mac,
            last_time: st.last_time,
            epoch_start: st.epoch_start,
            records_in_epoch: st.records_in_epoch,
            policy: st.policy,
        };
        let newest = verifier.report().last.clone();
        let used = st.offset;
        let mut report = OpenReport {
            records: chain.next_seq,
            epoch: chain.epoch,
            cut_bytes: None,
            recovery_seq: None,
        };
        let cut = if tail.is_empty() {
            None
        } else {
            let digest = hex::encode(Sha256::digest(&tail));
            file.set_len(used)
                .map_err(|source| io_err("truncate the torn tail of", path, source))?;
            file.sync_data()
                .map_err(|source| io_err("sync", path, source))?;
            Some((tail.len() as u64, digest))
        };
        let writer = Self::from_parts(path, file, lock, chain, options.durability, newest);
        if let Some((cut_bytes, digest)) = cut {
            let mut st = writer.inner.lock();
            let after_seq = st.chain.next_seq.saturating_sub(1);
            let body = Body::from_value(&serde_json::json!({
                "after_seq": after_seq,
                "cut_bytes": cut_bytes,
                "cut_sha256": digest,
            }))?;
            let receipt = st.append_entry(&Entry::new(now, "", Kind::RecoveredTornTail, body))?;
            let st = writer.inner.flush_locked(st, true);
            if let Some(err) = st.failed.clone() {
                return Err(JournalError::Failed(err));
            }
            report.cut_bytes = Some(cut_bytes);
            report.recovery_seq = Some(receipt.seq);
            report.records = st.chain.next_seq;
            report.epoch = st.chain.epoch;
        }
        Ok((writer, report))
    }

    fn from_parts(
        path: &Path,
        file: File,
        lock: File,
        chain: Chain,
        durability: Durability,
        newest: Option<Anchor>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    chain,
                    buf: Vec::with_capacity(64 * 1024),
                    spare: Vec::with_capacity(64 * 1024),
                    pending_records: 0,
                    durable: newest.clone(),
                    newest,
                    flushing: false,
                    waiters: 0,
                    failed: None,
                    closed: false,
                }),
                flushed: Condvar::new(),
                file,
                path: path.to_owned(),
                durability,
                _lock: lock,
            }),
        }
    }

    /// The journal's id.
    pub fn journal_id(&self) -> JournalId {
        self.inner.lock().chain.id
    }

    /// Appends a record and returns once it is acknowledged (durable, in
    /// synced mode). Due epoch seals are written first.
    ///
    /// # Errors
    /// Fails on an invalid or reserved entry, a closed journal, or a failed
    /// write; after a failed write every later append fails too.
    pub fn append(&self, entry: &Entry) -> Result<Receipt, JournalError> {
        self.submit(entry)?.wait()
    }

    /// Seals a record into the pending batch and returns at once; the
    /// [`Ticket`] tells when it is durable. A batch that reaches its size is
    /// flushed by the submitter.
    ///
    /// # Errors
    /// As [`JournalWriter::append`], except that write failures surface in
    /// [`Ticket::wait`].
    pub fn submit(&self, entry: &Entry) -> Result<Ticket, JournalError> {
        // Only the journal writes its own kinds (a caller could pass
        // `Kind::JournalClosed` to forge an end marker). A custom kind is
        // valid by construction; its name is checked again all the same,
        // as it is written unescaped.
        let name = entry.kind.as_str();
        if !crate::record::is_valid_kind(name.as_bytes()) {
            return Err(RecordError::InvalidKind {
                kind: name.chars().take(crate::record::MAX_KIND_LEN).collect(),
            }
            .into());
        }
        if Kind::from_valid(name).is_reserved() {
            return Err(RecordError::ReservedKind {
                kind: name.to_owned(),
            }
            .into());
        }
        let mut st = self.inner.lock();
        st.usable()?;
        let receipt = st.append_entry(entry)?;
        match self.inner.durability {
            Durability::Unsynced => {
                if st.buf.len() >= UNSYNCED_BUFFER && !st.flushing {
                    drop(self.inner.flush_locked(st, false));
                }
            }
            Durability::Synced { batch, .. } => {
                if st.pending_records >= batch && !st.flushing {
                    drop(self.inner.flush_locked(st, true));
                }
            }
        }
        Ok(Ticket {
            inner: Arc::clone(&self.inner),
            receipt,
        })
    }

    /// Seals every epoch whose time is up at `now`, without adding a record,
    /// and makes the seals durable. Call it periodically so an idle writer
    /// evolves its key on time.
    ///
    /// # Errors
    /// Fails on a closed journal or a failed write.
    pub fn tick(&self, now: Timestamp) -> Result<(), JournalError> {
        let mut st = self.inner.lock();
        st.usable()?;
        let now = now.0.max(st.chain.last_time);
        st.catch_up(now)?;
        drop(st);
        self.sync().map(|_| ())
    }

    /// Writes and syncs everything pending, in any durability mode, and
    /// returns the anchor of the newest record.
    ///
    /// # Errors
    /// Fails when the write or sync fails.
    pub fn sync(&self) -> Result<Option<Anchor>, JournalError> {
        let mut st = self.inner.lock();
        loop {
            if let Some(err) = &st.failed {
                return Err(JournalError::Failed(err.clone()));
            }
            if !st.flushing {
                break;
            }
            st = self.inner.wait(st);
        }
        let st = self.inner.flush_locked(st, true);
        if let Some(err) = &st.failed {
            return Err(JournalError::Failed(err.clone()));
        }
        Ok(st.durable.clone())
    }

    /// The key of the current epoch, for a host that persists its evolving
    /// key (forward security: once it is stored, erase the older key).
    ///
    /// Persist it only after [`JournalWriter::sync`] (or `close`) returned:
    /// a key file newer than the journal's last durable seal cannot reopen
    /// the journal after a crash ([`JournalError::KeyTooNew`]).
    pub fn current_key(&self) -> JournalKey {
        self.inner.lock().chain.key.clone()
    }

    /// The anchor of the newest durable record: keep it off the host so that
    /// truncation back past it is detected.
    pub fn anchor(&self) -> Option<Anchor> {
        self.inner.lock().durable.clone()
    }

    /// Seals due epochs, writes `journal_closed` (which seals the last
    /// epoch), syncs, and stops the writer; every clone then refuses
    /// appends. Returns the final anchor.
    ///
    /// # Errors
    /// Fails when already closed or when the write fails.
    pub fn close(&self, now: Timestamp) -> Result<Anchor, JournalError> {
        let mut st = self.inner.lock();
        st.usable()?;
        let now = now.0.max(st.chain.last_time);
        st.catch_up(now)?;
        let body = Body::from_serialize(&SealBody {
            epoch: st.chain.epoch,
            records: st.chain.records_in_epoch,
        })?;
        st.seal_internal(now, &Kind::JournalClosed, &body)?;
        st.closed = true;
        loop {
            if let Some(err) = &st.failed {
                return Err(JournalError::Failed(err.clone()));
            }
            if !st.flushing {
                break;
            }
            st = self.inner.wait(st);
        }
        let st = self.inner.flush_locked(st, true);
        if let Some(err) = &st.failed {
            return Err(JournalError::Failed(err.clone()));
        }
        st.durable
            .clone()
            .ok_or_else(|| JournalError::Failed("no record was written".to_owned()))
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock can only follow a panic elsewhere; the state is
        // still consistent because every mutation completes under the lock.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.flushed
            .wait(st)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocks until `seq` is durable, leading a flush when none is running
    /// and the batch is full or has waited long enough.
    fn wait_durable(&self, seq: u64) -> Result<(), JournalError> {
        let (batch, max_latency) = match self.durability {
            Durability::Unsynced => return Ok(()),
            Durability::Synced { batch, max_latency } => (batch, max_latency),
        };
        let mut st = self.lock();
        st.waiters += 1;
        let mut waited = false;
        let res = loop {
            if st.durable.as_ref().is_some_and(|a| a.seq >= seq) {
                break Ok(());
            }
            if let Some(err) = &st.failed {
                break Err(JournalError::Failed(err.clone()));
            }
            // A lone waiter flushes at once: nobody else could join its batch.
            let due = waited || st.pending_records >= batch || batch <= 1 || st.waiters <= 1;
            if !st.flushing && due {
                st = self.flush_locked(st, true);
                continue;
            }
            let (guard, res) = self
                .flushed
                .wait_timeout(st, max_latency)
                .unwrap_or_else(PoisonError::into_inner);
            st = guard;
            waited = waited || res.timed_out();
        };
        st.waiters -= 1;
        res
    }

    /// Writes (and with `sync`, fdatasyncs) everything pending, with the
    /// lock released during the IO. The caller must have checked that no
    /// flush is running.
    fn flush_locked<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        sync: bool,
    ) -> MutexGuard<'a, State> {
        if st.failed.is_some() {
            return st;
        }
        st.flushing = true;
        let spare = std::mem::take(&mut st.spare);
        let mut buf = std::mem::replace(&mut st.buf, spare);
        let newest = st.newest.clone();
        st.pending_records = 0;
        drop(st);
        let mut res = (&self.file).write_all(&buf);
        if res.is_ok() && sync {
            res = self.file.sync_data();
        }
        buf.clear();
        let mut st = self.lock();
        st.spare = buf;
        st.flushing = false;
        match res {
            Ok(()) => st.durable = newest,
            Err(err) => {
                st.failed = Some(format!("write `{}`: {err}", self.path.display()));
            }
        }
        self.flushed.notify_all();
        st
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Best effort: hand pending records to the disk. Nothing is sealed
        // here, so an un-closed journal stays visibly open.
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if st.failed.is_none() && !st.buf.is_empty() {
            let buf = std::mem::take(&mut st.buf);
            if (&self.file).write_all(&buf).is_ok() {
                let _ = self.file.sync_data();
            }
        }
    }
}

impl State {
    fn usable(&self) -> Result<(), JournalError> {
        if let Some(err) = &self.failed {
            return Err(JournalError::Failed(err.clone()));
        }
        if self.closed {
            return Err(JournalError::Closed);
        }
        Ok(())
    }

    /// Seals a caller's entry (after due time seals), then the count seal if
    /// the epoch is full.
    fn append_entry(&mut self, entry: &Entry) -> Result<Receipt, JournalError> {
        if entry.session.len() > MAX_SESSION_LEN {
            return Err(RecordError::SessionTooLong {
                len: entry.session.len(),
            }
            .into());
        }
        let time = entry.time.0.max(self.chain.last_time);
        self.catch_up(time)?;
        let receipt = self.seal_line(time, &entry.kind, &entry.session, entry.flags, &entry.body);
        self.chain.records_in_epoch += 1;
        self.seal_if_full(time)?;
        Ok(receipt)
    }

    /// Seals the epoch at once when it holds its count of records.
    fn seal_if_full(&mut self, time: u64) -> Result<(), JournalError> {
        if let Some(max) = self.chain.policy.seal_every_records
            && self.chain.records_in_epoch >= max
        {
            self.seal_epoch(time)?;
        }
        Ok(())
    }

    /// Seals the epochs whose time is up at `time`, empty ones included.
    fn catch_up(&mut self, time: u64) -> Result<(), JournalError> {
        let Some(every) = self.chain.policy.seal_every_millis else {
            return Ok(());
        };
        let due = time.saturating_sub(self.chain.epoch_start) / every.max(1);
        if due > MAX_CATCH_UP_SEALS {
            return Err(JournalError::TimeJump { epochs: due });
        }
        while time >= self.chain.epoch_start.saturating_add(every) {
            let end = self.chain.epoch_start.saturating_add(every);
            self.seal_epoch(end)?;
        }
        Ok(())
    }

    /// Writes `epoch_sealed` for the current epoch and evolves the key.
    fn seal_epoch(&mut self, time: u64) -> Result<(), JournalError> {
        let body = Body::from_serialize(&SealBody {
            epoch: self.chain.epoch,
            records: self.chain.records_in_epoch,
        })?;
        self.seal_internal(time, &Kind::EpochSealed, &body)?;
        self.chain.key.evolve();
        self.chain.mac_key = self.chain.key.mac_state();
        self.chain.epoch += 1;
        self.chain.epoch_start = time;
        self.chain.records_in_epoch = 0;
        Ok(())
    }

    /// Seals one of the journal's own records (opened, seal, closed).
    fn seal_internal(&mut self, time: u64, kind: &Kind, body: &Body) -> Result<(), JournalError> {
        self.seal_line(time, kind, "", Flags::NONE, body);
        if *kind == Kind::JournalOpened {
            self.chain.records_in_epoch += 1;
        }
        Ok(())
    }

    fn seal_line(
        &mut self,
        time: u64,
        kind: &Kind,
        session: &str,
        flags: Flags,
        body: &Body,
    ) -> Receipt {
        let chain = &mut self.chain;
        let seq = chain.next_seq;
        let mac = format::encode_line(
            &mut self.buf,
            &Fields {
                journal: &chain.id_hex,
                seq,
                epoch: chain.epoch,
                time,
                kind: kind.as_str(),
                session,
                flags,
                body: body.as_str(),
            },
            &chain.prev_mac,
            &chain.mac_key,
        );
        chain.prev_mac = mac;
        chain.next_seq = seq.saturating_add(1);
        chain.last_time = time;
        self.pending_records += 1;
        self.newest = Some(Anchor {
            journal: chain.id,
            seq,
            epoch: chain.epoch,
            mac,
        });
        Receipt {
            seq,
            epoch: chain.epoch,
        }
    }
}

/// Creates and locks `<path>.lock`.
fn take_lock(path: &Path) -> Result<File, JournalError> {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let lock_path = PathBuf::from(name);
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|source| io_err("create the lock file", &lock_path, source))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(JournalError::Locked {
            path: path.to_owned(),
            lock: lock_path,
        }),
        Err(std::fs::TryLockError::Error(source)) => Err(io_err("lock", &lock_path, source)),
    }
}

fn sync_parent_dir(path: &Path) -> Result<(), JournalError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|source| io_err("sync the directory of", path, source))
}

fn io_err(op: &'static str, path: &Path, source: std::io::Error) -> JournalError {
    JournalError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}
