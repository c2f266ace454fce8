//! A deterministic simulator of the whole kernel.
//!
//! One seed decides everything: the kernel's shape (cache frames, queue depth, journal commit
//! size), the processes (root and two users) and the system calls they make, the grafts they
//! bind (well-behaved and hostile, at every graftpoint but the event handlers), when the
//! write-back worker runs and how far the clock moves. The kernel runs with no thread of its
//! own on the I/O path: the device queue is inline, the I/O scheduler is dispatched by its
//! callers, write-back is stepped by the simulation, time is a [`ManualClock`] and grafts run
//! in fuel mode (their budgets count instructions, not time). Every device operation then
//! happens in an order fixed by the seed, which [`SimDevice`] hashes into a trace.
//!
//! A seed runs twice. The first run goes to the end, checking every answer against the model
//! (`vino_fs::model`), every read against the bytes the model holds, the kernel's invariants
//! after every step (`Kernel::check_invariants`, in both runs), and at the end the whole
//! tree, that nothing leaked (references, parked files, account charges) and a clean fsck. It
//! counts the device writes. The second run cuts the power at one of those writes (chosen by
//! the seed; writes since the last flush survive, tear or vanish), then the crash image must
//! pass fsck, mount (replaying the journal) and hold what the workload was promised: a tree
//! the workload passed through since its last durable point (sync or fsync), and every file
//! durable then and not changed since, byte for byte. Where recovery itself writes (journal
//! replay, the orphan list), the power goes a second time during it (see `recovery`), and the
//! same promises must hold after the final mount. A failure names its seed; the same seed fails
//! the same way again (the traces are compared).
//!
//! With `streams`, files made in the directory `/s` (bound to a codec graft before the workload) are stream
//! files: write-back and fsync store their 64 KiB chunks through the codec, out of place, and
//! a read after a drop of clean pages decodes them; the model knows them as regular files.
//!
//! The processes also spawn children, signal them, wait for them and pass bytes through pipes
//! (see `family`), each answer checked against a model of the process tree and the pipes.
//!
//! The kernel's network stack runs on the simulation's clock too, with no thread of its own:
//! its host link is a wire to a second simulated host, and the processes stream bytes to it
//! and to each other over links with seeded faults, every byte checked (see `network`).
//!
//! The clock moves only when the seed says: besides long pauses, steps block a thread in a lock
//! wait, a timer or an event wait and move the clock past its deadline (see `timed`); the
//! report counts the deadlines reached.

#![forbid(unsafe_code)]

pub mod device;
pub mod family;
pub mod grafts;
pub mod memory;
pub mod network;
mod recovery;
mod shadows;
mod timed;

pub use device::SimDevice;

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;
use vino_blockdev::rng::SplitMix64;
use vino_blockdev::{BackendChoice, BlockDevice, CrashOptions, ManualClock, MemDevice, SharedClock};
use vino_fs::model::{Model, Node, Op, Promises, data, run_model};
use vino_fs::{FileType, MkfsOptions, MountOptions, fsck, mkfs};
use vino_kernel::graftpoints::Grafter;
use vino_kernel::{Credentials, Errno, FallocMode, Fd, Kernel, KernelConfig, OpenFlags, Process, Resource, SysError};

/// Blocks of the simulated disk (8 MiB: room for the workload, which makes at most a dozen
/// files of up to 90 KB, and small enough to copy at every power cut).
const DISK_BLOCKS: u64 = 2048;
/// Descriptors a process keeps open at once between steps.
const HELD_MAX: usize = 3;

/// What to simulate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimOptions {
    /// Steps of the workload.
    pub steps: usize,
    /// Run the second pass, with a power cut.
    pub crash: bool,
    /// Ordered mode (a file's data reaches the disk before a commit makes its new size or
    /// blocks durable). Off only to show that the simulator finds the hole it leaves.
    pub ordered: bool,
    /// Roll a failed graft call's writes to its own memory back
    /// (`RuntimeConfig::roll_back_memory`). Off only to show that the simulator finds them.
    pub roll_back_memory: bool,
    /// One module every graft step binds, instead of the simulator's own (the graft fuzzer
    /// runs the workload around each module it makes). The first steps bind it at once.
    pub graft: Option<CustomGraft>,
    /// Make the stream directory `/s` (see the crate documentation) and paths in it. Off by
    /// default while stream files are not ordered: another file's fsync makes a stream file's
    /// new size durable before its chunks, which a power cut then shows as lost bytes.
    pub streams: bool,
    /// Where to write the recordings of the seed's grafts (`vino graft replay` reads them) when
    /// it fails: each recorded graft's recording and module (`vino-sim --record-dir`).
    pub record_dir: Option<std::path::PathBuf>,
}

/// A module of the caller's, bound at one graftpoint of [`grafts::points`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomGraft {
    pub point: &'static str,
    pub wasm: Arc<Vec<u8>>,
}

impl SimOptions {
    /// The `vino-sim` flags that give these options.
    pub fn flags(&self) -> String {
        let mut f = String::new();
        if self.steps != SimOptions::default().steps {
            f += &format!(" --steps {}", self.steps);
        }
        if !self.crash {
            f += " --no-crash";
        }
        if !self.ordered {
            f += " --unordered";
        }
        if !self.roll_back_memory {
            f += " --no-memory-rollback";
        }
        if self.streams {
            f += " --streams";
        }
        if let Some(g) = &self.graft {
            f += &format!(" (and the caller's graft at {})", g.point);
        }
        f
    }
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            steps: 400,
            crash: true,
            ordered: true,
            roll_back_memory: true,
            graft: None,
            streams: false,
            record_dir: None,
        }
    }
}

/// What one seed did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    pub seed: u64,
    /// Steps run to the end (first pass).
    pub steps: usize,
    /// Device writes of the first pass.
    pub writes: u64,
    /// Hash of every device operation of the first pass.
    pub trace: u64,
    /// The write at which the second pass cut the power, and the step it was in.
    pub cut_at_write: Option<u64>,
    pub cut_in_step: Option<usize>,
    /// Grafts loaded, and invocations that failed (the default decided).
    pub grafts_loaded: u64,
    pub graft_failures: u64,
    /// Dirty pages the write-back policy wrote in its rounds (first pass).
    pub written_back: u64,
    /// Events handed to event grafts, whether they ran to the end or aborted (first pass).
    pub event_deliveries: u64,
    /// Deadlines reached on the simulation's clock (first pass): lock waits that timed out,
    /// timer firings, event waits that ended empty.
    pub lock_deadline_expiries: u64,
    pub timer_firings: u64,
    pub event_wait_timeouts: u64,
    /// Children spawned, signals delivered to them, bytes through pipes (first pass).
    pub children_spawned: u64,
    pub signals_sent: u64,
    pub piped_bytes: u64,
    /// Pages of program memory touched (first pass).
    pub memory_touches: u64,
    /// Grafts' recordings (each graft's calls while it was bound) replayed offline and found
    /// exactly as recorded (first pass).
    pub replayed: u64,
    /// Candidates tried in shadow beside them and stopped with reports that held together
    /// (first pass; see `shadows`).
    pub tried: u64,
    /// TCP streams that finished whole, bytes checked where they came out of a socket, and
    /// packets the links' faults lost, copied or reordered (first pass).
    pub net_streams: u64,
    /// Of those, streams through a stream layer both ends pushed.
    pub net_layered: u64,
    /// Decisions `net.pick_packet` grafts made on the kernel's rated way out.
    pub net_picks: u64,
    /// Exchanges with servers in the kernel (`event.net.packet`) that ended as their grafts'
    /// behaviour says: an echo whole, silence, or the connection closed.
    pub net_served: u64,
    pub net_bytes: u64,
    pub net_faults: u64,
    /// Hash of every packet on the wire between the kernel and its peer (first pass).
    pub net_trace: u64,
    /// The write of the recovery mount at which the power went a second time.
    pub second_cut_at_write: Option<u64>,
}

