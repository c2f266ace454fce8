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
//! than Linux takes the notices, overflow it. Each user's changes wait apart and are sent in
//! turn with the others', and one user holds at most half the queue, so one user's flood
//! neither delays another's notices nor leaves them no room. A change that finds the queue (or
//! its user's half) full marks its
//! inode (for a name, its directory) in a fixed set of buckets instead; once caught up, the
//! thread drops Linux's attributes and cached data of the nodes it holds in marked buckets.
//! Buckets are chosen by a keyed hash, so a client that floods the queue with changes to its
//! own files costs other users' cached nodes only by chance collisions, in proportion to how
//! many distinct files it changed, and cannot aim at a node of its choice. Names whose notice
//! was lost stay stale for at most the mount's attribute timeout (30 s by default; otherwise
//! the notices keep Linux's caches valid, so the timeout can be long and a warm `find` or `du`
//! asks the kernel nothing).

use crate::ops::State;
use fuser::{INodeNo, Notifier};
use parking_lot::{Condvar, Mutex};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::hash::{BuildHasher, RandomState};
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
///
/// Each user's changes wait in a queue of its own, and the thread takes them in turn, a
/// notice from each user with changes waiting before a second from any: one user's flood
/// delays another user's notice by the batch being sent ([`TAKE`] at most) and one notice per
/// flooding user. A user may hold at
/// most half the places; past it, its changes are marked stale instead (see [`Stale`]), so
/// another user's changes still find room.
#[derive(Default)]
struct Pending {
    /// The mount's own notices (a request's answer waits on each): taken first.
    own: VecDeque<Notice>,
    /// Other clients' changes, by the uid of the process that made them.
    by_user: FxHashMap<u32, VecDeque<Notice>>,
    /// Users with changes waiting, in the order of their next turn.
    turns: VecDeque<u32>,
    /// Notices waiting in all.
    len: usize,
    /// Inodes whose attribute notice waits.
    inodes: FxHashSet<u64>,
    /// Names whose entry notice waits, by directory. Other clients pick the names,
    /// so they are hashed with SipHash (no chosen collisions); the kernel picks inode numbers.
    names: FxHashMap<u64, HashSet<Vec<u8>>>,
    /// The inodes of changes that did not fit: Linux may hold stale data of them.
    stale: Stale,
    /// The mount is going: the thread ends.
    closed: bool,
}

/// Bucket count of [`Stale`]: 8 KiB of bits, a bucket per 64 KiB-th of the inode numbers.
const STALE_BUCKETS: usize = 1 << 16;

/// Inodes whose notice was lost to a full queue, as marked buckets of a keyed hash: a fixed
/// size whatever the flood, at the price of also dropping what Linux holds of the nodes that
/// share a bucket with one.
struct Stale {
    key: RandomState,
    bits: Vec<u64>,
    marked: usize,
}

impl Default for Stale {
    fn default() -> Self {
        Stale {
            key: RandomState::new(),
            bits: vec![0; STALE_BUCKETS / 64],
            marked: 0,
        }
    }
}

impl Stale {
    fn bucket(&self, ino: u64) -> usize {
        (self.key.hash_one(ino) as usize) % STALE_BUCKETS
    }

    fn mark(&mut self, ino: u64) {
        let b = self.bucket(ino);
        let word = &mut self.bits[b / 64];
        if *word & (1 << (b % 64)) == 0 {
            *word |= 1 << (b % 64);
            self.marked += 1;
        }
    }

    fn has(&self, ino: u64) -> bool {
        let b = self.bucket(ino);
        self.bits[b / 64] & (1 << (b % 64)) != 0
    }

    fn is_empty(&self) -> bool {
        self.marked == 0
    }

    /// The marks so far, leaving none (same key: a node's bucket does not move).
    fn take(&mut self) -> Stale {
        let bits = std::mem::replace(&mut self.bits, vec![0; STALE_BUCKETS / 64]);
        Stale {
            key: self.key.clone(),
            bits,
            marked: std::mem::take(&mut self.marked),
        }
    }
}

