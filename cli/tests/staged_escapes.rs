//! The acceptance tests of staged writes (issue 16), run from the host with
//! the real programs that would run what a worker leaves behind.
//!
//! Each escape is planted by a hostile worker under the default governed
//! profile (`palisade run --policy … --journal … --key …`, staged writes),
//! then checked FROM THE HOST after the run: the host's own `git status`,
//! `git commit`, `bash -i` and `ssh` must not run the planted payload (each
//! payload creates a marker file in a directory of the test's that the
//! worker cannot see). Every escape has a control: the same payload planted
//! by the same uid directly on the host, where the same host check must
//! find every marker, so no refusal passes vacuously (a host check that
//! cannot run the payload would pass every time). Every refused path is
//! one `commit_refused` record with its rule, kept in the stage's
//! quarantine, listed in the run's summary and by `palisade report`.
//!
//! The positive controls of the issue (an edit, a new file, a `git commit`
//! and a branch made inside) each land on the host, checked with the host's
//! `git status --porcelain`, `git log`, `git branch` and `git fsck`. Then:
//! direct writes (`--writes direct`, `[worker] writes = "direct"`) keep the
//! protected names read-only and are reported as a downgrade; a kept stage
//! changes nothing until `palisade commit`, which filters the same way; a
//! stage that cannot be set up refuses the run; a policy's
//! `[worker.commit] refuse` adds to the list; a host edit made while the
//! worker ran is a conflict, kept, never overwritten.
//!
//! Host programs run with a scratch `HOME`, no system git config and
//! `safe.directory=*` (the most trusting host user: the escape must fail
//! even for them). `ssh` only ever targets a closed port on 127.0.0.1.
//! Needs root (as CI runs it), `git`, `bash` and `ssh`; otherwise each test
//! says it was skipped, and under CI a missing prerequisite is a failure.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::print_stderr,
    clippy::disallowed_methods,
    reason = "tests"
)]

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The worker's uid when palisade runs as root (`palisade run --help`).
const WORKER: u32 = 64_000;
/// An upper bound on one launch, far above what it takes on a loaded machine.
const LIMIT: Duration = Duration::from_secs(180);
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn palisade() -> &'static str {
    env!("CARGO_BIN_EXE_palisade")
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn have(program: &str) -> bool {
    PATH.split(':').any(|d| Path::new(d).join(program).exists())
}

/// Whether to skip on this machine. Under CI (`CI` set) a missing
/// prerequisite is a failure, never a silent pass.
fn skip() -> bool {
    let ci = std::env::var_os("CI").is_some();
    if !is_root() {
        assert!(!ci, "CI must run the staged-writes suite as root");
        eprintln!("skipped: the staged-writes suite runs as root (CI does)");
        return true;
    }
    for p in ["git", "bash", "ssh", "timeout"] {
        if !have(p) {
            assert!(!ci, "CI must provide `{p}` for the staged-writes suite");
            eprintln!("skipped: the host checks need `{p}`");
            return true;
        }
    }
    false
}

/// Every path under `p`, `p` included (symlinks not followed).
fn walk(p: &Path) -> Vec<PathBuf> {
    let mut out = vec![p.to_path_buf()];
    let mut i = 0;
    while let Some(d) = out.get(i).cloned() {
        i += 1;
        if std::fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir()) {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                out.push(e.path());
            }
        }
    }
    out
}

fn chown_tree(p: &Path, uid: u32) {
    for q in walk(p) {
        std::os::unix::fs::lchown(&q, Some(uid), Some(uid)).unwrap();
    }
}

