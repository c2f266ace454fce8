//! `vino bench streams`: what a stream graft (`file.stream`, Small 1998, 4.2) costs, in the
//! style of E3 (the same C, protected and native).
//!
//! **Codecs.** Each example codec (`sdk/grafts/lz4_stream.c`, `chacha20poly1305_stream.c`,
//! `crc32c_stream.c`) encodes and decodes every 64 KiB chunk of two corpora, once in Wasm
//! through [`Codec`] (the kernel's path: checked lengths, copies in and out of the argument
//! area, the graft under its fuel budget) and once as the same C compiled natively by the same
//! clang at the same `-O2` (`build.rs`: the sources are compiled into this program with the
//! `cc` crate, so the native side needs nothing at run time and calls no other process), called
//! through the same argument-area code ([`FileStream`]'s `encode`/`decode`). The two take turns
//! chunk by chunk, so a busy moment of the shared machine falls on both; each round is a pass
//! over the corpus; a side's time is the sum over the chunks of each chunk's median over the
//! rounds (a preempted call is one chunk's outlier), and the table gives each side's MB/s and
//! their ratio.
//! Both must give the same bytes.
//!
//! **Kernel path** ([`kernel_path`], [`kernel`]): both corpora written as whole files by a
//! process into a directory bound to each codec (and unbound) on a VINO image opened with
//! `O_DIRECT`, each file fsynced, the cache dropped and the files read back cold; beside the
//! same bytes written straight to the device, VINO unbound and with LZ4 again on E6's disk model
//! (a disk that sets the pace) and, where the machine allows (root, btrfs), btrfs plain and with
//! `compress=lzo` and `compress=zstd:1` ([`btrfs`]). The LZ4 codec's stored
//! size is set against the `lz4` command's on the same bytes.

mod btrfs;
pub mod kernel;

use anyhow::{Context, Result, bail, ensure};
pub use kernel::{CompressionRow, KernelPath, KernelRow};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;
use vino_graft::{GraftPoint, Interrupt, Runtime, RuntimeConfig};
use vino_measure::report::{ChartOptions, Table, bar_chart_with};
use vino_stream::{ARG_BYTES, CHUNK, ChunkArgs, Codec, Encoded, FileStream, NONCE_BYTES, Op};

/// What to run.
pub struct StreamsOptions {
    pub quick: bool,
    /// The binary corpus; the `vino` program next to this one if not given.
    pub binary: Option<PathBuf>,
    /// How the grafts' budget is enforced: fuel (the runtime's default, what grafts run under)
    /// or epoch ticks (to see what counting fuel costs).
    pub interrupt: Interrupt,
    /// Where the images go, in a fresh directory (not a tmpfs: `O_DIRECT`).
    pub scratch_dir: PathBuf,
    /// Measure btrfs too (root, a loop device, `mkfs.btrfs`).
    pub btrfs: bool,
}

/// The results.
#[derive(Debug, Serialize)]
pub struct StreamsReport {
    /// Rounds per measurement (each a pass over the corpus, Wasm and native in turn).
    pub rounds: usize,
    /// The grafts' budget enforcement: `Fuel` (the default) or `Epoch`.
    pub interrupt: String,
    /// `/proc/loadavg` (1, 5, 15 minutes) before and after.
    pub load_before: String,
    pub load_after: String,
    pub clang: String,
    pub corpora: Vec<Corpus>,
    pub codecs: Vec<CodecRow>,
    /// Through the kernel (see [`kernel_path`]).
    pub kernel: KernelPath,
}

/// One corpus.
#[derive(Debug, Serialize)]
pub struct Corpus {
    pub name: String,
    pub source: String,
    pub bytes: usize,
    pub chunks: usize,
}

/// One codec, one corpus, one direction.
#[derive(Debug, Serialize)]
pub struct CodecRow {
    pub codec: String,
    pub corpus: String,
    /// `encode` or `decode`.
    pub op: String,
    pub wasm_mb_s: f64,
    pub native_mb_s: f64,
    /// Wasm's time over native's (1.5 = Wasm takes half as long again).
    pub wasm_vs_native: f64,
    /// Stored bytes over plain bytes (raw chunks stored whole).
    pub stored_ratio: f64,
    /// Chunks stored raw.
    pub raw_chunks: usize,
}

