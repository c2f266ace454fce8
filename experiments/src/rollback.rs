//! `vino bench rollback`: what rolling a graft's own memory back costs
//! ([`RuntimeConfig::roll_back_memory`], [`vino_graft::undo_log`]).
//!
//! Every store and `global.set` of a graft logs the bytes it overwrites, every call from outside
//! starts an empty log, and a failed call replays it. Measured in one run, each comparison
//! taking turns round by round (the order turning every round, so a busy moment of the shared
//! machine falls on both sides alike), as medians of the per-round times and of the per-round
//! ratios:
//!
//! * the SDK's null graft through a `toy.apply` graftpoint on a runtime that rolls back and on
//!   one that does not;
//! * grafts that store 1, 10, 100 and 1000 words of their memory per call, on both runtimes:
//!   what a logged store adds (the slope over the words);
//! * the same grafts answering -1, which `toy.apply` refuses, so every call fails and (on the
//!   first runtime) is rolled back: what one undo record adds to an aborted call;
//! * each graft-callable function that changes kernel state (`vino_prefetch`, `vino_page_hint`,
//!   `vino_lock_requeue`, `vino_tickets_give`) at its graftpoint: a graft calling it once
//!   against the same graft without the call, committed (the change made) and then failing
//!   (the change dropped), each through the kernel's slot as the kernel invokes it;
//! * E3's hot-list graft (`HOTLIST_WASM`, C compiled to Wasm) called straight through wasmtime,
//!   as built and as [`vino_graft::undo_log::instrument`] rewrites it, on one sandbox engine,
//!   with fuel (the kernel's runtime) and with epochs: the hot-list search and the null call.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use vino_graft::{Access, GraftSlot, Owner, Runtime, RuntimeConfig};
use vino_measure::report::{ChartOptions, Table, bar_chart_with, fmt_ns, fmt_ratio};
use vino_measure::{Budget, try_calibrate};
use vino_toykernel::{ToyApply, ToyKernel};

use crate::exttech::wasm::{EpochTicker, Interruption, WasmModules, Wasmtime, sandbox_engine_with};
use crate::exttech::workloads::{
    CANDIDATE_LISTS, CANDIDATES_PER_CALL, Extension, candidate_lists, hot_answer, hot_setup,
};

/// Goal for the null graft: rollback on over off, per call.
pub const NULL_GOAL: f64 = 1.10;
/// Goal for the hot-list search: rollback stays on by default if it is within this.
pub const HOT_GOAL: f64 = 1.2;
/// Words the writer grafts store per call.
pub const WORDS: [u32; 4] = [1, 10, 100, 1000];
/// Words (undo records) the failing grafts store per call.
pub const RECORDS: [u32; 4] = [0, 10, 100, 1000];

#[derive(Clone, Debug)]
pub struct RollbackOptions {
    pub quick: bool,
    /// Rounds of every comparison (each round times a batch on both sides).
    pub rounds: usize,
}

impl RollbackOptions {
    pub fn new(quick: bool) -> RollbackOptions {
        RollbackOptions {
            quick,
            rounds: if quick { 9 } else { 41 },
        }
    }

    fn budget(&self) -> Budget {
        Budget::new(self.quick)
    }
}

/// One comparison of rollback on against off, taking turns.
#[derive(Clone, Debug, Serialize)]
pub struct Pair {
    /// Median over rounds of ns per call with rollback (the instrumented module).
    pub on_ns: f64,
    /// The same without.
    pub off_ns: f64,
    /// Median over rounds of on / off within the round.
    pub ratio: f64,
    /// Median over rounds of on - off within the round, ns per call.
    pub added_ns: f64,
    pub rounds: usize,
    /// Calls per round on each side.
    pub calls: u64,
}

/// A graft through the `toy.apply` graftpoint.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub graft: String,
    /// Words it stores per call.
    pub words: u32,
    #[serde(flatten)]
    pub times: Pair,
}

