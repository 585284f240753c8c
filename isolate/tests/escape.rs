//! The escape suite of `sandboxing.md` §5: each attempt runs inside a
//! `strict` and/or `governed` sandbox and must fail with the expected errno
//! or result, and each has a positive control (the same attempt outside the
//! sandbox, or inside with only the layer under test removed) that
//! succeeds, so no case passes vacuously. The sandbox forks before
//! enforcing anything; the attempt runs in the `palisade-escape-probe`
//! binary and answers on a pipe. Every launch is bounded by a watchdog.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use palisade_isolate::{
    Command, Exit, Layer, Limit, Profile, RootView, Sandbox, SandboxError, Signal, SocketPolicy,
    Stdio, WorkerIdentity,
};

const PROBE: &str = env!("CARGO_BIN_EXE_palisade-escape-probe");
const WORKER: u32 = palisade_isolate::DEFAULT_WORKER_UID;

const EPERM: &str = "err 1";
const ENOENT: &str = "err 2";
const EACCES: &str = "err 13";
const EBUSY: &str = "err 16";
const EXDEV: &str = "err 18";
const EROFS: &str = "err 30";
const ENOSYS: &str = "err 38";
const ENETUNREACH: &str = "err 101";
const ENOKEY: &str = "err 126";

fn is_root() -> bool {
    nix::unistd::getuid().is_root()
}

/// A writable root owned by the worker uid, with a git repository, a
/// nested repository and an ordinary source directory.
struct Root {
    dir: tempfile::TempDir,
}

impl Root {
    fn new() -> Root {
        let dir = tempfile::Builder::new()
            .prefix("palisade-escape-")
            .tempdir()
            .unwrap();
        let p = dir.path();
        for d in [".git/hooks", "src", "sub/.git/hooks", "plain"] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        std::fs::write(p.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(p.join("sub/.git/config"), "[core]\n").unwrap();
        std::fs::write(p.join("src/lib.rs"), "// lib\n").unwrap();
        chown_tree(p);
        Root { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn join(&self, rel: &str) -> String {
        self.dir.path().join(rel).display().to_string()
    }
}

fn chown_tree(p: &Path) {
    if !is_root() {
        return;
    }
    let uid = Some(nix::unistd::Uid::from_raw(WORKER));
    let gid = Some(nix::unistd::Gid::from_raw(WORKER));
    nix::unistd::chown(p, uid, gid).unwrap();
    if p.is_dir() && !p.is_symlink() {
        for e in std::fs::read_dir(p).unwrap() {
            chown_tree(&e.unwrap().path());
        }
    }
}

fn probe_dir() -> PathBuf {
    Path::new(PROBE).parent().unwrap().to_owned()
}

/// Direct writes: the writable roots bound read-write, with placeholders
/// for absent protected names. The escape suite's run-time attempts are
/// tested against them (`--writes direct still passes the escape suite`);
/// staged writes have their own suite (`tests/staged.rs`).
fn direct(sb: &mut Sandbox) -> &mut Sandbox {
    sb.dangerous().disable(Layer::StagedWrites).unwrap();
    sb
}

fn sandbox(profile: &str, root: &Root) -> Sandbox {
    let mut sb = Sandbox::new(Profile::by_name(profile).unwrap());
    direct(&mut sb).writable(root.path()).cwd(root.path());
    // The probe binary must be visible in every profile: `strict` starts
    // from an empty root, and `governed` hides a build tree that lives under
    // the private /tmp or a masked home (as a CI clone may).
    sb.read_only(probe_dir());
    sb
}

/// Run the probe inside `sb`; the answer line. Bounded by a watchdog.
fn inside(sb: &Sandbox, args: &[&str]) -> String {
    let (r, w) = nix::unistd::pipe().unwrap();
    let mut argv = vec![PROBE.to_owned()];
    argv.extend(args.iter().map(|s| (*s).to_owned()));
    let mut cmd = Command::new(argv);
    cmd.stdout = Stdio::Fd(w);
    cmd.stdin = Stdio::Null;
    let child = sb
        .spawn(cmd)
        .unwrap_or_else(|e| panic!("launch for {args:?} failed: {e}"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::fs::File::from(r).read_to_string(&mut out);
        let _ = tx.send(out);
    });
    let out = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(o) => o,
        Err(_) => {
            let _ = child.kill(Signal::KILL);
            panic!("attempt {args:?} timed out");
        }
    };
    let _ = child.wait();
    out.trim_end().to_owned()
}

/// The positive control: the same attempt, unsandboxed.
fn outside(args: &[&str]) -> String {
    let out = std::process::Command::new(PROBE)
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
}

fn without(profile: &str, root: &Root, layer: Layer) -> Sandbox {
    let mut sb = sandbox(profile, root);
    sb.dangerous().disable(layer).unwrap();
    sb
}

fn host_scratch() -> tempfile::TempDir {
    // A host directory visible read-only in the governed view and absent
    // from the strict view: directly under `/`, never under /tmp (private)
    // or a masked tree, wherever the build tree happens to live. The suite
    // runs as root, and the directory is removed when the test ends.
    let d = tempfile::Builder::new()
        .prefix(".palisade-escape-host-")
        .tempdir_in("/")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// Whether to skip the suite on this machine. Under CI (`CI` set) not being
/// root is a failure, never a silent pass.
fn skip_unless_root() -> bool {
    if !is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the escape suite as root"
        );
        eprintln!("skipped: the suite runs as root (CI does); run as root to exercise it");
        return true;
    }
    false
}

// 1. Writes and reads outside policy.
#[test]
fn g01_writes_and_reads_outside_policy() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let host = host_scratch();
    let target = host.path().join("x").display().to_string();
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        let expected = if profile == "strict" { ENOENT } else { EROFS };
        assert_eq!(
            inside(&sb, &["write", &target]),
            expected,
            "{profile}: host write"
        );
        assert_eq!(
            inside(&sb, &["write", "/root/x"]),
            if profile == "strict" { ENOENT } else { EROFS },
            "{profile}: /root"
        );
        // A secret store: absent from strict's /etc, an empty file under
        // governed (masked, whatever the worker's uid).
        let shadow = inside(&sb, &["cat", "/etc/shadow"]);
        assert_eq!(
            shadow,
            if profile == "strict" { ENOENT } else { "ok" },
            "{profile}: /etc/shadow"
        );
        // Allowed twin: a write in the writable root, a read of an allowed path.
        assert_eq!(
            inside(&sb, &["write", &root.join("src/new.rs")]),
            "ok",
            "{profile}: twin write"
        );
        assert_eq!(
            inside(&sb, &["read", "/etc/passwd"]),
            "ok",
            "{profile}: twin read"
        );
    }
    // A configured mask hides a host directory and a host file (governed).
    std::fs::write(host.path().join("secret.txt"), "s").unwrap();
    std::fs::create_dir(host.path().join("private")).unwrap();
    std::fs::write(host.path().join("private/key"), "k").unwrap();
    let mut sb = sandbox("governed", &root);
    sb.mask(host.path().join("private"))
        .mask(host.path().join("secret.txt"));
    assert_eq!(
        inside(
            &sb,
            &["ls", &host.path().join("private").display().to_string()]
        ),
        "ok"
    );
    assert_eq!(
        inside(
            &sb,
            &["cat", &host.path().join("secret.txt").display().to_string()]
        ),
        "ok"
    );
    let unmasked = sandbox("governed", &root);
    assert_eq!(
        inside(
            &unmasked,
            &["cat", &host.path().join("secret.txt").display().to_string()]
        ),
        "ok s"
    );
    // Positive control: the same host write and read succeed unsandboxed.
    assert_eq!(outside(&["write", &target]), "ok");
    assert_eq!(outside(&["read", "/etc/shadow"]), "ok");
}

// 2. Protected paths inside a writable root (nested repository too), and
// read-only placeholders for absent ones.
#[test]
fn g02_protected_paths() {
    if skip_unless_root() {
        return;
    }
    for profile in ["strict", "governed"] {
        let root = Root::new();
        let sb = sandbox(profile, &root);
        for rel in [
            ".git/hooks/pre-commit",
            ".git/config",
            "sub/.git/hooks/post-checkout",
            "sub/.git/config",
            ".bashrc",
            ".palisade/policy.toml",
        ] {
            assert_eq!(
                inside(&sb, &["write", &root.join(rel)]),
                EROFS,
                "{profile}: {rel}"
            );
        }
        assert_eq!(
            inside(&sb, &["truncate", &root.join(".git/config")]),
            EROFS,
            "{profile}: truncate config"
        );
        assert_eq!(
            inside(&sb, &["write", &root.join("src/new.rs")]),
            "ok",
            "{profile}: twin"
        );
        // Placeholders are gone after the run; the host can write hooks.
        assert!(
            !root.path().join(".bashrc").exists(),
            "placeholder left behind"
        );
        assert_eq!(
            outside(&["write", &root.join(".git/hooks/pre-commit")]),
            "ok"
        );
        assert_eq!(
            outside(&["write", &root.join("sub/.git/hooks/post-checkout")]),
            "ok"
        );
    }
}

