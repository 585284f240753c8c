//! The change set and the commit against a model, through a real overlay.
//!
//! Each case (64 seeds; `PALISADE_STAGE_MODEL_SEED=N` replays one) builds a
//! random host tree (files, directories, symlinks, modes, `.git`-like
//! names), applies random edits to it through a REAL overlay mount with
//! `userxattr` (a child in a new user and mount namespace, `unshare -Urm`,
//! running `sh` over the merged directory: write, append, chmod, rm,
//! rm -r, mkdir, create, mv of a file, mv of a directory (the kernel refuses
//! to rename a lower directory under `userxattr`, and `mv` falls back to
//! copy and delete, as a worker's would), ln -s), and applies the same edits
//! to an in-memory model. Then:
//! - `Stage::changes` equals the model's diff of the two trees (renames
//!   paired as `stage/scan.rs` documents);
//! - `Stage::commit` accepting everything makes the host tree equal the
//!   model's final tree and leaves nothing in the stage;
//! - with random refusals, the host tree equals the model's commit of the
//!   accepted changes (with the same conflict rules), every event is the one
//!   the model predicts, and the quarantine holds each refused node;
//! - a host edit made after the stage began is a conflict and is not
//!   overwritten.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use palisade_isolate::stage::{
    ChangeKind, ChangeSet, CommitEvent, CommitFilter, FilterVerdict, NodeKind, Stage, Stamp,
};

const CASES: u64 = 64;
const NAMES: [&str; 8] = ["a", "b", "c", ".git", "HEAD", "config", "hooks", "x.txt"];
const FILE_MODES: [u32; 4] = [0o644, 0o600, 0o755, 0o640];
const DIR_MODES: [u32; 4] = [0o755, 0o700, 0o750, 0o555];
const TARGETS: [&str; 4] = ["a", "../b", "/etc/passwd", "c/x.txt"];

/// xorshift64*: small, deterministic, enough for tree shapes.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    /// 0 to 3 bytes of `ab`: equal sizes with other bytes happen often.
    fn data(&mut self) -> Vec<u8> {
        (0..self.below(4)).map(|_| *self.pick(b"ab")).collect()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum M {
    File { data: Vec<u8>, mode: u32 },
    Dir { mode: u32 },
    Link { target: String },
}

impl M {
    fn kind(&self) -> NodeKind {
        match self {
            M::File { .. } => NodeKind::File,
            M::Dir { .. } => NodeKind::Dir,
            M::Link { .. } => NodeKind::Symlink,
        }
    }
    fn mode(&self) -> u32 {
        match self {
            M::File { mode, .. } | M::Dir { mode } => *mode,
            M::Link { .. } => 0o777,
        }
    }
    fn size(&self) -> u64 {
        match self {
            M::File { data, .. } => data.len() as u64,
            _ => 0,
        }
    }
}

type Tree = BTreeMap<PathBuf, M>;

fn is_dir(t: &Tree, p: &Path) -> bool {
    p.as_os_str().is_empty() || matches!(t.get(p), Some(M::Dir { .. }))
}

fn children<'a>(t: &'a Tree, p: &'a Path) -> impl Iterator<Item = &'a PathBuf> + 'a {
    t.keys().filter(move |k| k.parent() == Some(p))
}

fn random_tree(rng: &mut Rng) -> Tree {
    let mut t = Tree::new();
    let mut dirs = vec![(PathBuf::new(), 0usize)];
    while let Some((dir, depth)) = dirs.pop() {
        let n = if depth == 0 {
            2 + rng.below(4)
        } else {
            rng.below(4)
        };
        for _ in 0..n {
            let p = dir.join(rng.pick(&NAMES));
            if t.contains_key(&p) {
                continue;
            }
            let node = match rng.below(if depth < 3 { 10 } else { 8 }) {
                0..=5 => M::File {
                    data: rng.data(),
                    mode: *rng.pick(&FILE_MODES),
                },
                6 | 7 => M::Link {
                    target: (*rng.pick(&TARGETS)).to_string(),
                },
                _ => M::Dir {
                    mode: *rng.pick(&DIR_MODES),
                },
            };
            if matches!(node, M::Dir { .. }) {
                dirs.push((p.clone(), depth + 1));
            }
            t.insert(p, node);
        }
    }
    t
}