/// A call of E3's hot-list module through wasmtime.
#[derive(Clone, Debug, Serialize)]
pub struct HotRow {
    /// How a runaway call is stopped: `fuel` (the kernel's runtime) or `epoch`.
    pub interrupt: &'static str,
    pub call: &'static str,
    #[serde(flatten)]
    pub times: Pair,
}

/// Costs per word and per record: least-squares slopes of ns per call over the words stored.
#[derive(Clone, Debug, Serialize)]
pub struct Slopes {
    /// A successful call, with rollback, per word stored.
    pub write_on_ns_per_word: f64,
    /// The same without.
    pub write_off_ns_per_word: f64,
    /// What logging adds per word stored (slope of the per-round differences).
    pub added_ns_per_word: f64,
    /// What one undo record adds to a failed call (logged, then replayed).
    pub abort_added_ns_per_record: f64,
    /// Of that, replaying it: the abort slope less the logging slope.
    pub replay_ns_per_record: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Goal {
    pub what: &'static str,
    /// Largest ratio of rollback on over off that meets the goal.
    pub goal: f64,
    pub measured: f64,
    pub met: bool,
}

/// A graft-callable function's cost at its graftpoint: `on` calls it once, `off` does not.
#[derive(Clone, Debug, Serialize)]
pub struct FunctionRow {
    pub function: &'static str,
    pub graftpoint: &'static str,
    /// The call committed: the change is made.
    pub committed: Pair,
    /// The graft traps after the call: its change is dropped.
    pub aborted: Pair,
}

#[derive(Clone, Debug, Serialize)]
pub struct RollbackReport {
    pub rounds: usize,
    pub goals: Vec<Goal>,
    /// The null graft, then the writers, successful calls.
    pub calls: Vec<Row>,
    /// The failing writers: every call aborted.
    pub aborts: Vec<Row>,
    pub slopes: Slopes,
    pub functions: Vec<FunctionRow>,
    pub hot_list: Vec<HotRow>,
    /// E3's modules as they ran instrumented: each the module's name, and why not if it was not.
    pub instrumented: Vec<String>,
}

/// The SDK's null graft, as graftcost measures it.
fn null_graft() -> Vec<u8> {
    vino_sdk::build_example("null", &vino_sdk::BuildOptions::default())
        .unwrap_or_else(|_| br#"(module (func (export "toy_apply") (param i64) (result i64) local.get 0))"#.to_vec())
}

/// A `toy.apply` graft that stores `words` distinct words of its memory, then answers its
/// argument, or -1 (refused) if `fail`.
fn writer(words: u32, fail: bool) -> Vec<u8> {
    let answer = if fail { "i64.const -1" } else { "local.get $arg" };
    format!(
        r#"(module
  (memory (export "memory") 1)
  (func (export "toy_apply") (param $arg i64) (result i64)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (i32.const {words})))
        (i64.store (i32.shl (local.get $i) (i32.const 3))
                   (i64.add (local.get $arg) (i64.extend_i32_u (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    {answer}))"#
    )
    .into_bytes()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Least-squares slope of y over x.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    sxy / sxx
}

/// ns per call of `calls` calls of `f`.
#[inline(always)]
fn per_call<R>(calls: u64, f: &mut impl FnMut() -> Result<R>) -> Result<f64> {
    let start = Instant::now();
    for _ in 0..calls {
        black_box(f()?);
    }
    Ok(start.elapsed().as_nanos() as f64 / calls as f64)
}

/// Times `on` against `off` in turns: each round a batch of each, the order turning every
/// round. The batch is sized on `on` (the slower) to the budget's round target.
fn in_turn<R>(
    budget: Budget,
    rounds: usize,
    mut on: impl FnMut() -> Result<R>,
    mut off: impl FnMut() -> Result<R>,
) -> Result<(Pair, Vec<(f64, f64)>)> {
    let calls = try_calibrate(budget.round_target(), &mut on)?;
    // One untimed batch each, to warm both up.
    per_call(calls, &mut off)?;
    per_call(calls, &mut on)?;
    let mut timed = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let (a, b) = if round % 2 == 0 {
            let a = per_call(calls, &mut on)?;
            (a, per_call(calls, &mut off)?)
        } else {
            let b = per_call(calls, &mut off)?;
            (per_call(calls, &mut on)?, b)
        };
        timed.push((a, b));
    }
    let pair = Pair {
        on_ns: median(timed.iter().map(|t| t.0).collect()),
        off_ns: median(timed.iter().map(|t| t.1).collect()),
        ratio: median(timed.iter().map(|t| t.0 / t.1).collect()),
        added_ns: median(timed.iter().map(|t| t.0 - t.1).collect()),
        rounds,
        calls,
    };
    Ok((pair, timed))
}

/// A runtime that never unloads a failing graft, rolling back or not.
fn runtime(roll_back_memory: bool) -> Runtime {
    Runtime::new(RuntimeConfig {
        roll_back_memory,
        max_consecutive_failures: u32::MAX,
        failure_rate_min: u32::MAX,
        ..RuntimeConfig::default()
    })
}

/// `wasm` loaded into a fresh `toy.apply` slot of `rt`.
fn slot(rt: &Runtime, kernel: &Arc<ToyKernel>, wasm: &[u8]) -> Result<GraftSlot<ToyApply>> {
    let slot = GraftSlot::new(rt, kernel.clone(), Access::Process(1), None);
    slot.load(wasm, Owner::process(1)).context("loading a graft")?;
    Ok(slot)
}

/// The two slots of one graft (rollback on, off), checked to answer as `fail` says.
fn slots(
    on: &Runtime,
    off: &Runtime,
    kernel: &Arc<ToyKernel>,
    wasm: &[u8],
    fail: bool,
) -> Result<[GraftSlot<ToyApply>; 2]> {
    let slots = [slot(on, kernel, wasm)?, slot(off, kernel, wasm)?];
    for s in &slots {
        match (s.try_invoke(&7), fail) {
            (Ok(7), false) | (Err(_), true) => {}
            (other, _) => bail!("a test graft answered {other:?}"),
        }
    }
    Ok(slots)
}

/// Times a graft's slots against each other.
fn through_slots(
    budget: Budget,
    rounds: usize,
    [on, off]: &[GraftSlot<ToyApply>; 2],
) -> Result<(Pair, Vec<(f64, f64)>)> {
    in_turn(
        budget,
        rounds,
        || Ok(on.invoke(&black_box(7))),
        || Ok(off.invoke(&black_box(7))),
    )
}

/// Slope of the per-round differences (on - off) over the words: the added cost per word.
fn added_slope(rows: &[(u32, Vec<(f64, f64)>)]) -> f64 {
    let points: Vec<(f64, f64)> = rows
        .iter()
        .map(|(w, t)| (*w as f64, median(t.iter().map(|(a, b)| a - b).collect())))
        .collect();
    slope(&points)
}

/// A graft for `export(params) -> result` that runs `call` (dropping its result) if `with`,
/// then traps if `fail`, else answers 0; `imports` declares the function `call` uses.
fn caller(export: &str, params: &str, result: &str, imports: &str, call: &str, with: bool, fail: bool) -> Vec<u8> {
    let call = if with { call } else { "" };
    let end = if fail { "unreachable" } else { "" };
    format!(
        r#"(module {imports}
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "{export}") (param {params}) (result {result})
    {call} {end} ({result}.const 0)))"#
    )
    .into_bytes()
}

