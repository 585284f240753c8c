//! Security lints over a parsed configuration (`docs/check.md` gives each
//! code's rationale).

use serde_json::Value as Json;

use crate::diagnostic::{Diagnostic, Path};
use crate::expr::Expr;
use crate::model::{Agent, AgentRef, EnvironmentKind, EnvironmentRef, HubConfig, Step, Trigger};
use crate::semantic::{ResourceSite, TriggerSite, diag_at};

/// Output capability types palisade knows, with the trigger source whose
/// run context makes them available (spec §3.1).
pub const KNOWN_OUTPUTS: &[(&str, &str)] =
    &[("slack.reply", "slack"), ("discord.reply", "discord")];

/// Event names the Hub emits (spec §1.4).
pub const KNOWN_EVENTS: &[&str] = &[
    "slack.mention",
    "discord.mention",
    "manual.run",
    "github.issue_comment",
    "github.issues",
    "github.pull_request_review",
    "github.pull_request_review_comment",
    "github.push",
    "github.issue_created",
    "github.pull_request_created",
    "github.issue_comment_created",
    "github.pull_request_comment_created",
    "github.issue_label_added",
    "github.pull_request_label_added",
];

/// The lint codes whose findings are errors: the configuration parses but
/// fails the release checklist (`docs/check.md`, "Lints"). `palisade check
/// --allow`, `--warn` and a suppression comment may act on these; never on
/// a schema error that makes a document invalid. A trigger lint whose level
/// depends on the finding (`wildcard_principal` is an error on a chat or
/// forge event, a warning elsewhere) is in both lists; no code here is
/// also a schema error.
pub const LINT_ERRORS: &[&str] = &[
    "missing_from_users",
    "required_output_unavailable",
    "codex_unattended_full_access",
    // Trigger-document lints (`trigger/lints.rs`) reported as errors.
    "wildcard_principal",
    "full_access_mode",
    "external_network_access",
    "write_authority_broad_principal",
    "unknown_event",
    "unattended_provider",
];

/// Every code the parsers emit as a warning: the workflow lints, the bundle
/// and provider notes and the host-policy lints. A code here may be an
/// error elsewhere (`duplicate`); only its warnings are lints.
pub const LINT_WARNINGS: &[&str] = &[
    // Workflow lints (`docs/check.md`, "Lints").
    "manual_without_from_users",
    "unpinned_trigger",
    "unknown_event",
    "classifier_with_outputs",
    "output_unavailable",
    "unknown_output_type",
    "codex_danger_full_access",
    "codex_network_access",
    "codex_dangerous_proxy",
    "claude_sandbox_not_fail_closed",
    "claude_unsandboxed_commands",
    "claude_broad_tool_allowed",
    "opencode_allow_all",
    "opencode_bash_allow",
    "opencode_external_directory_allow",
    "implicit_provider_policy",
    "broad_cwd",
    "broad_writable_root",
    "unsupported_provider",
    "unexpected_bundle_file",
    "unknown_option_newer_daemon",
    "ignored_key",
    // Trigger-document lints (`trigger/lints.rs`, L1–L17) reported as
    // warnings (`broad_cwd` and `unknown_event` are listed above), and
    // `palisade check`'s note on a trigger and a legacy workflow sharing a
    // name.
    "wildcard_principal",
    "implicit_manual_wildcard",
    "unbounded_reply",
    "full_access_mode",
    "external_network_access",
    "implicit_mode",
    "autonomous_linear_scope",
    "unattended_schedule",
    "shared_continuation",
    "multi_event_authority",
    "no_classifier_lane",
    "legacy_lane",
    "non_atomic_deploy",
    "trigger_workflow_name_clash",
    // Host-policy lints (`docs/policy.md`).
    "allow_shadowed",
    "direct_writes",
    "duplicate",
    "empty_routes",
    "no_steering_paths",
    "not_normalised",
    "observe_self_report",
    "outward_allow_everything",
    "outward_allow_untargeted",
    "outward_delete_allowed_with_force_denied",
    "relay_origin_allowed",
    "relay_provider_mismatch",
    "route_nowhere",
    "route_shadows_outward",
    "routing_provider_unbound",
    "shared_hosting_wildcard",
    "taint_allow_not_allowed",
    "taint_disabled",
    "unknown_kind",
    "wide_address_range",
    "wildcard_public_suffix",
];

