//! Shipping to a real rsyslog (Debian packages `rsyslog` and `rsyslog-relp`):
//! each test starts its own `rsyslogd -n` on loopback with its own config,
//! work directory and pid file (never the system service), has it write
//! `%rawmsg%` to a file, and verifies that file centrally.
//!
//! Without `rsyslogd` these tests FAIL, naming the packages to install.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use palisade_evidence::ship::{ShipError, ShipOptions, ShipStream, ShipUrl, Shipper, TlsConnector};
use palisade_evidence::{
    Anchor, Body, Entry, FailureKind, JournalKey, JournalState, JournalWriter, Kind, SealPolicy,
    Timestamp, WriterOptions, verify_reader,
};

#[path = "common/rsyslog.rs"]
mod rsyslog;
use rsyslog::Rsyslog;

fn key() -> JournalKey {
    JournalKey::from_bytes([0x33; 32], 0)
}

fn options() -> WriterOptions {
    WriterOptions::default().with_seal(SealPolicy::new(std::num::NonZeroU64::new(25), None))
}

fn append(writer: &JournalWriter, i: u64) {
    let body =
        Body::from_value(&serde_json::json!({"host": format!("h{i}.example"), "n": i})).unwrap();
    writer
        .append(&Entry::new(
            Timestamp(1_000 + i),
            "s",
            Kind::EgressConnection,
            body,
        ))
        .unwrap();
}

fn write_journal(path: &Path, n: u64, close: bool) -> Anchor {
    let writer = JournalWriter::create(path, &key(), &options(), Timestamp(1_000)).unwrap();
    for i in 0..n {
        append(&writer, i);
    }
    if close {
        writer.close(Timestamp(100_000)).unwrap()
    } else {
        writer.anchor().unwrap()
    }
}

fn ship_opts() -> ShipOptions {
    ShipOptions::default()
        .with_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .with_timeouts(Duration::from_secs(2), Duration::from_secs(5))
        .with_window(16)
}

fn ship_to_end(journal: &Path, url: ShipUrl, opts: ShipOptions) {
    let mut shipper = Shipper::new(journal, url, opts).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let state = shipper.run(&|| Instant::now() > deadline).unwrap();
    assert!(state.done, "shipping did not finish: {state:?}");
}

#[test]
fn records_arrive_over_relp_and_verify_from_rsyslogs_file() {
    let dir = tempfile::tempdir().unwrap();
    let rs = Rsyslog::start(dir.path());
    let journal = dir.path().join("run.jsonl");
    let last = write_journal(&journal, 200, true);
    ship_to_end(&journal, rs.relp_url(), ship_opts());
    // Acknowledged means written: read at once, no waiting.
    let report = rs.collected(&key());
    assert_eq!(report.journals.len(), 1, "{report:?}");
    let j = &report.journals[0];
    assert_eq!(j.state(), JournalState::Closed, "{:?}", j.report.failure);
    assert_eq!(j.records, last.seq + 1);
    assert_eq!(j.duplicates, 0);
    // One anchor per seal and the final one.
    assert_eq!(j.anchors.len() as u64, j.report.sealed_epochs);
    assert_eq!(j.anchors.last(), Some(&last));
    assert_eq!(report.other_lines, 0);

    // At least once, deterministically: forget the state and ship it all
    // again; every record is then a duplicate, and removed.
    std::fs::remove_file(Shipper::state_path(&journal, &rs.relp_url())).unwrap();
    ship_to_end(&journal, rs.relp_url(), ship_opts());
    let report = rs.collected(&key());
    let j = &report.journals[0];
    assert_eq!(j.duplicates, last.seq + 1);
    assert_eq!(j.state(), JournalState::Closed, "{:?}", j.report.failure);
}

#[test]
fn records_arrive_over_syslog_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let rs = Rsyslog::start(dir.path());
    let journal = dir.path().join("run.jsonl");
    let last = write_journal(&journal, 120, true);
    ship_to_end(&journal, rs.tcp_url(), ship_opts());
    wait_all_closed(&rs, &last);
}

