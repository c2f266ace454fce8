//! Measures how much fuel a core burns per millisecond of Wasm of three shapes (arithmetic and
//! memory access; a one-instruction loop; loads that miss the caches), to check
//! `RuntimeConfig::fuel_per_ms`, which must not exceed the slowest: `cargo run --release -p
//! vino-graft --example fuel_rate`.
use std::time::Instant;
use vino_graft::{Interrupt, sandbox_config};
use wasmtime::{Engine, Instance, Module, Store};

fn main() {
    let engine = Engine::new(&sandbox_config(Interrupt::Fuel, 256 << 10)).unwrap();
    let arith = r#"(module (memory 1)
      (func (export "spin") (local i32)
        (loop (local.set 0 (i32.add (local.get 0) (i32.load (i32.and (local.get 0) (i32.const 1020)))))
              (i32.store (i32.const 8) (local.get 0)) (br 0))))"#;
    let tight = r#"(module (func (export "spin") (loop (br 0))))"#;
    // Loads at pseudo-random places in 64 MiB: most miss every cache.
    let misses = r#"(module (memory 1024)
      (func (export "spin") (local i32)
        (loop (local.set 0 (i32.add (i32.mul (local.get 0) (i32.const 1103515245)) (i32.const 12345)))
              (drop (i32.load (i32.and (local.get 0) (i32.const 0x3fffffc)))) (br 0))))"#;
    for (name, wat) in [("arith", arith), ("tight", tight), ("misses", misses)] {
        let module = Module::new(&engine, wat).unwrap();
        println!("{name}");
        for fuel in [1_000_000u64, 10_000_000, 100_000_000] {
            let mut store = Store::new(&engine, ());
            store.set_fuel(fuel).unwrap();
            // Epoch checks are compiled in beside fuel: a deadline far away leaves fuel to end the call.
            store.set_epoch_deadline(u64::MAX / 2);
            let i = Instance::new(&mut store, &module, &[]).unwrap();
            let f = i.get_typed_func::<(), ()>(&mut store, "spin").unwrap();
            let t = Instant::now();
            let _ = f.call(&mut store, ());
            let ms = t.elapsed().as_secs_f64() * 1e3;
            println!("{fuel} fuel: {ms:.2} ms, {:.0} fuel/ms", fuel as f64 / ms);
        }
    }
}
