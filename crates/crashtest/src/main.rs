//! `vino-crashtest`: the workload the crash test (`tests/crash.rs`) kills, and the check of the
//! image it was killed on. Not part of the `vino` command.
//!
//! `vino-crashtest workload IMAGE --log LOG [--seed N]` appends to a few files through the kernel
//! and fsyncs at random until killed, logging on the host what was fsync'd, and between the
//! appends changes names: symbolic links, FIFOs, hard links, renames over names, extended
//! attributes, fallocate, and files unlinked while open (left on the orphan list by the kill);
//! `vino-crashtest check IMAGE --log LOG` then requires fsck to find the image clean after journal
//! replay and every fsync'd byte to be there (exit status 1 and the problems on stderr if not).
//!
//! With `--codecs DIR` (modules `DIR/<name>.wasm`, see [`STREAM_CODECS`] and [`HOSTILE_CODEC`])
//! two of the files appended to are stream files, bound to a compressor and an integrity codec,
//! and a third is bound to a codec that traps on some chunks: the workload requires fsync of
//! such a chunk to fail and the kernel to go on, and the checker that no trapped chunk, nor any
//! part of one, was stored.

#![forbid(unsafe_code)]

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use vino_blockdev::{BlockDevice, FileDevice};

#[derive(Parser)]
#[command(name = "vino-crashtest")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The workload the crash tests kill (appends, fsyncs and logs what was fsync'd).
    Workload {
        image: PathBuf,
        #[arg(long)]
        log: PathBuf,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The stream codecs' modules (`<name>.wasm`): with them, stream files too.
        #[arg(long)]
        codecs: Option<PathBuf>,
    },
    /// Checks an image the workload was killed on: fsck clean, fsync'd data present.
    Check {
        image: PathBuf,
        #[arg(long)]
        log: PathBuf,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Workload {
            image,
            log,
            seed,
            codecs,
        } => crash_workload(&image, &log, seed, codecs.as_deref()),
        Command::Check { image, log } => crash_check(&image, &log).and_then(|wrong| {
            for w in &wrong {
                eprintln!("{}: {w}", image.display());
            }
            if wrong.is_empty() {
                Ok(())
            } else {
                anyhow::bail!("{} problems after the crash", wrong.len())
            }
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vino-crashtest: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Files appended to: `/crash0` .. `/crash3` plain, then one stream file per codec of
/// [`STREAM_CODECS`] (with `--codecs`).
const PLAIN_FILES: usize = 4;
const STREAM_CODECS: [&str; 2] = ["lz4_stream", "crc32c_stream"];
const FILES: usize = PLAIN_FILES + STREAM_CODECS.len();
/// The codec of the hostile file (`/crash6`, whole chunks rewritten): it copies a chunk, but
/// writes half of it and traps when the chunk starts with [`POISON`].
const HOSTILE_CODEC: &str = "stream_partial_trap";
const HOSTILE_FILE: &str = "/crash6";
const POISON: u8 = b'T';
/// Chunks of the hostile file the workload rewrites.
const HOSTILE_CHUNKS: u64 = 4;
const CHUNK: u64 = vino_fs::CHUNK_BYTES as u64;

/// The byte at `offset` of crash-test file `file`: known to the checker without a copy. Text a
/// compressor shrinks in a stream file, noise in a plain one.
fn crash_byte(file: u32, offset: u64) -> u8 {
    if file as usize >= PLAIN_FILES {
        const TEXT: &[u8] = b"the quick brown fox jumps over the lazy dog ";
        return TEXT[((offset * 7 + offset / 4096 + u64::from(file)) % TEXT.len() as u64) as usize];
    }
    let x = offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(file).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    (x >> 56) as u8
}

/// Chunk `chunk` of the hostile file at `version`: `G`, the version, then bytes of both (never
/// starting with [`POISON`]), so that the checker knows a whole chunk from a part of one.
fn hostile_chunk(chunk: u64, version: u64) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..CHUNK)
        .map(|o| crash_byte(chunk as u32, o ^ version.rotate_left(23)))
        .collect();
    bytes[0] = b'G';
    bytes[1..9].copy_from_slice(&version.to_le_bytes());
    bytes
}

/// The path of crash-test file `f`.
fn crash_path(f: usize) -> String {
    format!("/crash{f}")
}

/// Opens (creating) `path` for the workload; binds `codec` to it while it is empty and unbound
/// (a kill may have come between its creation and the binding). Returns it and its size.
fn open_crash_file(p: &vino_kernel::Process, path: &str, codec: Option<&[u8]>) -> Result<(vino_kernel::Fd, u64)> {
    let fd = p.open(
        path,
        vino_kernel::OpenFlags {
            create: true,
            read: true,
            write: true,
            mode: 0o644,
            ..Default::default()
        },
    )?;
    let size = p.fstat(fd)?.size;
    if let Some(codec) = codec
        && size == 0
        && p.stream_status(path)?.is_none()
    {
        p.stream_bind(path, Some(codec))?;
    }
    Ok((fd, size))
}

/// The module `name` in the codec directory.
fn read_codec(dir: &Path, name: &str) -> Result<Vec<u8>> {
    let path = dir.join(format!("{name}.wasm"));
    std::fs::read(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The crash-test workload: appends to a few files through the kernel, fsyncs at random, and
/// after each fsync appends `file size` to `log` on the host (synced), so a checker knows what
/// must survive. Runs until killed.
fn crash_workload(image: &Path, log: &Path, seed: u64, codecs: Option<&Path>) -> Result<()> {
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(image)?);
    let config = vino_kernel::KernelConfig {
        cache_frames: 128,
        ..Default::default()
    };
    let kernel = vino_kernel::Kernel::boot(dev, &config)?;
    let p = kernel.spawn(vino_kernel::Credentials::root());
    let log_path = log;
    let mut log = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let mut rng = seed | 1;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let files = if codecs.is_some() { FILES } else { PLAIN_FILES };
    let mut fds = Vec::new();
    for f in 0..files {
        let codec = match (codecs, f.checked_sub(PLAIN_FILES)) {
            (Some(dir), Some(i)) => Some(read_codec(dir, STREAM_CODECS[i])?),
            _ => None,
        };
        fds.push(open_crash_file(&p, &crash_path(f), codec.as_deref())?);
    }
    // A stream file's size on disk grows over the chunks stored, which write-back may store out
    // of order: past what was fsync'd, a kill can leave a chunk not yet stored (zeros) before
    // one that was. Appends go on from the fsync'd end, as the checker expects.
    let fsynced = read_log(log_path);
    for (f, (fd, size)) in fds.iter_mut().enumerate().skip(PLAIN_FILES) {
        if *size > fsynced.sizes[f] {
            p.ftruncate(*fd, fsynced.sizes[f])?;
            *size = fsynced.sizes[f];
        }
    }
    let hostile = match codecs {
        Some(dir) => Some(open_crash_file(&p, HOSTILE_FILE, Some(&read_codec(dir, HOSTILE_CODEC)?))?.0),
        None => None,
    };
    let mut held = Vec::new();
    let mut hostile_steps = 0u64;
    loop {
        if let Some(fd) = hostile
            && next() % 8 == 0
        {
            hostile_step(&p, fd, next() % HOSTILE_CHUNKS, hostile_steps, &mut log)?;
            hostile_steps += 1;
        }
        let f = (next() % files as u64) as usize;
        if fds[f].1 > 4 << 20 {
            // Keep the image from filling: say so first, so the checker expects nothing of f.
            log_line(&mut log, &format!("{f} reset"))?;
            p.ftruncate(fds[f].0, 0)?;
            fds[f].1 = 0;
        }
        let (fd, size) = fds[f];
        let len = 1 + next() % 20_000;
        let data: Vec<u8> = (size..size + len).map(|o| crash_byte(f as u32, o)).collect();
        p.pwrite(fd, &data, size)?;
        fds[f].1 = size + len;
        if next() % 3 == 0 {
            p.fsync(fd)?;
            log_line(&mut log, &format!("{f} {}", size + len))?;
        }
        if next() % 25 == 0 {
            namespace_change(&p, next(), &mut held)?;
        }
    }
}

/// Rewrites chunk `chunk` of the hostile file whole and fsyncs it, logging its version; every
/// fourth step first writes a chunk its codec traps on, whose fsync must fail with EIO and leave
/// the kernel working. Few enough traps that the codec is never unloaded for failing too often
/// (half of its calls in a minute).
fn hostile_step(
    p: &vino_kernel::Process,
    fd: vino_kernel::Fd,
    chunk: u64,
    step: u64,
    log: &mut std::fs::File,
) -> Result<()> {
    if step.is_multiple_of(4) {
        p.pwrite(fd, &vec![POISON; CHUNK as usize], chunk * CHUNK)?;
        match p.fsync(fd) {
            Err(e) if e.errno == vino_kernel::Errno::Io => {}
            other => anyhow::bail!("fsync of a chunk its codec traps on: {other:?}, not EIO"),
        }
    }
    // A version later than any of an earlier run's: the checker requires the latest fsync'd.
    let version = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64;
    p.pwrite(fd, &hostile_chunk(chunk, version), chunk * CHUNK)?;
    p.fsync(fd)?;
    Ok(log_line(log, &format!("hostile {chunk} {version}"))?)
}

/// One namespace change of the crash workload, chosen by `r`: scratch files, symbolic links,
/// FIFOs, hard links, renames over a name, extended attributes, fallocate, and files unlinked
/// while still open (`held` keeps a few open, so that a kill leaves them on the orphan list,
/// which the next mount or fsck frees).
fn namespace_change(p: &vino_kernel::Process, r: u64, held: &mut Vec<vino_kernel::Fd>) -> Result<()> {
    use vino_kernel::{At, FileType, OpenFlags};
    let name = format!("/tmp{}", r % 8);
    let other = format!("/tmp{}", (r >> 8) % 8);
    // Each may fail (the name exists or is gone): the crash is what is tested, not the calls.
    match (r >> 16) % 8 {
        0 => {
            if let Ok(t) = p.open(&name, OpenFlags::create()) {
                p.write(t, b"scratch")?;
                p.close(t)?;
            }
        }
        1 => drop(p.symlink(&other, &name)),
        2 => drop(p.mknod_at(At::Root, &name, FileType::Fifo, 0o644, 0)),
        3 => drop(p.link(&other, &name)),
        4 => drop(p.rename(&other, &name)),
        5 => drop(p.setxattr_at(
            At::Root,
            &name,
            false,
            b"user.crash",
            &r.to_le_bytes(),
            vino_fs::XattrSet::Any,
        )),
        6 => {
            if let Ok(t) = p.open(&name, OpenFlags::read_write()) {
                let _ = p.fallocate(t, r.is_multiple_of(2), 0, 1 + (r >> 24) % 100_000);
                p.close(t)?;
            }
        }
        _ => {
            if held.len() >= 4 {
                p.close(held.remove(0))?;
            }
            if let Ok(t) = p.open(&name, OpenFlags::create()) {
                p.write(t, b"held while unlinked")?;
                let _ = p.unlink(&name);
                held.push(t);
            }
        }
    }
    if r.is_multiple_of(5) {
        let _ = p.unlink(&name);
    }
    Ok(())
}

/// Appends one line to the crash workload's log and forces it out. One `write` for the whole
/// line: `writeln!` writes piece by piece, and a kill between the pieces left a torn line.
fn log_line(log: &mut std::fs::File, line: &str) -> std::io::Result<()> {
    log.write_all(format!("{line}\n").as_bytes())?;
    log.sync_data()
}

/// Checks an image after a crash against the crash workload's log: fsck must call it clean
/// after journal replay, and every fsync'd byte must be there. Returns what is wrong.
fn crash_check(image: &Path, log: &Path) -> Result<Vec<String>> {
    let mut wrong = Vec::new();
    let dev = FileDevice::open(image)?;
    let report = vino_fs::fsck(&dev, true)?;
    wrong.extend(
        report
            .problems
            .iter()
            .map(|p| format!("fsck: {:?}: {}", p.kind, p.detail)),
    );
    let second = vino_fs::fsck(&dev, false)?;
    if !second.is_clean() {
        wrong.push(format!(
            "fsck still finds {} problems after replay",
            second.problems.len()
        ));
    }
    // One user of an image at a time: fsck's device goes before the kernel boots on it.
    drop(dev);
    let Fsynced {
        sizes: durable,
        versions,
        unreadable,
    } = read_log(log);
    wrong.extend(unreadable.iter().map(|line| format!("unreadable log line `{line}`")));
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(image)?);
    let kernel = vino_kernel::Kernel::boot(
        dev,
        &vino_kernel::KernelConfig {
            writeback_every: None,
            ..Default::default()
        },
    )?;
    let p = kernel.spawn(vino_kernel::Credentials::root());
    for (f, &size) in durable.iter().enumerate() {
        if size == 0 {
            continue;
        }
        let path = crash_path(f);
        if f >= PLAIN_FILES && !matches!(p.stream_status(&path), Ok(Some(_))) {
            wrong.push(format!("{path}: no stream codec bound (fsync'd {size} bytes)"));
        }
        let buf = match read_all(&p, &path, size) {
            Ok(buf) => buf,
            Err(e) => {
                wrong.push(format!("{path}: {e} (fsync'd {size} bytes)"));
                continue;
            }
        };
        let n = buf.len();
        if (n as u64) < size {
            wrong.push(format!("{path}: {n} bytes, {size} were fsync'd"));
        }
        if let Some(o) = (0..n).find(|&o| buf[o] != crash_byte(f as u32, o as u64)) {
            let zeros = buf[o..].iter().take_while(|&&b| b == 0).count();
            wrong.push(format!(
                "{path}: byte {o} of {n} differs ({:#04x}, not {:#04x}; {zeros} zeros from there)",
                buf[o],
                crash_byte(f as u32, o as u64)
            ));
        }
    }
    if versions.iter().any(|&v| v > 0) {
        wrong.extend(check_hostile(&p, &versions));
    }
    kernel.shutdown()?;
    Ok(wrong)
}

/// What the workload's log says was fsync'd.
struct Fsynced {
    /// Of each file, the size.
    sizes: [u64; FILES],
    /// Of each chunk of the hostile file, the version (0: none).
    versions: [u64; HOSTILE_CHUNKS as usize],
    /// Lines that are none of the workload's.
    unreadable: Vec<String>,
}

fn read_log(log: &Path) -> Fsynced {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut fsynced = Fsynced {
        sizes: [0; FILES],
        versions: [0; HOSTILE_CHUNKS as usize],
        unreadable: Vec::new(),
    };
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let numbers: Vec<Option<u64>> = words.iter().map(|w| w.parse().ok()).collect();
        match (&words[..], &numbers[..]) {
            ([_, "reset"], [Some(f), _]) if *f < FILES as u64 => fsynced.sizes[*f as usize] = 0,
            (_, [Some(f), Some(size)]) if *f < FILES as u64 => {
                let at = &mut fsynced.sizes[*f as usize];
                *at = (*at).max(*size);
            }
            (["hostile", ..], [_, Some(c), Some(v)]) if *c < HOSTILE_CHUNKS => {
                let at = &mut fsynced.versions[*c as usize];
                *at = (*at).max(*v);
            }
            ([], _) => {}
            _ => fsynced.unreadable.push(line.to_string()),
        }
    }
    fsynced
}