struct Linter<'a> {
    config: &'a HubConfig,
    out: Vec<Diagnostic>,
}

/// Runs every lint.
pub(crate) fn run(
    config: &HubConfig,
    res: &ResourceSite<'_>,
    sites: &[TriggerSite<'_>],
) -> Vec<Diagnostic> {
    let mut l = Linter {
        config,
        out: Vec::new(),
    };
    l.environments(res);
    for (i, a) in config.agents.iter().enumerate() {
        let _ = i;
        let p = Path::root().key("agents").key(a.name.clone());
        let found = agent_lints(&a.agent, res.file, res.root, &|| p.clone(), None);
        l.out.extend(found);
    }
    for (t, site) in config.triggers.iter().zip(sites) {
        l.trigger(t, site);
    }
    l.out
}

fn warn(
    file: &str,
    root: &crate::yaml::Node,
    code: &'static str,
    msg: impl Into<String>,
    p: &Path,
) -> Diagnostic {
    diag_at(file, root, false, code, msg, p)
}

impl Linter<'_> {
    fn environments(&mut self, res: &ResourceSite<'_>) {
        let cwds: Vec<(usize, &str)> = self
            .config
            .environments
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match &e.kind {
                EnvironmentKind::Daemon { cwd, .. } => Some((i, cwd.as_str())),
                EnvironmentKind::Fly { cwd, .. } | EnvironmentKind::Docker { cwd, .. } => {
                    cwd.as_deref().map(|c| (i, c))
                }
            })
            .collect();
        for &(i, cwd) in &cwds {
            let p = res.env_paths.get(i).cloned().unwrap_or_default().key("cwd");
            let name = self
                .config
                .environments
                .get(i)
                .map_or("", |e| e.name.as_str());
            if let Some(why) = broad_directory(cwd) {
                self.out.push(warn(res.file, res.root, "broad_cwd", format!("environment {name} cwd {cwd:?} is {why}; set cwd to the smallest directory the step needs"), &p));
            } else if let Some(&(_, other)) = cwds
                .iter()
                .find(|&&(j, c)| j != i && is_strict_ancestor(cwd, c))
            {
                self.out.push(warn(res.file, res.root, "broad_cwd", format!("environment {name} cwd {cwd:?} contains another environment's cwd {other:?}; do not mount unrelated repositories"), &p));
            }
            if !cwd.starts_with('/') {
                self.out.push(diag_at(
                    res.file,
                    res.root,
                    true,
                    "relative_cwd",
                    format!("environment {name} cwd {cwd:?} must be an absolute path"),
                    &p,
                ));
            }
        }
    }

    fn trigger(&mut self, t: &Trigger, site: &TriggerSite<'_>) {
        let f = t.filters.as_ref();
        let from_users = f.and_then(|f| f.from_users.as_ref());
        let fp = site.base.key("filters");
        let event = t.on.as_str();
        let source = t.source();
        if from_users.is_none_or(Vec::is_empty) {
            if event == "manual.run" {
                self.out.push(warn(site.file, site.root, "manual_without_from_users", format!("trigger {} has no filters.from_users, so every manual run is rejected (actor_forbidden)", t.name), &fp));
            } else {
                self.out.push(diag_at(site.file, site.root, true, "missing_from_users", format!("trigger {} requires a non-empty filters.from_users allowlist for externally sourced events", t.name), &fp));
            }
        }
        if !KNOWN_EVENTS.contains(&event) && !matches!(source, "forgejo" | "linear") {
            let mut d = warn(
                site.file,
                site.root,
                "unknown_event",
                format!("event {event:?} is not one the Hub emits; this trigger will never fire"),
                &site.base.key("on"),
            );
            if let Some(help) = crate::suggest::did_you_mean(event, KNOWN_EVENTS) {
                d = d.with_help(help);
            }
            self.out.push(d);
        }
        let missing = |k: &str| -> bool {
            match (f, k) {
                (None, _) => true,
                (Some(f), "repo") => f.repo.is_none(),
                (Some(f), "workspace") => f.workspace.is_none(),
                (Some(f), "guild") => f.guild.is_none(),
                (Some(f), "channels") => f.channels.as_ref().is_none_or(Vec::is_empty),
                _ => false,
            }
        };
        let pins: &[&str] = match source {
            "github" => &["repo"],
            "slack" => &["workspace", "channels"],
            "discord" => &["guild", "channels"],
            _ => &[],
        };
        for k in pins {
            if missing(k) {
                self.out.push(warn(
                    site.file,
                    site.root,
                    "unpinned_trigger",
                    format!(
                        "{source} trigger {} has no filters.{k}; pin it to the required {k}",
                        t.name
                    ),
                    &fp,
                ));
            }
        }
        // Steps whose output decides a later step's `if`.
        let deciders: Vec<&str> = t
            .steps
            .iter()
            .filter_map(|s| s.condition.as_ref())
            .flat_map(|c| {
                c.expressions()
                    .flat_map(|(e, _)| step_refs(e))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (i, s) in t.steps.iter().enumerate() {
            let sp = || site.base.key("steps").index(i);
            self.step(t, s, site, &sp, deciders.contains(&s.id.as_str()));
        }
    }

    fn step(
        &mut self,
        t: &Trigger,
        s: &Step,
        site: &TriggerSite<'_>,
        sp: &dyn Fn() -> Path,
        decides: bool,
    ) {
        if decides && !s.allow_outputs.is_empty() {
            self.out.push(warn(site.file, site.root, "classifier_with_outputs", format!("step {} decides a later step's if but has allow_outputs; keep the classifier without reply or other output authority", s.id), &sp().key("allow_outputs")));
        }
        let source = t.source();
        for (j, o) in s.allow_outputs.iter().enumerate() {
            let op = || sp().key("allow_outputs").index(j);
            match KNOWN_OUTPUTS.iter().find(|(k, _)| *k == o.kind) {
                None => self.out.push(if o.required {
                    diag_at(site.file, site.root, true, "required_output_unavailable", format!("required output capability unavailable: {}; no Hub output tool is registered for it", o.kind), &op().key("type"))
                } else {
                    warn(site.file, site.root, "unknown_output_type", format!("no Hub output tool is registered for {}; the declaration is silently dropped", o.kind), &op().key("type"))
                }),
                Some((_, ctx)) if *ctx != source => self.out.push(if o.required {
                    diag_at(site.file, site.root, true, "required_output_unavailable", format!("required output capability unavailable: {} in a {} run; every dispatch of step {} will fail", o.kind, t.on, s.id), &op().key("type"))
                } else {
                    warn(site.file, site.root, "output_unavailable", format!("{} is never available in a {} run; the declaration is silently dropped", o.kind, t.on), &op().key("type"))
                }),
                Some(_) => {}
            }
        }
        match &s.agent {
            AgentRef::Inline(a) => {
                let found = agent_lints(a, site.file, site.root, &|| sp().key("agent"), Some(s));
                self.out.extend(found);
            }
            AgentRef::Named(_) | AgentRef::Expression(_) => {}
        }
        if let EnvironmentRef::Named(_) = &s.environment {}
    }
}

fn step_refs(e: &Expr) -> Vec<&str> {
    e.paths()
        .into_iter()
        .filter_map(
            |(segs, _)| match (segs.first().map(String::as_str), segs.get(1)) {
                (Some("steps"), Some(id)) => Some(id.as_str()),
                _ => None,
            },
        )
        .collect()
}

/// Why a directory is too broad to be an agent's cwd or writable root.
pub(crate) fn broad_directory(dir: &str) -> Option<&'static str> {
    let d = dir.trim_end_matches('/');
    if d.is_empty() {
        return Some("the filesystem root");
    }
    if d == "~" || d == "$HOME" || d == "${HOME}" || d == "/root" {
        return Some("a home directory");
    }
    let segs: Vec<&str> = d.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["home" | "Users"] => Some("the parent of every home directory"),
        ["home" | "Users", _] => Some("a home directory"),
        [
            "etc" | "usr" | "var" | "opt" | "srv" | "tmp" | "mnt" | "workspace" | "workspaces"
            | "src" | "repos" | "code",
        ] => Some("a shared top-level directory that usually holds other repositories"),
        _ => None,
    }
}

