//! What the mount served: requests of each kind (as Linux numbers FUSE's operations) and the
//! time the daemon spent on them, from dispatch until the operation returned. Set against a
//! program's elapsed time, it says how much of it was the daemon's work and how much the round
//! trips and the program itself (`vino top`; `vino bench programs` per step).
//!
//! Counted on the serving thread with two relaxed additions; the clock is read twice per request
//! (a few tens of nanoseconds against a round trip of microseconds).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// FUSE's operation codes (uapi `linux/fuse.h`) up to the highest this table names.
const NAMES: [&str; 53] = [
    "", // 0: none
    "lookup",
    "forget",
    "getattr",
    "setattr",
    "readlink",
    "symlink",
    "", // 7: none
    "mknod",
    "mkdir",
    "unlink",
    "rmdir",
    "rename",
    "link",
    "open",
    "read",
    "write",
    "statfs",
    "release",
    "", // 19: none
    "fsync",
    "setxattr",
    "getxattr",
    "listxattr",
    "removexattr",
    "flush",
    "init",
    "opendir",
    "readdir",
    "releasedir",
    "fsyncdir",
    "getlk",
    "setlk",
    "setlkw",
    "access",
    "create",
    "interrupt",
    "bmap",
    "destroy",
    "ioctl",
    "poll",
    "notify_reply",
    "batch_forget",
    "fallocate",
    "readdirplus",
    "rename2",
    "lseek",
    "copy_file_range",
    "setupmapping",
    "removemapping",
    "syncfs",
    "tmpfile",
    "statx",
];

/// Where operations this table does not name are counted.
const OTHER: usize = NAMES.len();

/// One kind of request: how many were served and the daemon's time on them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// The operation as FUSE names it (`write`, `create`, ...; `other` for codes unknown here).
    pub op: &'static str,
    pub count: u64,
    pub time: Duration,
}

/// The mount's counters, one pair per operation code.
pub(crate) struct Counters {
    count: [AtomicU64; OTHER + 1],
    nanos: [AtomicU64; OTHER + 1],
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            count: std::array::from_fn(|_| AtomicU64::new(0)),
            nanos: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Counters {
    /// Counts one request of operation `opcode` that took `took`.
    pub(crate) fn record(&self, opcode: u32, took: Duration) {
        let i = usize::try_from(opcode)
            .ok()
            .filter(|&i| i < OTHER && !NAMES[i].is_empty())
            .unwrap_or(OTHER);
        self.count[i].fetch_add(1, Relaxed);
        self.nanos[i].fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }

    /// Every kind of request served at least once, most served first.
    pub(crate) fn snapshot(&self) -> Vec<Served> {
        let mut all: Vec<Served> = (0..=OTHER)
            .filter_map(|i| {
                let count = self.count[i].load(Relaxed);
                (count > 0).then(|| Served {
                    op: NAMES.get(i).copied().unwrap_or("other"),
                    count,
                    time: Duration::from_nanos(self.nanos[i].load(Relaxed)),
                })
            })
            .collect();
        all.sort_by(|a, b| b.count.cmp(&a.count).then(a.op.cmp(b.op)));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_counted_under_their_names_and_unknown_ones_as_other() {
        assert_eq!(NAMES[16], "write");
        assert_eq!(NAMES[35], "create");
        assert_eq!(NAMES[47], "copy_file_range");
        assert_eq!(NAMES[52], "statx");
        let c = Counters::default();
        c.record(16, Duration::from_micros(9));
        c.record(16, Duration::from_micros(3));
        c.record(1, Duration::from_micros(2));
        c.record(7, Duration::from_micros(1)); // no operation has this code
        c.record(4096, Duration::from_micros(1));
        let s = c.snapshot();
        assert_eq!(
            s,
            [
                Served {
                    op: "other",
                    count: 2,
                    time: Duration::from_micros(2)
                },
                Served {
                    op: "write",
                    count: 2,
                    time: Duration::from_micros(12)
                },
                Served {
                    op: "lookup",
                    count: 1,
                    time: Duration::from_micros(2)
                },
            ]
        );
    }
}
