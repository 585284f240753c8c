//! Fuzz the pack scanner: no panic, bounded, the same commits and result whole and in pieces.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_egress::__fuzz::git_pack(data));
