//! Unit tests of the trigger lints on documents built from the model's
//! public fields: each lint fires on its example and stays silent on the
//! nearest safe form (the positive control).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
#![allow(clippy::indexing_slicing, reason = "tests")]

use serde_json::json;

use super::*;
use crate::expr::Template;
use crate::model::{Duration, Filters, GithubAuthority, Worktree};
use crate::trigger::{OutputGrant, Run, Target};

fn entry(event: &str, from_users: Option<&[&str]>) -> EventEntry {
    EventEntry {
        event: event.to_owned(),
        connection: None,
        filters: from_users.map(|u| Filters {
            from_users: Some(u.iter().map(|s| (*s).to_owned()).collect()),
            ..Filters::default()
        }),
        recurrence: None,
    }
}

fn agent(provider: &str, mode: Option<&str>, options: Option<Json>) -> Agent {
    Agent {
        provider: provider.to_owned(),
        model: None,
        mode: mode.map(str::to_owned),
        thinking_option_id: None,
        options,
    }
}

fn read_only() -> Agent {
    agent(
        "codex",
        Some("auto"),
        Some(json!({"approval_policy": "never", "sandbox_mode": "read-only"})),
    )
}

fn writer() -> Agent {
    agent(
        "codex",
        Some("auto"),
        Some(json!({"approval_policy": "never", "sandbox_mode": "workspace-write"})),
    )
}

/// A clean document: one Slack event from a named user, a read-only agent
/// in a worktree of one repository, a bounded reply.
fn clean() -> TriggerDocument {
    TriggerDocument {
        name: "t".to_owned(),
        enabled: true,
        on: vec![entry("slack.mention", Some(&["U01234567"]))],
        inputs: Vec::new(),
        max_runtime: None,
        run: Run {
            target: Target {
                daemon: "devbox".to_owned(),
                cwd: "/workspace/api".to_owned(),
                worktree: Some(Worktree::BranchOff {
                    new_branch: Template::parse("hub/${{ paseo.execution.id }}").unwrap(),
                    base: None,
                }),
            },
            agent: RunAgent::Inline(read_only()),
            continuation: Continuation::Conversation,
            title: None,
            prompt: Template::parse("Handle it").unwrap(),
            max_runtime: Duration::parse("2h").unwrap(),
            idle_timeout: Duration::parse("10m").unwrap(),
            startup_timeout: None,
            env: Vec::new(),
            github: None,
            output_schema: None,
            outputs: vec![OutputGrant {
                kind: "slack.reply".to_owned(),
                max: Some(1),
                required: None,
            }],
            auto_archive: true,
        },
    }
}

fn github(perms: &[(&str, GithubLevel)], repositories: bool) -> GithubAuthority {
    GithubAuthority {
        connection: "gh".to_owned(),
        repositories: repositories.then(|| vec!["acme/api".to_owned()]),
        permissions: Some(perms.iter().map(|(n, l)| ((*n).to_owned(), *l)).collect()),
        duration: None,
    }
}

fn run_at(doc: &TriggerDocument, release: Release) -> Vec<Diagnostic> {
    let root = crate::yaml::parse("t.yml", "{}").unwrap().into_value();
    let options = TriggerOptions::for_release(release);
    lint("t.yml", doc, &root, &options)
}

fn run(doc: &TriggerDocument) -> Vec<Diagnostic> {
    run_at(doc, Release::default())
}

fn with<'a>(found: &'a [Diagnostic], code: &str) -> Vec<&'a Diagnostic> {
    found.iter().filter(|d| d.code == code).collect()
}

fn codes(found: &[Diagnostic]) -> Vec<&'static str> {
    found.iter().map(|d| d.code).collect()
}

#[test]
fn the_clean_document_has_no_finding() {
    assert_eq!(codes(&run(&clean())), Vec::<&str>::new());
}

#[test]
fn every_code_is_listed_and_has_a_help() {
    // A document that trips most lints at once: each finding carries a help.
    let mut d = clean();
    d.on = vec![
        entry("slack.mention", Some(&["*"])),
        entry("manual.run", None),
        entry("future.thing", Some(&["a"])),
    ];
    d.run.agent = RunAgent::Inline(agent("gemini", None, None));
    d.run.github = Some(github(&[("contents", GithubLevel::Write)], true));
    d.run.outputs.clear();
    d.run.target.worktree = None;
    let found = run(&d);
    assert!(found.len() >= 8, "{found:?}");
    for f in &found {
        assert!(LINT_CODES.contains(&f.code), "{} not listed", f.code);
        assert!(f.help.as_deref().is_some_and(|h| !h.is_empty()), "{f:?}");
    }
}

