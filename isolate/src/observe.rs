//! The read observer: the worker's opens of watched paths, seen by the
//! kernel without the worker's help.
//!
//! As root (`CAP_SYS_ADMIN`), a fanotify group of class content places
//! inode marks with `FAN_OPEN_PERM` on the watched files and, for a
//! [`Scope::Tree`], on every directory and file of the tree (directories
//! with `FAN_EVENT_ON_CHILD | FAN_ONDIR`). The opener blocks until the
//! handler has answered, so whatever the handler records happens before
//! the first byte is returned. Marks are on the host's inodes, so opens
//! through a bind, through a hard link and through a staged root's overlay
//! (whose lower layer is the host tree) are all seen.
//!
//! How it is built:
//! - The tree is walked before any mark is placed (bounded by
//!   [`MAX_ENTRIES`] and [`MAX_DEPTH`]; over the bound is an error, never a
//!   partial watch); each node is then reopened `O_PATH | O_NOFOLLOW`
//!   (which raises no event), checked to be the walked inode, and marked
//!   through that descriptor. Symlinks are never followed; a watched path
//!   that is a symlink is an error.
//! - One thread reads the events. Each event's descriptor is `fstat`ed and
//!   looked up by `(st_dev, st_ino)` (and birth time, which tells a new
//!   inode under a reused number from the old one) in the marked inodes. A
//!   marked inode is reported as the watched path it was marked as,
//!   wherever it is now: the mark and the watched content are the inode's,
//!   so a rename (`mv private pub`) or a hard link does not hide the read.
//!   A node below a watched tree that is not
//!   marked yet (created later) gets its host path from candidates (the
//!   descriptor's own path, and that path under each watched tree and its
//!   ancestors, since through an overlay the kernel names it relative to
//!   the lower layer), accepted only when `lstat` gives the same inode; if
//!   none does, the path is `<dir>/…` for the deepest directory that
//!   provably holds it. Its name is then taken from the nearest marked
//!   directory of a tree above it (that directory's watched path joined
//!   with the rest: `private/z` for `pub/z` after `mv private pub`), and it
//!   is marked through the event's descriptor.
//! - Directories created later in a tree are found by inotify
//!   (`IN_CREATE | IN_MOVED_TO` on the same inodes; the brief's second,
//!   `FAN_REPORT_DFID_NAME` group would need `open_by_handle_at` to reach
//!   the new directory, inotify names it directly) and by their own open;
//!   they are marked at once (the observer thread never opens anything but
//!   `O_PATH`, so it can never wait for its own event), then walked by a
//!   helper thread, since a directory moved in comes populated: the
//!   helper's open of each subdirectory raises a permission event on its
//!   marked parent, which the observer thread answers at once (this
//!   process's own) after marking it, so each directory is marked before
//!   it is listed. The walks share [`MAX_ENTRIES`] with the initial ones
//!   and have the same [`MAX_DEPTH`]; over them, part of a tree is not
//!   watched and [`ReadObserver::failed`] says so. An open inside a new
//!   directory before its creation event is handled, or deep inside a
//!   moved-in tree before the walk reached it, is not seen. (After the
//!   fact there is no walk: the helper's own opens would be reported.)
//! - The ancestors of every watched path (up to, not including, `/`) are
//!   watched for new entries (inotify): a watched path that does not exist
//!   is marked when it appears, and so is a root, an exact file or a
//!   directory above them that the host deletes or renames away and makes
//!   again (the new root is walked); an open in the window before that is
//!   not seen.
//! - Attribution: the opener's PID namespace (`/proc/<pid>/ns/pid`, then
//!   `NS_GET_PARENT` up to the observer's own level, so a namespace the
//!   worker nests counts as the sandbox's) against the one given to
//!   [`ReadObserver::attribute_to`]; with `FAN_REPORT_PIDFD`, the opener's
//!   pidfd confirms that the pid still named it after the namespace was
//!   opened. An opener whose pidfd says it has exited (a host reader killed
//!   while its open waited) is denied without a handler call: its open
//!   never returns, and it must not be taken for the sandbox's. Until `attribute_to`, events are held unanswered (at most
//!   256, for at most a minute; then they are denied, counted). Host opens are allowed without a handler
//!   call; so are this process's own opens, at once, even before
//!   attribution. The handler must not open a watched path itself.
//! - Fail closed: an event the observer cannot handle (no descriptor, an
//!   `fstat` or mark that fails, a handler that panics) is answered
//!   `FAN_DENY` and counted ([`ReadObserver::internal_errors`]). The queue
//!   is unlimited in the kernel (a dropped permission event would be
//!   allowed by the kernel), bounded by the openers that wait on it; this
//!   process reads 8 KiB at a time and answers each event before reading
//!   more. Dropping the observer stops the thread (waiting for a running
//!   handler call) and closes the group; the kernel then allows whatever
//!   open was still waiting.
//!
//! Without privilege the observer is degraded
//! ([`ObserverMode::AfterTheFact`]): inotify `IN_OPEN` on the watched files
//! and on the trees' directories (which report their children's opens,
//! through binds and the overlay alike). The open is reported after it
//! happened, [`Attribution::Unknown`] (host processes' opens included),
//! and a lost inotify queue is reported as an open of every watched path.
//! A hard link made outside a watched tree to one of its files is not seen
//! in this mode (exactly watched files are: the watch is on the inode).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::fanotify::{EventFFlags, Fanotify, InitFlags, MarkFlags, MaskFlags};
use nix::sys::inotify::{
    AddWatchFlags, InitFlags as InotifyInit, Inotify, InotifyEvent, WatchDescriptor,
};
use nix::sys::stat::Mode;

/// How much of a watched path is watched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scope {
    /// Exactly this file (or directory: opening the directory itself).
    Exact,
    /// The directory and everything below it, including files and
    /// directories created in it later.
    Tree,
}

/// One path to watch, as the host sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Watch {
    /// The host path.
    pub path: PathBuf,
    /// What of it.
    pub scope: Scope,
}

impl Watch {
    /// Watch `path` with `scope`.
    pub fn new(path: impl Into<PathBuf>, scope: Scope) -> Self {
        Self {
            path: path.into(),
            scope,
        }
    }
}

/// How the observer sees opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObserverMode {
    /// fanotify permission events: the open waits for the handler, and each
    /// open is attributed by the opener's PID namespace.
    Permission,
    /// After the fact and not attributed (unprivileged fanotify or inotify).
    AfterTheFact,
}

impl ObserverMode {
    /// The status text `palisade probe` and `sandbox_status` show:
    /// `active` or `degraded (after the fact, not attributed)`.
    pub fn status(self) -> &'static str {
        match self {
            Self::Permission => "active",
            Self::AfterTheFact => "degraded (after the fact, not attributed)",
        }
    }
}

