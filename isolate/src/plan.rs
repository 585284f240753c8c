//! The mount plan: the ordered list of mounts that builds the worker's root,
//! computed in the launcher before any fork, and its digest.
//!
//! Computing the plan also discovers the protected paths inside the
//! writable roots (nested repositories included) and the absent ones that
//! need a read-only placeholder. The host-side work that does not change
//! the plan (creating those placeholders and, under
//! [`SocketPolicy::Refuse`], the socket walk of the read-only paths, the
//! kernel's socket table and the mount table) is returned as a [`Deferred`]
//! step: the launcher runs it while the supervisor creates the namespaces,
//! and lets the supervisor go on (build the root, start anything) only once
//! it has passed.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::os::unix::fs::FileTypeExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use sha2::{Digest, Sha256};

use crate::error::SandboxError;
use crate::profile::{Profile, RootView, SocketPolicy};
use crate::walk_cache::{self, CacheUse};

/// One mount operation. Paths are absolute paths *inside* the sandbox; a
/// source is the same path on the host unless stated.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MountOp {
    /// The new root: an empty tmpfs.
    RootTmpfs,
    /// The new root: the host's `/`, recursively read-only, nosuid.
    RootHostReadOnly,
    /// A symlink (a system directory that is a symlink on the host).
    Symlink {
        /// Where the link is created.
        path: PathBuf,
        /// What it points to.
        target: PathBuf,
    },
    /// A recursive read-only bind of a host path onto the same path.
    BindReadOnly {
        /// Host source.
        source: PathBuf,
        /// Target inside.
        path: PathBuf,
    },
    /// A recursive read-write bind (a writable root, under direct writes).
    BindWritable {
        /// The path, same inside and out.
        path: PathBuf,
    },
    /// A staged writable root: an overlayfs over the host directory (its
    /// read-only lower layer) whose upper layer and work directory are the
    /// stage's, so the worker's writes land in the stage, never in the host
    /// tree. Mounted inside the sandbox's user namespace (`userxattr`).
    Overlay {
        /// The root, same inside and out (the lower layer).
        path: PathBuf,
        /// The host path of the upper layer.
        upper: PathBuf,
        /// The host path of the overlay work directory.
        work: PathBuf,
    },
    /// An empty read-only tmpfs over a directory.
    MaskDir {
        /// The masked directory.
        path: PathBuf,
    },
    /// An empty read-only file over a file or socket.
    MaskFile {
        /// The masked file.
        path: PathBuf,
    },
    /// A private writable tmpfs at `/tmp` with a scratch `HOME` in it.
    Tmp {
        /// Size limit in bytes.
        size: u64,
    },
    /// A minimal `/dev`.
    Dev,
    /// A fresh `/proc` for the new PID namespace, with `/proc/sys` and
    /// friends read-only.
    Proc,
    /// A self-bind that pins an ancestor of a protected path, so it
    /// cannot be renamed or removed (`EBUSY`).
    Pin {
        /// The pinned directory.
        path: PathBuf,
    },
    /// A read-only self-bind of a protected path inside a writable root.
    Protect {
        /// The protected path.
        path: PathBuf,
    },
}

impl MountOp {
    fn line(&self) -> String {
        match self {
            MountOp::RootTmpfs => String::from("root tmpfs"),
            MountOp::RootHostReadOnly => String::from("root host-ro"),
            MountOp::Symlink { path, target } => {
                format!("symlink {} -> {}", path.display(), target.display())
            }
            MountOp::BindReadOnly { source, path } => {
                format!("ro {} <- {}", path.display(), source.display())
            }
            MountOp::BindWritable { path } => format!("rw {}", path.display()),
            MountOp::Overlay { path, upper, work } => format!(
                "overlay {} upper={} work={}",
                path.display(),
                upper.display(),
                work.display()
            ),
            MountOp::MaskDir { path } => format!("mask-dir {}", path.display()),
            MountOp::MaskFile { path } => format!("mask-file {}", path.display()),
            MountOp::Tmp { size } => format!("tmp size={size}"),
            MountOp::Dev => String::from("dev"),
            MountOp::Proc => String::from("proc"),
            MountOp::Pin { path } => format!("pin {}", path.display()),
            MountOp::Protect { path } => format!("protect {}", path.display()),
        }
    }
}

/// The effective mount plan of one launch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MountPlan {
    /// The operations, in order.
    pub ops: Vec<MountOp>,
    /// Placeholders created on the host for absent protected paths (removed
    /// again when the sandbox ends, if still empty and still the same inode).
    pub placeholders: Vec<PathBuf>,
    /// Sockets hidden by [`SocketPolicy::Mask`].
    pub masked_sockets: Vec<PathBuf>,
    /// Writable roots.
    pub writable: Vec<PathBuf>,
    /// Read-only paths granted to Landlock (besides the root view).
    pub read_paths: Vec<PathBuf>,
}

impl MountPlan {
    /// One line per operation: the canonical text the digest covers.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for op in &self.ops {
            let _ = writeln!(out, "{}", op.line());
        }
        out
    }

    /// `sha256:<hex>` of [`MountPlan::text`].
    pub fn digest(&self) -> String {
        format!(
            "sha256:{}",
            hex::encode(Sha256::digest(self.text().as_bytes()))
        )
    }
}

/// A placeholder this launch created: removed afterwards only if it is
/// still the same empty inode in the same parent directory (identified by
/// device and inode, and reached without following a symlink in its last
/// component), so a concurrent process that swaps a parent for a symlink or
/// another directory cannot make the launcher delete something else.
///
/// The status-change time is checked too: a file made at the same path
/// later, even on a reused inode number, or one whose mode or owner was
/// changed, is not the placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placeholder {
    pub(crate) path: PathBuf,
    pub(crate) parent_dev: u64,
    pub(crate) parent_ino: u64,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) ctime: walk_cache::Ctime,
    /// The launch's record of its placeholders
    /// ([`crate::placeholder_log`]), deleted with the last of them.
    pub(crate) record: Option<std::sync::Arc<crate::placeholder_log::RecordFile>>,
}

/// What became of one placeholder at its removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Removal {
    /// Removed.
    Removed,
    /// Nothing is at its path any more.
    Gone,
    /// Kept, and why.
    Kept(&'static str),
}

/// Secret stores hidden in every profile, wherever the sandbox's view
/// would show them: an empty read-only tmpfs over a directory, an empty
/// read-only file over a file. Owner-only files of root are closed to any
/// other uid anyway; these are masked so that a worker running as uid 0
/// (only through [`crate::Sandbox::dangerous`]) cannot read them either.
/// `/etc/ssh`'s `ssh_host_*_key` files are added when present.
pub const SECRET_STORES: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/security/opasswd",
    "/etc/ssl/private",
    "/proc/kmsg",
    "/proc/slabinfo",
    "/proc/timer_list",
    "/proc/vmallocinfo",
    "/proc/pagetypeinfo",
    "/proc/kpagecount",
    "/proc/kpageflags",
    "/proc/kpagecgroup",
    "/sys/firmware",
    "/sys/kernel/slab",
    "/sys/kernel/debug",
    "/sys/kernel/tracing",
    "/sys/kernel/security",
];

/// The secret stores present on this host: [`SECRET_STORES`] plus the SSH
/// host keys, symlinks resolved.
fn secret_stores() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = SECRET_STORES.iter().map(PathBuf::from).collect();
    if let Ok(rd) = std::fs::read_dir("/etc/ssh") {
        let mut keys: Vec<PathBuf> = rd
            .flatten()
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n.starts_with("ssh_host_") && n.ends_with("_key")
            })
            .map(|e| e.path())
            .collect();
        keys.sort();
        out.extend(keys);
    }
    out.into_iter()
        .filter_map(|p| {
            let meta = std::fs::symlink_metadata(&p).ok()?;
            if meta.file_type().is_symlink() {
                std::fs::canonicalize(&p).ok()
            } else {
                Some(p)
            }
        })
        .collect()
}

