//! The `wasi_snapshot_preview1` functions, each a system call of the kernel's. One function
//! per call, in the order of the WASI specification's list; `define` links them all, so any
//! program wasi-libc builds finds every import it may name.

use crate::Ctx;
use crate::abi::{self, WasiErrno, event, fdflags, filetype, fstflags, oflags, rights, whence};
use crate::dev::{self, Device, Node};
use crate::fds::{Entry, File};
use crate::guest::{Guest, Result};
use crate::{pipes, signals, sockets};
use std::io::{Read, Write};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use vino_kernel::{At, Attrs, Fd, OpenFlags, RenameFlags, SetTime};
use wasmtime::{Caller, Extern, Linker};

/// `proc_exit`'s way out of the program: the call's error, carrying the exit code.
#[derive(Debug)]
pub struct ProcExit(pub u32);

impl std::fmt::Display for ProcExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit({})", self.0)
    }
}

impl std::error::Error for ProcExit {}

/// Runs one call with the program's memory and the process: its errno, 0 for success.
pub(crate) fn sys(caller: &mut Caller<'_, Ctx>, call: impl FnOnce(&mut Guest<'_>, &mut Ctx) -> Result<()>) -> i32 {
    match with_memory(caller, call) {
        Ok(()) => 0,
        Err(e) => i32::from(e.0),
    }
}