/// The codecs measured: example graft name, native entry point and area, key (if it takes one).
struct Example {
    name: &'static str,
    native: Native,
    key: Option<[u8; 32]>,
}

/// The bench key of the encrypting codec.
const KEY: [u8; 32] = [0x5a; 32];

fn examples() -> Vec<Example> {
    vec![
        Example {
            name: "lz4_stream",
            native: native::lz4(),
            key: None,
        },
        Example {
            name: "chacha20poly1305_stream",
            native: native::chacha(),
            key: Some(KEY),
        },
        Example {
            name: "crc32c_stream",
            native: native::crc(),
            key: None,
        },
    ]
}

pub fn run(opts: &StreamsOptions, progress: &mut dyn FnMut(&str)) -> Result<StreamsReport> {
    let load_before = crate::vm::load_average();
    let limit = if opts.quick { 1 << 20 } else { 16 << 20 };
    let rounds = if opts.quick { 2 } else { 11 };
    let corpora = [
        ("source", source_corpus(limit)?),
        ("binary", binary_corpus(opts.binary.as_deref(), limit)?),
    ];
    let runtime = Runtime::new(RuntimeConfig {
        interrupt: opts.interrupt,
        ..RuntimeConfig::default()
    });
    let mut codecs = Vec::new();
    for ex in examples() {
        progress(&format!("building {}", ex.name));
        let wasm = vino_sdk::build_example(ex.name, &vino_sdk::BuildOptions::default())?;
        let codec = Codec::load(&runtime, 0, &wasm).with_context(|| format!("loading {}", ex.name))?;
        if let Some(key) = &ex.key {
            set_keys(&codec, &ex.native, key)?;
        }
        for (corpus, (_, data)) in &corpora {
            progress(&format!("{} on the {corpus} corpus", ex.name));
            codecs.extend(measure(&ex, &codec, corpus, data, rounds)?);
        }
    }
    let files: Vec<(&str, &[u8])> = corpora
        .iter()
        .map(|(name, (_, data))| (*name, data.as_slice()))
        .collect();
    let kernel = kernel_path(opts, &files, progress)?;
    let corpora = corpora
        .iter()
        .map(|(name, (source, data))| Corpus {
            name: name.to_string(),
            source: source.clone(),
            bytes: data.len(),
            chunks: data.len().div_ceil(CHUNK),
        })
        .collect();
    Ok(StreamsReport {
        rounds,
        interrupt: format!("{:?}", opts.interrupt),
        load_before,
        load_after: crate::vm::load_average(),
        clang: env!("VINO_BENCH_CLANG_VERSION").to_string(),
        corpora,
        codecs,
        kernel,
    })
}

/// The rows measured through the kernel (see the module's comment): each case's write+fsync
/// and cold read over the rounds, the stored sizes against the `lz4` command's.
pub fn kernel_path(
    opts: &StreamsOptions,
    files: &kernel::Files<'_>,
    progress: &mut dyn FnMut(&str),
) -> Result<KernelPath> {
    let load_before = crate::vm::load_average();
    let rounds = if opts.quick { 1 } else { 7 };
    let mut cases = vec![
        kernel::Case::Device,
        kernel::Case::Vino {
            codec: "none",
            wasm: None,
            key: None,
            model: false,
        },
    ];
    for ex in examples() {
        let wasm = vino_sdk::build_example(ex.name, &vino_sdk::BuildOptions::default())?;
        cases.push(kernel::Case::Vino {
            codec: ex.name,
            wasm: Some(std::sync::Arc::new(wasm)),
            key: ex.key,
            model: false,
        });
    }
    if !opts.quick {
        // Where the disk is the bottleneck: E6's model of a 1996 disk, unbound and LZ4.
        let lz4 = cases.iter().find_map(|c| match c {
            kernel::Case::Vino {
                codec: "lz4_stream",
                wasm,
                ..
            } => wasm.clone(),
            _ => None,
        });
        for (codec, wasm) in [("none", None), ("lz4_stream", lz4)] {
            cases.push(kernel::Case::Vino {
                codec,
                wasm,
                key: None,
                model: true,
            });
        }
    }
    let mut notes = Vec::new();
    if opts.btrfs {
        match btrfs::unavailable() {
            None => cases.extend(
                [None, Some("lzo"), Some("zstd:1")]
                    .into_iter()
                    .map(|compress| kernel::Case::Btrfs { compress }),
            ),
            Some(why) => notes.push(format!("btrfs not measured: {why}")),
        }
    } else {
        notes.push("btrfs not measured (not asked for)".into());
    }
    let scratch = crate::front::scratch_dir(&opts.scratch_dir)?;
    let direct = direct_io_works(scratch.path())?;
    let (rows, first) = kernel::measure(&cases, scratch.path(), files, rounds, progress)?;
    let mut compression = Vec::new();
    for (i, (corpus, data)) in files.iter().enumerate() {
        compression.extend(compressed_sizes(corpus, data, i, &cases, &first, &mut notes)?);
    }
    Ok(KernelPath {
        rounds,
        bytes: files.iter().map(|(_, d)| d.len() as u64).sum(),
        direct,
        cache_frames: kernel::cache_frames(files),
        rows,
        compression,
        notes,
        load_before,
        load_after: crate::vm::load_average(),
    })
}

