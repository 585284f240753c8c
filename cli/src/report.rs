//! `palisade report FILE --key KEY`: a human summary of one run's journal.
//!
//! The journal is verified first; only verified records are summarised, and
//! the verification status heads the report. Sections: the execution, hosts
//! contacted (with bytes), denials with reasons, relay requests, taint and
//! when, outward actions, steering writes, and how the run ended.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args as ClapArgs;
use serde_json::Value;

/// Summarise a run's sealed journal.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    /// The journal file.
    file: PathBuf,
    /// The journal key file (from `palisade journal keygen`).
    #[arg(long)]
    key: PathBuf,
    /// An anchor file: fail when the journal ends before it.
    #[arg(long)]
    anchor: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_parser = ["human", "json"], default_value = "human")]
    format: String,
}

/// One verified record, as the report reads it.
#[derive(Debug, Clone)]
pub(crate) struct Rec {
    seq: u64,
    time: u64,
    kind: String,
    flags: Vec<String>,
    body: Value,
}

impl Rec {
    /// The report's view of a record the verifier handed out (no second
    /// parse of the line).
    fn from_entry(entry: palisade_evidence::VerifiedEntry) -> Self {
        Self {
            seq: entry.seq(),
            time: entry.time().as_unix_millis(),
            kind: entry.kind().as_str().to_owned(),
            flags: entry.flags().names().map(str::to_owned).collect(),
            body: entry.body().clone(),
        }
    }

    fn s(&self, key: &str) -> Option<&str> {
        self.body.get(key).and_then(Value::as_str)
    }

    fn n(&self, key: &str) -> Option<u64> {
        self.body.get(key).and_then(Value::as_u64)
    }
}

#[derive(Debug, Default)]
struct HostStats {
    connections: u64,
    bytes_up: u64,
    bytes_down: u64,
}

/// The summary of verified records.
#[derive(Debug, Default)]
pub(crate) struct Summary {
    started: Option<Rec>,
    sandbox: Vec<Rec>,
    policy: Vec<Rec>,
    hosts: BTreeMap<String, HostStats>,
    denials: Vec<(u64, String, String)>,
    relays: BTreeMap<String, (u64, u64)>,
    relay_refusals: Vec<(u64, String, String)>,
    taint: Vec<Rec>,
    outward: Vec<Rec>,
    steering: Vec<Rec>,
    /// `commit_applied` records: staged changes that reached the host.
    committed: u64,
    /// `commit_refused` records: staged changes kept in the quarantine.
    refused_changes: Vec<Rec>,
    /// `commit_conflict` records: staged changes left in the stage.
    conflicts: Vec<Rec>,
    /// `stage_checkpoint` records.
    checkpoints: u64,
    ended: Option<Rec>,
    other: BTreeMap<String, u64>,
}

fn target_of(r: &Rec) -> String {
    if let Some(h) = r.s("host") {
        return match r.n("port") {
            Some(p) => format!("{h}:{p}"),
            None => h.to_owned(),
        };
    }
    r.s("target")
        .or_else(|| r.s("authority"))
        .unwrap_or("?")
        .to_owned()
}

fn is_denied(r: &Rec) -> bool {
    matches!(
        r.s("decision").or_else(|| r.s("outcome")),
        Some("deny" | "denied" | "refused" | "routing_denied" | "outward_denied")
    )
}

