//! Unit tests of the commit filter: each rule with the nearest allowed
//! path or node as its positive control.

#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::super::{Change, ChangeKind, ChangeSet, Node, NodeKind};
use super::{CommitFilter, FilterVerdict};

pub(super) fn node(kind: NodeKind, mode: u32) -> Node {
    Node {
        kind,
        mode,
        size: 0,
        link_target: None,
        file_caps: false,
    }
}

pub(super) fn change(path: impl AsRef<Path>, kind: ChangeKind, node: Node) -> Change {
    Change {
        root: 0,
        path: path.as_ref().to_path_buf(),
        kind,
        node,
    }
}

fn file(path: &str) -> Change {
    change(path, ChangeKind::Created, node(NodeKind::File, 0o644))
}

fn dir(path: &str) -> Change {
    change(path, ChangeKind::Created, node(NodeKind::Dir, 0o755))
}

fn link(path: &str, target: &str) -> Change {
    let mut n = node(NodeKind::Symlink, 0o777);
    n.link_target = Some(PathBuf::from(target));
    change(path, ChangeKind::Created, n)
}

fn with_kind(mut c: Change, kind: ChangeKind) -> Change {
    c.kind = kind;
    c
}

/// The rule of each verdict (`None` for a commit).
fn rules_of(filter: &CommitFilter, changes: Vec<Change>) -> Vec<Option<&'static str>> {
    let set = ChangeSet {
        changes,
        ..ChangeSet::default()
    };
    let verdicts = filter.check(&set);
    assert_eq!(verdicts.len(), set.changes.len(), "one verdict per change");
    verdicts
        .into_iter()
        .map(|v| match v {
            FilterVerdict::Commit => None,
            FilterVerdict::Refuse(r) => {
                assert!(!r.detail.is_empty(), "a refusal says what matched");
                Some(r.rule)
            }
        })
        .collect()
}

/// The rule of one change judged alone.
fn rule(c: Change) -> Option<&'static str> {
    rules_of(&CommitFilter::new(), vec![c])[0]
}

#[track_caller]
fn refused(c: Change, want: &str) {
    let shown = c.path.display().to_string();
    assert_eq!(rule(c), Some(want), "`{shown}` must be refused by {want}");
}

#[track_caller]
fn commits(c: Change) {
    let shown = c.path.display().to_string();
    assert_eq!(rule(c), None, "`{shown}` must commit");
}

#[test]
fn inside_git_only_objects_refs_logs_and_state_files_commit() {
    for p in [
        ".git/hooks/pre-commit",
        ".git/config",
        ".git/commondir",
        ".git/info/exclude",
        ".git/info/attributes",
        ".git/worktrees/w/gitdir",
        ".git/rebase-merge/git-rebase-todo",
        ".git/sequencer/todo",
        ".git/objects/info/alternates",
        ".git/objects/info/http-alternates",
        ".git/description",
        ".git/HEAD/x",
        "sub/.git/hooks/post-checkout",
        "a/b/.git/config",
        // Case-folding filesystems cannot hide them.
        ".GIT/Hooks/pre-commit",
        ".Git/CONFIG",
    ] {
        refused(file(p), "git_internal");
    }
    for p in [
        ".git/objects/ab/cdef",
        ".git/objects/pack/pack-1.pack",
        ".git/objects/info/packs",
        ".git/refs/heads/main",
        ".git/refs/tags/v1",
        ".git/logs/HEAD",
        ".git/logs/refs/heads/main",
        ".git/packed-refs",
        ".git/HEAD",
        ".git/index",
        ".git/ORIG_HEAD",
        ".git/FETCH_HEAD",
        ".git/COMMIT_EDITMSG",
        ".git/MERGE_HEAD",
        ".git/MERGE_MSG",
        ".git/shallow",
        "sub/.git/objects/ab/cdef",
        "sub/.git/refs/heads/topic",
    ] {
        commits(file(p));
    }
    // The directories themselves.
    commits(dir(".git/objects/ab"));
    commits(dir(".git/refs/heads/feature"));
    refused(dir(".git/hooks"), "git_internal");
}

#[test]
fn every_git_of_a_path_is_checked() {
    // `refs/**` is allowed inside the outer `.git`, but the inner one
    // has a hooks directory.
    refused(file(".git/refs/.git/hooks/x"), "git_internal");
    commits(file(".git/refs/x/y"));
}