/// Whether an image in `dir` opens with `O_DIRECT` (else the host's cache is in the path).
fn direct_io_works(dir: &Path) -> Result<bool> {
    std::fs::create_dir_all(dir)?;
    let path = crate::e6_layout::image_path(dir, "streams-probe");
    drop(vino_blockdev::FileDevice::create(&path, 1 << 20)?);
    let disk = crate::e6_layout::Disk::open(&path, crate::e6_layout::DeviceKind::Plain);
    let _ = std::fs::remove_file(&path);
    Ok(disk?.direct())
}

/// One corpus' compressed sizes: VINO's LZ4 codec (exact and in whole blocks), the `lz4`
/// command with 64 KiB independent blocks and with its default 4 MiB blocks, btrfs'.
fn compressed_sizes(
    corpus: &str,
    data: &[u8],
    index: usize,
    cases: &[kernel::Case],
    first: &[kernel::Sample],
    notes: &mut Vec<String>,
) -> Result<Vec<CompressionRow>> {
    let lz4_64k = match lz4_command(&["-1", "-B4", "-BI"], data) {
        Ok(n) => Some(n),
        Err(e) => {
            notes.push(format!("the lz4 command: {e:#}"));
            None
        }
    };
    let mut sizes: Vec<(String, u64)> = Vec::new();
    for (case, s) in cases.iter().zip(first) {
        match case {
            kernel::Case::Vino {
                codec: "lz4_stream",
                model: false,
                ..
            } => {
                if let Some(coded) = &s.coded {
                    sizes.push(("VINO lz4_stream: chunks' coded bytes".into(), coded[index]));
                }
                sizes.push(("VINO lz4_stream: st_blocks × 4 KiB".into(), s.stored[index]));
            }
            kernel::Case::Btrfs { compress: Some(c) } => {
                sizes.push((format!("btrfs compress={c}: data space used"), s.stored[index]));
            }
            _ => {}
        }
    }
    if let Some(n) = lz4_64k {
        sizes.push(("lz4 -1 -B4 (64 KiB independent blocks)".into(), n));
        if let Ok(n) = lz4_command(&["-1"], data) {
            sizes.push(("lz4 -1 (default: 4 MiB blocks)".into(), n));
        }
    }
    Ok(sizes
        .into_iter()
        .map(|(what, bytes)| CompressionRow {
            corpus: corpus.to_string(),
            what,
            bytes,
            ratio: bytes as f64 / data.len() as f64,
            vs_lz4_64k: lz4_64k.map(|l| bytes as f64 / l as f64),
        })
        .collect())
}

/// The size of `lz4 <args> -c` on `data` (fed on standard input).
fn lz4_command(args: &[&str], data: &[u8]) -> Result<u64> {
    use std::io::{Read, Write};
    let mut child = std::process::Command::new("lz4")
        .args(args)
        .arg("-c")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("running lz4")?;
    let mut stdin = child.stdin.take().context("lz4's stdin")?;
    let mut stdout = child.stdout.take().context("lz4's stdout")?;
    let counted = std::thread::scope(|s| {
        let reader = s.spawn(move || -> std::io::Result<u64> {
            let mut buf = Vec::new();
            stdout.read_to_end(&mut buf)?;
            Ok(buf.len() as u64)
        });
        let written = stdin.write_all(data);
        drop(stdin);
        written.and(reader.join().expect("lz4 reader"))
    })?;
    ensure!(child.wait()?.success(), "lz4 {args:?} failed");
    Ok(counted)
}

