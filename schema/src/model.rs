//! The typed model of a hub configuration, in either authoring layout.
//!
//! Values here have passed strict parsing: every key was known, every type
//! and enum value checked, durations parsed. `palisade-policy` builds run
//! plans from these types. Provider options and `output.schema` are kept as
//! JSON values: options are checked against the strict provider schemas of
//! [`crate::options`], and the output schema is the user's JSON Schema.

use serde_json::{Map, Value, json};

use crate::expr::Template;

/// A whole hub configuration: environments, named agents and triggers.
///
/// A single-file workflow has no named agents and no partials; a bundle
/// keeps each workflow file's path on its trigger.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct HubConfig {
    /// The project slug (`name` in `.paseo/hub.yml`), if any.
    pub name: Option<String>,
    /// Environments, sorted by name in a bundle, authored order otherwise.
    pub environments: Vec<Environment>,
    /// Named agents of `.paseo/hub.yml`, in authored order.
    pub agents: Vec<NamedAgent>,
    /// Triggers: one per workflow file in a bundle (sorted by path).
    pub triggers: Vec<Trigger>,
    /// Prompt partials of a bundle (`.paseo/workflows/partials/*.md`).
    pub partials: Vec<Partial>,
}

/// A prompt partial file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Partial {
    /// Path relative to the bundle root, e.g. `.paseo/workflows/partials/x.md`.
    pub path: String,
    /// The file's text.
    pub text: String,
}

/// Where steps run.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Environment {
    /// The environment's name (`^[a-z][a-z0-9_-]*$`).
    pub name: String,
    /// Kind-specific settings.
    pub kind: EnvironmentKind,
}

/// The kinds of environment.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum EnvironmentKind {
    /// A Paseo daemon on a host the user controls.
    Daemon {
        /// The daemon slug.
        daemon: String,
        /// The working directory of the agent.
        cwd: String,
        /// An optional git worktree to create per execution.
        worktree: Option<Worktree>,
    },
    /// A Fly machine image.
    Fly {
        /// The image.
        image: String,
        /// Optional working directory.
        cwd: Option<String>,
    },
    /// A Docker image.
    Docker {
        /// The image.
        image: String,
        /// Optional working directory.
        cwd: Option<String>,
    },
}

impl EnvironmentKind {
    /// The kind's name as authored (`daemon`, `fly`, `docker`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Daemon { .. } => "daemon",
            Self::Fly { .. } => "fly",
            Self::Docker { .. } => "docker",
        }
    }
}

/// A daemon environment's worktree mode.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Worktree {
    /// `mode: branch-off`: a new branch off `base`.
    BranchOff {
        /// The new branch name; may use `${{ paseo.execution.id }}`.
        new_branch: Template,
        /// The base ref.
        base: Option<String>,
    },
    /// `mode: checkout-branch`.
    CheckoutBranch {
        /// The branch.
        branch: String,
    },
    /// `mode: checkout-pr`.
    CheckoutPr {
        /// The pull-request number (positive).
        pr_number: u64,
    },
}

/// An agent definition.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Agent {
    /// Provider id, e.g. `codex`, `claude`, `opencode`.
    pub provider: String,
    /// Optional model id.
    pub model: Option<String>,
    /// Optional provider mode.
    pub mode: Option<String>,
    /// Optional thinking option id.
    pub thinking_option_id: Option<String>,
    /// Provider-native options, passed through unchanged; validated against
    /// the provider's strict schema ([`crate::options`]).
    pub options: Option<Value>,
}

/// A named agent of `.paseo/hub.yml`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct NamedAgent {
    /// The map key.
    pub name: String,
    /// The definition.
    pub agent: Agent,
}

