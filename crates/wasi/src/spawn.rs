//! Spawning: a VINO process starts another program as its child (`posix_spawn` in the SDK; no
//! fork). The child's module is a file the parent opened (so its path resolves in the parent's
//! view, with the parent's permissions, and execute permission is checked); the child inherits
//! every descriptor of the parent, its preopened directories included, so it reaches no
//! directory its parent does not, then the spawn's file actions (close, dup2, open) apply in
//! order. It runs with the parent's credentials, memory cap and standard streams, in the
//! parent's session, on a thread of its own; its status goes to its parent's `wait`.
//!
//! Compiling is the costly part (sqlite3's module takes most of a second): compiled modules are
//! kept per user, bounded ([`USER_PROGRAMS`], [`USER_CODE_BYTES`], and a bound over all users),
//! and a compile waits its turn among its user's as any compile does (`Process::compile_charge`):
//! a loop spawning large modules costs its user, not the others. A cached program is still
//! streamed through `exec.verify` at each spawn, and a refusal is the spawn's `EACCES`.

use crate::abi::{WasiErrno, filetype};
use crate::fds::{Entry, FdTable, File};
use crate::guest::{Guest, Result};
use crate::{Ctx, Program, Start};
use parking_lot::Mutex;
use std::sync::{Arc, OnceLock};
use vino_kernel::signal::{Disposition, MaskHow};
use vino_kernel::{At, ExitStatus, FileType, OpenFlags, Process};

/// Compiled programs a user keeps, and their code.
pub const USER_PROGRAMS: usize = 8;
pub const USER_CODE_BYTES: usize = 256 << 20;
/// Compiled programs kept for all users together.
const ALL_PROGRAMS: usize = 64;

/// Where a spawn's arguments are in the program's memory.
pub struct Request {
    pub module_fd: u32,
    pub argv: (u32, u32),
    pub envp: (u32, u32),
    pub actions: (u32, u32),
    pub attr: u32,
}

/// One file action, as the SDK lays it out (seven u32s).
#[derive(Debug)]
enum Action {
    Close(u32),
    Dup2(u32, u32),
    Open { fd: u32, path: Vec<u8>, oflag: u32 },
}

const ACTION_SIZE: u32 = 28;
/// Most file actions one spawn takes.
const ACTIONS_MAX: u32 = 1024;

/// Spawn attributes the kernel takes: the child's mask, and signals back to their default.
const SETSIGMASK: u32 = 1;
const SETSIGDEF: u32 = 2;
const REFUSED_FLAGS: u32 = !(SETSIGMASK | SETSIGDEF);

// wasi-libc's open flags (its <fcntl.h>).
const O_APPEND: u32 = 1;
const O_CREAT: u32 = 1 << 12;
const O_DIRECTORY: u32 = 2 << 12;
const O_EXCL: u32 = 4 << 12;
const O_TRUNC: u32 = 8 << 12;
const O_NOFOLLOW: u32 = 0x0100_0000;
const O_RDONLY: u32 = 0x0400_0000;
const O_WRONLY: u32 = 0x1000_0000;

/// Starts the child; its pid.
pub fn spawn(g: &mut Guest<'_>, x: &mut Ctx, r: Request) -> Result<i32> {
    let args = strings(g, r.argv)?;
    let env = strings(g, r.envp)?;
    let actions = actions(g, r.actions)?;
    let (flags, mask, defaults) = if r.attr == 0 {
        (0, None, 0)
    } else {
        (g.u32(r.attr)?, Some(g.u64(r.attr + 8)?), g.u64(r.attr + 16)?)
    };
    if flags & REFUSED_FLAGS != 0 {
        return Err(WasiErrno::NOTSUP);
    }
    let kfd = x.fds.file(r.module_fd)?.fd;
    let program = load(x, kfd)?;
    // Streamed through `exec.verify` at every spawn, from the cache or not.
    let verified = program
        .verify(&x.process, &crate::program_name(&args))
        .map_err(|_| WasiErrno::ACCES)?;
    let child = x.process.kernel().spawn_child(&x.process)?;
    let fds = match inherit(x, &child).and_then(|fds| apply(&child, fds, actions)) {
        Ok(fds) => fds,
        Err(e) => {
            abandon(x, &child);
            return Err(e);
        }
    };
    if flags & SETSIGMASK != 0 {
        child.signal_mask(MaskHow::Set, mask.unwrap_or(0));
    }
    if flags & SETSIGDEF != 0 {
        for sig in 1..=vino_kernel::signal::SIGMAX {
            if defaults & vino_kernel::signal::bit(sig) != 0 {
                let _ = child.signal_action(sig, Disposition::Default);
            }
        }
    }
    let start = Start {
        fds,
        args,
        env,
        stdio: x.stdio.clone(),
    };
    let pid = child.pid();
    launch(program, verified, child, start).inspect_err(|_| {
        let _ = x.process.wait_child(Some(pid));
    })?;
    Ok(pid as i32)
}

