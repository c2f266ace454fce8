//! The page cache with native and Wasm policies.

mod common;

use common::{file, pattern, setup};
use std::sync::Arc;
use vino_blockdev::{BLOCK_SIZE, BlockDevice};
use vino_cache::{Candidates, IoCtx, PickVictim, RaMode, ReadAhead, VictimEnv, page_id};
use vino_graft::{Invalid, Owner};

const BS: u64 = BLOCK_SIZE as u64;

fn read_block(s: &common::Setup, pid: u64, obj: u64, f: &common::File, index: u64) -> Vec<u8> {
    let mut buf = vec![0u8; BLOCK_SIZE];
    assert_eq!(
        s.cache.read(&IoCtx::new(pid), obj, f, index * BS, &mut buf).unwrap(),
        BLOCK_SIZE
    );
    buf
}

#[test]
fn reads_come_from_the_device_then_from_the_cache() {
    let s = setup(16, 64);
    let f = file(10, 8);
    let mut buf = vec![0u8; 3 * BLOCK_SIZE + 100];
    let n = s.cache.read(&IoCtx::new(1), 7, &f, 2000, &mut buf).unwrap();
    assert_eq!(n, buf.len());
    assert_eq!(buf[0], pattern(10));
    assert_eq!(buf[BLOCK_SIZE], pattern(11));
    assert_eq!(buf[3 * BLOCK_SIZE + 99], pattern(13));
    let first = s.cache.process_counters(1);
    assert_eq!((first.misses, first.hits), (4, 0));
    s.cache.read(&IoCtx::new(1), 7, &f, 2000, &mut buf).unwrap();
    let second = s.cache.process_counters(1);
    assert_eq!((second.misses, second.hits), (4, 4));
    assert_eq!(s.cache.object_counters(7).hits, 4);
    // Reads stop at the end of the file; holes read as zeros.
    let short = common::File {
        allocated: 1,
        ..file(10, 2)
    };
    let mut buf = vec![9u8; 3 * BLOCK_SIZE];
    assert_eq!(
        s.cache.read(&IoCtx::new(1), 8, &short, 0, &mut buf).unwrap(),
        2 * BLOCK_SIZE
    );
    assert!(buf[BLOCK_SIZE..2 * BLOCK_SIZE].iter().all(|&b| b == 0));
    assert_eq!(s.cache.read(&IoCtx::new(1), 8, &short, 5 * BS, &mut buf).unwrap(), 0);
}

#[test]
fn lru_evicts_the_least_recently_used_page() {
    let s = setup(4, 64);
    let f = file(0, 16);
    for i in 0..4 {
        read_block(&s, 1, 1, &f, i);
    }
    read_block(&s, 1, 1, &f, 0); // 0 is now the most recent
    read_block(&s, 1, 1, &f, 4); // evicts 1
    assert!(s.cache.contains(1, 0) && !s.cache.contains(1, 1) && s.cache.contains(1, 4));
    assert_eq!(s.cache.process_counters(1).evicted_by_lru, 1);
    assert_eq!(s.cache.stats().resident, 4);
}

/// Spares pages whose id is in `hot`.
fn spare(hot: Vec<u64>) -> Arc<dyn vino_graft::NativePolicy<PickVictim>> {
    Arc::new(move |_: &VictimEnv, c: &Candidates<'_>| {
        c.iter()
            .position(|p| !hot.contains(&p))
            .ok_or_else(|| Invalid::new("all hot"))
    })
}

#[test]
fn pick_victim_chooses_among_the_owners_pages_only() {
    let s = setup(4, 64);
    let (fa, fb) = (file(0, 16), file(20, 16));
    let slot = s.cache.register_process(1);
    slot.bind_native(spare(vec![page_id(1, 0), page_id(1, 1)]), false);
    read_block(&s, 1, 1, &fa, 0);
    read_block(&s, 2, 2, &fb, 0);
    read_block(&s, 1, 1, &fa, 1);
    read_block(&s, 1, 1, &fa, 2);
    // LRU candidate is process 1's block 0 (hot): the graft names its block 2 instead.
    read_block(&s, 2, 2, &fb, 1);
    assert!(s.cache.contains(1, 0) && s.cache.contains(1, 1) && !s.cache.contains(1, 2));
    assert!(s.cache.contains(2, 0), "another process's page is never offered");
    let c = s.cache.process_counters(1);
    assert_eq!((c.evicted_by_graft, c.evicted_by_lru), (1, 0));
    // When every page of the owner is hot the graft's answer is invalid: LRU decides.
    read_block(&s, 2, 2, &fb, 2);
    assert_eq!(slot.stats().unwrap().failures, 1);
}

/// A `vas.pick_victim` graft that gives hint `[8]` on page `[0]` (both set with `vino_ctl_set`),
/// then traps if `[16]` is set, and otherwise takes the kernel's candidate.
const HINTING: &str = r#"(module
  (import "vino" "vino_page_hint" (func $hint (param i64 i32) (result i32)))
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 4096))
  (func (export "vino_ctl_set") (param $page i64) (param $hint i64) (param $trap i64) (result i32)
    (i64.store (i32.const 0) (local.get $page))
    (i64.store (i32.const 8) (local.get $hint))
    (i64.store (i32.const 16) (local.get $trap))
    (i32.const 0))
  (func (export "vas_pick_victim") (param $n i32) (result i32)
    (if (i32.ne (call $hint (i64.load (i32.const 0)) (i32.wrap_i64 (i64.load (i32.const 8)))) (i32.const 0))
      (then unreachable))
    (if (i64.ne (i64.load (i32.const 16)) (i64.const 0)) (then unreachable))
    (i32.const 0)))"#;

