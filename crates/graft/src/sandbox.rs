//! One loaded graft: its wasmtime store and instance, the limits around it, and how one
//! invocation runs inside a transaction.

use crate::callable::{CallError, Callables};
use crate::error::{GraftError, LoadError};
use crate::point::{GraftPoint, WasmTypes, export_name};
use crate::record::{Event, Header, Image, Outcome, Recording, Tape};
use crate::runtime::{Interrupt, Runtime, RuntimeConfig};
use crate::stats::Counters;
use crate::undo_log::UndoLog;
use parking_lot::{Mutex, MutexGuard};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use vino_account::{Account, Exceeded, Growing, Resource};
use vino_vlt::{LockMode, ObjectId, VltError, current};
use wasmtime::{Func, Instance, Memory, ResourceLimiter, Store, Trap, TypedFunc, UpdateDeadline, Val, ValType};

/// Size of the argument area a graft exports as `vino_args`, unless its graftpoint sets its own
/// ([`GraftPoint::ARG_BYTES`]).
pub const ARG_BYTES: usize = 4096;

/// Prefix of the exports the owner may call as control functions.
pub const CONTROL_PREFIX: &str = "vino_ctl_";

/// Why an invocation's transaction aborted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The graft trapped (out-of-bounds access, unreachable, stack overflow, ...).
    Trap(String),
    /// The graft ran past its CPU budget.
    Budget,
    /// The transaction passed its deadline (it held a lock others waited for too long).
    Deadline,
    /// The graft tried to grow its memory past the cap (or its writes' undo log outgrew it).
    MemoryCap,
    /// A graft-callable function refused a call.
    Refused(CallError),
    /// The transaction lost a lock conflict (a deadlock broken, a wait that timed out): not the
    /// graft's fault, so it does not count towards unloading it.
    Conflict(VltError),
    /// The graft's decision was out of range.
    Invalid(String),
    /// The graft's instance was busy (its owner in a control call): the default decided
    /// without waiting. Not the graft's fault.
    Busy,
    /// Growing the graft's memory would pass its owner's account limit.
    Quota(vino_account::Exceeded),
}

impl Failure {
    /// True if the failure is the graft's doing (and so counts towards unloading it).
    pub fn is_grafts_fault(&self) -> bool {
        !matches!(self, Failure::Conflict(_) | Failure::Busy)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Trap(t) => f.write_str(t),
            Failure::Budget => f.write_str("ran past its CPU budget"),
            Failure::Deadline => f.write_str("held a lock others wait for past its deadline"),
            Failure::MemoryCap => f.write_str("tried to grow its memory (or its writes' undo log) past the cap"),
            Failure::Refused(e) => write!(f, "refused: {e}"),
            Failure::Conflict(e) => write!(f, "lock conflict: {e}"),
            Failure::Invalid(why) => write!(f, "invalid result: {why}"),
            Failure::Busy => f.write_str("its instance was busy (its owner in a control call)"),
            Failure::Quota(e) => write!(f, "memory: {e}"),
        }
    }
}

/// An abort raised by the host side (limits, refusals), carried through wasmtime as an error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HostAbort {
    #[error("{0}")]
    Call(CallError),
    #[error("CPU budget exhausted")]
    Budget,
    #[error("transaction deadline passed")]
    Deadline,
    #[error("memory cap reached")]
    MemoryCap,
    #[error("{0}")]
    Quota(vino_account::Exceeded),
}

/// What a graft's store carries: the kernel state its callable functions reach, and its limits.
pub struct HostState<E> {
    pub(crate) env: Arc<E>,
    memory_cap: usize,
    /// Epoch ticks left in the current invocation's budget.
    ticks_left: u64,
    /// The runtime's count of epochs on a manual clock, and its value when this store last
    /// looked: a graft that was off the CPU while the clock moved several ticks is charged them
    /// all (wasmtime calls back once however many passed). On the machine's clock nothing is
    /// counted and each callback is one tick.
    epochs: Arc<std::sync::atomic::AtomicU64>,
    epoch_seen: u64,
    /// Where `vino_log` leaves its messages.
    pub(crate) counters: Arc<Counters>,
    /// The charge for the graft's memory to its owner (refunded when the store goes).
    memory: Option<Growing>,
    /// The recording of the graft's inputs, while one runs ([`crate::record`]).
    pub(crate) tape: Option<Box<Tape>>,
}

impl<E> HostState<E> {
    /// Charges `bytes` more of graft memory to the owner's account.
    fn charge_memory(&mut self, bytes: u64) -> Result<(), Exceeded> {
        self.memory.as_mut().map_or(Ok(()), |m| m.grow(bytes))
    }
}