// 2b. An absent protected name stays uncreatable for the whole run: the
// placeholder goes only once every process of the sandbox has ended (it is
// removed while the namespaces are torn down, not before).
#[test]
fn g02_placeholder_holds_until_the_sandbox_has_ended() {
    if skip_unless_root() {
        return;
    }
    for profile in ["strict", "governed"] {
        let root = Root::new();
        let rc = root.join(".bashrc");
        let sb = sandbox(profile, &root);
        // The worker writes late, then lingers a little.
        let script = "sleep 0.3; echo x >> \"$1\"; sleep 0.1";
        let mut child = sb
            .spawn(Command::new(["/bin/sh", "-c", script, "sh", &rc]))
            .unwrap();
        // Both ways of waiting: reaping the supervisor, and returning on the
        // worker's status without waiting for the namespaces' teardown.
        if profile == "strict" {
            child.wait().unwrap();
        } else {
            assert_eq!(child.wait_forwarding(&[]).unwrap(), Exit::Exited(0));
            child.detach();
        }
        assert!(
            !root.path().join(".bashrc").exists(),
            "{profile}: .bashrc exists after the run (the worker created an absent protected name, or its placeholder was left behind)"
        );
        // Positive control: the same late write to an ordinary name lands.
        let plain = root.join("plain/late.txt");
        let child = sb
            .spawn(Command::new(["/bin/sh", "-c", script, "sh", &plain]))
            .unwrap();
        child.wait().unwrap();
        assert!(
            root.path().join("plain/late.txt").exists(),
            "{profile}: control"
        );
    }
}

// 2c. What the worker leaves running dies with it: an orphan cannot write
// after the worker's status is out (when the placeholders go).
#[test]
fn g02_orphans_die_with_the_worker() {
    if skip_unless_root() {
        return;
    }
    for profile in ["strict", "governed"] {
        let root = Root::new();
        let sb = sandbox(profile, &root);
        let late = root.join("plain/orphan.txt");
        let mut child = sb
            .spawn(Command::new([
                "/bin/sh",
                "-c",
                "(sleep 1; echo x > \"$1\") & exit 0",
                "sh",
                &late,
            ]))
            .unwrap();
        assert_eq!(child.wait_forwarding(&[]).unwrap(), Exit::Exited(0));
        child.detach();
        std::thread::sleep(Duration::from_millis(1500));
        assert!(
            !root.path().join("plain/orphan.txt").exists(),
            "{profile}: an orphan of the worker wrote after the worker's status"
        );
        // Positive control: the same background write lands when the worker
        // waits for it.
        let mut child = sb
            .spawn(Command::new([
                "/bin/sh",
                "-c",
                "(sleep 1; echo x > \"$1\") & wait",
                "sh",
                &late,
            ]))
            .unwrap();
        assert_eq!(child.wait_forwarding(&[]).unwrap(), Exit::Exited(0));
        child.detach();
        assert!(
            root.path().join("plain/orphan.txt").exists(),
            "{profile}: control"
        );
    }
}

// 3. Renaming or removing an ancestor of a protected path.
#[test]
fn g03_ancestor_rename_and_rmdir() {
    if skip_unless_root() {
        return;
    }
    for profile in ["strict", "governed"] {
        let root = Root::new();
        let sb = sandbox(profile, &root);
        assert_eq!(
            inside(&sb, &["rename", &root.join(".git"), &root.join("git2")]),
            EBUSY,
            "{profile}: .git"
        );
        assert_eq!(
            inside(&sb, &["rename", &root.join("sub"), &root.join("sub2")]),
            EBUSY,
            "{profile}: nested repo"
        );
        assert_eq!(
            inside(
                &sb,
                &["rename", &root.join("sub/.git"), &root.join("sub/g")]
            ),
            EBUSY,
            "{profile}: nested .git"
        );
        assert_eq!(
            inside(&sb, &["rmdir", &root.join(".git/hooks")]),
            EBUSY,
            "{profile}: rmdir hooks"
        );
        // Twin: an unprotected directory can be renamed.
        assert_eq!(
            inside(&sb, &["rename", &root.join("plain"), &root.join("plain2")]),
            "ok",
            "{profile}: twin"
        );
        // Control: outside, the rename works.
        assert_eq!(
            outside(&["rename", &root.join(".git"), &root.join("git2")]),
            "ok"
        );
    }
}

// 4. Symlinks and hardlinks.
#[test]
fn g04_symlinks_and_hardlinks() {
    if skip_unless_root() {
        return;
    }
    let host = host_scratch();
    let outside_target = host.path().join("via-link").display().to_string();
    for profile in ["strict", "governed"] {
        let root = Root::new();
        let sb = sandbox(profile, &root);
        std::os::unix::fs::symlink(&outside_target, root.path().join("out-link")).unwrap();
        let r = inside(&sb, &["write", &root.join("out-link")]);
        assert_eq!(
            r,
            if profile == "strict" { ENOENT } else { EROFS },
            "{profile}: write through outward symlink"
        );
        assert_eq!(
            inside(
                &sb,
                &["link", &root.join(".git/config"), &root.join("cfg-link")]
            ),
            EXDEV,
            "{profile}: hardlink"
        );
        // Twin: a symlink whose target stays inside the root.
        std::os::unix::fs::symlink(root.path().join("src/lib.rs"), root.path().join("in-link"))
            .unwrap();
        assert_eq!(
            inside(&sb, &["write", &root.join("in-link")]),
            "ok",
            "{profile}: twin"
        );
        // Control: outside, both work.
        assert_eq!(
            outside(&["link", &root.join(".git/config"), &root.join("cfg-link")]),
            "ok"
        );
    }
    assert_eq!(outside(&["write", &outside_target]), "ok");

    // A protected name that is a symlink, or a `.git` symlink in a nested
    // directory, cannot be kept read-only (a bind follows it): refused.
    for (make, rel) in [(".bashrc", ".bashrc"), ("sub2/.git", "sub2/.git")] {
        let root = Root::new();
        let link = root.path().join(make);
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(root.path().join("plain"), &link).unwrap();
        match sandbox("governed", &root).spawn(Command::new(["/bin/true"])) {
            Err(SandboxError::InvalidPath { path, reason }) => {
                assert_eq!(path, root.path().join(rel));
                assert!(reason.contains("symlink"), "{reason}");
                assert!(
                    reason.contains("an earlier worker left it, remove it"),
                    "{reason}"
                );
            }
            other => panic!("{rel}: expected a refusal, got {other:?}"),
        }
        // Control: the same root without the symlink launches.
        std::fs::remove_file(&link).unwrap();
        let c = sandbox("governed", &root)
            .spawn(Command::new(["/bin/true"]))
            .unwrap();
        assert_eq!(c.wait().unwrap(), Exit::Exited(0));
    }
}

// 5. The nested-namespace chain: new user namespace, new mount API, setns.
#[test]
fn g05_nested_namespace_chain() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let newuser = format!("{}", libc::CLONE_NEWUSER);
    let newuser_high = format!("{}", (1u64 << 32) | libc::CLONE_NEWUSER as u64);
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        assert_eq!(inside(&sb, &["unshare", &newuser]), EPERM, "{profile}");
        assert_eq!(
            inside(&sb, &["unshare", &newuser_high]),
            EPERM,
            "{profile}: high bits"
        );
        assert_eq!(inside(&sb, &["open_tree"]), EPERM, "{profile}");
        assert_eq!(inside(&sb, &["fsopen"]), EPERM, "{profile}");
        assert_eq!(inside(&sb, &["move_mount"]), EPERM, "{profile}");
        assert_eq!(inside(&sb, &["setns"]), EPERM, "{profile}");
        // Twins: threads and children still work.
        assert_eq!(inside(&sb, &["thread"]), "ok");
        assert_eq!(inside(&sb, &["fork-kill-child"]), "ok");
    }
    // Control with only seccomp removed: the nested user namespace is created.
    assert_eq!(
        inside(
            &without("governed", &root, Layer::Seccomp),
            &["unshare", &newuser]
        ),
        "ok"
    );
    // Controls outside: the kernel's own answers differ from the filter's.
    assert_eq!(outside(&["setns"]), "err 9");
    assert_eq!(outside(&["open_tree"]), "err 14");
    assert_eq!(outside(&["fsopen"]), "err 14");
}

// 6. Mount operations.
#[test]
fn g06_mount_operations() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        assert_eq!(inside(&sb, &["mount"]), EPERM, "{profile}");
        assert_eq!(inside(&sb, &["umount", "/proc"]), EPERM, "{profile}");
        assert_eq!(inside(&sb, &["pivot_root"]), EPERM, "{profile}");
        assert_eq!(inside(&sb, &["chroot", "/tmp"]), EPERM, "{profile}");
        assert_eq!(
            inside(&sb, &["mknod", &root.join("null")]),
            EPERM,
            "{profile}"
        );
        // Twin: the writable bind is still writable.
        assert_eq!(
            inside(&sb, &["write", &root.join("src/after-mount.rs")]),
            "ok"
        );
    }
    let host = host_scratch();
    assert_eq!(outside(&["mount"]), "err 14");
    assert_eq!(
        outside(&["mknod", &host.path().join("null").display().to_string()]),
        "ok"
    );
}

