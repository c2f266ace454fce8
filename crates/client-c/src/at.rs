//! The `*at` calls of `vino.h`: paths are NUL-terminated bytes (not necessarily UTF-8) walked
//! from `dirfd` — [`VINO_AT_ROOT`] for the root, or a directory opened with
//! `VINO_O_DIRECTORY` — with the flag values of Linux (`AT_SYMLINK_NOFOLLOW`, ...).

use crate::types::{self, vino_dirent, vino_setattr, vino_stat};
use crate::{Res, arg_bytes_mut, arg_fd, arg_slice, check_out, fail, inval, open_flags, put, to_i64, with_client_int};
use crate::{vino_client, with_client};
use ::vino_client::{DirEntry, XattrHow, errno};
use std::ffi::{CStr, c_char, c_int, c_uint};

/// `dirfd` naming the root directory (the value of Linux's `AT_FDCWD`: VINO processes have no
/// working directory of their own).
pub const VINO_AT_ROOT: c_int = -100;
/// Do not follow a symbolic link in the last component.
pub const VINO_AT_SYMLINK_NOFOLLOW: c_int = 0x100;
/// `vino_link_at`: follow a symbolic link at `from`.
pub const VINO_AT_SYMLINK_FOLLOW: c_int = 0x400;
/// `vino_rename_at`: fail with `-EEXIST` rather than replace.
pub const VINO_RENAME_NOREPLACE: c_uint = 1;
/// `vino_setxattr_at`: fail if it exists / if it does not.
pub const VINO_XATTR_CREATE: c_int = 1;
pub const VINO_XATTR_REPLACE: c_int = 2;
/// `vino_fallocate`: keep the size.
pub const VINO_FALLOC_KEEP_SIZE: c_int = 1;
/// `vino_fallocate`: free the range's blocks, zero its partial edges (with `KEEP_SIZE`).
pub const VINO_FALLOC_PUNCH_HOLE: c_int = 0x02;
/// `vino_fallocate`: the range reads as zeros and stays allocated.
pub const VINO_FALLOC_ZERO_RANGE: c_int = 0x10;

/// A `dirfd` argument: the root, or a descriptor.
fn arg_dirfd(dirfd: c_int) -> Res<Option<u32>> {
    match dirfd {
        VINO_AT_ROOT => Ok(None),
        fd if fd >= 0 => Ok(Some(fd as u32)),
        fd => Err(fail(errno::EBADF, format!("bad directory descriptor {fd}"))),
    }
}

/// Whether to follow a trailing symbolic link: `flags` may hold only `VINO_AT_SYMLINK_NOFOLLOW`.
fn follow_unless_nofollow(flags: c_int) -> Res<bool> {
    if flags & !VINO_AT_SYMLINK_NOFOLLOW != 0 {
        return Err(inval(&format!("unknown flags {flags:#x}")));
    }
    Ok(flags & VINO_AT_SYMLINK_NOFOLLOW == 0)
}

/// A path (or name) argument as bytes, not necessarily UTF-8.
///
/// # Safety
///
/// `p` is a string (see the [pointer contract](crate#pointer-contract)) that stays valid and
/// unchanged for `'a`.
unsafe fn arg_path<'a>(p: *const c_char, what: &str) -> Res<&'a [u8]> {
    if p.is_null() {
        return Err(inval(&format!("{what} is NULL")));
    }
    // SAFETY: `p` is not NULL (checked), so by this function's contract it points to a
    // NUL-terminated string that stays valid and unchanged for `'a`.
    Ok(unsafe { CStr::from_ptr(p) }.to_bytes())
}

fn mode16(mode: c_uint) -> Res<u16> {
    u16::try_from(mode).map_err(|_| inval(&format!("mode {mode:#o} is too large")))
}

