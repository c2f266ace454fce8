//! Experiment E5: file unlink events against polling (Small 1998, 7.4, tables 17-24).
//!
//! An application keeps track of a list of files and acts whenever one is unlinked. It can poll
//! the files' status (`fstat` on each, as often as it likes) or have the kernel tell it: an event
//! graft on `event.fs.unlink` with a data-driven filter of the files' inodes. The thesis measured:
//!
//! * table 17: the cost of raising an unlink event with no handler, and with a handler whose
//!   filter of 1, 2, 3, 10 or 50 files rejects it (VINO's filter was a linear array; ours is a
//!   hash set, so the cost should not grow with the filter);
//! * table 18: the cost of checking the status of 1, 10 and 50 open files;
//! * tables 19 and 20: the break-even ratio of polls to unlinks, `Cost_filter / Cost_poll`
//!   (EQ 5), and the polling interval it means at 1.52 unlinks a second;
//! * tables 21-24: a graft that appends a bookkeeping record to a log file on each unlink,
//!   asynchronously and then with an fsync, as unprotected code in the kernel (here: a native
//!   policy bound to the same slot, writing directly), protected code (the Wasm graft, its write
//!   deferred to its transaction's commit) and user-level code, and the break-even ratio again
//!   with the record's cost: `Cost_event(n) = Cost_filter(n) + n * graft`, `Cost_poll(n) =
//!   Cost_poll(n) + n * user-level write`, as the thesis computed them.
//!
//! User level is measured two ways: the write a polling application does itself when it finds
//! a file gone (`pwrite` of the record, plus `fsync`), and a second process that asks for
//! user-level delivery (`event_subscribe`) and waits in `event_wait`, then does the write: timed
//! from the raise to the write done, one event at a time, so each includes a thread wake-up.
//! The graft times are one invocation each (transaction, record, deferred write at commit), run
//! on the measuring thread; the end-to-end time of the protected graft (raise, queue, the event
//! thread's invocation) is reported beside them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde::Serialize;
use vino_fs::MkfsOptions;
use vino_graft::{GraftPoint, Invalid, NativePolicy};
use vino_kernel::{
    Credentials, EventEnv, EventFilter, EventKind, Fd, FsEvent, Kernel, OpenFlags, Process, UnlinkEvent, UnlinkRecord,
};

use crate::e6_layout::{DeviceKind, Disk, MIB, image_path};
use vino_measure::report::{self, Table, fmt_ns};
use vino_measure::{self as measure, Stats, black_box};

/// Unlinks a second while the VINO kernel was built (the thesis' estimate of a busy system).
pub const UNLINKS_PER_SECOND: f64 = 1.52;

/// The thesis' table 17: filter size (0: no handler), cost in µs.
pub const THESIS_FILTER: &[(usize, f64)] = &[(0, 9.6), (1, 14.4), (2, 14.7), (3, 15.1), (10, 15.9), (50, 22.4)];
/// Table 18, NetBSD 1.2.1 (the figures the thesis used): files, total µs.
pub const THESIS_POLL: &[(usize, f64)] = &[(1, 15.3), (10, 93.1), (50, 481.8)];
/// Table 19: files, break-even ratio.
pub const THESIS_BREAK_EVEN: &[(usize, f64)] = &[(1, 0.92), (10, 0.17), (50, 0.05)];
/// Tables 21 and 23: unprotected, protected, user-level (µs).
pub const THESIS_ASYNC: [f64; 3] = [69.0, 204.0, 328.0];
pub const THESIS_SYNC: [f64; 3] = [6966.0, 6998.0, 8247.0];
/// Tables 22 and 24: files, break-even ratio.
pub const THESIS_BREAK_EVEN_ASYNC: &[(usize, f64)] = &[(1, 0.64), (10, 0.61), (50, 0.60)];
pub const THESIS_BREAK_EVEN_SYNC: &[(usize, f64)] = &[(1, 0.85), (10, 0.85), (50, 0.85)];