// 7. /proc: no host processes, no init internals, read-only sysctl.
#[test]
fn g07_proc() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        assert_eq!(
            inside(&sb, &["readlink", "/proc/1/root"]),
            EACCES,
            "{profile}"
        );
        assert_eq!(
            inside(&sb, &["read", "/proc/1/environ"]),
            EACCES,
            "{profile}"
        );
        assert_eq!(
            inside(&sb, &["write", "/proc/sys/kernel/hostname"]),
            EACCES,
            "{profile}"
        );
        let pids = inside(&sb, &["ls", "/proc"]);
        let n = pids
            .split(',')
            .filter(|s| s.chars().all(|c| c.is_ascii_digit()))
            .count();
        assert!(
            n <= 3,
            "{profile}: only the sandbox's processes in /proc, saw {pids}"
        );
        assert!(inside(&sb, &["status"]).starts_with("ok "), "twin");
        assert_eq!(
            inside(&sb, &["readlink", "/proc/self/root"]),
            "ok /",
            "twin"
        );
        // The mount table shows the sandbox only: no staging or old root.
        let mounts = inside(&sb, &["mountpoints"]);
        assert!(mounts.starts_with("ok /"), "{mounts}");
        for gone in ["/oldroot", "/newroot"] {
            assert!(
                !mounts.split(',').any(|m| m.starts_with(gone)),
                "{profile}: {gone} in {mounts}"
            );
        }
        if profile == "strict" {
            assert!(
                !mounts
                    .split(',')
                    .any(|m| m == "/home" || m == "/var" || m == "/boot"),
                "{mounts}"
            );
        }
    }
    // Control: outside, the root link of a same-uid process is readable.
    let own = format!("/proc/{}/root", std::process::id());
    assert!(outside(&["readlink", &own]).starts_with("ok /"));
}

// 8. Descriptor leaks.
#[test]
fn g08_descriptors() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    // A descriptor leaked on purpose by the launcher: F_DUPFD leaves
    // close-on-exec clear, and the high number makes it the highest one a
    // child inherits, so the probe's listing must drop its own descriptor
    // (the lowest free number), not merely the highest.
    let opened = std::fs::File::open("/").unwrap();
    let leak = nix::fcntl::fcntl(&opened, nix::fcntl::FcntlArg::F_DUPFD(1000)).unwrap();
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        assert_eq!(inside(&sb, &["fds"]), "ok 0,1,2", "{profile}");
    }
    let out = outside(&["fds"]);
    nix::unistd::close(leak).unwrap();
    let leak = leak.to_string();
    assert!(
        out.trim_start_matches("ok ")
            .split(',')
            .any(|fd| fd == leak),
        "control sees the leaked fd {leak}: {out}"
    );
}

// 8b. A directory (or an O_PATH descriptor) as a standard stream would let
// the worker open host files relative to it, past the masks: refused at
// the launch, naming the descriptor.
#[test]
fn g08_directory_as_a_standard_stream_is_refused() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    // A secret in a tree the governed view masks (/run).
    let reversed = "TERCES_OIDTS_KRAM";
    let marker: String = reversed.chars().rev().collect();
    let secret = tempfile::Builder::new()
        .prefix("palisade-stdio-")
        .tempdir_in("/run")
        .unwrap();
    std::fs::write(secret.path().join("token"), &marker).unwrap();
    std::fs::set_permissions(secret.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        secret.path().join("token"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let dir = || std::os::fd::OwnedFd::from(std::fs::File::open(secret.path()).unwrap());
    let o_path = || {
        nix::fcntl::open(
            &secret.path().join("token"),
            nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .unwrap()
    };
    // Positive control of the vector: unsandboxed, a directory as standard
    // input reads the secret relative to it.
    let out = std::process::Command::new(PROBE)
        .args(["read-at-stdin", "token"])
        .stdin(std::fs::File::open(secret.path()).unwrap())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        format!("ok {marker}")
    );
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        let launch = |n: usize, fd: std::os::fd::OwnedFd| {
            let mut cmd = Command::new([PROBE, "read-at-stdin", "token"]);
            cmd.stdin = Stdio::Null;
            cmd.stdout = Stdio::Null;
            cmd.stderr = Stdio::Null;
            match n {
                0 => cmd.stdin = Stdio::Fd(fd),
                1 => cmd.stdout = Stdio::Fd(fd),
                _ => cmd.stderr = Stdio::Fd(fd),
            }
            sb.spawn(cmd).map(|c| c.wait().unwrap())
        };
        for n in 0..3 {
            for (fd, kind) in [(dir(), "is a directory"), (o_path(), "is an O_PATH")] {
                match launch(n, fd) {
                    Err(e @ SandboxError::UnsafeStdio { .. }) => {
                        let msg = e.to_string();
                        assert!(
                            msg.contains(&format!("(fd {n}) {kind}")),
                            "{profile}: {msg}"
                        );
                    }
                    Err(e) => panic!("{profile}: fd {n}: unexpected refusal: {e}"),
                    Ok(code) => panic!("{profile}: fd {n} {kind} was launched (exit {code})"),
                }
            }
        }
        // Positive controls: /dev/null, a pipe and a regular file are
        // accepted on each descriptor (the probe runs; it reads nothing
        // relative to them).
        let file = tempfile::tempfile().unwrap();
        for n in 0..3 {
            let (_r, w) = nix::unistd::pipe().unwrap();
            let null = std::os::fd::OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
            let f = std::os::fd::OwnedFd::from(file.try_clone().unwrap());
            for fd in [null, w, f] {
                assert!(launch(n, fd).is_ok(), "{profile}: fd {n} refused");
            }
        }
        // The secret stays masked for a worker with ordinary streams.
        assert_eq!(
            inside(
                &sb,
                &["read", &secret.path().join("token").display().to_string()]
            ),
            ENOENT,
            "{profile}"
        );
    }
}

// 9. Direct egress.
#[test]
fn g09_direct_egress() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        // Landlock refuses every TCP connect but the bridge ports first;
        // UDP, which Landlock does not cover, meets the empty netns.
        assert_eq!(
            inside(&sb, &["connect-tcp", "192.0.2.1", "443"]),
            EACCES,
            "{profile}"
        );
        assert_eq!(
            inside(&sb, &["udp-send", "192.0.2.53", "53"]),
            ENETUNREACH,
            "{profile}"
        );
        assert_eq!(
            inside(&sb, &["socket", "17"]),
            EPERM,
            "{profile}: AF_PACKET"
        );
        assert_eq!(
            inside(&sb, &["socket", "16", "dgram"]),
            EPERM,
            "{profile}: AF_NETLINK"
        );
        assert_eq!(
            inside(&sb, &["connect-tcp", "127.0.0.1", &port]),
            EACCES,
            "{profile}: host loopback"
        );
        assert_eq!(inside(&sb, &["net-ifaces"]), "ok lo", "{profile}");
    }
    // Control with Landlock removed: the host listener is still unreachable
    // (own network namespace), and the outside address has no route.
    let weak = without("governed", &root, Layer::Landlock);
    assert_eq!(
        inside(&weak, &["connect-tcp", "127.0.0.1", &port]),
        "err 111"
    );
    assert_eq!(
        inside(&weak, &["connect-tcp", "192.0.2.1", "443"]),
        ENETUNREACH
    );
    // Controls outside: the host loopback listener and netlink work.
    assert_eq!(outside(&["connect-tcp", "127.0.0.1", &port]), "ok");
    assert_eq!(outside(&["socket", "16", "dgram"]), "ok");
    assert_ne!(outside(&["net-ifaces"]), "ok lo");
}

// 9b. The one way out: the bridge to a host Unix socket.
#[test]
fn g09_bridge_reaches_host_socket() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let sockdir = tempfile::tempdir().unwrap();
    let sock = sockdir.path().join("proxy.sock");
    let server = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        for conn in server.incoming().flatten() {
            let mut conn = conn;
            let mut buf = [0u8; 1024];
            let _ = std::io::Read::read(&mut conn, &mut buf);
            let _ = std::io::Write::write_all(&mut conn, b"HTTP/1.0 200 OK\r\n\r\nbridged");
        }
    });
    let mut sb = sandbox("governed", &root);
    sb.bridge(palisade_isolate::Bridge::new(3128, sock.clone()));
    assert_eq!(
        inside(&sb, &["http-get", "3128", "http://example.test/"]),
        "ok HTTP/1.0 200 OK"
    );
    // The bridge port is the only one: another loopback port is refused by
    // Landlock, and the host socket itself is not reachable by path.
    assert_eq!(inside(&sb, &["connect-tcp", "127.0.0.1", "3129"]), EACCES);
    assert_eq!(
        inside(&sb, &["connect-unix", &sock.display().to_string()]),
        EPERM
    );
    // Strict has no network: a bridge is refused before launch.
    let mut strict = sandbox("strict", &root);
    strict.bridge(palisade_isolate::Bridge::new(3128, sock.clone()));
    assert!(strict.spawn(Command::new(["/bin/true"])).is_err());
}

// 10. DNS exfiltration: no resolver is reachable.
#[test]
fn g10_dns() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        assert!(
            inside(&sb, &["resolve", "secret.exfil.example"]).starts_with("err"),
            "{profile}"
        );
        // Twin: names from /etc/hosts resolve.
        assert_eq!(inside(&sb, &["resolve", "localhost"]), "ok", "{profile}");
    }
}

