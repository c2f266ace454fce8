//! The `lock.grant` graftpoint: which waiting lock requests to grant (Seltzer et al. 1995, 4.4).
//!
//! # The graft ABI
//!
//! `lock_grant(n: i32, m: i32) -> i64`. The argument area holds `n` (1..=64) waiting requests in
//! arrival order (entry 0 has waited longest), then `m` locks currently held on the object that
//! overlap one of those requests (the others cannot keep any of them waiting), each a 32-byte
//! [`vino_lock`](LockEntry) entry, little-endian:
//!
//! ```c
//! struct vino_lock {
//!     uint64_t owner;  /* process id */
//!     uint64_t start;  /* first byte */
//!     uint64_t end;    /* one past the last byte; UINT64_MAX: to infinity */
//!     uint32_t flags;  /* bit 0: write lock; bit 1: an upgrade (the owner holds a read lock there) */
//!     uint32_t age_us; /* waiters: microseconds waited so far (saturating); held locks: 0 */
//! };
//! ```
//!
//! The result is a bit mask of the waiters to grant: bit `i` grants entry `i`. The kernel grants
//! them in index order; each must conflict neither with a held lock of another owner nor with a
//! request granted before it in the same mask. A bit at or above `n`, a negative result or a
//! conflicting choice is invalid: the transaction aborts, the default decides, and the failure is
//! counted. 0 grants nothing; the kernel accepts that unless nobody who holds a lock on the
//! object could ever release it (nothing is held, or every holder is itself waiting here): then
//! the default decides, so no waiter is stranded whatever the graft does.
//!
//! # Policies
//!
//! * [`frp`], the default: FIFO/reader priority as BSD/OS approximates it. Every waiting reader
//!   that can be granted is; then writers in arrival order. An upgrading reader keeps its read
//!   lock while it waits, so other writers still conflict with it and it gets the write lock
//!   once the other readers are gone.
//! * [`fifo`]: strict arrival order. A request is granted only if no request that arrived
//!   earlier and overlaps it (and conflicts with it) still waits; upgrades go first, since every
//!   earlier writer waits for the upgrader's read lock anyway. Also as a C graft,
//!   `sdk/grafts/lock_fifo.c`, and as a native policy, [`Fifo`].

use crate::range::{Lock, LockKind, Range};
use std::sync::atomic::{AtomicUsize, Ordering};
use vino_graft::{CallError, Callables, Deferred, GraftPoint, Invalid, NativePolicy};

/// Most waiting requests offered to a policy in one call (the bits of the result).
pub const GRANT_MAX: usize = 64;
/// Bytes of one entry of the argument area.
pub const ENTRY_BYTES: usize = 32;
/// `flags` bit of a write lock or request.
pub const FLAG_WRITE: u32 = 1;
/// `flags` bit of an upgrade: the waiting owner holds a read lock overlapping the range.
pub const FLAG_UPGRADE: u32 = 2;

/// A waiting request as a policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitInfo {
    pub owner: u64,
    pub kind: LockKind,
    pub range: Range,
    /// The owner holds a read lock overlapping the range and asks for a write lock.
    pub upgrade: bool,
    /// Nanoseconds waited so far.
    pub age_ns: u64,
}

/// The arguments of `lock.grant`: the waiters in arrival order (at most [`GRANT_MAX`]) and the
/// locks held on the object (the manager passes those that overlap a waiter).
#[derive(Debug, Clone, Copy)]
pub struct GrantArgs<'a> {
    pub waiters: &'a [WaitInfo],
    pub held: &'a [Lock],
}

/// What a `lock.grant` policy knows besides its arguments: the object it decides for; and the
/// waiters its graft's committed calls moved, for the round that asked it to apply.
#[derive(Debug)]
pub struct GrantEnv {
    pub object: u64,
    requeues: Deferred<(usize, Requeue)>,
    /// How many waiters the running call was offered (set as each call begins, with the
    /// graft's instance held).
    offered: AtomicUsize,
}

impl GrantEnv {
    pub fn new(object: u64) -> Self {
        GrantEnv {
            object,
            // The round that asked takes them after each call: only calls racing past it
            // (another thread's round) wait longer.
            requeues: Deferred::new(REQUEUE_MAX, 4 * REQUEUE_MAX),
            offered: AtomicUsize::new(0),
        }
    }

