//! The VINO page cache: a fixed number of 4 KB frames shared by every process, caching the
//! blocks of files (Small 1998, 7.3; Seltzer et al. 1995).
//!
//! Three of its policies are graftpoints:
//!
//! * `vas.pick_victim` (per process): when the page the kernel would evict (the LRU page)
//!   belongs to a process with this graft, the graft may name another page *of that process*
//!   instead. The kernel keeps Cao's rule: a process whose choice later costs a miss the LRU
//!   choice would not have cost pays with its own page (the one the kernel wanted), never with
//!   another process's frames.
//! * `file.compute_ra` (per open file): after each read, which extents to prefetch. Default:
//!   sequential detection with clustered read-ahead; an explicit "no read-ahead" setting.
//! * `cache.writeback` (privileged): which dirty pages to write now. Default: pages dirty for
//!   longer than 30 s; `sync_object` (fsync) writes all of a file's.
//!
//! The cache knows neither the file system nor the I/O scheduler: it asks a [`Backing`] where an
//! object's blocks live and how big it is, and sends its reads and writes to a [`PageIo`]. The
//! kernel wires both (a file of the file system as a `Backing`, the scheduler as the `PageIo`).
//! The cache does no placement: the file system decides where a file's blocks live and
//! allocates them before data is written.

#![forbid(unsafe_code)]

mod cache;
mod lru;
mod points;
pub mod shadow;
mod stats;

pub use cache::{CacheConfig, MIN_DIRTY_SHARE, PageCache, STREAM_WRITERS, WorkCharger};
pub use points::{
    Advice, Candidates, ComputeRa, HINTS_MAX, MoreCandidates, PageHint, PickVictim, RaFile, RaMode, Read, ReadAhead,
    VictimEnv, Writeback, WritebackArgs, page_id,
};
pub use shadow::{
    OwnerCall, RaOutcome, RaTry, RaTryReport, ShadowCounts, TRY_QUEUE, VictimTry, VictimTryReport, ra_replayed,
    victim_replayed,
};
pub use stats::{CacheCounters, CacheStats};

use std::io;
use vino_blockdev::{IoRequest, Ticket};

/// A process, as the cache knows it: the owner of the pages it brings in.
pub type Pid = u64;

/// How the cache finds the blocks of one cached object (a file); the kernel implements it over
/// the file system.
pub trait Backing: Send + Sync {
    /// The device block that holds block `index` of the object, or `None` for a hole (reads as
    /// zeros).
    fn locate(&self, index: u64) -> io::Result<Option<u64>>;
    /// The object's size in bytes (reads and read-ahead never go past it). An error (the file
    /// system could not read the file's inode) fails the read that asked: it is not an empty
    /// file.
    fn size(&self) -> io::Result<u64>;
}

/// Where a stream object's data lives (a file kept in encoded chunks, `vino-kernel`'s stream
/// files): the cache reads and writes it a whole chunk at a time, through this, instead of
/// block by block through the [`PageIo`] ([`PageCache::attach_stream`]).
pub trait ChunkStore: Send + Sync {
    /// Pages in one chunk.
    fn chunk_pages(&self) -> u64;
    /// Whose codec the chunks go through: the background write-back of stream objects runs
    /// in a queue per owner, so that one owner's slow codec delays only its own files.
    fn owner(&self) -> u32 {
        0
    }
    /// The plain bytes of chunk `chunk` (`buf` is the whole chunk; zeros past the object's end
    /// and in holes). An error fails the read that needed the chunk; nothing of it is cached.
    fn read_chunk(&self, chunk: u64, buf: &mut [u8]) -> io::Result<()>;
    /// The plain bytes of several chunks, each into its whole-chunk part of `buf` (in order): a
    /// store may fetch them in fewer device requests. A result per chunk.
    fn read_chunks(&self, chunks: &[u64], buf: &mut [u8]) -> Vec<io::Result<()>> {
        let per = buf.len() / chunks.len().max(1);
        chunks
            .iter()
            .zip(buf.chunks_mut(per.max(1)))
            .map(|(&chunk, part)| self.read_chunk(chunk, part))
            .collect()
    }
    /// Stores chunk `chunk`, whose plain bytes are `data` (the whole chunk; the store cuts it at
    /// the object's end). An error leaves its pages dirty.
    fn write_chunk(&self, chunk: u64, data: &[u8]) -> io::Result<()>;
    /// Stores several chunks (each its index and whole plain bytes, as for
    /// [`ChunkStore::write_chunk`]): a store may batch them into fewer device requests. A
    /// result per chunk, in order.
    fn write_chunks(&self, chunks: &[(u64, &[u8])]) -> Vec<io::Result<()>> {
        chunks
            .iter()
            .map(|&(chunk, data)| self.write_chunk(chunk, data))
            .collect()
    }
}

/// Where the cache sends its reads and writes: in the kernel the I/O scheduler, or a device
/// queue directly (the kernel's adapters implement it for both).
pub trait PageIo: Send + Sync {
    fn submit(&self, request: IoRequest) -> Ticket;

    /// Several requests queued together (a scheduler may then order and merge them).
    fn submit_batch(&self, requests: Vec<IoRequest>) -> Vec<Ticket> {
        requests.into_iter().map(|r| self.submit(r)).collect()
    }
}

/// Who asks, and how: the process (its pages, its eviction graft, its counters) and, for reads,
/// the open file's read-ahead state.
#[derive(Clone, Copy)]
pub struct IoCtx<'a> {
    pub pid: Pid,
    pub ra: Option<&'a ReadAhead>,
}

impl<'a> IoCtx<'a> {
    pub fn new(pid: Pid) -> Self {
        IoCtx { pid, ra: None }
    }

    pub fn with_read_ahead(pid: Pid, ra: &'a ReadAhead) -> Self {
        IoCtx { pid, ra: Some(ra) }
    }
}

/// True if this build checks the frame table's invariants after every operation (debug builds, and
/// release builds with the `invariants` feature, which `cargo test` of the workspace turns on
/// for every binary it builds): correct, but too slow to measure.
pub const CHECKS_INVARIANTS: bool = cfg!(any(debug_assertions, feature = "invariants"));

// The crate's tests run with its invariant checks on, in release builds too: the dev-dependency
// on itself enables the `invariants` feature.
#[cfg(all(test, not(any(debug_assertions, feature = "invariants"))))]
compile_error!("the tests must be built with the `invariants` feature");
