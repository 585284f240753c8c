//! The read observer: the worker's opens of watched paths, seen by the
//! kernel without the worker's help.
//!
//! As root (`CAP_SYS_ADMIN`), a fanotify group of class content places
//! inode marks with `FAN_OPEN_PERM` on the watched files and, for a
//! [`Scope::Tree`], on every directory of the tree (`FAN_EVENT_ON_CHILD`,
//! new directories marked as they appear). The opener blocks until the
//! handler has answered, so whatever the handler records happens before
//! the first byte is returned. Marks are on the host's inodes, so opens
//! through a bind and through a staged root's overlay (whose lower layer is
//! the host tree) are both seen.
//!
//! Without privilege the observer is degraded
//! ([`ObserverMode::AfterTheFact`]): the open is reported after it happened
//! and cannot be attributed to the sandbox.
//!
//! SKELETON (issue 17): the contract; the isolate helper implements it.

use std::io;
use std::path::PathBuf;

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

/// Which observer can run for this process.
pub fn probe() -> ObserverSupport {
    ObserverSupport {
        mode: None,
        facts: "not implemented yet".to_owned(),
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
    /// Could not be told (degraded mode, or the opener is gone); callers
    /// treat it as the sandbox's (taint errs towards caution).
    Unknown,
}

/// One open of a watched path.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObservedOpen {
    /// The host path of the opened file, verified against the opened inode.
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

/// A running read observer. Dropping it stops it (pending opens are allowed).
#[derive(Debug)]
pub struct ReadObserver {
    mode: ObserverMode,
}

impl ReadObserver {
    /// Starts observing `watches` in `mode`, calling `handler` for each
    /// open. In [`ObserverMode::Permission`], opens are held until
    /// [`ReadObserver::attribute_to`] names the sandbox's namespace.
    pub fn start(
        watches: &[Watch],
        mode: ObserverMode,
        handler: Handler,
    ) -> Result<Self, ObserveError> {
        let _ = (watches, handler);
        Err(ObserveError::Unavailable(format!(
            "{mode:?}: not implemented yet"
        )))
    }

    /// Attribute opens to the sandbox whose PID namespace is `ns`.
    pub fn attribute_to(&self, ns: PidNamespace) {
        let _ = ns;
    }

    /// The mode it runs in.
    pub fn mode(&self) -> ObserverMode {
        self.mode
    }
}