    /// The committed requeues not applied yet: (index among the waiters offered, where to).
    pub fn take_requeues(&self) -> Vec<(usize, Requeue)> {
        self.requeues.take()
    }
}

impl Default for GrantEnv {
    fn default() -> Self {
        GrantEnv::new(0)
    }
}

/// Where `vino_lock_requeue` moves a waiter in its object's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// Ahead of every other waiter: offered first, and first in the default's order.
    Front,
    /// Behind every other waiter.
    Back,
}

/// Most `vino_lock_requeue` calls one `lock.grant` call may make.
pub const REQUEUE_MAX: usize = GRANT_MAX;

/// `vino_lock_requeue(index, place) -> 0 | -errno`: moves the waiter offered at `index` to the
/// front (`place` 0) or the back (1) of its object's queue. Checked now (`-EINVAL`: no such
/// waiter offered, an unknown place; `-ENOSPC`: more than [`REQUEUE_MAX`] in this call); done
/// when the call commits, after the grants its answer names, to the waiter if it still waits
/// (a round whose waiters changed while the graft ran drops them with its answer). A call that
/// fails afterwards has its moves dropped. The queue is the object's, whose policy the graft
/// already is: moving a waiter gives it no more than granting or passing it over does.
fn requeue(env: &GrantEnv, index: i32, place: i32) -> Result<i32, CallError> {
    const EINVAL: i32 = -22;
    const ENOSPC: i32 = -28;
    let place = match place {
        0 => Requeue::Front,
        1 => Requeue::Back,
        _ => return Ok(EINVAL),
    };
    let offered = env.offered.load(Ordering::Relaxed);
    let Some(index) = usize::try_from(index).ok().filter(|&i| i < offered) else {
        return Ok(EINVAL);
    };
    Ok(if env.requeues.ask((index, place)) { 0 } else { ENOSPC })
}

/// One entry of the argument area, decoded (tests and tools use it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockEntry {
    pub owner: u64,
    pub start: u64,
    pub end: u64,
    pub flags: u32,
    pub age_us: u32,
}

impl LockEntry {
    fn write_to(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.owner.to_le_bytes());
        out[8..16].copy_from_slice(&self.start.to_le_bytes());
        out[16..24].copy_from_slice(&self.end.to_le_bytes());
        out[24..28].copy_from_slice(&self.flags.to_le_bytes());
        out[28..32].copy_from_slice(&self.age_us.to_le_bytes());
    }

    /// Reads an entry back from 32 bytes of the argument area.
    pub fn read_from(b: &[u8]) -> LockEntry {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        LockEntry {
            owner: u64_at(0),
            start: u64_at(8),
            end: u64_at(16),
            flags: u32_at(24),
            age_us: u32_at(28),
        }
    }
}

fn kind_flag(kind: LockKind) -> u32 {
    if kind == LockKind::Write { FLAG_WRITE } else { 0 }
}

/// Copies waiters then held locks into the argument area; returns how many of each fit.
pub fn encode_grant(args: &GrantArgs<'_>, area: &mut [u8]) -> (i32, i32) {
    let n = args.waiters.len().min(GRANT_MAX).min(area.len() / ENTRY_BYTES);
    let m = args.held.len().min(area.len() / ENTRY_BYTES - n);
    let mut slots = area.chunks_exact_mut(ENTRY_BYTES);
    for w in &args.waiters[..n] {
        let flags = kind_flag(w.kind) | if w.upgrade { FLAG_UPGRADE } else { 0 };
        let age_us = (w.age_ns / 1000).min(u64::from(u32::MAX)) as u32;
        let e = LockEntry {
            owner: w.owner,
            start: w.range.start,
            end: w.range.end,
            flags,
            age_us,
        };
        e.write_to(slots.next().expect("counted"));
    }
    for l in &args.held[..m] {
        let e = LockEntry {
            owner: l.owner,
            start: l.range.start,
            end: l.range.end,
            flags: kind_flag(l.kind),
            age_us: 0,
        };
        e.write_to(slots.next().expect("counted"));
    }
    (n as i32, m as i32)
}

