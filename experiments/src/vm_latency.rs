//! `vino bench vm-latency`: another user's page-fault latency beside hostile neighbours, the
//! measure of the goal "others' faults stay fast" (docs/memory.md, "The adversary").
//!
//! One C source, `experiments/programs/vm_lat.c`, built for wasm32-wasi with the SDK, runs as VINO
//! processes whose memory the kernel pages, on a VINO image in the scratch directory (`O_DIRECT`,
//! swap on it), a kernel booted for each run, every process with the same resident limit:
//!
//! * the **victim** (uid 1001) times each single-page touch in the program: first-touch faults
//!   (pages touched once, in descending order, so each fault brings one page), then swap-in
//!   faults (the half touched first re-read in descending order, four times its limit written);
//!   it prints p50, p99 and the largest of each;
//! * its **neighbour** (uid 1002), started first and swapping before the victim starts, killed
//!   once the victim is done: none (**alone**); (a) **hog**, writing one byte per page over far
//!   more than its limit, as fast as it can; (b) the hog with a `vm.fault_around` graft asking
//!   for the most pages every fault allows (32); (c) the hog with a `vm.fault_around` graft that
//!   loops (its VLT's budget aborts each call, and the kernel unloads it for failing).
//!
//! Each round runs every case once, the order rotated; the ratios are each case's figure over
//! the alone case's of the same round, their median over the rounds reported. Beside the
//! latencies, what holds each neighbour in: the most frames its memory held (sampled every
//! 10 ms; its limit bounds it), the graft's failures and whether it was unloaded, and the
//! kernel's process's peak RSS (this program holds the kernel as vinod does: VmRSS sampled).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, ensure};
use serde::Serialize;
use vino_kernel::{Credentials, GraftCall, Kernel};
use vino_measure::report::{Table, bar_chart, fmt_ratio};

use crate::e6_layout::median_of;
use crate::front;
use crate::vm::{PAGE, load_average};

/// The victim's and the neighbour's users.
const VICTIM_UID: u32 = 1001;
const NEIGHBOUR_UID: u32 = 1002;

/// `vm.fault_around`: the most pages a fault may bring (32 from the faulting one, clipped at the
/// memory's end).
const AROUND_MAX: &str = r#"(module (memory (export "memory") 1)
    (func (export "vm_fault_around") (param i64 i64) (result i64)
      (local $n i64)
      (local.set $n (i64.sub (local.get 1) (local.get 0)))
      (if (i64.gt_u (local.get $n) (i64.const 32)) (then (local.set $n (i64.const 32))))
      (i64.or (i64.shl (local.get 0) (i64.const 32)) (local.get $n))))"#;

/// `vm.fault_around` that never answers.
const AROUND_LOOPS: &str = r#"(module (memory (export "memory") 1)
    (func (export "vm_fault_around") (param i64 i64) (result i64) (loop (br 0)) (i64.const 0)))"#;

#[derive(Clone, Debug)]
pub struct VmLatencyOptions {
    pub quick: bool,
    /// Where the VINO image goes.
    pub scratch: PathBuf,
    pub rounds: usize,
    /// Every process's resident limit.
    pub resident_bytes: u64,
    /// Pages the victim touches (at least 4 times its limit, so its re-read comes from swap).
    pub victim_pages: u64,
    /// Pages the hog writes over and over.
    pub hog_pages: u64,
    /// How long the neighbour runs (and swaps) before the victim starts.
    pub warmup: Duration,
}

impl VmLatencyOptions {
    pub fn new(quick: bool) -> VmLatencyOptions {
        let resident_bytes: u64 = if quick { 1 << 20 } else { 4 << 20 };
        let resident_pages = resident_bytes / PAGE;
        VmLatencyOptions {
            quick,
            scratch: PathBuf::from("target/vino-bench"),
            rounds: if quick { 1 } else { 5 },
            resident_bytes,
            victim_pages: 4 * resident_pages,
            hog_pages: 16 * resident_pages,
            warmup: Duration::from_millis(if quick { 200 } else { 500 }),
        }
    }

    fn check(&self) -> Result<()> {
        ensure!(self.rounds > 0, "at least one round");
        let limit = self.resident_bytes / PAGE;
        ensure!(limit > 0, "a resident limit of at least a page");
        ensure!(
            self.victim_pages >= 4 * limit,
            "the victim's {} pages must be at least 4 times its limit of {limit}",
            self.victim_pages
        );
        ensure!(
            self.hog_pages > limit,
            "the hog's {} pages must exceed its limit",
            self.hog_pages
        );
        Ok(())
    }

