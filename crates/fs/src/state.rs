//! The mounted file system's in-memory state, [`FsState`], and every operation on it: names
//! (lookup, create, link, unlink, rename, directories), inodes and attributes, mapping and
//! allocating file blocks, file sizes, commits and checkpoints. [`FsState`] holds the metadata
//! blocks and the running journal transaction ([`crate::meta`]), the freed blocks waiting for a
//! checkpoint, the inodes whose data a commit must write first, and the `file.block_buddy`
//! graftpoints.
//!
//! Everything here runs under the file system's lock, which [`crate::FileSystem`] takes around
//! each call. Operations that change metadata run as *ops* (see [`crate::meta`]): all or nothing
//! within the running transaction. The data path's logic (mapping a file block, allocating one,
//! changing a file's size) lives here once and serves both the uncached path of
//! [`crate::FileSystem`] and a page cache above it.

use crate::dirindex::{DirIdx, DirIndex, Slot, room_of};
use crate::error::{FsError, Result, corrupt};
use crate::layout::*;
use crate::meta::{Checkpoint, Meta, Sealed};
use crate::placement::{BlockBuddy, BuddyArgs, Placement, ffs_policy};
use crate::quota::Accounting;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::Arc;
use vino_blockdev::SharedClock;
use vino_graft::GraftSlot;

/// Most file blocks one transaction frees of a file being truncated or released (8 MiB of
/// data, about a millisecond under the file system's lock); the rest go in transactions of
/// their own.
pub const FREE_SLICE: u64 = 2048;

pub(crate) fn now_ns() -> u64 {
    SharedClock::default().wall_ns()
}

/// A directory entry as [`crate::FileSystem::readdir`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub kind: FileType,
}

impl DirEntry {
    /// The name, as text (lossy for names that are not UTF-8).
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

/// What a new file or directory is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewFile {
    /// Permission bits (`0o7777` at most); the type bits are the file system's.
    pub mode: u16,
    pub uid: u32,
    pub gid: u32,
    /// The process creating the file: the only one allowed to graft its `file.block_buddy`.
    pub creator: u64,
}

impl NewFile {
    /// A file created by process `creator`, mode 0644, owned by root.
    pub fn by(creator: u64) -> NewFile {
        NewFile {
            mode: 0o644,
            uid: 0,
            gid: 0,
            creator,
        }
    }
}

/// Attributes to change; `None` leaves one as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime_ns: Option<u64>,
    pub mtime_ns: Option<u64>,
    /// A chown (`uid`) may put the new owner over its quota: set by the kernel for a
    /// privileged caller (Linux's CAP_SYS_RESOURCE); otherwise such a chown fails with
    /// QuotaExceeded (EDQUOT).
    pub ignore_quota: bool,
}

/// What `stat` says about a file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Stat {
    pub ino: u64,
    pub kind: FileType,
    /// Type and permission bits, as `st_mode`.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Blocks allocated (4 KiB each), indirect blocks included.
    pub blocks: u64,
    pub atime_ns: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    pub generation: u32,
    pub creator: u64,
    /// Device number of a character or block device, 0 otherwise.
    pub rdev: u64,
}

/// How [`crate::FileSystem::set_xattr`] treats an existing attribute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum XattrSet {
    /// Create or replace.
    #[default]
    Any,
    /// Create only: EEXIST if the attribute exists.
    Create,
    /// Replace only: ENODATA if it does not.
    Replace,
}

/// Flags of [`crate::FileSystem::rename_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenameFlags {
    /// Fail with EEXIST if the destination exists (`RENAME_NOREPLACE`).
    pub no_replace: bool,
    /// A replaced non-directory that loses its last name goes on the orphan list instead of
    /// being freed (the kernel still has it open).
    pub keep_replaced: bool,
}

pub(crate) fn stat_of(ino: u64, i: &Inode) -> Stat {
    Stat {
        ino,
        kind: i.file_type().unwrap_or(FileType::Regular),
        mode: u32::from(i.mode),
        nlink: i.nlink,
        uid: i.uid,
        gid: i.gid,
        size: i.size,
        blocks: u64::from(i.blocks),
        atime_ns: i.atime_ns,
        mtime_ns: i.mtime_ns,
        ctime_ns: i.ctime_ns,
        generation: i.generation,
        creator: i.creator,
        rdev: if i.file_type().is_some_and(FileType::is_device) {
            i.rdev
        } else {
            0
        },
    }
}

/// Counters of allocation and placement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct AllocCounters {
    pub blocks_allocated: u64,
    pub blocks_freed: u64,
    pub inodes_allocated: u64,
    pub inodes_freed: u64,
    /// Placement decisions made by a file's bound policy (graft or native).
    pub placements_grafted: u64,
    /// Placement decisions made by the default with nothing bound.
    pub placements_default: u64,
    /// Answers the allocator had to replace with the default (out of range).
    pub placements_rejected: u64,
}

pub(crate) enum Mode {
    Mounted,
    Failed(String),
    Unmounted,
}

/// A directory entry found by name.
pub(crate) struct Found {
    /// The directory's file block that holds the entry, and its device block.
    pub fb: u64,
    pub block: u64,
    /// The block's records as found, and which is the entry.
    pub entries: Vec<DirRecord>,
    pub index: usize,
    pub name: Vec<u8>,
}

impl Found {
    pub fn ino(&self) -> u64 {
        u64::from(self.entries[self.index].ino)
    }
}

/// What an allocation that found no space saw under the lock (see [`FsState::no_room`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct NoRoom {
    releases: u64,
    /// Freed blocks waited for a checkpoint, and the refusal was not root's reserve (which
    /// counts them free already): a commit and a checkpoint would make room.
    pub reusable: bool,
}

