//! System calls on attributes: setattr in all its forms (chmod, chown, truncate, utimes), access,
//! extended attributes, fallocate, statfs and a path's fsync. The rules are POSIX's and Linux's:
//! the owner (or a privileged process) changes modes and sets explicit times, only a privileged
//! process gives a file away, anyone who may write may truncate a file or touch its times; a
//! chown drops set-ID bits, a chmod by a non-member drops set-group-ID.

use crate::error::{Errno, SysError, SysResult};
use crate::files::Fd;
use crate::namei::{At, Found};
use crate::perm::{self, READ, WRITE};
use crate::process::Process;
use parking_lot::RwLockReadGuard;
use vino_fs::{FileType, FsStats, SetAttr, Stat, XattrSet};

/// A timestamp to set, as `utimensat` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetTime {
    /// Leave it as it is.
    #[default]
    Omit,
    /// The current time.
    Now,
    /// Nanoseconds since the Unix epoch.
    At(u64),
}

/// Attributes to change in one setattr; `None` (or [`SetTime::Omit`]) leaves one as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attrs {
    /// Permission bits, `0o7777` at most.
    pub mode: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: SetTime,
    pub mtime: SetTime,
}

impl Attrs {
    /// The changes asked for, as a `dir.access` graft sees them.
    fn access_bits(&self) -> i32 {
        use crate::dir_grafts::*;
        let bit = |on: bool, b: i32| if on { b } else { 0 };
        bit(self.mode.is_some(), SETATTR_MODE)
            | bit(self.uid.is_some() || self.gid.is_some(), SETATTR_OWNER)
            | bit(self.size.is_some(), SETATTR_SIZE)
            | bit(
                self.atime != SetTime::Omit || self.mtime != SetTime::Omit,
                SETATTR_TIMES,
            )
    }
}

