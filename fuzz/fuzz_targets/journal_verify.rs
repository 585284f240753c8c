//! Arbitrary bytes into the journal verifier: no panic, bounded memory.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_evidence::__fuzz::verify_bytes(data));
