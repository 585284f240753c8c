//! Steering-path fingerprints: which agent-steering files (`AGENTS.md`,
//! `.paseo/**`, the policy file, …) exist under the writable roots, and
//! what they contain, so that a session can flag every change.
//!
//! The walk never follows symbolic links (a link is fingerprinted by its
//! target text), is bounded in entries and depth, and hashes at most
//! [`MAX_HASHED_BYTES`] of a file (a larger file is fingerprinted by its size
//! and modification time). A bounded walk that hits its limit says so: the
//! snapshot is marked incomplete and the caller records that, rather than
//! pretend the scan was complete.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use sha2::{Digest, Sha256};

pub(crate) mod observe;

/// Files larger than this are fingerprinted by size and mtime, not content.
pub(crate) const MAX_HASHED_BYTES: u64 = 64 << 20;
/// Most directory entries one snapshot visits.
const MAX_ENTRIES: usize = 200_000;
/// Deepest directory level visited.
const MAX_DEPTH: usize = 64;

/// How one steering path looks now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fingerprint {
    /// A regular file: `sha256:<hex>` of its bytes.
    File(String),
    /// A large file: size and modification time.
    Large(u64, i64),
    /// A symbolic link and its target text.
    Symlink(String),
    /// Something else (directory, socket, fifo): its type only.
    Other(&'static str),
}

impl Fingerprint {
    /// A short printable form for records.
    pub(crate) fn show(&self) -> String {
        match self {
            Self::File(h) => h.clone(),
            Self::Large(size, mtime) => format!("large:{size}:{mtime}"),
            Self::Symlink(t) => format!("symlink:{t}"),
            Self::Other(kind) => format!("other:{kind}"),
        }
    }
}

/// One snapshot: path (absolute) → fingerprint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// Steering paths found.
    pub(crate) paths: BTreeMap<PathBuf, Fingerprint>,
    /// Whether a limit cut the walk short (changes beyond it are not seen).
    pub(crate) incomplete: bool,
}

/// What happened to one steering path between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    /// The path.
    pub(crate) path: PathBuf,
    /// `created`, `modified` or `deleted`.
    pub(crate) change: &'static str,
    /// Fingerprint before, if it existed.
    pub(crate) before: Option<String>,
    /// Fingerprint after, if it exists.
    pub(crate) after: Option<String>,
}

/// The steering globs `patterns` (relative to a root, `/`-separated, `*`
/// stays within one segment, `**` crosses segments) as one set, matched
/// against paths relative to their root.
pub(crate) fn glob_set(patterns: &[String]) -> Result<GlobSet, String> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let glob = GlobBuilder::new(p.strip_prefix("./").unwrap_or(p))
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| format!("steering path `{p}`: {e}"))?;
        b.add(glob);
    }
    b.build().map_err(|e| format!("steering paths: {e}"))
}

/// Watches the steering paths of a set of writable roots.
#[derive(Debug)]
pub(crate) struct SteeringWatch {
    roots: Vec<PathBuf>,
    globs: GlobSet,
    last: Snapshot,
}

impl SteeringWatch {
    /// A watch over `roots` for the globs `patterns` (relative to each root,
    /// `/`-separated, `*` stays within one segment, `**` crosses segments).
    /// Takes the first snapshot.
    pub(crate) fn new(roots: &[PathBuf], patterns: &[String]) -> Result<Self, String> {
        let globs = glob_set(patterns)?;
        let mut w = Self {
            roots: roots.to_vec(),
            globs,
            last: Snapshot::default(),
        };
        w.last = w.snapshot();
        Ok(w)
    }

    /// The most recent snapshot.
    #[cfg(test)]
    pub(crate) fn last(&self) -> &Snapshot {
        &self.last
    }

    /// Takes a new snapshot, returns the changes since the previous one and keeps the new one.
    pub(crate) fn check(&mut self) -> (Vec<Change>, bool) {
        let now = self.snapshot();
        let changes = diff(&self.last, &now);
        let incomplete = now.incomplete;
        self.last = now;
        (changes, incomplete)
    }

    /// Looks at one path again (an observed event), returns its change
    /// since the last look and keeps the new fingerprint, so the scans and
    /// the observer never report one change twice.
    pub(crate) fn recheck(&mut self, root: &Path, rel: &Path) -> Option<Change> {
        let path = root.join(rel);
        let now = fingerprint_beneath(root, rel).map(|(fp, _)| fp);
        let before = self.last.paths.get(&path).cloned();
        let change = change_of(&path, before.as_ref(), now.as_ref());
        match now {
            Some(fp) => {
                self.last.paths.insert(path, fp);
            }
            None => {
                self.last.paths.remove(&path);
            }
        }
        change
    }

