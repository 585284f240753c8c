//! What the Codex and OpenCode suites share until the common harness
//! (`agents_common/mod.rs`) lands: a session directory (work dir, state
//! directory, journal key), the `palisade run --policy` command with the
//! fake OpenAI provider's relay, and the checks every agent test makes
//! (the tool's uid and capabilities, where the real key went, the journal).

#![allow(dead_code, reason = "each suite uses part of it")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use super::fake_openai::{self, FakeOpenAi};

/// The real provider key of the suite (reversed in the source so a grep
/// of the tree never finds it).
pub fn real_key() -> String {
    "YEK-LAER-IAPONEDASILAP-jorp-ks".chars().rev().collect()
}

/// The tool command of the fake's tool-call turn: the tool's uid, its
/// capability sets and its whole environment into `tool-out.txt`, and the
/// uid on its output (so the result that goes back to the fake holds it).
pub const TOOL_CMD: &str = "{ id -u; grep -E '^Cap(Eff|Prm|Inh|Bnd|Amb)' /proc/self/status; \
     tr '\\0' '\\n' < /proc/self/environ; } > tool-out.txt; echo uid=$(id -u)";

/// `$PALISADE_AGENTS_BIN/<bin>`: the pinned agent CLIs (`cargo xtask agents`).
pub fn agent_bin(bin: &str) -> PathBuf {
    let dir = std::env::var_os("PALISADE_AGENTS_BIN")
        .expect("PALISADE_AGENTS_BIN: the directory of the agent CLIs (cargo xtask agents)");
    let p = Path::new(&dir).join(bin);
    assert!(
        p.exists(),
        "{} is missing: run cargo xtask agents",
        p.display()
    );
    p
}

/// Whether the suite can run here (root: the worker uid and the session).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// One agent session's files.
pub struct Rig {
    /// Kept alive for the test.
    pub dir: tempfile::TempDir,
    /// The worker's working directory (writable, staged).
    pub work: PathBuf,
    /// The agent's state directory (its HOME inside; writable).
    pub home: PathBuf,
    /// The journal.
    pub journal: PathBuf,
    /// The journal key.
    pub key: PathBuf,
    /// The fake provider.
    pub fake: FakeOpenAi,
}

fn mkdir_open(p: &Path) {
    std::fs::create_dir_all(p).unwrap();
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
}

impl Rig {
    /// A fresh rig with a fake that wants [`real_key`].
    pub fn new() -> Rig {
        let fake = FakeOpenAi::start(&real_key(), TOOL_CMD);
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let (work, home) = (dir.path().join("work"), dir.path().join("home"));
        mkdir_open(&work);
        mkdir_open(&home);
        let key = dir.path().join("journal.key");
        let k = palisade_evidence::JournalKey::generate().unwrap();
        std::fs::write(&key, k.expose_text().as_bytes()).unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        std::fs::write(dir.path().join("ca.pem"), &fake.ca_pem).unwrap();
        Rig {
            journal: dir.path().join("run.journal"),
            work,
            home,
            key,
            fake,
            dir,
        }
    }

    /// The hand-written policy: one `preset = "openai"` relay to the fake
    /// with the real key from `OAI_SUITE_KEY`, and `extra` appended.
    pub fn policy(&self, extra: &str) -> PathBuf {
        let p = self.dir.path().join("palisade.toml");
        let text = format!(
            r#"[worker]
profile = "governed"

[egress]
allow_addresses = ["127.0.0.0/8"]

[[egress.relay]]
name = "openai"
preset = "openai"
origin = "{origin}"
credential = {{ header = "authorization", prefix = "Bearer ", from_env = "OAI_SUITE_KEY" }}
worker_env = {{ OPENAI_BASE_URL = "relay", OPENAI_API_KEY = "placeholder" }}
{extra}"#,
            origin = self.fake.origin()
        );
        std::fs::write(&p, text).unwrap();
        p
    }

    /// `palisade run --policy P … -- sh -c SCRIPT` with the agent's state
    /// directory as HOME, run to completion (bounded by `timeout`); the
    /// script first writes its own environment to `worker-env.txt`.
    pub fn run(&self, policy: &Path, env: &[(&str, &str)], script: &str) -> Output {
        let mut c = Command::new("timeout");
        c.arg("120")
            .arg(env!("CARGO_BIN_EXE_palisade"))
            .arg("run")
            .arg("--policy")
            .arg(policy)
            .arg("--journal")
            .arg(&self.journal)
            .arg("--key")
            .arg(&self.key)
            .arg("--resolve")
            .arg(format!("{}=127.0.0.1", fake_openai::HOST))
            .arg("--relay-ca")
            .arg(self.dir.path().join("ca.pem"))
            .arg("--stage-dir")
            .arg(self.dir.path().join("stages"))
            .arg("--cwd")
            .arg(&self.work)
            .arg("--writable")
            .arg(&self.home)
            .arg("--env")
            .arg(format!("HOME={}", self.home.display()));
        for (k, v) in env {
            c.arg("--env").arg(format!("{k}={v}"));
        }
        c.arg("--")
            .arg("/bin/sh")
            .arg("-c")
            .arg(format!(
                "tr '\\0' '\\n' < /proc/self/environ > worker-env.txt; {script}"
            ))
            .env("OAI_SUITE_KEY", real_key())
            .stdin(std::process::Stdio::null());
        c.output().unwrap()
    }

