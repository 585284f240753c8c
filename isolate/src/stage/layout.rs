//! Creating, reopening and removing a stage directory (owner: staging mount).
//!
//! A stage is `<base>/<session>/` (mode `0700`, owned by the launcher) with
//! `manifest.json` and, per staged root `n`, `<n>/upper` (the overlay's
//! upper layer), `<n>/work` (its work directory) and `<n>/quarantine`,
//! owned by the worker's ids so that the overlay, mounted inside the
//! sandbox's user namespace, can write them. The base and the stage must
//! not be symlinks, must be the launcher's, and must lie outside every
//! staged root: an upper layer inside its own lower layer would let the
//! worker's writes show up in the host tree it stages.
//!
//! The manifest records, per root, the host path, whether the stage is on
//! the root's filesystem (then a commit can be a rename) and the [`Stamp`]
//! a later conflict check compares host ctimes with.

use std::fs;
use std::io::Read as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

use super::StageError;

/// The manifest's version; [`Stage::open`] refuses any other.
const MANIFEST_VERSION: u64 = 1;
/// The manifest's file name inside the stage.
const MANIFEST: &str = "manifest.json";
/// The largest manifest [`Stage::open`] reads.
const MANIFEST_MAX: u64 = 1 << 20;
/// The most staged roots one stage holds.
const MAX_ROOTS: usize = 256;
/// The longest session name.
const SESSION_MAX: usize = 128;
/// The marker whose ctime is the stamp, and the one re-touched until the
/// filesystem clock has moved past it.
const STAMP_MARKER: &str = "stamp";
const TICK_MARKER: &str = "tick";
/// How long [`Stage::create`] waits for the filesystem clock to tick.
const TICK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A ctime stamp (seconds, nanoseconds) of the host clock at a stage's
/// creation: a host path whose ctime is later changed since then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp {
    /// Seconds since the epoch.
    pub sec: i64,
    /// Nanoseconds.
    pub nsec: i64,
}

impl Stamp {
    fn of(meta: &fs::Metadata) -> Stamp {
        Stamp {
            sec: meta.ctime(),
            nsec: meta.ctime_nsec(),
        }
    }
}

/// One staged writable root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedRoot {
    pub(crate) root: PathBuf,
    pub(crate) upper: PathBuf,
    pub(crate) work: PathBuf,
    pub(crate) quarantine: PathBuf,
    pub(crate) started: Stamp,
    pub(crate) same_fs: bool,
}

impl StagedRoot {
    /// The host directory (the overlay's lower layer).
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// The upper layer.
    pub fn upper(&self) -> &Path {
        &self.upper
    }
    /// The overlay work directory.
    pub fn work(&self) -> &Path {
        &self.work
    }
    /// Where refused changes are kept.
    pub fn quarantine(&self) -> &Path {
        &self.quarantine
    }
    /// When the stage was created.
    pub fn started(&self) -> Stamp {
        self.started
    }
    /// Whether the stage lies on the root's filesystem (when it was
    /// created), so that committing a file can be a rename.
    pub fn same_filesystem(&self) -> bool {
        self.same_fs
    }
}

/// A session's stage directory.
#[derive(Debug)]
pub struct Stage {
    pub(crate) dir: PathBuf,
    pub(crate) session: String,
    pub(crate) roots: Vec<StagedRoot>,
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StageError + 'a {
    move |source| StageError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

fn invalid(path: &Path, reason: impl Into<String>) -> StageError {
    StageError::Invalid {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// A session name is one plain path component: ASCII letters, digits,
/// `.`, `_` and `-`, not starting with `.`, at most 128 bytes.
fn check_session(session: &str, at: &Path) -> Result<(), StageError> {
    let ok = !session.is_empty()
        && session.len() <= SESSION_MAX
        && !session.starts_with('.')
        && session
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            at,
            format!(
                "session name `{}` must be 1 to {SESSION_MAX} ASCII letters, digits, `.`, `_` or `-`, not starting with `.`",
                session.escape_debug()
            ),
        ))
    }
}

