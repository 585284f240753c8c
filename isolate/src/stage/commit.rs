//! Applying a filtered change set to the host (owner: change set and commit).
//!
//! [`Stage::commit`] takes the changes in order. A refused one is moved to
//! the root's quarantine; a selected, accepted one is first checked for a
//! conflict, then applied with one atomic step, then removed from the upper
//! layer, so that the stage always shows what is left: a commit that stops
//! half-way (an IO error, a refused record, a crash) loses nothing, and
//! whatever is still in the upper was not applied.
//!
//! Every host path is reached from a descriptor of the host root with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`
//! for its parent and `*at` calls on the last component, so a symlink
//! anywhere (planted by the worker or not) is never followed and nothing
//! outside the root is touched.
//!
//! Conflicts, against the root's [`Stamp`](super::Stamp) (the ctime clock
//! when the stage was created):
//! - created (or renamed-to) path: the host must still have nothing there
//!   (the final step is a `RENAME_NOREPLACE` or `mkdir`, so even a race is
//!   caught);
//! - modified, mode-changed, deleted or renamed-from non-directory: the
//!   host node must still be there, of the kind the change expects, with a
//!   ctime not later than the stamp (a write, chmod, chown, rename or link
//!   on the host since then makes it later);
//! - directories: only their presence and kind are compared, never their
//!   ctime, which moves whenever an entry inside is added or removed (by the
//!   host or by this very commit): a host directory that gained unrelated
//!   entries is no conflict for a file created in it, and a mode change of
//!   a directory is applied over a host chmod of it. A deleted directory
//!   that is not empty on the host (it gained entries, or a refused or
//!   conflicting child kept one) is a conflict, never a recursive removal;
//! - a host parent directory that is missing, or a symlink, is a conflict;
//! - an upper node that is no longer what the change set says (the stage
//!   moved on since [`Stage::changes`]) is a conflict.
//!
//! Before the first change, each root's stage filesystem is synced
//! (`syncfs`): a node's bytes are on disk before it is renamed onto the host,
//! so a power loss leaves every node either in the upper or on the host with
//! its bytes.
//!
//! Application: a file or symlink is renamed from the upper layer onto the
//! host path (the same filesystem: one `renameat`, replacing atomically;
//! `RENAME_NOREPLACE` for a created path; `RENAME_EXCHANGE` then `rmdir` of
//! the old, empty directory when it replaces a directory), after its mode is
//! checked to be the one the filter judged and its `*.overlay.*`, ACL and
//! `security.capability` xattrs are removed. Across filesystems it is copied
//! (content, owner and mode, no xattrs) to a temporary name in the host
//! directory, `fsync`ed and renamed; the upper copy goes only after that. A
//! created directory is `mkdir`ed with its mode and owner. The owner (only a
//! root launcher sets one; anything else makes every node as itself) is the
//! upper node's, set before the mode, as a change of owner clears setuid
//! bits, and before the node is renamed into place. A renamed node is the
//! host node itself renamed (`RENAME_NOREPLACE`); a deletion is `unlink` or
//! `rmdir`; a mode change is `fchmod` on the node opened without following
//! it. Empty upper directories with nothing left below them are removed at
//! the end.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::io::{Seek, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{OFlag, RenameFlags, renameat, renameat2};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat};
use nix::unistd::UnlinkatFlags;

use super::scan::{
    digest_bytes, digest_file_at, digest_reader, has_xwhiteouts, io_err, is_whiteout, kind_of,
    lstat_at, open_beneath, open_entry, open_root,
};
use super::{
    Change, ChangeKind, ChangeSet, Digest, FilterVerdict, NodeKind, Refusal, Stage, StageError,
    Stamp,
};

/// What became of one change during [`Stage::commit`], in order.
#[derive(Debug)]
#[non_exhaustive]
pub enum CommitEvent<'a> {
    /// Applied to the host: the host node's digest before (`None`: absent,
    /// or a directory) and after (`None`: deleted, or a directory).
    Applied {
        /// The change.
        change: &'a Change,
        /// The host's digest before.
        before: Option<Digest>,
        /// The host's digest after.
        after: Option<Digest>,
    },
    /// Refused by the filter and moved to the quarantine.
    Refused {
        /// The change.
        change: &'a Change,
        /// The filter's reason.
        refusal: &'a Refusal,
        /// Where it is kept now.
        quarantined: PathBuf,
    },
    /// The host path changed since the stage was created: not applied,
    /// left in the stage.
    Conflict {
        /// The change.
        change: &'a Change,
        /// What changed on the host.
        detail: String,
    },
}

/// Totals of one [`Stage::commit`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommitReport {
    /// Changes applied.
    pub applied: usize,
    /// Changes refused and quarantined.
    pub refused: usize,
    /// Conflicts left in the stage.
    pub conflicts: usize,
    /// Changes not selected by `only`, left in the stage.
    pub skipped: usize,
}

