//! The recording target: `vino graft replay` reads a recording file anyone may hand it. Whatever
//! the bytes, reading and replaying them must end, bounded, with a report or an error, never a
//! panic. The input's first byte picks the module it is replayed on (the one recorded, or
//! another for the same graftpoint), and whether the recording is also taken for one at
//! `vas.pick_victim` and another module run on the ghost of its page accesses
//! (`vino_cache::victim_replayed`: accesses, owner writes and control calls from anyone); the
//! rest is the recording.

use std::sync::Arc;
use vino_graft::record::{Event, Recording};
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
    if which & 2 != 0 {
        let mut at_victim = recording;
        at_victim.header.point = "vas.pick_victim".into();
        if let Ok(r) = vino_cache::victim_replayed(&at_victim, VICTIM.as_bytes()) {
            let accesses = at_victim
                .events
                .iter()
                .filter(|e| matches!(e, Event::Access { .. }))
                .count() as u64;
            assert_eq!(r.accesses, accesses, "{r:?}");
            assert!(r.would_be_misses <= r.accesses && r.live_misses <= r.accesses, "{r:?}");
        }
    }
}

/// A `vas.pick_victim` module for the ghost: the newest of the first page, unless its owner
/// wrote a nonzero byte at its `plan` (past the argument area), then the oldest.
pub const VICTIM: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 0))
  (global (export "plan") i32 (i32.const 8192))
  (func (export "vas_pick_victim") (param $n i32) (result i32)
    (if (result i32) (i32.load8_u (i32.const 8192))
      (then (i32.const 0))
      (else (i32.sub (local.get $n) (i32.const 1))))))"#;

/// [`recorded`] with page accesses among its events, as a `vas.pick_victim` recording holds
/// them: a loop over `pages` pages, `resident` of them resident (a seed for the ghost).
pub fn with_accesses(reads: u64, pages: u64, resident: u32) -> Vec<u8> {
    let mut rec = Recording::from_bytes(&recorded(reads)).expect("a recording");
    let mut events = Vec::new();
    for (i, e) in rec.events.into_iter().enumerate() {
        let page = i as u64 % pages.max(1);
        events.push(Event::Access {
            page,
            hit: page < u64::from(resident),
            resident,
        });
        events.push(e);
    }
    events.push(Event::Write {
        offset: 8192,
        bytes: vec![1],
    });
    events.extend((0..pages).map(|page| Event::Access {
        page,
        hit: false,
        resident,
    }));
    rec.events = events;
    rec.to_bytes()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_with_accesses_runs_on_the_ghost() {
        let mut rec = Recording::from_bytes(&with_accesses(20, 64, 16)).unwrap();
        rec.header.point = "vas.pick_victim".into();
        let r = vino_cache::victim_replayed(&rec, VICTIM.as_bytes()).unwrap();
        assert!(r.accesses > 64 && r.shadow.decisions > 0, "{r:?}");
    }
}
