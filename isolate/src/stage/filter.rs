//! The commit filter: which changes of a stage may reach the host tree.
//!
//! Pure: it judges the [`ChangeSet`] as given and never looks at the host
//! or the stage. A change is refused when its path (either end of a
//! rename) lies at or below a refused path, when the node the worker
//! leaves is of a refused kind, or when it is a symlink that leaves its
//! root or leads into a refused path. The built-in list ([`CommitFilter::rules`])
//! cannot be shrunk; a policy only adds patterns ([`CommitFilter::refuse`])
//! and exact paths ([`CommitFilter::refuse_exact`]).
//!
//! Built-in names match ASCII case-insensitively, so a root on a
//! case-folding filesystem cannot hide `.git/hooks` as `.GIT/Hooks`;
//! policy patterns match the bytes as written. Matching is on the path's
//! bytes, never on a lossy UTF-8 rendering.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::{Change, ChangeKind, ChangeSet, NodeKind};

/// Why the filter refused a change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refusal {
    /// The rule's stable snake_case code (`git_internal`, `setuid`, …).
    pub rule: &'static str,
    /// The pattern or fact that matched, for people.
    pub detail: String,
}

/// The filter's answer for one change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FilterVerdict {
    /// May be applied.
    Commit,
    /// Must not reach the host.
    Refuse(Refusal),
}

/// A pattern [`CommitFilter::refuse`] could not use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("filter_pattern: `{pattern}`: {reason}")]
#[non_exhaustive]
pub struct FilterError {
    /// The pattern as given.
    pub pattern: String,
    /// Why it was refused.
    pub reason: String,
}

/// One row of the built-in list, as data: what [`CommitFilter::rules`]
/// returns for `docs/sandbox.md`, `palisade probe` and `palisade policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BuiltinRule {
    /// The stable code a refusal by this row carries.
    pub rule: &'static str,
    /// The paths or kinds it refuses, as people write them.
    pub paths: &'static str,
    /// Why a host program would trust or run what lies there.
    pub why: &'static str,
}