#[test]
fn page_hints_apply_when_the_call_commits_and_vanish_when_it_aborts() {
    let s = setup(4, 64);
    let f = file(0, 16);
    let slot = s.cache.register_process(1);
    slot.load(&wat::parse_str(HINTING).unwrap(), Owner::process(1)).unwrap();
    for i in 0..4 {
        read_block(&s, 1, 1, &f, i);
    }
    // Drop block 2, then trap: block 0 (LRU) goes as the default decides, block 2 stays.
    slot.call_control("set", &[page_id(1, 2) as i64, 2, 1]).unwrap();
    read_block(&s, 1, 1, &f, 4);
    assert_eq!(slot.stats().unwrap().failures, 1);
    assert!(
        !s.cache.contains(1, 0) && s.cache.contains(1, 2),
        "an aborted call's hint was applied"
    );
    assert_eq!(s.cache.stats().resident, 4);
    assert_eq!(slot.stats().unwrap().changes, 0);
    // The same call committed: block 1 goes (its choice) and block 2's frame is given back.
    slot.call_control("set", &[page_id(1, 2) as i64, 2, 0]).unwrap();
    read_block(&s, 1, 1, &f, 5);
    assert!(!s.cache.contains(1, 1) && !s.cache.contains(1, 2));
    assert_eq!(s.cache.stats().resident, 3);
    assert_eq!(slot.stats().unwrap().changes, 1);
    // Cold: block 5 goes at the eviction after the hint's, ahead of the older block 4.
    read_block(&s, 1, 1, &f, 6); // into the frame given back: no eviction
    slot.call_control("set", &[page_id(1, 5) as i64, 1, 0]).unwrap();
    read_block(&s, 1, 1, &f, 7); // evicts block 3, then moves block 5 to the cold end
    assert!(!s.cache.contains(1, 3) && s.cache.contains(1, 4) && s.cache.contains(1, 5));
    slot.call_control("set", &[page_id(1, 7) as i64, 0, 0]).unwrap();
    read_block(&s, 1, 1, &f, 8);
    assert!(
        !s.cache.contains(1, 5) && s.cache.contains(1, 4),
        "the page hinted cold went first"
    );
    // An unknown hint, or a page of program memory, is refused (here: aborting the graft).
    slot.call_control("set", &[page_id(1, 6) as i64, 3, 0]).unwrap();
    read_block(&s, 1, 1, &f, 9);
    slot.call_control("set", &[page_id(0xffff_ffff, 6) as i64, 0, 0])
        .unwrap();
    read_block(&s, 1, 1, &f, 10);
    assert_eq!(slot.stats().unwrap().failures, 3);
}

/// The hostile suite's `change_then_fail` at `vas.pick_victim`: a hint given by a call that then
/// traps, spins past its budget or answers out of range is never applied.
#[test]
fn a_page_hint_applies_only_from_a_call_that_commits_however_the_call_fails() {
    let s = setup(4, 64);
    let f = file(0, 16);
    let slot = s.cache.register_process(1);
    slot.load(
        &vino_sdk::change_then_fail("vas.pick_victim").unwrap(),
        Owner::process(1),
    )
    .unwrap();
    for i in 0..4 {
        read_block(&s, 1, 1, &f, i);
    }
    // Every eviction, the graft asks for block 2's frame to be given back.
    slot.call_control("set", &[page_id(1, 2) as i64, 2]).unwrap();
    for (failed, (mode, failure)) in (1..).zip(vino_sdk::CHANGE_THEN_FAIL_MODES) {
        slot.call_control("fail", &[mode]).unwrap();
        read_block(&s, 1, 1, &f, 2); // a hit: block 2 is the newest, never the default's victim
        read_block(&s, 1, 1, &f, 3 + failed);
        let stats = slot.stats().unwrap();
        assert_eq!(stats.failures, failed);
        assert!(stats.last_error.unwrap().contains(failure), "mode {mode}");
        assert_eq!(stats.changes, 0);
        assert!(s.cache.contains(1, 2), "mode {mode}: a failed call's hint was applied");
        assert_eq!(s.cache.stats().resident, 4);
        assert_eq!(slot.call_control("calls", &[]).unwrap(), 0);
    }
    slot.call_control("fail", &[0]).unwrap();
    read_block(&s, 1, 1, &f, 10);
    assert!(!s.cache.contains(1, 2), "the committed call's hint gave the frame back");
    assert_eq!(s.cache.stats().resident, 3);
    assert_eq!(slot.stats().unwrap().changes, 1);
    assert_eq!(slot.call_control("calls", &[]).unwrap(), 1);
}

