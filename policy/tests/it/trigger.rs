//! Tool authority of Paseo Hub 0.9 trigger runs (`hub-triggers.md` §4):
//! the spec's vectors T1–T6 as exact `preapproved` lists and descriptions,
//! a differential property against the naive reference, and the migration
//! preview (§5) with T14.

use palisade_policy::capability::{CapabilityRegistry, OutputContext};
use palisade_policy::derive::{OutputDecl, derive};
use palisade_policy::migrate::{self, Format};
use palisade_policy::trigger::event_decls;
use palisade_schema::trigger::Release;
use proptest::prelude::*;
use serde_json::{Value, json};

const REPLY: &str = "Sends a reply to the conversation that triggered this execution.";

fn p(tools: &[&str]) -> Value {
    json!({"preapproved": tools.iter().map(|t| json!({"kind": "mcp", "server": "hub", "tool": t})).collect::<Vec<_>>()})
}

/// `(type, max?, required?)` as authored in `run.outputs`.
fn authored(outputs: &[(&str, Option<u32>, Option<bool>)]) -> Vec<OutputDecl> {
    // The same defaults `authored_decls` applies to a parsed document.
    outputs
        .iter()
        .map(|(k, m, r)| OutputDecl {
            kind: (*k).to_owned(),
            max: Some(m.unwrap_or(1)),
            required: r.unwrap_or(false),
        })
        .collect()
}

/// The tool policy and output-tool descriptions of a run of `event` in its
/// own context.
fn run_of(event: &str, outputs: &[OutputDecl]) -> (Value, Vec<String>) {
    let decls = event_decls(event, outputs, Release::V0_9_0);
    let d = derive(
        &decls,
        Some(&OutputContext::for_event(event)),
        None,
        &CapabilityRegistry::hub_0_9(),
    )
    .unwrap();
    let desc = d.tools[1..].iter().map(|t| t.description.clone()).collect();
    (d.policy.to_json(), desc)
}

#[test]
fn t1_minimal_manual_has_finish_execution_only() {
    let decls = event_decls("manual.run", &[], Release::V0_9_0);
    assert!(decls.is_empty());
    assert_eq!(
        run_of("manual.run", &[]),
        (p(&["finish_execution"]), vec![])
    );
}

#[test]
fn t2_slack_without_outputs_gets_an_unlimited_reply() {
    let decls = event_decls("slack.mention", &[], Release::V0_9_0);
    assert_eq!(
        decls,
        [OutputDecl {
            kind: "slack.reply".into(),
            max: None,
            required: false
        }]
    );
    let (policy, desc) = run_of("slack.mention", &[]);
    assert_eq!(policy, p(&["finish_execution", "reply"]));
    assert_eq!(desc, [REPLY]);
    assert!(!desc[0].contains("(up to"));
}

#[test]
fn t3_engineering_requests_per_event() {
    let outputs = authored(&[("slack.reply", Some(5), None)]);
    let (slack, slack_desc) = run_of("slack.mention", &outputs);
    assert_eq!(slack, p(&["finish_execution", "reply"]));
    assert_eq!(slack_desc, [format!("{REPLY} (up to 5 times).")]);
    // The GitHub event drops slack.reply as unavailable and gets an
    // unlimited reply from github.reply.
    let decls = event_decls("github.issue_comment_created", &outputs, Release::V0_9_0);
    assert_eq!(decls.len(), 2);
    assert_eq!(decls[1].kind, "github.reply");
    assert_eq!(decls[1].max, None);
    let (gh, gh_desc) = run_of("github.issue_comment_created", &outputs);
    assert_eq!(gh, p(&["finish_execution", "reply"]));
    assert_eq!(gh_desc, [REPLY]);
}

#[test]
fn t5_github_push_has_no_item_to_reply_on() {
    let decls = event_decls("github.push", &[], Release::V0_9_0);
    assert_eq!(decls.len(), 1, "github.reply is added");
    assert_eq!(run_of("github.push", &[]).0, p(&["finish_execution"]));
    // Positive control: an event with an issue gets it.
    assert_eq!(
        run_of("github.issue_comment", &[]).0,
        p(&["finish_execution", "reply"])
    );
}

