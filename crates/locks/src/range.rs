//! Byte ranges, locks, and the per-object set of held locks with POSIX's replace-on-relock rule.

use crate::tree::{self, Tree};
use serde::Serialize;
use std::collections::BTreeMap;
use std::ops::Bound::Excluded;

/// End of a range that runs to infinity (a request with length 0).
pub const TO_EOF: u64 = u64::MAX;

/// Shared (read) or exclusive (write).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum LockKind {
    Read,
    Write,
}

/// Bytes `[start, end)` of an object; `end == TO_EOF` means to infinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Range {
    pub start: u64,
    pub end: u64,
}

impl Range {
    /// The range of an fcntl request: `len` bytes from `start`, 0 meaning to infinity. `None` if
    /// it would run past the largest offset.
    pub fn new(start: u64, len: u64) -> Option<Range> {
        if len == 0 {
            return Some(Range { start, end: TO_EOF });
        }
        start.checked_add(len).map(|end| Range { start, end })
    }

    /// Everything: `[0, infinity)`.
    pub fn all() -> Range {
        Range { start: 0, end: TO_EOF }
    }

    pub fn overlaps(&self, o: &Range) -> bool {
        self.start < o.end && o.start < self.end
    }

    /// True if `o` lies within this range.
    pub fn covers(&self, o: &Range) -> bool {
        self.start <= o.start && o.end <= self.end
    }

    /// Length as fcntl reports it: 0 for a range to infinity.
    pub fn len(&self) -> u64 {
        if self.end == TO_EOF { 0 } else { self.end - self.start }
    }

    pub fn is_empty(&self) -> bool {
        self.start >= self.end
    }
}

/// A lock held (or requested) by one owner on a range of one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Lock {
    pub owner: u64,
    pub kind: LockKind,
    pub range: Range,
}

impl Lock {
    /// POSIX: locks of one owner never conflict; others conflict where they overlap and one of
    /// them is a write lock.
    pub fn conflicts(&self, owner: u64, kind: LockKind, range: &Range) -> bool {
        self.owner != owner && self.range.overlaps(range) && (self.kind == LockKind::Write || kind == LockKind::Write)
    }
}

/// The locks held on one object, kept two ways: each owner's by start (disjoint, adjacent ones
/// of one kind merged), where relocking finds what it splits and merges from the predecessor of
/// the range in O(log n + k); and all of them in an interval tree ([`crate::tree`]), where a
/// conflict search across owners costs O(log n) plus O(log n) per overlapping lock it passes
/// over. Space is O(n).
#[derive(Default)]
pub struct Held {
    owners: BTreeMap<u64, BTreeMap<u64, (u64, LockKind)>>,
    tree: Tree,
    len: usize,
}

/// What setting one owner's lock on a range changes: locks removed, then locks added (those
/// the change leaves as they were are in neither).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    owner: u64,
    remove: Vec<Lock>,
    add: Vec<Lock>,
}

impl Change {
    /// How many more locks the owner holds after the change (negative: fewer). A lock request
    /// adds at most 2 (splitting one lock in three), an unlock at most 1.
    pub fn delta(&self) -> i64 {
        self.add.len() as i64 - self.remove.len() as i64
    }

    /// True if the change leaves the locks as they were.
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.remove.is_empty()
    }
}

