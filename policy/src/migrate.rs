//! The migration preview (`hub-triggers.md` §5): what Paseo Hub 0.9's
//! startup migration (`legacy-migration.ts`) makes of each trigger of a
//! v0.6 configuration, and every authority change that implies.
//!
//! A trigger that `convertSingleRun` cannot convert goes to the
//! `legacy_multistep` lane, which keeps v0.6 semantics (no automatic reply,
//! `max` default 1), with the Hub's exact blocker strings. Any other
//! trigger becomes a trigger document (`singleRunDocument`), which the Hub
//! then compiles as a new document: its continuation becomes `new`, and a
//! conversational run without a reply grant **gains an unlimited reply**.
//!
//! Pure: the configuration comes parsed; the YAML is written here without
//! IO.

use palisade_schema::trigger::Release;
use palisade_schema::{
    AgentRef, EnvironmentKind, EnvironmentRef, HubConfig, PromptBlock, Trigger, Worktree,
};
use serde_json::{Map, Value, json};

use crate::capability::CapabilityRegistry;
use crate::trigger::automatic_reply_kind;

/// `trigger has multiple steps`.
pub const MULTIPLE_STEPS: &str = "trigger has multiple steps";
/// `trigger defines workflow values`.
pub const WORKFLOW_VALUES: &str = "trigger defines workflow values";
/// `run is conditional`.
pub const CONDITIONAL: &str = "run is conditional";
/// `trigger inputs allow null values`.
pub const NULL_INPUTS: &str = "trigger inputs allow null values";
/// `target environment is selected dynamically`.
pub const DYNAMIC_TARGET: &str = "target environment is selected dynamically";
/// `run contains duplicate output grants`.
pub const DUPLICATE_GRANTS: &str = "run contains duplicate output grants";

/// What the Hub's migration makes of one trigger.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Format {
    /// `single_run`: a trigger document.
    SingleRun {
        /// The document, keys in the order the Hub writes them.
        document: Value,
        /// The document as YAML.
        yaml: String,
    },
    /// `legacy_multistep`: v0.6 semantics, with why (every blocker, in the
    /// Hub's order).
    LegacyMultistep {
        /// The exact blocker strings.
        blockers: Vec<String>,
    },
}

impl Format {
    /// `single_run` or `legacy_multistep`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::SingleRun { .. } => "single_run",
            Self::LegacyMultistep { .. } => "legacy_multistep",
        }
    }
}

/// One change of authority the migration implies.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Change {
    /// A stable code, e.g. `automatic_unlimited_reply`.
    pub code: &'static str,
    /// Whether it widens what the run may do or who may start it.
    pub widens: bool,
    /// The sentence.
    pub message: String,
}

/// The migration of one trigger.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Migration {
    /// The trigger's (and the document's) name.
    pub trigger: String,
    /// Its event.
    pub on: String,
    /// The result.
    pub format: Format,
    /// Every authority change, widening ones first.
    pub changes: Vec<Change>,
}

impl Migration {
    /// The JSON form `palisade check --migrate --format json` prints.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("trigger".into(), json!(self.trigger));
        m.insert("on".into(), json!(self.on));
        m.insert("format".into(), json!(self.format.name()));
        match &self.format {
            Format::SingleRun { document, yaml } => {
                m.insert("document".into(), document.clone());
                m.insert("yaml".into(), json!(yaml));
            }
            Format::LegacyMultistep { blockers } => {
                m.insert("blockers".into(), json!(blockers));
            }
        }
        m.insert(
            "changes".into(),
            Value::Array(
                self.changes
                    .iter()
                    .map(|c| json!({"code": c.code, "widens": c.widens, "message": c.message}))
                    .collect(),
            ),
        );
        Value::Object(m)
    }
}

/// Migrates every trigger of `config`, in order.
pub fn migrate(config: &HubConfig) -> Vec<Migration> {
    config
        .triggers
        .iter()
        .map(|t| migrate_trigger(config, t))
        .collect()
}

