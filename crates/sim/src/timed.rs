//! Steps that reach the kernel's deadlines on the simulation's clock: a lock wait that times
//! out, a process timer that fires, an event wait that ends with nothing come. Each blocks a
//! thread of its own in the kernel, waits until the kernel holds it (its deadline then fixed),
//! moves the clock past the deadline and joins it. No step sleeps on the host's time: the
//! blocked threads look at the manual clock in short host slices.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use vino_blockdev::ManualClock;
use vino_kernel::{Kernel, LockKind, Process};
use vino_locks::{LockError, Range, Wait};

/// How long each timed wait is, on the simulation's clock.
const WAIT: Duration = Duration::from_millis(30);
/// A step whose kernel thread shows no sign of life within this much host time fails the seed
/// (a stuck wait, not a slow one).
const STUCK: Duration = Duration::from_secs(60);

/// Deadlines the simulation reached, for its report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reached {
    pub(crate) lock_deadline_expiries: u64,
    pub(crate) timer_firings: u64,
    pub(crate) event_wait_timeouts: u64,
}

/// Spins (yielding) until `done`, failing after [`STUCK`] of host time.
fn until(what: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > STUCK {
            return Err(format!("{what}: nothing happened in {STUCK:?}"));
        }
        thread::yield_now();
    }
    Ok(())
}

/// A lock request of `who`'s waits behind a lock held by another owner, with a deadline; the
/// clock passes it, and the request fails with a timeout. The owners are not process ids and
/// the object is no inode, so no file's locks are touched.
pub(crate) fn lock_deadline(kernel: &Kernel, clock: &ManualClock, who: usize) -> Result<u64, String> {
    let locks = kernel.locks();
    let object = u64::MAX - who as u64;
    let (holder, waiter) = (1 << 62, (1 << 62) + 1);
    let range = Range::new(0, 1).expect("a one-byte range");
    locks
        .lock(object, holder, LockKind::Write, range, Wait::No)
        .map_err(|e| format!("lock a free object: {e}"))?;
    let before = locks.stats().timeouts;
    let outcome = thread::scope(|s| {
        let wait = s.spawn(|| locks.lock(object, waiter, LockKind::Write, range, Wait::For(WAIT)));
        until("a lock wait", || {
            !locks.waiting(object).is_empty() || wait.is_finished()
        })?;
        clock.advance(WAIT);
        wait.join().map_err(|_| "the lock wait panicked".to_string())
    })?;
    locks
        .unlock(object, holder, range)
        .map_err(|e| format!("unlock: {e}"))?;
    match outcome {
        Err(LockError::TimedOut) => Ok(locks.stats().timeouts - before),
        other => Err(format!("a lock wait past its deadline ended with {other:?}")),
    }
}

/// `who`'s timer, started with a period of [`WAIT`]: the clock moves one period and the timer
/// fires once.
pub(crate) fn timer(kernel: &Kernel, clock: &ManualClock, p: &Arc<Process>) -> Result<u64, String> {
    let before = kernel.timer_firings();
    if p.timer_start(WAIT).is_err() {
        // Refused (the user's thread limit): part of the game.
        return Ok(0);
    }
    clock.advance(WAIT);
    let fired = until("a timer", || kernel.timer_firings() > before);
    p.timer_stop();
    fired?;
    Ok(kernel.timer_firings() - before)
}

/// `who` waits for events with a deadline; the clock passes it. With nothing queued the wait
/// ends empty and counts a timeout.
pub(crate) fn event_wait(kernel: &Kernel, clock: &ManualClock, p: &Arc<Process>) -> Result<u64, String> {
    let before = kernel.event_stats();
    thread::scope(|s| {
        let wait = s.spawn(|| p.event_wait(WAIT));
        until("an event wait", || {
            kernel.event_stats().waits_blocked > before.waits_blocked || wait.is_finished()
        })?;
        clock.advance(WAIT);
        wait.join().map_err(|_| "the event wait panicked".to_string())
    })?;
    Ok(kernel.event_stats().wait_timeouts - before.wait_timeouts)
}
