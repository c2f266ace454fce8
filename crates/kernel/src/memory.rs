//! Processes' memory: the kernel's pager (`vino-vm`) made on first need, its swap area on the
//! kernel's own file system, and what the pager is told of each process (its user, its
//! `vas.pick_victim` and `vm.fault_around` grafts, its swap charge, its end when out of swap, and
//! its faults that wait, which the CPU scheduler hands off as it does a system call that blocks).
//!
//! The swap area is a file with no name: made at first need, put on the orphan list at once (so
//! a crash frees it at the next mount, with whatever it held), grown a chunk at a time, and
//! written and read at its blocks' addresses, past the page cache and the journal. Its pages are
//! enciphered (see `vino_vm::swap`), so the freed blocks show nothing to their next owner.

use crate::account::{Account, Charge, Resource};
use crate::cache_io::{CacheTarget, FileBacking};
use crate::error::Errno;
use crate::files::Fd;
use crate::process::Process;
use crate::{Kernel, SysError, SysResult};
use parking_lot::{Mutex, RwLock};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};
use vino_blockdev::BLOCK_SIZE;
use vino_cache::IoCtx;
use vino_cache::{Candidates, PickVictim};
use vino_fs::FileType;
use vino_fs::{FileSystem, NewFile};
use vino_graft::{GraftSlot, PolicyKind};
use vino_vm::{FaultArgs, FaultAround, MapError, MapMode, MapSource, Owner, PAGE, Pager, PagerConfig, SwapStore};

pub use vino_vm::{HostPin, Memory, MemoryStats, PAGE as PAGE_SIZE, PagerStats};

const _: () = assert!(PAGE == BLOCK_SIZE, "a swap slot is one block");

/// The kernel's pager and swap area.
pub(crate) struct KernelMemory {
    config: PagerConfig,
    /// Swap in memory instead of the file (`KernelConfig::swap_on_disk` off).
    in_memory: Option<Arc<vino_vm::MemSwap>>,
    /// Programs' memory is paged by the kernel (`KernelConfig::paged_memory`).
    paged: bool,
    swap: Arc<SwapFile>,
    /// Made at the first program memory; `None` if this host gives no userfaultfd (programs'
    /// memory is then Linux's, unpaged and uncounted).
    pager: OnceLock<Option<Pager>>,
}

impl KernelMemory {
    pub(crate) fn new(fs: Arc<FileSystem>, kernel: &crate::KernelConfig) -> KernelMemory {
        let (limits, paged) = (&kernel.limits, kernel.paged_memory);
        let pages = |bytes: u64| (bytes / PAGE as u64).max(1);
        let swap_pages = pages(limits.total.get(Resource::SwapBytes)).min(fs.geometry().block_count / 2);
        let config = PagerConfig {
            resident_per_process: pages(limits.process.get(Resource::ResidentBytes)),
            resident_total: pages(limits.total.get(Resource::ResidentBytes)),
            swap_pages,
            // 4 MiB at a time, less on a small image.
            swap_chunk: (swap_pages / 8).clamp(16, 1024),
            ..PagerConfig::default()
        };
        KernelMemory {
            config,
            in_memory: (!kernel.swap_on_disk).then(Default::default),
            paged,
            swap: Arc::new(SwapFile {
                fs,
                file: RwLock::new(None),
            }),
            pager: OnceLock::new(),
        }
    }

