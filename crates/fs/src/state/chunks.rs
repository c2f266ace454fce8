//! Stream files' chunk maps (format version 3): finding, replacing and freeing a file's encoded
//! chunks. Map block `m` of a stream file is its file block `m` in the inode's block tree (so
//! the tree code maps, allocates and frees map blocks as it does data blocks); each map block
//! names where [`CHUNKS_PER_MAP`] chunks lie ([`ChunkMap`]). A chunk is replaced out of place:
//! its new blocks are written before the entry that names them changes, and its old blocks,
//! freed in the same operation, are not reused before that operation is checkpointed, so a
//! crash leaves the old chunk or the new one.

use super::*;

/// Which map block holds chunk `chunk`, and where in it.
pub(crate) fn map_slot(chunk: u64) -> (u64, usize) {
    (chunk / CHUNKS_PER_MAP, (chunk % CHUNKS_PER_MAP) as usize)
}

impl FsState {
    /// A live stream file's inode.
    pub(crate) fn stream_file(&mut self, ino: u64) -> Result<Inode> {
        let inode = self.live(ino)?;
        regular(ino, &inode)?;
        if inode.stream.is_none() {
            return Err(FsError::InvalidArgument(format!("inode {ino} is not a stream file")));
        }
        Ok(inode)
    }

    /// Map block `m` of a stream file, if it has one.
    fn chunk_map(&mut self, ino: u64, inode: &Inode, m: u64) -> Result<Option<(u64, ChunkMap)>> {
        let Some(b) = self.bmap(ino, inode, m)? else {
            return Ok(None);
        };
        let map = ChunkMap::decode(self.meta.get(b)?, ino, m).map_err(corrupt)?;
        Ok(Some((b, map)))
    }

    /// Where chunk `chunk` of stream file `ino` lies (a hole if it has never been stored).
    pub(crate) fn chunk_entry(&mut self, ino: u64, inode: &Inode, chunk: u64) -> Result<ChunkEntry> {
        let (m, slot) = map_slot(chunk);
        Ok(self
            .chunk_map(ino, inode, m)?
            .map(|(_, map)| map.entries[slot].clone())
            .unwrap_or_default())
    }

    /// Where new blocks for chunk `chunk` should go: just after the chunk before it, so that a
    /// file written in order lies in order; else near the chunk's old place.
    pub(crate) fn chunk_place(&mut self, ino: u64, inode: &Inode, chunk: u64) -> Result<u64> {
        if chunk > 0
            && let Some(&last) = self.chunk_entry(ino, inode, chunk - 1)?.blocks.last()
        {
            return Ok(last + 1);
        }
        Ok(self
            .chunk_entry(ino, inode, chunk)?
            .blocks
            .first()
            .copied()
            .unwrap_or(0))
    }

    /// Names `entry` as chunk `chunk`, making its map block if the file has none there yet;
    /// returns the entry it replaces. The caller writes `inode` back.
    fn put_chunk_entry(&mut self, ino: u64, inode: &mut Inode, chunk: u64, entry: ChunkEntry) -> Result<ChunkEntry> {
        let (m, slot) = map_slot(chunk);
        let (b, mut map) = match self.chunk_map(ino, inode, m)? {
            Some(found) => found,
            None => {
                let (b, fresh) = self.ensure_block_of(ino, inode, m)?;
                debug_assert!(fresh, "a map block that did not decode as absent");
                self.meta.create(b)?;
                (b, ChunkMap::empty())
            }
        };
        let old = std::mem::replace(&mut map.entries[slot], entry);
        map.encode(self.meta.get_mut(b)?, ino, m);
        Ok(old)
    }

    /// Allocates `n` blocks for a chunk of a file owned by `uid`, charged to it, each after the
    /// last (near `pref`, the chunk's old place). The file's block count takes them when an
    /// entry names them ([`FsState::replace_chunk`]).
    pub(crate) fn alloc_chunk_blocks(&mut self, uid: u32, n: usize, pref: u64) -> Result<Vec<u64>> {
        let mut got = Vec::with_capacity(n);
        let mut cursor = pref;
        for _ in 0..n {
            let b = self.alloc_block(uid, cursor)?;
            got.push(b);
            cursor = b + 1;
        }
        Ok(got)
    }

    fn free_chunk_blocks(&mut self, ino: u64, inode: &mut Inode, blocks: &[u64]) -> Result<()> {
        for &b in blocks {
            let b = self.ptr(ino, b as u32)?;
            self.free_block(inode.uid, b)?;
            inode.blocks = inode.blocks.saturating_sub(1);
        }
        Ok(())
    }

