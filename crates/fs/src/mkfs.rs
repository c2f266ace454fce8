//! Making a file system.

use crate::error::{FsError, Result};
use crate::journal::JournalHeader;
use crate::layout::*;
use vino_blockdev::{BlockDevice, SharedClock};

/// How to lay out a new file system. `Default` suits devices from a few MiB up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MkfsOptions {
    /// Use only the first this many blocks of the device (default: all, at most 2^32 - 1).
    pub blocks: Option<u64>,
    /// Blocks per cylinder group, a multiple of 8 in 64..=32768 (default 32768, 128 MiB; a
    /// device smaller than one group gets one group).
    pub blocks_per_group: u32,
    /// One inode per this many bytes of group (default 16384), unless `inodes_per_group`.
    pub bytes_per_inode: u64,
    pub inodes_per_group: Option<u32>,
    /// Journal size in blocks, its two headers included (default: 1/32 of the device, at
    /// least 4 blocks per group plus 66 and at most 8192, bounded by group 0's room; at least
    /// 4 blocks per group plus 66 in any case).
    pub journal_blocks: Option<u32>,
    /// FFS's maxbpg (default: a quarter of a group).
    pub maxbpg: Option<u32>,
    /// The file system's identity (default: random); a simulation fixes it to replay a seed.
    pub fs_id: Option<u64>,
    /// Where the root's timestamps come from.
    pub clock: SharedClock,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions {
            blocks: None,
            blocks_per_group: MAX_BLOCKS_PER_GROUP,
            bytes_per_inode: 16384,
            inodes_per_group: None,
            journal_blocks: None,
            maxbpg: None,
            fs_id: None,
            clock: SharedClock::default(),
        }
    }
}

/// What `mkfs` made.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MkfsReport {
    pub block_count: u64,
    pub groups: u32,
    pub blocks_per_group: u32,
    pub inodes_per_group: u32,
    pub inodes: u64,
    pub journal_blocks: u32,
    pub maxbpg: u32,
    /// Blocks that can hold file data and metadata (all the groups' data areas).
    pub data_blocks: u64,
    /// Of those, free after mkfs (the root and lost+found take one each).
    pub free_blocks: u64,
    pub fs_id: u64,
}

fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(crate::state::now_ns());
    h.write_u32(std::process::id());
    h.finish() | 1
}

/// Makes a file system on `dev`: empty but for the root directory and `lost+found`.
pub fn mkfs(dev: &dyn BlockDevice, opts: &MkfsOptions) -> Result<MkfsReport> {
    let mut sb = plan(dev, opts)?;
    let geo = Geometry::new(&sb).map_err(FsError::InvalidArgument)?;
    let zero = Box::new([0u8; BS]);

    // No valid superblock until the rest is written.
    dev.write_blocks(SB_PRIMARY, &zero[..])?;
    dev.write_blocks(SB_BACKUP, &zero[..])?;
    write_journal(dev, &geo, sb.fs_id)?;

    // Root (inode 1) and lost+found (inode 2), each with one directory block, in group 0.
    let root_block = geo.data_start(0);
    let lf_block = root_block + 1;
    let free_total = write_groups(dev, &geo, [root_block, lf_block])?;
    write_root(dev, &geo, sb.created_ns, root_block, lf_block)?;
    dev.flush()?;

    sb.state = STATE_CLEAN;
    let enc = sb.encode();
    dev.write_blocks(SB_PRIMARY, &enc[..])?;
    dev.write_blocks(SB_BACKUP, &enc[..])?;
    dev.flush()?;
    let data_blocks: u64 = (0..geo.groups).map(|g| geo.data_blocks(g)).sum();
    Ok(MkfsReport {
        block_count: sb.block_count,
        groups: sb.groups,
        blocks_per_group: sb.blocks_per_group,
        inodes_per_group: sb.inodes_per_group,
        inodes: geo.inode_count(),
        journal_blocks: sb.journal_blocks,
        maxbpg: sb.maxbpg,
        data_blocks,
        free_blocks: free_total,
        fs_id: sb.fs_id,
    })
}

fn inval(s: String) -> FsError {
    FsError::InvalidArgument(s)
}

/// The superblock of the file system `opts` asks for on `dev`, or why it cannot be made.
fn plan(dev: &dyn BlockDevice, opts: &MkfsOptions) -> Result<Superblock> {
    let mut n = opts
        .blocks
        .unwrap_or(dev.block_count())
        .min(dev.block_count())
        .min(u64::from(u32::MAX));
    if n < 128 {
        return Err(inval(format!(
            "{} blocks is too small for a file system (128 at least)",
            n
        )));
    }
    let (bpg, ipg) = group_shape(n, opts);
    let itable = u64::from(ipg) / INODES_PER_BLOCK;
    let overhead = 3 + itable;
    let mut groups = n.div_ceil(u64::from(bpg)) as u32;
    let last_len = n - u64::from(groups - 1) * u64::from(bpg);
    if groups > 1 && last_len < overhead + 16 {
        groups -= 1;
        n = u64::from(groups) * u64::from(bpg);
    }
    let group0_len = n.min(u64::from(bpg));
    let journal = journal_size(n, groups, group0_len, overhead, opts.journal_blocks)?;
    Ok(Superblock {
        block_count: n,
        blocks_per_group: bpg,
        inodes_per_group: ipg,
        groups,
        journal_blocks: journal as u32,
        maxbpg: opts.maxbpg.unwrap_or((bpg / 4).max(1)),
        fs_id: opts.fs_id.unwrap_or_else(random_id),
        state: STATE_CLEAN,
        mount_count: 0,
        created_ns: opts.clock.wall_ns(),
        mounted_ns: 0,
    })
}

