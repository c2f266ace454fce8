//! Stream files at the file system's level: binding a codec's module, chunks stored out of
//! place through the chunk map, cuts, frees, crashes mid-write, and fsck's checks of the maps.
//! (The codec itself and the page cache above are the kernel's: `vino-kernel`'s tests.)

mod common;

use common::*;
use std::sync::Arc;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::layout::{CHUNK_BYTES, CHUNKS_PER_MAP};
use vino_fs::{FsErrorKind, NewChunk, NewFile, fsck};

const MODULE: [u8; 32] = [7; 32];

fn dev() -> Arc<MemDevice> {
    fresh(8192, &small_opts(2048))
}

fn chunk(byte: u8, len: usize) -> Vec<u8> {
    vec![byte; len]
}

fn store(fs: &vino_fs::FileSystem, ino: u64, index: u64, coded: &[u8], plain_len: usize) -> bool {
    let generation = fs.stat(ino).unwrap().generation;
    let new = NewChunk {
        coded,
        raw: false,
        plain_len,
        nonce: [index as u8; 24],
    };
    fs.write_chunk(ino, generation, index, &new).unwrap()
}

#[test]
fn a_bound_file_stores_chunks_out_of_place_and_frees_them() {
    let dev = dev();
    let fs = mount(&dev);
    let d = fs.mkdir(fs.root(), "enc", &NewFile::by(1)).unwrap();
    fs.bind_stream(d, Some(MODULE)).unwrap();
    // Inherited by what is made in the directory.
    let f = fs.create(d, "f", &NewFile::by(1)).unwrap();
    assert_eq!(fs.stat(f).unwrap().stream, Some(MODULE));
    let sub = fs.mkdir(d, "sub", &NewFile::by(1)).unwrap();
    assert_eq!(fs.stat(sub).unwrap().stream, Some(MODULE));
    // Its blocks are not data: the block paths refuse it.
    assert_eq!(fs.locate(f, 0).unwrap_err().kind(), FsErrorKind::InvalidArgument);
    assert_eq!(
        fs.read_at(f, 0, &mut [0; 8]).unwrap_err().kind(),
        FsErrorKind::InvalidArgument
    );

    let size = (CHUNKS_PER_MAP + 2) * CHUNK_BYTES as u64;
    fs.extend_size(f, size).unwrap();
    // A chunk past the first map block makes a second map block.
    assert!(store(&fs, f, 0, &chunk(1, 5000), CHUNK_BYTES));
    assert!(store(&fs, f, CHUNKS_PER_MAP + 1, &chunk(2, 69_000), CHUNK_BYTES));
    let blocks = fs.stat(f).unwrap().blocks;
    // 2 blocks + 17 blocks of chunks, 2 map blocks.
    assert_eq!(blocks, 2 + 17 + 2);
    // Rewritten out of place: the old blocks go.
    let first = fs.read_chunk(f, 0).unwrap();
    assert!(store(&fs, f, 0, &chunk(3, 9000), CHUNK_BYTES));
    let second = fs.read_chunk(f, 0).unwrap();
    assert_eq!(second.coded, chunk(3, 9000));
    assert_eq!(second.entry.nonce, [0; 24]);
    assert_ne!(first.entry.blocks, second.entry.blocks);
    assert_eq!(fs.stat(f).unwrap().blocks, 3 + 17 + 2);
    assert!(fs.read_chunk(f, 5).unwrap().entry.is_hole());
    fs.commit().unwrap();
    assert_clean(&*dev, "two chunks stored");

    // A cut inside chunk 0 keeps its valid bytes; the rest go with their map block.
    fs.truncate(f, 100).unwrap();
    let cut = fs.read_chunk(f, 0).unwrap();
    assert_eq!((cut.entry.valid_len, cut.entry.plain_len), (100, CHUNK_BYTES as u32));
    assert_eq!(fs.stat(f).unwrap().blocks, 3 + 1);
    // A chunk past the end is not stored.
    assert!(!store(&fs, f, 3, &chunk(4, 100), 100));
    assert_eq!(fs.stat(f).unwrap().blocks, 3 + 1);
    fs.commit().unwrap();
    assert_clean(&*dev, "cut");

    // A bound file with data cannot be unbound; an empty one can.
    assert_eq!(
        fs.bind_stream(f, None).unwrap_err().kind(),
        FsErrorKind::InvalidArgument
    );
    let free_before = fs.stats().free_blocks;
    fs.unlink(d, "f").unwrap();
    fs.commit().unwrap();
    assert_eq!(fs.stats().free_blocks, free_before + 4);
    let e = fs.create(d, "e", &NewFile::by(1)).unwrap();
    fs.bind_stream(e, None).unwrap();
    assert_eq!(fs.stat(e).unwrap().stream, None);
    fs.unmount().unwrap();
    assert_clean(&*dev, "unlinked");
    // The binding survives a remount.
    let fs = mount(&dev);
    assert_eq!(fs.stat(sub).unwrap().stream, Some(MODULE));
}

