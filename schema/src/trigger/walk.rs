//! The strict walk of one trigger document (`hub-triggers.md` §2.1, §3.1,
//! §3.6, §6.2): every key, type, default and enum of the Hub's
//! `schema.ts`, with its messages and paths. The walk reuses the v0.6
//! [`Walker`] for everything the two layouts share (durations, worktree,
//! agent, inputs, GitHub authority, env, output schema, expressions).

use crate::diagnostic::{Diagnostic, Path};
use crate::hub::{Walker, is_event_name, is_identifier, is_slug};
use crate::lazy_path::Lp;
use crate::model::{Agent, Duration, Filters, MAX_DURATION_MS};
use crate::yaml::{Node, Value as Y};

use super::events::event_release;
use super::recurrence;
use super::{
    Continuation, EventEntry, OutputGrant, Recurrence, Release, Run, RunAgent, Target,
    TriggerDocument, TriggerOptions,
};

/// `IDENTIFIER` as the Hub prints it.
const IDENTIFIER_PATTERN: &str = "/^[a-z][a-z0-9_-]*$/u";
/// The connection slug pattern as the Hub prints it.
const SLUG_PATTERN: &str = "/^[a-z0-9]+(?:-[a-z0-9]+)*$/u";

/// Top-level keys of a document.
const ROOT_KEYS: &[&str] = &["name", "enabled", "on", "inputs", "max_runtime", "run"];
/// Keys of an `on` entry.
const EVENT_KEYS: &[&str] = &["connection", "filters", "recurrence"];
/// Filter keys of Paseo Hub 0.9.0 and main (`schema.ts`).
const FILTER_KEYS: &[&str] = &[
    "pattern",
    "contains",
    "label",
    "labels",
    "repo",
    "guild",
    "workspace",
    "project",
    "states",
    "exclude_labels",
    "assignees",
    "channels",
    "from_users",
    "inputs",
];
/// Filter keys only the unreleased Forgejo and Linear pull requests add.
const UNRELEASED_FILTER_KEYS: &[&str] = &[
    "reviewers",
    "branches",
    "team",
    "replies_only",
    "thread_with_app",
];
/// Filter keys the Forgejo pull request allows on `forgejo.*` events.
const FORGEJO_FILTER_KEYS: &[&str] = &[
    "from_users",
    "inputs",
    "pattern",
    "contains",
    "label",
    "labels",
    "repo",
    "assignees",
    "reviewers",
    "branches",
];
/// Keys of `run`.
const RUN_KEYS: &[&str] = &[
    "target",
    "agent",
    "continuation",
    "title",
    "prompt",
    "max_runtime",
    "idle_timeout",
    "startup_timeout",
    "env",
    "github",
    "output",
    "outputs",
    "auto_archive",
];

/// Events whose `filters.label` is required (blank counts as missing).
pub fn needs_label(event: &str) -> bool {
    matches!(
        event,
        "github.issue_label_added"
            | "github.pull_request_label_added"
            | "forgejo.issue_label_added"
            | "forgejo.pull_request_label_added"
    )
}

impl Release {
    /// How the release is named in messages and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V0_9_0 => "0.9.0",
            Self::Main => "main",
            Self::Unreleased => "unreleased",
        }
    }

    /// Parses `0.9.0`, `main` or `unreleased`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "0.9.0" | "0.9" => Some(Self::V0_9_0),
            "main" => Some(Self::Main),
            "unreleased" => Some(Self::Unreleased),
            _ => None,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::V0_9_0 => "Paseo Hub 0.9.0",
            Self::Main => "Paseo Hub main after 0.9.0",
            Self::Unreleased => "unreleased Paseo Hub pull requests",
        }
    }
}

/// The document walker: the v0.6 walker plus the source text (to tell an
/// unquoted scalar from a quoted one) and the options.
pub(crate) struct DocWalker<'w, 'd> {
    pub(crate) w: &'w mut Walker<'d>,
    pub(crate) text: &'w str,
    pub(crate) options: &'w TriggerOptions,
}

impl DocWalker<'_, '_> {
    fn err(&mut self, code: &'static str, msg: impl Into<String>, path: &Lp<'_>, node: &Node) {
        self.w.error(code, msg, path, node);
    }