    pub(crate) fn pager(&self) -> Option<&Pager> {
        self.pager
            .get_or_init(|| {
                if !self.paged {
                    return None;
                }
                let store: Arc<dyn SwapStore> = match &self.in_memory {
                    Some(m) => m.clone(),
                    None => self.swap.clone(),
                };
                match Pager::new(self.config.clone(), store) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        eprintln!("vino: programs' memory is not paged: no userfaultfd here ({e})");
                        None
                    }
                }
            })
            .as_ref()
    }

    /// The bytes `[start, end)` of file `ino` changed (written, or its size set): mappings of
    /// it look again.
    pub(crate) fn file_changed(&self, ino: u64, start: u64, end: u64) {
        if let Some(p) = self.pager.get().and_then(Option::as_ref) {
            p.file_changed(ino, start, end);
        }
    }

    /// The swap file's inode, while there is one (the invariants count it as parked).
    pub(crate) fn swap_inode(&self) -> Option<u64> {
        self.swap.file.read().as_ref().map(|f| f.ino)
    }

    /// Frees the swap file (at shutdown, when no program memory is left).
    pub(crate) fn release_swap(&self) {
        if self
            .pager
            .get()
            .and_then(Option::as_ref)
            .is_some_and(|p| p.stats().memories > 0)
        {
            return;
        }
        if let Some(f) = self.swap.file.write().take() {
            let _ = self.swap.fs.release_orphan(f.ino);
        }
    }
}

/// The swap area: an unnamed file and its blocks, slot `i` at block `blocks[i]`.
struct SwapFile {
    fs: Arc<FileSystem>,
    file: RwLock<Option<SwapBlocks>>,
}

struct SwapBlocks {
    ino: u64,
    blocks: Vec<u64>,
}

impl SwapFile {
    /// Makes the unnamed file, root's with mode 0, made and put on the orphan list in one
    /// transaction (see `FileSystem::create_unnamed`). The name it passes through is never
    /// seen; one already taken is tried again under the next.
    fn make(&self) -> io::Result<u64> {
        let attrs = NewFile {
            mode: 0,
            uid: 0,
            gid: 0,
            creator: 0,
        };
        let root = self.fs.root();
        let mut last = None;
        for attempt in 0..64 {
            let name = format!(".vino-swap-{attempt}");
            match self.fs.create_unnamed(root, &name, &attrs) {
                Ok(ino) => return Ok(ino),
                Err(e) => last = Some(e),
            }
        }
        Err(io::Error::other(format!(
            "making the swap area: {}",
            last.map_or(String::new(), |e| e.to_string())
        )))
    }

    fn block(&self, slot: u64) -> io::Result<u64> {
        let f = self.file.read();
        f.as_ref()
            .and_then(|f| f.blocks.get(slot as usize).copied())
            .ok_or_else(|| io::Error::other(format!("swap slot {slot} past the swap area")))
    }
}

impl SwapStore for SwapFile {
    fn pages(&self) -> u64 {
        self.file.read().as_ref().map_or(0, |f| f.blocks.len() as u64)
    }

    fn grow(&self, pages: u64) -> io::Result<u64> {
        let (ino, have) = match self.file.read().as_ref() {
            Some(f) => (f.ino, f.blocks.len() as u64),
            None => (0, 0),
        };
        let ino = if ino == 0 {
            let ino = self.make()?;
            *self.file.write() = Some(SwapBlocks {
                ino,
                blocks: Vec::new(),
            });
            ino
        } else {
            ino
        };
        if pages > have {
            let bs = BLOCK_SIZE as u64;
            self.fs
                .fallocate(ino, have * bs, (pages - have) * bs, false)
                .map_err(io::Error::other)?;
        }
        let blocks = self.fs.block_map(ino).map_err(io::Error::other)?;
        if blocks.contains(&0) {
            return Err(io::Error::other("the swap area has a hole"));
        }
        let n = blocks.len() as u64;
        if let Some(f) = self.file.write().as_mut() {
            f.blocks = blocks;
        }
        Ok(n)
    }

    fn write(&self, slot: u64, page: &[u8]) -> io::Result<()> {
        self.fs.device().write_blocks(self.block(slot)?, page)
    }

    fn read(&self, slot: u64, page: &mut [u8]) -> io::Result<()> {
        self.fs.device().read_blocks(self.block(slot)?, page)
    }

    fn write_run(&self, first: u64, pages: &[u8]) -> io::Result<()> {
        for (block, at, n) in self.extents(first, pages.len() / PAGE)? {
            self.fs
                .device()
                .write_blocks(block, &pages[at * PAGE..(at + n) * PAGE])?;
        }
        Ok(())
    }

