//! The hostile-graft suite: grafts that loop forever, store out of bounds, hog memory, recurse
//! without end, import what they may not, hold locks others need, change kernel state and then
//! trap, or return nonsense. For each, the suite checks what the design promises: the graft is
//! refused at load or its invocation aborts, the default decides, the kernel state is what it
//! was before, no lock is held, and a good graft works right after.
//!
//! The test suite asserts on [`run`]; `vino demo` prints it.

use crate::{Read, ToyApply, ToyComputeRa, ToyFile, ToyKernel, ToyPickVictim};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vino_graft::{Access, GraftPoint, GraftSlot, Owner, Runtime};
use vino_vlt::LockMode;

/// Where a hostile graft comes from.
#[derive(Debug, Clone, Copy)]
pub enum Source {
    /// `sdk/hostile/<name>.c`, built with the SDK for the toy kernel ([`crate::build_options`]).
    C(&'static str),
    /// `sdk/hostile/<name>.wat`.
    Wat(&'static str),
}

/// What must happen to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Refused at load, with an error containing this text.
    Refused(&'static str),
    /// Loads, and its invocation aborts with a failure containing this text.
    Aborts(&'static str),
}

/// Which graftpoint a case targets, and how it is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Apply(i64),
    /// `toy.apply` while another transaction waits for the lock the graft holds.
    ApplyContended(i64),
    Victim,
    ReadAhead,
}

#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub name: &'static str,
    pub source: Source,
    pub target: Target,
    pub expect: Expect,
    pub what: &'static str,
}

pub const CASES: &[Case] = &[
    Case {
        name: "infinite loop",
        source: Source::C("infinite_loop"),
        target: Target::Apply(1),
        expect: Expect::Aborts("budget"),
        what: "spins forever",
    },
    Case {
        name: "out-of-bounds store",
        source: Source::C("oob_store"),
        target: Target::Apply(1),
        expect: Expect::Aborts("out of bounds"),
        what: "stores at 0xFFFFFFF0",
    },
    Case {
        name: "memory hog",
        source: Source::C("memory_hog"),
        target: Target::Apply(1),
        expect: Expect::Aborts("memory"),
        what: "grows memory until refused",
    },
    Case {
        name: "deep recursion (shadow stack)",
        source: Source::C("deep_recursion"),
        target: Target::Apply(2),
        expect: Expect::Aborts("wasm trap"),
        what: "recursion with frames in linear memory",
    },
    Case {
        name: "deep recursion (wasm stack)",
        source: Source::C("deep_recursion"),
        target: Target::Apply(3),
        expect: Expect::Aborts("call stack exhausted"),
        what: "recursion on the native stack",
    },
    Case {
        name: "division by zero",
        source: Source::C("div_zero"),
        target: Target::Apply(1),
        expect: Expect::Aborts("divide by zero"),
        what: "integer division by zero",
    },
    Case {
        name: "bad indirect call",
        source: Source::C("bad_indirect"),
        target: Target::Apply(1),
        expect: Expect::Aborts("indirect call"),
        what: "calls through a mistyped pointer",
    },
    Case {
        name: "forbidden import",
        source: Source::C("forbidden_import"),
        target: Target::Apply(1),
        expect: Expect::Refused("does not allow"),
        what: "imports vino_format_disk",
    },
    Case {
        name: "import from env",
        source: Source::Wat("forbidden_import_env"),
        target: Target::Apply(1),
        expect: Expect::Refused("does not allow"),
        what: "imports from module env",
    },
    Case {
        name: "wrong export",
        source: Source::Wat("wrong_export"),
        target: Target::Apply(1),
        expect: Expect::Refused("toy_apply"),
        what: "exports no entry point",
    },
    Case {
        name: "wrong signature",
        source: Source::Wat("wrong_signature"),
        target: Target::Apply(1),
        expect: Expect::Refused("toy_apply"),
        what: "entry point of the wrong type",
    },
    Case {
        name: "lock hog (alone)",
        source: Source::C("lock_hog"),
        target: Target::Apply(1),
        expect: Expect::Aborts("budget"),
        what: "takes a lock, then spins",
    },
    Case {
        name: "lock hog (contended)",
        source: Source::C("lock_hog"),
        target: Target::ApplyContended(1),
        expect: Expect::Aborts("deadline"),
        what: "takes a lock another waits for, then spins",
    },
    Case {
        name: "change state, then trap",
        source: Source::C("partial_then_trap"),
        target: Target::Apply(1),
        expect: Expect::Aborts("unreachable"),
        what: "writes four cells, then traps",
    },
    Case {
        name: "bad argument",
        source: Source::C("bad_arg"),
        target: Target::Apply(1),
        expect: Expect::Aborts("bad argument"),
        what: "asks for cell -5",
    },
    Case {
        name: "bad log pointer",
        source: Source::C("bad_log_ptr"),
        target: Target::Apply(1),
        expect: Expect::Aborts("outside the graft's memory"),
        what: "logs from outside its memory",
    },
    Case {
        name: "invalid result",
        source: Source::C("bad_result"),
        target: Target::Apply(1),
        expect: Expect::Aborts("invalid result"),
        what: "returns -1",
    },
    Case {
        name: "invalid victim",
        source: Source::C("bad_victim"),
        target: Target::Victim,
        expect: Expect::Aborts("invalid result"),
        what: "names a page not offered",
    },
    Case {
        name: "read-ahead past EOF",
        source: Source::C("bad_readahead"),
        target: Target::ReadAhead,
        expect: Expect::Aborts("invalid result"),
        what: "asks for blocks past the end",
    },
];

/// What happened to one case.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub case: Case,
    /// The load error or the invocation's failure, as recorded.
    pub failure: String,
    /// The failure is the expected kind.
    pub expected: bool,
    /// The decision was the default's.
    pub default_decided: bool,
    /// The toy kernel's cells are as before.
    pub state_restored: bool,
    /// No lock is held afterwards.
    pub no_lock_held: bool,
    /// The graft's own memory holds what it held before the failed call (checked where the
    /// kernel writes no arguments into it, so any difference is the graft's own writes).
    pub memory_restored: bool,
    /// A good graft loaded into the same slot works afterwards.
    pub next_graft_works: bool,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.expected
            && self.default_decided
            && self.state_restored
            && self.no_lock_held
            && self.memory_restored
            && self.next_graft_works
    }
}