#[test]
fn every_lint_code_can_be_relevelled() {
    // `palisade check --allow CODE` and suppression comments accept only
    // the codes of `LINT_WARNINGS` and `LINT_ERRORS`.
    let known =
        |c: &&str| crate::lints::LINT_WARNINGS.contains(c) || crate::lints::LINT_ERRORS.contains(c);
    let unknown: Vec<&str> = LINT_CODES.iter().copied().filter(|c| !known(c)).collect();
    assert!(unknown.is_empty(), "{unknown:?}");
    // Positive control: a schema error is in neither list.
    assert!(!known(&"unknown_key"));
    // The error lints are listed as errors (a wildcard Slack principal).
    let mut d = clean();
    d.on = vec![entry("slack.mention", Some(&["*"]))];
    let found = run(&d);
    let f = found
        .iter()
        .find(|f| f.code == WILDCARD_PRINCIPAL)
        .expect("wildcard_principal");
    assert!(f.is_error());
    assert!(crate::lints::LINT_ERRORS.contains(&f.code));
}

#[test]
fn every_lint_code_is_documented() {
    for code in LINT_CODES {
        assert!(
            crate::codes::summary(code).is_some(),
            "{code} not in codes::CODES"
        );
    }
}

#[test]
fn wildcard_principal_is_an_error_on_conversational_providers() {
    for event in [
        "slack.mention",
        "discord.mention",
        "github.issue_comment_created",
        "linear.comment_created",
    ] {
        let mut d = clean();
        d.on = vec![entry(event, Some(&["alice", "*"]))];
        let found = run(&d);
        let w = with(&found, WILDCARD_PRINCIPAL);
        assert_eq!(w.len(), 1, "{event}: {found:?}");
        assert!(w[0].is_error(), "{event}");
        assert_eq!(
            w[0].path.to_string(),
            format!("[\"on\"][{event:?}].filters.from_users[1]").replace("[\"on\"]", ".on")
        );
        // Positive control: named users only.
        d.on = vec![entry(event, Some(&["alice"]))];
        assert!(with(&run(&d), WILDCARD_PRINCIPAL).is_empty(), "{event}");
    }
    // An explicit manual wildcard is the operator's choice: a warning.
    let mut d = clean();
    d.on = vec![entry("manual.run", Some(&["*"]))];
    let found = run(&d);
    let w = with(&found, WILDCARD_PRINCIPAL);
    assert_eq!(w.len(), 1);
    assert!(!w[0].is_error());
}

#[test]
fn implicit_manual_wildcard_fires_without_from_users() {
    let mut d = clean();
    d.on = vec![entry("manual.run", None)];
    let found = run(&d);
    assert_eq!(with(&found, IMPLICIT_MANUAL_WILDCARD).len(), 1, "{found:?}");
    assert!(!found[0].is_error());
    // Positive controls: an explicit list; an empty list (rejects everyone).
    d.on = vec![entry("manual.run", Some(&["automation"]))];
    assert!(with(&run(&d), IMPLICIT_MANUAL_WILDCARD).is_empty());
    d.on = vec![entry("manual.run", Some(&[]))];
    assert!(with(&run(&d), IMPLICIT_MANUAL_WILDCARD).is_empty());
}

#[test]
fn unbounded_reply_fires_on_the_automatic_reply() {
    let mut d = clean();
    d.run.outputs.clear();
    let found = run(&d);
    let r = with(&found, UNBOUNDED_REPLY);
    assert_eq!(r.len(), 1, "{found:?}");
    assert!(!r[0].message.contains("can edit"), "{}", r[0].message);
    assert!(
        r[0].help
            .as_deref()
            .unwrap()
            .contains("slack.reply: {max: 1}")
    );
    // The message says so when the agent can write.
    d.run.agent = RunAgent::Inline(writer());
    let found = run(&d);
    assert!(
        with(&found, UNBOUNDED_REPLY)[0]
            .message
            .contains("can edit files")
    );
    // An authored grant of another type does not bound the reply.
    d.run.outputs = vec![OutputGrant {
        kind: "github.reply".to_owned(),
        max: Some(1),
        required: None,
    }];
    assert_eq!(with(&run(&d), UNBOUNDED_REPLY).len(), 1);
    // Positive controls: the authored reply; manual; a push (no item).
    assert!(with(&run(&clean()), UNBOUNDED_REPLY).is_empty());
    let mut m = clean();
    m.run.outputs.clear();
    m.on = vec![entry("manual.run", Some(&["a"]))];
    assert!(with(&run(&m), UNBOUNDED_REPLY).is_empty());
    m.on = vec![entry("github.push", Some(&["a"]))];
    assert!(with(&run(&m), UNBOUNDED_REPLY).is_empty());
}

