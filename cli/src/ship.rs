//! Shipping a session's or the proxy's journal off the host while it runs
//! (`--ship URL`, `[evidence] ship = [...]`; `docs/journal.md`).
//!
//! One thread per collector URL runs a [`Shipper`] over the journal file:
//! the journal is the spool, so the journal's writer never waits on the
//! network. The bound (`ship_buffer`) is how many sealed records a shipper
//! may lag behind the journal. Past it, one `ship_gap` record is appended
//! (url, `from_seq`, `to_seq`, bound) and, with `on_backlog = "refuse"`,
//! the proxy refuses new connections (`ship_backlog`) until every shipper
//! is back under the bound (`ship_resumed`). At close, after
//! `journal_closed`, each shipper gets a final flush with a deadline.
//! `syslog+tls://` goes through [`tls::RustlsShip`], with the policy's
//! `tls_ca` (required) and client certificate.

mod tls;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use palisade_evidence::ship::{Hostname, ShipError, ShipOptions, ShipUrl, Shipper, TlsConnector};
use palisade_evidence::{Body, Entry, JournalWriter, Kind, Timestamp};
use palisade_schema::host_policy::{Evidence, OnBacklog, check_ship_url};

use crate::proxy::now_ms;

/// The reason code of connections refused while shipping lags.
pub(crate) const BACKLOG_REASON: &str = "ship_backlog";

/// How long the final flush at close may take per collector.
pub(crate) const FINAL_FLUSH: Duration = Duration::from_secs(5);

/// Longest wait between two attempts to reach a collector that is down.
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// What to ship where, from the host policy and the command line.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    urls: Vec<ShipUrl>,
    bound: u64,
    on_backlog: OnBacklog,
    /// The TLS client, loaded when a URL is `syslog+tls://`.
    tls: Option<Arc<dyn TlsConnector>>,
}

impl Plan {
    /// The policy's `[evidence]` plus `--ship` URLs (duplicates once).
    /// A `syslog+tls://` URL loads the policy's `tls_ca` (and client
    /// certificate) now, so that a missing CA, an unreadable file or a
    /// key other users can read refuses the start: never shipped in
    /// clear text, never to an unverified collector.
    pub(crate) fn new(policy: &Evidence, cli: &[String]) -> Result<Self, String> {
        let mut urls: Vec<ShipUrl> = Vec::new();
        for text in policy.ship.iter().chain(cli) {
            check_ship_url(text).map_err(|e| format!("--ship / evidence.ship: {e}"))?;
            let url = ShipUrl::parse(text).map_err(|e| format!("--ship: {e}"))?;
            if !urls.contains(&url) {
                urls.push(url);
            }
        }
        let tls = match urls.iter().find(|u| u.tls()) {
            None => None,
            Some(url) => {
                let ca = policy.tls_ca.as_deref().ok_or_else(|| {
                    format!(
                        "--ship / evidence.ship `{}`: syslog+tls needs `tls_ca` in the host policy's [evidence] (the CA that signed the collector's certificate); refusing rather than trusting any certificate or shipping in clear text",
                        url.as_url()
                    )
                })?;
                let client = match (policy.tls_cert.as_deref(), policy.tls_key.as_deref()) {
                    (Some(c), Some(k)) => Some((Path::new(c), Path::new(k))),
                    (None, None) => None,
                    // The schema refuses it too; never connect without
                    // the certificate the operator configured.
                    _ => {
                        return Err(
                            "evidence.tls_cert and evidence.tls_key go together: one is missing"
                                .to_owned(),
                        );
                    }
                };
                let connector: Arc<dyn TlsConnector> =
                    Arc::new(tls::RustlsShip::load(Path::new(ca), client)?);
                Some(connector)
            }
        };
        Ok(Self {
            urls,
            bound: policy.ship_buffer.max(1),
            on_backlog: policy.on_backlog,
            tls,
        })
    }

    /// Whether nothing is shipped.
    pub(crate) fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// Whether a backlog refuses new connections.
    pub(crate) fn refuses(&self) -> bool {
        self.on_backlog == OnBacklog::Refuse && !self.is_empty()
    }
}

/// Shared between the shipper threads: how many of them are past the
/// bound, and the flag the proxy reads per new connection.
#[derive(Debug, Default)]
struct Backlog {
    gapped: Mutex<usize>,
    hold: Arc<AtomicBool>,
}

