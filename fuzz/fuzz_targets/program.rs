//! See `vino_fuzzing::program`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vino_fuzzing::program::run(data));
