//! The POSIX file types beyond regular files and directories (symlinks, fifos, sockets,
//! devices), extended attributes, the orphan list and preallocation, as operations on
//! [`FsState`] under the file system's lock (see [`crate::state`]).
//!
//! * A symlink's target lives in its inode record if it is at most [`INLINE_SYMLINK`] bytes (a
//!   fast symlink), else in one data block (`direct[0]`), zero-padded and journaled like a
//!   directory block. Its size is the target's length; its mode is always `0o777`.
//! * A device's number is in the inode record (`rdev`).
//! * An inode's extended attributes are one block (`xattr` in the record, counted in `blocks`):
//!   records sorted by name, sealed with a checksum ([`xattr_encode`]).
//! * The orphan list (as ext4's) chains, through `next_orphan`, the inodes that lost their last
//!   name while the kernel still had them open; its head is in group 0's header, so that it is
//!   journaled with the rest. Mount frees what is on it.

use crate::error::{FsError, Result, corrupt};
use crate::layout::*;
use crate::state::{FsState, XattrSet};

/// Checks a symlink target: 1..=4095 bytes, no NUL.
pub(crate) fn check_target(target: &[u8]) -> Result<()> {
    if target.is_empty() || target.contains(&0) {
        return Err(FsError::InvalidArgument(
            "a symlink target is 1 to 4095 bytes without NUL".into(),
        ));
    }
    if target.len() > MAX_SYMLINK {
        return Err(FsError::NameTooLong(target.len()));
    }
    Ok(())
}

fn check_xattr_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > MAX_XATTR_NAME {
        return Err(FsError::Range(format!(
            "an attribute name is 1 to {MAX_XATTR_NAME} bytes, not {}",
            name.len()
        )));
    }
    Ok(())
}

/// Most predecessor hints of orphans kept ([`FsState::release_orphan`]): past it they are
/// dropped and rebuilt as orphans come and go.
const MAX_ORPHAN_HINTS: usize = 1 << 20;

impl FsState {
    // ---- symlinks -------------------------------------------------------------------------

    pub fn readlink(&mut self, ino: u64) -> Result<Vec<u8>> {
        let i = self.live(ino)?;
        if !i.is_symlink() {
            return Err(FsError::InvalidArgument(format!("inode {ino} is not a symlink")));
        }
        let len = i.size as usize;
        if len == 0 || len > MAX_SYMLINK {
            return Err(corrupt(format!("symlink {ino}: size {len}")));
        }
        if i.is_fast_symlink() {
            if i.inline.len() != len {
                return Err(corrupt(format!(
                    "symlink {ino}: target of {} bytes, size {len}",
                    i.inline.len()
                )));
            }
            return Ok(i.inline);
        }
        let b = self.ptr(ino, i.direct[0])?;
        if b == 0 {
            return Err(corrupt(format!("symlink {ino}: no target block")));
        }
        let t = self.meta.get(b)?[..len].to_vec();
        if t.contains(&0) {
            return Err(corrupt(format!("symlink {ino}: target shorter than its size")));
        }
        Ok(t)
    }

    // ---- extended attributes --------------------------------------------------------------

    /// The inode's attributes, sorted by name.
    pub fn xattrs(&mut self, ino: u64) -> Result<Vec<Xattr>> {
        let i = self.live(ino)?;
        if i.xattr == 0 {
            return Ok(Vec::new());
        }
        let b = self.ptr(ino, i.xattr)?;
        xattr_parse(self.meta.get(b)?, ino).map_err(FsError::Corrupt)
    }

    pub fn get_xattr(&mut self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        check_xattr_name(name)?;
        self.xattrs(ino)?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or_else(|| FsError::NoData(crate::state::show(name)))
    }

    /// Writes the inode's attribute list: a block allocated for the first, freed with the last.
    fn put_xattrs(&mut self, ino: u64, attrs: &[Xattr]) -> Result<()> {
        if !xattr_fits(attrs) {
            return Err(FsError::NoSpace);
        }
        let mut i = self.live(ino)?;
        if attrs.is_empty() {
            if i.xattr != 0 {
                let b = self.ptr(ino, i.xattr)?;
                self.free_block(i.uid, b)?;
                i.xattr = 0;
                i.blocks = i.blocks.saturating_sub(1);
            }
        } else {
            let b = if i.xattr == 0 {
                let pref = self.geo.data_start(self.geo.ino_group(ino));
                let b = self.alloc_block(i.uid, pref)?;
                self.meta.create(b)?;
                i.xattr = b as u32;
                i.blocks = i.blocks.saturating_add(1);
                b
            } else {
                self.ptr(ino, i.xattr)?
            };
            xattr_encode(self.meta.get_mut(b)?, ino, attrs);
        }
        i.ctime_ns = self.now_ns();
        self.write_inode(ino, &i)
    }

