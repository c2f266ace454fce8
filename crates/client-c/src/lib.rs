//! `libvino`: the C ABI of [`::vino_client`], declared in `include/vino.h`.
//!
//! Every exported function checks its pointers, runs the call under `catch_unwind` (a panic
//! never crosses into C: it fails the call with `-EIO` and leaves the client unusable, since a
//! request may have been half sent) and returns a value `>= 0`, or `-errno` with the message kept
//! for `vino_last_error`. The Python package `vino` loads this library through ctypes.
//!
//! # Pointer contract
//!
//! The exported functions trust what C passes them as `vino.h` states it; from Rust they are
//! `unsafe` for that reason. Their `# Safety` sections use these terms:
//!
//! * a *client* is NULL or a pointer returned by [`vino_connect`] and not yet passed to
//!   [`vino_disconnect`], which no other thread uses during the call;
//! * a *string* is NULL or points to a NUL-terminated string that stays valid and unchanged
//!   during the call;
//! * an *input buffer* `(p, len)` with `len > 0` is NULL or points to `len` readable elements
//!   (aligned for their type) that nothing writes during the call; an *output buffer* is the
//!   same, writable, and nothing else reads or writes it during the call. With `len == 0`, `p`
//!   is not used;
//! * an *out pointer* to a `T` is NULL or aligned and valid for writing one `T`.

#![allow(non_camel_case_types)]

mod at;
mod types;

pub use at::{
    VINO_AT_ROOT, VINO_AT_SYMLINK_FOLLOW, VINO_AT_SYMLINK_NOFOLLOW, VINO_FALLOC_KEEP_SIZE, VINO_FALLOC_PUNCH_HOLE,
    VINO_FALLOC_ZERO_RANGE, VINO_RENAME_NOREPLACE, VINO_XATTR_CREATE, VINO_XATTR_REPLACE,
};
pub use types::{
    VINO_SET_ATIME, VINO_SET_ATIME_NOW, VINO_SET_GID, VINO_SET_MODE, VINO_SET_MTIME, VINO_SET_MTIME_NOW, VINO_SET_SIZE,
    VINO_SET_UID, vino_dirent, vino_event, vino_graft_info, vino_lock, vino_setattr, vino_stat,
};

use ::vino_client::{Client, ClientError, Event, LockKind, OpenFlags, errno};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{CStr, CString, c_char, c_int, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// `vino_open` flags, as in `vino.h`.
pub const VINO_O_READ: c_int = 0x01;
pub const VINO_O_WRITE: c_int = 0x02;
pub const VINO_O_CREAT: c_int = 0x04;
pub const VINO_O_EXCL: c_int = 0x08;
pub const VINO_O_TRUNC: c_int = 0x10;
pub const VINO_O_APPEND: c_int = 0x20;
pub const VINO_O_NOFOLLOW: c_int = 0x40;
pub const VINO_O_DIRECTORY: c_int = 0x80;
const VINO_O_ALL: c_int = 0xff;

/// A connection, as C sees it (opaque there).
pub struct vino_client {
    client: Option<Client>,
    /// The last failure's message, NUL-terminated for C.
    error: CString,
    /// Events the caller had no room for at the last `vino_event_wait`.
    pending: VecDeque<Event>,
}

thread_local! {
    /// The last `vino_connect` failure of this thread (there is no client to keep it in).
    static CONNECT_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Turns a message into a C string, dropping NULs (they cannot be shown anyway).
fn c_message(message: &str) -> CString {
    CString::new(message.replace('\0', "")).expect("NULs removed")
}

fn fail(errno: i32, message: impl Into<String>) -> ClientError {
    ClientError {
        errno,
        message: message.into(),
    }
}

fn inval(message: &str) -> ClientError {
    fail(errno::EINVAL, message)
}

type Res<T> = Result<T, ClientError>;

/// Runs `f` on the client's connection: null checks, panics caught, errors to `-errno`.
///
/// # Safety
///
/// `c` is a client (see the [pointer contract](crate#pointer-contract)).
unsafe fn with_client(c: *mut vino_client, f: impl FnOnce(&mut Client, &mut VecDeque<Event>) -> Res<i64>) -> i64 {
    // SAFETY: `c` is NULL (then `as_mut` gives `None`) or a live, aligned `vino_client` made by
    // `vino_connect`, which no other thread touches during the call: the reference is unique.
    let Some(c) = (unsafe { c.as_mut() }) else {
        return -(errno::EINVAL as i64);
    };
    let Some(client) = c.client.as_mut() else {
        c.error = c_message("the connection is unusable after an internal error in libvino");
        return -(errno::EIO as i64);
    };
    let pending = &mut c.pending;
    match catch_unwind(AssertUnwindSafe(|| f(client, pending))) {
        Ok(Ok(v)) => {
            debug_assert!(v >= 0, "a success must be >= 0");
            v
        }
        Ok(Err(e)) => {
            c.error = c_message(&e.message);
            -(e.errno.max(1) as i64)
        }
        Err(_) => {
            c.client = None;
            c.error = c_message("internal error in libvino (a panic); the connection is closed");
            -(errno::EIO as i64)
        }
    }
}

/// [`with_client`] for the calls whose C return type is `int`.
///
/// # Safety
///
/// As for [`with_client`].
unsafe fn with_client_int(c: *mut vino_client, f: impl FnOnce(&mut Client, &mut VecDeque<Event>) -> Res<i64>) -> c_int {
    // SAFETY: the caller passes a client, as `with_client` requires.
    unsafe { with_client(c, f) }.clamp(c_int::MIN as i64, c_int::MAX as i64) as c_int
}

/// A C string argument, or `EINVAL` naming it.
///
/// # Safety
///
/// `p` is a string (see the [pointer contract](crate#pointer-contract)) that stays valid and
/// unchanged for `'a`.
unsafe fn arg_str<'a>(p: *const c_char, what: &str) -> Res<&'a str> {
    if p.is_null() {
        return Err(inval(&format!("{what} is NULL")));
    }
    // SAFETY: `p` is not NULL (checked), so by this function's contract it points to a
    // NUL-terminated string that stays valid and unchanged for `'a`.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| inval(&format!("{what} is not UTF-8")))
}

/// An input buffer `(p, len)` as a slice; NULL is allowed with length 0.
///
/// # Safety
///
/// `(p, len)` is an input buffer (see the [pointer contract](crate#pointer-contract)) that
/// stays valid and unwritten for `'a`.
unsafe fn arg_slice<'a, T>(p: *const T, len: usize, what: &str) -> Res<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(inval(&format!("{what} is NULL")));
    }
    // SAFETY: `p` is not NULL and `len > 0` (checked), so by this function's contract it points
    // to `len` aligned, readable `T`s that nothing writes for `'a` (elements that exist in memory
    // span at most `isize::MAX` bytes).
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// An output buffer `(p, len)` of bytes; NULL is allowed with length 0.
///
/// # Safety
///
/// `(p, len)` is an output buffer (see the [pointer contract](crate#pointer-contract)) that
/// stays valid, and untouched by anything else, for `'a`.
unsafe fn arg_bytes_mut<'a>(p: *mut u8, len: usize, what: &str) -> Res<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(inval(&format!("{what} is NULL")));
    }
    // SAFETY: `p` is not NULL and `len > 0` (checked), so by this function's contract it points
    // to `len` writable bytes that nothing else touches for `'a`: the slice is unique.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// A file descriptor argument.
