//! A graftpoint on one kernel object: the policy bound to it and the one way the kernel calls it.
//!
//! The binding is swapped atomically: a caller sees the old policy or the new one, never a mix,
//! and a graft being replaced or unloaded finishes the calls already inside it.

use crate::callable;
use crate::check;
use crate::clock;
use crate::error::{GraftError, LoadError};
use crate::point::{Access, GraftPoint, NativePolicy};
use crate::record::{Observations, Recording};
use crate::runtime::{Runtime, code_bytes};
use crate::sandbox::{Failure, WasmGraft};
use crate::stats::{Counters, GraftStats};
use arc_swap::ArcSwapOption;
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use vino_account::{Account, Charge, Resource};

/// What happened to a graft that its owner should hear about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraftEvent {
    /// The graft failed too often (too many times in a row, or at least half of its calls in a
    /// window with enough failures; control calls count) and was unloaded; the default is back.
    Unloaded {
        point: String,
        /// The failures that decided it (in the run, or in the window).
        failures: u64,
        /// Why, with the last failure's error.
        last_error: String,
    },
}

/// Whom a loaded graft belongs to, and how to tell it about its graft.
///
/// With an `account`, a load charges it one graft, the compiled code's bytes and (as the graft
/// grows it) its linear memory, and a compile's turn; all is refunded when the graft goes.
#[derive(Clone, Default)]
pub struct Owner {
    pub process: u64,
    pub notify: Option<Arc<dyn Fn(GraftEvent) + Send + Sync>>,
    pub account: Option<Arc<Account>>,
    /// Asked while a compile waits for its turn: false once the owner went away.
    pub wanted: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
}

impl Owner {
    pub fn process(process: u64) -> Self {
        Owner {
            process,
            ..Owner::default()
        }
    }
}

/// What kind of policy a slot runs now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum PolicyKind {
    Default,
    Native,
    Wasm,
}

/// Facts about a loaded graft.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GraftInfo {
    /// SHA-256 of the module, hex.
    pub hash: String,
    pub size: usize,
    pub owner: u64,
    /// True if the compiled module came from the cache.
    pub cached: bool,
    pub compile_ns: u64,
    /// Whole load: compile (or cache hit), checks, instantiation, binding.
    pub load_ns: u64,
    #[serde(skip)]
    pub loaded_at: Option<SystemTime>,
}

/// A slot's state, for `graft list` and `graft stats`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SlotInfo {
    pub point: String,
    pub access: Access,
    pub policy: PolicyKind,
    pub graft: Option<GraftInfo>,
    pub stats: Option<GraftStats>,
}

// One per binding, behind the binding's Arc: boxing the Wasm variant would only add a pointer
// chase to every invocation.
#[allow(clippy::large_enum_variant)]
enum Policy<G: GraftPoint> {
    Native {
        policy: Arc<dyn NativePolicy<G>>,
        transactional: bool,
    },
    Wasm {
        graft: WasmGraft<G>,
        info: GraftInfo,
        owner: Owner,
        /// It imports a kernel function (or the runtime transacts every graft): its calls run
        /// in a transaction. Otherwise it cannot change kernel state and runs without one.
        transactional: bool,
    },
}

struct Binding<G: GraftPoint> {
    policy: Policy<G>,
    /// Tells this binding from every other of any slot ([`GraftSlot::binding_serial`]).
    serial: u64,
    counters: Arc<Counters>,
    /// What the graft is charged to its owner (one graft, its compiled code), refunded with the
    /// binding.
    _charges: Vec<Charge>,
}