/// The built-in list, in the order the filter applies it (the first row
/// that matches names the refusal; policy additions come after the path
/// rows, before the kinds, and `refused_below` is judged last).
const RULES: &[BuiltinRule] = &[
    BuiltinRule {
        rule: "invalid_path",
        paths: "a change path that is empty, absolute or has an empty, `.` or `..` component",
        why: "the scan never produces one; the filter refuses what it cannot judge",
    },
    BuiltinRule {
        rule: "palisade",
        paths: "`.palisade/**`",
        why: "palisade's own state and configuration",
    },
    BuiltinRule {
        rule: "new_repository",
        paths: "a `.git` directory the worker created (or put in place of a `.git` file), and everything below it",
        why: "a new repository (`git init` in a directory that was not one, a nested repository recorded in the top index) brings its own config and hooks, which host git runs",
    },
    BuiltinRule {
        rule: "git_pointer",
        paths: "a `.git` that is a file or symlink, created, modified or deleted",
        why: "a gitdir pointer sends host git to a config and hooks of the worker's choosing",
    },
    BuiltinRule {
        rule: "git_modules",
        paths: "`.git/modules/**`",
        why: "a submodule's gitdir is named by `.gitmodules`, so its objects cannot be told from a planted `config` or `hooks`",
    },
    BuiltinRule {
        rule: "git_internal",
        paths: "inside every `.git`: anything but `objects/**` (except `objects/info/alternates`, `objects/info/http-alternates`), `refs/**`, `logs/**`, `packed-refs`, `HEAD`, `index`, `ORIG_HEAD`, `FETCH_HEAD`, `COMMIT_EDITMSG`, `MERGE_*`, `shallow`",
        why: "`config`, `hooks/**`, `commondir`, `info/**`, `worktrees/**`, `rebase-merge/**` and `sequencer/**` (their todo lists run `exec` lines) are run or trusted by host git",
    },
    BuiltinRule {
        rule: "bare_repository",
        paths: "a `HEAD` outside every `.git`, at any depth",
        why: "`HEAD` with `objects` and `refs` beside it makes a directory a bare repository, whose `config` and `hooks` host git runs when it is started there",
    },
    BuiltinRule {
        rule: "shell_startup",
        paths: "`.bashrc`, `.bash_profile`, `.bash_login`, `.bash_logout`, `.bash_aliases`, `.profile`, `.zshrc`, `.zshenv`, `.zprofile`, `.zlogin`, `.zlogout`, `.cshrc`, `.tcshrc`, `.kshrc`, `.inputrc`, `.pam_environment`, `.xprofile`, `.xinitrc`, `.xsessionrc`, `.bashrc.d/**`, `.config/fish/**`, `.config/environment.d/**`, `.config/autostart/**`, `.config/systemd/**`, `.local/bin/**`, `.cargo/bin/**`",
        why: "shells, sessions and the user's systemd read them at login or put them on `PATH`",
    },
    BuiltinRule {
        rule: "startup_config",
        paths: "`.vimrc`, `.gvimrc`, `.exrc`, `.vim/**`, `.config/nvim/**`, `.emacs`, `.emacs.d/**`, `.config/emacs/**`, `.tmux.conf`, `.config/tmux/**`, `.screenrc`, `.gdbinit`, `.config/gdb/**`, `.lldbinit`, `.psqlrc`, `.mailcap`, `.config/gh/**`, `.docker/**`, `.local/lib/**`, `.config/pip/**`",
        why: "editors, terminal multiplexers, debuggers, `psql`, `gh` and `docker` run commands or helpers these name when they start; `python3` runs the `.pth` files of the user site-packages (`.local/lib/python*/site-packages`) on every start, and pip the helpers its config names",
    },
    BuiltinRule {
        rule: "ssh",
        paths: "`.ssh/**`",
        why: "`authorized_keys`, `config` (`ProxyCommand`, `LocalCommand`) and `rc` are trusted or run by ssh",
    },
    BuiltinRule {
        rule: "git_config",
        paths: "`.gitconfig`, `.config/git/**`",
        why: "user-level git config (`core.fsmonitor`, `core.hooksPath`, aliases) runs commands in every repository",
    },
    BuiltinRule {
        rule: "tool_config",
        paths: "`.vscode/**`, `.idea/**`, `.zed/**`, `.devcontainer/**`, `.claude/**`, `.claude.json`, `.mcp.json`, `.cursor/**`, `.codex/**`, `.agents/**`, `.opencode/**`, `opencode.json`, `opencode.jsonc`, `.config/opencode/**`, `.gemini/**`, `.pi/**`, `.envrc`, `.direnv/**`, `.pre-commit-config.yaml`",
        why: "editors, IDEs, agents, direnv and pre-commit run tasks, hooks and MCP servers named there",
    },
    BuiltinRule {
        rule: "build_config",
        paths: "`.cargo/config`, `.cargo/config.toml`, `.npmrc`, `.yarnrc`, `.yarnrc.yml`, `.pnpmfile.cjs`, `mise.toml`, `.mise.toml`, `mise.local.toml`, `.mise.local.toml`, `.mise/**`, `.config/mise/**`",
        why: "cargo (`runner`, `rustc-wrapper`), npm (`script-shell`), yarn (`yarnPath`), pnpm (its hooks file) and mise (hooks on `cd`) run the helpers these name on any invocation, before any of the project's own build code",
    },
    BuiltinRule {
        rule: "home_startup",
        paths: "in a home the CLI marks (the invoking user's `$HOME`, `/root` as root, when a writable root is or holds it): every dot entry directly in it, with everything below it, and `bin/**`",
        why: "countless tools read a `~/.xxxrc` or a `~/.xxx/` config when they start, and `~/bin` is on `PATH` in Debian's default `.profile`",
    },
    BuiltinRule {
        rule: "setuid",
        paths: "a setuid bit on anything, a setgid bit on anything but a directory",
        why: "a set-id file runs with its owner's or group's rights once on the host",
    },
    BuiltinRule {
        rule: "file_caps",
        paths: "a file with capabilities (`security.capability`)",
        why: "it runs with those capabilities on the host",
    },
    BuiltinRule {
        rule: "device",
        paths: "character and block devices",
        why: "a device node on the host opens the device",
    },
    BuiltinRule {
        rule: "socket",
        paths: "Unix sockets",
        why: "a host program may connect to it and trust what answers",
    },
    BuiltinRule {
        rule: "fifo",
        paths: "named pipes",
        why: "a host program reading it blocks or reads what a writer feeds it",
    },
    BuiltinRule {
        rule: "symlink_escape",
        paths: "a symlink whose target is absolute, has a `..` after a name (`a/../b`, `sub/up/..`), or more leading `..` than the link has directories above it",
        why: "a host program following it reads or writes outside the root; a `..` after a name may climb out of a symlink the worker also left (`sub/up -> ..`), so only leading `..`, from the link's own real directory, can be judged lexically",
    },
    BuiltinRule {
        rule: "symlink_prefix",
        paths: "a symlink at a strict prefix of a multi-component refused name (`.config`, `.local`, `.cargo`, at any depth), of a policy pattern (`deploy`, `deploy/hooks` for `deploy/hooks/**`) or of an exact refused path, at a home or a prefix of it, and any symlink inside a `.git`",
        why: "the refused path's payload would land under an innocent name (`cfg/git/config` with `.config -> cfg`), which host programs then read through the link",
    },
    BuiltinRule {
        rule: "symlink_to_refused",
        paths: "a symlink whose target, resolved lexically from its own directory, lies at or below a refused path (`hooks -> .git/hooks`)",
        why: "committing the link writes nothing there, but a host program writing through an innocent-looking name would",
    },
    BuiltinRule {
        rule: "refused_below",
        paths: "a deleted directory that holds a refused change",
        why: "the refused change stays, so the directory must stay too",
    },
];

