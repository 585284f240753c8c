//! The Hub compiler's own rules (getpaseo/hub v0.6.0 @ 8682093) as palisade
//! follows them: each refusal next to its positive control, the nearest
//! form the Hub accepts.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use palisade_schema::{Diagnostic, parse_bundle_str, parse_workflow};

/// A manual trigger with one input `n` (declaration given) and a filter
/// and step body to fill in.
fn workflow(inputs: &str, filters: &str, step_extra: &str) -> String {
    format!(
        r#"environments:
  - name: dev
    kind: daemon
    daemon: laptop
    cwd: /home/dev/src/project
triggers:
  - name: review
    'on': manual.run
    max_runtime: 1h
    filters:
      from_users: [automation]
{filters}
    inputs:
{inputs}
    steps:
      - id: review
        environment: dev
        max_runtime: 30m
        idle_timeout: 5m
        agent:
          provider: codex
          options: {{approval_policy: never, sandbox_mode: read-only, web_search: disabled}}
        prompt:
          - text: 'Review: ${{{{ paseo.prompt }}}}'
{step_extra}
"#
    )
}

const STRING_CHOICES: &str = "      n: {type: string, choices: [a, b]}";

fn errors(text: &str) -> Vec<Diagnostic> {
    match parse_workflow("w.yml", text) {
        Ok(_) => Vec::new(),
        Err(d) => d
            .into_vec()
            .into_iter()
            .filter(Diagnostic::is_error)
            .collect(),
    }
}

fn warnings(text: &str) -> Vec<Diagnostic> {
    match parse_workflow("w.yml", text) {
        Ok(p) => p.into_parts().1,
        Err(d) => panic!("refused: {d}"),
    }
}

/// The one error of `text`, which must have `code` and contain `message`.
#[track_caller]
fn refused(text: &str, code: &str, message: &str) -> Diagnostic {
    let e = errors(text);
    assert_eq!(e.len(), 1, "expected one error, got {e:#?}");
    let d = e.into_iter().next().unwrap();
    assert_eq!(d.code, code, "{d:#?}");
    assert!(
        d.message.contains(message),
        "{:?} lacks {message:?}",
        d.message
    );
    assert!(d.line > 0 && d.column > 0);
    d
}

#[track_caller]
fn accepted(text: &str) {
    let e = errors(text);
    assert!(e.is_empty(), "expected acceptance, got {e:#?}");
}

// ----- input rules (compiler.ts compileInputs / validateInputFilters) -----

#[test]
fn a_filter_on_an_undeclared_input_is_refused() {
    let ok = workflow(STRING_CHOICES, "      inputs: {n: a}", "");
    accepted(&ok);
    let bad = workflow(STRING_CHOICES, "      inputs: {repo: a}", "");
    let d = refused(
        &bad,
        "unknown_input",
        "trigger review input filter references undeclared input repo",
    );
    assert_eq!(d.path.to_string(), ".triggers[0].filters.inputs.repo");
}

#[test]
fn a_filter_of_the_wrong_type_is_refused() {
    let number = "      n: {type: number}";
    accepted(&workflow(number, "      inputs: {n: 3}", ""));
    refused(
        &workflow(number, "      inputs: {n: three}", ""),
        "invalid_filter_type",
        "trigger review input filter n does not match type",
    );
    let string = "      n: {type: string}";
    accepted(&workflow(string, "      inputs: {n: '3'}", ""));
    refused(
        &workflow(string, "      inputs: {n: 3}", ""),
        "invalid_filter_type",
        "input filter n does not match type",
    );
    let boolean = "      n: {type: boolean}";
    accepted(&workflow(boolean, "      inputs: {n: true}", ""));
    refused(
        &workflow(boolean, "      inputs: {n: 'true'}", ""),
        "invalid_filter_type",
        "does not match type",
    );
}

#[test]
fn a_filter_outside_the_choices_is_refused_and_numbers_compare_by_value() {
    accepted(&workflow(STRING_CHOICES, "      inputs: {n: b}", ""));
    refused(
        &workflow(STRING_CHOICES, "      inputs: {n: c}", ""),
        "invalid_filter_choice",
        "trigger review input filter n is not an allowed choice",
    );
    // JavaScript's `===`: 1 and 1.0 are one number.
    let numbers = "      n: {type: number, choices: [1, 2]}";
    accepted(&workflow(numbers, "      inputs: {n: 1.0}", ""));
    refused(
        &workflow(numbers, "      inputs: {n: 3}", ""),
        "invalid_filter_choice",
        "not an allowed choice",
    );
}