/// The serial of a new binding: never 0, never repeated.
fn next_serial() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A graftpoint on one kernel object.
pub struct GraftSlot<G: GraftPoint> {
    name: String,
    access: Access,
    env: Arc<G::Env>,
    runtime: Runtime,
    binding: ArcSwapOption<Binding<G>>,
    /// The recording of a graft that was unbound while it ran, kept for its owner to take
    /// ([`GraftSlot::record_stop`]).
    /// It stays charged to the graft's owner until it is taken or the slot goes.
    finished: parking_lot::Mutex<Option<(Box<crate::record::Tape>, String)>>,
    /// A recording of the default's decisions while nothing is bound
    /// ([`GraftSlot::record_default_start`]), and whether one runs (read on the default's path).
    default_tape: parking_lot::Mutex<Option<DefaultTape>>,
    recording_default: std::sync::atomic::AtomicBool,
    /// Told of each recording that starts here, for the kernel to make its observations
    /// ([`GraftSlot::observe_with`]).
    observer: std::sync::OnceLock<Observer>,
}

/// What the kernel does when a recording starts at a graftpoint whose ghost needs more than the
/// graft's calls: it is given the recording's [`Observations`] to feed while it runs.
pub type Observer = Box<dyn Fn(Arc<Observations>) + Send + Sync>;

/// A recording of a graftpoint's default: the tape, the argument area the default's answers
/// are written into, and the process that started it (charged for it).
struct DefaultTape {
    tape: Box<crate::record::Tape>,
    area: Vec<u8>,
    process: u64,
}

impl<G: GraftPoint> GraftSlot<G> {
    /// A slot named `G::NAME` (or `G::NAME/<suffix>` for one of several objects, such as
    /// `file.compute_ra/3`), running the default policy.
    pub fn new(runtime: &Runtime, env: Arc<G::Env>, access: Access, suffix: Option<&str>) -> Self {
        let name = match suffix {
            Some(s) => format!("{}/{s}", G::NAME),
            None => G::NAME.to_string(),
        };
        GraftSlot {
            name,
            access,
            env,
            runtime: runtime.clone(),
            binding: ArcSwapOption::empty(),
            finished: parking_lot::Mutex::new(None),
            default_tape: parking_lot::Mutex::new(None),
            recording_default: std::sync::atomic::AtomicBool::new(false),
            observer: std::sync::OnceLock::new(),
        }
    }

    /// Has `observer` told of every recording that starts here from now on (set once; later
    /// calls are ignored): the kernel then feeds the recording what it sees (for
    /// `vas.pick_victim`, the process's page accesses), so that replay can run a ghost on it.
    pub fn observe_with(&self, observer: Observer) {
        let _ = self.observer.set(observer);
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn access(&self) -> Access {
        self.access
    }

    pub fn env(&self) -> &Arc<G::Env> {
        &self.env
    }

    /// The CPU budget of one invocation: the graftpoint's own, capped by the runtime's.
    pub fn budget(&self) -> std::time::Duration {
        crate::sandbox::budget::<G>(self.runtime.config())
    }

    /// Asks the bound policy for a decision. Never fails: if the graft fails, its transaction is
    /// aborted, the failure counted, and the default decides.
    #[inline]
    pub fn invoke(&self, args: &G::Args<'_>) -> G::Output {
        self.try_invoke(args)
            .unwrap_or_else(|_| G::default_policy(&self.env, args))
    }

    /// Like [`GraftSlot::invoke`], but a failed call (aborted, counted as `invoke` counts it)
    /// gives its failure instead of the default's decision: for graftpoints where the caller
    /// must say what went wrong. With nothing bound, the default decides.
    #[inline]
    pub fn try_invoke(&self, args: &G::Args<'_>) -> Result<G::Output, Failure> {
        let guard = self.binding.load();
        self.decide(guard.as_ref(), args)
    }

    /// Decides with what is bound unless it is a Wasm graft (`None` then): a native policy, or
    /// the default (recorded while a recording of it runs). For callers that must not run a
    /// graft where they call, under a lock other users need; the binding is read once, so a
    /// graft bound meanwhile is not run there either.
    pub fn invoke_inline(&self, args: &G::Args<'_>) -> Option<G::Output> {
        let guard = self.binding.load();
        if let Some(Policy::Wasm { .. }) = guard.as_ref().map(|b| &b.policy) {
            return None;
        }
        Some(
            self.decide(guard.as_ref(), args)
                .unwrap_or_else(|_| G::default_policy(&self.env, args)),
        )
    }

    /// `binding`'s decision (the default's with none), counted.
    #[inline]
    fn decide(&self, binding: Option<&Arc<Binding<G>>>, args: &G::Args<'_>) -> Result<G::Output, Failure> {
        let Some(binding) = binding else {
            if self.recording_default.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(self.default_recorded(args));
            }
            return Ok(G::default_policy(&self.env, args));
        };
        let timed = binding.counters.should_time();
        let started = if timed { clock::ticks() } else { 0 };
        let result = match &binding.policy {
            Policy::Native {
                policy,
                transactional: false,
            } => policy.decide(&self.env, args).map_err(|e| Failure::Invalid(e.0)),
            Policy::Native {
                policy,
                transactional: true,
            } => vino_vlt::current::atomically(self.runtime.vlt(), || {
                policy.decide(&self.env, args).map_err(|e| Failure::Invalid(e.0))
            }),
            Policy::Wasm {
                graft, transactional, ..
            } if G::CALLABLE.is_empty() => graft.invoke(&self.env, args, *transactional),
            Policy::Wasm {
                graft, transactional, ..
            } => {
                let before = callable::changes_made();
                let result = graft.invoke(&self.env, args, *transactional);
                binding.counters.changed(callable::changes_made() - before);
                result
            }
        };
        let spent = timed.then(|| clock::ticks().wrapping_sub(started));
        match &result {
            Ok(_) => binding.counters.succeeded(spent),
            Err(Failure::Busy) => binding.counters.busy(),
            Err(failure) => self.count_failure(binding, spent, failure.to_string(), failure.is_grafts_fault()),
        }
        result
    }

