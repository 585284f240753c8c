//! A Rust orchestrator built on palisade's public API, end to end.
//!
//! This is what an embedder writes around the palisade crates, one function
//! per step, in the order an orchestrator runs them:
//!
//! 1. [`load`]: parse a workflow and a host policy (`palisade-schema`);
//! 2. [`admit_event`]: decide whether an incoming Slack mention starts the
//!    trigger (`palisade-policy::admission`);
//! 3. [`grant_step`]: plan the run and derive and translate the exact tool
//!    grant of one step (`palisade-policy::plan`);
//! 4. [`decide`]: egress, outward-action and routing decisions
//!    (`palisade-policy`);
//! 5. [`shared_taint`]: one taint session shared by tokio tasks
//!    (`palisade-taint`);
//! 6. [`journal`]: write a sealed journal, verify it, and rebuild the taint
//!    session from it (`palisade-evidence`);
//! 7. [`sandbox`]: spawn workers in the sandbox with piped stdout, a wall
//!    limit and a signal, and commit what the worker wrote through the
//!    commit filter (`palisade-isolate`; needs root, skipped otherwise).
//!
//! It prints a short summary and exits non-zero on any unexpected result,
//! so `cargo xtask ci` runs it as a test of the public API.
//!
//! Every step uses the same library calls `palisade` itself makes (the
//! `[worker]` section through `Profile::resolve` and
//! `Sandbox::apply_worker`, the journal through `Verifier`), so an
//! orchestrator and the CLI cannot drift apart.
//! `cargo run -p palisade-example-orchestrator` runs it.

#![allow(clippy::print_stdout, reason = "an example program prints its summary")]

