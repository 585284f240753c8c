//! `palisade cleanup`: remove the protected-name placeholders that a
//! killed `palisade run` left in the host tree, from the records each
//! launch keeps in the state directory (docs/sandbox.md).

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `palisade cleanup`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The state directory holding the records. Default: the one
    /// `palisade run` uses (`$XDG_RUNTIME_DIR/palisade`, or `/run/palisade`
    /// for root).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

/// Runs `palisade cleanup`: prints each placeholder removed and each
/// recorded one kept (with the reason); exit 0, or 1 when a record could
/// not be read.
pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    let Some(dir) = args.state_dir.or_else(crate::run::state_dir) else {
        return Err(String::from(
            "no state directory: $XDG_RUNTIME_DIR is not set (pass --state-dir)",
        ));
    };
    let done = palisade_isolate::clean_stale_placeholders(&dir)?;
    for p in &done.removed {
        println!("removed {}", p.display());
    }
    for (p, why) in &done.kept {
        println!("kept {} ({why})", p.display());
    }
    if done.live > 0 {
        println!("{} record(s) of running launches left alone", done.live);
    }
    for problem in &done.problems {
        eprintln!("palisade: {problem}");
    }
    Ok(if done.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
