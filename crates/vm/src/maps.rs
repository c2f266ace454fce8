//! Files mapped into program memory (`vino_mmap`).
//!
//! A mapping is a page-aligned range of a program's linear memory whose pages come from a file
//! rather than as zeros: a fault on one reads the file's page (through the kernel's page cache,
//! behind [`MapSource`]) and copies it in. The frame is the program's own copy, not the cache's:
//! the cache's frames are separate buffers handed to I/O by value, and sharing one would need
//! a memfd-backed frame arena under the whole cache. Coherence comes instead from the kernel
//! telling the pager whenever a file's bytes change ([`crate::Pager::file_changed`]): the clean
//! copies of the changed pages leave every mapping, and the next touch reads the new bytes.
//!
//! * Shared, read-only: always clean; evicted by dropping the copy.
//! * Shared, writable: a page whose bytes no longer hash as they came in was written through
//!   the mapping; it is written back to the file when evicted, at `msync`, at `munmap` and when
//!   the program ends. Until then it keeps the program's bytes over a `write(2)` by others to
//!   the same page (as POSIX allows before `msync`).
//! * Private: a copy of the file at first touch, from then on the program's own (anonymous,
//!   swapped like any page; never written back). A read-only private page is dropped and read
//!   again like a shared one.
//!
//! A page wholly past the end of the file (truncated while mapped) is made inaccessible: the
//! program's touch traps it, and only it. Kernel code reading or writing program memory for a
//! system call checks the mapped part of its buffers first ([`HostPin::check`]), and while it
//! runs the mapped pages of that memory stay put (see [`HostPin`]).

use crate::swap::PAGE;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::io;
use std::sync::Arc;

/// Most mappings one memory holds (Linux's `vm.max_map_count` is 65530 areas; a VINO program's
/// mappings are whole files or windows of them).
pub const MAX_MAPPINGS: usize = 1024;

/// Pages a fault on a mapped file reads in at once when the ones after it are untouched too
/// (Linux's `fault_around_bytes` is 64 KiB): one request to the page cache, whose read of
/// several missing blocks is one device request.
pub const FILE_CLUSTER: u32 = 16;

/// A mapped file as the pager reads and writes it (the kernel implements it over its page
/// cache).
pub trait MapSource: Send + Sync {
    /// Reads the file's pages from page `index` into `buf` (whole pages), never past the end of
    /// the file; how many bytes (0: the page lies wholly past the end).
    fn read(&self, index: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes page `index` back as the mapping holds it: the part before the end of the file.
    /// `wait` false (a fault thread's write-back): fails with `WouldBlock` rather than wait for a
    /// writer of the file, who may be stuck in a fault that thread is to serve.
    fn write_page(&self, index: u64, page: &[u8], wait: bool) -> io::Result<()>;
    /// Makes what was written back durable (`msync` with `MS_SYNC`).
    fn sync(&self) -> io::Result<()>;
    /// The file's size in bytes now.
    fn size(&self) -> u64;
}

/// How a range is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapMode {
    /// Writes reach the file (`MAP_SHARED`); else they stay the program's (`MAP_PRIVATE`).
    pub shared: bool,
    /// The program may write it (`PROT_WRITE`); else a write traps.
    pub writable: bool,
}

/// One mapping of a memory.
pub(crate) struct Mapping {
    /// First page of program memory, and how many.
    pub first: u32,
    pub pages: u32,
    pub source: Arc<dyn MapSource>,
    /// Which file (the kernel's inode number): what [`crate::Pager::file_changed`] names.
    pub key: u64,
    /// The file's page at `first`.
    pub file_page: u64,
    pub mode: MapMode,
    /// Shared writable: each resident page's hash as it came from the file.
    pub filled: HashMap<u32, u64>,
    /// Pages made inaccessible because they lay past the end of the file.
    pub fenced: BTreeSet<u32>,
    /// A write-back failed since the last `msync` (which reports it).
    pub failed: bool,
}

impl Mapping {
    pub fn contains(&self, page: u32) -> bool {
        page >= self.first && page - self.first < self.pages
    }

    pub fn file_index(&self, page: u32) -> u64 {
        self.file_page + u64::from(page - self.first)
    }

    /// Its pages leave by being dropped (the file has their bytes), never through swap.
    pub fn file_backed(&self) -> bool {
        self.mode.shared || !self.mode.writable
    }

    pub fn writes_back(&self) -> bool {
        self.mode.shared && self.mode.writable
    }

    /// Whether resident `page`, whose bytes are `bytes`, was written through the mapping.
    pub fn dirty(&self, page: u32, bytes: &[u8]) -> bool {
        self.writes_back() && self.filled.get(&page).is_some_and(|&h| h != page_hash(bytes))
    }

    /// The protection its pages have while accessible.
    pub fn prot(&self) -> i32 {
        if self.mode.writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        }
    }

    /// Pages of it the file range `[start, end)` (bytes) covers.
    pub fn pages_of(&self, start: u64, end: u64) -> std::ops::Range<u32> {
        let first_file = start / PAGE as u64;
        let end_file = end.div_ceil(PAGE as u64);
        let lo = first_file.max(self.file_page);
        let hi = end_file.min(self.file_page + u64::from(self.pages));
        if lo >= hi {
            return 0..0;
        }
        let to_page = |f: u64| self.first + (f - self.file_page) as u32;
        to_page(lo)..to_page(hi)
    }
}

pub(crate) fn page_hash(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Changes protection of `[addr, addr + len)`, a range of a memory the pager reserved.
pub(crate) fn protect(addr: usize, len: usize, prot: i32) -> io::Result<()> {
    // SAFETY: the range lies in a reservation the pager made and keeps while the memory lives.
    let r = unsafe { libc::mprotect(addr as *mut _, len, prot) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Gives up the frames of `[addr, addr + len)`: the next touch faults to the pager.
pub(crate) fn zap(addr: usize, len: usize) {
    // SAFETY: as `protect`; the pager's tables record the pages as gone.
    unsafe { libc::madvise(addr as *mut _, len, libc::MADV_DONTNEED) };
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoFile;
    impl MapSource for NoFile {
        fn read(&self, _: u64, _: &mut [u8]) -> io::Result<usize> {
            Ok(0)
        }
        fn write_page(&self, _: u64, _: &[u8], _: bool) -> io::Result<()> {
            Ok(())
        }
        fn sync(&self) -> io::Result<()> {
            Ok(())
        }
        fn size(&self) -> u64 {
            0
        }
    }

    #[test]
    fn a_file_range_names_the_mapping_pages_it_covers() {
        let m = Mapping {
            first: 10,
            pages: 4,
            source: Arc::new(NoFile),
            key: 1,
            file_page: 2,
            mode: MapMode {
                shared: true,
                writable: false,
            },
            filled: HashMap::new(),
            fenced: BTreeSet::new(),
            failed: false,
        };
        let p = PAGE as u64;
        assert_eq!(m.pages_of(0, p), 0..0, "before the mapped window");
        assert_eq!(m.pages_of(2 * p, 2 * p + 1), 10..11);
        assert_eq!(m.pages_of(3 * p - 1, 4 * p + 1), 10..13, "a byte on each side");
        assert_eq!(m.pages_of(5 * p, u64::MAX), 13..14, "to the end of the file");
        assert_eq!(m.pages_of(6 * p, 7 * p), 0..0, "after it");
        assert_eq!(m.file_index(12), 4);
    }
}