/// A host program, bounded by `timeout`, in a clean environment: scratch
/// `HOME` (unless `home` names one), no system config, `safe.directory=*`.
fn host(home: &Path, cwd: &Path, program: &str, args: &[&str]) -> std::process::Output {
    Command::new("timeout")
        .arg("60")
        .arg(program)
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_COUNT", "2")
        .env("GIT_CONFIG_KEY_0", "safe.directory")
        .env("GIT_CONFIG_VALUE_0", "*")
        .env("GIT_CONFIG_KEY_1", "protocol.file.allow")
        .env("GIT_CONFIG_VALUE_1", "always")
        .env("GIT_AUTHOR_NAME", "host")
        .env("GIT_AUTHOR_EMAIL", "host@example.invalid")
        .env("GIT_COMMITTER_NAME", "host")
        .env("GIT_COMMITTER_EMAIL", "host@example.invalid")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `host`, asserting success; its stdout.
fn host_ok(home: &Path, cwd: &Path, program: &str, args: &[&str]) -> String {
    let out = host(home, cwd, program, args);
    assert!(
        out.status.success(),
        "{program} {args:?} in {}: {:?}\n{}{}",
        cwd.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One test's scratch space: a root-only directory (the worker never sees
/// it) holding the markers, the host's scratch HOME, the policy, journal,
/// key and stage directory, and the trees.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix("palisade-staged-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        for d in ["markers", "home", "stages"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        std::fs::set_permissions(
            dir.path().join("stages"),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        Scratch { dir }
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn markers(&self) -> PathBuf {
        self.path().join("markers")
    }
    fn marker(&self, name: &str) -> PathBuf {
        self.markers().join(name)
    }
    /// The host user's HOME for the host checks (empty, root's).
    fn home(&self) -> PathBuf {
        self.path().join("home")
    }
    fn stages(&self) -> PathBuf {
        self.path().join("stages")
    }
    fn journal(&self) -> PathBuf {
        self.path().join("run.journal")
    }
    /// The markers present now, removed.
    fn take_markers(&self) -> Vec<String> {
        let mut found: Vec<String> = std::fs::read_dir(self.markers())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        found.sort();
        for f in &found {
            std::fs::remove_file(self.marker(f)).unwrap();
        }
        found
    }
    /// A new directory `name` of the scratch space, set up by `setup` as the
    /// host user, then owned by the worker uid (writable roots must be
    /// writable by it).
    fn tree(&self, name: &str, setup: &dyn Fn(&Scratch, &Path)) -> PathBuf {
        let t = self.path().join(name);
        std::fs::create_dir(&t).unwrap();
        setup(self, &t);
        chown_tree(&t, WORKER);
        // A chown clears set-id bits: the fixture's helper gets its own back.
        let helper = t.join("vendor/helper");
        if helper.exists() {
            std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o4755)).unwrap();
        }
        t
    }

    /// Runs `script` with `sh -e` as the worker uid directly on the host in
    /// `tree`: the control, where nothing filters what it leaves.
    fn plant_directly(&self, tree: &Path, script: &str) {
        let out = Command::new("timeout")
            .arg("60")
            .arg("/bin/sh")
            .arg("-ec")
            .arg(script)
            .current_dir(tree)
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", tree)
            .uid(WORKER)
            .gid(WORKER)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("planted"),
            "the payload failed on the host: {:?}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `palisade run` of `sh -ec SCRIPT` with `--cwd tree` under the
    /// governed profile, journaled, staged in this scratch space, with
    /// `extra` flags before the `--`.
    fn run(&self, tree: &Path, script: &str, extra: &[&str]) -> Run {
        self.run_with(tree, script, extra, "")
    }

    /// `run`, with `worker` appended to the policy's `[worker]` section.
    fn run_with(&self, tree: &Path, script: &str, extra: &[&str], worker: &str) -> Run {
        let policy = self.path().join("palisade.toml");
        std::fs::write(
            &policy,
            format!("[worker]\nprofile = \"governed\"\n{worker}"),
        )
        .unwrap();
        let key = self.path().join("journal.key");
        if !key.exists() {
            let k = palisade_evidence::JournalKey::generate().unwrap();
            std::fs::write(&key, k.expose_text().as_bytes()).unwrap();
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let _ = std::fs::remove_file(self.journal());
        let mut child = Command::new(palisade())
            .arg("run")
            .arg("--profile")
            .arg("governed")
            .arg("--cwd")
            .arg(tree)
            .arg("--policy")
            .arg(&policy)
            .arg("--journal")
            .arg(self.journal())
            .arg("--key")
            .arg(&key)
            .args(if extra.contains(&"--stage-dir") {
                vec![]
            } else {
                vec![OsString::from("--stage-dir"), self.stages().into()]
            })
            .args(extra)
            .arg("--")
            .arg("/bin/sh")
            .arg("-ec")
            .arg(format!("export PATH={PATH}\n{script}"))
            .env_remove("XDG_RUNTIME_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if t0.elapsed() > LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                panic!("palisade run did not finish within {LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stdout = String::new();
        let mut stderr = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let records = std::fs::read_to_string(self.journal())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        Run {
            code: status.code(),
            stdout,
            stderr,
            records,
        }
    }

    /// Asserts that `rel` (relative to the run's root `tree`) was refused:
    /// journaled as `commit_refused` naming it with a rule, kept at the
    /// record's quarantine path in the stage directory, and listed in the
    /// run's summary on stderr.
    fn assert_refused(&self, run: &Run, tree: &Path, rel: &str) {
        let refused: Vec<&Value> = run
            .records
            .iter()
            .filter(|r| r["kind"] == "commit_refused" && r["body"]["path"] == rel)
            .collect();
        let [record] = refused.as_slice() else {
            panic!("not one commit_refused record of `{rel}`: {refused:#?}\n{run}");
        };
        assert!(
            record["body"]["rule"]
                .as_str()
                .is_some_and(|r| !r.is_empty()),
            "{record:#}"
        );
        let q = PathBuf::from(record["body"]["quarantine"].as_str().unwrap());
        assert!(
            q.starts_with(self.stages()) && q.ends_with(Path::new("quarantine").join(rel)),
            "`{rel}` quarantined at {}\n{run}",
            q.display()
        );
        assert!(
            std::fs::symlink_metadata(&q).is_ok(),
            "the quarantine of `{rel}` is not there: {}\n{run}",
            q.display()
        );
        let line = format!("refused: {}: ", tree.join(rel).display());
        assert!(
            run.stderr.contains(&line),
            "no `{line}` in the summary\n{run}"
        );
    }

    /// The paths `palisade report --format json` lists as refused changes
    /// of the last run's journal.
    fn reported_refusals(&self) -> Vec<String> {
        let out = Command::new(palisade())
            .arg("report")
            .arg(self.journal())
            .arg("--key")
            .arg(self.path().join("journal.key"))
            .args(["--format", "json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "palisade report: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["refused_changes"]
            .as_array()
            .unwrap_or_else(|| panic!("no refused_changes in {v:#}"))
            .iter()
            .filter_map(|b| b["path"].as_str().map(ToOwned::to_owned))
            .collect()
    }
}

/// What one `palisade run` left.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    records: Vec<Value>,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}--- journal kinds {:?}",
            self.code,
            self.stdout,
            self.stderr,
            self.records
                .iter()
                .map(|r| r["kind"].as_str().unwrap_or("?").to_owned())
                .collect::<Vec<_>>()
        )
    }
}

impl Run {
    /// The worker's script ran to its end (it prints `planted` last).
    fn assert_planted(&self) {
        assert_eq!(self.code, Some(0), "{self}");
        assert!(self.stdout.contains("planted"), "{self}");
    }
}

/// One escape of the issue.
struct Escape {
    /// Builds the host tree before the run (as the host user).
    setup: &'static dyn Fn(&Scratch, &Path),
    /// The worker's shell script (`sh -e`, cwd the root, prints `planted`
    /// at its end); `{M}` stands for the markers directory.
    payload: &'static str,
    /// Runs the host programs on the tree after the run.
    check: &'static dyn Fn(&Scratch, &Path),
    /// The markers (or findings) the check produces when the escape works.
    escapes: &'static [&'static str],
    /// The paths (relative to the root) the commit must refuse, unless the
    /// sandbox already refused to make them (the payload then prints
    /// `refused-inside:<path>`).
    refused: &'static [&'static str],
}

impl Escape {
    fn payload(&self, s: &Scratch) -> String {
        self.payload
            .replace("{M}", &s.markers().display().to_string())
            .replace("WGIT", WGIT)
    }

    /// The control (planted directly: every escape works, seen by the host
    /// check), then the attack (planted by a sandboxed worker under staged
    /// writes: none does, and each refused path is quarantined and
    /// journaled).
    fn assert_closed(&self) {
        if skip() {
            return;
        }
        let s = Scratch::new();
        let control = s.tree("control", self.setup);
        s.plant_directly(&control, &self.payload(&s));
        (self.check)(&s, &control);
        let mut want: Vec<String> = self.escapes.iter().map(|&e| e.to_owned()).collect();
        want.sort();
        assert_eq!(
            s.take_markers(),
            want,
            "control: planted directly, the host check must see every escape"
        );

        let work = s.tree("work", self.setup);
        let run = s.run(&work, &self.payload(&s), &[]);
        run.assert_planted();
        assert_eq!(s.take_markers(), Vec::<String>::new(), "ran inside: {run}");
        (self.check)(&s, &work);
        assert_eq!(
            s.take_markers(),
            Vec::<String>::new(),
            "escaped to the host through a staged root\n{run}"
        );
        let listed = s.reported_refusals();
        for rel in self.refused {
            if !run.stdout.contains(&format!("refused-inside:{rel}\n")) {
                s.assert_refused(&run, &work, rel);
                assert!(
                    listed.iter().any(|p| p == rel),
                    "palisade report does not list `{rel}`: {listed:?}"
                );
            }
        }
    }
}

/// A repository with one commit: `README`, `src/lib.rs`.
fn repo(s: &Scratch, t: &Path) {
    let home = s.home();
    host_ok(&home, t, "git", &["init", "-q", "-b", "main"]);
    std::fs::create_dir(t.join("src")).unwrap();
    std::fs::write(t.join("README"), "hello\n").unwrap();
    std::fs::write(t.join("src/lib.rs"), "//! lib\n").unwrap();
    host_ok(&home, t, "git", &["add", "-A"]);
    host_ok(&home, t, "git", &["commit", "-q", "-m", "initial"]);
}

/// A repository whose `lib` is a submodule (`.git/modules/lib`, `lib/.git`
/// a gitdir pointer).
fn repo_with_submodule(s: &Scratch, t: &Path) {
    let home = s.home();
    let src = s.path().join("libsrc");
    if !src.exists() {
        std::fs::create_dir(&src).unwrap();
        repo(s, &src);
    }
    repo(s, t);
    host_ok(
        &home,
        t,
        "git",
        &["submodule", "add", "-q", &src.display().to_string(), "lib"],
    );
    host_ok(&home, t, "git", &["commit", "-q", "-m", "lib"]);
}

/// The host's `git status` and `git commit` (which runs the pre-commit hook).
fn git_status_and_commit(s: &Scratch, t: &Path) {
    let home = s.home();
    let _ = host(&home, t, "git", &["status"]);
    let _ = host(
        &home,
        t,
        "git",
        &["commit", "-q", "--allow-empty", "-m", "host"],
    );
}

fn git_status(s: &Scratch, t: &Path) {
    let _ = host(&s.home(), t, "git", &["status"]);
}

/// `git -c` options for a git run inside the sandbox (no config of its own).
const WGIT: &str = "git -c user.name=w -c user.email=w@example.invalid -c safe.directory=* -c protocol.file.allow=always";

/// Host git reads the config and hooks of the directory `.git/commondir`
/// names: a bare repository the worker made, with its own `core.fsmonitor`
/// and `pre-commit`.
macro_rules! commondir {
    () => {
        r#"
git init -q --bare .evil
cp -R .git/objects/. .evil/objects/
cp -R .git/refs/. .evil/refs/
git config -f .evil/config core.bare false
git config -f .evil/config core.fsmonitor 'touch {M}/fsmonitor; false'
printf '#!/bin/sh\ntouch {M}/hook\n' > .evil/hooks/pre-commit
chmod +x .evil/hooks/pre-commit
echo ../.evil > .git/commondir
"#
    };
}

#[test]
fn git_config_and_hooks_through_commondir_do_not_reach_the_host() {
    Escape {
        setup: &repo,
        payload: concat!(commondir!(), "echo planted\n"),
        check: &git_status_and_commit,
        escapes: &["fsmonitor", "hook"],
        refused: &[".git/commondir"],
    }
    .assert_closed();
}

#[test]
fn a_hook_written_where_the_host_has_no_hooks_directory_does_not_reach_the_host() {
    // A repository cloned without the sample hooks has no `.git/hooks`:
    // nothing to keep read-only inside, so the worker can write one there.
    Escape {
        setup: &|s: &Scratch, t: &Path| {
            repo(s, t);
            std::fs::remove_dir_all(t.join(".git/hooks")).unwrap();
        },
        payload: r#"
mkdir .git/hooks
printf '#!/bin/sh\ntouch {M}/hook\n' > .git/hooks/pre-commit
chmod +x .git/hooks/pre-commit
echo planted
"#,
        check: &git_status_and_commit,
        escapes: &["hook"],
        refused: &[".git/hooks", ".git/hooks/pre-commit"],
    }
    .assert_closed();
}

#[test]
fn a_new_nested_repository_recorded_in_the_index_does_not_reach_the_host() {
    Escape {
        setup: &repo,
        payload: r#"
git init -q sub
git -C sub config core.fsmonitor 'touch {M}/fsmonitor; false'
echo a > sub/a
WGIT -C sub add a
WGIT -C sub commit -q -m sub
WGIT add sub
WGIT commit -q -m 'add sub'
echo planted
"#,
        check: &git_status,
        escapes: &["fsmonitor"],
        refused: &["sub/.git"],
    }
    .assert_closed();
}

#[test]
fn a_directory_made_into_a_git_directory_does_not_reach_the_host() {
    // Not in the issue's list: git discovers any directory holding `HEAD`,
    // `objects/` and `refs/` as a repository (a bare one; `core.worktree`
    // makes it a work tree's), so `src/` of the host's own repository, or a
    // bare repository under any name, runs its `core.fsmonitor` on the
    // host's next `git status` there. Without its `HEAD` it is no
    // repository.
    Escape {
        setup: &repo,
        payload: r#"
mkdir -p src/objects src/refs
echo 'ref: refs/heads/main' > src/HEAD
printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ..\n\tfsmonitor = "touch {M}/src; false"\n' > src/config
git init -q --bare cache.git
git config -f cache.git/config core.bare false
git config -f cache.git/config core.worktree ..
git config -f cache.git/config core.fsmonitor 'touch {M}/bare; false'
echo planted
"#,
        check: &|s: &Scratch, t: &Path| {
            git_status(s, &t.join("src"));
            git_status(s, &t.join("cache.git"));
        },
        escapes: &["bare", "src"],
        refused: &["src/HEAD", "cache.git/HEAD"],
    }
    .assert_closed();
}

#[test]
fn a_submodules_config_in_git_modules_does_not_reach_the_host() {
    Escape {
        setup: &repo_with_submodule,
        payload: r#"
git config -f .git/modules/lib/config core.fsmonitor 'touch {M}/fsmonitor; false'
mkdir .hooks
printf '#!/bin/sh\ntouch {M}/hook\n' > .hooks/pre-commit
chmod +x .hooks/pre-commit
git config -f .git/modules/lib/config core.hooksPath "$PWD/.hooks"
echo planted
"#,
        check: &|s: &Scratch, t: &Path| {
            git_status(s, t);
            git_status_and_commit(s, &t.join("lib"));
        },
        escapes: &["fsmonitor", "hook"],
        refused: &[".git/modules/lib/config"],
    }
    .assert_closed();
}

#[test]
fn a_git_directory_created_where_there_was_no_repository_does_not_reach_the_host() {
    Escape {
        setup: &|_: &Scratch, t: &Path| std::fs::write(t.join("notes.txt"), "notes\n").unwrap(),
        // `git init` where it can; where `.git/config` cannot be written,
        // the same repository through a commondir pointer.
        payload: r#"
if git init -q . 2>/dev/null && git config core.fsmonitor 'touch {M}/fsmonitor; false' 2>/dev/null; then
  :
else
  git init -q --bare .g2
  git config -f .g2/config core.bare false
  git config -f .g2/config core.fsmonitor 'touch {M}/fsmonitor; false'
  mkdir -p .git
  echo ../.g2 > .git/commondir
  echo 'ref: refs/heads/main' > .git/HEAD
fi
echo planted
"#,
        check: &git_status,
        escapes: &["fsmonitor"],
        refused: &[".git"],
    }
    .assert_closed();
}

/// A HOME as a user has it: a `.bashrc` that reads `~/.bash_aliases`
/// (as Debian's and Ubuntu's default does), and a repository to run git in.
fn a_home(s: &Scratch, t: &Path) {
    std::fs::write(
        t.join(".bashrc"),
        "[ -f ~/.bash_aliases ] && . ~/.bash_aliases\n",
    )
    .unwrap();
    std::fs::create_dir(t.join("project")).unwrap();
    repo(s, &t.join("project"));
}

#[test]
fn shell_rc_files_and_git_config_in_a_home_cwd_do_not_reach_the_host() {
    Escape {
        setup: &a_home,
        payload: r#"
echo 'touch {M}/bash_aliases' > .bash_aliases
echo 'touch {M}/bashrc' >> .bashrc || echo refused-inside:.bashrc
mkdir -p .config/git
printf '[core]\n\tfsmonitor = "touch {M}/xdg_git_config; false"\n' > .config/git/config
echo planted
"#,
        check: &|_: &Scratch, t: &Path| {
            // The host user's own programs, with the tree as their HOME.
            let _ = host(t, t, "bash", &["-i", "-c", "true"]);
            let _ = host(t, &t.join("project"), "git", &["status"]);
        },
        escapes: &["bash_aliases", "bashrc", "xdg_git_config"],
        refused: &[".bash_aliases", ".bashrc", ".config/git/config"],
    }
    .assert_closed();
}

/// A port on 127.0.0.1 where nothing listens (bound, then closed).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn ssh_config_and_authorized_keys_in_a_home_cwd_do_not_reach_the_host() {
    Escape {
        setup: &|_: &Scratch, _: &Path| {},
        payload: r#"
mkdir -p .ssh
echo 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPlanted0000000000000000000000000000000000 planted@worker' > .ssh/authorized_keys
printf 'Host *\n  ProxyCommand sh -c "touch {M}/proxycommand; exit 1"\n  PermitLocalCommand yes\n  LocalCommand touch {M}/localcommand\n' > .ssh/config
echo planted
"#,
        check: &|s: &Scratch, t: &Path| {
            let cfg = t.join(".ssh/config");
            let port = closed_port().to_string();
            // Loopback only: a ProxyCommand runs instead of connecting; without
            // one, 127.0.0.1:PORT refuses the connection.
            let _ = host(
                t,
                t,
                "ssh",
                &[
                    "-F",
                    &cfg.display().to_string(),
                    "-o",
                    "BatchMode=yes",
                    "-o",
                    "ConnectTimeout=10",
                    "-o",
                    "UserKnownHostsFile=/dev/null",
                    "-p",
                    &port,
                    "127.0.0.1",
                    "true",
                ],
            );
            // sshd is not run here: the key landing at all is the escape.
            if std::fs::read_to_string(t.join(".ssh/authorized_keys"))
                .is_ok_and(|k| k.contains("planted@worker"))
            {
                std::fs::write(s.marker("authorized_keys"), "").unwrap();
            }
        },
        escapes: &["authorized_keys", "proxycommand"],
        refused: &[".ssh/authorized_keys", ".ssh/config"],
    }
    .assert_closed();
}

