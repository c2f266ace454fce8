//! Invalidation notices: when another client of the kernel (the socket's, a program inside it)
//! changes a name or an inode, Linux's caches of the mount must forget what they hold, or
//! programs on the mount see stale names and, with `default_permissions`, Linux checks
//! permissions against stale modes.
//!
//! The kernel's change hook only queues the notice (it runs inside the kernel's system call);
//! a thread of the mount's sends them to Linux. Sending a notice from a thread that serves
//! requests could deadlock: Linux may wait for that very thread to answer a request on the same
//! directory. A change whose notice still waits is not queued again, so the queue holds at
//! most one notice per inode and per name: a client writing one file as fast as it can fills
//! one place, and only changes to more distinct inodes and names than the queue holds, faster
//! than Linux takes the notices, overflow it. A full queue drops notices: the thread then drops Linux's attributes and cached
//! data of every node it holds, once it has caught up (at most once per time the queue fills),
//! and the names stay stale for at most the mount's attribute timeout (30 s by default;
//! otherwise the notices keep Linux's caches valid, so the timeout can be long and a warm
//! `find` or `du` asks the kernel nothing).

use crate::ops::State;
use fuser::{INodeNo, Notifier};
use parking_lot::{Condvar, Mutex};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use vino_kernel::{Change, Kernel};

/// What the sending thread is asked to do.
enum Notice {
    /// A change by another client of the kernel.
    Change(Change),
    /// Drop Linux's copy of a file's data and attributes (the mount's own request), then
    /// answer the request that asked.
    Data { ino: u64, then: Box<dyn FnOnce() + Send> },
}

/// The way to the sending thread, for the mount's own notices.
#[derive(Default)]
pub(crate) struct Notices(std::sync::OnceLock<Queue>);

/// The notices waiting for the sending thread. A change already waiting is not queued again:
/// the notice sent for it covers the later change too (it goes after both), so a client
/// writing to one file again and again holds one place, not one per write.
#[derive(Default)]
struct Pending {
    queue: VecDeque<Notice>,
    /// Inodes whose attribute notice waits in `queue`.
    inodes: FxHashSet<u64>,
    /// Names whose entry notice waits in `queue`, by directory. Other clients pick the names,
    /// so they are hashed with SipHash (no chosen collisions); the kernel picks inode numbers.
    names: FxHashMap<u64, HashSet<Vec<u8>>>,
    /// A notice did not fit: Linux may hold stale data of any node.
    dropped: bool,
    /// The mount is going: the thread ends.
    closed: bool,
}

/// The sending thread's queue, shared with the thread.
struct Queue {
    shared: Arc<(Mutex<Pending>, Condvar)>,
    limit: usize,
}

impl Queue {
    fn new(limit: usize) -> Self {
        Queue {
            shared: Arc::default(),
            limit: limit.max(1),
        }
    }

    /// Queues `notice` unless the same change already waits; if the queue is full, flags that
    /// Linux may hold stale data of any node (the thread drops everything once caught up) and
    /// returns the notice.
    fn send(&self, notice: Notice) -> Result<(), Notice> {
        let (lock, ready) = &*self.shared;
        let mut p = lock.lock();
        let waiting = match &notice {
            Notice::Change(Change::Attr { ino } | Change::Grafted { ino }) => p.inodes.contains(ino),
            Notice::Change(Change::Entry { dir, name }) => p.names.get(dir).is_some_and(|n| n.contains(name)),
            Notice::Data { .. } => false,
        };
        if waiting {
            return Ok(());
        }
        if p.queue.len() >= self.limit {
            p.dropped = true;
            ready.notify_one();
            return Err(notice);
        }
        match &notice {
            Notice::Change(Change::Attr { ino } | Change::Grafted { ino }) => {
                p.inodes.insert(*ino);
            }
            Notice::Change(Change::Entry { dir, name }) => {
                p.names.entry(*dir).or_default().insert(name.clone());
            }
            Notice::Data { .. } => {}
        }
        p.queue.push_back(notice);
        ready.notify_one();
        Ok(())
    }