/// What E5 runs.
#[derive(Clone, Debug)]
pub struct E5Options {
    pub quick: bool,
    /// Where the disk image goes (not a tmpfs: `O_DIRECT`).
    pub scratch_dir: PathBuf,
    pub image_bytes: u64,
    /// Filter sizes of table 17.
    pub filter_sizes: Vec<usize>,
    /// Numbers of files polled (tables 18, 19, 22, 24).
    pub poll_sizes: Vec<usize>,
    /// Measured rounds of the fast operations (filtering, polling).
    pub rounds: usize,
    /// Invocations timed one by one for the asynchronous graft.
    pub async_events: usize,
    /// ... and for the synchronous one (each forces the log to the device).
    pub sync_events: usize,
}

impl E5Options {
    pub fn new(quick: bool) -> E5Options {
        E5Options {
            quick,
            scratch_dir: PathBuf::from("target/vino-bench"),
            image_bytes: 64 * MIB,
            filter_sizes: vec![1, 2, 3, 10, 50],
            poll_sizes: vec![1, 10, 50],
            rounds: if quick { 5 } else { 21 },
            async_events: if quick { 200 } else { 2000 },
            sync_events: if quick { 10 } else { 200 },
        }
    }
}

impl Default for E5Options {
    fn default() -> Self {
        E5Options::new(false)
    }
}

/// Table 17: raising an unlink event that the filter rejects.
#[derive(Clone, Debug, Serialize)]
pub struct FilterCost {
    /// Files in the filter; 0: no handler at all.
    pub files: usize,
    pub cost: Stats,
}

/// Table 18: checking the status of `files` open files.
#[derive(Clone, Debug, Serialize)]
pub struct PollCost {
    pub files: usize,
    pub cost: Stats,
}

/// One break-even point: polls per unlink at which both approaches cost the same.
#[derive(Clone, Debug, Serialize)]
pub struct BreakEven {
    pub files: usize,
    pub event_ns: f64,
    pub poll_ns: f64,
    /// `event_ns / poll_ns`: poll less often than this many times per unlink and polling wins.
    pub ratio: f64,
    /// At [`UNLINKS_PER_SECOND`], the polling interval that breaks even.
    pub seconds_between_polls: f64,
}

/// Tables 21 and 23: the bookkeeping work per unlink.
#[derive(Clone, Debug, Serialize)]
pub struct GraftTimes {
    pub sync: bool,
    /// A native policy bound to the slot, writing directly.
    pub unprotected: Stats,
    /// The Wasm graft in its transaction, its write deferred to commit.
    pub protected: Stats,
    /// The protected graft from the raise on: filter, queue, the event thread's invocation.
    pub protected_end_to_end: Stats,
    /// The write a polling application does itself.
    pub user_write: Stats,
    /// A second process woken by `event_wait`, doing the write: from the raise to the write done.
    pub user_events: Stats,
    /// Records found in each log afterwards (every invocation wrote exactly one).
    pub records_ok: bool,
}

/// E5's results.
#[derive(Clone, Debug, Serialize)]
pub struct E5Report {
    pub quick: bool,
    pub device: String,
    pub filter: Vec<FilterCost>,
    pub poll: Vec<PollCost>,
    pub break_even: Vec<BreakEven>,
    pub async_graft: GraftTimes,
    pub sync_graft: GraftTimes,
    pub break_even_async: Vec<BreakEven>,
    pub break_even_sync: Vec<BreakEven>,
}

// ---- the unprotected graft -----------------------------------------------------------------------

/// `sdk/grafts/unlink_log.c` (and `_sync`) as trusted native code: it appends the same record
/// straight into the log (the thesis' unprotected graft used the kernel's internal write).
pub struct NativeUnlinkLog {
    pub fd: Fd,
    pub sync: bool,
}

impl NativePolicy<UnlinkEvent> for NativeUnlinkLog {
    fn decide(&self, env: &EventEnv, ev: &<UnlinkEvent as GraftPoint>::Args<'_>) -> Result<bool, Invalid> {
        let p = env.process().ok_or_else(|| Invalid::new("the owner exited"))?;
        append_record(&p, self.fd, ev, self.sync).map_err(|e| Invalid::new(e.to_string()))?;
        Ok(true)
    }
}

/// Appends `ev`'s record to `fd` (and forces it): the work of every variant.
fn append_record(p: &Process, fd: Fd, ev: &FsEvent, sync: bool) -> Result<()> {
    let bytes = UnlinkRecord::of(ev).to_bytes();
    let at = p.fstat(fd)?.size;
    p.pwrite(fd, &bytes, at)?;
    if sync {
        p.fsync(fd)?;
    }
    Ok(())
}