/// Runs one call that returns a value: the value, or a negative errno.
pub(crate) fn sys_value(
    caller: &mut Caller<'_, Ctx>,
    call: impl FnOnce(&mut Guest<'_>, &mut Ctx) -> Result<i32>,
) -> i32 {
    match with_memory(caller, call) {
        Ok(v) => v,
        Err(e) => -i32::from(e.0),
    }
}

pub(crate) fn with_memory<T>(
    caller: &mut Caller<'_, Ctx>,
    call: impl FnOnce(&mut Guest<'_>, &mut Ctx) -> Result<T>,
) -> Result<T> {
    // Found once per run (see `run_thread`), not by name at every call.
    let memory = match caller.data().memory {
        Some(m) => m,
        None => match caller.get_export("memory") {
            Some(Extern::Memory(m)) => m,
            // A program that exports no memory can pass no pointer.
            _ => return Err(WasiErrno::FAULT),
        },
    };
    // While the call runs, the file pages it touches stay put (none to pin without mappings).
    let pin = caller.data().process.pin_memory();
    let (bytes, ctx) = memory.data_and_store_mut(caller);
    // A call may block (the disk, a lock, the standard input): the worker says so, and
    // another takes its place if it does for long.
    vino_sched::in_kernel(|| call(&mut Guest(bytes, pin.as_ref()), ctx))
}

/// Links every preview 1 function.
pub fn define(l: &mut Linker<Ctx>) -> wasmtime::Result<()> {
    let m = abi::MODULE;
    type C<'a> = Caller<'a, Ctx>;
    l.func_wrap(m, "args_get", |mut c: C, argv: u32, buf: u32| {
        sys(&mut c, |g, x| strings_get(g, &x.args, argv, buf))
    })?;
    l.func_wrap(m, "args_sizes_get", |mut c: C, n: u32, size: u32| {
        sys(&mut c, |g, x| strings_sizes(g, &x.args, n, size))
    })?;
    l.func_wrap(m, "environ_get", |mut c: C, env: u32, buf: u32| {
        sys(&mut c, |g, x| strings_get(g, &x.env, env, buf))
    })?;
    l.func_wrap(m, "environ_sizes_get", |mut c: C, n: u32, size: u32| {
        sys(&mut c, |g, x| strings_sizes(g, &x.env, n, size))
    })?;
    l.func_wrap(m, "clock_res_get", |mut c: C, id: u32, out: u32| {
        sys(&mut c, |g, _| clock_res_get(g, id, out))
    })?;
    l.func_wrap(m, "clock_time_get", |mut c: C, id: u32, _precision: u64, out: u32| {
        sys(&mut c, |g, _| g.put_u64(out, now(id)?))
    })?;
    l.func_wrap(
        m,
        "fd_advise",
        |mut c: C, fd: u32, _off: u64, _len: u64, _advice: u32| sys(&mut c, |_, x| x.fds.file(fd).map(drop)),
    )?;
    l.func_wrap(m, "fd_allocate", |mut c: C, fd: u32, off: u64, len: u64| {
        sys(&mut c, |_, x| fd_allocate(x, fd, off, len))
    })?;
    l.func_wrap(m, "fd_close", |mut c: C, fd: u32| sys(&mut c, |_, x| fd_close(x, fd)))?;
    l.func_wrap(m, "fd_datasync", |mut c: C, fd: u32| sys(&mut c, |_, x| fd_sync(x, fd)))?;
    l.func_wrap(m, "fd_fdstat_get", |mut c: C, fd: u32, out: u32| {
        sys(&mut c, |g, x| fd_fdstat_get(g, x, fd, out))
    })?;
    l.func_wrap(m, "fd_fdstat_set_flags", |mut c: C, fd: u32, flags: u32| {
        sys(&mut c, |_, x| fd_fdstat_set_flags(x, fd, flags))
    })?;
    l.func_wrap(
        m,
        "fd_fdstat_set_rights",
        |mut c: C, fd: u32, _base: u64, _inheriting: u64| {
            // Rights narrow nothing here: the kernel checks each call against the credentials.
            sys(&mut c, |_, x| x.fds.get(fd).map(drop))
        },
    )?;
    l.func_wrap(m, "fd_filestat_get", |mut c: C, fd: u32, out: u32| {
        sys(&mut c, |g, x| fd_filestat_get(g, x, fd, out))
    })?;
    l.func_wrap(m, "fd_filestat_set_size", |mut c: C, fd: u32, size: u64| {
        sys(&mut c, |_, x| fd_filestat_set_size(x, fd, size))
    })?;
    l.func_wrap(
        m,
        "fd_filestat_set_times",
        |mut c: C, fd: u32, atim: u64, mtim: u64, flags: u32| {
            sys(&mut c, |_, x| fd_filestat_set_times(x, fd, atim, mtim, flags))
        },
    )?;
    l.func_wrap(
        m,
        "fd_pread",
        |mut c: C, fd: u32, iovs: u32, n: u32, off: u64, out: u32| {
            sys(&mut c, |g, x| fd_pread(g, x, fd, iovs, n, off, out))
        },
    )?;
    l.func_wrap(m, "fd_prestat_get", |mut c: C, fd: u32, out: u32| {
        sys(&mut c, |g, x| fd_prestat_get(g, x, fd, out))
    })?;
    l.func_wrap(m, "fd_prestat_dir_name", |mut c: C, fd: u32, path: u32, len: u32| {
        sys(&mut c, |g, x| fd_prestat_dir_name(g, x, fd, path, len))
    })?;
    l.func_wrap(
        m,
        "fd_pwrite",
        |mut c: C, fd: u32, iovs: u32, n: u32, off: u64, out: u32| {
            sys(&mut c, |g, x| fd_pwrite(g, x, fd, iovs, n, off, out))
        },
    )?;
    // Reads and writes may wait (a pipe): asynchronous, so the worker runs others meanwhile;
    // a signal is delivered on the way out.
    l.func_wrap_async(m, "fd_read", |mut c: C, (fd, iovs, n, out): (u32, u32, u32, u32)| {
        Box::new(async move {
            if let Some(s) = sockets::socket_of(&c, fd) {
                return sockets::read(&mut c, s, iovs, n, out).await;
            }
            match pipes::pipe_of(&c, fd) {
                Some(p) => pipes::read(&mut c, p, iovs, n, out).await,
                None => {
                    let r = sys(&mut c, |g, x| fd_read(g, x, fd, iovs, n, out));
                    signals::after(&mut c, r).await
                }
            }
        })
    })?;
    l.func_wrap(
        m,
        "fd_readdir",
        |mut c: C, fd: u32, buf: u32, len: u32, cookie: u64, out: u32| {
            sys(&mut c, |g, x| fd_readdir(g, x, fd, buf, len, cookie, out))
        },
    )?;
    l.func_wrap(m, "fd_renumber", |mut c: C, from: u32, to: u32| {
        sys(&mut c, |_, x| fd_renumber(x, from, to))
    })?;
    l.func_wrap(m, "fd_seek", |mut c: C, fd: u32, off: i64, wh: u32, out: u32| {
        sys(&mut c, |g, x| fd_seek(g, x, fd, off, wh, out))
    })?;
    l.func_wrap(m, "fd_sync", |mut c: C, fd: u32| sys(&mut c, |_, x| fd_sync(x, fd)))?;
    l.func_wrap(m, "fd_tell", |mut c: C, fd: u32, out: u32| {
        sys(&mut c, |g, x| {
            let pos = match x.fds.get(fd)? {
                Entry::Device(_) => 0,
                _ => x.fds.file(fd)?.pos,
            };
            g.put_u64(out, pos)
        })
    })?;
    l.func_wrap_async(m, "fd_write", |mut c: C, (fd, iovs, n, out): (u32, u32, u32, u32)| {
        Box::new(async move {
            if let Some(s) = sockets::socket_of(&c, fd) {
                return sockets::write(&mut c, s, iovs, n, out).await;
            }
            match pipes::pipe_of(&c, fd) {
                Some(p) => pipes::write(&mut c, p, iovs, n, out).await,
                None => {
                    let r = sys(&mut c, |g, x| fd_write(g, x, fd, iovs, n, out));
                    signals::after(&mut c, r).await
                }
            }
        })
    })?;
    l.func_wrap(m, "path_create_directory", |mut c: C, fd: u32, path: u32, len: u32| {
        sys(&mut c, |g, x| {
            let (dir, path) = (dir(x, fd)?, g.path(path, len)?);
            x.process
                .mkdir_at(At::Beneath(dir), path, 0o755)
                .map(drop)
                .map_err(Into::into)
        })
    })?;
    l.func_wrap(
        m,
        "path_filestat_get",
        |mut c: C, fd: u32, flags: u32, path: u32, len: u32, out: u32| {
            sys(&mut c, |g, x| {
                if let Entry::DevDir = x.fds.get(fd)? {
                    let node = dev::lookup(&g.path(path, len)?, has_tty(x))?;
                    return put_dev_filestat(g, out, node);
                }
                let (dir, path) = (dir(x, fd)?, g.path(path, len)?);
                let st = x.process.stat_at(At::Beneath(dir), path, follows(flags))?;
                put_filestat(g, out, &st)
            })
        },
    )?;
    l.func_wrap(
        m,
        "path_filestat_set_times",
        |mut c: C, fd: u32, flags: u32, path: u32, len: u32, atim: u64, mtim: u64, fst: u32| {
            sys(&mut c, |g, x| {
                let (dir, path) = (dir(x, fd)?, g.path(path, len)?);
                let attrs = times(atim, mtim, fst)?;
                x.process.setattr_at(At::Beneath(dir), path, follows(flags), &attrs)?;
                Ok(())
            })
        },
    )?;
    l.func_wrap(
        m,
        "path_link",
        |mut c: C, old_fd: u32, old_flags: u32, old: u32, old_len: u32, new_fd: u32, new: u32, new_len: u32| {
            sys(&mut c, |g, x| {
                let (from_dir, from) = (dir(x, old_fd)?, g.path(old, old_len)?);
                let (to_dir, to) = (dir(x, new_fd)?, g.path(new, new_len)?);
                let follow = follows(old_flags);
                x.process
                    .link_at(At::Beneath(from_dir), from, At::Beneath(to_dir), to, follow)?;
                Ok(())
            })
        },
    )?;
    // Asynchronous for FIFOs, whose open waits for the other side.
    l.func_wrap_async(
        m,
        "path_open",
        |mut c: C, (fd, dirflags, path, len, oflags, base, _inheriting, fdflags, out): PathOpenArgs| {
            Box::new(async move {
                let opened = with_memory(&mut c, |g, x| {
                    let path = g.path(path, len)?;
                    match path_open(x, fd, dirflags, &path, oflags as u16, base, fdflags as u16) {
                        Err(WasiErrno::NXIO) => Ok(Err(path)),
                        other => other.map(Ok),
                    }
                });
                let opened = match opened {
                    Ok(Ok(n)) => Ok(n),
                    Ok(Err(path)) => pipes::open_fifo(&mut c, fd, &path, base, fdflags as u16).await?,
                    Err(e) => Err(e),
                };
                let r = match opened {
                    Ok(n) => sys(&mut c, |g, _| g.put_u32(out, n)),
                    Err(e) => i32::from(e.0),
                };
                signals::after(&mut c, r).await
            })
        },
    )?;
    l.func_wrap(
        m,
        "path_readlink",
        |mut c: C, fd: u32, path: u32, len: u32, buf: u32, buf_len: u32, out: u32| {
            sys(&mut c, |g, x| {
                let (dir, path) = (dir(x, fd)?, g.path(path, len)?);
                let target = x.process.readlink_at(At::Beneath(dir), path)?;
                let n = target.len().min(buf_len as usize);
                g.put(buf, &target[..n])?;
                g.put_u32(out, n as u32)
            })
        },
    )?;
    l.func_wrap(m, "path_remove_directory", |mut c: C, fd: u32, path: u32, len: u32| {
        sys(&mut c, |g, x| {
            let (dir, path) = (dir(x, fd)?, g.path(path, len)?);
            x.process.rmdir_at(At::Beneath(dir), path).map_err(Into::into)
        })
    })?;
    l.func_wrap(
        m,
        "path_rename",
        |mut c: C, fd: u32, old: u32, old_len: u32, new_fd: u32, new: u32, new_len: u32| {
            sys(&mut c, |g, x| {
                let (from_dir, from) = (dir(x, fd)?, g.path(old, old_len)?);
                let (to_dir, to) = (dir(x, new_fd)?, g.path(new, new_len)?);
                let flags = RenameFlags::default();
                x.process
                    .rename_at(At::Beneath(from_dir), from, At::Beneath(to_dir), to, flags)
                    .map_err(Into::into)
            })
        },
    )?;
    l.func_wrap(
        m,
        "path_symlink",
        |mut c: C, old: u32, old_len: u32, fd: u32, new: u32, new_len: u32| {
            sys(&mut c, |g, x| {
                let (target, dir, path) = (g.path(old, old_len)?, dir(x, fd)?, g.path(new, new_len)?);
                x.process
                    .symlink_at(target, At::Beneath(dir), path)
                    .map(drop)
                    .map_err(Into::into)
            })
        },
    )?;
    l.func_wrap(m, "path_unlink_file", |mut c: C, fd: u32, path: u32, len: u32| {
        sys(&mut c, |g, x| {
            let (dir, path) = (dir(x, fd)?, g.path(path, len)?);
            x.process.unlink_at(At::Beneath(dir), path).map_err(Into::into)
        })
    })?;
    l.func_wrap_async(
        m,
        "poll_oneoff",
        |mut c: C, (subs, events, n, out): (u32, u32, u32, u32)| {
            Box::new(async move {
                let plan = match with_memory(&mut c, |g, x| poll_plan(g, x, subs, n)) {
                    Ok(plan) => plan,
                    Err(e) => return Ok(i32::from(e.0)),
                };
                let (thread, process, killed) = (
                    c.data().thread.clone(),
                    c.data().process.clone(),
                    c.data().killed.clone(),
                );
                let r = match sleep(thread, &process, &killed, plan).await {
                    Ok(ready) => sys(&mut c, |g, _| poll_events(g, &ready, events, out)),
                    Err(e) => i32::from(e.0),
                };
                signals::after(&mut c, r).await
            })
        },
    )?;
    l.func_wrap(m, "proc_exit", |_: C, code: u32| -> wasmtime::Result<()> {
        Err(wasmtime::Error::new(ProcExit(code)))
    })?;
    l.func_wrap_async(m, "proc_raise", |mut c: C, (sig,): (u32,)| {
        Box::new(async move {
            let Some(sig) = u8::try_from(sig)
                .ok()
                .filter(|&s| (1..=vino_kernel::signal::SIGMAX).contains(&s))
            else {
                return Ok(i32::from(WasiErrno::INVAL.0));
            };
            c.data().process.raise(sig);
            signals::after(&mut c, 0).await
        })
    })?;
    l.func_wrap_async(m, "sched_yield", |mut c: C, (): ()| {
        Box::new(async move {
            vino_sched::yield_now().await;
            signals::after(&mut c, 0).await
        })
    })?;
    l.func_wrap(m, "random_get", |mut c: C, buf: u32, len: u32| {
        sys(&mut c, |g, _| random(g.bytes_mut(buf, len)?))
    })?;
    sockets::define_preview1(l)
}

// ---- arguments, environment, clocks, randomness --------------------------------------------

fn strings_sizes(g: &mut Guest<'_>, list: &[Vec<u8>], count: u32, size: u32) -> Result<()> {
    let bytes: usize = list.iter().map(|s| s.len() + 1).sum();
    g.put_u32(count, list.len() as u32)?;
    g.put_u32(size, u32::try_from(bytes).map_err(|_| WasiErrno::TOOBIG)?)
}

/// Writes each string, NUL-terminated, into `buf` and a pointer to it into `ptrs`.
fn strings_get(g: &mut Guest<'_>, list: &[Vec<u8>], ptrs: u32, buf: u32) -> Result<()> {
    let mut at = buf;
    for (i, s) in list.iter().enumerate() {
        g.put_u32(ptrs.checked_add(4 * i as u32).ok_or(WasiErrno::FAULT)?, at)?;
        g.put(at, s)?;
        let end = at.checked_add(s.len() as u32).ok_or(WasiErrno::FAULT)?;
        g.put_u8(end, 0)?;
        at = end + 1;
    }
    Ok(())
}

fn clock_res_get(g: &mut Guest<'_>, id: u32, out: u32) -> Result<()> {
    now(id)?;
    g.put_u64(out, 1)
}

/// Nanoseconds on clock `id`: the wall clock, a monotonic one, or this thread's CPU time (a
/// VINO process runs on the thread that runs it).
fn now(id: u32) -> Result<u64> {
    match id {
        abi::clock::REALTIME => Ok(SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)),
        abi::clock::MONOTONIC => Ok(monotonic()),
        abi::clock::PROCESS_CPUTIME | abi::clock::THREAD_CPUTIME => {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `ts` is a valid out-pointer for the call's duration.
            if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) } != 0 {
                return Err(WasiErrno::IO);
            }
            Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
        }
        _ => Err(WasiErrno::INVAL),
    }
}

