//! Compiles the costliest modules the default `ModuleLimits` let through and prints how long each
//! took, to check that no compile a user can ask for runs long: `cargo run --release -p
//! vino-graft --example compile_worst`.
use std::time::Instant;
use vino_graft::{ModuleLimits, Runtime, RuntimeConfig};

fn main() {
    let limits = ModuleLimits::default();
    let rt = Runtime::new(RuntimeConfig::default());
    let funcs = format!("(module{})", " (func)".repeat(limits.max_functions as usize));
    // One body of the largest size: nested blocks to the limit, then straight-line code.
    let depth = limits.max_nesting as usize;
    let mut body = format!("(func (local i32) {}", "(block ".repeat(depth));
    let mut wasm_len = 0;
    while wasm_len < limits.max_body_bytes - 1024 {
        body.push_str(" (local.set 0 (i32.add (local.get 0) (i32.const 7)))");
        wasm_len += 7;
    }
    body.push_str(&")".repeat(depth));
    body.push(')');
    let big_body = format!("(module {body})");
    // Many bodies of the largest size, to the module's byte limit.
    let n = limits.max_bytes / limits.max_body_bytes - 1;
    let many = format!("(module {})", body.repeat(n));
    for (what, wat) in [("max functions", funcs), ("max body", big_body), ("max module", many)] {
        let wasm = wat::parse_str(&wat).unwrap();
        let t = Instant::now();
        let r = rt.compile(&wasm);
        println!(
            "{what}: {} bytes, {:?}, {}",
            wasm.len(),
            t.elapsed(),
            r.map_or_else(|e| e.to_string(), |_| "ok".into())
        );
    }
}
