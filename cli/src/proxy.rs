//! `palisade proxy`: run the recording, limiting egress proxy for one
//! session until SIGINT or SIGTERM, then close the journal cleanly.

use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use palisade_egress::journal::{JournalRecorder, JournalThread};
use palisade_egress::policy::PolicyDecider;
use palisade_egress::proxy::{Listener, Proxy, ProxyToken, shutdown_channel};
use palisade_egress::record::{ProxyEvent, Recorder};
use palisade_egress::resolve::HostsFirstResolver;
use palisade_evidence::{JournalKey, JournalWriter, Timestamp, WriterOptions};
use palisade_taint::{Rules, Session};

use crate::host_policy_file::{load_policy, marks_path, read_marks};

/// Arguments of `palisade proxy`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The host policy (`palisade.toml`).
    #[arg(long)]
    policy: PathBuf,
    /// Where to listen: `127.0.0.1:PORT` (port 0 picks one) or `unix:PATH`.
    #[arg(long)]
    listen: String,
    /// Sealed evidence journal to append records to (created if missing).
    #[arg(long, requires = "key")]
    journal: Option<PathBuf>,
    /// The journal key file (`palisade journal keygen`).
    #[arg(long, requires = "journal")]
    key: Option<PathBuf>,
    /// Session id written into journal records.
    #[arg(long, default_value = "proxy")]
    session: String,
    /// Write a fresh per-session Proxy-Authorization token to this file
    /// (mode 0600, never overwritten); clients send
    /// `Proxy-Authorization: Bearer TOKEN` or Basic with any user.
    #[arg(long, conflicts_with = "no_auth")]
    token_file: Option<PathBuf>,
    /// Accept clients without a token (only when nothing else can reach the listener).
    #[arg(long)]
    no_auth: bool,
    /// The marks file (default: `taint.marks_file` next to the policy).
    #[arg(long)]
    marks: Option<PathBuf>,
    /// Ship the journal's records and anchors to this collector while the
    /// proxy runs (`relp://HOST:PORT`, `syslog+tcp://HOST:PORT` or
    /// `syslog+tls://HOST:PORT` with the policy's `evidence.tls_ca`;
    /// repeatable; added to the policy's `evidence.ship`). Needs `--journal`.
    #[arg(long, value_name = "URL")]
    ship: Vec<String>,
}

/// Records printed as JSON lines on stdout when no journal is given.
#[derive(Debug, Default)]
pub(crate) struct StdoutRecorder(Mutex<()>);

impl Recorder for StdoutRecorder {
    fn record(&self, event: &ProxyEvent) {
        let line = serde_json::json!({"kind": event.kind(), "body": event.to_json()});
        let _guard = self.0.lock();
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// Records printed as JSON lines on stdout by `palisade proxy` without a
/// journal. A connection only queues its record (no serialisation, no
/// system call on the connection path); a writer thread formats the queue
/// and writes it in one call at most [`STDOUT_BATCH`] after the first
/// queued record. [`BatchedStdoutRecorder::finish`] writes everything left
/// (clean shutdown); a crash can lose the records of that last window.
pub(crate) struct BatchedStdoutRecorder {
    shared: Arc<(Mutex<StdoutQueue>, Condvar)>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    out: Sink,
}

type Sink = Arc<Mutex<Box<dyn std::io::Write + Send>>>;

impl std::fmt::Debug for BatchedStdoutRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchedStdoutRecorder")
            .finish_non_exhaustive()
    }
}

/// How long the writer collects records before writing them.
pub(crate) const STDOUT_BATCH: Duration = Duration::from_millis(5);

#[derive(Debug, Default)]
struct StdoutQueue {
    events: Vec<ProxyEvent>,
    closed: bool,
}

