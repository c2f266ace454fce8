//! Write-back: writing dirty pages (on sync, on eviction, behind a writer past its mark) and
//! the thread that runs the `cache.writeback` policy.

use super::*;

impl PageCache {
    /// Writes the dirty pages in `ranges` and waits for them, and for those others were writing.
    pub(super) fn write_back(&self, ranges: &[RangeInclusive<PageKey>]) -> io::Result<()> {
        let mut t = self.table.lock();
        loop {
            let mut busy = false;
            let mut ready = Vec::new();
            for key in ranges.iter().flat_map(|r| t.dirty.range(r.clone())) {
                let f = t.map[key];
                if t.frames[f as usize].writing {
                    busy = true;
                } else if ready.len() < WRITEBACK_BATCH {
                    ready.push(f);
                }
            }
            if ready.is_empty() && !busy {
                t.checked();
                return Ok(());
            }
            if ready.is_empty() {
                self.changed.wait_for(&mut t, Duration::from_millis(1));
                continue;
            }
            self.write_frames(&mut t, &ready)?;
        }
    }

    /// Writes `frames` (dirty, not being written) to the device and marks them clean if no
    /// write came in meanwhile. The writes are queued at the scheduler together, which merges
    /// those on adjacent device blocks into one request. The table is unlocked during the I/O;
    /// the pages stay readable and writable (the device gets a copy).
    pub(super) fn write_frames(&self, t: &mut MutexGuard<'_, Table>, frames: &[u32]) -> io::Result<()> {
        let (streamed, frames): (Vec<u32>, Vec<u32>) = frames
            .iter()
            .partition(|&&f| t.streams.contains_key(&t.frames[f as usize].key.0));
        let chunks = if streamed.is_empty() {
            Ok(())
        } else {
            self.write_chunks(t, &streamed)
        };
        let blocks = self.write_blocks(t, &frames);
        chunks.and(blocks)
    }

    /// [`PageCache::write_frames`] for pages that have device blocks.
    fn write_blocks(&self, t: &mut MutexGuard<'_, Table>, frames: &[u32]) -> io::Result<()> {
        if frames.is_empty() {
            return Ok(());
        }
        let mut located = Vec::with_capacity(frames.len());
        for &f in frames {
            let fr = &t.frames[f as usize];
            let Some(dev) = fr.dev else {
                return Err(io::Error::other(format!("dirty page {:?} has no device block", fr.key)));
            };
            located.push((dev, f));
        }
        // Pages on adjacent device blocks go out in one request, copied once into its buffer.
        located.sort_unstable();
        let mut starts = Vec::new();
        let mut members = Vec::with_capacity(frames.len());
        for run in located.chunk_by(|a, b| a.0 + 1 == b.0) {
            for piece in run.chunks(WRITE_RUN_BLOCKS) {
                starts.push(piece[0].0);
                members.push(piece.iter().map(|&(_, f)| (f, 0)).collect::<Vec<_>>());
            }
        }
        // Marked first: a page being written is neither evicted nor dropped nor written by
        // another thread, so the lock can be let go between requests' copies (a batch is up to
        // 16 MiB; other users of the cache wait for one request's copy at most). A write that
        // comes in meanwhile changes the generation, and the page stays dirty.
        for (f, generation) in members.iter_mut().flatten() {
            let fr = &mut t.frames[*f as usize];
            fr.writing = true;
            *generation = fr.generation;
        }
        let mut requests = Vec::with_capacity(members.len());
        for (i, (piece, &start)) in members.iter().zip(&starts).enumerate() {
            if i > 0 {
                MutexGuard::bump(t);
            }
            let bufs = piece.iter().map(|&(f, _)| &t.frames[f as usize].buf[..]);
            requests.push(IoRequest::write(start, AlignedBuf::gather(piece.len(), bufs)));
        }
        let results: Vec<io::Result<AlignedBuf>> = MutexGuard::unlocked(t, || {
            let tickets = self.io.submit_batch(requests);
            tickets.into_iter().map(Ticket::wait).collect()
        });
        let mut first_error = None;
        for (run, result) in members.into_iter().zip(results) {
            let result = result.map(drop);
            for (f, generation) in run {
                t.frames[f as usize].writing = false;
                if let Err(e) = &result {
                    first_error.get_or_insert(io::Error::new(e.kind(), e.to_string()));
                    continue;
                }
                if t.frames[f as usize].generation == generation {
                    t.mark_clean(f);
                }
                let fr = &t.frames[f as usize];
                let (owner, object) = (fr.owner, fr.key.0);
                count!(t, owner, object, written_back);
            }
        }
        self.changed.notify_all();
        first_error.map_or(Ok(()), Err)
    }

