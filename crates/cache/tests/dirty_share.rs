//! A writer pays for its writes: past its share of dirty pages its own oldest go out before its
//! write returns, and another process's misses evict clean pages instead of waiting for the
//! writer's dirty ones to be written. With a write-back thread, a writer past half its share
//! has its pages written behind it while it goes on.

mod common;

use common::{file, setup, setup_with};
use std::time::{Duration, Instant};
use vino_blockdev::{BLOCK_SIZE, BlockDevice};
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

/// Waits up to ten seconds for `done`.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_writeback_thread_writes_behind_a_writer_past_half_its_share() {
    // A share of 128 pages, write-behind from 64; an hour between policy rounds, so only
    // write-behind writes here.
    let s = setup_with(512, 2048, Some(Duration::from_secs(3600)));
    let f = file(0, 1024);
    let page = vec![7u8; BLOCK_SIZE];
    let before = s.device.stats();
    for i in 0..60 {
        s.cache.write(&IoCtx::new(1), 1, &f, i * BS, &page).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(s.cache.stats().dirty, 60, "under the mark nothing is written behind");
    for i in 60..100 {
        s.cache.write(&IoCtx::new(1), 1, &f, i * BS, &page).unwrap();
    }
    // The writer never reached its share: the thread wrote, not the writer's throttle.
    eventually("the thread writes the writer down to the mark", || {
        s.cache.stats().dirty <= 64
    });
    let written = s.cache.process_counters(1).written_back;
    assert!(written >= 36, "{written} pages written behind");
    // The oldest (lowest) pages went first, adjacent ones in one request each.
    let mut block = vec![0u8; BLOCK_SIZE];
    s.device.read_blocks(0, &mut block).unwrap();
    assert_eq!(block, page);
    let after = s.device.stats();
    let (requests, blocks) = (
        after.writes - before.writes,
        after.blocks_written - before.blocks_written,
    );
    assert!(requests * 8 <= blocks, "{requests} requests for {blocks} blocks");
    s.cache.check_invariants();
}

#[test]
fn adjacent_dirty_pages_reach_the_device_in_few_requests() {
    let s = setup(1024, 2048);
    let f = file(0, 1024);
    let before = s.device.stats();
    // 600 adjacent pages written out of order, and 10 scattered ones.
    for i in (0..600).rev() {
        s.cache
            .write_unthrottled(&IoCtx::new(1), 1, &f, i * BS, &[i as u8; BLOCK_SIZE])
            .unwrap();
    }
    for i in 0..10 {
        s.cache
            .write_unthrottled(&IoCtx::new(1), 1, &f, (700 + 20 * i) * BS, &[1; BLOCK_SIZE])
            .unwrap();
    }
    s.cache.sync_all().unwrap();
    let after = s.device.stats();
    assert_eq!(after.blocks_written - before.blocks_written, 610);
    // 600 pages in requests of at most 256, and the 10 apart.
    assert_eq!(after.writes - before.writes, 3 + 10);
    let mut block = vec![0u8; BLOCK_SIZE];
    for i in [0u64, 255, 256, 599] {
        s.device.read_blocks(i, &mut block).unwrap();
        assert!(block.iter().all(|&b| b == i as u8), "block {i}");
    }
    s.cache.check_invariants();
}
