//! Variant (c): the same wasm32 modules run by the wasmi interpreter (the
//! modern counterpart of the thesis' interpreted Java and Tcl).

use anyhow::{Result, anyhow, bail};
use wasmi::{CompilationMode, Config, Engine, Instance, Linker, Memory, Module, Store, TypedFunc};

use super::wasm::{HOTLIST_WASM, LOGDISK_WASM, MD5_WASM};
use super::workloads::Extension;

trait WasmiResult<T> {
    fn w(self) -> Result<T>;
}

impl<T> WasmiResult<T> for std::result::Result<T, wasmi::Error> {
    fn w(self) -> Result<T> {
        self.map_err(|e| anyhow!("wasmi: {e}"))
    }
}

/// The interpreter's engine: default settings, with eager translation so
/// that load cost includes all of it.
pub fn interp_engine() -> Engine {
    let mut c = Config::default();
    c.compilation_mode(CompilationMode::Eager);
    Engine::new(&c)
}

/// The three workload modules, validated and translated for wasmi.
pub struct WasmiModules {
    pub engine: Engine,
    pub hotlist: Module,
    pub md5: Module,
    pub logdisk: Module,
}

impl WasmiModules {
    pub fn compile() -> Result<WasmiModules> {
        let engine = interp_engine();
        Ok(WasmiModules {
            hotlist: Module::new(&engine, HOTLIST_WASM).w()?,
            md5: Module::new(&engine, MD5_WASM).w()?,
            logdisk: Module::new(&engine, LOGDISK_WASM).w()?,
            engine,
        })
    }
}

/// Instantiates a module with no imports.
pub fn instantiate(store: &mut Store<()>, module: &Module) -> Result<Instance> {
    let linker = Linker::<()>::new(store.engine());
    linker.instantiate_and_start(&mut *store, module).w()
}

pub struct Wasmi {
    store: Store<()>,
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

fn memory(store: &Store<()>, inst: &Instance) -> Result<Memory> {
    inst.get_memory(store, "memory")
        .ok_or_else(|| anyhow!("module exports no memory"))
}

fn call0(store: &mut Store<()>, inst: &Instance, name: &str) -> Result<u32> {
    inst.get_typed_func::<(), u32>(&*store, name)
        .w()?
        .call(&mut *store, ())
        .w()
}

impl Wasmi {
    pub fn instantiate(m: &WasmiModules) -> Result<Wasmi> {
        let mut store = Store::new(&m.engine, ());
        let hl = instantiate(&mut store, &m.hotlist)?;
        let md = instantiate(&mut store, &m.md5)?;
        let ld = instantiate(&mut store, &m.logdisk)?;
        Ok(Wasmi {
            nop: hl.get_typed_func(&store, "vb_nop").w()?,
            hl_mem: memory(&store, &hl)?,
            hl_args: call0(&mut store, &hl, "vb_hl_args")? as usize,
            hl_args_cap: call0(&mut store, &hl, "vb_hl_args_capacity")? as usize,
            hl_setup: hl.get_typed_func(&store, "vb_hl_setup").w()?,
            hl_page: hl.get_typed_func(&store, "vb_hl_page").w()?,
            hl_pick: hl.get_typed_func(&store, "vb_hl_pick_victim").w()?,
            md5_mem: memory(&store, &md)?,
            md5_input: call0(&mut store, &md, "vb_md5_input")? as usize,
            md5_input_size: call0(&mut store, &md, "vb_md5_input_size")? as usize,
            md5_begin: md.get_typed_func(&store, "vb_md5_begin").w()?,
            md5_feed: md.get_typed_func(&store, "vb_md5_feed").w()?,
            md5_end: md.get_typed_func(&store, "vb_md5_end").w()?,
            ld_reset: ld.get_typed_func(&store, "vb_ld_reset").w()?,
            ld_write_next: ld.get_typed_func(&store, "vb_ld_write_next").w()?,
            ld_checksum: ld.get_typed_func(&store, "vb_ld_checksum").w()?,
            ld_live_total: ld.get_typed_func(&store, "vb_ld_live_total").w()?,
            store,
        })
    }
}

impl Extension for Wasmi {
    #[inline]
    fn nop(&mut self, x: u32) -> Result<u32> {
        self.nop.call(&mut self.store, x).w()
    }

    fn hl_setup(&mut self, n: u32, max_page: u32, seed: u32) -> Result<u32> {
        self.hl_setup.call(&mut self.store, (n, max_page, seed)).w()
    }

    fn hl_page(&mut self, i: u32) -> Result<u32> {
        self.hl_page.call(&mut self.store, i).w()
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
        self.hl_pick
            .call(&mut self.store, (self.hl_args as u32, cand.len() as u32))
            .w()
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
        self.md5_begin.call(&mut self.store, ()).w()
    }

    #[inline]
    fn md5_feed(&mut self, offset: u32, len: u32) -> Result<()> {
        if offset as usize + len as usize > self.md5_input_size {
            bail!("md5 feed {offset}+{len} outside the input buffer");
        }
        self.md5_feed
            .call(&mut self.store, (self.md5_input as u32 + offset, len))
            .w()
    }

    fn md5_end(&mut self) -> Result<[u8; 16]> {
        let at = self.md5_end.call(&mut self.store, ()).w()? as usize;
        let mem = self.md5_mem.data(&self.store);
        let d = mem
            .get(at..at + 16)
            .ok_or_else(|| anyhow!("digest outside the module's memory"))?;
        Ok(d.try_into().expect("16 bytes"))
    }

    fn ld_reset(&mut self, seed: u32) -> Result<()> {
        self.ld_reset.call(&mut self.store, seed).w()
    }

    #[inline]
    fn ld_write_next(&mut self, n: u32) -> Result<u32> {
        self.ld_write_next.call(&mut self.store, n).w()
    }

    fn ld_checksum(&mut self) -> Result<u64> {
        self.ld_checksum.call(&mut self.store, ()).w()
    }

    fn ld_live_total(&mut self) -> Result<u32> {
        self.ld_live_total.call(&mut self.store, ()).w()
    }
}
