//! Staged writes in the CLI: where a run's stage lives, the filtered commit
//! at the end of a run (and of `palisade commit`), its journal records and
//! the one-screen summary.
//!
//! The isolate crate owns the stage itself (`palisade_isolate::stage`): the
//! overlay, the change set, the filter and the commit. This module chooses
//! the stage's base directory, runs the change set through the filter and
//! the commit, records every event in the session's journal (paths and
//! digests only, never content), and decides whether the stage is kept.

use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use globset::GlobSet;
use palisade_evidence::{Flags, Kind};
use palisade_isolate::stage::{
    Change, ChangeKind, ChangeSet, CommitEvent, CommitFilter, CommitReport, FilterVerdict, Stage,
};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::session::core::Journal;

/// The most bytes of a path shown in a summary line or a checkpoint answer.
const MAX_SHOWN_PATH: usize = 512;

/// How `palisade run` lets the worker write its writable roots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Writes {
    /// Through an overlay; committed to the host through the filter when
    /// the worker ends (the default).
    Staged,
    /// Straight to the host (the weaker mode, recorded as a downgrade).
    Direct,
}

/// The staged-writes options of `palisade run`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct RunArgs {
    /// How the worker writes its writable roots: `staged` (the default: an
    /// overlay, committed through the filter when it ends) or `direct`
    /// (straight to the host, recorded as a downgrade, like
    /// `--dangerously-disable staged_writes`).
    #[arg(long, value_enum, value_name = "MODE")]
    pub(crate) writes: Option<Writes>,
    /// Keep the stage instead of committing it; inspect it with `palisade
    /// diff SESSION`, apply it with `palisade commit SESSION`.
    #[arg(long)]
    pub(crate) keep_staged: bool,
    /// Where stages are kept (default: `$XDG_STATE_HOME/palisade/stages`,
    /// else `~/.local/state/palisade/stages`, `/var/lib/palisade/stages`
    /// for root). It must lie outside every writable root.
    #[arg(long, value_name = "DIR")]
    pub(crate) stage_dir: Option<PathBuf>,
}

/// The default stage base of this user: `$XDG_STATE_HOME/palisade/stages`,
/// else `/var/lib/palisade/stages` for root, else
/// `~/.local/state/palisade/stages`; `None` without an absolute `HOME`.
fn default_base() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").map(PathBuf::from)
        && d.is_absolute()
    {
        return Some(d.join("palisade/stages"));
    }
    if nix::unistd::geteuid().is_root() {
        return Some(PathBuf::from("/var/lib/palisade/stages"));
    }
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .map(|h| h.join(".local/state/palisade/stages"))
}

/// The fallback base when the default lies inside a writable root.
fn fallback_base() -> PathBuf {
    PathBuf::from(format!(
        "/var/tmp/palisade-{}/stages",
        nix::unistd::geteuid()
    ))
}