/// The bytes of a case's graft.
pub fn build(source: Source) -> Result<Vec<u8>, String> {
    match source {
        Source::C(name) => vino_sdk::build_example(name, &crate::build_options()).map_err(|e| e.to_string()),
        Source::Wat(name) => vino_sdk::HOSTILE_WAT
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, src)| src.as_bytes().to_vec())
            .ok_or_else(|| format!("no hostile graft {name}")),
    }
}

const INITIAL: [i64; 4] = [10, 20, 30, 40];

/// Runs one case on a fresh toy kernel in `rt`.
pub fn run_case(rt: &Runtime, case: &Case) -> Result<Outcome, String> {
    let wasm = build(case.source)?;
    let kernel = ToyKernel::new(INITIAL.len());
    for (k, v) in INITIAL.iter().enumerate() {
        kernel.set(k as i64, *v).expect("setting up outside a transaction");
    }
    let started = Instant::now();
    let (failure, default_decided, memory_restored, next_graft_works) = match case.target {
        Target::Apply(arg) => drive::<ToyApply>(rt, Arc::new(kernel.clone()), &wasm, &arg, &arg, good_apply(), &5, &10),
        Target::ApplyContended(arg) => {
            let waiter = contend(rt, &kernel);
            let r = drive::<ToyApply>(rt, Arc::new(kernel.clone()), &wasm, &arg, &arg, good_apply(), &5, &10);
            waiter
                .join()
                .map_err(|_| "the waiting transaction panicked".to_string())??;
            r
        }
        Target::Victim => {
            let pages: &[u64] = &[5, 6, 7];
            drive::<ToyPickVictim>(
                rt,
                Arc::new(kernel.clone()),
                &wasm,
                &pages,
                &0,
                good_victim(),
                &pages,
                &2,
            )
        }
        Target::ReadAhead => {
            let file = Arc::new(ToyFile::new(1 << 20));
            let read = Read {
                offset: 1 << 19,
                len: 4096,
            };
            let fresh = Arc::new(ToyFile::new(1 << 20));
            let default = ToyComputeRa::default_policy(&fresh, &read);
            drive::<ToyComputeRa>(
                rt,
                file,
                &wasm,
                &read,
                &default,
                good_ra(),
                &read,
                &vino_graft::abi::Extents::new(),
            )
        }
    }?;
    let expected = match case.expect {
        Expect::Refused(text) | Expect::Aborts(text) => failure.to_lowercase().contains(&text.to_lowercase()),
    };
    Ok(Outcome {
        case: *case,
        failure,
        expected,
        default_decided,
        state_restored: kernel.snapshot() == INITIAL,
        no_lock_held: rt.vlt().locked_objects() == 0,
        memory_restored: memory_restored || !rt.config().roll_back_memory,
        next_graft_works,
        elapsed: started.elapsed(),
    })
}

