//! `Profile::allow_nested_sandbox`: what a provider's own sandbox needs
//! (user namespaces, `AF_UNIX` sockets bound in `/tmp`, seqpacket pairs)
//! is refused by default and allowed with the option, and what the option
//! does not open stays shut inside a nested user namespace: the masks,
//! read-only paths, protected names, the mount syscalls and Landlock.
//! Real programs (`/usr/bin/unshare`, `python3`, `bwrap`) run inside a
//! `governed` sandbox; the sandbox forks before it enforces anything.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use palisade_isolate::{Command, Layer, Profile, Sandbox, Signal, Stdio};

const WORKER: u32 = palisade_isolate::DEFAULT_WORKER_UID;

/// Whether to skip: the suite needs root (CI runs it as root, where not
/// being root is a failure).
fn skip_unless_root() -> bool {
    if nix::unistd::getuid().is_root() {
        return false;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the nested-sandbox suite as root"
    );
    eprintln!("skipped: the suite runs as root");
    true
}

/// A writable working directory owned by the worker, directly under `/`
/// (never under `/tmp`, where socket files are allowed), with a protected
/// `.git/config`.
fn workdir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix(".palisade-nested-")
        .tempdir_in("/")
        .unwrap();
    std::fs::create_dir_all(d.path().join(".git")).unwrap();
    std::fs::write(d.path().join(".git/config"), "[core]\n").unwrap();
    let uid = Some(nix::unistd::Uid::from_raw(WORKER));
    for p in [d.path().to_owned(), d.path().join(".git")] {
        nix::unistd::chown(&p, uid, Some(nix::unistd::Gid::from_raw(WORKER))).unwrap();
    }
    d
}

fn governed(work: &Path, nested: bool) -> Sandbox {
    let mut profile = Profile::governed();
    if nested {
        profile.allow_nested_sandbox();
    }
    let mut sb = Sandbox::new(profile);
    sb.dangerous().disable(Layer::StagedWrites).unwrap();
    sb.writable(work).cwd(work);
    sb
}

/// Run `sh -c script` inside `sb`; its stdout and stderr together.
fn run(sb: &Sandbox, script: &str) -> String {
    let (r, w) = nix::unistd::pipe().unwrap();
    let w2 = w.try_clone().unwrap();
    let mut cmd = Command::new(["/bin/sh", "-c", script]);
    cmd.stdout = Stdio::Fd(w);
    cmd.stderr = Stdio::Fd(w2);
    cmd.stdin = Stdio::Null;
    let child = sb
        .spawn(cmd)
        .unwrap_or_else(|e| panic!("launch of {script:?} failed: {e}"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::fs::File::from(r).read_to_string(&mut out);
        let _ = tx.send(out);
    });
    let out = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(o) => o,
        Err(_) => {
            let _ = child.kill(Signal::KILL);
            panic!("{script:?} timed out");
        }
    };
    let _ = child.wait();
    out
}

const UNSHARE: &str = "/usr/bin/unshare -U true; echo unshare=$?";
const SEQPACKET: &str = "/usr/bin/python3 -c 'import socket; socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET); print(\"pair=ok\")' 2>&1 | tail -1";
const STREAM_PAIR: &str = "/usr/bin/python3 -c 'import socket; socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM); print(\"stream=ok\")'";

/// A Python one-liner binding a Unix socket at `path`: `bind=ok` or the
/// error's errno.
fn bind(path: &str) -> String {
    format!(
        "/usr/bin/python3 -c 'import socket,sys\ntry:\n  s=socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n  s.bind(sys.argv[1]); s.listen(1); print(\"bind=ok\")\nexcept OSError as e:\n  print(\"bind=errno\", e.errno)' {path}"
    )
}

#[test]
fn without_the_option_user_namespaces_and_seqpacket_pairs_are_refused() {
    if skip_unless_root() {
        return;
    }
    let work = workdir();
    let sb = governed(work.path(), false);
    let out = run(&sb, &format!("{UNSHARE}; {SEQPACKET}; {STREAM_PAIR}"));
    assert!(out.contains("unshare=1"), "{out}");
    assert!(out.contains("Operation not permitted"), "{out}");
    assert!(!out.contains("pair=ok"), "{out}");
    assert!(out.contains("PermissionError"), "{out}");
    // Positive control: a stream pair is allowed without the option.
    assert!(out.contains("stream=ok"), "{out}");
    let out = run(&sb, &bind("/tmp/s.sock"));
    assert!(
        out.contains("bind=errno 1"),
        "AF_UNIX socket() refused: {out}"
    );
}

#[test]
fn with_the_option_user_namespaces_seqpacket_pairs_and_tmp_sockets_work() {
    if skip_unless_root() {
        return;
    }
    let work = workdir();
    let sb = governed(work.path(), true);
    let in_work = work.path().join("w.sock").display().to_string();
    let out = run(
        &sb,
        &format!(
            "{UNSHARE}; {SEQPACKET}; {}; {}",
            bind("/tmp/s.sock"),
            bind(&in_work)
        ),
    );
    assert!(out.contains("unshare=0"), "{out}");
    assert!(out.contains("pair=ok"), "{out}");
    let binds: Vec<&str> = out.lines().filter(|l| l.starts_with("bind=")).collect();
    assert_eq!(binds, ["bind=ok", "bind=errno 13"], "{out}");
    assert!(!work.path().join("w.sock").exists());
}

