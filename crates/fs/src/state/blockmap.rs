//! Block maps: finding, allocating and freeing a file's blocks, and its size.

use super::*;

impl FsState {
    pub(crate) fn ptr(&self, ino: u64, p: u32) -> Result<u64> {
        let p = u64::from(p);
        if p == 0 || self.geo.is_data_block(p) {
            Ok(p)
        } else {
            Err(corrupt(format!("inode {ino}: block pointer {p} is not a data block")))
        }
    }

    fn ind(&mut self, ino: u64, blk: u64, i: usize) -> Result<u64> {
        let v = ind_get(self.meta.get(blk)?, i);
        self.ptr(ino, v)
    }

    /// The device block holding file block `fb`, or `None` for a hole.
    pub fn bmap(&mut self, ino: u64, inode: &Inode, fb: u64) -> Result<Option<u64>> {
        let b = match block_path(fb) {
            None => 0,
            Some(BlockPath::Direct(i)) => self.ptr(ino, inode.direct[i])?,
            Some(BlockPath::Single(i)) => match self.ptr(ino, inode.indirect)? {
                0 => 0,
                ind => self.ind(ino, ind, i)?,
            },
            Some(BlockPath::Double(i, j)) => match self.ptr(ino, inode.dindirect)? {
                0 => 0,
                d => match self.ind(ino, d, i)? {
                    0 => 0,
                    l1 => self.ind(ino, l1, j)?,
                },
            },
        };
        Ok((b != 0).then_some(b))
    }

    /// Asks the file's placement policy where block `fb` should go.
    fn place(&mut self, ino: u64, fb: u64, prev: u64) -> u64 {
        let args = BuddyArgs {
            ino,
            index: fb,
            prev,
            group: self.geo.ino_group(ino),
        };
        let pref = match self.slots.get(&ino) {
            Some(slot) => {
                self.counters.placements_grafted += 1;
                slot.invoke(&args)
            }
            None => {
                self.counters.placements_default += 1;
                ffs_policy(&self.placement, &args)
            }
        };
        if self.placement.valid(pref) {
            pref
        } else {
            self.counters.placements_rejected += 1;
            ffs_policy(&self.placement, &args)
        }
    }

    /// Makes sure file blocks `indexes` of live regular file `ino` have device blocks, as
    /// [`FsState::ensure_block`] does for each, reading and writing the inode once for them all.
    /// `out` gets each block and whether it was just allocated.
    pub(crate) fn ensure_run(
        &mut self,
        ino: u64,
        indexes: std::ops::Range<u64>,
        out: &mut Vec<(u64, bool)>,
    ) -> Result<()> {
        let mut inode = self.live(ino)?;
        regular(ino, &inode)?;
        let mut allocated = false;
        for fb in indexes {
            let got = self.ensure_block_of(ino, &mut inode, fb)?;
            allocated |= got.1;
            out.push(got);
        }
        if allocated {
            self.write_inode(ino, &inode)?;
            self.alloc_inos.insert(ino);
        }
        Ok(())
    }

    /// Makes sure file block `fb` has a device block, allocating it (and the indirect blocks
    /// that map it) if not. Returns the block and whether it was just allocated (its contents
    /// are then whatever the device held: the caller writes it whole or zero-fills).
    pub fn ensure_block(&mut self, ino: u64, fb: u64) -> Result<(u64, bool)> {
        let mut inode = self.live(ino)?;
        let got = self.ensure_block_of(ino, &mut inode, fb)?;
        if got.1 {
            self.write_inode(ino, &inode)?;
            self.alloc_inos.insert(ino);
        }
        Ok(got)
    }

