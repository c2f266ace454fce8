//! Replaying a recording offline, without a kernel ([`crate::record`]).
//!
//! The module is compiled and rewritten as the kernel does (the same undo log, the same fuel),
//! instantiated with stand-ins for the graft-callable functions that give the recorded answers,
//! started from the recorded image, and fed the recorded invocations, owner writes and control
//! calls in order. Replaying the recorded module checks, call by call, that it asks the kernel
//! the same questions and gives the same answers (results and the argument area it leaves),
//! and fails the same way; the first difference stops the replay and is reported where it
//! happened. Replaying another module on the same recording answers "what would it have
//! decided": it starts fresh, is offered the same arguments, gets a recorded answer where it asks
//! what the recorded graft asked and 0 otherwise, and its decisions are compared with the
//! recorded ones.

use crate::callable::CallError;
use crate::check::hex;
use crate::record::{Changes, Event, Outcome, Recording, apply, diff};
use crate::runtime::{Interrupt, sandbox_config};
use crate::sandbox::{HostAbort, classify, outcome_of, val_bits};
use crate::undo_log::{UndoLog, instrument};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use wasmtime::{Engine, Func, Instance, Linker, Memory, Module, ResourceLimiter, Store, Val, ValType};

/// Why a replay could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("the module: {0}")]
    Module(String),
    #[error("the recording: {0}")]
    Recording(String),
}

/// The first place a replay of the recorded module did something else than the recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Divergence {
    /// The invocation (counted from 0) and the event in the recording.
    pub invocation: u64,
    pub event: usize,
    pub expected: String,
    pub got: String,
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    /// The module replayed is the one recorded.
    pub same_module: bool,
    pub invocations: u64,
    /// Invocations whose answer (results, area and outcome) was the recorded one.
    pub matched: u64,
    /// Invocations that failed in the replay, and those of them the recording failed alike.
    pub failed: u64,
    pub failed_as_recorded: u64,
    /// Imposed failures (lock deadlines, conflicts) replayed as aborts.
    pub imposed: u64,
    pub control_calls: u64,
    /// Calls of kernel functions the recording had no answer for (another module only).
    pub unanswered_calls: u64,
    /// The first difference (the recorded module only; the replay stops there).
    pub divergence: Option<Divergence>,
    /// The recording ended before its graft did (limit reached or graft unloaded).
    pub truncated: bool,
    pub elapsed_ns: u64,
    /// Invocations replayed per second.
    pub rate: f64,
    /// Each invocation's decision in the replay, or `None` if it failed (kept only when asked
    /// for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decisions: Option<Vec<Option<Decision>>>,
}

/// What one replayed invocation decided: its last entry call's results, what it changed in
/// the argument area the kernel wrote (the rest of its answer, where a graftpoint answers
/// there), and the kernel functions it called (with what it asked; their answers were the
/// recording's, or 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub results: Vec<i64>,
    pub area: Changes,
    pub calls: Vec<(String, Vec<i64>)>,
}

impl ReplayReport {
    /// True if the replay reproduced every recorded answer.
    pub fn exact(&self) -> bool {
        self.same_module && self.divergence.is_none() && self.matched == self.invocations
    }
}

/// Options of a replay.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayOptions {
    /// Keep each invocation's decision in the report.
    pub decisions: bool,
    /// Native stack a graft may use (the kernel's default if 0).
    pub max_wasm_stack: usize,
}

/// One recorded call of a kernel function, as replay answers it.
struct Answer {
    function: String,
    args: Vec<i64>,
    answer: Result<Option<i64>, String>,
}

/// What the stand-in functions see.
struct State {
    same: bool,
    /// The calls the current invocation (or control call) made in the recording, in order.
    answers: VecDeque<Answer>,
    /// Set when the recorded module called something else than the recording says.
    diverged: Option<(String, String)>,
    unanswered: u64,
    /// The kernel calls the current invocation made, in order.
    made: Vec<(String, Vec<i64>)>,
    memory_cap: usize,
    /// While instantiating (a start function): calls get 0, nothing is checked.
    starting: bool,
}

impl ResourceLimiter for State {
    fn memory_growing(&mut self, _: usize, desired: usize, _: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_cap {
            return Err(wasmtime::Error::new(HostAbort::MemoryCap));
        }
        Ok(true)
    }
    fn table_growing(&mut self, _: usize, desired: usize, _: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 10_000)
    }
}