/// Copies `bytes` into the output buffer `(buf, len)`: with `len` 0 only the size is asked
/// for; a buffer too small is `ERANGE` (as getxattr(2)). Returns the size.
///
/// # Safety
///
/// `(buf, len)` is an output buffer (see the [pointer contract](crate#pointer-contract)).
unsafe fn put_sized(bytes: &[u8], buf: *mut u8, len: usize) -> Res<i64> {
    if len == 0 {
        return Ok(to_i64(bytes.len()));
    }
    if len < bytes.len() {
        return Err(fail(
            errno::ERANGE,
            format!("{} bytes do not fit in a buffer of {len}", bytes.len()),
        ));
    }
    // SAFETY: `(buf, len)` is an output buffer, by this function's contract.
    let out = unsafe { arg_bytes_mut(buf, len, "buf") }?;
    out[..bytes.len()].copy_from_slice(bytes);
    Ok(to_i64(bytes.len()))
}

/// Stores a readdir answer in `*entries`; the count.
///
/// # Safety
///
/// `entries` is an out pointer (see the [pointer contract](crate#pointer-contract)).
unsafe fn put_entries(entries: *mut *mut vino_dirent, list: &[DirEntry]) -> Res<i64> {
    let n = list.len();
    // The count is how the array is freed: it must come back whole, not clamped to an int.
    if c_int::try_from(n).is_err() {
        return Err(fail(errno::E2BIG, format!("{n} entries do not fit in an int")));
    }
    // SAFETY: `entries` is an out pointer, by this function's contract.
    unsafe { put(entries, types::dirents_into_raw(list)) };
    Ok(to_i64(n))
}

/// Opens `path` from `dirfd` with `VINO_O_*` flags; returns a file descriptor.
///
/// # Safety
///
/// `client` is a client and `path` a string (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_open_at(
    client: *mut vino_client,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: `client` is a client and `path` a string, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let fd = c.open_at(arg_dirfd(dirfd)?, arg_path(path, "path")?, open_flags(flags, mode)?)?;
            Ok(fd as i64)
        })
    }
}

/// What `path` names (`VINO_AT_SYMLINK_NOFOLLOW`: the link itself).
///
/// # Safety
///
/// `client` is a client, `path` a string and `st` an out pointer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_stat_at(
    client: *mut vino_client,
    dirfd: c_int,
    path: *const c_char,
    st: *mut vino_stat,
    flags: c_int,
) -> c_int {
    // SAFETY: `client` is a client, `path` a string and `st` an out pointer, by this function's
    // contract.
    unsafe {
        with_client_int(client, |c, _| {
            check_out(st, "st")?;
            let got = c.stat_at(
                arg_dirfd(dirfd)?,
                arg_path(path, "path")?,
                follow_unless_nofollow(flags)?,
            )?;
            put(st, vino_stat::from(&got));
            Ok(0)
        })
    }
}

/// # Safety
///
/// `client` is a client and `path` a string (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_mkdir_at(
    client: *mut vino_client,
    dirfd: c_int,
    path: *const c_char,
    mode: c_uint,
) -> c_int {
    // SAFETY: `client` is a client and `path` a string, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            c.mkdir_at(arg_dirfd(dirfd)?, arg_path(path, "path")?, mode16(mode)?)
                .map(|_| 0)
        })
    }
}

/// Makes a `VINO_KIND_*` node: a regular file, FIFO, socket, or (privileged) device `rdev`.
///
/// # Safety
///
/// `client` is a client and `path` a string (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_mknod_at(
    client: *mut vino_client,
    dirfd: c_int,
    path: *const c_char,
    kind: c_int,
    mode: c_uint,
    rdev: u64,
) -> c_int {
    // SAFETY: `client` is a client and `path` a string, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let kind = types::kind_of(kind)?;
            c.mknod_at(arg_dirfd(dirfd)?, arg_path(path, "path")?, kind, mode16(mode)?, rdev)
                .map(|_| 0)
        })
    }
}

/// Makes a symbolic link at `path` holding `target`.
///
/// # Safety
///
/// `client` is a client, `target` and `path` strings (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_symlink_at(
    client: *mut vino_client,
    target: *const c_char,
    dirfd: c_int,
    path: *const c_char,
) -> c_int {
    // SAFETY: `client` is a client, `target` and `path` strings, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            c.symlink_at(arg_path(target, "target")?, arg_dirfd(dirfd)?, arg_path(path, "path")?)
                .map(|_| 0)
        })
    }
}