fn monotonic() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

pub(crate) fn random(buf: &mut [u8]) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a valid writable buffer of `rest.len()` bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(WasiErrno::IO);
        }
        done += n as usize;
    }
    Ok(())
}

// ---- descriptors -----------------------------------------------------------------------------

/// The kernel descriptor of directory `fd`, the start of a path call.
pub(crate) fn dir(x: &mut Ctx, fd: u32) -> Result<Fd> {
    if let Entry::DevDir = x.fds.get(fd)? {
        // Nothing in `/dev` is made, removed, renamed or linked, as for a user on Linux.
        return Err(WasiErrno::ACCES);
    }
    let f = x.fds.file(fd)?;
    if f.filetype != filetype::DIRECTORY {
        return Err(WasiErrno::NOTDIR);
    }
    Ok(f.fd)
}

fn follows(lookupflags: u32) -> bool {
    lookupflags & abi::LOOKUP_SYMLINK_FOLLOW != 0
}

fn fd_allocate(x: &mut Ctx, fd: u32, off: u64, len: u64) -> Result<()> {
    let kfd = x.fds.file(fd)?.fd;
    x.process.fallocate(kfd, false, off, len).map_err(Into::into)
}

/// `path_open`'s arguments.
type PathOpenArgs = (u32, u32, u32, u32, u32, u64, u64, u32, u32);

