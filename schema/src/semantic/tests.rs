//! Finite-choice analysis and expression paths, each rule with its
//! positive control.

use crate::parse_workflow_bytes;

/// A workflow whose second step's `environment` is `env` (a YAML scalar as
/// written), with trigger `inputs` (YAML lines at six spaces) and the
/// first step's output schema `schema` (a flow mapping).
fn workflow(env: &str, inputs: &str, schema: &str) -> String {
    format!(
        "environments:
  - {{name: dev, kind: daemon, daemon: laptop, cwd: /src}}
  - {{name: dev-eu, kind: daemon, daemon: laptop, cwd: /src}}
triggers:
  - name: review
    'on': manual.run
    max_runtime: 1h
    filters:
      from_users: [automation]
    inputs:
{inputs}
    steps:
      - id: classify
        environment: dev
        max_runtime: 30m
        idle_timeout: 5m
        agent: {{provider: codex, options: {{approval_policy: never, sandbox_mode: read-only}}}}
        prompt: [{{text: classify}}]
        output:
          schema: {schema}
      - id: review
        environment: {env}
        max_runtime: 30m
        idle_timeout: 5m
        agent: {{provider: codex, options: {{approval_policy: never, sandbox_mode: read-only}}}}
        prompt: [{{text: review}}]
"
    )
}

const OPTIONAL: &str = "      where: {type: string, choices: [dev]}";
const SCHEMA: &str = "{type: object, properties: {env: {type: string, enum: [dev]}}, required: [env], additionalProperties: false}";

/// The error codes palisade reports.
fn codes(text: &str) -> Vec<&'static str> {
    match parse_workflow_bytes("t.yml", text.as_bytes()) {
        Ok(_) => Vec::new(),
        Err(d) => d
            .into_vec()
            .into_iter()
            .filter(crate::Diagnostic::is_error)
            .map(|d| d.code)
            .collect(),
    }
}

fn env(expr: &str, inputs: &str) -> Vec<&'static str> {
    codes(&workflow(expr, inputs, SCHEMA))
}

#[test]
fn coalesce_or_and_evaluate_as_javascript() {
    assert_eq!(env("${{ paseo.inputs.where ?? 'dev' }}", OPTIONAL), [""; 0]);
    assert_eq!(env("${{ paseo.inputs.where || 'dev' }}", OPTIONAL), [""; 0]);
    // Controls: an optional input alone may be null, and the fallback must
    // be an environment too.
    assert_eq!(
        env("${{ paseo.inputs.where }}", OPTIONAL),
        ["invalid_value"]
    );
    assert_eq!(
        env("${{ paseo.inputs.where ?? 'nope' }}", OPTIONAL),
        ["unknown_environment"]
    );
    // `??` keeps a falsy non-null value, `||` does not.
    let empty = "      where: {type: string, required: true, choices: ['', dev]}";
    assert_eq!(env("${{ paseo.inputs.where || 'dev' }}", empty), [""; 0]);
    assert_eq!(
        env("${{ paseo.inputs.where ?? 'dev' }}", empty),
        ["unknown_environment"]
    );
    let flag = |choices: &str| {
        format!("      flag: {{type: boolean, required: true, choices: {choices}}}")
    };
    assert_eq!(
        env("${{ paseo.inputs.flag && 'dev' }}", &flag("[true]")),
        [""; 0]
    );
    assert_eq!(
        env("${{ paseo.inputs.flag && 'dev' }}", &flag("[true, false]")),
        ["invalid_value"]
    );
    // `!` and `==` yield booleans from their operands' values.
    assert_eq!(
        env("${{ !paseo.inputs.flag && 'dev' }}", &flag("[false]")),
        [""; 0]
    );
    assert_eq!(
        env("${{ paseo.inputs.flag == true && 'dev' }}", &flag("[true]")),
        [""; 0]
    );
    assert_eq!(
        env("${{ paseo.inputs.flag != true && 'dev' }}", &flag("[true]")),
        ["invalid_value"]
    );
}

#[test]
fn text_around_expressions_concatenates() {
    let region = |choices: &str| {
        format!("      region: {{type: string, required: true, choices: {choices}}}")
    };
    assert_eq!(
        env("dev${{ paseo.inputs.region }}", &region("['', '-eu']")),
        [""; 0]
    );
    assert_eq!(
        env("dev${{ paseo.inputs.region }}", &region("['', '-us']")),
        ["unknown_environment"]
    );
    // Interpolated as JSON.stringify: a number 1.0 is `1`.
    let n = "      n: {type: number, required: true, choices: [1.0]}";
    assert_eq!(env("dev${{ paseo.inputs.n }}", n), ["unknown_environment"]);
    // Whitespace around one expression is text too, as in the Hub.
    assert_eq!(env("\" ${{ 'dev' }}\"", OPTIONAL), ["unknown_environment"]);
    assert_eq!(env("\"${{ 'dev' }}\"", OPTIONAL), [""; 0]);
}

#[test]
fn null_literals_are_no_authority() {
    assert_eq!(
        env("${{ (paseo.inputs.where ?? null) ?? 'dev' }}", OPTIONAL),
        ["non_finite_authority"]
    );
    // Under `==` a null literal is fine: the result is a boolean.
    let flag = "      flag: {type: boolean, required: true, choices: [true]}";
    assert_eq!(
        env("${{ (paseo.inputs.flag == null || 'dev') }}", flag),
        [""; 0]
    );
}