impl Held {
    /// Locks held, over all owners.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every lock, ordered by owner and start.
    pub fn iter(&self) -> impl Iterator<Item = Lock> + '_ {
        self.owners
            .iter()
            .flat_map(|(&owner, m)| m.iter().map(move |(&s, &(e, k))| lock(owner, k, s, e)))
    }

    pub fn to_vec(&self) -> Vec<Lock> {
        self.iter().collect()
    }

    /// The owners holding a lock here.
    pub fn holders(&self) -> impl Iterator<Item = u64> + '_ {
        self.owners.keys().copied()
    }

    /// How many locks `owner` holds here.
    pub fn count(&self, owner: u64) -> usize {
        self.owners.get(&owner).map_or(0, BTreeMap::len)
    }

    /// The first lock (by start) of another owner that conflicts with a request.
    pub fn first_conflict(&self, owner: u64, kind: LockKind, range: &Range) -> Option<Lock> {
        self.tree.find(range, &mut |l| tree::conflicts(l, owner, kind))
    }

    /// The owners whose locks conflict with a request, each once.
    pub fn conflicting_owners(&self, owner: u64, kind: LockKind, range: &Range) -> Vec<u64> {
        let mut found = Vec::new();
        self.tree.find(range, &mut |l| {
            if tree::conflicts(l, owner, kind) {
                found.push(l.owner);
            }
            false
        });
        found.sort_unstable();
        found.dedup();
        found
    }

    /// Every lock overlapping `range`, by start.
    pub fn overlapping(&self, range: &Range) -> Vec<Lock> {
        let mut found = Vec::new();
        self.tree.find(range, &mut |l| {
            found.push(*l);
            false
        });
        found
    }

    /// `owner`'s locks overlapping `range`, by start.
    pub fn mine(&self, owner: u64, range: &Range) -> impl Iterator<Item = Lock> + '_ {
        let range = *range;
        let m = self.owners.get(&owner).filter(|_| !range.is_empty());
        let first = m
            .and_then(|m| m.range(..=range.start).next_back())
            .filter(|(_, (end, _))| *end > range.start);
        let rest = m
            .into_iter()
            .flat_map(move |m| m.range((Excluded(range.start), Excluded(range.end))));
        first
            .into_iter()
            .chain(rest)
            .map(move |(&s, &(e, k))| lock(owner, k, s, e))
    }

    /// True if `owner`'s locks already give it `kind` (or more) over all of `range`: granting the
    /// request changes nothing or only weakens a write lock, so it never has to wait.
    pub fn covered(&self, owner: u64, kind: LockKind, range: &Range) -> bool {
        let mut at = range.start;
        for l in self.mine(owner, range) {
            if l.range.start > at || (kind == LockKind::Write && l.kind == LockKind::Read) {
                return false;
            }
            at = l.range.end;
            if at >= range.end {
                return true;
            }
        }
        at >= range.end
    }

    /// What setting `owner`'s lock on `range` to `kind` (`None`: unlocking it) would change:
    /// its locks are split around the range, and adjacent locks of the same kind merge. Other
    /// owners' locks are left alone (the caller has checked conflicts).
    pub fn plan(&self, owner: u64, kind: Option<LockKind>, range: Range) -> Change {
        let mut change = Change {
            owner,
            remove: Vec::new(),
            add: Vec::new(),
        };
        let Some(m) = self.owners.get(&owner).filter(|_| !range.is_empty()) else {
            change.add.extend(
                kind.filter(|_| !range.is_empty())
                    .map(|k| lock(owner, k, range.start, range.end)),
            );
            return change;
        };
        // The locks the range overlaps, and the neighbours that end or start right at its edges.
        let left = m
            .range(..range.start)
            .next_back()
            .filter(|(_, (e, _))| *e >= range.start);
        let mut pieces = Vec::new();
        for (&s, &(e, k)) in left.into_iter().chain(m.range(range.start..=range.end)) {
            let l = lock(owner, k, s, e);
            change.remove.push(l);
            if !l.range.overlaps(&range) {
                pieces.push(l);
                continue;
            }
            if s < range.start {
                pieces.push(lock(owner, k, s, range.start));
            }
            if e > range.end {
                pieces.push(lock(owner, k, range.end, e));
            }
        }
        pieces.extend(kind.map(|k| lock(owner, k, range.start, range.end)));
        pieces.sort_by_key(|l| l.range.start);
        for l in pieces {
            match change.add.last_mut() {
                Some(prev) if prev.kind == l.kind && prev.range.end == l.range.start => prev.range.end = l.range.end,
                _ => change.add.push(l),
            }
        }
        // A neighbour nothing merged with stays as it is.
        let (remove, add) = (std::mem::take(&mut change.remove), std::mem::take(&mut change.add));
        change.remove = remove.iter().filter(|l| !add.contains(l)).copied().collect();
        change.add = add.into_iter().filter(|l| !remove.contains(l)).collect();
        change
    }

    /// Makes a planned change (planned on this state).
    pub fn apply(&mut self, change: Change) {
        let owner = change.owner;
        let m = self.owners.entry(owner).or_default();
        for l in &change.remove {
            m.remove(&l.range.start);
            self.tree.remove(l.range.start, owner);
        }
        for l in &change.add {
            m.insert(l.range.start, (l.range.end, l.kind));
            self.tree.insert(*l);
        }
        if m.is_empty() {
            self.owners.remove(&owner);
        }
        self.len = (self.len + change.add.len()) - change.remove.len();
    }

    /// Sets `owner`'s lock on `range` to `kind` (`None`: unlocks it); see [`Held::plan`].
    /// Returns how many more locks the owner holds.
    pub fn set(&mut self, owner: u64, kind: Option<LockKind>, range: Range) -> i64 {
        let change = self.plan(owner, kind, range);
        let delta = change.delta();
        self.apply(change);
        delta
    }

    /// Checks that no two owners hold conflicting locks, that each owner's locks are non-empty,
    /// disjoint and merged, and that the tree holds exactly them; panics naming what broke.
    pub fn check(&self, object: u64) {
        let mut n = 0;
        for (&owner, m) in &self.owners {
            assert!(!m.is_empty(), "object {object}: owner {owner} has an empty entry");
            let mut prev: Option<Lock> = None;
            for (&s, &(e, k)) in m {
                let l = lock(owner, k, s, e);
                assert!(s < e, "object {object}: empty lock {l:?}");
                if let Some(p) = prev {
                    assert!(
                        p.range.end <= s,
                        "object {object}: an owner's locks overlap: {p:?}, {l:?}"
                    );
                    assert!(
                        p.kind != k || p.range.end < s,
                        "object {object}: adjacent locks of one kind not merged: {p:?}, {l:?}"
                    );
                }
                let same = self.tree.find(&l.range, &mut |t| *t == l);
                assert_eq!(same, Some(l), "object {object}: {l:?} is missing from the tree");
                if let Some(c) = self.first_conflict(owner, k, &l.range) {
                    panic!("object {object}: conflicting locks held: {l:?} and {c:?}");
                }
                prev = Some(l);
                n += 1;
            }
        }
        assert_eq!(n, self.len, "object {object}: lock count is off");
        assert_eq!(self.tree.check(), n, "object {object}: the tree holds other locks");
    }
}

