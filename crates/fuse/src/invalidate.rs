//! Invalidation notices: when another client of the kernel (the socket's, a program inside it)
//! changes a name or an inode, Linux's caches of the mount must forget what they hold, or
//! programs on the mount see stale names and, with `default_permissions`, Linux checks
//! permissions against stale modes.
//!
//! The kernel's change hook only queues the notice (it runs inside the kernel's system call);
//! a thread of the mount's sends them to Linux. Sending a notice from a thread that serves
//! requests could deadlock: Linux may wait for that very thread to answer a request on the same
//! directory. A full queue drops notices: the entries then stay stale for at most the mount's
//! attribute timeout (30 s by default; otherwise the notices keep Linux's caches valid, so the
//! timeout can be long and a warm `find` or `du` asks the kernel nothing).

use crate::ops::State;
use fuser::{INodeNo, Notifier};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use vino_kernel::{Change, Kernel};

/// Notices waiting to be sent, at most (a few MiB of names at worst).
const QUEUE: usize = 16384;

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
pub(crate) fn start(kernel: Arc<Kernel>, state: &Arc<State>, notifier: Notifier) -> std::io::Result<Invalidator> {
    let (tx, rx): (SyncSender<Change>, Receiver<Change>) = sync_channel(QUEUE);
    let weak = Arc::downgrade(state);
    let hook = kernel.on_change(Arc::new(move |pid, changes| {
        let Some(state) = weak.upgrade() else { return };
        if state.own.read().contains(&pid) {
            return;
        }
        for c in changes {
            if let Err(TrySendError::Disconnected(_)) = tx.try_send(c.clone()) {
                return;
            }
        }
    }));
    std::thread::Builder::new()
        .name("vino-fuse-inval".into())
        .spawn(move || {
            // Errors (ENOENT: Linux does not hold the node) need nothing done.
            for change in rx {
                let _ = match change {
                    Change::Attr { ino } => notifier.inval_inode(INodeNo(ino), 0, 0),
                    Change::Entry { dir, name } => notifier.inval_entry(INodeNo(dir), OsStr::from_bytes(&name)),
                };
            }
        })?;
    Ok(Invalidator { kernel, hook })
}
