//! Experiment E4: the Wisconsin benchmark's query 6 on the VINO kernel (Small 1998, 7.3: tables
//! 12-16), with application-controlled page eviction and read-ahead.
//!
//! The relation (100,000 tuples of 208 bytes, about 21 MB) and its nonclustered index on
//! `unique1` (a second file: for each key in order, the 4-byte position of its tuple) are written
//! into a VINO file system through the kernel's system calls. Query 6 selects 10% of the tuples
//! through the index: it reads that range of the index file, then `pread`s 208 bytes per
//! selected record in index order, which is random order in the file. Each run starts with a
//! cold cache of 1024 frames (4 MB, a fifth of the relation) and checks the `unique1` of every
//! record it reads.
//!
//! Runs:
//!
//! 1. **LRU**: nothing grafted (the default read-ahead never fires on random reads).
//! 2. **Look-ahead eviction** (`vas.pick_victim`, `sdk/grafts/lookahead_evict.c`): the application
//!    writes the pages of its scan into the graft's memory once and moves a cursor before each
//!    record; the graft spares the pages the next N records need (N = 0 .. 8192).
//! 3. **Read-ahead** (`file.compute_ra` on the relation's descriptor,
//!    `sdk/grafts/wisc_readahead.c`): the graft keeps the blocks of the upcoming records requested,
//!    up to N blocks ahead (N = 0 .. 120).
//!
//! (2) and (3) run protected (the Wasm graft, loaded with the process's `graft_load`) and
//! unprotected (the same policy in native Rust bound with `GraftSlot::bind_native`), on two
//! devices: the plain device (an image file read with `O_DIRECT`) and the thesis' disk, a
//! `DiskModel` with `DiskParams::st32272n()` over the same image. On each device one read-ahead
//! run is repeated with the disk requests served first come, first served (a FIFO
//! `disk.pick_request` graft) instead of by the elevator, to show what request ordering is worth.
//!
//! # The disk model's clock, and what time is reported
//!
//! The model runs with `Timing::Sleep { scale }`: its clock is real time divided by `scale` and
//! each request completes when its modeled completion comes. That is what lets the read-ahead's
//! requests wait in the I/O scheduler together, as they would at a real disk, so that the
//! elevator can sort them; under `Timing::Virtual` a request completes the moment it is
//! submitted, the queue never holds more than one and the effect table 15 measures is gone. The
//! model's I/O scheduler lets one request at a time reach the disk (queue depth 1, as a SCSI disk
//! of 1998 without tagged queuing), so the scheduler, not the host's thread pool, decides the
//! order; the image under the model is read through the host's page cache (no `O_DIRECT`) so that
//! the model alone sets the pace; and the threads the kernel starts get a timer slack of 1 ns, so
//! the model's millisecond sleeps end on time.
//!
//! The time reported for a run on the model is the disk's modeled busy time during the query.
//! The query is I/O-bound (the thesis' LRU run spent 13.5 ms per page fault, about one disk
//! access), so on the 1998 machine its run time was essentially its disk time. The wall clock
//! divided by `scale` is reported too ("elapsed"), but it stretches this host's own costs by
//! `1 / scale` along with the disk's: the hand-offs between the application, the scheduler and
//! the device threads (a few hundred microseconds per request on a busy two-CPU machine) become
//! milliseconds of "1998 time", about a third of a run at scale 0.1, and any pause of the host
//! (other programs) shows up tenfold. Scales: 0.1 quick, 0.15 full.
//!
//! The model's read-ahead buffer is one track (60 KB), the "track buffer" the thesis describes
//! (7.3.4), rather than the 256 KB of `DiskParams::st32272n()`. The model serves a read that lies
//! ahead of its read-ahead stream by waiting for the stream to get there, however far ahead that
//! is; with 256 KB that is up to 35 ms of reading at the media rate where a seek and half a
//! revolution would take 6 ms, which an elevator's ascending requests hit all the time (it made
//! read-ahead slower than none). Within one track the wait is at most a revolution.

mod policies;
mod tables;
pub mod try_replay;

pub use policies::{LookAheadNative, ReadAheadNative, page_plan};
pub use tables::{
    THESIS_CACHE_NEEDED, THESIS_LOOKAHEAD_PROTECTED, THESIS_LOOKAHEAD_UNPROTECTED, THESIS_LRU_FAULTS,
    THESIS_LRU_SECONDS, THESIS_READAHEAD_PROTECTED, THESIS_READAHEAD_UNPROTECTED, ThesisLookAhead,
};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use serde::Serialize;
use vino_blockdev::{BlockDevice, DeviceStats, DiskModel, DiskParams, FileDevice, FileOptions, ModelStats, Timing};
use vino_cache::{CacheCounters, ComputeRa, PickVictim};
use vino_graft::{GraftStats, NativePolicy, RuntimeConfig};
use vino_kernel::{Credentials, Kernel, KernelConfig, OpenFlags, Process};

use crate::wisconsin::{Relation, TUPLE_BYTES, offset_of, unique1_of};
use policies::{Cursor, MAX_PAGES, MAX_RECORDS};

/// The look-ahead graft, C source.
pub const LOOKAHEAD_C: &str = include_str!("../../sdk/grafts/lookahead_evict.c");
/// The read-ahead graft, C source.
pub const READAHEAD_C: &str = include_str!("../../sdk/grafts/wisc_readahead.c");