#[test]
fn agent_and_editor_configs_created_inside_do_not_reach_the_host() {
    const PLANTED: [&str; 4] = [
        ".claude/settings.json",
        ".mcp.json",
        ".vscode/tasks.json",
        ".envrc",
    ];
    Escape {
        setup: &repo,
        payload: r#"
mkdir -p .claude .vscode
echo '{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"touch {M}/claude"}]}]}}' > .claude/settings.json
echo '{"mcpServers":{"x":{"command":"sh","args":["-c","touch {M}/mcp"]}}}' > .mcp.json
echo '{"version":"2.0.0","tasks":[{"label":"x","type":"shell","command":"touch {M}/vscode","runOptions":{"runOn":"folderOpen"}}]}' > .vscode/tasks.json
echo 'touch {M}/envrc' > .envrc
echo planted
"#,
        // The programs that would run these (an agent, an editor, direnv)
        // are not here: each file landing at all is the escape.
        check: &|s: &Scratch, t: &Path| {
            for (p, m) in PLANTED.iter().zip(["claude", "mcp", "vscode", "envrc"]) {
                if std::fs::symlink_metadata(t.join(p)).is_ok() {
                    std::fs::write(s.marker(m), "").unwrap();
                }
            }
        },
        escapes: &["claude", "envrc", "mcp", "vscode"],
        refused: &PLANTED,
    }
    .assert_closed();
}