#[test]
fn scan_eviction_graft_from_c_gives_the_scan_back_and_keeps_the_working_set() {
    let s = setup(8, 64);
    let (hot, scanned) = (file(0, 16), file(20, 16));
    let slot = s.cache.register_process(1);
    let wasm = vino_sdk::build_example("scan_evict", &vino_sdk::BuildOptions::default()).unwrap();
    slot.load(&wasm, Owner::process(1)).unwrap();
    slot.call_control("scan_set", &[2]).unwrap();
    for i in 0..4 {
        read_block(&s, 1, 1, &hot, i);
    }
    for i in 0..4 {
        read_block(&s, 1, 2, &scanned, i);
    }
    // The first eviction takes one scanned page and gives the other three back.
    read_block(&s, 1, 2, &scanned, 4);
    assert_eq!(s.cache.stats().resident, 5);
    for i in 5..16 {
        read_block(&s, 1, 2, &scanned, i);
    }
    assert!((0..4).all(|i| s.cache.contains(1, i)), "the working set stayed");
    assert_eq!(slot.stats().unwrap().failures, 0);
}

#[test]
fn a_hint_never_reaches_another_process_s_pages() {
    let s = setup(4, 64);
    let (fa, fb) = (file(0, 16), file(20, 16));
    let slot = s.cache.register_process(1);
    slot.load(&wat::parse_str(HINTING).unwrap(), Owner::process(1)).unwrap();
    read_block(&s, 2, 2, &fb, 0);
    read_block(&s, 1, 1, &fa, 0);
    read_block(&s, 1, 1, &fa, 1);
    read_block(&s, 2, 2, &fb, 1);
    // Process 1's graft asks to drop process 2's block 1 when one of its own pages is offered.
    slot.call_control("set", &[page_id(2, 1) as i64, 2, 0]).unwrap();
    read_block(&s, 1, 1, &fa, 2); // evicts process 2's block 0 (LRU): no graft runs
    read_block(&s, 1, 1, &fa, 3); // evicts process 1's block 0: its graft runs and hints
    assert_eq!(slot.stats().unwrap().invocations, 1);
    assert!(s.cache.contains(2, 1), "process 2's page stayed");
    assert_eq!(s.cache.stats().resident, 4);
}

