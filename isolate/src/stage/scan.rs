//! The change set of a stage's upper layers (owner: change set and commit).
//!
//! [`Stage::changes`] walks each root's upper layer with an explicit stack
//! (never recursion), every directory opened with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)` from the layer's own descriptor and every entry
//! looked at with `fstatat(AT_SYMLINK_NOFOLLOW)`, and compares it with the
//! host root (the overlay's lower layer) the same way. It reads only, so it
//! may run while the worker still writes (a checkpoint); what it returns is
//! then a snapshot, which [`Stage::commit`] re-checks node by node.
//!
//! The upper layer is the one an overlay mounted with `userxattr` (inside
//! the sandbox's user namespace) leaves:
//! - a whiteout is a character device 0/0, or a zero-size regular file with
//!   the `user.overlay.whiteout` xattr (the "xattr whiteout" of kernels
//!   ≥ 6.7), which counts only in a directory marked
//!   `user.overlay.opaque` = `x`, as the kernel reads it;
//! - a directory with `user.overlay.opaque` = `y` hides every lower entry
//!   below it (`x` does not: it only says xattr whiteouts may be inside);
//! - a directory copied up only because something below it changed is not
//!   a change unless its mode changed; a file copied up for a metadata
//!   change (owner, times, xattrs) with the same content and mode is none;
//! - `user.overlay.redirect` and `user.overlay.metacopy` (a renamed lower
//!   directory, a file whose data is still in the lower layer) cannot be
//!   set up under `userxattr`; an upper that carries them is refused rather
//!   than misread. The `trusted.overlay.*` forms of all of the above (an
//!   overlay mounted by real root) are understood the same way.
//!
//! Renames: a created file or symlink equal in kind, mode and content
//! (digests compared only when the sizes match) to a deleted host file or
//! symlink whose parent directory is still a directory in the worker's view
//! is reported as [`ChangeKind::Renamed`] instead of created plus deleted.
//! Not detected: renamed directories (under `userxattr` the kernel refuses
//! to rename a lower directory, and `mv` falls back to copy and delete, so
//! they show as a created tree and a deleted one), and a file moved out of
//! a directory that is itself deleted or replaced (created plus deleted).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{CStr, OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use sha2::{Digest as _, Sha256};

use super::{Change, ChangeKind, ChangeSet, Digest, Node, NodeKind, Stage, StageError};

/// Deepest path (in components below a root) the scan accepts.
pub(crate) const MAX_DEPTH: usize = 256;
/// Longest path (in bytes, relative to a root) the scan accepts.
pub(crate) const MAX_PATH_BYTES: usize = 4096;
/// Most changes one scan returns; past it the stage is refused, not cut.
pub(crate) const MAX_CHANGES: usize = 2_000_000;
/// Most directories one scan tests for being a git directory.
pub(crate) const MAX_GIT_PROBES: usize = 1_000_000;

impl Stage {
    /// The change set of every root, read from the upper layers (whiteouts
    /// and opaque directories understood) against the host roots. Reading
    /// only: it may run while the worker still runs (a checkpoint).
    ///
    /// Ordered as [`ChangeSet`] documents. A path deeper than 256
    /// components or longer than 4096 bytes, more than two million changes,
    /// or an upper layer with overlay xattrs the `userxattr` overlay cannot
    /// produce (`redirect`, `metacopy`) is [`StageError::Invalid`] naming the
    /// path, and so are changes below more than a million directories (each
    /// is tested for being a git directory, for [`ChangeSet::git_dirs`]).
    pub fn changes(&self) -> Result<ChangeSet, StageError> {
        let mut changes = Vec::new();
        let mut git_dirs = Vec::new();
        for (n, root) in self.roots.iter().enumerate() {
            let mut one = scan_root(n, &root.root, &root.upper)?;
            git_dirs.extend(
                git_dirs_of(&root.root, &root.upper, &one)?
                    .into_iter()
                    .map(|d| (n, d)),
            );
            changes.append(&mut one);
            if changes.len() > MAX_CHANGES {
                return Err(StageError::Invalid {
                    path: root.upper.clone(),
                    reason: format!("more than {MAX_CHANGES} changes"),
                });
            }
        }
        Ok(ChangeSet { changes, git_dirs })
    }
}

