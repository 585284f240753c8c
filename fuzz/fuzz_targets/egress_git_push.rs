//! Fuzz a receive-pack push head: no panic, a complete head reads the same from exactly its bytes, shorter prefixes want more.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_egress::__fuzz::git_push(data));
