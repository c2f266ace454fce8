//! `exec.verify`: executable fingerprints (Small 1998, 4.2). Before a program runs as a VINO
//! process, its module's bytes stream through a graft that computes a digest of them and
//! answers allow or deny.
//!
//! Two bindings, both optional: the global `exec.verify` (privileged processes only, for every
//! program), and one per user, `exec.verify/user` as a process sees it, for the programs that
//! user runs (any process of the uid may load or unload it; the kernel keeps it, charged to the
//! user's account, until it is unloaded or the kernel stops). The global one runs first; either
//! denying denies. A graft that fails (trap, budget, memory, an answer out of range) fails
//! closed: the program is refused, and the failure counts towards unloading the graft as any
//! failure does; once unloaded, nothing is bound there and programs run.
//!
//! A module's stream is `begin` (the size), `data` (up to [`CHUNK`] bytes at a time in the
//! graft's `vino_args`), `end` (the graft leaves its 32-byte digest at the start of `vino_args`
//! and answers). The graft keeps its state between the calls in its memory, so one stream holds
//! the graft's instance from begin to end: a verifier's streams take turns (its `turn` lock).
//! Each call has its own budget ([`ExecVerify::BUDGET`]); the module's size bounds the calls.

use crate::Account;
use crate::error::{Errno, SysError, SysResult};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use vino_graft::{Access, GraftPoint, GraftSlot, Invalid, PolicyKind, Runtime};

/// The name of the per-user binding, as a process's namespace holds it.
pub const USER_POINT: &str = "exec.verify/user";

/// Bytes of the module one `data` call carries: the argument area's size. SHA-256 of 16 KiB
/// is about a million Wasm instructions, half of a call's budget in fuel.
pub const CHUNK: usize = 16 << 10;

/// Largest module a bound verifier reads: a program's largest (`ProgramLimits::module_bytes`).
/// With [`ExecVerify::BUDGET`] per chunk, it bounds one verification's graft time at 4096
/// chunks of at most 5 ms.
pub const MAX_MODULE: usize = 64 << 20;

/// The calls of one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Begin = 0,
    Data = 1,
    End = 2,
}

/// One call of the stream.
pub struct VerifyArgs<'a> {
    pub op: Op,
    /// `Data`: the bytes; empty otherwise.
    pub data: &'a [u8],
    /// The module's size in bytes.
    pub total: usize,
}

/// What one call of the stream answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Begin or data taken: go on.
    Continue,
    /// At the end: run it (with the graft's digest; none from the default).
    Allow(Option<[u8; 32]>),
    /// Refused (at the end with the graft's digest; early without one).
    Deny(Option<[u8; 32]>),
}

/// The graftpoint `exec.verify`: `exec_verify(op: i32, len: i32) -> i32`.
pub struct ExecVerify;

impl GraftPoint for ExecVerify {
    const NAME: &'static str = "exec.verify";
    const USES_ARG_AREA: bool = true;
    const ARG_BYTES: usize = CHUNK;
    /// A digest depends on the bytes alone.
    const CLOCK: bool = false;
    /// A failed call refuses the program, whatever the digest's state; logging each block's
    /// writes would slow the digest the kernel waits for.
    const ROLL_BACK_MEMORY: bool = false;
    /// A digest takes no kernel lock, and a program start calls it holding none: its per-chunk
    /// budget bounds it.
    const DEADLINE_CHECKS: bool = false;
    /// One chunk's work: SHA-256 of 16 KiB takes about 0.1 ms in Wasm.
    const BUDGET: Duration = Duration::from_millis(5);
    /// The owner's control call (its allow-list being written) is waited for: every call of a
    /// stream must reach the graft, and a busy instance must not refuse a program.
    const WAIT_WHEN_BUSY: bool = true;
    type Env = ();
    type Args<'a> = VerifyArgs<'a>;
    type Output = Verdict;
    type Params = (i32, i32);
    type Results = i32;

    fn default_policy(_: &(), args: &VerifyArgs<'_>) -> Verdict {
        match args.op {
            Op::End => Verdict::Allow(None),
            _ => Verdict::Continue,
        }
    }

    fn encode(_: &(), args: &VerifyArgs<'_>, area: &mut [u8]) -> (i32, i32) {
        match args.op {
            Op::Begin => (Op::Begin as i32, args.total as i32),
            Op::Data => {
                area[..args.data.len()].copy_from_slice(args.data);
                (Op::Data as i32, args.data.len() as i32)
            }
            Op::End => (Op::End as i32, 0),
        }
    }

    fn decode(_: &(), args: &VerifyArgs<'_>, result: i32, area: &[u8]) -> Result<Verdict, Invalid> {
        let digest = || {
            let mut d = [0u8; 32];
            d.copy_from_slice(&area[..32]);
            d
        };
        match (args.op, result) {
            (Op::End, 0) => Ok(Verdict::Allow(Some(digest()))),
            (Op::End, 1) => Ok(Verdict::Deny(Some(digest()))),
            (_, 0) => Ok(Verdict::Continue),
            (_, 1) => Ok(Verdict::Deny(None)),
            (op, r) => Err(Invalid(format!("answered {r} to {op:?} (0 allows, 1 denies)"))),
        }
    }
}

/// One binding of `exec.verify` and the turn its streams take.
pub(crate) struct Verifier {
    pub(crate) slot: Arc<GraftSlot<ExecVerify>>,
    turn: Mutex<()>,
}