impl Stage {
    /// Apply `set` with its filter `verdicts` (one per change, as
    /// [`CommitFilter::check`](super::CommitFilter::check) returns them),
    /// calling `record` after each change; `only` (paths relative to their
    /// root, with the root index) limits the commit to those paths and what
    /// is under them (plus the directories the worker created or replaced
    /// above them, without which they could not land).
    ///
    /// Refused changes are moved to `<n>/quarantine/<path>` (a deletion
    /// leaves a 0/0 whiteout there; a directory, an empty directory) and
    /// never reach the host; conflicts and unselected changes stay in the
    /// stage. The module documentation (`stage/commit.rs`) gives the
    /// conflict rules and how each kind is applied.
    ///
    /// An IO error stops the commit with [`StageError::Io`]; a `record` that
    /// returns `Err` stops it with [`StageError::Record`] naming the path. In
    /// both cases every change already applied has had its event delivered
    /// (but the last, for `Record`) and everything not applied is still in
    /// the stage.
    pub fn commit(
        &self,
        set: &ChangeSet,
        verdicts: &[FilterVerdict],
        only: Option<&[(usize, PathBuf)]>,
        record: &mut dyn FnMut(&CommitEvent<'_>) -> Result<(), String>,
    ) -> Result<CommitReport, StageError> {
        if verdicts.len() != set.changes.len() {
            return Err(StageError::Invalid {
                path: self.dir.clone(),
                reason: format!(
                    "{} verdicts for {} changes: each change needs exactly one",
                    verdicts.len(),
                    set.changes.len()
                ),
            });
        }
        let mut roots = Vec::with_capacity(self.roots.len());
        for r in &self.roots {
            roots.push(RootFds {
                host: open_root(&r.root, "open the host root")?,
                upper: open_root(&r.upper, "open the upper layer")?,
                quarantine: open_root(&r.quarantine, "open the quarantine")?,
                stamp: r.started,
                host_path: r.root.clone(),
                upper_path: r.upper.clone(),
                quarantine_path: r.quarantine.clone(),
                host_cache: DirCache::default(),
                upper_cache: DirCache::default(),
            });
        }
        // Write the staged data out in one batch first: a rename that
        // replaces a host file then finds its data on disk (ext4 would
        // otherwise flush each one before its rename, one by one), and what
        // lands on the host is durable before it lands.
        for fds in &roots {
            nix::unistd::syncfs(&fds.upper)
                .map_err(|e| io_err("sync the stage", fds.upper_path.clone(), e))?;
        }
        let mut report = CommitReport::default();
        // Per root: directories of the upper to try to remove at the end, and
        // the paths left in the stage (nothing above them is removed).
        let mut visited: Vec<BTreeSet<PathBuf>> = vec![BTreeSet::new(); roots.len()];
        let mut left: Vec<BTreeSet<PathBuf>> = vec![BTreeSet::new(); roots.len()];
        for (change, verdict) in set.changes.iter().zip(verdicts) {
            let Some(fds) = roots.get(change.root) else {
                return Err(StageError::Invalid {
                    path: self.dir.clone(),
                    reason: format!(
                        "a change names root {}, the stage has {}",
                        change.root,
                        roots.len()
                    ),
                });
            };
            check_relative(&change.path).map_err(|reason| StageError::Invalid {
                path: change.path.clone(),
                reason,
            })?;
            if let ChangeKind::Renamed { from } = &change.kind {
                check_relative(from).map_err(|reason| StageError::Invalid {
                    path: from.clone(),
                    reason,
                })?;
            }
            if let Some(v) = visited.get_mut(change.root) {
                let own = change.node.kind == NodeKind::Dir;
                with_ancestors(v, &change.path, own);
            }
            if let Some(only) = only
                && !selected(change, only, set)
            {
                report.skipped += 1;
                if let Some(l) = left.get_mut(change.root) {
                    with_ancestors(l, &change.path, true);
                }
                continue;
            }
            let stop = |detail: String| StageError::Record {
                path: change.path.clone(),
                detail,
            };
            match verdict {
                FilterVerdict::Refuse(refusal) => {
                    let quarantined = quarantine(fds, change);
                    fds.forget(change);
                    let quarantined = quarantined?;
                    report.refused += 1;
                    record(&CommitEvent::Refused {
                        change,
                        refusal,
                        quarantined,
                    })
                    .map_err(stop)?;
                }
                FilterVerdict::Commit => match applied(fds, change)? {
                    Outcome::Applied { before, after } => {
                        report.applied += 1;
                        record(&CommitEvent::Applied {
                            change,
                            before,
                            after,
                        })
                        .map_err(stop)?;
                    }
                    Outcome::Conflict(detail) => {
                        report.conflicts += 1;
                        if let Some(l) = left.get_mut(change.root) {
                            with_ancestors(l, &change.path, true);
                        }
                        record(&CommitEvent::Conflict { change, detail }).map_err(stop)?;
                    }
                },
            }
        }
        for ((fds, dirs), left) in roots.iter().zip(visited).zip(left) {
            tidy_upper(fds, dirs, &left)?;
        }
        Ok(report)
    }
}

/// The descriptors and facts of one root during a commit.
struct RootFds {
    host: OwnedFd,
    upper: OwnedFd,
    quarantine: OwnedFd,
    stamp: Stamp,
    host_path: PathBuf,
    upper_path: PathBuf,
    quarantine_path: PathBuf,
    host_cache: DirCache,
    upper_cache: DirCache,
}

impl RootFds {
    /// After a change at `path` (and `from`): no cached directory at or
    /// below them survives.
    fn forget(&self, change: &Change) {
        for cache in [&self.host_cache, &self.upper_cache] {
            cache.forget(&change.path);
            if let ChangeKind::Renamed { from } = &change.kind {
                cache.forget(from);
            }
        }
    }
}

/// The last directory resolved below one root, so that consecutive changes
/// in one directory resolve it once; forgotten as soon as a change touches
/// it or anything above it.
#[derive(Default)]
struct DirCache(RefCell<Option<(PathBuf, Rc<OwnedFd>)>>);

impl DirCache {
    fn get(&self, dir: &Path) -> Option<Rc<OwnedFd>> {
        match &*self.0.borrow() {
            Some((key, fd)) if key == dir => Some(Rc::clone(fd)),
            _ => None,
        }
    }
    fn put(&self, dir: &Path, fd: OwnedFd) -> Rc<OwnedFd> {
        let fd = Rc::new(fd);
        *self.0.borrow_mut() = Some((dir.to_path_buf(), Rc::clone(&fd)));
        fd
    }
    /// Forget the cached directory if it is `path` or below it.
    fn forget(&self, path: &Path) {
        let mut slot = self.0.borrow_mut();
        if slot.as_ref().is_some_and(|(key, _)| key.starts_with(path)) {
            *slot = None;
        }
    }
}

/// What [`apply`] did.
enum Outcome {
    Applied {
        before: Option<Digest>,
        after: Option<Digest>,
    },
    Conflict(String),
}

/// Whether `change` is selected by `only`: under one of its paths, or a
/// directory the worker created or replaced above one of them.
fn selected(change: &Change, only: &[(usize, PathBuf)], _set: &ChangeSet) -> bool {
    only.iter().any(|(root, p)| {
        *root == change.root
            && (change.path.starts_with(p)
                || (change.node.kind == NodeKind::Dir
                    && matches!(change.kind, ChangeKind::Created | ChangeKind::Modified)
                    && p.starts_with(&change.path)))
    })
}

/// A change's path must be relative, non-empty, with normal components.
fn check_relative(p: &Path) -> Result<(), String> {
    if p.as_os_str().is_empty() {
        return Err(String::from("an empty change path"));
    }
    if !p
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)))
    {
        return Err(String::from(
            "a change path must be relative with no `.` or `..`",
        ));
    }
    Ok(())
}