fn fd_close(x: &mut Ctx, fd: u32) -> Result<()> {
    match x.fds.remove(fd)? {
        Entry::File(f) => x.process.close(f.fd).map_err(Into::into),
        _ => Ok(()),
    }
}

fn fd_sync(x: &mut Ctx, fd: u32) -> Result<()> {
    match x.fds.get(fd)? {
        Entry::File(f) => x.process.fsync(f.fd).map_err(Into::into),
        Entry::Stdio(1) => x.stdio.stdout.lock().flush().map_err(|_| WasiErrno::IO),
        Entry::Stdio(2) => x.stdio.stderr.lock().flush().map_err(|_| WasiErrno::IO),
        Entry::Pipe(_) => Err(WasiErrno::INVAL),
        _ => Ok(()),
    }
}

fn fd_fdstat_get(g: &mut Guest<'_>, x: &mut Ctx, fd: u32, out: u32) -> Result<()> {
    let (kind, flags, base) = match x.fds.get(fd)? {
        Entry::File(f) => (f.filetype, if f.append { fdflags::APPEND } else { 0 }, rights::ALL),
        Entry::Stdio(i) => {
            // wasi-libc's isatty: a character device without the seek and tell rights.
            let seekable = if x.stdio.tty[*i as usize] {
                0
            } else {
                rights::FD_SEEK | rights::FD_TELL
            };
            let rw = if *i == 0 { rights::FD_READ } else { rights::FD_WRITE };
            (filetype::CHARACTER_DEVICE, 0, rw | seekable)
        }
        Entry::DevDir => (filetype::DIRECTORY, 0, rights::ALL),
        // A terminal has no seek or tell (isatty); the others seek, to nowhere, as on Linux.
        Entry::Device(Device::Tty) => (filetype::CHARACTER_DEVICE, 0, rights::FD_READ | rights::FD_WRITE),
        Entry::Device(_) => (filetype::CHARACTER_DEVICE, 0, rights::ALL),
        // WASI has no FIFO type: a pipe is of no known type, readable or writable, not seekable.
        Entry::Pipe(p) => {
            let rw = match p.end.side() {
                vino_kernel::Side::Read => rights::FD_READ,
                vino_kernel::Side::Write => rights::FD_WRITE,
            };
            let flags = if p.nonblock { fdflags::NONBLOCK } else { 0 };
            (filetype::UNKNOWN, flags, rw | rights::POLL_FD_READWRITE)
        }
        Entry::Socket(s) => {
            let flags = if s.nonblock { fdflags::NONBLOCK } else { 0 };
            let rw = rights::FD_READ | rights::FD_WRITE | rights::POLL_FD_READWRITE;
            (s.sock.filetype(), flags, rw)
        }
    };
    g.bytes_mut(out, abi::FDSTAT_SIZE)?.fill(0);
    g.put_u8(out, kind)?;
    g.put_u16(out + 2, flags)?;
    g.put_u64(out + 8, base)?;
    g.put_u64(out + 16, base)
}

fn fd_fdstat_set_flags(x: &mut Ctx, fd: u32, flags: u32) -> Result<()> {
    match x.fds.get_mut(fd)? {
        Entry::Device(_) | Entry::Stdio(_) => return Ok(()),
        Entry::Pipe(p) => {
            p.nonblock = flags as u16 & fdflags::NONBLOCK != 0;
            return Ok(());
        }
        Entry::Socket(s) => {
            s.nonblock = flags as u16 & fdflags::NONBLOCK != 0;
            return Ok(());
        }
        _ => {}
    }
    let f = x.fds.file(fd)?;
    f.append = flags as u16 & fdflags::APPEND != 0;
    Ok(())
}

fn put_filestat(g: &mut Guest<'_>, out: u32, st: &vino_kernel::Stat) -> Result<()> {
    g.bytes_mut(out, abi::FILESTAT_SIZE)?.fill(0);
    g.put_u64(out, 1)?; // one device: the VINO file system
    g.put_u64(out + 8, st.ino)?;
    g.put_u8(out + 16, abi::filetype_of(st.kind))?;
    g.put_u64(out + 24, u64::from(st.nlink))?;
    g.put_u64(out + 32, st.size)?;
    g.put_u64(out + 40, st.atime_ns)?;
    g.put_u64(out + 48, st.mtime_ns)?;
    g.put_u64(out + 56, st.ctime_ns)
}

fn fd_filestat_get(g: &mut Guest<'_>, x: &mut Ctx, fd: u32, out: u32) -> Result<()> {
    match x.fds.get(fd)? {
        Entry::File(f) => {
            let st = x.process.fstat(f.fd)?;
            put_filestat(g, out, &st)
        }
        Entry::Stdio(_) => {
            g.bytes_mut(out, abi::FILESTAT_SIZE)?.fill(0);
            g.put_u8(out + 16, filetype::CHARACTER_DEVICE)
        }
        Entry::DevDir => put_dev_filestat(g, out, Node::Dir),
        &Entry::Device(d) => put_dev_filestat(g, out, Node::Device(d)),
        Entry::Pipe(p) => {
            g.bytes_mut(out, abi::FILESTAT_SIZE)?.fill(0);
            g.put_u64(out + 8, p.end.pipe().fifo().unwrap_or(0))?;
            g.put_u64(out + 24, 1)?;
            g.put_u64(out + 32, p.end.queued() as u64)
        }
        Entry::Socket(s) => {
            g.bytes_mut(out, abi::FILESTAT_SIZE)?.fill(0);
            g.put_u8(out + 16, s.sock.filetype())?;
            g.put_u64(out + 24, 1)
        }
    }
}

