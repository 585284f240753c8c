//! `palisade check --policy`: a workflow step whose provider options turn
//! on the provider's own sandbox (Claude `sandbox.enabled`, Codex
//! `sandbox_mode` other than `danger-full-access`), which cannot start
//! inside palisade's, is `provider_sandbox_unavailable`; without `--policy`
//! the same workflow checks clean, and a provider without such a sandbox
//! checks clean with it.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_palisade"))
        .arg("check")
        .args(args)
        .current_dir(repo())
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn policy() -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        f.path(),
        "[profiles.agent]\nbase = \"governed\"\nnested_sandbox = true\n\n[worker]\nprofile = \"agent\"\n",
    )
    .unwrap();
    f
}

fn findings(o: &Output) -> Vec<Value> {
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let all = v
        .get("diagnostics")
        .and_then(Value::as_array)
        .or_else(|| v.as_array())
        .cloned()
        .unwrap_or_default();
    all.into_iter()
        .filter(|d| d["code"] == "provider_sandbox_unavailable")
        .collect()
}

#[test]
fn a_provider_sandbox_is_an_error_under_a_policy() {
    let p = policy();
    let p = p.path().to_str().unwrap();
    for (file, key) in [
        ("examples/providers/claude.yml", "sandbox"),
        ("examples/providers/codex.yml", "sandbox_mode"),
    ] {
        let o = check(&["--format", "json", file, "--policy", p]);
        let found = findings(&o);
        assert_eq!(
            found.len(),
            1,
            "{file}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        let d = &found[0];
        assert_eq!(d["severity"], "error", "{d}");
        let msg = d["message"].as_str().unwrap();
        assert!(msg.contains("`nested_sandbox = true` included"), "{msg}");
        assert!(d.to_string().contains(key), "{d}");
        assert_eq!(o.status.code(), Some(1), "{file}");
        // Without a policy the workflow is not checked for palisade.
        let o = check(&["--format", "json", file]);
        assert!(findings(&o).is_empty(), "{file}");
        assert_eq!(o.status.code(), Some(0), "{file}");
    }
    // Positive control: OpenCode has no such sandbox.
    let o = check(&[
        "--format",
        "json",
        "examples/providers/opencode.yml",
        "--policy",
        p,
    ]);
    assert!(findings(&o).is_empty());
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

fn is_root() -> bool {
    nix_free_uid() == Some(0)
}

fn nix_free_uid() -> Option<u32> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `palisade run --policy` of `unshare -U true` under a governed profile
/// with `nested_sandbox` as given; (status, journal text).
fn unshare_under(dir: &std::path::Path, nested: bool) -> (i32, String) {
    use std::os::unix::fs::PermissionsExt;
    let tag = if nested { "nested" } else { "plain" };
    let work = dir.join(format!("work-{tag}"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
    let policy = work.join("palisade.toml");
    std::fs::write(
        &policy,
        format!("[profiles.agent]\nbase = \"governed\"\nnested_sandbox = {nested}\n\n[worker]\nprofile = \"agent\"\n"),
    )
    .unwrap();
    let key = dir.join(format!("{tag}.key"));
    let k = palisade_evidence::JournalKey::generate().unwrap();
    std::fs::write(&key, k.expose_text().as_bytes()).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let journal = dir.join(format!("{tag}.journal"));
    let out = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .arg("run")
        .arg("--cwd")
        .arg(&work)
        .arg("--policy")
        .arg(&policy)
        .arg("--journal")
        .arg(&journal)
        .arg("--key")
        .arg(&key)
        .args(["--", "/usr/bin/unshare", "-U", "true"])
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&journal).unwrap_or_default();
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn run_with_nested_sandbox_creates_a_user_namespace_and_journals_the_deviation() {
    if !is_root() {
        assert!(std::env::var_os("CI").is_none(), "CI runs this as root");
        return;
    }
    // Directly under /: not a masked tree, not the private /tmp.
    let dir = tempfile::Builder::new()
        .prefix(".palisade-nested-run-")
        .tempdir_in("/")
        .unwrap();
    let (plain, plain_journal) = unshare_under(dir.path(), false);
    assert_ne!(plain, 0, "unshare -U refused without the option");
    assert!(!plain_journal.contains("nested sandbox"), "{plain_journal}");
    let (nested, journal) = unshare_under(dir.path(), true);
    assert_eq!(nested, 0, "unshare -U allowed with the option");
    assert!(
        journal.contains(palisade_isolate::NESTED_SANDBOX_DEVIATION),
        "the deviation is journaled: {journal}"
    );
}

/// The 1-based (line, column) of `needle` on the first line at or after
/// the line holding `after`.
fn where_is(text: &str, after: &str, needle: &str) -> (u64, u64) {
    let start = text.lines().position(|l| l.contains(after)).unwrap();
    let (i, line) = text
        .lines()
        .enumerate()
        .skip(start)
        .find(|(_, l)| l.contains(needle))
        .unwrap();
    let col = line[..line.find(needle).unwrap()].chars().count();
    (i as u64 + 1, col as u64 + 1)
}

fn at(d: &Value) -> (String, u64, u64, String) {
    (
        d["file"].as_str().unwrap().to_owned(),
        d["line"].as_u64().unwrap(),
        d["column"].as_u64().unwrap(),
        d["path"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn the_finding_points_at_the_option_that_turns_the_sandbox_on() {
    let p = policy();
    let p = p.path().to_str().unwrap();
    // A single file, inline agent: the `enabled: true` under `sandbox:`.
    let file = "examples/providers/claude.yml";
    let text = std::fs::read_to_string(repo().join(file)).unwrap();
    let (line, col) = where_is(&text, "sandbox:", "true");
    let found = findings(&check(&["--format", "json", file, "--policy", p]));
    assert_eq!(found.len(), 1);
    assert_eq!(
        at(&found[0]),
        (
            file.to_owned(),
            line,
            col,
            ".triggers[0].steps[0].agent.options.sandbox.enabled".to_owned()
        )
    );

    // A bundle, named agents: in hub.yml, at each agent's option.
    let root = "policy/tests/vectors/v3";
    let hub = format!("{root}/.paseo/hub.yml");
    let text = std::fs::read_to_string(repo().join(&hub)).unwrap();
    let found = findings(&check(&["--format", "json", root, "--policy", p]));
    let mut got: Vec<_> = found.iter().map(at).collect();
    got.sort();
    let (l1, c1) = where_is(&text, "answerer:", "true");
    let (l2, c2) = where_is(&text, "classifier:", "read-only");
    assert_eq!(
        got,
        vec![
            (
                hub.clone(),
                l2,
                c2,
                ".agents.classifier.options.sandbox_mode".to_owned()
            ),
            (
                hub.clone(),
                l1,
                c1,
                ".agents.answerer.options.sandbox.enabled".to_owned()
            ),
        ]
    );

    // A bundle, inline agent: in its workflow file, found by trigger name
    // (another workflow file comes first).
    let dir = tempfile::tempdir().unwrap();
    let paseo = dir.path().join(".paseo");
    std::fs::create_dir_all(paseo.join("workflows")).unwrap();
    std::fs::write(
        paseo.join("hub.yml"),
        "environments:\n  project: {kind: daemon, daemon: d, cwd: /srv/p}\n",
    )
    .unwrap();
    let flow = |name: &str, mode: &str| {
        format!(
            "name: {name}\non: manual.run\nmax_runtime: 1h\nsteps:\n  - id: one\n    environment: project\n    max_runtime: 5m\n    idle_timeout: 1m\n    prompt: [{{text: hi}}]\n    agent:\n      provider: codex\n      options:\n        sandbox_mode: {mode}\n"
        )
    };
    std::fs::write(
        paseo.join("workflows/a.yml"),
        flow("first", "danger-full-access"),
    )
    .unwrap();
    let b = flow("second", "workspace-write");
    std::fs::write(paseo.join("workflows/b.yml"), &b).unwrap();
    let o = check(&[
        "--format",
        "json",
        dir.path().to_str().unwrap(),
        "--policy",
        p,
    ]);
    let found = findings(&o);
    assert_eq!(found.len(), 1, "{}", String::from_utf8_lossy(&o.stdout));
    let (line, col) = where_is(&b, "sandbox_mode", "workspace-write");
    let (f, l, c, path) = at(&found[0]);
    assert!(f.ends_with(".paseo/workflows/b.yml"), "{f}");
    assert_eq!(
        (l, c, path.as_str()),
        (line, col, ".steps[0].agent.options.sandbox_mode")
    );
}
