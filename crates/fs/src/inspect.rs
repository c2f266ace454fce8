//! Read-only views of the file system's state for the kernel's invariant check
//! (`Kernel::check_invariants`), and one hook that breaks a rule on purpose so that the check's
//! tests can show it is caught. Not for front ends.

use crate::error::Result;
use crate::filesystem::FileSystem;
use crate::layout::bit;

impl FileSystem {
    /// Inodes in use with no link left, in inode order: each must be on the orphan list (see
    /// [`FileSystem::orphans`]). Reads each group's inode bitmap and the records of the inodes
    /// in use: time in the inodes in use, for checks, never a system call's path.
    #[doc(hidden)]
    pub fn unlinked_inodes(&self) -> Result<Vec<u64>> {
        let geo = self.geometry().clone();
        self.with_state(|g| {
            let mut out = Vec::new();
            for group in 0..geo.groups {
                let map = g.meta.get(geo.inode_bitmap(group))?.to_vec();
                for i in (0..geo.ipg).filter(|&i| bit(&map, i)) {
                    let ino = geo.first_ino(group) + i;
                    let inode = g.read_inode(ino)?;
                    if !inode.is_free() && inode.nlink == 0 {
                        out.push(ino);
                    }
                }
            }
            Ok(out)
        })
    }

    /// Sets an inode's link count and nothing else (names, the orphan list): a corruption, for
    /// the tests of the checks that must find it.
    #[doc(hidden)]
    pub fn set_nlink_for_test(&self, ino: u64, nlink: u32) -> Result<()> {
        self.in_transaction(|g| {
            let mut inode = g.live(ino)?;
            inode.nlink = nlink;
            g.write_inode(ino, &inode)
        })
    }

    /// Charges `uid` one inode it does not hold: a corruption, for the tests of the checks that
    /// must find it ([`FileSystem::verify_quota`]).
    #[doc(hidden)]
    pub fn skew_quota_for_test(&self, uid: u32) -> Result<()> {
        self.in_transaction(|g| {
            g.quota.charge(uid, 0, 1);
            Ok(())
        })
    }
}
