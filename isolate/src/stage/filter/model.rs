//! Property tests of the commit filter against an independent model.
//!
//! The model is written differently from the filter: a path is one
//! lowercased byte string `/a/b/c/`, each rule is a predicate in a table,
//! tried in order, and a name refused "at any depth, with everything below
//! it" is a substring `/name/` of that string. It models the policy
//! patterns it generates (`**/<name>`, exact case) by the same substring
//! test on the unfolded string.

#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use proptest::prelude::*;

use super::super::{Change, ChangeKind, ChangeSet, Node, NodeKind};
use super::{CommitFilter, FilterVerdict};

/// Path components the generator draws from.
const POOL: &[&[u8]] = &[
    b".git",
    b".GIT",
    b"hooks",
    b"objects",
    b"info",
    b"alternates",
    b"refs",
    b"modules",
    b"config",
    b"HEAD",
    b"MERGE_MSG",
    b".ssh",
    b".vscode",
    b".config",
    b"git",
    b".bashrc",
    b"src",
    b"bashrc.rs",
    b"deploy",
    b".palisade",
    "d\u{e9}j\u{e0}".as_bytes(),
    b"\xff\xfe",
];

/// Policy names the generator draws from: `**/<name>` for a single name,
/// `<a>/<b>/**` for two (anchored at the root).
const POLICY_NAMES: &[&[u8]] = &[
    b"deploy",
    b"src",
    b"config",
    b"HEAD",
    b"hooks",
    b"deploy/hooks",
    b"src/config",
];

/// Symlink targets the generator draws from.
const TARGETS: &[&str] = &[
    "x",
    ".git/objects/info/alternates",
    "../.git/modules/x",
    ".config/git/config",
    "../x",
    "../../..",
    "/etc/passwd",
    ".git/hooks",
    "../.git/config",
    "./src/../.ssh/k",
    ".git/objects",
    "deploy/run",
    "a/b/../../.vscode",
    "sub/up/..",
    "..",
    "../../x",
    "./../.config",
    "",
];

