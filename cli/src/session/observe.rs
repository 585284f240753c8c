//! The governed session's read observer: which host paths it watches (from
//! `taint.marked`, the marks file's entries, `taint.untrusted_paths` and
//! every `[[routing]].paths` glob), which mode it runs in, and the status
//! `sandbox_status` shows for it.
//!
//! Globs are placed as `palisade_taint::Rules` reads them: an absolute glob
//! as written, a relative one below the worker's working directory. A mark
//! (a marks-file entry or a literal `taint.marked` path) means the path and
//! everything below it, so it is always watched as a tree
//! ([`Scope::Tree`]): a file as that file, a directory with everything
//! created in it later, and a path that does not exist yet as whatever it
//! becomes. Another literal path is watched exactly (a directory as a
//! tree); a glob is watched as the tree of its literal prefix, and the
//! session's handler matches each opened path against the rules. The worker
//! sees binds and staged roots at their host paths, so a host path is also
//! the worker's path.

use std::path::PathBuf;
use std::sync::Arc;

use palisade_isolate::observe::{ObservedOpen, ObserverMode, ReadObserver, Scope, Watch};
use palisade_schema::host_policy::{HostPolicy, TaintObserve};
use palisade_taint::normalize_path;

use super::core::SessionCore;

/// The paths the policy's taint and routing rules name, as host watches.
///
/// A relative glob or mark with no working directory to place it in is an
/// error naming its key: the observer could not see it, so the rule would
/// be parsed but not applied.
pub(crate) fn watches(policy: &HostPolicy, marks: &[String]) -> Result<Vec<Watch>, String> {
    let cwd = policy.worker.cwd.as_deref();
    let mut out: Vec<Watch> = Vec::new();
    // (key, glob, whether a literal path means it and everything below)
    let mut globs: Vec<(String, &str, bool)> = Vec::new();
    for g in &policy.taint.marked {
        globs.push(("taint.marked".to_owned(), g.as_str(), true));
    }
    for g in &policy.taint.untrusted_paths {
        globs.push(("taint.untrusted_paths".to_owned(), g.as_str(), false));
    }
    for (i, r) in policy.routing.iter().enumerate() {
        for g in &r.paths {
            globs.push((format!("routing[{i}].paths"), g.as_str(), false));
        }
    }
    for (key, glob, below) in globs {
        let abs = absolute(glob, cwd).ok_or_else(|| unplaced(&key, glob))?;
        let (prefix, literal) = literal_prefix(&abs);
        out.push(if literal && !below {
            exact_or_tree(prefix)
        } else {
            Watch::new(prefix, Scope::Tree)
        });
    }
    for m in marks {
        let form = normalize_path(m, cwd)
            .into_iter()
            .next()
            .unwrap_or_default();
        if !form.starts_with('/') {
            return Err(unplaced("the marks file", m));
        }
        // A mark is the path and everything below it, whatever the path is
        // (or is not yet) when the session starts.
        out.push(Watch::new(PathBuf::from(form), Scope::Tree));
    }
    out.sort_by(|a, b| a.path.cmp(&b.path).then(tree_first(a.scope, b.scope)));
    out.dedup_by(|later, first| later.path == first.path);
    Ok(out)
}

fn tree_first(a: Scope, b: Scope) -> std::cmp::Ordering {
    let rank = |s: Scope| u8::from(s != Scope::Tree);
    rank(a).cmp(&rank(b))
}

fn unplaced(key: &str, glob: &str) -> String {
    format!(
        "{key} `{glob}` is relative, but the worker has no working directory to place it in, so the read observer could not watch it; make it absolute or set worker.cwd"
    )
}

/// `glob` made absolute against `cwd` (lexically), if it can be.
fn absolute(glob: &str, cwd: Option<&str>) -> Option<String> {
    if glob.starts_with('/') {
        return Some(glob.to_owned());
    }
    let cwd = cwd.filter(|c| c.starts_with('/'))?;
    Some(format!("{}/{glob}", cwd.trim_end_matches('/')))
}

