//! Lock waits given up when their client hangs up.
//!
//! A connection's thread blocked in a lock wait cannot see its client go: it would learn only
//! when the lock was granted, and a dead client would keep its place in the queue until then.
//! One thread per daemon watches, with epoll, the sockets of all connections in such a wait and
//! cancels the wait of a client that hangs up. A wait costs two `epoll_ctl` calls. (A watcher
//! thread per wait cost a clone and a stack mapped and unmapped: thousands a second under lock
//! contention, whose page-table work and TLB shoot-downs interrupt every core running the
//! daemon, another user's requests included.)

use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use vino_kernel::{Kernel, Pid};

/// How long the watcher sleeps at most before it checks that its daemon still exists.
const CHECK_MS: i32 = 500;

/// The daemon's watch over clients in lock waits.
pub(crate) struct HangupWatch {
    inner: Arc<Inner>,
    started: OnceLock<bool>,
}

struct Inner {
    /// `None` if the kernel refused an epoll instance: waits then end only when granted.
    epoll: Option<OwnedFd>,
    /// The waits being watched, by token: whose wait to cancel on which kernel.
    waits: Mutex<HashMap<u64, (Pid, Weak<Kernel>)>>,
    next: AtomicU64,
}

impl HangupWatch {
    pub(crate) fn new() -> HangupWatch {
        // SAFETY: plain system call; the result is checked before it is owned.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        // SAFETY: `fd` is a new descriptor nobody else owns.
        let epoll = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
        HangupWatch {
            inner: Arc::new(Inner {
                epoll,
                waits: Mutex::new(HashMap::new()),
                next: AtomicU64::new(1),
            }),
            started: OnceLock::new(),
        }
    }

    /// Runs `call`, a wait of process `pid` on `kernel`, cancelling the process's lock waits if
    /// `client` hangs up meanwhile.
    pub(crate) fn during<T>(
        &self,
        kernel: &Arc<Kernel>,
        pid: Pid,
        client: BorrowedFd<'_>,
        call: impl FnOnce() -> T,
    ) -> T {
        let Some(epoll) = &self.inner.epoll else { return call() };
        if !*self.started.get_or_init(|| spawn_watcher(Arc::downgrade(&self.inner))) {
            return call();
        }
        let token = self.inner.next.fetch_add(1, Ordering::Relaxed);
        self.inner.waits.lock().insert(token, (pid, Arc::downgrade(kernel)));
        // One-shot: a client that hangs up is reported once, not on every wake of the watcher
        // until this wait ends.
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLRDHUP | libc::EPOLLONESHOT) as u32,
            u64: token,
        };
        // SAFETY: both descriptors are open for the call (`client` is borrowed, `epoll` owned);
        // `ev` is a valid event the kernel copies.
        let added =
            unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, client.as_raw_fd(), &raw mut ev) } == 0;
        let result = call();
        self.inner.waits.lock().remove(&token);
        if added {
            // SAFETY: as above; a null event is allowed for a delete.
            unsafe {
                libc::epoll_ctl(
                    epoll.as_raw_fd(),
                    libc::EPOLL_CTL_DEL,
                    client.as_raw_fd(),
                    std::ptr::null_mut(),
                )
            };
        }
        result
    }
}

/// Starts the watcher; false if no thread could be started.
fn spawn_watcher(inner: Weak<Inner>) -> bool {
    std::thread::Builder::new()
        .name("vinod-hangups".into())
        .spawn(move || watch(inner))
        .is_ok()
}

/// The watcher: cancels the waits of clients that hang up, until the daemon is gone.
fn watch(inner: Weak<Inner>) {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
    loop {
        let Some(me) = inner.upgrade() else { return };
        let Some(epoll) = &me.epoll else { return };
        // SAFETY: `events` is writable for its length, which is passed; `epoll` is open.
        let n = unsafe { libc::epoll_wait(epoll.as_raw_fd(), events.as_mut_ptr(), events.len() as i32, CHECK_MS) };
        for ev in events.iter().take(n.max(0) as usize) {
            let token = ev.u64;
            // Taken out under the lock: a wait that ended first is not cancelled. One ending
            // just after is cancelled harmlessly: its client is gone and sends nothing more.
            let Some((pid, kernel)) = me.waits.lock().remove(&token) else {
                continue;
            };
            if let Some(kernel) = kernel.upgrade() {
                kernel.cancel_lock_waits(pid);
            }
        }
    }
}
