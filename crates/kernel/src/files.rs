//! Open files: descriptors, flags, the per-open-file read-ahead state, and the kernel-wide table
//! of references to inodes (open files and the mount's nodes), so that a file unlinked while
//! referenced lives, nameless, until its last reference goes.

use crate::cache_io::FileBacking;
use crate::error::{Errno, SysError, SysResult};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use vino_cache::ReadAhead;
use vino_fs::FileType;

/// A file descriptor.
pub type Fd = u32;

/// How a file is opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenFlags {
    pub read: bool,
    pub write: bool,
    pub create: bool,
    /// With `create`: fail if the file exists.
    pub exclusive: bool,
    pub truncate: bool,
    pub append: bool,
    /// Fail with `ELOOP` if the last component is a symbolic link (`O_NOFOLLOW`).
    pub nofollow: bool,
    /// Fail with `ENOTDIR` unless it is a directory (`O_DIRECTORY`); a directory opened this way
    /// (read-only) serves as the starting point of `*at` calls and for reading entries.
    pub directory: bool,
    /// Permission bits of a file this open creates.
    pub mode: u16,
}

impl OpenFlags {
    pub fn read_only() -> Self {
        OpenFlags {
            read: true,
            ..Default::default()
        }
    }

    pub fn read_write() -> Self {
        OpenFlags {
            read: true,
            write: true,
            ..Default::default()
        }
    }

    /// Create (or truncate) for writing and reading, mode 0644.
    pub fn create() -> Self {
        OpenFlags {
            read: true,
            write: true,
            create: true,
            truncate: true,
            mode: 0o644,
            ..Default::default()
        }
    }

    /// A directory, for reading its entries and as the start of `*at` calls.
    pub fn directory() -> Self {
        OpenFlags {
            read: true,
            directory: true,
            ..Default::default()
        }
    }
}

/// One open file.
pub struct OpenFile {
    pub ino: u64,
    /// The inode's generation when opened: a directory removed while open is freed, and a
    /// descriptor of it must not reach another file that reuses the number.
    pub generation: u32,
    pub kind: FileType,
    pub flags: OpenFlags,
    pub offset: Mutex<u64>,
    pub ra: ReadAhead,
    pub backing: FileBacking,
    /// The descriptor, charged to its process's account until it closes.
    pub(crate) _charge: vino_graft::account::Charge,
}

/// Kernel-wide references to inodes: every open file and every node the mount holds counts one.
/// A non-directory whose last name goes while it is referenced is *parked*: the file system
/// keeps it on its orphan list, and the last reference frees it.
pub struct FileTable {
    refs: Mutex<Refs>,
    /// Writers to one file are serialised (the file system's size update is not atomic with
    /// the data write); striped by inode through a hash keyed at boot. A writer holds its
    /// stripe for as long as its write takes (a truncation of a big file, a tenth of a second
    /// per GiB freed): with many stripes and a key nobody knows, a user cannot pick a file of
    /// its own that shares a stripe with another user's, and a chance collision is rare.
    write_locks: Box<[Mutex<()>]>,
    stripe_key: std::hash::RandomState,
}

/// Stripes of [`FileTable`]'s write locks (a byte each).
const WRITE_STRIPES: usize = 4096;

#[derive(Default)]
struct Refs {
    count: HashMap<u64, usize>,
    parked: HashSet<u64>,
    /// References the mount holds ([`crate::Kernel::hold_inode`]): the rest are descriptors'
    /// (and, during a system call, the call's own).
    mount_holds: usize,
    /// References programs' file mappings hold (`Process::mmap`).
    map_holds: usize,
}

/// A copy of the reference table, for the invariant check.
pub(crate) struct RefsView {
    pub count: HashMap<u64, usize>,
    pub parked: HashSet<u64>,
    pub mount_holds: usize,
    pub map_holds: usize,
}

impl Default for FileTable {
    fn default() -> Self {
        FileTable {
            refs: Mutex::default(),
            write_locks: (0..WRITE_STRIPES).map(|_| Mutex::new(())).collect(),
            stripe_key: std::hash::RandomState::new(),
        }
    }
}

