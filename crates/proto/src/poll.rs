//! Waiting for the peer's next message by spinning a short while before sleeping.
//!
//! On a virtual machine a blocked thread woken by another CPU's write takes tens of
//! microseconds to run again (the wake-up goes through the hypervisor): `vino bench daemon`
//! measures a null call with and without the client polling (docs/results/daemon.md). A
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
    poll_until_readable(fd, window).ready
}

/// Most of one round of the poll (a peek and a yield, a microsecond or two when the core is
/// free) counted as the poller's own time: a longer round is one in which others ran.
const OWN_ROUND_MAX: Duration = Duration::from_micros(10);

/// What [`poll_until_readable`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Polled {
    /// Bytes are waiting, or the peer closed.
    pub ready: bool,
    /// About the CPU the poll itself used: its rounds, each counted for at most
    /// [`OWN_ROUND_MAX`]. Its wall time would also count whatever ran while it yielded the core,
    /// and a thread's CPU clock costs a system call (half a microsecond and more) that would
    /// delay the request the poll found.
    pub own: Duration,
}

/// [`spin_until_readable`], also telling about how much CPU the poll used (for the daemon,
/// which charges its users' CPU and must not charge them for polling).
pub fn poll_until_readable(fd: BorrowedFd<'_>, window: Duration) -> Polled {
    let start = Instant::now();
    let (mut round_began, mut own) = (start, Duration::ZERO);
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
        let now = Instant::now();
        own += (now - round_began).min(OWN_ROUND_MAX);
        round_began = now;
        // Data (n > 0), the peer gone (n == 0), or an error other than "nothing yet": ready.
        let nothing_yet = n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock;
        if !nothing_yet || now - start >= window {
            return Polled {
                ready: !nothing_yet,
                own,
            };
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

    /// Pins the calling thread to the first CPU it may use.
    fn pin_to_one_cpu() {
        // SAFETY: a zeroed cpu_set_t is an empty set; the calls get valid pointers to it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set);
            let first = (0..libc::CPU_SETSIZE as usize)
                .find(|&c| libc::CPU_ISSET(c, &set))
                .unwrap();
            libc::CPU_ZERO(&mut set);
            libc::CPU_SET(first, &mut set);
            assert_eq!(libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set), 0);
        }
    }

    #[test]
    fn a_poll_that_yields_to_a_busy_thread_counts_only_its_own_rounds() {
        // A busy thread on the poller's only core: each yield lets it run for its time slice.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let busy = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                pin_to_one_cpu();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let polled = std::thread::spawn(|| {
            pin_to_one_cpu();
            let (_a, b) = UnixStream::pair().unwrap();
            let began = Instant::now();
            let polled = poll_until_readable(b.as_fd(), Duration::from_millis(50));
            (polled, began.elapsed())
        })
        .join()
        .unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        busy.join().unwrap();
        let (polled, wall) = polled;
        assert!(!polled.ready);
        assert!(wall >= Duration::from_millis(50));
        // Counted in wall time, the poll would take 50 ms off the user's work; its own rounds are
        // a small part of that.
        assert!(polled.own <= wall / 4, "own {:?} of {wall:?}", polled.own);
    }

    #[test]
    fn a_poll_alone_counts_about_its_wall_time() {
        let (_a, b) = UnixStream::pair().unwrap();
        let began = Instant::now();
        let polled = poll_until_readable(b.as_fd(), Duration::from_millis(2));
        let wall = began.elapsed();
        assert!(!polled.ready && polled.own <= wall, "{polled:?} {wall:?}");
        assert!(polled.own > Duration::ZERO);
    }
}
