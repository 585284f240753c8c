//! `palisade check --daemon-version`: an unknown provider option key is a
//! warning for a daemon newer than the one the option schemas model, and
//! an error otherwise; known keys stay strict.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_methods,
    reason = "tests write fixtures and run the binary"
)]

use std::process::{Command, Output};

use palisade_schema::options::MODELLED_DAEMON;

fn check(file: &std::path::Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_palisade"))
        .arg("check")
        .arg(file)
        .args(["--format", "json"])
        .args(extra)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn codes(o: &Output) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let list = v
        .as_array()
        .or_else(|| v["diagnostics"].as_array())
        .cloned()
        .unwrap_or_default();
    list.iter()
        .map(|d| {
            (
                d["severity"].as_str().unwrap_or("").to_owned(),
                d["code"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn fixture(dir: &tempfile::TempDir, options: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/providers/codex.yml"),
    )
    .unwrap()
    .replace("            web_search: disabled\n", options);
    let path = dir.path().join("w.yml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_newer_daemon_version_softens_unknown_option_keys_only() {
    let dir = tempfile::tempdir().unwrap();
    let added = fixture(
        &dir,
        "            web_search: disabled\n            added_later: true\n",
    );
    let strict = check(&added, &[]);
    assert_eq!(strict.status.code(), Some(1));
    assert_eq!(codes(&strict), [("error".into(), "unknown_key".into())]);

    let modelled = MODELLED_DAEMON.to_string();
    let same = check(&added, &["--daemon-version", &modelled]);
    assert_eq!(same.status.code(), Some(1));

    let newer = format!(
        "{}.{}.{}",
        MODELLED_DAEMON.major,
        MODELLED_DAEMON.minor + 1,
        0
    );
    let soft = check(&added, &["--daemon-version", &newer]);
    assert_eq!(
        soft.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&soft.stdout)
    );
    assert_eq!(
        codes(&soft),
        [("warning".into(), "unknown_option_newer_daemon".into())]
    );

    // A known key with a bad value is still an error for a newer daemon.
    let bad = fixture(&dir, "            web_search: sometimes\n");
    let o = check(&bad, &["--daemon-version", &newer]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(codes(&o), [("error".into(), "invalid_value".into())]);
}

#[test]
fn a_malformed_daemon_version_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let ok = fixture(&dir, "            web_search: disabled\n");
    let o = check(&ok, &["--daemon-version", "0.8"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("X.Y.Z"));
    assert_eq!(
        check(&ok, &["--daemon-version", "v0.8.0"]).status.code(),
        Some(0)
    );
}
