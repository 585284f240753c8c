//! The spooling shipper: the local journal is the spool; the shipper sends
//! its sealed lines as they are, from the last acknowledged record on, and
//! persists that point in `<journal>.ship-<hash of url>`.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::format::{self, JournalId};
use crate::record::Kind;
use crate::verify::{Anchor, MAX_LINE_LEN};

use super::net::{Link, LinkError, ShipUrl, Timeouts, TlsConnector};
use super::wire::{self, Hostname};

/// How the shipper connects, batches and retries.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ShipOptions {
    /// Messages sent before waiting for their acknowledgements (RELP).
    pub window: usize,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Read and write timeout on the connection.
    pub io_timeout: Duration,
    /// First wait after a failed delivery; doubled at each failure.
    pub backoff_min: Duration,
    /// Longest wait between attempts.
    pub backoff_max: Duration,
    /// How often [`Shipper::run`] looks for new records when idle.
    pub poll: Duration,
    /// The RFC 5424 HOSTNAME written into every message.
    pub hostname: Hostname,
    /// While records flow, the acknowledged point is written to the state
    /// file (with `fsync`) once per this many acknowledged messages; it is
    /// also written whenever the shipper goes idle, fails, finishes or is
    /// dropped. A crash loses at most this many acknowledgements, which
    /// are then sent again (at least once).
    pub persist_every: usize,
    /// How long one [`Shipper::ship_available`] keeps taking new records
    /// while the journal grows under it. Past it, the pass stops sending
    /// at the next record boundary, drains its window and returns, so a
    /// caller that watches the lag (the backlog bound) sees it at least
    /// this often even when records never stop coming.
    pub turn: Duration,
    /// The TLS client of `syslog+tls://` URLs; [`Shipper::new`] refuses
    /// such a URL without one (never shipped in clear text).
    pub tls: Option<Arc<dyn TlsConnector>>,
    /// Without acknowledgements (`syslog+tcp`, `syslog+tls`), how long a
    /// message must have been written, on a connection found still open
    /// afterwards, before it counts as shipped. A collector that closes
    /// or refuses the connection within it makes the shipper send those
    /// messages again on a new one (at least once).
    pub confirm_after: Duration,
}

impl Default for ShipOptions {
    fn default() -> Self {
        Self {
            window: 128,
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(30),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            poll: Duration::from_millis(50),
            hostname: Hostname::nil(),
            persist_every: 4096,
            turn: Duration::from_millis(200),
            tls: None,
            confirm_after: Duration::from_secs(1),
        }
    }
}

impl ShipOptions {
    /// With this HOSTNAME.
    #[must_use]
    pub fn with_hostname(mut self, hostname: Hostname) -> Self {
        self.hostname = hostname;
        self
    }

    /// With this backoff range.
    #[must_use]
    pub fn with_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff_min = min;
        self.backoff_max = max.max(min);
        self
    }

    /// With this window (at least 1).
    #[must_use]
    pub fn with_window(mut self, window: usize) -> Self {
        self.window = window.max(1);
        self
    }

    /// With the state file written once per `n` acknowledged messages
    /// while records flow (at least 1).
    #[must_use]
    pub fn with_persist_every(mut self, n: usize) -> Self {
        self.persist_every = n.max(1);
        self
    }

    /// With this turn: how long one pass takes new records.
    #[must_use]
    pub fn with_turn(mut self, turn: Duration) -> Self {
        self.turn = turn;
        self
    }

    /// With this TLS client for `syslog+tls://` URLs.
    #[must_use]
    pub fn with_tls(mut self, tls: Arc<dyn TlsConnector>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// With this confirmation delay for links without acknowledgements.
    #[must_use]
    pub fn with_confirm_after(mut self, wait: Duration) -> Self {
        self.confirm_after = wait;
        self
    }

    /// With these timeouts.
    #[must_use]
    pub fn with_timeouts(mut self, connect: Duration, io: Duration) -> Self {
        self.connect_timeout = connect;
        self.io_timeout = io;
        self
    }
}