#[test]
fn full_access_mode_fires_on_external_events() {
    let cases = [
        (agent("codex", Some("full-access"), None), ".run.agent.mode"),
        (
            agent("claude", Some("bypassPermissions"), None),
            ".run.agent.mode",
        ),
        (
            agent(
                "codex",
                Some("auto"),
                Some(json!({"sandbox_mode": "danger-full-access"})),
            ),
            ".run.agent.options.sandbox_mode",
        ),
        (
            agent(
                "codex",
                Some("auto"),
                Some(json!({"approval_policy": "never"})),
            ),
            ".run.agent.options.approval_policy",
        ),
    ];
    for (a, path) in cases {
        let mut d = clean();
        d.run.agent = RunAgent::Inline(a.clone());
        let found = run(&d);
        let f = with(&found, FULL_ACCESS_MODE);
        assert_eq!(f.len(), 1, "{a:?}: {found:?}");
        assert_eq!(f[0].path.to_string(), path);
        assert!(!f[0].is_error(), "warn without a wildcard");
        // With a wildcard principal it is an error.
        d.on = vec![entry("slack.mention", Some(&["*"]))];
        assert!(with(&run(&d), FULL_ACCESS_MODE)[0].is_error());
        // Positive control: the same agent on a manual trigger.
        d.on = vec![entry("manual.run", Some(&["a"]))];
        assert!(with(&run(&d), FULL_ACCESS_MODE).is_empty(), "{a:?}");
    }
    // Codex options win over the mode.
    let mut d = clean();
    d.run.agent = RunAgent::Inline(agent(
        "codex",
        Some("full-access"),
        Some(json!({"sandbox_mode": "workspace-write"})),
    ));
    assert!(with(&run(&d), FULL_ACCESS_MODE).is_empty());
}

#[test]
fn external_network_access_fires_on_codex_network_access() {
    let mut d = clean();
    let net = json!({"sandbox_mode": "workspace-write", "sandbox_workspace_write": {"network_access": true}});
    d.run.agent = RunAgent::Inline(agent("codex", Some("auto"), Some(net)));
    let found = run(&d);
    let f = with(&found, EXTERNAL_NETWORK_ACCESS);
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(
        f[0].path.to_string(),
        ".run.agent.options.sandbox_workspace_write.network_access"
    );
    // Positive controls: network_access false; the same on manual.run.
    let mut m = d.clone();
    m.on = vec![entry("manual.run", Some(&["a"]))];
    assert!(with(&run(&m), EXTERNAL_NETWORK_ACCESS).is_empty());
    let off = json!({"sandbox_mode": "workspace-write", "sandbox_workspace_write": {"network_access": false}});
    d.run.agent = RunAgent::Inline(agent("codex", Some("auto"), Some(off)));
    assert!(with(&run(&d), EXTERNAL_NETWORK_ACCESS).is_empty());
}

#[test]
fn implicit_mode_fires_per_agent_choice() {
    let mut d = clean();
    d.run.agent = RunAgent::Select {
        select: Template::parse("${{ paseo.inputs.model }}").unwrap(),
        choices: vec![
            ("fast".to_owned(), read_only()),
            (
                "slow".to_owned(),
                agent("codex", None, Some(json!({"sandbox_mode": "read-only"}))),
            ),
        ],
    };
    let found = run(&d);
    let f = with(&found, IMPLICIT_MODE);
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(f[0].path.to_string(), ".run.agent.choices.slow");
    // Positive control: both choices with a mode.
    if let RunAgent::Select { choices, .. } = &mut d.run.agent {
        choices[1].1.mode = Some("read-only".to_owned());
    }
    assert!(with(&run(&d), IMPLICIT_MODE).is_empty());
}