#[test]
fn submodule_gitdirs_are_refused_whole() {
    refused(file(".git/modules/sub/config"), "git_modules");
    refused(file(".git/modules/sub/objects/ab/cd"), "git_modules");
    refused(file(".git/modules/hooks/pre-commit"), "git_modules");
    // The submodule's work tree and `.gitmodules` are ordinary content.
    commits(file(".gitmodules"));
    commits(file("modules/sub/config"));
}

#[test]
fn a_git_that_is_not_a_directory_is_a_gitdir_pointer() {
    refused(file(".git"), "git_pointer");
    refused(file("sub/.git"), "git_pointer");
    refused(link("sub/.git", "../.git"), "git_pointer");
    refused(
        with_kind(file("sub/.git"), ChangeKind::Modified),
        "git_pointer",
    );
    refused(
        with_kind(file("sub/.git"), ChangeKind::Deleted),
        "git_pointer",
    );
    // Positive control: a file merely named like it.
    commits(file("sub/.git.bak"));
    commits(file("sub/dot.git"));
}

#[test]
fn a_created_git_directory_and_all_below_it_is_a_new_repository() {
    let f = CommitFilter::new();
    let got = rules_of(
        &f,
        vec![
            dir(".git"),
            file(".git/HEAD"),
            file(".git/config"),
            file(".git/objects/ab/cd"),
            dir("vendor/lib/.git"),
            file("vendor/lib/.git/objects/ab/cd"),
            file("vendor/lib/src/main.rs"),
        ],
    );
    assert_eq!(
        got,
        [
            Some("new_repository"),
            Some("new_repository"),
            Some("new_repository"),
            Some("new_repository"),
            Some("new_repository"),
            Some("new_repository"),
            None,
        ]
    );
    // A directory put where a `.git` file was is a new repository too.
    let got = rules_of(
        &f,
        vec![
            with_kind(dir("sub/.git"), ChangeKind::Modified),
            file("sub/.git/objects/ab/cd"),
        ],
    );
    assert_eq!(got, [Some("new_repository"), Some("new_repository")]);
    // Positive control: the same objects in a repository the host had.
    let got = rules_of(&f, vec![file(".git/objects/ab/cd"), file(".git/HEAD")]);
    assert_eq!(got, [None, None]);
    // The context is per root.
    let mut other = dir(".git");
    other.root = 1;
    let got = rules_of(&f, vec![other, file(".git/objects/ab/cd")]);
    assert_eq!(got, [Some("new_repository"), None]);
}

#[test]
fn the_git_directory_itself_cannot_be_deleted_or_rechmodded() {
    refused(with_kind(dir(".git"), ChangeKind::Deleted), "git_internal");
    refused(
        with_kind(dir("sub/.git"), ChangeKind::ModeChanged),
        "git_internal",
    );
}

#[test]
fn a_head_outside_git_is_a_bare_repository() {
    for p in ["HEAD", "fixtures/bare/HEAD", "a/head", "HEAD/x"] {
        refused(file(p), "bare_repository");
    }
    refused(
        with_kind(file("fixtures/bare/HEAD"), ChangeKind::Deleted),
        "bare_repository",
    );
    // Inside `.git` a HEAD is git's own.
    for p in [
        ".git/HEAD",
        ".git/logs/HEAD",
        ".git/refs/remotes/origin/HEAD",
        ".git/logs/refs/remotes/origin/HEAD",
        "sub/.git/HEAD",
    ] {
        commits(file(p));
    }
    // Positive control: names that merely contain it.
    commits(file("docs/HEAD.md"));
    commits(file("HEADER.h"));
    commits(file("fixtures/bare/config"));
}

#[test]
fn shell_startup_files_at_any_depth() {
    for p in [
        ".bashrc",
        "home/u/.bash_aliases",
        ".profile",
        ".zshenv",
        ".config/fish/config.fish",
        ".config/autostart/evil.desktop",
        ".config/systemd/user/evil.service",
        ".config/environment.d/path.conf",
        ".local/bin/git",
        "home/u/.local/bin/ls",
        ".cargo/bin/cargo",
        ".BASHRC",
    ] {
        refused(file(p), "shell_startup");
    }
    for p in [
        "src/bashrc.rs",
        ".bashrc.bak",
        "docs/profile.md",
        ".config/foo/bar",
        ".local/share/x",
        ".cargo/registry/x",
        "bin/tool",
    ] {
        commits(file(p));
    }
}

