//! Punched holes and zeroed ranges (fallocate's `PUNCH_HOLE` and `ZERO_RANGE`) on the uncached
//! path: which bytes read as zeros, which blocks go or stay, the size, the owner's quota, a full
//! disk, and a clean image after remount.

mod common;

use common::*;
use std::sync::Arc;
use vino_blockdev::MemDevice;
use vino_fs::layout::{NDIRECT, NINDIRECT};
use vino_fs::{BS, FileSystem, FsError, MountOptions, NewFile, Quota, UNLIMITED};

const B: u64 = BS as u64;

fn nf() -> NewFile {
    NewFile::by(7)
}

fn errno<T: std::fmt::Debug>(r: vino_fs::Result<T>) -> i32 {
    r.expect_err("an error").errno()
}

fn tick() {
    std::thread::sleep(std::time::Duration::from_millis(2));
}

/// A file of `blocks` blocks of pattern bytes; returns its inode and its bytes.
fn patterned(fs: &FileSystem, name: &str, blocks: u64) -> (u64, Vec<u8>) {
    let f = fs.create(fs.root(), name, &nf()).unwrap();
    let bytes = pattern(f, (blocks * B) as usize);
    assert_eq!(fs.write_at(f, 0, &bytes).unwrap(), bytes.len());
    (f, bytes)
}

fn blocks(fs: &FileSystem, ino: u64) -> u64 {
    fs.stat(ino).unwrap().blocks
}

/// Checks the file holds exactly `want`, then that the image is clean after a sync, and again
/// after a remount (the journal replayed).
fn check_durable(dev: &Arc<MemDevice>, fs: Arc<FileSystem>, ino: u64, want: &[u8], context: &str) -> Arc<FileSystem> {
    assert_eq!(read_all(&fs, ino), want, "{context}");
    fs.sync().unwrap();
    assert_clean(&**dev, context);
    fs.verify_quota().unwrap();
    fs.unmount().unwrap();
    assert_clean(&**dev, &format!("{context}, unmounted"));
    let fs = mount(dev);
    assert_eq!(read_all(&fs, ino), want, "{context}, remounted");
    fs
}

#[test]
fn a_punched_hole_frees_whole_blocks_and_zeroes_its_edges() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let (f, mut want) = patterned(&fs, "f", 40);
    let (size, held) = (fs.stat(f).unwrap().size, blocks(&fs, f));
    let m0 = fs.stat(f).unwrap().mtime_ns;
    tick();
    // The middle: blocks 4..10 go, the bytes of blocks 3 and 10 in the range become zeros.
    let (off, end) = (3 * B + 100, 10 * B + 200);
    fs.punch_hole(f, off, end - off).unwrap();
    want[off as usize..end as usize].fill(0);
    let st = fs.stat(f).unwrap();
    assert_eq!((st.size, st.blocks), (size, held - 6));
    assert!(st.mtime_ns > m0 && st.ctime_ns > m0);
    assert_eq!(read_all(&fs, f), want);
    // The first block whole; then a range inside one block (nothing freed).
    fs.punch_hole(f, 0, B).unwrap();
    want[..BS].fill(0);
    fs.punch_hole(f, 20 * B + 10, 40).unwrap();
    want[20 * BS + 10..20 * BS + 50].fill(0);
    assert_eq!(blocks(&fs, f), held - 7);
    assert_eq!(read_all(&fs, f), want);
    // Again over a hole: nothing changes.
    fs.punch_hole(f, 4 * B, 6 * B).unwrap();
    assert_eq!(blocks(&fs, f), held - 7);
    // A write into the hole: the rest of its block reads as zeros.
    fs.write_at(f, 5 * B + 7, b"abc").unwrap();
    want[5 * BS + 7..5 * BS + 10].copy_from_slice(b"abc");
    assert_eq!(read_all(&fs, f), want);
    check_durable(&dev, fs, f, &want, "after punching");
}

