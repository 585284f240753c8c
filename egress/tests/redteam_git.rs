//! Red-team tests of the `kind = "git"` relay (copied rig from relay_git.rs): real `git` against a loopback origin that
//! runs the real `git http-backend` (`__git_origin`): the relay on its
//! private Unix socket, a loopback TCP bridge to it (git speaks TCP), git
//! pointed at the bridge with `url.<bridge>/.insteadOf=<origin>/` and the
//! placeholder in `http.<bridge>/.extraHeader`, as the governed session
//! configures the worker's git. A recording gate decides each ref update.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    dead_code,
    unused_imports,
    reason = "tests"
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use palisade_egress::__git_origin::GitOrigin;
use palisade_egress::addr::AddressPolicy;
use palisade_egress::control::{AskAnswer, OutwardAction, OutwardAnswer, OutwardResult};
use palisade_egress::proxy::{Shutdown, shutdown_channel};
use palisade_egress::record::{MemoryRecorder, ProxyEvent, RelayOutcome, RelayRecord};
use palisade_egress::relay::{
    Credential, GitSettings, OutwardFuture, Placeholder, PlaceholderFormat, PrivateSocket, Relay,
    RelayConfig, RelayGate, RouteRefusal, Secret, ServerToolResult, basic_placeholder,
};
use palisade_egress::resolve::StaticResolver;
use palisade_schema::host_policy::{Origin, TargetGlob};
use tokio::net::{TcpListener, UnixStream};

/// The host-held token, stored reversed so a leak scan cannot match this file.
fn real_token() -> String {
    "NEKOT-TIG-LAER-edisilap-phg".chars().rev().collect()
}

const USER: &str = "x-access-token";
const REPO: &str = "acme/app.git";

/// One call the relay made to the gate.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Call {
    Policy {
        kind: String,
        target: String,
    },
    Decided {
        kind: String,
        target: String,
        detail: BTreeMap<String, String>,
        allowed: bool,
    },
    Refused {
        kind: String,
        target: String,
        reason: String,
    },
    Executed {
        ticket: u64,
        kind: String,
        reference: String,
        result: String,
        status: Option<i32>,
    },
}

type Rule = Box<dyn Fn(&OutwardAction) -> AskAnswer + Send + Sync>;

/// A gate whose policy answer (`policy`) and final decision (`decide`)
/// are functions of the action; it records every call.
struct Gate {
    policy: Rule,
    decide: Rule,
    calls: Mutex<Vec<Call>>,
    tickets: AtomicU64,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").finish_non_exhaustive()
    }
}

impl Gate {
    fn new(
        policy: impl Fn(&OutwardAction) -> AskAnswer + Send + Sync + 'static,
        decide: impl Fn(&OutwardAction) -> AskAnswer + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            policy: Box::new(policy),
            decide: Box::new(decide),
            calls: Mutex::new(Vec::new()),
            tickets: AtomicU64::new(1),
        })
    }

    fn allow_all() -> Arc<Self> {
        Self::new(|_| AskAnswer::Ask, |_| AskAnswer::Allow)
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn decided(&self) -> Vec<(String, String, bool)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Decided {
                    kind,
                    detail,
                    allowed,
                    ..
                } => Some((kind, detail["ref"].clone(), allowed)),
                _ => None,
            })
            .collect()
    }

    fn executed(&self) -> Vec<(String, String, String)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Executed {
                    kind,
                    reference,
                    result,
                    ..
                } => Some((kind, reference, result)),
                _ => None,
            })
            .collect()
    }
}

impl RelayGate for Gate {
    fn admit(&self, _relay: &str, _provider: &str) -> Result<(), RouteRefusal> {
        Ok(())
    }

    fn server_tool_result(&self, _: &str, _: &str, _: ServerToolResult) -> bool {
        true
    }