/// Names refused at any depth, with everything below them, as component
/// sequences (ASCII case-insensitive).
const NAMES: &[(&str, &[&str])] = &[
    ("shell_startup", &[".bashrc"]),
    ("shell_startup", &[".bash_profile"]),
    ("shell_startup", &[".bash_login"]),
    ("shell_startup", &[".bash_logout"]),
    ("shell_startup", &[".bash_aliases"]),
    ("shell_startup", &[".profile"]),
    ("shell_startup", &[".zshrc"]),
    ("shell_startup", &[".zshenv"]),
    ("shell_startup", &[".zprofile"]),
    ("shell_startup", &[".zlogin"]),
    ("shell_startup", &[".zlogout"]),
    ("shell_startup", &[".cshrc"]),
    ("shell_startup", &[".tcshrc"]),
    ("shell_startup", &[".kshrc"]),
    ("shell_startup", &[".inputrc"]),
    ("shell_startup", &[".pam_environment"]),
    ("shell_startup", &[".xprofile"]),
    ("shell_startup", &[".xinitrc"]),
    ("shell_startup", &[".xsessionrc"]),
    ("shell_startup", &[".bashrc.d"]),
    ("shell_startup", &[".config", "fish"]),
    ("shell_startup", &[".config", "environment.d"]),
    ("shell_startup", &[".config", "autostart"]),
    ("shell_startup", &[".config", "systemd"]),
    ("shell_startup", &[".local", "bin"]),
    ("shell_startup", &[".cargo", "bin"]),
    ("startup_config", &[".vimrc"]),
    ("startup_config", &[".gvimrc"]),
    ("startup_config", &[".exrc"]),
    ("startup_config", &[".vim"]),
    ("startup_config", &[".config", "nvim"]),
    ("startup_config", &[".emacs"]),
    ("startup_config", &[".emacs.d"]),
    ("startup_config", &[".config", "emacs"]),
    ("startup_config", &[".tmux.conf"]),
    ("startup_config", &[".config", "tmux"]),
    ("startup_config", &[".screenrc"]),
    ("startup_config", &[".gdbinit"]),
    ("startup_config", &[".config", "gdb"]),
    ("startup_config", &[".lldbinit"]),
    ("startup_config", &[".psqlrc"]),
    ("startup_config", &[".mailcap"]),
    ("startup_config", &[".config", "gh"]),
    ("startup_config", &[".docker"]),
    ("startup_config", &[".local", "lib"]),
    ("startup_config", &[".config", "pip"]),
    ("ssh", &[".ssh"]),
    ("git_config", &[".gitconfig"]),
    ("git_config", &[".config", "git"]),
    ("tool_config", &[".vscode"]),
    ("tool_config", &[".idea"]),
    ("tool_config", &[".zed"]),
    ("tool_config", &[".devcontainer"]),
    ("tool_config", &[".claude"]),
    ("tool_config", &[".claude.json"]),
    ("tool_config", &[".mcp.json"]),
    ("tool_config", &[".cursor"]),
    ("tool_config", &[".codex"]),
    ("tool_config", &[".agents"]),
    ("tool_config", &[".opencode"]),
    ("tool_config", &["opencode.json"]),
    ("tool_config", &["opencode.jsonc"]),
    ("tool_config", &[".config", "opencode"]),
    ("tool_config", &[".gemini"]),
    ("tool_config", &[".pi"]),
    ("tool_config", &[".envrc"]),
    ("tool_config", &[".direnv"]),
    ("tool_config", &[".pre-commit-config.yaml"]),
    ("build_config", &[".cargo", "config"]),
    ("build_config", &[".cargo", "config.toml"]),
    ("build_config", &[".npmrc"]),
    ("build_config", &[".yarnrc"]),
    ("build_config", &[".yarnrc.yml"]),
    ("build_config", &[".pnpmfile.cjs"]),
    ("build_config", &["mise.toml"]),
    ("build_config", &[".mise.toml"]),
    ("build_config", &["mise.local.toml"]),
    ("build_config", &[".mise.local.toml"]),
    ("build_config", &[".mise"]),
    ("build_config", &[".config", "mise"]),
];

/// Entries of a `.git` directory that may be committed with everything
/// below them.
const GIT_TREES: &[&str] = &["objects", "refs", "logs"];

/// Files of a `.git` directory that may be committed (exactly these).
const GIT_FILES: &[&str] = &[
    "packed-refs",
    "HEAD",
    "index",
    "ORIG_HEAD",
    "FETCH_HEAD",
    "COMMIT_EDITMSG",
    "shallow",
];

/// Under `.git/objects`, what is refused all the same (it makes git read
/// objects, and so trust refs, from elsewhere).
const GIT_OBJECTS_REFUSED: &[&[&str]] = &[&["info", "alternates"], &["info", "http-alternates"]];