/// How one verifier judged a module.
enum Outcome {
    Unbound,
    Allowed(Option<[u8; 32]>),
    Denied(Option<[u8; 32]>),
    Failed(String),
}

impl Verifier {
    fn new(runtime: &Runtime, access: Access, suffix: Option<&str>) -> Verifier {
        Verifier {
            slot: Arc::new(GraftSlot::new(runtime, Arc::new(()), access, suffix)),
            turn: Mutex::new(()),
        }
    }

    /// What is bound now, to see that one stream went to one graft.
    fn bound(&self) -> (PolicyKind, Option<(String, Option<std::time::SystemTime>)>) {
        let info = self.slot.info();
        (info.policy, info.graft.map(|g| (g.hash, g.loaded_at)))
    }

    /// Streams `wasm` through the bound policy.
    fn judge(&self, wasm: &[u8]) -> Outcome {
        if self.slot.policy_kind() == PolicyKind::Default {
            return Outcome::Unbound;
        }
        let _turn = self.turn.lock();
        let before = self.bound();
        if before.0 == PolicyKind::Default {
            return Outcome::Unbound;
        }
        if wasm.len() > MAX_MODULE {
            return Outcome::Failed(format!(
                "the module's {} bytes are more than a verifier reads ({MAX_MODULE})",
                wasm.len()
            ));
        }
        let call = |op, data| {
            self.slot.try_invoke(&VerifyArgs {
                op,
                data,
                total: wasm.len(),
            })
        };
        let mut calls = std::iter::once((Op::Begin, &[][..]))
            .chain(wasm.chunks(CHUNK).map(|c| (Op::Data, c)))
            .chain(std::iter::once((Op::End, &[][..])));
        let verdict = loop {
            let Some((op, data)) = calls.next() else {
                break None;
            };
            match call(op, data) {
                Err(f) => return Outcome::Failed(f.to_string()),
                Ok(Verdict::Continue) if op != Op::End => {}
                Ok(v) => break Some(v),
            }
        };
        if self.bound() != before {
            return Outcome::Failed("the policy was replaced or unloaded during the verification".into());
        }
        match verdict {
            Some(Verdict::Allow(d)) if calls.next().is_none() => Outcome::Allowed(d),
            Some(Verdict::Deny(d)) => Outcome::Denied(d),
            _ => Outcome::Failed("the stream ended without an answer".into()),
        }
    }
}

/// The kernel's verifiers: the global one and each user's.
pub(crate) struct ExecVerifiers {
    pub(crate) global: Verifier,
    users: Mutex<HashMap<u32, Arc<Verifier>>>,
    runtime: Runtime,
}

impl ExecVerifiers {
    pub(crate) fn new(runtime: &Runtime) -> ExecVerifiers {
        ExecVerifiers {
            global: Verifier::new(runtime, Access::Privileged, None),
            users: Mutex::default(),
            runtime: runtime.clone(),
        }
    }

    /// User `uid`'s verifier, made on first use.
    pub(crate) fn user(&self, uid: u32) -> Arc<Verifier> {
        self.users
            .lock()
            .entry(uid)
            .or_insert_with(|| Arc::new(Verifier::new(&self.runtime, Access::Privileged, Some("user"))))
            .clone()
    }

    /// Unloads every user's verifier (the kernel stops), returning what they hold.
    pub(crate) fn unload_all(&self) {
        for v in self.users.lock().values() {
            v.slot.unload();
        }
        self.global.slot.unload();
    }
}

/// Proof that a module passed `exec.verify` for a user: only [`crate::Process::exec_verify`]
/// makes one, and a program starts only with one ([`crate::Process::exec_start`]), for the
/// module it was made for.
#[derive(Debug)]
pub struct Verified {
    uid: u32,
    sha256: [u8; 32],
    digest: [u8; 32],
}

impl Verified {
    /// SHA-256 of the module, as the kernel computed it.
    pub fn sha256(&self) -> &[u8; 32] {
        &self.sha256
    }

    /// The digest the process shows: the verifier's (the global one's if both ran), else the
    /// kernel's SHA-256 of the module.
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    pub fn uid(&self) -> u32 {
        self.uid
    }
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Runs `wasm` through the global verifier, then user `uid`'s.
pub(crate) fn verify(
    verifiers: &ExecVerifiers,
    uid: u32,
    name: &str,
    wasm: &[u8],
    account: &Account,
) -> SysResult<Verified> {
    use sha2::Digest;
    let sha256: [u8; 32] = sha2::Sha256::digest(wasm).into();
    let mut digest = None;
    let user = verifiers.user(uid);
    let started = std::time::Instant::now();
    let judged = [
        (&verifiers.global, "global policy".to_string()),
        (&*user, format!("policy of uid {uid}")),
    ]
    .into_iter()
    .try_for_each(|(v, whose)| match v.judge(wasm) {
        Outcome::Unbound => Ok(()),
        Outcome::Allowed(d) => {
            digest = digest.or(d);
            Ok(())
        }
        Outcome::Denied(d) => Err(SysError::new(
            Errno::Acces,
            format!(
                "exec.verify ({whose}) denied program {name}: digest {}",
                d.map_or_else(|| "none (refused before the end)".into(), |d| hex(&d))
            ),
        )),
        Outcome::Failed(why) => Err(SysError::new(
            Errno::Acces,
            format!("exec.verify ({whose}) failed on program {name}, which is refused: {why}"),
        )),
    });
    account.add_cpu(started.elapsed());
    judged?;
    Ok(Verified {
        uid,
        sha256,
        digest: digest.unwrap_or(sha256),
    })
}