/// A `/dev` node's filestat: on `/dev`'s own device, its inode number its Linux device
/// number (see `dev::ino`).
fn put_dev_filestat(g: &mut Guest<'_>, out: u32, node: Node) -> Result<()> {
    g.bytes_mut(out, abi::FILESTAT_SIZE)?.fill(0);
    g.put_u64(out, dev::FS_DEV)?;
    g.put_u64(out + 8, dev::ino(node))?;
    g.put_u8(out + 16, dev::filetype(node))?;
    g.put_u64(out + 24, if node == Node::Dir { 2 } else { 1 })
}

/// Whether the program has a terminal (its standard input or output is one): `/dev/tty`.
fn has_tty(x: &Ctx) -> bool {
    x.stdio.tty[0] || x.stdio.tty[1]
}

fn fd_filestat_set_size(x: &mut Ctx, fd: u32, size: u64) -> Result<()> {
    let kfd = x.fds.file(fd)?.fd;
    x.process.ftruncate(kfd, size).map_err(Into::into)
}

/// The timestamps `fst_flags` asks to set.
fn times(atim: u64, mtim: u64, fst: u32) -> Result<Attrs> {
    let fst = fst as u16;
    let pick = |set: u16, now: u16, at: u64| match (fst & set != 0, fst & now != 0) {
        (true, true) => Err(WasiErrno::INVAL),
        (true, false) => Ok(SetTime::At(at)),
        (false, true) => Ok(SetTime::Now),
        (false, false) => Ok(SetTime::Omit),
    };
    Ok(Attrs {
        atime: pick(fstflags::ATIM, fstflags::ATIM_NOW, atim)?,
        mtime: pick(fstflags::MTIM, fstflags::MTIM_NOW, mtim)?,
        ..Default::default()
    })
}

fn fd_filestat_set_times(x: &mut Ctx, fd: u32, atim: u64, mtim: u64, fst: u32) -> Result<()> {
    let kfd = x.fds.file(fd)?.fd;
    x.process.fsetattr(kfd, &times(atim, mtim, fst)?)?;
    Ok(())
}

/// Reads into the iovecs from `off` on, stopping at the first short read: the bytes read.
fn pread_iovs(g: &mut Guest<'_>, x: &Ctx, kfd: Fd, iovs: u32, n: u32, off: u64) -> Result<u64> {
    let mut done = 0u64;
    for (buf, len) in g.iovecs(iovs, n)? {
        let at = off.checked_add(done).ok_or(WasiErrno::INVAL)?;
        let got = x.process.pread(kfd, g.bytes_mut(buf, len)?, at)?;
        done += got as u64;
        if got < len as usize {
            break;
        }
    }
    x.process.count_io(done, 0);
    Ok(done)
}

/// Writes the iovecs at `off` on: the bytes written.
fn pwrite_iovs(g: &Guest<'_>, x: &Ctx, kfd: Fd, iovs: u32, n: u32, off: u64) -> Result<u64> {
    let mut done = 0u64;
    for (buf, len) in g.iovecs(iovs, n)? {
        let at = off.checked_add(done).ok_or(WasiErrno::INVAL)?;
        let put = x.process.pwrite(kfd, g.bytes(buf, len)?, at)?;
        done += put as u64;
        if put < len as usize {
            break;
        }
    }
    x.process.count_io(0, done);
    Ok(done)
}

fn fd_pread(g: &mut Guest<'_>, x: &mut Ctx, fd: u32, iovs: u32, n: u32, off: u64, out: u32) -> Result<()> {
    if let &Entry::Device(d) = x.fds.get(fd)? {
        let done = device_read(g, x, d, iovs, n)?;
        return g.put_u32(out, done as u32);
    }
    let kfd = seekable(x, fd)?.fd;
    let done = pread_iovs(g, x, kfd, iovs, n, off)?;
    g.put_u32(out, done as u32)
}

fn fd_pwrite(g: &mut Guest<'_>, x: &mut Ctx, fd: u32, iovs: u32, n: u32, off: u64, out: u32) -> Result<()> {
    if let &Entry::Device(d) = x.fds.get(fd)? {
        let done = device_write(g, x, d, iovs, n)?;
        return g.put_u32(out, done as u32);
    }
    let kfd = seekable(x, fd)?.fd;
    let done = pwrite_iovs(g, x, kfd, iovs, n, off)?;
    g.put_u32(out, done as u32)
}

/// A file with a position (`ESPIPE` for the standard streams, `EISDIR` for a directory).
fn seekable(x: &mut Ctx, fd: u32) -> Result<&mut File> {
    match x.fds.get_mut(fd)? {
        Entry::Stdio(_) => Err(WasiErrno::SPIPE),
        Entry::File(f) if f.filetype == filetype::DIRECTORY => Err(WasiErrno::ISDIR),
        Entry::File(f) => Ok(f),
        Entry::DevDir => Err(WasiErrno::ISDIR),
        Entry::Device(_) => Err(WasiErrno::BADF),
        Entry::Pipe(_) | Entry::Socket(_) => Err(WasiErrno::SPIPE),
    }
}

/// The name a preopened directory is seen by.
fn preopen_name(x: &Ctx, fd: u32) -> Result<&[u8]> {
    match x.fds.get(fd)? {
        Entry::File(File {
            preopen: Some(name), ..
        }) => Ok(name),
        Entry::DevDir => Ok(dev::DIR_NAME),
        _ => Err(WasiErrno::BADF),
    }
}

fn fd_prestat_get(g: &mut Guest<'_>, x: &mut Ctx, fd: u32, out: u32) -> Result<()> {
    // wasi-libc asks for descriptors 3, 4, ... until EBADF: that ends its list of preopens.
    let name = preopen_name(x, fd)?;
    g.put_u32(out, 0)?; // tag: a directory
    g.put_u32(out + 4, name.len() as u32)
}

fn fd_prestat_dir_name(g: &mut Guest<'_>, x: &mut Ctx, fd: u32, path: u32, len: u32) -> Result<()> {
    let name = preopen_name(x, fd)?;
    if (len as usize) < name.len() {
        return Err(WasiErrno::NAMETOOLONG);
    }
    g.put(path, name)
}

