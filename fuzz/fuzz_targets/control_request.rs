//! Fuzz the control-channel request and response parsers (round trip on success).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_egress::control::__fuzz::control_request(data));
