//! Experiments E2/E3: the extension-technology study of the thesis (chapter
//! 4, tables 2-7; MiSFIT overhead, table 8) redone with today's
//! technologies.
//!
//! Three workloads, written once in C (`workloads/*.c`) and compiled with the
//! same clang at -O2 both natively and to wasm32:
//!
//! * hot-list search (prioritization graft, thesis 4.3.4): a 64-entry linked
//!   list of hot pages checked against LRU candidates, once per eviction;
//! * MD5 of 1 MB (stream graft, 4.3.5), one invocation per 8 KB;
//! * logical disk (computation graft, 4.3.6): 262,144 skewed block writes on
//!   a 1 GB disk of 4 KB blocks and 64 KB segments, one invocation per write
//!   (and, to separate invocation cost from computation, once more with a
//!   single invocation for the whole run).
//!
//! Each runs as (a) native code called directly, (b) Wasm compiled by
//! wasmtime with the graft sandbox settings, with epoch interruption and,
//! as an extra column, with fuel metering, (c) the same Wasm in the wasmi
//! interpreter, and (d) native code in a separate process reached by an
//! upcall through shared memory (futex on one CPU; spinning on two).  Times
//! are normalized to native, and break-even points are computed from device
//! costs measured here.

pub mod breakeven;
pub mod device;
pub mod interp;
pub mod inturn;
pub mod native;
pub mod process;
mod tables;
pub mod wasm;
pub mod workloads;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde::Serialize;

use breakeven::BreakEven;
use device::DeviceCosts;
use process::{UpcallMode, UpcallServer};
use vino_measure::{Budget, Stats, black_box, try_bench, try_bench_for, try_bench_with_setup, try_sample};
use workloads::*;

/// Options of the study.
#[derive(Clone, Debug)]
pub struct ExtTechOptions {
    /// Small sizes and few rounds (under a minute).
    pub quick: bool,
    /// Where the device-cost scratch file lives (not a tmpfs: O_DIRECT).
    pub scratch_dir: PathBuf,
}

impl Default for ExtTechOptions {
    fn default() -> Self {
        ExtTechOptions {
            quick: false,
            scratch_dir: PathBuf::from("target/vino-bench"),
        }
    }
}

/// The extension technologies compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// (a) native code, called directly: no protection.
    Native,
    /// (b) Wasm compiled by wasmtime, epoch interruption (the graft sandbox).
    Wasm,
    /// (b') the same with fuel metering instead of epochs.
    WasmFuel,
    /// (c) the same Wasm in the wasmi interpreter.
    Wasmi,
    /// (d) native code in another process, futex upcall on one CPU.
    ProcessFutex,
    /// (d') the same, both sides spinning on two CPUs.
    ProcessSpin,
}

impl Variant {
    pub const ALL: [Variant; 6] = [
        Variant::Native,
        Variant::Wasm,
        Variant::WasmFuel,
        Variant::Wasmi,
        Variant::ProcessFutex,
        Variant::ProcessSpin,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Variant::Native => "native",
            Variant::Wasm => "wasm",
            Variant::WasmFuel => "wasm+fuel",
            Variant::Wasmi => "wasmi",
            Variant::ProcessFutex => "process (futex)",
            Variant::ProcessSpin => "process (spin)",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Variant::Native => "C compiled natively (clang -O2), called directly; unprotected",
            Variant::Wasm => {
                "same C compiled to wasm32 (clang -O2), compiled by wasmtime/Cranelift with the graft sandbox \
                 settings: guard-page bounds checks, epoch interruption with a 1 ms ticker"
            }
            Variant::WasmFuel => "as wasm, but fuel metering instead of epoch interruption",
            Variant::Wasmi => "same wasm32 module run by the wasmi interpreter",
            Variant::ProcessFutex => {
                "native C in a forked server process; one upcall per invocation through shared memory, \
                 futex wait/wake, both processes on one CPU (two context switches per upcall)"
            }
            Variant::ProcessSpin => {
                "as process (futex), but both sides spin on the shared channel on two CPUs (best case)"
            }
        }
    }
}

