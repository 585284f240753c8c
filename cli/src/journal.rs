//! `palisade journal`: generate keys for, verify, show and append to sealed
//! journals.
//!
//! Exit codes of `verify`: 0 valid and closed, 1 invalid, 3 valid but not
//! closed (open or truncated); 2 for usage and IO errors, as everywhere.

use std::fs::OpenOptions;
use std::io::Write;
use std::num::NonZeroU64;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use palisade_evidence::{
    Anchor, Body, Durability, Entry, Flags, JournalError, JournalKey, JournalState, JournalWriter,
    Kind, Report, SealPolicy, Timestamp, Verifier, WriterOptions,
};
use serde_json::{Value, json};

use palisade_evidence::ship::Collector;

use crate::input;

/// Exit status of `verify` for an invalid journal.
const EXIT_INVALID: u8 = 1;
/// Exit status of `verify` for a valid journal without `journal_closed`.
const EXIT_NOT_CLOSED: u8 = 3;

/// Arguments of `palisade journal`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: JournalCommand,
}

#[derive(Debug, clap::Subcommand)]
enum JournalCommand {
    /// Generate an initial journal key (file mode 0600; never overwrites).
    Keygen {
        /// Where to write the key.
        #[arg(long, value_name = "KEY")]
        out: PathBuf,
    },
    /// Verify a journal: exit 0 valid and closed, 1 invalid, 3 valid but not closed.
    Verify {
        /// The journal file.
        #[arg(required_unless_present = "from_syslog")]
        file: Option<PathBuf>,
        /// Instead of a journal, rebuild every journal shipped to a
        /// collector from the file it wrote (rsyslog's `%rawmsg%` lines):
        /// duplicates dropped, forks reported, shipped anchors checked.
        #[arg(long, value_name = "FILE", conflicts_with = "file")]
        from_syslog: Option<PathBuf>,
        /// The initial key file.
        #[arg(long, value_name = "KEY")]
        key: PathBuf,
        /// An anchor file (JSON) kept elsewhere: the journal must reach it.
        #[arg(long, value_name = "ANCHOR")]
        anchor: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Print a journal's records (without verifying them; use `verify`).
    Show {
        /// The journal file.
        file: PathBuf,
        /// Only records of this kind.
        #[arg(long, value_name = "K")]
        kind: Option<String>,
        /// Output format (`json` prints the record lines as they are).
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Append one record (creating the journal if it does not exist) and
    /// print the new anchor as JSON.
    Append {
        /// The journal file.
        file: PathBuf,
        /// The key file.
        #[arg(long, value_name = "KEY")]
        key: PathBuf,
        /// The record kind (a-z 0-9 _ . : -).
        #[arg(long, value_name = "K")]
        kind: String,
        /// The record body, as JSON.
        #[arg(long, value_name = "JSON")]
        body: String,
        /// The session the record belongs to.
        #[arg(long, default_value = "")]
        session: String,
        /// Flags: irreversible, tainted, flagged (repeatable).
        #[arg(long = "flag", value_name = "FLAG")]
        flags: Vec<String>,
        /// Close the journal after this record (writes `journal_closed`).
        #[arg(long)]
        close: bool,
        /// Replace KEY by the current epoch's key when the journal sealed an
        /// epoch (forward security on this host; keep the initial key elsewhere
        /// for `verify`).
        #[arg(long)]
        evolve_key: bool,
        /// When creating the journal: seal an epoch every N records.
        #[arg(long, value_name = "N", default_value_t = 10_000)]
        seal_every_records: u64,
        /// When creating the journal: seal an epoch every N milliseconds.
        #[arg(long, value_name = "N", default_value_t = 15 * 60 * 1000)]
        seal_every_millis: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Human,
    Json,
}

/// Runs `palisade journal`.
pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    match args.command {
        JournalCommand::Keygen { out } => keygen(&out),
        JournalCommand::Verify {
            file,
            from_syslog,
            key,
            anchor,
            format,
        } => match (file, from_syslog) {
            (_, Some(collected)) => verify_collected(&collected, &key, anchor.as_deref(), format),
            (Some(file), None) => verify_cmd(&file, &key, anchor.as_deref(), format),
            (None, None) => Err("journal verify: give a journal or --from-syslog FILE".to_owned()),
        },
        JournalCommand::Show { file, kind, format } => show(&file, kind.as_deref(), format),
        JournalCommand::Append {
            file,
            key,
            kind,
            body,
            session,
            flags,
            close,
            evolve_key,
            seal_every_records,
            seal_every_millis,
        } => append(
            &file,
            &key,
            &kind,
            &body,
            session,
            &flags,
            close,
            evolve_key,
            SealPolicy::new(
                NonZeroU64::new(seal_every_records),
                NonZeroU64::new(seal_every_millis),
            ),
        ),
    }
}

fn keygen(out: &Path) -> Result<ExitCode, String> {
    let key = JournalKey::generate().map_err(|e| e.to_string())?;
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                format!(
                    "{} already exists; refusing to overwrite a key",
                    out.display()
                )
            } else {
                format!("{}: {e}", out.display())
            }
        })?;
    file.write_all(key.expose_text().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("{}: {e}", out.display()))?;
    eprintln!(
        "wrote the initial journal key to {} (mode 0600); keep a copy off this host: whoever holds it can forge journals",
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Loads a journal key file, refusing one other users can read.
pub(crate) fn read_key(path: &Path) -> Result<JournalKey, String> {
    let bytes = input::read_private(path, input::Kind::Key, "key file")?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| format!("input_not_utf8: key file `{}` is not UTF-8", path.display()))?;
    JournalKey::from_text(text).map_err(|e| format!("key `{}`: {e}", path.display()))
}

