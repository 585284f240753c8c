//! The read observer (`palisade_isolate::observe`) against real sandboxes:
//! a sandboxed `cat` of a watched file, through a staged root's overlay and
//! through a direct-writes bind, reaches the handler with the verified host
//! path and the sandbox's attribution, and waits for its answer (a `Deny`
//! fails the open with `EPERM`, an `Allow` lets it print); an unwatched file
//! and a host process's read reach no handler; files and directories
//! created later in a watched tree, and a hard link the worker makes, are
//! seen; a process without `CAP_SYS_ADMIN` gets the degraded, after-the-fact
//! observer. Every refusal or silence has its positive control in the same
//! test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use palisade_isolate::observe::{
    Attribution, Handler, ObserveError, ObservedOpen, ObserverMode, ReadObserver, Response, Scope,
    Watch,
};
use palisade_isolate::{Command, Exit, Layer, Profile, Sandbox, SandboxChild, Signal, Stdio};

const WORKER: u32 = palisade_isolate::DEFAULT_WORKER_UID;
/// An upper bound against hangs only, never a pass criterion.
const PATIENCE: Duration = Duration::from_secs(120);

fn skip_unless_root() -> bool {
    if !nix::unistd::getuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the sandbox tests as root"
        );
        eprintln!("skipped: the read observer tests run as root (CI does)");
        return true;
    }
    false
}

fn chown_tree(p: &Path) {
    std::os::unix::fs::lchown(p, Some(WORKER), Some(WORKER)).unwrap();
    if p.is_dir() && !p.is_symlink() {
        for e in std::fs::read_dir(p).unwrap() {
            chown_tree(&e.unwrap().path());
        }
    }
}

/// The secret's content, reversed in the source so that a leak scan of the
/// test output cannot match the source itself.
fn secret() -> String {
    "terces-ym".chars().rev().collect()
}

/// A writable root owned by the worker: `secret.txt` (to be watched),
/// `plain.txt` (never watched) and a directory `tree/` holding `inner.txt`.
/// Returned with its canonical path.
fn root() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("palisade-observe-")
        .tempdir()
        .unwrap();
    let p = dir.path().canonicalize().unwrap();
    std::fs::write(p.join("secret.txt"), format!("{}\n", secret())).unwrap();
    std::fs::write(p.join("plain.txt"), "plain\n").unwrap();
    std::fs::create_dir(p.join("tree")).unwrap();
    std::fs::write(p.join("tree/inner.txt"), "inner\n").unwrap();
    chown_tree(&p);
    (dir, p)
}

/// A stage base outside every root (never under /tmp, which the view
/// replaces).
fn stage_base() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(".palisade-stages-")
        .tempdir_in("/")
        .unwrap()
}

fn staged(root: &Path, base: &Path, session: &str) -> Sandbox {
    let mut sb = Sandbox::new(Profile::governed());
    sb.writable(root).cwd(root).stage_in(base, session);
    sb
}

fn direct(root: &Path) -> Sandbox {
    let mut sb = Sandbox::new(Profile::governed());
    sb.dangerous().disable(Layer::StagedWrites).unwrap();
    sb.writable(root).cwd(root);
    sb
}

/// A handler that sends each open to the test and blocks until the test
/// answers it (a silent test denies, after the patience bound).
fn gated() -> (Handler, Receiver<ObservedOpen>, Sender<Response>) {
    let (open_tx, open_rx) = channel();
    let (answer_tx, answer_rx) = channel::<Response>();
    let handler = Box::new(move |o: &ObservedOpen| {
        let _ = open_tx.send(o.clone());
        answer_rx.recv_timeout(PATIENCE).unwrap_or(Response::Deny)
    });
    (handler, open_rx, answer_tx)
}

/// A handler that records each open and allows it at once.
fn recording() -> (Handler, Receiver<ObservedOpen>) {
    let (tx, rx) = channel();
    let handler = Box::new(move |o: &ObservedOpen| {
        let _ = tx.send(o.clone());
        Response::Allow
    });
    (handler, rx)
}