/// A child that never ran: it goes, and its parent does not see it as a zombie.
fn abandon(x: &Ctx, child: &Arc<Process>) {
    child.kernel().exit(child.pid());
    let _ = x.process.wait_child(Some(child.pid()));
}

/// NUL-terminated strings laid end to end.
fn strings(g: &Guest<'_>, (ptr, len): (u32, u32)) -> Result<Vec<Vec<u8>>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let bytes = g.bytes(ptr, len)?;
    let bytes = bytes.strip_suffix(&[0]).ok_or(WasiErrno::INVAL)?;
    Ok(bytes.split(|&b| b == 0).map(<[u8]>::to_vec).collect())
}

fn actions(g: &Guest<'_>, (ptr, n): (u32, u32)) -> Result<Vec<Action>> {
    if n > ACTIONS_MAX {
        return Err(WasiErrno::INVAL);
    }
    (0..n)
        .map(|i| {
            let a = ptr.checked_add(i * ACTION_SIZE).ok_or(WasiErrno::FAULT)?;
            let word = |k: u32| g.u32(a + 4 * k);
            Ok(match word(0)? {
                0 => Action::Close(word(1)?),
                1 => Action::Dup2(word(1)?, word(2)?),
                2 => Action::Open {
                    fd: word(2)?,
                    oflag: word(3)?,
                    path: g.bytes(word(5)?, word(6)?)?.to_vec(),
                },
                _ => return Err(WasiErrno::INVAL),
            })
        })
        .collect()
}

/// The compiled program of the module open as `kfd`: from the user's cache, or compiled now
/// (as one of the user's compiles).
fn load(x: &Ctx, kfd: vino_kernel::Fd) -> Result<Program> {
    let st = x.process.fstat(kfd)?;
    if st.kind != FileType::Regular || !vino_kernel::perm::may(x.process.credentials(), &st, vino_kernel::perm::EXEC) {
        return Err(WasiErrno::ACCES);
    }
    let max = x.program_limits.module_bytes;
    if st.size > max as u64 {
        return Err(WasiErrno::FBIG);
    }
    let mut wasm = vec![0u8; st.size as usize];
    let mut at = 0;
    while at < wasm.len() {
        let got = x.process.pread(kfd, &mut wasm[at..], at as u64)?;
        if got == 0 {
            break;
        }
        at += got;
    }
    wasm.truncate(at);
    use sha2::Digest;
    let hash: [u8; 32] = sha2::Sha256::digest(&wasm).into();
    let uid = x.process.credentials().uid;
    if let Some(p) = cache().get(uid, &hash) {
        return Ok(p);
    }
    let _compiling = x.process.compile_charge()?;
    let program = Program::compile(&wasm, x.program_limits).map_err(|e| match e {
        crate::RunError::TooLarge { .. } => WasiErrno::FBIG,
        _ => WasiErrno::NOEXEC,
    })?;
    cache().put(uid, hash, program.clone());
    Ok(program)
}

/// The parent's descriptors, as the child starts with them: the same pipes and streams, and
/// its own kernel descriptor of each open file.
fn inherit(x: &Ctx, child: &Process) -> Result<FdTable> {
    let mut fds = FdTable::empty();
    for (n, e) in x.fds.iter() {
        let copy = match (e.share(), e) {
            (Some(copy), _) => copy,
            (None, Entry::File(f)) => Entry::File(File {
                fd: x.process.inherit_fd(f.fd, child)?,
                pos: f.pos,
                append: f.append,
                filetype: f.filetype,
                preopen: f.preopen.clone(),
            }),
            // A socket is its process's: the child does not get it.
            (None, Entry::Socket(_)) => continue,
            (None, _) => unreachable!("only files and sockets hold kernel objects"),
        };
        fds.place(n, copy)?;
    }
    Ok(fds)
}

/// Applies the spawn's file actions, in order, to the child's table.
fn apply(child: &Process, mut fds: FdTable, actions: Vec<Action>) -> Result<FdTable> {
    for a in actions {
        match a {
            Action::Close(fd) => close(child, fds.remove(fd)?),
            Action::Dup2(from, to) if from == to => {
                fds.get(from)?;
            }
            Action::Dup2(from, to) => {
                let copy = dup(child, fds.get(from)?)?;
                if let Some(old) = fds.place(to, copy)? {
                    close(child, old);
                }
            }
            Action::Open { fd, path, oflag } => {
                let entry = open(child, &fds, &path, oflag)?;
                if let Some(old) = fds.place(fd, entry)? {
                    close(child, old);
                }
            }
        }
    }
    Ok(fds)
}

fn close(child: &Process, e: Entry) {
    if let Entry::File(f) = e {
        let _ = child.close(f.fd);
    }
}

/// Another descriptor of what `e` is (a file: another kernel descriptor of it).
fn dup(child: &Process, e: &Entry) -> Result<Entry> {
    match (e.share(), e) {
        (Some(copy), _) => Ok(copy),
        (None, Entry::File(f)) => Ok(Entry::File(File {
            fd: child.inherit_fd(f.fd, child)?,
            pos: f.pos,
            append: f.append,
            filetype: f.filetype,
            preopen: None,
        })),
        (None, _) => Err(WasiErrno::BADF),
    }
}

