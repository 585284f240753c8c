//! The demo's git origin: `cargo run -p palisade-cli --example git-origin --
//! --ca-out FILE --name github.test`.
//!
//! Serves the bare repository `acme/app.git` (one commit on `main`) over
//! TLS on 127.0.0.1 through the real `git http-backend`, writes its CA
//! certificate (PEM) to FILE, prints `ready <addr>` and `root <dir>` (where
//! the bare repositories are, for `git --git-dir` on the host), then one
//! line per request it sees (`seen GET /acme/app.git/info/refs
//! authorization=<present|absent> body_complete=<bool>`, never the
//! header's value). On SIGTERM or SIGINT it stops and removes the
//! repositories.
#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, reason = "the example reports what it sees")]

use std::time::Duration;

use palisade_egress::__git_origin::GitOrigin;
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    let mut ca_out = None;
    let mut names = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--ca-out" => ca_out = args.next(),
            "--name" => names.push(args.next().ok_or("--name NAME")?),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let origin = GitOrigin::start_for(&names).map_err(|e| e.to_string())?;
    origin
        .create_bare("acme/app.git")
        .map_err(|e| e.to_string())?;
    origin
        .commit("acme/app.git", "main", "README.md", "# app\n")
        .map_err(|e| e.to_string())?;
    if let Some(path) = ca_out {
        std::fs::write(&path, &origin.ca_pem).map_err(|e| format!("{path}: {e}"))?;
    }
    println!("ready {}", origin.addr);
    println!("root {}", origin.root.display());
    let mut shown = 0;
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let seen = origin.seen();
        for s in seen.iter().skip(shown) {
            println!(
                "seen {} {} authorization={} body_complete={}",
                s.method,
                s.path,
                if s.authorization.is_some() {
                    "present"
                } else {
                    "absent"
                },
                s.body_complete
            );
        }
        shown = seen.len();
    }
    // Dropped: the server stops and its repositories are removed.
    drop(origin);
    Ok(())
}