/// Names refused at any depth, with everything below, lowercased.
const ANY_DEPTH: &[(&str, &str)] = &[
    ("shell_startup", "/.bashrc/"),
    ("shell_startup", "/.bash_profile/"),
    ("shell_startup", "/.bash_login/"),
    ("shell_startup", "/.bash_logout/"),
    ("shell_startup", "/.bash_aliases/"),
    ("shell_startup", "/.profile/"),
    ("shell_startup", "/.zshrc/"),
    ("shell_startup", "/.zshenv/"),
    ("shell_startup", "/.zprofile/"),
    ("shell_startup", "/.zlogin/"),
    ("shell_startup", "/.zlogout/"),
    ("shell_startup", "/.cshrc/"),
    ("shell_startup", "/.tcshrc/"),
    ("shell_startup", "/.kshrc/"),
    ("shell_startup", "/.inputrc/"),
    ("shell_startup", "/.pam_environment/"),
    ("shell_startup", "/.xprofile/"),
    ("shell_startup", "/.xinitrc/"),
    ("shell_startup", "/.xsessionrc/"),
    ("shell_startup", "/.bashrc.d/"),
    ("shell_startup", "/.config/fish/"),
    ("shell_startup", "/.config/environment.d/"),
    ("shell_startup", "/.config/autostart/"),
    ("shell_startup", "/.config/systemd/"),
    ("shell_startup", "/.local/bin/"),
    ("shell_startup", "/.cargo/bin/"),
    ("startup_config", "/.vimrc/"),
    ("startup_config", "/.gvimrc/"),
    ("startup_config", "/.exrc/"),
    ("startup_config", "/.vim/"),
    ("startup_config", "/.config/nvim/"),
    ("startup_config", "/.emacs/"),
    ("startup_config", "/.emacs.d/"),
    ("startup_config", "/.config/emacs/"),
    ("startup_config", "/.tmux.conf/"),
    ("startup_config", "/.config/tmux/"),
    ("startup_config", "/.screenrc/"),
    ("startup_config", "/.gdbinit/"),
    ("startup_config", "/.config/gdb/"),
    ("startup_config", "/.lldbinit/"),
    ("startup_config", "/.psqlrc/"),
    ("startup_config", "/.mailcap/"),
    ("startup_config", "/.config/gh/"),
    ("startup_config", "/.docker/"),
    ("startup_config", "/.local/lib/"),
    ("startup_config", "/.config/pip/"),
    ("ssh", "/.ssh/"),
    ("git_config", "/.gitconfig/"),
    ("git_config", "/.config/git/"),
    ("tool_config", "/.vscode/"),
    ("tool_config", "/.idea/"),
    ("tool_config", "/.zed/"),
    ("tool_config", "/.devcontainer/"),
    ("tool_config", "/.claude/"),
    ("tool_config", "/.claude.json/"),
    ("tool_config", "/.mcp.json/"),
    ("tool_config", "/.cursor/"),
    ("tool_config", "/.codex/"),
    ("tool_config", "/.agents/"),
    ("tool_config", "/.opencode/"),
    ("tool_config", "/opencode.json/"),
    ("tool_config", "/opencode.jsonc/"),
    ("tool_config", "/.config/opencode/"),
    ("tool_config", "/.gemini/"),
    ("tool_config", "/.pi/"),
    ("tool_config", "/.envrc/"),
    ("tool_config", "/.direnv/"),
    ("tool_config", "/.pre-commit-config.yaml/"),
    ("build_config", "/.cargo/config/"),
    ("build_config", "/.cargo/config.toml/"),
    ("build_config", "/.npmrc/"),
    ("build_config", "/.yarnrc/"),
    ("build_config", "/.yarnrc.yml/"),
    ("build_config", "/.pnpmfile.cjs/"),
    ("build_config", "/mise.toml/"),
    ("build_config", "/.mise.toml/"),
    ("build_config", "/mise.local.toml/"),
    ("build_config", "/.mise.local.toml/"),
    ("build_config", "/.mise/"),
    ("build_config", "/.config/mise/"),
];

fn has(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// What the model judges a path as.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum As {
    /// A change's node: is it a directory, and did the worker make it
    /// (created, moved there, or replaced a non-directory)?
    Node { dir: bool, made: bool },
    /// A symlink's target.
    Target,
}

/// The model's state: the `/`-wrapped text (exact bytes) of each created
/// `.git` directory per root, and the policy names.
struct Model {
    made_git: Vec<(usize, Vec<u8>)>,
    /// The set's listed git directories (wrapped, lowercased), and those
    /// of them the worker made (wrapped, exact).
    git_dirs: Vec<(usize, Vec<u8>)>,
    made_listed: Vec<(usize, Vec<u8>)>,
    policy: Vec<Vec<u8>>,
}

fn wrap(comps: &[Vec<u8>], fold: bool) -> Vec<u8> {
    let mut s = b"/".to_vec();
    for c in comps {
        let c = if fold {
            c.to_ascii_lowercase()
        } else {
            c.clone()
        };
        s.extend_from_slice(&c);
        s.push(b'/');
    }
    s
}

/// The judgement of one `.git` occurrence: `rest` is the text after
/// `/.git/` (lowercased, `/`-terminated, empty for the entry itself).
fn git_rule(rest: &[u8], as_: As) -> Option<&'static str> {
    if rest.is_empty() {
        return Some(match as_ {
            As::Target => "git_internal",
            As::Node { dir: false, .. } => "git_pointer",
            As::Node {
                dir: true,
                made: true,
                ..
            } => "new_repository",
            As::Node { dir: true, .. } => "git_internal",
        });
    }
    let tree = |t: &[u8]| rest.starts_with(t);
    if tree(b"modules/") {
        return Some("git_modules");
    }
    if tree(b"objects/info/alternates/") || tree(b"objects/info/http-alternates/") {
        return Some("git_internal");
    }
    if tree(b"objects/") || tree(b"refs/") || tree(b"logs/") {
        return None;
    }
    let single = [
        &b"packed-refs/"[..],
        b"head/",
        b"index/",
        b"orig_head/",
        b"fetch_head/",
        b"commit_editmsg/",
        b"shallow/",
    ];
    if single.contains(&rest) {
        return None;
    }
    // `MERGE_*`: one component.
    if rest.starts_with(b"merge_") && rest.iter().filter(|b| **b == b'/').count() == 1 {
        return None;
    }
    Some("git_internal")
}

