//! The parsing API as an embedder sees it: one `(file, text)` order, a
//! `Result<Parsed<T>, Diagnostics>` from every parser, diagnostics that are
//! `std::error::Error`, the public renderer (byte for byte what `palisade
//! check` printed before it moved here), and provider options validated
//! from JSON exactly as from YAML.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "tests read their data files"
)]

use palisade_schema::render::Renderer;
use palisade_schema::{Diagnostic, Diagnostics, Path, host_policy, options, parse_fragment};
use serde_json::json;

fn data(rel: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/data/{rel}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn every_parser_takes_the_file_name_first() {
    // A swapped order would name the file after the text.
    let bad = "[worker]\nbogus = 1\n";
    let d = host_policy::parse("p.toml", bad).unwrap_err();
    assert_eq!(d.first().file, "p.toml");
    let d = palisade_schema::parse_workflow("w.yml", "triggers: 1\n").unwrap_err();
    assert_eq!(d.first().file, "w.yml");
    let d = palisade_schema::parse_workflow_bytes("w.yml", b"a: \xff\n").unwrap_err();
    assert_eq!(
        (d.first().file.as_str(), d.first().code),
        ("w.yml", "invalid_utf8")
    );
    let d = parse_fragment("f.yml", "nope: 1\n").unwrap_err();
    assert_eq!(d.first().file, "f.yml");
    let d = palisade_schema::yaml::parse("y.yml", "a: [\n").unwrap_err();
    assert_eq!(d.first().file, "y.yml");
    let node = palisade_schema::yaml::parse("o.yml", "cwd: /x\n")
        .unwrap()
        .into_value();
    let d = options::validate("o.yml", "codex", &node, &Path::root()).unwrap_err();
    assert_eq!(d.first().file, "o.yml");
    // Positive control: the same parsers accept good input.
    assert!(host_policy::parse("p.toml", "[worker]\n").is_ok());
    assert!(parse_fragment("f.yml", "filters: {pattern: \"!go\"}\n").is_ok());
    let node = palisade_schema::yaml::parse("o.yml", "sandbox_mode: read-only\n")
        .unwrap()
        .into_value();
    assert!(options::validate("o.yml", "codex", &node, &Path::root()).is_ok());
}

#[test]
fn refused_input_lists_errors_first_and_is_an_error() {
    // A lint (warning) before the error in the file.
    let text =
        "[egress]\nallow = [\"a.example.com\"]\ndeny = [\"*.example.com\"]\n[worker]\nbogus = 1\n";
    let refused = host_policy::parse("p.toml", text).unwrap_err();
    assert!(refused.warning_count() >= 1, "{refused:#?}");
    assert_eq!(refused.error_count(), 1);
    assert_eq!(
        refused.len(),
        refused.error_count() + refused.warning_count()
    );
    let severities: Vec<bool> = refused.iter().map(Diagnostic::is_error).collect();
    assert!(severities[0], "{refused:#?}");
    assert!(
        severities.windows(2).all(|w| w[0] || !w[1]),
        "no error after a warning: {refused:#?}"
    );
    assert_eq!(refused.first().code, "unknown_key");
    // Display: one line, the counts and the first error.
    let shown = refused.to_string();
    assert!(!shown.contains('\n'), "{shown}");
    assert!(
        shown.starts_with(&format!("1 error, {} warning", refused.warning_count())),
        "{shown}"
    );
    assert!(
        shown
            .ends_with("first: p.toml:5:1: error[unknown_key]: .worker.bogus: unknown key `bogus`"),
        "{shown}"
    );
    // `?` into a boxed error, and a `Diagnostic` is an error of its own.
    fn load(text: &str) -> Result<host_policy::HostPolicy, Box<dyn std::error::Error>> {
        Ok(host_policy::parse("p.toml", text)?.into_value())
    }
    assert_eq!(load(text).unwrap_err().to_string(), shown);
    let one: &dyn std::error::Error = refused.first();
    assert_eq!(
        one.to_string(),
        "p.toml:5:1: error[unknown_key]: .worker.bogus: unknown key `bogus`"
    );
    // Positive control: the same warnings without the error are a policy.
    let parsed = host_policy::parse("p.toml", &text.replace("bogus = 1\n", "")).unwrap();
    assert_eq!(parsed.warnings().len(), refused.warning_count());
    assert!(parsed.warnings().iter().all(|w| !w.is_error()));
    let (policy, warnings) = parsed.clone().into_parts();
    assert_eq!(&policy, parsed.value());
    assert_eq!(warnings, parsed.warnings());
}

#[test]
fn diagnostics_iterate_by_reference_and_by_value() {
    let refused: Diagnostics = parse_fragment("f.yml", "a: 1\nb: 2\n").unwrap_err();
    let by_ref: Vec<&str> = (&refused).into_iter().map(|d| d.code).collect();
    assert_eq!(by_ref, ["unknown_key", "unknown_key"]);
    assert_eq!(refused.errors().count(), 2);
    assert_eq!(refused.warnings().count(), 0);
    assert!(
        refused
            .to_string()
            .starts_with("2 errors, 0 warnings; first: f.yml:1:1:")
    );
    let lines: Vec<u32> = refused.into_iter().map(|d| d.line).collect();
    assert_eq!(lines, [1, 2]);
}

#[test]
fn the_renderer_prints_what_palisade_check_printed() {
    // Captured from `palisade check` (NO_COLOR) while the renderer was
    // private to the CLI; since diagnostics carry their node's end, the
    // caret spans the whole node (the whole `${{ … }}` expression).
    let cases = [
        (
            "invalid/if-enum-typo.yml",
            "error[unreachable_comparison]: .triggers[0].steps[1].if: steps.classify.outputs.kind == \"anwser\" is always false: steps.classify.outputs.kind is one of \"answer\"|\"implementation\"\n  --> schema/tests/data/invalid/if-enum-typo.yml:39:13\n   |\n39 |         if: ${{ steps.classify.outputs.kind == 'anwser' }}\n   |             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        ),
        (
            "invalid/duration-compound.yml",
            "error[invalid_duration]: .triggers[0].steps[0].max_runtime: trigger t step s max_runtime must be a positive duration such as 30s or 2h (got \"1h30m\")\n  --> schema/tests/data/invalid/duration-compound.yml:14:22\n   |\n14 |         max_runtime: 1h30m\n   |                      ^^^^^\n   |\nhelp: write a whole number followed by ms, s, m or h; no decimals, zero, compound forms or days",
        ),
    ];
    for (rel, want) in cases {
        let text = data(rel);
        let name = format!("schema/tests/data/{rel}");
        let refused = palisade_schema::parse_workflow(&name, &text).unwrap_err();
        assert_eq!(refused.len(), 1, "{refused:#?}");
        assert_eq!(Renderer::new().render(refused.first(), Some(&text)), want);
    }
    // A host-policy finding with a help, captured from `palisade check
    // --policy` the same way.
    let text = "[worker]\nbogus = 1\n";
    let refused = host_policy::parse("palisade.toml", text).unwrap_err();
    assert_eq!(
        Renderer::new().render(refused.first(), Some(text)),
        "error[unknown_key]: .worker.bogus: unknown key `bogus`\n --> palisade.toml:2:1\n  |\n2 | bogus = 1\n  | ^^^^^\n  |\nhelp: expected one of: profile, cwd, writable, read_only, masks, env, limits, writes, commit, agent, agent_state"
    );
    // Without the source, a note names the place (as for a file that is
    // not UTF-8).
    let refused = palisade_schema::parse_workflow_bytes("w.yml", b"a:\n  b: \xff\n").unwrap_err();
    assert_eq!(
        Renderer::new().render(refused.first(), None),
        "error[invalid_utf8]: file is not valid UTF-8 (invalid byte at offset 8)\n |\n = note: w.yml:2:6"
    );
}

/// The same options as a YAML fragment and as JSON.
fn both(provider: &str, options: &serde_json::Value) -> (Vec<Diagnostic>, Vec<Diagnostic>) {
    let yaml = format!("agent:\n  provider: {provider}\n  options: {options}\n");
    let from_yaml = match parse_fragment("f.yml", &yaml) {
        Ok(_) => Vec::new(),
        Err(d) => d.into_vec(),
    };
    let from_json = match options::validate_json(provider, options) {
        Ok(_) => Vec::new(),
        Err(d) => d.into_vec(),
    };
    (from_yaml, from_json)
}

#[test]
fn json_options_get_the_yaml_diagnostics() {
    for (provider, bad) in [
        ("codex", json!({"cwd": "/x"})),
        ("codex", json!({"approval_policy": "on-failure"})),
        (
            "codex",
            json!({"sandbox_workspace_write": {"writable_roots": ["/a", 42]}}),
        ),
        ("claude", json!({"hooks": {}})),
        (
            "opencode",
            json!({"permission": {"bash": {"git status": "sometimes"}}}),
        ),
        ("gemini", json!({"x": 1})),
    ] {
        let (from_yaml, from_json) = both(provider, &bad);
        assert!(
            !from_json.is_empty(),
            "{provider} {bad}: accepted from JSON"
        );
        let key = |d: &Diagnostic| (d.code, d.message.clone(), d.path.to_string());
        let yaml: Vec<_> = from_yaml
            .iter()
            .map(|d| {
                let (code, message, path) = key(d);
                let inside = path
                    .strip_prefix(".agent.options")
                    .unwrap_or_else(|| panic!("{path} is outside the options"))
                    .to_owned();
                (code, message, inside)
            })
            .collect();
        let json: Vec<_> = from_json.iter().map(key).collect();
        assert_eq!(yaml, json, "{provider} {bad}");
        // JSON carries no positions.
        assert!(from_json.iter().all(|d| d.file.is_empty() && d.line == 0));
    }
    // Positive control: good options pass both ways.
    for (provider, good) in [
        (
            "codex",
            json!({"approval_policy": "never", "sandbox_mode": "read-only"}),
        ),
        ("claude", json!({"disallowedTools": ["Bash"]})),
        ("opencode", json!({"permission": {"bash": {"*": "ask"}}})),
    ] {
        let (from_yaml, from_json) = both(provider, &good);
        assert!(from_yaml.is_empty(), "{from_yaml:#?}");
        assert!(from_json.is_empty(), "{from_json:#?}");
    }
}

#[test]
fn json_options_nested_past_the_yaml_limit_are_refused() {
    let mut deep = json!("x");
    for _ in 0..palisade_schema::yaml::MAX_DEPTH {
        deep = json!({ "a": deep });
    }
    let refused = options::validate_json("codex", &json!({ "features": deep })).unwrap_err();
    assert_eq!(refused.first().code, "yaml_limit_exceeded");
    // Positive control: just within the limit it is checked, not refused
    // for depth.
    let mut shallow = json!("x");
    for _ in 0..(palisade_schema::yaml::MAX_DEPTH - 2) {
        shallow = json!({ "a": shallow });
    }
    let refused = options::validate_json("codex", &json!({ "features": shallow })).unwrap_err();
    assert_eq!(refused.first().code, "unknown_key");
}