fn write_tree(root: &Path, t: &Tree) {
    for (p, node) in t {
        let full = root.join(p);
        match node {
            M::File { data, mode } => {
                fs::write(&full, data).unwrap();
                fs::set_permissions(&full, fs::Permissions::from_mode(*mode)).unwrap();
            }
            M::Dir { .. } => fs::create_dir(&full).unwrap(),
            M::Link { target } => symlink(target, &full).unwrap(),
        }
    }
    for (p, node) in t {
        if let M::Dir { mode } = node {
            fs::set_permissions(root.join(p), fs::Permissions::from_mode(*mode)).unwrap();
        }
    }
}

fn read_tree(root: &Path) -> Tree {
    let mut t = Tree::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(root.join(&dir)).unwrap() {
            let e = e.unwrap();
            let rel = dir.join(e.file_name());
            let m = fs::symlink_metadata(e.path()).unwrap();
            let node = if m.file_type().is_symlink() {
                M::Link {
                    target: fs::read_link(e.path())
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                }
            } else if m.is_dir() {
                stack.push(rel.clone());
                M::Dir {
                    mode: m.mode() & 0o7777,
                }
            } else if m.is_file() {
                M::File {
                    data: fs::read(e.path()).unwrap(),
                    mode: m.mode() & 0o7777,
                }
            } else {
                panic!("unexpected node {}", rel.display());
            };
            t.insert(rel, node);
        }
    }
    t
}

/// Random edits, applied to the model as they are drawn; the shell script
/// that performs them under `m` (the merged directory).
fn random_edits(rng: &mut Rng, t: &mut Tree, m: &Path) -> Vec<String> {
    let q = |p: &Path| format!("'{}'", m.join(p).display());
    let mut script = Vec::new();
    for _ in 0..1 + rng.below(8) {
        let files: Vec<PathBuf> = t
            .iter()
            .filter(|(_, n)| matches!(n, M::File { .. }))
            .map(|(p, _)| p.clone())
            .collect();
        let leaves: Vec<PathBuf> = t
            .iter()
            .filter(|(_, n)| !matches!(n, M::Dir { .. }))
            .map(|(p, _)| p.clone())
            .collect();
        let dirs: Vec<PathBuf> = t
            .iter()
            .filter(|(_, n)| matches!(n, M::Dir { .. }))
            .map(|(p, _)| p.clone())
            .collect();
        let mut all_dirs = dirs.clone();
        all_dirs.push(PathBuf::new());
        let free_in = |rng: &mut Rng, t: &Tree, parent: &Path| -> Option<PathBuf> {
            let free: Vec<PathBuf> = NAMES
                .iter()
                .map(|n| parent.join(n))
                .filter(|p| !t.contains_key(p))
                .collect();
            (!free.is_empty()).then(|| rng.pick(&free).clone())
        };
        match rng.below(10) {
            0 if !files.is_empty() => {
                let p = rng.pick(&files).clone();
                let data = rng.data();
                script.push(format!(
                    "printf '%s' '{}' > {}",
                    String::from_utf8_lossy(&data),
                    q(&p)
                ));
                if let Some(M::File { data: d, .. }) = t.get_mut(&p) {
                    *d = data;
                }
            }
            1 if !files.is_empty() => {
                let p = rng.pick(&files).clone();
                script.push(format!("printf 'b' >> {}", q(&p)));
                if let Some(M::File { data, .. }) = t.get_mut(&p) {
                    data.push(b'b');
                }
            }
            2 if !files.is_empty() || !dirs.is_empty() => {
                let p = rng.pick(&[files.clone(), dirs.clone()].concat()).clone();
                match t.get_mut(&p) {
                    Some(M::File { mode, .. }) => *mode = *rng.pick(&FILE_MODES),
                    Some(M::Dir { mode }) => *mode = *rng.pick(&DIR_MODES),
                    _ => unreachable!(),
                }
                script.push(format!("chmod {:o} {}", t[&p].mode(), q(&p)));
            }
            3 if !leaves.is_empty() => {
                let p = rng.pick(&leaves).clone();
                script.push(format!("rm {}", q(&p)));
                t.remove(&p);
            }
            4 if !dirs.is_empty() => {
                let p = rng.pick(&dirs).clone();
                script.push(format!("rm -r {}", q(&p)));
                t.retain(|k, _| !k.starts_with(&p));
            }
            5 => {
                let parent = rng.pick(&all_dirs).clone();
                if let Some(p) = free_in(rng, t, &parent) {
                    let mode = *rng.pick(&DIR_MODES);
                    script.push(format!("mkdir -m {mode:o} {}", q(&p)));
                    t.insert(p, M::Dir { mode });
                }
            }
            6 => {
                let parent = rng.pick(&all_dirs).clone();
                if let Some(p) = free_in(rng, t, &parent) {
                    let (data, mode) = (rng.data(), *rng.pick(&FILE_MODES));
                    script.push(format!(
                        "printf '%s' '{}' > {p} && chmod {mode:o} {p}",
                        String::from_utf8_lossy(&data),
                        p = q(&p)
                    ));
                    t.insert(p, M::File { data, mode });
                }
            }
            7 if !leaves.is_empty() => {
                let from = rng.pick(&leaves).clone();
                let parent = rng.pick(&all_dirs).clone();
                if let Some(to) = free_in(rng, t, &parent) {
                    script.push(format!("mv {} {}", q(&from), q(&to)));
                    let node = t.remove(&from).unwrap();
                    t.insert(to, node);
                }
            }
            8 if !dirs.is_empty() => {
                let from = rng.pick(&dirs).clone();
                let parents: Vec<PathBuf> = all_dirs
                    .iter()
                    .filter(|d| !d.starts_with(&from))
                    .cloned()
                    .collect();
                let parent = rng.pick(&parents).clone();
                if let Some(to) = free_in(rng, t, &parent) {
                    script.push(format!("mv {} {}", q(&from), q(&to)));
                    let moved: Vec<(PathBuf, M)> = t
                        .iter()
                        .filter(|(k, _)| k.starts_with(&from))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    t.retain(|k, _| !k.starts_with(&from));
                    for (k, v) in moved {
                        t.insert(to.join(k.strip_prefix(&from).unwrap()), v);
                    }
                }
            }
            _ => {
                let parent = rng.pick(&all_dirs).clone();
                if let Some(p) = free_in(rng, t, &parent) {
                    let target = (*rng.pick(&TARGETS)).to_string();
                    script.push(format!("ln -s '{target}' {}", q(&p)));
                    t.insert(p, M::Link { target });
                }
            }
        }
    }
    script
}