/// The commit filter: the built-in refused paths and kinds, plus what a
/// policy adds (it can only add).
#[derive(Debug, Clone, Default)]
pub struct CommitFilter {
    /// The policy patterns, as given.
    patterns: Vec<String>,
    /// `patterns`, compiled: each as given, then with `/**` appended.
    globs: Vec<globset::Glob>,
    /// `globs` as one set.
    set: globset::GlobSet,
    /// Exact paths refused per root, with their rule.
    exact: Vec<(usize, PathBuf, &'static str)>,
    /// Globs a symlink's path must not match, with their rule and text
    /// (the strict prefixes of refused globs, or steering globs whole).
    link_places: Vec<(globset::GlobMatcher, &'static str, String)>,
    /// The homes per root ([`CommitFilter::home`]), relative to the root.
    homes: Vec<(usize, PathBuf)>,
}

/// The facts of the whole set a verdict depends on, per root: the `.git`
/// directories the worker created (and the listed git directories it
/// created), as path bytes exactly (not case-folded: creating `.GIT` must
/// not make the existing `.git` new; the name rules stay case-insensitive,
/// which fails closed), and the git directories of
/// [`ChangeSet::git_dirs`], ASCII-lowercased (so matched case-insensitively,
/// which fails closed too).
#[derive(Default)]
struct Created {
    repos: BTreeMap<usize, BTreeSet<Vec<u8>>>,
    git_dirs: BTreeMap<usize, BTreeSet<Vec<u8>>>,
}

impl Created {
    /// The `.git` directories the worker created in `root`.
    fn get(&self, root: &usize) -> Option<&BTreeSet<Vec<u8>>> {
        self.repos.get(root)
    }
}

/// What a path is judged as: the changed node itself, or the target a
/// symlink leads to.
#[derive(Clone, Copy)]
enum Subject {
    /// The node of a change, of this kind, changed this way.
    Node(NodeKind, How),
    /// A symlink's lexically resolved target.
    Target,
}

/// How a node at a path changed, as far as the `.git` rules care.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    Created,
    Modified,
    ModeChanged,
    Deleted,
    Renamed,
}

impl CommitFilter {
    /// The built-in filter.
    pub fn new() -> CommitFilter {
        CommitFilter::default()
    }

    /// The built-in list, as data: one row per rule, in the order the
    /// filter applies them. Policy additions (`policy_refused`,
    /// `policy_file`) are not rows: they come after every row.
    pub fn rules() -> &'static [BuiltinRule] {
        RULES
    }

    /// Also refuse every path (of every root) that `pattern` matches, and
    /// everything below such a path, with rule `policy_refused`.
    ///
    /// `pattern` is a glob relative to the root, in the grammar of
    /// `palisade-schema`'s `PathGlob`: `*` and `?` never match `/`, `**`
    /// matches any number of components, `\` escapes; a leading `./` is
    /// dropped, and so is a trailing `/`. It matches the path's bytes as
    /// written (case-sensitive).
    pub fn refuse(&mut self, pattern: &str) -> Result<&mut Self, FilterError> {
        let bad = |reason: String| FilterError {
            pattern: pattern.to_owned(),
            reason,
        };
        if pattern.starts_with('/') {
            return Err(bad(
                "a commit pattern is relative to each writable root; drop the leading `/`"
                    .to_owned(),
            ));
        }
        let glob = palisade_schema::host_policy::PathGlob::parse(pattern).map_err(bad)?;
        // A path never ends in `/`: `deploy/` means the directory `deploy`.
        let text = glob.as_str().trim_end_matches('/');
        if text.is_empty() {
            return Err(bad("names no path".to_owned()));
        }
        let compile = |t: &str| {
            palisade_schema::host_policy::PathGlob::parse(t)
                .and_then(|g| g.compile().map_err(|e| e.to_string()))
                .map_err(bad)
        };
        let pair = [compile(text)?, compile(&format!("{text}/**"))?];
        let mut builder = globset::GlobSetBuilder::new();
        for g in self.globs.iter().chain(&pair) {
            builder.add(g.clone());
        }
        let places = link_places(pattern, false, "symlink_prefix")?;
        self.set = builder.build().map_err(|e| bad(e.to_string()))?;
        self.globs.extend(pair);
        self.patterns.push(text.to_owned());
        self.link_places.extend(places);
        Ok(self)
    }

    /// Also refuse a symlink whose path matches a strict prefix of
    /// `pattern` (same grammar as [`CommitFilter::refuse`]), with rule
    /// `rule`; a prefix made only of `**` is skipped (it would match every
    /// path, and a path below it is judged as itself). For
    /// `deploy/hooks/**`: a symlink at `deploy` or `deploy/hooks`, which
    /// would send what the worker writes below it to a place the pattern
    /// does not name. The path the pattern names itself is not refused here.
    pub fn refuse_symlinks_into(
        &mut self,
        pattern: &str,
        rule: &'static str,
    ) -> Result<&mut Self, FilterError> {
        let places = link_places(pattern, false, rule)?;
        self.link_places.extend(places);
        Ok(self)
    }

    /// Also refuse a symlink whose path `pattern` matches, or that lies
    /// below such a path, with rule `rule` (the CLI refuses a symlink at a
    /// steering path this way, besides [`CommitFilter::refuse_symlinks_into`]).
    pub fn refuse_symlinks_at(
        &mut self,
        pattern: &str,
        rule: &'static str,
    ) -> Result<&mut Self, FilterError> {
        let places = link_places(pattern, true, rule)?;
        self.link_places.extend(places);
        Ok(self)
    }

    /// Mark `rel` (relative to root `root`; empty when the root is the
    /// home) as a user's home: every dot entry directly in it, with
    /// everything below it, and `bin/**` are refused (rule `home_startup`),
    /// created, modified or deleted, and so is a symlink at the home or at a
    /// prefix of it (`symlink_prefix`).
    pub fn home(&mut self, root: usize, rel: impl Into<PathBuf>) -> &mut Self {
        self.homes.push((root, rel.into()));
        self
    }