    /// Like [`GraftSlot::invoke`], but a Wasm graft runs in a transaction whether or not it
    /// needs one: for measuring what the transaction costs.
    pub fn invoke_transacted(&self, args: &G::Args<'_>) -> G::Output {
        self.invoke_measuring(args, true)
    }

    /// Like [`GraftSlot::invoke`], but a Wasm graft runs without its transaction: for measuring
    /// what the transaction costs, never for kernel paths.
    pub fn invoke_untransacted(&self, args: &G::Args<'_>) -> G::Output {
        self.invoke_measuring(args, false)
    }

    /// A Wasm graft's call with or without a transaction, uncounted; anything else as usual.
    fn invoke_measuring(&self, args: &G::Args<'_>, transactional: bool) -> G::Output {
        let guard = self.binding.load();
        match guard.as_ref().map(|b| &b.policy) {
            Some(Policy::Wasm { graft, .. }) => graft
                .invoke(&self.env, args, transactional)
                .unwrap_or_else(|_| G::default_policy(&self.env, args)),
            _ => self.invoke(args),
        }
    }

    /// Compiles (or finds in the cache), checks and binds a graft, replacing what was bound.
    /// On error nothing changes.
    pub fn load(&self, wasm: &[u8], owner: Owner) -> Result<GraftInfo, LoadError> {
        let binding = self.build(wasm, owner, self.env.clone())?;
        self.end_default_recording("a graft was bound");
        let info = match &binding.policy {
            Policy::Wasm { info, .. } => info.clone(),
            Policy::Native { .. } => unreachable!("just built a Wasm binding"),
        };
        let old = self.binding.swap(Some(Arc::new(binding)));
        self.retire(old, "replaced by another graft");
        Ok(info)
    }