// 12. AF_UNIX and friends, including a listening socket under /var/run
// and an abstract socket of the host.
#[test]
fn g12_unix_sockets() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let rundir = tempfile::Builder::new()
        .prefix("palisade-escape-")
        .tempdir_in("/var/run")
        .unwrap();
    let runsock = rundir.path().join("host.sock");
    let _l = std::os::unix::net::UnixListener::bind(&runsock).unwrap();
    let name = format!("palisade-escape-{}", std::process::id());
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _abs = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let runsock_s = runsock.display().to_string();
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        assert_eq!(inside(&sb, &["socket", "1"]), EPERM, "{profile}: AF_UNIX");
        assert_eq!(
            inside(&sb, &["socket", &format!("{}", (1u64 << 32) | 1)]),
            EPERM,
            "{profile}: high bits"
        );
        assert_eq!(inside(&sb, &["socket", "40"]), EPERM, "{profile}: AF_VSOCK");
        assert_eq!(inside(&sb, &["socketpair", "dgram"]), EPERM, "{profile}");
        assert_eq!(inside(&sb, &["io_uring"]), EPERM, "{profile}");
        assert_eq!(
            inside(&sb, &["connect-unix", &runsock_s]),
            EPERM,
            "{profile}: /var/run"
        );
        assert_eq!(
            inside(&sb, &["connect-abstract", &name]),
            EPERM,
            "{profile}: abstract"
        );
        // Twin: stream socketpair IPC works.
        assert_eq!(inside(&sb, &["socketpair", "stream"]), "ok", "{profile}");
    }
    // With only seccomp removed, the masks and the namespaces still hold.
    let weak = without("governed", &root, Layer::Seccomp);
    assert_eq!(inside(&weak, &["connect-unix", &runsock_s]), ENOENT);
    let abs = inside(&weak, &["connect-abstract", &name]);
    assert!(
        abs == EPERM || abs == "err 111",
        "abstract socket reachable: {abs}"
    );
    // Controls outside.
    assert_eq!(outside(&["connect-unix", &runsock_s]), "ok");
    assert_eq!(outside(&["connect-abstract", &name]), "ok");
    assert_eq!(outside(&["io_uring"]), "err 14");
}

// 3 (item). Socket walk: a socket in the writable root, and a socket
// bind-mounted onto a file path inside the cwd.
#[test]
fn g12_socket_walk() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let sock = root.path().join("agent.sock");
    let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let marker = root.path().join("ran.txt");
    let marker_s = marker.display().to_string();
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        // The walk runs while the sandbox builds its namespaces; the command
        // must not have run when the refusal comes back.
        match sb.spawn(Command::new([PROBE, "write", &marker_s])) {
            Err(SandboxError::SocketVisible { path, how }) => {
                assert_eq!(path, sock);
                assert_eq!(how, "directory walk");
            }
            other => panic!("{profile}: expected a refusal, got {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !marker.exists(),
            "{profile}: the command ran before the socket walk refused the launch"
        );
        // Positive control: with the mask policy the launch proceeds and the
        // socket is hidden.
        let mut p = Profile::by_name(profile).unwrap();
        p.mask_sockets();
        assert_eq!(p.socket_policy(), SocketPolicy::Mask);
        let mut sb = Sandbox::new(p);
        direct(&mut sb)
            .writable(root.path())
            .cwd(root.path())
            .read_only(probe_dir());
        assert_eq!(
            inside(&sb, &["connect-unix", &sock.display().to_string()]),
            EPERM
        );
        // Positive control for the marker: the same command, launched, runs.
        assert_eq!(inside(&sb, &["write", &marker_s]), "ok");
        assert!(marker.exists(), "{profile}: marker control");
        std::fs::remove_file(&marker).unwrap();
    }
    std::fs::remove_file(&sock).unwrap();

    // A socket bind-mounted onto a regular file in the cwd: invisible to a
    // directory listing, found through the mount table. Done in a forked
    // child with its own mount namespace so the host is untouched.
    let root2 = Root::new();
    let file = root2.path().join("innocent.txt");
    std::fs::write(&file, "").unwrap();
    let sockdir = tempfile::tempdir().unwrap();
    let hidden = sockdir.path().join("hidden.sock");
    let _l2 = std::os::unix::net::UnixListener::bind(&hidden).unwrap();
    let code = fork_and(|| {
        use nix::mount::{MsFlags, mount};
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).unwrap();
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .unwrap();
        mount(
            Some(&hidden),
            &file,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap();
        let mut sb = Sandbox::new(Profile::governed());
        direct(&mut sb).writable(root2.path()).cwd(root2.path());
        match sb.spawn(Command::new(["/bin/true"])) {
            Err(SandboxError::SocketVisible {
                path,
                how: "mount point",
            }) if path == file => 0,
            // No printing in the forked child (locks held by other test
            // threads at fork time): the code says what happened.
            Err(SandboxError::SocketVisible { .. }) => 2,
            Err(_) => 3,
            Ok(_) => 4,
        }
    });
    assert_eq!(code, 0);
    // Control: without the bind mount the same launch succeeds.
    let mut sb = Sandbox::new(Profile::governed());
    direct(&mut sb).writable(root2.path()).cwd(root2.path());
    assert_eq!(
        sb.spawn(Command::new(["/bin/true"]))
            .unwrap()
            .wait()
            .unwrap(),
        Exit::Exited(0)
    );
}

/// The socket-walk cache: a read-only tree recorded by one launch is
/// checked by `stat` on the next, and a socket made in one of its
/// directories afterwards is still found.
#[test]
fn g12_socket_walk_cache() {
    use std::os::unix::fs::MetadataExt;
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let ro = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ro.path().join("a/b")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().join("walk");
    let marker = root.path().join("ran.txt");
    let marker_s = marker.display().to_string();
    // Older than the racy margin, so that the listing is recorded.
    std::thread::sleep(Duration::from_millis(1_100));
    let mut sb = sandbox("strict", &root);
    sb.read_only(ro.path()).walk_cache(&cache_dir);
    // Positive control: the launch runs, and records the tree.
    assert_eq!(inside(&sb, &["write", &marker_s]), "ok");
    std::fs::remove_file(&marker).unwrap();
    let text = std::fs::read_to_string(cache_dir.join("socket-walk-cache")).unwrap();
    let b = std::fs::symlink_metadata(ro.path().join("a/b")).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("{} {} ", b.dev(), b.ino()))),
        "a/b not recorded:\n{text}"
    );
    // A socket made in the recorded directory: refused, the command not run.
    // The listener is closed at once, so the socket file is in no kernel
    // table: only the walk can find it.
    let sock = ro.path().join("a/b/agent.sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    match sb.spawn(Command::new([PROBE, "write", &marker_s])) {
        Err(SandboxError::SocketVisible { path, how }) => {
            assert_eq!(path, sock);
            assert_eq!(how, "directory walk");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(!marker.exists(), "the command ran");
}

fn fork_and(f: impl FnOnce() -> i32) -> i32 {
    // Run `f` in a forked copy of this test process and exit with its
    // result without returning to the harness.
    match palisade_isolate::__escape::fork_for_tests() {
        0 => {
            let c = f();
            palisade_isolate::__escape::exit_for_tests(c)
        }
        pid => palisade_isolate::__escape::wait_for_tests(pid),
    }
}

// 13. Privilege state.
#[test]
fn g13_privilege_state() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        let st = inside(&sb, &["status"]);
        for want in [
            "NoNewPrivs: 1",
            "CapInh: 0000000000000000",
            "CapPrm: 0000000000000000",
            "CapEff: 0000000000000000",
            "CapBnd: 0000000000000000",
            "CapAmb: 0000000000000000",
            "Seccomp: 2",
        ] {
            assert!(st.contains(want), "{profile}: missing {want} in {st}");
        }
        // A setuid-root binary still runs, unprivileged.
        assert_eq!(
            inside(&sb, &["exec", "/usr/bin/id", "-u"]),
            format!("ok 0 {WORKER}"),
            "{profile}"
        );
    }
    let st = outside(&["status"]);
    assert!(
        !st.contains("CapEff: 0000000000000000") && st.contains("NoNewPrivs: 0"),
        "control: {st}"
    );
}

// 14. Terminal injection.
#[test]
fn g14_terminal_injection() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let tiocsti = format!("{}", libc::TIOCSTI);
    let tiocsti_high = format!("{}", (1u64 << 32) | libc::TIOCSTI);
    let tioclinux = format!("{}", libc::TIOCLINUX);
    let tcgets = format!("{}", libc::TCGETS);
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        assert_eq!(inside(&sb, &["ioctl-pty", &tiocsti]), EPERM, "{profile}");
        assert_eq!(
            inside(&sb, &["ioctl-pty", &tiocsti_high]),
            EPERM,
            "{profile}: high bits"
        );
        assert_eq!(inside(&sb, &["ioctl-pty", &tioclinux]), EPERM, "{profile}");
        assert_eq!(
            inside(&sb, &["ioctl-pty", &tcgets]),
            "ok",
            "{profile}: twin"
        );
    }
    // Control with only seccomp removed: the kernel accepts TIOCSTI on the
    // controlling terminal, and TIOCLINUX is not a pty ioctl.
    let weak = without("governed", &root, Layer::Seccomp);
    assert_eq!(inside(&weak, &["ioctl-pty", &tiocsti]), "ok");
    assert_ne!(inside(&weak, &["ioctl-pty", &tioclinux]), EPERM);
}

// 15. Cross-process reach.
#[test]
fn g15_cross_process() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        assert_eq!(inside(&sb, &["ptrace-child"]), EPERM, "{profile}");
        assert_eq!(inside(&sb, &["process_vm-self"]), EPERM, "{profile}");
        assert_eq!(
            inside(&sb, &["kill", "1", "0"]),
            EPERM,
            "{profile}: signal init"
        );
        assert_eq!(inside(&sb, &["fork-kill-child"]), "ok", "{profile}: twin");
    }
    assert_eq!(outside(&["ptrace-child"]), "ok");
    assert_eq!(outside(&["process_vm-self"]), "ok");
}

// 16. Namespace creation: clone3 answers ENOSYS so libc falls back.
#[test]
fn g16_namespace_creation() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        assert_eq!(inside(&sb, &["clone3"]), ENOSYS, "{profile}");
        assert_eq!(
            inside(&sb, &["unshare", &format!("{}", libc::CLONE_NEWNET)]),
            EPERM,
            "{profile}"
        );
        assert_eq!(inside(&sb, &["thread"]), "ok", "{profile}: twin");
    }
    assert_eq!(outside(&["clone3"]), "err 22");
}