    /// Swap each user may hold: the hog's and the victim's pages and room to spare.
    fn swap_bytes(&self) -> u64 {
        2 * (self.victim_pages + self.hog_pages) * PAGE
    }
}

/// The victim's neighbour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Neighbour {
    Alone,
    Hog,
    AroundMax,
    AroundLoops,
}

impl Neighbour {
    const ALL: [Neighbour; 4] = [
        Neighbour::Alone,
        Neighbour::Hog,
        Neighbour::AroundMax,
        Neighbour::AroundLoops,
    ];

    fn key(self) -> &'static str {
        match self {
            Neighbour::Alone => "alone",
            Neighbour::Hog => "hog",
            Neighbour::AroundMax => "fault-around-max",
            Neighbour::AroundLoops => "fault-around-loops",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Neighbour::Alone => "alone",
            Neighbour::Hog => "(a) a hog swapping far over its limit",
            Neighbour::AroundMax => "(b) the hog, vm.fault_around asking for 32 pages",
            Neighbour::AroundLoops => "(c) the hog, vm.fault_around looping",
        }
    }

    fn graft(self) -> Option<&'static str> {
        match self {
            Neighbour::AroundMax => Some(AROUND_MAX),
            Neighbour::AroundLoops => Some(AROUND_LOOPS),
            _ => None,
        }
    }
}

/// The victim's figures in one run, ns.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub first_n: u64,
    pub first_p50_ns: f64,
    pub first_p99_ns: f64,
    pub first_max_ns: f64,
    pub swap_n: u64,
    pub swap_p50_ns: f64,
    pub swap_p99_ns: f64,
    pub swap_max_ns: f64,
}

impl Latency {
    fn parse(text: &str) -> Result<Latency> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("latency"))
            .ok_or_else(|| anyhow!("the victim printed no latency line: {text}"))?;
        let f: BTreeMap<&str, f64> = line
            .split_whitespace()
            .filter_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                Some((k, v.parse().ok()?))
            })
            .collect();
        let get = |k: &str| f.get(k).copied().ok_or_else(|| anyhow!("no {k} in {line}"));
        Ok(Latency {
            first_n: get("first_n")? as u64,
            first_p50_ns: get("first_p50_ns")?,
            first_p99_ns: get("first_p99_ns")?,
            first_max_ns: get("first_max_ns")?,
            swap_n: get("swap_n")? as u64,
            swap_p50_ns: get("swap_p50_ns")?,
            swap_p99_ns: get("swap_p99_ns")?,
            swap_max_ns: get("swap_max_ns")?,
        })
    }

    /// The four figures the ratios are taken of.
    fn figures(&self) -> [f64; 4] {
        [self.first_p50_ns, self.first_p99_ns, self.swap_p50_ns, self.swap_p99_ns]
    }
}

/// What held the neighbour in during one run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Containment {
    /// The most frames its memory held, sampled.
    pub max_resident_pages: u64,
    pub swap_outs: u64,
    /// How it ended (killed once the victim was done, unless it ended before).
    pub exit: String,
    /// Its `vm.fault_around` graft's calls, those that failed, and whether the kernel unloaded it.
    pub graft_calls: Option<u64>,
    pub graft_failures: Option<u64>,
    pub graft_unloaded: Option<bool>,
    /// The kernel's process's largest VmRSS sampled while the victim ran.
    pub peak_rss_bytes: u64,
}

/// One case over the rounds.
#[derive(Clone, Debug, Serialize)]
pub struct CaseRow {
    pub key: String,
    pub neighbour: String,
    /// Medians over the rounds, ns.
    pub first_p50_ns: f64,
    pub first_p99_ns: f64,
    pub swap_p50_ns: f64,
    pub swap_p99_ns: f64,
    /// Medians over the rounds of this case's figure over the alone case's in the same round.
    pub first_p50_vs_alone: f64,
    pub first_p99_vs_alone: f64,
    pub swap_p50_vs_alone: f64,
    pub swap_p99_vs_alone: f64,
    /// Over the rounds: the most frames the neighbour held, the largest RSS.
    pub neighbour_max_resident_pages: u64,
    pub peak_rss_bytes: u64,
    pub latency_rounds: Vec<Latency>,
    pub containment_rounds: Vec<Containment>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VmLatencyReport {
    pub rounds: usize,
    pub page_bytes: u64,
    pub resident_limit_bytes: u64,
    pub resident_limit_pages: u64,
    pub victim_pages: u64,
    pub hog_pages: u64,
    pub warmup_ms: u64,
    pub rows: Vec<CaseRow>,
    pub paged: bool,
    pub notes: Vec<String>,
}

fn source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs").join("vm_lat.c")
}

