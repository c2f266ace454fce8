//! Disk quotas per user and a reserve for root, as Linux quotas and ext4's reserved blocks.
//!
//! Every block an inode holds (data, indirect, its xattr block, a slow symlink's block: what
//! its `blocks` counts) and the inode itself are charged to the inode's owner (`uid`). Root
//! (uid 0) is never limited; any other uid is limited to [`Quota::user_blocks`] blocks and
//! [`Quota::user_inodes`] inodes, past which an allocation fails with
//! [`FsError::QuotaExceeded`] (EDQUOT). Besides, the last [`Quota::root_reserve_percent`] of
//! the blocks and of the inodes are root's: an allocation for another owner when no more than
//! the reserve is free fails with [`FsError::NoSpace`] / [`FsError::NoInodes`] (ENOSPC), as
//! ext4 does, so that a user filling the disk leaves the system (root's daemons) room to work.
//! As on ext4 the reserve is judged by who acts when that is known ([`acting`]: the kernel's
//! system calls say so), by the owner otherwise: a user who makes root's directory grow (a name
//! in `/tmp`) is held to the reserve, and root writing a user's file is not.
//!
//! Names cost directory space in directories their makers may not own. A new file costs an
//! inode; a hard link costs nothing else, so each uid but root may also give its files at most
//! [`Quota::user_links`] names beyond their first (the sum of `nlink - 1` over its files that
//! are not directories), past which a link fails with [`FsError::QuotaExceeded`]. That bounds
//! the directory space any user can make another's (root's `/tmp`) hold, and is counted from
//! the inode table like the rest.
//!
//! The accounting is in memory only: [`crate::FileSystem::mount`] rebuilds it by scanning the
//! inode table, and every allocation, freeing, truncation, unlink of a last name, fallocate and
//! chown keeps it. There is no on-disk quota file, so nothing for fsck to check or repair, and
//! nothing a crash can make stale.
//!
//! Changes are made inside an operation (see [`crate::meta`]): each is recorded so that an
//! operation rolled back rolls its charges back too ([`Accounting::rollback`]).

use crate::error::{FsError, Result};
use crate::layout::{BS, Geometry, INODE_SIZE, Inode, bit};
use std::collections::HashMap;

/// A limit meaning "no limit" ([`Quota::user_blocks`], [`Quota::user_inodes`]).
pub const UNLIMITED: u64 = u64::MAX;

/// Quotas of a mounted file system (part of [`crate::MountOptions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Blocks (4 KiB) each uid but root may hold. `None`: half of the blocks outside root's
    /// reserve, so that one user cannot take everything; `Some(UNLIMITED)`: no limit.
    pub user_blocks: Option<u64>,
    /// Inodes each uid but root may hold. `None`: half of the inodes outside root's reserve;
    /// `Some(UNLIMITED)`: no limit.
    pub user_inodes: Option<u64>,
    /// Percent of the data blocks, and of the inodes, only root may allocate (ext4's reserved
    /// blocks; at most 50).
    pub root_reserve_percent: u8,
    /// Names beyond the first that the files (not directories) of each uid but root may have.
    /// `None`: as many as the uid may hold blocks, so that its links' directory entries (at
    /// most 264 bytes each) come to about a sixteenth of its block quota at most;
    /// `Some(UNLIMITED)`: no limit.
    pub user_links: Option<u64>,
}

impl Default for Quota {
    fn default() -> Self {
        Quota {
            user_blocks: None,
            user_inodes: None,
            root_reserve_percent: 5,
            user_links: None,
        }
    }
}

impl Quota {
    /// No limits and no reserve.
    pub fn none() -> Quota {
        Quota {
            user_blocks: Some(UNLIMITED),
            user_inodes: Some(UNLIMITED),
            root_reserve_percent: 0,
            user_links: Some(UNLIMITED),
        }
    }
}

/// What one uid holds and may hold ([`crate::FileSystem::quota_usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct QuotaUsage {
    /// Blocks held (4 KiB each), indirect, xattr and symlink blocks included.
    pub blocks: u64,
    /// Inodes held.
    pub inodes: u64,
    /// Blocks it may hold ([`UNLIMITED`] for root).
    pub block_limit: u64,
    /// Inodes it may hold ([`UNLIMITED`] for root).
    pub inode_limit: u64,
    /// Names its files have beyond their first.
    pub links: u64,
    /// Such names it may give them ([`UNLIMITED`] for root).
    pub link_limit: u64,
}

