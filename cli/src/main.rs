//! `palisade`: the command-line front end of the palisade guardrails.
//!
//! This binary is the only place in the workspace that reads files, the
//! environment and the clock, prints, and chooses exit codes. Each
//! subcommand lives in its own module with an `Args` struct and a `run`
//! function returning the process exit code.

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, reason = "the CLI prints")]

mod approve;
mod bundle;
mod check;
mod cleanup;
mod credential;
mod ctl;
mod decide;
mod explain;
mod host_policy_file;
mod input;
mod journal;
mod mark_untrusted;
mod migrate;
mod policy_cmd;
mod probe;
mod proxy;
mod relay;
mod report;
mod run;
mod schema_cmd;
mod session;
mod ship;
mod stage;
mod stage_cmd;
mod steering;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// `palisade --version`: the crate version and the commit it was built from
/// (`unknown` without git; see `build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("PALISADE_COMMIT"),
    ")"
);

/// Guardrails for AI-agent workers.
#[derive(Debug, Parser)]
#[command(name = "palisade", version = VERSION, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate hub workflows, provider options and the host policy.
    Check(check::Args),
    /// Talk to the session control channel from inside a governed worker.
    Ctl(ctl::Args),
    /// Approve or deny an outward action a governed worker asked for.
    Approve(approve::Args),
    /// Summarise a run's sealed journal: hosts, denials, taint, outward actions, steering writes.
    Report(report::Args),
    /// Run a command in a fail-closed sandbox (exit code: the command's;
    /// 125 on setup failure).
    Run(Box<run::Args>),
    /// Show the change set of a kept stage, with the commit filter's verdicts.
    Diff(stage_cmd::DiffArgs),
    /// Apply a kept stage to the host through the commit filter.
    Commit(stage_cmd::CommitArgs),
    /// Report every isolation layer as active, degraded or unavailable.
    Probe(probe::Args),
    /// Remove the placeholders a killed `palisade run` left in the host tree.
    Cleanup(cleanup::Args),
    /// Decide egress, outward or routing requests against the host policy.
    Decide(decide::Args),
    /// Mark files untrusted: a session that reads them becomes tainted.
    MarkUntrusted(mark_untrusted::Args),
    /// Run the recording, limiting egress proxy until SIGINT or SIGTERM.
    Proxy(proxy::Args),
    /// Run a credential-injecting host relay until SIGINT or SIGTERM.
    Relay(relay::Args),
    /// Print JSON Schema documents for hub.yml, workflow files and provider options.
    Schema(schema_cmd::Args),
    /// Print each step's exact Hub tool policy and translated provider options.
    Policy(policy_cmd::Args),
    /// Explain the run plan for an event: admission, steps run or skipped, tools per step.
    Explain(explain::Args),
    /// Generate keys for, verify, show and append to sealed journals.
    Journal(journal::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the man page (roff) of palisade and its subcommands.
    Man,
}

/// Arguments of `palisade completions`.
#[derive(Debug, clap::Args)]
struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// `palisade completions SHELL`: the script on stdout.
fn completions(args: &CompletionsArgs) -> Result<ExitCode, String> {
    use clap::CommandFactory as _;
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "palisade", &mut out);
    write_stdout(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// `palisade man`: the roff man page of the whole command tree, with a
/// section per subcommand, on stdout (`palisade man > palisade.1`).
fn man() -> Result<ExitCode, String> {
    use clap::CommandFactory as _;
    let cmd = Cli::command();
    let mut out = Vec::new();
    let render = |man: clap_mangen::Man, out: &mut Vec<u8>| {
        man.render(out)
            .map_err(|e| format!("cannot render the man page: {e}"))
    };
    render(clap_mangen::Man::new(cmd.clone()), &mut out)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let title = format!("palisade-{}", sub.get_name());
        render(clap_mangen::Man::new(sub.clone()).title(title), &mut out)?;
    }
    write_stdout(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes` to stdout; a reader that went away (`palisade man |
/// head`) is not an error, any other write failure is (never a panic, as
/// `print!` would).
pub(crate) fn write_stdout(bytes: &[u8]) -> Result<(), String> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(format!("cannot write to stdout: {e}"))
        }
        _ => Ok(()),
    }
}

/// Exit status for usage and IO errors, as `palisade check` documents.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    // `palisade run` is the hot path (a sandbox per command): parse only its
    // arguments instead of building the whole command tree. Anything the
    // lean parse does not accept (help, errors) goes through the full
    // parser, so messages stay the same.
    if let Some(args) = run::parse_lean() {
        return match run::run(args) {
            Ok(code) => code,
            Err(err) => {
                eprintln!("palisade: {err}");
                ExitCode::from(EXIT_USAGE)
            }
        };
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    let res = match cli.command {
        Command::Check(args) => check::run(args),
        Command::Ctl(args) => ctl::run(args),
        Command::Approve(args) => approve::run(args),
        Command::Report(args) => report::run(args),
        Command::Run(args) => run::run(*args),
        Command::Diff(args) => stage_cmd::diff(args),
        Command::Commit(args) => stage_cmd::commit(args),
        Command::Probe(args) => probe::run(args),
        Command::Cleanup(args) => cleanup::run(args),
        Command::Decide(args) => decide::run(args),
        Command::MarkUntrusted(args) => mark_untrusted::run(args),
        Command::Proxy(args) => proxy::run(args),
        Command::Relay(args) => relay::run(args),
        Command::Schema(args) => schema_cmd::run(args),
        Command::Policy(args) => policy_cmd::run(args),
        Command::Explain(args) => explain::run(args),
        Command::Journal(args) => journal::run(args),
        Command::Completions(args) => completions(&args),
        Command::Man => man(),
    };
    match res {
        Ok(code) => code,
        Err(err) => {
            eprintln!("palisade: {err}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}
