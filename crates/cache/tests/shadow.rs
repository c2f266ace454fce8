//! Candidates in shadow (`vino graft try`). A `vas.pick_victim` candidate on a ghost of the
//! process's pages: its would-be misses are the misses it has when then bound for real, the
//! live policy goes on as before, and a candidate that loops, traps or is fed faster than it
//! decides is dropped or counted, never in the live path's way. A `file.compute_ra` candidate
//! on ghost caches of the file: the would-be hits, waste and misses of its read-ahead beside the
//! live policy's.

mod common;

use common::{file, setup};
use vino_blockdev::BLOCK_SIZE;
use vino_cache::{IoCtx, PageCache, ReadAhead};
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
    assert_eq!(report.shadow.queue_drops, 0);
    assert_eq!(report.live_misses, live.misses, "the ghost saw every access");
    assert!(report.shadow.decisions > 0 && report.shadow.failures == 0, "{report:?}");
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
fn a_shadow_s_queue_is_charged_to_its_owner_while_it_runs() {
    let s = setup(FRAMES, BLOCKS + 16);
    let account = vino_graft::account::Account::standalone("owner", vino_graft::account::Table::UNLIMITED);
    let owner = Owner {
        account: Some(account.clone()),
        ..Owner::process(1)
    };
    let memory = vino_graft::account::Resource::GraftMemory;
    s.cache
        .try_victim(1, NEWEST_OF_FIRST_PAGE.as_bytes(), owner, 1, 1024)
        .unwrap();
    assert!(account.used(memory) >= 1024 * 16, "the queue's room is charged");
    workload(&s.cache, 1);
    s.cache.try_victim_stop(1).unwrap();
    assert_eq!(account.used(memory), 0, "all refunded at the stop");
    // An owner that cannot pay for the queue is refused, and nothing is left charged.
    let poor =
        vino_graft::account::Account::standalone("poor", vino_graft::account::Table::UNLIMITED.with(memory, 4096));
    let owner = Owner {
        account: Some(poor.clone()),
        ..Owner::process(1)
    };
    assert!(
        s.cache
            .try_victim(1, NEWEST_OF_FIRST_PAGE.as_bytes(), owner, 1, 1 << 16)
            .is_err()
    );
    assert_eq!(poor.used(memory), 0);
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
        assert!(report.shadow.dropped.is_some(), "{name}: {report:?}");
        assert!(report.shadow.failures >= 8, "{name}: {report:?}");
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
    assert!(report.shadow.queue_drops > 0, "{report:?}");
    assert_eq!(report.accesses + report.shadow.queue_drops, 3 * BLOCKS + 300);
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

/// Read-ahead that asks for the block `stride` blocks after each read, as `vino_prefetch`
/// would be asked, through the extents it returns.
fn strided_ra(stride: u64) -> String {
    format!(
        r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "file_compute_ra") (param $off i64) (param $len i32) (param $size i64) (result i32)
    (local $next i64)
    (local.set $next (i64.add (local.get $off) (i64.const {})))
    (if (i64.gt_u (i64.add (local.get $next) (i64.const 4096)) (local.get $size)) (then (return (i32.const 0))))
    (i64.store (i32.const 1024) (local.get $next))
    (i64.store (i32.const 1032) (i64.const 4096))
    (i32.const 1)))"#,
        stride * BS
    )
}

/// Reads every `stride`th block of a file of `blocks` blocks, in order.
fn strided_reads(s: &common::Setup, ra: &ReadAhead, blocks: u64, stride: u64) {
    let f = file(0, blocks);
    let mut buf = vec![0u8; BLOCK_SIZE];
    for b in (0..blocks).step_by(stride as usize) {
        s.cache
            .read(&IoCtx::with_read_ahead(1, ra), 1, &f, b * BS, &mut buf)
            .unwrap();
    }
}

#[test]
fn a_read_ahead_candidate_is_judged_on_the_reads_beside_the_live_policy() {
    let s = setup(FRAMES, 512);
    let ra = ReadAhead::new(&s.runtime, 1, "3");
    ra.try_start(strided_ra(4).as_bytes(), Owner::process(1), FRAMES, 1 << 16)
        .unwrap();
    strided_reads(&s, &ra, 400, 4);
    let r = ra.try_stop().unwrap();
    assert_eq!(r.reads, 100);
    // The default sees no sequential reads and reads nothing ahead: every read misses.
    assert_eq!(r.live.misses, 100);
    assert_eq!(r.live.prefetched, 0);
    // The candidate asks for each next block: all but the first read hit, nothing is wasted
    // (after the last read it asks for nothing past the end).
    assert_eq!(r.candidate.misses, 1, "{r:?}");
    assert_eq!(r.candidate.hits, 99);
    assert_eq!(r.candidate.prefetched, 99, "{r:?}");
    assert_eq!(r.candidate.used, 99);
    assert_eq!(r.candidate.wasted, 0);
    assert_eq!(r.shadow.decisions, 100);
    // A candidate that asks for the wrong blocks wastes each one.
    let ra = ReadAhead::new(&s.runtime, 1, "4");
    ra.try_start(strided_ra(2).as_bytes(), Owner::process(1), FRAMES, 1 << 16)
        .unwrap();
    strided_reads(&s, &ra, 400, 4);
    let r = ra.try_stop().unwrap();
    assert_eq!(r.candidate.used, 0);
    assert_eq!(r.candidate.wasted, r.candidate.prefetched);
    assert_eq!(r.candidate.misses, 100);
}