/// The target of the symbolic link at `path`: its length; at most `len` bytes of it are copied
/// to `buf`, without a NUL (a result over `len` means it was cut).
///
/// # Safety
///
/// `client` is a client, `path` a string and `(buf, len)` an output buffer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_readlink_at(
    client: *mut vino_client,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    len: usize,
) -> i64 {
    // SAFETY: `client` is a client, `path` a string and `(buf, len)` an output buffer, by this
    // function's contract.
    unsafe {
        with_client(client, |c, _| {
            let out = arg_bytes_mut(buf.cast(), len, "buf")?;
            let target = c.readlink_at(arg_dirfd(dirfd)?, arg_path(path, "path")?)?;
            let n = target.len().min(out.len());
            out[..n].copy_from_slice(&target[..n]);
            Ok(to_i64(target.len()))
        })
    }
}

/// # Safety
///
/// `client` is a client and `path` a string (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_unlink_at(client: *mut vino_client, dirfd: c_int, path: *const c_char) -> c_int {
    // SAFETY: `client` is a client and `path` a string, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            c.unlink_at(arg_dirfd(dirfd)?, arg_path(path, "path")?).map(|_| 0)
        })
    }
}

/// # Safety
///
/// `client` is a client and `path` a string (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_rmdir_at(client: *mut vino_client, dirfd: c_int, path: *const c_char) -> c_int {
    // SAFETY: `client` is a client and `path` a string, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            c.rmdir_at(arg_dirfd(dirfd)?, arg_path(path, "path")?).map(|_| 0)
        })
    }
}

/// Renames atomically (`VINO_RENAME_NOREPLACE`: never replace).
///
/// # Safety
///
/// `client` is a client, `from` and `to` strings (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_rename_at(
    client: *mut vino_client,
    from_dirfd: c_int,
    from: *const c_char,
    to_dirfd: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    // SAFETY: `client` is a client, `from` and `to` strings, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            if flags & !VINO_RENAME_NOREPLACE != 0 {
                return Err(inval(&format!("unknown rename flags {flags:#x}")));
            }
            let no_replace = flags & VINO_RENAME_NOREPLACE != 0;
            let (from, to) = (arg_path(from, "from")?, arg_path(to, "to")?);
            c.rename_at(arg_dirfd(from_dirfd)?, from, arg_dirfd(to_dirfd)?, to, no_replace)
                .map(|_| 0)
        })
    }
}

/// A second name `to` for the file at `from` (`VINO_AT_SYMLINK_FOLLOW`: follow a link there).
///
/// # Safety
///
/// `client` is a client, `from` and `to` strings (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_link_at(
    client: *mut vino_client,
    from_dirfd: c_int,
    from: *const c_char,
    to_dirfd: c_int,
    to: *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: `client` is a client, `from` and `to` strings, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            if flags & !VINO_AT_SYMLINK_FOLLOW != 0 {
                return Err(inval(&format!("unknown link flags {flags:#x}")));
            }
            let follow = flags & VINO_AT_SYMLINK_FOLLOW != 0;
            let (from, to) = (arg_path(from, "from")?, arg_path(to, "to")?);
            c.link_at(arg_dirfd(from_dirfd)?, from, arg_dirfd(to_dirfd)?, to, follow)
                .map(|_| 0)
        })
    }
}

/// Changes what `attrs->valid` says (mode, owner, size, times); the attributes after go to
/// `*st` if it is not NULL.
///
/// # Safety
///
/// `client` is a client, `path` a string, `attrs` NULL or pointing to a readable
/// `struct vino_setattr`, and `st` an out pointer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_setattr_at(
    client: *mut vino_client,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    attrs: *const vino_setattr,
    st: *mut vino_stat,
) -> c_int {
    // SAFETY: `client` is a client, `path` a string, `attrs` readable if not NULL and `st` an
    // out pointer, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let attrs = attrs.as_ref().ok_or_else(|| inval("attrs is NULL"))?.attrs()?;
            let follow = follow_unless_nofollow(flags)?;
            let got = c.setattr_at(arg_dirfd(dirfd)?, arg_path(path, "path")?, follow, attrs)?;
            put(st, vino_stat::from(&got));
            Ok(0)
        })
    }
}