/// What [`probe`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObserverSupport {
    /// The best mode that can run here, if any.
    pub mode: Option<ObserverMode>,
    /// The facts behind it (for `palisade probe` and errors).
    pub facts: String,
}

/// Which observer can run for this process: [`ObserverMode::Permission`]
/// when a fanotify group of class content can be created (root, or
/// `CAP_SYS_ADMIN`), else [`ObserverMode::AfterTheFact`] over inotify, else
/// none; `facts` says which and why.
pub fn probe() -> ObserverSupport {
    match permission_group() {
        Ok((_, pidfd)) => ObserverSupport {
            mode: Some(ObserverMode::Permission),
            facts: if pidfd {
                "fanotify permission events (CAP_SYS_ADMIN), opener pidfds".to_owned()
            } else {
                "fanotify permission events (CAP_SYS_ADMIN), no opener pidfds".to_owned()
            },
        },
        Err(why) => match inotify() {
            Ok(_) => ObserverSupport {
                mode: Some(ObserverMode::AfterTheFact),
                facts: format!("{why}; inotify"),
            },
            Err(e) => ObserverSupport {
                mode: None,
                facts: format!("{why}; inotify_init1: {e}"),
            },
        },
    }
}

/// A PID namespace, by its `nsfs` inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PidNamespace {
    /// `st_dev` of the namespace file.
    pub dev: u64,
    /// `st_ino` of the namespace file.
    pub ino: u64,
}

/// Whose open it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attribution {
    /// A process of the sandbox (its PID namespace or one below it).
    Sandbox,
    /// A process outside the sandbox.
    Host,
    /// Could not be told (degraded mode, or an opener whose namespace cannot
    /// be read and that may still run: no pidfd says it has exited);
    /// callers treat it as the sandbox's (taint errs towards caution). An
    /// opener known to have exited is denied without being reported.
    Unknown,
}

/// One open of a watched path.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObservedOpen {
    /// The watched host path of the opened inode: the path it was marked
    /// as (a watched file, or a node of a watched tree, verified against
    /// the inode when marked), kept when the inode is renamed, moved or
    /// linked elsewhere; a node first seen below a marked directory is
    /// named from that directory's watched path. It is not necessarily the
    /// name the opener used.
    pub path: PathBuf,
    /// The opener's PID in the observer's PID namespace, when known.
    pub pid: Option<u32>,
    /// Whose open it was.
    pub attribution: Attribution,
    /// Whether the open is still waiting for the answer.
    pub mode: ObserverMode,
}

/// The handler's answer (ignored in [`ObserverMode::AfterTheFact`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Response {
    /// Let the open proceed.
    Allow,
    /// Fail the open with `EPERM` (the handler could not record it).
    Deny,
}

/// Why the observer could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObserveError {
    /// No observer of the asked mode can run here.
    #[error("read_observer unavailable: {0}")]
    Unavailable(String),
    /// A watched path could not be marked.
    #[error("read_observer cannot watch {path}: {source}")]
    Watch {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

/// The handler the observer calls for each open, on its own thread.
pub type Handler = Box<dyn FnMut(&ObservedOpen) -> Response + Send>;

/// How many entries (files and directories) the walks of all the
/// [`Scope::Tree`] watches of one observer may visit; more is an
/// [`ObserveError::Watch`], never a partial watch.
pub const MAX_ENTRIES: usize = 200_000;

/// How deep below a watched tree's root the walk goes; deeper is an
/// [`ObserveError::Watch`].
pub const MAX_DEPTH: usize = 64;

/// How many permission events are held, unanswered, before
/// [`ReadObserver::attribute_to`]; further ones are denied (and counted).
/// Each holds two descriptors (the file and the opener's pidfd), so this
/// stays well below the usual limit of 1024 open files.
const MAX_HELD: usize = 256;

/// How long an event is held waiting for [`ReadObserver::attribute_to`]
/// before it is denied (and counted).
const MAX_HOLD: Duration = Duration::from_secs(60);

/// The bytes read from the group at once: a few hundred events, each with
/// its descriptors, answered before the next read. (When the kernel cannot
/// give a permission event a descriptor, it denies the open.)
const READ_BUF: usize = 8 * 1024;

/// The bound on `NS_GET_PARENT` steps (the kernel nests PID namespaces 32
/// deep at most).
const MAX_NS_DEPTH: usize = 40;

/// State shared by the handle and the observer thread.
#[derive(Debug)]
struct Shared {
    /// The sandbox's PID namespace, once known.
    ns: Mutex<Option<PidNamespace>>,
    /// Set by the handle's drop.
    stop: AtomicBool,
    /// Testing only: end the thread as on a fatal error.
    #[cfg_attr(
        not(any(fuzzing, feature = "testing")),
        allow(dead_code, reason = "set only by the testing hook")
    )]
    fail: AtomicBool,
    /// Internal errors (each answered `FAN_DENY` in permission mode).
    errors: AtomicU64,
    /// Entries visited by all the walks so far (bounded by [`MAX_ENTRIES`]).
    entries: AtomicUsize,
    /// Set when a walk of a directory that appeared in a watched tree went
    /// over the bound: part of a tree is no longer watched
    /// ([`ReadObserver::failed`]).
    incomplete: AtomicBool,
    /// Write end of the wake pipe (non-blocking).
    wake: OwnedFd,
}

impl Shared {
    fn wake(&self) {
        // A full pipe already wakes the thread; nothing else can fail here.
        let _ = nix::unistd::write(&self.wake, &[1]);
    }

    fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// A running read observer. Dropping it stops it (pending opens are allowed).
#[derive(Debug)]
pub struct ReadObserver {
    mode: ObserverMode,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// A second descriptor of the permission group, held by the handle: if
    /// the observer thread ever ends on its own (an error, a bug), the group
    /// outlives it, so watched opens keep waiting (fail closed) instead of
    /// being allowed unseen, until the caller stops the worker
    /// ([`ReadObserver::failed`]) and drops the handle.
    group: Option<OwnedFd>,
}

impl ReadObserver {
    /// Starts observing `watches` in `mode`, calling `handler` for each
    /// open. In [`ObserverMode::Permission`], opens are held until
    /// [`ReadObserver::attribute_to`] names the sandbox's namespace.
    ///
    /// Every watch is marked before this returns. A watched path that does
    /// not exist yet is watched for from its nearest existing ancestor and
    /// marked when it appears. A watched symlink is an error (symlinks are
    /// never followed); so is a tree over [`MAX_ENTRIES`] or [`MAX_DEPTH`].
    pub fn start(
        watches: &[Watch],
        mode: ObserverMode,
        handler: Handler,
    ) -> Result<Self, ObserveError> {
        let (wake_rx, wake_tx) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)
            .map_err(|e| ObserveError::Unavailable(format!("pipe2: {e}")))?;
        let fan =
            match mode {
                ObserverMode::Permission => Some(permission_group().map_err(|why| {
                    ObserveError::Unavailable(format!("{why}; asked for {mode:?}"))
                })?),
                ObserverMode::AfterTheFact => None,
            };
        let ino =
            inotify().map_err(|e| ObserveError::Unavailable(format!("inotify_init1: {e}")))?;
        let group = match &fan {
            Some((f, _)) => Some(
                f.as_fd()
                    .try_clone_to_owned()
                    .map_err(|e| ObserveError::Unavailable(format!("dup of the group: {e}")))?,
            ),
            None => None,
        };
        let shared = Arc::new(Shared {
            ns: Mutex::new(None),
            stop: AtomicBool::new(false),
            fail: AtomicBool::new(false),
            errors: AtomicU64::new(0),
            entries: AtomicUsize::new(0),
            incomplete: AtomicBool::new(false),
            wake: wake_tx,
        });
        let mut marks = Marks {
            shared: Arc::clone(&shared),
            fan: fan.map(|(f, _)| f),
            inotify: ino,
            inodes: HashMap::new(),
            wds: HashMap::new(),
            trees: Vec::new(),
            pending: Vec::new(),
            exact: Vec::new(),
            watches: Vec::new(),
            walker: None,
            entries: 0,
        };
        for w in watches {
            let path = std::path::absolute(&w.path).map_err(|e| watch_error(&w.path, e))?;
            let w = Watch::new(path, w.scope);
            marks.add(&w, true)?;
            marks.watches.push(w);
        }
        shared.entries.store(marks.entries, Ordering::SeqCst);
        if marks.permission() {
            // The walks of directories that appear in a tree later: their
            // opens raise permission events this thread's observer answers,
            // so they never run on the observer thread itself.
            let (tx, rx) = std::sync::mpsc::channel();
            let walker_shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("palisade-read-observer-walk".to_owned())
                .spawn(move || walker(&rx, &walker_shared))
                .map_err(|e| ObserveError::Unavailable(format!("walker thread: {e}")))?;
            marks.walker = Some(tx);
        }
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("palisade-read-observer".to_owned())
            .spawn(move || marks.run(handler, &thread_shared, &wake_rx))
            .map_err(|e| ObserveError::Unavailable(format!("observer thread: {e}")))?;
        Ok(Self {
            mode,
            shared,
            thread: Some(thread),
            group,
        })
    }

    /// Whether the observer thread has ended while the handle still runs
    /// (it sees no more opens), or a walk of a directory that appeared in a
    /// watched tree went over [`MAX_ENTRIES`] or [`MAX_DEPTH`] or could not
    /// list a directory (part of the tree is not watched). After the
    /// thread's end, in permission mode, the watched opens wait (the handle
    /// keeps the group), so nothing passes unseen; either way the caller
    /// must stop the worker and then drop the handle, which releases them.
    pub fn failed(&self) -> bool {
        !self.shared.stop.load(Ordering::SeqCst)
            && (self.thread.as_ref().is_none_or(JoinHandle::is_finished)
                || self.shared.incomplete.load(Ordering::SeqCst))
    }

    /// Testing only: make the observer thread end as on a fatal error.
    #[cfg(any(fuzzing, feature = "testing"))]
    #[doc(hidden)]
    pub fn __simulate_thread_failure(&self) {
        self.shared.fail.store(true, Ordering::SeqCst);
        self.shared.wake();
    }

    /// Attribute opens to the sandbox whose PID namespace is `ns` (or one
    /// below it); the opens held so far are judged now.
    pub fn attribute_to(&self, ns: PidNamespace) {
        if let Ok(mut slot) = self.shared.ns.lock() {
            *slot = Some(ns);
        }
        self.shared.wake();
    }

    /// The mode it runs in.
    pub fn mode(&self) -> ObserverMode {
        self.mode
    }

    /// How many events could not be handled (each was answered `FAN_DENY`
    /// in permission mode; a lost queue of after-the-fact events is
    /// reported to the handler as the watched paths themselves).
    pub fn internal_errors(&self) -> u64 {
        self.shared.errors.load(Ordering::Relaxed)
    }
}

impl Drop for ReadObserver {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake();
        if let Some(t) = self.thread.take() {
            // The thread owns the groups; its end closes them, and the
            // kernel allows whatever open was still waiting.
            let _ = t.join();
        }
        // Last: the handle's own descriptor of the permission group.
        drop(self.group.take());
    }
}

/// A fanotify group of class content for permission events (unlimited
/// queue, so that no permission event is dropped, which the kernel would
/// treat as allowed; unlimited marks), with opener pidfds when the kernel
/// has them. The error is the fact behind the refusal.
fn permission_group() -> Result<(Fanotify, bool), String> {
    let base = InitFlags::FAN_CLASS_CONTENT
        | InitFlags::FAN_CLOEXEC
        | InitFlags::FAN_NONBLOCK
        | InitFlags::FAN_UNLIMITED_QUEUE
        | InitFlags::FAN_UNLIMITED_MARKS;
    // O_NONBLOCK: the kernel opens each event's file for us; a FIFO created
    // in a watched tree must not block the observer.
    let files = EventFFlags::O_RDONLY
        | EventFFlags::O_LARGEFILE
        | EventFFlags::O_CLOEXEC
        | EventFFlags::O_NONBLOCK;
    match Fanotify::init(base | InitFlags::FAN_REPORT_PIDFD, files) {
        Ok(f) => Ok((f, true)),
        Err(Errno::EINVAL) => Fanotify::init(base, files)
            .map(|f| (f, false))
            .map_err(why_no_fanotify),
        Err(e) => Err(why_no_fanotify(e)),
    }
}

fn why_no_fanotify(e: Errno) -> String {
    match e {
        Errno::EPERM => "no CAP_SYS_ADMIN (fanotify permission events: EPERM)".to_owned(),
        Errno::EINVAL => {
            "no fanotify permission events in this kernel (fanotify_init: EINVAL)".to_owned()
        }
        Errno::ENOSYS => "no fanotify in this kernel (ENOSYS)".to_owned(),
        e => format!("fanotify_init: {e}"),
    }
}

/// `IN_MASK_ADD` (not among nix's flags): add to a watch's mask rather
/// than replace it, since one directory can be watched for two reasons.
fn mask_add() -> AddWatchFlags {
    AddWatchFlags::from_bits_retain(libc::IN_MASK_ADD)
}