/// Where shipping stands: the acknowledged point, written to the state file
/// as [`ShipOptions::persist_every`] says.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ShipState {
    /// The journal shipped (known after its first record).
    pub journal: Option<JournalId>,
    /// The first seq not yet acknowledged.
    pub next_seq: u64,
    /// The byte offset of that record's line in the journal.
    pub offset: u64,
    /// Whether `journal_closed` and its anchor were acknowledged.
    pub done: bool,
}

const STATE_MAGIC: &str = "palisade-ship v1";

impl ShipState {
    fn encode(&self) -> String {
        let journal = self
            .journal
            .map_or_else(|| "-".to_owned(), |id| id.to_hex());
        format!(
            "{STATE_MAGIC} {journal} {} {} {}\n",
            self.next_seq,
            self.offset,
            u8::from(self.done)
        )
    }

    fn decode(text: &str) -> Option<Self> {
        let rest = text.strip_prefix(STATE_MAGIC)?.strip_suffix('\n')?;
        let mut it = rest.strip_prefix(' ')?.split(' ');
        let journal = match it.next()? {
            "-" => None,
            hex => Some(JournalId::from_hex(hex)?),
        };
        let next_seq = it.next()?.parse().ok()?;
        let offset = it.next()?.parse().ok()?;
        let done = match it.next()? {
            "0" => false,
            "1" => true,
            _ => return None,
        };
        it.next().is_none().then_some(Self {
            journal,
            next_seq,
            offset,
            done,
        })
    }
}

/// Why shipping stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShipError {
    /// The collector is unreachable or refused; retried by [`Shipper::run`].
    #[error(transparent)]
    Link(#[from] LinkError),
    /// The journal or the state file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The journal no longer holds what was shipped (truncated, replaced,
    /// rewritten) or holds a line that is not a record: shipping stops
    /// rather than ship something else under the shipped seqs.
    #[error("{path}: {detail}")]
    JournalChanged {
        /// The journal.
        path: PathBuf,
        /// What differs.
        detail: String,
    },
    /// The state file is not one this shipper wrote.
    #[error("{path}: not a ship state file")]
    State {
        /// The state file.
        path: PathBuf,
    },
    /// A `syslog+tls://` URL with no [`ShipOptions::tls`]: refused rather
    /// than shipped in clear text.
    #[error("{url}: no TLS client configured (a CA to verify the collector is required)")]
    NoTls {
        /// The URL.
        url: String,
    },
}

/// What one pass shipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// Messages delivered (records and anchors; acknowledged for RELP).
    pub delivered: u64,
    /// Whether the journal's end (`journal_closed`) was delivered.
    pub done: bool,
}

struct Item {
    msg: Vec<u8>,
    /// The state once this message is delivered; `None` when a message that
    /// belongs with it (an anchor) follows.
    commit: Option<ShipState>,
}

/// Ships one journal to one collector, resuming where the last
/// acknowledged batch ended (at-least-once: a batch sent but not
/// acknowledged is sent again).
#[derive(Debug)]
pub struct Shipper {
    journal: PathBuf,
    url: ShipUrl,
    state_path: PathBuf,
    state: ShipState,
    /// Acknowledged messages since the state file was last written; `0`
    /// when it holds `state`.
    unpersisted: usize,
    opts: ShipOptions,
    link: Option<Link>,
    /// Without acknowledgements: the points written on the open link and
    /// not yet confirmed ([`ShipOptions::confirm_after`]), oldest first,
    /// with when they were written and how many messages each covers.
    unconfirmed: VecDeque<(Instant, ShipState, usize)>,
}