/// No acknowledgement: waits until rsyslog wrote all that was sent.
fn wait_all_closed(rs: &Rsyslog, last: &Anchor) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let report = rs.collected(&key());
        if report
            .journals
            .first()
            .is_some_and(|j| j.state() == JournalState::Closed)
        {
            assert_eq!(report.journals[0].records, last.seq + 1);
            break;
        }
        assert!(Instant::now() < deadline, "not all arrived: {report:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A "TLS client" that records the host it is asked to verify and passes
/// the socket through, so rsyslog's plain imtcp can read what it carries.
/// (Real TLS is the CLI's: `cli/tests/proxy_ship.rs` ships through rustls
/// to rsyslog's gtls driver.)
#[derive(Debug, Default)]
struct Passthrough {
    hosts: Mutex<Vec<String>>,
}

impl TlsConnector for Passthrough {
    fn connect(&self, host: &str, tcp: TcpStream) -> std::io::Result<Box<dyn ShipStream>> {
        self.hosts.lock().unwrap().push(host.to_owned());
        Ok(Box::new(tcp))
    }
}

#[test]
fn a_syslog_tls_url_ships_only_through_the_callers_tls_client() {
    let dir = tempfile::tempdir().unwrap();
    let rs = Rsyslog::start(dir.path());
    let journal = dir.path().join("run.jsonl");
    let last = write_journal(&journal, 60, true);
    let url = ShipUrl::parse(&format!("syslog+tls://127.0.0.1:{}/", rs.tcp)).unwrap();
    assert_eq!(url.host(), "127.0.0.1");
    // No TLS client: refused before anything is sent, never clear text.
    let err = Shipper::new(&journal, url.clone(), ship_opts()).unwrap_err();
    assert!(matches!(err, ShipError::NoTls { .. }), "{err}");
    assert!(!rs.out().exists(), "nothing reached the collector");
    // Positive control: with one, every connection goes through it.
    let tls = Arc::new(Passthrough::default());
    ship_to_end(&journal, url, ship_opts().with_tls(tls.clone()));
    wait_all_closed(&rs, &last);
    assert_eq!(*tls.hosts.lock().unwrap(), ["127.0.0.1"]);
}

#[test]
fn sigkill_of_rsyslog_mid_stream_loses_no_acknowledged_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut rs = Rsyslog::start(dir.path());
    let journal = dir.path().join("run.jsonl");
    let total = 3_000;
    let writer = JournalWriter::create(&journal, &key(), &options(), Timestamp(1_000)).unwrap();
    let url = rs.relp_url();
    let stop = Arc::new(AtomicBool::new(false));
    let shipper_thread = {
        let journal = journal.clone();
        let url = url.clone();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut shipper = Shipper::new(&journal, url, ship_opts()).unwrap();
            shipper.run(&|| stop.load(Ordering::Relaxed))
        })
    };
    let state_path = Shipper::state_path(&journal, &url);
    let acked = || {
        std::fs::read_to_string(&state_path)
            .ok()
            .and_then(|s| s.split(' ').nth(3).and_then(|n| n.parse::<u64>().ok()))
            .unwrap_or(0)
    };
    for i in 0..total / 2 {
        append(&writer, i);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked() < 200 {
        assert!(Instant::now() < deadline, "nothing was acknowledged");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Mid-stream: acknowledged so far, and more still to come.
    let before_kill = acked();
    rs.kill9();
    for i in total / 2..total {
        append(&writer, i);
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(acked() < total, "the kill did not happen mid-stream");
    rs.spawn();
    let last = writer.close(Timestamp(1_000_000)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !shipper_thread.is_finished() {
        if Instant::now() > deadline {
            stop.store(true, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let state = shipper_thread.join().unwrap().unwrap();
    assert!(state.done, "{state:?}");
    let report = rs.collected(&key());
    let j = &report.journals[0];
    // Every record, in particular the `before_kill` acknowledged ones, is
    // in rsyslog's file: the rebuilt journal is complete and closed.
    assert_eq!(j.state(), JournalState::Closed, "{:?}", j.report.failure);
    assert_eq!(j.records, last.seq + 1);
    assert!(j.records > before_kill);
    eprintln!(
        "acknowledged before the kill: {before_kill}; duplicates removed: {}",
        j.duplicates
    );
}

#[test]
fn a_collector_down_at_start_is_retried_until_it_is_up() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("run.jsonl");
    let last = write_journal(&journal, 50, true);
    let mut rs = Rsyslog::start(dir.path());
    let url = rs.relp_url();
    rs.kill9();
    let shipper_thread = {
        let journal = journal.clone();
        std::thread::spawn(move || {
            let mut shipper = Shipper::new(&journal, url, ship_opts()).unwrap();
            // Control for the retry: while the collector is down, nothing ships.
            let err = shipper.ship_available().unwrap_err();
            assert!(matches!(err, ShipError::Link(_)), "{err}");
            assert_eq!(shipper.state().next_seq, 0);
            let deadline = Instant::now() + Duration::from_secs(60);
            shipper.run(&|| Instant::now() > deadline)
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    rs.spawn();
    let state = shipper_thread.join().unwrap().unwrap();
    assert!(state.done);
    let report = rs.collected(&key());
    assert_eq!(report.journals[0].state(), JournalState::Closed);
    assert_eq!(report.journals[0].records, last.seq + 1);
}

#[test]
fn deleting_or_cutting_the_local_journal_after_shipping_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let rs = Rsyslog::start(dir.path());
    let journal = dir.path().join("run.jsonl");
    // An open journal (a session still running, or the host stopped it).
    let writer = JournalWriter::create(&journal, &key(), &options(), Timestamp(1_000)).unwrap();
    for i in 0..80 {
        append(&writer, i);
    }
    let mut shipper = Shipper::new(&journal, rs.relp_url(), ship_opts()).unwrap();
    let progress = shipper.ship_available().unwrap();
    assert!(progress.delivered > 80 && !progress.done);
    drop(writer);
    let local = std::fs::read(&journal).unwrap();

    // The collector's copy alone: every shipped record verifies, the journal
    // is open (never clean), and the last shipped anchor is known.
    let report = rs.collected(&key());
    let j = &report.journals[0];
    assert_eq!(j.state(), JournalState::Open, "{:?}", j.report.failure);
    assert_eq!(j.records, shipper.state().next_seq);
    let shipped_anchor = j.anchors.last().cloned().unwrap();

    // Control: the host's intact journal reaches the shipped anchor.
    let ok = verify_reader(&local[..], &key(), Some(&shipped_anchor)).unwrap();
    assert_eq!(ok.failure, None);

    // The host cuts its journal back before the anchor: the anchor from
    // the collector catches it, and the shipper refuses to go on.
    let cut_at = local
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(10)
        .map(|(i, _)| i + 1)
        .unwrap();
    std::fs::write(&journal, &local[..cut_at]).unwrap();
    let cut = verify_reader(
        std::fs::File::open(&journal).unwrap(),
        &key(),
        Some(&shipped_anchor),
    )
    .unwrap();
    assert_eq!(cut.failure_kind(), Some(FailureKind::TruncatedBeforeAnchor));
    let err = shipper.ship_available().unwrap_err();
    assert!(matches!(err, ShipError::JournalChanged { .. }), "{err}");
    drop(shipper);

    // The host deletes its journal and starts a fresh one that it closes
    // cleanly: the collector still holds the first journal, open, with
    // its records; the fresh journal cannot stand in for it.
    std::fs::remove_file(&journal).unwrap();
    std::fs::remove_file(Shipper::state_path(&journal, &rs.relp_url())).unwrap();
    write_journal(&journal, 3, true);
    ship_to_end(&journal, rs.relp_url(), ship_opts());
    let report = rs.collected(&key());
    assert_eq!(report.journals.len(), 2);
    let states: Vec<_> = report
        .journals
        .iter()
        .map(|j| (j.journal, j.state()))
        .collect();
    assert!(
        states
            .iter()
            .any(|(id, s)| *id == shipped_anchor.journal && *s == JournalState::Open),
        "{states:?}"
    );
    assert!(states.iter().any(|(_, s)| *s == JournalState::Closed));
}
