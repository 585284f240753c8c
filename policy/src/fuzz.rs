//! Fuzzing entry points (`fuzz/fuzz_targets/policy_derive_translate.rs`).
//!
//! They live in the crate so that `cargo test` compiles and runs them too.
//! Invariant violations abort via `assert!`, which is what a fuzzer looks for.

use serde_json::Value;

use crate::capability::{CapabilityRegistry, OutputContext};
use crate::derive::FINISH_EXECUTION;
use crate::grant::{GrantConfig, StepInput, grant_step};
use crate::plan::{decls_of, static_agent};
use crate::translate::{OpenCodeOrdering, TranslateRequest, translate};

const CONTEXTS: [Option<&str>; 5] = [
    Some("slack"),
    Some("discord"),
    Some("github"),
    Some("manual"),
    None,
];
const ORDERINGS: [OpenCodeOrdering; 2] =
    [OpenCodeOrdering::GrantsFirst, OpenCodeOrdering::GrantsLast];

/// Parses `data` as a single-file workflow and runs derive + translate on
/// every step, context and ordering; data that is JSON instead is used as
/// provider options for each provider. Checks: no panic, `finish_execution`
/// exactly once and first, translation idempotent.
pub fn derive_translate(data: &[u8]) {
    let config = palisade_schema::parse_workflow_bytes("fuzz.yml", data).map(|p| p.into_value());
    let registry = CapabilityRegistry::default();
    if let Ok(config) = config {
        for trigger in &config.triggers {
            for step in &trigger.steps {
                let mut agents: Vec<palisade_schema::Agent> =
                    config.agents.iter().map(|a| a.agent.clone()).collect();
                if let Some(a) = static_agent(&config, step) {
                    agents.push(a.agent);
                }
                let decls = decls_of(step);
                for agent in &agents {
                    for ctx in CONTEXTS {
                        for ord in ORDERINGS {
                            let ctx = ctx.map(OutputContext::new);
                            let cfg = GrantConfig {
                                opencode_ordering: ord,
                                ..GrantConfig::default()
                            };
                            let input = StepInput {
                                provider: &agent.provider,
                                options: agent.options.as_ref(),
                                allow_outputs: &decls,
                                output_schema: step.output_schema.as_ref(),
                            };
                            if let Ok(g) = grant_step(&input, ctx.as_ref(), &registry, &cfg) {
                                check_policy(&g.derived.policy);
                                check_idempotent(
                                    &agent.provider,
                                    g.provider_options.as_ref(),
                                    &g.derived.policy,
                                    ord,
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    if let Ok(options) = serde_json::from_slice::<Value>(data) {
        let policy = crate::derive::derive(
            &[crate::derive::OutputDecl::optional("slack.reply")],
            Some(&OutputContext::new("slack")),
            None,
            &registry,
        );
        if let Ok(d) = policy {
            for provider in ["claude", "codex", "opencode"] {
                for ord in ORDERINGS {
                    let req = TranslateRequest {
                        provider,
                        options: Some(&options),
                        policy: &d.policy,
                        mcp_servers: &["hub"],
                        opencode_ordering: ord,
                    };
                    if let Ok(once) = translate(&req) {
                        check_idempotent(provider, once.as_ref(), &d.policy, ord);
                    }
                }
            }
        }
    }
}

fn check_policy(policy: &crate::derive::ToolPolicy) {
    let names: Vec<&str> = policy.tool_names().collect();
    assert_eq!(
        names.first(),
        Some(&FINISH_EXECUTION),
        "finish_execution must be first"
    );
    assert_eq!(names.iter().filter(|n| **n == FINISH_EXECUTION).count(), 1);
    for (i, n) in names.iter().enumerate() {
        assert!(
            !names.iter().skip(i.saturating_add(1)).any(|m| m == n),
            "duplicate tool {n}"
        );
    }
}

fn check_idempotent(
    provider: &str,
    once: Option<&Value>,
    policy: &crate::derive::ToolPolicy,
    ord: OpenCodeOrdering,
) {
    let req = TranslateRequest {
        provider,
        options: once,
        policy,
        mcp_servers: &["hub"],
        opencode_ordering: ord,
    };
    let twice = translate(&req);
    assert!(
        twice.is_ok(),
        "translating translated options failed: {twice:?}"
    );
    if let Ok(twice) = twice {
        assert_eq!(twice.as_ref(), once, "translation is not idempotent");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn harness_runs_on_workflows_json_and_garbage() {
        let wf = "environments: [{name: dev, kind: daemon, daemon: d, cwd: /r}]\n\
triggers:\n  - name: t\n    on: slack.mention\n    max_runtime: 1h\n    filters: {from_users: [U1]}\n    steps:\n      - id: s\n        environment: dev\n        max_runtime: 10m\n        idle_timeout: 1m\n        agent: {provider: opencode, options: {permission: deny}}\n        prompt: [{text: go}]\n        allow_outputs: [{type: slack.reply, max: 2}, {type: discord.reply}]\n";
        let parsed = palisade_schema::parse_workflow("fuzz.yml", wf);
        assert!(parsed.is_ok(), "{parsed:?}");
        super::derive_translate(wf.as_bytes());
        super::derive_translate(
            br#"{"allowedTools": ["Read"], "permission": {"bash": {"*": "ask"}}}"#,
        );
        super::derive_translate(b"\xff\x00{{{");
        super::derive_translate(b"");
    }
}