impl Shipper {
    /// The state file of `journal` shipped to `url`:
    /// `<journal>.ship-<first 16 hex digits of SHA-256(url)>`.
    #[must_use]
    pub fn state_path(journal: &Path, url: &ShipUrl) -> PathBuf {
        let digest = Sha256::digest(url.as_url().as_bytes());
        let hash = hex::encode(digest.get(..8).unwrap_or_default());
        let mut name = journal.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".ship-{hash}"));
        journal.with_file_name(name)
    }

    /// A shipper for `journal`, resuming from its state file if there is one.
    ///
    /// # Errors
    /// A state file that cannot be read or is not one this shipper writes;
    /// a `syslog+tls://` URL without [`ShipOptions::tls`].
    pub fn new(journal: &Path, url: ShipUrl, opts: ShipOptions) -> Result<Self, ShipError> {
        if url.tls() && opts.tls.is_none() {
            return Err(ShipError::NoTls { url: url.as_url() });
        }
        let state_path = Self::state_path(journal, &url);
        // Read at most one byte past the longest state a shipper writes.
        let read = File::open(&state_path).and_then(|file| {
            let mut bytes = Vec::new();
            file.take(257).read_to_end(&mut bytes)?;
            Ok(bytes)
        });
        let state = match read {
            Ok(bytes) if bytes.len() <= 256 => std::str::from_utf8(&bytes)
                .ok()
                .and_then(ShipState::decode)
                .ok_or_else(|| ShipError::State {
                    path: state_path.clone(),
                })?,
            Ok(_) => {
                return Err(ShipError::State {
                    path: state_path.clone(),
                });
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => ShipState::default(),
            Err(source) => {
                return Err(ShipError::Io {
                    path: state_path,
                    source,
                });
            }
        };
        Ok(Self {
            journal: journal.to_owned(),
            url,
            state_path,
            state,
            opts,
            unpersisted: 0,
            link: None,
            unconfirmed: VecDeque::new(),
        })
    }

    /// Where shipping stands: the last acknowledged point (the state file
    /// may lag it; see [`Shipper::sync_state`]).
    #[must_use]
    pub fn state(&self) -> &ShipState {
        &self.state
    }

    fn changed(&self, detail: String) -> ShipError {
        ShipError::JournalChanged {
            path: self.journal.clone(),
            detail,
        }
    }

    /// Records an acknowledged point, writing the state file once per
    /// `persist_every` acknowledgements and at the journal's end.
    /// Without acknowledgements: counts what was written at least
    /// `confirm_after` ago as shipped if the link is still open; forgets
    /// everything unconfirmed (to be sent again) if it is not, or if the
    /// link is gone. After the journal's end, closes the link cleanly
    /// first: a clean close confirms all.
    fn confirm(&mut self) -> Result<(), ShipError> {
        let Some(last) = self.unconfirmed.back() else {
            return Ok(());
        };
        let Some(link) = self.link.as_mut() else {
            self.unconfirmed.clear();
            return Ok(());
        };
        if last.1.done {
            let closed = self.link.take().map(Link::close);
            if let Some(Err(err)) = closed {
                self.unconfirmed.clear();
                return Err(err.into());
            }
            while let Some((_, state, n)) = self.unconfirmed.pop_front() {
                self.acked(state, n)?;
            }
            return Ok(());
        }
        if let Err(err) = link.check_open() {
            self.link = None;
            self.unconfirmed.clear();
            return Err(err.into());
        }
        let now = Instant::now();
        while let Some(&(at, ..)) = self.unconfirmed.front() {
            if now.saturating_duration_since(at) < self.opts.confirm_after {
                break;
            }
            if let Some((_, state, n)) = self.unconfirmed.pop_front() {
                self.acked(state, n)?;
            }
        }
        Ok(())
    }

    fn acked(&mut self, state: ShipState, messages: usize) -> Result<(), ShipError> {
        self.state = state;
        self.unpersisted = self.unpersisted.saturating_add(messages.max(1));
        if self.unpersisted >= self.opts.persist_every || self.state.done {
            self.sync_state()?;
        }
        Ok(())
    }

    /// Writes the acknowledged point to the state file now (`fsync`, then
    /// an atomic rename), if it is not there yet. [`Shipper::run`] calls it
    /// whenever it goes idle and when it returns; dropping a shipper calls
    /// it too, ignoring errors.
    ///
    /// # Errors
    /// The state file could not be written.
    pub fn sync_state(&mut self) -> Result<(), ShipError> {
        if self.unpersisted == 0 {
            return Ok(());
        }
        let io = |source| ShipError::Io {
            path: self.state_path.clone(),
            source,
        };
        let mut tmp_name = self.state_path.as_os_str().to_owned();
        tmp_name.push(".tmp");
        let tmp = PathBuf::from(tmp_name);
        let mut file = File::create(&tmp).map_err(io)?;
        file.write_all(self.state.encode().as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &self.state_path).map_err(io)?;
        self.unpersisted = 0;
        Ok(())
    }

    /// Reads the messages of up to `max` records from the journal after
    /// `from` (a seal brings its anchor along).
    fn read_batch(
        &self,
        reader: &mut BufReader<File>,
        from: &mut ShipState,
        max: usize,
    ) -> Result<VecDeque<Item>, ShipError> {
        let mut items = VecDeque::new();
        let mut line = Vec::new();
        while items.len() < max && !from.done {
            line.clear();
            let limit = (MAX_LINE_LEN + 1) as u64;
            let n = Read::take(&mut *reader, limit)
                .read_until(b'\n', &mut line)
                .map_err(|source| ShipError::Io {
                    path: self.journal.clone(),
                    source,
                })?;
            let Some(body) = line.strip_suffix(b"\n") else {
                if n as u64 >= limit {
                    return Err(self.changed(format!(
                        "the line at byte {} is longer than {MAX_LINE_LEN} bytes",
                        from.offset
                    )));
                }
                // The end, or a line still being written: step back to
                // its start, so that the next read (in this pass or the
                // next) reads it whole, never its tail as a line.
                let back = i64::try_from(n).unwrap_or(i64::MAX);
                reader
                    .seek_relative(-back)
                    .map_err(|source| ShipError::Io {
                        path: self.journal.clone(),
                        source,
                    })?;
                break;
            };
            let rec = format::parse_line(body).map_err(|why| {
                self.changed(format!(
                    "the line at byte {} is not a record: {why}",
                    from.offset
                ))
            })?;
            let id = std::str::from_utf8(rec.journal)
                .ok()
                .and_then(JournalId::from_hex)
                .ok_or_else(|| self.changed("a record's journal id is malformed".to_owned()))?;
            if from.journal.is_some_and(|j| j != id) {
                return Err(self.changed(format!(
                    "the line at byte {} belongs to journal {id}, not to the journal shipped",
                    from.offset
                )));
            }
            if rec.seq != from.next_seq {
                return Err(self.changed(format!(
                    "the line at byte {} has seq {}, expected {}: the journal was truncated or rewritten after shipping",
                    from.offset, rec.seq, from.next_seq
                )));
            }
            let kind = std::str::from_utf8(rec.kind)
                .ok()
                .and_then(|k| Kind::parse(k).ok());
            let seal = matches!(kind, Some(Kind::EpochSealed | Kind::JournalClosed));
            let closed = matches!(kind, Some(Kind::JournalClosed));
            let anchor = Anchor {
                journal: id,
                seq: rec.seq,
                epoch: rec.epoch,
                mac: rec.mac,
            };
            let msg = wire::encode_parsed(body, &rec, &self.opts.hostname)
                .map_err(|e| self.changed(e.to_string()))?;
            from.journal = Some(id);
            from.next_seq = rec.seq.saturating_add(1);
            from.offset = from.offset.saturating_add(line.len() as u64);
            from.done = closed;
            if seal {
                items.push_back(Item { msg, commit: None });
                items.push_back(Item {
                    msg: wire::encode_anchor(&anchor, &self.opts.hostname),
                    commit: Some(from.clone()),
                });
            } else {
                items.push_back(Item {
                    msg,
                    commit: Some(from.clone()),
                });
            }
        }
        Ok(items)
    }

    /// Ships the complete records the journal holds, keeping up to
    /// `window` messages unacknowledged (a sliding window: each answer lets
    /// the next message go, so the connection never idles between
    /// batches), for at most one [`ShipOptions::turn`] of new records
    /// (then the window drains and the rest waits for the next pass);
    /// returns what was delivered. The acknowledged point is
    /// persisted every `window` answers and when the window drains. A link
    /// failure drops the connection (the next call reconnects and resends
    /// from the last persisted point: at least once).
    ///
    /// # Errors
    /// The collector's failures ([`ShipError::Link`]), the journal's and
    /// the state file's.
    pub fn ship_available(&mut self) -> Result<Progress, ShipError> {
        let mut progress = Progress {
            delivered: 0,
            done: self.state.done,
        };
        if self.state.done {
            return Ok(progress);
        }
        if !self.url.acknowledged() {
            self.confirm()?;
            progress.done = self.state.done;
            if self.state.done {
                return Ok(progress);
            }
        }
        // Where the next message starts: after what was written and awaits
        // confirmation, else after what was shipped.
        let start = self
            .unconfirmed
            .back()
            .map_or_else(|| self.state.clone(), |(_, state, _)| state.clone());
        let io = |source| ShipError::Io {
            path: self.journal.clone(),
            source,
        };
        let mut file = File::open(&self.journal).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(self.changed("not a regular file".to_owned()));
        }
        if meta.len() < start.offset {
            return Err(self.changed(format!(
                "the journal is {} bytes, shorter than the {} bytes already shipped: truncated or replaced",
                meta.len(),
                start.offset
            )));
        }
        file.seek(SeekFrom::Start(start.offset)).map_err(io)?;
        let mut reader = BufReader::with_capacity(1 << 16, file);
        let mut cursor = start;
        let window = self.opts.window.max(1);
        let mut pending = self.read_batch(&mut reader, &mut cursor, window)?;
        if pending.is_empty() {
            return Ok(progress);
        }
        let mut link = match self.link.take() {
            Some(link) => link,
            None => Link::connect(
                &self.url,
                Timeouts {
                    connect: self.opts.connect_timeout,
                    io: self.opts.io_timeout,
                },
                self.opts.tls.as_ref(),
            )?,
        };
        let mut delivered = 0;
        let shipped = self.stream(
            &mut link,
            &mut reader,
            &mut cursor,
            &mut pending,
            &mut delivered,
        );
        progress.delivered = delivered;
        if let Err(err) = shipped {
            // What was acknowledged stays acknowledged; what was only
            // written is sent again.
            self.unconfirmed.clear();
            self.sync_state()?;
            return Err(err);
        }
        progress.done = self.state.done;
        if self.state.done {
            // The journal is complete: end the session cleanly.
            link.close()?;
        } else {
            self.link = Some(link);
        }
        Ok(progress)
    }

    /// The sliding window of [`Shipper::ship_available`]: sends while fewer
    /// than `window` messages await an answer, reading more of the journal
    /// as it goes, until everything read is answered.
    fn stream(
        &mut self,
        link: &mut Link,
        reader: &mut BufReader<File>,
        cursor: &mut ShipState,
        pending: &mut VecDeque<Item>,
        delivered: &mut u64,
    ) -> Result<(), ShipError> {
        let window = self.opts.window.max(1);
        let acknowledged = self.url.acknowledged();
        // The commit state of each message sent and not yet answered.
        let mut unanswered: VecDeque<Option<ShipState>> = VecDeque::with_capacity(window);
        // Answered messages since the last commit state (a record whose
        // anchor follows it).
        let mut uncommitted = 0;
        // The turn: past it, no new message goes out once the last one
        // sent completes its record (a record and its anchor go together,
        // else the pair would be sent twice); something is always
        // delivered first, so every pass makes progress.
        let until = Instant::now() + self.opts.turn;
        let mut at_boundary = true;
        loop {
            // Refill before waiting on the socket, not after every answer:
            // the answers of one read are taken first, so the messages go
            // out in bursts (a write per segment of answers, not per
            // answer); and each burst carries the TCP acknowledgement that
            // lets a collector using Nagle's algorithm (librelp does) send
            // its next answers, instead of waiting for a delayed ACK.
            let refill = !link.answer_buffered();
            let turn_over = *delivered > 0 && Instant::now() >= until;
            while refill && unanswered.len() < window && !(turn_over && at_boundary) {
                if pending.is_empty() {
                    *pending = self.read_batch(reader, cursor, window - unanswered.len())?;
                }
                let Some(item) = pending.pop_front() else {
                    break;
                };
                link.send(&item.msg)?;
                at_boundary = item.commit.is_some();
                unanswered.push_back(item.commit);
            }
            // What the window holds goes out in one write.
            link.flush()?;
            let Some(commit) = unanswered.pop_front() else {
                return Ok(());
            };
            // No answer without RELP: written awaits confirmation.
            if acknowledged {
                link.await_response()?;
            }
            *delivered += 1;
            uncommitted += 1;
            if let Some(state) = commit {
                if acknowledged {
                    self.acked(state, uncommitted)?;
                } else {
                    self.unconfirmed
                        .push_back((Instant::now(), state, uncommitted));
                }
                uncommitted = 0;
            }
        }
    }

    /// Ships until the journal's end was delivered or `stop()` says so,
    /// retrying a collector outage with exponential backoff (from
    /// `backoff_min` to `backoff_max`); new records are looked for every
    /// `poll`.
    ///
    /// # Errors
    /// Anything but a link failure: the journal changed under the shipper,
    /// or its files could not be read or written.
    pub fn run(&mut self, stop: &dyn Fn() -> bool) -> Result<ShipState, ShipError> {
        let mut backoff = self.opts.backoff_min;
        while !stop() {
            match self.ship_available() {
                Ok(progress) if progress.done => break,
                Ok(progress) => {
                    backoff = self.opts.backoff_min;
                    if progress.delivered == 0 {
                        // Idle: the acknowledged point goes to disk now.
                        self.sync_state()?;
                        std::thread::sleep(self.opts.poll);
                    }
                }
                Err(ShipError::Link(_)) => {
                    self.link = None;
                    sleep_unless(backoff, self.opts.poll, stop);
                    backoff = backoff.saturating_mul(2).min(self.opts.backoff_max);
                }
                Err(err) => {
                    // Keep what was acknowledged; the failure is the news.
                    let _ = self.sync_state();
                    return Err(err);
                }
            }
        }
        self.sync_state()?;
        Ok(self.state.clone())
    }
}

