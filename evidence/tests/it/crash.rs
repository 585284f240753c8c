//! The crash test: a child process appends with group commit and prints
//! every acknowledged seq; the parent SIGKILLs it at random moments, then
//! checks that every acknowledged record survived and that a torn tail is
//! recovered explicitly.
//!
//! The child is this same test binary, re-run with `CRASH_CHILD_ENV` set
//! on this same test, which then takes the child's role.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use palisade_evidence::{
    Body, Durability, Entry, FailureKind, JournalError, JournalState, JournalWriter, Kind,
    Timestamp, WriterOptions, verify,
};

use crate::util::{every_records, open_retry, test_key};

const CRASH_CHILD_ENV: &str = "PALISADE_EVIDENCE_CRASH_CHILD";
const CRASH_BIG_ENV: &str = "PALISADE_EVIDENCE_CRASH_BIG";
const KILLS: u32 = 60;
/// Kills per journal before starting a fresh one (keeps reopening cheap).
const ROUNDS_PER_JOURNAL: u32 = 10;

fn options() -> WriterOptions {
    WriterOptions::default()
        .with_durability(Durability::Synced {
            batch: 32,
            max_latency: Duration::from_millis(1),
        })
        .with_seal(every_records(64))
}

/// The child's role: append from four threads forever, printing `ack N`
/// after each acknowledged append. Bodies are large (~4 KiB) so that
/// batches span many pages and a kill can land mid-write.
fn child(path: &Path) -> ! {
    let key = test_key();
    let now = Timestamp(2_000_000_000_000);
    let writer = match JournalWriter::open(path, &key, &options(), now) {
        Ok((writer, _)) => writer,
        Err(JournalError::Io { .. }) => JournalWriter::create(path, &key, &options(), now).unwrap(),
        Err(err) => panic!("child cannot open the journal: {err}"),
    };
    // Every third round writes ~256 KiB bodies: 8 MiB batches take long
    // enough to write that some kills land inside a `write` and tear it.
    let big = std::env::var_os(CRASH_BIG_ENV).is_some();
    let padding = "p".repeat(if big { 256_000 } else { 4_000 });
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let writer = writer.clone();
            let padding = padding.clone();
            std::thread::spawn(move || {
                for i in 0u64.. {
                    let body = Body::from_value(&serde_json::json!({
                        "thread": t, "i": i, "pad": padding,
                    }))
                    .unwrap();
                    let entry = Entry::new(now, format!("t{t}"), Kind::RelayRequest, body);
                    // Eight in flight per thread, so batches are large and a
                    // kill can land inside a multi-page write.
                    let tickets: Vec<_> = (0..8).map(|_| writer.submit(&entry).unwrap()).collect();
                    for ticket in tickets {
                        let receipt = ticket.wait().unwrap();
                        let mut out = std::io::stdout().lock();
                        writeln!(out, "ack {}", receipt.seq).unwrap();
                        out.flush().unwrap();
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
    std::process::exit(0)
}

/// A small deterministic generator for kill delays.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn sigkill_never_loses_an_acknowledged_record() {
    if let Some(path) = std::env::var_os(CRASH_CHILD_ENV) {
        child(Path::new(&path));
    }
    let dir = tempfile::tempdir().unwrap();
    let mut path = dir.path().join("crash-0.jsonl");
    let key = test_key();
    let exe = std::env::current_exe().unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("crash test seed {seed}");
    let mut rng = XorShift(seed);
    let mut acked: BTreeSet<u64> = BTreeSet::new();
    let (mut torn, mut recoveries) = (0u32, 0u64);
    let mut total_acked = 0usize;
    let started = Instant::now();
    for round in 0..KILLS {
        if round > 0 && round % ROUNDS_PER_JOURNAL == 0 {
            finish(&path, &acked, recoveries);
            path = dir.path().join(format!("crash-{round}.jsonl"));
            acked.clear();
            recoveries = 0;
        }
        let mut cmd = Command::new(&exe);
        if round % 3 == 2 {
            cmd.env(CRASH_BIG_ENV, "1");
        }
        let mut child = cmd
            .args([
                "--exact",
                "crash::sigkill_never_loses_an_acknowledged_record",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut seqs = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(seq) = line.strip_prefix("ack ") {
                    if seqs.is_empty() {
                        let _ = ready_tx.send(());
                    }
                    seqs.push(seq.parse::<u64>().unwrap());
                }
            }
            seqs
        });
        // Wait until the child's first acknowledgement (however slow the
        // loaded machine is to start it), then a random while.
        ready_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        std::thread::sleep(Duration::from_micros(2_000 + rng.below(50_000)));
        child.kill().unwrap(); // SIGKILL.
        child.wait().unwrap();
        let seqs = reader.join().unwrap();
        total_acked += seqs.len();
        acked.extend(seqs);

        let bytes = std::fs::read(&path).unwrap_or_default();
        if bytes.is_empty() {
            continue; // Killed before `create` wrote anything.
        }
        let report = verify(&bytes, &key, None);
        match report.failure.as_ref().map(|f| f.kind) {
            None => assert_eq!(report.state(), JournalState::Open),
            Some(FailureKind::TornTail) => torn += 1,
            Some(other) => panic!(
                "round {round}: the crash left {other}: {:?}",
                report.failure
            ),
        }
        // Every acknowledged record is among the verified records.
        if let Some(&max) = acked.last() {
            assert!(
                report.records > max,
                "round {round}: seq {max} was acknowledged but only {} records verify",
                report.records
            );
        }
        // Recover explicitly (the next child would do it too; doing it here
        // checks the recovery record each time).
        let (writer, opened) =
            open_retry(&path, &key, &options(), Timestamp(2_000_000_000_001)).unwrap();
        assert_eq!(opened.cut_bytes.is_some(), report.torn_tail_bytes > 0);
        if opened.cut_bytes.is_some() {
            recoveries += 1;
        }
        drop(writer);
    }
    finish(&path, &acked, recoveries);
    let elapsed = started.elapsed();
    println!(
        "crash test: {KILLS} kills {total_acked} acknowledged records kept, {torn} torn tails recovered, {elapsed:?}"
    );
}

/// Closes and verifies a journal: every acknowledged seq is there, as the
/// record the child wrote.
fn finish(path: &Path, acked: &BTreeSet<u64>, recoveries: u64) {
    let key = test_key();
    let (writer, _) = open_retry(path, &key, &options(), Timestamp(2_000_000_000_002)).unwrap();
    writer.close(Timestamp(2_000_000_000_003)).unwrap();
    let bytes = std::fs::read(path).unwrap();
    let report = verify(&bytes, &key, None);
    assert_eq!(report.state(), JournalState::Closed, "{:?}", report.failure);
    assert_eq!(report.recovered_torn_tails, recoveries);
    let text = String::from_utf8(bytes).unwrap();
    let by_seq: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for &seq in acked {
        let record = &by_seq[seq as usize];
        assert_eq!(record["seq"], seq);
        assert_eq!(record["kind"], "relay_request", "seq {seq}");
    }
}
