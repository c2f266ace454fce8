//! Measuring and reporting shared by VINO's experiments (`experiments/`): the timing helpers
//! here, and in [`report`] aligned text tables, number formatting, JSON files and SVG charts.
//!
//! # Timing
//!
//! A measurement runs a closure `iters` times per round, for a number of
//! rounds (after one untimed warm-up round), and reports the per-iteration
//! time of the median, fastest and 90th-percentile round.  On x86_64 the
//! time-stamp counter is read around each round as well, giving median
//! cycles per iteration.  Results are kept from being optimised away with
//! [`black_box`].

use std::convert::Infallible;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use std::hint::black_box;

pub mod pages;
pub mod report;

/// Per-iteration statistics over the measured rounds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Median over rounds of the per-iteration time, in nanoseconds.
    pub median_ns: f64,
    /// Fastest round, per iteration.
    pub min_ns: f64,
    /// 90th percentile round, per iteration.
    pub p90_ns: f64,
    /// Mean over rounds, per iteration.
    pub mean_ns: f64,
    /// Median time-stamp-counter cycles per iteration (x86_64 only).
    pub median_cycles: Option<f64>,
    /// Number of measured rounds.
    pub rounds: usize,
    /// Iterations of the closure in each round.
    pub iters_per_round: u64,
}

impl Stats {
    /// Statistics from per-iteration samples (one per round).
    pub fn from_samples(ns: &[f64], cycles: Option<&[f64]>, iters_per_round: u64) -> Stats {
        assert!(!ns.is_empty(), "no samples");
        let mut sorted = ns.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median_cycles = cycles.filter(|c| !c.is_empty()).map(|c| {
            let mut c = c.to_vec();
            c.sort_by(f64::total_cmp);
            median_of_sorted(&c)
        });
        Stats {
            median_ns: median_of_sorted(&sorted),
            min_ns: sorted[0],
            p90_ns: percentile_of_sorted(&sorted, 0.90),
            mean_ns: sorted.iter().sum::<f64>() / sorted.len() as f64,
            median_cycles,
            rounds: sorted.len(),
            iters_per_round,
        }
    }

    /// The same statistics with every time divided by `n` (e.g. a whole run
    /// expressed per block).
    pub fn per(&self, n: f64) -> Stats {
        Stats {
            median_ns: self.median_ns / n,
            min_ns: self.min_ns / n,
            p90_ns: self.p90_ns / n,
            mean_ns: self.mean_ns / n,
            median_cycles: self.median_cycles.map(|c| c / n),
            ..*self
        }
    }
}

fn median_of_sorted(s: &[f64]) -> f64 {
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn percentile_of_sorted(s: &[f64], q: f64) -> f64 {
    let idx = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[idx]
}

/// How much effort a benchmark spends: `quick` for smoke runs and tests,
/// otherwise the full sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    pub quick: bool,
}

impl Budget {
    pub fn new(quick: bool) -> Budget {
        Budget { quick }
    }

    /// `quick` in quick mode, otherwise `full`.
    pub fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick { quick } else { full }
    }

    /// Number of measured rounds.
    pub fn rounds(&self, quick: usize, full: usize) -> usize {
        self.pick(quick, full)
    }

    /// Target duration of one round when the iteration count is calibrated.
    pub fn round_target(&self) -> Duration {
        self.pick(Duration::from_millis(4), Duration::from_millis(25))
    }
}

