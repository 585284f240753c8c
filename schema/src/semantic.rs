//! Cross-reference checks over a parsed [`HubConfig`]: names, step and value
//! references, expression paths, authority finiteness and enum comparisons.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value as Json;

use crate::diagnostic::{Diagnostic, Path};
use crate::expr::{BinOp, Expr, Template, loose_eq};
use crate::model::{
    AgentRef, EnvironmentKind, EnvironmentRef, HubConfig, PromptBlock, Step, Trigger, Worktree,
};
use crate::yaml::Node;

/// Where a trigger's nodes live: its file, the node tree and the path of
/// the trigger inside that tree.
#[derive(Debug)]
pub(crate) struct TriggerSite<'a> {
    pub(crate) file: &'a str,
    pub(crate) root: &'a Node<'a>,
    pub(crate) base: Path,
}

/// Where the environments and named agents live.
#[derive(Debug)]
pub(crate) struct ResourceSite<'a> {
    pub(crate) file: &'a str,
    pub(crate) root: &'a Node<'a>,
    /// Path of an environment by index in `config.environments`.
    pub(crate) env_paths: Vec<Path>,
}

pub(crate) struct Checker<'a> {
    pub(crate) config: &'a HubConfig,
    pub(crate) diags: Vec<Diagnostic>,
    /// Some environment failed to parse: unknown-environment findings
    /// would be noise, so they are not reported.
    pub(crate) environments_broken: bool,
    /// Some named agent failed to parse.
    pub(crate) agents_broken: bool,
}

impl<'a> Checker<'a> {
    /// A checker that suppresses reference findings for sections that
    /// already have errors in `prior`.
    pub(crate) fn new(config: &'a HubConfig, prior: &[Diagnostic], resource_file: &str) -> Self {
        let broken = |section: &str| {
            prior.iter().any(|d| {
                d.is_error()
                    && d.file == resource_file
                    && matches!(d.path.0.first(), Some(crate::PathSegment::Key(k)) if k == section)
            })
        };
        Self {
            config,
            diags: Vec::new(),
            environments_broken: broken("environments"),
            agents_broken: broken("agents"),
        }
    }
}

/// Where an expression sits, which decides the paths it may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Prompt,
    If,
    Authority,
    Value,
    Env,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Self::Prompt => "prompt",
            Self::If => "if",
            Self::Authority => "authority",
            Self::Value => "values",
            Self::Env => "env",
        }
    }
}

pub(crate) fn diag_at(
    site_file: &str,
    root: &Node,
    severity_error: bool,
    code: &'static str,
    message: impl Into<String>,
    path: &Path,
) -> Diagnostic {
    let pos = root.pos_of(path);
    let d = if severity_error {
        Diagnostic::error(code, message)
    } else {
        Diagnostic::warning(code, message)
    };
    d.in_file(site_file)
        .at(pos.line, pos.column)
        .with_path(path.clone())
}

impl<'a> Checker<'a> {
    pub(crate) fn err(
        &mut self,
        site: &TriggerSite<'_>,
        code: &'static str,
        message: impl Into<String>,
        path: &Path,
    ) {
        self.diags
            .push(diag_at(site.file, site.root, true, code, message, path));
    }