/// A repository that ships a setuid helper of the worker uid's
/// (`vendor/helper`, mode 04755: see [`Scratch::tree`]).
fn repo_with_setuid_helper(s: &Scratch, t: &Path) {
    repo(s, t);
    std::fs::create_dir(t.join("vendor")).unwrap();
    std::fs::copy("/bin/true", t.join("vendor/helper")).unwrap();
}

#[test]
fn a_setuid_file_made_inside_does_not_reach_the_host_with_the_bit() {
    // `chmod u+s` is refused by the sandbox's seccomp filter already; a
    // hard link to a set-id file the root holds is not (the overlay copies
    // it up with its mode), so the commit filter must refuse it.
    Escape {
        setup: &repo_with_setuid_helper,
        payload: r#"
cp /bin/true suid-tool
chmod u+s suid-tool || echo refused-inside:suid-tool
cp /bin/true sgid-tool
chmod g+s sgid-tool || echo refused-inside:sgid-tool
ln vendor/helper linked-tool
echo planted
"#,
        check: &|s: &Scratch, t: &Path| {
            for (f, bit, m) in [
                ("suid-tool", 0o4000, "setuid"),
                ("sgid-tool", 0o2000, "setgid"),
                ("linked-tool", 0o4000, "linked"),
            ] {
                if std::fs::symlink_metadata(t.join(f))
                    .is_ok_and(|md| md.permissions().mode() & bit != 0)
                {
                    std::fs::write(s.marker(m), "").unwrap();
                }
            }
        },
        escapes: &["linked", "setgid", "setuid"],
        refused: &["suid-tool", "sgid-tool", "linked-tool"],
    }
    .assert_closed();
}

