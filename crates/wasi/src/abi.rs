//! WASI preview 1's numbers and layouts (`wasi_snapshot_preview1`, as wasi-libc compiles
//! against them), and the kernel's errnos in WASI's numbering.

use vino_kernel::Errno;
use vino_kernel::FileType;

/// The import module every WASI preview 1 program links against.
pub const MODULE: &str = "wasi_snapshot_preview1";

/// A WASI errno (`__wasi_errno_t`). Not Linux's numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WasiErrno(pub u16);

impl WasiErrno {
    pub const SUCCESS: WasiErrno = WasiErrno(0);
    pub const TOOBIG: WasiErrno = WasiErrno(1);
    pub const ACCES: WasiErrno = WasiErrno(2);
    pub const ADDRINUSE: WasiErrno = WasiErrno(3);
    pub const ADDRNOTAVAIL: WasiErrno = WasiErrno(4);
    pub const AFNOSUPPORT: WasiErrno = WasiErrno(5);
    pub const ALREADY: WasiErrno = WasiErrno(13);
    pub const DESTADDRREQ: WasiErrno = WasiErrno(17);
    pub const INPROGRESS: WasiErrno = WasiErrno(26);
    pub const ISCONN: WasiErrno = WasiErrno(30);
    pub const NOTSOCK: WasiErrno = WasiErrno(57);
    pub const PROTO: WasiErrno = WasiErrno(65);
    pub const PROTONOSUPPORT: WasiErrno = WasiErrno(66);
    pub const CONNREFUSED: WasiErrno = WasiErrno(14);
    pub const CONNRESET: WasiErrno = WasiErrno(15);
    pub const MSGSIZE: WasiErrno = WasiErrno(35);
    pub const NETUNREACH: WasiErrno = WasiErrno(40);
    pub const NOTCONN: WasiErrno = WasiErrno(53);
    pub const TIMEDOUT: WasiErrno = WasiErrno(73);
    pub const AGAIN: WasiErrno = WasiErrno(6);
    pub const BADF: WasiErrno = WasiErrno(8);
    pub const BUSY: WasiErrno = WasiErrno(10);
    pub const CHILD: WasiErrno = WasiErrno(12);
    pub const DEADLK: WasiErrno = WasiErrno(16);
    pub const DQUOT: WasiErrno = WasiErrno(19);
    pub const EXIST: WasiErrno = WasiErrno(20);
    pub const FAULT: WasiErrno = WasiErrno(21);
    pub const FBIG: WasiErrno = WasiErrno(22);
    pub const INTR: WasiErrno = WasiErrno(27);
    pub const INVAL: WasiErrno = WasiErrno(28);
    pub const IO: WasiErrno = WasiErrno(29);
    pub const ISDIR: WasiErrno = WasiErrno(31);
    pub const LOOP: WasiErrno = WasiErrno(32);
    pub const MFILE: WasiErrno = WasiErrno(33);
    pub const NAMETOOLONG: WasiErrno = WasiErrno(37);
    pub const NFILE: WasiErrno = WasiErrno(41);
    pub const NOBUFS: WasiErrno = WasiErrno(42);
    pub const NODEV: WasiErrno = WasiErrno(43);
    pub const NOENT: WasiErrno = WasiErrno(44);
    pub const NOEXEC: WasiErrno = WasiErrno(45);
    pub const NOLCK: WasiErrno = WasiErrno(46);
    pub const NOMEM: WasiErrno = WasiErrno(48);
    pub const NOPROTOOPT: WasiErrno = WasiErrno(50);
    pub const NOSPC: WasiErrno = WasiErrno(51);
    pub const NOSYS: WasiErrno = WasiErrno(52);
    pub const NOTDIR: WasiErrno = WasiErrno(54);
    pub const NOTEMPTY: WasiErrno = WasiErrno(55);
    pub const NOTSUP: WasiErrno = WasiErrno(58);
    pub const NXIO: WasiErrno = WasiErrno(60);
    pub const PERM: WasiErrno = WasiErrno(63);
    pub const PIPE: WasiErrno = WasiErrno(64);
    pub const RANGE: WasiErrno = WasiErrno(68);
    pub const SPIPE: WasiErrno = WasiErrno(70);
    pub const SRCH: WasiErrno = WasiErrno(71);
    pub const STALE: WasiErrno = WasiErrno(72);
    pub const XDEV: WasiErrno = WasiErrno(75);
}

