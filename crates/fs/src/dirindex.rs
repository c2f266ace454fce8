//! Directories indexed in memory: name -> (block of the directory, inode), and the room left in
//! each block, so that a lookup, a create or an unlink in a directory of n names costs one hash
//! lookup and at most one block parsed, not a scan of all n names.
//!
//! On disk a directory stays a list of ext2-style records (fsck, the journal and older images
//! are unchanged); the index is built from the blocks the first time a directory is used, kept
//! in step by every change the file system makes to a directory, and thrown away when an
//! operation that changed the directory rolls back (the blocks go back to their old images and
//! the index is rebuilt from them on next use). Linux's dcache plays this part for ext2; ext4's
//! htree puts a hash index on disk instead, which would make the format and fsck larger for
//! the same effect on a file system whose metadata is cached anyway.
//!
//! The memory is bounded: at most [`MAX_INDEXED_NAMES`] names (plus the one directory in use),
//! the least recently used directories dropped first.

use crate::layout::DirRecord;
use std::collections::HashMap;

/// Names held by all indexes together before the least recently used are dropped.
pub const MAX_INDEXED_NAMES: usize = 1 << 19;

/// Where a name lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The directory's file block that holds the entry.
    pub fb: u64,
    pub ino: u32,
}

/// The index of one directory.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DirIdx {
    names: HashMap<Box<[u8]>, Slot>,
    /// Per file block: the longest record a new entry could take there.
    room: Vec<usize>,
    /// Names other than `.` and `..`.
    live: usize,
    used: u64,
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// The longest entry a parsed block could still take (what [`crate::layout::dir_add`] checks).
pub fn room_of(records: &[DirRecord]) -> usize {
    records.iter().map(DirRecord::room).max().unwrap_or(0)
}

impl DirIdx {
    /// Adds the block `fb` (blocks are added in order, each once), parsed from `block`.
    pub fn add_block(&mut self, fb: u64, block: &[u8], records: &[DirRecord]) {
        let names = records.iter().filter(|r| r.ino != 0).map(|r| (r.name(block), r.ino));
        self.add_names(fb, room_of(records), names);
    }

    /// Adds block `fb`, which has `room` bytes for a new entry and holds `names`.
    fn add_names<'a>(&mut self, fb: u64, room: usize, names: impl Iterator<Item = (&'a [u8], u32)>) {
        assert_eq!(fb, self.room.len() as u64, "directory blocks are indexed in order");
        self.room.push(room);
        for (name, ino) in names {
            self.insert(name, Slot { fb, ino });
        }
    }

    pub fn get(&self, name: &[u8]) -> Option<Slot> {
        self.names.get(name).copied()
    }

    /// The first block with room for an entry of `need` bytes.
    pub fn block_with_room(&self, need: usize) -> Option<u64> {
        self.room.iter().position(|&r| r >= need).map(|fb| fb as u64)
    }

    pub fn blocks(&self) -> u64 {
        self.room.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// The same names, blocks and room as `other` (its use stamp aside).
    pub fn same_as(&self, other: &DirIdx) -> bool {
        self.names == other.names && self.room == other.room && self.live == other.live
    }

    fn insert(&mut self, name: &[u8], slot: Slot) {
        let old = self.names.insert(name.into(), slot);
        if old.is_none() && !is_dot(name) {
            self.live += 1;
        }
    }

    fn remove(&mut self, name: &[u8]) {
        if self.names.remove(name).is_some() && !is_dot(name) {
            self.live -= 1;
        }
    }

    fn set_room(&mut self, fb: u64, room: usize) {
        let fb = fb as usize;
        if fb == self.room.len() {
            self.room.push(room);
        } else {
            self.room[fb] = room;
        }
    }
}

/// The indexes of the directories in use, and which ones the running operation changed.
#[derive(Debug, Default)]
pub struct DirIndex {
    dirs: HashMap<u64, DirIdx>,
    names: usize,
    clock: u64,
    changed: Vec<u64>,
}

impl DirIndex {
    /// The index of `dir`, if built; marks it used.
    pub fn get(&mut self, dir: u64) -> Option<&DirIdx> {
        self.clock += 1;
        let clock = self.clock;
        self.dirs.get_mut(&dir).map(|d| {
            d.used = clock;
            &*d
        })
    }