    /// Runs every cross-reference check.
    pub(crate) fn run(&mut self, res: &ResourceSite<'_>, sites: &[TriggerSite<'_>]) {
        // Environment names unique (single-file lists; bundle maps are unique by construction).
        let mut seen = BTreeSet::new();
        for (i, e) in self.config.environments.iter().enumerate() {
            if !seen.insert(e.name.as_str()) {
                let p = res.env_paths.get(i).cloned().unwrap_or_default();
                self.diags.push(diag_at(
                    res.file,
                    res.root,
                    true,
                    "duplicate_id",
                    format!("environment name {:?} is used more than once", e.name),
                    &p.key("name"),
                ));
            }
            if let EnvironmentKind::Daemon {
                worktree: Some(Worktree::BranchOff { new_branch, .. }),
                ..
            } = &e.kind
            {
                for (expr, _) in new_branch.expressions() {
                    for (segs, _) in expr.paths() {
                        if segs != ["paseo", "execution", "id"] {
                            let p = res
                                .env_paths
                                .get(i)
                                .cloned()
                                .unwrap_or_default()
                                .key("worktree")
                                .key("newBranch");
                            self.diags.push(diag_at(res.file, res.root, true, "unsupported_path", format!("execution templates support only paseo.execution.id paths, not {}", segs.join(".")), &p));
                        }
                    }
                }
            }
        }
        let mut trigger_names: BTreeMap<&str, usize> = BTreeMap::new();
        for (t, site) in self.config.triggers.iter().zip(sites) {
            if trigger_names.insert(t.name.as_str(), 0).is_some() {
                self.err(
                    site,
                    "duplicate_id",
                    format!("trigger name {:?} is used more than once", t.name),
                    &site.base.key("name"),
                );
            }
            self.trigger(t, site);
        }
    }

    fn trigger(&mut self, t: &Trigger, site: &TriggerSite<'_>) {
        let mut ids: BTreeSet<&str> = BTreeSet::new();
        for (i, s) in t.steps.iter().enumerate() {
            if !ids.insert(s.id.as_str()) {
                self.err(
                    site,
                    "duplicate_id",
                    format!(
                        "step id {:?} is used more than once in trigger {}",
                        s.id, t.name
                    ),
                    &site.base.key("steps").index(i).key("id"),
                );
            }
        }
        // values: names, references and cycles
        let value_names: BTreeSet<&str> = t.values.iter().map(|(k, _)| k.as_str()).collect();
        for (name, tpl) in &t.values {
            let p = site.base.key("values").key(name.clone());
            self.template_paths(t, None, tpl, Field::Value, site, &p);
        }
        self.value_cycles(t, site, &value_names);
        for (i, s) in t.steps.iter().enumerate() {
            let sp = site.base.key("steps").index(i);
            self.step(t, i, s, site, &sp);
        }
    }

    fn value_cycles(&mut self, t: &Trigger, site: &TriggerSite<'_>, names: &BTreeSet<&str>) {
        let deps: BTreeMap<&str, Vec<&str>> = t
            .values
            .iter()
            .map(|(k, tpl)| {
                let mut d = Vec::new();
                for (e, _) in tpl.expressions() {
                    for (segs, _) in e.paths() {
                        if let (Some("values"), Some(n)) =
                            (segs.first().map(String::as_str), segs.get(1))
                            && names.contains(n.as_str())
                        {
                            d.push(n.as_str());
                        }
                    }
                }
                (k.as_str(), d)
            })
            .collect();
        let mut reported = BTreeSet::new();
        for start in deps.keys() {
            // Depth-first search from `start` looking for a path back to it.
            let mut stack = vec![*start];
            let mut visited = BTreeSet::new();
            while let Some(n) = stack.pop() {
                for d in deps.get(n).into_iter().flatten() {
                    if d == start {
                        if reported.insert(*start) {
                            self.err(
                                site,
                                "value_cycle",
                                format!("value dependency cycle includes {start}"),
                                &site.base.key("values").key(*start),
                            );
                        }
                    } else if visited.insert(*d) {
                        stack.push(d);
                    }
                }
            }
        }
    }

    fn step(&mut self, t: &Trigger, index: usize, s: &Step, site: &TriggerSite<'_>, sp: &Path) {
        // environment
        match &s.environment {
            EnvironmentRef::Named(name) => {
                self.check_environment_name(name, site, &sp.key("environment"), s)
            }
            EnvironmentRef::Expression(tpl) => {
                let p = sp.key("environment");
                self.template_paths(t, Some(index), tpl, Field::Authority, site, &p);
                if let Some(choices) =
                    self.authority_choices(t, index, tpl, site, &p, &s.id, "environment")
                {
                    for c in choices {
                        match c.as_str() {
                            Some(name) => self.check_environment_name(name, site, &p, s),
                            None => self.err(site, "invalid_value", format!("step {} environment may resolve to {c}, which is not an environment name", s.id), &p),
                        }
                    }
                }
            }
        }
        // agent
        match &s.agent {
            AgentRef::Named(name) => {
                if self.config.agent(name).is_none() && !self.agents_broken {
                    let known: Vec<&str> =
                        self.config.agents.iter().map(|a| a.name.as_str()).collect();
                    let msg = if known.is_empty() {
                        format!(
                            "step {} uses agent {name:?}, but no named agents are defined",
                            s.id
                        )
                    } else {
                        format!(
                            "step {} uses unknown agent {name:?} (named agents: {})",
                            s.id,
                            known.join(", ")
                        )
                    };
                    self.err(site, "unknown_agent", msg, &sp.key("agent"));
                }
            }
            AgentRef::Expression(tpl) => {
                let p = sp.key("agent");
                self.template_paths(t, Some(index), tpl, Field::Authority, site, &p);
                if let Some(choices) =
                    self.authority_choices(t, index, tpl, site, &p, &s.id, "agent")
                {
                    for c in choices {
                        let ok = self.agents_broken
                            || c.as_str().is_some_and(|n| self.config.agent(n).is_some());
                        if !ok {
                            self.err(
                                site,
                                "unknown_agent",
                                format!(
                                    "step {} agent may resolve to {c}, which is not a named agent",
                                    s.id
                                ),
                                &p,
                            );
                        }
                    }
                }
            }
            AgentRef::Inline(_) => {}
        }
        // if
        if let Some(c) = &s.condition {
            let p = sp.key("if");
            self.template_paths(t, Some(index), c, Field::If, site, &p);
            for (e, _) in c.expressions() {
                self.enum_comparisons(t, index, e, site, &p);
            }
        }
        // prompt
        for (j, block) in s.prompt.iter().enumerate() {
            if let PromptBlock::Text(tpl) = block {
                let p = sp.key("prompt").index(j).key("text");
                self.template_paths(t, Some(index), tpl, Field::Prompt, site, &p);
            }
        }
        // env
        for (k, tpl) in &s.env {
            let p = sp.key("env").key(k.clone());
            self.template_paths(t, Some(index), tpl, Field::Env, site, &p);
            if s.github.is_some() && is_reserved_github_env(k) {
                self.err(
                    site,
                    "reserved_env_key",
                    format!(
                        "env.{k}: reserved by the step-level github authority; remove it from env"
                    ),
                    &p,
                );
            }
        }
        // github
        if let Some(g) = &s.github
            && t.source() != "github"
            && g.repositories.is_none()
        {
            self.err(site, "github_repositories_required", format!("trigger {} step {} github.repositories is required for non-GitHub triggers; list the repositories explicitly", t.name, s.id), &sp.key("github"));
        }
    }

    fn check_environment_name(&mut self, name: &str, site: &TriggerSite<'_>, p: &Path, s: &Step) {
        match self.config.environment(name) {
            None if self.environments_broken => {}
            None => {
                let known: Vec<&str> = self
                    .config
                    .environments
                    .iter()
                    .map(|e| e.name.as_str())
                    .collect();
                self.err(
                    site,
                    "unknown_environment",
                    format!(
                        "step {} uses unknown environment {name:?} (environments: {})",
                        s.id,
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    ),
                    p,
                );
            }
            Some(e) if !matches!(e.kind, EnvironmentKind::Daemon { .. }) => {
                self.err(
                    site,
                    "non_daemon_environment",
                    format!(
                        "step {} environment {name:?} must be a daemon environment (it is {})",
                        s.id,
                        e.kind.name()
                    ),
                    p,
                );
            }
            Some(_) => {}
        }
    }

    /// Checks every path an expression template reads.
    fn template_paths(
        &mut self,
        t: &Trigger,
        step: Option<usize>,
        tpl: &Template,
        field: Field,
        site: &TriggerSite<'_>,
        p: &Path,
    ) {
        for (e, _) in tpl.expressions() {
            for (segs, _) in e.paths() {
                self.path(t, step, segs, field, site, p);
            }
        }
    }

    fn path(
        &mut self,
        t: &Trigger,
        step: Option<usize>,
        segs: &[String],
        field: Field,
        site: &TriggerSite<'_>,
        p: &Path,
    ) {
        let joined = segs.join(".");
        let strs: Vec<&str> = segs.iter().map(String::as_str).collect();
        let where_ = field.name();
        match strs.as_slice() {
            ["paseo", "prompt"] => {
                if field == Field::Authority {
                    self.err(
                        site,
                        "prompt_in_authority",
                        format!(
                            "{} uses paseo.prompt in an authority-bearing field",
                            describe(t, step)
                        ),
                        p,
                    );
                } else if field == Field::Env {
                    self.err(
                        site,
                        "unsupported_path",
                        "env values may contain only ${{ paseo.connections.<slug>.<value> }}",
                        p,
                    );
                }
            }
            ["paseo", "context"] => {
                if field != Field::Prompt {
                    self.err(
                        site,
                        "context_outside_prompt",
                        format!(
                            "{} {where_} uses paseo.context outside a step prompt",
                            describe(t, step)
                        ),
                        p,
                    );
                }
            }
            ["paseo", "execution", "id"] => {
                self.err(
                    site,
                    "execution_outside_new_branch",
                    format!(
                        "{} {where_} uses paseo.execution outside environment worktree.newBranch",
                        describe(t, step)
                    ),
                    p,
                );
            }
            ["paseo", "connections", slug, _value] => {
                if field != Field::Env {
                    self.err(
                        site,
                        "unsupported_path",
                        format!(
                            "paseo.connections may be read only in step env values, not in {where_}"
                        ),
                        p,
                    );
                } else if !crate::hub::is_slug(slug) {
                    self.err(
                        site,
                        "unsupported_path",
                        format!("connection {slug:?} in {joined} is not a slug"),
                        p,
                    );
                }
            }
            ["paseo", "inputs", name] => {
                if field == Field::Env {
                    self.err(
                        site,
                        "unsupported_path",
                        "env values may contain only ${{ paseo.connections.<slug>.<value> }}",
                        p,
                    );
                } else if !t.inputs.iter().any(|i| i.name == *name) {
                    self.err(
                        site,
                        "unknown_input",
                        format!(
                            "{joined} reads input {name:?}, which trigger {} does not declare",
                            t.name
                        ),
                        p,
                    );
                }
            }
            ["values", name] => {
                if field == Field::Env {
                    self.err(
                        site,
                        "unsupported_path",
                        "env values may contain only ${{ paseo.connections.<slug>.<value> }}",
                        p,
                    );
                } else if !t.values.iter().any(|(k, _)| k == name) {
                    self.err(
                        site,
                        "unknown_value",
                        format!(
                            "{joined} reads value {name:?}, which trigger {} does not define",
                            t.name
                        ),
                        p,
                    );
                }
            }
            ["steps", id, "outputs", rest @ ..] => {
                if field == Field::Env {
                    self.err(
                        site,
                        "unsupported_path",
                        "env values may contain only ${{ paseo.connections.<slug>.<value> }}",
                        p,
                    );
                    return;
                }
                let Some(target) = t.steps.iter().position(|s| s.id == *id) else {
                    self.err(
                        site,
                        "unknown_step_reference",
                        format!(
                            "{} {where_} references unknown step {id}",
                            describe(t, step)
                        ),
                        p,
                    );
                    return;
                };
                if let Some(cur) = step
                    && target >= cur
                {
                    self.err(
                        site,
                        "forward_step_reference",
                        format!(
                            "{} {where_} cannot reference forward step {id}",
                            describe(t, step)
                        ),
                        p,
                    );
                    return;
                }
                let Some(schema) = t.steps.get(target).and_then(|s| s.output_schema.as_ref())
                else {
                    self.err(
                        site,
                        "step_output_without_schema",
                        format!(
                            "{} {where_} references output from step {id} without an output schema",
                            describe(t, step)
                        ),
                        p,
                    );
                    return;
                };
                if resolve_schema(schema, rest).is_none() {
                    self.err(
                        site,
                        "unknown_output_field",
                        format!("{joined}: step {id}'s output schema does not allow this field"),
                        p,
                    );
                }
            }
            _ => {
                self.err(
                    site,
                    "unsupported_path",
                    format!("unsupported path {joined}"),
                    p,
                );
            }
        }
    }

    /// The finite set of values an authority-bearing template can take;
    /// reports and returns `None` when it is not provably finite.
    #[allow(
        clippy::too_many_arguments,
        reason = "internal helper; the arguments name the site of the finding"
    )]
    fn authority_choices(
        &mut self,
        t: &Trigger,
        step: usize,
        tpl: &Template,
        site: &TriggerSite<'_>,
        p: &Path,
        sid: &str,
        field: &str,
    ) -> Option<Vec<Json>> {
        let Some(expr) = tpl.single_expression() else {
            self.err(site, "non_finite_authority", format!("step {sid} {field} mixes text and expressions; an authority-bearing field must be one expression with finite choices"), p);
            return None;
        };
        let mut visiting = BTreeSet::new();
        match finite_values(t, Some(step), expr, &mut visiting) {
            Some(v) => Some(v),
            None => {
                self.err(site, "non_finite_authority", format!("step {sid} {field} uses agent output without provable finite choices for authority; use a finite enum or const"), p);
                None
            }
        }
    }

    fn enum_comparisons(
        &mut self,
        t: &Trigger,
        step: usize,
        e: &Expr,
        site: &TriggerSite<'_>,
        p: &Path,
    ) {
        match e {
            Expr::Binary { op, lhs, rhs, .. } => {
                if matches!(op, BinOp::Eq | BinOp::Ne) {
                    for (a, b) in [(lhs, rhs), (rhs, lhs)] {
                        if let (Expr::Path { segments, .. }, Expr::Literal { value, .. }) =
                            (a.as_ref(), b.as_ref())
                        {
                            let mut visiting = BTreeSet::new();
                            if let Some(choices) = finite_values(t, Some(step), a, &mut visiting)
                                && !choices.iter().any(|c| loose_eq(c, value))
                            {
                                let list = choices
                                    .iter()
                                    .map(Json::to_string)
                                    .collect::<Vec<_>>()
                                    .join("|");
                                let outcome = if *op == BinOp::Eq {
                                    "is always false"
                                } else {
                                    "is always true"
                                };
                                self.err(
                                    site,
                                    "unreachable_comparison",
                                    format!(
                                        "{} {} {value} {outcome}: {} is one of {list}",
                                        segments.join("."),
                                        op.as_str(),
                                        segments.join(".")
                                    ),
                                    p,
                                );
                            }
                        }
                    }
                }
                self.enum_comparisons(t, step, lhs, site, p);
                self.enum_comparisons(t, step, rhs, site, p);
            }
            Expr::Not { operand, .. } => self.enum_comparisons(t, step, operand, site, p),
            Expr::Literal { .. } | Expr::Path { .. } => {}
        }
    }
}

