//! Invalidation notices: when another client of the kernel (the socket's, a program inside it)
//! changes a name or an inode, Linux's caches of the mount must forget what they hold, or
//! programs on the mount see stale names and, with `default_permissions`, Linux checks
//! permissions against stale modes.
//!
//! The kernel's change hook only queues the notice (it runs inside the kernel's system call);
//! a thread of the mount's sends them to Linux. Sending a notice from a thread that serves
//! requests could deadlock: Linux may wait for that very thread to answer a request on the same
//! directory. A full queue drops notices: the thread then drops Linux's attributes and cached
//! data of every node it holds, once it has caught up (at most once per time the queue fills), and the names stay stale for at most the
//! mount's attribute timeout (30 s by default; otherwise the notices keep Linux's caches valid,
//! so the timeout can be long and a warm `find` or `du` asks the kernel nothing).

use crate::ops::State;
use fuser::{INodeNo, Notifier};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Duration;
use vino_kernel::{Change, Kernel};

/// How long [`Notices::drop_data`] waits for Linux to have dropped the pages. Bounded because
/// Linux waits for pages being read, whose reads may queue behind the waiting request.
const DROP_WAIT: Duration = Duration::from_millis(100);

/// What the sending thread is asked to do.
enum Notice {
    /// A change by another client of the kernel.
    Change(Change),
    /// Drop Linux's copy of a file's data and attributes (the mount's own request), then say so.
    Data { ino: u64, done: SyncSender<()> },
    /// Nothing to send: wakes the thread to look at the dropped-notice flag.
    Wake,
}

/// The way to the sending thread, for the mount's own notices.
#[derive(Default)]
pub(crate) struct Notices(std::sync::OnceLock<SyncSender<Notice>>);

impl Notices {
    /// Makes Linux forget the pages of `ino` it holds, so the reads that follow reach VINO's
    /// cache; returns once done, or after [`DROP_WAIT`] (the notice still goes).
    pub(crate) fn drop_data(&self, ino: u64) {
        let Some(tx) = self.0.get() else { return };
        let (done, sent) = sync_channel(1);
        if tx.try_send(Notice::Data { ino, done }).is_ok() {
            let _ = sent.recv_timeout(DROP_WAIT);
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
        Notice::Data { ino, done } => {
            let r = notifier.inval_inode(INodeNo(ino), 0, 0);
            let _ = done.try_send(());
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
    let _ = state.notices.0.set(tx.clone());
    let weak = Arc::downgrade(state);
    // Set when a notice was dropped: Linux may hold stale data of any node.
    let dropped = Arc::new(AtomicBool::new(false));
    let dropped_by_hook = dropped.clone();
    let hook = kernel.on_change(Arc::new(move |pid, changes| {
        let Some(state) = weak.upgrade() else { return };
        if state.own.read().contains(&pid) {
            return;
        }
        for c in changes {
            match tx.try_send(Notice::Change(c.clone())) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    // Set, then nudge the thread: if the queue emptied meanwhile (the thread
                    // may have looked at the flag before it was set) the nudge fits and wakes
                    // it; if still full, the thread looks at the flag after the notices ahead.
                    dropped_by_hook.store(true, Ordering::SeqCst);
                    let _ = tx.try_send(Notice::Wake);
                }
                Err(TrySendError::Disconnected(_)) => return,
            }
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