    fn read_run(&self, first: u64, pages: &mut [u8]) -> io::Result<()> {
        for (block, at, n) in self.extents(first, pages.len() / PAGE)? {
            self.fs
                .device()
                .read_blocks(block, &mut pages[at * PAGE..(at + n) * PAGE])?;
        }
        Ok(())
    }
}

impl SwapFile {
    /// Slots `first..first + n` as runs that lie together on the device: (device block, index
    /// of its first slot in the run, slots).
    fn extents(&self, first: u64, n: usize) -> io::Result<Vec<(u64, usize, usize)>> {
        let f = self.file.read();
        let blocks = f
            .as_ref()
            .and_then(|f| f.blocks.get(first as usize..first as usize + n))
            .ok_or_else(|| io::Error::other(format!("swap slots {first}+{n} past the swap area")))?;
        let mut runs: Vec<(u64, usize, usize)> = Vec::new();
        for (i, &b) in blocks.iter().enumerate() {
            match runs.last_mut() {
                Some((start, _, len)) if *start + *len as u64 == b => *len += 1,
                _ => runs.push((b, i, 1)),
            }
        }
        Ok(runs)
    }
}

/// What the pager knows of one process's memory.
struct ProcessMemory {
    pid: u64,
    uid: u32,
    process: Weak<Process>,
    account: Arc<Account>,
    victim: Arc<GraftSlot<PickVictim>>,
    around: Arc<GraftSlot<FaultAround>>,
    swap: Mutex<Option<Charge>>,
    /// Where a shadow tried at `vas.pick_victim` is found (without upgrading `process`: its
    /// last reference must not be dropped on a pager thread).
    cache: Arc<vino_cache::PageCache>,
}

impl Owner for ProcessMemory {
    fn pid(&self) -> u64 {
        self.pid
    }

    fn uid(&self) -> u32 {
        self.uid
    }

    fn pick_victim(&self, candidates: &[u64]) -> Option<usize> {
        // A candidate tried in shadow at the process's vas.pick_victim sees program memory's
        // evictions too (`vino_cache::shadow`).
        let tried = self.cache.victim_try(self.pid);
        if !self.victim.consulted() {
            if let Some(t) = tried {
                t.offer_memory(candidates, 0);
            }
            return None;
        }
        let choice = self.victim.invoke(&Candidates::fixed(candidates.to_vec()));
        if let Some(t) = tried {
            t.offer_memory(candidates, choice);
        }
        Some(choice)
    }

    fn has_fault_around(&self) -> bool {
        self.around.policy_kind() != PolicyKind::Default
    }

    fn fault_around(&self, page: u64, pages: u64) -> Option<(u64, u64)> {
        if self.around.policy_kind() == PolicyKind::Default {
            return None;
        }
        Some(self.around.invoke(&FaultArgs { page, pages }))
    }

    fn charge_swap(&self, pages: u64) -> bool {
        let bytes = pages * PAGE as u64;
        let mut held = self.swap.lock();
        match held.as_mut() {
            Some(c) => c.grow(bytes).is_ok(),
            None => match self.account.charge(Resource::SwapBytes, bytes) {
                Ok(c) => {
                    *held = Some(c);
                    true
                }
                Err(_) => false,
            },
        }
    }

    fn uncharge_swap(&self, pages: u64) {
        if let Some(c) = self.swap.lock().as_mut() {
            c.shrink(pages * PAGE as u64);
        }
    }

    fn fault_waits(&self, thread: u32) {
        vino_sched::fault_waits(thread);
    }

    fn fault_served(&self, thread: u32) {
        vino_sched::fault_served(thread);
    }

    fn out_of_swap(&self) {
        if let Some(p) = self.process.upgrade() {
            p.out_of_swap.store(true, Ordering::SeqCst);
            p.kill();
        }
    }
}