// ---- the set-up ------------------------------------------------------------------------------------

struct Setup {
    kernel: Arc<Kernel>,
    actor: Arc<Process>,
    /// The file whose unlink event is raised, its directory and name.
    victim: (u64, u64),
    /// Other files, open in `actor` (the poller's descriptors), and their inodes.
    fds: Vec<Fd>,
    inodes: Vec<u64>,
}

fn setup(kernel: Arc<Kernel>, files: usize) -> Result<Setup> {
    let actor = kernel.spawn(Credentials::root());
    actor.mkdir("/watched", 0o755)?;
    let dir = actor.stat("/watched")?.ino;
    let fd = actor.open("/watched/victim", OpenFlags::create())?;
    let victim = actor.inode(fd)?;
    actor.close(fd)?;
    let (mut fds, mut inodes) = (Vec::new(), Vec::new());
    for i in 0..files {
        let fd = actor.open(&format!("/watched/f{i}"), OpenFlags::create())?;
        inodes.push(actor.inode(fd)?);
        fds.push(fd);
    }
    Ok(Setup {
        kernel,
        actor,
        victim: (victim, dir),
        fds,
        inodes,
    })
}

impl Setup {
    fn raise(&self) {
        let (ino, dir) = self.victim;
        self.kernel
            .event_raise(EventKind::Unlink, &self.actor, ino, dir, Some("victim"));
    }

    fn event(&self, pid: u64) -> FsEvent {
        let (inode, parent) = self.victim;
        let name = Some("victim".to_string());
        FsEvent {
            kind: EventKind::Unlink,
            inode,
            parent,
            pid,
            name,
            time_ns: vino_vlt::now_ns(),
            seq: 0,
        }
    }
}

fn fast(opts: &E5Options, f: impl FnMut()) -> Stats {
    let target = if opts.quick {
        Duration::from_millis(2)
    } else {
        Duration::from_millis(20)
    };
    measure::bench_for(opts.rounds, target, f)
}

// ---- tables 17-20 ------------------------------------------------------------------------------

fn filter_costs(opts: &E5Options, s: &Setup, wasm: &[u8]) -> Result<Vec<FilterCost>> {
    let mut out = vec![FilterCost {
        files: 0,
        cost: fast(opts, || s.raise()),
    }];
    let listener = s.kernel.spawn(Credentials::root());
    listener.graft_load("event.fs.unlink", wasm)?;
    for &n in &opts.filter_sizes {
        let inodes: Vec<u64> = s.inodes.iter().copied().cycle().take(n).collect();
        listener.event_filter(EventKind::Unlink, EventFilter { inodes, names: vec![] })?;
        out.push(FilterCost {
            files: n,
            cost: fast(opts, || s.raise()),
        });
    }
    let stats = s.kernel.event_stats().of(EventKind::Unlink);
    anyhow::ensure!(
        stats.delivered_graft == 0,
        "a filter that should reject accepted an event"
    );
    s.kernel.exit(listener.pid());
    Ok(out)
}

fn poll_costs(opts: &E5Options, s: &Setup) -> Result<Vec<PollCost>> {
    let mut out = Vec::new();
    for &n in &opts.poll_sizes {
        let fds = &s.fds[..n.min(s.fds.len())];
        let cost = fast(opts, || {
            for &fd in fds {
                black_box(s.actor.fstat(fd).map(|st| st.nlink).unwrap_or(0));
            }
        });
        out.push(PollCost { files: n, cost });
    }
    Ok(out)
}

fn filter_ns(filter: &[FilterCost], files: usize) -> f64 {
    filter
        .iter()
        .find(|f| f.files == files)
        .map_or(f64::NAN, |f| f.cost.median_ns)
}

fn break_even(files: usize, event_ns: f64, poll_ns: f64) -> BreakEven {
    let ratio = event_ns / poll_ns;
    BreakEven {
        files,
        event_ns,
        poll_ns,
        ratio,
        seconds_between_polls: 1.0 / (ratio * UNLINKS_PER_SECOND),
    }
}

// ---- tables 21-24 ------------------------------------------------------------------------------

