//! Checking a module against a graftpoint: what a load checks before it instantiates anything.
//!
//! [`GraftSlot::load`](crate::GraftSlot::load) runs these checks on every module before it
//! instantiates it, and [`check_module`] runs the same ones from the graftpoint's type alone,
//! with no kernel object (`vino graft check`): the imports are the graftpoint's graft-callable
//! functions with their types, the entry point is exported with the graftpoint's signature, the
//! argument area is exported if the graftpoint uses it, and the memory the module starts with
//! fits under the cap. What only an instance can tell (a start function that fails, where
//! `vino_args` points) is left to the load.

use crate::callable::Callables;
use crate::error::LoadError;
use crate::point::{GraftPoint, Signature, export_name, func_text, types_match};
use crate::runtime::{Compiled, ModuleLimits, Runtime, RuntimeConfig};
use crate::sandbox::CONTROL_PREFIX;
use wasmtime::{ExternType, FuncType, Module, ValType};

/// Bytes in a Wasm page.
const WASM_PAGE: u64 = 65536;

/// What a module that passed the checks for a graftpoint is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ModuleSummary {
    /// The graftpoint checked against (as named in the load: `file.compute_ra/3`).
    pub point: String,
    /// SHA-256 of the module, hex.
    pub hash: String,
    pub size: usize,
    /// The entry point it exports.
    pub entry: String,
    pub signature: Signature,
    /// What it imports, `vino.<name>`, in the module's order.
    pub imports: Vec<String>,
    /// Its control functions, without the `vino_ctl_` prefix.
    pub controls: Vec<String>,
    /// True if it exports the argument area the graftpoint uses.
    pub uses_arg_area: bool,
    /// Bytes of linear memory it starts with.
    pub memory_bytes: u64,
}

/// Compiles `wasm` (or finds it in `runtime`'s module cache) and checks that it would load at
/// graftpoint `G`, without a kernel object. `Ok` means a load would pass every check but those
/// only an instance can make (a start function that fails, `vino_args` pointing outside memory).
pub fn check_module<G: GraftPoint>(runtime: &Runtime, wasm: &[u8]) -> Result<ModuleSummary, LoadError> {
    // Built as a load at `G` builds it, so a load after the check finds it in the cache.
    let build = crate::Build::of::<G>(runtime.config());
    let compiled = runtime.compile_as(wasm, None, &|| true, build)?;
    let callables = runtime.callables::<G>();
    check::<G>(&compiled, wasm.len(), &callables, G::NAME, runtime.config())
}

/// The names a graft at `G` may import from module `vino`: the common ones and `G`'s own.
pub fn allowed_imports<G: GraftPoint>() -> Vec<&'static str> {
    crate::callable::common_of::<G>()
        .chain(G::CALLABLE.iter().copied())
        .collect()
}

/// The checks of a load, on a compiled module. `point` names the graftpoint in errors.
pub(crate) fn check<G: GraftPoint>(
    compiled: &Compiled,
    size: usize,
    callables: &Callables<G::Env>,
    point: &str,
    config: &RuntimeConfig,
) -> Result<ModuleSummary, LoadError> {
    let module = &compiled.module;
    let imports = check_imports(module, callables, point)?;
    let memory_bytes = check_memory(module, config.memory_cap)?;
    let signature = Signature::of::<G>();
    let entry = export_name(G::NAME);
    check_entry(module, &entry, signature, point)?;
    if G::USES_ARG_AREA {
        check_arg_area(module, point, G::ARG_BYTES, config.memory_cap)?;
    }
    let controls = module
        .exports()
        .filter(|e| matches!(e.ty(), ExternType::Func(_)))
        .filter_map(|e| e.name().strip_prefix(CONTROL_PREFIX).map(str::to_string))
        .collect();
    Ok(ModuleSummary {
        point: point.to_string(),
        hash: hex(&compiled.hash),
        size,
        entry,
        signature,
        imports,
        controls,
        uses_arg_area: G::USES_ARG_AREA,
        memory_bytes,
    })
}

