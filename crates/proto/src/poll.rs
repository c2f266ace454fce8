//! Waiting for the peer's next message by spinning a short while before sleeping.
//!
//! On a virtual machine a blocked thread woken by another CPU's write takes tens of
//! microseconds to run again (the wake-up goes through the hypervisor): `vino bench daemon`
//! measures a null call with and without the client polling (see the README). A
//! program in a tight loop of system calls sends its next request (or the daemon its answer)
//! within microseconds, so each side first polls the socket for a bounded window, and only then
//! blocks. The window is short, the daemon lets only a few connections spin at once, and a poller
//! yields its core to any thread that can run there, so polling uses only CPU that would idle.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

/// How long the client polls for an answer, and the daemon for a connection's next request.
pub const SPIN: Duration = Duration::from_micros(100);

/// Polls `fd` (a stream socket) until it has bytes to read or the peer has closed, for at most
/// `window`. True if it is ready; false if the window passed (the caller then blocks as usual).
pub fn spin_until_readable(fd: BorrowedFd<'_>, window: Duration) -> bool {
    let start = Instant::now();
    let mut byte = 0u8;
    loop {
        // SAFETY: `byte` is a one-byte buffer that lives through the call (length 1), and the
        // descriptor is borrowed, so open, for as long; MSG_PEEK leaves the byte queued.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                (&raw mut byte).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        // Data (n > 0), the peer gone (n == 0), or an error other than "nothing yet": ready.
        let nothing_yet = n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock;
        if !nothing_yet {
            return true;
        }
        if start.elapsed() >= window {
            return false;
        }
        // Give the core to any thread that can run on it: the poll is worth its CPU only when
        // the core would otherwise idle. Without this, two pollers beside one busy thread (another
        // user's graft, say) take both cores of a small machine and the thread that would answer
        // waits for a time slice (hundreds of µs); with it, polling costs nothing when others run.
        // SAFETY: sched_yield takes no arguments and touches no memory of ours.
        unsafe { libc::sched_yield() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn ready_when_data_waits_or_the_peer_closed_and_not_otherwise() {
        let (mut a, b) = UnixStream::pair().unwrap();
        assert!(!spin_until_readable(b.as_fd(), Duration::from_micros(50)));
        a.write_all(b"x").unwrap();
        assert!(spin_until_readable(b.as_fd(), Duration::ZERO));
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(spin_until_readable(b.as_fd(), Duration::ZERO));
    }
}