/// Runs every case.
pub fn run(rt: &Runtime) -> Result<Vec<Outcome>, String> {
    CASES.iter().map(|c| run_case(rt, c)).collect()
}

/// Loads the hostile graft, invokes it, then loads a good graft into the same slot and invokes
/// that. Returns (failure text, the default decided, the graft's first page of memory is as
/// before the call (if `G` writes no arguments there), the good graft worked).
#[allow(clippy::too_many_arguments)]
fn drive<G: GraftPoint>(
    rt: &Runtime,
    env: Arc<G::Env>,
    wasm: &[u8],
    args: &G::Args<'_>,
    default: &G::Output,
    good: &str,
    good_args: &G::Args<'_>,
    good_answer: &G::Output,
) -> Result<(String, bool, bool, bool), String>
where
    G::Output: PartialEq + std::fmt::Debug,
{
    let slot: GraftSlot<G> = GraftSlot::new(rt, env, Access::Process(1), None);
    let first_page = |slot: &GraftSlot<G>| slot.read_memory(0, 1 << 16).ok().filter(|_| !G::USES_ARG_AREA);
    let (failure, default_decided, memory_restored) = match slot.load(wasm, Owner::process(1)) {
        Err(e) => (e.to_string(), slot.invoke(args) == *default, true),
        Ok(_) => {
            let before = first_page(&slot);
            let decided = slot.invoke(args);
            let restored = first_page(&slot) == before;
            let stats = slot.stats().ok_or("no statistics")?;
            let failure = stats.last_error.unwrap_or_else(|| "(no failure recorded)".into());
            (failure, decided == *default && stats.failures == 1, restored)
        }
    };
    slot.load(good.as_bytes(), Owner::process(1))
        .map_err(|e| format!("good graft refused: {e}"))?;
    let works = slot.invoke(good_args) == *good_answer && slot.stats().is_some_and(|s| s.failures == 0);
    Ok((failure, default_decided, memory_restored, works))
}

fn good_apply() -> &'static str {
    r#"(module (func (export "toy_apply") (param i64) (result i64) local.get 0 i64.const 2 i64.mul))"#
}

fn good_victim() -> &'static str {
    r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
        (func (export "toy_pick_victim") (param i32) (result i32) local.get 0 i32.const 1 i32.sub))"#
}

fn good_ra() -> &'static str {
    r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
        (func (export "toy_compute_ra") (param i64 i32 i64) (result i32) i32.const 0))"#
}

/// Starts a transaction that waits for cell 0 (which the lock hog is about to take), so the
/// hog gets a deadline. It retries until it gets the lock, then reads the cell and commits.
fn contend(rt: &Runtime, kernel: &ToyKernel) -> std::thread::JoinHandle<Result<(), String>> {
    let vlt = rt.vlt().clone();
    let object = kernel.object(0);
    std::thread::spawn(move || {
        // Let the hog take the lock first (on a loaded machine it may start late): a contender
        // that came first would find no holder to impose a deadline on.
        let hog_started = Instant::now() + Duration::from_secs(10);
        while vlt.locked_objects() == 0 && Instant::now() < hog_started {
            std::thread::sleep(Duration::from_millis(1));
        }
        let give_up = Instant::now() + Duration::from_secs(30);
        loop {
            let mut txn = vlt.begin();
            match txn.lock(object, LockMode::Exclusive) {
                Ok(()) => {
                    txn.commit();
                    return Ok(());
                }
                Err(_) if Instant::now() < give_up => txn.abort(),
                Err(e) => return Err(format!("waiter never got the lock: {e}")),
            }
        }
    })
}
