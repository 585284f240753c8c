//! `cargo xtask api [--bless]`: the public-API snapshot of every library
//! crate, checked in under `api/`, so that an API change shows in review.
//!
//! Each crate's rustdoc JSON is built with its default features only (a
//! `testing` feature never reaches the snapshot), in a target directory of
//! its own (`target/api/`: the `RUSTC_BOOTSTRAP=1` that unlocks rustdoc's
//! JSON output on the stable toolchain changes every fingerprint, and would
//! otherwise rebuild the main target directory on every call). The listing
//! is `cargo public-api` output, pinned to one version because another
//! version may print the same API differently. Without `--bless` the step
//! fails when a listing differs from its snapshot, printing which lines went
//! and came; with `--bless` it rewrites the snapshots.
//!
//! A listing that shows a fuzzing, benchmark or test-only internal
//! (`__fuzz`, `__bench`, …) is refused in both modes: those are compiled
//! only under `cfg(fuzzing)` or the `testing` feature, never in the API.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::{cargo, run, workspace_root};

/// The library crates whose public API is snapshotted.
pub(crate) const CRATES: &[&str] = &[
    "palisade-schema",
    "palisade-policy",
    "palisade-taint",
    "palisade-evidence",
    "palisade-egress",
    "palisade-isolate",
];

/// The `cargo public-api` version the snapshots are written with; `.ci/run`
/// installs exactly this one.
pub(crate) const CARGO_PUBLIC_API_VERSION: &str = "0.52.0";

/// Where the snapshots live, relative to the workspace root.
const SNAPSHOT_DIR: &str = "api";

/// Path segments of internals that must never be part of a public API.
const INTERNALS: &[&str] = &["__fuzz", "__bench", "__sign", "__escape", "__simulate_"];

/// At most this many changed lines are printed per crate.
const MAX_DIFF_LINES: usize = 200;

const USAGE: &str = "usage: cargo xtask api [--bless]";

/// Runs the step: check the snapshots, or rewrite them with `--bless`.
pub(crate) fn api(args: &[String]) -> Result<(), String> {
    let bless = match args {
        [] => false,
        [flag] if flag == "--bless" => true,
        _ => return Err(USAGE.to_owned()),
    };
    let root = workspace_root();
    check_tool()?;
    let target = root.join("target").join("api");
    build_rustdoc_json(&root, &target)?;
    let snapshots = root.join(SNAPSHOT_DIR);
    // Every listing first: internals refuse the whole step, bless included,
    // before any snapshot is written.
    let mut listings = Vec::new();
    for krate in CRATES {
        let listing = listing(&target, krate)?;
        refuse_internals(krate, &listing)?;
        listings.push((*krate, listing));
    }
    let mut changed = Vec::new();
    for (krate, listing) in listings {
        let file = snapshots.join(format!("{krate}.txt"));
        if bless {
            std::fs::create_dir_all(&snapshots)
                .map_err(|e| format!("{}: {e}", snapshots.display()))?;
            std::fs::write(&file, &listing).map_err(|e| format!("{}: {e}", file.display()))?;
            continue;
        }
        let old = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(format!("{}: {e}", file.display())),
        };
        if old != listing {
            // The new listing, whole, for a reviewer who wants more than the diff.
            let new_file = target.join(format!("{krate}.txt"));
            std::fs::write(&new_file, &listing)
                .map_err(|e| format!("{}: {e}", new_file.display()))?;
            eprintln!(
                "api: the public API of {krate} differs from {SNAPSHOT_DIR}/{krate}.txt (now: {}):\n{}",
                new_file.display(),
                diff(&old, &listing, MAX_DIFF_LINES)
            );
            changed.push(krate);
        }
    }
    if bless {
        println!(
            "api: wrote {} snapshots under {SNAPSHOT_DIR}/",
            CRATES.len()
        );
        return Ok(());
    }
    if changed.is_empty() {
        println!(
            "api: the public API of {} crates matches {SNAPSHOT_DIR}/",
            CRATES.len()
        );
        Ok(())
    } else {
        Err(format!(
            "the public API of {} changed; if that is intended, run `cargo xtask api --bless` and commit {SNAPSHOT_DIR}/",
            changed.join(", ")
        ))
    }
}

/// Fails unless `cargo public-api` is the pinned version.
fn check_tool() -> Result<(), String> {
    let install = format!(
        "install it with `cargo install cargo-public-api --locked --version {CARGO_PUBLIC_API_VERSION}` (.ci/run does)"
    );
    let out = cargo(&workspace_root())
        .args(["public-api", "--version"])
        .output()
        .map_err(|e| format!("cargo public-api: {e}; {install}"))?;
    let version = String::from_utf8_lossy(&out.stdout);
    let version = version.trim();
    if !out.status.success() {
        return Err(format!("cargo public-api is not installed; {install}"));
    }
    if version != format!("cargo-public-api {CARGO_PUBLIC_API_VERSION}") {
        return Err(format!(
            "found `{version}`, but the snapshots are written with cargo-public-api {CARGO_PUBLIC_API_VERSION}; {install}"
        ));
    }
    Ok(())
}