fn inotify() -> nix::Result<Inotify> {
    Inotify::init(InotifyInit::IN_CLOEXEC | InotifyInit::IN_NONBLOCK)
}

/// What an inotify watch is for.
#[derive(Debug, Default)]
struct WatchedNode {
    /// The host path of the watched inode.
    path: PathBuf,
    /// A directory of a watched tree (new directories in it are marked).
    tree: bool,
    /// The nearest existing ancestor of a watched path that does not exist
    /// yet.
    ancestor: bool,
}

/// One fanotify event, its descriptors owned.
#[derive(Debug)]
struct PermEvent {
    mask: u64,
    fd: Option<OwnedFd>,
    pid: i32,
    pidfd: Option<OwnedFd>,
    /// The kernel's pidfd record said the opener was already reaped
    /// (`FAN_EPIDFD`).
    reaped: bool,
}

/// A node a walk found: its path, `(dev, ino)`, and whether it is a
/// directory.
type Node = (PathBuf, (u64, u64), bool);

/// A marked inode: the watched path it was marked as (kept when the inode
/// moves: the mark, and the watched content, are the inode's), whether it
/// is a node of a watched tree, and its birth time, which tells it from a
/// later inode under the same number (the host deleted it and made
/// another).
#[derive(Debug, Clone)]
struct Known {
    path: PathBuf,
    tree: bool,
    born: Option<SystemTime>,
}

impl Known {
    /// Whether this entry is the inode born at `born` (when either birth
    /// time is unknown, the number alone decides).
    fn is(&self, born: Option<SystemTime>) -> bool {
        self.born.is_none() || born.is_none() || self.born == born
    }
}

/// The birth time of the inode `fd` holds (`statx`), when the filesystem
/// keeps one.
fn born(fd: BorrowedFd<'_>) -> Option<SystemTime> {
    let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
    file.metadata().ok()?.created().ok()
}

/// A directory that appeared in a watched tree, to be walked off the
/// observer thread: its host path now, and its depth below its tree's root.
#[derive(Debug)]
struct Walk {
    dir: PathBuf,
    depth: usize,
}

/// The marks, and the observer thread's state.
#[derive(Debug)]
struct Marks {
    /// State shared with the handle and the walker.
    shared: Arc<Shared>,
    /// The permission group (`None`: after the fact, over inotify).
    fan: Option<Fanotify>,
    /// Directory creations (both modes) and opens (after the fact).
    inotify: Inotify,
    /// Marked inodes, `(st_dev, st_ino)`, to the watched path each was
    /// marked as.
    inodes: HashMap<(u64, u64), Known>,
    /// inotify watches.
    wds: HashMap<WatchDescriptor, WatchedNode>,
    /// The roots of the tree watches (absolute host paths).
    trees: Vec<PathBuf>,
    /// Watched paths that did not exist when last looked for.
    pending: Vec<Watch>,
    /// Files watched exactly, whose directory is watched for a new inode
    /// under the same name (a host's rename over it, a re-creation).
    exact: Vec<PathBuf>,
    /// Every watch asked for (absolute): re-added when a directory appears
    /// at or above it (a root or an ancestor the host replaced).
    watches: Vec<Watch>,
    /// The walker thread's queue (permission mode).
    walker: Option<Sender<Walk>>,
    /// Entries the initial walks visited.
    entries: usize,
}

fn watch_error(path: &Path, source: io::Error) -> ObserveError {
    ObserveError::Watch {
        path: path.to_path_buf(),
        source,
    }
}