/// [`vino_setattr_at`] on an open file.
///
/// # Safety
///
/// As for [`vino_setattr_at`], without the path.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_fsetattr(
    client: *mut vino_client,
    fd: c_int,
    attrs: *const vino_setattr,
    st: *mut vino_stat,
) -> c_int {
    // SAFETY: `client` is a client, `attrs` readable if not NULL and `st` an out pointer, by
    // this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let attrs = attrs.as_ref().ok_or_else(|| inval("attrs is NULL"))?.attrs()?;
            let got = c.fsetattr(arg_fd(fd)?, attrs)?;
            put(st, vino_stat::from(&got));
            Ok(0)
        })
    }
}

/// Checks `mode` (4 read, 2 write, 1 execute; 0: exists): 0, or `-EACCES`.
///
/// # Safety
///
/// `client` is a client and `path` a string (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_access_at(
    client: *mut vino_client,
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: `client` is a client and `path` a string, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let mode = u32::try_from(mode).map_err(|_| inval(&format!("access mode {mode}")))?;
            let follow = follow_unless_nofollow(flags)?;
            c.access_at(arg_dirfd(dirfd)?, arg_path(path, "path")?, mode, follow)
                .map(|_| 0)
        })
    }
}

/// Lists the directory at `path` (as `vino_readdir`; free with `vino_readdir_free`).
///
/// # Safety
///
/// `client` is a client, `path` a string and `entries` an out pointer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_readdir_at(
    client: *mut vino_client,
    dirfd: c_int,
    path: *const c_char,
    entries: *mut *mut vino_dirent,
) -> c_int {
    // SAFETY: `client` is a client, `path` a string and `entries` an out pointer, by this
    // function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            check_out(entries, "entries")?;
            let list = c.readdir_at(arg_dirfd(dirfd)?, arg_path(path, "path")?)?;
            put_entries(entries, &list)
        })
    }
}

/// Lists the directory open as `fd`.
///
/// # Safety
///
/// `client` is a client and `entries` an out pointer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_readdir_fd(client: *mut vino_client, fd: c_int, entries: *mut *mut vino_dirent) -> c_int {
    // SAFETY: `client` is a client and `entries` an out pointer, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            check_out(entries, "entries")?;
            let list = c.readdir_fd(arg_fd(fd)?)?;
            put_entries(entries, &list)
        })
    }
}

/// The value of extended attribute `name`: its size; copied to `buf` if `len` > 0
/// (`-ERANGE` if it does not fit).
///
/// # Safety
///
/// `client` is a client, `path` and `name` strings, `(buf, len)` an output buffer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_getxattr_at(
    client: *mut vino_client,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    name: *const c_char,
    buf: *mut u8,
    len: usize,
) -> i64 {
    // SAFETY: `client` is a client, `path` and `name` strings and `(buf, len)` an output buffer,
    // by this function's contract.
    unsafe {
        with_client(client, |c, _| {
            let follow = follow_unless_nofollow(flags)?;
            let value = c.getxattr(
                arg_dirfd(dirfd)?,
                arg_path(path, "path")?,
                follow,
                arg_path(name, "name")?,
            )?;
            put_sized(&value, buf, len)
        })
    }
}

/// Sets extended attribute `name` (`how`: 0, `VINO_XATTR_CREATE` or `VINO_XATTR_REPLACE`).
///
/// # Safety
///
/// `client` is a client, `path` and `name` strings, `(value, len)` an input buffer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_setxattr_at(
    client: *mut vino_client,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    name: *const c_char,
    value: *const u8,
    len: usize,
    how: c_int,
) -> c_int {
    // SAFETY: `client` is a client, `path` and `name` strings and `(value, len)` an input
    // buffer, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let how = match how {
                0 => XattrHow::Any,
                VINO_XATTR_CREATE => XattrHow::Create,
                VINO_XATTR_REPLACE => XattrHow::Replace,
                _ => return Err(inval(&format!("unknown setxattr flags {how:#x}"))),
            };
            let follow = follow_unless_nofollow(flags)?;
            let value = arg_slice(value, len, "value")?;
            let (path, name) = (arg_path(path, "path")?, arg_path(name, "name")?);
            c.setxattr(arg_dirfd(dirfd)?, path, follow, name, value, how).map(|_| 0)
        })
    }
}