fn sample(n: usize, f: impl FnMut() -> Result<()>) -> Result<Stats> {
    measure::try_sample(n, f)
}

fn log_records(p: &Process, fd: Fd) -> Result<usize> {
    Ok(p.fstat(fd)?.size as usize / UnlinkRecord::BYTES)
}

fn graft_times(s: &Setup, wasm: &[u8], sync: bool, n: usize) -> Result<GraftTimes> {
    let k = &s.kernel;
    let owner = k.spawn(Credentials::root());
    let log = owner.open("/log-native", OpenFlags::create())?;
    // Unprotected: the native twin on the same slot.
    let slot = owner.event_slot::<3>()?;
    owner.event_bind_native::<3>(Arc::new(NativeUnlinkLog { fd: log, sync }), false)?;
    let ev = s.event(s.actor.pid());
    let unprotected = sample(n, || {
        anyhow::ensure!(slot.invoke(&ev), "the native policy failed");
        Ok(())
    })?;
    let mut records_ok = log_records(&owner, log)? == n + 1;
    owner.event_unbind(EventKind::Unlink)?;
    // Protected: the C graft.
    owner.graft_load("event.fs.unlink", wasm)?;
    let log = owner.open("/log-graft", OpenFlags::create())?;
    owner.graft_call("event.fs.unlink", "log_set_fd", &[i64::from(log)])?;
    let protected = sample(n, || {
        anyhow::ensure!(slot.invoke(&ev), "the graft aborted");
        Ok(())
    })?;
    records_ok &= log_records(&owner, log)? == n + 1;
    // Protected, from the raise through the event thread.
    let before = log_records(&owner, log)?;
    owner.event_filter(
        EventKind::Unlink,
        EventFilter {
            inodes: vec![s.victim.0],
            names: vec![],
        },
    )?;
    let protected_end_to_end = sample(n, || {
        s.raise();
        k.events_quiesce();
        Ok(())
    })?;
    records_ok &= log_records(&owner, log)? == before + n + 1;
    k.exit(owner.pid());
    // User level: the poller's own write, and a process woken by event_wait.
    let log = s.actor.open("/log-user", OpenFlags::create())?;
    let user_write = sample(n, || append_record(&s.actor, log, &ev, sync))?;
    records_ok &= log_records(&s.actor, log)? == n + 1;
    let (user_events, handled) = user_level(s, sync, n)?;
    records_ok &= handled == n + 1;
    Ok(GraftTimes {
        sync,
        unprotected,
        protected,
        protected_end_to_end,
        user_write,
        user_events,
        records_ok,
    })
}

/// A second process waits for unlink events at user level and writes each record itself; each
/// sample is one event, from the raise until the process reports the write done.
fn user_level(s: &Setup, sync: bool, n: usize) -> Result<(Stats, usize)> {
    let k = &s.kernel;
    let up = k.spawn(Credentials::root());
    up.event_subscribe(EventKind::Unlink)?;
    up.event_filter(
        EventKind::Unlink,
        EventFilter {
            inodes: vec![s.victim.0],
            names: vec![],
        },
    )?;
    let log = up.open("/log-events", OpenFlags::create())?;
    let stop = Arc::new(AtomicBool::new(false));
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let handler = {
        let (up, stop) = (up.clone(), stop.clone());
        std::thread::spawn(move || -> Result<usize> {
            let mut handled = 0;
            while !stop.load(Ordering::Relaxed) {
                for ev in up.event_wait(Duration::from_millis(50)) {
                    append_record(&up, log, &ev, sync)?;
                    handled += 1;
                    let _ = done_tx.send(());
                }
            }
            Ok(handled)
        })
    };
    let stats = sample(n, || {
        s.raise();
        done_rx
            .recv_timeout(Duration::from_secs(30))
            .context("the user-level process did not answer")
    });
    stop.store(true, Ordering::Relaxed);
    let handled = handler
        .join()
        .map_err(|_| anyhow!("the user-level process panicked"))??;
    k.exit(up.pid());
    Ok((stats?, handled))
}