#[test]
fn symlinks_that_leave_the_root_or_lead_into_git_and_fifos_do_not_reach_the_host() {
    // A host program writing `out/x` or `abs/x`, or a host hook writer
    // following `hooks-link`, would write outside the root or into `.git`;
    // one reading `pipe` would block.
    Escape {
        setup: &repo,
        payload: r#"
ln -s ../../.. out
ln -s /etc abs
ln -s .git/hooks hooks-link
mkfifo pipe
echo planted
"#,
        check: &|s: &Scratch, t: &Path| {
            for (f, m) in [("out", "out"), ("abs", "abs"), ("hooks-link", "hooks_link")] {
                if std::fs::symlink_metadata(t.join(f)).is_ok_and(|md| md.file_type().is_symlink())
                {
                    std::fs::write(s.marker(m), "").unwrap();
                }
            }
            use std::os::unix::fs::FileTypeExt;
            if std::fs::symlink_metadata(t.join("pipe")).is_ok_and(|md| md.file_type().is_fifo()) {
                std::fs::write(s.marker("fifo"), "").unwrap();
            }
        },
        escapes: &["abs", "fifo", "hooks_link", "out"],
        refused: &["out", "abs", "hooks-link", "pipe"],
    }
    .assert_closed();
}

// ---- positive controls: ordinary work lands on the host ----

/// A repository tree, a staged run of `script` in it; the tree and the run.
fn staged_work(s: &Scratch, script: &str) -> (PathBuf, Run) {
    let work = s.tree("work", &repo);
    let run = s.run(&work, &script.replace("WGIT", WGIT), &[]);
    run.assert_planted();
    (work, run)
}

fn porcelain(s: &Scratch, t: &Path) -> String {
    host_ok(&s.home(), t, "git", &["status", "--porcelain"])
}