impl FileTable {
    /// Counts one more reference to `ino`. The caller holds the namespace lock (read), so the
    /// inode cannot lose its last name and be freed while it is being taken.
    pub fn take(&self, ino: u64) {
        *self.refs.lock().count.entry(ino).or_default() += 1;
    }

    /// [`FileTable::take`] for the mount's node of `ino`.
    pub fn take_for_mount(&self, ino: u64) {
        let mut refs = self.refs.lock();
        *refs.count.entry(ino).or_default() += 1;
        refs.mount_holds += 1;
    }

    /// [`FileTable::take`] for a program's mapping of `ino`.
    pub fn take_for_mapping(&self, ino: u64) {
        let mut refs = self.refs.lock();
        *refs.count.entry(ino).or_default() += 1;
        refs.map_holds += 1;
    }

    /// Counts a mapping's reference as given back, before [`FileTable::drop_ref`] drops it.
    pub fn mapping_released(&self) {
        let mut refs = self.refs.lock();
        debug_assert!(refs.map_holds > 0, "a mapping gave back a reference it never took");
        refs.map_holds = refs.map_holds.saturating_sub(1);
    }

    /// Counts a mount's reference as given back, before [`FileTable::drop_ref`] drops it.
    pub fn mount_released(&self) {
        let mut refs = self.refs.lock();
        // Only the invariant check reads this count: a miscount is its to report.
        debug_assert!(refs.mount_holds > 0, "the mount gave back a reference it never took");
        refs.mount_holds = refs.mount_holds.saturating_sub(1);
    }

    /// Drops one reference; true if it was the last of a parked file, which the caller frees.
    #[must_use]
    pub fn drop_ref(&self, ino: u64) -> bool {
        let mut refs = self.refs.lock();
        let n = refs
            .count
            .get_mut(&ino)
            .expect("dropping a reference that was never taken");
        // A count reaches 0 only here, where the entry goes: a zero left behind would be a
        // reference dropped twice.
        assert!(*n > 0, "inode {ino}: a reference count of 0 in the table");
        *n -= 1;
        if *n > 0 {
            return false;
        }
        refs.count.remove(&ino);
        refs.parked.remove(&ino)
    }

    /// Marks `ino`, about to lose its last name, as parked if anything references it; true if
    /// it did (the caller then keeps the inode instead of freeing it). Called under the
    /// namespace lock (write).
    pub fn park_if_referenced(&self, ino: u64) -> bool {
        let mut refs = self.refs.lock();
        if refs.count.get(&ino).is_some_and(|&n| n > 0) {
            refs.parked.insert(ino);
            true
        } else {
            false
        }
    }

    /// Takes back a mark of [`FileTable::park_if_referenced`] whose removal failed.
    pub fn unpark(&self, ino: u64) {
        self.refs.lock().parked.remove(&ino);
    }

    /// Inodes referenced now.
    pub fn referenced(&self) -> usize {
        self.refs.lock().count.len()
    }

    /// Parked inodes (nameless, waiting for their last reference), sorted.
    pub fn parked(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.refs.lock().parked.iter().copied().collect();
        v.sort_unstable();
        v
    }

    /// The whole table at one instant, for the invariant check.
    pub(crate) fn view(&self) -> RefsView {
        let refs = self.refs.lock();
        RefsView {
            count: refs.count.clone(),
            parked: refs.parked.clone(),
            mount_holds: refs.mount_holds,
            map_holds: refs.map_holds,
        }
    }

    /// References to `ino` now, and whether it is parked.
    pub(crate) fn refs_of(&self, ino: u64) -> (usize, bool) {
        let refs = self.refs.lock();
        (refs.count.get(&ino).copied().unwrap_or(0), refs.parked.contains(&ino))
    }

