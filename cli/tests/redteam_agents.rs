//! Red team of the agent state HOME (`cli/src/session/agent.rs`): a
//! prompt-injected worker under `palisade run --agent` reading what other
//! agent sessions left in the launching user's agent state directory. The
//! state directory lives outside the host masks here (`XDG_STATE_HOME`
//! under the cargo target's tmp, not `/tmp`, whose sandbox copy is the
//! sandbox's own), as it does for any operator who sets `XDG_STATE_HOME`
//! to a path that `/var`, `/home` and friends do not cover. Needs root.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `s` reversed: secret markers are kept reversed in the sources.
fn rev(s: &str) -> String {
    s.chars().rev().collect()
}

fn palisade() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_palisade"))
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A test directory outside `/tmp` and outside the host masks, reachable
/// by the worker uid: under the cargo target's tmp, or under `/opt` when
/// that is below `/tmp` (a checkout in `/tmp`, as on CI), whose sandbox
/// copy is the sandbox's own and would hide what the controls must see.
fn test_dir(name: &str) -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let base = if target.starts_with("/tmp") {
        PathBuf::from("/opt/palisade-tests")
    } else {
        target.to_path_buf()
    };
    let d = base
        .join("redteam_agents")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let mut p = d.as_path();
    // Every ancestor traversable by the worker uid.
    while let Some(parent) = p.parent() {
        if p == Path::new("/") {
            break;
        }
        let m = std::fs::metadata(p).unwrap().permissions().mode();
        if m & 0o001 == 0 {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m | 0o711)).unwrap();
        }
        p = parent;
    }
    d
}

struct Rig {
    dir: PathBuf,
    key: PathBuf,
    state: PathBuf,
    /// The approval sockets: under `/tmp`, out of the worker's view.
    sockets: tempfile::TempDir,
    n: std::cell::Cell<u32>,
}

