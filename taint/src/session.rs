//! The session state, the events that change it and the rules that say how.

use std::collections::BTreeSet;

use globset::{GlobSet, GlobSetBuilder};
use palisade_schema::host_policy::{HostPolicy, PathGlob, RequestHost, TaintSourceKind};
use serde::{Deserialize, Serialize};

use crate::path::normalize_path;

/// How many distinct taint sources a session keeps; later ones are counted
/// in [`TaintState::Tainted::more_sources`] only (the taint itself is kept).
pub const MAX_SOURCES: usize = 256;

/// How many distinct routing-restricted paths a session keeps. Beyond it a
/// new path is kept only when no kept path is restricted by the same set of
/// rules (routing decisions depend on that set alone, so dropping such a
/// path changes no decision); the others are counted in
/// [`Session::more_restricted_reads`]. A worker that opens a million files
/// of a routed tree cannot grow the session without bound.
pub const MAX_RESTRICTED_READS: usize = 256;

/// Why a session became tainted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TaintSource {
    /// A web fetch or search result.
    Web,
    /// A result from an MCP server the host does not run.
    ExternalMcp,
    /// Shell command output (when `shell` is an enabled source).
    Shell,
    /// A proxy connection that did not go through a relay.
    ProxyNonRelay,
    /// A read of a `taint.untrusted_paths` path.
    UntrustedPath,
    /// A read of a file the user marked untrusted.
    MarkedFile,
    /// Content the embedding orchestrator declared untrusted (a shared item,
    /// an email). Always taints; it cannot be switched off.
    Input,
}

impl TaintSource {
    /// The configurable kind this source belongs to, if it is configurable.
    pub fn kind(self) -> Option<TaintSourceKind> {
        match self {
            Self::Web => Some(TaintSourceKind::Web),
            Self::ExternalMcp => Some(TaintSourceKind::ExternalMcp),
            Self::Shell => Some(TaintSourceKind::Shell),
            Self::ProxyNonRelay => Some(TaintSourceKind::ProxyNonRelay),
            Self::UntrustedPath => Some(TaintSourceKind::UntrustedPath),
            Self::MarkedFile => Some(TaintSourceKind::MarkedFile),
            Self::Input => None,
        }
    }

    /// The stable name of the source class, as journal records spell it
    /// (`proxy_non_relay`, `marked_file`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Web => "web",
            Self::ExternalMcp => "external_mcp",
            Self::Shell => "shell",
            Self::ProxyNonRelay => "proxy_non_relay",
            Self::UntrustedPath => "untrusted_path",
            Self::MarkedFile => "marked_file",
            Self::Input => "input",
        }
    }
}

impl std::fmt::Display for TaintSource {
    /// The stable snake_case name, as [`TaintSource::as_str`] and the
    /// journal's `taint_raised` records spell it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One recorded reason for taint: the source class and what exactly
/// (a path, `host:port`, a tool or input label).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Source {
    /// The source class.
    pub source: TaintSource,
    /// What exactly tainted the session.
    pub detail: String,
}

impl Source {
    /// The reason `source` with its `detail`.
    pub fn new(source: TaintSource, detail: impl Into<String>) -> Self {
        Self {
            source,
            detail: detail.into(),
        }
    }
}

/// Clean or tainted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum TaintState {
    /// No untrusted content has been seen.
    #[default]
    Clean,
    /// Untrusted content has been seen; this never reverts.
    #[non_exhaustive]
    Tainted {
        /// The distinct reasons, at most [`MAX_SOURCES`].
        sources: BTreeSet<Source>,
        /// Reasons beyond [`MAX_SOURCES`], counted only.
        more_sources: u64,
        /// When the first taint happened (Unix milliseconds).
        first_at_ms: u64,
    },
}

/// What a tool result came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolClass {
    /// Web fetch or web search.
    Web,
    /// An MCP server the host does not run.
    ExternalMcp,
    /// A shell command.
    Shell,
    /// A local tool whose output is not untrusted by itself (a file read is
    /// reported separately as [`Event::Read`]).
    Local,
}

/// Something that happened in a session.
///
/// These are the facts a journal records; `palisade-evidence` records map
/// onto them one to one, so a session can be rebuilt after a restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// A tool returned a result to the model.
    ToolResult {
        /// The tool's class.
        tool: ToolClass,
        /// The tool's name, for the record.
        #[serde(default)]
        name: String,
    },
    /// The worker read a file.
    Read {
        /// The path as the worker named it.
        path: String,
    },
    /// The worker wrote a file.
    Write {
        /// The path as the worker named it.
        path: String,
    },
    /// A proxy connection was allowed. The proxy applies it in the same step
    /// as the decision, before it dials, so that concurrent requests cannot
    /// all be decided on the clean state; a dial that fails later does not
    /// undo it.
    Connect {
        /// The host as requested.
        host: String,
        /// The port.
        port: u16,
        /// Whether the connection was a host relay's.
        relay: bool,
    },
    /// The orchestrator handed the session untrusted content.
    UntrustedInput {
        /// What it was, for the record.
        label: String,
    },
    /// An outward action ran (it is irreversible; no taint effect).
    Outward {
        /// The action kind.
        kind: String,
        /// The action target.
        target: String,
    },
}

