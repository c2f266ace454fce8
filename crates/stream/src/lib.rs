//! Stream grafts: the `file.stream` graftpoint (Small 1998, 4.2: a graft through which data
//! flows).
//!
//! A file's owner binds a codec to a file (or a directory, for the files made in it): a
//! compressor, an encryptor, an integrity tag. The kernel keeps plain pages in its cache and
//! passes whole chunks of [`CHUNK`] plain bytes through the codec: it encodes a chunk when it
//! writes it back and decodes one on a cache miss. This crate is the graft side of that: the
//! graftpoint [`FileStream`] and [`Codec`], one loaded codec the kernel calls.
//!
//! # The contract
//!
//! A stream graft exports `file_stream(op: i32, chunk: i64, in_len: i32) -> i32` and an argument
//! area `vino_args` of [`ARG_BYTES`] bytes (C: define `VINO_STREAM_ARGS` before including
//! `vino_graft.h`). For each call the kernel fills the area:
//!
//! | bytes | what |
//! | --- | --- |
//! | `[0, 24)` | the nonce: fresh random bytes for each chunk written ([`fresh_nonce`]), stored beside the chunk; a decode gets the ones its encode got |
//! | `[24, 32)` | the chunk's index in the file, `u64` little-endian |
//! | `[32, 36)` | `plain_len`, `u32`: for an encode, `in_len`; for a decode, the length the graft must produce |
//! | `[36, 40)` | the op, `u32` ([`Op`]) |
//! | `[40, 44)` | flags, `u32`: [`RAW_INPUT`] on a decode of bytes a peer's encoder left raw (a socket's layer, below) |
//! | `[44, 64)` | zero |
//! | `[HEADER, HEADER + in_len)` | the input |
//! | `[HEADER + MAX_ENCODED, ARG_BYTES)` | the output, written by the graft |
//!
//! Results: an encode returns `n >= 0` encoded bytes (at most `in_len + MAX_GROWTH`),
//! [`RAW`] to have the plain bytes stored as they are (marked raw: a compressor that did not
//! shrink them) or [`NEED_KEY`]; a decode returns `plain_len` or [`NEED_KEY`]. [`NEED_KEY`]
//! becomes [`StreamError::NeedKey`] (the kernel answers `EACCES`); anything else is
//! [`StreamError::Failed`] (`EIO`): another negative result (the graft's refusal: a bad tag, a
//! corrupt chunk), an encode longer than allowed, a decode to another length, a trap, running
//! past the budget, memory. The kernel checks every length as a system call checks its
//! arguments, and copies the output only from a call that succeeded: a failing graft never has
//! anything stored or returned. There is no fallback: the default policy fails too ("no codec"),
//! since an encryptor's failure must never store plaintext.
//!
//! A stream graft gets no clock (`vino_now_ns` is refused at load): it runs on other users'
//! reads and must give every reader the same bytes. It has its own thread's turn: a call waits
//! for another thread's call into the same instance rather than failing the chunk
//! ([`GraftPoint::WAIT_WHEN_BUSY`]). Each chunk has a CPU budget of 10 ms (the runtime's
//! invocation budget caps it).
//!
//! # On a socket
//!
//! The same grafts are a connection's layers (`Process::socket_push`, in the kernel): each
//! `send` is cut into frames of at most [`CHUNK`] plain bytes that the layer encodes, and the
//! peer's layer decodes them. There the encoded bytes come from another machine: a frame its
//! sender left raw is not taken on the kernel's word, as a file's raw chunk is, but handed to
//! the graft as a decode with [`RAW_INPUT`] set, so that only a graft that means to accept raw
//! bytes does (a compressor copies them; an encryptor fails their tag as it fails any forgery).
//!
//! # Keys
//!
//! An encrypting graft takes its key from its owner by control calls (the example
//! `chacha20poly1305_stream.c`: `vino_ctl_set_key(word, value)` four times, 64 bits each, and
//! `vino_ctl_forget_key()`), keeps it only in its own linear memory, and answers [`NEED_KEY`]
//! until it has one. Only the graft's owner may make control calls or write into its memory
//! (`Namespace::authorized`), and the kernel offers no system call that reads a graft's memory:
//! `GraftSlot::read_memory` is a kernel-internal function no process reaches, and the owner's
//! `graft_symbol` gives an address, not contents. The key leaves the instance only if the graft
//! itself exports it (a control function returning it, `vino_log`).
//!
//! # Who pays
//!
//! Compiling the module is charged to the owner's account, as every graft's load is. Each chunk's
//! encode or decode runs on the kernel thread that needs it (the write-back, or the reader's
//! miss); [`Codec`] adds its time to the account of the owner given at load
//! ([`Codec::load_for`] with an [`Owner`] carrying an account), so the owner who bound the codec
//! pays for it, whoever reads the file.