#[test]
fn a_read_ahead_candidate_that_loops_is_dropped() {
    let s = setup(FRAMES, 512);
    let ra = ReadAhead::new(&s.runtime, 1, "3");
    let loops = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
      (func (export "file_compute_ra") (param i64 i32 i64) (result i32) (loop (br 0)) (i32.const 0)))"#;
    ra.try_start(loops.as_bytes(), Owner::process(1), FRAMES, 1 << 16)
        .unwrap();
    strided_reads(&s, &ra, 200, 4);
    let r = ra.try_stop().unwrap();
    assert!(r.shadow.dropped.is_some() && r.shadow.failures >= 8, "{r:?}");
    assert_eq!(r.reads, 50, "the ghosts went on with the default's answers");
}

#[test]
fn the_owner_talks_to_its_candidate_in_order_with_the_live_path() {
    use vino_cache::OwnerCall;
    let s = setup(FRAMES, BLOCKS + 16);
    // Evicts the candidate its owner named last (an index into the first page), kept at `pick`.
    let named = r#"(module
      (memory (export "memory") 1)
      (global (export "vino_args") i32 (i32.const 1024))
      (global (export "pick") i32 (i32.const 64))
      (func (export "vas_pick_victim") (param $n i32) (result i32)
        (select (i32.load (i32.const 64)) (i32.const 0) (i32.lt_s (i32.load (i32.const 64)) (local.get $n))))
      (func (export "vino_ctl_pick") (result i32) (i32.load (i32.const 64))))"#;
    let shadow = s
        .cache
        .try_victim(1, named.as_bytes(), Owner::process(1), 1, 1 << 16)
        .unwrap();
    let at = shadow.owner(OwnerCall::Symbol { name: "pick".into() }).unwrap();
    assert_eq!(at, 64);
    shadow
        .owner(OwnerCall::Write {
            offset: at as u32,
            bytes: 5i32.to_le_bytes().to_vec(),
        })
        .unwrap();
    assert_eq!(
        shadow
            .owner(OwnerCall::Control {
                name: "pick".into(),
                args: vec![]
            })
            .unwrap(),
        5,
        "the write reached the candidate before the call"
    );
    // A write outside its memory is the candidate's failure, counted; the owner is not held.
    shadow
        .owner(OwnerCall::Write {
            offset: u32::MAX - 2,
            bytes: vec![1, 2, 3, 4],
        })
        .unwrap();
    workload(&s.cache, 2);
    let report = s.cache.try_victim_stop(1).unwrap();
    assert!(
        report.shadow.last_error.is_some() || report.shadow.failures > 0,
        "{report:?}"
    );
    assert!(
        shadow.owner(OwnerCall::Symbol { name: "pick".into() }).is_err(),
        "stopped"
    );
}

/// Evicts the oldest page offered: LRU, as the kernel's default.
const OLDEST: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 0))
  (func (export "vas_pick_victim") (param $n i32) (result i32) (i32.const 0)))"#;

/// LRU until its owner writes 1 into its `plan`, then the newest of the first page. `at` is
/// where `plan` is (past the argument area), so that two builds of one policy can lay their
/// data out differently.
fn planned(at: u32) -> String {
    format!(
        r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 0))
  (global (export "plan") i32 (i32.const {at}))
  (func (export "vas_pick_victim") (param $n i32) (result i32)
    (if (result i32) (i32.load8_u (i32.const {at}))
      (then (i32.sub (local.get $n) (i32.const 1)))
      (else (i32.const 0)))))"#
    )
}