#[test]
fn an_input_both_required_and_defaulted_is_refused() {
    accepted(&workflow(
        "      n: {type: string, required: false, default: a}",
        "",
        "",
    ));
    accepted(&workflow("      n: {type: string, required: true}", "", ""));
    refused(
        &workflow(
            "      n: {type: string, required: true, default: a}",
            "",
            "",
        ),
        "input_required_and_default",
        "trigger review input n cannot be both required and defaulted",
    );
}

#[test]
fn an_empty_value_is_refused() {
    let with_values = |v: &str| {
        workflow(STRING_CHOICES, "", "").replace(
            "    steps:\n",
            &format!("    values:\n      a: {v}\n    steps:\n"),
        )
    };
    accepted(&with_values("'${{ paseo.inputs.n }}'"));
    refused(
        &with_values("''"),
        "invalid_value",
        "Too small: expected string to have >=1 characters",
    );
}

// ----- GitHub permissions (github-authority.ts) -----

fn github(permissions: &str) -> String {
    workflow(
        STRING_CHOICES,
        "",
        &format!(
            "        github:\n          connection: gh\n          repositories: [o/r]\n          permissions: {{{permissions}}}"
        ),
    )
}

#[test]
fn github_permissions_follow_the_hubs_table() {
    accepted(&github("contents: write, issues: read"));
    accepted(&github("organization_events: read, profile: write"));
    accepted(&github("repository_projects: admin"));
    refused(
        &github("wiki: read"),
        "invalid_github_permission",
        "github.permissions.wiki: unknown GitHub permission",
    );
    refused(
        &github("actions_variables: read"),
        "invalid_github_permission",
        "unknown GitHub permission",
    );
    refused(
        &github("organization_events: write"),
        "invalid_github_permission",
        "github.permissions.organization_events: level write is not supported; GitHub allows read",
    );
    refused(
        &github("profile: read"),
        "invalid_github_permission",
        "level read is not supported; GitHub allows write",
    );
    refused(
        &github("contents: admin"),
        "invalid_github_permission",
        "level admin is not supported; GitHub allows read or write",
    );
    refused(
        &github("workflows: read"),
        "invalid_github_permission",
        "GitHub allows write",
    );
}

#[test]
fn every_name_of_the_table_is_accepted_at_each_of_its_levels_and_no_other() {
    use palisade_schema::GithubLevel;
    let all = [GithubLevel::Read, GithubLevel::Write, GithubLevel::Admin];
    for (name, levels) in palisade_schema::github_permissions::PERMISSIONS {
        for level in all {
            let text = github(&format!("{name}: {}", level.as_str()));
            if levels.contains(&level) {
                accepted(&text);
            } else {
                refused(&text, "invalid_github_permission", "is not supported");
            }
        }
    }
}

// ----- timeout anywhere (compiler.ts rejectTimeoutAnywhere) -----

#[test]
fn a_timeout_key_is_refused_at_any_depth() {
    let env = |name: &str| workflow(STRING_CHOICES, "", &format!("        env: {{{name}: x}}"));
    accepted(&env("timeouts"));
    let d = refused(
        &env("timeout"),
        "removed_field",
        "timeout was removed; use max_runtime",
    );
    assert_eq!(d.path.to_string(), ".triggers[0].steps[0].env.timeout");
    // As an input name, as a JSON Schema property, on a step: one finding each.
    refused(
        &workflow("      timeout: {type: string}", "", ""),
        "removed_field",
        "timeout was removed",
    );
    refused(
        &workflow(
            STRING_CHOICES,
            "",
            "        output:\n          schema: {type: object, properties: {timeout: {type: string}}}",
        ),
        "removed_field",
        "timeout was removed",
    );
    refused(
        &workflow(STRING_CHOICES, "", "        timeout: 5m"),
        "removed_field",
        "timeout was removed",
    );
}

