//! The shipping wire format and central verification, without a collector:
//! every record of a real journal survives encode → parse byte for byte,
//! and the central rebuild drops duplicates, reports forks, and checks
//! the shipped anchors (each refusal next to its passing control).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use palisade_evidence::ship::wire::{self, ANCHOR_KIND, SD_ID};
use palisade_evidence::ship::{Collector, Hostname, NotShipped, Shipped, parse_message};
use palisade_evidence::{
    Anchor, Body, Entry, FailureKind, JournalKey, JournalState, JournalWriter, Kind, SealPolicy,
    Timestamp, WriterOptions,
};

/// A journal of `n` records (epochs of 3), closed or not; its lines and key.
fn journal(n: u64, close: bool) -> (Vec<Vec<u8>>, JournalKey) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.jsonl");
    let key = JournalKey::from_bytes([9; 32], 0);
    let opts =
        WriterOptions::default().with_seal(SealPolicy::new(std::num::NonZeroU64::new(3), None));
    let w = JournalWriter::create(&path, &key, &opts, Timestamp(1_700_000_000_000)).unwrap();
    for i in 0..n {
        // Bodies with characters RFC 5424 structured data would escape and
        // non-ASCII: the MSG carries them as they are.
        let body = Body::from_value(&serde_json::json!({"i": i, "s": "a\"b]c\\d é"})).unwrap();
        w.append(&Entry::new(
            Timestamp(1_700_000_000_001 + i),
            "s-1",
            Kind::EgressConnection,
            body,
        ))
        .unwrap();
    }
    if close {
        w.close(Timestamp(1_700_000_001_000)).unwrap();
    } else {
        drop(w);
    }
    let bytes = std::fs::read(&path).unwrap();
    let lines = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    (lines, key)
}

fn anchor_of(line: &[u8]) -> Anchor {
    let v: serde_json::Value = serde_json::from_slice(line).unwrap();
    Anchor::from_json(
        &serde_json::json!({
            "epoch": v["epoch"], "journal": v["journal"], "mac": v["mac"], "seq": v["seq"]
        })
        .to_string(),
    )
    .unwrap()
}

fn messages(lines: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let host = Hostname::new("worker-1").unwrap();
    lines
        .iter()
        .map(|l| wire::encode_record(l, &host).unwrap())
        .collect()
}

#[test]
fn every_record_survives_encode_and_parse_byte_for_byte() {
    let (lines, _) = journal(7, true);
    for (line, msg) in lines.iter().zip(messages(&lines)) {
        let text = String::from_utf8(msg.clone()).unwrap();
        assert!(text.starts_with("<110>1 2023-11-14T22:13:2"), "{text}");
        assert!(text.contains(&format!(" worker-1 palisade - record [{SD_ID} journal=\"")));
        match parse_message(&msg).unwrap() {
            Shipped::Record { line: got, seq, .. } => {
                assert_eq!(got, line.as_slice());
                assert_eq!(seq, anchor_of(line).seq);
            }
            other => panic!("{other:?}"),
        }
    }
    let anchor = anchor_of(lines.last().unwrap());
    let msg = wire::encode_anchor(&anchor, &Hostname::nil());
    assert!(String::from_utf8_lossy(&msg).contains(&format!("kind=\"{ANCHOR_KIND}\"")));
    assert_eq!(parse_message(&msg).unwrap(), Shipped::Anchor(anchor));
}

#[test]
fn framing_counts_octets() {
    let mut out = Vec::new();
    wire::octet_frame("é1".as_bytes(), &mut out);
    assert_eq!(out, "3 é1".as_bytes());
}

