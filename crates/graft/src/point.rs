//! Graftpoints: the typed signature of a replaceable kernel policy.
//!
//! A subsystem declares each of its policy decisions as a type implementing [`GraftPoint`]: the
//! name grafts and processes use, the arguments the kernel passes and the decision it expects,
//! the default implementation, how the arguments reach a Wasm graft and how its answer is read
//! back and checked. The subsystem never touches wasmtime: the runtime does the plumbing.

use crate::callable::Callables;
use std::fmt;
use std::time::Duration;

/// The CPU budget of one invocation of a graftpoint that sets none of its own
/// ([`GraftPoint::BUDGET`]).
///
/// About 100 µs of work: the default is for kernel paths others may wait on (eviction under the
/// cache's lock, placement under the file system's, lock grants), where the kernel would rather
/// decide by default than let one owner's policy hold everyone. Grafts on their own threads
/// (events) set a larger one.
pub const DEFAULT_BUDGET: Duration = Duration::from_micros(100);

/// Who may graft a graftpoint (Small 1998, 3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Access {
    /// A global graftpoint: privileged processes only.
    Privileged,
    /// A graftpoint on an object owned by one process (its address space, a file it created).
    Process(u64),
}

/// A result a policy returned that the kernel cannot use (a victim that is not the process's
/// page, read-ahead past the end of the file). The call falls back to the default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid(pub String);

impl Invalid {
    pub fn new(why: impl Into<String>) -> Self {
        Invalid(why.into())
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The signature of one kind of graftpoint.
pub trait GraftPoint: Send + Sync + 'static {
    /// The name processes and grafts use, `subsystem.function` (`vas.pick_victim`).
    const NAME: &'static str;
    /// The graft-callable functions of this graftpoint (besides the ones every graft may call).
    /// Every name here must be defined by [`GraftPoint::callables`].
    const CALLABLE: &'static [&'static str] = &[];
    /// True if the arguments or the decision pass through the graft's argument area, which the
    /// graft must then export as `vino_args`.
    /// Whether a failed call's writes to the graft's own memory are undone
    /// ([`crate::RuntimeConfig::roll_back_memory`]). A graftpoint whose calls each compute a
    /// fresh answer from their arguments alone, writing much of their memory each time (a
    /// stream codec's chunk, a digest's block), may do without: the kernel throws a failed
    /// call's output away, and logging every write would multiply the data path's cost.
    const ROLL_BACK_MEMORY: bool = true;
    /// Whether a graft here is compiled with the checks that stop it, mid-call, when a
    /// transaction it runs in passes its lock-holding deadline (fuel mode: an epoch check at each
    /// loop head and function entry; [`crate::Runtime::engine_for`]). A graftpoint whose calls
    /// take no kernel lock (no graft-callable function) and are made outside every transaction
    /// that holds one may do without: its calls are bounded by their own budget alone, and
    /// tight loops (a codec's, a digest's) run without a check that costs several percent.
    /// The deadline is still seen when the call returns; debug builds assert that no lock is
    /// held around such a call.
    const DEADLINE_CHECKS: bool = true;
    const USES_ARG_AREA: bool = false;
    /// Bytes of the argument area the graft must export as `vino_args` (when
    /// [`GraftPoint::USES_ARG_AREA`]): 4 KiB unless the graftpoint passes bulk data.
    const ARG_BYTES: usize = crate::sandbox::ARG_BYTES;
    /// True if a graft at this graftpoint may read the kernel's clock (`vino_now_ns`). A
    /// graftpoint whose answers must not depend on when it runs (a stream graft's bytes reach
    /// other users' reads) sets it false, and a module importing the clock is refused at load.
    const CLOCK: bool = true;
    /// The CPU budget of one invocation. The runtime's [`RuntimeConfig::invocation_budget`]
    /// caps it: an invocation gets the smaller of the two.
    ///
    /// [`RuntimeConfig::invocation_budget`]: crate::RuntimeConfig::invocation_budget
    const BUDGET: Duration = DEFAULT_BUDGET;
    /// True if the arguments come in pages ([`GraftPoint::next_page`]): only then does an
    /// invocation look for a request for the next page (the others' paths stay as they were).
    const PAGED: bool = false;
    /// What an invocation does when the graft's instance is busy (its owner is in a control
    /// call, or another kernel thread is in it): `false`, the default decides at once, so no
    /// kernel path waits for an owner's call; `true`, it waits its turn (for grafts whose calls
    /// must each reach the graft, on threads only their owner's work runs on).
    const WAIT_WHEN_BUSY: bool = false;
    /// Whether each call's work is kept for [`crate::take_last_call_time`]: for a graftpoint
    /// whose calls share a thread among principals and are charged to each (`net.congestion`
    /// on the stack's thread). Off, the invocation path does nothing for it.
    const MEASURE_WORK: bool = false;
    /// Whether the default's decisions can be recorded ([`GraftPoint::answer`]).
    const RECORDS_DEFAULT: bool = false;