#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};
use vino_graft::account::Account;
use vino_graft::{Access, GraftPoint, GraftSlot, Invalid, LoadError, Owner, Runtime};

/// Plain bytes per chunk.
pub const CHUNK: usize = 65536;
/// How much longer than its plain bytes an encoded chunk may be, no more.
pub const MAX_GROWTH: usize = 4096;
/// The longest encoded chunk.
pub const MAX_ENCODED: usize = CHUNK + MAX_GROWTH;
/// Bytes of the nonce the kernel draws for each chunk written.
pub const NONCE_BYTES: usize = 24;
/// The argument area's header; the input follows it, then the output.
pub const HEADER: usize = 64;
/// The argument area a stream graft exports: header, input, output.
pub const ARG_BYTES: usize = HEADER + 2 * MAX_ENCODED;

/// Where the header's fields are in the argument area.
pub mod layout {
    use super::{HEADER, MAX_ENCODED, NONCE_BYTES};
    pub const NONCE: usize = 0;
    pub const CHUNK_INDEX: usize = NONCE + NONCE_BYTES;
    pub const PLAIN_LEN: usize = CHUNK_INDEX + 8;
    pub const OP: usize = PLAIN_LEN + 4;
    pub const FLAGS: usize = OP + 4;
    /// Zero up to the input.
    pub const RESERVED: usize = FLAGS + 4;
    pub const INPUT: usize = HEADER;
    pub const OUTPUT: usize = HEADER + MAX_ENCODED;
}

/// An encode's result: store the plain bytes as they are (`VINO_STREAM_RAW`).
pub const RAW: i32 = -2;
/// The graft has no key from its owner yet (`VINO_STREAM_NEED_KEY`).
pub const NEED_KEY: i32 = -3;
/// A decode's flag: the input is plain bytes that the peer's encoder answered [`RAW`] for; the
/// graft answers `plain_len` to accept them (copied to the output), or refuses.
pub const RAW_INPUT: u32 = 1;
/// The conventional refusal (`VINO_STREAM_FAILED`; any other negative result is one too).
pub const FAILED: i32 = -1;

/// What the kernel asks of a stream graft.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Op {
    Encode = 0,
    Decode = 1,
}

/// What encoding one chunk gave (and, inside the graftpoint, what a decode gave: `Coded`
/// holding the plain bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Encoded {
    /// The encoded bytes, to store.
    Coded(Vec<u8>),
    /// Store the plain bytes as they are, marked raw (a compressor that did not shrink them).
    Raw,
}

/// Why a chunk did not go through its codec.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StreamError {
    /// The graft answered [`NEED_KEY`]: its owner has not given it its key (`EACCES`).
    #[error("the stream graft has no key: its owner must give it one")]
    NeedKey,
    /// Anything else: a trap, the budget, memory, a refusal, output out of bounds, a decode to
    /// another length, no codec bound (`EIO`).
    #[error("the stream graft failed: {0}")]
    Failed(String),
}

/// The graftpoint `file.stream`. Entry point `file_stream(op: i32, chunk: i64, in_len: i32) ->
/// i32`; see the crate's documentation for the argument area and the results.
pub struct FileStream;

/// One chunk for the graft.
#[derive(Debug, Clone, Copy)]
pub struct ChunkArgs<'a> {
    pub op: Op,
    pub chunk: u64,
    pub input: &'a [u8],
    pub nonce: &'a [u8; NONCE_BYTES],
    /// The plain length: of the input for an encode, of the output for a decode.
    pub plain_len: usize,
    /// A decode of bytes the peer's encoder left raw ([`RAW_INPUT`]).
    pub raw: bool,
}

/// What the graftpoint decides for one chunk.
pub type ChunkResult = Result<Encoded, StreamError>;