/// Refuses imports outside the graftpoint's allow-list, naming them, and allowed functions
/// imported with another type than the kernel's.
fn check_imports<E: Send + Sync + 'static>(
    module: &Module,
    callables: &Callables<E>,
    point: &str,
) -> Result<Vec<String>, LoadError> {
    let mut imports = Vec::new();
    for import in module.imports() {
        let defined = match import.ty() {
            ExternType::Func(ty) if import.module() == "vino" => callables.get(import.name()).map(|d| (d, ty)),
            _ => None,
        };
        let Some((defined, ty)) = defined else {
            return Err(LoadError::ForbiddenImport {
                module: import.module().to_string(),
                name: import.name().to_string(),
                point: point.to_string(),
                allowed: callables
                    .names()
                    .map(|n| format!("vino.{n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        if !types_match(&defined.params, ty.params()) || !types_match(defined.results, ty.results()) {
            return Err(LoadError::Link(format!(
                "`vino.{}` is imported as {}, but the kernel's has type {}",
                defined.name,
                describe(&ty),
                func_text(&defined.params, defined.results)
            )));
        }
        imports.push(format!("vino.{}", import.name()));
    }
    Ok(imports)
}

/// Refuses a module whose memories start larger than the cap; returns the largest start.
fn check_memory(module: &Module, cap: usize) -> Result<u64, LoadError> {
    let pages = module.resources_required().max_initial_memory_size.unwrap_or(0);
    let bytes = pages.saturating_mul(WASM_PAGE);
    if bytes > cap as u64 {
        return Err(LoadError::MemoryCap { cap });
    }
    Ok(bytes)
}

fn check_entry(module: &Module, entry: &str, signature: Signature, point: &str) -> Result<(), LoadError> {
    let missing = |why: String| LoadError::MissingEntry {
        export: entry.to_string(),
        point: point.to_string(),
        why,
    };
    match module.get_export(entry) {
        None => Err(missing(format!(
            "the module exports nothing of that name (it must be `{entry}{signature}`)"
        ))),
        Some(ExternType::Func(ty)) => {
            if signature.matches(&ty) {
                Ok(())
            } else {
                Err(missing(format!("it has type {}, not {signature}", describe(&ty))))
            }
        }
        Some(_) => Err(missing("it is not a function".into())),
    }
}

/// Checks the argument area's export; its place (only an instance knows it) is checked at load.
/// A memory that could never hold `size` bytes (its declared maximum, or the cap) is refused.
fn check_arg_area(module: &Module, point: &str, size: usize, memory_cap: usize) -> Result<(), LoadError> {
    let err = |why: &str| LoadError::ArgArea {
        point: point.to_string(),
        why: why.to_string(),
    };
    let Some(ExternType::Memory(memory)) = module.get_export("memory") else {
        return Err(err("the graft exports no `memory`"));
    };
    let largest = memory.maximum().map_or(memory_cap as u64, |pages| {
        pages.saturating_mul(WASM_PAGE).min(memory_cap as u64)
    });
    if largest < size as u64 {
        return Err(err(&format!(
            "its `vino_args` must be {size} bytes, and the graft's memory can never be larger than {largest}"
        )));
    }
    match module.get_export("vino_args") {
        Some(ExternType::Global(g)) if matches!(g.content(), ValType::I32) => Ok(()),
        Some(_) => Err(err("`vino_args` is not an i32 global")),
        None => Err(err("the graft exports no `vino_args`")),
    }
}

/// A function type in the notation of [`Signature`]'s `Display`.
fn describe(ty: &FuncType) -> String {
    func_text(ty.params(), ty.results())
}

/// Checks what compiling `wasm` would cost before any compiling: its size, its number of
/// functions, and the size, locals and nesting of each body (see [`ModuleLimits`]). A module that
/// does not even parse is refused here as malformed. Grafts are checked with the runtime's
/// limits; programs that run as VINO processes (`vino-wasi`) with their own, larger ones.
pub fn precheck(wasm: &[u8], limits: &ModuleLimits) -> Result<(), LoadError> {
    use wasmparser::{Operator, Parser, Payload};
    let too_large = |why: String| Err(LoadError::TooLarge(why));
    let malformed = |e: wasmparser::BinaryReaderError| LoadError::Malformed(e.to_string());
    // The section headers alone first: a module with too many functions costs nothing more.
    precheck_head(wasm, wasm.len(), limits)?;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.map_err(malformed)? {
            Payload::CodeSectionStart { count, .. } if count > limits.max_functions => {
                return too_large(format!(
                    "the module defines {count} functions, more than the {} allowed",
                    limits.max_functions
                ));
            }
            Payload::CodeSectionEntry(body) => {
                let len = body.range().len();
                if len > limits.max_body_bytes {
                    return too_large(format!(
                        "a function body is {len} bytes, more than the {} allowed",
                        limits.max_body_bytes
                    ));
                }
                let mut locals: u64 = 0;
                for entry in body.get_locals_reader().map_err(malformed)? {
                    locals += u64::from(entry.map_err(malformed)?.0);
                }
                if locals > u64::from(limits.max_locals) {
                    return too_large(format!(
                        "a function declares {locals} locals, more than the {} allowed",
                        limits.max_locals
                    ));
                }
                let mut depth: u32 = 0;
                let mut ops = body.get_operators_reader().map_err(malformed)?;
                while !ops.eof() {
                    match ops.read().map_err(malformed)? {
                        Operator::Block { .. }
                        | Operator::Loop { .. }
                        | Operator::If { .. }
                        | Operator::TryTable { .. }
                        | Operator::Try { .. } => {
                            depth += 1;
                            if depth > limits.max_nesting {
                                return too_large(format!(
                                    "blocks nest deeper than {} in a function body",
                                    limits.max_nesting
                                ));
                            }
                        }
                        Operator::End => depth = depth.saturating_sub(1),
                        op if !limits.bulk_operators => {
                            if let Some(name) = bulk_operator(&op) {
                                return Err(LoadError::Unmetered(name.into()));
                            }
                        }
                        _ => {}
                    }
                }
            }
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => {
                return Err(LoadError::Malformed("a graft is a core module, not a component".into()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The name of `op` if its cost grows with an operand (see [`ModuleLimits::bulk_operators`]).
fn bulk_operator(op: &wasmparser::Operator<'_>) -> Option<&'static str> {
    use wasmparser::Operator as O;
    Some(match op {
        O::MemoryCopy { .. } => "memory.copy",
        O::MemoryFill { .. } => "memory.fill",
        O::MemoryInit { .. } => "memory.init",
        O::TableCopy { .. } => "table.copy",
        O::TableFill { .. } => "table.fill",
        O::TableInit { .. } => "table.init",
        O::TableGrow { .. } => "table.grow",
        _ => return None,
    })
}

/// The checks that need only the start of a module, for a module still arriving: its declared
/// size, and the number of functions its function (or code) section declares, read from the
/// section's header without parsing any entry. Bytes not yet there are not judged.
pub fn precheck_head(head: &[u8], size: usize, limits: &ModuleLimits) -> Result<(), LoadError> {
    if size > limits.max_bytes {
        return Err(LoadError::TooLarge(format!(
            "the module is {size} bytes, more than the {} allowed",
            limits.max_bytes
        )));
    }
    match declared_functions(head)? {
        Some(count) if count > limits.max_functions => Err(LoadError::TooLarge(format!(
            "the module defines {count} functions, more than the {} allowed",
            limits.max_functions
        ))),
        _ => Ok(()),
    }
}

/// Section ids of the function and code sections.
const FUNCTION_SECTION: u8 = 3;
const CODE_SECTION: u8 = 10;

/// The number of functions a binary module declares, from the header of its function section
/// (or of its code section, if that comes first), skipping every other section by its size.
/// `None` if `head` ends before that header, or it is not a binary module (the text format).
pub fn declared_functions(head: &[u8]) -> Result<Option<u32>, LoadError> {
    const MAGIC: &[u8] = b"\0asm";
    if !head.starts_with(MAGIC) {
        return Ok(None);
    }
    let mut at = 8;
    while at < head.len() {
        let id = head[at];
        let Some((size, n)) = leb_u32(&head[at + 1..])? else {
            return Ok(None);
        };
        let body = at + 1 + n;
        if id == FUNCTION_SECTION || id == CODE_SECTION {
            return Ok(leb_u32(&head[body.min(head.len())..])?.map(|(count, _)| count));
        }
        at = body.saturating_add(size as usize);
    }
    Ok(None)
}

/// An unsigned LEB128 `u32` at the start of `bytes` and its length; `None` if `bytes` ends
/// inside it.
fn leb_u32(bytes: &[u8]) -> Result<Option<(u32, usize)>, LoadError> {
    let mut value: u64 = 0;
    for (i, &b) in bytes.iter().enumerate().take(5) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return u32::try_from(value)
                .map(|v| Some((v, i + 1)))
                .map_err(|_| LoadError::Malformed("a section header's number is over 32 bits".into()));
        }
    }
    if bytes.len() >= 5 {
        return Err(LoadError::Malformed("a section header's number is over 5 bytes".into()));
    }
    Ok(None)
}

/// Bytes as lowercase hex (a module's hash).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module of `n` empty functions, in binary.
    fn empty_functions(n: usize) -> Vec<u8> {
        let wat = format!("(module {})", "(func)".repeat(n));
        wat::parse_str(wat).unwrap()
    }

    #[test]
    fn functions_are_counted_from_the_section_header_alone() {
        let m = empty_functions(300);
        assert_eq!(declared_functions(&m).unwrap(), Some(300));
        // Enough of the module to reach the function section's header is enough.
        // Header (8), the type section (6), the function section's id, size and count (5).
        assert_eq!(m[14], FUNCTION_SECTION);
        let header_end = 19;
        assert_eq!(declared_functions(&m[..header_end]).unwrap(), Some(300));
        assert_eq!(declared_functions(&m[..10]).unwrap(), None);
        assert_eq!(declared_functions(b"(module)").unwrap(), None);
        let limits = ModuleLimits {
            max_functions: 299,
            ..ModuleLimits::default()
        };
        let e = precheck_head(&m[..header_end], m.len(), &limits).unwrap_err();
        assert!(e.to_string().contains("300 functions"), "{e}");
        precheck_head(&m[..10], m.len(), &limits).unwrap();
    }
}