/// A seed that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub seed: u64,
    pub what: String,
    /// The options that differ from the defaults, as `vino-sim` flags.
    pub flags: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {}: {}\n  rerun: cargo run --release -p vino-sim -- --seed {}{}",
            self.seed, self.what, self.seed, self.flags
        )
    }
}

impl std::error::Error for Failure {}

type Check<T = ()> = Result<T, String>;

/// Graftpoints (name prefixes) called on threads whose timing is the host's, not the seed's
/// (see `Sim::graft_failures`).
const PAGER_CALLED: [&str; 3] = ["sched.", "vas.pick_victim", "vm.fault_around"];

/// A user's own `net.pick_packet` binding, as its processes name it.
const PICK_USER: &str = "net.pick_packet/user";

/// Runs one seed (see the crate documentation). A panic anywhere in the kernel is a failure
/// of the seed, not of the caller.
pub fn run(seed: u64, opts: &SimOptions) -> Result<Report, Failure> {
    let fail = |what: String| Failure {
        seed,
        what,
        flags: opts.flags(),
    };
    // A stream chunk's nonce lands on the disk: drawn from the seed, the disk's bytes repeat.
    vino_stream::seed_nonces(Some(seed));
    let caught = catch_unwind(AssertUnwindSafe(|| run_passes(seed, opts)));
    vino_stream::seed_nonces(None);
    match caught {
        Ok(r) => r.map_err(fail),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Err(fail(format!("panicked: {msg}")))
        }
    }
}

fn run_passes(seed: u64, opts: &SimOptions) -> Check<Report> {
    let mut clean = Sim::new(seed, opts, None)?;
    if let Err(e) = clean.run_to_end() {
        clean.keep_recordings();
        return Err(e);
    }
    run_after_first_pass(seed, opts, clean)
}

/// The rest of a seed once its first pass ran to the end: the end checks, then the power cut.
/// A failure writes the first pass's recordings ([`SimOptions::record_dir`]).
fn run_after_first_pass(seed: u64, opts: &SimOptions, mut clean: Sim) -> Check<Report> {
    let mut report = Report {
        seed,
        steps: opts.steps,
        writes: clean.workload_writes(),
        trace: clean.dev.trace(),
        cut_at_write: None,
        cut_in_step: None,
        grafts_loaded: clean.grafts_loaded,
        written_back: clean.written_back,
        event_deliveries: clean.event_deliveries(),
        graft_failures: clean.graft_failures(),
        lock_deadline_expiries: clean.reached.lock_deadline_expiries,
        timer_firings: clean.reached.timer_firings,
        event_wait_timeouts: clean.reached.event_wait_timeouts,
        children_spawned: clean.family.spawned,
        signals_sent: clean.family.signalled,
        piped_bytes: clean.family.piped_bytes,
        memory_touches: clean.memories.touched,
        replayed: 0,
        tried: 0,
        net_streams: 0,
        net_layered: 0,
        net_picks: 0,
        net_served: 0,
        net_bytes: 0,
        net_faults: 0,
        net_trace: 0,
        second_cut_at_write: None,
    };
    clean.finish_network()?;
    report.net_streams = clean.network.streams_done;
    report.net_layered = clean.network.layered_done;
    report.net_picks = clean.network.picks(&clean.kernel);
    report.net_served = clean.network.served;
    report.net_bytes = clean.network.bytes_checked;
    report.net_faults = clean.network.faults(&clean.kernel);
    report.net_trace = clean.network.trace();
    report.replayed = clean.replay_all();
    report.tried = clean.stop_shadows()?;
    let taken = std::mem::take(&mut clean.taken);
    let record_dir = opts.record_dir.clone();
    let rest = (|| {
        clean.finish()?;
        if !opts.crash || report.writes == 0 {
            return Ok(report);
        }
        let trip = 1 + SplitMix64::new(seed ^ 0xc0ff_ee00_5eed).below(report.writes);
        let mut cut = Sim::new(seed, opts, Some(trip))?;
        let step = cut.run_to_cut()?;
        report.cut_at_write = Some(trip);
        report.cut_in_step = step;
        report.second_cut_at_write = cut.recover_and_check(seed)?;
        Ok(report)
    })();
    if rest.is_err()
        && let Some(dir) = &record_dir
    {
        for (recording, wasm) in &taken {
            keep_recording(dir, seed, recording, wasm);
        }
    }
    rest
}

/// Writes a failing seed's `recording` and its module into `dir`, for `vino graft replay`.
fn keep_recording(dir: &std::path::Path, seed: u64, recording: &vino_graft::record::Recording, wasm: &[u8]) {
    let name = recording.header.slot.replace(['/', '.'], "_");
    let stem = dir.join(format!("seed-{seed}-{name}-{}", recording.invocations));
    let _ = std::fs::create_dir_all(dir);
    let _ = std::fs::write(stem.with_extension("rec"), recording.to_bytes());
    let _ = std::fs::write(stem.with_extension("wasm"), wasm);
}

/// The most a recording of one of the simulator's grafts holds.
const RECORD_LIMIT: usize = 4 << 20;

/// A graft bound in the first pass whose inputs are recorded: who bound it, where, the module.
struct Recorded {
    p: Arc<Process>,
    slot: String,
    wasm: Vec<u8>,
}

/// A simulated process and the descriptors it keeps open.
struct Proc {
    p: Arc<Process>,
    held: Vec<Fd>,
}