/// The header and input of `args` into the argument area.
fn write_area(args: &ChunkArgs<'_>, area: &mut [u8]) {
    let header = &mut area[..HEADER];
    header[layout::NONCE..layout::CHUNK_INDEX].copy_from_slice(args.nonce);
    header[layout::CHUNK_INDEX..layout::PLAIN_LEN].copy_from_slice(&args.chunk.to_le_bytes());
    header[layout::PLAIN_LEN..layout::OP].copy_from_slice(&(args.plain_len as u32).to_le_bytes());
    header[layout::OP..layout::FLAGS].copy_from_slice(&(args.op as u32).to_le_bytes());
    let flags = if args.raw { RAW_INPUT } else { 0 };
    header[layout::FLAGS..layout::RESERVED].copy_from_slice(&flags.to_le_bytes());
    header[layout::RESERVED..].fill(0);
    area[layout::INPUT..layout::INPUT + args.input.len()].copy_from_slice(args.input);
}

/// The `n` bytes of output in the argument area.
fn output(area: &[u8], n: usize) -> Vec<u8> {
    area[layout::OUTPUT..layout::OUTPUT + n].to_vec()
}

/// A graft's answer [`NEED_KEY`] or another refusal: answers the graft may give (a corrupt
/// chunk is not the graft's fault), so they do not count towards unloading it.
fn refusal(result: i32) -> StreamError {
    match result {
        NEED_KEY => StreamError::NeedKey,
        n => StreamError::Failed(format!("the graft refused the chunk ({n})")),
    }
}

impl GraftPoint for FileStream {
    const NAME: &'static str = "file.stream";
    const USES_ARG_AREA: bool = true;
    const ARG_BYTES: usize = ARG_BYTES;
    const CLOCK: bool = false;
    /// A chunk's output is a function of its input and the keys; a failed chunk's is thrown
    /// away, and logging its 64 KiB of writes would double the data path's cost.
    const ROLL_BACK_MEMORY: bool = false;
    /// A codec takes no kernel lock (it has no graft-callable function), and the kernel calls it
    /// outside its transactions and the file's I/O lock: its per-chunk budget bounds it.
    const DEADLINE_CHECKS: bool = false;
    /// A chunk's work (64 KiB through a compressor or a cipher takes well under a millisecond
    /// natively); the bound on what one chunk adds to a read.
    const BUDGET: Duration = Duration::from_millis(10);
    const WAIT_WHEN_BUSY: bool = true;
    type Env = ();
    type Args<'a> = ChunkArgs<'a>;
    type Output = ChunkResult;
    type Params = (i32, i64, i32);
    type Results = i32;

    fn default_policy(_: &(), _: &ChunkArgs<'_>) -> ChunkResult {
        Err(StreamError::Failed("no codec".into()))
    }

    fn encode(_: &(), args: &ChunkArgs<'_>, area: &mut [u8]) -> (i32, i64, i32) {
        write_area(args, area);
        (args.op as i32, args.chunk as i64, args.input.len() as i32)
    }

    fn decode(_: &(), args: &ChunkArgs<'_>, result: i32, area: &[u8]) -> Result<ChunkResult, Invalid> {
        let in_len = args.input.len();
        match (args.op, result) {
            (Op::Encode, RAW) => Ok(Ok(Encoded::Raw)),
            (_, n) if n < 0 => Ok(Err(refusal(n))),
            (Op::Encode, n) if n as usize <= in_len + MAX_GROWTH => Ok(Ok(Encoded::Coded(output(area, n as usize)))),
            (Op::Encode, n) => Err(Invalid(format!(
                "{n} encoded bytes from {in_len}: more than {MAX_GROWTH} over the plain length"
            ))),
            (Op::Decode, n) if n as usize == args.plain_len => Ok(Ok(Encoded::Coded(output(area, n as usize)))),
            (Op::Decode, n) => Err(Invalid(format!(
                "decoded to {n} bytes, not the chunk's {}",
                args.plain_len
            ))),
        }
    }
}

/// One bound codec instance (a loaded stream graft), safe to call from many threads (calls into
/// the one instance take turns).
pub struct Codec {
    slot: Arc<GraftSlot<FileStream>>,
    /// Who pays for the chunks' CPU.
    account: Option<Arc<Account>>,
}

