//! A candidate tried in shadow at `vas.pick_victim` sees a program memory's evictions too: the
//! pager's candidates and its live choice, judged by agreement and where each would have taken
//! its victim (there is no ghost: the pager sees faults, not accesses).

mod common;

use vino_kernel::account::LimitsConfig;
use vino_kernel::graft_try::{TryOptions, TryReport};
use vino_kernel::memory::PAGE_SIZE;
use vino_kernel::{Credentials, Resource};

/// Takes the last candidate offered (the pager's warmest), where the default takes the first.
const NEWEST: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 0))
  (func (export "vas_pick_victim") (param $n i32) (result i32) (i32.sub (local.get $n) (i32.const 1))))"#;

#[test]
fn a_victim_candidate_is_offered_program_memorys_evictions() {
    const PAGES: usize = 32;
    let mut limits = LimitsConfig::default();
    limits
        .process
        .set(Resource::ResidentBytes, (PAGES / 4 * PAGE_SIZE) as u64);
    let k = common::small_kernel(8192, limits);
    let p = k.spawn(Credentials::root());
    p.graft_try_start(None, "vas.pick_victim", NEWEST.as_bytes(), TryOptions::default())
        .unwrap();
    let memory = p
        .create_memory(PAGES * PAGE_SIZE, 64 * PAGE_SIZE, 16 * PAGE_SIZE)
        .unwrap();
    if !memory.is_paged() {
        eprintln!("skipped: no userfaultfd here, the memory is Linux's to page");
        return;
    }
    for round in 0..3u8 {
        for page in 0..PAGES {
            assert!(memory.write_byte(page * PAGE_SIZE, round + 1));
            k.settle_memory();
        }
    }
    for page in 0..PAGES {
        assert_eq!(
            memory.read_byte(page * PAGE_SIZE),
            Some(3),
            "the live path kept every page"
        );
        k.settle_memory();
    }
    let TryReport::Victim(r) = p.graft_try_stop(None, "vas.pick_victim").unwrap() else {
        panic!("not a victim report");
    };
    assert!(r.memory_decisions > 0, "{r:?}");
    assert_eq!(r.shadow.failures, 0, "{r:?}");
    assert_eq!(r.memory_live_index, 0.0, "the default takes the coldest: {r:?}");
    assert!(
        r.memory_candidate_index > 0.0 && r.memory_agreed < r.memory_decisions,
        "{r:?}"
    );
    drop(memory);
    k.exit(p.pid());
    assert_eq!(k.accounts().total().used(Resource::GraftMemory), 0);
}
