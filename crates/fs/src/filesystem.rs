//! The mounted file system, [`FileSystem`]: mount, its public operations, commit, sync and
//! unmount, and the uncached data path. Each operation takes the lock around the state
//! ([`crate::state`]): `with_state` for one that only reads, `in_transaction` for one that changes
//! metadata (it goes whole into the running journal transaction, which it may first commit).

use crate::committer::Committer;
use crate::error::{FsError, Result, corrupt};
use crate::journal::{self, JournalHeader, ScanError};
use crate::layout::*;
use crate::meta::{JournalState, Meta, MetaCounters};
use crate::placement::{BlockBuddy, Placement};
use crate::quota::{Accounting, Quota, QuotaUsage, count_usage};
use crate::state::{AllocCounters, DirEntry, FsState, Mode, NewFile, NoRoom, RenameFlags, SetAttr, Stat, XattrSet};
use crate::write::DeviceTarget;
use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use vino_blockdev::{AlignedBuf, BlockDevice, SharedClock};
use vino_graft::{Access, GraftSlot, Runtime};

/// Called before every commit with the inodes that got blocks, data or a new size since the last one:
/// the page cache writes their dirty pages, so that the commit (which flushes the device first)
/// never makes an allocation or a size durable before the data it exposes. It is called without
/// the file system's lock and may call back into the file system.
pub type DataHook = Arc<dyn Fn(&[u64]) -> io::Result<()> + Send + Sync>;

/// Rounds of the data hook one commit runs without the lock before a last one under it (see
/// [`FileSystem::commit`]).
const HOOK_ROUNDS: usize = 4;

/// How many times in a row an operation that ran out of space is tried again after room was
/// made for it ([`FileSystem::make_room`]): other threads may take the room first, most often
/// on a busy machine where the thread that made it is descheduled (three, as ext4 retries an
/// allocation after a commit, lost the race under a test's load). It gives up at once when no
/// room can be made (nothing waits for a checkpoint and none happened meanwhile): the disk is
/// full. A bound, so a writer that always loses pays for a bounded number of commits.
pub(crate) const ROOM_RETRIES: u32 = 16;

/// How to mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    /// Commit the running transaction (calling the data hook) once it has this many dirty
    /// blocks; `None`: a quarter of the journal.
    pub commit_blocks: Option<usize>,
    /// Commit in the background ([`crate::committer`]): a thread commits once the running
    /// transaction passes `commit_blocks` (the operation that passed it goes on) and at least
    /// this often while anything is uncommitted. `None`: every commit is made inline by the
    /// operation that passes the threshold, and nothing is committed on a timer.
    pub commit_interval: Option<Duration>,
    /// Metadata blocks kept in memory (dirty ones always are).
    pub meta_cache_blocks: usize,
    /// Quotas per user and root's reserve (see [`crate::quota`]).
    pub quota: Quota,
    /// Where timestamps come from (the machine's clock; a simulation's own).
    pub clock: SharedClock,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            commit_blocks: None,
            commit_interval: None,
            meta_cache_blocks: 8192,
            quota: Quota::default(),
            clock: SharedClock::default(),
        }
    }
}

/// Counters of a mounted file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FsStats {
    pub block_count: u64,
    pub groups: u32,
    pub inodes: u64,
    pub free_blocks: u64,
    pub free_inodes: u64,
    /// Blocks only root may allocate (root's reserve).
    pub reserved_blocks: u64,
    /// Inodes only root may allocate.
    pub reserved_inodes: u64,
    /// Blocks each uid but root may hold.
    pub user_block_limit: u64,
    /// Inodes each uid but root may hold.
    pub user_inode_limit: u64,
    /// Uids holding blocks or inodes.
    pub quota_users: u64,
    /// Journal transactions replayed when this file system was mounted.
    pub replayed_transactions: u64,
    /// Inodes on the orphan list freed when this file system was mounted.
    pub orphans_freed_at_mount: u64,
    pub meta: MetaCounters,
    /// Metadata blocks held in memory now (at most `MountOptions::meta_cache_blocks` plus the
    /// running transaction's dirty blocks).
    pub meta_cached_blocks: u64,
    pub alloc: AllocCounters,
}

/// Where a file block is, as [`FileSystem::allocate_block`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    pub block: u64,
    /// True if the block was just allocated: its contents on the device are stale, so a writer
    /// that does not write it whole must zero-fill it.
    pub fresh: bool,
}

/// A mounted VINO file system.
///
/// # Locking
///
/// One lock (a mutex around the whole in-memory state) serialises every operation on metadata,
/// including the metadata reads and the journal writes they cause. It is held for the length
/// of one operation and released between the blocks of a multi-block read or write, whose data
/// transfers happen outside it. Concurrent writers to the *same* file must be serialised by the
/// caller (the kernel's per-file lock): a write or a resize ([`FileSystem::write_with`],
/// [`FileSystem::set_size_with`]) reads the file's size and then writes, not atomically.
///
/// # Durability
///
/// Metadata changes are atomic and reach the disk at the next commit: [`FileSystem::commit`],
/// [`FileSystem::fsync`], [`FileSystem::sync`], or when the running transaction grows past the
/// commit threshold, or when an allocation needs the blocks freed in it. File data is not
/// journaled (ordered mode): every commit first has the data hook write the data of files that
/// got blocks, data or a new size since the last one (every write counts, and so do the partial
/// edge blocks a punched hole or a zeroed range zeroes; a page cache above keeps the data), then
/// flushes the device, so data written before the commit is durable with it, and never after
/// the allocations and sizes that expose it. Dropping a `FileSystem` without
/// [`FileSystem::unmount`] is like a power cut: what was committed survives.
pub struct FileSystem {
    state: Mutex<FsState>,
    dev: Arc<dyn BlockDevice>,
    runtime: Runtime,
    geo: Geometry,
    placement: Arc<Placement>,
    sb: Mutex<Superblock>,
    soft_commit: usize,
    hard_commit: usize,
    hook: Mutex<Option<DataHook>>,
    /// The background committer, if the mount asked for one.
    committer: Option<Arc<Committer>>,
    /// Held (shared) by a write from its blocks' allocation until their data has reached the
    /// write's target, and (alone) by a commit's last round: no commit falls between the two, so
    /// none makes an allocation durable before the data it exposes (ordered mode). Taken before
    /// the state's lock.
    data_gate: RwLock<()>,
    /// Held by a commit from its first hook round until its transaction is in the journal, and
    /// by a checkpoint: one at a time, and none while a sealed transaction is being written
    /// without the state's lock (a checkpoint then would write its images home, or move the
    /// journal's tail past them, before the journal holds them). Taken before the data gate and
    /// the state's lock. fsyncs that queue here find their changes committed by the one ahead
    /// of them (a group commit).
    commit_io: Mutex<()>,
    replayed: u64,
    orphans_freed: u64,
}

