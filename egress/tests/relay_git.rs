//! The `kind = "git"` relay with real `git` against a loopback origin that
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
                } => Some((
                    kind,
                    detail.get("ref").cloned().unwrap_or_default(),
                    allowed,
                )),
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
            reference: action.detail.get("ref").cloned().unwrap_or_default(),
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
        Self::start_with(repos, gate, |_| {}).await
    }

    async fn start_with(
        repos: &[&str],
        gate: Option<Arc<Gate>>,
        configure: impl FnOnce(&mut RelayConfig),
    ) -> Self {
        Self::start_gated(repos, gate.map(|g| g as Arc<dyn RelayGate>), configure).await
    }

    async fn start_gated(
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

#[test]
fn clone_and_fetch_go_through_with_the_host_credential_and_no_decision() {
    multi().block_on(async {
        let gate = Gate::allow_all();
        let rig = Rig::start(&[], Some(gate.clone())).await;
        let work = rig.clone_repo("work").await;
        assert_eq!(
            std::fs::read_to_string(work.join("README")).unwrap(),
            "hello\n"
        );
        // a new commit on the origin is fetched
        let tip = rig.origin.commit(REPO, "main", "NEWS", "news\n").unwrap();
        let out = rig.git(&work, &["fetch", "--quiet", "origin"]).await;
        assert!(out.status.success(), "fetch: {}", stderr(&out));
        assert_eq!(head(&rig, &work, "origin/main").await, tip);
        assert!(
            gate.calls().is_empty(),
            "reads decide nothing: {:?}",
            gate.calls()
        );

        // the origin saw the host's token on every request, never the placeholder
        let seen = rig.origin.seen();
        assert!(seen.len() >= 3, "{seen:?}");
        let want = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{}", real_token()))
        );
        for r in &seen {
            assert_eq!(r.authorization.as_deref(), Some(want.as_str()), "{r:?}");
            assert!(r.git_protocol.is_some(), "Git-Protocol is kept: {r:?}");
        }
        let records = rig.records(seen.len()).await;
        assert!(
            records.iter().all(|r| r.outcome == RelayOutcome::Forwarded),
            "{records:?}"
        );
        for r in &records {
            let text = format!("{r:?}");
            assert!(!text.contains(&real_token()) && !text.contains(rig.placeholder.expose()));
        }
    });
}

#[test]
fn the_wrong_placeholder_reaches_nothing() {
    multi().block_on(async {
        let rig = Rig::start(&[], Some(Gate::allow_all())).await;
        let wrong = basic_placeholder(
            USER,
            &Placeholder::generate(&PlaceholderFormat::generic()).unwrap(),
        )
        .to_string();
        let out = rig
            .git_with(
                rig.tmp.path(),
                &wrong,
                &["clone", "--quiet", &rig.url(REPO), "w"],
            )
            .await;
        assert!(!out.status.success());
        assert_eq!(rig.origin.seen().len(), 0, "nothing reached the origin");
        let records = rig.records(1).await;
        assert_eq!(records[0].reason, "placeholder_required");
        // positive control: the right one clones
        rig.clone_repo("ok").await;
    });
}

#[test]
fn repos_limits_what_is_served() {
    multi().block_on(async {
        let rig = Rig::start(&["acme/*"], Some(Gate::allow_all())).await;
        rig.origin.create_bare("other/app.git").unwrap();
        rig.origin
            .commit("other/app.git", "main", "x", "x\n")
            .unwrap();
        let out = rig
            .git(
                rig.tmp.path(),
                &["clone", "--quiet", &rig.url("other/app.git"), "o"],
            )
            .await;
        assert!(!out.status.success());
        assert!(stderr(&out).contains("403"), "{}", stderr(&out));
        assert_eq!(rig.origin.requests("/info/refs"), 0);
        let records = rig.records(1).await;
        assert_eq!(
            (
                records[0].outcome,
                records[0].reason.as_str(),
                records[0].status
            ),
            (RelayOutcome::Refused, "repo_not_allowed", 403)
        );
        // positive control: a served repository clones
        rig.clone_repo("served").await;
        assert!(rig.origin.requests("/info/refs") > 0);
    });
}