/// Builds the summary from records in order.
pub(crate) fn summarize(recs: impl IntoIterator<Item = Rec>) -> Summary {
    let mut s = Summary::default();
    for r in recs {
        let r = &r;
        match r.kind.as_str() {
            "execution_started" => s.started = Some(r.clone()),
            "sandbox_status" => s.sandbox.push(r.clone()),
            "tool_policy_applied" | "policy_loaded" => s.policy.push(r.clone()),
            "egress_connection" => {
                let target = target_of(r);
                if is_denied(r) {
                    let why = r
                        .s("reason")
                        .or_else(|| r.s("rule"))
                        .unwrap_or("denied")
                        .to_owned();
                    s.denials.push((r.time, target, why));
                } else {
                    let h = s.hosts.entry(target).or_default();
                    h.connections = h.connections.saturating_add(1);
                    h.bytes_up = h.bytes_up.saturating_add(r.n("bytes_up").unwrap_or(0));
                    h.bytes_down = h.bytes_down.saturating_add(r.n("bytes_down").unwrap_or(0));
                }
            }
            "relay_request" => {
                let name = r.s("relay").unwrap_or("relay").to_owned();
                let what = format!(
                    "{} {} {}",
                    name,
                    r.s("method").unwrap_or("?"),
                    r.s("path").unwrap_or("?")
                );
                if is_denied(r) {
                    let why = r.s("reason").unwrap_or("refused").to_owned();
                    s.relay_refusals.push((r.time, what, why));
                } else {
                    let e = s.relays.entry(name).or_insert((0, 0));
                    e.0 = e.0.saturating_add(1);
                    e.1 =
                        e.1.saturating_add(r.n("bytes_up").unwrap_or(0))
                            .saturating_add(r.n("bytes_down").unwrap_or(0));
                }
            }
            "taint_raised" => s.taint.push(r.clone()),
            "outward_action" => s.outward.push(r.clone()),
            "steering_write" => s.steering.push(r.clone()),
            "commit_applied" => s.committed = s.committed.saturating_add(1),
            "commit_refused" => s.refused_changes.push(r.clone()),
            "commit_conflict" => s.conflicts.push(r.clone()),
            "stage_checkpoint" => s.checkpoints = s.checkpoints.saturating_add(1),
            "execution_ended" | "execution_killed" => s.ended = Some(r.clone()),
            "journal_opened" | "epoch_sealed" | "journal_closed" => {}
            other => *s.other.entry(other.to_owned()).or_insert(0) += 1,
        }
    }
    s
}

/// Milliseconds since the Unix epoch as `HH:MM:SS.mmm` UTC (the date is in the header).
fn clock(ms: u64) -> String {
    let secs = ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60,
        ms % 1000
    )
}

fn bytes(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20))
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