/// `path` with its longest existing ancestor resolved (symlinks followed)
/// and the rest appended lexically: where the path is or would be.
fn resolved(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut cur = path.to_path_buf();
    loop {
        if let Ok(c) = std::fs::canonicalize(&cur) {
            let mut out = c;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return out;
        }
        match (cur.file_name().map(ToOwned::to_owned), cur.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                cur = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// The writable root `path` lies in (or is), if any.
fn inside_root<'a>(path: &Path, roots: &'a [PathBuf]) -> Option<&'a PathBuf> {
    let p = resolved(path);
    roots.iter().find(|r| {
        let r = resolved(r);
        p.starts_with(&r)
    })
}

/// Creates `dir` (mode 0700) unless it exists, then checks that it is a
/// directory, not a symlink, owned by us, and reachable by nobody else.
fn private_dir(dir: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(format!(
            "{} is not a directory (a symlink or another file is refused)",
            dir.display()
        ));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(format!(
            "{} is owned by uid {}, not by this user",
            dir.display(),
            meta.uid()
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    Ok(())
}

/// The base directory of a run's stage, created: `flag` (`--stage-dir`),
/// else the default; outside every writable root (`roots`). A default that
/// lies inside a root (e.g. a run in `$HOME`), or on another filesystem
/// than the first root when the fallback is on the same, gives way to
/// `/var/tmp/palisade-<uid>/stages`, created 0700 and owner-checked without
/// following symlinks; an explicit `--stage-dir` inside a root is refused.
pub(crate) fn run_base(flag: Option<&Path>, roots: &[PathBuf]) -> Result<PathBuf, String> {
    if let Some(dir) = flag {
        // Relative to the current directory, made absolute (the stage's
        // manifest and the overlay need absolute paths).
        let dir =
            &std::path::absolute(dir).map_err(|e| format!("--stage-dir {}: {e}", dir.display()))?;
        if let Some(r) = inside_root(dir, roots) {
            return Err(format!(
                "--stage-dir {} lies inside the writable root {}: the worker would see its own stage; choose a directory outside every writable root",
                dir.display(),
                r.display()
            ));
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("--stage-dir {}: {e}", dir.display()))?;
        private_dir(dir)?;
        return Ok(dir.to_path_buf());
    }
    // The default, then the fallback: each outside every root and made
    // private; of those, the first on the first root's filesystem (the
    // commit is then a rename), else the first at all (the commit copies).
    let root_dev = roots
        .first()
        .and_then(|r| std::fs::metadata(r).ok())
        .map(|m| m.dev());
    let mut usable: Vec<PathBuf> = Vec::new();
    let mut last = String::from("no default stage directory (no HOME)");
    for b in default_base().into_iter().chain([fallback_base()]) {
        if let Some(r) = inside_root(&b, roots) {
            last = format!(
                "{} lies inside the writable root {}",
                b.display(),
                r.display()
            );
            continue;
        }
        match make_base(&b) {
            Ok(()) => {
                let dev = std::fs::metadata(&b).ok().map(|m| m.dev());
                if dev.is_some() && dev == root_dev {
                    return Ok(b);
                }
                usable.push(b);
            }
            Err(e) => last = e,
        }
    }
    usable.into_iter().next().ok_or_else(|| {
        format!("no stage directory outside the writable roots ({last}); pass --stage-dir")
    })
}

/// Makes a stage base: the default under the user's own state directory
/// recursively, the shared `/var/tmp` fallback one private level at a
/// time (each made by us, or refused).
fn make_base(b: &Path) -> Result<(), String> {
    if b.starts_with("/var/tmp") {
        if let Some(parent) = b.parent() {
            private_dir(parent)?;
        }
        return private_dir(b);
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(b)
        .map_err(|e| format!("{}: {e}", b.display()))?;
    private_dir(b)
}

/// Whether `meta` (a host node) is writable by `uid`/`gid` from its owner,
/// group and mode bits (ACLs are not consulted; uid 0 writes everywhere).
fn writable_by(meta: &std::fs::Metadata, (uid, gid): (u32, u32)) -> bool {
    let mode = meta.permissions().mode();
    if uid == 0 {
        return true;
    }
    if meta.uid() == uid {
        mode & 0o200 != 0
    } else if meta.gid() == gid {
        mode & 0o020 != 0
    } else {
        mode & 0o002 != 0
    }
}

/// Adds to `filter`, for `set`, the changes the worker could only make
/// because staging let it: the overlay shows a root's top directory as the
/// stage's upper directory, which is the worker's, so in a root whose top
/// directory the worker's uid (the upper's owner) cannot write on the host
/// it could still create, delete or rename entries there. Those are refused
/// (rule `root_not_writable`, with everything below a created directory),
/// and so is a top-level file modified in such a root when the worker's uid
/// cannot write that file on the host (replaced through a rename in the
/// widened directory). Below the top the overlay judges every access on the
/// host's own owner and mode, so nothing else widens.
pub(crate) fn refuse_widened(filter: &mut CommitFilter, stage: &Stage, set: &ChangeSet) {
    for (i, r) in stage.roots().iter().enumerate() {
        let (Ok(upper), Ok(root)) = (
            std::fs::symlink_metadata(r.upper()),
            std::fs::metadata(r.root()),
        ) else {
            continue;
        };
        let worker = (upper.uid(), upper.gid());
        if writable_by(&root, worker) {
            continue;
        }
        for c in set
            .changes
            .iter()
            .filter(|c| c.root == i && c.path.components().count() == 1)
        {
            let allowed = match &c.kind {
                // chmod needs ownership, which the overlay checks on the
                // host's node.
                ChangeKind::ModeChanged => true,
                ChangeKind::Modified => std::fs::symlink_metadata(r.root().join(&c.path))
                    .is_ok_and(|m| m.is_file() && writable_by(&m, worker)),
                _ => false,
            };
            if !allowed {
                filter.refuse_exact(i, c.path.clone(), "root_not_writable");
            }
        }
    }
}

/// Refuses a session id that is not a plain name (it becomes a directory).
pub(crate) fn check_session(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a session id (1 to 64 letters, digits, `-` or `_`)",
            id.escape_debug()
        ))
    }
}

/// The stage of a kept session: under `flag`, else the default base or its
/// fallback, whichever holds it.
pub(crate) fn find_stage(flag: Option<&Path>, session: &str) -> Result<Stage, String> {
    check_session(session)?;
    let bases: Vec<PathBuf> = match flag {
        Some(f) => {
            vec![std::path::absolute(f).map_err(|e| format!("--stage-dir {}: {e}", f.display()))?]
        }
        None => default_base()
            .into_iter()
            .chain(std::iter::once(fallback_base()))
            .collect(),
    };
    for b in &bases {
        let dir = b.join(session);
        if std::fs::symlink_metadata(&dir).is_ok() {
            return Stage::open(&dir).map_err(|e| e.to_string());
        }
    }
    Err(format!(
        "no stage of session `{session}` under {}",
        bases
            .iter()
            .map(|b| b.display().to_string())
            .collect::<Vec<_>>()
            .join(" or ")
    ))
}

/// A path for people: lossy UTF-8, control characters escaped (a worker
/// chooses its file names: none may drive the operator's terminal), cut at
/// [`MAX_SHOWN_PATH`] bytes.
pub(crate) fn show_path(p: &Path) -> String {
    show_text(&p.to_string_lossy())
}

/// Text for people, as [`show_path`]: control characters escaped, cut at
/// [`MAX_SHOWN_PATH`] bytes (a conflict's or refusal's detail may quote
/// what the worker chose).
pub(crate) fn show_text(text: &str) -> String {
    let mut s = String::new();
    for c in text.chars() {
        if c.is_control() {
            let _ = write!(s, "{}", c.escape_default());
        } else {
            s.push(c);
        }
        if s.len() >= MAX_SHOWN_PATH {
            s.push('…');
            break;
        }
    }
    s
}

/// A path for records: lossy UTF-8 (records are JSON strings; escaping is
/// the journal's job).
fn record_path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The stable name of a change kind, as records and `--json` say it.
pub(crate) fn kind_name(k: &ChangeKind) -> &'static str {
    match k {
        ChangeKind::Created => "created",
        ChangeKind::Modified => "modified",
        ChangeKind::ModeChanged => "mode_changed",
        ChangeKind::Deleted => "deleted",
        ChangeKind::Renamed { .. } => "renamed",
        _ => "other",
    }
}