impl Model {
    fn path_rule(&self, root: usize, comps: &[Vec<u8>], as_: As) -> Option<&'static str> {
        let low = wrap(comps, true);
        let raw = wrap(comps, false);
        if has(&low, b"/.palisade/") {
            return Some("palisade");
        }
        // Every `/.git/` occurrence, left to right.
        let mut at = 0;
        while let Some(off) = low
            .get(at..)
            .and_then(|s| s.windows(6).position(|w| w == b"/.git/"))
        {
            let end = at + off + 6;
            // Created `.git` directories are known by their exact bytes.
            let upto = &raw[..end];
            if self.made_git.iter().any(|(r, g)| *r == root && g == upto) {
                return Some("new_repository");
            }
            if let Some(r) = git_rule(&low[end..], as_) {
                return Some(r);
            }
            at = end - 1;
        }
        // Every listed git directory at or above the path, shallowest
        // first, as a `/.git/`.
        let mut listed: Vec<&Vec<u8>> = self
            .git_dirs
            .iter()
            .filter(|(r, g)| *r == root && low.starts_with(g))
            .map(|(_, g)| g)
            .collect();
        listed.sort_by_key(|g| g.len());
        for g in listed {
            // Those the worker made are known by their exact bytes too.
            let exact = &raw[..g.len()];
            if self
                .made_listed
                .iter()
                .any(|(r, m)| *r == root && m == exact)
            {
                return Some("new_repository");
            }
            if let Some(r) = git_rule(&low[g.len()..], as_) {
                return Some(r);
            }
        }
        // `/head/` before any `/.git/`.
        let before_git = low
            .windows(6)
            .position(|w| w == b"/.git/")
            .map_or(&low[..], |at| &low[..at + 1]);
        if has(before_git, b"/head/") {
            return Some("bare_repository");
        }
        for (rule, needle) in ANY_DEPTH {
            if has(&low, needle.as_bytes()) {
                return Some(rule);
            }
        }
        for name in &self.policy {
            let mut needle = b"/".to_vec();
            needle.extend_from_slice(name);
            needle.push(b'/');
            let anchored = name.contains(&b'/');
            // `a/b/**`: strictly below `/a/b/`; `**/name`: anywhere.
            let hit = if anchored {
                raw.starts_with(&needle) && raw.len() > needle.len()
            } else {
                has(&raw, &needle)
            };
            if hit {
                return Some("policy_refused");
            }
        }
        None
    }

    /// Where a symlink may not be: inside a `.git`, or where its path ends
    /// in the first name of a multi-component refused name.
    fn link_place(&self, comps: &[Vec<u8>]) -> Option<&'static str> {
        let low = wrap(comps, true);
        let last_at = low[..low.len() - 1]
            .iter()
            .rposition(|b| *b == b'/')
            .unwrap();
        if has(&low[..=last_at], b"/.git/") {
            return Some("symlink_prefix");
        }
        let last = &low[last_at..];
        let opens = ANY_DEPTH.iter().any(|(_, needle)| {
            let inner = &needle.as_bytes()[1..needle.len() - 1];
            inner.contains(&b'/') && needle.as_bytes().starts_with(last)
        });
        // `a/b/**` has the strict prefixes `a` and `a/b`, from the root.
        let raw = wrap(comps, false);
        let anchored = self.policy.iter().filter(|n| n.contains(&b'/')).any(|n| {
            let first = n.split(|b| *b == b'/').next().unwrap();
            raw == [b"/", first, b"/"].concat() || raw == [b"/", &n[..], b"/"].concat()
        });
        (opens || anchored).then_some("symlink_prefix")
    }

    fn judge(&self, c: &Change) -> Option<&'static str> {
        let comps = split(&c.path);
        let dir = c.node.kind == NodeKind::Dir;
        let gone = c.kind == ChangeKind::Deleted;
        let made = dir
            && matches!(
                c.kind,
                ChangeKind::Created | ChangeKind::Modified | ChangeKind::Renamed { .. }
            );
        if let Some(r) = self.path_rule(c.root, &comps, As::Node { dir, made }) {
            return Some(r);
        }
        if let ChangeKind::Renamed { from } = &c.kind {
            let old = As::Node { dir, made: false };
            if let Some(r) = self.path_rule(c.root, &split(from), old) {
                return Some(r);
            }
        }
        if gone {
            return None;
        }
        let n = &c.node;
        let kinds: [(&'static str, bool); 7] = [
            ("setuid", n.mode & 0o4000 != 0),
            ("setuid", !dir && n.mode & 0o2000 != 0),
            ("file_caps", n.file_caps),
            (
                "device",
                matches!(n.kind, NodeKind::CharDevice | NodeKind::BlockDevice),
            ),
            ("socket", n.kind == NodeKind::Socket),
            ("fifo", n.kind == NodeKind::Fifo),
            ("symlink", n.kind == NodeKind::Symlink),
        ];
        let (rule, _) = kinds.iter().find(|(_, hit)| *hit)?;
        if *rule != "symlink" {
            return Some(rule);
        }
        let target = n.link_target.as_ref()?.as_os_str().as_bytes();
        if target.is_empty() || target.starts_with(b"/") {
            return Some("symlink_escape");
        }
        // The target's names without `.`: a run of `..`, then names only.
        let parts: Vec<&[u8]> = target
            .split(|b| *b == b'/')
            .filter(|p| !p.is_empty() && *p != b".")
            .collect();
        let ups = parts.iter().take_while(|p| **p == b"..").count();
        let rest = &parts[ups..];
        let depth = comps.len() - 1;
        if rest.contains(&&b".."[..]) || ups > depth {
            return Some("symlink_escape");
        }
        if let Some(r) = self.link_place(&comps) {
            return Some(r);
        }
        let mut stack: Vec<Vec<u8>> = comps[..depth - ups].to_vec();
        stack.extend(rest.iter().map(|p| p.to_vec()));
        if stack.is_empty() {
            return None;
        }
        self.path_rule(c.root, &stack, As::Target)
            .map(|_| "symlink_to_refused")
    }

    fn check(&self, changes: &[Change]) -> Vec<Option<&'static str>> {
        let first: Vec<Option<&'static str>> = changes.iter().map(|c| self.judge(c)).collect();
        changes
            .iter()
            .zip(&first)
            .map(|(c, v)| {
                if v.is_some() || c.kind != ChangeKind::Deleted || c.node.kind != NodeKind::Dir {
                    return *v;
                }
                let mine = wrap(&split(&c.path), false);
                let below = changes.iter().zip(&first).any(|(o, ov)| {
                    ov.is_some()
                        && o.root == c.root
                        && wrap(&split(&o.path), false).starts_with(&mine)
                        && o.path != c.path
                });
                if below { Some("refused_below") } else { None }
            })
            .collect()
    }
}