#[test]
fn a_bundle_refuses_timeout_in_workflows_and_environments_but_not_in_named_agents() {
    let hub = |env_extra: &str, agent_options: &str| {
        format!(
            "environments:\n  dev:\n    kind: daemon\n    daemon: d\n    cwd: /w\n{env_extra}agents:\n  a:\n    provider: claude\n    options: {{{agent_options}}}\n"
        )
    };
    let wf = "name: t\n'on': manual.run\nmax_runtime: 1h\nsteps:\n  - id: s\n    environment: dev\n    max_runtime: 5m\n    idle_timeout: 1m\n    agent: a\n    prompt: [{text: hi}]\n";
    let run = |h: &str, w: &str| match parse_bundle_str(&[
        (".paseo/hub.yml", h),
        (".paseo/workflows/t.yml", w),
    ]) {
        Ok(_) => Vec::new(),
        Err(d) => d
            .into_vec()
            .into_iter()
            .filter(Diagnostic::is_error)
            .map(|d| d.code)
            .collect::<Vec<_>>(),
    };
    assert_eq!(run(&hub("", ""), wf), Vec::<&str>::new());
    let in_env = hub(
        "    worktree: {mode: checkout-branch, branch: main, timeout: 1}\n",
        "",
    );
    assert_eq!(run(&in_env, wf), ["removed_field"]);
    let in_wf = wf.replace("    agent: a\n", "    agent: a\n    env: {timeout: x}\n");
    assert_eq!(run(&hub("", ""), &in_wf), ["removed_field"]);
    // hub.yml agents are outside the configuration the Hub walks; the
    // provider option schema (palisade's, under agent options) judges it.
    let in_agent = run(&hub("", "timeout: 5"), wf);
    assert!(!in_agent.contains(&"removed_field"), "{in_agent:?}");
}

// ----- env record keys, worktree, steps.X.outputs -----

#[test]
fn an_empty_env_name_is_refused() {
    accepted(&workflow(STRING_CHOICES, "", "        env: {A: x}"));
    refused(
        &workflow(STRING_CHOICES, "", "        env: {'': x}"),
        "invalid_key",
        "Invalid key in record",
    );
}

#[test]
fn unknown_worktree_keys_are_stripped_with_a_warning_as_the_hub_strips_them() {
    let with = |wt: &str| {
        workflow(STRING_CHOICES, "", "").replace(
            "    cwd: /home/dev/src/project\n",
            &format!("    cwd: /home/dev/src/project\n    worktree: {wt}\n"),
        )
    };
    assert!(warnings(&with("{mode: checkout-branch, branch: main}")).is_empty());
    let w = warnings(&with("{mode: checkout-branch, branch: main, depth: 1}"));
    assert_eq!(w.len(), 1, "{w:#?}");
    assert_eq!(w[0].code, "ignored_key");
    assert_eq!(w[0].path.to_string(), ".environments[0].worktree.depth");
    // The discriminator and the mode's own keys stay checked.
    refused(
        &with("{mode: checkout-pr, prNumber: '1'}"),
        "invalid_value",
        "prNumber",
    );
    refused(&with("{mode: clone}"), "invalid_value", "branch-off");
}

#[test]
fn steps_outputs_needs_a_field_after_it() {
    let two = |cond: &str| {
        workflow(
            STRING_CHOICES,
            "",
            &format!(
                "        output:\n          schema: {{type: object, properties: {{kind: {{enum: [a, b]}}}}}}\n      - id: next\n        if: \"{cond}\"\n        environment: dev\n        max_runtime: 30m\n        idle_timeout: 5m\n        agent: {{provider: codex, options: {{approval_policy: never, sandbox_mode: read-only, web_search: disabled}}}}\n        prompt: [{{text: next}}]"
            ),
        )
    };
    accepted(&two("${{ steps.review.outputs.kind == 'a' }}"));
    refused(
        &two("${{ steps.review.outputs }}"),
        "unsupported_path",
        "unsupported path steps.review.outputs",
    );
}

#[test]
fn an_include_in_a_single_file_is_refused() {
    let text = workflow(STRING_CHOICES, "", "").replace(
        "          - text: 'Review: ${{ paseo.prompt }}'",
        "          - include: partials/review.md",
    );
    refused(&text, "include_in_single_file", "no prompt partial bundle");
}

// ----- bundle layout (bundle.ts, prompt-partials.ts, project-slug.ts) -----

const HUB: &str = "environments:\n  dev: {kind: daemon, daemon: d, cwd: /w}\n";