#[test]
fn an_allowed_push_lands_and_each_ref_is_reported_executed() {
    multi().block_on(async {
        let gate = Gate::allow_all();
        let rig = Rig::start(&[], Some(gate.clone())).await;
        let work = rig.clone_repo("work").await;
        let old = rig.origin_ref("refs/heads/main").await.unwrap();
        let new = commit(&rig, &work, "a.txt", b"a\n").await;
        let out = rig
            .git(&work, &["push", "origin", "HEAD:refs/heads/main"])
            .await;
        assert!(out.status.success(), "push: {}", stderr(&out));
        assert_eq!(
            rig.origin_ref("refs/heads/main").await.as_deref(),
            Some(new.as_str())
        );

        let target = format!(
            "git.test:{}/acme/app:refs/heads/main",
            rig.origin.addr.port()
        );
        let calls = gate.calls();
        assert!(calls.contains(&Call::Policy {
            kind: "git.push".into(),
            target: target.clone()
        }));
        assert!(
            calls.contains(&Call::Policy {
                kind: "git.force_push".into(),
                target: target.clone()
            }),
            "an update is pre-checked as both: {calls:?}"
        );
        let decided: Vec<_> = calls
            .iter()
            .filter_map(|c| match c {
                Call::Decided {
                    kind,
                    target,
                    detail,
                    allowed,
                } => Some((kind.clone(), target.clone(), detail.clone(), *allowed)),
                _ => None,
            })
            .collect();
        assert_eq!(decided.len(), 1, "{calls:?}");
        let (kind, t, detail, allowed) = &decided[0];
        assert_eq!(
            (kind.as_str(), t.as_str(), *allowed),
            ("git.push", target.as_str(), true)
        );
        assert_eq!(detail["ref"], "refs/heads/main");
        assert_eq!(detail["old"], old);
        assert_eq!(detail["new"], new);
        assert_eq!(
            gate.executed(),
            vec![("git.push".into(), "refs/heads/main".into(), "ok".into())]
        );
        let status = calls.iter().find_map(|c| match c {
            Call::Executed { status, .. } => *status,
            _ => None,
        });
        assert_eq!(status, Some(200));
        let records = rig.records(3).await;
        let push = records
            .iter()
            .find(|r| r.path.ends_with("/git-receive-pack"))
            .unwrap();
        assert_eq!(push.outcome, RelayOutcome::Forwarded);
    });
}

#[test]
fn a_push_the_policy_denies_is_refused_whole_before_anything_goes_upstream() {
    multi().block_on(async {
        // main is denied by the policy; agent/* would be asked
        let gate = Gate::new(
            |a| {
                if a.detail["ref"] == "refs/heads/main" {
                    AskAnswer::Deny
                } else {
                    AskAnswer::Ask
                }
            },
            |_| AskAnswer::Allow,
        );
        let rig = Rig::start(&[], Some(gate.clone())).await;
        let work = rig.clone_repo("work").await;
        let before = rig.origin_ref("refs/heads/main").await.unwrap();
        commit(&rig, &work, "a.txt", b"a\n").await;
        let out = rig
            .git(
                &work,
                &[
                    "push",
                    "origin",
                    "HEAD:refs/heads/main",
                    "HEAD:refs/heads/agent/x",
                ],
            )
            .await;
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(err.contains("! [remote rejected]"), "{err}");
        assert!(err.contains("refused by palisade:"), "{err}");
        assert!(
            err.contains("another ref in this push was refused"),
            "{err}"
        );
        assert_eq!(
            rig.origin_ref("refs/heads/main").await.as_deref(),
            Some(before.as_str())
        );
        assert_eq!(rig.origin_ref("refs/heads/agent/x").await, None);
        assert_eq!(
            rig.origin.requests("/git-receive-pack"),
            0,
            "nothing went upstream"
        );
        assert!(gate.decided().is_empty(), "nothing was asked");
        let refused: Vec<_> = gate
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Refused { target, reason, .. } => Some((target, reason)),
                _ => None,
            })
            .collect();
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(refused[1].1.contains("another ref"), "{refused:?}");
        let records = rig.records(3).await;
        let push = records
            .iter()
            .find(|r| r.path.ends_with("/git-receive-pack"))
            .unwrap();
        assert_eq!(push.outcome, RelayOutcome::OutwardDenied);
        assert_eq!(push.bytes_up, 0);

        // positive control: agent/x alone is pushed
        let out = rig
            .git(&work, &["push", "origin", "HEAD:refs/heads/agent/x"])
            .await;
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(rig.origin_ref("refs/heads/agent/x").await.is_some());
    });
}

