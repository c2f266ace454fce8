//! Measures how much fuel a core burns per millisecond of simple Wasm (loops of arithmetic and
//! memory access), to check `RuntimeConfig::fuel_per_ms`: `cargo run --release -p vino-graft
//! --example fuel_rate`.
use std::time::Instant;
use vino_graft::{Interrupt, sandbox_config};
use wasmtime::{Engine, Instance, Module, Store};

fn main() {
    let engine = Engine::new(&sandbox_config(Interrupt::Fuel, 256 << 10)).unwrap();
    let wat = r#"(module (memory 1)
      (func (export "spin") (local i32)
        (loop (local.set 0 (i32.add (local.get 0) (i32.load (i32.and (local.get 0) (i32.const 1020)))))
              (i32.store (i32.const 8) (local.get 0)) (br 0))))"#;
    let module = Module::new(&engine, wat).unwrap();
    for fuel in [1_000_000u64, 10_000_000, 100_000_000] {
        let mut store = Store::new(&engine, ());
        store.set_fuel(fuel).unwrap();
        let i = Instance::new(&mut store, &module, &[]).unwrap();
        let f = i.get_typed_func::<(), ()>(&mut store, "spin").unwrap();
        let t = Instant::now();
        let _ = f.call(&mut store, ());
        let ms = t.elapsed().as_secs_f64() * 1e3;
        println!("{fuel} fuel: {ms:.2} ms, {:.0} fuel/ms", fuel as f64 / ms);
    }
}