/// A trigger: an event name, filters and the steps it runs.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Trigger {
    /// The trigger's name, unique in the configuration.
    pub name: String,
    /// In a bundle, the workflow file that defines it.
    pub file: Option<String>,
    /// The event name, e.g. `slack.mention`.
    pub on: String,
    /// Hard limit for the whole run.
    pub max_runtime: Duration,
    /// Admission filters.
    pub filters: Option<Filters>,
    /// Declared invocation inputs, in authored order.
    pub inputs: Vec<InputDecl>,
    /// Named values (expressions), in authored order.
    pub values: Vec<(String, Template)>,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

impl Trigger {
    /// The provider part of `on` (text before the first `.`).
    pub fn source(&self) -> &str {
        self.on.split('.').next().unwrap_or("")
    }
}

/// Trigger filters: all listed conditions must pass.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Filters {
    /// A prefix marker (Slack/Discord) or `startsWith` (GitHub).
    pub pattern: Option<String>,
    /// A prefix marker (Slack/Discord) or substring (GitHub).
    pub contains: Option<String>,
    /// A changed label (GitHub).
    pub label: Option<String>,
    /// Labels that must all be present (GitHub).
    pub labels: Option<Vec<String>>,
    /// `owner/name` (GitHub).
    pub repo: Option<String>,
    /// Guild id (Discord).
    pub guild: Option<String>,
    /// Workspace / team id (Slack).
    pub workspace: Option<String>,
    /// Channel ids (Slack, Discord).
    pub channels: Option<Vec<String>>,
    /// Authors allowed to start the workflow.
    pub from_users: Option<Vec<String>>,
    /// Required invocation input values.
    pub inputs: Option<Vec<(String, Value)>>,
    /// Connection slug.
    pub connection: Option<String>,
    /// A Linear project (trigger documents, `linear.*`).
    pub project: Option<String>,
    /// Linear workflow states the issue must be in.
    pub states: Option<Vec<String>>,
    /// Labels none of which may be present (Linear).
    pub exclude_labels: Option<Vec<String>>,
    /// Resulting assignees (Linear; Forgejo assignment events).
    pub assignees: Option<Vec<String>>,
    /// Requested reviewers (Forgejo, unreleased).
    pub reviewers: Option<Vec<String>>,
    /// Pushed branches (Forgejo `push`, unreleased).
    pub branches: Option<Vec<String>>,
    /// A Linear team (unreleased Linear filters).
    pub team: Option<String>,
    /// Only replies (unreleased Linear filters).
    pub replies_only: Option<bool>,
    /// Only replies in a thread the app posted in (unreleased Linear filters).
    pub thread_with_app: Option<bool>,
}

/// The type of an invocation input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputType {
    /// `string`.
    String,
    /// `number`.
    Number,
    /// `boolean`.
    Boolean,
}

impl InputType {
    /// The authored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Number => "number",
            Self::Boolean => "boolean",
        }
    }
}

/// A declared invocation input.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct InputDecl {
    /// The input's name.
    pub name: String,
    /// Its type.
    pub kind: InputType,
    /// Whether it must be given.
    pub required: Option<bool>,
    /// Default value.
    pub default: Option<Value>,
    /// The finite set of allowed values, if declared.
    pub choices: Option<Vec<Value>>,
}

/// A step of a trigger.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Step {
    /// The step id, unique in the trigger.
    pub id: String,
    /// Where it runs.
    pub environment: EnvironmentRef,
    /// Hard limit for the step.
    pub max_runtime: Duration,
    /// Idle limit (≤ `max_runtime`).
    pub idle_timeout: Duration,
    /// Which agent runs it.
    pub agent: AgentRef,
    /// Prompt blocks, joined with `"\n"` when rendered.
    pub prompt: Vec<PromptBlock>,
    /// The `if` condition: the step runs iff it evaluates truthy.
    pub condition: Option<Template>,
    /// The structured output's JSON Schema (`output.schema`).
    pub output_schema: Option<Value>,
    /// Output capabilities the step may use, in authored order.
    pub allow_outputs: Vec<AllowOutput>,
    /// Environment variables (values may use `paseo.connections`).
    pub env: Vec<(String, Template)>,
    /// A GitHub installation-token authority.
    pub github: Option<GithubAuthority>,
    /// Archive the agent when done.
    pub auto_archive: bool,
}