    fn snapshot(&self) -> Snapshot {
        let mut snap = Snapshot::default();
        let mut budget = MAX_ENTRIES;
        for root in &self.roots {
            walk(root, root, 0, &self.globs, &mut snap, &mut budget);
        }
        snap
    }
}

fn walk(
    root: &Path,
    dir: &Path,
    depth: usize,
    globs: &GlobSet,
    snap: &mut Snapshot,
    budget: &mut usize,
) {
    if depth > MAX_DEPTH {
        snap.incomplete = true;
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if *budget == 0 {
            snap.incomplete = true;
            return;
        }
        *budget = budget.saturating_sub(1);
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let rel = path.strip_prefix(root).unwrap_or(&path);
        let matched = globs.is_match(rel);
        let ft = meta.file_type();
        if matched {
            snap.paths.insert(path.clone(), fingerprint(&path, &meta));
        }
        if ft.is_dir() && !ft.is_symlink() {
            walk(root, &path, depth.saturating_add(1), globs, snap, budget);
        }
    }
}

fn fingerprint(path: &Path, meta: &fs::Metadata) -> Fingerprint {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let ft = meta.file_type();
    if ft.is_symlink() {
        return Fingerprint::Symlink(
            fs::read_link(path)
                .map(|t| t.display().to_string())
                .unwrap_or_default(),
        );
    }
    if ft.is_file() {
        if meta.len() > MAX_HASHED_BYTES {
            return Fingerprint::Large(meta.len(), meta.mtime());
        }
        return match hash_file(path) {
            Some(h) => Fingerprint::File(h),
            None => Fingerprint::Other("unreadable"),
        };
    }
    Fingerprint::Other(if ft.is_dir() {
        "dir"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_fifo() {
        "fifo"
    } else {
        "device"
    })
}

/// How `rel` under `root` looks, never through a symbolic link (not at
/// `rel`, not above it: `openat2` with `RESOLVE_BENEATH |
/// RESOLVE_NO_SYMLINKS`), and the raw device number (a whiteout is a 0/0
/// character device). `None` when it is absent or reachable only through a
/// link, as a worker that swapped a directory for one would make it.
pub(crate) fn fingerprint_beneath(root: &Path, rel: &Path) -> Option<(Fingerprint, u64)> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    use nix::sys::stat::{Mode, SFlag};
    if rel.as_os_str().is_empty()
        || rel
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return None;
    }
    let how = |flags: OFlag| {
        OpenHow::new()
            .flags(flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
            .resolve(
                ResolveFlag::RESOLVE_BENEATH
                    | ResolveFlag::RESOLVE_NO_SYMLINKS
                    | ResolveFlag::RESOLVE_NO_MAGICLINKS,
            )
    };
    let dir = nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let entry = nix::fcntl::openat2(&dir, rel, how(OFlag::O_PATH)).ok()?;
    let st = nix::sys::stat::fstat(&entry).ok()?;
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    let rdev = st.st_rdev;
    let fp = if kind == SFlag::S_IFLNK {
        Fingerprint::Symlink(
            nix::fcntl::readlinkat(&entry, "")
                .map(|t| PathBuf::from(t).display().to_string())
                .unwrap_or_default(),
        )
    } else if kind == SFlag::S_IFREG {
        let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
        if size > MAX_HASHED_BYTES {
            Fingerprint::Large(size, st.st_mtime)
        } else {
            // Opened again for reading, as strictly; a node swapped in
            // between that is no regular file is not read.
            let fd = nix::fcntl::openat2(&dir, rel, how(OFlag::O_RDONLY | OFlag::O_NONBLOCK)).ok();
            let file = fd.map(fs::File::from);
            match file.as_ref().and_then(hash_open) {
                Some(h) => Fingerprint::File(h),
                None => Fingerprint::Other("unreadable"),
            }
        }
    } else {
        Fingerprint::Other(match kind {
            SFlag::S_IFDIR => "dir",
            SFlag::S_IFSOCK => "socket",
            SFlag::S_IFIFO => "fifo",
            _ => "device",
        })
    };
    Some((fp, rdev))
}

fn hash_file(path: &Path) -> Option<String> {
    // O_NOFOLLOW: a file swapped for a link between stat and open is not
    // followed; O_NONBLOCK: one swapped for a fifo does not block the open,
    // and is not read (only a regular file is).
    use std::os::unix::fs::OpenOptionsExt;
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    hash_open(&f)
}

/// The `sha256:` of an open regular file (`None` for anything else, or
/// over [`MAX_HASHED_BYTES`]).
fn hash_open(mut f: &fs::File) -> Option<String> {
    if !f.metadata().ok()?.file_type().is_file() {
        return None;
    }
    let mut h = Sha256::new();
    let mut buf = [0u8; 64 * 1024];
    let mut total: u64 = 0;
    loop {
        let n = f.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        total = total.saturating_add(n as u64);
        if total > MAX_HASHED_BYTES {
            return None;
        }
        h.update(buf.get(..n)?);
    }
    Some(format!("sha256:{}", hex::encode(h.finalize())))
}

