//! The graft runtime on the toy kernel, with grafts written in the Wasm text format (no C
//! toolchain needed): loading, checking, replacing, unloading, control calls, memory, statistics
//! and the failure policy.

use std::sync::{Arc, Mutex};
use vino_graft::{
    Access, GraftError, GraftEvent, GraftSlot, LoadError, Namespace, Owner, PolicyKind, Principal, Runtime,
    RuntimeConfig,
};
use vino_toykernel::{Read, ToyApply, ToyComputeRa, ToyFile, ToyKernel, ToyPickVictim};

fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig::default())
}

fn apply_slot(rt: &Runtime, kernel: &ToyKernel) -> GraftSlot<ToyApply> {
    GraftSlot::new(rt, Arc::new(kernel.clone()), Access::Process(1), None)
}

const DOUBLE: &str = r#"(module (func (export "toy_apply") (param i64) (result i64) local.get 0 i64.const 2 i64.mul))"#;
const PLUS_ONE: &str =
    r#"(module (func (export "toy_apply") (param i64) (result i64) local.get 0 i64.const 1 i64.add))"#;

fn wasm(wat: &str) -> Vec<u8> {
    wat.as_bytes().to_vec()
}

#[test]
fn default_until_loaded_then_graft_then_default_again() {
    let rt = runtime();
    let k = ToyKernel::new(4);
    let slot = apply_slot(&rt, &k);
    assert_eq!(slot.invoke(&21), 21, "default returns its argument");
    assert_eq!(slot.policy_kind(), PolicyKind::Default);
    slot.load(&wasm(DOUBLE), Owner::process(1)).unwrap();
    assert_eq!(slot.invoke(&21), 42);
    assert_eq!(slot.policy_kind(), PolicyKind::Wasm);
    slot.load(&wasm(PLUS_ONE), Owner::process(1)).unwrap();
    assert_eq!(slot.invoke(&21), 22, "replaced");
    assert!(slot.unload());
    assert_eq!(slot.invoke(&21), 21, "default back after unload");
    assert!(!slot.unload(), "nothing left to unload");
}

#[test]
fn second_load_of_same_module_hits_the_cache() {
    let rt = runtime();
    let k = ToyKernel::new(1);
    let slot = apply_slot(&rt, &k);
    let first = slot.load(&wasm(DOUBLE), Owner::process(1)).unwrap();
    let second = slot.load(&wasm(DOUBLE), Owner::process(1)).unwrap();
    assert!(!first.cached);
    assert!(second.cached);
    assert_eq!(first.hash, second.hash);
    assert_eq!(second.compile_ns, 0);
}

#[test]
fn malformed_modules_are_refused_and_the_binding_stays() {
    let rt = runtime();
    let k = ToyKernel::new(1);
    let slot = apply_slot(&rt, &k);
    slot.load(&wasm(DOUBLE), Owner::process(1)).unwrap();
    for junk in [
        &b""[..],
        b"\0asm",
        b"\0asm\x01\0\0\0\xff\xff",
        b"hello, world",
        &[0u8; 64],
    ] {
        let err = slot.load(junk, Owner::process(1)).unwrap_err();
        assert!(matches!(err, LoadError::Malformed(_)), "{err}");
    }
    assert_eq!(slot.invoke(&5), 10, "previous graft still bound");
}

#[test]
fn forbidden_imports_are_refused_with_their_names() {
    let rt = runtime();
    let k = ToyKernel::new(1);
    let slot = apply_slot(&rt, &k);
    let cases = [
        (
            r#"(module (import "vino" "vino_format_disk" (func)) (func (export "toy_apply") (param i64) (result i64) local.get 0))"#,
            "vino.vino_format_disk",
        ),
        (
            r#"(module (import "env" "abort" (func)) (func (export "toy_apply") (param i64) (result i64) local.get 0))"#,
            "env.abort",
        ),
        (
            r#"(module (import "vino" "vino_toy_get" (global i32)) (func (export "toy_apply") (param i64) (result i64) local.get 0))"#,
            "vino.vino_toy_get",
        ),
    ];
    for (wat, name) in cases {
        let err = slot.load(&wasm(wat), Owner::process(1)).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, LoadError::ForbiddenImport { .. }), "{text}");
        assert!(
            text.contains(name) && text.contains("toy.apply") && text.contains("vino.vino_toy_set"),
            "{text}"
        );
    }
    // A module that imports an allowed function with the wrong type is refused at link time.
    let wrong_type = r#"(module (import "vino" "vino_toy_get" (func (param i64))) (func (export "toy_apply") (param i64) (result i64) local.get 0))"#;
    assert!(matches!(
        slot.load(&wasm(wrong_type), Owner::process(1)).unwrap_err(),
        LoadError::Link(_)
    ));
    assert_eq!(slot.policy_kind(), PolicyKind::Default);
}