    /// The journal's records.
    pub fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.journal)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// `palisade journal verify` passes (exit 0: valid and closed).
    pub fn assert_journal_verifies(&self) {
        let o = Command::new(env!("CARGO_BIN_EXE_palisade"))
            .args(["journal", "verify", "--key"])
            .arg(&self.key)
            .arg(&self.journal)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "journal verify: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }

    /// The hosts whose connections the proxy denied.
    pub fn denied_hosts(&self) -> Vec<String> {
        self.records()
            .iter()
            .filter(|r| r["kind"] == "egress_connection" && r["body"]["decision"] == "deny")
            .filter_map(|r| r["body"]["host"].as_str().map(ToOwned::to_owned))
            .collect()
    }

    /// The tool ran as the worker uid (64000 under root) with no
    /// capability, its result reached the fake, and the real key is only at
    /// the fake: not in the tool's environment, the state directory, the
    /// working directory, the journal or `out`.
    pub fn assert_tool_and_secret(&self, out: &Output) {
        let tool = std::fs::read_to_string(self.work.join("tool-out.txt"))
            .expect("the tool's tool-out.txt was committed to the work dir");
        assert_eq!(tool.lines().next(), Some("64000"), "tool uid: {tool}");
        for set in ["CapEff", "CapPrm", "CapAmb", "CapInh"] {
            let line = tool
                .lines()
                .find(|l| l.starts_with(set))
                .unwrap_or_else(|| panic!("no {set} in {tool}"));
            assert!(line.ends_with("0000000000000000"), "{line}");
        }
        let env = std::fs::read_to_string(self.work.join("worker-env.txt"))
            .expect("the worker's environment (worker-env.txt, written by the script)");
        assert!(
            env.lines().any(|l| l.starts_with("OPENAI_API_KEY=sk-")),
            "the worker holds the placeholder: {env}"
        );
        assert!(
            !env.contains(&real_key()),
            "the real key in the worker's environment"
        );
        let seen = self.fake.seen();
        let outputs = fake_openai::tool_outputs(&seen);
        assert!(
            outputs.iter().any(|o| o.contains("uid=64000")),
            "the tool result reached the fake: {outputs:?}"
        );
        let bearer = format!("Bearer {}", real_key());
        assert!(!seen.is_empty());
        for s in &seen {
            assert_eq!(
                s.header("authorization"),
                Some(bearer.as_str()),
                "{}",
                s.path
            );
        }
        let key = real_key();
        assert!(
            !tool.contains(&key),
            "the real key in the worker's environment"
        );
        for text in [&out.stdout, &out.stderr] {
            assert!(
                !String::from_utf8_lossy(text).contains(&key),
                "real key in output"
            );
        }
        let journal = std::fs::read(&self.journal).unwrap();
        assert!(
            !contains(&journal, key.as_bytes()),
            "real key in the journal"
        );
        for root in [&self.home, &self.work] {
            for f in walk(root) {
                let bytes = std::fs::read(&f).unwrap_or_default();
                assert!(
                    !contains(&bytes, key.as_bytes()),
                    "real key in {}",
                    f.display()
                );
            }
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every regular file under `root` (symlinks not followed).
pub fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
            }
        }
    }
    out
}

/// Template values for rendering a preset file before `--agent` does it:
/// the relay URL given, the placeholder left to the relay's `worker_env`.
struct Values(String);

impl palisade_policy::agent::TemplateValues for Values {
    fn relay_url(&self, name: &str) -> Option<String> {
        (name == "openai").then(|| self.0.clone())
    }
    fn placeholder(&self, _: &str) -> Option<String> {
        None
    }
    fn home(&self) -> String {
        String::new()
    }
    fn cwd(&self) -> String {
        String::new()
    }
}

/// The preset file of `agent` at `path`, rendered by
/// `palisade_policy::agent::render` with `relay_url` for the relay's URL;
/// it must be read-only inside (these files run commands).
pub fn render_file(
    agent: palisade_policy::agent::AgentName,
    path: &str,
    relay_url: &str,
) -> String {
    let p = palisade_policy::agent::preset(agent);
    let file = p
        .files
        .iter()
        .find(|f| f.path == path)
        .unwrap_or_else(|| panic!("the {agent:?} preset writes {path}"));
    assert!(file.read_only, "{path} runs commands: read-only inside");
    palisade_policy::agent::render(file, &Values(relay_url.to_owned())).unwrap()
}
