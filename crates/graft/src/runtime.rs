//! The graft runtime: one wasmtime engine configured as the sandbox, the clock that interrupts
//! grafts, a cache of compiled modules, and the transaction manager every invocation uses.

use crate::callable::Callables;
use crate::error::LoadError;
use crate::point::GraftPoint;
use parking_lot::{Condvar, Mutex};
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};
use std::any::{Any, TypeId};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use vino_account::{Account, Charge, Resource};
use vino_vlt::{Vlt, VltConfig};
use wasmtime::{Config, Engine, Module, OptLevel};

/// How a running graft is stopped when its budget is spent.
///
/// The budget is measured in the graft's own work (fuel, the default), not in wall time: a graft
/// descheduled under CPU contention is not charged for the time others ran, and the same graft
/// with the same input stops at the same instruction every time (which a deterministic
/// simulation of the kernel needs). Fuel also needs no clock read per call and no ticker thread
/// waking a thousand times a second. Its one cost: a transaction's lock-holding deadline is seen
/// only when the graft calls into the kernel or returns, so a graft holding a lock may run to the
/// end of its budget before it is stopped; budgets on paths others wait for are small for that
/// reason (about 100 µs of work).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Interrupt {
    /// A ticker thread advances the engine's epoch every [`RuntimeConfig::tick`]; compiled code
    /// checks the epoch at loop heads and function entries. Budgets are then wall time, and the
    /// runtime also stops a graft whose transaction passed its deadline mid-loop. Kept so the two
    /// can be measured side by side.
    Epoch,
    /// Compiled code counts fuel (about one unit per instruction) per basic block and traps when
    /// the invocation's fuel is spent. The default.
    Fuel,
}

/// What a module may be before the kernel spends any time compiling it. Compiling costs time and
/// memory roughly in proportion to the number of functions and the size and nesting of their
/// bodies; these bound all three, so no compile runs long (wasmtime cannot cancel one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleLimits {
    pub max_bytes: usize,
    pub max_functions: u32,
    pub max_body_bytes: usize,
    /// Deepest nesting of blocks, loops and ifs in one body.
    pub max_nesting: u32,
    pub max_locals: u32,
    /// Whether the bulk instructions (`memory.copy`, `memory.fill`, `memory.init`, and the
    /// table ones) are allowed. Fuel counts each as one unit however many bytes it moves: a
    /// graft looping over `memory.fill` of its 16 MiB would run minutes on a 10 ms budget, so
    /// grafts may not use them. Programs may (the scheduler stops them by time, not fuel).
    pub bulk_operators: bool,
}

impl Default for ModuleLimits {
    fn default() -> Self {
        // The example grafts are a few KiB with tens of functions: these leave a hundredfold room.
        ModuleLimits {
            max_bytes: 1 << 20,
            max_functions: 4096,
            max_body_bytes: 128 << 10,
            max_nesting: 256,
            max_locals: 50_000,
            bulk_operators: false,
        }
    }
}

impl ModuleLimits {
    /// The limits of a program that runs as a VINO process, of at most `max_bytes`: a real
    /// program has thousands of functions (sqlite3: about 2,500), so a graft's made larger.
    pub fn program(max_bytes: usize) -> ModuleLimits {
        ModuleLimits {
            max_bytes,
            max_functions: 65_536,
            max_body_bytes: 1 << 20,
            max_nesting: 1024,
            max_locals: 100_000,
            bulk_operators: true,
        }
    }
}