fn arg_fd(fd: c_int) -> Res<u32> {
    u32::try_from(fd).map_err(|_| fail(errno::EBADF, format!("bad file descriptor {fd}")))
}

/// Stores `v` through `out` if it is not NULL. The old contents are neither read nor dropped,
/// so `out` may point to uninitialised memory.
///
/// # Safety
///
/// `out` is an out pointer (see the [pointer contract](crate#pointer-contract)).
unsafe fn put<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: `out` is not NULL (checked), so by this function's contract it is aligned and
        // valid for writing a `T`.
        unsafe { out.write(v) };
    }
}

fn open_flags(flags: c_int, mode: c_uint) -> Res<OpenFlags> {
    if flags & !VINO_O_ALL != 0 {
        return Err(inval(&format!("unknown open flags {:#x}", flags & !VINO_O_ALL)));
    }
    let mode = u16::try_from(mode).map_err(|_| inval(&format!("mode {mode:#o} is too large")))?;
    Ok(OpenFlags {
        read: flags & VINO_O_READ != 0,
        write: flags & VINO_O_WRITE != 0,
        create: flags & VINO_O_CREAT != 0,
        exclusive: flags & VINO_O_EXCL != 0,
        truncate: flags & VINO_O_TRUNC != 0,
        append: flags & VINO_O_APPEND != 0,
        mode,
        nofollow: flags & VINO_O_NOFOLLOW != 0,
        directory: flags & VINO_O_DIRECTORY != 0,
    })
}

fn lock_kind(kind: c_int) -> Res<LockKind> {
    match kind {
        0 => Ok(LockKind::Unlock),
        1 => Ok(LockKind::Read),
        2 => Ok(LockKind::Write),
        _ => Err(inval(&format!("unknown lock kind {kind}"))),
    }
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).expect("a count fits in i64")
}

// ---- connections ------------------------------------------------------------------------------

fn set_connect_error(message: &str) {
    CONNECT_ERROR.with(|e| *e.borrow_mut() = c_message(message));
}

/// # Safety
///
/// `path` is a string (see the [pointer contract](crate#pointer-contract)).
unsafe fn connect(path: *const c_char) -> Res<Client> {
    if path.is_null() {
        return Client::connect_default();
    }
    // SAFETY: `path` is a string, by this function's contract.
    Client::connect(unsafe { arg_str(path, "socket_path") }?)
}

