//! Metadata blocks in memory, the running transaction, and the journal writer.
//!
//! Every metadata block (group headers, bitmaps, inode table blocks, directory blocks, indirect
//! blocks) is read and changed through [`Meta`]. A change goes into the *running transaction*:
//! the block is marked dirty and stays in memory, its home location untouched. Each file system
//! operation is an *op* within the running transaction: the first time an op changes a block,
//! the block's previous contents are kept, so an op that fails half way is rolled back exactly
//! (the same abort-log idea as the VINO lightweight transactions).
//!
//! [`Meta::seal`] takes the images of the dirty blocks as one transaction, which the caller
//! writes to the journal and flushes ([`Sealed::write`]) without the file system's lock; from
//! the seal on they are *committed*: their images are kept for the checkpoint, which
//! writes them home, flushes, and moves the journal's tail past them. The checkpoint is lazy: it
//! runs when the journal is out of room, when an allocation needs the blocks a committed
//! transaction freed, at `sync` and at unmount. Until it runs, a committed image is the block's
//! contents as far as readers are concerned.

use crate::journal::{self, JournalHeader};
use crate::layout::{BS, Block, Geometry};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::Arc;
use vino_blockdev::BlockDevice;

/// Inode table blocks read together when one is missed: a program walking a tree (find, du,
/// ls -l) looks at the files of a directory one after another, and their inodes sit together
/// (ext4 reads 32 ahead, its `inode_readahead_blks`).
const ITABLE_READAHEAD: u64 = 16;

/// The journal as the writer sees it.
#[derive(Debug, Clone)]
pub struct JournalState {
    pub fs_id: u64,
    /// Generation of the header last written.
    pub generation: u64,
    /// Log position of the oldest transaction not yet checkpointed.
    pub tail: u64,
    /// Log position where the next transaction goes.
    pub head: u64,
    /// Log blocks in use between tail and head.
    pub used: u64,
    /// Sequence number of the next transaction.
    pub next_seq: u64,
    /// Sequence number of the transaction at the tail.
    pub tail_seq: u64,
}

/// Counters of the metadata layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MetaCounters {
    /// Operations ended (each all or nothing within its transaction).
    pub ops: u64,
    pub commits: u64,
    pub committed_blocks: u64,
    pub journal_blocks_written: u64,
    pub checkpoints: u64,
    pub checkpointed_blocks: u64,
    pub metadata_reads: u64,
    pub rollbacks: u64,
}

/// Most spare block copies kept for undo records. An op changes a handful of blocks; each undo
/// copy was a fresh allocation of 4 KiB, a third of a create's or a write's time in the daemon
/// (the allocator's slow path: the cache's frames are the same size and keep taking fresh
/// memory).
const SPARE_COPIES: usize = 64;

struct Undo {
    block: u64,
    prior: Option<Box<Block>>,
    was_dirty: bool,
}

pub struct Meta {
    pub dev: Arc<dyn BlockDevice>,
    pub geo: Geometry,
    /// Keyed by block number, which the file system chooses (no caller picks the keys, so the
    /// fast hash is safe here).
    cache: FxHashMap<u64, Box<Block>>,
    dirty: BTreeSet<u64>,
    in_op: bool,
    undo: Vec<Undo>,
    /// Copies of blocks the last ops no longer need for undo, kept for the next ones' undo
    /// copies (at most [`SPARE_COPIES`]).
    spare: Vec<Box<Block>>,
    touched: BTreeSet<u64>,
    committed: BTreeMap<u64, Arc<Block>>,
    pub journal: JournalState,
    cache_limit: usize,
    pub counters: MetaCounters,
}

impl Meta {
    pub fn new(dev: Arc<dyn BlockDevice>, geo: Geometry, journal: JournalState, cache_limit: usize) -> Meta {
        Meta {
            dev,
            geo,
            cache: FxHashMap::default(),
            dirty: BTreeSet::new(),
            in_op: false,
            undo: Vec::new(),
            spare: Vec::new(),
            touched: BTreeSet::new(),
            committed: BTreeMap::new(),
            journal,
            cache_limit: cache_limit.max(64),
            counters: MetaCounters::default(),
        }
    }

