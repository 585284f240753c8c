//! Red team of `Profile::allow_nested_sandbox`: Landlock lets `/proc` be
//! written (for a nested user namespace's uid/gid maps). A hostile worker
//! uses that write access on other processes' `/proc` files: the
//! sandbox's init (pid 1 inside) and its parent's memory, `oom_score_adj`
//! and LSM attributes, and the kernel's `/proc/sys`. The guard holds when
//! every such write is refused; the control is the same write on the
//! worker's own `/proc/self`, which the option permits (and which the
//! default profile refuses, showing the write goes through Landlock's
//! `/proc` grant). Needs root.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::io::Read;
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

/// Opens each path for writing: `NAME=ok` or `NAME=errno N`. A `+` before
/// the path also writes a byte (the LSM `attr` files check the writer at
/// `write`, not at `open`).
fn probes(items: &[(&str, &str)]) -> String {
    let mut py = String::from("import os\n");
    for (name, path) in items {
        let (path, write) = match path.strip_prefix('+') {
            Some(p) => (p, "os.write(fd, b'x'); "),
            None => (*path, ""),
        };
        py.push_str(&format!(
            "try:\n  fd=os.open({path:?}, os.O_WRONLY); {write}os.close(fd); print('{name}=ok')\nexcept OSError as e:\n  print('{name}=errno', e.errno)\n"
        ));
    }
    format!(
        "/usr/bin/python3 -c \"$(cat <<'PYEOF'\n{py}PYEOF\n)\"; grep -E '^(Uid|PPid):' /proc/1/status; echo self_uid=$(id -u)"
    )
}

fn field<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {out}"))
}

const TARGETS: &[(&str, &str)] = &[
    ("self_mem", "/proc/self/mem"),
    ("self_oom", "/proc/self/oom_score_adj"),
    ("init_mem", "/proc/1/mem"),
    ("init_oom", "/proc/1/oom_score_adj"),
    ("init_attr", "+/proc/1/attr/current"),
    ("init_attr_exec", "+/proc/1/attr/exec"),
    ("init_comm_write", "+/proc/1/comm"),
    ("init_comm", "/proc/1/comm"),
    ("init_uid_map", "/proc/1/uid_map"),
    ("sys_core_pattern", "/proc/sys/kernel/core_pattern"),
    ("sys_ptrace_scope", "/proc/sys/kernel/yama/ptrace_scope"),
    ("sys_max_user_ns", "/proc/sys/user/max_user_namespaces"),
    ("sysrq", "/proc/sysrq-trigger"),
];

#[test]
fn with_nested_sandbox_proc_writes_reach_only_the_workers_own_processes() {
    if skip_unless_root() {
        return;
    }
    let work = workdir();
    let nested = run(&governed(work.path(), true), &probes(TARGETS));
    eprintln!("{nested}");
    // Control: the worker writes its own /proc files with the option...
    assert_eq!(
        field(&nested, "self_mem"),
        "ok",
        "control: /proc/self/mem writable with nested_sandbox\n{nested}"
    );
    assert_eq!(
        field(&nested, "self_oom"),
        "ok",
        "control: /proc/self/oom_score_adj\n{nested}"
    );
    // ... and not without it (the write is Landlock's /proc grant).
    let plain = run(&governed(work.path(), false), &probes(TARGETS));
    assert_ne!(
        field(&plain, "self_mem"),
        "ok",
        "control: the default profile refuses /proc writes\n{plain}"
    );
    for (name, path) in TARGETS.iter().filter(|(n, _)| !n.starts_with("self_")) {
        assert_ne!(
            field(&nested, name),
            "ok",
            "HOLE: with nested_sandbox the worker opens {path} (another process's or the kernel's) for writing\n{nested}"
        );
    }
}

/// Through a nested user namespace (where the worker is root of its own
/// namespace, the point of the option) the same writes stay refused: the
/// namespace's root owns nothing outside it.
#[test]
fn inside_a_nested_user_namespace_proc_writes_outside_it_stay_refused() {
    if skip_unless_root() {
        return;
    }
    let work = workdir();
    let script = format!(
        "/usr/bin/unshare -Ur sh -c '{}'",
        probes(TARGETS).replace('\'', "'\\''")
    );
    let out = run(&governed(work.path(), true), &script);
    eprintln!("{out}");
    assert_eq!(
        field(&out, "self_uid"),
        "0",
        "control: root of the nested namespace\n{out}"
    );
    assert_eq!(
        field(&out, "self_mem"),
        "ok",
        "control: its own /proc/self/mem\n{out}"
    );
    for (name, path) in TARGETS.iter().filter(|(n, _)| !n.starts_with("self_")) {
        assert_ne!(
            field(&out, name),
            "ok",
            "HOLE: root of a nested user namespace opens {path} for writing\n{out}"
        );
    }
}

/// The worker's own cgroup (v1 `memory` or v2), found through
/// `/proc/self/cgroup`: its limit read back (the control that the files are
/// in view), then a raised limit, a move to the parent or the root cgroup
/// and a write of its `memory.oom_control`/`memory.events`, each refused.
const CGROUP_ATTACK: &str = r#"
line=$(grep -E '^[0-9]+:memory:' /proc/self/cgroup || grep -E '^0::' /proc/self/cgroup)
rel=${line#*:*:}
if grep -qE '^[0-9]+:memory:' /proc/self/cgroup; then base=/sys/fs/cgroup/memory; lim=memory.limit_in_bytes; ev=memory.oom_control; else base=/sys/fs/cgroup; lim=memory.max; ev=memory.events; fi
d=$base$rel
echo "limit=$(cat "$d/$lim" 2>/dev/null)"
try() { if ( eval "$1" ) 2>/dev/null; then echo "$2=ok"; else echo "$2=refused"; fi; }
try 'echo 9223372036854771712 > "$d/$lim"' raise_limit
try 'echo $$ > "$(dirname "$d")/cgroup.procs"' move_parent
try 'echo $$ > "$base/cgroup.procs"' move_root
try 'echo 1 > "$d/$ev"' write_events
try 'mkdir "$d/child"' make_child
"#;

#[test]
fn a_worker_cannot_raise_or_leave_its_cgroup_even_in_a_nested_user_namespace() {
    if skip_unless_root() {
        return;
    }
    let work = workdir();
    let limit: u64 = 256 << 20;
    let mut limits = palisade_isolate::CgroupLimits::default();
    limits.memory = Some(limit);
    for nested in [false, true] {
        let mut sb = governed(work.path(), nested);
        sb.limit_cgroup(limits);
        let script = if nested {
            format!(
                "/usr/bin/unshare -Ur sh -c '{}'",
                CGROUP_ATTACK.replace('\'', "'\\''")
            )
        } else {
            CGROUP_ATTACK.to_owned()
        };
        let out = run(&sb, &script);
        eprintln!("nested={nested}\n{out}");
        assert_eq!(
            field(&out, "limit"),
            limit.to_string(),
            "control: the worker reads its own cgroup's limit (nested={nested})\n{out}"
        );
        for name in [
            "raise_limit",
            "move_parent",
            "move_root",
            "write_events",
            "make_child",
        ] {
            assert_eq!(
                field(&out, name),
                "refused",
                "HOLE: the worker's {name} on its cgroup succeeded (nested={nested})\n{out}"
            );
        }
    }
}