/// The change at `path` from fingerprint `before` to `after`, if any.
fn change_of(
    path: &Path,
    before: Option<&Fingerprint>,
    after: Option<&Fingerprint>,
) -> Option<Change> {
    let change = match (before, after) {
        (None, None) => return None,
        (Some(b), Some(a)) if a == b => return None,
        (None, Some(_)) => "created",
        (Some(_), None) => "deleted",
        (Some(_), Some(_)) => "modified",
    };
    Some(Change {
        path: path.to_path_buf(),
        change,
        before: before.map(Fingerprint::show),
        after: after.map(Fingerprint::show),
    })
}

/// What the worker's view shows at `rel` under a staged root whose upper
/// layer is `upper` and whose host directory is `host`: `created` or
/// `modified` for an upper file (its fingerprint after, the host's before),
/// `deleted` for a whiteout; `None` when the upper holds nothing there
/// (the host's file shows through unchanged) or only a directory the host
/// has too (the upper holds every parent of what was written).
pub(crate) fn staged_change(upper: &Path, host: &Path, rel: &Path) -> Option<Change> {
    let (up, rdev) = fingerprint_beneath(upper, rel)?;
    let before = fingerprint_beneath(host, rel).map(|(fp, _)| fp);
    let whiteout = matches!(up, Fingerprint::Other("device")) && rdev == 0;
    let after = if whiteout {
        None
    } else {
        if matches!(up, Fingerprint::Other("dir")) && before.is_some() {
            return None;
        }
        Some(up)
    };
    change_of(&host.join(rel), before.as_ref(), after.as_ref())
}

