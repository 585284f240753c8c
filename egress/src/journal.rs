//! A [`Recorder`] that writes every proxy and relay record to a sealed
//! `palisade-evidence` journal.
//!
//! Records are handed to a dedicated writer thread (a synced append blocks
//! until its batch is on disk, which must not stall the proxy's IO tasks).
//! The thread collects records for [`GROUP_WINDOW`], seals them in order
//! and syncs them with one `fdatasync` (group commit). The channel is
//! bounded, so a journal that cannot keep up slows the proxy down instead
//! of dropping records. If a write fails, the recorder reports
//! itself unhealthy and the proxy refuses new connections (fail closed).
//! [`Recorder::record_accepted`] resolves once the group holding the
//! record is synced (in `Synced` mode; written, in `Buffered`), and
//! `false` when its write or sync failed or any earlier one did.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use palisade_evidence::{Anchor, Body, Entry, Flags, JournalError, JournalWriter, Kind, Timestamp};

use crate::record::{Acceptance, AcceptanceSender, ProxyEvent, Recorder};

const QUEUE: usize = 16 * 1024;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// One queued record: its time, the event, and who waits for it.
type Queued = (u64, ProxyEvent, Option<AcceptanceSender>);

/// Sends records to a journal writer thread.
pub struct JournalRecorder {
    tx: std::sync::Mutex<Option<SyncSender<Queued>>>,
    failed: Arc<AtomicBool>,
}

