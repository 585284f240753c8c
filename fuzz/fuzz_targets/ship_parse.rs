//! Arbitrary bytes into the shipping parsers (a collector's file, one
//! RFC 5424 message, RELP frames) and central verification: no panic,
//! bounded memory, records survive re-encoding.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_evidence::__fuzz::ship_parse(data));
