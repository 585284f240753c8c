//! Fuzz the report-status reader: the same statuses whole and in pieces, and a refusal reads back ref for ref without a forged line.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_egress::__fuzz::git_report(data));