/// The `git status --short` letter of a change kind.
pub(crate) fn kind_letter(k: &ChangeKind) -> char {
    match k {
        ChangeKind::Created => 'A',
        ChangeKind::Modified => 'M',
        ChangeKind::ModeChanged => 'T',
        ChangeKind::Deleted => 'D',
        ChangeKind::Renamed { .. } => 'R',
        _ => '?',
    }
}

/// The host root of a change, for records.
fn root_of(stage: &Stage, c: &Change) -> String {
    stage
        .roots()
        .get(c.root)
        .map(|r| record_path(r.root()))
        .unwrap_or_default()
}

/// `sha256:<hex>` of the change list: one line `root\tkind\tpath\n` per
/// change (path bytes as they are), in the set's order.
pub(crate) fn set_digest(set: &ChangeSet) -> String {
    let mut h = Sha256::new();
    for c in &set.changes {
        h.update(c.root.to_string().as_bytes());
        h.update(b"\t");
        h.update(kind_name(&c.kind).as_bytes());
        h.update(b"\t");
        h.update(c.path.as_os_str().as_bytes());
        h.update(b"\n");
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

/// The homes a commit of `stage` guards ([`CommitFilter::home`]): the
/// invoking user's `$HOME` and, as root, `/root`, wherever a root of the
/// stage is that home or holds it.
pub(crate) fn mark_homes(filter: &mut CommitFilter, stage: &Stage) {
    let mut homes: Vec<PathBuf> = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .into_iter()
        .collect();
    if nix::unistd::geteuid().is_root() {
        homes.push(PathBuf::from("/root"));
    }
    for home in homes {
        let home = std::fs::canonicalize(&home).unwrap_or(home);
        for (i, r) in stage.roots().iter().enumerate() {
            let root = std::fs::canonicalize(r.root()).unwrap_or_else(|_| r.root().to_path_buf());
            if let Ok(rel) = home.strip_prefix(&root) {
                filter.home(i, rel);
            }
        }
    }
}

/// Refuse, in `filter`, a symlink at each steering path (`globs`,
/// `taint.steering_paths`) or below it, and one at a prefix of it, with
/// rule `steering_symlink`: a steering path redirected through a link
/// would take later edits of its target without a steering write.
pub(crate) fn refuse_steering_symlinks(
    filter: &mut CommitFilter,
    globs: &[String],
) -> Result<(), String> {
    for g in globs {
        filter
            .refuse_symlinks_into(g, "steering_symlink")
            .and_then(|f| f.refuse_symlinks_at(g, "steering_symlink"))
            .map_err(|e| format!("steering path: {e}"))?;
    }
    Ok(())
}

/// The filter of `stage`: `base` (the built-in list plus the policy's
/// `[worker.commit] refuse`), the homes ([`mark_homes`]), and the policy
/// file itself, refused with rule `policy_file`, when it lies inside one
/// of the stage's roots.
pub(crate) fn filter_for(
    mut base: CommitFilter,
    policy_file: Option<&Path>,
    stage: &Stage,
) -> CommitFilter {
    mark_homes(&mut base, stage);
    let Some(abs) = policy_file.and_then(|p| std::fs::canonicalize(p).ok()) else {
        return base;
    };
    for (i, r) in stage.roots().iter().enumerate() {
        let root = std::fs::canonicalize(r.root()).unwrap_or_else(|_| r.root().to_path_buf());
        if let Ok(rel) = abs.strip_prefix(&root)
            && !rel.as_os_str().is_empty()
        {
            base.refuse_exact(i, rel, "policy_file");
        }
    }
    base
}

/// The filter a policy gives a kept stage (`palisade diff`, `palisade
/// commit`): as [`filter_for`] with the policy's `[worker.commit]`, or the
/// built-in list alone without a policy.
pub(crate) fn filter_of_policy(
    loaded: Option<&crate::host_policy_file::Loaded>,
    stage: &Stage,
) -> Result<CommitFilter, String> {
    match loaded {
        Some(l) => {
            let mut base = CommitFilter::from_worker(&l.policy.worker)
                .map_err(|e| format!("{}: {e}", l.path.display()))?;
            let steering: Vec<String> = l
                .policy
                .taint
                .steering_paths
                .iter()
                .map(|g| g.as_str().to_owned())
                .collect();
            refuse_steering_symlinks(&mut base, &steering)
                .map_err(|e| format!("{}: {e}", l.path.display()))?;
            Ok(filter_for(base, Some(&l.path), stage))
        }
        None => {
            let mut base = CommitFilter::new();
            mark_homes(&mut base, stage);
            Ok(base)
        }
    }
}

/// Exit status of a commit that stopped half-way or could not start
/// (palisade's own failure, as for a setup failure).
pub(crate) const EXIT_COMMIT: u8 = 125;

/// The end of a staged run: commit `stage` through `filter` (or keep it,
/// with `keep`), print the summary, remove the stage when nothing is left,
/// and return the exit status: the worker's `code`, or [`EXIT_COMMIT`] when
/// the commit could not be completed.
pub(crate) fn finish(
    stage: Stage,
    filter: &CommitFilter,
    keep: bool,
    journal: Option<&Journaling<'_>>,
    code: u8,
) -> u8 {
    let session = stage.session().to_owned();
    if keep {
        if let Some(j) = journal {
            let _ = checkpoint_record(j.journal, &stage, filter, "kept");
        }
        eprintln!(
            "palisade: session {session}: the stage is kept in {}, nothing was committed; inspect it with `palisade diff {session}`, apply it with `palisade commit {session}`",
            show_path(stage.dir())
        );
        return code;
    }
    match commit(&stage, filter, None, journal) {
        Err(e) => {
            eprintln!(
                "palisade: session {session}: the change set cannot be read ({e}); nothing was applied, the stage is kept in {}",
                show_path(stage.dir())
            );
            EXIT_COMMIT
        }
        Ok(out) => {
            eprint!("{}", summary(&session, stage.dir(), &out));
            if out.error.is_some() {
                return EXIT_COMMIT;
            }
            if !out.leaves_something() {
                let dir = stage.dir().to_path_buf();
                if let Err(e) = stage.remove() {
                    eprintln!(
                        "palisade: warning: cannot remove the stage {}: {e}",
                        show_path(&dir)
                    );
                }
            }
            code
        }
    }
}

/// Records a `stage_checkpoint` of `stage` as it is now (read only) and
/// returns its summary; a change set that cannot be read is recorded as
/// such and is `Err`.
pub(crate) fn checkpoint_record(
    journal: &Journal,
    stage: &Stage,
    filter: &CommitFilter,
    trigger: &str,
) -> Result<palisade_egress::control::CheckpointSummary, String> {
    match stage.changes() {
        Ok(set) => {
            let mut filter = filter.clone();
            refuse_widened(&mut filter, stage, &set);
            let verdicts = filter.check(&set);
            let (summary, body) = checkpoint_body(stage, &set, &verdicts, trigger);
            if journal.record(Kind::StageCheckpoint, &body, Flags::NONE) {
                Ok(summary)
            } else {
                Err(String::from("the journal refused the checkpoint record"))
            }
        }
        Err(e) => {
            let e = e.to_string();
            journal.record(
                Kind::StageCheckpoint,
                &json!({"trigger": trigger, "error": e}),
                Flags::FLAGGED,
            );
            Err(e)
        }
    }
}

/// Counts per kind and the refused changes of a change set under a filter,
/// as a checkpoint reports them (the body of `stage_checkpoint`).
pub(crate) fn checkpoint_body(
    stage: &Stage,
    set: &ChangeSet,
    verdicts: &[FilterVerdict],
    trigger: &str,
) -> (palisade_egress::control::CheckpointSummary, Value) {
    use palisade_egress::control::{CheckpointRefusal, CheckpointSummary, MAX_CHECKPOINT_REFUSED};
    let mut summary = CheckpointSummary {
        changes: set.changes.len(),
        digest: set_digest(set),
        ..CheckpointSummary::default()
    };
    for (c, v) in set.changes.iter().zip(verdicts) {
        *summary
            .counts
            .entry(kind_name(&c.kind).to_owned())
            .or_default() += 1;
        if let FilterVerdict::Refuse(r) = v {
            summary.refused_total += 1;
            if summary.refused.len() < MAX_CHECKPOINT_REFUSED {
                summary.refused.push(CheckpointRefusal {
                    root: root_of(stage, c),
                    path: show_path(&c.path),
                    rule: r.rule.to_owned(),
                });
            }
        }
    }
    let body = json!({
        "trigger": trigger,
        "changes": summary.changes,
        "counts": summary.counts,
        "refused": summary.refused.iter().map(|r| json!({"root": r.root, "path": r.path, "rule": r.rule})).collect::<Vec<_>>(),
        "refused_total": summary.refused_total,
        "digest": summary.digest,
    });
    (summary, body)
}

/// Where a commit's events go in a governed session: the journal, with the
/// steering globs whose committed paths are steering writes.
pub(crate) struct Journaling<'a> {
    /// The session's journal.
    pub(crate) journal: &'a Journal,
    /// `taint.steering_paths`, relative to each root.
    pub(crate) steering: Option<&'a GlobSet>,
    /// Whether the session is tainted (steering writes are then flagged);
    /// `None` when it is not known (a later `palisade commit`): flagged,
    /// recorded as `null`.
    pub(crate) tainted: Option<bool>,
}

/// One line of the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Line {
    /// The root's host path.
    pub(crate) root: PathBuf,
    /// The path relative to it.
    pub(crate) path: PathBuf,
    /// What became of it: the change kind, the refusal rule and quarantine
    /// path, or the conflict's detail.
    pub(crate) what: String,
}

