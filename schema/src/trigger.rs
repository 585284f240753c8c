//! Paseo Hub 0.9's organization-level trigger documents
//! (`.paseo/triggers/*.yml`, `hub-triggers.md`): one agent run per
//! document, started by any of its `on` events.
//!
//! [`parse_trigger`] reads one document strictly (every key, type, default
//! and enum of the Hub's `schema.ts`, with the Hub's messages), then runs the
//! Hub's compile-stage checks and palisade's security lints.
//! [`parse_trigger_dir`] applies the discovery rules of the Hub CLI to the
//! direct children of `.paseo/triggers/`. [`TriggerDocument::compile`]
//! turns a document into the v0.6 model the Hub compiles it to (one
//! internal trigger per `on` entry, each with one step `run`), so that
//! `palisade-policy` grants, explains and runs both layouts with one code
//! path; what a document adds beyond v0.6 (continuation, the automatic
//! reply) stays on [`TriggerDocument`].
//!
//! Like the rest of this crate, parsing is pure: no IO, no clock.

mod checks;
mod discover;
mod events;
mod json_schema;
mod lints;
mod recurrence;
#[cfg(test)]
mod roundtrip;
mod walk;

use serde_json::Value;

use crate::diagnostic::{Diagnostics, Parsed};
use crate::expr::Template;
use crate::hub::Walker;
use crate::model::{
    Agent, AgentRef, AllowOutput, Duration, Environment, EnvironmentKind, EnvironmentRef, Filters,
    GithubAuthority, HubConfig, InputDecl, NamedAgent, PromptBlock, Step, Trigger, Worktree,
};

pub use discover::{TRIGGER_DIR, is_trigger_path};
pub use events::event_release;
pub use json_schema::json_schema;
pub use walk::needs_label;

/// The Hub release a document is checked against. Events and keys that a
/// release does not know are refused with the release named (never a
/// silent accept): `schedule.*` is after 0.9.0 (on main), `forgejo.*` is
/// unreleased.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Release {
    /// Paseo Hub 0.9.0 (2026-09-04), the default.
    #[default]
    V0_9_0,
    /// Main after 0.9.0: adds `schedule.tick`.
    Main,
    /// Unreleased pull requests: adds Forgejo events and filters.
    Unreleased,
}

/// How to read a trigger document.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct TriggerOptions {
    /// The Hub release to check against.
    pub release: Release,
    /// Skip palisade's security lints (`trigger::lints`): only the Hub's
    /// own schema, compile and authoring-contract verdicts are reported.
    pub skip_lints: bool,
}

impl TriggerOptions {
    /// Options for `release`, with the lints.
    pub fn for_release(release: Release) -> Self {
        Self {
            release,
            skip_lints: false,
        }
    }
}

/// A parsed trigger document.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TriggerDocument {
    /// `name`: the organization-wide identity (`^[a-z][a-z0-9_-]*$`).
    pub name: String,
    /// `enabled` (default `true`): a disabled document has no routes.
    pub enabled: bool,
    /// `on`, in YAML order (at least one).
    pub on: Vec<EventEntry>,
    /// `inputs`, in authored order.
    pub inputs: Vec<InputDecl>,
    /// The top-level `max_runtime` (whole run), if authored.
    pub max_runtime: Option<Duration>,
    /// `run`.
    pub run: Run,
}

/// One entry of `on`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct EventEntry {
    /// The event name, e.g. `slack.mention`.
    pub event: String,
    /// `connection`, if authored.
    pub connection: Option<String>,
    /// `filters`, if authored.
    pub filters: Option<Filters>,
    /// `recurrence` (`schedule.tick` only).
    pub recurrence: Option<Recurrence>,
}

impl EventEntry {
    /// The provider part of the event name (text before the first `.`).
    pub fn source(&self) -> &str {
        self.event.split('.').next().unwrap_or("")
    }
}

/// A schedule's `recurrence`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recurrence {
    /// An IANA time zone name.
    pub timezone: String,
    /// Local start, `YYYY-MM-DDTHH:MM:SS`.
    pub start: String,
    /// One RRULE value without the `RRULE:` prefix.
    pub rule: String,
}