fn flow(prompt: &str) -> String {
    format!(
        "name: t\n'on': manual.run\nmax_runtime: 1h\nsteps:\n  - id: s\n    environment: dev\n    max_runtime: 5m\n    idle_timeout: 1m\n    agent: {{provider: codex, options: {{approval_policy: never, sandbox_mode: read-only, web_search: disabled}}}}\n    prompt: [{prompt}]\n  - id: u\n    environment: dev\n    max_runtime: 5m\n    idle_timeout: 1m\n    agent: {{provider: codex, options: {{approval_policy: never, sandbox_mode: read-only, web_search: disabled}}}}\n    prompt: [{{text: later}}]\n    output: {{schema: {{type: object, properties: {{k: {{type: string}}}}}}}}\n"
    )
}

fn bundle_errors(files: &[(&str, &str)]) -> Vec<Diagnostic> {
    match parse_bundle_str(files) {
        Ok(_) => Vec::new(),
        Err(d) => d
            .into_vec()
            .into_iter()
            .filter(Diagnostic::is_error)
            .collect(),
    }
}

#[track_caller]
fn bundle_refused(files: &[(&str, &str)], code: &str, message: &str) -> Diagnostic {
    let e = bundle_errors(files);
    assert_eq!(e.len(), 1, "expected one error, got {e:#?}");
    let d = e.into_iter().next().unwrap();
    assert_eq!(d.code, code, "{d:#?}");
    assert!(
        d.message.contains(message),
        "{:?} lacks {message:?}",
        d.message
    );
    d
}

#[test]
fn partials_may_nest_but_must_be_markdown() {
    let wf = flow("{include: partials/sub/deep/x.md}");
    let ok = [
        (".paseo/hub.yml", HUB),
        (".paseo/workflows/t.yml", wf.as_str()),
        (".paseo/workflows/partials/sub/deep/x.md", "Classify."),
    ];
    assert!(bundle_errors(&ok).is_empty(), "{:#?}", bundle_errors(&ok));
    let wf_txt = flow("{include: partials/sub/x.txt}");
    let e = bundle_errors(&[
        (".paseo/hub.yml", HUB),
        (".paseo/workflows/t.yml", wf_txt.as_str()),
        (".paseo/workflows/partials/sub/x.txt", "Classify."),
    ]);
    assert!(
        e.iter()
            .any(|d| d.code == "invalid_partial_path" && d.message.contains(".md extension")),
        "{e:#?}"
    );
}

#[test]
fn includes_are_resolved_as_the_hub_resolves_them() {
    let files = |inc: &str| {
        (
            flow(&format!("{{include: '{inc}'}}")),
            ".paseo/workflows/partials/a b.md",
        )
    };
    // Percent-decoded (decodeURIComponent) and `\` read as `/`.
    for inc in [
        "partials/a b.md",
        "partials/a%20b.md",
        "partials/a%2520b.md",
        "partials\\a b.md",
    ] {
        let (wf, partial) = files(inc);
        let e = bundle_errors(&[
            (".paseo/hub.yml", HUB),
            (".paseo/workflows/t.yml", wf.as_str()),
            (partial, "Classify."),
        ]);
        assert!(e.is_empty(), "{inc}: {e:#?}");
    }
    // Outside partials/, malformed escapes, dot segments: refused.
    for (inc, why) in [
        ("a b.md", "must resolve under .paseo/workflows/partials/"),
        ("partials/a%zz.md", "invalid encoding"),
        ("./partials/a b.md", "'.' or '..' segments"),
        ("/partials/a b.md", "must be relative"),
    ] {
        let (wf, partial) = files(inc);
        let e = bundle_errors(&[
            (".paseo/hub.yml", HUB),
            (".paseo/workflows/t.yml", wf.as_str()),
            (partial, "Classify."),
        ]);
        assert!(
            e.iter()
                .any(|d| d.code == "unsafe_bundle_path" && d.message.contains(why)),
            "{inc}: {e:#?}"
        );
    }
}

