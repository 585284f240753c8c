//! Fuzz the egress proxy's chunked request-body framer: no panic, bounded
//! work, the same end whether the bytes arrive whole or in two pieces.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_egress::__fuzz::chunked_body(data));