#[test]
fn a_hole_past_the_end_frees_preallocated_blocks_and_keeps_the_size() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let (f, mut want) = patterned(&fs, "f", 4);
    let size = 4 * B - 1000;
    fs.truncate(f, size).unwrap();
    want.truncate(size as usize);
    fs.fallocate(f, size, 12 * B, true).unwrap();
    let held = blocks(&fs, f);
    // From inside the last block to far past the end: its bytes below the end become zeros,
    // the preallocated blocks go (and the indirect block that mapped some), the size stays.
    fs.punch_hole(f, size - 100, 40 * B).unwrap();
    want[size as usize - 100..].fill(0);
    assert_eq!(fs.stat(f).unwrap().size, size);
    assert_eq!(blocks(&fs, f), held - 13);
    assert_eq!(read_all(&fs, f), want);
    // Wholly past the end.
    fs.fallocate(f, 8 * B, 2 * B, true).unwrap();
    fs.punch_hole(f, 6 * B, 10 * B).unwrap();
    assert_eq!(blocks(&fs, f), held - 13);
    // Growing the file over the hole shows zeros.
    fs.truncate(f, 20 * B).unwrap();
    want.resize(20 * BS, 0);
    check_durable(&dev, fs, f, &want, "after punching past the end");
}

/// A sparse file with data in the last direct block, the single indirect span and two spans of
/// the double indirect one: each punch frees the indirect blocks left mapping nothing.
#[test]
fn punching_across_indirect_blocks_frees_those_left_empty() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let f = fs.create(fs.root(), "sparse", &nf()).unwrap();
    let double = NDIRECT + NINDIRECT;
    let at = [NDIRECT - 1, NDIRECT, double, double + NINDIRECT];
    for &fb in &at {
        fs.write_at(f, fb * B, &pattern(fb, BS)).unwrap();
    }
    // 4 data blocks, the single indirect, the double one and two of its second level.
    assert_eq!(blocks(&fs, f), 8);
    let mut want = vec![0u8; ((at[3] + 1) * B) as usize];
    for &fb in &at {
        want[(fb * B) as usize..((fb + 1) * B) as usize].copy_from_slice(&pattern(fb, BS));
    }
    // Across the direct/indirect boundary: block 12 and its indirect block go.
    fs.punch_hole(f, NDIRECT * B, 10 * B).unwrap();
    want[(NDIRECT * B) as usize..((NDIRECT + 1) * B) as usize].fill(0);
    assert_eq!(blocks(&fs, f), 6);
    // The first span of the double indirect: its second-level block goes, the top one stays.
    fs.punch_hole(f, (double - 5) * B, 10 * B).unwrap();
    want[(double * B) as usize..((double + 1) * B) as usize].fill(0);
    assert_eq!(blocks(&fs, f), 4);
    // The rest: the double indirect block goes too.
    fs.punch_hole(f, (double + 1) * B, NINDIRECT * 4 * B).unwrap();
    want[(at[3] * B) as usize..].fill(0);
    assert_eq!(blocks(&fs, f), 1);
    assert_eq!(read_all(&fs, f), want);
    let fs = check_durable(&dev, fs, f, &want, "after punching the indirect spans");
    // Writing there again maps it afresh.
    fs.write_at(f, at[3] * B, b"again").unwrap();
    want[(at[3] * B) as usize..(at[3] * B) as usize + 5].copy_from_slice(b"again");
    assert_eq!(blocks(&fs, f), 4);
    check_durable(&dev, fs, f, &want, "after writing into the double indirect span again");
}