    /// [`FsState::ensure_block`] on `inode`, the caller's copy of `ino`'s inode, which the
    /// caller writes back if a block was allocated.
    pub(crate) fn ensure_block_of(&mut self, ino: u64, inode: &mut Inode, fb: u64) -> Result<(u64, bool)> {
        if let Some(b) = self.bmap(ino, inode, fb)? {
            return Ok((b, false));
        }
        let path = block_path(fb).ok_or(FsError::FileTooLarge)?;
        let prev = if fb > 0 {
            self.bmap(ino, inode, fb - 1)?.unwrap_or(0)
        } else {
            0
        };
        let mut cursor = self.place(ino, fb, prev);
        let mut added = 1u32;
        let data;
        match path {
            BlockPath::Direct(i) => {
                data = self.alloc_block(inode.uid, cursor)?;
                inode.direct[i] = data as u32;
            }
            BlockPath::Single(i) => {
                let mut ind = self.ptr(ino, inode.indirect)?;
                if ind == 0 {
                    ind = self.alloc_block(inode.uid, cursor)?;
                    self.meta.create(ind)?;
                    inode.indirect = ind as u32;
                    cursor = next_pref(&self.geo, ind);
                    added += 1;
                }
                data = self.alloc_block(inode.uid, cursor)?;
                ind_set(self.meta.get_mut(ind)?, i, data as u32);
            }
            BlockPath::Double(i, j) => {
                let mut d = self.ptr(ino, inode.dindirect)?;
                if d == 0 {
                    d = self.alloc_block(inode.uid, cursor)?;
                    self.meta.create(d)?;
                    inode.dindirect = d as u32;
                    cursor = next_pref(&self.geo, d);
                    added += 1;
                }
                let mut l1 = self.ind(ino, d, i)?;
                if l1 == 0 {
                    l1 = self.alloc_block(inode.uid, cursor)?;
                    self.meta.create(l1)?;
                    ind_set(self.meta.get_mut(d)?, i, l1 as u32);
                    cursor = next_pref(&self.geo, l1);
                    added += 1;
                }
                data = self.alloc_block(inode.uid, cursor)?;
                ind_set(self.meta.get_mut(l1)?, j, data as u32);
            }
        }
        inode.blocks = inode.blocks.saturating_add(added);
        Ok((data, true))
    }

    /// Frees the pointers `range` of indirect block `blk` (whose block stays).
    fn free_entries(&mut self, ino: u64, blk: u64, range: std::ops::Range<usize>, inode: &mut Inode) -> Result<()> {
        let ptrs: Vec<(usize, u32)> = {
            let b = self.meta.get(blk)?;
            range.map(|i| (i, ind_get(b, i))).filter(|&(_, p)| p != 0).collect()
        };
        for &(_, p) in &ptrs {
            let p = self.ptr(ino, p)?;
            self.free_block(inode.uid, p)?;
            inode.blocks = inode.blocks.saturating_sub(1);
        }
        if !ptrs.is_empty() {
            let b = self.meta.get_mut(blk)?;
            for &(i, _) in &ptrs {
                ind_set(b, i, 0);
            }
        }
        Ok(())
    }

    /// Frees every pointer of indirect block `blk` and the block itself.
    fn free_tree(&mut self, ino: u64, blk: u64, depth: u32, inode: &mut Inode) -> Result<()> {
        let ptrs: Vec<u32> = {
            let b = self.meta.get(blk)?;
            (0..NINDIRECT as usize)
                .map(|i| ind_get(b, i))
                .filter(|&p| p != 0)
                .collect()
        };
        for p in ptrs {
            let p = self.ptr(ino, p)?;
            if depth > 1 {
                self.free_tree(ino, p, depth - 1, inode)?;
            } else {
                self.free_block(inode.uid, p)?;
                inode.blocks = inode.blocks.saturating_sub(1);
            }
        }
        self.free_block(inode.uid, blk)?;
        inode.blocks = inode.blocks.saturating_sub(1);
        Ok(())
    }

    /// Frees every block of the file from file block `keep` on, indirect blocks that map
    /// nothing any more included.
    pub fn free_from(&mut self, ino: u64, inode: &mut Inode, keep: u64) -> Result<()> {
        self.free_range(ino, inode, keep, MAX_FILE_BLOCKS)?;
        assert_nothing_mapped_from(ino, inode, keep);
        Ok(())
    }