fn break_evens(r: &E5Options, filter: &[FilterCost], poll: &[PollCost], g: Option<&GraftTimes>) -> Vec<BreakEven> {
    poll.iter()
        .filter(|p| r.filter_sizes.contains(&p.files))
        .map(|p| {
            let (graft, user) = g.map_or((0.0, 0.0), |g| (g.protected.median_ns, g.user_write.median_ns));
            let n = p.files as f64;
            break_even(
                p.files,
                filter_ns(filter, p.files) + n * graft,
                p.cost.median_ns + n * user,
            )
        })
        .collect()
}

/// Runs E5 on a fresh image under `opts.scratch_dir`.
pub fn run(opts: &E5Options, progress: &mut dyn FnMut(&str)) -> Result<E5Report> {
    let path = image_path(&opts.scratch_dir, "e5");
    Disk::create_image(&path, opts.image_bytes, &MkfsOptions::default())?;
    let result = run_on(opts, &path, progress);
    let _ = std::fs::remove_file(&path);
    result
}

fn run_on(opts: &E5Options, path: &Path, progress: &mut dyn FnMut(&str)) -> Result<E5Report> {
    let disk = Disk::open(path, DeviceKind::Plain)?;
    let device = format!("image file{}", if disk.direct() { ", O_DIRECT" } else { "" });
    let files = opts
        .filter_sizes
        .iter()
        .chain(&opts.poll_sizes)
        .copied()
        .max()
        .unwrap_or(1);
    let s = setup(disk.boot(1024)?, files)?;
    let build = |name: &str| vino_sdk::build_example(name, &vino_sdk::BuildOptions::default());
    let (async_wasm, sync_wasm) = (build("unlink_log")?, build("unlink_log_sync")?);
    progress("E5: filtering cost (table 17)");
    let filter = filter_costs(opts, &s, &async_wasm)?;
    progress("E5: polling cost (table 18)");
    let poll = poll_costs(opts, &s)?;
    progress("E5: asynchronous bookkeeping graft (table 21)");
    let async_graft = graft_times(&s, &async_wasm, false, opts.async_events)?;
    progress("E5: synchronous bookkeeping graft (table 23)");
    let sync_graft = graft_times(&s, &sync_wasm, true, opts.sync_events)?;
    s.kernel.shutdown()?;
    Ok(E5Report {
        quick: opts.quick,
        device,
        break_even: break_evens(opts, &filter, &poll, None),
        break_even_async: break_evens(opts, &filter, &poll, Some(&async_graft)),
        break_even_sync: break_evens(opts, &filter, &poll, Some(&sync_graft)),
        filter,
        poll,
        async_graft,
        sync_graft,
    })
}

// ---- reporting ---------------------------------------------------------------------------------

fn thesis(table: &[(usize, f64)], files: usize) -> String {
    table
        .iter()
        .find(|t| t.0 == files)
        .map_or("-".into(), |t| format!("{:.2}", t.1))
}

fn us(table: &[(usize, f64)], files: usize) -> String {
    table
        .iter()
        .find(|t| t.0 == files)
        .map_or("-".into(), |t| format!("{} µs", t.1))
}

fn break_even_table(title: &str, rows: &[BreakEven], seed: &[(usize, f64)]) -> Table {
    let mut t = Table::new(
        title,
        &[
            "files",
            "Cost_event",
            "Cost_poll",
            "poll:unlink break-even",
            "s between polls at 1.52/s",
            "thesis",
        ],
    );
    for b in rows {
        t.row([
            b.files.to_string(),
            fmt_ns(b.event_ns),
            fmt_ns(b.poll_ns),
            format!("{:.3}", b.ratio),
            format!("{:.2}", b.seconds_between_polls),
            thesis(seed, b.files),
        ]);
    }
    t.note("poll less often than the break-even ratio times the unlink rate and polling is cheaper");
    t
}

