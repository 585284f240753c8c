//! Fuzz target: hub workflows, bundles, fragments, expressions and provider
//! options never panic on arbitrary bytes.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_schema::__fuzz::parse_any(data));