#[test]
fn autonomous_linear_scope_fires_with_write_authority() {
    let mut d = clean();
    d.on = vec![entry("linear.issue_entered_scope", None)];
    d.run.outputs = vec![OutputGrant {
        kind: "linear.reply".to_owned(),
        max: Some(1),
        required: None,
    }];
    d.run.github = Some(github(&[("contents", GithubLevel::Write)], true));
    let found = run(&d);
    assert_eq!(with(&found, AUTONOMOUS_LINEAR_SCOPE).len(), 1, "{found:?}");
    // Full access instead of GitHub write fires too.
    d.run.github = None;
    d.run.agent = RunAgent::Inline(agent("codex", Some("full-access"), None));
    assert_eq!(with(&run(&d), AUTONOMOUS_LINEAR_SCOPE).len(), 1);
    // Positive control: read-only authority.
    d.run.agent = RunAgent::Inline(read_only());
    d.run.github = Some(github(&[("contents", GithubLevel::Read)], true));
    assert!(with(&run(&d), AUTONOMOUS_LINEAR_SCOPE).is_empty());
}

#[test]
fn write_authority_broad_principal_is_an_error() {
    let write = github(
        &[
            ("issues", GithubLevel::Read),
            ("contents", GithubLevel::Write),
        ],
        true,
    );
    for (e, users) in [
        ("slack.mention", Some(&["*"][..])),
        ("manual.run", None),
        ("manual.run", Some(&["*"][..])),
    ] {
        let mut d = clean();
        d.on = vec![entry(e, users)];
        d.run.github = Some(write.clone());
        let found = run(&d);
        let f = with(&found, WRITE_AUTHORITY_BROAD_PRINCIPAL);
        assert_eq!(f.len(), 1, "{e}: {found:?}");
        assert!(f[0].is_error());
        assert_eq!(f[0].path.to_string(), ".run.github.permissions.contents");
        // Positive control: named users.
        d.on = vec![entry(e, Some(&["alice"]))];
        assert!(
            with(&run(&d), WRITE_AUTHORITY_BROAD_PRINCIPAL).is_empty(),
            "{e}"
        );
    }
    let mut d = clean();
    d.on = vec![entry("schedule.tick", None)];
    d.run.github = Some(write.clone());
    assert_eq!(
        with(&run_at(&d, Release::Main), WRITE_AUTHORITY_BROAD_PRINCIPAL).len(),
        1
    );
    // No repositories on a GitHub event: the token follows the event.
    let mut d = clean();
    d.on = vec![entry("github.issue_comment_created", Some(&["alice"]))];
    d.run.github = Some(github(&[("contents", GithubLevel::Write)], false));
    let found = run(&d);
    let f = with(&found, WRITE_AUTHORITY_BROAD_PRINCIPAL);
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(f[0].path.to_string(), ".run.github");
    // Positive controls: listed repositories; read only.
    d.run.github = Some(github(&[("contents", GithubLevel::Write)], true));
    assert!(with(&run(&d), WRITE_AUTHORITY_BROAD_PRINCIPAL).is_empty());
    d.run.github = Some(github(&[("contents", GithubLevel::Read)], false));
    assert!(with(&run(&d), WRITE_AUTHORITY_BROAD_PRINCIPAL).is_empty());
}

#[test]
fn broad_cwd_fires_on_broad_directories_and_shared_checkouts() {
    for cwd in ["/", "/root", "/home", "/Users/alice", "/workspace"] {
        let mut d = clean();
        d.run.target.cwd = cwd.to_owned();
        let found = run(&d);
        let f = with(&found, BROAD_CWD);
        assert_eq!(f.len(), 1, "{cwd}: {found:?}");
        assert_eq!(f[0].path.to_string(), ".run.target.cwd");
    }
    // An external run that can write, without a worktree.
    let mut d = clean();
    d.run.agent = RunAgent::Inline(writer());
    d.run.target.worktree = None;
    let found = run(&d);
    let f = with(&found, BROAD_CWD);
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(f[0].path.to_string(), ".run.target");
    // Positive controls: a worktree; a read-only agent; a manual run.
    let mut ok = d.clone();
    ok.run.target.worktree = clean().run.target.worktree;
    assert!(with(&run(&ok), BROAD_CWD).is_empty());
    let mut ok = d.clone();
    ok.run.agent = RunAgent::Inline(read_only());
    assert!(with(&run(&ok), BROAD_CWD).is_empty());
    let mut ok = d;
    ok.on = vec![entry("manual.run", Some(&["a"]))];
    assert!(with(&run(&ok), BROAD_CWD).is_empty());
}

