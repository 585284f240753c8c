//! The agent suite's harness checked on its own, without an agent: one
//! governed run of a shell tool call, its identity read back, the journal
//! verified, and the leak scanner's positive control. Needs root.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]

mod agents_common;

use agents_common::{Governed, Run, identity_command, leaks, rev, tool_env, tool_identity};

const POLICY: &str = "[worker]\nprofile = \"governed\"\n";

#[test]
fn a_governed_tool_call_runs_as_the_worker_uid_without_capabilities() {
    agents_common::require_root();
    let g = Governed::new();
    let secret = rev("YEK-LAER-SSENRAH-edasilap");
    let cmd = identity_command("tool");
    let out = g.run(&Run::new(POLICY, None, &["/bin/sh", "-c", &cmd]).env("HARNESS_KEY", &secret));
    out.assert_ok();
    assert!(out.verified, "the journal verifies");
    assert!(!out.records.is_empty(), "the journal has records");
    let id = tool_identity(&g.work, "tool");
    assert_ne!(id.uid, 0, "the tool runs as the worker uid");
    assert!(id.no_caps(), "no capabilities: {:?}", id.caps);
    // The launcher's variable does not reach the worker.
    assert!(
        tool_env(&g.work, "tool")
            .iter()
            .all(|(k, _)| k != "HARNESS_KEY")
    );
    assert_eq!(
        leaks(&secret, &out, &[&g.work, &g.state]),
        Vec::<String>::new()
    );
    // Positive control: the scanner finds the secret once a file holds it.
    std::fs::write(g.work.join("planted"), &secret).unwrap();
    let found = leaks(&secret, &out, &[&g.work]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].ends_with("planted"));
}
