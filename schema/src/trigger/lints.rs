//! Security lints over a trigger document (`hub-triggers.md` §8, the Hub
//! security guide's release checklist). Each has a stable code and a
//! section in `docs/check.md`.
//!
//! Levels follow the spec's table, with two deliberate changes: a wildcard
//! `from_users` on a Slack, Discord, GitHub, Linear or Forgejo event is an
//! error by default (issue 20), and the table's "info" findings
//! (`no_classifier_lane`, `legacy_lane`, `non_atomic_deploy`) are warnings,
//! since palisade has no lower level. Two lints are not about one parsed
//! document and are separate functions for the parser to call:
//! [`legacy_lane`] (a `legacy_multistep` document never parses) and
//! [`non_atomic_deploy`] (a property of a directory). L14 (an unquoted
//! recurrence `start`) is the schema's own error `unquoted_timestamp`
//! (the Hub refuses the Date js-yaml makes of it), so it is not repeated
//! here; L5 (`implicit_mode`) is superseded by the authoring contract's
//! `missing_mode` error for every document `parse_trigger` reads, and
//! fires only when the lints run on a document without that contract.
//!
//! "Can write" (for `unbounded_reply`, `broad_cwd`) is decided from the
//! agent as the daemon would start it, failing closed: an agent can write
//! unless its mode or provider-native options provably make it read-only
//! ([`agent_can_write`]).

use serde_json::Value as Json;

use crate::diagnostic::{Diagnostic, Path};
use crate::model::{Agent, GithubLevel};
use crate::semantic::diag_at;
use crate::yaml::Node;

use super::{Continuation, EventEntry, Release, RunAgent, TriggerDocument, TriggerOptions};

/// Every stable code the trigger lints emit.
#[cfg(test)]
pub(crate) const LINT_CODES: &[&str] = &[
    WILDCARD_PRINCIPAL,
    IMPLICIT_MANUAL_WILDCARD,
    UNBOUNDED_REPLY,
    FULL_ACCESS_MODE,
    EXTERNAL_NETWORK_ACCESS,
    IMPLICIT_MODE,
    AUTONOMOUS_LINEAR_SCOPE,
    WRITE_AUTHORITY_BROAD_PRINCIPAL,
    BROAD_CWD,
    UNATTENDED_SCHEDULE,
    SHARED_CONTINUATION,
    MULTI_EVENT_AUTHORITY,
    NO_CLASSIFIER_LANE,
    UNKNOWN_EVENT,
    LEGACY_LANE,
    UNATTENDED_PROVIDER,
    NON_ATOMIC_DEPLOY,
];

/// Every lint finding for `doc`, located in `root` (the document's YAML).
pub(crate) fn lint(
    file: &str,
    doc: &TriggerDocument,
    root: &Node,
    options: &TriggerOptions,
) -> Vec<Diagnostic> {
    let mut l = Linter {
        file,
        root,
        doc,
        release: options.release,
        out: Vec::new(),
    };
    l.events();
    l.agents();
    l.authority();
    l.continuation();
    l.out
}

/// `legacy_lane` (L15): the document is a `legacy_multistep` revision (an
/// exported migrated workflow), which is not a trigger document: the Hub
/// refuses to validate it, and it runs with v0.6 semantics. Emitted next to
/// the schema's errors; `None` for any other document.
pub(crate) fn legacy_lane(file: &str, root: &Node) -> Option<Diagnostic> {
    root.get("legacy_multistep")?;
    Some(
        diag_at(file, root, false, LEGACY_LANE, "this is a legacy_multistep revision, not a trigger document: the Hub runs it with v0.6 semantics (no automatic reply, max 1 per grant) and refuses to validate or install it as a trigger", &Path::root().key("legacy_multistep"))
            .with_help("keep the workflow as a v0.6 bundle under .paseo/workflows and check that with palisade check (its lints apply), or rewrite it as a single-run trigger document"),
    )
}

/// `non_atomic_deploy` (L17): `files` (the `.paseo/triggers` documents, in
/// deploy order) hold more than one document. `paseo hub deploy` installs
/// them one at a time: a file that fails at install (resource resolution
/// runs on the Hub only) leaves the earlier ones active, and removing a
/// file never deletes its trigger. Located in the second file.
pub(crate) fn non_atomic_deploy(files: &[&str]) -> Option<Diagnostic> {
    let second = files.get(1)?;
    Some(
        Diagnostic::warning(
            NON_ATOMIC_DEPLOY,
            format!(
                "{} trigger files deploy one at a time: when one fails at install the earlier ones stay active, and a removed file never deletes its trigger",
                files.len()
            ),
        )
        .in_file(*second)
        .with_help("run paseo hub deploy --dry-run first, review the Activity after a deploy, and disable (enabled: false) a trigger before removing its file"),
    )
}

