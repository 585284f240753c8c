//! Fuzz host patterns and request hosts: no panic, normalisation idempotent, `*.d` never matches `d`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_schema::host_policy::__fuzz::host_pattern(data));
