//! Change notices: what a system call changed in the namespace or in an inode, for those who
//! cache either (the FUSE mount, whose Linux side keeps names, attributes and file data and must
//! hear when another client of the kernel changes them).
//!
//! A hook is called after the change is made, on the thread that made it, with the process that
//! made it; it must be quick (the mount's queues a notice and returns).

use crate::Pid;
use parking_lot::RwLock;
use std::sync::Arc;

/// One change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The inode's attributes (mode, owner, size, times, link count) changed, or its data was
    /// written.
    Attr { ino: u64 },
    /// A graft now decides how the file's reads are served (a file-wide read-ahead graft): a
    /// cache in front of the kernel's should drop what it holds of the file, so that its reads
    /// come to the kernel again.
    Grafted { ino: u64 },
    /// The name `name` in directory `dir` appeared, went, or now names another inode.
    Entry { dir: u64, name: Vec<u8> },
}

/// Called with the process that made the changes and the changes.
pub type ChangeHook = Arc<dyn Fn(Pid, &[Change]) + Send + Sync>;

#[derive(Default)]
pub(crate) struct ChangeHooks {
    hooks: RwLock<Vec<(u64, ChangeHook)>>,
    next: std::sync::atomic::AtomicU64,
}

impl ChangeHooks {
    pub(crate) fn add(&self, hook: ChangeHook) -> u64 {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.hooks.write().push((id, hook));
        id
    }

    pub(crate) fn remove(&self, id: u64) {
        self.hooks.write().retain(|(i, _)| *i != id);
    }

    /// True if someone listens (the cheap test before building notices).
    pub(crate) fn wanted(&self) -> bool {
        !self.hooks.read().is_empty()
    }

    pub(crate) fn tell(&self, pid: Pid, changes: &[Change]) {
        if changes.is_empty() {
            return;
        }
        for (_, hook) in self.hooks.read().iter() {
            hook(pid, changes);
        }
    }
}