    /// Compiles (or finds in the cache), checks and instantiates a graft with `env`, charged
    /// to its owner: a binding ready to be bound here, or run in shadow.
    fn build(&self, wasm: &[u8], mut owner: Owner, env: Arc<G::Env>) -> Result<Binding<G>, LoadError> {
        let started = Instant::now();
        let mut charges = Vec::new();
        if let Some(a) = &owner.account {
            charges.push(a.charge(Resource::Grafts, 1)?);
        }
        // The liveness check is for the compile's wait only: a binding kept after its owner
        // went away (a directory's `dir.access` graft) must not keep what it watches (the
        // owner's connection) open.
        let wanted = owner.wanted.take();
        let build = crate::Build::of::<G>(self.runtime.config());
        let compiled = self.runtime.compile_as(
            wasm,
            owner.account.as_ref(),
            &|| wanted.as_ref().is_none_or(|w| w()),
            build,
        )?;
        if let Some(a) = &owner.account {
            charges.push(a.charge(Resource::GraftCode, code_bytes(&compiled.module) as u64)?);
        }
        // Taken from the runtime at a load, not when the slot is made: a slot is made at every
        // open of a file, and the runtime keeps them under one lock.
        let callables = self.runtime.callables::<G>();
        let summary = check::check::<G>(&compiled, wasm.len(), &callables, &self.name, self.runtime.config())?;
        let counters = Arc::new(Counters::default());
        let graft = WasmGraft::instantiate(
            &self.runtime,
            &compiled.module,
            &callables,
            env,
            counters.clone(),
            &self.name,
            owner.account.clone(),
            build.logged,
        )?;
        let info = GraftInfo {
            hash: summary.hash,
            size: summary.size,
            owner: owner.process,
            cached: compiled.cached,
            compile_ns: compiled.compile_time.as_nanos() as u64,
            load_ns: started.elapsed().as_nanos() as u64,
            loaded_at: Some(SystemTime::now()),
        };
        let transactional = self.runtime.config().always_transact
            || summary
                .imports
                .iter()
                .any(|i| G::CALLABLE.contains(&i.trim_start_matches("vino.")));
        Ok(Binding {
            serial: next_serial(),
            policy: Policy::Wasm {
                graft,
                info,
                owner,
                transactional,
            },
            counters,
            _charges: charges,
        })
    }

    /// A candidate graft for this graftpoint run in shadow ([`Shadow`]): loaded and charged as
    /// a load here would be (the caller checks the principal may bind here), but bound to
    /// `env`, the shadow's own copy of what the graftpoint's policy sees, so that whatever its
    /// graft-callable functions ask for reaches that copy and never the kernel.
    pub fn shadow(&self, wasm: &[u8], owner: Owner, env: Arc<G::Env>) -> Result<Shadow<G>, LoadError> {
        let binding = self.build(wasm, owner, env.clone())?;
        Ok(Shadow {
            binding,
            env,
            config: *self.runtime.config(),
            dropped: None,
            in_a_row: 0,
        })
    }

