//! A cache of the socket walk's per-directory findings, so that a launch
//! checks an unchanged read-only tree with one `stat` per directory instead
//! of listing every directory again.
//!
//! An entry says: the directory with this device and inode had this
//! status-change time (`ctime`), held no socket and had these
//! subdirectories. Adding, removing or renaming an entry of a directory
//! (creating a socket, hard-linking one in, moving one in) sets the
//! directory's `ctime` to the current time, and no unprivileged call sets
//! it to anything else; so a directory whose `ctime` still matches its
//! entry has the same names, and the walk goes on into the recorded
//! subdirectories, each checked the same way. Sockets bind-mounted onto a
//! path and sockets bound in the kernel's table are checked on every
//! launch, outside this cache.
//!
//! Two rules keep an entry honest:
//!
//! - **Racy timestamps.** File systems stamp times from a coarse clock (one
//!   scheduler tick), so a change just after the listing could carry the
//!   same `ctime` as the listing saw. An entry is written only for a
//!   directory whose `ctime` is at least [`RACY_MARGIN`] older than the
//!   listing (git's rule for its index).
//! - **Local file systems only.** Entries are written only for directories
//!   on ext2/3/4, XFS, Btrfs, F2FS and tmpfs, whose `ctime` the local kernel
//!   keeps. Network and FUSE file systems (whose times come from elsewhere)
//!   and overlayfs are listed on every launch.
//!
//! The cache file lives in a directory the launcher names
//! ([`crate::Sandbox::walk_cache`]); the directory must be owned by the
//! launcher's effective uid and closed to everyone else (mode `0700`, not a
//! symlink), or the cache is not used. A file that does not parse is
//! ignored and replaced. The cache can only save work the walk would do:
//! a stale or forged entry needs write access to that private directory,
//! that is, the launcher's own uid.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{Mode, fstat};

/// How much older than the listing a directory's `ctime` must be for its
/// entry to be written.
pub(crate) const RACY_MARGIN: Duration = Duration::from_secs(1);

/// The cache file's name inside the cache directory.
const FILE_NAME: &str = "socket-walk-cache";

/// The first line of the file: format and version.
const HEADER: &str = "palisade-socket-walk-cache 1";

/// At most this many directories are kept (about 100 bytes each).
const MAX_ENTRIES: usize = 200_000;

/// A cache file larger than this is ignored.
const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// A directory's identity: device and inode.
pub(crate) type DirKey = (u64, u64);

/// A `ctime`: seconds and nanoseconds since the epoch.
pub(crate) type Ctime = (i64, i64);

/// What the walk found in one directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) ctime: Ctime,
    /// Subdirectory names (not following symlinks), to walk on into.
    pub(crate) subdirs: Vec<OsString>,
}

/// The cache's content: directory → entry.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct WalkCache {
    pub(crate) entries: HashMap<DirKey, Entry>,
}

impl WalkCache {
    /// Parse a cache file; `None` when anything in it is malformed.
    ///
    /// Format: the header line, then one line per directory:
    /// `dev ino ctime_sec ctime_nsec name…`, each name in lowercase hex.
    pub(crate) fn parse(bytes: &[u8]) -> Option<WalkCache> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.split('\n');
        if lines.next()? != HEADER {
            return None;
        }
        let mut entries = HashMap::new();
        for line in lines {
            if line.is_empty() {
                continue;
            }
            if entries.len() >= MAX_ENTRIES {
                return None;
            }
            let mut f = line.split(' ');
            let dev = f.next()?.parse::<u64>().ok()?;
            let ino = f.next()?.parse::<u64>().ok()?;
            let sec = f.next()?.parse::<i64>().ok()?;
            let nsec = f.next()?.parse::<i64>().ok()?;
            if !(0..1_000_000_000).contains(&nsec) {
                return None;
            }
            let subdirs = f.map(unhex).collect::<Option<Vec<_>>>()?;
            let entry = Entry {
                ctime: (sec, nsec),
                subdirs,
            };
            if entries.insert((dev, ino), entry).is_some() {
                return None;
            }
        }
        Some(WalkCache { entries })
    }

    /// The file form of the cache (entries sorted, so equal caches give
    /// equal files).
    pub(crate) fn render(&self) -> Vec<u8> {
        let mut keys: Vec<&DirKey> = self.entries.keys().collect();
        keys.sort();
        let mut out = String::from(HEADER);
        out.push('\n');
        for key in keys {
            let Some(e) = self.entries.get(key) else {
                continue;
            };
            out.push_str(&format!("{} {} {} {}", key.0, key.1, e.ctime.0, e.ctime.1));
            for name in &e.subdirs {
                out.push(' ');
                out.push_str(&hex::encode(name.as_bytes()));
            }
            out.push('\n');
        }
        out.into_bytes()
    }
}