#[test]
fn other_lines_are_reported_never_taken() {
    let (lines, _) = journal(2, false);
    let good = messages(&lines)[1].clone();
    // Control: the untouched message parses.
    assert!(parse_message(&good).is_ok());
    let text = String::from_utf8(good.clone()).unwrap();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"Dec  2 14:00:00 host sshd[1]: hello".to_vec(), "bsd"),
        (b"<13>1 - h sshd - - - hello".to_vec(), "foreign"),
        (
            text.replacen("palisade", "other", 1).into_bytes(),
            "foreign app",
        ),
        (
            text.replacen("seq=\"1\"", "seq=\"2\"", 1).into_bytes(),
            "seq lie",
        ),
        (
            text.replacen("kind=\"egress_connection\"", "kind=\"anchor\"", 1)
                .into_bytes(),
            "kind lie",
        ),
        (good[..good.len() - 3].to_vec(), "cut"),
        (text.replacen(" journal=", " journal", 1).into_bytes(), "sd"),
        (vec![b'<'; wire::MAX_MESSAGE_LEN + 1], "long"),
    ];
    for (line, what) in &cases {
        assert!(parse_message(line).is_err(), "{what}");
    }
    assert_eq!(parse_message(&cases[1].0), Err(NotShipped::Foreign));
    assert_eq!(parse_message(&cases[7].0), Err(NotShipped::TooLong));

    let mut collector = Collector::new(1 << 20);
    for (line, _) in &cases {
        collector.push_line(line);
    }
    for m in messages(&lines) {
        collector.push_line(&m);
    }
    let report = collector.finish(&JournalKey::from_bytes([9; 32], 0));
    assert_eq!(report.other_lines, cases.len() as u64);
    assert_eq!(report.first_other_lines[0].line, 1);
    assert_eq!(report.journals.len(), 1);
    assert_eq!(report.journals[0].state(), JournalState::Open);
}

fn central(msgs: &[Vec<u8>], key: &JournalKey) -> palisade_evidence::ship::CentralReport {
    let mut collector = Collector::new(1 << 24);
    for m in msgs {
        collector.push_line(m);
    }
    collector.finish(key)
}

#[test]
fn duplicates_and_disorder_are_undone() {
    let (lines, key) = journal(10, true);
    let msgs = messages(&lines);
    // Control: shipped once, in order.
    let once = central(&msgs, &key);
    assert_eq!(once.journals[0].state(), JournalState::Closed);
    assert_eq!(once.journals[0].duplicates, 0);
    // At least once: a resent batch, and delivered out of order.
    let mut again: Vec<Vec<u8>> = msgs[..6].to_vec();
    again.extend_from_slice(&msgs[3..]);
    again.swap(1, 2);
    let report = central(&again, &key);
    let j = &report.journals[0];
    assert_eq!(j.duplicates, 3);
    assert_eq!(j.records, lines.len() as u64);
    assert_eq!(j.state(), JournalState::Closed, "{:?}", j.report.failure);
}

#[test]
fn a_lost_record_is_a_gap_and_a_fork_is_reported() {
    let (lines, key) = journal(10, true);
    let msgs = messages(&lines);
    let mut lost = msgs.clone();
    lost.remove(4);
    let report = central(&lost, &key);
    assert_eq!(
        report.journals[0].report.failure_kind(),
        Some(FailureKind::SeqGap)
    );

    // A second journal written with the same id is impossible to make
    // through the API, so fork by hand: a different line for seq 5 that
    // still claims seq 5 (its MAC cannot match).
    let mut forged = String::from_utf8(lines[5].clone()).unwrap();
    forged = forged.replacen("\"i\":", "\"j\":", 1);
    let host = Hostname::nil();
    let forged = wire::encode_record(forged.as_bytes(), &host).unwrap();
    let mut forked = msgs.clone();
    forked.push(forged.clone());
    let report = central(&forked, &key);
    let j = &report.journals[0];
    assert_eq!(j.forks.len(), 1);
    assert_eq!(j.forks[0].seq, 5);
    assert_eq!(j.report.failure_kind(), Some(FailureKind::ForkedRecord));
    assert_eq!(j.state(), JournalState::Invalid);
    // The forged version first: still a fork (and a broken chain).
    let mut forged_first = vec![forged];
    forged_first.extend(msgs);
    let report = central(&forged_first, &key);
    assert_eq!(
        report.journals[0].report.failure_kind(),
        Some(FailureKind::ForkedRecord)
    );
}