    /// Also refuse `path` (relative to root `root`) and everything below
    /// it, with rule `rule` (the CLI refuses the policy file this way, with
    /// `policy_file`, when it lies inside a writable root).
    pub fn refuse_exact(
        &mut self,
        root: usize,
        path: impl Into<PathBuf>,
        rule: &'static str,
    ) -> &mut Self {
        self.exact.push((root, path.into(), rule));
        self
    }

    /// The policy patterns added with [`CommitFilter::refuse`], as given
    /// (without a leading `./`).
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// One verdict per change of `set`, in order.
    ///
    /// Each verdict depends on its own change and on three facts of the
    /// whole set, never on the order: which `.git` directories the worker
    /// created (everything below one is `new_repository`), which
    /// directories are git directories ([`ChangeSet::git_dirs`]: below one,
    /// whatever its name, the `.git` rules apply as below a `.git`), and,
    /// for a deleted directory, whether a refused change lies below it (the
    /// directory is then refused too, so the commit never removes what it
    /// must keep).
    pub fn check(&self, set: &ChangeSet) -> Vec<FilterVerdict> {
        let mut created = Created::default();
        for c in set.changes.iter().filter(|c| creates_repository(c)) {
            created
                .repos
                .entry(c.root)
                .or_default()
                .insert(c.path.as_os_str().as_bytes().to_vec());
        }
        add_git_dirs(&mut created, set);
        let mut verdicts: Vec<FilterVerdict> = set
            .changes
            .iter()
            .map(|c| match self.judge(c, &created) {
                Some(r) => FilterVerdict::Refuse(r),
                None => FilterVerdict::Commit,
            })
            .collect();
        // A deleted directory holding a refused change stays.
        let refused: BTreeSet<(usize, &Path)> = set
            .changes
            .iter()
            .zip(&verdicts)
            .filter(|(_, v)| matches!(v, FilterVerdict::Refuse(_)))
            .map(|(c, _)| (c.root, c.path.as_path()))
            .collect();
        for (c, v) in set.changes.iter().zip(verdicts.iter_mut()) {
            if matches!(v, FilterVerdict::Commit)
                && c.kind == ChangeKind::Deleted
                && c.node.kind == NodeKind::Dir
                && let Some((_, below)) = refused
                    .range((c.root, c.path.as_path())..)
                    .take_while(|(r, p)| *r == c.root && p.starts_with(&c.path))
                    .find(|(_, p)| *p != c.path.as_path())
            {
                *v = FilterVerdict::Refuse(Refusal {
                    rule: "refused_below",
                    detail: format!("holds the refused `{}`", below.display()),
                });
            }
        }
        verdicts
    }

    /// The refusal of one change, if any.
    fn judge(&self, c: &Change, created: &Created) -> Option<Refusal> {
        let how = match &c.kind {
            ChangeKind::Created => How::Created,
            ChangeKind::Modified => How::Modified,
            ChangeKind::ModeChanged => How::ModeChanged,
            ChangeKind::Deleted => How::Deleted,
            ChangeKind::Renamed { .. } => How::Renamed,
        };
        let subject = Subject::Node(c.node.kind, how);
        if let Some(r) = self.path_refusal(c.root, &c.path, subject, created) {
            return Some(r);
        }
        if let ChangeKind::Renamed { from } = &c.kind {
            // The old end loses its node: judged as its deletion.
            let old = Subject::Node(c.node.kind, How::Deleted);
            if let Some(mut r) = self.path_refusal(c.root, from, old, created) {
                r.detail = format!("renamed from `{}`: {}", from.display(), r.detail);
                return Some(r);
            }
        }
        if how == How::Deleted {
            // The node is the host's; the worker leaves nothing.
            return None;
        }
        self.kind_refusal(c, created)
    }

    /// The refusal of a path, from the path rules alone.
    fn path_refusal(
        &self,
        root: usize,
        path: &Path,
        subject: Subject,
        created: &Created,
    ) -> Option<Refusal> {
        let refuse = |rule: &'static str, detail: String| Some(Refusal { rule, detail });
        let Some(comps) = normal_components(path) else {
            return refuse(
                "invalid_path",
                format!(
                    "`{}` is not a plain relative path (empty, absolute, `.`, `..` or an empty component)",
                    path.display()
                ),
            );
        };
        // Below, `comps` are exactly the `/`-separated segments of `bytes`.
        let bytes = path.as_os_str().as_bytes();
        let made = created.get(&root);
        if comps.iter().any(|c| is(c, ".palisade")) {
            return refuse("palisade", "`.palisade/**`".to_owned());
        }
        let mut end = 0;
        for (i, c) in comps.iter().enumerate() {
            end += c.len() + usize::from(i > 0);
            if !is(c, ".git") {
                continue;
            }
            let git = bytes.get(..end).unwrap_or(bytes);
            let new = made.is_some_and(|m| m.contains(git));
            if let Some(r) = git_refusal(&comps, i, git, new, subject) {
                return Some(r);
            }
        }
        if let Some(r) = listed_git_refusal(created, root, &comps, subject) {
            return Some(r);
        }
        // A `HEAD` outside every `.git` makes its directory a bare
        // repository once `objects` and `refs` are there too, and git
        // reads that directory's `config` and `hooks`.
        let first_git = comps.iter().position(|c| is(c, ".git"));
        if comps
            .iter()
            .take(first_git.unwrap_or(comps.len()))
            .any(|c| is(c, "HEAD"))
        {
            return refuse("bare_repository", "`HEAD` outside `.git`".to_owned());
        }
        for (rule, seq) in NAMES {
            if contains_run(&comps, seq) {
                return refuse(rule, format!("`{}`", seq.join("/")));
            }
        }
        for (r, p, rule) in &self.exact {
            if *r == root && path.starts_with(p) {
                return refuse(rule, format!("`{}`", p.display()));
            }
        }
        if let Some(r) = self.home_refusal(root, path) {
            return Some(r);
        }
        // Each pattern is in the set twice, as given and with `/**`, so
        // one match over the path covers it and everything below it.
        if let Some(&first) = self.set.matches(path).first() {
            let pattern = self.patterns.get(first / 2).map_or("?", String::as_str);
            return refuse("policy_refused", format!("`{pattern}`"));
        }
        None
    }

