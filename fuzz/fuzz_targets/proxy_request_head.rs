//! Fuzz the egress proxy's request-head parser: no panic, bounded work.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_egress::__fuzz::request_head(data));