#[test]
fn a_graft_that_chooses_badly_pays_with_its_own_pages() {
    let s = setup(4, 64);
    let (fa, fb) = (file(0, 16), file(20, 16));
    // Always evicts the process's most recently used page: a bad policy.
    let mru: Arc<dyn vino_graft::NativePolicy<PickVictim>> =
        Arc::new(|_: &VictimEnv, c: &Candidates<'_>| Ok(c.len() - 1));
    s.cache.register_process(1).bind_native(mru, false);
    for i in 0..3 {
        read_block(&s, 1, 1, &fa, i);
    }
    read_block(&s, 2, 2, &fb, 0);
    read_block(&s, 2, 2, &fb, 1); // evicts 1's MRU page (block 2) instead of its LRU (block 0)
    assert!(!s.cache.contains(1, 2) && s.cache.contains(1, 0));
    read_block(&s, 1, 1, &fa, 2); // the graft's mistake: block 2 is missed again
    let c = s.cache.process_counters(1);
    assert_eq!(c.graft_mistakes, 1);
    assert!(
        !s.cache.contains(1, 0),
        "the process paid with the page the kernel had chosen"
    );
    assert!(
        s.cache.contains(2, 0) && s.cache.contains(2, 1),
        "the other process kept its frames"
    );
}

#[test]
fn hot_list_graft_from_c_spares_hot_pages() {
    let s = setup(4, 64);
    let f = file(0, 16);
    let slot = s.cache.register_process(1);
    let wasm = vino_sdk::build_example("hotlist_evict", &vino_sdk::BuildOptions::default()).unwrap();
    slot.load(&wasm, Owner::process(1)).unwrap();
    slot.call_control("hot_add", &[page_id(1, 0) as i64]).unwrap();
    for i in 0..4 {
        read_block(&s, 1, 1, &f, i);
    }
    read_block(&s, 1, 1, &f, 4);
    assert!(
        s.cache.contains(1, 0) && !s.cache.contains(1, 1),
        "block 0 is hot, block 1 went"
    );
    assert_eq!(slot.stats().unwrap().failures, 0);
}

#[test]
fn default_read_ahead_follows_sequential_reads() {
    let s = setup(64, 128);
    let f = file(0, 64);
    let ra = ReadAhead::new(&s.runtime, 1, "3");
    let ctx = IoCtx::with_read_ahead(1, &ra);
    let mut buf = vec![0u8; BLOCK_SIZE];
    s.cache.read(&ctx, 1, &f, 0, &mut buf).unwrap();
    assert_eq!(s.cache.process_counters(1).prefetched, 0, "one read is not a sequence");
    s.cache.read(&ctx, 1, &f, BS, &mut buf).unwrap();
    let c = s.cache.process_counters(1);
    assert_eq!(c.prefetched, 4, "a cluster after the second sequential read");
    assert!(s.cache.contains(1, 2) && s.cache.contains(1, 5));
    for i in 2..6 {
        s.cache.read(&ctx, 1, &f, i * BS, &mut buf).unwrap();
        assert_eq!(buf[0], pattern(i));
    }
    let c = s.cache.process_counters(1);
    assert_eq!(c.prefetch_used, 4);
    assert_eq!(c.misses, 2);
    // A random read resets the window; "off" stops read-ahead altogether.
    ra.set_mode(RaMode::Off);
    let before = s.cache.process_counters(1).prefetched;
    for i in 30..34 {
        s.cache.read(&ctx, 1, &f, i * BS, &mut buf).unwrap();
    }
    assert_eq!(s.cache.process_counters(1).prefetched, before);
}

#[test]
fn read_ahead_never_goes_past_the_end_and_wasted_pages_are_counted() {
    let s = setup(8, 128);
    let f = file(0, 3);
    let ra = ReadAhead::new(&s.runtime, 1, "3");
    let ctx = IoCtx::with_read_ahead(1, &ra);
    let mut buf = vec![0u8; BLOCK_SIZE];
    s.cache.read(&ctx, 1, &f, 0, &mut buf).unwrap();
    s.cache.read(&ctx, 1, &f, BS, &mut buf).unwrap();
    assert_eq!(
        s.cache.process_counters(1).prefetched,
        1,
        "only block 2 is left in the file"
    );
    // Push the prefetched page out unused.
    let g = file(50, 20);
    for i in 0..10 {
        read_block(&s, 1, 2, &g, i);
    }
    assert_eq!(s.cache.process_counters(1).prefetch_wasted, 1);
}

#[test]
fn index_read_ahead_graft_from_c_prefetches_the_next_records() {
    let s = setup(64, 256);
    let f = file(0, 200);
    let ra = ReadAhead::new(&s.runtime, 1, "4");
    let wasm = vino_sdk::build_example("index_readahead", &vino_sdk::BuildOptions::default()).unwrap();
    ra.slot().load(&wasm, Owner::process(1)).unwrap();
    for rec in [0u64, 150, 20, 90] {
        ra.slot().call_control("ra_push", &[(rec * BS + 100) as i64]).unwrap();
    }
    let ctx = IoCtx::with_read_ahead(1, &ra);
    let mut buf = vec![0u8; 208];
    s.cache.read(&ctx, 1, &f, 100, &mut buf).unwrap();
    assert!(s.cache.contains(1, 150) && s.cache.contains(1, 20) && s.cache.contains(1, 90));
    s.cache.read(&ctx, 1, &f, 150 * BS + 100, &mut buf).unwrap();
    assert_eq!(buf[0], pattern(150));
    assert_eq!(s.cache.process_counters(1).prefetch_used, 1);
    // A graft asking for blocks past the end of the file falls back to the default.
    let bad = vino_sdk::build_example("bad_readahead", &vino_sdk::BuildOptions::default()).unwrap();
    ra.slot().load(&bad, Owner::process(1)).unwrap();
    s.cache.read(&ctx, 1, &f, 0, &mut buf).unwrap();
    assert_eq!(ra.slot().stats().unwrap().failures, 1);
}

#[test]
fn a_prefetching_graft_asks_as_it_goes_and_a_failed_call_issues_nothing() {
    let s = setup(64, 256);
    let f = file(0, 200);
    let ra = ReadAhead::new(&s.runtime, 1, "4");
    let wasm = vino_sdk::build_example("index_prefetch", &vino_sdk::BuildOptions::default()).unwrap();
    ra.slot().load(&wasm, Owner::process(1)).unwrap();
    for rec in [0u64, 150, 20, 90] {
        ra.slot().call_control("ip_push", &[(rec * BS + 100) as i64]).unwrap();
    }
    let ctx = IoCtx::with_read_ahead(1, &ra);
    let mut buf = vec![0u8; 208];
    // The call traps after its prefetches: none reaches the device, and the cursor it moved in
    // its own memory is back at the first record.
    ra.slot().call_control("ip_fail", &[1]).unwrap();
    s.cache.read(&ctx, 1, &f, 100, &mut buf).unwrap();
    assert_eq!(ra.slot().stats().unwrap().failures, 1);
    assert!(
        ![150, 20, 90].iter().any(|&b| s.cache.contains(1, b)),
        "an aborted call's prefetch was issued"
    );
    assert_eq!(s.cache.process_counters(1).prefetched, 0);
    assert_eq!(ra.slot().stats().unwrap().changes, 0);
    assert_eq!(ra.slot().call_control("ip_cursor", &[]).unwrap(), 0);
    // The same call committed: its prefetches are read.
    ra.slot().call_control("ip_fail", &[0]).unwrap();
    s.cache.read(&ctx, 1, &f, 100, &mut buf).unwrap();
    assert_eq!(ra.slot().stats().unwrap().failures, 1);
    assert!([150, 20, 90].iter().all(|&b| s.cache.contains(1, b)));
    assert_eq!(ra.slot().stats().unwrap().changes, 3, "one request per block");
    assert_eq!(ra.slot().call_control("ip_cursor", &[]).unwrap(), 1);
    s.cache.read(&ctx, 1, &f, 150 * BS + 100, &mut buf).unwrap();
    assert_eq!(buf[0], pattern(150));
    assert_eq!(s.cache.process_counters(1).prefetch_used, 1);
}

/// The hostile suite's `change_then_fail` at `file.compute_ra`: a prefetch asked for by a call
/// that then traps, spins past its budget or answers out of range is never issued.
#[test]
fn a_prefetch_is_issued_only_by_a_call_that_commits_however_the_call_fails() {
    let s = setup(64, 256);
    let f = file(0, 200);
    let ra = ReadAhead::new(&s.runtime, 1, "4");
    ra.slot()
        .load(
            &vino_sdk::change_then_fail("file.compute_ra").unwrap(),
            Owner::process(1),
        )
        .unwrap();
    ra.slot().call_control("set", &[(150 * BS) as i64, BS as i64]).unwrap();
    let ctx = IoCtx::with_read_ahead(1, &ra);
    let mut buf = vec![0u8; 100];
    for (failed, (mode, failure)) in (1..).zip(vino_sdk::CHANGE_THEN_FAIL_MODES) {
        ra.slot().call_control("fail", &[mode]).unwrap();
        s.cache.read(&ctx, 1, &f, 100, &mut buf).unwrap();
        let stats = ra.slot().stats().unwrap();
        assert_eq!(stats.failures, failed);
        assert!(stats.last_error.unwrap().contains(failure), "mode {mode}");
        assert_eq!(stats.changes, 0);
        assert!(
            !s.cache.contains(1, 150),
            "mode {mode}: a failed call's prefetch was issued"
        );
        assert_eq!(s.cache.process_counters(1).prefetched, 0);
        assert_eq!(ra.slot().call_control("calls", &[]).unwrap(), 0);
    }
    ra.slot().call_control("fail", &[0]).unwrap();
    s.cache.read(&ctx, 1, &f, 100, &mut buf).unwrap();
    assert!(s.cache.contains(1, 150));
    assert_eq!(ra.slot().stats().unwrap().changes, 1);
    assert_eq!(ra.slot().call_control("calls", &[]).unwrap(), 1);
}

#[test]
fn vino_prefetch_checks_its_requests_as_a_system_call_would() {
    let s = setup(64, 256);
    let f = file(0, 200);
    let ra = ReadAhead::new(&s.runtime, 1, "4");
    // Each answer not as expected makes the call invalid (counted as a failure).
    let wasm = wat::parse_str(
        r#"(module
        (import "vino" "vino_prefetch" (func $p (param i64 i64) (result i32)))
        (memory (export "memory") 1)
        (global (export "vino_args") i32 (i32.const 0))
        (func $expect (param $got i32) (param $want i32)
          (if (i32.ne (local.get $got) (local.get $want)) (then unreachable)))
        (func (export "file_compute_ra") (param $off i64) (param $len i32) (param $size i64) (result i32)
          (local $i i64)
          ;; past the end, empty, negative: EINVAL
          (call $expect (call $p (local.get $size) (i64.const 4096)) (i32.const -22))
          (call $expect (call $p (i64.const 0) (i64.const 0)) (i32.const -22))
          (call $expect (call $p (i64.const -4096) (i64.const 4096)) (i32.const -22))
          (call $expect (call $p (i64.const 4096) (i64.const -1)) (i32.const -22))
          ;; sixteen requests go (blocks 100..116), the seventeenth is refused
          (loop $l
            (call $expect
              (call $p (i64.mul (i64.add (i64.const 100) (local.get $i)) (i64.const 4096)) (i64.const 4096))
              (i32.const 0))
            (local.set $i (i64.add (local.get $i) (i64.const 1)))
            (br_if $l (i64.lt_u (local.get $i) (i64.const 16))))
          (call $expect (call $p (i64.const 0) (i64.const 4096)) (i32.const -28))
          (i32.const 0)))"#,
    )
    .unwrap();
    ra.slot().load(&wasm, Owner::process(1)).unwrap();
    let ctx = IoCtx::with_read_ahead(1, &ra);
    let mut buf = vec![0u8; 100];
    s.cache.read(&ctx, 1, &f, 0, &mut buf).unwrap();
    assert_eq!(ra.slot().stats().unwrap().failures, 0);
    assert!((100..116).all(|b| s.cache.contains(1, b)) && !s.cache.contains(1, 116));
    // The allowance is per call: the next call gets sixteen more.
    s.cache.read(&ctx, 1, &f, 0, &mut buf).unwrap();
    assert_eq!(ra.slot().stats().unwrap().failures, 0);
}

