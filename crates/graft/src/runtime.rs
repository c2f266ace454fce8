//! The graft runtime: one wasmtime engine configured as the sandbox, the clock that interrupts
//! grafts, a cache of compiled modules, and the transaction manager every invocation uses.

use crate::error::LoadError;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use vino_vlt::{Vlt, VltConfig};
use wasmtime::{Config, Engine, Module, OptLevel};

/// How a running graft is stopped when its time is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Interrupt {
    /// A ticker thread advances the engine's epoch every [`RuntimeConfig::tick`]; compiled code
    /// checks the epoch at loop heads and function entries. Cheap, and lets the runtime also stop
    /// a graft whose transaction passed its lock-holding deadline. The default.
    Epoch,
    /// Compiled code counts fuel per instruction block. Deterministic but slower, and the
    /// transaction deadline is then seen only when the graft calls into the kernel. Kept so the
    /// two can be measured side by side.
    Fuel,
}

/// Limits and settings of the graft runtime.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeConfig {
    pub interrupt: Interrupt,
    /// Epoch tick (the granularity of CPU budgets).
    pub tick: Duration,
    /// Fuel units per millisecond of budget, in fuel mode.
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
    pub vlt: VltConfig,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            interrupt: Interrupt::Epoch,
            tick: Duration::from_millis(1),
            fuel_per_ms: 2_000_000,
            memory_cap: 16 << 20,
            max_wasm_stack: 256 << 10,
            invocation_budget: crate::point::DEFAULT_BUDGET,
            control_budget: Duration::from_secs(1),
            max_consecutive_failures: 8,
            failure_rate_min: 16,
            failure_window: Duration::from_secs(60),
            module_cache_entries: 256,
            vlt: VltConfig::default(),
        }
    }
}

/// The wasmtime configuration of the sandbox. Kept in one place so the benchmarks measure
/// exactly what grafts run under.
pub fn sandbox_config(interrupt: Interrupt, max_wasm_stack: usize) -> Config {
    let mut c = Config::new();
    c.cranelift_opt_level(OptLevel::Speed);
    c.max_wasm_stack(max_wasm_stack);
    // Reads and writes are both confined to the graft's memory by guard pages around a large
    // reservation (the default on 64-bit hosts), so no per-access bounds check is compiled in.
    match interrupt {
        Interrupt::Epoch => c.epoch_interruption(true),
        Interrupt::Fuel => c.consume_fuel(true),
    };
    c
}

pub(crate) struct Inner {
    pub(crate) engine: Engine,
    pub(crate) config: RuntimeConfig,
    pub(crate) vlt: Vlt,
    cache: Mutex<ModuleCache>,
    stop_ticker: Arc<AtomicBool>,
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
        let stop_ticker = Arc::new(AtomicBool::new(false));
        if config.interrupt == Interrupt::Epoch {
            spawn_ticker(engine.clone(), config.tick, stop_ticker.clone());
        }
        crate::clock::calibrate();
        Runtime {
            inner: Arc::new(Inner {
                engine,
                config,
                vlt,
                cache: Mutex::new(ModuleCache::default()),
                stop_ticker,
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

    /// Validates and compiles a module, or finds it in the cache by content hash.
    pub fn compile(&self, wasm: &[u8]) -> Result<Compiled, LoadError> {
        let hash: [u8; 32] = Sha256::digest(wasm).into();
        if let Some(module) = self.inner.cache.lock().get(&hash) {
            return Ok(Compiled {
                module,
                hash,
                cached: true,
                compile_time: Duration::ZERO,
            });
        }
        let started = Instant::now();
        let module = Module::new(&self.inner.engine, wasm).map_err(|e| LoadError::Malformed(format!("{e:#}")))?;
        let compile_time = started.elapsed();
        self.inner
            .cache
            .lock()
            .insert(hash, module.clone(), self.inner.config.module_cache_entries);
        Ok(Compiled {
            module,
            hash,
            cached: false,
            compile_time,
        })
    }

    /// Budget of one invocation in epoch ticks (or fuel units).
    pub(crate) fn budget_units(&self, budget: Duration) -> u64 {
        let c = &self.inner.config;
        match c.interrupt {
            Interrupt::Epoch => (budget.as_nanos() / c.tick.as_nanos().max(1)).max(1) as u64,
            Interrupt::Fuel => (budget.as_millis().max(1) as u64).saturating_mul(c.fuel_per_ms),
        }
    }
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime::new(RuntimeConfig::default())
    }
}

fn spawn_ticker(engine: Engine, tick: Duration, stop: Arc<AtomicBool>) {
    std::thread::Builder::new()
        .name("vino-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(tick);
                engine.increment_epoch();
            }
        })
        .expect("spawning the epoch ticker");
}

/// Compiled modules by content hash, oldest dropped first.
#[derive(Default)]
struct ModuleCache {
    modules: FxHashMap<[u8; 32], Module>,
    order: VecDeque<[u8; 32]>,
}

impl ModuleCache {
    fn get(&self, hash: &[u8; 32]) -> Option<Module> {
        self.modules.get(hash).cloned()
    }

    fn insert(&mut self, hash: [u8; 32], module: Module, cap: usize) {
        if self.modules.insert(hash, module).is_none() {
            self.order.push_back(hash);
        }
        while self.order.len() > cap.max(1) {
            if let Some(old) = self.order.pop_front() {
                self.modules.remove(&old);
            }
        }
    }
}