    fn err_help(
        &mut self,
        code: &'static str,
        msg: impl Into<String>,
        help: impl Into<String>,
        path: &Lp<'_>,
        line: u32,
        column: u32,
    ) {
        self.w.diags.push(
            Diagnostic::error(code, msg)
                .in_file(self.w.file.clone())
                .at(line, column)
                .with_path(path.to_path())
                .with_help(help),
        );
    }

    /// A required key, reported as zod does: `Invalid input: expected
    /// <what>, received undefined` at the key's path.
    fn required<'n>(
        &mut self,
        obj: &'n Node<'n>,
        key: &str,
        what: &str,
        path: &Lp<'_>,
    ) -> Option<&'n Node<'n>> {
        self.w.required_as(obj, key, path, || {
            format!("Invalid input: expected {what}, received undefined")
        })
    }

    fn pattern_string(
        &mut self,
        node: &Node,
        path: &Lp<'_>,
        ok: fn(&str) -> bool,
        pattern: &str,
    ) -> Option<String> {
        let s = self.w.string(node, path)?;
        if ok(&s) {
            Some(s)
        } else {
            self.err(
                "invalid_value",
                format!("Invalid string: must match pattern {pattern}"),
                path,
                node,
            );
            None
        }
    }

    /// The whole document.
    pub(crate) fn document(&mut self, root: &Node) -> Option<TriggerDocument> {
        let base = Path::root();
        let path = Lp::Base(&base);
        self.w.object(root, &path, ROOT_KEYS, &|_| None)?;
        let name = self.required(root, "name", "string", &path).and_then(|n| {
            self.pattern_string(n, &path.key("name"), is_identifier, IDENTIFIER_PATTERN)
        });
        let enabled = root
            .get("enabled")
            .map_or(Some(true), |n| self.w.bool(n, &path.key("enabled")));
        let tname = name.clone().unwrap_or_else(|| "?".to_owned());
        let on = self
            .required(root, "on", "record", &path)
            .and_then(|n| self.on(n, &path.key("on")));
        let inputs = match root.get("inputs") {
            Some(n) => self.w.inputs(n, &path.key("inputs"), &tname),
            None => Some(Vec::new()),
        };
        let max_runtime = match root.get("max_runtime") {
            None => Some(None),
            Some(n) => self
                .w
                .duration(
                    n,
                    &path.key("max_runtime"),
                    &format!("trigger {tname} max_runtime"),
                    MAX_DURATION_MS,
                    "24h",
                )
                .map(Some),
        };
        let run = self
            .required(root, "run", "object", &path)
            .and_then(|n| self.run(n, &path.key("run"), &tname));
        if let (Some(on), Some(n)) = (&on, root.get("on")) {
            self.schedule_rules(on, root, n, inputs.as_ref());
        }
        Some(TriggerDocument {
            name: name?,
            enabled: enabled?,
            on: on?,
            inputs: inputs?,
            max_runtime: max_runtime?,
            run: run?,
        })
    }

    /// `on`: a non-empty record of event entries.
    fn on(&mut self, node: &Node, path: &Lp<'_>) -> Option<Vec<EventEntry>> {
        let Y::Map(entries) = &node.value else {
            self.w.type_error("record", path, node);
            return None;
        };
        if entries.is_empty() {
            self.err("no_events", "at least one event is required", path, node);
            return None;
        }
        let mut out = Vec::new();
        let mut ok = true;
        for (k, v) in entries {
            let p = path.key(&k.text);
            if !is_event_name(&k.text) {
                self.w
                    .error_at_key("invalid_key", "Invalid key in record", &p, k);
                ok = false;
                continue;
            }
            let needed = event_release(&k.text);
            if needed > self.options.release {
                self.err_help(
                    "unreleased_event",
                    format!(
                        "event {} is not in {}; only {} have it",
                        k.text,
                        self.options.release.describe(),
                        needed.describe()
                    ),
                    format!(
                        "check against that release with --hub-release {}, or use an event {} emits",
                        needed.as_str(),
                        self.options.release.describe()
                    ),
                    &p,
                    k.pos.line,
                    k.pos.column,
                );
                ok = false;
                continue;
            }
            match self.event(&k.text, v, &p) {
                Some(e) => out.push(e),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn event(&mut self, event: &str, node: &Node, path: &Lp<'_>) -> Option<EventEntry> {
        self.w.object(node, path, EVENT_KEYS, &|_| None)?;
        let before = self.w.diags.len();
        let connection = node
            .get("connection")
            .and_then(|n| self.pattern_string(n, &path.key("connection"), is_slug, SLUG_PATTERN));
        let filters = node
            .get("filters")
            .and_then(|n| self.filters(event, n, &path.key("filters")));
        if needs_label(event) {
            let blank = filters
                .as_ref()
                .and_then(|f| f.label.as_deref())
                .is_none_or(|l| l.trim().is_empty());
            let bad_label_type = node
                .get("filters")
                .and_then(|f| f.get("label"))
                .is_some_and(|l| !matches!(l.value, Y::String(_)));
            if blank && !bad_label_type && !self.w.errors_since(before) {
                let fp = path.key("filters");
                let lp = fp.key("label");
                let at = node.get("filters").unwrap_or(node);
                let at = at.get("label").unwrap_or(at);
                self.err("label_required", "Added label is required.", &lp, at);
            }
        }
        let recurrence = match node.get("recurrence") {
            None => None,
            Some(n) if event != "schedule.tick" => {
                self.err(
                    "recurrence_not_schedule",
                    "Recurrence is only supported for schedule.tick.",
                    &path.key("recurrence"),
                    n,
                );
                None
            }
            Some(n) => self.recurrence(n, &path.key("recurrence")),
        };
        if self.w.errors_since(before) {
            return None;
        }
        Some(EventEntry {
            event: event.to_owned(),
            connection,
            filters,
            recurrence,
        })
    }

    /// The document-level schedule rules (§3.6), reported at
    /// `["on","schedule.tick"]`.
    fn schedule_rules(
        &mut self,
        on: &[EventEntry],
        root: &Node,
        on_node: &Node,
        inputs: Option<&Vec<crate::model::InputDecl>>,
    ) {
        let Some(entry) = on.iter().find(|e| e.event == "schedule.tick") else {
            return;
        };
        let base = Path::root().key("on");
        let lp_base = Lp::Base(&base);
        let p = lp_base.key("schedule.tick");
        let node = on_node.get("schedule.tick").unwrap_or(on_node);
        if entry.recurrence.is_none() || entry.connection.is_some() || entry.filters.is_some() {
            self.err(
                "schedule_shape",
                "Schedule requires recurrence and does not accept connection or filters.",
                &p,
                node,
            );
        }
        let has_inputs = root.get("inputs").is_some() || inputs.is_some_and(|i| !i.is_empty());
        if on.len() > 1 || has_inputs {
            self.err(
                "schedule_not_alone",
                "A schedule must be the only event and cannot require invocation inputs.",
                &p,
                node,
            );
        }
    }

    fn recurrence(&mut self, node: &Node, path: &Lp<'_>) -> Option<Recurrence> {
        self.w
            .object(node, path, &["timezone", "start", "rule"], &|_| None)?;
        let before = self.w.diags.len();
        let timezone = self
            .required(node, "timezone", "string", path)
            .and_then(|n| {
                let p = path.key("timezone");
                let s = self.w.any_string(n, &p)?;
                if recurrence::is_timezone(&s) {
                    Some(s)
                } else {
                    self.err("invalid_timezone", "Choose a valid IANA timezone.", &p, n);
                    None
                }
            });
        let start = self.required(node, "start", "string", path).and_then(|n| {
            let p = path.key("start");
            if let Y::String(s) = &n.value
                && recurrence::is_js_yaml_timestamp(s)
                && self.is_plain_scalar(n)
            {
                self.err_help(
                    "unquoted_timestamp",
                    "Invalid input: expected string, received Date",
                    "quote the start time: the Hub's YAML reader (js-yaml) turns an unquoted date-time into a Date",
                    &p,
                    n.pos.line,
                    n.pos.column,
                );
                return None;
            }
            let s = self.w.any_string(n, &p)?;
            if recurrence::is_local_start(&s) {
                Some(s)
            } else {
                self.err("invalid_start", "Choose a local start date and time.", &p, n);
                None
            }
        });
        let rule = self.required(node, "rule", "string", path).and_then(|n| {
            let p = path.key("rule");
            let s = self.w.any_string(n, &p)?;
            match recurrence::check_rule(&s) {
                Ok(()) => Some(s),
                Err(msg) => {
                    self.err("invalid_rule", msg, &p, n);
                    None
                }
            }
        });
        if self.w.errors_since(before) {
            return None;
        }
        Some(Recurrence {
            timezone: timezone?,
            start: start?,
            rule: rule?,
        })
    }

    /// Whether the scalar `node` was written plain (not quoted, not a block
    /// scalar), read from the source text at the node's position.
    fn is_plain_scalar(&self, node: &Node) -> bool {
        let line = usize::try_from(node.pos.line).unwrap_or(0);
        let col = usize::try_from(node.pos.column).unwrap_or(0);
        let Some(text) = line.checked_sub(1).and_then(|l| self.text.lines().nth(l)) else {
            return false;
        };
        match col.checked_sub(1).and_then(|c| text.chars().nth(c)) {
            Some(c) => !matches!(c, '"' | '\'' | '|' | '>'),
            None => false,
        }
    }

    /// `on.<e>.filters` (§3.1), with the unreleased keys behind the release
    /// and the Forgejo key table on `forgejo.*` events.
    fn filters(&mut self, event: &str, node: &Node, path: &Lp<'_>) -> Option<Filters> {
        let unreleased = self.options.release >= Release::Unreleased;
        let mut allowed: Vec<&str> = FILTER_KEYS.to_vec();
        if unreleased {
            allowed.extend_from_slice(UNRELEASED_FILTER_KEYS);
        }
        let release = self.options.release;
        self.w.object(node, path, &allowed, &|k| {
            UNRELEASED_FILTER_KEYS.contains(&k).then(|| {
                (
                    "unreleased_key",
                    format!(
                        "filters.{k} is not in {}; only {} have it (check with --hub-release unreleased)",
                        release.describe(),
                        Release::Unreleased.describe()
                    ),
                )
            })
        })?;
        let before = self.w.diags.len();
        let list = |dw: &mut Self, k: &str, non_empty: bool| {
            node.get(k)
                .and_then(|n| dw.w.string_list(n, &path.key(k), non_empty))
        };
        let boolean = |dw: &mut Self, k: &str| node.get(k).and_then(|n| dw.w.bool(n, &path.key(k)));
        let mut f = Filters {
            pattern: node
                .get("pattern")
                .and_then(|n| self.w.any_string(n, &path.key("pattern"))),
            contains: node
                .get("contains")
                .and_then(|n| self.w.any_string(n, &path.key("contains"))),
            label: self.w.opt_string(node, "label", path),
            repo: self.w.opt_string(node, "repo", path),
            guild: self.w.opt_string(node, "guild", path),
            workspace: self.w.opt_string(node, "workspace", path),
            project: self.w.opt_string(node, "project", path),
            team: self.w.opt_string(node, "team", path),
            ..Filters::default()
        };
        f.labels = list(self, "labels", true);
        f.states = list(self, "states", true);
        f.exclude_labels = list(self, "exclude_labels", true);
        f.assignees = list(self, "assignees", true);
        f.reviewers = list(self, "reviewers", true);
        f.branches = list(self, "branches", true);
        f.channels = list(self, "channels", false);
        f.from_users = list(self, "from_users", false);
        f.replies_only = boolean(self, "replies_only");
        f.thread_with_app = boolean(self, "thread_with_app");
        if let Some(n) = node.get("inputs") {
            f.inputs = self.filter_inputs(n, &path.key("inputs"));
        }
        if event.starts_with("forgejo.") {
            self.forgejo_filters(event, node, path);
        }
        (!self.w.errors_since(before)).then_some(f)
    }

    fn filter_inputs(&mut self, n: &Node, p: &Lp<'_>) -> Option<Vec<(String, serde_json::Value)>> {
        let Y::Map(entries) = &n.value else {
            self.w.type_error("record", p, n);
            return None;
        };
        let mut out = Vec::new();
        for (k, v) in entries {
            match &v.value {
                Y::String(_) | Y::Bool(_) => out.push((k.text.to_string(), v.to_json())),
                Y::Number(num) if num.as_f64().is_some_and(f64::is_finite) => {
                    out.push((k.text.to_string(), v.to_json()));
                }
                _ => self
                    .w
                    .type_error("string, number or boolean", &p.key(&k.text), v),
            }
        }
        Some(out)
    }

    /// The Forgejo pull request's filter table (§3.5).
    fn forgejo_filters(&mut self, event: &str, node: &Node, path: &Lp<'_>) {
        let Y::Map(entries) = &node.value else {
            return;
        };
        let name = event.strip_prefix("forgejo.").unwrap_or(event);
        for (k, v) in entries {
            let key = k.text.as_ref();
            let p = path.key(key);
            if !FORGEJO_FILTER_KEYS.contains(&key) {
                self.err(
                    "forgejo_filter",
                    format!("{key} is not a forgejo filter."),
                    &p,
                    v,
                );
                continue;
            }
            let msg = match key {
                "assignees" if !matches!(name, "issue_assigned" | "pull_request_assigned") => {
                    "assignees only matches forgejo.issue_assigned or forgejo.pull_request_assigned."
                }
                "reviewers" if name != "pull_request_review_requested" => {
                    "reviewers only matches forgejo.pull_request_review_requested."
                }
                "branches" if name != "push" => "branches only matches forgejo.push.",
                _ => continue,
            };
            self.err("forgejo_filter", msg, &p, v);
        }
    }

    // ----- run ------------------------------------------------------------

    fn run(&mut self, node: &Node, path: &Lp<'_>, tname: &str) -> Option<Run> {
        self.w.object(node, path, RUN_KEYS, &|_| None)?;
        let before = self.w.diags.len();
        let target = self
            .required(node, "target", "object", path)
            .and_then(|n| self.target(n, &path.key("target")));
        let agent = self
            .required(node, "agent", "object", path)
            .and_then(|n| self.run_agent(n, &path.key("agent")));
        let continuation = match node.get("continuation") {
            None => Some(Continuation::Conversation),
            Some(n) => self.continuation(n, &path.key("continuation")),
        };
        let title = node.get("title").and_then(|n| {
            let p = path.key("title");
            let s = self.w.string(n, &p)?;
            self.w.parse_template(&s, &p, n)
        });
        let prompt = self.required(node, "prompt", "string", path).and_then(|n| {
            let p = path.key("prompt");
            let s = self.w.string(n, &p)?;
            self.w.parse_template(&s, &p, n)
        });
        let dur = |dw: &mut Self, key: &str, default: Option<&str>| -> Option<Option<Duration>> {
            match node.get(key) {
                None => Some(default.and_then(Duration::parse)),
                Some(n) => {
                    dw.w.duration(
                        n,
                        &path.key(key),
                        &format!("trigger {tname} step run {key}"),
                        MAX_DURATION_MS,
                        "24h",
                    )
                    .map(Some)
                }
            }
        };
        let max_runtime = dur(self, "max_runtime", Some("2h")).flatten();
        let idle_timeout = dur(self, "idle_timeout", Some("10m")).flatten();
        let startup_timeout = dur(self, "startup_timeout", None);
        if let (Some(m), Some(i)) = (&max_runtime, &idle_timeout)
            && i.millis > m.millis
        {
            let at = node.get("idle_timeout").or_else(|| node.get("max_runtime"));
            self.err(
                "idle_timeout_exceeds_max_runtime",
                format!(
                    "step run idle_timeout must not exceed max_runtime ({} > {})",
                    i.text, m.text
                ),
                &path.key("idle_timeout"),
                at.unwrap_or(node),
            );
        }
        let env = match node.get("env") {
            None => Some(Vec::new()),
            Some(n) => self.w.env(n, &path.key("env")),
        };
        let github = node
            .get("github")
            .and_then(|n| self.w.github(n, &path.key("github")));
        let output_schema = node
            .get("output")
            .and_then(|n| self.w.output_schema(n, &path.key("output"), "step run"));
        let outputs = match node.get("outputs") {
            None => Some(Vec::new()),
            Some(n) => self.outputs(n, &path.key("outputs")),
        };
        let auto_archive = node
            .get("auto_archive")
            .map_or(Some(true), |n| self.w.bool(n, &path.key("auto_archive")));
        if self.w.errors_since(before) {
            return None;
        }
        Some(Run {
            target: target?,
            agent: agent?,
            continuation: continuation?,
            title,
            prompt: prompt?,
            max_runtime: max_runtime?,
            idle_timeout: idle_timeout?,
            startup_timeout: startup_timeout?,
            env: env?,
            github,
            output_schema,
            outputs: outputs?,
            auto_archive: auto_archive?,
        })
    }

    fn target(&mut self, node: &Node, path: &Lp<'_>) -> Option<Target> {
        self.w
            .object(node, path, &["daemon", "cwd", "worktree"], &|_| None)?;
        let daemon = self
            .required(node, "daemon", "string", path)
            .and_then(|n| self.w.string(n, &path.key("daemon")));
        let cwd = self
            .required(node, "cwd", "string", path)
            .and_then(|n| self.w.string(n, &path.key("cwd")));
        let worktree = match node.get("worktree") {
            None => Some(None),
            Some(n) => self.w.worktree(n, &path.key("worktree")).map(Some),
        };
        Some(Target {
            daemon: daemon?,
            cwd: cwd?,
            worktree: worktree?,
        })
    }

    /// `run.agent`: inline, or `{select, choices}`. A structural failure of
    /// the union is zod's `Invalid input` at the agent, with the detail in
    /// the help.
    fn run_agent(&mut self, node: &Node, path: &Lp<'_>) -> Option<RunAgent> {
        let is_select = node.get("select").is_some() || node.get("choices").is_some();
        if !is_select {
            return self.union_agent(node, path).map(RunAgent::Inline);
        }
        let before = self.w.diags.len();
        if !matches!(node.value, Y::Map(_)) {
            self.w.type_error("object", path, node);
            return None;
        }
        self.w
            .object(node, path, &["select", "choices"], &|_| None)?;
        let select = self.required(node, "select", "string", path).and_then(|n| {
            let p = path.key("select");
            let s = self.w.string(n, &p)?;
            self.w.parse_template(&s, &p, n)
        });
        let choices = self
            .required(node, "choices", "record", path)
            .and_then(|n| {
                let p = path.key("choices");
                let Y::Map(entries) = &n.value else {
                    self.w.type_error("record", &p, n);
                    return None;
                };
                if entries.is_empty() {
                    self.err(
                        "no_agent_choices",
                        "at least one agent choice is required",
                        &p,
                        n,
                    );
                    return None;
                }
                let mut out = Vec::new();
                for (k, v) in entries {
                    let cp = p.key(&k.text);
                    if !is_identifier(&k.text) {
                        self.w
                            .error_at_key("invalid_key", "Invalid key in record", &cp, k);
                        continue;
                    }
                    if let Some(a) = self.union_agent(v, &cp) {
                        out.push((k.text.to_string(), a));
                    }
                }
                Some(out)
            });
        if self.w.errors_since(before) {
            return None;
        }
        Some(RunAgent::Select {
            select: select?,
            choices: choices?,
        })
    }

    /// An agent object; structural findings (unknown keys, missing
    /// `provider`, wrong types) collapse into one `Invalid input`.
    fn union_agent(&mut self, node: &Node, path: &Lp<'_>) -> Option<Agent> {
        let mut inner = Vec::new();
        let agent = {
            let mut w = Walker {
                file: self.w.file.clone(),
                diags: &mut inner,
            };
            w.agent(node, path)
        };
        let structural = |d: &Diagnostic| {
            d.is_error()
                && matches!(
                    d.code,
                    "unknown_key" | "missing_field" | "invalid_type" | "invalid_value"
                )
                && !d.path.to_string().contains("options")
        };
        let (shape, rest): (Vec<_>, Vec<_>) = inner.into_iter().partition(structural);
        if let Some(first) = shape.first() {
            let detail: Vec<String> = shape
                .iter()
                .map(|d| {
                    if d.path.is_root() {
                        d.message.clone()
                    } else {
                        format!("{}: {}", d.path, d.message)
                    }
                })
                .collect();
            let (line, column) = (first.line, first.column);
            let _ = (line, column);
            self.w.diags.push(
                Diagnostic::error("invalid_agent", "Invalid input")
                    .in_file(self.w.file.clone())
                    .at(node.pos.line, node.pos.column)
                    .with_path(path.to_path())
                    .with_help(format!(
                        "an agent is {{provider, model?, mode?, thinkingOptionId?, options?}} or {{select, choices}}; {}",
                        detail.join("; ")
                    )),
            );
        }
        self.w.diags.extend(rest);
        agent
    }

    fn continuation(&mut self, node: &Node, path: &Lp<'_>) -> Option<Continuation> {
        let Y::Map(_) = &node.value else {
            self.w.type_error("object", path, node);
            return None;
        };
        let mp = path.key("mode");
        let mode = node.get("mode");
        let text = mode.and_then(|m| match &m.value {
            Y::String(s) => Some(s.as_ref()),
            _ => None,
        });
        let keys: &[&str] = match text {
            Some("conversation" | "new") => &["mode"],
            Some("key") => &["mode", "key"],
            _ => {
                self.err(
                    "invalid_value",
                    "Invalid discriminator value. Expected 'conversation' | 'key' | 'new'",
                    &mp,
                    mode.unwrap_or(node),
                );
                if let Some(m) = mode {
                    self.w.suggest_value(m, &["conversation", "key", "new"]);
                }
                return None;
            }
        };
        self.w.object(node, path, keys, &|_| None)?;
        match text {
            Some("conversation") => Some(Continuation::Conversation),
            Some("new") => Some(Continuation::New),
            _ => {
                let kn = self.required(node, "key", "string", path)?;
                let kp = path.key("key");
                let s = self.w.string(kn, &kp)?;
                if s.chars().count() > 512 {
                    self.err(
                        "invalid_value",
                        "Too big: expected string to have <=512 characters",
                        &kp,
                        kn,
                    );
                    return None;
                }
                if s.trim().is_empty() {
                    self.err(
                        "blank_continuation_key",
                        "Continuation key must not be blank",
                        &kp,
                        kn,
                    );
                    return None;
                }
                self.w.parse_template(&s, &kp, kn).map(Continuation::Key)
            }
        }
    }

    /// `run.outputs`: a record of event-named grants.
    fn outputs(&mut self, node: &Node, path: &Lp<'_>) -> Option<Vec<OutputGrant>> {
        let Y::Map(entries) = &node.value else {
            self.w.type_error("record", path, node);
            return None;
        };
        let before = self.w.diags.len();
        let mut out = Vec::new();
        for (k, v) in entries {
            let p = path.key(&k.text);
            if !is_event_name(&k.text) {
                self.w
                    .error_at_key("invalid_key", "Invalid key in record", &p, k);
                continue;
            }
            if self
                .w
                .object(v, &p, &["max", "required"], &|_| None)
                .is_none()
            {
                continue;
            }
            let max = v.get("max").and_then(|n| self.output_max(n, &p.key("max")));
            let required = v
                .get("required")
                .and_then(|n| self.w.bool(n, &p.key("required")));
            out.push(OutputGrant {
                kind: k.text.to_string(),
                max,
                required,
            });
        }
        (!self.w.errors_since(before)).then_some(out)
    }

    fn output_max(&mut self, n: &Node, p: &Lp<'_>) -> Option<u32> {
        let Y::Number(num) = &n.value else {
            self.w.type_error("number", p, n);
            return None;
        };
        if let Some(v) = num.as_u64() {
            if v == 0 {
                self.err(
                    "invalid_output_max",
                    "Too small: expected number to be >0",
                    p,
                    n,
                );
                return None;
            }
            return match u32::try_from(v) {
                Ok(v) => Some(v),
                Err(_) => {
                    self.err("invalid_value", "Too big: max must fit in 32 bits", p, n);
                    None
                }
            };
        }
        let f = num.as_f64().unwrap_or(f64::NAN);
        if f.is_finite() && f.fract() == 0.0 && f <= 0.0 {
            self.err(
                "invalid_output_max",
                "Too small: expected number to be >0",
                p,
                n,
            );
        } else {
            self.err(
                "invalid_type",
                "Invalid input: expected int, received number",
                p,
                n,
            );
        }
        None
    }
}
