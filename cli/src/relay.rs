//! `palisade relay`: run one host relay from `palisade.toml` on a private
//! Unix socket until SIGINT or SIGTERM, then close the journal cleanly.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use palisade_egress::proxy::shutdown_channel;
use palisade_egress::record::Recorder;
use palisade_egress::relay::{Placeholder, PlaceholderFormat, PrivateSocket, Relay};
use palisade_egress::resolve::SystemResolver;

use crate::host_policy_file::load_policy;
use crate::proxy::{
    StdoutRecorder, close_journal, open_journal, runtime, stop_signals, write_secret_file,
};

/// Arguments of `palisade relay`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The host policy (`palisade.toml`).
    #[arg(long)]
    policy: PathBuf,
    /// The `[[egress.relay]]` to run.
    #[arg(long)]
    name: String,
    /// `unix:PATH`; the directory is created 0700 (or must already be private).
    #[arg(long)]
    listen: String,
    /// Write the worker's per-session placeholder credential here (0600, never overwritten).
    #[arg(long)]
    placeholder_file: PathBuf,
    /// Placeholder shape: anthropic, openai or generic (default: guessed from the relay's name, origin and credential, as `palisade run` does).
    #[arg(long)]
    placeholder_format: Option<String>,
    /// Trust only the certificates in this PEM file for the upstream (default: webpki roots).
    #[arg(long)]
    upstream_ca: Option<PathBuf>,
    /// Sealed evidence journal to append records to (created if missing).
    #[arg(long, requires = "key")]
    journal: Option<PathBuf>,
    /// The journal key file.
    #[arg(long, requires = "journal")]
    key: Option<PathBuf>,
    /// Session id written into journal records.
    #[arg(long, default_value = "relay")]
    session: String,
}

fn placeholder_format(explicit: &str) -> Result<PlaceholderFormat, String> {
    match explicit {
        "anthropic" => Ok(PlaceholderFormat::anthropic()),
        "openai" => Ok(PlaceholderFormat::openai()),
        "generic" => Ok(PlaceholderFormat::generic()),
        other => Err(format!(
            "--placeholder-format `{other}` is not anthropic, openai or generic"
        )),
    }
}

pub(crate) fn read_roots(path: &std::path::Path) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in crate::input::read_certificates(path)? {
        roots
            .add(cert)
            .map_err(|e| format!("{}: unusable certificate: {e}", path.display()))?;
    }
    Ok(roots)
}

pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    let loaded = load_policy(&args.policy)?;
    let relay = loaded
        .policy
        .egress
        .relays
        .iter()
        .find(|r| r.name == args.name)
        .ok_or_else(|| {
            format!(
                "{}: no [[egress.relay]] named `{}`",
                args.policy.display(),
                args.name
            )
        })?;
    let rt = runtime()?;
    let roots = args.upstream_ca.as_deref().map(read_roots).transpose()?;
    let mut config = rt.block_on(crate::credential::relay_config(relay, roots.as_ref()))?;
    if let Some(explicit) = args.placeholder_format.as_deref() {
        if relay.credential.kind.is_oauth() {
            return Err(format!(
                "--placeholder-format `{explicit}`: a `{}` credential has its own placeholder \
                 shape (the agent checks it); remove --placeholder-format",
                relay.credential.kind.as_str()
            ));
        }
        let placeholder = Placeholder::generate(&placeholder_format(explicit)?)
            .map_err(|e| format!("cannot generate a placeholder: {e}"))?;
        config = config.with_placeholder(placeholder);
    }
    let placeholder = config.placeholder().clone();
    if let Some(ca) = &args.upstream_ca {
        config = config
            .with_roots(read_roots(ca)?)
            .map_err(|e| e.to_string())?;
    }
    config = config.with_addresses(crate::session::proxy_config(&loaded.policy)?.addresses);
    let path = args.listen.strip_prefix("unix:").ok_or_else(|| {
        format!(
            "--listen `{}` must be unix:PATH (relays listen on private Unix sockets only)",
            args.listen
        )
    })?;
    let key = crate::proxy::journal_key(args.journal.as_deref(), args.key.as_deref())?;
    let journal = match (&args.journal, &key) {
        (Some(j), Some(k)) => Some(open_journal(j, k, &args.session)?),
        _ => None,
    };
    let recorder: Arc<dyn Recorder> = match &journal {
        Some((r, _)) => r.clone(),
        None => Arc::new(StdoutRecorder::default()),
    };
    let served: Result<(), String> = rt.block_on(async {
        let socket = PrivateSocket::bind(std::path::Path::new(path))
            .map_err(|e| format!("cannot listen on {path}: {e}"))?;
        write_secret_file(&args.placeholder_file, placeholder.expose())?;
        let relay = Relay::new(config, Arc::new(SystemResolver), recorder);
        let (shutdown, signal) = shutdown_channel();
        let stopped = stop_signals();
        eprintln!("palisade relay `{}`: listening on {path}", args.name);
        println!(
            "{}",
            serde_json::json!({"event": "listening", "listen": args.listen})
        );
        let task = async { relay.serve(&socket, signal).await };
        let stop = async {
            stopped.await;
            shutdown.trigger();
        };
        let (res, ()) = tokio::join!(task, stop);
        drop(socket);
        res.map_err(|e| format!("relay failed: {e}"))
    });
    let closed = close_journal(journal);
    served?;
    closed?;
    eprintln!("palisade relay `{}`: stopped", args.name);
    Ok(ExitCode::SUCCESS)
}