/// A stand-in for kernel function `name`: the recorded answer.
fn answer(state: &mut State, name: &str, args: &[i64]) -> Result<Option<i64>, String> {
    if state.starting {
        return Ok(Some(0));
    }
    state.made.push((name.to_string(), args.to_vec()));
    if state.same {
        let Some(next) = state.answers.pop_front() else {
            state.diverged = Some(("no more kernel calls".into(), format!("{name}{args:?}")));
            return Err("replay diverged".into());
        };
        if next.function != name || next.args != args {
            state.diverged = Some((format!("{}{:?}", next.function, next.args), format!("{name}{args:?}")));
            return Err("replay diverged".into());
        }
        return next.answer;
    }
    match state.answers.iter().position(|a| a.function == name && a.args == args) {
        Some(i) => state.answers.remove(i).expect("found").answer,
        None => {
            state.unanswered += 1;
            Ok(Some(0))
        }
    }
}

/// The replay's instance of the module.
struct Sandbox {
    store: Store<State>,
    instance: Instance,
    entry: Func,
    memory: Option<Memory>,
    undo: UndoLog,
    arg_area: Option<(usize, usize)>,
    fuel: bool,
    /// The records of a paged call's earlier pages.
    kept: Vec<u8>,
}

/// A runtime for running another module live on what a recording holds (a ghost model's
/// candidate, [`crate::Shadow`]): under fuel, with the recording's budgets and memory cap, so
/// that it decides the same on every run.
pub fn runtime_for(header: &crate::record::Header) -> crate::Runtime {
    crate::Runtime::new(crate::RuntimeConfig {
        interrupt: crate::Interrupt::Fuel,
        // One unit a nanosecond: a budget of N units is written as N nanoseconds.
        fuel_per_ms: 1_000_000,
        invocation_budget: Duration::from_nanos(header.invocation_units.min(crate::record::REPLAY_UNITS_MAX)),
        control_budget: Duration::from_nanos(header.control_units.min(crate::record::REPLAY_UNITS_MAX)),
        memory_cap: header.memory_cap.min(crate::record::REPLAY_MEMORY_MAX) as usize,
        compile_threads: 1,
        ..crate::RuntimeConfig::default()
    })
}

/// Where an owner's write at `offset` of the recorded module goes in another module: into the
/// same exported symbol (the last at or below it) at the same distance, found by `address`;
/// at the same offset where no symbol is below it or the other module lacks it.
pub fn moved_write(header: &crate::record::Header, offset: u32, address: impl Fn(&str) -> Option<u32>) -> u32 {
    let below = header.symbols.partition_point(|&(_, at)| at <= offset);
    match below.checked_sub(1).map(|i| &header.symbols[i]) {
        Some((name, at)) => address(name).map_or(offset, |to| to.wrapping_add(offset - at)),
        None => offset,
    }
}

/// Replays `recording` on `wasm` (the recorded module, or another for the same graftpoint).
pub fn replay(recording: &Recording, wasm: &[u8], options: ReplayOptions) -> Result<ReplayReport, ReplayError> {
    recording.check().map_err(ReplayError::Recording)?;
    let mut sandbox = Sandbox::new(recording, wasm, options)?;
    let same = sandbox.store.data().same;
    let h = &recording.header;
    let mut report = ReplayReport {
        same_module: same,
        invocations: 0,
        matched: 0,
        failed: 0,
        failed_as_recorded: 0,
        imposed: 0,
        control_calls: 0,
        unanswered_calls: 0,
        divergence: None,
        truncated: recording.truncated || recording.ended.is_some(),
        elapsed_ns: 0,
        rate: 0.0,
        decisions: options.decisions.then(Vec::new),
    };
    // The argument area as the kernel last wrote it: the recorded graft's, at the start.
    let mut area = match h.arg_area {
        Some((at, len)) => recording.image.slice(at, len),
        None => Vec::new(),
    };
    let started = Instant::now();
    let events = &recording.events;
    let mut i = 0;
    while i < events.len() && report.divergence.is_none() {
        match &events[i] {
            Event::Invoke { params, area: changes } => {
                let end = events[i..]
                    .iter()
                    .position(|e| matches!(e, Event::Return { .. }))
                    .map(|n| i + n);
                let Some(end) = end else { break }; // the recording stopped inside it
                let diverged = sandbox.invocation(h, &mut area, params, changes, &events[i + 1..=end], &mut report);
                if let Some((expected, got)) = diverged {
                    report.divergence = Some(Divergence {
                        invocation: report.invocations - 1,
                        event: i,
                        expected,
                        got,
                    });
                }
                i = end + 1;
            }
            Event::Write { offset, bytes } => {
                if let Some(m) = sandbox.memory {
                    let data = m.data_mut(&mut sandbox.store);
                    if let Some(to) = data.get_mut(*offset as usize..*offset as usize + bytes.len()) {
                        to.copy_from_slice(bytes);
                    }
                }
                i += 1;
            }
            Event::Control { name, args } => {
                let end = events[i..]
                    .iter()
                    .position(|e| matches!(e, Event::ControlReturn { .. }))
                    .map(|n| i + n);
                let Some(end) = end else { break };
                report.control_calls += 1;
                if let Some((expected, got)) = sandbox.control(h, name, args, &events[i + 1..=end]) {
                    report.divergence = Some(Divergence {
                        invocation: report.invocations,
                        event: i,
                        expected,
                        got,
                    });
                }
                i = end + 1;
            }
            Event::Reset(image) => {
                if same {
                    sandbox.reset(image).map_err(ReplayError::Recording)?;
                }
                i += 1;
            }
            // Outside an invocation or control call these are the tail of one cut short.
            Event::Page { .. }
            | Event::Call { .. }
            | Event::Return { .. }
            | Event::ControlReturn { .. }
            | Event::Access { .. } => i += 1,
        }
    }
    let elapsed = started.elapsed();
    report.elapsed_ns = elapsed.as_nanos() as u64;
    report.rate = report.invocations as f64 / elapsed.as_secs_f64().max(1e-9);
    report.unanswered_calls = sandbox.store.data().unanswered;
    Ok(report)
}