/// Limits and settings of the graft runtime.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeConfig {
    pub interrupt: Interrupt,
    /// Epoch tick (the granularity of CPU budgets).
    pub tick: Duration,
    /// Fuel units per millisecond of budget, in fuel mode: the rate at which budgets written as
    /// times are turned into work. Set by the slowest fuel a core burns, a one-instruction loop
    /// (about 0.45M units/ms; arithmetic and memory code burns about 4M/ms, so it gets a tenth
    /// of the budget's time): a budget is then a bound on time, whatever shape the code has.
    /// `cargo run --release -p vino-graft --example fuel_rate` measures the shapes.
    pub fuel_per_ms: u64,
    /// Cap on a graft's linear memory.
    pub memory_cap: usize,
    /// Cap on the native stack a graft may use.
    pub max_wasm_stack: usize,
    /// Cap on the CPU budget of one invocation on a kernel path (eviction, read-ahead, ...): an
    /// invocation gets the smaller of this and its graftpoint's [`GraftPoint::BUDGET`].
    ///
    /// [`GraftPoint::BUDGET`]: crate::GraftPoint::BUDGET
    pub invocation_budget: Duration,
    /// CPU budget of one control-function call by the owning process.
    pub control_budget: Duration,
    /// Failures in a row after which a graft is unloaded and its owner told.
    pub max_consecutive_failures: u32,
    /// A graft is also unloaded when, within one [`RuntimeConfig::failure_window`], at least
    /// this many of its calls (control calls included) failed and they were at least half of
    /// its calls: a graft that fails every other call never fails twice in a row.
    pub failure_rate_min: u32,
    pub failure_window: Duration,
    /// Compiled modules kept for reloading.
    pub module_cache_entries: usize,
    /// Bytes of compiled code the module cache may keep.
    pub module_cache_bytes: usize,
    /// Checks of a module before it is compiled.
    pub module_limits: ModuleLimits,
    /// Compiles that may run at once, all users together; others wait their turn.
    pub compile_threads: usize,
    /// Compiles that may wait for a turn; more are refused (EAGAIN).
    pub compile_queue: usize,
    pub vlt: VltConfig,
    /// Run every graft in a transaction, even one that imports no kernel function. Such a graft
    /// cannot change kernel state (its answer is checked before the kernel acts on it), so by
    /// default it runs without one, as the original VINO did; the thesis' measurements turned
    /// that off (Small 1998, 7.3.3, note 4), and so do the experiments that compare with them.
    pub always_transact: bool,
    /// Give a graft's memory and globals back what they held before a call that failed: each
    /// module is rewritten at load to keep an undo log of its writes
    /// ([`crate::undo_log`]), replayed when the call aborts. Without it an aborted call's
    /// half-done writes stay in the graft's memory for its next call.
    pub roll_back_memory: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            interrupt: Interrupt::Fuel,
            tick: Duration::from_millis(1),
            fuel_per_ms: 400_000,
            memory_cap: 16 << 20,
            max_wasm_stack: 256 << 10,
            invocation_budget: Duration::from_millis(10),
            control_budget: Duration::from_millis(100),
            max_consecutive_failures: 8,
            failure_rate_min: 16,
            failure_window: Duration::from_secs(60),
            module_cache_entries: 256,
            module_cache_bytes: 256 << 20,
            module_limits: ModuleLimits::default(),
            compile_threads: std::thread::available_parallelism().map_or(1, |n| n.get().div_ceil(2)),
            compile_queue: 64,
            vlt: VltConfig::default(),
            always_transact: false,
            roll_back_memory: true,
        }
    }
}

/// The wasmtime configuration of the sandbox. Kept in one place so the benchmarks measure
/// exactly what grafts run under.
pub fn sandbox_config(interrupt: Interrupt, max_wasm_stack: usize) -> Config {
    let mut c = Config::new();
    c.cranelift_opt_level(OptLevel::Speed);
    // A compile runs on the thread that asked for it, so the compile pool's bound is the CPU
    // compiles take (wasmtime would otherwise spread each over every core).
    c.parallel_compilation(false);
    c.max_wasm_stack(max_wasm_stack);
    // Reads and writes are both confined to the graft's memory by guard pages around a large
    // reservation (the default on 64-bit hosts), so no per-access bounds check is compiled in.
    // Epoch checks are compiled in either way: with fuel they stop a graft whose transaction
    // passed its lock-holding deadline (a waiter advances the epoch then; no ticker runs).
    c.epoch_interruption(true);
    if interrupt == Interrupt::Fuel {
        c.consume_fuel(true);
    }
    // A graft's memory stays where it was made (growth stays inside its 4 GiB reservation): the
    // kernel keeps the address of each graft's argument area from instantiation on, and
    // compiled code may keep the memory's base in a register across a loop.
    c.memory_may_move(false);
    c
}

