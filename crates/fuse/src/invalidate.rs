//! Invalidation notices: when another client of the kernel (the socket's, a program inside it)
//! changes a name or an inode, Linux's caches of the mount must forget what they hold, or
//! programs on the mount see stale names and, with `default_permissions`, Linux checks
//! permissions against stale modes.
//!
//! The kernel's change hook only queues the notice (it runs inside the kernel's system call);
//! a thread of the mount's sends them to Linux. Sending a notice from a thread that serves
//! requests could deadlock: Linux may wait for that very thread to answer a request on the same
//! directory. A full queue drops notices: the thread then drops Linux's attributes and cached
//! data of every node it holds, once it has caught up (at most once per time the queue fills),
//! and the names stay stale for at most the mount's attribute timeout (30 s by default;
//! otherwise the notices keep Linux's caches valid, so the timeout can be long and a warm
//! `find` or `du` asks the kernel nothing).

use crate::ops::State;
use fuser::{INodeNo, Notifier};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use vino_kernel::{Change, Kernel};

/// What the sending thread is asked to do.
enum Notice {
    /// A change by another client of the kernel.
    Change(Change),
    /// Drop Linux's copy of a file's data and attributes (the mount's own request), then
    /// answer the request that asked.
    Data { ino: u64, then: Box<dyn FnOnce() + Send> },
    /// Nothing to send: wakes the thread to look at the dropped-notice flag.
    Wake,
}

/// The way to the sending thread, for the mount's own notices.
#[derive(Default)]
pub(crate) struct Notices(std::sync::OnceLock<Queue>);

/// The sending thread's queue, and the flag that says a notice did not fit in it.
struct Queue {
    tx: SyncSender<Notice>,
    dropped: Arc<AtomicBool>,
}

impl Queue {
    /// Queues `notice`; if the queue is full, flags that Linux may hold stale data of any node
    /// (the thread drops everything once caught up) and returns the notice.
    fn send(&self, notice: Notice) -> Result<(), Notice> {
        match self.tx.try_send(notice) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(n) | TrySendError::Disconnected(n)) => {
                // Set, then nudge the thread: if the queue emptied meanwhile (the thread may
                // have looked at the flag before it was set) the nudge fits and wakes it; if
                // still full, the thread looks at the flag after the notices ahead.
                self.dropped.store(true, Ordering::SeqCst);
                let _ = self.tx.try_send(Notice::Wake);
                Err(n)
            }
        }
    }
}

impl Notices {
    /// Makes Linux forget the pages of `ino` it holds, so the reads that follow reach VINO's
    /// cache, and then runs `then` (which answers the request). The request's thread does not
    /// wait: Linux's invalidation waits for pages being read, whose reads may be queued behind
    /// that thread, and other users' requests are. With no sending thread, or a full queue
    /// (everything is then dropped once the thread catches up), `then` runs at once.
    pub(crate) fn drop_data(&self, ino: u64, then: impl FnOnce() + Send + 'static) {
        let then: Box<dyn FnOnce() + Send> = Box::new(then);
        let Some(queue) = self.0.get() else { return then() };
        if let Err(Notice::Data { then, .. }) = queue.send(Notice::Data { ino, then }) {
            then();
        }
    }
}

/// Sends one notice. Errors (ENOENT: Linux does not hold the node) need nothing done.
/// Invalidating an inode from offset 0 for length 0 drops all its cached pages with its
/// attributes.
fn send(notifier: &Notifier, notice: Notice) {
    let _ = match notice {
        Notice::Change(Change::Attr { ino } | Change::Grafted { ino }) => notifier.inval_inode(INodeNo(ino), 0, 0),
        Notice::Change(Change::Entry { dir, name }) => notifier.inval_entry(INodeNo(dir), OsStr::from_bytes(&name)),
        Notice::Data { ino, then } => {
            let r = notifier.inval_inode(INodeNo(ino), 0, 0);
            then();
            r
        }
        Notice::Wake => return,
    };
}

/// The hook's registration; dropping it stops the notices (and ends the thread).
pub(crate) struct Invalidator {
    kernel: Arc<Kernel>,
    hook: u64,
}

impl Drop for Invalidator {
    fn drop(&mut self) {
        self.kernel.remove_change_hook(self.hook);
    }
}

/// Starts sending Linux the kernel's changes made by processes other than the mount's.
pub(crate) fn start(
    kernel: Arc<Kernel>,
    state: &Arc<State>,
    notifier: Notifier,
    queue: usize,
) -> std::io::Result<Invalidator> {
    let (tx, rx): (SyncSender<Notice>, Receiver<Notice>) = sync_channel(queue);
    // Set when a notice was dropped: Linux may hold stale data of any node.
    let dropped = Arc::new(AtomicBool::new(false));
    let _ = state.notices.0.set(Queue {
        tx,
        dropped: dropped.clone(),
    });
    let weak = Arc::downgrade(state);
    let hook = kernel.on_change(Arc::new(move |pid, changes| {
        let Some(state) = weak.upgrade() else { return };
        if state.own.read().contains(&pid) {
            return;
        }
        let Some(queue) = state.notices.0.get() else { return };
        for c in changes {
            let _ = queue.send(Notice::Change(c.clone()));
        }
    }));
    let weak = Arc::downgrade(state);
    std::thread::Builder::new()
        .name("vino-fuse-inval".into())
        .spawn(move || {
            while let Ok(first) = rx.recv() {
                send(&notifier, first);
                while let Ok(next) = rx.try_recv() {
                    send(&notifier, next);
                }
                // Caught up: if a notice was dropped meanwhile, forget everything Linux holds.
                if dropped.swap(false, Ordering::SeqCst) {
                    let Some(state) = weak.upgrade() else { return };
                    for ino in state.nodes.inodes() {
                        let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
                    }
                }
            }
        })?;
    Ok(Invalidator { kernel, hook })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn counter() -> (Arc<AtomicUsize>, impl FnOnce() + Send + 'static) {
        let n = Arc::new(AtomicUsize::new(0));
        let m = n.clone();
        (n, move || {
            m.fetch_add(1, Ordering::SeqCst);
        })
    }

    /// The request's answer never waits on the request's thread: it goes with the notice, runs
    /// at once where there is no thread to send it, and at once (flagging a flush of
    /// everything) where the queue is full.
    #[test]
    fn a_drop_answers_from_the_sending_thread_or_at_once() {
        let (answered, then) = counter();
        Notices::default().drop_data(1, then);
        assert_eq!(
            answered.load(Ordering::SeqCst),
            1,
            "no sending thread: answered at once"
        );

        let (tx, rx) = sync_channel(1);
        let dropped = Arc::new(AtomicBool::new(false));
        let notices = Notices::default();
        let _ = notices.0.set(Queue {
            tx,
            dropped: dropped.clone(),
        });
        let (queued, then) = counter();
        notices.drop_data(7, then);
        assert_eq!(queued.load(Ordering::SeqCst), 0, "answered before the drop was sent");
        assert!(!dropped.load(Ordering::SeqCst));

        let (full, then) = counter();
        notices.drop_data(8, then);
        assert_eq!(full.load(Ordering::SeqCst), 1, "a full queue answers at once");
        assert!(dropped.load(Ordering::SeqCst), "and has everything dropped later");

        match rx.try_recv() {
            Ok(Notice::Data { ino: 7, then }) => then(),
            _ => panic!("the first drop was not queued"),
        }
        assert_eq!(queued.load(Ordering::SeqCst), 1);
    }
}