/// Blocks and inodes held by one uid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Held {
    pub blocks: u64,
    pub inodes: u64,
    /// Names beyond the first of its files that are not directories.
    pub links: u64,
}

/// The limits and the usage per uid of a mounted file system.
#[derive(Debug)]
pub(crate) struct Accounting {
    held: HashMap<u32, Held>,
    /// Charges made by the running operation, undone if it rolls back.
    undo: Vec<(u32, Delta)>,
    pub block_limit: u64,
    pub inode_limit: u64,
    pub link_limit: u64,
    pub block_reserve: u64,
    pub inode_reserve: u64,
    /// The running operation was refused blocks for root's reserve (not for want of free
    /// ones): a checkpoint, which only makes freed blocks reusable, cannot help.
    pub reserve_refused: bool,
}

/// A change to what one uid holds: blocks, inodes, links.
type Delta = (i64, i64, i64);

/// Who the running system call acts for, if the kernel said ([`acting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Actor {
    /// May use root's reserve (root, or a process privileged as root is).
    pub privileged: bool,
}

thread_local! {
    static ACTOR: std::cell::Cell<Option<Actor>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with root's reserve judged by `actor`'s privilege rather than by the owner of what
/// is allocated (ext4 asks the current process, as this asks the calling thread).
pub fn acting<T>(actor: Actor, f: impl FnOnce() -> T) -> T {
    let before = ACTOR.with(|a| a.replace(Some(actor)));
    let _restore = Restore(before);
    f()
}

struct Restore(Option<Actor>);

impl Drop for Restore {
    fn drop(&mut self) {
        ACTOR.with(|a| a.set(self.0));
    }
}

/// True if an allocation for `owner` may use root's reserve: the acting process's privilege
/// where known, else the owner's.
fn may_use_reserve(owner: u32) -> bool {
    ACTOR.with(|a| a.get()).map_or(owner == 0, |a| a.privileged)
}

/// `percent` of `n`.
fn share(n: u64, percent: u8) -> u64 {
    (u128::from(n) * u128::from(percent) / 100) as u64
}

impl Accounting {
    /// Limits for a file system of `data_blocks` data blocks and `inodes` inodes, with nothing
    /// charged yet.
    pub fn new(q: &Quota, data_blocks: u64, inodes: u64) -> Result<Accounting> {
        if q.root_reserve_percent > 50 {
            return Err(FsError::InvalidArgument(format!(
                "root reserve of {}% (at most 50%)",
                q.root_reserve_percent
            )));
        }
        let block_reserve = share(data_blocks, q.root_reserve_percent);
        let inode_reserve = share(inodes, q.root_reserve_percent);
        let block_limit = q.user_blocks.unwrap_or((data_blocks - block_reserve) / 2);
        Ok(Accounting {
            held: HashMap::new(),
            undo: Vec::new(),
            block_limit,
            inode_limit: q.user_inodes.unwrap_or((inodes - inode_reserve) / 2),
            link_limit: q.user_links.unwrap_or(block_limit),
            block_reserve,
            inode_reserve,
            reserve_refused: false,
        })
    }

    /// What `uid` holds.
    pub fn held(&self, uid: u32) -> Held {
        self.held.get(&uid).copied().unwrap_or_default()
    }

    /// Usage and limits of `uid`.
    pub fn usage(&self, uid: u32) -> QuotaUsage {
        let h = self.held(uid);
        let (block_limit, inode_limit, link_limit) = if uid == 0 {
            (UNLIMITED, UNLIMITED, UNLIMITED)
        } else {
            (self.block_limit, self.inode_limit, self.link_limit)
        };
        QuotaUsage {
            blocks: h.blocks,
            inodes: h.inodes,
            block_limit,
            inode_limit,
            links: h.links,
            link_limit,
        }
    }

    /// Every uid holding something, with what it holds.
    pub fn all(&self) -> impl Iterator<Item = (u32, Held)> + '_ {
        self.held
            .iter()
            .map(|(&u, &h)| (u, h))
            .filter(|(_, h)| *h != Held::default())
    }

    /// Checks that `uid` may take `blocks` more blocks and `inodes` more inodes (root: always).
    pub fn check(&self, uid: u32, blocks: u64, inodes: u64) -> Result<()> {
        if uid == 0 {
            return Ok(());
        }
        let h = self.held(uid);
        if h.blocks.saturating_add(blocks) > self.block_limit || h.inodes.saturating_add(inodes) > self.inode_limit {
            return Err(FsError::QuotaExceeded);
        }
        Ok(())
    }

    /// Checks that `uid`'s files may get `n` more names beyond their first (root: always).
    pub fn check_links(&self, uid: u32, n: u64) -> Result<()> {
        if uid != 0 && self.held(uid).links.saturating_add(n) > self.link_limit {
            return Err(FsError::QuotaExceeded);
        }
        Ok(())
    }

    /// Checks that an owner may take `n` blocks when `free` are free: root (or a privileged
    /// actor, see [`acting`]) may take them all, others must leave root's reserve.
    pub fn check_block_reserve(&mut self, uid: u32, n: u64, free: u64) -> Result<()> {
        if n > free {
            return Err(FsError::NoSpace);
        }
        if !may_use_reserve(uid) && free - n < self.block_reserve {
            self.reserve_refused = true;
            return Err(FsError::NoSpace);
        }
        Ok(())
    }

    /// True if `uid` is held to root's inode reserve (neither it nor the actor may use it,
    /// and there is one).
    pub fn inode_reserve_applies(&self, uid: u32) -> bool {
        !may_use_reserve(uid) && self.inode_reserve > 0
    }

    /// Checks that an owner may take an inode when `free` are free (see
    /// [`Accounting::check_block_reserve`]).
    pub fn check_inode_reserve(&self, uid: u32, free: u64) -> Result<()> {
        if free == 0 || (!may_use_reserve(uid) && free - 1 < self.inode_reserve) {
            return Err(FsError::NoInodes);
        }
        Ok(())
    }

    /// Adds `blocks` and `inodes` (either may be negative) to what `uid` holds, recorded for
    /// a rollback.
    pub fn charge(&mut self, uid: u32, blocks: i64, inodes: i64) {
        self.charge_all(uid, (blocks, inodes, 0));
    }

    /// Adds `n` (may be negative) to the names beyond the first of `uid`'s files.
    pub fn charge_links(&mut self, uid: u32, n: i64) {
        self.charge_all(uid, (0, 0, n));
    }

    fn charge_all(&mut self, uid: u32, d: Delta) {
        self.apply(uid, d);
        self.undo.push((uid, d));
    }

    fn apply(&mut self, uid: u32, (blocks, inodes, links): Delta) {
        let h = self.held.entry(uid).or_default();
        h.blocks = h.blocks.saturating_add_signed(blocks);
        h.inodes = h.inodes.saturating_add_signed(inodes);
        h.links = h.links.saturating_add_signed(links);
        if *h == Held::default() {
            self.held.remove(&uid);
        }
    }

    /// An operation begins: its charges start being recorded.
    pub fn begin(&mut self) {
        self.undo.clear();
        self.reserve_refused = false;
    }

    /// The running operation rolled back: its charges are undone.
    pub fn rollback(&mut self) {
        while let Some((uid, (b, i, l))) = self.undo.pop() {
            self.apply(uid, (-b, -i, -l));
        }
    }

    /// Replaces the usage with a count ([`count_usage`]).
    pub fn set_counted(&mut self, held: HashMap<u32, Held>) {
        self.held = held;
        self.held.retain(|_, h| *h != Held::default());
        self.undo.clear();
    }

    /// The usage as counted, for comparing with a fresh count.
    pub fn snapshot(&self) -> HashMap<u32, Held> {
        self.all().collect()
    }
}

