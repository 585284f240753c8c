//! The git push bench (`cargo bench -p palisade-egress --bench git_push`,
//! run by `cargo xtask bench git`): what a `kind = "git"` relay costs a
//! real `git push` of a 50 MiB pack.
//!
//! A work repository holds a history of random (incompressible) files
//! adding up to 50 MiB (4 MiB with `PALISADE_BENCH_QUICK=1`), built once.
//! Each round starts a fresh loopback origin (`__git_origin`: TLS, the real
//! `git http-backend`) and pushes `main` to a new bare repository of it
//! three ways, in an order rotated each round:
//!
//! * `direct`: `git push` to the origin's HTTPS URL;
//! * `relay`: to a library [`Relay`] of `kind = "git"` whose gate allows
//!   every outward action, reached by git over a loopback TCP to Unix
//!   socket bridge (git speaks plain HTTP to the bridge; the relay reads
//!   the push head, scans the whole pack, holds its trailer until the
//!   update is decided, and speaks TLS to the origin);
//! * `floor`: the same TLS push through a plain loopback TCP copy
//!   (`tokio::io::copy_bidirectional`), the least any relay adds.
//!
//! Each push is checked to have landed (the origin's `main` is the pushed
//! commit). Printed as JSON lines: `push_direct`, `push_relay`,
//! `push_floor` (min, median, max wall time over the measured rounds,
//! after one warm-up round), and the pack size. `PALISADE_BENCH_RUNS` sets
//! the rounds (default 7; 2 quick). Loopback only.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "benchmark"
)]

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use palisade_egress::__git_origin::GitOrigin;
use palisade_egress::addr::AddressPolicy;
use palisade_egress::control::{AskAnswer, OutwardAction, OutwardAnswer};
use palisade_egress::proxy::shutdown_channel;
use palisade_egress::record::MemoryRecorder;
use palisade_egress::relay::{
    Credential, GitSettings, OutwardFuture, Placeholder, PlaceholderFormat, PrivateSocket, Relay,
    RelayConfig, RelayGate, RouteRefusal, Secret, ServerToolResult, basic_placeholder,
};
use palisade_egress::resolve::Resolver;
use serde_json::json;

const SUITE: &str = "git";
const REPO: &str = "bench/repo";
const USER: &str = "x-access-token";

/// Every name resolves to 127.0.0.1 (the origin is on loopback).
#[derive(Debug)]
struct Loopback;

impl Resolver for Loopback {
    fn resolve<'a>(
        &'a self,
        _name: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>> {
        Box::pin(async { Ok(vec![IpAddr::from([127, 0, 0, 1])]) })
    }
}

/// A gate that allows every request and outward action.
#[derive(Debug, Default)]
struct AllowAll {
    tickets: AtomicU64,
    executed: AtomicU64,
}

impl RelayGate for AllowAll {
    fn admit(&self, _relay: &str, _provider: &str) -> Result<(), RouteRefusal> {
        Ok(())
    }

    fn server_tool_result(&self, _: &str, _: &str, _: ServerToolResult) -> bool {
        true
    }

    fn outward_policy(&self, _relay: &str, _action: &OutwardAction) -> AskAnswer {
        AskAnswer::Allow
    }

    fn outward(&self, _relay: &str, _action: OutwardAction) -> OutwardFuture {
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed) + 1;
        Box::pin(std::future::ready(OutwardAnswer {
            ticket,
            decision: AskAnswer::Allow,
            policy: AskAnswer::Allow,
            approval: None,
            rule: Some("bench".to_owned()),
            reason: "the bench allows every push".to_owned(),
        }))
    }

    fn outward_executed(
        &self,
        _relay: &str,
        _ticket: u64,
        _action: &OutwardAction,
        _result: &palisade_egress::control::OutwardResult,
    ) {
        self.executed.fetch_add(1, Ordering::Relaxed);
    }
}

fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .env("no_proxy", "*")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .env_remove("GIT_SSL_CAINFO")
        .env_remove("CURL_CA_BUNDLE");
    c
}

