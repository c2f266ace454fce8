//! A `vas.pick_victim` candidate in shadow on a ghost of the process's pages: its would-be
//! misses are the misses it has when then bound for real, the live policy goes on as before,
//! and a candidate that loops, traps or is fed faster than it decides is dropped or counted,
//! never in the live path's way.

mod common;

use common::{file, setup};
use vino_blockdev::BLOCK_SIZE;
use vino_cache::{IoCtx, PageCache};
use vino_graft::Owner;

const BS: u64 = BLOCK_SIZE as u64;
const FRAMES: usize = 64;
const BLOCKS: u64 = 96;

/// Evicts the most recently used page of the first page of candidates: it keeps the pages of a
/// loop larger than the cache that LRU loses every time.
const NEWEST_OF_FIRST_PAGE: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 0))
  (func (export "vas_pick_victim") (param $n i32) (result i32)
    (i32.sub (local.get $n) (i32.const 1))))"#;

const LOOPS: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 0))
  (func (export "vas_pick_victim") (param $n i32) (result i32) (loop (br 0)) (i32.const 0)))"#;

const TRAPS: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 0))
  (func (export "vas_pick_victim") (param $n i32) (result i32) unreachable))"#;

/// Process 1 reads blocks 0..BLOCKS of its file in a loop, `rounds` times, then the blocks of a
/// stride pattern: the page accesses the tests follow.
fn workload(cache: &PageCache, rounds: u64) {
    let f = file(0, BLOCKS);
    let mut buf = vec![0u8; BLOCK_SIZE];
    let ctx = IoCtx::new(1);
    for _ in 0..rounds {
        for b in 0..BLOCKS {
            cache.read(&ctx, 1, &f, b * BS, &mut buf).unwrap();
        }
    }
    for k in 0..300u64 {
        let b = (k * 37) % BLOCKS;
        cache.read(&ctx, 1, &f, b * BS, &mut buf).unwrap();
    }
}

#[test]
fn would_be_misses_are_the_misses_the_candidate_has_when_bound() {
    // In shadow beside LRU.
    let s = setup(FRAMES, BLOCKS + 16);
    s.cache.register_process(1);
    let shadow = s
        .cache
        .try_victim(1, NEWEST_OF_FIRST_PAGE.as_bytes(), Owner::process(1), 1, 1 << 16)
        .unwrap();
    workload(&s.cache, 5);
    let live = s.cache.process_counters(1);
    let report = s.cache.try_victim_stop(1).unwrap();
    assert_eq!(report, shadow.report(), "stopping twice gives the same");
    assert_eq!(report.queue_drops, 0);
    assert_eq!(report.live_misses, live.misses, "the ghost saw every access");
    assert!(report.decisions > 0 && report.failures == 0, "{report:?}");
    // LRU loses a loop larger than the cache every time; the candidate would not.
    assert!(report.would_be_misses * 3 < report.live_misses * 2, "{report:?}");

    // The candidate bound for real, on the same accesses.
    let s = setup(FRAMES, BLOCKS + 16);
    let slot = s.cache.register_process(1);
    slot.load(NEWEST_OF_FIRST_PAGE.as_bytes(), Owner::process(1)).unwrap();
    workload(&s.cache, 5);
    let bound = s.cache.process_counters(1).misses;
    let (a, b) = (report.would_be_misses as f64, bound as f64);
    assert!((a - b).abs() <= 0.02 * b, "would-be {a} against {b} bound");
}

#[test]
fn the_live_policy_is_the_same_with_a_shadow_beside_it() {
    let plain = setup(FRAMES, BLOCKS + 16);
    workload(&plain.cache, 3);
    let s = setup(FRAMES, BLOCKS + 16);
    s.cache
        .try_victim(1, NEWEST_OF_FIRST_PAGE.as_bytes(), Owner::process(1), 1, 1 << 16)
        .unwrap();
    workload(&s.cache, 3);
    s.cache.try_victim_stop(1).unwrap();
    assert_eq!(plain.cache.process_counters(1), s.cache.process_counters(1));
}

#[test]
fn a_candidate_that_loops_or_traps_is_dropped_and_the_live_path_goes_on() {
    for (name, wat) in [("loops", LOOPS), ("traps", TRAPS)] {
        let s = setup(FRAMES, BLOCKS + 16);
        s.cache
            .try_victim(1, wat.as_bytes(), Owner::process(1), 1, 1 << 16)
            .unwrap();
        workload(&s.cache, 2);
        let report = s.cache.try_victim_stop(1).unwrap();
        assert!(report.dropped.is_some(), "{name}: {report:?}");
        assert!(report.failures >= 8, "{name}: {report:?}");
        // The ghost went on with the default's choices: LRU's misses.
        assert_eq!(report.would_be_misses, report.live_misses, "{name}");
    }
}

#[test]
fn a_shadow_fed_faster_than_it_drains_counts_what_it_dropped() {
    let s = setup(FRAMES, BLOCKS + 16);
    s.cache
        .try_victim(1, LOOPS.as_bytes(), Owner::process(1), 1, 4)
        .unwrap();
    workload(&s.cache, 3);
    let report = s.cache.try_victim_stop(1).unwrap();
    assert!(report.queue_drops > 0, "{report:?}");
    assert_eq!(report.accesses + report.queue_drops, 3 * BLOCKS + 300);
}

#[test]
fn a_sampled_shadow_follows_a_fraction_of_the_pages() {
    let s = setup(FRAMES, BLOCKS + 16);
    s.cache
        .try_victim(1, NEWEST_OF_FIRST_PAGE.as_bytes(), Owner::process(1), 4, 1 << 16)
        .unwrap();
    workload(&s.cache, 5);
    let report = s.cache.try_victim_stop(1).unwrap();
    assert_eq!(report.sample, 4);
    assert!(report.accesses > 0 && report.accesses < 5 * BLOCKS + 300, "{report:?}");
}
