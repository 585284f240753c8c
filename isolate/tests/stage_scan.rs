//! The change set and the commit over hand-built overlay upper layers: each
//! whiteout and opaque form, renames, kind changes, the scan's limits, and
//! the commit's quarantine, conflicts, symlink refusal, `only` and record
//! errors. Every refusal has its positive control next to it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use nix::sys::stat::{Mode, SFlag, mknod};
use palisade_isolate::stage::{
    ChangeKind, ChangeSet, CommitEvent, FilterVerdict, NodeKind, Stage, StageError, Stamp,
};

/// One root with its upper, work and quarantine directories.
struct Fixture {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    root: PathBuf,
    upper: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().to_path_buf();
        let root = base.join("host");
        for d in [
            "host",
            "stage/0/upper",
            "stage/0/work",
            "stage/0/quarantine",
        ] {
            fs::create_dir_all(base.join(d)).unwrap();
        }
        let upper = base.join("stage/0/upper");
        Fixture {
            _tmp: tmp,
            base,
            root,
            upper,
        }
    }

    fn quarantine(&self) -> PathBuf {
        self.base.join("stage/0/quarantine")
    }

    /// The stage, stamped now (after the host tree was built).
    fn stage(&self, started: Stamp) -> Stage {
        Stage::__simulate_assembled(
            self.base.join("stage"),
            String::from("s1"),
            vec![(
                self.root.clone(),
                self.upper.clone(),
                self.base.join("stage/0/work"),
                self.quarantine(),
                started,
            )],
        )
    }

    fn host(&self, rel: &str, content: &str) {
        let p = self.root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    fn up(&self, rel: &str, content: &str) {
        let p = self.upper.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    fn whiteout(&self, rel: &str) {
        let p = self.upper.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        mknod(&p, SFlag::S_IFCHR, Mode::empty(), 0).unwrap();
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

/// The change set as `(kind, path)` lines, in order.
fn summary(set: &ChangeSet) -> Vec<String> {
    set.changes
        .iter()
        .map(|c| match &c.kind {
            ChangeKind::Renamed { from } => {
                format!("renamed {} <- {}", c.path.display(), from.display())
            }
            k => format!("{} {}", format!("{k:?}").to_lowercase(), c.path.display()),
        })
        .collect()
}

fn accept_all(set: &ChangeSet) -> Vec<FilterVerdict> {
    set.changes.iter().map(|_| FilterVerdict::Commit).collect()
}

/// Commit and return the events as `(kind, path, detail)` lines.
fn commit(stage: &Stage, set: &ChangeSet, verdicts: &[FilterVerdict]) -> Vec<String> {
    let mut events = Vec::new();
    stage
        .commit(set, verdicts, None, &mut |e| {
            events.push(match e {
                CommitEvent::Applied { change, .. } => format!("applied {}", change.path.display()),
                CommitEvent::Refused { change, .. } => format!("refused {}", change.path.display()),
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

#[test]
fn a_character_device_whiteout_deletes_its_host_file_and_nothing_else() {
    let f = Fixture::new();
    f.host("a", "one");
    f.host("b", "two");
    let st = stamp(&f.base);
    f.whiteout("a");
    assert_eq!(summary(&f.stage(st).changes().unwrap()), ["deleted a"]);
}

#[test]
fn an_xattr_whiteout_deletes_and_an_empty_file_without_it_is_a_file() {
    let f = Fixture::new();
    f.host("d/a", "one");
    f.host("d/b", "two");
    let st = stamp(&f.base);
    f.up("d/a", "");
    f.up("d/b", "");
    Stage::__simulate_set_xattr(&f.upper.join("d"), "user.overlay.opaque", b"x").unwrap();
    Stage::__simulate_set_xattr(&f.upper.join("d/a"), "user.overlay.whiteout", b"").unwrap();
    // `x` is not opaque: nothing else under d is deleted; b is an empty file.
    assert_eq!(
        summary(&f.stage(st).changes().unwrap()),
        ["deleted d/a", "modified d/b"]
    );
    // The control: without `x` on d, the kernel reads the marked file as an
    // empty file, and so does the scan.
    Stage::__simulate_set_xattr(&f.upper.join("d"), "user.overlay.opaque", b"").unwrap();
    assert_eq!(
        summary(&f.stage(st).changes().unwrap()),
        ["modified d/a", "modified d/b"]
    );
}

#[test]
fn an_opaque_directory_hides_every_host_entry_below_it_and_x_hides_none() {
    let f = Fixture::new();
    f.host("d/a", "one");
    f.host("d/b", "two");
    f.host("d/sub/c", "three");
    let st = stamp(&f.base);
    f.up("d/a", "one");
    Stage::__simulate_set_xattr(&f.upper.join("d"), "user.overlay.opaque", b"y").unwrap();
    assert_eq!(
        summary(&f.stage(st).changes().unwrap()),
        ["deleted d/b", "deleted d/sub/c", "deleted d/sub"]
    );
    // The same upper with `x`: a merged directory, nothing deleted.
    Stage::__simulate_set_xattr(&f.upper.join("d"), "user.overlay.opaque", b"x").unwrap();
    assert!(f.stage(st).changes().unwrap().changes.is_empty());
}

#[test]
fn a_deleted_directory_expands_deepest_first_then_itself() {
    let f = Fixture::new();
    f.host("d/e/f", "1");
    f.host("d/g", "2");
    f.host("keep", "3");
    let st = stamp(&f.base);
    f.whiteout("d");
    assert_eq!(
        summary(&f.stage(st).changes().unwrap()),
        ["deleted d/e/f", "deleted d/e", "deleted d/g", "deleted d"]
    );
}

#[test]
fn a_copied_up_directory_is_no_change_unless_its_mode_changed() {
    let f = Fixture::new();
    f.host("d/old", "1");
    fs::set_permissions(f.root.join("d"), fs::Permissions::from_mode(0o755)).unwrap();
    let st = stamp(&f.base);
    f.up("d/new", "2");
    fs::set_permissions(f.upper.join("d"), fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(summary(&f.stage(st).changes().unwrap()), ["created d/new"]);
    fs::set_permissions(f.upper.join("d"), fs::Permissions::from_mode(0o700)).unwrap();
    let set = f.stage(st).changes().unwrap();
    assert_eq!(summary(&set), ["modechanged d", "created d/new"]);
    assert_eq!(set.changes[0].node.mode, 0o700);
}

#[test]
fn a_moved_file_is_a_rename_only_when_content_and_mode_are_equal() {
    let f = Fixture::new();
    f.host("a", "same bytes");
    f.host("d/x", "other");
    let st = stamp(&f.base);
    f.whiteout("a");
    f.up("b", "same bytes");
    fs::set_permissions(f.upper.join("b"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::set_permissions(f.root.join("a"), fs::Permissions::from_mode(0o644)).unwrap();
    let set = f.stage(st).changes().unwrap();
    assert_eq!(summary(&set), ["renamed b <- a"]);
    // Control: same size, different bytes is created + deleted.
    f.up("b", "same bytez");
    assert_eq!(
        summary(&f.stage(st).changes().unwrap()),
        ["deleted a", "created b"]
    );
    // Control: same bytes, another mode is created + deleted.
    f.up("b", "same bytes");
    fs::set_permissions(f.upper.join("b"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        summary(&f.stage(st).changes().unwrap()),
        ["deleted a", "created b"]
    );
}

#[test]
fn a_host_directory_replaced_by_a_file_deletes_its_contents_first() {
    let f = Fixture::new();
    f.host("d/x", "1");
    let st = stamp(&f.base);
    f.up("d", "now a file");
    let set = f.stage(st).changes().unwrap();
    assert_eq!(summary(&set), ["deleted d/x", "modified d"]);
    assert_eq!(set.changes[1].node.kind, NodeKind::File);
    let events = commit(&f.stage(st), &set, &accept_all(&set));
    assert_eq!(events, ["applied d/x", "applied d"]);
    assert_eq!(fs::read_to_string(f.root.join("d")).unwrap(), "now a file");
}

#[test]
fn the_scan_refuses_absurd_depth_with_the_path() {
    let f = Fixture::new();
    let st = stamp(&f.base);
    let mut p = f.upper.clone();
    for _ in 0..200 {
        p.push("d");
    }
    fs::create_dir_all(&p).unwrap();
    // Control: 200 levels is fine.
    assert_eq!(f.stage(st).changes().unwrap().changes.len(), 200);
    for _ in 0..60 {
        p.push("d");
    }
    fs::create_dir_all(&p).unwrap();
    let err = f.stage(st).changes().unwrap_err();
    assert!(matches!(err, StageError::Invalid { .. }), "{err}");
    assert!(
        err.to_string().contains("deeper than 256 components"),
        "{err}"
    );
}

#[test]
fn an_upper_with_a_metacopy_or_redirect_xattr_is_refused() {
    let f = Fixture::new();
    f.host("a", "x");
    let st = stamp(&f.base);
    f.up("a", "y");
    assert_eq!(summary(&f.stage(st).changes().unwrap()), ["modified a"]);
    Stage::__simulate_set_xattr(&f.upper.join("a"), "user.overlay.metacopy", b"").unwrap();
    let err = f.stage(st).changes().unwrap_err();
    assert!(err.to_string().contains("metacopy"), "{err}");
}

#[test]
fn commit_applies_every_kind_and_leaves_an_empty_stage() {
    let f = Fixture::new();
    f.host("mod", "old");
    f.host("gone", "bye");
    f.host("moved", "travels");
    f.host("chm", "mode only");
    fs::set_permissions(f.root.join("chm"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::set_permissions(f.root.join("moved"), fs::Permissions::from_mode(0o644)).unwrap();
    let st = stamp(&f.base);
    f.up("mod", "new");
    f.whiteout("gone");
    f.whiteout("moved");
    f.up("dir/arrived", "travels");
    fs::set_permissions(
        f.upper.join("dir/arrived"),
        fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    f.up("dir/fresh", "hello");
    f.up("chm", "mode only");
    fs::set_permissions(f.upper.join("chm"), fs::Permissions::from_mode(0o600)).unwrap();
    symlink("fresh", f.upper.join("dir/link")).unwrap();
    Stage::__simulate_set_xattr(&f.upper.join("mod"), "user.overlay.origin", b"junk").unwrap();
    let stage = f.stage(st);
    let set = stage.changes().unwrap();
    assert_eq!(
        summary(&set),
        [
            "modechanged chm",
            "created dir",
            "renamed dir/arrived <- moved",
            "created dir/fresh",
            "created dir/link",
            "deleted gone",
            "modified mod"
        ]
    );
    let mut digests = Vec::new();
    let report = stage
        .commit(&set, &accept_all(&set), None, &mut |e| {
            if let CommitEvent::Applied {
                change,
                before,
                after,
            } = e
            {
                digests.push((change.path.clone(), *before, *after));
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(report.applied, 7);
    assert_eq!(fs::read_to_string(f.root.join("mod")).unwrap(), "new");
    assert!(!f.root.join("gone").exists() && !f.root.join("moved").exists());
    assert_eq!(
        fs::read_to_string(f.root.join("dir/arrived")).unwrap(),
        "travels"
    );
    assert_eq!(
        fs::read_link(f.root.join("dir/link")).unwrap(),
        Path::new("fresh")
    );
    assert_eq!(
        fs::metadata(f.root.join("chm"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o600
    );
    let sha = |b: &[u8]| {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(b))
    };
    let of = |p: &str| digests.iter().find(|(q, ..)| q == Path::new(p)).unwrap();
    assert_eq!(
        of("mod").1.unwrap().to_string(),
        format!("sha256:{}", sha(b"old"))
    );
    assert_eq!(
        of("mod").2.unwrap().to_string(),
        format!("sha256:{}", sha(b"new"))
    );
    assert_eq!(
        of("dir/link").2.unwrap().to_string(),
        format!("sha256:{}", sha(b"fresh"))
    );
    assert!(of("gone").2.is_none() && of("dir").1.is_none() && of("dir/fresh").1.is_none());
    // What was applied left the upper: nothing is left to commit.
    assert!(stage.changes().unwrap().changes.is_empty());
    assert_eq!(fs::read_dir(&f.upper).unwrap().count(), 0);
}

#[test]
fn a_refused_change_goes_to_quarantine_and_never_reaches_the_host() {
    let f = Fixture::new();
    f.host(".git/config", "[core]\n");
    let st = stamp(&f.base);
    f.up(".git/config", "[core]\n\tfsmonitor = evil\n");
    f.up("src.rs", "fn main() {}\n");
    let stage = f.stage(st);
    let set = stage.changes().unwrap();
    assert_eq!(summary(&set), ["modified .git/config", "created src.rs"]);
    let verdicts: Vec<FilterVerdict> = set
        .changes
        .iter()
        .map(|c| {
            if c.path.starts_with(".git") {
                refusal()
            } else {
                FilterVerdict::Commit
            }
        })
        .collect();
    let events = commit(&stage, &set, &verdicts);
    assert_eq!(events, ["refused .git/config", "applied src.rs"]);
    assert_eq!(
        fs::read_to_string(f.root.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert_eq!(
        fs::read_to_string(f.quarantine().join(".git/config")).unwrap(),
        "[core]\n\tfsmonitor = evil\n"
    );
    // The positive control: the accepted file landed.
    assert_eq!(
        fs::read_to_string(f.root.join("src.rs")).unwrap(),
        "fn main() {}\n"
    );
    assert!(stage.changes().unwrap().changes.is_empty());
}

/// A refusal of the built-in filter (`Refusal` is non_exhaustive): its
/// verdict for a new git hook, which it refuses whatever else it does.
fn refusal() -> FilterVerdict {
    let f = Fixture::new();
    let st = stamp(&f.base);
    f.up(".git/hooks/pre-commit", "#!/bin/sh\n");
    let set = f.stage(st).changes().unwrap();
    let hook = set
        .changes
        .iter()
        .position(|c| c.path == Path::new(".git/hooks/pre-commit"))
        .unwrap();
    let verdict = palisade_isolate::stage::CommitFilter::new()
        .check(&set)
        .remove(hook);
    assert!(matches!(verdict, FilterVerdict::Refuse(_)), "{verdict:?}");
    verdict
}

#[test]
fn a_host_edit_after_the_stage_began_is_a_conflict_and_is_kept() {
    let f = Fixture::new();
    f.host("a", "base");
    f.host("b", "base");
    let st = stamp(&f.base);
    f.up("a", "worker");
    f.up("b", "worker");
    // The host edits a after the stage began; b is the control.
    f.host("a", "host edit");
    let stage = f.stage(st);
    let set = stage.changes().unwrap();
    let events = commit(&stage, &set, &accept_all(&set));
    assert_eq!(events.len(), 2);
    assert!(
        events[0].starts_with("conflict a: the host changed this node"),
        "{events:?}"
    );
    assert_eq!(events[1], "applied b");
    assert_eq!(fs::read_to_string(f.root.join("a")).unwrap(), "host edit");
    assert_eq!(fs::read_to_string(f.root.join("b")).unwrap(), "worker");
    // The conflict stays in the stage.
    assert_eq!(fs::read_to_string(f.upper.join("a")).unwrap(), "worker");
    assert_eq!(summary(&stage.changes().unwrap()), ["modified a"]);
}

#[test]
fn a_created_path_the_host_also_created_is_a_conflict() {
    let f = Fixture::new();
    let st = stamp(&f.base);
    f.up("new", "worker");
    f.up("other", "worker");
    let stage = f.stage(st);
    let set = stage.changes().unwrap();
    f.host("new", "host");
    let events = commit(&stage, &set, &accept_all(&set));
    assert!(
        events[0].starts_with("conflict new: the host created"),
        "{events:?}"
    );
    assert_eq!(events[1], "applied other");
    assert_eq!(fs::read_to_string(f.root.join("new")).unwrap(), "host");
}

#[test]
fn a_host_parent_that_is_a_symlink_is_never_followed() {
    let f = Fixture::new();
    let outside = f.base.join("outside");
    fs::create_dir(&outside).unwrap();
    fs::create_dir(f.root.join("real")).unwrap();
    symlink(&outside, f.root.join("link")).unwrap();
    let st = stamp(&f.base);
    f.up("link/planted", "evil");
    f.up("real/planted", "fine");
    let stage = f.stage(st);
    // The scan sees `link` as a directory over a symlink: a kind change.
    // Hand the commit the file change alone, as if the directory were
    // already there, and with the host's symlink in the way.
    let set = stage.changes().unwrap();
    let mut only_files = set.clone();
    only_files.changes.retain(|c| c.node.kind == NodeKind::File);
    assert_eq!(
        summary(&only_files),
        ["created link/planted", "created real/planted"]
    );
    let events = commit(&stage, &only_files, &accept_all(&only_files));
    assert!(
        events[0].starts_with("conflict link/planted: the host parent directory"),
        "{events:?}"
    );
    assert_eq!(events[1], "applied real/planted");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    assert_eq!(
        fs::read_to_string(f.root.join("real/planted")).unwrap(),
        "fine"
    );
}

#[test]
fn a_deleted_directory_that_is_not_empty_on_the_host_is_a_conflict() {
    let f = Fixture::new();
    f.host("d/a", "1");
    f.host("e/a", "1");
    let st = stamp(&f.base);
    f.whiteout("d");
    f.whiteout("e");
    let stage = f.stage(st);
    let set = stage.changes().unwrap();
    f.host("d/host-added", "2");
    let events = commit(&stage, &set, &accept_all(&set));
    assert_eq!(events[0], "applied d/a");
    assert!(
        events[1].starts_with("conflict d: the host directory is not empty"),
        "{events:?}"
    );
    assert_eq!(&events[2..], ["applied e/a", "applied e"]);
    assert!(f.root.join("d/host-added").exists());
    assert!(!f.root.join("e").exists());
}

#[test]
fn only_commits_the_selected_paths_and_the_directories_above_them() {
    let f = Fixture::new();
    let st = stamp(&f.base);
    f.up("src/new/a.rs", "a");
    f.up("docs/b.md", "b");
    let stage = f.stage(st);
    let set = stage.changes().unwrap();
    let only = [(0usize, PathBuf::from("src/new/a.rs"))];
    let report = stage
        .commit(&set, &accept_all(&set), Some(&only), &mut |_| Ok(()))
        .unwrap();
    assert_eq!((report.applied, report.skipped), (3, 2));
    assert_eq!(
        fs::read_to_string(f.root.join("src/new/a.rs")).unwrap(),
        "a"
    );
    assert!(!f.root.join("docs").exists());
    assert_eq!(
        summary(&stage.changes().unwrap()),
        ["created docs", "created docs/b.md"]
    );
}

#[test]
fn a_refused_record_stops_the_commit_naming_the_path() {
    let f = Fixture::new();
    let st = stamp(&f.base);
    f.up("a", "1");
    f.up("b", "2");
    let stage = f.stage(st);
    let set = stage.changes().unwrap();
    let err = stage
        .commit(&set, &accept_all(&set), None, &mut |_| {
            Err(String::from("journal full"))
        })
        .unwrap_err();
    match &err {
        StageError::Record { path, detail } => {
            assert_eq!(path, Path::new("a"));
            assert_eq!(detail, "journal full");
        }
        other => panic!("{other}"),
    }
    // a was applied, b is still in the stage.
    assert!(f.root.join("a").exists() && !f.root.join("b").exists());
    assert_eq!(summary(&stage.changes().unwrap()), ["created b"]);
}

/// How long the scan and the commit of 10,000 small files take, modified
/// (each rename replaces a host file) or created (run by hand: `cargo test
/// --release -p palisade-isolate --test stage_scan -- --ignored --nocapture
/// ten_thousand`; `cargo xtask bench` measures it properly). They assert the
/// outcome, never the time.
fn ten_thousand_small_files(modified: bool) {
    let f = Fixture::new();
    for d in 0..100 {
        for i in 0..100 {
            if modified {
                f.host(&format!("d{d}/f{i}.rs"), "old");
            } else {
                fs::create_dir_all(f.root.join(format!("d{d}"))).unwrap();
            }
        }
    }
    let st = stamp(&f.base);
    for d in 0..100 {
        for i in 0..100 {
            f.up(&format!("d{d}/f{i}.rs"), "new!");
        }
    }
    let stage = f.stage(st);
    let t0 = std::time::Instant::now();
    let set = stage.changes().unwrap();
    let scanned = t0.elapsed();
    assert_eq!(set.changes.len(), 10_000);
    let cpu = || {
        use nix::sys::resource::{UsageWho, getrusage};
        let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
        let t = |v: nix::sys::time::TimeVal| {
            std::time::Duration::new(v.tv_sec() as u64, v.tv_usec() as u32 * 1000)
        };
        t(u.user_time()) + t(u.system_time())
    };
    let (t1, c1) = (std::time::Instant::now(), cpu());
    let report = stage
        .commit(&set, &accept_all(&set), None, &mut |_| Ok(()))
        .unwrap();
    let committed = t1.elapsed();
    let committed_cpu = cpu() - c1;
    assert_eq!(report.applied, 10_000);
    assert_eq!(
        fs::read_to_string(f.root.join("d42/f7.rs")).unwrap(),
        "new!"
    );
    let what = if modified { "modified" } else { "created" };
    eprintln!(
        "10,000 {what} files: changes() {scanned:?}, commit() {committed:?} wall, {committed_cpu:?} CPU"
    );
}

#[test]
#[ignore = "a measurement, run by hand"]
fn ten_thousand_small_modified_files() {
    ten_thousand_small_files(true);
}

#[test]
#[ignore = "a measurement, run by hand"]
fn ten_thousand_small_created_files() {
    ten_thousand_small_files(false);
}

#[test]
fn a_change_set_the_stage_outgrew_is_a_conflict_never_a_loss() {
    let f = Fixture::new();
    f.host("a", "same");
    fs::set_permissions(f.root.join("a"), fs::Permissions::from_mode(0o644)).unwrap();
    let st = stamp(&f.base);
    f.whiteout("a");
    f.up("b", "same");
    fs::set_permissions(f.upper.join("b"), fs::Permissions::from_mode(0o644)).unwrap();
    let stage = f.stage(st);
    let old = stage.changes().unwrap();
    assert_eq!(summary(&old), ["renamed b <- a"]);
    // The worker (a checkpoint's set, used late) rewrote b, same size.
    f.up("b", "SAME");
    let events = commit(&stage, &old, &accept_all(&old));
    assert_eq!(
        events,
        ["conflict b: the stage changed since the change set was computed"]
    );
    assert_eq!(fs::read_to_string(f.root.join("a")).unwrap(), "same");
    assert_eq!(fs::read_to_string(f.upper.join("b")).unwrap(), "SAME");
    // The control: a fresh change set commits the new bytes.
    let fresh = stage.changes().unwrap();
    assert_eq!(summary(&fresh), ["deleted a", "created b"]);
    assert_eq!(
        commit(&stage, &fresh, &accept_all(&fresh)),
        ["applied a", "applied b"]
    );
    assert_eq!(fs::read_to_string(f.root.join("b")).unwrap(), "SAME");
    assert!(!f.root.join("a").exists());
}

#[test]
fn across_filesystems_each_node_is_copied_then_renamed_and_the_upper_emptied() {
    // The host root on the test's filesystem, the stage on /dev/shm (tmpfs):
    // every rename from the upper is EXDEV, so the copy path runs.
    let f = Fixture::new();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let upper = shm.path().join("upper");
    let quarantine = shm.path().join("quarantine");
    fs::create_dir_all(&upper).unwrap();
    fs::create_dir_all(&quarantine).unwrap();
    assert_ne!(
        fs::metadata(&upper).unwrap().dev(),
        fs::metadata(&f.root).unwrap().dev(),
        "the test needs two filesystems"
    );
    f.host("mod", "old");
    f.host("d/x", "1");
    let st = stamp(&f.base);
    fs::write(upper.join("mod"), "new").unwrap();
    fs::write(upper.join("new"), "fresh").unwrap();
    fs::set_permissions(upper.join("new"), fs::Permissions::from_mode(0o640)).unwrap();
    symlink("new", upper.join("link")).unwrap();
    fs::write(upper.join("d"), "a file now").unwrap();
    let stage = Stage::__simulate_assembled(
        shm.path().to_path_buf(),
        String::from("xdev"),
        vec![(f.root.clone(), upper.clone(), upper.clone(), quarantine, st)],
    );
    let set = stage.changes().unwrap();
    assert_eq!(
        summary(&set),
        [
            "deleted d/x",
            "modified d",
            "created link",
            "modified mod",
            "created new"
        ]
    );
    let events = commit(&stage, &set, &accept_all(&set));
    assert!(
        events.iter().all(|e| e.starts_with("applied")),
        "{events:?}"
    );
    assert_eq!(fs::read_to_string(f.root.join("mod")).unwrap(), "new");
    assert_eq!(fs::read_to_string(f.root.join("new")).unwrap(), "fresh");
    assert_eq!(fs::read_to_string(f.root.join("d")).unwrap(), "a file now");
    assert_eq!(
        fs::metadata(f.root.join("new"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o640
    );
    assert_eq!(
        fs::read_link(f.root.join("link")).unwrap(),
        Path::new("new")
    );
    // No temporary name is left behind, and the upper is empty.
    let names: Vec<_> = fs::read_dir(&f.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with(".palisade-commit")),
        "{names:?}"
    );
    assert_eq!(fs::read_dir(&upper).unwrap().count(), 0);
}

#[test]
fn a_committed_file_loses_the_overlay_xattrs_and_keeps_its_own() {
    let f = Fixture::new();
    f.host("a", "old");
    let st = stamp(&f.base);
    f.up("a", "new");
    let up = f.upper.join("a");
    Stage::__simulate_set_xattr(&up, "user.overlay.origin", b"junk").unwrap();
    Stage::__simulate_set_xattr(&up, "trusted.overlay.origin", b"junk").unwrap();
    Stage::__simulate_set_xattr(&up, "user.note", b"kept").unwrap();
    let mut names = Stage::__simulate_xattr_names(&up).unwrap();
    names.sort();
    assert_eq!(
        names,
        ["trusted.overlay.origin", "user.note", "user.overlay.origin"]
    );
    let stage = f.stage(st);
    let set = stage.changes().unwrap();
    assert_eq!(commit(&stage, &set, &accept_all(&set)), ["applied a"]);
    // The overlay's own xattrs are gone; the control, an ordinary one, stays.
    assert_eq!(
        Stage::__simulate_xattr_names(&f.root.join("a")).unwrap(),
        ["user.note"]
    );
}

#[test]
fn the_trusted_overlay_forms_are_read_like_the_user_ones() {
    let f = Fixture::new();
    f.host("d/a", "1");
    f.host("d/b", "2");
    let st = stamp(&f.base);
    f.up("d/a", "1");
    // Control: the directory merged, nothing deleted.
    assert!(f.stage(st).changes().unwrap().changes.is_empty());
    Stage::__simulate_set_xattr(&f.upper.join("d"), "trusted.overlay.opaque", b"y").unwrap();
    assert_eq!(summary(&f.stage(st).changes().unwrap()), ["deleted d/b"]);
}

#[test]
fn directory_modes_that_shut_their_owner_out_land_exactly() {
    let f = Fixture::new();
    f.host("ro/old", "1");
    fs::set_permissions(f.root.join("ro"), fs::Permissions::from_mode(0o755)).unwrap();
    let st = stamp(&f.base);
    f.up("sealed/inside", "x");
    f.up("ro/new", "y");
    fs::set_permissions(f.upper.join("sealed"), fs::Permissions::from_mode(0o555)).unwrap();
    fs::set_permissions(f.upper.join("ro"), fs::Permissions::from_mode(0o500)).unwrap();
    let stage = f.stage(st);
    let set = stage.changes().unwrap();
    assert_eq!(
        summary(&set),
        [
            "modechanged ro",
            "created ro/new",
            "created sealed",
            "created sealed/inside"
        ]
    );
    let events = commit(&stage, &set, &accept_all(&set));
    assert!(
        events.iter().all(|e| e.starts_with("applied")),
        "{events:?}"
    );
    let mode = |p: &str| fs::metadata(f.root.join(p)).unwrap().permissions().mode() & 0o7777;
    // The exact modes in the end, and what is inside landed.
    assert_eq!((mode("sealed"), mode("ro")), (0o555, 0o500));
    assert_eq!(
        fs::read_to_string(f.root.join("sealed/inside")).unwrap(),
        "x"
    );
    assert_eq!(fs::read_to_string(f.root.join("ro/new")).unwrap(), "y");
}

/// Change the owner of everything under `dir` (not following symlinks).
fn chown_tree(dir: &Path, uid: u32) {
    std::os::unix::fs::lchown(dir, Some(uid), Some(uid)).unwrap();
    if fs::symlink_metadata(dir).unwrap().is_dir() {
        for e in fs::read_dir(dir).unwrap() {
            chown_tree(&e.unwrap().path(), uid);
        }
    }
}

const UNPRIVILEGED: &str = "PALISADE_STAGE_UNPRIVILEGED_BASE";

#[test]
fn an_unprivileged_launcher_commits_a_new_directory_and_file() {
    // The child: the same test, re-run as uid and gid 65534 by the parent.
    if let Some(base) = std::env::var_os(UNPRIVILEGED) {
        let base = PathBuf::from(base);
        let (sec, nsec) = std::env::var("PALISADE_STAGE_STAMP")
            .unwrap()
            .split_once(':')
            .map(|(a, b)| (a.parse().unwrap(), b.parse().unwrap()))
            .unwrap();
        let stage = Stage::__simulate_assembled(
            base.join("stage"),
            String::from("unpriv"),
            vec![(
                base.join("host"),
                base.join("stage/0/upper"),
                base.join("stage/0/work"),
                base.join("stage/0/quarantine"),
                Stamp { sec, nsec },
            )],
        );
        let set = stage.changes().unwrap();
        assert_eq!(summary(&set), ["created made", "created made/inside"]);
        let events = commit(&stage, &set, &accept_all(&set));
        assert_eq!(events, ["applied made", "applied made/inside"]);
        return;
    }
    // The parent: a fixture owned by 65534, then the child.
    let f = Fixture::new();
    let st = stamp(&f.base);
    f.up("made/inside", "x");
    fs::set_permissions(f.upper.join("made"), fs::Permissions::from_mode(0o750)).unwrap();
    chown_tree(&f.base, 65534);
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "an_unprivileged_launcher_commits_a_new_directory_and_file",
            "--nocapture",
        ])
        .env(UNPRIVILEGED, &f.base)
        .env("PALISADE_STAGE_STAMP", format!("{}:{}", st.sec, st.nsec))
        .output()
        .expect("setpriv(1) runs the unprivileged child");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the unprivileged commit failed:\n{text}"
    );
    assert!(
        text.contains("1 passed"),
        "the child did not run the test:\n{text}"
    );
    assert_eq!(fs::read_to_string(f.root.join("made/inside")).unwrap(), "x");
    assert_eq!(
        fs::metadata(f.root.join("made"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o750
    );
    // What the unprivileged launcher made is its own.
    assert_eq!(fs::metadata(f.root.join("made")).unwrap().uid(), 65534);
}
