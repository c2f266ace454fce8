//! Inodes: reading and writing them, their attributes, and moving them between owners.

use super::*;

impl FsState {
    pub fn read_inode(&mut self, ino: u64) -> Result<Inode> {
        if let Some(i) = self.inodes.get(&ino) {
            return Ok(i.clone());
        }
        if !self.geo.valid_ino(ino) {
            return Err(FsError::NotFound(format!("inode {ino}")));
        }
        let (b, off) = self.geo.inode_location(ino);
        let blk = self.meta.get(b)?;
        let i = Inode::decode(ino, &blk[off..off + INODE_SIZE]).map_err(FsError::Corrupt)?;
        if self.inodes.len() >= super::INODE_CACHE {
            self.inodes.clear();
        }
        self.inodes.insert(ino, i.clone());
        Ok(i)
    }

    /// An inode in use.
    pub fn live(&mut self, ino: u64) -> Result<Inode> {
        let i = self.read_inode(ino)?;
        if i.is_free() {
            return Err(FsError::NotFound(format!("inode {ino}")));
        }
        Ok(i)
    }

    /// An inode in use that a directory entry points to: a free one is corruption.
    pub(crate) fn linked(&mut self, ino: u64) -> Result<Inode> {
        if !self.geo.valid_ino(ino) {
            return Err(corrupt(format!(
                "a directory entry points to inode {ino}, which does not exist"
            )));
        }
        let i = self.read_inode(ino)?;
        if i.is_free() {
            return Err(corrupt(format!(
                "a directory entry points to inode {ino}, which is free"
            )));
        }
        Ok(i)
    }

    pub fn write_inode(&mut self, ino: u64, i: &Inode) -> Result<()> {
        // Read back from the block next time: what a decode gives, not what was written.
        self.inodes.remove(&ino);
        let (b, off) = self.geo.inode_location(ino);
        let blk = self.meta.get_mut(b)?;
        i.encode_into(ino, &mut blk[off..off + INODE_SIZE]);
        Ok(())
    }

    pub(crate) fn modify(&mut self, ino: u64, f: impl FnOnce(&mut Inode)) -> Result<Inode> {
        let mut i = self.live(ino)?;
        f(&mut i);
        self.write_inode(ino, &i)?;
        Ok(i)
    }

    pub fn stat(&mut self, ino: u64) -> Result<Stat> {
        let i = self.live(ino)?;
        let mut st = stat_of(ino, &i);
        st.size = self.size_of(ino, &i);
        Ok(st)
    }

    /// A file's size: its size on disk, or for a stream file written past it, the size written.
    pub(crate) fn size_of(&self, ino: u64, i: &Inode) -> u64 {
        match self.stream_size(ino) {
            Some((generation, size)) if generation == i.generation && i.stream.is_some() => size.max(i.size),
            _ => i.size,
        }
    }

    pub fn set_attr(&mut self, ino: u64, a: &SetAttr) -> Result<Stat> {
        if a.mode.is_some_and(|m| m & !0o7777 != 0) {
            return Err(FsError::InvalidArgument("mode has bits outside 0o7777".into()));
        }
        let old = self.live(ino)?;
        if let Some(to) = a.uid.filter(|&to| to != old.uid) {
            self.transfer(&old, to, a.ignore_quota)?;
        }
        let now = self.now_ns();
        let i = self.modify(ino, |i| {
            if let Some(m) = a.mode {
                i.mode = (i.mode & S_IFMT) | m;
            }
            if let Some(u) = a.uid {
                i.uid = u;
            }
            if let Some(g) = a.gid {
                i.gid = g;
            }
            if let Some(t) = a.atime_ns {
                i.atime_ns = t;
            }
            if let Some(t) = a.mtime_ns {
                i.mtime_ns = t;
            }
            i.ctime_ns = now;
        })?;
        let mut st = stat_of(ino, &i);
        st.size = self.size_of(ino, &i);
        Ok(st)
    }

    /// Chown's accounting: moves an inode's charge (itself, its blocks, its names beyond the
    /// first) from its owner to
    /// `to`. QuotaExceeded if that puts `to` over its quota, unless `ignore_quota` (a
    /// privileged caller, as Linux's CAP_SYS_RESOURCE). Root's reserve is not involved: no
    /// block is allocated.
    fn transfer(&mut self, i: &Inode, to: u32, ignore_quota: bool) -> Result<()> {
        let blocks = u64::from(i.blocks);
        let links = crate::quota::extra_names(i);
        if !ignore_quota {
            self.quota.check(to, blocks, 1)?;
            self.quota.check_links(to, links)?;
        }
        let b = i64::from(i.blocks);
        self.quota.charge(i.uid, -b, -1);
        self.quota.charge(to, b, 1);
        self.quota.charge_links(i.uid, -(links as i64));
        self.quota.charge_links(to, links as i64);
        debug_assert!(blocks == 0 || self.quota.held(to).blocks >= blocks);
        Ok(())
    }
}

/// Checks that an inode is a regular file: IsADirectory for a directory, InvalidArgument for
/// the other types.
pub(crate) fn regular(ino: u64, i: &Inode) -> Result<()> {
    match i.file_type() {
        Some(FileType::Regular) => Ok(()),
        Some(FileType::Directory) => Err(FsError::IsADirectory(format!("inode {ino}"))),
        _ => Err(FsError::InvalidArgument(format!("inode {ino} is not a regular file"))),
    }
}