/// One expected change: `(path, kind, node kind, mode, size, target)`.
type Expected = (PathBuf, ChangeKind, NodeKind, u32, u64, Option<PathBuf>);

fn expect(path: &Path, kind: ChangeKind, node: &M) -> Expected {
    let target = match node {
        M::Link { target } => Some(PathBuf::from(target)),
        _ => None,
    };
    (
        path.to_path_buf(),
        kind,
        node.kind(),
        node.mode(),
        node.size(),
        target,
    )
}

/// The model's diff, ordered and with renames paired as documented.
fn model_diff(before: &Tree, after: &Tree) -> Vec<Expected> {
    let mut out: Vec<(bool, Expected)> = Vec::new();
    let mut paths: Vec<&PathBuf> = before.keys().chain(after.keys()).collect();
    paths.sort();
    paths.dedup();
    for p in paths {
        match (before.get(p), after.get(p)) {
            (Some(b), None) => out.push((true, expect(p, ChangeKind::Deleted, b))),
            (None, Some(a)) => out.push((false, expect(p, ChangeKind::Created, a))),
            (Some(b), Some(a)) if b.kind() != a.kind() => {
                out.push((
                    b.kind() == NodeKind::Dir,
                    expect(p, ChangeKind::Modified, a),
                ));
            }
            (Some(M::File { data: d1, mode: m1 }), Some(a @ M::File { data: d2, mode: m2 })) => {
                if d1 != d2 {
                    out.push((false, expect(p, ChangeKind::Modified, a)));
                } else if m1 != m2 {
                    out.push((false, expect(p, ChangeKind::ModeChanged, a)));
                }
            }
            (Some(M::Link { target: t1 }), Some(a @ M::Link { target: t2 })) if t1 != t2 => {
                out.push((false, expect(p, ChangeKind::Modified, a)));
            }
            (Some(M::Dir { mode: m1 }), Some(a @ M::Dir { mode: m2 })) if m1 != m2 => {
                out.push((false, expect(p, ChangeKind::ModeChanged, a)));
            }
            _ => {}
        }
    }
    // Renames: each created file or symlink, in path order, takes the first
    // deleted one (path order) equal in kind, mode and content whose parent
    // is a directory before and after.
    let mut used = vec![false; out.len()];
    let created: Vec<usize> = (0..out.len())
        .filter(|&i| out[i].1.1 == ChangeKind::Created && out[i].1.2 != NodeKind::Dir)
        .collect();
    for ci in created {
        let cp = out[ci].1.0.clone();
        let cnode = &after[&cp];
        let source = (0..out.len()).find(|&di| {
            let (_, (dp, kind, ..)) = &out[di];
            !used[di]
                && *kind == ChangeKind::Deleted
                && {
                    let parent = dp.parent().unwrap();
                    is_dir(before, parent) && is_dir(after, parent)
                }
                && before[dp] == *cnode
        });
        if let Some(di) = source {
            used[di] = true;
            let from = out[di].1.0.clone();
            out[ci].1.1 = ChangeKind::Renamed { from };
        }
    }
    let mut kept: Vec<(bool, Expected)> = out
        .into_iter()
        .zip(used)
        .filter(|(_, u)| !u)
        .map(|(e, _)| e)
        .collect();
    let key = |(after, e): &(bool, Expected)| {
        let mut k: Vec<(u8, Vec<u8>)> =
            e.0.components()
                .map(|c| (0, c.as_os_str().as_encoded_bytes().to_vec()))
                .collect();
        if *after || e.1 == ChangeKind::Deleted {
            k.push((1, Vec::new()));
        }
        k
    };
    kept.sort_by_key(key);
    kept.into_iter().map(|(_, e)| e).collect()
}

