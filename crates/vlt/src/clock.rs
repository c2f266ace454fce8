//! A monotonic nanosecond clock shared by deadlines (an `Instant` cannot live in an atomic).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

static BASE: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since the first call in this process; never 0, so 0 can mean "no deadline".
pub fn now_ns() -> u64 {
    let base = *BASE.get_or_init(Instant::now);
    base.elapsed().as_nanos() as u64 + 1
}

/// The [`now_ns`] time `after` past `from`, saturating: a limit too long to represent (such as
/// `Duration::MAX`) means "never" instead of wrapping around into the past.
pub(crate) fn later(from: u64, after: Duration) -> u64 {
    from.saturating_add(u64::try_from(after.as_nanos()).unwrap_or(u64::MAX))
}
