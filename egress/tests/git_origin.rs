//! The loopback git origin (`__git_origin`) itself: real `git` clones from
//! it and pushes to it directly, so a relay test that fails is the relay's.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::path::Path;
use std::process::Command;

use palisade_egress::__git_origin::GitOrigin;

fn git(dir: &Path, ca: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", "w")
        .env("GIT_AUTHOR_EMAIL", "w@example.invalid")
        .env("GIT_COMMITTER_NAME", "w")
        .env("GIT_COMMITTER_EMAIL", "w@example.invalid")
        .env("GIT_SSL_CAINFO", ca)
        .env_remove("CURL_CA_BUNDLE")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn real_git_clones_from_and_pushes_to_the_origin() {
    let origin = GitOrigin::start().unwrap();
    origin.create_bare("acme/app.git").unwrap();
    let first = origin
        .commit("acme/app.git", "main", "README", "hello\n")
        .unwrap();
    assert_eq!(
        origin
            .rev_parse("acme/app.git", "refs/heads/main")
            .as_deref(),
        Some(first.as_str())
    );
    assert_eq!(origin.rev_parse("acme/app.git", "refs/heads/nope"), None);

    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("ca.pem");
    std::fs::write(&ca, &origin.ca_pem).unwrap();
    let url = format!("{}/acme/app.git", origin.url("127.0.0.1"));
    let out = git(tmp.path(), &ca, &["clone", "--quiet", &url, "work"]);
    assert!(
        out.status.success(),
        "clone: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let work = tmp.path().join("work");
    assert_eq!(
        std::fs::read_to_string(work.join("README")).unwrap(),
        "hello\n"
    );
    assert_eq!(origin.requests("/info/refs"), 1);
    assert!(origin.requests("/git-upload-pack") >= 1);

    std::fs::write(work.join("more"), "more\n").unwrap();
    assert!(git(&work, &ca, &["add", "more"]).status.success());
    assert!(
        git(&work, &ca, &["commit", "--quiet", "-m", "more"])
            .status
            .success()
    );
    let out = git(
        &work,
        &ca,
        &[
            "-c",
            "http.extraHeader=Authorization: Basic dGVzdDp0ZXN0",
            "push",
            "--quiet",
            "origin",
            "HEAD:refs/heads/main",
        ],
    );
    assert!(
        out.status.success(),
        "push: {} {}",
        String::from_utf8_lossy(&out.stderr),
        origin.stderr()
    );
    let head = String::from_utf8(git(&work, &ca, &["rev-parse", "HEAD"]).stdout).unwrap();
    assert_eq!(
        origin
            .rev_parse("acme/app.git", "refs/heads/main")
            .as_deref(),
        Some(head.trim())
    );
    let auth = origin.authorizations("/git-receive-pack");
    assert_eq!(auth, vec![Some("Basic dGVzdDp0ZXN0".to_owned())]);
    let push = origin
        .seen()
        .into_iter()
        .rfind(|r| r.path.ends_with("/git-receive-pack"))
        .unwrap();
    assert!(push.body_complete && push.body_bytes > 0, "{push:?}");
}