impl<E: Send + Sync + 'static> ResourceLimiter for HostState<E> {
    fn memory_growing(&mut self, current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_cap {
            return Err(wasmtime::Error::new(HostAbort::MemoryCap));
        }
        let more = desired.saturating_sub(current) as u64;
        if more > 0
            && let Err(e) = self.charge_memory(more)
        {
            return Err(wasmtime::Error::new(HostAbort::Quota(e)));
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 10_000)
    }
}

/// The CPU budget of one invocation at `G`: its own, capped by the runtime's.
pub(crate) fn budget<G: GraftPoint>(config: &RuntimeConfig) -> Duration {
    G::BUDGET.min(config.invocation_budget)
}

/// Where a graft's argument area is: its offset in the graft's memory, and its address in ours.
///
/// The address is taken once, at instantiation, because the kernel fills the area on every
/// call and reading the memory's base through the store each time (several dependent loads
/// and checks in `Memory::data_mut`, twice a call) cost a small graft a quarter of its call.
/// It stays valid for the instance's life: the sandbox's memories never move (`sandbox_config`
/// sets `memory_may_move(false)`), never shrink, and the area was inside the memory when taken.
#[derive(Clone, Copy)]
struct ArgArea {
    at: usize,
    ptr: std::ptr::NonNull<u8>,
}

// SAFETY: the pointer is into the memory of the store it travels with (both in one `Live`,
// behind its mutex); it is only dereferenced through `&mut Live` or `&Live`.
unsafe impl Send for ArgArea {}

/// The running instance of a graft. Calls into it are serialized: its memory is one sandbox.
struct Live<G: GraftPoint> {
    store: Store<HostState<G::Env>>,
    instance: Instance,
    entry: TypedFunc<G::Params, G::Results>,
    memory: Option<Memory>,
    /// The argument area in the graft's memory.
    arg_area: Option<ArgArea>,
    /// The undo log of the graft's writes, if its module keeps one
    /// ([`RuntimeConfig::roll_back_memory`]).
    undo: Option<UndoLog>,
    /// The records of a paged call's earlier pages (see [`UndoLog::keep`]).
    kept: Vec<u8>,
    /// A transaction family called this instance from inside a graft and has not ended: its
    /// calls' writes may still be undone, so no one else may call the instance (or write its
    /// memory) until the family commits or aborts. See [`WasmGraft::invoke`].
    pinned: bool,
    /// The last entry call's results, kept while a recording runs.
    recorded_results: Vec<i64>,
}

impl<G: GraftPoint> Live<G> {
    /// The running recording, if any.
    fn tape(&mut self) -> Option<&mut Tape> {
        self.store.data_mut().tape.as_deref_mut()
    }

    /// The argument area's bytes and the recording, both borrowed from the store.
    fn area_and_tape(&mut self) -> (&[u8], Option<&mut Tape>) {
        let (data, state) = match self.memory {
            Some(m) => {
                let (data, state) = m.data_and_store_mut(&mut self.store);
                (&*data, state)
            }
            None => (&[][..], self.store.data_mut()),
        };
        let area = self.arg_area.map_or(&[][..], |a| &data[a.at..a.at + G::ARG_BYTES]);
        (area, state.tape.as_deref_mut())
    }

    /// The argument area (empty for a graftpoint without one). Borrowing `self` whole, it cannot
    /// be held across a call into the graft, which needs the store.
    #[inline]
    fn area_mut(&mut self) -> &mut [u8] {
        match self.arg_area {
            // SAFETY: see `ArgArea`: `ptr..ptr + ARG_BYTES` is inside the memory, which stays where
            // it is; nothing else reads or writes it while `self` is borrowed mutably.
            Some(a) => unsafe { std::slice::from_raw_parts_mut(a.ptr.as_ptr(), G::ARG_BYTES) },
            None => &mut [],
        }
    }

    /// Records the start of an entry call: the invocation's first, or (`page`) a next page,
    /// asked for by the results of the call before.
    #[inline]
    fn record_entry(&mut self, page: bool, params: &G::Params) {
        if self.store.data().tape.is_some() {
            self.record_entry_taped(page, params);
        }
    }

    #[cold]
    fn record_entry_taped(&mut self, page: bool, params: &G::Params) {
        let asked = page.then(|| std::mem::take(&mut self.recorded_results));
        if let (area, Some(tape)) = self.area_and_tape() {
            tape.enter(asked, params.values(), area);
        }
    }

    /// Records how an invocation ended (before a failed one is rolled back).
    #[inline]
    fn record_return(&mut self, done: &Result<G::Output, Failure>) {
        if self.store.data().tape.is_some() {
            self.record_return_taped(done);
        }
    }