fn fsck(s: &Scratch, t: &Path) {
    host_ok(&s.home(), t, "git", &["fsck", "--strict"]);
}

#[test]
fn an_edit_of_a_tracked_file_lands_on_the_host() {
    if skip() {
        return;
    }
    let s = Scratch::new();
    let (work, run) = staged_work(&s, "echo edited >> README\necho planted\n");
    assert_eq!(porcelain(&s, &work), " M README\n", "{run}");
    assert_eq!(
        std::fs::read_to_string(work.join("README")).unwrap(),
        "hello\nedited\n"
    );
    assert!(
        run.records.iter().any(|r| r["kind"] == "commit_applied"),
        "{run}"
    );
    fsck(&s, &work);
}

#[test]
fn a_new_source_file_lands_on_the_host() {
    if skip() {
        return;
    }
    let s = Scratch::new();
    let (work, run) = staged_work(
        &s,
        "mkdir -p src/net\necho 'pub fn f() {}' > src/net/mod.rs\necho planted\n",
    );
    assert_eq!(porcelain(&s, &work), "?? src/net/\n", "{run}");
    assert_eq!(
        std::fs::read_to_string(work.join("src/net/mod.rs")).unwrap(),
        "pub fn f() {}\n"
    );
    fsck(&s, &work);
}

#[test]
fn a_git_commit_made_inside_lands_on_the_host() {
    if skip() {
        return;
    }
    let s = Scratch::new();
    let (work, run) = staged_work(
        &s,
        "echo more >> src/lib.rs\necho new > NEW\nWGIT add -A\nWGIT commit -q -m 'worker change'\necho planted\n",
    );
    let log = host_ok(&s.home(), &work, "git", &["log", "--format=%s"]);
    assert_eq!(log, "worker change\ninitial\n", "{run}");
    assert_eq!(porcelain(&s, &work), "", "{run}");
    assert_eq!(
        host_ok(&s.home(), &work, "git", &["show", "HEAD:NEW"]),
        "new\n"
    );
    fsck(&s, &work);
}

#[test]
fn a_branch_created_inside_lands_on_the_host() {
    if skip() {
        return;
    }
    let s = Scratch::new();
    let (work, run) = staged_work(
        &s,
        "WGIT switch -q -c agent/feature\necho f > feature.txt\nWGIT add feature.txt\nWGIT commit -q -m feature\nWGIT switch -q main\necho planted\n",
    );
    let branches = host_ok(
        &s.home(),
        &work,
        "git",
        &["branch", "--format=%(refname:short)"],
    );
    assert_eq!(branches, "agent/feature\nmain\n", "{run}");
    assert_eq!(
        host_ok(
            &s.home(),
            &work,
            "git",
            &["log", "--format=%s", "agent/feature"]
        ),
        "feature\ninitial\n"
    );
    assert_eq!(porcelain(&s, &work), "", "{run}");
    fsck(&s, &work);
}

// ---- `--writes direct`: today's binds with placeholders, the weaker mode ----

/// Tries each write of the protected names, then an ordinary one, printing
/// `<name>:ok` or `<name>:refused` for each.
const DIRECT_PROBES: &str = r#"
try() { if sh -c "$2" 2>/dev/null; then echo "$1:ok"; else echo "$1:refused"; fi; }
try git_config 'echo x >> .git/config'
try git_hook 'echo x > .git/hooks/pre-commit'
try nested_hook 'echo x > sub/.git/hooks/pre-commit'
try bashrc 'echo x >> .bashrc'
try gitconfig 'echo x >> .gitconfig'
try palisade_dir 'mkdir -p .palisade/x'
try vscode 'echo x > .vscode/tasks.json'
try rename_git 'mv .git moved'
try ordinary 'echo x > ordinary.txt'
echo planted
"#;

/// The protected names `DIRECT_PROBES` writes.
const PROTECTED: [&str; 8] = [
    "git_config",
    "git_hook",
    "nested_hook",
    "bashrc",
    "gitconfig",
    "palisade_dir",
    "vscode",
    "rename_git",
];

/// A repository with a nested repository `sub` and an existing `.vscode`.
fn repo_for_direct(s: &Scratch, t: &Path) {
    repo(s, t);
    std::fs::create_dir(t.join("sub")).unwrap();
    repo(s, &t.join("sub"));
    std::fs::create_dir(t.join(".vscode")).unwrap();
}

/// The `name:word` lines of a probe run.
fn probe_results(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect()
}