impl fmt::Debug for JournalRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JournalRecorder")
            .field("failed", &self.failed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The writer thread; [`JournalThread::finish`] drains it and closes the journal.
#[derive(Debug)]
pub struct JournalThread {
    handle: JoinHandle<Result<(), JournalError>>,
    writer: JournalWriter,
}

impl JournalRecorder {
    /// Start a writer thread appending to `writer` under `session`.
    pub fn start(writer: JournalWriter, session: String) -> (Arc<Self>, JournalThread) {
        let (tx, rx) = sync_channel::<Queued>(QUEUE);
        let failed = Arc::new(AtomicBool::new(false));
        let w = writer.clone();
        let f = failed.clone();
        let handle = std::thread::spawn(move || run(&w, &session, &rx, &f));
        (
            Arc::new(Self {
                tx: std::sync::Mutex::new(Some(tx)),
                failed,
            }),
            JournalThread { handle, writer },
        )
    }

    /// Stop accepting records (the thread then drains and exits).
    pub fn stop(&self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
    }
}

/// Longest the writer thread collects records before it seals and syncs
/// them as one group (the journal's own default group-commit wait).
pub const GROUP_WINDOW: Duration = Duration::from_millis(2);

/// Most records sealed and synced as one group.
const GROUP_MAX: usize = 1024;

fn run(
    writer: &JournalWriter,
    session: &str,
    rx: &Receiver<Queued>,
    failed: &AtomicBool,
) -> Result<(), JournalError> {
    let mut result = Ok(());
    let mut group = Vec::with_capacity(64);
    while let Ok(first) = rx.recv() {
        group.push(first);
        // Let the group fill. Sleeping (rather than waiting on the channel)
        // means records sent meanwhile never wake this thread: a
        // connection pays for a queue push, not for a wake-up.
        std::thread::sleep(GROUP_WINDOW);
        while group.len() < GROUP_MAX {
            match rx.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        let mut last = None;
        // Waiters whose record was submitted; settled after the sync.
        let mut waiting = Vec::new();
        for (at, event, ack) in group.drain(..) {
            let kind = evidence_kind(&event);
            let flags = if matches!(event, ProxyEvent::Taint(_)) {
                Flags::TAINTED
            } else {
                Flags::NONE
            };
            let entry = match Body::from_value(&event.to_json()) {
                Ok(body) => Entry::new(Timestamp(at), session, kind, body).with_flags(flags),
                Err(e) => {
                    tracing::error!(target: "palisade_egress", error = %e, "record could not be encoded");
                    failed.store(true, Ordering::SeqCst);
                    settle(ack, false);
                    continue;
                }
            };
            match writer.submit(&entry) {
                Ok(ticket) => {
                    last = Some(ticket);
                    waiting.extend(ack);
                }
                Err(e) => {
                    tracing::error!(target: "palisade_egress", error = %e, "journal append failed");
                    failed.store(true, Ordering::SeqCst);
                    settle(ack, false);
                    result = Err(e);
                }
            }
        }
        // One sync for the whole group: waiting for the last record waits
        // for every record before it.
        if let Some(ticket) = last
            && let Err(e) = ticket.wait()
        {
            tracing::error!(target: "palisade_egress", error = %e, "journal append failed");
            failed.store(true, Ordering::SeqCst);
            result = Err(e);
        }
        // A record counts as accepted only while nothing has failed: once
        // a write failed, no later connection is let through either.
        let ok = !failed.load(Ordering::SeqCst);
        for ack in waiting {
            ack.settle(ok);
        }
    }
    result
}

fn settle(ack: Option<AcceptanceSender>, accepted: bool) {
    if let Some(a) = ack {
        a.settle(accepted);
    }
}

impl JournalRecorder {
    fn enqueue(&self, event: &ProxyEvent, ack: Option<AcceptanceSender>) {
        let sent = self.tx.lock().ok().and_then(|tx| {
            tx.as_ref()
                .map(|t| t.send((now_ms(), event.clone(), ack)).is_ok())
        });
        if sent != Some(true) {
            // A record sent to a stopped thread is dropped with its
            // waiter, which then counts as refused.
            self.failed.store(true, Ordering::SeqCst);
        }
    }
}

impl Recorder for JournalRecorder {
    fn record(&self, event: &ProxyEvent) {
        self.enqueue(event, None);
    }

    fn record_accepted(&self, event: &ProxyEvent) -> Acceptance {
        if !self.healthy() {
            return Acceptance::ready(false);
        }
        let (ack, acceptance) = Acceptance::pending();
        self.enqueue(event, Some(ack));
        acceptance
    }

    fn healthy(&self) -> bool {
        !self.failed.load(Ordering::SeqCst)
    }
}

impl JournalThread {
    /// Wait for the thread to drain, then close the journal cleanly
    /// (`journal_closed`) and return the final anchor.
    pub fn finish(self, recorder: &JournalRecorder) -> Result<Anchor, JournalError> {
        recorder.stop();
        let res = self.handle.join().unwrap_or(Ok(()));
        let anchor = self.writer.close(Timestamp(now_ms()));
        res.and(anchor)
    }
}

/// The evidence record kind of a proxy or relay event, for every journal
/// that takes them (this recorder and the governed session's).
pub fn evidence_kind(event: &ProxyEvent) -> Kind {
    match event {
        ProxyEvent::Connection(_) => Kind::EgressConnection,
        ProxyEvent::Relay(_) => Kind::RelayRequest,
        ProxyEvent::Taint(_) => Kind::TaintRaised,
        // `egress_admitted`, `relay_admitted`: valid static names, so never
        // the fallback.
        other => Kind::parse(other.kind()).unwrap_or(Kind::EgressConnection),
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use palisade_evidence::{JournalKey, JournalState, Timestamp, WriterOptions, verify};

    use super::*;
    use crate::record::ConnectionRecord;

    #[test]
    fn grouped_records_are_all_sealed_in_order_and_the_journal_closes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("egress.jsonl");
        let key = JournalKey::generate().unwrap();
        let writer =
            JournalWriter::create(&path, &key, &WriterOptions::default(), Timestamp(now_ms()))
                .unwrap();
        let (rec, thread) = JournalRecorder::start(writer, "s".into());
        std::thread::scope(|s| {
            for t in 0..4_u64 {
                let rec = &rec;
                s.spawn(move || {
                    for n in 0..300_u64 {
                        let r = ConnectionRecord::new(
                            t * 1_000_000 + n,
                            "unix".into(),
                            SystemTime::now(),
                        );
                        rec.record(&ProxyEvent::Connection(r));
                    }
                });
            }
        });
        assert!(rec.healthy());
        // Finish right after the last record: nothing may be lost.
        let anchor = thread.finish(&rec).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let report = verify(&bytes, &key, Some(&anchor));
        assert_eq!(report.state(), JournalState::Closed, "{report:?}");
        let ids: Vec<u64> = String::from_utf8(bytes)
            .unwrap()
            .lines()
            .filter(|l| l.contains("egress_connection"))
            .map(|l| {
                let at = l.find("\"id\":").unwrap() + 5;
                let digits: String = l[at..].chars().take_while(char::is_ascii_digit).collect();
                digits.parse().unwrap()
            })
            .collect();
        assert_eq!(ids.len(), 1200);
        for t in 0..4 {
            let mine: Vec<u64> = ids.iter().copied().filter(|i| i / 1_000_000 == t).collect();
            assert_eq!(
                mine,
                (0..300).map(|n| t * 1_000_000 + n).collect::<Vec<_>>()
            );
        }
        // Stopped: a later record marks the recorder unhealthy (the proxy
        // then refuses connections) instead of vanishing silently.
        rec.record(&ProxyEvent::Connection(ConnectionRecord::new(
            1,
            "unix".into(),
            SystemTime::now(),
        )));
        assert!(!rec.healthy());
    }

    #[test]
    fn an_accepted_record_is_on_disk_when_its_acceptance_resolves() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("egress.jsonl");
        let key = JournalKey::generate().unwrap();
        let writer =
            JournalWriter::create(&path, &key, &WriterOptions::default(), Timestamp(now_ms()))
                .unwrap();
        let (rec, thread) = JournalRecorder::start(writer, "s".into());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let admitted = |id| {
            let r = ConnectionRecord::new(id, "unix".into(), SystemTime::now());
            rec.record_accepted(&ProxyEvent::Admitted(r))
        };
        let on_disk = || {
            std::fs::read_to_string(&path)
                .unwrap()
                .matches("\"egress_admitted\"")
                .count()
        };
        assert!(rt.block_on(admitted(7).accepted()));
        // Accepted means written (and synced): before the thread finishes.
        assert_eq!(on_disk(), 1);
        assert!(rt.block_on(admitted(8).accepted()));
        assert_eq!(on_disk(), 2);
        thread.finish(&rec).unwrap();
        // A stopped recorder accepts nothing, and says so at once.
        assert!(!rt.block_on(admitted(9).accepted()));
        assert!(!rec.healthy());
        assert_eq!(on_disk(), 2);
    }
}
