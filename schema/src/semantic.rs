//! Cross-reference checks over a parsed [`HubConfig`]: names, step and value
//! references, expression paths, authority finiteness and enum comparisons.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value as Json;

use crate::diagnostic::{Diagnostic, Path};
use crate::expr::{BinOp, Expr, Template, TemplatePart, interpolated, json_text, loose_eq, truthy};
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
    /// Included partials, each parsed once, with the work of checking it
    /// or why it does not parse.
    partials: BTreeMap<String, Result<(std::rc::Rc<Template>, usize), String>>,
    /// `(trigger, step, partial)` includes already checked: a partial
    /// included twice by one step has the same findings.
    included: BTreeSet<(String, usize, String)>,
    /// Expression paths of partials still to check before the hardening
    /// limit: hostile includes must not multiply a large partial's work.
    partial_budget: usize,
    /// The limit was reported (once).
    partial_limit_reported: bool,
}

/// The most expressions and paths of included partials a bundle may make
/// the check read, over all includes.
pub(crate) const MAX_PARTIAL_PATH_CHECKS: usize = 1_000_000;

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
            partials: BTreeMap::new(),
            included: BTreeSet::new(),
            partial_budget: MAX_PARTIAL_PATH_CHECKS,
            partial_limit_reported: false,
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
    let (pos, end) = root.span_of(path);
    let d = if severity_error {
        Diagnostic::error(code, message)
    } else {
        Diagnostic::warning(code, message)
    };
    d.in_file(site_file)
        .at(pos.line, pos.column)
        .until(end.line, end.column)
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
            match block {
                PromptBlock::Text(tpl) => {
                    let p = sp.key("prompt").index(j).key("text");
                    self.template_paths(t, Some(index), tpl, Field::Prompt, site, &p);
                }
                PromptBlock::Include(inc) => {
                    let p = sp.key("prompt").index(j).key("include");
                    self.include(t, index, s, j, inc, site, &p);
                }
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

    /// An `include:` block. A single file has no partials (the Hub
    /// compiles it without a partial bundle and refuses every include); in
    /// a bundle the partial's text is a prompt template, checked as the
    /// Hub does (`validateTemplate` over the resolved content). A missing
    /// partial is reported by the bundle.
    #[allow(
        clippy::too_many_arguments,
        reason = "internal helper; the arguments name the site of the finding"
    )]
    fn include(
        &mut self,
        t: &Trigger,
        index: usize,
        s: &Step,
        block: usize,
        inc: &str,
        site: &TriggerSite<'_>,
        p: &Path,
    ) {
        if t.file.is_none() {
            self.err(
                site,
                "include_in_single_file",
                format!(
                    "trigger {} step {} prompt[{block}].include: a single-file workflow has no prompt partial bundle, so no include can be resolved",
                    t.name, s.id
                ),
                p,
            );
            return;
        }
        let Ok(target) = crate::bundle::include_target(inc) else {
            return;
        };
        let Some(partial) = self.config.partials.iter().find(|pt| pt.path == target) else {
            return;
        };
        if !self
            .included
            .insert((t.name.clone(), index, target.clone()))
        {
            return;
        }
        let parsed = self
            .partials
            .entry(target.clone())
            .or_insert_with(|| {
                let tpl = Template::parse(&partial.text)
                    .map_err(|e| format!("{} (at byte {} of the partial)", e.message, e.offset))?;
                let work = tpl
                    .expressions()
                    .map(|(e, _)| 1 + e.paths().len())
                    .sum::<usize>()
                    .max(1);
                Ok((std::rc::Rc::new(tpl), work))
            })
            .clone();
        let (tpl, work) = match parsed {
            Ok(found) => found,
            Err(why) => {
                self.err(
                site,
                "invalid_expression",
                format!(
                    "step {} prompt[{block}]: included partial {target}: invalid expression: {why}",
                    s.id
                ),
                p,
            );
                return;
            }
        };
        if work > self.partial_budget {
            if !self.partial_limit_reported {
                self.partial_limit_reported = true;
                self.err(
                    site,
                    "yaml_limit_exceeded",
                    format!(
                        "the bundle's includes make more than {MAX_PARTIAL_PATH_CHECKS} expressions and paths of prompt partials to check; include large partials less often"
                    ),
                    p,
                );
            }
            return;
        }
        self.partial_budget -= work;
        let before = self.diags.len();
        self.template_paths(t, Some(index), &tpl, Field::Prompt, site, p);
        for d in self.diags.get_mut(before..).into_iter().flatten() {
            d.message = format!("{} (in included partial {target})", d.message);
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
            // `steps.<id>.outputs` alone is not a path (the Hub's parser
            // needs at least one field after `outputs`).
            ["steps", id, "outputs", rest @ ..] if !rest.is_empty() => {
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

    /// The finite set of values an authority-bearing template can take,
    /// as the Hub computes it (`finiteTemplateValues`); reports and
    /// returns `None` when it is not provably finite. A template that is
    /// exactly one expression yields that expression's values; text around
    /// or between expressions yields every concatenation, each value
    /// interpolated as the Hub does.
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
        if tpl
            .expressions()
            .any(|(e, _)| !finite_authority_shape(t, e))
        {
            self.err(site, "non_finite_authority", format!("step {sid} {field} uses an agent-produced authority without provable finite choices; use a finite enum or const"), p);
            return None;
        }
        match template_choices(t, step, tpl) {
            Ok(v) => Some(v),
            Err(Choices::NotFinite) => {
                self.err(site, "non_finite_authority", format!("step {sid} {field} uses agent output without provable finite choices for authority; use a finite enum or const"), p);
                None
            }
            Err(Choices::TooMany) => {
                self.err(site, "choice_limit_exceeded", format!("step {sid} {field} can take more than {MAX_CHOICES} values; palisade stops counting there"), p);
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

/// The most values palisade enumerates for one authority-bearing field
/// (or one sub-expression of it); beyond it the field is refused with
/// `choice_limit_exceeded` rather than enumerated without bound.
pub(crate) const MAX_CHOICES: usize = 4096;

/// Why a finite set of values could not be given.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Choices {
    /// Some path is not provably finite.
    NotFinite,
    /// More than [`MAX_CHOICES`] values.
    TooMany,
}

/// The Hub's `isFiniteAuthorityExpression` beyond the paths' own
/// finiteness: a `null` literal is no authority, except under `!`, `==`
/// or `!=`, which always yield a boolean.
fn finite_authority_shape(t: &Trigger, e: &Expr) -> bool {
    let mut visiting = BTreeSet::new();
    shape(t, e, &mut visiting)
}

fn shape<'t>(t: &'t Trigger, e: &Expr, visiting: &mut BTreeSet<&'t str>) -> bool {
    match e {
        Expr::Literal { value, .. } => !value.is_null(),
        Expr::Not { .. }
        | Expr::Binary {
            op: BinOp::Eq | BinOp::Ne,
            ..
        } => true,
        Expr::Binary { lhs, rhs, .. } => shape(t, lhs, visiting) && shape(t, rhs, visiting),
        Expr::Path { segments, .. } => match segments.as_slice() {
            [ns, name] if ns == "values" => {
                let Some((key, tpl)) = t.values.iter().find(|(k, _)| k == name) else {
                    return true;
                };
                if !visiting.insert(key.as_str()) {
                    return true;
                }
                let ok = tpl.expressions().all(|(e, _)| shape(t, e, visiting));
                visiting.remove(key.as_str());
                ok
            }
            _ => true,
        },
    }
}

/// The values of an authority-bearing template (see
/// `Checker::authority_choices`).
fn template_choices(t: &Trigger, step: usize, tpl: &Template) -> Result<Vec<Json>, Choices> {
    if let [TemplatePart::Expr { expr, .. }] = tpl.parts.as_slice() {
        let mut visiting = BTreeSet::new();
        return finite_values(t, Some(step), expr, &mut visiting).ok_or(Choices::NotFinite);
    }
    let mut results = vec![String::new()];
    for part in &tpl.parts {
        match part {
            TemplatePart::Text(text) => results.iter_mut().for_each(|r| r.push_str(text)),
            TemplatePart::Expr { expr, .. } => {
                let mut visiting = BTreeSet::new();
                let values =
                    finite_values(t, Some(step), expr, &mut visiting).ok_or(Choices::NotFinite)?;
                if results.len().saturating_mul(values.len()) > MAX_CHOICES {
                    return Err(Choices::TooMany);
                }
                let mut next = Vec::with_capacity(results.len() * values.len());
                for prefix in &results {
                    for v in &values {
                        let s = format!("{prefix}{}", interpolated(v));
                        if !next.contains(&s) {
                            next.push(s);
                        }
                    }
                }
                results = next;
            }
        }
    }
    Ok(results.into_iter().map(Json::String).collect())
}

/// The sub-schema at `path` as the Hub's `finiteSchemaChoices` finds it:
/// through `properties` only, following local `#/…` references (a cycle
/// finds nothing).
fn hub_schema_at<'s>(root: &'s Json, path: &[String]) -> Option<&'s Json> {
    let mut seen = 0usize;
    let mut cur = hub_deref(root, root, &mut seen)?;
    for seg in path {
        let next = cur.as_object()?.get("properties")?.as_object()?.get(seg)?;
        cur = hub_deref(root, next, &mut seen)?;
    }
    Some(cur)
}

fn hub_deref<'s>(root: &'s Json, mut node: &'s Json, seen: &mut usize) -> Option<&'s Json> {
    while let Some(r) = node.as_object()?.get("$ref") {
        let r = r.as_str()?;
        // A reference chain longer than any acyclic one in a bounded
        // schema is a cycle; the Hub's seen-set finds nothing there too.
        *seen += 1;
        if *seen > 64 {
            return None;
        }
        let pointer = r.strip_prefix('#').filter(|p| p.starts_with('/'))?;
        node = root.pointer(pointer)?;
    }
    node.is_object().then_some(node)
}

/// A non-empty `enum`, else a `const`, as the Hub's `finiteChoices`.
fn schema_choices(s: &Json) -> Option<Vec<Json>> {
    if let Some(Json::Array(e)) = s.get("enum")
        && !e.is_empty()
    {
        return Some(e.clone());
    }
    s.get("const").map(|c| vec![c.clone()])
}

/// Values, each once (by their JSON text, as the Hub's `uniqueJsonValues`).
fn unique(values: Vec<Json>) -> Vec<Json> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for v in values {
        if seen.insert(json_text(&v)) {
            out.push(v);
        }
    }
    out
}

