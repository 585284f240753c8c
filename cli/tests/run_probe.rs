//! `palisade run` and `palisade probe` end to end: exit codes (the
//! command's, 125 on setup failure), the launch report, the probe JSON.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_palisade");

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

#[test]
fn exit_code_is_the_commands() {
    if !is_root() {
        eprintln!("skipped: needs root (CI runs as root)");
        return;
    }
    let cwd = tempfile::tempdir().unwrap();
    for profile in ["strict", "governed", "maintenance"] {
        let out = Command::new(BIN)
            .args(["run", "--profile", profile, "--", "/bin/sh", "-c", "exit 3"])
            .current_dir(cwd.path())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(3),
            "{profile}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = Command::new(BIN)
        .args(["run", "--profile", "strict", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn setup_failure_exits_125_with_the_reason() {
    let mut cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["run", "--profile", "nope", "--", "/bin/true"],
            "unknown profile `nope`",
        ),
        (
            vec![
                "run",
                "--dangerously-disable",
                "mount_ns",
                "--",
                "/bin/true",
            ],
            "layer `mount_ns` cannot be downgraded",
        ),
        (
            vec![
                "run",
                "--profile",
                "strict",
                "--cwd",
                "relative/dir",
                "--",
                "/bin/true",
            ],
            "must be absolute",
        ),
    ];
    if is_root() {
        cases.push((
            vec!["run", "--profile", "strict", "--", "/nonexistent/program"],
            "cannot execute `/nonexistent/program`",
        ));
    }
    for (args, want) in cases {
        let out = Command::new(BIN)
            .args(&args)
            .current_dir("/")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn launch_report_is_written() {
    if !is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("launch.json");
    let out = Command::new(BIN)
        .args([
            "run",
            "--profile",
            "strict",
            "--launch-report",
            report.to_str().unwrap(),
            "--dangerously-disable",
            "uts_ns",
            "--",
            "/bin/true",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("dangerously disabled"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["profile"], "strict");
    assert!(
        v["mount_plan_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(v["downgraded"], serde_json::json!(["uts_ns"]));
    let layers = v["layers"].as_array().unwrap();
    assert!(
        layers
            .iter()
            .any(|l| l["layer"] == "landlock" && l["status"] == "active")
    );
    assert!(
        layers
            .iter()
            .any(|l| l["layer"] == "uts_ns" && l["status"] == "degraded")
    );
}

#[test]
fn probe_json_lists_every_layer() {
    let out = Command::new(BIN)
        .args(["probe", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["layer"].as_str().unwrap())
        .collect();
    for want in [
        "user_ns",
        "mount_ns",
        "pid_ns",
        "net_ns",
        "ipc_ns",
        "uts_ns",
        "landlock",
        "seccomp",
        "capabilities",
        "no_new_privs",
        "rlimits",
        "cgroups",
        "staged_writes",
        "read_observer",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    // The read observer's entry carries the probe's facts and a status word.
    let observer = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["layer"] == "read_observer")
        .unwrap();
    assert!(
        ["active", "degraded", "unavailable"].contains(&observer["status"].as_str().unwrap()),
        "{observer}"
    );
    assert!(
        !observer["detail"].as_str().unwrap().is_empty(),
        "{observer}"
    );
    let ready = v["ready"].as_bool().unwrap();
    assert_eq!(out.status.code(), Some(if ready { 0 } else { 1 }));
}

#[test]
fn termination_signals_reach_the_worker() {
    if !is_root() {
        return;
    }
    let cwd = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args([
            "run",
            "--profile",
            "governed",
            "--",
            "/bin/sh",
            "-c",
            "trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done",
        ])
        .current_dir(cwd.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut buf = [0u8; 6];
    std::io::Read::read_exact(&mut out, &mut buf).unwrap();
    assert_eq!(&buf, b"ready\n");
    let pid = i32::try_from(child.id()).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut status = None;
    for _ in 0..200 {
        if let Some(s) = child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("palisade did not end within 10 s of SIGTERM");
    };
    // The worker's trap ran: palisade exits with the worker's own code.
    assert_eq!(status.code(), Some(42));
}

#[test]
fn worker_uid_is_selectable_as_root() {
    if !is_root() {
        return;
    }
    let cwd = tempfile::tempdir().unwrap();
    // A stage kept for its refused change goes here, not to the host's default.
    let stages = tempfile::tempdir().unwrap();
    let stage_dir = stages.path().to_str().unwrap().to_owned();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--profile", "governed", "--stage-dir", &stage_dir];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "/bin/sh", "-c", "id -u; touch written"]);
        Command::new(BIN)
            .args(&args)
            .current_dir(cwd.path())
            .output()
            .unwrap()
    };
    // Default as root: the dedicated worker uid, which cannot write the
    // root-owned working directory. Staged, the overlay's top directory
    // keeps the root's owner and mode, so the kernel says no at once, as it
    // does under direct writes: the worker fails and nothing lands.
    for extra in [&[][..], &["--writes", "direct"][..]] {
        let out = run(extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "64000");
        assert_ne!(out.status.code(), Some(0), "{extra:?}: {err}");
        assert!(err.contains("Permission denied"), "{extra:?}: {err}");
        assert!(!cwd.path().join("written").exists(), "{extra:?}: {err}");
    }
    // Root's uid without the dangerous flag: refused, naming the flag, and
    // nothing ran.
    let out = run(&["--worker-uid", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("worker_uid_root") && err.contains("--dangerously-allow-root-worker"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    assert!(!cwd.path().join("written").exists());
    // Explicitly allowed: the write succeeds, capabilities stay dropped.
    let out = run(&["--worker-uid", "0", "--dangerously-allow-root-worker"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(cwd.path().join("written").exists());
}

#[test]
fn run_help_and_usage_errors_are_the_full_parsers() {
    // `palisade run` is parsed by a lean parser of its own; whatever it does
    // not accept goes to the full parser, so help and usage errors do not
    // change.
    let help = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("Usage: palisade run [OPTIONS] -- <COMMAND>..."),
        "{text}"
    );
    let via_help = Command::new(BIN).args(["help", "run"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&via_help.stdout),
        text,
        "`palisade help run` and `palisade run --help` differ"
    );
    let bad = Command::new(BIN)
        .args(["run", "--bogus", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("unexpected argument '--bogus'"), "{err}");
    // Positive control: the same command line without the bad flag parses
    // (a setup failure for an unknown profile, not a usage error).
    let ok = Command::new(BIN)
        .args(["run", "--profile", "nope", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(125));
}

/// The `Cpus_allowed_list` line of a `/proc/<pid>/status` text.
fn cpus_allowed(status: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_owned())
        .unwrap_or_default()
}

#[test]
fn the_worker_keeps_the_launchers_cpu_affinity() {
    // The supervisor moves itself to another CPU while it creates the
    // namespaces; init and the worker must not inherit that.
    if !is_root() {
        eprintln!("skipped: needs root (CI runs as root)");
        return;
    }
    let ours = cpus_allowed(&std::fs::read_to_string("/proc/self/status").unwrap());
    assert!(!ours.is_empty());
    let cwd = tempfile::tempdir().unwrap();
    for profile in ["strict", "governed"] {
        for _ in 0..5 {
            let out = Command::new(BIN)
                .args(["run", "--profile", profile, "--"])
                .args(["/bin/cat", "/proc/self/status"])
                .current_dir(cwd.path())
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                cpus_allowed(&String::from_utf8_lossy(&out.stdout)),
                ours,
                "{profile}"
            );
        }
    }
}

#[test]
fn a_directory_as_a_standard_stream_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root (CI runs as root)");
        return;
    }
    let cwd = tempfile::tempdir().unwrap();
    let run = |n: usize, s: std::process::Stdio| {
        let mut c = Command::new(BIN);
        c.args(["run", "--profile", "governed", "--", "/bin/true"])
            .current_dir(cwd.path())
            .stdin(std::process::Stdio::null());
        match n {
            0 => c.stdin(s).output().unwrap(),
            // The launcher's own error goes to standard error: capture it
            // when standard output is the stream under test, and the other
            // way round.
            1 => c
                .stdout(s)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
                .wait_with_output()
                .unwrap(),
            _ => c
                .stderr(s)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
                .wait_with_output()
                .unwrap(),
        }
    };
    let names = ["standard input", "standard output", "standard error"];
    for (n, name) in names.iter().enumerate() {
        let dir = std::fs::File::open("/etc").unwrap();
        let out = run(n, dir.into());
        assert_eq!(out.status.code(), Some(125), "fd {n}");
        if n != 2 {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(&format!("unsafe_stdio: {name} (fd {n}) is a directory")),
                "fd {n}: {err}"
            );
        }
        // Positive controls: /dev/null, a pipe and a regular file.
        let (_r, w) = std::io::pipe().unwrap();
        let file = tempfile::tempfile().unwrap();
        for (what, s) in [
            ("/dev/null", std::process::Stdio::null()),
            ("a pipe", w.into()),
            ("a file", file.into()),
        ] {
            let out = run(n, s);
            assert_eq!(
                out.status.code(),
                Some(0),
                "fd {n} as {what}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[test]
fn the_launchers_command_line_and_environment_are_not_visible_inside() {
    if !is_root() {
        eprintln!("skipped: needs root (CI runs as root)");
        return;
    }
    // The marker is on palisade's command line (an `--env` value) and in
    // its environment (a variable not passed through); the worker receives
    // it deliberately in its own environment only.
    let marker: String = "ENILDNAMMOC_TERCES_KRAM".chars().rev().collect();
    // Every process's command line and init's environment, read without
    // the marker on any command line (`case` is a shell builtin). A
    // control process carries the marker as its own argument, so the scan
    // provably finds it where it is.
    let script = r#"
        sh -c 'sleep 60; :' "$SEEN" & c=$!
        i=0
        while [ $i -lt 600 ]; do
            # Ready once the control shows the marker and its `sleep` has
            # been exec'd: until then the forked child shows the control's
            # command line too.
            case "$(tr '\0' ' ' < /proc/$c/cmdline)" in *"$SEEN"*)
                for p in /proc/[0-9]*/cmdline; do
                    case "$(tr '\0' ' ' 2>/dev/null < "$p")" in "sleep 60 ") break 2;; esac
                done;;
            esac
            sleep 0.05; i=$((i+1))
        done
        echo "control $c"
        for f in /proc/[0-9]*/cmdline /proc/1/environ; do
            case "$(tr '\0' ' ' 2>/dev/null < "$f")" in *"$SEEN"*) echo "hit $f";; esac
        done
        case "$(cat /proc/self/environ | tr '\0' ' ')" in *"$SEEN"*) echo own-environ;; esac
        kill $c
    "#;
    let cwd = tempfile::tempdir().unwrap();
    for profile in ["strict", "governed"] {
        let out = Command::new(BIN)
            .args(["run", "--profile", profile, "--env"])
            .arg(format!("SEEN={marker}"))
            .args(["--", "/bin/sh", "-c", script])
            .env("PALISADE_TEST_LAUNCHER_ONLY", &marker)
            .current_dir(cwd.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{profile}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<&str> = stdout.lines().collect();
        let control = lines
            .iter()
            .find_map(|l| l.strip_prefix("control "))
            .unwrap_or_else(|| panic!("{profile}: {stdout}"));
        let hits: Vec<&str> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("hit "))
            .collect();
        // Positive controls: the worker's own environment has the variable,
        // and the control process's command line shows the marker.
        assert!(lines.contains(&"own-environ"), "{profile}: {stdout}");
        assert_eq!(
            hits,
            vec![format!("/proc/{control}/cmdline")],
            "{profile}: the marker is visible elsewhere"
        );
    }
}

/// `palisade run --profile governed -- /bin/true` in `dir`, as `uid` when
/// given: (exit code, stderr).
fn run_true_in(dir: &std::path::Path, uid: Option<u32>) -> (Option<i32>, String) {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(BIN);
    c.args(["run", "--profile", "governed", "--", "/bin/true"])
        .current_dir(dir)
        .env_remove("XDG_RUNTIME_DIR");
    if let Some(uid) = uid {
        c.uid(uid).gid(uid);
    }
    let out = c.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn what_a_worker_leaves_behind_is_named_with_the_way_forward() {
    if !is_root() {
        eprintln!("skipped: needs root (CI runs as root)");
        return;
    }
    // A socket inode left in the working directory (bound, then closed:
    // nothing listens on it any more).
    let cwd = tempfile::tempdir().unwrap();
    let sock = cwd.path().join("left.sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let (code, err) = run_true_in(cwd.path(), None);
    assert_eq!(code, Some(125), "{err}");
    for want in [
        format!("`{}` is a Unix socket", sock.display()),
        String::from("an earlier worker may have left it"),
        String::from("remove it"),
    ] {
        assert!(err.contains(&want), "missing {want:?} in: {err}");
    }
    // Positive control: once removed, the launch succeeds.
    std::fs::remove_file(&sock).unwrap();
    let (code, err) = run_true_in(cwd.path(), None);
    assert_eq!(code, Some(0), "{err}");

    // A symlinked `.vscode` (a protected name kept read-only when present).
    let vscode = cwd.path().join(".vscode");
    std::os::unix::fs::symlink("/etc", &vscode).unwrap();
    let (code, err) = run_true_in(cwd.path(), None);
    assert_eq!(code, Some(125), "{err}");
    for want in [
        format!("`{}`", vscode.display()),
        String::from("is a symlink (to `/etc`)"),
        String::from("the worker could re-point it"),
        String::from("remove it"),
    ] {
        assert!(err.contains(&want), "missing {want:?} in: {err}");
    }
    std::fs::remove_file(&vscode).unwrap();
    let (code, err) = run_true_in(cwd.path(), None);
    assert_eq!(code, Some(0), "{err}");

    // A directory that can be entered but not listed, in the working
    // directory of an unprivileged launcher (root could list it anyway).
    use std::os::unix::fs::PermissionsExt;
    const NOBODY: u32 = 65_534;
    let own = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(own.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let sub = own.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::os::unix::fs::chown(&sub, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o111)).unwrap();
    let (code, err) = run_true_in(own.path(), Some(NOBODY));
    assert_eq!(code, Some(125), "{err}");
    for want in [
        format!("`{}`", sub.display()),
        String::from("mode 0111"),
        String::from("can be entered but not listed"),
        String::from("chmod u+r"),
    ] {
        assert!(err.contains(&want), "missing {want:?} in: {err}");
    }
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, err) = run_true_in(own.path(), Some(NOBODY));
    assert_eq!(code, Some(0), "{err}");
}

/// The record files in a state directory.
fn records(state: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(state.join("palisade"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("placeholders-"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Start `palisade run --writes direct -- /bin/sleep 60` in `cwd` (only
/// direct writes make placeholders), wait until its placeholders are
/// recorded, and kill it with SIGKILL.
fn launch_and_kill(cwd: &std::path::Path, state: &std::path::Path) {
    let mut child = Command::new(BIN)
        .args([
            "run",
            "--profile",
            "governed",
            "--writes",
            "direct",
            "--",
            "/bin/sleep",
            "60",
        ])
        .current_dir(cwd)
        .env("XDG_RUNTIME_DIR", state)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while records(state).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no record appeared");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn placeholders_a_killed_launch_left_are_removed_later_and_only_those() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        eprintln!("skipped: needs root (CI runs as root)");
        return;
    }
    let state = tempfile::tempdir().unwrap();
    std::fs::set_permissions(state.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let cleanup = || {
        let out = Command::new(BIN)
            .arg("cleanup")
            .env("XDG_RUNTIME_DIR", state.path())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    // A file of the user's at a protected name: protected, never a placeholder.
    std::fs::write(h.join(".zshrc"), "user's\n").unwrap();
    launch_and_kill(h, state.path());
    // The bug: the killed launcher's empty placeholders stay.
    let meta = std::fs::metadata(h.join(".bash_profile")).unwrap();
    assert_eq!(meta.len(), 0);
    // After the kill the user replaces one placeholder by a file of their
    // own (another inode) and writes into another (the same inode).
    std::fs::remove_file(h.join(".bashrc")).unwrap();
    std::fs::write(h.join(".bashrc"), "").unwrap();
    std::fs::write(h.join(".profile"), "user's\n").unwrap();
    let out = cleanup();
    let bash_profile = format!("removed {}", h.join(".bash_profile").display());
    assert!(out.lines().any(|l| l == bash_profile), "{out}");
    assert!(!h.join(".bash_profile").exists());
    assert!(
        !h.join(".palisade").exists(),
        "the directory placeholder stays"
    );
    // Never a file of the user's.
    assert!(h.join(".bashrc").exists(), "removed the user's new file");
    assert_eq!(
        std::fs::read_to_string(h.join(".profile")).unwrap(),
        "user's\n"
    );
    assert_eq!(
        std::fs::read_to_string(h.join(".zshrc")).unwrap(),
        "user's\n"
    );
    assert!(
        out.contains(&format!("kept {} (", h.join(".bashrc").display())),
        "{out}"
    );
    assert!(records(state.path()).is_empty(), "the record stays");
    // A second cleanup has nothing left to do.
    assert_eq!(cleanup(), "");

    // The next launch, here in the same directory, removes them as well,
    // and leaves no placeholder of its own behind when it ends normally.
    let other = tempfile::tempdir().unwrap();
    launch_and_kill(other.path(), state.path());
    assert!(other.path().join(".bash_profile").exists());
    let out = Command::new(BIN)
        .args([
            "run",
            "--profile",
            "governed",
            "--writes",
            "direct",
            "--",
            "/bin/true",
        ])
        .current_dir(other.path())
        .env("XDG_RUNTIME_DIR", state.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left: Vec<_> = std::fs::read_dir(other.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(records(state.path()).is_empty(), "a record stays");
}

#[test]
fn a_state_dir_inside_the_writable_root_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        eprintln!("skipped: needs root (CI runs as root)");
        return;
    }
    // The worker could write the socket-walk cache and the placeholder
    // records there: a forged cache entry skips a directory holding a socket,
    // a forged record has a later cleanup remove a file.
    let run = |cwd: &std::path::Path, state: &std::path::Path| {
        Command::new(BIN)
            .args(["run", "--profile", "governed", "--", "/bin/true"])
            .current_dir(cwd)
            .env("XDG_RUNTIME_DIR", state)
            .output()
            .unwrap()
    };
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = run(work.path(), work.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("state_dir_writable"), "{err}");
    assert!(
        !work.path().join("palisade").exists(),
        "the refused launch made its state directory"
    );
    // Positive control: the same launch with the state directory elsewhere.
    let state = tempfile::tempdir().unwrap();
    std::fs::set_permissions(state.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = run(work.path(), state.path());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