#[test]
fn a_push_refused_after_its_pack_is_cut_before_the_trailer_and_changes_nothing() {
    multi().block_on(async {
        // the policy asks; the host denies agent/x and allows main
        let gate = Gate::new(
            |_| AskAnswer::Ask,
            |a| {
                if a.detail["ref"] == "refs/heads/agent/x" {
                    AskAnswer::Deny
                } else {
                    AskAnswer::Allow
                }
            },
        );
        let rig = Rig::start(&[], Some(gate.clone())).await;
        let work = rig.clone_repo("work").await;
        let before = rig.origin_ref("refs/heads/main").await.unwrap();
        commit(&rig, &work, "a.txt", b"a\n").await;
        let out = rig
            .git(
                &work,
                &[
                    "push",
                    "origin",
                    "HEAD:refs/heads/main",
                    "HEAD:refs/heads/agent/x",
                ],
            )
            .await;
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(err.contains("! [remote rejected]"), "{err}");
        assert!(
            err.contains("refused by palisade: outward.deny[0]"),
            "{err}"
        );
        // neither ref changed, though main alone was allowed
        assert_eq!(
            rig.origin_ref("refs/heads/main").await.as_deref(),
            Some(before.as_str())
        );
        assert_eq!(rig.origin_ref("refs/heads/agent/x").await, None);
        // the pack went upstream, cut before its end (the origin records
        // the cut when its body read fails, which under CI load took more
        // than 10 s twice: up to 60 s)
        let mut cut = None;
        for _ in 0..6000 {
            cut = rig
                .origin
                .seen()
                .into_iter()
                .find(|r| r.path.ends_with("/git-receive-pack") && r.body_ended);
            if cut.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let cut = cut.expect("the origin saw the push");
        assert_eq!(rig.origin.requests("/git-receive-pack"), 1);
        assert!(cut.body_bytes > 0, "the pack streamed: {cut:?}");
        assert!(
            !cut.body_complete,
            "the origin never saw the body's end: {cut:?}"
        );
        assert_eq!(
            gate.decided(),
            vec![
                ("git.push".into(), "refs/heads/main".into(), true),
                ("git.push".into(), "refs/heads/agent/x".into(), false),
            ]
        );
        assert!(gate.executed().is_empty(), "nothing executed");
        let records = rig.records(3).await;
        let push = records
            .iter()
            .find(|r| r.path.ends_with("/git-receive-pack"))
            .unwrap();
        assert_eq!(
            (push.outcome, push.reason.as_str()),
            (RelayOutcome::OutwardDenied, "outward_denied")
        );
        assert!(push.bytes_up > 0, "the pack but its trailer went upstream");

        // positive control: the same push, both allowed, lands
        let rig2 = Rig::start(&[], Some(Gate::allow_all())).await;
        let work2 = rig2.clone_repo("work").await;
        let tip = commit(&rig2, &work2, "a.txt", b"a\n").await;
        let out = rig2
            .git(
                &work2,
                &[
                    "push",
                    "origin",
                    "HEAD:refs/heads/main",
                    "HEAD:refs/heads/agent/x",
                ],
            )
            .await;
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            rig2.origin_ref("refs/heads/main").await.as_deref(),
            Some(tip.as_str())
        );
        assert_eq!(
            rig2.origin_ref("refs/heads/agent/x").await.as_deref(),
            Some(tip.as_str())
        );
    });
}

#[test]
fn a_rewrite_is_a_force_push_and_a_fast_forward_a_push() {
    multi().block_on(async {
        let gate = Gate::allow_all();
        let rig = Rig::start(&[], Some(gate.clone())).await;
        let work = rig.clone_repo("work").await;
        // agent/x: created, then fast-forwarded
        let out = rig
            .git(
                &work,
                &["push", "--quiet", "origin", "HEAD:refs/heads/agent/x"],
            )
            .await;
        assert!(out.status.success(), "{}", stderr(&out));
        commit(&rig, &work, "b.txt", b"b\n").await;
        let out = rig
            .git(
                &work,
                &["push", "--quiet", "origin", "HEAD:refs/heads/agent/x"],
            )
            .await;
        assert!(out.status.success(), "{}", stderr(&out));
        // main: rewritten (an orphan commit), pushed with --force
        assert!(
            rig.git(&work, &["checkout", "--quiet", "--orphan", "rewrite"])
                .await
                .status
                .success()
        );
        let orphan = commit(&rig, &work, "c.txt", b"c\n").await;
        let out = rig
            .git(
                &work,
                &[
                    "push",
                    "--quiet",
                    "--force",
                    "origin",
                    "HEAD:refs/heads/main",
                ],
            )
            .await;
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            rig.origin_ref("refs/heads/main").await.as_deref(),
            Some(orphan.as_str())
        );
        assert_eq!(
            gate.decided(),
            vec![
                ("git.push".into(), "refs/heads/agent/x".into(), true),
                ("git.push".into(), "refs/heads/agent/x".into(), true),
                ("git.force_push".into(), "refs/heads/main".into(), true),
            ]
        );
    });
}