/// This repository's Rust sources (`crates/*/src`), concatenated, at most `limit` bytes.
fn source_corpus(limit: usize) -> Result<(String, Vec<u8>)> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates");
    let mut files = Vec::new();
    rust_files(&crates, &mut files)?;
    files.sort();
    let mut data = Vec::new();
    for f in files {
        if data.len() >= limit {
            break;
        }
        data.extend(std::fs::read(&f)?);
    }
    data.truncate(limit);
    Ok(("crates/*/src/**/*.rs of this repository".into(), data))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() && !path.ends_with("target") {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") && path.components().any(|c| c.as_os_str() == "src") {
            out.push(path);
        }
    }
    Ok(())
}

/// A release binary's first `limit` bytes: `binary`, or the `vino` program beside this one.
fn binary_corpus(binary: Option<&Path>, limit: usize) -> Result<(String, Vec<u8>)> {
    let path = match binary {
        Some(p) => p.to_path_buf(),
        None => {
            let exe = std::env::current_exe()?;
            let vino = exe.with_file_name("vino");
            if vino.is_file() { vino } else { exe }
        }
    };
    let mut data = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    data.truncate(limit);
    Ok((path.display().to_string(), data))
}

/// Gives the Wasm codec and the native one the same key.
fn set_keys(codec: &Codec, native: &Native, key: &[u8; 32]) -> Result<()> {
    for (word, bytes) in key.chunks(8).enumerate() {
        let value = i64::from_le_bytes(bytes.try_into().expect("8 bytes"));
        ensure!(
            codec.slot().call_control("set_key", &[word as i64, value])? == 0,
            "set_key"
        );
        ensure!(native.set_key(word as i32, value) == 0, "native set_key");
    }
    Ok(())
}

/// What one pass over a corpus stored: each chunk's nonce and encoding.
type Stored = Vec<([u8; NONCE_BYTES], Encoded)>;

/// Seconds each chunk took on each side in one pass: `[encode, decode][wasm, native][chunk]`
/// (decode: 0 for a chunk stored raw).
type PassTimes = [[Vec<f64>; 2]; 2];

/// The encode and decode rows of one codec on one corpus.
fn measure(ex: &Example, codec: &Codec, corpus: &str, data: &[u8], rounds: usize) -> Result<Vec<CodecRow>> {
    let chunks: Vec<&[u8]> = data.chunks(CHUNK).collect();
    // One nonce per chunk for the whole run, so both sides' bytes can be compared.
    let nonces: Vec<[u8; NONCE_BYTES]> = chunks.iter().map(|_| vino_stream::fresh_nonce()).collect();
    let (_, stored) = pass(ex, codec, &chunks, &nonces)?; // warm-up: tables, caches, pages
    let mut passes = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        passes.push(pass(ex, codec, &chunks, &nonces)?.0);
    }
    let stored_bytes: usize = stored
        .iter()
        .zip(&chunks)
        .map(|((_, e), plain)| match e {
            Encoded::Coded(b) => b.len(),
            Encoded::Raw => plain.len(),
        })
        .sum();
    let raw_chunks = stored.iter().filter(|(_, e)| *e == Encoded::Raw).count();
    let mb = data.len() as f64 / 1e6;
    // A side's time: each chunk's median over the rounds, summed (a preempted call is one
    // chunk's outlier, not the round's).
    let time = |op: usize, side: usize| -> f64 {
        (0..chunks.len())
            .map(|c| median(&mut passes.iter().map(|p| p[op][side][c]).collect::<Vec<_>>()))
            .sum()
    };
    Ok(["encode", "decode"]
        .iter()
        .enumerate()
        .map(|(op_index, op)| {
            let (w, n) = (time(op_index, 0), time(op_index, 1));
            CodecRow {
                codec: ex.name.to_string(),
                corpus: corpus.to_string(),
                op: op.to_string(),
                wasm_mb_s: mb / w,
                native_mb_s: mb / n,
                wasm_vs_native: w / n,
                stored_ratio: stored_bytes as f64 / data.len() as f64,
                raw_chunks,
            }
        })
        .collect())
}

