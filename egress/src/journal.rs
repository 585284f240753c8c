//! A [`Recorder`] that writes every proxy and relay record to a sealed
//! `palisade-evidence` journal.
//!
//! Records are handed to a dedicated writer thread (a synced append blocks
//! until its batch is on disk, which must not stall the proxy's IO tasks);
//! the channel is bounded, so a journal that cannot keep up slows the proxy
//! down instead of dropping records. If a write fails, the recorder reports
//! itself unhealthy and the proxy refuses new connections (fail closed).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use palisade_evidence::{Anchor, Body, Entry, JournalError, JournalWriter, Kind, Timestamp};

use crate::record::{Event, Recorder};

const QUEUE: usize = 16 * 1024;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Sends records to a journal writer thread.
pub struct JournalRecorder {
    tx: std::sync::Mutex<Option<SyncSender<(u64, Event)>>>,
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
        let (tx, rx) = sync_channel::<(u64, Event)>(QUEUE);
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

fn run(
    writer: &JournalWriter,
    session: &str,
    rx: &Receiver<(u64, Event)>,
    failed: &AtomicBool,
) -> Result<(), JournalError> {
    let mut result = Ok(());
    while let Ok((at, event)) = rx.recv() {
        let kind = match &event {
            Event::Connection(_) => Kind::EgressConnection,
            Event::Relay(_) => Kind::RelayRequest,
        };
        let entry = match Body::from_value(&event.to_json()) {
            Ok(body) => Entry::new(Timestamp(at), session, kind, body),
            Err(e) => {
                tracing::error!(target: "palisade_egress", error = %e, "record could not be encoded");
                failed.store(true, Ordering::SeqCst);
                continue;
            }
        };
        if let Err(e) = writer.append(&entry) {
            tracing::error!(target: "palisade_egress", error = %e, "journal append failed");
            failed.store(true, Ordering::SeqCst);
            result = Err(e);
        }
    }
    result
}

impl Recorder for JournalRecorder {
    fn record(&self, event: &Event) {
        let sent = self.tx.lock().ok().and_then(|tx| {
            tx.as_ref()
                .map(|t| t.send((now_ms(), event.clone())).is_ok())
        });
        if sent != Some(true) {
            self.failed.store(true, Ordering::SeqCst);
        }
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
