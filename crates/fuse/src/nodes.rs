//! The mount's inode table: the kernel inodes Linux knows of, with how many lookups it holds on
//! each. FUSE node ids are kernel inode numbers and FUSE generations the inodes' generations, so
//! nothing here maps to paths: every request names its file by handle, and the kernel resolves
//! names itself, atomically.
//!
//! Each node holds one kernel reference ([`Kernel::hold_inode`]) from its first lookup to its
//! last forget: a file whose last name goes while Linux still knows it (open, or just looked up)
//! lives on, nameless, as POSIX asks, and is freed when Linux forgets it.

use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::sync::Arc;
use vino_kernel::{At, Errno, Kernel, Stat, SysError, SysResult};

/// The root's inode, in FUSE and in the VINO file system alike.
pub const ROOT: u64 = 1;

#[derive(Debug, Clone, Copy)]
struct Node {
    generation: u32,
    /// Lookups Linux holds (it sends `forget` to drop them).
    lookups: u64,
    /// Lookups Linux still holds on earlier files that had this number (a directory freed while
    /// Linux knew it): a `forget` names only the number, and may come after the new file's
    /// lookup (forgets travel through `/dev/fuse` while other requests may come over the ring),
    /// so those lookups are forgotten first.
    earlier: u64,
}

/// Inodes Linux holds.
pub struct Nodes {
    kernel: Arc<Kernel>,
    map: Mutex<FxHashMap<u64, Node>>,
    root_generation: u32,
}

impl Nodes {
    pub fn new(kernel: Arc<Kernel>) -> SysResult<Nodes> {
        let root_generation = kernel.node_stat(ROOT)?.generation;
        Ok(Nodes {
            kernel,
            map: Mutex::default(),
            root_generation,
        })
    }

    /// The kernel handle of node `ino` (`ESTALE` if Linux names a node it has forgotten).
    pub fn at(&self, ino: u64) -> SysResult<At> {
        if ino == ROOT {
            return Ok(At::Inode {
                ino,
                generation: self.root_generation,
            });
        }
        let generation = self
            .map
            .lock()
            .get(&ino)
            .map(|n| n.generation)
            .ok_or_else(|| SysError::new(Errno::Stale, format!("node {ino} is not known")))?;
        Ok(At::Inode { ino, generation })
    }

    /// Records one more lookup of the file `st` (about to be told to Linux), taking the kernel
    /// reference if the node is new. `ESTALE`: the file went between the caller's lookup and
    /// now; the caller looks again.
    pub fn looked_up(&self, st: &Stat) -> SysResult<()> {
        if st.ino == ROOT {
            return Ok(());
        }
        let mut map = self.map.lock();
        let mut earlier = 0;
        match map.get_mut(&st.ino) {
            Some(n) if n.generation == st.generation => {
                n.lookups += 1;
                return Ok(());
            }
            Some(n) => {
                // The number now holds another file: the old node's reference goes, the new
                // file takes its place, and the old node's lookups wait for their forgets.
                earlier = n.earlier + n.lookups;
                map.remove(&st.ino);
                let _ = self.kernel.release_inode(st.ino);
            }
            None => {}
        }
        self.kernel.hold_inode(st.ino, st.generation)?;
        map.insert(
            st.ino,
            Node {
                generation: st.generation,
                lookups: 1,
                earlier,
            },
        );
        Ok(())
    }

    /// Linux forgets `n` lookups of `ino`; the last one drops the kernel reference.
    pub fn forget(&self, ino: u64, n: u64) {
        let mut map = self.map.lock();
        let Some(node) = map.get_mut(&ino) else { return };
        let of_earlier = n.min(node.earlier);
        node.earlier -= of_earlier;
        node.lookups = node.lookups.saturating_sub(n - of_earlier);
        if node.lookups == 0 {
            map.remove(&ino);
            drop(map);
            if let Err(e) = self.kernel.release_inode(ino) {
                eprintln!("vino-fuse: freeing inode {ino}: {e}");
            }
        }
    }

    /// Nodes Linux holds now (the root not counted).
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// The inode numbers of the nodes Linux holds now, the root first.
    pub fn inodes(&self) -> Vec<u64> {
        let map = self.map.lock();
        std::iter::once(ROOT).chain(map.keys().copied()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every node (the mount is gone).
    pub fn clear(&self) {
        let all: Vec<u64> = self.map.lock().drain().map(|(ino, _)| ino).collect();
        for ino in all {
            let _ = self.kernel.release_inode(ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vino_blockdev::{BlockDevice, MemDevice};
    use vino_kernel::{Credentials, KernelConfig};

    /// A directory freed while Linux still knew it, its number taken by a new directory, and the
    /// old node's forget coming only after the new one's lookup: the new node stays known.
    #[test]
    fn a_late_forget_of_an_earlier_file_leaves_the_numbers_new_file_known() {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096)); // 16 MiB
        vino_kernel::storage::mkfs(&*dev, &vino_kernel::storage::MkfsOptions::default()).unwrap();
        let kernel = Kernel::boot(dev, &KernelConfig::default()).unwrap();
        let nodes = Nodes::new(kernel.clone()).unwrap();
        let p = kernel.spawn(Credentials::root());
        p.mkdir("/old", 0o755).unwrap();
        let old = p.stat("/old").unwrap();
        nodes.looked_up(&old).unwrap();
        nodes.looked_up(&old).unwrap();
        p.rmdir("/old").unwrap();
        // Directories until one takes the old number.
        let new = (0..64)
            .map(|i| {
                let path = format!("/new{i}");
                p.mkdir(&path, 0o755).unwrap();
                p.stat(&path).unwrap()
            })
            .find(|st| st.ino == old.ino)
            .expect("a freed inode number is taken again");
        assert_ne!(new.generation, old.generation);
        nodes.looked_up(&new).unwrap();
        nodes.forget(old.ino, 2); // the old node's, late
        assert!(nodes.at(new.ino).is_ok(), "the new node is still known");
        nodes.forget(new.ino, 1);
        assert!(nodes.at(new.ino).is_err());
        assert!(nodes.is_empty());
        kernel.exit(p.pid());
    }
}