fn fd_read(g: &mut Guest<'_>, x: &mut Ctx, fd: u32, iovs: u32, n: u32, out: u32) -> Result<()> {
    let done = match x.fds.get(fd)? {
        Entry::Stdio(0) => stdin_read(g, x, iovs, n)?,
        Entry::Stdio(_) => return Err(WasiErrno::BADF),
        Entry::DevDir => return Err(WasiErrno::ISDIR),
        &Entry::Device(d) => device_read(g, x, d, iovs, n)?,
        Entry::Pipe(_) | Entry::Socket(_) => return Err(WasiErrno::BADF),
        Entry::File(f) if f.filetype == filetype::DIRECTORY => return Err(WasiErrno::ISDIR),
        Entry::File(f) => {
            let (kfd, pos) = (f.fd, f.pos);
            let done = pread_iovs(g, x, kfd, iovs, n, pos)?;
            x.fds.file(fd)?.pos += done;
            done
        }
    };
    g.put_u32(out, done as u32)
}

/// One read of the standard input into the first buffer with room, as a pipe read returns.
fn stdin_read(g: &mut Guest<'_>, x: &mut Ctx, iovs: u32, n: u32) -> Result<u64> {
    let Some((buf, len)) = g.iovecs(iovs, n)?.into_iter().find(|&(_, len)| len > 0) else {
        return Ok(0);
    };
    let got = x
        .stdio
        .stdin
        .lock()
        .read(g.bytes_mut(buf, len)?)
        .map_err(|_| WasiErrno::IO)?;
    Ok(got as u64)
}

/// Writes every buffer to standard stream `i` (1 or 2).
fn stream_write(g: &Guest<'_>, x: &mut Ctx, i: u8, iovs: u32, n: u32) -> Result<u64> {
    let mut stream = if i == 1 {
        x.stdio.stdout.lock()
    } else {
        x.stdio.stderr.lock()
    };
    let mut done = 0u64;
    for (buf, len) in g.iovecs(iovs, n)? {
        stream.write_all(g.bytes(buf, len)?).map_err(|_| WasiErrno::IO)?;
        done += u64::from(len);
    }
    Ok(done)
}

/// A read of a device: the terminal is the standard input when that is one; the others fill
/// the program's buffers in place (nothing is held for them however large they are).
fn device_read(g: &mut Guest<'_>, x: &mut Ctx, d: Device, iovs: u32, n: u32) -> Result<u64> {
    if d == Device::Tty {
        return if x.stdio.tty[0] {
            stdin_read(g, x, iovs, n)
        } else {
            Err(WasiErrno::BADF)
        };
    }
    let mut done = 0u64;
    for (buf, len) in g.iovecs(iovs, n)? {
        let got = dev::read(d, g.bytes_mut(buf, len)?)?;
        done += got as u64;
        if got < len as usize {
            break;
        }
    }
    Ok(done)
}

/// A write to a device: the terminal's goes to whichever of standard output and error is it.
fn device_write(g: &mut Guest<'_>, x: &mut Ctx, d: Device, iovs: u32, n: u32) -> Result<u64> {
    if d == Device::Tty {
        let Some(i) = [1u8, 2].into_iter().find(|&i| x.stdio.tty[i as usize]) else {
            return Err(WasiErrno::BADF);
        };
        return stream_write(g, x, i, iovs, n);
    }
    let mut len = 0u64;
    for (buf, l) in g.iovecs(iovs, n)? {
        g.bytes(buf, l)?; // a bad buffer is EFAULT even where nothing is written
        len += u64::from(l);
    }
    dev::write(d, len)
}

fn fd_write(g: &mut Guest<'_>, x: &mut Ctx, fd: u32, iovs: u32, n: u32, out: u32) -> Result<()> {
    let done = match x.fds.get(fd)? {
        &Entry::Stdio(i @ (1 | 2)) => stream_write(g, x, i, iovs, n)?,
        Entry::Stdio(_) => return Err(WasiErrno::BADF),
        Entry::DevDir => return Err(WasiErrno::ISDIR),
        &Entry::Device(d) => device_write(g, x, d, iovs, n)?,
        Entry::Pipe(_) | Entry::Socket(_) => return Err(WasiErrno::BADF),
        Entry::File(f) if f.filetype == filetype::DIRECTORY => return Err(WasiErrno::ISDIR),
        Entry::File(f) => {
            let (kfd, append) = (f.fd, f.append);
            // An append goes at the end as it is now (one process's appends stay in order).
            let pos = if append { x.process.fstat(kfd)?.size } else { f.pos };
            let done = pwrite_iovs(g, x, kfd, iovs, n, pos)?;
            x.fds.file(fd)?.pos = pos + done;
            done
        }
    };
    g.put_u32(out, done as u32)
}

/// Directory entries from `cookie` on, as many as fit, the last one cut short if it does not:
/// the caller then asks again with a larger buffer, as the specification has it. A cookie is an
/// entry's position in the directory plus one (0: the start), so a listing continues where it
/// left off however the directory changed, and nothing is kept between calls.
fn fd_readdir(g: &mut Guest<'_>, x: &mut Ctx, fd: u32, buf: u32, len: u32, cookie: u64, out: u32) -> Result<()> {
    if let Entry::DevDir = x.fds.get(fd)? {
        let used = dev_readdir(g.bytes_mut(buf, len)?, has_tty(x), cookie);
        return g.put_u32(out, used as u32);
    }
    let f = x.fds.file(fd)?;
    if f.filetype != filetype::DIRECTORY {
        return Err(WasiErrno::NOTDIR);
    }
    let kfd = f.fd;
    let root = shows_dev(x, kfd)?;
    let region = g.bytes_mut(buf, len)?;
    let (mut used, mut from, mut listed) = (0usize, cookie, cookie == DEV_COOKIE);
    while used < region.len() && !listed {
        // A page no bigger than the room left: each entry's cost is its record's size.
        let page = x.process.readdir_page_fd(kfd, from, region.len() - used)?;
        for (pos, e) in &page.entries {
            if root && e.name == b"dev" {
                continue;
            }
            used += put_dirent(&mut region[used..], pos + 1, e);
            if used == region.len() {
                break;
            }
        }
        match page.next {
            Some(next) => from = next,
            None => listed = true,
        }
    }
    if root && cookie != DEV_COOKIE && listed && used < region.len() {
        used += put_dirent(&mut region[used..], DEV_COOKIE, &dev_entry(b"dev", Node::Dir));
    }
    g.put_u32(out, used as u32)
}

/// Whether directory `kfd` is the program's `/` while it has `/dev`: its listing shows the
/// `/dev` the program is given (not the disk's own, if it has one).
fn shows_dev(x: &Ctx, kfd: Fd) -> Result<bool> {
    let Some(root) = x.fds.preopen_named(b"/").filter(|_| x.fds.has_dev()) else {
        return Ok(false);
    };
    Ok(root == kfd || x.process.fstat(root)?.ino == x.process.fstat(kfd)?.ino)
}