#[test]
fn expressions_inside_partials_are_checked() {
    let wf = flow("{include: partials/x.md}");
    let with = |partial: &str| {
        bundle_errors(&[
            (".paseo/hub.yml", HUB),
            (".paseo/workflows/t.yml", wf.as_str()),
            (".paseo/workflows/partials/x.md", partial),
        ])
    };
    assert!(with("Classify ${{ paseo.prompt }} in ${{ paseo.context }}.").is_empty());
    let bad = with("Classify ${{ paseo.nope }}.");
    assert_eq!(bad.len(), 1, "{bad:#?}");
    assert_eq!(bad[0].code, "unsupported_path");
    assert!(bad[0].message.contains("paseo.nope") && bad[0].message.contains("partials/x.md"));
    assert_eq!(bad[0].file, ".paseo/workflows/t.yml");
    let forward = with("After ${{ steps.u.outputs.k }}.");
    assert_eq!(forward.len(), 1, "{forward:#?}");
    assert_eq!(forward[0].code, "forward_step_reference");
    let unterminated = with("Broken ${{ paseo.prompt");
    assert_eq!(unterminated.len(), 1, "{unterminated:#?}");
    assert_eq!(unterminated[0].code, "invalid_expression");
}

#[test]
fn stray_files_under_paseo_and_a_bundle_without_workflows_are_refused() {
    let wf = flow("{text: hi}");
    let ok = [
        (".paseo/hub.yml", HUB),
        (".paseo/workflows/t.yml", wf.as_str()),
    ];
    assert!(bundle_errors(&ok).is_empty());
    for stray in [
        ".paseo/README.md",
        ".paseo/workflows/notes.txt",
        ".paseo/other/x.yml",
    ] {
        let d = bundle_refused(
            &[ok[0], ok[1], (stray, "x")],
            "unexpected_bundle_file",
            "outside the canonical Hub bundle layout",
        );
        assert_eq!(d.file, stray);
    }
    bundle_refused(
        &[(".paseo/hub.yml", HUB)],
        "missing_workflow",
        "at least one direct .paseo/workflows/<workflow>.yml document is required",
    );
}

#[test]
fn the_project_name_is_a_trimmed_slug_of_at_most_100_characters() {
    let wf = flow("{text: hi}");
    let named = |name: &str| format!("name: '{name}'\n{HUB}");
    for name in ["my-project", "  my-project  ", &"a".repeat(100)] {
        let h = named(name);
        let e = bundle_errors(&[(".paseo/hub.yml", &h), (".paseo/workflows/t.yml", &wf)]);
        assert!(e.is_empty(), "{name:?}: {e:#?}");
    }
    let long = named(&"a".repeat(101));
    let d = bundle_refused(
        &[(".paseo/hub.yml", &long), (".paseo/workflows/t.yml", &wf)],
        "invalid_value",
        "Too big: expected string to have <=100 characters",
    );
    assert_eq!(d.path.to_string(), ".name");
    let upper = named("My-Project");
    bundle_refused(
        &[(".paseo/hub.yml", &upper), (".paseo/workflows/t.yml", &wf)],
        "invalid_value",
        "lowercase letters",
    );
}

// ----- provider option schemas and the daemon they model -----

#[test]
fn a_newer_daemon_turns_unknown_option_keys_into_warnings_and_keeps_known_keys_strict() {
    use palisade_schema::options::{DaemonVersion, MODELLED_DAEMON, OptionsTarget};
    let with_options = |o: &str| {
        workflow(STRING_CHOICES, "", "").replace(
            "options: {approval_policy: never, sandbox_mode: read-only, web_search: disabled}",
            &format!("options: {{{o}}}"),
        )
    };
    let added = with_options("sandbox_mode: read-only, added_later: true");
    let newer = OptionsTarget::daemon(DaemonVersion::new(
        MODELLED_DAEMON.major,
        MODELLED_DAEMON.minor,
        MODELLED_DAEMON.patch + 1,
    ));
    // The default and the modelled daemon refuse the unknown key.
    refused(&added, "unknown_key", "added_later");
    let same = palisade_schema::parse_workflow_for(
        "w.yml",
        &added,
        &OptionsTarget::daemon(MODELLED_DAEMON),
    );
    assert_eq!(same.unwrap_err().first().code, "unknown_key");
    // A newer daemon gets a warning naming the modelled daemon, and a model.
    let parsed = palisade_schema::parse_workflow_for("w.yml", &added, &newer).unwrap();
    let w = parsed.warnings();
    assert_eq!(w.len(), 1, "{w:#?}");
    assert_eq!(w[0].code, "unknown_option_newer_daemon");
    assert!(
        w[0].help
            .as_deref()
            .unwrap()
            .contains(&MODELLED_DAEMON.to_string())
    );
    assert_eq!(parsed.value().triggers[0].steps[0].id, "review");
    // Nested unknown keys too; a known key with a bad value stays an error.
    let nested = with_options("features: {goals: true}");
    assert!(palisade_schema::parse_workflow_for("w.yml", &nested, &newer).is_ok());
    let bad = with_options("sandbox_mode: read-mostly, added_later: true");
    let e = palisade_schema::parse_workflow_for("w.yml", &bad, &newer).unwrap_err();
    let codes: Vec<_> = e.iter().map(|d| d.code).collect();
    assert!(codes.contains(&"invalid_value"), "{codes:?}");
    assert!(!codes.contains(&"unknown_key"), "{codes:?}");
}

