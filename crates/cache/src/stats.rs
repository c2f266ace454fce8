//! Cache counters, per process, per file and in all.

/// What happened to the pages of one process, one file, or all of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheCounters {
    pub hits: u64,
    pub misses: u64,
    /// Pages read ahead.
    pub prefetched: u64,
    /// Pages read ahead that a read then used.
    pub prefetch_used: u64,
    /// Pages read ahead that were evicted unused.
    pub prefetch_wasted: u64,
    /// Evictions where the kernel's LRU choice stood.
    pub evicted_by_lru: u64,
    /// Evictions where a `vas.pick_victim` graft chose another page.
    pub evicted_by_graft: u64,
    /// Misses caused by a graft's earlier choice (Cao's placeholders): each costs the process
    /// the page the kernel had chosen.
    pub graft_mistakes: u64,
    /// Dirty pages written back.
    pub written_back: u64,
}

/// A snapshot of the cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    /// The cache's capacity, in frames.
    pub frames: usize,
    /// Frames made so far (their memory allocated and touched): resident pages and free frames.
    pub made: usize,
    pub resident: usize,
    pub dirty: usize,
    pub total: CacheCounters,
}