impl Kernel {
    /// Counts of the pager over all programs (`None` before the first program memory, or
    /// where memory is not paged).
    pub fn pager_stats(&self) -> Option<PagerStats> {
        self.memory.pager.get().and_then(Option::as_ref).map(Pager::stats)
    }

    /// Waits until every fault is served and every eviction it set off is done (see
    /// `Pager::settle`).
    pub fn settle_memory(&self) {
        if let Some(p) = self.memory.pager.get().and_then(Option::as_ref) {
            p.settle();
        }
    }

    /// Checks the pager's tables (the simulator's invariant).
    pub fn check_pager(&self) -> Result<(), String> {
        self.memory
            .pager
            .get()
            .and_then(Option::as_ref)
            .map_or(Ok(()), Pager::check)
    }
}

impl Process {
    /// A memory for this process's program: `reserved` bytes of address space and `guard`
    /// more never mapped, the first `minimum` usable, paged by the kernel within this
    /// process's resident limit (wasmtime's `MemoryCreator` calls this).
    pub fn create_memory(self: &Arc<Self>, minimum: usize, reserved: usize, guard: usize) -> SysResult<Memory> {
        let kernel = self.kernel();
        let owner = Arc::new(ProcessMemory {
            pid: self.pid(),
            uid: self.cred.uid,
            process: Arc::downgrade(self),
            account: self.account().clone(),
            victim: kernel.cache.register_process(self.pid()),
            cache: kernel.cache.clone(),
            around: self.fault_around.clone(),
            swap: Mutex::new(None),
        });
        let made = match kernel.memory.pager() {
            Some(pager) => pager.create(minimum, reserved, guard, owner),
            None => Memory::unpaged(minimum, reserved, guard, owner),
        };
        let memory = made.map_err(|e| SysError::new(crate::Errno::NoMem, format!("program memory: {e}")))?;
        *self.memory.lock() = Some(memory.handle());
        Ok(memory)
    }

    fn memory_handle(&self) -> SysResult<vino_vm::MemoryHandle> {
        self.memory
            .lock()
            .clone()
            .ok_or_else(|| SysError::new(Errno::NotSup, "this process has no program memory"))
    }

    /// Maps `len` bytes of open file `fd` from `offset` at `at` of the program's memory (both
    /// page-aligned; `vino_mmap`). `shared`: the program's stores reach the file; `writable`:
    /// it may store at all. The descriptor must be open for reading, and for writing too for a
    /// shared writable mapping (as Linux asks). The file stays referenced until unmapped.
    pub fn mmap(&self, at: usize, len: usize, fd: Fd, offset: u64, shared: bool, writable: bool) -> SysResult<()> {
        let f = self.file(fd)?;
        if f.kind != FileType::Regular {
            return Err(SysError::new(
                Errno::NotSup,
                format!("descriptor {fd} is not a file to map"),
            ));
        }
        if !f.flags.read || (shared && writable && !f.flags.write) {
            return Err(SysError::new(
                Errno::Acces,
                format!("descriptor {fd} is not open for this mapping"),
            ));
        }
        if !offset.is_multiple_of(PAGE as u64) {
            return Err(SysError::new(Errno::Inval, "a mapping's file offset is page-aligned"));
        }
        let kernel = self.kernel();
        {
            // The descriptor holds a reference already: the file cannot go meanwhile.
            let _ns = kernel.ns.read();
            kernel.files.take_for_mapping(f.ino);
        }
        let source = Arc::new(FileMap {
            kernel: Arc::downgrade(kernel),
            ino: f.ino,
            pid: self.pid(),
            backing: FileBacking::new(kernel.fs.clone(), f.ino),
        });
        let mode = MapMode { shared, writable };
        self.memory_handle()?
            .map(at, len, source, f.ino, offset / PAGE as u64, mode)
            .map_err(|e| map_error(e, "mmap"))
    }

    /// Ends the mapping at `at` (exactly as mapped), writing back what the program changed.
    pub fn munmap(&self, at: usize, len: usize) -> SysResult<()> {
        self.memory_handle()?.unmap(at, len).map_err(|e| map_error(e, "munmap"))
    }