/// Whether `agent` can edit files when the daemon starts it, failing
/// closed: `false` only when its mode or provider-native options provably
/// make it read-only (Codex `sandbox_mode: read-only`, which wins over the
/// mode, or mode `read-only` without options saying otherwise; Claude mode
/// `plan`, or `tools` without any editing tool, or every editing tool in
/// `disallowedTools`; OpenCode mode `plan`, or `permission` denying both
/// `edit` and `bash`).
pub(crate) fn agent_can_write(agent: &Agent) -> bool {
    let get = |k: &str| agent.options.as_ref().and_then(|o| o.get(k));
    let mode = agent.mode.as_deref();
    match provider_base(&agent.provider) {
        "codex" => match get("sandbox_mode").and_then(Json::as_str) {
            Some(sandbox) => sandbox != "read-only",
            None => mode != Some("read-only"),
        },
        "claude" => {
            if mode == Some("plan") {
                return false;
            }
            let names = |k: &str| -> Option<Vec<&str>> {
                get(k).and_then(Json::as_array).map(|a| {
                    a.iter()
                        .filter_map(Json::as_str)
                        .map(|t| t.split('(').next().unwrap_or(t))
                        .collect()
                })
            };
            if let Some(tools) = names("tools")
                && !tools.iter().any(|t| CLAUDE_WRITE_TOOLS.contains(t))
            {
                return false;
            }
            // A scoped deny (`Bash(rm:*)`) denies less than the whole tool.
            let denied: Vec<&str> = get("disallowedTools")
                .and_then(Json::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Json::as_str)
                        .filter(|t| !t.contains('('))
                        .collect()
                })
                .unwrap_or_default();
            !CLAUDE_WRITE_TOOLS.iter().all(|t| denied.contains(t))
        }
        "opencode" => {
            if mode == Some("plan") {
                return false;
            }
            let denies = |rule: Option<&Json>| match rule {
                Some(Json::String(s)) => s == "deny",
                Some(Json::Object(m)) => {
                    m.len() == 1 && m.get("*").and_then(Json::as_str) == Some("deny")
                }
                _ => false,
            };
            match get("permission") {
                Some(Json::String(s)) => s != "deny",
                Some(Json::Object(m)) => !(denies(m.get("edit")) && denies(m.get("bash"))),
                _ => true,
            }
        }
        _ => true,
    }
}

/// Why `agent` runs with full access, and the authored key that says so
/// (relative to the agent): mode `full-access` or `bypassPermissions`,
/// Codex `sandbox_mode: danger-full-access`, or Codex
/// `approval_policy: never` without `sandbox_mode`. A Codex
/// `sandbox_mode` other than `danger-full-access` wins over a full-access
/// mode (options win over the mode, `hub-workflows.md` §8).
pub(crate) fn full_access(agent: &Agent) -> Option<(Path, String)> {
    let get = |k: &str| agent.options.as_ref().and_then(|o| o.get(k));
    let codex = provider_base(&agent.provider) == "codex";
    let sandbox = get("sandbox_mode").and_then(Json::as_str);
    if codex && sandbox == Some("danger-full-access") {
        return Some((
            Path::root().key("options").key("sandbox_mode"),
            "codex sandbox_mode danger-full-access turns Codex's sandbox off".to_owned(),
        ));
    }
    if let Some(mode @ ("full-access" | "bypassPermissions")) = agent.mode.as_deref()
        && !(codex && sandbox.is_some())
    {
        return Some((
            Path::root().key("mode"),
            format!("mode {mode} lets the agent run every tool without asking"),
        ));
    }
    if codex && sandbox.is_none() && get("approval_policy").and_then(Json::as_str) == Some("never")
    {
        return Some((
            Path::root().key("options").key("approval_policy"),
            "codex approval_policy never without sandbox_mode leaves the sandbox to the provider default with no check"
                .to_owned(),
        ));
    }
    None
}

struct Linter<'a> {
    file: &'a str,
    root: &'a Node<'a>,
    doc: &'a TriggerDocument,
    release: Release,
    out: Vec<Diagnostic>,
}