#[test]
fn reverse_read_ahead_graft_from_c_prefetches_before_a_backward_reader() {
    let s = setup(64, 256);
    let f = file(0, 200);
    let ra = ReadAhead::new(&s.runtime, 1, "4");
    let wasm = vino_sdk::build_example("reverse_ra", &vino_sdk::BuildOptions::default()).unwrap();
    ra.slot().load(&wasm, Owner::process(1)).unwrap();
    ra.slot().call_control("rev_set_blocks", &[16]).unwrap();
    let ctx = IoCtx::with_read_ahead(1, &ra);
    let mut buf = vec![0u8; BLOCK_SIZE];
    s.cache.read(&ctx, 1, &f, 199 * BS, &mut buf).unwrap();
    assert_eq!(s.cache.process_counters(1).prefetched, 0, "one read has no direction");
    // Ending where the last one started: the 16 blocks before it are asked for.
    s.cache.read(&ctx, 1, &f, 198 * BS, &mut buf).unwrap();
    assert!((182..198).all(|b| s.cache.contains(1, b)));
    assert!(!s.cache.contains(1, 181));
    s.cache.read(&ctx, 1, &f, 197 * BS, &mut buf).unwrap();
    assert_eq!(buf[0], pattern(197));
    assert_eq!(s.cache.process_counters(1).prefetch_used, 1);
    // A jump forwards is not backward: nothing more is asked for.
    let asked = s.cache.process_counters(1).prefetched;
    s.cache.read(&ctx, 1, &f, 10 * BS, &mut buf).unwrap();
    assert_eq!(s.cache.process_counters(1).prefetched, asked);
}