/// The cookie after the root's `dev` entry, its last.
const DEV_COOKIE: u64 = u64::MAX;

/// A `/dev` node as a directory entry.
fn dev_entry(name: &[u8], node: Node) -> vino_kernel::DirEntry {
    vino_kernel::DirEntry {
        name: name.to_vec(),
        ino: dev::ino(node),
        kind: if node == Node::Dir {
            vino_kernel::FileType::Directory
        } else {
            vino_kernel::FileType::CharDevice
        },
    }
}

/// `/dev`'s entries from `cookie` on (`.`, `..`, then its names) into `region`: the bytes used.
fn dev_readdir(region: &mut [u8], tty: bool, cookie: u64) -> usize {
    let dots = [(&b"."[..], Node::Dir), (&b".."[..], Node::Dir)];
    let mut used = 0;
    for (i, (name, node)) in dots
        .into_iter()
        .chain(dev::names(tty))
        .enumerate()
        .skip(cookie as usize)
    {
        if used == region.len() {
            break;
        }
        used += put_dirent(&mut region[used..], i as u64 + 1, &dev_entry(name, node));
    }
    used
}

/// Writes as much of `e`'s record as fits in `to`; the bytes written.
fn put_dirent(to: &mut [u8], next: u64, e: &vino_kernel::DirEntry) -> usize {
    // `..` may lead outside what the program was given: its inode is not told.
    let ino = if e.name == b".." { 0 } else { e.ino };
    let mut rec = Vec::with_capacity(abi::DIRENT_SIZE as usize + e.name.len());
    rec.extend_from_slice(&next.to_le_bytes());
    rec.extend_from_slice(&ino.to_le_bytes());
    rec.extend_from_slice(&(e.name.len() as u32).to_le_bytes());
    rec.extend_from_slice(&[abi::filetype_of(e.kind), 0, 0, 0]);
    rec.extend_from_slice(&e.name);
    let n = rec.len().min(to.len());
    to[..n].copy_from_slice(&rec[..n]);
    n
}

fn fd_renumber(x: &mut Ctx, from: u32, to: u32) -> Result<()> {
    if let Some(Entry::File(old)) = x.fds.renumber(from, to)? {
        x.process.close(old.fd)?;
    }
    Ok(())
}

fn fd_seek(g: &mut Guest<'_>, x: &mut Ctx, fd: u32, off: i64, wh: u32, out: u32) -> Result<()> {
    if let Entry::Device(d) = x.fds.get(fd)? {
        // A device has no position: every seek lands at 0, as Linux's do (a terminal's: ESPIPE).
        return if *d == Device::Tty {
            Err(WasiErrno::SPIPE)
        } else {
            g.put_u64(out, 0)
        };
    }
    let (kfd, pos) = {
        let f = seekable(x, fd)?;
        (f.fd, f.pos)
    };
    let base = match wh as u8 {
        whence::SET => 0,
        whence::CUR => pos,
        whence::END => x.process.fstat(kfd)?.size,
        _ => return Err(WasiErrno::INVAL),
    };
    let new = i128::from(base) + i128::from(off);
    let new = u64::try_from(new)
        .ok()
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or(WasiErrno::INVAL)?;
    x.fds.file(fd)?.pos = new;
    g.put_u64(out, new)
}

fn path_open(x: &mut Ctx, fd: u32, dirflags: u32, path: &[u8], of: u16, base: u64, fdf: u16) -> Result<u32> {
    if let Entry::DevDir = x.fds.get(fd)? {
        return dev_open(x, path, of);
    }
    let dir = dir(x, fd)?;
    let directory = of & oflags::DIRECTORY != 0;
    let write = !directory && base & (rights::FD_WRITE | rights::FD_ALLOCATE | rights::FD_FILESTAT_SET_SIZE) != 0;
    let flags = OpenFlags {
        read: base & (rights::FD_READ | rights::FD_READDIR) != 0 || !write,
        write,
        create: of & oflags::CREAT != 0,
        exclusive: of & oflags::EXCL != 0,
        truncate: of & oflags::TRUNC != 0,
        append: false,
        nofollow: !follows(dirflags),
        directory,
        mode: 0o644,
    };
    let kfd = match x.process.open_at(At::Beneath(dir), path, flags) {
        // A directory opened for reading without O_DIRECTORY (open(dir, O_RDONLY)): as one.
        Err(e) if e.errno == vino_kernel::Errno::IsDir && !write => x.process.open_at(
            At::Beneath(dir),
            path,
            OpenFlags {
                directory: true,
                create: false,
                truncate: false,
                ..flags
            },
        )?,
        other => other?,
    };
    let kind = match x.process.fstat(kfd) {
        Ok(st) => abi::filetype_of(st.kind),
        Err(e) => {
            let _ = x.process.close(kfd);
            return Err(e.into());
        }
    };
    let entry = Entry::File(File {
        fd: kfd,
        pos: 0,
        append: fdf & fdflags::APPEND != 0,
        filetype: kind,
        preopen: None,
    });
    x.fds.insert(entry).inspect_err(|_| {
        let _ = x.process.close(kfd);
    })
}

/// Opens a name under `/dev`: a device, a standard stream again, or `/dev` itself. A name it
/// does not hold is `ENOENT`, or `EACCES` to create (nobody makes files there).
fn dev_open(x: &mut Ctx, path: &[u8], of: u16) -> Result<u32> {
    let node = match dev::lookup(path, has_tty(x)) {
        Err(WasiErrno::NOENT) if of & oflags::CREAT != 0 => return Err(WasiErrno::ACCES),
        other => other?,
    };
    if of & (oflags::CREAT | oflags::EXCL) == oflags::CREAT | oflags::EXCL {
        return Err(WasiErrno::EXIST);
    }
    let entry = match node {
        Node::Dir => Entry::DevDir,
        _ if of & oflags::DIRECTORY != 0 => return Err(WasiErrno::NOTDIR),
        Node::Device(d) => Entry::Device(d),
        Node::Stream(i) => Entry::Stdio(i),
    };
    x.fds.insert(entry)
}

// ---- waiting ---------------------------------------------------------------------------------

/// What a `poll_oneoff` waits for: (userdata, deadline on the monotonic clock) of each clock
/// subscription, and the events ready at once: (userdata, event type, errno).
struct PollPlan {
    start: u64,
    clocks: Vec<(u64, u64)>,
    ready: Vec<(u64, u8, u16)>,
    /// Pipe ends not ready yet: (userdata, event, end).
    pipes: Vec<(u64, u8, std::sync::Arc<vino_kernel::PipeEnd>)>,
    /// Sockets not ready yet: (userdata, event, socket).
    sockets: Vec<(u64, u8, sockets::SocketFd)>,
}