    /// Breaks the table on purpose, for the invariant check's tests: `by` references more or
    /// fewer (an entry may reach 0), `park` marks or unmarks the inode parked.
    #[cfg(any(test, feature = "internals"))]
    pub(crate) fn corrupt(&self, ino: u64, by: isize, park: Option<bool>) {
        let mut refs = self.refs.lock();
        let n = refs.count.entry(ino).or_default();
        *n = n.saturating_add_signed(by);
        match park {
            Some(true) => refs.parked.insert(ino),
            Some(false) => refs.parked.remove(&ino),
            None => false,
        };
    }

    pub fn write_lock(&self, ino: u64) -> parking_lot::MutexGuard<'_, ()> {
        self.write_stripe(ino).lock()
    }

    /// [`FileTable::write_lock`] if no one holds it now.
    pub fn try_write_lock(&self, ino: u64) -> Option<parking_lot::MutexGuard<'_, ()>> {
        self.write_stripe(ino).try_lock()
    }

    fn write_stripe(&self, ino: u64) -> &Mutex<()> {
        use std::hash::BuildHasher;
        &self.write_locks[self.stripe_key.hash_one(ino) as usize % WRITE_STRIPES]
    }
}

/// A process's descriptors.
#[derive(Default)]
pub struct FdTable {
    files: HashMap<Fd, Arc<OpenFile>>,
    /// Descriptors per inode: which files the process holds open, asked on each event it may
    /// hear (bounded by its descriptors).
    open: HashMap<u64, u32>,
    /// Set when the process's exit took every descriptor: an open that finishes after that
    /// must not install one that nobody would ever close.
    closed: bool,
}

impl FdTable {
    /// The lowest free descriptor, as POSIX asks.
    pub fn insert(&mut self, file: Arc<OpenFile>) -> Fd {
        let fd = (0..)
            .find(|fd| !self.files.contains_key(fd))
            .expect("a free descriptor");
        *self.open.entry(file.ino).or_default() += 1;
        self.files.insert(fd, file);
        fd
    }

    /// True once the process's exit has taken its descriptors.
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// True if some descriptor of the process is open on `ino`.
    pub fn holds(&self, ino: u64) -> bool {
        self.open.contains_key(&ino)
    }

    fn forget(&mut self, ino: u64) {
        // A descriptor counted nowhere would leave the events' view of what this process holds
        // wrong from here on.
        debug_assert!(
            self.open.contains_key(&ino),
            "a descriptor of inode {ino} was never counted"
        );
        if let Some(n) = self.open.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                self.open.remove(&ino);
            }
        }
    }

    pub fn get(&self, fd: Fd) -> SysResult<Arc<OpenFile>> {
        self.files
            .get(&fd)
            .cloned()
            .ok_or_else(|| SysError::new(Errno::BadF, format!("bad file descriptor {fd}")))
    }

    pub fn remove(&mut self, fd: Fd) -> SysResult<Arc<OpenFile>> {
        let file = self
            .files
            .remove(&fd)
            .ok_or_else(|| SysError::new(Errno::BadF, format!("bad file descriptor {fd}")))?;
        self.forget(file.ino);
        Ok(file)
    }

    pub fn drain(&mut self) -> Vec<(Fd, Arc<OpenFile>)> {
        self.closed = true;
        self.open.clear();
        self.files.drain().collect()
    }

    pub fn fds(&self) -> Vec<Fd> {
        let mut v: Vec<Fd> = self.files.keys().copied().collect();
        v.sort();
        v
    }

    /// Every descriptor and its open file, for the invariant check.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (Fd, &Arc<OpenFile>)> {
        self.files.iter().map(|(&fd, f)| (fd, f))
    }

    /// Descriptors per inode as kept (see [`FdTable::holds`]), for the invariant check.
    pub(crate) fn per_inode(&self) -> &HashMap<u64, u32> {
        &self.open
    }

    /// Counts one more descriptor on `ino` than the table holds, for the check's tests.
    #[cfg(any(test, feature = "internals"))]
    pub(crate) fn corrupt_count(&mut self, ino: u64) {
        *self.open.entry(ino).or_default() += 1;
    }
}
