//! Stream objects: files whose data a [`ChunkStore`] keeps in encoded chunks. The cache holds
//! their plain pages like any others, but a miss brings in the whole chunk around the page
//! (decoded once) and a write-back stores whole chunks (encoded once, however many of its pages
//! were written). Their pages have no device block.

use super::*;
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};

/// Most threads writing stream chunks back in the background at once (each serves one owner at
/// a time): one owner's slow codec holds at most one of them.
pub const STREAM_WRITERS: usize = 4;
/// Chunks a stream writer stores for one owner before it lets the next owner's turn come.
const STREAM_TURN: usize = 16;
/// Chunks read ahead of a sequential read's miss, fetched with the chunk it needs (256 KiB
/// plain with it). Seven made a cold read faster on a fast device (0.74x of unbound's against
/// 0.66x) and slower on the slow disk model (1.85x against 2.04x): the reader waits while the
/// whole batch is fetched and decoded, with nothing else in flight.
const STREAM_READ_AHEAD: u64 = 3;
/// Most chunks of one object handed to its store at once (1 MiB plain): the store may write
/// them in one device request.
const STREAM_BATCH: usize = 16;

thread_local! {
    /// Set on threads that write back for everyone (the write-back thread, an eviction): their
    /// stream chunks go to the owners' queues instead of through the codec on this thread.
    static BACKGROUND: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as one that writes back for everyone (the write-back thread).
pub(super) fn mark_background_thread() {
    BACKGROUND.with(|b| b.set(true));
}

/// Runs `f` as background write-back (see [`BACKGROUND`]).
pub(super) fn in_background<T>(f: impl FnOnce() -> T) -> T {
    let was = BACKGROUND.with(|b| b.replace(true));
    let r = f();
    BACKGROUND.with(|b| b.set(was));
    r
}

/// The stream chunks waiting for background write-back, a queue per owner.
#[derive(Default)]
pub(super) struct StreamQueues {
    pending: BTreeMap<u32, BTreeSet<(u64, u64)>>,
    /// Owners a writer serves now.
    running: BTreeSet<u32>,
    /// Writer threads alive.
    writers: usize,
}

impl StreamQueues {
    /// The next owner with chunks waiting and no writer, and a turn of its chunks.
    fn next_turn(&mut self) -> Option<(u32, Vec<(u64, u64)>)> {
        let owner = *self
            .pending
            .iter()
            .find(|(o, q)| !q.is_empty() && !self.running.contains(o))?
            .0;
        let queue = self.pending.get_mut(&owner).expect("found");
        let turn: Vec<(u64, u64)> = (0..STREAM_TURN).map_while(|_| queue.pop_first()).collect();
        if queue.is_empty() {
            self.pending.remove(&owner);
        }
        self.running.insert(owner);
        Some((owner, turn))
    }
}

impl PageCache {
    /// Makes `object` a stream object kept by `store` (before any of its pages is cached).
    pub fn attach_stream(&self, object: u64, store: Arc<dyn ChunkStore>) {
        self.table.lock().streams.insert(object, store);
    }

    /// Forgets a stream object's store (the file is gone; its pages were invalidated).
    pub fn detach_stream(&self, object: u64) {
        self.table.lock().streams.remove(&object);
    }

    /// True if `object` is a stream object.
    pub fn is_stream(&self, object: u64) -> bool {
        self.table.lock().streams.contains_key(&object)
    }

    /// Brings in the pages of the chunk holding page `index` of stream object `object` that are
    /// not cached, below page `limit` (the end of the file): the demanded page with a frame it
    /// may wait for, the others only with frames free now. A read that goes on from the chunk
    /// before (its last page is cached, and this is the chunk's first page) also brings in up to
    /// [`STREAM_READ_AHEAD`] chunks after it that have no page cached, with frames free now, all
    /// fetched together. The chunks are decoded with the table unlocked; meanwhile their pages
    /// are loading (readers wait, nobody evicts or drops them).
    pub(super) fn load_chunk(
        &self,
        t: &mut MutexGuard<'_, Table>,
        pid: Pid,
        object: u64,
        store: &Arc<dyn ChunkStore>,
        index: u64,
        limit: u64,
    ) -> io::Result<()> {
        let per = store.chunk_pages();
        let chunk = index / per;
        let first = chunk * per;
        // Every frame is taken before any page is installed as loading: taking one may evict,
        // and an eviction that writes this chunk back waits for its loading pages, which would
        // be this thread's own. The demanded page's frame may wait; the others take only free
        // frames, or none.
        let mut taken: Vec<(u64, u32)> = Vec::new();
        if !t.map.contains_key(&(object, index)) {
            taken.push((index, self.allocate(t, pid, (object, index))?));
        }
        let give_back = |t: &mut MutexGuard<'_, Table>, taken: Vec<(u64, u32)>| {
            for (_, f) in taken {
                t.free.push(f);
            }
        };
        let mut full = true;
        for i in first..(first + per).min(limit.max(index + 1)) {
            if i == index || t.map.contains_key(&(object, i)) {
                continue;
            }
            match self.allocate_within(t, pid, (object, i), false) {
                Ok(Some(f)) => taken.push((i, f)),
                Ok(None) => {
                    full = false;
                    break;
                }
                Err(e) => {
                    give_back(t, taken);
                    return Err(e);
                }
            }
        }
        let mut chunks = vec![chunk];
        let sequential = index == first && first > 0 && t.map.contains_key(&(object, first - 1));
        if full && sequential {
            'ahead: for c in chunk + 1..=chunk + STREAM_READ_AHEAD {
                let pages = c * per..((c + 1) * per).min(limit);
                if pages.is_empty() || pages.clone().any(|i| t.map.contains_key(&(object, i))) {
                    break;
                }
                let mut mine = Vec::new();
                for i in pages {
                    match self.allocate_within(t, pid, (object, i), false) {
                        Ok(Some(f)) => mine.push((i, f)),
                        _ => {
                            give_back(t, mine);
                            break 'ahead;
                        }
                    }
                }
                taken.extend(mine);
                chunks.push(c);
            }
        }
        let mut loading: Vec<(u64, u32)> = Vec::new();
        for (i, f) in taken {
            let key = (object, i);
            if t.map.contains_key(&key) {
                // Brought in by another thread while frames were taken.
                t.free.push(f);
                continue;
            }
            t.install(f, key, pid, None);
            let fr = &mut t.frames[f as usize];
            fr.state = State::Loading;
            fr.pins += 1;
            fr.demanded = i == index;
            fr.prefetched = i != index;
            if i == index {
                count!(t, pid, object, misses);
            } else {
                count!(t, pid, object, prefetched);
            }
            loading.push((i, f));
        }
        if loading.is_empty() {
            return Ok(());
        }
        let bytes = per as usize * BLOCK_SIZE;
        let mut plain = vec![0u8; chunks.len() * bytes];
        let read = MutexGuard::unlocked(t, || store.read_chunks(&chunks, &mut plain));
        for &(i, f) in &loading {
            let k = (i / per - chunk) as usize;
            let fr = &mut t.frames[f as usize];
            fr.pins -= 1;
            match &read[k] {
                Ok(()) => {
                    let at = k * bytes + (i % per) as usize * BLOCK_SIZE;
                    fr.buf[..].copy_from_slice(&plain[at..at + BLOCK_SIZE]);
                    fr.state = State::Valid;
                }
                Err(_) => {
                    // Nothing is shown of a chunk that did not decode.
                    fr.state = State::Valid;
                    t.remove(f);
                    t.free.push(f);
                }
            }
        }
        self.changed.notify_all();
        // Only the demanded chunk's failure is this read's.
        read.into_iter().next().expect("the demanded chunk")
    }

    /// True if stream chunks written back in the background go to the owners' queues (a cache
    /// with a write-back thread); without one (tests, the simulator) they are written where
    /// they are found, in a deterministic order.
    fn queues_stream_chunks(&self) -> bool {
        self.config.writeback_every.is_some()
    }

    /// True if dirty page `f` waits in its owner's queue rather than being written by whoever
    /// finds it (an eviction passes it over).
    pub(super) fn left_to_its_owner(&self, t: &Table, f: u32) -> bool {
        let fr = &t.frames[f as usize];
        self.queues_stream_chunks() && fr.dirty_since.is_some() && t.streams.contains_key(&fr.key.0)
    }

    /// Writes back the chunks of the dirty stream pages `frames`: each chunk once, from its
    /// cached pages and, for pages not cached, its stored contents. The chunk's pages are being
    /// written meanwhile (not evicted, not dropped; a write to one keeps it dirty). In the
    /// background ([`in_background`]) the chunks go to their owners' queues instead.
    pub(super) fn write_chunks(&self, t: &mut MutexGuard<'_, Table>, frames: &[u32]) -> io::Result<()> {
        let chunks: BTreeSet<(u64, u64, u32)> = frames
            .iter()
            .filter_map(|&f| {
                let key = t.frames[f as usize].key;
                let store = t.streams.get(&key.0)?;
                Some((key.0, key.1 / store.chunk_pages(), store.owner()))
            })
            .collect();
        if self.queues_stream_chunks() && BACKGROUND.with(Cell::get) {
            for (object, chunk, owner) in chunks {
                self.queue_chunk(owner, object, chunk);
            }
            return Ok(());
        }
        let stored = self.write_chunk_batches(t, chunks.into_iter().map(|(object, chunk, _)| (object, chunk)));
        self.changed.notify_all();
        stored
    }

    /// Writes back `chunks` (in order, by object then chunk), up to [`STREAM_BATCH`] of one
    /// object at a time; the first error, after trying them all.
    fn write_chunk_batches(
        &self,
        t: &mut MutexGuard<'_, Table>,
        chunks: impl IntoIterator<Item = (u64, u64)>,
    ) -> io::Result<()> {
        let mut first_error = None;
        let mut batch: Vec<u64> = Vec::new();
        let mut of = None;
        let mut flush = |t: &mut MutexGuard<'_, Table>, object: Option<u64>, batch: &mut Vec<u64>| {
            if let Some(object) = object
                && !batch.is_empty()
                && let Err(e) = self.write_chunk_batch(t, object, batch)
            {
                first_error.get_or_insert(e);
            }
            batch.clear();
        };
        for (object, chunk) in chunks {
            if of != Some(object) || batch.len() == STREAM_BATCH {
                flush(t, of, &mut batch);
                of = Some(object);
            }
            batch.push(chunk);
        }
        flush(t, of, &mut batch);
        first_error.map_or(Ok(()), Err)
    }

    /// Queues a chunk for its owner's background writer, starting a writer if fewer than
    /// [`STREAM_WRITERS`] run.
    fn queue_chunk(&self, owner: u32, object: u64, chunk: u64) {
        let mut q = self.stream_queues.lock();
        q.pending.entry(owner).or_default().insert((object, chunk));
        if q.writers < STREAM_WRITERS {
            q.writers += 1;
            let cache = self.me.clone();
            let spawned = std::thread::Builder::new()
                .name("vino-stream-writer".into())
                .spawn(move || stream_writer(cache));
            if spawned.is_err() {
                // No thread now: the next round queues the chunk again.
                q.writers -= 1;
            }
        }
    }

    /// Writes back chunks `chunks` (ascending) of stream object `object`: each whose pages are
    /// dirty, from its cached pages and, for pages not cached, its stored contents, all handed
    /// to the store at once. Its pages are being written meanwhile (not evicted, not dropped;
    /// a write to one keeps it dirty). The first error.
    fn write_chunk_batch(&self, t: &mut MutexGuard<'_, Table>, object: u64, chunks: &[u64]) -> io::Result<()> {
        let Some(store) = t.streams.get(&object).cloned() else {
            return Ok(());
        };
        let per = store.chunk_pages();
        // Wait while another thread writes or loads any of these chunks' pages (then take them
        // all at once, so no thread holds some while it waits for others).
        let gathered = loop {
            let mut gathered: Vec<Gathered> = Vec::new();
            let mut busy = false;
            for &chunk in chunks {
                let first = chunk * per;
                let mut members: Vec<(u64, u32, u64)> = Vec::new();
                let mut missing = false;
                for i in first..first + per {
                    match t.map.get(&(object, i)) {
                        None => missing = true,
                        Some(&f) => {
                            let fr = &t.frames[f as usize];
                            if fr.writing || fr.state != State::Valid {
                                busy = true;
                            } else {
                                members.push((i, f, fr.generation));
                            }
                        }
                    }
                }
                gathered.push((chunk, members, missing));
            }
            if !busy {
                break gathered;
            }
            self.changed.wait_for(t, Duration::from_millis(1));
        };
        // Only chunks with a dirty page are written.
        let gathered: Vec<_> = gathered
            .into_iter()
            .filter(|(_, members, _)| {
                members
                    .iter()
                    .any(|&(_, f, _)| t.frames[f as usize].dirty_since.is_some())
            })
            .collect();
        if gathered.is_empty() {
            return Ok(());
        }
        let bytes = per as usize * BLOCK_SIZE;
        let mut plain = vec![0u8; gathered.len() * bytes];
        for (k, (chunk, members, _)) in gathered.iter().enumerate() {
            let first = chunk * per;
            for &(i, f, _) in members {
                t.frames[f as usize].writing = true;
                let at = k * bytes + (i - first) as usize * BLOCK_SIZE;
                plain[at..at + BLOCK_SIZE].copy_from_slice(&t.frames[f as usize].buf[..]);
            }
        }
        let results = MutexGuard::unlocked(t, || {
            let mut results: Vec<io::Result<()>> = gathered.iter().map(|_| Ok(())).collect();
            for (k, (chunk, members, missing)) in gathered.iter().enumerate() {
                if !missing {
                    continue;
                }
                // The pages not cached keep what the chunk holds now.
                let mut old = vec![0u8; bytes];
                if let Err(e) = store.read_chunk(*chunk, &mut old) {
                    results[k] = Err(e);
                    continue;
                }
                let first = chunk * per;
                for i in first..first + per {
                    if !members.iter().any(|m| m.0 == i) {
                        let at = (i - first) as usize * BLOCK_SIZE;
                        plain[k * bytes + at..k * bytes + at + BLOCK_SIZE].copy_from_slice(&old[at..at + BLOCK_SIZE]);
                    }
                }
            }
            let ready: Vec<(usize, (u64, &[u8]))> = gathered
                .iter()
                .enumerate()
                .filter(|&(k, _)| results[k].is_ok())
                .map(|(k, (chunk, ..))| (k, (*chunk, &plain[k * bytes..(k + 1) * bytes])))
                .collect();
            let batch: Vec<(u64, &[u8])> = ready.iter().map(|&(_, c)| c).collect();
            for ((k, _), r) in ready.iter().zip(store.write_chunks(&batch)) {
                results[*k] = r;
            }
            results
        });
        let mut first_error = None;
        for ((_, members, _), stored) in gathered.iter().zip(results) {
            for &(_, f, generation) in members {
                let fr = &mut t.frames[f as usize];
                fr.writing = false;
                if stored.is_ok() && fr.dirty_since.is_some() {
                    if fr.generation == generation {
                        t.mark_clean(f);
                    }
                    let (owner, object) = (t.frames[f as usize].owner, t.frames[f as usize].key.0);
                    count!(t, owner, object, written_back);
                }
            }
            if let Err(e) = stored {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// One chunk being written back: its index, its cached pages (page, frame, generation when
/// copied), and whether some of its pages are not cached.
type Gathered = (u64, Vec<(u64, u32, u64)>, bool);

/// A background stream writer: serves one owner's turn at a time until no owner without a
/// writer has chunks waiting.
fn stream_writer(cache: std::sync::Weak<PageCache>) {
    loop {
        let Some(c) = cache.upgrade() else { return };
        let turn = {
            let mut q = c.stream_queues.lock();
            match q.next_turn() {
                Some(turn) => turn,
                None => {
                    q.writers -= 1;
                    return;
                }
            }
        };
        let (owner, chunks) = turn;
        {
            let mut t = c.table.lock();
            // A failure leaves the pages dirty: the next round queues them again, and fsync
            // reports it.
            let _ = c.write_chunk_batches(&mut t, chunks);
        }
        c.stream_queues.lock().running.remove(&owner);
        c.changed.notify_all();
    }
}