/// Builds the rustdoc JSON of every crate in [`CRATES`] under `target`, in
/// one cargo call (so the crates are documented in parallel).
fn build_rustdoc_json(root: &Path, target: &Path) -> Result<(), String> {
    let mut cmd = cargo(root);
    cmd.args(["doc", "--no-deps", "--lib", "--target-dir"])
        .arg(target);
    for krate in CRATES {
        cmd.args(["-p", krate]);
    }
    // Rustdoc's JSON output is unstable; this unlocks it on stable.
    cmd.env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTDOCFLAGS", "-Z unstable-options --output-format json")
        .env_remove("CARGO_ENCODED_RUSTDOCFLAGS");
    run(&mut cmd)
}

/// The `cargo public-api` listing of one crate's rustdoc JSON, blanket
/// implementations left out (auto traits such as `Send` stay: losing one
/// breaks callers).
fn listing(target: &Path, krate: &str) -> Result<String, String> {
    let json = target
        .join("doc")
        .join(format!("{}.json", krate.replace('-', "_")));
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.args([
        "public-api",
        "--simplified",
        "--color",
        "never",
        "--rustdoc-json",
    ])
    .arg(&json);
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8(out.stdout).map_err(|e| format!("{cmd:?}: {e}"))?;
    if text.trim().is_empty() {
        return Err(format!("{cmd:?} listed nothing for {krate}"));
    }
    Ok(text)
}

/// Fails when `listing` shows an internal of [`INTERNALS`] as public API.
fn refuse_internals(krate: &str, listing: &str) -> Result<(), String> {
    let found: Vec<&str> = listing
        .lines()
        .filter(|line| {
            INTERNALS
                .iter()
                .any(|i| line.contains(&format!("::{i}")) || line.contains(&format!(" {i}")))
        })
        .collect();
    if found.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the public API of {krate} shows internals (compile them only under `cfg(any(fuzzing, feature = \"testing\"))`):\n{}",
            found.join("\n")
        ))
    }
}

/// The lines that went (`-`) and came (`+`) between two listings, each in
/// its listing's order. A listing is a set of items (the order is
/// `cargo public-api`'s grouping), so this is a multiset difference, not a
/// positional diff; at most `max` lines are shown.
fn diff(old: &str, new: &str, max: usize) -> String {
    fn count(text: &str) -> BTreeMap<&str, usize> {
        let mut m = BTreeMap::new();
        for line in text.lines() {
            *m.entry(line).or_default() += 1;
        }
        m
    }
    let (mut in_new, mut in_old) = (count(new), count(old));
    let mut out = Vec::new();
    for line in old.lines() {
        match in_new.get_mut(line) {
            Some(n) if *n > 0 => *n -= 1,
            _ => out.push(format!("-{line}")),
        }
    }
    for line in new.lines() {
        match in_old.get_mut(line) {
            Some(n) if *n > 0 => *n -= 1,
            _ => out.push(format!("+{line}")),
        }
    }
    let more = out.len().saturating_sub(max);
    out.truncate(max);
    if more > 0 {
        out.push(format!("… and {more} more changed lines"));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_what_went_and_what_came() {
        let old = "pub mod a\npub fn a::f()\npub fn a::g()\n";
        let new = "pub mod a\npub fn a::g()\npub fn a::h(u8)\n";
        assert_eq!(diff(old, new, 10), "-pub fn a::f()\n+pub fn a::h(u8)");
        // The same listing has no diff; a moved line is no change.
        assert_eq!(diff(old, old, 10), "");
        assert_eq!(
            diff(old, "pub fn a::g()\npub mod a\npub fn a::f()\n", 10),
            ""
        );
    }

    #[test]
    fn diff_counts_repeated_lines() {
        let old = "impl Send for a::T\nimpl Send for a::T\n";
        assert_eq!(diff(old, "impl Send for a::T\n", 10), "-impl Send for a::T");
    }

    #[test]
    fn diff_is_bounded() {
        let new: String = (0..10).map(|i| format!("pub fn a::f{i}()\n")).collect();
        let shown = diff("", &new, 3);
        assert_eq!(shown.lines().count(), 4);
        assert!(shown.ends_with("… and 7 more changed lines"), "{shown}");
    }

    #[test]
    fn ci_installs_the_pinned_cargo_public_api() {
        let script = std::fs::read_to_string(workspace_root().join(".ci").join("run")).unwrap();
        let pin = format!("CARGO_PUBLIC_API_VERSION={CARGO_PUBLIC_API_VERSION}\n");
        assert!(
            script.contains(&pin),
            ".ci/run does not install cargo-public-api {CARGO_PUBLIC_API_VERSION} (expected a line `{}`)",
            pin.trim()
        );
    }

    #[test]
    fn internals_in_a_listing_are_refused() {
        let clean = "pub mod palisade_policy\npub fn palisade_policy::egress::decide()\n";
        assert!(refuse_internals("palisade-policy", clean).is_ok());
        for internal in [
            "pub mod palisade_policy::__fuzz",
            "pub fn palisade_evidence::__sign::sign()",
            "pub fn palisade_isolate::Sandbox::__simulate_unavailable(&mut self)",
        ] {
            let listing = format!("{clean}{internal}\n");
            let err = refuse_internals("palisade-x", &listing).unwrap_err();
            assert!(err.contains(internal), "{err}");
        }
    }
}