/// What one commit did.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// The commit's totals.
    pub(crate) report: CommitReport,
    /// Applied changes.
    pub(crate) applied: Vec<Line>,
    /// Refused changes, quarantined.
    pub(crate) refused: Vec<Line>,
    /// Conflicts, left in the stage.
    pub(crate) conflicts: Vec<Line>,
    /// The error that stopped the commit half-way, if one did.
    pub(crate) error: Option<String>,
}

impl Outcome {
    /// Whether the stage still holds something (refused, conflicting,
    /// skipped or unapplied changes).
    pub(crate) fn leaves_something(&self) -> bool {
        // The commit's own totals count too: a stage is removed only when
        // both say nothing is left.
        self.error.is_some()
            || !self.refused.is_empty()
            || !self.conflicts.is_empty()
            || self.report.refused > 0
            || self.report.conflicts > 0
            || self.report.skipped > 0
    }
}

/// Records one commit event; `Err` stops the commit.
fn record_event(j: &Journaling<'_>, stage: &Stage, ev: &CommitEvent<'_>) -> Result<(), String> {
    let refused = || String::from("the journal refused the record");
    match ev {
        CommitEvent::Applied {
            change,
            before,
            after,
        } => {
            let root = root_of(stage, change);
            let path = record_path(&change.path);
            let before = before.map(|d| d.to_string());
            let after = after.map(|d| d.to_string());
            let mut body = json!({
                "root": root,
                "path": path,
                "change": kind_name(&change.kind),
                "before": before,
                "after": after,
            });
            if let ChangeKind::Renamed { from } = &change.kind
                && let Some(o) = body.as_object_mut()
            {
                o.insert("from".into(), json!(record_path(from)));
            }
            if !j.journal.record(Kind::CommitApplied, &body, Flags::NONE) {
                return Err(refused());
            }
            let steering = j.steering.is_some_and(|g| {
                g.is_match(&change.path)
                    || matches!(&change.kind, ChangeKind::Renamed { from } if g.is_match(from))
            });
            if steering {
                let flags = match j.tainted {
                    Some(true) => Flags::FLAGGED | Flags::TAINTED,
                    Some(false) => Flags::NONE,
                    None => Flags::FLAGGED,
                };
                let full = Path::new(&root).join(&change.path);
                let ok = j.journal.record(
                    Kind::SteeringWrite,
                    &json!({
                        "path": record_path(&full),
                        "root": root,
                        "relative": path,
                        "change": kind_name(&change.kind),
                        "before": before,
                        "after": after,
                        "tainted": j.tainted,
                        "trigger": "commit",
                    }),
                    flags,
                );
                if !ok {
                    return Err(refused());
                }
            }
        }
        CommitEvent::Refused {
            change,
            refusal,
            quarantined,
        } => {
            let body = json!({
                "root": root_of(stage, change),
                "path": record_path(&change.path),
                "change": kind_name(&change.kind),
                "rule": refusal.rule,
                "detail": refusal.detail,
                "quarantine": record_path(quarantined),
            });
            if !j.journal.record(Kind::CommitRefused, &body, Flags::FLAGGED) {
                return Err(refused());
            }
        }
        CommitEvent::Conflict { change, detail } => {
            let body = json!({
                "root": root_of(stage, change),
                "path": record_path(&change.path),
                "change": kind_name(&change.kind),
                "detail": detail,
            });
            if !j
                .journal
                .record(Kind::CommitConflict, &body, Flags::FLAGGED)
            {
                return Err(refused());
            }
        }
        _ => {}
    }
    Ok(())
}