/// One step of the workload.
#[derive(Debug, Clone)]
enum Step {
    /// An operation of the model, by process `who`.
    Fs(usize, Op),
    /// Reads a whole file and compares it with the model.
    Read(usize, String),
    /// Opens a file and keeps the descriptor (an unlinked file then lives on, parked).
    Hold(usize, String),
    /// Closes one kept descriptor.
    Release(usize),
    /// Binds a graft to a graftpoint the process may reach.
    Graft(usize, usize, grafts::Behaviour),
    /// One round of the write-back worker.
    Writeback,
    /// The event graft jobs queued so far run (the kernel has no event threads here).
    Events,
    /// Drops every clean page, so later reads go to the disk.
    DropClean,
    /// Time passes.
    Tick(u64),
    /// A lock wait with a deadline the clock then passes.
    LockDeadline(usize),
    /// A timer the clock makes fire.
    Timer(usize),
    /// An event wait the clock ends.
    EventWait(usize),
    /// Children, signals and pipes (see `family`).
    Family(family::FamilyStep),
    /// Program memory under pressure (see `memory`).
    Memory(memory::MemoryStep),
    /// Streams over the network (see `network`).
    Net(network::NetStep),
}

struct Sim {
    seed: u64,
    rng: SplitMix64,
    opts: SimOptions,
    dev: Arc<SimDevice>,
    clock: Arc<ManualClock>,
    config: KernelConfig,
    kernel: Arc<Kernel>,
    procs: Vec<Proc>,
    model: Model,
    promises: Promises,
    writes_at_start: u64,
    grafts_loaded: u64,
    /// The first kernel-wide graft (an `exec.verify` verifier, the root's `dir.access`) that
    /// answered otherwise than its behaviour says.
    graft_wrong: Option<String>,
    /// Grafts bound in this pass whose inputs are being recorded, and the invocations replayed
    /// exactly so far (see [`Sim::replay_recorded`]).
    recorded: Vec<Recorded>,
    replayed: u64,
    /// The recordings replayed, and their modules, kept for a failing seed
    /// ([`SimOptions::record_dir`]).
    taken: Vec<(vino_graft::record::Recording, Vec<u8>)>,
    /// Candidates in shadow beside the grafts bound (first pass only: `None` in the second).
    shadows: Option<shadows::Shadows>,
    written_back: u64,
    reached: timed::Reached,
    family: family::Family,
    memories: memory::Memories,
    network: network::Network,
}