/// `run`: the one agent run of a document.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Run {
    /// `run.target`: a daemon and a working directory.
    pub target: Target,
    /// `run.agent`.
    pub agent: RunAgent,
    /// `run.continuation` (default `conversation`).
    pub continuation: Continuation,
    /// `run.title`.
    pub title: Option<Template>,
    /// `run.prompt`: one text block.
    pub prompt: Template,
    /// `run.max_runtime` (default `2h`).
    pub max_runtime: Duration,
    /// `run.idle_timeout` (default `10m`).
    pub idle_timeout: Duration,
    /// `run.startup_timeout`.
    pub startup_timeout: Option<Duration>,
    /// `run.env`.
    pub env: Vec<(String, Template)>,
    /// `run.github`.
    pub github: Option<GithubAuthority>,
    /// `run.output.schema`.
    pub output_schema: Option<Value>,
    /// `run.outputs`, in map order, as authored.
    pub outputs: Vec<OutputGrant>,
    /// `run.auto_archive` (default `true`, unlike v0.6 steps).
    pub auto_archive: bool,
}

/// `run.target`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Target {
    /// The daemon slug.
    pub daemon: String,
    /// The working directory.
    pub cwd: String,
    /// An optional worktree, as in v0.6.
    pub worktree: Option<Worktree>,
}

/// `run.agent`: inline, or a finite choice.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RunAgent {
    /// `{provider, model?, mode?, thinkingOptionId?, options?}`.
    Inline(Agent),
    /// `{select, choices}`.
    Select {
        /// The selecting expression.
        select: Template,
        /// The choices, in authored order.
        choices: Vec<(String, Agent)>,
    },
}

/// `run.continuation`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Continuation {
    /// `{mode: conversation}` (the default): one conversation per thread.
    Conversation,
    /// `{mode: key, key}`: one conversation per rendered key.
    Key(Template),
    /// `{mode: new}`: a new conversation every run (migrated documents).
    New,
}

/// One authored `run.outputs` grant.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutputGrant {
    /// The capability type, e.g. `slack.reply`.
    pub kind: String,
    /// `max` as authored (the compiled default is 1).
    pub max: Option<u32>,
    /// `required` as authored (the compiled default is `false`).
    pub required: Option<bool>,
}

/// The name of the internal trigger the Hub compiles `on` entry `index`
/// (0-based) to: the document's name, then `<name>-event-<index + 1>`.
pub fn internal_trigger_name(name: &str, index: usize) -> String {
    if index == 0 {
        name.to_owned()
    } else {
        format!("{name}-event-{}", index.saturating_add(1))
    }
}

impl TriggerDocument {
    /// The v0.6 configuration the Hub compiles this document to
    /// (`hub-triggers.md` §2.2): environment `target`, and per `on` entry
    /// one trigger ([`internal_trigger_name`]) with one step `run`, whose
    /// `allow_outputs` are the authored grants with `max ?? 1` and
    /// `required ?? false`. The automatic event-native reply is not added
    /// here: it depends on the event and is `palisade-policy`'s to derive.
    ///
    /// Each trigger's `max_runtime` is `doc.max_runtime ?? run.max_runtime`,
    /// its filters are the authored ones with the entry's `connection`, and
    /// `manual.run` without `filters.from_users` gets `from_users: ["*"]`
    /// (any `runs:dispatch` credential, any actor). A `select`/`choices`
    /// agent becomes an expression over named agents, one per choice.
    pub fn compile(&self) -> HubConfig {
        let run = &self.run;
        let environment = Environment {
            name: "target".to_owned(),
            kind: EnvironmentKind::Daemon {
                daemon: run.target.daemon.clone(),
                cwd: run.target.cwd.clone(),
                worktree: run.target.worktree.clone(),
            },
        };
        let (agent, agents) = match &run.agent {
            RunAgent::Inline(a) => (AgentRef::Inline(a.clone()), Vec::new()),
            RunAgent::Select { select, choices } => (
                AgentRef::Expression(select.clone()),
                choices
                    .iter()
                    .map(|(name, agent)| NamedAgent {
                        name: name.clone(),
                        agent: agent.clone(),
                    })
                    .collect(),
            ),
        };
        let allow_outputs: Vec<AllowOutput> = run
            .outputs
            .iter()
            .map(|o| AllowOutput {
                kind: o.kind.clone(),
                max: Some(o.max.unwrap_or(1)),
                required: o.required.unwrap_or(false),
            })
            .collect();
        let step = Step {
            id: "run".to_owned(),
            environment: EnvironmentRef::Named("target".to_owned()),
            max_runtime: run.max_runtime.clone(),
            idle_timeout: run.idle_timeout.clone(),
            agent,
            prompt: vec![PromptBlock::Text(run.prompt.clone())],
            condition: None,
            output_schema: run.output_schema.clone(),
            allow_outputs,
            env: run.env.clone(),
            github: run.github.clone(),
            auto_archive: run.auto_archive,
        };
        let triggers = self
            .on
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let mut filters = e.filters.clone();
                if let Some(c) = &e.connection {
                    filters.get_or_insert_with(Filters::default).connection = Some(c.clone());
                }
                if e.event == "manual.run" {
                    let f = filters.get_or_insert_with(Filters::default);
                    if f.from_users.is_none() {
                        f.from_users = Some(vec!["*".to_owned()]);
                    }
                }
                Trigger {
                    name: internal_trigger_name(&self.name, i),
                    file: None,
                    on: e.event.clone(),
                    max_runtime: self
                        .max_runtime
                        .clone()
                        .unwrap_or_else(|| run.max_runtime.clone()),
                    filters,
                    inputs: self.inputs.clone(),
                    values: Vec::new(),
                    steps: vec![step.clone()],
                }
            })
            .collect();
        HubConfig {
            name: None,
            environments: vec![environment],
            agents,
            triggers,
            partials: Vec::new(),
        }
    }
}