#[test]
fn missing_or_mistyped_entry_points_are_refused() {
    let rt = runtime();
    let k = ToyKernel::new(1);
    let slot = apply_slot(&rt, &k);
    for wat in [
        r#"(module (func (export "something_else") (param i64) (result i64) local.get 0))"#,
        r#"(module (func (export "toy_apply") (param i32) (result i32) local.get 0))"#,
    ] {
        let err = slot.load(&wasm(wat), Owner::process(1)).unwrap_err();
        assert!(matches!(err, LoadError::MissingEntry { .. }), "{err}");
        assert!(err.to_string().contains("toy_apply"));
    }
}

#[test]
fn memory_beyond_the_cap_is_refused_at_load() {
    let rt = Runtime::new(RuntimeConfig {
        memory_cap: 1 << 20,
        ..RuntimeConfig::default()
    });
    let k = ToyKernel::new(1);
    let slot = apply_slot(&rt, &k);
    let big =
        r#"(module (memory (export "memory") 32) (func (export "toy_apply") (param i64) (result i64) local.get 0))"#;
    assert!(matches!(
        slot.load(&wasm(big), Owner::process(1)).unwrap_err(),
        LoadError::MemoryCap { .. }
    ));
}

#[test]
fn a_start_function_that_never_ends_is_stopped() {
    let rt = Runtime::new(RuntimeConfig {
        control_budget: std::time::Duration::from_millis(20),
        ..RuntimeConfig::default()
    });
    let k = ToyKernel::new(1);
    let slot = apply_slot(&rt, &k);
    let spin =
        r#"(module (func $s (loop br 0)) (start $s) (func (export "toy_apply") (param i64) (result i64) local.get 0))"#;
    assert!(matches!(
        slot.load(&wasm(spin), Owner::process(1)).unwrap_err(),
        LoadError::Start(_)
    ));
}

#[test]
fn graft_changes_kernel_state_through_callables_and_commits() {
    let rt = runtime();
    let k = ToyKernel::new(4);
    let slot = apply_slot(&rt, &k);
    let add = r#"(module
        (import "vino" "vino_toy_get" (func $get (param i32) (result i64)))
        (import "vino" "vino_toy_set" (func $set (param i32 i64)))
        (func (export "toy_apply") (param i64) (result i64)
            (call $set (i32.const 2) (i64.add (call $get (i32.const 2)) (local.get 0)))
            (call $get (i32.const 2))))"#;
    slot.load(&wasm(add), Owner::process(1)).unwrap();
    assert_eq!(slot.invoke(&5), 5);
    assert_eq!(slot.invoke(&7), 12);
    assert_eq!(k.snapshot(), vec![0, 0, 12, 0]);
    assert_eq!(rt.vlt().locked_objects(), 0, "locks released at commit");
}

#[test]
fn invalid_result_aborts_undoes_and_falls_back_to_default() {
    let rt = runtime();
    let k = ToyKernel::new(2);
    let slot = apply_slot(&rt, &k);
    let bad = r#"(module
        (import "vino" "vino_toy_set" (func $set (param i32 i64)))
        (func (export "toy_apply") (param i64) (result i64)
            (call $set (i32.const 0) (i64.const 99))
            (i64.const -1)))"#;
    slot.load(&wasm(bad), Owner::process(1)).unwrap();
    assert_eq!(slot.invoke(&3), 3, "default decided");
    assert_eq!(k.snapshot(), vec![0, 0], "the graft's change was undone");
    let stats = slot.stats().unwrap();
    assert_eq!((stats.invocations, stats.failures), (1, 1));
    assert!(stats.last_error.unwrap().contains("negative result"));
    assert_eq!(rt.vlt().locked_objects(), 0);
}

/// A graft that fails for odd arguments and returns even ones.
const FLAKY: &str = r#"(module (func (export "toy_apply") (param i64) (result i64)
    (if (i64.eqz (i64.rem_u (local.get 0) (i64.const 2))) (then (return (local.get 0))))
    unreachable))"#;

