//! Stream files (format version 3): a regular file whose data is kept in encoded chunks of
//! [`CHUNK_BYTES`] plain bytes, each named by an entry of the file's chunk map
//! ([`crate::layout::ChunkMap`]). The file system stores and finds the encoded bytes; it knows
//! nothing of codecs. The kernel's page cache holds the plain pages, encodes a chunk when it
//! writes it back ([`FileSystem::write_chunk`]) and decodes one on a miss
//! ([`FileSystem::read_chunk`]).
//!
//! Writing a chunk is out of place: new blocks are allocated and written, then the entry is
//! changed and the old blocks freed in one operation. The data gate is held from the allocation
//! to the entry's change, so no commit falls between them (it would make blocks durable that
//! nothing names); a freed block is not reused before its free is checkpointed. A crash thus
//! leaves each chunk as it was or as it was written, never torn. A stream file's size may be
//! committed before the chunks it covers (its write-back needs the lock a commit holds): after
//! a crash, bytes written but never written back nor synced read as zeros.

use crate::error::{FsError, Result};
use crate::filesystem::{FileSystem, ROOM_RETRIES};
use crate::layout::{BS, CHUNK_BYTES, CHUNK_RAW, ChunkEntry, MAX_CODED, ModuleId, NONCE_BYTES};

/// One encoded chunk as the file system stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredChunk {
    /// Where it lies, its lengths and nonce.
    pub entry: ChunkEntry,
    /// Its encoded bytes (`entry.coded_len` of them); empty for a hole.
    pub coded: Vec<u8>,
}

/// A chunk to store: its encoded bytes and how to read them back.
#[derive(Debug, Clone, Copy)]
pub struct NewChunk<'a> {
    pub coded: &'a [u8],
    /// Stored as the plain bytes (the codec asked for it).
    pub raw: bool,
    /// The plain length the codec was given.
    pub plain_len: usize,
    /// The nonce the codec was given.
    pub nonce: [u8; NONCE_BYTES],
}

impl FileSystem {
    /// Gives a regular file with no data, or a directory, the stream codec `module` (its
    /// content hash), or takes it away (`None`). A directory's codec goes to the files and
    /// directories made in it afterwards. EINVAL for a file that holds data.
    pub fn bind_stream(&self, ino: u64, module: Option<ModuleId>) -> Result<()> {
        self.in_transaction(|g| g.set_stream(ino, module))
    }

    /// Every stream file's size on disk becomes the size written: for a caller that has had
    /// every stream file's chunks stored (the kernel's sync, after its cache's).
    pub fn settle_stream_sizes(&self) -> Result<()> {
        self.in_transaction(|g| g.settle_stream_sizes(None))
    }

    /// Chunk `chunk` of stream file `ino`: where it lies and its encoded bytes, read from the
    /// device (a hole has none). The caller keeps the file's chunks from being written
    /// meanwhile (the kernel's per-file chunk lock): a replaced chunk's blocks may be reused
    /// once its replacement is checkpointed.
    pub fn read_chunk(&self, ino: u64, chunk: u64) -> Result<StoredChunk> {
        Ok(self.read_chunks(ino, &[chunk])?.remove(0))
    }

    /// Several chunks of stream file `ino`, as [`FileSystem::read_chunk`] reads one, their
    /// blocks read in one device request wherever they lie one after another (as a file's
    /// chunks written in order do).
    pub fn read_chunks(&self, ino: u64, chunks: &[u64]) -> Result<Vec<StoredChunk>> {
        let entries = self.with_state(|g| {
            let inode = g.stream_file(ino)?;
            chunks
                .iter()
                .map(|&c| g.chunk_entry(ino, &inode, c))
                .collect::<Result<Vec<_>>>()
        })?;
        let blocks: Vec<u64> = entries.iter().flat_map(|e| e.blocks.iter().copied()).collect();
        let mut all = vec![0u8; blocks.len() * BS];
        for (first, n, at) in runs(&blocks) {
            self.device().read_blocks(first, &mut all[at * BS..(at + n) * BS])?;
        }
        let mut at = 0;
        Ok(entries
            .into_iter()
            .map(|entry| {
                let n = entry.blocks.len() * BS;
                let coded = all[at..at + entry.coded_len as usize].to_vec();
                at += n;
                StoredChunk { entry, coded }
            })
            .collect())
    }

