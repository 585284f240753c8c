//! Fuzz the ClientHello/SNI parser used on CONNECT tunnels: no panic.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_egress::__fuzz::client_hello(data));