/// Split a change path into its parent and last component.
fn split(p: &Path) -> (&Path, &OsStr) {
    (
        p.parent().unwrap_or(Path::new("")),
        p.file_name().unwrap_or(OsStr::new("")),
    )
}

/// Whether a host stat is later than the stamp.
fn changed_since(st: &FileStat, stamp: Stamp) -> bool {
    Stamp {
        sec: st.st_ctime,
        nsec: st.st_ctime_nsec,
    } > stamp
}

/// The digest of a host node for `before`: a file's content, a symlink's
/// target bytes, `None` for anything else.
fn host_digest(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    st: &FileStat,
) -> std::io::Result<Option<Digest>> {
    match kind_of(st) {
        NodeKind::File => digest_file_at(dir, name).map(Some),
        NodeKind::Symlink => {
            let t = nix::fcntl::readlinkat(dir, name)?;
            Ok(Some(digest_bytes(t.as_bytes())))
        }
        _ => Ok(None),
    }
}

/// As root, give the host node `fd` the owner of the upper node `st` (the
/// one the worker gave it: its own, or, for a node copied up, the host
/// node's), before its mode is set (a change of owner clears setuid bits)
/// and before it is renamed into place. A launcher that is not root owns
/// everything it makes, as it owns the upper, and changes nothing.
fn own_like(fd: BorrowedFd<'_>, st: &FileStat) -> Result<(), Errno> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    nix::unistd::fchown(
        fd,
        Some(nix::unistd::Uid::from_raw(st.st_uid)),
        Some(nix::unistd::Gid::from_raw(st.st_gid)),
    )
}

/// [`own_like`] for the entry `name` of `dir`, not followed (a symlink).
fn own_entry_like(dir: BorrowedFd<'_>, name: &OsStr, st: &FileStat) -> Result<(), Errno> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    nix::unistd::fchownat(
        dir,
        name,
        Some(nix::unistd::Uid::from_raw(st.st_uid)),
        Some(nix::unistd::Gid::from_raw(st.st_gid)),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh temporary name for the host directory.
fn temp_name() -> OsString {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    OsString::from(format!(".palisade-commit-{}-{n}.tmp", std::process::id()))
}

/// Run `create` on fresh temporary names until one is free (a name the
/// worker planted is skipped, not overwritten): the name and the result.
fn at_temp<T>(mut create: impl FnMut(&OsStr) -> Result<T, Errno>) -> Result<(OsString, T), Errno> {
    for _ in 0..64 {
        let tmp = temp_name();
        match create(&tmp) {
            Ok(v) => return Ok((tmp, v)),
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Errno::EEXIST)
}

/// Resolve the host parent of `path`; a conflict when it is missing or not
/// a directory reachable without symlinks.
fn host_parent(fds: &RootFds, parent: &Path) -> Result<Result<Rc<OwnedFd>, String>, StageError> {
    if let Some(fd) = fds.host_cache.get(parent) {
        return Ok(Ok(fd));
    }
    match open_beneath(&fds.host, parent, OFlag::O_PATH | OFlag::O_DIRECTORY) {
        Ok(fd) => Ok(Ok(fds.host_cache.put(parent, fd))),
        Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP | Errno::EXDEV) => Ok(Err(format!(
            "the host parent directory `{}` is missing, not a directory, or reached through a symlink",
            parent.display()
        ))),
        Err(e) => Err(io_err(
            "open a host directory",
            fds.host_path.join(parent),
            e,
        )),
    }
}

/// Resolve the upper parent of `path`; a conflict when the stage moved on.
fn upper_parent(fds: &RootFds, parent: &Path) -> Result<Result<Rc<OwnedFd>, String>, StageError> {
    if let Some(fd) = fds.upper_cache.get(parent) {
        return Ok(Ok(fd));
    }
    match open_beneath(&fds.upper, parent, OFlag::O_PATH | OFlag::O_DIRECTORY) {
        Ok(fd) => Ok(Ok(fds.upper_cache.put(parent, fd))),
        Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP | Errno::EXDEV) => Ok(Err(String::from(
            "the stage changed since the change set was computed",
        ))),
        Err(e) => Err(io_err(
            "open an upper directory",
            fds.upper_path.join(parent),
            e,
        )),
    }
}

macro_rules! conflict {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(detail) => return Ok(Outcome::Conflict(detail)),
        }
    };
}

