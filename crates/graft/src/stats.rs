//! Per-graft statistics: invocations, time in the graft, failures, the last error.

use crate::clock;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one binding of a graftpoint (they start at zero when a graft is loaded).
#[derive(Default)]
pub(crate) struct Counters {
    invocations: AtomicU64,
    failures: AtomicU64,
    consecutive_failures: AtomicU64,
    ticks: AtomicU64,
    last_error: Mutex<Option<String>>,
    last_log: Mutex<Option<String>>,
}

impl Counters {
    #[inline]
    pub(crate) fn succeeded(&self, ticks: u64) {
        self.invocations.fetch_add(1, Ordering::Relaxed);
        self.ticks.fetch_add(ticks, Ordering::Relaxed);
        if self.consecutive_failures.load(Ordering::Relaxed) != 0 {
            self.consecutive_failures.store(0, Ordering::Relaxed);
        }
    }

    /// Counts a failure; returns how many failures of the graft's own doing there have been in
    /// a row (a lost lock conflict is counted but neither adds to nor resets that run).
    pub(crate) fn failed(&self, ticks: u64, why: String, grafts_fault: bool) -> u64 {
        self.invocations.fetch_add(1, Ordering::Relaxed);
        self.ticks.fetch_add(ticks, Ordering::Relaxed);
        self.failures.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock() = Some(why);
        if grafts_fault {
            self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.consecutive_failures.load(Ordering::Relaxed)
        }
    }

    pub(crate) fn logged(&self, message: String) {
        *self.last_log.lock() = Some(message);
    }

    pub(crate) fn snapshot(&self) -> GraftStats {
        GraftStats {
            invocations: self.invocations.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            consecutive_failures: self.consecutive_failures.load(Ordering::Relaxed),
            time_ns: clock::ticks_to_ns(self.ticks.load(Ordering::Relaxed)),
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
    /// Time spent in the graft, transaction included.
    pub time_ns: u64,
    pub last_error: Option<String>,
    /// The last message the graft left with `vino_log`.
    pub last_log: Option<String>,
}