/// Times one graftpoint's graft with the call against without, committed and failing: `run`
/// loads a module into a fresh slot and returns a closure making one kernel call through it.
fn function_row<F: FnMut() -> Result<()>>(
    budget: Budget,
    rounds: usize,
    function: &'static str,
    graftpoint: &'static str,
    module: impl Fn(bool, bool) -> Vec<u8>,
    run: impl Fn(&[u8]) -> Result<F>,
) -> Result<FunctionRow> {
    let pair = |fail: bool| -> Result<Pair> {
        let (on, off) = (run(&module(true, fail))?, run(&module(false, fail))?);
        Ok(in_turn(budget, rounds, on, off)?.0)
    };
    Ok(FunctionRow {
        function,
        graftpoint,
        committed: pair(false)?,
        aborted: pair(true)?,
    })
}

/// The four graft-callable functions that change kernel state, each at its graftpoint.
fn functions(budget: Budget, rounds: usize, rt: &Runtime, progress: &mut dyn FnMut(&str)) -> Result<Vec<FunctionRow>> {
    use vino_cache::{Candidates, ReadAhead, VictimEnv, page_id};
    use vino_locks::{GrantArgs, GrantEnv, Lock, LockGrant, LockKind, Range, WaitInfo};
    use vino_sched::{PickArgs, PickThread, ThreadEnv};
    let mut rows = Vec::new();

    progress("vino_prefetch");
    rows.push(function_row(
        budget,
        rounds,
        "vino_prefetch",
        "file.compute_ra",
        |with, fail| {
            caller(
                "file_compute_ra",
                "i64 i32 i64",
                "i32",
                r#"(import "vino" "vino_prefetch" (func $f (param i64 i64) (result i32)))"#,
                "(drop (call $f (i64.const 8192) (i64.const 4096)))",
                with,
                fail,
            )
        },
        |wasm| {
            let ra = ReadAhead::new(rt, 1, "0");
            ra.slot().load(wasm, Owner::process(1)).context("loading a graft")?;
            Ok(move || {
                black_box(ra.advise(black_box(0), 4096, 1 << 20));
                Ok(())
            })
        },
    )?);

    progress("vino_page_hint");
    let ids: Vec<u64> = (0..32).map(|i| page_id(1, i)).collect();
    rows.push(function_row(
        budget,
        rounds,
        "vino_page_hint",
        "vas.pick_victim",
        |with, fail| {
            caller(
                "vas_pick_victim",
                "i32",
                "i32",
                r#"(import "vino" "vino_page_hint" (func $f (param i64 i32) (result i32)))"#,
                "(drop (call $f (i64.load (i32.const 1032)) (i32.const 1)))",
                with,
                fail,
            )
        },
        |wasm| {
            let slot: GraftSlot<vino_cache::PickVictim> =
                GraftSlot::new(rt, Arc::new(VictimEnv::new(1)), Access::Process(1), None);
            slot.load(wasm, Owner::process(1)).context("loading a graft")?;
            let ids = ids.clone();
            Ok(move || {
                black_box(slot.invoke(&Candidates::fixed(ids.clone())));
                black_box(slot.env().take_hints());
                Ok(())
            })
        },
    )?);

    progress("vino_lock_requeue");
    let waiters: Vec<WaitInfo> = (0..4)
        .map(|owner| WaitInfo {
            owner,
            kind: LockKind::Write,
            range: Range { start: 0, end: 1 },
            upgrade: false,
            age_ns: 0,
        })
        .collect();
    let held = [Lock {
        owner: 9,
        kind: LockKind::Write,
        range: Range { start: 0, end: 1 },
    }];
    rows.push(function_row(
        budget,
        rounds,
        "vino_lock_requeue",
        "lock.grant",
        |with, fail| {
            caller(
                "lock_grant",
                "i32 i32",
                "i64",
                r#"(import "vino" "vino_lock_requeue" (func $f (param i32 i32) (result i32)))"#,
                "(drop (call $f (i32.const 3) (i32.const 0)))",
                with,
                fail,
            )
        },
        |wasm| {
            let slot: GraftSlot<LockGrant> = GraftSlot::new(rt, Arc::new(GrantEnv::new(1)), Access::Process(1), None);
            slot.load(wasm, Owner::process(1)).context("loading a graft")?;
            let (waiters, held) = (waiters.clone(), held);
            Ok(move || {
                black_box(slot.invoke(&GrantArgs {
                    waiters: &waiters,
                    held: &held,
                }));
                black_box(slot.env().take_requeues());
                Ok(())
            })
        },
    )?);

    progress("vino_tickets_give");
    let candidates: Vec<vino_sched::Candidate> = (0..2)
        .map(|tid| vino_sched::Candidate {
            tid,
            pid: 1,
            uid: 1,
            tickets: 100,
            waited_ns: 0,
            cpu_ns: 0,
        })
        .collect();
    rows.push(function_row(
        budget,
        rounds,
        "vino_tickets_give",
        "sched.pick_thread",
        |with, fail| {
            caller(
                "sched_pick_thread",
                "i32 i32",
                "i32",
                r#"(import "vino" "vino_tickets_give" (func $f (param i64 i32) (result i32)))"#,
                "(drop (call $f (i64.const 2) (i32.const 1)))",
                with,
                fail,
            )
        },
        |wasm| {
            let slot: GraftSlot<PickThread> = GraftSlot::new(rt, Arc::new(ThreadEnv::new(1)), Access::Process(1), None);
            slot.load(wasm, Owner::process(1)).context("loading a graft")?;
            let candidates = candidates.clone();
            Ok(move || {
                black_box(slot.invoke(&PickArgs {
                    candidates: &candidates,
                    default: 0,
                }));
                black_box(slot.env().take_gifts());
                Ok(())
            })
        },
    )?);
    Ok(rows)
}