#[test]
fn t6_an_authored_grant_caps_the_reply_at_one() {
    let outputs = authored(&[("slack.reply", None, None)]);
    let decls = event_decls("slack.mention", &outputs, Release::V0_9_0);
    assert_eq!(
        decls,
        [OutputDecl {
            kind: "slack.reply".into(),
            max: Some(1),
            required: false
        }]
    );
    let (policy, desc) = run_of("slack.mention", &outputs);
    assert_eq!(policy, p(&["finish_execution", "reply"]));
    assert_eq!(desc, [format!("{REPLY} (up to 1 times).")]);
}

#[test]
fn v06_registry_is_unchanged_for_bundles() {
    // A v0.6 bundle's github.reply grant is dropped; the 0.9 registry keeps it.
    let decls = [OutputDecl::optional("github.reply")];
    let ctx = OutputContext::for_event("github.issue_comment");
    let v06 = derive(&decls, Some(&ctx), None, &CapabilityRegistry::default()).unwrap();
    assert_eq!(v06.policy.to_json(), p(&["finish_execution"]));
    let v09 = derive(&decls, Some(&ctx), None, &CapabilityRegistry::hub_0_9()).unwrap();
    assert_eq!(v09.policy.to_json(), p(&["finish_execution", "reply"]));
}