/// The directory at `path` must be a real directory (not a symlink), owned
/// by the effective uid, and not writable by group or others unless the
/// sticky bit is set (`what` names it in the error).
fn check_owned_dir(
    path: &Path,
    what: &str,
    allow_sticky: bool,
) -> Result<fs::Metadata, StageError> {
    let meta = fs::symlink_metadata(path).map_err(io("stat the stage directory", path))?;
    if meta.file_type().is_symlink() {
        return Err(invalid(path, format!("the {what} is a symlink")));
    }
    if !meta.is_dir() {
        return Err(invalid(path, format!("the {what} is not a directory")));
    }
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() != euid {
        return Err(invalid(
            path,
            format!(
                "the {what} is owned by uid {}, not the launcher (uid {euid})",
                meta.uid()
            ),
        ));
    }
    let mode = meta.mode();
    if mode & 0o022 != 0 && !(allow_sticky && mode & 0o1000 != 0) {
        return Err(invalid(
            path,
            format!(
                "the {what} is writable by group or others (mode {:o})",
                mode & 0o7777
            ),
        ));
    }
    Ok(meta)
}

/// A real directory (not a symlink) at `path`.
fn check_plain_dir(path: &Path) -> Result<(), StageError> {
    let meta = fs::symlink_metadata(path).map_err(io("stat a stage directory", path))?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(invalid(
            path,
            "not a directory of the stage (a symlink or another kind)",
        ));
    }
    Ok(())
}

fn mkdir(path: &Path, mode: u32) -> Result<(), StageError> {
    fs::DirBuilder::new()
        .mode(mode)
        .create(path)
        .map_err(io("create a stage directory", path))?;
    // The umask may have cleared bits of `mode`; never added any.
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(io("chmod a stage directory", path))
}

fn chown(path: &Path, owner: (u32, u32)) -> Result<(), StageError> {
    std::os::unix::fs::lchown(path, Some(owner.0), Some(owner.1))
        .map_err(io("chown a stage directory to the worker", path))
}

/// Wait until the filesystem clock of `dir` has moved strictly past the
/// ctime of its stamp marker, and return that ctime.
///
/// Conflict detection compares a host path's ctime with this stamp: a path
/// whose ctime is later changed after the stage was created. ctimes come
/// from a clock with a coarse granularity (a jiffy, unless the filesystem
/// asks for a fine-grained one), so a host change made just after
/// [`Stage::create`] returns could otherwise carry the very ctime of the
/// stamp and look unchanged. Re-touching a second marker until its new
/// ctime is strictly later proves the clock has ticked: every host change
/// from then on has a strictly later ctime. The wait is bounded; a clock
/// that does not move within it is an error, never a silent stamp.
fn take_stamp(dir: &Path) -> Result<Stamp, StageError> {
    let marker = dir.join(STAMP_MARKER);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode_0600()
        .open(&marker)
        .map_err(io("create the stamp marker", &marker))?;
    let stamp =
        Stamp::of(&fs::symlink_metadata(&marker).map_err(io("stat the stamp marker", &marker))?);
    let tick = dir.join(TICK_MARKER);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode_0600()
        .open(&tick)
        .map_err(io("create the tick marker", &tick))?;
    let deadline = std::time::Instant::now() + TICK_WAIT;
    let mut flip = false;
    loop {
        // A mode change updates the ctime and nothing else.
        flip = !flip;
        let mode = if flip { 0o400 } else { 0o600 };
        fs::set_permissions(&tick, fs::Permissions::from_mode(mode))
            .map_err(io("touch the tick marker", &tick))?;
        let now =
            Stamp::of(&fs::symlink_metadata(&tick).map_err(io("stat the tick marker", &tick))?);
        if now > stamp {
            return Ok(stamp);
        }
        if std::time::Instant::now() >= deadline {
            return Err(invalid(
                dir,
                format!(
                    "the filesystem clock did not move past the stamp within {} ms",
                    TICK_WAIT.as_millis()
                ),
            ));
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// `create_new` files with mode `0600`.
trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::mode(self, 0o600)
    }
}

fn root_json(r: &StagedRoot) -> Result<serde_json::Value, StageError> {
    let root = r.root.to_str().ok_or_else(|| {
        invalid(
            &r.root,
            "a staged root's path must be UTF-8 (the manifest is JSON)",
        )
    })?;
    Ok(serde_json::json!({
        "root": root,
        "stamp": { "sec": r.started.sec, "nsec": r.started.nsec },
        "same_fs": r.same_fs,
    }))
}

fn manifest_json(stage: &Stage) -> Result<String, StageError> {
    let roots = stage
        .roots
        .iter()
        .map(root_json)
        .collect::<Result<Vec<_>, _>>()?;
    let v = serde_json::json!({
        "version": MANIFEST_VERSION,
        "session": stage.session,
        "roots": roots,
    });
    Ok(format!("{v:#}\n"))
}

/// An object with exactly the keys `keys` (no other), or the error.
fn object<'a>(
    v: &'a serde_json::Value,
    keys: &[&str],
    at: &str,
    path: &Path,
) -> Result<&'a serde_json::Map<String, serde_json::Value>, StageError> {
    let map = v
        .as_object()
        .ok_or_else(|| invalid(path, format!("{at}: not an object")))?;
    if let Some(k) = map.keys().find(|k| !keys.contains(&k.as_str())) {
        return Err(invalid(
            path,
            format!("{at}: unknown key `{}`", k.escape_debug()),
        ));
    }
    if let Some(k) = keys.iter().find(|k| !map.contains_key(**k)) {
        return Err(invalid(path, format!("{at}: missing key `{k}`")));
    }
    Ok(map)
}