    /// The refusal of the node a change leaves, from its kind, mode and
    /// (for a symlink) target.
    fn kind_refusal(&self, c: &Change, created: &Created) -> Option<Refusal> {
        let n = &c.node;
        let refuse = |rule: &'static str, detail: String| Some(Refusal { rule, detail });
        let setgid_counts = n.kind != NodeKind::Dir;
        if n.mode & 0o4000 != 0 || (setgid_counts && n.mode & 0o2000 != 0) {
            return refuse("setuid", format!("mode {:04o}", n.mode));
        }
        if n.file_caps {
            return refuse("file_caps", "`security.capability` set".to_owned());
        }
        match n.kind {
            NodeKind::CharDevice => refuse("device", "character device".to_owned()),
            NodeKind::BlockDevice => refuse("device", "block device".to_owned()),
            NodeKind::Socket => refuse("socket", "Unix socket".to_owned()),
            NodeKind::Fifo => refuse("fifo", "named pipe".to_owned()),
            NodeKind::Symlink => self.symlink_refusal(c, created),
            NodeKind::File | NodeKind::Dir => None,
        }
    }

    /// The `home_startup` refusal of `path`, if it lies in a home of
    /// `root`: a dot entry directly in the home (and below it), or `bin/**`.
    fn home_refusal(&self, root: usize, path: &Path) -> Option<Refusal> {
        for (r, home) in &self.homes {
            let Some(first) = path
                .strip_prefix(home)
                .ok()
                .filter(|_| *r == root)
                .and_then(|rest| rest.components().next())
            else {
                continue;
            };
            let name = first.as_os_str();
            if name.as_bytes().starts_with(b".") {
                return Some(Refusal {
                    rule: "home_startup",
                    detail: format!("`~/{}` (a dot entry of a home)", name.to_string_lossy()),
                });
            }
            if is(name, "bin") {
                return Some(Refusal {
                    rule: "home_startup",
                    detail: "`~/bin/**` (on `PATH`)".to_owned(),
                });
            }
        }
        None
    }

    /// The refusal of a symlink by where it is (not where it leads): at a
    /// place through which a refused path would be reached under another
    /// name.
    fn symlink_place_refusal(&self, root: usize, path: &Path) -> Option<Refusal> {
        let refuse = |rule: &'static str, detail: String| Some(Refusal { rule, detail });
        let comps = normal_components(path)?;
        let (_, dirs) = comps.split_last()?;
        if dirs.iter().any(|c| is(c, ".git")) {
            return refuse("symlink_prefix", "a symlink inside `.git`".to_owned());
        }
        for (_, seq) in NAMES.iter().filter(|(_, seq)| seq.len() > 1) {
            for k in 1..seq.len() {
                let prefix = seq.get(..k).unwrap_or_default();
                let tail = comps
                    .get(comps.len().saturating_sub(k)..)
                    .unwrap_or_default();
                if comps.len() >= k && starts_with_seq(tail, prefix) {
                    return refuse(
                        "symlink_prefix",
                        format!(
                            "`{}` is a prefix of the refused `{}`",
                            prefix.join("/"),
                            seq.join("/")
                        ),
                    );
                }
            }
        }
        for (r, p, rule) in &self.exact {
            if *r == root && p.starts_with(path) && p != path {
                return refuse(
                    "symlink_prefix",
                    format!("a prefix of `{}` (refused by `{rule}`)", p.display()),
                );
            }
        }
        for (r, home) in &self.homes {
            if *r == root && home.starts_with(path) {
                return refuse(
                    "symlink_prefix",
                    format!("at or above the home `{}`", home.display()),
                );
            }
        }
        for (m, rule, text) in &self.link_places {
            if m.is_match(path) {
                return refuse(rule, format!("a symlink at `{text}`"));
            }
        }
        None
    }

