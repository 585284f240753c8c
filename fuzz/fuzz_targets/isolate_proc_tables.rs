//! Fuzz the kernel-table parsers of `palisade-isolate` (mountinfo,
//! /proc/net/unix) and the setup error-pipe record decoder.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_isolate::__fuzz::proc_tables(data));