    /// Keeps a freshly built index, dropping the least recently used others past the bound.
    pub fn insert(&mut self, dir: u64, mut idx: DirIdx) {
        self.forget(dir);
        self.clock += 1;
        idx.used = self.clock;
        self.names += idx.len();
        self.dirs.insert(dir, idx);
        while self.names > MAX_INDEXED_NAMES && self.dirs.len() > 1 {
            let oldest = self
                .dirs
                .iter()
                .filter(|&(&d, _)| d != dir)
                .min_by_key(|(_, i)| i.used)
                .map(|(&d, _)| d)
                .expect("another directory is indexed");
            self.forget(oldest);
        }
    }

    /// Drops the index of `dir` (freed, or changed by an operation that rolled back).
    pub fn forget(&mut self, dir: u64) {
        if let Some(idx) = self.dirs.remove(&dir) {
            self.names -= idx.len();
        }
    }

    /// A name was added to block `fb` of `dir`, which now has `room` left.
    pub fn added(&mut self, dir: u64, name: &[u8], slot: Slot, room: usize) {
        self.change(dir, |idx| {
            idx.insert(name, slot);
            idx.set_room(slot.fb, room);
        });
    }

    /// A name was removed from block `fb` of `dir`, which now has `room` left.
    pub fn removed(&mut self, dir: u64, name: &[u8], fb: u64, room: usize) {
        self.change(dir, |idx| {
            idx.remove(name);
            idx.set_room(fb, room);
        });
    }

    /// A name of `dir` now names another inode.
    pub fn retargeted(&mut self, dir: u64, name: &[u8], ino: u32) {
        self.change(dir, |idx| {
            if let Some(slot) = idx.names.get_mut(name) {
                slot.ino = ino;
            }
        });
    }

    fn change(&mut self, dir: u64, f: impl FnOnce(&mut DirIdx)) {
        self.changed.push(dir);
        if let Some(idx) = self.dirs.get_mut(&dir) {
            let before = idx.len();
            f(idx);
            self.names = self.names + idx.len() - before;
        }
    }

    /// An operation begins: nothing changed yet.
    pub fn begin_op(&mut self) {
        self.changed.clear();
    }

    /// The running operation rolled back: the directories it changed are as before on disk,
    /// so their indexes go.
    pub fn rollback(&mut self) {
        for dir in std::mem::take(&mut self.changed) {
            self.forget(dir);
        }
    }

    /// Checks the bookkeeping: the name count matches the indexes.
    pub fn check(&self) {
        let names: usize = self.dirs.values().map(DirIdx::len).sum();
        assert_eq!(names, self.names, "the directory index's name count drifted");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_rooms_and_rollback() {
        let mut index = DirIndex::default();
        let mut idx = DirIdx::default();
        let names: [(&[u8], u32); 3] = [(b".", 2), (b"..", 2), (b"a", 5)];
        idx.add_names(0, 8, names.into_iter());
        assert!(!idx.is_empty());
        assert_eq!(idx.block_with_room(8), Some(0));
        assert_eq!(idx.block_with_room(64), None);
        index.insert(2, idx);
        index.begin_op();
        index.added(2, b"b", Slot { fb: 1, ino: 6 }, 100);
        assert_eq!(index.get(2).unwrap().get(b"b"), Some(Slot { fb: 1, ino: 6 }));
        assert_eq!(index.get(2).unwrap().block_with_room(64), Some(1));
        index.check();
        index.rollback();
        assert!(index.get(2).is_none(), "a rolled-back change drops the index");
        index.check();
    }

    #[test]
    fn the_bound_drops_the_least_recently_used() {
        let mut index = DirIndex::default();
        let big = |n: usize| {
            let mut idx = DirIdx::default();
            let names: Vec<Vec<u8>> = (0..n).map(|i| format!("n{i}").into_bytes()).collect();
            idx.add_names(0, 8, names.iter().map(|n| (&n[..], 10)));
            idx
        };
        index.insert(1, big(MAX_INDEXED_NAMES / 2));
        index.insert(2, big(MAX_INDEXED_NAMES / 2));
        index.get(1);
        index.insert(3, big(10));
        assert!(index.get(2).is_none(), "the least recently used went");
        assert!(index.get(1).is_some() && index.get(3).is_some());
        index.check();
    }
}
