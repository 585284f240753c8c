//! The governed run of an Anthropic Messages agent (Claude Code, Pi) for
//! the agent suite: a working directory, a journal key, a hand-written
//! policy with an `anthropic` relay to the fake provider, and
//! `palisade run` with a time limit. Kept small and local until the shared
//! harness (`agents_common/mod.rs`) and `palisade run --agent` land.

#![allow(dead_code, reason = "each suite uses a part of it")]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The name the relay's origin uses for the fake (pinned to 127.0.0.1
/// with `--resolve`).
pub(crate) const FAKE_HOST: &str = "api.anthropic.test";

/// A TLS front for the plain-HTTP fake at `plain` (relays dial only
/// `https://` origins): a loopback listener with a throwaway CA's
/// certificate for [`FAKE_HOST`], each connection decrypted and copied
/// to the fake. Returns its address and the CA's PEM.
pub(crate) fn tls_front(plain: std::net::SocketAddr) -> (std::net::SocketAddr, String) {
    let (config, ca_pem) = crate::provider::tls_config(&[FAKE_HOST]).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
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

/// Reverse a marker kept reversed in the source.
pub(crate) fn rev(s: &str) -> String {
    s.chars().rev().collect()
}

/// The provider key the host holds (reversed in the source).
pub(crate) fn real_key() -> String {
    rev("YEK-LAER-EDASILAP-CIPORHTNA-30ipa-tna-ks")
}

/// The host variable the relay reads the key from.
pub(crate) const KEY_VAR: &str = "PALISADE_AGENTS_ANTHROPIC_KEY";

/// The agent executable named, from `PALISADE_AGENTS_BIN`.
pub(crate) fn agent_bin(name: &str) -> PathBuf {
    let dir = std::env::var("PALISADE_AGENTS_BIN")
        .expect("PALISADE_AGENTS_BIN: the directory of the agent CLIs (cargo xtask agents)");
    let p = PathBuf::from(dir).join(name);
    assert!(
        p.exists(),
        "{} is missing (cargo xtask agents)",
        p.display()
    );
    p
}

/// Whether the suite runs as root (it must: the sandbox needs it, and the
/// worker then runs as uid 64000).
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// One governed session's files.
pub(crate) struct Rig {
    /// The temporary directory holding everything.
    pub(crate) dir: tempfile::TempDir,
    /// The worker's working directory (writable root).
    pub(crate) work: PathBuf,
    /// The journal.
    pub(crate) journal: PathBuf,
    /// The journal key.
    pub(crate) key: PathBuf,
    /// The policy file.
    pub(crate) policy: PathBuf,
    /// `--agent NAME`, when the run applies a preset.
    pub(crate) agent: Option<&'static str>,
}

/// What `palisade run` did.
pub(crate) struct Outcome {
    /// The exit code.
    pub(crate) code: i32,
    /// Its stdout (the agent's).
    pub(crate) stdout: String,
    /// Its stderr (palisade's and the agent's).
    pub(crate) stderr: String,
}

impl Rig {
    /// A rig whose policy has the `anthropic` relay to `origin`, the
    /// worker environment `env` (`[worker.env] set`) and `extra` TOML
    /// appended.
    pub(crate) fn new(fake: std::net::SocketAddr, worker_env: &[(&str, &str)], extra: &str) -> Rig {
        Self::in_dir(tempfile::tempdir().unwrap(), fake, worker_env, extra, None)
    }

    /// A rig for `palisade run --agent NAME`: the policy's `anthropic`
    /// relay stands for the preset's (same name), without `worker_env`,
    /// so the preset's environment and files are what point the agent at
    /// it.
    pub(crate) fn with_agent(fake: std::net::SocketAddr, agent: &'static str) -> Rig {
        Self::in_dir(tempfile::tempdir().unwrap(), fake, &[], "", Some(agent))
    }

    /// [`Rig::new`] again in `old`'s directory (its working directory and
    /// files kept), with a new policy.
    pub(crate) fn new_in(
        old: Rig,
        fake: std::net::SocketAddr,
        worker_env: &[(&str, &str)],
        extra: &str,
    ) -> Rig {
        Self::in_dir(old.dir, fake, worker_env, extra, None)
    }

    fn in_dir(
        dir: tempfile::TempDir,
        fake: std::net::SocketAddr,
        worker_env: &[(&str, &str)],
        extra: &str,
        agent: Option<&'static str>,
    ) -> Rig {
        let (front, ca_pem) = tls_front(fake);
        let origin = format!("https://{FAKE_HOST}:{}", front.port());
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        set_mode(&work, 0o777);
        let key = dir.path().join("journal.key");
        let k = palisade_evidence::JournalKey::generate().unwrap();
        std::fs::write(&key, k.expose_text().as_bytes()).unwrap();
        set_mode(&key, 0o600);
        let set: Vec<String> = worker_env
            .iter()
            .map(|(k, v)| format!("{k} = {}", toml_str(v)))
            .collect();
        let policy = dir.path().join("palisade.toml");
        let text = format!(
            r#"[worker]
profile = "governed"

[worker.env]
set = {{ {set} }}

[egress]
allow_addresses = ["127.0.0.0/8"]

[[egress.relay]]
name = "anthropic"
preset = "anthropic"
origin = "{origin}"
credential = {{ header = "x-api-key", from_env = "{KEY_VAR}" }}
{relay_env}
{extra}
"#,
            set = set.join(", "),
            relay_env = if agent.is_some() {
                ""
            } else {
                r#"worker_env = { ANTHROPIC_BASE_URL = "relay", ANTHROPIC_API_KEY = "placeholder" }"#
            }
        );
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        std::fs::write(&policy, text).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca_pem).unwrap();
        Rig {
            journal: dir.path().join("run.journal"),
            dir,
            work,
            key,
            policy,
            agent,
        }
    }

    /// `palisade run --policy … -- cmd…` in the working directory, with
    /// the real key in the host environment only, killed after `limit`.
    pub(crate) fn run(&self, cmd: &[&str], limit: Duration) -> Outcome {
        let mut c = Command::new(env!("CARGO_BIN_EXE_palisade"));
        c.arg("run")
            .arg("--cwd")
            .arg(&self.work)
            .arg("--policy")
            .arg(&self.policy)
            .arg("--journal")
            .arg(&self.journal)
            .arg("--key")
            .arg(&self.key)
            .arg("--stage-dir")
            .arg(self.dir.path().join("stages"))
            .arg("--resolve")
            .arg(format!("{FAKE_HOST}=127.0.0.1"))
            .arg("--relay-ca")
            .arg(self.dir.path().join("ca.pem"))
            .arg("--writes")
            .arg("direct")
            .args(self.agent.iter().flat_map(|a| ["--agent", a]))
            .arg("--")
            .args(cmd)
            .current_dir(&self.work)
            .env(KEY_VAR, real_key())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = c.spawn().unwrap();
        wait(child, limit)
    }

    /// The journal's records.
    pub(crate) fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.journal)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// `palisade journal verify` on the session's journal: its exit code
    /// and output.
    pub(crate) fn verify(&self) -> (i32, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_palisade"))
            .args(["journal", "verify"])
            .arg(&self.journal)
            .arg("--key")
            .arg(&self.key)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// Every file under the working directory, as text (lossy), with its
    /// path: for the scans of what the worker left.
    pub(crate) fn work_files(&self) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        walk(&self.work, &mut out);
        out
    }
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => walk(&p, out),
            Ok(t) if t.is_file() => {
                let text =
                    String::from_utf8_lossy(&std::fs::read(&p).unwrap_or_default()).into_owned();
                out.push((p, text));
            }
            _ => {}
        }
    }
}

