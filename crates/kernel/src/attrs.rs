//! System calls on attributes and names beyond the core set: access, chmod, chown, utimes, link,
//! statfs and a directory's fsync. Real programs run on a FUSE mount need them (cp -p, tar, git).
//! The rules are POSIX's: the owner (or a privileged process) changes modes and sets explicit
//! times, only a privileged process gives a file away, anyone who may write may touch a file.

use crate::error::{Errno, SysError, SysResult};
use crate::perm::{self, EXEC, WRITE};
use crate::process::Process;
use vino_fs::{FileType, FsStats, SetAttr, Stat};

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

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl SetTime {
    fn resolve(self, now: u64) -> Option<u64> {
        match self {
            SetTime::Omit => None,
            SetTime::Now => Some(now),
            SetTime::At(t) => Some(t),
        }
    }
}

impl Process {
    fn stat_checked(&self, path: &str) -> SysResult<(u64, Stat)> {
        let fs = self.kernel().fs();
        let ino = fs.resolve(path)?;
        Ok((ino, fs.stat(ino)?))
    }

    fn is_owner(&self, st: &Stat) -> bool {
        let cred = self.credentials();
        cred.privileged || cred.uid == st.uid
    }

    fn set_attr(&self, ino: u64, attrs: &SetAttr) -> SysResult<Stat> {
        Ok(self.kernel().fs().set_attr(ino, attrs)?)
    }

    /// Checks `want` (a mask of 4 read, 2 write, 1 execute; 0: the file exists) on `path`.
    pub fn access(&self, path: &str, want: u32) -> SysResult<()> {
        assert!(want <= 7, "access mask {want} has bits besides read, write and execute");
        let (_, st) = self.stat_checked(path)?;
        if perm::may(self.credentials(), &st, want) {
            Ok(())
        } else {
            Err(SysError::new(Errno::Acces, format!("permission denied: {path}")))
        }
    }

    /// Sets the permission bits (`0o7777` at most). The owner or a privileged process only.
    pub fn chmod(&self, path: &str, mode: u16) -> SysResult<Stat> {
        let (ino, st) = self.stat_checked(path)?;
        if !self.is_owner(&st) {
            return Err(SysError::new(
                Errno::Perm,
                format!("only the owner may change the mode of {path}"),
            ));
        }
        self.set_attr(
            ino,
            &SetAttr {
                mode: Some(mode & 0o7777),
                ..SetAttr::default()
            },
        )
    }

    /// Changes the owner or group. A privileged process may do anything; an owner may only set
    /// the group to one of its own.
    pub fn chown(&self, path: &str, uid: Option<u32>, gid: Option<u32>) -> SysResult<Stat> {
        let (ino, st) = self.stat_checked(path)?;
        let cred = self.credentials();
        let allowed = cred.privileged
            || (cred.uid == st.uid
                && uid.is_none_or(|u| u == st.uid)
                && gid.is_none_or(|g| g == cred.gid || cred.groups.contains(&g)));
        if !allowed {
            return Err(SysError::new(
                Errno::Perm,
                format!("may not change the owner of {path}"),
            ));
        }
        self.set_attr(
            ino,
            &SetAttr {
                uid,
                gid,
                ..SetAttr::default()
            },
        )
    }

    /// Sets the access and modification times. Explicit times need the owner (or privilege);
    /// setting both to now needs only write permission, as `touch` does.
    pub fn utimes(&self, path: &str, atime: SetTime, mtime: SetTime) -> SysResult<Stat> {
        let (ino, st) = self.stat_checked(path)?;
        let explicit = matches!(atime, SetTime::At(_)) || matches!(mtime, SetTime::At(_));
        if !self.is_owner(&st) {
            if explicit {
                return Err(SysError::new(
                    Errno::Perm,
                    format!("only the owner may set the times of {path}"),
                ));
            }
            if !perm::may(self.credentials(), &st, WRITE) {
                return Err(SysError::new(Errno::Acces, format!("permission denied: {path}")));
            }
        }
        let now = now_ns();
        let attrs = SetAttr {
            atime_ns: atime.resolve(now),
            mtime_ns: mtime.resolve(now),
            ..SetAttr::default()
        };
        self.set_attr(ino, &attrs)
    }

    /// Gives the regular file at `from` a second name, `to`.
    pub fn link(&self, from: &str, to: &str) -> SysResult<()> {
        let (ino, st) = self.stat_checked(from)?;
        if st.kind == FileType::Directory {
            return Err(SysError::new(Errno::Perm, format!("cannot link a directory: {from}")));
        }
        let (dir, name) = self.writable_parent(to)?;
        Ok(self.kernel().fs().link(ino, dir, name)?)
    }

    /// The directory holding `path` and the last name, checked for search and write.
    fn writable_parent<'p>(&self, path: &'p str) -> SysResult<(u64, &'p str)> {
        let trimmed = path.trim_end_matches('/');
        let cut = trimmed
            .rfind('/')
            .filter(|_| path.starts_with('/') && !trimmed.is_empty());
        let Some(cut) = cut else {
            return Err(SysError::new(
                Errno::Inval,
                format!("`{path}`: an absolute path to a file is needed"),
            ));
        };
        let dir_path = if cut == 0 { "/" } else { &trimmed[..cut] };
        let (dir, st) = self.stat_checked(dir_path)?;
        if st.kind != FileType::Directory {
            return Err(SysError::new(Errno::NotDir, format!("not a directory: {dir_path}")));
        }
        if !perm::may(self.credentials(), &st, EXEC | WRITE) {
            return Err(SysError::new(Errno::Acces, format!("permission denied: {dir_path}")));
        }
        Ok((dir, &trimmed[cut + 1..]))
    }

    /// Sizes and free space of the file system.
    pub fn statfs(&self) -> FsStats {
        self.kernel().fs().stats()
    }

    /// Makes every metadata change so far durable (`fsync` on a directory: its entries).
    pub fn fsync_path(&self, path: &str) -> SysResult<()> {
        let (ino, _) = self.stat_checked(path)?;
        Ok(self.kernel().fs().fsync(ino)?)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Credentials, Kernel, KernelConfig, OpenFlags};
    use std::sync::Arc;
    use vino_blockdev::{BlockDevice, MemDevice};
    use vino_fs::{MkfsOptions, mkfs};

    #[test]
    fn a_file_grown_after_a_shrink_reads_zeros_and_takes_appends() {
        let dev = Arc::new(MemDevice::new(4096));
        mkfs(&*dev, &MkfsOptions::default()).unwrap();
        let k = Kernel::boot(
            dev as Arc<dyn BlockDevice>,
            &KernelConfig {
                writeback_every: None,
                ..Default::default()
            },
        );
        let p = k.unwrap().spawn(Credentials::root());
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
}