    fn outward_policy(&self, relay: &str, action: &OutwardAction) -> AskAnswer {
        assert_eq!(relay, "github-git");
        assert_eq!(action.via.as_deref(), Some("github-git"));
        self.calls.lock().unwrap().push(Call::Policy {
            kind: action.kind.clone(),
            target: action.target.clone(),
        });
        (self.policy)(action)
    }

    fn outward(&self, _relay: &str, action: OutwardAction) -> OutwardFuture {
        let decision = (self.decide)(&action);
        let allowed = decision == AskAnswer::Allow;
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
        self.calls.lock().unwrap().push(Call::Decided {
            kind: action.kind.clone(),
            target: action.target.clone(),
            detail: action.detail.clone(),
            allowed,
        });
        let answer = OutwardAnswer {
            ticket,
            decision,
            policy: AskAnswer::Ask,
            approval: None,
            rule: (!allowed).then(|| "outward.deny[0]".to_owned()),
            reason: if allowed {
                "approved".into()
            } else {
                "denied by the host".into()
            },
        };
        Box::pin(std::future::ready(answer))
    }

    fn outward_refused(&self, _relay: &str, action: OutwardAction, reason: &str) -> OutwardAnswer {
        self.calls.lock().unwrap().push(Call::Refused {
            kind: action.kind.clone(),
            target: action.target.clone(),
            reason: reason.to_owned(),
        });
        OutwardAnswer {
            ticket: self.tickets.fetch_add(1, Ordering::Relaxed),
            decision: AskAnswer::Deny,
            policy: AskAnswer::Deny,
            approval: None,
            rule: None,
            reason: reason.to_owned(),
        }
    }

    fn outward_executed(
        &self,
        _relay: &str,
        ticket: u64,
        action: &OutwardAction,
        result: &OutwardResult,
    ) {
        self.calls.lock().unwrap().push(Call::Executed {
            ticket,
            kind: action.kind.clone(),
            reference: action.detail["ref"].clone(),
            result: result.detail.get("result").cloned().unwrap_or_default(),
            status: result.status,
        });
    }
}

/// The relay on its socket, a TCP bridge to it, the origin behind it.
struct Rig {
    origin: GitOrigin,
    relay: Relay,
    recorder: Arc<MemoryRecorder>,
    sock: PathBuf,
    bridge: String,
    placeholder: Placeholder,
    shutdown: Shutdown,
    tmp: tempfile::TempDir,
}

impl Rig {
    /// A relay serving `repos` (empty: all) with `gate` (none: no session).
    async fn start(repos: &[&str], gate: Option<Arc<Gate>>) -> Self {
        Self::start_with(repos, gate.map(|g| g as Arc<dyn RelayGate>), |_| {}).await
    }