impl Drop for FileSystem {
    fn drop(&mut self) {
        if let Some(c) = &self.committer {
            c.stop();
        }
    }
}

/// Reads the superblock, falling back to the backup. Returns it and whether the primary was
/// bad.
pub(crate) fn read_superblock(dev: &dyn BlockDevice) -> Result<(Superblock, bool)> {
    let mut b = [0u8; BS];
    dev.read_blocks(SB_PRIMARY, &mut b)?;
    check_version(&b)?;
    let primary = Superblock::decode(&b);
    let primary = match primary {
        Ok(sb) => return Ok((sb, false)),
        Err(e) => e,
    };
    dev.read_blocks(SB_BACKUP, &mut b)?;
    match Superblock::decode(&b) {
        Ok(sb) => Ok((sb, true)),
        Err(backup) => Err(corrupt(format!(
            "no valid superblock (primary: {primary}; backup: {backup})"
        ))),
    }
}

/// Finds the journal's state and replays every committed transaction into the device. Returns
/// the journal as the writer continues it and how many transactions were replayed.
pub(crate) fn recover(dev: &dyn BlockDevice, geo: &Geometry, fs_id: u64) -> Result<(JournalState, u64)> {
    let mut s0 = [0u8; BS];
    let mut s1 = [0u8; BS];
    dev.read_blocks(JOURNAL_START, &mut s0)?;
    dev.read_blocks(JOURNAL_START + 1, &mut s1)?;
    let header = journal::pick_header(&s0, &s1, fs_id, geo.log_len())
        .ok_or_else(|| corrupt("journal header damaged (both copies); fsck can reset it"))?;
    let mut read = |b: u64| -> io::Result<Box<Block>> {
        let mut buf = Box::new([0u8; BS]);
        dev.read_blocks(b, &mut buf[..])?;
        Ok(buf)
    };
    let scan = journal::scan(geo, &header, &mut read).map_err(|e| match e {
        ScanError::Io(e) => FsError::Io(e),
        ScanError::Corrupt(why) => FsError::Corrupt(why),
    })?;
    let replayed = scan.transactions.len() as u64;
    let mut generation = header.generation;
    if replayed > 0 {
        let mut latest: BTreeMap<u64, Box<Block>> = BTreeMap::new();
        for t in scan.transactions {
            for (home, img) in t.images {
                latest.insert(home, img);
            }
        }
        for (home, img) in &latest {
            dev.write_blocks(*home, &img[..])?;
        }
        dev.flush()?;
    }
    // The whole log in one read (it is looked at block by block).
    let mut log = AlignedBuf::new(geo.log_len() as usize);
    dev.read_blocks(geo.log_start(), &mut log)?;
    let mut read_log = |b: u64| -> io::Result<Box<Block>> {
        let at = (b - geo.log_start()) as usize * BS;
        Ok(Box::new(log[at..at + BS].try_into().expect("a whole block")))
    };
    let next_seq = journal::fresh_seq(geo, fs_id, scan.next_seq, &mut read_log)?;
    if replayed > 0 || next_seq != header.seq {
        // Durable before the writer's first transaction, which a later scan must find here.
        let h = JournalHeader {
            fs_id,
            generation: generation + 1,
            tail: scan.end,
            seq: next_seq,
        };
        dev.write_blocks(h.slot(), &h.encode()[..])?;
        dev.flush()?;
        generation = h.generation;
    }
    let state = JournalState {
        fs_id,
        generation,
        tail: scan.end,
        head: scan.end,
        used: 0,
        next_seq,
        tail_seq: next_seq,
    };
    Ok((state, replayed))
}

/// Refuses a superblock of another format version with [`FsError::Version`] (saying how to
/// upgrade an older one).
/// A stream file's blocks are chunk maps, not its data: the paths that map or read data block by
/// block refuse it (its data is read and written through the kernel's page cache, encoded).
fn refuse_stream(ino: u64, i: &crate::layout::Inode) -> Result<()> {
    if i.stream.is_some() && i.is_regular() {
        return Err(FsError::InvalidArgument(format!(
            "inode {ino} is a stream file: its data is encoded in chunks"
        )));
    }
    Ok(())
}

pub(crate) fn check_version(b: &[u8]) -> Result<()> {
    match Superblock::version_of(b).and_then(version_problem) {
        Some(why) => Err(FsError::Version(why)),
        None => Ok(()),
    }
}

