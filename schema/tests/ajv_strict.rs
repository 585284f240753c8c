//! `output_schema::check` against ajv 8.20.0 itself: `data/ajv/strict.jsonl`
//! holds each schema of `data/ajv/cases.jsonl` with the verdict and message
//! of the Hub's compile (`new Ajv({allErrors: true, strict: true})`),
//! produced by `data/ajv/generate.js`. Verdicts must agree; messages must be
//! ajv's, except a regular-expression syntax error, whose detail after
//! `/pattern/u: ` is regress's wording rather than V8's.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "tests read fixture files"
)]

use palisade_schema::output_schema::check;

#[test]
fn check_agrees_with_ajv_strict_mode() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ajv/strict.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    let mut wrong = Vec::new();
    let mut cases = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        cases += 1;
        let ours = check(&v["schema"]);
        let ajv_ok = v["ok"].as_bool().unwrap();
        match (&ours, ajv_ok) {
            (Ok(()), true) => {}
            (Err(e), false) => {
                let theirs = v["message"].as_str().unwrap();
                let same = if theirs.starts_with("Invalid regular expression: ") {
                    let cut = |m: &str| {
                        m.rfind("/u: ")
                            .or_else(|| m.rfind("/: "))
                            .map(|i| m[..i].to_owned())
                    };
                    cut(theirs).is_some() && cut(theirs) == cut(&e.message)
                } else {
                    e.message == theirs
                };
                if !same {
                    wrong.push(format!(
                        "{}: message\n  ajv:  {theirs}\n  ours: {}",
                        v["schema"], e.message
                    ));
                }
            }
            (Ok(()), false) => wrong.push(format!(
                "{}: ajv refuses ({}), palisade accepts",
                v["schema"], v["message"]
            )),
            (Err(e), true) => wrong.push(format!(
                "{}: ajv accepts, palisade refuses: {}",
                v["schema"], e.message
            )),
        }
    }
    assert!(cases > 500, "only {cases} cases");
    assert!(
        wrong.is_empty(),
        "{} of {cases} disagree:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