fn nix_io(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

fn key_of(st: &nix::sys::stat::FileStat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

fn is_dir_mode(mode: u32) -> bool {
    mode & libc::S_IFMT == libc::S_IFDIR
}

/// The path naming `fd` itself, for calls that take only a path (inotify):
/// the kernel resolves the magic link to the descriptor's inode.
fn fd_path(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

impl Marks {
    fn permission(&self) -> bool {
        self.fan.is_some()
    }

    /// Add one watch; `initial` during `start` (the tree may be walked: no
    /// mark is placed before the walk's opens are done, so they raise no
    /// event), else from the observer thread (which never opens anything
    /// but `O_PATH`, so it can never wait for itself).
    fn add(&mut self, w: &Watch, initial: bool) -> Result<(), ObserveError> {
        let path = std::path::absolute(&w.path).map_err(|e| watch_error(&w.path, e))?;
        let md = match std::fs::symlink_metadata(&path) {
            Ok(md) => md,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return self.watch_for(Watch::new(path, w.scope));
            }
            Err(e) => return Err(watch_error(&path, e)),
        };
        if md.file_type().is_symlink() {
            return Err(watch_error(
                &path,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "is a symbolic link (never followed)",
                ),
            ));
        }
        let key = (md.dev(), md.ino());
        match (w.scope, md.is_dir()) {
            (Scope::Tree, true) => {
                if !self.trees.contains(&path) {
                    self.trees.push(path.clone());
                }
                if initial {
                    let nodes = self.walk(&path)?;
                    for (p, k, dir) in nodes {
                        self.mark_path(&p, k, dir, true)?;
                    }
                } else {
                    // A root that appeared (or reappeared) while the
                    // observer runs may be populated: marked now, walked
                    // off this thread.
                    self.mark_path(&path, key, true, true)?;
                    self.walk_later(&path, 0);
                }
            }
            (_, dir) => {
                self.mark_path(&path, key, dir, false)?;
                if !self.exact.contains(&path) {
                    self.exact.push(path.clone());
                }
            }
        }
        // A new node at the watched path, or a new directory at one of its
        // ancestors (the host replacing the root, or a directory above it),
        // is re-added as it appears.
        self.watch_ancestors(&path)
    }

    /// Watch every ancestor of `path` but `/` for new entries.
    fn watch_ancestors(&mut self, path: &Path) -> Result<(), ObserveError> {
        for a in path.ancestors().skip(1) {
            if a.parent().is_none() {
                break;
            }
            self.watch_dir(a)?;
        }
        Ok(())
    }

    /// Queue the walk of `dir` (a directory of a watched tree, `depth`
    /// below its root) for the walker thread; without one (after the fact)
    /// nothing is walked.
    fn walk_later(&self, dir: &Path, depth: usize) {
        if let Some(tx) = &self.walker {
            let job = Walk {
                dir: dir.to_path_buf(),
                depth,
            };
            if tx.send(job).is_err() {
                // The walker is gone: part of a tree may never be marked.
                self.shared.error();
                self.shared.incomplete.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Every directory and regular file of the tree at `root`, with its
    /// `(dev, ino)`, bounded by [`MAX_ENTRIES`] and [`MAX_DEPTH`]. Symlinks
    /// are not followed (entries are judged by their own type).
    fn walk(&mut self, root: &Path) -> Result<Vec<Node>, ObserveError> {
        let md = std::fs::symlink_metadata(root).map_err(|e| watch_error(root, e))?;
        let mut out = vec![(root.to_path_buf(), (md.dev(), md.ino()), true)];
        let mut stack = vec![(root.to_path_buf(), 0usize)];
        while let Some((dir, depth)) = stack.pop() {
            let entries = std::fs::read_dir(&dir).map_err(|e| watch_error(&dir, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| watch_error(&dir, e))?;
                self.entries += 1;
                if self.entries > MAX_ENTRIES {
                    return Err(watch_error(
                        root,
                        io::Error::other(format!(
                            "more than {MAX_ENTRIES} entries in the watched trees"
                        )),
                    ));
                }
                let p = entry.path();
                // `DirEntry::metadata` does not follow a symlink.
                let md = entry.metadata().map_err(|e| watch_error(&p, e))?;
                let key = (md.dev(), md.ino());
                if md.is_dir() {
                    if depth + 1 > MAX_DEPTH {
                        return Err(watch_error(
                            &p,
                            io::Error::other(format!(
                                "deeper than {MAX_DEPTH} below the watched tree {}",
                                root.display()
                            )),
                        ));
                    }
                    out.push((p.clone(), key, true));
                    stack.push((p, depth + 1));
                } else if md.is_file() {
                    out.push((p, key, false));
                }
            }
        }
        Ok(out)
    }

    /// Mark the node at `path`, which must still be the inode `key` (an
    /// `O_PATH | O_NOFOLLOW` open, which raises no event).
    fn mark_path(
        &mut self,
        path: &Path,
        key: (u64, u64),
        dir: bool,
        tree: bool,
    ) -> Result<(), ObserveError> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| watch_error(path, nix_io(e)))?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| watch_error(path, nix_io(e)))?;
        if key_of(&st) != key || is_dir_mode(st.st_mode) != dir {
            return Err(watch_error(
                path,
                io::Error::other("changed while it was being marked"),
            ));
        }
        self.mark_fd(fd.as_fd(), path, key, dir, tree)
            .map_err(|e| watch_error(path, e))
    }

    /// Mark the inode of `fd` (a file, or a directory: of a tree when
    /// `tree`) and remember it as `path`.
    fn mark_fd(
        &mut self,
        fd: BorrowedFd<'_>,
        path: &Path,
        key: (u64, u64),
        dir: bool,
        tree: bool,
    ) -> io::Result<()> {
        let mut open = AddWatchFlags::empty();
        if let Some(fan) = &self.fan {
            let mask = match (dir, tree) {
                (true, true) => {
                    MaskFlags::FAN_OPEN_PERM | MaskFlags::FAN_ONDIR | MaskFlags::FAN_EVENT_ON_CHILD
                }
                (true, false) => MaskFlags::FAN_OPEN_PERM | MaskFlags::FAN_ONDIR,
                (false, _) => MaskFlags::FAN_OPEN_PERM,
            };
            // Through the descriptor's magic link, followed (fanotify takes
            // no `O_PATH` descriptor as the object itself): the inode the
            // descriptor holds, whatever the path now names.
            fan.mark(
                MarkFlags::FAN_MARK_ADD | MarkFlags::FAN_MARK_INODE,
                mask,
                fd,
                Some(&fd_path(fd)),
            )
            .map_err(nix_io)?;
        } else if !tree {
            // After the fact: the open of this very inode. A tree's files
            // are reported by their directory's watch (below), not twice.
            open = AddWatchFlags::IN_OPEN;
        }
        if dir && tree {
            let mut flags = AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | mask_add();
            if !self.permission() {
                flags |= AddWatchFlags::IN_OPEN;
            }
            self.inotify_watch(fd, path, flags, |n| n.tree = true)?;
        } else if !open.is_empty() {
            self.inotify_watch(fd, path, open | mask_add(), |_| {})?;
        }
        // The first name is kept: a marked inode moved or linked elsewhere
        // still holds the content it was marked for. An entry of an earlier
        // inode under the same number is replaced.
        let born = born(fd);
        match self.inodes.get_mut(&key) {
            Some(known) if known.is(born) => known.tree |= tree,
            _ => {
                self.inodes.insert(
                    key,
                    Known {
                        path: path.to_path_buf(),
                        tree,
                        born,
                    },
                );
            }
        }
        Ok(())
    }

    fn inotify_watch(
        &mut self,
        fd: BorrowedFd<'_>,
        path: &Path,
        flags: AddWatchFlags,
        role: impl FnOnce(&mut WatchedNode),
    ) -> io::Result<()> {
        let wd = self
            .inotify
            .add_watch(&fd_path(fd), flags)
            .map_err(|e| match e {
                Errno::ENOSPC => io::Error::other(
                    "inotify watches exhausted (raise fs.inotify.max_user_watches)",
                ),
                e => nix_io(e),
            })?;
        let node = self.wds.entry(wd).or_default();
        node.path = path.to_path_buf();
        role(node);
        Ok(())
    }

    /// A watched path that does not exist yet: watch its nearest existing
    /// ancestor for creations, and try again on each.
    fn watch_for(&mut self, w: Watch) -> Result<(), ObserveError> {
        let mut anc = w.path.parent();
        while let Some(a) = anc {
            match std::fs::symlink_metadata(a) {
                Ok(md) if md.is_dir() => {
                    self.watch_dir(a)?;
                    if !self.pending.contains(&w) {
                        self.pending.push(w);
                    }
                    return Ok(());
                }
                Ok(_) => {
                    return Err(watch_error(
                        &w.path,
                        io::Error::other(format!(
                            "{} is not a directory (symlinks are never followed)",
                            a.display()
                        )),
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => anc = a.parent(),
                Err(e) => return Err(watch_error(a, e)),
            }
        }
        Err(watch_error(
            &w.path,
            io::Error::other("no existing ancestor"),
        ))
    }

    /// Watch the directory `dir` for new entries (`IN_CREATE`,
    /// `IN_MOVED_TO`): the nearest existing ancestor of a missing watched
    /// path, or the directory of a file watched exactly.
    fn watch_dir(&mut self, dir: &Path) -> Result<(), ObserveError> {
        let fd = nix::fcntl::open(
            dir,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| watch_error(dir, nix_io(e)))?;
        self.inotify_watch(
            fd.as_fd(),
            dir,
            AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | mask_add(),
            |n| n.ancestor = true,
        )
        .map_err(|e| watch_error(dir, e))
    }

    /// `created` appeared in a watched ancestor: every watch at or below it
    /// (one waited for, a root or an exact file the host replaced, one
    /// below a directory the host replaced) is added again.
    fn readd_below(&mut self, created: &Path, shared: &Shared) {
        let hit: Vec<Watch> = self
            .watches
            .iter()
            .filter(|w| w.path.starts_with(created))
            .cloned()
            .collect();
        for w in hit {
            self.pending.retain(|p| p != &w);
            if self.add(&w, false).is_err() {
                shared.error();
            }
        }
    }

    /// The observer thread.
    fn run(mut self, mut handler: Handler, shared: &Shared, wake: &OwnedFd) {
        let me = i32::try_from(std::process::id()).unwrap_or(-1);
        let mut held: Vec<(Instant, PermEvent)> = Vec::new();
        let mut buf = vec![0u8; READ_BUF];
        loop {
            if shared.stop.load(Ordering::SeqCst) || shared.fail.load(Ordering::SeqCst) {
                break;
            }
            let ns = shared.ns.lock().map(|g| *g).unwrap_or(None);
            if let Some(ns) = ns {
                for (_, ev) in std::mem::take(&mut held) {
                    self.answer(ev, Some(ns), &mut handler, shared);
                }
            } else {
                // Never named: denied rather than left waiting for ever (a
                // process of the launch itself waiting on its own
                // attribution would hang the launch).
                let now = Instant::now();
                for (_, ev) in held.extract_if(.., |(at, _)| now.duration_since(*at) >= MAX_HOLD) {
                    shared.error();
                    self.respond(&ev, Response::Deny, shared);
                }
            }
            let timeout = if held.is_empty() {
                PollTimeout::NONE
            } else {
                PollTimeout::from(1000u16)
            };
            let (fan_ready, ino_ready) = {
                let mut fds = vec![
                    PollFd::new(wake.as_fd(), PollFlags::POLLIN),
                    PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN),
                ];
                if let Some(fan) = &self.fan {
                    fds.push(PollFd::new(fan.as_fd(), PollFlags::POLLIN));
                }
                match nix::poll::poll(&mut fds, timeout) {
                    Ok(_) => {}
                    Err(Errno::EINTR) => continue,
                    Err(_) => {
                        shared.error();
                        break;
                    }
                }
                let ready = |i: usize| {
                    fds.get(i)
                        .and_then(PollFd::revents)
                        .is_some_and(|r| !r.is_empty())
                };
                if ready(0) {
                    let mut sink = [0u8; 64];
                    while matches!(nix::unistd::read(wake, &mut sink), Ok(n) if n > 0) {}
                }
                (ready(2), ready(1))
            };
            if ino_ready {
                match self.inotify.read_events() {
                    Ok(events) => {
                        for ev in events {
                            self.on_inotify(&ev, &mut handler, shared);
                        }
                    }
                    Err(Errno::EAGAIN | Errno::EINTR) => {}
                    Err(_) => shared.error(),
                }
            }
            if fan_ready {
                let Some(fan) = &self.fan else { continue };
                let n = match nix::unistd::read(fan, &mut buf) {
                    Ok(n) => n,
                    Err(Errno::EAGAIN | Errno::EINTR) => continue,
                    Err(_) => {
                        shared.error();
                        continue;
                    }
                };
                let events = parse_events(buf.get(..n).unwrap_or_default(), shared);
                for ev in events {
                    if ev.pid == me {
                        // This process (the launcher, never the sandbox):
                        // allowed at once, even before attribution.
                        self.answer(ev, None, &mut handler, shared);
                    } else if ns.is_some() {
                        self.answer(ev, ns, &mut handler, shared);
                    } else if held.len() < MAX_HELD {
                        held.push((Instant::now(), ev));
                    } else {
                        shared.error();
                        self.respond(&ev, Response::Deny, shared);
                    }
                }
            }
        }
    }

    /// Judge one permission event and answer it; its descriptors are
    /// closed when it is dropped here. `ns` is `None` for this process's
    /// own opens.
    fn answer(
        &mut self,
        ev: PermEvent,
        ns: Option<PidNamespace>,
        handler: &mut Handler,
        shared: &Shared,
    ) {
        let response = match self.judge(&ev, ns, handler) {
            Ok(r) => r,
            Err(_) => {
                shared.error();
                Response::Deny
            }
        };
        self.respond(&ev, response, shared);
    }

    fn respond(&self, ev: &PermEvent, response: Response, shared: &Shared) {
        let (Some(fan), Some(fd)) = (&self.fan, &ev.fd) else {
            return;
        };
        if ev.mask & (libc::FAN_OPEN_PERM | libc::FAN_ACCESS_PERM | libc::FAN_OPEN_EXEC_PERM) == 0 {
            return;
        }
        let answer = match response {
            Response::Allow => libc::FAN_ALLOW,
            Response::Deny => libc::FAN_DENY,
        };
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&fd.as_raw_fd().to_ne_bytes());
        bytes[4..].copy_from_slice(&answer.to_ne_bytes());
        if nix::unistd::write(fan, &bytes) != Ok(bytes.len()) {
            shared.error();
        }
    }

    fn judge(
        &mut self,
        ev: &PermEvent,
        ns: Option<PidNamespace>,
        handler: &mut Handler,
    ) -> io::Result<Response> {
        let fd = ev
            .fd
            .as_ref()
            .ok_or_else(|| io::Error::other("event without a descriptor"))?;
        let st = nix::sys::stat::fstat(fd).map_err(nix_io)?;
        let key = key_of(&st);
        let dir = is_dir_mode(st.st_mode);
        // A marked inode is reported as the watched path it was marked as,
        // wherever it is now (renamed, moved, linked): the mark and the
        // watched content are the inode's, not the name's.
        let born = born(fd.as_fd());
        let path = match self.inodes.get(&key).filter(|k| k.is(born)).cloned() {
            Some(known) => {
                if dir && known.tree {
                    // Idempotent; a directory under a reused inode number
                    // is marked before its entries can be opened.
                    self.mark_fd(fd.as_fd(), &known.path, key, true, true)?;
                }
                known.path
            }
            None => self.learn(fd.as_fd(), key, dir)?,
        };
        let Some(ns) = ns else {
            return Ok(Response::Allow);
        };
        let attribution = match attribute(ev, ns) {
            // Its open never returns: nothing was read, nothing to report.
            Opener::Gone => return Ok(Response::Deny),
            Opener::Is(Attribution::Host) => return Ok(Response::Allow),
            Opener::Is(a) => a,
        };
        call(
            handler,
            &ObservedOpen {
                path,
                pid: u32::try_from(ev.pid).ok().filter(|p| *p > 0),
                attribution,
                mode: ObserverMode::Permission,
            },
        )
    }

    /// A node opened below a watched tree that is not marked yet (created
    /// after the walk): find its host path, verified by `(dev, ino)`, mark
    /// it through the event's descriptor and remember it.
    fn learn(&mut self, fd: BorrowedFd<'_>, key: (u64, u64), dir: bool) -> io::Result<PathBuf> {
        let path = self.watched_name(&self.verified_path(fd, key));
        self.mark_fd(fd, &path, key, dir, true)?;
        Ok(path)
    }

    /// `path` (a host path) named from the nearest directory above it that
    /// is a marked node of a tree: that directory's watched path joined
    /// with the rest (`private/x` for `pub/x` after `mv private pub`); the
    /// path itself when no such directory holds it.
    fn watched_name(&self, path: &Path) -> PathBuf {
        for a in path.ancestors().skip(1) {
            let Ok(md) = std::fs::symlink_metadata(a) else {
                continue;
            };
            let Some(known) = self.inodes.get(&(md.dev(), md.ino())) else {
                continue;
            };
            if known.tree
                && md.is_dir()
                && known.is(md.created().ok())
                && let Ok(rest) = path.strip_prefix(a)
            {
                return known.path.join(rest);
            }
        }
        path.to_path_buf()
    }

    /// The host path of the inode `key` opened as `fd`: the first candidate
    /// whose `lstat` is that inode: the descriptor's own path, taken as a
    /// host path, then relative to each watched tree and each of its
    /// ancestors (through an overlay the kernel names the file relative to
    /// the lower layer, which is a watched tree or holds one), candidates
    /// inside a watched tree first. When none verifies, the deepest
    /// directory that provably holds it: the common ancestor of the
    /// watched trees on its filesystem, as `<dir>/…`. (The opener's own
    /// view, `/proc/<pid>/root/…`, could verify a sandbox path but never
    /// gives a host path, so it is not a candidate.)
    fn verified_path(&self, fd: BorrowedFd<'_>, key: (u64, u64)) -> PathBuf {
        let link = nix::fcntl::readlink(&fd_path(fd))
            .map(PathBuf::from)
            .unwrap_or_default();
        let mut candidates: Vec<PathBuf> = Vec::new();
        if link.is_absolute() {
            candidates.push(link.clone());
        }
        if let Ok(rel) = link.strip_prefix("/") {
            for t in &self.trees {
                for a in t.ancestors() {
                    candidates.push(a.join(rel));
                }
            }
        }
        let inside = |p: &PathBuf| self.trees.iter().any(|t| p.starts_with(t));
        candidates.sort_by_key(|p| !inside(p));
        for c in candidates {
            if std::fs::symlink_metadata(&c).is_ok_and(|md| (md.dev(), md.ino()) == key) {
                return c;
            }
        }
        let same_fs: Vec<&PathBuf> = self
            .trees
            .iter()
            .filter(|t| std::fs::symlink_metadata(t).is_ok_and(|md| md.dev() == key.0))
            .collect();
        let pool: Vec<&PathBuf> = if same_fs.is_empty() {
            self.trees.iter().collect()
        } else {
            same_fs
        };
        common_ancestor(&pool).join("…")
    }

    /// One inotify event: a directory created in a tree is marked; a path
    /// waited for is retried; after the fact, an open is reported.
    fn on_inotify(&mut self, ev: &InotifyEvent, handler: &mut Handler, shared: &Shared) {
        if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            shared.error();
            if !self.permission() {
                // Lost events: report every watched path, erring towards
                // caution.
                let all: Vec<PathBuf> = self.inodes.values().map(|k| k.path.clone()).collect();
                for path in all {
                    report_after(handler, shared, path);
                }
            }
            return;
        }
        if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
            self.wds.remove(&ev.wd);
            return;
        }
        let Some(node) = self.wds.get(&ev.wd) else {
            return;
        };
        let base = node.path.clone();
        let (tree, ancestor) = (node.tree, node.ancestor);
        let path = match &ev.name {
            Some(name) => base.join(name),
            None => base,
        };
        let is_dir = ev.mask.contains(AddWatchFlags::IN_ISDIR);
        if ev
            .mask
            .intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)
        {
            if tree && is_dir {
                self.mark_new_dir(&path, shared);
            }
            if ancestor {
                self.readd_below(&path, shared);
            }
        }
        // A directory watched exactly reports its own opens, not its
        // children's (inotify reports both).
        if ev.mask.contains(AddWatchFlags::IN_OPEN)
            && !self.permission()
            && (tree || ev.name.is_none())
        {
            if tree && is_dir && ev.name.is_some() {
                self.mark_new_dir(&path, shared);
            }
            report_after(handler, shared, path);
        }
    }

    /// A directory that appeared in a watched tree: marked as one of the
    /// tree's (again if it was: a mark is idempotent, and the inode may be a
    /// new one under a reused number), then walked off this thread, since it
    /// may have come populated (moved in); its files are covered as its
    /// children, its subdirectories as the walk opens them.
    fn mark_new_dir(&mut self, path: &Path, shared: &Shared) {
        let Ok(fd) = nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) else {
            // Gone again, or not a directory (a symlink): nothing to mark.
            return;
        };
        let Ok(st) = nix::sys::stat::fstat(&fd) else {
            shared.error();
            return;
        };
        if self
            .mark_fd(fd.as_fd(), path, key_of(&st), true, true)
            .is_err()
        {
            shared.error();
            return;
        }
        let depth = self
            .trees
            .iter()
            .find_map(|t| path.strip_prefix(t).ok())
            .map_or(0, |rest| rest.components().count());
        self.walk_later(path, depth);
    }
}