impl Drop for Shipper {
    fn drop(&mut self) {
        // Best effort: an unwritten point only means records sent again.
        let _ = self.sync_state();
    }
}

/// Sleeps `total`, in steps of at most `step`, returning early once `stop()`.
fn sleep_unless(total: Duration, step: Duration, stop: &dyn Fn() -> bool) {
    let step = step.max(Duration::from_millis(1));
    let mut left = total;
    while !left.is_zero() && !stop() {
        let now = left.min(step);
        std::thread::sleep(now);
        left = left.saturating_sub(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_refuses_other_text() {
        let state = ShipState {
            journal: Some(JournalId::from_bytes([7; 16])),
            next_seq: 12,
            offset: 3456,
            done: false,
        };
        assert_eq!(ShipState::decode(&state.encode()), Some(state.clone()));
        let fresh = ShipState::default();
        assert_eq!(ShipState::decode(&fresh.encode()), Some(fresh));
        assert_eq!(ShipState::decode("palisade-ship v1 - 1 2 3\n"), None);
        assert_eq!(ShipState::decode("palisade-ship v1 - 1 2 0 x\n"), None);
        assert_eq!(ShipState::decode(""), None);
    }

    #[test]
    fn state_path_depends_on_the_url() {
        let j = Path::new("/var/log/run.jsonl");
        let a = Shipper::state_path(j, &ShipUrl::Relp { addr: "a:1".into() });
        let b = Shipper::state_path(j, &ShipUrl::Relp { addr: "b:1".into() });
        assert_ne!(a, b);
        assert!(a.to_string_lossy().starts_with("/var/log/run.jsonl.ship-"));
    }
}