fn int(
    map: &serde_json::Map<String, serde_json::Value>,
    key: &str,
    at: &str,
    path: &Path,
) -> Result<i64, StageError> {
    map.get(key)
        .and_then(serde_json::Value::as_i64)
        .ok_or_else(|| invalid(path, format!("{at}.{key}: not an integer")))
}

/// One root of a manifest: its host path, stamp and same-filesystem flag.
pub(crate) type ManifestRoot = (PathBuf, Stamp, bool);

/// The manifest's text read strictly: the session and, per root, its host
/// path, stamp and same-filesystem flag. Pure (fuzzed through
/// `__fuzz::stage_manifest`); [`Stage::open`] checks the directories.
pub(crate) fn parse_manifest(
    text: &str,
    path: &Path,
) -> Result<(String, Vec<ManifestRoot>), StageError> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        invalid(
            path,
            format!("not JSON at line {}, column {}: {e}", e.line(), e.column()),
        )
    })?;
    let top = object(&v, &["version", "session", "roots"], "manifest", path)?;
    match top.get("version").and_then(serde_json::Value::as_u64) {
        Some(MANIFEST_VERSION) => {}
        _ => {
            return Err(invalid(
                path,
                format!(
                    "manifest.version: `{}` is not a version this palisade reads ({MANIFEST_VERSION})",
                    top.get("version")
                        .map(ToString::to_string)
                        .unwrap_or_default()
                ),
            ));
        }
    }
    let session = top
        .get("session")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| invalid(path, "manifest.session: not a string"))?;
    check_session(session, path)?;
    let list = top
        .get("roots")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| invalid(path, "manifest.roots: not an array"))?;
    if list.len() > MAX_ROOTS {
        return Err(invalid(
            path,
            format!("manifest.roots: more than {MAX_ROOTS}"),
        ));
    }
    let mut parsed = Vec::with_capacity(list.len());
    for (n, r) in list.iter().enumerate() {
        let at = format!("manifest.roots[{n}]");
        let m = object(r, &["root", "stamp", "same_fs"], &at, path)?;
        let root = m
            .get("root")
            .and_then(serde_json::Value::as_str)
            .map(PathBuf::from)
            .ok_or_else(|| invalid(path, format!("{at}.root: not a string")))?;
        if !root.is_absolute()
            || root
                .components()
                .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
        {
            return Err(invalid(
                path,
                format!("{at}.root: not an absolute path without `.` or `..`"),
            ));
        }
        let stamp_at = format!("{at}.stamp");
        let s = object(
            m.get("stamp").unwrap_or(&serde_json::Value::Null),
            &["sec", "nsec"],
            &stamp_at,
            path,
        )?;
        let started = Stamp {
            sec: int(s, "sec", &stamp_at, path)?,
            nsec: int(s, "nsec", &stamp_at, path)?,
        };
        if !(0..1_000_000_000).contains(&started.nsec) {
            return Err(invalid(path, format!("{stamp_at}.nsec: out of range")));
        }
        let same_fs = m
            .get("same_fs")
            .and_then(serde_json::Value::as_bool)
            .ok_or_else(|| invalid(path, format!("{at}.same_fs: not a boolean")))?;
        parsed.push((root, started, same_fs));
    }
    Ok((session.to_owned(), parsed))
}