impl<'a> Linter<'a> {
    /// The events the targeted release emits, for a did-you-mean.
    fn release_events(&self) -> Vec<&'static str> {
        super::events::emitted_by(self.release).collect()
    }

    fn push(&mut self, error: bool, code: &'static str, msg: String, help: &str, p: &Path) {
        let d = diag_at(self.file, self.root, error, code, msg, p).with_help(help);
        // Every lint test then checks that `palisade check --allow`,
        // `--warn`, `--deny` and suppression comments know this code at
        // this level (`crate::lints::LINT_ERRORS`, `LINT_WARNINGS`).
        #[cfg(test)]
        assert!(
            if error {
                crate::lints::LINT_ERRORS.contains(&code)
            } else {
                crate::lints::LINT_WARNINGS.contains(&code)
            },
            "{code} (error: {error}) is not in LINT_ERRORS/LINT_WARNINGS"
        );
        self.out.push(d);
    }

    fn entry_path(&self, e: &EventEntry) -> Path {
        Path::root().key("on").key(e.event.clone())
    }

    fn users_path(&self, e: &EventEntry) -> Path {
        self.entry_path(e).key("filters").key("from_users")
    }

    /// The document's agents with their authored paths.
    fn agent_list(&self) -> Vec<(Path, &'a Agent)> {
        let doc = self.doc;
        let base = Path::root().key("run").key("agent");
        match &doc.run.agent {
            RunAgent::Inline(a) => vec![(base, a)],
            RunAgent::Select { choices, .. } => choices
                .iter()
                .map(|(n, a)| (base.key("choices").key(n.clone()), a))
                .collect(),
        }
    }

    fn externals(&self) -> impl Iterator<Item = &'a EventEntry> + use<'a> {
        let doc = self.doc;
        doc.on.iter().filter(|e| is_external(e))
    }

    /// An external entry with `"*"` in `from_users` (L1's condition).
    fn external_wildcard(&self) -> Option<&'a EventEntry> {
        self.externals().find(|e| has_wildcard(e))
    }

    /// The first agent with full access, with its reason.
    fn full_access_agent(&self) -> Option<(Path, String)> {
        self.agent_list()
            .into_iter()
            .find_map(|(p, a)| full_access(a).map(|(rel, why)| (Path([p.0, rel.0].concat()), why)))
    }

    /// The first `run.github` permission at `write` or `admin`.
    fn github_write(&self) -> Option<(Path, String)> {
        let g = self.doc.run.github.as_ref()?;
        g.permissions.as_ref()?.iter().find_map(|(name, level)| {
            matches!(level, GithubLevel::Write | GithubLevel::Admin).then(|| {
                (
                    Path::root()
                        .key("run")
                        .key("github")
                        .key("permissions")
                        .key(name.clone()),
                    format!("{name}: {}", level.as_str()),
                )
            })
        })
    }

    fn any_agent_can_write(&self) -> bool {
        self.agent_list().iter().any(|(_, a)| agent_can_write(a))
    }

    /// L1, L2, L3, L11, L13.
    fn events(&mut self) {
        let full = self.full_access_agent().is_some() || self.github_write().is_some();
        let can_write = self.any_agent_can_write();
        let doc = self.doc;
        for e in &doc.on {
            let source = e.source();
            let users = e.filters.as_ref().and_then(|f| f.from_users.as_ref());
            // L13: an event this release does not emit never fires.
            match super::events::first_emitted_in(&e.event) {
                Some(r) if r <= self.release => {}
                known => {
                    let why = match known {
                        Some(Release::Main) => {
                            " by Paseo Hub 0.9.0 (schedule events are on main after 0.9.0; choose --hub-release main)"
                        }
                        Some(_) => {
                            " by any released Paseo Hub (only unreleased pull requests have it; choose --hub-release unreleased)"
                        }
                        None => " by the Hub",
                    };
                    let msg = format!(
                        "event {:?} is not emitted{why}; this trigger will never fire",
                        e.event
                    );
                    let p = self.entry_path(e);
                    let base = "use one of the events of hub-triggers.md §3 (slack.mention, github.issue_comment_created, manual.run, …), or target the Hub release that has it";
                    // A misspelt event of the targeted release.
                    let help = match known {
                        None => crate::suggest::did_you_mean(&e.event, &self.release_events()),
                        Some(_) => None,
                    }
                    .map_or_else(|| base.to_owned(), |h| format!("{h} {base}"));
                    self.push(true, UNKNOWN_EVENT, msg, &help, &p);
                }
            }
            // L1: "*" admits every actor.
            if let Some(i) = users.and_then(|u| u.iter().position(|s| s == "*")) {
                let p = self.users_path(e).index(i);
                if is_external(e) {
                    let error = CONVERSATIONAL.contains(&source) || full;
                    let msg = format!(
                        "from_users \"*\" lets every {source} user who can reach the connection start {} with its authority",
                        self.doc.name
                    );
                    self.push(
                        error,
                        WILDCARD_PRINCIPAL,
                        msg,
                        "list the user ids allowed to start this trigger in filters.from_users",
                        &p,
                    );
                } else if source == "manual" {
                    let msg = "from_users \"*\" on manual.run lets every runs:dispatch credential dispatch with any actor".to_owned();
                    self.push(
                        false,
                        WILDCARD_PRINCIPAL,
                        msg,
                        "list the actors allowed to dispatch in filters.from_users",
                        &p,
                    );
                }
            }
            // L2: the Hub compiles an absent manual list to ["*"].
            if e.event == "manual.run" && users.is_none() {
                let p = self.entry_path(e);
                self.push(false, IMPLICIT_MANUAL_WILDCARD, "manual.run without filters.from_users compiles to from_users [\"*\"]: every runs:dispatch credential may dispatch it with any actor".to_owned(), "set filters.from_users to the actors allowed to dispatch (an explicit list answers others with 403 actor_forbidden)", &p);
            }
            // L3: the automatic event-native reply has no max.
            if CONVERSATIONAL.contains(&source) && reply_available(&e.event) {
                let kind = format!("{source}.reply");
                if !doc.run.outputs.iter().any(|o| o.kind == kind) {
                    let writes = if can_write {
                        ", and its agent can edit files, so whatever it does can be reported without bound"
                    } else {
                        ""
                    };
                    let msg = format!(
                        "{} gets the automatic {kind} without max: the agent may reply any number of times{writes}",
                        e.event
                    );
                    let help = format!(
                        "grant the reply explicitly with a bound: run.outputs: {{{kind}: {{max: 1}}}}"
                    );
                    let p = self.entry_path(e);
                    self.push(false, UNBOUNDED_REPLY, msg, &help, &p);
                }
            }
        }
        // L11: several principals or providers behind one authority.
        if let Some(first) = doc.on.first()
            && let Some(other) = doc
                .on
                .iter()
                .skip(1)
                .find(|e| e.source() != first.source() || principals(e) != principals(first))
        {
            let msg = format!(
                "{} and {} share one target, agent and authority although their providers or from_users differ",
                first.event, other.event
            );
            let p = self.entry_path(other);
            self.push(false, MULTI_EVENT_AUTHORITY, msg, "split the events into one trigger document each, with the authority each principal needs", &p);
        }
    }

    /// L4, L5, L16, external network access.
    fn agents(&mut self) {
        let external = self.externals().next().map(|e| e.event.clone());
        let wildcard = self.external_wildcard().is_some();
        for (p, a) in self.agent_list() {
            if a.mode.is_none() {
                self.push(false, IMPLICIT_MODE, format!("agent {} has no mode, so it runs in the provider's default mode", a.provider), "set mode explicitly (new trigger documents need it; only unchanged migrated documents keep the provider default)", &p);
            }
            let base = provider_base(&a.provider);
            if !matches!(base, "claude" | "codex" | "opencode") {
                self.push(true, UNATTENDED_PROVIDER, format!("provider {:?} cannot run unattended Hub automations: the daemon refuses it (tool_policy_unsupported)", a.provider), "select claude, codex or opencode", &p.key("provider"));
            }
            let Some(event) = &external else { continue };
            if let Some((rel, why)) = full_access(a) {
                let msg = format!("{why}, in a run started by the external event {event}");
                self.push(wildcard, FULL_ACCESS_MODE, msg, "use a bounded mode and provider sandbox (Codex sandbox_mode: workspace-write, Claude default or acceptEdits with sandbox rules)", &Path([p.0.clone(), rel.0].concat()));
            }
            if base == "codex"
                && a.options
                    .as_ref()
                    .and_then(|o| o.get("sandbox_workspace_write"))
                    .and_then(|s| s.get("network_access"))
                    == Some(&Json::Bool(true))
            {
                let at = p
                    .key("options")
                    .key("sandbox_workspace_write")
                    .key("network_access");
                let msg = format!(
                    "codex network_access true lets an agent started by the external event {event} reach any host from its sandbox (exfiltration)"
                );
                self.push(wildcard, EXTERNAL_NETWORK_ACCESS, msg, "set network_access: false and reach the few hosts the run needs through palisade's egress proxy", &at);
            }
        }
    }

    /// L6, L7, L8, L9, L12.
    fn authority(&mut self) {
        let write = self.github_write();
        let full = self.full_access_agent();
        let doc = self.doc;
        // L6: an autonomous event with write authority.
        if let Some(e) = doc
            .on
            .iter()
            .find(|e| e.event == "linear.issue_entered_scope")
            && let Some((_, why)) = write.as_ref().or(full.as_ref())
        {
            let msg = format!(
                "linear.issue_entered_scope starts the run when anyone moves an issue into scope, with {why}"
            );
            let p = self.entry_path(e);
            self.push(false, AUTONOMOUS_LINEAR_SCOPE, msg, "drop the write authority, or narrow the scope (filters.project, states, labels) and from_users", &p);
        }
        // L7: write authority for a broad principal.
        if let Some((wp, what)) = &write {
            let broad = doc.on.iter().find_map(|e| {
                let users = e.filters.as_ref().and_then(|f| f.from_users.as_ref());
                let star = users.is_some_and(|u| u.iter().any(|s| s == "*"));
                match e.source() {
                    "schedule" => Some(format!("{} (no human principal)", e.event)),
                    "manual" if users.is_none() || star => {
                        Some(format!("{} (every dispatch credential)", e.event))
                    }
                    _ if is_external(e) && star => {
                        Some(format!("{} with from_users \"*\"", e.event))
                    }
                    _ => None,
                }
            });
            if let Some(who) = broad {
                let msg = format!("GitHub {what} is granted to a run anyone can start: {who}");
                self.push(
                    true,
                    WRITE_AUTHORITY_BROAD_PRINCIPAL,
                    msg,
                    "narrow from_users to named users, or grant read only",
                    wp,
                );
            }
            let unscoped = doc
                .run
                .github
                .as_ref()
                .is_some_and(|g| g.repositories.is_none());
            if let Some(e) = doc.on.iter().find(|e| e.source() == "github")
                && unscoped
            {
                let msg = format!(
                    "GitHub {what} without run.github.repositories on {}: the token covers whichever repository sends the event",
                    e.event
                );
                let p = Path::root().key("run").key("github");
                self.push(
                    true,
                    WRITE_AUTHORITY_BROAD_PRINCIPAL,
                    msg,
                    "list the repositories in run.github.repositories",
                    &p,
                );
            }
        }
        // L8: the working directory.
        let target = Path::root().key("run").key("target");
        if let Some(why) = crate::lints::broad_directory(&doc.run.target.cwd) {
            let msg = format!("run.target.cwd {:?} is {why}", doc.run.target.cwd);
            self.push(
                false,
                BROAD_CWD,
                msg,
                "set cwd to the one repository the run needs",
                &target.key("cwd"),
            );
        }
        if doc.run.target.worktree.is_none()
            && let Some(e) = self.externals().next()
            && self.any_agent_can_write()
        {
            let msg = format!(
                "a run started by the external event {} can edit files in the shared checkout: run.target has no worktree",
                e.event
            );
            self.push(
                false,
                BROAD_CWD,
                msg,
                "add run.target.worktree (mode: branch-off) so each run edits its own branch",
                &target,
            );
        }
        // L9: schedules have no human principal.
        if let Some(e) = doc.on.iter().find(|e| e.source() == "schedule") {
            if let Some((_, why)) = full.as_ref().or(write.as_ref()) {
                let msg = format!("{} runs unattended with {why}", e.event);
                let p = self.entry_path(e);
                self.push(
                    false,
                    UNATTENDED_SCHEDULE,
                    msg,
                    "give scheduled runs read-only authority and a bounded mode",
                    &p,
                );
            }
            if doc.run.continuation == Continuation::Conversation {
                let msg = format!(
                    "{} continues one conversation across every scheduled run, so what one run reads steers the next",
                    e.event
                );
                let p = self.authored_or(&["run", "continuation"], &self.entry_path(e));
                self.push(
                    false,
                    UNATTENDED_SCHEDULE,
                    msg,
                    "set run.continuation: {mode: new}",
                    &p,
                );
            }
        }
        // L12: a single run cannot have a read-only classifier step.
        if let Some(e) = self.externals().next()
            && let Some((_, why)) = write.as_ref().or(full.as_ref())
        {
            let msg = format!(
                "the external event {} starts one run with {why}: a trigger document has no read-only classifier step before it",
                e.event
            );
            self.push(false, NO_CLASSIFIER_LANE, msg, "keep write authority in a v0.6 bundle with a read-only classifier step, or drop it from this trigger", &Path::root().key("run"));
        }
    }

    /// L10.
    fn continuation(&mut self) {
        let shared = !matches!(self.doc.run.continuation, Continuation::New);
        if let Some(e) = self.external_wildcard()
            && shared
        {
            let msg = format!(
                "every {} user shares agent conversations (continuation keeps one per thread or key) while from_users is \"*\"",
                e.source()
            );
            let p = self.authored_or(&["run", "continuation"], &self.users_path(e));
            self.push(
                false,
                SHARED_CONTINUATION,
                msg,
                "narrow from_users, or set run.continuation: {mode: new}",
                &p,
            );
        }
    }

    /// `keys` from the root when authored, else `fallback`.
    fn authored_or(&self, keys: &[&str], fallback: &Path) -> Path {
        let p = keys.iter().fold(Path::root(), |p, k| p.key(*k));
        if self.root.at_path(&p).is_some() {
            p
        } else {
            fallback.clone()
        }
    }
}

