//! Build script of the `palisade` binary: records the commit it was built
//! from, for `palisade --version` (`0.1.0 (abc1234)`).
//!
//! The commit is `git rev-parse --short HEAD` in the crate's folder when git
//! and a repository are there, else `unknown` (a crates tarball, a build
//! without git): the build never fails for want of them. The man page is
//! not generated here: the command tree is made of every subcommand's
//! arguments, which live in the binary's modules, so `palisade man` prints
//! it from the very tree the binary parses with (see `docs/check.md`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PALISADE_COMMIT");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    // An explicit PALISADE_COMMIT (a packager's) wins over git.
    let commit = std::env::var("PALISADE_COMMIT")
        .ok()
        .filter(|c| {
            !c.is_empty() && c.len() <= 64 && c.chars().all(|ch| ch.is_ascii_alphanumeric())
        })
        .or_else(|| git(&dir, &["rev-parse", "--short", "HEAD"]))
        .filter(|c| c.chars().all(|ch| ch.is_ascii_hexdigit()))
        .unwrap_or_else(|| "unknown".to_owned());
    // Rebuild when HEAD moves: HEAD itself, the branch it names, and the
    // packed refs (only files that exist, or cargo would rerun every time).
    let resolve = |p: Option<String>| {
        p.map(|p| {
            if Path::new(&p).is_absolute() {
                PathBuf::from(p)
            } else {
                dir.join(p)
            }
        })
    };
    let git_dir = resolve(git(&dir, &["rev-parse", "--git-dir"]));
    let common = resolve(git(&dir, &["rev-parse", "--git-common-dir"]));
    let branch = git(&dir, &["symbolic-ref", "-q", "HEAD"]);
    let mut watch = Vec::new();
    if let Some(g) = &git_dir {
        watch.push(g.join("HEAD"));
    }
    if let Some(c) = &common {
        watch.push(c.join("packed-refs"));
        if let Some(b) = &branch {
            watch.push(c.join(b));
        }
    }
    for path in watch.iter().filter(|p| p.is_file()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rustc-env=PALISADE_COMMIT={commit}");
}
