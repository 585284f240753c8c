//! Trigger documents (`hub-triggers.md`): the corpus of the spec's
//! vectors, discovery, compilation and round trips.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "tests read fixture files and fail loudly"
)]

use palisade_schema::trigger::{
    Continuation, Release, RunAgent, TriggerDocument, TriggerOptions, parse_trigger,
    parse_trigger_with,
};

fn data(name: &str) -> String {
    let path = format!("{}/tests/data/triggers/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The document as the Hub accepts it (palisade's lints not applied: T2's
/// wildcard is a lint error, tested in `trigger_lints.rs`).
fn accept(name: &str) -> TriggerDocument {
    let mut options = TriggerOptions::default();
    options.skip_lints = true;
    match parse_trigger_with(name, &data(name), &options) {
        Ok(p) => p.into_value(),
        Err(d) => panic!("{name} refused: {d:#?}"),
    }
}

#[test]
fn minimal_example_parses_with_defaults_and_compiles() {
    let doc = accept("t01-minimal.yml");
    assert_eq!(doc.name, "deploy");
    assert!(doc.enabled);
    assert_eq!(doc.run.continuation, Continuation::Conversation);
    assert_eq!(doc.run.max_runtime.text, "2h");
    assert_eq!(doc.run.idle_timeout.text, "10m");
    assert!(doc.run.auto_archive);
    let c = doc.compile();
    assert_eq!(c.triggers.len(), 1);
    let t = &c.triggers[0];
    assert_eq!(t.name, "deploy");
    assert_eq!(t.max_runtime.text, "2h");
    assert_eq!(
        t.filters.as_ref().and_then(|f| f.from_users.clone()),
        Some(vec!["*".to_owned()])
    );
    assert_eq!(t.steps.len(), 1);
    assert_eq!(t.steps[0].id, "run");
    assert!(t.steps[0].allow_outputs.is_empty());
    assert!(t.steps[0].auto_archive);
    assert_eq!(c.environments[0].name, "target");
}

#[test]
fn complete_example_parses_and_compiles() {
    let doc = accept("t16-complete.yml");
    assert_eq!(doc.on.len(), 2);
    assert!(matches!(&doc.run.agent, RunAgent::Select { choices, .. } if choices.len() == 2));
    assert!(
        matches!(&doc.run.continuation, Continuation::Key(k) if k.source == "api-${{ paseo.inputs.model }}")
    );
    let c = doc.compile();
    let names: Vec<&str> = c.triggers.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["engineering-requests", "engineering-requests-event-2"]
    );
    for t in &c.triggers {
        assert_eq!(t.max_runtime.text, "4h");
        assert_eq!(t.steps[0].max_runtime.text, "90m");
        assert!(!t.steps[0].auto_archive);
        let o = &t.steps[0].allow_outputs;
        assert_eq!(o.len(), 1);
        assert_eq!(
            (o[0].kind.as_str(), o[0].max, o[0].required),
            ("slack.reply", Some(5), false)
        );
    }
    assert_eq!(
        c.triggers[1]
            .filters
            .as_ref()
            .and_then(|f| f.connection.clone()),
        Some("acme-github".to_owned())
    );
    assert_eq!(c.agents.len(), 2);
    let _ = (Release::Main, TriggerOptions::default(), parse_trigger_with);
}

/// One corpus file's expectation, from its `# release:`, `# expect:` and
/// `# error: <path as a JSON array> <message>` header lines.
struct Expect {
    release: Release,
    accept: bool,
    unlinted: bool,
    errors: Vec<(Vec<serde_json::Value>, String)>,
}

fn expectation(name: &str, text: &str) -> Expect {
    let mut e = Expect {
        release: Release::V0_9_0,
        accept: false,
        unlinted: false,
        errors: Vec::new(),
    };
    for line in text.lines().take_while(|l| l.starts_with('#')) {
        if let Some(r) = line.strip_prefix("# release: ") {
            e.release = Release::parse(r.trim()).unwrap_or_else(|| panic!("{name}: release {r}"));
        } else if let Some(x) = line.strip_prefix("# expect: ") {
            e.accept = true;
            e.unlinted = x.trim() == "accept-unlinted";
        } else if let Some(rest) = line.strip_prefix("# error: ") {
            let end = rest.find("] ").map_or(rest.len(), |i| i + 1);
            let (path, msg) = rest.split_at(end);
            let path: Vec<serde_json::Value> =
                serde_json::from_str(path).unwrap_or_else(|err| panic!("{name}: {path}: {err}"));
            e.errors.push((path, msg.trim().to_owned()));
        }
    }
    assert!(
        e.accept == e.errors.is_empty(),
        "{name}: a corpus file either expects acceptance or lists errors"
    );
    e
}

fn path_json(p: &palisade_schema::Path) -> Vec<serde_json::Value> {
    p.0.iter()
        .map(|s| match s {
            palisade_schema::PathSegment::Key(k) => serde_json::Value::String(k.clone()),
            palisade_schema::PathSegment::Index(i) => serde_json::Value::from(*i),
        })
        .collect()
}

fn corpus() -> Vec<(String, String)> {
    let dir = format!("{}/tests/data/triggers", env!("CARGO_MANIFEST_DIR"));
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yml"))
        .map(|n| {
            let t = data(&n);
            (n, t)
        })
        .collect();
    out.sort();
    out
}

/// Every vector of `hub-triggers.md` §7 (T1–T16) and every §6.2 string:
/// accepted where the Hub accepts, else refused with exactly the listed
/// errors (path and message).
#[test]
fn corpus_verdicts() {
    let files = corpus();
    assert!(
        files.len() >= 50,
        "the corpus went missing: {}",
        files.len()
    );
    let mut failures = Vec::new();
    for (name, text) in &files {
        let e = expectation(name, text);
        let mut options = TriggerOptions::for_release(e.release);
        options.skip_lints = e.unlinted;
        let got = parse_trigger_with(name, text, &options);
        match (&got, e.accept) {
            (Ok(_), true) => {}
            (Err(d), true) => failures.push(format!("{name}: refused: {d:#?}")),
            (Ok(_), false) => failures.push(format!("{name}: accepted, expected {:?}", e.errors)),
            (Err(d), false) => {
                let got: Vec<(Vec<serde_json::Value>, String)> = d
                    .errors()
                    .map(|x| (path_json(&x.path), x.message.clone()))
                    .collect();
                let mut want = e.errors.clone();
                let mut have = got.clone();
                want.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
                have.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
                if want != have {
                    failures.push(format!(
                        "{name}: errors differ\n want {want:?}\n have {have:?}"
                    ));
                }
                for x in d.errors() {
                    if x.line == 0 || x.file != *name {
                        failures.push(format!("{name}: {x} has no file:line:col"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn outputs_of(name: &str) -> Vec<Vec<(String, Option<u32>, bool)>> {
    accept(name)
        .compile()
        .triggers
        .iter()
        .map(|t| {
            t.steps[0]
                .allow_outputs
                .iter()
                .map(|o| (o.kind.clone(), o.max, o.required))
                .collect()
        })
        .collect()
}

#[test]
fn compiled_grants_follow_the_authored_outputs() {
    // T2: no authored grant; the automatic reply is palisade-policy's.
    assert_eq!(outputs_of("t02-slack-wildcard.yml"), [vec![]]);
    // T3: the authored grant on every compiled trigger, max kept.
    let five = vec![("slack.reply".to_owned(), Some(5), false)];
    assert_eq!(outputs_of("t03-two-events.yml"), [five.clone(), five]);
    // T6: an authored grant without max allows one call.
    assert_eq!(
        outputs_of("t06-authored-grant.yml"),
        [vec![("slack.reply".to_owned(), Some(1), false)]]
    );
}

#[test]
fn manual_wildcard_only_when_from_users_is_absent() {
    let c = accept("t01-minimal.yml").compile();
    assert_eq!(
        c.triggers[0]
            .filters
            .as_ref()
            .and_then(|f| f.from_users.clone()),
        Some(vec!["*".to_owned()])
    );
    // An explicit list stays as authored.
    let text = data("t14-migrated.yml").replace(
        "options: {allowedTools: [Read]}",
        "mode: default, options: {allowedTools: [Read]}",
    );
    let doc = parse_trigger("t14.yml", &text)
        .map_err(|d| d.to_string())
        .map(|p| p.into_value());
    let c = doc.as_ref().map(TriggerDocument::compile);
    let users = c
        .as_ref()
        .ok()
        .and_then(|c| c.triggers[0].filters.as_ref())
        .and_then(|f| f.from_users.clone());
    assert_eq!(users, Some(vec!["automation".to_owned()]), "{doc:?}");
    // Whole-run deadline: the document's, else the run's.
    let c = c.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.triggers[0].max_runtime.text, "1h");
    assert_eq!(c.triggers[0].steps[0].max_runtime.text, "30m");
}

#[test]
fn release_gate_names_the_release_and_accepts_when_allowed() {
    let text = data("t07a-schedule.yml");
    let refused = parse_trigger("s.yml", &text).expect_err("0.9.0 has no schedule.tick");
    assert_eq!(refused.first().code, "unreleased_event");
    assert!(
        refused.first().message.contains("main"),
        "{}",
        refused.first()
    );
    // Positive controls: main and unreleased both have it.
    for r in [Release::Main, Release::Unreleased] {
        let ok = parse_trigger_with("s.yml", &text, &TriggerOptions::for_release(r));
        assert!(ok.is_ok(), "{r:?}: {ok:?}");
    }
}

/// Codes of the structural findings the JSON Schema can express; a corpus
/// file refused only with these must fail the schema too.
const STRUCTURAL: &[&str] = &[
    "unknown_key",
    "invalid_type",
    "missing_field",
    "invalid_key",
    "invalid_value",
    "invalid_identifier",
    "no_events",
    "no_agent_choices",
    "invalid_agent",
    "invalid_output_max",
    "blank_continuation_key",
    "label_required",
    "schedule_shape",
    "schedule_not_alone",
    "recurrence_not_schedule",
    "forgejo_filter",
    "relative_cwd",
    "missing_mode",
];

/// `palisade schema trigger` against every corpus file (an independent
/// validator, the `jsonschema` crate): what the parser accepts validates;
/// what it refuses structurally fails the schema too.
#[test]
fn json_schema_agrees_with_the_corpus() {
    let schema = palisade_schema::trigger::json_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let (mut valid, mut invalid) = (0, 0);
    let mut failures = Vec::new();
    for (name, text) in corpus() {
        let e = expectation(&name, &text);
        let Ok(node) = palisade_schema::yaml::parse(&name, &text) else {
            continue;
        };
        let instance = node.value().to_json();
        let errs: Vec<String> = validator
            .iter_errors(&instance)
            .map(|x| format!("{x} at {}", x.instance_path()))
            .collect();
        let mut options = TriggerOptions::for_release(Release::Unreleased);
        options.skip_lints = true;
        let structural = parse_trigger_with(&name, &text, &options)
            .err()
            .is_some_and(|d| {
                // A YAML timestamp is a js-yaml Date, which a JSON instance
                // cannot carry (it becomes a string): the schema cannot see
                // that refusal, so it does not count as structural.
                d.errors()
                    .all(|x| STRUCTURAL.contains(&x.code) && !x.message.ends_with("received Date"))
            });
        if e.accept {
            valid += 1;
            if !errs.is_empty() {
                failures.push(format!(
                    "{name}: accepted by palisade, not by the schema: {errs:#?}"
                ));
            }
        } else if structural {
            invalid += 1;
            if errs.is_empty() {
                failures.push(format!(
                    "{name}: refused by palisade, valid under the schema"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        valid >= 10 && invalid >= 20,
        "too few cases: {valid} valid, {invalid} invalid"
    );
}

#[test]
fn the_trigger_example_validates_against_the_schema() {
    let path = format!(
        "{}/../examples/guarded-request-trigger/.paseo/triggers/guarded-request.yml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let instance = palisade_schema::yaml::parse("g.yml", &text)
        .unwrap()
        .value()
        .to_json();
    let schema = palisade_schema::trigger::json_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errs: Vec<String> = validator
        .iter_errors(&instance)
        .map(|x| x.to_string())
        .collect();
    assert!(errs.is_empty(), "{errs:#?}");
    // And it checks clean, lints included.
    let parsed = parse_trigger("guarded-request.yml", &text).unwrap();
    assert!(parsed.warnings().is_empty(), "{:#?}", parsed.warnings());
}

/// The fuzz entry point over every prefix and a byte flip of each corpus
/// file, for every release and both entry points: no panic (a smoke run of
/// `fuzz/fuzz_targets/trigger_parse.rs` inside the test suite).
#[test]
fn hostile_inputs_never_panic() {
    let mut runs = 0usize;
    for (_, text) in corpus() {
        let bytes = text.as_bytes();
        for cut in (0..bytes.len()).step_by(7) {
            for mode in [0u8, 1, 2, 3, 0x80] {
                let mut data = vec![mode];
                data.extend_from_slice(&bytes[..cut]);
                palisade_schema::trigger::__fuzz::parse(&data);
                if let Some(b) = data.get_mut(cut / 2 + 1) {
                    *b ^= 0x5a;
                }
                palisade_schema::trigger::__fuzz::parse(&data);
                runs += 2;
            }
        }
    }
    // Deep nesting and alias bombs stay bounded.
    let deep = format!("name: t\non: {}\n", "{a.b: ".repeat(200));
    palisade_schema::trigger::__fuzz::parse(&[&[0u8][..], deep.as_bytes()].concat());
    let bomb = "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c]\n";
    palisade_schema::trigger::__fuzz::parse(&[&[0u8][..], bomb.as_bytes()].concat());
    assert!(runs > 1000, "{runs}");
}
