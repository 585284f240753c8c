//! The seed workflow of Paseo's Hub security guide and each of its
//! fragments validate clean, as data-driven tests over `examples/`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "tests read fixture files"
)]

use palisade_schema::{AgentRef, parse_fragment, parse_workflow};

fn example(path: &str) -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/");
    std::fs::read_to_string(format!("{root}{path}")).unwrap()
}

#[test]
fn seed_single_file_parses_clean() {
    let text = example("guarded-request.yml");
    let parsed = parse_workflow("guarded-request.yml", &text).unwrap();
    assert!(parsed.warnings().is_empty(), "{:#?}", parsed.warnings());
    let config = parsed.into_value();
    assert_eq!(config.environments.len(), 1);
    let t = &config.triggers[0];
    assert_eq!(t.name, "guarded-request");
    assert_eq!(t.on, "slack.mention");
    assert_eq!(t.max_runtime.millis, 2 * 3_600_000);
    let ids: Vec<&str> = t.steps.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["classify", "answer", "implement"]);
    assert!(t.steps[0].output_schema.is_some());
    assert_eq!(t.steps[1].allow_outputs[0].max, Some(1));
    assert_eq!(t.steps[2].allow_outputs[0].max, Some(3));
    let AgentRef::Inline(a) = &t.steps[0].agent else {
        panic!()
    };
    assert_eq!(a.provider, "codex");
    let cond = t.steps[1].condition.as_ref().unwrap();
    let ctx = serde_json::json!({"steps": {"classify": {"outputs": {"kind": "answer"}}}});
    assert_eq!(cond.eval(&ctx).unwrap(), serde_json::json!(true));
}

#[test]
fn seed_fragments_validate_as_their_section() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/fragments");
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    assert_eq!(names.len(), 7, "the seed has seven fragments");
    for path in names {
        let text = std::fs::read_to_string(&path).unwrap();
        let parsed = parse_fragment(&path.display().to_string(), &text)
            .unwrap_or_else(|d| panic!("{}: {d:#?}", path.display()));
        assert!(
            parsed.warnings().is_empty(),
            "{}: {parsed:#?}",
            path.display()
        );
    }
    // Positive control: the same machinery rejects a broken fragment.
    let diags = parse_fragment(
        "f.yml",
        "agent:\n  provider: codex\n  options:\n    cwd: /\n",
    )
    .unwrap_err();
    assert_eq!(diags.len(), 1, "{diags:#?}");
    let d = diags.first();
    assert_eq!(d.code, "unknown_key");
    assert_eq!(d.path.to_string(), ".agent.options");
    assert_eq!((d.line, d.column), (4, 5));
}

#[test]
fn warnings_do_not_drop_the_model() {
    let text = "environments: [{name: dev, kind: daemon, daemon: d, cwd: /repo}]\ntriggers:\n  - name: t\n    on: slack.mention\n    max_runtime: 1h\n    filters: {from_users: [U1]}\n    steps:\n      - {id: s, environment: dev, max_runtime: 1m, idle_timeout: 1m, agent: {provider: gemini}, prompt: [{text: go}]}\n";
    let (config, diags) = parse_workflow("w.yml", text)
        .expect("a workflow with only warnings parses")
        .into_parts();
    let codes: Vec<&str> = diags.iter().map(|d| d.code).collect();
    assert_eq!(
        codes,
        [
            "unpinned_trigger",
            "unpinned_trigger",
            "unsupported_provider"
        ]
    );
    assert!(diags.iter().all(|d| !d.is_error()));
    assert_eq!(config.triggers[0].steps.len(), 1);
    // Positive control: the same workflow with an error has no model, and
    // its findings list the error first, then the warnings.
    let refused =
        parse_workflow("w.yml", &text.replace("max_runtime: 1m", "max_runtime: 0m")).unwrap_err();
    let codes: Vec<&str> = refused.iter().map(|d| d.code).collect();
    assert_eq!(codes, ["invalid_duration", "unsupported_provider"]);
    assert_eq!((refused.error_count(), refused.warning_count()), (1, 1));
}
