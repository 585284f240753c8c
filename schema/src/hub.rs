//! Strict parsing of hub workflows into [`HubConfig`], in both layouts.
//!
//! The walker visits the YAML node tree once, reporting every finding
//! (unknown keys, wrong types, bad enum values, durations, removed fields)
//! and building the typed model from whatever is well formed. The semantic
//! checks of [`crate::check`] then run over the model.

use crate::diagnostic::Diagnostic;
use crate::expr::Template;
use crate::lazy_path::Lp;
use crate::model::{
    Agent, AgentRef, AllowOutput, Duration, Environment, EnvironmentKind, EnvironmentRef, Filters,
    GithubAuthority, GithubLevel, InputDecl, InputType, MAX_DURATION_MS, NamedAgent, PromptBlock,
    Step, Trigger, Worktree,
};
use crate::yaml::{Key, Node, Value as Y};

/// The walker's state: the current file and the findings so far.
pub(crate) struct Walker<'d> {
    pub(crate) file: String,
    pub(crate) diags: &'d mut Vec<Diagnostic>,
}

/// `^[a-z][a-z0-9_-]*$`
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('a'..='z'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_' | '-'))
}

/// `^[a-z][a-z0-9_-]*\.[a-z][a-z0-9_-]*$`
pub fn is_event_name(s: &str) -> bool {
    match s.split_once('.') {
        Some((a, b)) => is_identifier(a) && is_identifier(b),
        None => false,
    }
}