/// The mask of a secret store: a directory or a file.
fn secret_mask(path: &Path) -> Option<MountOp> {
    let meta = std::fs::metadata(path).ok()?;
    let path = path.to_owned();
    Some(if meta.is_dir() {
        MountOp::MaskDir { path }
    } else {
        MountOp::MaskFile { path }
    })
}

/// Why `path` cannot name a place in the sandbox's plan, if it cannot: it
/// must be absolute (else it would be looked up from the launcher's working
/// directory) and have no `..` component.
pub(crate) fn not_plain(path: &Path) -> Option<&'static str> {
    if !path.is_absolute() {
        Some("must be absolute")
    } else if path.components().any(|c| matches!(c, Component::ParentDir)) {
        Some("must not contain `..`")
    } else {
        None
    }
}

/// Canonicalise a profile path: absolute, no `..`, symlinks resolved.
pub(crate) fn canonical(path: &Path) -> Result<PathBuf, SandboxError> {
    if let Some(reason) = not_plain(path) {
        return Err(SandboxError::InvalidPath {
            path: path.to_owned(),
            reason: reason.to_owned(),
        });
    }
    std::fs::canonicalize(path).map_err(|e| SandboxError::InvalidPath {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// Refuses a bind `given` that a symlink on its way leads to `resolved`
/// inside a hidden path (a host mask or a secret store, each as given and
/// resolved): the bind, mounted after the masks, would show what the mask
/// hides, at a path nobody named. Only a mask that is itself a symlink
/// (`/home -> /data/home`) may be resolved on the way.
fn check_redirect(
    given: &Path,
    resolved: &Path,
    hidden: &[(PathBuf, PathBuf)],
) -> Result<(), SandboxError> {
    let expected = hidden
        .iter()
        .filter(|(m, mc)| m != mc)
        .find_map(|(m, mc)| given.strip_prefix(m).ok().map(|rest| mc.join(rest)))
        .unwrap_or_else(|| given.to_owned());
    if resolved == expected {
        return Ok(());
    }
    match hidden.iter().find(|(_, mc)| resolved.starts_with(mc)) {
        Some((m, _)) => Err(SandboxError::InvalidPath {
            path: given.to_owned(),
            reason: format!(
                "mask_redirected: it resolves through a symlink to `{}`, inside the host mask `{}`, which the bind would show; a worker may have planted the symlink in a writable root. Remove it, or name `{}` itself if that is what the worker should see",
                resolved.display(),
                m.display(),
                resolved.display()
            ),
        }),
        None => Ok(()),
    }
}

fn under(path: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| path.starts_with(r))
}

/// Limits of the repository scan inside writable roots.
const SCAN_MAX_DEPTH: usize = 8;
const SCAN_MAX_ENTRIES: usize = 500_000;

/// Directory names the nested-repository scan does not descend into.
const SCAN_SKIP: &[&str] = &["node_modules", "target", ".git"];

struct Walk {
    repos: Vec<PathBuf>,
    symlinked_git: Vec<PathBuf>,
    sockets: Vec<PathBuf>,
    entries: usize,
}

/// Walk a tree without following symlinks, collecting sockets everywhere
/// and (when `find_repos`) directories that contain `.git`, down to
/// [`SCAN_MAX_DEPTH`] and outside [`SCAN_SKIP`] directories.
fn walk(root: &Path, find_repos: bool, out: &mut Walk) -> Result<(), SandboxError> {
    walk_with(root, find_repos, out, None)
}

/// [`walk`], taking unchanged directories from `cache` (for the read-only
/// trees; see [`crate::walk_cache`]) and recording the ones it lists.
fn walk_with(
    root: &Path,
    find_repos: bool,
    out: &mut Walk,
    mut cache: Option<&mut CacheUse>,
) -> Result<(), SandboxError> {
    use nix::dir::{Dir, Type};
    use nix::fcntl::{AtFlags, OFlag};
    use nix::sys::stat::{Mode, SFlag, fstatat};
    use std::os::unix::ffi::OsStrExt;

    let meta = std::fs::symlink_metadata(root)?;
    if meta.file_type().is_socket() {
        out.sockets.push(root.to_owned());
        return Ok(());
    }
    if !meta.is_dir() {
        return Ok(());
    }
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut stack = vec![(root.to_owned(), 0usize, find_repos)];
    while let Some((dir, depth, repo_ok)) = stack.pop() {
        if !repo_ok
            && let Some(c) = cache.as_deref_mut()
            && let Some(subdirs) = c.reuse(&dir)
        {
            stack.extend(subdirs.into_iter().map(|p| (p, depth + 1, false)));
            continue;
        }
        let mut d = match Dir::open(&dir, flags, Mode::empty()) {
            Ok(d) => d,
            // Gone or replaced since it was found: nothing to list here
            // (the mounts check what they bind themselves).
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => continue,
            // Not listable, and not enterable either: nothing inside can
            // be reached by name, by this uid or the worker's.
            Err(Errno::EACCES | Errno::EPERM)
                if nix::unistd::access(&dir, nix::unistd::AccessFlags::X_OK).is_err() =>
            {
                continue;
            }
            // Enterable but not listable (`--x`), or any other failure: a
            // socket inside could be reached by name, and the walk cannot
            // see it. Fail closed.
            Err(e) => return Err(unlistable(&dir, e)),
        };
        // Stamped before the listing: a change during it moves the ctime on.
        let stamp = match cache {
            Some(_) if !repo_ok => nix::sys::stat::fstat(&d).ok(),
            _ => None,
        };
        let sockets_before = out.sockets.len();
        // The names are borrowed from the directory's buffer: a path is
        // built only for what is kept (sockets, directories to descend).
        let mut subdirs = Vec::new();
        let mut untyped = Vec::new();
        let mut keep = |name: &[u8], ty: Type, out: &mut Walk| {
            let is_git = name == b".git";
            match ty {
                Type::Socket => out
                    .sockets
                    .push(dir.join(std::ffi::OsStr::from_bytes(name))),
                Type::Directory => {
                    if repo_ok && is_git {
                        out.repos.push(dir.clone());
                    }
                    let skip = SCAN_SKIP.iter().any(|s| name == s.as_bytes());
                    let child_ok = repo_ok && !skip && depth < SCAN_MAX_DEPTH;
                    subdirs.push((
                        dir.join(std::ffi::OsStr::from_bytes(name)),
                        depth + 1,
                        child_ok,
                    ));
                }
                Type::File if repo_ok && is_git => out.repos.push(dir.clone()),
                Type::Symlink if repo_ok && is_git => {
                    out.symlinked_git.push(dir.join(".git"));
                }
                _ => {}
            }
        };
        for entry in d.iter() {
            let entry = entry.map_err(|e| unlistable(&dir, e))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            out.entries += 1;
            if out.entries > SCAN_MAX_ENTRIES {
                return Err(SandboxError::InvalidPath {
                    path: root.to_owned(),
                    reason: format!(
                        "more than {SCAN_MAX_ENTRIES} entries to scan for sockets and nested repositories"
                    ),
                });
            }
            match entry.file_type() {
                Some(ty) => keep(name, ty, out),
                // The file system gave no type: asked for below.
                None => untyped.push(entry.file_name().to_owned()),
            }
        }
        for name in untyped {
            let Ok(st) = fstatat(&d, name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue;
            };
            let ty = match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
                SFlag::S_IFSOCK => Type::Socket,
                SFlag::S_IFDIR => Type::Directory,
                SFlag::S_IFREG => Type::File,
                SFlag::S_IFLNK => Type::Symlink,
                _ => continue,
            };
            keep(name.as_bytes(), ty, out);
        }
        if let (Some(c), Some(st)) = (cache.as_deref_mut(), stamp) {
            let ctime = walk_cache::ctime_of(&st);
            let keep = out.sockets.len() == sockets_before
                && walk_cache::settled(ctime, c.now, c.margin)
                && walk_cache::local_fs(&d);
            let entry = keep.then(|| walk_cache::Entry {
                ctime,
                subdirs: subdirs
                    .iter()
                    .filter_map(|(p, ..)| p.file_name().map(|n| n.to_os_string()))
                    .collect(),
            });
            c.listed(walk_cache::key_of(&st), entry);
        }
        stack.extend(subdirs);
    }
    Ok(())
}

/// The refusal for a directory the socket walk cannot list.
fn unlistable(dir: &Path, e: Errno) -> SandboxError {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::symlink_metadata(dir)
        .map(|m| format!(", mode {:04o}", m.permissions().mode() & 0o7777))
        .unwrap_or_default();
    SandboxError::InvalidPath {
        path: dir.to_owned(),
        reason: format!(
            "cannot list this directory to check it for Unix sockets ({}{mode}): it can be entered but not listed, so a socket inside could be reached by name without being seen; if an earlier worker made it so, give it back its read permission (`chmod u+r`) or remove it, then launch again; else mask it or leave it out of the sandbox's binds",
            e.desc()
        ),
    }
}

/// The refusal for a protected path that is a symlink.
fn symlinked_protected(path: &Path) -> SandboxError {
    let target = std::fs::read_link(path)
        .map(|t| format!(" (to `{}`)", t.display()))
        .unwrap_or_default();
    SandboxError::InvalidPath {
        path: path.to_owned(),
        reason: format!(
            "a protected path is a symlink{target} and cannot be kept read-only: a read-only bind would follow it, and the worker could re-point it; if an earlier worker left it, remove it (or replace it with the real file or directory), then launch again"
        ),
    }
}

/// Pathname sockets bound in the launcher's network namespace
/// (`/proc/net/unix`), as a complement to the walk for large system trees.
fn kernel_socket_paths() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/net/unix")
        .map(|t| parse_net_unix(&t))
        .unwrap_or_default()
}