#[test]
fn unattended_schedule_fires_on_authority_and_shared_conversation() {
    let mut d = clean();
    d.on = vec![entry("schedule.tick", None)];
    d.run.outputs.clear();
    d.run.continuation = Continuation::New;
    d.run.agent = RunAgent::Inline(agent("codex", Some("full-access"), None));
    let found = run_at(&d, Release::Main);
    assert_eq!(with(&found, UNATTENDED_SCHEDULE).len(), 1, "{found:?}");
    // The default continuation shares one conversation across runs.
    d.run.agent = RunAgent::Inline(read_only());
    d.run.continuation = Continuation::Conversation;
    let found = run_at(&d, Release::Main);
    assert_eq!(with(&found, UNATTENDED_SCHEDULE).len(), 1, "{found:?}");
    // Positive control: read-only, new conversation each run.
    d.run.continuation = Continuation::New;
    assert_eq!(codes(&run_at(&d, Release::Main)), Vec::<&str>::new());
}

#[test]
fn shared_continuation_fires_with_a_wildcard() {
    let mut d = clean();
    d.on = vec![entry("slack.mention", Some(&["*"]))];
    let found = run(&d);
    assert_eq!(with(&found, SHARED_CONTINUATION).len(), 1, "{found:?}");
    d.run.continuation = Continuation::Key(Template::parse("k").unwrap());
    assert_eq!(with(&run(&d), SHARED_CONTINUATION).len(), 1);
    // Positive controls: a new conversation each run; named users.
    d.run.continuation = Continuation::New;
    assert!(with(&run(&d), SHARED_CONTINUATION).is_empty());
    assert!(with(&run(&clean()), SHARED_CONTINUATION).is_empty());
}

#[test]
fn multi_event_authority_fires_on_different_providers_or_principals() {
    let mut d = clean();
    d.on.push(entry("github.issue_comment_created", Some(&["U01234567"])));
    d.run.outputs.push(OutputGrant {
        kind: "github.reply".to_owned(),
        max: Some(1),
        required: None,
    });
    let found = run(&d);
    let f = with(&found, MULTI_EVENT_AUTHORITY);
    assert_eq!(f.len(), 1, "{found:?}");
    assert_eq!(
        f[0].path.to_string(),
        ".on[\"github.issue_comment_created\"]"
    );
    // Same provider, other principals.
    let mut d = clean();
    d.on = vec![
        entry("github.issue_comment_created", Some(&["alice"])),
        entry("github.pull_request_comment_created", Some(&["bob"])),
    ];
    d.run.outputs[0].kind = "github.reply".to_owned();
    assert_eq!(with(&run(&d), MULTI_EVENT_AUTHORITY).len(), 1);
    // Positive control: same provider, same principals (in any order).
    d.on = vec![
        entry("github.issue_comment_created", Some(&["alice", "bob"])),
        entry(
            "github.pull_request_comment_created",
            Some(&["bob", "alice"]),
        ),
    ];
    assert_eq!(codes(&run(&d)), Vec::<&str>::new());
}

#[test]
fn no_classifier_lane_fires_on_external_write_runs() {
    let mut d = clean();
    d.run.github = Some(github(&[("pull_requests", GithubLevel::Write)], true));
    let found = run(&d);
    let f = with(&found, NO_CLASSIFIER_LANE);
    assert_eq!(f.len(), 1, "{found:?}");
    assert!(!f[0].is_error());
    // Positive controls: read authority; a manual run.
    let mut ok = d.clone();
    ok.run.github = Some(github(&[("pull_requests", GithubLevel::Read)], true));
    assert!(with(&run(&ok), NO_CLASSIFIER_LANE).is_empty());
    d.on = vec![entry("manual.run", Some(&["a"]))];
    assert!(with(&run(&d), NO_CLASSIFIER_LANE).is_empty());
}

