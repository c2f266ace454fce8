//! A writer pays for its writes: past its share of dirty pages its own oldest go out before its
//! write returns, and another process's misses evict clean pages instead of waiting for the
//! writer's dirty ones to be written.

mod common;

use common::{file, setup};
use vino_blockdev::BLOCK_SIZE;
use vino_cache::{IoCtx, MIN_DIRTY_SHARE};

const BS: u64 = BLOCK_SIZE as u64;

#[test]
fn a_writer_past_its_share_writes_its_own_pages() {
    // 512 frames: a share of 25%, 128 pages.
    let s = setup(512, 2048);
    let f = file(0, 1024);
    let page = vec![7u8; BLOCK_SIZE];
    for i in 0..400 {
        s.cache.write(&IoCtx::new(1), 1, &f, i * BS, &page).unwrap();
        assert!(
            s.cache.stats().dirty <= 128,
            "page {i}: {} dirty",
            s.cache.stats().dirty
        );
    }
    let c = s.cache.process_counters(1);
    assert!(
        c.written_back >= 400 - 128,
        "the writer's pages went out: {}",
        c.written_back
    );
    s.cache.check_invariants();
}

#[test]
fn another_process_misses_on_clean_pages_not_on_the_writers_dirty_ones() {
    let s = setup(512, 4096);
    let (written, read) = (file(0, 1024), file(2048, 1024));
    let page = vec![7u8; BLOCK_SIZE];
    // Under the share: these stay dirty, and are the oldest pages in the cache.
    for i in 0..100 {
        s.cache.write(&IoCtx::new(1), 1, &written, i * BS, &page).unwrap();
    }
    assert!(100 < MIN_DIRTY_SHARE.max(128));
    let mut buf = vec![0u8; BLOCK_SIZE];
    for i in 0..1000 {
        s.cache.read(&IoCtx::new(2), 2, &read, i * BS, &mut buf).unwrap();
    }
    assert_eq!(s.cache.stats().dirty, 100, "the reader took clean frames");
    assert_eq!(s.cache.process_counters(1).written_back, 0);
    assert_eq!(s.cache.process_counters(2).written_back, 0);
    s.cache.check_invariants();
}

/// A writer that must not wait inside its write (the file system's data gate is held) writes
/// past its share, and pays before its next write instead.
#[test]
fn an_unthrottled_writer_pays_at_its_next_throttle() {
    let s = setup(512, 2048);
    let f = file(0, 1024);
    let page = vec![7u8; BLOCK_SIZE];
    for i in 0..300 {
        s.cache.write_unthrottled(&IoCtx::new(1), 1, &f, i * BS, &page).unwrap();
    }
    assert_eq!(s.cache.stats().dirty, 300, "nothing was written inside the writes");
    assert_eq!(s.cache.process_counters(1).written_back, 0);
    s.cache.throttle(1, 1);
    assert!(
        s.cache.stats().dirty <= 128,
        "{} dirty after the throttle",
        s.cache.stats().dirty
    );
    // Another process under its share does not wait.
    s.cache.throttle(2, 1);
    assert_eq!(s.cache.process_counters(2).written_back, 0);
    s.cache.check_invariants();
}
