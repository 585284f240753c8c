//! Journal benchmarks, one JSON object per line on stdout:
//! `{"suite":"journal","name":...,"unit":...,"value":...}` for the figures
//! `cargo xtask bench` charts, `"suite":"journal-detail"` for the rest
//! (per-CPU-second rates, this bench's own fdatasync reference).
//!
//! Run with `cargo bench -p palisade-evidence --bench journal`; set
//! `PALISADE_BENCH_QUICK=1` for a short smoke run. Figures: append rate
//! unsynced and with group commit (batches of 1, 16, 256), verify
//! throughput, and the physical reference (plain `write` + `fdatasync`
//! every 1, 16, 256 lines of the same size) that bounds any synced journal.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::indexing_slicing,
    missing_docs,
    reason = "benchmark binary"
)]

use std::fs::OpenOptions;
use std::io::Write;
use std::time::{Duration, Instant};

use palisade_evidence::{
    Body, Durability, JournalKey, JournalState, JournalWriter, Timestamp, verify,
};

mod common;
use common::{body_of_len, entry, options, thread_cpu};

fn main() {
    let quick = std::env::var_os("PALISADE_BENCH_QUICK").is_some();
    let scale = if quick { 10 } else { 1 };
    let dir = tempfile::tempdir().unwrap();
    let key = JournalKey::generate().unwrap();
    let body = body_of_len(256);
    let line_len = sample_line_len(&dir, &key, &body);

    // Unsynced appends: the journal's own cost (sealing, formatting, MAC).
    let n = 2_000_000 / scale;
    let (rate, cpu_rate) = append_unsynced(&dir, &key, n, &|_| body.clone(), "unsynced");
    emit("append_unsynced_256B", "records/s", rate);
    detail(
        "append_unsynced_256B_per_cpu_second",
        "records/cpu-s",
        cpu_rate,
    );
    // The same, building each body from a JSON value as a caller would.
    let value = serde_json::json!({
        "host": "api.example.org", "port": 443, "decision": "allow",
        "rule": "egress.allow[3]", "bytes_up": 1234, "bytes_down": 56789,
        "pad": "x".repeat(140),
    });
    let n = 500_000 / scale;
    let (rate, cpu_rate) = append_unsynced(
        &dir,
        &key,
        n,
        &|_| Body::from_value(&value).unwrap(),
        "unsynced-build",
    );
    emit("append_unsynced_256B_with_body_build", "records/s", rate);
    detail(
        "append_unsynced_256B_with_body_build_per_cpu_second",
        "records/cpu-s",
        cpu_rate,
    );

    // Group commit, one submitter keeping a batch in flight.
    for (batch, total) in [(1usize, 2_000u64), (16, 20_000), (256, 200_000)] {
        let total = (total / scale as u64).max(batch as u64 * 4);
        let rate = group_commit(&dir, &key, &body, batch, total);
        emit(
            &format!("append_group_commit_batch{batch}_256B"),
            "records/s",
            rate,
        );
    }
    // Group commit with 16 threads each appending synchronously.
    let rate = group_commit_threads(&dir, &key, &body, 16, 20_000 / scale as u64);
    emit("append_group_commit_16_threads_256B", "records/s", rate);

    // Verify throughput over a closed journal.
    let (bytes, secs, cpu) = verify_throughput(&dir, &key, &body, 400_000 / scale as u64);
    emit("verify_256B", "MB/s", bytes as f64 / secs / 1e6);
    detail(
        "verify_256B_per_cpu_second",
        "MB/cpu-s",
        bytes as f64 / cpu / 1e6,
    );
    detail(
        "verify_256B_records",
        "records/s",
        (400_000 / scale) as f64 / secs,
    );

    // Physical reference: plain write + fdatasync of lines of the same size.
    for (every, total) in [(1u64, 2_000u64), (16, 20_000), (256, 200_000)] {
        let total = (total / scale as u64).max(every * 4);
        let rate = fdatasync_reference(&dir, line_len, every, total);
        detail(
            &format!("reference_write_fdatasync_every{every}_{line_len}B"),
            "records/s",
            rate,
        );
    }
}

fn emit(name: &str, unit: &str, value: f64) {
    emit_to("journal", name, unit, value);
}

/// Figures `cargo xtask bench` does not chart (it measures its own physical
/// reference), printed for people running this bench directly.
fn detail(name: &str, unit: &str, value: f64) {
    emit_to("journal-detail", name, unit, value);
}

fn emit_to(suite: &str, name: &str, unit: &str, value: f64) {
    println!(
        "{}",
        serde_json::json!({"suite": suite, "name": name, "unit": unit, "value": (value * 10.0).round() / 10.0})
    );
}