impl Codec {
    /// Loads `wasm` as a stream graft owned by process (principal) `owner`, the one that binds
    /// it. No account is charged for its chunks; see [`Codec::load_for`].
    pub fn load(runtime: &Runtime, owner: u64, wasm: &[u8]) -> Result<Codec, LoadError> {
        Self::load_for(runtime, Owner::process(owner), wasm)
    }

    /// Loads `wasm` for `owner`: its account (if any) is charged the load, as any graft's, and
    /// every chunk's CPU; its `notify` hears if the graft is unloaded for failing too often.
    pub fn load_for(runtime: &Runtime, owner: Owner, wasm: &[u8]) -> Result<Codec, LoadError> {
        let slot = Arc::new(GraftSlot::new(
            runtime,
            Arc::new(()),
            Access::Process(owner.process),
            None,
        ));
        let account = owner.account.clone();
        slot.load(wasm, owner)?;
        Ok(Codec { slot, account })
    }

    /// A codec calling through a slot the kernel keeps itself (named for its file), charging
    /// each chunk's CPU to `account`.
    pub fn from_slot(slot: Arc<GraftSlot<FileStream>>, account: Option<Arc<Account>>) -> Codec {
        Codec { slot, account }
    }

    /// The slot: for statistics and control calls (keys).
    pub fn slot(&self) -> &Arc<GraftSlot<FileStream>> {
        &self.slot
    }

    /// Encodes one chunk (`plain.len() <= CHUNK`). `nonce` is fresh for each call (the kernel
    /// draws it with [`fresh_nonce`] and stores it beside the chunk).
    pub fn encode(&self, chunk: u64, plain: &[u8], nonce: &[u8; NONCE_BYTES]) -> Result<Encoded, StreamError> {
        if plain.len() > CHUNK {
            return Err(StreamError::Failed(format!(
                "a chunk of {} bytes, more than {CHUNK}",
                plain.len()
            )));
        }
        self.run(&ChunkArgs {
            op: Op::Encode,
            chunk,
            input: plain,
            nonce,
            plain_len: plain.len(),
            raw: false,
        })
    }

    /// Decodes one chunk; the result is exactly `plain_len` bytes, or an error.
    pub fn decode(
        &self,
        chunk: u64,
        coded: &[u8],
        nonce: &[u8; NONCE_BYTES],
        plain_len: usize,
    ) -> Result<Vec<u8>, StreamError> {
        self.decode_as(chunk, coded, nonce, plain_len, false)
    }

    /// Asks the graft to take `plain`, bytes a peer's encoder left raw (a socket's frame marked
    /// raw): it answers with them, or refuses.
    pub fn decode_raw(&self, chunk: u64, plain: &[u8], nonce: &[u8; NONCE_BYTES]) -> Result<Vec<u8>, StreamError> {
        self.decode_as(chunk, plain, nonce, plain.len(), true)
    }

    fn decode_as(
        &self,
        chunk: u64,
        coded: &[u8],
        nonce: &[u8; NONCE_BYTES],
        plain_len: usize,
        raw: bool,
    ) -> Result<Vec<u8>, StreamError> {
        if coded.len() > MAX_ENCODED || plain_len > CHUNK {
            return Err(StreamError::Failed(format!(
                "{} encoded bytes for {plain_len} plain: out of bounds",
                coded.len()
            )));
        }
        let args = ChunkArgs {
            op: Op::Decode,
            chunk,
            input: coded,
            nonce,
            plain_len,
            raw,
        };
        match self.run(&args)? {
            Encoded::Coded(plain) => Ok(plain),
            Encoded::Raw => Err(StreamError::Failed("a decode answered raw".into())),
        }
    }

    /// One call: a failure of the graft is the chunk's error, never the default's answer.
    fn run(&self, args: &ChunkArgs<'_>) -> ChunkResult {
        let started = self.account.as_ref().map(|_| Instant::now());
        let result = self
            .slot
            .try_invoke(args)
            .unwrap_or_else(|failure| Err(StreamError::Failed(failure.to_string())));
        if let (Some(account), Some(started)) = (&self.account, started) {
            account.add_cpu(started.elapsed());
        }
        result
    }
}

