//! The process model's calls in the `vino` import module (the SDK's compatibility layer turns
//! them into posix_spawn, waitpid, pipe, mkfifo, kill, sigaction, sigprocmask, sigpending and
//! sigsuspend): each returns a result `>= 0` or a negative WASI errno, as the rest of `vino`.

use crate::Ctx;
use crate::abi::WasiErrno;
use crate::calls::{sys_value, with_memory};
use crate::fds::{Entry, PipeFd};
use crate::guest::Result;
use crate::signals;
use crate::spawn;
use crate::vino::MODULE;
use std::sync::Arc;
use std::task::Poll;
use vino_kernel::signal::{Disposition, MaskHow, SIGMAX};
use vino_kernel::{At, FileType, Waited};
use wasmtime::{Caller, Linker};

const WNOHANG: i32 = 1;
const FDFLAGS_NONBLOCK: u32 = 4;
const SA_RESTART: i32 = 1;

/// A call's value or its negative errno.
fn value(r: Result<i32>) -> i32 {
    r.unwrap_or_else(|e| -i32::from(e.0))
}

pub fn define(l: &mut Linker<Ctx>) -> wasmtime::Result<()> {
    type C<'a> = Caller<'a, Ctx>;
    l.func_wrap(MODULE, "getpid", |c: C| c.data().process.pid() as i32)?;
    l.func_wrap(MODULE, "getppid", |c: C| c.data().process.ppid() as i32)?;
    l.func_wrap(
        MODULE,
        "spawn",
        |mut c: C,
         module_fd: u32,
         argv: u32,
         argv_len: u32,
         envp: u32,
         envp_len: u32,
         actions: u32,
         n: u32,
         attr: u32| {
            sys_value(&mut c, |g, x| {
                let r = spawn::Request {
                    module_fd,
                    argv: (argv, argv_len),
                    envp: (envp, envp_len),
                    actions: (actions, n),
                    attr,
                };
                spawn::spawn(g, x, r)
            })
        },
    )?;
    l.func_wrap_async(MODULE, "wait", |mut c: C, (pid, options, status): (i32, i32, u32)| {
        Box::new(async move {
            let r = wait(&mut c, pid, options, status).await?;
            signals::after(&mut c, value(r)).await
        })
    })?;
    l.func_wrap(MODULE, "pipe", |mut c: C, out: u32, flags: u32| {
        sys_value(&mut c, |g, x| {
            g.bytes(out, 8)?;
            let (r, w) = x.process.pipe()?;
            let nonblock = flags & FDFLAGS_NONBLOCK != 0;
            let entry = |end| {
                Entry::Pipe(PipeFd {
                    end: Arc::new(end),
                    nonblock,
                })
            };
            let rfd = x.fds.insert(entry(r))?;
            let wfd = x.fds.insert(entry(w)).inspect_err(|_| {
                let _ = x.fds.remove(rfd);
            })?;
            g.put_u32(out, rfd)?;
            g.put_u32(out + 4, wfd)?;
            Ok(0)
        })
    })?;
    l.func_wrap(
        MODULE,
        "mkfifo",
        |mut c: C, dirfd: u32, path: u32, len: u32, mode: u32| {
            sys_value(&mut c, |g, x| {
                let dir = crate::calls::dir(x, dirfd)?;
                let mode = (mode & 0o7777) as u16;
                x.process
                    .mknod_at(At::Beneath(dir), g.path(path, len)?, FileType::Fifo, mode, 0)?;
                Ok(0)
            })
        },
    )?;
    l.func_wrap_async(MODULE, "kill", |mut c: C, (pid, sig): (i32, i32)| {
        Box::new(async move {
            let r = kill(c.data(), pid, sig);
            signals::after(&mut c, value(r)).await
        })
    })?;
    l.func_wrap(MODULE, "sigaction", |c: C, sig: i32, disposition: i32, flags: i32| {
        value(sigaction(c.data(), sig, disposition, flags))
    })?;
    l.func_wrap(MODULE, "signal_trampoline", |mut c: C, index: u32| {
        c.data_mut().trampoline = Some(index);
        0
    })?;
    l.func_wrap_async(MODULE, "sigprocmask", |mut c: C, (how, set, old): (i32, i64, u32)| {
        Box::new(async move {
            let r = with_memory(&mut c, |g, x| {
                let how = match how {
                    0 => MaskHow::Block,
                    1 => MaskHow::Unblock,
                    2 => MaskHow::Set,
                    _ => return Err(WasiErrno::INVAL),
                };
                if old != 0 {
                    g.bytes(old, 8)?;
                }
                let was = x.process.signal_mask(how, set as u64);
                if old != 0 {
                    g.put_u64(old, was)?;
                }
                Ok(0)
            });
            signals::after(&mut c, value(r)).await
        })
    })?;
    l.func_wrap(MODULE, "sigpending", |mut c: C, out: u32| {
        sys_value(&mut c, |g, x| {
            g.put_u64(out, x.process.pending_signals() & x.process.blocked_signals())?;
            Ok(0)
        })
    })?;
    l.func_wrap_async(MODULE, "sigsuspend", |mut c: C, (mask,): (i64,)| {
        Box::new(async move { sigsuspend(&mut c, mask as u64).await })
    })?;
    Ok(())
}