/// Computes the change set of `stage`, filters it and commits it
/// (`only`: just those paths), recording every event in `journal` when
/// given. A change set that cannot be computed is `Err` (nothing was
/// applied); a commit that stops half-way is an [`Outcome`] with its
/// `error` set, every path applied before it recorded.
pub(crate) fn commit(
    stage: &Stage,
    filter: &CommitFilter,
    only: Option<&[(usize, PathBuf)]>,
    journal: Option<&Journaling<'_>>,
) -> Result<Outcome, String> {
    let set = stage.changes().map_err(|e| e.to_string())?;
    let mut filter = filter.clone();
    refuse_widened(&mut filter, stage, &set);
    let verdicts = filter.check(&set);
    let mut out = Outcome::default();
    let mut lines: (Vec<Line>, Vec<Line>, Vec<Line>) = (Vec::new(), Vec::new(), Vec::new());
    let root_path = |c: &Change| {
        stage
            .roots()
            .get(c.root)
            .map(|r| r.root().to_path_buf())
            .unwrap_or_default()
    };
    let mut record = |ev: &CommitEvent<'_>| -> Result<(), String> {
        match ev {
            CommitEvent::Applied { change, .. } => lines.0.push(Line {
                root: root_path(change),
                path: change.path.clone(),
                what: kind_name(&change.kind).to_owned(),
            }),
            CommitEvent::Refused {
                change,
                refusal,
                quarantined,
            } => lines.1.push(Line {
                root: root_path(change),
                path: change.path.clone(),
                what: format!("{} → {}", refusal.rule, show_path(quarantined)),
            }),
            CommitEvent::Conflict { change, detail } => lines.2.push(Line {
                root: root_path(change),
                path: change.path.clone(),
                what: detail.clone(),
            }),
            _ => {}
        }
        match journal {
            Some(j) => record_event(j, stage, ev),
            None => Ok(()),
        }
    };
    match stage.commit(&set, &verdicts, only, &mut record) {
        Ok(r) => out.report = r,
        Err(e) => out.error = Some(e.to_string()),
    }
    (out.applied, out.refused, out.conflicts) = lines;
    Ok(out)
}