#[test]
fn startup_configs_of_host_tools() {
    for p in [
        ".vimrc",
        "home/u/.config/nvim/init.lua",
        ".vim/plugin/x.vim",
        ".emacs.d/init.el",
        ".tmux.conf",
        ".gdbinit",
        ".psqlrc",
        ".config/gh/config.yml",
        ".docker/config.json",
    ] {
        refused(file(p), "startup_config");
    }
    // Positive control: the same words as ordinary names.
    for p in [
        "docs/vimrc.md",
        "nvim/init.lua",
        "docker/Dockerfile",
        "gh/x",
    ] {
        commits(file(p));
    }
}

#[test]
fn ssh_and_git_config() {
    refused(file(".ssh/authorized_keys"), "ssh");
    refused(file("home/u/.ssh/config"), "ssh");
    commits(file("ssh/notes.md"));
    refused(file(".gitconfig"), "git_config");
    refused(file(".config/git/config"), "git_config");
    refused(file("home/u/.config/git/attributes"), "git_config");
    // `.gitattributes` runs nothing without a driver a config defines.
    commits(file(".gitattributes"));
    commits(file(".gitignore"));
    commits(file("docs/gitconfig.md"));
}

#[test]
fn editor_ide_and_agent_configs() {
    for p in [
        ".vscode/settings.json",
        ".vscode/tasks.json",
        ".idea/workspace.xml",
        ".claude/settings.json",
        ".claude/skills/x/SKILL.md",
        ".claude.json",
        ".mcp.json",
        ".cursor/mcp.json",
        ".envrc",
        ".direnv/bin/x",
        ".codex/config.toml",
        ".agents/x",
        ".opencode/plugin/x.ts",
        "opencode.json",
        ".config/opencode/opencode.json",
        ".gemini/settings.json",
        ".zed/settings.json",
        ".devcontainer/devcontainer.json",
        ".pre-commit-config.yaml",
        ".pi/extensions/x.ts",
        "pkg/.vscode/launch.json",
    ] {
        refused(file(p), "tool_config");
    }
    for p in [
        "docs/.vscode-notes.md",
        "vscode/settings.json",
        "CLAUDE.md",
        "AGENTS.md",
        "docs/mcp.json",
        "envrc",
    ] {
        commits(file(p));
    }
}

#[test]
fn build_tool_configs_that_run_helpers_on_any_invocation() {
    for p in [
        ".cargo/config.toml",
        ".cargo/config",
        "crates/x/.cargo/config.toml",
        ".npmrc",
        "web/.npmrc",
        ".yarnrc",
        ".yarnrc.yml",
        ".pnpmfile.cjs",
        "mise.toml",
        ".mise.toml",
        "mise.local.toml",
        ".mise/tasks/x",
        ".config/mise/config.toml",
    ] {
        refused(file(p), "build_config");
    }
    for p in [
        ".cargo/registry-notes.md",
        "Cargo.toml",
        "package.json",
        "docs/npmrc.md",
        "yarnrc.yml",
        "src/mise.rs",
    ] {
        commits(file(p));
    }
}

#[test]
fn palisade_state_and_the_policy_file() {
    refused(file(".palisade/journal"), "palisade");
    refused(file("sub/.palisade"), "palisade");
    commits(file("palisade/notes.md"));
    let mut f = CommitFilter::new();
    f.refuse_exact(0, "conf/palisade.toml", "policy_file");
    let mut elsewhere = file("conf/palisade.toml");
    elsewhere.root = 1;
    let got = rules_of(
        &f,
        vec![
            file("conf/palisade.toml"),
            with_kind(file("conf/palisade.toml"), ChangeKind::Deleted),
            file("conf/palisade.toml.bak"),
            elsewhere,
        ],
    );
    assert_eq!(got, [Some("policy_file"), Some("policy_file"), None, None]);
}