/// `waitpid(pid, &status, options)`: a child that ended (its pid, its status written), 0 with
/// WNOHANG while they all run, ECHILD with none, EINTR when a handled signal comes first.
async fn wait(c: &mut Caller<'_, Ctx>, pid: i32, options: i32, status: u32) -> wasmtime::Result<Result<i32>> {
    let target = match pid {
        -1 => None,
        p if p > 0 => Some(p as u64),
        _ => return Ok(Err(WasiErrno::NOTSUP)), // process groups
    };
    if status != 0
        && let Err(e) = with_memory(c, |g, _| g.bytes(status, 4).map(drop))
    {
        return Ok(Err(e));
    }
    let process = c.data().process.clone();
    loop {
        match process.wait_child(target) {
            Err(e) => return Ok(Err(e.into())),
            Ok(Waited::Child(pid, st)) => {
                let put = with_memory(c, |g, _| {
                    if status != 0 {
                        g.put_u32(status, st.wait_status() as u32)?;
                    }
                    Ok(pid as i32)
                });
                return Ok(put);
            }
            Ok(Waited::Running) if options & WNOHANG != 0 => return Ok(Ok(0)),
            Ok(Waited::Running) => {}
        }
        let signalled = std::future::poll_fn(|cx| {
            if process.poll_child(target, cx).is_ready() {
                return Poll::Ready(false);
            }
            if process.poll_signal(cx).is_ready() {
                return Poll::Ready(true);
            }
            Poll::Pending
        })
        .await;
        if signalled {
            let d = signals::deliver(c).await?;
            if !(d.handled && d.restart) {
                return Ok(Err(WasiErrno::INTR));
            }
        }
    }
}

fn kill(x: &Ctx, pid: i32, sig: i32) -> Result<i32> {
    if pid <= 0 {
        return Err(WasiErrno::NOTSUP); // process groups and "everyone"
    }
    let sig = u8::try_from(sig).map_err(|_| WasiErrno::INVAL)?;
    if sig > SIGMAX {
        return Err(WasiErrno::INVAL);
    }
    let kernel = x.process.kernel();
    kernel.signal(x.process.credentials(), pid as u64, sig)?;
    Ok(0)
}

fn sigaction(x: &Ctx, sig: i32, disposition: i32, flags: i32) -> Result<i32> {
    let sig = u8::try_from(sig).map_err(|_| WasiErrno::INVAL)?;
    if !(1..=SIGMAX).contains(&sig) {
        return Err(WasiErrno::INVAL);
    }
    let action = match disposition {
        // Asks without changing it.
        -1 => return Ok(code(x.process.signal_disposition(sig))),
        0 => Disposition::Default,
        1 => Disposition::Ignore,
        2 => Disposition::Handle {
            restart: flags & SA_RESTART != 0,
        },
        _ => return Err(WasiErrno::INVAL),
    };
    Ok(code(x.process.signal_action(sig, action)?))
}

/// A disposition as the ABI numbers it.
fn code(d: Disposition) -> i32 {
    match d {
        Disposition::Default => 0,
        Disposition::Ignore => 1,
        Disposition::Handle { .. } => 2,
    }
}

/// Waits with `mask` until a handled signal has run its handler (or a default ended it);
/// always EINTR, the old mask back.
async fn sigsuspend(c: &mut Caller<'_, Ctx>, mask: u64) -> wasmtime::Result<i32> {
    let process = c.data().process.clone();
    let old = process.signal_mask(MaskHow::Set, mask);
    loop {
        std::future::poll_fn(|cx| process.poll_signal(cx)).await;
        let d = signals::deliver(c).await;
        if d.is_err() {
            process.signal_mask(MaskHow::Set, old);
        }
        if d?.handled {
            break;
        }
    }
    process.signal_mask(MaskHow::Set, old);
    Ok(-i32::from(WasiErrno::INTR.0))
}