/// The finite set of values `e` can take, when provable, computed as the
/// Hub's `finiteExpressionValues`: every path must be finite (input
/// `choices`, plus `null` for an optional input without a default; a
/// schema `enum` or `const`; a value's own values), and operators combine
/// every pair of operand values as JavaScript evaluates them. `None` also
/// when a set would exceed [`MAX_CHOICES`].
fn finite_values<'t>(
    t: &'t Trigger,
    step: Option<usize>,
    e: &Expr,
    visiting: &mut BTreeSet<&'t str>,
) -> Option<Vec<Json>> {
    match e {
        Expr::Literal { value, .. } => Some(vec![value.clone()]),
        Expr::Not { operand, .. } => {
            let values = finite_values(t, step, operand, visiting)?;
            Some(unique(
                values.iter().map(|v| Json::Bool(!truthy(v))).collect(),
            ))
        }
        Expr::Binary { op, lhs, rhs, .. } => {
            let a = finite_values(t, step, lhs, visiting)?;
            let b = finite_values(t, step, rhs, visiting)?;
            if a.len().saturating_mul(b.len()) > MAX_CHOICES {
                return None;
            }
            let mut out = Vec::with_capacity(a.len() * b.len());
            for l in &a {
                for r in &b {
                    out.push(match op {
                        BinOp::And if truthy(l) => r.clone(),
                        BinOp::And => l.clone(),
                        BinOp::Or if truthy(l) => l.clone(),
                        BinOp::Or => r.clone(),
                        BinOp::Coalesce if l.is_null() => r.clone(),
                        BinOp::Coalesce => l.clone(),
                        BinOp::Eq => Json::Bool(json_text(l) == json_text(r)),
                        BinOp::Ne => Json::Bool(json_text(l) != json_text(r)),
                    });
                }
            }
            Some(unique(out))
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
                ["steps", id, "outputs", rest @ ..] if !rest.is_empty() => {
                    let target = t.steps.iter().position(|s| s.id == *id)?;
                    if step.is_some_and(|cur| target >= cur) {
                        return None;
                    }
                    let schema = t.steps.get(target)?.output_schema.as_ref()?;
                    let fields: Vec<String> = rest.iter().map(|s| (*s).to_owned()).collect();
                    schema_choices(hub_schema_at(schema, &fields)?)
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

#[cfg(test)]
mod tests;