impl Pending {
    /// The notice's change no longer waits: a change from now on queues again.
    fn forget(&mut self, notice: &Notice) {
        match notice {
            Notice::Change(Change::Attr { ino } | Change::Grafted { ino }) => {
                self.inodes.remove(ino);
            }
            Notice::Change(Change::Entry { dir, name }) => {
                if let Some(names) = self.names.get_mut(dir) {
                    names.remove(name);
                    if names.is_empty() {
                        self.names.remove(dir);
                    }
                }
            }
            Notice::Data { .. } => {}
        }
    }

    /// The next notice: the mount's own first, then each user's in turn.
    fn next(&mut self) -> Option<Notice> {
        let notice = match self.own.pop_front() {
            Some(n) => n,
            None => {
                let uid = self.turns.pop_front()?;
                let queue = self.by_user.get_mut(&uid).expect("a user with a turn has a queue");
                let n = queue.pop_front().expect("a user with a turn has a change waiting");
                if queue.is_empty() {
                    self.by_user.remove(&uid);
                } else {
                    self.turns.push_back(uid);
                }
                n
            }
        };
        self.len -= 1;
        self.forget(&notice);
        Some(notice)
    }
}

/// Most notices the thread takes at once: a user's change that comes meanwhile waits for at
/// most these, whatever waits behind them.
const TAKE: usize = 256;

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

    /// Queues `notice`, a change made by a process of `uid` (None: the mount's own), unless the
    /// same change already waits; if the queue is full, or the user holds its half, marks the
    /// inode it concerns as stale (the thread drops what Linux holds of it once caught up) and
    /// returns the notice.
    fn send(&self, uid: Option<u32>, notice: Notice) -> Result<(), Notice> {
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
        let share = (self.limit / 2).max(1);
        let users = uid.map_or(0, |u| p.by_user.get(&u).map_or(0, VecDeque::len));
        if p.len >= self.limit || users >= share {
            let ino = match &notice {
                Notice::Change(Change::Attr { ino } | Change::Grafted { ino }) => *ino,
                // Linux has no notice that drops every name of a directory: its attributes
                // and listing go, the names stay for at most the attribute timeout.
                Notice::Change(Change::Entry { dir, .. }) => *dir,
                Notice::Data { ino, .. } => *ino,
            };
            p.stale.mark(ino);
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
        match uid {
            None => p.own.push_back(notice),
            Some(uid) => {
                let queue = p.by_user.entry(uid).or_default();
                queue.push_back(notice);
                if queue.len() == 1 {
                    p.turns.push_back(uid);
                }
            }
        }
        p.len += 1;
        ready.notify_one();
        Ok(())
    }

    /// The sending thread's side: waits for notices, and takes up to [`TAKE`] of them, the
    /// mount's own first and then the users' in turn (forgetting that they wait, so a change
    /// from now on is queued again); once none is left, with the inodes marked stale since the
    /// last time, if any. None once the mount is going.
    fn take(shared: &(Mutex<Pending>, Condvar)) -> Option<(Vec<Notice>, Option<Stale>)> {
        let (lock, ready) = shared;
        let mut p = lock.lock();
        while p.len == 0 && p.stale.is_empty() && !p.closed {
            ready.wait(&mut p);
        }
        if p.closed {
            return None;
        }
        let taken: Vec<Notice> = std::iter::from_fn(|| p.next()).take(TAKE).collect();
        let caught_up = p.len == 0 && !p.stale.is_empty();
        let stale = caught_up.then(|| p.stale.take());
        Some((taken, stale))
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
    /// (the node is then dropped once the thread catches up), `then` runs at once.
    pub(crate) fn drop_data(&self, ino: u64, then: impl FnOnce() + Send + 'static) {
        let then: Box<dyn FnOnce() + Send> = Box::new(then);
        let Some(queue) = self.0.get() else { return then() };
        if let Err(Notice::Data { then, .. }) = queue.send(None, Notice::Data { ino, then }) {
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
    // Weak: the kernel holds the hook.
    let weak_kernel = Arc::downgrade(&kernel);
    let hook = kernel.on_change(Arc::new(move |pid, changes| {
        let Some(state) = weak.upgrade() else { return };
        if state.own.read().contains(&pid) {
            return;
        }
        let Some(queue) = state.notices.0.get() else { return };
        // The changing process is in a system call: it exists (else its changes count as
        // one unknown user's).
        let uid = weak_kernel
            .upgrade()
            .and_then(|k| k.process(pid))
            .map_or(u32::MAX, |p| p.credentials().uid);
        for c in changes {
            let _ = queue.send(Some(uid), Notice::Change(c.clone()));
        }
    }));
    let weak = Arc::downgrade(state);
    std::thread::Builder::new()
        .name("vino-fuse-inval".into())
        .spawn(move || {
            while let Some((notices, stale)) = Queue::take(&shared) {
                for n in notices {
                    send(&notifier, n);
                }
                // Caught up: if notices were lost meanwhile, drop the nodes of their buckets.
                if let Some(stale) = stale {
                    let Some(state) = weak.upgrade() else { return };
                    for ino in state.nodes.inodes().into_iter().filter(|&i| stale.has(i)) {
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
        assert!(shared.0.lock().stale.is_empty());

        let (full, then) = counter();
        notices.drop_data(8, then);
        assert_eq!(full.load(Ordering::SeqCst), 1, "a full queue answers at once");

        let (taken, stale) = Queue::take(&shared).unwrap();
        assert!(stale.is_some_and(|s| s.has(8)), "and has the node dropped later");
        match taken.into_iter().next() {
            Some(Notice::Data { ino: 7, then }) => then(),
            _ => panic!("the first drop was not queued"),
        }
        assert_eq!(queued.load(Ordering::SeqCst), 1);
    }

    fn kinds(taken: &[Notice]) -> Vec<String> {
        taken
            .iter()
            .map(|n| match n {
                Notice::Change(c) => format!("{c:?}"),
                Notice::Data { ino, .. } => format!("data {ino}"),
            })
            .collect()
    }

    /// A change that already waits takes no second place: a client writing one file a
    /// hundred thousand times cannot fill the queue (and have its files marked stale);
    /// distinct changes past its half of the queue are. Once taken, a change queues again.
    #[test]
    fn a_waiting_change_is_not_queued_twice() {
        let q = Queue::new(6);
        let me = Some(1);
        for _ in 0..100_000 {
            assert!(q.send(me, attr(5)).is_ok());
            assert!(q.send(me, Notice::Change(Change::Grafted { ino: 5 })).is_ok());
            assert!(q.send(me, entry(1, b"a")).is_ok());
        }
        assert!(q.send(me, entry(1, b"b")).is_ok(), "a third distinct change fits");
        assert!(q.send(me, attr(6)).is_err(), "a fourth is past the user's half");
        assert!(q.send(me, attr(5)).is_ok(), "one already waiting still needs no place");

        let (taken, stale) = Queue::take(&q.shared).unwrap();
        assert!(stale.is_some_and(|s| s.has(6) && s.marked == 1));
        assert_eq!(
            kinds(&taken),
            [
                "Attr { ino: 5 }",
                "Entry { dir: 1, name: [97] }",
                "Entry { dir: 1, name: [98] }"
            ]
        );
        assert!(q.send(me, attr(5)).is_ok());
        let (taken, stale) = Queue::take(&q.shared).unwrap();
        assert_eq!(taken.len(), 1, "a change after the take is sent again");
        assert!(stale.is_none(), "the marks went with the take");

        drop(q.send(me, attr(9)));
        let shared = q.shared.clone();
        drop(q);
        assert!(Queue::take(&shared).is_none(), "the thread ends with the mount");
    }

    /// One user flooding the queue holds half of it: another user's changes still find room
    /// and are taken in turn with the flood's, the mount's own notices first, and the flood's
    /// lost changes are marked stale only once the thread has caught up.
    #[test]
    fn a_users_flood_neither_fills_the_queue_nor_delays_anothers_change() {
        let q = Queue::new(1000);
        let (flooder, victim) = (Some(1000), Some(1001));
        let lost = (0..5000u64)
            .filter(|&i| q.send(flooder, attr(10_000 + i)).is_err())
            .count();
        assert_eq!(lost, 4500, "the flooder holds half the queue");
        assert!(q.send(victim, attr(7)).is_ok(), "another user's change finds room");
        assert!(q.send(victim, attr(8)).is_ok());
        let (answered, then) = counter();
        let notices = Notices::default();
        let _ = notices.0.set(q);
        notices.drop_data(3, then);
        let shared = notices.0.get().unwrap().shared.clone();

        let (taken, stale) = Queue::take(&shared).unwrap();
        assert_eq!(taken.len(), TAKE);
        assert_eq!(
            kinds(&taken[..5]),
            [
                "data 3",
                "Attr { ino: 10000 }",
                "Attr { ino: 7 }",
                "Attr { ino: 10001 }",
                "Attr { ino: 8 }"
            ],
            "the mount's own first, then each user in turn"
        );
        assert!(stale.is_none(), "not caught up yet");
        let mut sent = TAKE;
        let stale = loop {
            let (taken, stale) = Queue::take(&shared).unwrap();
            sent += taken.len();
            if let Some(stale) = stale {
                break stale;
            }
        };
        assert_eq!(sent, 1 + 500 + 2, "every queued notice was taken");
        assert!(
            (10_500..15_000).all(|i| stale.has(i)),
            "the flood's lost changes are stale"
        );
        assert_eq!(answered.load(Ordering::SeqCst), 0, "the drop answers when sent");
        if let Some(Notice::Data { then, .. }) = taken.into_iter().next() {
            then();
        }
        assert_eq!(answered.load(Ordering::SeqCst), 1);
    }

    /// A flood of changes to a client's own files past its half of the queue marks only their
    /// buckets: every flooded inode is dropped later, other nodes only by collision (about one
    /// in 65,536 per flooded inode), the first and second flood's marks do not add up, and each
    /// queue has its own key, so a client cannot learn which of its files share a bucket
    /// with another user's node.
    #[test]
    fn an_overflow_drops_the_flooded_nodes_not_everyones() {
        let q = Queue::new(16);
        let me = Some(1);
        let flooded: Vec<u64> = (1_000_000..1_002_000).collect();
        for &ino in &flooded {
            let _ = q.send(me, attr(ino));
        }
        let _ = q.send(me, entry(77, b"name"));
        let (taken, stale) = Queue::take(&q.shared).unwrap();
        assert_eq!(taken.len(), 8, "the user's half");
        let stale = stale.expect("the flood overflowed");
        assert!(
            flooded[8..].iter().all(|&i| stale.has(i)),
            "a lost notice's node is dropped"
        );
        assert!(stale.has(77), "a lost name drops its directory");
        let others = (1..=100_000u64).filter(|&i| stale.has(i)).count();
        // 1,993 marks of 65,536 buckets: about 3,000 of 100,000 others expected.
        assert!(others < 4_500, "{others} of 100,000 other nodes would be dropped");

        for &ino in &flooded[..100] {
            let _ = q.send(me, attr(ino));
        }
        let (_, stale) = Queue::take(&q.shared).unwrap();
        let stale = stale.expect("the second flood overflowed");
        // The 92 lost notices mark their buckets, fresh ones (not the first flood's); two of
        // them may share a bucket under this queue's random key.
        let buckets: std::collections::HashSet<_> = flooded[8..100].iter().map(|&i| stale.bucket(i)).collect();
        assert_eq!(stale.marked, buckets.len(), "marks end with the take");

        let (a, b) = (Stale::default(), Stale::default());
        assert!(
            (0..64).any(|i| a.bucket(i) != b.bucket(i)),
            "two queues share their buckets"
        );
    }
}
