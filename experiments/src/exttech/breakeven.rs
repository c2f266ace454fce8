//! Break-even points, computed the thesis' way (section 4.3) from costs
//! measured on this machine.
//!
//! * Hot list: how many searches fit in one page fault (fault time / search
//!   time).  The model application saves a fault about once every 781
//!   calls, so a technology needs a break-even above 781.
//! * MD5: fingerprint time / time to read 1 MB.  Below one the computation
//!   can overlap the I/O.
//! * Logical disk: the per-block overhead must be smaller than what batching
//!   random writes into segments saves per block.

use serde::Serialize;

use super::Variant;
use super::device::DeviceCosts;
use super::workloads::MODEL_CALLS_PER_SAVED_FAULT;

#[derive(Clone, Debug, Serialize)]
pub struct HotListBreakEven {
    pub variant: Variant,
    pub search_ns: f64,
    /// Searches that cost as much as one fault.
    pub searches_per_fault: f64,
    /// `searches_per_fault` exceeds the model's 781 calls per saved fault.
    pub pays_off: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Md5BreakEven {
    pub variant: Variant,
    pub md5_ns: f64,
    /// MD5 time / 1 MB read time.
    pub ratio_to_read: f64,
    pub overlaps_io: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct LogicalDiskBreakEven {
    pub variant: Variant,
    /// Per-block overhead with one invocation per write.
    pub per_block_ns: f64,
    /// Per-block overhead with one invocation for the whole run.
    pub per_block_batched_ns: Option<f64>,
    /// Overhead / random 4 KB write time.
    pub fraction_of_random_write: f64,
    /// Overhead / per-block saving of segment writes.
    pub fraction_of_saving: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct BreakEven {
    /// Page-fault cost used: a random 4 KB read from the device.
    pub fault_ns: f64,
    pub model_calls_per_saved_fault: f64,
    pub hotlist: Vec<HotListBreakEven>,
    /// The largest upcall time at which a hardware-isolated hot-list graft
    /// still breaks even: fault / 781 minus the native search time.
    pub upcall_budget_ns: Option<f64>,
    pub read_1m_ns: f64,
    pub md5: Vec<Md5BreakEven>,
    pub random_write_ns: f64,
    /// Random 4 KB write minus 1/16 of a 64 KB segment write.
    pub segment_saving_per_block_ns: f64,
    pub logdisk: Vec<LogicalDiskBreakEven>,
}

/// Inputs: per variant, the hot-list search time, the MD5 time for 1 MB,
/// and the logical-disk per-block times (per-write calls, single call).
pub fn compute(
    device: &DeviceCosts,
    hot: &[(Variant, f64)],
    md5: &[(Variant, f64)],
    ld: &[(Variant, f64, Option<f64>)],
) -> BreakEven {
    let fault_ns = device.read_4k_random.median_ns;
    let read_1m_ns = device.read_1m.median_ns;
    let random_write_ns = device.write_4k_random.median_ns;
    let segment_saving_per_block_ns = random_write_ns - device.write_64k_segment.median_ns / 16.0;
    let native_search = hot.iter().find(|(v, _)| *v == Variant::Native).map(|(_, t)| *t);
    BreakEven {
        fault_ns,
        model_calls_per_saved_fault: MODEL_CALLS_PER_SAVED_FAULT,
        hotlist: hot
            .iter()
            .map(|&(variant, search_ns)| {
                let searches_per_fault = fault_ns / search_ns;
                HotListBreakEven {
                    variant,
                    search_ns,
                    searches_per_fault,
                    pays_off: searches_per_fault > MODEL_CALLS_PER_SAVED_FAULT,
                }
            })
            .collect(),
        upcall_budget_ns: native_search.map(|n| fault_ns / MODEL_CALLS_PER_SAVED_FAULT - n),
        read_1m_ns,
        md5: md5
            .iter()
            .map(|&(variant, md5_ns)| {
                let r = md5_ns / read_1m_ns;
                Md5BreakEven {
                    variant,
                    md5_ns,
                    ratio_to_read: r,
                    overlaps_io: r < 1.0,
                }
            })
            .collect(),
        random_write_ns,
        segment_saving_per_block_ns,
        logdisk: ld
            .iter()
            .map(|&(variant, per_block_ns, per_block_batched_ns)| LogicalDiskBreakEven {
                variant,
                per_block_ns,
                per_block_batched_ns,
                fraction_of_random_write: per_block_ns / random_write_ns,
                fraction_of_saving: per_block_ns / segment_saving_per_block_ns,
            })
            .collect(),
    }
}
