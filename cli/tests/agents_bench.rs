//! The measurements of `cargo xtask bench agents`: per agent, one turn run
//! directly against the fake provider on loopback and the same turn
//! governed (`palisade run --policy P --agent NAME`, through the relay to
//! the same fake), interleaved in one run, plus the floor
//! (`palisade run --policy P -- /bin/true`, the session's fixed cost).
//!
//! Ignored by default (it needs root and the agent CLIs); it asserts that
//! every turn completed with the fake's text, never how long it took, and
//! prints one `PALISADE-BENCH {json}` line per agent and subject with the
//! wall-clock milliseconds of every measured turn, which xtask parses:
//! `PALISADE_AGENTS_BIN=…/node_modules/.bin cargo test -p palisade-cli
//! --test agents_bench -- --ignored --nocapture` (`PALISADE_BENCH_TURNS`,
//! default 10; `PALISADE_BENCH_AGENTS`, default `claude codex opencode pi`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::disallowed_methods,
    reason = "tests"
)]

#[path = "agents_common/fake.rs"]
#[allow(
    unreachable_pub,
    clippy::allow_attributes_without_reason,
    reason = "the shared fake server, included as a private module"
)]
mod fake;
#[path = "agents_common/fake_anthropic.rs"]
mod fake_anthropic;
#[path = "agents_common/fake_openai.rs"]
#[allow(unreachable_pub, reason = "shared fake")]
mod fake_openai;
#[path = "../../examples/governed-worker/provider.rs"]
#[allow(dead_code, unreachable_pub, reason = "shared with the demo binary")]
mod provider;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use palisade_policy::agent::{AgentName, EnvValue, TemplateValues, preset, render};

/// The Anthropic fake's name on the TLS front's certificate.
const ANTHROPIC_HOST: &str = "api.anthropic.test";
/// The host variable the policy's relay reads the key from.
const KEY_VAR: &str = "PALISADE_BENCH_PROVIDER_KEY";

/// The provider key the host holds (reversed in the source).
fn real_key() -> String {
    "YEK-HCNEB-EDASILAP-tset".chars().rev().collect()
}

fn agent_bin(name: &str) -> PathBuf {
    let Some(dir) = std::env::var_os("PALISADE_AGENTS_BIN") else {
        panic!("PALISADE_AGENTS_BIN is not set: run `cargo xtask agents` first");
    };
    let p = PathBuf::from(dir).join(name);
    assert!(
        p.exists(),
        "{} does not exist (cargo xtask agents)",
        p.display()
    );
    p
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
}

/// A plain-HTTP fake behind a TLS front for [`ANTHROPIC_HOST`] (relays
/// dial only `https://` origins); returns the front's port and CA PEM.
fn anthropic_front(plain: std::net::SocketAddr) -> (u16, String) {
    let (config, ca_pem) = provider::tls_config(&[ANTHROPIC_HOST]).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap().port()).unwrap();
            while let Ok((tcp, _)) = l.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut up) = tokio::net::TcpStream::connect(plain).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
    });
    (rx.recv().unwrap(), ca_pem)
}

/// One agent's fake provider, as the direct and the governed turn see it.
struct Provider {
    /// Keeps the Anthropic fake alive.
    _anthropic: Option<fake_anthropic::Anthropic>,
    /// Keeps the OpenAI fake alive.
    _openai: Option<fake_openai::FakeOpenAi>,
    /// The relay's name in the preset and the policy.
    relay: &'static str,
    /// The plain loopback URL the direct turn uses.
    direct_url: String,
    /// The policy's `[[egress.relay]]` lines for the governed turn.
    relay_toml: String,
    /// `--resolve` for the relay origin's name.
    resolve: String,
    /// The TLS front's CA.
    ca_pem: String,
    /// Text the agent's output must hold.
    expect: &'static str,
}

