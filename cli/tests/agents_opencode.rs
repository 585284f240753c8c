//! OpenCode (`opencode-ai` 1.18.33) as a governed worker: `opencode run`
//! with its `openai` provider (the AI SDK's Responses client) against the
//! fake OpenAI provider through palisade's relay.
//! Run: `PALISADE_AGENTS_BIN=… cargo test -p palisade-cli --test
//! agents_opencode -- --ignored` (the CLIs come from `cargo xtask agents`).

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
use palisade_policy::agent::{AgentName, EnvValue, preset};

/// The preset's `~/.config/opencode/opencode.json`
/// (`policy/src/agent/opencode.rs`), with the relay URL left to
/// OpenCode's own `{env:OPENAI_BASE_URL}` substitution until `--agent`
/// renders it.
fn config() -> String {
    let text = oai_suite::render_file(
        AgentName::OpenCode,
        ".config/opencode/opencode.json",
        "{env:OPENAI_BASE_URL}",
    );
    serde_json::from_str::<serde_json::Value>(&text).expect("the template is JSON");
    text
}

/// The preset's literal environment (its switches); the placeholder
/// comes from the relay's `worker_env`.
fn env() -> Vec<(&'static str, &'static str)> {
    preset(AgentName::OpenCode)
        .env
        .iter()
        .filter_map(|(k, v)| match v {
            EnvValue::Literal(l) => Some((*k, *l)),
            _ => None,
        })
        .collect()
}

fn rig() -> Option<Rig> {
    if !is_root() {
        eprintln!("skipped: the agent suite runs as root");
        return None;
    }
    let r = Rig::new();
    let dir = r.home.join(".config/opencode");
    std::fs::create_dir_all(&dir).unwrap();
    for d in [r.home.join(".config"), dir.clone()] {
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    }
    std::fs::write(dir.join("opencode.json"), config()).unwrap();
    Some(r)
}

fn script() -> String {
    format!(
        "exec {} run -m openai/gpt-5 'Run the check and report.'",
        agent_bin("opencode").display()
    )
}

/// One `opencode run` turn with a `bash` tool call: the turn completes
/// with the fake's text, the tool ran as uid 64000 without capabilities,
/// its result reached the fake, the real key is only at the fake, the
/// journal verifies, and what OpenCode fetches on its own (the npm
/// registry for its config dir's plugin package) was denied and recorded.
#[test]
#[ignore = "needs the agent CLIs: cargo xtask agents"]
fn opencode_run_turn_with_a_tool_call_runs_governed() {
    let Some(r) = rig() else { return };
    let policy = r.policy("");
    let out = r.run(&policy, &env(), &script());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "opencode: {stdout}\n{stderr}");
    assert!(
        stdout.contains(fake_openai::FINAL_TEXT),
        "opencode printed the final turn: {stdout}\n{stderr}"
    );
    r.assert_tool_and_secret(&out);
    r.assert_journal_verifies();
    let denied = r.denied_hosts();
    assert!(
        denied.iter().any(|h| h == "registry.npmjs.org"),
        "OpenCode's npm registry fetch was denied and recorded: {denied:?}"
    );
    assert!(
        !denied.iter().any(|h| h == "models.opencode.ai"),
        "OPENCODE_DISABLE_MODELS_FETCH keeps it from trying models.opencode.ai: {denied:?}"
    );
    let listed = preset(AgentName::OpenCode).denied_hosts;
    for host in &denied {
        assert!(
            listed.contains(&host.as_str()),
            "{host} is in the preset's denied_hosts"
        );
    }
}

/// The control of the preset's `OPENCODE_DISABLE_MODELS_FETCH`: without
/// it, OpenCode fetches its model list from models.opencode.ai, which the
/// proxy denies and records by name; with it (the test above) it does not
/// try. The turn itself still completes.
#[test]
#[ignore = "needs the agent CLIs: cargo xtask agents"]
fn opencode_model_list_fetch_is_denied_and_recorded_without_the_switch() {
    let Some(r) = rig() else { return };
    let policy = r.policy("");
    let env: Vec<(&str, &str)> = env()
        .into_iter()
        .filter(|(k, _)| *k != "OPENCODE_DISABLE_MODELS_FETCH")
        .collect();
    let out = r.run(&policy, &env, &script());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(fake_openai::FINAL_TEXT),
        "the turn completes: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    r.assert_journal_verifies();
    let denied = r.denied_hosts();
    assert!(
        denied.iter().any(|h| h == "models.opencode.ai"),
        "models.opencode.ai denied and recorded: {denied:?}"
    );
}