/// An open action: `path` (absolute, as the SDK passes it) in the preopened directory whose
/// name is its longest prefix, with the child's credentials.
fn open(child: &Process, fds: &FdTable, path: &[u8], oflag: u32) -> Result<Entry> {
    let (dir, rest) = fds
        .iter()
        .filter_map(|(_, e)| match e {
            Entry::File(File {
                fd,
                preopen: Some(name),
                ..
            }) => under(name, path).map(|rest| (*fd, name.len(), rest)),
            _ => None,
        })
        .max_by_key(|&(_, len, _)| len)
        .map(|(fd, _, rest)| (fd, rest))
        .ok_or(WasiErrno::NOENT)?;
    let write = oflag & O_WRONLY != 0;
    let flags = OpenFlags {
        read: oflag & O_RDONLY != 0 || !write,
        write,
        create: oflag & O_CREAT != 0,
        exclusive: oflag & O_EXCL != 0,
        truncate: oflag & O_TRUNC != 0,
        append: false,
        nofollow: oflag & O_NOFOLLOW != 0,
        directory: oflag & O_DIRECTORY != 0,
        mode: 0o644,
    };
    let rest = if rest.is_empty() { &b"."[..] } else { rest };
    let kfd = child.open_at(At::Beneath(dir), rest, flags)?;
    let kind = child
        .fstat(kfd)
        .map(|st| crate::abi::filetype_of(st.kind))
        .unwrap_or(filetype::UNKNOWN);
    Ok(Entry::File(File {
        fd: kfd,
        pos: 0,
        append: oflag & O_APPEND != 0,
        filetype: kind,
        preopen: None,
    }))
}

/// `path` relative to the preopened directory `name` if it lies under it.
fn under<'p>(name: &[u8], path: &'p [u8]) -> Option<&'p [u8]> {
    let name = if name.len() > 1 {
        name.strip_suffix(b"/").unwrap_or(name)
    } else {
        name
    };
    if name == b"/" {
        return path.strip_prefix(b"/");
    }
    let rest = path.strip_prefix(name)?;
    match rest.first() {
        None => Some(rest),
        Some(b'/') => Some(&rest[1..]),
        Some(_) => None,
    }
}

/// Runs the child on a host thread of its own that waits for it and records its status.
fn launch(program: Program, verified: crate::Verified, child: Arc<Process>, start: Start) -> Result<()> {
    let pid = child.pid();
    let kernel = child.kernel().clone();
    let kill = program.kill_switch();
    let runner = child.clone();
    std::thread::Builder::new()
        .name(format!("vino-pid-{pid}"))
        .spawn(move || {
            let exit = program.run_start(runner, verified, start, &kill);
            let status = exit.map_or(ExitStatus::Exited(127), |e| e.exit_status());
            kernel.exit_with(pid, status);
        })
        .map(drop)
        .map_err(|_| {
            child.kernel().exit(pid);
            WasiErrno::AGAIN
        })
}

/// Compiled programs by user and module hash.
#[derive(Default)]
struct ModuleCache {
    entries: Mutex<Vec<Cached>>,
    tick: std::sync::atomic::AtomicU64,
}

struct Cached {
    uid: u32,
    hash: [u8; 32],
    program: Program,
    used: u64,
}

fn cache() -> &'static ModuleCache {
    static CACHE: OnceLock<ModuleCache> = OnceLock::new();
    CACHE.get_or_init(ModuleCache::default)
}

impl ModuleCache {
    fn get(&self, uid: u32, hash: &[u8; 32]) -> Option<Program> {
        let tick = self.tick.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut e = self.entries.lock();
        let c = e.iter_mut().find(|c| c.uid == uid && &c.hash == hash)?;
        c.used = tick;
        Some(c.program.clone())
    }

    /// Keeps `program` for `uid`, the user's least recently used going first past the user's
    /// bounds, then anyone's past the bound over all.
    fn put(&self, uid: u32, hash: [u8; 32], program: Program) {
        if program.code_bytes() > USER_CODE_BYTES {
            return;
        }
        let used = self.tick.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut e = self.entries.lock();
        if e.iter().any(|c| c.uid == uid && c.hash == hash) {
            return;
        }
        e.push(Cached {
            uid,
            hash,
            program,
            used,
        });
        loop {
            let mine = e.iter().filter(|c| c.uid == uid);
            let (count, code) = mine.fold((0, 0), |(n, b), c| (n + 1, b + c.program.code_bytes()));
            let over_user = count > USER_PROGRAMS || code > USER_CODE_BYTES;
            if !over_user && e.len() <= ALL_PROGRAMS {
                break;
            }
            let oldest = (0..e.len())
                .filter(|&i| !over_user || e[i].uid == uid)
                .min_by_key(|&i| e[i].used)
                .expect("an entry to drop");
            e.swap_remove(oldest);
        }
    }
}