#[test]
fn a_zeroed_range_reads_as_zeros_and_stays_allocated() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let (f, mut want) = patterned(&fs, "f", 10);
    let held = blocks(&fs, f);
    let m0 = fs.stat(f).unwrap().mtime_ns;
    tick();
    fs.zero_range(f, B + 5, 3 * B, true).unwrap();
    want[BS + 5..4 * BS + 5].fill(0);
    let st = fs.stat(f).unwrap();
    assert_eq!((st.size, st.blocks), (10 * B, held));
    assert!(st.mtime_ns > m0);
    assert_eq!(read_all(&fs, f), want);
    // Over a hole: its blocks are allocated (a later write there cannot want space).
    fs.punch_hole(f, 6 * B, 2 * B).unwrap();
    want[6 * BS..8 * BS].fill(0);
    assert_eq!(blocks(&fs, f), held - 2);
    fs.zero_range(f, 6 * B, 2 * B, true).unwrap();
    assert_eq!(blocks(&fs, f), held);
    // Past the end, keeping the size: allocated, the size stays.
    fs.zero_range(f, 9 * B + 10, 2 * B, true).unwrap();
    want[9 * BS + 10..].fill(0);
    assert_eq!(fs.stat(f).unwrap().size, 10 * B);
    assert_eq!(blocks(&fs, f), held + 2);
    assert_eq!(read_all(&fs, f), want);
    // Past the end, growing: the size covers the range.
    fs.zero_range(f, 11 * B, 2 * B + 7, false).unwrap();
    want.resize(13 * BS + 7, 0);
    assert_eq!(fs.stat(f).unwrap().size, 13 * B + 7);
    assert_eq!(read_all(&fs, f), want);
    check_durable(&dev, fs, f, &want, "after zeroing");
}

#[test]
fn bad_ranges_and_files_are_refused() {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let (f, _) = patterned(&fs, "f", 1);
    let root = fs.root();
    assert_eq!(errno(fs.punch_hole(f, 0, 0)), 22);
    assert_eq!(errno(fs.zero_range(f, 0, 0, true)), 22);
    assert_eq!(errno(fs.punch_hole(f, vino_fs::MAX_FILE_SIZE, 1)), 27);
    assert_eq!(errno(fs.zero_range(f, u64::MAX - 1, 10, false)), 27);
    assert_eq!(errno(fs.punch_hole(root, 0, 10)), 21);
    assert_eq!(errno(fs.zero_range(root, 0, 10, true)), 21);
}

/// A zeroed range that cannot get its blocks (a full disk, the owner's quota) changes nothing:
/// the data stays.
#[test]
fn a_zeroed_range_without_room_is_refused_whole() {
    let dev = fresh(4096, &small_opts(1024));
    let quota = Quota {
        user_blocks: Some(30),
        user_inodes: Some(UNLIMITED),
        root_reserve_percent: 0,
        user_links: Some(UNLIMITED),
    };
    let opts = MountOptions {
        quota,
        ..MountOptions::default()
    };
    let fs = mount_with(&dev, &opts);
    let who = NewFile {
        uid: 1000,
        gid: 1000,
        ..nf()
    };
    let f = fs.create(fs.root(), "f", &who).unwrap();
    let want = pattern(f, 10 * BS);
    fs.write_at(f, 0, &want).unwrap();
    let used = fs.quota_usage(1000).blocks;
    let e = fs.zero_range(f, 0, 40 * B, false).unwrap_err();
    assert!(matches!(e, FsError::QuotaExceeded), "{e}");
    assert_eq!(read_all(&fs, f), want);
    assert_eq!(fs.quota_usage(1000).blocks, used);
    // A punched hole gives its blocks back.
    fs.punch_hole(f, 2 * B, 5 * B).unwrap();
    assert_eq!(fs.quota_usage(1000).blocks, used - 5);
    fs.verify_quota().unwrap();
    // A full disk: the same.
    let g = fs.create(fs.root(), "g", &nf()).unwrap();
    let gdata = pattern(g, 4 * BS);
    fs.write_at(g, 0, &gdata).unwrap();
    let free = fs.stats().free_blocks;
    assert_eq!(errno(fs.zero_range(g, 0, (free + 10) * B, false)), 28);
    assert_eq!(read_all(&fs, g), gdata);
    assert_eq!(fs.stats().free_blocks, free);
    fs.sync().unwrap();
    assert_clean(&*dev, "after the refusals");
}
