//! Graft-callable kernel functions (Small 1998, 6.3.3).
//!
//! A graft may call only the functions its graftpoint allows. Each one checks its arguments as a
//! system call does and does its work inside the invocation's transaction: it takes locks on what
//! it reads and changes and logs how to undo its changes (see `vino_vlt::current`). A subsystem
//! defines its functions through [`Callables`], which hides the sandbox; a refusal
//! ([`CallError`]) aborts the calling graft.

use crate::point::{GraftPoint, WasmType};
use crate::sandbox::HostState;
use vino_vlt::VltError;
use wasmtime::{Caller, Linker};

/// Why a graft-callable function refused to go on. The graft's transaction aborts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("bad argument to {function}: {why}")]
    BadArgument { function: &'static str, why: String },
    #[error("{0}")]
    Transaction(#[from] VltError),
    #[error("{0}")]
    Forbidden(String),
}

impl CallError {
    pub fn bad_argument(function: &'static str, why: impl Into<String>) -> Self {
        CallError::BadArgument {
            function,
            why: why.into(),
        }
    }
}

thread_local! {
    /// Changes to kernel state made on this thread by graft-callable functions' commit records.
    static CHANGES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts one change to kernel state made for a graft: a graft-callable function's commit
/// record calls it as it makes its change, and the slot that ran the graft adds the changes made
/// during its call to the graft's statistics ([`crate::GraftStats::changes`]). Counted where the
/// change happens, not where it is asked for, so an aborted call's change, made by mistake,
/// would show.
pub fn change_made() {
    CHANGES.with(|c| c.set(c.get() + 1));
}

/// Changes counted on this thread so far.
pub(crate) fn changes_made() -> u64 {
    CHANGES.with(std::cell::Cell::get)
}

/// Integer types a graft-callable function may take or return.
pub trait WasmInt: wasmtime::WasmTy + wasmtime::WasmRet + Copy + Send + 'static {
    /// Its Wasm type.
    const TYPE: WasmType;
    /// Its bits as the Wasm value, widened to `i64` (for a recording).
    fn widen(self) -> i64;
}
impl WasmInt for i32 {
    const TYPE: WasmType = WasmType::I32;
    fn widen(self) -> i64 {
        i64::from(self)
    }
}
impl WasmInt for i64 {
    const TYPE: WasmType = WasmType::I64;
    fn widen(self) -> i64 {
        self
    }
}
impl WasmInt for u32 {
    const TYPE: WasmType = WasmType::I32;
    fn widen(self) -> i64 {
        i64::from(self as i32)
    }
}
impl WasmInt for u64 {
    const TYPE: WasmType = WasmType::I64;
    fn widen(self) -> i64 {
        self as i64
    }
}

/// What a graft-callable function returns: nothing or one integer.
pub trait CallResult: wasmtime::WasmRet + Send + 'static {
    /// Its Wasm result types.
    const TYPES: &'static [WasmType];
    /// The value, widened (for a recording).
    fn value(&self) -> Option<i64>;
}
impl CallResult for () {
    const TYPES: &'static [WasmType] = &[];
    fn value(&self) -> Option<i64> {
        None
    }
}
impl<T: WasmInt> CallResult for T {
    const TYPES: &'static [WasmType] = &[T::TYPE];
    fn value(&self) -> Option<i64> {
        Some(self.widen())
    }
}

/// Keeps a graft-callable function's call in the graft's recording, if one is running.
fn record<E, R: CallResult>(
    state: &mut HostState<E>,
    name: &str,
    args: impl FnOnce() -> Vec<i64>,
    result: &Result<R, CallError>,
) {
    if let Some(tape) = state.tape.as_deref_mut() {
        let answer = result.as_ref().map(CallResult::value).map_err(ToString::to_string);
        tape.call(name, args(), answer);
    }
}

/// Names every graft may import, whatever its graftpoint (`vino_now_ns` only where the
/// graftpoint allows the clock, [`GraftPoint::CLOCK`]).
pub const COMMON: &[&str] = &["vino_now_ns", "vino_log"];

/// The common names a graft at `G` may import.
pub(crate) fn common_of<G: GraftPoint>() -> impl Iterator<Item = &'static str> {
    COMMON.iter().copied().filter(|&n| G::CLOCK || n != "vino_now_ns")
}

/// Longest message a graft's `vino_log` keeps.
pub const LOG_BYTES: usize = 256;

/// One graft-callable function: its name in module `vino` and its Wasm type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Defined {
    pub(crate) name: &'static str,
    pub(crate) params: Vec<WasmType>,
    pub(crate) results: &'static [WasmType],
}

/// The graft-callable functions of one graftpoint, being defined.
pub struct Callables<E: Send + Sync + 'static> {
    pub(crate) linker: Linker<HostState<E>>,
    pub(crate) defined: Vec<Defined>,
}

fn refused(e: CallError) -> wasmtime::Error {
    wasmtime::Error::new(crate::sandbox::HostAbort::Call(e))
}

