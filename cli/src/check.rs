//! `palisade check`: validate workflows, provider options and the host policy.

use std::process::ExitCode;

/// Arguments of `palisade check`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A repository root, a `.paseo` folder, or a single-file workflow.
    #[arg(default_value = ".")]
    path: std::path::PathBuf,
}

/// Runs `palisade check`.
pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    Err(format!("check of {} is not built yet", args.path.display()))
}
