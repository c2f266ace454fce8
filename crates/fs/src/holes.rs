//! Punching holes and zeroing ranges of a file: Linux's `FALLOC_FL_PUNCH_HOLE` and
//! `FALLOC_FL_ZERO_RANGE` (fallocate(2)). Both leave the bytes of the range reading as zeros;
//! they differ in what holds them afterwards:
//!
//! * A punched hole holds no blocks: the blocks wholly inside the range are freed (journaled,
//!   given back to the owner's quota; an indirect block left mapping nothing goes too), a slice
//!   of [`FREE_SLICE`] blocks a transaction as a truncate frees them. The bytes of the partial
//!   blocks at its edges become zeros through the [`WriteTarget`] (the kernel's page cache),
//!   their blocks stay. The size never changes; blocks past the end of file in the range (a
//!   `KEEP_SIZE` preallocation) are freed too.
//! * A zeroed range holds blocks, as after [`FileSystem::fallocate`]: a later write there cannot
//!   fail for want of space. Its holes are allocated first, all or nothing (a full disk or
//!   quota changes nothing); then the blocks that held data are zeroed on the device (their
//!   pages dropped from the target first) and the partial edges through the target. Without
//!   `keep_size` the size grows to the range's end.
//!
//! Either changes mtime and ctime. Neither is atomic across a crash: a crash part way leaves
//! part of the range zeroed (or freed), the rest as it was.

use crate::error::{FsError, Result};
use crate::filesystem::FileSystem;
use crate::layout::*;
use crate::state::{FREE_SLICE, FsState, regular};
use crate::write::{BlockWrite, DeviceTarget, WriteTarget, write_zeros};
use std::ops::Range;

const ZEROS: [u8; BS] = [0; BS];

impl FileSystem {
    /// Punches a hole in bytes `[offset, offset + len)` of regular file `ino` on the uncached
    /// path (see [`crate::holes`]).
    pub fn punch_hole(&self, ino: u64, offset: u64, len: u64) -> Result<()> {
        self.punch_hole_with(ino, offset, len, &mut DeviceTarget(&**self.device()))
    }

    /// [`FileSystem::punch_hole`] with the partial edge blocks zeroed, and the freed blocks
    /// forgotten, through `target` (the kernel passes its page cache).
    pub fn punch_hole_with(&self, ino: u64, offset: u64, len: u64, target: &mut dyn WriteTarget) -> Result<()> {
        let end = range_end(offset, len)?;
        let (size, stream) = self.regular_size(ino)?;
        if stream {
            return self.zero_stream(ino, offset..end.min(size), target);
        }
        self.zero_edges(ino, offset..end, size, target)?;
        // Ordered mode: the zeroed edges reach the device before the commit that records the
        // hole (and with it any other file's fsync), as ext4 orders its partial-block zeroing.
        self.handed_over(ino);
        let whole = whole_blocks(offset..end);
        if !whole.is_empty() {
            // Before the blocks are freed, so that no dirty page is written back over a freed
            // block; and after, for a page a reader brought back in from one meanwhile.
            target.forget_range(whole.start, whole.end);
            self.free_hole(ino, whole.clone())?;
            target.forget_range(whole.start, whole.end);
        }
        self.in_transaction(|g| g.touch_data(ino))
    }

    /// Zeroes bytes `[offset, offset + len)` of regular file `ino`, leaving them allocated, on
    /// the uncached path (see [`crate::holes`]).
    pub fn zero_range(&self, ino: u64, offset: u64, len: u64, keep_size: bool) -> Result<()> {
        self.zero_range_with(ino, offset, len, keep_size, &mut DeviceTarget(&**self.device()))
    }

    /// [`FileSystem::zero_range`] with the partial edge blocks zeroed, and the pages of the
    /// blocks zeroed on the device forgotten, through `target` (the kernel's page cache).
    pub fn zero_range_with(
        &self,
        ino: u64,
        offset: u64,
        len: u64,
        keep_size: bool,
        target: &mut dyn WriteTarget,
    ) -> Result<()> {
        let end = range_end(offset, len)?;
        let (old, stream) = self.regular_size(ino)?;
        if stream {
            return self.zero_stream(ino, offset..if keep_size { end.min(old) } else { end }, target);
        }
        // The whole blocks holding data now: the allocation below zeroes those it allocates
        // and those past the end of file.
        let whole = whole_blocks(offset..end);
        let whole = whole.start..whole.end.min(old.div_ceil(BS as u64));
        let held = self.held_blocks(ino, whole.clone())?;
        self.fallocate_with(ino, offset, len, keep_size, target)?;
        self.zero_edges(ino, offset..end, old, target)?;
        self.handed_over(ino);
        if !held.is_empty() {
            // As for a punched hole: before (no dirty page written back over the zeros) and
            // after (no page read in meanwhile with the old bytes).
            target.forget_range(whole.start, whole.end);
            write_zeros(&**self.device(), held)?;
            target.forget_range(whole.start, whole.end);
        }
        self.in_transaction(|g| g.touch_data(ino))
    }

    /// Zeroes through `target` the bytes of `range` below `size` in the blocks `range` covers
    /// only in part (a hole there reads as zeros already).
    fn zero_edges(&self, ino: u64, range: Range<u64>, size: u64, target: &mut dyn WriteTarget) -> Result<()> {
        let bs = BS as u64;
        let mut edges = vec![range.start / bs, (range.end - 1) / bs];
        edges.dedup();
        for index in edges {
            let start = index * bs;
            let (lo, hi) = (range.start.max(start), range.end.min(start + bs));
            if hi - lo == bs || lo >= hi.min(size) {
                continue;
            }
            let Some(block) = self.locate(ino, index)? else {
                continue;
            };
            let n = (hi.min(size) - lo) as usize;
            let piece = BlockWrite {
                index,
                block,
                keep: BS,
                at: (lo - start) as usize,
                data: &ZEROS[..n],
            };
            target.put(&piece)?;
        }
        Ok(())
    }

