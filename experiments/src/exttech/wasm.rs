//! Variant (b): the same C compiled to wasm32, compiled again at load time by
//! wasmtime (Cranelift) with the graft runtime's sandbox settings, and called
//! through wasmtime's typed-function interface.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use wasmtime::{Config, Engine, Instance, Memory, Module, Store, StoreContextMut, TypedFunc, UpdateDeadline};

use super::workloads::Extension;

/// The wasm32 builds of the workloads.
pub const HOTLIST_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/hotlist.wasm"));
pub const MD5_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/md5.wasm"));
pub const LOGDISK_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/logdisk.wasm"));

/// How a runaway graft is stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interruption {
    /// Epoch interruption: compiled code polls a counter a ticker thread
    /// bumps every millisecond; the store's deadline is in ticks.
    Epoch,
    /// Fuel metering: compiled code counts executed operators.
    Fuel,
}

/// Epoch period of the graft runtime's ticker (its default configuration).
pub fn epoch_tick() -> Duration {
    vino_graft::RuntimeConfig::default().tick
}

/// CPU budget armed before each call, in ticks: far beyond any benchmark
/// call.  As in the graft runtime, the store's deadline is one tick ahead
/// and a callback on every tick counts the budget down.
pub const EPOCH_BUDGET_TICKS: u64 = 10_000;
/// Fuel armed before each call in the fuel-metered variant.
pub const FUEL_BUDGET: u64 = 1 << 40;

/// The sandbox configuration: Cranelift at `OptLevel::Speed`, a 256 KB cap
/// on the native stack, epoch interruption or fuel, and wasmtime's default
/// memory settings (a large reservation with guard pages, so loads and
/// stores are both confined without per-access checks).  The threads
/// proposal stays off: the workspace builds wasmtime without its `threads`
/// feature.
// Same settings as vino_graft's sandbox
pub fn sandbox_config(interrupt: Interruption) -> Config {
    let interrupt = match interrupt {
        Interruption::Epoch => vino_graft::Interrupt::Epoch,
        Interruption::Fuel => vino_graft::Interrupt::Fuel,
    };
    vino_graft::sandbox_config(interrupt, vino_graft::RuntimeConfig::default().max_wasm_stack)
}

/// The sandbox engine with epoch interruption (the kernel's runtime meters fuel; both are
/// measured).
pub fn sandbox_engine() -> Engine {
    sandbox_engine_with(Interruption::Epoch)
}

/// The sandbox engine with the given interruption mechanism.
pub fn sandbox_engine_with(interrupt: Interruption) -> Engine {
    Engine::new(&sandbox_config(interrupt)).expect("the sandbox configuration is valid")
}

