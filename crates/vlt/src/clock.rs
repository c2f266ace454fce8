//! Nanosecond readings of a [`SharedClock`] for deadlines (an `Instant` cannot live in an atomic).

use std::time::Duration;
use vino_clock::SharedClock;

/// Nanoseconds on the machine's clock (for code with no kernel at hand); never 0, so 0 can mean
/// "no deadline". The kernel's decisions read its own clock instead ([`crate::Vlt::now_ns`]).
pub fn now_ns() -> u64 {
    SharedClock::system().now_ns()
}

/// The [`now_ns`] time `after` past `from`, saturating: a limit too long to represent (such as
/// `Duration::MAX`) means "never" instead of wrapping around into the past.
pub(crate) fn later(from: u64, after: Duration) -> u64 {
    from.saturating_add(u64::try_from(after.as_nanos()).unwrap_or(u64::MAX))
}
