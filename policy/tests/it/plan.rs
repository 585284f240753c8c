//! Run plans over the vector bundles, parsed by `palisade-schema`.

use std::path::{Path, PathBuf};

use palisade_policy::admission::{Admission, TriggerEvent};
use palisade_policy::capability::{CapabilityRegistry, OutputContext};
use palisade_policy::grant::GrantConfig;
use palisade_policy::plan::{PlanInput, RunPlan, StepStatus, grant_for, plan, static_agent};
use palisade_schema::HubConfig;
use serde_json::{Value, json};

fn files(root: &Path, rel: &str, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(root.join(rel)).unwrap() {
        let entry = entry.unwrap();
        let child = format!("{rel}/{}", entry.file_name().to_string_lossy());
        if entry.file_type().unwrap().is_dir() {
            files(root, &child, out);
        } else {
            out.push((child, std::fs::read(entry.path()).unwrap()));
        }
    }
}

pub(crate) fn bundle(vector: &str) -> HubConfig {
    bundle_without(vector, &[])
}

/// The bundle without some workflow files. `palisade-schema` rejects a
/// required output that no registered capability can ever provide for the
/// trigger's provider (V2's `github.reply`, V5's `slack.reply` on a manual
/// run) when parsing; `derive` rejects the same at dispatch, which
/// `vectors.rs` covers.
pub(crate) fn bundle_without(vector: &str, skip: &[&str]) -> HubConfig {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors")
        .join(vector);
    let mut loaded = Vec::new();
    files(&root, ".paseo", &mut loaded);
    loaded.retain(|(p, _)| !skip.iter().any(|s| p.ends_with(s)));
    loaded.sort();
    let refs: Vec<(&str, &[u8])> = loaded
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    match palisade_schema::parse_bundle(&refs) {
        Ok(parsed) => parsed.into_value(),
        Err(diags) => panic!("{vector}: {:#?}", diags.errors().collect::<Vec<_>>()),
    }
}

fn slack_event(text: &str) -> TriggerEvent {
    {
        let mut e = TriggerEvent::default();
        e.name = "slack.mention".into();
        e.actor_id = Some("U01234567".into());
        e.workspace = Some("T01234567".into());
        e.channel = Some("C01234567".into());
        e.text = text.into();
        e.bot_mentions = vec!["<@UBOT>".into()];
        e
    }
}

fn run_plan(config: &HubConfig, event: &TriggerEvent, outputs: &[(String, Value)]) -> RunPlan {
    plan(
        &PlanInput {
            config,
            trigger: "guarded-request",
            event,
            outputs,
            context: None,
        },
        &CapabilityRegistry::default(),
        &GrantConfig::default(),
    )
    .unwrap()
}

fn summary(p: &RunPlan) -> Vec<String> {
    p.steps
        .iter()
        .map(|s| match &s.status {
            StepStatus::Run(r) => match &r.grant {
                Ok(g) => format!(
                    "{} run {} {} {:?}",
                    s.id,
                    r.environment,
                    g.provider.id(),
                    g.derived.policy.tool_names().collect::<Vec<_>>()
                ),
                Err(e) => format!("{} run error {}", s.id, e.code()),
            },
            StepStatus::Skipped => format!("{} skipped", s.id),
            StepStatus::Waiting { on } => format!("{} waiting {on}", s.id),
            StepStatus::Failed { reason } => format!("{} failed {reason}", s.id),
            StepStatus::NotRun => format!("{} not-run", s.id),
            other => format!("{} {other:?}", s.id),
        })
        .collect()
}

#[test]
fn guarded_request_plan_advances_with_outputs() {
    let config = bundle("v3");
    let e = slack_event("<@UBOT> how do I build?");
    let p = run_plan(&config, &e, &[]);
    assert_eq!(
        p.admission,
        Admission::Admitted {
            prompt: "how do I build?".into()
        }
    );
    assert_eq!(p.context, OutputContext::new("slack"));
    assert_eq!(
        summary(&p),
        [
            r#"classify run project codex ["finish_execution"]"#,
            "answer waiting classify",
            "implement waiting classify",
        ]
    );
    let answer = [("classify".to_owned(), json!({"kind": "answer"}))];
    assert_eq!(
        summary(&run_plan(&config, &e, &answer)),
        [
            r#"classify run project codex ["finish_execution"]"#,
            r#"answer run project claude ["finish_execution", "reply"]"#,
            "implement skipped",
        ]
    );
    let implement = [("classify".to_owned(), json!({"kind": "implementation"}))];
    assert_eq!(
        summary(&run_plan(&config, &e, &implement)),
        [
            r#"classify run project codex ["finish_execution"]"#,
            "answer skipped",
            r#"implement run project opencode ["finish_execution", "reply"]"#,
        ]
    );
}