#[test]
fn writes_reach_the_device_on_sync() {
    let s = setup(8, 64);
    let f = file(10, 4);
    let ctx = IoCtx::new(1);
    s.cache.write(&ctx, 1, &f, 100, b"hello").unwrap();
    s.cache.write(&ctx, 1, &f, BS, &vec![7u8; BLOCK_SIZE]).unwrap();
    let mut dev = vec![0u8; BLOCK_SIZE];
    s.device.read_blocks(10, &mut dev).unwrap();
    assert_eq!(dev[100], pattern(10), "not yet written");
    assert_eq!(s.cache.stats().dirty, 2);
    s.cache.sync_object(1).unwrap();
    s.device.read_blocks(10, &mut dev).unwrap();
    assert_eq!(&dev[100..105], b"hello");
    assert_eq!(dev[99], pattern(10), "the rest of the block was read, not zeroed");
    s.device.read_blocks(11, &mut dev).unwrap();
    assert!(dev.iter().all(|&b| b == 7));
    assert_eq!(s.cache.stats().dirty, 0);
    assert_eq!(s.device.unflushed_writes(), 0, "sync flushed the device");
    // Writing a block the file system has not allocated is refused.
    let hole = common::File {
        allocated: 1,
        ..file(10, 4)
    };
    assert!(s.cache.write(&ctx, 1, &hole, 3 * BS, b"x").is_err());
}

#[test]
fn dirty_pages_are_written_before_eviction_and_invalidate_discards() {
    let s = setup(2, 64);
    let f = file(10, 8);
    let ctx = IoCtx::new(1);
    s.cache.write(&ctx, 1, &f, 0, &vec![1u8; BLOCK_SIZE]).unwrap();
    s.cache.write(&ctx, 1, &f, BS, &vec![1u8; BLOCK_SIZE]).unwrap();
    // No clean page to take: evicts the dirty page 0, written first.
    read_block(&s, 1, 1, &f, 2);
    let mut dev = vec![0u8; BLOCK_SIZE];
    s.device.read_blocks(10, &mut dev).unwrap();
    assert!(dev.iter().all(|&b| b == 1));
    s.cache.write(&ctx, 1, &f, 2 * BS, &vec![9u8; BLOCK_SIZE]).unwrap();
    s.cache.invalidate(1, 2);
    assert!(!s.cache.contains(1, 2));
    s.cache.sync_all().unwrap();
    s.device.read_blocks(12, &mut dev).unwrap();
    assert_eq!(dev[0], pattern(12), "discarded, never written");
}

/// A range dropped (a punched hole): its dirty pages are discarded, never written; the pages
/// on either side stay, dirty, and reach the device.
#[test]
fn invalidate_range_discards_only_the_range() {
    let s = setup(16, 64);
    let f = file(10, 8);
    let ctx = IoCtx::new(1);
    for index in 0..6 {
        s.cache.write(&ctx, 1, &f, index * BS, &vec![7u8; BLOCK_SIZE]).unwrap();
    }
    s.cache.invalidate_range(1, 2, 4);
    let held: Vec<bool> = (0..6).map(|index| s.cache.contains(1, index)).collect();
    assert_eq!(held, [true, true, false, false, true, true]);
    s.cache.sync_all().unwrap();
    let mut dev = vec![0u8; BLOCK_SIZE];
    for index in 0..6 {
        s.device.read_blocks(10 + index, &mut dev).unwrap();
        let want = if (2..4).contains(&index) {
            pattern(10 + index)
        } else {
            7
        };
        assert_eq!(dev[0], want, "block {index}");
    }
}