/// The pathname sockets of a `/proc/net/unix` table (field 8, absolute
/// paths only; abstract names start with `@`).
pub(crate) fn parse_net_unix(text: &str) -> Vec<PathBuf> {
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter(|p| p.starts_with('/'))
        .map(PathBuf::from)
        .collect()
}

/// Mount points of the launcher's mount namespace (`/proc/self/mountinfo`,
/// field 5, octal escapes decoded).
fn mount_points() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

/// The mount points of a `mountinfo` table (field 5, octal escapes decoded).
pub(crate) fn parse_mountinfo(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_mountinfo(p)))
        .collect()
}

fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b.get(i).copied().unwrap_or(0);
        if c == b'\\' {
            let oct = b
                .get(i + 1..i + 4)
                .and_then(|d| std::str::from_utf8(d).ok());
            if let Some(v) = oct.and_then(|d| u8::from_str_radix(d, 8).ok()) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Inputs for [`build`] beyond the profile.
#[derive(Debug, Default)]
pub(crate) struct PlanInput {
    /// Extra sockets allowed (bridge targets are outside the sandbox view
    /// anyway; relay and control sockets may be inside).
    pub(crate) allowed_sockets: Vec<PathBuf>,
    /// The directory of the socket-walk cache ([`crate::walk_cache`]).
    pub(crate) walk_cache: Option<PathBuf>,
    /// The directory of the placeholder records ([`crate::placeholder_log`]).
    pub(crate) placeholder_records: Option<PathBuf>,
    /// Staged writes: the stage base (masked inside) and, for each root of
    /// [`writable_roots`] in order, its upper layer and work directory.
    /// `None` is direct writes.
    pub(crate) staged: Option<Staged>,
}

/// The stage of a staged launch, as the plan needs it.
#[derive(Debug, Default)]
pub(crate) struct Staged {
    /// The stage base directory (canonical): hidden inside the sandbox so
    /// the worker reads no stage, its own or another session's.
    pub(crate) base: PathBuf,
    /// `(root, upper, work)` per writable root, in [`writable_roots`]
    /// order; the plan refuses a stage whose roots are not its own.
    pub(crate) layers: Vec<(PathBuf, PathBuf, PathBuf)>,
}

/// The writable roots of a profile, canonical, deduplicated, in order: the
/// plan's [`MountPlan::writable`], and the roots a stage is created for.
pub(crate) fn writable_roots(profile: &Profile) -> Result<Vec<PathBuf>, SandboxError> {
    let mut writable = Vec::new();
    for w in &profile.writable {
        let c = canonical(w)?;
        if c == Path::new("/") {
            return Err(SandboxError::InvalidPath {
                path: w.clone(),
                reason: String::from("the root cannot be writable"),
            });
        }
        if !writable.contains(&c) {
            writable.push(c);
        }
    }
    Ok(writable)
}

/// The writable roots without protected names, canonical: those added only
/// as a state directory ([`Profile::add_writable_state`]), never also as a
/// project root ([`Profile::add_writable`]).
fn state_roots(profile: &Profile) -> Result<Vec<PathBuf>, SandboxError> {
    let mut state = Vec::new();
    for s in &profile.state_roots {
        state.push(canonical(s)?);
    }
    let mut all = Vec::new();
    for w in &profile.writable {
        all.push(canonical(w)?);
    }
    let count = |v: &[PathBuf], p: &PathBuf| v.iter().filter(|x| *x == p).count();
    let mut out: Vec<PathBuf> = state
        .iter()
        .filter(|s| count(&all, s) == count(&state, s))
        .cloned()
        .collect();
    out.dedup();
    Ok(out)
}

/// Host-side work of a launch that does not change the mount plan: run by
/// the launcher ([`Deferred::run`]) while the supervisor creates the
/// namespaces, and passed before the supervisor may go on.
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    /// Absent protected paths to create as placeholders: (path, directory).
    placeholders: Vec<(PathBuf, bool)>,
    /// The socket check, when it was not already done while planning
    /// (it is under [`SocketPolicy::Mask`], whose masks are mount ops).
    sockets: Option<SocketScan>,
    /// Where the placeholders created are recorded.
    records: Option<PathBuf>,
}

/// The inputs of the socket check.
#[derive(Debug)]
struct SocketScan {
    /// Sockets already found by the walk of the writable roots.
    found: Vec<PathBuf>,
    /// Further trees to walk (explicit read paths, `strict`'s `/etc` entries).
    walk: Vec<PathBuf>,
    writable: Vec<PathBuf>,
    user_reads: Vec<PathBuf>,
    masks: Vec<PathBuf>,
    read_paths: Vec<PathBuf>,
    root: RootView,
    allowed: Vec<PathBuf>,
    policy: SocketPolicy,
    cache: Option<PathBuf>,
}

impl SocketScan {
    /// Whether a host path is visible inside the sandbox.
    fn visible(&self, p: &Path) -> bool {
        let in_user_bind =
            under(p, &self.writable) || self.user_reads.iter().any(|r| p.starts_with(r));
        if in_user_bind {
            return true;
        }
        if p.starts_with("/tmp") || p.starts_with("/proc") || p.starts_with("/dev") {
            return false;
        }
        match self.root {
            RootView::HostReadOnly => !under(p, &self.masks),
            RootView::Empty => self.read_paths.iter().any(|r| p.starts_with(r)),
        }
    }

    /// The walked trees, the kernel's table of bound pathname sockets (for
    /// the large system trees), and every mount point itself (a socket
    /// bind-mounted onto a file path). Returns the sockets to mask, or the
    /// refusal.
    fn run(&self) -> Result<Vec<PathBuf>, SandboxError> {
        let mut walked = Walk {
            repos: Vec::new(),
            symlinked_git: Vec::new(),
            sockets: self.found.clone(),
            entries: 0,
        };
        let mut cache = self.cache.as_deref().and_then(|p| {
            let dir = walk_cache::CacheDir::open(p).ok()?;
            let old = dir.load();
            Some((
                dir,
                CacheUse::new(old, std::time::SystemTime::now(), walk_cache::RACY_MARGIN),
            ))
        });
        for w in &self.walk {
            walk_with(w, false, &mut walked, cache.as_mut().map(|(_, c)| c))?;
        }
        if let Some((dir, c)) = &cache
            && c.changed()
        {
            dir.store(&c.merged());
        }
        let mut found: Vec<(PathBuf, &'static str)> = walked
            .sockets
            .into_iter()
            .map(|p| (p, "directory walk"))
            .collect();
        for p in kernel_socket_paths() {
            if self.visible(&p) {
                found.push((p, "bound socket in /proc/net/unix"));
            }
        }
        for m in mount_points() {
            if self.visible(&m)
                && std::fs::symlink_metadata(&m).is_ok_and(|md| md.file_type().is_socket())
            {
                found.push((m, "mount point"));
            }
        }
        let mut masked = Vec::new();
        let mut seen = BTreeSet::new();
        for (p, how) in found {
            if !seen.insert(p.clone()) || self.allowed.contains(&p) {
                continue;
            }
            if !std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_socket()) {
                continue;
            }
            match self.policy {
                SocketPolicy::Refuse => return Err(SandboxError::SocketVisible { path: p, how }),
                SocketPolicy::Mask => masked.push(p),
            }
        }
        Ok(masked)
    }
}