fn write_lines(out: &Sink, events: &[ProxyEvent]) {
    if events.is_empty() {
        return;
    }
    let mut text = String::new();
    for event in events {
        let line = serde_json::json!({"kind": event.kind(), "body": event.to_json()});
        text.push_str(&line.to_string());
        text.push('\n');
    }
    if let Ok(mut out) = out.lock() {
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
}

impl BatchedStdoutRecorder {
    /// Starts the writer thread, writing to stdout.
    pub(crate) fn start() -> Arc<Self> {
        Self::start_with(Box::new(std::io::stdout()))
    }

    fn start_with(out: Box<dyn std::io::Write + Send>) -> Arc<Self> {
        let out: Sink = Arc::new(Mutex::new(out));
        let shared = Arc::new((Mutex::new(StdoutQueue::default()), Condvar::new()));
        let for_thread = Arc::clone(&shared);
        let thread_out = Arc::clone(&out);
        let thread = std::thread::spawn(move || {
            let (queue, wake) = &*for_thread;
            loop {
                let Ok(mut q) = queue.lock() else { return };
                while q.events.is_empty() && !q.closed {
                    let Ok(next) = wake.wait(q) else { return };
                    q = next;
                }
                if !q.closed {
                    drop(q);
                    std::thread::sleep(STDOUT_BATCH);
                    let Ok(again) = queue.lock() else { return };
                    q = again;
                }
                let batch = std::mem::take(&mut q.events);
                let closed = q.closed;
                drop(q);
                write_lines(&thread_out, &batch);
                if closed {
                    return;
                }
            }
        });
        Arc::new(Self {
            shared,
            thread: Mutex::new(Some(thread)),
            out,
        })
    }

    /// Writes every queued record and stops the writer; later records are
    /// written directly.
    pub(crate) fn finish(&self) {
        let (queue, wake) = &*self.shared;
        if let Ok(mut q) = queue.lock() {
            q.closed = true;
        }
        wake.notify_all();
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
        // Anything queued after the thread took its last batch.
        let rest = queue
            .lock()
            .map(|mut q| std::mem::take(&mut q.events))
            .unwrap_or_default();
        write_lines(&self.out, &rest);
    }
}

impl Recorder for BatchedStdoutRecorder {
    fn record(&self, event: &ProxyEvent) {
        let (queue, wake) = &*self.shared;
        let Ok(mut q) = queue.lock() else {
            write_lines(&self.out, std::slice::from_ref(event));
            return;
        };
        if q.closed {
            drop(q);
            write_lines(&self.out, std::slice::from_ref(event));
            return;
        }
        q.events.push(event.clone());
        let first = q.events.len() == 1;
        drop(q);
        if first {
            wake.notify_one();
        }
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The journal key, read with the same checks as every other command that
/// takes one (refused when others can read it; held in memory that is
/// wiped), when a journal is asked for.
pub(crate) fn journal_key(
    journal: Option<&Path>,
    key: Option<&Path>,
) -> Result<Option<JournalKey>, String> {
    match (journal, key) {
        (Some(_), Some(k)) => crate::journal::read_key(k).map(Some),
        _ => Ok(None),
    }
}

/// Opens or creates the journal and starts its writer thread.
pub(crate) fn open_journal(
    journal: &Path,
    key: &JournalKey,
    session: &str,
) -> Result<(Arc<JournalRecorder>, JournalThread), String> {
    let writer = open_writer(journal, key)?;
    Ok(JournalRecorder::start(writer, session.to_owned()))
}

/// Opens or creates the journal.
pub(crate) fn open_writer(journal: &Path, key: &JournalKey) -> Result<JournalWriter, String> {
    let opts = WriterOptions::default();
    let writer = if journal.exists() {
        JournalWriter::open(journal, key, &opts, Timestamp(now_ms()))
            .map(|(w, _)| w)
            .map_err(|e| format!("cannot open journal {}: {e}", journal.display()))?
    } else {
        JournalWriter::create(journal, key, &opts, Timestamp(now_ms()))
            .map_err(|e| format!("cannot create journal {}: {e}", journal.display()))?
    };
    Ok(writer)
}

/// Drains and closes a journal opened by [`open_journal`], if any.
pub(crate) fn close_journal(
    journal: Option<(Arc<JournalRecorder>, JournalThread)>,
) -> Result<(), String> {
    match journal {
        Some((rec, thread)) => thread
            .finish(&rec)
            .map(|_| ())
            .map_err(|e| format!("journal not closed cleanly: {e}")),
        None => Ok(()),
    }
}

/// Writes a secret to a new file with mode 0600, refusing to overwrite.
pub(crate) fn write_secret_file(path: &Path, value: &str) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot create {} (it must not exist): {e}", path.display()))?;
    f.write_all(value.as_bytes())
        .and_then(|()| f.write_all(b"\n"))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot set mode on {}: {e}", path.display()))
}

/// Installs the SIGINT and SIGTERM handlers now and returns a future that
/// ends on the first of them. Call it before announcing `listening`: a
/// signal sent as soon as the announcement is read must find the handlers
/// in place, or it would end the process by the default action, with the
/// journal left unclosed. Must be called within the tokio runtime.
pub(crate) fn stop_signals() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    );
    async move {
        let (Ok(mut int), Ok(mut term)) = handlers else {
            // Without signal handlers the process could not stop cleanly; run until killed.
            std::future::pending::<()>().await;
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
}

/// The proxy's runtime: one thread. A connection's steps (accept, head,
/// decision, hosts-file lookup, dial, pump) then never hop between
/// threads, and a bulk tunnel splices in the kernel, so a second worker
/// would mostly add cross-thread wake-ups on a small machine where the
/// worker and the proxy share the cores. Lookups that need `getaddrinfo`
/// still run on the blocking pool.
fn proxy_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    if args.token_file.is_none() && !args.no_auth {
        return Err("choose --token-file PATH (a per-session Proxy-Authorization token is written there) or --no-auth".into());
    }
    let loaded = load_policy(&args.policy)?;
    let marks = read_marks(&marks_path(&loaded, args.marks.as_deref()))?;
    let rules = Rules::new(&loaded.policy, &marks).map_err(|e| e.to_string())?;
    let mut config = crate::session::proxy_config(&loaded.policy)?;
    // Collector URLs come from the host (policy, command line), never from
    // the worker; one that cannot be shipped as asked refuses the start.
    let plan = crate::ship::Plan::new(&loaded.policy.evidence, &args.ship)?;
    if !plan.is_empty() && args.journal.is_none() {
        return Err(
            "--ship / evidence.ship need --journal: the journal is the shipper's spool".into(),
        );
    }
    // The key is checked (refused when others can read it) before anything
    // is written, so a refused start leaves no token file behind.
    let key = journal_key(args.journal.as_deref(), args.key.as_deref())?;
    let token = match &args.token_file {
        Some(path) => {
            let t = ProxyToken::generate().map_err(|e| format!("cannot generate a token: {e}"))?;
            write_secret_file(path, t.expose())?;
            Some(t)
        }
        None => None,
    };
    if let Some(t) = token {
        config = config.with_token(t);
    }
    let mut shipping = None;
    let journal = match (&args.journal, &key) {
        (Some(j), Some(k)) => {
            let writer = open_writer(j, k)?;
            if !plan.is_empty() {
                let s = crate::ship::Shipping::start(&plan, j, &writer, &args.session)?;
                if plan.refuses() {
                    config = config.with_hold(s.hold(), crate::ship::BACKLOG_REASON);
                }
                shipping = Some(s);
            }
            Some(JournalRecorder::start(writer, args.session.clone()))
        }
        _ => None,
    };
    let stdout_records = journal.is_none().then(BatchedStdoutRecorder::start);
    let recorder: Arc<dyn Recorder> = match (&journal, &stdout_records) {
        (Some((r, _)), _) => r.clone(),
        (None, Some(r)) => r.clone(),
        (None, None) => Arc::new(StdoutRecorder::default()),
    };
    // The decider records the taint its decisions raise (`taint_raised`)
    // into the same journal as the connections.
    let decider = Arc::new(
        PolicyDecider::new(
            Arc::new(loaded.policy),
            Arc::new(rules),
            Arc::new(Mutex::new(Session::new())),
        )
        .with_recorder(recorder.clone()),
    );
    let rt = proxy_runtime()?;
    let served: Result<(), String> = rt.block_on(async {
        let (listener, shown) = bind(&args.listen).await?;
        let proxy = Proxy::new(
            config,
            decider,
            Arc::new(HostsFirstResolver::system()),
            recorder,
        );
        let (shutdown, signal) = shutdown_channel();
        let stopped = stop_signals();
        eprintln!("palisade proxy: listening on {shown}");
        println!(
            "{}",
            serde_json::json!({"event": "listening", "listen": shown})
        );
        let task = tokio::spawn(async move { proxy.serve(listener, signal).await });
        stopped.await;
        shutdown.trigger();
        task.await
            .map_err(|e| format!("proxy task failed: {e}"))?
            .map_err(|e| format!("proxy failed: {e}"))
    });
    if let Some(path) = args.listen.strip_prefix("unix:") {
        let _ = std::fs::remove_file(path);
    }
    if let Some(r) = &stdout_records {
        r.finish();
    }
    let closed = close_journal(journal);
    // After `journal_closed`: the final flush, bounded.
    if let Some(s) = shipping {
        for warning in s.finish(crate::ship::FINAL_FLUSH) {
            eprintln!("palisade proxy: warning: {warning}");
        }
    }
    served?;
    closed?;
    eprintln!("palisade proxy: stopped");
    Ok(ExitCode::SUCCESS)
}

async fn bind(listen: &str) -> Result<(Listener, String), String> {
    if let Some(path) = listen.strip_prefix("unix:") {
        let l = tokio::net::UnixListener::bind(path)
            .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("cannot set mode on {path}: {e}"))?;
        return Ok((Listener::Unix(l), listen.to_owned()));
    }
    let addr: SocketAddr = listen
        .parse()
        .map_err(|_| format!("--listen `{listen}` is not IP:PORT or unix:PATH"))?;
    let l = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let shown = l
        .local_addr()
        .map_or_else(|_| listen.to_owned(), |a| a.to_string());
    Ok((Listener::Tcp(l), shown))
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use palisade_egress::record::ConnectionRecord;

    use super::*;

    /// A `Write` into a shared buffer.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn event(thread: u64, n: u64) -> ProxyEvent {
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        ProxyEvent::Connection(ConnectionRecord::new(
            thread * 1_000_000 + n,
            peer.to_string(),
            SystemTime::now(),
        ))
    }

    fn ids(buf: &Shared) -> Vec<u64> {
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                assert_eq!(v["kind"], "egress_connection");
                v["body"]["id"].as_u64().unwrap()
            })
            .collect()
    }

    #[test]
    fn batched_stdout_records_every_event_in_order_and_nothing_is_lost_at_finish() {
        let buf = Shared::default();
        let rec = BatchedStdoutRecorder::start_with(Box::new(buf.clone()));
        // Written by the thread without finish, within its window.
        rec.record(&event(9, 1));
        let t0 = std::time::Instant::now();
        while ids(&buf).is_empty() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(ids(&buf), [9_000_001]);
        // Many producers; then finish right away.
        std::thread::scope(|s| {
            for t in 0..4 {
                let rec = &rec;
                s.spawn(move || {
                    for n in 0..500 {
                        rec.record(&event(t, n));
                    }
                });
            }
        });
        rec.finish();
        let got = ids(&buf);
        assert_eq!(got.len(), 1 + 4 * 500);
        for t in 0..4 {
            let mine: Vec<u64> = got.iter().copied().filter(|i| i / 1_000_000 == t).collect();
            assert_eq!(
                mine,
                (0..500).map(|n| t * 1_000_000 + n).collect::<Vec<_>>()
            );
        }
        // After finish, records are written directly.
        rec.record(&event(8, 7));
        assert_eq!(ids(&buf).last(), Some(&8_000_007));
    }
}