#[test]
fn a_force_push_denied_leaves_main_and_a_fast_forward_is_allowed() {
    multi().block_on(async {
        let gate = Gate::new(
            |a| {
                if a.kind == "git.force_push" {
                    AskAnswer::Deny
                } else {
                    AskAnswer::Ask
                }
            },
            |a| {
                if a.kind == "git.force_push" {
                    AskAnswer::Deny
                } else {
                    AskAnswer::Allow
                }
            },
        );
        let rig = Rig::start(&[], Some(gate.clone())).await;
        let work = rig.clone_repo("work").await;
        let before = rig.origin_ref("refs/heads/main").await.unwrap();
        assert!(
            rig.git(&work, &["checkout", "--quiet", "--orphan", "rewrite"])
                .await
                .status
                .success()
        );
        commit(&rig, &work, "c.txt", b"c\n").await;
        let out = rig
            .git(
                &work,
                &["push", "--force", "origin", "HEAD:refs/heads/main"],
            )
            .await;
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("! [remote rejected]"),
            "{}",
            stderr(&out)
        );
        assert_eq!(
            rig.origin_ref("refs/heads/main").await.as_deref(),
            Some(before.as_str())
        );
        assert_eq!(
            gate.decided(),
            vec![("git.force_push".into(), "refs/heads/main".into(), false)]
        );
        // positive control: a fast-forward of main goes through
        assert!(
            rig.git(&work, &["checkout", "--quiet", "-B", "m", "origin/main"])
                .await
                .status
                .success()
        );
        let tip = commit(&rig, &work, "d.txt", b"d\n").await;
        let out = rig
            .git(&work, &["push", "origin", "HEAD:refs/heads/main"])
            .await;
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            rig.origin_ref("refs/heads/main").await.as_deref(),
            Some(tip.as_str())
        );
    });
}

/// The worker's git in `work` pushes HEAD to `agent/x` with GitLab-style
/// push options (the origin told to take them).
async fn push_with_options(rig: &Rig, work: &Path, options: bool) -> Output {
    let repo = rig.origin.root.join(REPO);
    let ok = Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["config", "receive.advertisePushOptions", "true"])
        .status()
        .unwrap();
    assert!(ok.success());
    let mut args = vec!["push"];
    if options {
        args.extend([
            "-o",
            "merge_request.create",
            "-o",
            "merge_request.target=main",
        ]);
    }
    args.extend(["origin", "HEAD:refs/heads/agent/x"]);
    rig.git(work, &args).await
}

#[test]
fn a_deny_on_git_push_options_refuses_the_whole_push_before_anything_goes_upstream() {
    multi().block_on(async {
        let gate = Gate::new(
            |a| {
                if a.kind == "git.push_options" {
                    AskAnswer::Deny
                } else {
                    AskAnswer::Allow
                }
            },
            |_| AskAnswer::Allow,
        );
        let rig = Rig::start(&[], Some(gate.clone())).await;
        let work = rig.clone_repo("work").await;
        let tip = commit(&rig, &work, "a.txt", b"a\n").await;
        let out = push_with_options(&rig, &work, true).await;
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("refused by palisade"),
            "{}",
            stderr(&out)
        );
        assert_eq!(rig.origin_ref("refs/heads/agent/x").await, None);
        let target = format!("{}/acme/app", rig.origin.url("git.test").trim_start_matches("https://"));
        assert!(
            gate.calls().contains(&Call::Policy {
                kind: "git.push_options".into(),
                target: target.clone(),
            }),
            "{:?}",
            gate.calls()
        );
        assert!(
            gate.calls().iter().any(|c| matches!(c,
                Call::Refused { kind, target: t, .. } if kind == "git.push_options" && *t == target)),
            "{:?}",
            gate.calls()
        );
        assert_eq!(gate.decided(), vec![], "nothing asked");
        // positive control: the same push without options lands
        let out = push_with_options(&rig, &work, false).await;
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            rig.origin_ref("refs/heads/agent/x").await.as_deref(),
            Some(tip.as_str())
        );
    });
}

