//! Loading `palisade.toml`, the marks file and session files for the host
//! policy commands, and printing policy diagnostics.

use std::path::{Path, PathBuf};

use palisade_evidence::{JournalState, Kind, Verifier};
use palisade_schema::Diagnostic;
use palisade_schema::LineIndex;
use palisade_schema::host_policy::{self, HostPolicy};
use palisade_taint::{EVIDENCE_KIND, Record, Rules, Session, parse_marks};

use crate::input;

/// A loaded policy with the file it came from.
pub(crate) struct Loaded {
    pub(crate) policy: HostPolicy,
    pub(crate) path: PathBuf,
    /// The exact text the policy was parsed from (its digest is recorded).
    pub(crate) text: String,
}

/// Reads and parses the policy; any error is printed and returned as `Err`.
pub(crate) fn load_policy(path: &Path) -> Result<Loaded, String> {
    let text = input::read_text(path, input::Kind::Policy)?;
    let name = path.display().to_string();
    match host_policy::parse(&name, &text) {
        Ok(parsed) => Ok(Loaded {
            policy: parsed.into_value(),
            path: path.to_owned(),
            text,
        }),
        Err(refused) => {
            // In document order, as the policy reads.
            let mut diags = refused.into_vec();
            diags.sort_by_key(|d| (d.line, d.column));
            eprint!("{}", render(&diags, &text));
            let n = diags.iter().filter(|d| d.is_error()).count();
            Err(format!("{name}: {n} error(s); the policy is refused"))
        }
    }
}

/// The marks file for `loaded`: `explicit` if given, else `taint.marks_file`
/// relative to the policy file's directory.
pub(crate) fn marks_path(loaded: &Loaded, explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_owned();
    }
    let dir = loaded.path.parent().unwrap_or_else(|| Path::new("."));
    dir.join(&loaded.policy.taint.marks_file)
}

/// Reads the marks file; a missing file means no marks.
pub(crate) fn read_marks(path: &Path) -> Result<Vec<String>, String> {
    Ok(input::read_optional(path, input::Kind::Marks)?
        .map(|text| parse_marks(&text))
        .unwrap_or_default())
}

/// Loads a session: a serialized `Session` object, a JSON array of records,
/// or JSON lines of records (rebuilt under `rules`).
pub(crate) fn load_session(path: &Path, rules: &Rules) -> Result<Session, String> {
    let text = input::read_text(path, input::Kind::Session)?;
    let trimmed = text.trim_start();
    let bad =
        |e: serde_json::Error| format!("{}: not a session or record list: {e}", path.display());
    if trimmed.starts_with('[') {
        let records: Vec<Record> = serde_json::from_str(&text).map_err(bad)?;
        return Ok(Session::rebuild(rules, &records));
    }
    if let Ok(s) = serde_json::from_str::<Session>(&text) {
        return Ok(s);
    }
    let mut records = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let r: Record = serde_json::from_str(line)
            .map_err(|e| format!("{}:{}: not a session record: {e}", path.display(), i + 1))?;
        records.push(r);
    }
    Ok(Session::rebuild(rules, &records))
}

/// Where `decide --journal` takes a session from.
pub(crate) struct JournalSource<'a> {
    pub(crate) journal: &'a Path,
    pub(crate) key: &'a Path,
    pub(crate) anchor: Option<&'a Path>,
    /// Accept a journal without `journal_closed`.
    pub(crate) allow_open: bool,
    /// Replay only this session's records.
    pub(crate) session_id: Option<&'a str>,
}

/// Most session records `decide --journal` replays (bounds its memory).
const MAX_JOURNAL_SESSION_RECORDS: usize = 100_000;