impl Sandbox {
    fn new(recording: &Recording, wasm: &[u8], options: ReplayOptions) -> Result<Sandbox, ReplayError> {
        let h = &recording.header;
        let hash: [u8; 32] = Sha256::digest(wasm).into();
        let same = hex(&hash) == h.module_sha256;
        let stack = match options.max_wasm_stack {
            0 => crate::RuntimeConfig::default().max_wasm_stack,
            n => n,
        };
        let engine =
            Engine::new(&sandbox_config(Interrupt::Fuel, stack)).map_err(|e| ReplayError::Module(e.to_string()))?;
        let binary = wat::parse_bytes(wasm).map_err(|e| ReplayError::Module(e.to_string()))?;
        let logged = instrument(&binary).map_err(|e| ReplayError::Module(e.to_string()))?;
        let module = Module::new(&engine, &logged).map_err(|e| ReplayError::Module(format!("{e:#}")))?;
        let state = State {
            same,
            answers: VecDeque::new(),
            diverged: None,
            unanswered: 0,
            made: Vec::new(),
            memory_cap: h.memory_cap as usize,
            starting: true,
        };
        let mut store = Store::new(&engine, state);
        store.limiter(|s| s as &mut dyn ResourceLimiter);
        store.set_epoch_deadline(u64::MAX);
        store
            .set_fuel(h.control_units)
            .map_err(|e| ReplayError::Module(e.to_string()))?;
        let mut linker = Linker::new(&engine);
        for import in module.imports() {
            let wasmtime::ExternType::Func(ty) = import.ty() else {
                return Err(ReplayError::Module(format!(
                    "imports {}.{}, not a function",
                    import.module(),
                    import.name()
                )));
            };
            let name = import.name().to_string();
            let (module_name, field) = (import.module().to_string(), import.name().to_string());
            linker
                .func_new(&module_name, &field, ty.clone(), move |mut caller, params, results| {
                    let args: Vec<i64> = params.iter().filter_map(val_bits).collect();
                    match answer(caller.data_mut(), &name, &args) {
                        Ok(value) => {
                            for (slot, ty) in results.iter_mut().zip(ty.results()) {
                                *slot = match ty {
                                    ValType::I64 => Val::I64(value.unwrap_or(0)),
                                    _ => Val::I32(value.unwrap_or(0) as i32),
                                };
                            }
                            Ok(())
                        }
                        Err(why) => Err(wasmtime::Error::new(HostAbort::Call(CallError::Forbidden(why)))),
                    }
                })
                .map_err(|e| ReplayError::Module(e.to_string()))?;
        }
        let instance = linker
            .instantiate(&mut store, &module)
            .map_err(|e| ReplayError::Module(format!("instantiating: {e:#}")))?;
        store.data_mut().starting = false;
        let undo = UndoLog::new(&mut store, &instance).map_err(|e| ReplayError::Module(e.to_string()))?;
        undo.commit(&mut store)
            .map_err(|e| ReplayError::Module(e.to_string()))?;
        let entry = instance
            .get_func(&mut store, &h.entry)
            .ok_or_else(|| ReplayError::Module(format!("exports no `{}`", h.entry)))?;
        // The graft's memory whatever it exports it as (the undo log exports it again).
        let memory = undo.memory();
        let arg_area = match (h.arg_area, same) {
            (None, _) => None,
            (Some((at, len)), true) => Some((at as usize, len as usize)),
            (Some((_, len)), false) => {
                let at = match instance.get_global(&mut store, "vino_args").map(|g| g.get(&mut store)) {
                    Some(Val::I32(at)) => at as u32 as usize,
                    _ => return Err(ReplayError::Module("exports no `vino_args`".into())),
                };
                Some((at, len as usize))
            }
        };
        let mut sandbox = Sandbox {
            store,
            instance,
            entry,
            memory,
            undo,
            arg_area,
            fuel: h.fuel,
            kept: Vec::new(),
        };
        if same {
            sandbox.reset(&recording.image).map_err(ReplayError::Recording)?;
        }
        Ok(sandbox)
    }