    /// Replaces chunk `chunk` of stream file `ino` (generation `generation`) by `entry`, whose
    /// blocks the caller allocated for owner `uid` ([`FsState::alloc_chunk_blocks`]) and wrote.
    /// The old chunk's blocks are freed. If the file has changed meanwhile (freed, reused, cut
    /// before the chunk), or `entry` is `None` (the blocks could not be written), the new blocks
    /// are freed instead: false.
    pub(crate) fn replace_chunk(
        &mut self,
        ino: u64,
        generation: u32,
        chunk: u64,
        uid: u32,
        blocks: &[u64],
        entry: Option<ChunkEntry>,
    ) -> Result<bool> {
        let start = chunk * CHUNK_BYTES as u64;
        let inode = self.live(ino).ok().filter(|i| {
            i.generation == generation && i.stream.is_some() && i.is_regular() && start < self.size_of(ino, i)
        });
        let (Some(mut inode), Some(mut entry)) = (inode, entry) else {
            for &b in blocks {
                self.free_block(uid, b)?;
            }
            return Ok(false);
        };
        debug_assert_eq!(entry.blocks, blocks);
        // The file may have been cut since the chunk's bytes were taken: no byte past its end.
        let size = self.size_of(ino, &inode);
        entry.valid_len = entry.valid_len.min((size - start).min(u64::from(u32::MAX)) as u32);
        // The size on disk grows over the chunk now stored (never past the size written).
        inode.size = inode.size.max((start + u64::from(entry.valid_len)).min(size));
        if inode.size >= size {
            self.set_stream_size(ino, None);
        }
        inode.blocks = inode.blocks.saturating_add(blocks.len() as u32);
        let old = self.put_chunk_entry(ino, &mut inode, chunk, entry)?;
        self.free_chunk_blocks(ino, &mut inode, &old.blocks)?;
        self.write_inode(ino, &inode)?;
        Ok(true)
    }

    /// Every stream file's size on disk becomes the size written (`only`: one file's), for a
    /// caller that has had the kernel store their chunks (an fsync, a sync).
    pub(crate) fn settle_stream_sizes(&mut self, only: Option<u64>) -> Result<()> {
        let pending: Vec<(u64, (u32, u64))> = match only {
            Some(ino) => self.stream_size(ino).map(|p| vec![(ino, p)]).unwrap_or_default(),
            None => self.stream_sizes(),
        };
        for (ino, (generation, size)) in pending {
            self.set_stream_size(ino, None);
            if let Ok(mut inode) = self.live(ino)
                && inode.generation == generation
                && inode.stream.is_some()
                && inode.size < size
            {
                inode.size = size;
                self.write_inode(ino, &inode)?;
            }
        }
        Ok(())
    }

    /// Frees the encoded chunks that map blocks `[from, to)` of a stream file name (their map
    /// blocks are being freed by the caller, [`FsState::free_range`]).
    pub(crate) fn free_chunks_in_maps(&mut self, ino: u64, inode: &mut Inode, from: u64, to: u64) -> Result<()> {
        let last = match self.last_mapped(ino, inode)? {
            Some(last) => last.min(to.saturating_sub(1)),
            None => return Ok(()),
        };
        for m in from..=last {
            if let Some((_, map)) = self.chunk_map(ino, inode, m)? {
                for e in &map.entries {
                    self.free_chunk_blocks(ino, inode, &e.blocks)?;
                }
            }
        }
        Ok(())
    }

    /// A stream file's size becomes `size`: chunks wholly past it are freed (map blocks that
    /// name none go too), and the chunk it cuts keeps only the bytes before it as valid.
    pub(crate) fn cut_chunks(&mut self, ino: u64, inode: &mut Inode, size: u64) -> Result<()> {
        let first_gone = size.div_ceil(CHUNK_BYTES as u64);
        let (m, slot) = map_slot(first_gone);
        // The map block holding the first chunk gone keeps the chunks before it.
        if slot > 0
            && let Some((b, mut map)) = self.chunk_map(ino, inode, m)?
        {
            let gone: Vec<ChunkEntry> = map.entries[slot..].iter_mut().map(std::mem::take).collect();
            if gone.iter().any(|e| !e.is_hole()) {
                for e in &gone {
                    self.free_chunk_blocks(ino, inode, &e.blocks)?;
                }
                map.encode(self.meta.get_mut(b)?, ino, m);
            }
        }
        let keep_maps = if slot > 0 { m + 1 } else { m };
        self.free_range(ino, inode, keep_maps, MAX_FILE_BLOCKS)?;
        // The chunk the new end cuts: its bytes past the end are no longer the file's.
        if !size.is_multiple_of(CHUNK_BYTES as u64) {
            let cut = size / CHUNK_BYTES as u64;
            let (m, slot) = map_slot(cut);
            if let Some((b, mut map)) = self.chunk_map(ino, inode, m)? {
                let e = &mut map.entries[slot];
                let valid = (size - cut * CHUNK_BYTES as u64) as u32;
                if !e.is_hole() && e.valid_len > valid {
                    e.valid_len = valid;
                    map.encode(self.meta.get_mut(b)?, ino, m);
                }
            }
        }
        Ok(())
    }

    /// Gives file `ino` (a regular file with no data, or a directory) the stream codec
    /// `module`, or takes it away (`None`).
    pub(crate) fn set_stream(&mut self, ino: u64, module: Option<ModuleId>) -> Result<()> {
        let inode = self.live(ino)?;
        match inode.file_type() {
            Some(FileType::Directory) => {}
            Some(FileType::Regular) if self.size_of(ino, &inode) == 0 && inode.blocks == 0 => {}
            Some(FileType::Regular) => {
                return Err(FsError::InvalidArgument(format!(
                    "inode {ino} holds data: a codec is given to an empty file or a directory"
                )));
            }
            _ => {
                return Err(FsError::InvalidArgument(format!(
                    "inode {ino} is neither a regular file nor a directory"
                )));
            }
        }
        let now = self.now_ns();
        self.modify(ino, |i| {
            i.stream = module;
            i.ctime_ns = now;
        })?;
        Ok(())
    }
}