/// The git directories `changes` (of one root) lie in: every directory
/// above a change (and a changed directory itself, and the directories
/// above a rename's old path) that is a git directory on the host or in the
/// worker's view, in path order, `""` for the root itself.
///
/// Each directory is tested once ([`is_git_dir`]), over the union of its
/// host and upper entries, which holds both the host's view and the
/// worker's (upper over lower): a directory that is a git directory in
/// either is listed. Past [`MAX_GIT_PROBES`] directories the stage is
/// refused.
fn git_dirs_of(host: &Path, upper: &Path, changes: &[Change]) -> Result<Vec<PathBuf>, StageError> {
    let host_fd = open_root(host, "open the host root")?;
    let upper_fd = open_root(upper, "open the upper layer")?;
    let mut seen: HashMap<PathBuf, bool> = HashMap::new();
    for c in changes {
        let from = match &c.kind {
            ChangeKind::Renamed { from } => Some(from.as_path()),
            _ => None,
        };
        let ends = [
            (Some(c.path.as_path()), c.node.kind == NodeKind::Dir),
            (from, false),
        ];
        for (path, own) in ends {
            let Some(path) = path else { continue };
            for dir in path.ancestors().skip(usize::from(!own)) {
                // Its ancestors were tested with it.
                if seen.contains_key(dir) {
                    break;
                }
                if seen.len() >= MAX_GIT_PROBES {
                    return Err(StageError::Invalid {
                        path: upper.to_path_buf(),
                        reason: format!("changes below more than {MAX_GIT_PROBES} directories"),
                    });
                }
                let git = is_git_dir(&host_fd, &upper_fd, dir)
                    .map_err(|e| io_err("inspect a directory", upper.join(dir), e))?;
                seen.insert(dir.to_path_buf(), git);
            }
        }
    }
    let mut dirs: Vec<PathBuf> = seen
        .into_iter()
        .filter_map(|(d, git)| git.then_some(d))
        .collect();
    dirs.sort();
    Ok(dirs)
}

