//! Helpers shared by the file system's tests.
#![allow(dead_code)]

use std::sync::{Arc, OnceLock};
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::{FileSystem, MkfsOptions, MountOptions, fsck, mkfs};
use vino_graft::Runtime;

/// One graft runtime for the whole test binary.
pub fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(Runtime::default)
}

/// Options for a small file system of several groups.
pub fn small_opts(bpg: u32) -> MkfsOptions {
    MkfsOptions {
        blocks_per_group: bpg,
        inodes_per_group: Some(64),
        ..Default::default()
    }
}

/// A fresh in-memory device with a file system on it.
pub fn fresh(blocks: u64, opts: &MkfsOptions) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(blocks));
    mkfs(&*dev, opts).expect("mkfs");
    dev
}

pub fn mount(dev: &Arc<MemDevice>) -> Arc<FileSystem> {
    mount_with(dev, &MountOptions::default())
}

pub fn mount_with(dev: &Arc<MemDevice>, opts: &MountOptions) -> Arc<FileSystem> {
    let d: Arc<dyn BlockDevice> = dev.clone();
    FileSystem::mount(d, runtime(), opts).expect("mount")
}

/// Asserts that fsck (read-only) finds nothing wrong.
pub fn assert_clean(dev: &dyn BlockDevice, context: &str) {
    let r = fsck(dev, false).unwrap_or_else(|e| panic!("{context}: fsck failed: {e}"));
    assert!(r.is_clean(), "{context}: fsck found problems:\n{r}");
}

/// Deterministic bytes for file contents.
#[allow(unused_imports)]
pub use vino_fs::model::pattern;

pub fn read_all(fs: &FileSystem, ino: u64) -> Vec<u8> {
    let size = fs.stat(ino).expect("stat").size as usize;
    let mut buf = vec![0u8; size];
    let n = fs.read_at(ino, 0, &mut buf).expect("read");
    assert_eq!(n, size);
    buf
}