/// Reports an open seen after the fact (unattributed); the handler's answer
/// changes nothing then, and a handler that fails is counted.
fn report_after(handler: &mut Handler, shared: &Shared, path: PathBuf) {
    let open = ObservedOpen {
        path,
        pid: None,
        attribution: Attribution::Unknown,
        mode: ObserverMode::AfterTheFact,
    };
    if call(handler, &open).is_err() {
        shared.error();
    }
}

/// Call the handler; a panic in it is an internal error (`Err`, so the
/// open is denied and counted), never the end of the observer thread, whose
/// end would close the group and let every later open through unseen.
fn call(handler: &mut Handler, open: &ObservedOpen) -> io::Result<Response> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(open)))
        .map_err(|_| io::Error::other("the handler panicked"))
}

/// The deepest directory holding every path of `paths` (`/` for none).
fn common_ancestor(paths: &[&PathBuf]) -> PathBuf {
    let Some(first) = paths.first() else {
        return PathBuf::from("/");
    };
    let mut common = first.to_path_buf();
    for p in paths.iter().skip(1) {
        while !p.starts_with(&common) {
            if !common.pop() {
                return PathBuf::from("/");
            }
        }
    }
    common
}

/// Whose open it was, or that its opener has provably exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opener {
    /// The opener, as far as it can be told.
    Is(Attribution),
    /// The opener's pidfd says it has exited (or the kernel said it was
    /// reaped before the event was read): its open never returns, so it is
    /// denied without a handler call (a host reader killed mid-open taints
    /// nothing).
    Gone,
}

