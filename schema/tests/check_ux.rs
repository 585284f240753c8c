//! What `palisade check` users expect of the findings themselves: a
//! did-you-mean for every misspelt key and enum value, the end of the
//! offending node (so the caret spans it and JSON and SARIF carry an end
//! column), and one pass that reports every independent finding.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "tests read their data files"
)]

use palisade_schema::{Diagnostic, parse_workflow};

fn seed() -> String {
    std::fs::read_to_string(format!(
        "{}/../examples/guarded-request.yml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// Every finding of `text` (refused or accepted).
fn findings(text: &str) -> Vec<Diagnostic> {
    match parse_workflow("w.yml", text) {
        Ok(parsed) => parsed.into_parts().1,
        Err(refused) => refused.into_vec(),
    }
}

fn find<'d>(diags: &'d [Diagnostic], code: &str, path: &str) -> &'d Diagnostic {
    diags
        .iter()
        .find(|d| d.code == code && d.path.to_string() == path)
        .unwrap_or_else(|| panic!("no {code} at {path} in {diags:#?}"))
}

#[test]
fn misspelt_keys_and_enum_values_get_a_did_you_mean() {
    let clean = findings(&seed());
    // Positive control: the seed itself has no unknown key or value.
    assert!(
        !clean
            .iter()
            .any(|d| matches!(d.code, "unknown_key" | "invalid_value" | "unknown_event")),
        "{clean:#?}"
    );
    let typo = seed()
        .replace("from_users:", "from_user:")
        .replace("kind: daemon", "kind: deamon")
        .replace("approval_policy: never", "approval_policy: nevr");
    let diags = findings(&typo);
    let key = find(&diags, "unknown_key", ".triggers[0].filters");
    assert_eq!(key.help.as_deref(), Some("did you mean `from_users`?"));
    let kind = find(&diags, "invalid_value", ".environments[0].kind");
    assert_eq!(kind.help.as_deref(), Some("did you mean `daemon`?"));
    let option = find(
        &diags,
        "invalid_value",
        ".triggers[0].steps[0].agent.options.approval_policy",
    );
    assert_eq!(option.help.as_deref(), Some("did you mean `never`?"));
    // A key far from every known one gets no guess.
    let far = findings(&seed().replace("from_users:", "zzzzzzzzzzzz:"));
    assert_eq!(find(&far, "unknown_key", ".triggers[0].filters").help, None);
}

#[test]
fn a_misspelt_event_gets_a_did_you_mean() {
    let diags = findings(&seed().replace("on: slack.mention", "on: slack.mentoin"));
    let d = find(&diags, "unknown_event", ".triggers[0].on");
    assert_eq!(d.help.as_deref(), Some("did you mean `slack.mention`?"));
}

#[test]
fn a_finding_carries_the_end_of_its_node() {
    let text = seed().replace(
        "steps.classify.outputs.kind == 'answer'",
        "steps.classify.outputs.kind == 'anwser'",
    );
    let diags = findings(&text);
    let d = find(&diags, "unreachable_comparison", ".triggers[0].steps[1].if");
    let line = text.lines().nth(d.line as usize - 1).unwrap();
    let chars: Vec<char> = line.chars().collect();
    let spanned: String = chars[d.column as usize - 1..d.end_column as usize - 1]
        .iter()
        .collect();
    assert_eq!(d.end_line, d.line);
    assert_eq!(spanned, "${{ steps.classify.outputs.kind == 'anwser' }}");
    // A key's finding spans the key.
    let diags = findings(&seed().replace("from_users:", "from_user:"));
    let d = find(&diags, "unknown_key", ".triggers[0].filters");
    assert_eq!(d.end_column - d.column, "from_user".len() as u32);
    // A TOML value's finding spans the whole value, quotes included.
    let refused =
        palisade_schema::host_policy::parse("p.toml", "[worker.limits]\nmemory = \"4 gigs\"\n")
            .unwrap_err();
    let d = refused.first();
    assert_eq!((d.line, d.column, d.end_line, d.end_column), (2, 10, 2, 18));
}

#[test]
fn independent_errors_in_different_triggers_and_steps_are_all_reported() {
    // Three triggers: an unknown key in the first's first step, a bad
    // duration in the second's second step, a wrong enum value in the
    // third's provider options; and a fourth, clean but for a lint, whose lint must
    // still be reported next to the others' errors.
    let one = seed();
    let triggers_at = one.find("triggers:\n").unwrap() + "triggers:\n".len();
    let (head, trigger) = one.split_at(triggers_at);
    let renamed = |n: &str| trigger.replace("name: guarded-request", &format!("name: {n}"));
    let t1 = renamed("a").replacen("        max_runtime: 2m\n", "        max_runtim: 2m\n", 1);
    let t2 = renamed("b").replacen("max_runtime: 10m", "max_runtime: 1h30m", 1);
    let t3 = renamed("c").replacen("sandbox_mode: read-only", "sandbox_mode: read-onyl", 1);
    let t4 = renamed("d").replace("on: slack.mention", "on: slack.mentoin");
    // Positive control: each edit changed its trigger.
    for t in [&t1, &t2, &t3, &t4] {
        assert_ne!(t, trigger);
    }
    let text = format!("{head}{t1}{t2}{t3}{t4}");
    let diags = findings(&text);
    find(&diags, "unknown_key", ".triggers[0].steps[0]");
    let d = find(
        &diags,
        "invalid_duration",
        ".triggers[1].steps[1].max_runtime",
    );
    assert!(d.is_error());
    find(
        &diags,
        "invalid_value",
        ".triggers[2].steps[0].agent.options.sandbox_mode",
    );
    find(&diags, "unknown_event", ".triggers[3].on");
}

#[test]
fn every_warning_the_corpus_raises_is_a_known_lint() {
    // `palisade check --allow`, `--deny` and suppression comments accept
    // only the codes of `LINT_WARNINGS` and `LINT_ERRORS`; a warning code
    // missing there could not be allowed. Walk the invalid corpus, the
    // examples and the sample policies.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut warnings = Vec::new();
    let mut files = 0usize;
    for dir in [
        "schema/tests/data/invalid",
        "examples",
        "examples/providers",
    ] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yml") {
                files += 1;
                // Some corpus files are deliberately not UTF-8.
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue;
                };
                warnings.extend(findings(&text).into_iter().filter(|d| !d.is_error()));
            }
        }
    }
    for rel in ["examples/palisade.toml", "policy/tests/data/policy.toml"] {
        files += 1;
        let text = std::fs::read_to_string(root.join(rel)).unwrap();
        let found = match palisade_schema::host_policy::parse(rel, &text) {
            Ok(p) => p.into_parts().1,
            Err(e) => e.into_vec(),
        };
        warnings.extend(found.into_iter().filter(|d| !d.is_error()));
    }
    assert!(files > 100, "{files}");
    // Positive control: the corpus does raise warnings.
    assert!(warnings.len() > 10, "{warnings:#?}");
    let unknown: Vec<&str> = warnings
        .iter()
        .map(|d| d.code)
        .filter(|c| !palisade_schema::LINT_WARNINGS.contains(c))
        .collect();
    assert!(
        unknown.is_empty(),
        "warnings not in LINT_WARNINGS: {unknown:?}"
    );
    // A lint code may be in both lists (a trigger lint whose level depends
    // on the finding), but every one is a documented code.
    for code in palisade_schema::LINT_ERRORS
        .iter()
        .chain(palisade_schema::LINT_WARNINGS)
    {
        assert!(
            palisade_schema::codes::summary(code).is_some(),
            "{code} not in codes::CODES"
        );
    }
}