    /// The sending thread's side: waits for notices, and takes them all (forgetting that they
    /// wait, so a change from now on is queued again) with whether one was dropped since the
    /// last call. None once the mount is going.
    fn take(shared: &(Mutex<Pending>, Condvar)) -> Option<(VecDeque<Notice>, bool)> {
        let (lock, ready) = shared;
        let mut p = lock.lock();
        while p.queue.is_empty() && !p.dropped && !p.closed {
            ready.wait(&mut p);
        }
        if p.closed {
            return None;
        }
        p.inodes.clear();
        p.names.clear();
        let dropped = std::mem::take(&mut p.dropped);
        Some((std::mem::take(&mut p.queue), dropped))
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        let (lock, ready) = &*self.shared;
        lock.lock().closed = true;
        ready.notify_one();
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
    let q = Queue::new(queue);
    let shared = q.shared.clone();
    let _ = state.notices.0.set(q);
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
            while let Some((notices, dropped)) = Queue::take(&shared) {
                for n in notices {
                    send(&notifier, n);
                }
                // Caught up: if a notice was dropped meanwhile, forget everything Linux holds.
                if dropped {
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
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counter() -> (Arc<AtomicUsize>, impl FnOnce() + Send + 'static) {
        let n = Arc::new(AtomicUsize::new(0));
        let m = n.clone();
        (n, move || {
            m.fetch_add(1, Ordering::SeqCst);
        })
    }

    fn attr(ino: u64) -> Notice {
        Notice::Change(Change::Attr { ino })
    }

    fn entry(dir: u64, name: &[u8]) -> Notice {
        Notice::Change(Change::Entry {
            dir,
            name: name.to_vec(),
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

        let notices = Notices::default();
        let _ = notices.0.set(Queue::new(1));
        let shared = notices.0.get().unwrap().shared.clone();
        let (queued, then) = counter();
        notices.drop_data(7, then);
        assert_eq!(queued.load(Ordering::SeqCst), 0, "answered before the drop was sent");
        assert!(!shared.0.lock().dropped);

        let (full, then) = counter();
        notices.drop_data(8, then);
        assert_eq!(full.load(Ordering::SeqCst), 1, "a full queue answers at once");

        let (mut taken, dropped) = Queue::take(&shared).unwrap();
        assert!(dropped, "and has everything dropped later");
        match taken.pop_front() {
            Some(Notice::Data { ino: 7, then }) => then(),
            _ => panic!("the first drop was not queued"),
        }
        assert_eq!(queued.load(Ordering::SeqCst), 1);
    }

    /// A change that already waits takes no second place: a client writing one file a
    /// hundred thousand times cannot fill the queue (and have everything dropped for every
    /// user); distinct changes past the limit still can. Once taken, a change queues again.
    #[test]
    fn a_waiting_change_is_not_queued_twice() {
        let q = Queue::new(3);
        for _ in 0..100_000 {
            assert!(q.send(attr(5)).is_ok());
            assert!(q.send(Notice::Change(Change::Grafted { ino: 5 })).is_ok());
            assert!(q.send(entry(1, b"a")).is_ok());
        }
        assert!(q.send(entry(1, b"b")).is_ok(), "a third distinct change fits");
        assert!(q.send(attr(6)).is_err(), "a fourth does not");
        assert!(q.send(attr(5)).is_ok(), "one already waiting still needs no place");

        let (taken, dropped) = Queue::take(&q.shared).unwrap();
        assert!(dropped);
        let kinds: Vec<String> = taken
            .iter()
            .map(|n| match n {
                Notice::Change(c) => format!("{c:?}"),
                Notice::Data { ino, .. } => format!("data {ino}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "Attr { ino: 5 }",
                "Entry { dir: 1, name: [97] }",
                "Entry { dir: 1, name: [98] }"
            ]
        );
        assert!(q.send(attr(5)).is_ok());
        let (taken, dropped) = Queue::take(&q.shared).unwrap();
        assert_eq!(taken.len(), 1, "a change after the take is sent again");
        assert!(!dropped);

        drop(q.send(attr(9)));
        let shared = q.shared.clone();
        drop(q);
        assert!(Queue::take(&shared).is_none(), "the thread ends with the mount");
    }
}