/// Loads an anchor file.
pub(crate) fn read_anchor(path: &Path) -> Result<Anchor, String> {
    let text = input::read_text(path, input::Kind::Anchor)?;
    Anchor::from_json(text.trim()).map_err(|e| format!("anchor file `{}`: {e}", path.display()))
}

fn verify_cmd(
    file: &Path,
    key: &Path,
    anchor: Option<&Path>,
    format: Format,
) -> Result<ExitCode, String> {
    let key = read_key(key)?;
    let anchor = anchor.map(read_anchor).transpose()?;
    let opened = input::open(file, input::Kind::Journal)?;
    // The verifier `report` and `decide --journal` read records through.
    let mut verifier = Verifier::new(opened.file, &key, anchor);
    while verifier
        .next_line()
        .map_err(|e| format!("{}: {e}", file.display()))?
        .is_some()
    {}
    let report = verifier.finish();
    match format {
        Format::Json => println!("{}", report_json(&report)),
        Format::Human => print_report(file, &report),
    }
    Ok(exit_code(report.state()))
}

/// The exit status of a verification verdict: 0 closed, 3 open, 1 invalid.
fn exit_code(state: JournalState) -> ExitCode {
    match state {
        JournalState::Closed => ExitCode::SUCCESS,
        JournalState::Open => ExitCode::from(EXIT_NOT_CLOSED),
        JournalState::Invalid => ExitCode::from(EXIT_INVALID),
    }
}

/// Record bytes central verification keeps in memory at most.
const MAX_COLLECTED_BYTES: usize = 1 << 30;

fn verify_collected(
    file: &Path,
    key: &Path,
    anchor: Option<&Path>,
    format: Format,
) -> Result<ExitCode, String> {
    let key = read_key(key)?;
    let anchor = anchor.map(read_anchor).transpose()?;
    let opened = input::open(file, input::Kind::Journal)?;
    let mut collector = Collector::new(MAX_COLLECTED_BYTES);
    if let Some(anchor) = anchor {
        collector.push_anchor(anchor);
    }
    collector
        .push_reader(opened.file)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let central = collector.finish(&key);
    let states: Vec<JournalState> = central.journals.iter().map(|j| j.state()).collect();
    let overall = if states.is_empty() || states.contains(&JournalState::Invalid) {
        JournalState::Invalid
    } else if states.contains(&JournalState::Open) {
        JournalState::Open
    } else {
        JournalState::Closed
    };
    match format {
        Format::Json => {
            let journals: Vec<Value> = central
                .journals
                .iter()
                .map(|j| {
                    let mut v = report_json(&j.report);
                    let forks: Vec<Value> = j
                        .forks
                        .iter()
                        .map(|f| json!({"seq": f.seq, "first_line": f.first_line, "other_line": f.other_line}))
                        .collect();
                    if let Some(obj) = v.as_object_mut() {
                        obj.insert("distinct_records".to_owned(), json!(j.records));
                        obj.insert("duplicates".to_owned(), json!(j.duplicates));
                        obj.insert("anchors".to_owned(), json!(j.anchors.len()));
                        obj.insert("forks".to_owned(), Value::Array(forks));
                    }
                    v
                })
                .collect();
            let others: Vec<Value> = central
                .first_other_lines
                .iter()
                .map(|o| json!({"line": o.line, "reason": o.reason.to_string()}))
                .collect();
            println!(
                "{}",
                json!({
                    "verdict": state_name(overall),
                    "lines": central.lines,
                    "other_lines": central.other_lines,
                    "first_other_lines": others,
                    "journals": journals,
                })
            );
        }
        Format::Human => {
            if central.journals.is_empty() {
                println!(
                    "{}: INVALID: no palisade record in {} lines",
                    file.display(),
                    central.lines
                );
            }
            for j in &central.journals {
                print_report(file, &j.report);
                println!(
                    "  rebuilt from the collector: {} distinct records, {} duplicates dropped, {} anchors checked{}",
                    j.records,
                    j.duplicates,
                    j.anchors.len(),
                    if j.forks.is_empty() {
                        String::new()
                    } else {
                        format!(", {} forked seqs", j.forks.len())
                    }
                );
            }
            if central.other_lines > 0 {
                println!(
                    "  {} other lines ignored (not palisade records or anchors)",
                    central.other_lines
                );
                for o in &central.first_other_lines {
                    println!("    line {}: {}", o.line, o.reason);
                }
            }
        }
    }
    Ok(exit_code(overall))
}

