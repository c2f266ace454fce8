//! Block placement: the `file.block_buddy` graftpoint (Small 1998, 7.5 and 7.7.7).
//!
//! When a block of a file is allocated, the file's policy names a preferred device block; the
//! allocator takes the first free block at or after it in that block's cylinder group, wrapping
//! around the group, then tries the following groups. The default is FFS's `blkpref`:
//!
//! * the first block of a file goes at the start of its inode's group, and each next block right
//!   after the previous one;
//! * at the first block an indirect block maps (file block 12) and every `maxbpg` blocks after,
//!   the file moves to another group: the search starts at the group after the previous block's
//!   (or, with no previous block, at the inode's group plus `index / maxbpg`) and takes the first
//!   group with at least the average number of free blocks. FFS starts that search at the
//!   inode's own group and skips it when it has less than the average free, which once the file's
//!   first twelve blocks are in it it practically always has; starting after it makes the switch
//!   happen every time, as the thesis describes it ("intentionally stored in a section of the
//!   disk that is not contiguous with the first twelve blocks").
//!
//! NoSwitch (Smith and Seltzer; the thesis' layout graft) keeps block 12 right after block 11.
//! It exists here as a native policy ([`NoSwitch`], the "unprotected" variant) and as a C graft
//! (`sdk/grafts/noswitch.c`).
//!
//! Indirect blocks are not placed separately: one that a data block needs is allocated at the
//! data block's preferred position, and the data block right after it, as FFS's `balloc` does.

use crate::layout::{NDIRECT, NINDIRECT};
use std::sync::atomic::{AtomicU32, Ordering};
use vino_graft::{GraftPoint, Invalid, NativePolicy};

/// What the placement policy is told about the block being allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuddyArgs {
    /// The file's inode number.
    pub ino: u64,
    /// The file block being allocated.
    pub index: u64,
    /// The device block of the previous file block (`index - 1`), or 0 if it has none.
    pub prev: u64,
    /// The cylinder group of the file's inode.
    pub group: u32,
}

/// What every placement decision may look at: the geometry and the free blocks of each group.
/// Shared by all the files of one file system.
pub struct Placement {
    pub block_count: u64,
    pub groups: u32,
    pub per_group: u64,
    pub maxbpg: u64,
    data_start: Vec<u64>,
    free: Vec<AtomicU32>,
}

impl Placement {
    pub(crate) fn new(geo: &crate::layout::Geometry, free: &[u32]) -> Placement {
        Placement {
            block_count: geo.block_count,
            groups: geo.groups,
            per_group: geo.bpg,
            maxbpg: geo.maxbpg,
            data_start: (0..geo.groups).map(|g| geo.data_start(g)).collect(),
            free: free.iter().map(|&f| AtomicU32::new(f)).collect(),
        }
    }

    pub(crate) fn set_free(&self, group: u32, free: u32) {
        if let Some(f) = self.free.get(group as usize) {
            f.store(free, Ordering::Relaxed);
        }
    }

    /// Free blocks of a group, as of the last change.
    pub fn free(&self, group: u32) -> u32 {
        self.free.get(group as usize).map_or(0, |f| f.load(Ordering::Relaxed))
    }

    /// The first data block of a group.
    pub fn data_start(&self, group: u32) -> u64 {
        self.data_start[(group.min(self.groups - 1)) as usize]
    }

    pub fn group_of(&self, block: u64) -> u32 {
        ((block / self.per_group) as u32).min(self.groups - 1)
    }

    /// True if a policy's answer can be used: a block of the file system other than block 0.
    pub fn valid(&self, block: u64) -> bool {
        block >= 1 && block < self.block_count
    }
}

/// Position of file block `index` within the indirect block that maps it (FFS's `indx`), or the
/// index itself for a direct block.
pub fn slot_in_indirect(index: u64) -> u64 {
    if index < NDIRECT {
        index
    } else {
        (index - NDIRECT) % NINDIRECT
    }
}

/// FFS's placement (see the module documentation).
pub fn ffs_policy(env: &Placement, a: &BuddyArgs) -> u64 {
    let inode_group = a.group.min(env.groups - 1);
    let maxbpg = env.maxbpg.max(1);
    let boundary = slot_in_indirect(a.index).is_multiple_of(maxbpg);
    let prev_ok = a.prev != 0 && env.valid(a.prev);
    if !boundary && prev_ok && a.prev + 1 < env.block_count {
        return a.prev + 1;
    }
    if a.index < NDIRECT {
        // A direct block with no usable predecessor: the start of the inode's group (FFS).
        return if prev_ok && a.prev + 1 < env.block_count {
            a.prev + 1
        } else {
            env.data_start(inode_group)
        };
    }
    let groups = u64::from(env.groups);
    let start = if prev_ok && groups > 1 {
        (u64::from(env.group_of(a.prev)) + 1) % groups
    } else {
        (u64::from(inode_group) + a.index / maxbpg) % groups
    };
    let total: u64 = (0..env.groups).map(|g| u64::from(env.free(g))).sum();
    let average = total / groups;
    for i in 0..groups {
        let g = ((start + i) % groups) as u32;
        let free = u64::from(env.free(g));
        if free > 0 && free >= average {
            return env.data_start(g);
        }
    }
    env.data_start(start as u32)
}