fn split(p: &std::path::Path) -> Vec<Vec<u8>> {
    p.as_os_str()
        .as_bytes()
        .split(|b| *b == b'/')
        .map(<[u8]>::to_vec)
        .collect()
}

fn model_of(set: &ChangeSet, policy: &[Vec<u8>]) -> Model {
    let changes = &set.changes;
    let made_dir = |root: usize, p: &std::path::Path| {
        changes.iter().any(|c| {
            c.root == root
                && c.path == p
                && c.node.kind == NodeKind::Dir
                && matches!(
                    c.kind,
                    ChangeKind::Created | ChangeKind::Modified | ChangeKind::Renamed { .. }
                )
        })
    };
    let wrap_dir = |p: &std::path::Path| {
        if p.as_os_str().is_empty() {
            b"/".to_vec()
        } else {
            wrap(&split(p), true)
        }
    };
    // One the worker made outside every `.git` is not one on the host (its
    // `HEAD` is refused): left out.
    let in_git = |p: &std::path::Path| has(&wrap_dir(p), b"/.git/");
    let git_dirs = set
        .git_dirs
        .iter()
        .filter(|(r, p)| !made_dir(*r, p) || in_git(p))
        .map(|(r, p)| (*r, wrap_dir(p)))
        .collect();
    let made_listed = set
        .git_dirs
        .iter()
        .filter(|(r, p)| made_dir(*r, p) && in_git(p))
        .map(|(r, p)| (*r, wrap(&split(p), false)))
        .collect();
    let made_git = changes
        .iter()
        .filter(|c| {
            c.node.kind == NodeKind::Dir
                && split(&c.path)
                    .last()
                    .is_some_and(|n| n.eq_ignore_ascii_case(b".git"))
                && matches!(
                    c.kind,
                    ChangeKind::Created | ChangeKind::Modified | ChangeKind::Renamed { .. }
                )
        })
        .map(|c| (c.root, wrap(&split(&c.path), false)))
        .collect();
    Model {
        made_git,
        git_dirs,
        made_listed,
        policy: policy.to_vec(),
    }
}

