//! Fuzz the `palisade.toml` parser: it must never panic or hang.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_schema::host_policy::__fuzz::parse(data));