#[test]
fn a_batch_of_chunks_lies_in_order_and_stores_only_what_the_file_reaches() {
    let dev = dev();
    let fs = mount(&dev);
    let f = fs.create(fs.root(), "f", &NewFile::by(1)).unwrap();
    fs.bind_stream(f, Some(MODULE)).unwrap();
    let size = 3 * CHUNK_BYTES as u64 + 10;
    fs.extend_size(f, size).unwrap();
    let coded: Vec<Vec<u8>> = (0..5u8).map(|i| chunk(i + 1, 5000 + 3000 * i as usize)).collect();
    let batch: Vec<(u64, NewChunk<'_>)> = coded
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let plain_len = if i == 3 { 10 } else { CHUNK_BYTES };
            let new = NewChunk {
                coded: c,
                raw: false,
                plain_len,
                nonce: [i as u8; 24],
            };
            (i as u64, new)
        })
        .collect();
    let generation = fs.stat(f).unwrap().generation;
    // Chunk 4 lies past the end: it is not stored (and its blocks go back).
    let stored = fs.write_chunks(f, generation, &batch).unwrap();
    assert_eq!(stored, vec![true, true, true, true, false]);
    let entries: Vec<_> = (0..4).map(|i| fs.read_chunk(f, i).unwrap()).collect();
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.coded, coded[i], "chunk {i}");
        assert_eq!(e.entry.nonce, [i as u8; 24]);
    }
    assert_eq!(entries[3].entry.valid_len, 10);
    // One after another on the device: one request for the batch.
    let blocks: Vec<u64> = entries.iter().flat_map(|e| e.entry.blocks.clone()).collect();
    assert!(blocks.windows(2).all(|w| w[1] == w[0] + 1), "{blocks:?}");
    assert!(fs.read_chunk(f, 4).unwrap().entry.is_hole());
    // A chunk of another generation's file stores nothing.
    assert_eq!(fs.write_chunks(f, generation + 1, &batch[..1]).unwrap(), vec![false]);
    fs.commit().unwrap();
    assert_clean(&*dev, "a batch stored");
}