impl From<Errno> for WasiErrno {
    fn from(e: Errno) -> WasiErrno {
        match e {
            Errno::Perm => WasiErrno::PERM,
            Errno::NoEnt => WasiErrno::NOENT,
            Errno::Srch => WasiErrno::SRCH,
            Errno::Intr => WasiErrno::INTR,
            Errno::Io | Errno::UClean => WasiErrno::IO,
            Errno::NxIo => WasiErrno::NXIO,
            Errno::TooBig => WasiErrno::TOOBIG,
            Errno::NoExec => WasiErrno::NOEXEC,
            Errno::BadF => WasiErrno::BADF,
            Errno::Child => WasiErrno::CHILD,
            Errno::Again => WasiErrno::AGAIN,
            Errno::Acces => WasiErrno::ACCES,
            Errno::Busy => WasiErrno::BUSY,
            Errno::Exist => WasiErrno::EXIST,
            Errno::XDev => WasiErrno::XDEV,
            Errno::NotDir => WasiErrno::NOTDIR,
            Errno::IsDir => WasiErrno::ISDIR,
            Errno::Inval => WasiErrno::INVAL,
            Errno::MFile => WasiErrno::MFILE,
            Errno::NFile => WasiErrno::NFILE,
            Errno::NoMem => WasiErrno::NOMEM,
            Errno::Pipe => WasiErrno::PIPE,
            Errno::FBig => WasiErrno::FBIG,
            Errno::NoSpc => WasiErrno::NOSPC,
            Errno::Range => WasiErrno::RANGE,
            Errno::Deadlk => WasiErrno::DEADLK,
            Errno::NameTooLong => WasiErrno::NAMETOOLONG,
            Errno::NoLck => WasiErrno::NOLCK,
            Errno::NotEmpty => WasiErrno::NOTEMPTY,
            Errno::Loop => WasiErrno::LOOP,
            // WASI has no ENODATA (a missing extended attribute) or EUSERS.
            Errno::NoData => WasiErrno::NOENT,
            Errno::Proto => WasiErrno::PROTO,
            Errno::Users => WasiErrno::NFILE,
            Errno::NotSup => WasiErrno::NOTSUP,
            Errno::NoBufs => WasiErrno::NOBUFS,
            Errno::MsgSize => WasiErrno::MSGSIZE,
            Errno::AddrInUse => WasiErrno::ADDRINUSE,
            Errno::AddrNotAvail => WasiErrno::ADDRNOTAVAIL,
            Errno::NetUnreach => WasiErrno::NETUNREACH,
            Errno::ConnReset => WasiErrno::CONNRESET,
            Errno::IsConn => WasiErrno::ISCONN,
            Errno::NotConn => WasiErrno::NOTCONN,
            Errno::TimedOut => WasiErrno::TIMEDOUT,
            Errno::ConnRefused => WasiErrno::CONNREFUSED,
            Errno::Stale => WasiErrno::STALE,
            Errno::DQuot => WasiErrno::DQUOT,
        }
    }
}

impl From<vino_kernel::SysError> for WasiErrno {
    fn from(e: vino_kernel::SysError) -> WasiErrno {
        e.errno.into()
    }
}

/// `__wasi_filetype_t`.
pub mod filetype {
    pub const UNKNOWN: u8 = 0;
    pub const BLOCK_DEVICE: u8 = 1;
    pub const CHARACTER_DEVICE: u8 = 2;
    pub const DIRECTORY: u8 = 3;
    pub const REGULAR_FILE: u8 = 4;
    pub const SOCKET_DGRAM: u8 = 5;
    pub const SOCKET_STREAM: u8 = 6;
    pub const SYMBOLIC_LINK: u8 = 7;
}

/// WASI's file type of a kernel file type (a FIFO has none: unknown).
pub fn filetype_of(kind: FileType) -> u8 {
    match kind {
        FileType::Regular => filetype::REGULAR_FILE,
        FileType::Directory => filetype::DIRECTORY,
        FileType::Symlink => filetype::SYMBOLIC_LINK,
        FileType::CharDevice => filetype::CHARACTER_DEVICE,
        FileType::BlockDevice => filetype::BLOCK_DEVICE,
        FileType::Socket => filetype::SOCKET_STREAM,
        FileType::Fifo => filetype::UNKNOWN,
    }
}

/// `__wasi_oflags_t`.
pub mod oflags {
    pub const CREAT: u16 = 1;
    pub const DIRECTORY: u16 = 2;
    pub const EXCL: u16 = 4;
    pub const TRUNC: u16 = 8;
}

/// `__wasi_fdflags_t`.
pub mod fdflags {
    pub const APPEND: u16 = 1;
    pub const NONBLOCK: u16 = 4;
}

/// `__wasi_lookupflags_t`.
pub const LOOKUP_SYMLINK_FOLLOW: u32 = 1;

/// `__wasi_fstflags_t`.
pub mod fstflags {
    pub const ATIM: u16 = 1;
    pub const ATIM_NOW: u16 = 2;
    pub const MTIM: u16 = 4;
    pub const MTIM_NOW: u16 = 8;
}

/// `__wasi_rights_t` bits the kernel looks at (it checks permissions itself, by credentials).
pub mod rights {
    pub const FD_READ: u64 = 1 << 1;
    pub const FD_SEEK: u64 = 1 << 2;
    pub const FD_TELL: u64 = 1 << 5;
    pub const FD_WRITE: u64 = 1 << 6;
    pub const FD_ALLOCATE: u64 = 1 << 8;
    pub const FD_READDIR: u64 = 1 << 14;
    pub const FD_FILESTAT_SET_SIZE: u64 = 1 << 22;
    pub const POLL_FD_READWRITE: u64 = 1 << 27;
    /// Every right of preview 1 (bits 0-29).
    pub const ALL: u64 = (1 << 30) - 1;
}

/// `__wasi_whence_t`.
pub mod whence {
    pub const SET: u8 = 0;
    pub const CUR: u8 = 1;
    pub const END: u8 = 2;
}

/// `__wasi_clockid_t`.
pub mod clock {
    pub const REALTIME: u32 = 0;
    pub const MONOTONIC: u32 = 1;
    pub const PROCESS_CPUTIME: u32 = 2;
    pub const THREAD_CPUTIME: u32 = 3;
}

/// `__wasi_eventtype_t` and the subscription flag of an absolute clock time.
pub mod event {
    pub const CLOCK: u8 = 0;
    pub const FD_READ: u8 = 1;
    pub const FD_WRITE: u8 = 2;
    pub const SUBSCRIPTION_CLOCK_ABSTIME: u16 = 1;
}

/// Sizes of the structures the calls read and write.
pub const IOVEC_SIZE: u32 = 8;
pub const FDSTAT_SIZE: u32 = 24;
pub const FILESTAT_SIZE: u32 = 64;
pub const DIRENT_SIZE: u32 = 24;
pub const SUBSCRIPTION_SIZE: u32 = 48;
pub const EVENT_SIZE: u32 = 32;