#[test]
fn shipped_anchors_catch_a_cut() {
    let (lines, key) = journal(10, false);
    let host = Hostname::nil();
    let mut msgs = messages(&lines);
    let seal_at = lines
        .iter()
        .position(|l| String::from_utf8_lossy(l).contains("\"kind\":\"epoch_sealed\""))
        .unwrap();
    msgs.push(wire::encode_anchor(&anchor_of(&lines[seal_at]), &host));
    let last = anchor_of(lines.last().unwrap());
    msgs.push(wire::encode_anchor(&last, &host));
    // Control: all records and both anchors: valid, open.
    let report = central(&msgs, &key);
    assert_eq!(report.journals[0].state(), JournalState::Open);
    assert_eq!(report.journals[0].anchors.len(), 2);

    // The records after seq 6 never reached the collector (or were cut from
    // its copy): the anchor beyond them says so.
    let cut: Vec<Vec<u8>> = msgs
        .iter()
        .filter(|m| !matches!(parse_message(m), Ok(Shipped::Record { seq, .. }) if seq > 6))
        .cloned()
        .collect();
    let report = central(&cut, &key);
    assert_eq!(
        report.journals[0].report.failure_kind(),
        Some(FailureKind::TruncatedBeforeAnchor)
    );

    // An anchor that names another record at a shipped seq.
    let mut wrong = anchor_of(&lines[seal_at]);
    wrong.mac[0] ^= 1;
    let mut bad = messages(&lines);
    bad.push(wire::encode_anchor(&wrong, &host));
    bad.push(wire::encode_anchor(&last, &host));
    let report = central(&bad, &key);
    assert_eq!(
        report.journals[0].report.failure_kind(),
        Some(FailureKind::AnchorMismatch)
    );
}

#[test]
fn the_memory_limit_refuses_rather_than_reads_half() {
    let (lines, key) = journal(5, true);
    let msgs = messages(&lines);
    let total: usize = lines.iter().map(Vec::len).sum();
    // Control: exactly enough room.
    let mut fits = Collector::new(total);
    msgs.iter().for_each(|m| fits.push_line(m));
    assert_eq!(fits.finish(&key).journals[0].state(), JournalState::Closed);
    let mut short = Collector::new(total - 1);
    msgs.iter().for_each(|m| short.push_line(m));
    let report = short.finish(&key);
    assert_eq!(report.journals[0].state(), JournalState::Invalid);
    assert!(
        report.journals[0]
            .report
            .failure
            .as_ref()
            .unwrap()
            .message
            .contains("limit")
    );
}

#[test]
fn the_fuzz_harness_runs_over_real_and_damaged_collector_files() {
    let (lines, _) = journal(6, true);
    let mut file = Vec::new();
    for m in messages(&lines) {
        file.extend_from_slice(&m);
        file.push(b'\n');
    }
    palisade_evidence::__fuzz::ship_parse(&file);
    palisade_evidence::__fuzz::ship_parse(b"1 rsp 6 200 OK\n0 serverclose 0\n");
    // Every prefix and a byte flipped every 97 bytes: no panic, no abort.
    for cut in (0..file.len()).step_by(61) {
        palisade_evidence::__fuzz::ship_parse(&file[..cut]);
    }
    let mut damaged = file.clone();
    for i in (0..damaged.len()).step_by(97) {
        damaged[i] ^= 0x20;
    }
    palisade_evidence::__fuzz::ship_parse(&damaged);
}

/// A RELP server of the test's own on loopback: answers `open`, then each
/// `syslog` with `answer` (or never, when `None`); returns the port.
fn fake_relp(answer: Option<&'static str>) -> u16 {
    fake_relp_after(0, answer)
}

/// A RELP server that answers `200 OK` to the first `ok` syslog commands
/// of each connection, then `answer` (`None`: never answers).
fn fake_relp_after(ok: usize, answer: Option<&'static str>) -> u16 {
    fake_relp_with(ok, answer, |_| {})
}

