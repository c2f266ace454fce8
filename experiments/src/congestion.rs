//! `vino bench congestion`: congestion control as a graft (`net.congestion`) against the stack's
//! built-in controllers.
//!
//! Two stacks on a simulated wire with 1% seeded loss, 1% reordering and 3 ms of delay, on one
//! manual clock ([`vino_net::testbed`]): one process sends 1 MiB (4 MiB without `--quick`) to a
//! sink, once with the built-in Reno (CUBIC) alone and once with `reno_cc.c` (`cubic_cc.c`)
//! bound, for each seed. Goodput is in simulated time, so it depends only on the windows the
//! controllers chose: the goal is the graft within 5% of the built-in. The cost of a call is
//! measured on the machine: the run with the graft against the run without, over the graft's
//! calls, medians of the repetitions.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use vino_graft::{Access, GraftSlot, Owner, Runtime};
use vino_measure::report::{ChartOptions, Table, bar_chart_with, fmt_ns, fmt_ratio};
use vino_net::congestion::CongestionControl;
use vino_net::testbed::transfers;
use vino_net::{Congestion, Faults};

use crate::e6_layout::median_of;

/// The goal: a graft's goodput at least this share of its built-in's.
pub const GOAL: f64 = 0.95;

#[derive(Clone, Debug)]
pub struct CongestionOptions {
    pub quick: bool,
    pub reps: usize,
    pub seeds: Vec<u64>,
    pub bytes: usize,
}