#[test]
fn refused_kinds() {
    refused(file_mode(0o4755), "setuid");
    refused(file_mode(0o2755), "setuid");
    refused(file_mode(0o6755), "setuid");
    commits(file_mode(0o755));
    commits(file_mode(0o1777));
    // A setgid directory only passes its group on; a setuid one is refused.
    commits(change(
        "d",
        ChangeKind::Created,
        node(NodeKind::Dir, 0o2775),
    ));
    refused(
        change("d", ChangeKind::Created, node(NodeKind::Dir, 0o4775)),
        "setuid",
    );
    // A chmod u+s is refused; removing the host's set-id file is not.
    refused(
        with_kind(file_mode(0o4755), ChangeKind::ModeChanged),
        "setuid",
    );
    commits(with_kind(file_mode(0o4755), ChangeKind::Deleted));
    let mut caps = file_mode(0o755);
    caps.node.file_caps = true;
    refused(caps, "file_caps");
    for (kind, want) in [
        (NodeKind::CharDevice, "device"),
        (NodeKind::BlockDevice, "device"),
        (NodeKind::Socket, "socket"),
        (NodeKind::Fifo, "fifo"),
    ] {
        refused(change("x", ChangeKind::Created, node(kind, 0o644)), want);
        // The host's node removed: nothing is left behind.
        commits(change("x", ChangeKind::Deleted, node(kind, 0o644)));
    }
}

fn file_mode(mode: u32) -> Change {
    change("bin/tool", ChangeKind::Created, node(NodeKind::File, mode))
}

#[test]
fn symlinks_that_escape_or_lead_into_refused_paths() {
    refused(link("a/link", "../../etc"), "symlink_escape");
    refused(link("link", ".."), "symlink_escape");
    refused(link("link", "/etc/passwd"), "symlink_escape");
    refused(link("a/b/link", "../../../x"), "symlink_escape");
    let mut unknown = link("link", "x");
    unknown.node.link_target = None;
    refused(unknown, "symlink_escape");
    commits(link("a/link", "../b"));
    commits(link("a/b/link", "../../c/d"));
    commits(link("a/up", ".."));
    commits(link("a/here", "./x"));
    refused(link("hooks", ".git/hooks"), "symlink_to_refused");
    refused(link("a/cfg", "../.git/config"), "symlink_to_refused");
    refused(link("a/g", "../.git"), "symlink_to_refused");
    refused(link("a/rc", "../.bashrc"), "symlink_to_refused");
    // A `..` after a name is not judged lexically: the name may be a link.
    refused(link("keys", "x/../.ssh/authorized_keys"), "symlink_escape");
    commits(link("objs", ".git/objects"));
    commits(link("a/rc", "../bashrc.txt"));
    // The same target from a place where it stays inside.
    let mut retarget = link("a/link", "../x");
    retarget.kind = ChangeKind::Modified;
    commits(retarget);
}

#[test]
fn symlinks_into_a_policy_path_are_refused_too() {
    let mut f = CommitFilter::new();
    f.refuse("deploy/**").unwrap();
    f.refuse_exact(0, "palisade.toml", "policy_file");
    let got = rules_of(
        &f,
        vec![
            link("d", "deploy/run.sh"),
            link("p", "palisade.toml"),
            link("q", "src/main.rs"),
        ],
    );
    assert_eq!(
        got,
        [Some("symlink_to_refused"), Some("symlink_to_refused"), None]
    );
}

#[test]
fn deletions_mode_changes_and_renames_of_refused_paths() {
    let hook = ".git/hooks/pre-commit";
    refused(with_kind(file(hook), ChangeKind::Deleted), "git_internal");
    refused(
        with_kind(file(hook), ChangeKind::ModeChanged),
        "git_internal",
    );
    refused(with_kind(file(hook), ChangeKind::Modified), "git_internal");
    commits(with_kind(file("src/old.rs"), ChangeKind::Deleted));
    commits(with_kind(file("src/x.sh"), ChangeKind::ModeChanged));
    // Either end of a rename.
    let from = |p: &str| ChangeKind::Renamed {
        from: PathBuf::from(p),
    };
    refused(with_kind(file("notes.txt"), from(hook)), "git_internal");
    refused(with_kind(file(hook), from("notes.txt")), "git_internal");
    refused(with_kind(file("x"), from(".bashrc")), "shell_startup");
    commits(with_kind(file("src/b.rs"), from("src/a.rs")));
    // A rename into a `.git` directory makes a new repository.
    refused(
        with_kind(dir("sub/.git"), from("sub/tmp")),
        "new_repository",
    );
}

#[test]
fn a_deleted_directory_holding_a_refused_change_stays() {
    let gone = |c: Change| with_kind(c, ChangeKind::Deleted);
    let got = rules_of(
        &CommitFilter::new(),
        vec![
            gone(file("vendor/lib/.git/config")),
            gone(file("vendor/lib/main.c")),
            gone(dir("vendor/lib/.git")),
            gone(dir("vendor/lib")),
            gone(dir("vendor")),
            gone(file("old/a.rs")),
            gone(dir("old")),
            gone(dir("vendor-b")),
        ],
    );
    assert_eq!(
        got,
        [
            Some("git_internal"),
            None,
            Some("git_internal"),
            Some("refused_below"),
            Some("refused_below"),
            None,
            None,
            None,
        ]
    );
}