fn describe(t: &Trigger, step: Option<usize>) -> String {
    match step.and_then(|i| t.steps.get(i)) {
        Some(s) => format!("step {}", s.id),
        None => format!("trigger {}", t.name),
    }
}

const RESERVED_GITHUB_ENV: &[&str] = &[
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_TERMINAL_PROMPT",
];

fn is_reserved_github_env(k: &str) -> bool {
    RESERVED_GITHUB_ENV.contains(&k)
        || ["GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"]
            .iter()
            .any(|prefix| {
                k.strip_prefix(prefix)
                    .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            })
}

/// The sub-schema at `segs` below `schema` (following `properties`, local
/// `$ref`s and `allOf`), or `None` when the schema forbids that field.
/// Returns an empty object (any value) when the schema does not say.
pub(crate) fn resolve_schema<'s, S: AsRef<str>>(schema: &'s Json, segs: &[S]) -> Option<&'s Json> {
    let mut cur = deref(schema, schema, 0)?;
    for seg in segs {
        let props = cur.get("properties");
        match props.and_then(|p| p.get(seg.as_ref())) {
            Some(next) => cur = deref(schema, next, 0)?,
            None => {
                if cur.get("additionalProperties") == Some(&Json::Bool(false)) {
                    return None;
                }
                match cur.get("additionalProperties") {
                    Some(ap @ Json::Object(_)) => cur = deref(schema, ap, 0)?,
                    _ => return Some(&EMPTY),
                }
            }
        }
    }
    Some(cur)
}