/// [`fake_relp_after`], calling `before_answer(n)` before it answers the
/// `n`th syslog command (from 1).
fn fake_relp_with(
    ok: usize,
    answer: Option<&'static str>,
    mut before_answer: impl FnMut(usize) + Send + 'static,
) -> u16 {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut out = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            let mut answered = 0;
            loop {
                let mut head = Vec::new();
                // TXNR SP COMMAND SP DATALEN (SP DATA) LF
                let mut fields = Vec::new();
                for _ in 0..2 {
                    head.clear();
                    if reader.read_until(b' ', &mut head).unwrap_or(0) == 0 {
                        break;
                    }
                    fields.push(String::from_utf8_lossy(&head).trim().to_owned());
                }
                if fields.len() < 2 {
                    break;
                }
                // DATALEN ends at SP, or at LF when it is 0 (no data).
                let mut len = String::new();
                let mut byte = [0u8; 1];
                let mut ended = false;
                while reader.read_exact(&mut byte).is_ok() {
                    match byte[0] {
                        b' ' => break,
                        b'\n' => {
                            ended = true;
                            break;
                        }
                        b => len.push(char::from(b)),
                    }
                }
                let len: usize = len.parse().unwrap_or(0);
                if !ended {
                    let mut data = vec![0u8; len + 1];
                    if reader.read_exact(&mut data).is_err() {
                        break;
                    }
                }
                let rsp = match (fields[1].as_str(), answer) {
                    ("open", _) => "200 OK\nrelp_version=0\ncommands=syslog".to_owned(),
                    ("syslog", _) if answered < ok => {
                        answered += 1;
                        before_answer(answered);
                        "200 OK".to_owned()
                    }
                    (_, Some(a)) => a.to_owned(),
                    (_, None) => continue,
                };
                let frame = format!("{} rsp {} {rsp}\n", fields[0], rsp.len());
                if out.write_all(frame.as_bytes()).is_err() {
                    break;
                }
            }
        }
    });
    port
}

#[test]
fn a_record_counts_as_shipped_only_once_acknowledged() {
    use palisade_evidence::ship::{ShipError, ShipOptions, ShipUrl, Shipper};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.jsonl");
    let _w = open_journal_of(&path, 5);
    let opts = || {
        ShipOptions::default()
            .with_timeouts(Duration::from_secs(2), Duration::from_millis(500))
            .with_window(4)
    };
    let url = |port: u16| ShipUrl::parse(&format!("relp://127.0.0.1:{port}")).unwrap();
    // Refused, or never answered: nothing counts as shipped.
    for answer in [Some("500 queue full"), None] {
        let mut shipper = Shipper::new(&path, url(fake_relp(answer)), opts()).unwrap();
        let err = shipper.ship_available().unwrap_err();
        assert!(matches!(err, ShipError::Link(_)), "{err}");
        assert_eq!(shipper.state().next_seq, 0, "{answer:?}");
    }
    // Control: acknowledged, every record is shipped and the point is kept.
    let port = fake_relp(Some("200 OK"));
    let mut shipper = Shipper::new(&path, url(port), opts()).unwrap();
    let progress = shipper.ship_available().unwrap();
    assert_eq!(progress.delivered, 6);
    assert_eq!(shipper.state().next_seq, 6);
    // Six acknowledgements, fewer than `persist_every`: the point reaches
    // the state file when the shipper is dropped (or goes idle in `run`).
    drop(shipper);
    let again = Shipper::new(&path, url(port), opts()).unwrap();
    assert_eq!(again.state().next_seq, 6, "the state file keeps the point");
}

#[test]
fn a_partly_acknowledged_window_keeps_exactly_the_acknowledged_records() {
    use palisade_evidence::ship::{ShipError, ShipOptions, ShipUrl, Shipper};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.jsonl");
    let _w = open_journal_of(&path, 20);
    let opts = ShipOptions::default()
        .with_timeouts(Duration::from_secs(2), Duration::from_millis(500))
        .with_window(8);
    for (ok, answer) in [
        (3, Some("500 queue full")),
        (11, None),
        (13, Some("500 no")),
    ] {
        let url =
            ShipUrl::parse(&format!("relp://127.0.0.1:{}", fake_relp_after(ok, answer))).unwrap();
        let state = Shipper::state_path(&path, &url);
        let mut shipper = Shipper::new(&path, url.clone(), opts.clone()).unwrap();
        let err = shipper.ship_available().unwrap_err();
        assert!(matches!(err, ShipError::Link(_)), "{err}");
        // The window holds 8 unanswered messages, across batches: the
        // point is the last answered record, never one sent after it.
        assert_eq!(shipper.state().next_seq, ok as u64, "ok={ok}");
        let again = Shipper::new(&path, url, opts.clone()).unwrap();
        assert_eq!(again.state().next_seq, ok as u64, "persisted, ok={ok}");
        std::fs::remove_file(state).unwrap();
    }
}