/// The cache's I/O to a device queue that, on the first write batch, calls `during` while the
/// batch is in flight (the table unlocked), as another writer could.
struct Intercept {
    queue: vino_blockdev::IoQueue,
    during: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl vino_cache::PageIo for Intercept {
    fn submit(&self, request: vino_blockdev::IoRequest) -> vino_blockdev::Ticket {
        self.queue.submit(request)
    }
    fn submit_batch(&self, requests: Vec<vino_blockdev::IoRequest>) -> Vec<vino_blockdev::Ticket> {
        let writes = requests.iter().filter(|r| r.op == vino_blockdev::IoOp::Write).count();
        let tickets = requests.into_iter().map(|r| self.queue.submit(r)).collect();
        if writes > 1
            && let Some(during) = self.during.lock().unwrap().take()
        {
            during();
        }
        tickets
    }
}

#[test]
fn a_page_written_while_its_write_back_is_in_flight_stays_dirty() {
    // 600 adjacent dirty pages: a write-back of three requests, copied one at a time.
    const BLOCKS: u64 = 600;
    let device = Arc::new(vino_blockdev::MemDevice::new(1024));
    let io = Arc::new(Intercept {
        queue: vino_blockdev::IoQueue::new(device.clone(), 8).unwrap(),
        during: std::sync::Mutex::new(None),
    });
    let runtime = vino_graft::Runtime::default();
    let cache = vino_cache::PageCache::new(
        vino_cache::CacheConfig {
            frames: 1024,
            // Every page stays dirty until the sync: no write-back thread (which would write
            // behind a writer past half its share, 512 pages here), and no writer's share is
            // reached.
            writeback_every: None,
            dirty_percent: 100,
            ..vino_cache::CacheConfig::default()
        },
        io.clone(),
        &runtime,
    );
    let f = Arc::new(file(0, BLOCKS));
    let ctx = IoCtx::new(1);
    for i in 0..BLOCKS {
        cache.write(&ctx, 1, &*f, i * BS, &vec![1u8; BLOCK_SIZE]).unwrap();
    }
    // While the first write-back is in flight, pages of its first and last requests change.
    let (c, g) = (cache.clone(), f.clone());
    *io.during.lock().unwrap() = Some(Box::new(move || {
        for i in [0, 1, BLOCKS - 1] {
            c.write(&IoCtx::new(1), 1, &*g, i * BS, &vec![2u8; BLOCK_SIZE]).unwrap();
        }
    }));
    cache.sync_all().unwrap();
    assert!(
        io.during.lock().unwrap().is_none(),
        "the write-back went out as one batch"
    );
    let mut dev = vec![0u8; BLOCK_SIZE];
    for b in 0..BLOCKS {
        device.read_blocks(b, &mut dev).unwrap();
        let want = if [0, 1, BLOCKS - 1].contains(&b) { 2 } else { 1 };
        assert!(
            dev.iter().all(|&x| x == want),
            "block {b}: {} on the device, {want} written",
            dev[0]
        );
    }
    assert_eq!(cache.stats().dirty, 0);
    cache.check_invariants();
}

#[test]
fn writeback_policy_chooses_what_to_write() {
    let s = setup(8, 64);
    let f = file(10, 4);
    s.cache.write(&IoCtx::new(1), 1, &f, 0, &vec![3u8; BLOCK_SIZE]).unwrap();
    assert_eq!(s.cache.run_writeback().unwrap(), 0, "the default waits 30 s");
    let all: Arc<dyn vino_graft::NativePolicy<vino_cache::Writeback>> =
        Arc::new(|_: &(), pages: &&[vino_cache::WritebackArgs]| Ok((0..pages.len()).collect()));
    s.cache.writeback_slot().bind_native(all, false);
    assert_eq!(s.cache.run_writeback().unwrap(), 1);
    assert_eq!(s.cache.stats().dirty, 0);
}

#[test]
fn a_read_error_is_reported_and_leaves_no_broken_page() {
    let s = setup(8, 64);
    let f = file(10, 4);
    s.device.fail_read(1);
    let mut buf = vec![0u8; BLOCK_SIZE];
    assert!(s.cache.read(&IoCtx::new(1), 1, &f, 0, &mut buf).is_err());
    assert!(!s.cache.contains(1, 0));
    s.cache.read(&IoCtx::new(1), 1, &f, 0, &mut buf).unwrap();
    assert_eq!(buf[0], pattern(10));
    s.cache.check_invariants();
}

#[test]
fn concurrent_readers_always_see_the_right_data() {
    let s = Arc::new(setup(16, 256));
    let f = Arc::new(file(0, 200));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (s, f) = (s.clone(), f.clone());
            std::thread::spawn(move || {
                let mut x = t + 1;
                let mut buf = vec![0u8; BLOCK_SIZE];
                for _ in 0..2000 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let i = (x >> 33) % 200;
                    s.cache.read(&IoCtx::new(t), 1, &*f, i * BS, &mut buf).unwrap();
                    assert!(buf.iter().all(|&b| b == pattern(i)));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let st = s.cache.stats();
    assert_eq!(st.resident, 16);
    assert_eq!(st.total.hits + st.total.misses, 8000);
    s.cache.check_invariants();
}

#[test]
fn a_read_of_an_object_whose_size_is_unknown_fails() {
    use std::io;
    struct Unreadable;
    impl vino_cache::Backing for Unreadable {
        fn locate(&self, index: u64) -> io::Result<Option<u64>> {
            Ok(Some(index))
        }
        fn size(&self) -> io::Result<u64> {
            Err(io::Error::other("the inode could not be read"))
        }
    }
    let s = setup(16, 64);
    let ra = ReadAhead::new(&s.runtime, 1, "0");
    let mut buf = vec![0u8; BLOCK_SIZE];
    let err = s
        .cache
        .read(&IoCtx::with_read_ahead(1, &ra), 3, &Unreadable, 0, &mut buf)
        .unwrap_err();
    assert!(err.to_string().contains("inode could not be read"), "{err}");
    assert_eq!(s.cache.object_counters(3).misses, 0, "nothing read");
}

/// Counts the requests handed to the device together, batch by batch.
struct Batches {
    queue: vino_blockdev::IoQueue,
    sizes: parking_lot::Mutex<Vec<usize>>,
}

impl vino_cache::PageIo for Batches {
    fn submit(&self, request: vino_blockdev::IoRequest) -> vino_blockdev::Ticket {
        self.sizes.lock().push(1);
        self.queue.submit(request)
    }
    fn submit_batch(&self, requests: Vec<vino_blockdev::IoRequest>) -> Vec<vino_blockdev::Ticket> {
        self.sizes.lock().push(requests.len());
        requests.into_iter().map(|r| self.queue.submit(r)).collect()
    }
}

#[test]
fn a_full_cache_of_clean_pages_still_reads_a_run_of_misses_together() {
    let (io, cache) = batched(128, 256);
    let f = file(0, 256);
    // Fill every frame with clean pages, then read 32 pages that are not there.
    let mut buf = vec![0u8; 128 * BLOCK_SIZE];
    cache.read(&IoCtx::new(1), 1, &f, 0, &mut buf).unwrap();
    io.sizes.lock().clear();
    cache
        .read(&IoCtx::new(1), 1, &f, 200 * BS, &mut buf[..32 * BLOCK_SIZE])
        .unwrap();
    assert_eq!(
        *io.sizes.lock(),
        vec![32],
        "one batch: the scheduler can merge it into one request"
    );
    cache.check_invariants();
}

#[test]
fn a_read_larger_than_the_cache_completes_with_the_right_data() {
    // Its misses cannot all be held at once: the reads held are submitted before a frame is
    // waited for.
    let s = setup(64, 512);
    let f = file(0, 300);
    let mut buf = vec![0u8; 200 * BLOCK_SIZE];
    assert_eq!(s.cache.read(&IoCtx::new(1), 1, &f, 0, &mut buf).unwrap(), buf.len());
    for (i, block) in buf.chunks(BLOCK_SIZE).enumerate() {
        assert!(block.iter().all(|&b| b == pattern(i as u64)), "block {i}");
    }
    s.cache.check_invariants();
}

/// A cache over `Batches` on a device of `blocks` blocks, each holding its number's pattern.
fn batched(frames: usize, blocks: u64) -> (Arc<Batches>, Arc<vino_cache::PageCache>) {
    let device = Arc::new(vino_blockdev::MemDevice::new(blocks));
    for b in 0..blocks {
        device.write_blocks(b, &vec![pattern(b); BLOCK_SIZE]).unwrap();
    }
    let io = Arc::new(Batches {
        queue: vino_blockdev::IoQueue::new(device, 8).unwrap(),
        sizes: parking_lot::Mutex::new(Vec::new()),
    });
    let config = vino_cache::CacheConfig {
        frames,
        writeback_every: None,
        ..vino_cache::CacheConfig::default()
    };
    let cache = vino_cache::PageCache::new(config, io.clone(), &vino_graft::Runtime::default());
    (io, cache)
}

#[test]
fn a_large_read_goes_to_the_device_in_windows_of_a_megabyte_whatever_its_size() {
    // 4 MiB and 8 MiB reads of an uncached file: every page in a batch of 256 (which the
    // scheduler merges into one 1 MiB request), none read alone, and no read-ahead cap cuts
    // them (it once capped the read itself at 256 pages and left the rest to single reads).
    for mib in [4usize, 8] {
        let (io, cache) = batched(8192, 4096);
        let f = file(0, 4096);
        let mut buf = vec![0u8; mib << 20];
        assert_eq!(cache.read(&IoCtx::new(1), 1, &f, 0, &mut buf).unwrap(), buf.len());
        assert_eq!(*io.sizes.lock(), vec![256; mib], "a {mib} MiB read");
        for (i, block) in buf.chunks(BLOCK_SIZE).enumerate() {
            assert!(block.iter().all(|&b| b == pattern(i as u64)), "block {i}");
        }
        assert_eq!(cache.object_counters(1).misses, (mib * 256) as u64);
        cache.check_invariants();
    }
}

#[test]
fn an_unaligned_large_read_takes_every_page_it_touches_in_batches() {
    let (io, cache) = batched(8192, 4096);
    let f = file(0, 4096);
    let mut buf = vec![0u8; (3 << 20) + 100];
    let offset = 1000;
    assert_eq!(cache.read(&IoCtx::new(1), 1, &f, offset, &mut buf).unwrap(), buf.len());
    assert_eq!(*io.sizes.lock(), vec![256, 256, 256, 1], "the 769 pages it touches");
    for (i, b) in buf.iter().enumerate() {
        let block = (offset + i as u64) / BS;
        assert_eq!(*b, pattern(block), "byte {i}");
    }
}

#[test]
fn a_read_larger_than_the_cache_streams_through_a_quarter_of_it_at_a_time() {
    // 128 frames: windows of 32 pages; the 2 MiB read gets the right bytes and leaves at most
    // the cache's frames resident.
    let (io, cache) = batched(128, 1024);
    let f = file(0, 1024);
    let mut buf = vec![0u8; 2 << 20];
    assert_eq!(cache.read(&IoCtx::new(1), 1, &f, 0, &mut buf).unwrap(), buf.len());
    for (i, block) in buf.chunks(BLOCK_SIZE).enumerate() {
        assert!(block.iter().all(|&b| b == pattern(i as u64)), "block {i}");
    }
    let sizes = io.sizes.lock().clone();
    assert!(sizes.iter().all(|&s| s == 32), "windows of 32 pages: {sizes:?}");
    assert!(cache.stats().resident <= 128);
    cache.check_invariants();
}
