//! `vas.pick_victim` offers every page of the owner, a page of candidates at a time: grafts that
//! page through them, and hostile ones that ask for more forever, answer outside what they were
//! offered, or spend their budget asking.

mod common;

use common::{Queue, file, pattern};
use std::sync::Arc;
use std::time::Duration;
use vino_blockdev::{BLOCK_SIZE, BlockDevice, IoQueue, MemDevice};
use vino_cache::{CacheConfig, Candidates, IoCtx, PageCache, PickVictim, VictimEnv, page_id};
use vino_graft::{GraftSlot, Invalid, Owner, Runtime, RuntimeConfig};

const BS: u64 = BLOCK_SIZE as u64;

/// A cache of `frames` frames, full of process 1's pages of object 1 (blocks `0..frames`, read in
/// order, so block 0 is the least recently used), with process 1's `vas.pick_victim` slot.
struct Full {
    cache: Arc<PageCache>,
    slot: Arc<GraftSlot<PickVictim>>,
    frames: u64,
    /// Process 1's pages evicted so far.
    gone: std::cell::RefCell<Vec<u64>>,
}

fn full(frames: usize, runtime: Runtime) -> Full {
    let blocks = frames as u64 + 16;
    let device = Arc::new(MemDevice::new(blocks));
    for b in 0..blocks {
        device.write_blocks(b, &vec![pattern(b); BLOCK_SIZE]).unwrap();
    }
    let cache = PageCache::new(
        CacheConfig {
            frames,
            writeback_every: None,
            ..CacheConfig::default()
        },
        Arc::new(Queue(IoQueue::new(device, 8).unwrap())),
        &runtime,
    );
    let slot = cache.register_process(1);
    let f = file(0, frames as u64);
    let mut buf = vec![0u8; BLOCK_SIZE];
    for i in 0..frames as u64 {
        cache.read(&IoCtx::new(1), 1, &f, i * BS, &mut buf).unwrap();
    }
    Full {
        cache,
        slot,
        frames: frames as u64,
        gone: Default::default(),
    }
}

impl Full {
    /// Process 2 reads a page: one of process 1's goes. Returns the block that went.
    fn evict_one(&self) -> u64 {
        let mut before = self.gone.borrow_mut();
        let f = file(self.frames + before.len() as u64, 1);
        let mut buf = vec![0u8; BLOCK_SIZE];
        self.cache
            .read(&IoCtx::new(2), 2 + before.len() as u64, &f, 0, &mut buf)
            .unwrap();
        assert_eq!(buf[0], pattern(f.base), "the reader got its data");
        let gone: Vec<u64> = (0..self.frames)
            .filter(|&i| !self.cache.contains(1, i) && !before.contains(&i))
            .collect();
        assert_eq!(gone.len(), 1, "exactly one of the owner's pages went: {gone:?}");
        assert_eq!(self.cache.stats().resident, self.frames as usize, "no frame leaked");
        before.push(gone[0]);
        gone[0]
    }

    fn load(&self, source: &str) {
        let wasm = vino_sdk::build_c_str("victim.c", source, &vino_sdk::BuildOptions::default()).unwrap();
        self.slot.load(&wasm, Owner::process(1)).unwrap();
    }

    fn failures(&self) -> u64 {
        self.slot.stats().unwrap().failures
    }
}

/// Evicts the page `target_index` (its block index in object 1), asking for pages until it
/// comes.
const SEEK: &str = r#"
#include "vino_graft.h"
VINO_SHARED uint64_t target;
VINO_GRAFT(vas_pick_victim) int32_t vas_pick_victim(int32_t n) {
    const uint64_t *page = vino_victim_pages();
    uint64_t first = vino_victim_first();
    for (int32_t i = 0; i < n; i++)
        if (page[i] == ((1ull << 32) | target))
            return (int32_t)(first + (uint64_t)i);
    return n == 0 ? -1 : VINO_VICTIM_MORE;
}
VINO_CONTROL(set_target) int32_t set_target(int64_t t) { target = (uint64_t)t; return 0; }
"#;

#[test]
fn a_graft_reaches_every_page_of_its_owner() {
    let s = full(700, Runtime::default());
    s.load(SEEK);
    s.slot.call_control("set_target", &[600]).unwrap();
    assert_eq!(
        s.evict_one(),
        600,
        "the fourth page of candidates (32, then 256 a page)"
    );
    assert_eq!(s.failures(), 0);
    assert_eq!(s.cache.process_counters(1).evicted_by_graft, 1);
}