fn is_strict_ancestor(a: &str, b: &str) -> bool {
    let a = a.trim_end_matches('/');
    b.len() > a.len() && b.starts_with(a) && b.as_bytes().get(a.len()) == Some(&b'/')
}

fn strings(v: Option<&Json>) -> Vec<&str> {
    v.and_then(Json::as_array)
        .map(|a| a.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default()
}

/// Lints of one agent's provider options.
fn agent_lints(
    a: &Agent,
    file: &str,
    root: &crate::yaml::Node,
    p: &dyn Fn() -> Path,
    _step: Option<&Step>,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    // Paths are built only when a finding is reported.
    let op = || p().key("options");
    let o = a.options.as_ref();
    let get = |k: &str| o.and_then(|o| o.get(k));
    let base = a.provider.split('/').next().unwrap_or("");
    match base {
        "codex" => {
            let mode = get("sandbox_mode").and_then(Json::as_str);
            let approval = get("approval_policy").and_then(Json::as_str);
            if mode == Some("danger-full-access") {
                if approval == Some("never") {
                    out.push(diag_at(file, root, true, "codex_unattended_full_access", "codex sandbox_mode danger-full-access with approval_policy never gives an unattended agent the whole host without any check", &op().key("sandbox_mode")));
                } else {
                    out.push(warn(
                        file,
                        root,
                        "codex_danger_full_access",
                        "codex sandbox_mode danger-full-access disables Codex's sandbox",
                        &op().key("sandbox_mode"),
                    ));
                }
            }
            if mode.is_none() && a.mode.is_none() {
                out.push(warn(
                    file,
                    root,
                    "implicit_provider_policy",
                    "codex agent without sandbox_mode; make the provider-native sandbox explicit",
                    &op(),
                ));
            }
            let sww = get("sandbox_workspace_write");
            if sww.and_then(|s| s.get("network_access")) == Some(&Json::Bool(true)) {
                out.push(warn(file, root, "codex_network_access", "codex sandbox_workspace_write.network_access true lets the agent reach the network from its sandbox", &op().key("sandbox_workspace_write").key("network_access")));
            }
            for (i, r) in strings(sww.and_then(|s| s.get("writable_roots")))
                .iter()
                .enumerate()
            {
                if let Some(why) = broad_directory(r) {
                    out.push(warn(
                        file,
                        root,
                        "broad_writable_root",
                        format!("writable root {r:?} is {why}"),
                        &op()
                            .key("sandbox_workspace_write")
                            .key("writable_roots")
                            .index(i),
                    ));
                }
            }
            if let Some(np) = get("features").and_then(|f| f.get("network_proxy")) {
                for k in [
                    "dangerously_allow_all_unix_sockets",
                    "dangerously_allow_non_loopback_proxy",
                ] {
                    if np.get(k) == Some(&Json::Bool(true)) {
                        out.push(warn(
                            file,
                            root,
                            "codex_dangerous_proxy",
                            format!("codex network_proxy.{k} weakens the network proxy"),
                            &op().key("features").key("network_proxy").key(k),
                        ));
                    }
                }
            }
        }
        "claude" => {
            for key in ["sandbox"] {
                let direct = || op().key(key);
                let nested = || op().key("settings").key("sandbox");
                let sb_paths: [(Option<&Json>, &dyn Fn() -> Path); 2] = [
                    (get(key), &direct),
                    (get("settings").and_then(|s| s.get("sandbox")), &nested),
                ];
                for (sb, sp) in sb_paths {
                    let Some(sb) = sb else { continue };
                    if sb.get("enabled") == Some(&Json::Bool(true))
                        && sb.get("failIfUnavailable") != Some(&Json::Bool(true))
                    {
                        out.push(warn(file, root, "claude_sandbox_not_fail_closed", "claude sandbox enabled without failIfUnavailable: true runs unsandboxed when the sandbox cannot start", &sp().key("enabled")));
                    }
                    if sb.get("allowUnsandboxedCommands") == Some(&Json::Bool(true)) {
                        out.push(warn(file, root, "claude_unsandboxed_commands", "claude allowUnsandboxedCommands: true lets a command opt out of the sandbox", &sp().key("allowUnsandboxedCommands")));
                    }
                }
            }
            let broad = ["Bash", "Edit", "Write", "MultiEdit", "NotebookEdit"];
            for (i, tool) in strings(get("allowedTools")).iter().enumerate() {
                let name = tool.split('(').next().unwrap_or(tool);
                let unscoped =
                    !tool.contains('(') || tool.ends_with("(*)") || tool.ends_with("(**)");
                if broad.contains(&name) && unscoped {
                    out.push(warn(file, root, "claude_broad_tool_allowed", format!("{tool} in allowedTools preapproves it for an unattended agent; use the native sandbox and permission rules instead"), &op().key("allowedTools").index(i)));
                }
            }
            for (i, d) in strings(get("additionalDirectories")).iter().enumerate() {
                if let Some(why) = broad_directory(d) {
                    out.push(warn(
                        file,
                        root,
                        "broad_writable_root",
                        format!("additional directory {d:?} is {why}"),
                        &op().key("additionalDirectories").index(i),
                    ));
                }
            }
            let has_policy = get("sandbox").is_some()
                || get("settings").is_some()
                || get("disallowedTools").is_some()
                || get("allowedTools").is_some();
            if !has_policy && a.mode.is_none() {
                out.push(warn(file, root, "implicit_provider_policy", "claude agent without sandbox, settings or tool rules; make the provider-native policy explicit", &op()));
            }
        }
        "opencode" => {
            match get("permission") {
                None => {
                    if a.mode.is_none() {
                        out.push(warn(file, root, "implicit_provider_policy", "opencode agent without permission; make the provider-native policy explicit", &op()));
                    }
                }
                Some(Json::String(s)) if s == "allow" => {
                    out.push(warn(file, root, "opencode_allow_all", "opencode permission: allow lets every tool run without asking, bash included", &op().key("permission")));
                }
                Some(Json::Object(m)) => {
                    match m.get("bash") {
                        Some(Json::String(s)) if s == "allow" => out.push(warn(
                            file,
                            root,
                            "opencode_bash_allow",
                            "opencode bash: allow lets the agent run any shell command",
                            &op().key("permission").key("bash"),
                        )),
                        Some(Json::Object(rules))
                            if rules.get("*").and_then(Json::as_str) == Some("allow") =>
                        {
                            out.push(warn(
                                file,
                                root,
                                "opencode_bash_allow",
                                "opencode bash \"*\": allow lets the agent run any shell command",
                                &op().key("permission").key("bash").key("*"),
                            ))
                        }
                        _ => {}
                    }
                    if m.get("external_directory").and_then(Json::as_str) == Some("allow") {
                        out.push(warn(file, root, "opencode_external_directory_allow", "opencode external_directory: allow lets the agent touch files outside its cwd", &op().key("permission").key("external_directory")));
                    }
                }
                Some(_) => {}
            }
        }
        _ => {}
    }
    out
}