static EMPTY: Json = Json::Null;

fn deref<'s>(root: &'s Json, node: &'s Json, depth: usize) -> Option<&'s Json> {
    if depth > 16 {
        return Some(node);
    }
    match node.get("$ref").and_then(Json::as_str) {
        Some(r) => {
            let pointer = r.strip_prefix('#')?;
            let target = root.pointer(pointer)?;
            deref(root, target, depth + 1)
        }
        None => Some(node),
    }
}

fn schema_choices(s: &Json) -> Option<Vec<Json>> {
    if let Some(c) = s.get("const") {
        return Some(vec![c.clone()]);
    }
    if let Some(Json::Array(e)) = s.get("enum") {
        return Some(e.clone());
    }
    match s.get("type") {
        Some(Json::String(t)) if t == "boolean" => Some(vec![Json::Bool(true), Json::Bool(false)]),
        Some(Json::String(t)) if t == "null" => Some(vec![Json::Null]),
        _ => None,
    }
}

/// The finite set of values `e` can take, when provable.
fn finite_values<'t>(
    t: &'t Trigger,
    step: Option<usize>,
    e: &Expr,
    visiting: &mut BTreeSet<&'t str>,
) -> Option<Vec<Json>> {
    match e {
        Expr::Literal { value, .. } => Some(vec![value.clone()]),
        Expr::Not { .. }
        | Expr::Binary {
            op: BinOp::Eq | BinOp::Ne,
            ..
        } => Some(vec![Json::Bool(true), Json::Bool(false)]),
        Expr::Binary { lhs, rhs, .. } => {
            let mut a = finite_values(t, step, lhs, visiting)?;
            let b = finite_values(t, step, rhs, visiting)?;
            for v in b {
                if !a.contains(&v) {
                    a.push(v);
                }
            }
            Some(a)
        }
        Expr::Path { segments, .. } => {
            let strs: Vec<&str> = segments.iter().map(String::as_str).collect();
            match strs.as_slice() {
                ["paseo", "inputs", name] => {
                    let decl = t.inputs.iter().find(|i| i.name == *name)?;
                    let mut c = decl.choices.clone()?;
                    // A missing optional input reads null.
                    if decl.required != Some(true) && decl.default.is_none() {
                        c.push(Json::Null);
                    }
                    Some(c)
                }
                ["steps", id, "outputs", rest @ ..] => {
                    let target = t.steps.iter().position(|s| s.id == *id)?;
                    if step.is_some_and(|cur| target >= cur) {
                        return None;
                    }
                    let schema = t.steps.get(target)?.output_schema.as_ref()?;
                    let sub = resolve_schema(schema, rest)?;
                    schema_choices(sub)
                }
                ["values", name] => {
                    let (key, tpl) = t.values.iter().find(|(k, _)| k == name)?;
                    if !visiting.insert(key.as_str()) {
                        return None;
                    }
                    let r = finite_values(t, step, tpl.single_expression()?, visiting);
                    visiting.remove(key.as_str());
                    r
                }
                _ => None,
            }
        }
    }
}
