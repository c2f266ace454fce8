//! Signals delivered to a program at its safe points: on the way out of its waiting and I/O
//! calls (reads, writes, `poll_oneoff`, `sched_yield`, `wait`, `sigsuspend`), and at once from
//! one that is blocked. A handled signal runs the program's handler through the trampoline it
//! registered (`vino.signal_trampoline`: an index into its function table, which `vino build`
//! exports; the SDK's compatibility layer registers one that calls the handler `sigaction`
//! gave), with the signal blocked while it runs; a signal whose
//! default ends the process ends it here; a stop waits for SIGCONT. The kernel decides which
//! (see `vino_kernel::signal`); this is only the carrying out.
//!
//! Why not at any instruction: wasmtime cannot call into a program from its epoch check, only
//! from a host call. A program that computes without calling the kernel runs its handler at its
//! next call; its default actions (death, stop) still come at the next epoch tick.

use crate::Ctx;
use vino_kernel::signal::{Delivery, MaskHow, bit};
use wasmtime::{Caller, Extern, Func, Trap};

/// The export a program's function table goes by (wasm-ld's `--export-table`).
const TABLE: &str = "__indirect_function_table";

/// The program's trampoline, if it registered one and exports its table.
fn trampoline(c: &mut Caller<'_, Ctx>) -> Option<Func> {
    let index = c.data().trampoline?;
    let Some(Extern::Table(table)) = c.get_export(TABLE) else {
        return None;
    };
    table.get(&mut *c, u64::from(index))?.as_func()?.copied()
}

/// What delivering did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delivered {
    /// A handler ran.
    pub handled: bool,
    /// Every handler that ran asked that an interrupted call resume (SA_RESTART).
    pub restart: bool,
}

/// Runs what the process's signals call for now. An error ends the program (a signal's
/// default, a kill, or a trap in a handler).
pub async fn deliver(c: &mut Caller<'_, Ctx>) -> wasmtime::Result<Delivered> {
    let mut done = Delivered {
        handled: false,
        restart: true,
    };
    let process = c.data().process.clone();
    loop {
        if c.data().ending() {
            return Err(Trap::Interrupt.into());
        }
        match process.next_signal() {
            None => return Ok(done),
            Some(Delivery::Terminate(sig)) => {
                process.kill_by(sig);
                return Err(Trap::Interrupt.into());
            }
            Some(Delivery::Stop) => {
                std::future::poll_fn(|cx| process.poll_continued(cx)).await;
            }
            Some(Delivery::Handle { sig, restart }) => {
                let handler = trampoline(c).and_then(|f| f.typed::<i32, ()>(&*c).ok());
                let Some(handler) = handler else {
                    // A handler with no (usable) trampoline to run it: the signal does what it
                    // does by default.
                    process.kill_by(sig);
                    return Err(Trap::Interrupt.into());
                };
                let old = process.signal_mask(MaskHow::Block, bit(sig));
                let ran = handler.call_async(&mut *c, i32::from(sig)).await;
                process.signal_mask(MaskHow::Set, old);
                ran?;
                done.handled = true;
                done.restart &= restart;
            }
        }
    }
}

/// After a call that did not block: delivers what is pending, and returns the call's result.
pub async fn after(c: &mut Caller<'_, Ctx>, result: i32) -> wasmtime::Result<i32> {
    if c.data().process.interrupted() || c.data().ending() {
        deliver(c).await?;
    }
    Ok(result)
}