/// Bumps an engine's epoch every [`epoch_tick`], as the graft runtime does,
/// until dropped.
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub fn start(engine: &Engine) -> EpochTicker {
        let stop = Arc::new(AtomicBool::new(false));
        let (s, e, tick) = (stop.clone(), engine.clone(), epoch_tick());
        let handle = std::thread::Builder::new()
            .name("vino-bench-epoch".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    e.increment_epoch();
                }
            })
            .expect("spawning the epoch ticker");
        EpochTicker {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The three workload modules compiled for one engine.
pub struct WasmModules {
    pub engine: Engine,
    pub interrupt: Interruption,
    pub hotlist: Module,
    pub md5: Module,
    pub logdisk: Module,
}

fn compile(engine: &Engine, bytes: &[u8], name: &str) -> Result<Module> {
    Module::new(engine, bytes).map_err(|e| anyhow::Error::from(e).context(format!("compiling {name}")))
}

impl WasmModules {
    pub fn compile(interrupt: Interruption) -> Result<WasmModules> {
        WasmModules::compile_with(sandbox_engine_with(interrupt), interrupt, |_, bytes| Ok(bytes.to_vec()))
    }

    /// The modules as `transform` rewrites them (given each module's name and bytes), compiled
    /// for `engine`, a sandbox engine with `interrupt`: `vino bench rollback` runs the workloads
    /// as built and with the undo log's instrumentation on one engine.
    pub fn compile_with(
        engine: Engine,
        interrupt: Interruption,
        mut transform: impl FnMut(&str, &[u8]) -> Result<Vec<u8>>,
    ) -> Result<WasmModules> {
        let mut module = |name: &str, bytes: &[u8]| -> Result<Module> {
            let bytes = transform(name, bytes).map_err(|e| e.context(format!("rewriting {name}")))?;
            compile(&engine, &bytes, name)
        };
        Ok(WasmModules {
            hotlist: module("hotlist.wasm", HOTLIST_WASM)?,
            md5: module("md5.wasm", MD5_WASM)?,
            logdisk: module("logdisk.wasm", LOGDISK_WASM)?,
            engine,
            interrupt,
        })
    }
}

/// A store with a fresh instance of each module; arms the deadline (or the
/// fuel) before every call, as the graft runtime arms each invocation.
pub struct Wasmtime {
    store: Store<u64>,
    interrupt: Interruption,
    nop: TypedFunc<u32, u32>,
    hl_mem: Memory,
    hl_args: usize,
    hl_args_cap: usize,
    hl_setup: TypedFunc<(u32, u32, u32), u32>,
    hl_page: TypedFunc<u32, u32>,
    hl_pick: TypedFunc<(u32, u32), u32>,
    md5_mem: Memory,
    md5_input: usize,
    md5_input_size: usize,
    md5_begin: TypedFunc<(), ()>,
    md5_feed: TypedFunc<(u32, u32), ()>,
    md5_end: TypedFunc<(), u32>,
    ld_reset: TypedFunc<u32, ()>,
    ld_write_next: TypedFunc<u32, u32>,
    ld_checksum: TypedFunc<(), u64>,
    ld_live_total: TypedFunc<(), u32>,
}

fn memory(store: &mut Store<u64>, inst: &Instance) -> Result<Memory> {
    inst.get_memory(&mut *store, "memory")
        .ok_or_else(|| anyhow!("module exports no memory"))
}

impl Wasmtime {
    pub fn instantiate(m: &WasmModules) -> Result<Wasmtime> {
        let mut store = Store::new(&m.engine, 0u64);
        if m.interrupt == Interruption::Epoch {
            store.epoch_deadline_callback(on_tick);
        }
        arm(&mut store, m.interrupt)?;
        let hl = Instance::new(&mut store, &m.hotlist, &[])?;
        let md = Instance::new(&mut store, &m.md5, &[])?;
        let ld = Instance::new(&mut store, &m.logdisk, &[])?;
        let hl_mem = memory(&mut store, &hl)?;
        let md5_mem = memory(&mut store, &md)?;
        let hl_args = hl
            .get_typed_func::<(), u32>(&mut store, "vb_hl_args")?
            .call(&mut store, ())? as usize;
        let hl_args_cap = hl
            .get_typed_func::<(), u32>(&mut store, "vb_hl_args_capacity")?
            .call(&mut store, ())? as usize;
        let md5_input = md
            .get_typed_func::<(), u32>(&mut store, "vb_md5_input")?
            .call(&mut store, ())? as usize;
        let md5_input_size = md
            .get_typed_func::<(), u32>(&mut store, "vb_md5_input_size")?
            .call(&mut store, ())? as usize;
        Ok(Wasmtime {
            interrupt: m.interrupt,
            nop: hl.get_typed_func(&mut store, "vb_nop")?,
            hl_mem,
            hl_args,
            hl_args_cap,
            hl_setup: hl.get_typed_func(&mut store, "vb_hl_setup")?,
            hl_page: hl.get_typed_func(&mut store, "vb_hl_page")?,
            hl_pick: hl.get_typed_func(&mut store, "vb_hl_pick_victim")?,
            md5_mem,
            md5_input,
            md5_input_size,
            md5_begin: md.get_typed_func(&mut store, "vb_md5_begin")?,
            md5_feed: md.get_typed_func(&mut store, "vb_md5_feed")?,
            md5_end: md.get_typed_func(&mut store, "vb_md5_end")?,
            ld_reset: ld.get_typed_func(&mut store, "vb_ld_reset")?,
            ld_write_next: ld.get_typed_func(&mut store, "vb_ld_write_next")?,
            ld_checksum: ld.get_typed_func(&mut store, "vb_ld_checksum")?,
            ld_live_total: ld.get_typed_func(&mut store, "vb_ld_live_total")?,
            store,
        })
    }

    #[inline]
    fn arm(&mut self) -> Result<()> {
        arm(&mut self.store, self.interrupt)
    }
}

#[inline]
fn arm(store: &mut Store<u64>, interrupt: Interruption) -> Result<()> {
    match interrupt {
        Interruption::Epoch => {
            *store.data_mut() = EPOCH_BUDGET_TICKS;
            store.set_epoch_deadline(1);
        }
        Interruption::Fuel => {
            store.set_fuel(FUEL_BUDGET)?;
            // The sandbox's configuration compiles epoch checks in with fuel too (the kernel
            // uses them for lock deadlines); here no epoch ever ends a call.
            store.set_epoch_deadline(1 << 60);
        }
    }
    Ok(())
}

/// Runs on every epoch tick during a call: spends one tick of the budget.
pub(crate) fn on_tick(mut ctx: StoreContextMut<'_, u64>) -> wasmtime::Result<UpdateDeadline> {
    let left = ctx.data_mut();
    if *left <= 1 {
        return Ok(UpdateDeadline::Interrupt);
    }
    *left -= 1;
    Ok(UpdateDeadline::Continue(1))
}

impl Extension for Wasmtime {
    #[inline]
    fn nop(&mut self, x: u32) -> Result<u32> {
        self.arm()?;
        Ok(self.nop.call(&mut self.store, x)?)
    }

    fn hl_setup(&mut self, n: u32, max_page: u32, seed: u32) -> Result<u32> {
        self.arm()?;
        Ok(self.hl_setup.call(&mut self.store, (n, max_page, seed))?)
    }

    fn hl_page(&mut self, i: u32) -> Result<u32> {
        self.arm()?;
        Ok(self.hl_page.call(&mut self.store, i)?)
    }

    #[inline]
    fn hl_pick(&mut self, cand: &[u32]) -> Result<u32> {
        if cand.len() > self.hl_args_cap {
            bail!("too many candidates: {}", cand.len());
        }
        let mem = self.hl_mem.data_mut(&mut self.store);
        let Some(area) = mem.get_mut(self.hl_args..self.hl_args + 4 * cand.len()) else {
            bail!("argument area outside the graft's memory");
        };
        for (dst, c) in area.chunks_exact_mut(4).zip(cand) {
            dst.copy_from_slice(&c.to_le_bytes());
        }
        self.arm()?;
        Ok(self
            .hl_pick
            .call(&mut self.store, (self.hl_args as u32, cand.len() as u32))?)
    }

    fn md5_load(&mut self, data: &[u8]) -> Result<()> {
        if data.len() > self.md5_input_size {
            bail!(
                "md5 input of {} bytes exceeds the module's {} byte buffer",
                data.len(),
                self.md5_input_size
            );
        }
        let mem = self.md5_mem.data_mut(&mut self.store);
        let Some(dst) = mem.get_mut(self.md5_input..self.md5_input + data.len()) else {
            bail!("md5 input buffer outside the module's memory");
        };
        dst.copy_from_slice(data);
        Ok(())
    }

    fn md5_begin(&mut self) -> Result<()> {
        self.arm()?;
        Ok(self.md5_begin.call(&mut self.store, ())?)
    }

    #[inline]
    fn md5_feed(&mut self, offset: u32, len: u32) -> Result<()> {
        if offset as usize + len as usize > self.md5_input_size {
            bail!("md5 feed {offset}+{len} outside the input buffer");
        }
        self.arm()?;
        Ok(self
            .md5_feed
            .call(&mut self.store, (self.md5_input as u32 + offset, len))?)
    }

    fn md5_end(&mut self) -> Result<[u8; 16]> {
        self.arm()?;
        let at = self.md5_end.call(&mut self.store, ())? as usize;
        let mem = self.md5_mem.data(&self.store);
        let d = mem
            .get(at..at + 16)
            .ok_or_else(|| anyhow!("digest outside the module's memory"))?;
        Ok(d.try_into().expect("16 bytes"))
    }

    fn ld_reset(&mut self, seed: u32) -> Result<()> {
        self.arm()?;
        Ok(self.ld_reset.call(&mut self.store, seed)?)
    }

    #[inline]
    fn ld_write_next(&mut self, n: u32) -> Result<u32> {
        self.arm()?;
        Ok(self.ld_write_next.call(&mut self.store, n)?)
    }

    fn ld_checksum(&mut self) -> Result<u64> {
        self.arm()?;
        Ok(self.ld_checksum.call(&mut self.store, ())?)
    }

    fn ld_live_total(&mut self) -> Result<u32> {
        self.arm()?;
        Ok(self.ld_live_total.call(&mut self.store, ())?)
    }
}