/// A name in hex; names are never empty.
fn unhex(s: &str) -> Option<OsString> {
    let bytes = hex::decode(s).ok()?;
    if bytes.is_empty() || bytes.contains(&b'/') || bytes.contains(&0) {
        return None;
    }
    Some(OsString::from_vec(bytes))
}

/// Whether entries may be written for directories on the file system of `fd`.
pub(crate) fn local_fs(fd: impl AsFd) -> bool {
    use nix::sys::statfs::fstatfs;
    let Ok(st) = fstatfs(fd) else {
        return false;
    };
    let magic = st.filesystem_type().0;
    [
        libc::EXT4_SUPER_MAGIC,
        libc::XFS_SUPER_MAGIC,
        libc::BTRFS_SUPER_MAGIC,
        libc::F2FS_SUPER_MAGIC,
        libc::TMPFS_MAGIC,
    ]
    .contains(&magic)
}

/// Whether a directory stamped `ctime` may be recorded by a listing at `now`.
pub(crate) fn settled(ctime: Ctime, now: SystemTime, margin: Duration) -> bool {
    let Ok(since) = now.duration_since(UNIX_EPOCH) else {
        return false;
    };
    let Some(limit) = since.checked_sub(margin) else {
        return false;
    };
    let limit = (
        i64::try_from(limit.as_secs()).unwrap_or(i64::MAX),
        i64::from(limit.subsec_nanos()),
    );
    ctime < limit
}

/// The cache directory, opened and checked.
#[derive(Debug)]
pub(crate) struct CacheDir {
    fd: OwnedFd,
}

