//! End-to-end test of a custom sandbox profile from `palisade.toml`:
//! `palisade run --policy` with `worker.profile` naming a
//! `[profiles.<name>]` whose extra mask hides a host path that its base
//! (`governed`) shows. Needs root (as CI runs it); otherwise it says it was
//! skipped, and under CI a missing prerequisite is a failure.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    reason = "tests"
)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Removes the host directory planted for the test, even on failure.
struct Planted(std::path::PathBuf);
impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `cat FILE` under `worker.profile = PROFILE`; returns (status, stdout).
fn cat_under(dir: &Path, profile: &str, hidden: &Path, file: &Path) -> (i32, String) {
    let work = dir.join(format!("work-{profile}"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
    let policy = work.join("palisade.toml");
    std::fs::write(
        &policy,
        format!(
            "[profiles.hide]\nbase = \"governed\"\nmasks = [\"{}\"]\n\n[worker]\nprofile = \"{profile}\"\n",
            hidden.display()
        ),
    )
    .unwrap();
    let key = dir.join(format!("{profile}.key"));
    let k = palisade_evidence::JournalKey::generate().unwrap();
    std::fs::write(&key, k.expose_text().as_bytes()).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .arg("run")
        .arg("--cwd")
        .arg(&work)
        .arg("--policy")
        .arg(&policy)
        .arg("--journal")
        .arg(dir.join(format!("{profile}.journal")))
        .arg("--key")
        .arg(&key)
        .arg("--")
        .arg("/bin/cat")
        .arg(file)
        .output()
        .unwrap();
    eprintln!(
        "{profile}: status {:?}, stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn custom_profile_mask_hides_a_path_its_base_shows() {
    if !is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run this test as root"
        );
        eprintln!("skipped: the sandbox end-to-end tests run as root (CI does)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A host path outside every built-in mask and outside /tmp (private in
    // the sandbox), readable by the dedicated worker uid.
    let hidden =
        std::path::PathBuf::from(format!("/opt/palisade-profile-test-{}", std::process::id()));
    let _planted = Planted(hidden.clone());
    std::fs::create_dir_all(&hidden).unwrap();
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = hidden.join("visible.txt");
    let marker: String = "ELBISIV-TSOH".chars().rev().collect();
    std::fs::write(&file, &marker).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();

    // Positive control: the base profile shows the file.
    let (code, out) = cat_under(dir.path(), "governed", &hidden, &file);
    assert_eq!(code, 0, "governed must show {}", file.display());
    assert_eq!(out, marker);

    // The custom profile's extra mask hides it.
    let (code, out) = cat_under(dir.path(), "hide", &hidden, &file);
    assert_ne!(code, 0, "the custom mask must hide {}", file.display());
    assert_ne!(
        code, 125,
        "the sandbox must launch (the cat fails, not the setup)"
    );
    assert!(!out.contains(&marker), "the masked file leaked: {out}");
}

/// Runs `palisade run --policy` with `policy` in `work` (the working
/// directory), `argv` inside; returns (status, stdout, stderr).
fn run_policy(
    dir: &Path,
    work: &Path,
    tag: &str,
    policy: &str,
    argv: &[&str],
) -> (i32, String, String) {
    run_policy_flags(dir, work, tag, policy, &[], argv)
}

/// [`run_policy`] with more `palisade run` flags before the command.
fn run_policy_flags(
    dir: &Path,
    work: &Path,
    tag: &str,
    policy: &str,
    flags: &[&str],
    argv: &[&str],
) -> (i32, String, String) {
    let file = work.join(format!("{tag}.toml"));
    std::fs::write(&file, policy).unwrap();
    let key = dir.join(format!("{tag}.key"));
    let k = palisade_evidence::JournalKey::generate().unwrap();
    std::fs::write(&key, k.expose_text().as_bytes()).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_palisade"))
        .arg("run")
        .arg("--cwd")
        .arg(work)
        .arg("--policy")
        .arg(&file)
        .arg("--journal")
        .arg(dir.join(format!("{tag}.journal")))
        .arg("--key")
        .arg(&key)
        .args(flags)
        .arg("--")
        .args(argv)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_bind_a_worker_redirected_into_a_mask_is_refused() {
    if !is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run this test as root"
        );
        eprintln!("skipped: the sandbox end-to-end tests run as root (CI does)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hidden = std::path::PathBuf::from(format!(
        "/opt/palisade-redirect-test-{}",
        std::process::id()
    ));
    let _planted = Planted(hidden.clone());
    std::fs::create_dir_all(hidden.join("inner")).unwrap();
    for d in [&hidden, &hidden.join("inner")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let marker: String = "NEDDIH-TSOH".chars().rev().collect();
    std::fs::write(hidden.join("inner/secret.txt"), &marker).unwrap();
    std::fs::set_permissions(
        hidden.join("inner/secret.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("real")).unwrap();
    for d in [&work, &work.join("real")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    // What a worker of an earlier launch leaves in its working directory.
    std::os::unix::fs::symlink(hidden.join("inner"), work.join("build")).unwrap();
    let read = format!("/bin/cat {}/inner/secret.txt", hidden.display());
    let argv = ["/bin/sh", "-c", read.as_str()];
    // A custom profile's writable root and a `[worker]` read-only path, each
    // once through the planted symlink and once (the positive control) at a
    // real directory of the working directory.
    for (tag, key, table) in [
        ("custom", "writable", "profiles.ci"),
        ("worker", "read_only", "worker"),
    ] {
        for (sub, refused) in [("real", false), ("build", true)] {
            let body = format!("{key} = [\"{}\"]\n", work.join(sub).display());
            let policy = match table {
                "worker" => format!(
                    "[profiles.ci]\nbase = \"governed\"\nmasks = [\"{h}\"]\n\n[worker]\nprofile = \"ci\"\n{body}",
                    h = hidden.display()
                ),
                _ => format!(
                    "[profiles.ci]\nbase = \"governed\"\nmasks = [\"{h}\"]\n{body}\n[worker]\nprofile = \"ci\"\n",
                    h = hidden.display()
                ),
            };
            let (code, out, err) =
                run_policy(dir.path(), &work, &format!("{tag}-{sub}"), &policy, &argv);
            eprintln!("{tag} {sub}: status {code}, stderr: {err}");
            assert!(
                !out.contains(&marker),
                "{tag} {sub}: the masked file leaked"
            );
            if refused {
                assert_eq!(code, 125, "{tag} {sub}: {err}");
                assert!(err.contains("mask_redirected"), "{tag} {sub}: {err}");
            } else {
                // Launched: the cat fails on the mask, not the setup.
                assert_ne!(code, 125, "{tag} {sub}: {err}");
                assert_ne!(code, 0, "{tag} {sub}: the mask must hide the file");
            }
        }
    }
}

#[test]
fn a_governed_run_of_a_profile_without_network_is_refused_by_name() {
    if !is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run this test as root"
        );
        eprintln!("skipped: the sandbox end-to-end tests run as root (CI does)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
    let custom = "[profiles.offline]\nbase = \"governed\"\nnetwork = \"none\"\n\n";
    // Positive control: the governed base runs.
    let (code, _, err) = run_policy(
        dir.path(),
        &work,
        "online",
        &format!("{custom}[worker]\nprofile = \"governed\"\n"),
        &["/bin/true"],
    );
    assert_eq!(code, 0, "{err}");
    for (tag, profile) in [("strict", "strict"), ("offline", "offline")] {
        let (code, _, err) = run_policy(
            dir.path(),
            &work,
            tag,
            &format!("{custom}[worker]\nprofile = \"{profile}\"\n"),
            &["/bin/true"],
        );
        assert_eq!(code, 125, "{tag}: {err}");
        assert!(
            err.contains(&format!("profile `{profile}` has no network"))
                && err.contains("reaches its worker only through bridges"),
            "{tag}: {err}"
        );
        assert!(
            !dir.path().join(format!("{tag}.journal")).exists(),
            "{tag}: a journal was left"
        );
    }
}

/// `palisade run` resolves and applies the policy through isolate's
/// `Profile::resolve` and `Sandbox::apply_worker`: a refusal names the
/// policy file and the policy key, and a `--profile` that disagrees with
/// `worker.profile` says which flag fixes it.
#[test]
fn a_refused_worker_key_is_named_by_its_policy_key() {
    if !is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run this test as root"
        );
        eprintln!("skipped: the sandbox end-to-end tests run as root (CI does)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
    let custom = "[profiles.ci]\nbase = \"governed\"\n\n";
    // Positive controls: a lower limit, and a --profile that agrees, run.
    let (code, _, err) = run_policy(
        dir.path(),
        &work,
        "low",
        &format!("{custom}[worker]\nprofile = \"ci\"\nlimits = {{ pids = 64 }}\n"),
        &["/bin/true"],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_policy_flags(
        dir.path(),
        &work,
        "agree",
        &format!("{custom}[worker]\nprofile = \"governed\"\n"),
        &["--profile", "governed"],
        &["/bin/true"],
    );
    assert_eq!(code, 0, "{err}");

    let (code, _, err) = run_policy(
        dir.path(),
        &work,
        "high",
        &format!("{custom}[worker]\nprofile = \"ci\"\nlimits = {{ pids = 5000 }}\n"),
        &["/bin/true"],
    );
    assert_eq!(code, 125, "{err}");
    let file = work.join("high.toml");
    assert!(
        err.contains(&format!(
            "{}: worker.limits.pids = 5000: profile_weakened: RLIMIT_NPROC = 5000 is above the profile's 4096",
            file.display()
        )),
        "{err}"
    );
    assert!(
        !dir.path().join("high.journal").exists(),
        "a refused run keeps no journal"
    );

    let (code, _, err) = run_policy_flags(
        dir.path(),
        &work,
        "disagree",
        &format!("{custom}[worker]\nprofile = \"governed\"\n"),
        &["--profile", "ci"],
        &["/bin/true"],
    );
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains(
            "the policy asks for the `governed` profile but the sandbox uses `ci`: pass --profile governed"
        ),
        "{err}"
    );
}