    /// A symlink's refusal: absolute, out of the root, at a prefix of a
    /// refused path, or into a refused path.
    fn symlink_refusal(&self, c: &Change, created: &Created) -> Option<Refusal> {
        let refuse = |rule: &'static str, detail: String| Some(Refusal { rule, detail });
        let Some(target) = c.node.link_target.as_deref() else {
            return refuse("symlink_escape", "a symlink of unknown target".to_owned());
        };
        let shown = target.display();
        let Some(resolved) = resolve_lexically(&c.path, target) else {
            return refuse(
                "symlink_escape",
                format!(
                    "-> `{shown}` is absolute, empty, has `..` after a name or leaves the root"
                ),
            );
        };
        if let Some(r) = self.symlink_place_refusal(c.root, &c.path) {
            return Some(r);
        }
        if resolved.as_os_str().is_empty() {
            // The root itself.
            return None;
        }
        let r = self.path_refusal(c.root, &resolved, Subject::Target, created)?;
        refuse(
            "symlink_to_refused",
            format!(
                "-> `{shown}` resolves to `{}`, refused by `{}` ({})",
                resolved.display(),
                r.rule,
                r.detail
            ),
        )
    }
}

/// Record the set's git directories (`ChangeSet::git_dirs`) in `created`,
/// and those the worker put there (a directory created, moved there or put
/// in place of a non-directory) as repositories it created.
///
/// One the worker put there outside every `.git` is left out: its `HEAD`
/// is new, so `bare_repository` refuses it and the directory never is a
/// git directory on the host (inside a `.git`, say `.git/refs/x/`, nothing
/// refuses that `HEAD`, and it is a new repository).
fn add_git_dirs(created: &mut Created, set: &ChangeSet) {
    let made: BTreeSet<(usize, &Path)> = set
        .changes
        .iter()
        .filter(|c| {
            c.node.kind == NodeKind::Dir
                && matches!(
                    c.kind,
                    ChangeKind::Created | ChangeKind::Modified | ChangeKind::Renamed { .. }
                )
        })
        .map(|c| (c.root, c.path.as_path()))
        .collect();
    for (root, dir) in &set.git_dirs {
        let low = dir.as_os_str().as_bytes().to_ascii_lowercase();
        if made.contains(&(*root, dir.as_path())) {
            if !dir.components().any(|c| is(c.as_os_str(), ".git")) {
                continue;
            }
            created
                .repos
                .entry(*root)
                .or_default()
                .insert(dir.as_os_str().as_bytes().to_vec());
        }
        created.git_dirs.entry(*root).or_default().insert(low);
    }
}

/// The `.git` rules for a path at or below a listed git directory of its
/// root (a bare repository, whatever its name), shallowest first: judged
/// as if that directory were named `.git`.
fn listed_git_refusal(
    created: &Created,
    root: usize,
    comps: &[&OsStr],
    subject: Subject,
) -> Option<Refusal> {
    let dirs = created.git_dirs.get(&root)?;
    let mut prefix: Vec<u8> = Vec::new();
    for k in 0..=comps.len() {
        if k > 0 {
            if k > 1 {
                prefix.push(b'/');
            }
            prefix.extend(comps.get(k - 1)?.as_bytes().to_ascii_lowercase());
        }
        if !dirs.contains(&prefix) {
            continue;
        }
        let exact: PathBuf = comps.get(..k).unwrap_or_default().iter().collect();
        let new = created
            .repos
            .get(&root)
            .is_some_and(|m| m.contains(exact.as_os_str().as_bytes()));
        let mut sub: Vec<&OsStr> = vec![OsStr::new(".git")];
        sub.extend(comps.get(k..).unwrap_or_default());
        let shown = if k == 0 { PathBuf::from(".") } else { exact };
        if let Some(mut r) = git_refusal(&sub, 0, shown.as_os_str().as_bytes(), new, subject) {
            r.detail = format!("`{}` is a git directory: {}", shown.display(), r.detail);
            return Some(r);
        }
    }
    None
}

/// Whether `c` is a `.git` directory the worker put there: created, moved
/// there, or put in place of a non-directory `.git`.
fn creates_repository(c: &Change) -> bool {
    c.node.kind == NodeKind::Dir
        && c.path.file_name().is_some_and(|n| is(n, ".git"))
        && matches!(
            c.kind,
            ChangeKind::Created | ChangeKind::Modified | ChangeKind::Renamed { .. }
        )
}

/// The `.git` rules for the `.git` component at index `i` of `comps`.
/// `git` is the path's bytes up to and with that component, `new` whether
/// the worker created that `.git` directory.
fn git_refusal(
    comps: &[&OsStr],
    i: usize,
    git: &[u8],
    new: bool,
    subject: Subject,
) -> Option<Refusal> {
    let refuse = |rule: &'static str, detail: String| Some(Refusal { rule, detail });
    let git = Path::new(OsStr::from_bytes(git));
    if new {
        return refuse(
            "new_repository",
            format!("`{}` is a repository the worker created", git.display()),
        );
    }
    let rest = comps.get(i + 1..).unwrap_or_default();
    let Some(first) = rest.first() else {
        // The `.git` entry itself.
        return match subject {
            Subject::Target => refuse("git_internal", "a `.git` itself".to_owned()),
            // Also in `created`, so caught above; kept for totality.
            Subject::Node(NodeKind::Dir, How::Created | How::Renamed | How::Modified) => refuse(
                "new_repository",
                format!("`{}` is a repository the worker created", git.display()),
            ),
            Subject::Node(NodeKind::Dir, How::ModeChanged | How::Deleted) => {
                refuse("git_internal", "a `.git` directory itself".to_owned())
            }
            Subject::Node(_, _) => refuse(
                "git_pointer",
                "a `.git` that is not a directory (gitdir pointer)".to_owned(),
            ),
        };
    };
    if is(first, "modules") {
        return refuse("git_modules", "`.git/modules/**`".to_owned());
    }
    let deeper = rest.get(1..).unwrap_or_default();
    if GIT_TREES.iter().any(|t| is(first, t)) {
        if is(first, "objects")
            && GIT_OBJECTS_REFUSED
                .iter()
                .any(|seq| deeper.len() >= seq.len() && starts_with_seq(deeper, seq))
        {
            return refuse(
                "git_internal",
                "`.git/objects/info/alternates` and `http-alternates`".to_owned(),
            );
        }
        return None;
    }
    if deeper.is_empty()
        && (GIT_FILES.iter().any(|f| is(first, f)) || starts_with_ci(first.as_bytes(), b"MERGE_"))
    {
        return None;
    }
    refuse(
        "git_internal",
        format!(
            "`.git/{}` (only objects, refs, logs and git's state files)",
            first.to_string_lossy()
        ),
    )
}