#[test]
fn a_line_being_written_is_shipped_whole_once_complete() {
    use palisade_evidence::ship::{ShipOptions, ShipUrl, Shipper};
    use std::io::Write;
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full.jsonl");
    let key = JournalKey::from_bytes([9; 32], 0);
    let w = JournalWriter::create(&full, &key, &WriterOptions::default(), Timestamp(1)).unwrap();
    for i in 0..30 {
        let body = Body::from_value(&serde_json::json!({"i": i})).unwrap();
        w.append(&Entry::new(Timestamp(2), "s", Kind::EgressConnection, body))
            .unwrap();
    }
    w.close(Timestamp(3)).unwrap();
    drop(w);
    let bytes = std::fs::read(&full).unwrap();
    let lines = bytes.iter().filter(|b| **b == b'\n').count() as u64;
    // The shipped journal stops in the middle of its 6th line, as a
    // reader racing the writer sees it; the collector's first answer
    // lets the writer finish.
    let cut = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(4)
        .map(|(i, _)| i + 20)
        .unwrap();
    let path = dir.path().join("j.jsonl");
    std::fs::write(&path, &bytes[..cut]).unwrap();
    let rest = bytes[cut..].to_vec();
    let target = path.clone();
    let mut rest = Some(rest);
    let port = fake_relp_with(usize::MAX, Some("200 OK"), move |n| {
        if n == 1 {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&target)
                .unwrap();
            f.write_all(&rest.take().unwrap()).unwrap();
        }
    });
    let url = ShipUrl::parse(&format!("relp://127.0.0.1:{port}")).unwrap();
    let opts = ShipOptions::default()
        .with_timeouts(Duration::from_secs(2), Duration::from_secs(5))
        .with_window(8);
    let mut shipper = Shipper::new(&path, url, opts).unwrap();
    let mut shipped = 0;
    while !shipper.state().done {
        shipped += shipper.ship_available().unwrap().delivered;
        assert!(shipped < 1000, "no progress");
    }
    assert_eq!(shipper.state().next_seq, lines);
}

#[test]
fn the_state_file_lags_the_acknowledged_point_by_less_than_persist_every() {
    use palisade_evidence::ship::{ShipOptions, ShipUrl, Shipper};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.jsonl");
    let _w = open_journal_of(&path, 10);
    let url = ShipUrl::parse(&format!("relp://127.0.0.1:{}", fake_relp(Some("200 OK")))).unwrap();
    let opts = ShipOptions::default()
        .with_timeouts(Duration::from_secs(2), Duration::from_secs(5))
        .with_persist_every(4);
    let mut shipper = Shipper::new(&path, url.clone(), opts.clone()).unwrap();
    assert_eq!(shipper.ship_available().unwrap().delivered, 11);
    assert_eq!(shipper.state().next_seq, 11);
    // Written at 4 and 8 acknowledgements: a crash now resends 3 records.
    let on_disk = || {
        Shipper::new(&path, url.clone(), opts.clone())
            .unwrap()
            .state()
            .next_seq
    };
    assert_eq!(on_disk(), 8);
    shipper.sync_state().unwrap();
    assert_eq!(on_disk(), 11);
}

/// An open journal at `path` (key `[9; 32]`) holding `journal_opened` and
/// `n` connection records; the writer is returned to keep it open.
fn open_journal_of(path: &std::path::Path, n: u64) -> JournalWriter {
    let key = JournalKey::from_bytes([9; 32], 0);
    let w = JournalWriter::create(path, &key, &WriterOptions::default(), Timestamp(1)).unwrap();
    for i in 0..n {
        let body = Body::from_value(&serde_json::json!({"i": i})).unwrap();
        w.append(&Entry::new(Timestamp(2), "s", Kind::EgressConnection, body))
            .unwrap();
    }
    w
}