/// An event with its time, as a journal stores it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Record {
    /// Unix milliseconds.
    pub at_ms: u64,
    /// What happened.
    pub event: Event,
}

impl Record {
    /// `event` at `at_ms` (Unix milliseconds).
    pub fn new(at_ms: u64, event: Event) -> Self {
        Self { at_ms, event }
    }
}

/// A write to a steering path, which the caller must record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SteeringWrite {
    /// The path written, normalised.
    pub path: String,
    /// Whether the session was tainted when it wrote.
    pub tainted: bool,
}

/// What applying one event did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "a steering write must be recorded by the caller"]
#[non_exhaustive]
pub struct Effects {
    /// The event tainted the session (it may have been tainted already).
    pub tainted_by: Option<TaintSource>,
    /// The event turned a clean session tainted.
    pub newly_tainted: bool,
    /// The event was a write to a steering path.
    pub steering_write: Option<SteeringWrite>,
    /// The event read a routing-restricted path.
    pub restricted_read: bool,
    /// The event added a path to the session's restricted reads (a
    /// restricted path the session had not read before, in that spelling):
    /// the caller records a `routing_read` for it. A path read again, or
    /// one whose rules a kept path already stands for beyond
    /// [`MAX_RESTRICTED_READS`], is not added.
    pub new_restricted_read: bool,
    /// The event was an outward action: record it as irreversible.
    pub irreversible: bool,
}

/// Rules compiled from a host policy and the marks file.
#[derive(Clone, Debug)]
pub struct Rules {
    enabled: BTreeSet<TaintSourceKind>,
    untrusted: GlobSet,
    marked: GlobSet,
    steering: GlobSet,
    restricted: GlobSet,
    /// For each glob of `restricted`, the index of its `[[routing]]` rule.
    restricted_rules: Vec<usize>,
    cwd: Option<String>,
}

/// The rules could not be compiled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RulesError {
    /// A glob did not compile.
    #[error("glob `{glob}` does not compile: {message}")]
    Glob {
        /// The glob text.
        glob: String,
        /// The compiler's message.
        message: String,
    },
}

impl Rules {
    /// Compiles the `[taint]` and `[[routing]]` sections of `policy`, plus the
    /// paths from the marks file (`marks`, see [`crate::parse_marks`]).
    ///
    /// A mark is a path and everything under it: each marks-file entry, and
    /// each `taint.marked` entry written as a literal path (no `*`, `?`,
    /// `[`, `]`, `{`, `}` or `\`), also matches every path below it (a
    /// marked directory covers the files in it). A `taint.marked` glob
    /// matches what the glob says.
    pub fn new(policy: &HostPolicy, marks: &[String]) -> Result<Self, RulesError> {
        let t = &policy.taint;
        let cwd = policy.worker.cwd.as_deref();
        let mut marked: Vec<String> = Vec::new();
        for g in &t.marked {
            let g = g.as_str();
            marked.push(g.to_owned());
            // A literal path (no glob syntax) is a mark like the marks
            // file's: the path and everything below it.
            if !g.contains(GLOB_SYNTAX) {
                marked.extend(normalize_path(g, cwd).iter().flat_map(|f| mark_globs(f)));
            }
        }
        for m in marks {
            marked.extend(normalize_path(m, cwd).iter().flat_map(|f| mark_globs(f)));
        }
        let routing: Vec<&PathGlob> = policy.routing.iter().flat_map(|r| &r.paths).collect();
        let restricted_rules: Vec<usize> = policy
            .routing
            .iter()
            .enumerate()
            .flat_map(|(i, r)| r.paths.iter().map(move |_| i))
            .collect();
        Ok(Self {
            enabled: t.sources.clone(),
            untrusted: build(t.untrusted_paths.iter().map(PathGlob::as_str))?,
            marked: build(marked.iter().map(String::as_str))?,
            steering: build(t.steering_paths.iter().map(PathGlob::as_str))?,
            restricted: build(routing.into_iter().map(PathGlob::as_str))?,
            restricted_rules,
            cwd: policy.worker.cwd.clone(),
        })
    }

    /// The forms of `path` matched against globs (see [`crate::normalize_path`]).
    pub fn path_forms(&self, path: &str) -> Vec<String> {
        normalize_path(path, self.cwd.as_deref())
    }