impl NoRoom {
    /// For a failure that was not a want of space (nothing was seen under the lock).
    pub const NOT_SEEN: NoRoom = NoRoom {
        releases: 0,
        reusable: false,
    };
}

/// The state of a mounted file system (see the module documentation).
pub(crate) struct FsState {
    /// Where timestamps come from.
    pub clock: SharedClock,
    pub meta: Meta,
    pub geo: Geometry,
    pub placement: Arc<Placement>,
    pub slots: FxHashMap<u64, Arc<GraftSlot<BlockBuddy>>>,
    pending_unslot: Vec<u64>,
    /// Blocks freed and not yet reusable, with the sequence number of the transaction that
    /// freed them: reusable once that transaction has been checkpointed (see
    /// [`FsState::release_deferred`]).
    deferred: VecDeque<(u64, u64)>,
    deferred_set: FxHashSet<u64>,
    /// Which inode each orphan follows on the orphan list (0: the head names it), as last
    /// seen: a hint, checked against the list before it is used (an op undone may have left it
    /// stale), so that taking a file off the list does not walk it from the head.
    pub(crate) orphan_prev: FxHashMap<u64, u64>,
    deferred_in_group: Vec<u32>,
    deferred_mark: usize,
    /// How many times freed blocks have become reusable ([`FsState::release_deferred`]
    /// releasing any): an allocation that found no space compares it to know whether another
    /// thread's checkpoint has made room since.
    releases: u64,
    /// Per group, a bit of its block bitmap below which no block can be taken (each one is in
    /// use or waits for a checkpoint), so that filling a group does not rescan its start for
    /// every block. Only ever lowered by frees, releases and rollbacks; raised by allocations.
    block_floor: Vec<u64>,
    /// The same for each group's inode bitmap.
    inode_floor: Vec<u64>,
    /// The directories in use, indexed by name.
    dirs: DirIndex,
    /// Inodes that got blocks since the last commit (for the data write-back hook).
    pub alloc_inos: BTreeSet<u64>,
    pub mode: Mode,
    pub counters: AllocCounters,
    /// Blocks and inodes charged to each owner, and the limits (see [`crate::quota`]).
    pub quota: Accounting,
    /// Free blocks of all groups (the sum of what placement knows of each).
    free_blocks: u64,
}

fn bad_name(name: &[u8]) -> Option<FsError> {
    if name.len() > MAX_NAME {
        return Some(FsError::NameTooLong(name.len()));
    }
    if !name_ok(name) {
        return Some(FsError::InvalidArgument(format!(
            "bad name {:?}",
            String::from_utf8_lossy(name)
        )));
    }
    None
}

pub(crate) fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// Checks a name for a new entry (not `.` or `..`).
pub(crate) fn check_new_name(name: &[u8]) -> Result<()> {
    if let Some(e) = bad_name(name) {
        return Err(e);
    }
    if name == b"." || name == b".." {
        return Err(FsError::InvalidArgument(format!(
            "`{}` cannot be created or replaced",
            show(name)
        )));
    }
    Ok(())
}

fn next_pref(geo: &Geometry, b: u64) -> u64 {
    if b + 1 < geo.block_count { b + 1 } else { b }
}

impl FsState {
    /// Now, for a timestamp.
    pub(crate) fn now_ns(&self) -> u64 {
        self.clock.wall_ns()
    }

    pub fn new(meta: Meta, placement: Arc<Placement>, quota: Accounting, clock: SharedClock) -> FsState {
        let geo = meta.geo.clone();
        let free_blocks = (0..geo.groups).map(|g| u64::from(placement.free(g))).sum();
        FsState {
            clock,
            deferred_in_group: vec![0; geo.groups as usize],
            block_floor: vec![0; geo.groups as usize],
            inode_floor: vec![0; geo.groups as usize],
            dirs: DirIndex::default(),
            meta,
            geo,
            placement,
            slots: FxHashMap::default(),
            pending_unslot: Vec::new(),
            deferred: VecDeque::new(),
            deferred_set: FxHashSet::default(),
            orphan_prev: FxHashMap::default(),
            deferred_mark: 0,
            releases: 0,
            alloc_inos: BTreeSet::new(),
            mode: Mode::Mounted,
            counters: AllocCounters::default(),
            quota,
            free_blocks,
        }
    }

    pub fn usable(&self) -> Result<()> {
        match &self.mode {
            Mode::Mounted => Ok(()),
            Mode::Failed(why) => Err(FsError::Io(std::io::Error::other(format!(
                "the file system stopped after an I/O error ({why}); unmount and mount it again"
            )))),
            Mode::Unmounted => Err(FsError::Io(std::io::Error::other("the file system is unmounted"))),
        }
    }

    // ---- ops ------------------------------------------------------------------------------

    pub fn begin_op(&mut self) {
        self.meta.begin_op();
        self.deferred_mark = self.deferred.len();
        self.pending_unslot.clear();
        self.quota.begin();
        self.dirs.begin_op();
    }

    pub fn end_op(&mut self) {
        self.meta.end_op();
        for ino in std::mem::take(&mut self.pending_unslot) {
            if let Some(slot) = self.slots.remove(&ino) {
                slot.unload();
            }
        }
    }

    pub fn rollback_op(&mut self) {
        let blocks: HashSet<u64> = self.meta.rollback_op().into_iter().collect();
        while self.deferred.len() > self.deferred_mark {
            let (b, _) = self.deferred.pop_back().expect("non-empty");
            self.deferred_set.remove(&b);
            let g = self.geo.group_of(b) as usize;
            self.deferred_in_group[g] = self.deferred_in_group[g].saturating_sub(1);
        }
        self.pending_unslot.clear();
        self.quota.rollback();
        // The rolled-back operation may have taken blocks or inodes: their bits are clear again.
        self.block_floor.fill(0);
        self.inode_floor.fill(0);
        self.dirs.rollback();
        for g in 0..self.geo.groups {
            if blocks.contains(&self.geo.header(g))
                && let Ok(h) = self.header(g)
            {
                self.set_group_free(g, h.free_blocks);
            }
        }
    }

