//! Fuzz target: trigger documents and `.paseo/triggers/` directories never
//! panic on arbitrary bytes, against every Hub release.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_schema::trigger::__fuzz::parse(data));
