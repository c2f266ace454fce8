//! Byte ranges, locks, and the per-object set of held locks with POSIX's replace-on-relock rule.

use serde::Serialize;

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

/// Sets `owner`'s lock on `range` to `kind` (`None`: unlocks it), replacing whatever the owner
/// held there: its locks are split around the range, and adjacent locks of the same kind merge.
/// Other owners' locks are left alone (the caller has checked conflicts).
pub fn set_lock(held: &mut Vec<Lock>, owner: u64, kind: Option<LockKind>, range: Range) {
    let mut out = Vec::with_capacity(held.len() + 2);
    for l in held.drain(..) {
        if l.owner != owner || !l.range.overlaps(&range) {
            out.push(l);
            continue;
        }
        if l.range.start < range.start {
            out.push(Lock {
                range: Range {
                    start: l.range.start,
                    end: range.start,
                },
                ..l
            });
        }
        if l.range.end > range.end {
            out.push(Lock {
                range: Range {
                    start: range.end,
                    end: l.range.end,
                },
                ..l
            });
        }
    }
    if let Some(kind) = kind {
        out.push(Lock { owner, kind, range });
    }
    out.sort_by_key(|l| (l.owner, l.range.start));
    for l in out {
        match held.last_mut() {
            Some(prev) if prev.owner == l.owner && prev.kind == l.kind && prev.range.end == l.range.start => {
                prev.range.end = l.range.end;
            }
            _ => held.push(l),
        }
    }
    debug_assert!(owners_disjoint(held), "an owner's locks overlap: {held:?}");
}

/// Invariant: one owner's locks never overlap each other.
fn owners_disjoint(held: &[Lock]) -> bool {
    held.windows(2)
        .all(|w| w[0].owner != w[1].owner || w[0].range.end <= w[1].range.start)
}

/// The first lock of another owner that conflicts with a request.
pub fn first_conflict<'a>(held: &'a [Lock], owner: u64, kind: LockKind, range: &Range) -> Option<&'a Lock> {
    held.iter().find(|l| l.conflicts(owner, kind, range))
}

/// True if `owner`'s locks already give it `kind` (or more) over all of `range`: granting the
/// request changes nothing or only weakens a write lock, so it never has to wait.
pub fn already_covered(held: &[Lock], owner: u64, kind: LockKind, range: &Range) -> bool {
    let mut at = range.start;
    let mut mine: Vec<&Lock> = held
        .iter()
        .filter(|l| {
            l.owner == owner && l.range.overlaps(range) && (kind == LockKind::Read || l.kind == LockKind::Write)
        })
        .collect();
    mine.sort_by_key(|l| l.range.start);
    for l in mine {
        if l.range.start > at {
            return false;
        }
        at = at.max(l.range.end);
        if at >= range.end {
            return true;
        }
    }
    at >= range.end
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
        let mut held = Vec::new();
        set_lock(&mut held, 1, Some(Read), r(0, 100));
        set_lock(&mut held, 1, Some(Write), r(40, 60));
        assert_eq!(held.len(), 3);
        set_lock(&mut held, 1, Some(Read), r(40, 60));
        assert_eq!(
            held,
            vec![Lock {
                owner: 1,
                kind: Read,
                range: r(0, 100)
            }],
            "downgrade merges back"
        );
        set_lock(&mut held, 1, None, r(10, 20));
        assert_eq!(held.len(), 2);
        set_lock(&mut held, 1, None, Range::all());
        assert!(held.is_empty());
    }

    #[test]
    fn coverage() {
        let mut held = Vec::new();
        set_lock(&mut held, 1, Some(Write), r(0, 10));
        set_lock(&mut held, 1, Some(Read), r(10, 20));
        assert!(already_covered(&held, 1, Read, &r(0, 20)));
        assert!(!already_covered(&held, 1, Write, &r(0, 20)));
        assert!(already_covered(&held, 1, Write, &r(2, 8)));
        assert!(!already_covered(&held, 2, Read, &r(2, 8)));
        assert!(!already_covered(&held, 1, Read, &r(0, TO_EOF)));
        assert_eq!(Range::new(5, 0), Some(r(5, TO_EOF)));
        assert_eq!(Range::new(u64::MAX, 2), None);
    }
}
