//! Rolling a graft's own state back when one of its calls is aborted.
//!
//! A failed graft call (a trap, an exhausted budget, a refused kernel call) undoes the kernel's
//! changes through its VINO lightweight transaction (Small 1998, ch. 6), but the graft's linear
//! memory and globals would keep whatever the aborted call half-wrote: the next call would
//! start from a state no completed call ever left. wasmtime offers no per-call snapshot of an
//! instance; write-protecting the memory at every call and copying pages on the first write
//! costs far more than the ~40 ns a graft call takes, and copying the whole memory is out of the
//! question. So the graft's own code keeps an undo log of its writes, in a memory it cannot
//! address:
//!
//! * [`instrument`] rewrites a module so that every store to its memory first appends a record
//!   of the bytes it is about to overwrite to a second memory, the log, added to the module
//!   with a cursor global, both exported under reserved names ([`LOG_EXPORT`],
//!   [`CURSOR_EXPORT`]). The graft's original code never names either: they are appended at
//!   the end of their index spaces. The mutable globals are logged once per call, by the entry
//!   wrapper below, rather than at each `global.set`: compiled C sets its stack pointer at every
//!   function's entry and exit, and logging there (even only a call's first set) cost a
//!   fuel-metered graft a third of its time in tight code, where a record per global per call
//!   costs a few instructions.
//! * [`roll_back`] replays a log backwards over a copy of the memory; [`UndoLog`] does the same
//!   on a wasmtime instance ([`UndoLog::roll_back`]). Every exported function is called
//!   through a wrapper the rewrite adds, which empties the log and logs the mutable globals
//!   first: a call from outside starts a fresh log at no cost to the host ([`UndoLog::begin`]
//!   empties it from the host).
//!
//! A record is [`RECORD_BYTES`] long: the old value's bytes (little-endian, zero-padded to 16),
//! then the effective address as a `u32` (or the global's index), then the kind as a `u32`
//! (the store's width in bytes, or [`GLOBAL_FLAG`] with the global's value type). Before a
//! record is written the log is checked for room and doubled if it has none (it starts at
//! [`LOG_INITIAL_PAGES`]); growing goes through the runtime's memory limits, so a call that
//! writes more than its owner may hold traps there, and is rolled back. The old bytes are loaded from the graft's memory with the store's own offset and width
//! before anything is written to the log, so a store that would trap (out of bounds, or an
//! address plus offset past 4 GiB) traps at that load, with nothing logged.
//!
//! Not covered yet, and refused by [`instrument`] where it would matter: bulk memory writes
//! (`memory.fill`, `memory.copy`, `memory.init`), atomics and shared memories, 64-bit memories,
//! more than one memory, mutable globals of reference type, and every instruction that changes a
//! table (`table.set`, `table.grow`, ...: a graft's tables never change after instantiation,
//! so there is nothing of them to undo). Not undone: the size of a memory grown by the aborted
//! call (stores into the grown part
//! are logged and undone, to zeros, but the memory stays grown).

use wasm_encoder::reencode::{self, Reencode};
use wasm_encoder::{
    CodeSection, ConstExpr, ExportKind, ExportSection, Function, GlobalSection, GlobalType, Instruction, MemArg,
    MemorySection, MemoryType, SectionId,
};
use wasmparser::{Encoding, Operator, Parser, Payload, TypeRef, Validator, WasmFeatures};
use wasmtime::{AsContextMut, Global, Instance, Memory, Val, ValType};

/// Size of the log memory in 64 KiB pages when the instance starts. A call that needs more
/// doubles it (`memory.grow`, so the runtime's memory limits and charges apply); a log that
/// cannot grow traps, and the call fails and is rolled back.
pub const LOG_INITIAL_PAGES: u64 = 1;
/// Most pages the log memory may have (2 GiB: its byte size then fits in an `i32`).
pub const LOG_MAX_PAGES: u64 = 1 << 15;
/// Size of one undo record in the log.
pub const RECORD_BYTES: u32 = 24;
/// Set in a record's kind when the record holds a global's old value.
pub const GLOBAL_FLAG: u32 = 1 << 31;
/// Prefix of every export name the instrumentation adds; a module exporting such a name is
/// refused.
pub const RESERVED_PREFIX: &str = "__vino_undo";
/// Export name of the log memory.
pub const LOG_EXPORT: &str = "__vino_undo_log";
/// Export name of the cursor global: the bytes of the log in use.
pub const CURSOR_EXPORT: &str = "__vino_undo_cursor";
/// Export name under which the graft's memory (index 0) is exported again, for rollback.
pub const MEMORY_EXPORT: &str = "__vino_undo_memory";
/// Prefix of the export names of the mutable globals, followed by the global's index.
pub const GLOBAL_EXPORT_PREFIX: &str = "__vino_undo_global_";

/// Byte offset in a record of the effective address (or global index).
const ADDR_AT: u64 = 16;
/// Byte offset in a record of the kind; the record's last field.
const KIND_AT: u64 = 20;

/// Value type codes in the kind of a global's record.
const KIND_I32: u32 = 0;
const KIND_I64: u32 = 1;
const KIND_F32: u32 = 2;
const KIND_F64: u32 = 3;
const KIND_V128: u32 = 4;

