//! The in-memory device: fault injection and the crash model.

mod common;

use common::pattern;
use std::collections::HashSet;
use vino_blockdev::rng::SplitMix64;
use vino_blockdev::{BLOCK_SIZE, BlockDevice, CrashOptions, MemDevice};

const BLOCKS: u64 = 32;

fn block(image: &[u8], b: u64) -> &[u8] {
    &image[b as usize * BLOCK_SIZE..(b as usize + 1) * BLOCK_SIZE]
}

/// A device with block b holding version 0 (flushed), then a random run of unflushed writes.
/// Returns the device and, per block, every version it may hold after a crash.
fn scenario(seed: u64) -> (MemDevice, Vec<Vec<Vec<u8>>>) {
    let dev = MemDevice::new(BLOCKS);
    let mut versions: Vec<Vec<Vec<u8>>> = (0..BLOCKS).map(|b| vec![pattern(b, 0)]).collect();
    for b in 0..BLOCKS {
        dev.write_blocks(b, &pattern(b, 0)).unwrap();
    }
    dev.flush().unwrap();
    let mut rng = SplitMix64::new(seed);
    for v in 1..=40u8 {
        let b = rng.below(BLOCKS - 1);
        let n = 1 + rng.below(2);
        let mut data = Vec::new();
        for i in 0..n {
            data.extend(pattern(b + i, v));
            versions[(b + i) as usize].push(pattern(b + i, v));
        }
        dev.write_blocks(b, &data).unwrap();
    }
    (dev, versions)
}

#[test]
fn flushed_data_always_survives_and_nothing_else_appears() {
    for seed in 0..20 {
        let (dev, versions) = scenario(seed);
        assert_eq!(dev.unflushed_writes(), 40);
        let options = CrashOptions {
            survive: 0.4,
            tear: 0.3,
            sector_bytes: 512,
        };
        let image = dev.crash_image_with(seed * 7919, &options);
        for b in 0..BLOCKS {
            // Sector by sector, each piece is one the block held at some point since the flush.
            for (s, got) in block(&image, b).chunks(512).enumerate() {
                let allowed = versions[b as usize].iter().any(|v| &v[s * 512..(s + 1) * 512] == got);
                assert!(
                    allowed,
                    "seed {seed}: block {b} sector {s} holds data never written there"
                );
            }
        }
    }
}

#[test]
fn with_no_tearing_blocks_hold_whole_versions() {
    let (dev, versions) = scenario(3);
    let image = dev.crash_image_with(
        11,
        &CrashOptions {
            survive: 0.5,
            tear: 0.0,
            sector_bytes: 512,
        },
    );
    for b in 0..BLOCKS {
        assert!(
            versions[b as usize].iter().any(|v| v.as_slice() == block(&image, b)),
            "block {b} is torn"
        );
    }
}

#[test]
fn the_crash_model_is_seeded_and_varied() {
    let (dev, _) = scenario(5);
    assert!(dev.crash_image(1) == dev.crash_image(1), "same seed, same crash");
    let outcomes: HashSet<Vec<u8>> = (0..16).map(|s| dev.crash_image(s)).collect();
    assert!(outcomes.len() > 8, "different seeds give different crashes");
    // The extremes: everything survives, nothing does.
    let all = dev.crash_image_with(
        0,
        &CrashOptions {
            survive: 1.0,
            tear: 0.0,
            sector_bytes: 512,
        },
    );
    assert!(all == dev.image());
    let none = dev.crash_image_with(
        0,
        &CrashOptions {
            survive: 0.0,
            tear: 0.0,
            sector_bytes: 512,
        },
    );
    assert!(none == dev.durable_image());
    // A crash leaves the device itself alone.
    assert_eq!(dev.unflushed_writes(), 40);
}

#[test]
fn after_a_flush_a_crash_loses_nothing() {
    let (dev, _) = scenario(9);
    dev.flush().unwrap();
    assert_eq!(dev.unflushed_writes(), 0);
    assert!(dev.durable_image() == dev.image());
    for seed in 0..5 {
        assert!(dev.crash_image(seed) == dev.image());
    }
}

#[test]
fn power_cut_in_place_and_crashed_copies() {
    let (dev, _) = scenario(12);
    let expected = dev.crash_image(77);
    let copy = dev.crashed(77);
    assert!(copy.image() == expected);
    assert!(copy.durable_image() == expected, "what survived is durable");
    dev.power_cut(77, &CrashOptions::default());
    assert!(dev.image() == expected);
    assert_eq!(dev.unflushed_writes(), 0);
}

#[test]
fn injected_faults() {
    let dev = MemDevice::new(8);
    dev.fail_write(2);
    dev.write_blocks(0, &pattern(0, 1)).unwrap();
    let e = dev.write_blocks(1, &pattern(1, 1)).unwrap_err();
    assert!(e.to_string().contains("injected failure of write #2"), "{e}");
    assert!(
        block(&dev.image(), 1).iter().all(|&x| x == 0),
        "a failed write writes nothing"
    );
    dev.write_blocks(1, &pattern(1, 1)).unwrap();

    dev.fail_read(1);
    let mut buf = vec![0u8; BLOCK_SIZE];
    assert!(dev.read_blocks(0, &mut buf).is_err());
    dev.read_blocks(0, &mut buf).unwrap();
    assert!(buf == pattern(0, 1));

    dev.fail_flush(1);
    assert!(dev.flush().is_err());
    assert_eq!(dev.unflushed_writes(), 2, "a failed flush makes nothing durable");
    dev.flush().unwrap();
    assert_eq!(dev.unflushed_writes(), 0);

    dev.set_dead(true);
    assert!(dev.read_blocks(0, &mut buf).is_err());
    assert!(dev.write_blocks(0, &buf).is_err());
    assert!(dev.flush().is_err());
    dev.set_dead(false);
    dev.read_blocks(0, &mut buf).unwrap();

    let s = dev.stats();
    assert_eq!(s.errors, 6);
    assert_eq!((s.writes, s.reads, s.flushes), (2, 2, 1));
}

#[test]
fn images_must_be_whole_blocks() {
    assert!(MemDevice::from_image(vec![0; 100]).is_err());
    let dev = MemDevice::from_image(pattern(0, 4)).unwrap().with_name("small");
    assert_eq!(dev.name(), "small");
    assert_eq!(dev.block_count(), 1);
    assert!(dev.durable_image() == pattern(0, 4));
    let e = dev.read_blocks(1, &mut vec![0; BLOCK_SIZE]).unwrap_err();
    assert!(e.to_string().starts_with("small:"), "{e}");
}