/// The `convertSingleRun` blockers of `trigger` (empty: it is a single run).
pub fn blockers(config: &HubConfig, trigger: &Trigger) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if trigger.steps.len() != 1 {
        out.push(MULTIPLE_STEPS.to_owned());
    }
    if !trigger.values.is_empty() {
        out.push(WORKFLOW_VALUES.to_owned());
    }
    if trigger.steps.iter().any(|s| s.condition.is_some()) {
        out.push(CONDITIONAL.to_owned());
    }
    let null_input = trigger.inputs.iter().any(|i| {
        i.default.as_ref().is_some_and(Value::is_null)
            || i.choices.iter().flatten().any(Value::is_null)
    });
    if null_input {
        out.push(NULL_INPUTS.to_owned());
    }
    for step in trigger.steps.iter().take(1) {
        match &step.environment {
            EnvironmentRef::Expression(_) => out.push(DYNAMIC_TARGET.to_owned()),
            EnvironmentRef::Named(n) => match config.environment(n).map(|e| &e.kind) {
                Some(EnvironmentKind::Daemon { .. }) | None => {}
                Some(kind) => out.push(format!("target kind {} is legacy", kind.name())),
            },
        }
        let mut seen: Vec<&str> = Vec::new();
        for o in &step.allow_outputs {
            if seen.contains(&o.kind.as_str()) {
                out.push(DUPLICATE_GRANTS.to_owned());
                break;
            }
            seen.push(&o.kind);
        }
    }
    out
}

fn migrate_trigger(config: &HubConfig, trigger: &Trigger) -> Migration {
    let blockers = blockers(config, trigger);
    let (format, changes) = match (blockers.is_empty(), trigger.steps.first()) {
        (true, Some(_)) => {
            let document = single_run_document(config, trigger);
            let yaml = to_yaml(&document);
            let changes = single_run_changes(trigger);
            (Format::SingleRun { document, yaml }, changes)
        }
        _ => (
            Format::LegacyMultistep { blockers },
            vec![Change {
                code: "legacy_lane",
                widens: false,
                message: "runs on the legacy_multistep lane with v0.6 semantics: no automatic reply, `max` default 1; no authority change".to_owned(),
            }],
        ),
    };
    Migration {
        trigger: trigger.name.clone(),
        on: trigger.on.clone(),
        format,
        changes,
    }
}

/// A canonical duration: `h`, else `m`, `s`, `ms`.
fn duration(millis: u64) -> String {
    match millis {
        m if m % 3_600_000 == 0 => format!("{}h", m / 3_600_000),
        m if m % 60_000 == 0 => format!("{}m", m / 60_000),
        m if m % 1_000 == 0 => format!("{}s", m / 1_000),
        m => format!("{m}ms"),
    }
}

fn agent_json(a: &palisade_schema::Agent) -> Value {
    let mut m = Map::new();
    m.insert("provider".into(), json!(a.provider));
    if let Some(v) = &a.model {
        m.insert("model".into(), json!(v));
    }
    if let Some(v) = &a.mode {
        m.insert("mode".into(), json!(v));
    }
    if let Some(v) = &a.thinking_option_id {
        m.insert("thinkingOptionId".into(), json!(v));
    }
    if let Some(v) = &a.options {
        m.insert("options".into(), v.clone());
    }
    Value::Object(m)
}

fn filters_json(f: &palisade_schema::Filters) -> Map<String, Value> {
    let mut m = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.to_owned(), v);
        }
    };
    put("pattern", f.pattern.as_ref().map(|v| json!(v)));
    put("contains", f.contains.as_ref().map(|v| json!(v)));
    put("label", f.label.as_ref().map(|v| json!(v)));
    put("labels", f.labels.as_ref().map(|v| json!(v)));
    put("repo", f.repo.as_ref().map(|v| json!(v)));
    put("guild", f.guild.as_ref().map(|v| json!(v)));
    put("workspace", f.workspace.as_ref().map(|v| json!(v)));
    put("channels", f.channels.as_ref().map(|v| json!(v)));
    put("from_users", f.from_users.as_ref().map(|v| json!(v)));
    put(
        "inputs",
        f.inputs
            .as_ref()
            .map(|v| Value::Object(v.iter().cloned().collect())),
    );
    m
}