fn lock(owner: u64, kind: LockKind, start: u64, end: u64) -> Lock {
    Lock {
        owner,
        kind,
        range: Range { start, end },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LockKind::{Read, Write};

    fn r(start: u64, end: u64) -> Range {
        Range { start, end }
    }

    #[test]
    fn relocking_splits_and_merges() {
        let mut held = Held::default();
        assert_eq!(held.set(1, Some(Read), r(0, 100)), 1);
        assert_eq!(held.set(1, Some(Write), r(40, 60)), 2);
        assert_eq!(held.len(), 3);
        assert_eq!(held.set(1, Some(Read), r(40, 60)), -2);
        assert_eq!(held.to_vec(), vec![lock(1, Read, 0, 100)], "downgrade merges back");
        assert_eq!(held.set(1, None, r(10, 20)), 1);
        assert_eq!(held.len(), 2);
        assert_eq!(held.set(1, None, Range::all()), -2);
        assert!(held.is_empty());
        held.check(0);
    }

    #[test]
    fn coverage() {
        let mut held = Held::default();
        held.set(1, Some(Write), r(0, 10));
        held.set(1, Some(Read), r(10, 20));
        assert!(held.covered(1, Read, &r(0, 20)));
        assert!(!held.covered(1, Write, &r(0, 20)));
        assert!(held.covered(1, Write, &r(2, 8)));
        assert!(!held.covered(2, Read, &r(2, 8)));
        assert!(!held.covered(1, Read, &r(0, TO_EOF)));
        assert_eq!(Range::new(5, 0), Some(r(5, TO_EOF)));
        assert_eq!(Range::new(u64::MAX, 2), None);
    }

    #[test]
    fn an_empty_range_changes_nothing() {
        let mut held = Held::default();
        held.set(1, Some(Read), r(0, 10));
        assert_eq!(held.set(1, None, r(u64::MAX, u64::MAX)), 0);
        assert_eq!(held.mine(1, &r(5, 5)).count(), 0);
        assert_eq!(held.len(), 1);
    }
}