    pub fn set_xattr(&mut self, ino: u64, name: &[u8], value: &[u8], how: XattrSet) -> Result<()> {
        check_xattr_name(name)?;
        let mut attrs = self.xattrs(ino)?;
        match attrs.binary_search_by(|(n, _)| n.as_slice().cmp(name)) {
            Ok(i) => {
                if how == XattrSet::Create {
                    return Err(FsError::Exists(crate::state::show(name)));
                }
                attrs[i].1 = value.to_vec();
            }
            Err(i) => {
                if how == XattrSet::Replace {
                    return Err(FsError::NoData(crate::state::show(name)));
                }
                attrs.insert(i, (name.to_vec(), value.to_vec()));
            }
        }
        self.put_xattrs(ino, &attrs)
    }

    pub fn remove_xattr(&mut self, ino: u64, name: &[u8]) -> Result<()> {
        check_xattr_name(name)?;
        let mut attrs = self.xattrs(ino)?;
        let Ok(i) = attrs.binary_search_by(|(n, _)| n.as_slice().cmp(name)) else {
            return Err(FsError::NoData(crate::state::show(name)));
        };
        attrs.remove(i);
        self.put_xattrs(ino, &attrs)
    }

    // ---- the orphan list ------------------------------------------------------------------

    fn orphan_head(&mut self) -> Result<u64> {
        Ok(u64::from(self.header(0)?.orphan_head))
    }

    fn set_orphan_head(&mut self, ino: u64) -> Result<()> {
        let mut h = self.header(0)?;
        h.orphan_head = ino as u32;
        self.put_header(&h)
    }

    /// Puts an inode with no name left on the orphan list.
    pub(crate) fn push_orphan(&mut self, ino: u64) -> Result<()> {
        let head = self.orphan_head()?;
        self.modify(ino, |i| i.next_orphan = head as u32)?;
        self.set_orphan_head(ino)?;
        // Hints left by undone ops are dropped when found wrong; this bounds them anyway.
        if self.orphan_prev.len() >= MAX_ORPHAN_HINTS {
            self.orphan_prev.clear();
        }
        self.orphan_prev.insert(ino, 0);
        if head != 0 {
            self.orphan_prev.insert(head, ino);
        }
        Ok(())
    }

    /// The inode before orphan `ino` on the list (0: the head), if the hint says so and the
    /// list agrees: the head names `ino`, or the hinted inode is an orphan (live, no links, not
    /// a directory: every such inode is on the list) whose next is `ino`.
    fn orphan_before(&mut self, ino: u64) -> Result<Option<u64>> {
        let Some(&prev) = self.orphan_prev.get(&ino) else {
            return Ok(None);
        };
        let agrees = if prev == 0 {
            self.orphan_head()? == ino
        } else {
            self.live(prev)
                .is_ok_and(|p| p.nlink == 0 && !p.is_dir() && u64::from(p.next_orphan) == ino)
        };
        if !agrees {
            self.orphan_prev.remove(&ino);
        }
        Ok(agrees.then_some(prev))
    }

