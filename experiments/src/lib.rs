//! VINO's experiments: each a module here and a program `vino-bench-<name>` (`src/bin/`), which
//! `vino bench <name>` runs.
//!
//! | program | module | experiment |
//! | --- | --- | --- |
//! | `vino-bench-core` | [`graftcost`], [`exttech`] | E1 the core's costs; E2/E3 extension technologies |
//! | `vino-bench-wisconsin` | [`e4_wisconsin`] | E4 Wisconsin query 6: look-ahead eviction, read-ahead |
//! | `vino-bench-events` | [`e5_events`] | E5 unlink events against polling |
//! | `vino-bench-layout` | [`e6_layout`] | E6 file layout: FFS placement against NoSwitch |
//! | `vino-bench-gunzip` | [`e7_gunzip`] | E7 gunzip under read-ahead policies |
//! | `vino-bench-locks` | [`e8_locks`] | E8 byte-range lock granting |
//! | `vino-bench-linux` | [`e9_linux`] | E9 the Wisconsin query on Linux's own stack |
//! | `vino-bench-syscalls` | [`e10_syscalls`] | E10 a system call from a VINO process, through vinod, FUSE, Linux |
//! | `vino-bench-daemon` | [`daemon`] | what serving the kernel from vinod costs |
//! | `vino-bench-soak` | [`daemon`] | many clients against one daemon, nothing lost or leaked |
//! | `vino-bench-isolation` | [`isolation`] | one user's latency alone and under another user's attacks |
//! | `vino-bench-programs` | [`programs`] | unmodified programs on the VINO mount against ext4 |
//! | `vino-bench-miss` | [`miss`] | a cold random 4 KiB read, layer by layer |
//! | `vino-bench-native` | [`native`] | real programs as VINO processes against Linux and wasmtime-wasi |
//! | `vino-bench-procs` | [`procs`] | spawn, pipe and ping-pong between VINO processes against Linux |
//! | `vino-bench-vm` | [`vm`] | page-fault costs: first touch, userfaultfd, swap-in, a mapped file |
//! | `vino-bench-vmlat` | [`vm_latency`] | another user's fault latency beside hostile neighbours |
//! | `vino-bench-vmjoin` | [`vm_join`] | E4's join in a program's own memory: look-ahead graft, default, Linux |
//! | `vino-bench-streams` | [`streams`] | stream grafts: each example codec in Wasm against the same C native |
//! | `vino-bench-execverify` | [`execverify`] | `exec.verify`'s SHA-256 allow-list graft against `sha256sum` |
//! | `vino-bench-names` | [`names`] | what a bound `dir.access` or `dir.lookup` graft adds to a walk step and an open |
//! | `vino-bench-congestion` | [`congestion`] | Reno and CUBIC as `net.congestion` grafts against the built-ins at 1% loss |
//! | `vino-bench-serve` | [`serve`] | a server in the kernel (`http_server.c`) against the same server as a VINO process |
//! | `vino-bench-layers` | [`layers`] | stream layers on a socket (LZ4, ChaCha20-Poly1305) against the plain connection |
//! | `vino-bench-net` | [`net`], [`congestion`], [`serve`], [`pick`] | the network in one run: the stack against Linux's, and every network graft's comparison |
//! | `vino-bench-rollback` | [`rollback`] | rolling a graft's memory back on abort: its cost per call, word and record |
//!
//! Timing, tables, JSON and plots are `vino-measure` (`experiments/measure`); what the programs
//! share (options, progress, output) is [`front`].

pub mod congestion;
pub mod daemon;
pub mod e10_syscalls;
pub mod e11_sched;
pub mod e4_wisconsin;
pub mod e5_events;
pub mod e6_layout;
pub mod e7_gunzip;
pub mod e8_locks;
pub mod e9_linux;
pub mod execverify;
pub mod exttech;
pub mod front;
pub mod graftcost;
pub mod isolation;
pub mod layers;
pub mod miss;
pub mod names;
pub mod native;
pub mod net;
pub mod pick;
pub mod procs;
pub mod programs;
pub mod progress;
pub mod rollback;
pub mod serve;
pub mod streams;
pub mod vm;
pub mod vm_join;
pub mod vm_latency;
pub mod wisconsin;

/// A kernel on a fresh in-memory disk of `blocks` blocks, booted with `config`: what most
/// experiments measure on, with no device's noise in it.
pub fn mem_kernel(
    blocks: u64,
    config: &vino_kernel::KernelConfig,
) -> anyhow::Result<std::sync::Arc<vino_kernel::Kernel>> {
    use anyhow::Context;
    let dev = std::sync::Arc::new(vino_blockdev::MemDevice::new(blocks));
    vino_fs::mkfs(&*dev, &vino_fs::MkfsOptions::default()).context("mkfs")?;
    Ok(vino_kernel::Kernel::boot(
        dev as std::sync::Arc<dyn vino_blockdev::BlockDevice>,
        config,
    )?)
}