/// The thesis' look-ahead values (records, table 12).
pub const THESIS_LOOKAHEADS: [u64; 8] = [0, 128, 256, 512, 1024, 2048, 4096, 8192];
/// Read-ahead values (blocks; table 15 has 0 and 20..120).
pub const READAHEADS: [u64; 8] = [0, 10, 20, 40, 60, 80, 100, 120];
/// The thesis' relation.
pub const FULL_TUPLES: usize = 100_000;
/// The thesis' cache: 4 MB.
pub const FULL_FRAMES: usize = 1024;
/// Files in the VINO file system.
const DIR: &str = "/wisc";
const RELATION: &str = "/wisc/relation";
const INDEX: &str = "/wisc/unique1.idx";

/// Which devices to run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Devices {
    Plain,
    Model,
    Both,
}

impl Devices {
    fn kinds(self) -> Vec<DeviceKind> {
        match self {
            Devices::Plain => vec![DeviceKind::Plain],
            Devices::Model => vec![DeviceKind::Model],
            Devices::Both => vec![DeviceKind::Plain, DeviceKind::Model],
        }
    }
}

/// Options of E4. `Default` is the full experiment; [`E4Options::quick`] the CI size. The
/// `Option` fields override the sizes the mode chooses.
#[derive(Clone, Debug)]
pub struct E4Options {
    /// 20,000 tuples with a proportionally smaller cache, fewer runs on the model (about a minute).
    pub quick: bool,
    /// Where the disk image lives (not a tmpfs: the plain device wants `O_DIRECT`).
    pub scratch_dir: PathBuf,
    pub devices: Devices,
    /// Tuples in the relation (default 100,000; quick 20,000).
    pub tuples: Option<usize>,
    /// Cache frames of 4 KB (default: 1024 scaled by the relation's size, so the cache holds the
    /// same fifth of it as in the thesis).
    pub cache_frames: Option<usize>,
    /// Look-ahead values in records, on every device (default: the thesis' values scaled by the
    /// relation's size; fewer on the model in quick mode).
    pub lookaheads: Option<Vec<u64>>,
    /// Read-ahead values in blocks, on every device (default 0..120; fewer on the model in
    /// quick mode).
    pub readaheads: Option<Vec<u64>>,
    /// Time scale of the disk model (default 0.15; quick 0.1).
    pub model_scale: Option<f64>,
    /// The model's read-ahead buffer in KB (default: one track, 60 KB; see the module notes).
    pub model_track_buffer_kb: Option<u32>,
    /// Timed repetitions of each run on the plain device, the median reported (default 3; the
    /// model's runs are deterministic enough to run once).
    pub plain_repeats: Option<usize>,
    /// Also run read-ahead with FIFO disk ordering (default true).
    pub fifo_comparison: bool,
    /// Read-ahead and look-ahead grafts together, as (read-ahead blocks, look-ahead records)
    /// (default: the largest read-ahead with the equivalent of 4096 records).
    pub both: Option<Vec<(u64, u64)>>,
    /// Seed of the relation.
    pub seed: u64,
    /// First `unique1` of the selection.
    pub lo: u32,
}

impl Default for E4Options {
    fn default() -> Self {
        E4Options {
            quick: false,
            scratch_dir: PathBuf::from("target/vino-bench"),
            devices: Devices::Both,
            tuples: None,
            cache_frames: None,
            lookaheads: None,
            readaheads: None,
            model_scale: None,
            model_track_buffer_kb: None,
            plain_repeats: None,
            fifo_comparison: true,
            both: None,
            seed: 1998,
            lo: 0,
        }
    }
}

impl E4Options {
    pub fn quick() -> Self {
        E4Options {
            quick: true,
            ..Self::default()
        }
    }
}

/// What was run, after the options were resolved.
#[derive(Clone, Debug, Serialize)]
pub struct E4Config {
    pub quick: bool,
    pub tuples: usize,
    pub tuple_bytes: usize,
    pub relation_bytes: u64,
    pub relation_pages: u64,
    /// Records query 6 selects (10%).
    pub selected: usize,
    pub lo: u32,
    pub cache_frames: usize,
    pub seed: u64,
    pub model_scale: f64,
    pub model_track_buffer_kb: u32,
    pub plain_repeats: usize,
    pub image: String,
}

/// A device the experiment ran on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// The image file itself, `O_DIRECT`.
    Plain,
    /// The ST32272N model over the image.
    Model,
}

impl DeviceKind {
    pub fn label(self) -> &'static str {
        match self {
            DeviceKind::Plain => "plain device",
            DeviceKind::Model => "ST32272N model",
        }
    }
}

/// The policy of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    Lru,
    LookAhead,
    ReadAhead,
    /// Read-ahead and look-ahead grafts together: `param` blocks of read-ahead, `lookahead`
    /// records spared.
    Both,
}

/// How the policy runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protection {
    /// Nothing grafted.
    None,
    /// A Wasm graft inside its transaction.
    Protected,
    /// The same policy in native code, no transaction.
    Unprotected,
}

impl Protection {
    pub fn label(self) -> &'static str {
        match self {
            Protection::None => "-",
            Protection::Protected => "protected",
            Protection::Unprotected => "unprotected",
        }
    }
}

/// How the I/O scheduler ordered the disk requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskOrder {
    /// The default elevator.
    Elevator,
    /// First come, first served (a FIFO `disk.pick_request` graft).
    Fifo,
}

/// What a graft (or native policy) did during a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GraftRun {
    pub invocations: u64,
    /// Invocations whose answer was refused (for look-ahead: every candidate was needed).
    pub failures: u64,
    pub time_ns: u64,
    pub last_error: Option<String>,
    /// The kernel unloaded the graft for failing.
    pub unloaded: bool,
}