thread_local! {
    /// The state of this thread's seeded nonces, if [`seed_nonces`] seeded them.
    static SEEDED: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// A fresh nonce from the OS's random source, or from this thread's seed (see [`seed_nonces`]).
pub fn fresh_nonce() -> [u8; NONCE_BYTES] {
    let mut nonce = [0; NONCE_BYTES];
    match SEEDED.get() {
        Some(state) => SEEDED.set(Some(fill_seeded(state, &mut nonce))),
        None => getrandom::fill(&mut nonce).expect("the host gives random bytes"),
    }
    nonce
}

/// Makes the nonces drawn on this thread a sequence fixed by `seed` (`None`: the OS's again).
/// For the simulator, whose runs must write the same bytes every time: a nonce repeats from one
/// run to the next, which no cipher may be given outside a test.
pub fn seed_nonces(seed: Option<u64>) {
    SEEDED.set(seed);
}

/// Fills `nonce` from a SplitMix64 sequence at `state`; returns the state after it.
fn fill_seeded(mut state: u64, nonce: &mut [u8]) -> u64 {
    for word in nonce.chunks_mut(8) {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        word.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes()[..word.len()]);
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_laid_out_as_documented() {
        let nonce = [7u8; NONCE_BYTES];
        let args = ChunkArgs {
            op: Op::Decode,
            chunk: 0x0102_0304_0506_0708,
            input: b"abc",
            nonce: &nonce,
            plain_len: 9,
            raw: true,
        };
        let mut area = vec![0xffu8; ARG_BYTES];
        let params = FileStream::encode(&(), &args, &mut area);
        assert_eq!(params, (1, 0x0102_0304_0506_0708, 3));
        assert_eq!(&area[..24], &nonce);
        assert_eq!(&area[24..32], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&area[32..36], &9u32.to_le_bytes());
        assert_eq!(&area[36..40], &1u32.to_le_bytes());
        assert_eq!(&area[40..44], &RAW_INPUT.to_le_bytes());
        assert!(area[44..64].iter().all(|&b| b == 0));
        assert_eq!(&area[64..67], b"abc");
        assert_eq!(layout::OUTPUT, 64 + 69632);
    }

    #[test]
    fn results_are_checked_against_the_bounds() {
        let nonce = [0u8; NONCE_BYTES];
        let input = [1u8; 100];
        let enc = ChunkArgs {
            op: Op::Encode,
            chunk: 0,
            input: &input,
            nonce: &nonce,
            plain_len: 100,
            raw: false,
        };
        let area = vec![5u8; ARG_BYTES];
        let decide = |args: &ChunkArgs<'_>, n| FileStream::decode(&(), args, n, &area);
        assert_eq!(decide(&enc, 3), Ok(Ok(Encoded::Coded(vec![5; 3]))));
        assert_eq!(decide(&enc, RAW), Ok(Ok(Encoded::Raw)));
        assert_eq!(decide(&enc, NEED_KEY), Ok(Err(StreamError::NeedKey)));
        assert!(matches!(decide(&enc, -1), Ok(Err(StreamError::Failed(_)))));
        assert!(decide(&enc, (100 + MAX_GROWTH) as i32).is_ok());
        assert!(decide(&enc, (101 + MAX_GROWTH) as i32).is_err());
        let dec = ChunkArgs {
            op: Op::Decode,
            plain_len: 50,
            ..enc
        };
        assert_eq!(decide(&dec, 50), Ok(Ok(Encoded::Coded(vec![5; 50]))));
        assert!(decide(&dec, 49).is_err() && decide(&dec, 51).is_err());
        assert!(matches!(decide(&dec, RAW), Ok(Err(StreamError::Failed(_)))));
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(fresh_nonce(), fresh_nonce());
    }

    #[test]
    fn seeded_nonces_repeat_per_seed_and_differ_from_draw_to_draw() {
        let draw = |seed| {
            seed_nonces(Some(seed));
            let drawn = [fresh_nonce(), fresh_nonce()];
            seed_nonces(None);
            drawn
        };
        let a = draw(7);
        assert_eq!(a, draw(7));
        assert_ne!(a[0], a[1]);
        assert_ne!(a, draw(8));
        assert_ne!(fresh_nonce(), fresh_nonce());
    }
}