#[test]
fn policy_patterns_add_refusals() {
    let mut f = CommitFilter::new();
    f.refuse("deploy/**")
        .unwrap()
        .refuse("secrets")
        .unwrap()
        .refuse("./**/*.pem")
        .unwrap();
    assert_eq!(f.patterns(), ["deploy/**", "secrets", "**/*.pem"]);
    let got = rules_of(
        &f,
        vec![
            file("deploy/prod.sh"),
            file("secrets/key"),
            file("a/b/c.pem"),
            file("src/deploy.rs"),
            file("sub/secrets/key"),
            file("a/b/c.pem.txt"),
            // The built-in list still applies, first.
            file(".bashrc"),
        ],
    );
    assert_eq!(
        got,
        [
            Some("policy_refused"),
            Some("policy_refused"),
            Some("policy_refused"),
            None,
            None,
            None,
            Some("shell_startup"),
        ]
    );
    // Positive control: without the patterns, the same paths commit.
    let base = rules_of(
        &CommitFilter::new(),
        vec![
            file("deploy/prod.sh"),
            file("secrets/key"),
            file("a/b/c.pem"),
        ],
    );
    assert_eq!(base, [None, None, None]);
}

#[test]
fn policy_patterns_match_bytes_not_a_lossy_rendering() {
    let mut f = CommitFilter::new();
    f.refuse("*/secret").unwrap();
    let raw = Path::new(OsStr::from_bytes(b"\xff\xfe/secret"));
    let lossy = PathBuf::from(raw.to_string_lossy().into_owned());
    let got = rules_of(
        &f,
        vec![
            change(raw, ChangeKind::Created, node(NodeKind::File, 0o644)),
            change(lossy, ChangeKind::Created, node(NodeKind::File, 0o644)),
        ],
    );
    assert_eq!(got, [Some("policy_refused"), Some("policy_refused")]);
    // A pattern with the lossy replacement character does not match the
    // raw bytes.
    let mut g = CommitFilter::new();
    g.refuse("\u{fffd}\u{fffd}/**").unwrap();
    let got = rules_of(
        &g,
        vec![change(
            raw,
            ChangeKind::Created,
            node(NodeKind::File, 0o644),
        )],
    );
    assert_eq!(got, [None]);
    // Built-in names under non-UTF-8 directories are still found.
    let hook = Path::new(OsStr::from_bytes(b"\xff/.git/hooks/pre-push"));
    refused(
        change(hook, ChangeKind::Created, node(NodeKind::File, 0o755)),
        "git_internal",
    );
}

#[test]
fn bad_patterns_are_errors_naming_them() {
    let mut f = CommitFilter::new();
    for (bad, says) in [
        ("/etc/**", "relative"),
        ("a/../b", ".."),
        ("", "empty"),
        ("src/[", "src/["),
    ] {
        let e = f.refuse(bad).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("filter_pattern: "), "{msg}");
        assert!(
            msg.contains(&format!("`{bad}`")),
            "names the pattern: {msg}"
        );
        assert!(msg.contains(says), "says why: {msg}");
    }
    assert!(f.patterns().is_empty(), "a refused pattern adds nothing");
    f.refuse("ok/**").unwrap();
    assert_eq!(f.patterns(), ["ok/**"]);
}

#[test]
fn paths_the_scan_never_produces_are_refused() {
    for p in ["a/../b", "/abs", "a/./b", "", "a//b", "a/"] {
        refused(file(p), "invalid_path");
    }
}

#[test]
fn a_trailing_slash_names_the_directory() {
    let mut f = CommitFilter::new();
    f.refuse("deploy/").unwrap();
    assert_eq!(f.patterns(), ["deploy"]);
    let got = rules_of(&f, vec![file("deploy/x"), file("deployx")]);
    assert_eq!(got, [Some("policy_refused"), None]);
    assert!(f.refuse("/").is_err());
    assert!(f.refuse("./").is_err());
}