/// Renders the human report.
pub(crate) fn render(status: &str, s: &Summary) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "verification: {status}");
    if let Some(r) = &s.started {
        let cmd = r
            .body
            .get("command")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "execution: started {} profile {} session {} `{}`",
            clock(r.time),
            r.s("profile").unwrap_or("?"),
            r.s("session").unwrap_or("?"),
            cmd
        );
    }
    for r in &s.sandbox {
        let _ = writeln!(
            o,
            "sandbox: {}",
            r.s("status").unwrap_or(&r.body.to_string())
        );
    }
    for r in &s.policy {
        let _ = writeln!(
            o,
            "{}: {}",
            r.kind,
            r.s("digest")
                .or_else(|| r.s("step"))
                .unwrap_or(&r.body.to_string())
        );
    }
    let _ = writeln!(o, "\nhosts contacted ({}):", s.hosts.len());
    for (h, st) in &s.hosts {
        let _ = writeln!(
            o,
            "  {h}: {} connection(s), {} up, {} down",
            st.connections,
            bytes(st.bytes_up),
            bytes(st.bytes_down)
        );
    }
    let _ = writeln!(o, "relays:");
    for (name, (n, b)) in &s.relays {
        let _ = writeln!(o, "  {name}: {n} request(s), {}", bytes(*b));
    }
    let _ = writeln!(
        o,
        "\ndenials ({}):",
        s.denials.len() + s.relay_refusals.len()
    );
    for (t, target, why) in s.denials.iter().chain(&s.relay_refusals) {
        let _ = writeln!(o, "  {} {target}: {why}", clock(*t));
    }
    let _ = writeln!(o, "\ntaint:");
    match s.taint.first() {
        None => {
            let _ = writeln!(o, "  never tainted");
        }
        Some(first) => {
            let _ = writeln!(o, "  tainted at {}", clock(first.time));
            for r in &s.taint {
                let _ = writeln!(
                    o,
                    "  {} source {} {}",
                    clock(r.time),
                    r.s("source").unwrap_or("?"),
                    r.s("detail").unwrap_or("")
                );
            }
        }
    }
    let _ = writeln!(o, "\noutward actions ({}):", s.outward.len());
    for r in &s.outward {
        let irreversible = if r.flags.iter().any(|f| f == "irreversible") {
            " [irreversible]"
        } else {
            ""
        };
        let status = r
            .body
            .get("status")
            .and_then(Value::as_i64)
            .map_or_else(|| String::from("unknown"), |c| c.to_string());
        // A relay's action: the relay, the upstream status and the origin's
        // result for a ref; a worker's: the command's exit status.
        let outcome = match (r.s("event") == Some("executed"), r.s("via")) {
            (true, Some(via)) => format!(
                "executed via relay {via} (upstream status {status}{})",
                r.s("result").map(|x| format!(", {x}")).unwrap_or_default()
            ),
            (true, None) => format!("executed (exit status {status})"),
            (false, via) => format!(
                "{} (policy {}{}){}",
                r.s("decision").unwrap_or("?"),
                r.s("policy").unwrap_or("?"),
                r.s("approval")
                    .map(|a| format!(", {a}"))
                    .unwrap_or_default(),
                via.map(|v| format!(" via relay {v}")).unwrap_or_default()
            ),
        };
        let _ = writeln!(
            o,
            "  {} #{} {} {} -> {outcome}{irreversible}",
            clock(r.time),
            r.seq,
            r.s("kind").unwrap_or("?"),
            r.s("target").unwrap_or(""),
        );
    }
    let _ = writeln!(o, "\nsteering writes ({}):", s.steering.len());
    for r in &s.steering {
        let flagged = if r.flags.iter().any(|f| f == "flagged")
            || r.body.get("tainted") == Some(&Value::Bool(true))
        {
            " [FLAGGED: tainted session]"
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "  {} #{} {} {}{flagged}",
            clock(r.time),
            r.seq,
            r.s("change").unwrap_or("?"),
            r.s("path").unwrap_or("?")
        );
    }
    if s.committed > 0
        || !s.refused_changes.is_empty()
        || !s.conflicts.is_empty()
        || s.checkpoints > 0
    {
        // Paths are the worker's choice: escaped, so none drives the terminal.
        let shown = |r: &Rec, key: &str| r.s(key).unwrap_or("?").escape_debug().to_string();
        let _ = writeln!(
            o,
            "\nstaged writes: {} applied, {} refused, {} conflicts, {} checkpoints",
            s.committed,
            s.refused_changes.len(),
            s.conflicts.len(),
            s.checkpoints
        );
        for r in &s.refused_changes {
            let _ = writeln!(
                o,
                "  {} #{} refused {} {}/{} ({}): kept in quarantine {}",
                clock(r.time),
                r.seq,
                shown(r, "change"),
                shown(r, "root"),
                shown(r, "path"),
                shown(r, "rule"),
                shown(r, "quarantine"),
            );
        }
        for r in &s.conflicts {
            let _ = writeln!(
                o,
                "  {} #{} conflict {} {}/{}: {} (left in the stage)",
                clock(r.time),
                r.seq,
                shown(r, "change"),
                shown(r, "root"),
                shown(r, "path"),
                shown(r, "detail"),
            );
        }
    }
    if !s.other.is_empty() {
        let _ = writeln!(o, "\nother records:");
        for (k, n) in &s.other {
            let _ = writeln!(o, "  {k}: {n}");
        }
    }
    let _ = writeln!(o);
    match &s.ended {
        Some(r) => {
            let _ = writeln!(o, "ended: {} {} {}", clock(r.time), r.kind, r.body);
        }
        None => {
            let _ = writeln!(o, "ended: no end-of-execution record");
        }
    }
    o
}

/// Verification status in words, and whether it is valid (closed or open).
fn status_words(r: &palisade_evidence::Report) -> String {
    use palisade_evidence::JournalState;
    match r.state() {
        JournalState::Closed => format!(
            "VALID, closed ({} records, {} sealed epochs)",
            r.records, r.sealed_epochs
        ),
        JournalState::Open => format!(
            "VALID but OPEN: no journal_closed record, possibly truncated ({} records)",
            r.records
        ),
        JournalState::Invalid => match &r.failure {
            Some(f) => format!(
                "INVALID at seq {} (line {}): {} ({}); only the {} records before it are summarised",
                f.seq,
                f.line,
                f.kind.as_str(),
                f.message,
                r.records
            ),
            None => String::from("INVALID"),
        },
    }
}

pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    use palisade_evidence::JournalState;
    let key = crate::journal::read_key(&args.key)?;
    let anchor = args
        .anchor
        .as_deref()
        .map(crate::journal::read_anchor)
        .transpose()?;
    // The journal is streamed through the verifier `journal verify` uses:
    // only the lines it has verified reach the summary, and the verdict is
    // the one `journal verify` gives for the same file.
    let opened = crate::input::open(&args.file, crate::input::Kind::Journal)?;
    let mut verifier = palisade_evidence::Verifier::new(opened.file, &key, anchor);
    let mut read_error = None;
    let recs = std::iter::from_fn(|| match verifier.next_entry() {
        Ok(entry) => entry.map(Rec::from_entry),
        Err(e) => {
            read_error = Some(e);
            None
        }
    });
    let summary = summarize(recs);
    if let Some(e) = read_error {
        return Err(format!("journal `{}`: {e}", args.file.display()));
    }
    let report = verifier.finish();
    let status = status_words(&report);
    if args.format == "json" {
        let v = serde_json::json!({
            "verification": match report.state() {
                JournalState::Closed => "closed",
                JournalState::Open => "open",
                JournalState::Invalid => "invalid",
            },
            "failure": report.failure.as_ref().map(|f| serde_json::json!({"seq": f.seq, "kind": f.kind.as_str(), "message": f.message})),
            "records": report.records,
            "hosts": summary.hosts.iter().map(|(h, s)| serde_json::json!({"host": h, "connections": s.connections, "bytes_up": s.bytes_up, "bytes_down": s.bytes_down})).collect::<Vec<_>>(),
            "denials": summary.denials.iter().chain(&summary.relay_refusals).map(|(t, target, why)| serde_json::json!({"time": t, "target": target, "reason": why})).collect::<Vec<_>>(),
            "tainted_at": summary.taint.first().map(|r| r.time),
            "taint": summary.taint.iter().map(|r| r.body.clone()).collect::<Vec<_>>(),
            "outward": summary.outward.iter().map(|r| { let mut b = r.body.clone(); if let Some(o) = b.as_object_mut() { o.insert("irreversible".into(), serde_json::Value::Bool(r.flags.iter().any(|f| f == "irreversible"))); } b }).collect::<Vec<_>>(),
            "steering_writes": summary.steering.iter().map(|r| r.body.clone()).collect::<Vec<_>>(),
            "committed": summary.committed,
            "refused_changes": summary.refused_changes.iter().map(|r| r.body.clone()).collect::<Vec<_>>(),
            "conflicts": summary.conflicts.iter().map(|r| r.body.clone()).collect::<Vec<_>>(),
            "ended": summary.ended.as_ref().map(|r| serde_json::json!({"kind": r.kind, "body": r.body})),
        });
        println!("{v}");
    } else {
        print!("{}", render(&status, &summary));
    }
    Ok(ExitCode::from(match report.state() {
        JournalState::Closed => 0,
        JournalState::Invalid => 1,
        JournalState::Open => 3,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, kind: &str, body: Value, flags: &[&str]) -> Rec {
        Rec {
            seq,
            time: 1_000 * seq,
            kind: kind.into(),
            flags: flags.iter().map(|f| (*f).to_owned()).collect(),
            body,
        }
    }

    #[test]
    fn the_report_lists_hosts_denials_taint_outward_and_steering() {
        use serde_json::json;
        let recs = [
            rec(
                1,
                "execution_started",
                json!({"profile":"governed","command":["sh","w.sh"]}),
                &[],
            ),
            rec(
                2,
                "egress_connection",
                json!({"host":"a.example","port":443,"decision":"allow","bytes_up":10,"bytes_down":2048}),
                &[],
            ),
            rec(
                3,
                "egress_connection",
                json!({"host":"b.example","port":443,"decision":"deny","reason":"not in egress.allow"}),
                &[],
            ),
            rec(
                4,
                "taint_raised",
                json!({"source":"marked_file","detail":"notes/x.md"}),
                &[],
            ),
            rec(
                5,
                "outward_action",
                json!({"kind":"git.push","target":"r","decision":"deny","policy":"ask","approval":"timed_out"}),
                &[],
            ),
            rec(
                6,
                "steering_write",
                json!({"path":"AGENTS.md","change":"modified","tainted":true}),
                &["flagged"],
            ),
            rec(7, "execution_ended", json!({"exit_code":0}), &[]),
            rec(
                8,
                "outward_action",
                json!({"event":"executed","kind":"git.push","target":"r","status":0}),
                &["irreversible"],
            ),
            rec(
                9,
                "outward_action",
                json!({"event":"decided","kind":"git.push","target":"g","policy":"ask","decision":"allow","approval":"approved","via":"github"}),
                &[],
            ),
            rec(
                10,
                "outward_action",
                json!({"event":"executed","kind":"git.push","target":"g","status":200,"via":"github","result":"ok"}),
                &["irreversible"],
            ),
        ];
        let out = render("valid, closed", &summarize(recs.clone()));
        assert!(
            out.contains("a.example:443: 1 connection(s), 10 B up, 2.0 KiB down"),
            "{out}"
        );
        assert!(out.contains("b.example:443: not in egress.allow"), "{out}");
        assert!(out.contains("tainted at 00:00:04.000"), "{out}");
        assert!(
            out.contains("git.push r -> deny (policy ask, timed_out)"),
            "{out}"
        );
        assert!(out.contains("modified AGENTS.md [FLAGGED"), "{out}");
        assert!(out.contains("ended: 00:00:07.000 execution_ended"), "{out}");
        assert!(
            out.contains("#8 git.push r -> executed (exit status 0) [irreversible]"),
            "{out}"
        );
        // A relay's action names the relay and the upstream's answer.
        assert!(
            out.contains("#9 git.push g -> allow (policy ask, approved) via relay github\n"),
            "{out}"
        );
        assert!(
            out.contains(
                "#10 git.push g -> executed via relay github (upstream status 200, ok) [irreversible]"
            ),
            "{out}"
        );
        assert_eq!(recs[0].seq, 1);
    }

    #[test]
    fn relay_requests_refused_by_routing_or_outward_are_listed_as_refusals() {
        use serde_json::json;
        let relay = |seq, outcome: &str, reason: &str| {
            rec(
                seq,
                "relay_request",
                json!({"relay":"github","method":"POST","path":format!("/p{seq}"),"outcome":outcome,"reason":reason,"bytes_up":5,"bytes_down":7}),
                &[],
            )
        };
        let recs = [
            relay(1, "outward_denied", "outward_denied"),
            relay(2, "routing_denied", "routing_denied"),
            relay(3, "forwarded", "forwarded"),
        ];
        let s = summarize(recs);
        let refused: Vec<&str> = s
            .relay_refusals
            .iter()
            .map(|(_, w, _)| w.as_str())
            .collect();
        assert_eq!(refused, ["github POST /p1", "github POST /p2"]);
        // positive control: the forwarded one is counted as used
        assert_eq!(s.relays.get("github"), Some(&(1, 12)));
    }

    #[test]
    fn the_report_lists_refused_changes_with_their_quarantine_and_conflicts() {
        use serde_json::json;
        let recs = [
            rec(
                1,
                "commit_applied",
                json!({"root":"/w","path":"src/main.rs","change":"modified","before":"sha256:aa","after":"sha256:bb"}),
                &[],
            ),
            rec(
                2,
                "commit_refused",
                json!({"root":"/w","path":".git/hooks/pre-commit","change":"created","rule":"git_internal","quarantine":"/s/0/quarantine/.git/hooks/pre-commit"}),
                &["flagged"],
            ),
            rec(
                3,
                "commit_conflict",
                json!({"root":"/w","path":"shared\u{1b}[2J.txt","change":"modified","detail":"the host file changed"}),
                &["flagged"],
            ),
        ];
        let out = render("valid, closed", &summarize(recs));
        assert!(
            out.contains("staged writes: 1 applied, 1 refused, 1 conflicts"),
            "{out}"
        );
        assert!(
            out.contains("refused created /w/.git/hooks/pre-commit (git_internal): kept in quarantine /s/0/quarantine/.git/hooks/pre-commit"),
            "{out}"
        );
        assert!(out.contains("conflict modified /w/shared"), "{out}");
        assert!(out.contains("the host file changed"), "{out}");
        // A path cannot drive the terminal.
        assert!(!out.contains('\u{1b}'), "{out:?}");
        // Not counted as unknown records.
        assert!(!out.contains("other records"), "{out}");
    }
}
