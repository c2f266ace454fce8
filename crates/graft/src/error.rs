//! Errors of loading and managing grafts. Every one says what was wrong in words a graft writer
//! can act on.

use crate::point::Access;

/// Why a module could not be bound to a graftpoint. Nothing changed: the previous binding stays.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("not a valid WebAssembly module: {0}")]
    Malformed(String),
    #[error("graft imports `{module}.{name}`, which graftpoint `{point}` does not allow (allowed: {allowed})")]
    ForbiddenImport {
        module: String,
        name: String,
        point: String,
        allowed: String,
    },
    #[error("graft does not export `{export}` with the signature graftpoint `{point}` needs: {why}")]
    MissingEntry { export: String, point: String, why: String },
    #[error("graftpoint `{point}` passes arguments through the graft's memory: {why}")]
    ArgArea { point: String, why: String },
    #[error("graft needs more memory than its cap of {cap} bytes")]
    MemoryCap { cap: usize },
    #[error("graft could not be linked: {0}")]
    Link(String),
    #[error("graft failed while starting: {0}")]
    Start(String),
    #[error("cannot read graft file {path}: {why}")]
    Read { path: String, why: String },
    /// The module would cost too much to compile (see `ModuleLimits`).
    #[error("graft refused before compiling: {0}")]
    TooLarge(String),
    /// The module uses an instruction whose cost grows with an operand (`memory.fill`,
    /// `memory.copy`, ...): fuel counts one unit for it, so a budget would not bound its time.
    #[error("graft uses `{0}`, whose cost grows with its length and is not counted against a graft's budget")]
    Unmetered(String),
    /// Too many compiles wait for a turn (EAGAIN).
    #[error("the kernel is busy compiling: {0}")]
    Busy(String),
    /// The client that asked went away before its compile had a turn.
    #[error("the load was abandoned: its client went away")]
    Cancelled,
    /// A limit of the owner's account (EDQUOT, EAGAIN).
    #[error("{0}")]
    Limit(#[from] vino_account::Exceeded),
}

/// Errors of the graft system calls (load, unload, memory, control).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraftError {
    #[error("no graftpoint named `{0}`")]
    UnknownGraftpoint(String),
    #[error("permission denied: graftpoint `{point}` may be grafted only by {who}")]
    PermissionDenied { point: String, who: String },
    #[error("no graft is loaded at `{0}`")]
    NotLoaded(String),
    #[error("the policy at `{0}` is native code, not a graft")]
    NotWasm(String),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("graft memory access out of bounds: {0}")]
    MemoryBounds(String),
    #[error("graft has no exported symbol `{0}`")]
    NoSymbol(String),
    #[error("control function `{name}`: {why}")]
    Control { name: String, why: String },
    #[error("control function `{name}` aborted: {failure}")]
    ControlAborted {
        name: String,
        failure: String,
        /// The graft's own doing (a trap, its budget), not a lock conflict with others.
        grafts_fault: bool,
    },
    /// The graft's instance is held by another transaction that called it from inside a graft
    /// and has not ended, and the wait for it failed (EBUSY).
    #[error("the graft is held by a transaction still in progress: {0}")]
    InUse(String),
    /// The graft cannot be recorded ([`crate::record`]).
    #[error("the graft cannot be recorded: {0}")]
    NotRecordable(String),
}

pub(crate) fn describe_access(access: Access) -> String {
    match access {
        Access::Privileged => "a privileged process".to_string(),
        Access::Process(p) => format!("its owner (process {p})"),
    }
}