impl CacheDir {
    /// Open (creating it with mode `0700` when absent) and check the cache
    /// directory: not a symlink, owned by the effective uid, no access for
    /// group or others.
    pub(crate) fn open(path: &Path) -> Result<CacheDir, String> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = match nix::fcntl::open(path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ENOENT) => {
                match nix::unistd::mkdir(path, Mode::from_bits_truncate(0o700)) {
                    Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                    Err(e) => {
                        return Err(format!("{}: cannot create: {}", path.display(), e.desc()));
                    }
                }
                nix::fcntl::open(path, flags, Mode::empty())
                    .map_err(|e| format!("{}: {}", path.display(), e.desc()))?
            }
            Err(e) => return Err(format!("{}: {}", path.display(), e.desc())),
        };
        let st = fstat(&fd).map_err(|e| format!("{}: {}", path.display(), e.desc()))?;
        if st.st_uid != nix::unistd::geteuid().as_raw() {
            return Err(format!(
                "{}: not owned by the launcher's uid",
                path.display()
            ));
        }
        if st.st_mode & 0o077 != 0 {
            return Err(format!(
                "{}: mode {:o} lets others in (0700 required)",
                path.display(),
                st.st_mode & 0o7777
            ));
        }
        Ok(CacheDir { fd })
    }

    /// The cache as stored; empty when absent, unreadable or malformed.
    pub(crate) fn load(&self) -> WalkCache {
        use std::io::Read;
        let Ok(fd) = openat(
            &self.fd,
            FILE_NAME,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) else {
            return WalkCache::default();
        };
        let mut bytes = Vec::new();
        let file = std::fs::File::from(fd);
        if file
            .take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .is_err()
            || bytes.len() as u64 > MAX_FILE_BYTES
        {
            return WalkCache::default();
        }
        WalkCache::parse(&bytes).unwrap_or_default()
    }

    /// Replace the stored cache (a new file renamed over the old one, so a
    /// concurrent launch reads one or the other). Failures are ignored: the
    /// next launch lists again.
    pub(crate) fn store(&self, cache: &WalkCache) {
        use std::io::Write;
        if cache.entries.len() > MAX_ENTRIES {
            return;
        }
        let tmp = format!(".{FILE_NAME}.{}", std::process::id());
        let Ok(fd) = openat(
            &self.fd,
            tmp.as_str(),
            OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_TRUNC
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        ) else {
            return;
        };
        let mut file = std::fs::File::from(fd);
        if file.write_all(&cache.render()).is_err()
            || renameat(&self.fd, tmp.as_str(), &self.fd, FILE_NAME).is_err()
        {
            let _ = nix::unistd::unlinkat(
                &self.fd,
                tmp.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
    }
}

/// A `ctime` from a stat.
pub(crate) fn ctime_of(st: &nix::sys::stat::FileStat) -> Ctime {
    (st.st_ctime, st.st_ctime_nsec)
}

/// The (dev, ino) key of a stat.
pub(crate) fn key_of(st: &nix::sys::stat::FileStat) -> DirKey {
    (st.st_dev, st.st_ino)
}

/// `lstat` of a path, for checking a cached directory.
pub(crate) fn lstat(path: &Path) -> Option<nix::sys::stat::FileStat> {
    nix::sys::stat::lstat(path).ok()
}

/// The use of the cache during one walk: what was read, what is written,
/// and counts for tests.
#[derive(Debug)]
pub(crate) struct CacheUse {
    pub(crate) old: WalkCache,
    pub(crate) new: WalkCache,
    pub(crate) now: SystemTime,
    pub(crate) margin: Duration,
    /// Directories listed.
    pub(crate) listed: usize,
    /// Directories taken from the cache.
    pub(crate) reused: usize,
    /// Directories listed whose listing was not recorded (a socket in
    /// them, a recent or unknown ctime): their stored entries go.
    pub(crate) dropped: std::collections::HashSet<DirKey>,
}

impl CacheUse {
    pub(crate) fn new(old: WalkCache, now: SystemTime, margin: Duration) -> CacheUse {
        CacheUse {
            old,
            new: WalkCache::default(),
            now,
            margin,
            listed: 0,
            reused: 0,
            dropped: std::collections::HashSet::new(),
        }
    }

    /// The subdirectories of `dir` when its entry still holds.
    pub(crate) fn reuse(&mut self, dir: &Path) -> Option<Vec<PathBuf>> {
        let st = lstat(dir)?;
        let key = key_of(&st);
        let entry = self.old.entries.get(&key)?;
        if entry.ctime != ctime_of(&st) {
            return None;
        }
        let subdirs = entry.subdirs.iter().map(|n| dir.join(n)).collect();
        self.new.entries.insert(key, entry.clone());
        self.reused += 1;
        Some(subdirs)
    }

    /// Record the listing of a directory: `entry` when it may be kept.
    pub(crate) fn listed(&mut self, key: DirKey, entry: Option<Entry>) {
        self.listed += 1;
        match entry {
            Some(e) => {
                self.new.entries.insert(key, e);
            }
            None => {
                self.dropped.insert(key);
            }
        }
    }

    /// Whether this walk recorded anything the stored cache lacks, or
    /// dropped an entry it has.
    pub(crate) fn changed(&self) -> bool {
        self.new
            .entries
            .iter()
            .any(|(k, e)| self.old.entries.get(k) != Some(e))
            || self
                .dropped
                .iter()
                .any(|k| self.old.entries.contains_key(k))
    }

    /// What to store: the entries of this walk, and the stored entries of
    /// directories it did not reach (other launches walk other trees),
    /// those only while the total stays under the cap.
    pub(crate) fn merged(&self) -> WalkCache {
        let mut out = self.new.clone();
        if self.old.entries.len() + self.new.entries.len() <= MAX_ENTRIES {
            for (k, e) in &self.old.entries {
                if !self.dropped.contains(k) {
                    out.entries.entry(*k).or_insert_with(|| e.clone());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> WalkCache {
        let mut c = WalkCache::default();
        c.entries.insert(
            (2049, 131_073),
            Entry {
                ctime: (1_700_000_000, 123_456_789),
                subdirs: vec![OsString::from("certs"), OsString::from("a b\n")],
            },
        );
        c.entries.insert(
            (2049, 7),
            Entry {
                ctime: (1_600_000_000, 0),
                subdirs: Vec::new(),
            },
        );
        c
    }

    #[test]
    fn a_rendered_cache_parses_back() {
        let c = sample();
        assert_eq!(WalkCache::parse(&c.render()), Some(c));
    }

    #[test]
    fn malformed_files_are_refused() {
        let good = String::from_utf8(sample().render()).unwrap();
        assert!(WalkCache::parse(good.as_bytes()).is_some(), "control");
        let bad = [
            String::new(),
            good.replacen(
                "palisade-socket-walk-cache 1",
                "palisade-socket-walk-cache 2",
                1,
            ),
            good.replacen("123456789", "1234567890", 1),
            good.replacen("2049 7 ", "2049 x ", 1),
            format!("{good}2049 7 1 0\n"),
            format!("{good}2049 8 1 0 2f\n"),
            format!("{good}2049 9 1 0 00\n"),
            format!("{good}2049 10 1 0 zz\n"),
            format!("{good}2049 11 1\n"),
        ];
        for b in bad {
            assert_eq!(WalkCache::parse(b.as_bytes()), None, "{b:?}");
        }
    }

    #[test]
    fn only_settled_times_are_recorded() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let m = Duration::from_secs(1);
        assert!(settled((998, 999_999_999), now, m));
        assert!(!settled((999, 0), now, m));
        assert!(!settled((999, 1), now, m));
        assert!(!settled((1_000, 0), now, m));
        assert!(!settled((0, 0), UNIX_EPOCH, m));
    }
}
