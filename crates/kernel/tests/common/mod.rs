//! What the kernel's tests share.

use std::sync::Arc;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::{MkfsOptions, mkfs};
use vino_kernel::account::LimitsConfig;
use vino_kernel::{Kernel, KernelConfig};

/// A kernel on a fresh in-memory disk of `blocks` blocks (groups of 2048), with a 64-page
/// cache, no timed write-back and `limits`.
pub fn small_kernel(blocks: u64, limits: LimitsConfig) -> Arc<Kernel> {
    let dev = Arc::new(MemDevice::new(blocks));
    mkfs(
        &*dev,
        &MkfsOptions {
            blocks_per_group: 2048,
            ..MkfsOptions::default()
        },
    )
    .unwrap();
    let config = KernelConfig {
        cache_frames: 64,
        writeback_every: None,
        limits,
        ..KernelConfig::default()
    };
    Kernel::boot(dev as Arc<dyn BlockDevice>, &config).unwrap()
}