/// E3's hot list and null call, as built against instrumented, with `interrupt`.
fn hot_list(
    budget: Budget,
    rounds: usize,
    interrupt: Interruption,
    lists: &[[u32; CANDIDATES_PER_CALL]],
    instrumented: &mut Vec<String>,
) -> Result<Vec<HotRow>> {
    let engine = sandbox_engine_with(interrupt);
    let plain = WasmModules::compile_with(engine.clone(), interrupt, |_, bytes| Ok(bytes.to_vec()))?;
    let mut notes = Vec::new();
    let logged = WasmModules::compile_with(engine, interrupt, |name, bytes| {
        match vino_graft::undo_log::instrument(bytes) {
            Ok(b) => {
                notes.push(name.to_string());
                Ok(b)
            }
            // Only the hot list is measured here; the others may run as built.
            Err(e) if name != "hotlist.wasm" => {
                notes.push(format!("{name} not ({e})"));
                Ok(bytes.to_vec())
            }
            Err(e) => Err(e.into()),
        }
    })?;
    if instrumented.is_empty() {
        *instrumented = notes;
    }
    let _ticker = (interrupt == Interruption::Epoch).then(|| EpochTicker::start(&plain.engine));
    let mut off = Wasmtime::instantiate(&plain)?;
    let mut on = Wasmtime::instantiate(&logged)?;
    hot_setup(&mut off)?;
    hot_setup(&mut on)?;
    let (a, b) = (hot_answer(&mut on, lists)?, hot_answer(&mut off, lists)?);
    if a != b {
        bail!("the instrumented hot list answers {a}, the module as built {b}");
    }
    let name = match interrupt {
        Interruption::Fuel => "fuel",
        Interruption::Epoch => "epoch",
    };
    let (nop, _) = in_turn(budget, rounds, || on.nop(black_box(7)), || off.nop(black_box(7)))?;
    let (mut i, mut j) = (0usize, 0usize);
    let (hot, _) = in_turn(
        budget,
        rounds,
        || {
            i = (i + 1) & (CANDIDATE_LISTS - 1);
            on.hl_pick(&lists[i])
        },
        || {
            j = (j + 1) & (CANDIDATE_LISTS - 1);
            off.hl_pick(&lists[j])
        },
    )?;
    Ok(vec![
        HotRow {
            interrupt: name,
            call: "hot-list search (8 candidates, 64 hot pages)",
            times: hot,
        },
        HotRow {
            interrupt: name,
            call: "null call (vb_nop)",
            times: nop,
        },
    ])
}

