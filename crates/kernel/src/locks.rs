//! Byte-range locks through processes (fcntl `F_GETLK`, `F_SETLK`, `F_SETLKW`) and the per-file
//! `lock.grant` graftpoint.
//!
//! Locks belong to processes and name files by inode, so two descriptors of one file share them,
//! and closing any descriptor of a file drops the process's locks on it (POSIX). The file's
//! `lock.grant` graftpoint is reachable from each opener as `lock.grant/<fd>`; only the file's
//! creator, or a privileged process, may graft it (Seltzer et al. 1995, 4.4: the application
//! that owns the data chooses how its lock queue is served).

use crate::Resource;
use crate::error::{Errno, SysError, SysResult};
use crate::files::Fd;
use crate::process::Process;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use vino_fs::Stat;
use vino_graft::{Access, GraftSlot, ManagedSlot, Runtime, SlotWrapper};
use vino_locks::{Lock, LockGrant, LockKind, LockManager, Range, Wait};

/// What an fcntl lock request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockType {
    Read,
    Write,
    Unlock,
}

/// An fcntl lock request: `len` bytes from `start`, 0 meaning to the end of any file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRequest {
    pub kind: LockType,
    pub start: u64,
    pub len: u64,
}

impl LockRequest {
    pub fn read(start: u64, len: u64) -> Self {
        LockRequest {
            kind: LockType::Read,
            start,
            len,
        }
    }

    pub fn write(start: u64, len: u64) -> Self {
        LockRequest {
            kind: LockType::Write,
            start,
            len,
        }
    }

    pub fn unlock(start: u64, len: u64) -> Self {
        LockRequest {
            kind: LockType::Unlock,
            start,
            len,
        }
    }

    fn range(&self) -> SysResult<Range> {
        Range::new(self.start, self.len).ok_or_else(|| {
            SysError::new(
                Errno::Inval,
                format!("lock range {}+{} overflows", self.start, self.len),
            )
        })
    }
}

/// The kernel's lock state: the manager, and the generation of each inode whose graftpoint it
/// keeps (a reused inode number must not inherit the old file's graft).
pub(crate) struct KernelLocks {
    pub(crate) manager: LockManager,
    generations: Mutex<HashMap<u64, u32>>,
}

impl KernelLocks {
    pub(crate) fn new(runtime: &Runtime) -> Self {
        KernelLocks {
            manager: LockManager::new(runtime),
            generations: Mutex::default(),
        }
    }

    /// The file's `lock.grant` slot, made afresh if the inode now holds another file.
    fn slot(&self, st: &Stat) -> Arc<GraftSlot<LockGrant>> {
        self.opened(st);
        self.manager.graftpoint(st.ino, Access::Process(st.creator))
    }

    /// A file is opened: a graft of an earlier file with its inode number is forgotten (its
    /// locks go through the default until the new file's creator grafts it).
    pub(crate) fn opened(&self, st: &Stat) {
        let mut generations = self.generations.lock();
        if generations
            .insert(st.ino, st.generation)
            .is_some_and(|g| g != st.generation)
        {
            self.manager.forget_graftpoint(st.ino);
        }
    }

    /// The file's `lock.grant` as process `pid` reaches it through a descriptor
    /// (`lock.grant/<fd>`): a privileged process that did not create the file may graft it as
    /// if it had.
    pub(crate) fn descriptor_slot(&self, st: &Stat, pid: u64, privileged: bool) -> Arc<dyn ManagedSlot> {
        let slot: Arc<dyn ManagedSlot> = self.slot(st);
        if privileged && st.creator != pid {
            Arc::new(Privileged { slot, pid })
        } else {
            slot
        }
    }
}

impl Process {
    /// `fcntl(F_SETLK)` (`wait == false`: `EAGAIN` if a conflicting lock is held) or
    /// `fcntl(F_SETLKW)` (waits; `EDEADLK` if waiting would deadlock, `EINTR` if the wait is
    /// cancelled because the process exits). A read lock needs a descriptor open for reading, a
    /// write lock one open for writing (`EBADF`). Each lock record held, and two for a wait, is
    /// charged to this process's account (`ENOLCK` past `lock_records_per_user`), and so is each
    /// blocking wait (`ENOLCK` past `lock_waits_per_user`).
    pub fn lock(&self, fd: Fd, req: LockRequest, wait: bool) -> SysResult<()> {
        self.lock_for(fd, self.pid(), req, wait)
    }