    async fn start_with(
        repos: &[&str],
        gate: Option<Arc<dyn RelayGate>>,
        configure: impl FnOnce(&mut RelayConfig),
    ) -> Self {
        let origin = tokio::task::spawn_blocking(|| {
            let o = GitOrigin::start().unwrap();
            o.create_bare(REPO).unwrap();
            o.commit(REPO, "main", "README", "hello\n").unwrap();
            o
        })
        .await
        .unwrap();
        let placeholder = Placeholder::generate(&PlaceholderFormat::generic()).unwrap();
        let settings = GitSettings::new(
            repos
                .iter()
                .map(|r| TargetGlob::parse(r).unwrap())
                .collect(),
        );
        let mut config = RelayConfig::new_git(
            "github-git",
            Origin::parse(&origin.url("git.test")).unwrap(),
            settings,
            Credential::basic(USER, Secret::new(real_token())).unwrap(),
            placeholder.clone(),
        )
        .unwrap()
        .with_roots(origin.roots())
        .unwrap();
        config.addresses = AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
        configure(&mut config);
        let recorder = Arc::new(MemoryRecorder::new());
        let resolver =
            Arc::new(StaticResolver::new().with("git.test", &["127.0.0.1".parse().unwrap()]));
        let mut relay = Relay::new(config, resolver, recorder.clone());
        if let Some(gate) = gate {
            relay = relay.with_gate(gate);
        }
        let tmp = tempfile::tempdir().unwrap();
        let sock = tmp.path().join("relay").join("git.sock");
        let socket = PrivateSocket::bind(&sock).unwrap();
        let (shutdown, signal) = shutdown_channel();
        let served = relay.clone();
        tokio::spawn(async move {
            served.serve(&socket, signal).await.unwrap();
            drop(socket);
        });
        // git speaks TCP: a loopback bridge to the relay's socket
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let bridge = format!("http://{}", listener.local_addr().unwrap());
        let to = sock.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut tcp, _)) = listener.accept().await else {
                    return;
                };
                let to = to.clone();
                tokio::spawn(async move {
                    if let Ok(mut unix) = UnixStream::connect(&to).await {
                        let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                    }
                });
            }
        });
        Self {
            origin,
            relay,
            recorder,
            sock,
            bridge,
            placeholder,
            shutdown,
            tmp,
        }
    }

    /// The origin URL the worker's git is told to use for `repo`.
    fn url(&self, repo: &str) -> String {
        format!("{}/{repo}", self.origin.url("git.test"))
    }

    fn basic(&self) -> String {
        basic_placeholder(USER, &self.placeholder).to_string()
    }

    /// Run `git args` in `cwd` as the worker's git, configured for the
    /// relay (blocking, off the runtime's threads).
    async fn git(&self, cwd: &Path, args: &[&str]) -> Output {
        self.git_with(cwd, &self.basic(), args).await
    }

    async fn git_with(&self, cwd: &Path, authorization: &str, args: &[&str]) -> Output {
        let mut c = Command::new("git");
        c.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_AUTHOR_NAME", "worker")
            .env("GIT_AUTHOR_EMAIL", "worker@example.invalid")
            .env("GIT_COMMITTER_NAME", "worker")
            .env("GIT_COMMITTER_EMAIL", "worker@example.invalid")
            .current_dir(cwd)
            .arg("-c")
            .arg(format!(
                "url.{}/.insteadOf={}/",
                self.bridge,
                self.origin.url("git.test")
            ))
            .arg("-c")
            .arg(format!(
                "http.{}/.extraHeader=Authorization: {authorization}",
                self.bridge
            ))
            .args(args);
        tokio::task::spawn_blocking(move || c.output().unwrap())
            .await
            .unwrap()
    }

    /// A clone of `REPO` in `name` under the temp dir.
    async fn clone_repo(&self, name: &str) -> PathBuf {
        let out = self
            .git(
                self.tmp.path(),
                &["clone", "--quiet", &self.url(REPO), name],
            )
            .await;
        assert!(out.status.success(), "clone: {}", stderr(&out));
        self.tmp.path().join(name)
    }

    /// What `r` names at the origin once every CGI it started has ended
    /// (a cut push's receive-pack runs on after the relay went away).
    async fn origin_ref(&self, r: &str) -> Option<String> {
        let settled = tokio::task::block_in_place(|| self.origin.settle(Duration::from_secs(60)));
        assert!(settled, "the origin's CGIs ended: {:?}", self.origin.seen());
        self.origin.rev_parse(REPO, r)
    }

    async fn records(&self, n: usize) -> Vec<RelayRecord> {
        for _ in 0..500 {
            let r = relay_records(&self.recorder);
            if r.len() >= n {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "expected {n} relay records, got {:?}",
            relay_records(&self.recorder)
        );
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.shutdown.trigger();
    }
}