/// A step's `environment`.
#[derive(Clone, Debug, PartialEq)]
pub enum EnvironmentRef {
    /// A literal environment name.
    Named(String),
    /// An expression that must resolve to a finite set of names.
    Expression(Template),
}

/// A step's `agent`.
#[derive(Clone, Debug, PartialEq)]
pub enum AgentRef {
    /// A named agent of `.paseo/hub.yml`.
    Named(String),
    /// An expression selecting among the named agents.
    Expression(Template),
    /// An inline agent definition.
    Inline(Agent),
}

/// One prompt block.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum PromptBlock {
    /// `{text: …}`.
    Text(Template),
    /// `{include: …}`: a partial, relative to `.paseo/workflows/`.
    Include(String),
}

/// An output capability declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AllowOutput {
    /// The capability type, e.g. `slack.reply`.
    pub kind: String,
    /// How many times it may be used (≥ 1; authored default 1). `None`
    /// means unlimited, which only Paseo Hub 0.9's automatic event-native
    /// reply of a trigger document has (`hub-triggers.md` §4.2); a v0.6
    /// declaration always has a limit.
    pub max: Option<u32>,
    /// Whether it must be used before the step can finish.
    pub required: bool,
}

/// A GitHub permission level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GithubLevel {
    /// `read`.
    Read,
    /// `write`.
    Write,
    /// `admin`.
    Admin,
}

impl GithubLevel {
    /// The authored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Admin => "admin",
        }
    }
}

/// A step's `github` authority block.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct GithubAuthority {
    /// Connection slug.
    pub connection: String,
    /// Repositories (`owner/name`) the token is scoped to.
    pub repositories: Option<Vec<String>>,
    /// Permissions; `None` means the default `{contents: read}`.
    pub permissions: Option<Vec<(String, GithubLevel)>>,
    /// Token lifetime (≤ 1h).
    pub duration: Option<Duration>,
}

/// A duration such as `30s` or `2h`: `^[1-9][0-9]*(ms|s|m|h)$`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Duration {
    /// The authored text.
    pub text: String,
    /// The value in milliseconds.
    pub millis: u64,
}

/// The longest duration accepted anywhere: 24 hours.
pub const MAX_DURATION_MS: u64 = 86_400_000;

impl Duration {
    /// Parses `^[1-9][0-9]*(ms|s|m|h)$` without any upper bound other
    /// than JavaScript's safe-integer range; returns `None` when malformed.
    pub fn parse(text: &str) -> Option<Self> {
        let digits_end = text.find(|c: char| !c.is_ascii_digit())?;
        let (digits, unit) = text.split_at(digits_end);
        if digits.is_empty() || digits.starts_with('0') {
            return None;
        }
        let factor: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return None,
        };
        let n: u64 = digits.parse().ok()?;
        let millis = n.checked_mul(factor)?;
        // Number.MAX_SAFE_INTEGER
        if millis > 9_007_199_254_740_991 {
            return None;
        }
        Some(Self {
            text: text.to_owned(),
            millis,
        })
    }
}

fn opt_str(map: &mut Map<String, Value>, key: &str, v: Option<&String>) {
    if let Some(v) = v {
        map.insert(key.to_owned(), Value::String(v.clone()));
    }
}

fn opt_list(map: &mut Map<String, Value>, key: &str, v: Option<&Vec<String>>) {
    if let Some(v) = v {
        map.insert(key.to_owned(), json!(v));
    }
}

impl Agent {
    /// The authored form.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("provider".into(), Value::String(self.provider.clone()));
        opt_str(&mut m, "model", self.model.as_ref());
        opt_str(&mut m, "mode", self.mode.as_ref());
        opt_str(&mut m, "thinkingOptionId", self.thinking_option_id.as_ref());
        if let Some(o) = &self.options {
            m.insert("options".into(), o.clone());
        }
        Value::Object(m)
    }
}