fn trigger_seed() -> String {
    std::fs::read_to_string(format!(
        "{}/../examples/guarded-request-trigger/.paseo/triggers/guarded-request.yml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// Every finding of the trigger document `text` (refused or accepted).
fn trigger_findings(text: &str) -> Vec<Diagnostic> {
    match palisade_schema::trigger::parse_trigger("t.yml", text) {
        Ok(parsed) => parsed.into_parts().1,
        Err(refused) => refused.into_vec(),
    }
}

#[test]
fn trigger_documents_get_did_you_mean_and_spans() {
    // Positive control: the example document is clean.
    let seed = trigger_seed();
    let clean = trigger_findings(&seed);
    assert!(clean.iter().all(|d| !d.is_error()), "{clean:#?}");
    // A misspelt key (at the root and in `run`) and a misspelt enum value.
    let text = seed
        .replace("max_runtime: 2h", "max_runtmie: 2h")
        .replace("  prompt: |", "  promtp: |")
        .replace("continuation: {mode: new}", "continuation: {mode: nwe}");
    assert_ne!(text, seed);
    let diags = trigger_findings(&text);
    let d = find(&diags, "unknown_key", "");
    assert_eq!(d.help.as_deref(), Some("did you mean `max_runtime`?"));
    // The span covers the key.
    assert_eq!(
        (d.end_line, d.end_column),
        (d.line, d.column + "max_runtmie".len() as u32),
        "{d:?}"
    );
    let d = find(&diags, "unknown_key", ".run");
    assert_eq!(d.help.as_deref(), Some("did you mean `prompt`?"));
    let d = find(&diags, "invalid_value", ".run.continuation.mode");
    assert_eq!(d.help.as_deref(), Some("did you mean `new`?"));
    // A name close to nothing gets no suggestion.
    let far = seed.replace("max_runtime: 2h", "zzzzzzzzzz: 2h");
    let diags = trigger_findings(&far);
    assert_eq!(find(&diags, "unknown_key", "").help, None);
}

#[test]
fn a_misspelt_trigger_event_suggests_the_event() {
    let seed = trigger_seed();
    let text = seed.replace("  slack.mention:", "  slack.mentoin:");
    assert_ne!(text, seed);
    let diags = trigger_findings(&text);
    let d = find(&diags, "unknown_event", ".on[\"slack.mentoin\"]");
    assert!(d.is_error());
    let help = d.help.as_deref().unwrap_or_default();
    assert!(help.starts_with("did you mean `slack.mention`?"), "{help}");
    // Positive control: the correct event raises no unknown_event.
    assert!(
        trigger_findings(&seed)
            .iter()
            .all(|d| d.code != "unknown_event")
    );
}
