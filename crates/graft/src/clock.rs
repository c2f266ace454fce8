//! A cheap clock for per-invocation statistics. Two `Instant::now()` calls cost about as much as a
//! null graft, so on x86_64 the time stamp counter is read instead and converted once, when
//! statistics are read.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A raw timestamp: TSC ticks on x86_64, nanoseconds elsewhere.
#[inline]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc exists on every x86_64 CPU, reads a counter and touches no memory.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        vino_vlt::now_ns()
    }
}

/// Ticks per nanosecond, measured once against the monotonic clock.
fn ticks_per_ns() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        if !cfg!(target_arch = "x86_64") {
            return 1.0;
        }
        let (t0, i0) = (ticks(), Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (t1, i1) = (ticks(), Instant::now());
        let rate = (t1.wrapping_sub(t0)) as f64 / (i1 - i0).as_nanos().max(1) as f64;
        if rate.is_finite() && rate > 0.0 { rate } else { 1.0 }
    })
}

/// Converts a difference of [`ticks`] to nanoseconds.
pub fn ticks_to_ns(ticks: u64) -> u64 {
    (ticks as f64 / ticks_per_ns()) as u64
}

/// Measures the tick rate now, so the first statistics read does not pause.
pub fn calibrate() {
    let _ = ticks_per_ns();
}