/// [`apply`], then forget the cached directories it may have replaced.
fn applied(fds: &RootFds, change: &Change) -> Result<Outcome, StageError> {
    let outcome = apply(fds, change);
    fds.forget(change);
    outcome
}

fn apply(fds: &RootFds, change: &Change) -> Result<Outcome, StageError> {
    let (parent, name) = split(&change.path);
    let hpath = fds.host_path.join(&change.path);
    let hdir = conflict!(host_parent(fds, parent)?);
    let host = lstat_at(hdir.as_fd(), name)
        .map_err(|e| io_err("inspect a host path", hpath.clone(), e))?;
    // The host side first: is it still what the stage was made against?
    match (&change.kind, &host) {
        (ChangeKind::Created | ChangeKind::Renamed { .. }, Some(_)) => {
            return Ok(Outcome::Conflict(String::from(
                "the host created this path since the stage was made",
            )));
        }
        (ChangeKind::Created | ChangeKind::Renamed { .. }, None) => {}
        (_, None) => {
            return Ok(Outcome::Conflict(String::from(
                "the host removed this path since the stage was made",
            )));
        }
        (kind, Some(st)) => {
            let host_kind = kind_of(st);
            let expect_same = matches!(kind, ChangeKind::ModeChanged | ChangeKind::Deleted);
            if expect_same && host_kind != change.node.kind {
                return Ok(Outcome::Conflict(String::from(
                    "the host changed the kind of this node",
                )));
            }
            if host_kind != NodeKind::Dir && changed_since(st, fds.stamp) {
                return Ok(Outcome::Conflict(String::from(
                    "the host changed this node since the stage was made",
                )));
            }
        }
    }
    let before = match &host {
        Some(st) => host_digest(hdir.as_fd(), name, st)
            .map_err(|e| io_err("read a host file", hpath.clone(), e))?,
        None => None,
    };
    match &change.kind {
        ChangeKind::Deleted => apply_delete(fds, change, &hdir, name, &hpath, before),
        ChangeKind::Renamed { from } => apply_rename(fds, change, from, &hdir, name, &hpath),
        ChangeKind::ModeChanged => apply_mode(fds, change, &hdir, name, &hpath, before),
        ChangeKind::Created | ChangeKind::Modified => {
            let host_is_dir = host.as_ref().map(kind_of) == Some(NodeKind::Dir);
            match change.node.kind {
                NodeKind::Dir => apply_dir(fds, change, &hdir, name, &hpath, host.is_some()),
                _ => apply_node(
                    fds,
                    change,
                    &hdir,
                    name,
                    &hpath,
                    host.is_some(),
                    host_is_dir,
                    before,
                ),
            }
        }
    }
}

/// Put the prepared node `uname` of `udir` at the host path, atomically.
fn place(
    udir: BorrowedFd<'_>,
    uname: &OsStr,
    hdir: BorrowedFd<'_>,
    name: &OsStr,
    host_exists: bool,
    host_is_dir: bool,
) -> Result<Result<(), String>, Errno> {
    if !host_exists {
        return match renameat2(udir, uname, hdir, name, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => Ok(Ok(())),
            Err(Errno::EEXIST) => Ok(Err(String::from(
                "the host created this path during the commit",
            ))),
            Err(e) => Err(e),
        };
    }
    if !host_is_dir {
        return renameat(udir, uname, hdir, name).map(Ok);
    }
    // A host directory replaced by a non-directory: exchange, then remove
    // the old directory (empty: its deleted contents came first).
    renameat2(udir, uname, hdir, name, RenameFlags::RENAME_EXCHANGE)?;
    match nix::unistd::unlinkat(udir, uname, UnlinkatFlags::RemoveDir) {
        Ok(()) => Ok(Ok(())),
        Err(Errno::ENOTEMPTY | Errno::EEXIST) => {
            renameat2(udir, uname, hdir, name, RenameFlags::RENAME_EXCHANGE)?;
            Ok(Err(String::from(
                "the host directory this replaces is not empty",
            )))
        }
        Err(e) => Err(e),
    }
}

/// Whether the upper node still matches the change (kind, mode, size,
/// target).
fn upper_matches(
    udir: BorrowedFd<'_>,
    name: &OsStr,
    change: &Change,
) -> Result<Option<FileStat>, Errno> {
    let Some(st) = lstat_at(udir, name)? else {
        return Ok(None);
    };
    let node = &change.node;
    if kind_of(&st) != node.kind
        || st.st_mode & 0o7777 != node.mode && node.kind != NodeKind::Symlink
    {
        return Ok(None);
    }
    if node.kind == NodeKind::File && st.st_size.max(0) as u64 != node.size {
        return Ok(None);
    }
    if node.kind == NodeKind::Symlink {
        let t = nix::fcntl::readlinkat(udir, name)?;
        if node.link_target.as_deref() != Some(Path::new(&t)) {
            return Ok(None);
        }
    }
    Ok(Some(st))
}

/// Rename a copy made at the temporary name `tmp` in `hdir` onto `name`
/// (the cross-filesystem step of a file or symlink): a conflict removes the
/// copy again and says why (`Some`); an error names `what` and `hpath`.
fn place_copy(
    hdir: BorrowedFd<'_>,
    tmp: &OsStr,
    name: &OsStr,
    (host_exists, host_is_dir): (bool, bool),
    what: &'static str,
    hpath: &Path,
) -> Result<Option<String>, StageError> {
    match place(hdir, tmp, hdir, name, host_exists, host_is_dir) {
        Ok(Ok(())) => Ok(None),
        Ok(Err(detail)) => {
            let _ = nix::unistd::unlinkat(hdir, tmp, UnlinkatFlags::NoRemoveDir);
            Ok(Some(detail))
        }
        Err(e) => Err(io_err(what, hpath.to_path_buf(), e)),
    }
}