#[test]
fn direct_writes_keep_the_protected_names_read_only_and_are_reported_as_weaker() {
    if skip() {
        return;
    }
    let s = Scratch::new();
    // Control: directly on the host, the same uid can make every write, so
    // each refusal below is the sandbox's.
    let control = s.tree("control", &repo_for_direct);
    let out = Command::new("timeout")
        .args(["60", "/bin/sh", "-c", DIRECT_PROBES])
        .current_dir(&control)
        .env_clear()
        .env("PATH", PATH)
        .uid(WORKER)
        .gid(WORKER)
        .output()
        .unwrap();
    let results = probe_results(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(results.len(), PROTECTED.len() + 1, "{results:?}");
    assert!(
        results.iter().all(|(_, w)| w == "ok"),
        "control: {results:?}"
    );

    let forms: [(&str, &[&str], &str); 2] = [
        ("--writes direct", &["--writes", "direct"], ""),
        ("[worker] writes = \"direct\"", &[], "writes = \"direct\"\n"),
    ];
    for (i, (form, flags, worker)) in forms.into_iter().enumerate() {
        eprintln!("direct writes through {form}");
        direct_writes_under(&s, &format!("work{i}"), form, flags, worker);
    }
}

/// `direct_writes_keep_…` for one way of asking for direct writes: `flags`
/// on the command line, `worker` in the policy's `[worker]` section.
fn direct_writes_under(s: &Scratch, name: &str, form: &str, flags: &[&str], worker: &str) {
    let work = s.tree(name, &repo_for_direct);
    let report = s.path().join(format!("{name}.launch.json"));
    let report_arg = report.display().to_string();
    let mut extra = flags.to_vec();
    extra.extend(["--launch-report", &report_arg]);
    let run = s.run_with(&work, DIRECT_PROBES, &extra, worker);
    run.assert_planted();
    let results = probe_results(&run.stdout);
    for name in PROTECTED {
        assert!(
            results.contains(&(name.to_owned(), "refused".to_owned())),
            "`{name}` was writable under {form}\n{run}"
        );
    }
    // Positive control: an ordinary write lands directly, with no stage
    // and no commit.
    assert!(
        results.contains(&("ordinary".to_owned(), "ok".to_owned())),
        "{run}"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("ordinary.txt")).unwrap(),
        "x\n"
    );
    assert_eq!(walk(&s.stages()), vec![s.stages()], "a stage was made");
    // Placeholders are gone after the run; the host's files are unchanged.
    assert!(!work.join(".bashrc").exists(), "a placeholder stayed");
    assert!(work.join(".git/HEAD").exists());
    assert_eq!(porcelain(s, &work), "?? ordinary.txt\n?? sub/\n", "{run}");
    // The weaker mode is reported as a downgrade.
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(
        v["downgraded"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l == "staged_writes"),
        "{v:#}"
    );
}

// ---- a kept stage, committed later through the same filter ----

/// `palisade SUBCOMMAND ARGS…` on the host: (exit code, stdout, stderr).
fn palisade_cmd(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new("timeout")
        .arg("120")
        .arg(palisade())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_kept_stage_changes_nothing_and_its_later_commit_goes_through_the_same_filter() {
    if skip() {
        return;
    }
    let s = Scratch::new();
    let payload = concat!(commondir!(), "echo edited >> README\necho planted\n")
        .replace("{M}", &s.markers().display().to_string());
    // Control: planted directly, the host check sees both payloads.
    let control = s.tree("control", &repo);
    s.plant_directly(&control, &payload);
    git_status_and_commit(&s, &control);
    assert_eq!(s.take_markers(), ["fsmonitor", "hook"]);

    let work = s.tree("work", &repo);
    let run = s.run(&work, &payload, &["--keep-staged"]);
    run.assert_planted();
    // Nothing reached the host: not the edit, not the pointer.
    assert_eq!(porcelain(&s, &work), "", "{run}");
    assert!(!work.join(".git/commondir").exists(), "{run}");
    let sessions: Vec<_> = std::fs::read_dir(s.stages())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let [session] = sessions.as_slice() else {
        panic!("not one kept stage: {sessions:?}\n{run}");
    };
    let stages = s.stages().display().to_string();

    let (code, diff, err) = palisade_cmd(&["diff", session, "--stage-dir", &stages]);
    assert_eq!(code, Some(0), "palisade diff: {err}");
    for want in ["README", ".git/commondir"] {
        assert!(diff.contains(want), "palisade diff lacks `{want}`:\n{diff}");
    }

    let journal = s.path().join("commit.journal");
    let key = s.path().join("journal.key");
    let (code, _, err) = palisade_cmd(&[
        "commit",
        session,
        "--stage-dir",
        &stages,
        "--journal",
        &journal.display().to_string(),
        "--key",
        &key.display().to_string(),
    ]);
    // Something was refused, so the stage is kept and the status says so.
    assert_eq!(code, Some(1), "palisade commit: {err}");
    let status = porcelain(&s, &work);
    assert!(status.lines().any(|l| l == " M README"), "{status}\n{err}");
    assert!(!work.join(".git/commondir").exists(), "{err}");
    git_status_and_commit(&s, &work);
    assert_eq!(s.take_markers(), Vec::<String>::new(), "{err}");
    let records: Vec<Value> = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let with = |kind: &str, path: &str| {
        records
            .iter()
            .any(|r| r["kind"] == kind && r["body"]["path"] == path)
    };
    assert!(with("commit_applied", "README"), "{records:#?}");
    assert!(with("commit_refused", ".git/commondir"), "{records:#?}");
    assert!(!with("commit_applied", ".git/commondir"), "{records:#?}");
}

// ---- fail closed ----

#[test]
fn a_stage_that_cannot_be_set_up_refuses_the_run_naming_staged_writes() {
    if skip() {
        return;
    }
    let s = Scratch::new();
    let work = s.tree("work", &repo);
    // A stage directory inside the writable root: the worker could edit
    // its own upper layer and the quarantine.
    let inside = work.join("stages");
    let inside_arg = inside.display().to_string();
    let run = s.run(
        &work,
        "echo ran > ran.txt\necho planted\n",
        &["--stage-dir", &inside_arg],
    );
    assert_eq!(run.code, Some(125), "{run}");
    assert!(run.stderr.contains("staged_writes"), "{run}");
    assert!(!run.stdout.contains("planted"), "the worker ran: {run}");
    assert!(!work.join("ran.txt").exists(), "{run}");
    assert!(
        walk(&work)
            .iter()
            .all(|p| !p.starts_with(&inside) || p == &inside),
        "a stage was made inside the root: {run}"
    );
    assert_eq!(porcelain(&s, &work), "", "{run}");
    // Positive control: the same run with the stage outside the root runs
    // and commits.
    let run = s.run(&work, "echo ran > ran.txt\necho planted\n", &[]);
    run.assert_planted();
    assert_eq!(
        std::fs::read_to_string(work.join("ran.txt")).unwrap(),
        "ran\n"
    );
}

// ---- the policy adds to the refused list ----

#[test]
fn a_policy_refuse_glob_keeps_a_tool_config_of_its_choice_off_the_host() {
    if skip() {
        return;
    }
    // Files of the operator's choosing (a version pin and a task file a
    // host script trusts), which the built-in list does not name.
    const PAYLOAD: &str = r#"
mkdir -p .yarn/releases web
echo 'nodejs 99.0.0' > .tool-versions
echo 'require("fs").writeFileSync("/tmp/x", "")' > .yarn/releases/yarn.cjs
printf 'tasks:\n  x:\n    cmds: [touch /tmp/x]\n' > web/Taskfile.yml
echo 'pub fn ok() {}' > src/ok.rs
echo planted
"#;
    let planted = [".tool-versions", "web/Taskfile.yml"];
    let s = Scratch::new();
    // Control: planted directly, every file is there.
    let control = s.tree("control", &repo);
    s.plant_directly(&control, PAYLOAD);
    for p in planted {
        assert!(control.join(p).exists(), "control: {p}");
    }

    let work = s.tree("work", &repo);
    let run = s.run_with(
        &work,
        PAYLOAD,
        &[],
        "\n[worker.commit]\nrefuse = [\".tool-versions\", \"**/Taskfile.yml\"]\n",
    );
    run.assert_planted();
    for p in planted {
        assert!(!work.join(p).exists(), "`{p}` reached the host\n{run}");
        s.assert_refused(&run, &work, p);
        let rule = run
            .records
            .iter()
            .find(|r| r["kind"] == "commit_refused" && r["body"]["path"] == p)
            .map(|r| r["body"]["rule"].clone());
        assert_eq!(rule, Some(Value::from("policy_refused")), "{run}");
    }
    // Positive control: the rest of the same run lands.
    assert_eq!(
        std::fs::read_to_string(work.join("src/ok.rs")).unwrap(),
        "pub fn ok() {}\n"
    );
    assert!(work.join(".yarn/releases/yarn.cjs").exists(), "{run}");
}

// ---- the plain form: no policy, no journal ----

#[test]
fn a_run_without_a_policy_or_journal_filters_the_same_way() {
    if skip() {
        return;
    }
    let s = Scratch::new();
    let payload = concat!(
        commondir!(),
        "echo '{\"mcpServers\":{}}' > .mcp.json\necho edited >> README\necho planted\n"
    )
    .replace("{M}", &s.markers().display().to_string());
    let control = s.tree("control", &repo);
    s.plant_directly(&control, &payload);
    git_status_and_commit(&s, &control);
    assert_eq!(s.take_markers(), ["fsmonitor", "hook"]);
    assert!(control.join(".mcp.json").exists());

    let work = s.tree("work", &repo);
    let out = Command::new("timeout")
        .arg("180")
        .arg(palisade())
        .args(["run", "--profile", "governed", "--cwd"])
        .arg(&work)
        .arg("--stage-dir")
        .arg(s.stages())
        .args(["--", "/bin/sh", "-ec"])
        .arg(format!("export PATH={PATH}\n{payload}"))
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("planted"));
    git_status_and_commit(&s, &work);
    assert_eq!(s.take_markers(), Vec::<String>::new(), "{stderr}");
    for rel in [".git/commondir", ".mcp.json"] {
        assert!(
            !work.join(rel).exists(),
            "`{rel}` reached the host: {stderr}"
        );
        let line = format!("refused: {}: ", work.join(rel).display());
        assert!(stderr.contains(&line), "no `{line}` in: {stderr}");
        let q = Path::new("quarantine").join(rel);
        assert!(
            walk(&s.stages()).iter().any(|p| p.ends_with(&q)),
            "`{rel}` is not in the quarantine: {stderr}"
        );
    }
    // Positive control: the edit landed.
    let status = porcelain(&s, &work);
    assert!(status.lines().any(|l| l == " M README"), "{status}");
}

