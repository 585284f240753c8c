//! `palisade ctl`: the worker's side of the session control channel.
//!
//! Usable from inside a governed worker: it finds the control endpoint in
//! `PALISADE_CONTROL` (or `--socket`), reports taint sources, asks before
//! outward actions and prints the session state.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args as ClapArgs, Subcommand};
use palisade_egress::control::{AskAnswer, CONTROL_ENV, ControlAddr, ControlClient, TaintKind};

/// Exit status when an outward action is denied (as `palisade decide` uses).
const EXIT_DENY: u8 = 11;

/// Talk to the session's control channel from inside a worker.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    /// Control endpoint (`unix:PATH`, `tcp:127.0.0.1:PORT` or an absolute path);
    /// defaults to `$PALISADE_CONTROL`.
    #[arg(long, global = true)]
    socket: Option<String>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Report that the worker ingested untrusted content (taint is sticky).
    Taint {
        /// Source kind: web, inbox, mcp or marked_file.
        #[arg(long)]
        source: String,
        /// Short description: a URL, path or tool name (never the content).
        #[arg(long, default_value = "")]
        detail: String,
    },
    /// Ask before an outward action; prints the decision. Exit 0 allow, 11 deny.
    /// With `-- CMD…`, runs CMD only when allowed and reports it as executed.
    Outward {
        /// Action kind: git.push, github.post, mail.send, booking, payment or a custom kind.
        #[arg(long)]
        kind: String,
        /// Action target, e.g. `github.com/acme/app:refs/heads/main`.
        #[arg(long, default_value = "")]
        target: String,
        /// The command that carries out the action, run only when allowed.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Print the session state as JSON.
    State,
    /// Host only: the staged change set as it is now (counts per kind,
    /// refused paths with their rules), recorded as `stage_checkpoint`.
    /// Talks to the host endpoint (`--socket`, else `$PALISADE_HOST_CONTROL`);
    /// the worker's endpoint refuses it.
    Checkpoint,
}

fn endpoint(socket: Option<String>) -> Result<ControlAddr, String> {
    let raw = match socket {
        Some(s) => s,
        None => std::env::var(CONTROL_ENV).map_err(|_| {
            format!(
                "no control endpoint: pass --socket or set {CONTROL_ENV} (set by `palisade run`)"
            )
        })?,
    };
    ControlAddr::parse(&raw).map_err(|e| format!("bad control endpoint: {e}"))
}

pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    // A checkpoint is the host's operation: its endpoint by default.
    let socket = match (&args.command, args.socket) {
        (Cmd::Checkpoint, None) => std::env::var(crate::approve::HOST_CONTROL_ENV).ok(),
        (_, s) => s,
    };
    let addr = endpoint(socket)?;
    // Outward asks may block until the host approves; other requests answer at once.
    let timeout = match args.command {
        Cmd::Outward { .. } => None,
        _ => Some(Duration::from_secs(30)),
    };
    let mut client = ControlClient::connect(&addr, timeout).map_err(|e| e.to_string())?;
    match args.command {
        Cmd::Taint { source, detail } => {
            let kind = TaintKind::from_name(&source).ok_or_else(|| {
                format!("unknown taint source `{source}` (expected web, inbox, mcp or marked_file)")
            })?;
            let state = client.taint(kind, &detail).map_err(|e| e.to_string())?;
            println!(
                "{}",
                serde_json::to_string(&state).map_err(|e| e.to_string())?
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Checkpoint => {
            let summary = client.checkpoint().map_err(|e| e.to_string())?;
            println!(
                "{}",
                serde_json::to_string(&summary).map_err(|e| e.to_string())?
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::State => {
            let state = client.state().map_err(|e| e.to_string())?;
            println!(
                "{}",
                serde_json::to_string(&state).map_err(|e| e.to_string())?
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Outward {
            kind,
            target,
            command,
        } => {
            let answer = client.outward(&kind, &target).map_err(|e| e.to_string())?;
            println!(
                "{}",
                serde_json::to_string(&answer).map_err(|e| e.to_string())?
            );
            if answer.decision != AskAnswer::Allow {
                eprintln!("palisade: outward `{kind}` denied: {}", answer.reason);
                return Ok(ExitCode::from(EXIT_DENY));
            }
            let Some((prog, rest)) = command.split_first() else {
                return Ok(ExitCode::SUCCESS);
            };
            let status = std::process::Command::new(prog)
                .args(rest)
                .status()
                .map_err(|e| format!("cannot run `{prog}`: {e}"))?;
            // Report even a failed attempt: a partial push or send may have happened.
            client
                .executed(answer.ticket, status.code())
                .map_err(|e| e.to_string())?;
            let code = status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(1);
            Ok(ExitCode::from(code))
        }
    }
}
