//! What shipping costs the journal's writer: group commit with and without a
//! [`Shipper`] tailing the same journal to a collector, alternated in one
//! run (`cargo xtask bench ship` starts a local rsyslogd for it and passes
//! its address in `PALISADE_BENCH_SHIP_URL`).
//!
//! One JSON object per line, as `cargo xtask bench` reads them:
//! `{"suite":"ship","name":…,"unit":"records/s","value":…}` per round and
//! case, and per shipped round how long the shipper took, after the writer
//! closed the journal, until the collector had acknowledged every record
//! (`drain_after_close_ms`). A shipped round counts only when the shipper
//! ended with every record and `journal_closed` acknowledged; otherwise
//! the bench fails. Without the variable it prints an `unavailable` line.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::indexing_slicing,
    missing_docs,
    reason = "benchmark binary"
)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use palisade_evidence::ship::{ShipOptions, ShipUrl, Shipper, wire};
use palisade_evidence::{Body, Durability, JournalKey, JournalWriter, Timestamp};

mod common;
use common::{body_of_len, entry, options, thread_cpu};

const SUITE: &str = "ship";

fn main() {
    let quick = std::env::var_os("PALISADE_BENCH_QUICK").is_some();
    let rounds: usize = std::env::var("PALISADE_BENCH_SHIP_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if quick { 1 } else { 6 });
    let scale = if quick { 10 } else { 1 };
    // The subjects: no shipping; shipping to a RELP server that only
    // answers `200` (the floor of any collector: what the shipper itself
    // costs); shipping to the collector of PALISADE_BENCH_SHIP_URL.
    let mut subjects = vec![("no_ship", None), ("sink", Some(sink()))];
    match std::env::var_os("PALISADE_BENCH_SHIP_URL") {
        Some(url) => subjects.push((
            "ship",
            Some(ShipUrl::parse(&url.to_string_lossy()).expect("PALISADE_BENCH_SHIP_URL")),
        )),
        None => println!(
            "{}",
            serde_json::json!({"suite": SUITE, "name": "journal group commit, shipping to rsyslog",
                "unavailable": "PALISADE_BENCH_SHIP_URL is not set (cargo xtask bench ship starts a local rsyslogd and sets it)"})
        ),
    }
    let dir = tempfile::tempdir().unwrap();
    let key = JournalKey::generate().unwrap();
    let body = body_of_len(256);
    for round in 0..rounds {
        // The order rotates every round.
        for k in 0..subjects.len() {
            let (suffix, url) = &subjects[(round + k) % subjects.len()];
            let case = Case {
                dir: dir.path(),
                key: &key,
                body: &body,
                url: url.as_ref(),
                name: format!("r{round}-{suffix}"),
            };
            let (rate, drain) = case.batches(16, 20_000 / scale);
            emit(
                &format!("group_commit_batch16_256B_{suffix}"),
                "records/s",
                rate,
            );
            let (rate16, drain16) = case.threads(16, 20_000 / scale);
            emit(
                &format!("group_commit_16_threads_256B_{suffix}"),
                "records/s",
                rate16,
            );
            if let Some(url) = url {
                emit(
                    &format!("drain_after_close_batch16_{suffix}_ms"),
                    "ms",
                    drain,
                );
                emit(
                    &format!("drain_after_close_16_threads_{suffix}_ms"),
                    "ms",
                    drain16,
                );
                let (rate, per_cpu) = case.catch_up(url, 100_000 / scale);
                emit(&format!("shipper_catch_up_{suffix}"), "records/s", rate);
                emit(
                    &format!("shipper_catch_up_{suffix}_per_cpu_second"),
                    "records/cpu-s",
                    per_cpu,
                );
            }
        }
    }
}

/// A RELP server on loopback that answers every command with `200 OK`
/// and keeps nothing.
fn sink() -> ShipUrl {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer_all(stream));
        }
    });
    ShipUrl::parse(&format!("relp://{addr}")).unwrap()
}

fn answer_all(mut s: TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    let mut out = Vec::new();
    loop {
        let n = match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut at = 0;
        while let Ok(Some((frame, used))) = wire::parse_relp_frame(&buf[at..]) {
            let data = if frame.command == b"open" {
                "200 OK\nrelp_version=0\ncommands=syslog"
            } else {
                "200 OK"
            };
            out.extend_from_slice(format!("{} rsp {} {data}\n", frame.txnr, data.len()).as_bytes());
            at += used;
        }
        buf.drain(..at);
        if s.write_all(&out).is_err() {
            return;
        }
        out.clear();
    }
}

struct Case<'a> {
    dir: &'a Path,
    key: &'a JournalKey,
    body: &'a Body,
    url: Option<&'a ShipUrl>,
    name: String,
}