#[test]
fn rejected_events_run_nothing() {
    let config = bundle("v3");
    // Positive control: the listed author is admitted.
    assert!(
        run_plan(&config, &slack_event("<@UBOT> hi"), &[])
            .admission
            .is_admitted()
    );
    let mut e = slack_event("<@UBOT> hi");
    e.actor_id = Some("U666".into());
    let p = run_plan(&config, &e, &[]);
    let Admission::Rejected(r) = &p.admission else {
        panic!("admitted a stranger")
    };
    assert_eq!(r.code, "user_not_allowed");
    assert_eq!(
        summary(&p),
        ["classify not-run", "answer not-run", "implement not-run"]
    );
}

#[test]
fn unknown_trigger_is_an_error() {
    let config = bundle("v3");
    let e = slack_event("<@UBOT> hi");
    let err = plan(
        &PlanInput {
            config: &config,
            trigger: "nope",
            event: &e,
            outputs: &[],
            context: None,
        },
        &CapabilityRegistry::default(),
        &GrantConfig::default(),
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "no trigger named `nope`");
}

/// The schema-parsed model gives the same grants as the vector harness's own loader.
#[test]
fn schema_model_agrees_with_the_fixture_loader() {
    let reg = CapabilityRegistry::default();
    let cfg = GrantConfig::default();
    let mut n = 0;
    for (vector, ctx) in [
        ("v1", "slack"),
        ("v2", "github"),
        ("v3", "slack"),
        ("v4", "manual"),
        ("edge", "slack"),
    ] {
        let config = bundle_without(vector, &["github-reply-required.yml"]);
        let ctx = OutputContext::new(ctx);
        for trigger in &config.triggers {
            let file = trigger.file.clone().unwrap();
            let wf = file.rsplit('/').next().unwrap();
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/vectors")
                .join(vector);
            let fixture = crate::fixture::load_steps(&root, wf);
            for (step, fx) in trigger.steps.iter().zip(&fixture) {
                let agent = static_agent(&config, step).unwrap().agent;
                let got = grant_for(step, &agent, Some(&ctx), &reg, &cfg);
                let want = palisade_policy::grant::grant_step(
                    &palisade_policy::grant::StepInput {
                        provider: &fx.provider,
                        options: fx.options.as_ref(),
                        allow_outputs: &fx.allow_outputs,
                        output_schema: fx.output_schema.as_ref(),
                    },
                    Some(&ctx),
                    &reg,
                    &cfg,
                );
                assert_eq!(got, want, "{vector} {file} {}", step.id);
                n += 1;
            }
        }
    }
    assert!(n >= 15);
}

const INPUTS_WORKFLOW: &str = r#"
environments: [{name: dev, kind: daemon, daemon: d, cwd: /repo}]
triggers:
  - name: deploy
    on: slack.mention
    max_runtime: 1h
    filters: {from_users: [U1], pattern: deploy, inputs: {region: eu}}
    inputs:
      env: {type: string, choices: [prod, dev], required: true}
      region: {type: string, default: eu}
    steps:
      - id: ship
        if: "${{ paseo.inputs.env == 'prod' }}"
        environment: dev
        max_runtime: 10m
        idle_timeout: 1m
        agent: {provider: claude}
        prompt: [{text: "${{ paseo.prompt }}"}]
        allow_outputs: [{type: slack.reply}]
"#;

#[test]
fn invocation_inputs_are_parsed_after_the_marker_and_drive_conditions() {
    let config = palisade_schema::parse_workflow("inputs.yml", INPUTS_WORKFLOW)
        .unwrap_or_else(|diags| panic!("{diags:#?}"))
        .into_value();
    let go = |text: &str| {
        let e = {
            let mut e = TriggerEvent::default();
            e.name = "slack.mention".into();
            e.actor_id = Some("U1".into());
            e.text = text.into();
            e.bot_mentions = vec!["<@B>".into()];
            e
        };
        let p = plan(
            &PlanInput {
                config: &config,
                trigger: "deploy",
                event: &e,
                outputs: &[],
                context: None,
            },
            &CapabilityRegistry::default(),
            &GrantConfig::default(),
        )
        .unwrap();
        (p.admission.clone(), summary(&p))
    };
    let (adm, steps) = go("<@B> deploy env=prod ship it");
    assert_eq!(
        adm,
        Admission::Admitted {
            prompt: "ship it".into()
        }
    );
    assert_eq!(
        steps,
        [r#"ship run dev claude ["finish_execution", "reply"]"#]
    );
    let (_, steps) = go("<@B> deploy env=dev ship it");
    assert_eq!(steps, ["ship skipped"]);
    let (adm, steps) = go("<@B> deploy env=qa ship it");
    let Admission::Rejected(r) = adm else {
        panic!()
    };
    assert_eq!(
        (r.code, r.message.as_str()),
        (
            "invalid_choice",
            "input `env` must be one of \"prod\", \"dev\""
        )
    );
    assert_eq!(steps, ["ship not-run"]);
    let (adm, _) = go("<@B> deploy ship it");
    let Admission::Rejected(r) = adm else {
        panic!()
    };
    assert_eq!(r.code, "missing_required");
    // The filter's inputs condition sees the parsed (here: explicit) region.
    let (adm, _) = go("<@B> deploy env=prod region=us ship it");
    let Admission::Rejected(r) = adm else {
        panic!()
    };
    assert_eq!(r.code, "input_mismatch");
}