impl Backlog {
    // A poisoned count is still the count: the hold must not be skipped
    // (fail open) because another shipper thread panicked.
    fn enter(&self, refuse: bool) {
        let mut n = self.gapped.lock().unwrap_or_else(PoisonError::into_inner);
        *n += 1;
        if refuse {
            self.hold.store(true, Ordering::SeqCst);
        }
    }

    fn leave(&self) {
        let mut n = self.gapped.lock().unwrap_or_else(PoisonError::into_inner);
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.hold.store(false, Ordering::SeqCst);
        }
    }
}

/// The running shippers of one journal.
#[derive(Debug)]
pub(crate) struct Shipping {
    threads: Vec<(String, JoinHandle<Result<(), String>>)>,
    closing: Arc<Mutex<Option<Instant>>>,
    backlog: Arc<Backlog>,
}

fn hostname() -> Hostname {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.to_str().and_then(Hostname::new))
        .unwrap_or_else(Hostname::nil)
}

impl Shipping {
    /// Starts one shipper thread per URL of `plan` on `journal`, whose
    /// writer `writer` is (for `ship_gap` records and the sealed count).
    pub(crate) fn start(
        plan: &Plan,
        journal: &Path,
        writer: &JournalWriter,
        session: &str,
    ) -> Result<Self, String> {
        let closing = Arc::new(Mutex::new(None));
        let backlog = Arc::new(Backlog::default());
        let mut opts = ShipOptions::default()
            .with_hostname(hostname())
            .with_backoff(Duration::from_millis(50), BACKOFF_MAX)
            .with_timeouts(Duration::from_secs(2), Duration::from_secs(10));
        if let Some(tls) = &plan.tls {
            opts = opts.with_tls(Arc::clone(tls));
        }
        let mut threads = Vec::new();
        for url in &plan.urls {
            let shipper = Shipper::new(journal, url.clone(), opts.clone())
                .map_err(|e| format!("--ship {}: {e}", url.as_url()))?;
            let ctx = Ctx {
                url: url.as_url(),
                writer: writer.clone(),
                session: session.to_owned(),
                bound: plan.bound,
                refuse: plan.on_backlog == OnBacklog::Refuse,
                closing: Arc::clone(&closing),
                backlog: Arc::clone(&backlog),
            };
            let handle = std::thread::Builder::new()
                .name("palisade-ship".to_owned())
                .spawn(move || {
                    let watch = ctx.clone();
                    let result =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.run(shipper)))
                            .unwrap_or_else(|_| Err("the shipper thread panicked".to_owned()));
                    if let Err(e) = &result {
                        watch.failed(e);
                    }
                    result
                })
                .map_err(|e| format!("cannot start the shipper thread: {e}"))?;
            threads.push((url.as_url(), handle));
        }
        Ok(Self {
            threads,
            closing,
            backlog,
        })
    }

    /// The flag the proxy reads per new connection (`on_backlog = "refuse"`).
    pub(crate) fn hold(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.backlog.hold)
    }

    /// After the journal was closed: lets every shipper deliver the rest
    /// (`journal_closed` and its anchor) for at most `deadline`, then
    /// stops them. Returns one warning per collector that did not get
    /// everything.
    pub(crate) fn finish(self, deadline: Duration) -> Vec<String> {
        if let Ok(mut c) = self.closing.lock() {
            *c = Some(Instant::now() + deadline);
        }
        let mut warnings = Vec::new();
        for (url, handle) in self.threads {
            match handle.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => warnings.push(format!("shipping to {url}: {e}")),
                Err(_) => warnings.push(format!("shipping to {url}: the shipper thread failed")),
            }
        }
        warnings
    }
}

#[derive(Clone)]
struct Ctx {
    url: String,
    writer: JournalWriter,
    session: String,
    bound: u64,
    refuse: bool,
    closing: Arc<Mutex<Option<Instant>>>,
    backlog: Arc<Backlog>,
}

impl Ctx {
    fn deadline(&self) -> Option<Instant> {
        self.closing.lock().ok().and_then(|c| *c)
    }

    fn past_deadline(&self) -> bool {
        self.deadline().is_some_and(|d| Instant::now() >= d)
    }

