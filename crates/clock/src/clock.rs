//! Time as the kernel reads it: the real clocks, or a clock a simulation moves by hand.
//!
//! Everything in the kernel that reads the time for a decision or for the disk (lock deadlines,
//! timers, event waits, write-back rounds, the I/O scheduler's request ages, file timestamps)
//! reads it through a [`Clock`], so that a deterministic simulation can run the whole kernel on a
//! [`ManualClock`] and replay a seed exactly. Statistics (how long a request waited) may keep
//! reading `Instant`: they are reported, never decided on, and never written to the device.
//!
//! A blocking wait with a deadline goes through [`SharedClock::wait_until`], which wakes when
//! the clock passes the deadline, whichever clock it is.

use parking_lot::{Condvar, MutexGuard};
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
    /// Wall-clock time to within a few milliseconds, for readers that want seconds and read
    /// it on hot paths (a `dir.access` graft's time of day on every open).
    fn wall_coarse(&self) -> Duration {
        self.wall()
    }
    /// The host instant at which [`Clock::monotonic`] reads `at`, for a clock that follows the
    /// host's; `None` for one that moves by hand (a wait then rechecks it in short host slices).
    fn host_instant(&self, _at: Duration) -> Option<Instant> {
        None
    }
}

/// How long a wait on a manual clock sleeps on the host before it looks at the clock again.
/// Short, so a simulation that moves its clock sees the waiter give up at once.
pub const MANUAL_SLICE: Duration = Duration::from_micros(200);

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

    /// Wall-clock seconds since the epoch, read from the coarse clock (a few milliseconds
    /// behind at most; a fifth of the fine clock's cost).
    #[inline]
    pub fn wall_s(&self) -> i64 {
        i64::try_from(self.0.wall_coarse().as_secs()).unwrap_or(i64::MAX)
    }

    /// Monotonic nanoseconds, plus one: never 0, so 0 can mean "no deadline".
    #[inline]
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.0.monotonic().as_nanos()).unwrap_or(u64::MAX - 1) + 1
    }

    /// The monotonic time `after` from now, saturating (a limit of `Duration::MAX` is "never").
    pub fn deadline_in(&self, after: Duration) -> Duration {
        self.0.monotonic().saturating_add(after)
    }

    /// True once the monotonic time has reached `deadline`.
    pub fn passed(&self, deadline: Duration) -> bool {
        self.0.monotonic() >= deadline
    }

    /// Waits on `cv` (releasing `guard`) until notified or until this clock reaches `deadline`
    /// (monotonic time); true if the deadline has passed. Wakeups may be spurious, as with any
    /// condition variable: callers recheck their condition.
    pub fn wait_until<T>(&self, cv: &Condvar, guard: &mut MutexGuard<'_, T>, deadline: Duration) -> bool {
        if self.passed(deadline) {
            return true;
        }
        match self.0.host_instant(deadline) {
            Some(at) => cv.wait_until(guard, at).timed_out() || self.passed(deadline),
            None => {
                cv.wait_for(guard, MANUAL_SLICE);
                self.passed(deadline)
            }
        }
    }

    /// Sleeps the calling thread until this clock reaches `deadline`.
    pub fn sleep_until(&self, deadline: Duration) {
        while !self.passed(deadline) {
            match self.0.host_instant(deadline) {
                Some(at) => std::thread::sleep(at.saturating_duration_since(Instant::now())),
                None => std::thread::sleep(MANUAL_SLICE),
            }
        }
    }
}

impl SharedClock {
    /// The machine's clocks, one instance per process, borrowed (reading it costs no count).
    pub fn system() -> &'static SharedClock {
        static SYSTEM: OnceLock<SharedClock> = OnceLock::new();
        SYSTEM.get_or_init(|| SharedClock(Arc::new(SystemClock::new())))
    }
}

impl Default for SharedClock {
    fn default() -> Self {
        SharedClock::system().clone()
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

    fn wall_coarse(&self) -> Duration {
        match nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME_COARSE) {
            Ok(ts) => Duration::from(ts),
            Err(_) => self.wall(),
        }
    }

    fn host_instant(&self, at: Duration) -> Option<Instant> {
        // Far deadlines ("never") would overflow an Instant: a year is as good as never.
        Some(self.origin + at.min(self.origin.elapsed() + Duration::from_secs(365 * 86_400)))
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
    fn a_wait_on_a_manual_clock_ends_when_the_clock_passes_its_deadline() {
        let manual = Arc::new(ManualClock::new(Duration::ZERO));
        let clock = SharedClock::new(manual.clone());
        let lock = Arc::new(parking_lot::Mutex::new(()));
        let cv = Arc::new(Condvar::new());
        let deadline = clock.deadline_in(Duration::from_secs(3600));
        let waiter = {
            let (clock, lock, cv) = (clock.clone(), lock.clone(), cv.clone());
            std::thread::spawn(move || {
                let mut g = lock.lock();
                while !clock.wait_until(&cv, &mut g, deadline) {}
                clock.monotonic()
            })
        };
        manual.advance(Duration::from_secs(3600));
        // An hour of the clock's time passed: the waiter ends without an hour of the host's.
        assert!(waiter.join().unwrap() >= Duration::from_secs(3600));
        clock.sleep_until(deadline);
    }

    #[test]
    fn a_wait_on_the_system_clock_times_out_at_its_deadline() {
        let clock = SharedClock::default();
        let lock = parking_lot::Mutex::new(());
        let cv = Condvar::new();
        let deadline = clock.deadline_in(Duration::from_millis(5));
        let mut g = lock.lock();
        while !clock.wait_until(&cv, &mut g, deadline) {}
        assert!(clock.passed(deadline));
        assert!(!clock.passed(clock.deadline_in(Duration::MAX)));
    }

    #[test]
    fn now_ns_is_never_zero() {
        let manual = SharedClock::new(Arc::new(ManualClock::new(Duration::ZERO)));
        assert_eq!(manual.now_ns(), 1);
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