    /// The indices of the `[[routing]]` rules whose globs match one of
    /// `forms`, sorted.
    fn restricting_rules(&self, forms: &[String]) -> BTreeSet<usize> {
        forms
            .iter()
            .flat_map(|f| self.restricted.matches(f))
            .filter_map(|g| self.restricted_rules.get(g).copied())
            .collect()
    }

    fn on(&self, kind: TaintSourceKind) -> bool {
        self.enabled.contains(&kind)
    }
}

/// The characters that make a `taint.marked` entry a glob rather than a
/// literal path.
const GLOB_SYNTAX: [char; 7] = ['*', '?', '[', ']', '{', '}', '\\'];

/// The globs of one mark, a lexically normalised path `form`: the path
/// itself and everything below it.
fn mark_globs(form: &str) -> [String; 2] {
    let escaped = globset::escape(form);
    let below = if escaped.ends_with('/') {
        format!("{escaped}**")
    } else {
        format!("{escaped}/**")
    };
    [below, escaped]
}

fn build<'a>(globs: impl Iterator<Item = &'a str>) -> Result<GlobSet, RulesError> {
    let mut b = GlobSetBuilder::new();
    for g in globs {
        let glob = globset::GlobBuilder::new(g)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| RulesError::Glob {
                glob: g.to_owned(),
                message: e.to_string(),
            })?;
        b.add(glob);
    }
    b.build().map_err(|e| RulesError::Glob {
        glob: String::new(),
        message: e.to_string(),
    })
}

fn any_match(set: &GlobSet, forms: &[String]) -> bool {
    forms.iter().any(|f| set.is_match(f))
}