impl GraftRun {
    /// Two grafts of one run counted together (read-ahead and look-ahead).
    fn merge(a: Option<GraftRun>, b: Option<GraftRun>) -> Option<GraftRun> {
        match (a, b) {
            (Some(a), Some(b)) => Some(GraftRun {
                invocations: a.invocations + b.invocations,
                failures: a.failures + b.failures,
                time_ns: a.time_ns + b.time_ns,
                last_error: a.last_error.or(b.last_error),
                unloaded: a.unloaded || b.unloaded,
            }),
            (a, b) => a.or(b),
        }
    }
}

impl From<GraftStats> for GraftRun {
    fn from(s: GraftStats) -> Self {
        GraftRun {
            invocations: s.invocations,
            failures: s.failures,
            time_ns: s.time_ns,
            last_error: s.last_error,
            unloaded: false,
        }
    }
}

/// One run of query 6.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub policy: Policy,
    pub protection: Protection,
    /// Look-ahead records or read-ahead blocks.
    pub param: Option<u64>,
    /// Look-ahead records of a [`Policy::Both`] run.
    pub lookahead: Option<u64>,
    pub order: DiskOrder,
    /// Records read and checked (their `unique1` is the key the index promised).
    pub records: u64,
    /// The process's cache counters (page misses are the thesis' page faults; the index's pages
    /// are included).
    pub cache: CacheCounters,
    pub graft: Option<GraftRun>,
    /// Wall time of the query (median of the repetitions), ns.
    pub wall_ns: u64,
    pub wall_min_ns: u64,
    pub wall_max_ns: u64,
    /// The time reported: wall time on the plain device; on the model, the disk's modeled busy
    /// time (see the module documentation).
    pub time_ns: u64,
    /// Wall time divided by the model's time scale (the wall time on the plain device).
    pub elapsed_ns: u64,
    pub repeats: usize,
    /// Device reads during the query (requests and blocks) and the device's busy time (modeled
    /// service time on the model).
    pub device_reads: u64,
    pub device_blocks_read: u64,
    pub device_busy_ns: u64,
    /// Times the I/O scheduler chose among waiting requests, and how often it did not pick the
    /// oldest.
    pub sched_decisions: u64,
    pub sched_reorderings: u64,
    /// Head travel between dispatched requests, in blocks.
    pub head_travel_blocks: u64,
    /// The model's counters (model only).
    pub model: Option<ModelDelta>,
}

/// What the disk model counted during a run.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ModelDelta {
    pub requests: u64,
    pub seeks: u64,
    pub seek_cylinders: u64,
    pub track_buffer_hits: u64,
    pub seek_ns: u64,
    pub rotation_ns: u64,
    pub service_ns: u64,
}

impl ModelDelta {
    fn between(a: &ModelStats, b: &ModelStats) -> Self {
        ModelDelta {
            requests: b.requests - a.requests,
            seeks: b.seeks - a.seeks,
            seek_cylinders: b.seek_cylinders - a.seek_cylinders,
            track_buffer_hits: b.track_buffer_hits - a.track_buffer_hits,
            seek_ns: b.seek_ns - a.seek_ns,
            rotation_ns: b.rotation_ns - a.rotation_ns,
            service_ns: b.service_ns - a.service_ns,
        }
    }
}

/// The runs on one device.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceRuns {
    pub kind: DeviceKind,
    pub description: String,
    /// `O_DIRECT` in effect on the image.
    pub direct: bool,
    pub backend: String,
    pub queue_depth: usize,
    /// Time scale of the model.
    pub scale: Option<f64>,
    pub runs: Vec<RunResult>,
}

impl DeviceRuns {
    /// The LRU run.
    pub fn lru(&self) -> Option<&RunResult> {
        self.runs.iter().find(|r| r.policy == Policy::Lru)
    }

    /// The run of `policy` at `param` with `protection` and the elevator.
    pub fn find(&self, policy: Policy, protection: Protection, param: u64) -> Option<&RunResult> {
        self.runs.iter().find(|r| {
            r.policy == policy && r.protection == protection && r.param == Some(param) && r.order == DiskOrder::Elevator
        })
    }

    /// Runs of `policy` with `protection` and the elevator, by parameter.
    pub fn series(&self, policy: Policy, protection: Protection) -> Vec<&RunResult> {
        self.runs
            .iter()
            .filter(|r| r.policy == policy && r.protection == protection && r.order == DiskOrder::Elevator)
            .collect()
    }
}

/// The report of E4.
#[derive(Clone, Debug, Serialize)]
pub struct E4Report {
    pub config: E4Config,
    pub devices: Vec<DeviceRuns>,
    pub notes: Vec<String>,
}

impl E4Report {
    pub fn device(&self, kind: DeviceKind) -> Option<&DeviceRuns> {
        self.devices.iter().find(|d| d.kind == kind)
    }

    /// One report from several of the same experiment, run at different times (E9 takes turns
    /// with Linux's side): each run is the one of median time among its repetitions, its range
    /// and count over all of them.
    pub fn merge(mut reports: Vec<E4Report>) -> Option<E4Report> {
        let mut merged = reports.pop()?;
        for (d, device) in merged.devices.iter_mut().enumerate() {
            for (i, run) in device.runs.iter_mut().enumerate() {
                let mut all: Vec<&RunResult> = reports
                    .iter()
                    .filter_map(|r| r.devices.get(d)?.runs.get(i))
                    .chain(std::iter::once(&*run))
                    .collect();
                assert!(
                    all.iter().all(|r| r.policy == run.policy && r.param == run.param),
                    "merged reports ran the same runs in the same order"
                );
                all.sort_by_key(|r| r.time_ns);
                let mut median = all[all.len() / 2].clone();
                median.wall_min_ns = all.iter().map(|r| r.wall_min_ns).min().unwrap_or(median.wall_min_ns);
                median.wall_max_ns = all.iter().map(|r| r.wall_max_ns).max().unwrap_or(median.wall_max_ns);
                median.repeats = all.iter().map(|r| r.repeats).sum();
                *run = median;
            }
        }
        merged.config.plain_repeats += reports.iter().map(|r| r.config.plain_repeats).sum::<usize>();
        merged.notes = tables::notes(&merged);
        Some(merged)
    }
}

