//! Time as the kernel reads it: the real clocks, or a clock a simulation moves by hand.
//!
//! Everything in the storage kernel that reads the time for a decision or for the disk (the I/O
//! scheduler's request ages, file timestamps) reads it through a [`Clock`], so that a
//! deterministic simulation can run the whole kernel on a [`ManualClock`] and replay a seed
//! exactly. Statistics (how long a request waited) may keep reading `Instant`: they are
//! reported, never decided on, and never written to the device.

use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Monotonic time since an arbitrary origin fixed for the clock's life.
    fn monotonic(&self) -> Duration;
    /// Wall-clock time since the Unix epoch, for timestamps.
    fn wall(&self) -> Duration;
}

/// A clock shared by the parts of one kernel. The default is the machine's clocks (one
/// instance per process); two handles are equal if they name the same clock.
#[derive(Clone, Debug)]
pub struct SharedClock(Arc<dyn Clock>);

impl SharedClock {
    pub fn new(clock: Arc<dyn Clock>) -> SharedClock {
        SharedClock(clock)
    }

    /// Wall-clock nanoseconds since the epoch, as timestamps on disk keep them.
    pub fn wall_ns(&self) -> u64 {
        u64::try_from(self.0.wall().as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Default for SharedClock {
    fn default() -> Self {
        static SYSTEM: OnceLock<SharedClock> = OnceLock::new();
        SYSTEM.get_or_init(|| SharedClock(Arc::new(SystemClock::new()))).clone()
    }
}

impl Deref for SharedClock {
    type Target = dyn Clock;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl PartialEq for SharedClock {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedClock {}

/// The machine's clocks.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock { origin: Instant::now() }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }

    fn wall(&self) -> Duration {
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
    }
}

/// A clock that moves only when told to: both readings advance together, from a wall-clock
/// origin the simulation picks.
#[derive(Debug)]
pub struct ManualClock {
    wall_origin: Duration,
    elapsed_ns: AtomicU64,
}

impl ManualClock {
    /// A clock at `wall_origin` after the epoch, monotonic time zero.
    pub fn new(wall_origin: Duration) -> ManualClock {
        ManualClock {
            wall_origin,
            elapsed_ns: AtomicU64::new(0),
        }
    }

    pub fn advance(&self, by: Duration) {
        let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.elapsed_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.elapsed_ns.load(Ordering::Relaxed))
    }

    fn wall(&self) -> Duration {
        self.wall_origin + self.monotonic()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let c = ManualClock::new(Duration::from_secs(1_000));
        assert_eq!(c.monotonic(), Duration::ZERO);
        assert_eq!(c.wall(), Duration::from_secs(1_000));
        c.advance(Duration::from_millis(5));
        assert_eq!(c.monotonic(), Duration::from_millis(5));
        assert_eq!(c.wall(), Duration::from_millis(1_000_005));
    }

    #[test]
    fn default_handles_name_one_clock() {
        assert_eq!(SharedClock::default(), SharedClock::default());
        let manual = SharedClock::new(Arc::new(ManualClock::new(Duration::ZERO)));
        assert_ne!(manual, SharedClock::default());
        assert_eq!(manual, manual.clone());
    }

    #[test]
    fn the_system_clock_moves_forward() {
        let c = SystemClock::new();
        let a = c.monotonic();
        std::thread::sleep(Duration::from_millis(1));
        assert!(c.monotonic() > a);
        assert!(c.wall() > Duration::from_secs(1_600_000_000));
    }
}