/// Whether the directory `dir`, with the entries it has below `host` or
/// below `upper` (their union), may be a git directory: a superset of git's
/// own test (`is_git_directory` in git's `setup.c`: a valid `HEAD`, and
/// `objects` and `refs` in the directory or in the one its `commondir`
/// names). Listed are a non-directory `HEAD` with a `refs` of any kind
/// beside it (`objects` is not required: `GIT_OBJECT_DIRECTORY` can put it
/// elsewhere, and git checks `HEAD`'s content, not this), and any
/// `commondir` (a linked worktree's gitdir, whose `HEAD` the worker may
/// still have to write). A 0/0 character device (an overlay whiteout)
/// counts as absent; a side where `dir` is not a directory reachable
/// without symlinks has no entries.
fn is_git_dir(host: &OwnedFd, upper: &OwnedFd, dir: &Path) -> Result<bool, Errno> {
    let mut sides = Vec::with_capacity(2);
    for root in [host, upper] {
        match open_beneath(root, dir, OFlag::O_PATH | OFlag::O_DIRECTORY) {
            Ok(d) => sides.push(d),
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP | Errno::EXDEV) => {}
            Err(e) => return Err(e),
        }
    }
    let entry = |name: &str, dir_ok: bool| -> Result<bool, Errno> {
        for d in &sides {
            if let Some(st) = lstat_at(d.as_fd(), OsStr::new(name))? {
                let kind = kind_of(&st);
                let whiteout = kind == NodeKind::CharDevice && st.st_rdev == 0;
                if !whiteout && (dir_ok || kind != NodeKind::Dir) {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    };
    Ok((entry("HEAD", false)? && entry("refs", true)?) || entry("commondir", true)?)
}

/// The ordering key of a change: its root, its path's components, and
/// whether it must come after what is below its path (`after`: a deleted
/// node, or a host directory replaced by another kind, whose deleted
/// contents come first).
fn order_key(change: &Change, after: bool) -> (usize, Vec<(u8, &[u8])>) {
    let mut key: Vec<(u8, &[u8])> = change
        .path
        .components()
        .map(|c| (0u8, c.as_os_str().as_bytes()))
        .collect();
    if after || change.kind == ChangeKind::Deleted {
        key.push((1, b""));
    }
    (change.root, key)
}

/// One scanned change before ordering, with what rename pairing needs.
struct Found {
    change: Change,
    /// A deleted file or symlink whose parent is still a directory in the
    /// worker's view (a rename source candidate).
    rename_source: bool,
    /// A host directory replaced by a non-directory: ordered after the
    /// deletion of what it contained.
    replaces_dir: bool,
}

/// A directory of the upper layer still to visit.
struct Frame {
    rel: PathBuf,
    depth: usize,
    /// The worker's view of this directory holds no lower entry (it is
    /// opaque, below an opaque one, or new): every host entry not in the
    /// upper is deleted.
    hidden: bool,
    /// The host has a directory at `rel`.
    lower_dir: bool,
}

fn scan_root(n: usize, host: &Path, upper: &Path) -> Result<Vec<Change>, StageError> {
    let host_fd = open_root(host, "open the host root")?;
    let upper_fd = open_root(upper, "open the upper layer")?;
    let mut found: Vec<Found> = Vec::new();
    let mut stack = vec![Frame {
        rel: PathBuf::new(),
        depth: 0,
        hidden: false,
        lower_dir: true,
    }];
    while let Some(frame) = stack.pop() {
        let udir = match open_beneath(&upper_fd, &frame.rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY) {
            Ok(fd) => fd,
            // Gone or replaced since its parent was listed: a checkpoint
            // races the worker; the directory is not in this snapshot.
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP)
                if !frame.rel.as_os_str().is_empty() =>
            {
                continue;
            }
            Err(e) => return Err(io_err("open an upper directory", upper.join(&frame.rel), e)),
        };
        let xwhiteouts = has_xwhiteouts(udir.as_fd())
            .map_err(|e| io_err("inspect an upper directory", upper.join(&frame.rel), e))?;
        let ldir = if frame.lower_dir {
            match open_beneath(&host_fd, &frame.rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY) {
                Ok(fd) => Some(fd),
                Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => None,
                Err(e) => return Err(io_err("open a host directory", host.join(&frame.rel), e)),
            }
        } else {
            None
        };
        let names = list_dir(&udir)
            .map_err(|e| io_err("list an upper directory", upper.join(&frame.rel), e))?;
        let mut present: BTreeSet<OsString> = BTreeSet::new();
        for name in names {
            let rel = child_path(&frame.rel, &name, frame.depth + 1, upper)?;
            let Some(ust) = lstat_at(udir.as_fd(), &name)
                .map_err(|e| io_err("inspect an upper entry", upper.join(&rel), e))?
            else {
                continue; // gone since the listing: a checkpoint races the worker
            };
            if is_whiteout(udir.as_fd(), &name, &ust, xwhiteouts)
                .map_err(|e| io_err("inspect an upper entry", upper.join(&rel), e))?
            {
                if !frame.hidden
                    && let Some(l) = &ldir
                    && let Some(lst) = lstat_at(l.as_fd(), &name)
                        .map_err(|e| io_err("inspect a host entry", host.join(&rel), e))?
                {
                    let lnode = node_at(l.as_fd(), &name, &lst)
                        .map_err(|e| io_err("inspect a host entry", host.join(&rel), e))?;
                    deleted_tree(n, &host_fd, host, rel, lnode, true, &mut found)?;
                }
                continue;
            }
            present.insert(name.clone());
            let unode = match node_at(udir.as_fd(), &name, &ust) {
                Ok(node) => node,
                Err(Errno::ENOENT | Errno::ELOOP) => continue, // gone or replaced meanwhile
                Err(e) => return Err(io_err("inspect an upper entry", upper.join(&rel), e)),
            };
            if unode.kind == NodeKind::Dir || unode.kind == NodeKind::File {
                refuse_unsupported_xattrs(udir.as_fd(), &name, unode.kind).map_err(|reason| {
                    StageError::Invalid {
                        path: upper.join(&rel),
                        reason,
                    }
                })?;
            }
            let lower = match &ldir {
                Some(l) => match lstat_at(l.as_fd(), &name)
                    .map_err(|e| io_err("inspect a host entry", host.join(&rel), e))?
                {
                    Some(lst) => Some((
                        node_at(l.as_fd(), &name, &lst)
                            .map_err(|e| io_err("inspect a host entry", host.join(&rel), e))?,
                        lst,
                    )),
                    None => None,
                },
                None => None,
            };
            let push =
                |found: &mut Vec<Found>, kind: ChangeKind, replaces_dir: bool, node: Node| {
                    found.push(Found {
                        change: Change {
                            root: n,
                            path: rel.clone(),
                            kind,
                            node,
                        },
                        rename_source: false,
                        replaces_dir,
                    });
                };
            match lower {
                None => {
                    let is_dir = unode.kind == NodeKind::Dir;
                    push(&mut found, ChangeKind::Created, false, unode);
                    if is_dir {
                        stack.push(Frame {
                            rel: rel.clone(),
                            depth: frame.depth + 1,
                            hidden: true,
                            lower_dir: false,
                        });
                    }
                }
                Some((lnode, lst)) => {
                    if unode.kind == NodeKind::Dir && lnode.kind == NodeKind::Dir {
                        let opaque = is_opaque(udir.as_fd(), &name).map_err(|e| {
                            io_err("inspect an upper directory", upper.join(&rel), e)
                        })?;
                        if unode.mode != lnode.mode {
                            push(&mut found, ChangeKind::ModeChanged, false, unode);
                        }
                        stack.push(Frame {
                            rel: rel.clone(),
                            depth: frame.depth + 1,
                            hidden: frame.hidden || opaque,
                            lower_dir: true,
                        });
                    } else if unode.kind != lnode.kind {
                        let was_dir = lnode.kind == NodeKind::Dir;
                        let is_dir = unode.kind == NodeKind::Dir;
                        if was_dir {
                            deleted_children(n, &host_fd, host, &rel, &mut found)?;
                        }
                        push(&mut found, ChangeKind::Modified, was_dir, unode);
                        if is_dir {
                            stack.push(Frame {
                                rel: rel.clone(),
                                depth: frame.depth + 1,
                                hidden: true,
                                lower_dir: false,
                            });
                        }
                    } else {
                        let content_differs = match unode.kind {
                            NodeKind::File => {
                                unode.size != lnode.size || {
                                    let u = digest_file_at(udir.as_fd(), &name).map_err(|e| {
                                        io_err("read an upper file", upper.join(&rel), e)
                                    })?;
                                    let l = ldir.as_ref().map(|l| digest_file_at(l.as_fd(), &name));
                                    match l {
                                        Some(Ok(l)) => u != l,
                                        Some(Err(e)) => {
                                            return Err(io_err(
                                                "read a host file",
                                                host.join(&rel),
                                                e,
                                            ));
                                        }
                                        None => true,
                                    }
                                }
                            }
                            NodeKind::Symlink => unode.link_target != lnode.link_target,
                            _ => ust.st_rdev != lst.st_rdev,
                        };
                        if content_differs {
                            push(&mut found, ChangeKind::Modified, false, unode);
                        } else if unode.mode != lnode.mode || unode.file_caps != lnode.file_caps {
                            push(&mut found, ChangeKind::ModeChanged, false, unode);
                        }
                    }
                }
            }
            if found.len() > MAX_CHANGES {
                return Err(StageError::Invalid {
                    path: upper.to_path_buf(),
                    reason: format!("more than {MAX_CHANGES} changes"),
                });
            }
        }
        if frame.hidden
            && let Some(l) = &ldir
        {
            let lnames = list_dir(l)
                .map_err(|e| io_err("list a host directory", host.join(&frame.rel), e))?;
            for name in lnames {
                if present.contains(&name) {
                    continue;
                }
                let rel = child_path(&frame.rel, &name, frame.depth + 1, host)?;
                if let Some(lst) = lstat_at(l.as_fd(), &name)
                    .map_err(|e| io_err("inspect a host entry", host.join(&rel), e))?
                {
                    let lnode = node_at(l.as_fd(), &name, &lst)
                        .map_err(|e| io_err("inspect a host entry", host.join(&rel), e))?;
                    deleted_tree(n, &host_fd, host, rel, lnode, true, &mut found)?;
                }
            }
        }
    }
    pair_renames(&host_fd, host, &upper_fd, upper, &mut found)?;
    let mut changes: Vec<(bool, Change)> = found
        .into_iter()
        .map(|f| (f.replaces_dir, f.change))
        .collect();
    changes.sort_by(|(ra, a), (rb, b)| order_key(a, *ra).cmp(&order_key(b, *rb)));
    Ok(changes.into_iter().map(|(_, c)| c).collect())
}

/// `Deleted` for the host node `node` at `rel` and, for a directory,
/// everything below it.
fn deleted_tree(
    n: usize,
    host_fd: &OwnedFd,
    host: &Path,
    rel: PathBuf,
    node: Node,
    top_is_source: bool,
    found: &mut Vec<Found>,
) -> Result<(), StageError> {
    let is_dir = node.kind == NodeKind::Dir;
    let source = top_is_source && matches!(node.kind, NodeKind::File | NodeKind::Symlink);
    if is_dir {
        deleted_children(n, host_fd, host, &rel, found)?;
    }
    found.push(Found {
        change: Change {
            root: n,
            path: rel,
            kind: ChangeKind::Deleted,
            node,
        },
        rename_source: source,
        replaces_dir: false,
    });
    Ok(())
}

/// `Deleted` for everything below the host directory at `rel` (not the
/// directory itself), with an explicit stack.
fn deleted_children(
    n: usize,
    host_fd: &OwnedFd,
    host: &Path,
    rel: &Path,
    found: &mut Vec<Found>,
) -> Result<(), StageError> {
    let mut stack = vec![rel.to_path_buf()];
    while let Some(dir_rel) = stack.pop() {
        let depth = dir_rel.components().count();
        let dir = open_beneath(host_fd, &dir_rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY)
            .map_err(|e| io_err("open a host directory", host.join(&dir_rel), e))?;
        for name in
            list_dir(&dir).map_err(|e| io_err("list a host directory", host.join(&dir_rel), e))?
        {
            let child = child_path(&dir_rel, &name, depth + 1, host)?;
            let Some(st) = lstat_at(dir.as_fd(), &name)
                .map_err(|e| io_err("inspect a host entry", host.join(&child), e))?
            else {
                continue;
            };
            let node = node_at(dir.as_fd(), &name, &st)
                .map_err(|e| io_err("inspect a host entry", host.join(&child), e))?;
            if node.kind == NodeKind::Dir {
                stack.push(child.clone());
            }
            found.push(Found {
                change: Change {
                    root: n,
                    path: child,
                    kind: ChangeKind::Deleted,
                    node,
                },
                rename_source: false,
                replaces_dir: false,
            });
            if found.len() > MAX_CHANGES {
                return Err(StageError::Invalid {
                    path: host.to_path_buf(),
                    reason: format!("more than {MAX_CHANGES} changes"),
                });
            }
        }
    }
    Ok(())
}

/// Turn created + deleted pairs of equal files and symlinks into renames:
/// each created node, in path order, takes the first unused deleted rename
/// source (in path order) of the same kind, mode, size, target and
/// capabilities whose content digest is equal.
fn pair_renames(
    host_fd: &OwnedFd,
    host: &Path,
    upper_fd: &OwnedFd,
    upper: &Path,
    found: &mut Vec<Found>,
) -> Result<(), StageError> {
    type Key = (NodeKind, u32, u64, Option<PathBuf>, bool);
    let key = |node: &Node| -> Key {
        (
            node.kind,
            node.mode,
            node.size,
            node.link_target.clone(),
            node.file_caps,
        )
    };
    let mut sources: BTreeMap<PathBuf, usize> = BTreeMap::new();
    let mut by_key: HashMap<Key, Vec<PathBuf>> = HashMap::new();
    for (i, f) in found.iter().enumerate() {
        if f.rename_source {
            sources.insert(f.change.path.clone(), i);
            by_key
                .entry(key(&f.change.node))
                .or_default()
                .push(f.change.path.clone());
        }
    }
    if sources.is_empty() {
        return Ok(());
    }
    for paths in by_key.values_mut() {
        paths.sort();
    }
    let mut created: Vec<(PathBuf, usize)> = found
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            f.change.kind == ChangeKind::Created
                && matches!(f.change.node.kind, NodeKind::File | NodeKind::Symlink)
        })
        .map(|(i, f)| (f.change.path.clone(), i))
        .collect();
    created.sort();
    let mut host_digests: HashMap<PathBuf, Digest> = HashMap::new();
    let mut used: BTreeSet<usize> = BTreeSet::new();
    for (path, ci) in created {
        let Some(c) = found.get(ci) else { continue };
        let Some(candidates) = by_key.get(&key(&c.change.node)) else {
            continue;
        };
        let is_file = c.change.node.kind == NodeKind::File;
        let mut upper_digest: Option<Digest> = None;
        let mut chosen: Option<(PathBuf, usize)> = None;
        for from in candidates {
            let Some(&di) = sources.get(from) else {
                continue;
            };
            if used.contains(&di) {
                continue;
            }
            if is_file {
                if upper_digest.is_none() {
                    upper_digest = Some(
                        digest_beneath(upper_fd, &path)
                            .map_err(|e| io_err("read an upper file", upper.join(&path), e))?,
                    );
                }
                let d = match host_digests.get(from) {
                    Some(d) => *d,
                    None => {
                        let d = digest_beneath(host_fd, from)
                            .map_err(|e| io_err("read a host file", host.join(from), e))?;
                        host_digests.insert(from.clone(), d);
                        d
                    }
                };
                if Some(d) != upper_digest {
                    continue;
                }
            }
            chosen = Some((from.clone(), di));
            break;
        }
        if let Some((from, di)) = chosen {
            used.insert(di);
            if let Some(c) = found.get_mut(ci) {
                c.change.kind = ChangeKind::Renamed { from };
            }
        }
    }
    let mut i = 0usize;
    found.retain(|_| {
        let keep = !used.contains(&i);
        i += 1;
        keep
    });
    Ok(())
}