// 16b. Seccomp beyond namespaces: x32 syscall numbers and the kernel
// attack surface the deny list closes.
#[test]
fn g16_x32_and_kernel_surface() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let x32_getpid = format!("{}", 0x4000_0000 | libc::SYS_getpid);
    let calls = [
        ("keyctl", libc::SYS_keyctl),
        ("perf_event_open", libc::SYS_perf_event_open),
        ("bpf", libc::SYS_bpf),
        ("userfaultfd", libc::SYS_userfaultfd),
        ("init_module", libc::SYS_init_module),
    ];
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        assert_eq!(
            inside(&sb, &["syscall", &x32_getpid]),
            EPERM,
            "{profile}: x32"
        );
        for &(name, nr) in &calls {
            assert_eq!(
                inside(&sb, &["syscall", &nr.to_string()]),
                EPERM,
                "{profile}: {name}"
            );
        }
        assert_eq!(
            inside(&sb, &["personality", "8"]),
            EPERM,
            "{profile}: PER_LINUX32"
        );
        // Twins: ordinary calls and the personality query work.
        assert!(inside(&sb, &["syscall", &libc::SYS_getpid.to_string()]).starts_with("ok "));
        assert!(inside(&sb, &["personality", "0xffffffff"]).starts_with("ok"));
    }
    // The i386 ABI (int 0x80 from 64-bit code, the way to socketcall and
    // to every 32-bit syscall number) is killed, not answered.
    #[cfg(target_arch = "x86_64")]
    {
        let sigsys = format!("ok {}", 128 + libc::SIGSYS);
        for profile in ["strict", "governed"] {
            assert_eq!(
                inside(&sandbox(profile, &root), &["i386-getpid"]),
                sigsys,
                "{profile}"
            );
        }
        // Control: this kernel runs i386 syscalls, and with only seccomp
        // removed the call answers.
        let emulated = outside(&["i386-getpid"]);
        assert_ne!(emulated, sigsys, "control");
        assert_eq!(
            inside(
                &without("governed", &root, Layer::Seccomp),
                &["i386-getpid"]
            ),
            emulated,
            "control without seccomp"
        );
    }
    // Controls: this kernel has no x32 ABI (ENOSYS without the filter);
    // outside, the other calls reach the kernel and fail its own way.
    assert_eq!(outside(&["syscall", &x32_getpid]), ENOSYS);
    assert_eq!(
        inside(
            &without("governed", &root, Layer::Seccomp),
            &["syscall", &x32_getpid]
        ),
        ENOSYS
    );
    for (name, nr) in calls {
        assert_ne!(
            outside(&["syscall", &nr.to_string()]),
            EPERM,
            "control {name}"
        );
    }
}

// 16c. Kernel surface that only missing capabilities held: packet sockets
// by way of SOCK_PACKET, the newer mount readers and cloners, quotactl_fd,
// modify_ldt, and line-discipline changes on a terminal. openat2, whose
// mode the filter cannot read, answers ENOSYS so callers fall back.
#[test]
fn g16_surface_held_only_by_capabilities() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    #[cfg_attr(
        not(target_arch = "x86_64"),
        expect(unused_mut, reason = "modify_ldt is added on x86-64")
    )]
    let mut calls: Vec<(&str, i64)> = vec![
        ("statmount", 457),
        ("listmount", 458),
        ("open_tree_attr", 467),
        ("quotactl_fd", libc::SYS_quotactl_fd),
        // Sets the clock like the denied clock_adjtime (a NULL buffer:
        // EFAULT once allowed).
        ("adjtimex", libc::SYS_adjtimex),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.push(("modify_ldt", libc::SYS_modify_ldt));
    let tiocsetd = format!("{}", libc::TIOCSETD);
    let openat2 = libc::SYS_openat2.to_string();
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        assert_eq!(
            inside(&sb, &["socket", "2", "packet"]),
            EPERM,
            "{profile}: SOCK_PACKET"
        );
        for &(name, nr) in &calls {
            assert_eq!(
                inside(&sb, &["syscall", &nr.to_string()]),
                EPERM,
                "{profile}: {name}"
            );
        }
        assert_eq!(
            inside(&sb, &["ioctl-pty", &tiocsetd]),
            EPERM,
            "{profile}: TIOCSETD"
        );
        assert_eq!(inside(&sb, &["syscall", &openat2]), ENOSYS, "{profile}");
        // Twins: stream and datagram AF_INET sockets, reading the terminal
        // settings and the window size, and (a choice, see docs/sandbox.md)
        // changing the settings of a pty of the worker's own.
        assert_eq!(inside(&sb, &["socket", "2"]), "ok", "{profile}");
        assert_eq!(inside(&sb, &["socket", "2", "dgram"]), "ok", "{profile}");
        for req in [libc::TCGETS, libc::TIOCGWINSZ, libc::TCSETS] {
            assert_eq!(
                inside(&sb, &["ioctl-pty", &req.to_string()]),
                "ok",
                "{profile}: ioctl {req:#x}"
            );
        }
    }
    // Controls outside: each call reaches the kernel and answers its own
    // way, and a root process gets its packet socket.
    assert_eq!(outside(&["socket", "2", "packet"]), "ok");
    for &(name, nr) in &calls {
        assert_ne!(
            outside(&["syscall", &nr.to_string()]),
            EPERM,
            "control {name}"
        );
    }
    assert_ne!(outside(&["syscall", &openat2]), ENOSYS);
    // With only seccomp removed, the kernel reads the line discipline.
    let weak = without("governed", &root, Layer::Seccomp);
    assert_ne!(inside(&weak, &["ioctl-pty", &tiocsetd]), EPERM);
}

// 16d. TCP Fast Open connects without connect(), where Landlock checks the
// port: every way to start one is refused, inside the network namespace
// and on the host's loopback when that namespace is switched off.
#[test]
fn g16_tcp_fast_open() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let ways = ["sendto", "sendmsg", "sendmmsg", "connect-opt"];
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        // The probe listens on a loopback port of its own, which Landlock
        // denies to connect().
        for how in ways {
            assert_eq!(
                inside(&sb, &["fastopen", how, "127.0.0.1", "self"]),
                EPERM,
                "{profile}: {how}"
            );
        }
        // Twin: a datagram sendto without the flag.
        assert_eq!(
            inside(&sb, &["udp-send", "127.0.0.1", "9"]),
            "ok",
            "{profile}"
        );
    }
    // Control with only seccomp removed: Landlock refuses connect(), also
    // after TCP_FASTOPEN_CONNECT, but a Fast Open send gets through.
    let weak = without("governed", &root, Layer::Seccomp);
    assert_eq!(
        inside(&weak, &["fastopen", "connect-opt", "127.0.0.1", "self"]),
        EACCES
    );
    for how in ["sendto", "sendmsg", "sendmmsg"] {
        assert_eq!(
            inside(&weak, &["fastopen", how, "127.0.0.1", "self"]),
            "ok",
            "control {how}"
        );
    }
    assert_eq!(
        outside(&["fastopen", "connect-opt", "127.0.0.1", "self"]),
        "ok"
    );

    // Without the network namespace, the host's loopback listener.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let mut shared = sandbox("governed", &root);
    shared.dangerous().disable(Layer::NetworkNamespace).unwrap();
    assert_eq!(
        inside(&shared, &["connect-tcp", "127.0.0.1", &port]),
        EACCES
    );
    for how in ways {
        assert_eq!(
            inside(&shared, &["fastopen", how, "127.0.0.1", &port]),
            EPERM,
            "shared netns: {how}"
        );
    }
    // Control without seccomp: the host's own Fast Open setting decides
    // (client side off: EOPNOTSUPP, nothing to bypass).
    let client = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_fastopen")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_some_and(|v| v & 1 != 0);
    shared.dangerous().disable(Layer::Seccomp).unwrap();
    assert_eq!(
        inside(&shared, &["fastopen", "sendto", "127.0.0.1", &port]),
        if client { "ok" } else { "err 95" },
        "control: shared netns without seccomp"
    );
    drop(listener);

    // Positive control: connect() to an allowed port (a bridge) and plain
    // sends on the connected socket (std sends with MSG_NOSIGNAL).
    let sockdir = tempfile::tempdir().unwrap();
    let sock = sockdir.path().join("proxy.sock");
    let server = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        for conn in server.incoming().flatten() {
            let mut conn = conn;
            let mut buf = [0u8; 1024];
            let _ = std::io::Read::read(&mut conn, &mut buf);
            let _ = std::io::Write::write_all(&mut conn, b"HTTP/1.0 200 OK\r\n\r\nbridged");
        }
    });
    let mut bridged = sandbox("governed", &root);
    bridged.bridge(palisade_isolate::Bridge::new(3128, sock));
    assert_eq!(
        inside(&bridged, &["http-get", "3128", "http://example.test/"]),
        "ok HTTP/1.0 200 OK"
    );
}