macro_rules! define_arity {
    ($method:ident, $($arg:ident : $ty:ident),*) => {
        /// Defines a graft-callable function of this arity.
        pub fn $method<$($ty: WasmInt,)* R: CallResult>(
            &mut self,
            name: &'static str,
            f: impl Fn(&E, $($ty),*) -> Result<R, CallError> + Send + Sync + 'static,
        ) {
            self.linker
                .func_wrap("vino", name, move |mut caller: Caller<'_, HostState<E>>, $($arg: $ty),*| {
                    let result = f(&caller.data().env, $($arg),*);
                    record(caller.data_mut(), name, || vec![$($arg.widen()),*], &result);
                    result.map_err(refused)
                })
                .expect("defining a graft-callable function twice");
            self.defined.push(Defined { name, params: vec![$($ty::TYPE),*], results: R::TYPES });
        }
    };
}

macro_rules! define_mem_arity {
    ($method:ident, $($arg:ident : $ty:ident),*) => {
        /// Defines a graft-callable function of this arity that also reads the graft's linear
        /// memory (empty if the graft exports none), to take a buffer by pointer and length.
        pub fn $method<$($ty: WasmInt,)* R: CallResult>(
            &mut self,
            name: &'static str,
            f: impl Fn(&E, &[u8], $($ty),*) -> Result<R, CallError> + Send + Sync + 'static,
        ) {
            self.linker
                .func_wrap("vino", name, move |mut caller: Caller<'_, HostState<E>>, $($arg: $ty),*| {
                    let memory = caller.get_export("memory").and_then(|e| e.into_memory());
                    let result = match memory {
                        Some(m) => {
                            let (data, state) = m.data_and_store_mut(&mut caller);
                            f(&state.env, data, $($arg),*)
                        }
                        None => f(&caller.data().env, &[], $($arg),*),
                    };
                    record(caller.data_mut(), name, || vec![$($arg.widen()),*], &result);
                    result.map_err(refused)
                })
                .expect("defining a graft-callable function twice");
            self.defined.push(Defined { name, params: vec![$($ty::TYPE),*], results: R::TYPES });
        }
    };
}

impl<E: Send + Sync + 'static> Callables<E> {
    /// The common functions; the clock only if `clock` is given.
    pub(crate) fn new(engine: &wasmtime::Engine, clock: Option<&vino_vlt::SharedClock>) -> Self {
        let mut c = Callables {
            linker: Linker::new(engine),
            defined: Vec::new(),
        };
        c.define_common(clock.cloned());
        c
    }

    /// The graft-callable functions of graftpoint `G`: the common ones, then the ones it defines,
    /// which must be exactly those it lists in [`GraftPoint::CALLABLE`].
    pub(crate) fn of<G: GraftPoint<Env = E>>(engine: &wasmtime::Engine, clock: &vino_vlt::SharedClock) -> Self {
        let mut c = Callables::new(engine, G::CLOCK.then_some(clock));
        let common = c.defined.len();
        G::callables(&mut c);
        let mut defined: Vec<&str> = c.defined[common..].iter().map(|d| d.name).collect();
        let mut listed = G::CALLABLE.to_vec();
        defined.sort_unstable();
        listed.sort_unstable();
        assert_eq!(
            defined,
            listed,
            "graftpoint {} defines graft-callable functions {defined:?} but lists {listed:?}",
            G::NAME
        );
        c
    }

    define_arity!(func0,);
    define_arity!(func1, a: A);
    define_arity!(func2, a: A, b: B);
    define_arity!(func3, a: A, b: B, c: C);
    define_arity!(func4, a: A, b: B, c: C, d: D);
    define_mem_arity!(func1_mem, a: A);
    define_mem_arity!(func2_mem, a: A, b: B);
    define_mem_arity!(func3_mem, a: A, b: B, c: C);
    define_mem_arity!(func4_mem, a: A, b: B, c: C, d: D);

    /// `vino_now_ns` reads the kernel's clock (the runtime's transaction manager's), so a graft
    /// sees the same time as the kernel's deadlines, simulated or not. Without `clock` it is not
    /// defined, so a module importing it is refused as a forbidden import.
    fn define_common(&mut self, clock: Option<vino_vlt::SharedClock>) {
        if let Some(clock) = clock {
            self.func0("vino_now_ns", move |_| Ok(clock.now_ns() as i64));
        }
        self.linker
            .func_wrap(
                "vino",
                "vino_log",
                |mut caller: Caller<'_, HostState<E>>, ptr: i32, len: i32| {
                    let memory = caller.get_export("memory").and_then(|e| e.into_memory());
                    let (start, n) = (ptr as u32 as usize, (len as u32 as usize).min(LOG_BYTES));
                    let text = match memory {
                        None => Err(CallError::bad_argument("vino_log", "the graft has no memory")),
                        Some(memory) => memory
                            .data(&caller)
                            .get(start..start.saturating_add(n))
                            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
                            .ok_or_else(|| CallError::bad_argument("vino_log", "message outside the graft's memory")),
                    };
                    let result = text.map(|text| caller.data().counters.logged(text));
                    record(caller.data_mut(), "vino_log", || vec![ptr.into(), len.into()], &result);
                    result.map_err(refused)
                },
            )
            .expect("vino_log defined once");
        self.defined.push(Defined {
            name: "vino_log",
            params: vec![WasmType::I32, WasmType::I32],
            results: &[],
        });
    }

    /// The function named `name`, if defined.
    pub(crate) fn get(&self, name: &str) -> Option<&Defined> {
        self.defined.iter().find(|d| d.name == name)
    }

    /// The names of every function defined, the common ones first.
    pub(crate) fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.defined.iter().map(|d| d.name)
    }
}