/// The sandbox's configuration for graftpoints without deadline checks
/// ([`crate::GraftPoint::DEADLINE_CHECKS`]): in fuel mode, [`sandbox_config`] without the epoch
/// checks (fuel bounds each call; the deadline is seen when it returns). In epoch mode the epoch
/// is the budget, so the checks stay and this is [`sandbox_config`].
pub fn unchecked_sandbox_config(interrupt: Interrupt, max_wasm_stack: usize) -> Config {
    let mut c = sandbox_config(interrupt, max_wasm_stack);
    if interrupt == Interrupt::Fuel {
        c.epoch_interruption(false);
    }
    c
}

pub(crate) struct Inner {
    pub(crate) engine: Engine,
    /// The engine of graftpoints without deadline checks (see [`Runtime::engine_for`]).
    unchecked_engine: Engine,
    pub(crate) config: RuntimeConfig,
    pub(crate) vlt: Vlt,
    cache: Mutex<ModuleCache>,
    pool: CompilePool,
    stop_ticker: Arc<AtomicBool>,
    /// Epochs the ticker has counted on a manual clock (each also an `increment_epoch`): what a
    /// running graft's budget is charged from there.
    pub(crate) epochs: Arc<std::sync::atomic::AtomicU64>,
    /// Each graftpoint type's graft-callable functions, made once per runtime: building a
    /// wasmtime `Linker` costs tens of microseconds, and every open file has several graftpoints.
    callables: Mutex<FxHashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

/// The graft runtime. Cheap to clone (a shared handle).
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

/// How a module is built for the graftpoint it is loaded at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Build {
    /// Rewritten to keep an undo log of its writes ([`crate::undo_log`]; a graftpoint may do
    /// without, see [`crate::GraftPoint::ROLL_BACK_MEMORY`]).
    pub logged: bool,
    /// Compiled with deadline checks ([`crate::GraftPoint::DEADLINE_CHECKS`]).
    pub deadline_checks: bool,
}

impl Build {
    /// How graftpoint `G`'s grafts are built under `config`.
    pub fn of<G: crate::GraftPoint>(config: &RuntimeConfig) -> Build {
        Build {
            logged: G::ROLL_BACK_MEMORY && config.roll_back_memory,
            deadline_checks: G::DEADLINE_CHECKS,
        }
    }
}

/// What compiling (or finding in the cache) a module gave.
pub struct Compiled {
    pub module: Module,
    /// SHA-256 of the module's bytes.
    pub hash: [u8; 32],
    /// True if the module came from the cache.
    pub cached: bool,
    pub compile_time: Duration,
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Runtime {
        Self::with_vlt(config, Vlt::new(config.vlt))
    }

