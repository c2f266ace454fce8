//! The graft loading target: `wasm-smith` makes a valid module for one graftpoint (its entry
//! point with the right signature, and, where the graftpoint passes arguments in memory, the
//! memory and `vino_args` it needs), free to import what every graft may call. The simulator
//! then runs a short workload of three processes with that module bound, by each of them in
//! turn, through the cached path, checking every answer and the whole tree against its model,
//! and that nothing is left charged or referenced once they exit.
//!
//! So a module that loads must not make the kernel crash, leak or answer wrongly, whatever it
//! does (a graft only chooses among valid policies, or the default decides); a module the
//! kernel refuses changes nothing.

use arbitrary::Unstructured;
use std::sync::Arc;
use vino_kernel::graftpoints::Graftpoint;
use vino_sim::{CustomGraft, Report, SimOptions, grafts};

/// Steps of the workload around each module: enough to reach every graftpoint a few times.
const STEPS: usize = 120;

/// Runs one input (see the module documentation); panics if the kernel misbehaved.
pub fn run(data: &[u8]) {
    simulate(data);
}

/// Runs one input and returns what the simulation did (none if the input makes no module).
pub fn simulate(data: &[u8]) -> Option<Report> {
    let mut u = Unstructured::new(data);
    let (point, wasm, seed) = module(&mut u).ok()?;
    let opts = SimOptions {
        steps: STEPS,
        crash: false,
        graft: Some(CustomGraft {
            point: point.name,
            wasm: Arc::new(wasm),
        }),
        ..SimOptions::default()
    };
    match vino_sim::run(seed, &opts) {
        Ok(report) => Some(report),
        Err(failure) => panic!("{failure}"),
    }
}

/// The graftpoint, the module and the workload's seed an input stands for.
pub fn module(u: &mut Unstructured<'_>) -> arbitrary::Result<(&'static Graftpoint, Vec<u8>, u64)> {
    let points = grafts::points();
    let point = *u.choose(&points)?;
    let mut config: wasm_smith::Config = u.arbitrary()?;
    config.exports = Some(exports(point));
    config.available_imports = Some(imports());
    // Proposals the sandbox's engine does not take: a module using one is refused at load,
    // which the protocol target covers; here modules should load.
    config.threads_enabled = false;
    config.shared_everything_threads_enabled = false;
    config.exceptions_enabled = false;
    config.gc_enabled = false;
    config.compact_imports_enabled = false;
    config.custom_descriptors_enabled = false;
    config.custom_page_sizes_enabled = false;
    config.memory64_enabled = false;
    config.wide_arithmetic_enabled = false;
    config.acquire_release_atomics_enabled = false;
    config.multibyte_array_access_enabled = false;
    config.allow_invalid_funcs = false;
    config.reference_types_enabled = false;
    // A graft's memory writes are logged for rollback, which one memory allows (a module with
    // more is refused at load). The exports' module brings the argument area's memory.
    config.max_memories = config.max_memories.min(usize::from(!point.uses_arg_area));
    // Large enough to hit the graft memory limit now and then, small enough to stay quick.
    config.max_memory32_bytes = config.max_memory32_bytes.min(64 << 20);
    config.max_funcs = config.max_funcs.min(64);
    config.max_instructions = config.max_instructions.min(2000);
    let module = wasm_smith::Module::new(config, u)?;
    let mut wasm = module.to_bytes();
    if point.uses_arg_area {
        args_at_zero(&mut wasm);
    }
    let seed = u.arbitrary()?;
    Ok((point, wasm, seed))
}

/// Points the module's `vino_args` at offset 0, if its value is a plain `i32.const` (rewritten
/// in place, in as many bytes): `wasm-smith` picks the value at random, and the kernel refuses
/// an argument area outside the memory, so without this few such modules would load.
fn args_at_zero(wasm: &mut [u8]) {
    if let Some((from, to)) = args_constant(wasm) {
        // Zero as a LEB128 of the same length: continuation bits on all bytes but the last.
        let n = to - from;
        for (i, b) in wasm[from..to].iter_mut().enumerate() {
            *b = if i + 1 < n { 0x80 } else { 0 };
        }
    }
}

/// Where the LEB128 of `vino_args`'s `i32.const` lies, if that is its value.
fn args_constant(wasm: &[u8]) -> Option<(usize, usize)> {
    use wasmparser::{ExternalKind, Operator, Parser, Payload, TypeRef};
    // The export section follows the global section: find the index first.
    let mut imported = 0u32;
    let mut index = None;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.ok()? {
            Payload::ImportSection(imports) => {
                for import in imports.into_imports() {
                    imported += u32::from(matches!(import.ok()?.ty, TypeRef::Global(_)));
                }
            }
            Payload::ExportSection(exports) => {
                for e in exports {
                    let e = e.ok()?;
                    if e.name == "vino_args" && e.kind == ExternalKind::Global {
                        index = Some(e.index);
                    }
                }
            }
            _ => {}
        }
    }
    let wanted = index?.checked_sub(imported)?;
    for payload in Parser::new(0).parse_all(wasm) {
        if let Payload::GlobalSection(globals) = payload.ok()? {
            let global = globals.into_iter().nth(wanted as usize)?.ok()?;
            let mut ops = global.init_expr.get_operators_reader();
            let start = ops.original_position();
            return match (ops.read().ok()?, ops.read().ok()?) {
                // The constant lies between the opcode and the `end`.
                (Operator::I32Const { .. }, Operator::End) => {
                    Some((start as usize + 1, ops.original_position() as usize - 1))
                }
                _ => None,
            };
        }
    }
    None
}

/// A module whose exports the generated one must have: the graftpoint's entry point and, if
/// it passes arguments in memory, the memory and the `vino_args` global.
fn exports(g: &Graftpoint) -> Vec<u8> {
    let params: Vec<&str> = g.signature.params.iter().map(|t| t.name()).collect();
    let results: Vec<&str> = g.signature.results.iter().map(|t| t.name()).collect();
    let area = if g.uses_arg_area {
        r#"(memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 0))"#
    } else {
        ""
    };
    let text = format!(
        r#"(module {area} (func (export "{}") (param {}) (result {}) unreachable))"#,
        g.export(),
        params.join(" "),
        results.join(" ")
    );
    wat::parse_str(text).expect("the exports module is valid")
}

/// What every graft may import (a graftpoint's own functions are not offered yet).
fn imports() -> Vec<u8> {
    wat::parse_str(
        r#"(module
            (import "vino" "vino_now_ns" (func (result i64)))
            (import "vino" "vino_log" (func (param i32 i32))))"#,
    )
    .expect("the imports module is valid")
}