/// Why a module could not be instrumented.
#[derive(Debug, thiserror::Error)]
pub enum InstrumentError {
    /// The module is malformed or invalid (with atomics and GC types disabled).
    #[error("invalid module: {0}")]
    Invalid(#[from] wasmparser::BinaryReaderError),
    /// The module has more than one memory.
    #[error("the module has {0} memories; only a module with at most one can be logged")]
    TooManyMemories(u32),
    /// The module uses something whose writes the log cannot undo.
    #[error("{0} cannot be undone by the undo log")]
    Unsupported(&'static str),
    /// The module already exports a name the instrumentation reserves.
    #[error("export name {0:?} is reserved for the undo log")]
    ReservedName(String),
    /// Re-encoding the module failed.
    #[error("re-encoding failed: {0}")]
    Encode(String),
}

/// Why a log could not be rolled back.
#[derive(Debug, thiserror::Error)]
pub enum RollbackError {
    /// The instance lacks one of the exports [`instrument`] adds.
    #[error("the instance exports no {0} (was its module instrumented?)")]
    Missing(&'static str),
    /// The cursor is not a whole number of records within the log.
    #[error("undo log cursor {0} is not a whole number of records within the log")]
    BadCursor(u32),
    /// A record's kind or address does not fit the memory.
    #[error("undo record {0} is malformed")]
    BadRecord(usize),
    /// A record names a global that is not exported for rollback.
    #[error("global {0} is not exported for rollback")]
    MissingGlobal(u32),
    /// wasmtime refused to set a global or the cursor.
    #[error("restoring global {index}: {message}")]
    Global {
        /// The global's index (`u32::MAX` for the cursor).
        index: u32,
        /// wasmtime's reason.
        message: String,
    },
}

/// What the rewrite needs to know of the module, gathered before it starts.
#[derive(Default)]
struct Survey {
    /// Parameter count of each type.
    type_params: Vec<u32>,
    /// Type index of each defined function, in order.
    func_types: Vec<u32>,
    /// Number of memories, imported and defined.
    memories: u32,
    /// Every global, imported ones first.
    globals: Vec<wasmparser::GlobalType>,
    /// Types in the type section (the log's grow function's type is added after them).
    types: u32,
    /// Functions imported (the defined ones are numbered after them).
    imported_funcs: u32,
    /// The defined functions exported, by function index, each once, in export order: each
    /// gets an entry wrapper that empties the log before it runs.
    exported_funcs: Vec<u32>,
}

impl Survey {
    fn of(wasm: &[u8]) -> Result<Survey, InstrumentError> {
        let mut features = WasmFeatures::default();
        features.remove(WasmFeatures::THREADS | WasmFeatures::SHARED_EVERYTHING_THREADS | WasmFeatures::GC);
        Validator::new_with_features(features).validate_all(wasm)?;
        let mut s = Survey::default();
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::Version {
                    encoding: Encoding::Component,
                    ..
                } => {
                    return Err(InstrumentError::Unsupported("a component"));
                }
                Payload::TypeSection(r) => {
                    for ty in r.into_iter_err_on_gc_types() {
                        s.type_params.push(ty?.params().len() as u32);
                        s.types += 1;
                    }
                }
                Payload::ImportSection(r) => {
                    for import in r.into_imports() {
                        match import?.ty {
                            TypeRef::Func(_) => s.imported_funcs += 1,
                            TypeRef::Memory(m) => s.memory(&m)?,
                            TypeRef::Global(g) => s.globals.push(g),
                            _ => {}
                        }
                    }
                }
                Payload::FunctionSection(r) => {
                    for ty in r {
                        s.func_types.push(ty?);
                    }
                }
                Payload::MemorySection(r) => {
                    for m in r {
                        s.memory(&m?)?;
                    }
                }
                Payload::GlobalSection(r) => {
                    for g in r {
                        s.globals.push(g?.ty);
                    }
                }
                Payload::ExportSection(r) => {
                    for e in r {
                        let e = e?;
                        if e.name.starts_with(RESERVED_PREFIX) {
                            return Err(InstrumentError::ReservedName(e.name.to_owned()));
                        }
                        if e.kind == wasmparser::ExternalKind::Func {
                            if e.index < s.imported_funcs {
                                return Err(InstrumentError::Unsupported("exporting an imported function"));
                            }
                            if !s.exported_funcs.contains(&e.index) {
                                s.exported_funcs.push(e.index);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if s.memories > 1 {
            return Err(InstrumentError::TooManyMemories(s.memories));
        }
        Ok(s)
    }

    /// The type index of defined function `func` (by function index).
    fn defined_type(&self, func: u32) -> Option<u32> {
        let at = func.checked_sub(self.imported_funcs)?;
        self.func_types.get(at as usize).copied()
    }

    /// The function index of the function that grows the log: after the entry wrappers.
    fn grow_function(&self) -> u32 {
        self.imported_funcs + self.func_types.len() as u32 + self.exported_funcs.len() as u32
    }

    /// The function index of the entry wrapper of exported function `func`, if it has one.
    fn wrapper_of(&self, func: u32) -> Option<u32> {
        let k = self.exported_funcs.iter().position(|&f| f == func)?;
        Some(self.imported_funcs + self.func_types.len() as u32 + k as u32)
    }

    fn memory(&mut self, m: &wasmparser::MemoryType) -> Result<(), InstrumentError> {
        if m.memory64 {
            return Err(InstrumentError::Unsupported("a 64-bit memory"));
        }
        if m.shared {
            return Err(InstrumentError::Unsupported("a shared memory"));
        }
        self.memories += 1;
        Ok(())
    }
}

/// Value types of the scratch locals.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scalar {
    I32,
    I64,
    F32,
    F64,
    V128,
}

impl Scalar {
    const ALL: [Scalar; 5] = [Scalar::I32, Scalar::I64, Scalar::F32, Scalar::F64, Scalar::V128];

    fn val_type(self) -> wasm_encoder::ValType {
        match self {
            Scalar::I32 => wasm_encoder::ValType::I32,
            Scalar::I64 => wasm_encoder::ValType::I64,
            Scalar::F32 => wasm_encoder::ValType::F32,
            Scalar::F64 => wasm_encoder::ValType::F64,
            Scalar::V128 => wasm_encoder::ValType::V128,
        }
    }

    fn of(ty: wasmparser::ValType) -> Option<Scalar> {
        Some(match ty {
            wasmparser::ValType::I32 => Scalar::I32,
            wasmparser::ValType::I64 => Scalar::I64,
            wasmparser::ValType::F32 => Scalar::F32,
            wasmparser::ValType::F64 => Scalar::F64,
            wasmparser::ValType::V128 => Scalar::V128,
            wasmparser::ValType::Ref(_) => return None,
        })
    }
}

/// The store an operator performs: the stored value's type, the bytes written, the memarg.
fn store_of(op: &Operator<'_>) -> Option<(Scalar, u32, wasmparser::MemArg)> {
    use Scalar::*;
    Some(match *op {
        Operator::I32Store { memarg } => (I32, 4, memarg),
        Operator::I64Store { memarg } => (I64, 8, memarg),
        Operator::F32Store { memarg } => (F32, 4, memarg),
        Operator::F64Store { memarg } => (F64, 8, memarg),
        Operator::I32Store8 { memarg } => (I32, 1, memarg),
        Operator::I32Store16 { memarg } => (I32, 2, memarg),
        Operator::I64Store8 { memarg } => (I64, 1, memarg),
        Operator::I64Store16 { memarg } => (I64, 2, memarg),
        Operator::I64Store32 { memarg } => (I64, 4, memarg),
        Operator::V128Store { memarg } => (V128, 16, memarg),
        Operator::V128Store8Lane { memarg, .. } => (V128, 1, memarg),
        Operator::V128Store16Lane { memarg, .. } => (V128, 2, memarg),
        Operator::V128Store32Lane { memarg, .. } => (V128, 4, memarg),
        Operator::V128Store64Lane { memarg, .. } => (V128, 8, memarg),
        _ => return None,
    })
}

/// An operator whose writes the log cannot undo.
fn unsupported(op: &Operator<'_>) -> Option<&'static str> {
    match op {
        Operator::MemoryFill { .. } => Some("memory.fill"),
        Operator::MemoryCopy { .. } => Some("memory.copy"),
        Operator::MemoryInit { .. } => Some("memory.init"),
        // A table the graft changes would keep an aborted call's entries: none may change.
        Operator::TableSet { .. } => Some("table.set"),
        Operator::TableGrow { .. } => Some("table.grow"),
        Operator::TableFill { .. } => Some("table.fill"),
        Operator::TableCopy { .. } => Some("table.copy"),
        Operator::TableInit { .. } => Some("table.init"),
        _ => None,
    }
}

/// The scratch locals added to one function: the address, and one per stored value type.
struct Scratch {
    addr: u32,
    values: [u32; 5],
}

impl Scratch {
    fn value(&self, ty: Scalar) -> u32 {
        self.values[ty as usize]
    }
}

/// The re-encoder doing the rewrite.
struct Instrumenter<'s> {
    survey: &'s Survey,
    /// The next defined function's position in `survey.func_types`.
    next_func: usize,
    /// Index of the log memory.
    log_memory: u32,
    /// Index of the cursor global.
    cursor: u32,
    memory_done: bool,
    global_done: bool,
    export_done: bool,
}

/// A section's position in the order of a module's sections.
fn rank(id: SectionId) -> u8 {
    match id {
        SectionId::Custom => 0,
        SectionId::Type => 1,
        SectionId::Import => 2,
        SectionId::Function => 3,
        SectionId::Table => 4,
        SectionId::Memory => 5,
        SectionId::Tag => 6,
        SectionId::Global => 7,
        SectionId::Export => 8,
        SectionId::Start => 9,
        SectionId::Element => 10,
        SectionId::DataCount => 11,
        SectionId::Code => 12,
        SectionId::Data => 13,
    }
}

type RResult<T> = Result<T, reencode::Error<InstrumentError>>;

impl Instrumenter<'_> {
    fn log_arg(&self, offset: u64, align: u32) -> MemArg {
        MemArg {
            offset,
            align,
            memory_index: self.log_memory,
        }
    }

    fn add_memory(&mut self, memories: &mut MemorySection) {
        memories.memory(MemoryType {
            minimum: LOG_INITIAL_PAGES,
            maximum: Some(LOG_MAX_PAGES),
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        self.memory_done = true;
    }

    fn add_global(&mut self, globals: &mut GlobalSection) {
        let ty = GlobalType {
            val_type: wasm_encoder::ValType::I32,
            mutable: true,
            shared: false,
        };
        globals.global(ty, &ConstExpr::i32_const(0));
        self.global_done = true;
    }

    fn add_exports(&mut self, exports: &mut ExportSection) {
        exports.export(LOG_EXPORT, ExportKind::Memory, self.log_memory);
        exports.export(CURSOR_EXPORT, ExportKind::Global, self.cursor);
        if self.survey.memories == 1 {
            exports.export(MEMORY_EXPORT, ExportKind::Memory, 0);
        }
        for (index, g) in self.survey.globals.iter().enumerate() {
            if g.mutable && Scalar::of(g.content_type).is_some() {
                exports.export(
                    &format!("{GLOBAL_EXPORT_PREFIX}{index}"),
                    ExportKind::Global,
                    index as u32,
                );
            }
        }
        self.export_done = true;
    }

    /// Appends the check that the log has room for one more record, growing it if not.
    fn reserve(&self, f: &mut Function) {
        // cursor > size_in_bytes - RECORD_BYTES (the log has at least one page).
        f.instruction(&Instruction::GlobalGet(self.cursor));
        f.instruction(&Instruction::MemorySize(self.log_memory));
        f.instruction(&Instruction::I32Const(16));
        f.instruction(&Instruction::I32Shl);
        f.instruction(&Instruction::I32Const(RECORD_BYTES as i32));
        f.instruction(&Instruction::I32Sub);
        f.instruction(&Instruction::I32GtU);
        f.instruction(&Instruction::If(wasm_encoder::BlockType::Empty));
        f.instruction(&Instruction::Call(self.survey.grow_function()));
        f.instruction(&Instruction::End);
    }

    /// Appends the cursor bump that ends a record.
    fn bump(&self, f: &mut Function) {
        f.instruction(&Instruction::GlobalGet(self.cursor));
        f.instruction(&Instruction::I32Const(RECORD_BYTES as i32));
        f.instruction(&Instruction::I32Add);
        f.instruction(&Instruction::GlobalSet(self.cursor));
    }

    /// Appends the logging of a store's old bytes, leaving its operands back on the stack.
    fn log_store(
        &self,
        f: &mut Function,
        scratch: &Scratch,
        ty: Scalar,
        width: u32,
        memarg: wasmparser::MemArg,
    ) -> RResult<()> {
        let offset = u32::try_from(memarg.offset)
            .map_err(|_| reencode::Error::UserError(InstrumentError::Unsupported("a 64-bit offset")))?;
        f.instruction(&Instruction::LocalSet(scratch.value(ty)));
        f.instruction(&Instruction::LocalSet(scratch.addr));
        self.reserve(f);
        // The old bytes, loaded with the store's own offset and width: a store that would trap
        // traps here, before anything is logged.
        f.instruction(&Instruction::GlobalGet(self.cursor));
        f.instruction(&Instruction::LocalGet(scratch.addr));
        let at = MemArg {
            offset: memarg.offset,
            align: 0,
            memory_index: 0,
        };
        f.instruction(&match width {
            1 => Instruction::I64Load8U(at),
            2 => Instruction::I64Load16U(at),
            4 => Instruction::I64Load32U(at),
            8 => Instruction::I64Load(at),
            _ => Instruction::V128Load(at),
        });
        f.instruction(&if width == 16 {
            Instruction::V128Store(self.log_arg(0, 3))
        } else {
            Instruction::I64Store(self.log_arg(0, 3))
        });
        // The effective address (cannot wrap: the load above did not trap).
        f.instruction(&Instruction::GlobalGet(self.cursor));
        f.instruction(&Instruction::LocalGet(scratch.addr));
        f.instruction(&Instruction::I32Const(offset as i32));
        f.instruction(&Instruction::I32Add);
        f.instruction(&Instruction::I32Store(self.log_arg(ADDR_AT, 2)));
        // The kind, last: it ends the record, so a full log traps here.
        f.instruction(&Instruction::GlobalGet(self.cursor));
        f.instruction(&Instruction::I32Const(width as i32));
        f.instruction(&Instruction::I32Store(self.log_arg(KIND_AT, 2)));
        self.bump(f);
        f.instruction(&Instruction::LocalGet(scratch.addr));
        f.instruction(&Instruction::LocalGet(scratch.value(ty)));
        Ok(())
    }

    /// The type of a global a function sets: refused if its value could not be logged.
    fn settable_global(&self, index: u32) -> RResult<Scalar> {
        self.survey
            .globals
            .get(index as usize)
            .and_then(|g| Scalar::of(g.content_type))
            .ok_or(reencode::Error::UserError(InstrumentError::Unsupported(
                "a mutable global of reference type",
            )))
    }

    /// Appends the logging of a global's value (stack-neutral).
    fn log_global(&self, f: &mut Function, index: u32) -> RResult<()> {
        let ty = self.settable_global(index)?;
        self.reserve(f);
        f.instruction(&Instruction::GlobalGet(self.cursor));
        f.instruction(&Instruction::GlobalGet(index));
        let (store, code) = match ty {
            Scalar::I32 => (Instruction::I32Store(self.log_arg(0, 2)), KIND_I32),
            Scalar::I64 => (Instruction::I64Store(self.log_arg(0, 3)), KIND_I64),
            Scalar::F32 => (Instruction::F32Store(self.log_arg(0, 2)), KIND_F32),
            Scalar::F64 => (Instruction::F64Store(self.log_arg(0, 3)), KIND_F64),
            Scalar::V128 => (Instruction::V128Store(self.log_arg(0, 3)), KIND_V128),
        };
        f.instruction(&store);
        f.instruction(&Instruction::GlobalGet(self.cursor));
        f.instruction(&Instruction::I32Const(index as i32));
        f.instruction(&Instruction::I32Store(self.log_arg(ADDR_AT, 2)));
        f.instruction(&Instruction::GlobalGet(self.cursor));
        f.instruction(&Instruction::I32Const((GLOBAL_FLAG | code) as i32));
        f.instruction(&Instruction::I32Store(self.log_arg(KIND_AT, 2)));
        self.bump(f);
        Ok(())
    }
}

impl Reencode for Instrumenter<'_> {
    type Error = InstrumentError;

    fn parse_memory_section(
        &mut self,
        memories: &mut MemorySection,
        section: wasmparser::MemorySectionReader<'_>,
    ) -> RResult<()> {
        reencode::utils::parse_memory_section(self, memories, section)?;
        self.add_memory(memories);
        Ok(())
    }

    fn parse_global_section(
        &mut self,
        globals: &mut GlobalSection,
        section: wasmparser::GlobalSectionReader<'_>,
    ) -> RResult<()> {
        reencode::utils::parse_global_section(self, globals, section)?;
        self.add_global(globals);
        Ok(())
    }

    fn parse_export_section(
        &mut self,
        exports: &mut ExportSection,
        section: wasmparser::ExportSectionReader<'_>,
    ) -> RResult<()> {
        reencode::utils::parse_export_section(self, exports, section)?;
        self.add_exports(exports);
        Ok(())
    }

    fn intersperse_section_hook(
        &mut self,
        module: &mut wasm_encoder::Module,
        _after: Option<SectionId>,
        before: Option<SectionId>,
    ) -> RResult<()> {
        // A section the module lacks is added just before the first section that follows it.
        let past = |id: SectionId| before.is_none_or(|b| rank(b) > rank(id));
        if !self.memory_done && past(SectionId::Memory) {
            let mut memories = MemorySection::new();
            self.add_memory(&mut memories);
            module.section(&memories);
        }
        if !self.global_done && past(SectionId::Global) {
            let mut globals = GlobalSection::new();
            self.add_global(&mut globals);
            module.section(&globals);
        }
        if !self.export_done && past(SectionId::Export) {
            let mut exports = ExportSection::new();
            self.add_exports(&mut exports);
            module.section(&exports);
        }
        Ok(())
    }

    fn parse_type_section(
        &mut self,
        types: &mut wasm_encoder::TypeSection,
        section: wasmparser::TypeSectionReader<'_>,
    ) -> RResult<()> {
        reencode::utils::parse_type_section(self, types, section)?;
        // The grow function's type, `[] -> []`, after the module's own.
        types.ty().function([], []);
        Ok(())
    }

    fn parse_function_section(
        &mut self,
        functions: &mut wasm_encoder::FunctionSection,
        section: wasmparser::FunctionSectionReader<'_>,
    ) -> RResult<()> {
        reencode::utils::parse_function_section(self, functions, section)?;
        // The entry wrappers and the grow function, after every defined function: no index
        // changes.
        for &func in &self.survey.exported_funcs {
            functions.function(self.survey.defined_type(func).ok_or_else(no_type)?);
        }
        functions.function(self.survey.types);
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        code: &mut CodeSection,
        section: wasmparser::CodeSectionReader<'_>,
    ) -> RResult<()> {
        reencode::utils::parse_code_section(self, code, section)?;
        for &func in &self.survey.exported_funcs {
            let ty = self.survey.defined_type(func).ok_or_else(no_type)?;
            let params = self.survey.type_params.get(ty as usize).copied().ok_or_else(no_type)?;
            let mut f = Function::new([]);
            f.instruction(&Instruction::I32Const(0));
            f.instruction(&Instruction::GlobalSet(self.cursor));
            for (index, g) in self.survey.globals.iter().enumerate() {
                if g.mutable && Scalar::of(g.content_type).is_some() {
                    self.log_global(&mut f, index as u32)?;
                }
            }
            for p in 0..params {
                f.instruction(&Instruction::LocalGet(p));
            }
            f.instruction(&Instruction::Call(func));
            f.instruction(&Instruction::End);
            code.function(&f);
        }
        // The grow function: doubles the log, or traps if it cannot.
        let mut f = Function::new([]);
        f.instruction(&Instruction::MemorySize(self.log_memory));
        f.instruction(&Instruction::MemoryGrow(self.log_memory));
        f.instruction(&Instruction::I32Const(-1));
        f.instruction(&Instruction::I32Eq);
        f.instruction(&Instruction::If(wasm_encoder::BlockType::Empty));
        f.instruction(&Instruction::Unreachable);
        f.instruction(&Instruction::End);
        f.instruction(&Instruction::End);
        code.function(&f);
        Ok(())
    }

    fn parse_export(&mut self, exports: &mut ExportSection, export: wasmparser::Export<'_>) -> RResult<()> {
        match self.survey.wrapper_of(export.index) {
            Some(wrapper) if export.kind == wasmparser::ExternalKind::Func => {
                exports.export(export.name, ExportKind::Func, wrapper);
                Ok(())
            }
            _ => reencode::utils::parse_export(self, exports, export),
        }
    }

    fn parse_function_body(&mut self, code: &mut CodeSection, func: wasmparser::FunctionBody<'_>) -> RResult<()> {
        let ty = self.survey.func_types.get(self.next_func).copied();
        self.next_func += 1;
        let params = ty.and_then(|ty| self.survey.type_params.get(ty as usize).copied());
        let params = params.ok_or(reencode::Error::UserError(InstrumentError::Encode(
            "a function body without a function type".into(),
        )))?;

        let mut locals = Vec::new();
        let mut next_local = params;
        for pair in func.get_locals_reader()? {
            let (count, ty) = pair?;
            next_local += count;
            locals.push((count, self.val_type(ty)?));
        }

        // Which scratch locals the function needs.
        let mut needed = [false; 5];
        let mut any_store = false;
        let mut reader = func.get_operators_reader()?;
        while !reader.eof() {
            let op = reader.read()?;
            if let Some(name) = unsupported(&op) {
                return Err(reencode::Error::UserError(InstrumentError::Unsupported(name)));
            }
            if let Some((ty, _, _)) = store_of(&op) {
                needed[ty as usize] = true;
                any_store = true;
            }
        }
        let mut scratch = Scratch {
            addr: u32::MAX,
            values: [u32::MAX; 5],
        };
        if any_store {
            scratch.addr = next_local;
            locals.push((1, wasm_encoder::ValType::I32));
            next_local += 1;
            for ty in Scalar::ALL {
                if needed[ty as usize] {
                    scratch.values[ty as usize] = next_local;
                    locals.push((1, ty.val_type()));
                    next_local += 1;
                }
            }
        }

        let mut f = Function::new(locals);
        let mut reader = func.get_operators_reader()?;
        while !reader.eof() {
            let op = reader.read()?;
            if let Some((ty, width, memarg)) = store_of(&op) {
                self.log_store(&mut f, &scratch, ty, width, memarg)?;
            } else if let Operator::GlobalSet { global_index } = op {
                // Logged by the entry wrapper; refused here if it could not be.
                self.settable_global(global_index)?;
            }
            f.instruction(&self.instruction(op)?);
        }
        code.function(&f);
        Ok(())
    }
}

fn no_type() -> reencode::Error<InstrumentError> {
    reencode::Error::UserError(InstrumentError::Encode("a function without a function type".into()))
}

/// Rewrites a core WebAssembly module so that its stores and `global.set`s keep an undo log
/// (see the [module documentation](self)).
///
/// The module must be valid (atomics and GC types are refused) and have at most one memory,
/// 32-bit and not shared. The result adds one memory (the log, [`LOG_INITIAL_PAGES`] pages
/// growing to [`LOG_MAX_PAGES`]), a function that grows it, an entry wrapper per exported
/// function, one
/// mutable `i32` global (the cursor) and exports ([`LOG_EXPORT`], [`CURSOR_EXPORT`],
/// [`MEMORY_EXPORT`] for the module's memory, [`GLOBAL_EXPORT_PREFIX`] and the index for each
/// mutable global), all after the module's own: no existing index changes. Running it needs
/// wasmtime's multi-memory support.
pub fn instrument(wasm: &[u8]) -> Result<Vec<u8>, InstrumentError> {
    let survey = Survey::of(wasm)?;
    let mut instrumenter = Instrumenter {
        survey: &survey,
        next_func: 0,
        log_memory: survey.memories,
        cursor: survey.globals.len() as u32,
        memory_done: false,
        global_done: false,
        export_done: false,
    };
    let mut module = wasm_encoder::Module::new();
    instrumenter
        .parse_core_module(&mut module, Parser::new(0), wasm)
        .map_err(|e| match e {
            reencode::Error::UserError(e) => e,
            reencode::Error::ParseError(e) => InstrumentError::Invalid(e),
            other => InstrumentError::Encode(other.to_string()),
        })?;
    Ok(module.finish())
}

/// Replays the first `cursor` bytes of `log` backwards: each memory record's old bytes are
/// written back into `memory`, each global record's old value (little-endian, zero-padded) is
/// handed to `globals` with the global's index. Returns the number of records replayed.
///
/// A global written several times is handed back once per record, the oldest value last. On an
/// error, the records after the malformed one have been replayed already.
pub fn roll_back(
    memory: &mut [u8],
    log: &[u8],
    cursor: u32,
    globals: &mut dyn FnMut(u32, [u8; 16]),
) -> Result<usize, RollbackError> {
    let used = cursor as usize;
    if !cursor.is_multiple_of(RECORD_BYTES) || used > log.len() {
        return Err(RollbackError::BadCursor(cursor));
    }
    let records = used / RECORD_BYTES as usize;
    for index in (0..records).rev() {
        let record = &log[index * RECORD_BYTES as usize..][..RECORD_BYTES as usize];
        let mut old = [0u8; 16];
        old.copy_from_slice(&record[..16]);
        let field = |at: u64| {
            let at = at as usize;
            u32::from_le_bytes(record[at..at + 4].try_into().expect("four bytes"))
        };
        let (addr, kind) = (field(ADDR_AT), field(KIND_AT));
        if kind & GLOBAL_FLAG != 0 {
            globals(addr, old);
            continue;
        }
        let width = match kind {
            1 | 2 | 4 | 8 | 16 => kind as usize,
            _ => return Err(RollbackError::BadRecord(index)),
        };
        let bytes = (addr as usize)
            .checked_add(width)
            .and_then(|end| memory.get_mut(addr as usize..end))
            .ok_or(RollbackError::BadRecord(index))?;
        bytes.copy_from_slice(&old[..width]);
    }
    Ok(records)
}

/// The undo log of one instance of an [`instrument`]ed module, looked up once.
#[derive(Debug, Clone)]
pub struct UndoLog {
    /// The graft's memory (none if the module has none).
    memory: Option<Memory>,
    log: Memory,
    cursor: Global,
    /// The mutable globals by index, sorted.
    globals: Vec<(u32, Global)>,
}

impl UndoLog {
    /// Looks up the log's exports in `instance`.
    pub fn new(mut store: impl AsContextMut, instance: &Instance) -> Result<UndoLog, RollbackError> {
        let log = instance
            .get_memory(&mut store, LOG_EXPORT)
            .ok_or(RollbackError::Missing(LOG_EXPORT))?;
        let cursor = instance
            .get_global(&mut store, CURSOR_EXPORT)
            .ok_or(RollbackError::Missing(CURSOR_EXPORT))?;
        let memory = instance.get_memory(&mut store, MEMORY_EXPORT);
        let mut globals = Vec::new();
        for export in instance.exports(&mut store) {
            let index = export
                .name()
                .strip_prefix(GLOBAL_EXPORT_PREFIX)
                .and_then(|i| i.parse::<u32>().ok());
            if let (Some(index), Some(global)) = (index, export.into_global()) {
                globals.push((index, global));
            }
        }
        globals.sort_by_key(|&(index, _)| index);
        Ok(UndoLog {
            memory,
            log,
            cursor,
            globals,
        })
    }

    /// The graft's memory (index 0), whatever name the module exports it under, if it has one.
    pub fn memory(&self) -> Option<Memory> {
        self.memory
    }

    /// The bytes of the log in use.
    pub fn cursor(&self, mut store: impl AsContextMut) -> u32 {
        self.cursor.get(&mut store).unwrap_i32() as u32
    }

    /// Empties the log: called before a graft call.
    pub fn begin(&self, store: impl AsContextMut) -> Result<(), RollbackError> {
        self.cursor.set(store, Val::I32(0)).map_err(|e| RollbackError::Global {
            index: u32::MAX,
            message: e.to_string(),
        })
    }

    /// Keeps the call's writes: empties the log.
    pub fn commit(&self, store: impl AsContextMut) -> Result<(), RollbackError> {
        self.begin(store)
    }

    /// Copies the records of the log in use to the end of `kept`: for a call made of several
    /// entries (each of which empties the log), whose earlier entries' records must be undone
    /// too if a later one fails ([`UndoLog::roll_back_after`]).
    pub fn keep(&self, mut store: impl AsContextMut, kept: &mut Vec<u8>) -> Result<(), RollbackError> {
        let cursor = self.cursor(&mut store);
        let log = self
            .log
            .data(&store)
            .get(..cursor as usize)
            .ok_or(RollbackError::BadCursor(cursor))?;
        kept.extend_from_slice(log);
        Ok(())
    }

    /// Undoes every write logged since [`UndoLog::begin`] (or since the instance's last entry
    /// was called): the memory's bytes and the mutable globals get their old values back, and
    /// the log is emptied. Returns the number of records replayed.
    pub fn roll_back(&self, store: impl AsContextMut) -> Result<usize, RollbackError> {
        self.roll_back_after(store, &[])
    }

    /// [`UndoLog::roll_back`], then the records `earlier` holds ([`UndoLog::keep`]), newest
    /// first.
    pub fn roll_back_after(&self, mut store: impl AsContextMut, earlier: &[u8]) -> Result<usize, RollbackError> {
        let cursor = self.cursor(&mut store);
        if cursor == 0 && earlier.is_empty() {
            // A call that failed before it wrote anything (the common failure: a bad answer, a
            // budget spent reading): nothing to replay.
            return Ok(0);
        }
        let current = self
            .log
            .data(&store)
            .get(..cursor as usize)
            .ok_or(RollbackError::BadCursor(cursor))?;
        let mut log = Vec::with_capacity(earlier.len() + current.len());
        log.extend_from_slice(earlier);
        log.extend_from_slice(current);
        let used = u32::try_from(log.len()).map_err(|_| RollbackError::BadCursor(u32::MAX))?;
        let mut old_globals = Vec::new();
        let memory: &mut [u8] = match self.memory {
            Some(memory) => memory.data_mut(&mut store),
            None => &mut [],
        };
        let records = roll_back(memory, &log, used, &mut |index, old| old_globals.push((index, old)))?;
        for (index, old) in old_globals {
            self.set_global(&mut store, index, old)?;
        }
        self.begin(&mut store)?;
        Ok(records)
    }

    /// Sets mutable global `index` from its bits (little-endian, zero-padded to 16 bytes).
    fn set_global(&self, mut store: impl AsContextMut, index: u32, bits: [u8; 16]) -> Result<(), RollbackError> {
        let global = self
            .globals
            .binary_search_by_key(&index, |&(i, _)| i)
            .map(|at| self.globals[at].1)
            .map_err(|_| RollbackError::MissingGlobal(index))?;
        let low = |n: usize| -> [u8; 8] { std::array::from_fn(|i| if i < n { bits[i] } else { 0 }) };
        let value = match global.ty(&store).content() {
            ValType::I32 => Val::I32(u64::from_le_bytes(low(4)) as i32),
            ValType::I64 => Val::I64(i64::from_le_bytes(low(8))),
            ValType::F32 => Val::F32(u64::from_le_bytes(low(4)) as u32),
            ValType::F64 => Val::F64(u64::from_le_bytes(low(8))),
            ValType::V128 => Val::V128(u128::from_le_bytes(bits).into()),
            ValType::Ref(_) => return Err(RollbackError::MissingGlobal(index)),
        };
        global.set(&mut store, value).map_err(|e| RollbackError::Global {
            index,
            message: e.to_string(),
        })
    }

    /// The mutable globals' bits, by index (for a recording's image, [`crate::record`]).
    pub fn globals(&self, mut store: impl AsContextMut) -> Vec<(u32, u128)> {
        self.globals
            .iter()
            .map(|&(index, global)| {
                let bits = match global.get(&mut store) {
                    Val::I32(v) => u128::from(v as u32),
                    Val::I64(v) => u128::from(v as u64),
                    Val::F32(v) => u128::from(v),
                    Val::F64(v) => u128::from(v),
                    Val::V128(v) => v.as_u128(),
                    _ => 0,
                };
                (index, bits)
            })
            .collect()
    }

    /// Sets the mutable globals from bits [`UndoLog::globals`] gave.
    pub fn set_globals(&self, mut store: impl AsContextMut, values: &[(u32, u128)]) -> Result<(), RollbackError> {
        values
            .iter()
            .try_for_each(|&(index, bits)| self.set_global(&mut store, index, bits.to_le_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use wasmtime::{Config, Engine, Linker, Module, Store, Trap};

    fn engine() -> Engine {
        let mut config = Config::new();
        config.wasm_multi_memory(true);
        Engine::new(&config).unwrap()
    }

    /// Instruments `wat`, instantiates it and looks up its log.
    fn instance(engine: &Engine, wat: &str) -> (Store<()>, Instance, UndoLog) {
        let wasm = instrument(&wat::parse_str(wat).unwrap()).unwrap();
        let module = Module::new(engine, &wasm).unwrap();
        let mut store = Store::new(engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let undo = UndoLog::new(&mut store, &instance).unwrap();
        (store, instance, undo)
    }

    fn memory(store: &mut Store<()>, instance: &Instance) -> Vec<u8> {
        instance.get_memory(&mut *store, "mem").unwrap().data(&*store).to_vec()
    }

    /// The bits of the exported globals `names`.
    fn globals(store: &mut Store<()>, instance: &Instance, names: &[&str]) -> Vec<u128> {
        names
            .iter()
            .map(
                |name| match instance.get_global(&mut *store, name).unwrap().get(&mut *store) {
                    Val::I32(v) => v as u32 as u128,
                    Val::I64(v) => v as u64 as u128,
                    Val::F32(v) => v as u128,
                    Val::F64(v) => v as u128,
                    Val::V128(v) => v.as_u128(),
                    other => panic!("unexpected global {other:?}"),
                },
            )
            .collect()
    }

    fn is_trap(err: &wasmtime::Error, trap: Trap) -> bool {
        err.downcast_ref::<Trap>() == Some(&trap)
    }

    const WRITER: &str = r#"
        (module
          (memory (export "mem") 1)
          (global $g (export "g") (mut i32) (i32.const 7))
          (global $h (export "h") (mut i64) (i64.const -1))
          (global $f (export "f") (mut f32) (f32.const 0.5))
          (global $d (export "d") (mut f64) (f64.const 1.5))
          (global $v (export "v") (mut v128) (v128.const i32x4 1 2 3 4))
          (global $k (export "k") i32 (i32.const 3))
          (data (i32.const 0) "abcdefghijklmnopqrstuvwxyz0123456789")
          (func (export "write") (param $trap i32)
            (i32.store (i32.const 1) (i32.const 0x11223344))
            (i64.store offset=3 (i32.const 10) (i64.const 0x0102030405060708))
            (i64.store8 offset=100 (i32.const 1) (i64.const 0xff))
            (i32.store16 (i32.const 65534) (i32.const 0xbeef))
            (i32.store8 (i32.const 7) (i32.const 0x7f))
            (i64.store16 offset=1 (i32.const 40) (i64.const 0x1234))
            (f32.store (i32.const 201) (f32.const 3.25))
            (f64.store offset=5 (i32.const 300) (f64.const -2.5))
            (i64.store32 (i32.const 2) (i64.const 0xdeadbeef))
            (v128.store offset=1 (i32.const 400) (v128.const i64x2 -1 -2))
            (v128.store8_lane 4 (i32.const 500) (v128.const i32x4 0x11 0x22 0x33 0x44))
            (v128.store64_lane offset=2 1 (i32.const 601) (v128.const i64x2 5 6))
            (global.set $g (i32.const 99))
            (global.set $g (i32.const 100))
            (global.set $h (i64.const 5))
            (global.set $f (f32.const -0.0))
            (global.set $d (f64.const 0.0))
            (global.set $v (v128.const i32x4 0 0 0 0))
            (if (local.get $trap) (then unreachable))))
    "#;
    const WRITER_GLOBALS: [&str; 6] = ["g", "h", "f", "d", "v", "k"];

    #[test]
    fn undo_log_abort_restores_memory_and_globals() {
        let engine = engine();
        let (mut store, instance, undo) = instance(&engine, WRITER);
        let write = instance.get_typed_func::<i32, ()>(&mut store, "write").unwrap();
        let memory_before = memory(&mut store, &instance);
        let globals_before = globals(&mut store, &instance, &WRITER_GLOBALS);

        undo.begin(&mut store).unwrap();
        let err = write.call(&mut store, 1).unwrap_err();
        assert!(is_trap(&err, Trap::UnreachableCodeReached), "{err:?}");
        assert_ne!(memory(&mut store, &instance), memory_before);
        // Twelve stores; and the five mutable globals, logged as the call began (undo.begin
        // only empties the log: this call goes through the export's wrapper).
        assert_eq!(undo.cursor(&mut store), 17 * RECORD_BYTES);

        assert_eq!(undo.roll_back(&mut store).unwrap(), 17);
        assert_eq!(undo.cursor(&mut store), 0);
        assert_eq!(memory(&mut store, &instance), memory_before);
        assert_eq!(globals(&mut store, &instance, &WRITER_GLOBALS), globals_before);

        // The instance goes on working, and a second abort is undone as well.
        undo.begin(&mut store).unwrap();
        write.call(&mut store, 1).unwrap_err();
        undo.roll_back(&mut store).unwrap();
        assert_eq!(memory(&mut store, &instance), memory_before);
        assert_eq!(globals(&mut store, &instance, &WRITER_GLOBALS), globals_before);
    }

    #[test]
    fn undo_log_logs_the_globals_again_in_each_call() {
        let engine = engine();
        let (mut store, instance, undo) = instance(
            &engine,
            r#"(module
                 (global $g (export "g") (mut i32) (i32.const 1))
                 (func (export "set") (param $v i32)
                   (global.set $g (local.get $v))
                   (global.set $g (local.get $v))
                   (if (i32.lt_s (local.get $v) (i32.const 0)) (then unreachable))))"#,
        );
        let set = instance.get_typed_func::<i32, ()>(&mut store, "set").unwrap();
        let g = instance.get_global(&mut store, "g").unwrap();
        for v in [5, 6] {
            set.call(&mut store, v).unwrap();
            undo.commit(&mut store).unwrap();
            set.call(&mut store, -v).unwrap_err();
            assert_eq!(undo.roll_back(&mut store).unwrap(), 1);
            assert_eq!(g.get(&mut store).unwrap_i32(), v);
        }
    }

    #[test]
    fn undo_log_each_exported_entry_starts_an_empty_log() {
        let engine = engine();
        let (mut store, instance, undo) = instance(
            &engine,
            r#"
            (module
              (memory (export "mem") 1)
              (func $one (export "one") (i32.store (i32.const 8) (i32.const 1)))
              (func (export "two") (call $one) (call $one))
              (export "one_again" (func $one)))
            "#,
        );
        let call = |store: &mut Store<()>, name: &str| {
            let f = instance.get_typed_func::<(), ()>(&mut *store, name).unwrap();
            f.call(&mut *store, ()).unwrap();
        };
        // No begin: the entry itself empties what an earlier call left.
        call(&mut store, "two");
        assert_eq!(
            undo.cursor(&mut store),
            2 * RECORD_BYTES,
            "a call inside the graft keeps the log"
        );
        call(&mut store, "one");
        assert_eq!(undo.cursor(&mut store), RECORD_BYTES);
        call(&mut store, "two");
        call(&mut store, "one_again");
        assert_eq!(undo.cursor(&mut store), RECORD_BYTES);
    }

    #[test]
    fn undo_log_commit_keeps_writes() {
        let engine = engine();
        let (mut store, instance, undo) = instance(&engine, WRITER);
        let write = instance.get_typed_func::<i32, ()>(&mut store, "write").unwrap();
        undo.begin(&mut store).unwrap();
        write.call(&mut store, 0).unwrap();
        undo.commit(&mut store).unwrap();
        assert_eq!(undo.cursor(&mut store), 0);

        let after = memory(&mut store, &instance);
        assert_eq!(&after[0..7], &[b'a', 0x44, 0xef, 0xbe, 0xad, 0xde, b'g']);
        assert_eq!(after[7], 0x7f);
        assert_eq!(&after[13..21], &0x0102030405060708u64.to_le_bytes());
        assert_eq!(after[101], 0xff);
        assert_eq!(&after[41..43], &[0x34, 0x12]);
        assert_eq!(&after[65534..], &[0xef, 0xbe]);
        assert_eq!(&after[201..205], &3.25f32.to_le_bytes());
        assert_eq!(&after[305..313], &(-2.5f64).to_le_bytes());
        assert_eq!(&after[401..417], &((-2i128 << 64) | (u64::MAX as i128)).to_le_bytes());
        assert_eq!(after[500], 0x22);
        assert_eq!(&after[603..611], &6u64.to_le_bytes());
        assert_eq!(
            globals(&mut store, &instance, &WRITER_GLOBALS),
            vec![100, 5, (-0.0f32).to_bits() as u128, 0, 0, 3]
        );

        // Nothing is left to undo after a commit.
        assert_eq!(undo.roll_back(&mut store).unwrap(), 0);
        assert_eq!(memory(&mut store, &instance), after);
    }

    #[test]
    fn undo_log_out_of_bounds_store_traps_before_logging() {
        let engine = engine();
        let (mut store, instance, undo) = instance(
            &engine,
            r#"
            (module
              (memory (export "mem") 1)
              (func (export "past_end") (i32.store offset=4 (i32.const 65530) (i32.const 1)))
              (func (export "wraps") (i64.store offset=0xffffffff (i32.const 2) (i64.const 1)))
              (func (export "after_one")
                (i32.store8 (i32.const 9) (i32.const 1))
                (v128.store (i32.const 65521) (v128.const i64x2 0 0))))
            "#,
        );
        let before = memory(&mut store, &instance);
        for name in ["past_end", "wraps", "after_one"] {
            let f = instance.get_typed_func::<(), ()>(&mut store, name).unwrap();
            undo.begin(&mut store).unwrap();
            let err = f.call(&mut store, ()).unwrap_err();
            assert!(is_trap(&err, Trap::MemoryOutOfBounds), "{name}: {err:?}");
            let logged = if name == "after_one" { RECORD_BYTES } else { 0 };
            assert_eq!(undo.cursor(&mut store), logged, "{name}");
            undo.roll_back(&mut store).unwrap();
            assert_eq!(memory(&mut store, &instance), before, "{name}");
        }
    }

    /// Lets memories grow to `max` bytes at most.
    struct Cap {
        max: usize,
    }

    impl wasmtime::ResourceLimiter for Cap {
        fn memory_growing(&mut self, _: usize, desired: usize, _: Option<usize>) -> wasmtime::Result<bool> {
            Ok(desired <= self.max)
        }
        fn table_growing(&mut self, _: usize, _: usize, _: Option<usize>) -> wasmtime::Result<bool> {
            Ok(true)
        }
    }

    #[test]
    fn undo_log_grows_with_the_call_and_traps_when_it_cannot() {
        let engine = engine();
        let wasm = instrument(
            &wat::parse_str(
                r#"
            (module
              (memory (export "mem") 1)
              (data (i32.const 100) "some bytes that are there before")
              (func (export "fill") (param $n i32) (local $i i32)
                (loop $next
                  (i32.store
                    (i32.and (i32.mul (local.get $i) (i32.const 4)) (i32.const 0xfffc))
                    (i32.add (local.get $i) (i32.const 1)))
                  (local.set $i (i32.add (local.get $i) (i32.const 1)))
                  (br_if $next (i32.lt_u (local.get $i) (local.get $n))))))
            "#,
            )
            .unwrap(),
        )
        .unwrap();
        let module = Module::new(&engine, &wasm).unwrap();
        // The graft's page and three of log.
        let mut store = Store::new(&engine, Cap { max: 3 << 16 });
        store.limiter(|c| c as &mut dyn wasmtime::ResourceLimiter);
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let undo = UndoLog::new(&mut store, &instance).unwrap();
        let fill = instance.get_typed_func::<i32, ()>(&mut store, "fill").unwrap();
        let log = instance.get_memory(&mut store, LOG_EXPORT).unwrap();
        let before = instance.get_memory(&mut store, "mem").unwrap().data(&store).to_vec();
        let page_records = (1 << 16) / RECORD_BYTES as i32;

        // More than a page of records: the log doubles.
        fill.call(&mut store, page_records + 10).unwrap();
        assert_eq!(log.size(&store), 2);
        assert_eq!(undo.roll_back(&mut store).unwrap(), page_records as usize + 10);
        assert_eq!(
            instance.get_memory(&mut store, "mem").unwrap().data(&store),
            &before[..]
        );

        // Past what the limiter lets the log grow to: the store that finds no room traps.
        let err = fill.call(&mut store, 2 * page_records + 10).unwrap_err();
        assert!(is_trap(&err, Trap::UnreachableCodeReached), "{err:?}");
        let two_pages = (2 << 16) / RECORD_BYTES * RECORD_BYTES;
        assert_eq!(undo.cursor(&mut store), two_pages, "a full log of two pages");
        undo.roll_back(&mut store).unwrap();
        assert_eq!(
            instance.get_memory(&mut store, "mem").unwrap().data(&store),
            &before[..]
        );
    }

    #[test]
    fn undo_log_instrumented_module_computes_the_same() {
        let wat = r#"
            (module
              (memory (export "mem") 1)
              (global $calls (export "calls") (mut i32) (i32.const 0))
              (func $fib (param $at i32) (param $n i32)
                (local $i i32)
                (i64.store (local.get $at) (i64.const 0))
                (i64.store offset=8 (local.get $at) (i64.const 1))
                (local.set $i (i32.const 2))
                (loop $next
                  (i64.store
                    (i32.add (local.get $at) (i32.shl (local.get $i) (i32.const 3)))
                    (i64.add
                      (i64.load offset=0 (i32.add (local.get $at) (i32.shl (i32.sub (local.get $i) (i32.const 2)) (i32.const 3))))
                      (i64.load offset=0 (i32.add (local.get $at) (i32.shl (i32.sub (local.get $i) (i32.const 1)) (i32.const 3))))))
                  (local.set $i (i32.add (local.get $i) (i32.const 1)))
                  (br_if $next (i32.lt_u (local.get $i) (local.get $n)))))
              (func (export "run") (param $n i32) (result i64)
                (local $i i32) (local $sum i64)
                (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
                (call $fib (i32.const 16) (local.get $n))
                (loop $next
                  (local.set $sum (i64.add (local.get $sum)
                    (i64.load offset=16 (i32.shl (local.get $i) (i32.const 3)))))
                  (i32.store8 offset=4000 (local.get $i) (i32.wrap_i64 (local.get $sum)))
                  (local.set $i (i32.add (local.get $i) (i32.const 1)))
                  (br_if $next (i32.lt_u (local.get $i) (local.get $n))))
                (local.get $sum)))
        "#;
        let engine = engine();
        let original = Module::new(&engine, wat::parse_str(wat).unwrap()).unwrap();
        let mut plain_store = Store::new(&engine, ());
        let plain = Instance::new(&mut plain_store, &original, &[]).unwrap();
        let (mut store, logged, undo) = instance(&engine, wat);
        for n in [2, 10, 60, 90] {
            let a = plain
                .get_typed_func::<i32, i64>(&mut plain_store, "run")
                .unwrap()
                .call(&mut plain_store, n)
                .unwrap();
            undo.begin(&mut store).unwrap();
            let b = logged
                .get_typed_func::<i32, i64>(&mut store, "run")
                .unwrap()
                .call(&mut store, n)
                .unwrap();
            undo.commit(&mut store).unwrap();
            assert_eq!(a, b, "n = {n}");
            assert_eq!(memory(&mut plain_store, &plain), memory(&mut store, &logged));
            assert_eq!(
                globals(&mut plain_store, &plain, &["calls"]),
                globals(&mut store, &logged, &["calls"])
            );
        }
    }

    #[test]
    fn undo_log_imported_memory_and_missing_sections() {
        let engine = engine();
        // A module with no memory, global or export section of its own gets them added.
        let (mut store, instance, undo) = instance(&engine, "(module (func (result i32) i32.const 1))");
        assert_eq!(undo.cursor(&mut store), 0);
        assert!(instance.get_memory(&mut store, LOG_EXPORT).is_some());
        assert_eq!(undo.roll_back(&mut store).unwrap(), 0);

        // An imported memory is logged like a defined one.
        let wat = r#"
            (module
              (import "env" "mem" (memory 1))
              (func (export "w") (i32.store (i32.const 8) (i32.const 5)) unreachable))
        "#;
        let module = Module::new(&engine, instrument(&wat::parse_str(wat).unwrap()).unwrap()).unwrap();
        let mut store = Store::new(&engine, ());
        let mem = Memory::new(&mut store, wasmtime::MemoryType::new(1, None)).unwrap();
        let mut linker = Linker::new(&engine);
        linker.define(&store, "env", "mem", mem).unwrap();
        let instance = linker.instantiate(&mut store, &module).unwrap();
        let undo = UndoLog::new(&mut store, &instance).unwrap();
        mem.data_mut(&mut store)[8] = 42;
        let w = instance.get_typed_func::<(), ()>(&mut store, "w").unwrap();
        undo.begin(&mut store).unwrap();
        w.call(&mut store, ()).unwrap_err();
        assert_eq!(mem.data(&store)[8], 5);
        assert_eq!(undo.roll_back(&mut store).unwrap(), 1);
        assert_eq!(&mem.data(&store)[8..12], &[42, 0, 0, 0]);
    }

    #[test]
    fn undo_log_refuses_what_it_cannot_log() {
        assert!(matches!(instrument(b"not wasm"), Err(InstrumentError::Invalid(_))));
        let parse = |wat: &str| instrument(&wat::parse_str(wat).unwrap());
        assert!(matches!(
            parse("(module (memory 1) (memory 1))"),
            Err(InstrumentError::TooManyMemories(2))
        ));
        assert!(matches!(
            parse(r#"(module (import "e" "m" (memory 1)) (memory 1))"#),
            Err(InstrumentError::TooManyMemories(2))
        ));
        assert!(matches!(
            parse(r#"(module (func (export "__vino_undo_log")))"#),
            Err(InstrumentError::ReservedName(_))
        ));
        assert!(matches!(
            parse("(module (memory 1) (func (memory.fill (i32.const 0) (i32.const 0) (i32.const 1))))"),
            Err(InstrumentError::Unsupported("memory.fill"))
        ));
        assert!(matches!(
            parse("(module (table 1 funcref) (func (table.set (i32.const 0) (ref.null func))))"),
            Err(InstrumentError::Unsupported("table.set"))
        ));
        assert!(matches!(
            parse("(module (memory i64 1))"),
            Err(InstrumentError::Unsupported(_))
        ));
        // An invalid module (a store without a memory) is refused, not rewritten.
        assert!(matches!(
            parse("(module (func (i32.store (i32.const 0) (i32.const 0))))"),
            Err(InstrumentError::Invalid(_))
        ));
    }

    #[test]
    fn undo_log_roll_back_checks_the_log() {
        let mut memory = vec![0u8; 8];
        let mut none = |_: u32, _: [u8; 16]| {};
        assert!(matches!(
            roll_back(&mut memory, &[0; 48], 25, &mut none),
            Err(RollbackError::BadCursor(25))
        ));
        assert!(matches!(
            roll_back(&mut memory, &[0; 24], 48, &mut none),
            Err(RollbackError::BadCursor(48))
        ));
        let mut record = [0u8; 24];
        record[16..20].copy_from_slice(&6u32.to_le_bytes());
        record[20..24].copy_from_slice(&4u32.to_le_bytes());
        assert!(matches!(
            roll_back(&mut memory, &record, 24, &mut none),
            Err(RollbackError::BadRecord(0))
        ));
        record[20..24].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(
            roll_back(&mut memory, &record, 24, &mut none),
            Err(RollbackError::BadRecord(0))
        ));
        record[20..24].copy_from_slice(&2u32.to_le_bytes());
        record[0..2].copy_from_slice(&[9, 8]);
        assert_eq!(roll_back(&mut memory, &record, 24, &mut none).unwrap(), 1);
        assert_eq!(memory, [0, 0, 0, 0, 0, 0, 9, 8]);
    }

    /// One store of a generated sequence: address, offset, width index, value.
    type Op = (u16, u8, u8, u64);

    fn stores_wat(ops: &[Op]) -> String {
        let mut body = String::new();
        for &(addr, offset, width, value) in ops {
            let (op, ty) = [
                ("i32.store8", "i32"),
                ("i64.store16", "i64"),
                ("f32.store", "f32"),
                ("i64.store", "i64"),
                ("v128.store", "v128"),
                ("i64.store32", "i64"),
            ][width as usize];
            let value = match ty {
                "i32" => format!("(i32.const {})", value as u32 as i32),
                "i64" => format!("(i64.const {})", value as i64),
                "f32" => format!("(f32.reinterpret_i32 (i32.const {}))", value as u32 as i32),
                _ => format!("(v128.const i64x2 {} {})", value as i64, !value as i64),
            };
            // Addresses stay low enough that no store reaches past the single page.
            let addr = addr % 65000;
            body.push_str(&format!("({op} offset={offset} (i32.const {addr}) {value})\n"));
        }
        format!(
            r#"(module (memory (export "mem") 1)
                 (data (i32.const 0) "\01\02\03\04\05\06\07\08\09\0a\0b\0c\0d\0e\0f")
                 (data (i32.const 60000) "a few bytes already written")
                 (func (export "run") {body} unreachable))"#
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        #[test]
        fn undo_log_random_stores_are_undone(
            ops in proptest::collection::vec((any::<u16>(), 0u8..32, 0u8..6, any::<u64>()), 1..64),
        ) {
            let engine = engine();
            let (mut store, instance, undo) = instance(&engine, &stores_wat(&ops));
            let before = memory(&mut store, &instance);
            let run = instance.get_typed_func::<(), ()>(&mut store, "run").unwrap();
            undo.begin(&mut store).unwrap();
            prop_assert!(run.call(&mut store, ()).is_err());
            prop_assert_eq!(undo.roll_back(&mut store).unwrap(), ops.len());
            prop_assert!(memory(&mut store, &instance) == before);
        }
    }
}