/// Spawn `script` under `/bin/sh -c` in `sb` (stdout and stderr together
/// on one pipe, read by a thread), attribute the observer's opens to it.
fn spawn(
    sb: &Sandbox,
    obs: &ReadObserver,
    script: &str,
) -> (SandboxChild, std::thread::JoinHandle<String>) {
    let cmd = Command::new(["/bin/sh", "-c", &format!("exec 2>&1; {script}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = sb
        .spawn(cmd)
        .unwrap_or_else(|e| panic!("launch of {script:?} failed: {e}"));
    obs.attribute_to(child.pid_namespace().unwrap());
    let mut stdout = child.take_stdout().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    (child, reader)
}

/// `out` for an assertion message, the secret's content replaced.
fn shown(out: &str) -> String {
    out.replace(&secret(), "<the secret>")
}

fn finish(mut child: SandboxChild, reader: std::thread::JoinHandle<String>) -> (Exit, String) {
    let exit = match child.wait_timeout(PATIENCE).unwrap() {
        Some(e) => e,
        None => {
            let _ = child.kill(Signal::KILL);
            panic!("the sandbox timed out");
        }
    };
    (exit, reader.join().unwrap())
}

/// While its handler runs, the opener of `o` is blocked in the `openat`
/// that raised it (`/proc/<pid>/syscall` names the call a blocked process
/// is in): the handler runs before the open returns.
fn assert_in_openat(o: &ObservedOpen) {
    let pid = o.pid.expect("a permission event names its opener");
    let text = std::fs::read_to_string(format!("/proc/{pid}/syscall"))
        .unwrap_or_else(|e| format!("gone ({e})"));
    let nr: Option<i64> = text.split_whitespace().next().and_then(|w| w.parse().ok());
    assert_eq!(
        nr,
        Some(libc::SYS_openat),
        "the opener {pid} is not in openat while the handler runs: {text}"
    );
}

/// The permission-mode core, for a sandbox whose root is `p`: the first
/// `cat` of the watched secret waits in the handler (the sandbox has not
/// ended while it does) and is allowed, the second is denied with `EPERM`;
/// the unwatched `plain.txt` reaches no handler.
fn cat_is_held_then_denied(sb: &Sandbox, p: &Path) {
    let (handler, opens, answers) = gated();
    let obs = ReadObserver::start(
        &[Watch::new(p.join("secret.txt"), Scope::Exact)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    // Dropped before the observer (which waits for a running handler), so
    // that a failing assertion ends the handler's wait at once.
    let answers = answers;
    assert_eq!(obs.mode(), ObserverMode::Permission);
    let script = "cat secret.txt; echo rc1=$?; cat secret.txt; echo rc2=$?; cat plain.txt";
    let (mut child, reader) = spawn(sb, &obs, script);

    let first = opens.recv_timeout(PATIENCE).expect("the first cat's open");
    assert_eq!(first.path, p.join("secret.txt"));
    assert_eq!(first.attribution, Attribution::Sandbox);
    assert_eq!(first.mode, ObserverMode::Permission);
    // The handler has not answered: the opener is still inside its
    // `openat`, so nothing can have been read yet.
    assert_in_openat(&first);
    assert_eq!(child.try_wait().unwrap(), None);
    answers.send(Response::Allow).unwrap();

    let second = opens.recv_timeout(PATIENCE).expect("the second cat's open");
    assert_eq!(second.path, p.join("secret.txt"));
    assert_in_openat(&second);
    assert_eq!(child.try_wait().unwrap(), None);
    answers.send(Response::Deny).unwrap();

    let (exit, out) = finish(child, reader);
    assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
    let lines: Vec<&str> = out.lines().collect();
    // The allowed open printed the content; the denied one failed with
    // EPERM; the unwatched file printed without a handler call.
    assert_eq!(lines[0], secret(), "{}", shown(&out));
    assert_eq!(lines[1], "rc1=0", "{}", shown(&out));
    assert!(
        lines[2].contains("Operation not permitted"),
        "{}",
        shown(&out)
    );
    assert_eq!(lines[3], "rc2=1", "{}", shown(&out));
    assert_eq!(lines[4], "plain", "{}", shown(&out));
    assert!(opens.try_recv().is_err(), "no other open was reported");
    assert_eq!(obs.internal_errors(), 0);
}

#[test]
fn a_staged_cat_waits_for_the_handler_and_a_deny_fails_it() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    let base = stage_base();
    let sb = staged(&p, base.path(), "obs-staged");
    cat_is_held_then_denied(&sb, &p);
}

#[test]
fn a_direct_writes_cat_waits_for_the_handler_and_a_deny_fails_it() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    cat_is_held_then_denied(&direct(&p), &p);
}

#[test]
fn a_host_read_reaches_no_handler_while_the_sandbox_read_does() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    let support = palisade_isolate::observe::probe();
    assert_eq!(
        support.mode,
        Some(ObserverMode::Permission),
        "{}",
        support.facts
    );
    assert!(support.facts.contains("CAP_SYS_ADMIN"), "{}", support.facts);
    eprintln!("read observer: {}", support.facts);
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[Watch::new(p.join("secret.txt"), Scope::Exact)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    let (mut child, reader) = spawn(&direct(&p), &obs, "read go; cat secret.txt");
    // A host process (not this one: a child in the host's PID namespace).
    let host = std::process::Command::new("/bin/cat")
        .arg(p.join("secret.txt"))
        .output()
        .unwrap();
    assert!(host.status.success());
    assert_eq!(String::from_utf8_lossy(&host.stdout).trim(), secret());
    assert!(opens.try_recv().is_err(), "a host read reached the handler");
    // Positive control: the sandbox's read of the same file does.
    child.take_stdin().unwrap().write_all(b"go\n").unwrap();
    let seen = opens.recv_timeout(PATIENCE).expect("the sandbox's open");
    assert_eq!(seen.path, p.join("secret.txt"));
    assert_eq!(seen.attribution, Attribution::Sandbox);
    let (exit, out) = finish(child, reader);
    assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
    assert_eq!(out.trim(), secret());
}

#[test]
fn files_and_directories_created_later_in_a_watched_tree_are_seen() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    let base = stage_base();
    let tree = p.join("tree");
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[Watch::new(&tree, Scope::Tree)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    // Created on the host after the start: a file in the tree, and a new
    // directory with a file in it.
    std::fs::write(tree.join("late.txt"), "late\n").unwrap();
    std::fs::create_dir(tree.join("newdir")).unwrap();
    std::fs::write(tree.join("newdir/deep.txt"), "deep\n").unwrap();
    chown_tree(&tree);
    // This process opening the new directory is allowed without a handler
    // call, and marks it (so the test does not race the creation events).
    assert_eq!(std::fs::read_dir(tree.join("newdir")).unwrap().count(), 1);
    let sb = staged(&p, base.path(), "obs-tree");
    let script = "cat plain.txt tree/inner.txt tree/late.txt tree/newdir/deep.txt";
    let (child, reader) = spawn(&sb, &obs, script);
    let (exit, out) = finish(child, reader);
    assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
    assert_eq!(out, "plain\ninner\nlate\ndeep\n");
    let seen: Vec<ObservedOpen> = opens.try_iter().collect();
    let paths: Vec<&Path> = seen.iter().map(|o| o.path.as_path()).collect();
    assert_eq!(
        paths,
        [
            tree.join("inner.txt"),
            tree.join("late.txt"),
            tree.join("newdir/deep.txt")
        ],
        "{seen:?}"
    );
    assert!(
        seen.iter().all(|o| o.attribution == Attribution::Sandbox),
        "{seen:?}"
    );
}

#[test]
fn a_hard_link_the_worker_makes_to_a_watched_file_is_still_seen() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[Watch::new(p.join("secret.txt"), Scope::Exact)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    let script = "ln secret.txt other.txt && cat other.txt";
    let (child, reader) = spawn(&direct(&p), &obs, script);
    let (exit, out) = finish(child, reader);
    assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
    assert_eq!(out.trim(), secret());
    assert!(p.join("other.txt").exists(), "the link is on the host");
    let seen: Vec<ObservedOpen> = opens.try_iter().collect();
    assert_eq!(seen.len(), 1, "{seen:?}");
    // Reported by the watched name, which the inode still has.
    assert_eq!(seen[0].path, p.join("secret.txt"));
    assert_eq!(seen[0].attribution, Attribution::Sandbox);
}

#[test]
fn a_handler_that_panics_denies_the_open_and_the_observer_goes_on() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    let (tx, opens) = channel();
    let mut calls = 0u32;
    let handler: Handler = Box::new(move |o: &ObservedOpen| {
        calls += 1;
        let _ = tx.send(o.clone());
        assert!(calls > 1, "the first call fails");
        Response::Allow
    });
    let obs = ReadObserver::start(
        &[Watch::new(p.join("secret.txt"), Scope::Exact)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    let script = "cat secret.txt; echo rc1=$?; cat secret.txt; echo rc2=$?";
    let (child, reader) = spawn(&direct(&p), &obs, script);
    let (exit, out) = finish(child, reader);
    assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
    let lines: Vec<&str> = out.lines().collect();
    // Failed closed: the open whose handler panicked was denied, counted.
    assert!(
        lines[0].contains("Operation not permitted"),
        "{}",
        shown(&out)
    );
    assert_eq!(lines[1], "rc1=1", "{}", shown(&out));
    // Positive control: the observer still runs, and the next open, whose
    // handler returns, is allowed.
    assert_eq!(lines[2], secret(), "{}", shown(&out));
    assert_eq!(lines[3], "rc2=0", "{}", shown(&out));
    assert_eq!(opens.try_iter().count(), 2);
    assert_eq!(obs.internal_errors(), 1);
}

#[test]
fn a_missing_or_symlinked_watch_is_handled_without_following() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    std::os::unix::fs::symlink(p.join("secret.txt"), p.join("link.txt")).unwrap();
    let (handler, _opens) = recording();
    let err = ReadObserver::start(
        &[Watch::new(p.join("link.txt"), Scope::Exact)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap_err();
    assert!(
        matches!(&err, ObserveError::Watch { path, .. } if path == &p.join("link.txt")),
        "{err}"
    );
    assert!(err.to_string().contains("symbolic link"), "{err}");
    // Positive control and the missing path: a watch of a file that does
    // not exist yet starts, and sees the file once the host creates it.
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[Watch::new(p.join("later/marked.txt"), Scope::Exact)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    std::fs::create_dir(p.join("later")).unwrap();
    std::fs::write(p.join("later/marked.txt"), "marked\n").unwrap();
    chown_tree(&p.join("later"));
    // The creation events are handled by the observer thread; a sandboxed
    // reader retries until its open is reported, bounded.
    let script = "cat later/marked.txt";
    let mut seen = None;
    for _ in 0..50 {
        let (child, reader) = spawn(&direct(&p), &obs, script);
        let (exit, out) = finish(child, reader);
        assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
        if let Ok(o) = opens.try_recv() {
            seen = Some(o);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let seen = seen.expect("the file created later was never seen");
    assert_eq!(seen.path, p.join("later/marked.txt"));
}

/// Run `script` in fresh sandboxes until `opens` reports one of its opens
/// (the observer's thread handles inotify events on its own time): that
/// open. Bounded.
fn until_seen(
    p: &Path,
    obs: &ReadObserver,
    opens: &Receiver<ObservedOpen>,
    script: &str,
) -> ObservedOpen {
    for _ in 0..50 {
        let (child, reader) = spawn(&direct(p), obs, script);
        let (exit, out) = finish(child, reader);
        assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
        if let Ok(o) = opens.try_recv() {
            return o;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{script:?} was never seen");
}

#[test]
fn a_watched_file_the_host_replaces_is_watched_under_its_new_inode() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[Watch::new(p.join("secret.txt"), Scope::Exact)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    // An editor's save: a new file renamed over the watched one.
    std::fs::write(p.join("new.tmp"), "replaced\n").unwrap();
    chown_tree(&p.join("new.tmp"));
    std::fs::rename(p.join("new.tmp"), p.join("secret.txt")).unwrap();
    let seen = until_seen(&p, &obs, &opens, "cat secret.txt");
    assert_eq!(seen.path, p.join("secret.txt"));
    assert_eq!(seen.attribution, Attribution::Sandbox);
}

#[test]
fn without_cap_sys_admin_the_observer_is_degraded_and_after_the_fact() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    // In a forked child that enters a user namespace of its own, this
    // process has no CAP_SYS_ADMIN in the initial namespace. No printing
    // there: the code says what happened.
    let code = fork_and(|| {
        if nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER).is_err() {
            return 10;
        }
        let support = palisade_isolate::observe::probe();
        if support.mode != Some(ObserverMode::AfterTheFact)
            || !support.facts.contains("no CAP_SYS_ADMIN")
        {
            return 11;
        }
        let (handler, _) = recording();
        match ReadObserver::start(
            &[Watch::new(p.join("secret.txt"), Scope::Exact)],
            ObserverMode::Permission,
            handler,
        ) {
            Err(ObserveError::Unavailable(why)) if why.contains("CAP_SYS_ADMIN") => {}
            _ => return 12,
        }
        let (handler, opens) = recording();
        let Ok(obs) = ReadObserver::start(
            &[
                Watch::new(p.join("secret.txt"), Scope::Exact),
                Watch::new(p.join("tree"), Scope::Tree),
            ],
            ObserverMode::AfterTheFact,
            handler,
        ) else {
            return 13;
        };
        if obs.mode() != ObserverMode::AfterTheFact {
            return 14;
        }
        let read = |f: &str| {
            std::process::Command::new("/bin/cat")
                .arg(p.join(f))
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !(read("plain.txt") && read("secret.txt") && read("tree/inner.txt")) {
            return 15;
        }
        let mut got = Vec::new();
        while got.len() < 2 {
            match opens.recv_timeout(PATIENCE) {
                Ok(o) => got.push(o),
                Err(_) => return 16,
            }
        }
        let want = [p.join("secret.txt"), p.join("tree/inner.txt")];
        for (o, w) in got.iter().zip(want.iter()) {
            if &o.path != w
                || o.attribution != Attribution::Unknown
                || o.mode != ObserverMode::AfterTheFact
                || o.pid.is_some()
            {
                return 17;
            }
        }
        // The unwatched plain.txt (read first) was never reported.
        if opens.recv_timeout(Duration::from_millis(200)).is_ok() {
            return 18;
        }
        0
    });
    assert_eq!(code, 0, "the degraded observer's check {code} failed");
}

/// Run `f` in a forked copy of this test process; its exit code.
fn fork_and(f: impl FnOnce() -> i32) -> i32 {
    match palisade_isolate::__escape::fork_for_tests() {
        0 => {
            let c = f();
            palisade_isolate::__escape::exit_for_tests(c)
        }
        pid => palisade_isolate::__escape::wait_for_tests(pid),
    }
}

#[test]
fn the_degraded_observer_sees_a_staged_read_after_the_fact() {
    if skip_unless_root() {
        return;
    }
    // Asked for explicitly (this process could run the permission mode):
    // inotify on the host's inodes sees the opens through the overlay.
    let (_r, p) = root();
    let base = stage_base();
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[
            Watch::new(p.join("secret.txt"), Scope::Exact),
            Watch::new(p.join("tree"), Scope::Tree),
        ],
        ObserverMode::AfterTheFact,
        handler,
    )
    .unwrap();
    let sb = staged(&p, base.path(), "obs-degraded");
    let (child, reader) = spawn(&sb, &obs, "cat plain.txt secret.txt tree/inner.txt");
    let (exit, out) = finish(child, reader);
    assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
    let mut files = Vec::new();
    while files.len() < 2 {
        let o = opens.recv_timeout(PATIENCE).expect("the staged reads");
        assert_eq!(o.attribution, Attribution::Unknown);
        assert_eq!(o.mode, ObserverMode::AfterTheFact);
        // The tree's own directory may be reported too (its open).
        if o.path != p.join("tree") {
            files.push(o.path);
        }
    }
    assert_eq!(files, [p.join("secret.txt"), p.join("tree/inner.txt")]);
}

/// Whether `pid` descends from `root` (through `/proc/<pid>/stat`'s ppid).
fn descends_from(mut pid: u32, root: u32) -> bool {
    for _ in 0..64 {
        if pid == root {
            return true;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The fields after the command's closing parenthesis: state, ppid.
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
        else {
            return false;
        };
        pid = ppid;
    }
    false
}

/// The pid of the process named `comm` below the supervisor `root` that
/// is blocked waiting for a fanotify answer (`/proc/<pid>/wchan`), if any
/// now.
fn blocked_on_fanotify(comm: &str, root: u32) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()? {
        let name = e.ok()?.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let c = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let w = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        if c.trim() == comm && w.contains("fanotify") && descends_from(pid, root) {
            return Some(pid);
        }
    }
    None
}

#[test]
fn opens_before_attribution_are_held_until_the_sandbox_is_named() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[Watch::new(p.join("secret.txt"), Scope::Exact)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    let cmd = Command::new(["/bin/sh", "-c", "exec 2>&1; exec cat secret.txt"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut child = direct(&p).spawn(cmd).unwrap();
    let mut stdout = child.take_stdout().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    // Wait (bounded) until the worker's open waits on the observer.
    let mut held = None;
    for _ in 0..600 {
        held = blocked_on_fanotify("cat", child.pid());
        if held.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let held = held.expect("the worker's open never waited on the observer");
    // Not attributed yet: held, unanswered, the handler not called.
    assert!(opens.try_recv().is_err());
    assert_eq!(child.try_wait().unwrap(), None);
    obs.attribute_to(child.pid_namespace().unwrap());
    let seen = opens.recv_timeout(PATIENCE).expect("the held open");
    assert_eq!(seen.path, p.join("secret.txt"));
    assert_eq!(seen.attribution, Attribution::Sandbox);
    assert_eq!(seen.pid, Some(held));
    let (exit, out) = finish(child, reader);
    assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
    assert_eq!(out.trim(), secret());
}

#[test]
fn a_staged_write_to_a_watched_file_is_seen_at_its_copy_up() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    let base = stage_base();
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[Watch::new(p.join("secret.txt"), Scope::Exact)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    let sb = staged(&p, base.path(), "obs-copy-up");
    // The append copies the file up (the overlay opens the host's file to
    // copy it); the cat after it reads the upper copy.
    let (child, reader) = spawn(&sb, &obs, "echo more >> secret.txt && cat secret.txt");
    let (exit, out) = finish(child, reader);
    assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
    assert_eq!(out, format!("{}\nmore\n", secret()), "{}", shown(&out));
    let seen: Vec<ObservedOpen> = opens.try_iter().collect();
    assert!(!seen.is_empty(), "the copy-up's open was not seen");
    assert!(
        seen.iter()
            .all(|o| o.path == p.join("secret.txt") && o.attribution == Attribution::Sandbox),
        "{seen:?}"
    );
    // The host file is untouched (staged).
    assert_eq!(
        std::fs::read_to_string(p.join("secret.txt")).unwrap(),
        format!("{}\n", secret())
    );
}

#[test]
fn an_open_never_attributed_is_denied_in_the_end_not_left_waiting() {
    if skip_unless_root() {
        return;
    }
    // The positive control is `opens_before_attribution_are_held_…`: the
    // same open, attributed, is allowed and reported.
    let (_r, p) = root();
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[Watch::new(p.join("secret.txt"), Scope::Exact)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    let cmd = Command::new(["/bin/sh", "-c", "exec 2>&1; cat secret.txt; echo rc=$?"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut child = direct(&p).spawn(cmd).unwrap();
    let mut stdout = child.take_stdout().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    // No attribute_to: the observer gives up on the held open (after its
    // hold limit, a minute) and denies it.
    let (exit, out) = finish(child, reader);
    assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
    assert!(out.contains("Operation not permitted"), "{}", shown(&out));
    assert!(out.ends_with("rc=1\n"), "{}", shown(&out));
    assert!(
        opens.try_recv().is_err(),
        "an unattributed open reached the handler"
    );
    assert_eq!(obs.internal_errors(), 1);
}

#[test]
fn a_tree_over_the_depth_bound_is_an_error_not_a_partial_watch() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    let deep = |name: &str, levels: usize| {
        let mut d = p.join(name);
        for _ in 0..levels {
            d.push("d");
        }
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("f.txt"), "f\n").unwrap();
        d
    };
    let too_deep = deep("too-deep", palisade_isolate::observe::MAX_DEPTH + 1);
    let (handler, _) = recording();
    let err = ReadObserver::start(
        &[Watch::new(p.join("too-deep"), Scope::Tree)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap_err();
    assert!(
        matches!(&err, ObserveError::Watch { path, .. } if path == &too_deep),
        "{err}"
    );
    assert!(err.to_string().contains("deeper than 64"), "{err}");
    // Positive control: at the bound, the whole tree is watched, down to
    // its deepest file.
    let at_bound = deep("at-bound", palisade_isolate::observe::MAX_DEPTH);
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[Watch::new(p.join("at-bound"), Scope::Tree)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    let rel = at_bound.strip_prefix(&p).unwrap().join("f.txt");
    let (child, reader) = spawn(&direct(&p), &obs, &format!("cat {}", rel.display()));
    let (exit, out) = finish(child, reader);
    assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
    let seen = opens.try_recv().expect("the deepest file's open");
    assert_eq!(seen.path, at_bound.join("f.txt"));
}

#[test]
fn an_observer_whose_thread_ended_holds_watched_opens_instead_of_allowing_them() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[Watch::new(p.join("secret.txt"), Scope::Exact)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    assert!(!obs.failed(), "a running observer has not failed");
    let (mut child, reader) = spawn(
        &direct(&p),
        &obs,
        "cat secret.txt; read go; exec cat secret.txt",
    );
    // Positive control: while the thread runs, the read is seen and passes.
    let seen = opens.recv_timeout(PATIENCE).expect("the first open");
    assert_eq!(seen.attribution, Attribution::Sandbox);
    obs.__simulate_thread_failure();
    let mut failed = false;
    for _ in 0..600 {
        failed = obs.failed();
        if failed {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(failed, "the ended thread is reported");
    child.take_stdin().unwrap().write_all(b"go\n").unwrap();
    // The second open waits on the group the handle still holds: it is
    // neither allowed unseen nor answered.
    let mut held = None;
    for _ in 0..600 {
        held = blocked_on_fanotify("cat", child.pid());
        if held.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        held.is_some(),
        "the open after the thread ended went through instead of waiting"
    );
    assert_eq!(child.try_wait().unwrap(), None);
    assert!(opens.try_recv().is_err(), "no handler runs any more");
    // Dropping the handle releases the group (the caller has stopped the
    // worker by then; here it just lets the open go).
    drop(obs);
    let (exit, out) = finish(child, reader);
    assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
    assert_eq!(out.matches(&secret()).count(), 2, "{}", shown(&out));
}

/// A marked inode keeps the watched path it was marked as: the worker's
/// rename of a watched file, or of a watched tree, does not hide its read
/// (direct writes: the rename is on the host). A file created later in
/// the renamed tree takes its name from the tree's watched path.
#[test]
fn a_watched_file_or_tree_the_worker_renames_is_reported_under_its_watched_path() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[
            Watch::new(p.join("secret.txt"), Scope::Exact),
            Watch::new(p.join("tree"), Scope::Tree),
        ],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    // Positive control first: the reads under the watched names.
    let script = "cat secret.txt tree/inner.txt >/dev/null && \
        mv secret.txt moved.txt && mv tree pub && \
        cat moved.txt pub/inner.txt && echo new > pub/new.txt && cat pub/new.txt";
    let (child, reader) = spawn(&direct(&p), &obs, script);
    let (exit, out) = finish(child, reader);
    assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
    assert_eq!(
        out,
        format!("{}\ninner\nnew\n", secret()),
        "{}",
        shown(&out)
    );
    assert!(
        p.join("pub/new.txt").exists(),
        "the renames are on the host"
    );
    let seen: Vec<PathBuf> = opens.try_iter().map(|o| o.path).collect();
    let count = |q: &Path| seen.iter().filter(|s| s.as_path() == q).count();
    // Twice each: before the rename (the control) and after it.
    assert_eq!(count(&p.join("secret.txt")), 2, "{seen:?}");
    assert_eq!(count(&p.join("tree/inner.txt")), 2, "{seen:?}");
    // The new file: its creation and its read, under the tree's name.
    assert_eq!(count(&p.join("tree/new.txt")), 2, "{seen:?}");
    assert!(
        seen.iter()
            .all(|s| s.starts_with(p.join("tree")) || s == &p.join("secret.txt")),
        "an open reported under a name no watch has: {seen:?}"
    );
    assert_eq!(obs.internal_errors(), 0);
}

/// The host changes a watched tree's structure while the sandbox runs:
/// it replaces the root (`mv` away and `mkdir`), moves a populated
/// directory in, and recreates the directory of an exactly watched file
/// (`rm -rf`, so that the new nodes may reuse the old inode numbers). Each
/// new node is watched; a file of the replaced root that was moved away
/// stays watched too. (The sandbox is launched before the changes: a
/// launch walks its writable roots, and its opens would mark what the
/// observer must find on its own.)
#[test]
fn a_tree_root_the_host_replaces_and_a_populated_directory_moved_in_stay_watched() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    std::fs::create_dir(p.join("dir")).unwrap();
    std::fs::write(p.join("dir/exact.txt"), "exact\n").unwrap();
    chown_tree(&p);
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[
            Watch::new(p.join("tree"), Scope::Tree),
            Watch::new(p.join("dir/exact.txt"), Scope::Exact),
        ],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    // Each line on stdin reads the files once and answers `done`.
    let script = "while read -r files; do cat $files >/dev/null 2>&1; echo done; done";
    let cmd = Command::new(["/bin/sh", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut sandbox = direct(&p).spawn(cmd).unwrap();
    obs.attribute_to(sandbox.pid_namespace().unwrap());
    let mut stdin = sandbox.take_stdin().unwrap();
    let mut stdout = std::io::BufReader::new(sandbox.take_stdout().unwrap());
    // Reads `files` in the sandbox until each of `want` was reported
    // (bounded): what was reported.
    let mut round = |files: &str, want: &[PathBuf]| -> Vec<PathBuf> {
        let mut seen: Vec<PathBuf> = Vec::new();
        for _ in 0..600 {
            writeln!(stdin, "{files}").unwrap();
            let mut line = String::new();
            std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
            assert_eq!(line, "done\n");
            seen.extend(opens.try_iter().map(|o| o.path));
            if want.iter().all(|w| seen.contains(w)) {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{files}: not all of {want:?} were seen, only {seen:?}");
    };
    // Positive control: the original tree's file is seen.
    round("tree/inner.txt", &[p.join("tree/inner.txt")]);
    // The root swapped by rename, a new file in the new root.
    std::fs::rename(p.join("tree"), p.join("old")).unwrap();
    std::fs::create_dir(p.join("tree")).unwrap();
    std::fs::write(p.join("tree/f.txt"), "f\n").unwrap();
    // A populated directory built beside the tree, then moved in.
    std::fs::create_dir_all(p.join("src/a/b")).unwrap();
    std::fs::write(p.join("src/a/b/g.txt"), "g\n").unwrap();
    std::fs::rename(p.join("src"), p.join("tree/sub")).unwrap();
    // The exact file's directory deleted and made again, a new file at the
    // watched name.
    std::fs::remove_dir_all(p.join("dir")).unwrap();
    std::fs::create_dir(p.join("dir")).unwrap();
    std::fs::write(p.join("dir/exact.txt"), "exact2\n").unwrap();
    let seen = round(
        "tree/f.txt tree/sub/a/b/g.txt dir/exact.txt plain.txt",
        &[
            p.join("tree/f.txt"),
            p.join("tree/sub/a/b/g.txt"),
            p.join("dir/exact.txt"),
        ],
    );
    assert!(
        !seen.contains(&p.join("plain.txt")),
        "an unwatched file was reported: {seen:?}"
    );
    // The old root's file, moved away with it, is still the watched one.
    let old = round("old/inner.txt", &[p.join("tree/inner.txt")]);
    assert!(
        old.iter().all(|o| o == &p.join("tree/inner.txt")),
        "{old:?}"
    );
    drop(stdin);
    let exit = sandbox.wait_timeout(PATIENCE).unwrap();
    assert_eq!(exit, Some(Exit::Exited(0)));
    assert!(!obs.failed());
    assert_eq!(obs.internal_errors(), 0);
}

/// Whether the process `pid` waits for a fanotify answer now.
fn waits_on_fanotify(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|w| w.contains("fanotify"))
}

/// A host reader killed while its open waits (held before attribution)
/// is denied without a handler call once the sandbox is named: its pidfd
/// says it exited, so it is not taken for the sandbox's (`Unknown`). The
/// controls: a host reader still running is allowed without a handler
/// call and reads the file, and the sandbox's read of the same file
/// reaches the handler.
#[test]
fn a_host_reader_killed_mid_open_reaches_no_handler() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[Watch::new(p.join("secret.txt"), Scope::Exact)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    let reader = || {
        std::process::Command::new("/bin/cat")
            .arg(p.join("secret.txt"))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let wait_held = |pid: u32| {
        for _ in 0..600 {
            if waits_on_fanotify(pid) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the host reader {pid} never waited on the observer");
    };
    let mut killed = reader();
    wait_held(killed.id());
    let running = reader();
    wait_held(running.id());
    killed.kill().unwrap();
    let status = killed.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    assert!(opens.try_recv().is_err(), "held: nothing reported yet");
    // Naming the sandbox judges the held opens; then the sandbox reads.
    let (child, out) = spawn(&direct(&p), &obs, "cat secret.txt");
    let host = running.wait_with_output().unwrap();
    assert!(host.status.success());
    assert_eq!(String::from_utf8_lossy(&host.stdout).trim(), secret());
    let (exit, out) = finish(child, out);
    assert_eq!(exit, Exit::Exited(0), "{}", shown(&out));
    assert_eq!(out.trim(), secret());
    let seen: Vec<ObservedOpen> = opens.try_iter().collect();
    assert_eq!(
        seen.iter().map(|o| o.attribution).collect::<Vec<_>>(),
        [Attribution::Sandbox],
        "only the sandbox's read reaches the handler: {seen:?}"
    );
    assert_eq!(obs.internal_errors(), 0);
}

/// A directory moved into a watched tree deeper than `MAX_DEPTH` cannot be
/// watched whole: the walk says so, and the observer reports itself failed
/// (the caller stops the worker) rather than watch part of it. The
/// control: a shallow directory moved in first leaves it healthy.
#[test]
fn a_directory_moved_in_deeper_than_the_bound_fails_the_observer() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    let (handler, _opens) = recording();
    let obs = ReadObserver::start(
        &[Watch::new(p.join("tree"), Scope::Tree)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    let chain = |name: &str, depth: usize| {
        let mut d = p.join(name);
        for _ in 0..depth {
            d.push("d");
        }
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("f.txt"), "f\n").unwrap();
    };
    // Wait (bounded) for the walk the move starts: until `until` holds.
    let settle = |until: &dyn Fn() -> bool, rounds: usize| {
        for _ in 0..rounds {
            if until() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    };
    chain("shallow", 3);
    std::fs::rename(p.join("shallow"), p.join("tree/shallow")).unwrap();
    // Within the bound: the walk ends and the observer stays healthy.
    assert!(
        !settle(&|| obs.failed(), 100),
        "a shallow tree failed the observer"
    );
    chain("deep", palisade_isolate::observe::MAX_DEPTH + 2);
    std::fs::rename(p.join("deep"), p.join("tree/deep")).unwrap();
    assert!(
        settle(&|| obs.failed(), 1200),
        "a tree over the depth bound left the observer healthy"
    );
    assert!(obs.internal_errors() >= 1);
}

/// A tree watched before it exists is watched whole once the host makes
/// it, populated or not (the session watches a marks-file directory so):
/// its files, and those of a directory below it, are seen. The control: an
/// unwatched file beside it is not.
#[test]
fn a_tree_watched_before_it_exists_covers_its_files_once_it_appears() {
    if skip_unless_root() {
        return;
    }
    let (_r, p) = root();
    let (handler, opens) = recording();
    let obs = ReadObserver::start(
        &[Watch::new(p.join("later"), Scope::Tree)],
        ObserverMode::Permission,
        handler,
    )
    .unwrap();
    let script = "while read -r files; do cat $files >/dev/null 2>&1; echo done; done";
    let cmd = Command::new(["/bin/sh", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut sandbox = direct(&p).spawn(cmd).unwrap();
    obs.attribute_to(sandbox.pid_namespace().unwrap());
    let mut stdin = sandbox.take_stdin().unwrap();
    let mut stdout = std::io::BufReader::new(sandbox.take_stdout().unwrap());
    // Made beside the root, populated, then moved in: a rename makes it
    // appear whole.
    std::fs::create_dir_all(p.join("src/sub")).unwrap();
    std::fs::write(p.join("src/f.txt"), "f\n").unwrap();
    std::fs::write(p.join("src/sub/g.txt"), "g\n").unwrap();
    std::fs::rename(p.join("src"), p.join("later")).unwrap();
    let want = [p.join("later/f.txt"), p.join("later/sub/g.txt")];
    let mut seen: Vec<PathBuf> = Vec::new();
    for _ in 0..600 {
        writeln!(stdin, "later/f.txt later/sub/g.txt plain.txt").unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        assert_eq!(line, "done\n");
        seen.extend(opens.try_iter().map(|o| o.path));
        if want.iter().all(|w| seen.contains(w)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(want.iter().all(|w| seen.contains(w)), "{seen:?}");
    assert!(!seen.contains(&p.join("plain.txt")), "{seen:?}");
    drop(stdin);
    assert_eq!(
        sandbox.wait_timeout(PATIENCE).unwrap(),
        Some(Exit::Exited(0))
    );
    assert!(!obs.failed());
    assert_eq!(obs.internal_errors(), 0);
}