impl Stage {
    /// Create `<base>/<session>` with one staged root per entry of `roots`.
    ///
    /// `base` is created (mode `0700`) when absent; it must then be a real
    /// directory of the launcher's, not writable by group or others unless
    /// sticky, and lie outside every root (and no root inside it). The
    /// stage must not exist yet. `owner` is the worker's uid and gid as the
    /// host sees them: each work and quarantine directory is chowned to it,
    /// and each upper takes its root's permission bits and, when the
    /// launcher is root, its root's owner (else `owner`), since the overlay
    /// shows the upper's root directory as the root's. On error,
    /// what this call created is removed again.
    pub fn create(
        base: &Path,
        session: &str,
        roots: &[PathBuf],
        owner: (u32, u32),
    ) -> Result<Stage, StageError> {
        check_session(session, base)?;
        if roots.len() > MAX_ROOTS {
            return Err(invalid(base, format!("more than {MAX_ROOTS} staged roots")));
        }
        if !base.is_absolute() || base.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(invalid(
                base,
                "the stage base must be an absolute path without `..`",
            ));
        }
        match fs::symlink_metadata(base) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(base)
                    .map_err(io("create the stage base", base))?;
            }
            Err(e) => return Err(io("stat the stage base", base)(e)),
            Ok(_) => {}
        }
        check_owned_dir(base, "stage base", true)?;
        // Canonical, so that the containment checks compare real paths (the
        // base itself is no symlink, but one of its ancestors may be).
        let base_c = fs::canonicalize(base).map_err(io("resolve the stage base", base))?;
        let mut canon_roots = Vec::with_capacity(roots.len());
        for r in roots {
            let c = fs::canonicalize(r).map_err(io("resolve a staged root", r))?;
            let meta = fs::metadata(&c).map_err(io("stat a staged root", &c))?;
            if !meta.is_dir() {
                return Err(invalid(r, "a staged root must be a directory"));
            }
            if base_c.starts_with(&c) {
                return Err(invalid(
                    base,
                    format!(
                        "stage_inside_root: the stage base lies inside the staged root `{}`; an overlay's upper layer must never be inside its lower layer (the worker would see and shape its own stage)",
                        c.display()
                    ),
                ));
            }
            if c.starts_with(&base_c) {
                return Err(invalid(
                    r,
                    format!(
                        "a staged root lies inside the stage base `{}`",
                        base_c.display()
                    ),
                ));
            }
            canon_roots.push((c, meta));
        }
        let dir = base_c.join(session);
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(invalid(
                    &dir,
                    "the stage exists already (another session's, or a kept one)",
                ));
            }
            Err(e) => return Err(io("create the stage", &dir)(e)),
        }
        let mut stage = Stage {
            dir: dir.clone(),
            session: session.to_owned(),
            roots: Vec::new(),
        };
        match stage.fill(&canon_roots, owner) {
            Ok(()) => Ok(stage),
            Err(e) => {
                let _ = stage.remove();
                Err(e)
            }
        }
    }

    /// The second half of [`Stage::create`], on the freshly made stage
    /// directory (the caller removes it on error).
    fn fill(
        &mut self,
        roots: &[(PathBuf, fs::Metadata)],
        owner: (u32, u32),
    ) -> Result<(), StageError> {
        let dir = self.dir.clone();
        let stage_meta = check_owned_dir(&dir, "stage", false)?;
        let started = take_stamp(&dir)?;
        for (n, (root, meta)) in roots.iter().enumerate() {
            let rd = dir.join(n.to_string());
            mkdir(&rd, 0o700)?;
            let upper = rd.join("upper");
            let work = rd.join("work");
            let quarantine = rd.join("quarantine");
            mkdir(&upper, meta.mode() & 0o7777)?;
            mkdir(&work, 0o700)?;
            mkdir(&quarantine, 0o700)?;
            // The overlay shows the upper as the root's top directory, so
            // it takes the root's owner where the launcher can give it
            // (as root): the worker then may write there exactly when a
            // plain bind would have let it. A launcher that is not root
            // can only hand out its own uid (the worker's); the commit
            // refuses what that widened (`root_not_writable` in the CLI).
            let top = if nix::unistd::geteuid().is_root() {
                (meta.uid(), meta.gid())
            } else {
                owner
            };
            chown(&upper, top)?;
            for p in [&work, &quarantine] {
                chown(p, owner)?;
            }
            // chown clears setuid/setgid; the upper keeps the root's bits.
            fs::set_permissions(&upper, fs::Permissions::from_mode(meta.mode() & 0o7777))
                .map_err(io("chmod the upper directory", &upper))?;
            self.roots.push(StagedRoot {
                root: root.clone(),
                upper,
                work,
                quarantine,
                started,
                same_fs: meta.dev() == stage_meta.dev(),
            });
        }
        let text = manifest_json(self)?;
        let path = dir.join(MANIFEST);
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode_0600()
            .open(&path)
            .and_then(|mut f| {
                std::io::Write::write_all(&mut f, text.as_bytes())?;
                f.sync_all()
            })
            .map_err(io("write the manifest", &path))
    }

    /// Reopen a stage from its manifest.
    ///
    /// The stage must be a real directory of the launcher's, not open to
    /// group or others; the manifest is read up to 1 MiB, must be of
    /// version 1 with exactly the keys [`Stage::create`] writes, name the
    /// session the directory is named after, absolute roots, and each
    /// root's upper, work and quarantine directories must be there (not
    /// symlinks).
    pub fn open(dir: &Path) -> Result<Stage, StageError> {
        check_owned_dir(dir, "stage", false)?;
        let path = dir.join(MANIFEST);
        let meta = fs::symlink_metadata(&path).map_err(io("stat the manifest", &path))?;
        if !meta.is_file() {
            return Err(invalid(&path, "the manifest is not a regular file"));
        }
        let mut text = String::new();
        fs::File::open(&path)
            .map_err(io("open the manifest", &path))?
            .take(MANIFEST_MAX + 1)
            .read_to_string(&mut text)
            .map_err(io("read the manifest", &path))?;
        if text.len() as u64 > MANIFEST_MAX {
            return Err(invalid(
                &path,
                format!("the manifest exceeds {MANIFEST_MAX} bytes"),
            ));
        }
        let (session, parsed) = parse_manifest(&text, &path)?;
        if dir.file_name() != Some(std::ffi::OsStr::new(&session)) {
            return Err(invalid(
                &path,
                format!("manifest.session `{session}` is not the stage directory's name"),
            ));
        }
        let mut roots = Vec::with_capacity(parsed.len());
        for (n, (root, started, same_fs)) in parsed.into_iter().enumerate() {
            let rd = dir.join(n.to_string());
            check_plain_dir(&rd)?;
            let upper = rd.join("upper");
            let work = rd.join("work");
            let quarantine = rd.join("quarantine");
            for p in [&upper, &work, &quarantine] {
                check_plain_dir(p)?;
            }
            roots.push(StagedRoot {
                root,
                upper,
                work,
                quarantine,
                started,
                same_fs,
            });
        }
        Ok(Stage {
            dir: dir.to_owned(),
            session,
            roots,
        })
    }

    /// The stage directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The session the stage belongs to.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The staged roots, in the order given to [`Stage::create`].
    pub fn roots(&self) -> &[StagedRoot] {
        &self.roots
    }

    /// Remove the stage directory and everything in it (quarantine too).
    ///
    /// Symlinks inside are removed, never followed; directories the worker
    /// left without permissions are opened up first (they are the stage's,
    /// and the launcher owns or may chmod them). The stage itself must
    /// still be a real directory, not a symlink. Call it once the sandbox
    /// has ended: a worker still running could go on writing.
    pub fn remove(self) -> Result<(), StageError> {
        let meta = fs::symlink_metadata(&self.dir).map_err(io("stat the stage", &self.dir))?;
        if meta.file_type().is_symlink() || !meta.is_dir() {
            return Err(invalid(&self.dir, "the stage is not a directory any more"));
        }
        if fs::remove_dir_all(&self.dir).is_ok() {
            return Ok(());
        }
        open_up(&self.dir, 0);
        fs::remove_dir_all(&self.dir).map_err(io("remove the stage", &self.dir))
    }
}