/// Process 1 as an owner, and what it is told.
fn owner_told() -> (Owner, Arc<Mutex<Vec<GraftEvent>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let owner = Owner {
        process: 1,
        notify: Some(Arc::new(move |e: GraftEvent| sink.lock().unwrap().push(e))),
        ..Owner::default()
    };
    (owner, events)
}

#[test]
fn failing_graft_is_unloaded_after_the_limit_and_owner_told() {
    let rt = Runtime::new(RuntimeConfig {
        max_consecutive_failures: 3,
        ..RuntimeConfig::default()
    });
    let k = ToyKernel::new(1);
    let slot = apply_slot(&rt, &k);
    let (owner, events) = owner_told();
    // Fails only for odd arguments: successes in between reset the count.
    slot.load(&wasm(FLAKY), owner).unwrap();
    for arg in [1, 1, 2, 1, 1] {
        assert_eq!(slot.invoke(&arg), arg);
    }
    assert_eq!(
        slot.policy_kind(),
        PolicyKind::Wasm,
        "never three failures in a row yet"
    );
    assert_eq!(slot.invoke(&1), 1);
    assert_eq!(slot.policy_kind(), PolicyKind::Default, "unloaded after three in a row");
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 1);
    let GraftEvent::Unloaded {
        point,
        failures,
        last_error,
    } = &events[0];
    assert_eq!((point.as_str(), *failures), ("toy.apply", 3));
    assert!(last_error.contains("unreachable"), "{last_error}");
}

#[test]
fn a_graft_failing_every_other_call_is_unloaded_by_its_failure_rate() {
    let rt = Runtime::new(RuntimeConfig {
        max_consecutive_failures: 3,
        failure_rate_min: 6,
        ..RuntimeConfig::default()
    });
    let k = ToyKernel::new(1);
    let slot = apply_slot(&rt, &k);
    let (owner, events) = owner_told();
    slot.load(&wasm(FLAKY), owner).unwrap();
    // Never twice in a row: the run rule never fires, the rate rule does at the sixth failure.
    for i in 0..5 {
        slot.invoke(&(2 * i));
        slot.invoke(&1);
    }
    assert_eq!(
        slot.policy_kind(),
        PolicyKind::Wasm,
        "five failures in ten calls: not yet"
    );
    slot.invoke(&2);
    slot.invoke(&1);
    assert_eq!(slot.policy_kind(), PolicyKind::Default, "six failures in eleven calls");
    let events = events.lock().unwrap();
    let GraftEvent::Unloaded {
        failures, last_error, ..
    } = &events[0];
    assert_eq!(*failures, 6);
    // The window opens at its first failure: the success before it is not in it.
    assert!(last_error.contains("6 of its last 11 calls failed"), "{last_error}");
}

#[test]
fn control_calls_that_abort_count_towards_unloading() {
    let rt = Runtime::new(RuntimeConfig {
        max_consecutive_failures: 3,
        ..RuntimeConfig::default()
    });
    let k = ToyKernel::new(1);
    let slot = apply_slot(&rt, &k);
    let trapping = r#"(module
        (func (export "toy_apply") (param i64) (result i64) local.get 0)
        (func (export "vino_ctl_boom") (result i64) unreachable))"#;
    slot.load(&wasm(trapping), Owner::process(1)).unwrap();
    for _ in 0..2 {
        assert!(matches!(
            slot.call_control("boom", &[]),
            Err(GraftError::ControlAborted { .. })
        ));
    }
    assert_eq!(slot.policy_kind(), PolicyKind::Wasm);
    assert!(slot.call_control("boom", &[]).is_err());
    assert_eq!(
        slot.policy_kind(),
        PolicyKind::Default,
        "three aborted control calls in a row"
    );
}

