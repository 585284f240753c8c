//! Every stable diagnostic code `palisade check` can emit, with a one-line
//! description. `docs/check.md` has a section per code whose anchor is the
//! code (`docs/check.md#<code>`); a test keeps the two in step and checks
//! that every code the schema sources emit is listed here.

/// One documented code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CodeDoc {
    /// The stable code, e.g. `unknown_key`.
    pub code: &'static str,
    /// What the finding is, in one line (plain text).
    pub summary: &'static str,
}

/// Where the per-code sections are published.
pub const DOCS_URL: &str = "https://github.com/palisade-rs/palisade/blob/main/docs/check.md";

/// The documentation URL of `code`: [`DOCS_URL`] with the code as the
/// fragment (GitHub's anchor of the heading `` ### `code` ``).
///
/// ```
/// assert_eq!(
///     palisade_schema::codes::help_uri("unknown_key"),
///     "https://github.com/palisade-rs/palisade/blob/main/docs/check.md#unknown_key"
/// );
/// ```
pub fn help_uri(code: &str) -> String {
    format!("{DOCS_URL}#{code}")
}

/// The documented summary of `code`, if it is listed in [`CODES`].
pub fn summary(code: &str) -> Option<&'static str> {
    CODES.iter().find(|c| c.code == code).map(|c| c.summary)
}