#[test]
fn a_pass_returns_after_its_turn_while_the_journal_keeps_growing() {
    use palisade_evidence::ship::{ShipOptions, ShipUrl, Shipper};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.jsonl");
    let w = open_journal_of(&path, 3);
    // The collector's every answer comes after one more record: the
    // journal never stops growing while a pass ships it, as under a
    // steady stream of connections.
    let writer = w.clone();
    let port = fake_relp_with(usize::MAX, Some("200 OK"), move |n| {
        let body = Body::from_value(&serde_json::json!({"n": n})).unwrap();
        writer
            .append(&Entry::new(Timestamp(2), "s", Kind::EgressConnection, body))
            .unwrap();
    });
    let url = ShipUrl::parse(&format!("relp://127.0.0.1:{port}")).unwrap();
    let opts = ShipOptions::default()
        .with_timeouts(Duration::from_secs(2), Duration::from_secs(5))
        .with_window(8)
        .with_turn(Duration::from_millis(50));
    let mut shipper = Shipper::new(&path, url, opts).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut passes = Vec::new();
        for _ in 0..3 {
            let delivered = shipper.ship_available().unwrap().delivered;
            passes.push((delivered, shipper.state().next_seq));
        }
        tx.send(passes).unwrap();
    });
    // Hang guard, not a timing: without the turn the first pass never
    // returns, since a new record is always there to send.
    let passes = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a pass did not return while the journal kept growing");
    // Each pass made progress, and each began where the last one stopped
    // (nothing sent twice, nothing skipped).
    let mut shipped = 0;
    for (delivered, next_seq) in passes {
        assert!(delivered > 0, "a pass shipped nothing");
        shipped += delivered;
        assert_eq!(next_seq, shipped);
    }
    drop(w);
}

/// A `syslog+tcp` collector whose first connection is closed by the
/// collector after `close_after` of silence; every later connection is
/// read to its end. Everything received, all connections together.
fn closing_tcp_collector(
    close_after: std::time::Duration,
) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    use std::io::Read as _;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = std::sync::Arc::clone(&got);
    std::thread::spawn(move || {
        for (n, s) in l.incoming().enumerate() {
            let Ok(mut s) = s else { return };
            let sink = std::sync::Arc::clone(&sink);
            std::thread::spawn(move || {
                if n == 0 {
                    s.set_read_timeout(Some(close_after)).unwrap();
                }
                let mut buf = [0u8; 4096];
                while let Ok(k) = s.read(&mut buf) {
                    if k == 0 {
                        break;
                    }
                    sink.lock().unwrap().extend_from_slice(&buf[..k]);
                }
                // Dropped: the collector closes its side.
            });
        }
    });
    (port, got)
}

#[test]
fn records_written_into_a_connection_the_collector_closed_are_sent_again() {
    use palisade_evidence::ship::{ShipOptions, ShipUrl, Shipper};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.jsonl");
    let key = JournalKey::from_bytes([9; 32], 0);
    let w = JournalWriter::create(&path, &key, &WriterOptions::default(), Timestamp(1)).unwrap();
    let append = |i: u64| {
        let body = Body::from_value(&serde_json::json!({"i": i})).unwrap();
        w.append(&Entry::new(
            Timestamp(2 + i),
            "s",
            Kind::EgressConnection,
            body,
        ))
        .unwrap();
    };
    for i in 0..5 {
        append(i);
    }
    let (port, got) = closing_tcp_collector(Duration::from_millis(200));
    let url = ShipUrl::parse(&format!("syslog+tcp://127.0.0.1:{port}")).unwrap();
    let opts = ShipOptions::default()
        .with_timeouts(Duration::from_secs(2), Duration::from_secs(5))
        .with_confirm_after(Duration::from_millis(50));
    let mut shipper = Shipper::new(&path, url, opts).unwrap();
    // Passes until `cond`, as a caller's loop makes them (hang guard).
    let mut pass_until = |what: &str, cond: &dyn Fn(&Shipper) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cond(&shipper) {
            assert!(Instant::now() < deadline, "not within 30 s: {what}");
            let _ = shipper.ship_available();
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // Positive control: on an open connection, written and confirmed.
    pass_until("the first records confirmed", &|s| s.state().next_seq == 6);
    // The collector closes the idle connection; then more records come.
    std::thread::sleep(Duration::from_millis(500));
    for i in 5..10 {
        append(i);
    }
    let last = w.anchor().unwrap().seq;
    pass_until("every record confirmed", &|s| {
        s.state().next_seq == last + 1
    });
    let got = String::from_utf8_lossy(&got.lock().unwrap()).into_owned();
    for seq in 0..=last {
        assert!(
            got.contains(&format!("seq=\"{seq}\"")),
            "seq {seq} lost: {got}"
        );
    }
}
