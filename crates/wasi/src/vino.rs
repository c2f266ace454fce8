//! The `vino` import module: what a VINO process may ask beyond WASI (the SDK's
//! `vino_process.h` declares it). Grafting its own objects from inside, with the same
//! graftpoint names as the client libraries; a descriptor in a name (`file.compute_ra/3`) is
//! the program's own, translated to the kernel's. Each call returns 0 or a result, or a
//! negative WASI errno (the numbers wasi-libc's <errno.h> uses). Also modes and owners, which
//! preview 1 lacks, and the null call (`null`), which does nothing, for timing the crossing.

use crate::Ctx;
use crate::abi::WasiErrno;
use crate::calls::sys_value;
use crate::fds::Entry;
use crate::guest::{Guest, Result};
use vino_kernel::Attrs;
use wasmtime::{Caller, Linker};

/// The import module's name.
pub const MODULE: &str = "vino";
/// Most arguments a control call takes.
const CALL_ARGS_MAX: u32 = 8;
/// Longest graftpoint or control-function name.
const NAME_MAX: u32 = 256;

pub fn define(l: &mut Linker<Ctx>) -> wasmtime::Result<()> {
    type C<'a> = Caller<'a, Ctx>;
    // The null system call: does nothing and returns 0, through the same entry as every other
    // call (the process's memory and context found), so that timing it measures what crossing
    // from the program into the kernel costs.
    l.func_wrap(MODULE, "null", |mut c: C| sys_value(&mut c, |_, _| Ok(0)))?;
    crate::process_calls::define(l)?;
    crate::sockets::define_vino(l)?;
    // The process's timer: fires its `event.timer` graft every period, on a thread of its own.
    l.func_wrap(MODULE, "timer_start", |mut c: C, period_ns: u64| {
        sys_value(&mut c, |_, x| {
            x.process.timer_start(std::time::Duration::from_nanos(period_ns))?;
            Ok(0)
        })
    })?;
    l.func_wrap(MODULE, "timer_stop", |mut c: C| {
        sys_value(&mut c, |_, x| {
            // Not waited for here: this thread is on a worker the timer's thread may need.
            x.process.timer_cancel();
            Ok(0)
        })
    })?;
    define_mappings(l)?;
    l.func_wrap(
        MODULE,
        "graft_load",
        |mut c: C, point: u32, len: u32, wasm: u32, wasm_len: u32| {
            sys_value(&mut c, |g, x| {
                let point = kernel_point(x, &name(g, point, len)?)?;
                x.process.graft_load(&point, g.bytes(wasm, wasm_len)?)?;
                Ok(0)
            })
        },
    )?;
    l.func_wrap(MODULE, "graft_unload", |mut c: C, point: u32, len: u32| {
        sys_value(&mut c, |g, x| {
            let point = kernel_point(x, &name(g, point, len)?)?;
            x.process.graft_unload(&point)?;
            Ok(0)
        })
    })?;
    l.func_wrap(
        MODULE,
        "graft_call",
        |mut c: C, point: u32, len: u32, control: u32, control_len: u32, args: u32, nargs: u32, out: u32| {
            sys_value(&mut c, |g, x| {
                let point = kernel_point(x, &name(g, point, len)?)?;
                let control = name(g, control, control_len)?;
                if nargs > CALL_ARGS_MAX {
                    return Err(WasiErrno::INVAL);
                }
                let args = (0..nargs)
                    .map(|i| g.u64(args + 8 * i).map(|v| v as i64))
                    .collect::<Result<Vec<i64>>>()?;
                g.bytes(out, 8)?;
                let result = x.process.graft_call(&point, &control, &args)?;
                g.put_u64(out, result as u64)?;
                Ok(0)
            })
        },
    )?;
    // A stream codec bound to a file or directory of the program's (the owner's right, as for
    // any process); no module (a length of 0) unbinds.
    l.func_wrap(
        MODULE,
        "stream_bind",
        |mut c: C, dirfd: u32, path: u32, len: u32, wasm: u32, wasm_len: u32| {
            sys_value(&mut c, |g, x| {
                let dir = crate::calls::dir(x, dirfd)?;
                let wasm = if wasm_len == 0 {
                    None
                } else {
                    Some(g.bytes(wasm, wasm_len)?)
                };
                x.process
                    .stream_bind_at(vino_kernel::At::Beneath(dir), &g.path(path, len)?, wasm)?;
                Ok(0)
            })
        },
    )?;
    // Modes and owners, which WASI preview 1 has no calls for; the kernel checks them as for
    // any process.
    l.func_wrap(MODULE, "fd_chmod", |mut c: C, fd: u32, mode: u32| {
        sys_value(&mut c, |_, x| {
            let mode = u16::try_from(mode & 0o7777).map_err(|_| WasiErrno::INVAL)?;
            set_attrs(
                x,
                fd,
                &Attrs {
                    mode: Some(mode),
                    ..Default::default()
                },
            )
        })
    })?;
    l.func_wrap(MODULE, "fd_chown", |mut c: C, fd: u32, uid: i32, gid: i32| {
        sys_value(&mut c, |_, x| {
            // -1 leaves one as it is, as chown(2) has it.
            let id = |v: i32| u32::try_from(v).ok();
            set_attrs(
                x,
                fd,
                &Attrs {
                    uid: id(uid),
                    gid: id(gid),
                    ..Default::default()
                },
            )
        })
    })?;
    Ok(())
}

