//! The agent machinery of the governed session without an agent binary:
//! `palisade run --policy P --agent claude` with a shell as the worker.
//! The HOME the preset gets, its config files read-only inside, the
//! project config names protected, the tool variables every session sets,
//! stable placeholders across persistent sessions, and the flag's usage
//! errors. Needs root.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::print_stderr,
    reason = "tests"
)]

mod agents_common;

use agents_common::{Governed, Run, rev};

fn key() -> String {
    rev("YEK-LAER-NOISSES-TNEGA-edasilap-ks")
}

fn policy(state: &str) -> String {
    format!(
        "[worker]\nprofile = \"governed\"\nagent_state = \"{state}\"\n\n[egress]\nallow_addresses = [\"127.0.0.0/8\"]\n\n[[egress.relay]]\nname = \"anthropic\"\norigin = \"https://provider.test:9\"\nroutes = [\"POST /v1/messages\"]\ncredential = {{ header = \"x-api-key\", from_env = \"AGENT_TEST_KEY\" }}\n"
    )
}

/// A shell tool call: what it could and could not write, and its env.
const PROBE: &str = r#"
cd "$PWD"
try() { if ( eval "$1" ) 2>/dev/null; then echo "$2=ok"; else echo "$2=refused"; fi; }
try 'mkdir -p .claude && echo x > .claude/settings.json' workdir_claude_settings
try 'echo x > .mcp.json' workdir_mcp
try 'echo x > ordinary.txt' workdir_ordinary
try 'echo x >> "$HOME/.claude/settings.json"' home_claude_settings
try 'rm -f "$HOME/.claude/settings.json" && echo x > "$HOME/.claude/settings.json"' home_claude_settings_replace
try 'echo x >> "$HOME/.bashrc"' home_bashrc
try 'rm -f "$HOME/.bashrc"; echo x > "$HOME/.bashrc"' home_bashrc_replace
try 'mv "$HOME/.gitconfig" "$HOME/old"' home_gitconfig_move
try 'rm -f "$HOME/.npmrc"; echo x > "$HOME/.npmrc"' home_npmrc_replace
try 'rmdir "$HOME/.node_modules" && mkdir "$HOME/.node_modules"' home_node_modules_replace
try 'echo x > "$HOME/notes.txt"' home_ordinary
try 'mkdir -p "$HOME/.claude/session-env" && echo x > "$HOME/.claude/session-env/x"' home_claude_state
try 'echo x > "$HOME/.claude/hooks/x"' home_claude_hook
try 'echo x > "$HOME/.mcp.json"' home_mcp
try 'echo x >> "$HOME/.profile"' home_profile
try 'cat "$(dirname "$HOME")/placeholder.key" | grep -q .' read_key
echo "HOME=$HOME"
echo "GIT_HTTP_PROXY_AUTHMETHOD=$GIT_HTTP_PROXY_AUTHMETHOD"
echo "NODE_USE_ENV_PROXY=$NODE_USE_ENV_PROXY"
echo "PLACEHOLDER=$ANTHROPIC_API_KEY"
echo "BASE=$ANTHROPIC_BASE_URL"
"#;

fn field<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {out}"))
}

#[test]
fn an_agent_session_keeps_its_config_read_only_and_its_placeholder_stable() {
    agents_common::require_root();
    let g = Governed::new();
    let text = policy("persistent");
    let run = || {
        let r = Run::new(&text, Some("claude"), &["/bin/sh", "-c", PROBE])
            .env("AGENT_TEST_KEY", &key())
            .arg("--resolve")
            .arg("provider.test=127.0.0.1");
        let out = g.run(&r);
        out.assert_ok();
        assert!(out.verified, "the journal verifies");
        agents_common::assert_no_leak(&key(), &out, &[&g.work, &g.state]);
        out
    };
    let first = run();
    let o = first.stdout.as_str();
    assert_eq!(field(o, "workdir_claude_settings"), "refused");
    assert_eq!(field(o, "workdir_mcp"), "refused");
    assert_eq!(field(o, "home_claude_settings"), "refused");
    assert_eq!(field(o, "home_claude_settings_replace"), "refused");
    assert_eq!(field(o, "home_bashrc"), "refused");
    assert_eq!(field(o, "home_bashrc_replace"), "refused");
    assert_eq!(field(o, "home_gitconfig_move"), "refused");
    assert_eq!(field(o, "home_npmrc_replace"), "refused");
    assert_eq!(field(o, "home_node_modules_replace"), "refused");
    assert_eq!(field(o, "home_claude_hook"), "refused");
    assert_eq!(field(o, "home_mcp"), "refused");
    assert_eq!(field(o, "home_profile"), "refused");
    assert_eq!(
        field(o, "read_key"),
        "refused",
        "the placeholder key is not readable inside"
    );
    // Controls: ordinary files in the working directory and HOME.
    assert_eq!(field(o, "workdir_ordinary"), "ok");
    assert_eq!(field(o, "home_ordinary"), "ok");
    // Claude Code's own state below `~/.claude` (the working directory's
    // protected name `.claude` is not applied in HOME).
    assert_eq!(field(o, "home_claude_state"), "ok");
    assert!(g.work.join("ordinary.txt").exists());
    assert!(
        !g.work.join(".mcp.json").exists()
            || std::fs::read(g.work.join(".mcp.json")).unwrap().is_empty()
    );
    let home = field(o, "HOME").to_owned();
    assert!(home.starts_with(g.state.to_str().unwrap()), "{home}");
    assert_eq!(field(o, "GIT_HTTP_PROXY_AUTHMETHOD"), "basic");
    assert_eq!(field(o, "NODE_USE_ENV_PROXY"), "1");
    assert!(field(o, "BASE").starts_with("http://127.0.0.1:"));
    // The preset's file was rendered with the placeholder's tail.
    let claude_json =
        std::fs::read_to_string(std::path::Path::new(&home).join(".claude.json")).unwrap();
    let p1 = field(o, "PLACEHOLDER").to_owned();
    assert!(p1.len() > 20 && p1 != key());
    assert!(claude_json.contains(&p1[p1.len() - 20..]), "{claude_json}");
    // Persistent: the same HOME and the same placeholder next session.
    let second = run();
    assert_eq!(field(&second.stdout, "HOME"), home);
    assert_eq!(field(&second.stdout, "PLACEHOLDER"), p1);
    assert!(std::path::Path::new(&home).join("notes.txt").exists());
}