fn relay_records(recorder: &MemoryRecorder) -> Vec<RelayRecord> {
    recorder
        .events()
        .into_iter()
        .filter_map(|e| match e {
            ProxyEvent::Relay(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Commit a file in the work tree `dir`; the new HEAD.
async fn commit(rig: &Rig, dir: &Path, file: &str, contents: &[u8]) -> String {
    std::fs::write(dir.join(file), contents).unwrap();
    assert!(rig.git(dir, &["add", file]).await.status.success());
    let out = rig.git(dir, &["commit", "--quiet", "-m", file]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    head(rig, dir, "HEAD").await
}

async fn head(rig: &Rig, dir: &Path, r: &str) -> String {
    let out = rig.git(dir, &["rev-parse", r]).await;
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn multi() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn pkt(payload: &[u8]) -> Vec<u8> {
    let mut v = format!("{:04x}", payload.len() + 4).into_bytes();
    v.extend_from_slice(payload);
    v
}

/// A pack of `tip` over `old`, made by the worker's git in `dir`.
async fn pack_of(dir: &Path, tip: &str, old: &str) -> Vec<u8> {
    let revs = format!("{tip}\n^{old}\n");
    let w = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut child = Command::new("git")
            .current_dir(&w)
            .args(["pack-objects", "--stdout", "--revs", "--quiet"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(revs.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap().stdout
    })
    .await
    .unwrap()
}

/// Gives the origin's `REPO` a `pre-receive` hook that sleeps `secs`
/// (a slow origin: GitHub's checks, a large repository).
fn slow_origin(rig: &Rig, secs: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    let hook = rig.origin.root.join(REPO).join("hooks").join("pre-receive");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    std::fs::write(
        &hook,
        format!("#!/bin/sh\ncat >/dev/null\nsleep {secs}\nexit 0\n"),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Sends a raw receive-pack request for `body` to the relay's socket and
/// either reads the whole answer (`wait`) or hangs up 300 ms after the
/// last byte went out, as a hostile worker may; the answer read, if any.
async fn raw_push(rig: &Rig, body: &[u8], wait: bool) -> Vec<u8> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = UnixStream::connect(&rig.sock).await.unwrap();
    let head = format!(
        "POST /acme/app.git/git-receive-pack HTTP/1.1\r\nHost: localhost\r\n\
         Authorization: {}\r\nContent-Type: application/x-git-receive-pack-request\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        rig.basic(),
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    s.flush().await.unwrap();
    if !wait {
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(s);
        return Vec::new();
    }
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}

/// A gate that holds every ask `hold` before denying it (a host slow to
/// answer `palisade approve`), counting the asks it holds now.
struct SlowGate {
    hold: Duration,
    waiting: Arc<AtomicU64>,
}

impl std::fmt::Debug for SlowGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlowGate").finish_non_exhaustive()
    }
}

impl RelayGate for SlowGate {
    fn admit(&self, _relay: &str, _provider: &str) -> Result<(), RouteRefusal> {
        Ok(())
    }

    fn server_tool_result(&self, _: &str, _: &str, _: ServerToolResult) -> bool {
        true
    }

    fn outward_policy(&self, _relay: &str, _action: &OutwardAction) -> AskAnswer {
        AskAnswer::Ask
    }

    fn outward(&self, _relay: &str, _action: OutwardAction) -> OutwardFuture {
        let hold = self.hold;
        let waiting = self.waiting.clone();
        Box::pin(async move {
            waiting.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(hold).await;
            waiting.fetch_sub(1, Ordering::SeqCst);
            OutwardAnswer {
                ticket: 1,
                decision: AskAnswer::Deny,
                policy: AskAnswer::Ask,
                approval: None,
                rule: Some("outward.ask[0]".into()),
                reason: "denied by the host".into(),
            }
        })
    }

    fn outward_refused(&self, _relay: &str, _action: OutwardAction, reason: &str) -> OutwardAnswer {
        OutwardAnswer {
            ticket: 2,
            decision: AskAnswer::Deny,
            policy: AskAnswer::Deny,
            approval: None,
            rule: None,
            reason: reason.to_owned(),
        }
    }

    fn outward_executed(&self, _: &str, _: u64, _: &OutwardAction, _: &OutwardResult) {}
}

/// A one-object pack: a commit of `body` (any bytes), zlib-compressed; the
/// commit's id and the pack.
fn commit_pack(body: &[u8]) -> (String, Vec<u8>) {
    use sha1::Digest as _;
    use std::io::Write as _;
    let mut h = sha1::Sha1::new();
    h.update(format!("commit {}\0", body.len()).as_bytes());
    h.update(body);
    let id: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let mut pack = b"PACK".to_vec();
    pack.extend_from_slice(&2u32.to_be_bytes());
    pack.extend_from_slice(&1u32.to_be_bytes());
    // type 1 (commit), size varint
    let mut size = body.len();
    let mut first = (1u8 << 4) | (size & 15) as u8;
    size >>= 4;
    if size > 0 {
        first |= 0x80;
    }
    pack.push(first);
    while size > 0 {
        let mut b = (size & 0x7f) as u8;
        size >>= 7;
        if size > 0 {
            b |= 0x80;
        }
        pack.push(b);
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(body).unwrap();
    pack.extend_from_slice(&z.finish().unwrap());
    let sum = sha1::Sha1::digest(&pack);
    pack.extend_from_slice(&sum);
    (id, pack)
}

/// The peak resident set of this process, in bytes.
fn peak_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<usize>()
        .unwrap()
        * 1024
}

/// FINDING: the pack scanner keeps up to `MAX_COMMIT_BYTES` (64 MiB) of
/// commit bodies per push, outside the relay's `max_buffered` budget, for
/// as long as the push waits for the host. Commit bodies compress ~1000:1,
/// so a worker uploading ~60 KiB per push makes the relay hold ~60 MiB per
/// push, times `max_connections` (32): gigabytes from megabytes, however
/// small `limits.max_buffered` is. Here 4 pushes of ~60 KiB against a
/// relay whose budget is 8 MiB.
#[test]
fn redteam_git_kept_commit_bodies_count_against_the_relay_budget() {
    multi().block_on(async {
        let waiting = Arc::new(AtomicU64::new(0));
        let gate = Arc::new(SlowGate {
            hold: Duration::from_secs(6),
            waiting: waiting.clone(),
        });
        let rig = Rig::start_with(&[], Some(gate), |c| c.max_buffered = 8 << 20).await;
        let old = rig.origin_ref("refs/heads/main").await.unwrap();
        // a "commit" whose body is 60 MiB of one byte: ~60 KiB on the wire
        let mut body = format!("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nparent {old}\n\n")
            .into_bytes();
        body.resize(60 << 20, b'a');
        let (id, pack) = commit_pack(&body);
        drop(body);
        assert!(pack.len() < 256 << 10, "small on the wire: {}", pack.len());
        let mut push = pkt(format!(
            "{old} {id} refs/heads/main\0report-status object-format=sha1 agent=redteam\n"
        )
        .as_bytes());
        push.extend_from_slice(b"0000");
        push.extend_from_slice(&pack);
        let before = peak_rss();
        let mut clients = Vec::new();
        for _ in 0..4 {
            let sock = rig.sock.clone();
            let basic = rig.basic();
            let push = push.clone();
            clients.push(tokio::spawn(async move {
                use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                let mut s = UnixStream::connect(&sock).await.unwrap();
                let head = format!(
                    "POST /acme/app.git/git-receive-pack HTTP/1.1\r\nHost: localhost\r\n\
                     Authorization: {basic}\r\nContent-Type: application/x-git-receive-pack-request\r\n\
                     Content-Length: {}\r\n\r\n",
                    push.len()
                );
                s.write_all(head.as_bytes()).await.unwrap();
                s.write_all(&push).await.unwrap();
                let mut out = Vec::new();
                let _ = s.read_to_end(&mut out).await;
                out
            }));
        }
        // wait until the pushes are held for the host (or refused)
        for _ in 0..400 {
            if waiting.load(Ordering::SeqCst) == 4 || clients.iter().all(|c| c.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let held = waiting.load(Ordering::SeqCst);
        let grown = peak_rss().saturating_sub(before);
        for c in clients {
            let _ = c.await;
        }
        assert!(
            grown < 64 << 20,
            "{held} pushes of {} bytes each held for the host grew the relay by {} MiB \
             (budget: max_buffered = 8 MiB)",
            push.len(),
            grown >> 20
        );
    });
}

/// Positive control: a small, real push of the same shape (one commit,
/// fast-forward) is still decided and lands with the same 8 MiB budget.
#[test]
fn redteam_git_a_small_push_lands_under_a_small_budget() {
    multi().block_on(async {
        let gate = Gate::allow_all();
        let rig = Rig::start_with(&[], Some(gate.clone() as Arc<dyn RelayGate>), |c| {
            c.max_buffered = 8 << 20;
        })
        .await;
        let work = rig.clone_repo("work").await;
        let tip = commit(&rig, &work, "a.txt", &vec![b'a'; 1 << 20]).await;
        let out = rig
            .git(&work, &["push", "origin", "HEAD:refs/heads/main"])
            .await;
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            rig.origin_ref("refs/heads/main").await.as_deref(),
            Some(tip.as_str())
        );
        assert_eq!(
            gate.decided(),
            vec![("git.push".into(), "refs/heads/main".into(), true)]
        );
    });
}

/// FINDING: push options reach the origin but neither the decision nor the
/// record: the host is asked `git.push` of `agent/x` and the journal holds
/// only `ref`/`old`/`new`, while options such as GitLab's
/// `merge_request.create`, `merge_request.target=main` and
/// `merge_request.merge_when_pipeline_succeeds` make the origin open (and
/// merge) a merge request into `main`: an outward action nobody saw.
#[test]
fn redteam_git_push_options_are_part_of_the_decided_action() {
    multi().block_on(async {
        let gate = Gate::allow_all();
        let rig = Rig::start(&[], Some(gate.clone())).await;
        // an origin that takes push options (GitLab does by default)
        let repo = rig.origin.root.join(REPO);
        let ok = Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["config", "receive.advertisePushOptions", "true"])
            .status()
            .unwrap();
        assert!(ok.success());
        let work = rig.clone_repo("work").await;
        let tip = commit(&rig, &work, "a.txt", b"a\n").await;
        let out = rig
            .git(
                &work,
                &[
                    "push",
                    "-o",
                    "merge_request.create",
                    "-o",
                    "merge_request.target=main",
                    "-o",
                    "merge_request.merge_when_pipeline_succeeds",
                    "origin",
                    "HEAD:refs/heads/agent/x",
                ],
            )
            .await;
        // positive control: the push is decided and lands
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            rig.origin_ref("refs/heads/agent/x").await.as_deref(),
            Some(tip.as_str())
        );
        let decided: Vec<BTreeMap<String, String>> = gate
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Decided { detail, .. } => Some(detail),
                _ => None,
            })
            .collect();
        assert_eq!(decided.len(), 1, "{decided:?}");
        let shown: String = decided[0].values().cloned().collect::<Vec<_>>().join(" ");
        assert!(
            shown.contains("merge_request.merge_when_pipeline_succeeds"),
            "the push options the origin acted on are in the decided action: {:?}",
            decided[0]
        );
    });
}

/// FINDING: a git target joins repo and ref with `:`, so its repository is
/// the segment `secret:refs` to the glob, and the documented way to fence a
/// repository, a deny on `github.com/acme/secret/**` (docs/policy.md), never
/// matches a push to it: with an allow on `github.com/acme/**` the push
/// runs unasked, while the same deny does stop REST writes to it.
#[test]
fn redteam_git_a_deny_on_a_repository_also_denies_pushes_to_it() {
    use palisade_policy::outward::{OutwardRequest, decide};
    use palisade_policy::verdict::Decision;
    let text = r#"
[outward]
default = "ask"
allow = [
  { kind = "git.push", target = "github.com/acme/**" },
  { kind = "github.post.comment", target = "github.com/acme/**" },
]
deny = [{ kind = "*", target = "github.com/acme/secret/**" }]
"#;
    let policy = palisade_schema::host_policy::parse("p.toml", text)
        .map_err(|d| d.to_string())
        .unwrap()
        .into_value();
    let session = palisade_taint::Session::new();
    let d = |kind: &str, target: &str| {
        decide(&policy, &session, &OutwardRequest { kind, target }).decision
    };
    // positive controls: the allow works, and the deny stops REST writes
    assert_eq!(
        d("git.push", "github.com/acme/app:refs/heads/main"),
        Decision::Allow
    );
    assert_eq!(
        d("github.post.comment", "github.com/acme/secret/issues/7"),
        Decision::Deny
    );
    // the git relay's target for a push to acme/secret
    assert_eq!(
        d("git.push", "github.com/acme/secret:refs/heads/main"),
        Decision::Deny,
        "a deny on github.com/acme/secret/** covers pushes to acme/secret"
    );
}

/// FINDING (GitHub preset): GitHub numbers issues and pull requests in one
/// sequence and applies the issues API to pull requests ("every pull
/// request is an issue"): `PATCH /repos/o/r/issues/7` closes or retitles
/// pull request 7, `…/issues/7/labels` labels it, `…/issues/7/comments`
/// comments on it. The preset renders those as `github.com/o/r/issues/7`
/// and the pulls routes as `github.com/o/r/pull/7`, so a deny (or an ask)
/// fencing pull request 7 is bypassed through the issues routes.
#[test]
fn redteam_outward_a_deny_on_a_pull_request_covers_the_issue_routes_github_applies_to_it() {
    use palisade_policy::outward::{OutwardRequest, decide};
    use palisade_policy::relay_route::render;
    use palisade_policy::verdict::Decision;
    use palisade_schema::host_policy::GITHUB_REST_PRESET;
    let text = r#"
[outward]
default = "ask"
allow = [{ kind = "github.post", target = "github.com/acme/app/**" }]
deny = [{ kind = "github.post", target = "github.com/acme/app/pull/7" }]
"#;
    let policy = palisade_schema::host_policy::parse("p.toml", text)
        .map_err(|d| d.to_string())
        .unwrap()
        .into_value();
    let session = palisade_taint::Session::new();
    let binds = [
        ("owner", "acme"),
        ("repo", "app"),
        ("number", "7"),
        ("name", "bug"),
    ];
    let decided = |method: &str, path: &str| {
        let (_, _, kind, target) = GITHUB_REST_PRESET
            .iter()
            .find(|(m, p, _, _)| *m == method && *p == path)
            .unwrap();
        let target = render(target, &binds);
        (
            target.clone(),
            decide(
                &policy,
                &session,
                &OutwardRequest {
                    kind,
                    target: &target,
                },
            )
            .decision,
        )
    };
    // positive control: the pulls route for PR 7 is denied
    assert_eq!(
        decided("PATCH", "/repos/{owner}/{repo}/pulls/{number}").1,
        Decision::Deny
    );
    for (m, p) in [
        ("PATCH", "/repos/{owner}/{repo}/issues/{number}"),
        ("POST", "/repos/{owner}/{repo}/issues/{number}/comments"),
        ("POST", "/repos/{owner}/{repo}/issues/{number}/labels"),
    ] {
        let (target, d) = decided(m, p);
        assert_eq!(
            d,
            Decision::Deny,
            "{m} {p} acts on PR 7 at GitHub but is decided on {target}"
        );
    }
}