use std::error::Error;
use std::io::{BufRead as _, BufReader, Read as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use palisade_evidence::{
    Body, Entry, FailureKind, JournalKey, JournalState, JournalWriter, Kind, Timestamp, Verifier,
    WriterOptions, verify,
};
use palisade_isolate::stage::{CommitEvent, CommitFilter, FilterVerdict};
use palisade_isolate::{
    Command, DEFAULT_WORKER_UID, Exit, Profile, Sandbox, SandboxChild, Signal, Stdio,
};
use palisade_policy::admission::{self, Admission, TriggerEvent};
use palisade_policy::capability::CapabilityRegistry;
use palisade_policy::egress::ConnectRequest;
use palisade_policy::grant::GrantConfig;
use palisade_policy::outward::OutwardRequest;
use palisade_policy::plan::{self, PlanInput, StepStatus};
use palisade_policy::verdict::{Decision, Reason};
use palisade_schema::HubConfig;
use palisade_schema::host_policy::{self, HostPolicy};
use palisade_taint::{EVIDENCE_KIND, Event, Record, Rules, Session};

/// The workflow the example runs: the Hub security guide's guarded request.
const WORKFLOW: (&str, &str) = (
    "examples/guarded-request.yml",
    include_str!("../../guarded-request.yml"),
);
/// The host policy of the example's workers.
const POLICY: (&str, &str) = (
    "examples/orchestrator/palisade.toml",
    include_str!("../palisade.toml"),
);

/// Every step's error: a message saying what was unexpected.
type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// Fails with `msg` unless `ok`.
fn ensure(ok: bool, msg: impl Into<String>) -> Result<()> {
    if ok { Ok(()) } else { Err(msg.into().into()) }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("orchestrator: every step gave the expected result");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("orchestrator: unexpected result: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let (config, policy) = load()?;
    let prompt = admit_event(&config)?;
    grant_step(&config, &prompt)?;
    decide(&policy)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (session, records) = runtime.block_on(shared_taint(&policy))?;
    journal(&policy, &session, &records)?;
    let sandboxed = runtime.block_on(sandbox(&policy));
    // A wait that timed out still occupies a blocking thread: do not let
    // the runtime's drop wait for it.
    runtime.shutdown_timeout(Duration::from_secs(1));
    sandboxed
}

/// Milliseconds since the Unix epoch: the crates take the time from their
/// caller, they never read the clock.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Step 1: the workflow and the host policy, parsed strictly; any error is
/// fatal and printed rustc-style, with its file, line, column and the source
/// line under a caret.
fn load() -> Result<(HubConfig, HostPolicy)> {
    let config = palisade_schema::parse_workflow(WORKFLOW.0, WORKFLOW.1)
        .map_err(|diags| render(&diags, WORKFLOW.1))?
        .into_value();
    let (policy, warnings) = host_policy::parse(POLICY.0, POLICY.1)
        .map_err(|diags| render(&diags, POLICY.1))?
        .into_parts();
    ensure(
        warnings.is_empty(),
        format!("policy warnings: {}", render(&warnings, POLICY.1)),
    )?;
    println!(
        "load: {} trigger(s) in {}, policy {} (profile {})",
        config.triggers.len(),
        WORKFLOW.0,
        POLICY.0,
        policy.worker.profile_name()
    );
    Ok((config, policy))
}

/// Findings rendered as `palisade check` prints them, one after the other.
fn render<'a>(
    diags: impl IntoIterator<Item = &'a palisade_schema::Diagnostic>,
    source: &str,
) -> String {
    let renderer = palisade_schema::render::Renderer::new();
    diags
        .into_iter()
        .map(|d| renderer.render(d, Some(source)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The Slack mention the example receives.
fn slack_mention(user: &str) -> TriggerEvent {
    // The event may gain fields, so it starts from its default.
    let mut event = TriggerEvent::default();
    event.name = "slack.mention".into();
    event.actor_id = Some(user.into());
    event.workspace = Some("T01234567".into());
    event.channel = Some("C01234567".into());
    event.text = "<@U0BOT> what does the retry loop in fetch.rs do?".into();
    event.bot_mentions = vec!["<@U0BOT>".into()];
    event
}

/// Step 2: admission. The allowed author's mention starts the trigger and
/// yields the prompt; the same mention from anyone else does not.
fn admit_event(config: &HubConfig) -> Result<String> {
    let trigger = plan::find_trigger(config, "guarded-request")?;
    let admitted = admission::admit(
        &trigger.on,
        trigger.filters.as_ref(),
        &slack_mention("U01234567"),
    );
    let Admission::Admitted { prompt } = admitted else {
        return Err(format!("the allowed author was not admitted: {admitted:?}").into());
    };
    let stranger = admission::admit(
        &trigger.on,
        trigger.filters.as_ref(),
        &slack_mention("U0STRANGER"),
    );
    let Admission::Rejected(rejection) = stranger else {
        return Err("an author outside from_users was admitted".into());
    };
    ensure(
        rejection.code == "user_not_allowed",
        format!("stranger rejected as {}", rejection.code),
    )?;
    println!(
        "admit: allowed author admitted, stranger rejected ({})",
        rejection.code
    );
    Ok(prompt)
}

/// Step 3: the run plan once the classifier answered `answer`: the `answer`
/// step runs with exactly `finish_execution` and `reply`, translated into
/// Codex options, with the digest the daemon must echo; `implement` is
/// skipped and gets no grant.
fn grant_step(config: &HubConfig, prompt: &str) -> Result<()> {
    ensure(!prompt.is_empty(), "the admitted prompt is empty")?;
    let event = slack_mention("U01234567");
    let outputs = [(
        "classify".to_owned(),
        serde_json::json!({ "kind": "answer" }),
    )];
    let run = plan::plan(
        &PlanInput {
            config,
            trigger: "guarded-request",
            event: &event,
            outputs: &outputs,
            context: None,
        },
        &CapabilityRegistry::default(),
        &GrantConfig::default(),
    )?;
    let status = |id: &str| run.steps.iter().find(|s| s.id == id).map(|s| &s.status);
    let Some(StepStatus::Run(step)) = status("answer") else {
        return Err(format!("step `answer` does not run: {:?}", status("answer")).into());
    };
    ensure(
        matches!(status("implement"), Some(StepStatus::Skipped)),
        format!("step `implement` is not skipped: {:?}", status("implement")),
    )?;
    let grant = step.grant.as_ref().map_err(|e| e.to_string())?;
    let tools: Vec<&str> = grant.derived.policy.tool_names().collect();
    ensure(
        tools == ["finish_execution", "reply"],
        format!("answer's tools: {tools:?}"),
    )?;
    let options = grant
        .provider_options
        .as_ref()
        .ok_or("no translated Codex options")?;
    ensure(
        options.get("mcp_servers").is_some(),
        format!("the Codex options carry no hub MCP server: {options}"),
    )?;
    println!(
        "grant: step answer runs with {tools:?} on {}, digest {}",
        step.agent.agent.provider, grant.digest
    );
    Ok(())
}

/// Step 4: host-policy decisions for a clean session.
fn decide(policy: &HostPolicy) -> Result<()> {
    let clean = Session::new();
    // The one egress decision API: the proxy's `Decider` in
    // palisade-egress returns this same `Verdict`, with a typed reason.
    let egress = |host: &str| {
        palisade_policy::egress::decide(policy, &clean, &ConnectRequest { host, port: 443 })
    };
    for (host, want, reason) in [
        ("api.github.com", Decision::Allow, Reason::Allowed),
        ("crates.io", Decision::Allow, Reason::Allowed),
        (
            "gist.githubusercontent.com",
            Decision::Deny,
            Reason::HostDenied,
        ),
        ("example.org", Decision::Deny, Reason::HostNotAllowed),
    ] {
        let v = egress(host);
        ensure(
            v.decision == want && v.reason == reason,
            format!("egress {host}:443: {} ({})", v.decision, v.reason),
        )?;
    }
    // A verdict serializes with its stable reason code, for an
    // orchestrator's own logs or API.
    let json = serde_json::to_value(egress("gist.githubusercontent.com"))?;
    ensure(
        json.get("decision").and_then(serde_json::Value::as_str) == Some("deny")
            && json.get("reason").and_then(serde_json::Value::as_str) == Some("host_denied"),
        format!("a serialized verdict: {json}"),
    )?;
    let outward = |kind: &str, target: &str| {
        palisade_policy::outward::decide(policy, &clean, &OutwardRequest { kind, target })
    };
    for (kind, target, want) in [
        (
            "git.push",
            "github.com/acme/app:refs/heads/agent/fix",
            Decision::Allow,
        ),
        (
            "git.push",
            "github.com/acme/app:refs/heads/main",
            Decision::Ask,
        ),
        ("payment", "acme-billing", Decision::Deny),
    ] {
        let v = outward(kind, target);
        ensure(
            v.decision == want,
            format!("outward {kind} {target}: {} ({})", v.decision, v.reason),
        )?;
    }
    for (provider, want) in [("anthropic", Decision::Allow), ("openai", Decision::Deny)] {
        let v = palisade_policy::route::decide_route(policy, "private/notes.md", provider);
        ensure(
            v.decision == want,
            format!("route private/notes.md to {provider}: {}", v.decision),
        )?;
    }
    println!("decide: egress, outward and routing verdicts as the policy says");
    Ok(())
}

/// Step 5: one taint session shared by concurrent tokio tasks. A worker's
/// read of an untrusted file, reported by one task, narrows the egress of
/// every later decision in the others.
///
/// Returns the session and the records to journal, in the order applied.
async fn shared_taint(policy: &HostPolicy) -> Result<(Session, Vec<Record>)> {
    let rules = Arc::new(Rules::new(policy, &[])?);
    // The decision and the event it causes are one step under this lock, so
    // concurrent tasks are decided one after the other. A std mutex: no task
    // holds it across an await.
    let shared = Arc::new(Mutex::new((Session::new(), Vec::<Record>::new())));
    let apply = |shared: &Mutex<(Session, Vec<Record>)>, rules: &Rules, event: Event| {
        let at_ms = now_ms();
        let mut guard = shared.lock().map_err(|_| "taint session lock poisoned")?;
        let (session, records) = &mut *guard;
        let effects = session.apply(rules, at_ms, &event);
        records.push(Record::new(at_ms, event));
        Ok::<_, &str>(effects)
    };

    // A task that reports the worker's file reads.
    let reads = {
        let (shared, rules) = (Arc::clone(&shared), Arc::clone(&rules));
        tokio::spawn(async move {
            let mut tainted = false;
            for path in ["src/fetch.rs", "inbox/issue-1234.eml"] {
                let fx = apply(
                    &shared,
                    &rules,
                    Event::Read {
                        path: path.to_owned(),
                    },
                )?;
                tainted |= fx.newly_tainted;
            }
            Ok::<_, &str>(tainted)
        })
    };
    ensure(
        reads.await?.map_err(str::to_owned)?,
        "the inbox read did not taint",
    )?;

    // Tasks that decide connections, as a proxy would, after the report.
    let mut connects = Vec::new();
    for host in ["crates.io", "api.github.com"] {
        let (shared, rules, policy) = (Arc::clone(&shared), Arc::clone(&rules), policy.clone());
        connects.push(tokio::spawn(async move {
            let mut guard = shared.lock().map_err(|_| "taint session lock poisoned")?;
            let (session, records) = &mut *guard;
            let request = ConnectRequest { host, port: 443 };
            let verdict = palisade_policy::egress::decide(&policy, session, &request);
            if verdict.decision == Decision::Allow {
                let at_ms = now_ms();
                let event = Event::Connect {
                    host: host.to_owned(),
                    port: 443,
                    relay: false,
                };
                let _ = session.apply(&rules, at_ms, &event);
                records.push(Record::new(at_ms, event));
            }
            Ok::<_, &str>((host, verdict.decision))
        }));
    }
    for task in connects {
        let (host, decision) = task.await?.map_err(str::to_owned)?;
        let want = if host == "api.github.com" {
            Decision::Allow // taint.egress_allow keeps it open
        } else {
            Decision::Deny // tainted: no new hosts
        };
        ensure(
            decision == want,
            format!("tainted egress to {host}: {decision}"),
        )?;
    }
    let (session, records) = Arc::try_unwrap(shared)
        .map_err(|_| "a task still holds the session")?
        .into_inner()
        .map_err(|_| "taint session lock poisoned")?;
    ensure(session.is_tainted(), "the session is not tainted")?;
    println!(
        "taint: tainted by {}; crates.io now denied, api.github.com allowed",
        session.first_source().map_or("?", |s| s.source.as_str())
    );
    Ok((session, records))
}

/// Step 6: the session's events in a sealed journal; the journal verifies
/// as closed, a flipped byte does not, and the taint session rebuilt from
/// the verified records equals the live one.
fn journal(policy: &HostPolicy, live: &Session, records: &[Record]) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("run.jsonl");
    let key = JournalKey::generate()?;
    let writer =
        JournalWriter::create(&path, &key, &WriterOptions::default(), Timestamp(now_ms()))?;
    let kind = Kind::custom(EVIDENCE_KIND)?;
    for record in records {
        let body = Body::from_serialize(record)?;
        writer.append(&Entry::new(
            Timestamp(record.at_ms),
            "session-1",
            kind.clone(),
            body,
        ))?;
    }
    let anchor = writer.close(Timestamp(now_ms()))?;
    let bytes = std::fs::read(&path)?;
    let report = verify(&bytes, &key, Some(&anchor));
    ensure(
        report.state() == JournalState::Closed,
        format!(
            "the journal does not verify as closed: {:?}",
            report.failure
        ),
    )?;

    // Rewriting what the worker read, as an attacker on the host would, is
    // caught: the record's MAC no longer matches.
    let needle = b"inbox/issue-1234.eml";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .ok_or("the inbox read is not in the journal")?;
    let mut tampered = bytes.clone();
    tampered.splice(
        at..at + needle.len(),
        b"src/harmless-1234.rs".iter().copied(),
    );
    let report_tampered = verify(&tampered, &key, Some(&anchor));
    ensure(
        report_tampered.failure_kind() == Some(FailureKind::MacMismatch),
        format!("a tampered journal: {:?}", report_tampered.failure),
    )?;

    // The taint session rebuilt from the journal, from entries the
    // verifier hands out only once their MAC checked: nothing is re-read or
    // re-parsed after the check.
    let mut verifier = Verifier::new(bytes.as_slice(), &key, Some(anchor));
    let entries = verifier.by_ref().collect::<std::io::Result<Vec<_>>>()?;
    ensure(
        verifier.finish().state() == JournalState::Closed,
        "the streamed verification disagrees",
    )?;
    let rules = Rules::new(policy, &[])?;
    let rebuilt = Session::rebuild_from(&rules, &entries)?;
    ensure(
        &rebuilt == live,
        "the session rebuilt from the journal differs",
    )?;
    println!(
        "journal: {} records verify as closed, a rewritten record fails (mac_mismatch), taint rebuilt",
        report.records
    );
    Ok(())
}

/// Step 7: the policy's worker in the sandbox, three times: piped stdout,
/// a wall limit, and a signal. Skipped, saying so, when not root (CI runs as
/// root; the sandbox needs user namespaces, Landlock and seccomp).
async fn sandbox(policy: &HostPolicy) -> Result<()> {
    // `/proc/self` belongs to the process's effective uid.
    if std::fs::metadata("/proc/self")?.uid() != 0 {
        println!("sandbox: skipped (not root; CI runs this step as root)");
        return Ok(());
    }
    let workspace = tempfile::tempdir()?;
    // As root the worker runs as the dedicated `DEFAULT_WORKER_UID`: its
    // workspace is its own, or it could write nothing there (staged or not,
    // the sandbox keeps the host's owners and modes).
    std::os::unix::fs::chown(
        workspace.path(),
        Some(DEFAULT_WORKER_UID),
        Some(DEFAULT_WORKER_UID),
    )?;
    // Each launch stages the writable roots in a session directory of its
    // own, outside every root; nothing the worker writes reaches the
    // workspace until it is committed.
    let stages = tempfile::tempdir()?;
    let mut base = worker_sandbox(policy, workspace.path())?;

    // 1. Piped stdout, and the worker's writes committed through the filter.
    base.stage_in(stages.path(), "example-1");
    let mut child = base.spawn(
        Command::new([
            "/bin/sh",
            "-c",
            "echo hello from $CI; pwd; echo done > result.txt; echo '{}' > .mcp.json",
        ])
        .stdout(Stdio::piped()),
    )?;
    let report = child.report().clone();
    let mut out = String::new();
    child
        .take_stdout()
        .ok_or("stdout is piped")?
        .read_to_string(&mut out)?;
    let exit = wait(&mut child).await?;
    let cwd = workspace.path().display().to_string();
    ensure(
        exit == Exit::Exited(0) && out == format!("hello from 1\n{cwd}\n"),
        format!("worker ended {exit:?} with {out:?}"),
    )?;
    commit(&mut child, policy, workspace.path())?;
    println!(
        "sandbox: profile {}, plan {}, worker uid {}, printed {:?}",
        report.profile,
        report.mount_plan_digest,
        report.worker_uid,
        out.lines().next().unwrap_or_default()
    );

    // 2. A wall limit, lowered from the policy's for this one run: its kill
    // is told apart from any other SIGKILL.
    let mut limited = base.clone();
    limited.limit_wall(Duration::from_secs(1))?;
    limited.stage_in(stages.path(), "example-2");
    let mut child = limited.spawn(Command::new(["/bin/sleep", "60"]))?;
    let exit = wait(&mut child).await?;
    ensure(
        exit == Exit::WallLimit,
        format!("wall-limited worker ended {exit:?}"),
    )?;
    println!(
        "sandbox: wall limit of 1s stopped `sleep 60` ({exit:?}, exit code {})",
        exit.code()
    );

    // 3. A typed signal, once the worker is known to run.
    base.stage_in(stages.path(), "example-3");
    let mut child = base.spawn(
        Command::new(["/bin/sh", "-c", "echo ready; exec /bin/sleep 60"]).stdout(Stdio::piped()),
    )?;
    let mut line = String::new();
    BufReader::new(child.take_stdout().ok_or("stdout is piped")?).read_line(&mut line)?;
    ensure(line == "ready\n", format!("worker said {line:?}"))?;
    child.kill(Signal::TERM)?;
    let exit = wait(&mut child).await?;
    ensure(
        exit == Exit::Signaled(Signal::TERM),
        format!("signalled worker ended {exit:?}"),
    )?;
    println!("sandbox: SIGTERM ended the worker ({exit:?})");
    Ok(())
}

/// Commit what the ended worker left in its stage: the change set, the
/// commit filter of the policy's `[worker.commit]` (which can only add to
/// the built-in list), and the commit, recording each outcome (an
/// orchestrator would journal these). The ordinary file lands; the agent
/// config the worker planted goes to the quarantine instead.
fn commit(child: &mut SandboxChild, policy: &HostPolicy, workspace: &Path) -> Result<()> {
    let stage = child.take_stage().ok_or("the launch was staged")?;
    let set = stage.changes()?;
    let verdicts = CommitFilter::from_worker(&policy.worker)?.check(&set);
    let mut refused = Vec::new();
    let report = stage.commit(&set, &verdicts, None, &mut |event| {
        if let CommitEvent::Refused {
            change, refusal, ..
        } = event
        {
            refused.push(format!("{} ({})", change.path.display(), refusal.rule));
        }
        Ok(())
    })?;
    ensure(
        verdicts
            .iter()
            .filter(|v| **v == FilterVerdict::Commit)
            .count()
            == report.applied,
        format!("the commit applied {report:?} of {verdicts:?}"),
    )?;
    ensure(
        std::fs::read_to_string(workspace.join("result.txt"))? == "done\n"
            && !workspace.join(".mcp.json").exists()
            && refused == [".mcp.json (tool_config)"],
        format!("committed {report:?}, refused {refused:?}"),
    )?;
    println!(
        "sandbox: committed {} change(s), quarantined {}",
        report.applied,
        refused.join(", ")
    );
    stage.remove()?;
    Ok(())
}

/// How the worker ended, awaited on its pidfd (the `tokio` feature) within
/// a generous bound, so that a stuck worker fails the example instead of
/// hanging it; dropping the child on that error stops its sandbox without
/// blocking.
async fn wait(child: &mut SandboxChild) -> Result<Exit> {
    let exit = tokio::time::timeout(Duration::from_secs(120), child.wait_async())
        .await
        .map_err(|_| "the worker did not end within 120 s")??;
    Ok(exit)
}

/// The sandbox for the policy's `[worker]`: its profile, environment and
/// limits, plus the run's own workspace as the writable working directory.
fn worker_sandbox(policy: &HostPolicy, workspace: &Path) -> Result<Sandbox> {
    // The profile the policy names (built-in or `[profiles.<name>]`), and
    // every `[worker]` key applied by the library, the same calls
    // `palisade run` makes; a key the sandbox cannot honour is an error.
    let profile = Profile::resolve(policy, policy.worker.profile_name())?;
    let mut sb = Sandbox::new(profile);
    sb.writable(workspace);
    sb.apply_worker(&policy.worker)?;
    if policy.worker.cwd.is_none() {
        sb.cwd(workspace);
    }
    Ok(sb)
}
