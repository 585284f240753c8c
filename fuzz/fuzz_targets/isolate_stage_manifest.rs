//! Fuzz the stage manifest reader of `palisade-isolate` (the
//! `manifest.json` a kept stage is reopened from by `palisade commit`).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| palisade_isolate::__fuzz::stage_manifest(data));
