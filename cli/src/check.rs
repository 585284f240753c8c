//! `palisade check`: validate workflows, provider options and the host policy.

use std::process::ExitCode;

/// Arguments of `palisade check`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A repository root, a `.paseo` folder, or a single-file workflow.
    #[arg(default_value = ".")]
    path: std::path::PathBuf,
    /// Validate this host policy file (`palisade.toml`) instead.
    #[arg(long, value_name = "PALISADE_TOML")]
    policy: Option<std::path::PathBuf>,
}

/// Runs `palisade check`.
pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    if let Some(policy) = &args.policy {
        let diags = crate::check_policy::check(policy, false)?;
        return Ok(ExitCode::from(u8::from(diags.iter().any(|d| d.is_error()))));
    }
    Err(format!("check of {} is not built yet", args.path.display()))
}