    /// Records group `g`'s free blocks for placement, and in the total.
    fn set_group_free(&mut self, g: u32, free: u32) {
        let old = self.placement.free(g);
        self.free_blocks = self.free_blocks - u64::from(old) + u64::from(free);
        self.placement.set_free(g, free);
    }

    /// Blocks an allocation can take now (free ones not waiting for a checkpoint).
    pub(crate) fn free_now(&mut self) -> Result<u64> {
        let mut n = 0u64;
        for g in 0..self.geo.groups {
            let h = self.header(g)?;
            n += u64::from(h.free_blocks.saturating_sub(self.deferred_in_group[g as usize]));
        }
        Ok(n)
    }

    /// Free blocks, those waiting for a checkpoint included (what root's reserve is measured
    /// against, as statfs shows it).
    pub(crate) fn free_blocks_total(&self) -> u64 {
        if crate::CHECKS_INVARIANTS {
            let sum: u64 = (0..self.geo.groups).map(|g| u64::from(self.placement.free(g))).sum();
            assert_eq!(self.free_blocks, sum, "the free block total drifted");
        }
        self.free_blocks
    }

    /// Free inodes.
    pub(crate) fn free_inodes_total(&mut self) -> Result<u64> {
        let mut n = 0u64;
        for g in 0..self.geo.groups {
            n += u64::from(self.header(g)?.free_inodes);
        }
        Ok(n)
    }

    pub fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// What an operation that has just found no space sees, for [`crate::FileSystem::make_room`]
    /// to decide, later and without the lock held in between, whether trying again can help.
    pub fn no_room(&self) -> NoRoom {
        NoRoom {
            releases: self.releases,
            reusable: self.has_deferred() && !self.quota.reserve_refused,
        }
    }

    /// Whether blocks have become reusable since `seen` was taken.
    pub fn released_since(&self, seen: NoRoom) -> bool {
        self.releases != seen.releases
    }

    /// Makes reusable the freed blocks whose freeing transaction has been checkpointed: no
    /// transaction left in the journal can then write an old image over them.
    pub fn release_deferred(&mut self) {
        let tail_seq = self.meta.journal.tail_seq;
        let before = self.deferred.len();
        while let Some(&(b, seq)) = self.deferred.front() {
            if seq >= tail_seq {
                break;
            }
            self.deferred.pop_front();
            self.deferred_set.remove(&b);
            let g = self.geo.group_of(b) as usize;
            self.deferred_in_group[g] = self.deferred_in_group[g].saturating_sub(1);
            let bit = b - self.geo.group_start(g as u32);
            self.block_floor[g] = self.block_floor[g].min(bit);
        }
        if self.deferred.len() < before {
            self.releases += 1;
        }
        self.deferred_mark = self.deferred.len();
    }

    /// The first half of a commit, under the lock: seals the group headers' checksums and the
    /// running transaction into a journal transaction, for [`crate::FileSystem::commit`] to
    /// write without the lock ([`Meta::seal`]). None when nothing changed. An I/O error (a
    /// checkpoint the journal needed first) stops the file system.
    pub fn seal_transaction(&mut self) -> Result<Option<Sealed>> {
        if self.meta.dirty_count() == 0 {
            return Ok(None);
        }
        self.begin_op();
        let sealed = self.seal_groups();
        match sealed {
            Ok(()) => self.end_op(),
            Err(e) => {
                self.rollback_op();
                return Err(e);
            }
        }
        match self.meta.seal() {
            Ok(sealed) => Ok(sealed),
            Err(e) => self.after_io(Err(e)).map(|()| None),
        }
    }

    /// The end of a commit, under the lock again: the sealed transaction's write came back
    /// with `r`. An error stops the file system (the transaction's images are committed in
    /// memory only, and no later one may follow them).
    pub fn sealed_written(&mut self, r: std::io::Result<()>) -> Result<()> {
        self.after_io(r)?;
        self.release_deferred();
        Ok(())
    }

    /// Records a checkpoint written without the lock ([`Meta::plan_checkpoint`]) that came
    /// back with `r`: the journal is empty and the blocks its transactions freed are reusable.
    /// An error stops the file system.
    pub fn checkpoint_written(&mut self, plan: Checkpoint, r: std::io::Result<()>) -> Result<()> {
        self.after_io(r)?;
        self.meta.checkpointed(plan);
        self.release_deferred();
        Ok(())
    }

    fn after_io(&mut self, r: std::io::Result<()>) -> Result<()> {
        if let Err(e) = r {
            self.mode = Mode::Failed(e.to_string());
            return Err(FsError::Io(e));
        }
        Ok(())
    }

    /// Records the checksums of the changed bitmaps in their group headers, and seals every
    /// changed header, before a commit writes them.
    fn seal_groups(&mut self) -> Result<()> {
        let dirty: Vec<u64> = self.meta.dirty_blocks().collect();
        for g in 0..self.geo.groups {
            let is_dirty = |b: u64| dirty.binary_search(&b).is_ok();
            let (ib, bb, hb) = (self.geo.inode_bitmap(g), self.geo.block_bitmap(g), self.geo.header(g));
            let (ib_dirty, bb_dirty) = (is_dirty(ib), is_dirty(bb));
            if !ib_dirty && !bb_dirty && !is_dirty(hb) {
                continue;
            }
            let mut h = self.header(g)?;
            if ib_dirty {
                h.inode_bitmap_crc = bitmap_crc(g, self.meta.get(ib)?);
            }
            if bb_dirty {
                h.block_bitmap_crc = bitmap_crc(g, self.meta.get(bb)?);
            }
            h.encode_into(self.meta.get_mut(hb)?);
        }
        Ok(())
    }