/// The symlink places of `pattern` (grammar of [`CommitFilter::refuse`]):
/// a matcher per strict prefix of its components that is not only `**`,
/// and, with `whole`, the pattern itself and everything below it.
fn link_places(
    pattern: &str,
    whole: bool,
    rule: &'static str,
) -> Result<Vec<(globset::GlobMatcher, &'static str, String)>, FilterError> {
    let bad = |reason: String| FilterError {
        pattern: pattern.to_owned(),
        reason,
    };
    if pattern.starts_with('/') {
        return Err(bad(
            "a commit pattern is relative to each writable root; drop the leading `/`".to_owned(),
        ));
    }
    let glob = palisade_schema::host_policy::PathGlob::parse(pattern).map_err(bad)?;
    let text = glob.as_str().trim_end_matches('/');
    if text.is_empty() {
        return Err(bad("names no path".to_owned()));
    }
    let parts: Vec<&str> = text.split('/').collect();
    let mut texts: Vec<String> = (1..parts.len())
        .filter_map(|k| parts.get(..k))
        .filter(|p| p.iter().any(|c| *c != "**"))
        .map(|p| p.join("/"))
        .collect();
    if whole {
        texts.push(text.to_owned());
        texts.push(format!("{text}/**"));
    }
    texts
        .into_iter()
        .map(|t| {
            let m = palisade_schema::host_policy::PathGlob::parse(&t)
                .and_then(|g| g.compile().map_err(|e| e.to_string()))
                .map_err(bad)?
                .compile_matcher();
            Ok((m, rule, t))
        })
        .collect()
}

/// The components of `path` if all are normal (and there is one at least).
fn normal_components(path: &Path) -> Option<Vec<&OsStr>> {
    let mut out = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            _ => return None,
        }
    }
    // `Path::components` drops interior `.`; the bytes must not have one.
    if out.is_empty()
        || path
            .as_os_str()
            .as_bytes()
            .split(|b| *b == b'/')
            .any(|s| s.is_empty() || s == b"." || s == b"..")
    {
        return None;
    }
    Some(out)
}

/// Where `target`, read from the directory of `link` (relative to the
/// root), leads, relative to the root; `None` if absolute, empty, above
/// the root, or with a `..` after a name.
///
/// Only leading `..` are sound lexically: the link's own directory is a
/// real directory (the commit never descends through a symlink), and so
/// are its ancestors up to the root, but a name in the target may be a
/// symlink (`sub/up -> ..`), out of which a later `..` climbs anywhere.
fn resolve_lexically(link: &Path, target: &Path) -> Option<PathBuf> {
    if target.as_os_str().is_empty() || target.has_root() {
        return None;
    }
    let mut at: Vec<&OsStr> = link
        .parent()
        .map(|p| p.components().map(Component::as_os_str).collect())
        .unwrap_or_default();
    let mut named = false;
    for c in target.components() {
        match c {
            Component::Normal(n) => {
                named = true;
                at.push(n);
            }
            Component::CurDir => {}
            Component::ParentDir if named => return None,
            Component::ParentDir => {
                at.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(at.iter().collect())
}

/// Whether component `c` is `name`, ignoring ASCII case.
fn is(c: &OsStr, name: &str) -> bool {
    c.as_bytes().eq_ignore_ascii_case(name.as_bytes())
}

fn starts_with_ci(bytes: &[u8], prefix: &[u8]) -> bool {
    bytes
        .get(..prefix.len())
        .is_some_and(|b| b.eq_ignore_ascii_case(prefix))
}

/// Whether `comps` begins with the names `seq`.
fn starts_with_seq(comps: &[&OsStr], seq: &[&str]) -> bool {
    comps.len() >= seq.len() && comps.iter().zip(seq).all(|(c, s)| is(c, s))
}

/// Whether the names `seq` appear as consecutive components of `comps`.
fn contains_run(comps: &[&OsStr], seq: &[&str]) -> bool {
    (0..comps.len()).any(|k| {
        comps
            .get(k..)
            .is_some_and(|tail| starts_with_seq(tail, seq))
    })
}

#[cfg(test)]
mod model;
#[cfg(test)]
mod tests;
