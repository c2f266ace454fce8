//! Writing file data: the rules, decided here once for both data paths, the file system's
//! uncached one ([`FileSystem::write_at`], [`FileSystem::set_size`]: straight to the device)
//! and the kernel's (through its page cache). A path only says where bytes go, as a
//! [`WriteTarget`]; [`FileSystem::write_with`] and [`FileSystem::set_size_with`] decide what
//! goes where:
//!
//! * Each block is allocated (placed by the file's `file.block_buddy` policy) before its data is
//!   written, block by block.
//! * Zero-fill: a file never shows bytes nobody wrote to it. After a write, every byte of a block
//!   it touched is written data, or what the block held below the file's old end, or zero: the
//!   whole of a block just allocated (stale on the device) and, in any block, the bytes at or
//!   past the old end. When a file grows past a partial last block (a write that starts in a
//!   later block, or a truncate that grows it), that block's bytes past the old end become zeros
//!   too (a shrinking truncate leaves them on the device), and the blocks the file holds past
//!   its end between the two (a write that failed after allocating, or a crash between an
//!   allocation's commit and the size's, leaves some) are freed: holes, they read as zeros.
//! * A device that fills up part way: the bytes written so far stay and count, and the size
//!   covers them (a short write, ending at a block boundary); if no byte was written,
//!   [`FsError::NoSpace`]. The owner's quota running out ([`FsError::QuotaExceeded`]) is the
//!   same: a short write, else the error. Any other error (an I/O error) is the answer even part way: the
//!   bytes written before it stay, but the size does not grow over them.
//! * A write that would end past [`MAX_FILE_SIZE`] is refused whole ([`FsError::FileTooLarge`]);
//!   an empty write changes nothing, not even past the end.
//! * The size grows to the end of what was written, once the data is written.

use crate::error::{FsError, Result};
use crate::filesystem::{FileSystem, ROOM_RETRIES};
use crate::layout::{BS, FileType, MAX_FILE_SIZE};
use std::io;
use std::ops::Range;
use vino_blockdev::BlockDevice;

/// One block's part of a write: what the block holds afterwards. Its first `keep` bytes keep
/// their contents, `data` goes at `at`, every other byte becomes zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockWrite<'a> {
    /// The file block.
    pub index: u64,
    /// The device block that holds it.
    pub block: u64,
    /// How many leading bytes keep their contents (0 for a block just allocated; the file's
    /// old size within the block otherwise).
    pub keep: usize,
    /// Where `data` goes in the block.
    pub at: usize,
    pub data: &'a [u8],
}

impl BlockWrite<'_> {
    /// True if the block's old contents matter (some byte it keeps is not overwritten): a
    /// writer must have them. Otherwise the block can be written whole, from zeros.
    pub fn needs_old(&self) -> bool {
        self.keep > 0 && !(self.at == 0 && self.data.len() >= self.keep)
    }

    /// The byte ranges of the block that become zeros (besides the kept bytes and the data).
    pub fn zeroed(&self) -> impl Iterator<Item = Range<usize>> {
        let end = self.at + self.data.len();
        [self.keep..self.at, end.max(self.keep)..BS]
            .into_iter()
            .filter(|r| !r.is_empty())
    }

    /// Applies the write to the block's old contents (any contents if [`Self::needs_old`] is
    /// false).
    pub fn apply(&self, block: &mut [u8]) {
        assert_eq!(block.len(), BS);
        block[self.keep.min(BS)..].fill(0);
        block[self.at..self.at + self.data.len()].copy_from_slice(self.data);
    }
}

/// Where a write's bytes go: the device (the uncached path) or a page cache (the kernel's).
pub trait WriteTarget {
    /// Makes the block hold what `piece` says.
    fn put(&mut self, piece: &BlockWrite<'_>) -> io::Result<()>;

    /// The file system is about to free the file's blocks from file block `from` on (they lie
    /// past the file's end, old or new): drop whatever is held for them, unwritten. The device
    /// holds nothing; a page cache drops the pages.
    fn forget(&mut self, from: u64);

    /// The file system is about to free, or zero on the device, the file's blocks `[first,
    /// end)` (a punched hole, a zeroed range): drop whatever is held for them, unwritten. A
    /// target that holds nothing (the device) has nothing to do.
    fn forget_range(&mut self, _first: u64, _end: u64) {}
}

/// The uncached path's target: read, change and write each block on the device.
pub(crate) struct DeviceTarget<'d>(pub &'d dyn BlockDevice);

