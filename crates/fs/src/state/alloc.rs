//! Groups and bitmaps: allocating and freeing blocks and inodes, charged to their owners.

use super::*;

impl FsState {
    pub(crate) fn header(&mut self, g: u32) -> Result<GroupHeader> {
        let hb = self.geo.header(g);
        // A header is checked against its checksum when it comes from the device; one in
        // memory was checked then, or was changed since (and is sealed when committed).
        let from_device = !self.meta.cached(hb);
        let b = self.meta.get(hb)?;
        let decoded = if from_device {
            GroupHeader::decode(b, g, &self.geo)
        } else {
            GroupHeader::decode_unsealed(b, g, &self.geo)
        };
        decoded.map_err(FsError::Corrupt)
    }

    /// Changes a group's header in memory; [`FsState::seal_groups`] seals it at commit.
    pub(crate) fn put_header(&mut self, h: &GroupHeader) -> Result<()> {
        let b = self.meta.get_mut(self.geo.header(h.group))?;
        h.encode_unsealed(b);
        self.set_group_free(h.group, h.free_blocks);
        Ok(())
    }

    /// Loads a bitmap, checking it against its header's checksum when it comes from disk.
    fn bitmap(&mut self, g: u32, inode_map: bool) -> Result<u64> {
        let b = if inode_map {
            self.geo.inode_bitmap(g)
        } else {
            self.geo.block_bitmap(g)
        };
        if !self.meta.cached(b) {
            let h = self.header(g)?;
            let want = if inode_map {
                h.inode_bitmap_crc
            } else {
                h.block_bitmap_crc
            };
            let got = bitmap_crc(g, self.meta.get(b)?);
            if got != want {
                self.meta.drop_clean(b);
                let what = if inode_map { "inode" } else { "block" };
                return Err(corrupt(format!("group {g}: {what} bitmap checksum mismatch")));
            }
        }
        Ok(b)
    }

    /// Allocates a block charged to `owner`: the first free one at or after `pref` in
    /// `pref`'s group (wrapping around the group), else in the following groups. QuotaExceeded
    /// past the owner's quota; NoSpace for an owner but root when only root's reserve is left.
    pub fn alloc_block(&mut self, owner: u32, pref: u64) -> Result<u64> {
        self.quota.check(owner, 1, 0)?;
        let free = self.free_blocks_total();
        self.quota.check_block_reserve(owner, 1, free)?;
        let b = self.take_block(pref)?;
        self.quota.charge(owner, 1, 0);
        Ok(b)
    }

    /// Takes the first free block at or after `pref` (see [`FsState::alloc_block`]).
    fn take_block(&mut self, pref: u64) -> Result<u64> {
        let geo = self.geo.clone();
        let pref = if geo.is_data_block(pref) {
            pref
        } else {
            geo.data_start(geo.group_of(pref.min(geo.block_count - 1)))
        };
        let g0 = geo.group_of(pref);
        for i in 0..geo.groups {
            let g = (g0 + i) % geo.groups;
            let mut h = self.header(g)?;
            if h.free_blocks <= self.deferred_in_group[g as usize] {
                continue;
            }
            let start = geo.group_start(g);
            let floor = self.block_floor[g as usize].max(geo.data_start(g) - start);
            let from = if i == 0 { (pref - start).max(floor) } else { floor };
            let end = geo.group_len(g);
            let bm = self.bitmap(g, false)?;
            let found = {
                let map = self.meta.get(bm)?;
                let skip = |bit: u64| self.deferred_set.contains(&(start + bit));
                if crate::CHECKS_INVARIANTS {
                    let below = find_zero(map, geo.data_start(g) - start, floor, &skip);
                    assert_eq!(below, None, "group {g}: a free block below the allocation floor");
                }
                find_zero(map, from, end, &skip).or_else(|| find_zero(map, floor, from, &skip))
            };
            let Some(bit) = found else {
                self.block_floor[g as usize] = end;
                continue;
            };
            if from == floor {
                // Found by a scan from the floor: nothing between the floor and `bit` is free.
                self.block_floor[g as usize] = bit + 1;
            }
            // A block freed by a transaction not yet checkpointed stays out of reach: a replay
            // of that transaction would write over its new owner's data.
            assert!(
                !self.deferred_set.contains(&(start + bit)),
                "block {} taken again before its free was checkpointed",
                start + bit
            );
            let map = self.meta.get_mut(bm)?;
            set_bit(map, bit, true);
            h.free_blocks -= 1;
            self.put_header(&h)?;
            self.counters.blocks_allocated += 1;
            return Ok(start + bit);
        }
        Err(FsError::NoSpace)
    }

    /// Frees a block (a data block or a metadata block of a file) charged to `owner`. Not
    /// reusable until the transaction freeing it has been checkpointed.
    pub(crate) fn free_block(&mut self, owner: u32, b: u64) -> Result<()> {
        if !self.geo.is_data_block(b) {
            return Err(corrupt(format!("freeing block {b}, which is not a data block")));
        }
        let g = self.geo.group_of(b);
        let bit = b - self.geo.group_start(g);
        let mut h = self.header(g)?;
        let bm = self.bitmap(g, false)?;
        let map = self.meta.get_mut(bm)?;
        if !crate::layout::bit(map, bit) {
            return Err(corrupt(format!("block {b} is freed but already free in its bitmap")));
        }
        set_bit(map, bit, false);
        h.free_blocks += 1;
        self.put_header(&h)?;
        self.meta.forget(b);
        self.deferred.push_back((b, self.meta.journal.next_seq));
        self.deferred_set.insert(b);
        self.deferred_in_group[g as usize] += 1;
        self.counters.blocks_freed += 1;
        self.quota.charge(owner, -1, 0);
        Ok(())
    }