fn state_name(state: JournalState) -> &'static str {
    match state {
        JournalState::Closed => "closed",
        JournalState::Open => "not_closed",
        JournalState::Invalid => "invalid",
    }
}

fn report_json(report: &Report) -> Value {
    json!({
        "verdict": state_name(report.state()),
        "journal": report.journal.map(|id| id.to_hex()),
        "records": report.records,
        "sealed_epochs": report.sealed_epochs,
        "unsealed_records": report.unsealed_records,
        "closed": report.closed,
        "recovered_torn_tails": report.recovered_torn_tails,
        "torn_tail_bytes": report.torn_tail_bytes,
        "time_range": report.time_range.map(|(a, b)| json!([a, b])),
        "last": report.last.as_ref().map(|a| {
            serde_json::from_str::<Value>(&a.to_json()).unwrap_or(Value::Null)
        }),
        "failure": report.failure_kind().map(|kind| {
            let failure = report.failure.as_ref();
            json!({
                "kind": kind.as_str(),
                "seq": failure.map(|f| f.seq),
                "line": failure.map(|f| f.line),
                "offset": failure.map(|f| f.offset),
                "message": failure.map_or_else(
                    || "no `journal_closed` record: the journal is open or was truncated".to_owned(),
                    |f| f.message.clone(),
                ),
            })
        }),
    })
}

fn print_report(file: &Path, report: &Report) {
    let id = report
        .journal
        .map_or_else(|| "?".to_owned(), |id| id.to_hex());
    let last = report
        .last
        .as_ref()
        .map_or_else(|| "none".to_owned(), |a| a.seq.to_string());
    match (&report.failure, report.state()) {
        (Some(failure), _) => {
            println!(
                "{}: INVALID: {} at seq {} (line {}, byte {}): {}",
                file.display(),
                failure.kind,
                failure.seq,
                failure.line,
                failure.offset,
                failure.message
            );
            println!(
                "  journal {id}: {} records verified before the failure (last verified seq {last})",
                report.records
            );
        }
        (None, JournalState::Closed) => println!(
            "{}: valid and closed: journal {id}, {} records (seq 0 to {last}), {} sealed epochs",
            file.display(),
            report.records,
            report.sealed_epochs
        ),
        (None, _) => println!(
            "{}: valid but NOT CLOSED (still open, or truncated): journal {id}, {} records (seq 0 to {last}), {} sealed epochs, {} records after the last seal",
            file.display(),
            report.records,
            report.sealed_epochs,
            report.unsealed_records
        ),
    }
    if report.recovered_torn_tails > 0 {
        println!(
            "  {} torn tail(s) were recovered after crashes (see `recovered_torn_tail` records)",
            report.recovered_torn_tails
        );
    }
}