    #[cold]
    fn record_return_taped(&mut self, done: &Result<G::Output, Failure>) {
        let results = std::mem::take(&mut self.recorded_results);
        if let (area, Some(tape)) = self.area_and_tape() {
            let outcome = done.as_ref().err().map_or(Outcome::Decided, outcome_of);
            tape.ret(results, area, outcome);
        }
    }

    /// The graft's memory and globals now (its memory through the undo log's export, so a
    /// module that exports it under another name, or not at all, is imaged whole).
    fn image(&mut self) -> Image {
        let (globals, memory) = match &self.undo {
            Some(undo) => (undo.globals(&mut self.store), undo.memory().or(self.memory)),
            None => (Vec::new(), self.memory),
        };
        Image::of(memory.map_or(&[][..], |m| m.data(&self.store)), globals)
    }

    /// The module's exported constant `i32` globals (a C module's exported data symbols: their
    /// addresses), by address.
    fn data_symbols(&mut self) -> Vec<(String, u32)> {
        let globals: Vec<(String, wasmtime::Global)> = self
            .instance
            .exports(&mut self.store)
            .filter_map(|e| {
                let name = e.name().to_string();
                e.into_global().map(|g| (name, g))
            })
            .collect();
        let mut symbols = Vec::new();
        for (name, g) in globals {
            if g.ty(&self.store).mutability() == wasmtime::Mutability::Const
                && let Val::I32(v) = g.get(&mut self.store)
            {
                symbols.push((name, v as u32));
            }
        }
        symbols.sort_by_key(|&(_, at)| at);
        symbols
    }

    /// Keeps the writes of the entry call that just returned for a rollback of the whole
    /// invocation, before the next page's entry call empties the log.
    fn keep_log(&mut self) -> Result<(), Failure> {
        match &self.undo {
            Some(undo) => undo.keep(&mut self.store, &mut self.kept).map_err(rollback_failed),
            None => Ok(()),
        }
    }

    /// Undoes what the failed call wrote to the graft's memory and globals.
    fn roll_back(&mut self) {
        let kept = std::mem::take(&mut self.kept);
        if let Some(undo) = &self.undo {
            let undone = undo.roll_back_after(&mut self.store, &kept);
            // The log is the instrumentation's alone (the graft's code cannot address it), so
            // a bad one is the kernel's bug.
            debug_assert!(undone.is_ok(), "rolling back a graft's memory: {undone:?}");
        }
        self.kept = kept;
        self.kept.clear();
    }

    /// The records of the call that just succeeded (its earlier pages' first), to undo it
    /// later if the transaction it was nested in aborts.
    fn records_of_call(&mut self) -> Result<Vec<u8>, Failure> {
        let mut records = self.kept.clone();
        if let Some(undo) = &self.undo {
            undo.keep(&mut self.store, &mut records).map_err(rollback_failed)?;
        }
        Ok(records)
    }

    /// Undoes a committed nested call's writes (`records`, from [`Live::records_of_call`]):
    /// its enclosing transaction aborted. Only that family has called the instance since
    /// (it is pinned), and the family's later calls were undone first (undo records run newest
    /// first), so the memory is as that call left it.
    fn undo_nested_call(&mut self, records: &[u8]) {
        if let Some(undo) = &self.undo {
            let undone = undo
                .begin(&mut self.store)
                .and_then(|_| undo.roll_back_after(&mut self.store, records));
            debug_assert!(undone.is_ok(), "undoing a nested graft call's memory: {undone:?}");
        }
        if self.store.data().tape.is_some() {
            // Replay cannot know the enclosing transaction aborted: it is told the state.
            let image = self.image();
            if let Some(tape) = self.tape() {
                tape.event(Event::Reset(image));
            }
        }
    }
}

/// The failure of a wait for a graft instance's lock.
fn lock_failure(e: VltError) -> Failure {
    match e {
        VltError::DeadlinePassed => Failure::Deadline,
        other => Failure::Conflict(other),
    }
}

fn in_use(failure: Failure) -> GraftError {
    GraftError::InUse(failure.to_string())
}

fn rollback_failed(e: crate::undo_log::RollbackError) -> Failure {
    Failure::Trap(format!("undo log: {e}"))
}

/// Lock-table names of graft instances: a tag in the top bits keeps them apart from the
/// kernel objects sharing the table.
const INSTANCE_TAG: u64 = 1 << 62;
static INSTANCES: AtomicU64 = AtomicU64::new(0);