#[test]
fn a_graft_may_answer_with_a_candidate_of_an_earlier_page() {
    let s = full(700, Runtime::default());
    // Looks at every page, then takes the fifth candidate of the first.
    s.load(
        r#"
        #include "vino_graft.h"
        VINO_GRAFT(vas_pick_victim) int32_t vas_pick_victim(int32_t n) {
            return n == 0 ? 5 : VINO_VICTIM_MORE;
        }"#,
    );
    assert_eq!(s.evict_one(), 5);
    assert_eq!(s.failures(), 0);
}

#[test]
fn asking_for_more_after_the_last_page_is_invalid() {
    let s = full(700, Runtime::default());
    s.load(
        r#"
        #include "vino_graft.h"
        VINO_GRAFT(vas_pick_victim) int32_t vas_pick_victim(int32_t n) { return VINO_VICTIM_MORE; }"#,
    );
    assert_eq!(s.evict_one(), 0, "the kernel's choice stands");
    assert_eq!(s.failures(), 1);
    let why = s.slot.stats().unwrap().last_error.unwrap();
    assert!(why.contains("more candidates"), "{why}");
}

#[test]
fn an_index_past_what_was_offered_is_invalid() {
    let s = full(700, Runtime::default());
    // On the second page, names a candidate of the third (not offered yet).
    s.load(
        r#"
        #include "vino_graft.h"
        VINO_GRAFT(vas_pick_victim) int32_t vas_pick_victim(int32_t n) {
            uint64_t first = vino_victim_first();
            return first == 0 ? VINO_VICTIM_MORE : (int32_t)(first + (uint64_t)n);
        }"#,
    );
    assert_eq!(s.evict_one(), 0);
    assert_eq!(s.failures(), 1);
    let why = s.slot.stats().unwrap().last_error.unwrap();
    assert!(why.contains("not one of the 288 candidates"), "{why}");
}

#[test]
fn asking_page_after_page_spends_the_budget() {
    // 30 µs of budget, 5 µs a page: the 8,000 pages of the owner (32 pages of candidates) are
    // more than the graft may see.
    let runtime = Runtime::new(RuntimeConfig {
        invocation_budget: Duration::from_micros(30),
        ..RuntimeConfig::default()
    });
    let s = full(8000, runtime);
    s.load(SEEK);
    s.slot.call_control("set_target", &[7900]).unwrap();
    assert_eq!(s.evict_one(), 0, "out of budget: the kernel's choice");
    assert_eq!(s.failures(), 1);
    let why = s.slot.stats().unwrap().last_error.unwrap();
    assert!(why.contains("budget"), "{why}");
    // A victim within reach is found.
    s.slot.call_control("set_target", &[300]).unwrap();
    assert_eq!(s.evict_one(), 300);
}

#[test]
fn a_native_policy_walks_the_candidates_page_by_page() {
    let s = full(700, Runtime::default());
    // Evicts the owner's most recently used page: the last candidate of the last page.
    let mru = |_: &VictimEnv, c: &Candidates<'_>| c.iter().count().checked_sub(1).ok_or_else(|| Invalid::new("none"));
    s.slot.bind_native(Arc::new(mru), false);
    assert_eq!(s.evict_one(), 699);
    assert_eq!(page_id(1, 699), (1 << 32) | 699);
}

/// Pages a graft passed over before its choice move behind the owner's others: a graft that
/// keeps 400 pages looks at them once, not at every eviction, and still evicts what a scan in
/// LRU order would (the oldest page it does not keep, one after another). The kept pages stay.
#[test]
fn pages_passed_over_are_not_offered_first_again() {
    let s = full(700, Runtime::default());
    let looked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = looked.clone();
    let keep_first_400 = move |_: &VictimEnv, c: &Candidates<'_>| {
        c.iter()
            .inspect(|_| {
                seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
            .position(|p| p & 0xffff_ffff >= 400)
            .ok_or_else(|| Invalid::new("all kept"))
    };
    s.slot.bind_native(Arc::new(keep_first_400), false);
    // (The device holds 16 blocks past the owner's.)
    let gone: Vec<u64> = (0..16).map(|_| s.evict_one()).collect();
    assert_eq!(
        gone,
        (400..416).collect::<Vec<_>>(),
        "the oldest pages not kept, in order"
    );
    let looked = looked.load(std::sync::atomic::Ordering::Relaxed);
    // The first eviction looks at the 400 kept pages; each later one at the kernel's candidate
    // (block 0, still the oldest in the cache's own order) and the next page not kept.
    assert!(looked <= 401 + 15 * 2, "{looked} candidates looked at for 16 evictions");
    assert!((0..400).all(|b| s.cache.contains(1, b)), "a kept page went");
    assert_eq!(s.failures(), 0);
}