    /// A runtime whose grafts' transactions share `vlt` with the rest of the kernel.
    pub fn with_vlt(config: RuntimeConfig, vlt: Vlt) -> Runtime {
        let engine = Engine::new(&sandbox_config(config.interrupt, config.max_wasm_stack))
            .expect("the sandbox configuration is valid");
        let unchecked_engine = match config.interrupt {
            Interrupt::Fuel => Engine::new(&unchecked_sandbox_config(config.interrupt, config.max_wasm_stack))
                .expect("the sandbox configuration is valid"),
            Interrupt::Epoch => engine.clone(),
        };
        let stop_ticker = Arc::new(AtomicBool::new(false));
        let epochs = Arc::new(std::sync::atomic::AtomicU64::new(0));
        match config.interrupt {
            Interrupt::Epoch => {
                let ticker = Ticker {
                    engine: engine.clone(),
                    epochs: epochs.clone(),
                    stop: stop_ticker.clone(),
                };
                spawn_ticker(ticker, config.tick, vlt.clock().clone());
            }
            Interrupt::Fuel => {
                // Only a waiter whose holder passed its deadline advances the epoch: running
                // grafts then look at their own transaction and the late one aborts.
                let engine = engine.clone();
                vlt.add_deadline_hook(Arc::new(move || engine.increment_epoch()));
            }
        }
        crate::clock::calibrate();
        Runtime {
            inner: Arc::new(Inner {
                engine,
                unchecked_engine,
                config,
                vlt,
                cache: Mutex::new(ModuleCache::default()),
                pool: CompilePool::default(),
                stop_ticker,
                epochs,
                callables: Mutex::default(),
            }),
        }
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    pub fn vlt(&self) -> &Vlt {
        &self.inner.vlt
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The engine grafts are compiled and run in: with deadline checks (the default), or
    /// without, for the graftpoints that need none ([`crate::GraftPoint::DEADLINE_CHECKS`]).
    /// A module runs only in the engine that compiled it.
    pub fn engine_for(&self, deadline_checks: bool) -> &Engine {
        match deadline_checks {
            true => &self.inner.engine,
            false => &self.inner.unchecked_engine,
        }
    }

    /// Graftpoint `G`'s graft-callable functions (made on first use, then shared).
    pub(crate) fn callables<G: GraftPoint>(&self) -> Arc<Callables<G::Env>> {
        let made = self
            .inner
            .callables
            .lock()
            .entry(TypeId::of::<G>())
            .or_insert_with(|| {
                Arc::new(Callables::<G::Env>::of::<G>(
                    self.engine_for(G::DEADLINE_CHECKS),
                    self.inner.vlt.clock(),
                ))
            })
            .clone();
        made.downcast()
            .expect("callables are kept under their graftpoint's type")
    }

    /// Validates and compiles a module, or finds it in the cache by content hash.
    pub fn compile(&self, wasm: &[u8]) -> Result<Compiled, LoadError> {
        self.compile_while(wasm, &|| true)
    }

    /// Like [`Runtime::compile`], for a caller that may go away: the module is checked against
    /// [`RuntimeConfig::module_limits`] first, then waits for one of the
    /// [`RuntimeConfig::compile_threads`] turns; while it waits `wanted` is asked now and then,
    /// and once it says no the compile is dropped ([`LoadError::Cancelled`]).
    pub fn compile_while(&self, wasm: &[u8], wanted: &dyn Fn() -> bool) -> Result<Compiled, LoadError> {
        self.compile_for(wasm, None, wanted)
    }

    /// Like [`Runtime::compile_while`], charged to `account`: a compile (not a cache hit) takes
    /// one of its compiles in progress, waiting for one of its own to end if it has too many (a
    /// user's many loads wait for each other, not for other users'), and its time is added to
    /// the account's CPU.
    pub fn compile_for(
        &self,
        wasm: &[u8],
        account: Option<&Arc<Account>>,
        wanted: &dyn Fn() -> bool,
    ) -> Result<Compiled, LoadError> {
        let build = Build {
            logged: self.inner.config.roll_back_memory,
            deadline_checks: true,
        };
        self.compile_as(wasm, account, wanted, build)
    }

    /// [`Runtime::compile_for`], built as `build` says (as a graftpoint needs: [`Build::of`]).
    pub fn compile_as(
        &self,
        wasm: &[u8],
        account: Option<&Arc<Account>>,
        wanted: &dyn Fn() -> bool,
        build: Build,
    ) -> Result<Compiled, LoadError> {
        let limits = &self.inner.config.module_limits;
        if wasm.len() > limits.max_bytes {
            return Err(LoadError::TooLarge(format!(
                "the module is {} bytes; a graft may be at most {}",
                wasm.len(),
                limits.max_bytes
            )));
        }
        // The text format is accepted too (tests and hand-written grafts): checked as binary.
        let binary = wat::parse_bytes(wasm).map_err(|e| LoadError::Malformed(e.to_string()))?;
        crate::check::precheck(&binary, limits)?;
        let hash: [u8; 32] = Sha256::digest(wasm).into();
        if let Some(module) = self.inner.cache.lock().get(&(hash, build)) {
            return Ok(Compiled {
                module,
                hash,
                cached: true,
                compile_time: Duration::ZERO,
            });
        }
        let _mine = match account {
            Some(a) => Some(charge_compile(a, wanted)?),
            None => None,
        };
        let _turn = self.inner.pool.turn(&self.inner.config, wanted)?;
        let started = Instant::now();
        // Rewritten after the limits were checked on what the user sent (the log adds code to
        // every store, which no user can make larger than the limits allow for).
        let binary = match build.logged {
            true => crate::undo_log::instrument(&binary)
                .map_err(|e| LoadError::Malformed(e.to_string()))?
                .into(),
            false => binary,
        };
        let module = Module::new(self.engine_for(build.deadline_checks), &binary)
            .map_err(|e| LoadError::Malformed(format!("{e:#}")))?;
        let compile_time = started.elapsed();
        if let Some(a) = account {
            a.add_cpu(compile_time);
        }
        let c = &self.inner.config;
        self.inner.cache.lock().insert(
            (hash, build),
            module.clone(),
            c.module_cache_entries,
            c.module_cache_bytes,
        );
        Ok(Compiled {
            module,
            hash,
            cached: false,
            compile_time,
        })
    }

    /// Refuses a graft module still arriving (`head`, its first bytes, of `size` in all) as
    /// soon as what has arrived shows it too costly to compile (see [`crate::precheck_head`]).
    pub fn precheck_head(&self, head: &[u8], size: usize) -> Result<(), LoadError> {
        crate::check::precheck_head(head, size, &self.inner.config.module_limits)
    }

    /// Takes one of `account`'s compiles in progress for a compile outside this runtime (a
    /// program's), waiting (while `wanted`) for its own others as a graft's compile does.
    pub fn compile_charge(&self, account: &Arc<Account>, wanted: &dyn Fn() -> bool) -> Result<Charge, LoadError> {
        charge_compile(account, wanted)
    }

    /// Budget of one invocation in epoch ticks (or fuel units).
    pub(crate) fn budget_units(&self, budget: Duration) -> u64 {
        let c = &self.inner.config;
        match c.interrupt {
            Interrupt::Epoch => (budget.as_nanos() / c.tick.as_nanos().max(1)).max(1) as u64,
            Interrupt::Fuel => {
                let units = budget.as_nanos().saturating_mul(u128::from(c.fuel_per_ms)) / 1_000_000;
                units.clamp(1, u128::from(u64::MAX)) as u64
            }
        }
    }
}

/// How long a load waits for one of its owner's own compiles to end before `EAGAIN`.
const COMPILE_PATIENCE: Duration = Duration::from_secs(30);

/// Takes one of `account`'s compiles in progress, waiting (while `wanted`) for its own others.
fn charge_compile(account: &Arc<Account>, wanted: &dyn Fn() -> bool) -> Result<Charge, LoadError> {
    let until = Instant::now() + COMPILE_PATIENCE;
    loop {
        match account.charge_waiting(Resource::Compiles, 1, Duration::from_millis(50)) {
            Ok(c) => return Ok(c),
            Err(_) if !wanted() => return Err(LoadError::Cancelled),
            Err(e) if Instant::now() >= until => return Err(LoadError::Limit(e)),
            Err(_) => {}
        }
    }
}

/// Bytes of machine code a compiled module occupies.
pub fn code_bytes(module: &Module) -> usize {
    let r = module.image_range();
    (r.end as usize).saturating_sub(r.start as usize)
}

/// The turns of the compile pool: at most `compile_threads` compiles run, at most
/// `compile_queue` wait.
#[derive(Default)]
struct CompilePool {
    state: Mutex<PoolState>,
    turn_over: Condvar,
}

#[derive(Default)]
struct PoolState {
    running: usize,
    waiting: usize,
}

/// A compile's turn; ends when dropped.
struct Turn<'a>(&'a CompilePool);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.state.lock().running -= 1;
        self.0.turn_over.notify_one();
    }
}

