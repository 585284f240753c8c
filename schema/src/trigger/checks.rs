//! The compile-stage checks of a trigger document (`hub-triggers.md` §2.2,
//! §3.2, §6.3) and the authoring contract (§2.4).
//!
//! The document is compiled to its v0.6 [`HubConfig`] and the v0.6
//! cross-reference checks ([`Checker`]) run over it unchanged: expression
//! paths, finite choices of a `select`, the worktree branch template and
//! the GitHub repositories rule. Their findings name the internal trigger
//! and step `run`, as the Hub's do; their paths, which point into the
//! compiled bundle shape, are mapped back to the authored document so the
//! line and column are the node's. (The Hub itself reports every
//! compile-stage issue at path `[]`; palisade keeps the node's path and
//! position, with the Hub's message.)
//!
//! What v0.6 has no field for is checked here directly: the allowlist rule
//! with its wildcard and the Linear scope rule, the title's paths and the
//! continuation key's paths.

use crate::diagnostic::{Diagnostic, Path, PathSegment};
use crate::expr::Template;
use crate::semantic::{Checker, ResourceSite, TriggerSite, diag_at};
use crate::yaml::Node;

use super::{
    Continuation, Release, RunAgent, TriggerDocument, TriggerOptions, internal_trigger_name,
};

/// Marks compiled-trigger paths while the v0.6 checker runs (not a key a
/// YAML document can hold: the NUL is refused by the loader).
const TRIGGER_BASE: &str = "\u{0}trigger";
/// Marks the compiled environment's path.
const ENV_BASE: &str = "\u{0}environment";

fn at(
    file: &str,
    root: &Node,
    code: &'static str,
    msg: impl Into<String>,
    path: &Path,
) -> Diagnostic {
    diag_at(file, root, true, code, msg, path)
}

/// Every compile-stage finding of `doc`.
pub(crate) fn compile_checks(
    file: &str,
    doc: &TriggerDocument,
    root: &Node,
    options: &TriggerOptions,
) -> Vec<Diagnostic> {
    let mut out = allowlist(file, doc, root, options);
    out.extend(v06_checks(file, doc, root));
    if let Some(title) = &doc.run.title {
        out.extend(title_paths(file, root, title));
    }
    if let Continuation::Key(key) = &doc.run.continuation {
        out.extend(key_paths(file, doc, root, key));
    }
    out
}

/// §3.2: every externally sourced event needs a non-empty `from_users`
/// (`"*"` counts); `linear.issue_entered_scope` needs a project instead.
fn allowlist(
    file: &str,
    doc: &TriggerDocument,
    root: &Node,
    options: &TriggerOptions,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (i, e) in doc.on.iter().enumerate() {
        if matches!(e.event.as_str(), "manual.run" | "schedule.tick") {
            continue;
        }
        let t = internal_trigger_name(&doc.name, i);
        let ep = Path::root().key("on").key(e.event.clone());
        let f = e.filters.as_ref();
        if e.event == "linear.issue_entered_scope" {
            let unreleased = options.release >= Release::Unreleased;
            let has_project = f.is_some_and(|f| f.project.is_some());
            let has_team = unreleased && f.is_some_and(|f| f.team.is_some());
            if !has_project && !has_team {
                let msg = if unreleased {
                    format!(
                        "trigger {t} requires filters.project or filters.team for linear.issue_entered_scope"
                    )
                } else {
                    format!("trigger {t} requires filters.project for linear.issue_entered_scope")
                };
                out.push(
                    at(file, root, "linear_scope_required", msg, &ep.key("filters"))
                        .with_help("an autonomous Linear trigger must be scoped to a project"),
                );
            }
            continue;
        }
        if f.and_then(|f| f.from_users.as_ref())
            .is_none_or(Vec::is_empty)
        {
            let msg = if e.source() == "github" {
                format!(
                    "trigger {t} requires a non-empty filters.from_users or filters.from_teams allowlist for externally sourced events"
                )
            } else {
                format!(
                    "trigger {t} requires a non-empty filters.from_users allowlist for externally sourced events"
                )
            };
            let fp = ep.key("filters");
            let p = if f.is_some_and(|f| f.from_users.is_some()) {
                fp.key("from_users")
            } else {
                fp
            };
            out.push(at(file, root, "missing_from_users", msg, &p).with_help(
                "list the user ids allowed to start this run; [\"*\"] admits everyone explicitly",
            ));
        }
    }
    out
}

/// The v0.6 checker over the compiled configuration, its findings mapped
/// back to the document (deduplicated: every `on` entry compiles the same
/// step).
fn v06_checks(file: &str, doc: &TriggerDocument, root: &Node) -> Vec<Diagnostic> {
    let config = doc.compile();
    let sites: Vec<TriggerSite<'_>> = (0..config.triggers.len())
        .map(|i| TriggerSite {
            file,
            root,
            base: Path::root().key(TRIGGER_BASE).index(i),
        })
        .collect();
    let res = ResourceSite {
        file,
        root,
        env_paths: vec![Path::root().key(ENV_BASE)],
    };
    let mut checker = Checker::new(&config, &[], file);
    checker.run(&res, &sites);
    let mut out: Vec<Diagnostic> = Vec::new();
    for mut d in checker.diags {
        let path = authored_path(doc, &d.path);
        let pos = root.pos_of(&path);
        d.line = pos.line;
        d.column = pos.column;
        d.path = path;
        if d.code == "execution_outside_new_branch" {
            d.message.push_str(" or a step title");
        }
        if !out
            .iter()
            .any(|o| o.code == d.code && o.path == d.path && o.message == d.message)
        {
            out.push(d);
        }
    }
    out
}