#[test]
fn unknown_event_is_an_error_naming_the_release() {
    let mut d = clean();
    d.on = vec![entry("future.thing", Some(&["a"]))];
    let found = run(&d);
    let f = with(&found, UNKNOWN_EVENT);
    assert_eq!(f.len(), 1, "{found:?}");
    assert!(f[0].is_error());
    // Gated events name the release that has them.
    d.on = vec![entry("schedule.tick", None)];
    d.run.continuation = Continuation::New;
    let found = run(&d);
    assert!(
        with(&found, UNKNOWN_EVENT)[0]
            .message
            .contains("--hub-release main")
    );
    assert!(with(&run_at(&d, Release::Main), UNKNOWN_EVENT).is_empty());
    d.on = vec![entry("forgejo.push", Some(&["a"]))];
    let found = run_at(&d, Release::Main);
    assert!(
        with(&found, UNKNOWN_EVENT)[0]
            .message
            .contains("unreleased")
    );
    assert!(with(&run_at(&d, Release::Unreleased), UNKNOWN_EVENT).is_empty());
    // Positive control: every 0.9.0 event is known.
    for e in crate::trigger::events::emitted_by(Release::V0_9_0) {
        let mut d = clean();
        d.on = vec![entry(e, Some(&["a"]))];
        assert!(with(&run(&d), UNKNOWN_EVENT).is_empty(), "{e}");
    }
}

#[test]
fn unattended_provider_is_an_error() {
    let mut d = clean();
    d.run.agent = RunAgent::Inline(agent("gemini", Some("auto"), None));
    let found = run(&d);
    let f = with(&found, UNATTENDED_PROVIDER);
    assert_eq!(f.len(), 1, "{found:?}");
    assert!(f[0].is_error());
    assert_eq!(f[0].path.to_string(), ".run.agent.provider");
    // Positive controls: the three providers, with a model suffix too.
    for p in ["claude", "codex/gpt-5", "opencode"] {
        d.run.agent = RunAgent::Inline(agent(p, Some("default"), None));
        assert!(with(&run(&d), UNATTENDED_PROVIDER).is_empty(), "{p}");
    }
}

#[test]
fn can_write_fails_closed() {
    let ro = [
        read_only(),
        agent("codex", Some("read-only"), None),
        agent("claude", Some("plan"), None),
        agent(
            "claude",
            Some("default"),
            Some(json!({"tools": ["Read", "Grep"]})),
        ),
        agent(
            "claude",
            Some("default"),
            Some(
                json!({"disallowedTools": ["Bash", "Edit", "Write", "MultiEdit", "NotebookEdit"]}),
            ),
        ),
        agent("opencode", Some("plan"), None),
        agent(
            "opencode",
            Some("build"),
            Some(json!({"permission": {"edit": "deny", "bash": {"*": "deny"}}})),
        ),
    ];
    for a in &ro {
        assert!(!agent_can_write(a), "{a:?}");
    }
    let rw = [
        writer(),
        agent(
            "codex",
            Some("read-only"),
            Some(json!({"sandbox_mode": "workspace-write"})),
        ),
        agent("claude", Some("default"), None),
        agent(
            "claude",
            Some("default"),
            Some(json!({"tools": ["Read", "Bash(git:*)"]})),
        ),
        agent(
            "claude",
            Some("default"),
            Some(
                json!({"disallowedTools": ["Bash(rm:*)", "Edit", "Write", "MultiEdit", "NotebookEdit"]}),
            ),
        ),
        agent(
            "opencode",
            Some("build"),
            Some(json!({"permission": {"edit": "deny", "bash": {"git *": "allow", "*": "deny"}}})),
        ),
        agent("gemini", Some("plan"), None),
    ];
    for a in &rw {
        assert!(agent_can_write(a), "{a:?}");
    }
}

#[test]
fn legacy_lane_fires_on_a_legacy_multistep_document() {
    let text = "name: t\nlegacy_multistep:\n  trigger: {}\n";
    let root = crate::yaml::parse("t.yml", text).unwrap().into_value();
    let d = legacy_lane("t.yml", &root).unwrap();
    assert!(!d.is_error());
    assert_eq!(
        (d.line, d.path.to_string().as_str()),
        (2, ".legacy_multistep")
    );
    // Positive control: a trigger document.
    let text = "name: t\non: {manual.run: {}}\n";
    let root = crate::yaml::parse("t.yml", text).unwrap().into_value();
    assert_eq!(legacy_lane("t.yml", &root), None);
}

#[test]
fn non_atomic_deploy_fires_on_several_files() {
    let files = [".paseo/triggers/a.yml", ".paseo/triggers/b.yml"];
    let d = non_atomic_deploy(&files).unwrap();
    assert_eq!(d.file, ".paseo/triggers/b.yml");
    assert!(!d.is_error());
    // Positive control: one file.
    assert_eq!(non_atomic_deploy(&files[..1]), None);
}