/// Up to `len` bytes of `path` from its start (fewer at its end).
fn read_all(p: &vino_kernel::Process, path: &str, len: u64) -> Result<Vec<u8>, vino_kernel::SysError> {
    let fd = p.open(path, vino_kernel::OpenFlags::read_only())?;
    let mut buf = vec![0u8; len as usize];
    let mut done = 0;
    while done < buf.len() {
        match p.pread(fd, &mut buf[done..], done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    buf.truncate(done);
    p.close(fd)?;
    Ok(buf)
}

/// The hostile file after the crash: every chunk decodes, and is a hole or one whole version
/// the workload wrote (never a chunk its codec trapped on, nor part of one), no older than the
/// version last fsync'd (`versions`, by chunk; 0 where none was).
fn check_hostile(p: &vino_kernel::Process, versions: &[u64]) -> Vec<String> {
    let mut wrong = Vec::new();
    let bytes = match read_all(p, HOSTILE_FILE, CHUNK * HOSTILE_CHUNKS) {
        Ok(bytes) => bytes,
        Err(e) => return vec![format!("{HOSTILE_FILE}: {e}")],
    };
    for (c, &fsynced) in versions.iter().enumerate() {
        let at = c * CHUNK as usize;
        let chunk = &bytes[at.min(bytes.len())..(at + CHUNK as usize).min(bytes.len())];
        if chunk.iter().all(|&b| b == 0) {
            if fsynced > 0 {
                wrong.push(format!(
                    "{HOSTILE_FILE}: chunk {c} lost (version {fsynced} was fsync'd)"
                ));
            }
            continue;
        }
        let version = chunk
            .get(1..9)
            .map_or(0, |v| u64::from_le_bytes(v.try_into().expect("8 bytes")));
        if chunk.len() != CHUNK as usize || chunk != hostile_chunk(c as u64, version) {
            let poison = chunk.iter().filter(|&&b| b == POISON).count();
            wrong.push(format!(
                "{HOSTILE_FILE}: chunk {c} ({} bytes) is no version written whole ({poison} bytes {:?})",
                chunk.len(),
                POISON as char
            ));
        } else if version < fsynced {
            wrong.push(format!(
                "{HOSTILE_FILE}: chunk {c} at version {version}, older than the fsync'd {fsynced}"
            ));
        }
    }
    wrong
}
