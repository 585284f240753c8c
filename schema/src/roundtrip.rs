//! Property test: generated valid configurations round-trip through their
//! authored form (serialize, parse, equal). A unit test because it builds
//! the `#[non_exhaustive]` model by literal; the arbitrary-input property
//! tests are in `tests/roundtrip.rs`.

use crate::expr::Template;
use crate::{
    Agent, AgentRef, AllowOutput, Duration, Environment, EnvironmentKind, EnvironmentRef, Filters,
    HubConfig, PromptBlock, Step, Trigger, parse_workflow,
};
use proptest::prelude::*;
use serde_json::json;

pub(crate) fn ident() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_-]{0,8}"
}

pub(crate) fn duration(max_ms: u64) -> impl Strategy<Value = Duration> {
    prop_oneof![
        (1u64..=1_000).prop_map(|n| format!("{n}ms")),
        (1u64..=3_600).prop_map(|n| format!("{n}s")),
        (1u64..=120).prop_map(|n| format!("{n}m")),
        (1u64..=24).prop_map(|n| format!("{n}h")),
    ]
    .prop_map(|t| Duration::parse(&t).unwrap())
    .prop_filter("within the limit", move |d| d.millis <= max_ms)
}

fn text() -> impl Strategy<Value = String> {
    // Any text without the interpolation marker, including YAML-hostile
    // characters: the serializer must quote them.
    "[ -~\u{e9}\u{4e2d}\n]{0,40}".prop_filter("no interpolation", |s| !s.contains("${{"))
}

fn prompt_block() -> impl Strategy<Value = PromptBlock> {
    prop_oneof![
        text().prop_map(|t| PromptBlock::Text(Template::parse(&t).unwrap())),
        text().prop_map(|t| PromptBlock::Text(
            Template::parse(&format!("{t}${{{{ paseo.prompt }}}}")).unwrap()
        )),
    ]
}

fn codex_options() -> impl Strategy<Value = Option<serde_json::Value>> {
    prop_oneof![
        Just(Some(
            json!({"approval_policy": "never", "sandbox_mode": "read-only", "web_search": "disabled"})
        )),
        Just(Some(
            json!({"approval_policy": "on-request", "sandbox_mode": "workspace-write",
            "sandbox_workspace_write": {"writable_roots": ["/workspace/project"], "network_access": false}})
        )),
        Just(Some(
            json!({"sandbox_mode": "read-only", "approval_policy": {"granular": {"rules": true}}})
        )),
    ]
}

fn agent() -> impl Strategy<Value = Agent> {
    prop_oneof![
        codex_options().prop_map(|options| Agent {
            provider: "codex".into(),
            model: None,
            mode: None,
            thinking_option_id: None,
            options
        }),
        (proptest::option::of("[a-z0-9.-]{1,10}")).prop_map(|model| Agent {
            provider: "claude".into(),
            model,
            mode: None,
            thinking_option_id: None,
            options: Some(json!({"disallowedTools": ["Bash", "Edit"],
                "sandbox": {"enabled": true, "failIfUnavailable": true}}))
        }),
        Just(Agent {
            provider: "opencode".into(),
            model: None,
            mode: None,
            thinking_option_id: None,
            options: Some(
                json!({"permission": {"read": "allow", "bash": {"*": "ask", "git status": "allow"}}})
            )
        }),
    ]
}

fn steps(env: String, slack: bool) -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        (
            duration(86_400_000),
            agent(),
            proptest::collection::vec(prompt_block(), 1..3),
            1u32..10,
            any::<bool>(),
            any::<bool>(),
        ),
        1..5,
    )
    .prop_map(move |items| {
        items
            .into_iter()
            .enumerate()
            .map(
                |(i, (max, agent, prompt, out_max, with_output, archive))| Step {
                    id: format!("s{i}"),
                    environment: EnvironmentRef::Named(env.clone()),
                    idle_timeout: max.clone(),
                    max_runtime: max,
                    agent: AgentRef::Inline(agent),
                    prompt,
                    condition: None,
                    output_schema: None,
                    allow_outputs: if slack && with_output {
                        vec![AllowOutput {
                            kind: "slack.reply".into(),
                            max: Some(out_max),
                            required: archive,
                        }]
                    } else {
                        Vec::new()
                    },
                    env: Vec::new(),
                    github: None,
                    auto_archive: archive,
                },
            )
            .collect()
    })
}

fn config() -> impl Strategy<Value = HubConfig> {
    (
        ident(),
        "[a-z0-9-]{1,12}",
        "/workspace/[a-z]{1,8}",
        any::<bool>(),
        ident(),
        duration(86_400_000),
    )
        .prop_flat_map(|(env, daemon, cwd, slack, tname, tmax)| {
            let environment = Environment {
                name: env.clone(),
                kind: EnvironmentKind::Daemon {
                    daemon,
                    cwd,
                    worktree: None,
                },
            };
            let filters = if slack {
                Filters {
                    workspace: Some("T0123".into()),
                    channels: Some(vec!["C0123".into()]),
                    from_users: Some(vec!["U0123".into()]),
                    ..Filters::default()
                }
            } else {
                Filters {
                    from_users: Some(vec!["automation".into()]),
                    ..Filters::default()
                }
            };
            steps(env, slack).prop_map(move |steps| HubConfig {
                name: None,
                environments: vec![environment.clone()],
                agents: Vec::new(),
                triggers: vec![Trigger {
                    name: tname.clone(),
                    file: None,
                    on: if slack {
                        "slack.mention".into()
                    } else {
                        "manual.run".into()
                    },
                    max_runtime: tmax.clone(),
                    filters: Some(filters.clone()),
                    inputs: Vec::new(),
                    values: Vec::new(),
                    steps,
                }],
                partials: Vec::new(),
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn generated_configs_round_trip(config in config()) {
        let text = serde_json::to_string_pretty(&config.to_single_file_json()).unwrap();
        match parse_workflow("gen.yml", &text) {
            Ok(parsed) => prop_assert_eq!(parsed.into_value(), config),
            Err(diags) => prop_assert!(false, "{text}\n{diags:#?}"),
        }
    }
}