/// The names beyond its first that an inode is charged for (a directory's `..` entries are
/// its subdirectories', not links).
pub(crate) fn extra_names(i: &Inode) -> u64 {
    if i.is_dir() {
        0
    } else {
        u64::from(i.nlink.saturating_sub(1))
    }
}

/// Reads a metadata block into the buffer.
pub(crate) type ReadBlock<'a> = dyn FnMut(u64, &mut [u8]) -> Result<()> + 'a;

/// Counts the blocks and inodes each uid holds, from the inode bitmaps and tables `read`
/// gives: every inode in use counts itself, its `blocks` and, if not a directory, its names
/// beyond the first. Inodes that do not decode are left
/// out (the operation that touches one reports the corruption).
pub(crate) fn count_usage(geo: &Geometry, read: &mut ReadBlock<'_>) -> Result<HashMap<u32, Held>> {
    let per_block = (BS / INODE_SIZE) as u64;
    let mut held: HashMap<u32, Held> = HashMap::new();
    let mut map = vec![0u8; BS];
    let mut table = vec![0u8; BS];
    for g in 0..geo.groups {
        read(geo.inode_bitmap(g), &mut map)?;
        for k in 0..geo.itable_blocks {
            let used: Vec<u64> = (k * per_block..(k + 1) * per_block).filter(|&i| bit(&map, i)).collect();
            if used.is_empty() {
                continue;
            }
            read(geo.itable(g) + k, &mut table)?;
            for i in used {
                let ino = geo.first_ino(g) + i;
                let off = ((i % per_block) as usize) * INODE_SIZE;
                let Ok(inode) = Inode::decode(ino, &table[off..off + INODE_SIZE]) else {
                    continue;
                };
                if inode.is_free() {
                    continue;
                }
                let h = held.entry(inode.uid).or_default();
                h.blocks += u64::from(inode.blocks);
                h.inodes += 1;
                h.links += extra_names(&inode);
            }
        }
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_limits_are_half_of_what_the_reserve_leaves() {
        let a = Accounting::new(&Quota::default(), 1000, 200).unwrap();
        assert_eq!(a.block_reserve, 50);
        assert_eq!(a.inode_reserve, 10);
        assert_eq!(a.block_limit, 475);
        assert_eq!(a.inode_limit, 95);
        assert_eq!(a.usage(0).block_limit, UNLIMITED);
        assert_eq!(a.usage(7).block_limit, 475);
    }

    #[test]
    fn a_reserve_over_half_is_refused() {
        let q = Quota {
            root_reserve_percent: 51,
            ..Quota::default()
        };
        assert!(Accounting::new(&q, 1000, 100).is_err());
    }

    #[test]
    fn limits_and_reserve_apply_to_everyone_but_root() {
        let q = Quota {
            user_blocks: Some(10),
            user_inodes: Some(2),
            root_reserve_percent: 10,
            user_links: Some(3),
        };
        let mut a = Accounting::new(&q, 100, 100).unwrap();
        a.charge(5, 10, 2);
        assert!(matches!(a.check(5, 1, 0), Err(FsError::QuotaExceeded)));
        assert!(matches!(a.check(5, 0, 1), Err(FsError::QuotaExceeded)));
        assert!(a.check(6, 10, 2).is_ok());
        assert!(a.check(0, 1000, 1000).is_ok());
        assert!(a.check_block_reserve(5, 1, 11).is_ok());
        assert!(matches!(a.check_block_reserve(5, 1, 10), Err(FsError::NoSpace)));
        assert!(a.check_block_reserve(0, 1, 1).is_ok());
        assert!(matches!(a.check_block_reserve(0, 1, 0), Err(FsError::NoSpace)));
        assert!(matches!(a.check_inode_reserve(5, 10), Err(FsError::NoInodes)));
        assert!(a.check_inode_reserve(0, 1).is_ok());
        a.charge_links(5, 3);
        assert!(matches!(a.check_links(5, 1), Err(FsError::QuotaExceeded)));
        assert!(a.check_links(0, 100).is_ok());
    }

    #[test]
    fn the_reserve_is_judged_by_the_actor_when_known() {
        let q = Quota {
            root_reserve_percent: 10,
            ..Quota::none()
        };
        let mut a = Accounting::new(&q, 100, 100).unwrap();
        let user = Actor { privileged: false };
        let root = Actor { privileged: true };
        assert!(matches!(
            acting(user, || a.check_block_reserve(0, 1, 10)),
            Err(FsError::NoSpace)
        ));
        assert!(acting(root, || a.check_block_reserve(5, 1, 10)).is_ok());
        assert!(acting(user, || a.check_inode_reserve(0, 10)).is_err());
        assert!(a.check_block_reserve(0, 1, 10).is_ok());
    }

    #[test]
    fn a_rollback_undoes_the_operations_charges() {
        let mut a = Accounting::new(&Quota::none(), 100, 100).unwrap();
        a.charge(5, 3, 1);
        a.begin();
        a.charge(5, 4, 0);
        a.charge(5, -2, -1);
        a.charge(6, 1, 1);
        a.rollback();
        assert_eq!(
            a.held(5),
            Held {
                blocks: 3,
                inodes: 1,
                links: 0
            }
        );
        assert_eq!(a.held(6), Held::default());
        assert_eq!(a.all().count(), 1);
    }
}
