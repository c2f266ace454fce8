//! Graftpoints: the typed signature of a replaceable kernel policy.
//!
//! A subsystem declares each of its policy decisions as a type implementing [`GraftPoint`]: the
//! name grafts and processes use, the arguments the kernel passes and the decision it expects,
//! the default implementation, how the arguments reach a Wasm graft and how its answer is read
//! back and checked. The subsystem never touches wasmtime: the runtime does the plumbing.

use crate::callable::Callables;
use std::fmt;

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
    const USES_ARG_AREA: bool = false;

    /// The kernel state the default, the native policies and the graft-callable functions see.
    type Env: Send + Sync + 'static;
    /// What the kernel passes to the policy.
    type Args<'a>;
    /// The decision the kernel expects.
    type Output;
    /// The Wasm parameters of the graft's entry point: a tuple of `i32`/`i64`.
    type Params: wasmtime::WasmParams;
    /// The Wasm results of the graft's entry point: `i32`, `i64` or a tuple of them.
    type Results: wasmtime::WasmResults;

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

    /// Defines the graft-callable functions named in [`GraftPoint::CALLABLE`].
    fn callables(_callables: &mut Callables<Self::Env>) {}
}

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
