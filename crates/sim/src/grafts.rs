//! The grafts a simulation binds: for every graftpoint of the kernel's registry (event handlers
//! included: the simulation runs them in its `Events` steps), modules built from its signature
//! alone that behave well or badly in each way the sandbox must survive.

use vino_kernel::graftpoints::{self, Graftpoint};

/// How a simulated graft behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Answers 0: for a choice among candidates, the first (the oldest); a valid decision.
    Zero,
    /// Answers its first argument: for a count of candidates, one past the last (invalid).
    FirstArg,
    /// Answers -1 (invalid almost everywhere).
    Negative,
    /// Never returns: the CPU budget must stop it.
    Spin,
    /// Traps at once.
    Trap,
    /// Stores outside its memory.
    OutOfBounds,
}

pub const BEHAVIOURS: [Behaviour; 6] = [
    Behaviour::Zero,
    Behaviour::FirstArg,
    Behaviour::Negative,
    Behaviour::Spin,
    Behaviour::Trap,
    Behaviour::OutOfBounds,
];

/// Graftpoints a simulated process may bind: all of them.
pub fn points() -> Vec<&'static Graftpoint> {
    graftpoints::all().iter().collect()
}

/// A module (text format) for `g` behaving as `b`.
pub fn module(g: &Graftpoint, b: Behaviour) -> Vec<u8> {
    let params: Vec<&str> = g.signature.params.iter().map(|t| t.name()).collect();
    // An event handler returns nothing: its answers are empty.
    let result = match g.signature.results {
        [t] => Some(t.name()),
        [] => None,
        other => panic!("{}: results {other:?}", g.name),
    };
    let konst = |v: i64| result.map(|r| format!("{r}.const {v}")).unwrap_or_default();
    let body = match b {
        Behaviour::Zero => konst(0),
        Behaviour::FirstArg => match (g.signature.params.first(), result) {
            (_, None) => String::new(),
            (Some(t), Some(r)) if t.name() == r => "local.get 0".to_string(),
            (Some(t), _) if t.name() == "i32" => "local.get 0 i64.extend_i32_s".to_string(),
            (Some(_), _) => "local.get 0 i32.wrap_i64".to_string(),
            (None, _) => konst(1),
        },
        Behaviour::Negative => konst(-1),
        Behaviour::Spin => "(loop $l (br $l)) unreachable".to_string(),
        Behaviour::Trap => "unreachable".to_string(),
        Behaviour::OutOfBounds => format!("i32.const -8 i64.const 1 i64.store {}", konst(0)),
    };
    // Every module has a memory (the out-of-bounds store needs one); the argument area where
    // the graftpoint passes its arguments there.
    let area = if g.uses_arg_area {
        let pages = (1024 + g.arg_bytes).div_ceil(65536);
        format!(r#"(memory (export "memory") {pages}) (global (export "vino_args") i32 (i32.const 1024))"#)
    } else {
        "(memory 1)".to_string()
    };
    let result = result.map(|r| format!("(result {r})")).unwrap_or_default();
    let (imports, changes) = kernel_changes(g);
    // Every call first counts itself in the graft's memory (word 0, below the argument area):
    // a call that then fails is rolled back, so the count is the calls that succeeded, which
    // `vino_ctl_calls` tells ([`CALLS_CONTROL`]).
    format!(
        r#"(module {imports} {area}
  (func (export "{}") (param {}) {result}
    (i64.store (i32.const 0) (i64.add (i64.load (i32.const 0)) (i64.const 1)))
    {changes}
    {body})
  (func (export "vino_ctl_{CALLS_CONTROL}") (result i64) (i64.load (i32.const 0))))"#,
        g.export(),
        params.join(" ")
    )
    .into_bytes()
}

/// Imports and instructions with which a [`module`] changes kernel state through its
/// graftpoint's graft-callable functions before it behaves as it does, so that a call that then
/// fails has changes for its transaction to drop: `file.compute_ra` asks for the file's first
/// block to be read ahead, `vas.pick_victim` hints its second candidate (the kernel's own choice
/// is the first) as one to give back, `lock.grant` sends the longest waiter to the back of the
/// queue, `sched.pick_thread` gives a ticket to process 1. Results are ignored (a file too
/// short refuses the read, process 1 is rarely the same user's).
fn kernel_changes(g: &Graftpoint) -> (&'static str, &'static str) {
    match g.callable {
        ["vino_prefetch"] => (
            r#"(import "vino" "vino_prefetch" (func $prefetch (param i64 i64) (result i32)))"#,
            "(drop (call $prefetch (i64.const 0) (i64.const 4096)))",
        ),
        ["vino_lock_requeue"] => (
            r#"(import "vino" "vino_lock_requeue" (func $requeue (param i32 i32) (result i32)))"#,
            "(drop (call $requeue (i32.const 0) (i32.const 1)))",
        ),
        ["vino_tickets_give"] => (
            r#"(import "vino" "vino_tickets_give" (func $give (param i64 i32) (result i32)))"#,
            "(drop (call $give (i64.const 1) (i32.const 1)))",
        ),
        ["vino_page_hint"] => (
            r#"(import "vino" "vino_page_hint" (func $hint (param i64 i32) (result i32)))"#,
            "(drop (call $hint (i64.load (i32.const 1032)) (i32.const 2)))",
        ),
        _ => ("", ""),
    }
}