/// An unlinked stream file's chunks go a slice at a time (a few map blocks' chunks per
/// operation), not all under the lock at once.
#[test]
fn a_big_stream_file_is_freed_a_slice_at_a_time() {
    let dev = fresh(16_384, &small_opts(4096));
    let fs = mount(&dev);
    let free = |fs: &vino_fs::FileSystem| fs.stats().free_blocks;
    let before = free(&fs);
    let f = fs.create(fs.root(), "big", &NewFile::by(1)).unwrap();
    fs.bind_stream(f, Some(MODULE)).unwrap();
    let chunks = 12 * CHUNKS_PER_MAP + 5;
    fs.extend_size(f, chunks * CHUNK_BYTES as u64).unwrap();
    let coded = chunk(9, CHUNK_BYTES);
    let generation = fs.stat(f).unwrap().generation;
    for first in (0..chunks).step_by(16) {
        let batch: Vec<(u64, NewChunk<'_>)> = (first..(first + 16).min(chunks))
            .map(|i| {
                let new = NewChunk {
                    coded: &coded,
                    raw: true,
                    plain_len: CHUNK_BYTES,
                    nonce: [0; 24],
                };
                (i, new)
            })
            .collect();
        assert!(fs.write_chunks(f, generation, &batch).unwrap().iter().all(|&s| s));
    }
    assert!(fs.stat(f).unwrap().blocks > vino_fs::FREE_SLICE);
    fs.unlink_keep(fs.root(), "big").unwrap();
    let ops = |fs: &vino_fs::FileSystem| fs.stats().meta.ops;
    let o = ops(&fs);
    fs.release_orphan(f).unwrap();
    assert!(ops(&fs) - o >= 3, "released in {} operations", ops(&fs) - o);
    assert_eq!(free(&fs), before, "every chunk back");
    fs.sync().unwrap();
    assert_clean(&*dev, "a big stream file freed in slices");
}

#[test]
fn a_power_cut_leaves_the_old_chunk_or_the_new() {
    let dev = dev();
    let fs = mount(&dev);
    let f = fs.create(fs.root(), "f", &NewFile::by(1)).unwrap();
    fs.bind_stream(f, Some(MODULE)).unwrap();
    fs.extend_size(f, CHUNK_BYTES as u64).unwrap();
    assert!(store(&fs, f, 0, &chunk(1, 20_000), CHUNK_BYTES));
    fs.fsync(f).unwrap();
    assert!(store(&fs, f, 0, &chunk(2, 30_000), CHUNK_BYTES));
    let mut images: Vec<(Vec<u8>, bool)> = (0..6).map(|seed| (dev.crash_image(seed), false)).collect();
    fs.fsync(f).unwrap();
    images.extend((0..3).map(|seed| (dev.crash_image(seed), true)));
    for (i, (image, synced)) in images.into_iter().enumerate() {
        let crashed = Arc::new(MemDevice::from_image(image).unwrap());
        let fs = mount(&crashed);
        let got = fs.read_chunk(f, 0).unwrap();
        let new = got.coded == chunk(2, 30_000);
        assert!(
            new || got.coded == chunk(1, 20_000),
            "image {i}: a torn chunk of {} bytes",
            got.coded.len()
        );
        assert!(new || !synced, "image {i}: a synced chunk was lost");
        fs.unmount().unwrap();
        assert_clean(&*crashed, "after the power cut");
    }
}

#[test]
fn fsck_drops_a_chunk_that_names_anothers_block() {
    let dev = dev();
    let fs = mount(&dev);
    let f = fs.create(fs.root(), "f", &NewFile::by(1)).unwrap();
    fs.bind_stream(f, Some(MODULE)).unwrap();
    fs.extend_size(f, 2 * CHUNK_BYTES as u64).unwrap();
    assert!(store(&fs, f, 0, &chunk(1, 4096), CHUNK_BYTES));
    assert!(store(&fs, f, 1, &chunk(2, 4096), CHUNK_BYTES));
    let (a, b) = (fs.read_chunk(f, 0).unwrap(), fs.read_chunk(f, 1).unwrap());
    fs.unmount().unwrap();
    // Find the map block on the device and point chunk 1 at chunk 0's block.
    let map = find_map_block(&*dev, b.entry.blocks[0]);
    let mut buf = vec![0u8; 4096];
    dev.read_blocks(map, &mut buf).unwrap();
    let mut parsed = vino_fs::layout::ChunkMap::decode(&buf, f, 0).unwrap();
    parsed.entries[1].blocks = a.entry.blocks.clone();
    parsed.encode(&mut buf, f, 0);
    dev.write_blocks(map, &buf).unwrap();
    let report = fsck(&*dev, true).unwrap();
    assert!(
        report.problems.iter().any(|p| p.detail.contains("chunk 1")),
        "{:?}",
        report.problems
    );
    assert_clean(&*dev, "repaired");
    let fs = mount(&dev);
    assert!(fs.read_chunk(f, 1).unwrap().entry.is_hole());
    assert_eq!(fs.read_chunk(f, 0).unwrap().coded, chunk(1, 4096));
}

/// The block holding a chunk map that names `data` (the last such: the journal, at the start
/// of the device, may hold old copies).
fn find_map_block(dev: &dyn BlockDevice, data: u64) -> u64 {
    let mut buf = vec![0u8; 4096];
    for b in (0..dev.block_count()).rev() {
        dev.read_blocks(b, &mut buf).unwrap();
        if &buf[..4] == b"CHKM" && buf.windows(4).any(|w| w == (data as u32).to_le_bytes()) {
            return b;
        }
    }
    panic!("no map block names block {data}");
}