    /// As [`Process::lock`], for lock owner `owner` instead of this process: the mount serves
    /// many Linux processes (and open files, for `flock`) through one kernel process, and names
    /// each lock's owner itself. Owners that are not process ids must not collide with them
    /// (the mount's are Linux kernel addresses).
    pub fn lock_for(&self, fd: Fd, owner: u64, req: LockRequest, wait: bool) -> SysResult<()> {
        let file = self.file(fd)?;
        let range = req.range()?;
        let manager = &self.kernel().locks.manager;
        let kind = match req.kind {
            LockType::Unlock => return Ok(manager.unlock(file.ino, owner, range)?),
            LockType::Read if !file.flags.read => {
                return Err(SysError::new(
                    Errno::BadF,
                    format!("descriptor {fd} is not open for reading"),
                ));
            }
            LockType::Write if !file.flags.write => {
                return Err(SysError::new(
                    Errno::BadF,
                    format!("descriptor {fd} is not open for writing"),
                ));
            }
            LockType::Read => LockKind::Read,
            LockType::Write => LockKind::Write,
        };
        if !wait {
            return Ok(manager.lock_charged(file.ino, owner, self.account(), kind, range, Wait::No)?);
        }
        // A blocking wait holds the caller's thread (a connection's, one of the mount's) until
        // it ends: each is charged, so one user's waits cannot take every thread (`ENOLCK`).
        let _waiting = self.account().charge(Resource::LockWaits, 1)?;
        Ok(manager.lock_charged(file.ino, owner, self.account(), kind, range, Wait::Forever)?)
    }

    /// `fcntl(F_GETLK)`: a lock of another process that would block `req`, or `None` (also for an
    /// unlock request).
    pub fn getlk(&self, fd: Fd, req: LockRequest) -> SysResult<Option<Lock>> {
        self.getlk_for(fd, self.pid(), req)
    }

    /// As [`Process::getlk`], for lock owner `owner` (see [`Process::lock_for`]).
    pub fn getlk_for(&self, fd: Fd, owner: u64, req: LockRequest) -> SysResult<Option<Lock>> {
        let file = self.file(fd)?;
        let range = req.range()?;
        let kind = match req.kind {
            LockType::Unlock => return Ok(None),
            LockType::Read => LockKind::Read,
            LockType::Write => LockKind::Write,
        };
        Ok(self.kernel().locks.manager.get_lock(file.ino, owner, kind, range))
    }

    /// The `lock.grant` graftpoint of an open file, for kernel-side code (experiments bind native
    /// policies to it; processes use the graft calls on `lock.grant/<fd>`).
    pub fn lock_grant(&self, fd: Fd) -> SysResult<Arc<GraftSlot<LockGrant>>> {
        let st = self.fstat(fd)?;
        Ok(self.kernel().locks.slot(&st))
    }

    /// Open hook: the file's `lock.grant` (reached as `lock.grant/<fd>`, see
    /// [`crate::fd_points`]) is not an earlier file's with the same inode number.
    pub(crate) fn locks_opened(&self, st: &Stat) {
        self.kernel().locks.opened(st);
    }

    /// Close hook: drops this process's locks on the file.
    pub(crate) fn locks_closed(&self, ino: u64) {
        self.kernel().locks.manager.release_object(ino, self.pid());
    }

    /// Exit hook: drops every lock of this process and cancels its waits.
    pub(crate) fn locks_released(&self) {
        self.kernel().locks.manager.release_owner(self.pid());
    }
}

/// A file's `lock.grant` seen by a privileged process that did not create the file: it may graft
/// it as if it were the creator.
struct Privileged {
    slot: Arc<dyn ManagedSlot>,
    pid: u64,
}

impl SlotWrapper for Privileged {
    fn inner(&self) -> &dyn ManagedSlot {
        &*self.slot
    }
    fn access(&self) -> Access {
        Access::Process(self.pid)
    }
}
