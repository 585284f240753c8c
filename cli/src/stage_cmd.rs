//! `palisade diff SESSION` and `palisade commit SESSION`: the change set of
//! a kept stage (`palisade run --keep-staged`, or one a commit left) with
//! the filter's verdict per change, and its filtered commit.
//!
//! The filter is the one a run uses: the built-in list, plus the policy's
//! additions when `--policy` is given. A commit is journaled in a new
//! journal (`--journal FILE --key KEY`): the run's own journal was closed
//! when the run ended, and nothing may follow `journal_closed`.

use std::path::PathBuf;
use std::process::ExitCode;

use palisade_evidence::{Flags, JournalWriter, Kind, Timestamp, WriterOptions};
use palisade_isolate::stage::{ChangeKind, FilterVerdict};
use serde_json::json;
use sha2::{Digest as _, Sha256};

use crate::session::core::{Journal, now_ms};
use crate::stage::{self, show_path};

/// Exit status of `palisade commit` when something was refused or
/// conflicted (the stage is kept).
const EXIT_LEFT: u8 = 1;

/// Show the change set of a kept stage.
#[derive(Debug, clap::Args)]
pub(crate) struct DiffArgs {
    /// The session id `palisade run` printed.
    session: String,
    /// Where the stage is kept (default: as `palisade run`).
    #[arg(long, value_name = "DIR")]
    stage_dir: Option<PathBuf>,
    /// The host policy whose `[worker.commit] refuse` the filter adds.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Print JSON instead of one line per change.
    #[arg(long)]
    json: bool,
}

/// Apply a kept stage to the host, through the commit filter.
#[derive(Debug, clap::Args)]
pub(crate) struct CommitArgs {
    /// The session id `palisade run` printed.
    session: String,
    /// Apply only these paths (and what is under them), absolute or
    /// relative to the current directory (repeatable).
    #[arg(long = "only", value_name = "PATH", num_args = 1..)]
    only: Vec<PathBuf>,
    /// Where the stage is kept (default: as `palisade run`).
    #[arg(long, value_name = "DIR")]
    stage_dir: Option<PathBuf>,
    /// The host policy whose `[worker.commit] refuse` and
    /// `taint.steering_paths` apply (use the run's).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Record the commit in this new journal (created; an existing file is
    /// refused), with the session's id.
    #[arg(long, value_name = "FILE", requires = "key")]
    journal: Option<PathBuf>,
    /// The journal key file (`palisade journal keygen`).
    #[arg(long, value_name = "FILE", requires = "journal")]
    key: Option<PathBuf>,
}