#[test]
fn control_functions_and_memory_writes_reach_the_graft() {
    let rt = runtime();
    let k = ToyKernel::new(1);
    let slot = apply_slot(&rt, &k);
    let stateful = r#"(module
        (memory (export "memory") 1)
        (global (export "knob") i32 (i32.const 64))
        (func (export "vino_ctl_set") (param i64) (result i64) (i64.store (i32.const 64) (local.get 0)) (i64.const 0))
        (func (export "vino_ctl_trap") (param i64) (result i64) unreachable)
        (func (export "toy_apply") (param i64) (result i64) (i64.add (local.get 0) (i64.load (i32.const 64)))))"#;
    slot.load(&wasm(stateful), Owner::process(1)).unwrap();
    assert_eq!(slot.call_control("set", &[100]).unwrap(), 0);
    assert_eq!(slot.invoke(&1), 101);
    let at = slot.symbol_address("knob").unwrap();
    assert_eq!(at, 64);
    slot.write_memory(at, &7i64.to_le_bytes()).unwrap();
    assert_eq!(slot.invoke(&1), 8);
    assert_eq!(slot.read_memory(at, 8).unwrap(), 7i64.to_le_bytes());
    assert!(matches!(
        slot.write_memory(65530, &[0; 16]),
        Err(GraftError::MemoryBounds(_))
    ));
    assert!(matches!(
        slot.write_memory(u32::MAX, &[0; 2]),
        Err(GraftError::MemoryBounds(_))
    ));
    assert!(matches!(
        slot.call_control("nope", &[]),
        Err(GraftError::Control { .. })
    ));
    assert!(matches!(
        slot.call_control("set", &[1, 2]),
        Err(GraftError::Control { .. })
    ));
    assert!(matches!(
        slot.call_control("trap", &[1]),
        Err(GraftError::ControlAborted { .. })
    ));
    assert!(matches!(slot.symbol_address("missing"), Err(GraftError::NoSymbol(_))));
}

#[test]
fn native_policy_binds_to_the_same_slot() {
    let rt = runtime();
    let k = ToyKernel::new(1);
    let slot = apply_slot(&rt, &k);
    let triple = |_: &ToyKernel, a: &i64| Ok(a * 3);
    slot.bind_native(Arc::new(triple), false);
    assert_eq!(slot.invoke(&2), 6);
    assert_eq!(slot.policy_kind(), PolicyKind::Native);
    assert!(matches!(slot.write_memory(0, &[1]), Err(GraftError::NotWasm(_))));
    let bad = |_: &ToyKernel, _: &i64| Err(vino_graft::Invalid::new("no"));
    slot.bind_native(Arc::new(bad), false);
    assert_eq!(slot.invoke(&2), 2, "invalid native result also falls back");
}

#[test]
fn victim_choice_passes_through_the_argument_area() {
    let rt = runtime();
    let k = ToyKernel::new(1);
    let slot: GraftSlot<ToyPickVictim> = GraftSlot::new(&rt, Arc::new(k), Access::Process(1), None);
    // Picks the first candidate whose page number is even.
    let even = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
        (func (export "toy_pick_victim") (param $n i32) (result i32) (local $i i32)
          (block $done (loop $next
            (br_if $done (i32.ge_s (local.get $i) (local.get $n)))
            (if (i64.eqz (i64.rem_u (i64.load (i32.add (i32.const 1024) (i32.shl (local.get $i) (i32.const 3)))) (i64.const 2)))
              (then (return (local.get $i))))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $next)))
          (local.get $n)))"#;
    slot.load(&wasm(even), Owner::process(1)).unwrap();
    assert_eq!(slot.invoke(&&[7u64, 9, 4, 6][..]), 2);
    assert_eq!(
        slot.invoke(&&[1u64, 3][..]),
        0,
        "index n is invalid: default (the LRU page)"
    );
    assert_eq!(slot.stats().unwrap().failures, 1);
    let no_area = r#"(module (func (export "toy_pick_victim") (param i32) (result i32) i32.const 0))"#;
    assert!(matches!(
        slot.load(&wasm(no_area), Owner::process(1)).unwrap_err(),
        LoadError::ArgArea { .. }
    ));
}