    // ---- groups and bitmaps ---------------------------------------------------------------

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
    fn alloc_inode(&mut self, parent_group: u32, is_dir: bool, owner: u32) -> Result<u64> {
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

    fn free_inode(&mut self, ino: u64, was_dir: bool, generation: u32, owner: u32) -> Result<()> {
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

    // ---- inodes ---------------------------------------------------------------------------

    pub fn read_inode(&mut self, ino: u64) -> Result<Inode> {
        if !self.geo.valid_ino(ino) {
            return Err(FsError::NotFound(format!("inode {ino}")));
        }
        let (b, off) = self.geo.inode_location(ino);
        let blk = self.meta.get(b)?;
        Inode::decode(ino, &blk[off..off + INODE_SIZE]).map_err(FsError::Corrupt)
    }

    /// An inode in use.
    pub fn live(&mut self, ino: u64) -> Result<Inode> {
        let i = self.read_inode(ino)?;
        if i.is_free() {
            return Err(FsError::NotFound(format!("inode {ino}")));
        }
        Ok(i)
    }

    /// An inode in use that a directory entry points to: a free one is corruption.
    pub(crate) fn linked(&mut self, ino: u64) -> Result<Inode> {
        if !self.geo.valid_ino(ino) {
            return Err(corrupt(format!(
                "a directory entry points to inode {ino}, which does not exist"
            )));
        }
        let i = self.read_inode(ino)?;
        if i.is_free() {
            return Err(corrupt(format!(
                "a directory entry points to inode {ino}, which is free"
            )));
        }
        Ok(i)
    }

    pub fn write_inode(&mut self, ino: u64, i: &Inode) -> Result<()> {
        let (b, off) = self.geo.inode_location(ino);
        let blk = self.meta.get_mut(b)?;
        i.encode_into(ino, &mut blk[off..off + INODE_SIZE]);
        Ok(())
    }

    pub(crate) fn modify(&mut self, ino: u64, f: impl FnOnce(&mut Inode)) -> Result<Inode> {
        let mut i = self.live(ino)?;
        f(&mut i);
        self.write_inode(ino, &i)?;
        Ok(i)
    }

    pub fn stat(&mut self, ino: u64) -> Result<Stat> {
        let i = self.live(ino)?;
        Ok(stat_of(ino, &i))
    }

    pub fn set_attr(&mut self, ino: u64, a: &SetAttr) -> Result<Stat> {
        if a.mode.is_some_and(|m| m & !0o7777 != 0) {
            return Err(FsError::InvalidArgument("mode has bits outside 0o7777".into()));
        }
        let old = self.live(ino)?;
        if let Some(to) = a.uid.filter(|&to| to != old.uid) {
            self.transfer(&old, to, a.ignore_quota)?;
        }
        let now = self.now_ns();
        let i = self.modify(ino, |i| {
            if let Some(m) = a.mode {
                i.mode = (i.mode & S_IFMT) | m;
            }
            if let Some(u) = a.uid {
                i.uid = u;
            }
            if let Some(g) = a.gid {
                i.gid = g;
            }
            if let Some(t) = a.atime_ns {
                i.atime_ns = t;
            }
            if let Some(t) = a.mtime_ns {
                i.mtime_ns = t;
            }
            i.ctime_ns = now;
        })?;
        Ok(stat_of(ino, &i))
    }

    /// Chown's accounting: moves an inode's charge (itself, its blocks, its names beyond the
    /// first) from its owner to
    /// `to`. QuotaExceeded if that puts `to` over its quota, unless `ignore_quota` (a
    /// privileged caller, as Linux's CAP_SYS_RESOURCE). Root's reserve is not involved: no
    /// block is allocated.
    fn transfer(&mut self, i: &Inode, to: u32, ignore_quota: bool) -> Result<()> {
        let blocks = u64::from(i.blocks);
        let links = crate::quota::extra_names(i);
        if !ignore_quota {
            self.quota.check(to, blocks, 1)?;
            self.quota.check_links(to, links)?;
        }
        let b = i64::from(i.blocks);
        self.quota.charge(i.uid, -b, -1);
        self.quota.charge(to, b, 1);
        self.quota.charge_links(i.uid, -(links as i64));
        self.quota.charge_links(to, links as i64);
        debug_assert!(blocks == 0 || self.quota.held(to).blocks >= blocks);
        Ok(())
    }

    // ---- block mapping --------------------------------------------------------------------

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
    fn ensure_block_of(&mut self, ino: u64, inode: &mut Inode, fb: u64) -> Result<(u64, bool)> {
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
        self.free_range(ino, inode, keep, MAX_FILE_BLOCKS)
    }

    /// Frees every block of the file in file blocks `[from, to)`; an indirect block whose whole
    /// span is in the range goes too.
    pub(crate) fn free_range(&mut self, ino: u64, inode: &mut Inode, from: u64, to: u64) -> Result<()> {
        let to = to.min(MAX_FILE_BLOCKS);
        if from >= to {
            return Ok(());
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
        let big = u64::from(inode.blocks) > FREE_SLICE;
        let last = match big.then(|| self.last_mapped(ino, inode)).transpose()?.flatten() {
            Some(last) if last >= from => last,
            _ => {
                self.free_from(ino, inode, from)?;
                return Ok(false);
            }
        };
        let lo = (last + 1).saturating_sub(FREE_SLICE).max(from);
        self.free_from(ino, inode, lo)?;
        Ok(lo > from)
    }

    /// The last file block of `inode` that maps a block, if any.
    fn last_mapped(&mut self, ino: u64, inode: &Inode) -> Result<Option<u64>> {
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
        self.modify(ino, |i| {
            i.size = i.size.max(end);
            i.mtime_ns = now;
            i.ctime_ns = now;
        })?;
        // Ordered mode: a commit must not make the new size durable before the data it exposes,
        // so the data hook writes this file's pages first (as for a new allocation).
        self.alloc_inos.insert(ino);
        Ok(())
    }

    // ---- directories ----------------------------------------------------------------------

    /// A directory inode, or NotADirectory.
    pub fn dir(&mut self, ino: u64) -> Result<Inode> {
        let i = self.live(ino)?;
        if !i.is_dir() {
            return Err(FsError::NotADirectory(format!("inode {ino}")));
        }
        if !i.size.is_multiple_of(BS as u64) {
            return Err(corrupt(format!("directory {ino}: size {} is not whole blocks", i.size)));
        }
        Ok(i)
    }

    fn dir_block(&mut self, ino: u64, inode: &Inode, fb: u64) -> Result<u64> {
        self.bmap(ino, inode, fb)?
            .ok_or_else(|| corrupt(format!("directory {ino}: block {fb} is a hole")))
    }

    fn dir_entries(&mut self, ino: u64, b: u64) -> Result<Vec<RawEntry>> {
        dir_parse(self.meta.get(b)?, ino).map_err(FsError::Corrupt)
    }

    /// The records of directory `ino`'s block `b`, checked, with the block.
    fn dir_block_records(&mut self, ino: u64, b: u64) -> Result<(&Block, Vec<DirRecord>)> {
        let blk = self.meta.get(b)?;
        let records = dir_records_checked(blk, ino).map_err(FsError::Corrupt)?;
        Ok((blk, records))
    }

    /// The index of directory `dir` (see [`crate::dirindex`]), built from its blocks if needed.
    fn dir_index(&mut self, dir: u64, inode: &Inode) -> Result<&DirIdx> {
        if self.dirs.get(dir).is_none() {
            let mut idx = DirIdx::default();
            for fb in 0..inode.size / BS as u64 {
                let block = self.dir_block(dir, inode, fb)?;
                let (blk, records) = self.dir_block_records(dir, block)?;
                idx.add_block(fb, blk, &records);
            }
            self.dirs.insert(dir, idx);
        }
        Ok(self.dirs.get(dir).expect("just indexed"))
    }

    /// Checks the index of `dir` against its blocks, in builds that check invariants, for
    /// directories small enough that doing so after every change stays cheap.
    fn check_dir_index(&mut self, dir: u64) -> Result<()> {
        if !crate::CHECKS_INVARIANTS {
            return Ok(());
        }
        let inode = self.dir(dir)?;
        if inode.size / BS as u64 > 16 {
            return Ok(());
        }
        let mut fresh = DirIdx::default();
        for fb in 0..inode.size / BS as u64 {
            let block = self.dir_block(dir, &inode, fb)?;
            let (blk, records) = self.dir_block_records(dir, block)?;
            fresh.add_block(fb, blk, &records);
        }
        if let Some(idx) = self.dirs.get(dir) {
            assert_eq!(
                idx.blocks(),
                fresh.blocks(),
                "directory {dir}: the index's block count is off"
            );
            assert!(
                idx.same_as(&fresh),
                "directory {dir}: the index does not match the blocks"
            );
        }
        self.dirs.check();
        Ok(())
    }

    /// Finds `name` in directory `dir`: its index says which block, that block is parsed.
    pub fn dir_find(&mut self, dir: u64, inode: &Inode, name: &[u8]) -> Result<Option<Found>> {
        let Some(slot) = self.dir_index(dir, inode)?.get(name) else {
            return Ok(None);
        };
        let block = self.dir_block(dir, inode, slot.fb)?;
        let (blk, entries) = self.dir_block_records(dir, block)?;
        let Some(index) = entries.iter().position(|e| e.ino != 0 && e.name(blk) == name) else {
            self.dirs.forget(dir);
            return Err(corrupt(format!(
                "directory {dir}: `{}` is not in block {} where its index says",
                show(name),
                slot.fb
            )));
        };
        Ok(Some(Found {
            fb: slot.fb,
            block,
            entries,
            index,
            name: name.to_vec(),
        }))
    }

    pub fn lookup(&mut self, dir: u64, name: &[u8]) -> Result<u64> {
        if let Some(e) = bad_name(name) {
            return Err(e);
        }
        let d = self.dir(dir)?;
        match self.dir_index(dir, &d)?.get(name) {
            Some(slot) => Ok(u64::from(slot.ino)),
            None => Err(FsError::NotFound(show(name))),
        }
    }

    pub fn readdir(&mut self, dir: u64) -> Result<Vec<DirEntry>> {
        let d = self.dir(dir)?;
        let mut out = Vec::new();
        for fb in 0..d.size / BS as u64 {
            let b = self.dir_block(dir, &d, fb)?;
            for e in self.dir_entries(dir, b)? {
                if e.ino == 0 || e.name == b"." || e.name == b".." {
                    continue;
                }
                let kind = FileType::from_dirent_code(e.ftype).expect("parse checked the type");
                out.push(DirEntry {
                    name: e.name,
                    ino: u64::from(e.ino),
                    kind,
                });
            }
        }
        Ok(out)
    }

    /// Up to `max` entries of `dir` (`.` and `..` included, as stored) from position `from`
    /// on, each with its position: the entry's byte offset in the directory. An entry never
    /// moves while it exists (a new one fills a free record, a removed one is merged into the
    /// record before it), so a listing resumed at the position after the last entry it gave
    /// returns every entry present throughout exactly once, as ext2's telldir cookies do.
    pub fn readdir_from(&mut self, dir: u64, from: u64, max: usize) -> Result<Vec<(u64, DirEntry)>> {
        let d = self.dir(dir)?;
        let mut out = Vec::new();
        for fb in from / BS as u64..d.size / BS as u64 {
            let b = self.dir_block(dir, &d, fb)?;
            for e in self.dir_entries(dir, b)? {
                let pos = fb * BS as u64 + e.off as u64;
                if e.ino == 0 || pos < from {
                    continue;
                }
                if out.len() == max {
                    return Ok(out);
                }
                let kind = FileType::from_dirent_code(e.ftype).expect("parse checked the type");
                out.push((
                    pos,
                    DirEntry {
                        name: e.name,
                        ino: u64::from(e.ino),
                        kind,
                    },
                ));
            }
        }
        Ok(out)
    }

    fn dir_is_empty(&mut self, dir: u64, inode: &Inode) -> Result<bool> {
        Ok(self.dir_index(dir, inode)?.is_empty())
    }

    pub(crate) fn dir_add_entry(&mut self, dir: u64, name: &[u8], ino: u64, ftype: u8) -> Result<()> {
        let d = self.dir(dir)?;
        let need = dirent_size(name.len());
        let (fb, b) = match self.dir_index(dir, &d)?.block_with_room(need) {
            Some(fb) => (fb, self.dir_block(dir, &d, fb)?),
            None => {
                // No room: a new block at the end of the directory.
                let fb = d.size / BS as u64;
                let (b, _) = self.ensure_block(dir, fb)?;
                dir_empty_block(self.meta.create(b)?, dir);
                self.modify(dir, |i| i.size = (fb + 1) * BS as u64)?;
                (fb, b)
            }
        };
        let (_, mut entries) = self.dir_block_records(dir, b)?;
        let blk = self.meta.get_mut(b)?;
        if !dir_add(blk, &mut entries, dir, name, ino, ftype) {
            self.dirs.forget(dir);
            return Err(corrupt(format!(
                "directory {dir}: block {fb} has less room than its index says"
            )));
        }
        check_records(blk, &entries);
        let room = room_of(&entries);
        let slot = Slot { fb, ino: ino as u32 };
        self.dirs.added(dir, name, slot, room);
        self.check_dir_index(dir)
    }

    /// Removes the entry `f` found in `dir` (`f`'s records then describe the block as changed).
    pub(crate) fn dir_drop_entry(&mut self, dir: u64, f: &mut Found) -> Result<()> {
        let blk = self.meta.get_mut(f.block)?;
        dir_remove(blk, &mut f.entries, f.index, dir);
        check_records(blk, &f.entries);
        let room = room_of(&f.entries);
        self.dirs.removed(dir, &f.name, f.fb, room);
        self.check_dir_index(dir)
    }

    /// Points the entry `f` of `dir` at another inode.
    fn dir_retarget_entry(&mut self, dir: u64, f: &Found, ino: u64, ftype: u8) -> Result<()> {
        let blk = self.meta.get_mut(f.block)?;
        dir_retarget(blk, &f.entries[f.index], dir, ino, ftype);
        self.dirs.retargeted(dir, &f.name, ino as u32);
        self.check_dir_index(dir)
    }

    pub(crate) fn touch_dir(&mut self, dir: u64, nlink_delta: i32) -> Result<()> {
        let now = self.now_ns();
        self.modify(dir, |i| {
            i.mtime_ns = now;
            i.ctime_ns = now;
            i.nlink = i.nlink.saturating_add_signed(nlink_delta);
        })?;
        Ok(())
    }

    /// Frees an inode and all its blocks (its xattr block included).
    pub(crate) fn release(&mut self, ino: u64, mut inode: Inode) -> Result<()> {
        if inode.is_dir() {
            // The number may come back as another directory.
            self.dirs.forget(ino);
        }
        self.free_from(ino, &mut inode, 0)?;
        if inode.xattr != 0 {
            let x = self.ptr(ino, inode.xattr)?;
            self.free_block(inode.uid, x)?;
        }
        self.free_inode(ino, inode.is_dir(), inode.generation, inode.uid)
    }

    /// Creates a file or directory `name` in `dir`.
    pub fn create(&mut self, dir: u64, name: &[u8], kind: FileType, attrs: &NewFile) -> Result<u64> {
        self.create_node(dir, name, kind, 0, None, attrs)
    }

    /// Creates an inode of any type: `rdev` for a device, `target` for a symlink (checked by
    /// the caller).
    pub(crate) fn create_node(
        &mut self,
        dir: u64,
        name: &[u8],
        kind: FileType,
        rdev: u64,
        target: Option<&[u8]>,
        attrs: &NewFile,
    ) -> Result<u64> {
        check_new_name(name)?;
        if kind != FileType::Symlink && attrs.mode & !0o7777 != 0 {
            return Err(FsError::InvalidArgument("mode has bits outside 0o7777".into()));
        }
        let d = self.dir(dir)?;
        if self.dir_find(dir, &d, name)?.is_some() {
            return Err(FsError::Exists(show(name)));
        }
        let is_dir = kind == FileType::Directory;
        let ino = self.alloc_inode(self.geo.ino_group(dir), is_dir, attrs.uid)?;
        let old = self.read_inode(ino).unwrap_or_default();
        if !old.is_free() {
            return Err(corrupt(format!("inode {ino} is free in its bitmap but in use")));
        }
        let now = self.now_ns();
        let symlink = kind == FileType::Symlink;
        let target = target.unwrap_or_default();
        let inode = Inode {
            mode: kind.mode_bits() | if symlink { 0o777 } else { attrs.mode },
            nlink: if is_dir { 2 } else { 1 },
            uid: attrs.uid,
            gid: attrs.gid,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            generation: old.generation.wrapping_add(1),
            creator: attrs.creator,
            rdev: if kind.is_device() { rdev } else { 0 },
            size: if symlink { target.len() as u64 } else { 0 },
            inline: if symlink && target.len() <= INLINE_SYMLINK {
                target.to_vec()
            } else {
                Vec::new()
            },
            ..Inode::default()
        };
        self.write_inode(ino, &inode)?;
        if symlink && target.len() > INLINE_SYMLINK {
            // A slow symlink: the target in one block, journaled like a directory block.
            let (b, _) = self.ensure_block(ino, 0)?;
            let blk = self.meta.create(b)?;
            blk.fill(0);
            blk[..target.len()].copy_from_slice(target);
        }
        if is_dir {
            let (b, _) = self.ensure_block(ino, 0)?;
            let blk = self.meta.create(b)?;
            dir_first_block(blk, ino, dir);
            self.modify(ino, |i| i.size = BS as u64)?;
        }
        self.dir_add_entry(dir, name, ino, kind.dirent_code())?;
        self.touch_dir(dir, i32::from(is_dir))?;
        Ok(ino)
    }

    /// A new name for an existing file.
    pub fn link(&mut self, ino: u64, dir: u64, name: &[u8]) -> Result<()> {
        check_new_name(name)?;
        let i = self.live(ino)?;
        if i.is_dir() {
            return Err(FsError::IsADirectory(format!(
                "inode {ino}: directories cannot be linked"
            )));
        }
        if i.nlink == 0 {
            return Err(FsError::NotFound(format!("inode {ino} has no name left")));
        }
        let d = self.dir(dir)?;
        if self.dir_find(dir, &d, name)?.is_some() {
            return Err(FsError::Exists(show(name)));
        }
        // A second name is charged to the file's owner (see `crate::quota`).
        self.quota.check_links(i.uid, 1)?;
        self.quota.charge_links(i.uid, 1);
        let ftype = i.file_type().expect("live inode has a type").dirent_code();
        self.dir_add_entry(dir, name, ino, ftype)?;
        let now = self.now_ns();
        self.modify(ino, |i| {
            i.nlink += 1;
            i.ctime_ns = now;
        })?;
        self.touch_dir(dir, 0)
    }

    pub fn unlink(&mut self, dir: u64, name: &[u8]) -> Result<()> {
        self.unlink_with(dir, name, false)
    }

    /// Removes a name of a non-directory; if it was the last, the inode is freed, or with
    /// `keep` put on the orphan list.
    pub(crate) fn unlink_with(&mut self, dir: u64, name: &[u8], keep: bool) -> Result<()> {
        if let Some(e) = bad_name(name) {
            return Err(e);
        }
        let d = self.dir(dir)?;
        let mut f = self
            .dir_find(dir, &d, name)?
            .ok_or_else(|| FsError::NotFound(show(name)))?;
        let ino = f.ino();
        let target = self.linked(ino)?;
        if target.is_dir() {
            return Err(FsError::IsADirectory(show(name)));
        }
        self.dir_drop_entry(dir, &mut f)?;
        self.drop_link(ino, target, keep)?;
        self.touch_dir(dir, 0)
    }

    /// A non-directory loses a name: freed if it was the last (or, with `keep`, put on the
    /// orphan list), else its ctime changes.
    fn drop_link(&mut self, ino: u64, mut target: Inode, keep: bool) -> Result<()> {
        if target.nlink > 1 {
            self.quota.charge_links(target.uid, -1);
        }
        target.nlink = target.nlink.saturating_sub(1);
        if target.nlink == 0 && !keep {
            return self.release(ino, target);
        }
        target.ctime_ns = self.now_ns();
        self.write_inode(ino, &target)?;
        if target.nlink == 0 {
            self.push_orphan(ino)?;
        }
        Ok(())
    }

    pub fn rmdir(&mut self, dir: u64, name: &[u8]) -> Result<()> {
        if let Some(e) = bad_name(name) {
            return Err(e);
        }
        if name == b"." {
            return Err(FsError::InvalidArgument("cannot remove `.`".into()));
        }
        if name == b".." {
            return Err(FsError::NotEmpty("..".into()));
        }
        let d = self.dir(dir)?;
        let mut f = self
            .dir_find(dir, &d, name)?
            .ok_or_else(|| FsError::NotFound(show(name)))?;
        let ino = f.ino();
        let target = self.linked(ino)?;
        if !target.is_dir() {
            return Err(FsError::NotADirectory(show(name)));
        }
        if !self.dir_is_empty(ino, &target)? {
            return Err(FsError::NotEmpty(show(name)));
        }
        self.dir_drop_entry(dir, &mut f)?;
        self.release(ino, target)?;
        self.touch_dir(dir, -1)
    }

    /// The parent of a directory (its `..`).
    fn parent_of(&mut self, dir: u64) -> Result<u64> {
        let d = self.dir(dir)?;
        match self.dir_find(dir, &d, b"..")? {
            Some(f) => Ok(f.ino()),
            None => Err(corrupt(format!("directory {dir} has no `..`"))),
        }
    }

    /// True if directory `dir` is `ancestor` or lies below it.
    pub fn within(&mut self, dir: u64, ancestor: u64) -> Result<bool> {
        let mut cur = dir;
        let mut steps = 0u64;
        loop {
            if cur == ancestor {
                return Ok(true);
            }
            if cur == ROOT_INO {
                return Ok(false);
            }
            cur = self.parent_of(cur)?;
            steps += 1;
            if steps > self.geo.inode_count() {
                return Err(corrupt("directory tree has a cycle"));
            }
        }
    }

    pub fn rename(&mut self, sdir: u64, sname: &[u8], ddir: u64, dname: &[u8]) -> Result<()> {
        self.rename_with(sdir, sname, ddir, dname, RenameFlags::default())
    }

    pub fn rename_with(&mut self, sdir: u64, sname: &[u8], ddir: u64, dname: &[u8], flags: RenameFlags) -> Result<()> {
        check_new_name(sname)?;
        check_new_name(dname)?;
        let sd = self.dir(sdir)?;
        let dd = self.dir(ddir)?;
        let src = self
            .dir_find(sdir, &sd, sname)?
            .ok_or_else(|| FsError::NotFound(show(sname)))?;
        let s_ino = src.ino();
        let s = self.linked(s_ino)?;
        let s_is_dir = s.is_dir();
        let dst = self.dir_find(ddir, &dd, dname)?;
        if flags.no_replace && dst.is_some() {
            return Err(FsError::Exists(show(dname)));
        }
        if let Some(d) = &dst
            && d.ino() == s_ino
        {
            return Ok(());
        }
        // Refuse to move a directory into its own subtree.
        if s_is_dir && self.within(ddir, s_ino)? {
            return Err(FsError::InvalidArgument(format!(
                "cannot move directory `{}` into its own subtree",
                show(sname)
            )));
        }
        let ftype = s.file_type().expect("live inode has a type").dirent_code();
        match dst {
            Some(d) => {
                let d_ino = d.ino();
                let target = self.linked(d_ino)?;
                match (s_is_dir, target.is_dir()) {
                    (true, false) => return Err(FsError::NotADirectory(show(dname))),
                    (false, true) => return Err(FsError::IsADirectory(show(dname))),
                    (true, true) if !self.dir_is_empty(d_ino, &target)? => return Err(FsError::NotEmpty(show(dname))),
                    _ => {}
                }
                self.dir_retarget_entry(ddir, &d, s_ino, ftype)?;
                if target.is_dir() {
                    self.release(d_ino, target)?;
                    self.touch_dir(ddir, -1)?;
                } else {
                    self.drop_link(d_ino, target, flags.keep_replaced)?;
                }
            }
            None => self.dir_add_entry(ddir, dname, s_ino, ftype)?,
        }
        // The source entry may have moved if the destination is the same directory: find it again.
        let sd = self.dir(sdir)?;
        let mut src = self
            .dir_find(sdir, &sd, sname)?
            .ok_or_else(|| corrupt("rename source vanished"))?;
        self.dir_drop_entry(sdir, &mut src)?;
        if s_is_dir && sdir != ddir {
            let s_inode = self.dir(s_ino)?;
            let dotdot = self
                .dir_find(s_ino, &s_inode, b"..")?
                .ok_or_else(|| corrupt(format!("directory {s_ino} has no `..`")))?;
            self.dir_retarget_entry(s_ino, &dotdot, ddir, FT_DIR)?;
            self.touch_dir(sdir, -1)?;
            self.touch_dir(ddir, 1)?;
        } else {
            self.touch_dir(sdir, 0)?;
            if sdir != ddir {
                self.touch_dir(ddir, 0)?;
            }
        }
        let now = self.now_ns();
        self.modify(s_ino, |i| i.ctime_ns = now)?;
        Ok(())
    }

    /// Resolves an absolute path.
    pub fn resolve(&mut self, path: &[u8]) -> Result<u64> {
        if path.first() != Some(&b'/') {
            return Err(FsError::InvalidArgument(format!(
                "path `{}` is not absolute",
                show(path)
            )));
        }
        let mut cur = ROOT_INO;
        for comp in path.split(|&c| c == b'/').filter(|c| !c.is_empty()) {
            cur = self.lookup(cur, comp)?;
        }
        Ok(cur)
    }

    /// Resolves the directory of an absolute path and returns it with the last component
    /// (NotADirectory if it is something else).
    pub fn resolve_parent<'p>(&mut self, path: &'p [u8]) -> Result<(u64, &'p [u8])> {
        if path.first() != Some(&b'/') {
            return Err(FsError::InvalidArgument(format!(
                "path `{}` is not absolute",
                show(path)
            )));
        }
        let trimmed = {
            let mut end = path.len();
            while end > 1 && path[end - 1] == b'/' {
                end -= 1;
            }
            &path[..end]
        };
        let cut = trimmed.iter().rposition(|&c| c == b'/').expect("starts with /");
        let (dir, name) = (&trimmed[..cut.max(1)], &trimmed[cut + 1..]);
        if name.is_empty() {
            return Err(FsError::InvalidArgument("the root has no parent".into()));
        }
        // The directory must be one (ENOTDIR) before any later path of the same call is
        // looked at, as a POSIX path walk stops there.
        let ino = self.resolve(dir)?;
        self.dir(ino)?;
        Ok((ino, name))
    }
}

/// In builds that check invariants: the records a change of a directory block kept (see
/// [`dir_add`]) are the block's parse.
fn check_records(block: &Block, records: &[DirRecord]) {
    if crate::CHECKS_INVARIANTS {
        assert_eq!(
            dir_records(block).as_deref(),
            Ok(records),
            "the records kept after a directory change are not the block's"
        );
    }
}

/// Checks that an inode is a regular file: IsADirectory for a directory, InvalidArgument for
/// the other types.
pub(crate) fn regular(ino: u64, i: &Inode) -> Result<()> {
    match i.file_type() {
        Some(FileType::Regular) => Ok(()),
        Some(FileType::Directory) => Err(FsError::IsADirectory(format!("inode {ino}"))),
        _ => Err(FsError::InvalidArgument(format!("inode {ino} is not a regular file"))),
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