// 16d'. Landlock's TCP rule covers sockets of the TCP protocol only: an
// MPTCP socket (which falls back to plain TCP with any TCP peer), SCTP and
// the other stream protocols connect wherever they like. Only TCP and UDP
// (and ping) sockets can be made.
#[test]
fn g16_no_tcp_without_the_tcp_protocol() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    // MPTCP 262, SCTP 132, SMC 256; SOCK_SEQPACKET with protocol 0 is SCTP.
    let others = [
        ("stream", "262"),
        ("stream", "132"),
        ("stream", "256"),
        ("seqpacket", "0"),
    ];
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        for (ty, proto) in others {
            assert_eq!(
                inside(&sb, &["connect-proto", ty, proto, "127.0.0.1", "self"]),
                EPERM,
                "{profile}: {ty} protocol {proto}"
            );
        }
        // Twins: TCP by protocol 0 and by IPPROTO_TCP reaches Landlock,
        // which refuses the port; UDP sockets are made.
        for proto in ["0", "6"] {
            assert_eq!(
                inside(
                    &sb,
                    &["connect-proto", "stream", proto, "127.0.0.1", "self"]
                ),
                EACCES,
                "{profile}: TCP protocol {proto}"
            );
        }
        assert_eq!(inside(&sb, &["socket", "2", "dgram"]), "ok", "{profile}");
        // A TCP socket cannot become another protocol's either: TCP_ULP
        // "smc" turns it into an SMC socket, which Landlock does not check
        // (kernels with SMC); kTLS ("tls") goes with it.
        for ulp in ["smc", "tls"] {
            assert_eq!(
                inside(&sb, &["tcp-sockopt", "ulp", ulp]),
                EPERM,
                "{profile}: TCP_ULP {ulp}"
            );
        }
        assert_eq!(inside(&sb, &["tcp-sockopt", "nodelay"]), "ok", "{profile}");
    }
    // Control: outside, the kernel answers TCP_ULP its own way (no such
    // module, or not connected).
    for ulp in ["smc", "tls"] {
        assert_ne!(
            outside(&["tcp-sockopt", "ulp", ulp]),
            EPERM,
            "control {ulp}"
        );
    }
    // Control: this kernel's MPTCP gets past Landlock without the filter,
    // inside the network namespace and on the host's loopback.
    let mptcp =
        std::fs::read_to_string("/proc/sys/net/mptcp/enabled").is_ok_and(|v| v.trim() == "1");
    let bypass = if mptcp { "ok" } else { "err 93" };
    let weak = without("governed", &root, Layer::Seccomp);
    assert_eq!(
        inside(
            &weak,
            &["connect-proto", "stream", "262", "127.0.0.1", "self"]
        ),
        bypass,
        "control: MPTCP without seccomp"
    );
    assert_eq!(
        inside(
            &weak,
            &["connect-proto", "stream", "6", "127.0.0.1", "self"]
        ),
        EACCES,
        "control: TCP without seccomp"
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let mut shared = sandbox("governed", &root);
    shared.dangerous().disable(Layer::NetworkNamespace).unwrap();
    assert_eq!(
        inside(
            &shared,
            &["connect-proto", "stream", "262", "127.0.0.1", &port]
        ),
        EPERM,
        "shared netns: MPTCP"
    );
    shared.dangerous().disable(Layer::Seccomp).unwrap();
    assert_eq!(
        inside(
            &shared,
            &["connect-proto", "stream", "262", "127.0.0.1", &port]
        ),
        bypass,
        "control: shared netns, MPTCP without seccomp"
    );
    drop(listener);
    // Positive control: an explicit IPPROTO_TCP socket reaches an allowed
    // port (a bridge).
    let sockdir = tempfile::tempdir().unwrap();
    let sock = sockdir.path().join("proxy.sock");
    let server = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || for _conn in server.incoming().flatten() {});
    let mut bridged = sandbox("governed", &root);
    bridged.bridge(palisade_isolate::Bridge::new(3128, sock));
    assert_eq!(
        inside(
            &bridged,
            &["connect-proto", "stream", "6", "127.0.0.1", "3128"]
        ),
        "ok"
    );
}

// 16e. Set-id artifacts: the worker cannot leave a setuid or setgid file in
// a writable root for the host to run later, by changing a mode or by
// creating a file with one; the writable roots are nosuid,nodev inside.
#[test]
fn g16_no_setid_artifacts() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let mode_on_host = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    // The legacy path calls exist on x86-64 only.
    let legacy = cfg!(target_arch = "x86_64");
    let changers = ["chmod", "fchmod", "fchmodat", "fchmodat2"]
        .into_iter()
        .filter(|k| legacy || *k != "chmod");
    let changers: Vec<&str> = changers.collect();
    let creators: Vec<&str> = ["open", "openat", "creat", "mknod", "mknodat"]
        .into_iter()
        .filter(|k| legacy || k.ends_with("at"))
        .collect();
    for profile in ["strict", "governed"] {
        let sb = sandbox(profile, &root);
        for &kind in &changers {
            let f = root.path().join(format!("{profile}-{kind}"));
            std::fs::write(&f, "#!/bin/sh\n").unwrap();
            chown_tree(&f);
            let path = f.display().to_string();
            for mode in ["4755", "2755", "6755"] {
                assert_eq!(
                    inside(&sb, &["mode", kind, &path, mode]),
                    EPERM,
                    "{profile}: {kind} {mode}"
                );
                assert_eq!(mode_on_host(&f) & 0o6000, 0, "{profile}: {kind} {mode}");
            }
            // Twin: an ordinary mode change works and shows on the host.
            assert_eq!(
                inside(&sb, &["mode", kind, &path, "0755"]),
                "ok",
                "{profile}: {kind}"
            );
            assert_eq!(mode_on_host(&f), 0o755, "{profile}: {kind}");
        }
        for &kind in &creators {
            let f = root.path().join(format!("{profile}-new-{kind}"));
            let path = f.display().to_string();
            for mode in ["4755", "2755"] {
                assert_eq!(
                    inside(&sb, &["mode", kind, &path, mode]),
                    EPERM,
                    "{profile}: {kind} {mode}"
                );
                assert!(!f.exists(), "{profile}: {kind} {mode} created it");
            }
            assert_eq!(
                inside(&sb, &["mode", kind, &path, "0755"]),
                "ok",
                "{profile}: {kind}"
            );
            assert_eq!(mode_on_host(&f) & 0o6000, 0, "{profile}: {kind}");
        }
        for m in [root.path().display().to_string(), String::from("/tmp")] {
            let opts = inside(&sb, &["mountopts", &m]);
            assert!(
                opts.starts_with("ok ") && opts.contains("nosuid") && opts.contains("nodev"),
                "{profile}: {m}: {opts}"
            );
        }
    }
    // Control with only seccomp removed: the kernel lets the owner set the
    // bit, and the host sees it (the check above can fail).
    let weak = without("governed", &root, Layer::Seccomp);
    let f = root.path().join("control");
    std::fs::write(&f, "#!/bin/sh\n").unwrap();
    chown_tree(&f);
    assert_eq!(
        inside(
            &weak,
            &["mode", "fchmodat", &f.display().to_string(), "4755"]
        ),
        "ok"
    );
    assert_eq!(mode_on_host(&f), 0o4755);
    let opts = outside(&["mountopts", "/"]);
    assert!(
        opts.starts_with("ok ") && !opts.contains("nosuid"),
        "control: {opts}"
    );
}

// 16f. The launcher's session keyring, and the keys in it, are not the
// worker's: it runs with a new one (checked with seccomp off, which would
// refuse keyctl anyway).
#[test]
fn g16_fresh_session_keyring() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let desc = format!("palisade-launcher-key-{}", std::process::id());
    // This test's thread becomes a launcher with a key in its session
    // keyring, which its children inherit.
    let launcher = palisade_isolate::__escape::run(&[String::from("keyring-new"), desc.clone()]);
    assert!(launcher.starts_with("ok "), "{launcher}");
    assert!(outside(&["key-find", &desc]).starts_with("ok"), "control");
    assert_eq!(outside(&["keyring"]), launcher, "control");
    let weak = without("governed", &root, Layer::Seccomp);
    assert_eq!(inside(&weak, &["key-find", &desc]), ENOKEY);
    let worker = inside(&weak, &["keyring"]);
    assert!(worker.starts_with("ok "), "{worker}");
    assert_ne!(worker, launcher);
    // Twin: keyctl works in there, on the worker's own keyring.
    assert_eq!(inside(&weak, &["key-own", "palisade-worker-key"]), "ok");
    // With seccomp, keyctl is refused outright.
    assert_eq!(inside(&sandbox("governed", &root), &["keyring"]), EPERM);
    // Nor are the launcher's keys listed: /proc/keys shows every key the
    // reader's uid owns, in whatever keyring, so a worker with the
    // launcher's uid (an unprivileged launcher, or a worker uid of 0) read
    // their descriptions there, seccomp or not.
    let own = tempfile::tempdir().unwrap();
    let mut same_uid = Sandbox::new(Profile::by_name("governed").unwrap());
    direct(&mut same_uid)
        .writable(own.path())
        .cwd(own.path())
        .read_only(probe_dir())
        .identity(WorkerIdentity::Invoker);
    // The invoker is root here: that takes the root-worker door, and no
    // process limit (the kernel applies none to root).
    same_uid
        .dangerous()
        .allow_root_worker()
        .set_limit(Limit::Processes, None);
    assert!(outside(&["cat", "/proc/keys"]).contains(&desc), "control");
    for file in ["/proc/keys", "/proc/key-users"] {
        assert_eq!(inside(&same_uid, &["cat", file]), "ok", "{file}");
    }
    // Twin: the rest of /proc reads as usual.
    assert!(inside(&same_uid, &["cat", "/proc/self/status"]).contains("Seccomp:"));
}