/// Deletes the image when the experiment ends, however it ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn sys<T>(r: vino_kernel::SysResult<T>, what: impl FnOnce() -> String) -> Result<T> {
    r.map_err(|e| anyhow::anyhow!("{}: {e}", what()))
}

/// The thesis' look-ahead values scaled to a relation of `tuples` (the cache scales with it).
pub fn scaled_lookaheads(tuples: usize) -> Vec<u64> {
    THESIS_LOOKAHEADS
        .iter()
        .map(|&n| (n as f64 * tuples as f64 / FULL_TUPLES as f64).round() as u64)
        .collect()
}

/// Runs E4.
pub fn run(opts: &E4Options, progress: &mut dyn FnMut(&str)) -> Result<E4Report> {
    let tuples = opts.tuples.unwrap_or(if opts.quick { 20_000 } else { FULL_TUPLES });
    ensure!(tuples >= 100, "E4 needs at least 100 tuples");
    let frames = opts
        .cache_frames
        .unwrap_or_else(|| ((FULL_FRAMES as f64 * tuples as f64 / FULL_TUPLES as f64).round() as usize).max(16));
    let scale = opts.model_scale.unwrap_or(if opts.quick { 0.1 } else { 0.15 });
    let plain_repeats = opts.plain_repeats.unwrap_or(3).max(1);
    let track_buffer_kb = opts.model_track_buffer_kb.unwrap_or_else(|| {
        let p = DiskParams::st32272n();
        p.sectors_per_track * p.sector_bytes / 1024
    });
    let relation = Relation::generate(tuples, opts.seed);
    let selection = relation.query6(opts.lo);
    let lo = relation.unique1[selection[0] as usize];
    let relation_pages = relation.bytes().div_ceil(4096);
    ensure!(
        selection.len() <= MAX_RECORDS,
        "{} selected records: the grafts take at most {MAX_RECORDS}",
        selection.len()
    );
    ensure!(
        relation_pages as usize <= MAX_PAGES,
        "{relation_pages} pages: the grafts track at most {MAX_PAGES}"
    );

    std::fs::create_dir_all(&opts.scratch_dir).with_context(|| format!("creating {}", opts.scratch_dir.display()))?;
    let image = opts
        .scratch_dir
        .join(format!("e4-wisconsin-{}-{}.img", std::process::id(), tuples));
    let _scratch = Scratch(image.clone());
    let config = E4Config {
        quick: opts.quick,
        tuples,
        tuple_bytes: TUPLE_BYTES,
        relation_bytes: relation.bytes(),
        relation_pages,
        selected: selection.len(),
        lo,
        cache_frames: frames,
        seed: opts.seed,
        model_scale: scale,
        model_track_buffer_kb: track_buffer_kb,
        plain_repeats,
        image: image.display().to_string(),
    };

    progress(&format!(
        "E4: writing the relation ({tuples} tuples, {:.1} MB) and its index",
        relation.bytes() as f64 / 1e6
    ));
    write_image(&image, &relation)?;

    progress("E4: building the grafts (clang --target=wasm32)");
    let build = vino_sdk::BuildOptions::default();
    let la_wasm =
        vino_sdk::build_c_str("lookahead_evict.c", LOOKAHEAD_C, &build).context("building lookahead_evict.c")?;
    let ra_wasm =
        vino_sdk::build_c_str("wisc_readahead.c", READAHEAD_C, &build).context("building wisc_readahead.c")?;
    let fifo_wasm = if opts.fifo_comparison {
        Some(vino_sdk::build_example("fifo", &build).context("building fifo.c")?)
    } else {
        None
    };
    let grafts = Grafts {
        lookahead: la_wasm,
        readahead: ra_wasm,
        fifo: fifo_wasm,
    };
    let query = Query {
        lo,
        count: selection.len(),
    };

    let mut devices = Vec::new();
    for kind in opts.devices.kinds() {
        let (lookaheads, readaheads) = values(opts, kind, tuples, frames);
        let booted = boot(&image, kind, frames, scale, track_buffer_kb)?;
        let repeats = if kind == DeviceKind::Plain { plain_repeats } else { 1 };
        let mut runs = Vec::new();
        let mut specs = vec![Spec {
            policy: Policy::Lru,
            protection: Protection::None,
            param: None,
            lookahead: None,
            order: DiskOrder::Elevator,
        }];
        for protection in [Protection::Protected, Protection::Unprotected] {
            for &n in &lookaheads {
                specs.push(Spec {
                    policy: Policy::LookAhead,
                    protection,
                    param: Some(n),
                    lookahead: None,
                    order: DiskOrder::Elevator,
                });
            }
        }
        for protection in [Protection::Protected, Protection::Unprotected] {
            for &n in &readaheads {
                specs.push(Spec {
                    policy: Policy::ReadAhead,
                    protection,
                    param: Some(n),
                    lookahead: None,
                    order: DiskOrder::Elevator,
                });
            }
        }
        let both = opts.both.clone().unwrap_or_else(|| {
            let ra = readaheads.iter().copied().max().unwrap_or(0);
            let la = scaled_lookaheads(tuples)[6];
            if ra > 0 && la > 0 { vec![(ra, la)] } else { Vec::new() }
        });
        for protection in [Protection::Protected, Protection::Unprotected] {
            for &(ra, la) in &both {
                specs.push(Spec {
                    policy: Policy::Both,
                    protection,
                    param: Some(ra),
                    lookahead: Some(la),
                    order: DiskOrder::Elevator,
                });
            }
        }
        if grafts.fifo.is_some()
            && let Some(&n) = readaheads.iter().max().filter(|&&n| n > 0)
        {
            specs.push(Spec {
                policy: Policy::ReadAhead,
                protection: Protection::Protected,
                param: Some(n),
                lookahead: None,
                order: DiskOrder::Fifo,
            });
        }
        let total = specs.len();
        for (i, spec) in specs.iter().enumerate() {
            let started = Instant::now();
            let r = run_spec(&booted, &grafts, &query, spec, repeats)
                .with_context(|| format!("{}: {}", kind.label(), spec.describe()))?;
            progress(&format!(
                "E4 {} [{}/{}] {}: {} misses, {} ({:.1} s)",
                kind.label(),
                i + 1,
                total,
                spec.describe(),
                r.cache.misses,
                vino_measure::report::fmt_ns(r.time_ns as f64),
                started.elapsed().as_secs_f64()
            ));
            runs.push(r);
        }
        devices.push(DeviceRuns {
            kind,
            description: booted.description.clone(),
            direct: booted.direct,
            backend: format!("{:?}", booted.kernel.io_queue().0),
            queue_depth: booted.kernel.io_queue().1,
            scale: booted.model.as_ref().map(|_| scale),
            runs,
        });
        sys(booted.kernel.shutdown(), || "shutting the kernel down".into())?;
    }
    let mut report = E4Report {
        config,
        devices,
        notes: Vec::new(),
    };
    report.notes = tables::notes(&report);
    Ok(report)
}