fn actual(set: &ChangeSet) -> Vec<Expected> {
    set.changes
        .iter()
        .map(|c| {
            assert_eq!(c.root, 0);
            assert!(!c.node.file_caps);
            (
                c.path.clone(),
                c.kind.clone(),
                c.node.kind,
                c.node.mode,
                c.node.size,
                c.node.link_target.clone(),
            )
        })
        .collect()
}

/// What the model expects of one change during a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Applied(PathBuf),
    Refused(PathBuf),
    Conflict(PathBuf),
}

/// The model of `Stage::commit` over the host tree `host`: the events, and
/// `host` as the commit leaves it. `touched` is a host path edited after
/// the stage began.
fn model_commit(
    host: &mut Tree,
    after: &Tree,
    changes: &[Expected],
    refused: &[bool],
    touched: Option<&Path>,
) -> Vec<Event> {
    let mut events = Vec::new();
    for (e, &refuse) in changes.iter().zip(refused) {
        let (path, kind, node_kind, ..) = e;
        if refuse {
            events.push(Event::Refused(path.clone()));
            continue;
        }
        let conflict = Event::Conflict(path.clone());
        let parent = path.parent().unwrap();
        if !is_dir(host, parent) {
            events.push(conflict);
            continue;
        }
        let here = host.get(path).cloned();
        let ok = match (kind, &here) {
            (ChangeKind::Created | ChangeKind::Renamed { .. }, h) => h.is_none(),
            (_, None) => false,
            (k, Some(h)) => {
                let kind_moved = matches!(k, ChangeKind::ModeChanged | ChangeKind::Deleted)
                    && h.kind() != *node_kind;
                let edited = h.kind() != NodeKind::Dir && touched == Some(path.as_path());
                !kind_moved && !edited
            }
        };
        if !ok {
            events.push(conflict);
            continue;
        }
        let has_children = children(host, path).next().is_some();
        match kind {
            ChangeKind::Deleted => {
                if *node_kind == NodeKind::Dir && has_children {
                    events.push(conflict);
                    continue;
                }
                host.remove(path);
            }
            ChangeKind::Renamed { from } => {
                let fine = is_dir(host, from.parent().unwrap())
                    && host.get(from).map(M::kind) == Some(*node_kind)
                    && touched != Some(from.as_path());
                if !fine {
                    events.push(conflict);
                    continue;
                }
                let node = host.remove(from).unwrap();
                host.insert(path.clone(), node);
            }
            ChangeKind::ModeChanged => {
                host.insert(path.clone(), after[path].clone());
            }
            _ => {
                if *node_kind != NodeKind::Dir
                    && here.map(|h| h.kind()) == Some(NodeKind::Dir)
                    && has_children
                {
                    events.push(conflict);
                    continue;
                }
                host.insert(path.clone(), after[path].clone());
            }
        }
        events.push(Event::Applied(path.clone()));
    }
    events
}