    fn check_block(&self, b: u64) -> io::Result<()> {
        if self.geo.is_journalable(b) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("metadata block {b} is outside the file system"),
            ))
        }
    }

    fn load(&mut self, b: u64) -> io::Result<()> {
        if self.cache.contains_key(&b) {
            return Ok(());
        }
        self.check_block(b)?;
        if let Some(img) = self.committed.get(&b) {
            let data = Box::new(**img);
            self.cache.insert(b, data);
            return Ok(());
        }
        let run = self.itable_run(b);
        // Reads happen outside ops too (a walk of the tree only reads), so the bound is kept
        // here as well as at the end of each op.
        self.trim_cache(run as usize);
        let mut buf = vec![0u8; run as usize * BS];
        self.dev.read_blocks(b, &mut buf)?;
        self.counters.metadata_reads += 1;
        for (i, block) in buf.chunks_exact(BS).enumerate() {
            let data: Box<Block> = Box::new(block.try_into().expect("a block"));
            self.cache.insert(b + i as u64, data);
        }
        Ok(())
    }

    /// How many blocks to read from `b` on: for an inode table block, up to
    /// [`ITABLE_READAHEAD`] of its group's table, stopping before the first one already in
    /// memory or committed (the device's copy of that one may be stale); 1 for any other block.
    fn itable_run(&self, b: u64) -> u64 {
        let g = self.geo.group_of(b);
        let (start, end) = (self.geo.itable(g), self.geo.data_start(g));
        if b < start || b >= end {
            return 1;
        }
        let mut n = 1;
        while n < ITABLE_READAHEAD
            && b + n < end
            && !self.cache.contains_key(&(b + n))
            && !self.committed.contains_key(&(b + n))
        {
            n += 1;
        }
        n
    }

    /// Metadata blocks in memory.
    pub fn cached_count(&self) -> usize {
        self.cache.len()
    }

    /// True if the block is in memory (no read needed).
    pub fn cached(&self, b: u64) -> bool {
        self.cache.contains_key(&b)
    }

    /// Drops a block from memory unless it is dirty (it was found damaged: read it again next
    /// time).
    pub fn drop_clean(&mut self, b: u64) {
        if !self.dirty.contains(&b) {
            self.cache.remove(&b);
        }
    }

    /// A metadata block's current contents.
    pub fn get(&mut self, b: u64) -> io::Result<&Block> {
        self.load(b)?;
        Ok(self.cache.get(&b).expect("just loaded"))
    }

    fn remember(&mut self, b: u64) {
        assert!(self.in_op, "metadata changed outside an op");
        if self.touched.insert(b) {
            let prior = self.cache.get(&b).map(|block| {
                let mut copy = self.spare.pop().unwrap_or_else(|| Box::new([0; BS]));
                copy.copy_from_slice(&block[..]);
                copy
            });
            self.undo.push(Undo {
                block: b,
                prior,
                was_dirty: self.dirty.contains(&b),
            });
        }
    }

    /// A metadata block to change, inside an op: marked dirty in the running transaction.
    pub fn get_mut(&mut self, b: u64) -> io::Result<&mut Block> {
        self.load(b)?;
        self.remember(b);
        self.dirty.insert(b);
        Ok(self.cache.get_mut(&b).expect("just loaded"))
    }

    /// A newly allocated metadata block, zeroed, without reading it.
    pub fn create(&mut self, b: u64) -> io::Result<&mut Block> {
        self.check_block(b)?;
        self.remember(b);
        self.dirty.insert(b);
        let e = self.cache.entry(b).or_insert_with(|| Box::new([0u8; BS]));
        e.fill(0);
        Ok(e)
    }

    /// A metadata block that was freed: dropped from memory and from the running transaction.
    pub fn forget(&mut self, b: u64) {
        if !self.cache.contains_key(&b) && !self.dirty.contains(&b) {
            return;
        }
        self.remember(b);
        self.cache.remove(&b);
        self.dirty.remove(&b);
    }

    /// Checks the invariants of the running transaction and the journal writer, and panics
    /// naming the one broken:
    /// * between ops there is no undo record;
    /// * every dirty block is in memory (a commit writes it from there) and is a metadata block;
    /// * the journal's used span is within the log and ends at its head
    ///   (`head == (tail + used) mod log length`);
    /// * committed images are kept exactly while the journal holds transactions not yet
    ///   checkpointed, and the tail's sequence number trails the next one by at least one then.
    pub fn check_invariants(&self) {
        if !self.in_op {
            assert!(
                self.undo.is_empty() && self.touched.is_empty(),
                "undo records outside an op"
            );
        }
        for &b in &self.dirty {
            assert!(self.cache.contains_key(&b), "dirty metadata block {b} is not in memory");
            assert!(self.geo.is_journalable(b), "dirty block {b} is not a metadata block");
        }
        let j = &self.journal;
        let log = self.geo.log_len();
        assert!(j.used <= log, "journal uses {} of {log} blocks", j.used);
        assert!(
            j.tail < log && j.head < log,
            "journal tail {} or head {} outside the log",
            j.tail,
            j.head
        );
        assert_eq!((j.tail + j.used) % log, j.head, "journal head is not tail + used");
        assert_eq!(
            self.committed.is_empty(),
            j.used == 0,
            "committed images ({}) and journal use ({}) disagree",
            self.committed.len(),
            j.used
        );
        assert!(
            (j.used == 0) == (j.tail_seq == j.next_seq) && j.tail_seq <= j.next_seq,
            "journal sequence numbers: tail {} next {} with {} blocks used",
            j.tail_seq,
            j.next_seq,
            j.used
        );
    }

    /// [`Meta::check_invariants`] in builds that ask for it: debug builds, or the `invariants`
    /// feature the test gate turns on in release builds.
    #[inline]
    fn checked(&self) {
        if crate::CHECKS_INVARIANTS {
            self.check_invariants();
        }
    }

    pub fn begin_op(&mut self) {
        assert!(!self.in_op, "ops do not nest");
        self.in_op = true;
    }

    /// Ends an op, keeping its changes in the running transaction.
    pub fn end_op(&mut self) {
        self.in_op = false;
        self.counters.ops += 1;
        for u in self.undo.drain(..) {
            self.spare.extend(u.prior);
        }
        self.spare.truncate(SPARE_COPIES);
        self.touched.clear();
        self.trim_cache(0);
        self.checked();
    }

    /// Ends an op, undoing its changes. Returns the blocks it had changed.
    pub fn rollback_op(&mut self) -> Vec<u64> {
        let mut blocks = Vec::with_capacity(self.undo.len());
        for u in self.undo.drain(..).rev() {
            let changed = match u.prior {
                Some(p) => self.cache.insert(u.block, p),
                None => self.cache.remove(&u.block),
            };
            self.spare.extend(changed);
            if !u.was_dirty {
                self.dirty.remove(&u.block);
            }
            blocks.push(u.block);
        }
        self.spare.truncate(SPARE_COPIES);
        self.touched.clear();
        self.in_op = false;
        self.counters.rollbacks += 1;
        self.checked();
        blocks
    }

    pub fn dirty_count(&self) -> usize {
        self.dirty.len()
    }

    pub fn dirty_blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.dirty.iter().copied()
    }

    pub fn committed_count(&self) -> usize {
        self.committed.len()
    }

    /// Drops clean blocks when the cache would be over its limit with `room` more blocks (never
    /// a dirty one: those exist only here until they are committed).
    fn trim_cache(&mut self, room: usize) {
        if self.cache.len() + room <= self.cache_limit {
            return;
        }
        let target = (self.cache_limit * 3 / 4).saturating_sub(room);
        let victims: Vec<u64> = self
            .cache
            .keys()
            .copied()
            .filter(|b| !self.dirty.contains(b))
            .take(self.cache.len().saturating_sub(target))
            .collect();
        for b in victims {
            self.cache.remove(&b);
        }
    }

    /// Log blocks free for new transactions.
    pub fn journal_free(&self) -> u64 {
        self.geo.log_len() - self.journal.used
    }

    /// Seals the running transaction into a journal transaction and returns it for the caller
    /// to write ([`Sealed::write`]) without the file system's lock, so that other operations go
    /// on meanwhile (in a new running transaction). From here on the transaction's images are
    /// committed as far as readers are concerned, and its place in the log is taken. The caller
    /// must keep every other commit and checkpoint out until the write is done (a checkpoint
    /// would write the images home, or move the tail past them, before the journal holds them):
    /// [`crate::FileSystem`] holds its commit mutex across both.
    pub fn seal(&mut self) -> io::Result<Option<Sealed>> {
        assert!(!self.in_op, "commit inside an op");
        if self.dirty.is_empty() {
            return Ok(None);
        }
        let n = self.dirty.len();
        let need = journal::transaction_len(n);
        if need > self.geo.log_len() {
            return Err(io::Error::other(format!(
                "a transaction of {n} blocks does not fit the journal ({} blocks)",
                self.geo.log_len()
            )));
        }
        if need > self.journal_free() {
            self.checkpoint()?;
        }
        let images: Vec<(u64, Arc<Block>)> = self
            .dirty
            .iter()
            .map(|&b| (b, Arc::new(**self.cache.get(&b).expect("dirty blocks stay cached"))))
            .collect();
        let refs: Vec<(u64, &Block)> = images.iter().map(|(b, img)| (*b, &**img)).collect();
        let bytes = journal::encode_transaction(self.journal.fs_id, self.journal.next_seq, &refs);
        let log_len = self.geo.log_len();
        let head = self.journal.head;
        let blocks = (bytes.len() / BS) as u64;
        let first_run = blocks.min(log_len - head);
        self.journal.head = (head + blocks) % log_len;
        self.journal.used += blocks;
        self.journal.next_seq += 1;
        self.counters.commits += 1;
        self.counters.committed_blocks += n as u64;
        self.counters.journal_blocks_written += blocks;
        for (b, img) in images {
            self.committed.insert(b, img);
        }
        self.dirty.clear();
        self.checked();
        Ok(Some(Sealed {
            dev: self.dev.clone(),
            at: self.geo.log_start() + head,
            wrap_to: self.geo.log_start(),
            first_run: first_run as usize * BS,
            bytes,
        }))
    }

    /// Writes every committed image home, flushes, and empties the journal (a new header,
    /// flushed), all under the caller's hold of the lock: for a transaction that does not fit
    /// the journal's room at its seal. [`Meta::plan_checkpoint`] is the same without the lock.
    pub fn checkpoint(&mut self) -> io::Result<()> {
        assert!(!self.in_op, "checkpoint inside an op");
        match self.plan_checkpoint() {
            Some(plan) => {
                plan.write()?;
                self.checkpointed(plan);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// What a checkpoint writes now (None if the journal is empty), for the caller to write
    /// ([`Checkpoint::write`]) without the file system's lock and then to record
    /// ([`Meta::checkpointed`]). Readers go on finding the committed images in memory
    /// meanwhile. The caller keeps every commit out until then: a transaction sealed in between
    /// would be in the journal but behind the new tail.
    pub fn plan_checkpoint(&self) -> Option<Checkpoint> {
        if self.committed.is_empty() && self.journal.used == 0 {
            return None;
        }
        Some(Checkpoint {
            dev: self.dev.clone(),
            images: self.committed.iter().map(|(&b, img)| (b, img.clone())).collect(),
            header: JournalHeader {
                fs_id: self.journal.fs_id,
                generation: self.journal.generation + 1,
                tail: self.journal.head,
                seq: self.journal.next_seq,
            },
        })
    }

    /// Records a checkpoint written without error: the journal is empty from its tail on.
    pub fn checkpointed(&mut self, plan: Checkpoint) {
        assert_eq!(
            (plan.header.tail, plan.header.seq),
            (self.journal.head, self.journal.next_seq),
            "a transaction was committed during a checkpoint"
        );
        self.journal.generation = plan.header.generation;
        self.journal.tail = plan.header.tail;
        self.journal.tail_seq = plan.header.seq;
        self.journal.used = 0;
        self.committed.clear();
        self.counters.checkpoints += 1;
        self.counters.checkpointed_blocks += plan.images.len() as u64;
        self.checked();
    }
}

/// The blocks a checkpoint writes home and the journal header it writes after them
/// ([`Meta::plan_checkpoint`]).
pub struct Checkpoint {
    dev: Arc<dyn BlockDevice>,
    /// In block order.
    images: Vec<(u64, Arc<Block>)>,
    header: JournalHeader,
}

impl Checkpoint {
    /// Writes the images home, adjacent ones together (up to 1 MiB a request), flushes, then
    /// writes the header that moves the journal's tail past them and flushes again.
    pub fn write(&self) -> io::Result<()> {
        let mut run_start = 0u64;
        let mut run: Vec<u8> = Vec::new();
        for (b, img) in &self.images {
            if !run.is_empty() && *b != run_start + (run.len() / BS) as u64 {
                self.dev.write_blocks(run_start, &run)?;
                run.clear();
            }
            if run.is_empty() {
                run_start = *b;
            }
            run.extend_from_slice(&img[..]);
            if run.len() >= 256 * BS {
                self.dev.write_blocks(run_start, &run)?;
                run.clear();
            }
        }
        if !run.is_empty() {
            self.dev.write_blocks(run_start, &run)?;
        }
        self.dev.flush()?;
        self.dev.write_blocks(self.header.slot(), &self.header.encode()[..])?;
        self.dev.flush()
    }
}

/// A transaction sealed by [`Meta::seal`], to be written to the journal.
pub struct Sealed {
    dev: Arc<dyn BlockDevice>,
    /// Where its first block goes, and where the rest goes if it runs past the log's end.
    at: u64,
    wrap_to: u64,
    /// How many of its bytes fit before the log's end.
    first_run: usize,
    bytes: Vec<u8>,
}

impl Sealed {
    /// Makes the transaction durable: flushes the device first (the data its allocations and
    /// sizes expose, written by the caller, goes before the metadata: ordered mode), writes the
    /// journal blocks and flushes again.
    pub fn write(self) -> io::Result<()> {
        self.dev.flush()?;
        self.dev.write_blocks(self.at, &self.bytes[..self.first_run])?;
        if self.first_run < self.bytes.len() {
            self.dev.write_blocks(self.wrap_to, &self.bytes[self.first_run..])?;
        }
        self.dev.flush()
    }
}