/// Connects to the daemon (`vino.h`).
///
/// # Safety
///
/// `socket_path` is a string (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_connect(socket_path: *const c_char) -> *mut vino_client {
    // SAFETY: `socket_path` is a string, by this function's contract.
    let result = catch_unwind(|| unsafe { connect(socket_path) })
        .unwrap_or_else(|_| Err(fail(errno::EIO, "internal error in libvino (a panic) while connecting")));
    match result {
        Ok(client) => Box::into_raw(Box::new(vino_client {
            client: Some(client),
            error: CString::default(),
            pending: VecDeque::new(),
        })),
        Err(e) => {
            set_connect_error(&e.message);
            set_errno(e.errno);
            std::ptr::null_mut()
        }
    }
}

/// Sets the C `errno` of this thread.
fn set_errno(value: i32) {
    // SAFETY: `__errno_location` (glibc and musl) returns the address of this thread's `errno`,
    // an aligned `int` that lives as long as the thread.
    unsafe { *errno_location() = value };
}

unsafe extern "C" {
    #[link_name = "__errno_location"]
    fn errno_location() -> *mut c_int;
}

/// Disconnects and frees the client.
///
/// # Safety
///
/// `client` is a client (see the [pointer contract](crate#pointer-contract)); it must not be
/// used again after this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_disconnect(client: *mut vino_client) {
    if client.is_null() {
        return;
    }
    // SAFETY: a non-null client is the `Box` made by `vino_connect`, not yet freed, and by this
    // function's contract neither used meanwhile nor used again: it is freed here, once.
    let boxed = unsafe { Box::from_raw(client) };
    // Dropping closes the socket; nothing in it should panic, but C must never see one.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(boxed)));
}

/// The message of the client's (or this thread's connect's) last failure.
///
/// # Safety
///
/// `client` is a client (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_last_error(client: *const vino_client) -> *const c_char {
    // SAFETY: `client` is NULL or a live `vino_client` no other thread uses, by this function's
    // contract, so a shared reference for the call is sound.
    match unsafe { client.as_ref() } {
        Some(c) => c.error.as_ptr(),
        // The thread-local outlives the call; the pointer stays valid until the next connect.
        None => CONNECT_ERROR.with(|e| e.borrow().as_ptr()),
    }
}

/// The kernel's id of this connection's process (0 for NULL).
///
/// # Safety
///
/// `client` is a client (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_pid(client: *const vino_client) -> u64 {
    // SAFETY: as in `vino_last_error`.
    unsafe { client.as_ref() }
        .and_then(|c| c.client.as_ref())
        .map_or(0, Client::pid)
}

/// 1 if the daemon runs this process privileged, else 0.
///
/// # Safety
///
/// `client` is a client (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_privileged(client: *const vino_client) -> c_int {
    // SAFETY: as in `vino_last_error`.
    let c = unsafe { client.as_ref() }.and_then(|c| c.client.as_ref());
    c.is_some_and(Client::privileged) as c_int
}

/// A request that does nothing: the round trip alone.
///
/// # Safety
///
/// `client` is a client (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_null(client: *mut vino_client) -> c_int {
    // SAFETY: `client` is a client, by this function's contract.
    unsafe { with_client_int(client, |c, _| c.null().map(|_| 0)) }
}

// ---- files ------------------------------------------------------------------------------------

/// Opens `path` with `VINO_O_*` flags; returns a file descriptor.
///
/// # Safety
///
/// `client` is a client and `path` a string (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_open(client: *mut vino_client, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: `client` is a client and `path` a string, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let fd = c.open(arg_str(path, "path")?, open_flags(flags, mode)?)?;
            Ok(fd as i64)
        })
    }
}

/// # Safety
///
/// `client` is a client (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_close(client: *mut vino_client, fd: c_int) -> c_int {
    // SAFETY: `client` is a client, by this function's contract.
    unsafe { with_client_int(client, |c, _| c.close(arg_fd(fd)?).map(|_| 0)) }
}

/// Reads at the file offset into `buf`; returns the bytes read.
///
/// # Safety
///
/// `client` is a client and `(buf, len)` an output buffer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_read(client: *mut vino_client, fd: c_int, buf: *mut u8, len: usize) -> i64 {
    // SAFETY: `client` is a client and `(buf, len)` an output buffer, by this function's contract.
    unsafe {
        with_client(client, |c, _| {
            let fd = arg_fd(fd)?;
            Ok(to_i64(c.read(fd, arg_bytes_mut(buf, len, "buf")?)?))
        })
    }
}

/// Reads at `offset` into `buf`; returns the bytes read.
///
/// # Safety
///
/// `client` is a client and `(buf, len)` an output buffer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_pread(client: *mut vino_client, fd: c_int, buf: *mut u8, len: usize, offset: u64) -> i64 {
    // SAFETY: `client` is a client and `(buf, len)` an output buffer, by this function's contract.
    unsafe {
        with_client(client, |c, _| {
            let fd = arg_fd(fd)?;
            Ok(to_i64(c.pread(fd, arg_bytes_mut(buf, len, "buf")?, offset)?))
        })
    }
}

