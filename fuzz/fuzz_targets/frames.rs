//! See `vino_fuzzing::frames`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vino_fuzzing::frames::run(data));