fn run(mut c: Command) -> Result<String, String> {
    let out = c.output().map_err(|e| format!("{c:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{c:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The work repository: `files` commits of random bytes, `total` in all;
/// the id of `main`.
fn fixture(dir: &Path, total: usize, files: usize) -> Result<String, String> {
    let mut c = git(dir);
    c.args(["init", "-q", "-b", "main"]);
    run(c)?;
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for i in 0..files {
        let mut data = vec![0u8; total / files];
        for chunk in data.chunks_mut(8) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let bytes = seed.to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        std::fs::write(dir.join(format!("f{i}.bin")), &data).map_err(|e| e.to_string())?;
        let mut c = git(dir);
        c.args(["add", "."]);
        run(c)?;
        let mut c = git(dir);
        c.args(["commit", "-q", "-m", &format!("part {i}")]);
        run(c)?;
    }
    let mut c = git(dir);
    c.args(["rev-parse", "main"]);
    run(c)
}

/// Accepts on 127.0.0.1 and copies each connection to what `dial` opens.
async fn bridge<F, Fut, S>(dial: F) -> io::Result<SocketAddr>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = io::Result<S>> + Send,
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let dial = Arc::new(dial);
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let dial = Arc::clone(&dial);
            tokio::spawn(async move {
                let _ = client.set_nodelay(true);
                if let Ok(mut upstream) = dial().await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    });
    Ok(addr)
}

/// One push of `main` from `work` to `url` with extra `-c` settings (and
/// the origin's CA for an HTTPS URL); the wall time.
fn push(work: &Path, url: &str, config: &[String], ca: &Path) -> Result<Duration, String> {
    let mut c = git(work);
    if url.starts_with("https:") {
        c.env("GIT_SSL_CAINFO", ca);
    }
    for kv in config {
        c.args(["-c", kv]);
    }
    c.args(["push", "-q", url, "main:refs/heads/main"]);
    let t0 = Instant::now();
    run(c)?;
    Ok(t0.elapsed())
}

struct Arms {
    direct: Vec<f64>,
    relay: Vec<f64>,
    floor: Vec<f64>,
}

/// One round: a fresh origin, one new bare repository per arm.
fn round(
    rt: &tokio::runtime::Runtime,
    work: &Path,
    ca: &Path,
    head: &str,
    index: usize,
    arms: &mut Option<&mut Arms>,
) -> Result<(), String> {
    let origin = GitOrigin::start().map_err(|e| format!("the test origin: {e}"))?;
    std::fs::write(ca, &origin.ca_pem).map_err(|e| e.to_string())?;
    let port = origin.addr.port();
    let origin_addr = origin.addr;

    // The relay, for this origin.
    let gate = Arc::new(AllowAll::default());
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let sock = tmp.path().join("relay").join("git.sock");
    let placeholder =
        Placeholder::generate(&PlaceholderFormat::generic()).map_err(|e| e.to_string())?;
    let header = format!(
        "http.extraHeader=Authorization: {}",
        basic_placeholder(USER, &placeholder).as_str()
    );
    let secret: String = "nekot-hcneb".chars().rev().collect();
    let origin_url =
        palisade_schema::host_policy::Origin::parse(&format!("https://git.test:{port}"))
            .map_err(|e| format!("{e:?}"))?;
    let mut config = RelayConfig::new_git(
        "bench-git",
        origin_url,
        GitSettings::default(),
        Credential::basic(USER, Secret::new(secret)).map_err(|e| e.to_string())?,
        placeholder,
    )
    .map_err(|e| e.to_string())?
    .with_roots(origin.roots())
    .map_err(|e| e.to_string())?;
    config.addresses = AddressPolicy::new(vec!["127.0.0.0/8".parse().map_err(|_| "cidr")?]);
    let relay = Relay::new(config, Arc::new(Loopback), Arc::new(MemoryRecorder::new()))
        .with_gate(gate.clone());
    let (shutdown, signal) = shutdown_channel();
    let (relay_addr, floor_addr) = rt
        .block_on(async {
            let socket = PrivateSocket::bind(&sock)?;
            tokio::spawn(async move {
                let _ = relay.serve(&socket, signal).await;
                drop(socket);
            });
            let sock2 = sock.clone();
            let relay_addr = bridge(move || tokio::net::UnixStream::connect(sock2.clone())).await?;
            let floor_addr = bridge(move || tokio::net::TcpStream::connect(origin_addr)).await?;
            io::Result::Ok((relay_addr, floor_addr))
        })
        .map_err(|e| e.to_string())?;

    let order = [0usize, 1, 2];
    for k in 0..3 {
        let arm = order[(k + index) % 3];
        let name = ["direct", "relay", "floor"][arm];
        let repo = format!("{REPO}-{name}.git");
        origin.create_bare(&repo).map_err(|e| e.to_string())?;
        let took = match arm {
            0 => push(work, &format!("https://127.0.0.1:{port}/{repo}"), &[], ca),
            1 => push(
                work,
                &format!("http://127.0.0.1:{}/{repo}", relay_addr.port()),
                std::slice::from_ref(&header),
                ca,
            ),
            _ => push(
                work,
                &format!("https://127.0.0.1:{}/{repo}", floor_addr.port()),
                &[],
                ca,
            ),
        }
        .map_err(|e| format!("push {name}: {e}"))?;
        let landed = origin.rev_parse(&repo, "refs/heads/main");
        if landed.as_deref() != Some(head) {
            return Err(format!(
                "push {name}: the origin's main is {landed:?}, not {head}: {}",
                origin.stderr()
            ));
        }
        if let Some(arms) = arms.as_mut() {
            let v = took.as_nanos() as f64;
            match arm {
                0 => arms.direct.push(v),
                1 => arms.relay.push(v),
                _ => arms.floor.push(v),
            }
        }
    }
    if gate.executed.load(Ordering::Relaxed) != 1 {
        return Err("the relay did not report the push executed once".to_owned());
    }
    shutdown.trigger();
    Ok(())
}

fn print_samples(name: &str, samples: &mut [f64]) {
    if samples.is_empty() {
        return;
    }
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let median = if n % 2 == 1 {
        samples[n / 2]
    } else {
        f64::midpoint(samples[n / 2 - 1], samples[n / 2])
    };
    println!(
        "{}",
        json!({"suite": SUITE, "name": name, "min_ns": samples[0].round(), "median_ns": median.round(), "max_ns": samples[n - 1].round(), "runs": n})
    );
}

fn unavailable(why: &str) {
    for name in ["push_direct", "push_relay", "push_floor"] {
        eprintln!("git_push bench: {name}: not measured: {why}");
        println!(
            "{}",
            json!({"suite": SUITE, "name": name, "unavailable": why})
        );
    }
}

fn main() {
    // Run as a bench only (`cargo bench` passes `--bench`).
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let quick = std::env::var_os("PALISADE_BENCH_QUICK").is_some();
    let runs: usize = std::env::var("PALISADE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 2 } else { 7 })
        .max(1);
    let total: usize = if quick { 4 << 20 } else { 50 << 20 };
    let files = 10;
    if let Err(e) = bench(quick, runs, total, files) {
        unavailable(&e);
    }
}

fn bench(quick: bool, runs: usize, total: usize, files: usize) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let work: PathBuf = dir.path().join("work");
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let head = fixture(&work, total, files)?;
    let ca = dir.path().join("origin-ca.pem");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut arms = Arms {
        direct: Vec::new(),
        relay: Vec::new(),
        floor: Vec::new(),
    };
    // One warm-up round, then the measured ones.
    round(&rt, &work, &ca, &head, 0, &mut None)?;
    for i in 0..runs {
        round(&rt, &work, &ca, &head, i + 1, &mut Some(&mut arms))?;
    }
    println!(
        "{}",
        json!({"suite": SUITE, "name": "pack_mib", "unit": "MiB", "value": (total >> 20) as f64})
    );
    println!(
        "{}",
        json!({"suite": SUITE, "name": "pack_files", "unit": "files", "value": files as f64})
    );
    let _ = quick;
    print_samples("push_direct", &mut arms.direct);
    print_samples("push_relay", &mut arms.relay);
    print_samples("push_floor", &mut arms.floor);
    Ok(())
}