    /// The kernel state the default, the native policies and the graft-callable functions see.
    type Env: Send + Sync + 'static;
    /// What the kernel passes to the policy.
    type Args<'a>;
    /// The decision the kernel expects.
    type Output;
    /// The Wasm parameters of the graft's entry point: a tuple of `i32`/`i64`.
    type Params: wasmtime::WasmParams + WasmTypes;
    /// The Wasm results of the graft's entry point: `i32`, `i64` or a tuple of them.
    type Results: wasmtime::WasmResults + WasmTypes;

    /// The kernel's own policy: used when nothing is grafted and whenever a graft fails.
    fn default_policy(env: &Self::Env, args: &Self::Args<'_>) -> Self::Output;

    /// Turns the arguments into the entry point's parameters, copying bulk arguments into the
    /// graft's argument area (`area` is empty unless [`GraftPoint::USES_ARG_AREA`]).
    fn encode(env: &Self::Env, args: &Self::Args<'_>, area: &mut [u8]) -> Self::Params;

    /// Reads the graft's decision back and checks it as carefully as a system call checks its
    /// arguments.
    fn decode(
        env: &Self::Env,
        args: &Self::Args<'_>,
        results: Self::Results,
        area: &[u8],
    ) -> Result<Self::Output, Invalid>;

    /// For graftpoints whose arguments come in pages ([`GraftPoint::PAGED`], `vas.pick_victim`'s
    /// candidates): called after each call of the entry point with its results. If they ask for the next page,
    /// copies it into the argument area and returns the next call's parameters: the entry point
    /// runs again within the same invocation (one transaction, one budget, each page charged
    /// [`PAGE_COST`]). `None`: `results` are the decision.
    fn next_page(
        _env: &Self::Env,
        _args: &Self::Args<'_>,
        _results: &Self::Results,
        _area: &mut [u8],
    ) -> Option<Self::Params> {
        None
    }

    /// The default's decision `output` as a graft would have given it: the entry point's
    /// results, with `area` (as [`GraftPoint::encode`] left it) changed as the graft's answer
    /// would change it. It lets the default be recorded ([`crate::record`]) and a candidate be
    /// replayed against it, where [`GraftPoint::RECORDS_DEFAULT`]. `None`: this decision
    /// cannot be put so (it is left out of the recording's answers).
    fn answer(
        _env: &Self::Env,
        _args: &Self::Args<'_>,
        _output: &Self::Output,
        _area: &mut [u8],
    ) -> Option<Self::Results> {
        None
    }

    /// Defines the graft-callable functions named in [`GraftPoint::CALLABLE`].
    fn callables(_callables: &mut Callables<Self::Env>) {}
}

/// What one more page of arguments costs a graft's budget ([`GraftPoint::next_page`]): about
/// the kernel's time to gather and copy one (256 candidates under the cache's lock, 20 ns
/// each), so a graft that asks for page after page runs out of budget as one that computes would,
/// and holds that lock for a few microseconds at a time.
pub const PAGE_COST: Duration = Duration::from_micros(5);

/// The entry point a graft exports for a graftpoint: the name with `.` turned into `_`.
pub fn export_name(point: &str) -> String {
    point.replace('.', "_")
}

/// A trusted policy in native code: the "unprotected" variant of a graft, used to measure what
/// protection costs and by kernel code that needs no sandbox.
pub trait NativePolicy<G: GraftPoint>: Send + Sync {
    fn decide(&self, env: &G::Env, args: &G::Args<'_>) -> Result<G::Output, Invalid>;
}

impl<G, F> NativePolicy<G> for F
where
    G: GraftPoint,
    F: Fn(&G::Env, &G::Args<'_>) -> Result<G::Output, Invalid> + Send + Sync,
{
    fn decide(&self, env: &G::Env, args: &G::Args<'_>) -> Result<G::Output, Invalid> {
        self(env, args)
    }
}

/// A Wasm value type a graft's entry point takes or returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WasmType {
    I32,
    I64,
}

impl WasmType {
    pub fn name(self) -> &'static str {
        match self {
            WasmType::I32 => "i32",
            WasmType::I64 => "i64",
        }
    }

    /// The type of a wasmtime value, if it is one an entry point may use.
    pub fn of(ty: &wasmtime::ValType) -> Option<WasmType> {
        match ty {
            wasmtime::ValType::I32 => Some(WasmType::I32),
            wasmtime::ValType::I64 => Some(WasmType::I64),
            _ => None,
        }
    }
}

impl fmt::Display for WasmType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The Wasm types of an entry point's parameters or results, known from the Rust type that
/// carries them: `i32`, `i64`, `()` or a tuple of `i32`/`i64`.
pub trait WasmTypes {
    const TYPES: &'static [WasmType];
    /// The values, each widened to `i64` (an `i32` sign-extended): how a recording keeps them
    /// ([`crate::record`]).
    fn values(&self) -> Vec<i64>;
}

/// One `i32` or `i64`.
pub trait WasmScalar: Copy {
    const TYPE: WasmType;
    fn widen(self) -> i64;
}

impl WasmScalar for i32 {
    const TYPE: WasmType = WasmType::I32;
    fn widen(self) -> i64 {
        i64::from(self)
    }
}

impl WasmScalar for i64 {
    const TYPE: WasmType = WasmType::I64;
    fn widen(self) -> i64 {
        self
    }
}

impl WasmTypes for i32 {
    const TYPES: &'static [WasmType] = &[WasmType::I32];
    fn values(&self) -> Vec<i64> {
        vec![i64::from(*self)]
    }
}

impl WasmTypes for i64 {
    const TYPES: &'static [WasmType] = &[WasmType::I64];
    fn values(&self) -> Vec<i64> {
        vec![*self]
    }
}

macro_rules! tuple_types {
    ($($t:ident),*) => {
        impl<$($t: WasmScalar),*> WasmTypes for ($($t,)*) {
            const TYPES: &'static [WasmType] = &[$($t::TYPE),*];
            #[allow(non_snake_case)]
            fn values(&self) -> Vec<i64> {
                let ($($t,)*) = *self;
                vec![$($t.widen()),*]
            }
        }
    };
}

tuple_types!();
tuple_types!(A);
tuple_types!(A, B);
tuple_types!(A, B, C);
tuple_types!(A, B, C, D);
tuple_types!(A, B, C, D, E);
tuple_types!(A, B, C, D, E, F);
tuple_types!(A, B, C, D, E, F, G);
tuple_types!(A, B, C, D, E, F, G, H);

/// The Wasm signature of a graftpoint's entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Signature {
    pub params: &'static [WasmType],
    pub results: &'static [WasmType],
}

impl Signature {
    /// The signature graftpoint `G` expects.
    pub const fn of<G: GraftPoint>() -> Signature {
        Signature {
            params: <G::Params as WasmTypes>::TYPES,
            results: <G::Results as WasmTypes>::TYPES,
        }
    }