    /// Sets memory and globals to `image`.
    fn reset(&mut self, image: &crate::record::Image) -> Result<(), String> {
        if let Some(m) = self.memory {
            let size = m.data_size(&self.store) as u64;
            if size < image.memory_bytes {
                let pages = (image.memory_bytes - size).div_ceil(65536);
                m.grow(&mut self.store, pages)
                    .map_err(|e| format!("growing memory to the image: {e}"))?;
            }
            if !image.restore(m.data_mut(&mut self.store)) {
                return Err("the image does not fit the memory".into());
            }
        }
        self.undo
            .set_globals(&mut self.store, &image.globals)
            .map_err(|e| e.to_string())?;
        self.undo.commit(&mut self.store).map_err(|e| e.to_string())
    }

    /// Loads the recorded kernel calls of `events` (an invocation's or control call's).
    fn load_answers(&mut self, h: &crate::record::Header, events: &[Event]) {
        let answers = events.iter().filter_map(|e| match e {
            Event::Call { function, args, answer } => Some(Answer {
                function: h.functions.get(*function as usize).cloned().unwrap_or_default(),
                args: args.clone(),
                answer: answer.clone(),
            }),
            _ => None,
        });
        let state = self.store.data_mut();
        state.answers = answers.collect();
        state.diverged = None;
        state.made.clear();
    }

    /// Calls the entry point with `params`, `area` written into the argument area first.
    fn call(&mut self, params: &[i64], area: &[u8]) -> Result<Vec<i64>, String> {
        if let (Some((at, len)), Some(m)) = (self.arg_area, self.memory) {
            let data = m.data_mut(&mut self.store);
            if let Some(to) = data.get_mut(at..at + len.min(area.len())) {
                to.copy_from_slice(&area[..len.min(area.len())]);
            }
        }
        let ty = self.entry.ty(&self.store);
        let args = typed(&ty, params);
        let mut results = vec![Val::I32(0); ty.results().len()];
        self.entry
            .call(&mut self.store, &args, &mut results)
            .map_err(|e| classify(&e).to_string())?;
        Ok(results.iter().filter_map(val_bits).collect())
    }

    /// What the graft changed in the argument area the kernel wrote (`area`).
    fn area_left(&self, area: &[u8]) -> Changes {
        match (self.arg_area, self.memory) {
            (Some((at, len)), Some(m)) => diff(area, m.data(&self.store).get(at..at + len).unwrap_or(&[])),
            _ => Vec::new(),
        }
    }