/// True if waiter `w` can be granted next to the held locks and the requests in `granted`.
fn grantable(w: &WaitInfo, held: &[Lock], granted: &[Lock]) -> bool {
    !held
        .iter()
        .chain(granted)
        .any(|l| l.conflicts(w.owner, w.kind, &w.range))
}

fn as_lock(w: &WaitInfo) -> Lock {
    Lock {
        owner: w.owner,
        kind: w.kind,
        range: w.range,
    }
}

/// Checks a grant mask: every bit names an offered waiter, and each granted request conflicts
/// with no held lock and no request granted before it. Returns the mask.
pub fn check_grant(args: &GrantArgs<'_>, mask: u64) -> Result<u64, Invalid> {
    let n = args.waiters.len().min(GRANT_MAX);
    if n < 64 && mask >> n != 0 {
        return Err(Invalid(format!(
            "grant mask {mask:#x} names a waiter beyond the {n} offered"
        )));
    }
    let mut granted = Vec::new();
    for (i, w) in args.waiters[..n].iter().enumerate() {
        if mask & (1 << i) == 0 {
            continue;
        }
        if !grantable(w, args.held, &granted) {
            return Err(Invalid(format!(
                "waiter {i} (owner {}, {:?} {}..{}) conflicts with a held or granted lock",
                w.owner, w.kind, w.range.start, w.range.end
            )));
        }
        granted.push(as_lock(w));
    }
    Ok(mask)
}

/// FIFO/reader priority, the default (see the module documentation).
pub fn frp(args: &GrantArgs<'_>) -> u64 {
    let waiters = &args.waiters[..args.waiters.len().min(GRANT_MAX)];
    let mut mask = 0u64;
    let mut granted = Vec::new();
    for kind in [LockKind::Read, LockKind::Write] {
        for (i, w) in waiters.iter().enumerate().filter(|(_, w)| w.kind == kind) {
            if grantable(w, args.held, &granted) {
                mask |= 1 << i;
                granted.push(as_lock(w));
            }
        }
    }
    mask
}

/// Strict FIFO (see the module documentation).
pub fn fifo(args: &GrantArgs<'_>) -> u64 {
    let waiters = &args.waiters[..args.waiters.len().min(GRANT_MAX)];
    let order = waiters
        .iter()
        .enumerate()
        .filter(|(_, w)| w.upgrade)
        .chain(waiters.iter().enumerate().filter(|(_, w)| !w.upgrade));
    let mut mask = 0u64;
    let mut granted = Vec::new();
    let mut still_waiting: Vec<Lock> = Vec::new();
    for (i, w) in order {
        if grantable(w, args.held, &granted) && grantable(w, &still_waiting, &[]) {
            mask |= 1 << i;
            granted.push(as_lock(w));
        } else {
            still_waiting.push(as_lock(w));
        }
    }
    mask
}

/// [`fifo`] as a native policy (the unprotected twin of `sdk/grafts/lock_fifo.c`).
pub struct Fifo;

impl NativePolicy<LockGrant> for Fifo {
    fn decide(&self, _: &GrantEnv, args: &GrantArgs<'_>) -> Result<u64, Invalid> {
        Ok(fifo(args))
    }
}

/// [`frp`] as a native policy (the same decisions as the default, counted as a binding).
pub struct Frp;

impl NativePolicy<LockGrant> for Frp {
    fn decide(&self, _: &GrantEnv, args: &GrantArgs<'_>) -> Result<u64, Invalid> {
        Ok(frp(args))
    }
}

/// `lock.grant`: which waiting lock requests on an object to grant now.
pub struct LockGrant;

