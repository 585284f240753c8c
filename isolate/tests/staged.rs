//! Staged writes (`Layer::StagedWrites`): each writable root is an overlay
//! whose upper layer is the session's stage, so what the worker writes is
//! visible inside and in the stage, never in the host tree (until a
//! commit); the stage base is hidden inside; a launch that cannot stage is
//! refused naming the layer. Every refusal or negative answer has its
//! positive control: the same launch with staging set up, or the same
//! write under direct writes, where it lands on the host.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use palisade_isolate::{Command, Exit, Layer, Profile, Sandbox, Signal, Stdio};

const WORKER: u32 = palisade_isolate::DEFAULT_WORKER_UID;

fn skip_unless_root() -> bool {
    if !nix::unistd::getuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the sandbox tests as root"
        );
        eprintln!("skipped: the sandbox tests run as root (CI does)");
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

/// A writable root owned by the worker: a repository with a config, and a
/// source file.
fn root() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("palisade-staged-")
        .tempdir()
        .unwrap();
    let p = dir.path();
    for d in [".git/hooks", "src", "old"] {
        std::fs::create_dir_all(p.join(d)).unwrap();
    }
    std::fs::write(p.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(p.join("src/lib.rs"), "// lib\n").unwrap();
    std::fs::write(p.join("old/gone.txt"), "old\n").unwrap();
    chown_tree(p);
    dir
}

/// A stage base outside every root. Directly under `/` (the governed view
/// shows it, unless masked); never under /tmp, which the view replaces.
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