impl Rig {
    fn new(name: &str) -> Rig {
        let dir = test_dir(name);
        let state = dir.join("state");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
        let key = dir.join("journal.key");
        let out = Command::new(palisade())
            .args(["journal", "keygen", "--out"])
            .arg(&key)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "keygen: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Rig {
            dir,
            key,
            state,
            sockets: tempfile::tempdir().unwrap(),
            n: std::cell::Cell::new(0),
        }
    }

    /// A policy file `sub/palisade.toml` with its own working directory.
    fn policy(&self, sub: &str, state: &str) -> (PathBuf, PathBuf) {
        let d = self.dir.join(sub);
        let work = d.join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
        let p = d.join("palisade.toml");
        std::fs::write(
            &p,
            format!(
                "[worker]\nprofile = \"governed\"\nagent_state = \"{state}\"\n\n[egress]\nallow_addresses = [\"127.0.0.0/8\"]\n\n[[egress.relay]]\nname = \"anthropic\"\norigin = \"https://provider.test:9\"\nroutes = [\"POST /v1/messages\"]\ncredential = {{ header = \"x-api-key\", from_env = \"AGENT_TEST_KEY\" }}\n"
            ),
        )
        .unwrap();
        (p, work)
    }

    /// `palisade run --agent claude` of `script` under `policy`: (status, stdout, stderr).
    fn run(&self, policy: &Path, work: &Path, script: &str) -> (i32, String, String) {
        let n = self.n.get() + 1;
        self.n.set(n);
        let out = Command::new(palisade())
            .arg("run")
            .arg("--cwd")
            .arg(work)
            .arg("--policy")
            .arg(policy)
            .arg("--journal")
            .arg(self.dir.join(format!("run{n}.journal")))
            .arg("--key")
            .arg(&self.key)
            .arg("--approve-socket")
            .arg(self.sockets.path().join(format!("approve{n}.sock")))
            .arg("--stage-dir")
            .arg(self.dir.join("stages"))
            .arg("--writes")
            .arg("direct")
            .arg("--agent")
            .arg("claude")
            .arg("--resolve")
            .arg("provider.test=127.0.0.1")
            .arg("--")
            .args(["/bin/sh", "-c", script])
            .env("XDG_STATE_HOME", &self.state)
            .env("AGENT_TEST_KEY", rev("YEK-MAETDER-edasilap-ks"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

fn field<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {out}"))
}

/// A worker of policy B reads the kept HOME of policy A (another project's
/// agent transcripts, its tool output) through the shared agent state
/// directory: the HOMEs are all the worker uid's, the per-policy
/// directories traversable (0711) and their names the public digest of the
/// policy path. The guard: nothing of the state directory but the
/// session's own HOME is in view.
#[test]
fn a_worker_cannot_read_another_policys_agent_home() {
    assert!(is_root(), "the red team of agent sessions runs as root");
    let rig = Rig::new("cross-home");
    let (pa, wa) = rig.policy("a", "persistent");
    let (pb, wb) = rig.policy("b", "persistent");
    let marker = rev("TPIRCSNART-TERCES-A-TCEJORP");
    // Session A: the agent keeps a transcript in its HOME (0600, its own).
    let script_a = format!(
        "umask 077; printf '%s' '{marker}' > \"$HOME/transcript.txt\" && echo \"HOME=$HOME\""
    );
    let (st, out, err) = rig.run(&pa, &wa, &script_a);
    assert_eq!(st, 0, "session A: {out}\n{err}");
    let home_a = PathBuf::from(field(&out, "HOME"));
    assert_eq!(
        std::fs::read_to_string(home_a.join("transcript.txt")).unwrap(),
        marker,
        "control: session A's transcript is in its kept HOME on the host"
    );
    // A file of the launching user's next to the agents (world-readable):
    // the control that the state directory itself is in the worker's view
    // and that reading there works when nothing hides it.
    let visible = rig.state.join("visible.txt");
    std::fs::write(&visible, "seen").unwrap();
    std::fs::set_permissions(&visible, std::fs::Permissions::from_mode(0o644)).unwrap();
    // Session B (another policy) goes for A's HOME by path.
    let script_b = format!(
        r#"try() {{ if ( eval "$1" ) 2>/dev/null; then echo "$2=ok"; else echo "$2=refused"; fi; }}
try 'echo mine > "$HOME/own.txt" && grep -q mine "$HOME/own.txt"' own_home
try 'grep -q seen "{visible}"' state_visible
try 'cat "{a}/transcript.txt" | grep -q .' read_other_home
echo "LIST=$(ls -a "$(dirname "$(dirname "$HOME")")" 2>/dev/null | tr '\n' ' ')"
"#,
        visible = visible.display(),
        a = home_a.display()
    );
    let (st, out, err) = rig.run(&pb, &wb, &script_b);
    assert_eq!(st, 0, "session B: {out}\n{err}");
    assert!(
        !out.contains(&marker) && !err.contains(&marker),
        "A's transcript in B's output"
    );
    assert_eq!(
        field(&out, "own_home"),
        "ok",
        "control: B uses its own HOME\n{out}"
    );
    assert_eq!(
        field(&out, "state_visible"),
        "ok",
        "control: the state directory is in the worker's view here\n{out}"
    );
    assert_eq!(
        field(&out, "read_other_home"),
        "refused",
        "HOLE: a worker reads another policy's kept agent HOME ({}) through the shared agent state directory\n{out}",
        home_a.display()
    );
    let a_dir = home_a
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    assert!(
        !field(&out, "LIST").contains(a_dir),
        "HOLE: a worker lists the agent state directory and finds another policy's ({a_dir})\n{out}"
    );
    let _ = std::fs::remove_dir_all(&rig.dir);
}

/// The host token file of an OAuth relay (`credential.from_file`) in the
/// worker's view: egress/src/token.rs says the worker never sees it, but
/// nothing hides it; only the file's mode stands between the worker and
/// the refresh token when the file sits outside the host masks (a Codex
/// `auth.json` copied to `/etc/palisade`, a file under the project's
/// parent). The guard: the file is masked inside, whatever its mode.
#[test]
fn a_worker_cannot_read_the_oauth_token_file() {
    assert!(is_root(), "the red team of agent sessions runs as root");
    let rig = Rig::new("token-file");
    let (_, work) = rig.policy("p", "fresh");
    let access = rev("SSECCA-MAETDER-edasilap-10tao-tna-ks");
    let refresh = rev("HSERFER-MAETDER-edasilap-10tro-tna-ks");
    let token = rig.dir.join("p/oauth.json");
    let far = 4_102_444_800_000u64; // 2100-01-01, no refresh needed
    std::fs::write(
        &token,
        serde_json::json!({"access_token": access, "refresh_token": refresh, "expires_at": far})
            .to_string(),
    )
    .unwrap();
    // Readable by others: the operator's mistake the view must not turn
    // into the worker's token.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    // A sibling file of the same mode: the control that the directory is
    // in view and such a file is readable by the worker.
    let sibling = rig.dir.join("p/sibling.txt");
    std::fs::write(&sibling, "seen").unwrap();
    std::fs::set_permissions(&sibling, std::fs::Permissions::from_mode(0o644)).unwrap();
    let policy = rig.dir.join("p/oauth.toml");
    std::fs::write(
        &policy,
        format!(
            "[worker]\nprofile = \"governed\"\nagent_state = \"fresh\"\n\n[egress]\nallow_addresses = [\"127.0.0.0/8\"]\n\n[[egress.relay]]\nname = \"anthropic\"\norigin = \"https://provider.test:9\"\nroutes = [\"POST /v1/messages\"]\ncredential = {{ kind = \"anthropic_oauth\", from_file = \"{}\" }}\n",
            token.display()
        ),
    )
    .unwrap();
    let script = format!(
        r#"try() {{ if ( eval "$1" ) 2>/dev/null; then echo "$2=ok"; else echo "$2=refused"; fi; }}
try 'grep -q seen "{sibling}"' sibling
try 'grep -q refresh_token "{token}"' token_file
"#,
        sibling = sibling.display(),
        token = token.display()
    );
    let (st, out, err) = rig.run(&policy, &work, &script);
    assert_eq!(st, 0, "session: {out}\n{err}");
    for secret in [&access, &refresh] {
        assert!(
            !out.contains(secret.as_str()) && !err.contains(secret.as_str()),
            "a token in the output"
        );
    }
    assert_eq!(
        field(&out, "sibling"),
        "ok",
        "control: the token file's directory is in view\n{out}"
    );
    assert_eq!(
        field(&out, "token_file"),
        "refused",
        "HOLE: the worker reads the OAuth relay's host token file {} (access and refresh token)\n{out}",
        token.display()
    );
    let _ = std::fs::remove_dir_all(&rig.dir);
}