/// The look-ahead and read-ahead values for a device.
fn values(opts: &E4Options, kind: DeviceKind, tuples: usize, frames: usize) -> (Vec<u64>, Vec<u64>) {
    let la_all = scaled_lookaheads(tuples);
    let lookaheads = opts.lookaheads.clone().unwrap_or_else(|| {
        if opts.quick && kind == DeviceKind::Model {
            // 0, and the equivalents of 2048, 4096 and 8192 records.
            vec![la_all[0], la_all[5], la_all[6], la_all[7]]
        } else {
            la_all
        }
    });
    // A window of more than about half the cache makes LRU evict prefetched pages before their
    // records come (they enter the cache at the front, a window's worth of reads before they are
    // used): the default values stop at 40% of the cache, which cuts nothing at the thesis' size.
    let fits = |n: &u64| (*n as f64) <= 0.4 * frames as f64;
    let readaheads = opts.readaheads.clone().unwrap_or_else(|| {
        let all: Vec<u64> = READAHEADS.iter().copied().filter(fits).collect();
        if opts.quick && kind == DeviceKind::Model {
            let pick = [0, all.len() / 3, 2 * all.len() / 3, all.len() - 1];
            let mut v: Vec<u64> = pick.iter().map(|&i| all[i]).collect();
            v.dedup();
            v
        } else {
            all
        }
    });
    (lookaheads, readaheads)
}

/// Makes the image: a VINO file system holding the relation and its index, written through the
/// kernel's system calls and synced.
fn write_image(image: &Path, relation: &Relation) -> Result<()> {
    // Room for the relation, the index, the journal and the inode tables.
    let bytes = ((relation.bytes() as f64 * 1.5) as u64 + (16 << 20)).div_ceil(4 << 20) * (4 << 20);
    let dev = Arc::new(FileDevice::create(image, bytes).with_context(|| format!("creating {}", image.display()))?);
    vino_fs::mkfs(&*dev, &vino_fs::MkfsOptions::default()).context("mkfs")?;
    let config = KernelConfig {
        cache_frames: 2048,
        writeback_every: None,
        ..KernelConfig::default()
    };
    let kernel = sys(Kernel::boot(dev as Arc<dyn BlockDevice>, &config), || {
        "booting the kernel".into()
    })?;
    let p = kernel.spawn(Credentials::root());
    sys(p.mkdir(DIR, 0o755), || format!("mkdir {DIR}"))?;
    let put = |path: &str, data: &[u8]| -> Result<()> {
        let fd = sys(p.open(path, OpenFlags::create()), || format!("creating {path}"))?;
        for chunk in data.chunks(1 << 20) {
            let n = sys(p.write(fd, chunk), || format!("writing {path}"))?;
            ensure!(n == chunk.len(), "short write to {path}: {n} of {}", chunk.len());
        }
        sys(p.fsync(fd), || format!("fsync {path}"))?;
        sys(p.close(fd), || format!("closing {path}"))
    };
    put(RELATION, &relation.file())?;
    let index: Vec<u8> = relation.index().iter().flat_map(|p| p.to_le_bytes()).collect();
    put(INDEX, &index)?;
    sys(kernel.shutdown(), || "unmounting".into())
}

struct Booted {
    kernel: Arc<Kernel>,
    device: Arc<dyn BlockDevice>,
    model: Option<Arc<DiskModel<FileDevice>>>,
    scale: f64,
    description: String,
    direct: bool,
}