pub fn run(opts: &RollbackOptions, progress: &mut dyn FnMut(&str)) -> Result<RollbackReport> {
    let (budget, rounds) = (opts.budget(), opts.rounds);
    let (on, off) = (runtime(true), runtime(false));
    let kernel = Arc::new(ToyKernel::new(1));

    progress("null graft");
    let null = slots(&on, &off, &kernel, &null_graft(), false)?;
    let (null_pair, _) = through_slots(budget, rounds, &null)?;
    let mut calls = vec![Row {
        graft: "null graft (null.c)".into(),
        words: 0,
        times: null_pair,
    }];

    let mut writes = Vec::new();
    for words in WORDS {
        progress(&format!("{words} words stored per call"));
        let s = slots(&on, &off, &kernel, &writer(words, false), false)?;
        let (pair, timed) = through_slots(budget, rounds, &s)?;
        calls.push(Row {
            graft: format!("stores {words} word{}", if words == 1 { "" } else { "s" }),
            words,
            times: pair,
        });
        writes.push((words, timed));
    }

    let mut aborts = Vec::new();
    let mut aborted = Vec::new();
    for records in RECORDS {
        progress(&format!("{records} words stored, then refused"));
        let s = slots(&on, &off, &kernel, &writer(records, true), true)?;
        let (pair, timed) = through_slots(budget, rounds, &s)?;
        aborts.push(Row {
            graft: format!("stores {records} words, answers -1"),
            words: records,
            times: pair,
        });
        aborted.push((records, timed));
    }
    let xy = |rows: &[Row], on: bool| -> Vec<(f64, f64)> {
        rows.iter()
            .map(|r| (r.words as f64, if on { r.times.on_ns } else { r.times.off_ns }))
            .collect()
    };
    let added_ns_per_word = added_slope(&writes);
    let abort_added_ns_per_record = added_slope(&aborted);
    let slopes = Slopes {
        write_on_ns_per_word: slope(&xy(&calls[1..], true)),
        write_off_ns_per_word: slope(&xy(&calls[1..], false)),
        added_ns_per_word,
        abort_added_ns_per_record,
        replay_ns_per_record: abort_added_ns_per_record - added_ns_per_word,
    };

    let functions = functions(budget, rounds, &on, progress)?;

    let lists = candidate_lists();
    let mut hot = Vec::new();
    let mut instrumented = Vec::new();
    for interrupt in [Interruption::Fuel, Interruption::Epoch] {
        progress(&format!("E3 hot list, {interrupt:?}"));
        hot.extend(hot_list(budget, rounds, interrupt, &lists, &mut instrumented)?);
    }

    let null_ratio = calls[0].times.ratio;
    let mut goals = vec![Goal {
        what: "null graft through the graftpoint",
        goal: NULL_GOAL,
        measured: null_ratio,
        met: null_ratio <= NULL_GOAL,
    }];
    for r in hot.iter().filter(|r| r.call.starts_with("hot-list")) {
        goals.push(Goal {
            what: if r.interrupt == "fuel" {
                "E3 hot-list search, fuel (as the kernel runs grafts)"
            } else {
                "E3 hot-list search, epochs"
            },
            goal: HOT_GOAL,
            measured: r.times.ratio,
            met: r.times.ratio <= HOT_GOAL,
        });
    }
    Ok(RollbackReport {
        rounds,
        goals,
        calls,
        aborts,
        slopes,
        functions,
        hot_list: hot,
        instrumented,
    })
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

fn pair_cells(p: &Pair) -> [String; 4] {
    [
        fmt_ns(p.off_ns),
        fmt_ns(p.on_ns),
        fmt_ns(p.added_ns),
        format!("{}x", fmt_ratio(p.ratio)),
    ]
}

impl RollbackReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut goals = Table::new(
            "Memory rollback: goals (rollback on over off)",
            &["what", "goal", "measured", "met"],
        );
        for g in &self.goals {
            goals.row([
                g.what.to_string(),
                format!("≤ {}x", fmt_ratio(g.goal)),
                format!("{}x", fmt_ratio(g.measured)),
                yes_no(g.met),
            ]);
        }
        goals.note("medians of the per-round ratios; each round times a batch of calls on both sides");

        let heads = ["graft", "rollback off", "rollback on", "added", "on / off"];
        let mut calls = Table::new("Calls through the toy.apply graftpoint, rollback on and off", &heads);
        for r in &self.calls {
            let [a, b, c, d] = pair_cells(&r.times);
            calls.row([r.graft.clone(), a, b, c, d]);
        }
        calls.note(format!(
            "ns per call; medians of {} rounds; added: median of each round's difference",
            self.rounds
        ));
        calls.note(format!(
            "per word stored: {} with rollback, {} without; logging adds {} a word",
            fmt_ns(self.slopes.write_on_ns_per_word),
            fmt_ns(self.slopes.write_off_ns_per_word),
            fmt_ns(self.slopes.added_ns_per_word)
        ));

        let mut aborts = Table::new(
            "Failed calls (the graft answers -1, which toy.apply refuses), rollback on and off",
            &heads,
        );
        for r in &self.aborts {
            let [a, b, c, d] = pair_cells(&r.times);
            aborts.row([r.graft.clone(), a, b, c, d]);
        }
        aborts.note(format!(
            "one undo record adds {} to a failed call (logged and replayed); replaying it {}",
            fmt_ns(self.slopes.abort_added_ns_per_record),
            fmt_ns(self.slopes.replay_ns_per_record)
        ));

        let mut functions = Table::new(
            "Graft-callable functions that change kernel state: a graft calling one once, against the same graft without the call",
            &[
                "function",
                "graftpoint",
                "without",
                "with",
                "the call adds",
                "failing: without",
                "failing: with",
                "failing: the call adds",
            ],
        );
        for f in &self.functions {
            functions.row([
                f.function.to_string(),
                f.graftpoint.to_string(),
                fmt_ns(f.committed.off_ns),
                fmt_ns(f.committed.on_ns),
                fmt_ns(f.committed.added_ns),
                fmt_ns(f.aborted.off_ns),
                fmt_ns(f.aborted.on_ns),
                fmt_ns(f.aborted.added_ns),
            ]);
        }
        functions.note(
            "ns per kernel call through the graftpoint's slot, rollback on; the call begins the \
             call's transaction (a graft that calls nothing runs without one), and the change is \
             made at commit or dropped when the graft then traps",
        );

        let mut hot = Table::new(
            "E3's hot-list module through wasmtime: as built against instrumented (one engine)",
            &[
                "interrupt",
                "call",
                "as built",
                "instrumented",
                "added",
                "instrumented / as built",
            ],
        );
        for r in &self.hot_list {
            let [a, b, c, d] = pair_cells(&r.times);
            hot.row([r.interrupt.to_string(), r.call.to_string(), a, b, c, d]);
        }
        hot.note(format!("instrumented: {}", self.instrumented.join(", ")));
        vec![goals, calls, aborts, functions, hot]
    }

    /// ns per call with rollback off and on, null graft, writers, hot list (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let bars = |p: &Pair| {
            vec![
                ("rollback off".to_string(), p.off_ns),
                ("rollback on".to_string(), p.on_ns),
            ]
        };
        let mut groups: Vec<(String, Vec<(String, f64)>)> = self
            .calls
            .iter()
            .map(|r| {
                let name = match r.words {
                    0 => "null graft".to_string(),
                    1 => "1 word".to_string(),
                    w => format!("{w} words"),
                };
                (name, bars(&r.times))
            })
            .collect();
        for r in self.hot_list.iter().filter(|r| r.call.starts_with("hot-list")) {
            groups.push((format!("hot list ({})", r.interrupt), bars(&r.times)));
        }
        bar_chart_with(
            path,
            "Memory rollback: ns per call, off and on",
            "ns per call",
            &groups,
            &ChartOptions {
                value_labels: true,
                ..ChartOptions::default()
            },
        )
    }
}