    /// One round of the `cache.writeback` policy; the pages written. Its CPU is charged to
    /// the pages' writers ([`PageCache::charge_writeback_to`]).
    pub fn run_writeback(&self) -> io::Result<usize> {
        let clock = vino_account::ThreadClock::of_this_thread();
        let started = clock.as_ref().map_or(0, |c| c.read_ns());
        let mut writers: Vec<Pid> = Vec::new();
        let written = self.writeback_round(&mut writers);
        if let (Some(charge), Some(clock)) = (self.charger.get(), clock)
            && !writers.is_empty()
        {
            let used = clock.read_ns().saturating_sub(started);
            writers.sort_unstable();
            for run in writers.chunk_by(|a, b| a == b) {
                charge(
                    run[0],
                    Duration::from_nanos(used * run.len() as u64 / writers.len() as u64),
                );
            }
        }
        written
    }

    /// Dirty pages a writer may keep before the write-back thread starts writing them behind
    /// it: half its share (Linux starts background write-back at half its dirty limit too).
    fn behind_mark(&self) -> usize {
        self.dirty_share / 2
    }

    /// Asks the write-back thread to write `pid`'s pages behind it if it is past the mark.
    /// Without that thread (tests, the simulator) writers are only throttled.
    pub(super) fn want_write_behind(&self, t: &Table, pid: Pid, object: u64) {
        if self.config.writeback_every.is_none() || t.procs.get(&pid).is_none_or(|p| p.dirty <= self.behind_mark()) {
            return;
        }
        // One entry per writer (its latest object first): a writer of many files gets one
        // turn, and the list is no longer than the writers.
        let mut wanted = self.flusher.wanted.lock();
        match wanted.iter_mut().find(|w| w.0 == pid) {
            Some(w) => w.1 = object,
            None => {
                wanted.push((pid, object));
                self.flusher.wake.notify_one();
            }
        }
    }

    /// Write-behind: writes the pages of each writer in `wanted` past the mark, a batch each in
    /// turn (so one writer's flood delays another's write-behind by one batch at most), until
    /// each is under the mark. A batch is several device requests in flight at once: a writer
    /// copying its next data overlaps the device writing its last, instead of waiting for one
    /// request at a time when it reaches its share. Its CPU is charged to the writer.
    ///
    /// Stops at `until` (the next round of the write-back policy, which a writer that never
    /// stops must not hold off from others' pages); returns the writers still to serve.
    fn write_behind(&self, mut wanted: Vec<(Pid, u64)>, until: Duration) -> Vec<(Pid, u64)> {
        wanted.sort_unstable();
        wanted.dedup_by_key(|w| w.0);
        let clock = vino_account::ThreadClock::of_this_thread();
        while !wanted.is_empty() && !self.flusher.stop.load(Ordering::Relaxed) {
            if self.config.clock.passed(until) {
                return wanted;
            }
            wanted.retain(|&(pid, object)| {
                let started = clock.as_ref().map_or(0, |c| c.read_ns());
                let wrote = {
                    let mut t = self.table.lock();
                    if t.procs.get(&pid).is_none_or(|p| p.dirty <= self.behind_mark()) {
                        false
                    } else {
                        let batch = t.own_dirty(pid, object, WRITE_BEHIND_BATCH, EVICTION_SCAN);
                        // A failed write leaves the pages dirty: the writer's throttle, sync and
                        // eviction report it.
                        !batch.is_empty() && self.write_frames(&mut t, &batch).is_ok()
                    }
                };
                if let (Some(charge), Some(clock)) = (self.charger.get(), clock.as_ref()) {
                    charge(pid, Duration::from_nanos(clock.read_ns().saturating_sub(started)));
                }
                wrote
            });
            // Writers that asked meanwhile take their turn too.
            let mut more = std::mem::take(&mut *self.flusher.wanted.lock());
            more.retain(|w| !wanted.iter().any(|x| x.0 == w.0));
            wanted.append(&mut more);
        }
        Vec::new()
    }

