//! Checking modules against a graftpoint's type without a kernel object, the same checks a load
//! makes, and per-graftpoint budgets.

use std::sync::Arc;
use std::time::{Duration, Instant};
use vino_graft::{
    Access, Build, Callables, GraftPoint, GraftSlot, Interrupt, Invalid, LoadError, Owner, Runtime, RuntimeConfig,
    Signature, WasmType, check_module,
};

/// `test.pick(n: i32) -> i32`, through the argument area, with one graft-callable function.
struct Pick;

impl GraftPoint for Pick {
    const NAME: &'static str = "test.pick";
    const CALLABLE: &'static [&'static str] = &["vino_test_get"];
    const USES_ARG_AREA: bool = true;
    type Env = ();
    type Args<'a> = i32;
    type Output = i32;
    type Params = (i32,);
    type Results = i32;

    fn default_policy(_: &(), _: &i32) -> i32 {
        -1
    }
    fn encode(_: &(), n: &i32, _: &mut [u8]) -> (i32,) {
        (*n,)
    }
    fn decode(_: &(), _: &i32, r: i32, _: &[u8]) -> Result<i32, Invalid> {
        Ok(r)
    }
    fn callables(c: &mut Callables<()>) {
        c.func1("vino_test_get", |_: &(), k: i32| Ok(i64::from(k)));
    }
}

/// `test.spin(i64, i32) -> i64` with a budget of its own, smaller than the runtime's; compiled
/// with deadline checks or, as a codec is, without.
struct SpinAt<const CHECKS: bool>;
type Spin = SpinAt<true>;
type Bulk = SpinAt<false>;

impl<const CHECKS: bool> GraftPoint for SpinAt<CHECKS> {
    const NAME: &'static str = "test.spin";
    const BUDGET: Duration = Duration::from_millis(5);
    const DEADLINE_CHECKS: bool = CHECKS;
    type Env = ();
    type Args<'a> = ();
    type Output = i64;
    type Params = (i64, i32);
    type Results = i64;

    fn default_policy(_: &(), _: &()) -> i64 {
        -1
    }
    fn encode(_: &(), _: &(), _: &mut [u8]) -> (i64, i32) {
        (0, 0)
    }
    fn decode(_: &(), _: &(), r: i64, _: &[u8]) -> Result<i64, Invalid> {
        Ok(r)
    }
}

/// A graftpoint that lists a function it does not define.
struct Liar;

impl GraftPoint for Liar {
    const NAME: &'static str = "test.liar";
    const CALLABLE: &'static [&'static str] = &["vino_nothing"];
    type Env = ();
    type Args<'a> = ();
    type Output = ();
    type Params = ();
    type Results = ();

    fn default_policy(_: &(), _: &()) {}
    fn encode(_: &(), _: &(), _: &mut [u8]) {}
    fn decode(_: &(), _: &(), _: (), _: &[u8]) -> Result<(), Invalid> {
        Ok(())
    }
}

const AREA: &str = r#"(memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))"#;