/// Writes `buf` at the file offset; returns the bytes written.
///
/// # Safety
///
/// `client` is a client and `(buf, len)` an input buffer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_write(client: *mut vino_client, fd: c_int, buf: *const u8, len: usize) -> i64 {
    // SAFETY: `client` is a client and `(buf, len)` an input buffer, by this function's contract.
    unsafe {
        with_client(client, |c, _| {
            let fd = arg_fd(fd)?;
            Ok(to_i64(c.write(fd, arg_slice(buf, len, "buf")?)?))
        })
    }
}

/// Writes `buf` at `offset`; returns the bytes written.
///
/// # Safety
///
/// `client` is a client and `(buf, len)` an input buffer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_pwrite(
    client: *mut vino_client,
    fd: c_int,
    buf: *const u8,
    len: usize,
    offset: u64,
) -> i64 {
    // SAFETY: `client` is a client and `(buf, len)` an input buffer, by this function's contract.
    unsafe {
        with_client(client, |c, _| {
            let fd = arg_fd(fd)?;
            Ok(to_i64(c.pwrite(fd, arg_slice(buf, len, "buf")?, offset)?))
        })
    }
}

/// # Safety
///
/// `client` is a client (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_seek(client: *mut vino_client, fd: c_int, offset: u64) -> c_int {
    // SAFETY: `client` is a client, by this function's contract.
    unsafe { with_client_int(client, |c, _| c.seek(arg_fd(fd)?, offset).map(|_| 0)) }
}

/// # Safety
///
/// `client` is a client (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_fsync(client: *mut vino_client, fd: c_int) -> c_int {
    // SAFETY: `client` is a client, by this function's contract.
    unsafe { with_client_int(client, |c, _| c.fsync(arg_fd(fd)?).map(|_| 0)) }
}

/// # Safety
///
/// `client` is a client (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_ftruncate(client: *mut vino_client, fd: c_int, size: u64) -> c_int {
    // SAFETY: `client` is a client, by this function's contract.
    unsafe { with_client_int(client, |c, _| c.ftruncate(arg_fd(fd)?, size).map(|_| 0)) }
}

fn check_out<T>(out: *mut T, what: &str) -> Res<()> {
    if out.is_null() {
        return Err(inval(&format!("{what} is NULL")));
    }
    Ok(())
}

/// # Safety
///
/// `client` is a client and `st` an out pointer (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_fstat(client: *mut vino_client, fd: c_int, st: *mut vino_stat) -> c_int {
    // SAFETY: `client` is a client and `st` an out pointer, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            check_out(st, "st")?;
            put(st, vino_stat::from(&c.fstat(arg_fd(fd)?)?));
            Ok(0)
        })
    }
}

/// # Safety
///
/// `client` is a client, `path` a string and `st` an out pointer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_stat(client: *mut vino_client, path: *const c_char, st: *mut vino_stat) -> c_int {
    // SAFETY: `client` is a client, `path` a string and `st` an out pointer, by this function's
    // contract.
    unsafe {
        with_client_int(client, |c, _| {
            check_out(st, "st")?;
            put(st, vino_stat::from(&c.stat(arg_str(path, "path")?)?));
            Ok(0)
        })
    }
}

/// # Safety
///
/// `client` is a client and `path` a string (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_mkdir(client: *mut vino_client, path: *const c_char, mode: c_uint) -> c_int {
    // SAFETY: `client` is a client and `path` a string, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let mode = u16::try_from(mode).map_err(|_| inval(&format!("mode {mode:#o} is too large")))?;
            c.mkdir(arg_str(path, "path")?, mode).map(|_| 0)
        })
    }
}

/// # Safety
///
/// `client` is a client and `path` a string (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_rmdir(client: *mut vino_client, path: *const c_char) -> c_int {
    // SAFETY: `client` is a client and `path` a string, by this function's contract.
    unsafe { with_client_int(client, |c, _| c.rmdir(arg_str(path, "path")?).map(|_| 0)) }
}

/// # Safety
///
/// `client` is a client and `path` a string (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_unlink(client: *mut vino_client, path: *const c_char) -> c_int {
    // SAFETY: `client` is a client and `path` a string, by this function's contract.
    unsafe { with_client_int(client, |c, _| c.unlink(arg_str(path, "path")?).map(|_| 0)) }
}

/// # Safety
///
/// `client` is a client, `from` and `to` strings (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_rename(client: *mut vino_client, from: *const c_char, to: *const c_char) -> c_int {
    // SAFETY: `client` is a client, `from` and `to` strings, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            c.rename(arg_str(from, "from")?, arg_str(to, "to")?).map(|_| 0)
        })
    }
}