    /// Allocates an inode: for a directory, in a group with at least the average free inodes
    /// and the fewest directories (FFS's `dirpref`); for a file, in its directory's group, or
    /// the next one with a free inode. Charged to `owner`: QuotaExceeded past its quota,
    /// NoInodes for an owner but root when only root's reserve is left.
    pub(super) fn alloc_inode(&mut self, parent_group: u32, is_dir: bool, owner: u32) -> Result<u64> {
        self.quota.check(owner, 0, 1)?;
        // Counting free inodes reads every group's header: only when a reserve applies (root,
        // or no reserve, meets NoInodes from take_inode itself when none is left).
        if self.quota.inode_reserve_applies(owner) {
            let free = self.free_inodes_total()?;
            self.quota.check_inode_reserve(owner, free)?;
        }
        let ino = self.take_inode(parent_group, is_dir)?;
        self.quota.charge(owner, 0, 1);
        Ok(ino)
    }

    /// Takes a free inode (see [`FsState::alloc_inode`]).
    fn take_inode(&mut self, parent_group: u32, is_dir: bool) -> Result<u64> {
        let groups = self.geo.groups;
        let mut order: Vec<u32> = (0..groups).map(|i| (parent_group + i) % groups).collect();
        if is_dir {
            let mut headers = Vec::with_capacity(groups as usize);
            for g in 0..groups {
                headers.push(self.header(g)?);
            }
            let total: u64 = headers.iter().map(|h| u64::from(h.free_inodes)).sum();
            let avg = total / u64::from(groups);
            let best = headers
                .iter()
                .filter(|h| h.free_inodes > 0 && u64::from(h.free_inodes) >= avg)
                .min_by_key(|h| (h.dirs, h.group))
                .map(|h| h.group);
            if let Some(b) = best {
                order.retain(|&g| g != b);
                order.insert(0, b);
            }
        }
        for g in order {
            let mut h = self.header(g)?;
            if h.free_inodes == 0 {
                continue;
            }
            let bm = self.bitmap(g, true)?;
            let floor = self.inode_floor[g as usize];
            let Some(bit) = find_zero(self.meta.get(bm)?, floor, self.geo.ipg, &|_| false) else {
                return Err(corrupt(format!(
                    "group {g}: header counts {} free inodes, bitmap has none",
                    h.free_inodes
                )));
            };
            self.inode_floor[g as usize] = bit + 1;
            set_bit(self.meta.get_mut(bm)?, bit, true);
            h.free_inodes -= 1;
            if is_dir {
                h.dirs += 1;
            }
            self.put_header(&h)?;
            self.counters.inodes_allocated += 1;
            return Ok(self.geo.first_ino(g) + bit);
        }
        Err(FsError::NoInodes)
    }

    pub(super) fn free_inode(&mut self, ino: u64, was_dir: bool, generation: u32, owner: u32) -> Result<()> {
        let g = self.geo.ino_group(ino);
        let bit = (ino - 1) % self.geo.ipg;
        let mut h = self.header(g)?;
        let bm = self.bitmap(g, true)?;
        let map = self.meta.get_mut(bm)?;
        if !crate::layout::bit(map, bit) {
            return Err(corrupt(format!("inode {ino} is freed but already free in its bitmap")));
        }
        set_bit(map, bit, false);
        self.inode_floor[g as usize] = self.inode_floor[g as usize].min(bit);
        h.free_inodes += 1;
        if was_dir {
            h.dirs = h.dirs.saturating_sub(1);
        }
        self.put_header(&h)?;
        self.write_inode(
            ino,
            &Inode {
                generation,
                ..Inode::default()
            },
        )?;
        self.pending_unslot.push(ino);
        self.counters.inodes_freed += 1;
        self.quota.charge(owner, 0, -1);
        Ok(())
    }

    /// In builds that check invariants: inode `ino`, which a new directory entry names, is taken
    /// in its group's bitmap (else a later file would get the number and the entry). Only where
    /// the bitmap is in memory.
    pub(super) fn check_inode_taken(&mut self, ino: u64) {
        let g = self.geo.ino_group(ino);
        let bm = self.geo.inode_bitmap(g);
        if !crate::CHECKS_INVARIANTS || !self.meta.cached(bm) {
            return;
        }
        let bit = (ino - 1) % self.geo.ipg;
        if let Ok(map) = self.meta.get(bm) {
            assert!(
                crate::layout::bit(map, bit),
                "an entry names inode {ino}, which is free"
            );
        }
    }
}

/// The first clear bit of `map` in `[from, to)` for which `skip` is false.
fn find_zero(map: &[u8], from: u64, to: u64, skip: &dyn Fn(u64) -> bool) -> Option<u64> {
    let mut i = from;
    while i < to {
        if i.is_multiple_of(64) && i + 64 <= to {
            let at = (i / 8) as usize;
            let w = u64::from_le_bytes(map[at..at + 8].try_into().expect("8 bytes"));
            if w == u64::MAX {
                i += 64;
                continue;
            }
        }
        if !crate::layout::bit(map, i) && !skip(i) {
            return Some(i);
        }
        i += 1;
    }
    None
}