fn pick(body: &str) -> Vec<u8> {
    format!(r#"(module {body})"#).into_bytes()
}

fn good() -> Vec<u8> {
    pick(&format!(
        r#"(import "vino" "vino_test_get" (func $get (param i32) (result i64)))
           (import "vino" "vino_log" (func (param i32 i32)))
           {AREA}
           (func (export "test_pick") (param i32) (result i32) local.get 0 call $get i32.wrap_i64)
           (func (export "vino_ctl_reset") (result i32) i32.const 0)"#
    ))
}

#[test]
fn signatures_come_from_the_types() {
    let s = Signature::of::<Pick>();
    assert_eq!((s.params, s.results), (&[WasmType::I32][..], &[WasmType::I32][..]));
    assert_eq!(s.to_string(), "(i32) -> i32");
    assert_eq!(Signature::of::<Spin>().to_string(), "(i64, i32) -> i64");
    assert_eq!(Signature::of::<Liar>().to_string(), "() -> ()");
}

#[test]
fn a_good_module_checks_and_says_what_it_is() {
    let rt = Runtime::default();
    let s = check_module::<Pick>(&rt, &good()).unwrap();
    assert_eq!(s.point, "test.pick");
    assert_eq!(s.entry, "test_pick");
    assert_eq!(s.signature, Signature::of::<Pick>());
    assert_eq!(s.imports, ["vino.vino_test_get", "vino.vino_log"]);
    assert_eq!(s.controls, ["reset"]);
    assert!(s.uses_arg_area);
    assert_eq!(s.memory_bytes, 65536);
    assert_eq!(s.hash.len(), 64);
    // And it loads.
    let slot: GraftSlot<Pick> = GraftSlot::new(&rt, Arc::new(()), Access::Privileged, None);
    let info = slot.load(&good(), Owner::process(1)).unwrap();
    assert_eq!(info.hash, s.hash);
    assert_eq!(slot.invoke(&7), 7);
}

#[test]
fn the_checker_refuses_what_a_load_refuses_with_the_same_error() {
    let rt = Runtime::new(RuntimeConfig {
        memory_cap: 1 << 20,
        ..RuntimeConfig::default()
    });
    let entry = r#"(func (export "test_pick") (param i32) (result i32) local.get 0)"#;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            pick(&format!(
                r#"(import "vino" "vino_toy_get" (func (param i32) (result i64))) {AREA} {entry}"#
            )),
            "vino.vino_toy_get",
        ),
        (
            pick(&format!(r#"(import "env" "abort" (func)) {AREA} {entry}"#)),
            "env.abort",
        ),
        (
            pick(&format!(
                r#"(import "vino" "vino_test_get" (func (param i64))) {AREA} {entry}"#
            )),
            "(i64) -> ()",
        ),
        (pick(AREA), "exports nothing of that name"),
        (
            pick(&format!(
                r#"{AREA} (func (export "test_pick") (param i64) (result i32) i32.const 0)"#
            )),
            "(i64) -> i32, not (i32) -> i32",
        ),
        (pick(entry), "exports no `memory`"),
        (
            pick(&format!(r#"(memory (export "memory") 1) {entry}"#)),
            "exports no `vino_args`",
        ),
        (
            pick(&format!(
                r#"(memory (export "memory") 32) (global (export "vino_args") i32 (i32.const 0)) {entry}"#
            )),
            "cap of 1048576",
        ),
        (b"\0asm\x01\0\0\0junk".to_vec(), "not a valid WebAssembly module"),
    ];
    let slot: GraftSlot<Pick> = GraftSlot::new(&rt, Arc::new(()), Access::Privileged, None);
    for (wasm, text) in cases {
        let checked = check_module::<Pick>(&rt, &wasm).unwrap_err();
        assert!(checked.to_string().contains(text), "{checked} (wanted {text})");
        let loaded = slot.load(&wasm, Owner::process(1)).unwrap_err();
        assert_eq!(checked, loaded);
    }
    assert!(matches!(
        check_module::<Pick>(&rt, &pick(&format!(r#"(import "vino" "vino_toy_get" (func)) {AREA} {entry}"#))),
        Err(LoadError::ForbiddenImport { allowed, .. }) if allowed == "vino.vino_now_ns, vino.vino_log, vino.vino_test_get"
    ));
}

#[test]
#[should_panic(expected = "lists [\"vino_nothing\"]")]
fn a_graftpoint_must_define_what_it_lists() {
    let _ = check_module::<Liar>(&Runtime::default(), b"(module)");
}

#[test]
fn an_invocation_gets_the_smaller_of_the_two_budgets() {
    let patient = Runtime::new(RuntimeConfig {
        invocation_budget: Duration::from_secs(30),
        ..RuntimeConfig::default()
    });
    let slot: GraftSlot<Spin> = GraftSlot::new(&patient, Arc::new(()), Access::Privileged, None);
    assert_eq!(slot.budget(), Duration::from_millis(5));
    let spin = br#"(module (func (export "test_spin") (param i64 i32) (result i64) (loop br 0) i64.const 0))"#;
    slot.load(spin, Owner::process(1)).unwrap();
    let started = Instant::now();
    assert_eq!(slot.invoke(&()), -1, "stopped, and the default decided");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(slot.stats().unwrap().last_error.unwrap().contains("budget"));

    let hasty = Runtime::new(RuntimeConfig {
        invocation_budget: Duration::from_millis(2),
        ..RuntimeConfig::default()
    });
    let slot: GraftSlot<Spin> = GraftSlot::new(&hasty, Arc::new(()), Access::Privileged, None);
    assert_eq!(
        slot.budget(),
        Duration::from_millis(2),
        "a runtime may lower every budget"
    );
    let slot: GraftSlot<Pick> = GraftSlot::new(&patient, Arc::new(()), Access::Privileged, None);
    assert_eq!(slot.budget(), vino_graft::DEFAULT_BUDGET);
}

#[test]
fn a_graft_without_deadline_checks_is_compiled_apart_and_still_stopped_by_its_budget() {
    let spin = br#"(module (func (export "test_spin") (param i64 i32) (result i64) (loop br 0) i64.const 0))"#;
    let answer = br#"(module (func (export "test_spin") (param i64 i32) (result i64) i64.const 7))"#;
    for interrupt in [Interrupt::Fuel, Interrupt::Epoch] {
        let rt = Runtime::new(RuntimeConfig {
            interrupt,
            ..RuntimeConfig::default()
        });
        // Fuel bounds a call by itself, so the epoch checks go; in epoch mode they are the budget.
        let apart = interrupt == Interrupt::Fuel;
        let unchecked = Build {
            logged: false,
            deadline_checks: false,
        };
        let compiled = rt.compile_as(answer, None, &|| true, unchecked).unwrap();
        assert!(wasmtime::Engine::same(compiled.module.engine(), rt.engine_for(false)));
        assert_eq!(!wasmtime::Engine::same(compiled.module.engine(), rt.engine()), apart);
        let checked = rt.compile_as(
            answer,
            None,
            &|| true,
            Build {
                deadline_checks: true,
                ..unchecked
            },
        );
        assert!(!checked.unwrap().cached, "built apart, cached apart");

        // The same modules at a graftpoint with the checks and at one without.
        let bulk: GraftSlot<Bulk> = GraftSlot::new(&rt, Arc::new(()), Access::Privileged, None);
        let with: GraftSlot<Spin> = GraftSlot::new(&rt, Arc::new(()), Access::Privileged, None);
        bulk.load(answer, Owner::process(1)).unwrap();
        with.load(answer, Owner::process(1)).unwrap();
        assert_eq!((bulk.invoke(&()), with.invoke(&())), (7, 7));
        bulk.load(spin, Owner::process(1)).unwrap();
        let started = Instant::now();
        assert_eq!(bulk.invoke(&()), -1, "{interrupt:?}: stopped, and the default decided");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        assert!(bulk.stats().unwrap().last_error.unwrap().contains("budget"));
    }
}