fn show(file: &Path, kind: Option<&str>, format: Format) -> Result<ExitCode, String> {
    let opened = input::open(file, input::Kind::Journal)?;
    let max = input::Kind::Journal.limit();
    // Streamed line by line: the journal may legitimately be large.
    let mut reader = std::io::BufReader::with_capacity(1 << 16, opened.file);
    let mut line = Vec::new();
    let mut bad = 0usize;
    let mut out = std::io::stdout().lock();
    for idx in 0usize.. {
        match input::read_line(&mut reader, max, &mut line)
            .map_err(|e| format!("{}: {e}", file.display()))?
        {
            input::Line::End => break,
            input::Line::TooLong => {
                eprintln!(
                    "{}:{}: line longer than {} ({max} bytes); stopping here",
                    file.display(),
                    idx + 1,
                    input::size(max)
                );
                return Ok(ExitCode::from(EXIT_INVALID));
            }
            input::Line::Complete | input::Line::Unterminated => {}
        }
        if line.is_empty() {
            continue;
        }
        let line = line.as_slice();
        let Ok(record) = serde_json::from_slice::<Value>(line) else {
            bad += 1;
            eprintln!("{}:{}: not a JSON record", file.display(), idx + 1);
            continue;
        };
        let field = |name: &str| record.get(name).unwrap_or(&Value::Null);
        if kind.is_some_and(|k| field("kind").as_str() != Some(k)) {
            continue;
        }
        let res = match format {
            Format::Json => out.write_all(line).and_then(|()| out.write_all(b"\n")),
            Format::Human => writeln!(
                out,
                "{:>6} e{:<3} {} {:<20} {} {}{}",
                field("seq"),
                field("epoch"),
                field("time"),
                field("kind").as_str().unwrap_or("?"),
                field("session").as_str().unwrap_or(""),
                field("flags")
                    .as_array()
                    .filter(|f| !f.is_empty())
                    .map(|f| format!("{} ", Value::Array(f.clone())))
                    .unwrap_or_default(),
                field("body")
            ),
        };
        if let Err(e) = res {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(ExitCode::SUCCESS);
            }
            return Err(format!("stdout: {e}"));
        }
    }
    if bad > 0 {
        return Ok(ExitCode::from(EXIT_INVALID));
    }
    Ok(ExitCode::SUCCESS)
}

#[expect(
    clippy::too_many_arguments,
    reason = "one parameter per command-line option"
)]
fn append(
    file: &Path,
    key_path: &Path,
    kind: &str,
    body: &str,
    session: String,
    flags: &[String],
    close: bool,
    evolve_key: bool,
    seal: SealPolicy,
) -> Result<ExitCode, String> {
    let key = read_key(key_path)?;
    let kind = Kind::parse(kind).map_err(|e| e.to_string())?;
    let body = Body::from_json_text(body).map_err(|e| format!("--body: {e}"))?;
    let mut all = Flags::NONE;
    for name in flags {
        let flag = Flags::from_name(name).ok_or_else(|| {
            format!("unknown flag `{name}` (use irreversible, tainted or flagged)")
        })?;
        all = all | flag;
    }
    let options = WriterOptions::default()
        .with_durability(Durability::Synced {
            batch: 1,
            max_latency: std::time::Duration::ZERO,
        })
        .with_seal(seal);
    let now = now();
    let writer = if file.exists() {
        JournalWriter::open(file, &key, &options, now).map(|(writer, report)| {
            if let Some(cut) = report.cut_bytes {
                eprintln!(
                    "recovered a torn final line of {cut} bytes (recorded as seq {})",
                    report.recovery_seq.unwrap_or_default()
                );
            }
            writer
        })
    } else {
        JournalWriter::create(file, &key, &options, now)
    }
    .map_err(|e| journal_error(file, &e))?;
    let entry = Entry::new(now, session, kind, body).with_flags(all);
    writer.append(&entry).map_err(|e| journal_error(file, &e))?;
    let anchor = if close {
        writer.close(now)
    } else {
        writer.sync().and_then(|a| a.ok_or(JournalError::Empty))
    }
    .map_err(|e| journal_error(file, &e))?;
    // Everything is durable now, so the current key may replace the file's.
    let current = writer.current_key();
    if evolve_key && current.epoch() > key.epoch() {
        replace_key_file(key_path, &current)?;
        eprintln!(
            "{}: evolved to epoch {}; earlier keys are gone from this file",
            key_path.display(),
            current.epoch()
        );
    }
    println!("{}", anchor.to_json());
    Ok(ExitCode::SUCCESS)
}

/// Atomically replaces the key file: write a sibling, sync, rename, sync
/// the directory.
fn replace_key_file(path: &Path, key: &JournalKey) -> Result<(), String> {
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".new");
    let tmp = PathBuf::from(tmp_name);
    let _ = std::fs::remove_file(&tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    file.write_all(key.expose_text().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("{}: {e}", dir.display()))
}

fn journal_error(file: &Path, err: &JournalError) -> String {
    format!("{}: {err}", file.display())
}

/// The wall clock in Unix milliseconds (the CLI is the only reader of clocks).
fn now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Timestamp::from_unix_millis(ms)
}