    /// A write-back round; `writers` gets the writer of each page it writes.
    fn writeback_round(&self, writers: &mut Vec<Pid>) -> io::Result<usize> {
        let now = self.now_ns();
        let mut offered: Vec<WritebackArgs> = {
            let t = self.table.lock();
            t.dirty
                .iter()
                .filter_map(|k| {
                    let fr = &t.frames[t.map[k] as usize];
                    fr.dirty_since.filter(|_| !fr.writing).map(|since| WritebackArgs {
                        object: k.0,
                        index: k.1,
                        age_ns: now.saturating_sub(since),
                    })
                })
                .collect()
        };
        if offered.is_empty() {
            return Ok(0);
        }
        offered.sort_by_key(|p| std::cmp::Reverse(p.age_ns));
        offered.truncate(WRITEBACK_MAX);
        let chosen = self.writeback.invoke(&offered.as_slice());
        let keys: Vec<PageKey> = chosen
            .iter()
            .filter_map(|&i| offered.get(i))
            .map(|p| (p.object, p.index))
            .collect();
        let mut t = self.table.lock();
        let frames: Vec<u32> = keys
            .iter()
            .filter_map(|k| t.map.get(k).copied())
            .filter(|&f| t.frames[f as usize].dirty_since.is_some() && !t.frames[f as usize].writing)
            .collect();
        let n = frames.len();
        if n > 0 {
            writers.extend(frames.iter().map(|&f| t.frames[f as usize].dirtier));
            self.write_frames(&mut t, &frames)?;
        }
        Ok(n)
    }
}

/// Between writers and the write-back thread: the writers past the write-behind mark, each
/// with the object it wrote last, and the stop flag.
#[derive(Default)]
pub(super) struct FlushSignal {
    pub(super) stop: AtomicBool,
    pub(super) wanted: Mutex<Vec<(Pid, u64)>>,
    pub(super) wake: Condvar,
}

/// The write-back thread: a round of the `cache.writeback` policy every `every`, and between
/// rounds, write-behind for writers past half their share as soon as they ask. It holds the
/// cache only while working, so dropping the cache ends it.
pub(super) fn spawn_writeback(
    cache: std::sync::Weak<PageCache>,
    signal: Arc<FlushSignal>,
    every: Duration,
    clock: SharedClock,
) {
    std::thread::Builder::new()
        .name("vino-writeback".into())
        .spawn(move || {
            // This thread writes back for everyone: stream chunks go to their owners' queues.
            super::streams::mark_background_thread();
            // Rounds run on the cache's clock (a simulation's moves them).
            let mut next_round = clock.deadline_in(every);
            loop {
                let wanted = {
                    let mut w = signal.wanted.lock();
                    if w.is_empty() && !signal.stop.load(Ordering::Relaxed) {
                        clock.wait_until(&signal.wake, &mut w, next_round);
                    }
                    std::mem::take(&mut *w)
                };
                if signal.stop.load(Ordering::Relaxed) {
                    return;
                }
                let Some(cache) = cache.upgrade() else { return };
                if !wanted.is_empty() {
                    let left = cache.write_behind(wanted, next_round);
                    let mut w = signal.wanted.lock();
                    for writer in left {
                        if !w.iter().any(|x| x.0 == writer.0) {
                            w.push(writer);
                        }
                    }
                }
                if clock.passed(next_round) {
                    // A failed write-back leaves the pages dirty; the next round or a sync retries.
                    let _ = cache.run_writeback();
                    next_round = clock.deadline_in(every);
                }
            }
        })
        .expect("spawning the write-back thread");
}