/// Components found inside a `.git` directory (and a few that are not).
const GIT_POOL: &[&[u8]] = &[
    b"objects",
    b"info",
    b"alternates",
    b"http-alternates",
    b"hooks",
    b"refs",
    b"logs",
    b"modules",
    b"config",
    b"HEAD",
    b"index",
    b"MERGE_MSG",
    b"packed-refs",
    b"shallow",
    b"sequencer",
    b".git",
    b"ab",
];

/// What follows a `.git` (before more components from `GIT_POOL`).
const GIT_TAILS: &[&[u8]] = &[
    b"",
    b"objects/info/alternates",
    b"objects/info/http-alternates",
    b"objects/info/packs",
    b"objects/ab",
    b"OBJECTS/Info/Alternates",
    b"hooks/pre-commit",
    b"modules/sub/config",
    b"refs/heads",
    b"logs/HEAD",
    b"config",
    b"commondir",
    b"HEAD",
    b"head",
    b"MERGE_MSG",
    b"MERGE_",
    b"index",
    b"packed-refs",
    b"shallow",
    b"sequencer/todo",
    b"info/exclude",
    b"refs/.git/hooks",
];

/// Spellings of `.git`.
const GIT_NAMES: &[&[u8]] = &[b".git", b".git", b".Git"];

/// Runs of components the built-in names are made of.
const NAME_POOL: &[&[u8]] = &[
    b".config/git",
    b".config/fish",
    b".local/bin",
    b".local",
    b".cargo/bin",
    b".claude",
    b".mcp.json",
    b".envrc",
    b".npmrc",
    b".cargo",
    b"config.toml",
    b"mise.toml",
    b".pi",
    b".gitconfig",
    b".profile",
    b"opencode.json",
];

/// Paths at, below and beside the prefixes of `deploy/hooks/**` and
/// `src/config/**`.
const ANCHORED_PATHS: &[&[u8]] = &[
    b"deploy",
    b"deploy/hooks",
    b"deploy/hooks/x",
    b"deploy/other",
    b"src",
    b"src/config",
    b"src/config/a/b",
    b"x/deploy",
    b"x/deploy/hooks",
];