fn sample_line_len(dir: &tempfile::TempDir, key: &JournalKey, body: &Body) -> usize {
    let path = dir.path().join("sample");
    let w = JournalWriter::create(
        &path,
        key,
        &options(Durability::Unsynced),
        Timestamp(1_000_000),
    )
    .unwrap();
    w.append(&entry(body.clone(), 0)).unwrap();
    w.sync().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    text.lines().nth(1).unwrap().len() + 1
}

fn append_unsynced(
    dir: &tempfile::TempDir,
    key: &JournalKey,
    n: u64,
    make: &dyn Fn(u64) -> Body,
    name: &str,
) -> (f64, f64) {
    let path = dir.path().join(name);
    let w = JournalWriter::create(
        &path,
        key,
        &options(Durability::Unsynced),
        Timestamp(1_000_000),
    )
    .unwrap();
    let start = Instant::now();
    let cpu = thread_cpu();
    for i in 0..n {
        w.append(&entry(make(i), i)).unwrap();
    }
    let cpu = thread_cpu() - cpu;
    let secs = start.elapsed().as_secs_f64();
    w.close(Timestamp(2_000_000)).unwrap();
    drop(w);
    std::fs::remove_file(&path).unwrap();
    (n as f64 / secs, n as f64 / cpu)
}

fn group_commit(
    dir: &tempfile::TempDir,
    key: &JournalKey,
    body: &Body,
    batch: usize,
    total: u64,
) -> f64 {
    let path = dir.path().join(format!("gc{batch}"));
    let durability = Durability::Synced {
        batch,
        max_latency: Duration::from_millis(5),
    };
    let w = JournalWriter::create(&path, key, &options(durability), Timestamp(1_000_000)).unwrap();
    let start = Instant::now();
    let mut done = 0;
    while done < total {
        let mut last = None;
        for _ in 0..batch {
            last = Some(w.submit(&entry(body.clone(), done)).unwrap());
            done += 1;
        }
        last.unwrap().wait().unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    w.close(Timestamp(2_000_000)).unwrap();
    drop(w);
    std::fs::remove_file(&path).unwrap();
    total as f64 / secs
}

fn group_commit_threads(
    dir: &tempfile::TempDir,
    key: &JournalKey,
    body: &Body,
    threads: u64,
    total: u64,
) -> f64 {
    let path = dir.path().join("gc-threads");
    let durability = Durability::Synced {
        batch: threads as usize,
        max_latency: Duration::from_millis(1),
    };
    let w = JournalWriter::create(&path, key, &options(durability), Timestamp(1_000_000)).unwrap();
    let per = total / threads;
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let w = w.clone();
            s.spawn(move || {
                for i in 0..per {
                    w.append(&entry(body.clone(), t * per + i)).unwrap();
                }
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    w.close(Timestamp(2_000_000)).unwrap();
    drop(w);
    std::fs::remove_file(&path).unwrap();
    (per * threads) as f64 / secs
}

fn verify_throughput(
    dir: &tempfile::TempDir,
    key: &JournalKey,
    body: &Body,
    n: u64,
) -> (usize, f64, f64) {
    let path = dir.path().join("verify");
    let w = JournalWriter::create(
        &path,
        key,
        &options(Durability::Unsynced),
        Timestamp(1_000_000),
    )
    .unwrap();
    for i in 0..n {
        w.append(&entry(body.clone(), i)).unwrap();
    }
    w.close(Timestamp(2_000_000)).unwrap();
    drop(w);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let (mut best, mut best_cpu) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        let start = Instant::now();
        let cpu = thread_cpu();
        let report = verify(&bytes, key, None);
        best_cpu = best_cpu.min(thread_cpu() - cpu);
        best = best.min(start.elapsed().as_secs_f64());
        assert_eq!(report.state(), JournalState::Closed);
    }
    (bytes.len(), best, best_cpu)
}

fn fdatasync_reference(dir: &tempfile::TempDir, line_len: usize, every: u64, total: u64) -> f64 {
    let path = dir.path().join(format!("ref{every}"));
    let mut file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)
        .unwrap();
    let mut line = vec![b'x'; line_len];
    if let Some(last) = line.last_mut() {
        *last = b'\n';
    }
    let mut buf = Vec::with_capacity(line_len * every as usize);
    let start = Instant::now();
    let mut done = 0;
    while done < total {
        buf.clear();
        for _ in 0..every {
            buf.extend_from_slice(&line);
        }
        file.write_all(&buf).unwrap();
        file.sync_data().unwrap();
        done += every;
    }
    let secs = start.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path).unwrap();
    done as f64 / secs
}
