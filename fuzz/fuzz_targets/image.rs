//! See `vino_fuzzing::image`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vino_fuzzing::image::run(data));