/// The one-screen summary of a commit, for stderr: totals, then each
/// refused change with its quarantine path and each conflict (at most 20
/// lines of each), then how to inspect what is left.
pub(crate) fn summary(session: &str, stage_dir: &Path, out: &Outcome) -> String {
    const MAX_LINES: usize = 20;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "palisade: commit of session {session}: {} applied, {} refused, {} conflicts{}",
        out.applied.len(),
        out.refused.len(),
        out.conflicts.len(),
        if out.report.skipped > 0 {
            format!(", {} left (not selected)", out.report.skipped)
        } else {
            String::new()
        }
    );
    for (title, lines) in [("refused", &out.refused), ("conflict", &out.conflicts)] {
        for l in lines.iter().take(MAX_LINES) {
            let _ = writeln!(
                s,
                "  {title}: {}: {}",
                show_path(&l.root.join(&l.path)),
                show_text(&l.what)
            );
        }
        if lines.len() > MAX_LINES {
            let _ = writeln!(s, "  … and {} more {title}", lines.len() - MAX_LINES);
        }
    }
    if let Some(e) = &out.error {
        let _ = writeln!(
            s,
            "palisade: the commit stopped: {e}; the rest stays in the stage"
        );
    }
    if out.leaves_something() {
        let _ = writeln!(
            s,
            "palisade: the stage is kept in {}: inspect it with `palisade diff {session}`, apply what is left with `palisade commit {session}`",
            show_path(stage_dir)
        );
    }
    s
}