#[test]
fn push_options_the_policy_asks_for_are_asked_even_when_the_ref_is_allowed() {
    multi().block_on(async {
        let answer = Arc::new(Mutex::new(AskAnswer::Deny));
        let said = answer.clone();
        let gate = Gate::new(
            |a| {
                if a.kind == "git.push_options" {
                    AskAnswer::Ask
                } else {
                    AskAnswer::Allow
                }
            },
            move |_| *said.lock().unwrap(),
        );
        let rig = Rig::start(&[], Some(gate.clone())).await;
        let work = rig.clone_repo("work").await;
        let tip = commit(&rig, &work, "a.txt", b"a\n").await;
        // the host denies the options: the push is refused whole
        let out = push_with_options(&rig, &work, true).await;
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("refused by palisade"),
            "{}",
            stderr(&out)
        );
        assert_eq!(rig.origin_ref("refs/heads/agent/x").await, None);
        let decided: Vec<(String, String, BTreeMap<String, String>)> = gate
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Decided {
                    kind,
                    target,
                    detail,
                    ..
                } => Some((kind, target, detail)),
                _ => None,
            })
            .collect();
        assert_eq!(decided.len(), 1, "{decided:?}");
        assert_eq!(decided[0].0, "git.push_options");
        assert!(decided[0].1.ends_with("/acme/app"), "{decided:?}");
        assert_eq!(
            decided[0].2["push_options"],
            "merge_request.create\nmerge_request.target=main"
        );
        // positive control: approved, the push lands, both decided and
        // both recorded executed
        *answer.lock().unwrap() = AskAnswer::Allow;
        let out = push_with_options(&rig, &work, true).await;
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            rig.origin_ref("refs/heads/agent/x").await.as_deref(),
            Some(tip.as_str())
        );
        let kinds: Vec<(String, bool)> = gate
            .decided()
            .into_iter()
            .map(|(k, _, allowed)| (k, allowed))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("git.push_options".into(), false),
                ("git.push_options".into(), true),
                ("git.push".into(), true)
            ]
        );
        for _ in 0..500 {
            if gate.executed().len() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            gate.executed(),
            vec![
                ("git.push_options".into(), String::new(), "ok".into()),
                ("git.push".into(), "refs/heads/agent/x".into(), "ok".into())
            ]
        );
    });
}

#[test]
fn a_deletion_is_delete_ref_and_decided_before_anything_goes_upstream() {
    multi().block_on(async {
        let gate = Gate::new(
            |_| AskAnswer::Ask,
            |a| {
                if a.detail["ref"] == "refs/heads/keep" {
                    AskAnswer::Deny
                } else {
                    AskAnswer::Allow
                }
            },
        );
        let rig = Rig::start(&[], Some(gate.clone())).await;
        rig.origin.commit(REPO, "keep", "k", "k\n").unwrap();
        rig.origin.commit(REPO, "gone", "g", "g\n").unwrap();
        let work = rig.clone_repo("work").await;
        let pushes_before = rig.origin.requests("/git-receive-pack");
        let out = rig
            .git(&work, &["push", "origin", ":refs/heads/keep"])
            .await;
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("refused by palisade:"),
            "{}",
            stderr(&out)
        );
        assert!(rig.origin_ref("refs/heads/keep").await.is_some());
        assert_eq!(
            rig.origin.requests("/git-receive-pack"),
            pushes_before,
            "a refused deletion sends nothing upstream"
        );
        // positive control: another deletion is allowed and applied
        let out = rig
            .git(&work, &["push", "origin", ":refs/heads/gone"])
            .await;
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(rig.origin_ref("refs/heads/gone").await, None);
        assert_eq!(
            gate.decided(),
            vec![
                ("git.delete_ref".into(), "refs/heads/keep".into(), false),
                ("git.delete_ref".into(), "refs/heads/gone".into(), true),
            ]
        );
        assert_eq!(
            gate.executed(),
            vec![(
                "git.delete_ref".into(),
                "refs/heads/gone".into(),
                "ok".into()
            )]
        );
    });
}

/// One pkt-line.
fn pkt(payload: &[u8]) -> Vec<u8> {
    let mut v = format!("{:04x}", payload.len() + 4).into_bytes();
    v.extend_from_slice(payload);
    v
}

/// POST `body` to the relay's receive-pack for `REPO` with `headers`.
async fn post_push(rig: &Rig, body: Vec<u8>, headers: &[(&str, &str)]) -> (StatusCode, Bytes) {
    let stream = UnixStream::connect(&rig.sock).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method("POST")
        .uri("/acme/app.git/git-receive-pack")
        .header("host", "localhost")
        .header("authorization", rig.basic())
        .header("content-type", "application/x-git-receive-pack-request");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = tokio::time::timeout(
        Duration::from_secs(60),
        sender.send_request(req.body(Full::new(Bytes::from(body))).unwrap()),
    )
    .await
    .unwrap()
    .unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, body)
}

