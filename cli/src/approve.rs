//! `palisade approve`: the host's side of outward-action approval.
//!
//! Lists the outward actions a session holds for approval, and approves or
//! denies one by ticket (or the next one to arrive). It talks to the
//! session's host endpoint, which the worker cannot reach.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use palisade_egress::control::{ControlAddr, ControlClient, PendingAction};

/// Environment variable naming the host endpoint of the current session.
pub(crate) const HOST_CONTROL_ENV: &str = "PALISADE_HOST_CONTROL";

/// Approve or deny an outward action a governed worker asked for.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    /// The session's host endpoint (printed by `palisade run`); defaults to `$PALISADE_HOST_CONTROL`.
    #[arg(long)]
    socket: Option<String>,
    /// The ticket to settle. Without it (and without --next), lists pending actions.
    ticket: Option<u64>,
    /// Settle the next pending action, waiting for one up to --wait seconds.
    #[arg(long, conflicts_with = "ticket")]
    next: bool,
    /// Deny instead of approve.
    #[arg(long)]
    deny: bool,
    /// With --next: how long to wait for the session and an action to arrive, in seconds.
    #[arg(long, default_value_t = 60)]
    wait: u64,
}

/// One pending action as a line: ticket, kind, target and reason, then the
/// relay that holds it (`via relay NAME`, when a relay asks) and whether the
/// session is tainted, each tab-separated.
fn show(p: &PendingAction) -> String {
    format!(
        "{}\t{}\t{}\t{}{}{}",
        p.ticket,
        p.kind,
        p.target,
        p.reason,
        p.via
            .as_ref()
            .map(|v| format!("\tvia relay {v}"))
            .unwrap_or_default(),
        if p.tainted { "\t(tainted session)" } else { "" }
    )
}

pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    let raw = match args.socket {
        Some(s) => s,
        None => std::env::var(HOST_CONTROL_ENV)
            .map_err(|_| format!("no host endpoint: pass --socket or set {HOST_CONTROL_ENV}"))?,
    };
    let addr = ControlAddr::parse(&raw).map_err(|e| format!("bad host endpoint: {e}"))?;
    // With --next, the session may still be starting: wait for its endpoint too.
    let deadline = Instant::now() + Duration::from_secs(args.wait);
    let mut client = loop {
        match ControlClient::connect(&addr, Some(Duration::from_secs(30))) {
            Ok(c) => break c,
            Err(e) if !args.next || Instant::now() >= deadline => return Err(e.to_string()),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let approve = !args.deny;
    let ticket = if let Some(t) = args.ticket {
        t
    } else if args.next {
        loop {
            if let Some(p) = client
                .pending()
                .map_err(|e| e.to_string())?
                .into_iter()
                .next()
            {
                println!("{}", show(&p));
                break p.ticket;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no outward action waited for approval within {} s",
                    args.wait
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    } else {
        for p in client.pending().map_err(|e| e.to_string())? {
            println!("{}", show(&p));
        }
        return Ok(ExitCode::SUCCESS);
    };
    client.resolve(ticket, approve).map_err(|e| e.to_string())?;
    eprintln!(
        "palisade: ticket {ticket} {}",
        if approve { "approved" } else { "denied" }
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(via: Option<&str>, tainted: bool) -> PendingAction {
        PendingAction {
            ticket: 7,
            kind: "git.push".into(),
            target: "github.com/acme/app:refs/heads/main".into(),
            reason: "no rule matched: default ask".into(),
            tainted,
            via: via.map(str::to_owned),
        }
    }

    #[test]
    fn a_relay_s_pending_action_names_the_relay_and_keeps_the_columns() {
        assert_eq!(
            show(&pending(Some("github-git"), true)),
            "7\tgit.push\tgithub.com/acme/app:refs/heads/main\tno rule matched: default ask\tvia relay github-git\t(tainted session)"
        );
        // A worker's own request: the line as it always was.
        assert_eq!(
            show(&pending(None, false)),
            "7\tgit.push\tgithub.com/acme/app:refs/heads/main\tno rule matched: default ask"
        );
    }
}