/// NoSwitch: block 12 goes right after block 11; everything else as FFS.
pub fn no_switch_policy(env: &Placement, a: &BuddyArgs) -> u64 {
    if a.index == NDIRECT && a.prev != 0 && env.valid(a.prev + 1) {
        a.prev + 1
    } else {
        ffs_policy(env, a)
    }
}

/// NoSwitch as a trusted native policy, for the protected-versus-unprotected comparison.
pub struct NoSwitch;

impl NativePolicy<BlockBuddy> for NoSwitch {
    fn decide(&self, env: &Placement, a: &BuddyArgs) -> Result<u64, Invalid> {
        Ok(no_switch_policy(env, a))
    }
}

/// `file.block_buddy`: where to put a block of a file being allocated.
///
/// It is asked under the file system's lock, which every user's metadata changes need: so its
/// budget is the kernel paths' small one (about 100 µs of work), an instance found busy (its
/// owner in a control call) leaves the choice to the default at once, and its answer is only a
/// preference that the allocator checks and may pass over.
///
/// Graft entry point: `file_block_buddy(ino: i64, index: i64, prev: i64, group: i32, groups: i32,
/// per_group: i64) -> i64`. Result: a preferred device block in `[1, block_count)`, or 0 for "no
/// preference" (the default decides, and the call counts as a success). Anything else is
/// invalid: the default decides and the failure is counted.
pub struct BlockBuddy;

impl GraftPoint for BlockBuddy {
    const NAME: &'static str = "file.block_buddy";
    type Env = Placement;
    type Args<'a> = BuddyArgs;
    type Output = u64;
    type Params = (i64, i64, i64, i32, i32, i64);
    type Results = i64;

    fn default_policy(env: &Placement, a: &BuddyArgs) -> u64 {
        ffs_policy(env, a)
    }

    fn encode(env: &Placement, a: &BuddyArgs, _: &mut [u8]) -> Self::Params {
        (
            a.ino as i64,
            a.index as i64,
            a.prev as i64,
            a.group as i32,
            env.groups as i32,
            env.per_group as i64,
        )
    }

    fn decode(env: &Placement, a: &BuddyArgs, r: i64, _: &[u8]) -> Result<u64, Invalid> {
        if r == 0 {
            return Ok(ffs_policy(env, a));
        }
        if r > 0 && env.valid(r as u64) {
            Ok(r as u64)
        } else {
            Err(Invalid(format!(
                "preferred block {r} is outside the file system (1..{})",
                env.block_count
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Geometry, STATE_CLEAN, Superblock};

    fn env(free: &[u32]) -> Placement {
        let g = Geometry::new(&Superblock {
            block_count: 4096,
            blocks_per_group: 1024,
            inodes_per_group: 64,
            groups: 4,
            journal_blocks: 128,
            maxbpg: 256,
            fs_id: 1,
            state: STATE_CLEAN,
            mount_count: 0,
            created_ns: 0,
            mounted_ns: 0,
        })
        .unwrap();
        Placement::new(&g, free)
    }

    fn args(index: u64, prev: u64, group: u32) -> BuddyArgs {
        BuddyArgs {
            ino: 5,
            index,
            prev,
            group,
        }
    }

    #[test]
    fn ffs_places_direct_blocks_contiguously_in_the_inode_group() {
        let e = env(&[900, 1000, 1000, 1000]);
        assert_eq!(ffs_policy(&e, &args(0, 0, 1)), e.data_start(1));
        assert_eq!(ffs_policy(&e, &args(5, 1500, 1)), 1501);
    }

    #[test]
    fn ffs_switches_at_the_first_indirect_block_and_every_maxbpg() {
        let e = env(&[900, 1000, 500, 1000]);
        // Block 12 of a file in group 1: the next group with at least the average free (850)
        // after group 1 is group 3 (group 2 is below average).
        assert_eq!(ffs_policy(&e, &args(12, 1100, 1)), e.data_start(3));
        assert_eq!(ffs_policy(&e, &args(13, 3100, 1)), 3101);
        assert_eq!(
            ffs_policy(&e, &args(12 + 256, 3300, 1)),
            e.data_start(0),
            "wraps to group 0 (900 free)"
        );
        assert_eq!(no_switch_policy(&e, &args(12, 1100, 1)), 1101);
        assert_eq!(
            no_switch_policy(&e, &args(12 + 256, 3300, 1)),
            e.data_start(0),
            "later switches stay"
        );
    }

    #[test]
    fn graft_answers_are_checked() {
        let e = env(&[900, 1000, 1000, 1000]);
        let a = args(12, 1100, 1);
        assert_eq!(BlockBuddy::decode(&e, &a, 0, &[]), Ok(ffs_policy(&e, &a)));
        assert_eq!(BlockBuddy::decode(&e, &a, 1101, &[]), Ok(1101));
        assert!(BlockBuddy::decode(&e, &a, -1, &[]).is_err());
        assert!(BlockBuddy::decode(&e, &a, 4096, &[]).is_err());
        assert_eq!(BlockBuddy::encode(&e, &a, &mut []), (5, 12, 1100, 1, 4, 1024));
    }
}