#[test]
fn a_very_deep_path_is_judged_whole() {
    // 20,000 components: each of the loops over a path is linear in it.
    let mut deep = String::from(".git/refs");
    for _ in 0..10_000 {
        deep.push_str("/.git/refs");
    }
    let mut f = CommitFilter::new();
    f.refuse("**/never").unwrap().refuse("x/**").unwrap();
    let hook = format!("{deep}/.git/hooks/h");
    let got = rules_of(
        &f,
        vec![dir("sub/.git"), file(&format!("{deep}/a")), file(&hook)],
    );
    assert_eq!(got, [Some("new_repository"), None, Some("git_internal")]);
}

#[test]
fn every_rule_the_filter_gives_is_listed() {
    let listed: Vec<&str> = CommitFilter::rules().iter().map(|r| r.rule).collect();
    let mut seen = std::collections::BTreeSet::new();
    for r in &listed {
        assert!(seen.insert(*r), "`{r}` listed twice");
    }
    for c in [
        "palisade",
        "new_repository",
        "git_pointer",
        "git_modules",
        "git_internal",
        "shell_startup",
        "ssh",
        "git_config",
        "tool_config",
        "startup_config",
        "bare_repository",
        "refused_below",
        "invalid_path",
        "setuid",
        "file_caps",
        "device",
        "socket",
        "fifo",
        "symlink_escape",
        "symlink_to_refused",
    ] {
        assert!(
            listed.contains(&c),
            "`{c}` missing from CommitFilter::rules()"
        );
    }
    for (rule, _) in super::NAMES {
        assert!(listed.contains(rule), "`{rule}` missing");
    }
    for r in CommitFilter::rules() {
        assert!(!r.paths.is_empty() && !r.why.is_empty(), "{r:?}");
    }
}

/// `docs/sandbox.md`'s table of the commit filter lists exactly the rows of
/// [`CommitFilter::rules`], in order.
#[test]
fn the_docs_table_lists_exactly_the_built_in_rules() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/sandbox.md");
    let text = std::fs::read_to_string(&docs).unwrap();
    let start = text
        .find("<!-- commit-filter-rules -->")
        .expect("the table's start marker");
    let end = text
        .find("<!-- /commit-filter-rules -->")
        .expect("the table's end marker");
    let rows: Vec<String> = text[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(str::to_owned)
        .collect();
    let want: Vec<String> = CommitFilter::rules()
        .iter()
        .map(|r| format!("| `{}` | {} | {} |", r.rule, r.paths, r.why))
        .collect();
    assert_eq!(
        rows, want,
        "regenerate the table from CommitFilter::rules()"
    );
}

#[test]
fn a_symlink_chain_cannot_climb_out_of_a_link() {
    // `sub/up -> ..` is the root; `..` after it would be judged as if
    // `sub/up` were a directory, and `esc` would lead above the root.
    let f = CommitFilter::new();
    let got = rules_of(
        &f,
        vec![
            dir("sub"),
            link("sub/up", ".."),
            link("esc", "sub/up/.."),
            link("l1", "sub/up/../x"),
            link("a/b", "c/../d"),
            link("inside", "sub"),
            link("a/b/c", "../../x/y"),
            link("a/d", "./../x"),
        ],
    );
    assert_eq!(
        got,
        [
            None,
            None,
            Some("symlink_escape"),
            Some("symlink_escape"),
            Some("symlink_escape"),
            None,
            None,
            None,
        ]
    );
    // More leading `..` than directories above the link.
    refused(link("a/b/c", "../../../x"), "symlink_escape");
}

#[test]
fn a_symlink_at_a_prefix_of_a_refused_path_is_refused() {
    for (path, target) in [
        (".config", "cfg"),
        ("deep/.config", "../cfg"),
        (".local", "lcl"),
        (".cargo", "c"),
        (".CONFIG", "cfg"),
        (".git/objects/info", "../../altx"),
        (".git/refs/heads", "../../r"),
    ] {
        refused(link(path, target), "symlink_prefix");
    }
    // Positive controls: innocent names, and a real `.config` directory.
    commits(link("plain", "cfg"));
    commits(link("cfg/config", "x"));
    commits(link("a/.configs", "x"));
    commits(dir(".config"));
    commits(file("cfg/git/config"));
    // A deleted symlink leaves nothing.
    commits(with_kind(link(".config", "cfg"), ChangeKind::Deleted));
}