/// `rel/name`, refused past the depth and length limits.
fn child_path(rel: &Path, name: &OsStr, depth: usize, base: &Path) -> Result<PathBuf, StageError> {
    let child = rel.join(name);
    if depth > MAX_DEPTH {
        return Err(StageError::Invalid {
            path: base.join(&child),
            reason: format!("deeper than {MAX_DEPTH} components"),
        });
    }
    if child.as_os_str().len() > MAX_PATH_BYTES {
        return Err(StageError::Invalid {
            path: base.join(rel),
            reason: format!("a path below is longer than {MAX_PATH_BYTES} bytes"),
        });
    }
    Ok(child)
}

pub(crate) fn io_err(
    what: &'static str,
    path: PathBuf,
    e: impl Into<std::io::Error>,
) -> StageError {
    StageError::Io {
        what,
        path,
        source: e.into(),
    }
}

/// Open a root directory itself (a path the operator chose).
pub(crate) fn open_root(path: &Path, what: &'static str) -> Result<OwnedFd, StageError> {
    nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err(what, path.to_path_buf(), e))
}

/// `openat2(dir, rel)` never following a symlink and never leaving `dir`;
/// the last component is not followed either.
pub(crate) fn open_beneath(dir: &impl AsFd, rel: &Path, flags: OFlag) -> Result<OwnedFd, Errno> {
    let rel: &Path = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(Errno::EXDEV);
    }
    let how = OpenHow::new()
        .flags(flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
    nix::fcntl::openat2(dir.as_fd(), rel, how)
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; `None` when absent.
pub(crate) fn lstat_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Option<FileStat>, Errno> {
    match nix::sys::stat::fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The kind of a stat.
pub(crate) fn kind_of(st: &FileStat) -> NodeKind {
    match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFDIR => NodeKind::Dir,
        SFlag::S_IFLNK => NodeKind::Symlink,
        SFlag::S_IFCHR => NodeKind::CharDevice,
        SFlag::S_IFBLK => NodeKind::BlockDevice,
        SFlag::S_IFIFO => NodeKind::Fifo,
        SFlag::S_IFSOCK => NodeKind::Socket,
        _ => NodeKind::File,
    }
}

/// The [`Node`] of the entry `name` of `dir` whose stat is `st`.
pub(crate) fn node_at(dir: BorrowedFd<'_>, name: &OsStr, st: &FileStat) -> Result<Node, Errno> {
    let kind = kind_of(st);
    let link_target = if kind == NodeKind::Symlink {
        Some(PathBuf::from(nix::fcntl::readlinkat(dir, name)?))
    } else {
        None
    };
    let file_caps = if kind == NodeKind::File {
        let fd = open_entry(dir, name, OFlag::O_RDONLY)?;
        xattr_get(fd.as_fd(), c"security.capability")?.is_some()
    } else {
        false
    };
    Ok(Node {
        kind,
        mode: st.st_mode & 0o7777,
        size: if kind == NodeKind::File {
            st.st_size.max(0) as u64
        } else {
            0
        },
        link_target,
        file_caps,
    })
}

/// Open the entry `name` of `dir` itself, without following it and
/// without blocking on a FIFO or taking a terminal.
pub(crate) fn open_entry(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    flags: OFlag,
) -> Result<OwnedFd, Errno> {
    nix::fcntl::openat(
        dir,
        name,
        flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// The value of one xattr (at most 256 bytes are read; a longer value is
/// `Some` with its first bytes absent), `None` when absent.
pub(crate) fn xattr_get(fd: BorrowedFd<'_>, name: &CStr) -> Result<Option<Vec<u8>>, Errno> {
    let mut buf = [0u8; 256];
    match crate::sys::fgetxattr(fd, name, &mut buf) {
        Ok(len) => Ok(Some(buf.get(..len).unwrap_or(&[]).to_vec())),
        Err(libc::ENODATA) => Ok(None),
        Err(libc::ERANGE) => Ok(Some(Vec::new())),
        Err(libc::ENOTSUP) => Ok(None),
        Err(e) => Err(Errno::from_raw(e)),
    }
}

/// The two prefixes an overlay's own xattrs carry.
const OVERLAY_PREFIXES: [&str; 2] = ["user.overlay.", "trusted.overlay."];

fn overlay_xattr(fd: BorrowedFd<'_>, suffix: &str) -> Result<Option<Vec<u8>>, Errno> {
    for prefix in OVERLAY_PREFIXES {
        let Ok(name) = std::ffi::CString::new(format!("{prefix}{suffix}")) else {
            continue;
        };
        if let Some(v) = xattr_get(fd, &name)? {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// Whether the upper entry is an overlayfs whiteout (a 0/0 character
/// device, or a zero-size regular file with the `overlay.whiteout` xattr).
///
/// As the kernel does, the xattr form counts only in a directory marked
/// `overlay.opaque` = `x` (`xwhiteouts`, see [`has_xwhiteouts`]); elsewhere
/// such a file is an empty file.
pub(crate) fn is_whiteout(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    st: &FileStat,
    xwhiteouts: bool,
) -> Result<bool, Errno> {
    match kind_of(st) {
        NodeKind::CharDevice => Ok(st.st_rdev == 0),
        NodeKind::File if st.st_size == 0 && xwhiteouts => {
            let fd = open_entry(dir, name, OFlag::O_RDONLY)?;
            Ok(overlay_xattr(fd.as_fd(), "whiteout")?.is_some())
        }
        _ => Ok(false),
    }
}

/// Whether the open upper directory `dir` may hold xattr whiteouts
/// (`overlay.opaque` = `x`).
pub(crate) fn has_xwhiteouts(dir: BorrowedFd<'_>) -> Result<bool, Errno> {
    Ok(overlay_xattr(dir, "opaque")?.as_deref() == Some(b"x"))
}

/// Whether the upper directory `name` is opaque (`overlay.opaque` = `y`).
fn is_opaque(dir: BorrowedFd<'_>, name: &OsStr) -> Result<bool, Errno> {
    let fd = open_entry(dir, name, OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
    Ok(overlay_xattr(fd.as_fd(), "opaque")?.as_deref() == Some(b"y"))
}

/// Refuse an upper node whose data or name the overlay keeps elsewhere.
fn refuse_unsupported_xattrs(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    kind: NodeKind,
) -> Result<(), String> {
    let flags = if kind == NodeKind::Dir {
        OFlag::O_RDONLY | OFlag::O_DIRECTORY
    } else {
        OFlag::O_RDONLY
    };
    let fd = open_entry(dir, name, flags)
        .map_err(|e| format!("cannot open it to read its xattrs: {e}"))?;
    for suffix in ["redirect", "metacopy"] {
        if overlay_xattr(fd.as_fd(), suffix)
            .map_err(|e| format!("cannot read its xattrs: {e}"))?
            .is_some()
        {
            return Err(format!(
                "carries the overlay `{suffix}` xattr, which a `userxattr` overlay never sets; refused rather than misread"
            ));
        }
    }
    Ok(())
}

/// The names in a directory, sorted, without `.` and `..`.
pub(crate) fn list_dir(dir: &OwnedFd) -> Result<Vec<OsString>, Errno> {
    let dup = dir
        .try_clone()
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    let mut d = nix::dir::Dir::from_fd(dup)?;
    let mut names = Vec::new();
    for entry in d.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        names.push(OsStr::from_bytes(name).to_os_string());
    }
    names.sort();
    Ok(names)
}

/// SHA-256 of a reader's bytes.
pub(crate) fn digest_reader(mut r: impl Read) -> std::io::Result<Digest> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(buf.get(..n).unwrap_or(&[]));
    }
    Ok(Digest(h.finalize().into()))
}

/// SHA-256 of bytes.
pub(crate) fn digest_bytes(b: &[u8]) -> Digest {
    Digest(Sha256::digest(b).into())
}

/// SHA-256 of the regular file `name` of `dir` (not followed).
pub(crate) fn digest_file_at(dir: BorrowedFd<'_>, name: &OsStr) -> std::io::Result<Digest> {
    let fd = open_entry(dir, name, OFlag::O_RDONLY)?;
    let file = std::fs::File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    digest_reader(file)
}

/// SHA-256 of the regular file at `rel` below `root` (nothing followed).
fn digest_beneath(root: &OwnedFd, rel: &Path) -> std::io::Result<Digest> {
    let fd = open_beneath(
        root,
        rel,
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY,
    )?;
    let file = std::fs::File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    digest_reader(file)
}

#[cfg(any(test, feature = "testing"))]
impl Stage {
    /// A stage from its parts, for tests that build the layout by hand:
    /// `(root, upper, work, quarantine, started)` per root. Not public API.
    #[doc(hidden)]
    pub fn __simulate_assembled(
        dir: PathBuf,
        session: String,
        roots: Vec<(PathBuf, PathBuf, PathBuf, PathBuf, super::Stamp)>,
    ) -> Stage {
        Stage {
            dir,
            session,
            roots: roots
                .into_iter()
                .map(
                    |(root, upper, work, quarantine, started)| super::StagedRoot {
                        root,
                        upper,
                        work,
                        quarantine,
                        started,
                        // Not measured for a hand-built stage (h-mount's
                        // field; added here only to keep this compiling).
                        same_fs: false,
                    },
                )
                .collect(),
        }
    }

    /// The xattr names of the file or directory at `path` (not followed),
    /// for tests of what the commit strips. Not public API.
    #[doc(hidden)]
    pub fn __simulate_xattr_names(path: &Path) -> std::io::Result<Vec<String>> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let mut buf = vec![0u8; 64 * 1024];
        let len = crate::sys::flistxattr(fd.as_fd(), &mut buf)
            .map_err(std::io::Error::from_raw_os_error)?;
        Ok(buf
            .get(..len)
            .unwrap_or(&[])
            .split(|b| *b == 0)
            .filter(|n| !n.is_empty())
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect())
    }

    /// Set the xattr `name` of the file or directory at `path` (not followed),
    /// for tests that build an overlay upper layer by hand. Not public API.
    #[doc(hidden)]
    pub fn __simulate_set_xattr(path: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let name = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
        crate::sys::fsetxattr(fd.as_fd(), &name, value).map_err(std::io::Error::from_raw_os_error)
    }
}
