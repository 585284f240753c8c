//! Property test: generated valid trigger documents round-trip through
//! their authored form ([`TriggerDocument::to_json`], parse, equal). A
//! unit test because it builds the `#[non_exhaustive]` model by literal.

use proptest::prelude::*;
use serde_json::json;

use super::{
    Continuation, EventEntry, OutputGrant, Run, RunAgent, Target, TriggerDocument, TriggerOptions,
    parse_trigger_with,
};
use crate::expr::Template;
use crate::model::{
    Agent, Duration, Filters, GithubAuthority, GithubLevel, InputDecl, InputType, Worktree,
};
use crate::roundtrip::{duration, ident};

fn text() -> impl Strategy<Value = String> {
    // YAML-hostile characters included: the serializer must quote them.
    "[ -~\u{e9}\u{4e2d}\n]{1,40}".prop_filter("no interpolation", |s| !s.contains("${{"))
}

fn template(with_prompt: bool) -> impl Strategy<Value = Template> {
    text().prop_filter_map("a template", move |t| {
        let s = if with_prompt {
            format!("{t}${{{{ paseo.prompt }}}}")
        } else {
            t
        };
        Template::parse(&s).ok()
    })
}

fn users() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(prop_oneof![Just("*".to_owned()), "[A-Z0-9]{1,8}"], 1..3)
}

fn event() -> impl Strategy<Value = EventEntry> {
    let entry = |event: &str, connection: Option<String>, filters: Option<Filters>| EventEntry {
        event: event.to_owned(),
        connection,
        filters,
        recurrence: None,
    };
    prop_oneof![
        (users(), proptest::option::of("[a-z0-9]{1,6}")).prop_map(move |(u, c)| entry(
            "slack.mention",
            c,
            Some(Filters {
                from_users: Some(u),
                channels: Some(vec!["C1".into()]),
                workspace: Some("T1".into()),
                ..Filters::default()
            })
        )),
        (users(), text()).prop_map(move |(u, pattern)| entry(
            "github.issue_comment",
            Some("gh".into()),
            Some(Filters {
                from_users: Some(u),
                repo: Some("acme/api".into()),
                pattern: Some(pattern),
                ..Filters::default()
            })
        )),
        proptest::option::of(users()).prop_map(move |u| entry(
            "manual.run",
            None,
            u.map(|u| Filters {
                from_users: Some(u),
                ..Filters::default()
            })
        )),
        Just(entry(
            "linear.issue_entered_scope",
            None,
            Some(Filters {
                project: Some("p1".into()),
                states: Some(vec!["Todo".into()]),
                exclude_labels: Some(vec!["wip".into()]),
                ..Filters::default()
            })
        )),
        users().prop_map(move |u| entry(
            "future.thing",
            None,
            Some(Filters {
                from_users: Some(u),
                ..Filters::default()
            })
        )),
    ]
}

fn agent() -> impl Strategy<Value = Agent> {
    prop_oneof![
        Just(Agent {
            provider: "codex".into(),
            model: None,
            mode: Some("auto".into()),
            thinking_option_id: Some("high".into()),
            options: Some(json!({"approval_policy": "never", "sandbox_mode": "read-only"})),
        }),
        proptest::option::of("[a-z0-9.-]{1,10}").prop_map(|model| Agent {
            provider: "claude".into(),
            model,
            mode: Some("default".into()),
            thinking_option_id: None,
            options: None,
        }),
    ]
}

fn continuation() -> impl Strategy<Value = Continuation> {
    prop_oneof![
        Just(Continuation::Conversation),
        Just(Continuation::New),
        "[a-z]{1,8}"
            .prop_map(|k| Continuation::Key(tpl(&format!("{k}-${{{{ paseo.inputs.model }}}}")))),
    ]
}

fn tpl(s: &str) -> Template {
    Template::parse(s).unwrap()
}