impl WriteTarget for DeviceTarget<'_> {
    fn put(&mut self, piece: &BlockWrite<'_>) -> io::Result<()> {
        if piece.block == 0 {
            // A stream file's pieces have no device block: only a page cache holds them.
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a stream file's data goes through the kernel's page cache",
            ));
        }
        if piece.at == 0 && piece.data.len() == BS {
            return self.0.write_blocks(piece.block, piece.data);
        }
        let mut buf = [0u8; BS];
        if piece.needs_old() {
            self.0.read_blocks(piece.block, &mut buf)?;
            let old = buf;
            piece.apply(&mut buf);
            if buf == old {
                return Ok(());
            }
        } else {
            piece.apply(&mut buf);
        }
        self.0.write_blocks(piece.block, &buf)
    }

    fn forget(&mut self, _from: u64) {}
}

/// Blocks a write allocates under one hold of the file system's lock, at most: others wait for
/// the lock meanwhile.
const ALLOCATION_RUN: u64 = 64;

/// A write in progress under the data gate.
struct Written<'g> {
    /// The shared data gate ([`FileSystem::data_gate`]); `None` while a commit must run.
    gate: Option<parking_lot::RwLockReadGuard<'g, ()>>,
    /// Bytes written so far.
    done: usize,
    /// Blocks were allocated since the gate was taken.
    fresh: bool,
}

impl FileSystem {
    /// Writes `data` at `offset` of file `ino`, the bytes going through `target`, by the rules
    /// of [`crate::write`]; returns how many bytes were written.
    pub fn write_with(&self, ino: u64, offset: u64, data: &[u8], target: &mut dyn WriteTarget) -> Result<usize> {
        let (old, stream) = self.regular_size(ino)?;
        if data.is_empty() {
            return Ok(0);
        }
        offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(FsError::FileTooLarge)?;
        if stream {
            return self.write_stream(ino, offset, data, old, target);
        }
        let bs = BS as u64;
        if offset / bs > old / bs {
            self.zero_past_end(ino, old, false, target)?;
        }
        // Blocks past the old end before the first block written are freed with the new size.
        let gap = old.div_ceil(bs)..offset / bs;
        if !gap.is_empty() {
            target.forget(gap.start);
        }
        // A commit due now is made before the gate is taken: under it, nothing commits until the
        // blocks allocated have their data in the target.
        self.commit_if_due()?;
        let mut w = Written {
            gate: Some(self.data_gate()),
            done: 0,
            fresh: false,
        };
        let written = self.write_blocks(ino, offset, data, old, target, &mut w);
        self.release_gate(ino, &mut w);
        written?;
        let done = w.done;
        self.in_transaction(|g| {
            g.free_past_end(ino, gap.end)?;
            g.extend(ino, offset + done as u64)
        })?;
        Ok(done)
    }

    /// [`FileSystem::write_with`] for a stream file: the same rules of zero-fill, but nothing is
    /// allocated (a chunk gets its blocks when the kernel writes it back, encoded): the pieces
    /// carry no device block, and only a page cache can take them. A full disk or quota shows at
    /// write-back (fsync), as with any file system that allocates late.
    fn write_stream(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
        old: u64,
        target: &mut dyn WriteTarget,
    ) -> Result<usize> {
        let bs = BS as u64;
        if offset / bs > old / bs {
            self.zero_past_end(ino, old, true, target)?;
        }
        let gap = old.div_ceil(bs)..offset / bs;
        if !gap.is_empty() {
            target.forget(gap.start);
        }
        // The size first: the cache may write a chunk back (to make room) before the write
        // ends, and a chunk is stored only up to the file's end.
        let end = offset + data.len() as u64;
        self.in_transaction(|g| g.extend(ino, end))?;
        let mut done = 0;
        while done < data.len() {
            let pos = offset + done as u64;
            let (index, at) = (pos / bs, (pos % bs) as usize);
            let take = (BS - at).min(data.len() - done);
            let piece = BlockWrite {
                index,
                block: 0,
                keep: old.saturating_sub(index * bs).min(bs) as usize,
                at,
                data: &data[done..done + take],
            };
            if let Err(e) = target.put(&piece) {
                // What was not written is not the file's: the size goes back to what was.
                let size = old.max(offset + done as u64);
                target.forget(size.div_ceil(bs));
                self.in_transaction(|g| g.set_size(ino, size).map(drop))?;
                return if done > 0 { Ok(done) } else { Err(e.into()) };
            }
            done += take;
        }
        Ok(done)
    }

