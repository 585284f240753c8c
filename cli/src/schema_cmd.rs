//! `palisade schema`: print JSON Schema documents for editors.

use std::process::ExitCode;

use palisade_schema::{hub_schema, options};

/// What to print.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum What {
    /// The schema of `.paseo/hub.yml`.
    Hub,
    /// The schema of a `.paseo/workflows/<name>.yml` workflow file.
    Workflow,
    /// The schema of a single-file workflow (`environments:` and `triggers:` lists).
    SingleFile,
    /// The schema of a `.paseo/triggers/<name>.yml` trigger document (Paseo Hub 0.9).
    Trigger,
    /// The strict schema of one provider's `agent.options`.
    Options {
        /// The provider.
        #[arg(long, value_parser = ["codex", "claude", "opencode"])]
        provider: String,
    },
}

/// Arguments of `palisade schema`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

/// Runs `palisade schema`.
pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    let doc = match args.what {
        What::Hub => hub_schema::hub(),
        What::Workflow => hub_schema::workflow(),
        What::SingleFile => hub_schema::single_file(),
        What::Trigger => palisade_schema::trigger::json_schema(),
        What::Options { provider } => options::json_schema(&provider)
            .ok_or_else(|| format!("no option schema for provider {provider:?}"))?,
    };
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    println!("{text}");
    Ok(ExitCode::SUCCESS)
}
