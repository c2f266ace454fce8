//! Frames made ahead of need by the cache's warming thread (`CacheConfig::warm_ahead`).

mod common;

use common::{Queue, file};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vino_blockdev::{BLOCK_SIZE, IoQueue, MemDevice};
use vino_cache::{CacheConfig, IoCtx, PageCache};
use vino_graft::Runtime;

fn cache(frames: usize, warm_ahead: usize) -> Arc<PageCache> {
    let device = Arc::new(MemDevice::new(4096));
    let queue = IoQueue::new(device.clone(), 8).unwrap();
    PageCache::new(
        CacheConfig {
            frames,
            warm_ahead,
            writeback_every: None,
            ..CacheConfig::default()
        },
        Arc::new(Queue(queue)),
        &Runtime::default(),
    )
}

/// Waits until `cond` holds, for at most 20 s.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Threads of this process named `name`.
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

fn read(cache: &PageCache, blocks: std::ops::Range<u64>) {
    let f = file(0, 4096);
    let mut buf = vec![0u8; BLOCK_SIZE];
    for b in blocks {
        cache
            .read(&IoCtx::new(1), 1, &f, b * BLOCK_SIZE as u64, &mut buf)
            .unwrap();
    }
}

// One test: it counts this process's warming threads, which another test's cache would add to.
#[test]
fn frames_are_made_ahead_of_need_within_the_capacity_and_decide_nothing() {
    let warm = cache(1024, 256);
    eventually("the first frames are made", || warm.stats().made == 256);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(warm.stats().made, 256, "no more frames than asked for ahead of need");
    assert_eq!(warm.stats().resident, 0);

    // Taking the free frames below half the reserve asks for more, up to the reserve again.
    read(&warm, 0..200);
    let free = |s: vino_cache::CacheStats| s.made - s.resident;
    eventually("the reserve is made again", || free(warm.stats()) >= 128);
    std::thread::sleep(Duration::from_millis(50));
    assert!(free(warm.stats()) <= 256, "{:?}", warm.stats());

    // The same reads decide the same with frames made on need.
    let cold = cache(1024, 0);
    read(&cold, 0..200);
    assert_eq!(cold.stats().made, 200);
    for c in [&warm, &cold] {
        read(c, 100..1500);
        read(c, 0..100);
    }
    let (w, c) = (warm.stats(), cold.stats());
    assert_eq!(
        (w.made, w.resident),
        (1024, 1024),
        "never more frames than the capacity"
    );
    assert_eq!(w.total, c.total, "the counters differ with frames made ahead");
    for b in [0, 99, 700, 1499] {
        assert_eq!(warm.contains(1, b), cold.contains(1, b), "block {b}");
    }
    warm.check_invariants();

    // Every frame made: the thread has ended. A cache dropped ends its thread too.
    eventually("the warming thread ends", || threads_named("vino-cache-warm") == 0);
    let dropped = cache(1 << 20, 64);
    eventually("a new cache's first frames", || dropped.stats().made == 64);
    assert_eq!(threads_named("vino-cache-warm"), 1);
    drop(dropped);
    eventually("a dropped cache's thread ends", || {
        threads_named("vino-cache-warm") == 0
    });
}