fn provider_for(agent: AgentName) -> Provider {
    match agent {
        AgentName::Claude | AgentName::Pi => {
            let f = fake_anthropic::Anthropic::start(
                fake_anthropic::Expect::ApiKey(real_key()),
                "true",
            );
            let (port, ca_pem) = anthropic_front(f.fake.addr);
            Provider {
                relay: "anthropic",
                direct_url: f.url(),
                relay_toml: format!(
                    "name = \"anthropic\"\npreset = \"anthropic\"\norigin = \"https://{ANTHROPIC_HOST}:{port}\"\n\
                     credential = {{ header = \"x-api-key\", from_env = \"{KEY_VAR}\" }}\n"
                ),
                resolve: format!("{ANTHROPIC_HOST}=127.0.0.1"),
                ca_pem,
                expect: fake_anthropic::TEXT_REPLY,
                _anthropic: Some(f),
                _openai: None,
            }
        }
        _ => {
            let f = fake_openai::FakeOpenAi::start(&real_key(), "true");
            Provider {
                relay: "openai",
                direct_url: f.fake.url(),
                relay_toml: format!(
                    "name = \"openai\"\npreset = \"openai\"\norigin = \"{}\"\n\
                     credential = {{ header = \"authorization\", prefix = \"Bearer \", from_env = \"{KEY_VAR}\" }}\n",
                    f.origin()
                ),
                resolve: format!("{}=127.0.0.1", fake_openai::HOST),
                ca_pem: f.ca_pem.clone(),
                expect: fake_openai::FINAL_TEXT,
                _anthropic: None,
                _openai: Some(f),
            }
        }
    }
}

/// The turn's command line (after the executable).
fn turn_args(agent: AgentName) -> Vec<&'static str> {
    match agent {
        AgentName::Claude => vec!["-p", "hi"],
        AgentName::Pi => vec![
            "-p",
            "--provider",
            "anthropic",
            "--model",
            "claude-sonnet-4-5",
            "hi",
        ],
        AgentName::Codex => vec!["exec", "--skip-git-repo-check", "-m", "gpt-5.1-codex", "hi"],
        _ => vec!["run", "-m", "openai/gpt-5", "hi"],
    }
}

/// The preset's values for a direct turn: the relay URL is the fake's
/// plain loopback URL and the "placeholder" is the real key.
struct Direct<'a> {
    relay: &'static str,
    url: &'a str,
    home: &'a Path,
    cwd: &'a Path,
}

impl TemplateValues for Direct<'_> {
    fn relay_url(&self, name: &str) -> Option<String> {
        (name == self.relay).then(|| self.url.to_owned())
    }
    fn placeholder(&self, name: &str) -> Option<String> {
        (name == self.relay).then(real_key)
    }
    fn home(&self) -> String {
        self.home.display().to_string()
    }
    fn cwd(&self) -> String {
        self.cwd.display().to_string()
    }
}

/// Runs `c` to completion (bounded by `timeout 120`), returning the
/// wall-clock milliseconds, or why the turn failed unless it succeeded
/// with `expect` in its output (the key scrubbed from the reason).
fn timed(what: &str, c: &mut Command, expect: &str) -> Result<f64, String> {
    let t = Instant::now();
    let out = c.stdin(Stdio::null()).output().unwrap();
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && stdout.contains(expect) {
        return Ok(ms);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("palisade: ") && !l.trim().is_empty())
        .take(4)
        .collect();
    let why = format!(
        "{what}: {} without the fake's text: {}",
        out.status,
        tail.join(" | ")
    )
    .replace(&real_key(), "<key>");
    Err(why.chars().take(600).collect())
}

fn bounded(program: &Path) -> Command {
    let mut c = Command::new("timeout");
    c.arg("120").arg(program);
    c
}

