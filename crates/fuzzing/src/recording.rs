//! The recording target: `vino graft replay` reads a recording file anyone may hand it. Whatever
//! the bytes, reading and replaying them must end, bounded, with a report or an error, never a
//! panic. The input's first byte picks the module it is replayed on (the one recorded, or
//! another for the same graftpoint); the rest is the recording.

use std::sync::Arc;
use vino_graft::record::Recording;
use vino_graft::replay::{ReplayOptions, replay};
use vino_graft::{Access, GraftSlot, Owner, Runtime};
use vino_toykernel::{Read, ToyComputeRa, ToyFile};

/// The recorded read-ahead graft: one extent after each read, its calls counted in memory.
pub const RECORDED: &str = vino_toykernel::NEXT_BLOCK_RA;

/// Another read-ahead graft: it loops when asked about offset 0, else asks for nothing.
pub const OTHER: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 2048))
  (func (export "toy_compute_ra") (param $off i64) (param $len i32) (param $size i64) (result i32)
    (if (i64.eqz (local.get $off)) (then (loop (br 0))))
    (i32.const 0)))"#;

pub fn run(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(recording) = Recording::from_bytes(rest) else {
        return;
    };
    let module = if which % 2 == 0 { RECORDED } else { OTHER };
    if let Ok(report) = replay(&recording, module.as_bytes(), ReplayOptions::default()) {
        assert!(report.matched <= report.invocations, "{report:?}");
    }
}

/// A recording of [`RECORDED`] over `reads` reads (a seed of the target).
pub fn recorded(reads: u64) -> Vec<u8> {
    let runtime = Runtime::default();
    let slot = GraftSlot::<ToyComputeRa>::new(&runtime, Arc::new(ToyFile::new(1 << 20)), Access::Process(1), None);
    slot.load(RECORDED.as_bytes(), Owner::process(1))
        .expect("the seed graft loads");
    slot.record_start(1 << 20).expect("recording starts");
    for i in 0..reads {
        slot.invoke(&Read {
            offset: i * 8192,
            len: 4096,
        });
    }
    slot.record_stop().expect("a recording").to_bytes()
}