const STAGE_MOVED: &str = "the stage changed since the change set was computed";

#[allow(
    clippy::too_many_arguments,
    reason = "one step of apply with its resolved parts"
)]
fn apply_node(
    fds: &RootFds,
    change: &Change,
    hdir: &OwnedFd,
    name: &OsStr,
    hpath: &Path,
    host_exists: bool,
    host_is_dir: bool,
    before: Option<Digest>,
) -> Result<Outcome, StageError> {
    let (parent, _) = split(&change.path);
    let upath = fds.upper_path.join(&change.path);
    let udir = conflict!(upper_parent(fds, parent)?);
    let ioe = |what: &'static str| {
        let upath = upath.clone();
        move |e: Errno| io_err(what, upath, e)
    };
    let Some(ust) =
        upper_matches(udir.as_fd(), name, change).map_err(ioe("inspect an upper node"))?
    else {
        return Ok(Outcome::Conflict(String::from(STAGE_MOVED)));
    };
    let after = match change.node.kind {
        NodeKind::File => {
            let fd = open_entry(udir.as_fd(), name, OFlag::O_RDONLY)
                .map_err(ioe("open an upper file"))?;
            // The mode is the one the filter judged (checked on the open
            // descriptor, so it is this very inode's).
            let st = fstat(&fd).map_err(ioe("inspect an upper file"))?;
            if kind_of(&st) != NodeKind::File || st.st_mode & 0o7777 != change.node.mode {
                return Ok(Outcome::Conflict(String::from(STAGE_MOVED)));
            }
            strip_xattrs(fd.as_fd()).map_err(ioe("remove the overlay xattrs of an upper file"))?;
            let mut file = std::fs::File::from(fd);
            let d = digest_reader(&mut file)
                .map_err(|e| io_err("read an upper file", upath.clone(), e))?;
            match place(
                udir.as_fd(),
                name,
                hdir.as_fd(),
                name,
                host_exists,
                host_is_dir,
            ) {
                Ok(Ok(())) => {}
                Ok(Err(detail)) => return Ok(Outcome::Conflict(detail)),
                Err(Errno::EXDEV) => {
                    file.rewind()
                        .map_err(|e| io_err("read an upper file", upath.clone(), e))?;
                    let (tmp, out) = at_temp(|tmp| {
                        nix::fcntl::openat(
                            hdir.as_fd(),
                            tmp,
                            OFlag::O_WRONLY
                                | OFlag::O_CREAT
                                | OFlag::O_EXCL
                                | OFlag::O_NOFOLLOW
                                | OFlag::O_CLOEXEC,
                            Mode::from_bits_truncate(0o600),
                        )
                    })
                    .map_err(|e| io_err("create a temporary file", hpath.to_path_buf(), e))?;
                    let mut out = std::fs::File::from(out);
                    let copied = std::io::copy(&mut file, &mut out)
                        .and_then(|_| out.flush())
                        .and_then(|()| own_like(out.as_fd(), &st).map_err(std::io::Error::from))
                        .and_then(|()| {
                            fchmod(&out, Mode::from_bits_truncate(change.node.mode))
                                .map_err(std::io::Error::from)
                        })
                        .and_then(|()| out.sync_all());
                    if let Err(e) = copied {
                        let _ = nix::unistd::unlinkat(
                            hdir.as_fd(),
                            tmp.as_os_str(),
                            UnlinkatFlags::NoRemoveDir,
                        );
                        return Err(io_err("copy a file to the host", hpath.to_path_buf(), e));
                    }
                    if let Some(detail) = place_copy(
                        hdir.as_fd(),
                        &tmp,
                        name,
                        (host_exists, host_is_dir),
                        "rename a file onto the host",
                        hpath,
                    )? {
                        return Ok(Outcome::Conflict(detail));
                    }
                    nix::unistd::unlinkat(udir.as_fd(), name, UnlinkatFlags::NoRemoveDir)
                        .map_err(ioe("remove an applied upper file"))?;
                }
                Err(e) => {
                    return Err(io_err(
                        "rename a file onto the host",
                        hpath.to_path_buf(),
                        e,
                    ));
                }
            }
            Some(d)
        }
        NodeKind::Symlink => {
            let target =
                nix::fcntl::readlinkat(udir.as_fd(), name).map_err(ioe("read an upper symlink"))?;
            let d = digest_bytes(target.as_bytes());
            match place(
                udir.as_fd(),
                name,
                hdir.as_fd(),
                name,
                host_exists,
                host_is_dir,
            ) {
                Ok(Ok(())) => {}
                Ok(Err(detail)) => return Ok(Outcome::Conflict(detail)),
                Err(Errno::EXDEV) => {
                    let (tmp, ()) = at_temp(|tmp| {
                        nix::unistd::symlinkat(target.as_os_str(), hdir.as_fd(), tmp)
                    })
                    .map_err(|e| io_err("create a temporary symlink", hpath.to_path_buf(), e))?;
                    if let Err(e) = own_entry_like(hdir.as_fd(), &tmp, &ust) {
                        let _ = nix::unistd::unlinkat(
                            hdir.as_fd(),
                            tmp.as_os_str(),
                            UnlinkatFlags::NoRemoveDir,
                        );
                        return Err(io_err(
                            "set the owner of a host symlink",
                            hpath.to_path_buf(),
                            e,
                        ));
                    }
                    if let Some(detail) = place_copy(
                        hdir.as_fd(),
                        &tmp,
                        name,
                        (host_exists, host_is_dir),
                        "rename a symlink onto the host",
                        hpath,
                    )? {
                        return Ok(Outcome::Conflict(detail));
                    }
                    nix::unistd::unlinkat(udir.as_fd(), name, UnlinkatFlags::NoRemoveDir)
                        .map_err(ioe("remove an applied upper symlink"))?;
                }
                Err(e) => {
                    return Err(io_err(
                        "rename a symlink onto the host",
                        hpath.to_path_buf(),
                        e,
                    ));
                }
            }
            Some(d)
        }
        // Devices, FIFOs, sockets: the filter refuses them; the commit never
        // creates one on the host, whatever the verdict said.
        _ => {
            return Ok(Outcome::Conflict(String::from(
                "a device, FIFO or socket is never committed to the host",
            )));
        }
    };
    Ok(Outcome::Applied { before, after })
}