/// Maps a path of the compiled bundle shape to the authored document.
fn authored_path(doc: &TriggerDocument, p: &Path) -> Path {
    let segs = &p.0;
    let key = |s: &str| PathSegment::Key(s.to_owned());
    let mut out: Vec<PathSegment> = Vec::new();
    match segs.as_slice() {
        [PathSegment::Key(k), rest @ ..] if k == ENV_BASE => {
            out.extend([key("run"), key("target")]);
            out.extend(rest.iter().cloned());
        }
        [PathSegment::Key(k), PathSegment::Index(i), rest @ ..] if k == TRIGGER_BASE => {
            let event = doc.on.get(*i).map_or("", |e| e.event.as_str());
            let on = [key("on"), key(event)];
            match rest {
                [
                    PathSegment::Key(s),
                    PathSegment::Index(0),
                    PathSegment::Key(f),
                    tail @ ..,
                ] if s == "steps" => {
                    out.extend([key("run"), key(f)]);
                    if f != "prompt" {
                        out.extend(tail.iter().cloned());
                    }
                }
                [PathSegment::Key(f), PathSegment::Key(c), ..]
                    if f == "filters" && c == "connection" =>
                {
                    out.extend(on);
                    out.push(key("connection"));
                }
                [PathSegment::Key(f), tail @ ..] if f == "filters" => {
                    out.extend(on);
                    out.push(key("filters"));
                    out.extend(tail.iter().cloned());
                }
                [PathSegment::Key(f), tail @ ..]
                    if f == "inputs" || f == "max_runtime" || f == "name" =>
                {
                    out.push(key(f));
                    out.extend(tail.iter().cloned());
                }
                _ => out.extend(on),
            }
        }
        _ => out.extend(segs.iter().cloned()),
    }
    Path(out)
}

/// §6.3: a title is presentation and reads only `paseo.execution.id`.
fn title_paths(file: &str, root: &Node, title: &Template) -> Vec<Diagnostic> {
    let p = Path::root().key("run").key("title");
    let mut out = Vec::new();
    for (e, _) in title.expressions() {
        for (segs, _) in e.paths() {
            let strs: Vec<&str> = segs.iter().map(String::as_str).collect();
            let msg = match strs.as_slice() {
                ["paseo", "execution", "id"] => continue,
                ["paseo", ns, ..] => format!(
                    "step run title uses paseo.{ns}; a title is presentation and supports only paseo.execution.id"
                ),
                [ns, ..] => {
                    format!("step run title uses {ns}; a title supports only paseo.execution.id")
                }
                [] => continue,
            };
            out.push(at(file, root, "title_path", msg, &p));
        }
    }
    out
}

/// The continuation key's paths. The Hub's allowed set is not confirmed
/// (`hub-triggers.md` §2.3); palisade allows what identifies a
/// conversation without reading the request text: declared inputs,
/// `paseo.context.*` and `paseo.execution.id`.
fn key_paths(file: &str, doc: &TriggerDocument, root: &Node, key: &Template) -> Vec<Diagnostic> {
    let p = Path::root().key("run").key("continuation").key("key");
    let mut out = Vec::new();
    for (e, _) in key.expressions() {
        for (segs, _) in e.paths() {
            let strs: Vec<&str> = segs.iter().map(String::as_str).collect();
            let msg = match strs.as_slice() {
                ["paseo", "execution", "id"] | ["paseo", "context", ..] => continue,
                ["paseo", "inputs", name] if doc.inputs.iter().any(|i| i.name == *name) => continue,
                ["paseo", "inputs", name] => format!(
                    "paseo.inputs.{name} reads input {name:?}, which trigger {} does not declare",
                    doc.name
                ),
                _ => format!(
                    "continuation key uses {}; a key supports only paseo.inputs.<declared>, paseo.context.* and paseo.execution.id",
                    segs.join(".")
                ),
            };
            out.push(at(file, root, "unsupported_path", msg, &p));
        }
    }
    out
}

/// §2.4, checked as at a new save: an absolute `cwd` and an explicit
/// `mode` on every agent.
pub(crate) fn authoring_contract(
    file: &str,
    doc: &TriggerDocument,
    root: &Node,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    if !doc.run.target.cwd.starts_with('/') {
        let p = Path::root().key("run").key("target").key("cwd");
        out.push(
            at(file, root, "relative_cwd", "must be an absolute path", &p).with_help(
                "the Hub refuses to save a trigger whose run.target.cwd does not start with /",
            ),
        );
    }
    let agent = Path::root().key("run").key("agent");
    let missing = |p: Path| {
        at(file, root, "missing_mode", "is required for new triggers", &p).with_help(
            "set the provider's execution mode explicitly (e.g. mode: default); the Hub refuses new triggers without one",
        )
    };
    match &doc.run.agent {
        RunAgent::Inline(a) if a.mode.is_none() => out.push(missing(agent.key("mode"))),
        RunAgent::Inline(_) => {}
        RunAgent::Select { choices, .. } => {
            for (name, a) in choices {
                if a.mode.is_none() {
                    out.push(missing(agent.key("choices").key(name.clone()).key("mode")));
                }
            }
        }
    }
    out
}