/// Maps `--only` paths (absolute, or relative to the current directory) to
/// `(root index, path relative to the root)`. A path outside every root,
/// or with a `..` component, is an error naming it.
pub(crate) fn only_paths(stage: &Stage, only: &[PathBuf]) -> Result<Vec<(usize, PathBuf)>, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    let mut out = Vec::new();
    for p in only {
        if p.components().any(|c| c == Component::ParentDir) {
            return Err(format!("--only {}: `..` is not accepted", show_path(p)));
        }
        let abs = if p.is_absolute() {
            p.clone()
        } else {
            cwd.join(p)
        };
        let found = stage.roots().iter().enumerate().find_map(|(i, r)| {
            abs.strip_prefix(r.root())
                .ok()
                .map(|rel| (i, rel.components().collect::<PathBuf>()))
        });
        match found {
            Some((i, rel)) => out.push((i, rel)),
            None => {
                return Err(format!(
                    "--only {}: not under any staged root ({})",
                    show_path(p),
                    stage
                        .roots()
                        .iter()
                        .map(|r| show_path(r.root()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn an_explicit_stage_dir_inside_a_writable_root_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("work");
        std::fs::create_dir(&root).unwrap();
        let roots = vec![root.clone()];
        let e = run_base(Some(&root.join("stages")), &roots).unwrap_err();
        assert!(e.contains("inside the writable root"), "{e}");
        // Through a symlink that leads into the root, too.
        std::os::unix::fs::symlink(&root, d.path().join("link")).unwrap();
        let e = run_base(Some(&d.path().join("link/stages")), &roots).unwrap_err();
        assert!(e.contains("inside the writable root"), "{e}");
        assert!(!root.join("stages").exists());
        // Positive control: a directory beside the root is accepted and
        // made private.
        let ok = run_base(Some(&d.path().join("stages")), &roots).unwrap();
        assert_eq!(ok, d.path().join("stages"));
        let mode = std::fs::metadata(&ok).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn a_private_dir_that_is_a_symlink_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        let link = d.path().join("stages");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = private_dir(&link).unwrap_err();
        assert!(e.contains("symlink"), "{e}");
        // Positive control: a real directory passes and is tightened.
        let real = d.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&real).unwrap();
        let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn writability_is_judged_from_owner_group_and_mode() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("work");
        std::fs::create_dir(&root).unwrap();
        // uid 0 writes everywhere: as root, the root is given to another uid.
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&root, Some(5000), Some(5000)).unwrap();
        }
        let meta = || std::fs::metadata(&root).unwrap();
        let (owner, group) = (meta().uid(), meta().gid());
        let other = owner.wrapping_add(4242);
        let chmod = |m: u32| {
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(m)).unwrap();
        };
        chmod(0o755);
        assert!(writable_by(&meta(), (0, 0)));
        assert!(!writable_by(&meta(), (other, other)));
        // Positive controls: the owner; the group with g+w; anyone with o+w.
        assert!(writable_by(&meta(), (owner, group)));
        chmod(0o775);
        assert!(writable_by(&meta(), (other, group)));
        assert!(!writable_by(&meta(), (other, other)));
        chmod(0o777);
        assert!(writable_by(&meta(), (other, other)));
        // The owner without u+w is refused, whatever the others may.
        chmod(0o577);
        assert!(!writable_by(&meta(), (owner, owner.wrapping_add(1))));
    }

    #[test]
    fn a_commit_the_journal_stops_halfway_names_the_path_and_keeps_the_rest() {
        use palisade_evidence::{JournalKey, JournalWriter, Timestamp, WriterOptions};
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("work");
        std::fs::create_dir(&root).unwrap();
        let ids = (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        );
        let st = Stage::create(
            &d.path().join("stages"),
            "halfway",
            std::slice::from_ref(&root),
            ids,
        )
        .unwrap();
        // What a worker would have left in the upper layer: three new files.
        let upper = st.roots()[0].upper().to_path_buf();
        for f in ["a.txt", "b.txt", "c.txt"] {
            std::fs::write(upper.join(f), format!("{f}\n")).unwrap();
        }
        // A journal that refuses every record (it is closed already).
        let key = JournalKey::generate().unwrap();
        let writer = JournalWriter::create(
            &d.path().join("j"),
            &key,
            &WriterOptions::default(),
            Timestamp(crate::session::core::now_ms()),
        )
        .unwrap();
        let journal = Journal::new(writer, "halfway".to_owned());
        journal.close().unwrap();
        let j = Journaling {
            journal: &journal,
            steering: None,
            tainted: Some(false),
        };
        let out = commit(&st, &CommitFilter::new(), None, Some(&j)).unwrap();
        let e = out
            .error
            .clone()
            .expect("the commit went on without its record");
        assert!(e.contains("a.txt"), "{e}");
        assert!(out.leaves_something());
        // Applied: the first path only; the second is still staged.
        assert!(root.join("a.txt").exists());
        assert!(!root.join("b.txt").exists());
        assert!(upper.join("b.txt").exists());
        // The summary names the stop and says the stage is kept.
        let text = summary("halfway", st.dir(), &out);
        assert!(
            text.contains("the commit stopped") && text.contains("a.txt"),
            "{text}"
        );
        assert!(text.contains("the stage is kept"), "{text}");
        // The end of a run stops the same way, with palisade's own status
        // instead of the worker's, and keeps the rest.
        let dir = st.dir().to_path_buf();
        assert_eq!(
            finish(st, &CommitFilter::new(), false, Some(&j), 0),
            EXIT_COMMIT
        );
        assert!(dir.join("0/upper/c.txt").exists());
        assert!(!root.join("c.txt").exists());
        // Positive control: without a refusing journal the rest commits and
        // the stage goes.
        let st = Stage::open(&dir).unwrap();
        assert_eq!(finish(st, &CommitFilter::new(), false, None, 3), 3);
        assert_eq!(
            std::fs::read_to_string(root.join("c.txt")).unwrap(),
            "c.txt\n"
        );
        assert!(!dir.exists());
    }

    #[test]
    fn session_ids_are_plain_names() {
        for bad in ["", "../x", "a/b", ".", "..", "x\n", &"a".repeat(65)] {
            assert!(check_session(bad).is_err(), "{bad:?}");
        }
        for good in ["0123abcd89ef4567", "run-1_a"] {
            check_session(good).unwrap();
        }
    }

    #[test]
    fn shown_paths_cannot_drive_a_terminal() {
        let p = Path::new("a\u{1b}]0;owned\u{7}b");
        let s = show_path(p);
        assert!(!s.chars().any(char::is_control), "{s:?}");
        assert!(s.contains("owned"));
        assert_eq!(show_path(Path::new("src/main.rs")), "src/main.rs");
        let long = "x/".repeat(1000);
        assert!(show_path(Path::new(&long)).len() <= MAX_SHOWN_PATH + 4);
    }
}