fn boot(image: &Path, kind: DeviceKind, frames: usize, scale: f64, track_buffer_kb: u32) -> Result<Booted> {
    // The look-ahead graft's refusals ("every candidate is needed") are its answer, not a fault to
    // be punished: keep it loaded whatever happens, as the thesis did, and count the refusals.
    let runtime = RuntimeConfig {
        max_consecutive_failures: u32::MAX,
        failure_rate_min: u32::MAX,
        // As the thesis measured: every graft call in a transaction (7.3.3, note 4).
        always_transact: true,
        ..RuntimeConfig::default()
    };
    match kind {
        DeviceKind::Plain => {
            let dev = Arc::new(FileDevice::open(image).with_context(|| format!("opening {}", image.display()))?);
            let direct = dev.direct();
            let config = KernelConfig {
                cache_frames: frames,
                writeback_every: None,
                runtime,
                ..KernelConfig::default()
            };
            let device = dev.clone() as Arc<dyn BlockDevice>;
            let kernel = sys(Kernel::boot(device.clone(), &config), || {
                "booting on the plain device".into()
            })?;
            let description = format!(
                "{} ({}, {:?} backend, {} requests in flight)",
                image.display(),
                if direct {
                    "O_DIRECT"
                } else {
                    "buffered: the file system refused O_DIRECT"
                },
                kernel.io_queue().0,
                config.queue_depth
            );
            Ok(Booted {
                kernel,
                device,
                model: None,
                scale: 1.0,
                description,
                direct,
            })
        }
        DeviceKind::Model => {
            // The model sleeps about a millisecond per request: the threads the kernel starts
            // now inherit a fine timer slack, so those sleeps end when the model says.
            let _slack = FineTimerSlack::new();
            let file = FileDevice::open_with(
                image,
                FileOptions {
                    direct: vino_blockdev::Direct::Never,
                    read_only: false,
                },
            )
            .with_context(|| format!("opening {}", image.display()))?;
            let params = DiskParams {
                track_buffer_kb,
                ..DiskParams::st32272n()
            };
            let model = Arc::new(
                DiskModel::new(file, params.clone(), Timing::Sleep { scale }).context("building the disk model")?,
            );
            let config = KernelConfig {
                cache_frames: frames,
                queue_depth: 1,
                writeback_every: None,
                runtime,
                ..KernelConfig::default()
            };
            let device = model.clone() as Arc<dyn BlockDevice>;
            let kernel = sys(Kernel::boot(device.clone(), &config), || {
                "booting on the disk model".into()
            })?;
            let description = format!(
                "{} model ({} rpm, {} ms average access, {} KB track buffer) over {}, clock scaled by {scale}, one request at a time",
                params.name,
                params.rpm,
                params.average_seek_ms + params.revolution_ms() / 2.0,
                params.track_buffer_kb,
                image.display()
            );
            Ok(Booted {
                kernel,
                device,
                model: Some(model),
                scale,
                description,
                direct: false,
            })
        }
    }
}

/// Sets this thread's timer slack to 1 ns while it lives (threads started meanwhile keep it);
/// the default 50 µs would add about 5% to each modeled request at the scales used.
struct FineTimerSlack(libc::c_int);

impl FineTimerSlack {
    fn new() -> Self {
        // SAFETY: PR_GET/SET_TIMERSLACK read or set a number of the calling thread.
        unsafe {
            let old = libc::prctl(
                libc::PR_GET_TIMERSLACK,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            );
            libc::prctl(
                libc::PR_SET_TIMERSLACK,
                1 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            );
            FineTimerSlack(old)
        }
    }
}

impl Drop for FineTimerSlack {
    fn drop(&mut self) {
        if self.0 > 0 {
            // SAFETY: as above.
            unsafe {
                libc::prctl(
                    libc::PR_SET_TIMERSLACK,
                    self.0 as libc::c_ulong,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                )
            };
        }
    }
}

struct Grafts {
    lookahead: Vec<u8>,
    readahead: Vec<u8>,
    fifo: Option<Vec<u8>>,
}

struct Query {
    /// `unique1` of the first selected record.
    lo: u32,
    count: usize,
}

#[derive(Clone, Copy, Debug)]
struct Spec {
    policy: Policy,
    protection: Protection,
    param: Option<u64>,
    lookahead: Option<u64>,
    order: DiskOrder,
}

impl Spec {
    fn describe(&self) -> String {
        let what = match (self.policy, self.param) {
            (Policy::Lru, _) => "LRU".to_string(),
            (Policy::LookAhead, Some(n)) => format!("look-ahead {n} records"),
            (Policy::ReadAhead, Some(n)) => format!("read-ahead {n} blocks"),
            (Policy::Both, Some(n)) => format!(
                "read-ahead {n} blocks + look-ahead {} records",
                self.lookahead.unwrap_or(0)
            ),
            (_, None) => format!("{:?}", self.policy),
        };
        let mut s = match self.protection {
            Protection::None => what,
            p => format!("{what}, {}", p.label()),
        };
        if self.order == DiskOrder::Fifo {
            s.push_str(", FIFO disk order");
        }
        s
    }
}

/// Runs one spec `repeats` times; the counters of the first repetition, the median time.
fn run_spec(b: &Booted, grafts: &Grafts, q: &Query, spec: &Spec, repeats: usize) -> Result<RunResult> {
    let admin = b.kernel.spawn(Credentials::root());
    if spec.order == DiskOrder::Fifo {
        let wasm = grafts.fifo.as_ref().expect("the FIFO graft was built");
        sys(admin.graft_load("disk.pick_request", wasm), || {
            "loading the FIFO disk graft".into()
        })?;
    }
    let result = (|| {
        let mut first: Option<RunResult> = None;
        let mut walls = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let r = run_once(b, grafts, q, spec)?;
            walls.push(r.wall_ns);
            first.get_or_insert(r);
        }
        walls.sort_unstable();
        let mut r = first.expect("at least one repetition");
        r.wall_ns = walls[walls.len() / 2];
        r.wall_min_ns = walls[0];
        r.wall_max_ns = walls[walls.len() - 1];
        r.elapsed_ns = (r.wall_ns as f64 / b.scale) as u64;
        if b.model.is_none() {
            r.time_ns = r.wall_ns;
        }
        r.repeats = repeats;
        Ok(r)
    })();
    if spec.order == DiskOrder::Fifo {
        let _ = admin.graft_unload("disk.pick_request");
    }
    b.kernel.exit(admin.pid());
    result
}