fn join(parts: &[&[u8]]) -> PathBuf {
    let mut bytes = Vec::new();
    for (i, c) in parts.iter().enumerate() {
        if i > 0 {
            bytes.push(b'/');
        }
        bytes.extend_from_slice(c);
    }
    PathBuf::from(OsStr::from_bytes(&bytes))
}

/// Paths from the pool, paths into a `.git` directory, and paths through
/// a built-in name, so that every rule is reached often.
fn path_strategy() -> impl Strategy<Value = PathBuf> {
    let plain = prop::collection::vec(prop::sample::select(POOL), 1..5);
    let git = (
        prop::collection::vec(prop::sample::select(POOL), 0..2),
        prop::sample::select(GIT_NAMES),
        prop::sample::select(GIT_TAILS),
        prop::collection::vec(prop::sample::select(GIT_POOL), 0..3),
        any::<bool>(),
    )
        .prop_map(|(mut pre, g, tail, rest, deeper)| {
            pre.push(g);
            if !tail.is_empty() {
                pre.push(tail);
            }
            if deeper {
                pre.extend(rest);
            }
            pre
        });
    let named = (
        prop::collection::vec(prop::sample::select(POOL), 0..2),
        prop::sample::select(NAME_POOL),
        prop::collection::vec(prop::sample::select(POOL), 0..2),
    )
        .prop_map(|(mut pre, n, rest)| {
            pre.push(n);
            pre.extend(rest);
            pre
        });
    // At and around the anchored policy patterns' prefixes, from the root.
    let anchored = prop::sample::select(ANCHORED_PATHS).prop_map(|p| vec![p]);
    prop_oneof![plain, git, named, anchored].prop_map(|parts| join(&parts))
}

fn change_strategy() -> impl Strategy<Value = Change> {
    let kind = prop_oneof![
        Just(NodeKind::File),
        Just(NodeKind::File),
        Just(NodeKind::Dir),
        Just(NodeKind::Dir),
        Just(NodeKind::Symlink),
        Just(NodeKind::Symlink),
        Just(NodeKind::CharDevice),
        Just(NodeKind::BlockDevice),
        Just(NodeKind::Fifo),
        Just(NodeKind::Socket),
    ];
    let mode = prop::sample::select(&[0o644u32, 0o755, 0o4755, 0o2755, 0o2775, 0o1777, 0o600][..]);
    (
        0usize..2,
        path_strategy(),
        0u8..5,
        path_strategy(),
        kind,
        mode,
        prop::bool::weighted(0.1),
        prop::sample::select(TARGETS),
    )
        .prop_map(|(root, path, how, from, kind, mode, caps, target)| {
            let kind_of = match how {
                0 => ChangeKind::Created,
                1 => ChangeKind::Modified,
                2 => ChangeKind::ModeChanged,
                3 => ChangeKind::Deleted,
                _ => ChangeKind::Renamed { from },
            };
            Change {
                root,
                path,
                kind: kind_of,
                node: Node {
                    kind,
                    mode,
                    size: 0,
                    link_target: (kind == NodeKind::Symlink).then(|| PathBuf::from(target)),
                    file_caps: caps,
                },
            }
        })
}

/// A change set where a `.git` path often has its `.git` directory
/// created in the same set, so the new-repository context is exercised.
fn set_strategy() -> impl Strategy<Value = Vec<Change>> {
    (
        prop::collection::vec(change_strategy(), 1..10),
        prop::collection::vec(any::<bool>(), 10),
    )
        .prop_map(|(mut changes, adds)| {
            let mut extra = Vec::new();
            for (c, add) in changes.iter().zip(adds) {
                let comps = split(&c.path);
                let Some(i) = comps.iter().position(|p| p.eq_ignore_ascii_case(b".git")) else {
                    continue;
                };
                if add && i + 1 < comps.len() {
                    let git = comps[..=i].join(&b'/');
                    extra.push(Change {
                        root: c.root,
                        path: PathBuf::from(OsStr::from_bytes(&git)),
                        kind: ChangeKind::Created,
                        node: Node {
                            kind: NodeKind::Dir,
                            mode: 0o755,
                            size: 0,
                            link_target: None,
                            file_caps: false,
                        },
                    });
                }
            }
            changes.extend(extra);
            changes
        })
}