#[test]
fn a_newer_daemon_softens_unknown_keys_of_named_agents_in_a_bundle() {
    use palisade_schema::options::{DaemonVersion, OptionsTarget};
    let hub = "environments:\n  dev: {kind: daemon, daemon: d, cwd: /w}\nagents:\n  a:\n    provider: codex\n    options: {sandbox_mode: read-only, added_later: 1}\n";
    let wf = "name: t\n'on': manual.run\nmax_runtime: 1h\nsteps:\n  - id: s\n    environment: dev\n    max_runtime: 5m\n    idle_timeout: 1m\n    agent: a\n    prompt: [{text: hi}]\n";
    let files = [
        (".paseo/hub.yml", hub.as_bytes()),
        (".paseo/workflows/t.yml", wf.as_bytes()),
    ];
    let strict = palisade_schema::parse_bundle(&files).unwrap_err();
    assert_eq!(strict.first().code, "unknown_key");
    let newer = OptionsTarget::daemon(DaemonVersion::new(99, 0, 0));
    let parsed = palisade_schema::parse_bundle_for(&files, &newer).unwrap();
    assert_eq!(parsed.warnings()[0].code, "unknown_option_newer_daemon");
    assert_eq!(parsed.value().agents[0].name, "a");
}

#[test]
fn includes_cannot_multiply_a_large_partials_work_without_bound() {
    // 20,000 expressions of one path each: 40,000 units per including step.
    let partial = "Read ${{ paseo.prompt }}.\n".repeat(20_000);
    let wf = |steps: usize| {
        let mut s = String::from("name: t\n'on': manual.run\nmax_runtime: 1h\nsteps:\n");
        for i in 0..steps {
            s.push_str(&format!("  - id: s{i}\n    environment: dev\n    max_runtime: 5m\n    idle_timeout: 1m\n    agent: {{provider: codex, options: {{approval_policy: never, sandbox_mode: read-only, web_search: disabled}}}}\n    prompt: [{{include: partials/x.md}}, {{include: partials/x.md}}]\n"));
        }
        s
    };
    let run = |steps: usize| {
        let w = wf(steps);
        bundle_errors(&[
            (".paseo/hub.yml", HUB),
            (".paseo/workflows/t.yml", w.as_str()),
            (".paseo/workflows/partials/x.md", partial.as_str()),
        ])
    };
    // 20 steps (the second include of a step is not checked again): within the limit.
    assert!(run(20).is_empty());
    let over = run(30);
    assert_eq!(over.len(), 1, "{over:#?}");
    assert_eq!(over[0].code, "yaml_limit_exceeded");
}

#[test]
fn github_repositories_are_owner_slash_name_without_white_space() {
    let repos = |r: &str| {
        workflow(
            STRING_CHOICES,
            "",
            &format!("        github:\n          connection: gh\n          repositories: ['{r}']"),
        )
    };
    accepted(&repos("own-er/re.po"));
    refused(&repos("own er/repo"), "invalid_value", "owner/name");
    refused(&repos("owner/re\u{a0}po"), "invalid_value", "owner/name");
    refused(&repos("owner/a/b"), "invalid_value", "owner/name");
}