/// The time-stamp counter, where there is one.
#[inline(always)]
pub fn cycles() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc is available on every x86_64 CPU.
        Some(unsafe { core::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// Runs `f` `iters` times per round for `rounds` rounds (plus one warm-up
/// round), calling `setup` untimed before every round.  Stops at the first
/// error.
pub fn try_bench_with_setup<R, E>(
    rounds: usize,
    iters: u64,
    mut setup: impl FnMut() -> Result<(), E>,
    mut f: impl FnMut() -> Result<R, E>,
) -> Result<Stats, E> {
    let rounds = rounds.max(1);
    let iters = iters.max(1);
    let mut ns = Vec::with_capacity(rounds);
    let mut cyc = Vec::with_capacity(rounds);
    for round in 0..=rounds {
        setup()?;
        let c0 = cycles();
        let t0 = Instant::now();
        for _ in 0..iters {
            black_box(f()?);
        }
        let elapsed = t0.elapsed();
        let c1 = cycles();
        if round == 0 {
            continue; // warm-up
        }
        ns.push(elapsed.as_nanos() as f64 / iters as f64);
        if let (Some(a), Some(b)) = (c0, c1) {
            cyc.push(b.wrapping_sub(a) as f64 / iters as f64);
        }
    }
    let cycles = if cyc.len() == ns.len() {
        Some(cyc.as_slice())
    } else {
        None
    };
    Ok(Stats::from_samples(&ns, cycles, iters))
}

/// [`try_bench_with_setup`] without a setup step.
pub fn try_bench<R, E>(rounds: usize, iters: u64, f: impl FnMut() -> Result<R, E>) -> Result<Stats, E> {
    try_bench_with_setup(rounds, iters, || Ok(()), f)
}

/// Runs `f` `iters` times per round for `rounds` measured rounds.
pub fn bench<R>(rounds: usize, iters: u64, mut f: impl FnMut() -> R) -> Stats {
    let r: Result<Stats, Infallible> = try_bench(rounds, iters, || Ok(f()));
    match r {
        Ok(s) => s,
    }
}

/// Like [`bench`], with an untimed `setup` before every round.
pub fn bench_with_setup<R>(rounds: usize, iters: u64, mut setup: impl FnMut(), mut f: impl FnMut() -> R) -> Stats {
    let r: Result<Stats, Infallible> = try_bench_with_setup(
        rounds,
        iters,
        || {
            setup();
            Ok(())
        },
        || Ok(f()),
    );
    match r {
        Ok(s) => s,
    }
}

/// How many iterations of `f` fill about `target` (at least one).
pub fn try_calibrate<R, E>(target: Duration, mut f: impl FnMut() -> Result<R, E>) -> Result<u64, E> {
    let mut iters: u64 = 1;
    loop {
        let t0 = Instant::now();
        for _ in 0..iters {
            black_box(f()?);
        }
        let el = t0.elapsed();
        if el >= target / 4 || iters >= 1 << 40 {
            let per = el.as_nanos().max(1) as f64 / iters as f64;
            return Ok(((target.as_nanos() as f64 / per).ceil() as u64).max(1));
        }
        iters *= 4;
    }
}

/// Calibrates the iteration count so that a round takes about `target`,
/// then measures `rounds` rounds.
pub fn try_bench_for<R, E>(rounds: usize, target: Duration, mut f: impl FnMut() -> Result<R, E>) -> Result<Stats, E> {
    let iters = try_calibrate(target, &mut f)?;
    try_bench(rounds, iters, f)
}

/// Infallible [`try_bench_for`].
pub fn bench_for<R>(rounds: usize, target: Duration, mut f: impl FnMut() -> R) -> Stats {
    let r: Result<Stats, Infallible> = try_bench_for(rounds, target, || Ok(f()));
    match r {
        Ok(s) => s,
    }
}

/// Times each of `n` single calls of `f` separately (for slow operations
/// such as device I/O, where the spread between calls matters).
pub fn try_sample<R, E>(n: usize, f: impl FnMut() -> Result<R, E>) -> Result<Stats, E> {
    try_bench(n, 1, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_order() {
        let s = Stats::from_samples(&[5.0, 1.0, 3.0, 2.0, 4.0], None, 10);
        assert_eq!(s.median_ns, 3.0);
        assert_eq!(s.min_ns, 1.0);
        assert_eq!(s.p90_ns, 5.0);
        assert_eq!(s.rounds, 5);
        let p = s.per(2.0);
        assert_eq!(p.median_ns, 1.5);
    }

    #[test]
    fn bench_runs_closure() {
        let mut calls = 0u64;
        let s = bench(3, 7, || calls += 1);
        assert_eq!(calls, 4 * 7);
        assert_eq!(s.rounds, 3);
        assert_eq!(s.iters_per_round, 7);
        assert!(s.median_ns >= 0.0);
    }

    #[test]
    fn errors_stop_the_run() {
        let mut n = 0;
        let r: Result<Stats, &str> = try_bench(5, 5, || {
            n += 1;
            if n == 3 { Err("stop") } else { Ok(()) }
        });
        assert_eq!(r, Err("stop"));
        assert_eq!(n, 3);
    }
}
