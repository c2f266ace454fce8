//! What the page cache is wired to. The cache, the file system and the I/O scheduler are
//! siblings that do not know each other; the kernel joins them here:
//!
//! * [`FileBacking`]: one file of the [`FileSystem`] as the cache's [`Backing`] (where its
//!   blocks are, how big it is);
//! * [`SchedulerIo`] and [`QueueIo`]: the cache's [`PageIo`] through the I/O scheduler (the
//!   kernel's choice) or straight to a device queue (benchmarks of the cache alone);
//! * [`CacheTarget`]: the page cache as where a file's written bytes go
//!   ([`vino_fs::WriteTarget`]): the file system decides, for both its own uncached path and
//!   this one, which blocks a write allocates and which bytes become zeros ([`vino_fs::write`]).

use std::io;
use std::sync::Arc;
use vino_blockdev::{BLOCK_SIZE, IoQueue, IoRequest, Ticket};
use vino_cache::{Backing, IoCtx, PageCache, PageIo};
use vino_fs::{BlockWrite, FileSystem, WriteTarget};
use vino_iosched::IoScheduler;

/// One file as the page cache sees it.
pub struct FileBacking {
    fs: Arc<FileSystem>,
    ino: u64,
}

impl FileBacking {
    pub fn new(fs: Arc<FileSystem>, ino: u64) -> FileBacking {
        FileBacking { fs, ino }
    }

    pub fn ino(&self) -> u64 {
        self.ino
    }
}

impl Backing for FileBacking {
    fn locate(&self, index: u64) -> io::Result<Option<u64>> {
        self.fs.locate(self.ino, index).map_err(io::Error::from)
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.fs.stat(self.ino)?.size)
    }
}

/// Where the kernel's writes go: a file's pages in the page cache (written back later, or by
/// the file system's data hook before a commit).
pub struct CacheTarget<'a> {
    pub cache: &'a PageCache,
    pub ctx: IoCtx<'a>,
    pub ino: u64,
    pub backing: &'a FileBacking,
}

/// A file's backing that knows where one block lives already (the file system just said so):
/// the cache asks it for that block without taking the file system's lock again. The writer
/// holds the file's write lock (`FileTable::write_lock`), so no truncate frees the block between
/// the allocation and the cache's write.
struct Located<'a> {
    index: u64,
    block: u64,
    file: &'a FileBacking,
}

impl Backing for Located<'_> {
    fn locate(&self, index: u64) -> io::Result<Option<u64>> {
        if index == self.index {
            return Ok(Some(self.block));
        }
        self.file.locate(index)
    }

    fn size(&self) -> io::Result<u64> {
        self.file.size()
    }
}

impl WriteTarget for CacheTarget<'_> {
    fn put(&mut self, piece: &BlockWrite<'_>) -> io::Result<()> {
        let start = piece.index * BLOCK_SIZE as u64;
        let backing = Located {
            index: piece.index,
            block: piece.block,
            file: self.backing,
        };
        // Unthrottled throughout: the file system holds its data gate while it puts, and a
        // commit waits for it; the writer waited for its share before ([`PageCache::throttle`]).
        if piece.at == 0 && piece.data.len() == BLOCK_SIZE {
            // The whole block: straight from the caller's data, one copy.
            return self
                .cache
                .write_unthrottled(&self.ctx, self.ino, &backing, start, piece.data);
        }
        if !piece.needs_old() {
            // From zeros: the cache need not read the block from the device.
            let mut block = [0u8; BLOCK_SIZE];
            piece.apply(&mut block);
            return self
                .cache
                .write_unthrottled(&self.ctx, self.ino, &backing, start, &block);
        }
        const ZEROS: [u8; BLOCK_SIZE] = [0; BLOCK_SIZE];
        for r in piece.zeroed() {
            self.cache
                .write_unthrottled(&self.ctx, self.ino, &backing, start + r.start as u64, &ZEROS[r])?;
        }
        self.cache
            .write_unthrottled(&self.ctx, self.ino, &backing, start + piece.at as u64, piece.data)
    }

    fn forget(&mut self, from: u64) {
        // Dirty data there is dropped: a page written back after its block was freed could land
        // on a block reused for another file or for metadata.
        self.cache.invalidate(self.ino, from);
    }

    fn forget_range(&mut self, first: u64, end: u64) {
        // As `forget`: the blocks are freed, or zeroed on the device under the pages.
        self.cache.invalidate_range(self.ino, first, end);
    }
}

/// The page cache's I/O through the I/O scheduler (and its `disk.pick_request` graftpoint).
pub struct SchedulerIo(pub Arc<IoScheduler>);

impl PageIo for SchedulerIo {
    fn submit(&self, request: IoRequest) -> Ticket {
        self.0.submit(request)
    }

    fn submit_batch(&self, requests: Vec<IoRequest>) -> Vec<Ticket> {
        self.0.submit_batch(requests)
    }
}

/// The page cache's I/O straight to a device queue, with no scheduler in between.
pub struct QueueIo(pub IoQueue);

impl PageIo for QueueIo {
    fn submit(&self, request: IoRequest) -> Ticket {
        self.0.submit(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vino_blockdev::{BlockDevice, MemDevice};
    use vino_fs::{MkfsOptions, MountOptions, NewFile, mkfs};
    use vino_graft::Runtime;

    #[test]
    fn a_file_backing_reports_the_files_size_and_blocks() {
        let dev = Arc::new(MemDevice::new(4096));
        mkfs(&*dev, &MkfsOptions::default()).unwrap();
        let fs = FileSystem::mount(
            dev as Arc<dyn BlockDevice>,
            &Runtime::default(),
            &MountOptions::default(),
        )
        .unwrap();
        let ino = fs.create(fs.root(), "f", &NewFile::by(1)).unwrap();
        let block = fs.allocate(ino, 3).unwrap();
        fs.extend_size(ino, 4 * 4096).unwrap();
        let backing = FileBacking::new(fs.clone(), ino);
        assert_eq!(backing.ino(), ino);
        assert_eq!(backing.size().unwrap(), 4 * 4096);
        assert_eq!(backing.locate(3).unwrap(), Some(block));
        assert_eq!(backing.locate(0).unwrap(), None);
    }
}
