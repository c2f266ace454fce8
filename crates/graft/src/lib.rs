//! The VINO graft runtime.
//!
//! Kernel subsystems declare their replaceable policies as [`GraftPoint`] types and keep one
//! [`GraftSlot`] per kernel object; [`GraftSlot::invoke`] is the only way they ask for a
//! decision. Untrusted processes bind WebAssembly grafts to those slots ([`GraftSlot::load`],
//! through a [`Namespace`] that checks who may graft what). Each graft is:
//!
//! * validated and compiled by the kernel itself (wasmtime/Cranelift), compiled code cached by
//!   content hash;
//! * confined to its own linear memory, capped in size, with a bounded native stack;
//! * allowed to import only its graftpoint's graft-callable functions (checked at load, or
//!   beforehand from the graftpoint's type alone with [`check_module`]);
//! * run inside a VINO lightweight transaction ([`vino_vlt`]) under a CPU budget (the
//!   graftpoint's [`GraftPoint::BUDGET`], capped by the runtime's), so a trap, a
//!   timeout, a refused kernel call or an invalid result undoes its kernel changes and the
//!   default policy decides instead; a graft that keeps failing is unloaded and its owner told.
//!
//! The same slot can be bound to a native Rust policy ([`GraftSlot::bind_native`]), so every
//! experiment can compare protected and unprotected policies with one switch.

pub mod abi;
pub mod callable;
mod check;
mod clock;
mod deferred;
mod error;
pub mod point;
pub mod record;
mod registry;
pub mod replay;
mod runtime;
mod sandbox;
pub mod shadow;
mod slot;
mod stats;
pub mod undo_log;

pub use callable::{CallError, Callables, change_made};
pub use check::{ModuleSummary, allowed_imports, check_module, declared_functions, precheck, precheck_head};
pub use clock::{ticks, ticks_to_ns};
pub use deferred::Deferred;
pub use error::{GraftError, LoadError};
pub use point::{
    Access, DEFAULT_BUDGET, GraftPoint, Invalid, NativePolicy, Signature, WasmScalar, WasmType, WasmTypes, export_name,
};
pub use registry::{ManagedSlot, Namespace, PointSource, Principal, SlotWrapper};
pub use runtime::{
    Build, Compiled, Interrupt, ModuleLimits, Runtime, RuntimeConfig, code_bytes, sandbox_config,
    unchecked_sandbox_config,
};
pub use sandbox::{ARG_BYTES, CONTROL_PREFIX, Failure, HostState, take_last_call_time};
pub use slot::{GraftEvent, GraftInfo, GraftSlot, Owner, PolicyKind, Shadow, SlotInfo};
pub use stats::GraftStats;
pub use vino_account as account;
pub use vino_vlt as vlt;