// 17. UID separation.
#[test]
fn g17_uid_separation() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let host = host_scratch();
    let private = host.path().join("other-worker");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let sb = sandbox("governed", &root);
    assert_eq!(inside(&sb, &["uid"]), format!("ok {WORKER} {WORKER}"));
    assert_eq!(inside(&sb, &["ls", &private.display().to_string()]), EACCES);
    assert_eq!(inside(&sb, &["setuid", "0"]), EPERM);
    assert_eq!(inside(&sb, &["write", &root.join("mine")]), "ok", "twin");
    assert!(outside(&["ls", &private.display().to_string()]).starts_with("ok"));
}

// 17b. A worker with root's uid needs the dangerous door, and even then the
// secret stores (owner-only files of root) stay masked.
#[test]
fn g17_root_worker_needs_dangerous_and_secret_stores_stay_masked() {
    use palisade_isolate::WorkerIdentity;
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    // Refused without the door: uid 0 named, and the invoker (root).
    for identity in [
        WorkerIdentity::Dedicated { uid: 0, gid: 0 },
        WorkerIdentity::Dedicated {
            uid: WORKER,
            gid: 0,
        },
        WorkerIdentity::Invoker,
    ] {
        for profile in ["strict", "governed"] {
            let mut sb = sandbox(profile, &root);
            sb.identity(identity);
            match sb.spawn(Command::new([PROBE, "uid"])) {
                Err(e @ SandboxError::RootWorker { .. }) => {
                    assert!(e.to_string().starts_with("worker_uid_root: "), "{e}");
                }
                Err(e) => panic!("{profile} {identity:?}: unexpected error {e}"),
                Ok(_) => panic!("{profile} {identity:?}: launched without the door"),
            }
        }
    }
    // A root-owned owner-only file that is no secret store: a uid-0 worker
    // reads it (so uid 0 is in effect), the default worker does not.
    let host = host_scratch();
    let own = host.path().join("root-only");
    std::fs::write(&own, "mine").unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600)).unwrap();
    let own_s = own.display().to_string();
    let stores = [
        "/etc/shadow",
        "/etc/gshadow",
        "/proc/slabinfo",
        "/proc/timer_list",
    ];
    // Positive control: outside, root reads every store, and each has content.
    for f in stores {
        if Path::new(f).exists() {
            let out = outside(&["cat", f]);
            assert!(out.len() > "ok ".len(), "control: {f} empty outside: {out}");
        }
    }
    for profile in ["strict", "governed"] {
        let mut sb = sandbox(profile, &root);
        sb.identity(WorkerIdentity::Dedicated { uid: 0, gid: 0 });
        sb.dangerous()
            .allow_root_worker()
            // The kernel applies no RLIMIT_NPROC to host root: a process limit
            // would be refused, so a root worker runs without one.
            .set_limit(Limit::Processes, None);
        assert_eq!(inside(&sb, &["uid"]), "ok 0 0", "{profile}");
        for f in stores {
            let got = inside(&sb, &["cat", f]);
            // Masked: an empty file (governed, /proc) or absent (strict /etc).
            assert!(
                got == "ok" || got == ENOENT,
                "{profile}: {f} readable by a uid-0 worker: {} bytes",
                got.len()
            );
        }
        for d in ["/etc/ssl/private", "/sys/firmware"] {
            let got = inside(&sb, &["ls", d]);
            assert!(got == "ok" || got == ENOENT, "{profile}: {d} listed: {got}");
        }
        // A broad explicit read does not show the stores again.
        let mut broad = sandbox(profile, &root);
        broad
            .identity(WorkerIdentity::Dedicated { uid: 0, gid: 0 })
            .read_only("/etc");
        broad
            .dangerous()
            .allow_root_worker()
            // The kernel applies no RLIMIT_NPROC to host root: a process limit
            // would be refused, so a root worker runs without one.
            .set_limit(Limit::Processes, None);
        assert_eq!(inside(&broad, &["cat", "/etc/shadow"]), "ok", "{profile}");
        assert!(
            inside(&broad, &["cat", "/etc/passwd"]).starts_with("ok root:"),
            "{profile}: twin: /etc/passwd readable"
        );
    }
    let mut sb = sandbox("governed", &root);
    sb.identity(WorkerIdentity::Dedicated { uid: 0, gid: 0 });
    sb.dangerous()
        .allow_root_worker()
        // The kernel applies no RLIMIT_NPROC to host root: a process limit
        // would be refused, so a root worker runs without one.
        .set_limit(Limit::Processes, None);
    assert_eq!(inside(&sb, &["cat", &own_s]), "ok mine", "uid 0 in effect");
    assert_eq!(
        inside(&sandbox("governed", &root), &["cat", &own_s]),
        EACCES
    );
    // An explicit read of a store itself is a deliberate grant.
    let mut sb = sandbox("governed", &root);
    sb.identity(WorkerIdentity::Dedicated { uid: 0, gid: 0 })
        .read_only("/etc/shadow");
    sb.dangerous()
        .allow_root_worker()
        // The kernel applies no RLIMIT_NPROC to host root: a process limit
        // would be refused, so a root worker runs without one.
        .set_limit(Limit::Processes, None);
    assert!(inside(&sb, &["cat", "/etc/shadow"]).starts_with("ok root:"));
}

// 18. Resource exhaustion.
#[test]
fn g18_resources() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let mut p = Profile::governed();
    p.limit(Limit::Processes, 16)
        .unwrap()
        .limit(Limit::AddressSpace, 1 << 30)
        .unwrap()
        .limit_tmp_size(8 << 20)
        .unwrap();
    let mut sb = Sandbox::new(p);
    direct(&mut sb)
        .writable(root.path())
        .cwd(root.path())
        .read_only(probe_dir());
    let forks: u32 = inside(&sb, &["fork-many", "64"])
        .trim_start_matches("ok ")
        .parse()
        .unwrap();
    assert!(forks < 16, "fork bomb not limited: {forks}");
    assert_eq!(inside(&sb, &["alloc", "2048"]), "err 12");
    assert_eq!(inside(&sb, &["fill", "/tmp/big", "16"]), "err 28");
    // Twins: a workload below every limit completes.
    assert_eq!(inside(&sb, &["fork-many", "4"]), "ok 4");
    assert_eq!(inside(&sb, &["alloc", "16"]), "ok");
    assert_eq!(inside(&sb, &["fill", "/tmp/small", "1"]), "ok");
    // Wall-clock limit: a sleeper is killed, and the kill is told apart
    // from any other SIGKILL (the shell's number is 137 for both); a short
    // command is not
    // (2 s leaves a loaded CI machine room to start the short one).
    let mut p = Profile::governed();
    p.limit_wall(Duration::from_secs(2)).unwrap();
    let mut timed = Sandbox::new(p);
    direct(&mut timed).writable(root.path()).cwd(root.path());
    let started = std::time::Instant::now();
    let c = timed.spawn(Command::new(["/bin/sleep", "30"])).unwrap();
    let walled = c.wait().unwrap();
    assert_eq!(walled, Exit::WallLimit);
    assert_eq!(walled.code(), 128 + libc::SIGKILL);
    assert!(started.elapsed() < Duration::from_secs(10));
    let c = timed.spawn(Command::new(["/bin/sleep", "0.05"])).unwrap();
    assert_eq!(c.wait().unwrap(), Exit::Exited(0));
    // Die with the parent: killing the supervisor kills the worker.
    let marker = format!("{}.{}", 300 + std::process::id() % 100, std::process::id());
    let child = sb
        .spawn(Command::new(["/bin/sleep", marker.as_str()]))
        .unwrap();
    assert!(
        wait_for(|| count_cmdline(&marker) == 1),
        "worker did not start"
    );
    child.kill(Signal::KILL).unwrap();
    let _ = child.wait();
    assert!(
        wait_for(|| count_cmdline(&marker) == 0),
        "worker survived its supervisor"
    );
}

fn count_cmdline(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| c.windows(marker.len()).any(|w| w == marker.as_bytes()))
                .unwrap_or(false)
        })
        .count()
}

