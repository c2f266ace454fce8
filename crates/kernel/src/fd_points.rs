//! The graftpoints a process reaches through its descriptors, found in its open-file table
//! when named (a [`PointSource`] of its namespace) rather than registered at every open:
//!
//! - `file.compute_ra/<fd>`: the open file's read-ahead, its opener's (a regular file);
//! - `file.block_buddy/<fd>`: the file's block placement, its creator's (a regular file);
//! - `lock.grant/<fd>`: the file's lock granting, its creator's (any file; a privileged
//!   process may graft it as if it were the creator).
//!
//! Registering these three names at each open and forgetting them at each close (a formatted
//! name, a map insertion under the namespace's lock, the file's placement slot made through the
//! file system's lock) took about a third of an open and close of a file, for names nearly no
//! one uses.

use crate::files::{FdTable, OpenFile};
use crate::{Fd, Kernel, Pid};
use parking_lot::Mutex;
use std::sync::{Arc, Weak};
use vino_fs::FileType;
use vino_graft::{ManagedSlot, PointSource};

/// The graftpoints of one process's descriptors.
pub(crate) struct FdPoints {
    pub(crate) files: Arc<Mutex<FdTable>>,
    /// Weak: the kernel holds its processes.
    pub(crate) kernel: Weak<Kernel>,
    pub(crate) pid: Pid,
    pub(crate) privileged: bool,
}

/// The per-descriptor graftpoints, by the name before the `/`.
const POINTS: [&str; 3] = ["file.compute_ra", "file.block_buddy", "lock.grant"];

/// Those of them kept with the file, not the descriptor: a graft there outlives the descriptor.
pub(crate) const FILE_WIDE: [&str; 2] = ["file.block_buddy", "lock.grant"];

/// `<point>/<fd>`, for one of [`POINTS`].
pub(crate) fn parse(name: &str) -> Option<(&str, Fd)> {
    let (point, fd) = name.split_once('/')?;
    if !POINTS.contains(&point) {
        return None;
    }
    Some((point, fd.parse().ok()?))
}

impl FdPoints {
    /// The slot `point` names on `file` (`None` if the file has no such graftpoint).
    fn slot(&self, kernel: &Kernel, point: &str, file: &OpenFile) -> Option<Arc<dyn ManagedSlot>> {
        let regular = file.kind == FileType::Regular;
        match point {
            "file.compute_ra" if regular => Some(file.ra.slot().clone()),
            "file.block_buddy" if regular => Some(kernel.fs.block_buddy(file.ino).ok()?),
            "lock.grant" => {
                let st = kernel.fs.stat(file.ino).ok()?;
                (st.generation == file.generation).then(|| kernel.locks.descriptor_slot(&st, self.pid, self.privileged))
            }
            _ => None,
        }
    }
}

impl PointSource for FdPoints {
    fn find(&self, name: &str) -> Option<Arc<dyn ManagedSlot>> {
        let (point, fd) = parse(name)?;
        // The table's lock is let go before the slot is made (that takes the file system's).
        let file = self.files.lock().get(fd).ok()?;
        let kernel = self.kernel.upgrade()?;
        self.slot(&kernel, point, &file)
    }

    fn all(&self) -> Vec<(String, Arc<dyn ManagedSlot>)> {
        let Some(kernel) = self.kernel.upgrade() else {
            return Vec::new();
        };
        let open: Vec<(Fd, Arc<OpenFile>)> = self.files.lock().entries().map(|(fd, f)| (fd, f.clone())).collect();
        let mut all = Vec::new();
        for (fd, file) in open {
            for point in POINTS {
                if let Some(slot) = self.slot(&kernel, point, &file) {
                    all.push((format!("{point}/{fd}"), slot));
                }
            }
        }
        all
    }
}