/// Blocks and inodes per group for a file system of `n` blocks.
fn group_shape(n: u64, opts: &MkfsOptions) -> (u32, u32) {
    let mut bpg = opts.blocks_per_group.clamp(MIN_BLOCKS_PER_GROUP, MAX_BLOCKS_PER_GROUP) & !7;
    if n < u64::from(bpg) {
        bpg = (n as u32).div_ceil(8) * 8;
    }
    let ipg = match opts.inodes_per_group {
        Some(i) => i,
        None => {
            let per = (u64::from(bpg) * BS as u64 / opts.bytes_per_inode.max(BS as u64)).max(16);
            per.div_ceil(16) as u32 * 16
        }
    }
    .clamp(16, MAX_INODES_PER_GROUP)
        / 16
        * 16;
    (bpg, ipg)
}

/// The journal's size: the one asked for, or the default; either must hold the groups' headers
/// and fit group 0.
fn journal_size(n: u64, groups: u32, group0_len: u64, overhead: u64, asked: Option<u32>) -> Result<u64> {
    // Group 0 keeps room for its metadata and a few data blocks after the journal.
    let room = group0_len.saturating_sub(JOURNAL_START + overhead + 8);
    let journal = match asked {
        Some(j) => u64::from(j),
        None => (n / 32).min(8192).max(min_journal_blocks(groups)).min(room),
    };
    if journal < min_journal_blocks(groups) {
        return Err(inval(format!(
            "a journal of {journal} blocks is too small for {groups} groups (at least {})",
            min_journal_blocks(groups)
        )));
    }
    if journal > room {
        return Err(inval(format!(
            "a journal of {journal} blocks does not fit group 0 ({room} blocks of room)"
        )));
    }
    Ok(journal)
}

/// Journal: an empty log.
fn write_journal(dev: &dyn BlockDevice, geo: &Geometry, fs_id: u64) -> Result<()> {
    let zero = Box::new([0u8; BS]);
    let header = JournalHeader {
        fs_id,
        generation: 1,
        tail: 0,
        seq: 1,
    };
    dev.write_blocks(JOURNAL_START, &zero[..])?;
    dev.write_blocks(header.slot(), &header.encode()[..])?;
    dev.write_blocks(geo.log_start(), &zero[..])?;
    Ok(())
}

/// Every group's header, bitmaps and empty inode table, with the two directories' inodes and
/// blocks (`dir_blocks`) taken in group 0. Returns the free blocks.
fn write_groups(dev: &dyn BlockDevice, geo: &Geometry, dir_blocks: [u64; 2]) -> Result<u64> {
    let mut free_total = 0u64;
    let itable_zero = vec![0u8; geo.itable_blocks as usize * BS];
    for g in 0..geo.groups {
        let mut bb = initial_block_bitmap(geo, g);
        let mut ib = initial_inode_bitmap(geo);
        let mut h = GroupHeader {
            group: g,
            free_blocks: geo.data_blocks(g) as u32,
            free_inodes: geo.ipg as u32,
            dirs: 0,
            ..Default::default()
        };
        if g == 0 {
            for b in dir_blocks {
                set_bit(&mut bb[..], b, true);
            }
            set_bit(&mut ib[..], 0, true);
            set_bit(&mut ib[..], 1, true);
            h.free_blocks -= 2;
            h.free_inodes -= 2;
            h.dirs = 2;
        }
        h.inode_bitmap_crc = bitmap_crc(g, &ib[..]);
        h.block_bitmap_crc = bitmap_crc(g, &bb[..]);
        free_total += u64::from(h.free_blocks);
        let mut hb = [0u8; BS];
        h.encode_into(&mut hb);
        dev.write_blocks(geo.header(g), &hb)?;
        dev.write_blocks(geo.inode_bitmap(g), &ib[..])?;
        dev.write_blocks(geo.block_bitmap(g), &bb[..])?;
        dev.write_blocks(geo.itable(g), &itable_zero)?;
    }
    Ok(free_total)
}

/// The root's and lost+found's inodes and directory blocks.
fn write_root(dev: &dyn BlockDevice, geo: &Geometry, now: u64, root_block: u64, lf_block: u64) -> Result<()> {
    let mut itb = [0u8; BS];
    let lf_ino = ROOT_INO + 1;
    for (ino, block, nlink) in [(ROOT_INO, root_block, 3u32), (lf_ino, lf_block, 2)] {
        let mut i = Inode {
            mode: S_IFDIR | if ino == ROOT_INO { 0o755 } else { 0o700 },
            nlink,
            size: BS as u64,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            generation: 1,
            blocks: 1,
            ..Default::default()
        };
        i.direct[0] = block as u32;
        let (_, off) = geo.inode_location(ino);
        i.encode_into(ino, &mut itb[off..off + INODE_SIZE]);
    }
    dev.write_blocks(geo.itable(0), &itb)?;
    let mut d = [0u8; BS];
    dir_first_block(&mut d, ROOT_INO, ROOT_INO);
    let mut e = dir_records(&d).expect("fresh block");
    dir_add(&mut d, &mut e, ROOT_INO, b"lost+found", lf_ino, FT_DIR);
    dev.write_blocks(root_block, &d)?;
    dir_first_block(&mut d, lf_ino, ROOT_INO);
    dev.write_blocks(lf_block, &d)?;
    Ok(())
}