    /// The body of [`FileSystem::write_with`], under the data gate: allocates the blocks a run
    /// at a time and puts each piece of `data` into its block through `target`. A full disk or
    /// quota after the first byte ends the write short (`w.done` says how far it got).
    fn write_blocks<'g>(
        &'g self,
        ino: u64,
        offset: u64,
        data: &[u8],
        old: u64,
        target: &mut dyn WriteTarget,
        w: &mut Written<'g>,
    ) -> Result<()> {
        let bs = BS as u64;
        let mut retries = 0;
        while w.done < data.len() {
            let first = (offset + w.done as u64) / bs;
            let last = (offset + data.len() as u64 - 1) / bs;
            let (run, failed) = self.allocate_run(ino, first..(last + 1).min(first + ALLOCATION_RUN));
            if !run.is_empty() {
                retries = 0;
            }
            for a in run {
                w.fresh |= a.fresh;
                let pos = offset + w.done as u64;
                let (index, at) = (pos / bs, (pos % bs) as usize);
                let take = (BS - at).min(data.len() - w.done);
                let keep = if a.fresh {
                    0
                } else {
                    old.saturating_sub(index * bs).min(bs) as usize
                };
                let piece = BlockWrite {
                    index,
                    block: a.block,
                    keep,
                    at,
                    data: &data[w.done..w.done + take],
                };
                target.put(&piece)?;
                w.done += take;
            }
            match failed {
                None => {}
                Some((FsError::NoSpace, seen)) if retries < ROOM_RETRIES => {
                    // Blocks freed in the running transaction may be reused after a checkpoint,
                    // which needs a commit: not under the gate.
                    retries += 1;
                    self.release_gate(ino, w);
                    let room = self.make_room(seen)?;
                    w.gate = Some(self.data_gate());
                    if !room {
                        return if w.done > 0 { Ok(()) } else { Err(FsError::NoSpace) };
                    }
                }
                Some((FsError::NoSpace | FsError::NoInodes | FsError::QuotaExceeded, _)) if w.done > 0 => return Ok(()),
                Some((e, _)) => return Err(e),
            }
        }
        Ok(())
    }

    /// Lets commits in again after a write's blocks got their data ([`FileSystem::handed_over`]
    /// if it allocated any).
    fn release_gate(&self, ino: u64, w: &mut Written<'_>) {
        if std::mem::take(&mut w.fresh) {
            self.handed_over(ino);
        }
        w.gate = None;
    }

    /// Sets a regular file's size, by the rules of [`crate::write`]: growing zeroes, through
    /// `target`, the bytes past the old end in the old last block, and frees the blocks past the
    /// old end; shrinking frees the blocks past the new end (in the running transaction).
    /// `target` is told to forget the blocks freed first.
    pub fn set_size_with(&self, ino: u64, size: u64, target: &mut dyn WriteTarget) -> Result<()> {
        if size > MAX_FILE_SIZE {
            return Err(FsError::FileTooLarge);
        }
        let (old, stream) = self.regular_size(ino)?;
        if size > old {
            self.zero_past_end(ino, old, stream, target)?;
        }
        target.forget(size.min(old).div_ceil(BS as u64));
        // A big file's blocks past the new end go a slice at a time, each slice a transaction
        // of its own, so others' operations get the lock in between.
        if let Some(generation) = self.in_transaction(|g| g.set_size(ino, size))? {
            while self.in_transaction(|g| g.trim_past_end(ino, generation))? {}
        }
        Ok(())
    }

    /// The size of regular file `ino`, and whether it is a stream file.
    pub(crate) fn regular_size(&self, ino: u64) -> Result<(u64, bool)> {
        let st = self.stat(ino)?;
        match st.kind {
            FileType::Regular => Ok((st.size, st.stream.is_some())),
            FileType::Directory => Err(FsError::IsADirectory(format!("inode {ino}"))),
            _ => Err(FsError::InvalidArgument(format!("inode {ino} is not a regular file"))),
        }
    }

    /// Allocates the blocks of bytes `[offset, offset + len)` of a regular file, so that later
    /// writes there cannot fail for want of space; blocks just allocated, and blocks past the end
    /// of file in the range, are zeroed on the device before the allocation can become durable.
    /// Without `keep_size` the size grows to at least `offset + len` (mtime and ctime change).
    /// FileTooLarge past [`MAX_FILE_SIZE`]; NoSpace leaves the file as it was.
    pub fn fallocate(&self, ino: u64, offset: u64, len: u64, keep_size: bool) -> Result<()> {
        self.fallocate_with(ino, offset, len, keep_size, &mut DeviceTarget(&**self.device()))
    }

    /// [`FileSystem::fallocate`] with the bytes of the old last block past the old end zeroed
    /// through `target` when the size grows (the kernel passes its page cache).
    pub fn fallocate_with(
        &self,
        ino: u64,
        offset: u64,
        len: u64,
        keep_size: bool,
        target: &mut dyn WriteTarget,
    ) -> Result<()> {
        if len == 0 {
            return Err(FsError::InvalidArgument("fallocate of 0 bytes".into()));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(FsError::FileTooLarge)?;
        let (old, stream) = self.regular_size(ino)?;
        if stream {
            // Nothing to reserve: a chunk's blocks depend on what it encodes to.
            if !keep_size && end > old {
                self.zero_past_end(ino, old, true, target)?;
                self.in_transaction(|g| g.extend(ino, end))?;
            }
            return Ok(());
        }
        let bs = BS as u64;
        let (first, last) = (offset / bs, end.div_ceil(bs));
        // Blocks past the end of file hold zeros (preallocated) or bytes nobody wrote to this
        // file (a failed write, a crash): zeroed too.
        let past_end = old.div_ceil(bs);
        const CHUNK: u64 = 256;
        // All or nothing: refuse at once what cannot fit (after a checkpoint, if freed blocks
        // are waiting for one).
        self.in_transaction(|g| g.check_room(ino, first..last))?;
        let mut allocated: Vec<u64> = Vec::new();
        let mut c = first;
        while c < last {
            let to = (c + CHUNK).min(last);
            let r = self.in_transaction(|g| {
                let fresh = g.preallocate(ino, c..to)?;
                let inode = g.live(ino)?;
                let mut zero: Vec<u64> = fresh.iter().filter(|f| f.0 < past_end).map(|f| f.1).collect();
                for fb in c.max(past_end)..to {
                    zero.extend(g.bmap(ino, &inode, fb)?);
                }
                write_zeros(&**self.device(), zero)?;
                Ok(fresh)
            });
            match r {
                Ok(fresh) => allocated.extend(fresh.into_iter().map(|(fb, _)| fb)),
                Err(e) => {
                    if !allocated.is_empty() {
                        self.in_transaction(|g| g.unallocate(ino, &allocated))?;
                    }
                    return Err(e);
                }
            }
            c = to;
        }
        if !keep_size && end > old {
            self.zero_past_end(ino, old, false, target)?;
            self.in_transaction(|g| g.extend(ino, end))?;
        }
        Ok(())
    }

    /// Before a file of `size` bytes grows: the bytes of its partial last block past the end
    /// become zeros (a stream file's page has no device block of its own).
    fn zero_past_end(&self, ino: u64, size: u64, stream: bool, target: &mut dyn WriteTarget) -> Result<()> {
        let (index, keep) = (size / BS as u64, (size % BS as u64) as usize);
        if keep == 0 {
            return Ok(());
        }
        let block = if stream {
            0
        } else {
            match self.locate(ino, index)? {
                Some(block) => block,
                None => return Ok(()),
            }
        };
        let piece = BlockWrite {
            index,
            block,
            keep,
            at: keep,
            data: &[],
        };
        Ok(target.put(&piece)?)
    }
}