impl Deferred {
    /// Run the socket check (when deferred), then create the placeholders
    /// and record them (before the sandbox may go on, so that a launcher
    /// killed afterwards leaves a record). On error nothing this step
    /// created is left behind.
    pub(crate) fn run(&self) -> Result<Vec<Placeholder>, SandboxError> {
        if let Some(scan) = &self.sockets {
            scan.run()?;
        }
        let mut created = create_placeholders(&self.placeholders)?;
        if let Some(dir) = &self.records {
            crate::placeholder_log::record(dir, &mut created);
        }
        Ok(created)
    }
}

/// A writable root opened once (`O_PATH`, not following a symlink) for
/// looking up the protected names inside it; by path when it cannot be
/// opened.
struct RootDir(Option<std::os::fd::OwnedFd>);

impl RootDir {
    fn open(root: &Path) -> RootDir {
        use nix::fcntl::OFlag;
        RootDir(
            nix::fcntl::open(
                root,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .ok(),
        )
    }

    /// Whether the root is a real directory (it could be opened as one).
    fn is_dir(&self) -> bool {
        self.0.is_some()
    }

    /// `Some(is_symlink)` when `name` exists in the root (`path` is the
    /// same entry by its full path, used when the root could not be opened).
    fn lookup(&self, path: &Path, name: &str) -> Option<bool> {
        use nix::sys::stat::SFlag;
        match &self.0 {
            Some(fd) => nix::sys::stat::fstatat(fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                .ok()
                .map(|st| {
                    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFLNK
                }),
            None => std::fs::symlink_metadata(path)
                .ok()
                .map(|m| m.file_type().is_symlink()),
        }
    }
}

/// Whether `create_placeholder` would create `path`: its parent is a real
/// directory (not a symlink).
fn placeholder_parent_ok(path: &Path) -> bool {
    path.parent()
        .and_then(|d| std::fs::symlink_metadata(d).ok())
        .is_some_and(|m| m.is_dir())
}

/// Build the mount plan for a profile, and the host-side work to run
/// before the sandbox binds its protected paths.
pub(crate) fn build(
    profile: &Profile,
    input: &PlanInput,
) -> Result<(MountPlan, Deferred), SandboxError> {
    let mut ops = Vec::new();
    let mut read_paths = Vec::new();
    // A protected name is joined to each writable root, and a placeholder is
    // made there when it is absent: an absolute name or one with `..` would
    // have the launcher create files outside the roots.
    for name in profile
        .protected_names
        .iter()
        .chain(&profile.protected_if_present)
    {
        let p = Path::new(name);
        if name.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(SandboxError::InvalidPath {
                path: p.to_owned(),
                reason: String::from(
                    "a protected name must be relative to the writable roots, without `.` or `..`",
                ),
            });
        }
    }
    let writable = writable_roots(profile)?;
    let staged = input.staged.as_ref();
    // The stage was made for the roots resolved a moment ago; a root that
    // resolves elsewhere now (a symlink swapped meanwhile) would have its
    // upper layer applied to another host directory at commit.
    if let Some(st) = staged
        && (st.layers.len() != writable.len()
            || st.layers.iter().zip(&writable).any(|((r, _, _), w)| r != w))
    {
        return Err(SandboxError::InvalidPath {
            path: st.base.clone(),
            reason: format!(
                "the stage has {} roots ({}), the profile {} writable roots ({}); a root resolved differently since the stage was created",
                st.layers.len(),
                st.layers
                    .iter()
                    .map(|(r, _, _)| r.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                writable.len(),
                writable
                    .iter()
                    .map(|w| w.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    let mut masks: Vec<PathBuf> = Vec::new();
    match profile.root {
        RootView::Empty => {
            ops.push(MountOp::RootTmpfs);
            for d in &profile.system_dirs {
                let Ok(meta) = std::fs::symlink_metadata(d) else {
                    continue;
                };
                if meta.file_type().is_symlink() {
                    let target = std::fs::read_link(d)?;
                    ops.push(MountOp::Symlink {
                        path: d.clone(),
                        target,
                    });
                } else if meta.is_dir() {
                    ops.push(MountOp::BindReadOnly {
                        source: d.clone(),
                        path: d.clone(),
                    });
                    read_paths.push(d.clone());
                }
            }
            for e in &profile.etc_entries {
                let p = Path::new("/etc").join(e);
                if let Ok(src) = std::fs::canonicalize(&p) {
                    ops.push(MountOp::BindReadOnly {
                        source: src,
                        path: p.clone(),
                    });
                    read_paths.push(p);
                }
            }
        }
        RootView::HostReadOnly => {
            ops.push(MountOp::RootHostReadOnly);
            read_paths.push(PathBuf::from("/"));
            for m in &profile.host_masks {
                let Ok(meta) = std::fs::symlink_metadata(m) else {
                    continue;
                };
                // A symlinked mask (e.g. /var/run -> /run) is covered by its
                // target's mask; mask the resolved path as well.
                let path = if meta.file_type().is_symlink() {
                    match std::fs::canonicalize(m) {
                        Ok(p) => p,
                        Err(_) => continue,
                    }
                } else {
                    m.clone()
                };
                if masks.contains(&path) {
                    continue;
                }
                let meta = std::fs::metadata(&path)?;
                if meta.is_dir() {
                    ops.push(MountOp::MaskDir { path: path.clone() });
                } else {
                    ops.push(MountOp::MaskFile { path: path.clone() });
                }
                masks.push(path);
            }
        }
    }
    ops.push(MountOp::Tmp {
        size: profile.tmp_size,
    });
    ops.push(MountOp::Dev);
    ops.push(MountOp::Proc);
    let explicit_reads = profile
        .read_paths
        .iter()
        .map(|r| canonical(r))
        .collect::<Result<Vec<_>, _>>()?;
    // A bind reached through a symlink into what a mask or a secret store
    // hides would show it; a worker can plant such a symlink in a writable
    // root for a later launch to bind.
    // The host masks count under an empty root too: what they hide is not
    // there, and a symlink must not bring it in.
    let mut hidden: Vec<(PathBuf, PathBuf)> = Vec::new();
    for m in &profile.host_masks {
        let resolved = std::fs::canonicalize(m).unwrap_or_else(|_| m.clone());
        hidden.push((m.clone(), resolved));
    }
    hidden.extend(secret_stores().into_iter().map(|s| (s.clone(), s)));
    for given in profile.read_paths.iter().chain(&profile.writable) {
        check_redirect(given, &canonical(given)?, &hidden)?;
    }
    // The secret stores the view would show. One that an explicit read
    // path or a writable root reaches into is masked before the binds (the
    // bind then shows through, as into a host mask); every other one after
    // all the binds, so that a broader bind (`--read /etc`) does not show
    // it again.
    let mut secrets_early = Vec::new();
    let mut secrets_late = Vec::new();
    for store in secret_stores() {
        let shown = store.starts_with("/proc")
            || under(&store, &writable)
            || explicit_reads.iter().any(|r| store.starts_with(r))
            || match profile.root {
                RootView::HostReadOnly => !under(&store, &masks),
                RootView::Empty => read_paths.iter().any(|r| store.starts_with(r)),
            };
        if !shown {
            continue;
        }
        if explicit_reads
            .iter()
            .chain(writable.iter())
            .any(|r| r.starts_with(&store))
        {
            secrets_early.push(store);
        } else {
            secrets_late.push(store);
        }
    }
    ops.extend(secrets_early.iter().filter_map(|p| secret_mask(p)));
    for c in explicit_reads {
        ops.push(MountOp::BindReadOnly {
            source: c.clone(),
            path: c.clone(),
        });
        read_paths.push(c);
    }
    match staged {
        Some(st) => {
            for (w, (_, upper, work)) in writable.iter().zip(&st.layers) {
                ops.push(MountOp::Overlay {
                    path: w.clone(),
                    upper: upper.clone(),
                    work: work.clone(),
                });
            }
        }
        None => {
            for w in &writable {
                ops.push(MountOp::BindWritable { path: w.clone() });
            }
        }
    }
    ops.extend(secrets_late.iter().filter_map(|p| secret_mask(p)));
    // The stage base, after every bind that could show it (an explicit
    // read path over it): the worker reads no stage.
    if let Some(st) = staged {
        // The view's /tmp, /dev and /proc are its own; elsewhere the base
        // shows under the host root, or under a bound read path.
        let private = ["/tmp", "/dev", "/proc"]
            .iter()
            .any(|p| st.base.starts_with(p));
        let shown = !private
            && (profile.root == RootView::HostReadOnly
                || read_paths.iter().any(|r| st.base.starts_with(r)));
        if shown {
            ops.push(MountOp::MaskDir {
                path: st.base.clone(),
            });
            masks.push(st.base.clone());
        }
    }
    masks.extend(secrets_early);
    masks.extend(secrets_late);

    // Protected paths inside each writable root, nested repositories too.
    let mut scan = Walk {
        repos: Vec::new(),
        symlinked_git: Vec::new(),
        sockets: Vec::new(),
        entries: 0,
    };
    for w in &writable {
        walk(w, true, &mut scan)?;
    }
    let mut walk_later = Vec::new();
    for r in &profile.read_paths {
        walk_later.push(canonical(r)?);
    }
    if profile.root == RootView::Empty {
        for e in &profile.etc_entries {
            let p = Path::new("/etc").join(e);
            if p.exists() {
                walk_later.push(p);
            }
        }
    }
    let mut placeholders = Vec::new();
    let mut to_create: Vec<(PathBuf, bool)> = Vec::new();
    let mut protect: BTreeSet<PathBuf> = BTreeSet::new();
    // Whether each protected path looked up below is a symlink (absent
    // ones are not listed), so the symlink check needs no second lookup.
    let mut looked: HashMap<PathBuf, bool> = HashMap::new();
    let state = state_roots(profile)?;
    for w in writable.iter().filter(|w| !state.contains(w)) {
        // The names are looked up relative to the root (one component
        // each); its parent checks are then the root's own, a directory.
        let root = RootDir::open(w);
        for name in &profile.protected_names {
            if name.starts_with(".git/") {
                continue;
            }
            // A name ending in `/` is a directory: its placeholder is an
            // empty read-only directory, so a program that reads a file
            // under it gets ENOENT, not ENOTDIR (`.opencode/`).
            let (name, dir) = match name.strip_suffix('/') {
                Some(n) => (n, true),
                None => (name.as_str(), name == ".palisade"),
            };
            let p = w.join(name);
            match root.lookup(&p, name) {
                Some(is_link) => {
                    looked.insert(p.clone(), is_link);
                }
                // Staged: no placeholder, nothing to bind; the commit
                // filter handles an absent protected name.
                None if staged.is_some() => continue,
                None if (root.is_dir() && !name.contains('/')) || placeholder_parent_ok(&p) => {
                    placeholders.push(p.clone());
                    to_create.push((p.clone(), dir));
                }
                None => {}
            }
            protect.insert(p);
        }
        for name in &profile.protected_if_present {
            let p = w.join(name);
            if let Some(is_link) = root.lookup(&p, name) {
                looked.insert(p.clone(), is_link);
                protect.insert(p);
            }
        }
    }
    let mut repos: Vec<PathBuf> = scan.repos.clone();
    repos.sort();
    repos.dedup();
    for repo in &repos {
        let git = repo.join(".git");
        let Ok(meta) = std::fs::symlink_metadata(&git) else {
            continue;
        };
        if !meta.is_dir() {
            // A `.git` file (worktree, submodule): keep the pointer itself.
            protect.insert(git);
            continue;
        }
        for name in profile
            .protected_names
            .iter()
            .filter(|n| n.starts_with(".git/"))
        {
            let p = repo.join(name);
            if std::fs::symlink_metadata(&p).is_err() {
                if staged.is_some() {
                    continue;
                }
                if placeholder_parent_ok(&p) {
                    placeholders.push(p.clone());
                    to_create.push((p.clone(), name.ends_with("hooks")));
                }
            }
            protect.insert(p);
        }
    }
    for p in &profile.protected_paths {
        if let Ok(c) = std::fs::canonicalize(p) {
            protect.insert(c);
        }
    }
    // A symlink cannot be bound over (the mount would follow it), and a
    // worker could re-point it: refuse rather than leave it writable.
    if let Some(link) = scan.symlinked_git.first() {
        return Err(SandboxError::InvalidPath {
            path: link.clone(),
            reason: String::from(
                "a `.git` symlink inside a writable root cannot be protected (a read-only bind would follow it, and the worker could re-point it); if an earlier worker left it, remove it, else replace it with a `.git` file (`gitdir: …`) or a directory, then launch again",
            ),
        });
    }
    for p in &protect {
        let is_link = match looked.get(p) {
            Some(l) => *l,
            None => std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()),
        };
        if is_link {
            return Err(symlinked_protected(p));
        }
    }
    let mut pins: BTreeSet<PathBuf> = BTreeSet::new();
    for p in &protect {
        if let Some(root) = writable.iter().find(|w| p.starts_with(w)) {
            let mut a = p.parent();
            while let Some(anc) = a {
                if anc == root.as_path() || !anc.starts_with(root) {
                    break;
                }
                pins.insert(anc.to_owned());
                a = anc.parent();
            }
        }
    }
    for p in &pins {
        ops.push(MountOp::Pin { path: p.clone() });
    }
    for p in &protect {
        ops.push(MountOp::Protect { path: p.clone() });
    }

    // Socket walk. Under the refuse policy its only outcome is a refusal,
    // so it is deferred (the launcher runs it while the sandbox builds its
    // namespaces, and nothing runs inside before it has passed); under the
    // mask policy its findings are mount ops, so it runs now.
    let mut allowed: Vec<PathBuf> = profile.allowed_sockets.clone();
    allowed.extend(input.allowed_sockets.iter().cloned());
    let socket_scan = SocketScan {
        found: scan.sockets,
        walk: walk_later,
        writable: writable.clone(),
        user_reads: profile.read_paths.clone(),
        masks,
        read_paths: read_paths.clone(),
        root: profile.root,
        allowed,
        policy: profile.socket_policy,
        cache: input.walk_cache.clone(),
    };
    let mut masked_sockets = Vec::new();
    let deferred_scan = match profile.socket_policy {
        SocketPolicy::Refuse => Some(socket_scan),
        SocketPolicy::Mask => {
            for p in socket_scan.run()? {
                ops.push(MountOp::MaskFile { path: p.clone() });
                masked_sockets.push(p);
            }
            None
        }
    };
    Ok((
        MountPlan {
            ops,
            placeholders,
            masked_sockets,
            writable,
            read_paths,
        },
        Deferred {
            placeholders: to_create,
            sockets: deferred_scan,
            records: input.placeholder_records.clone(),
        },
    ))
}

/// Create the absent protected paths as empty placeholders: `(path,
/// directory)`. On error nothing this call created is left behind.
///
/// Each parent directory is opened once (`O_PATH|O_NOFOLLOW`) and every
/// placeholder in it is made relative to that descriptor, with
/// `O_CREAT|O_EXCL` (which does not follow a symlink) or `mkdirat`; the
/// parent path must still lead to the same directory afterwards, or the
/// launch is refused. A parent that is not a real directory gets no
/// placeholder (init's protect bind then fails and the launch with it).
fn create_placeholders(wanted: &[(PathBuf, bool)]) -> Result<Vec<Placeholder>, SandboxError> {
    let mut created = Vec::new();
    let mut parents: Vec<&Path> = Vec::new();
    for (p, _) in wanted {
        if let Some(parent) = p.parent()
            && !parents.contains(&parent)
        {
            parents.push(parent);
        }
    }
    for parent in parents {
        let names = wanted
            .iter()
            .filter(|(p, _)| p.parent() == Some(parent))
            .filter_map(|(p, dir)| p.file_name().map(|n| (p, n, *dir)));
        if let Err(e) = placeholders_in(parent, names, &mut created) {
            remove_placeholders(&created);
            return Err(e);
        }
    }
    Ok(created)
}

fn placeholders_in<'a>(
    parent: &Path,
    names: impl Iterator<Item = (&'a PathBuf, &'a std::ffi::OsStr, bool)>,
    created: &mut Vec<Placeholder>,
) -> Result<(), SandboxError> {
    use nix::fcntl::{AtFlags, OFlag, openat};
    use nix::sys::stat::{Mode, fstat, fstatat, mkdirat};
    let Ok(dirfd) = nix::fcntl::open(
        parent,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        return Ok(());
    };
    let dir = fstat(&dirfd).map_err(|e| SandboxError::InvalidPath {
        path: parent.to_owned(),
        reason: format!("cannot read the directory of a placeholder: {e}"),
    })?;
    for (path, name, is_dir) in names {
        let fail = |e: nix::errno::Errno| SandboxError::InvalidPath {
            path: path.clone(),
            reason: format!(
                "cannot create read-only placeholder: {}",
                std::io::Error::from(e)
            ),
        };
        let st = if is_dir {
            mkdirat(&dirfd, name, Mode::from_bits_truncate(0o777)).map_err(fail)?;
            fstatat(&dirfd, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(fail)?
        } else {
            let fd = openat(
                &dirfd,
                name,
                OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o666),
            )
            .map_err(fail)?;
            fstat(&fd).map_err(fail)?
        };
        let mut placeholder = Placeholder {
            path: path.clone(),
            parent_dev: dir.st_dev,
            parent_ino: dir.st_ino,
            dev: st.st_dev,
            ino: st.st_ino,
            ctime: walk_cache::ctime_of(&st),
            record: None,
        };
        // Owned like its directory, so the only refusal inside is the
        // read-only mount (EROFS), as for an existing protected file.
        if (st.st_uid, st.st_gid) != (dir.st_uid, dir.st_gid) {
            let _ = nix::unistd::fchownat(
                &dirfd,
                name,
                Some(nix::unistd::Uid::from_raw(dir.st_uid)),
                Some(nix::unistd::Gid::from_raw(dir.st_gid)),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            );
            // The change of owner moved the status-change time on.
            if let Ok(now) = fstatat(&dirfd, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                && (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)
            {
                placeholder.ctime = walk_cache::ctime_of(&now);
            }
        }
        created.push(placeholder);
    }
    // The mounts resolve the parent by path: it must still be this directory.
    let same = nix::sys::stat::stat(parent)
        .is_ok_and(|now| (now.st_dev, now.st_ino) == (dir.st_dev, dir.st_ino));
    if !same {
        return Err(SandboxError::InvalidPath {
            path: parent.to_owned(),
            reason: String::from("its directory changed while the placeholder was made"),
        });
    }
    Ok(())
}

/// Remove placeholders that are still empty and still the inode this
/// launch created, in the same parent directory. Each parent is opened once
/// (`O_PATH|O_NOFOLLOW`) and checked by device and inode; the placeholder
/// is then checked and removed relative to that descriptor, so no path is
/// resolved again between the check and the removal.
pub(crate) fn remove_placeholders(created: &[Placeholder]) {
    let _ = remove_placeholders_reporting(created);
}

/// [`remove_placeholders`], saying what became of each placeholder.
pub(crate) fn remove_placeholders_reporting(created: &[Placeholder]) -> Vec<(PathBuf, Removal)> {
    use nix::fcntl::{AtFlags, OFlag};
    use nix::sys::stat::{SFlag, fstat, fstatat};
    use nix::unistd::{UnlinkatFlags, unlinkat};
    use std::os::fd::OwnedFd;
    let mut out = Vec::new();
    let mut parents: Vec<(PathBuf, Option<OwnedFd>)> = Vec::new();
    for p in created.iter().rev() {
        let (Some(parent), Some(name)) = (p.path.parent(), p.path.file_name()) else {
            continue;
        };
        let mut verdict = |r: Removal| out.push((p.path.clone(), r));
        if !parents.iter().any(|(d, _)| d == parent) {
            let fd = nix::fcntl::open(
                parent,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .ok()
            .filter(|fd| {
                fstat(fd).is_ok_and(|st| st.st_dev == p.parent_dev && st.st_ino == p.parent_ino)
            });
            parents.push((parent.to_owned(), fd));
        }
        let Some(dir) = parents
            .iter()
            .find(|(d, _)| d == parent)
            .and_then(|(_, fd)| fd.as_ref())
        else {
            verdict(Removal::Kept("its directory is not the one it was made in"));
            continue;
        };
        let Ok(st) = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
            verdict(Removal::Gone);
            continue;
        };
        if st.st_dev != p.dev || st.st_ino != p.ino || walk_cache::ctime_of(&st) != p.ctime {
            verdict(Removal::Kept("another file, or changed since it was made"));
            continue;
        }
        let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
        let removed = if kind == SFlag::S_IFDIR {
            unlinkat(dir, name, UnlinkatFlags::RemoveDir).is_ok()
        } else if kind == SFlag::S_IFREG && st.st_size == 0 {
            unlinkat(dir, name, UnlinkatFlags::NoRemoveDir).is_ok()
        } else {
            false
        };
        verdict(if removed {
            Removal::Removed
        } else {
            Removal::Kept("not empty")
        });
    }
    out
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_decoded() {
        let line = "36 35 98:0 / /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw\n";
        assert_eq!(
            parse_mountinfo(line),
            vec![PathBuf::from("/mnt/with space")]
        );
        assert_eq!(unescape_mountinfo("a\\0"), "a\\0");
    }

    fn create_placeholder(path: &Path, dir: bool) -> Option<Placeholder> {
        create_placeholders(&[(path.to_owned(), dir)])
            .unwrap()
            .pop()
    }

    #[test]
    fn placeholders_are_removed_only_where_they_were_made() {
        let base = std::env::temp_dir().join(format!("palisade-ph-{}", std::process::id()));
        let w = base.join("w");
        std::fs::create_dir_all(&w).unwrap();
        // Positive control: untouched placeholders (a file and a directory)
        // are removed.
        let a = create_placeholder(&w.join(".bashrc"), false).unwrap();
        let b = create_placeholder(&w.join(".palisade"), true).unwrap();
        remove_placeholders(&[a, b]);
        assert!(!w.join(".bashrc").exists() && !w.join(".palisade").exists());
        // The parent swapped for another directory holding the same name,
        // even a link to the very placeholder inode: it stays.
        let c = create_placeholder(&w.join(".bashrc"), false).unwrap();
        std::fs::rename(&w, base.join("moved")).unwrap();
        std::fs::create_dir(&w).unwrap();
        std::fs::hard_link(base.join("moved/.bashrc"), w.join(".bashrc")).unwrap();
        remove_placeholders(std::slice::from_ref(&c));
        assert!(
            w.join(".bashrc").exists(),
            "removed a link through a swapped parent"
        );
        std::fs::remove_file(w.join(".bashrc")).unwrap();
        std::fs::write(w.join(".bashrc"), "").unwrap();
        remove_placeholders(std::slice::from_ref(&c));
        assert!(
            w.join(".bashrc").exists(),
            "removed through a swapped parent"
        );
        // The parent swapped for a symlink to the original: not followed.
        std::fs::remove_dir_all(&w).unwrap();
        std::os::unix::fs::symlink(base.join("moved"), &w).unwrap();
        remove_placeholders(std::slice::from_ref(&c));
        assert!(
            base.join("moved/.bashrc").exists(),
            "removed through a symlink"
        );
        // A placeholder written to is kept.
        std::fs::remove_file(&w).unwrap();
        std::fs::rename(base.join("moved"), &w).unwrap();
        std::fs::write(w.join(".bashrc"), "x").unwrap();
        remove_placeholders(std::slice::from_ref(&c));
        assert!(
            w.join(".bashrc").exists(),
            "removed a placeholder that was written to"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_state_root_gets_no_protected_names_only_its_protected_paths() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        let proj = t.path().join("proj");
        for d in [&home, &proj] {
            std::fs::create_dir_all(d.join(".claude")).unwrap();
        }
        std::fs::write(home.join("settings.json"), "").unwrap();
        let mut p = Profile::governed();
        p.add_writable(&proj)
            .add_writable_state(&home)
            .protect_name(".pi")
            .protect(home.join("settings.json"));
        let (hc, pc) = (canonical(&home).unwrap(), canonical(&proj).unwrap());
        let (plan, _) = build(&p, &PlanInput::default()).unwrap();
        let text = plan.text();
        assert!(text.contains(&format!("rw {}\n", hc.display())), "{text}");
        for name in [".claude", ".pi", ".bashrc"] {
            assert!(
                !text.contains(&format!("protect {}/{name}", hc.display())),
                "{name} in the state root: {text}"
            );
            // Control: the project root keeps every name.
            assert!(
                text.contains(&format!("protect {}/{name}", pc.display())),
                "{name} in the project root: {text}"
            );
        }
        assert!(!plan.placeholders.iter().any(|x| x.starts_with(&hc)));
        assert!(
            text.contains(&format!("protect {}/settings.json", hc.display())),
            "{text}"
        );
        // The same path also added as a project root is a project root.
        p.add_writable(&home);
        let (both, _) = build(&p, &PlanInput::default()).unwrap();
        assert!(
            both.text()
                .contains(&format!("protect {}/.claude", hc.display())),
            "{}",
            both.text()
        );
    }

    #[test]
    fn a_staged_plan_mounts_overlays_masks_the_base_and_plants_nothing() {
        let t = tempfile::tempdir().unwrap();
        let w = t.path().join("w");
        std::fs::create_dir_all(w.join(".git")).unwrap();
        std::fs::write(w.join(".git/config"), "").unwrap();
        let mut p = Profile::governed();
        p.add_writable(&w);
        let wc = canonical(&w).unwrap();
        let staged = |n: usize| PlanInput {
            staged: Some(Staged {
                base: PathBuf::from("/srv/stages"),
                layers: (0..n)
                    .map(|i| {
                        (
                            wc.clone(),
                            PathBuf::from(format!("/srv/stages/s/{i}/upper")),
                            PathBuf::from(format!("/srv/stages/s/{i}/work")),
                        )
                    })
                    .collect(),
            }),
            ..PlanInput::default()
        };
        let (plan, _) = build(&p, &staged(1)).unwrap();
        let text = plan.text();
        assert!(
            text.contains(&format!(
                "overlay {} upper=/srv/stages/s/0/upper work=/srv/stages/s/0/work\n",
                wc.display()
            )),
            "{text}"
        );
        assert!(!text.contains(&format!("rw {}", wc.display())), "{text}");
        assert!(text.contains("mask-dir /srv/stages\n"), "{text}");
        // The existing protected name stays bound read-only; no absent one
        // gets a placeholder or a bind.
        assert!(text.contains(&format!("protect {}/.git/config", wc.display())));
        assert!(!text.contains(".bashrc"), "{text}");
        assert!(plan.placeholders.is_empty());
        // Control: direct writes bind the root and plan placeholders.
        let (direct, _) = build(&p, &PlanInput::default()).unwrap();
        assert!(direct.text().contains(&format!("rw {}\n", wc.display())));
        assert!(direct.placeholders.iter().any(|x| x.ends_with(".bashrc")));
        assert_ne!(direct.digest(), plan.digest());
        // A stage of another shape is refused.
        let e = build(&p, &staged(2)).unwrap_err().to_string();
        assert!(e.contains("the stage has 2 roots"), "{e}");
        // So is one made for another root (resolved differently since).
        let mut other = staged(1);
        if let Some(st) = other.staged.as_mut() {
            st.layers[0].0 = t.path().to_path_buf();
        }
        let e = build(&p, &other).unwrap_err().to_string();
        assert!(e.contains("resolved differently"), "{e}");
    }

    #[test]
    fn a_bind_through_a_symlink_into_a_mask_is_refused() {
        // Outside /tmp (a mount of its own), as the mask tests.
        let target =
            std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("../target")).unwrap();
        let t = tempfile::tempdir_in(target).unwrap();
        let hidden = t.path().join("hidden");
        let repo = t.path().join("repo");
        std::fs::create_dir_all(hidden.join("inner")).unwrap();
        std::fs::create_dir_all(&repo).unwrap();
        // What a worker leaves in its writable root for a later launch.
        std::os::unix::fs::symlink(hidden.join("inner"), repo.join("build")).unwrap();
        let profile = |f: &dyn Fn(&mut Profile)| {
            let mut p = Profile::governed();
            p.add_mask(&hidden);
            f(&mut p);
            p
        };
        // Positive controls: the bind named inside the mask itself (as a
        // project under the `/home` mask), and the repository, are planned.
        for ok in [hidden.join("inner"), repo.clone()] {
            build(
                &profile(&|p| {
                    p.add_writable(&ok);
                }),
                &PlanInput::default(),
            )
            .unwrap();
            build(
                &profile(&|p| {
                    p.add_read_only(&ok);
                }),
                &PlanInput::default(),
            )
            .unwrap();
        }
        // A mask that is itself a symlink is resolved: named through it, the
        // bind is where it says.
        std::os::unix::fs::symlink(&hidden, t.path().join("masklink")).unwrap();
        let mut p = profile(&|p| {
            p.add_writable(t.path().join("masklink/inner"));
        });
        p.add_mask(t.path().join("masklink"));
        build(&p, &PlanInput::default()).unwrap();
        // Through a symlink inside the mask itself (`~/proj/build -> ~/.ssh`
        // under the `/home` mask) as well as from outside it.
        std::os::unix::fs::symlink(hidden.join("inner"), hidden.join("link")).unwrap();
        for link in [repo.join("build"), hidden.join("link")] {
            for writable in [true, false] {
                let p = profile(&|p| {
                    if writable {
                        p.add_writable(&link);
                    } else {
                        p.add_read_only(&link);
                    }
                });
                let e = build(&p, &PlanInput::default()).unwrap_err().to_string();
                assert!(e.contains("mask_redirected"), "{}: {e}", link.display());
                assert!(e.contains(&hidden.display().to_string()), "{e}");
            }
        }
        // Under an empty root the host masks count too.
        let mut p = Profile::strict();
        p.add_mask(&hidden).add_read_only(repo.join("build"));
        let e = build(&p, &PlanInput::default()).unwrap_err().to_string();
        assert!(e.contains("mask_redirected"), "{e}");
        let link = repo.join("build");
        for writable in [true, false] {
            let p = profile(&|p| {
                if writable {
                    p.add_writable(&link);
                } else {
                    p.add_read_only(&link);
                }
            });
            let e = build(&p, &PlanInput::default()).unwrap_err().to_string();
            assert!(e.contains("mask_redirected"), "writable {writable}: {e}");
            assert!(e.contains(&hidden.display().to_string()), "{e}");
        }
    }

    #[test]
    fn a_protected_name_outside_the_writable_roots_is_refused() {
        let target =
            std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("../target")).unwrap();
        let t = tempfile::tempdir_in(target).unwrap();
        let root = t.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let outside = t.path().join("outside");
        let plan_with = |name: &str| {
            let mut p = Profile::governed();
            p.add_writable(&root).protect_name(name);
            build(&p, &PlanInput::default())
        };
        // Positive control: a name inside the root gets its placeholder there.
        let (plan, _) = plan_with(".cursorrules").unwrap();
        assert!(plan.placeholders.contains(&root.join(".cursorrules")));
        for bad in [
            "../outside".to_owned(),
            outside.display().to_string(),
            "a/../../outside".to_owned(),
            "./x".to_owned(),
            String::new(),
        ] {
            match plan_with(&bad) {
                Err(e) => assert!(e.to_string().contains("protected name"), "{bad}: {e}"),
                Ok((plan, _)) => panic!("{bad}: planned {:?}", plan.placeholders),
            }
        }
        assert!(!outside.exists());
    }

    #[test]
    fn net_unix_keeps_pathname_sockets_only() {
        let t = "Num RefCount Protocol Flags Type St Inode Path\n\
                 0000: 00000002 00000000 00010000 0001 01 1 /run/x.sock\n\
                 0000: 00000002 00000000 00010000 0001 01 2 @abstract\n\
                 0000: 00000002 00000000 00010000 0001 01 3\n";
        assert_eq!(parse_net_unix(t), vec![PathBuf::from("/run/x.sock")]);
    }

    fn cached_walk(
        root: &Path,
        old: walk_cache::WalkCache,
        margin: std::time::Duration,
    ) -> (Vec<PathBuf>, CacheUse) {
        let mut out = Walk {
            repos: Vec::new(),
            symlinked_git: Vec::new(),
            sockets: Vec::new(),
            entries: 0,
        };
        let mut c = CacheUse::new(old, std::time::SystemTime::now(), margin);
        walk_with(root, false, &mut out, Some(&mut c)).unwrap();
        (out.sockets, c)
    }

    #[test]
    fn an_unchanged_tree_is_checked_from_the_cache_and_a_new_socket_is_still_found() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for d in ["a/b", "a/c", "d"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        std::fs::write(r.join("a/file"), "x").unwrap();
        let margin = std::time::Duration::from_millis(50);
        std::thread::sleep(margin * 3);
        // First walk: everything listed, four directories recorded.
        let (found, c1) = cached_walk(r, walk_cache::WalkCache::default(), margin);
        assert!(found.is_empty());
        assert_eq!((c1.listed, c1.reused), (5, 0));
        assert_eq!(c1.new.entries.len(), 5);
        assert!(c1.changed());
        // Second walk: nothing listed, and nothing to store.
        let (found, c2) = cached_walk(r, c1.merged(), margin);
        assert!(found.is_empty());
        assert_eq!((c2.listed, c2.reused), (0, 5));
        assert!(!c2.changed());
        // A socket made in a cached directory changes its ctime: listed again, found.
        let sock = r.join("a/b/agent.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let (found, c3) = cached_walk(r, c2.merged(), margin);
        assert_eq!(found, vec![sock.clone()]);
        assert_eq!((c3.listed, c3.reused), (1, 4));
        // Its directory is no longer recorded, so the next walk lists it again.
        assert!(c3.changed());
        let stored = c3.merged();
        assert_eq!(stored.entries.len(), 4);
        std::thread::sleep(margin * 3);
        let (found, c4) = cached_walk(r, stored, margin);
        assert_eq!(found, vec![sock]);
        assert_eq!((c4.listed, c4.reused), (1, 4));
    }

    #[test]
    fn a_directory_swapped_in_at_a_cached_path_is_listed() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("a/b")).unwrap();
        let margin = std::time::Duration::from_millis(50);
        std::thread::sleep(margin * 3);
        let (_, c1) = cached_walk(r, walk_cache::WalkCache::default(), margin);
        // Replace `a` by another directory holding a socket; walk it alone.
        std::fs::rename(r.join("a"), r.join("old")).unwrap();
        std::fs::create_dir(r.join("a")).unwrap();
        let sock = r.join("a/x.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let (found, c2) = cached_walk(&r.join("a"), c1.merged(), margin);
        assert_eq!(found, vec![sock]);
        assert_eq!((c2.listed, c2.reused), (1, 0));
        // Control: the old `a` is listed again too (the rename moved its
        // ctime on), but its unchanged subdirectory comes from the cache.
        let (found, c3) = cached_walk(&r.join("old"), c1.merged(), margin);
        assert!(found.is_empty());
        assert_eq!((c3.listed, c3.reused), (1, 1));
    }

    #[test]
    fn recent_directories_are_not_recorded() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a")).unwrap();
        let (_, c) = cached_walk(
            t.path(),
            walk_cache::WalkCache::default(),
            std::time::Duration::from_secs(3600),
        );
        assert_eq!(c.listed, 2);
        assert!(c.new.entries.is_empty());
        // Control: with no margin the same tree is recorded.
        let (_, c) = cached_walk(
            t.path(),
            walk_cache::WalkCache::default(),
            std::time::Duration::ZERO,
        );
        assert_eq!(c.new.entries.len(), 2);
    }

    #[test]
    fn the_cache_directory_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("cache");
        // Created with 0700 when absent, and usable.
        let c = walk_cache::CacheDir::open(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let mut cache = walk_cache::WalkCache::default();
        cache.entries.insert(
            (1, 2),
            walk_cache::Entry {
                ctime: (3, 4),
                subdirs: Vec::new(),
            },
        );
        c.store(&cache);
        assert_eq!(walk_cache::CacheDir::open(&dir).unwrap().load(), cache);
        // Open to the group: not used.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).unwrap();
        let err = walk_cache::CacheDir::open(&dir).unwrap_err();
        assert!(err.contains("0700 required"), "{err}");
        // A symlink to a private directory: not used.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(walk_cache::CacheDir::open(&link).is_err());
        // A file that does not parse reads as empty.
        std::fs::write(dir.join("socket-walk-cache"), "garbage").unwrap();
        assert_eq!(
            walk_cache::CacheDir::open(&dir).unwrap().load(),
            walk_cache::WalkCache::default()
        );
    }

    #[test]
    fn a_directory_that_can_be_entered_but_not_listed_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root to switch to an unprivileged uid");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let base = t.path();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        };
        mode(base, 0o755);
        for (d, m) in [("enter-only", 0o711), ("closed", 0o700), ("open", 0o755)] {
            std::fs::create_dir(base.join(d)).unwrap();
            mode(&base.join(d), m);
        }
        let walk_as_nobody = |root: PathBuf| {
            crate::spawn::run_in_child(move || {
                let nobody = nix::unistd::Uid::from_raw(65_534);
                let nogroup = nix::unistd::Gid::from_raw(65_534);
                if nix::unistd::setresgid(nogroup, nogroup, nogroup).is_err()
                    || nix::unistd::setresuid(nobody, nobody, nobody).is_err()
                {
                    return 3;
                }
                let mut out = Walk {
                    repos: Vec::new(),
                    symlinked_git: Vec::new(),
                    sockets: Vec::new(),
                    entries: 0,
                };
                match walk(&root, false, &mut out) {
                    Ok(()) => 0,
                    Err(SandboxError::InvalidPath { reason, .. })
                        if reason.contains("cannot list this directory") =>
                    {
                        1
                    }
                    Err(_) => 2,
                }
            })
            .unwrap()
        };
        // `enter-only` (--x for others): a socket inside could be reached
        // by name and cannot be seen. Refused.
        assert_eq!(walk_as_nobody(base.to_owned()), 1);
        // `closed` (no access for others) alone: nothing inside is
        // reachable, so it is passed over.
        mode(&base.join("enter-only"), 0o755);
        assert_eq!(walk_as_nobody(base.to_owned()), 0);
        // Control: the same tree, `enter-only` back to --x, refused again.
        mode(&base.join("enter-only"), 0o711);
        assert_eq!(walk_as_nobody(base.join("enter-only")), 1);
        assert_eq!(walk_as_nobody(base.join("open")), 0);
    }
}
