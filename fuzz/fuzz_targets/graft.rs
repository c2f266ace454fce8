//! See `vino_fuzzing::graft`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vino_fuzzing::graft::run(data));