/// Reads the subscriptions. Descriptor subscriptions are ready at once (files never block; the
/// standard input is reported readable and its read may wait); a descriptor that is not open is
/// its event's error.
fn poll_plan(g: &mut Guest<'_>, x: &mut Ctx, subs: u32, n: u32) -> Result<PollPlan> {
    if n == 0 {
        return Err(WasiErrno::INVAL);
    }
    if n > 4096 {
        return Err(WasiErrno::TOOBIG);
    }
    let start = monotonic();
    let mut plan = PollPlan {
        start,
        clocks: Vec::new(),
        ready: Vec::new(),
        pipes: Vec::new(),
        sockets: Vec::new(),
    };
    for i in 0..n {
        let s = subs.checked_add(i * abi::SUBSCRIPTION_SIZE).ok_or(WasiErrno::FAULT)?;
        g.bytes(s, abi::SUBSCRIPTION_SIZE)?;
        let (userdata, tag) = (g.u64(s)?, g.u8(s + 8)?);
        match tag {
            event::CLOCK => {
                let (id, timeout, flags) = (g.u32(s + 16)?, g.u64(s + 24)?, g.u16(s + 40)?);
                let deadline = if flags & event::SUBSCRIPTION_CLOCK_ABSTIME != 0 {
                    let clock_now = now(id)?;
                    start.saturating_add(timeout.saturating_sub(clock_now))
                } else {
                    now(id)?;
                    start.saturating_add(timeout)
                };
                plan.clocks.push((userdata, deadline));
            }
            event::FD_READ | event::FD_WRITE => match x.fds.get(g.u32(s + 16)?) {
                Ok(Entry::Pipe(p)) => {
                    let side = if tag == event::FD_READ {
                        vino_kernel::Side::Read
                    } else {
                        vino_kernel::Side::Write
                    };
                    if p.end.side() != side {
                        plan.ready.push((userdata, tag, WasiErrno::BADF.0));
                    } else if p.end.ready() {
                        plan.ready.push((userdata, tag, 0));
                    } else {
                        plan.pipes.push((userdata, tag, p.end.clone()));
                    }
                }
                Ok(Entry::Socket(s)) => {
                    let noop = std::task::Context::from_waker(std::task::Waker::noop());
                    if s.sock.poll(socket_interest(tag), &noop).is_ready() {
                        plan.ready.push((userdata, tag, 0));
                    } else {
                        plan.sockets.push((userdata, tag, s.clone()));
                    }
                }
                Ok(_) => plan.ready.push((userdata, tag, 0)),
                Err(_) => plan.ready.push((userdata, tag, WasiErrno::BADF.0)),
            },
            _ => return Err(WasiErrno::INVAL),
        }
    }
    Ok(plan)
}

/// With nothing ready, waits (the thread gives its worker back) until a pipe it watches is
/// ready or the earliest clock subscription is due, in slices of at most 10 ms so that a kill
/// ends the wait; a signal to deliver ends it with `EINTR`. Returns the events.
async fn sleep(
    thread: vino_sched::ThreadCtx,
    process: &vino_kernel::Process,
    killed: &std::sync::atomic::AtomicBool,
    mut plan: PollPlan,
) -> Result<Vec<(u64, u8, u16)>> {
    if !plan.ready.is_empty() {
        return Ok(plan.ready);
    }
    let until = plan.clocks.iter().map(|c| c.1).min();
    let until = if plan.pipes.is_empty() && plan.sockets.is_empty() {
        Some(until.unwrap_or(plan.start))
    } else {
        until
    };
    loop {
        let t = monotonic();
        if until.is_some_and(|u| t >= u) {
            break;
        }
        if process.killed() || killed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(WasiErrno::INTR);
        }
        let nap = until.map_or(10_000_000, |u| (u - t).min(10_000_000));
        let mut timer = std::pin::pin!(thread.sleep_until(Instant::now() + Duration::from_nanos(nap)));
        let (pipes, sockets) = (&plan.pipes, &plan.sockets);
        let woke = std::future::poll_fn(|cx| {
            let mut ready: Vec<_> = pipes
                .iter()
                .filter(|(_, tag, end)| {
                    let r = if *tag == event::FD_READ {
                        end.poll_readable(cx)
                    } else {
                        end.poll_writable(1, cx)
                    };
                    r.is_ready()
                })
                .map(|(u, tag, _)| (*u, *tag, 0))
                .collect();
            ready.extend(
                sockets
                    .iter()
                    .filter(|(_, tag, s)| s.sock.poll(socket_interest(*tag), cx).is_ready())
                    .map(|(u, tag, _)| (*u, *tag, 0)),
            );
            if !ready.is_empty() {
                return std::task::Poll::Ready(Some(ready));
            }
            if process.poll_signal(cx).is_ready() {
                return std::task::Poll::Ready(None);
            }
            timer.as_mut().poll(cx).map(|()| Some(Vec::new()))
        })
        .await;
        match woke {
            None => return Err(WasiErrno::INTR),
            Some(ready) if !ready.is_empty() => {
                plan.ready.extend(ready);
                break;
            }
            Some(_) => {}
        }
    }
    let t = monotonic();
    plan.ready
        .extend(plan.clocks.iter().filter(|c| c.1 <= t).map(|c| (c.0, event::CLOCK, 0)));
    Ok(plan.ready)
}

/// What a descriptor subscription of type `tag` waits for on a socket.
fn socket_interest(tag: u8) -> vino_kernel::SocketInterest {
    if tag == event::FD_READ {
        vino_kernel::SocketInterest::Read
    } else {
        vino_kernel::SocketInterest::Write
    }
}

fn poll_events(g: &mut Guest<'_>, ready: &[(u64, u8, u16)], events: u32, out: u32) -> Result<()> {
    for (i, (userdata, tag, error)) in ready.iter().enumerate() {
        let e = events.checked_add(i as u32 * abi::EVENT_SIZE).ok_or(WasiErrno::FAULT)?;
        g.bytes_mut(e, abi::EVENT_SIZE)?.fill(0);
        g.put_u64(e, *userdata)?;
        g.put_u16(e + 8, *error)?;
        g.put_u8(e + 10, *tag)?;
    }
    g.put_u32(out, ready.len() as u32)
}