impl E5Report {
    /// The report as printable tables, the thesis' figures beside ours.
    pub fn tables(&self) -> Vec<Table> {
        let mut out = Vec::new();
        let mut t = Table::new(
            "E5: cost of raising an unlink event the filter rejects (thesis table 17)",
            &["filter (files)", "cost", "per file", "thesis"],
        );
        for f in &self.filter {
            let per = if f.files == 0 {
                "-".into()
            } else {
                fmt_ns(f.cost.median_ns / f.files as f64)
            };
            let label = if f.files == 0 {
                "no handler".into()
            } else {
                f.files.to_string()
            };
            t.row([label, fmt_ns(f.cost.median_ns), per, us(THESIS_FILTER, f.files)]);
        }
        t.note(format!(
            "{}; median of {} rounds",
            self.device, self.filter[0].cost.rounds
        ));
        t.note("filters are hash sets: the cost does not grow with their size (the thesis searched an array)");
        out.push(t);
        let mut t = Table::new(
            "E5: checking the status of open files with fstat (thesis table 18)",
            &["files", "total", "per file", "thesis (NetBSD 1.2.1)"],
        );
        for p in &self.poll {
            t.row([
                p.files.to_string(),
                fmt_ns(p.cost.median_ns),
                fmt_ns(p.cost.median_ns / p.files as f64),
                us(THESIS_POLL, p.files),
            ]);
        }
        out.push(t);
        out.push(break_even_table(
            "E5: break-even ratio of polls to unlinks, filtering only (thesis tables 19 and 20)",
            &self.break_even,
            THESIS_BREAK_EVEN,
        ));
        for g in [&self.async_graft, &self.sync_graft] {
            let (title, seed) = if g.sync {
                (
                    "E5: synchronous bookkeeping graft, write and fsync (thesis table 23)",
                    THESIS_SYNC,
                )
            } else {
                (
                    "E5: asynchronous bookkeeping graft, one record appended (thesis table 21)",
                    THESIS_ASYNC,
                )
            };
            let mut t = Table::new(title, &["variant", "median", "mean", "p90", "thesis"]);
            let rows = [
                ("unprotected (native policy)", &g.unprotected, format!("{} µs", seed[0])),
                ("protected (Wasm graft)", &g.protected, format!("{} µs", seed[1])),
                ("protected, raise to commit", &g.protected_end_to_end, "-".into()),
                ("user level, the write alone", &g.user_write, format!("{} µs", seed[2])),
                ("user level, woken by event_wait", &g.user_events, "-".into()),
            ];
            for (name, s, th) in rows {
                t.row([
                    name.to_string(),
                    fmt_ns(s.median_ns),
                    fmt_ns(s.mean_ns),
                    fmt_ns(s.p90_ns),
                    th,
                ]);
            }
            t.note(format!(
                "{} single invocations each; every log holds exactly one record per invocation: {}",
                g.protected.rounds,
                if g.records_ok { "yes" } else { "NO" }
            ));
            t.note("raise to commit: the event filtered, queued, run by an event thread, its write committed");
            out.push(t);
        }
        out.push(break_even_table(
            "E5: break-even with the asynchronous graft (thesis table 22)",
            &self.break_even_async,
            THESIS_BREAK_EVEN_ASYNC,
        ));
        out.push(break_even_table(
            "E5: break-even with the synchronous graft (thesis table 24)",
            &self.break_even_sync,
            THESIS_BREAK_EVEN_SYNC,
        ));
        if let Some(last) = out.last_mut() {
            last.note("Cost_event = filter + files x protected graft; Cost_poll = fstat of the files + files x user-level write");
        }
        out
    }

    /// Break-even ratio against the number of files watched, filtering only and with each graft
    /// (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let line = |rows: &[BreakEven]| rows.iter().map(|b| (b.files as f64, b.ratio)).collect::<Vec<_>>();
        let seed = |rows: &[(usize, f64)]| rows.iter().map(|&(f, r)| (f as f64, r)).collect::<Vec<_>>();
        let series = vec![
            ("filter only".to_string(), line(&self.break_even)),
            ("async graft".to_string(), line(&self.break_even_async)),
            ("sync graft".to_string(), line(&self.break_even_sync)),
            ("thesis: filter only".to_string(), seed(THESIS_BREAK_EVEN)),
            ("thesis: async graft".to_string(), seed(THESIS_BREAK_EVEN_ASYNC)),
            ("thesis: sync graft".to_string(), seed(THESIS_BREAK_EVEN_SYNC)),
        ];
        report::line_chart(
            path,
            "E5: poll:unlink break-even ratio",
            "files watched",
            "polls per unlink at break-even",
            &series,
            true,
        )
    }

    /// Writes the report as JSON.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        report::write_json(path, self)
    }
}
