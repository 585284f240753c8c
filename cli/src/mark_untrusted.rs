//! `palisade mark-untrusted PATH…`: record files the user does not trust, so
//! that a session reading them is tainted (`taint.sources` must include
//! `marked_file`, which it does by default).
//!
//! Marks live in a plain text file, one path per line (`taint.marks_file`
//! next to the policy, `.palisade/untrusted` by default). A marked directory
//! covers everything under it. Paths are stored as given after lexical
//! normalisation; relative paths are matched against the worker's `cwd`.
//! There is no unmark command: taint is sticky, and removing a line by hand
//! only affects sessions that start afterwards.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use palisade_taint::normalize_path;

use crate::host_policy_file::{load_policy, marks_path};

/// Arguments of `palisade mark-untrusted`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Files or directories to mark untrusted.
    #[arg(required = true)]
    paths: Vec<String>,
    /// The host policy file (locates the marks file).
    #[arg(long, default_value = "palisade.toml")]
    policy: PathBuf,
    /// The marks file, overriding `taint.marks_file`.
    #[arg(long)]
    marks: Option<PathBuf>,
}

/// Runs `palisade mark-untrusted`.
pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    let file = match &args.marks {
        Some(m) => m.clone(),
        None => marks_path(&load_policy(&args.policy)?, None),
    };
    let mut marks = crate::host_policy_file::read_marks(&file)?;
    let mut added = 0usize;
    for p in &args.paths {
        if p.is_empty() || p.contains('\n') || p.contains('\0') {
            return Err(format!("`{}` is not a usable path", p.escape_debug()));
        }
        let norm = normalize_path(p, None)
            .into_iter()
            .next()
            .unwrap_or_default();
        if norm.starts_with('#') {
            return Err(format!(
                "`{norm}` would read as a comment in the marks file"
            ));
        }
        if !marks.contains(&norm) {
            marks.push(norm.clone());
            added += 1;
            println!("marked untrusted: {norm}");
        } else {
            println!("already marked: {norm}");
        }
    }
    if added > 0 {
        write_marks(&file, &marks)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn write_marks(file: &std::path::Path, marks: &[String]) -> Result<(), String> {
    if let Some(dir) = file.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let tmp = file.with_extension("tmp");
    let mut body =
        String::from("# Files marked untrusted by `palisade mark-untrusted`; one path per line.\n");
    for m in marks {
        body.push_str(m);
        body.push('\n');
    }
    let mut f =
        std::fs::File::create(&tmp).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    f.write_all(body.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, file).map_err(|e| format!("cannot replace {}: {e}", file.display()))
}