/// Runs `palisade diff`.
pub(crate) fn diff(args: DiffArgs) -> Result<ExitCode, String> {
    let st = stage::find_stage(args.stage_dir.as_deref(), &args.session)?;
    let loaded = match &args.policy {
        Some(p) => Some(crate::host_policy_file::load_policy(p)?),
        None => None,
    };
    let mut filter = stage::filter_of_policy(loaded.as_ref(), &st)?;
    let set = st.changes().map_err(|e| e.to_string())?;
    // The same verdicts the commit will give.
    stage::refuse_widened(&mut filter, &st, &set);
    let verdicts = filter.check(&set);
    if args.json {
        let changes: Vec<_> = set
            .changes
            .iter()
            .zip(&verdicts)
            .map(|(c, v)| {
                let root = st
                    .roots()
                    .get(c.root)
                    .map(|r| r.root().to_string_lossy().into_owned());
                let mut o = serde_json::Map::new();
                o.insert("root".into(), json!(root));
                o.insert("path".into(), json!(c.path.to_string_lossy()));
                o.insert("kind".into(), json!(stage::kind_name(&c.kind)));
                o.insert(
                    "letter".into(),
                    json!(stage::kind_letter(&c.kind).to_string()),
                );
                o.insert("verdict".into(), json!("commit"));
                if let ChangeKind::Renamed { from } = &c.kind {
                    o.insert("from".into(), json!(from.to_string_lossy()));
                }
                if let FilterVerdict::Refuse(r) = v {
                    o.insert("verdict".into(), json!("refuse"));
                    o.insert("rule".into(), json!(r.rule));
                    o.insert("detail".into(), json!(r.detail));
                }
                serde_json::Value::Object(o)
            })
            .collect();
        let out = json!({
            "session": st.session(),
            "stage": st.dir().to_string_lossy(),
            "digest": stage::set_digest(&set),
            "changes": changes,
        });
        println!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    for (c, v) in set.changes.iter().zip(&verdicts) {
        let root = st
            .roots()
            .get(c.root)
            .map(|r| r.root().to_path_buf())
            .unwrap_or_default();
        let path = match &c.kind {
            ChangeKind::Renamed { from } => format!(
                "{} -> {}",
                show_path(&root.join(from)),
                show_path(&root.join(&c.path))
            ),
            _ => show_path(&root.join(&c.path)),
        };
        let verdict = match v {
            FilterVerdict::Refuse(r) => format!("  [refused: {}]", r.rule),
            _ => String::new(),
        };
        println!("{}  {path}{verdict}", stage::kind_letter(&c.kind));
    }
    if set.changes.is_empty() {
        eprintln!(
            "palisade: session {}: nothing left to commit in {}",
            st.session(),
            show_path(st.dir())
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `palisade commit`.
pub(crate) fn commit(args: CommitArgs) -> Result<ExitCode, String> {
    let st = stage::find_stage(args.stage_dir.as_deref(), &args.session)?;
    let loaded = match &args.policy {
        Some(p) => Some(crate::host_policy_file::load_policy(p)?),
        None => None,
    };
    let filter = stage::filter_of_policy(loaded.as_ref(), &st)?;
    let only = if args.only.is_empty() {
        None
    } else {
        Some(stage::only_paths(&st, &args.only)?)
    };
    let steering = match &loaded {
        Some(l) => Some(crate::steering::glob_set(
            &l.policy
                .taint
                .steering_paths
                .iter()
                .map(|g| g.as_str().to_owned())
                .collect::<Vec<_>>(),
        )?),
        None => None,
    };
    let journal = match (&args.journal, &args.key) {
        (Some(path), Some(key)) => {
            let key = crate::journal::read_key(key)?;
            let writer =
                JournalWriter::create(path, &key, &WriterOptions::default(), Timestamp(now_ms()))
                    .map_err(|e| format!("journal `{}`: {e}", path.display()))?;
            let j = Journal::new(writer, st.session().to_owned());
            let policy_digest = loaded
                .as_ref()
                .map(|l| format!("sha256:{}", hex::encode(Sha256::digest(l.text.as_bytes()))));
            j.record(
                Kind::custom("stage_commit").map_err(|e| e.to_string())?,
                &json!({
                    "session": st.session(),
                    "stage": st.dir().to_string_lossy(),
                    "only": args.only.iter().map(|p| p.to_string_lossy().into_owned()).collect::<Vec<_>>(),
                    "policy": loaded.as_ref().map(|l| l.path.display().to_string()),
                    "policy_digest": policy_digest,
                }),
                Flags::NONE,
            );
            Some((j, path.clone()))
        }
        _ => None,
    };
    let journaling = journal.as_ref().map(|(j, _)| stage::Journaling {
        journal: j,
        steering: steering.as_ref(),
        tainted: None,
    });
    let out = stage::commit(&st, &filter, only.as_deref(), journaling.as_ref());
    // The journal is closed whatever happened: it holds every applied path.
    if let Some((j, path)) = &journal {
        match j.close() {
            Ok(anchor) => {
                let anchor_path = PathBuf::from(format!("{}.anchor", path.display()));
                if let Err(e) = std::fs::write(&anchor_path, format!("{anchor}\n")) {
                    eprintln!(
                        "palisade: warning: cannot write the anchor {}: {e}",
                        anchor_path.display()
                    );
                }
            }
            Err(e) => eprintln!("palisade: the journal could not be closed cleanly: {e}"),
        }
    }
    let out = out?;
    eprint!("{}", stage::summary(st.session(), st.dir(), &out));
    if out.error.is_some() {
        return Ok(ExitCode::from(stage::EXIT_COMMIT));
    }
    if out.leaves_something() {
        return Ok(ExitCode::from(EXIT_LEFT));
    }
    let dir = st.dir().to_path_buf();
    st.remove()
        .map_err(|e| format!("cannot remove the stage {}: {e}", show_path(&dir)))?;
    eprintln!(
        "palisade: session {}: everything was applied; the stage is removed",
        args.session
    );
    Ok(ExitCode::SUCCESS)
}