/// One pass over the corpus, chunk by chunk, each chunk through both sides in turn (which goes
/// first alternating), so a busy moment of the machine falls on both alike. Checks that both
/// sides store the same bytes and that every chunk decodes back.
fn pass(ex: &Example, codec: &Codec, chunks: &[&[u8]], nonces: &[[u8; NONCE_BYTES]]) -> Result<(PassTimes, Stored)> {
    let zeros = || vec![0.0; chunks.len()];
    let mut t: PassTimes = [[zeros(), zeros()], [zeros(), zeros()]];
    let mut stored = Stored::with_capacity(chunks.len());
    for (i, (plain, nonce)) in chunks.iter().zip(nonces).enumerate() {
        let index = i as u64;
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut encoded = [None, None];
        for side in order {
            let started = Instant::now();
            let e = match side {
                0 => codec.encode(index, plain, nonce),
                _ => ex.native.encode(index, plain, nonce),
            };
            t[0][side][i] = started.elapsed().as_secs_f64();
            encoded[side] = Some(e.with_context(|| format!("{}: encoding chunk {i}", ex.name))?);
        }
        let [Some(wasm), Some(native)] = encoded else {
            unreachable!("both sides encoded")
        };
        ensure!(
            wasm == native,
            "{}: chunk {i}: Wasm and native encodings differ",
            ex.name
        );
        if let Encoded::Coded(bytes) = &wasm {
            for side in order {
                let started = Instant::now();
                let back = match side {
                    0 => codec.decode(index, bytes, nonce, plain.len()),
                    _ => ex.native.decode(index, bytes, nonce, plain.len()),
                };
                t[1][side][i] = started.elapsed().as_secs_f64();
                let back = back.with_context(|| format!("{}: decoding chunk {i}", ex.name))?;
                if back != *plain {
                    bail!("{}: chunk {i} decoded to other bytes", ex.name);
                }
            }
        }
        stored.push((*nonce, wasm));
    }
    Ok((t, stored))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A stream graft's C compiled natively (`build.rs`), called through the same argument-area
/// code as the Wasm one.
pub struct Native {
    entry: unsafe extern "C" fn(i32, i64, i32) -> i32,
    area: *mut u8,
    set_key: Option<unsafe extern "C" fn(i32, i64) -> i32>,
}

impl Native {
    fn call(&self, args: &ChunkArgs<'_>) -> vino_stream::ChunkResult {
        // SAFETY: `area` is the C file's own `vino_args`, ARG_BYTES long (the header's
        // VINO_STREAM_ARGS size, asserted there equal to VINO_STREAM_ARG_BYTES, and that to
        // vino-stream's by the test below); one thread uses it at a time (`Native` is neither
        // Send nor Sync) and the slice is not kept past this call.
        let area = unsafe { std::slice::from_raw_parts_mut(self.area, ARG_BYTES) };
        let (op, chunk, len) = FileStream::encode(&(), args, area);
        // SAFETY: the entry point reads and writes only its own `vino_args`, within
        // ARG_BYTES, as the Wasm one does (the same C); the area was filled above.
        let result = unsafe { (self.entry)(op, chunk, len) };
        FileStream::decode(&(), args, result, area)
            .unwrap_or_else(|invalid| Err(vino_stream::StreamError::Failed(invalid.0)))
    }

    pub fn encode(
        &self,
        chunk: u64,
        plain: &[u8],
        nonce: &[u8; NONCE_BYTES],
    ) -> Result<Encoded, vino_stream::StreamError> {
        self.call(&ChunkArgs {
            op: Op::Encode,
            chunk,
            input: plain,
            nonce,
            plain_len: plain.len(),
            raw: false,
        })
    }

    pub fn decode(
        &self,
        chunk: u64,
        coded: &[u8],
        nonce: &[u8; NONCE_BYTES],
        plain_len: usize,
    ) -> Result<Vec<u8>, vino_stream::StreamError> {
        match self.call(&ChunkArgs {
            op: Op::Decode,
            chunk,
            input: coded,
            nonce,
            plain_len,
            raw: false,
        })? {
            Encoded::Coded(plain) => Ok(plain),
            Encoded::Raw => Err(vino_stream::StreamError::Failed("raw from a decode".into())),
        }
    }

    fn set_key(&self, word: i32, value: i64) -> i32 {
        // SAFETY: the control function writes only the C file's own key.
        self.set_key.map_or(-1, |f| unsafe { f(word, value) })
    }
}

/// The native stream grafts' symbols (`build.rs` renames each file's with its prefix).
mod native {
    use super::Native;

    // SAFETY: these are the C definitions build.rs compiles, with these exact types: the
    // header's `int32_t file_stream(int32_t, int64_t, int32_t)`, `unsigned char
    // vino_args[VINO_STREAM_ARG_BYTES]` and the key control `int32_t set_key(int32_t, int64_t)`.
    unsafe extern "C" {
        fn lz4_file_stream(op: i32, chunk: i64, in_len: i32) -> i32;
        static mut lz4_vino_args: [u8; vino_stream::ARG_BYTES];
        fn chacha_file_stream(op: i32, chunk: i64, in_len: i32) -> i32;
        static mut chacha_vino_args: [u8; vino_stream::ARG_BYTES];
        fn chacha_set_key(word: i32, value: i64) -> i32;
        fn crc_file_stream(op: i32, chunk: i64, in_len: i32) -> i32;
        static mut crc_vino_args: [u8; vino_stream::ARG_BYTES];
    }

    pub(super) fn lz4() -> Native {
        Native {
            entry: lz4_file_stream,
            area: (&raw mut lz4_vino_args).cast(),
            set_key: None,
        }
    }

    pub(super) fn chacha() -> Native {
        Native {
            entry: chacha_file_stream,
            area: (&raw mut chacha_vino_args).cast(),
            set_key: Some(chacha_set_key),
        }
    }

    pub(super) fn crc() -> Native {
        Native {
            entry: crc_file_stream,
            area: (&raw mut crc_vino_args).cast(),
            set_key: None,
        }
    }
}

impl StreamsReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            format!(
                "Stream codecs, 64 KiB chunks: Wasm through Codec against the same C native (each chunk's median of {} rounds)",
                self.rounds
            ),
            &[
                "codec",
                "corpus",
                "op",
                "Wasm MB/s",
                "native MB/s",
                "Wasm / native",
                "stored",
            ],
        );
        for r in &self.codecs {
            t.row([
                r.codec.clone(),
                r.corpus.clone(),
                r.op.clone(),
                format!("{:.0}", r.wasm_mb_s),
                format!("{:.0}", r.native_mb_s),
                format!("{:.2}x", r.wasm_vs_native),
                format!("{:.3}", r.stored_ratio),
            ]);
        }
        for c in &self.corpora {
            t.note(format!(
                "{}: {} bytes, {} chunks, from {}",
                c.name, c.bytes, c.chunks, c.source
            ));
        }
        t.note(format!(
            "load before {}, after {}; {}; the grafts' budget counted by {}",
            self.load_before, self.load_after, self.clang, self.interrupt
        ));
        let mut tables = vec![t];
        tables.extend(self.kernel.tables());
        tables
    }

    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = self
            .codecs
            .iter()
            .map(|r| {
                (
                    format!("{} {} {}", r.codec.trim_end_matches("_stream"), r.corpus, r.op),
                    vec![("Wasm".to_string(), r.wasm_mb_s), ("native".to_string(), r.native_mb_s)],
                )
            })
            .collect();
        bar_chart_with(
            path,
            "Stream codecs: Wasm (protected) against native, 64 KiB chunks",
            "MB/s (median)",
            &groups,
            &ChartOptions {
                value_labels: false,
                log_scale: Some(false),
                ..ChartOptions::default()
            },
        )?;
        self.kernel.plot(&path.with_file_name("streams-kernel.svg"))
    }
}

#[cfg(test)]
mod tests {
    /// The native argument area is the size vino-stream says (the C header's is asserted equal
    /// to VINO_STREAM_ARG_BYTES, and this to vino-stream's).
    #[test]
    fn the_native_area_has_the_graftpoints_size() {
        assert_eq!(vino_sdk::STREAM_ARG_BYTES, vino_stream::ARG_BYTES);
        assert_eq!(
            <vino_stream::FileStream as vino_graft::GraftPoint>::ARG_BYTES,
            vino_stream::ARG_BYTES
        );
    }
}
