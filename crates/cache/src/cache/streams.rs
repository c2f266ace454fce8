//! Stream objects: files whose data a [`ChunkStore`] keeps in encoded chunks. The cache holds
//! their plain pages like any others, but a miss brings in the whole chunk around the page
//! (decoded once) and a write-back stores whole chunks (encoded once, however many of its pages
//! were written). Their pages have no device block.

use super::*;

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
    /// may wait for, the others only with frames free now. The chunk is decoded with the table
    /// unlocked; meanwhile its pages are loading (readers wait, nobody evicts or drops them).
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
        let mut loading: Vec<(u64, u32)> = Vec::new();
        for i in first..(first + per).min(limit.max(index + 1)) {
            let key = (object, i);
            if t.map.contains_key(&key) {
                continue;
            }
            let f = if i == index {
                self.allocate(t, pid, key)?
            } else {
                match self.allocate_within(t, pid, key, false)? {
                    Some(f) => f,
                    None => continue,
                }
            };
            if t.map.contains_key(&key) {
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
        let mut plain = vec![0u8; per as usize * BLOCK_SIZE];
        let read = MutexGuard::unlocked(t, || store.read_chunk(chunk, &mut plain));
        for &(i, f) in &loading {
            let fr = &mut t.frames[f as usize];
            fr.pins -= 1;
            match &read {
                Ok(()) => {
                    let at = (i - first) as usize * BLOCK_SIZE;
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
        read
    }

    /// Writes back the chunks of the dirty stream pages `frames`: each chunk once, from its
    /// cached pages and, for pages not cached, its stored contents. The chunk's pages are being
    /// written meanwhile (not evicted, not dropped; a write to one keeps it dirty).
    pub(super) fn write_chunks(&self, t: &mut MutexGuard<'_, Table>, frames: &[u32]) -> io::Result<()> {
        let chunks: BTreeSet<(u64, u64)> = frames
            .iter()
            .filter_map(|&f| {
                let key = t.frames[f as usize].key;
                let per = t.streams.get(&key.0)?.chunk_pages();
                Some((key.0, key.1 / per))
            })
            .collect();
        let mut first_error = None;
        for (object, chunk) in chunks {
            if let Err(e) = self.write_chunk(t, object, chunk) {
                first_error.get_or_insert(e);
            }
        }
        self.changed.notify_all();
        first_error.map_or(Ok(()), Err)
    }

    fn write_chunk(&self, t: &mut MutexGuard<'_, Table>, object: u64, chunk: u64) -> io::Result<()> {
        let Some(store) = t.streams.get(&object).cloned() else {
            return Ok(());
        };
        let per = store.chunk_pages();
        let first = chunk * per;
        // Wait while another thread writes or loads this chunk's pages.
        let (members, missing) = loop {
            let mut members: Vec<(u64, u32, u64)> = Vec::new();
            let mut missing = false;
            let mut busy = false;
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
            if !busy {
                break (members, missing);
            }
            self.changed.wait_for(t, Duration::from_millis(1));
        };
        if !members
            .iter()
            .any(|&(_, f, _)| t.frames[f as usize].dirty_since.is_some())
        {
            return Ok(());
        }
        let mut plain = vec![0u8; per as usize * BLOCK_SIZE];
        for &(i, f, _) in &members {
            t.frames[f as usize].writing = true;
            let at = (i - first) as usize * BLOCK_SIZE;
            plain[at..at + BLOCK_SIZE].copy_from_slice(&t.frames[f as usize].buf[..]);
        }
        let stored = MutexGuard::unlocked(t, || {
            if missing {
                // The pages not cached keep what the chunk holds now.
                let mut old = vec![0u8; plain.len()];
                store.read_chunk(chunk, &mut old)?;
                for i in first..first + per {
                    if !members.iter().any(|m| m.0 == i) {
                        let at = (i - first) as usize * BLOCK_SIZE;
                        plain[at..at + BLOCK_SIZE].copy_from_slice(&old[at..at + BLOCK_SIZE]);
                    }
                }
            }
            store.write_chunk(chunk, &plain)
        });
        for &(_, f, generation) in &members {
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
        stored
    }
}