#[test]
fn a_pack_that_does_not_prove_the_claimed_fast_forward_is_a_force_push() {
    multi().block_on(async {
        let gate = Gate::allow_all();
        let rig = Rig::start(&[], Some(gate.clone())).await;
        let work = rig.clone_repo("work").await;
        let old = rig.origin_ref("refs/heads/main").await.unwrap();
        // y: a real fast-forward of main; x: an orphan; the command names x
        // while the pack also carries y (whose parent is main)
        let y = commit(&rig, &work, "y.txt", b"y\n").await;
        assert!(
            rig.git(&work, &["checkout", "--quiet", "--orphan", "lie"])
                .await
                .status
                .success()
        );
        let x = commit(&rig, &work, "x.txt", b"x\n").await;
        let revs = format!("{x}\n{y}\n^{old}\n");
        let w = work.clone();
        let pack = tokio::task::spawn_blocking(move || {
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
        .unwrap();
        assert!(pack.starts_with(b"PACK"), "a pack");
        let mut body = pkt(format!(
            "{old} {x} refs/heads/main\0report-status object-format=sha1 agent=crafted\n"
        )
        .as_bytes());
        body.extend_from_slice(b"0000");
        body.extend_from_slice(&pack);
        let (status, answer) = post_push(&rig, body, &[]).await;
        assert_eq!(status, 200);
        let answer = String::from_utf8_lossy(&answer).into_owned();
        assert!(answer.contains("ok refs/heads/main"), "{answer}");
        assert_eq!(
            gate.decided(),
            vec![("git.force_push".into(), "refs/heads/main".into(), true)],
            "the relay's own hashing decides, not the command"
        );
        assert_eq!(
            rig.origin_ref("refs/heads/main").await.as_deref(),
            Some(x.as_str())
        );
        assert_eq!(
            gate.executed(),
            vec![(
                "git.force_push".into(),
                "refs/heads/main".into(),
                "ok".into()
            )]
        );
    });
}

/// A one-object pack: a commit of `body`, zlib-compressed (a body of one
/// repeated byte is tiny on the wire); the commit's id and the pack.
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

#[test]
fn the_commits_the_scanner_keeps_count_against_max_buffered() {
    multi().block_on(async {
        // a commit of 3 MiB on main, a few KiB on the wire
        let push_of = |old: &str| {
            let mut body =
                format!("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nparent {old}\n\n")
                    .into_bytes();
            body.resize(3 << 20, b'a');
            let (id, pack) = commit_pack(&body);
            let mut push = pkt(format!(
                "{old} {id} refs/heads/main\0report-status object-format=sha1 agent=crafted\n"
            )
            .as_bytes());
            push.extend_from_slice(b"0000");
            push.extend_from_slice(&pack);
            (id, push)
        };
        // a 2 MiB budget: refused busy, nothing decided, nothing applied
        let gate = Gate::allow_all();
        let rig = Rig::start_with(&[], Some(gate.clone()), |c| {
            c.max_buffered = 2 << 20;
        })
        .await;
        let old = rig.origin_ref("refs/heads/main").await.unwrap();
        let (_, push) = push_of(&old);
        let (status, answer) = post_push(&rig, push, &[]).await;
        assert_eq!(status, 503, "{}", String::from_utf8_lossy(&answer));
        assert!(
            String::from_utf8_lossy(&answer).contains("relay_busy"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        assert_eq!(gate.decided(), vec![]);
        assert_eq!(
            rig.origin_ref("refs/heads/main").await.as_deref(),
            Some(old.as_str())
        );
        assert_eq!(
            rig.relay.buffered_bytes(),
            0,
            "released when the push ended"
        );
        // positive control: an 8 MiB budget holds the same push, which is
        // decided and lands, its share released afterwards
        let gate = Gate::allow_all();
        let rig = Rig::start_with(&[], Some(gate.clone()), |c| {
            c.max_buffered = 8 << 20;
        })
        .await;
        let old = rig.origin_ref("refs/heads/main").await.unwrap();
        let (id, push) = push_of(&old);
        let (status, answer) = post_push(&rig, push, &[]).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
        assert_eq!(
            gate.decided(),
            vec![("git.push".into(), "refs/heads/main".into(), true)]
        );
        assert_eq!(
            rig.origin_ref("refs/heads/main").await.as_deref(),
            Some(id.as_str())
        );
        assert!(
            rig.relay.peak_buffered_bytes() > 3 << 20,
            "the kept commit was charged: {}",
            rig.relay.peak_buffered_bytes()
        );
        assert_eq!(
            rig.relay.buffered_bytes(),
            0,
            "released when the push ended"
        );
    });
}

/// A gate that allows every action once the test says so; it tells the
/// test when it is asked and records what it is told executed.
#[derive(Debug, Default)]
struct HeldGate {
    asked: Arc<tokio::sync::Notify>,
    go: Arc<tokio::sync::Notify>,
    executed: Mutex<Vec<String>>,
}

impl RelayGate for HeldGate {
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
        self.asked.notify_one();
        let go = self.go.clone();
        Box::pin(async move {
            go.notified().await;
            OutwardAnswer {
                ticket: 1,
                decision: AskAnswer::Allow,
                policy: AskAnswer::Ask,
                approval: None,
                rule: None,
                reason: "approved".into(),
            }
        })
    }

    fn outward_executed(&self, _: &str, _: u64, a: &OutwardAction, r: &OutwardResult) {
        self.executed.lock().unwrap().push(format!(
            "{} {}",
            a.kind,
            r.detail.get("result").cloned().unwrap_or_default()
        ));
    }
}

#[test]
fn a_push_whose_origin_went_away_before_its_trailer_is_not_recorded_executed() {
    multi().block_on(async {
        for origin_goes in [true, false] {
            let gate = Arc::new(HeldGate::default());
            let mut rig =
                Rig::start_gated(&[], Some(gate.clone() as Arc<dyn RelayGate>), |_| {}).await;
            let old = rig.origin_ref("refs/heads/main").await.unwrap();
            let body =
                format!("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nparent {old}\n\nx\n")
                    .into_bytes();
            let (id, pack) = commit_pack(&body);
            let mut push = pkt(format!(
                "{old} {id} refs/heads/main\0report-status object-format=sha1 agent=crafted\n"
            )
            .as_bytes());
            push.extend_from_slice(b"0000");
            push.extend_from_slice(&pack);
            let asked = gate.asked.clone();
            let go = gate.go.clone();
            let client = {
                let sock = rig.sock.clone();
                let basic = rig.basic();
                tokio::spawn(async move {
                    let shim = PushTo { sock, basic };
                    shim.post(push).await
                })
            };
            tokio::time::timeout(Duration::from_secs(60), asked.notified())
                .await
                .unwrap();
            if origin_goes {
                // the origin goes away while the host is asked: its
                // connections are cut, so the trailer never reaches it
                let fresh = tokio::task::spawn_blocking(|| GitOrigin::start().unwrap())
                    .await
                    .unwrap();
                let gone = std::mem::replace(&mut rig.origin, fresh);
                tokio::task::spawn_blocking(move || drop(gone))
                    .await
                    .unwrap();
            }
            go.notify_one();
            let status = tokio::time::timeout(Duration::from_secs(60), client)
                .await
                .unwrap()
                .unwrap();
            for _ in 0..100 {
                if !gate.executed.lock().unwrap().is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let executed = gate.executed.lock().unwrap().clone();
            if origin_goes {
                assert_ne!(
                    status,
                    Some(StatusCode::OK),
                    "the worker is not told it landed"
                );
                assert_eq!(executed, Vec::<String>::new(), "nothing was applied");
            } else {
                // positive control: the same push, origin there, lands and
                // is recorded executed
                assert_eq!(status, Some(StatusCode::OK));
                assert_eq!(executed, vec!["git.push ok".to_owned()]);
            }
        }
    });
}

/// Where a push is posted (a rig's socket and placeholder), usable from a
/// spawned task.
struct PushTo {
    sock: PathBuf,
    basic: String,
}

impl PushTo {
    async fn post(&self, body: Vec<u8>) -> Option<StatusCode> {
        let stream = UnixStream::connect(&self.sock).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = Request::builder()
            .method("POST")
            .uri("/acme/app.git/git-receive-pack")
            .header("host", "localhost")
            .header("authorization", &self.basic)
            .header("content-type", "application/x-git-receive-pack-request")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = sender.send_request(req).await.ok()?;
        let status = resp.status();
        resp.into_body().collect().await.ok()?;
        Some(status)
    }
}

#[test]
fn malformed_and_encoded_pushes_reach_nothing() {
    multi().block_on(async {
        let gate = Gate::allow_all();
        let rig = Rig::start(&[], Some(gate.clone())).await;
        let old = rig.origin_ref("refs/heads/main").await.unwrap();
        let zero = "0".repeat(40);
        // a bad pkt-line length
        let (status, body) = post_push(&rig, b"zzzz garbage".to_vec(), &[]).await;
        assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
        assert!(String::from_utf8_lossy(&body).contains("malformed_push"));
        // a head, then a pack that is not one
        let mut bad = pkt(format!("{zero} {old} refs/heads/new\0report-status\n").as_bytes());
        bad.extend_from_slice(b"0000");
        bad.extend_from_slice(b"PACK\0\0\0\x02\0\0\0\x01garbage that is not zlib at all.....");
        let (status, _) = post_push(&rig, bad, &[]).await;
        assert_eq!(status, 400);
        assert_eq!(rig.origin_ref("refs/heads/new").await, None);
        // a content coding
        let mut head = pkt(format!("{zero} {old} refs/heads/new\0report-status\n").as_bytes());
        head.extend_from_slice(b"0000");
        let (status, _) = post_push(&rig, head, &[("content-encoding", "gzip")]).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert!(gate.decided().is_empty(), "{:?}", gate.calls());
        assert_eq!(rig.origin_ref("refs/heads/new").await, None);
        let records = rig.records(3).await;
        let reasons: Vec<_> = records.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(
            reasons,
            ["malformed_push", "malformed_push", "encoded_request"]
        );
    });
}

#[test]
fn without_a_gate_reads_pass_and_every_push_is_refused() {
    multi().block_on(async {
        let rig = Rig::start(&[], None).await;
        let work = rig.clone_repo("work").await;
        let before = rig.origin_ref("refs/heads/main").await.unwrap();
        commit(&rig, &work, "a.txt", b"a\n").await;
        let out = rig
            .git(&work, &["push", "origin", "HEAD:refs/heads/main"])
            .await;
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("refused by palisade:"),
            "{}",
            stderr(&out)
        );
        assert_eq!(
            rig.origin_ref("refs/heads/main").await.as_deref(),
            Some(before.as_str())
        );
    });
}

#[test]
fn a_large_push_streams_through_a_small_buffer() {
    multi().block_on(async {
        let gate = Gate::allow_all();
        let rig = Rig::start(&[], Some(gate.clone())).await;
        let work = rig.clone_repo("work").await;
        // 20 MiB that do not compress
        let mut blob = vec![0u8; 20 << 20];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for chunk in blob.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = chunk.len();
            chunk.copy_from_slice(&x.to_le_bytes()[..n]);
        }
        let tip = commit(&rig, &work, "big.bin", &blob).await;
        drop(blob);
        let out = rig
            .git(&work, &["push", "origin", "HEAD:refs/heads/main"])
            .await;
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            rig.origin_ref("refs/heads/main").await.as_deref(),
            Some(tip.as_str())
        );
        let push = rig
            .origin
            .seen()
            .into_iter()
            .rfind(|r| r.path.ends_with("/git-receive-pack") && r.body_bytes > 0)
            .unwrap();
        assert!(push.body_bytes > 20 << 20, "{push:?}");
        assert!(push.body_complete && push.body_ended, "{push:?}");
        let peak = rig.relay.peak_buffered_bytes();
        assert!(peak > 0, "the push went through the relay's budget");
        assert!(
            peak < 1 << 20,
            "a 20 MiB push held at most {peak} bytes at once"
        );
        assert_eq!(rig.relay.buffered_bytes(), 0);
    });
}

#[test]
fn from_policy_maps_kind_git_and_repos() {
    let text = |extra: &str| {
        format!(
            "[[egress.relay]]\nname = \"github-git\"\nkind = \"git\"\norigin = \"https://github.com\"\ncredential = {{ header = \"authorization\", from_env = \"GH\", username = \"x-access-token\" }}\n{extra}"
        )
    };
    let policy = |t: &str| {
        palisade_schema::host_policy::parse("palisade.toml", t)
            .unwrap()
            .into_value()
    };
    let p = policy(&text("repos = [\"acme/*\"]\n"));
    let c = RelayConfig::from_policy(&p.egress.relays[0], Secret::new(real_token())).unwrap();
    let git = c.git.as_ref().expect("a git relay");
    assert!(git.serves("acme/app"));
    assert!(!git.serves("evil/app"), "repos is applied");
    assert!(c.routes.is_empty(), "routes are implicit");
    assert_eq!(c.credential.username(), Some("x-access-token"));
    // without repos: every repository
    let p = policy(&text(""));
    let c = RelayConfig::from_policy(&p.egress.relays[0], Secret::new(real_token())).unwrap();
    assert!(c.git.as_ref().unwrap().serves("anyone/anything"));
    // an HTTP relay is not a git relay (positive control of the mapping)
    let http = "[[egress.relay]]\nname = \"api\"\norigin = \"https://api.example.com\"\nroutes = [\"POST /v1\"]\ncredential = { header = \"x-api-key\", from_env = \"K\" }\n";
    let p = policy(http);
    let c = RelayConfig::from_policy(&p.egress.relays[0], Secret::new(real_token())).unwrap();
    assert!(c.git.is_none());
    // `repos` given to an HTTP relay by a caller that built the policy by
    // hand is refused, never ignored
    let mut relay = p.egress.relays[0].clone();
    relay.repos = vec![TargetGlob::parse("acme/*").unwrap()];
    assert!(RelayConfig::from_policy(&relay, Secret::new(real_token())).is_err());
}