#[test]
fn required_unavailable_still_fails_with_the_v06_message() {
    let outputs = authored(&[("slack.reply", None, Some(true))]);
    let decls = event_decls("manual.run", &outputs, Release::V0_9_0);
    let err = derive(
        &decls,
        Some(&OutputContext::for_event("manual.run")),
        None,
        &CapabilityRegistry::hub_0_9(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "required output capability unavailable: slack.reply; register a Hub output tool for each type or remove required: true"
    );
    // Positive control: in a Slack run the required reply is available.
    assert_eq!(
        run_of("slack.mention", &outputs).0,
        p(&["finish_execution", "reply"])
    );
}

const EVENTS: &[&str] = &[
    "slack.mention",
    "discord.mention",
    "github.issue_comment_created",
    "github.push",
    "linear.comment_created",
    "manual.run",
    "schedule.tick",
    "future.thing",
];

const TYPES: &[&str] = &[
    "slack.reply",
    "discord.reply",
    "github.reply",
    "linear.reply",
    "linear.progress",
    "future.publish",
];

fn outputs() -> impl Strategy<Value = Vec<(String, Option<u32>, Option<bool>)>> {
    // A map: unique types, in a generated order.
    prop::sample::subsequence(TYPES, 0..=TYPES.len())
        .prop_shuffle()
        .prop_flat_map(|kinds| {
            let n = kinds.len();
            (
                Just(kinds),
                prop::collection::vec(prop::option::of(1u32..6), n),
                prop::collection::vec(prop::option::weighted(0.5, prop::bool::weighted(0.2)), n),
            )
        })
        .prop_map(|(kinds, maxes, reqs)| {
            kinds
                .into_iter()
                .zip(maxes)
                .zip(reqs)
                .map(|((k, m), r)| (k.to_owned(), m, r))
                .collect()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Differential, trigger layout: the real derivation (authored defaults,
    /// automatic reply, the 0.9 registry, the event's own context) agrees
    /// with the naive reference written from §4.3, tools and descriptions.
    #[test]
    fn trigger_differential_against_naive_reference(out in outputs(), event in prop::sample::select(EVENTS)) {
        let decls: Vec<OutputDecl> = out.iter().map(|(k, m, r)| OutputDecl { kind: k.clone(), max: Some(m.unwrap_or(1)), required: r.unwrap_or(false) }).collect();
        let real = derive(
            &event_decls(event, &decls, Release::V0_9_0),
            Some(&OutputContext::for_event(event)),
            None,
            &CapabilityRegistry::hub_0_9(),
        );
        let naive = crate::naive::trigger_derive(&out, event);
        match (real, naive) {
            (Ok(d), Ok((tools, descs))) => {
                prop_assert_eq!(d.policy.tool_names().collect::<Vec<_>>(), tools);
                let real_descs: Vec<String> = d.tools[1..].iter().map(|t| t.description.clone()).collect();
                prop_assert_eq!(real_descs, descs);
            }
            (Err(e), Err(m)) => prop_assert_eq!(e.to_string(), m),
            (r, n) => prop_assert!(false, "real {:?} vs naive {:?}", r, n),
        }
    }

    /// An authored grant of the event's reply type always suppresses the
    /// automatic one, and the automatic one is always last and unlimited.
    #[test]
    fn automatic_reply_is_last_and_only_without_an_authored_one(out in outputs(), event in prop::sample::select(EVENTS)) {
        let decls: Vec<OutputDecl> = out.iter().map(|(k, m, r)| OutputDecl { kind: k.clone(), max: Some(m.unwrap_or(1)), required: r.unwrap_or(false) }).collect();
        let all = event_decls(event, &decls, Release::V0_9_0);
        prop_assert_eq!(&all[..decls.len()], &decls[..]);
        let unlimited: Vec<&OutputDecl> = all.iter().filter(|d| d.max.is_none()).collect();
        prop_assert!(unlimited.len() <= 1);
        if let Some(u) = unlimited.first() {
            prop_assert_eq!(all.last(), Some(*u));
            prop_assert!(!decls.iter().any(|d| d.kind == u.kind));
        }
    }
}

fn v4_text(required: bool) -> String {
    format!(
        "name: manual-job\non: manual.run\nmax_runtime: 1h\nfilters: {{from_users: [automation]}}\nsteps:\n  - id: work\n    environment: dev\n    max_runtime: 30m\n    idle_timeout: 5m\n    agent: {{provider: claude, options: {{allowedTools: [Read]}}}}\n    prompt: [{{text: \"${{{{ paseo.prompt }}}}\"}}]\n    allow_outputs: [{{type: slack.reply{}}}]\n",
        if required { ", required: true" } else { "" }
    )
}

fn v4_config(required: bool) -> palisade_schema::HubConfig {
    let hub = "environments:\n  dev: {kind: daemon, daemon: laptop, cwd: /repo}\n";
    let wf = v4_text(required);
    palisade_schema::parse_bundle_str(&[
        (".paseo/hub.yml", hub),
        (".paseo/workflows/manual-job.yml", &wf),
    ])
    .unwrap()
    .into_parts()
    .0
}

#[test]
fn t14_v4_migrates_to_the_single_run_document() {
    let config = v4_config(false);
    let m = migrate::migrate(&config);
    assert_eq!(m.len(), 1);
    let Format::SingleRun { document, yaml } = &m[0].format else {
        panic!("expected single_run, got {:?}", m[0].format);
    };
    assert_eq!(
        document,
        &json!({
            "name": "manual-job", "enabled": true,
            "on": {"manual.run": {"filters": {"from_users": ["automation"]}}},
            "max_runtime": "1h",
            "run": {"continuation": {"mode": "new"}, "target": {"daemon": "laptop", "cwd": "/repo"},
                    "agent": {"provider": "claude", "options": {"allowedTools": ["Read"]}},
                    "prompt": "${{ paseo.prompt }}", "max_runtime": "30m", "idle_timeout": "5m",
                    "outputs": {"slack.reply": {"max": 1}}, "auto_archive": false}
        })
    );
    // Key order is the Hub's (serde_json keeps insertion order here).
    let keys: Vec<&String> = document["run"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "continuation",
            "target",
            "agent",
            "prompt",
            "max_runtime",
            "idle_timeout",
            "outputs",
            "auto_archive"
        ]
    );
    assert!(
        yaml.starts_with("name: manual-job\nenabled: true\n'on':\n  manual.run:\n"),
        "{yaml}"
    );
    assert!(
        yaml.contains("  prompt: \"${{ paseo.prompt }}\"\n"),
        "{yaml}"
    );
    let codes: Vec<&str> = m[0].changes.iter().map(|c| c.code).collect();
    assert_eq!(
        codes,
        [
            "manual_from_users_explicit",
            "continuation_new",
            "max_explicit",
            "auto_archive_explicit",
            "implicit_mode"
        ]
    );
    // A manual run gets no automatic reply, so nothing widens.
    assert!(m[0].changes.iter().all(|c| !c.widens));
    // In a manual context the migrated grants give P(finish_execution).
    let decls = event_decls("manual.run", &authored_decls_of(document), Release::V0_9_0);
    let d = derive(
        &decls,
        Some(&OutputContext::for_event("manual.run")),
        None,
        &CapabilityRegistry::hub_0_9(),
    )
    .unwrap();
    assert_eq!(d.policy.to_json(), p(&["finish_execution"]));
    // V5 (`required: true`): palisade's v0.6 check refuses it already
    // (`required_output_unavailable`); its migrated grant keeps
    // `required: true` and still fails at dispatch with the v0.6 message.
    let v5 = palisade_schema::parse_bundle_str(&[
        (
            ".paseo/hub.yml",
            "environments:\n  dev: {kind: daemon, daemon: laptop, cwd: /repo}\n",
        ),
        (".paseo/workflows/manual-job.yml", &v4_text(true)),
    ]);
    assert!(v5.is_err());
    let decls = event_decls(
        "manual.run",
        &[OutputDecl {
            kind: "slack.reply".into(),
            max: Some(1),
            required: true,
        }],
        Release::V0_9_0,
    );
    let err = derive(
        &decls,
        Some(&OutputContext::for_event("manual.run")),
        None,
        &CapabilityRegistry::hub_0_9(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "required output capability unavailable: slack.reply; register a Hub output tool for each type or remove required: true"
    );
}

/// The defaulted grants of a migrated document's `run.outputs`.
fn authored_decls_of(doc: &Value) -> Vec<OutputDecl> {
    doc["run"]["outputs"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, o)| OutputDecl {
                    kind: k.clone(),
                    max: o["max"].as_u64().map(|m| u32::try_from(m).unwrap()),
                    required: o["required"].as_bool().unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn migration_of_conversational_runs_and_blockers() {
    let hub = "environments:\n  dev: {kind: daemon, daemon: laptop, cwd: /repo}\n";
    let step = |id: &str, env: &str, extra: &str| {
        format!(
            "  - {{id: {id}, environment: {env}, max_runtime: 10m, idle_timeout: 1m, agent: {{provider: codex}}, prompt: [{{text: go}}]{extra}}}\n"
        )
    };
    let gh = format!(
        "name: github-issue-comment\non: github.issue_comment_created\nmax_runtime: 10m\nfilters: {{repo: acme/api, from_users: [alice]}}\nsteps:\n{}",
        step("work", "dev", ", github: {connection: gh}")
    );
    let slack = format!(
        "name: slack-two\non: slack.mention\nmax_runtime: 1h\nfilters: {{from_users: [U1]}}\nsteps:\n{}{}",
        step("a", "dev", ""),
        step("b", "dev", "")
    );
    let cond = format!(
        "name: conditional\non: slack.mention\nmax_runtime: 1h\nfilters: {{from_users: [U1]}}\nsteps:\n{}",
        step("a", "dev", ", if: \"${{ paseo.prompt == 'go' }}\"")
    );
    let parsed = palisade_schema::parse_bundle_str(&[
        (".paseo/hub.yml", hub),
        (".paseo/workflows/gh.yml", &gh),
        (".paseo/workflows/slack.yml", &slack),
        (".paseo/workflows/cond.yml", &cond),
    ]);
    let config = match parsed {
        Ok(p) => p.into_parts().0,
        Err(d) => panic!("{d:#?}"),
    };
    let m = migrate::migrate(&config);
    let by = |n: &str| m.iter().find(|x| x.trigger == n).unwrap();
    let g = by("github-issue-comment");
    let Format::SingleRun { document, .. } = &g.format else {
        panic!("{:?}", g.format)
    };
    assert_eq!(g.changes[0].code, "automatic_unlimited_reply");
    assert!(g.changes[0].widens);
    assert!(
        g.changes[0].message.contains("`github.reply`"),
        "{}",
        g.changes[0].message
    );
    assert_eq!(
        document["run"]["github"],
        json!({"connection": "gh", "permissions": {"contents": "read"}, "duration": "1h"})
    );
    assert_eq!(
        document["on"],
        json!({"github.issue_comment_created": {"filters": {"repo": "acme/api", "from_users": ["alice"]}}})
    );
    assert!(
        document.get("max_runtime").is_none(),
        "equal to the step's: not written"
    );
    let codes: Vec<&str> = g.changes.iter().map(|c| c.code).collect();
    for c in [
        "github_permissions_explicit",
        "github_duration_explicit",
        "continuation_new",
    ] {
        assert!(codes.contains(&c), "{codes:?}");
    }
    let s = by("slack-two");
    assert_eq!(
        s.format,
        Format::LegacyMultistep {
            blockers: vec![migrate::MULTIPLE_STEPS.to_owned()]
        }
    );
    assert!(s.changes.iter().all(|c| !c.widens));
    let c = by("conditional");
    assert_eq!(
        c.format,
        Format::LegacyMultistep {
            blockers: vec![migrate::CONDITIONAL.to_owned()]
        }
    );
    assert_eq!(g.to_json()["format"], "single_run");
    assert_eq!(c.to_json()["blockers"], json!([migrate::CONDITIONAL]));
}

#[test]
fn migrated_manual_run_without_from_users_widens_to_everyone() {
    let hub = "environments:\n  dev: {kind: daemon, daemon: laptop, cwd: /repo}\n";
    let wf = "name: m\non: manual.run\nmax_runtime: 1h\nsteps:\n  - {id: w, environment: dev, max_runtime: 1h, idle_timeout: 1m, agent: {provider: codex}, prompt: [{text: go}], allow_outputs: [{type: github.reply, max: 2}]}\n";
    let parsed = palisade_schema::parse_bundle_str(&[
        (".paseo/hub.yml", hub),
        (".paseo/workflows/m.yml", wf),
    ]);
    let parsed = match parsed {
        Ok(p) => p,
        Err(d) => panic!("{d:#?}"),
    };
    let m = migrate::migrate(&parsed.into_parts().0);
    let codes: Vec<(&str, bool)> = m[0].changes.iter().map(|c| (c.code, c.widens)).collect();
    assert!(codes.contains(&("manual_wildcard", true)), "{codes:?}");
    assert!(
        codes.contains(&("grant_becomes_effective", true)),
        "{codes:?}"
    );
}

#[test]
fn wildcard_admits_everyone_only_in_hub_0_9() {
    use palisade_policy::admission::{Filters, TriggerEvent, admit, admit_0_9};
    let mut f = Filters::default();
    f.from_users = Some(vec!["*".into()]);
    let mut e = TriggerEvent::default();
    e.name = "github.issue_comment".into();
    e.actor_name = Some("mallory".into());
    assert!(admit_0_9("github.issue_comment", Some(&f), &e).is_admitted());
    // v0.6 compares "*" as a literal login.
    assert!(!admit("github.issue_comment", Some(&f), &e).is_admitted());
    // An empty list still admits nobody, in 0.9 too.
    f.from_users = Some(vec![]);
    assert!(!admit_0_9("github.issue_comment", Some(&f), &e).is_admitted());
    // Manual: ["*"] admits any actor, an explicit list only its actors.
    let mut m = TriggerEvent::default();
    m.name = "manual.run".into();
    m.actor_id = Some("anyone".into());
    f.from_users = Some(vec!["*".into()]);
    assert!(admit_0_9("manual.run", Some(&f), &m).is_admitted());
    f.from_users = Some(vec!["automation".into()]);
    assert!(!admit_0_9("manual.run", Some(&f), &m).is_admitted());
    m.actor_id = Some("automation".into());
    assert!(admit_0_9("manual.run", Some(&f), &m).is_admitted());
}

/// The Hub's own verdict on a document, without palisade's lints: these
/// tests check the Hub's vectors (T2's `from_users: ["*"]` is a lint error).
fn parse_doc(text: &str) -> palisade_schema::trigger::TriggerDocument {
    let mut options = palisade_schema::trigger::TriggerOptions::default();
    options.skip_lints = true;
    match palisade_schema::trigger::parse_trigger_with("t.yml", text, &options) {
        Ok(p) => p.into_parts().0,
        Err(d) => panic!("{d:#?}"),
    }
}

const RUN: &str = "run: {target: {daemon: devbox, cwd: /workspace}, agent: {provider: codex, mode: full-access}, prompt: Handle it}\n";

#[test]
fn parsed_documents_grant_per_entry_t1_t2_t3() {
    use palisade_policy::grant::GrantConfig;
    use palisade_policy::trigger::{derive_entry, entry_decls, grant_entry};
    let t1 = parse_doc(&format!("name: deploy\non: {{manual.run: {{}}}}\n{RUN}"));
    let d = derive_entry(
        &t1,
        0,
        None,
        &CapabilityRegistry::hub_0_9(),
        Release::V0_9_0,
    )
    .unwrap();
    assert_eq!(d.policy.to_json(), p(&["finish_execution"]));
    let t2 = parse_doc(&format!(
        "name: t\non: {{slack.mention: {{connection: acme-slack, filters: {{from_users: [\"*\"]}}}}}}\n{RUN}"
    ));
    let d = derive_entry(
        &t2,
        0,
        None,
        &CapabilityRegistry::hub_0_9(),
        Release::V0_9_0,
    )
    .unwrap();
    assert_eq!(d.policy.to_json(), p(&["finish_execution", "reply"]));
    assert_eq!(d.tools[1].description, REPLY);
    let t3 = parse_doc(
        "name: er\non:\n  slack.mention: {filters: {from_users: [U1]}}\n  github.issue_comment: {filters: {from_users: [alice]}}\nrun: {target: {daemon: devbox, cwd: /workspace}, agent: {provider: codex, mode: full-access}, prompt: Handle it, outputs: {slack.reply: {max: 5}}}\n",
    );
    assert_eq!(t3.on.len(), 2);
    let reg = CapabilityRegistry::hub_0_9();
    let slack = derive_entry(&t3, 0, None, &reg, Release::V0_9_0).unwrap();
    assert_eq!(slack.policy.to_json(), p(&["finish_execution", "reply"]));
    assert_eq!(
        slack.tools[1].description,
        format!("{REPLY} (up to 5 times).")
    );
    let gh = derive_entry(&t3, 1, None, &reg, Release::V0_9_0).unwrap();
    assert_eq!(gh.policy.to_json(), p(&["finish_execution", "reply"]));
    assert_eq!(gh.tools[1].description, REPLY);
    assert_eq!(gh.materialized[0].decl.kind, "github.reply");
    assert_eq!(entry_decls(&t3, 1, Release::V0_9_0).unwrap().len(), 2);
    let agent = palisade_policy::trigger::agents(&t3)[0].1.clone();
    let g = grant_entry(
        &t3,
        1,
        &agent,
        &OutputContext::for_event("github.issue_comment"),
        &reg,
        &GrantConfig::default(),
        Release::V0_9_0,
    )
    .unwrap();
    assert_eq!(
        g.derived.policy.to_json(),
        p(&["finish_execution", "reply"])
    );
}

#[test]
fn plan_document_admits_and_grants_through_the_compiled_form() {
    use palisade_policy::admission::TriggerEvent;
    use palisade_policy::grant::GrantConfig;
    use palisade_policy::plan::{PlanInput, StepStatus, plan_document};
    let doc = parse_doc(&format!(
        "name: t\non: {{slack.mention: {{connection: acme-slack, filters: {{from_users: [\"*\"]}}}}}}\n{RUN}"
    ));
    let compiled = doc.compile();
    let mut e = TriggerEvent::default();
    e.name = "slack.mention".into();
    e.actor_id = Some("U999".into());
    e.connection = Some("acme-slack".into());
    e.text = "<@B1> hi".into();
    e.bot_mentions = vec!["B1".into()];
    let input = PlanInput {
        config: &compiled,
        trigger: "t",
        event: &e,
        outputs: &[],
        context: None,
    };
    let plan = plan_document(
        &doc,
        0,
        &input,
        &CapabilityRegistry::hub_0_9(),
        &GrantConfig::default(),
        Release::V0_9_0,
    )
    .unwrap();
    assert!(plan.admission.is_admitted(), "{:?}", plan.admission);
    assert_eq!(plan.steps.len(), 1);
    assert_eq!(plan.steps[0].id, "run");
    let StepStatus::Run(run) = &plan.steps[0].status else {
        panic!("{:?}", plan.steps[0].status)
    };
    let g = run.grant.as_ref().unwrap();
    assert_eq!(
        g.derived.policy.to_json(),
        p(&["finish_execution", "reply"])
    );
    assert_eq!(g.derived.materialized[0].decl.max, None);
    // The v0.6 plan of the same compiled trigger has no automatic reply and
    // no wildcard: the author is not admitted.
    let v06 = palisade_policy::plan::plan(
        &input,
        &CapabilityRegistry::hub_0_9(),
        &GrantConfig::default(),
    )
    .unwrap();
    assert!(!v06.admission.is_admitted());
    assert!(
        plan_document(
            &doc,
            1,
            &input,
            &CapabilityRegistry::hub_0_9(),
            &GrantConfig::default(),
            Release::V0_9_0
        )
        .is_err()
    );
}

#[test]
fn migrated_yaml_parses_back_as_the_same_document() {
    use palisade_policy::trigger::entry_decls;
    use palisade_schema::trigger::Continuation;
    let m = migrate::migrate(&v4_config(false));
    let Format::SingleRun { yaml, .. } = &m[0].format else {
        panic!()
    };
    // The agent has no mode: the Hub keeps an unchanged migrated revision,
    // but a fresh validation refuses it, which the preview says
    // (`implicit_mode`).
    let refused = palisade_schema::trigger::parse_trigger("t.yml", yaml)
        .unwrap_err()
        .into_vec();
    let codes: Vec<&str> = refused
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.code)
        .collect();
    assert_eq!(codes, ["missing_mode"]);
    assert!(m[0].changes.iter().any(|c| c.code == "implicit_mode"));
    let with_mode = yaml.replace(
        "    provider: claude\n",
        "    provider: claude\n    mode: default\n",
    );
    assert_ne!(&with_mode, yaml);
    let doc = parse_doc(&with_mode);
    assert_eq!(doc.name, "manual-job");
    assert_eq!(doc.run.continuation, Continuation::New);
    assert!(!doc.run.auto_archive);
    assert_eq!(doc.max_runtime.as_ref().map(|d| d.millis), Some(3_600_000));
    assert_eq!(doc.run.max_runtime.millis, 1_800_000);
    assert_eq!(doc.run.idle_timeout.millis, 300_000);
    assert_eq!(doc.run.prompt.source, "${{ paseo.prompt }}");
    assert_eq!(
        entry_decls(&doc, 0, Release::V0_9_0).unwrap(),
        [OutputDecl {
            kind: "slack.reply".into(),
            max: Some(1),
            required: false
        }]
    );
    assert_eq!(
        doc.on[0]
            .filters
            .as_ref()
            .and_then(|f| f.from_users.clone()),
        Some(vec!["automation".to_owned()])
    );
}