/// Lists a directory into a new array stored in `*entries`; returns the number of entries, the
/// count to give [`vino_readdir_free`].
///
/// # Safety
///
/// `client` is a client, `path` a string and `entries` an out pointer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_readdir(
    client: *mut vino_client,
    path: *const c_char,
    entries: *mut *mut vino_dirent,
) -> c_int {
    // SAFETY: `client` is a client, `path` a string and `entries` an out pointer, by this
    // function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            check_out(entries, "entries")?;
            let list = c.readdir(arg_str(path, "path")?)?;
            let n = list.len();
            // The count is how the array is freed: it must come back whole, not clamped to an int.
            if c_int::try_from(n).is_err() {
                return Err(fail(errno::E2BIG, format!("{n} entries do not fit in an int")));
            }
            put(entries, types::dirents_into_raw(&list));
            Ok(to_i64(n))
        })
    }
}

/// Frees an array from [`vino_readdir`]. NULL is ignored.
///
/// # Safety
///
/// `entries` is NULL or an array stored by [`vino_readdir`], which returned `count`, not freed
/// before and not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_readdir_free(entries: *mut vino_dirent, count: usize) {
    // SAFETY: `entries` and `count` are as `dirents_free` requires, by this function's contract.
    let _ = catch_unwind(|| unsafe { types::dirents_free(entries, count) });
}

/// # Safety
///
/// `client` is a client (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_sync(client: *mut vino_client) -> c_int {
    // SAFETY: `client` is a client, by this function's contract.
    unsafe { with_client_int(client, |c, _| c.sync().map(|_| 0)) }
}

// ---- grafts -----------------------------------------------------------------------------------

/// Loads a WebAssembly graft at a graftpoint.
///
/// # Safety
///
/// `client` is a client, `point` a string, `(wasm, len)` an input buffer and `info` an out
/// pointer (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_graft_load(
    client: *mut vino_client,
    point: *const c_char,
    wasm: *const u8,
    len: usize,
    info: *mut vino_graft_info,
) -> c_int {
    // SAFETY: `client` is a client, `point` a string, `(wasm, len)` an input buffer and `info` an
    // out pointer, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let g = c.graft_load(arg_str(point, "point")?, arg_slice(wasm, len, "wasm")?)?;
            put(info, vino_graft_info::from(&g));
            Ok(0)
        })
    }
}

/// Grafts a file this program opened on the daemon's FUSE mount: stages the module over the
/// connection and binds it with an ioctl on `fd` (see `Client::graft_mount_fd`).
///
/// # Safety
///
/// `client` is a client, `point` a string and `(wasm, len)` an input buffer (see the
/// [pointer contract](crate#pointer-contract)); `fd` is any descriptor.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_fd_graft(
    client: *mut vino_client,
    fd: c_int,
    point: *const c_char,
    wasm: *const u8,
    len: usize,
) -> c_int {
    // SAFETY: `client` is a client, `point` a string and `(wasm, len)` an input buffer, by this
    // function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            arg_fd(fd)?;
            c.graft_mount_fd(fd, arg_str(point, "point")?, arg_slice(wasm, len, "wasm")?)?;
            Ok(0)
        })
    }
}

/// Binds a graft to a file.
///
/// # Safety
///
/// `client` is a client, `path` and `point` strings, `(wasm, len)` an input buffer and `info` an
/// out pointer (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_graft_load_file(
    client: *mut vino_client,
    path: *const c_char,
    point: *const c_char,
    wasm: *const u8,
    len: usize,
    info: *mut vino_graft_info,
) -> c_int {
    // SAFETY: `client` is a client, `path` and `point` strings, `(wasm, len)` an input buffer and
    // `info` an out pointer, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let (path, point) = (arg_str(path, "path")?, arg_str(point, "point")?);
            let g = c.graft_load_file(path, point, arg_slice(wasm, len, "wasm")?)?;
            put(info, vino_graft_info::from(&g));
            Ok(0)
        })
    }
}

/// # Safety
///
/// `client` is a client and `point` a string (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_graft_unload(client: *mut vino_client, point: *const c_char) -> c_int {
    // SAFETY: `client` is a client and `point` a string, by this function's contract.
    unsafe { with_client_int(client, |c, _| c.graft_unload(arg_str(point, "point")?).map(|_| 0)) }
}

/// # Safety
///
/// `client` is a client, `path` and `point` strings (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_graft_unload_file(
    client: *mut vino_client,
    path: *const c_char,
    point: *const c_char,
) -> c_int {
    // SAFETY: `client` is a client, `path` and `point` strings, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            c.graft_unload_file(arg_str(path, "path")?, arg_str(point, "point")?)
                .map(|_| 0)
        })
    }
}

/// Writes into the graft's memory at `offset`.
///
/// # Safety
///
/// `client` is a client, `point` a string and `(data, len)` an input buffer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_graft_write_memory(
    client: *mut vino_client,
    point: *const c_char,
    offset: u32,
    data: *const u8,
    len: usize,
) -> c_int {
    // SAFETY: `client` is a client, `point` a string and `(data, len)` an input buffer, by this
    // function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let point = arg_str(point, "point")?;
            c.graft_write_memory(point, offset, arg_slice(data, len, "data")?)
                .map(|_| 0)
        })
    }
}