impl Environment {
    /// The authored form of the environment's body (without `name`).
    pub fn body_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("kind".into(), Value::String(self.kind.name().into()));
        match &self.kind {
            EnvironmentKind::Daemon {
                daemon,
                cwd,
                worktree,
            } => {
                m.insert("daemon".into(), Value::String(daemon.clone()));
                m.insert("cwd".into(), Value::String(cwd.clone()));
                if let Some(w) = worktree {
                    let w = match w {
                        Worktree::BranchOff { new_branch, base } => {
                            let mut w = Map::new();
                            w.insert("mode".into(), json!("branch-off"));
                            w.insert("newBranch".into(), json!(new_branch.source));
                            opt_str(&mut w, "base", base.as_ref());
                            Value::Object(w)
                        }
                        Worktree::CheckoutBranch { branch } => {
                            json!({"mode": "checkout-branch", "branch": branch})
                        }
                        Worktree::CheckoutPr { pr_number } => {
                            json!({"mode": "checkout-pr", "prNumber": pr_number})
                        }
                    };
                    m.insert("worktree".into(), w);
                }
            }
            EnvironmentKind::Fly { image, cwd } | EnvironmentKind::Docker { image, cwd } => {
                m.insert("image".into(), Value::String(image.clone()));
                opt_str(&mut m, "cwd", cwd.as_ref());
            }
        }
        m
    }
}

impl Filters {
    /// The authored form.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        opt_str(&mut m, "pattern", self.pattern.as_ref());
        opt_str(&mut m, "contains", self.contains.as_ref());
        opt_str(&mut m, "label", self.label.as_ref());
        opt_list(&mut m, "labels", self.labels.as_ref());
        opt_str(&mut m, "repo", self.repo.as_ref());
        opt_str(&mut m, "guild", self.guild.as_ref());
        opt_str(&mut m, "workspace", self.workspace.as_ref());
        opt_list(&mut m, "channels", self.channels.as_ref());
        opt_list(&mut m, "from_users", self.from_users.as_ref());
        if let Some(inputs) = &self.inputs {
            m.insert(
                "inputs".into(),
                Value::Object(inputs.iter().cloned().collect()),
            );
        }
        opt_str(&mut m, "connection", self.connection.as_ref());
        opt_str(&mut m, "project", self.project.as_ref());
        opt_list(&mut m, "states", self.states.as_ref());
        opt_list(&mut m, "exclude_labels", self.exclude_labels.as_ref());
        opt_list(&mut m, "assignees", self.assignees.as_ref());
        opt_list(&mut m, "reviewers", self.reviewers.as_ref());
        opt_list(&mut m, "branches", self.branches.as_ref());
        opt_str(&mut m, "team", self.team.as_ref());
        for (k, v) in [
            ("replies_only", self.replies_only),
            ("thread_with_app", self.thread_with_app),
        ] {
            if let Some(b) = v {
                m.insert(k.into(), Value::Bool(b));
            }
        }
        Value::Object(m)
    }
}