impl Sim {
    fn new(seed: u64, opts: &SimOptions, trip: Option<u64>) -> Check<Sim> {
        let mut rng = SplitMix64::new(seed);
        let clock = Arc::new(ManualClock::new(Duration::from_secs(1_700_000_000)));
        let shared_clock = SharedClock::new(clock.clone());
        let mem = MemDevice::new(DISK_BLOCKS);
        mkfs(
            &mem,
            &MkfsOptions {
                blocks_per_group: 512,
                inodes_per_group: Some(64),
                fs_id: Some(seed | 1),
                clock: shared_clock.clone(),
                ..MkfsOptions::default()
            },
        )
        .map_err(|e| format!("mkfs: {e}"))?;
        mem.flush().map_err(|e| format!("flush after mkfs: {e}"))?;
        let dev = Arc::new(SimDevice::new(mem));
        let (net, peer) = network::setup(seed, &clock);
        let net_clock = clock.clone();
        let config = KernelConfig {
            cache_frames: 8 + rng.below(56) as usize,
            queue_depth: 1 + rng.below(4) as usize,
            writeback_every: None,
            io_backend: BackendChoice::Inline,
            dispatch: vino_kernel::Dispatch::Caller,
            event_dispatch: vino_kernel::Dispatch::Caller,
            clock: shared_clock,
            limits: memory::limits(),
            // Which pages the pager evicts depends on when Linux lets a page move (and on
            // graft budgets in real time), so its writes would make the disk's sequence vary
            // from run to run: swap stays off the simulated disk.
            swap_on_disk: false,
            net,
            mount: MountOptions {
                commit_blocks: rng.chance(0.5).then(|| 4 + rng.below(60) as usize),
                ..MountOptions::default()
            },
            runtime: vino_graft::RuntimeConfig {
                roll_back_memory: opts.roll_back_memory,
                ..KernelConfig::default().runtime
            },
            ..KernelConfig::default()
        };
        let kernel = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).map_err(|e| format!("boot: {e}"))?;
        if !opts.ordered {
            // The hole put back: commits no longer write the files' data first.
            kernel.fs().set_data_hook(None);
        }
        let root = kernel.spawn(Credentials::root());
        root.chmod("/", 0o777).map_err(|e| format!("chmod /: {e}"))?;
        let mut procs = vec![Proc {
            p: root,
            held: Vec::new(),
        }];
        for uid in [1000, 1001] {
            procs.push(Proc {
                p: kernel.spawn(Credentials::user(uid, uid)),
                held: Vec::new(),
            });
        }
        let mut model = Model::default();
        let mut promises = Promises::new();
        if opts.streams {
            make_stream_dir(&kernel, &procs[0].p)?;
            model.nodes.insert(STREAM_DIR.to_string(), Node::Dir);
            promises.durable_point(&model);
        }
        let writes_at_start = dev.writes();
        if let Some(trip) = trip {
            // From a generator of its own: the workload's must not depend on the pass.
            let mut cut = SplitMix64::new(seed ^ 0x0c07_c07c_07c0);
            let options = CrashOptions {
                survive: cut.next_f64() * 0.8,
                tear: cut.next_f64() * 0.3,
                sector_bytes: 512,
            };
            dev.arm(trip, cut.next_u64(), options);
        }
        Ok(Sim {
            rng,
            opts: opts.clone(),
            dev,
            clock,
            config,
            kernel,
            procs,
            model,
            promises,
            writes_at_start,
            grafts_loaded: 0,
            graft_wrong: None,
            recorded: Vec::new(),
            replayed: 0,
            taken: Vec::new(),
            shadows: trip.is_none().then(|| shadows::Shadows::new(seed)),
            seed,
            written_back: 0,
            reached: timed::Reached::default(),
            family: family::Family::default(),
            memories: memory::Memories::default(),
            network: network::Network::new(
                peer,
                net_clock,
                opts.graft
                    .as_ref()
                    .filter(|g| g.point == "event.net.packet")
                    .map(|g| g.wasm.clone()),
            ),
        })
    }

    fn workload_writes(&self) -> u64 {
        self.dev.writes() - self.writes_at_start
    }

    fn event_deliveries(&self) -> u64 {
        let stats = self.kernel.event_stats();
        stats
            .kinds
            .iter()
            .map(|(_, k)| k.delivered_graft + k.graft_aborts)
            .sum()
    }

    /// Failed graft invocations, over the graftpoints whose invocations the seed decides: the
    /// CPU scheduler's (`sched.*`) decide on its worker threads as real time passes, and the
    /// pager's (program memory's `vas.pick_victim`, `vm.fault_around`) as Linux lets pages
    /// move, so how many of theirs fail is not the seed's to fix (it would make a seed's report
    /// vary: seeds 227 and 291 did).
    fn graft_failures(&self) -> u64 {
        self.kernel
            .processes()
            .iter()
            .flat_map(|p| p.graft_list())
            .filter(|s| !PAGER_CALLED.iter().any(|p| s.point.starts_with(p)))
            .map(|s| s.stats.map_or(0, |st| st.failures))
            .sum()
    }

    /// A path of one or two names; a two-name path may start in the stream directory (which
    /// no path names itself, so it stays bound).
    fn random_path(&mut self) -> String {
        let depth = 1 + self.rng.below(2) as usize;
        let names = ["a", "b", "c", &STREAM_DIR[1..]];
        (0..depth)
            .map(|i| {
                let choices = if self.opts.streams && i == 0 && depth == 2 {
                    4
                } else {
                    3
                };
                format!("/{}", names[self.rng.below(choices) as usize])
            })
            .collect()
    }

    /// A fallocate: an allocation, a punched hole or a zeroed range.
    fn fallocate_op(&mut self, path: String) -> Op {
        let (offset, len) = (self.rng.below(50_000), 1 + self.rng.below(30_000));
        let keep_size = self.rng.chance(0.5);
        match self.rng.below(3) {
            0 => Op::Fallocate {
                path,
                offset,
                len,
                keep_size,
            },
            1 => Op::PunchHole { path, offset, len },
            _ => Op::ZeroRange {
                path,
                offset,
                len,
                keep_size,
            },
        }
    }

    fn random_step(&mut self) -> Step {
        let who = self.rng.below(self.procs.len() as u64) as usize;
        let path = self.random_path();
        let op = match self.rng.below(41) {
            0..=2 => Op::Create(path),
            3..=4 => Op::Mkdir(path),
            5..=11 => Op::Write {
                path,
                offset: self.rng.below(60_000),
                len: self.rng.below(30_000) as usize,
                seed: self.rng.next_u64(),
            },
            12 => Op::Truncate {
                path,
                size: self.rng.below(70_000),
            },
            13 => self.fallocate_op(path),
            14..=15 => Op::Unlink(path),
            16 => Op::Rmdir(path),
            17..=18 => Op::Rename(path, self.random_path()),
            19..=20 => Op::Fsync(path),
            21 => Op::Sync,
            22..=24 => return Step::Read(who, path),
            25 => return Step::Hold(who, path),
            26 => return Step::Release(who),
            27 => {
                let points = grafts::points().len() as u64;
                let b = grafts::BEHAVIOURS[self.rng.below(grafts::BEHAVIOURS.len() as u64) as usize];
                return Step::Graft(who, self.rng.below(points) as usize, b);
            }
            28 => return Step::Writeback,
            29 => return Step::Events,
            30 => return Step::DropClean,
            31 => return self.time_step(who),
            32..=34 => return Step::Family(family::FamilyStep::random(&mut self.rng, who)),
            35..=37 => return Step::Memory(memory::MemoryStep::random(&mut self.rng, who)),
            _ => return Step::Net(network::NetStep::random(&mut self.rng, who, self.procs.len())),
        };
        Step::Fs(who, op)
    }

    /// Time passes, by itself or past a deadline something waits for.
    fn time_step(&mut self, who: usize) -> Step {
        match self.rng.below(8) {
            0 => Step::LockDeadline(who),
            1 => Step::Timer(who),
            2 => Step::EventWait(who),
            // Now and then a pause long enough for the write-back policy's age (30 s).
            _ => match self.rng.chance(0.25) {
                true => Step::Tick(31_000),
                false => Step::Tick(1 + self.rng.below(50)),
            },
        }
    }

    /// Runs a step of [`Sim::time_step`] that waits for a deadline, counting what it reached.
    fn timed(&mut self, step: &Step) -> Check {
        let (k, c, r) = (&*self.kernel, &*self.clock, &mut self.reached);
        match step {
            Step::LockDeadline(who) => r.lock_deadline_expiries += timed::lock_deadline(k, c, *who)?,
            Step::Timer(who) => r.timer_firings += timed::timer(k, c, &self.procs[*who].p)?,
            Step::EventWait(who) => r.event_wait_timeouts += timed::event_wait(k, c, &self.procs[*who].p)?,
            _ => unreachable!("not a timed step: {step:?}"),
        }
        Ok(())
    }

    /// Step `i` of the workload: random, but for a custom graft's first steps, which bind it
    /// (on a file of its own, for a per-file graftpoint) before anything else happens.
    fn step(&mut self, i: usize) -> Step {
        let Some(custom) = &self.opts.graft else {
            return self.random_step();
        };
        let point = grafts::points()
            .iter()
            .position(|g| g.name == custom.point)
            .expect("a custom graft's point is one of grafts::points()");
        let path = "/graft".to_string();
        let prologue = [
            Step::Fs(0, Op::Create(path.clone())),
            Step::Hold(0, path),
            Step::Graft(0, point, grafts::Behaviour::Zero),
        ];
        match prologue.get(i) {
            Some(step) => step.clone(),
            None => match self.random_step() {
                Step::Graft(who, _, b) => Step::Graft(who, point, b),
                other => other,
            },
        }
    }

    /// The first pass: every step, every answer checked.
    fn run_to_end(&mut self) -> Check {
        for i in 0..self.opts.steps {
            let step = self.step(i);
            self.apply(i, &step, true)?;
            self.check_invariants(i, &step)?;
        }
        Ok(())
    }

    /// The kernel's invariants after step `i` (references, parked files, the orphan list,
    /// descriptor tables, accounts), unless the power is gone.
    fn check_invariants(&self, i: usize, step: &Step) -> Check {
        if self.dev.crashed().is_some() {
            return Ok(());
        }
        self.kernel
            .check_invariants()
            .map_err(|e| format!("step {i} {step:?}: invariant broken: {e}"))
    }

    /// The second pass: steps until the power goes. Returns the step it went in.
    fn run_to_cut(&mut self) -> Check<Option<usize>> {
        for i in 0..self.opts.steps {
            let step = self.step(i);
            if let Step::Fs(_, op) = &step {
                // The operation may or may not have reached the running transaction: either
                // tree is possible, as are the paths it touches.
                let mut trial = self.model.clone();
                let want = run_model(&mut trial, op);
                self.apply(i, &step, false)?;
                if self.dev.crashed().is_some() {
                    self.promises.touch_op(op);
                    if want.is_ok() {
                        self.promises.shapes.push(trial.shape());
                    }
                    return Ok(Some(i));
                }
            } else {
                self.apply(i, &step, false)?;
                if self.dev.crashed().is_some() {
                    return Ok(Some(i));
                }
            }
            self.check_invariants(i, &step)?;
        }
        Ok(None)
    }

    /// Runs one step; with `strict`, a kernel answer that differs from the model's fails
    /// the seed (in the second pass answers after the power cut are errors by design).
    fn apply(&mut self, i: usize, step: &Step, strict: bool) -> Check {
        let ctx = |what: String| format!("step {i} {step:?}: {what}");
        match step {
            Step::Fs(who, op) => {
                let mut trial = self.model.clone();
                let want = run_model(&mut trial, op).map_err(|k| Errno::from_number(k.errno()));
                let got = self.kernel_op(*who, op).map_err(|e| Some(e.errno));
                if self.dev.crashed().is_some() {
                    return Ok(());
                }
                if strict && got != want {
                    return Err(ctx(format!("the kernel answered {got:?}, the model {want:?}")));
                }
                if got.is_ok() {
                    self.model = trial;
                    self.promises.touch_op(op);
                    match op {
                        Op::Sync => self.promises.durable_point(&self.model),
                        Op::Fsync(synced) => {
                            // Another file's fsync commits the journal, which stores no stream
                            // file's chunks: those changed since stay unpromised.
                            let pending = self.unsynced_streams(synced);
                            self.promises.durable_point_but(&self.model, &pending)
                        }
                        _ => self.promises.shapes.push(self.model.shape()),
                    }
                }
            }
            Step::Read(who, path) => {
                let Some(Node::File(want)) = self.model.nodes.get(path) else {
                    return Ok(());
                };
                let want = want.clone();
                let got = read_file(&self.procs[*who].p, path);
                if self.dev.crashed().is_some() {
                    return Ok(());
                }
                let got = got.map_err(|e| ctx(format!("read failed: {e}")))?;
                if got != want {
                    let first = got.iter().zip(&want).position(|(a, b)| a != b);
                    return Err(ctx(format!(
                        "read {} bytes, the model holds {} (first difference at {first:?})",
                        got.len(),
                        want.len()
                    )));
                }
            }
            Step::Hold(who, path) => {
                let proc = &mut self.procs[*who];
                if proc.held.len() < HELD_MAX
                    && let Ok(fd) = proc.p.open(path, OpenFlags::read_only())
                {
                    proc.held.push(fd);
                }
            }
            Step::Release(who) => {
                if let Some(&fd) = self.procs[*who].held.last() {
                    // The descriptor's graftpoints go with it: their recordings are replayed first.
                    let p = self.procs[*who].p.clone();
                    let ending = format!("/{fd}");
                    let slots: Vec<String> = self
                        .recorded
                        .iter()
                        .filter(|r| Arc::ptr_eq(&r.p, &p) && r.slot.ends_with(&ending))
                        .map(|r| r.slot.clone())
                        .collect();
                    for slot in slots {
                        self.replay_recorded(&p, &slot);
                    }
                    if let Some(shadows) = &mut self.shadows {
                        shadows.stop(&p, |slot| slot.ends_with(&ending)).map_err(ctx)?;
                    }
                }
                let proc = &mut self.procs[*who];
                if let Some(fd) = proc.held.pop() {
                    let _ = proc.p.close(fd);
                }
            }
            Step::Graft(who, point, behaviour) => self.graft(*who, *point, *behaviour).map_err(ctx)?,
            Step::Events => {
                self.kernel.run_events();
            }
            Step::Writeback => {
                if let Ok(n) = self.kernel.cache().run_writeback() {
                    self.written_back += n as u64;
                }
            }
            Step::DropClean => {
                let _ = self.kernel.cache().drop_clean();
            }
            Step::Tick(ms) => self.network.pass(&self.kernel, Duration::from_millis(*ms)),
            Step::LockDeadline(_) | Step::Timer(_) | Step::EventWait(_) => self.timed(step).map_err(ctx)?,
            Step::Family(f) => {
                let procs: Vec<Arc<Process>> = self.procs.iter().map(|p| p.p.clone()).collect();
                self.family.apply(&procs, f).map_err(ctx)?;
            }
            Step::Net(n) => {
                let procs: Vec<Arc<Process>> = self.procs.iter().map(|p| p.p.clone()).collect();
                self.network.apply(&self.kernel, &procs, n).map_err(ctx)?;
            }
            Step::Memory(m) => {
                let procs: Vec<Arc<Process>> = self.procs.iter().map(|p| p.p.clone()).collect();
                let done = self.memories.apply(&self.kernel, &procs, m);
                // Past the power cut the swap's writes are lost with the machine's memory.
                if self.dev.crashed().is_none() {
                    done.map_err(ctx)?;
                }
            }
        }
        Ok(())
    }

    /// Runs a model operation through the kernel's system calls.
    /// The stream files changed since the last durable point, but `synced`.
    fn unsynced_streams(&self, synced: &str) -> Vec<String> {
        self.promises
            .touched
            .iter()
            .filter(|p| p.as_str() != synced)
            .filter(|p| self.procs[0].p.stream_status(p).is_ok_and(|s| s.is_some()))
            .cloned()
            .collect()
    }

    fn kernel_op(&self, who: usize, op: &Op) -> Result<(), SysError> {
        let p = &self.procs[who].p;
        let rw = OpenFlags::read_write();
        let with_fd = |path: &str, flags: OpenFlags, f: &dyn Fn(Fd) -> Result<(), SysError>| {
            let fd = p.open(path, flags)?;
            let r = f(fd);
            p.close(fd)?;
            r
        };
        match op {
            Op::Create(path) => {
                let flags = OpenFlags {
                    read: true,
                    write: true,
                    create: true,
                    exclusive: true,
                    mode: 0o666,
                    ..OpenFlags::default()
                };
                with_fd(path, flags, &|_| Ok(()))
            }
            Op::Mkdir(path) => p.mkdir(path, 0o777),
            Op::Write {
                path,
                offset,
                len,
                seed,
            } => with_fd(path, rw, &|fd| {
                let bytes = data(*seed, *len);
                let n = p.pwrite(fd, &bytes, *offset)?;
                if n != bytes.len() {
                    return Err(SysError::new(Errno::Io, format!("short write: {n} of {}", bytes.len())));
                }
                Ok(())
            }),
            Op::Truncate { path, size } => with_fd(path, rw, &|fd| p.ftruncate(fd, *size)),
            Op::Fallocate {
                path,
                offset,
                len,
                keep_size,
            } => with_fd(path, rw, &|fd| p.fallocate(fd, *keep_size, *offset, *len)),
            Op::PunchHole { path, offset, len } => with_fd(path, rw, &|fd| {
                p.fallocate_mode(fd, FallocMode::PunchHole, *offset, *len)
            }),
            Op::ZeroRange {
                path,
                offset,
                len,
                keep_size,
            } => with_fd(path, rw, &|fd| {
                let mode = FallocMode::ZeroRange { keep_size: *keep_size };
                p.fallocate_mode(fd, mode, *offset, *len)
            }),
            Op::Unlink(path) | Op::UnlinkKeep(path) => p.unlink(path),
            Op::Rmdir(path) => p.rmdir(path),
            Op::Rename(from, to) => p.rename(from, to),
            Op::Fsync(path) => with_fd(path, OpenFlags::read_only(), &|fd| p.fsync(fd)),
            Op::Sync => self.kernel.sync(),
            Op::Symlink { .. } | Op::Mknod(_) | Op::SetXattr { .. } | Op::Remount => {
                unreachable!("the simulator does not make {op:?}")
            }
        }
    }

    /// Loads a graft at graftpoint number `point` where process `who` may reach it (on a
    /// descriptor it keeps open, for per-file graftpoints). Refusals are part of the game.
    /// A candidate may be tried in shadow beside it (see `shadows`).
    fn graft(&mut self, who: usize, point: usize, behaviour: grafts::Behaviour) -> Check {
        let g = grafts::points()[point];
        if g.who == Grafter::DirectoryOwner && self.opts.graft.is_none() {
            self.graft_root_access(behaviour);
            return Ok(());
        }
        // A redirect would send the model's names elsewhere: a lookup graft that answers its
        // argument (a length, so a redirect) answers 0 here. The hostile ones redirect nothing.
        let behaviour = match (g.name, behaviour) {
            ("dir.lookup", grafts::Behaviour::FirstArg) => grafts::Behaviour::Zero,
            _ => behaviour,
        };
        let proc = &self.procs[who];
        let slot = match g.who {
            Grafter::Opener | Grafter::FileCreator | Grafter::FileCreatorOrPrivileged => match proc.held.last() {
                Some(fd) => format!("{}/{fd}", g.name),
                None => return Ok(()),
            },
            // A user's own packet order: its processes bind the user's slot (the link's is
            // root's alone).
            _ if g.name == "net.pick_packet" && proc.p.credentials().uid != 0 => crate::PICK_USER.to_string(),
            _ => g.name.to_string(),
        };
        let p = proc.p.clone();
        self.replay_recorded(&p, &slot);
        if let Some(shadows) = &mut self.shadows {
            shadows.stop(&p, |s| s == slot)?;
        }
        let _ = p.graft_unload(&slot);
        let wasm = match &self.opts.graft {
            Some(custom) => custom.wasm.to_vec(),
            None => grafts::module(g, behaviour),
        };
        if p.graft_load(&slot, &wasm).is_ok() {
            self.grafts_loaded += 1;
            // Every graft's inputs are recorded while it is bound, and replayed offline when
            // it goes: it must answer and fail exactly as it did (those that cannot be
            // recorded, whose memory is not logged, are left).
            if p.graft_record_start(&slot, RECORD_LIMIT).is_ok() {
                self.recorded.push(Recorded {
                    p: p.clone(),
                    slot: slot.clone(),
                    wasm,
                });
            }
            if g.name == "exec.verify" && self.opts.graft.is_none() {
                self.check_exec_verify(who, behaviour);
            }
        }
        if let Some(shadows) = &mut self.shadows {
            shadows.maybe_start(&p, &slot, g);
        }
        Ok(())
    }

    /// A module through the verifier just bound: a well-behaved one (answering 0) lets it run,
    /// every other fails closed (EACCES).
    fn check_exec_verify(&mut self, who: usize, behaviour: grafts::Behaviour) {
        let judged = self.procs[who].p.exec_verify("sim", &[7u8; 100]);
        let right = match (&judged, behaviour) {
            (Ok(_), grafts::Behaviour::Zero) => true,
            (Err(e), b) => b != grafts::Behaviour::Zero && e.errno == vino_kernel::Errno::Acces,
            (Ok(_), _) => false,
        };
        if !right {
            self.graft_went_wrong(format!("exec.verify bound to a {behaviour:?} graft: {judged:?}"));
        }
    }

    /// Stops the recording of the graft at `slot` of `p`, if one runs, and replays it offline:
    /// every answer and failure must come again. One that does not is the seed's failure, and
    /// its recording is kept ([`SimOptions::record_dir`]).
    fn replay_recorded(&mut self, p: &Arc<Process>, slot: &str) {
        let Some(i) = self
            .recorded
            .iter()
            .position(|r| Arc::ptr_eq(&r.p, p) && r.slot == slot)
        else {
            return;
        };
        let r = self.recorded.swap_remove(i);
        let Ok(recording) = r.p.graft_record_stop(&r.slot) else {
            return;
        };
        match vino_graft::replay::replay(&recording, &r.wasm, Default::default()) {
            // Recordings are counted, not their calls: how many calls a graft got is not always
            // the seed's to decide (the scheduler's run as host time passes, evictions come
            // from the cache's own threads too), and the report must be the same every run.
            Ok(replayed) if replayed.exact() => self.replayed += 1,
            Ok(replayed) => self.graft_went_wrong(format!(
                "the recording of the graft at {} does not replay as it ran: {:?}",
                r.slot, replayed.divergence
            )),
            Err(e) => self.graft_went_wrong(format!("the recording of the graft at {} does not replay: {e}", r.slot)),
        }
        if self.opts.record_dir.is_some() {
            self.taken.push((recording, r.wasm));
        }
    }

    /// The seed failed in its first pass: the recordings taken, and those of the grafts still
    /// bound, are written to [`SimOptions::record_dir`].
    fn keep_recordings(&mut self) {
        let Some(dir) = self.opts.record_dir.clone() else {
            return;
        };
        for r in std::mem::take(&mut self.recorded) {
            if let Ok(recording) = r.p.graft_record_stop(&r.slot) {
                self.taken.push((recording, r.wasm));
            }
        }
        for (recording, wasm) in &self.taken {
            keep_recording(&dir, self.seed, recording, wasm);
        }
    }

    /// Replays every recording still running (the end of the pass).
    fn replay_all(&mut self) -> u64 {
        let left: Vec<(Arc<Process>, String)> = self.recorded.iter().map(|r| (r.p.clone(), r.slot.clone())).collect();
        for (p, slot) in left {
            self.replay_recorded(&p, &slot);
        }
        self.replayed
    }

    /// Stops the shadows still running (the end of the first pass): how many were tried.
    fn stop_shadows(&mut self) -> Check<u64> {
        self.shadows.as_mut().map_or(Ok(0), |s| s.stop_all())
    }

    /// Remembers the first wrong answer of a kernel-wide graft, for the end of the pass.
    fn graft_went_wrong(&mut self, what: String) {
        self.graft_wrong.get_or_insert(what);
    }

    /// `dir.access` on the root (root's): a graft that allows stays bound, so every later step
    /// walks through it; any other (refusing, spinning, trapping, storing out of bounds) must
    /// refuse a lookup (it fails closed), and is unbound at once so the model still holds.
    fn graft_root_access(&mut self, behaviour: grafts::Behaviour) {
        let g = grafts::points()
            .into_iter()
            .find(|g| g.name == "dir.access")
            .expect("dir.access is a graftpoint");
        let root = self.procs[0].p.clone();
        let Ok(fd) = root.open("/", OpenFlags::directory()) else {
            return;
        };
        let point = format!("dir.access/{fd}");
        if root.graft_load(&point, &grafts::module(g, behaviour)).is_ok() {
            self.grafts_loaded += 1;
            if behaviour == grafts::Behaviour::FirstArg {
                // Answers its operation: allows lookups, refuses the rest; not kept either.
                let _ = root.graft_unload(&point);
            } else if behaviour != grafts::Behaviour::Zero {
                let looked = self.procs[1].p.stat("/.");
                if !looked.as_ref().is_err_and(|e| e.errno == vino_kernel::Errno::Acces) {
                    self.graft_went_wrong(format!(
                        "a {behaviour:?} dir.access graft let a lookup through: {looked:?}"
                    ));
                }
                let _ = root.graft_unload(&point);
            }
        }
        let _ = root.close(fd);
    }

    /// End of the first pass: the whole tree against the model, nothing leaked, a clean disk.
    /// Nothing a failed graft call wrote survives in its memory: each of the simulator's
    /// grafts counts its calls in its memory, so the count must be its calls that succeeded.
    /// Nor in the kernel: the changes made for it through graft-callable functions (one per
    /// call at most, [`grafts::module`]) are at most the calls that committed.
    /// (`vas.pick_victim` is entered once per page of candidates, so there it may be more; the
    /// scheduler's grafts run on its threads as real time passes, a custom graft keeps no
    /// count, and graftpoints whose calls recompute everything, `file.stream` and
    /// `exec.verify`, keep their writes by design.)
    fn check_graft_memories(&self, procs: &[Arc<Process>]) -> Check {
        for p in procs {
            for slot in p.graft_list() {
                let Some(stats) = slot.stats.filter(|_| slot.graft.is_some()) else {
                    continue;
                };
                let logged = vino_kernel::graftpoints::all()
                    .iter()
                    .find(|g| slot.point.split('/').next() == Some(g.name))
                    .is_some_and(|g| g.roll_back_memory);
                if slot.point.starts_with("sched.") || !logged {
                    continue;
                }
                let Ok(counted) = p.graft_call(&slot.point, grafts::CALLS_CONTROL, &[]) else {
                    continue;
                };
                let succeeded = stats.invocations - stats.failures;
                let paged = slot.point.starts_with("vas.pick_victim");
                let right = if paged {
                    counted as u64 >= succeeded
                } else {
                    counted as u64 == succeeded
                };
                if !right {
                    return Err(format!(
                        "at the end: the graft at {} counted {counted} calls in its memory, but {succeeded} of its {} calls succeeded: a failed call's writes survived",
                        slot.point, stats.invocations
                    ));
                }
                // Each entry call asks for at most one kernel change before it behaves well or
                // badly: more changes made than calls committed means a failed call's was made.
                if stats.changes > counted as u64 {
                    return Err(format!(
                        "at the end: {} kernel changes were made for the graft at {}, but only {counted} of its calls committed: a failed call's change was made",
                        stats.changes, slot.point
                    ));
                }
            }
        }
        Ok(())
    }

    /// End of the first pass for the network: every stream finished and checked, every socket
    /// closed, both stacks empty.
    fn finish_network(&mut self) -> Check {
        let procs: Vec<Arc<Process>> = self.procs.iter().map(|p| p.p.clone()).collect();
        self.network
            .finish(&self.kernel, &procs)
            .map_err(|e| format!("at the end: {e}"))
    }

    fn finish(mut self) -> Check {
        if let Some(wrong) = self.graft_wrong.take() {
            return Err(wrong);
        }
        let procs: Vec<Arc<Process>> = self.procs.iter().map(|p| p.p.clone()).collect();
        self.family.finish(&procs).map_err(|e| format!("at the end: {e}"))?;
        self.check_graft_memories(&procs)?;
        self.memories
            .finish(&self.kernel, &procs)
            .map_err(|e| format!("at the end: {e}"))?;
        for proc in &self.procs {
            for &fd in &proc.held {
                proc.p.close(fd).map_err(|e| format!("close: {e}"))?;
            }
        }
        // The root's dir.access graft is the kernel's to keep until unbound: unbound here, so
        // that its charges are back before the count below.
        let _ = self.procs[0].p.dir_access_bind_at(vino_kernel::At::Root, b"/", None);
        self.kernel.sync().map_err(|e| format!("sync at the end: {e}"))?;
        let tree = collect(&self.procs[0].p)?;
        if tree != self.model {
            return Err(describe_difference(&self.model, &tree));
        }
        self.kernel.cache().check_invariants();
        for proc in &self.procs {
            // A user's packet order outlives its processes, charged to the user: unbound here,
            // so that its charges are back before the count below.
            let _ = proc.p.graft_unload(PICK_USER);
            self.kernel.exit(proc.p.pid());
        }
        if self.kernel.referenced_inodes() != 0 || !self.kernel.parked_files().is_empty() {
            return Err(format!(
                "after every process exited: {} inodes referenced, parked {:?}",
                self.kernel.referenced_inodes(),
                self.kernel.parked_files()
            ));
        }
        // Stream codecs are the kernel's, held for their owners (with their keys) until
        // shutdown, which gives their charges back: so does this, before the count.
        self.kernel.streams().unload_codecs();
        let total = self.kernel.accounts().total();
        for r in Resource::ALL {
            if total.used(r) != 0 {
                return Err(format!(
                    "after every process exited, {} {r:?} still charged",
                    total.used(r)
                ));
            }
        }
        self.kernel.shutdown().map_err(|e| format!("shutdown: {e}"))?;
        assert_clean(&*self.dev, "after the clean run")
    }

    /// After the power cut: fsck, mount, and the promises; first, a second cut during recovery
    /// where recovery writes. Returns the write that second cut fell at.
    fn recover_and_check(self, seed: u64) -> Check<Option<u64>> {
        let image = self.dev.crashed().ok_or("the power was never cut")?;
        let Sim {
            kernel,
            procs,
            promises,
            config,
            ..
        } = self;
        // The old kernel's device is dead: it can neither write nor hang. Its processes exit
        // (a process holds its kernel: without this the old kernel, its cache and its disk
        // would outlive the seed).
        for proc in procs {
            kernel.exit(proc.p.pid());
        }
        drop(kernel);
        assert_clean(
            &MemDevice::from_image(image.clone()).map_err(|e| e.to_string())?,
            "the crash image",
        )?;
        let second = recovery::cut_during_recovery(seed, &image, &config)?;
        let (second_at, image) = match second {
            Some((at, cut)) => (Some(at), cut),
            None => (None, image),
        };
        let disk = Arc::new(MemDevice::from_image(image).map_err(|e| e.to_string())?);
        if second_at.is_some() {
            assert_clean(&*disk, "the image of a power cut during recovery")?;
        }
        let kernel = Kernel::boot(disk.clone() as Arc<dyn BlockDevice>, &config)
            .map_err(|e| format!("mount after the crash: {e}"))?;
        let root = kernel.spawn(Credentials::root());
        kernel
            .check_invariants()
            .map_err(|e| format!("after the mount that followed the crash: {e}"))?;
        let after = collect(&root)?;
        promises.check(&after)?;
        kernel.exit(root.pid());
        kernel.shutdown().map_err(|e| format!("shutdown after recovery: {e}"))?;
        assert_clean(&*disk, "after recovery")?;
        Ok(second_at)
    }
}