impl GraftPoint for LockGrant {
    const NAME: &'static str = "lock.grant";
    const CALLABLE: &'static [&'static str] = &["vino_lock_requeue"];
    const USES_ARG_AREA: bool = true;
    const RECORDS_DEFAULT: bool = true;
    type Env = GrantEnv;
    type Args<'a> = GrantArgs<'a>;
    type Output = u64;
    type Params = (i32, i32);
    type Results = i64;

    fn default_policy(_: &GrantEnv, args: &GrantArgs<'_>) -> u64 {
        frp(args)
    }

    fn encode(env: &GrantEnv, args: &GrantArgs<'_>, area: &mut [u8]) -> (i32, i32) {
        let (n, m) = encode_grant(args, area);
        env.requeues.begin_call();
        env.offered.store(n as usize, Ordering::Relaxed);
        (n, m)
    }

    fn decode(_: &GrantEnv, args: &GrantArgs<'_>, mask: i64, _: &[u8]) -> Result<u64, Invalid> {
        if mask < 0 && args.waiters.len() < GRANT_MAX {
            return Err(Invalid(format!("negative grant mask {mask}")));
        }
        check_grant(args, mask as u64)
    }

    /// The default's mask, as a graft would return it (bit 63 as the sign, which only a call
    /// offered all [`GRANT_MAX`] waiters may set).
    fn answer(_: &GrantEnv, _: &GrantArgs<'_>, mask: &u64, _: &mut [u8]) -> Option<i64> {
        Some(*mask as i64)
    }

    fn callables(c: &mut Callables<GrantEnv>) {
        c.func2("vino_lock_requeue", requeue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LockKind::{Read, Write};

    fn w(owner: u64, kind: LockKind, start: u64, end: u64, upgrade: bool) -> WaitInfo {
        WaitInfo {
            owner,
            kind,
            range: Range { start, end },
            upgrade,
            age_ns: 0,
        }
    }

    fn held(owner: u64, kind: LockKind) -> Lock {
        Lock {
            owner,
            kind,
            range: Range { start: 0, end: 1 },
        }
    }

    #[test]
    fn frp_prefers_readers_and_fifo_keeps_order() {
        let waiters = [
            w(2, Write, 0, 1, false),
            w(3, Read, 0, 1, false),
            w(4, Read, 0, 1, false),
        ];
        let args = GrantArgs {
            waiters: &waiters,
            held: &[],
        };
        assert_eq!(frp(&args), 0b110, "both readers jump the writer");
        assert_eq!(fifo(&args), 0b001, "the writer first, alone");
        let held = [held(1, Read)];
        let args = GrantArgs {
            waiters: &waiters,
            held: &held,
        };
        assert_eq!(frp(&args), 0b110);
        assert_eq!(fifo(&args), 0, "no reader passes the waiting writer");
    }

    #[test]
    fn upgrades_win_under_both() {
        // Owner 1 holds a read lock and wants to upgrade; writer 2 came first.
        let waiters = [w(2, Write, 0, 1, false), w(1, Write, 0, 1, true)];
        let held = [held(1, Read)];
        let args = GrantArgs {
            waiters: &waiters,
            held: &held,
        };
        assert_eq!(frp(&args), 0b10);
        assert_eq!(fifo(&args), 0b10);
    }

    #[test]
    fn masks_are_checked() {
        let waiters = [w(2, Write, 0, 1, false), w(3, Write, 0, 1, false)];
        let held = [held(1, Read)];
        let args = GrantArgs {
            waiters: &waiters,
            held: &held,
        };
        assert!(check_grant(&args, 0b01).is_err(), "conflicts with the holder");
        let free = GrantArgs {
            waiters: &waiters,
            held: &[],
        };
        assert!(check_grant(&free, 0b11).is_err(), "two writers at once");
        assert!(check_grant(&free, 0b100).is_err(), "not a waiter");
        assert_eq!(check_grant(&free, 0b10), Ok(0b10));
        assert!(LockGrant::decode(&GrantEnv::default(), &free, -1, &[]).is_err());
    }

    #[test]
    fn the_area_round_trips() {
        let waiters = [w(7, Write, 5, u64::MAX, true)];
        let held = [held(1, Read)];
        let mut area = vec![0u8; 4096];
        assert_eq!(
            encode_grant(
                &GrantArgs {
                    waiters: &waiters,
                    held: &held
                },
                &mut area
            ),
            (1, 1)
        );
        let e = LockEntry::read_from(&area[..32]);
        assert_eq!(
            (e.owner, e.start, e.end, e.flags),
            (7, 5, u64::MAX, FLAG_WRITE | FLAG_UPGRADE)
        );
        let h = LockEntry::read_from(&area[32..64]);
        assert_eq!((h.owner, h.flags), (1, 0));
    }
}
