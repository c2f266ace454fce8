//! An interval tree of every lock held on one object, for conflict searches across owners.
//!
//! A treap keyed by `(start, owner)` (unique: one owner's locks are disjoint), each node
//! augmented with the greatest end in its subtree. A search for locks overlapping a range skips
//! every subtree whose greatest end is at or before the range's start, and everything right of a
//! node that starts at or after its end: finding the first match costs O(log n), and each further
//! overlapping lock it passes over costs at most O(log n) more. Priorities are hashed from the
//! key with a per-tree random key, so the tree stays balanced (expected depth O(log n)) whatever
//! ranges a user picks.

use crate::range::{Lock, LockKind, Range};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

type Link = Option<Box<Node>>;

struct Node {
    lock: Lock,
    prio: u64,
    /// Greatest `range.end` in this subtree.
    max_end: u64,
    left: Link,
    right: Link,
}

impl Node {
    fn key(&self) -> (u64, u64) {
        (self.lock.range.start, self.lock.owner)
    }

    fn fix(&mut self) {
        self.max_end = self.lock.range.end.max(max_end(&self.left)).max(max_end(&self.right));
    }
}

fn max_end(t: &Link) -> u64 {
    t.as_ref().map_or(0, |n| n.max_end)
}

/// The tree; see the module documentation.
#[derive(Default)]
pub(crate) struct Tree {
    root: Link,
    hasher: RandomState,
}

impl Tree {
    pub(crate) fn insert(&mut self, lock: Lock) {
        let key = (lock.range.start, lock.owner);
        let node = Box::new(Node {
            lock,
            prio: self.hasher.hash_one(key),
            max_end: lock.range.end,
            left: None,
            right: None,
        });
        let (l, r) = split(self.root.take(), &|k| k < key);
        self.root = merge(merge(l, Some(node)), r);
    }

    /// Removes the lock of `owner` starting at `start`, if any.
    pub(crate) fn remove(&mut self, start: u64, owner: u64) {
        let key = (start, owner);
        let (l, rest) = split(self.root.take(), &|k| k < key);
        let (_gone, r) = split(rest, &|k| k == key);
        self.root = merge(l, r);
    }

    /// The first lock (by start) overlapping `range` for which `want` holds.
    pub(crate) fn find(&self, range: &Range, want: &mut impl FnMut(&Lock) -> bool) -> Option<Lock> {
        find(&self.root, range, want)
    }

    /// Checks the tree's own invariants (order, heap order, augmentation); returns its size.
    pub(crate) fn check(&self) -> usize {
        check(&self.root, None, None).0
    }
}

/// Splits `t` into the keys for which `left` holds (a prefix of the order) and the rest.
fn split(t: Link, left: &impl Fn((u64, u64)) -> bool) -> (Link, Link) {
    let Some(mut n) = t else { return (None, None) };
    if left(n.key()) {
        let (l, r) = split(n.right.take(), left);
        n.right = l;
        n.fix();
        (Some(n), r)
    } else {
        let (l, r) = split(n.left.take(), left);
        n.left = r;
        n.fix();
        (l, Some(n))
    }
}

/// Joins two trees, every key of `a` before every key of `b`.
fn merge(a: Link, b: Link) -> Link {
    match (a, b) {
        (None, t) | (t, None) => t,
        (Some(mut a), Some(mut b)) => {
            if a.prio >= b.prio {
                a.right = merge(a.right.take(), Some(b));
                a.fix();
                Some(a)
            } else {
                b.left = merge(Some(a), b.left.take());
                b.fix();
                Some(b)
            }
        }
    }
}

fn find(t: &Link, range: &Range, want: &mut impl FnMut(&Lock) -> bool) -> Option<Lock> {
    let n = t.as_deref()?;
    if n.max_end <= range.start {
        return None;
    }
    if let Some(l) = find(&n.left, range, want) {
        return Some(l);
    }
    if n.lock.range.start >= range.end {
        // Everything to the right starts later still.
        return None;
    }
    if n.lock.range.end > range.start && want(&n.lock) {
        return Some(n.lock);
    }
    find(&n.right, range, want)
}

/// (size, greatest end) of a subtree, panicking on a broken invariant.
fn check(t: &Link, lo: Option<(u64, u64)>, hi: Option<(u64, u64)>) -> (usize, u64) {
    let Some(n) = t.as_deref() else { return (0, 0) };
    let k = n.key();
    assert!(
        lo.is_none_or(|lo| lo < k) && hi.is_none_or(|hi| k < hi),
        "tree keys out of order at {k:?}"
    );
    for c in [&n.left, &n.right].into_iter().flatten() {
        assert!(c.prio <= n.prio, "tree heap order broken at {k:?}");
    }
    let (ls, le) = check(&n.left, lo, Some(k));
    let (rs, re) = check(&n.right, Some(k), hi);
    let max = n.lock.range.end.max(le).max(re);
    assert_eq!(max, n.max_end, "tree augmentation stale at {k:?}");
    (ls + rs + 1, max)
}

/// True if a lock of another owner overlapping the request conflicts with it.
pub(crate) fn conflicts(l: &Lock, owner: u64, kind: LockKind) -> bool {
    l.owner != owner && (l.kind == LockKind::Write || kind == LockKind::Write)
}