impl TriggerDocument {
    /// The authored form as JSON (which is YAML), keys in the order the
    /// Hub's serializer writes them; every default is written out.
    /// [`parse_trigger`] reads it back to an equal document.
    pub fn to_json(&self) -> Value {
        use serde_json::{Map, json};
        let config = self.compile();
        let step = config
            .triggers
            .first()
            .and_then(|t| t.steps.first())
            .map(Step::to_json)
            .unwrap_or_default();
        let trigger = config
            .triggers
            .first()
            .map(Trigger::to_json)
            .unwrap_or_default();
        let mut m = Map::new();
        m.insert("name".into(), json!(self.name));
        m.insert("enabled".into(), json!(self.enabled));
        let mut on = Map::new();
        for e in &self.on {
            let mut em = Map::new();
            if let Some(c) = &e.connection {
                em.insert("connection".into(), json!(c));
            }
            if let Some(f) = &e.filters {
                em.insert("filters".into(), f.to_json());
            }
            if let Some(r) = &e.recurrence {
                em.insert(
                    "recurrence".into(),
                    json!({"timezone": r.timezone, "start": r.start, "rule": r.rule}),
                );
            }
            on.insert(e.event.clone(), Value::Object(em));
        }
        m.insert("on".into(), Value::Object(on));
        if let Some(i) = trigger.get("inputs") {
            m.insert("inputs".into(), i.clone());
        }
        if let Some(d) = &self.max_runtime {
            m.insert("max_runtime".into(), json!(d.text));
        }
        let run = &self.run;
        let mut r = Map::new();
        let mut target = config
            .environments
            .first()
            .map(Environment::body_json)
            .unwrap_or_default();
        target.remove("kind");
        r.insert("target".into(), Value::Object(target));
        let agent = match &run.agent {
            RunAgent::Inline(a) => a.to_json(),
            RunAgent::Select { select, choices } => json!({
                "select": select.source,
                "choices": choices.iter().map(|(k, a)| (k.clone(), a.to_json())).collect::<Map<_, _>>(),
            }),
        };
        r.insert("agent".into(), agent);
        r.insert(
            "continuation".into(),
            match &run.continuation {
                Continuation::Conversation => json!({"mode": "conversation"}),
                Continuation::Key(k) => json!({"mode": "key", "key": k.source}),
                Continuation::New => json!({"mode": "new"}),
            },
        );
        if let Some(t) = &run.title {
            r.insert("title".into(), json!(t.source));
        }
        r.insert("prompt".into(), json!(run.prompt.source));
        r.insert("max_runtime".into(), json!(run.max_runtime.text));
        r.insert("idle_timeout".into(), json!(run.idle_timeout.text));
        if let Some(d) = &run.startup_timeout {
            r.insert("startup_timeout".into(), json!(d.text));
        }
        for k in ["env", "github", "output"] {
            if let Some(v) = step.get(k) {
                r.insert(k.into(), v.clone());
            }
        }
        if !run.outputs.is_empty() {
            let outputs: Map<String, Value> = run
                .outputs
                .iter()
                .map(|o| {
                    let mut g = Map::new();
                    if let Some(max) = o.max {
                        g.insert("max".into(), json!(max));
                    }
                    if let Some(req) = o.required {
                        g.insert("required".into(), json!(req));
                    }
                    (o.kind.clone(), Value::Object(g))
                })
                .collect();
            r.insert("outputs".into(), Value::Object(outputs));
        }
        r.insert("auto_archive".into(), json!(run.auto_archive));
        m.insert("run".into(), Value::Object(r));
        Value::Object(m)
    }
}