/// The address of a data symbol the graft exports.
///
/// # Safety
///
/// `client` is a client, `point` and `symbol` strings (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_graft_symbol(
    client: *mut vino_client,
    point: *const c_char,
    symbol: *const c_char,
) -> i64 {
    // SAFETY: `client` is a client, `point` and `symbol` strings, by this function's contract.
    unsafe {
        with_client(client, |c, _| {
            let address = c.graft_symbol(arg_str(point, "point")?, arg_str(symbol, "symbol")?)?;
            Ok(address as i64)
        })
    }
}

/// Calls one of the graft's exported control functions; its answer goes to `*result`.
///
/// # Safety
///
/// `client` is a client, `point` and `control` strings, `(args, nargs)` an input buffer and
/// `result` an out pointer (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_graft_call(
    client: *mut vino_client,
    point: *const c_char,
    control: *const c_char,
    args: *const i64,
    nargs: usize,
    result: *mut i64,
) -> c_int {
    // SAFETY: `client` is a client, `point` and `control` strings, `(args, nargs)` an input buffer
    // and `result` an out pointer, by this function's contract.
    unsafe {
        control_call(
            client,
            (point, "point"),
            control,
            (args, nargs),
            result,
            Client::graft_call,
        )
    }
}

/// A control call through `call` on `target` (named `what`): the shape of
/// [`vino_graft_call`] and [`vino_stream_ctl`].
///
/// # Safety
///
/// As those: `client` is a client, `target.0` and `control` strings, `args` an input buffer and
/// `result` an out pointer (see the [pointer contract](crate#pointer-contract)).
unsafe fn control_call(
    client: *mut vino_client,
    (target, what): (*const c_char, &str),
    control: *const c_char,
    (args, nargs): (*const i64, usize),
    result: *mut i64,
    call: impl FnOnce(&mut Client, &str, &str, &[i64]) -> Res<i64>,
) -> c_int {
    // SAFETY: the pointers are as this function's contract says.
    unsafe {
        with_client_int(client, |c, _| {
            let args = arg_slice(args, nargs, "args")?;
            let v = call(c, arg_str(target, what)?, arg_str(control, "control")?, args)?;
            put(result, v);
            Ok(0)
        })
    }
}

// ---- stream codecs ----------------------------------------------------------------------------

/// Binds the codec `(wasm, len)` to the empty file or the directory at `path`; with `len` 0,
/// unbinds it.
///
/// # Safety
///
/// `client` is a client, `path` a string and `(wasm, len)` an input buffer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_stream_bind(
    client: *mut vino_client,
    path: *const c_char,
    wasm: *const u8,
    len: usize,
) -> c_int {
    // SAFETY: `client` is a client, `path` a string and `(wasm, len)` an input buffer, by this
    // function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let path = arg_str(path, "path")?;
            match arg_slice(wasm, len, "wasm")? {
                [] => c.stream_unbind(path)?,
                wasm => c.stream_bind(path, wasm)?,
            }
            Ok(0)
        })
    }
}

/// Gives the codec of the stream file at `path` its 256-bit key (`key`, 32 bytes).
///
/// # Safety
///
/// `client` is a client, `path` a string and `key` an input buffer of 32 bytes (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_stream_key(client: *mut vino_client, path: *const c_char, key: *const u8) -> c_int {
    // SAFETY: `client` is a client, `path` a string and `key` 32 readable bytes, by this
    // function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let key: &[u8; 32] = arg_slice(key, 32, "key")?.try_into().expect("32 bytes");
            c.stream_set_key(arg_str(path, "path")?, key)?;
            Ok(0)
        })
    }
}

/// Calls control function `name` (without `vino_ctl_`) of the codec of the stream file at
/// `path`; its answer goes to `*result`.
///
/// # Safety
///
/// `client` is a client, `path` and `name` strings, `(args, nargs)` an input buffer and `result`
/// an out pointer (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_stream_ctl(
    client: *mut vino_client,
    path: *const c_char,
    name: *const c_char,
    args: *const i64,
    nargs: usize,
    result: *mut i64,
) -> c_int {
    // SAFETY: `client` is a client, `path` and `name` strings, `(args, nargs)` an input buffer
    // and `result` an out pointer, by this function's contract.
    unsafe {
        control_call(
            client,
            (path, "path"),
            name,
            (args, nargs),
            result,
            Client::stream_control,
        )
    }
}

/// The codec bound to the file or directory at `path` (`null` for none), as JSON in `*json`
/// (free it with [`vino_string_free`]).
///
/// # Safety
///
/// `client` is a client, `path` a string and `json` an out pointer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_stream_status_json(
    client: *mut vino_client,
    path: *const c_char,
    json: *mut *mut c_char,
) -> c_int {
    // SAFETY: `client` is a client, `path` a string and `json` an out pointer, by this
    // function's contract.
    unsafe { json_of(client, (path, "path"), json, Client::stream_status) }
}