/// The state of one session.
///
/// Taint only grows: there is no method that clears it. A session read back
/// from JSON is only as trustworthy as the file it came from; after a restart
/// prefer [`Session::rebuild`] from the sealed journal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    taint: TaintState,
    /// The source that turned the session tainted (the one at `first_at_ms`).
    #[serde(default)]
    first_source: Option<Source>,
    contacted: BTreeSet<String>,
    restricted_reads: BTreeSet<String>,
    /// Restricted reads beyond [`MAX_RESTRICTED_READS`] not kept, because a
    /// kept path stands for their rules.
    #[serde(default, skip_serializing_if = "is_zero")]
    more_restricted_reads: u64,
    steering_writes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Session {
    /// A clean session.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replays recorded events, in order, into a new session.
    pub fn rebuild<'a>(rules: &Rules, records: impl IntoIterator<Item = &'a Record>) -> Self {
        let mut s = Self::new();
        for r in records {
            let _ = s.apply(rules, r.at_ms, &r.event);
        }
        s
    }

    /// Applies one event at `at_ms` (Unix milliseconds).
    pub fn apply(&mut self, rules: &Rules, at_ms: u64, event: &Event) -> Effects {
        let mut fx = Effects::default();
        match event {
            Event::ToolResult { tool, name } => {
                let src = match tool {
                    ToolClass::Web => Some(TaintSource::Web),
                    ToolClass::ExternalMcp => Some(TaintSource::ExternalMcp),
                    ToolClass::Shell => Some(TaintSource::Shell),
                    ToolClass::Local => None,
                };
                if let Some(src) = src {
                    self.taint_if_on(rules, &mut fx, src, name, at_ms);
                }
            }
            Event::Read { path } => {
                let forms = rules.path_forms(path);
                let shown = forms.last().cloned().unwrap_or_default();
                if any_match(&rules.untrusted, &forms) {
                    self.taint_if_on(rules, &mut fx, TaintSource::UntrustedPath, &shown, at_ms);
                }
                if any_match(&rules.marked, &forms) {
                    self.taint_if_on(rules, &mut fx, TaintSource::MarkedFile, &shown, at_ms);
                }
                if any_match(&rules.restricted, &forms) {
                    fx.restricted_read = true;
                    fx.new_restricted_read = self.insert_restricted(rules, forms);
                }
            }
            Event::Write { path } => {
                let forms = rules.path_forms(path);
                if any_match(&rules.steering, &forms) {
                    self.steering_writes = self.steering_writes.saturating_add(1);
                    fx.steering_write = Some(SteeringWrite {
                        path: forms.last().cloned().unwrap_or_default(),
                        tainted: self.is_tainted(),
                    });
                }
            }
            Event::Connect { host, port, relay } => {
                let key = contact_key(host, *port);
                if !relay {
                    self.taint_if_on(rules, &mut fx, TaintSource::ProxyNonRelay, &key, at_ms);
                }
                self.contacted.insert(key);
            }
            Event::UntrustedInput { label } => {
                self.taint_with(&mut fx, TaintSource::Input, label, at_ms);
            }
            Event::Outward { .. } => fx.irreversible = true,
        }
        fx
    }

    /// Whether the session is tainted.
    pub fn is_tainted(&self) -> bool {
        matches!(self.taint, TaintState::Tainted { .. })
    }

    /// The taint state.
    pub fn taint(&self) -> &TaintState {
        &self.taint
    }

    /// When the session was first tainted (Unix milliseconds).
    pub fn first_tainted_at_ms(&self) -> Option<u64> {
        match &self.taint {
            TaintState::Clean => None,
            TaintState::Tainted { first_at_ms, .. } => Some(*first_at_ms),
        }
    }

    /// The source that first tainted the session, with [`Session::first_tainted_at_ms`]
    /// the answer to "tainted by what, since when".
    pub fn first_source(&self) -> Option<&Source> {
        self.first_source.as_ref()
    }

    /// Whether the session opened a connection to `host:port` before.
    pub fn has_contacted(&self, host: &RequestHost, port: u16) -> bool {
        self.contacted.contains(&format!("{host}:{port}"))
    }

    /// Contacted `host:port` pairs, normalised.
    pub fn contacted(&self) -> impl Iterator<Item = &str> {
        self.contacted.iter().map(String::as_str)
    }

    /// Routing-restricted paths the session read (absolute when the policy
    /// names a working directory).
    pub fn restricted_reads(&self) -> impl Iterator<Item = &str> {
        self.restricted_reads.iter().map(String::as_str)
    }

    /// Restricted reads not kept beyond [`MAX_RESTRICTED_READS`] (a kept
    /// path is restricted by the same rules, so no decision changes).
    pub fn more_restricted_reads(&self) -> u64 {
        self.more_restricted_reads
    }

    /// How many steering writes the session made.
    pub fn steering_writes(&self) -> u64 {
        self.steering_writes
    }

    fn taint_if_on(
        &mut self,
        rules: &Rules,
        fx: &mut Effects,
        src: TaintSource,
        detail: &str,
        at_ms: u64,
    ) {
        if src.kind().is_none_or(|k| rules.on(k)) {
            self.taint_with(fx, src, detail, at_ms);
        }
    }

    /// Records `path` as a restricted read in the form [`Event::Read`]
    /// keeps (absolute when the policy names a working directory), whether
    /// or not `rules` restrict it now.
    #[cfg_attr(
        not(feature = "evidence"),
        expect(
            dead_code,
            reason = "only `Session::rebuild_from` (feature `evidence`) calls it"
        )
    )]
    pub(crate) fn add_restricted_read(&mut self, rules: &Rules, path: &str) {
        let _ = self.insert_restricted(rules, rules.path_forms(path));
    }

    /// Keeps the first of `forms` as a restricted read; whether it was added.
    fn insert_restricted(&mut self, rules: &Rules, forms: Vec<String>) -> bool {
        let Some(abs) = forms.first() else {
            return false;
        };
        if self.restricted_reads.contains(abs) {
            return false;
        }
        if self.restricted_reads.len() >= MAX_RESTRICTED_READS {
            let restricting = rules.restricting_rules(&forms);
            let represented = restricting.is_empty()
                || self
                    .restricted_reads
                    .iter()
                    .any(|kept| rules.restricting_rules(&rules.path_forms(kept)) == restricting);
            if represented {
                self.more_restricted_reads = self.more_restricted_reads.saturating_add(1);
                return false;
            }
        }
        self.restricted_reads.insert(abs.clone())
    }

    pub(crate) fn taint_with(
        &mut self,
        fx: &mut Effects,
        src: TaintSource,
        detail: &str,
        at_ms: u64,
    ) {
        let source = Source {
            source: src,
            detail: detail.to_owned(),
        };
        fx.tainted_by = Some(src);
        match &mut self.taint {
            TaintState::Clean => {
                fx.newly_tainted = true;
                self.first_source = Some(source.clone());
                self.taint = TaintState::Tainted {
                    sources: BTreeSet::from([source]),
                    more_sources: 0,
                    first_at_ms: at_ms,
                };
            }
            TaintState::Tainted {
                sources,
                more_sources,
                ..
            } => {
                if sources.len() < MAX_SOURCES {
                    sources.insert(source);
                } else if !sources.contains(&source) {
                    *more_sources = more_sources.saturating_add(1);
                }
            }
        }
    }
}

/// `host:port` with the host normalised when it parses.
fn contact_key(host: &str, port: u16) -> String {
    match RequestHost::parse(host) {
        Ok(h) => format!("{h}:{port}"),
        Err(_) => format!("{}:{port}", host.to_ascii_lowercase()),
    }
}

#[cfg(test)]
mod tests;