/// The provider part of an id (`codex/gpt-5` is `codex`).
fn provider_base(provider: &str) -> &str {
    provider.split('/').next().unwrap_or(provider)
}

/// Hub-origin events (`manual`, `schedule`) have no external sender.
fn is_external(e: &EventEntry) -> bool {
    !matches!(e.source(), "manual" | "schedule")
}

fn has_wildcard(e: &EventEntry) -> bool {
    e.filters
        .as_ref()
        .and_then(|f| f.from_users.as_ref())
        .is_some_and(|u| u.iter().any(|s| s == "*"))
}

/// The sorted `from_users` of an entry (`None` when absent).
fn principals(e: &EventEntry) -> Option<Vec<&str>> {
    let mut v: Vec<&str> = e
        .filters
        .as_ref()?
        .from_users
        .as_ref()?
        .iter()
        .map(String::as_str)
        .collect();
    v.sort_unstable();
    v.dedup();
    Some(v)
}

/// Whether the automatic reply of `event` can be used: a push or an
/// action run has no issue or pull request to reply to.
fn reply_available(event: &str) -> bool {
    !(event.ends_with(".push") || event.contains(".action_run_"))
}

/// Providers whose events get the automatic unlimited reply (§4.2).
const CONVERSATIONAL: &[&str] = &["slack", "discord", "linear", "github", "forgejo"];