    /// Replays one invocation: its first call and pages (`events` up to its `Return`).
    /// Returns a divergence (recorded module only).
    fn invocation(
        &mut self,
        h: &crate::record::Header,
        area: &mut [u8],
        params: &[i64],
        changes: &Changes,
        events: &[Event],
        report: &mut ReplayReport,
    ) -> Option<(String, String)> {
        let Some(Event::Return {
            results: want,
            left: want_left,
            outcome,
        }) = events.last()
        else {
            return None;
        };
        report.invocations += 1;
        let same = self.store.data().same;
        self.load_answers(h, events);
        self.kept.clear();
        let _ = self.undo.begin(&mut self.store);
        self.store.set_fuel(h.invocation_units).expect("fuel is on");
        apply(area, changes);
        let mut got = self.call(params, area);
        let mut diverged = None;
        for event in events {
            let Event::Page {
                asked,
                params,
                area: page,
            } = event
            else {
                continue;
            };
            match &got {
                // The graft asked for the page the recorded one asked for: it gets it.
                Ok(r) if r == asked => {}
                // Another module that decided without it is not offered it.
                _ if !same => break,
                Ok(r) => {
                    diverged = Some((format!("a request for the next page {asked:?}"), format!("{r:?}")));
                    break;
                }
                Err(_) => break,
            }
            apply(area, page);
            got = self.page(h, params, area);
        }
        let imposed = matches!(outcome, Outcome::Imposed(_));
        let invalid = matches!(outcome, Outcome::Failed(f) if f.starts_with("invalid result"));
        let left = self.area_left(area);
        if got.is_err() || imposed || invalid {
            let kept = std::mem::take(&mut self.kept);
            let _ = self.undo.roll_back_after(&mut self.store, &kept);
        }
        if let Some(d) = report.decisions.as_mut() {
            let decided = got.as_ref().ok().filter(|_| !imposed);
            d.push(decided.map(|results| Decision {
                results: results.clone(),
                area: left.clone(),
                calls: self.store.data().made.clone(),
            }));
        }
        report.imposed += u64::from(imposed);
        report.failed += u64::from(got.is_err());
        let as_recorded = match (&got, outcome) {
            (_, Outcome::Imposed(_)) => true,
            (Ok(r), Outcome::Decided) => r == want && left == *want_left,
            (Ok(r), Outcome::Failed(_)) => invalid && r == want,
            (Err(e), Outcome::Failed(f)) => {
                report.failed_as_recorded += u64::from(e == f);
                e == f
            }
            (Err(_), Outcome::Decided) => false,
        };
        report.matched += u64::from(as_recorded);
        if !same {
            return None;
        }
        if let Some((expected, got)) = self.store.data_mut().diverged.take() {
            return Some((format!("a call of {expected}"), format!("a call of {got}")));
        }
        if diverged.is_some() {
            return diverged;
        }
        (!as_recorded).then(|| {
            let got = match &got {
                Ok(r) => format!("{r:?}"),
                Err(e) => e.clone(),
            };
            (format!("{want:?}, {outcome:?}"), got)
        })
    }

    /// One more page of a paged invocation.
    fn page(&mut self, h: &crate::record::Header, params: &[i64], area: &[u8]) -> Result<Vec<i64>, String> {
        if self.fuel {
            let left = self.store.get_fuel().unwrap_or(0);
            if left <= h.page_units {
                return Err(crate::sandbox::Failure::Budget.to_string());
            }
            self.store.set_fuel(left - h.page_units).expect("fuel is on");
        }
        let _ = self.undo.keep(&mut self.store, &mut self.kept);
        self.call(params, area)
    }

    /// Replays a control call (`events` up to its `ControlReturn`).
    fn control(
        &mut self,
        h: &crate::record::Header,
        name: &str,
        args: &[i64],
        events: &[Event],
    ) -> Option<(String, String)> {
        self.load_answers(h, events);
        let same = self.store.data().same;
        let export = format!("{}{name}", crate::CONTROL_PREFIX);
        let Some(func) = self.instance.get_func(&mut self.store, &export) else {
            return same.then(|| (format!("a control function `{export}`"), "none".into()));
        };
        let _ = self.undo.begin(&mut self.store);
        self.store.set_fuel(h.control_units).expect("fuel is on");
        let ty = func.ty(&self.store);
        let params = typed(&ty, args);
        let mut results = vec![Val::I64(0); ty.results().len()];
        let done = func
            .call(&mut self.store, &params, &mut results)
            .map_err(|e| classify(&e));
        let Some(Event::ControlReturn { result, outcome }) = events.last() else {
            return None;
        };
        let imposed = matches!(outcome, Outcome::Imposed(_));
        if done.is_err() || imposed {
            let _ = self.undo.roll_back(&mut self.store);
        }
        let diverged = self.store.data_mut().diverged.take();
        if !same {
            return None;
        }
        if let Some((expected, got)) = diverged {
            return Some((format!("a call of {expected}"), format!("a call of {got}")));
        }
        let got_outcome = done.as_ref().err().map_or(Outcome::Decided, outcome_of);
        let got_result = done.ok().and_then(|_| results.first().and_then(val_bits));
        match imposed || (got_outcome == *outcome && got_result == *result) {
            true => None,
            false => Some((
                format!("{result:?}, {outcome:?}"),
                format!("{got_result:?}, {got_outcome:?}"),
            )),
        }
    }
}

/// Recorded values as the parameters of a function of type `ty` (missing ones 0).
fn typed(ty: &wasmtime::FuncType, values: &[i64]) -> Vec<Val> {
    ty.params()
        .zip(values.iter().chain(std::iter::repeat(&0)))
        .map(|(t, &v)| match t {
            ValType::I64 => Val::I64(v),
            _ => Val::I32(v as i32),
        })
        .collect()
}

/// How long a replay of `recording` took per invocation (for reports).
pub fn per_invocation(report: &ReplayReport) -> Duration {
    Duration::from_nanos(report.elapsed_ns / report.invocations.max(1))
}