    /// Reads a graft file and loads it.
    pub fn load_file(&self, path: &std::path::Path, owner: Owner) -> Result<GraftInfo, LoadError> {
        let wasm = std::fs::read(path).map_err(|e| LoadError::Read {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        self.load(&wasm, owner)
    }

    /// Binds a trusted native policy (the "unprotected" variant). With `transactional` it still
    /// runs inside a transaction, so kernel functions it calls can lock and log.
    pub fn bind_native(&self, policy: Arc<dyn NativePolicy<G>>, transactional: bool) {
        let binding = Binding {
            serial: next_serial(),
            policy: Policy::Native { policy, transactional },
            counters: Arc::default(),
            _charges: Vec::new(),
        };
        let old = self.binding.swap(Some(Arc::new(binding)));
        self.retire(old, "replaced by a native policy");
    }

    /// Puts the default back. True if something was bound.
    pub fn unload(&self) -> bool {
        let old = self.binding.swap(None);
        let was = old.is_some();
        self.retire(old, "unloaded");
        was
    }

    /// Keeps the recording of a binding that was just unbound, if one ran.
    fn retire(&self, old: Option<Arc<Binding<G>>>, why: &str) {
        if let Some(Policy::Wasm { graft, .. }) = old.as_deref().map(|b| &b.policy)
            && let Some(tape) = graft.record_take_now()
        {
            tape.stop_observing();
            *self.finished.lock() = Some((tape, why.to_string()));
        }
    }

    /// Starts recording the bound graft's inputs ([`crate::record`]): at most `limit` bytes,
    /// charged to the graft's owner as graft memory; the recording stops (and says so) when
    /// either runs out. Replaces a finished recording not taken yet.
    pub fn record_start(&self, limit: usize) -> Result<(), GraftError> {
        let guard = self.binding.load();
        match guard.as_ref().map(|b| &b.policy) {
            Some(Policy::Wasm { graft, info, owner, .. }) => {
                self.finished.lock().take();
                let observer = self.observer.get();
                let observations = graft.record_start(
                    &self.name,
                    &info.hash,
                    limit,
                    owner.account.as_ref(),
                    observer.is_some(),
                )?;
                if let (Some(f), Some(o)) = (observer, observations) {
                    f(o);
                }
                Ok(())
            }
            Some(Policy::Native { .. }) => Err(GraftError::NotWasm(self.name.clone())),
            None => Err(GraftError::NotLoaded(self.name.clone())),
        }
    }

    /// Starts recording the default's decisions while nothing is bound: each invocation's
    /// arguments as a graft would see them and the default's answer as a graft would give it
    /// ([`GraftPoint::answer`]), at most `limit` bytes charged to `owner` (who started it) as
    /// graft memory. A replay of a candidate on it says what the candidate would have decided
    /// where the default did. It ends when a graft is bound (kept for the next stop) or its
    /// starter goes ([`GraftSlot::record_default_drop`]).
    pub fn record_default_start(&self, limit: usize, owner: &Owner) -> Result<(), GraftError> {
        if self.binding.load().is_some() {
            return Err(GraftError::NotRecordable(format!(
                "a graft is bound at `{}`: record it, not the default",
                self.name
            )));
        }
        if !G::RECORDS_DEFAULT {
            return Err(GraftError::NotRecordable(format!(
                "the default of {} cannot be put as a graft's answers",
                G::NAME
            )));
        }
        let area = vec![0u8; if G::USES_ARG_AREA { G::ARG_BYTES } else { 0 }];
        let config = self.runtime.config();
        // Replay runs under fuel whatever the kernel's interrupt: budgets in fuel units.
        let fuel = |d: std::time::Duration| (d.as_nanos() * u128::from(config.fuel_per_ms) / 1_000_000).max(1) as u64;
        let header = crate::record::Header {
            version: crate::record::VERSION,
            slot: self.name.clone(),
            point: G::NAME.to_string(),
            entry: crate::point::export_name(G::NAME),
            // No module: every module replayed on it is another.
            module_sha256: String::new(),
            arg_area: G::USES_ARG_AREA.then_some((0, G::ARG_BYTES as u32)),
            invocation_units: fuel(self.budget()),
            page_units: fuel(crate::point::PAGE_COST),
            control_units: fuel(config.control_budget),
            fuel: true,
            memory_cap: config.memory_cap as u64,
            functions: Vec::new(),
            symbols: Vec::new(),
        };
        let image = crate::record::Image::default();
        let mut tape = crate::record::Tape::new(header, image, area.clone(), limit, owner.account.as_ref());
        if let Some(f) = self.observer.get() {
            f(tape.observe());
        }
        self.finished.lock().take();
        *self.default_tape.lock() = Some(DefaultTape {
            tape: Box::new(tape),
            area,
            process: owner.process,
        });
        self.recording_default.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// The default's decision, recorded.
    #[cold]
    fn default_recorded(&self, args: &G::Args<'_>) -> G::Output {
        let output = G::default_policy(&self.env, args);
        let mut guard = self.default_tape.lock();
        if let Some(d) = guard.as_mut() {
            use crate::point::WasmTypes;
            let params = G::encode(&self.env, args, &mut d.area);
            d.tape.enter(None, params.values(), &d.area);
            let (results, outcome) = match G::answer(&self.env, args, &output, &mut d.area) {
                Some(results) => (results.values(), crate::record::Outcome::Decided),
                // Replay aborts it, whatever the candidate answers.
                None => (
                    Vec::new(),
                    crate::record::Outcome::Imposed("the default's answer has no graft form".into()),
                ),
            };
            d.tape.ret(results, &d.area, outcome);
            // Full: the kernel's paths go back to deciding inline; the stop still takes it.
            if d.tape.full() {
                self.recording_default
                    .store(false, std::sync::atomic::Ordering::Relaxed);
            }
        }
        output
    }

    /// Ends a recording of the default, keeping it for the next stop with why it ended.
    fn end_default_recording(&self, why: &str) {
        self.recording_default
            .store(false, std::sync::atomic::Ordering::Relaxed);
        if let Some(d) = self.default_tape.lock().take() {
            d.tape.stop_observing();
            *self.finished.lock() = Some((d.tape, why.to_string()));
        }
    }

    /// Drops a recording of the default that `process` started (it exited), with its charge.
    pub fn record_default_drop(&self, process: u64) {
        let mut guard = self.default_tape.lock();
        if guard.as_ref().is_some_and(|d| d.process == process) {
            self.recording_default
                .store(false, std::sync::atomic::Ordering::Relaxed);
            guard.take();
        }
    }

    /// Stops the recording and gives it: the bound graft's, or that of a graft unbound while it
    /// was recorded (whose [`Recording::ended`] says why), or the default's.
    pub fn record_stop(&self) -> Result<Recording, GraftError> {
        if let Some(d) = self.default_tape.lock().take() {
            self.recording_default
                .store(false, std::sync::atomic::Ordering::Relaxed);
            return Ok(d.tape.finish());
        }
        if let Some((tape, why)) = self.finished.lock().take() {
            let mut done = tape.finish();
            done.ended = Some(why);
            return Ok(done);
        }
        let guard = self.binding.load();
        let running = match guard.as_ref().map(|b| &b.policy) {
            Some(Policy::Wasm { graft, .. }) => graft.record_stop()?,
            _ => None,
        };
        running.ok_or_else(|| GraftError::NotRecordable(format!("no recording runs at `{}`", self.name)))
    }

    /// Whether the bound graft's calls run in a transaction (`None`: no Wasm graft bound).
    pub fn runs_in_transaction(&self) -> Option<bool> {
        match self.binding.load().as_ref().map(|b| &b.policy) {
            Some(Policy::Wasm { transactional, .. }) => Some(*transactional),
            _ => None,
        }
    }

    /// A number that changes whenever what is bound changes: 0 with nothing bound, else one no
    /// other binding had. Callers that keep per-object state for a policy (a connection's
    /// congestion state) start it afresh when the number changes.
    pub fn binding_serial(&self) -> u64 {
        self.binding.load().as_ref().map_or(0, |b| b.serial)
    }

    /// Whether the kernel must ask this slot rather than decide by its default inline:
    /// something is bound, or the default's decisions are recorded
    /// ([`GraftSlot::record_default_start`]).
    #[inline]
    pub fn consulted(&self) -> bool {
        self.binding.load().is_some() || self.recording_default.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn policy_kind(&self) -> PolicyKind {
        match self.binding.load().as_ref().map(|b| &b.policy) {
            None => PolicyKind::Default,
            Some(Policy::Native { .. }) => PolicyKind::Native,
            Some(Policy::Wasm { .. }) => PolicyKind::Wasm,
        }
    }

    pub fn stats(&self) -> Option<GraftStats> {
        self.binding.load().as_ref().map(|b| b.counters.snapshot())
    }

    pub fn info(&self) -> SlotInfo {
        let guard = self.binding.load();
        let graft = match guard.as_ref().map(|b| &b.policy) {
            Some(Policy::Wasm { info, .. }) => Some(info.clone()),
            _ => None,
        };
        SlotInfo {
            point: self.name.clone(),
            access: self.access,
            policy: self.policy_kind(),
            graft,
            stats: guard.as_ref().map(|b| b.counters.snapshot()),
        }
    }

    /// Runs `f` on the bound Wasm graft.
    fn with_graft<R>(&self, f: impl FnOnce(&WasmGraft<G>) -> Result<R, GraftError>) -> Result<R, GraftError> {
        let guard = self.binding.load();
        match guard.as_ref().map(|b| &b.policy) {
            Some(Policy::Wasm { graft, .. }) => f(graft),
            Some(Policy::Native { .. }) => Err(GraftError::NotWasm(self.name.clone())),
            None => Err(GraftError::NotLoaded(self.name.clone())),
        }
    }

    pub fn write_memory(&self, offset: u32, bytes: &[u8]) -> Result<(), GraftError> {
        self.with_graft(|g| g.write_memory(offset, bytes))
    }

    pub fn read_memory(&self, offset: u32, len: usize) -> Result<Vec<u8>, GraftError> {
        self.with_graft(|g| g.read_memory(offset, len))
    }

    pub fn symbol_address(&self, name: &str) -> Result<u32, GraftError> {
        self.with_graft(|g| g.symbol_address(name))
    }

    /// Calls a control function of the bound graft. An abort of the graft's own doing counts
    /// as a failed call, towards unloading it, as a failed invocation does.
    pub fn call_control(&self, name: &str, args: &[i64]) -> Result<i64, GraftError> {
        let guard = self.binding.load();
        let Some(binding) = guard.as_ref() else {
            return Err(GraftError::NotLoaded(self.name.clone()));
        };
        let Policy::Wasm { graft, owner, .. } = &binding.policy else {
            return Err(GraftError::NotWasm(self.name.clone()));
        };
        let started = clock::ticks();
        let result = graft.call_control(name, args);
        if let Some(a) = &owner.account {
            a.add_cpu(std::time::Duration::from_nanos(clock::ticks_to_ns(
                clock::ticks().wrapping_sub(started),
            )));
        }
        if let Err(GraftError::ControlAborted {
            failure,
            grafts_fault: true,
            ..
        }) = &result
        {
            let spent = clock::ticks().wrapping_sub(started);
            self.count_failure(
                binding,
                Some(spent),
                format!("control function `{name}`: {failure}"),
                true,
            );
        }
        result
    }

    /// Counts a failed call and unloads the graft if it fails too often: too many times in a
    /// row, or at least half of its calls in a window with enough failures in it.
    fn count_failure(&self, binding: &Arc<Binding<G>>, spent: Option<u64>, why: String, grafts_fault: bool) {
        let config = self.runtime.config();
        let v = binding
            .counters
            .failed(spent, why.clone(), grafts_fault, config.failure_window);
        let in_a_row = v.in_a_row >= u64::from(config.max_consecutive_failures);
        let too_often = v.in_window >= u64::from(config.failure_rate_min) && 2 * v.in_window >= v.calls_in_window;
        if in_a_row {
            self.unload_failing(
                binding,
                v.in_a_row,
                format!("{} failures in a row; the last: {why}", v.in_a_row),
            );
        } else if too_often {
            let reason = format!(
                "{} of its last {} calls failed (in {:?}); the last: {why}",
                v.in_window, v.calls_in_window, config.failure_window
            );
            self.unload_failing(binding, v.in_window, reason);
        }
    }

    /// Unloads a graft that keeps failing, unless it was replaced meanwhile, and tells its owner.
    fn unload_failing(&self, failing: &Arc<Binding<G>>, failures: u64, last_error: String) {
        let previous = self.binding.compare_and_swap(failing, None);
        let swapped = previous.as_ref().is_some_and(|p| Arc::ptr_eq(p, failing));
        if !swapped {
            return;
        }
        self.retire(Some(failing.clone()), &format!("unloaded for failing: {last_error}"));
        if let Policy::Wasm { owner, .. } = &failing.policy
            && let Some(notify) = &owner.notify
        {
            notify(GraftEvent::Unloaded {
                point: self.name.clone(),
                failures,
                last_error,
            });
        }
    }
}

/// A candidate graft run beside a graftpoint's live policy, on inputs a ghost model makes
/// (`vino graft try`): it decides what it would have decided, and nothing it does reaches the
/// kernel (its graft-callable functions act on its own environment). Its memory keeps what its
/// calls commit, as a bound graft's does. A candidate that fails as often as a bound graft may
/// is dropped ([`Shadow::dropped`]), and the ghost goes on without it.
pub struct Shadow<G: GraftPoint> {
    binding: Binding<G>,
    env: Arc<G::Env>,
    config: crate::RuntimeConfig,
    dropped: Option<String>,
    in_a_row: u32,
}

impl<G: GraftPoint> Shadow<G> {
    /// The candidate's decision on `args`, or why it failed (the caller then takes the default's,
    /// as the kernel would have). Time and failures are counted as a bound graft's are.
    pub fn decide(&mut self, args: &G::Args<'_>) -> Result<G::Output, Failure> {
        if let Some(why) = &self.dropped {
            return Err(Failure::Trap(why.clone()));
        }
        let Policy::Wasm {
            graft, transactional, ..
        } = &self.binding.policy
        else {
            unreachable!("a shadow is a Wasm binding")
        };
        let started = clock::ticks();
        let result = graft.invoke(&self.env, args, *transactional);
        let spent = clock::ticks().wrapping_sub(started);
        let counters = &self.binding.counters;
        match &result {
            Ok(_) => {
                counters.succeeded(Some(spent));
                self.in_a_row = 0;
            }
            Err(f) => {
                counters.failed(
                    Some(spent),
                    f.to_string(),
                    f.is_grafts_fault(),
                    self.config.failure_window,
                );
                self.in_a_row += u32::from(f.is_grafts_fault());
                if self.in_a_row >= self.config.max_consecutive_failures {
                    self.dropped = Some(format!("{} failures in a row; the last: {f}", self.in_a_row));
                }
            }
        }
        if let Policy::Wasm { owner, .. } = &self.binding.policy
            && let Some(a) = &owner.account
        {
            a.add_cpu(std::time::Duration::from_nanos(clock::ticks_to_ns(spent)));
        }
        result
    }

    /// Writes into the candidate's memory, as the owner's `graft_write_memory` does a bound
    /// graft's.
    pub fn write_memory(&self, offset: u32, bytes: &[u8]) -> Result<(), GraftError> {
        self.graft().write_memory(offset, bytes)
    }

    /// Calls a control function of the candidate.
    pub fn call_control(&self, name: &str, args: &[i64]) -> Result<i64, GraftError> {
        self.graft().call_control(name, args)
    }

    /// The address of a data symbol the candidate exports.
    pub fn symbol_address(&self, name: &str) -> Result<u32, GraftError> {
        self.graft().symbol_address(name)
    }

    /// Counts an owner's call that failed where nobody waited for its answer (a write queued
    /// behind the live path's events).
    pub fn owner_failed(&self, e: &GraftError) {
        self.binding
            .counters
            .failed(None, format!("owner's call: {e}"), false, self.config.failure_window);
    }

    fn graft(&self) -> &WasmGraft<G> {
        match &self.binding.policy {
            Policy::Wasm { graft, .. } => graft,
            Policy::Native { .. } => unreachable!("a shadow is a Wasm binding"),
        }
    }

    /// The shadow's own environment (what its graft-callable functions asked for is there).
    pub fn env(&self) -> &Arc<G::Env> {
        &self.env
    }

    /// Why the candidate was dropped, if it was.
    pub fn dropped(&self) -> Option<&str> {
        self.dropped.as_deref()
    }

    /// The candidate's counters: decisions, failures, time in it.
    pub fn stats(&self) -> GraftStats {
        self.binding.counters.snapshot()
    }

    pub fn info(&self) -> GraftInfo {
        match &self.binding.policy {
            Policy::Wasm { info, .. } => info.clone(),
            Policy::Native { .. } => unreachable!("a shadow is a Wasm binding"),
        }
    }
}