/// Upgrades the file system on `dev` (not mounted) to this format version ([`VERSION`]):
/// rewrites its superblocks. Returns the version it had. Version 1 differs from version 2 only
/// by fields that are zero in every version-1 record (inode and group header), so nothing else
/// changes; the journal is left for the next mount to replay.
pub fn upgrade(dev: &dyn BlockDevice) -> Result<u32> {
    let mut b = [0u8; BS];
    let mut found = None;
    for at in [SB_PRIMARY, SB_BACKUP] {
        dev.read_blocks(at, &mut b)?;
        match Superblock::decode_any(&b) {
            Ok(v) => {
                found = Some(v);
                break;
            }
            Err(why) => {
                if let Some(why) = Superblock::version_of(&b)
                    .filter(|&v| v > VERSION)
                    .and_then(version_problem)
                {
                    return Err(FsError::Version(why));
                }
                if at == SB_BACKUP {
                    return Err(corrupt(format!("no valid superblock ({why})")));
                }
            }
        }
    }
    let (sb, version) = found.expect("found or returned");
    if version < VERSION {
        write_superblock(dev, &sb)?;
    }
    Ok(version)
}

fn write_superblock(dev: &dyn BlockDevice, sb: &Superblock) -> io::Result<()> {
    let b = sb.encode();
    dev.write_blocks(SB_PRIMARY, &b[..])?;
    dev.flush()?;
    dev.write_blocks(SB_BACKUP, &b[..])?;
    dev.flush()
}

impl FileSystem {
    /// Mounts the file system on `dev`: finds the superblock (or its backup), replays the
    /// journal, checks the group headers and the root directory. A damaged image is refused with
    /// [`FsError::Corrupt`] saying what is wrong. Placement grafts run on `runtime`.
    pub fn mount(dev: Arc<dyn BlockDevice>, runtime: &Runtime, opts: &MountOptions) -> Result<Arc<FileSystem>> {
        let (mut sb, _) = read_superblock(&*dev)?;
        if dev.block_count() < sb.block_count {
            return Err(corrupt(format!(
                "the file system has {} blocks but {} only {}",
                sb.block_count,
                dev.name(),
                dev.block_count()
            )));
        }
        let geo = Geometry::new(&sb).map_err(FsError::Corrupt)?;
        let (journal, replayed) = recover(&*dev, &geo, sb.fs_id)?;
        let mut free = Vec::with_capacity(geo.groups as usize);
        let mut b = [0u8; BS];
        for g in 0..geo.groups {
            dev.read_blocks(geo.header(g), &mut b)?;
            let h = GroupHeader::decode(&b, g, &geo).map_err(FsError::Corrupt)?;
            free.push(h.free_blocks);
        }
        let placement = Arc::new(Placement::new(&geo, &free));
        let log = geo.log_len() as usize;
        let meta = Meta::new(dev.clone(), geo.clone(), journal, opts.meta_cache_blocks);
        let data_blocks = (0..geo.groups).map(|g| geo.data_blocks(g)).sum();
        let mut quota = Accounting::new(&opts.quota, data_blocks, geo.inode_count())?;
        // In memory only, rebuilt at every mount (the journal is replayed: the device is
        // current). Orphans count until freed below.
        quota.set_counted(count_usage(&geo, &mut |b, buf| Ok(dev.read_blocks(b, buf)?))?);
        let mut state = FsState::new(meta, placement.clone(), quota, opts.clock.clone());
        let root = state.read_inode(ROOT_INO)?;
        if !root.is_dir() {
            return Err(corrupt("the root inode is not a directory"));
        }
        state.dir(ROOT_INO)?;
        sb.state = STATE_MOUNTED;
        sb.mount_count = sb.mount_count.wrapping_add(1);
        sb.mounted_ns = opts.clock.wall_ns();
        write_superblock(&*dev, &sb)?;
        let hard = log / 2;
        let soft = opts.commit_blocks.unwrap_or(log / 4).clamp(1, hard);
        let mut fs = FileSystem {
            state: Mutex::new(state),
            dev,
            runtime: runtime.clone(),
            geo,
            placement,
            sb: Mutex::new(sb),
            soft_commit: soft,
            hard_commit: hard,
            hook: Mutex::new(None),
            committer: opts.commit_interval.map(Committer::new),
            data_gate: RwLock::new(()),
            commit_io: Mutex::new(()),
            replayed,
            orphans_freed: 0,
        };
        // Nothing can hold an orphan open after a restart: free them all.
        let orphans = fs.orphans()?;
        for &ino in &orphans {
            fs.in_transaction(|g| g.release_orphan(ino))?;
        }
        if !orphans.is_empty() {
            fs.commit()?;
        }
        fs.orphans_freed = orphans.len() as u64;
        let fs = Arc::new(fs);
        if let Some(c) = &fs.committer {
            c.start(Arc::downgrade(&fs))?;
        }
        Ok(fs)
    }

    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, FsState>> {
        let g = self.state.lock();
        g.usable()?;
        Ok(g)
    }

    /// Runs a read-only operation on the state, under the lock.
    pub(crate) fn with_state<T>(&self, f: impl FnOnce(&mut FsState) -> Result<T>) -> Result<T> {
        let mut g = self.lock()?;
        f(&mut g)
    }

    /// Runs an operation that changes metadata, under the lock: all of it or none of it goes
    /// into the running journal transaction. A transaction past the commit threshold is
    /// committed first; an operation that runs out of space is tried again when
    /// [`FileSystem::make_room`] makes (or finds) room, up to [`ROOM_RETRIES`] times. Either
    /// commit goes through [`FileSystem::commit`], data hook first, with the lock released
    /// while the hook runs.
    pub(crate) fn in_transaction<T>(&self, mut f: impl FnMut(&mut FsState) -> Result<T>) -> Result<T> {
        let mut g = self.lock()?;
        let mut committed = false;
        while self.commit_due(g.meta.dirty_count(), committed) {
            drop(g);
            self.commit()?;
            committed = true;
            g = self.lock()?;
        }
        let mut retries = 0;
        loop {
            g.begin_op();
            match f(&mut g) {
                Ok(v) => {
                    g.end_op();
                    return Ok(v);
                }
                Err(e) => {
                    g.rollback_op();
                    if !matches!(e, FsError::NoSpace) || retries == ROOM_RETRIES {
                        return Err(e);
                    }
                    let seen = g.no_room();
                    drop(g);
                    if !self.make_room(seen)? {
                        return Err(e);
                    }
                    retries += 1;
                    g = self.lock()?;
                }
            }
        }
    }

