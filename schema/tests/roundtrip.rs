//! Property tests: the parsers return, never panic, on arbitrary input.
//! (The round trip of generated models is a unit test, `src/roundtrip.rs`.)

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use palisade_schema::expr::Template;
use palisade_schema::{parse_bundle, parse_fragment, parse_workflow};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parsers_return_on_arbitrary_text(text in "\\PC{0,300}") {
        let _ = parse_workflow("a.yml", &text);
        let _ = parse_fragment("a.yml", &text);
        let _ = palisade_schema::expr::parse(&text);
        let _ = Template::parse(&text);
        let _ = parse_bundle(&[(".paseo/hub.yml", text.as_bytes()), (".paseo/workflows/a.yml", text.as_bytes())]);
    }

    #[test]
    fn parsers_return_on_yaml_like_text(text in "[a-z:\\-\\[\\]{}\n &*!|>'\"#$.,?%@`\t0-9]{0,300}") {
        let _ = parse_workflow("a.yml", &text);
        let _ = parse_fragment("a.yml", &text);
        let _ = Template::parse(&text);
    }

    #[test]
    fn parsers_return_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        palisade_schema::__fuzz::parse_any(&bytes);
        let _ = palisade_schema::parse_workflow_bytes("a.yml", &bytes);
    }
}
