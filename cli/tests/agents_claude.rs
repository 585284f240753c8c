//! Claude Code as a governed worker, against the fake Anthropic Messages
//! provider on 127.0.0.1. Each test is ignored by default (it needs the
//! agent CLIs): `PALISADE_AGENTS_BIN=…/node_modules/.bin cargo test -p
//! palisade-cli --test agents_claude -- --ignored`, as root.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
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
#[path = "../../examples/governed-worker/provider.rs"]
#[allow(dead_code, unreachable_pub, reason = "shared with the demo binary")]
mod provider;
#[path = "agents_common/anthropic_rig.rs"]
mod rig;

use std::time::Duration;

use fake_anthropic::{Anthropic, Expect};
use palisade_policy::agent::{AgentName, EnvValue, preset};
use rig::Rig;

const LIMIT: Duration = Duration::from_secs(90);

fn claude() -> String {
    rig::agent_bin("claude").display().to_string()
}

/// The preset's fixed environment, for the tests that still run a
/// hand-written policy (the relay URL and placeholder from the relay's
/// `worker_env`); the tool turn runs `--agent claude`.
fn preset_env() -> Vec<(&'static str, &'static str)> {
    preset(AgentName::Claude)
        .env
        .iter()
        .filter_map(|(k, v)| match v {
            EnvValue::Literal(l) => Some((*k, *l)),
            _ => None,
        })
        .collect()
}

fn denials(r: &Rig) -> Vec<String> {
    r.records()
        .iter()
        .filter(|x| x["kind"] == "egress_connection" && x["body"]["decision"] == "deny")
        .map(|x| {
            format!(
                "{}:{} {}",
                x["body"]["host"].as_str().unwrap_or(""),
                x["body"]["port"],
                x["body"]["reason"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// Claude Code completes a tool turn through the relay: the tool runs as
/// the worker uid without capabilities, its output reaches the provider
/// in the follow-up request, the real key reaches only the fake upstream,
/// the journal verifies, and with the preset's switches Claude Code tries
/// no other host.
#[test]
#[ignore = "needs the agent CLIs: cargo xtask agents"]
fn claude_tool_turn_is_governed_and_the_key_stays_on_the_host() {
    assert!(rig::is_root(), "the agent suite runs as root");
    let f = Anthropic::start(Expect::ApiKey(rig::real_key()), &rig::probe_command());
    // Under `--agent claude`: the preset's env, `.claude.json` seed and
    // read-only paths, HOME a state root (Claude writes `~/.claude`).
    let r = Rig::with_agent(f.fake.addr, "claude");
    let c = claude();
    let o = r.run(
        &[
            &c,
            "-p",
            "Check the sandbox. PLEASE-RUN-THE-TOOL",
            "--allowedTools",
            "Bash",
        ],
        LIMIT,
    );
    assert_eq!(o.code, 0, "claude failed: {}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains(fake_anthropic::DONE_TEXT), "{}", o.stdout);

    let results = f.tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    rig::assert_governed_tool_output(&results[0]);
    let file = std::fs::read_to_string(r.work.join("tool-out.txt")).unwrap();
    assert!(file.starts_with("64000\n"), "{file}");

    // The fake answers 401 to anything but the real key: every Messages
    // request carried it, so the relay swapped the placeholder for it.
    let msgs = f.messages();
    assert!(
        msgs.len() >= 2,
        "a tool turn and its follow-up: {}",
        msgs.len()
    );
    for m in &msgs {
        assert!(
            m.header("x-api-key") == Some(rig::real_key().as_str()),
            "a request without the real key reached the fake"
        );
    }
    assert!(
        f.seen().iter().all(|s| s.path.starts_with("/v1/messages")),
        "only the Messages API reached the upstream"
    );
    rig::assert_key_only_upstream(&r, &o);
    let d = denials(&r);
    assert!(
        d.is_empty(),
        "with the preset's switches Claude Code tries no other host: {d:?}"
    );
}

/// Without the preset's switches Claude Code contacts api.anthropic.com
/// directly (metrics, `/api/hello`); the proxy refuses it, the journal
/// names the host, and the preset lists it among its denied hosts. The
/// positive control is the test above: the same run with the switches
/// has no denial.
#[test]
#[ignore = "needs the agent CLIs: cargo xtask agents"]
fn claude_without_the_switches_is_denied_api_anthropic_com_and_the_journal_names_it() {
    assert!(rig::is_root(), "the agent suite runs as root");
    let f = Anthropic::start(Expect::ApiKey(rig::real_key()), "true");
    let r = Rig::new(f.fake.addr, &[], "");
    let c = claude();
    let o = r.run(&[&c, "-p", "Say hello."], LIMIT);
    assert_eq!(o.code, 0, "claude failed: {}\n{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains(fake_anthropic::TEXT_REPLY),
        "{}",
        o.stdout
    );
    let d = denials(&r);
    assert!(
        d.iter()
            .any(|x| x == "api.anthropic.com:443 host_not_allowed"),
        "{d:?}"
    );
    assert!(
        preset(AgentName::Claude)
            .denied_hosts
            .contains(&"api.anthropic.com")
    );
    let (code, text) = r.verify();
    assert_eq!(code, 0, "journal verify: {text}");
}

/// The seed's recommended provider option, Claude Code's own sandbox with
/// `failIfUnavailable`, cannot start inside palisade's sandbox (here:
/// its dependencies are not in the worker's view; with them, its proxy
/// socket's `listen` is refused, see docs/agents.md): Claude Code refuses
/// to start, so no request reaches the provider and no tool runs. That
/// refusal is the documented result until `nested_sandbox` lands. The
/// positive control is the tool-turn test: the same run without the
/// setting completes.
#[test]
#[ignore = "needs the agent CLIs: cargo xtask agents"]
fn claude_sandbox_fail_if_unavailable_refuses_to_start_inside_palisade() {
    assert!(rig::is_root(), "the agent suite runs as root");
    let f = Anthropic::start(Expect::ApiKey(rig::real_key()), &rig::probe_command());
    let r = Rig::new(f.fake.addr, &preset_env(), "");
    std::fs::create_dir_all(r.work.join(".claude")).unwrap();
    std::fs::write(
        r.work.join(".claude/settings.json"),
        r#"{"sandbox":{"enabled":true,"failIfUnavailable":true}}"#,
    )
    .unwrap();
    let c = claude();
    let o = r.run(
        &[&c, "-p", "PLEASE-RUN-THE-TOOL", "--allowedTools", "Bash"],
        LIMIT,
    );
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("sandbox required but unavailable")
            && o.stderr.contains("failIfUnavailable"),
        "{}",
        o.stderr
    );
    assert!(f.messages().is_empty(), "no request reached the provider");
    assert!(!r.work.join("tool-out.txt").exists(), "no tool ran");
    let (code, text) = r.verify();
    assert_eq!(code, 0, "journal verify: {text}");
}