fn outputs() -> impl Strategy<Value = Vec<OutputGrant>> {
    proptest::collection::vec(
        (
            prop_oneof![
                Just("slack.reply"),
                Just("github.reply"),
                Just("linear.progress")
            ],
            proptest::option::of(1u32..20),
            proptest::option::of(any::<bool>()),
        ),
        0..3,
    )
    .prop_map(|items| {
        let mut out: Vec<OutputGrant> = Vec::new();
        for (kind, max, required) in items {
            if !out.iter().any(|o| o.kind == kind) {
                out.push(OutputGrant {
                    kind: kind.to_owned(),
                    max,
                    required,
                });
            }
        }
        out
    })
}

fn document() -> impl Strategy<Value = TriggerDocument> {
    (
        (
            ident(),
            any::<bool>(),
            proptest::collection::vec(event(), 1..4),
            proptest::option::of(duration(86_400_000)),
            any::<bool>(),
        ),
        (
            agent(),
            any::<bool>(),
            continuation(),
            any::<bool>(),
            template(true),
            duration(86_400_000),
            proptest::option::of(duration(3_600_000)),
        ),
        (
            any::<bool>(),
            any::<bool>(),
            outputs(),
            any::<bool>(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (name, enabled, events, max_runtime, worktree),
                (agent, select, continuation, title, prompt, run_max, startup),
                (env, github, outputs, auto_archive, output_schema),
            )| {
                let mut on: Vec<EventEntry> = Vec::new();
                for e in events {
                    if !on.iter().any(|o| o.event == e.event) {
                        on.push(e);
                    }
                }
                let agent = if select {
                    RunAgent::Select {
                        select: tpl("${{ paseo.inputs.model }}"),
                        choices: vec![("codex".into(), agent.clone()), ("other".into(), agent)],
                    }
                } else {
                    RunAgent::Inline(agent)
                };
                let idle = run_max.clone();
                TriggerDocument {
                    name,
                    enabled,
                    on,
                    inputs: vec![InputDecl {
                        name: "model".into(),
                        kind: InputType::String,
                        required: None,
                        default: Some(json!("codex")),
                        choices: Some(vec![json!("codex"), json!("other")]),
                    }],
                    max_runtime,
                    run: Run {
                        target: Target {
                            daemon: "devbox".into(),
                            cwd: "/workspace/api".into(),
                            worktree: worktree.then(|| Worktree::BranchOff {
                                new_branch: tpl("hub/${{ paseo.execution.id }}"),
                                base: Some("origin/main".into()),
                            }),
                        },
                        agent,
                        continuation,
                        title: title.then(|| {
                            tpl("Run ${{ paseo.execution.id }}")
                        }),
                        prompt,
                        max_runtime: run_max,
                        idle_timeout: idle,
                        startup_timeout: startup,
                        env: if env {
                            vec![(
                                "TOKEN".into(),
                                tpl("${{ paseo.connections.acme.token }}"),
                            )]
                        } else {
                            Vec::new()
                        },
                        github: github.then(|| GithubAuthority {
                            connection: "gh".into(),
                            repositories: Some(vec!["acme/api".into()]),
                            permissions: Some(vec![("contents".into(), GithubLevel::Read)]),
                            duration: Duration::parse("30m"),
                        }),
                        output_schema: output_schema.then(
                            || json!({"type": "object", "properties": {"summary": {"type": "string"}}}),
                        ),
                        outputs,
                        auto_archive,
                    },
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn generated_documents_round_trip(doc in document()) {
        let text = serde_json::to_string_pretty(&doc.to_json()).unwrap_or_default();
        let options = TriggerOptions { skip_lints: true, ..TriggerOptions::default() };
        match parse_trigger_with("gen.yml", &text, &options) {
            Ok(parsed) => prop_assert_eq!(parsed.into_value(), doc),
            Err(diags) => prop_assert!(false, "{text}\n{diags:#?}"),
        }
    }
}