/// `^[a-z0-9]+(?:-[a-z0-9]+)*$`
pub fn is_slug(s: &str) -> bool {
    !s.is_empty()
        && s.split('-').all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

/// Trigger-level fields that moved onto steps.
const TRIGGER_LEVEL_REMOVED: &[&str] = &[
    "environment",
    "agent",
    "prompt",
    "idle_timeout",
    "auto_archive",
    "allow_outputs",
];

/// Top-level keys of a workflow file that belong elsewhere.
const NOT_IN_WORKFLOW_FILE: &[&str] = &[
    "uses",
    "workflow",
    "workflows",
    "call",
    "environment",
    "agent",
];

impl Walker<'_> {
    /// Whether an error (not a warning) was reported since `before` that
    /// leaves the node ill formed. An unknown key under an agent's
    /// `options` does not: the options are kept as JSON, and a check for a
    /// newer daemon softens it to a warning (options::OptionsTarget). The
    /// error still refuses the document, as every parser returns a model
    /// only without errors.
    pub(crate) fn errors_since(&self, before: usize) -> bool {
        self.diags.get(before..).is_some_and(|d| {
            d.iter()
                .any(|d| d.is_error() && !crate::options::is_unknown_option_key(d))
        })
    }

    /// The Hub's zod (4.4.3) skips a `__proto__` key in every object and
    /// record it parses (js-yaml makes it an own property; zod never reads
    /// it): the key is ignored, not refused. palisade drops it with the
    /// warning `ignored_key`. Returns whether `k` is that key.
    pub(crate) fn proto_key(&mut self, k: &Key, path: &Lp<'_>) -> bool {
        if k.text != "__proto__" {
            return false;
        }
        self.diags.push(
            Diagnostic::warning("ignored_key", "the key \"__proto__\" is ignored")
                .in_file(self.file.clone())
                .at(k.pos.line, k.pos.column)
                .with_path(path.key("__proto__").to_path())
                .with_help(
                    "the Hub's schema parser skips __proto__ keys without an error; remove it",
                ),
        );
        true
    }

    pub(crate) fn error(
        &mut self,
        code: &'static str,
        message: impl Into<String>,
        path: &Lp<'_>,
        pos_node: &Node,
    ) {
        self.diags.push(
            Diagnostic::error(code, message)
                .in_file(self.file.clone())
                .at(pos_node.pos.line, pos_node.pos.column)
                .until(pos_node.end.line, pos_node.end.column)
                .with_path(path.to_path()),
        );
    }

    pub(crate) fn error_at_key(
        &mut self,
        code: &'static str,
        message: impl Into<String>,
        path: &Lp<'_>,
        key: &Key,
    ) {
        self.diags.push(
            Diagnostic::error(code, message)
                .in_file(self.file.clone())
                .at(key.pos.line, key.pos.column)
                .until(key.end.line, key.end.column)
                .with_path(path.to_path()),
        );
    }

    /// Adds a did-you-mean help to the finding just reported when `found`
    /// is close to one of `known` (an unknown key or enum value).
    pub(crate) fn suggest(&mut self, found: &str, known: &[&str]) {
        if let (Some(help), Some(d)) = (
            crate::suggest::did_you_mean(found, known),
            self.diags.last_mut(),
        ) && d.help.is_none()
        {
            d.help = Some(help);
        }
    }

    /// Suggests among `known` for an enum value `node` that is a string.
    pub(crate) fn suggest_value(&mut self, node: &Node, known: &[&str]) {
        if let Y::String(s) = &node.value {
            self.suggest(s, known);
        }
    }

    pub(crate) fn type_error(&mut self, expected: &str, path: &Lp<'_>, node: &Node) {
        self.error(
            "invalid_type",
            format!(
                "Invalid input: expected {expected}, received {}",
                node.value.type_name()
            ),
            path,
            node,
        );
    }

    /// Checks that `node` is a mapping; reports unknown keys against
    /// `allowed`, with hints for removed fields. Returns the entries.
    pub(crate) fn object<'n>(
        &mut self,
        node: &'n Node<'n>,
        path: &Lp<'_>,
        allowed: &[&str],
        removed: &dyn Fn(&str) -> Option<(&'static str, String)>,
    ) -> Option<&'n [(Key<'n>, Node<'n>)]> {
        let Y::Map(entries) = &node.value else {
            self.type_error("object", path, node);
            return None;
        };
        for (k, _) in entries {
            if allowed.contains(&k.text.as_ref()) || self.proto_key(k, path) {
                continue;
            }
            if k.text == "timeout" {
                // The same finding as `hub_rules::removed_timeout`, which
                // covers every depth; the two are deduplicated.
                let d = crate::hub_rules::timeout_diagnostic(
                    &self.file,
                    k.pos.line,
                    k.pos.column,
                    &path.to_path(),
                );
                self.diags.push(d);
            } else if let Some((code, message)) = removed(&k.text) {
                self.error_at_key(code, message, &path.key(&k.text), k);
            } else {
                self.error_at_key(
                    "unknown_key",
                    format!("Unrecognized key: {:?}", k.text),
                    path,
                    k,
                );
                self.suggest(&k.text, allowed);
            }
        }
        Some(entries)
    }

    pub(crate) fn required<'n>(
        &mut self,
        obj: &'n Node<'n>,
        key: &str,
        path: &Lp<'_>,
    ) -> Option<&'n Node<'n>> {
        self.required_as(obj, key, path, || format!("missing required key {key:?}"))
    }

    /// [`Self::required`] with the caller's wording of the finding.
    pub(crate) fn required_as<'n>(
        &mut self,
        obj: &'n Node<'n>,
        key: &str,
        path: &Lp<'_>,
        message: impl FnOnce() -> String,
    ) -> Option<&'n Node<'n>> {
        let found = obj.get(key);
        if found.is_none() {
            self.error("missing_field", message(), &path.key(key), obj);
        }
        found
    }

    pub(crate) fn string(&mut self, node: &Node, path: &Lp<'_>) -> Option<String> {
        match &node.value {
            Y::String(s) if s.is_empty() => {
                self.error(
                    "invalid_value",
                    "Too small: expected string to have >=1 characters",
                    path,
                    node,
                );
                None
            }
            Y::String(s) => Some(s.to_string()),
            _ => {
                self.type_error("string", path, node);
                None
            }
        }
    }

    pub(crate) fn any_string(&mut self, node: &Node, path: &Lp<'_>) -> Option<String> {
        match &node.value {
            Y::String(s) => Some(s.to_string()),
            _ => {
                self.type_error("string", path, node);
                None
            }
        }
    }

    pub(crate) fn opt_string(&mut self, obj: &Node, key: &str, path: &Lp<'_>) -> Option<String> {
        obj.get(key).and_then(|n| self.string(n, &path.key(key)))
    }

    pub(crate) fn identifier(&mut self, node: &Node, path: &Lp<'_>, what: &str) -> Option<String> {
        let s = self.string(node, path)?;
        if !is_identifier(&s) {
            self.error(
                "invalid_identifier",
                format!("{what} {s:?} must match ^[a-z][a-z0-9_-]*$"),
                path,
                node,
            );
            return None;
        }
        Some(s)
    }

    pub(crate) fn string_list(
        &mut self,
        node: &Node,
        path: &Lp<'_>,
        non_empty: bool,
    ) -> Option<Vec<String>> {
        let Y::Seq(items) = &node.value else {
            self.type_error("array", path, node);
            return None;
        };
        if non_empty && items.is_empty() {
            self.error(
                "invalid_value",
                "Too small: expected array to have >=1 items",
                path,
                node,
            );
        }
        let mut out = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match self.string(item, &path.index(i)) {
                Some(s) => out.push(s),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    pub(crate) fn bool(&mut self, node: &Node, path: &Lp<'_>) -> Option<bool> {
        match node.value {
            Y::Bool(b) => Some(b),
            _ => {
                self.type_error("boolean", path, node);
                None
            }
        }
    }

    /// A duration field; `what` names it in messages (`trigger t step s max_runtime`).
    pub(crate) fn duration(
        &mut self,
        node: &Node,
        path: &Lp<'_>,
        what: &str,
        max_ms: u64,
        max_text: &str,
    ) -> Option<Duration> {
        let text = match &node.value {
            Y::String(s) => s.to_string(),
            Y::Number(n) => n.to_string(),
            _ => {
                self.type_error("string", path, node);
                return None;
            }
        };
        let Some(d) = Duration::parse(&text) else {
            self.diags.push(
                Diagnostic::error(
                    "invalid_duration",
                    format!("{what} must be a positive duration such as 30s or 2h (got {text:?})"),
                )
                .in_file(self.file.clone())
                .at(node.pos.line, node.pos.column)
.until(node.end.line, node.end.column)
                .with_path(path.to_path())
                .with_help("write a whole number followed by ms, s, m or h; no decimals, zero, compound forms or days"),
            );
            return None;
        };
        if d.millis > max_ms {
            self.error(
                "duration_too_long",
                format!("{what} must not exceed {max_text}"),
                path,
                node,
            );
            return None;
        }
        Some(d)
    }

    pub(crate) fn template(&mut self, node: &Node, path: &Lp<'_>) -> Option<Template> {
        let s = self.any_string(node, path)?;
        self.parse_template(&s, path, node)
    }

    /// A field the Hub reads as exactly one expression, bare or in one
    /// `${{ … }}` ([`Template::parse_unwrapped`]).
    pub(crate) fn expression(&mut self, node: &Node, path: &Lp<'_>) -> Option<Template> {
        let s = self.any_string(node, path)?;
        match Template::parse_unwrapped(&s) {
            Ok(t) => Some(t),
            Err(e) => {
                // A fine template that is not one expression: say so.
                let message = if Template::parse(&s).is_ok_and(|t| t.has_expressions()) {
                    let field = match path.to_path().0.last() {
                        Some(crate::PathSegment::Key(k)) if k == "if" => "if".to_owned(),
                        Some(crate::PathSegment::Key(k)) => format!("value {k}"),
                        _ => "the value".to_owned(),
                    };
                    format!(
                        "{field} must be exactly one expression, bare or in one ${{{{ … }}}} spanning the value, without text around it"
                    )
                } else {
                    format!(
                        "invalid expression: {} (at byte {} of the value)",
                        e.message, e.offset
                    )
                };
                self.error("invalid_expression", message, path, node);
                None
            }
        }
    }

    /// A step `env` value: a connection template
    /// ([`Template::parse_connections`]).
    pub(crate) fn connection_template(&mut self, node: &Node, path: &Lp<'_>) -> Option<Template> {
        let s = self.any_string(node, path)?;
        match Template::parse_connections(&s) {
            Ok(t) => Some(t),
            Err(e) => {
                let code = if e.message.starts_with("unterminated") {
                    "invalid_expression"
                } else {
                    "unsupported_path"
                };
                self.error(
                    code,
                    format!("{} (at byte {} of the value)", e.message, e.offset),
                    path,
                    node,
                );
                None
            }
        }
    }

    pub(crate) fn parse_template(
        &mut self,
        s: &str,
        path: &Lp<'_>,
        node: &Node,
    ) -> Option<Template> {
        match Template::parse(s) {
            Ok(t) => Some(t),
            Err(e) => {
                self.error(
                    "invalid_expression",
                    format!(
                        "invalid expression: {} (at byte {} of the value)",
                        e.message, e.offset
                    ),
                    path,
                    node,
                );
                None
            }
        }
    }

    // ----- environments -------------------------------------------------

    /// An environment body. `name_from_key` is set in bundles (map form).
    pub(crate) fn environment(
        &mut self,
        node: &Node,
        path: &Lp<'_>,
        name_from_key: Option<&str>,
    ) -> Option<Environment> {
        let Y::Map(_) = &node.value else {
            self.type_error("object", path, node);
            return None;
        };
        let kind_node = self.required(node, "kind", path)?;
        let kind = self.string(kind_node, &path.key("kind"))?;
        let mut allowed: Vec<&str> = match kind.as_str() {
            "daemon" => vec!["kind", "daemon", "cwd", "worktree"],
            "fly" | "docker" => vec!["kind", "image", "cwd"],
            _ => {
                self.error(
                    "invalid_value",
                    "Invalid input: expected one of \"daemon\"|\"fly\"|\"docker\"",
                    &path.key("kind"),
                    kind_node,
                );
                self.suggest(&kind, &["daemon", "fly", "docker"]);
                return None;
            }
        };
        if name_from_key.is_none() {
            allowed.push("name");
        }
        let in_bundle = name_from_key.is_some();
        self.object(node, path, &allowed, &|k| {
            (in_bundle && k == "name").then(|| {
                (
                    "repeated_name",
                    "environment names are map keys and must not be repeated".to_owned(),
                )
            })
        })?;
        let name = match name_from_key {
            Some(n) => {
                if !is_identifier(n) {
                    self.error(
                        "invalid_identifier",
                        format!("environment name {n:?} must match ^[a-z][a-z0-9_-]*$"),
                        path,
                        node,
                    );
                    return None;
                }
                n.to_owned()
            }
            None => {
                let n = self.required(node, "name", path)?;
                self.identifier(n, &path.key("name"), "environment name")?
            }
        };
        let kind = match kind.as_str() {
            "daemon" => {
                let daemon = self
                    .required(node, "daemon", path)
                    .and_then(|n| self.string(n, &path.key("daemon")));
                let cwd = self
                    .required(node, "cwd", path)
                    .and_then(|n| self.string(n, &path.key("cwd")));
                let worktree = match node.get("worktree") {
                    Some(w) => Some(self.worktree(w, &path.key("worktree"))?),
                    None => None,
                };
                EnvironmentKind::Daemon {
                    daemon: daemon?,
                    cwd: cwd?,
                    worktree,
                }
            }
            other => {
                let image = self
                    .required(node, "image", path)
                    .and_then(|n| self.string(n, &path.key("image")))?;
                let cwd = self.opt_string(node, "cwd", path);
                if other == "fly" {
                    EnvironmentKind::Fly { image, cwd }
                } else {
                    EnvironmentKind::Docker { image, cwd }
                }
            }
        };
        Some(Environment { name, kind })
    }

    /// The Hub's `WorktreeTargetSchema` is a discriminated union of plain
    /// (not `.strict()`) zod objects: unknown keys are stripped, not
    /// refused. palisade follows that and warns (`ignored_key`).
    fn worktree_keys(&mut self, node: &Node, path: &Lp<'_>, allowed: &[&str]) {
        let Y::Map(entries) = &node.value else {
            return;
        };
        for (k, _) in entries {
            if allowed.contains(&k.text.as_ref()) {
                continue;
            }
            self.diags.push(
                Diagnostic::warning(
                    "ignored_key",
                    format!("Unrecognized key {:?} under worktree is ignored", k.text),
                )
                .in_file(self.file.clone())
                .at(k.pos.line, k.pos.column)
                .with_path(path.key(&k.text).to_path())
                .with_help(format!(
                    "the Hub strips unknown worktree keys without an error; this mode reads only {}",
                    allowed.join(", ")
                )),
            );
        }
    }

    pub(crate) fn worktree(&mut self, node: &Node, path: &Lp<'_>) -> Option<Worktree> {
        let Y::Map(_) = &node.value else {
            self.type_error("object", path, node);
            return None;
        };
        let mode_node = self.required(node, "mode", path)?;
        let mode = self.string(mode_node, &path.key("mode"))?;
        match mode.as_str() {
            "branch-off" => {
                self.worktree_keys(node, path, &["mode", "newBranch", "base"]);
                let nb = self.required(node, "newBranch", path)?;
                let t = self.template(nb, &path.key("newBranch"))?;
                let base = self.opt_string(node, "base", path);
                Some(Worktree::BranchOff {
                    new_branch: t,
                    base,
                })
            }
            "checkout-branch" => {
                self.worktree_keys(node, path, &["mode", "branch"]);
                let b = self.required(node, "branch", path)?;
                Some(Worktree::CheckoutBranch {
                    branch: self.string(b, &path.key("branch"))?,
                })
            }
            "checkout-pr" => {
                self.worktree_keys(node, path, &["mode", "prNumber"]);
                let n = self.required(node, "prNumber", path)?;
                match &n.value {
                    Y::Number(num) if num.as_u64().is_some_and(|v| v > 0) => {
                        Some(Worktree::CheckoutPr {
                            pr_number: num.as_u64().unwrap_or(1),
                        })
                    }
                    _ => {
                        self.error(
                            "invalid_value",
                            "prNumber must be a positive integer",
                            &path.key("prNumber"),
                            n,
                        );
                        None
                    }
                }
            }
            _ => {
                self.error(
                    "invalid_value",
                    "Invalid input: expected one of \"branch-off\"|\"checkout-branch\"|\"checkout-pr\"",
                    &path.key("mode"),
                    mode_node,
                );
                self.suggest_value(mode_node, &["branch-off", "checkout-branch", "checkout-pr"]);
                None
            }
        }
    }

    // ----- agents -------------------------------------------------------

    /// An agent definition (named or inline).
    pub(crate) fn agent(&mut self, node: &Node, path: &Lp<'_>) -> Option<Agent> {
        self.object(
            node,
            path,
            &["provider", "model", "mode", "thinkingOptionId", "options"],
            &|k| {
                (k == "toolPolicy").then(|| {
                    (
                        "unknown_key",
                        "Unrecognized key: \"toolPolicy\"; tool preapproval is not configurable in hub YAML: it is derived from allow_outputs".to_owned(),
                    )
                })
            },
        )?;
        let provider = self
            .required(node, "provider", path)
            .and_then(|n| self.string(n, &path.key("provider")));
        let mut ok = provider.is_some();
        // A provider without a strict option schema cannot preapprove exact
        // MCP tools either: every dispatch of a step that uses it fails with
        // tool_policy_unsupported (which the run plan reports). Without
        // options that is a warning here; with options it is an error, as
        // the options cannot be checked (see options::validate).
        if let Some(p) = &provider
            && !p.contains("${{")
            && crate::options::provider_shape(p).is_none()
            && node.get("options").is_none()
            && let Some(pn) = node.get("provider")
        {
            self.diags.push(
                Diagnostic::warning(
                    "unsupported_provider",
                    format!(
                        "provider {p:?} cannot preapprove exact MCP tools for unattended execution; every step using it fails with tool_policy_unsupported; select claude, codex or opencode"
                    ),
                )
                .in_file(self.file.clone())
                .at(pn.pos.line, pn.pos.column)
.until(pn.end.line, pn.end.column)
                .with_path(path.key("provider").to_path()),
            );
        }
        let mut field = |w: &mut Self, key: &str| -> Option<String> {
            let n = node.get(key)?;
            let s = w.string(n, &path.key(key));
            match &s {
                Some(v) if v.contains("${{") => {
                    w.error(
                        "dynamic_inline_agent",
                        "dynamic inline agent configurations are not allowed; select a complete named agent instead",
                        &path.key(key),
                        n,
                    );
                    ok = false;
                }
                None => ok = false,
                Some(_) => {}
            }
            s
        };
        let model = field(self, "model");
        let mode = field(self, "mode");
        let thinking_option_id = field(self, "thinkingOptionId");
        if let Some(p) = node.get("provider")
            && let Y::String(s) = &p.value
            && s.contains("${{")
        {
            self.error(
                "dynamic_inline_agent",
                "dynamic inline agent configurations are not allowed; select a complete named agent instead",
                &path.key("provider"),
                p,
            );
            ok = false;
        }
        let options = match node.get("options") {
            None => None,
            Some(o) => {
                let opath = path.key("options");
                match &o.value {
                    Y::Map(_) => {
                        if let Some(p) = &provider {
                            let before = self.diags.len();
                            let found =
                                crate::options::findings(&self.file, p, o, &opath.to_path());
                            self.diags.extend(found);
                            // An unknown key leaves the options well formed
                            // (they are kept as JSON): the model is built, so
                            // a check for a newer daemon can soften it (see
                            // options::OptionsTarget); the error itself still
                            // refuses the document.
                            if self.errors_since(before) {
                                ok = false;
                            }
                        }
                        Some(o.to_json())
                    }
                    _ => {
                        self.type_error("object", &opath, o);
                        ok = false;
                        None
                    }
                }
            }
        };
        ok.then(|| Agent {
            provider: provider.unwrap_or_default(),
            model,
            mode,
            thinking_option_id,
            options,
        })
    }

    // ----- triggers -----------------------------------------------------

    /// A trigger. `workflow_file` is set for bundle workflow files.
    pub(crate) fn trigger(
        &mut self,
        node: &Node,
        path: &Lp<'_>,
        workflow_file: Option<&str>,
    ) -> Option<Trigger> {
        let allowed = [
            "name",
            "on",
            "max_runtime",
            "filters",
            "inputs",
            "values",
            "steps",
        ];
        let in_file = workflow_file.is_some();
        let entries = self.object(node, path, &allowed, &|k| {
            if in_file && k == "triggers" {
                return Some((
                    "monolithic_triggers",
                    "a workflow file holds exactly one trigger at its top level; move each trigger to its own .paseo/workflows/<workflow>.yml".to_owned(),
                ));
            }
            if in_file && NOT_IN_WORKFLOW_FILE.contains(&k) {
                return Some((
                    "not_in_workflow_file",
                    format!("{k} is not part of a workflow file; keep one trigger and its inline steps together"),
                ));
            }
            if TRIGGER_LEVEL_REMOVED.contains(&k) {
                return Some((
                    "removed_field",
                    format!("trigger-level {k} was removed; put {k} on the relevant workflow step"),
                ));
            }
            None
        })?;
        let _ = entries;
        let name = self
            .required(node, "name", path)
            .and_then(|n| self.identifier(n, &path.key("name"), "trigger name"));
        let tname = name.clone().unwrap_or_else(|| "?".to_owned());
        let on = self.required(node, "on", path).and_then(|n| {
            let s = self.string(n, &path.key("on"))?;
            if is_event_name(&s) {
                Some(s)
            } else {
                self.error(
                    "invalid_value",
                    format!("Invalid string: must match pattern /^[a-z][a-z0-9_-]*\\.[a-z][a-z0-9_-]*$/u (got {s:?})"),
                    &path.key("on"),
                    n,
                );
                None
            }
        });
        let max_runtime = self.required(node, "max_runtime", path).and_then(|n| {
            self.duration(
                n,
                &path.key("max_runtime"),
                &format!("trigger {tname} max_runtime"),
                MAX_DURATION_MS,
                "24h",
            )
        });
        let filters = node
            .get("filters")
            .map(|f| self.filters(f, &path.key("filters")));
        let inputs = match node.get("inputs") {
            Some(i) => self.inputs(i, &path.key("inputs"), &tname),
            None => Some(Vec::new()),
        };
        let values = match node.get("values") {
            Some(v) => self.values(v, &path.key("values")),
            None => Some(Vec::new()),
        };
        let steps = self.required(node, "steps", path).and_then(|s| {
            let spath = path.key("steps");
            let Y::Seq(items) = &s.value else {
                self.type_error("array", &spath, s);
                return None;
            };
            if items.is_empty() {
                self.error(
                    "invalid_value",
                    "Too small: expected array to have >=1 items",
                    &spath,
                    s,
                );
                return None;
            }
            let mut out = Vec::new();
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                match self.step(item, &spath.index(i), &tname) {
                    Some(st) => out.push(st),
                    None => ok = false,
                }
            }
            ok.then_some(out)
        });
        if let (Some(Some(f)), Some(decls)) = (&filters, &inputs) {
            self.input_filters(node, path, &tname, f, decls);
        }
        Some(Trigger {
            name: name?,
            file: workflow_file.map(str::to_owned),
            on: on?,
            max_runtime: max_runtime?,
            filters: match filters {
                Some(f) => Some(f?),
                None => None,
            },
            inputs: inputs?,
            values: values?,
            steps: steps?,
        })
    }

    /// The Hub's `validateInputFilters`: every `filters.inputs` entry
    /// names a declared input, has its type and, with `choices`, is one.
    fn input_filters(
        &mut self,
        node: &Node,
        path: &Lp<'_>,
        tname: &str,
        f: &Filters,
        decls: &[InputDecl],
    ) {
        let Some(entries) = &f.inputs else {
            return;
        };
        let fnode = node.get("filters").and_then(|n| n.get("inputs"));
        let filters_path = path.key("filters");
        let fpath = filters_path.key("inputs");
        for (name, value) in entries {
            let Some(vnode) = fnode.and_then(|n| n.get(name)) else {
                continue;
            };
            let p = fpath.key(name);
            let Some(decl) = decls.iter().find(|d| d.name == *name) else {
                self.error(
                    "unknown_input",
                    format!("trigger {tname} input filter references undeclared input {name}"),
                    &p,
                    vnode,
                );
                continue;
            };
            let typed = match decl.kind {
                InputType::String => value.is_string(),
                InputType::Number => value.is_number(),
                InputType::Boolean => value.is_boolean(),
            };
            if !typed {
                self.error(
                    "invalid_filter_type",
                    format!("trigger {tname} input filter {name} does not match type"),
                    &p,
                    vnode,
                );
            } else if let Some(cs) = &decl.choices
                && !cs
                    .iter()
                    .any(|c| crate::hub_rules::same_primitive(c, value))
            {
                self.error(
                    "invalid_filter_choice",
                    format!("trigger {tname} input filter {name} is not an allowed choice"),
                    &p,
                    vnode,
                );
            }
        }
    }

    /// Trigger filters.
    pub(crate) fn filters(&mut self, node: &Node, path: &Lp<'_>) -> Option<Filters> {
        self.object(
            node,
            path,
            &[
                "pattern",
                "contains",
                "label",
                "labels",
                "repo",
                "guild",
                "workspace",
                "channels",
                "from_users",
                "inputs",
                "connection",
            ],
            &|_| None,
        )?;
        let before = self.diags.len();
        let mut f = Filters {
            pattern: node
                .get("pattern")
                .and_then(|n| self.any_string(n, &path.key("pattern"))),
            contains: node
                .get("contains")
                .and_then(|n| self.any_string(n, &path.key("contains"))),
            label: self.opt_string(node, "label", path),
            labels: node
                .get("labels")
                .and_then(|n| self.string_list(n, &path.key("labels"), true)),
            repo: self.opt_string(node, "repo", path),
            guild: self.opt_string(node, "guild", path),
            workspace: self.opt_string(node, "workspace", path),
            channels: node
                .get("channels")
                .and_then(|n| self.string_list(n, &path.key("channels"), false)),
            from_users: node
                .get("from_users")
                .and_then(|n| self.string_list(n, &path.key("from_users"), false)),
            inputs: None,
            connection: None,
            ..Filters::default()
        };
        if let Some(n) = node.get("connection") {
            let p = path.key("connection");
            if let Some(s) = self.string(n, &p) {
                if is_slug(&s) {
                    f.connection = Some(s);
                } else {
                    self.error(
                        "invalid_value",
                        format!("connection {s:?} must be a slug (^[a-z0-9]+(?:-[a-z0-9]+)*$)"),
                        &p,
                        n,
                    );
                }
            }
        }
        if let Some(n) = node.get("inputs") {
            let p = path.key("inputs");
            match &n.value {
                Y::Map(entries) => {
                    let mut out = Vec::new();
                    for (k, v) in entries {
                        if self.proto_key(k, &p) {
                            continue;
                        }
                        match &v.value {
                            Y::String(_) | Y::Number(_) | Y::Bool(_) => {
                                out.push((k.text.to_string(), v.to_json()))
                            }
                            _ => self.type_error("string, number or boolean", &p.key(&k.text), v),
                        }
                    }
                    f.inputs = Some(out);
                }
                _ => self.type_error("object", &p, n),
            }
        }
        (!self.errors_since(before)).then_some(f)
    }

    pub(crate) fn inputs(
        &mut self,
        node: &Node,
        path: &Lp<'_>,
        tname: &str,
    ) -> Option<Vec<InputDecl>> {
        let Y::Map(entries) = &node.value else {
            self.type_error("object", path, node);
            return None;
        };
        let before = self.diags.len();
        let mut out = Vec::new();
        for (k, v) in entries {
            if self.proto_key(k, path) {
                continue;
            }
            let p = path.key(&k.text);
            if !is_identifier(&k.text) {
                self.error_at_key(
                    "invalid_identifier",
                    format!("input name {:?} must match ^[a-z][a-z0-9_-]*$", k.text),
                    &p,
                    k,
                );
                continue;
            }
            if self
                .object(v, &p, &["type", "required", "default", "choices"], &|_| {
                    None
                })
                .is_none()
            {
                continue;
            }
            let Some(tn) = self.required(v, "type", &p) else {
                continue;
            };
            let kind = match &tn.value {
                Y::String(s) if s == "string" => InputType::String,
                Y::String(s) if s == "number" => InputType::Number,
                Y::String(s) if s == "boolean" => InputType::Boolean,
                _ => {
                    self.error(
                        "invalid_value",
                        "Invalid option: expected one of \"string\"|\"number\"|\"boolean\"",
                        &p.key("type"),
                        tn,
                    );
                    self.suggest_value(tn, &["string", "number", "boolean"]);
                    continue;
                }
            };
            let required = v
                .get("required")
                .and_then(|n| self.bool(n, &p.key("required")));
            let matches_type = |n: &Node| match kind {
                InputType::String => matches!(n.value, Y::String(_)),
                InputType::Number => matches!(n.value, Y::Number(_)),
                InputType::Boolean => matches!(n.value, Y::Bool(_)),
            };
            let choices = match v.get("choices") {
                None => None,
                Some(c) => match &c.value {
                    Y::Seq(items) if !items.is_empty() => {
                        for (i, item) in items.iter().enumerate() {
                            if !matches_type(item) {
                                self.error(
                                    "invalid_type",
                                    format!("choice must be a {}", kind.as_str()),
                                    &p.key("choices").index(i),
                                    item,
                                );
                            }
                        }
                        Some(items.iter().map(Node::to_json).collect::<Vec<_>>())
                    }
                    Y::Seq(_) => {
                        self.error(
                            "invalid_value",
                            "Too small: expected array to have >=1 items",
                            &p.key("choices"),
                            c,
                        );
                        None
                    }
                    _ => {
                        self.type_error("array", &p.key("choices"), c);
                        None
                    }
                },
            };
            if required == Some(true)
                && let Some(d) = v.get("default")
            {
                self.error(
                    "input_required_and_default",
                    format!(
                        "trigger {tname} input {} cannot be both required and defaulted",
                        k.text
                    ),
                    &p.key("default"),
                    d,
                );
            }
            let default = match v.get("default") {
                None => None,
                Some(d) => {
                    if !matches_type(d) {
                        self.error(
                            "invalid_default_type",
                            format!("default must be a {}", kind.as_str()),
                            &p.key("default"),
                            d,
                        );
                    } else if let Some(cs) = &choices
                        && !cs
                            .iter()
                            .any(|c| crate::hub_rules::same_primitive(c, &d.to_json()))
                    {
                        self.error(
                            "invalid_default_choice",
                            "default is not one of the choices",
                            &p.key("default"),
                            d,
                        );
                    }
                    Some(d.to_json())
                }
            };
            out.push(InputDecl {
                name: k.text.to_string(),
                kind,
                required,
                default,
                choices,
            });
        }
        (!self.errors_since(before)).then_some(out)
    }

    fn values(&mut self, node: &Node, path: &Lp<'_>) -> Option<Vec<(String, Template)>> {
        let Y::Map(entries) = &node.value else {
            self.type_error("object", path, node);
            return None;
        };
        let before = self.diags.len();
        let mut out = Vec::new();
        for (k, v) in entries {
            if self.proto_key(k, path) {
                continue;
            }
            let p = path.key(&k.text);
            if !is_identifier(&k.text) {
                self.error_at_key(
                    "invalid_identifier",
                    format!("value name {:?} must match ^[a-z][a-z0-9_-]*$", k.text),
                    &p,
                    k,
                );
                continue;
            }
            // `z.record(z.string(), z.string().min(1))`: an empty value is refused.
            if self.string(v, &p).is_none() {
                continue;
            }
            if let Some(t) = self.expression(v, &p) {
                out.push((k.text.to_string(), t));
            }
        }
        (!self.errors_since(before)).then_some(out)
    }

    // ----- steps --------------------------------------------------------

    fn step(&mut self, node: &Node, path: &Lp<'_>, tname: &str) -> Option<Step> {
        let allowed = [
            "id",
            "if",
            "environment",
            "max_runtime",
            "idle_timeout",
            "agent",
            "prompt",
            "output",
            "allow_outputs",
            "env",
            "github",
            "auto_archive",
        ];
        self.object(node, path, &allowed, &|_| None)?;
        let before = self.diags.len();
        let id = self
            .required(node, "id", path)
            .and_then(|n| self.identifier(n, &path.key("id"), "step id"));
        let sid = id.clone().unwrap_or_else(|| "?".to_owned());
        let condition = node
            .get("if")
            .and_then(|n| self.expression(n, &path.key("if")));
        let environment = self.required(node, "environment", path).and_then(|n| {
            let p = path.key("environment");
            let s = self.string(n, &p)?;
            if s.contains("${{") {
                self.parse_template(&s, &p, n)
                    .map(EnvironmentRef::Expression)
            } else {
                Some(EnvironmentRef::Named(s))
            }
        });
        let max_runtime = self.required(node, "max_runtime", path).and_then(|n| {
            self.duration(
                n,
                &path.key("max_runtime"),
                &format!("trigger {tname} step {sid} max_runtime"),
                MAX_DURATION_MS,
                "24h",
            )
        });
        let idle_timeout = self.required(node, "idle_timeout", path).and_then(|n| {
            self.duration(
                n,
                &path.key("idle_timeout"),
                &format!("trigger {tname} step {sid} idle_timeout"),
                MAX_DURATION_MS,
                "24h",
            )
        });
        if let (Some(m), Some(i)) = (&max_runtime, &idle_timeout)
            && i.millis > m.millis
            && let Some(n) = node.get("idle_timeout")
        {
            self.error(
                "idle_timeout_exceeds_max_runtime",
                format!(
                    "step {sid} idle_timeout must not exceed max_runtime ({} > {})",
                    i.text, m.text
                ),
                &path.key("idle_timeout"),
                n,
            );
        }
        let agent = self.required(node, "agent", path).and_then(|n| {
            let p = path.key("agent");
            match &n.value {
                Y::String(s) if s.contains("${{") => {
                    self.parse_template(s, &p, n).map(AgentRef::Expression)
                }
                Y::String(s) if !s.is_empty() => Some(AgentRef::Named(s.to_string())),
                Y::Map(_) => self.agent(n, &p).map(AgentRef::Inline),
                _ => {
                    self.type_error("string or object", &p, n);
                    None
                }
            }
        });
        let prompt = self
            .required(node, "prompt", path)
            .and_then(|n| self.prompt(n, &path.key("prompt")));
        let output_schema = node
            .get("output")
            .and_then(|n| self.output_schema(n, &path.key("output"), &format!("step {sid}")));
        let allow_outputs = match node.get("allow_outputs") {
            Some(n) => self.allow_outputs(n, &path.key("allow_outputs")),
            None => Some(Vec::new()),
        };
        let env = match node.get("env") {
            None => Some(Vec::new()),
            Some(n) => self.env(n, &path.key("env")),
        };
        let github = node
            .get("github")
            .and_then(|n| self.github(n, &path.key("github")));
        let auto_archive = node
            .get("auto_archive")
            .and_then(|n| self.bool(n, &path.key("auto_archive")))
            .unwrap_or(false);
        if self.errors_since(before) {
            return None;
        }
        Some(Step {
            id: id?,
            environment: environment?,
            max_runtime: max_runtime?,
            idle_timeout: idle_timeout?,
            agent: agent?,
            prompt: prompt?,
            condition,
            output_schema,
            allow_outputs: allow_outputs?,
            env: env?,
            github,
            auto_archive,
        })
    }

    /// A step's (or a trigger document run's) `output`: `{schema: object}`,
    /// a schema the Hub's ajv compiles in strict mode
    /// ([`crate::output_schema::check`]); `what` names the step in the
    /// message, as the Hub's `step <id> output.schema is invalid JSON
    /// Schema: …`.
    pub(crate) fn output_schema(
        &mut self,
        n: &Node,
        p: &Lp<'_>,
        what: &str,
    ) -> Option<serde_json::Value> {
        self.object(n, p, &["schema"], &|_| None)?;
        let s = self.required(n, "schema", p)?;
        match &s.value {
            Y::Map(_) => {
                let schema = s.to_json();
                if let Err(e) = crate::output_schema::check(&schema) {
                    let at = if e.at.is_empty() {
                        String::new()
                    } else {
                        format!(" (at {})", e.pointer())
                    };
                    let msg = format!(
                        "{what} output.schema is invalid JSON Schema: {}{at}",
                        e.message
                    );
                    let sp = p.key("schema");
                    if e.limit {
                        // palisade's own bound on a hostile schema: a
                        // hardening limit, stricter than the Hub.
                        self.error("yaml_limit_exceeded", msg, &sp, s);
                    } else {
                        self.error("invalid_output_schema", msg, &sp, s);
                    }
                }
                // Kept even when refused, so that references to the step's
                // outputs are still checked against it rather than reported
                // as a step without an output schema.
                Some(schema)
            }
            _ => {
                self.type_error("object", &p.key("schema"), s);
                None
            }
        }
    }

    /// An `env` map of templates.
    pub(crate) fn env(&mut self, n: &Node, p: &Lp<'_>) -> Option<Vec<(String, Template)>> {
        match &n.value {
            Y::Map(entries) => {
                let mut out = Vec::new();
                for (k, v) in entries {
                    if self.proto_key(k, p) {
                        continue;
                    }
                    // `z.record(z.string().min(1), z.string())`
                    if k.text.is_empty() {
                        self.error_at_key(
                            "invalid_key",
                            "Invalid key in record: an env name must not be empty",
                            &p.key(""),
                            k,
                        );
                        continue;
                    }
                    if let Some(t) = self.connection_template(v, &p.key(&k.text)) {
                        out.push((k.text.to_string(), t));
                    }
                }
                Some(out)
            }
            _ => {
                self.type_error("object", p, n);
                None
            }
        }
    }

    fn prompt(&mut self, node: &Node, path: &Lp<'_>) -> Option<Vec<PromptBlock>> {
        let Y::Seq(items) = &node.value else {
            self.type_error("array", path, node);
            return None;
        };
        if items.is_empty() {
            self.error(
                "invalid_value",
                "Too small: expected array to have >=1 items",
                path,
                node,
            );
            return None;
        }
        let mut out = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let p = path.index(i);
            let block = match &item.value {
                Y::Map(_) if item.get("text").is_some() => {
                    self.object(item, &p, &["text"], &|_| None).and_then(|_| {
                        let t = item.get("text")?;
                        self.template(t, &p.key("text")).map(PromptBlock::Text)
                    })
                }
                Y::Map(_) if item.get("include").is_some() => self
                    .object(item, &p, &["include"], &|_| None)
                    .and_then(|_| {
                        let t = item.get("include")?;
                        self.string(t, &p.key("include")).map(PromptBlock::Include)
                    }),
                Y::Map(_) => {
                    self.object(item, &p, &["text", "include"], &|_| None);
                    self.error(
                        "missing_field",
                        "a prompt block needs text or include",
                        &p,
                        item,
                    );
                    None
                }
                _ => {
                    self.type_error("object", &p, item);
                    None
                }
            };
            match block {
                Some(b) => out.push(b),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// An `allow_outputs` list.
    pub(crate) fn allow_outputs(&mut self, node: &Node, path: &Lp<'_>) -> Option<Vec<AllowOutput>> {
        let Y::Seq(items) = &node.value else {
            self.type_error("array", path, node);
            return None;
        };
        let before = self.diags.len();
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let p = path.index(i);
            if self
                .object(item, &p, &["type", "max", "required"], &|_| None)
                .is_none()
            {
                continue;
            }
            let kind = self.required(item, "type", &p).and_then(|n| {
                let s = self.string(n, &p.key("type"))?;
                if is_event_name(&s) {
                    Some(s)
                } else {
                    self.error("invalid_value", format!("Invalid string: must match pattern /^[a-z][a-z0-9_-]*\\.[a-z][a-z0-9_-]*$/u (got {s:?})"), &p.key("type"), n);
                    None
                }
            });
            let required = item
                .get("required")
                .and_then(|n| self.bool(n, &p.key("required")))
                .unwrap_or(false);
            let max = match item.get("max") {
                None => Some(1),
                Some(n) => match &n.value {
                    Y::Number(num) => match num.as_u64() {
                        Some(0) => {
                            let msg = if required {
                                "required outputs must have max at least 1"
                            } else {
                                "output max must be greater than 0"
                            };
                            self.error("invalid_output_max", msg, &p.key("max"), n);
                            None
                        }
                        Some(v) => match u32::try_from(v) {
                            Ok(v) => Some(v),
                            Err(_) => {
                                self.error(
                                    "invalid_value",
                                    "Too big: max must fit in 32 bits",
                                    &p.key("max"),
                                    n,
                                );
                                None
                            }
                        },
                        None => {
                            self.error(
                                "invalid_type",
                                "Invalid input: expected int, received number",
                                &p.key("max"),
                                n,
                            );
                            None
                        }
                    },
                    _ => {
                        self.type_error("number", &p.key("max"), n);
                        None
                    }
                },
            };
            if let (Some(kind), Some(max)) = (kind, max) {
                out.push(AllowOutput {
                    kind,
                    max: Some(max),
                    required,
                });
            }
        }
        (!self.errors_since(before)).then_some(out)
    }

    pub(crate) fn github(&mut self, node: &Node, path: &Lp<'_>) -> Option<GithubAuthority> {
        self.object(
            node,
            path,
            &["connection", "repositories", "permissions", "duration"],
            &|_| None,
        )?;
        let before = self.diags.len();
        let connection = self.required(node, "connection", path).and_then(|n| {
            let s = self.string(n, &path.key("connection"))?;
            if is_slug(&s) {
                Some(s)
            } else {
                self.error(
                    "invalid_value",
                    format!("connection {s:?} must be a slug (^[a-z0-9]+(?:-[a-z0-9]+)*$)"),
                    &path.key("connection"),
                    n,
                );
                None
            }
        });
        let repositories = node.get("repositories").and_then(|n| {
            let p = path.key("repositories");
            let list = self.string_list(n, &p, true)?;
            for (i, r) in list.iter().enumerate() {
                // `^[^/\s]+\/[^/\s]+$/u` (github-authority.ts).
                let valid = !r.chars().any(crate::hub_rules::is_js_space)
                    && r.split_once('/')
                        .is_some_and(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'));
                if !valid
                    && let Y::Seq(items) = &n.value
                    && let Some(item) = items.get(i)
                {
                    self.error(
                        "invalid_value",
                        format!("repository {r:?} must be owner/name"),
                        &p.index(i),
                        item,
                    );
                }
            }
            Some(list)
        });
        let permissions = node.get("permissions").and_then(|n| {
            let p = path.key("permissions");
            let Y::Map(entries) = &n.value else {
                self.type_error("object", &p, n);
                return None;
            };
            let mut out = Vec::new();
            for (k, v) in entries {
                if self.proto_key(k, &p) {
                    continue;
                }
                let level = match &v.value {
                    Y::String(s) if s == "read" => GithubLevel::Read,
                    Y::String(s) if s == "write" => GithubLevel::Write,
                    Y::String(s) if s == "admin" => GithubLevel::Admin,
                    _ => {
                        self.error(
                            "invalid_value",
                            "Invalid option: expected one of \"read\"|\"write\"|\"admin\"",
                            &p.key(&k.text),
                            v,
                        );
                        self.suggest_value(v, &["read", "write", "admin"]);
                        continue;
                    }
                };
                if let Some(why) = crate::github_permissions::refusal(&k.text, level) {
                    self.diags.push(
                        Diagnostic::error(
                            "invalid_github_permission",
                            format!("github.permissions.{}: {why}", k.text),
                        )
                        .in_file(self.file.clone())
                        .at(k.pos.line, k.pos.column)
                        .with_path(p.key(&k.text).to_path())
                        .with_help(format!(
                            "the Hub accepts only GitHub App permission names, each at the levels GitHub allows (REST API {})",
                            crate::github_permissions::API_VERSION
                        )),
                    );
                    continue;
                }
                out.push((k.text.to_string(), level));
            }
            Some(out)
        });
        let duration = node.get("duration").and_then(|n| {
            self.duration(
                n,
                &path.key("duration"),
                "github duration",
                3_600_000,
                "1h because GitHub installation tokens expire after 1h",
            )
        });
        if self.errors_since(before) {
            return None;
        }
        Some(GithubAuthority {
            connection: connection?,
            repositories,
            permissions,
            duration,
        })
    }

    /// A named-agent map of `.paseo/hub.yml`.
    pub(crate) fn named_agents(&mut self, node: &Node, path: &Lp<'_>) -> Vec<NamedAgent> {
        let Y::Map(entries) = &node.value else {
            self.type_error("object", path, node);
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in entries {
            let p = path.key(&k.text);
            if !is_identifier(&k.text) {
                self.error_at_key(
                    "invalid_identifier",
                    format!("agent name {:?} must match ^[a-z][a-z0-9_-]*$", k.text),
                    &p,
                    k,
                );
                continue;
            }
            if let Some(a) = self.agent(v, &p) {
                out.push(NamedAgent {
                    name: k.text.to_string(),
                    agent: a,
                });
            }
        }
        out
    }
}