/// Pi under `--agent pi`: what Pi writes in `~/.pi/agent` (its settings
/// lock, sessions) is writable, what it runs or obeys is not.
const PI_PROBE: &str = r#"
cd "$PWD"
try() { if ( eval "$1" ) 2>/dev/null; then echo "$2=ok"; else echo "$2=refused"; fi; }
try 'mkdir "$HOME/.pi/agent/settings.json.lock"' home_pi_lock
try 'echo x > "$HOME/.pi/agent/sessions/s.jsonl"' home_pi_session
try 'echo x > "$HOME/.pi/agent/extensions/x.ts"' home_pi_extension
try 'echo x >> "$HOME/.pi/agent/settings.json"' home_pi_settings
try 'rm -f "$HOME/.pi/agent/models.json" && echo x > "$HOME/.pi/agent/models.json"' home_pi_models_replace
try 'echo x > "$HOME/.pi/agent/AGENTS.md"' home_pi_agents_md
try 'mkdir -p .pi && echo x > .pi/settings.json' workdir_pi
try 'echo x > ordinary.txt' workdir_ordinary
"#;

#[test]
fn a_pi_session_writes_its_state_but_not_its_extensions() {
    agents_common::require_root();
    let g = Governed::new();
    let text = policy("fresh");
    let r = Run::new(&text, Some("pi"), &["/bin/sh", "-c", PI_PROBE])
        .env("AGENT_TEST_KEY", &key())
        .arg("--resolve")
        .arg("provider.test=127.0.0.1");
    let out = g.run(&r);
    out.assert_ok();
    assert!(out.verified, "the journal verifies");
    agents_common::assert_no_leak(&key(), &out, &[&g.work, &g.state]);
    let o = out.stdout.as_str();
    assert_eq!(field(o, "home_pi_extension"), "refused");
    assert_eq!(field(o, "home_pi_settings"), "refused");
    assert_eq!(field(o, "home_pi_models_replace"), "refused");
    assert_eq!(field(o, "home_pi_agents_md"), "refused");
    assert_eq!(field(o, "workdir_pi"), "refused");
    // Controls: Pi's own state in HOME, an ordinary file in the project.
    assert_eq!(field(o, "home_pi_lock"), "ok");
    assert_eq!(field(o, "home_pi_session"), "ok");
    assert_eq!(field(o, "workdir_ordinary"), "ok");
}

#[test]
fn a_fresh_agent_home_is_removed_at_the_end() {
    agents_common::require_root();
    let g = Governed::new();
    let text = policy("fresh");
    let r = Run::new(
        &text,
        Some("claude"),
        &["/bin/sh", "-c", "echo HOME=$HOME; echo x > $HOME/f"],
    )
    .env("AGENT_TEST_KEY", &key())
    .arg("--resolve")
    .arg("provider.test=127.0.0.1");
    let out = g.run(&r);
    out.assert_ok();
    let home = field(&out.stdout, "HOME").to_owned();
    assert!(home.contains("/fresh-"), "{home}");
    assert!(
        !std::path::Path::new(&home).exists(),
        "the fresh HOME is gone"
    );
}

#[test]
fn the_agent_flag_must_agree_with_the_policy_and_needs_one() {
    agents_common::require_root();
    let g = Governed::new();
    let text = policy("fresh").replace("[worker]\n", "[worker]\nagent = \"claude\"\n");
    let out = g.run(
        &Run::new(&text, Some("codex"), &["/bin/true"])
            .env("AGENT_TEST_KEY", &key())
            .arg("--resolve")
            .arg("provider.test=127.0.0.1"),
    );
    assert_eq!(out.status, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("differs from the policy's worker.agent"),
        "{}",
        out.stderr
    );
    // Control: the same agent is accepted.
    let ok = g.run(
        &Run::new(&text, Some("claude"), &["/bin/true"])
            .env("AGENT_TEST_KEY", &key())
            .arg("--resolve")
            .arg("provider.test=127.0.0.1"),
    );
    ok.assert_ok();
    let no_policy = std::process::Command::new(agents_common::palisade())
        .args(["run", "--agent", "claude", "--", "/bin/true"])
        .output()
        .unwrap();
    assert!(!no_policy.status.success());
    assert!(String::from_utf8_lossy(&no_policy.stderr).contains("--policy"));
}