fn wait_for(f: impl Fn() -> bool) -> bool {
    for _ in 0..100 {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

// 19. Degradation: each missing layer is a refusal naming it; the named
// downgrade runs and is recorded.
#[test]
fn g19_degradation() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    // Every layer, staged writes too: each launch stages in its own session.
    let stages = host_scratch();
    let session = std::cell::Cell::new(0u32);
    let staged = || {
        let mut sb = Sandbox::new(Profile::governed());
        session.set(session.get() + 1);
        sb.writable(root.path())
            .cwd(root.path())
            .read_only(probe_dir())
            .stage_in(stages.path(), format!("g19-{}", session.get()));
        sb
    };
    // Positive control: all layers present, the launch succeeds.
    let sb = staged();
    let child = sb.spawn(Command::new(["/bin/true"])).unwrap();
    assert!(child.report().downgraded.is_empty());
    assert_eq!(child.wait().unwrap(), Exit::Exited(0));
    for layer in Layer::ALL {
        if layer == Layer::Cgroups {
            continue;
        }
        let mut sb = staged();
        sb.__simulate_unavailable(layer, "simulated for the test");
        let err = sb.spawn(Command::new(["/bin/true"])).unwrap_err();
        assert_eq!(err.layer(), Some(layer), "{layer}: {err}");
        assert!(
            err.to_string()
                .starts_with(&format!("isolation_layer_unavailable: {}", layer.name())),
            "{err}"
        );
        if layer.downgradable() {
            sb.dangerous().disable(layer).unwrap();
            let child = sb.spawn(Command::new(["/bin/true"])).unwrap();
            assert_eq!(child.report().downgraded, vec![layer]);
            assert!(
                child
                    .report()
                    .layers
                    .iter()
                    .any(|(l, s)| *l == layer && s.word() == "degraded")
            );
            assert_eq!(child.wait().unwrap(), Exit::Exited(0));
        } else {
            assert!(
                matches!(sb.dangerous().disable(layer), Err(SandboxError::NotDowngradable(l)) if l == layer)
            );
        }
    }
    // A kernel whose Landlock ABI is below the profile's minimum (simulated).
    let mut sb = sandbox("governed", &root);
    sb.__simulate_landlock_abi(3);
    let err = sb.spawn(Command::new(["/bin/true"])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "isolation_layer_unavailable: landlock (ABI 3, 4 required)"
    );
    // A Landlock ABI below the profile's minimum.
    let mut p = Profile::governed();
    p.require_landlock_abi(99);
    let err = Sandbox::new(p)
        .spawn(Command::new(["/bin/true"]))
        .unwrap_err();
    assert!(
        err.to_string().contains("landlock (ABI") && err.to_string().contains("99 required"),
        "{err}"
    );
}

// Secret markers planted in the launcher's environment, in host files
// under masked paths, and visible in the host's /proc never show inside.
#[test]
fn secrets_unseen() {
    if skip_unless_root() {
        return;
    }
    // The marker is planted forwards; the probe receives it reversed (as
    // written here) and reverses it itself, so no command line holds it.
    let reversed = "TERCES_ETASILAP_KRAM";
    let marker: String = reversed.chars().rev().collect();
    let run = tempfile::Builder::new()
        .prefix("palisade-secret-")
        .tempdir_in("/run")
        .unwrap();
    std::fs::write(run.path().join("token"), &marker).unwrap();
    let vartmp = tempfile::Builder::new()
        .prefix("palisade-secret-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::write(vartmp.path().join("token"), &marker).unwrap();
    for profile in ["strict", "governed"] {
        // The launcher (the probe in `sandboxed` mode) holds the marker in
        // its environment under an allowlisted and a sensitive name.
        let out = std::process::Command::new(PROBE)
            .args(["sandboxed", profile, PROBE, "env"])
            .env("API_TOKEN", &marker)
            .env("LANG", "C.UTF-8")
            .output()
            .unwrap();
        let env = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            env.starts_with("ok ") && env.contains("LANG=C.UTF-8"),
            "{profile}: {env}"
        );
        assert!(!env.contains(&marker), "{profile}: marker in env");
        for dir in ["/run", "/var", "/tmp", "/proc"] {
            let out = std::process::Command::new(PROBE)
                .args(["sandboxed", profile, PROBE, "scan", dir, reversed])
                .env("API_TOKEN", &marker)
                .output()
                .unwrap();
            let o = String::from_utf8_lossy(&out.stdout).into_owned();
            assert_eq!(o.trim(), "ok", "{profile}: marker visible under {dir}: {o}");
        }
    }
    // Positive control: the same scans outside find the planted files.
    assert!(outside(&["scan", run.path().to_str().unwrap(), reversed]).contains("token"));
    assert!(outside(&["scan", vartmp.path().to_str().unwrap(), reversed]).contains("token"));
}

// The launch report: profile, plan digest, layers.
#[test]
fn launch_report_records_plan_and_layers() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let sb = sandbox("governed", &root);
    let a = sb.spawn(Command::new(["/bin/true"])).unwrap();
    let b = sb.spawn(Command::new(["/bin/true"])).unwrap();
    assert_eq!(a.report().profile, "governed");
    assert!(a.report().mount_plan_digest.starts_with("sha256:"));
    assert_eq!(
        a.report().mount_plan_digest,
        b.report().mount_plan_digest,
        "stable digest"
    );
    assert!(a.report().mount_plan.text().contains("mask-dir /var"));
    assert!(
        a.report()
            .layers
            .iter()
            .any(|(l, s)| *l == Layer::Landlock && s.is_active())
    );
    let strict = sandbox("strict", &root)
        .spawn(Command::new(["/bin/true"]))
        .unwrap();
    assert_ne!(
        strict.report().mount_plan_digest,
        a.report().mount_plan_digest
    );
    assert_eq!(a.wait().unwrap(), Exit::Exited(0));
    assert_eq!(b.wait().unwrap(), Exit::Exited(0));
    assert_eq!(strict.wait().unwrap(), Exit::Exited(0));
}

// Exit codes: the command's, and 128+signal.
#[test]
fn exit_codes_pass_through() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let sb = sandbox("strict", &root);
    let c = sb.spawn(Command::new(["/bin/sh", "-c", "exit 7"])).unwrap();
    assert_eq!(c.wait().unwrap(), Exit::Exited(7));
    let c = sb
        .spawn(Command::new(["/bin/sh", "-c", "kill -TERM $$"]))
        .unwrap();
    assert_eq!(c.wait().unwrap(), Exit::Signaled(Signal::TERM));
    match sb.spawn(Command::new(["/nonexistent/cmd"])) {
        Err(SandboxError::Exec { errno, .. }) => assert_eq!(errno, libc::ENOENT),
        other => panic!("expected an exec error, got {other:?}"),
    }
}

// The same guards when the launcher is an unprivileged user (uid 65534):
// the worker runs as that uid, mapped 1:1, with `setgroups` denied.
#[test]
fn unprivileged_launcher() {
    if skip_unless_root() {
        return;
    }
    use std::os::unix::process::CommandExt;
    let as_nobody = |args: &[&str]| -> String {
        let out = std::process::Command::new(PROBE)
            .args(args)
            .uid(65534)
            .gid(65534)
            .current_dir("/")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
    };
    let newuser = format!("{}", libc::CLONE_NEWUSER);
    for profile in ["strict", "governed"] {
        let st = as_nobody(&["sandboxed", profile, PROBE, "status"]);
        assert!(
            st.contains("Uid: 65534 65534 65534 65534"),
            "{profile}: {st}"
        );
        assert!(
            st.contains("CapEff: 0000000000000000") && st.contains("CapBnd: 0000000000000000"),
            "{profile}: {st}"
        );
        assert!(
            st.contains("NoNewPrivs: 1") && st.contains("Seccomp: 2"),
            "{profile}: {st}"
        );
        assert_eq!(
            as_nobody(&["sandboxed", profile, PROBE, "unshare", &newuser]),
            EPERM,
            "{profile}"
        );
        assert_eq!(
            as_nobody(&["sandboxed", profile, PROBE, "socket", "1"]),
            EPERM,
            "{profile}"
        );
        assert_eq!(
            as_nobody(&["sandboxed", profile, PROBE, "net-ifaces"]),
            "ok lo",
            "{profile}"
        );
        // Twin: the scratch HOME is writable.
        assert_eq!(
            as_nobody(&["sandboxed", profile, PROBE, "write", "/tmp/home/x"]),
            "ok",
            "{profile}"
        );
    }
    assert_eq!(
        as_nobody(&["sandboxed", "governed", PROBE, "write", "/etc/palisade-x"]),
        EROFS
    );
    // Control: unsandboxed, the same user may create a user namespace and
    // an AF_UNIX socket.
    assert_eq!(as_nobody(&["unshare", &newuser]), "ok");
    assert_eq!(as_nobody(&["socket", "1"]), "ok");
}

// A profile cannot be weakened behind the report's back: its fields are
// private (see the `compile_fail` example on `Profile`), and what weakens
// goes through `dangerous()` and is listed in the launch report.
#[test]
fn dangerous_weakenings_are_listed_in_the_launch_report() {
    if skip_unless_root() {
        return;
    }
    let root = Root::new();
    let host = host_scratch();
    let secret = host.path().join("secret.txt");
    let marker: String = "KRAM-TSOH-DEREKAEW".chars().rev().collect();
    std::fs::write(&secret, &marker).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let secret_s = secret.display().to_string();
    let report_of = |sb: &Sandbox| {
        let child = sb.spawn(Command::new(["/bin/true"])).unwrap();
        let report = child.report().clone();
        assert_eq!(child.wait().unwrap(), Exit::Exited(0));
        report
    };

    // Positive control: plain strict hides the host file and reports no deviation.
    let strict = sandbox("strict", &root);
    assert_eq!(inside(&strict, &["cat", &secret_s]), "err 2");
    let r = report_of(&strict);
    assert_eq!(r.profile, "strict");
    assert!(r.deviations.is_empty(), "{:?}", r.deviations);

    // Tightening needs no door and is not a deviation.
    let mut tight = sandbox("strict", &root);
    tight.limit(Limit::Processes, 64).unwrap();
    assert!(tight.limit(Limit::Processes, 1 << 20).is_err());
    assert!(report_of(&tight).deviations.is_empty());

    // The weakening of the issue: host root, a mask removed, Landlock ABI 0.
    let mut weak = sandbox("strict", &root);
    weak.dangerous()
        .root_view(RootView::HostReadOnly)
        .remove_mask("/home")
        .min_landlock_abi(0);
    // (Compared without printing: the marker never reaches the test output.)
    assert!(
        inside(&weak, &["cat", &secret_s]) == format!("ok {marker}"),
        "the weakened sandbox reads the host file"
    );
    let r = report_of(&weak);
    assert_eq!(r.profile, "strict");
    assert_eq!(
        r.deviations,
        [
            "root view Empty -> HostReadOnly",
            "host mask /home removed",
            "minimum Landlock ABI 4 -> 0",
        ],
    );
    // The deviations travel with the profile into another sandbox.
    let again = Sandbox::new(weak.profile().clone());
    assert_eq!(again.profile().deviations(), r.deviations.as_slice());
}