/// Run `script` under `/bin/sh -c` in `sb`: its exit, its standard output,
/// and the stage it left. Bounded by a generous watchdog.
fn run(sb: &Sandbox, script: &str) -> (Exit, String, Option<palisade_isolate::stage::Stage>) {
    let cmd = Command::new(["/bin/sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut child = sb
        .spawn(cmd)
        .unwrap_or_else(|e| panic!("launch of {script:?} failed: {e}"));
    let mut stdout = child.take_stdout().unwrap();
    let stage = child.take_stage();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let exit = match child.wait_timeout(Duration::from_secs(120)).unwrap() {
        Some(e) => e,
        None => {
            let _ = child.kill(Signal::KILL);
            panic!("{script:?} timed out");
        }
    };
    (exit, reader.join().unwrap(), stage)
}

#[test]
fn a_staged_write_is_seen_inside_and_lands_in_the_upper_not_on_the_host() {
    if skip_unless_root() {
        return;
    }
    let r = root();
    let base = stage_base();
    let script = "echo new > new.txt && echo changed >> src/lib.rs && rm old/gone.txt \
                  && cat new.txt src/lib.rs && test ! -e old/gone.txt && echo done";
    let sb = staged(r.path(), base.path(), "s-write");
    let (exit, out, stage) = run(&sb, script);
    assert_eq!(exit, Exit::Exited(0), "{out}");
    assert_eq!(out, "new\n// lib\nchanged\ndone\n");
    // The host tree is untouched.
    assert!(!r.path().join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(r.path().join("src/lib.rs")).unwrap(),
        "// lib\n"
    );
    assert!(r.path().join("old/gone.txt").exists());
    // The upper layer holds the writes after the run: the new file, the
    // copied-up modified one, and a whiteout (a 0/0 character device) for
    // the deleted one.
    let stage = stage.expect("a staged launch has a stage");
    assert_eq!(stage.session(), "s-write");
    let upper = stage.roots()[0].upper().to_owned();
    assert!(upper.starts_with(base.path().canonicalize().unwrap()));
    assert_eq!(
        std::fs::read_to_string(upper.join("new.txt")).unwrap(),
        "new\n"
    );
    assert_eq!(
        std::fs::read_to_string(upper.join("src/lib.rs")).unwrap(),
        "// lib\nchanged\n"
    );
    let wh = std::fs::symlink_metadata(upper.join("old/gone.txt")).unwrap();
    assert!(wh.file_type().is_char_device() && wh.rdev() == 0, "{wh:?}");
    // The stage reopens from its manifest.
    let again = palisade_isolate::stage::Stage::open(stage.dir()).unwrap();
    assert_eq!(again.roots(), stage.roots());

    // Positive control: under direct writes the same script lands on the
    // host.
    let (exit, out, none) = run(&direct(r.path()), script);
    assert_eq!(exit, Exit::Exited(0), "{out}");
    assert!(none.is_none());
    assert_eq!(
        std::fs::read_to_string(r.path().join("new.txt")).unwrap(),
        "new\n"
    );
    assert!(!r.path().join("old/gone.txt").exists());
    stage.remove().unwrap();
}

#[test]
fn the_launch_reports_the_layer_and_the_overlay_and_plants_no_placeholder() {
    if skip_unless_root() {
        return;
    }
    let r = root();
    let base = stage_base();
    let rp = r.path().canonicalize().unwrap();
    let mut child = staged(r.path(), base.path(), "s-report")
        .spawn(Command::new(["/bin/true"]))
        .unwrap();
    let report = child.report().clone();
    let stage = child.take_stage().unwrap();
    assert_eq!(child.wait().unwrap(), Exit::Exited(0));
    assert!(report.downgraded.is_empty());
    assert!(
        report
            .layers
            .iter()
            .any(|(l, s)| *l == Layer::StagedWrites && s.is_active()),
        "{:?}",
        report.layers
    );
    let text = report.mount_plan.text();
    assert!(
        text.contains(&format!(
            "overlay {} upper={}",
            rp.display(),
            stage.roots()[0].upper().display()
        )),
        "{text}"
    );
    assert!(!text.contains(&format!("rw {}\n", rp.display())), "{text}");
    // No placeholder is created on the host for absent protected names.
    assert!(report.mount_plan.placeholders.is_empty());
    for name in [".bashrc", ".palisade", ".gitconfig", ".profile"] {
        assert!(!r.path().join(name).exists(), "{name}");
    }
    // Positive control: direct writes bind the root, create placeholders
    // and are listed as downgraded.
    let child = direct(r.path()).spawn(Command::new(["/bin/true"])).unwrap();
    let d = child.report().clone();
    assert_eq!(d.downgraded, vec![Layer::StagedWrites]);
    assert!(
        d.mount_plan
            .text()
            .contains(&format!("rw {}\n", rp.display()))
    );
    assert!(!d.mount_plan.placeholders.is_empty());
    assert!(
        d.mount_plan
            .placeholders
            .iter()
            .any(|p| p.ends_with(".bashrc"))
    );
    assert_eq!(child.wait().unwrap(), Exit::Exited(0));
    stage.remove().unwrap();
}

#[test]
fn existing_protected_names_stay_read_only_inside_the_overlay() {
    if skip_unless_root() {
        return;
    }
    let r = root();
    let base = stage_base();
    let sb = staged(r.path(), base.path(), "s-protect");
    // The write to the protected config fails; the ordinary edit right
    // after it (positive control) succeeds.
    let (exit, out, stage) = run(
        &sb,
        "if { echo x >> .git/config; } 2>/dev/null; then echo wrote; else echo refused; fi; \
         echo y >> src/lib.rs && echo edited",
    );
    assert_eq!(exit, Exit::Exited(0));
    assert_eq!(out, "refused\nedited\n");
    let stage = stage.unwrap();
    let upper = stage.roots()[0].upper();
    assert!(!upper.join(".git/config").exists());
    assert!(upper.join("src/lib.rs").exists());
    stage.remove().unwrap();
}

#[test]
fn the_worker_cannot_see_the_stage_base() {
    if skip_unless_root() {
        return;
    }
    let r = root();
    let base = stage_base();
    // Another session's stage under the same base, with a marker.
    let marker: String = "egats-rehto".chars().rev().collect();
    let other = base.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("secret.txt"), &marker).unwrap();
    let b = base.path().canonicalize().unwrap();
    let script = format!(
        "ls -A {0}; cat {0}/other/secret.txt {0}/s-see/manifest.json 2>/dev/null; echo end",
        b.display()
    );
    let (exit, out, stage) = run(&staged(r.path(), base.path(), "s-see"), &script);
    assert_eq!(exit, Exit::Exited(0));
    assert_eq!(out, "end\n", "the stage base shows inside");
    assert!(!out.contains(&marker));
    let stage = stage.unwrap();
    // Positive control: the same listing under direct writes (no stage,
    // so no mask) shows the base's contents, the view reaching it at all.
    let (_, out, _) = run(&direct(r.path()), &script);
    assert!(out.contains("other"), "{out}");
    assert!(out.contains(&marker), "{out}");
    stage.remove().unwrap();
}

#[test]
fn staging_without_a_stage_directory_is_refused_naming_the_layer() {
    if skip_unless_root() {
        return;
    }
    let r = root();
    let mut sb = Sandbox::new(Profile::governed());
    sb.writable(r.path()).cwd(r.path());
    let err = sb.spawn(Command::new(["/bin/true"])).unwrap_err();
    assert_eq!(err.layer(), Some(Layer::StagedWrites), "{err}");
    assert!(
        err.to_string()
            .starts_with("isolation_layer_unavailable: staged_writes (no stage directory"),
        "{err}"
    );
    // Positive control: with a stage directory the same launch runs.
    let base = stage_base();
    sb.stage_in(base.path(), "s-given");
    let mut child = sb.spawn(Command::new(["/bin/true"])).unwrap();
    let stage = child.take_stage().unwrap();
    assert_eq!(child.wait().unwrap(), Exit::Exited(0));
    assert!(stage.dir().join("manifest.json").is_file());
    // A second launch of the same session is refused (the stage exists).
    let err = sb.spawn(Command::new(["/bin/true"])).unwrap_err();
    assert_eq!(err.layer(), Some(Layer::StagedWrites), "{err}");
    assert!(err.to_string().contains("exists already"), "{err}");
    stage.remove().unwrap();
    // Without writable roots nothing is staged and no stage is needed.
    let mut bare = Sandbox::new(Profile::strict())
        .spawn(Command::new(["/bin/true"]))
        .unwrap();
    assert!(bare.stage().is_none());
    assert_eq!(
        bare.wait_timeout(Duration::from_secs(60)).unwrap(),
        Some(Exit::Exited(0))
    );
}

#[test]
fn a_stage_base_inside_a_writable_root_is_refused() {
    if skip_unless_root() {
        return;
    }
    let r = root();
    let inner = r.path().join("stages");
    let sb = staged(r.path(), &inner, "s-inner");
    let err = sb.spawn(Command::new(["/bin/true"])).unwrap_err();
    assert_eq!(err.layer(), Some(Layer::StagedWrites), "{err}");
    assert!(err.to_string().contains("stage_inside_root"), "{err}");
    assert!(!inner.join("s-inner").exists());
    // Positive control: outside the root the same launch runs.
    let base = stage_base();
    let mut child = staged(r.path(), base.path(), "s-inner")
        .spawn(Command::new(["/bin/true"]))
        .unwrap();
    let stage = child.take_stage().unwrap();
    assert_eq!(child.wait().unwrap(), Exit::Exited(0));
    stage.remove().unwrap();
}

#[test]
fn the_stage_survives_the_dropped_child() {
    if skip_unless_root() {
        return;
    }
    let r = root();
    let base = stage_base();
    let child = staged(r.path(), base.path(), "s-drop")
        .spawn(Command::new([
            "/bin/sh",
            "-c",
            "echo kept > kept.txt; sleep 30",
        ]))
        .unwrap();
    let dir: PathBuf = child.stage().unwrap().dir().to_owned();
    let upper = child.stage().unwrap().roots()[0].upper().join("kept.txt");
    // Wait (bounded) for the write, then drop the running child.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !upper.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(child);
    assert!(dir.join("manifest.json").is_file());
    assert_eq!(std::fs::read_to_string(&upper).unwrap(), "kept\n");
    let stage = palisade_isolate::stage::Stage::open(&dir).unwrap();
    assert_eq!(
        std::fs::metadata(stage.dir()).unwrap().permissions().mode() & 0o777,
        0o700
    );
    stage.remove().unwrap();
    assert!(!dir.exists());
}

#[test]
fn a_committed_stage_lands_its_ordinary_edits_and_quarantines_the_planted_configs() {
    if skip_unless_root() {
        return;
    }
    let r = root();
    let base = stage_base();
    let sb = staged(r.path(), base.path(), "s-commit");
    let (exit, _, stage) = run(
        &sb,
        "echo 'pub fn f() {}' > src/new.rs && echo edit >> src/lib.rs \
         && echo '{}' > .mcp.json && echo 'alias ls=evil' > .bashrc",
    );
    assert_eq!(exit, Exit::Exited(0));
    let stage = stage.unwrap();
    // Nothing on the host before the commit.
    assert!(!r.path().join("src/new.rs").exists());
    assert!(!r.path().join(".mcp.json").exists());
    assert!(!r.path().join(".bashrc").exists());
    let set = stage.changes().unwrap();
    let verdicts = sb.commit_filter().check(&set);
    let mut events = Vec::new();
    let report = stage
        .commit(&set, &verdicts, None, &mut |e| {
            events.push(format!("{e:?}"));
            Ok(())
        })
        .unwrap();
    assert_eq!(report.refused, 2, "{events:?}");
    // Positive control: the ordinary edits land on the host.
    assert_eq!(
        std::fs::read_to_string(r.path().join("src/new.rs")).unwrap(),
        "pub fn f() {}\n"
    );
    assert_eq!(
        std::fs::read_to_string(r.path().join("src/lib.rs")).unwrap(),
        "// lib\nedit\n"
    );
    // The planted configs do not; they are kept in the quarantine.
    assert!(!r.path().join(".mcp.json").exists());
    assert!(!r.path().join(".bashrc").exists());
    let q = stage.roots()[0].quarantine();
    assert!(q.join(".mcp.json").exists() && q.join(".bashrc").exists());
    stage.remove().unwrap();
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
fn an_overlay_that_cannot_be_mounted_is_refused_naming_the_layer() {
    if skip_unless_root() {
        return;
    }
    // A root that is itself an overlay over an overlay: a third level
    // exceeds the kernel's stacking depth, so the staged mount fails at
    // setup. Built in a forked child with its own mount namespace, so the
    // host is untouched.
    let t = tempfile::tempdir().unwrap();
    let d = |n: &str| {
        let p = t.path().join(n);
        std::fs::create_dir(&p).unwrap();
        p
    };
    let (l0, u1, w1, m1, u2, w2, m2) = (
        d("l0"),
        d("u1"),
        d("w1"),
        d("m1"),
        d("u2"),
        d("w2"),
        d("m2"),
    );
    let stages = d("stages");
    let code = fork_and(|| {
        use nix::mount::{MsFlags, mount};
        if nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).is_err()
            || mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .is_err()
        {
            return 10;
        }
        let ovl = |lower: &Path, upper: &Path, work: &Path, at: &Path| {
            let opts = format!(
                "lowerdir={},upperdir={},workdir={}",
                lower.display(),
                upper.display(),
                work.display()
            );
            mount(
                Some("overlay"),
                at,
                Some("overlay"),
                MsFlags::empty(),
                Some(opts.as_str()),
            )
            .is_ok()
        };
        if !ovl(&l0, &u1, &w1, &m1) || !ovl(&m1, &u2, &w2, &m2) {
            return 11;
        }
        // No printing in the forked child: the code says what happened.
        let deep = staged(&m2, &stages, "s-deep").spawn(Command::new(["/bin/true"]));
        match deep {
            Err(e)
                if e.layer() == Some(Layer::StagedWrites)
                    && e.to_string().starts_with(&format!(
                        "isolation_layer_unavailable: staged_writes (create the overlay of {}:",
                        m2.canonicalize().unwrap_or_default().display()
                    )) => {}
            Err(_) => return 2,
            Ok(_) => return 3,
        }
        // The failed launch removed its stage.
        if stages.join("s-deep").exists() {
            return 4;
        }
        // Positive control: one level less mounts, and the launch runs.
        match staged(&m1, &stages, "s-shallow").spawn(Command::new(["/bin/true"])) {
            Ok(child) => match child.wait() {
                Ok(Exit::Exited(0)) => 0,
                _ => 5,
            },
            Err(_) => 6,
        }
    });
    assert_eq!(code, 0);
}

#[test]
fn renaming_a_host_directory_is_exdev_so_the_upper_holds_no_redirect() {
    if skip_unless_root() {
        return;
    }
    let probe = env!("CARGO_BIN_EXE_palisade-escape-probe");
    let probe_dir = Path::new(probe).parent().unwrap().to_owned();
    let r = root();
    let base = stage_base();
    let script = format!(
        "{probe} rename old renamed; mkdir fresh && {probe} rename fresh fresh2; \
         mv old moved && ls moved"
    );
    let mut sb = staged(r.path(), base.path(), "s-rename");
    sb.read_only(&probe_dir);
    let (exit, out, stage) = run(&sb, &script);
    assert_eq!(exit, Exit::Exited(0), "{out}");
    // A directory of the host root cannot be renamed in place (no redirect
    // is created: redirect_dir=nofollow); one the worker made can; `mv`
    // falls back to a copy.
    assert_eq!(out, "err 18\nok\ngone.txt\n");
    let stage = stage.unwrap();
    let upper = stage.roots()[0].upper();
    let wh = std::fs::symlink_metadata(upper.join("old")).unwrap();
    assert!(wh.file_type().is_char_device() && wh.rdev() == 0, "{wh:?}");
    assert_eq!(
        std::fs::read_to_string(upper.join("moved/gone.txt")).unwrap(),
        "old\n"
    );
    assert!(upper.join("fresh2").is_dir());
    assert!(r.path().join("old/gone.txt").exists());
    stage.remove().unwrap();
    // Positive control: under direct writes the same rename is in place.
    let mut d = direct(r.path());
    d.read_only(&probe_dir);
    let (_, out, _) = run(&d, &format!("{probe} rename old renamed"));
    assert_eq!(out, "ok\n");
    assert!(r.path().join("renamed/gone.txt").exists());
}
