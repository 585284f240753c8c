//! `palisade decide egress|outward|route`: one policy decision for scripts
//! and CI, printed as JSON `{"decision","rule","reason"}`.
//!
//! Exit status: 0 allow, 10 ask, 11 deny, 2 usage or policy error.

use std::path::PathBuf;
use std::process::ExitCode;

use palisade_policy::egress::{self, ConnectRequest};
use palisade_policy::outward::{self, OutwardRequest};
use palisade_policy::route::{ProviderHosts, RouteTable};
use palisade_policy::verdict::{Decision, Verdict};
use palisade_schema::host_policy::RequestHost;
use palisade_taint::{Event, Rules, Session};

use crate::host_policy_file::{
    JournalSource, load_journal_session, load_policy, load_session, marks_path, read_marks,
};

/// Arguments of `palisade decide`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// May the session connect to HOST:PORT through the proxy (routing's
    /// provider hosts first, then the egress rules)?
    Egress {
        #[command(flatten)]
        common: Common,
        /// Destination host name as requested.
        #[arg(long)]
        host: String,
        /// Destination port.
        #[arg(long)]
        port: u16,
    },
    /// May the session take an outward action without asking?
    Outward {
        #[command(flatten)]
        common: Common,
        /// Action kind, such as `git.push` or `github.post.comment`.
        #[arg(long)]
        kind: String,
        /// Action target, such as `github.com/acme/app:refs/heads/agent/x`.
        #[arg(long)]
        target: String,
    },
    /// May content go to PROVIDER (from --path, and from everything the session read)?
    Route {
        #[command(flatten)]
        common: Common,
        /// A file whose content would be sent.
        #[arg(long)]
        path: Option<String>,
        /// The provider that would receive it.
        #[arg(long)]
        provider: String,
    },
}

#[derive(Debug, clap::Args)]
struct Common {
    /// The host policy file.
    #[arg(long, default_value = "palisade.toml")]
    policy: PathBuf,
    /// Session state: a saved session JSON, or a JSON array / JSON lines of records.
    #[arg(long, conflicts_with = "journal")]
    session: Option<PathBuf>,
    /// Session state from a sealed journal, rebuilt from its verified
    /// `session_event` and `taint_raised` records (needs --key).
    #[arg(long, value_name = "JOURNAL", requires = "key")]
    journal: Option<PathBuf>,
    /// The journal's initial key file (with --journal).
    #[arg(long, value_name = "KEY", requires = "journal")]
    key: Option<PathBuf>,
    /// An anchor file the journal must reach (with --journal).
    #[arg(long, value_name = "ANCHOR", requires = "journal")]
    anchor: Option<PathBuf>,
    /// Accept a journal without `journal_closed` (a session that was
    /// killed): what it recorded after its end is lost, so its taint may be
    /// incomplete.
    #[arg(long, requires = "journal")]
    allow_open: bool,
    /// Replay only this session's records (default: the journal must hold
    /// one session's).
    #[arg(long, value_name = "ID", requires = "journal")]
    session_id: Option<String>,
    /// Treat the session as tainted (as if it had ingested untrusted input).
    #[arg(long)]
    tainted: bool,
    /// The marks file (default: `taint.marks_file` next to the policy).
    #[arg(long)]
    marks: Option<PathBuf>,
}

/// Runs `palisade decide`.
pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    let common = match &args.what {
        What::Egress { common, .. } | What::Outward { common, .. } | What::Route { common, .. } => {
            common
        }
    };
    let loaded = load_policy(&common.policy)?;
    let marks = read_marks(&marks_path(&loaded, common.marks.as_deref()))?;
    let rules = Rules::new(&loaded.policy, &marks).map_err(|e| e.to_string())?;
    let mut session = match (&common.session, &common.journal, &common.key) {
        (Some(path), _, _) => load_session(path, &rules)?,
        (None, Some(journal), Some(key)) => load_journal_session(
            &JournalSource {
                journal,
                key,
                anchor: common.anchor.as_deref(),
                allow_open: common.allow_open,
                session_id: common.session_id.as_deref(),
            },
            &rules,
        )?,
        _ => Session::new(),
    };
    if common.tainted {
        let _ = session.apply(
            &rules,
            0,
            &Event::UntrustedInput {
                label: "--tainted".to_owned(),
            },
        );
    }
    let policy = &loaded.policy;
    let verdict = match &args.what {
        What::Egress { host, port, .. } => {
            // As the governed session's proxy decides: a provider's API host
            // the session's routing state keeps content from is refused
            // first, then the egress rules decide.
            let table = RouteTable::new(policy).map_err(|e| e.to_string())?;
            let routed = RequestHost::parse(host)
                .ok()
                .and_then(|h| table.decide_host(&ProviderHosts::new(policy), &session, &h));
            routed.unwrap_or_else(|| {
                egress::decide(policy, &session, &ConnectRequest { host, port: *port })
            })
        }
        What::Outward { kind, target, .. } => {
            outward::decide(policy, &session, &OutwardRequest { kind, target })
        }
        What::Route { path, provider, .. } => {
            let table = RouteTable::new(policy).map_err(|e| e.to_string())?;
            let by_path = path.as_deref().map(|p| table.decide_route(p, provider));
            let by_session = table.decide_dispatch(&session, provider);
            match by_path {
                Some(v) if v.decision != Decision::Allow => v,
                Some(v) if session.restricted_reads().next().is_none() => v,
                _ => by_session,
            }
        }
    };
    print_verdict(&verdict);
    Ok(ExitCode::from(exit_code(verdict.decision)))
}

/// 0 allow, 10 ask, 11 deny.
pub(crate) fn exit_code(d: Decision) -> u8 {
    match d {
        Decision::Allow => 0,
        Decision::Ask => 10,
        Decision::Deny => 11,
    }
}

fn print_verdict(v: &Verdict) {
    let json = serde_json::json!({
        "decision": v.decision.as_str(),
        "rule": v.rule,
        "code": v.reason,
        "reason": v.detail,
    });
    println!("{json}");
}
