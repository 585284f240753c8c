//! The variables every governed session sets for common tools, checked
//! with the real programs: Node's `fetch` goes through the recording proxy
//! (`NODE_USE_ENV_PROXY=1`) and git sends the proxy credentials on its
//! first request (`GIT_HTTP_PROXY_AUTHMETHOD=basic`), so no 407 is
//! recorded. Each has its control: the same call with the variable
//! removed. Loopback only (names pinned with `--resolve`). Needs root,
//! node and git.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::print_stderr,
    clippy::expect_used,
    reason = "tests"
)]
#![allow(
    clippy::allow_attributes_without_reason,
    reason = "the shared agents_common/fake.rs has a bare allow(dead_code)"
)]

mod agents_common;
#[path = "agents_common/fake.rs"]
#[allow(unreachable_pub, reason = "shared by the agent suites")]
mod fake;

use agents_common::{Governed, Run};

fn policy(port: u16) -> String {
    format!(
        "[worker]\nprofile = \"governed\"\n\n[egress]\nallow = [\"tools.test:{port}\"]\nallow_addresses = [\"127.0.0.0/8\"]\n"
    )
}

/// Records of a proxy refusal for want of the session's proxy credentials.
/// Matched on the reason code, never on a bare "407", which a MAC or a
/// timestamp may contain by chance (CI failed once so).
fn auth_refusals(out: &agents_common::Outcome) -> usize {
    mentions(out, "\"proxy_auth_required\"")
}

fn mentions(out: &agents_common::Outcome, what: &str) -> usize {
    out.records
        .iter()
        .filter(|r| r.to_string().contains(what))
        .count()
}

fn node_version() -> Vec<String> {
    let out = std::process::Command::new("/usr/bin/node")
        .arg("--version")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches('v')
        .split('.')
        .map(str::to_owned)
        .collect()
}

/// Whether this Node's `fetch` honours `NODE_USE_ENV_PROXY` (22.21+, 24+).
fn node_has_env_proxy() -> bool {
    let v: Vec<u32> = node_version()
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect();
    match v.as_slice() {
        [major, minor, ..] => *major >= 24 || (*major == 22 && *minor >= 21),
        _ => false,
    }
}

#[test]
fn node_fetch_goes_through_the_proxy_and_is_recorded() {
    agents_common::require_root();
    let f = fake::Fake::start(|_, _| fake::Reply::json(200, &serde_json::json!({"ok": true})));
    let port = f.url().rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let g = Governed::new();
    let text = policy(port);
    let js = format!(
        "fetch('http://tools.test:{port}/node').then(r => r.text()).then(t => console.log('BODY=' + t)).catch(e => {{ console.log('ERR=' + e.cause?.code); process.exit(3) }})"
    );
    let run = |sh: &str| {
        g.run(
            &Run::new(&text, None, &["/bin/sh", "-c", sh])
                .arg("--resolve")
                .arg("tools.test=127.0.0.1"),
        )
    };
    let out = run(&format!("/usr/bin/node -e \"{js}\""));
    if !node_has_env_proxy() {
        // Node before 22.21 has no env-proxy support in `fetch` at all:
        // the variable is inert, and the request fails closed, reaching
        // neither the fake nor anything else.
        eprintln!(
            "node {} has no NODE_USE_ENV_PROXY: checked fail-closed only",
            node_version().join(".")
        );
        assert_eq!(out.status, 3, "{}", out.stdout);
        assert!(f.seen().is_empty());
        return;
    }
    out.assert_ok();
    assert!(out.stdout.contains("BODY={\"ok\":true}"), "{}", out.stdout);
    assert_eq!(f.seen().len(), 1, "the fake was reached once");
    assert!(mentions(&out, "tools.test") > 0, "the proxy recorded it");
    assert!(out.verified);
    // Control: without the variable Node ignores the proxy, the name does
    // not resolve inside, and nothing reaches the fake or the journal.
    let ctl = run(&format!(
        "env -u NODE_USE_ENV_PROXY /usr/bin/node -e \"{js}\""
    ));
    assert_eq!(ctl.status, 3, "{}", ctl.stdout);
    assert_eq!(f.seen().len(), 1);
    assert_eq!(mentions(&ctl, "tools.test"), 0);
}

#[test]
fn git_sends_the_proxy_credentials_first_so_no_407_is_recorded() {
    agents_common::require_root();
    let f = fake::Fake::start(|_, _| fake::Reply::json(404, &serde_json::json!({})));
    let port = f.url().rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let g = Governed::new();
    let text = policy(port);
    let run = |sh: &str| {
        g.run(
            &Run::new(&text, None, &["/bin/sh", "-c", sh])
                .arg("--resolve")
                .arg("tools.test=127.0.0.1"),
        )
    };
    let cmd = format!("git ls-remote http://tools.test:{port}/repo.git; echo done");
    let out = run(&cmd);
    out.assert_ok();
    assert!(
        !f.seen().is_empty(),
        "git reached the fake through the proxy"
    );
    assert_eq!(auth_refusals(&out), 0, "{:#?}", out.records);
    // Control: without it git tries the proxy without credentials first.
    let ctl = run(&format!("env -u GIT_HTTP_PROXY_AUTHMETHOD {cmd}"));
    ctl.assert_ok();
    assert!(
        auth_refusals(&ctl) > 0,
        "the control records the 407: {:#?}",
        ctl.records
    );
}