/// Every documented code, grouped as in `docs/check.md`.
pub const CODES: &[CodeDoc] = &[
    CodeDoc {
        code: "file_too_large",
        summary: "A YAML file is larger than palisade reads.",
    },
    CodeDoc {
        code: "yaml_syntax",
        summary: "The file is not well-formed YAML.",
    },
    CodeDoc {
        code: "yaml_limit_exceeded",
        summary: "Nesting, aliases or nodes beyond palisade's limits.",
    },
    CodeDoc {
        code: "yaml_multiple_documents",
        summary: "More than one YAML document in a file.",
    },
    CodeDoc {
        code: "yaml_tab_indentation",
        summary: "A tab used as indentation.",
    },
    CodeDoc {
        code: "yaml_unsupported_tag",
        summary: "A custom or non-core YAML tag.",
    },
    CodeDoc {
        code: "yaml_non_finite_number",
        summary: ".nan or .inf as a value.",
    },
    CodeDoc {
        code: "duplicate_key",
        summary: "A key repeated in one mapping.",
    },
    CodeDoc {
        code: "invalid_utf8",
        summary: "The file is not UTF-8.",
    },
    CodeDoc {
        code: "unquoted_timestamp",
        summary: "An unquoted date or date-time where a string is expected (L14 for a schedule's start).",
    },
    CodeDoc {
        code: "internal",
        summary: "palisade broke one of its own invariants.",
    },
    CodeDoc {
        code: "unknown_key",
        summary: "A key that is not part of the schema.",
    },
    CodeDoc {
        code: "missing_field",
        summary: "A required key is absent.",
    },
    CodeDoc {
        code: "invalid_type",
        summary: "A value of the wrong JSON type.",
    },
    CodeDoc {
        code: "invalid_value",
        summary: "A value outside its enum, pattern or range.",
    },
    CodeDoc {
        code: "invalid_identifier",
        summary: "A name or id that is not an identifier.",
    },
    CodeDoc {
        code: "invalid_key",
        summary: "A record key the Hub refuses.",
    },
    CodeDoc {
        code: "invalid_duration",
        summary: "A duration that is not ^[1-9][0-9]*(ms|s|m|h)$.",
    },
    CodeDoc {
        code: "duration_too_long",
        summary: "A duration over its limit.",
    },
    CodeDoc {
        code: "idle_timeout_exceeds_max_runtime",
        summary: "idle_timeout larger than max_runtime.",
    },
    CodeDoc {
        code: "invalid_output_schema",
        summary: "An output.schema that the Hub's ajv refuses in strict mode.",
    },
    CodeDoc {
        code: "invalid_output_max",
        summary: "An output grant's max below 1.",
    },
    CodeDoc {
        code: "invalid_expression",
        summary: "A ${{ … }} that does not parse, or an if that is not one expression.",
    },
    CodeDoc {
        code: "removed_field",
        summary: "A field the Hub removed.",
    },
    CodeDoc {
        code: "dynamic_inline_agent",
        summary: "An expression in an inline agent's provider, model, mode or thinkingOptionId.",
    },
    CodeDoc {
        code: "duplicate_id",
        summary: "A step id, trigger or environment name repeated.",
    },
    CodeDoc {
        code: "invalid_default_type",
        summary: "An input default of the wrong type.",
    },
    CodeDoc {
        code: "invalid_default_choice",
        summary: "An input default outside its choices.",
    },
    CodeDoc {
        code: "unknown_provider",
        summary: "options for a provider palisade has no schema for.",
    },
    CodeDoc {
        code: "unsupported_provider",
        summary: "A provider other than codex, claude, opencode.",
    },
    CodeDoc {
        code: "ignored_key",
        summary: "A key the Hub ignores without an error: __proto__, or an unknown key under worktree.",
    },
    CodeDoc {
        code: "invalid_filter_type",
        summary: "An input filter whose value does not match the input's declared type.",
    },
    CodeDoc {
        code: "invalid_filter_choice",
        summary: "An input filter whose value is not one of the input's choices.",
    },
    CodeDoc {
        code: "input_required_and_default",
        summary: "An input that is both required: true and has a default.",
    },
    CodeDoc {
        code: "invalid_github_permission",
        summary: "A GitHub token permission the Hub does not know, or a level that permission does not have.",
    },
    CodeDoc {
        code: "no_events",
        summary: "on has no event.",
    },
    CodeDoc {
        code: "unreleased_event",
        summary: "An event the chosen Hub release does not have.",
    },
    CodeDoc {
        code: "invalid_agent",
        summary: "run.agent is neither an agent nor a select/choices pair.",
    },
    CodeDoc {
        code: "no_agent_choices",
        summary: "run.agent.choices is empty.",
    },
    CodeDoc {
        code: "blank_continuation_key",
        summary: "A blank run.continuation.key.",
    },
    CodeDoc {
        code: "label_required",
        summary: "A label event without filters.label.",
    },
    CodeDoc {
        code: "recurrence_not_schedule",
        summary: "recurrence on an event other than schedule.tick.",
    },
    CodeDoc {
        code: "schedule_shape",
        summary: "A schedule without recurrence, or with connection or filters.",
    },
    CodeDoc {
        code: "schedule_not_alone",
        summary: "A schedule beside another event, or with inputs.",
    },
    CodeDoc {
        code: "invalid_timezone",
        summary: "A recurrence timezone that is not an IANA name.",
    },
    CodeDoc {
        code: "invalid_start",
        summary: "A recurrence start that is not a local date-time.",
    },
    CodeDoc {
        code: "invalid_rule",
        summary: "A recurrence rule the Hub refuses.",
    },
    CodeDoc {
        code: "forgejo_filter",
        summary: "A filter key that Forgejo events do not support.",
    },
    CodeDoc {
        code: "linear_scope_required",
        summary: "linear.issue_entered_scope without filters.project.",
    },
    CodeDoc {
        code: "title_path",
        summary: "run.title uses a path other than paseo.execution.id.",
    },
    CodeDoc {
        code: "missing_mode",
        summary: "An agent without mode in a new trigger document.",
    },
    CodeDoc {
        code: "trigger_path_unsupported",
        summary: "An entry of .paseo/triggers that is not a direct-child .yml file.",
    },
    CodeDoc {
        code: "trigger_missing",
        summary: ".paseo/triggers holds no trigger document.",
    },
    CodeDoc {
        code: "duplicate_trigger_name",
        summary: "Two trigger documents share a name.",
    },
    CodeDoc {
        code: "unknown_step_reference",
        summary: "steps.X names no step.",
    },
    CodeDoc {
        code: "forward_step_reference",
        summary: "steps.X names this step or a later one.",
    },
    CodeDoc {
        code: "step_output_without_schema",
        summary: "The referenced step has no output.schema.",
    },
    CodeDoc {
        code: "unknown_output_field",
        summary: "A field the referenced step's closed output schema does not allow.",
    },
    CodeDoc {
        code: "unsupported_path",
        summary: "A path the Hub does not support, or not in this field.",
    },
    CodeDoc {
        code: "context_outside_prompt",
        summary: "paseo.context outside a step prompt.",
    },
    CodeDoc {
        code: "execution_outside_new_branch",
        summary: "paseo.execution.id outside worktree.newBranch (or a title).",
    },
    CodeDoc {
        code: "unknown_input",
        summary: "paseo.inputs.X names no declared input.",
    },
    CodeDoc {
        code: "unknown_value",
        summary: "values.X names no declared value.",
    },
    CodeDoc {
        code: "value_cycle",
        summary: "values that depend on each other.",
    },
    CodeDoc {
        code: "prompt_in_authority",
        summary: "paseo.prompt in environment or agent.",
    },
    CodeDoc {
        code: "non_finite_authority",
        summary: "An environment or agent expression that is not provably one of a finite set.",
    },
    CodeDoc {
        code: "choice_limit_exceeded",
        summary: "A value used for authority that can take more than 4,096 distinct values (or 1 MiB of them).",
    },
    CodeDoc {
        code: "unreachable_comparison",
        summary: "A comparison with a literal the referenced enum never holds.",
    },
    CodeDoc {
        code: "unknown_environment",
        summary: "A step's environment (or a possible value of its expression) is not defined.",
    },
    CodeDoc {
        code: "non_daemon_environment",
        summary: "A step in a non-daemon environment.",
    },
    CodeDoc {
        code: "unknown_agent",
        summary: "A named agent that .paseo/hub.yml does not define.",
    },
    CodeDoc {
        code: "reserved_env_key",
        summary: "GH_TOKEN, GITHUB_TOKEN, GIT_CONFIG_* or GIT_TERMINAL_PROMPT in env beside a github block.",
    },
    CodeDoc {
        code: "github_repositories_required",
        summary: "A github block on a non-GitHub trigger without repositories.",
    },
    CodeDoc {
        code: "missing_hub_file",
        summary: "No .paseo/hub.yml.",
    },
    CodeDoc {
        code: "monolithic_triggers",
        summary: "triggers: in hub.yml or in a workflow file.",
    },
    CodeDoc {
        code: "not_in_workflow_file",
        summary: "uses, workflow, workflows, call, environment or agent at the top of a workflow file.",
    },
    CodeDoc {
        code: "repeated_name",
        summary: "An environment in the hub.yml map repeats its name.",
    },
    CodeDoc {
        code: "toml_not_accepted",
        summary: ".toml configuration.",
    },
    CodeDoc {
        code: "wrong_extension",
        summary: ".yaml instead of .yml.",
    },
    CodeDoc {
        code: "nested_workflow_dir",
        summary: "A workflow file below a subdirectory of .paseo/workflows/.",
    },
    CodeDoc {
        code: "invalid_partial_path",
        summary: "A partial that is not a .md file under partials/.",
    },
    CodeDoc {
        code: "unsafe_bundle_path",
        summary: "An absolute path, ./.. segments, a backslash, a path outside .paseo/, or an escaping include.",
    },
    CodeDoc {
        code: "bundle_path_too_long",
        summary: "A path over 512 characters.",
    },
    CodeDoc {
        code: "unknown_partial",
        summary: "An include that names no partial.",
    },
    CodeDoc {
        code: "unreferenced_partial",
        summary: "A partial no step includes.",
    },
    CodeDoc {
        code: "partial_too_large",
        summary: "A partial over 1,000,000 bytes.",
    },
    CodeDoc {
        code: "partials_too_large",
        summary: "Partials over 5,000,000 bytes in total.",
    },
    CodeDoc {
        code: "too_many_partials",
        summary: "More than 100 partials.",
    },
    CodeDoc {
        code: "too_many_workflows",
        summary: "More than 1000 workflows.",
    },
    CodeDoc {
        code: "unexpected_bundle_file",
        summary: "A file under .paseo/ that is not part of the layout.",
    },
    CodeDoc {
        code: "missing_workflow",
        summary: "A bundle with no .paseo/workflows/<workflow>.yml.",
    },
    CodeDoc {
        code: "include_in_single_file",
        summary: "A prompt include: in a single-file workflow.",
    },
    CodeDoc {
        code: "missing_from_users",
        summary: "An external trigger without a non-empty filters.from_users.",
    },
    CodeDoc {
        code: "manual_without_from_users",
        summary: "A manual.run v0.6 trigger without from_users.",
    },
    CodeDoc {
        code: "unpinned_trigger",
        summary: "GitHub without repo, Slack without workspace/channels, Discord without guild/channels.",
    },
    CodeDoc {
        code: "unknown_event",
        summary: "An on name the Hub does not emit.",
    },
    CodeDoc {
        code: "classifier_with_outputs",
        summary: "Output grants on a step whose output decides a later step's if.",
    },
    CodeDoc {
        code: "required_output_unavailable",
        summary: "A required: true output that cannot exist in this trigger's run.",
    },
    CodeDoc {
        code: "output_unavailable",
        summary: "An output that is never available in this trigger's run.",
    },
    CodeDoc {
        code: "unknown_output_type",
        summary: "An output type no Hub tool is registered for.",
    },
    CodeDoc {
        code: "codex_unattended_full_access",
        summary: "Codex danger-full-access with approval_policy: never.",
    },
    CodeDoc {
        code: "codex_danger_full_access",
        summary: "Codex sandbox_mode: danger-full-access.",
    },
    CodeDoc {
        code: "codex_network_access",
        summary: "Codex sandbox_workspace_write.network_access: true.",
    },
    CodeDoc {
        code: "codex_dangerous_proxy",
        summary: "Codex network_proxy.dangerously_allow_*.",
    },
    CodeDoc {
        code: "claude_sandbox_not_fail_closed",
        summary: "Claude sandbox.enabled: true without failIfUnavailable: true.",
    },
    CodeDoc {
        code: "claude_unsandboxed_commands",
        summary: "Claude allowUnsandboxedCommands: true.",
    },
    CodeDoc {
        code: "claude_broad_tool_allowed",
        summary: "Bash, Edit, Write, MultiEdit or NotebookEdit, unscoped, in allowedTools.",
    },
    CodeDoc {
        code: "opencode_allow_all",
        summary: "OpenCode permission: allow.",
    },
    CodeDoc {
        code: "opencode_bash_allow",
        summary: "OpenCode bash: allow or bash: {\"*\": allow}.",
    },
    CodeDoc {
        code: "opencode_external_directory_allow",
        summary: "OpenCode external_directory: allow.",
    },
    CodeDoc {
        code: "implicit_provider_policy",
        summary: "An agent with no explicit provider-native policy and no mode.",
    },
    CodeDoc {
        code: "broad_cwd",
        summary: "A working directory that holds more than the run needs.",
    },
    CodeDoc {
        code: "broad_writable_root",
        summary: "A broad Codex writable_roots or Claude additionalDirectories entry.",
    },
    CodeDoc {
        code: "relative_cwd",
        summary: "A cwd that is not absolute.",
    },
    CodeDoc {
        code: "provider_sandbox_unavailable",
        summary: "Only with --policy: provider options that turn on the provider's own sandbox.",
    },
    CodeDoc {
        code: "wildcard_principal",
        summary: "L1: \"*\" in from_users.",
    },
    CodeDoc {
        code: "implicit_manual_wildcard",
        summary: "L2: manual.run without from_users.",
    },
    CodeDoc {
        code: "unbounded_reply",
        summary: "L3: a conversational event without an authored reply grant.",
    },
    CodeDoc {
        code: "full_access_mode",
        summary: "L4: an agent with full access in a run started by an external event.",
    },
    CodeDoc {
        code: "external_network_access",
        summary: "Codex network_access: true in a run started by an external event.",
    },
    CodeDoc {
        code: "implicit_mode",
        summary: "L5: an agent without mode.",
    },
    CodeDoc {
        code: "autonomous_linear_scope",
        summary: "L6: linear.issue_entered_scope with GitHub write authority or full access.",
    },
    CodeDoc {
        code: "write_authority_broad_principal",
        summary: "L7: GitHub write/admin for a broad principal.",
    },
    CodeDoc {
        code: "unattended_schedule",
        summary: "L9: a schedule with full access or write authority, or sharing one conversation.",
    },
    CodeDoc {
        code: "shared_continuation",
        summary: "L10: a shared continuation with a wildcard principal.",
    },
    CodeDoc {
        code: "multi_event_authority",
        summary: "L11: events with different providers or principals in one document.",
    },
    CodeDoc {
        code: "no_classifier_lane",
        summary: "L12 (info): an external single run with write authority or full access.",
    },
    CodeDoc {
        code: "unattended_provider",
        summary: "L16: a provider other than Claude, Codex or OpenCode.",
    },
    CodeDoc {
        code: "legacy_lane",
        summary: "L15 (info): a legacy_multistep document.",
    },
    CodeDoc {
        code: "non_atomic_deploy",
        summary: "L17 (info): more than one trigger file.",
    },
    CodeDoc {
        code: "trigger_workflow_name_clash",
        summary: "A trigger document and a legacy workflow share a name.",
    },
    CodeDoc {
        code: "syntax",
        summary: "The policy is not well-formed TOML.",
    },
    CodeDoc {
        code: "too_large",
        summary: "The policy file is larger than palisade reads.",
    },
    CodeDoc {
        code: "type_mismatch",
        summary: "A policy value of the wrong type.",
    },
    CodeDoc {
        code: "missing_key",
        summary: "A required policy key is absent.",
    },
    CodeDoc {
        code: "duplicate",
        summary: "A name listed twice.",
    },
    CodeDoc {
        code: "weakens_base",
        summary: "A custom profile that weakens its base.",
    },
    CodeDoc {
        code: "unknown_kind",
        summary: "An unknown kind name.",
    },
    CodeDoc {
        code: "invalid_glob",
        summary: "A glob pattern that is invalid or misplaced.",
    },
    CodeDoc {
        code: "invalid_path",
        summary: "A path that is not absolute or has ./.. segments.",
    },
    CodeDoc {
        code: "not_normalised",
        summary: "A path or pattern palisade compares in normalised form.",
    },
    CodeDoc {
        code: "invalid_address",
        summary: "An address, range or size value that does not parse.",
    },
    CodeDoc {
        code: "invalid_host_pattern",
        summary: "A host pattern palisade refuses.",
    },
    CodeDoc {
        code: "wildcard_public_suffix",
        summary: "A wildcard over a public suffix.",
    },
    CodeDoc {
        code: "shared_hosting_wildcard",
        summary: "A wildcard over a shared-hosting domain.",
    },
    CodeDoc {
        code: "wide_address_range",
        summary: "An address range that opens most of the address space.",
    },
    CodeDoc {
        code: "allow_shadowed",
        summary: "An allow rule that a deny rule always covers.",
    },
    CodeDoc {
        code: "insecure_origin",
        summary: "A relay origin over plain http.",
    },
    CodeDoc {
        code: "empty_routes",
        summary: "A relay with no routes.",
    },
    CodeDoc {
        code: "route_shadows_outward",
        summary: "A plain route that wins over an outward route.",
    },
    CodeDoc {
        code: "relay_origin_allowed",
        summary: "An egress rule naming a relay's origin.",
    },
    CodeDoc {
        code: "relay_provider_mismatch",
        summary: "A relay bound to one provider whose origin is another's API host.",
    },
    CodeDoc {
        code: "routing_provider_unbound",
        summary: "A routing provider with no relay and no API hosts.",
    },
    CodeDoc {
        code: "route_nowhere",
        summary: "A routing rule that sends paths to no provider.",
    },
    CodeDoc {
        code: "outward_allow_everything",
        summary: "An outward allow rule for every kind.",
    },
    CodeDoc {
        code: "outward_allow_untargeted",
        summary: "An outward allow without a target.",
    },
    CodeDoc {
        code: "outward_delete_allowed_with_force_denied",
        summary: "git.delete_ref allowed while git.force_push is denied.",
    },
    CodeDoc {
        code: "direct_writes",
        summary: "writes = \"direct\".",
    },
    CodeDoc {
        code: "no_steering_paths",
        summary: "The worker can write but taint.steering_paths is empty.",
    },
    CodeDoc {
        code: "observe_self_report",
        summary: "Reads of paths seen only when the worker reports them.",
    },
    CodeDoc {
        code: "taint_allow_not_allowed",
        summary: "A taint allow entry not covered by egress.allow.",
    },
    CodeDoc {
        code: "taint_disabled",
        summary: "No taint source is enabled.",
    },
    CodeDoc {
        code: "ship_tls_ca_missing",
        summary: "A syslog+tls evidence.ship URL without evidence.tls_ca.",
    },
    CodeDoc {
        code: "suppression_without_reason",
        summary: "A suppression comment with no reason after the parenthesis.",
    },
    CodeDoc {
        code: "unknown_suppression",
        summary: "A suppression comment naming a code that is not a lint, or not in the form allow(code) reason.",
    },
    CodeDoc {
        code: "unused_suppression",
        summary: "A suppression that silenced nothing in its file.",
    },
    CodeDoc {
        code: "unknown_option_newer_daemon",
        summary: "A provider option key palisade's schemas do not model, under --daemon-version newer than the modelled daemon.",
    },
];
