//! `/dev` for a VINO process: a directory the program is given beside its others (preopened as
//! `/dev`, so wasi-libc resolves `/dev/null` to it by longest prefix, under `--dir` confinement
//! too), holding the character devices every Unix program expects and nothing else. None
//! reaches anything new: `null`, `zero`, `full`, `random` and `urandom` are served here without
//! the file system; `stdin`, `stdout` and `stderr` (and `tty`, when a standard stream is a
//! terminal) name the program's own standard streams; `..` is `/dev` itself. Reads fill only
//! the program's own buffers, so no read makes the kernel hold memory.

use crate::abi::{WasiErrno, filetype};

/// A device file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Null,
    Zero,
    Full,
    Random,
    Urandom,
    /// The terminal the program's standard streams are attached to.
    Tty,
}

/// What a name under `/dev` stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// `/dev` itself.
    Dir,
    Device(Device),
    /// `stdin`, `stdout`, `stderr`: standard stream 0, 1 or 2.
    Stream(u8),
}

/// Every name in `/dev`, in listing order; `tty` only if `tty` says one is attached.
pub fn names(tty: bool) -> impl Iterator<Item = (&'static [u8], Node)> {
    let all: [(&[u8], Node); 9] = [
        (b"null", Node::Device(Device::Null)),
        (b"zero", Node::Device(Device::Zero)),
        (b"full", Node::Device(Device::Full)),
        (b"random", Node::Device(Device::Random)),
        (b"urandom", Node::Device(Device::Urandom)),
        (b"tty", Node::Device(Device::Tty)),
        (b"stdin", Node::Stream(0)),
        (b"stdout", Node::Stream(1)),
        (b"stderr", Node::Stream(2)),
    ];
    all.into_iter()
        .filter(move |(_, n)| tty || *n != Node::Device(Device::Tty))
}

/// Resolves `path` relative to `/dev`: `.`, `..` and empty components stay in it; a name
/// it does not hold is `ENOENT`; anything below a device is `ENOTDIR`.
pub fn lookup(path: &[u8], tty: bool) -> Result<Node, WasiErrno> {
    let mut node = Node::Dir;
    for part in path.split(|&b| b == b'/') {
        if part.is_empty() || part == b"." || part == b".." {
            if node != Node::Dir {
                return Err(WasiErrno::NOTDIR);
            }
            continue;
        }
        if node != Node::Dir {
            return Err(WasiErrno::NOTDIR);
        }
        node = names(tty)
            .find(|(n, _)| *n == part)
            .map(|(_, n)| n)
            .ok_or(WasiErrno::NOENT)?;
    }
    if path.ends_with(b"/") && node != Node::Dir {
        return Err(WasiErrno::NOTDIR);
    }
    Ok(node)
}

/// The name the program sees the directory by.
pub const DIR_NAME: &[u8] = b"/dev";

/// Linux's numbers of each device (major, minor): `st_rdev` there.
pub fn numbers(d: Device) -> (u32, u32) {
    match d {
        Device::Null => (1, 3),
        Device::Zero => (1, 5),
        Device::Full => (1, 7),
        Device::Random => (1, 8),
        Device::Urandom => (1, 9),
        Device::Tty => (5, 0),
    }
}

/// The device number of `/dev`'s own file system (Linux's devtmpfs is usually 0:5), distinct
/// from the VINO file system's (1), so that no inode here is taken for one of its files.
pub const FS_DEV: u64 = 5;

/// A node's inode number. WASI's filestat has no `st_rdev`: a device's inode number is its
/// Linux device number (`makedev(major, minor)`), so each is told apart and stable.
pub fn ino(n: Node) -> u64 {
    match n {
        Node::Dir => 1,
        Node::Device(d) => {
            let (major, minor) = numbers(d);
            u64::from(major) << 8 | u64::from(minor)
        }
        Node::Stream(i) => 0x100 + u64::from(i),
    }
}

/// WASI's file type of a node.
pub fn filetype(n: Node) -> u8 {
    match n {
        Node::Dir => filetype::DIRECTORY,
        _ => filetype::CHARACTER_DEVICE,
    }
}

/// Fills `buf` as a read of `d` does; the bytes read (0: the end, for `null`).
pub fn read(d: Device, buf: &mut [u8]) -> Result<usize, WasiErrno> {
    match d {
        Device::Null => Ok(0),
        Device::Zero | Device::Full => {
            buf.fill(0);
            Ok(buf.len())
        }
        Device::Random | Device::Urandom => crate::calls::random(buf).map(|()| buf.len()),
        Device::Tty => Err(WasiErrno::BADF),
    }
}

/// A write of `len` bytes to `d`: all taken, or `ENOSPC` for `full`.
pub fn write(d: Device, len: u64) -> Result<u64, WasiErrno> {
    match d {
        Device::Full if len > 0 => Err(WasiErrno::NOSPC),
        Device::Tty => Err(WasiErrno::BADF),
        _ => Ok(len),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_and_nothing_leads_out() {
        assert_eq!(lookup(b"null", false), Ok(Node::Device(Device::Null)));
        assert_eq!(lookup(b"./zero", false), Ok(Node::Device(Device::Zero)));
        assert_eq!(lookup(b"..", false), Ok(Node::Dir));
        assert_eq!(lookup(b"../../etc", false), Err(WasiErrno::NOENT));
        assert_eq!(lookup(b"../null", false), Ok(Node::Device(Device::Null)));
        assert_eq!(lookup(b"", false), Ok(Node::Dir));
        assert_eq!(lookup(b"sda", false), Err(WasiErrno::NOENT));
        assert_eq!(lookup(b"tty", false), Err(WasiErrno::NOENT));
        assert_eq!(lookup(b"tty", true), Ok(Node::Device(Device::Tty)));
        assert_eq!(lookup(b"null/x", false), Err(WasiErrno::NOTDIR));
        assert_eq!(lookup(b"null/", false), Err(WasiErrno::NOTDIR));
        assert_eq!(lookup(b"stdin", false), Ok(Node::Stream(0)));
    }

    #[test]
    fn devices_carry_linux_numbers() {
        assert_eq!(ino(Node::Device(Device::Null)), 0x103);
        assert_eq!(ino(Node::Device(Device::Urandom)), 0x109);
        assert_eq!(ino(Node::Device(Device::Tty)), 0x500);
        assert_eq!(write(Device::Full, 1), Err(WasiErrno::NOSPC));
        let mut b = [7u8; 9];
        assert_eq!(read(Device::Zero, &mut b), Ok(9));
        assert_eq!(b, [0; 9]);
        assert_eq!(read(Device::Null, &mut b), Ok(0));
    }
}
