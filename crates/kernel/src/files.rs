//! Open files: descriptors, flags, the per-open-file read-ahead state, and the kernel-wide table
//! of how often each file is open (so that a file unlinked while open lives until its last close).

use crate::cache_io::FileBacking;
use crate::error::{Errno, SysError, SysResult};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use vino_cache::ReadAhead;
use vino_fs::{FileSystem, NewFile};

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
}

/// One open file.
pub struct OpenFile {
    pub ino: u64,
    pub flags: OpenFlags,
    pub offset: Mutex<u64>,
    pub ra: ReadAhead,
    pub backing: FileBacking,
}

/// Where files unlinked while open wait for their last close.
pub const ORPHANS: &str = "/.vino-orphans";

/// Kernel-wide state of open files.
pub struct FileTable {
    open: Mutex<HashMap<u64, usize>>,
    orphans: Mutex<HashMap<u64, String>>,
    /// Writers to one file are serialised (the file system's size update is not atomic with
    /// the data write); striped by inode.
    write_locks: [Mutex<()>; 64],
}

impl Default for FileTable {
    fn default() -> Self {
        FileTable {
            open: Mutex::default(),
            orphans: Mutex::default(),
            write_locks: std::array::from_fn(|_| Mutex::new(())),
        }
    }
}

impl FileTable {
    /// Counts one more open of `ino` (an open being set up holds it; see `Process::open`).
    pub fn opened(&self, ino: u64) {
        *self.open.lock().entry(ino).or_default() += 1;
    }

    pub fn is_open(&self, ino: u64) -> bool {
        self.open.lock().get(&ino).is_some_and(|&n| n > 0)
    }

    /// Drops one open of `ino`; at the last close of an orphan, returns the path it waits at,
    /// for the caller to remove for good.
    pub fn closed(&self, ino: u64) -> Option<String> {
        let mut open = self.open.lock();
        let n = open.get_mut(&ino).expect("closing a file that is not open");
        *n -= 1;
        if *n > 0 {
            return None;
        }
        open.remove(&ino);
        drop(open);
        self.orphans.lock().remove(&ino)
    }

    /// Moves an open file out of the namespace instead of freeing it (POSIX: an unlinked file
    /// lives on while it is open). The last close may come while it moves (after the caller
    /// saw the file open), and then finds nothing to free: this returns where the file waits,
    /// for the caller to free it at once.
    pub fn orphan(&self, fs: &FileSystem, ino: u64, dir: u64, name: &[u8]) -> SysResult<Option<String>> {
        let orphans = match fs.resolve(ORPHANS) {
            Ok(d) => d,
            Err(_) => fs.mkdir_path(
                ORPHANS,
                &NewFile {
                    mode: 0o700,
                    ..NewFile::by(0)
                },
            )?,
        };
        let parked = format!("{ORPHANS}/{ino}");
        fs.rename(dir, name, orphans, ino.to_string())?;
        self.orphans.lock().insert(ino, parked);
        if self.is_open(ino) {
            // Its last close will find it.
            return Ok(None);
        }
        // Closed meanwhile: whichever of this and `closed` takes it out of the table frees it.
        Ok(self.orphans.lock().remove(&ino))
    }

    /// Removes orphans left by a crash (nothing can have them open after a reboot).
    pub fn clear_orphans(&self, fs: &FileSystem) -> SysResult<()> {
        let Ok(dir) = fs.resolve(ORPHANS) else { return Ok(()) };
        for e in fs.readdir(dir)? {
            if e.name != b"." && e.name != b".." {
                fs.unlink(dir, &e.name)?;
            }
        }
        Ok(())
    }

    pub fn write_lock(&self, ino: u64) -> parking_lot::MutexGuard<'_, ()> {
        self.write_locks[(ino % 64) as usize].lock()
    }
}

/// A process's descriptors.
#[derive(Default)]
pub struct FdTable {
    files: HashMap<Fd, Arc<OpenFile>>,
}

impl FdTable {
    /// The lowest free descriptor, as POSIX asks.
    pub fn insert(&mut self, file: Arc<OpenFile>) -> Fd {
        let fd = (0..)
            .find(|fd| !self.files.contains_key(fd))
            .expect("a free descriptor");
        self.files.insert(fd, file);
        fd
    }

    pub fn get(&self, fd: Fd) -> SysResult<Arc<OpenFile>> {
        self.files
            .get(&fd)
            .cloned()
            .ok_or_else(|| SysError::new(Errno::BadF, format!("bad file descriptor {fd}")))
    }

    pub fn remove(&mut self, fd: Fd) -> SysResult<Arc<OpenFile>> {
        self.files
            .remove(&fd)
            .ok_or_else(|| SysError::new(Errno::BadF, format!("bad file descriptor {fd}")))
    }

    pub fn drain(&mut self) -> Vec<(Fd, Arc<OpenFile>)> {
        self.files.drain().collect()
    }

    pub fn fds(&self) -> Vec<Fd> {
        let mut v: Vec<Fd> = self.files.keys().copied().collect();
        v.sort();
        v
    }
}