/// The workloads (the logical disk is measured twice).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    HotList,
    Md5,
    LogicalDisk,
    LogicalDiskBatched,
}

impl Workload {
    pub const ALL: [Workload; 4] = [
        Workload::HotList,
        Workload::Md5,
        Workload::LogicalDisk,
        Workload::LogicalDiskBatched,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Workload::HotList => "hot-list search (64 entries)",
            Workload::Md5 => "MD5 of 1 MB (8 KB per call)",
            Workload::LogicalDisk => "logical disk, 262,144 writes (1 call/write)",
            Workload::LogicalDiskBatched => "logical disk, 262,144 writes (1 call)",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Workload::HotList => "hot list",
            Workload::Md5 => "MD5 1 MB",
            Workload::LogicalDisk => "logical disk",
            Workload::LogicalDiskBatched => "logical disk (1 call)",
        }
    }

    /// What one timed operation is.
    pub fn unit(self) -> &'static str {
        match self {
            Workload::HotList => {
                "one eviction call: 8 LRU candidates copied into the argument area, checked against the 64-entry hot list until one is cold"
            }
            Workload::Md5 => "fingerprint of 1 MB, 128 invocations of 8 KB",
            Workload::LogicalDisk => "262,144 block writes, one invocation per write",
            Workload::LogicalDiskBatched => "262,144 block writes in one invocation",
        }
    }
}

/// One workload on one technology.
#[derive(Clone, Debug, Serialize)]
pub struct Measurement {
    pub workload: Workload,
    pub variant: Variant,
    /// Time per operation (see [`Workload::unit`]).
    pub stats: Option<Stats>,
    /// Per 4 KB block for the logical disk.
    pub per_block_ns: Option<f64>,
    /// Median time / native median time.
    pub normalized: Option<f64>,
    /// The workload's result (victim digest, MD5, map checksum).
    pub answer: Option<String>,
    /// Why the variant was not measured.
    pub skipped: Option<String>,
}

/// Cost of one invocation that does nothing.
#[derive(Clone, Debug, Serialize)]
pub struct InvocationCost {
    pub name: String,
    pub stats: Option<Stats>,
    pub skipped: Option<String>,
}

/// Load cost of a module (thesis: graft load time).
#[derive(Clone, Debug, Serialize)]
pub struct LoadCost {
    pub technology: String,
    pub module: String,
    pub module_bytes: usize,
    /// Validation and compilation (wasmtime: Cranelift; wasmi: translation).
    pub compile: Stats,
    /// A fresh store plus instantiation.
    pub instantiate: Stats,
}

/// What the numbers were measured on.
#[derive(Clone, Debug, Serialize)]
pub struct MachineNotes {
    pub cpu: String,
    pub logical_cpus: usize,
    pub kernel: String,
    pub virtualized: bool,
    pub tsc_ghz: Option<f64>,
    pub clang: String,
    pub wasmtime: String,
    pub wasmi: String,
    pub upcall_cpus: String,
    /// 1-minute load average when the run started and when it ended.
    pub load_average: (f64, f64),
}