/// The control function of every [`module`] that says how many of its calls succeeded (each
/// entry call counts itself in the graft's memory; a failed call's count is rolled back).
pub const CALLS_CONTROL: &str = "calls";

/// The codec the simulation's stream directory is bound to (text format): each chunk stored
/// XORed with a key of its index's low byte, so that a chunk read through no codec, or stored
/// under another index, differs from the model's bytes. Cheap in fuel: a word per step.
pub fn stream_codec() -> Vec<u8> {
    use vino_stream::{ARG_BYTES, HEADER, MAX_ENCODED};
    const AREA: usize = 1024;
    let pages = (AREA + ARG_BYTES).div_ceil(65536);
    let input = AREA + HEADER;
    let output = input + MAX_ENCODED;
    format!(
        r#"(module
  (memory (export "memory") {pages})
  (global (export "vino_args") i32 (i32.const {AREA}))
  (func (export "file_stream") (param $op i32) (param $chunk i64) (param $len i32) (result i32)
    (local $i i32) (local $key i64)
    (local.set $key (i64.xor (i64.const 0xa5a5a5a5a5a5a5a5)
      (i64.mul (i64.and (local.get $chunk) (i64.const 0xff)) (i64.const 0x0101010101010101))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
        (i64.store (i32.add (i32.const {output}) (local.get $i))
          (i64.xor (i64.load (i32.add (i32.const {input}) (local.get $i))) (local.get $key)))
        (local.set $i (i32.add (local.get $i) (i32.const 8)))
        (br $next)))
    (local.get $len)))"#
    )
    .into_bytes()
}

/// An echo server in the kernel (text format, `event.net.packet`): each call's new bytes are
/// sent back as they came; a connection is taken and its end heard with nothing to do.
pub fn echo_server() -> Vec<u8> {
    const AREA: usize = 1024;
    let pages = (AREA + 64 * 1024).div_ceil(65536);
    let out = AREA + 16 * 1024;
    let action = AREA + 48 * 1024;
    format!(
        r#"(module
  (memory (export "memory") {pages})
  (global (export "vino_args") i32 (i32.const {AREA}))
  (func (export "event_net_packet") (param $event i32) (param $conn i32) (param $len i32) (result i32)
    (if (i32.or (i32.ne (local.get $event) (i32.const 1)) (i32.eqz (local.get $len)))
      (then (return (i32.const 0))))
    (memory.copy (i32.const {out}) (i32.const {AREA}) (local.get $len))
    (i32.store (i32.const {action}) (i32.const 1))
    (i32.store (i32.const {a}) (i32.const 0))
    (i32.store (i32.const {b}) (local.get $len))
    (i32.const 1)))"#,
        a = action + 4,
        b = action + 8,
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vino_graft::Runtime;

    #[test]
    fn every_module_passes_its_graftpoints_checks() {
        let rt = Runtime::default();
        for g in points() {
            for b in BEHAVIOURS {
                (g.check)(&rt, &module(g, b)).unwrap_or_else(|e| panic!("{} {b:?}: {e}", g.name));
            }
        }
    }

    #[test]
    fn the_stream_codec_decodes_what_it_encodes_and_stores_other_bytes() {
        let codec = vino_stream::Codec::load(&Runtime::default(), 1, &stream_codec()).unwrap();
        let nonce = [0; vino_stream::NONCE_BYTES];
        let plain: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let vino_stream::Encoded::Coded(coded) = codec.encode(3, &plain, &nonce).unwrap() else {
            panic!("stored raw")
        };
        assert_eq!(coded.len(), plain.len());
        assert_ne!(coded, plain);
        assert_eq!(codec.decode(3, &coded, &nonce, plain.len()).unwrap(), plain);
        assert_ne!(codec.decode(4, &coded, &nonce, plain.len()).unwrap(), plain);
    }
}