/// Parses one trigger document. `file` names it in diagnostics.
///
/// Returns the document with its warnings (lints) when there is no error,
/// else every finding, errors first, located at file:line:col with the
/// authored path and the Hub's message.
pub fn parse_trigger(file: &str, text: &str) -> Result<Parsed<TriggerDocument>, Diagnostics> {
    parse_trigger_with(file, text, &TriggerOptions::default())
}

/// [`parse_trigger`] against a chosen Hub [`Release`].
pub fn parse_trigger_with(
    file: &str,
    text: &str,
    options: &TriggerOptions,
) -> Result<Parsed<TriggerDocument>, Diagnostics> {
    let (doc, diags) = trigger_findings(file, text, options);
    crate::diagnostic::outcome(file, doc, diags)
}

/// Every finding of one document, and the document when it has no error.
fn trigger_findings(
    file: &str,
    text: &str,
    options: &TriggerOptions,
) -> (Option<TriggerDocument>, Vec<crate::Diagnostic>) {
    let (node, mut diags) = crate::yaml::load(file, text);
    let Some(root) = node else {
        return (None, diags);
    };
    if !options.skip_lints {
        diags.extend(lints::legacy_lane(file, &root));
    }
    let doc = {
        let mut w = Walker {
            file: file.to_owned(),
            diags: &mut diags,
        };
        if let crate::yaml::Value::Map(_) = root.value {
            walk::DocWalker {
                w: &mut w,
                text,
                options,
            }
            .document(&root)
        } else {
            let base = crate::Path::root();
            w.type_error("object", &crate::lazy_path::Lp::Base(&base), &root);
            None
        }
    };
    let schema_ok = !diags.iter().any(crate::Diagnostic::is_error);
    if let Some(d) = &doc
        && schema_ok
    {
        diags.extend(checks::compile_checks(file, d, &root, options));
        diags.extend(checks::authoring_contract(file, d, &root));
        if !options.skip_lints && !diags.iter().any(crate::Diagnostic::is_error) {
            diags.extend(lints::lint(file, d, &root, options));
        }
    }
    diags.sort_by_key(|d| (d.line, d.column));
    let ok = !diags.iter().any(crate::Diagnostic::is_error);
    (doc.filter(|_| ok), diags)
}

/// Parses the direct children of `.paseo/triggers/` as the Hub CLI reads
/// them (`hub-triggers.md` §1): `files` are `(path, bytes)` with paths
/// relative to the repository root; each must be a direct-child `*.yml`
/// regular file, read in `localeCompare` order. Returns every document,
/// or every finding across all files.
pub fn parse_trigger_dir(
    files: &[(&str, &[u8])],
    options: &TriggerOptions,
) -> Result<Parsed<Vec<TriggerDocument>>, Diagnostics> {
    discover::parse_dir(files, options)
}

/// Entry points for the fuzz targets under `fuzz/`; not part of the public
/// API, no semver guarantee (feature `testing`).
#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod __fuzz {
    use super::{Release, TriggerOptions, parse_trigger_dir, parse_trigger_with};

    /// Feeds arbitrary bytes to the trigger parsers: the first byte picks
    /// the release and the entry point, the rest is the input. Must never
    /// panic, hang or allocate without bound.
    pub fn parse(data: &[u8]) {
        let Some((&mode, rest)) = data.split_first() else {
            return;
        };
        let release = match mode % 3 {
            0 => Release::V0_9_0,
            1 => Release::Main,
            _ => Release::Unreleased,
        };
        let mut options = TriggerOptions::for_release(release);
        options.skip_lints = mode & 0x80 != 0;
        if (mode / 3) % 2 == 0 {
            if let Ok(text) = std::str::from_utf8(rest)
                && let Ok(parsed) = parse_trigger_with("fuzz.yml", text, &options)
            {
                let doc = parsed.into_value();
                let _ = doc.compile();
                let _ = doc.to_json();
            }
        } else {
            // NUL-separated (path, contents) pairs.
            let parts: Vec<&[u8]> = rest.split(|b| *b == 0).collect();
            let files: Vec<(String, &[u8])> = parts
                .chunks(2)
                .map(|pair| {
                    let path = pair
                        .first()
                        .map_or_else(String::new, |p| String::from_utf8_lossy(p).into_owned());
                    (path, pair.get(1).copied().unwrap_or(&[]))
                })
                .collect();
            let refs: Vec<(&str, &[u8])> = files.iter().map(|(p, b)| (p.as_str(), *b)).collect();
            let _ = parse_trigger_dir(&refs, &options);
        }
    }
}