/// Rebuilds a session from a sealed journal: the records are the entries
/// the verifier handed out (never the file read again), and a journal that
/// does not verify, or (without `allow_open`) is not closed, is refused.
pub(crate) fn load_journal_session(
    src: &JournalSource<'_>,
    rules: &Rules,
) -> Result<Session, String> {
    let key = crate::journal::read_key(src.key)?;
    let anchor = src.anchor.map(crate::journal::read_anchor).transpose()?;
    let opened = input::open(src.journal, input::Kind::Journal)?;
    let shown = src.journal.display();
    let mut verifier = Verifier::new(opened.file, &key, anchor);
    let mut entries = Vec::new();
    for entry in verifier.by_ref() {
        let entry = entry.map_err(|e| format!("journal `{shown}`: {e}"))?;
        let replayed = entry.kind().as_str() == EVIDENCE_KIND || *entry.kind() == Kind::TaintRaised;
        if !replayed || src.session_id.is_some_and(|id| id != entry.session()) {
            continue;
        }
        if entries.len() == MAX_JOURNAL_SESSION_RECORDS {
            return Err(format!(
                "journal_too_large: `{shown}` has more than {MAX_JOURNAL_SESSION_RECORDS} session records to replay"
            ));
        }
        entries.push(entry);
    }
    let report = verifier.finish();
    match report.state() {
        JournalState::Closed => {}
        JournalState::Open if src.allow_open => {}
        JournalState::Open => {
            return Err(format!(
                "journal_not_closed: `{shown}` has no `journal_closed` record (still open, or truncated); pass --allow-open to rebuild from the {} records it has",
                report.records
            ));
        }
        JournalState::Invalid => {
            let why = report.failure.as_ref().map_or_else(String::new, |f| {
                format!(" at seq {} (line {}): {}", f.seq, f.line, f.message)
            });
            return Err(format!("journal_invalid: `{shown}` does not verify{why}"));
        }
    }
    Session::rebuild_from(rules, &entries).map_err(|e| format!("journal `{shown}`: {e}"))
}

/// Renders diagnostics rustc-style, with the offending line and a caret.
pub(crate) fn render(diags: &[Diagnostic], text: &str) -> String {
    let index = LineIndex::new(text);
    let mut out = String::new();
    for d in diags {
        out.push_str(&format!(
            "{}[{}]: {}:{}:{}: ",
            d.severity, d.code, d.file, d.line, d.column
        ));
        if !d.path.is_root() {
            out.push_str(&format!("{}: ", d.path));
        }
        out.push_str(&d.message);
        out.push('\n');
        if let Some(line) = index.line_text(d.line) {
            let n = d.line.to_string();
            let pad = " ".repeat(n.len());
            let col = usize::try_from(d.column.saturating_sub(1)).unwrap_or(0);
            let (shown, caret) = window(line, col);
            out.push_str(&format!(
                "{pad} |\n{n} | {shown}\n{pad} | {}^\n",
                " ".repeat(caret)
            ));
        }
        if let Some(help) = &d.help {
            out.push_str(&format!("  = help: {help}\n"));
        }
    }
    out
}

/// At most `WIDTH` characters of `line` around character column `col`, and
/// the caret's column within them. Control characters are shown as `?`.
fn window(line: &str, col: usize) -> (String, usize) {
    const WIDTH: usize = 100;
    let start = col.saturating_sub(WIDTH / 2);
    let mut shown: String = line
        .chars()
        .skip(start)
        .take(WIDTH)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    let mut caret = col - start;
    if start > 0 {
        shown.insert_str(0, "...");
        caret += 3;
    }
    if line.chars().count() > start + WIDTH {
        shown.push_str("...");
    }
    (shown, caret)
}

#[cfg(test)]
mod tests {
    use super::window;

    #[test]
    fn long_lines_are_windowed_around_the_column() {
        assert_eq!(window("abc", 1), ("abc".to_owned(), 1));
        let long = "x".repeat(1000);
        let (shown, caret) = window(&long, 500);
        assert_eq!(shown.len(), 106);
        assert_eq!(caret, 53);
        assert_eq!(window("a\tb", 2), ("a?b".to_owned(), 2));
    }
}