#[test]
fn read_ahead_extents_are_checked_against_the_file() {
    let rt = runtime();
    let file = Arc::new(ToyFile::new(64 * 1024));
    let slot: GraftSlot<ToyComputeRa> = GraftSlot::new(&rt, file, Access::Process(1), Some("3"));
    assert_eq!(slot.name(), "toy.compute_ra/3");
    // Asks for `len` bytes at offset+len+delta, delta given in the first i64 of its data.
    let ra = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
        (func (export "toy_compute_ra") (param $off i64) (param $len i32) (param $size i64) (result i32)
          (i64.store (i32.const 1024) (i64.add (i64.add (local.get $off) (i64.extend_i32_u (local.get $len))) (i64.load (i32.const 0))))
          (i64.store (i32.const 1032) (i64.const 4096))
          (i32.const 1)))"#;
    slot.load(&wasm(ra), Owner::process(1)).unwrap();
    let e = slot.invoke(&Read { offset: 0, len: 4096 });
    assert_eq!(e.as_slice(), &[vino_graft::abi::Extent { off: 4096, len: 4096 }]);
    slot.write_memory(0, &(1i64 << 20).to_le_bytes()).unwrap();
    let e = slot.invoke(&Read {
        offset: 8192,
        len: 4096,
    });
    assert!(
        e.as_slice().iter().all(|x| x.off + x.len <= 64 * 1024),
        "default used instead: {e:?}"
    );
    assert_eq!(slot.stats().unwrap().failures, 1);
}

#[test]
fn namespace_checks_permissions() {
    let rt = runtime();
    let k = ToyKernel::new(1);
    let ns = Namespace::new();
    let global: Arc<GraftSlot<ToyApply>> = Arc::new(GraftSlot::new(&rt, Arc::new(k.clone()), Access::Privileged, None));
    let mine: Arc<GraftSlot<ToyPickVictim>> = Arc::new(GraftSlot::new(&rt, Arc::new(k), Access::Process(7), None));
    ns.register(global.clone());
    ns.register(mine.clone());
    let user = Principal {
        process: 8,
        privileged: false,
    };
    let owner = Principal {
        process: 7,
        privileged: false,
    };
    let root = Principal {
        process: 1,
        privileged: true,
    };
    let err = ns
        .load(user, "toy.apply", &wasm(DOUBLE), Owner::process(8))
        .unwrap_err();
    assert!(matches!(err, GraftError::PermissionDenied { .. }), "{err}");
    ns.load(root, "toy.apply", &wasm(DOUBLE), Owner::process(1)).unwrap();
    assert_eq!(global.invoke(&4), 8);
    let even = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
        (func (export "toy_pick_victim") (param i32) (result i32) i32.const 0))"#;
    assert!(matches!(
        ns.load(user, "toy.pick_victim", &wasm(even), Owner::process(8)),
        Err(GraftError::PermissionDenied { .. })
    ));
    assert!(matches!(
        ns.load(root, "toy.pick_victim", &wasm(even), Owner::process(1)),
        Err(GraftError::PermissionDenied { .. })
    ));
    ns.load(owner, "toy.pick_victim", &wasm(even), Owner::process(7))
        .unwrap();
    assert!(matches!(
        ns.load(owner, "no.such", &wasm(even), Owner::process(7)),
        Err(GraftError::UnknownGraftpoint(_))
    ));
    assert_eq!(ns.list().len(), 2);
    assert_eq!(ns.unload_owned_by(7), 1);
    assert_eq!(mine.policy_kind(), PolicyKind::Default);
    assert!(matches!(
        ns.unload(owner, "toy.pick_victim"),
        Err(GraftError::NotLoaded(_))
    ));
}

/// A graft that imports no kernel function runs without a transaction (it has nothing to undo);
/// one that imports a graftpoint's function, or any under `always_transact`, runs in one.
#[test]
fn only_grafts_that_call_the_kernel_run_in_a_transaction() {
    let kernel = std::sync::Arc::new(vino_toykernel::ToyKernel::new(4));
    let null = vino_sdk::build_example("null", &vino_sdk::BuildOptions::default()).unwrap();
    let counter = vino_sdk::build_example("toy_counter", &vino_sdk::BuildOptions::default()).unwrap();
    for (always, null_transacted) in [(false, false), (true, true)] {
        let rt = vino_graft::Runtime::new(vino_graft::RuntimeConfig {
            always_transact: always,
            ..vino_graft::RuntimeConfig::default()
        });
        let slot: vino_graft::GraftSlot<vino_toykernel::ToyApply> =
            vino_graft::GraftSlot::new(&rt, kernel.clone(), vino_graft::Access::Process(1), None);
        assert_eq!(slot.runs_in_transaction(), None);
        slot.load(&null, vino_graft::Owner::process(1)).unwrap();
        assert_eq!(slot.runs_in_transaction(), Some(null_transacted));
        assert_eq!(slot.invoke(&5), 5, "the null graft answers");
        slot.load(&counter, vino_graft::Owner::process(1)).unwrap();
        assert_eq!(slot.runs_in_transaction(), Some(true));
    }
}