fn measure(agent: AgentName, name: &str, turns: usize) -> Result<(), String> {
    let bin = agent_bin(name);
    let p = provider_for(agent);
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o755);
    let work = dir.path().join("work");
    let home = dir.path().join("home");
    let state = dir.path().join("state");
    for d in [&work, &home, &state] {
        std::fs::create_dir_all(d).unwrap();
        chmod(d, 0o777);
    }
    let key = dir.path().join("journal.key");
    let k = palisade_evidence::JournalKey::generate().unwrap();
    std::fs::write(&key, k.expose_text().as_bytes()).unwrap();
    chmod(&key, 0o600);
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &p.ca_pem).unwrap();
    let policy = dir.path().join("palisade.toml");
    std::fs::write(
        &policy,
        format!(
            "[worker]\nprofile = \"governed\"\n\n[egress]\nallow_addresses = [\"127.0.0.0/8\"]\n\n[[egress.relay]]\n{}",
            p.relay_toml
        ),
    )
    .unwrap();

    // The direct turn's HOME gets the preset's files and environment,
    // rendered with the fake's plain URL and the real key.
    let pre = preset(agent);
    let values = Direct {
        relay: p.relay,
        url: &p.direct_url,
        home: &home,
        cwd: &work,
    };
    for f in &pre.files {
        let path = home.join(f.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, render(f, &values).unwrap()).unwrap();
    }
    let direct_env: Vec<(String, String)> = pre
        .env
        .iter()
        .map(|(k, v)| {
            let v = match v {
                EnvValue::Literal(l) => (*l).to_owned(),
                EnvValue::RelayUrl(_) => p.direct_url.clone(),
                EnvValue::Placeholder(_) => real_key(),
                EnvValue::Home => home.display().to_string(),
                EnvValue::Cwd => work.display().to_string(),
                other => panic!("preset value not handled by the bench: {other:?}"),
            };
            ((*k).to_owned(), v)
        })
        .collect();
    let path = std::env::var("PATH").unwrap_or_default();

    let run_no = std::cell::Cell::new(0_u32);
    let governed = |cmd: &[&std::ffi::OsStr], with_agent: bool| {
        let n = run_no.get() + 1;
        run_no.set(n);
        let mut c = bounded(Path::new(env!("CARGO_BIN_EXE_palisade")));
        c.arg("run")
            .arg("--cwd")
            .arg(&work)
            .arg("--policy")
            .arg(&policy)
            .arg("--journal")
            .arg(dir.path().join(format!("run-{n}.journal")))
            .arg("--key")
            .arg(&key)
            .arg("--stage-dir")
            .arg(dir.path().join(format!("stages-{n}")))
            .arg("--resolve")
            .arg(&p.resolve)
            .arg("--relay-ca")
            .arg(&ca);
        if !with_agent {
            c.arg("--writes").arg("direct");
        }
        if with_agent {
            c.arg("--agent").arg(name);
        }
        c.arg("--")
            .args(cmd)
            .current_dir(&work)
            .env(KEY_VAR, real_key())
            .env("XDG_STATE_HOME", &state);
        c
    };
    let args = turn_args(agent);
    let mut turn: Vec<&std::ffi::OsStr> = vec![bin.as_os_str()];
    turn.extend(args.iter().map(std::ffi::OsStr::new));
    let truth = [std::ffi::OsStr::new("/bin/true")];

    let subjects = ["direct", "governed", "floor"];
    let mut samples: [Vec<f64>; 3] = Default::default();
    // One warm-up round (caches, the agent's first-start files), then
    // `turns` rounds, the order rotated each round.
    for round in 0..=turns {
        for i in 0..subjects.len() {
            let s = (i + round) % subjects.len();
            let ms = match s {
                0 => {
                    let mut c = bounded(&bin);
                    c.args(&args)
                        .current_dir(&work)
                        .env_clear()
                        .env("PATH", &path)
                        .env("HOME", &home)
                        .envs(direct_env.iter().map(|(k, v)| (k, v)));
                    timed(&format!("{name} direct"), &mut c, p.expect)?
                }
                1 => timed(
                    &format!("{name} governed"),
                    &mut governed(&turn, true),
                    p.expect,
                )?,
                _ => timed("floor", &mut governed(&truth, false), "")?,
            };
            if round > 0 {
                samples[s].push(ms);
            }
        }
    }
    for (s, ms) in subjects.iter().zip(&samples) {
        println!(
            "PALISADE-BENCH {}",
            serde_json::json!({"agent": name, "subject": s, "ms": ms})
        );
    }
    Ok(())
}

/// The agents named by `PALISADE_BENCH_AGENTS` (default: all four).
fn agents() -> Vec<(AgentName, String)> {
    let list = std::env::var("PALISADE_BENCH_AGENTS")
        .unwrap_or_else(|_| "claude codex opencode pi".to_owned());
    list.split_whitespace()
        .map(|n| {
            let a = match n {
                "claude" => AgentName::Claude,
                "codex" => AgentName::Codex,
                "opencode" => AgentName::OpenCode,
                "pi" => AgentName::Pi,
                other => panic!("PALISADE_BENCH_AGENTS: unknown agent {other:?}"),
            };
            (a, n.to_owned())
        })
        .collect()
}

/// Measures every agent's direct and governed turn and the floor, and
/// prints the samples. Every turn must complete with the fake's text: an
/// agent with a failed turn gets a `PALISADE-BENCH {"agent", "error"}`
/// line, the others are still measured, and the test fails at the end.
#[test]
#[ignore = "a benchmark: cargo xtask bench agents"]
fn governed_turn_overhead() {
    assert!(is_root(), "the agent bench runs as root");
    let turns = std::env::var("PALISADE_BENCH_TURNS")
        .ok()
        .map_or(10, |v| v.parse::<usize>().unwrap());
    assert!(turns > 0, "PALISADE_BENCH_TURNS must be at least 1");
    let mut failed = Vec::new();
    for (agent, name) in agents() {
        if let Err(why) = measure(agent, &name, turns) {
            println!(
                "PALISADE-BENCH {}",
                serde_json::json!({"agent": name, "error": why})
            );
            failed.push(why);
        }
    }
    assert!(failed.is_empty(), "turns failed: {failed:#?}");
}
