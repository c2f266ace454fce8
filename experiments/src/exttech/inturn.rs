//! The calls of a few nanoseconds (the null call and the hot-list search) on native code and on
//! both Wasm variants, taking turns round by round.
//!
//! Measured one technology after another, as the main table is, the native hot list moved by
//! half from run to run on a shared machine, and the ratio to it with it. Here every round times
//! a batch of calls on each technology in turn (the order turning every round), and the ratio is
//! taken within each round: a slow moment falls on all of them alike.

use std::hint::black_box;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;
use vino_measure::{Budget, try_calibrate};

use super::Variant;
use super::workloads::{CANDIDATE_LISTS, CANDIDATES_PER_CALL, Extension, hot_setup};

/// One technology's calls, taking turns with the others.
#[derive(Clone, Debug, Serialize)]
pub struct InTurn {
    pub variant: Variant,
    /// Median time of one null call, ns.
    pub nop_ns: f64,
    /// Median time of one hot-list search, ns.
    pub hot_ns: f64,
    /// Median over rounds of this technology's hot-list time over native's in the same round.
    pub hot_vs_native: f64,
    /// The same for the null call.
    pub nop_vs_native: f64,
    pub rounds: usize,
}

/// What one round timed, per technology: ns per null call and per hot-list search.
type Round = Vec<(f64, f64)>;

/// Times `iters` calls of `f`, ns per call.
fn per_call(iters: u64, mut f: impl FnMut() -> Result<u32>) -> Result<f64> {
    let start = Instant::now();
    for _ in 0..iters {
        black_box(f()?);
    }
    Ok(start.elapsed().as_nanos() as f64 / iters as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Measures `techs` (native first) in turn.
pub fn measure(
    techs: &mut [(Variant, &mut dyn Extension)],
    lists: &[[u32; CANDIDATES_PER_CALL]],
    budget: Budget,
) -> Result<Vec<InTurn>> {
    assert!(
        techs.first().is_some_and(|(v, _)| *v == Variant::Native),
        "native comes first: it is the unit"
    );
    for (_, e) in techs.iter_mut() {
        hot_setup(&mut **e)?;
    }
    // One batch count for all, from the native call, so every technology's batch is the same
    // calls; a round then takes a few of the usual round targets.
    let target = budget.round_target();
    let mut i = 0usize;
    let native = &mut techs[0].1;
    let hot_iters = try_calibrate(target, || {
        i = (i + 1) & (CANDIDATE_LISTS - 1);
        native.hl_pick(&lists[i])
    })?;
    let nop_iters = try_calibrate(target, || native.nop(black_box(7)))?;
    let rounds = budget.rounds(9, 41);
    let n = techs.len();
    let mut timed: Vec<Round> = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let mut this = vec![(0.0, 0.0); n];
        for k in 0..n {
            let t = (round + k) % n;
            let e = &mut techs[t].1;
            let nop = per_call(nop_iters, || e.nop(black_box(7)))?;
            let mut i = 0usize;
            let hot = per_call(hot_iters, || {
                i = (i + 1) & (CANDIDATE_LISTS - 1);
                e.hl_pick(&lists[i])
            })?;
            this[t] = (nop, hot);
        }
        timed.push(this);
    }
    Ok(techs
        .iter()
        .enumerate()
        .map(|(t, (variant, _))| InTurn {
            variant: *variant,
            nop_ns: median(timed.iter().map(|r| r[t].0).collect()),
            hot_ns: median(timed.iter().map(|r| r[t].1).collect()),
            nop_vs_native: median(timed.iter().map(|r| r[t].0 / r[0].0).collect()),
            hot_vs_native: median(timed.iter().map(|r| r[t].1 / r[0].1).collect()),
            rounds,
        })
        .collect())
}