/// A graft bound to a graftpoint.
pub(crate) struct WasmGraft<G: GraftPoint> {
    live: Arc<Mutex<Live<G>>>,
    /// The instance's name in the VLT lock table: a family that calls it from inside a graft
    /// holds it exclusively until the family ends ([`WasmGraft::invoke`]).
    object: ObjectId,
    /// Its module keeps an undo log of its writes.
    logged: bool,
    runtime: Runtime,
    invocation_units: u64,
    /// What one more page of arguments costs ([`crate::point::PAGE_COST`]).
    page_units: u64,
}

impl<G: GraftPoint> WasmGraft<G> {
    /// Instantiates a compiled module that passed [`crate::check`]'s checks for the graftpoint;
    /// `logged` if it was compiled with an undo log ([`crate::undo_log`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn instantiate(
        runtime: &Runtime,
        module: &wasmtime::Module,
        callables: &Callables<G::Env>,
        env: Arc<G::Env>,
        counters: Arc<Counters>,
        point: &str,
        account: Option<Arc<Account>>,
        logged: bool,
    ) -> Result<Self, LoadError> {
        let config = runtime.config();
        let state = HostState {
            env,
            memory_cap: config.memory_cap,
            ticks_left: 0,
            epochs: runtime.inner.epochs.clone(),
            epoch_seen: 0,
            counters,
            memory: account.map(|a| Growing::new(a, Resource::GraftMemory)),
            tape: None,
        };
        // The module's own engine: with or without deadline checks, as its graftpoint needs.
        let mut store = Store::new(module.engine(), state);
        store.limiter(|s| s as &mut dyn ResourceLimiter);
        match config.interrupt {
            Interrupt::Epoch => store.epoch_deadline_callback(on_tick),
            Interrupt::Fuel => {
                store.epoch_deadline_callback(on_epoch_with_fuel);
                store.set_epoch_deadline(1);
            }
        }
        // A start function runs at instantiation: it gets the control budget.
        arm(&mut store, runtime, runtime.budget_units(config.control_budget));
        let instance = callables
            .linker
            .instantiate(&mut store, module)
            .map_err(|e| match classify(&e) {
                Failure::MemoryCap => LoadError::MemoryCap { cap: config.memory_cap },
                Failure::Quota(limit) => LoadError::Limit(limit),
                Failure::Trap(t) if is_link_error(&e) => LoadError::Link(t),
                other if is_link_error(&e) => LoadError::Link(other.to_string()),
                other => LoadError::Start(other.to_string()),
            })?;
        let export = export_name(G::NAME);
        let entry = instance
            .get_typed_func::<G::Params, G::Results>(&mut store, &export)
            .map_err(|e| LoadError::MissingEntry {
                export: export.clone(),
                point: point.to_string(),
                why: format!("{e:#}"),
            })?;
        let memory = instance.get_memory(&mut store, "memory");
        let arg_area = if G::USES_ARG_AREA {
            Some(find_arg_area(&mut store, &instance, memory, point, G::ARG_BYTES)?)
        } else {
            None
        };
        let undo = match logged {
            true => {
                let undo = UndoLog::new(&mut store, &instance).map_err(|e| LoadError::Start(e.to_string()))?;
                // What the start function wrote is the graft's first state, not to be undone.
                undo.commit(&mut store).map_err(|e| LoadError::Start(e.to_string()))?;
                Some(undo)
            }
            false => None,
        };
        Ok(WasmGraft {
            live: Arc::new(Mutex::new(Live {
                store,
                instance,
                entry,
                memory,
                arg_area,
                undo,
                kept: Vec::new(),
                pinned: false,
                recorded_results: Vec::new(),
            })),
            object: INSTANCE_TAG | INSTANCES.fetch_add(1, Ordering::Relaxed),
            logged,
            runtime: runtime.clone(),
            invocation_units: runtime.budget_units(budget::<G>(config)),
            page_units: runtime.budget_units(crate::point::PAGE_COST),
        })
    }

    /// Locks the instance for a caller outside any transaction's family that pinned it: if a
    /// family pinned it, waits (with the lock table's deadlines, which put a time limit on that
    /// family) until the family ends, or with `wait` false gives [`Failure::Busy`].
    fn lock_unpinned(&self, wait: bool) -> Result<MutexGuard<'_, Live<G>>, Failure> {
        loop {
            let live = match wait {
                true => self.live.lock(),
                false => self.live.try_lock().ok_or(Failure::Busy)?,
            };
            if !live.pinned {
                return Ok(live);
            }
            drop(live);
            if !wait {
                return Err(Failure::Busy);
            }
            // A transaction of our own just for the wait: the lock is given back at once.
            current::atomically(self.runtime.vlt(), || current::lock(self.object, LockMode::Exclusive))
                .map_err(lock_failure)?;
        }
    }

    /// Locks the instance for a call from inside a transaction: the caller's family takes the
    /// instance's VLT lock, held until the family ends, and the instance is pinned to it.
    fn lock_for_family(&self, wait: bool) -> Result<MutexGuard<'_, Live<G>>, Failure> {
        current::lock(self.object, LockMode::Exclusive).map_err(lock_failure)?;
        let mut live = match wait {
            true => self.live.lock(),
            false => self.live.try_lock().ok_or(Failure::Busy)?,
        };
        if !live.pinned {
            // Holding the instance's lock, only this family can have pinned it; it is pinned
            // from now until the family ends, whichever way (these records run before the
            // lock is given back).
            live.pinned = true;
            let unpin = |live: Arc<Mutex<Live<G>>>| move || live.lock().pinned = false;
            current::on_abort(unpin(self.live.clone()));
            current::on_commit(unpin(self.live.clone()));
        }
        Ok(live)
    }

    /// Runs the graft once, inside a transaction (nested in the caller's, if it has one).
    ///
    /// A call from inside another transaction (a graft reached from a graft's kernel call) is
    /// undone if that transaction later aborts, even though the call itself committed: its
    /// memory's undo records go to the enclosing transaction, and the instance stays pinned to
    /// the enclosing family (others wait, or are told it is busy) so that undoing them cannot
    /// clobber a later call's committed writes.
    pub(crate) fn invoke(&self, env: &G::Env, args: &G::Args<'_>, transactional: bool) -> Result<G::Output, Failure> {
        debug_assert!(
            G::DEADLINE_CHECKS || !current::holds_locks(),
            "{} is compiled without deadline checks but called holding a lock",
            G::NAME
        );
        let nested = self.logged && current::active();
        let mut guard = match nested {
            true => self.lock_for_family(G::WAIT_WHEN_BUSY)?,
            false => self.lock_unpinned(G::WAIT_WHEN_BUSY)?,
        };
        let live = &mut *guard;
        let run = |live: &mut Live<G>| -> Result<G::Output, Failure> {
            arm(&mut live.store, &self.runtime, self.invocation_units);
            let params = G::encode(env, args, live.area_mut());
            live.record_entry(false, &params);
            let mut results = live.entry.call(&mut live.store, params).map_err(|e| classify(&e))?;
            if live.store.data().tape.is_some() {
                live.recorded_results = results.values();
            }
            // A deadline seen only now (fuel mode, or passed during the last kernel call).
            vino_vlt::current::check().map_err(|_| Failure::Deadline)?;
            while G::PAGED && live.arg_area.is_some() {
                let Some(params) = G::next_page(env, args, &results, live.area_mut()) else {
                    break;
                };
                live.record_entry(true, &params);
                charge(&mut live.store, &self.runtime, self.page_units)?;
                live.keep_log()?;
                results = live.entry.call(&mut live.store, params).map_err(|e| classify(&e))?;
                if live.store.data().tape.is_some() {
                    live.recorded_results = results.values();
                }
                vino_vlt::current::check().map_err(|_| Failure::Deadline)?;
            }
            G::decode(env, args, results, live.area_mut()).map_err(|e| Failure::Invalid(e.0))
        };
        // Whatever failed (a trap, the budget, a refused kernel call, an answer out of range),
        // the call's writes to the graft's own memory are undone with the kernel's.
        let run = |live: &mut Live<G>| {
            let mut done = run(live);
            if G::MEASURE_WORK {
                LAST_CALL.set(used(&mut live.store, &self.runtime, self.invocation_units));
            }
            if done.is_ok() && nested {
                match live.records_of_call() {
                    Ok(records) if records.is_empty() => {}
                    Ok(records) => {
                        let instance = self.live.clone();
                        current::on_abort(move || instance.lock().undo_nested_call(&records));
                    }
                    Err(failure) => done = Err(failure),
                }
            }
            live.record_return(&done);
            if done.is_err() {
                live.roll_back();
            } else if G::PAGED {
                live.kept.clear();
            }
            done
        };
        if transactional {
            vino_vlt::current::atomically(self.runtime.vlt(), || run(live))
        } else {
            run(live)
        }
    }

    /// Copies `bytes` into the graft's memory at `offset` (all or nothing).
    pub(crate) fn write_memory(&self, offset: u32, bytes: &[u8]) -> Result<(), GraftError> {
        let mut live = self.lock_unpinned(true).map_err(in_use)?;
        let live = &mut *live;
        let mem = live
            .memory
            .ok_or_else(|| GraftError::MemoryBounds("the graft exports no memory".into()))?;
        let data = mem.data_mut(&mut live.store);
        let range = bounded(offset, bytes.len(), data.len())?;
        data[range].copy_from_slice(bytes);
        if let Some(tape) = live.tape() {
            tape.event(Event::Write {
                offset,
                bytes: bytes.to_vec(),
            });
        }
        Ok(())
    }

    pub(crate) fn read_memory(&self, offset: u32, len: usize) -> Result<Vec<u8>, GraftError> {
        let mut live = self.lock_unpinned(true).map_err(in_use)?;
        let live = &mut *live;
        let mem = live
            .memory
            .ok_or_else(|| GraftError::MemoryBounds("the graft exports no memory".into()))?;
        let data = mem.data(&live.store);
        Ok(data[bounded(offset, len, data.len())?].to_vec())
    }

    /// The value of an exported i32 global: the address of a data symbol.
    pub(crate) fn symbol_address(&self, name: &str) -> Result<u32, GraftError> {
        let mut live = self.live.lock();
        let live = &mut *live;
        let global = live
            .instance
            .get_global(&mut live.store, name)
            .ok_or_else(|| GraftError::NoSymbol(name.into()))?;
        match global.get(&mut live.store) {
            Val::I32(v) => Ok(v as u32),
            _ => Err(GraftError::NoSymbol(name.into())),
        }
    }

    /// Starts recording the graft's inputs ([`crate::record`]), of at most `limit` bytes charged
    /// to `account`; the image is taken now, between calls. A recording already running goes on.
    /// With `observe`, the kernel's observations for it ([`Tape::observe`]), if it is new.
    pub(crate) fn record_start(
        &self,
        slot: &str,
        module_sha256: &str,
        limit: usize,
        account: Option<&Arc<Account>>,
        observe: bool,
    ) -> Result<Option<Arc<crate::record::Observations>>, GraftError> {
        if !self.logged {
            return Err(GraftError::NotRecordable(
                "its memory is not logged (the runtime or the graftpoint runs without roll_back_memory)".into(),
            ));
        }
        let mut live = self.lock_unpinned(true).map_err(in_use)?;
        let live = &mut *live;
        if live.store.data().tape.is_some() {
            return Ok(None);
        }
        let config = self.runtime.config();
        let header = Header {
            version: crate::record::VERSION,
            slot: slot.to_string(),
            point: G::NAME.to_string(),
            entry: export_name(G::NAME),
            module_sha256: module_sha256.to_string(),
            arg_area: live.arg_area.map(|a| (a.at as u32, G::ARG_BYTES as u32)),
            invocation_units: self.invocation_units,
            page_units: self.page_units,
            control_units: self.runtime.budget_units(config.control_budget),
            fuel: config.interrupt == Interrupt::Fuel,
            memory_cap: config.memory_cap as u64,
            functions: Vec::new(),
            symbols: live.data_symbols(),
        };
        let image = live.image();
        let (area, _) = live.area_and_tape();
        let area = area.to_vec();
        let mut tape = Tape::new(header, image, area, limit, account);
        let observations = observe.then(|| tape.observe());
        live.store.data_mut().tape = Some(Box::new(tape));
        Ok(observations)
    }

    /// Stops the recording and gives it (`None` if none ran).
    pub(crate) fn record_stop(&self) -> Result<Option<Recording>, GraftError> {
        let mut live = self.lock_unpinned(true).map_err(in_use)?;
        Ok(live.store.data_mut().tape.take().map(|t| t.finish()))
    }

    /// Takes the recording of a graft being unbound, without waiting, still charged to its
    /// owner: `None` if none ran, or if the instance is held (then the recording goes with it).
    pub(crate) fn record_take_now(&self) -> Option<Box<Tape>> {
        let mut live = self.live.try_lock()?;
        if live.pinned {
            return None;
        }
        live.store.data_mut().tape.take()
    }

    /// Calls the control export `vino_ctl_<name>` with integer arguments, in a transaction.
    pub(crate) fn call_control(&self, name: &str, args: &[i64]) -> Result<i64, GraftError> {
        let mut live = self.lock_unpinned(true).map_err(in_use)?;
        let live = &mut *live;
        let export = format!("{CONTROL_PREFIX}{name}");
        let control_error = |why: String| GraftError::Control {
            name: name.to_string(),
            why,
        };
        let func: Func = live
            .instance
            .get_func(&mut live.store, &export)
            .ok_or_else(|| control_error(format!("the graft exports no `{export}`")))?;
        let ty = func.ty(&live.store);
        if ty.params().len() != args.len() {
            return Err(control_error(format!(
                "takes {} arguments, {} given",
                ty.params().len(),
                args.len()
            )));
        }
        let params = ty
            .params()
            .zip(args)
            .map(|(t, &a)| match t {
                ValType::I32 => Ok(Val::I32(a as i32)),
                ValType::I64 => Ok(Val::I64(a)),
                other => Err(control_error(format!(
                    "parameter of type {other} (only i32 and i64 allowed)"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut results = vec![Val::I64(0); ty.results().len()];
        if results.len() > 1 {
            return Err(control_error("returns more than one value".into()));
        }
        let units = self.runtime.budget_units(self.runtime.config().control_budget);
        if let Some(tape) = live.tape() {
            tape.event(Event::Control {
                name: name.to_string(),
                args: args.to_vec(),
            });
        }
        vino_vlt::current::atomically(self.runtime.vlt(), || {
            arm(&mut live.store, &self.runtime, units);
            let done = func
                .call(&mut live.store, &params, &mut results)
                .map_err(|e| classify(&e))
                .and_then(|_| vino_vlt::current::check().map_err(|_| Failure::Deadline));
            if let Some(tape) = live.tape() {
                tape.event(Event::ControlReturn {
                    result: done.as_ref().ok().and_then(|_| results.first().and_then(val_bits)),
                    outcome: done.as_ref().err().map_or(Outcome::Decided, outcome_of),
                });
            }
            if done.is_err() {
                live.roll_back();
            }
            done
        })
        .map_err(|f| GraftError::ControlAborted {
            name: name.to_string(),
            failure: f.to_string(),
            grafts_fault: f.is_grafts_fault(),
        })?;
        Ok(match results.first() {
            Some(Val::I32(v)) => *v as i64,
            Some(Val::I64(v)) => *v,
            _ => 0,
        })
    }
}

/// How a recording keeps a failure: of the graft's own deterministic doing, or imposed.
pub(crate) fn outcome_of(f: &Failure) -> Outcome {
    match f {
        Failure::Deadline | Failure::Conflict(_) | Failure::Busy | Failure::Quota(_) => Outcome::Imposed(f.to_string()),
        _ => Outcome::Failed(f.to_string()),
    }
}

/// An integer value's bits, widened.
pub(crate) fn val_bits(v: &Val) -> Option<i64> {
    match v {
        Val::I32(v) => Some(i64::from(*v)),
        Val::I64(v) => Some(*v),
        _ => None,
    }
}

fn bounded(offset: u32, len: usize, size: usize) -> Result<std::ops::Range<usize>, GraftError> {
    let start = offset as usize;
    match start.checked_add(len) {
        Some(end) if end <= size => Ok(start..end),
        _ => Err(GraftError::MemoryBounds(format!(
            "{len} bytes at {offset:#x} in a memory of {size} bytes"
        ))),
    }
}

thread_local! {
    /// The work of this thread's last graft call, as budget time (see [`take_last_call_time`]).
    static LAST_CALL: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// The work of this thread's last call of a graft whose graftpoint measures it
/// ([`crate::GraftPoint::MEASURE_WORK`]) since the last take, as the time of budget it used: its fuel (the default interrupt), so the same call on the same input gives the same
/// answer on every machine and run; under epoch interruption, the ticks it ran. Zero when no
/// graft ran (nothing bound). For a graftpoint that shares a thread among principals, to
/// charge each its grafts' work.
pub fn take_last_call_time() -> Duration {
    LAST_CALL.replace(Duration::ZERO)
}

/// What an invocation armed with `armed` units used of them, as budget time.
fn used<E>(store: &mut Store<HostState<E>>, runtime: &Runtime, armed: u64) -> Duration {
    let c = runtime.config();
    match c.interrupt {
        Interrupt::Fuel => {
            let left = store.get_fuel().unwrap_or(0);
            let units = armed.saturating_sub(left);
            Duration::from_nanos(units.saturating_mul(1_000_000) / c.fuel_per_ms.max(1))
        }
        Interrupt::Epoch => c.tick * armed.saturating_sub(store.data().ticks_left).min(u32::MAX as u64) as u32,
    }
}

/// Starts an invocation's budget.
fn arm<E>(store: &mut Store<HostState<E>>, runtime: &Runtime, units: u64) {
    match runtime.config().interrupt {
        Interrupt::Epoch => {
            let state = store.data_mut();
            state.ticks_left = units;
            state.epoch_seen = state.epochs.load(std::sync::atomic::Ordering::Relaxed);
            store.set_epoch_deadline(1);
        }
        Interrupt::Fuel => {
            // The epoch deadline was set once at instantiation and its callback re-arms it.
            store.set_fuel(units).expect("fuel is enabled in fuel mode");
        }
    }
}

/// Takes `units` from the running invocation's budget for work the kernel does on its behalf.
/// Under epoch interruption the clock already counts that work; under fuel it is burnt here.
fn charge<E>(store: &mut Store<HostState<E>>, runtime: &Runtime, units: u64) -> Result<(), Failure> {
    if runtime.config().interrupt != Interrupt::Fuel {
        return Ok(());
    }
    let left = store.get_fuel().expect("fuel is enabled in fuel mode");
    if left <= units {
        return Err(Failure::Budget);
    }
    store.set_fuel(left - units).expect("fuel is enabled in fuel mode");
    Ok(())
}

/// Called in fuel mode when a waiter advanced the epoch (some transaction passed its deadline):
/// stops this graft if it is that transaction; the budget itself is the fuel.
fn on_epoch_with_fuel<E>(_: wasmtime::StoreContextMut<'_, HostState<E>>) -> wasmtime::Result<UpdateDeadline> {
    if vino_vlt::current::check().is_err() {
        return Err(wasmtime::Error::new(HostAbort::Deadline));
    }
    Ok(UpdateDeadline::Continue(1))
}

/// Called on every epoch tick while a graft runs: stops it when its budget is spent or its
/// transaction passed its deadline.
fn on_tick<E>(mut ctx: wasmtime::StoreContextMut<'_, HostState<E>>) -> wasmtime::Result<UpdateDeadline> {
    if vino_vlt::current::check().is_err() {
        return Err(wasmtime::Error::new(HostAbort::Deadline));
    }
    let state = ctx.data_mut();
    let now = state.epochs.load(std::sync::atomic::Ordering::Relaxed);
    let passed = now.saturating_sub(state.epoch_seen).max(1);
    state.epoch_seen = now;
    if state.ticks_left <= passed {
        return Err(wasmtime::Error::new(HostAbort::Budget));
    }
    state.ticks_left -= passed;
    Ok(UpdateDeadline::Continue(1))
}

/// Maps an error out of wasmtime to the reason the transaction aborts.
pub(crate) fn classify(e: &wasmtime::Error) -> Failure {
    if let Some(abort) = e.downcast_ref::<HostAbort>() {
        return match abort {
            HostAbort::Call(c) => match c {
                CallError::Transaction(VltError::DeadlinePassed) => Failure::Deadline,
                CallError::Transaction(e) => Failure::Conflict(*e),
                other => Failure::Refused(other.clone()),
            },
            HostAbort::Budget => Failure::Budget,
            HostAbort::Deadline => Failure::Deadline,
            HostAbort::MemoryCap => Failure::MemoryCap,
            HostAbort::Quota(e) => Failure::Quota(e.clone()),
        };
    }
    if let Some(trap) = e.downcast_ref::<Trap>() {
        return match trap {
            Trap::OutOfFuel | Trap::Interrupt => Failure::Budget,
            other => Failure::Trap(other.to_string()),
        };
    }
    Failure::Trap(format!("{e:#}"))
}

fn is_link_error(e: &wasmtime::Error) -> bool {
    e.downcast_ref::<HostAbort>().is_none() && e.downcast_ref::<Trap>().is_none()
}

fn find_arg_area<E>(
    store: &mut Store<HostState<E>>,
    instance: &Instance,
    memory: Option<Memory>,
    point: &str,
    size: usize,
) -> Result<ArgArea, LoadError> {
    let err = |why: &str| LoadError::ArgArea {
        point: point.to_string(),
        why: why.to_string(),
    };
    let memory = memory.ok_or_else(|| err("the graft exports no `memory`"))?;
    let global = instance
        .get_global(&mut *store, "vino_args")
        .ok_or_else(|| err("the graft exports no `vino_args`"))?;
    let Val::I32(addr) = global.get(&mut *store) else {
        return Err(err("`vino_args` is not an i32 global"));
    };
    let at = addr as u32 as usize;
    if !at.is_multiple_of(8) || at + size > memory.data_size(&*store) {
        return Err(err(&format!(
            "`vino_args` does not point at {size} aligned bytes inside the graft's memory"
        )));
    }
    let base = memory.data_ptr(&*store);
    // In bounds (checked above), and the memory's base is not null (it has `size` bytes).
    let ptr = std::ptr::NonNull::new(base.wrapping_add(at)).ok_or_else(|| err("the graft's memory has no address"))?;
    Ok(ArgArea { at, ptr })
}