/// Whether the process `pidfd` refers to has exited (a pidfd polls
/// readable once it has).
fn exited(pidfd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    matches!(nix::poll::poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
}

/// Whose open it was: the opener's PID namespace, or one of its parents
/// (`NS_GET_PARENT`, up to the observer's own level), is the sandbox's. An
/// opener whose pidfd says it has exited is [`Opener::Gone`] (checked
/// again after the namespace is opened: its pid may name another process
/// by then); one whose namespace cannot be read and that may still run (no
/// pidfd to tell) is [`Attribution::Unknown`].
fn attribute(ev: &PermEvent, ns: PidNamespace) -> Opener {
    let pidfd = ev.pidfd.as_ref();
    if ev.reaped || pidfd.is_some_and(exited) {
        return Opener::Gone;
    }
    let pid = ev.pid;
    if pid <= 0 {
        return Opener::Is(Attribution::Unknown);
    }
    let file = std::fs::File::open(format!("/proc/{pid}/ns/pid"));
    // After the open above: if the opener still runs, the pid named it.
    if pidfd.is_some_and(exited) {
        return Opener::Gone;
    }
    let Ok(file) = file else {
        return Opener::Is(Attribution::Unknown);
    };
    let mut cur = OwnedFd::from(file);
    for _ in 0..MAX_NS_DEPTH {
        let Ok(st) = nix::sys::stat::fstat(&cur) else {
            return Opener::Is(Attribution::Unknown);
        };
        if (st.st_dev, st.st_ino) == (ns.dev, ns.ino) {
            return Opener::Is(Attribution::Sandbox);
        }
        match crate::sys::ns_get_parent(cur.as_fd()) {
            Ok(parent) => cur = parent,
            Err(_) => return Opener::Is(Attribution::Host),
        }
    }
    Opener::Is(Attribution::Host)
}

/// The walker thread: each directory that appeared in a watched tree is
/// listed, and every directory below it opened and listed in turn (never
/// following a symlink), bounded by the same [`MAX_ENTRIES`] (counted with
/// the initial walks) and [`MAX_DEPTH`]. Each open of a subdirectory raises
/// a permission event on its marked parent, which the observer thread
/// answers at once (this process's own open) after marking the
/// subdirectory: so each directory is marked before its entries are
/// listed. Over the bound, or a directory that exists but cannot be
/// listed, the watch is incomplete: counted, and [`ReadObserver::failed`]
/// says so (fail closed: the caller stops the worker).
fn walker(jobs: &Receiver<Walk>, shared: &Shared) {
    let incomplete = || {
        shared.error();
        shared.incomplete.store(true, Ordering::SeqCst);
    };
    while let Ok(job) = jobs.recv() {
        let mut stack = vec![(job.dir, job.depth)];
        while let Some((dir, depth)) = stack.pop() {
            if shared.stop.load(Ordering::SeqCst) {
                return;
            }
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                // Gone again, or replaced by something else: nothing below.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
                    ) =>
                {
                    continue;
                }
                Err(_) => {
                    incomplete();
                    continue;
                }
            };
            for entry in entries {
                let Ok(entry) = entry else {
                    incomplete();
                    break;
                };
                if shared.entries.fetch_add(1, Ordering::SeqCst) >= MAX_ENTRIES {
                    incomplete();
                    return;
                }
                // `DirEntry::file_type` does not follow a symlink.
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    if depth + 1 > MAX_DEPTH {
                        incomplete();
                        break;
                    }
                    stack.push((entry.path(), depth + 1));
                }
            }
        }
    }
}