/// What `call` answers about `arg` (named `what`), as JSON in `*json`: the shape of
/// [`vino_graft_stats_json`] and [`vino_stream_status_json`].
///
/// # Safety
///
/// As those: `client` is a client, `arg.0` a string and `json` an out pointer (see the
/// [pointer contract](crate#pointer-contract)).
unsafe fn json_of<T: serde::Serialize>(
    client: *mut vino_client,
    (arg, what): (*const c_char, &str),
    json: *mut *mut c_char,
    call: impl FnOnce(&mut Client, &str) -> Res<T>,
) -> c_int {
    // SAFETY: the pointers are as this function's contract says.
    unsafe {
        with_client_int(client, |c, _| {
            check_out(json, "json")?;
            put_json(json, &call(c, arg_str(arg, what)?)?)
        })
    }
}

/// Stores `value` as JSON in `*json`; returns its length.
///
/// # Safety
///
/// `json` is an out pointer (see the [pointer contract](crate#pointer-contract)).
unsafe fn put_json(json: *mut *mut c_char, value: &impl serde::Serialize) -> Res<i64> {
    let text = serde_json::to_string(value).map_err(|e| fail(errno::EIO, format!("encoding JSON: {e}")))?;
    let n = text.len();
    // SAFETY: `json` is an out pointer, by this function's contract.
    unsafe { put(json, c_message(&text).into_raw()) };
    Ok(to_i64(n))
}

/// The graftpoints this process may graft, as JSON in `*json` (free it with [`vino_string_free`]).
///
/// # Safety
///
/// `client` is a client and `json` an out pointer (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_graft_list_json(client: *mut vino_client, json: *mut *mut c_char) -> c_int {
    // SAFETY: `client` is a client and `json` an out pointer, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            check_out(json, "json")?;
            put_json(json, &c.graft_list()?)
        })
    }
}

/// One graftpoint's statistics, as JSON in `*json` (free it with [`vino_string_free`]).
///
/// # Safety
///
/// `client` is a client, `point` a string and `json` an out pointer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_graft_stats_json(
    client: *mut vino_client,
    point: *const c_char,
    json: *mut *mut c_char,
) -> c_int {
    // SAFETY: `client` is a client, `point` a string and `json` an out pointer, by this
    // function's contract.
    unsafe { json_of(client, (point, "point"), json, Client::graft_stats) }
}

// ---- locks and events -------------------------------------------------------------------------

/// Takes or drops a byte-range lock.
///
/// # Safety
///
/// `client` is a client (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_lock(
    client: *mut vino_client,
    fd: c_int,
    kind: c_int,
    start: u64,
    len: u64,
    wait: c_int,
) -> c_int {
    // SAFETY: `client` is a client, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            c.lock(arg_fd(fd)?, lock_kind(kind)?, start, len, wait != 0).map(|_| 0)
        })
    }
}

/// The first lock that would block this one: returns 1 and fills `*holder`, or 0.
///
/// # Safety
///
/// `client` is a client and `holder` an out pointer (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_getlk(
    client: *mut vino_client,
    fd: c_int,
    kind: c_int,
    start: u64,
    len: u64,
    holder: *mut vino_lock,
) -> c_int {
    // SAFETY: `client` is a client and `holder` an out pointer, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            match c.getlk(arg_fd(fd)?, lock_kind(kind)?, start, len)? {
                Some(l) => {
                    put(holder, vino_lock::from(&l));
                    Ok(1)
                }
                None => Ok(0),
            }
        })
    }
}

/// Limits events of `kind` to these inodes and names.
///
/// # Safety
///
/// `client` is a client, `(inodes, ninodes)` and `(names, nnames)` input buffers, and each of the
/// `nnames` names a string (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_event_filter(
    client: *mut vino_client,
    kind: c_int,
    inodes: *const u64,
    ninodes: usize,
    names: *const *const c_char,
    nnames: usize,
) -> c_int {
    // SAFETY: `client` is a client, `(inodes, ninodes)` and `(names, nnames)` input buffers and
    // every name a string, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let kind = types::event_kind(kind)?;
            let inodes = arg_slice(inodes, ninodes, "inodes")?;
            let names = arg_slice(names, nnames, "names")?
                .iter()
                .map(|&p| arg_str(p, "a name").map(str::to_string))
                .collect::<Res<Vec<_>>>()?;
            c.event_filter(kind, inodes, &names).map(|_| 0)
        })
    }
}

/// # Safety
///
/// `client` is a client (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_event_subscribe(client: *mut vino_client, kind: c_int) -> c_int {
    // SAFETY: `client` is a client, by this function's contract.
    unsafe { with_client_int(client, |c, _| c.event_subscribe(types::event_kind(kind)?).map(|_| 0)) }
}

