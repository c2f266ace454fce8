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
