//! Red-team fixes of the change set and the commit, over hand-built overlay
//! upper layers: the git directories a change set lists (an existing bare
//! repository, whatever its name, is judged as a `.git`), and the owner of
//! what a root launcher commits, on the stage's filesystem and across
//! filesystems. Every refusal has its positive control next to it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, chown, lchown, symlink};
use std::path::{Path, PathBuf};

use palisade_isolate::stage::{ChangeSet, CommitEvent, CommitFilter, FilterVerdict, Stage, Stamp};

/// One host root and a stage whose upper lies in `stage_base` (the host's
/// filesystem when `None`).
struct Fixture {
    _tmp: tempfile::TempDir,
    _other: Option<tempfile::TempDir>,
    root: PathBuf,
    stage_dir: PathBuf,
    upper: PathBuf,
}

impl Fixture {
    fn new(stage_base: Option<&Path>) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("host");
        fs::create_dir_all(&root).unwrap();
        let other = stage_base.map(|b| tempfile::tempdir_in(b).unwrap());
        let stage_dir = other
            .as_ref()
            .map_or_else(|| tmp.path().join("stage"), |o| o.path().join("stage"));
        for d in ["0/upper", "0/work", "0/quarantine"] {
            fs::create_dir_all(stage_dir.join(d)).unwrap();
        }
        let upper = stage_dir.join("0/upper");
        Fixture {
            _tmp: tmp,
            _other: other,
            root,
            stage_dir,
            upper,
        }
    }

    fn stage(&self) -> Stage {
        Stage::__simulate_assembled(
            self.stage_dir.clone(),
            String::from("s1"),
            vec![(
                self.root.clone(),
                self.upper.clone(),
                self.stage_dir.join("0/work"),
                self.stage_dir.join("0/quarantine"),
                stamp(&self.root),
            )],
        )
    }

    fn write(base: &Path, rel: &str, content: &str) {
        let p = base.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }
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
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    fs::remove_file(&probe).unwrap();
    s
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Commit `set` with `verdicts`; the events as `kind path` lines.
fn commit(stage: &Stage, set: &ChangeSet, verdicts: &[FilterVerdict]) -> Vec<String> {
    let mut events = Vec::new();
    stage
        .commit(set, verdicts, None, &mut |e| {
            events.push(match e {
                CommitEvent::Applied { change, .. } => format!("applied {}", change.path.display()),
                CommitEvent::Refused {
                    change, refusal, ..
                } => {
                    format!("refused {} {}", change.path.display(), refusal.rule)
                }
                CommitEvent::Conflict { change, detail } => {
                    format!("conflict {}: {detail}", change.path.display())
                }
                _ => String::from("unknown"),
            });
            Ok(())
        })
        .unwrap();
    events
}

/// A host bare repository (`HEAD`, `objects`, `refs`).
fn bare(base: &Path, rel: &str) {
    Fixture::write(base, &format!("{rel}/HEAD"), "ref: refs/heads/main\n");
    Fixture::write(base, &format!("{rel}/config"), "[core]\n\tbare = true\n");
    for d in ["objects", "refs/heads", "hooks"] {
        fs::create_dir_all(base.join(rel).join(d)).unwrap();
    }
}

