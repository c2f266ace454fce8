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
//!
//! The operations are split by what they change: [`alloc`] (groups, bitmaps, blocks and inodes
//! taken and freed), [`inodes`], [`blockmap`] (a file's blocks and its size) and [`names`]
//! (directory entries and paths). This module holds the state and the ops and commits around
//! them.

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

mod alloc;
mod blockmap;
mod chunks;
mod inodes;
mod names;

pub(crate) use inodes::regular;
pub(crate) use names::show;

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
    /// The stream codec of a stream file (its data is kept encoded) or of a directory (handed
    /// to what is made in it).
    pub stream: Option<ModuleId>,
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
        stream: i.stream,
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
    /// Stream files written past their size on disk: inode -> (generation, size). A stream
    /// file's chunks are stored by the kernel's write-back, which a commit cannot wait for (it
    /// needs this lock), so its size on disk only grows over chunks stored (as ext4's
    /// `i_disksize` does): a power cut leaves it shorter, never longer with zeros.
    stream_sizes: FxHashMap<u64, (u32, u64)>,
    /// What the operation under way changed in `stream_sizes` (each inode's value before), so
    /// that a rolled-back operation leaves the sizes as they were.
    stream_sizes_undo: Vec<(u64, Option<(u32, u64)>)>,
    pub mode: Mode,
    pub counters: AllocCounters,
    /// Blocks and inodes charged to each owner, and the limits (see [`crate::quota`]).
    pub quota: Accounting,
    /// Free blocks of all groups (the sum of what placement knows of each).
    free_blocks: u64,
    /// Decoded inodes by number, as their blocks hold them now: an open reads the same few
    /// inodes several times (the walk's directories, the file), and decoding one (its checksum,
    /// its fields) cost more than the rest of a cached lookup. Filled by reads; an inode is
    /// dropped when it is written, all of them when an operation is undone (its blocks go back),
    /// and all of them when there are [`INODE_CACHE`].
    pub(crate) inodes: FxHashMap<u64, Inode>,
}

/// Most decoded inodes [`FsState::inodes`] keeps.
pub(crate) const INODE_CACHE: usize = 4096;

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
            stream_sizes: FxHashMap::default(),
            stream_sizes_undo: Vec::new(),
            mode: Mode::Mounted,
            counters: AllocCounters::default(),
            quota,
            free_blocks,
            inodes: FxHashMap::default(),
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

    /// Stream file `ino`'s size written beyond its size on disk, if any: (generation, size).
    pub(crate) fn stream_size(&self, ino: u64) -> Option<(u32, u64)> {
        self.stream_sizes.get(&ino).copied()
    }

    /// Sets (or, `None`, forgets) stream file `ino`'s size written beyond its size on disk,
    /// undone if the operation is rolled back.
    pub(crate) fn set_stream_size(&mut self, ino: u64, to: Option<(u32, u64)>) {
        let before = match to {
            Some(v) => self.stream_sizes.insert(ino, v),
            None => self.stream_sizes.remove(&ino),
        };
        if before != to {
            self.stream_sizes_undo.push((ino, before));
        }
    }

    /// Every stream file with a size written beyond its size on disk.
    pub(crate) fn stream_sizes(&self) -> Vec<(u64, (u32, u64))> {
        self.stream_sizes.iter().map(|(&i, &p)| (i, p)).collect()
    }

    pub fn begin_op(&mut self) {
        self.meta.begin_op();
        self.deferred_mark = self.deferred.len();
        self.pending_unslot.clear();
        self.quota.begin();
        self.dirs.begin_op();
        self.stream_sizes_undo.clear();
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
        self.inodes.clear();
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
        while let Some((ino, before)) = self.stream_sizes_undo.pop() {
            match before {
                Some(v) => self.stream_sizes.insert(ino, v),
                None => self.stream_sizes.remove(&ino),
            };
        }
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
}
