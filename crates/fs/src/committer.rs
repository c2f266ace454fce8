//! The background committer (jbd2's kjournald in ext4): a thread that commits the running
//! journal transaction once it passes the commit threshold, so that the operation that crossed
//! it goes on instead of committing itself, and at least every `interval` while anything is
//! uncommitted, so that a crash loses at most that much work that nobody fsynced (ext4's
//! `commit=` mount option, 5 s by default).
//!
//! Only an operation that finds the transaction at the hard threshold (half the journal) still
//! commits inline: that is the back-pressure that keeps the journal from overflowing when the
//! committer falls behind. Without a committer ([`crate::MountOptions::commit_interval`] `None`)
//! every commit is inline, in a deterministic order (tests and the simulator).

use crate::filesystem::FileSystem;
use parking_lot::{Condvar, Mutex};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// What an operation and the committer's thread share.
pub(crate) struct Committer {
    wake: Mutex<Signal>,
    cv: Condvar,
    interval: Duration,
}

#[derive(Default)]
struct Signal {
    /// An operation passed the threshold since the last commit.
    wanted: bool,
    /// The file system is gone or unmounted: the thread ends.
    stop: bool,
}

impl Committer {
    pub(crate) fn new(interval: Duration) -> Arc<Committer> {
        Arc::new(Committer {
            wake: Mutex::new(Signal::default()),
            cv: Condvar::new(),
            interval,
        })
    }

    /// Starts the thread for `fs`. It holds the file system only while it commits, so dropping
    /// the last other reference (or [`Committer::stop`]) ends it.
    pub(crate) fn start(self: &Arc<Self>, fs: Weak<FileSystem>) -> std::io::Result<()> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("vino-fs-commit".into())
            .spawn(move || me.run(fs))
            .map(drop)
    }

    /// Asks for a commit soon (an operation passed the soft threshold).
    pub(crate) fn wake(&self) {
        let mut s = self.wake.lock();
        if !s.wanted {
            s.wanted = true;
            self.cv.notify_one();
        }
    }

    pub(crate) fn stop(&self) {
        self.wake.lock().stop = true;
        self.cv.notify_one();
    }

    fn run(&self, fs: Weak<FileSystem>) {
        loop {
            let timed_out = {
                let mut s = self.wake.lock();
                let timed_out = !s.wanted && !s.stop && self.cv.wait_for(&mut s, self.interval).timed_out();
                if s.stop {
                    return;
                }
                std::mem::take(&mut s.wanted);
                timed_out
            };
            let Some(fs) = fs.upgrade() else { return };
            // Woken by an operation: commit only if the transaction is still past the threshold
            // (operations that passed it while the last commit ran asked again; what they
            // added since waits for the threshold or the timer, not for a commit of its own).
            if !fs.commit_in_background(!timed_out) {
                return;
            }
        }
    }
}