/// The Hub's `singleRunDocument` for a trigger without blockers.
fn single_run_document(config: &HubConfig, trigger: &Trigger) -> Value {
    let mut doc = Map::new();
    doc.insert("name".into(), json!(trigger.name));
    doc.insert("enabled".into(), json!(true));
    let mut event = Map::new();
    if let Some(f) = &trigger.filters {
        if let Some(c) = &f.connection {
            event.insert("connection".into(), json!(c));
        }
        let filters = filters_json(f);
        if !filters.is_empty() {
            event.insert("filters".into(), Value::Object(filters));
        }
    }
    let mut on = Map::new();
    on.insert(trigger.on.clone(), Value::Object(event));
    doc.insert("on".into(), Value::Object(on));
    if !trigger.inputs.is_empty() {
        let mut inputs = Map::new();
        for i in &trigger.inputs {
            let mut d = Map::new();
            d.insert("type".into(), json!(i.kind.as_str()));
            if let Some(r) = i.required {
                d.insert("required".into(), json!(r));
            }
            if let Some(v) = i.default.as_ref().filter(|v| !v.is_null()) {
                d.insert("default".into(), v.clone());
            }
            if let Some(c) = &i.choices {
                let c: Vec<&Value> = c.iter().filter(|v| !v.is_null()).collect();
                d.insert("choices".into(), json!(c));
            }
            inputs.insert(i.name.clone(), Value::Object(d));
        }
        doc.insert("inputs".into(), Value::Object(inputs));
    }
    let Some(step) = trigger.steps.first() else {
        return Value::Object(doc);
    };
    if trigger.max_runtime.millis != step.max_runtime.millis {
        doc.insert(
            "max_runtime".into(),
            json!(duration(trigger.max_runtime.millis)),
        );
    }
    let mut run = Map::new();
    run.insert("continuation".into(), json!({"mode": "new"}));
    if let EnvironmentRef::Named(n) = &step.environment
        && let Some(EnvironmentKind::Daemon {
            daemon,
            cwd,
            worktree,
        }) = config.environment(n).map(|e| &e.kind)
    {
        let mut target = Map::new();
        target.insert("daemon".into(), json!(daemon));
        target.insert("cwd".into(), json!(cwd));
        if let Some(w) = worktree {
            let w = match w {
                Worktree::BranchOff { new_branch, base } => {
                    let mut m = Map::new();
                    m.insert("mode".into(), json!("branch-off"));
                    if let Some(b) = base {
                        m.insert("base".into(), json!(b));
                    }
                    m.insert("newBranch".into(), json!(new_branch.source));
                    Value::Object(m)
                }
                Worktree::CheckoutBranch { branch } => {
                    json!({"mode": "checkout-branch", "branch": branch})
                }
                Worktree::CheckoutPr { pr_number } => {
                    json!({"mode": "checkout-pr", "prNumber": pr_number})
                }
                _ => Value::Null,
            };
            target.insert("worktree".into(), w);
        }
        run.insert("target".into(), Value::Object(target));
    }
    let agent = match &step.agent {
        AgentRef::Inline(a) => agent_json(a),
        AgentRef::Named(n) => config.agent(n).map_or(Value::Null, agent_json),
        AgentRef::Expression(t) => {
            let choices: Map<String, Value> = config
                .agents
                .iter()
                .map(|a| (a.name.clone(), agent_json(&a.agent)))
                .collect();
            json!({"select": t.source, "choices": choices})
        }
    };
    run.insert("agent".into(), agent);
    let prompt: Vec<String> = step
        .prompt
        .iter()
        .map(|b| match b {
            PromptBlock::Text(t) => t.source.clone(),
            PromptBlock::Include(p) => config
                .partials
                .iter()
                .find(|x| x.path == *p)
                .map(|x| x.text.clone())
                .unwrap_or_default(),
            _ => String::new(),
        })
        .collect();
    run.insert("prompt".into(), json!(prompt.join("\n")));
    run.insert(
        "max_runtime".into(),
        json!(duration(step.max_runtime.millis)),
    );
    run.insert(
        "idle_timeout".into(),
        json!(duration(step.idle_timeout.millis)),
    );
    if !step.env.is_empty() {
        let env: Map<String, Value> = step
            .env
            .iter()
            .map(|(k, t)| (k.clone(), json!(t.source)))
            .collect();
        run.insert("env".into(), Value::Object(env));
    }
    if let Some(g) = &step.github {
        let mut m = Map::new();
        m.insert("connection".into(), json!(g.connection));
        if let Some(r) = &g.repositories {
            m.insert("repositories".into(), json!(r));
        }
        let permissions: Map<String, Value> = match &g.permissions {
            Some(p) => p
                .iter()
                .map(|(k, l)| (k.clone(), json!(l.as_str())))
                .collect(),
            None => [("contents".to_owned(), json!("read"))]
                .into_iter()
                .collect(),
        };
        m.insert("permissions".into(), Value::Object(permissions));
        let d = g.duration.as_ref().map_or(3_600_000, |d| d.millis);
        m.insert("duration".into(), json!(duration(d)));
        run.insert("github".into(), Value::Object(m));
    }
    if let Some(s) = &step.output_schema {
        run.insert("output".into(), json!({"schema": s}));
    }
    if !step.allow_outputs.is_empty() {
        let outputs: Map<String, Value> = step
            .allow_outputs
            .iter()
            .map(|o| {
                let mut m = Map::new();
                m.insert("max".into(), json!(o.max.unwrap_or(1)));
                if o.required {
                    m.insert("required".into(), json!(true));
                }
                (o.kind.clone(), Value::Object(m))
            })
            .collect();
        run.insert("outputs".into(), Value::Object(outputs));
    }
    run.insert("auto_archive".into(), json!(step.auto_archive));
    doc.insert("run".into(), Value::Object(run));
    Value::Object(doc)
}

