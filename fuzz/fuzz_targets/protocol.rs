//! See `vino_fuzzing::protocol`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vino_fuzzing::protocol::run(data));