    /// Frees the blocks of file blocks `range`, [`FREE_SLICE`] of them a transaction (others'
    /// operations get the lock in between), up to the last block the file maps.
    fn free_hole(&self, ino: u64, range: Range<u64>) -> Result<()> {
        let last = self.with_state(|g| {
            let inode = g.live(ino)?;
            g.last_mapped(ino, &inode)
        })?;
        let Some(last) = last else { return Ok(()) };
        let end = range.end.min(last + 1);
        let mut from = range.start;
        while from < end {
            let to = (from + FREE_SLICE).min(end);
            self.in_transaction(|g| g.free_hole(ino, from..to))?;
            from = to;
        }
        Ok(())
    }

    /// The device blocks that hold file blocks `range` (holes left out).
    fn held_blocks(&self, ino: u64, range: Range<u64>) -> Result<Vec<u64>> {
        let mut held = Vec::new();
        let mut from = range.start;
        while from < range.end {
            let to = (from + FREE_SLICE).min(range.end);
            self.with_state(|g| {
                let inode = g.live(ino)?;
                for fb in from..to {
                    held.extend(g.bmap(ino, &inode, fb)?);
                }
                Ok(())
            })?;
            from = to;
        }
        Ok(held)
    }
}

impl FsState {
    /// Frees the blocks of regular file `ino` among file blocks `range`, and the indirect
    /// blocks that map nothing afterwards.
    fn free_hole(&mut self, ino: u64, range: Range<u64>) -> Result<()> {
        let mut inode = self.live(ino)?;
        regular(ino, &inode)?;
        let blocks = inode.blocks;
        self.free_range(ino, &mut inode, range.start, range.end)?;
        self.free_empty_indirects(ino, &mut inode, range)?;
        if inode.blocks != blocks {
            self.write_inode(ino, &inode)?;
        }
        Ok(())
    }

    /// Frees the indirect blocks whose span meets file blocks `range` and that map nothing.
    fn free_empty_indirects(&mut self, ino: u64, inode: &mut Inode, range: Range<u64>) -> Result<()> {
        let single = NDIRECT..NDIRECT + NINDIRECT;
        if range.start < single.end && range.end > single.start {
            let ind = self.ptr(ino, inode.indirect)?;
            if self.maps_nothing(ind)? {
                self.free_block(inode.uid, ind)?;
                inode.indirect = 0;
                inode.blocks = inode.blocks.saturating_sub(1);
            }
        }
        let double = single.end;
        let d = self.ptr(ino, inode.dindirect)?;
        if range.end <= double || d == 0 {
            return Ok(());
        }
        let first = (range.start.max(double) - double) / NINDIRECT;
        let last = (range.end - 1 - double) / NINDIRECT;
        for k in first..=last {
            let entry = ind_get(self.meta.get(d)?, k as usize);
            let l1 = self.ptr(ino, entry)?;
            if self.maps_nothing(l1)? {
                self.free_block(inode.uid, l1)?;
                ind_set(self.meta.get_mut(d)?, k as usize, 0);
                inode.blocks = inode.blocks.saturating_sub(1);
            }
        }
        if self.maps_nothing(d)? {
            self.free_block(inode.uid, d)?;
            inode.dindirect = 0;
            inode.blocks = inode.blocks.saturating_sub(1);
        }
        Ok(())
    }

    /// True if `blk` is an indirect block (not 0) whose pointers are all 0.
    fn maps_nothing(&mut self, blk: u64) -> Result<bool> {
        Ok(blk != 0 && self.meta.get(blk)?.iter().all(|&b| b == 0))
    }

    /// The file's data changed in place: mtime and ctime become now.
    fn touch_data(&mut self, ino: u64) -> Result<()> {
        let now = self.now_ns();
        self.modify(ino, |i| {
            i.mtime_ns = now;
            i.ctime_ns = now;
        })?;
        Ok(())
    }
}

impl FileSystem {
    /// A punched hole or zeroed range of a stream file: its chunks are re-encoded, so the
    /// range is written as zeros through the page cache (a compressing codec then stores little
    /// for it); the file grows only if the range reaches past its end.
    fn zero_stream(&self, ino: u64, range: std::ops::Range<u64>, target: &mut dyn WriteTarget) -> Result<()> {
        const ZEROS: [u8; BS] = [0; BS];
        let mut at = range.start;
        while at < range.end {
            let n = (range.end - at).min(BS as u64 - at % BS as u64) as usize;
            self.write_with(ino, at, &ZEROS[..n], target)?;
            at += n as u64;
        }
        self.in_transaction(|g| g.touch_data(ino))
    }
}

/// The end of bytes `[offset, offset + len)`: InvalidArgument for none, FileTooLarge past
/// [`MAX_FILE_SIZE`] (as fallocate).
fn range_end(offset: u64, len: u64) -> Result<u64> {
    if len == 0 {
        return Err(FsError::InvalidArgument("an empty range".into()));
    }
    offset
        .checked_add(len)
        .filter(|&e| e <= MAX_FILE_SIZE)
        .ok_or(FsError::FileTooLarge)
}

/// The file blocks wholly inside bytes `range` (empty if none).
fn whole_blocks(range: Range<u64>) -> Range<u64> {
    let bs = BS as u64;
    let (first, end) = (range.start.div_ceil(bs), range.end / bs);
    first..end.max(first)
}