fn apply_dir(
    fds: &RootFds,
    change: &Change,
    hdir: &OwnedFd,
    name: &OsStr,
    hpath: &Path,
    host_exists: bool,
) -> Result<Outcome, StageError> {
    let (parent, _) = split(&change.path);
    let udir = conflict!(upper_parent(fds, parent)?);
    let Some(ust) = upper_matches(udir.as_fd(), name, change).map_err(|e| {
        io_err(
            "inspect an upper node",
            fds.upper_path.join(&change.path),
            e,
        )
    })?
    else {
        return Ok(Outcome::Conflict(String::from(STAGE_MOVED)));
    };
    let mode = Mode::from_bits_truncate(change.node.mode);
    let made = if host_exists {
        at_temp(|tmp| nix::sys::stat::mkdirat(hdir.as_fd(), tmp, Mode::from_bits_truncate(0o700)))
            .map(|(tmp, ())| tmp)
    } else {
        nix::sys::stat::mkdirat(hdir.as_fd(), name, Mode::from_bits_truncate(0o700))
            .map(|()| name.to_os_string())
    };
    let at = match made {
        Ok(at) => at,
        Err(Errno::EEXIST) if !host_exists => {
            return Ok(Outcome::Conflict(String::from(
                "the host created this path during the commit",
            )));
        }
        Err(e) => return Err(io_err("create a host directory", hpath.to_path_buf(), e)),
    };
    let fd = open_entry(hdir.as_fd(), &at, OFlag::O_RDONLY | OFlag::O_DIRECTORY)
        .map_err(|e| io_err("open a new host directory", hpath.to_path_buf(), e))?;
    own_like(fd.as_fd(), &ust)
        .map_err(|e| io_err("set the owner of a host directory", hpath.to_path_buf(), e))?;
    fchmod(&fd, mode)
        .map_err(|e| io_err("set the mode of a host directory", hpath.to_path_buf(), e))?;
    if host_exists {
        // A host non-directory replaced by a directory: exchange, then
        // remove the old node, now at the temporary name.
        renameat2(
            hdir.as_fd(),
            at.as_os_str(),
            hdir.as_fd(),
            name,
            RenameFlags::RENAME_EXCHANGE,
        )
        .map_err(|e| {
            io_err(
                "put a directory in place on the host",
                hpath.to_path_buf(),
                e,
            )
        })?;
        nix::unistd::unlinkat(hdir.as_fd(), at.as_os_str(), UnlinkatFlags::NoRemoveDir)
            .map_err(|e| io_err("remove the replaced host node", hpath.to_path_buf(), e))?;
    }
    Ok(Outcome::Applied {
        before: None,
        after: None,
    })
}

fn apply_mode(
    fds: &RootFds,
    change: &Change,
    hdir: &OwnedFd,
    name: &OsStr,
    hpath: &Path,
    before: Option<Digest>,
) -> Result<Outcome, StageError> {
    let (parent, _) = split(&change.path);
    let upath = fds.upper_path.join(&change.path);
    let udir = conflict!(upper_parent(fds, parent)?);
    if upper_matches(udir.as_fd(), name, change)
        .map_err(|e| io_err("inspect an upper node", upath.clone(), e))?
        .is_none()
    {
        return Ok(Outcome::Conflict(String::from(STAGE_MOVED)));
    }
    let is_dir = change.node.kind == NodeKind::Dir;
    if change.node.kind == NodeKind::File {
        // The upper copy must still hold the host's content, or dropping it
        // would lose a content change made after the scan.
        let u = digest_file_at(udir.as_fd(), name)
            .map_err(|e| io_err("read an upper file", upath.clone(), e))?;
        if Some(u) != before {
            return Ok(Outcome::Conflict(String::from(STAGE_MOVED)));
        }
    } else if !is_dir {
        return Ok(Outcome::Conflict(String::from(
            "only files and directories have a mode to commit",
        )));
    }
    let flags = if is_dir {
        OFlag::O_RDONLY | OFlag::O_DIRECTORY
    } else {
        OFlag::O_RDONLY
    };
    let fd = open_entry(hdir.as_fd(), name, flags)
        .map_err(|e| io_err("open a host node", hpath.to_path_buf(), e))?;
    if kind_of(&fstat(&fd).map_err(|e| io_err("inspect a host node", hpath.to_path_buf(), e))?)
        != change.node.kind
    {
        return Ok(Outcome::Conflict(String::from(
            "the host changed the kind of this node",
        )));
    }
    fchmod(&fd, Mode::from_bits_truncate(change.node.mode))
        .map_err(|e| io_err("set the mode of a host node", hpath.to_path_buf(), e))?;
    if !is_dir {
        nix::unistd::unlinkat(udir.as_fd(), name, UnlinkatFlags::NoRemoveDir)
            .map_err(|e| io_err("remove an applied upper file", upath.clone(), e))?;
    }
    Ok(Outcome::Applied {
        before,
        after: before,
    })
}

