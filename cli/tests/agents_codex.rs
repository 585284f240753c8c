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

/// The Codex config the preset renders into `CODEX_HOME/config.toml`
/// (`policy/src/agent/codex.rs`), with the relay URL given on the command
/// line (`-c`) until `--agent` renders it.
const CONFIG: &str = r#"model = "gpt-5.1-codex"
model_provider = "palisade-openai"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.palisade-openai]
name = "OpenAI through palisade"
base_url = "http://127.0.0.1:1/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
"#;

fn codex_script(extra: &str) -> String {
    format!(
        "exec {codex} exec --skip-git-repo-check {extra} \
         -c \"model_providers.palisade-openai.base_url=\\\"$OPENAI_BASE_URL/v1\\\"\" \
         'Run the check and report.'",
        codex = agent_bin("codex").display()
    )
}

fn rig() -> Option<Rig> {
    if !is_root() {
        eprintln!("skipped: the agent suite runs as root");
        return None;
    }
    let r = Rig::new();
    let ch = r.home.join(".codex");
    std::fs::create_dir_all(&ch).unwrap();
    std::fs::set_permissions(&ch, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::write(ch.join("config.toml"), CONFIG).unwrap();
    Some(r)
}

/// One `codex exec` turn with a tool call: the turn completes with the
/// fake's text, the tool ran as uid 64000 without capabilities, its
/// result reached the fake, the real key is only at the fake, the journal
/// verifies, and the hosts Codex tries on its own (chatgpt.com, github.com
/// for its plugin sync) were denied and recorded.
#[test]
#[ignore = "needs the agent CLIs: cargo xtask agents"]
fn codex_exec_turn_with_a_tool_call_runs_governed() {
    let Some(r) = rig() else { return };
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
    assert!(
        denied.iter().any(|h| h == "chatgpt.com"),
        "Codex's own chatgpt.com call was denied and recorded: {denied:?}"
    );
    let paths: Vec<String> = r.fake.seen().iter().map(|s| s.path.clone()).collect();
    assert!(
        paths.iter().all(|p| p == "/v1/responses"),
        "Codex needs only POST /v1/responses: {paths:?}"
    );
}