#[test]
fn a_symlink_at_a_prefix_of_a_policy_or_exact_path_is_refused() {
    let mut f = CommitFilter::new();
    f.refuse("deploy/hooks/**").unwrap();
    f.refuse("**/mise.toml").unwrap();
    f.refuse_exact(0, "conf/palisade.toml", "policy_file");
    let got = rules_of(
        &f,
        vec![
            link("deploy", "d"),
            link("deploy/hooks", "h"),
            link("conf", "c"),
            link("deployx", "d"),
            link("other/hooks", "h"),
            link("x", "y"),
        ],
    );
    assert_eq!(
        got,
        [
            Some("symlink_prefix"),
            Some("symlink_prefix"),
            Some("symlink_prefix"),
            None,
            None,
            None,
        ]
    );
}

#[test]
fn refuse_symlinks_into_and_at_name_the_rule_given() {
    let mut f = CommitFilter::new();
    f.refuse_symlinks_into("docs/agents/AGENTS.md", "steering_symlink")
        .unwrap();
    f.refuse_symlinks_at("AGENTS.md", "steering_symlink")
        .unwrap();
    f.refuse_symlinks_at("docs/agents/AGENTS.md", "steering_symlink")
        .unwrap();
    let got = rules_of(
        &f,
        vec![
            link("AGENTS.md", "notes.md"),
            link("docs", "d"),
            link("docs/agents", "a"),
            link("docs/agents/AGENTS.md", "n"),
            file("AGENTS.md"),
            link("notes.md", "x"),
            link("docs/other", "x"),
        ],
    );
    assert_eq!(
        got,
        [
            Some("steering_symlink"),
            Some("steering_symlink"),
            Some("steering_symlink"),
            Some("steering_symlink"),
            None,
            None,
            None,
        ]
    );
    // `refuse_symlinks_into` alone leaves the path itself to the caller.
    let mut g = CommitFilter::new();
    g.refuse_symlinks_into("AGENTS.md", "steering_symlink")
        .unwrap();
    assert_eq!(rules_of(&g, vec![link("AGENTS.md", "n")]), [None]);
    assert!(g.refuse_symlinks_into("/abs", "steering_symlink").is_err());
}

#[test]
fn home_startup_names_outside_the_old_list() {
    refused(file(".bashrc.d/x.sh"), "shell_startup");
    refused(
        file(".local/lib/python3.11/site-packages/zz.pth"),
        "startup_config",
    );
    refused(file(".config/pip/pip.conf"), "startup_config");
    commits(file("lib/python3.11/site-packages/zz.pth"));
    commits(file("bashrc.d/x.sh"));
}

#[test]
fn a_home_refuses_its_dot_entries_and_bin() {
    let mut f = CommitFilter::new();
    f.home(0, "home/u");
    let mut other_root = file("home/u/.npmrcx");
    other_root.root = 1;
    let got = rules_of(
        &f,
        vec![
            file("home/u/.anything"),
            file("home/u/.aws/config"),
            with_kind(file("home/u/.hushlogin"), ChangeKind::Deleted),
            file("home/u/bin/ls"),
            link("home", "h"),
            link("home/u", "h"),
            file("home/u/projects/app/src/main.rs"),
            file("home/u/notes.txt"),
            file("home/u/projects/.env.example"),
            file("home/v/.anything"),
            other_root,
        ],
    );
    assert_eq!(
        got,
        [
            Some("home_startup"),
            Some("home_startup"),
            Some("home_startup"),
            Some("home_startup"),
            Some("symlink_prefix"),
            Some("symlink_prefix"),
            None,
            None,
            None,
            None,
            None,
        ]
    );
    // The root as the home.
    let mut g = CommitFilter::new();
    g.home(0, "");
    let got = rules_of(
        &g,
        vec![
            file(".x"),
            file("bin/tool"),
            file("notes.txt"),
            file("a/.x"),
        ],
    );
    assert_eq!(
        got,
        [Some("home_startup"), Some("home_startup"), None, None]
    );
}

#[test]
fn a_created_git_in_another_case_does_not_make_the_existing_one_new() {
    let f = CommitFilter::new();
    let got = rules_of(
        &f,
        vec![dir(".GIT"), file(".GIT/config"), file(".git/objects/ab/cd")],
    );
    assert_eq!(
        got,
        [Some("new_repository"), Some("new_repository"), None],
        "the existing `.git` keeps its own rules"
    );
    // The name rules still fold case: the existing `.git`'s config.
    refused(file(".git/config"), "git_internal");
}