/// What a fallocate does: one of the modes of Linux's fallocate(2) that VINO has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallocMode {
    /// Mode 0, or `FALLOC_FL_KEEP_SIZE`: the range's blocks are allocated (zeros where it had
    /// none); the size grows to cover it unless `keep_size`.
    Allocate { keep_size: bool },
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`: the blocks wholly inside the range are
    /// freed, the bytes of the partial ones at its edges become zeros; the size stays.
    PunchHole,
    /// `FALLOC_FL_ZERO_RANGE` (with `FALLOC_FL_KEEP_SIZE`: `keep_size`): the range reads as
    /// zeros and holds blocks, as after `Allocate`; the size grows to cover it unless
    /// `keep_size`.
    ZeroRange { keep_size: bool },
}

impl FallocMode {
    pub const KEEP_SIZE: u32 = 0x01;
    pub const PUNCH_HOLE: u32 = 0x02;
    pub const COLLAPSE_RANGE: u32 = 0x08;
    pub const ZERO_RANGE: u32 = 0x10;
    pub const INSERT_RANGE: u32 = 0x20;

    /// The mode of Linux's flag `bits`, refused as Linux refuses: `EINVAL` for a collapse or
    /// an insert with another flag, `EOPNOTSUPP` for a punch without `KEEP_SIZE`, a punch with
    /// a zero, and every mode VINO lacks (collapse, insert, unshare, unknown flags).
    pub fn from_linux(bits: u32) -> SysResult<FallocMode> {
        let keep_size = bits & Self::KEEP_SIZE != 0;
        for alone in [Self::COLLAPSE_RANGE, Self::INSERT_RANGE] {
            if bits & alone != 0 && bits != alone {
                return Err(err(Errno::Inval, format!("fallocate mode {bits:#x}")));
            }
        }
        match bits & !Self::KEEP_SIZE {
            0 => Ok(FallocMode::Allocate { keep_size }),
            Self::PUNCH_HOLE if keep_size => Ok(FallocMode::PunchHole),
            Self::ZERO_RANGE => Ok(FallocMode::ZeroRange { keep_size }),
            _ => Err(err(Errno::NotSup, format!("fallocate mode {bits:#x}"))),
        }
    }

    /// The mode as Linux's flag bits.
    pub fn linux_bits(self) -> u32 {
        let keep = |k: bool| if k { Self::KEEP_SIZE } else { 0 };
        match self {
            FallocMode::Allocate { keep_size } => keep(keep_size),
            FallocMode::PunchHole => Self::PUNCH_HOLE | Self::KEEP_SIZE,
            FallocMode::ZeroRange { keep_size } => Self::ZERO_RANGE | keep(keep_size),
        }
    }
}

/// Extended attribute values are at most this long (Linux's `XATTR_SIZE_MAX`).
pub const XATTR_SIZE_MAX: usize = 65536;
/// Names are at most this long (`XATTR_NAME_MAX`).
pub const XATTR_NAME_MAX: usize = 255;

impl SetTime {
    fn resolve(self, now: u64) -> Option<u64> {
        match self {
            SetTime::Omit => None,
            SetTime::Now => Some(now),
            SetTime::At(t) => Some(t),
        }
    }
}

fn err(errno: Errno, what: impl Into<String>) -> SysError {
    SysError::new(errno, what)
}

impl Process {
    /// Changes the attributes of the file at `path` (a trailing symbolic link followed if
    /// `follow`).
    pub fn setattr_at(&self, at: At, path: impl AsRef<[u8]>, follow: bool, attrs: &Attrs) -> SysResult<Stat> {
        let ns = self.kernel().ns.read();
        let f = self.walk_placed(at, path.as_ref(), follow)?;
        self.apply_found(ns, &f, attrs, false)
    }

    /// Changes the attributes of the file open as `fd`: a size change needs the descriptor open
    /// for writing (`EINVAL`, as Linux's ftruncate), not write permission on the file.
    pub fn fsetattr(&self, fd: Fd, attrs: &Attrs) -> SysResult<Stat> {
        let file = self.file(fd)?;
        if attrs.size.is_some() && !file.flags.write {
            return Err(err(Errno::Inval, format!("descriptor {fd} is not open for writing")));
        }
        let ns = self.kernel().ns.read();
        let f = self.walk(At::Fd(fd), b"", false)?;
        self.apply_found(ns, &f, attrs, true)
    }

    /// Applies `attrs` to `f`, found under `ns`. A truncation frees blocks for as long as the
    /// file is big (a 2 GiB file took 130 ms), and every other user's rename, link and unlink
    /// waited for it: a size change of a regular file runs with a reference to the file
    /// instead of the namespace lock (held, the file outlives a concurrent unlink, parked, as an
    /// open file does). Anything else keeps the lock: it is quick, and a directory goes at its
    /// rmdir whatever references it (its number could then name another file).
    fn apply_found(&self, ns: RwLockReadGuard<'_, ()>, f: &Found, attrs: &Attrs, writable_fd: bool) -> SysResult<Stat> {
        if attrs.size.is_none() || f.stat.kind != FileType::Regular {
            return self.apply_attrs(f, attrs, writable_fd);
        }
        let held = self.hold(f.ino);
        // Before the reference goes: dropping the last one takes the lock again.
        drop(ns);
        let done = self.apply_attrs(f, attrs, writable_fd);
        drop(held);
        done
    }

    /// One setattr, checked as Linux checks it: each requested change needs its own right.
    fn apply_attrs(&self, f: &Found, a: &Attrs, writable_fd: bool) -> SysResult<Stat> {
        let cred = self.credentials();
        let st = &f.stat;
        let mut set = SetAttr::default();
        if a.uid.is_some() || a.gid.is_some() {
            if !perm::may_chown(cred, st, a.uid, a.gid) {
                return Err(err(Errno::Perm, "may not change the owner or group"));
            }
            set.uid = a.uid;
            set.gid = a.gid;
            set.mode = perm::after_chown(st);
            // As Linux with CAP_SYS_RESOURCE: root may give a user a file past its quota.
            set.ignore_quota = cred.privileged;
        }
        if let Some(mode) = a.mode {
            if !cred.owns(st) {
                return Err(err(Errno::Perm, "only the owner may change the mode"));
            }
            let mut after = st.clone();
            after.gid = a.gid.unwrap_or(st.gid);
            set.mode = Some(perm::chmod_mode(cred, &after, mode));
        }
        if let Some(size) = a.size {
            match st.kind {
                FileType::Directory => return Err(err(Errno::IsDir, "cannot truncate a directory")),
                FileType::Regular => {}
                _ => return Err(err(Errno::Inval, "only a regular file has a size to set")),
            }
            if !writable_fd && !perm::may(cred, st, WRITE) {
                return Err(err(Errno::Acces, "no write permission"));
            }
            if size > vino_fs::MAX_FILE_SIZE {
                return Err(err(Errno::FBig, format!("size {size} is past the largest file")));
            }
        }
        let explicit = matches!(a.atime, SetTime::At(_)) || matches!(a.mtime, SetTime::At(_));
        let touch = a.atime != SetTime::Omit || a.mtime != SetTime::Omit;
        if touch && !cred.owns(st) {
            if explicit {
                return Err(err(Errno::Perm, "only the owner may set explicit times"));
            }
            if !perm::may(cred, st, WRITE) {
                return Err(err(Errno::Acces, "no write permission to touch the file"));
            }
        }
        self.found_allows(f, crate::AccessOp::SetAttr, a.access_bits())?;
        let now = self.kernel().clock.wall_ns();
        set.atime_ns = a.atime.resolve(now);
        set.mtime_ns = a.mtime.resolve(now);
        if let Some(size) = a.size {
            let _writer = self.kernel().files.write_lock(f.ino);
            self.resize(f.ino, size)?;
            if set.mode.is_none() {
                set.mode = perm::after_write(cred, st);
            }
            set.mtime_ns = set.mtime_ns.or(Some(now));
        }
        // Always a setattr: even an empty one marks the change time, as chown(-1, -1) does.
        let st = self.kernel().fs().set_attr(f.ino, &set)?;
        if self.kernel().changes.wanted() {
            self.kernel()
                .changes
                .tell(self.pid(), &[crate::Change::Attr { ino: f.ino }]);
        }
        Ok(st)
    }

    /// Checks `want` (a mask of 4 read, 2 write, 1 execute; 0: the file exists) on `path`.
    pub fn access_at(&self, at: At, path: impl AsRef<[u8]>, want: u32, follow: bool) -> SysResult<()> {
        if want > 7 {
            return Err(err(
                Errno::Inval,
                format!("access mask {want} has bits besides read, write and execute"),
            ));
        }
        let _ns = self.kernel().ns.read();
        let f = self.walk(at, path.as_ref(), follow)?;
        if perm::may(self.credentials(), &f.stat, want) {
            Ok(())
        } else {
            Err(err(Errno::Acces, "permission denied"))
        }
    }

    /// Checks that extended attribute `name` may be used on `f` (`user.` names on regular files
    /// and directories; others are not supported), with `want` permission on the file.
    fn xattr_checks(&self, f: &Found, name: &[u8], want: u32) -> SysResult<()> {
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return Err(err(Errno::Range, format!("attribute name of {} bytes", name.len())));
        }
        if !name.starts_with(b"user.") || name.len() == 5 {
            return Err(err(Errno::NotSup, "only `user.` extended attributes are supported"));
        }
        if !matches!(f.stat.kind, FileType::Regular | FileType::Directory) {
            return Err(err(
                Errno::Perm,
                "`user.` attributes are for regular files and directories",
            ));
        }
        if !perm::may(self.credentials(), &f.stat, want) {
            return Err(err(Errno::Acces, "permission denied"));
        }
        if want == WRITE {
            self.found_allows(f, crate::AccessOp::SetAttr, crate::dir_grafts::SETATTR_XATTR)?;
        }
        Ok(())
    }

    /// The value of extended attribute `name` (`ENODATA` if it has none).
    pub fn getxattr_at(&self, at: At, path: impl AsRef<[u8]>, follow: bool, name: &[u8]) -> SysResult<Vec<u8>> {
        let _ns = self.kernel().ns.read();
        let f = self.walk(at, path.as_ref(), follow)?;
        self.xattr_checks(&f, name, READ)?;
        Ok(self.kernel().fs().get_xattr(f.ino, name)?)
    }

    /// Sets extended attribute `name`; `how` as `XATTR_CREATE` / `XATTR_REPLACE` ask.
    pub fn setxattr_at(
        &self,
        at: At,
        path: impl AsRef<[u8]>,
        follow: bool,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> SysResult<()> {
        if value.len() > XATTR_SIZE_MAX {
            return Err(err(Errno::Range, format!("attribute value of {} bytes", value.len())));
        }
        let _ns = self.kernel().ns.read();
        let f = self.walk_placed(at, path.as_ref(), follow)?;
        self.xattr_checks(&f, name, WRITE)?;
        self.kernel().fs().set_xattr(f.ino, name, value, how)?;
        self.tell_attr(f.ino);
        Ok(())
    }

    /// The names of the file's extended attributes.
    pub fn listxattr_at(&self, at: At, path: impl AsRef<[u8]>, follow: bool) -> SysResult<Vec<Vec<u8>>> {
        let _ns = self.kernel().ns.read();
        let f = self.walk(at, path.as_ref(), follow)?;
        Ok(self.kernel().fs().list_xattr(f.ino)?)
    }

    pub fn removexattr_at(&self, at: At, path: impl AsRef<[u8]>, follow: bool, name: &[u8]) -> SysResult<()> {
        let _ns = self.kernel().ns.read();
        let f = self.walk_placed(at, path.as_ref(), follow)?;
        self.xattr_checks(&f, name, WRITE)?;
        self.kernel().fs().remove_xattr(f.ino, name)?;
        self.tell_attr(f.ino);
        Ok(())
    }

    fn tell_attr(&self, ino: u64) {
        if self.kernel().changes.wanted() {
            self.kernel().changes.tell(self.pid(), &[crate::Change::Attr { ino }]);
        }
    }

    /// Allocates the blocks of `len` bytes from `offset` in the file open as `fd` (for
    /// writing), so that writes there cannot fail for want of space; the size grows to cover
    /// them unless `keep_size` (`FALLOC_FL_KEEP_SIZE`). [`Process::fallocate_mode`] does the
    /// other modes.
    pub fn fallocate(&self, fd: Fd, keep_size: bool, offset: u64, len: u64) -> SysResult<()> {
        self.fallocate_mode(fd, FallocMode::Allocate { keep_size }, offset, len)
    }

    /// fallocate(2) in `mode` on `len` bytes from `offset` of the file open as `fd` (for
    /// writing). A punched hole or a zeroed range is a write: an unprivileged writer drops the
    /// file's set-ID bits, and a modify event is raised.
    pub fn fallocate_mode(&self, fd: Fd, mode: FallocMode, offset: u64, len: u64) -> SysResult<()> {
        let file = self.file(fd)?;
        if !file.flags.write {
            return Err(err(Errno::BadF, format!("descriptor {fd} is not open for writing")));
        }
        match file.kind {
            FileType::Regular => {}
            FileType::Directory => return Err(err(Errno::IsDir, "cannot allocate in a directory")),
            _ => return Err(err(Errno::Inval, "only a regular file has blocks to allocate")),
        }
        if len == 0 {
            return Err(err(Errno::Inval, "fallocate of 0 bytes"));
        }
        if offset.checked_add(len).is_none_or(|end| end > vino_fs::MAX_FILE_SIZE) {
            return Err(err(Errno::FBig, "past the largest file"));
        }
        let _writer = self.kernel().files.write_lock(file.ino);
        self.fallocate_cached(file.ino, mode, offset, len)?;
        if matches!(mode, FallocMode::Allocate { .. }) {
            self.tell_attr(file.ino);
            return Ok(());
        }
        self.after_change(file.ino, false)?;
        self.kernel().events.modified(self, file.ino);
        Ok(())
    }

    // ---- the path calls, as wrappers ---------------------------------------------------------

    /// Checks `want` (a mask of 4 read, 2 write, 1 execute; 0: the file exists) on `path`.
    pub fn access(&self, path: &str, want: u32) -> SysResult<()> {
        self.access_at(At::Root, path, want, true)
    }

    /// Sets the permission bits (`0o7777` at most). The owner or a privileged process only.
    pub fn chmod(&self, path: &str, mode: u16) -> SysResult<Stat> {
        let attrs = Attrs {
            mode: Some(mode),
            ..Attrs::default()
        };
        self.setattr_at(At::Root, path, true, &attrs)
    }

    /// Changes the owner or group. A privileged process may do anything; an owner may only set
    /// the group to one of its own.
    pub fn chown(&self, path: &str, uid: Option<u32>, gid: Option<u32>) -> SysResult<Stat> {
        let attrs = Attrs {
            uid,
            gid,
            ..Attrs::default()
        };
        self.setattr_at(At::Root, path, true, &attrs)
    }

    /// Sets the access and modification times. Explicit times need the owner (or privilege);
    /// setting both to now needs only write permission, as `touch` does.
    pub fn utimes(&self, path: &str, atime: SetTime, mtime: SetTime) -> SysResult<Stat> {
        let attrs = Attrs {
            atime,
            mtime,
            ..Attrs::default()
        };
        self.setattr_at(At::Root, path, true, &attrs)
    }

    /// Sizes and free space of the file system.
    pub fn statfs(&self) -> FsStats {
        self.kernel().fs().stats()
    }

    /// Makes every metadata change so far durable (`fsync` on a directory: its entries).
    pub fn fsync_path(&self, path: &str) -> SysResult<()> {
        self.fsync_at(At::Root, path)
    }

    /// As [`Process::fsync_path`], for `path` from `at` (the mount's `fsyncdir`: a node it holds
    /// and an empty path), reached with this process's rights.
    pub fn fsync_at(&self, at: At, path: impl AsRef<[u8]>) -> SysResult<()> {
        let ino = self.stat_at(at, path, true)?.ino;
        Ok(self.kernel().fs().fsync(ino)?)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Credentials, Kernel, KernelConfig, OpenFlags};
    use std::sync::Arc;
    use vino_blockdev::{BlockDevice, MemDevice};
    use vino_fs::{MkfsOptions, mkfs};

    /// A kernel on a fresh image of `blocks` blocks in memory, no write-back thread.
    fn kernel(blocks: u64) -> Arc<Kernel> {
        let dev = Arc::new(MemDevice::new(blocks));
        mkfs(&*dev, &MkfsOptions::default()).unwrap();
        let config = KernelConfig {
            writeback_every: None,
            ..Default::default()
        };
        Kernel::boot(dev as Arc<dyn BlockDevice>, &config).unwrap()
    }

    #[test]
    fn a_file_grown_after_a_shrink_reads_zeros_and_takes_appends() {
        let p = kernel(4096).spawn(Credentials::root());
        let fd = p.open("/f", OpenFlags::create()).unwrap();
        p.write(fd, &[7u8; 50_000]).unwrap();
        p.ftruncate(fd, 10_000).unwrap();
        p.ftruncate(fd, 20_000).unwrap();
        let mut back = vec![1u8; 20_000];
        assert_eq!(p.pread(fd, &mut back, 0).unwrap(), 20_000);
        assert!(back[..10_000].iter().all(|&b| b == 7) && back[10_000..].iter().all(|&b| b == 0));
        let sparse = p.open("/sparse", OpenFlags::create()).unwrap();
        p.ftruncate(sparse, 10_000).unwrap();
        p.pwrite(sparse, b"end", 30_000).unwrap();
        let mut back = vec![1u8; 30_003];
        assert_eq!(p.pread(sparse, &mut back, 0).unwrap(), 30_003);
        assert!(back[..30_000].iter().all(|&b| b == 0) && &back[30_000..] == b"end");
    }

    /// A truncation holds nothing of the namespace while it frees: held up here by its file's
    /// write lock (as a long free holds it), another process still renames, and unlinks the
    /// very file being truncated; the truncation then ends on the nameless file, which goes
    /// with the truncation's reference, every block back.
    #[test]
    fn a_truncation_does_not_hold_the_namespace() {
        let k = kernel(8192);
        let p = k.spawn(Credentials::root());
        let free = || k.fs().stats().free_blocks;
        let before = free();
        let fd = p.open("/big", OpenFlags::create()).unwrap();
        p.write(fd, &vec![5u8; 400 * 4096]).unwrap();
        p.close(fd).unwrap();
        let fd = p.open("/other", OpenFlags::create()).unwrap();
        p.close(fd).unwrap();
        let big = p.stat("/big").unwrap().ino;
        let stalled = k.files.write_lock(big);
        let referenced = k.referenced_inodes();
        let truncating = {
            let k = k.clone();
            std::thread::spawn(move || {
                let q = k.spawn(Credentials::root());
                let size = crate::Attrs {
                    size: Some(0),
                    ..Default::default()
                };
                q.setattr_at(crate::At::Root, "/big", true, &size).map(|_| ())
            })
        };
        // The truncation has walked and holds its reference: it waits for the write lock.
        while k.referenced_inodes() == referenced {
            std::thread::yield_now();
        }
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let k = k.clone();
            std::thread::spawn(move || {
                let r = k.spawn(Credentials::root());
                let _ = tx.send(r.rename("/other", "/moved").and_then(|()| r.unlink("/big")));
            });
        }
        let renamed = rx.recv_timeout(std::time::Duration::from_secs(20));
        drop(stalled);
        renamed
            .expect("a rename and an unlink waited for a truncation")
            .unwrap();
        truncating.join().unwrap().unwrap();
        assert!(
            k.parked_files().is_empty(),
            "the truncated file went with its reference"
        );
        p.unlink("/moved").unwrap();
        assert_eq!(free(), before, "every block back");
    }
}
