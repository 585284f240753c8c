//! Fuzz the relay's provider-side tool-result scanner: no panic, bounded
//! state, the same results whether the body arrives whole or in pieces.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_egress::__fuzz::tool_results(data));