    /// Sleeps `total` in small steps, returning early past the deadline.
    fn pause(&self, total: Duration) {
        let end = Instant::now() + total;
        while Instant::now() < end && !self.past_deadline() {
            std::thread::sleep(Duration::from_millis(10).min(total));
        }
    }

    fn record(&self, kind: &str, body: &serde_json::Value) {
        let entry = Kind::custom(kind)
            .map_err(|e| e.to_string())
            .and_then(|k| {
                Body::from_value(body)
                    .map(|b| (k, b))
                    .map_err(|e| e.to_string())
            })
            .map(|(k, b)| Entry::new(Timestamp(now_ms()), &self.session, k, b));
        // Appended and synced here (the shipper's thread, never a
        // decision's): a submitted record would wait for the next group.
        match entry.map(|e| self.writer.append(&e).map_err(|e| e.to_string())) {
            Ok(Ok(_receipt)) => {}
            Ok(Err(e)) | Err(e) => {
                eprintln!("palisade: warning: `{kind}` record not written: {e}");
            }
        }
    }

    /// A shipper that stopped for good while the journal is still open
    /// (the journal changed under it, its state file failed, it
    /// panicked): the stop is journalled (`ship_failed`) and, with
    /// `on_backlog = "refuse"`, new connections stay refused from then on,
    /// since nothing will reach the collector any more. After close (the
    /// final flush) there is nothing to record; [`Shipping::finish`] warns.
    fn failed(&self, error: &str) {
        if self.deadline().is_some() {
            return;
        }
        self.backlog.enter(self.refuse);
        self.record(
            "ship_failed",
            &serde_json::json!({
                "url": self.url,
                "error": error,
                "on_backlog": if self.refuse { "refuse" } else { "record" },
            }),
        );
        eprintln!(
            "palisade: warning: shipping to {} stopped: {error}",
            self.url
        );
    }

    fn run(self, mut shipper: Shipper) -> Result<(), String> {
        let mut backoff = Duration::from_millis(50);
        let mut gap: Option<u64> = None;
        let mut last_error: Option<String>;
        let result = loop {
            match shipper.ship_available() {
                Ok(progress) if progress.done => break Ok(()),
                Ok(progress) => {
                    backoff = Duration::from_millis(50);
                    last_error = None;
                    if progress.delivered == 0 {
                        // Idle: the acknowledged point goes to disk.
                        if let Err(e) = shipper.sync_state() {
                            break Err(e.to_string());
                        }
                        if self.past_deadline() {
                            break Err(
                                "the journal's end was not shipped before the deadline".to_owned()
                            );
                        }
                        self.pause(Duration::from_millis(20));
                    }
                }
                Err(ShipError::Link(e)) => {
                    last_error = Some(e.to_string());
                    if self.past_deadline() {
                        break Err(format!("collector unreachable at close: {e}"));
                    }
                    self.pause(backoff);
                    backoff = backoff.saturating_mul(2).min(BACKOFF_MAX);
                }
                // The journal changed under the shipper, or its files
                // failed: stop shipping rather than ship something else.
                Err(e) => break Err(e.to_string()),
            }
            // The lag: records sealed and durable, not yet acknowledged.
            let acked = shipper.state().next_seq;
            let sealed = self.writer.anchor().map_or(0, |a| a.seq.saturating_add(1));
            let lag = sealed.saturating_sub(acked);
            match gap {
                None if lag > self.bound && self.deadline().is_none() => {
                    gap = Some(acked);
                    self.backlog.enter(self.refuse);
                    let mut body = serde_json::json!({
                        "url": self.url,
                        "from_seq": acked,
                        "to_seq": sealed.saturating_sub(1),
                        "bound": self.bound,
                        "on_backlog": if self.refuse { "refuse" } else { "record" },
                    });
                    if let (Some(e), Some(obj)) = (&last_error, body.as_object_mut()) {
                        obj.insert("error".to_owned(), serde_json::json!(e));
                    }
                    self.record("ship_gap", &body);
                }
                Some(from) if lag <= self.bound => {
                    gap = None;
                    self.backlog.leave();
                    self.record(
                        "ship_resumed",
                        &serde_json::json!({"url": self.url, "gap_from_seq": from, "acked_seq": acked}),
                    );
                }
                _ => {}
            }
        };
        if gap.is_some() {
            self.backlog.leave();
        }
        result
    }
}