/// The names of the file's extended attributes, each NUL-terminated, one after the other (as
/// listxattr(2)): their total size; copied to `buf` if `len` > 0 (`-ERANGE` if they do not fit).
///
/// # Safety
///
/// `client` is a client, `path` a string and `(buf, len)` an output buffer (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_listxattr_at(
    client: *mut vino_client,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    buf: *mut c_char,
    len: usize,
) -> i64 {
    // SAFETY: `client` is a client, `path` a string and `(buf, len)` an output buffer, by this
    // function's contract.
    unsafe {
        with_client(client, |c, _| {
            let follow = follow_unless_nofollow(flags)?;
            let names = c.listxattr(arg_dirfd(dirfd)?, arg_path(path, "path")?, follow)?;
            let mut all = Vec::new();
            for n in names {
                all.extend_from_slice(&n);
                all.push(0);
            }
            put_sized(&all, buf.cast(), len)
        })
    }
}

/// # Safety
///
/// `client` is a client, `path` and `name` strings (see the
/// [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_removexattr_at(
    client: *mut vino_client,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    name: *const c_char,
) -> c_int {
    // SAFETY: `client` is a client, `path` and `name` strings, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            let follow = follow_unless_nofollow(flags)?;
            let (path, name) = (arg_path(path, "path")?, arg_path(name, "name")?);
            c.removexattr(arg_dirfd(dirfd)?, path, follow, name).map(|_| 0)
        })
    }
}

/// fallocate(2) on `len` bytes from `offset` in the file open (for writing) as `fd`: `mode` 0
/// allocates them, `VINO_FALLOC_KEEP_SIZE` too without growing the size;
/// `VINO_FALLOC_PUNCH_HOLE | VINO_FALLOC_KEEP_SIZE` punches a hole; `VINO_FALLOC_ZERO_RANGE`
/// (with `KEEP_SIZE` or not) zeroes the range. Any other mode is `-EOPNOTSUPP` (or `-EINVAL`),
/// as Linux's are.
///
/// # Safety
///
/// `client` is a client (see the [pointer contract](crate#pointer-contract)).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vino_fallocate(
    client: *mut vino_client,
    fd: c_int,
    mode: c_int,
    offset: u64,
    len: u64,
) -> c_int {
    // SAFETY: `client` is a client, by this function's contract.
    unsafe {
        with_client_int(client, |c, _| {
            if mode < 0 {
                return Err(fail(errno::EOPNOTSUPP, format!("fallocate mode {mode:#x}")));
            }
            c.fallocate_mode(arg_fd(fd)?, mode as u32, offset, len).map(|_| 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirfds_and_flags_are_checked() {
        assert_eq!(arg_dirfd(VINO_AT_ROOT).unwrap(), None);
        assert_eq!(arg_dirfd(3).unwrap(), Some(3));
        assert_eq!(arg_dirfd(-1).unwrap_err().errno, errno::EBADF);
        assert!(follow_unless_nofollow(0).unwrap());
        assert!(!follow_unless_nofollow(VINO_AT_SYMLINK_NOFOLLOW).unwrap());
        assert!(follow_unless_nofollow(0x800).is_err());
    }

    #[test]
    fn sized_answers_give_the_size_and_refuse_a_short_buffer() {
        let mut buf = [0u8; 4];
        // SAFETY: NULL with length 0, then a 2- and a 4-byte buffer that live through the calls.
        unsafe {
            assert_eq!(put_sized(b"abc", std::ptr::null_mut(), 0).unwrap(), 3);
            assert_eq!(put_sized(b"abc", buf.as_mut_ptr(), 2).unwrap_err().errno, errno::ERANGE);
            assert_eq!(put_sized(b"abc", buf.as_mut_ptr(), 4).unwrap(), 3);
        }
        assert_eq!(&buf[..3], b"abc");
    }
}