    /// Whether an operation that finds `dirty` blocks in the running transaction must commit it
    /// first (`committed`: it already did once). Past the soft threshold the committer, if any,
    /// is woken instead; past the hard one the operation always commits.
    fn commit_due(&self, dirty: usize, committed: bool) -> bool {
        let soft = !committed && dirty >= self.soft_commit;
        match &self.committer {
            _ if dirty >= self.hard_commit => true,
            None => soft,
            Some(c) => {
                if soft {
                    c.wake();
                }
                false
            }
        }
    }

    /// Commits first if an operation starting now would have to ([`FileSystem::commit_due`]):
    /// a write does this before it takes the data gate, under which it may not commit.
    pub(crate) fn commit_if_due(&self) -> Result<()> {
        let dirty = self.lock()?.meta.dirty_count();
        if self.commit_due(dirty, false) {
            self.commit()?;
        }
        Ok(())
    }

    /// Shares the data gate (see the field): a write holds it from allocating its blocks until
    /// their data has reached its target, and does not commit meanwhile.
    pub(crate) fn data_gate(&self) -> RwLockReadGuard<'_, ()> {
        self.data_gate.read()
    }

    /// Gives file blocks `indexes` of regular file `ino` device blocks where they have none, in
    /// order, under one hold of the lock. Never commits (the caller holds the data gate).
    /// Returns the blocks allocated and, if one failed, why (the blocks before it stay
    /// allocated).
    pub(crate) fn allocate_run(
        &self,
        ino: u64,
        indexes: std::ops::Range<u64>,
    ) -> (Vec<Allocation>, Option<(FsError, NoRoom)>) {
        let mut g = match self.lock() {
            Ok(g) => g,
            Err(e) => return (Vec::new(), Some((e, NoRoom::NOT_SEEN))),
        };
        // The whole run as one operation: each metadata block it changes (bitmap, indirect
        // block, inode) has its prior contents saved once, not once per block (three 4 KiB
        // copies for every 4 KiB written made a third of a large write's CPU). Should a block
        // fail, the run is undone and made again a block per operation, so that the blocks
        // before the failing one stay allocated.
        let mut got = Vec::with_capacity(indexes.clone().count());
        g.begin_op();
        if g.ensure_run(ino, indexes.clone(), &mut got).is_ok() {
            g.end_op();
            let run = got
                .into_iter()
                .map(|(block, fresh)| Allocation { block, fresh })
                .collect();
            return (run, None);
        }
        g.rollback_op();
        let mut run = Vec::with_capacity(got.capacity());
        for index in indexes {
            got.clear();
            g.begin_op();
            match g.ensure_run(ino, index..index + 1, &mut got) {
                Ok(()) => {
                    g.end_op();
                    run.push(Allocation {
                        block: got[0].0,
                        fresh: got[0].1,
                    });
                }
                Err(e) => {
                    g.rollback_op();
                    return (run, Some((e, g.no_room())));
                }
            }
        }
        (run, None)
    }

    /// A write under the data gate has handed the data of the blocks it allocated in `ino` to
    /// its target: the file goes (back) to the files the next commit's data hook is asked about.
    /// A round of the hook run before the data was there (without the gate) took the file off.
    pub(crate) fn handed_over(&self, ino: u64) {
        self.state.lock().alloc_inos.insert(ino);
    }

    /// After an operation found no space (`seen`, taken under the lock when it did), with the
    /// lock released since: says whether trying again can succeed. Yes when another thread's
    /// checkpoint has made freed blocks reusable in between; else, if freed blocks wait for a
    /// checkpoint (and the refusal was not root's reserve, which counts them free already),
    /// commits and checkpoints so that they can be reused, and says yes.
    pub(crate) fn make_room(&self, seen: NoRoom) -> Result<bool> {
        {
            let g = self.lock()?;
            if g.released_since(seen) {
                return Ok(true);
            }
            if !seen.reusable {
                return Ok(false);
            }
        }
        self.commit()?;
        self.checkpoint()?;
        Ok(true)
    }

    // ---- facts ----------------------------------------------------------------------------

    pub fn root(&self) -> u64 {
        ROOT_INO
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    /// The placement state every `file.block_buddy` policy sees.
    pub fn placement(&self) -> &Arc<Placement> {
        &self.placement
    }

    pub fn stats(&self) -> FsStats {
        let mut g = self.state.lock();
        let free_blocks = (0..self.geo.groups).map(|i| u64::from(self.placement.free(i))).sum();
        let free_inodes = (0..self.geo.groups)
            .map(|i| g.header(i).map_or(0, |h| u64::from(h.free_inodes)))
            .sum();
        FsStats {
            block_count: self.geo.block_count,
            groups: self.geo.groups,
            inodes: self.geo.inode_count(),
            free_blocks,
            free_inodes,
            reserved_blocks: g.quota.block_reserve,
            reserved_inodes: g.quota.inode_reserve,
            user_block_limit: g.quota.block_limit,
            user_inode_limit: g.quota.inode_limit,
            quota_users: g.quota.all().count() as u64,
            replayed_transactions: self.replayed,
            orphans_freed_at_mount: self.orphans_freed,
            meta: g.meta.counters,
            meta_cached_blocks: g.meta.cached_count() as u64,
            alloc: g.counters,
        }
    }

    // ---- quotas ---------------------------------------------------------------------------

    /// What `uid` holds (blocks, indirect, xattr and symlink blocks included, and inodes) and
    /// may hold (see [`crate::quota`]).
    pub fn quota_usage(&self, uid: u32) -> QuotaUsage {
        self.state.lock().quota.usage(uid)
    }

    /// Every uid holding blocks or inodes, with its usage, by uid.
    pub fn quota_report(&self) -> Vec<(u32, QuotaUsage)> {
        let g = self.state.lock();
        let mut all: Vec<(u32, QuotaUsage)> = g.quota.all().map(|(u, _)| (u, g.quota.usage(u))).collect();
        all.sort_by_key(|&(u, _)| u);
        all
    }

    /// Checks the usage kept against a count from the inode table (as a mount makes it);
    /// [`FsError::Corrupt`] saying which uid differs. For tests and audits: it reads the whole
    /// inode table.
    pub fn verify_quota(&self) -> Result<()> {
        let mut g = self.lock()?;
        let kept = g.quota.snapshot();
        let counted = count_usage(&self.geo, &mut |b, buf| {
            buf.copy_from_slice(g.meta.get(b)?);
            Ok(())
        })?;
        let mut uids: Vec<u32> = kept.keys().chain(counted.keys()).copied().collect();
        uids.sort_unstable();
        uids.dedup();
        for uid in uids {
            let (k, c) = (
                kept.get(&uid).copied().unwrap_or_default(),
                counted.get(&uid).copied().unwrap_or_default(),
            );
            if k != c {
                return Err(corrupt(format!("uid {uid}: usage kept {k:?}, counted {c:?}")));
            }
        }
        Ok(())
    }

    // ---- namespace ------------------------------------------------------------------------

    pub fn lookup(&self, dir: u64, name: impl AsRef<[u8]>) -> Result<u64> {
        self.with_state(|g| g.lookup(dir, name.as_ref()))
    }

    /// [`FileSystem::lookup`] and the [`FileSystem::stat`] of what it found, in one hold of the
    /// file system's lock: a path walk does both at every step, and each hold is a chance to
    /// wait behind another thread's operation.
    pub fn lookup_stat(&self, dir: u64, name: impl AsRef<[u8]>) -> Result<(u64, Stat)> {
        self.with_state(|g| {
            let ino = g.lookup(dir, name.as_ref())?;
            Ok((ino, g.stat(ino)?))
        })
    }

    /// The inode of an absolute path.
    pub fn resolve(&self, path: impl AsRef<[u8]>) -> Result<u64> {
        self.with_state(|g| g.resolve(path.as_ref()))
    }

    /// Creates a regular file.
    pub fn create(&self, dir: u64, name: impl AsRef<[u8]>, attrs: &NewFile) -> Result<u64> {
        self.in_transaction(|g| g.create(dir, name.as_ref(), FileType::Regular, attrs))
    }

    /// Creates a directory.
    pub fn mkdir(&self, dir: u64, name: impl AsRef<[u8]>, attrs: &NewFile) -> Result<u64> {
        self.in_transaction(|g| g.create(dir, name.as_ref(), FileType::Directory, attrs))
    }

    /// Makes a special file: a fifo, a socket, a character or block device (`rdev`, its device
    /// number; ignored for the others) or a regular file. Not a directory or a symlink.
    pub fn mknod(&self, dir: u64, name: impl AsRef<[u8]>, kind: FileType, rdev: u64, attrs: &NewFile) -> Result<u64> {
        if matches!(kind, FileType::Directory | FileType::Symlink) {
            return Err(FsError::InvalidArgument(format!("mknod cannot make a {kind:?}")));
        }
        self.in_transaction(|g| g.create_node(dir, name.as_ref(), kind, rdev, None, attrs))
    }

    /// Makes a symlink to `target` (1..=4095 bytes, no NUL). Its mode is always 0o777 and its
    /// size the target's length; `attrs.mode` is ignored.
    pub fn symlink(&self, dir: u64, name: impl AsRef<[u8]>, target: &[u8], attrs: &NewFile) -> Result<u64> {
        crate::posix::check_target(target)?;
        self.in_transaction(|g| g.create_node(dir, name.as_ref(), FileType::Symlink, 0, Some(target), attrs))
    }

    /// A symlink's target; InvalidArgument if `ino` is not a symlink.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        self.with_state(|g| g.readlink(ino))
    }

    /// An extended attribute's value; [`FsError::NoData`] (ENODATA) if there is none.
    pub fn get_xattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        self.with_state(|g| g.get_xattr(ino, name))
    }

    /// Sets an extended attribute (any name of 1..=255 bytes, else ERANGE; namespaces are the
    /// kernel's policy). All of an inode's attributes share one 4 KiB block: NoSpace (ENOSPC)
    /// when it is full. `how`: see [`XattrSet`].
    pub fn set_xattr(&self, ino: u64, name: &[u8], value: &[u8], how: XattrSet) -> Result<()> {
        self.in_transaction(|g| g.set_xattr(ino, name, value, how))
    }

    /// The names of an inode's extended attributes, sorted.
    pub fn list_xattr(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        self.with_state(|g| Ok(g.xattrs(ino)?.into_iter().map(|(n, _)| n).collect()))
    }

    /// Removes an extended attribute; ENODATA if there is none.
    pub fn remove_xattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        self.in_transaction(|g| g.remove_xattr(ino, name))
    }

    /// Like [`FileSystem::unlink`], but an inode losing its last name is not freed: it keeps
    /// nlink 0 and goes on the orphan list, to be freed by [`FileSystem::release_orphan`] (when
    /// the kernel closes it) or at the next mount.
    pub fn unlink_keep(&self, dir: u64, name: impl AsRef<[u8]>) -> Result<()> {
        self.in_transaction(|g| g.unlink_with(dir, name.as_ref(), true))
    }

    /// Creates a regular file with no name: made in `dir` as `name` and put on the orphan list
    /// in one transaction, so no one ever sees the name, not after a crash either (the next
    /// mount frees it). For a file only its maker keeps (the kernel's swap area).
    pub fn create_unnamed(&self, dir: u64, name: impl AsRef<[u8]>, attrs: &NewFile) -> Result<u64> {
        let name = name.as_ref();
        self.in_transaction(|g| {
            let ino = g.create(dir, name, FileType::Regular, attrs)?;
            g.unlink_with(dir, name, true)?;
            Ok(ino)
        })
    }

    /// Frees an inode on the orphan list (its blocks, its xattrs, the inode).
    pub fn release_orphan(&self, ino: u64) -> Result<()> {
        // A big file's blocks go a slice at a time, each slice a transaction of its own, so
        // others' operations get the lock in between.
        while !self.in_transaction(|g| g.release_orphan_part(ino))? {}
        Ok(())
    }

    /// The inodes on the orphan list.
    pub fn orphans(&self) -> Result<Vec<u64>> {
        self.with_state(|g| g.orphans())
    }

    /// Gives another name to a file of any type but a directory.
    pub fn link(&self, ino: u64, dir: u64, name: impl AsRef<[u8]>) -> Result<()> {
        self.in_transaction(|g| g.link(ino, dir, name.as_ref()))
    }

    /// Removes a name of anything but a directory; the file goes when its last name does. (A
    /// file still open elsewhere: see [`FileSystem::unlink_keep`].)
    pub fn unlink(&self, dir: u64, name: impl AsRef<[u8]>) -> Result<()> {
        self.in_transaction(|g| g.unlink(dir, name.as_ref()))
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, dir: u64, name: impl AsRef<[u8]>) -> Result<()> {
        self.in_transaction(|g| g.rmdir(dir, name.as_ref()))
    }

    /// Renames, replacing an existing destination of the same kind (an empty directory for a
    /// directory); refuses to move a directory into its own subtree.
    pub fn rename(&self, from_dir: u64, from: impl AsRef<[u8]>, to_dir: u64, to: impl AsRef<[u8]>) -> Result<()> {
        self.in_transaction(|g| g.rename(from_dir, from.as_ref(), to_dir, to.as_ref()))
    }

    /// [`FileSystem::rename`] with flags (see [`RenameFlags`]).
    pub fn rename_with(
        &self,
        from_dir: u64,
        from: impl AsRef<[u8]>,
        to_dir: u64,
        to: impl AsRef<[u8]>,
        flags: RenameFlags,
    ) -> Result<()> {
        self.in_transaction(|g| g.rename_with(from_dir, from.as_ref(), to_dir, to.as_ref(), flags))
    }

    /// A directory's entries, `.` and `..` left out, in on-disk order.
    pub fn readdir(&self, dir: u64) -> Result<Vec<DirEntry>> {
        self.with_state(|g| g.readdir(dir))
    }

    /// Up to `max` entries of `dir` from position `from` on, `.` and `..` included, each with
    /// its position, the entry's byte offset in the directory. An entry keeps its position
    /// while it exists, so a listing resumed at the last position given plus one returns every
    /// entry present throughout exactly once (ext2's telldir cookies).
    pub fn readdir_from(&self, dir: u64, from: u64, max: usize) -> Result<Vec<(u64, DirEntry)>> {
        self.with_state(|g| g.readdir_from(dir, from, max))
    }

    pub fn stat(&self, ino: u64) -> Result<Stat> {
        self.with_state(|g| g.stat(ino))
    }

    /// True if directory `dir` is `ancestor` or lies below it (following `..`).
    pub fn is_within(&self, dir: u64, ancestor: u64) -> Result<bool> {
        self.with_state(|g| g.within(dir, ancestor))
    }

    pub fn set_attr(&self, ino: u64, attrs: &SetAttr) -> Result<Stat> {
        self.in_transaction(|g| g.set_attr(ino, attrs))
    }

    // ---- by path --------------------------------------------------------------------------

    pub fn stat_path(&self, path: impl AsRef<[u8]>) -> Result<Stat> {
        self.with_state(|g| {
            let ino = g.resolve(path.as_ref())?;
            g.stat(ino)
        })
    }

    pub fn create_path(&self, path: impl AsRef<[u8]>, attrs: &NewFile) -> Result<u64> {
        self.in_transaction(|g| {
            let (dir, name) = g.resolve_parent(path.as_ref())?;
            g.create(dir, name, FileType::Regular, attrs)
        })
    }

    pub fn mkdir_path(&self, path: impl AsRef<[u8]>, attrs: &NewFile) -> Result<u64> {
        self.in_transaction(|g| {
            let (dir, name) = g.resolve_parent(path.as_ref())?;
            g.create(dir, name, FileType::Directory, attrs)
        })
    }

    pub fn unlink_path(&self, path: impl AsRef<[u8]>) -> Result<()> {
        self.in_transaction(|g| {
            let (dir, name) = g.resolve_parent(path.as_ref())?;
            g.unlink(dir, name)
        })
    }

    pub fn rmdir_path(&self, path: impl AsRef<[u8]>) -> Result<()> {
        self.in_transaction(|g| {
            let (dir, name) = g.resolve_parent(path.as_ref())?;
            g.rmdir(dir, name)
        })
    }

    pub fn rename_path(&self, from: impl AsRef<[u8]>, to: impl AsRef<[u8]>) -> Result<()> {
        self.in_transaction(|g| {
            let (fd, fname) = g.resolve_parent(from.as_ref())?;
            let (td, tname) = g.resolve_parent(to.as_ref())?;
            g.rename(fd, fname, td, tname)
        })
    }

    pub fn readdir_path(&self, path: impl AsRef<[u8]>) -> Result<Vec<DirEntry>> {
        self.with_state(|g| {
            let ino = g.resolve(path.as_ref())?;
            g.readdir(ino)
        })
    }

    // ---- block mapping and allocation (what a page cache above needs) ---------------------

    /// The device block holding file block `index`, or `None` for a hole.
    pub fn locate(&self, ino: u64, index: u64) -> Result<Option<u64>> {
        self.with_state(|g| {
            let i = g.live(ino)?;
            refuse_stream(ino, &i)?;
            g.bmap(ino, &i, index)
        })
    }

    /// The device block of each file block up to the end of the file (0 for a hole).
    pub fn block_map(&self, ino: u64) -> Result<Vec<u64>> {
        self.with_state(|g| {
            let i = g.live(ino)?;
            refuse_stream(ino, &i)?;
            let n = i.size.div_ceil(BS as u64);
            (0..n).map(|fb| Ok(g.bmap(ino, &i, fb)?.unwrap_or(0))).collect()
        })
    }

    /// Gives file block `index` a device block if it has none (placed by the file's
    /// `file.block_buddy` policy; indirect blocks as needed), in the running transaction.
    pub fn allocate(&self, ino: u64, index: u64) -> Result<u64> {
        self.allocate_block(ino, index).map(|a| a.block)
    }

    /// Like [`FileSystem::allocate`], and says whether the block is new.
    pub fn allocate_block(&self, ino: u64, index: u64) -> Result<Allocation> {
        self.in_transaction(|g| {
            let i = g.live(ino)?;
            crate::state::regular(ino, &i)?;
            refuse_stream(ino, &i)?;
            g.ensure_block(ino, index)
                .map(|(block, fresh)| Allocation { block, fresh })
        })
    }

    /// Sets a regular file's size. Shrinking frees the blocks past the new end (in the running
    /// transaction); growing zeroes what the old last block holds past the old end (on the
    /// device) and leaves a hole after it. The kernel, whose data is in its page cache, uses
    /// [`FileSystem::set_size_with`] instead.
    pub fn set_size(&self, ino: u64, size: u64) -> Result<()> {
        self.set_size_with(ino, size, &mut DeviceTarget(&*self.dev))
    }

    /// Same as [`FileSystem::set_size`].
    pub fn truncate(&self, ino: u64, size: u64) -> Result<()> {
        self.set_size(ino, size)
    }

    /// Grows a file's size to at least `end`, for a caller that wrote the data itself
    /// ([`FileSystem::write_with`] grows the size as part of the write).
    pub fn extend_size(&self, ino: u64, end: u64) -> Result<()> {
        if end > MAX_FILE_SIZE {
            return Err(FsError::FileTooLarge);
        }
        self.in_transaction(|g| g.extend(ino, end))
    }

    // ---- the uncached data path -----------------------------------------------------------

    /// Reads up to `buf.len()` bytes at `offset`, straight from the device; returns how many
    /// (0 at or past the end of file). Holes read as zeros.
    ///
    /// This is the uncached path, used by tests, mkfs/fsck and tools; the kernel reads through
    /// its page cache instead, which finds a file's blocks with [`FileSystem::locate`].
    pub fn read_at(&self, ino: u64, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let (size, map) = self.with_state(|g| {
            let i = g.live(ino)?;
            crate::state::regular(ino, &i)?;
            refuse_stream(ino, &i)?;
            if offset >= i.size || buf.is_empty() {
                return Ok((i.size, Vec::new()));
            }
            let end = (offset + buf.len() as u64).min(i.size);
            let first = offset / BS as u64;
            let last = (end - 1) / BS as u64;
            let map = (first..=last)
                .map(|fb| g.bmap(ino, &i, fb))
                .collect::<Result<Vec<_>>>()?;
            Ok((i.size, map))
        })?;
        if map.is_empty() {
            return Ok(0);
        }
        let n = ((size - offset) as usize).min(buf.len());
        let mut done = 0usize;
        let mut block = [0u8; BS];
        let first = offset / BS as u64;
        while done < n {
            let pos = offset + done as u64;
            let within = (pos % BS as u64) as usize;
            let take = (BS - within).min(n - done);
            match map[(pos / BS as u64 - first) as usize] {
                Some(b) => {
                    self.dev.read_blocks(b, &mut block)?;
                    buf[done..done + take].copy_from_slice(&block[within..within + take]);
                }
                None => buf[done..done + take].fill(0),
            }
            done += take;
        }
        Ok(n)
    }

    /// Writes `data` at `offset`, straight to the device, allocating blocks as needed; returns
    /// how many bytes were written. If the device fills up part way, the bytes that fit are
    /// written and counted (a short write); if none fit, [`FsError::NoSpace`]. The rules (zeros
    /// where nobody wrote, short writes, sizes) are [`crate::write`]'s.
    ///
    /// This is the uncached path, used by tests, mkfs/fsck and tools; the kernel writes through
    /// its page cache instead, by the same rules ([`FileSystem::write_with`] with the cache as
    /// the target). Either way the data is durable after the next commit
    /// ([`FileSystem::fsync`]).
    pub fn write_at(&self, ino: u64, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_with(ino, offset, data, &mut DeviceTarget(&*self.dev))
    }

    // ---- durability -----------------------------------------------------------------------

    /// Sets the hook the commit calls first (see [`DataHook`]).
    pub fn set_data_hook(&self, hook: Option<DataHook>) {
        *self.hook.lock() = hook;
    }

    /// Commits the running transaction: the data hook writes the data of files that got blocks
    /// or a new size, the device is flushed, the transaction is written to the journal and
    /// flushed. After it returns, every change made before the call survives a crash.
    ///
    /// This is the only way a transaction commits. The hook runs without the lock (other
    /// operations go on meanwhile); files that got blocks or a new size during a round are handed
    /// to it in another round, up to [`HOOK_ROUNDS`], and a last one runs under the lock and the
    /// data gate (no write is then between allocating a block and handing over its data), so no
    /// allocation is ever committed before its data, however busy the writers. The hook must not
    /// need the file system's lock: the kernel's writes dirty pages whose device blocks the cache
    /// already holds. The transaction is then sealed under the lock and written without it:
    /// another user's operations do not wait for the device's flushes.
    pub fn commit(&self) -> Result<()> {
        let _io = self.commit_io.lock();
        // A journal short of room for this transaction is checkpointed first, without the lock,
        // so that the seal seldom has to (under the lock) when the transaction grew meanwhile.
        self.checkpoint_if(|g| g.meta.journal_free() < 2 * journal::transaction_len(g.meta.dirty_count()))?;
        {
            let mut g = self.lock()?;
            for _ in 0..HOOK_ROUNDS {
                if g.meta.dirty_count() == 0 {
                    return Ok(());
                }
                if g.alloc_inos.is_empty() {
                    break;
                }
                let Some(hook) = self.hook.lock().clone() else {
                    break;
                };
                let inos: Vec<u64> = std::mem::take(&mut g.alloc_inos).into_iter().collect();
                drop(g);
                let done = hook(&inos);
                g = self.state.lock();
                if let Err(e) = done {
                    // Not committed: the next commit asks about these files again.
                    g.alloc_inos.extend(inos);
                    return Err(FsError::Io(e));
                }
                g.usable()?;
            }
        }
        // The last round and the seal hold the data gate and the lock: no write is between
        // allocating a block and putting its data where the hook finds it, and none can start.
        let gate = self.data_gate.write();
        let mut g = self.lock()?;
        if g.meta.dirty_count() == 0 {
            return Ok(());
        }
        if !g.alloc_inos.is_empty() {
            match self.hook.lock().clone() {
                // No cache above: the data is on the device already.
                None => g.alloc_inos.clear(),
                Some(hook) => {
                    let inos: Vec<u64> = std::mem::take(&mut g.alloc_inos).into_iter().collect();
                    if let Err(e) = hook(&inos) {
                        g.alloc_inos.extend(inos);
                        return Err(FsError::Io(e));
                    }
                }
            }
        }
        let Some(sealed) = g.seal_transaction()? else {
            return Ok(());
        };
        drop((g, gate));
        let written = sealed.write();
        self.state.lock().sealed_written(written)
    }

    /// Writes every journaled block home and empties the journal, with no commit under way.
    fn checkpoint(&self) -> Result<()> {
        let _io = self.commit_io.lock();
        self.checkpoint_if(|_| true)
    }

    /// With the commit mutex held: checkpoints if `due` says so, the blocks written home without
    /// the state's lock (other operations go on; readers find the committed images in memory
    /// until it is done).
    fn checkpoint_if(&self, due: impl FnOnce(&FsState) -> bool) -> Result<()> {
        let plan = {
            let g = self.lock()?;
            if !due(&g) {
                return Ok(());
            }
            g.meta.plan_checkpoint()
        };
        let Some(plan) = plan else {
            return Ok(());
        };
        let written = plan.write();
        self.state.lock().checkpoint_written(plan, written)
    }

    /// One round of the background committer: commits if anything is uncommitted (with
    /// `past_threshold`, only if the transaction has passed the commit threshold). False once
    /// the file system cannot commit any more (unmounted, or failed): the committer then ends. A
    /// commit that fails without failing the file system (the data hook's error) is tried again
    /// at the next round.
    pub(crate) fn commit_in_background(&self, past_threshold: bool) -> bool {
        let least = if past_threshold { self.soft_commit } else { 1 };
        match self.lock() {
            Err(_) => return false,
            Ok(g) if g.meta.dirty_count() < least => return true,
            Ok(_) => {}
        }
        self.commit().is_ok() || self.lock().is_ok()
    }

    /// Makes a file durable. The caller has written the file's dirty data to the device first
    /// (the uncached path does as it goes). This commits the whole running transaction, so every
    /// earlier namespace change is durable too.
    pub fn fsync(&self, ino: u64) -> Result<()> {
        self.stat(ino)?;
        // A stream file's chunks are all stored now: its size on disk is the size written.
        self.in_transaction(|g| g.settle_stream_sizes(Some(ino)))?;
        self.commit()
    }

    /// Commits, then writes every journaled block home and empties the journal. The caller
    /// has written every cached page first (stream files' sizes on disk become their sizes).
    pub fn sync(&self) -> Result<()> {
        self.in_transaction(|g| g.settle_stream_sizes(None))?;
        self.commit()?;
        self.checkpoint()
    }

    /// Syncs and marks the file system cleanly unmounted. Every later operation fails.
    pub fn unmount(&self) -> Result<()> {
        if let Some(c) = &self.committer {
            c.stop();
        }
        self.sync()?;
        let mut g = self.lock()?;
        let mut sb = self.sb.lock();
        sb.state = STATE_CLEAN;
        if let Err(e) = write_superblock(&*self.dev, &sb) {
            g.mode = Mode::Failed(e.to_string());
            return Err(FsError::Io(e));
        }
        g.mode = Mode::Unmounted;
        for (_, slot) in g.slots.drain() {
            slot.unload();
        }
        Ok(())
    }

    // ---- placement graftpoint -------------------------------------------------------------

    /// The file's `file.block_buddy` graftpoint (named `file.block_buddy/<ino>`), created on
    /// first use. Only the file's creator may graft it ([`Access::Process`]); a process reaches
    /// it as `file.block_buddy/<fd>` through a descriptor of the file. It goes away with the file.
    pub fn block_buddy(&self, ino: u64) -> Result<Arc<GraftSlot<BlockBuddy>>> {
        let mut g = self.lock()?;
        let i = g.live(ino)?;
        if i.is_dir() {
            return Err(FsError::IsADirectory(format!("inode {ino}")));
        }
        if let Some(s) = g.slots.get(&ino) {
            return Ok(s.clone());
        }
        let slot = Arc::new(GraftSlot::new(
            &self.runtime,
            self.placement.clone(),
            Access::Process(i.creator),
            Some(&ino.to_string()),
        ));
        g.slots.insert(ino, slot.clone());
        Ok(slot)
    }
}