/// A ctime stamp such that any later change has a strictly later ctime.
fn stamp(dir: &Path) -> Stamp {
    let probe = dir.join(".stamp-probe");
    fs::write(&probe, b"").unwrap();
    let m = fs::symlink_metadata(&probe).unwrap();
    let s = Stamp {
        sec: m.ctime(),
        nsec: m.ctime_nsec(),
    };
    for i in 0u32.. {
        fs::set_permissions(
            &probe,
            fs::Permissions::from_mode(0o600 | ((i % 2) * 0o040)),
        )
        .unwrap();
        let m = fs::symlink_metadata(&probe).unwrap();
        if (m.ctime(), m.ctime_nsec()) > (s.sec, s.nsec) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    fs::remove_file(&probe).unwrap();
    s
}

/// One case on disk: the host tree, a stage, the edits made through a real
/// overlay.
struct Case {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    before: Tree,
    after: Tree,
    stage: Stage,
    script: Vec<String>,
}

fn run_case(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().to_path_buf();
    for d in [
        "host",
        "merged",
        "stage/0/upper",
        "stage/0/work",
        "stage/0/quarantine",
    ] {
        fs::create_dir_all(base.join(d)).unwrap();
    }
    let before = random_tree(&mut rng);
    write_tree(&base.join("host"), &before);
    let started = stamp(&base);
    let mut after = before.clone();
    let script = random_edits(&mut rng, &mut after, &base.join("merged"));
    let mount = format!(
        "mount -t overlay overlay -o lowerdir={h},upperdir={u},workdir={w},userxattr {m}",
        h = base.join("host").display(),
        u = base.join("stage/0/upper").display(),
        w = base.join("stage/0/work").display(),
        m = base.join("merged").display(),
    );
    let full = format!("set -e\n{mount}\n{}\n", script.join("\n"));
    let mut child = Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--mount",
            "--",
            "/bin/sh",
            "-c",
            &full,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("unshare(1) runs the overlay child");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("seed {seed}: the overlay child hung:\n{full}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let out = child.wait_with_output().unwrap();
    assert!(
        status.success(),
        "seed {seed}: the overlay child failed: {}\n{full}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stage = Stage::__simulate_assembled(
        base.join("stage"),
        format!("model-{seed}"),
        vec![(
            base.join("host"),
            base.join("stage/0/upper"),
            base.join("stage/0/work"),
            base.join("stage/0/quarantine"),
            started,
        )],
    );
    Case {
        _tmp: tmp,
        base,
        before,
        after,
        stage,
        script,
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("PALISADE_STAGE_MODEL_SEED") {
        Ok(s) => vec![s.parse().expect("a seed number")],
        Err(_) => (0..CASES).collect(),
    }
}

/// A refusal of the built-in filter (`Refusal` is non_exhaustive): its
/// verdict for a new git hook, which it refuses whatever else it does.
fn refusal() -> FilterVerdict {
    let tmp = tempfile::tempdir().unwrap();
    let b = tmp.path();
    for d in ["host", "upper/.git/hooks", "q"] {
        fs::create_dir_all(b.join(d)).unwrap();
    }
    fs::write(b.join("upper/.git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
    let stage = Stage::__simulate_assembled(
        b.to_path_buf(),
        String::from("probe"),
        vec![(
            b.join("host"),
            b.join("upper"),
            b.join("q"),
            b.join("q"),
            Stamp { sec: 0, nsec: 0 },
        )],
    );
    let set = stage.changes().unwrap();
    let hook = set
        .changes
        .iter()
        .position(|c| c.path.ends_with("pre-commit"))
        .unwrap();
    let verdict = CommitFilter::new().check(&set).remove(hook);
    assert!(matches!(verdict, FilterVerdict::Refuse(_)), "{verdict:?}");
    verdict
}

fn events_of(
    stage: &Stage,
    set: &ChangeSet,
    verdicts: &[FilterVerdict],
) -> (Vec<Event>, Vec<(PathBuf, PathBuf)>) {
    let mut events = Vec::new();
    let mut quarantined = Vec::new();
    stage
        .commit(set, verdicts, None, &mut |e| {
            events.push(match e {
                CommitEvent::Applied { change, .. } => Event::Applied(change.path.clone()),
                CommitEvent::Refused {
                    change,
                    quarantined: q,
                    ..
                } => {
                    quarantined.push((change.path.clone(), q.clone()));
                    Event::Refused(change.path.clone())
                }
                CommitEvent::Conflict { change, .. } => Event::Conflict(change.path.clone()),
                other => panic!("unexpected event {other:?}"),
            });
            Ok(())
        })
        .unwrap();
    (events, quarantined)
}

#[test]
fn the_change_set_and_an_accept_all_commit_match_the_model() {
    // How often each shape occurred, so the cases cannot all be trivial.
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for seed in seeds() {
        let case = run_case(seed);
        let set = case.stage.changes().unwrap();
        for c in &set.changes {
            let shape = match (&c.kind, c.node.kind, case.before.get(&c.path)) {
                (ChangeKind::Renamed { .. }, NodeKind::Symlink, _) => "renamed symlink",
                (ChangeKind::Renamed { .. }, ..) => "renamed file",
                (ChangeKind::Deleted, NodeKind::Dir, _) => "deleted dir",
                (ChangeKind::Deleted, ..) => "deleted",
                (ChangeKind::Created, NodeKind::Dir, _) => "created dir",
                (ChangeKind::Created, ..) => "created",
                (ChangeKind::ModeChanged, NodeKind::Dir, _) => "mode of dir",
                (ChangeKind::ModeChanged, ..) => "mode of file",
                (ChangeKind::Modified, k, Some(b)) if b.kind() != k => "kind change",
                _ => "modified",
            };
            *seen.entry(shape).or_default() += 1;
        }
        let expected = model_diff(&case.before, &case.after);
        assert_eq!(
            actual(&set),
            expected,
            "seed {seed}: the change set differs from the model\nbefore {:#?}\nscript {:#?}",
            case.before,
            case.script
        );
        let verdicts: Vec<FilterVerdict> =
            set.changes.iter().map(|_| FilterVerdict::Commit).collect();
        let (events, _) = events_of(&case.stage, &set, &verdicts);
        assert!(
            events.iter().all(|e| matches!(e, Event::Applied(_))),
            "seed {seed}: {events:?}\nscript {:#?}",
            case.script
        );
        assert_eq!(
            read_tree(&case.base.join("host")),
            case.after,
            "seed {seed}: the host after the commit is not the model's final tree\nscript {:#?}",
            case.script
        );
        assert!(
            case.stage.changes().unwrap().changes.is_empty(),
            "seed {seed}: left in the stage"
        );
    }
    eprintln!("shapes over {} cases: {seen:?}", seeds().len());
    if seeds().len() > 1 {
        for shape in [
            "renamed file",
            "deleted dir",
            "created dir",
            "mode of dir",
            "mode of file",
            "kind change",
        ] {
            assert!(seen.contains_key(shape), "no case had a {shape}: {seen:?}");
        }
    }
}

#[test]
fn a_commit_with_random_refusals_matches_the_model_and_quarantines_them() {
    let refuse = refusal();
    for seed in seeds() {
        let case = run_case(seed);
        let set = case.stage.changes().unwrap();
        let expected = actual(&set);
        assert_eq!(
            expected,
            model_diff(&case.before, &case.after),
            "seed {seed}"
        );
        let mut rng = Rng::new(seed ^ 0xdead_beef);
        let refused: Vec<bool> = set.changes.iter().map(|_| rng.chance(30)).collect();
        let verdicts: Vec<FilterVerdict> = refused
            .iter()
            .map(|&r| {
                if r {
                    refuse.clone()
                } else {
                    FilterVerdict::Commit
                }
            })
            .collect();
        let mut host = case.before.clone();
        let predicted = model_commit(&mut host, &case.after, &expected, &refused, None);
        let (events, quarantined) = events_of(&case.stage, &set, &verdicts);
        assert_eq!(events, predicted, "seed {seed}\nscript {:#?}", case.script);
        assert_eq!(
            read_tree(&case.base.join("host")),
            host,
            "seed {seed}\nscript {:#?}",
            case.script
        );
        for (path, q) in quarantined {
            let m = fs::symlink_metadata(&q)
                .unwrap_or_else(|e| panic!("seed {seed}: {}: {e}", q.display()));
            let change = set.changes.iter().find(|c| c.path == path).unwrap();
            match (&change.kind, case.after.get(&path)) {
                (ChangeKind::Deleted, _) => {
                    assert_eq!((m.mode() & 0o170000, m.rdev()), (0o020000, 0))
                }
                (_, Some(M::File { data, .. })) => {
                    assert_eq!(&fs::read(&q).unwrap(), data, "seed {seed}")
                }
                (_, Some(M::Link { target })) => {
                    assert_eq!(fs::read_link(&q).unwrap(), Path::new(target))
                }
                (_, Some(M::Dir { .. })) => assert!(m.is_dir()),
                (_, None) => panic!(
                    "seed {seed}: {} refused but not in the final tree",
                    path.display()
                ),
            }
        }
        // What is left in the stage is only what was refused (a directory
        // keeps its place) or in conflict.
        for c in case.stage.changes().unwrap().changes {
            let kept = predicted
                .iter()
                .any(|e| matches!(e, Event::Conflict(p) | Event::Refused(p) if *p == c.path));
            assert!(
                kept,
                "seed {seed}: {} left in the stage: {c:?}\nchanges {:#?}\nevents {predicted:?}",
                c.path.display(),
                set.changes
            );
        }
    }
}

#[test]
fn a_host_edit_after_the_stage_began_is_a_conflict_and_is_not_overwritten() {
    let mut checked = 0;
    for seed in seeds() {
        let case = run_case(seed);
        let set = case.stage.changes().unwrap();
        let expected = actual(&set);
        // A host file the worker changed or removed, edited on the host now.
        let Some(target) = set
            .changes
            .iter()
            .find(|c| {
                matches!(
                    c.kind,
                    ChangeKind::Modified | ChangeKind::ModeChanged | ChangeKind::Deleted
                ) && matches!(case.before.get(&c.path), Some(M::File { .. }))
            })
            .map(|c| c.path.clone())
        else {
            continue;
        };
        let edited = case.base.join("host").join(&target);
        fs::write(&edited, b"host edit").unwrap();
        let mut host = case.before.clone();
        if let Some(M::File { data, .. }) = host.get_mut(&target) {
            *data = b"host edit".to_vec();
        }
        let refused = vec![false; expected.len()];
        let predicted = model_commit(&mut host, &case.after, &expected, &refused, Some(&target));
        assert!(
            predicted.contains(&Event::Conflict(target.clone())),
            "seed {seed}"
        );
        let verdicts: Vec<FilterVerdict> =
            set.changes.iter().map(|_| FilterVerdict::Commit).collect();
        let (events, _) = events_of(&case.stage, &set, &verdicts);
        assert_eq!(events, predicted, "seed {seed}\nscript {:#?}", case.script);
        assert_eq!(
            fs::read(&edited).unwrap(),
            b"host edit",
            "seed {seed}: overwritten"
        );
        assert_eq!(read_tree(&case.base.join("host")), host, "seed {seed}");
        // The conflict is still in the stage.
        assert!(
            case.stage
                .changes()
                .unwrap()
                .changes
                .iter()
                .any(|c| c.path == target),
            "seed {seed}"
        );
        checked += 1;
    }
    assert!(
        checked > 0 || seeds().len() == 1,
        "no case had a host file to edit"
    );
}