fn policy_strategy() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::sample::select(POLICY_NAMES), 0..3)
        .prop_map(|v| v.into_iter().map(<[u8]>::to_vec).collect())
}

fn filter_with(policy: &[Vec<u8>]) -> CommitFilter {
    let mut f = CommitFilter::new();
    for name in policy {
        let name = String::from_utf8_lossy(name);
        let pattern = if name.contains('/') {
            format!("{name}/**")
        } else {
            format!("**/{name}")
        };
        f.refuse(&pattern).unwrap();
    }
    f
}

fn rules(v: &[FilterVerdict]) -> Vec<Option<&'static str>> {
    v.iter()
        .map(|v| match v {
            FilterVerdict::Commit => None,
            FilterVerdict::Refuse(r) => Some(r.rule),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// The filter and the model agree on every change, rule for rule.
    #[test]
    fn the_filter_agrees_with_the_model(
        changes in set_strategy(),
        policy in policy_strategy(),
        picks in prop::collection::vec((any::<usize>(), any::<usize>()), 0..3),
    ) {
        // Listed git directories: a prefix (the root, an ancestor or the
        // path itself) of a change's path.
        let git_dirs = picks
            .iter()
            .map(|(i, d)| {
                let c = &changes[i % changes.len()];
                let comps = split(&c.path);
                let keep = d % (comps.len() + 1);
                (c.root, PathBuf::from(OsStr::from_bytes(&comps[..keep].join(&b'/'))))
            })
            .collect();
        let set = ChangeSet { changes: changes.clone(), git_dirs };
        let got = rules(&filter_with(&policy).check(&set));
        let want = model_of(&set, &policy).check(&changes);
        for ((c, g), w) in changes.iter().zip(&got).zip(&want) {
            prop_assert_eq!(g, w, "change {:?}", c);
        }
        prop_assert_eq!(got.len(), changes.len());
    }

    /// Adding policy patterns never turns a refusal into a commit.
    #[test]
    fn policy_patterns_only_add_refusals(
        changes in set_strategy(),
        policy in policy_strategy(),
        more in policy_strategy(),
    ) {
        let set = ChangeSet { changes, ..ChangeSet::default() };
        let before = filter_with(&policy).check(&set);
        let wider: Vec<Vec<u8>> = policy.iter().chain(&more).cloned().collect();
        let after = filter_with(&wider).check(&set);
        for ((c, b), a) in set.changes.iter().zip(&before).zip(&after) {
            if matches!(b, FilterVerdict::Refuse(_)) {
                prop_assert!(matches!(a, FilterVerdict::Refuse(_)), "{:?}: {:?} became {:?}", c, b, a);
            }
        }
    }

    /// A change's verdict does not depend on the order of the set.
    #[test]
    fn verdicts_do_not_depend_on_order(changes in set_strategy(), seed in any::<u64>()) {
        let f = CommitFilter::new();
        let set = ChangeSet { changes, ..ChangeSet::default() };
        let before = f.check(&set);
        // A permutation from the seed (Fisher-Yates over a small LCG).
        let mut order: Vec<usize> = (0..set.changes.len()).collect();
        let mut s = seed | 1;
        for i in (1..order.len()).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let j = usize::try_from(s >> 33).unwrap() % (i + 1);
            order.swap(i, j);
        }
        let shuffled = ChangeSet {
            changes: order.iter().map(|&i| set.changes[i].clone()).collect(),
            ..ChangeSet::default()
        };
        let after = f.check(&shuffled);
        for (k, &i) in order.iter().enumerate() {
            prop_assert_eq!(&after[k], &before[i]);
        }
    }
}
