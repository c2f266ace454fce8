//! What VINO's fuzz targets run. Each target is a function from bytes to a verdict: it returns
//! quietly if the kernel behaved, and panics, saying what went wrong, if it did not. The
//! cargo-fuzz targets in `fuzz/` call these functions under libFuzzer (nightly, with coverage);
//! `tests/corpus.rs` replays every input of `fuzz/corpus/<target>/` through them on stable, so
//! the corpus is a regression suite wherever the tests run.
//!
//! - [`protocol`]: frames a hostile client sends after a well-formed Hello, served by a daemon
//!   on a fresh in-memory kernel: decode, request checks, dispatch and the system calls.
//! - [`image`]: a file system image with mutated metadata: fsck, repair, journal replay and
//!   mount must never panic, and a repaired image must check clean and work.
//! - [`graft`]: a valid module made by `wasm-smith` for a graftpoint, bound by simulated
//!   processes while the simulator's workload runs and checks every answer against its model.
//! - [`frames`]: raw IPv4 packets on the network stack's link, beside a listener, a
//!   connection and a UDP socket: no panic, and the stack still carries a connection after.
//! - [`program`]: a VINO process confined to one directory makes WASI calls with hostile
//!   descriptors, paths and pointers; nothing outside the directory may change.
//! - [`recording`]: a graft recording file (`vino graft replay`): read and replayed, bounded,
//!   never a panic.

pub mod frames;
pub mod graft;
pub mod image;
pub mod program;
pub mod protocol;
pub mod recording;
pub mod seeds;

/// A fuzz target: returns if all went well, panics if not.
pub type Target = fn(&[u8]);

/// The fuzz targets, by name (the names of `fuzz/fuzz_targets/*.rs` and of their corpora).
pub const TARGETS: &[(&str, Target)] = &[
    ("protocol", protocol::run),
    ("image", image::run),
    ("graft", graft::run),
    ("program", program::run),
    ("frames", frames::run),
    ("recording", recording::run),
];

/// A fresh file system on an in-memory disk of `blocks` blocks, in groups of 512 blocks and
/// 64 inodes (small, so that a few files reach every structure).
fn small_disk(blocks: u64, fs_id: u64) -> std::sync::Arc<vino_blockdev::MemDevice> {
    let dev = std::sync::Arc::new(vino_blockdev::MemDevice::new(blocks));
    let opts = vino_fs::MkfsOptions {
        blocks_per_group: 512,
        inodes_per_group: Some(64),
        fs_id: Some(fs_id),
        ..vino_fs::MkfsOptions::default()
    };
    vino_fs::mkfs(&*dev, &opts).expect("mkfs on an in-memory disk");
    dev
}

/// `base` with no thread of the kernel's own doing work: the device served inline, the I/O
/// scheduler by its callers, write-back only when asked, event grafts when the kernel quiesces.
/// One input then does the same thing every time.
fn stepped(base: vino_kernel::KernelConfig) -> vino_kernel::KernelConfig {
    vino_kernel::KernelConfig {
        writeback_every: None,
        io_backend: vino_blockdev::BackendChoice::Inline,
        dispatch: vino_kernel::Dispatch::Caller,
        event_dispatch: vino_kernel::Dispatch::Caller,
        ..base
    }
}

/// Writing to a socket whose peer has gone must be an error, not the end of the process
/// (libFuzzer's `main` leaves SIGPIPE as it found it, unlike Rust's).
fn ignore_sigpipe() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: setting a signal's disposition to SIG_IGN has no preconditions.
    ONCE.call_once(|| unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    });
}