    /// Walks the orphan list, checking each inode on it, until `stop` says so for one; returns
    /// the inodes walked (the one it stopped at last).
    fn walk_orphans(&mut self, mut stop: impl FnMut(u64) -> bool) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        let mut cur = self.orphan_head()?;
        while cur != 0 {
            if out.len() as u64 >= self.geo.inode_count() {
                return Err(corrupt("the orphan list has a cycle; run fsck"));
            }
            let i = self
                .live(cur)
                .map_err(|_| corrupt(format!("the orphan list names free inode {cur}; run fsck")))?;
            if i.nlink != 0 || i.is_dir() {
                return Err(corrupt(format!(
                    "the orphan list names inode {cur}, which has {} links; run fsck",
                    i.nlink
                )));
            }
            out.push(cur);
            if stop(cur) {
                break;
            }
            cur = u64::from(i.next_orphan);
        }
        Ok(out)
    }

    /// The inodes on the orphan list, first to last.
    pub fn orphans(&mut self) -> Result<Vec<u64>> {
        self.walk_orphans(|_| false)
    }

    /// Takes an inode off the orphan list and frees it (blocks, xattrs, the inode). The inode
    /// before it is known from the hints kept as orphans come and go (checked against the list
    /// first); without one, the list is walked up to it (a mount, which frees from the head,
    /// walks nothing). Walked every time, orphans released oldest first (as Linux forgets what
    /// `rm -rf` unlinked on the mount, whose nodes hold each file until then) walk the whole
    /// list each: time quadratic in how many wait.
    pub fn release_orphan(&mut self, ino: u64) -> Result<()> {
        let prev = match self.orphan_before(ino)? {
            Some(prev) => prev,
            None => {
                let walked = self.walk_orphans(|o| o == ino)?;
                if walked.last() != Some(&ino) {
                    return Err(FsError::InvalidArgument(format!(
                        "inode {ino} is not on the orphan list"
                    )));
                }
                walked.len().checked_sub(2).map_or(0, |i| walked[i])
            }
        };
        let mut inode = self.live(ino)?;
        if inode.nlink != 0 || inode.is_dir() {
            return Err(corrupt(format!(
                "the orphan list names inode {ino}, which has {} links; run fsck",
                inode.nlink
            )));
        }
        let next = inode.next_orphan;
        if prev == 0 {
            self.set_orphan_head(u64::from(next))?;
        } else {
            self.modify(prev, |p| p.next_orphan = next)?;
        }
        self.orphan_prev.remove(&ino);
        if next != 0 {
            self.orphan_prev.insert(u64::from(next), prev);
        }
        inode.next_orphan = 0;
        self.release(ino, inode)
    }

    // ---- preallocation --------------------------------------------------------------------

    /// Gives every hole among file blocks `range` of a regular file a block; returns the
    /// blocks just allocated (with their file block), whose contents the caller zeroes on the
    /// device before the allocation can become durable.
    pub(crate) fn preallocate(&mut self, ino: u64, range: std::ops::Range<u64>) -> Result<Vec<(u64, u64)>> {
        let mut got = Vec::new();
        self.ensure_run(ino, range.clone(), &mut got)?;
        Ok(range
            .zip(got)
            .filter(|&(_, (_, new))| new)
            .map(|(fb, (b, _))| (fb, b))
            .collect())
    }

    /// Fails with NoSpace unless the free blocks (those freed but not yet reusable left out)
    /// cover what allocating every hole of file blocks `range` takes, indirect blocks included.
    pub(crate) fn check_room(&mut self, ino: u64, range: std::ops::Range<u64>) -> Result<()> {
        let i = self.live(ino)?;
        crate::state::regular(ino, &i)?;
        let mut need = 0u64;
        let mut l1_missing = std::collections::BTreeSet::new();
        for fb in range.clone() {
            if self.bmap(ino, &i, fb)?.is_none() {
                need += 1;
            }
        }
        let single = NDIRECT..NDIRECT + NINDIRECT;
        if i.indirect == 0 && range.start < single.end && range.end > single.start {
            need += 1;
        }
        let double_start = NDIRECT + NINDIRECT;
        if range.end > double_start {
            let d = self.ptr(ino, i.dindirect)?;
            if d == 0 {
                need += 1;
            }
            let first = (range.start.max(double_start) - double_start) / NINDIRECT;
            let last = (range.end - 1 - double_start) / NINDIRECT;
            for k in first..=last {
                let present = d != 0 && ind_get(self.meta.get(d)?, k as usize) != 0;
                if !present {
                    l1_missing.insert(k);
                }
            }
        }
        need += l1_missing.len() as u64;
        self.quota.check(i.uid, need, 0)?;
        let free = self.free_blocks_total();
        self.quota.check_block_reserve(i.uid, need, free)?;
        if need > self.free_now()? {
            return Err(FsError::NoSpace);
        }
        Ok(())
    }

    /// Undoes [`FsState::preallocate`]: frees the given file blocks.
    pub(crate) fn unallocate(&mut self, ino: u64, fbs: &[u64]) -> Result<()> {
        let mut inode = self.live(ino)?;
        for &fb in fbs {
            self.free_range(ino, &mut inode, fb, fb + 1)?;
        }
        self.write_inode(ino, &inode)
    }
}
