//! Candidates in shadow (`vino graft try`) beside the grafts the simulation binds.
//!
//! When a process binds at a graftpoint a try has a model for, it may also start a candidate of
//! a random behaviour in shadow there (from a generator of its own, so the workload's steps do
//! not move); the shadow is stopped when the graftpoint goes (rebound, its descriptor closed)
//! or at the end of the first pass. What must hold whatever the candidate does: the live path
//! is untouched (the model's checks and the kernel's invariants run with shadows beside every
//! step), the report's counts agree with each other, a candidate that fails on every call is
//! reported failing on every call it got, and its charges are back once it stops (the end of
//! the pass counts them). No behaviour grows its memory: a shadow's charges are then all made
//! when it starts and refunded when it stops, so the seed's accounts are the same every run.
//!
//! Only the first pass tries: the second ends in a power cut, with no stop to take reports.

use crate::grafts::{self, Behaviour};
use std::sync::Arc;
use vino_blockdev::rng::SplitMix64;
use vino_kernel::Process;
use vino_kernel::graft_try::TryOptions;
use vino_kernel::graftpoints::Graftpoint;

struct Running {
    p: Arc<Process>,
    slot: String,
    behaviour: Behaviour,
}

pub struct Shadows {
    rng: SplitMix64,
    running: Vec<Running>,
    /// Shadows stopped whose reports held together.
    pub tried: u64,
}

impl Shadows {
    pub fn new(seed: u64) -> Shadows {
        Shadows {
            rng: SplitMix64::new(seed ^ 0x5ad0_0ca1_d1da_7e00),
            running: Vec::new(),
            tried: 0,
        }
    }

    /// Now and then, starts a candidate in shadow at `slot` (graftpoint `g`) of `p`, which just
    /// bound a graft there (or was refused). Refusals are part of the game.
    pub fn maybe_start(&mut self, p: &Arc<Process>, slot: &str, g: &Graftpoint) {
        if !vino_kernel::graft_try::has_model(g.name) || !self.rng.chance(0.5) {
            return;
        }
        let behaviour = grafts::BEHAVIOURS[self.rng.below(grafts::BEHAVIOURS.len() as u64) as usize];
        let wasm = grafts::module(g, behaviour);
        // Half the time the kernel chooses the sample.
        let sample = self.rng.chance(0.5).then_some(1 + self.rng.below(3) as u32);
        if p.graft_try_start(None, slot, &wasm, TryOptions { sample }).is_ok() {
            self.running.push(Running {
                p: p.clone(),
                slot: slot.to_string(),
                behaviour,
            });
        }
    }

    /// Stops the shadows of `p` at graftpoints `which` names, checking their reports.
    pub fn stop(&mut self, p: &Arc<Process>, which: impl Fn(&str) -> bool) -> Result<(), String> {
        let (stopping, kept) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(|r| Arc::ptr_eq(&r.p, p) && which(&r.slot));
        self.running = kept;
        for r in stopping {
            let report =
                r.p.graft_try_stop(None, &r.slot)
                    .map_err(|e| format!("stopping the shadow at {}: {e}", r.slot))?;
            let report = serde_json::to_value(&report).expect("a report serializes");
            check(&report, r.behaviour)
                .map_err(|e| format!("the shadow at {} ({:?}): {e}: {report}", r.slot, r.behaviour))?;
            self.tried += 1;
        }
        Ok(())
    }

    /// Stops every shadow still running.
    pub fn stop_all(&mut self) -> Result<u64, String> {
        while let Some(p) = self.running.first().map(|r| r.p.clone()) {
            self.stop(&p, |_| true)?;
        }
        Ok(self.tried)
    }
}

/// What a report must say whatever the timing: its counts agree, and a candidate that cannot
/// answer failed every call it got.
fn check(r: &serde_json::Value, behaviour: Behaviour) -> Result<(), String> {
    let n = |k: &str| r[k].as_u64().ok_or_else(|| format!("no count `{k}`"));
    let (decisions, failures) = (n("decisions")?, n("failures")?);
    if failures > decisions {
        return Err("more failures than decisions".into());
    }
    if matches!(behaviour, Behaviour::Spin | Behaviour::Trap | Behaviour::OutOfBounds) && failures != decisions {
        return Err("a candidate that cannot answer had calls that did not fail".into());
    }
    match r["model"].as_str() {
        Some("victim") => {
            let accesses = n("accesses")?;
            if n("live_misses")? > accesses || n("would_be_misses")? > accesses {
                return Err("more misses than accesses".into());
            }
            if n("memory_agreed")? > n("memory_decisions")? {
                return Err("more program-memory evictions alike than offered".into());
            }
        }
        Some("read_ahead") => {
            let reads = n("reads")?;
            if decisions > reads {
                return Err("more decisions than reads".into());
            }
        }
        Some("disk" | "lock" | "sched") => {
            if n("agreed")? > n("followed")? {
                return Err("more decisions alike than followed".into());
            }
        }
        other => return Err(format!("an unknown model {other:?}")),
    }
    Ok(())
}