/// Builds vm_lat.c for wasm32-wasi with the SDK: the module.
pub fn build_wasm(dir: &Path) -> Result<Vec<u8>> {
    let out = dir.join("vm_lat.wasm");
    vino_sdk::build_program(&[source()], &out, &vino_sdk::BuildOptions::default())
        .map_err(|e| anyhow!("building vm_lat.c for wasm32-wasi: {e}"))?;
    Ok(std::fs::read(&out)?)
}

/// What a VINO process writes, collected.
#[derive(Clone, Default)]
struct Collected(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Collected {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Collected {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("not poisoned")).into_owned()
    }
}

fn stdio() -> (vino_wasi::Stdio, Collected, Collected) {
    let (out, err) = (Collected::default(), Collected::default());
    let stdio = vino_wasi::Stdio {
        stdin: Box::new(std::io::empty()),
        stdout: Box::new(out.clone()),
        stderr: Box::new(err.clone()),
        tty: [false; 3],
    };
    (stdio, out, err)
}

fn argv(mode: &str, pages: u64) -> Vec<Vec<u8>> {
    ["vm_lat".to_string(), mode.to_string(), pages.to_string()]
        .into_iter()
        .map(|a| OsString::from(a).into_encoded_bytes())
        .collect()
}

/// This process's resident set (VmRSS), bytes.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb << 10)
}

/// The neighbour running beside the victim.
struct Running {
    process: Arc<vino_kernel::Process>,
    kill: vino_wasi::KillSwitch,
    thread: std::thread::JoinHandle<Result<vino_wasi::Exit, vino_wasi::RunError>>,
}

fn start_neighbour(kernel: &Arc<Kernel>, program: &vino_wasi::Program, n: Neighbour, pages: u64) -> Result<Running> {
    let process = kernel.spawn(Credentials::user(NEIGHBOUR_UID, NEIGHBOUR_UID));
    if let Some(wat) = n.graft() {
        process
            .graft(
                "vm.fault_around",
                GraftCall::Load {
                    wasm: wat.as_bytes().to_vec(),
                },
            )
            .map_err(|e| anyhow!("loading the {} graft: {e}", n.key()))?;
    }
    let kill = program.kill_switch();
    let thread = {
        let (program, process, kill) = (program.clone(), process.clone(), kill.clone());
        std::thread::spawn(move || {
            let (stdio, _, _) = stdio();
            program.run_in(
                process,
                vino_wasi::Setup::new(argv("hog", pages), Vec::new()),
                stdio,
                &kill,
            )
        })
    };
    Ok(Running { process, kill, thread })
}

/// Samples the neighbour's frames and the RSS until stopped: (most frames, largest RSS).
fn sample_while(stop: &AtomicBool, neighbour: Option<&Arc<vino_kernel::Process>>) -> (u64, u64) {
    let (mut frames, mut rss) = (0, 0);
    while !stop.load(Ordering::SeqCst) {
        if let Some(s) = neighbour.and_then(|p| p.memory_stats()) {
            frames = frames.max(s.resident);
        }
        rss = rss.max(rss_bytes());
        std::thread::sleep(Duration::from_millis(10));
    }
    (frames, rss)
}

/// What became of the neighbour's `vm.fault_around` graft: its counters while it is loaded, the
/// failures that had it unloaded otherwise.
fn graft_record(process: &vino_kernel::Process, c: &mut Containment) {
    let unloaded = process.graft_events().into_iter().find_map(|e| match e {
        vino_graft::GraftEvent::Unloaded { point, failures, .. } if point == "vm.fault_around" => Some(failures),
        _ => None,
    });
    let stats = process.graft_stats("vm.fault_around").ok().and_then(|i| i.stats);
    c.graft_unloaded = Some(unloaded.is_some());
    c.graft_calls = stats.as_ref().map(|s| s.invocations);
    c.graft_failures = stats.map(|s| s.failures).or(unloaded);
}