/// The directory of `glob`'s leading literal components (lexically
/// normalised) and whether the whole glob is literal.
fn literal_prefix(glob: &str) -> (PathBuf, bool) {
    let mut literal: Vec<&str> = Vec::new();
    let mut all = true;
    for seg in glob.split('/') {
        if seg.contains(['*', '?', '[', ']', '{', '}', '\\']) {
            all = false;
            break;
        }
        literal.push(seg);
    }
    let joined = literal.join("/");
    let norm = normalize_path(if joined.is_empty() { "/" } else { &joined }, None)
        .into_iter()
        .next()
        .unwrap_or_else(|| "/".to_owned());
    (PathBuf::from(norm), all)
}

/// A literal untrusted or routed path: a directory is watched as a tree,
/// anything else (a file, or a path that does not exist yet) exactly.
fn exact_or_tree(path: PathBuf) -> Watch {
    let dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
    Watch::new(path, if dir { Scope::Tree } else { Scope::Exact })
}

/// The observer of one session, and what `sandbox_status` says of it.
#[derive(Debug)]
pub(crate) struct SessionObserver {
    /// The running observer, when there is one.
    pub(crate) observer: Option<ReadObserver>,
    /// `layers[].status` of `read_observer` in `sandbox_status`.
    pub(crate) status: &'static str,
    /// The facts behind it.
    pub(crate) detail: String,
}

impl SessionObserver {
    /// Whether a running observer stopped on its own (the session must stop
    /// the worker: its reads are no longer seen).
    pub(crate) fn failed(&self) -> bool {
        self.observer.as_ref().is_some_and(ReadObserver::failed)
    }

    /// Whether the layer runs degraded (after the fact, not attributed).
    pub(crate) fn degraded(&self) -> bool {
        self.observer
            .as_ref()
            .is_some_and(|o| o.mode() != ObserverMode::Permission)
    }

    /// The `read_observer` entry of `sandbox_status.layers`.
    pub(crate) fn layer_json(&self) -> serde_json::Value {
        serde_json::json!({"layer": "read_observer", "status": self.status, "detail": self.detail})
    }
}

/// The mode to run in: permission events when the probe allows them, else
/// after the fact; `Err` with the facts when no observer can run.
pub(crate) fn choose_mode(mode: Option<ObserverMode>, facts: &str) -> Result<ObserverMode, String> {
    match mode {
        Some(ObserverMode::Permission) => Ok(ObserverMode::Permission),
        Some(_) => Ok(ObserverMode::AfterTheFact),
        None => Err(format!(
            "isolation_layer_unavailable: read_observer ({facts}); the policy names marked, untrusted or routed paths, so reads must be observed (or set taint.observe = \"self_report\")"
        )),
    }
}

/// Starts the observer for `watches` before the sandbox spawns (the marks
/// are in place before the worker runs), its handler feeding `core`;
/// `support` is what [`palisade_isolate::observe::probe`] found (the best
/// mode, the facts).
///
/// With no watched path nothing starts; with `taint.observe =
/// "self_report"` nothing starts and the status says so; otherwise an
/// observer that cannot run is an error naming the layer and the facts.
pub(crate) fn start(
    core: &Arc<SessionCore>,
    watches: &[Watch],
    observe: TaintObserve,
    support: (Option<ObserverMode>, &str),
) -> Result<SessionObserver, String> {
    let (best, facts) = support;
    if observe == TaintObserve::SelfReport {
        return Ok(SessionObserver {
            observer: None,
            status: "off (taint.observe = self_report)",
            detail:
                "reads taint the session only when the worker reports them (palisade ctl taint)"
                    .to_owned(),
        });
    }
    if watches.is_empty() {
        return Ok(SessionObserver {
            observer: None,
            status: "not needed (no watched paths)",
            detail: "the policy names no marked, untrusted or routed path".to_owned(),
        });
    }
    let mode = choose_mode(best, facts)?;
    let core = core.clone();
    let handler =
        Box::new(move |open: &ObservedOpen| core.observed_read(&open.path, open.attribution));
    let observer = ReadObserver::start(watches, mode, handler)
        .map_err(|e| format!("isolation_layer_unavailable: read_observer ({e})"))?;
    let mode = observer.mode();
    Ok(SessionObserver {
        status: mode.status(),
        detail: format!("{facts}; {} watched path(s)", watches.len()),
        observer: Some(observer),
    })
}