/// The policy a run binds, kept to start it once the plan is known.
enum Bound {
    Nothing,
    LookAheadGraft,
    LookAheadNative(Arc<LookAheadNative>),
    ReadAheadGraft(String),
    ReadAheadNative(Arc<ReadAheadNative>),
    BothGrafts(String),
    BothNative(Arc<LookAheadNative>, Arc<ReadAheadNative>),
}

/// One cold run of query 6.
fn run_once(b: &Booted, grafts: &Grafts, q: &Query, spec: &Spec) -> Result<RunResult> {
    let kernel = &b.kernel;
    kernel.drop_clean_pages().context("dropping the cache")?;
    // An unprivileged application: it may graft only its own objects.
    let p: Arc<Process> = kernel.spawn(Credentials::user(1000, 1000));
    let result = query(b, grafts, q, spec, &p);
    kernel.exit(p.pid());
    result
}

fn query(b: &Booted, grafts: &Grafts, q: &Query, spec: &Spec, p: &Arc<Process>) -> Result<RunResult> {
    Ok(query_with(b, grafts, q, spec, p, &Extra::default())?.0)
}

/// What a run does besides its spec: the look-ahead graft of `shadow` records tried in shadow
/// beside the live policy (`vino graft try`), and the bound look-ahead graft recorded.
#[derive(Default, Clone, Copy)]
struct Extra {
    shadow: Option<u64>,
    record: bool,
}

/// What the extras gave: the shadow's report and the recording.
#[derive(Default)]
struct ExtraOut {
    tried: Option<vino_cache::VictimTryReport>,
    recording: Option<vino_graft::record::Recording>,
}

