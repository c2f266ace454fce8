//! userfaultfd, the one Linux mechanism that lets a user-space pager serve another thread's page
//! faults: raw ioctls, as the `userfaultfd` crate lacks `UFFDIO_MOVE` (Linux 6.8), which the pager
//! uses to take a page out of a program's memory atomically.
//!
//! Opened as root through the syscall, not in user-mode-only mode: a fault taken inside Linux (a
//! `read(2)` into program memory, an io_uring transfer) must come to the pager too, not fail
//! with `EFAULT`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const UFFD_API: u64 = 0xAA;
const FEATURE_THREAD_ID: u64 = 1 << 8;
const FEATURE_MOVE: u64 = 1 << 16;
const REGISTER_MODE_MISSING: u64 = 1;
const EVENT_PAGEFAULT: u8 = 0x12;

/// `_IOWR(0xAA, nr, size)` and `_IOR(0xAA, nr, size)`.
const fn iowr(nr: u64, size: u64) -> u64 {
    (3 << 30) | (size << 16) | (0xAA << 8) | nr
}
const fn ior(nr: u64, size: u64) -> u64 {
    (2 << 30) | (size << 16) | (0xAA << 8) | nr
}
const IOC_API: u64 = iowr(0x3F, 24);
const IOC_REGISTER: u64 = iowr(0x00, 32);
const IOC_UNREGISTER: u64 = ior(0x01, 16);
const IOC_WAKE: u64 = ior(0x02, 16);
const IOC_COPY: u64 = iowr(0x03, 40);
const IOC_MOVE: u64 = iowr(0x05, 40);

#[repr(C)]
struct Api {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Range {
    start: u64,
    len: u64,
}

#[repr(C)]
struct Register {
    range: Range,
    mode: u64,
    ioctls: u64,
}

/// `uffdio_copy` and `uffdio_move` share a layout: destination, source, length, mode, result.
#[repr(C)]
struct Transfer {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    result: i64,
}

/// `struct uffd_msg` for a page fault: the event, then flags, address and thread id.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Msg {
    event: u8,
    _reserved: [u8; 7],
    flags: u64,
    address: u64,
    thread: u32,
    _pad: u32,
}

/// One page fault reported: the address touched and the thread that touched it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub address: usize,
    pub thread: u32,
}

/// An open userfaultfd with `UFFDIO_MOVE` and thread ids.
pub struct Uffd {
    fd: OwnedFd,
}

/// What transferring a page came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Placed {
    Done,
    /// The destination already had a page (another fault got there first).
    AlreadyThere,
    /// The source had no page (moves only).
    NoSource,
}

impl Uffd {
    /// Opens one, non-blocking. Fails where Linux has no userfaultfd or the caller may not use
    /// it for faults in the kernel (not root and `vm.unprivileged_userfaultfd` is 0).
    pub fn open() -> io::Result<Uffd> {
        // SAFETY: a plain system call with flags; the result is a new descriptor or -1.
        let raw = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor this call just opened and nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
        let uffd = Uffd { fd };
        let mut api = Api {
            api: UFFD_API,
            features: FEATURE_THREAD_ID | FEATURE_MOVE,
            ioctls: 0,
        };
        uffd.ioctl(IOC_API, &mut api)?;
        Ok(uffd)
    }

    fn ioctl<T>(&self, request: u64, arg: &mut T) -> io::Result<()> {
        // SAFETY: every request here takes a pointer to the `repr(C)` struct `T` the kernel
        // expects for it, which lives across the call.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), request as _, arg as *mut T) };
        if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Faults on missing pages of `[start, start + len)` come here.
    pub fn register(&self, start: usize, len: usize) -> io::Result<()> {
        let mut r = Register {
            range: Range {
                start: start as u64,
                len: len as u64,
            },
            mode: REGISTER_MODE_MISSING,
            ioctls: 0,
        };
        self.ioctl(IOC_REGISTER, &mut r)
    }

    pub fn unregister(&self, start: usize, len: usize) -> io::Result<()> {
        let mut r = Range {
            start: start as u64,
            len: len as u64,
        };
        self.ioctl(IOC_UNREGISTER, &mut r)
    }

    /// Wakes the threads waiting on faults in `[start, start + len)` (the page is there).
    pub fn wake(&self, start: usize, len: usize) -> io::Result<()> {
        let mut r = Range {
            start: start as u64,
            len: len as u64,
        };
        self.ioctl(IOC_WAKE, &mut r)
    }

    /// Fills the missing page at `dst` with a copy of `src` (a page), waking its waiters.
    pub fn copy(&self, dst: usize, src: &[u8]) -> io::Result<Placed> {
        let mut t = Transfer {
            dst: dst as u64,
            src: src.as_ptr() as u64,
            len: src.len() as u64,
            mode: 0,
            result: 0,
        };
        match self.ioctl(IOC_COPY, &mut t) {
            Ok(()) => Ok(Placed::Done),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(Placed::AlreadyThere),
            Err(e) => Err(e),
        }
    }

    /// Moves the page at `src` to the missing page at `dst` (both in anonymous memory
    /// registered here), atomically: a thread touching `src` meanwhile faults to the pager.
    /// A page Linux holds for a moment (locked, not yet on its LRU lists) refuses with `EAGAIN`
    /// or `EBUSY`: tried again a few times, so that what goes does not hang on the moment.
    pub fn move_page(&self, dst: usize, src: usize, len: usize) -> io::Result<Placed> {
        let mut tries = 0;
        loop {
            let mut t = Transfer {
                dst: dst as u64,
                src: src as u64,
                len: len as u64,
                mode: 0,
                result: 0,
            };
            match self.ioctl(IOC_MOVE, &mut t) {
                Ok(()) => return Ok(Placed::Done),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => return Ok(Placed::AlreadyThere),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Placed::NoSource),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY)) && tries < 1000 => {
                    tries += 1;
                    std::thread::yield_now();
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The page faults waiting, up to `into`'s room; none when there are none now.
    pub fn read_faults(&self, into: &mut Vec<Fault>) -> io::Result<()> {
        let mut msgs = [Msg::default(); 32];
        // SAFETY: reads whole `uffd_msg` records into an array of `repr(C)` ones of the same size.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr().cast(),
                std::mem::size_of_val(&msgs),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(())
            } else {
                Err(e)
            };
        }
        let count = n as usize / std::mem::size_of::<Msg>();
        into.extend(
            msgs[..count]
                .iter()
                .filter(|m| m.event == EVENT_PAGEFAULT)
                .map(|m| Fault {
                    address: m.address as usize,
                    thread: m.thread,
                }),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_layout_is_the_kernels() {
        assert_eq!(std::mem::size_of::<Msg>(), 32);
        assert_eq!(IOC_API, 0xc018_aa3f);
        assert_eq!(IOC_COPY, 0xc028_aa03);
        assert_eq!(IOC_REGISTER, 0xc020_aa00);
        assert_eq!(IOC_WAKE, 0x8010_aa02);
    }
}