/// Records `wasm` bound as process 1's `vas.pick_victim` over the workload; `write_plan` has its
/// owner write 1 into its `plan` after the first round. Charged to an account checked after.
fn recorded(wasm: &str, write_plan: bool) -> vino_graft::record::Recording {
    let s = setup(FRAMES, BLOCKS + 16);
    let account = vino_graft::account::Account::standalone("owner", vino_graft::account::Table::UNLIMITED);
    let memory = vino_graft::account::Resource::GraftMemory;
    let slot = s.cache.register_process(1);
    let owner = Owner {
        account: Some(account.clone()),
        ..Owner::process(1)
    };
    slot.load(wasm.as_bytes(), owner).unwrap();
    let loaded = account.used(memory);
    slot.record_start(4 << 20).unwrap();
    workload(&s.cache, 1);
    if write_plan {
        let at = slot.symbol_address("plan").unwrap();
        slot.write_memory(at, &[1]).unwrap();
    }
    workload(&s.cache, 4);
    assert!(
        account.used(memory) > loaded,
        "the accesses are charged as they are kept"
    );
    let recording = slot.record_stop().unwrap();
    assert_eq!(account.used(memory), loaded, "and given back at the stop");
    recording
}

#[test]
fn another_victim_module_replayed_on_a_recording_misses_as_it_would_in_shadow() {
    use vino_graft::record::Event;
    let recording = recorded(OLDEST, false);
    let accesses = recording
        .events
        .iter()
        .filter(|e| matches!(e, Event::Access { .. }))
        .count() as u64;
    assert_eq!(accesses, 5 * BLOCKS + 600, "every access is in the recording");
    let bytes = recording.to_bytes();
    let recording = vino_graft::record::Recording::from_bytes(&bytes).unwrap();
    // The recorded policy, run on the ghost, misses where it missed.
    let same = vino_cache::victim_replayed(&recording, OLDEST.as_bytes()).unwrap();
    assert_eq!(same.accesses, accesses);
    assert_eq!(same.would_be_misses, same.live_misses, "{same:?}");
    // Another module misses as it would have in shadow beside the recorded one, every time.
    let other = vino_cache::victim_replayed(&recording, NEWEST_OF_FIRST_PAGE.as_bytes()).unwrap();
    let again = vino_cache::victim_replayed(&recording, NEWEST_OF_FIRST_PAGE.as_bytes()).unwrap();
    let outcome = |r: &vino_cache::VictimTryReport| (r.would_be_misses, r.shadow.decisions, r.shadow.failures);
    assert_eq!(outcome(&other), outcome(&again), "the time it took aside, the same");
    let s = setup(FRAMES, BLOCKS + 16);
    s.cache.register_process(1);
    s.cache
        .try_victim(1, NEWEST_OF_FIRST_PAGE.as_bytes(), Owner::process(1), 1, 1 << 16)
        .unwrap();
    workload(&s.cache, 1);
    workload(&s.cache, 4);
    let tried = s.cache.try_victim_stop(1).unwrap();
    assert_eq!(tried.shadow.queue_drops, 0);
    assert_eq!(
        other.would_be_misses, tried.would_be_misses,
        "{other:?} against {tried:?}"
    );
    assert_eq!(other.live_misses, tried.live_misses);
    assert!(other.would_be_misses * 3 < other.live_misses * 2, "{other:?}");
    // A candidate that loops or traps is stopped by its fuel and dropped, and the ghost goes
    // on with the default's choices, as in shadow.
    for hostile in [LOOPS, TRAPS] {
        let r = vino_cache::victim_replayed(&recording, hostile.as_bytes()).unwrap();
        assert!(r.shadow.dropped.is_some() && r.shadow.failures >= 8, "{r:?}");
        assert_eq!(r.would_be_misses, same.would_be_misses, "{r:?}");
    }
    // A recording of another graftpoint, or one without accesses, says so.
    let mut elsewhere = recording.clone();
    elsewhere.header.point = "file.compute_ra".into();
    assert!(vino_cache::victim_replayed(&elsewhere, OLDEST.as_bytes()).is_err());
    let mut bare = recording.clone();
    bare.events.retain(|e| !matches!(e, Event::Access { .. }));
    assert!(vino_cache::victim_replayed(&bare, OLDEST.as_bytes()).is_err());
}

#[test]
fn the_owner_s_writes_reach_the_same_symbol_of_another_module_in_replay() {
    let recording = recorded(&planned(8192), true);
    let lru = vino_cache::victim_replayed(&recording, OLDEST.as_bytes()).unwrap();
    // The same policy built with its plan elsewhere gets the write in its own plan.
    let moved = vino_cache::victim_replayed(&recording, planned(12288).as_bytes()).unwrap();
    let same = vino_cache::victim_replayed(&recording, planned(8192).as_bytes()).unwrap();
    assert_eq!(moved.would_be_misses, same.would_be_misses);
    assert_eq!(same.would_be_misses, same.live_misses, "{same:?}");
    assert!(moved.would_be_misses < lru.would_be_misses, "{moved:?} against {lru:?}");
    assert!(lru.would_be_misses > lru.live_misses, "{lru:?}");
}