fn query_with(
    b: &Booted,
    grafts: &Grafts,
    q: &Query,
    spec: &Spec,
    p: &Arc<Process>,
    extra: &Extra,
) -> Result<(RunResult, ExtraOut)> {
    let kernel = &b.kernel;
    let idx_fd = sys(p.open(INDEX, OpenFlags::read_only()), || format!("opening {INDEX}"))?;
    let rel_fd = sys(p.open(RELATION, OpenFlags::read_only()), || {
        format!("opening {RELATION}")
    })?;
    let object = sys(p.fstat(rel_fd), || "fstat".into())?.ino;
    let n = spec.param.unwrap_or(0);
    let la_n = spec.lookahead.unwrap_or(0);
    let ra_point = format!("file.compute_ra/{rel_fd}");
    let load_la = || {
        sys(p.graft_load("vas.pick_victim", &grafts.lookahead), || {
            "loading lookahead_evict".into()
        })
    };
    let load_ra = || {
        sys(p.graft_load(&ra_point, &grafts.readahead), || {
            "loading wisc_readahead".into()
        })
    };
    let bind_la = || {
        let policy = LookAheadNative::new();
        let slot = p.pick_victim();
        slot.bind_native(policy.clone() as Arc<dyn NativePolicy<PickVictim>>, false);
        policy
    };
    let bind_ra = || -> Result<Arc<ReadAheadNative>> {
        let policy = ReadAheadNative::new();
        let slot = sys(p.read_ahead(rel_fd), || "the relation's read-ahead graftpoint".into())?;
        slot.bind_native(policy.clone() as Arc<dyn NativePolicy<ComputeRa>>, false);
        Ok(policy)
    };
    let bound = match (spec.policy, spec.protection) {
        (Policy::Lru, _) | (_, Protection::None) => Bound::Nothing,
        (Policy::LookAhead, Protection::Protected) => {
            load_la()?;
            Bound::LookAheadGraft
        }
        (Policy::LookAhead, Protection::Unprotected) => Bound::LookAheadNative(bind_la()),
        (Policy::ReadAhead, Protection::Protected) => {
            load_ra()?;
            Bound::ReadAheadGraft(ra_point.clone())
        }
        (Policy::ReadAhead, Protection::Unprotected) => Bound::ReadAheadNative(bind_ra()?),
        (Policy::Both, Protection::Protected) => {
            load_la()?;
            load_ra()?;
            Bound::BothGrafts(ra_point.clone())
        }
        (Policy::Both, Protection::Unprotected) => Bound::BothNative(bind_la(), bind_ra()?),
    };
    if extra.record {
        sys(
            p.graft_record_start("vas.pick_victim", vino_graft::record::DEFAULT_LIMIT),
            || "recording the look-ahead graft".into(),
        )?;
    }
    if extra.shadow.is_some() {
        sys(
            p.graft_try_start(None, "vas.pick_victim", &grafts.lookahead, Default::default()),
            || "trying the look-ahead graft in shadow".into(),
        )?;
    }
    let dev0 = b.device.stats();
    let sched0 = kernel.io_stats();
    let model0 = b.model.as_ref().map(|m| m.model_stats());

    let started = Instant::now();
    // The index: the positions of the selected tuples, in key order.
    let mut index = vec![0u8; q.count * 4];
    let mut got = 0;
    while got < index.len() {
        let n = sys(
            p.pread(idx_fd, &mut index[got..], u64::from(q.lo) * 4 + got as u64),
            || "reading the index".into(),
        )?;
        ensure!(n > 0, "the index ends early");
        got += n;
    }
    let offsets: Vec<u64> = index
        .chunks_exact(4)
        .map(|c| offset_of(u64::from(u32::from_le_bytes(c.try_into().expect("4 bytes")))))
        .collect();
    let cursor = match &bound {
        Bound::Nothing => Cursor::None,
        Bound::LookAheadGraft => {
            policies::start_lookahead_graft(p, object, n, &page_plan(&offsets, TUPLE_BYTES as u64))?
        }
        Bound::LookAheadNative(policy) => {
            policy.start(object, n, page_plan(&offsets, TUPLE_BYTES as u64));
            Cursor::Native(policy.cursor().clone())
        }
        Bound::ReadAheadGraft(point) => {
            policies::start_readahead_graft(p, point, n, TUPLE_BYTES as u64, &offsets)?;
            Cursor::None
        }
        Bound::ReadAheadNative(policy) => {
            policy.start(n, TUPLE_BYTES as u64, offsets.clone());
            Cursor::None
        }
        Bound::BothGrafts(point) => {
            policies::start_readahead_graft(p, point, n, TUPLE_BYTES as u64, &offsets)?;
            policies::start_lookahead_graft(p, object, la_n, &page_plan(&offsets, TUPLE_BYTES as u64))?
        }
        Bound::BothNative(la, ra) => {
            ra.start(n, TUPLE_BYTES as u64, offsets.clone());
            la.start(object, la_n, page_plan(&offsets, TUPLE_BYTES as u64));
            Cursor::Native(la.cursor().clone())
        }
    };
    let shadow_cursor = match extra.shadow {
        Some(n) => policies::start_lookahead_graft_at(
            p,
            "vas.pick_victim#try",
            object,
            n,
            &page_plan(&offsets, TUPLE_BYTES as u64),
        )?,
        None => Cursor::None,
    };
    let mut tuple = [0u8; TUPLE_BYTES];
    for (i, &off) in offsets.iter().enumerate() {
        cursor.set(i as u64)?;
        shadow_cursor.set(i as u64)?;
        let n = sys(p.pread(rel_fd, &mut tuple, off), || {
            format!("reading the record at {off}")
        })?;
        let want = q.lo + i as u32;
        if n != TUPLE_BYTES || unique1_of(&tuple) != want {
            bail!(
                "record {i} at offset {off}: read {n} bytes with unique1 {}, expected {want}",
                unique1_of(&tuple)
            );
        }
    }
    let wall = started.elapsed().as_nanos() as u64;
    let mut out = ExtraOut::default();
    if extra.shadow.is_some() {
        match sys(p.graft_try_stop(None, "vas.pick_victim"), || {
            "stopping the shadow".into()
        })? {
            vino_kernel::graft_try::TryReport::Victim(r) => out.tried = Some(r),
            other => bail!("the shadow of vas.pick_victim gave {other:?}"),
        }
    }
    if extra.record {
        out.recording = Some(sys(p.graft_record_stop("vas.pick_victim"), || {
            "taking the recording".into()
        })?);
    }

    let dev1 = b.device.stats();
    let sched1 = kernel.io_stats();
    let model = match (&b.model, model0) {
        (Some(m), Some(m0)) => Some(ModelDelta::between(&m0, &m.model_stats())),
        _ => None,
    };
    let events = p.graft_events();
    let graft = match &bound {
        Bound::Nothing => None,
        Bound::LookAheadGraft => graft_run(p, "vas.pick_victim"),
        Bound::ReadAheadGraft(point) => graft_run(p, point),
        Bound::LookAheadNative(_) => p.pick_victim().stats().map(GraftRun::from),
        Bound::ReadAheadNative(_) => sys(p.read_ahead(rel_fd), || "read-ahead slot".into())?
            .stats()
            .map(GraftRun::from),
        Bound::BothGrafts(point) => GraftRun::merge(graft_run(p, "vas.pick_victim"), graft_run(p, point)),
        Bound::BothNative(..) => GraftRun::merge(
            p.pick_victim().stats().map(GraftRun::from),
            sys(p.read_ahead(rel_fd), || "read-ahead slot".into())?
                .stats()
                .map(GraftRun::from),
        ),
    }
    .map(|mut g| {
        g.unloaded = !events.is_empty();
        g
    });
    let cache = p.cache_counters();
    let result = RunResult {
        policy: spec.policy,
        protection: spec.protection,
        param: spec.param,
        lookahead: spec.lookahead,
        order: spec.order,
        records: offsets.len() as u64,
        cache,
        graft,
        wall_ns: wall,
        wall_min_ns: wall,
        wall_max_ns: wall,
        time_ns: if b.model.is_some() { busy(&dev0, &dev1) } else { wall },
        elapsed_ns: (wall as f64 / b.scale) as u64,
        repeats: 1,
        device_reads: dev1.reads - dev0.reads,
        device_blocks_read: dev1.blocks_read - dev0.blocks_read,
        device_busy_ns: busy(&dev0, &dev1),
        sched_decisions: sched1.decisions - sched0.decisions,
        sched_reorderings: sched1.reorderings - sched0.reorderings,
        head_travel_blocks: sched1.head_travel_blocks - sched0.head_travel_blocks,
        model,
    };
    Ok((result, out))
}

fn busy(a: &DeviceStats, b: &DeviceStats) -> u64 {
    b.busy_ns.saturating_sub(a.busy_ns)
}

fn graft_run(p: &Process, point: &str) -> Option<GraftRun> {
    p.graft_stats(point).ok().and_then(|i| i.stats).map(GraftRun::from)
}