/// One run: a kernel, the neighbour, the victim; the victim's figures and the neighbour's.
fn run_case(
    opts: &VmLatencyOptions,
    image: &Path,
    program: &vino_wasi::Program,
    n: Neighbour,
) -> Result<(Latency, Containment, bool)> {
    let kernel = crate::vm::boot_vino(image, opts.resident_bytes, opts.swap_bytes())?;
    let neighbour = match n {
        Neighbour::Alone => None,
        _ => Some(start_neighbour(&kernel, program, n, opts.hog_pages)?),
    };
    // The neighbour swaps before the victim starts (or the warm-up's time is up twice over).
    let started = Instant::now();
    if let Some(nb) = &neighbour {
        while started.elapsed() < 2 * opts.warmup
            && (started.elapsed() < opts.warmup || nb.process.memory_stats().is_none_or(|s| s.swap_outs == 0))
            && !nb.thread.is_finished()
        {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let stop = AtomicBool::new(false);
    let (victim, (max_frames, peak_rss)) = std::thread::scope(|s| {
        let sampler = s.spawn(|| sample_while(&stop, neighbour.as_ref().map(|nb| &nb.process)));
        let (stdio, out, err) = stdio();
        let exit = program.run(
            &kernel,
            Credentials::user(VICTIM_UID, VICTIM_UID),
            vino_wasi::Setup::new(argv("victim", opts.victim_pages), Vec::new()),
            stdio,
            &program.kill_switch(),
        );
        stop.store(true, Ordering::SeqCst);
        let sampled = sampler.join().expect("the sampler does not panic");
        let victim = match exit {
            Ok(vino_wasi::Exit::Code(0)) => Latency::parse(&out.text()),
            other => Err(anyhow!("the victim ended {other:?}: {}", err.text())),
        };
        (victim, sampled)
    });
    let mut containment = Containment {
        max_resident_pages: max_frames,
        peak_rss_bytes: peak_rss,
        exit: "none".into(),
        ..Containment::default()
    };
    if let Some(nb) = neighbour {
        containment.swap_outs = nb.process.memory_stats().map_or(0, |s| s.swap_outs);
        if n.graft().is_some() {
            graft_record(&nb.process, &mut containment);
        }
        nb.kill.kill();
        let exit = nb
            .thread
            .join()
            .map_err(|_| anyhow!("the neighbour's thread panicked"))?;
        containment.exit = match exit {
            Ok(e) => format!("{e:?}"),
            Err(e) => format!("error: {e}"),
        };
        kernel.exit(nb.process.pid());
    }
    let paged = kernel.pager_stats().is_some();
    kernel.shutdown().map_err(|e| anyhow!("shutting VINO down: {e}"))?;
    Ok((victim?, containment, paged))
}

pub fn run(opts: &VmLatencyOptions, progress: &mut dyn FnMut(&str)) -> Result<VmLatencyReport> {
    opts.check()?;
    let before = load_average();
    let dir = front::scratch_dir(&opts.scratch)?;
    progress("building vm_lat.c for wasm32-wasi");
    let program = vino_wasi::Program::compile(&build_wasm(dir.path())?, vino_wasi::ProgramLimits::default())?;
    let image = dir.path().join("vino-vm-latency.img");
    let image_bytes = (2 * opts.swap_bytes() + (256 << 20)).next_multiple_of(1 << 20);
    {
        let dev = vino_blockdev::FileDevice::create(&image, image_bytes)?;
        vino_fs::mkfs(&dev, &vino_fs::MkfsOptions::default())?;
    }
    let cases = Neighbour::ALL;
    let mut results: Vec<Vec<(Latency, Containment)>> = vec![Vec::new(); cases.len()];
    let mut paged = true;
    for round in 0..opts.rounds {
        for k in 0..cases.len() {
            let i = (k + round) % cases.len();
            progress(&format!("round {} of {}: {}", round + 1, opts.rounds, cases[i].key()));
            let (lat, cont, p) =
                run_case(opts, &image, &program, cases[i]).with_context(|| format!("case {}", cases[i].key()))?;
            paged &= p;
            results[i].push((lat, cont));
        }
    }
    let alone = &results[0];
    let rows = cases
        .iter()
        .zip(&results)
        .map(|(&n, runs)| case_row(n, runs, alone))
        .collect();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut notes = vec![format!(
        "load average (1, 5, 15 min) before: {before}, after: {}; {cpus} CPUs",
        load_average()
    )];
    if !paged {
        notes.push("programs' memory was not paged (no userfaultfd): the figures are Linux's paging".into());
    }
    Ok(VmLatencyReport {
        rounds: opts.rounds,
        page_bytes: PAGE,
        resident_limit_bytes: opts.resident_bytes,
        resident_limit_pages: opts.resident_bytes / PAGE,
        victim_pages: opts.victim_pages,
        hog_pages: opts.hog_pages,
        warmup_ms: opts.warmup.as_millis() as u64,
        rows,
        paged,
        notes,
    })
}

fn case_row(n: Neighbour, runs: &[(Latency, Containment)], alone: &[(Latency, Containment)]) -> CaseRow {
    let median = |f: &dyn Fn(&Latency) -> f64| median_of(runs.iter().map(|(l, _)| f(l)));
    let ratio = |i: usize| {
        median_of(
            runs.iter()
                .zip(alone)
                .map(|((l, _), (a, _))| l.figures()[i] / a.figures()[i]),
        )
    };
    CaseRow {
        key: n.key().into(),
        neighbour: n.name().into(),
        first_p50_ns: median(&|l| l.first_p50_ns),
        first_p99_ns: median(&|l| l.first_p99_ns),
        swap_p50_ns: median(&|l| l.swap_p50_ns),
        swap_p99_ns: median(&|l| l.swap_p99_ns),
        first_p50_vs_alone: ratio(0),
        first_p99_vs_alone: ratio(1),
        swap_p50_vs_alone: ratio(2),
        swap_p99_vs_alone: ratio(3),
        neighbour_max_resident_pages: runs.iter().map(|(_, c)| c.max_resident_pages).max().unwrap_or(0),
        peak_rss_bytes: runs.iter().map(|(_, c)| c.peak_rss_bytes).max().unwrap_or(0),
        latency_rounds: runs.iter().map(|(l, _)| l.clone()).collect(),
        containment_rounds: runs.iter().map(|(_, c)| c.clone()).collect(),
    }
}

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

impl VmLatencyReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "Virtual memory: another user's fault latency beside hostile neighbours",
            &[
                "neighbour",
                "first touch p50 µs",
                "p99 µs",
                "p99 / alone",
                "swap-in p50 µs",
                "p99 µs",
                "p99 / alone",
                "neighbour frames",
                "peak RSS MiB",
            ],
        );
        for r in &self.rows {
            t.row([
                r.neighbour.clone(),
                us(r.first_p50_ns),
                us(r.first_p99_ns),
                fmt_ratio(r.first_p99_vs_alone),
                us(r.swap_p50_ns),
                us(r.swap_p99_ns),
                fmt_ratio(r.swap_p99_vs_alone),
                r.neighbour_max_resident_pages.to_string(),
                format!("{:.0}", r.peak_rss_bytes as f64 / (1 << 20) as f64),
            ]);
        }
        t.note(format!(
            "medians of {} rounds, every case once a round (order rotated), ratios to the alone case of the same \
             round; experiments/programs/vm_lat.c as VINO processes, a kernel booted per run on an image in the \
             scratch directory (O_DIRECT, swap on it); resident limit {} pages per process; the victim (uid {}) \
             first-touches {} pages one at a time, then re-reads half of them from swap one at a time; the \
             neighbour (uid {}) writes {} pages over and over, started {} ms or more before the victim",
            self.rounds,
            self.resident_limit_pages,
            VICTIM_UID,
            self.victim_pages,
            NEIGHBOUR_UID,
            self.hog_pages,
            self.warmup_ms
        ));
        t.note("neighbour frames: the most its memory held, sampled every 10 ms; peak RSS: the kernel's process");
        for r in &self.rows {
            for (i, c) in r.containment_rounds.iter().enumerate() {
                if let Some(unloaded) = c.graft_unloaded {
                    let count = |n: Option<u64>| n.map_or("-".into(), |n| n.to_string());
                    t.note(format!(
                        "{} round {}: graft calls {}, failed {}, unloaded {unloaded}; neighbour {}",
                        r.key,
                        i + 1,
                        count(c.graft_calls),
                        count(c.graft_failures),
                        c.exit
                    ));
                }
            }
        }
        for n in &self.notes {
            t.note(n.clone());
        }
        vec![t]
    }

    /// p99 over the alone case's, first touch and swap-in, per neighbour (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = self
            .rows
            .iter()
            .map(|r| {
                (
                    r.key.clone(),
                    vec![
                        ("first-touch p99".to_string(), r.first_p99_vs_alone),
                        ("swap-in p99".to_string(), r.swap_p99_vs_alone),
                    ],
                )
            })
            .collect();
        bar_chart(
            path,
            "Another user's fault latency: p99 over the alone case's (1 = alone)",
            "p99 / alone",
            &groups,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_victims_line_is_read_back() {
        let l = Latency::parse(
            "noise\nlatency first_n=8 first_p50_ns=10 first_p99_ns=20 first_max_ns=30 swap_n=4 swap_p50_ns=100 \
             swap_p99_ns=200 swap_max_ns=300\n",
        )
        .unwrap();
        assert_eq!((l.first_n, l.swap_n), (8, 4));
        assert_eq!(l.figures(), [10.0, 20.0, 100.0, 200.0]);
        assert!(Latency::parse("latency first_n=8\n").is_err());
    }
}