    /// Stores `new` as chunk `chunk` of stream file `ino`, of generation `generation` (the file
    /// the caller took the bytes from), out of place (see the module's comment); the chunk's
    /// valid bytes are its plain length, cut at the file's end. False if the file is no longer
    /// that file or no longer reaches the chunk (nothing is stored). NoSpace or QuotaExceeded
    /// when the chunk's blocks cannot be had: the old chunk stays.
    pub fn write_chunk(&self, ino: u64, generation: u32, chunk: u64, new: &NewChunk<'_>) -> Result<bool> {
        Ok(self.write_chunks(ino, generation, &[(chunk, *new)])?[0])
    }

    /// Stores several chunks of stream file `ino` as [`FileSystem::write_chunk`] stores one,
    /// with their blocks allocated one after another and written in one device request where
    /// they are consecutive, and their entries changed in one operation: write-back of a
    /// compressed file costs as many device requests as an uncompressed one's, not one per
    /// chunk. A result per chunk, in order. When the batch's blocks cannot all be had, the
    /// chunks are stored one at a time (as many as fit).
    pub fn write_chunks(&self, ino: u64, generation: u32, chunks: &[(u64, NewChunk<'_>)]) -> Result<Vec<bool>> {
        for (_, new) in chunks {
            check_new_chunk(new)?;
        }
        match self.store_chunks(ino, generation, chunks) {
            Err(FsError::NoSpace | FsError::QuotaExceeded) if chunks.len() > 1 => {
                let mut stored = Vec::with_capacity(chunks.len());
                let mut first_error = None;
                for one in chunks {
                    match self.store_chunks(ino, generation, std::slice::from_ref(one)) {
                        Ok(s) => stored.push(s[0]),
                        Err(e) => {
                            first_error.get_or_insert(e);
                            stored.push(false);
                        }
                    }
                }
                // Any chunk that could not be had fails the batch: its pages stay dirty.
                first_error.map_or(Ok(stored), Err)
            }
            other => other,
        }
    }

    fn store_chunks(&self, ino: u64, generation: u32, chunks: &[(u64, NewChunk<'_>)]) -> Result<Vec<bool>> {
        let total: usize = chunks.iter().map(|(_, new)| new.coded.len().div_ceil(BS)).sum();
        let mut retries = 0;
        loop {
            // A commit due now is made before the gate is taken: none may run under it.
            self.commit_if_due()?;
            let gate = self.data_gate();
            let allocated = {
                let mut g = self.lock()?;
                g.begin_op();
                let got = (|| {
                    let inode = g.stream_file(ino)?;
                    let pref = g.chunk_place(ino, &inode, chunks[0].0)?;
                    Ok((inode.uid, g.alloc_chunk_blocks(inode.uid, total, pref)?))
                })();
                match got {
                    Ok(got) => {
                        g.end_op();
                        Ok(got)
                    }
                    Err(e) => {
                        g.rollback_op();
                        Err((e, g.no_room()))
                    }
                }
            };
            let (uid, blocks) = match allocated {
                Ok(got) => got,
                Err((FsError::NoSpace, seen)) if retries < ROOM_RETRIES => {
                    drop(gate);
                    retries += 1;
                    if !self.make_room(seen)? {
                        return Err(FsError::NoSpace);
                    }
                    continue;
                }
                Err((e, _)) => return Err(e),
            };
            let mut entries = Vec::with_capacity(chunks.len());
            let mut padded = vec![0u8; total * BS];
            let mut at = 0;
            for (chunk, new) in chunks {
                let n = new.coded.len().div_ceil(BS);
                padded[at * BS..at * BS + new.coded.len()].copy_from_slice(new.coded);
                entries.push((
                    *chunk,
                    ChunkEntry {
                        coded_len: new.coded.len() as u32,
                        plain_len: new.plain_len as u32,
                        valid_len: new.plain_len as u32,
                        flags: if new.raw { CHUNK_RAW } else { 0 },
                        nonce: new.nonce,
                        blocks: blocks[at..at + n].to_vec(),
                    },
                ));
                at += n;
            }
            let written = self.write_coded(&blocks, &padded);
            let mut g = self.lock()?;
            g.begin_op();
            let replaced: Result<Vec<bool>> = entries
                .into_iter()
                .map(|(chunk, entry)| {
                    let mine = entry.blocks.clone();
                    g.replace_chunk(ino, generation, chunk, uid, &mine, written.is_ok().then_some(entry))
                })
                .collect();
            match replaced {
                Ok(stored) => {
                    g.end_op();
                    drop((g, gate));
                    // Blocks that could not be written went back: the write failed.
                    written?;
                    return Ok(stored);
                }
                Err(e) => {
                    g.rollback_op();
                    return Err(e);
                }
            }
        }
    }

    /// Writes chunks' encoded bytes (`padded`, whole blocks) to their blocks, a device request
    /// per consecutive run.
    fn write_coded(&self, blocks: &[u64], padded: &[u8]) -> std::io::Result<()> {
        debug_assert_eq!(padded.len(), blocks.len() * BS);
        for (first, n, at) in runs(blocks) {
            self.device().write_blocks(first, &padded[at * BS..(at + n) * BS])?;
        }
        Ok(())
    }
}

/// EINVAL for a chunk the file system cannot store as given.
fn check_new_chunk(new: &NewChunk<'_>) -> Result<()> {
    if new.coded.is_empty() || new.coded.len() > MAX_CODED || new.plain_len == 0 || new.plain_len > CHUNK_BYTES {
        return Err(FsError::InvalidArgument(format!(
            "a chunk of {} bytes encoding {} plain bytes",
            new.coded.len(),
            new.plain_len
        )));
    }
    if new.raw && new.coded.len() != new.plain_len {
        return Err(FsError::InvalidArgument("a raw chunk must be its plain bytes".into()));
    }
    Ok(())
}

/// Consecutive runs of `blocks`: (first block, how many, index of the first in `blocks`).
fn runs(blocks: &[u64]) -> Vec<(u64, usize, usize)> {
    let mut out: Vec<(u64, usize, usize)> = Vec::new();
    for (i, &b) in blocks.iter().enumerate() {
        match out.last_mut() {
            Some((first, n, _)) if *first + *n as u64 == b => *n += 1,
            _ => out.push((b, 1, i)),
        }
    }
    out
}

/// A file or directory with a stream codec, as [`FileSystem::stream_inodes`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInode {
    pub ino: u64,
    pub uid: u32,
    pub kind: crate::FileType,
    pub module: ModuleId,
}

impl FileSystem {
    /// Every file and directory in use that names a stream codec, in inode order. Reads the
    /// inode table a group at a time, each under the lock alone (others' operations go on in
    /// between): for tools (which files depend on which module; which stored modules nothing
    /// names), never a system call's path.
    pub fn stream_inodes(&self) -> Result<Vec<StreamInode>> {
        let geo = self.geometry().clone();
        let mut out = Vec::new();
        for group in 0..geo.groups {
            self.with_state(|g| {
                let map = g.meta.get(geo.inode_bitmap(group))?.to_vec();
                for i in (0..geo.ipg).filter(|&i| crate::layout::bit(&map, i)) {
                    let ino = geo.first_ino(group) + i;
                    let inode = g.read_inode(ino)?;
                    if let (Some(module), Some(kind)) = (inode.stream, inode.file_type()) {
                        out.push(StreamInode {
                            ino,
                            uid: inode.uid,
                            kind,
                            module,
                        });
                    }
                }
                Ok(())
            })?;
        }
        Ok(out)
    }
}
