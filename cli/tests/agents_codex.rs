//! Codex CLI (`@openai/codex` 0.171.0) as a governed worker: `codex exec`
//! against the fake OpenAI Responses provider through palisade's relay.
//! Run: `PALISADE_AGENTS_BIN=… cargo test -p palisade-cli --test
//! agents_codex -- --ignored` (the CLIs come from `cargo xtask agents`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::print_stderr,
    clippy::disallowed_methods,
    reason = "tests"
)]
#![allow(
    clippy::allow_attributes_without_reason,
    reason = "the shared agents_common/fake.rs has a bare allow(dead_code)"
)]

#[path = "agents_common/fake.rs"]
#[allow(unreachable_pub, reason = "shared by the agent suites")]
mod fake;
#[path = "agents_common/fake_openai.rs"]
#[allow(unreachable_pub, reason = "shared by the agent suites")]
mod fake_openai;
#[path = "agents_common/oai_suite.rs"]
#[allow(unreachable_pub, reason = "shared by the agent suites")]
mod oai_suite;

use oai_suite::{Rig, agent_bin, is_root};
use palisade_policy::agent::{AgentName, preset};

/// The preset's `~/.codex/config.toml` (`policy/src/agent/codex.rs`),
/// with `base_url` given on the command line (`-c`) until `--agent`
/// renders the relay URL into it; `features_plugins` false drops the
/// preset's `[features] plugins = false` (the control).
fn config(features_plugins: bool) -> String {
    let text = oai_suite::render_file(AgentName::Codex, ".codex/config.toml", "http://127.0.0.1:1");
    if features_plugins {
        text
    } else {
        let t = text.replace("[features]\nplugins = false\n", "");
        assert_ne!(t, text, "the preset turns plugins off");
        t
    }
}

fn codex_script(extra: &str) -> String {
    format!(
        "exec {codex} exec --skip-git-repo-check -m gpt-5.1-codex {extra} \
         -c \"model_providers.palisade-openai.base_url=\\\"$OPENAI_BASE_URL/v1\\\"\" \
         'Run the check and report.'",
        codex = agent_bin("codex").display()
    )
}

fn rig(features_plugins: bool) -> Option<Rig> {
    if !is_root() {
        eprintln!("skipped: the agent suite runs as root");
        return None;
    }
    let r = Rig::new();
    let ch = r.home.join(".codex");
    std::fs::create_dir_all(&ch).unwrap();
    std::fs::set_permissions(&ch, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::write(ch.join("config.toml"), config(features_plugins)).unwrap();
    Some(r)
}

/// One `codex exec` turn with a tool call: the turn completes with the
/// fake's text, the tool ran as uid 64000 without capabilities, its
/// result reached the fake, the real key is only at the fake, the journal
/// verifies, and with the preset's config Codex tries no other host.
#[test]
#[ignore = "needs the agent CLIs: cargo xtask agents"]
fn codex_exec_turn_with_a_tool_call_runs_governed() {
    let Some(r) = rig(true) else { return };
    let policy = r.policy("");
    let ch = format!("{}/.codex", r.home.display());
    let out = r.run(
        &policy,
        &[("CODEX_HOME", &ch)],
        &codex_script("--sandbox danger-full-access"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "codex: {stdout}\n{stderr}");
    assert!(
        stdout.contains(fake_openai::FINAL_TEXT),
        "codex printed the final turn: {stdout}\n{stderr}"
    );
    r.assert_tool_and_secret(&out);
    r.assert_journal_verifies();
    let denied = r.denied_hosts();
    assert!(denied.is_empty(), "Codex tried no other host: {denied:?}");
    let paths: Vec<String> = r.fake.seen().iter().map(|s| s.path.clone()).collect();
    assert!(
        paths.iter().all(|p| p == "/v1/responses"),
        "Codex needs only POST /v1/responses: {paths:?}"
    );
}

/// The control of the preset's `[features] plugins = false`: without it,
/// Codex syncs its curated plugins from chatgpt.com and github.com at
/// start; the proxy denies both and the journal names them. The turn
/// still completes.
#[test]
#[ignore = "needs the agent CLIs: cargo xtask agents"]
fn codex_plugin_sync_is_denied_and_recorded_without_the_switch() {
    let Some(r) = rig(false) else { return };
    let policy = r.policy("");
    let ch = format!("{}/.codex", r.home.display());
    let out = r.run(
        &policy,
        &[("CODEX_HOME", &ch)],
        &codex_script("--sandbox danger-full-access"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(fake_openai::FINAL_TEXT),
        "the turn completes: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    r.assert_journal_verifies();
    let denied = r.denied_hosts();
    for host in ["chatgpt.com", "github.com"] {
        assert!(
            denied.iter().any(|h| h == host),
            "{host} denied and recorded: {denied:?}"
        );
    }
    let listed = preset(AgentName::Codex).denied_hosts;
    for host in &denied {
        assert!(
            listed.contains(&host.as_str()),
            "{host} is in the preset's denied_hosts"
        );
    }
}

/// Codex's own sandbox (`--sandbox workspace-write`, the seed's
/// recommended option) cannot start inside palisade's: its bubblewrap
/// needs a user namespace, which palisade's seccomp filter refuses
/// without `nested_sandbox`. The documented result: the tool never runs
/// (no `tool-out.txt`), and the refusal reaches the model as the tool's
/// result. The control is the first test, the same turn with
/// `danger-full-access`, where the tool runs.
#[test]
#[ignore = "needs the agent CLIs: cargo xtask agents"]
fn codex_workspace_write_sandbox_cannot_start_inside_palisade() {
    let Some(r) = rig(true) else { return };
    let policy = r.policy("");
    let ch = format!("{}/.codex", r.home.display());
    let out = r.run(
        &policy,
        &[("CODEX_HOME", &ch)],
        &codex_script("--sandbox workspace-write"),
    );
    let outputs = fake_openai::tool_outputs(&r.fake.seen());
    assert!(
        outputs
            .iter()
            .any(|o| o.contains("bwrap: No permissions to create new namespace")),
        "Codex's sandbox refusal came back as the tool result: {outputs:?}"
    );
    assert!(
        !r.work.join("tool-out.txt").exists(),
        "the tool did not run"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(fake_openai::FINAL_TEXT),
        "the turn still ends"
    );
    r.assert_journal_verifies();
}