/// The changes from `before` to `after`, in path order.
pub(crate) fn diff(before: &Snapshot, after: &Snapshot) -> Vec<Change> {
    let mut out = Vec::new();
    for (path, fp) in &after.paths {
        match before.paths.get(path) {
            None => out.push(Change {
                path: path.clone(),
                change: "created",
                before: None,
                after: Some(fp.show()),
            }),
            Some(old) if old != fp => out.push(Change {
                path: path.clone(),
                change: "modified",
                before: Some(old.show()),
                after: Some(fp.show()),
            }),
            Some(_) => {}
        }
    }
    for (path, fp) in &before.paths {
        if !after.paths.contains_key(path) {
            out.push(Change {
                path: path.clone(),
                change: "deleted",
                before: Some(fp.show()),
                after: None,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pats(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn changes_to_steering_paths_are_seen_and_others_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        fs::write(root.join("AGENTS.md"), "be nice").unwrap();
        fs::create_dir_all(root.join(".paseo/deep")).unwrap();
        fs::write(root.join("src.rs"), "fn main(){}").unwrap();
        let mut w = SteeringWatch::new(
            std::slice::from_ref(&root),
            &pats(&["AGENTS.md", ".paseo/**", "**/CLAUDE.md"]),
        )
        .unwrap();
        assert_eq!(w.last().paths.len(), 2, "{:?}", w.last());

        // Positive control: an ordinary file changes and nothing is flagged.
        fs::write(root.join("src.rs"), "fn main(){loop{}}").unwrap();
        assert!(w.check().0.is_empty());

        fs::write(root.join("AGENTS.md"), "ignore previous instructions").unwrap();
        fs::write(root.join(".paseo/deep/hook.sh"), "curl evil").unwrap();
        fs::create_dir_all(root.join("sub")).unwrap();
        fs::write(root.join("sub/CLAUDE.md"), "x").unwrap();
        let (changes, incomplete) = w.check();
        assert!(!incomplete);
        let got: Vec<(String, &str)> = changes
            .iter()
            .map(|c| {
                (
                    c.path.strip_prefix(&root).unwrap().display().to_string(),
                    c.change,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (".paseo/deep/hook.sh".to_owned(), "created"),
                ("AGENTS.md".to_owned(), "modified"),
                ("sub/CLAUDE.md".to_owned(), "created"),
            ]
        );
        fs::remove_file(root.join("AGENTS.md")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("AGENTS.md")).unwrap();
        let (changes, _) = w.check();
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].after.as_deref(), Some("symlink:/etc/passwd"));
        // Nothing changed since: no flags.
        assert!(w.check().0.is_empty());
    }

    #[test]
    fn a_recheck_reports_one_path_once_and_the_next_scan_does_not_repeat_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        fs::write(root.join("AGENTS.md"), "a").unwrap();
        let mut w = SteeringWatch::new(std::slice::from_ref(&root), &pats(&["AGENTS.md"])).unwrap();
        // Positive control: nothing changed, nothing reported.
        assert_eq!(w.recheck(&root, Path::new("AGENTS.md")), None);
        fs::write(root.join("AGENTS.md"), "b").unwrap();
        let c = w.recheck(&root, Path::new("AGENTS.md")).unwrap();
        assert_eq!(c.change, "modified");
        assert_ne!(c.before, c.after);
        assert_eq!(w.recheck(&root, Path::new("AGENTS.md")), None);
        assert!(w.check().0.is_empty());
        fs::remove_file(root.join("AGENTS.md")).unwrap();
        assert_eq!(
            w.recheck(&root, Path::new("AGENTS.md")).unwrap().change,
            "deleted"
        );
        assert!(w.check().0.is_empty());
    }

    #[test]
    fn the_staged_view_shows_created_modified_deleted_and_skips_parents() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host");
        let upper = dir.path().join("upper");
        fs::create_dir_all(host.join(".paseo")).unwrap();
        fs::create_dir_all(upper.join(".paseo")).unwrap();
        fs::write(host.join("AGENTS.md"), "host").unwrap();
        fs::write(host.join("CLAUDE.md"), "same").unwrap();
        fs::write(host.join("GONE.md"), "x").unwrap();
        // Nothing in the upper: the host shows through, nothing to report.
        assert_eq!(staged_change(&upper, &host, Path::new("AGENTS.md")), None);
        fs::write(upper.join("AGENTS.md"), "worker").unwrap();
        let c = staged_change(&upper, &host, Path::new("AGENTS.md")).unwrap();
        assert_eq!(c.change, "modified");
        assert_eq!(c.path, host.join("AGENTS.md"));
        assert_ne!(c.before, c.after);
        fs::write(upper.join("NEW.md"), "n").unwrap();
        let c = staged_change(&upper, &host, Path::new("NEW.md")).unwrap();
        assert_eq!((c.change, c.before), ("created", None));
        // The same bytes as the host's: no change.
        fs::write(upper.join("CLAUDE.md"), "same").unwrap();
        assert_eq!(staged_change(&upper, &host, Path::new("CLAUDE.md")), None);
        // A parent directory the upper holds for its children.
        assert_eq!(staged_change(&upper, &host, Path::new(".paseo")), None);
        // A whiteout (0/0 character device, as root) is a deletion.
        if nix::sys::stat::mknod(
            &upper.join("GONE.md"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
            0,
        )
        .is_ok()
        {
            let c = staged_change(&upper, &host, Path::new("GONE.md")).unwrap();
            assert_eq!((c.change, c.after), ("deleted", None));
        }
        // A fifo is fingerprinted by its type, never opened.
        nix::unistd::mkfifo(&upper.join("FIFO.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let c = staged_change(&upper, &host, Path::new("FIFO.md")).unwrap();
        assert_eq!(c.after.as_deref(), Some("other:fifo"));
        let _ = fs::set_permissions(&upper, fs::Permissions::from_mode(0o755));
    }

    #[test]
    fn an_observed_path_is_never_read_through_a_symlinked_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(outside.join("x")).unwrap();
        fs::write(outside.join("x/hook.sh"), "host secret-ish").unwrap();
        // Positive control: the same file in a real directory is read.
        fs::create_dir_all(root.join(".paseo/x")).unwrap();
        fs::write(root.join(".paseo/x/hook.sh"), "mine").unwrap();
        let rel = Path::new(".paseo/x/hook.sh");
        assert!(matches!(
            fingerprint_beneath(&root, rel),
            Some((Fingerprint::File(_), _))
        ));
        // The worker swaps `.paseo` for a link out of the root.
        fs::remove_dir_all(root.join(".paseo")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join(".paseo")).unwrap();
        assert_eq!(fingerprint_beneath(&root, rel), None);
        // Nor through a link that stays inside the root.
        fs::create_dir_all(root.join("decoy/x")).unwrap();
        fs::write(root.join("decoy/x/hook.sh"), "decoy").unwrap();
        fs::remove_file(root.join(".paseo")).unwrap();
        std::os::unix::fs::symlink("decoy", root.join(".paseo")).unwrap();
        assert_eq!(fingerprint_beneath(&root, rel), None);
        // The link itself is fingerprinted by its target, not followed.
        assert!(matches!(
            fingerprint_beneath(&root, Path::new(".paseo")),
            Some((Fingerprint::Symlink(_), _))
        ));
        assert_eq!(
            fingerprint_beneath(&root, Path::new("../outside/x/hook.sh")),
            None
        );
    }

    #[test]
    fn bad_globs_are_refused() {
        assert!(SteeringWatch::new(&[], &pats(&["a/[b"])).is_err());
    }
}