fn set_attrs(x: &mut Ctx, fd: u32, attrs: &Attrs) -> Result<i32> {
    let kfd = x.fds.file(fd)?.fd;
    x.process.fsetattr(kfd, attrs)?;
    Ok(0)
}

fn name(g: &Guest<'_>, ptr: u32, len: u32) -> Result<String> {
    if len > NAME_MAX {
        return Err(WasiErrno::NAMETOOLONG);
    }
    String::from_utf8(g.bytes(ptr, len)?.to_vec()).map_err(|_| WasiErrno::INVAL)
}

/// `point` with a trailing descriptor (`name/<fd>`) made the kernel's descriptor.
fn kernel_point(x: &mut Ctx, point: &str) -> Result<String> {
    // A socket's layer: `net.stream/<fd>/<depth>`.
    if let Some((fd, depth)) = point.strip_prefix("net.stream/").and_then(|r| r.split_once('/')) {
        let fd: u32 = fd.parse().map_err(|_| WasiErrno::INVAL)?;
        let id = crate::sockets::socket(x, fd)?.sock.connection()?;
        return Ok(format!("net.stream/{id}/{depth}"));
    }
    let Some((base, fd)) = point.rsplit_once('/') else {
        return Ok(point.to_string());
    };
    let fd: u32 = fd.parse().map_err(|_| WasiErrno::INVAL)?;
    match x.fds.get(fd)? {
        Entry::File(f) => Ok(format!("{base}/{}", f.fd)),
        _ => Err(WasiErrno::BADF),
    }
}

/// `vino_mmap` flags: the mapping is shared (stores reach the file), and writable.
const MAP_SHARED: u32 = 1;
const MAP_WRITABLE: u32 = 2;

/// Files mapped into the program's memory: `mmap(addr, len, flags, fd, offset)` over a
/// page-aligned range the program gives (the SDK's `mmap` allocates it), `munmap(addr, len)`,
/// `msync(addr, len, durable)`.
fn define_mappings(l: &mut Linker<Ctx>) -> wasmtime::Result<()> {
    type C<'a> = Caller<'a, Ctx>;
    l.func_wrap(
        MODULE,
        "mmap",
        |mut c: C, addr: u32, len: u32, flags: u32, fd: u32, offset: u64| {
            sys_value(&mut c, |g, x| {
                g.bytes(addr, len)?;
                let Entry::File(f) = x.fds.get(fd)? else {
                    return Err(WasiErrno::NODEV);
                };
                let (shared, writable) = (flags & MAP_SHARED != 0, flags & MAP_WRITABLE != 0);
                x.process
                    .mmap(addr as usize, len as usize, f.fd, offset, shared, writable)?;
                Ok(0)
            })
        },
    )?;
    l.func_wrap(MODULE, "munmap", |mut c: C, addr: u32, len: u32| {
        sys_value(&mut c, |_, x| {
            x.process.munmap(addr as usize, len as usize)?;
            Ok(0)
        })
    })?;
    l.func_wrap(MODULE, "msync", |mut c: C, addr: u32, len: u32, durable: u32| {
        sys_value(&mut c, |_, x| {
            x.process.msync(addr as usize, len as usize, durable != 0)?;
            Ok(0)
        })
    })?;
    Ok(())
}