impl Step {
    /// The authored form.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), json!(self.id));
        if let Some(c) = &self.condition {
            m.insert("if".into(), json!(c.source));
        }
        m.insert(
            "environment".into(),
            match &self.environment {
                EnvironmentRef::Named(n) => json!(n),
                EnvironmentRef::Expression(t) => json!(t.source),
            },
        );
        m.insert("max_runtime".into(), json!(self.max_runtime.text));
        m.insert("idle_timeout".into(), json!(self.idle_timeout.text));
        m.insert(
            "agent".into(),
            match &self.agent {
                AgentRef::Named(n) => json!(n),
                AgentRef::Expression(t) => json!(t.source),
                AgentRef::Inline(a) => a.to_json(),
            },
        );
        m.insert(
            "prompt".into(),
            Value::Array(
                self.prompt
                    .iter()
                    .map(|p| match p {
                        PromptBlock::Text(t) => json!({"text": t.source}),
                        PromptBlock::Include(i) => json!({"include": i}),
                    })
                    .collect(),
            ),
        );
        if let Some(s) = &self.output_schema {
            m.insert("output".into(), json!({"schema": s}));
        }
        if !self.allow_outputs.is_empty() {
            m.insert(
                "allow_outputs".into(),
                Value::Array(
                    self.allow_outputs
                        .iter()
                        .map(|o| json!({"type": o.kind, "max": o.max, "required": o.required}))
                        .collect(),
                ),
            );
        }
        if !self.env.is_empty() {
            m.insert(
                "env".into(),
                Value::Object(
                    self.env
                        .iter()
                        .map(|(k, v)| (k.clone(), json!(v.source)))
                        .collect(),
                ),
            );
        }
        if let Some(g) = &self.github {
            let mut gm = Map::new();
            gm.insert("connection".into(), json!(g.connection));
            opt_list(&mut gm, "repositories", g.repositories.as_ref());
            if let Some(p) = &g.permissions {
                gm.insert(
                    "permissions".into(),
                    Value::Object(
                        p.iter()
                            .map(|(k, v)| (k.clone(), json!(v.as_str())))
                            .collect(),
                    ),
                );
            }
            if let Some(d) = &g.duration {
                gm.insert("duration".into(), json!(d.text));
            }
            m.insert("github".into(), Value::Object(gm));
        }
        if self.auto_archive {
            m.insert("auto_archive".into(), json!(true));
        }
        Value::Object(m)
    }
}

impl Trigger {
    /// The authored form (single-file layout: includes `name`).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), json!(self.name));
        m.insert("on".into(), json!(self.on));
        m.insert("max_runtime".into(), json!(self.max_runtime.text));
        if let Some(f) = &self.filters {
            m.insert("filters".into(), f.to_json());
        }
        if !self.inputs.is_empty() {
            let mut im = Map::new();
            for i in &self.inputs {
                let mut d = Map::new();
                d.insert("type".into(), json!(i.kind.as_str()));
                if let Some(r) = i.required {
                    d.insert("required".into(), json!(r));
                }
                if let Some(v) = &i.default {
                    d.insert("default".into(), v.clone());
                }
                if let Some(c) = &i.choices {
                    d.insert("choices".into(), Value::Array(c.clone()));
                }
                im.insert(i.name.clone(), Value::Object(d));
            }
            m.insert("inputs".into(), Value::Object(im));
        }
        if !self.values.is_empty() {
            m.insert(
                "values".into(),
                Value::Object(
                    self.values
                        .iter()
                        .map(|(k, v)| (k.clone(), json!(v.source)))
                        .collect(),
                ),
            );
        }
        m.insert(
            "steps".into(),
            Value::Array(self.steps.iter().map(Step::to_json).collect()),
        );
        Value::Object(m)
    }
}

impl HubConfig {
    /// The single-file authored form (`environments:` and `triggers:`
    /// lists). JSON is YAML, so the text of this value parses back with
    /// [`crate::parse_workflow`].
    pub fn to_single_file_json(&self) -> Value {
        json!({
            "environments": self.environments.iter().map(|e| {
                let mut m = Map::new();
                m.insert("name".into(), json!(e.name));
                m.extend(e.body_json());
                Value::Object(m)
            }).collect::<Vec<_>>(),
            "triggers": self.triggers.iter().map(Trigger::to_json).collect::<Vec<_>>(),
        })
    }

    /// The environment called `name`.
    pub fn environment(&self, name: &str) -> Option<&Environment> {
        self.environments.iter().find(|e| e.name == name)
    }

    /// The named agent called `name`.
    pub fn agent(&self, name: &str) -> Option<&Agent> {
        self.agents
            .iter()
            .find(|a| a.name == name)
            .map(|a| &a.agent)
    }
}