fn apply_delete(
    fds: &RootFds,
    change: &Change,
    hdir: &OwnedFd,
    name: &OsStr,
    hpath: &Path,
    before: Option<Digest>,
) -> Result<Outcome, StageError> {
    let flag = if change.node.kind == NodeKind::Dir {
        UnlinkatFlags::RemoveDir
    } else {
        UnlinkatFlags::NoRemoveDir
    };
    match nix::unistd::unlinkat(hdir.as_fd(), name, flag) {
        Ok(()) => {}
        Err(Errno::ENOTEMPTY | Errno::EEXIST) => {
            return Ok(Outcome::Conflict(String::from(
                "the host directory is not empty (it gained entries, or one below was kept); it is never removed recursively",
            )));
        }
        Err(e) => return Err(io_err("remove a host node", hpath.to_path_buf(), e)),
    }
    remove_whiteout(fds, &change.path)?;
    Ok(Outcome::Applied {
        before,
        after: None,
    })
}

fn apply_rename(
    fds: &RootFds,
    change: &Change,
    from: &Path,
    hdir: &OwnedFd,
    name: &OsStr,
    hpath: &Path,
) -> Result<Outcome, StageError> {
    let (parent, _) = split(&change.path);
    let (from_parent, from_name) = split(from);
    let upath = fds.upper_path.join(&change.path);
    let udir = conflict!(upper_parent(fds, parent)?);
    let Some(ust) = upper_matches(udir.as_fd(), name, change)
        .map_err(|e| io_err("inspect an upper node", upath.clone(), e))?
    else {
        return Ok(Outcome::Conflict(String::from(STAGE_MOVED)));
    };
    let fdir = conflict!(host_parent(fds, from_parent)?);
    let fpath = fds.host_path.join(from);
    let Some(fst) = lstat_at(fdir.as_fd(), from_name)
        .map_err(|e| io_err("inspect a host path", fpath.clone(), e))?
    else {
        return Ok(Outcome::Conflict(format!(
            "the host removed `{}` since the stage was made",
            from.display()
        )));
    };
    if kind_of(&fst) != change.node.kind || changed_since(&fst, fds.stamp) {
        return Ok(Outcome::Conflict(format!(
            "the host changed `{}` since the stage was made",
            from.display()
        )));
    }
    let after = host_digest(fdir.as_fd(), from_name, &fst)
        .map_err(|e| io_err("read a host file", fpath.clone(), e))?;
    // The host node lands, and the upper copy goes: they must still be the
    // same bytes, or a change made after the scan would be lost.
    let staged = host_digest(udir.as_fd(), name, &ust)
        .map_err(|e| io_err("read an upper file", upath.clone(), e))?;
    if staged != after {
        return Ok(Outcome::Conflict(String::from(STAGE_MOVED)));
    }
    match renameat2(
        fdir.as_fd(),
        from_name,
        hdir.as_fd(),
        name,
        RenameFlags::RENAME_NOREPLACE,
    ) {
        Ok(()) => {}
        Err(Errno::EEXIST) => {
            return Ok(Outcome::Conflict(String::from(
                "the host created this path during the commit",
            )));
        }
        Err(e) => return Err(io_err("rename a host node", hpath.to_path_buf(), e)),
    }
    nix::unistd::unlinkat(udir.as_fd(), name, UnlinkatFlags::NoRemoveDir)
        .map_err(|e| io_err("remove an applied upper node", upath.clone(), e))?;
    remove_whiteout(fds, from)?;
    Ok(Outcome::Applied {
        before: None,
        after,
    })
}

/// Remove the upper whiteout at `path`, if there is one (a deletion inside
/// an opaque directory has none).
fn remove_whiteout(fds: &RootFds, path: &Path) -> Result<(), StageError> {
    let (parent, name) = split(path);
    let upath = fds.upper_path.join(path);
    let udir = match open_beneath(&fds.upper, parent, OFlag::O_PATH | OFlag::O_DIRECTORY) {
        Ok(fd) => fd,
        Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => return Ok(()),
        Err(e) => return Err(io_err("open an upper directory", upath, e)),
    };
    let Some(st) = lstat_at(udir.as_fd(), name)
        .map_err(|e| io_err("inspect an upper entry", upath.clone(), e))?
    else {
        return Ok(());
    };
    // `is_whiteout` opens a zero-size file to read its xattr: O_PATH will
    // not do, so reopen the parent for reading.
    let rdir = open_beneath(&fds.upper, parent, OFlag::O_RDONLY | OFlag::O_DIRECTORY)
        .map_err(|e| io_err("open an upper directory", upath.clone(), e))?;
    let xwhiteouts = has_xwhiteouts(rdir.as_fd())
        .map_err(|e| io_err("inspect an upper directory", upath.clone(), e))?;
    if is_whiteout(rdir.as_fd(), name, &st, xwhiteouts)
        .map_err(|e| io_err("inspect an upper entry", upath.clone(), e))?
    {
        nix::unistd::unlinkat(udir.as_fd(), name, UnlinkatFlags::NoRemoveDir)
            .map_err(|e| io_err("remove an applied whiteout", upath, e))?;
    }
    Ok(())
}

/// Remove every `*.overlay.*`, `security.capability` and POSIX ACL xattr of
/// `fd` (an ACL could grant what the mode the filter judged does not).
fn strip_xattrs(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    let mut buf = vec![0u8; 4096];
    let len = loop {
        match crate::sys::flistxattr(fd, &mut buf) {
            Ok(n) => break n,
            Err(libc::ERANGE) if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            Err(libc::ENOTSUP) => return Ok(()),
            Err(e) => return Err(Errno::from_raw(e)),
        }
    };
    for name in buf.get(..len).unwrap_or(&[]).split(|b| *b == 0) {
        let strip = name.starts_with(b"user.overlay.")
            || name.starts_with(b"trusted.overlay.")
            || name == b"security.capability"
            || name.starts_with(b"system.posix_acl_");
        if !strip {
            continue;
        }
        let Ok(c) = std::ffi::CString::new(name) else {
            continue;
        };
        match crate::sys::fremovexattr(fd, &c) {
            Ok(()) | Err(libc::ENODATA) => {}
            Err(e) => return Err(Errno::from_raw(e)),
        }
    }
    Ok(())
}