    /// Frees every block of the file in file blocks `[from, to)`; an indirect block whose whole
    /// span is in the range goes too.
    pub(crate) fn free_range(&mut self, ino: u64, inode: &mut Inode, from: u64, to: u64) -> Result<()> {
        let to = to.min(MAX_FILE_BLOCKS);
        if from >= to {
            return Ok(());
        }
        if inode.stream.is_some() && inode.is_regular() {
            // A stream file's blocks in the tree are chunk maps: the chunks they name go first.
            self.free_chunks_in_maps(ino, inode, from, to)?;
        }
        for i in from.min(NDIRECT)..to.min(NDIRECT) {
            let p = self.ptr(ino, inode.direct[i as usize])?;
            if p != 0 {
                self.free_block(inode.uid, p)?;
                inode.direct[i as usize] = 0;
                inode.blocks = inode.blocks.saturating_sub(1);
            }
        }
        // The part of [from, to) an indirect span [base, base + len) covers, relative to base.
        let within = |base: u64, len: u64| {
            let lo = from.saturating_sub(base).min(len);
            let hi = to.saturating_sub(base).min(len);
            lo..hi
        };
        let ind = self.ptr(ino, inode.indirect)?;
        let r = within(NDIRECT, NINDIRECT);
        if ind != 0 && !r.is_empty() {
            if r == (0..NINDIRECT) {
                self.free_tree(ino, ind, 1, inode)?;
                inode.indirect = 0;
            } else {
                self.free_entries(ino, ind, r.start as usize..r.end as usize, inode)?;
            }
        }
        let d = self.ptr(ino, inode.dindirect)?;
        let r = within(NDIRECT + NINDIRECT, NINDIRECT * NINDIRECT);
        if d != 0 && !r.is_empty() {
            if r == (0..NINDIRECT * NINDIRECT) {
                self.free_tree(ino, d, 2, inode)?;
                inode.dindirect = 0;
            } else {
                for i in r.start / NINDIRECT..r.end.div_ceil(NINDIRECT) {
                    let l1 = self.ind(ino, d, i as usize)?;
                    if l1 == 0 {
                        continue;
                    }
                    let lo = r.start.saturating_sub(i * NINDIRECT).min(NINDIRECT);
                    let hi = r.end.saturating_sub(i * NINDIRECT).min(NINDIRECT);
                    if lo == 0 && hi == NINDIRECT {
                        self.free_tree(ino, l1, 1, inode)?;
                        ind_set(self.meta.get_mut(d)?, i as usize, 0);
                    } else {
                        self.free_entries(ino, l1, lo as usize..hi as usize, inode)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Frees the blocks a file holds past its end, up to file block `upto` (exclusive), before
    /// the file grows over them: a write that failed after allocating, or a crash between an
    /// allocation's commit and the size's, leaves them holding bytes nobody wrote to this file.
    /// Growing over a hole shows zeros.
    pub fn free_past_end(&mut self, ino: u64, upto: u64) -> Result<()> {
        let mut inode = self.live(ino)?;
        if inode.stream.is_some() {
            // A stream file keeps no chunk past its end (`cut_chunks`, `replace_chunk`).
            return Ok(());
        }
        let from = inode.size.div_ceil(BS as u64);
        if from >= upto {
            return Ok(());
        }
        let blocks = inode.blocks;
        self.free_range(ino, &mut inode, from, upto)?;
        if inode.blocks != blocks {
            self.write_inode(ino, &inode)?;
        }
        Ok(())
    }

    /// Sets a regular file's size: blocks past the new end are freed, at most
    /// [`FREE_SLICE`] of them here; if more remain past the new end, returns the inode's
    /// generation for [`FsState::trim_past_end`] in transactions of their own. Growing leaves
    /// a hole (blocks past the old end are freed first).
    pub fn set_size(&mut self, ino: u64, size: u64) -> Result<Option<u32>> {
        if size > MAX_FILE_SIZE {
            return Err(FsError::FileTooLarge);
        }
        let mut inode = self.live(ino)?;
        regular(ino, &inode)?;
        if inode.stream.is_some() {
            // Chunks, not blocks: the ones past the new end go in this transaction (a slice of
            // the map is not worth the bookkeeping: a map block names 2 MiB of the file).
            if size < self.size_of(ino, &inode) {
                self.cut_chunks(ino, &mut inode, size)?;
            }
            // The size set is the size on disk: a truncate's bytes are zeros, nothing to wait for.
            self.set_stream_size(ino, None);
            let now = self.now_ns();
            inode.size = size;
            inode.mtime_ns = now;
            inode.ctime_ns = now;
            self.write_inode(ino, &inode)?;
            return Ok(None);
        }
        // Shrinking frees the blocks past the new end; growing, those past the old end (see
        // `free_past_end`).
        let keep = size.min(inode.size).div_ceil(BS as u64);
        let more = self.free_top_slice(ino, &mut inode, keep)?;
        if size > inode.size {
            // Ordered mode: the zeroed tail of the old last block (in a page cache, perhaps)
            // reaches the device before the size that exposes it.
            self.alloc_inos.insert(ino);
        }
        let now = self.now_ns();
        inode.size = size;
        inode.mtime_ns = now;
        inode.ctime_ns = now;
        self.write_inode(ino, &inode)?;
        Ok(more.then_some(inode.generation))
    }

    /// Frees the next [`FREE_SLICE`] of the blocks a regular file holds past its end (what a
    /// shrinking [`FsState::set_size`] left); true if more remain. Past the end, nobody reads
    /// them, and a crash between slices leaves blocks past the end, which a later growth frees
    /// (`free_past_end`) as after a failed write. Nothing is done if the inode is no longer
    /// the file of `generation` (freed, or reused, between slices).
    pub fn trim_past_end(&mut self, ino: u64, generation: u32) -> Result<bool> {
        let mut inode = match self.live(ino) {
            Ok(i) if i.generation == generation && i.is_regular() => i,
            _ => return Ok(false),
        };
        let blocks = inode.blocks;
        let end = inode.size.div_ceil(BS as u64);
        let more = self.free_top_slice(ino, &mut inode, end)?;
        if inode.blocks != blocks {
            self.write_inode(ino, &inode)?;
        }
        Ok(more)
    }

    /// One part of freeing an orphan: its last [`FREE_SLICE`] blocks (false: call again) while
    /// more than that would remain, else all of it with the inode ([`FsState::release_orphan`],
    /// true). Nobody can reach an orphan, so freeing it in parts
    /// is not seen, and a crash between the parts leaves it on the orphan list, whose replay
    /// frees the rest.
    pub fn release_orphan_part(&mut self, ino: u64) -> Result<bool> {
        if self.trim_orphan(ino)? {
            return Ok(false);
        }
        self.release_orphan(ino)?;
        Ok(true)
    }

    /// Frees the last [`FREE_SLICE`] blocks of an orphan holding more than that; true if it
    /// still does. (Anything but an orphan's inode is left for `release_orphan` to refuse.)
    fn trim_orphan(&mut self, ino: u64) -> Result<bool> {
        let Ok(mut inode) = self.live(ino) else {
            return Ok(false);
        };
        if inode.nlink != 0 || inode.is_dir() || u64::from(inode.blocks) <= FREE_SLICE {
            return Ok(false);
        }
        self.free_top_slice(ino, &mut inode, 0)?;
        self.write_inode(ino, &inode)?;
        Ok(u64::from(inode.blocks) > FREE_SLICE)
    }

    /// Frees the file's blocks from file block `from` on, but, where it holds more than
    /// [`FREE_SLICE`] blocks, only those in the last `FREE_SLICE` file blocks it maps: one slice
    /// of a long free, so that the file system's lock is not held for all of a big file's
    /// blocks at once (a 2 GiB file took 170 ms, every other user's operation waiting). True if
    /// blocks may remain from `from` on.
    fn free_top_slice(&mut self, ino: u64, inode: &mut Inode, from: u64) -> Result<bool> {
        // A stream file's file blocks are chunk maps, each naming up to
        // CHUNKS_PER_MAP * CHUNK_PTRS blocks: its slice is that many fewer map blocks.
        let slice = if inode.stream.is_some() {
            (FREE_SLICE / (CHUNKS_PER_MAP * CHUNK_PTRS as u64)).max(1)
        } else {
            FREE_SLICE
        };
        let big = u64::from(inode.blocks) > FREE_SLICE;
        let last = match big.then(|| self.last_mapped(ino, inode)).transpose()?.flatten() {
            Some(last) if last >= from => last,
            _ => {
                self.free_from(ino, inode, from)?;
                return Ok(false);
            }
        };
        let lo = (last + 1).saturating_sub(slice).max(from);
        self.free_from(ino, inode, lo)?;
        Ok(lo > from)
    }

    /// The last file block of `inode` that maps a block, if any.
    pub(crate) fn last_mapped(&mut self, ino: u64, inode: &Inode) -> Result<Option<u64>> {
        let d = self.ptr(ino, inode.dindirect)?;
        if d != 0 {
            for i in (0..NINDIRECT).rev() {
                let l1 = self.ind(ino, d, i as usize)?;
                if l1 == 0 {
                    continue;
                }
                for j in (0..NINDIRECT).rev() {
                    if self.ind(ino, l1, j as usize)? != 0 {
                        return Ok(Some(NDIRECT + NINDIRECT + i * NINDIRECT + j));
                    }
                }
            }
        }
        let ind = self.ptr(ino, inode.indirect)?;
        if ind != 0 {
            for j in (0..NINDIRECT).rev() {
                if self.ind(ino, ind, j as usize)? != 0 {
                    return Ok(Some(NDIRECT + j));
                }
            }
        }
        Ok((0..NDIRECT).rev().find(|&i| inode.direct[i as usize] != 0))
    }

    /// Grows a regular file's size to at least `end` (after a write).
    pub fn extend(&mut self, ino: u64, end: u64) -> Result<()> {
        let now = self.now_ns();
        let stream = self.live(ino)?.stream.is_some();
        let inode = self.modify(ino, |i| {
            if !stream {
                i.size = i.size.max(end);
            }
            i.mtime_ns = now;
            i.ctime_ns = now;
        })?;
        if stream {
            // Its size on disk grows only over chunks stored (`stream_sizes`).
            let size = self.size_of(ino, &inode).max(end);
            if size > inode.size {
                self.set_stream_size(ino, Some((inode.generation, size)));
            }
            return Ok(());
        }
        // Ordered mode: a commit must not make the new size durable before the data it exposes,
        // so the data hook writes this file's pages first (as for a new allocation).
        self.alloc_inos.insert(ino);
        Ok(())
    }
}

fn next_pref(geo: &Geometry, b: u64) -> u64 {
    if b + 1 < geo.block_count { b + 1 } else { b }
}

/// What the inode itself holds of the map past file block `keep` is gone: a block left mapped
/// past a cut would show old data when the file grows again, and be freed twice later. (The
/// pointers inside indirect blocks are not looked at: no I/O here.)
fn assert_nothing_mapped_from(ino: u64, inode: &Inode, keep: u64) {
    let direct_left = (keep.min(NDIRECT)..NDIRECT).any(|i| inode.direct[i as usize] != 0);
    let indirect_left = keep <= NDIRECT && inode.indirect != 0;
    let double_left = keep <= NDIRECT + NINDIRECT && inode.dindirect != 0;
    assert!(
        !(direct_left || indirect_left || double_left),
        "inode {ino}: blocks still mapped after freeing from file block {keep}"
    );
}