/// Waits up to `timeout_ms` for events and stores up to `max` of them; returns how many.
///
/// # Safety
///
/// `client` is a client and `(events, max)` an output buffer (see the
/// [pointer contract](crate#pointer-contract)); its contents need not be initialised.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_event_wait(
    client: *mut vino_client,
    timeout_ms: u32,
    events: *mut vino_event,
    max: usize,
) -> c_int {
    let wait = |c: &mut Client, pending: &mut VecDeque<Event>| {
        if max > 0 && events.is_null() {
            return Err(inval("events is NULL"));
        }
        if pending.is_empty() {
            pending.extend(c.event_wait(timeout_ms)?);
        }
        let n = max.min(pending.len()).min(c_int::MAX as usize);
        for (i, e) in pending.drain(..n).enumerate() {
            // SAFETY: `i < n <= max`, and with `max > 0` the non-NULL `events` (checked) is an
            // output buffer of `max` aligned, writable `vino_event`s, by this function's contract;
            // `write` neither reads nor drops what was there.
            unsafe { events.add(i).write(vino_event::from(&e)) };
        }
        Ok(to_i64(n))
    };
    // SAFETY: `client` is a client, by this function's contract.
    unsafe { with_client_int(client, wait) }
}

// ---- accounts ---------------------------------------------------------------------------------

/// Every process and bound graft with their counters, as JSON in `*json` (free it with
/// [`vino_string_free`]).
///
/// # Safety
///
/// `client` is a client and `json` an out pointer (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_top_json(client: *mut vino_client, json: *mut *mut c_char) -> c_int {
    // SAFETY: `client` is a client and `json` an out pointer, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            check_out(json, "json")?;
            put_json(json, &c.top()?)
        })
    }
}

/// Frees a string from a `vino_*_json` call. NULL is ignored.
///
/// # Safety
///
/// `s` is NULL or a string stored by a `vino_*_json` call, not freed before and not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: a non-null `s` came from `CString::into_raw` in `put_json` and is freed here
        // once, by this function's contract.
        let _ = catch_unwind(|| drop(unsafe { CString::from_raw(s) }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_pointers_are_refused_not_followed() {
        let e = -(errno::EINVAL as i64);
        // SAFETY: NULL is a client, and a NULL buffer is what the call must refuse; NULL is also
        // what the free functions accept and ignore.
        unsafe {
            assert_eq!(vino_null(std::ptr::null_mut()) as i64, e);
            assert_eq!(vino_read(std::ptr::null_mut(), 0, std::ptr::null_mut(), 8), e);
            assert_eq!(vino_pid(std::ptr::null()), 0);
            assert_eq!(vino_privileged(std::ptr::null()), 0);
            vino_disconnect(std::ptr::null_mut());
            vino_string_free(std::ptr::null_mut());
            vino_readdir_free(std::ptr::null_mut(), 0);
        }
    }

    #[test]
    fn pointer_arguments_are_checked_before_they_are_followed() {
        // SAFETY: the helpers check NULL before they follow a pointer, and do not follow one
        // with a zero length.
        unsafe {
            assert!(arg_slice::<i64>(std::ptr::null(), 3, "args").is_err());
            assert!(arg_slice::<u8>(std::ptr::null(), 0, "buf").expect("empty").is_empty());
            assert!(arg_bytes_mut(std::ptr::null_mut(), 3, "buf").is_err());
            assert!(arg_str(std::ptr::null(), "path").is_err());
            put::<u64>(std::ptr::null_mut(), 7);
        }
    }

    #[test]
    fn a_failed_connect_leaves_its_message_for_this_thread() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = CString::new(dir.path().join("nobody.sock").to_str().expect("UTF-8")).expect("no NUL");
        // SAFETY: `path` is a NUL-terminated string that outlives the call.
        assert!(unsafe { vino_connect(path.as_ptr()) }.is_null());
        // SAFETY: NULL is a client; with it, `vino_last_error` returns this thread's connect
        // message, a C string valid until the next connect on this thread.
        let message = unsafe { CStr::from_ptr(vino_last_error(std::ptr::null())) };
        assert!(message.to_str().expect("UTF-8").contains("nobody.sock"), "{message:?}");
    }

    #[test]
    fn open_flags_map_one_to_one_and_unknown_bits_are_refused() {
        let f = open_flags(VINO_O_READ | VINO_O_WRITE | VINO_O_CREAT | VINO_O_TRUNC, 0o600).expect("valid");
        assert!(f.read && f.write && f.create && f.truncate && !f.exclusive && !f.append);
        assert!(!f.nofollow && !f.directory);
        assert_eq!(f.mode, 0o600);
        let f = open_flags(VINO_O_READ | VINO_O_NOFOLLOW | VINO_O_DIRECTORY, 0).expect("valid");
        assert!(f.read && f.nofollow && f.directory && !f.write);
        assert!(open_flags(0x100, 0).is_err());
        assert!(open_flags(VINO_O_READ, 0o1_000_000).is_err());
        assert!(lock_kind(3).is_err());
    }
}