/// Claude tools that edit files or run commands.
const CLAUDE_WRITE_TOOLS: &[&str] = &["Bash", "Edit", "Write", "MultiEdit", "NotebookEdit"];

const WILDCARD_PRINCIPAL: &str = "wildcard_principal";
const IMPLICIT_MANUAL_WILDCARD: &str = "implicit_manual_wildcard";
const UNBOUNDED_REPLY: &str = "unbounded_reply";
const FULL_ACCESS_MODE: &str = "full_access_mode";
const EXTERNAL_NETWORK_ACCESS: &str = "external_network_access";
const IMPLICIT_MODE: &str = "implicit_mode";
const AUTONOMOUS_LINEAR_SCOPE: &str = "autonomous_linear_scope";
const WRITE_AUTHORITY_BROAD_PRINCIPAL: &str = "write_authority_broad_principal";
const BROAD_CWD: &str = "broad_cwd";
const UNATTENDED_SCHEDULE: &str = "unattended_schedule";
const SHARED_CONTINUATION: &str = "shared_continuation";
const MULTI_EVENT_AUTHORITY: &str = "multi_event_authority";
const NO_CLASSIFIER_LANE: &str = "no_classifier_lane";
const UNKNOWN_EVENT: &str = "unknown_event";
const LEGACY_LANE: &str = "legacy_lane";
const UNATTENDED_PROVIDER: &str = "unattended_provider";
const NON_ATOMIC_DEPLOY: &str = "non_atomic_deploy";

#[cfg(test)]
mod tests;