#[test]
fn a_proto_key_is_ignored_as_the_hubs_zod_ignores_it() {
    // Records and strict objects alike: a warning, and no trace in the model.
    let perms = github("__proto__: root, contents: read");
    let w = warnings(&perms);
    assert_eq!(w.len(), 1, "{w:#?}");
    assert_eq!(w[0].code, "ignored_key");
    let parsed = parse_workflow("w.yml", &perms).unwrap();
    let g = parsed.value().triggers[0].steps[0].github.clone().unwrap();
    assert_eq!(g.permissions.unwrap().len(), 1);
    let step = workflow(
        STRING_CHOICES,
        "",
        "        __proto__: x\n        env: {__proto__: 5}",
    );
    let w = warnings(&step);
    assert!(
        w.len() == 2 && w.iter().all(|d| d.code == "ignored_key"),
        "{w:#?}"
    );
    assert!(
        warnings(&workflow(
            STRING_CHOICES,
            "      inputs: {__proto__: zz}",
            ""
        ))
        .len()
            == 1
    );
    // Only that exact key: its neighbours stay refused, and a timeout
    // below it is still found (the Hub's walk reads own properties).
    refused(
        &github("__proto_: read"),
        "invalid_github_permission",
        "unknown",
    );
    refused(
        &workflow(STRING_CHOICES, "", "        env: {__proto__: {timeout: 1}}"),
        "removed_field",
        "timeout was removed",
    );
}

// ----- output.schema under the Hub's ajv strict compile -----

/// The `review` step with `output.schema` `schema` (YAML flow).
fn with_schema(schema: &str) -> String {
    workflow(
        STRING_CHOICES,
        "",
        &format!("        output:\n          schema: {schema}"),
    )
}

#[test]
fn an_output_schema_ajv_strict_refuses_is_refused_at_output_schema() {
    // (refused, its nearest accepted form, ajv's message): the four kinds
    // of the Hub's oracle (m0067, m0667, m0670, m0816).
    let cases = [
        (
            "{type: object, x_unknown: 1}",
            "{type: object}",
            "strict mode: unknown keyword: \"x_unknown\" (at /x_unknown)",
        ),
        (
            "{required: [kind], properties: {kind: {type: string}}}",
            "{type: object, required: [kind], properties: {kind: {type: string}}}",
            "strict mode: missing type \"object\" for keyword \"required\" at \"#\" (strictTypes)",
        ),
        (
            "{type: object, properties: {kind: {type: string, format: email}}}",
            "{type: object, properties: {kind: {type: string, pattern: '@'}}}",
            "unknown format \"email\" ignored in schema at path \"#/properties/kind\" (at /properties/kind/format)",
        ),
        (
            "{type: object, properties: {list: {type: array, items: [{type: string}]}}}",
            "{type: object, properties: {list: {type: array, items: [{type: string}], minItems: 1, maxItems: 1}}}",
            "strict mode: \"items\" is 1-tuple, but minItems or maxItems/additionalItems are not specified or different at path \"#/properties/list\"",
        ),
    ];
    for (bad, good, message) in cases {
        accepted(&with_schema(good));
        let d = refused(
            &with_schema(bad),
            "invalid_output_schema",
            &format!("step review output.schema is invalid JSON Schema: {message}"),
        );
        assert_eq!(d.path.to_string(), ".triggers[0].steps[0].output.schema");
    }
}

#[test]
fn a_refused_output_schema_still_serves_references_to_its_outputs() {
    // One finding, the schema's; `steps.review.outputs.kind` still
    // resolves rather than reporting a step without an output schema.
    let text = workflow(
        STRING_CHOICES,
        "",
        "        output:\n          schema: {type: object, x_note: 1, properties: {kind: {enum: [a, b]}}}\n      - id: next\n        if: \"${{ steps.review.outputs.kind == 'a' }}\"\n        environment: dev\n        max_runtime: 30m\n        idle_timeout: 5m\n        agent: {provider: codex, options: {approval_policy: never, sandbox_mode: read-only, web_search: disabled}}\n        prompt: [{text: next}]",
    );
    refused(
        &text,
        "invalid_output_schema",
        "unknown keyword: \"x_note\"",
    );
    accepted(&text.replace("x_note: 1, ", ""));
}

#[test]
fn an_output_schema_beyond_palisades_bounds_is_a_hardening_limit() {
    let max = palisade_schema::output_schema::MAX_PATTERN_LEN;
    let pattern = |n: usize| {
        with_schema(&format!(
            "{{type: object, properties: {{kind: {{type: string, pattern: '{}'}}}}}}",
            "a".repeat(n)
        ))
    };
    accepted(&pattern(max));
    let d = refused(
        &pattern(max + 1),
        "yaml_limit_exceeded",
        "pattern is longer than 8192 bytes (palisade's limit)",
    );
    assert_eq!(d.path.to_string(), ".triggers[0].steps[0].output.schema");
}

