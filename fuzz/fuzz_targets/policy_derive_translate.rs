//! Derive + translate on arbitrary workflows (and arbitrary JSON provider options).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_policy::__fuzz::derive_translate(data));
