//! `vino bench <experiment> [ARGS]...`: runs the experiment's own program, `vino-bench-<experiment>`
//! (`vm-latency`'s is `vino-bench-vmlat`; the `vino-experiments` crate, `experiments/`), found in
//! the directory of this program, with the arguments as given. The experiments are not part of
//! `vino`: build them with `cargo build --release -p vino-experiments` (or `cargo build --release
//! --workspace`).

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

/// The experiment's own options, passed to it as they are (`vino bench <experiment> --help`
/// shows them).
#[derive(Args)]
pub struct Pass {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
    args: Vec<OsString>,
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// The safe-extension core: E1 transactions, null-graft invocation, graft loading, and the
    /// extension-technology study (E2/E3: native, Wasm, interpreter, separate process).
    #[command(disable_help_flag = true)]
    Core(Pass),
    /// E4: Wisconsin query 6 with look-ahead eviction and read-ahead grafts, protected and
    /// unprotected, on the plain device and the 1990s disk model (thesis 7.3).
    #[command(visible_alias = "e4", disable_help_flag = true)]
    Wisconsin(Pass),
    /// E6: file layout, default FFS placement vs the NoSwitch graft vs NoSwitch native (thesis 7.5).
    #[command(visible_alias = "e6", disable_help_flag = true)]
    Layout(Pass),
    /// E7: gunzip of a file stored in VINO under read-ahead of 0-8 blocks and the default (TR 4.3).
    #[command(visible_alias = "e7", disable_help_flag = true)]
    Gunzip(Pass),
    /// E5: file unlink events vs polling with stat; asynchronous and synchronous bookkeeping
    /// grafts, protected, unprotected and at user level (thesis 7.4).
    #[command(visible_alias = "e5", disable_help_flag = true)]
    Events(Pass),
    /// E8: byte-range lock granting, FIFO/reader priority vs strict FIFO (native and graft), four
    /// processes under a varying write share (Seltzer et al. 1995, 4.4).
    #[command(visible_alias = "e8", disable_help_flag = true)]
    Locks(Pass),
    /// E9: the Wisconsin query on Linux's own stack (ext4 on a loop device, cgroup-limited page
    /// cache, fadvise hints), where the machine allows it.
    #[command(visible_alias = "e9", disable_help_flag = true)]
    Linux(Pass),
    /// E10: a system call from a VINO process (null call, cached 4 KiB read) against the same
    /// through vinod's client library, through the FUSE mount, and on Linux.
    #[command(visible_alias = "e10", disable_help_flag = true)]
    Syscalls(Pass),
    /// What serving the kernel from vinod costs: null call round trip, cached 4 KiB and 64 KiB
    /// reads over the socket and through shared memory, against calls in the same process.
    #[command(disable_help_flag = true)]
    Daemon(Pass),
    /// Many clients against one daemon for a while; checks no record lost and nothing leaked.
    #[command(disable_help_flag = true)]
    Soak(Pass),
    /// Whether one user can hurt another: a victim user's latency alone and under each attack by
    /// another user (spinning grafts, control calls, event floods, memory, compiles, connections,
    /// the disk).
    #[command(disable_help_flag = true)]
    Isolation(Pass),
    /// Unmodified programs (tar, cp, du, find, sha256sum, diff, git, SQLite, dd, random reads) on
    /// the VINO mount against ext4 on a loop device with the same cache memory.
    #[command(disable_help_flag = true)]
    Programs(Pass),
    /// E11: VINO's CPU scheduler: programs' CPU by their users' tickets, a client donating its
    /// turns to a server, the cost of a thread switch and of a `sched.pick_next` decision.
    #[command(visible_alias = "e11", disable_help_flag = true)]
    Sched(Pass),
    /// A cold random 4 KiB read, layer by layer: raw O_DIRECT pread, VINO's device, its queue,
    /// the I/O scheduler, a page-cache miss.
    #[command(disable_help_flag = true)]
    Miss(Pass),
    /// Real programs (SQLite, gzip, bzip2) as VINO processes against the same C sources compiled
    /// for Linux and the same .wasm on stock wasmtime-wasi, on the same inputs.
    #[command(disable_help_flag = true)]
    Native(Pass),
    /// VINO processes against Linux processes running the same C: posix_spawn + waitpid of a
    /// trivial child, pipe throughput to a child, a one-byte ping-pong over two pipes.
    #[command(disable_help_flag = true)]
    Procs(Pass),
    /// What a page fault costs on Linux, against the userfaultfd round trip (the floor for a
    /// pager in user space): first touch, swap-in from a swap file in a memory cgroup, a mapped
    /// ext4 file cold and hot.
    #[command(disable_help_flag = true)]
    Vm(Pass),
    /// Another user's page-fault latency (first touch and swap-in, p50 and p99) alone and beside
    /// hostile neighbours: a hog swapping far over its limit, `vm.fault_around` grafts asking for
    /// the most and looping.
    #[command(disable_help_flag = true)]
    VmLatency(Pass),
    /// E4's join (thesis 7.3.3) with its relations in a VINO process's own memory: the look-ahead
    /// eviction graft against the pager's default policy, and against Linux with the same memory
    /// (a memory cgroup with a swap file).
    #[command(disable_help_flag = true)]
    VmJoin(Pass),
    /// Stream grafts (Small 1998, 4.2): each example codec (LZ4, ChaCha20-Poly1305, CRC32C)
    /// encoding and decoding 64 KiB chunks in Wasm, protected, against the same C native.
    #[command(disable_help_flag = true)]
    Streams(Pass),
    /// Grafts over names (Small 1998, 4.2): what a bound `dir.access` or `dir.lookup` graft adds
    /// to a walk step and to an open, against nothing bound.
    #[command(disable_help_flag = true)]
    Names(Pass),
    /// Executable fingerprints (Small 1998, 4.2): `exec.verify`'s SHA-256 allow-list graft
    /// verifying a real module, against `sha256sum` on the same bytes.
    #[command(disable_help_flag = true)]
    Execverify(Pass),
    /// Memory rollback: what the undo log of a graft's own writes costs, rollback on against
    /// off (a null graft, grafts storing 1-1000 words, failed calls undoing 0-1000 records, E3's
    /// hot list as built and instrumented).
    #[command(disable_help_flag = true)]
    Rollback(Pass),
    /// The network in one run (root), or the parts `--only` names: VINO's TCP/IP stack against
    /// Linux's over a TUN link (stack), Reno and CUBIC as grafts (congestion), a server in the
    /// kernel against a VINO process and nginx (serve), users sharing a rated link under
    /// `net.pick_packet` (pick).
    #[command(disable_help_flag = true)]
    Net(Pass),
    /// Congestion control as a graft: Reno and CUBIC as `net.congestion` grafts against the
    /// stack's built-ins over a seeded lossy wire (goodput in simulated time, a call's cost).
    #[command(disable_help_flag = true)]
    Congestion(Pass),
    /// A server in the kernel (Small 1998, 3.5 and 4.2): the `http_server.c` graft against the
    /// same server as a VINO process, requests per second and latency for 4 KiB and 1 MiB files.
    #[command(disable_help_flag = true)]
    Serve(Pass),
    /// Stream layers on a socket (Small 1998's protocol objects): throughput through LZ4 and
    /// ChaCha20-Poly1305 layers, and both, beside the plain connection.
    #[command(disable_help_flag = true)]
    Layers(Pass),
    /// Trying and replaying grafts on E4's query: the look-ahead graft in shadow beside LRU
    /// (would-be misses against its misses when bound, the shadow's cost), and the bound graft
    /// recorded and replayed offline (bytes per invocation, replay rate, exactness).
    #[command(disable_help_flag = true)]
    Try(Pass),
    /// Rewrites the tables of the result pages (docs/results/*.md) from results/*.json;
    /// `--check` only says which pages differ (the program vino-bench-report, of vino-measure).
    #[command(disable_help_flag = true)]
    Report(Pass),
}