/// Runs `f` on a thread and fails when it takes longer than `secs`
/// (a run that never ends would otherwise hang the test binary). A hang
/// guard, not a speed assertion: the bound is far above any sane run
/// (milliseconds here) and far below the unbounded runs it catches.
#[track_caller]
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("not finished within {secs} s"))
}

/// A chain of `depth` values, each `values.v(i-1) || values.v(i-1)`, on
/// top of a required input with the one choice `dev`, used as a step's
/// environment (an authority-bearing field).
fn value_chain(depth: usize) -> String {
    let mut values = String::from("      v0: '${{ paseo.inputs.n }}'\n");
    for i in 1..=depth {
        values.push_str(&format!(
            "      v{i}: '${{{{ values.v{p} || values.v{p} }}}}'\n",
            p = i - 1
        ));
    }
    workflow(
        &format!(
            "      n: {{type: string, choices: [dev], required: true}}\n    values:\n{values}"
        ),
        "",
        "",
    )
    .replace(
        "environment: dev",
        &format!("environment: '${{{{ values.v{depth} }}}}'"),
    )
}

#[test]
fn a_chain_of_values_cannot_make_the_finite_choice_analysis_exponential() {
    // Each value reads the one before it twice: evaluated afresh at each
    // reference, the chain costs 2^depth steps, though every set has one
    // value and MAX_CHOICES is never reached.
    // Positive control: a short chain is finite ({dev}) and accepted.
    accepted(&value_chain(3));
    // A chain that resolves to a value that is not an environment is refused,
    // so the analysis does look through the chain.
    refused(
        &value_chain(3).replace("choices: [dev]", "choices: [prod]"),
        "unknown_environment",
        "prod",
    );
    // 60 levels: 2^60 steps without memoization.
    let long = value_chain(60);
    let errs = within(300, move || errors(&long));
    assert!(errs.is_empty(), "{errs:#?}");
}

/// A step environment of `${{ paseo.inputs.a }}${{ paseo.inputs.b }}`
/// followed by `tail` (text and expressions); `a` and `b` have `wide`
/// choices each (the first `a0` and `b0`), `c` has the one choice `c`.
fn concatenated_environment(wide: usize, a0: &str, b0: &str, tail: &str) -> String {
    let choices = |first: &str, p: &str| {
        std::iter::once(first.to_owned())
            .chain((1..wide).map(|i| format!("{p}{i:02}")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let inputs = format!(
        "      a: {{type: string, required: true, choices: [{}]}}\n      b: {{type: string, required: true, choices: [{}]}}\n      c: {{type: string, required: true, choices: [c]}}\n",
        choices(a0, "a"),
        choices(b0, "b")
    );
    let env = format!("${{{{ paseo.inputs.a }}}}${{{{ paseo.inputs.b }}}}{tail}");
    workflow(&inputs, "", "").replace("environment: dev", &format!("environment: '{env}'"))
}

#[test]
fn a_long_concatenation_of_choices_is_bounded_in_time_and_memory() {
    // Positive control: `d` + `e` + `v` is the environment `dev`.
    accepted(&concatenated_environment(1, "d", "e", "v"));
    // Control: 64 x 64 = 4,096 values (the limit) are enumerated, each
    // checked (4,096 unknown environments).
    let wide = within(300, || errors(&concatenated_environment(64, "a", "b", "")));
    assert_eq!(wide.len(), 4096, "{:#?}", wide.first());
    let limited =
        |d: &[Diagnostic]| !d.is_empty() && d.iter().all(|d| d.code == "choice_limit_exceeded");
    // 2,000 more expressions of one value each: every one re-enumerates
    // 4,096 ever longer strings, each checked against the others for
    // duplicates (quadratic).
    let long = concatenated_environment(64, "a", "b", &"${{ paseo.inputs.c }}".repeat(2000));
    let errs = within(300, move || errors(&long));
    assert!(limited(&errs), "{:#?}", errs.first());
    // 100 kB of text after them is copied into each of the 4,096 values:
    // 410 MB for a 100 kB document (a 1 MiB file: 4 GB).
    let text = concatenated_environment(64, "a", "b", &"x".repeat(100_000));
    let errs = within(300, move || errors(&text));
    assert!(limited(&errs), "{:#?}", errs.first());
}