#[test]
fn the_change_set_lists_the_git_directories_its_changes_lie_in() {
    let f = Fixture::new(None);
    bare(&f.root, "vendor/up.git");
    // A linked worktree's gitdir: `HEAD` and `commondir`.
    Fixture::write(&f.root, "wt/gd/HEAD", "ref: refs/heads/x\n");
    Fixture::write(&f.root, "wt/gd/commondir", "../../vendor/up.git\n");
    // A gitdir whose `HEAD` the worker still has to write: `commondir`.
    Fixture::write(&f.root, "wt/gd2/commondir", "../../vendor/up.git\n");
    Fixture::write(&f.upper, "wt/gd2/hooks/pre-commit", "#!/bin/sh\n");
    // A repository the worker made inside the host's `.git` (nothing
    // refuses a `HEAD` under `.git/refs`), and one it made elsewhere (its
    // `HEAD` is refused, so it never is one on the host).
    bare(&f.root, ".git");
    bare(&f.upper, ".git/refs/sub");
    bare(&f.upper, "cache.git");
    // Positive control: a directory with a `HEAD` alone is not one.
    Fixture::write(&f.root, "docs/HEAD", "not git\n");
    fs::create_dir_all(f.upper.join("vendor/up.git/hooks")).unwrap();
    Fixture::write(&f.upper, "vendor/up.git/hooks/post-update", "#!/bin/sh\n");
    Fixture::write(&f.upper, "vendor/up.git/refs/heads/main", "0000\n");
    Fixture::write(&f.upper, "wt/gd/config", "[core]\n");
    Fixture::write(&f.upper, "docs/notes", "n\n");
    Fixture::write(&f.upper, "vendor/README", "r\n");
    // A repository only the worker's view has (the upper adds `refs` to a
    // host directory with a `HEAD`).
    Fixture::write(&f.root, "half/HEAD", "ref: refs/heads/main\n");
    Fixture::write(&f.upper, "half/refs/heads/main", "0000\n");
    let set = f.stage().changes().unwrap();
    let dirs: Vec<String> = set
        .git_dirs
        .iter()
        .map(|(r, p)| format!("{r}:{}", p.display()))
        .collect();
    assert_eq!(
        dirs,
        [
            "0:.git",
            "0:.git/refs/sub",
            "0:cache.git",
            "0:half",
            "0:vendor/up.git",
            "0:wt/gd",
            "0:wt/gd2"
        ]
    );

    let verdicts = CommitFilter::new().check(&set);
    let got: Vec<String> = set
        .changes
        .iter()
        .zip(&verdicts)
        .map(|(c, v)| match v {
            FilterVerdict::Commit => format!("commit {}", c.path.display()),
            FilterVerdict::Refuse(r) => format!("refuse {} {}", c.path.display(), r.rule),
            _ => String::from("unknown"),
        })
        .collect();
    for want in [
        "refuse vendor/up.git/hooks/post-update git_internal",
        "refuse wt/gd/config git_internal",
        "refuse wt/gd2/hooks git_internal",
        "refuse wt/gd2/hooks/pre-commit git_internal",
        "refuse .git/refs/sub/config new_repository",
        "refuse .git/refs/sub/refs/heads new_repository",
        "refuse cache.git/HEAD bare_repository",
        // Positive controls: refs commit inside, ordinary files beside, and
        // what a directory that cannot become a repository holds.
        "commit cache.git/config",
        "commit cache.git/refs/heads",
        "commit vendor/up.git/refs/heads/main",
        "commit half/refs/heads/main",
        "commit vendor/README",
        "commit docs/notes",
    ] {
        assert!(got.iter().any(|g| g == want), "{want} not in {got:#?}");
    }
}

#[test]
fn a_root_launcher_commits_nodes_with_their_upper_owner_on_one_filesystem() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    owners_survive(None);
}

#[test]
fn a_root_launcher_commits_nodes_with_their_upper_owner_across_filesystems() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let shm = Path::new("/dev/shm");
    let dev = |p: &Path| fs::metadata(p).unwrap().dev();
    if !shm.is_dir() || dev(shm) == dev(tmp.path()) {
        eprintln!("skipped: /dev/shm is not another filesystem here");
        return;
    }
    owners_survive(Some(shm));
}

/// The worker (uid/gid 4242) left a new directory with a file, a new
/// symlink, and an edit of a host file of its own; each lands owned by it.
fn owners_survive(stage_base: Option<&Path>) {
    let (uid, gid) = (4242, 4243);
    let f = Fixture::new(stage_base);
    Fixture::write(&f.root, "mine.txt", "host\n");
    chown(f.root.join("mine.txt"), Some(uid), Some(gid)).unwrap();
    fs::create_dir(f.upper.join("newdir")).unwrap();
    fs::set_permissions(f.upper.join("newdir"), fs::Permissions::from_mode(0o750)).unwrap();
    Fixture::write(&f.upper, "newdir/f", "f\n");
    Fixture::write(&f.upper, "mine.txt", "host\nedited\n");
    symlink("newdir/f", f.upper.join("link")).unwrap();
    for p in ["newdir", "newdir/f", "mine.txt"] {
        chown(f.upper.join(p), Some(uid), Some(gid)).unwrap();
    }
    lchown(f.upper.join("link"), Some(uid), Some(gid)).unwrap();
    let stage = f.stage();
    let set = stage.changes().unwrap();
    let verdicts = CommitFilter::new().check(&set);
    let events = commit(&stage, &set, &verdicts);
    assert_eq!(
        events,
        [
            "applied link",
            "applied mine.txt",
            "applied newdir",
            "applied newdir/f"
        ]
    );
    // Positive control: the content and the mode landed.
    assert_eq!(
        fs::read_to_string(f.root.join("mine.txt")).unwrap(),
        "host\nedited\n"
    );
    assert_eq!(
        fs::read_link(f.root.join("link")).unwrap(),
        Path::new("newdir/f")
    );
    assert_eq!(
        fs::metadata(f.root.join("newdir")).unwrap().mode() & 0o7777,
        0o750
    );
    let wrong: Vec<String> = ["newdir", "newdir/f", "mine.txt", "link"]
        .iter()
        .filter_map(|p| {
            let m = fs::symlink_metadata(f.root.join(p)).unwrap();
            ((m.uid(), m.gid()) != (uid, gid)).then(|| format!("{p} {}:{}", m.uid(), m.gid()))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "owned otherwise than the upper node after the commit: {wrong:?}"
    );
}