#[test]
fn step_outputs_are_finite_only_by_enum_or_const_under_properties() {
    let with = |schema: &str| {
        codes(&workflow(
            "${{ steps.classify.outputs.env }}",
            OPTIONAL,
            schema,
        ))
    };
    assert_eq!(with(SCHEMA), [""; 0]);
    assert_eq!(
        with("{type: object, properties: {env: {const: dev}}}"),
        [""; 0]
    );
    assert_eq!(
        with("{type: object, properties: {env: {$ref: '#/$defs/e'}}, $defs: {e: {enum: [dev]}}}"),
        [""; 0]
    );
    // The Hub finds no choices through additionalProperties, nor in a bare
    // boolean type.
    assert_eq!(
        with("{type: object, additionalProperties: {type: string, enum: [dev]}}"),
        ["non_finite_authority"]
    );
    assert_eq!(
        with("{type: object, properties: {env: {type: string}}}"),
        ["non_finite_authority"]
    );
}

#[test]
fn enumeration_is_bounded() {
    let many = |n: usize| {
        let list: Vec<String> = (0..n).map(|i| format!("'v{i}'")).collect();
        format!(
            "      a: {{type: string, required: true, choices: [{l}]}}\n      b: {{type: string, required: true, choices: [{l}]}}",
            l = list.join(", ")
        )
    };
    assert_eq!(
        env("${{ paseo.inputs.a }}${{ paseo.inputs.b }}", &many(100)),
        ["choice_limit_exceeded"]
    );
    assert_eq!(
        env("${{ paseo.inputs.a || paseo.inputs.b }}", &many(100)),
        ["non_finite_authority"]
    );
    // Control: a small product is enumerated (and checked name by name).
    let small = "      a: {type: string, required: true, choices: [de]}\n      b: {type: string, required: true, choices: [v]}";
    assert_eq!(
        env("${{ paseo.inputs.a }}${{ paseo.inputs.b }}", small),
        [""; 0]
    );
}

#[test]
fn step_output_paths_need_a_field() {
    let base = workflow("dev", OPTIONAL, SCHEMA);
    let with_if = |cond: &str| {
        base.replace(
            "        prompt: [{text: review}]",
            &format!("        prompt: [{{text: review}}]\n        if: {cond}"),
        )
    };
    assert_eq!(
        codes(&with_if("steps.classify.outputs")),
        ["unsupported_path"]
    );
    assert_eq!(codes(&with_if("hello")), ["unsupported_path"]);
    assert_eq!(
        codes(&with_if("steps.classify.outputs.env == 'dev'")),
        [""; 0]
    );
    assert_eq!(
        codes(&with_if("${{ steps.classify.outputs.env == 'dev' }}")),
        [""; 0]
    );
    assert_eq!(codes(&with_if("\"x ${{ true }}\"")), ["invalid_expression"]);
}

/// The errors palisade reports, as `code: message`.
fn messages(text: &str) -> Vec<String> {
    match parse_workflow_bytes("t.yml", text.as_bytes()) {
        Ok(_) => Vec::new(),
        Err(d) => d
            .into_vec()
            .into_iter()
            .filter(crate::Diagnostic::is_error)
            .map(|d| format!("{}: {}", d.code, d.message))
            .collect(),
    }
}

#[test]
fn dates_are_not_strings() {
    let base = workflow("dev", OPTIONAL, SCHEMA);
    let cwd = base.replace("cwd: /src}", "cwd: 2024-01-01}");
    assert_eq!(
        messages(&cwd),
        ["invalid_type: Invalid input: expected string, received Date"; 2]
    );
    let choices = base.replace("choices: [dev]}", "choices: [dev, 2024-01-01]}");
    assert_eq!(codes(&choices).len(), 1, "{:?}", messages(&choices));
    let prompt = base.replace("[{text: review}]", "[{text: 2024-01-01}]");
    assert_eq!(
        messages(&prompt),
        ["invalid_type: Invalid input: expected string, received Date"]
    );
    // Positive controls: quoted, or not a js-yaml timestamp, it is text.
    assert_eq!(
        codes(&base.replace("[{text: review}]", "[{text: '2024-01-01'}]")),
        [""; 0]
    );
    assert_eq!(
        codes(&base.replace("[{text: review}]", "[{text: 2024-1-1}]")),
        [""; 0]
    );
}

#[test]
fn merge_keys_and_number_forms_reach_the_model() {
    let base = workflow("dev", OPTIONAL, SCHEMA);
    // An environment through a merge key, with an explicit override.
    let merged = base.replace(
        "  - {name: dev-eu, kind: daemon, daemon: laptop, cwd: /src}",
        "  - &eu {name: dev-eu, kind: daemon, daemon: laptop, cwd: /src}\n  - {<<: *eu, name: dev-us}",
    );
    assert_eq!(codes(&merged), [""; 0]);
    let parsed = parse_workflow_bytes("t.yml", merged.as_bytes()).unwrap();
    let names: Vec<&str> = parsed
        .value()
        .environments
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(names, ["dev", "dev-eu", "dev-us"]);
    // Control: without the override the merged name repeats.
    let dup = merged.replace("{<<: *eu, name: dev-us}", "{<<: *eu}");
    assert_eq!(codes(&dup), ["duplicate_id"]);
    // `max: 3.0` and `3e0` are the integer 3, `1_000` is 1000.
    for max in ["3.0", "3e0", "1_000", "0x3"] {
        let text = base.replace(
            "        prompt: [{text: review}]",
            &format!("        prompt: [{{text: review}}]\n        allow_outputs: [{{type: slack.reply, max: {max}}}]"),
        );
        assert_eq!(codes(&text), [""; 0], "{max}: {:?}", messages(&text));
    }
    // Control: a fractional max is no integer.
    let text = base.replace(
        "        prompt: [{text: review}]",
        "        prompt: [{text: review}]\n        allow_outputs: [{type: slack.reply, max: 2.5}]",
    );
    assert_eq!(codes(&text), ["invalid_type"]);
}