/// The directory bound to [`grafts::stream_codec`] before the workload: the regular files and
/// directories made in it are stream files and stream directories (regular files and
/// directories to the model).
const STREAM_DIR: &str = "/s";

/// The kernel's store of stream codecs: no node of the model.
const MODULE_STORE: &str = "/.vino";

/// Makes [`STREAM_DIR`] and binds it, durably: the workload starts on a tree holding it.
fn make_stream_dir(kernel: &Kernel, root: &Process) -> Check {
    root.mkdir(STREAM_DIR, 0o777)
        .map_err(|e| format!("mkdir {STREAM_DIR}: {e}"))?;
    root.stream_bind(STREAM_DIR, Some(&grafts::stream_codec()))
        .map_err(|e| format!("binding {STREAM_DIR}: {e}"))?;
    kernel
        .sync()
        .map_err(|e| format!("sync after binding {STREAM_DIR}: {e}"))
}

/// Reads a whole file through a process.
fn read_file(p: &Process, path: &str) -> Result<Vec<u8>, SysError> {
    let fd = p.open(path, OpenFlags::read_only())?;
    let size = p.fstat(fd)?.size as usize;
    let mut buf = vec![0u8; size];
    let mut done = 0;
    while done < size {
        let n = p.pread(fd, &mut buf[done..], done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    p.close(fd)?;
    buf.truncate(done);
    Ok(buf)
}

/// The tree as a process sees it, in the model's terms (`lost+found` and the codec store left
/// out).
fn collect(p: &Process) -> Check<Model> {
    let mut m = Model::default();
    let mut dirs = vec!["/".to_string()];
    while let Some(dir) = dirs.pop() {
        let entries = p.readdir(&dir).map_err(|e| format!("readdir {dir}: {e}"))?;
        for e in entries {
            let name = String::from_utf8_lossy(&e.name).into_owned();
            let kernels_own = dir == "/" && (name == "lost+found" || name == MODULE_STORE[1..]);
            if name == "." || name == ".." || kernels_own {
                continue;
            }
            let path = if dir == "/" {
                format!("/{name}")
            } else {
                format!("{dir}/{name}")
            };
            let node = match e.kind {
                FileType::Directory => {
                    dirs.push(path.clone());
                    Node::Dir
                }
                FileType::Regular => Node::File(read_file(p, &path).map_err(|e| format!("read {path}: {e}"))?),
                other => return Err(format!("{path} is a {other:?}: the workload makes none")),
            };
            m.nodes.insert(path, node);
        }
    }
    Ok(m)
}

fn describe_difference(want: &Model, got: &Model) -> String {
    let mut diffs = Vec::new();
    let paths: std::collections::BTreeSet<&String> = want.nodes.keys().chain(got.nodes.keys()).collect();
    for p in paths {
        let (w, g) = (want.nodes.get(p), got.nodes.get(p));
        if w != g {
            let show = |n: Option<&Node>| match n {
                None => "absent".to_string(),
                Some(Node::File(d)) => format!("a file of {} bytes", d.len()),
                Some(n) => format!("{n:?}"),
            };
            diffs.push(format!("{p}: model {}, kernel {}", show(w), show(g)));
        }
    }
    format!("the tree differs from the model: {}", diffs.join("; "))
}

fn assert_clean(dev: &dyn BlockDevice, when: &str) -> Check {
    let report = fsck(dev, false).map_err(|e| format!("fsck {when}: {e}"))?;
    if !report.is_clean() {
        return Err(format!("fsck {when} found problems:\n{report}"));
    }
    Ok(())
}

/// Runs `seeds` from `from`, calling `progress` after each; returns the reports and failures.
pub fn run_many(
    from: u64,
    seeds: u64,
    opts: &SimOptions,
    mut progress: impl FnMut(u64, &Result<Report, Failure>),
) -> (Vec<Report>, Vec<Failure>) {
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for seed in from..from.saturating_add(seeds) {
        let r = run(seed, opts);
        progress(seed, &r);
        match r {
            Ok(rep) => reports.push(rep),
            Err(f) => failures.push(f),
        }
    }
    (reports, failures)
}

/// Summary counts of a batch, for the command line.
pub fn summary(reports: &[Report]) -> BTreeMap<&'static str, u64> {
    let mut s = BTreeMap::new();
    s.insert("seeds", reports.len() as u64);
    s.insert(
        "power_cuts",
        reports.iter().filter(|r| r.cut_at_write.is_some()).count() as u64,
    );
    s.insert("device_writes", reports.iter().map(|r| r.writes).sum());
    s.insert("grafts_loaded", reports.iter().map(|r| r.grafts_loaded).sum());
    s.insert("graft_failures", reports.iter().map(|r| r.graft_failures).sum());
    s.insert("written_back", reports.iter().map(|r| r.written_back).sum());
    s.insert("replayed", reports.iter().map(|r| r.replayed).sum());
    s.insert("tried", reports.iter().map(|r| r.tried).sum());
    s.insert("event_deliveries", reports.iter().map(|r| r.event_deliveries).sum());
    s.insert(
        "lock_deadline_expiries",
        reports.iter().map(|r| r.lock_deadline_expiries).sum(),
    );
    s.insert("timer_firings", reports.iter().map(|r| r.timer_firings).sum());
    s.insert(
        "event_wait_timeouts",
        reports.iter().map(|r| r.event_wait_timeouts).sum(),
    );
    s.insert("children_spawned", reports.iter().map(|r| r.children_spawned).sum());
    s.insert("signals_sent", reports.iter().map(|r| r.signals_sent).sum());
    s.insert("piped_bytes", reports.iter().map(|r| r.piped_bytes).sum());
    s.insert("memory_touches", reports.iter().map(|r| r.memory_touches).sum());
    s.insert("net_streams", reports.iter().map(|r| r.net_streams).sum());
    s.insert("net_layered", reports.iter().map(|r| r.net_layered).sum());
    s.insert("net_picks", reports.iter().map(|r| r.net_picks).sum());
    s.insert("net_served", reports.iter().map(|r| r.net_served).sum());
    s.insert("net_bytes", reports.iter().map(|r| r.net_bytes).sum());
    s.insert("net_faults", reports.iter().map(|r| r.net_faults).sum());
    s.insert(
        "double_cuts",
        reports.iter().filter(|r| r.second_cut_at_write.is_some()).count() as u64,
    );
    s
}