/// The events of one `read` of the group, their descriptors adopted at
/// once (so none leaks); a record the kernel would never write ends the
/// batch, counted.
fn parse_events(buf: &[u8], shared: &Shared) -> Vec<PermEvent> {
    const META: usize = std::mem::size_of::<libc::fanotify_event_metadata>();
    let u32_at = |b: &[u8], o: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(o..o + 4)?.try_into().ok()?))
    };
    let i32_at = |b: &[u8], o: usize| -> Option<i32> {
        Some(i32::from_ne_bytes(b.get(o..o + 4)?.try_into().ok()?))
    };
    let mut out = Vec::new();
    let mut off = 0usize;
    while let Some(rec) = buf.get(off..off + META) {
        let len = u32_at(rec, 0).unwrap_or(0) as usize;
        let version = rec.get(4).copied().unwrap_or(0);
        let meta_len = rec
            .get(6..8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, |b| u16::from_ne_bytes(b) as usize);
        let mask = rec
            .get(8..16)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_ne_bytes);
        let fd = crate::sys::adopt_fd(i32_at(rec, 16).unwrap_or(-1));
        let pid = i32_at(rec, 20).unwrap_or(0);
        if version != libc::FANOTIFY_METADATA_VERSION
            || len < META
            || meta_len < META
            || meta_len > len
            || off + len > buf.len()
        {
            shared.error();
            // Answered (denied) when the event is dropped below? No: an
            // event we cannot read cannot be answered by its fd either way;
            // keep it so that the caller denies it.
            out.push(PermEvent {
                mask,
                fd,
                pid,
                pidfd: None,
                reaped: false,
            });
            break;
        }
        let mut pidfd = None;
        let mut reaped = false;
        let mut info = off + meta_len;
        while info + 4 <= off + len {
            let kind = buf.get(info).copied().unwrap_or(0);
            let ilen = buf
                .get(info + 2..info + 4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, |b| u16::from_ne_bytes(b) as usize);
            if ilen < 4 {
                break;
            }
            if kind == libc::FAN_EVENT_INFO_TYPE_PIDFD {
                let raw = i32_at(buf, info + 4).unwrap_or(-1);
                reaped = raw == libc::FAN_EPIDFD;
                pidfd = crate::sys::adopt_fd(raw);
            }
            info += ilen;
        }
        out.push(PermEvent {
            mask,
            fd,
            pid,
            pidfd,
            reaped,
        });
        off += len;
    }
    out
}