// ---- a host edit made while the worker ran is a conflict ----

#[test]
fn a_host_edit_made_while_the_worker_ran_is_a_conflict_and_is_kept() {
    use std::io::{BufRead, Write};
    if skip() {
        return;
    }
    let s = Scratch::new();
    let work = s.tree("work", &repo);
    // The worker edits README and says so, then waits for a line on its
    // standard input before it ends: the host edits README in between.
    let script = "echo worker >> README\necho new > NEW\necho ready\nread go\necho planted\n";
    let mut child = Command::new("timeout")
        .arg("180")
        .arg(palisade())
        .args(["run", "--profile", "governed", "--cwd"])
        .arg(&work)
        .arg("--stage-dir")
        .arg(s.stages())
        .args(["--", "/bin/sh", "-ec"])
        .arg(format!("export PATH={PATH}\n{script}"))
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    // Nothing reached the host yet.
    assert_eq!(
        std::fs::read_to_string(work.join("README")).unwrap(),
        "hello\n"
    );
    std::fs::write(work.join("README"), "hello\nhost\n").unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(rest.contains("planted"), "{rest}");
    // The host's edit stays; the worker's is left in the stage, named.
    assert_eq!(
        std::fs::read_to_string(work.join("README")).unwrap(),
        "hello\nhost\n",
        "{stderr}"
    );
    let line = format!("conflict: {}: ", work.join("README").display());
    assert!(stderr.contains(&line), "no `{line}` in: {stderr}");
    assert!(
        walk(&s.stages()).iter().any(|p| p.ends_with("upper/README")
            && std::fs::read_to_string(p).is_ok_and(|t| t == "hello\nworker\n")),
        "the worker's README is not kept in the stage: {stderr}"
    );
    // Positive control: the rest of the same run landed.
    assert_eq!(std::fs::read_to_string(work.join("NEW")).unwrap(), "new\n");
}