impl Case<'_> {
    /// One submitter keeping a batch of `batch` in flight; returns the
    /// writer's records/s and the drain time after close (ms, 0 unshipped).
    fn batches(&self, batch: usize, total: u64) -> (f64, f64) {
        let total = total.max(batch as u64 * 4);
        self.timed(&format!("{}-gc{batch}", self.name), batch, 5, |w| {
            let mut done = 0;
            while done < total {
                let mut last = None;
                for _ in 0..batch {
                    last = Some(w.submit(&entry(self.body.clone(), done)).unwrap());
                    done += 1;
                }
                last.unwrap().wait().unwrap();
            }
            total
        })
    }

    /// `threads` threads each appending synchronously.
    fn threads(&self, threads: u64, total: u64) -> (f64, f64) {
        let per = total / threads;
        self.timed(
            &format!("{}-threads", self.name),
            usize::try_from(threads).unwrap(),
            1,
            |w| {
                std::thread::scope(|s| {
                    for t in 0..threads {
                        let w = w.clone();
                        s.spawn(move || {
                            for i in 0..per {
                                w.append(&entry(self.body.clone(), t * per + i)).unwrap();
                            }
                        });
                    }
                });
                per * threads
            },
        )
    }

    /// The shipper alone: a closed journal of `n` records shipped from its
    /// start; records/s of wall time and per CPU-second of the shipper's
    /// thread.
    fn catch_up(&self, url: &ShipUrl, n: u64) -> (f64, f64) {
        let path = self.dir.join(format!("{}-catch-up", self.name));
        let w = JournalWriter::create(
            &path,
            self.key,
            &options(Durability::Unsynced),
            Timestamp(1_000_000),
        )
        .unwrap();
        for i in 0..n {
            w.append(&entry(self.body.clone(), i)).unwrap();
        }
        w.close(Timestamp(2_000_000)).unwrap();
        drop(w);
        let lines = std::fs::read_to_string(&path).unwrap().lines().count() as u64;
        let mut shipper = Shipper::new(&path, url.clone(), ship_options()).unwrap();
        let (secs, cpu, state) = std::thread::scope(|s| {
            s.spawn(|| {
                let start = Instant::now();
                let cpu = thread_cpu();
                let state = shipper.run(&|| false).unwrap();
                (start.elapsed().as_secs_f64(), thread_cpu() - cpu, state)
            })
            .join()
            .unwrap()
        });
        assert!(state.done && state.next_seq == lines, "catch-up incomplete");
        drop(shipper);
        let _ = std::fs::remove_file(Shipper::state_path(&path, url));
        let _ = std::fs::remove_file(&path);
        #[allow(clippy::cast_precision_loss, reason = "record counts")]
        (lines as f64 / secs, lines as f64 / cpu.max(1e-9))
    }

    fn timed(
        &self,
        file: &str,
        batch: usize,
        latency_ms: u64,
        load: impl FnOnce(&JournalWriter) -> u64,
    ) -> (f64, f64) {
        let path = self.dir.join(file);
        let durability = Durability::Synced {
            batch,
            max_latency: Duration::from_millis(latency_ms),
        };
        let w = JournalWriter::create(&path, self.key, &options(durability), Timestamp(1_000_000))
            .unwrap();
        // The shipper tails the journal from its first line, as
        // `palisade proxy --ship` does.
        let shipper = self.url.map(|url| {
            let mut shipper = Shipper::new(&path, url.clone(), ship_options()).unwrap();
            std::thread::spawn(move || {
                let state = shipper.run(&|| false).unwrap();
                (state, Instant::now())
            })
        });
        let start = Instant::now();
        let n = load(&w);
        let secs = start.elapsed().as_secs_f64();
        w.close(Timestamp(2_000_000)).unwrap();
        let closed = Instant::now();
        drop(w);
        let mut drain_ms = 0.0;
        if let Some(handle) = shipper {
            let (state, done_at) = handle.join().unwrap();
            // Everything the writer sealed was acknowledged: the records,
            // the epoch seals and `journal_closed` (a shipper that fell
            // behind for good would make the shipped rate look free).
            let lines = std::fs::read_to_string(&path).unwrap().lines().count() as u64;
            assert!(
                state.done,
                "{file}: the shipper ended before journal_closed"
            );
            assert_eq!(
                state.next_seq, lines,
                "{file}: not every record was acknowledged"
            );
            drain_ms = done_at.saturating_duration_since(closed).as_secs_f64() * 1e3;
        }
        let _ = std::fs::remove_file(&path);
        if let Some(url) = self.url {
            let _ = std::fs::remove_file(Shipper::state_path(&path, url));
        }
        #[allow(clippy::cast_precision_loss, reason = "record counts")]
        (n as f64 / secs, drain_ms)
    }
}

/// As `palisade proxy --ship` ships.
fn ship_options() -> ShipOptions {
    ShipOptions::default()
        .with_backoff(Duration::from_millis(50), Duration::from_millis(500))
        .with_timeouts(Duration::from_secs(2), Duration::from_secs(10))
}

fn emit(name: &str, unit: &str, value: f64) {
    println!(
        "{}",
        serde_json::json!({"suite": SUITE, "name": name, "unit": unit, "value": (value * 10.0).round() / 10.0})
    );
}