/// The authority changes of a single-run migration.
fn single_run_changes(trigger: &Trigger) -> Vec<Change> {
    let mut out: Vec<Change> = Vec::new();
    let Some(step) = trigger.steps.first() else {
        return out;
    };
    let change = |code, widens, message: String| Change {
        code,
        widens,
        message,
    };
    if let Some(kind) = automatic_reply_kind(&trigger.on, Release::V0_9_0)
        && !step.allow_outputs.iter().any(|o| o.kind == kind)
    {
        out.push(change(
            "automatic_unlimited_reply",
            true,
            format!(
                "gains an unlimited `{kind}` (tool `reply`, no `max`) that v0.6 did not grant; add `outputs: {{{kind}: {{max: N}}}}` to bound it"
            ),
        ));
    }
    let v06 = CapabilityRegistry::default();
    let v09 = CapabilityRegistry::hub_0_9();
    for o in &step.allow_outputs {
        if v06.get(&o.kind).is_none() && v09.get(&o.kind).is_some() {
            out.push(change(
                "grant_becomes_effective",
                true,
                format!(
                    "the `{}` grant (max {}) becomes effective: v0.6 dropped it as unregistered, Hub 0.9 registers it",
                    o.kind,
                    o.max.unwrap_or(1)
                ),
            ));
        }
    }
    let from_users = trigger.filters.as_ref().and_then(|f| f.from_users.as_ref());
    if trigger.on == "manual.run" {
        match from_users {
            None => out.push(change(
                "manual_wildcard",
                true,
                "no `from_users`: v0.6 admitted no manual actor, the migrated document compiles to `from_users: [\"*\"]` (every `runs:dispatch` credential, any actor)".to_owned(),
            )),
            Some(users) => out.push(change(
                "manual_from_users_explicit",
                false,
                format!(
                    "`from_users: [{}]` stays explicit (a document without it would admit everyone)",
                    users.join(", ")
                ),
            )),
        }
    }
    if from_users.is_some_and(|u| u.iter().any(|x| x == "*")) {
        out.push(change(
            "wildcard_principal",
            true,
            "`\"*\"` in `from_users` was one literal user id in v0.6 and admits every actor in Hub 0.9".to_owned(),
        ));
    }
    out.push(change(
        "continuation_new",
        false,
        "continuation becomes `{mode: new}`: every run starts a new agent conversation (a new document's default is `conversation`)".to_owned(),
    ));
    if let Some(g) = &step.github {
        if g.permissions.is_none() {
            out.push(change(
                "github_permissions_explicit",
                false,
                "github permissions written explicitly as `{contents: read}` (the v0.6 default)"
                    .to_owned(),
            ));
        }
        if g.duration.is_none() {
            out.push(change(
                "github_duration_explicit",
                false,
                "github token duration written explicitly as `1h` (the v0.6 default)".to_owned(),
            ));
        }
    }
    for o in &step.allow_outputs {
        out.push(change(
            "max_explicit",
            false,
            format!(
                "`{}` keeps `max: {}`, written explicitly{}",
                o.kind,
                o.max.unwrap_or(1),
                if o.required {
                    ", and `required: true`"
                } else {
                    ""
                }
            ),
        ));
    }
    out.push(change(
        "auto_archive_explicit",
        false,
        format!(
            "`auto_archive: {}` written explicitly (a new document's default is `true`, a v0.6 step's `false`)",
            step.auto_archive
        ),
    ));
    let modeless = match &step.agent {
        AgentRef::Inline(a) => a.mode.is_none(),
        _ => false,
    };
    if modeless {
        out.push(change(
            "implicit_mode",
            false,
            "the agent has no `mode` and keeps its provider default; the Hub keeps the unchanged migrated revision, but saving or validating the document anew refuses it (`is required for new triggers`) until one is chosen".to_owned(),
        ));
    }
    if matches!(step.agent, AgentRef::Expression(_)) {
        out.push(change(
            "select_choices",
            false,
            "the agent expression becomes `select` with every named agent as a choice (names are lost)".to_owned(),
        ));
    }
    out.sort_by_key(|c| !c.widens);
    out
}