/// Writes zeros over `blocks`, a run of consecutive blocks at a time.
pub(crate) fn write_zeros(dev: &dyn BlockDevice, mut blocks: Vec<u64>) -> io::Result<()> {
    const RUN: usize = 64;
    blocks.sort_unstable();
    blocks.dedup();
    let zeros = vec![0u8; RUN * BS];
    let mut i = 0;
    while i < blocks.len() {
        let mut n = 1;
        while i + n < blocks.len() && n < RUN && blocks[i + n] == blocks[i] + n as u64 {
            n += 1;
        }
        dev.write_blocks(blocks[i], &zeros[..n * BS])?;
        i += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(keep: usize, at: usize, data: &[u8]) -> BlockWrite<'_> {
        BlockWrite {
            index: 0,
            block: 0,
            keep,
            at,
            data,
        }
    }

    #[test]
    fn a_block_holds_kept_bytes_data_and_zeros() {
        let data = [9u8; 10];
        // A fresh block: zeros around the data, the old contents do not matter.
        let p = piece(0, 100, &data);
        assert!(!p.needs_old());
        assert_eq!(p.zeroed().collect::<Vec<_>>(), vec![0..100, 110..BS]);
        // Past the old end (50) in the same block: the gap and the rest become zeros.
        let p = piece(50, 100, &data);
        assert!(p.needs_old());
        assert_eq!(p.zeroed().collect::<Vec<_>>(), vec![50..100, 110..BS]);
        let mut b = [7u8; BS];
        p.apply(&mut b);
        assert!(b[..50].iter().all(|&x| x == 7));
        assert!(b[50..100].iter().all(|&x| x == 0));
        assert_eq!(&b[100..110], &data);
        assert!(b[110..].iter().all(|&x| x == 0));
        // Inside the file: only the data changes.
        let p = piece(BS, 100, &data);
        assert!(p.needs_old());
        assert_eq!(p.zeroed().count(), 0);
        // Over everything the block keeps: no need for the old contents.
        assert!(!piece(50, 0, &[1u8; 60]).needs_old());
        assert!(!piece(BS, 0, &[1u8; BS]).needs_old());
        // Only zeroing a tail.
        assert_eq!(piece(300, 300, &[]).zeroed().collect::<Vec<_>>(), vec![300..BS]);
    }
}