impl CompilePool {
    fn turn(&self, config: &RuntimeConfig, wanted: &dyn Fn() -> bool) -> Result<Turn<'_>, LoadError> {
        let mut st = self.state.lock();
        if st.running >= config.compile_threads.max(1) {
            if st.waiting >= config.compile_queue {
                return Err(LoadError::Busy(format!(
                    "{} compiles are waiting already; try again later",
                    st.waiting
                )));
            }
            st.waiting += 1;
            while st.running >= config.compile_threads.max(1) {
                if !wanted() {
                    st.waiting -= 1;
                    // Another waiter may take the turn this one was woken for.
                    self.turn_over.notify_one();
                    return Err(LoadError::Cancelled);
                }
                self.turn_over.wait_for(&mut st, Duration::from_millis(50));
            }
            st.waiting -= 1;
        }
        if !wanted() {
            return Err(LoadError::Cancelled);
        }
        st.running += 1;
        Ok(Turn(self))
    }
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime::new(RuntimeConfig::default())
    }
}

/// What the epoch ticker moves, and what stops it.
struct Ticker {
    engine: Engine,
    epochs: Arc<std::sync::atomic::AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Ticker {
    fn tick(&self) {
        self.epochs.fetch_add(1, Ordering::Relaxed);
        self.engine.increment_epoch();
    }
}

/// Advances the epoch every `tick` of `clock`: on the machine's clock by sleeping a tick per
/// epoch (as always); on a manual clock, one epoch per tick it has moved, at most one per short
/// host slice, so budgets run out when the clock is moved past them. Those epochs are counted,
/// and a running graft is charged every one since it last looked: a graft off the CPU during a
/// burst still sees the whole burst (it once saw one, and spun on past its budget).
fn spawn_ticker(ticker: Ticker, tick: Duration, clock: vino_vlt::SharedClock) {
    let manual = clock.host_instant(Duration::ZERO).is_none();
    std::thread::Builder::new()
        .name("vino-epoch".into())
        .spawn(move || {
            let mut next = clock.deadline_in(tick);
            while !ticker.stop.load(Ordering::Relaxed) {
                if !manual {
                    std::thread::sleep(tick);
                    // Not counted: on the machine's clock a graft is charged a tick per tick
                    // it sees running, not the ticks it spent off the CPU.
                    ticker.engine.increment_epoch();
                    continue;
                }
                std::thread::sleep(vino_vlt::MANUAL_SLICE);
                if clock.passed(next) {
                    ticker.tick();
                    next += tick.max(Duration::from_nanos(1));
                }
            }
        })
        .expect("spawning the epoch ticker");
}

/// Compiled modules by content hash, oldest dropped first, within a count and a size.
/// A module's place in the cache: its hash, and how it was built.
type CacheKey = ([u8; 32], Build);

#[derive(Default)]
struct ModuleCache {
    modules: FxHashMap<CacheKey, (Module, usize)>,
    order: VecDeque<CacheKey>,
    bytes: usize,
}

impl ModuleCache {
    fn get(&self, key: &CacheKey) -> Option<Module> {
        self.modules.get(key).map(|(m, _)| m.clone())
    }

    fn insert(&mut self, hash: CacheKey, module: Module, cap: usize, cap_bytes: usize) {
        let size = code_bytes(&module);
        if size > cap_bytes {
            return;
        }
        if self.modules.insert(hash, (module, size)).is_none() {
            self.order.push_back(hash);
            self.bytes += size;
        }
        while self.order.len() > cap.max(1) || self.bytes > cap_bytes {
            let Some(old) = self.order.pop_front() else { break };
            if let Some((_, n)) = self.modules.remove(&old) {
                self.bytes -= n;
            }
        }
    }
}