impl CongestionOptions {
    pub fn new(quick: bool) -> CongestionOptions {
        CongestionOptions {
            quick,
            reps: if quick { 2 } else { 5 },
            seeds: if quick { vec![3, 17] } else { vec![3, 17, 29, 41, 53] },
            bytes: if quick { 1 << 20 } else { 4 << 20 },
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `reno` or `cubic`.
    pub controller: String,
    pub graft: String,
    /// Simulated goodput, Mbit/s, summed over the seeds' transfers.
    pub builtin_mbit: f64,
    pub graft_mbit: f64,
    /// Graft over built-in.
    pub ratio: f64,
    /// Both runs chose the same window at every change, every seed.
    pub same_trace: bool,
    /// Graft calls in one repetition (all seeds).
    pub calls: u64,
    /// Machine time of one repetition (all seeds), medians.
    pub builtin_ms: f64,
    pub graft_ms: f64,
    /// Time in the graft per call, transaction included (the slot's timing).
    pub per_call_ns: f64,
    pub meets_goal: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct CongestionReport {
    pub reps: usize,
    pub seeds: Vec<u64>,
    pub bytes: usize,
    pub goal: f64,
    pub rows: Vec<Row>,
}

fn lossy(seed: u64) -> Faults {
    Faults {
        seed,
        loss: 0.01,
        duplicate: 0.0,
        reorder: 0.01,
        delay: Duration::from_millis(3),
    }
}

/// One repetition over every seed: simulated time, machine time, the traces, the graft's calls.
struct Pass {
    simulated: Duration,
    machine: Duration,
    traces: Vec<Vec<vino_net::congestion::TraceEntry>>,
    calls: u64,
    /// Time in the graft, as its slot estimates it.
    in_graft_ns: u64,
}

fn pass(opts: &CongestionOptions, builtin: CongestionControl, slot: &Arc<GraftSlot<Congestion>>) -> Pass {
    let counts = || slot.stats().map_or((0, 0), |s| (s.invocations, s.time_ns));
    let before = counts();
    let started = Instant::now();
    let mut simulated = Duration::ZERO;
    let mut traces = Vec::new();
    for &seed in &opts.seeds {
        let run = transfers(lossy(seed), builtin, slot, (1, opts.bytes), None, &mut || {});
        simulated += run.took;
        traces.push(run.trace);
    }
    Pass {
        simulated,
        machine: started.elapsed(),
        traces,
        calls: counts().0 - before.0,
        in_graft_ns: counts().1 - before.1,
    }
}

pub fn run(opts: &CongestionOptions, p: &mut dyn FnMut(&str)) -> Result<CongestionReport> {
    let runtime = Runtime::default();
    let mut rows = Vec::new();
    for (controller, graft, builtin) in [
        ("reno", "reno_cc", CongestionControl::Reno),
        ("cubic", "cubic_cc", CongestionControl::Cubic),
    ] {
        let wasm = vino_sdk::build_example(graft, &vino_sdk::BuildOptions::default())
            .with_context(|| format!("building {graft}.c"))?;
        let empty = Arc::new(GraftSlot::new(&runtime, Arc::new(()), Access::Process(2), None));
        let bound = Arc::new(GraftSlot::new(&runtime, Arc::new(()), Access::Process(2), None));
        bound
            .load(&wasm, Owner::process(2))
            .with_context(|| format!("loading {graft}.c"))?;
        let (mut alone, mut with) = (Vec::new(), Vec::new());
        for rep in 0..opts.reps {
            p(&format!("{controller}: repetition {} of {}", rep + 1, opts.reps));
            alone.push(pass(opts, builtin, &empty));
            with.push(pass(opts, builtin, &bound));
        }
        let failures = bound.stats().map_or(0, |s| s.failures);
        anyhow::ensure!(failures == 0, "{graft}.c failed {failures} calls");
        let bits = (opts.bytes * opts.seeds.len() * 8) as f64;
        let mbit = |d: Duration| bits / d.as_secs_f64() / 1e6;
        let (a, w) = (&alone[0], &with[0]);
        let builtin_ms = median_of(alone.iter().map(|x| x.machine.as_secs_f64() * 1e3));
        let graft_ms = median_of(with.iter().map(|x| x.machine.as_secs_f64() * 1e3));
        let ratio = mbit(w.simulated) / mbit(a.simulated);
        rows.push(Row {
            controller: controller.into(),
            graft: format!("{graft}.c"),
            builtin_mbit: mbit(a.simulated),
            graft_mbit: mbit(w.simulated),
            ratio,
            same_trace: alone.iter().zip(&with).all(|(a, w)| a.traces == w.traces),
            calls: w.calls,
            builtin_ms,
            graft_ms,
            per_call_ns: median_of(with.iter().map(|x| x.in_graft_ns as f64 / x.calls.max(1) as f64)),
            meets_goal: ratio >= GOAL,
        });
    }
    Ok(CongestionReport {
        reps: opts.reps,
        seeds: opts.seeds.clone(),
        bytes: opts.bytes,
        goal: GOAL,
        rows,
    })
}

impl CongestionReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "Congestion control as a graft against the built-in, 1% loss",
            &[
                "controller",
                "built-in",
                "graft",
                "graft / built-in",
                "same windows",
                "graft calls",
                "per call",
                "machine time (built-in, graft)",
                "goal met",
            ],
        );
        for r in &self.rows {
            t.row([
                r.controller.clone(),
                format!("{:.2} Mbit/s", r.builtin_mbit),
                format!("{:.2} Mbit/s ({})", r.graft_mbit, r.graft),
                fmt_ratio(r.ratio),
                if r.same_trace { "yes" } else { "no" }.to_string(),
                r.calls.to_string(),
                fmt_ns(r.per_call_ns),
                format!("{:.1} ms, {:.1} ms", r.builtin_ms, r.graft_ms),
                if r.meets_goal { "yes" } else { "no" }.to_string(),
            ]);
        }
        t.note(format!(
            "goodput in simulated time over a wire with 1% loss, 1% reordering and 3 ms delay each way, {} KiB per \
             transfer, seeds {:?}",
            self.bytes >> 10,
            self.seeds
        ));
        t.note(format!(
            "per call: time in the graft, its transaction included, from its slot's timing (one call in 16); machine \
             time: all seeds' transfers, both stacks, with and without the graft; medians of {} repetitions",
            self.reps
        ));
        t.note(format!(
            "goal: the graft's goodput at least {:.0}% of the built-in's",
            self.goal * 100.0
        ));
        vec![t]
    }

    /// Goodput of each controller, built-in and graft (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = self
            .rows
            .iter()
            .map(|r| {
                (
                    r.controller.clone(),
                    vec![
                        ("built-in".to_string(), r.builtin_mbit),
                        (r.graft.clone(), r.graft_mbit),
                    ],
                )
            })
            .collect();
        bar_chart_with(
            path,
            "Congestion control: goodput at 1% loss (simulated time)",
            "Mbit/s",
            &groups,
            &ChartOptions {
                value_labels: true,
                ..ChartOptions::default()
            },
        )
    }
}