/// Give every real directory under `dir` mode `0700`, so that
/// [`Stage::remove`] can list and empty it. Each directory is opened with
/// `O_PATH|O_NOFOLLOW|O_DIRECTORY` and changed through that descriptor, so
/// an entry swapped for a symlink meanwhile (a worker still running) is
/// never followed to a host file. Bounded depth.
fn open_up(dir: &Path, depth: usize) {
    use nix::fcntl::OFlag;
    if depth > 4096 {
        return;
    }
    let Ok(fd) = nix::fcntl::open(
        dir,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    ) else {
        return;
    };
    // The descriptor's magic link reaches exactly the directory opened.
    let via = PathBuf::from(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&fd)
    ));
    let _ = fs::set_permissions(&via, fs::Permissions::from_mode(0o700));
    let Ok(entries) = fs::read_dir(&via) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            open_up(&dir.join(e.file_name()), depth + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> (u32, u32) {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    }

    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("stages");
        let root = t.path().join("root");
        fs::create_dir(&root).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o750)).unwrap();
        (t, base, root)
    }

    #[test]
    fn a_stage_is_created_reopened_and_removed() {
        let (_t, base, root) = setup();
        let stage = Stage::create(&base, "s-1", std::slice::from_ref(&root), me()).unwrap();
        let dir = stage.dir().to_owned();
        assert_eq!(dir, fs::canonicalize(&base).unwrap().join("s-1"));
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o7777, 0o700);
        assert_eq!(fs::metadata(&base).unwrap().mode() & 0o7777, 0o700);
        let r = &stage.roots()[0];
        assert_eq!(r.root(), fs::canonicalize(&root).unwrap());
        assert_eq!(r.upper(), dir.join("0/upper"));
        assert_eq!(fs::metadata(r.upper()).unwrap().mode() & 0o7777, 0o750);
        for p in [r.work(), r.quarantine()] {
            assert!(fs::symlink_metadata(p).unwrap().is_dir());
        }
        assert!(r.same_filesystem());
        // The stamp is strictly earlier than any change made now.
        let probe = root.join("later");
        fs::write(&probe, b"x").unwrap();
        assert!(Stamp::of(&fs::metadata(&probe).unwrap()) > r.started());
        let again = Stage::open(&dir).unwrap();
        assert_eq!(again.session(), "s-1");
        assert_eq!(again.roots(), stage.roots());
        // A second stage of the same session is refused.
        let e = Stage::create(&base, "s-1", std::slice::from_ref(&root), me()).unwrap_err();
        assert!(e.to_string().contains("exists already"), "{e}");
        // The worker left an unreadable directory; remove still works.
        let deep = r.upper().join("a/b");
        fs::create_dir_all(&deep).unwrap();
        fs::set_permissions(r.upper().join("a"), fs::Permissions::from_mode(0o000)).unwrap();
        again.remove().unwrap();
        assert!(!dir.exists());
        assert!(root.exists());
    }

    #[test]
    fn opening_up_for_removal_follows_no_symlink() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::set_permissions(&outside, fs::Permissions::from_mode(0o555)).unwrap();
        // A directory swapped for a symlink to a host directory.
        let link = t.path().join("swapped");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        open_up(&link, 0);
        assert_eq!(fs::metadata(&outside).unwrap().mode() & 0o7777, 0o555);
        // Positive control: a real directory is opened up, its children too.
        let real = t.path().join("real");
        fs::create_dir_all(real.join("sub")).unwrap();
        fs::set_permissions(real.join("sub"), fs::Permissions::from_mode(0o000)).unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o500)).unwrap();
        open_up(&real, 0);
        assert_eq!(fs::metadata(&real).unwrap().mode() & 0o7777, 0o700);
        assert_eq!(
            fs::metadata(real.join("sub")).unwrap().mode() & 0o7777,
            0o700
        );
    }

    #[test]
    fn a_base_inside_a_root_is_refused() {
        let (_t, _base, root) = setup();
        // Positive control: outside the root, the same call works.
        let outside = root.parent().unwrap().join("outside");
        Stage::create(&outside, "s", std::slice::from_ref(&root), me())
            .unwrap()
            .remove()
            .unwrap();
        for base in [root.join("stages"), root.clone()] {
            let e = Stage::create(&base, "s", std::slice::from_ref(&root), me()).unwrap_err();
            assert!(e.to_string().contains("stage_inside_root"), "{e}");
            assert!(!base.join("s").exists());
        }
        // Through a symlinked ancestor too.
        let link = root.parent().unwrap().join("link");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        let e =
            Stage::create(&link.join("st"), "s", std::slice::from_ref(&root), me()).unwrap_err();
        assert!(e.to_string().contains("stage_inside_root"), "{e}");
        // A root inside the base.
        let e = Stage::create(
            root.parent().unwrap(),
            "s",
            std::slice::from_ref(&root),
            me(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("inside the stage base"), "{e}");
    }

    #[test]
    fn symlinked_or_open_bases_and_bad_sessions_are_refused() {
        let (t, base, root) = setup();
        let real = t.path().join("real");
        fs::create_dir(&real).unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o700)).unwrap();
        let link = t.path().join("linkbase");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = Stage::create(&link, "s", std::slice::from_ref(&root), me()).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        fs::set_permissions(&real, fs::Permissions::from_mode(0o777)).unwrap();
        let e = Stage::create(&real, "s", std::slice::from_ref(&root), me()).unwrap_err();
        assert!(e.to_string().contains("writable by group or others"), "{e}");
        // Sticky and open (like /tmp) is accepted.
        fs::set_permissions(&real, fs::Permissions::from_mode(0o1777)).unwrap();
        Stage::create(&real, "s", std::slice::from_ref(&root), me())
            .unwrap()
            .remove()
            .unwrap();
        for bad in ["", "..", ".hidden", "a/b", "a b", &"x".repeat(129)] {
            let e = Stage::create(&base, bad, std::slice::from_ref(&root), me()).unwrap_err();
            assert!(e.to_string().contains("session name"), "{bad:?}: {e}");
        }
        let e =
            Stage::create(Path::new("rel"), "s", std::slice::from_ref(&root), me()).unwrap_err();
        assert!(e.to_string().contains("absolute"), "{e}");
    }

    #[test]
    fn a_bad_manifest_is_refused_with_its_location() {
        let (_t, base, root) = setup();
        let stage = Stage::create(&base, "m", std::slice::from_ref(&root), me()).unwrap();
        let dir = stage.dir().to_owned();
        let path = dir.join(MANIFEST);
        let good = fs::read_to_string(&path).unwrap();
        let cases: Vec<(String, &str)> = vec![
            (
                good.replace("\"version\": 1", "\"version\": 2"),
                "manifest.version",
            ),
            (
                good.replace("\"same_fs\"", "\"extra\": 1, \"same_fs\""),
                "unknown key `extra`",
            ),
            (
                good.replace("\"session\": \"m\"", "\"session\": \"other\""),
                "not the stage directory's name",
            ),
            (good.replace("\"nsec\"", "\"nsec_\""), "stamp: unknown key"),
            (String::from("{\"version\": 1,"), "not JSON at line 1"),
            ("x".repeat(2 << 20), "exceeds"),
        ];
        for (text, want) in &cases {
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
            fs::write(&path, text).unwrap();
            let e = Stage::open(&dir).unwrap_err();
            assert!(e.to_string().contains(want), "{want}: {e}");
        }
        // Positive control: the original manifest reads back.
        fs::write(&path, &good).unwrap();
        let s = Stage::open(&dir).unwrap();
        // A missing upper is refused.
        fs::remove_dir(s.roots()[0].upper()).unwrap();
        let e = Stage::open(&dir).unwrap_err();
        assert!(e.to_string().contains("upper"), "{e}");
        s.remove().unwrap();
    }
}