/// YAML 1.1 and 1.2 words that a plain scalar would turn into a non-string.
const RESERVED: [&str; 12] = [
    "y", "yes", "n", "no", "on", "off", "true", "false", "null", "~", "nan", "inf",
];

fn scalar(s: &str) -> String {
    let lower = s.to_ascii_lowercase();
    if RESERVED.contains(&lower.as_str()) {
        return format!("'{s}'");
    }
    let plain_chars = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '@'));
    let first = s.chars().next();
    let plain = plain_chars
        && match first {
            Some(c) if c.is_ascii_alphabetic() || c == '/' || c == '_' => true,
            Some(c) if c.is_ascii_digit() => Duration::looks_like(s),
            _ => false,
        };
    if plain {
        s.to_owned()
    } else {
        Value::String(s.to_owned()).to_string()
    }
}

struct Duration;

impl Duration {
    /// `^[0-9]+(ms|s|m|h)$`: a string in every YAML schema.
    fn looks_like(s: &str) -> bool {
        let unit = s.trim_start_matches(|c: char| c.is_ascii_digit());
        unit.len() < s.len() && matches!(unit, "ms" | "s" | "m" | "h")
    }
}

/// Block-style YAML of a JSON value, keys in order; strings are plain only
/// when every YAML schema reads them back as the same string.
pub fn to_yaml(v: &Value) -> String {
    let mut out = String::new();
    write_node(v, 0, &mut out);
    out
}

fn inline(v: &Value) -> Option<String> {
    match v {
        Value::Null => Some("null".to_owned()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(scalar(s)),
        Value::Array(a) if a.is_empty() => Some("[]".to_owned()),
        Value::Object(m) if m.is_empty() => Some("{}".to_owned()),
        _ => None,
    }
}

fn write_node(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, val) in m {
                match inline(val) {
                    Some(s) => out.push_str(&format!("{pad}{}: {s}\n", scalar(k))),
                    None => {
                        out.push_str(&format!("{pad}{}:\n", scalar(k)));
                        write_node(val, indent + 2, out);
                    }
                }
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for item in a {
                match inline(item) {
                    Some(s) => out.push_str(&format!("{pad}- {s}\n")),
                    None => {
                        // The first line of the item goes after the dash.
                        let mut inner = String::new();
                        write_node(item, indent + 2, &mut inner);
                        let trimmed = inner.get(indent + 2..).unwrap_or_default();
                        out.push_str(&format!("{pad}- {trimmed}"));
                    }
                }
            }
        }
        other => {
            if let Some(s) = inline(other) {
                out.push_str(&format!("{pad}{s}\n"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_canonical() {
        assert_eq!(duration(3_600_000), "1h");
        assert_eq!(duration(5_400_000), "90m");
        assert_eq!(duration(1_500), "1500ms");
        assert_eq!(duration(30_000), "30s");
    }

    #[test]
    fn yaml_quotes_what_would_change_type() {
        let v = json!({"on": {"manual.run": {}}, "a": ["yes", "1h", "12", "x y", "${{ paseo.prompt }}", "/repo"], "n": 3, "m": [{"k": 1, "j": [true]}]});
        assert_eq!(
            to_yaml(&v),
            "'on':\n  manual.run: {}\na:\n  - 'yes'\n  - 1h\n  - \"12\"\n  - \"x y\"\n  - \"${{ paseo.prompt }}\"\n  - /repo\n'n': 3\nm:\n  - k: 1\n    j:\n      - true\n"
        );
    }
}
