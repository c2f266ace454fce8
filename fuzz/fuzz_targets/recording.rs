//! See `vino_fuzzing::recording`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vino_fuzzing::recording::run(data));