impl BenchCommand {
    /// The experiment's name (its program is `vino-bench-<name>`) and its arguments.
    fn parts(self) -> (&'static str, Vec<OsString>) {
        match self {
            BenchCommand::Core(p) => ("core", p.args),
            BenchCommand::Wisconsin(p) => ("wisconsin", p.args),
            BenchCommand::Layout(p) => ("layout", p.args),
            BenchCommand::Gunzip(p) => ("gunzip", p.args),
            BenchCommand::Events(p) => ("events", p.args),
            BenchCommand::Locks(p) => ("locks", p.args),
            BenchCommand::Linux(p) => ("linux", p.args),
            BenchCommand::Syscalls(p) => ("syscalls", p.args),
            BenchCommand::Daemon(p) => ("daemon", p.args),
            BenchCommand::Soak(p) => ("soak", p.args),
            BenchCommand::Isolation(p) => ("isolation", p.args),
            BenchCommand::Programs(p) => ("programs", p.args),
            BenchCommand::Miss(p) => ("miss", p.args),
            BenchCommand::Sched(p) => ("sched", p.args),
            BenchCommand::Native(p) => ("native", p.args),
            BenchCommand::Procs(p) => ("procs", p.args),
            BenchCommand::Vm(p) => ("vm", p.args),
            BenchCommand::VmLatency(p) => ("vmlat", p.args),
            BenchCommand::VmJoin(p) => ("vmjoin", p.args),
            BenchCommand::Streams(p) => ("streams", p.args),
            BenchCommand::Names(p) => ("names", p.args),
            BenchCommand::Execverify(p) => ("execverify", p.args),
            BenchCommand::Rollback(p) => ("rollback", p.args),
            BenchCommand::Net(p) => ("net", p.args),
            BenchCommand::Congestion(p) => ("congestion", p.args),
            BenchCommand::Serve(p) => ("serve", p.args),
            BenchCommand::Layers(p) => ("layers", p.args),
            BenchCommand::Try(p) => ("try", p.args),
            BenchCommand::Report(p) => ("report", p.args),
        }
    }
}

/// The program of experiment `name`, `vino-bench-<name>`, in the directory of this program, if
/// it is there; otherwise an error that says how to build it.
pub fn program(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("finding the vino program")?;
    let dir = exe.parent().context("the vino program has no directory")?;
    let program = dir.join(format!("vino-bench-{name}"));
    if !program.is_file() {
        let package = if name == "report" {
            "vino-measure"
        } else {
            "vino-experiments"
        };
        bail!(
            "the experiment `{name}` is the program vino-bench-{name}, which is not built next to vino \
             (in {}): build it with `cargo build --release -p {package}` (or `cargo build --release \
             --workspace`)",
            dir.display()
        );
    }
    Ok(program)
}

/// Runs the experiment's program in place of this one (same arguments after the experiment's
/// name, same standard streams; its exit status is `vino bench`'s).
pub fn run(cmd: BenchCommand) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let (name, args) = cmd.parts();
    let program = program(name)?;
    let err = std::process::Command::new(&program).args(args).exec();
    Err(err).with_context(|| format!("running {}", program.display()))
}