    /// Writes back what the program changed through its shared mappings in `[at, at + len)`;
    /// `durable`: and makes it durable.
    pub fn msync(&self, at: usize, len: usize, durable: bool) -> SysResult<()> {
        self.memory_handle()?
            .sync(at, len, durable)
            .map_err(|e| map_error(e, "msync"))
    }

    /// Pins the program's memory for a system call that touches it (see `vino_vm::HostPin`);
    /// `None` when it maps no file (nothing to check).
    pub fn pin_memory(&self) -> Option<HostPin> {
        self.memory.lock().as_ref()?.pin()
    }

    /// Counts of this process's program memory, if the kernel pages one for it.
    pub fn memory_stats(&self) -> Option<MemoryStats> {
        self.kernel()
            .memory
            .pager
            .get()
            .and_then(Option::as_ref)?
            .memory_of(self.pid())
    }

    /// Whether the process was ended for want of swap.
    pub fn ran_out_of_swap(&self) -> bool {
        self.out_of_swap.load(Ordering::SeqCst)
    }
}

fn map_error(e: MapError, call: &str) -> SysError {
    let (errno, why) = match e {
        MapError::Invalid => (
            Errno::Inval,
            "a range not page-aligned, outside memory, or over another mapping",
        ),
        MapError::TooMany => (Errno::NoMem, "too many mappings"),
        MapError::NotPaged => (Errno::NotSup, "program memory not paged by the kernel"),
        MapError::Io => (Errno::Io, "writing back a mapped page failed"),
    };
    SysError::new(errno, format!("{call}: {why}"))
}

/// A mapped file as the pager reads and writes it: through the page cache, as `pread` and
/// `pwrite` would, on behalf of the mapping's process. Holds a reference to the inode (an
/// unlinked file stays until its last mapping goes).
struct FileMap {
    kernel: Weak<Kernel>,
    ino: u64,
    pid: crate::Pid,
    backing: FileBacking,
}

fn gone() -> io::Error {
    io::Error::other("the kernel is gone")
}

impl MapSource for FileMap {
    fn read(&self, index: u64, buf: &mut [u8]) -> io::Result<usize> {
        let k = self.kernel.upgrade().ok_or_else(gone)?;
        k.cache
            .read(&IoCtx::new(self.pid), self.ino, &self.backing, index * PAGE as u64, buf)
    }

    fn write_page(&self, index: u64, page: &[u8], wait: bool) -> io::Result<()> {
        let k = self.kernel.upgrade().ok_or_else(gone)?;
        let offset = index * PAGE as u64;
        let written = {
            let _writer = match wait {
                true => k.files.write_lock(self.ino),
                false => k
                    .files
                    .try_write_lock(self.ino)
                    .ok_or_else(|| io::Error::from(io::ErrorKind::WouldBlock))?,
            };
            let size = k.fs.stat(self.ino).map_err(io::Error::other)?.size;
            if offset >= size {
                return Ok(());
            }
            let len = (size - offset).min(PAGE as u64) as usize;
            let mut target = CacheTarget {
                cache: &k.cache,
                ctx: IoCtx::new(self.pid),
                ino: self.ino,
                backing: &self.backing,
            };
            k.fs.write_with(self.ino, offset, &page[..len], &mut target)
                .map_err(io::Error::other)?
        };
        k.memory.file_changed(self.ino, offset, offset + written as u64);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let k = self.kernel.upgrade().ok_or_else(gone)?;
        k.cache.sync_object(self.ino)?;
        k.fs.fsync(self.ino).map_err(io::Error::other)
    }

    fn size(&self) -> u64 {
        self.kernel
            .upgrade()
            .and_then(|k| k.fs.stat(self.ino).ok())
            .map_or(0, |s| s.size)
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        if let Some(k) = self.kernel.upgrade() {
            k.files.mapping_released();
            let _ = k.release_ref(self.ino);
        }
    }
}