/// Move a refused change to the quarantine, at its path (a free variant of
/// the name if something is there already); the quarantined path.
fn quarantine(fds: &RootFds, change: &Change) -> Result<PathBuf, StageError> {
    let (parent, name) = split(&change.path);
    let qerr =
        |what: &'static str, e: Errno| io_err(what, fds.quarantine_path.join(&change.path), e);
    // Parents, one by one, beneath the quarantine, never through a symlink.
    let mut qdir = fds
        .quarantine
        .try_clone()
        .map_err(|e| io_err("open the quarantine", fds.quarantine_path.clone(), e))?;
    let mut qrel = PathBuf::new();
    for comp in parent.components() {
        let c = comp.as_os_str();
        match nix::sys::stat::mkdirat(qdir.as_fd(), c, Mode::from_bits_truncate(0o700)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(qerr("create a quarantine directory", e)),
        }
        qdir = open_entry(qdir.as_fd(), c, OFlag::O_RDONLY | OFlag::O_DIRECTORY)
            .map_err(|e| qerr("open a quarantine directory", e))?;
        qrel.push(c);
    }
    let mut qname = name.to_os_string();
    for k in 1u32.. {
        if lstat_at(qdir.as_fd(), &qname)
            .map_err(|e| qerr("inspect the quarantine", e))?
            .is_none()
        {
            break;
        }
        let mut alt = name.to_os_string();
        alt.push(format!(".{k}"));
        qname = alt;
    }
    let quarantined = fds.quarantine_path.join(&qrel).join(&qname);
    let udir = match open_beneath(&fds.upper, parent, OFlag::O_PATH | OFlag::O_DIRECTORY) {
        Ok(fd) => Some(fd),
        Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => None,
        Err(e) => {
            return Err(io_err(
                "open an upper directory",
                fds.upper_path.join(parent),
                e,
            ));
        }
    };
    let upper = match &udir {
        Some(u) => lstat_at(u.as_fd(), name).map_err(|e| qerr("inspect an upper entry", e))?,
        None => None,
    };
    let whiteout_marker = |qdir: &OwnedFd| {
        nix::sys::stat::mknodat(
            qdir.as_fd(),
            qname.as_os_str(),
            SFlag::S_IFCHR,
            Mode::empty(),
            0,
        )
        .map_err(|e| qerr("record a refused deletion in the quarantine", e))
    };
    match (&change.kind, change.node.kind, udir, upper) {
        // A deletion: the whiteout moves (or a new one marks it).
        (ChangeKind::Deleted, _, Some(u), Some(_)) => {
            renameat2(
                u.as_fd(),
                name,
                qdir.as_fd(),
                qname.as_os_str(),
                RenameFlags::RENAME_NOREPLACE,
            )
            .map_err(|e| qerr("move a refused deletion to the quarantine", e))?;
        }
        (ChangeKind::Deleted, _, _, _) => whiteout_marker(&qdir)?,
        // A directory keeps its place in the upper (its contents are changes
        // of their own): the quarantine gets an empty directory of its mode.
        (_, NodeKind::Dir, _, _) => {
            nix::sys::stat::mkdirat(
                qdir.as_fd(),
                qname.as_os_str(),
                Mode::from_bits_truncate(change.node.mode & 0o777 | 0o700),
            )
            .map_err(|e| qerr("create a quarantine directory", e))?;
        }
        (_, _, Some(u), Some(_)) => {
            renameat2(
                u.as_fd(),
                name,
                qdir.as_fd(),
                qname.as_os_str(),
                RenameFlags::RENAME_NOREPLACE,
            )
            .map_err(|e| qerr("move a refused node to the quarantine", e))?;
        }
        // Nothing in the upper any more (the stage moved on): nothing to keep.
        _ => {}
    }
    // A refused rename is refused whole: its node is in the quarantine, and
    // the host keeps the old path (its whiteout leaves the upper).
    if let ChangeKind::Renamed { from } = &change.kind {
        remove_whiteout(fds, from)?;
    }
    Ok(quarantined)
}

/// Add the directories above `path` (and `path` itself when `own`) to
/// `set`, stopping at the first one already there.
fn with_ancestors(set: &mut BTreeSet<PathBuf>, path: &Path, own: bool) {
    let skip = usize::from(!own);
    for a in path.ancestors().skip(skip) {
        if a.as_os_str().is_empty() || !set.insert(a.to_path_buf()) {
            break;
        }
    }
}

/// Remove the now-empty upper directories the commit went through, deepest
/// first, except those with something left below them.
fn tidy_upper(
    fds: &RootFds,
    dirs: BTreeSet<PathBuf>,
    left: &BTreeSet<PathBuf>,
) -> Result<(), StageError> {
    let mut dirs: Vec<PathBuf> = dirs.into_iter().collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for dir in &dirs {
        if dir.as_os_str().is_empty() || left.contains(dir) {
            continue;
        }
        let (parent, name) = split(dir);
        let Ok(udir) = open_beneath(&fds.upper, parent, OFlag::O_PATH | OFlag::O_DIRECTORY) else {
            continue;
        };
        match nix::unistd::unlinkat(udir.as_fd(), name, UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOENT | Errno::ENOTEMPTY | Errno::EEXIST | Errno::ENOTDIR) => {}
            Err(e) => {
                return Err(io_err(
                    "remove an applied upper directory",
                    fds.upper_path.join(dir),
                    e,
                ));
            }
        }
    }
    Ok(())
}
