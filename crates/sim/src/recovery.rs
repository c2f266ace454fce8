//! The second power cut: recovery (journal replay, the orphan list) writes to the disk too, and
//! the power may go again while it does. A probe mount of the crash image counts the writes
//! recovery makes; a second mount of the same image loses power at one of them (chosen by the
//! seed). The image that cut leaves must then recover like any other.

use crate::SimDevice;
use std::sync::Arc;
use vino_blockdev::rng::SplitMix64;
use vino_blockdev::{BlockDevice, CrashOptions, MemDevice};
use vino_kernel::{Kernel, KernelConfig};

/// Writes the mount of `image` makes before it is up (replay, orphans).
fn recovery_writes(image: &[u8], config: &KernelConfig) -> Result<u64, String> {
    let mem = MemDevice::from_image(image.to_vec()).map_err(|e| e.to_string())?;
    let dev = Arc::new(SimDevice::new(mem));
    let kernel = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, config)
        .map_err(|e| format!("probe mount after the crash: {e}"))?;
    let writes = dev.writes();
    drop(kernel);
    Ok(writes)
}

/// The image a power cut during the recovery mount of `image` leaves, or `None` if recovery
/// writes nothing (a clean image).
pub(crate) fn cut_during_recovery(
    seed: u64,
    image: &[u8],
    config: &KernelConfig,
) -> Result<Option<(u64, Vec<u8>)>, String> {
    let writes = recovery_writes(image, config)?;
    if writes == 0 {
        return Ok(None);
    }
    // A generator of its own: the first cut's choices must not depend on this one.
    let mut r = SplitMix64::new(seed ^ 0x2ec0_7e2e_d0b1_e5ed);
    let trip = 1 + r.below(writes);
    let options = CrashOptions {
        survive: r.next_f64() * 0.8,
        tear: r.next_f64() * 0.3,
        sector_bytes: 512,
    };
    let mem = MemDevice::from_image(image.to_vec()).map_err(|e| e.to_string())?;
    let dev = Arc::new(SimDevice::new(mem));
    dev.arm(trip, r.next_u64(), options);
    // The mount fails or not as the cut falls: either way the disk is what counts.
    drop(Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, config));
    let cut = dev
        .crashed()
        .ok_or_else(|| format!("recovery made {writes} writes, but not {trip} the second time"))?;
    Ok(Some((trip, cut)))
}