    /// True if a function of type `ty` has exactly this signature.
    pub fn matches(&self, ty: &wasmtime::FuncType) -> bool {
        types_match(self.params, ty.params()) && types_match(self.results, ty.results())
    }
}

/// True if the value types `got` are exactly `want`.
pub(crate) fn types_match(want: &[WasmType], got: impl ExactSizeIterator<Item = wasmtime::ValType>) -> bool {
    got.len() == want.len() && got.zip(want).all(|(g, w)| WasmType::of(&g) == Some(*w))
}

/// A function type written `(i64, i32, i64) -> i32` (one result bare, none or several in
/// parentheses).
pub(crate) fn func_text<P: fmt::Display, R: fmt::Display>(
    params: impl IntoIterator<Item = P>,
    results: impl IntoIterator<Item = R>,
) -> String {
    let params: Vec<String> = params.into_iter().map(|t| t.to_string()).collect();
    let results: Vec<String> = results.into_iter().map(|t| t.to_string()).collect();
    let results = match results.as_slice() {
        [one] => one.clone(),
        many => format!("({})", many.join(", ")),
    };
    format!("({}) -> {results}", params.join(", "))
}

impl fmt::Display for Signature {
    /// `(i64, i32, i64) -> i32`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&func_text(self.params, self.results))
    }
}