/// A number from the thesis, for side-by-side tables.
#[derive(Clone, Debug, Serialize)]
pub struct SeedNumber {
    pub workload: Workload,
    pub technology: &'static str,
    pub normalized: f64,
    pub source: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub struct VariantInfo {
    pub variant: Variant,
    pub label: &'static str,
    pub description: &'static str,
}

/// Everything the study measured.
#[derive(Clone, Debug, Serialize)]
pub struct ExtTechReport {
    pub quick: bool,
    pub machine: MachineNotes,
    pub variants: Vec<VariantInfo>,
    pub workloads: Vec<(Workload, &'static str)>,
    pub results: Vec<Measurement>,
    pub invocation: Vec<InvocationCost>,
    /// The null call and the hot list on native code and both Wasm variants, taking turns.
    pub in_turn: Vec<inturn::InTurn>,
    pub load: Vec<LoadCost>,
    pub device: DeviceCosts,
    pub break_even: BreakEven,
    pub seed: Vec<SeedNumber>,
    pub notes: Vec<String>,
    pub elapsed_s: f64,
}

/// The answers a variant computed; all variants must agree.
#[derive(Clone, Debug, PartialEq)]
struct Answers {
    hot: String,
    md5_abc: String,
    md5_1m: String,
    ld: u64,
    ld_batched: u64,
    ld_live: u32,
}

/// What measuring one variant produced.
struct VariantRun {
    hot: Stats,
    md5: Stats,
    ld: Stats,
    ld_batched: Stats,
    nop: Stats,
    answers: Answers,
}

/// Computes every workload's answer once (untimed), checking it.
fn answers<E: Extension + ?Sized>(
    e: &mut E,
    lists: &[[u32; CANDIDATES_PER_CALL]],
    input: &[u8],
) -> Result<(Answers, Duration, Duration)> {
    hot_setup(e)?;
    let hot = hot_answer(e, lists)?;
    e.md5_load(b"abc")?;
    let md5_abc = hex(&md5_run(e, 3)?);
    e.md5_load(input)?;
    let t = Instant::now();
    let md5_1m = hex(&md5_run(e, input.len())?);
    let md5_time = t.elapsed();
    let t = Instant::now();
    let ld = ld_run(e, true)?;
    let ld_time = t.elapsed();
    let ld_live = e.ld_live_total()?;
    let ld_batched = ld_run(e, false)?;
    Ok((
        Answers {
            hot,
            md5_abc,
            md5_1m,
            ld,
            ld_batched,
            ld_live,
        },
        md5_time,
        ld_time,
    ))
}

/// Rounds for an operation of (estimated) duration `one`: as many as fit in
/// the budget's time, within bounds; odd, for a clean median.
fn rounds_for(budget: Budget, one: Duration) -> usize {
    let total = budget.pick(Duration::from_millis(1500), Duration::from_secs(10));
    let (lo, hi) = budget.pick((3, 11), (5, 31));
    let n = (total.as_secs_f64() / one.as_secs_f64().max(1e-9)) as usize;
    n.clamp(lo, hi) | 1
}

/// Measures every workload on one technology.
fn measure_variant<E: Extension + ?Sized>(
    e: &mut E,
    name: &str,
    budget: Budget,
    lists: &[[u32; CANDIDATES_PER_CALL]],
    input: &[u8],
    progress: &mut dyn FnMut(&str),
) -> Result<VariantRun> {
    progress(&format!("{name}: checking answers"));
    let (answers, md5_time, ld_time) = answers(e, lists, input)?;
    if answers.md5_abc != MD5_ABC {
        bail!("{name}: MD5(\"abc\") = {}, expected {MD5_ABC}", answers.md5_abc);
    }
    let target = budget.round_target();
    let few = budget.rounds(9, 31);

    progress(&format!("{name}: null invocation"));
    let nop = try_bench_for(few, target, || e.nop(black_box(7)))?;

    progress(&format!("{name}: hot-list search"));
    hot_setup(e)?;
    let mut i = 0usize;
    let hot = try_bench_for(few, target, || {
        i = (i + 1) & (CANDIDATE_LISTS - 1);
        e.hl_pick(&lists[i])
    })?;

    progress(&format!("{name}: MD5 of 1 MB"));
    e.md5_load(input)?;
    let md5 = try_bench(rounds_for(budget, md5_time), 1, || md5_run(e, input.len()))?;

    progress(&format!("{name}: logical disk, one call per write"));
    let e = std::cell::RefCell::new(e);
    let ld = try_bench_with_setup(
        rounds_for(budget, ld_time),
        1,
        || e.borrow_mut().ld_reset(LD_SEED),
        || ld_writes(&mut **e.borrow_mut(), true),
    )?;
    progress(&format!("{name}: logical disk, one call"));
    let ld_batched = try_bench_with_setup(
        rounds_for(budget, ld_time / 4),
        1,
        || e.borrow_mut().ld_reset(LD_SEED),
        || ld_writes(&mut **e.borrow_mut(), false),
    )?;
    Ok(VariantRun {
        hot,
        md5,
        ld,
        ld_batched,
        nop,
        answers,
    })
}

fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

fn machine_notes(upcall_cpus: String, load_at_start: f64) -> MachineNotes {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let virtualized = cpuinfo
        .lines()
        .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"));
    let kernel = {
        // SAFETY: utsname is plain data, for which all zeros is a valid value.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: uname fills a struct that lives through the call.
        if unsafe { libc::uname(&mut u) } == 0 {
            let s = |f: &[libc::c_char]| {
                let b: Vec<u8> = f.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
                String::from_utf8_lossy(&b).into_owned()
            };
            format!("{} {}", s(&u.sysname), s(&u.release))
        } else {
            "unknown".into()
        }
    };
    let tsc_ghz = vino_measure::cycles().and_then(|c0| {
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let c1 = vino_measure::cycles()?;
        Some(c1.wrapping_sub(c0) as f64 / t.elapsed().as_nanos() as f64)
    });
    MachineNotes {
        cpu,
        logical_cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        kernel,
        virtualized,
        tsc_ghz,
        clang: env!("VINO_BENCH_CLANG_VERSION").to_string(),
        wasmtime: "wasmtime 48 (Cranelift)".into(),
        wasmi: "wasmi 2.0".into(),
        upcall_cpus,
        load_average: (load_at_start, load_average()),
    }
}

fn seed_numbers() -> Vec<SeedNumber> {
    use Workload::*;
    let s = |workload, technology, normalized, source| SeedNumber {
        workload,
        technology,
        normalized,
        source,
    };
    vec![
        s(HotList, "Modula-3", 1.4, "thesis table 2"),
        s(HotList, "Omniware SFI", 1.4, "thesis table 2"),
        s(HotList, "MiSFIT r+w", 1205.0 / 352.0, "thesis table 8"),
        s(HotList, "Java interp.", 31.3, "thesis table 2"),
        s(HotList, "Java JIT", 1.6, "thesis table 7"),
        s(Md5, "Modula-3", 2.0, "thesis table 4"),
        s(Md5, "Omniware SFI", 1.5, "thesis table 4"),
        s(Md5, "MiSFIT r+w", 284.0 / 187.0, "thesis table 8"),
        s(Md5, "Java interp.", 71.0, "thesis table 4"),
        s(LogicalDisk, "Modula-3", 1.5, "thesis table 6"),
        s(LogicalDisk, "Omniware SFI", 1.16, "thesis table 6"),
        s(LogicalDisk, "MiSFIT r+w", 1799.0 / 1109.0, "thesis table 8"),
        s(LogicalDisk, "Java interp.", 13.0, "thesis table 6"),
        s(LogicalDisk, "Java JIT", 1.5, "thesis table 7"),
    ]
}

/// Runs the study.  `progress` receives one line per step.
pub fn run(opts: &ExtTechOptions, progress: &mut dyn FnMut(&str)) -> Result<ExtTechReport> {
    let started = Instant::now();
    let load_at_start = load_average();
    let budget = Budget::new(opts.quick);
    let lists = candidate_lists();
    let input = md5_input();
    let mut notes = Vec::new();
    let mut runs: Vec<(Variant, Result<VariantRun, String>)> = Vec::new();
    let mut invocation: Vec<InvocationCost> = Vec::new();

    // (d) first: the server is forked before this run starts any thread.
    progress("process: forking the upcall server");
    let upcall_cpus;
    {
        let mut server = UpcallServer::spawn()?;
        upcall_cpus = format!(
            "host and server pinned among CPUs {:?}",
            server.cpus().iter().take(2).collect::<Vec<_>>()
        );
        for (variant, mode) in [
            (Variant::ProcessFutex, UpcallMode::FutexSameCore),
            (Variant::ProcessSpin, UpcallMode::Spin),
        ] {
            if !server.supports(mode) {
                runs.push((variant, Err("needs two CPUs".into())));
                continue;
            }
            server.set_mode(mode)?;
            let r = measure_variant(&mut server, variant.label(), budget, &lists, &input, progress)?;
            runs.push((variant, Ok(r)));
        }
        progress("process: null upcalls");
        let few = budget.rounds(9, 31);
        for (name, mode) in [
            ("upcall, futex, same CPU", UpcallMode::FutexSameCore),
            ("upcall, futex, two CPUs", UpcallMode::FutexCrossCore),
            ("upcall, spinning, two CPUs", UpcallMode::Spin),
        ] {
            if !server.supports(mode) {
                invocation.push(InvocationCost {
                    name: name.into(),
                    stats: None,
                    skipped: Some("needs two CPUs".into()),
                });
                continue;
            }
            server.set_mode(mode)?;
            let s = try_bench_for(few, budget.round_target(), || server.nop(black_box(7)))?;
            invocation.push(InvocationCost {
                name: name.into(),
                stats: Some(s),
                skipped: None,
            });
        }
        if let Some(n) = server.pin_note.clone() {
            notes.push(n);
        }
        server.set_mode(UpcallMode::FutexSameCore)?;
        server.shutdown();
    }

    let device = device::measure(&opts.scratch_dir, budget, progress)?;

    // (a) native.
    {
        let mut n = native::Native::new();
        let r = measure_variant(&mut n, Variant::Native.label(), budget, &lists, &input, progress)?;
        runs.push((Variant::Native, Ok(r)));
    }

    // (b) wasmtime, epoch interruption with the runtime's 1 ms ticker, then fuel.
    progress("wasm: compiling");
    let epoch_modules = wasm::WasmModules::compile(wasm::Interruption::Epoch)?;
    {
        let _ticker = wasm::EpochTicker::start(&epoch_modules.engine);
        let mut w = wasm::Wasmtime::instantiate(&epoch_modules)?;
        let r = measure_variant(&mut w, Variant::Wasm.label(), budget, &lists, &input, progress)?;
        runs.push((Variant::Wasm, Ok(r)));
    }
    let fuel_modules = wasm::WasmModules::compile(wasm::Interruption::Fuel)?;
    {
        let mut w = wasm::Wasmtime::instantiate(&fuel_modules)?;
        let r = measure_variant(&mut w, Variant::WasmFuel.label(), budget, &lists, &input, progress)?;
        runs.push((Variant::WasmFuel, Ok(r)));
    }

    // (c) wasmi.
    progress("wasmi: translating");
    let wasmi_modules = interp::WasmiModules::compile()?;
    {
        let mut w = interp::Wasmi::instantiate(&wasmi_modules)?;
        let r = measure_variant(&mut w, Variant::Wasmi.label(), budget, &lists, &input, progress)?;
        runs.push((Variant::Wasmi, Ok(r)));
    }

    // The calls of a few nanoseconds again, native code and both Wasm variants taking turns.
    progress("native and wasm in turn: null call and hot list");
    let in_turn = {
        let _ticker = wasm::EpochTicker::start(&epoch_modules.engine);
        let mut native = native::Native::new();
        let mut epoch = wasm::Wasmtime::instantiate(&epoch_modules)?;
        let mut fuel = wasm::Wasmtime::instantiate(&fuel_modules)?;
        inturn::measure(
            &mut [
                (Variant::Native, &mut native),
                (Variant::Wasm, &mut epoch),
                (Variant::WasmFuel, &mut fuel),
            ],
            &lists,
            budget,
        )?
    };

    // Every technology must have computed the same answers.
    let reference = runs
        .iter()
        .find(|(v, _)| *v == Variant::Native)
        .and_then(|(_, r)| r.as_ref().ok())
        .map(|r| r.answers.clone())
        .expect("native run present");
    let expected_ld = ld_reference_checksum(LD_WRITES, LD_SEED);
    if reference.ld != expected_ld || reference.ld_batched != expected_ld {
        bail!(
            "native logical disk checksum {:016x}/{:016x} differs from the Rust model {expected_ld:016x}",
            reference.ld,
            reference.ld_batched
        );
    }
    if reference.ld_live == 0 || reference.ld_live > LD_WRITES {
        bail!(
            "logical disk reports {} live blocks after {LD_WRITES} writes",
            reference.ld_live
        );
    }
    for (v, r) in &runs {
        if let Ok(r) = r
            && r.answers != reference
        {
            bail!(
                "{} computed different answers from native: {:?} vs {:?}",
                v.label(),
                r.answers,
                reference
            );
        }
    }

    // Load costs.
    progress("load costs");
    let load = load_costs(budget, &epoch_modules, &fuel_modules, &wasmi_modules)?;
    drop((epoch_modules, fuel_modules, wasmi_modules));

    // Null invocations of the in-process technologies.
    let mut inproc: Vec<InvocationCost> = [Variant::Native, Variant::Wasm, Variant::WasmFuel, Variant::Wasmi]
        .iter()
        .filter_map(|v| {
            runs.iter()
                .find(|(x, _)| x == v)
                .and_then(|(_, r)| r.as_ref().ok())
                .map(|r| InvocationCost {
                    name: format!("call, {}", v.label()),
                    stats: Some(r.nop),
                    skipped: None,
                })
        })
        .collect();
    inproc.append(&mut invocation);
    let invocation = inproc;

    // Results table with normalization.
    let get = |v: Variant| runs.iter().find(|(x, _)| *x == v).map(|(_, r)| r);
    let native = get(Variant::Native)
        .and_then(|r| r.as_ref().ok())
        .expect("native run present");
    let pick = |r: &VariantRun, w: Workload| match w {
        Workload::HotList => r.hot,
        Workload::Md5 => r.md5,
        Workload::LogicalDisk => r.ld,
        Workload::LogicalDiskBatched => r.ld_batched,
    };
    let mut results = Vec::new();
    for w in Workload::ALL {
        let base = pick(native, w).median_ns;
        for v in Variant::ALL {
            let m = match get(v) {
                Some(Ok(r)) => {
                    let s = pick(r, w);
                    let answer = match w {
                        Workload::HotList => r.answers.hot.clone(),
                        Workload::Md5 => r.answers.md5_1m.clone(),
                        Workload::LogicalDisk => format!("{:016x}", r.answers.ld),
                        Workload::LogicalDiskBatched => format!("{:016x}", r.answers.ld_batched),
                    };
                    let per_block = matches!(w, Workload::LogicalDisk | Workload::LogicalDiskBatched)
                        .then(|| s.median_ns / LD_WRITES as f64);
                    Measurement {
                        workload: w,
                        variant: v,
                        stats: Some(s),
                        per_block_ns: per_block,
                        normalized: Some(s.median_ns / base),
                        answer: Some(answer),
                        skipped: None,
                    }
                }
                Some(Err(why)) => Measurement {
                    workload: w,
                    variant: v,
                    stats: None,
                    per_block_ns: None,
                    normalized: None,
                    answer: None,
                    skipped: Some(why.clone()),
                },
                None => continue,
            };
            results.push(m);
        }
    }

    let median = |w: Workload, v: Variant| {
        results
            .iter()
            .find(|m| m.workload == w && m.variant == v)
            .and_then(|m| m.stats)
            .map(|s| s.median_ns)
    };
    let measured: Vec<Variant> = Variant::ALL
        .into_iter()
        .filter(|v| median(Workload::HotList, *v).is_some())
        .collect();
    let hot: Vec<(Variant, f64)> = measured
        .iter()
        .filter_map(|v| Some((*v, median(Workload::HotList, *v)?)))
        .collect();
    let md5: Vec<(Variant, f64)> = measured
        .iter()
        .filter_map(|v| Some((*v, median(Workload::Md5, *v)?)))
        .collect();
    let ld: Vec<(Variant, f64, Option<f64>)> = measured
        .iter()
        .filter_map(|v| {
            Some((
                *v,
                median(Workload::LogicalDisk, *v)? / LD_WRITES as f64,
                median(Workload::LogicalDiskBatched, *v).map(|t| t / LD_WRITES as f64),
            ))
        })
        .collect();
    let break_even = breakeven::compute(&device, &hot, &md5, &ld);

    notes.push(format!(
        "native and wasm32 builds come from the same C source and the same clang ({}) at -O2",
        env!("VINO_BENCH_CLANG_VERSION")
    ));
    notes.push(
        "times are medians over rounds; every invocation of an in-process technology is a call from Rust \
         (wasmtime/wasmi arm their deadline or fuel before each call, as the graft runtime does)"
            .into(),
    );
    if machine_virtualized() {
        notes.push("running in a virtual machine: device and upcall costs include the hypervisor".into());
    }

    let machine = machine_notes(upcall_cpus, load_at_start);
    let busiest = machine.load_average.0.max(machine.load_average.1);
    if busiest > 0.5 * machine.logical_cpus as f64 {
        notes.push(format!(
            "the machine was busy (load average {:.1} -> {:.1} on {} CPUs): expect noise, most of all in the \
             upcall variants, which need the second CPU",
            machine.load_average.0, machine.load_average.1, machine.logical_cpus
        ));
    }

    Ok(ExtTechReport {
        quick: opts.quick,
        machine,
        variants: Variant::ALL
            .iter()
            .map(|&v| VariantInfo {
                variant: v,
                label: v.label(),
                description: v.description(),
            })
            .collect(),
        workloads: Workload::ALL.iter().map(|&w| (w, w.unit())).collect(),
        results,
        invocation,
        in_turn,
        load,
        device,
        break_even,
        seed: seed_numbers(),
        notes,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

fn machine_virtualized() -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .map(|c| {
            c.lines()
                .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"))
        })
        .unwrap_or(false)
}

fn load_costs(
    budget: Budget,
    epoch: &wasm::WasmModules,
    fuel: &wasm::WasmModules,
    wasmi_m: &interp::WasmiModules,
) -> Result<Vec<LoadCost>> {
    let compiles = budget.pick(5, 21);
    let insts = budget.pick(21, 101);
    let mut out = Vec::new();
    let modules: [(&str, &[u8]); 3] = [
        ("hotlist", wasm::HOTLIST_WASM),
        ("md5", wasm::MD5_WASM),
        ("logdisk", wasm::LOGDISK_WASM),
    ];
    for (tech, m) in [("wasmtime (epoch)", epoch), ("wasmtime (fuel)", fuel)] {
        for (name, bytes) in modules {
            let compile = try_sample(compiles, || wasmtime::Module::new(&m.engine, bytes))?;
            let module = wasmtime::Module::new(&m.engine, bytes)?;
            let instantiate = try_sample(insts, || {
                let mut store = wasmtime::Store::new(&m.engine, ());
                wasmtime::Instance::new(&mut store, &module, &[]).map(|_| store)
            })?;
            out.push(LoadCost {
                technology: tech.into(),
                module: name.into(),
                module_bytes: bytes.len(),
                compile,
                instantiate,
            });
        }
    }
    for (name, bytes) in modules {
        let compile = try_sample(compiles, || wasmi::Module::new(&wasmi_m.engine, bytes))
            .map_err(|e| anyhow::anyhow!("wasmi: {e}"))?;
        let module = wasmi::Module::new(&wasmi_m.engine, bytes).map_err(|e| anyhow::anyhow!("wasmi: {e}"))?;
        let instantiate = try_sample(insts, || {
            let mut store = wasmi::Store::new(&wasmi_m.engine, ());
            interp::instantiate(&mut store, &module).map(|_| store)
        })?;
        out.push(LoadCost {
            technology: "wasmi".into(),
            module: name.into(),
            module_bytes: bytes.len(),
            compile,
            instantiate,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
