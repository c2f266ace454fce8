//! Per-graft statistics: invocations, time in the graft, failures, the last error.

use crate::clock;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Counters of one binding of a graftpoint (they start at zero when a graft is loaded).
#[derive(Default)]
pub(crate) struct Counters {
    invocations: AtomicU64,
    failures: AtomicU64,
    consecutive_failures: AtomicU64,
    /// Calls that found the instance busy and took the default without reaching the graft.
    busy: AtomicU64,
    /// Changes to kernel state its committed calls made through graft-callable functions.
    changes: AtomicU64,
    /// Time of the calls that were timed ([`Counters::should_time`]), and how many.
    ticks: AtomicU64,
    timed: AtomicU64,
    last_error: Mutex<Option<String>>,
    last_log: Mutex<Option<String>>,
    /// Failures of the graft's own doing in the current window, and the calls when it began
    /// (kept on the failure path only: a success costs nothing more).
    window: Mutex<Option<FailureWindow>>,
}

struct FailureWindow {
    began: Instant,
    invocations_before: u64,
    failures: u64,
}

/// What a failure means for the graft's future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Failures of its own doing in a row.
    pub in_a_row: u64,
    /// Failures of its own doing in the current window, and all its calls there.
    pub in_window: u64,
    pub calls_in_window: u64,
}

/// One call in this many is timed: reading the cycle counter twice costs as much as a null
/// graft's whole protected call on some machines. The graft's time is estimated from them.
pub(crate) const TIME_EVERY: u64 = 16;

impl Counters {
    /// Whether the call about to be made is one of the timed ones (the first, and then one in
    /// [`TIME_EVERY`]; calls running at once may both be).
    #[inline]
    pub(crate) fn should_time(&self) -> bool {
        self.invocations.load(Ordering::Relaxed).is_multiple_of(TIME_EVERY)
    }

    #[inline]
    fn add_time(&self, ticks: Option<u64>) {
        if let Some(t) = ticks {
            self.ticks.fetch_add(t, Ordering::Relaxed);
            self.timed.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[inline]
    pub(crate) fn succeeded(&self, ticks: Option<u64>) {
        self.invocations.fetch_add(1, Ordering::Relaxed);
        self.add_time(ticks);
        if self.consecutive_failures.load(Ordering::Relaxed) != 0 {
            self.consecutive_failures.store(0, Ordering::Relaxed);
        }
    }

    /// Counts a failure; returns how many failures of the graft's own doing there have been in
    /// a row (a lost lock conflict is counted but neither adds to nor resets that run).
    pub(crate) fn failed(&self, ticks: Option<u64>, why: String, grafts_fault: bool, window: Duration) -> Verdict {
        let invocations = self.invocations.fetch_add(1, Ordering::Relaxed) + 1;
        self.add_time(ticks);
        self.failures.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock() = Some(why);
        if !grafts_fault {
            let w = self.window.lock();
            let (in_window, calls_in_window) = w
                .as_ref()
                .map_or((0, 0), |w| (w.failures, invocations - w.invocations_before));
            return Verdict {
                in_a_row: self.consecutive_failures.load(Ordering::Relaxed),
                in_window,
                calls_in_window,
            };
        }
        let in_a_row = self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        let mut w = self.window.lock();
        let now = Instant::now();
        let w = match &mut *w {
            Some(w) if now.duration_since(w.began) < window => w,
            slot => slot.insert(FailureWindow {
                began: now,
                invocations_before: invocations - 1,
                failures: 0,
            }),
        };
        w.failures += 1;
        Verdict {
            in_a_row,
            in_window: w.failures,
            calls_in_window: invocations - w.invocations_before,
        }
    }

    pub(crate) fn changed(&self, n: u64) {
        if n > 0 {
            self.changes.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counts a call that found the instance busy: it never reached the graft.
    pub(crate) fn busy(&self) {
        self.busy.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn logged(&self, message: String) {
        *self.last_log.lock() = Some(message);
    }

    pub(crate) fn snapshot(&self) -> GraftStats {
        let invocations = self.invocations.load(Ordering::Relaxed);
        let (ticks, timed) = (self.ticks.load(Ordering::Relaxed), self.timed.load(Ordering::Relaxed));
        // The timed calls' mean, times all calls.
        let estimate = (u128::from(ticks) * u128::from(invocations))
            .checked_div(u128::from(timed))
            .unwrap_or(0);
        GraftStats {
            invocations,
            failures: self.failures.load(Ordering::Relaxed),
            consecutive_failures: self.consecutive_failures.load(Ordering::Relaxed),
            busy: self.busy.load(Ordering::Relaxed),
            changes: self.changes.load(Ordering::Relaxed),
            time_ns: clock::ticks_to_ns(u64::try_from(estimate).unwrap_or(u64::MAX)),
            last_error: self.last_error.lock().clone(),
            last_log: self.last_log.lock().clone(),
        }
    }
}

/// A snapshot of a graft's statistics.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GraftStats {
    /// Calls that reached the graft (successful or not).
    pub invocations: u64,
    /// Calls whose transaction aborted (trap, budget, deadline, refusal, invalid result).
    pub failures: u64,
    pub consecutive_failures: u64,
    /// Calls that found the graft's instance busy (its owner in a control call) and took the
    /// default at once; not counted in `invocations`.
    pub busy: u64,
    /// Changes to kernel state its committed calls made through graft-callable functions
    /// (reads asked for, page hints, waiters moved, tickets given, event writes): counted as
    /// each change is made, at commit.
    pub changes: u64,
    /// Time spent in the graft, transaction included: estimated from one call in 16, timed.
    pub time_ns: u64,
    pub last_error: Option<String>,
    /// The last message the graft left with `vino_log`.
    pub last_log: Option<String>,
}