#[test]
fn with_the_option_the_report_records_the_deviation() {
    let mut p = Profile::governed();
    assert!(!p.nested_sandbox());
    assert!(p.deviations().is_empty());
    p.allow_nested_sandbox().allow_nested_sandbox();
    assert!(p.nested_sandbox());
    assert_eq!(
        p.deviations(),
        [palisade_isolate::NESTED_SANDBOX_DEVIATION.to_owned()]
    );
}

#[test]
fn the_policy_key_turns_the_option_on() {
    let text = "[profiles.agent]\nbase = \"governed\"\nnested_sandbox = true\n\n[profiles.plain]\nbase = \"governed\"\n";
    let policy = palisade_schema::host_policy::parse("palisade.toml", text)
        .unwrap()
        .into_value();
    assert!(Profile::resolve(&policy, "agent").unwrap().nested_sandbox());
    assert!(!Profile::resolve(&policy, "plain").unwrap().nested_sandbox());
}

/// Inside `unshare -Urm` (root of a new user namespace with its own mount
/// namespace) the masks, read-only paths, protected names and the mount
/// syscalls still hold: Landlock and the locked mounts are inherited.
#[test]
fn a_nested_user_namespace_keeps_masks_read_only_paths_and_landlock() {
    if skip_unless_root() {
        return;
    }
    let secret_dir = tempfile::Builder::new()
        .prefix("palisade-nested-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let marker: String = "terces-detsen".chars().rev().collect();
    let secret = secret_dir.path().join("secret");
    std::fs::write(&secret, &marker).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(secret_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let work = workdir();
    let sb = governed(work.path(), true);
    let nested = format!(
        "id -u; cat {s}; echo read=$?; touch /usr/palisade-nested; echo usr=$?; \
         echo x >> .git/config; echo protected=$?; echo x > new; echo work=$?; \
         mount -t tmpfs none /var; echo mount=$?; umount -l /var; echo umount=$?",
        s = secret.display()
    );
    let out = run(
        &sb,
        &format!(
            "/usr/bin/unshare -Urm --propagation unchanged /bin/sh -c '{nested}'; echo outer=$?"
        ),
    );
    assert!(out.starts_with("0\n"), "root inside the namespace: {out}");
    assert!(!out.contains(&marker), "{out}");
    for want in [
        "read=1",
        "usr=1",
        "protected=2",
        "mount=32",
        "umount=32",
        "outer=0",
    ] {
        assert!(out.lines().any(|l| l == want), "{want}: {out}");
    }
    // Positive control: the working directory stays writable in there.
    assert!(out.lines().any(|l| l == "work=0"), "{out}");
    assert_eq!(
        std::fs::read_to_string(work.path().join(".git/config")).unwrap(),
        "[core]\n"
    );
    // Positive control for the mask: the host reads the file.
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), marker);
}

/// bwrap inside palisade: without the option it cannot create its user
/// namespace; with it, it gets past the namespaces and stops at its first
/// mount (`mount --make-rslave /`), which seccomp refuses and, with seccomp
/// removed, Landlock refuses too (a Landlock domain that restricts the
/// filesystem may not change the mount topology). So bwrap, and the
/// provider sandboxes built on it, cannot start inside palisade.
#[test]
fn bwrap_gets_past_the_namespaces_and_stops_at_its_first_mount() {
    if skip_unless_root() {
        return;
    }
    assert!(
        Path::new("/usr/bin/bwrap").exists(),
        "bwrap missing: apt-get install -y bubblewrap"
    );
    let work = workdir();
    let script = "bwrap --ro-bind / / --dev /dev --unshare-all true; echo bwrap=$?; \
                  bwrap --ro-bind / / --unshare-user true; echo bwrap_user=$?";
    let without = run(&governed(work.path(), false), script);
    assert_eq!(
        without
            .matches("No permissions to create new namespace")
            .count(),
        2,
        "{without}"
    );
    let with = run(&governed(work.path(), true), script);
    // --unshare-all includes --unshare-net, whose loopback setup needs a
    // netlink socket (refused); the user namespace alone reaches the mount.
    assert!(
        with.contains("Failed to create NETLINK_ROUTE socket"),
        "{with}"
    );
    assert!(
        with.contains("Failed to make / slave: Operation not permitted"),
        "{with}"
    );
    assert!(
        !with.contains("No permissions to create new namespace"),
        "{with}"
    );
    let mut sb = governed(work.path(), true);
    sb.dangerous().disable(Layer::Seccomp).unwrap();
    let landlock_only = run(
        &sb,
        "bwrap --ro-bind / / --unshare-user true; echo bwrap=$?",
    );
    assert!(
        landlock_only.contains("Failed to make / slave: Operation not permitted"),
        "Landlock alone refuses the mount: {landlock_only}"
    );
    // Positive control: without Landlock and seccomp (both removed on
    // purpose, the namespaces kept) bwrap starts.
    sb.dangerous().disable(Layer::Landlock).unwrap();
    let neither = run(
        &sb,
        "bwrap --ro-bind / / --unshare-user true; echo bwrap=$?",
    );
    assert!(neither.lines().any(|l| l == "bwrap=0"), "{neither}");
}