fn toml_str(v: &str) -> String {
    serde_json::Value::String(v.to_owned()).to_string()
}

fn set_mode(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
}

fn wait(mut child: std::process::Child, limit: Duration) -> Outcome {
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let to = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let te = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "palisade run did not finish within {limit:?}; stderr: {}",
                te.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Outcome {
        code: status.code().unwrap_or(-1),
        stdout: to.join().unwrap_or_default(),
        stderr: te.join().unwrap_or_default(),
    }
}

/// The shell command of the tool turn: the worker's uid and capability
/// sets, and whether the real key is anywhere in its environment, written
/// to `tool-out.txt` and echoed for the tool result. The reversed marker
/// is reversed back inside the worker so that the command line itself
/// does not hold the key.
pub(crate) fn probe_command() -> String {
    format!(
        "sh -c 'id -u; grep -E \"^Cap(Eff|Prm|Inh|Bnd|Amb)\" /proc/self/status; \
         k=$(echo {} | rev); if grep -qa -- \"$k\" /proc/self/environ /proc/$PPID/environ 2>/dev/null || env | grep -q -- \"$k\"; \
         then echo KEY-IN-ENV; else echo KEY-NOT-IN-ENV; fi' > tool-out.txt 2>&1; cat tool-out.txt",
        rev(&real_key())
    )
}

/// The value of capability set `name` (`CapEff`) in a tool output.
pub(crate) fn cap(out: &str, name: &str) -> Option<String> {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_owned())
}

/// The tool output of [`probe_command`] shows a governed worker: uid
/// 64000, every capability set but the bounding one empty, no real key in
/// its environment.
pub(crate) fn assert_governed_tool_output(out: &str) {
    assert_eq!(out.lines().next(), Some("64000"), "worker uid: {out}");
    for set in ["CapEff", "CapPrm", "CapAmb", "CapInh"] {
        assert_eq!(
            cap(out, set).as_deref(),
            Some("0000000000000000"),
            "{set}: {out}"
        );
    }
    assert!(out.contains("KEY-NOT-IN-ENV"), "{out}");
}

/// The real key is in none of the journal, palisade's and the agent's
/// output and the files left in the working directory, and the journal
/// verifies.
pub(crate) fn assert_key_only_upstream(r: &Rig, o: &Outcome) {
    let key = real_key();
    let journal = std::fs::read_to_string(&r.journal).unwrap();
    assert!(!journal.contains(&key), "the journal holds the key");
    assert!(
        !o.stdout.contains(&key) && !o.stderr.contains(&key),
        "the output holds the key"
    );
    for (p, text) in r.work_files() {
        assert!(!text.contains(&key), "{} holds the key", p.display());
    }
    let (code, text) = r.verify();
    assert_eq!(code, 0, "journal verify: {text}");
}

/// [`probe_command`], then what a hostile tool would try on the agent's
/// config: write each of `protected` (relative to the working directory
/// or `~/`) and, as the positive control, an ordinary file; each line says
/// `WROTE <path>` or `REFUSED <path>`. Also prints the worker's HOME.
pub(crate) fn agent_probe_command(protected: &[&str]) -> String {
    let mut c = probe_command();
    c.push_str("; echo HOME=$HOME");
    for p in protected.iter().chain(&["plain-file.txt"]) {
        c.push_str(&format!(
            "; if (echo planted >> {p}) 2>/dev/null; then echo WROTE {p}; else echo REFUSED {p}; fi"
        ));
    }
    c
}
