//! `vino bench vm`: what a page fault costs on this machine, the yardstick for VINO's pager (a
//! VINO process's linear memory paged by the kernel with userfaultfd, swapped to VINO's own file
//! system).
//!
//! One C source, `experiments/programs/vm.c`, built by clang at -O2 for the host (and, for the
//! VINO side, for wasm32-wasi with the SDK), times itself with `clock_gettime(CLOCK_MONOTONIC)`
//! and prints ns per page and the faults it took (`getrusage`). The Linux side, each figure the
//! median of the rounds, the order of the measures reversed every other round:
//!
//! * **first touch**: fresh anonymous memory (`mmap`), one write per 4 KiB page;
//! * **userfaultfd round trip**: the same region registered for missing pages, a thread reading
//!   the fault events and resolving each with `UFFDIO_COPY` of a zeroed page: the floor for any
//!   pager in user space, and the denominator of every ratio; also with both threads kept on one
//!   CPU, which on a virtual machine skips waking another virtual CPU (an idle one is halted,
//!   and waking it goes through the hypervisor: on an idle 2-CPU KVM guest the two-thread round
//!   trip took about 5 times the one-CPU one, on a busy one under 2 times);
//! * **swap-in**: a swap file the bench makes in the scratch directory (so on its disk) and
//!   switches on, the program run in a fresh memory cgroup limited to L bytes, writing W > L
//!   bytes and reading them back in order: ns per page of the re-read, with its major faults.
//!   Needs root and a memory cgroup the bench may make children in; without either the row is
//!   skipped with the reason. The swap file is the machine's (at the highest priority) while the
//!   measure runs; it and the cgroup are removed on every way out, also on Ctrl-C (`SwapRig`);
//! * **mapped file, cold and hot**: a file written and fsynced in the scratch directory, mapped
//!   read-only and read one byte per page; cold after `posix_fadvise(POSIX_FADV_DONTNEED)` on it
//!   (Linux's read-ahead and fault-around then fetch many pages per fault), hot with every page in
//!   the page cache but the mapping fresh.
//!
//! The VINO side ([`VmReport::vino_side`]) runs the same C built for wasm32-wasi as a VINO
//! process whose memory the kernel pages, on a VINO image in the scratch directory (`O_DIRECT`,
//! so its swap goes to the same disk as Linux's swap file), a kernel booted for each run:
//!
//! * **first touch**: the same pages, each a fault served by the pager (zeros copied in),
//!   the resident limit above the working set;
//! * **swap-in**: the same W bytes written and re-read with the process's resident limit at L,
//!   its pages out to and back from VINO's swap (an unnamed file on the image, enciphered).
//!
//! * **mapped file, cold and hot**: a VINO file the size of Linux's, written before the runs,
//!   mapped read-only with the SDK's `mmap` (`vino_mmap`) and read one byte per page: each fault
//!   reads the page and up to 15 untouched ones after it through VINO's page cache and copies
//!   them in; cold with a kernel booted for the run (its cache empty), hot after reading the file
//!   with `read` first.
//!
//! Beside the faults, what having memory paged at all costs a real program ([`paging_cost`]):
//! SQLite and gzip (the SDK's programs, driven as `vino bench native` drives them) as VINO
//! processes on a kernel whose programs' memory is paged, resident limits far above their working
//! sets, against the same kernel with `paged_memory` off (wasmtime's memory, paged by Linux), the
//! sides alternating in each round.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde::Serialize;
use vino_measure::report::{Table, bar_chart, fmt_ratio};

use crate::e6_layout::median_of;
use crate::e9_linux::{self, Cgroup, find_tool, run_tool};
use crate::front;

/// Bytes per page, as vm.c counts them.
pub const PAGE: u64 = 4096;

#[derive(Clone, Debug)]
pub struct VmOptions {
    pub quick: bool,
    /// Where the host's build, the mapped file and the swap file go (one disk).
    pub scratch: PathBuf,
    /// Rounds, the order of the measures reversed every other round.
    pub rounds: usize,
    /// Bytes touched by the first-touch and userfaultfd measures.
    pub touch_bytes: u64,
    /// The memory cgroup's limit L for the swap-in measure.
    pub swap_limit_bytes: u64,
    /// Bytes W > L written, then re-read, in the swap-in measure.
    pub swap_working_bytes: u64,
    /// Size of the swap file.
    pub swap_file_bytes: u64,
    /// Size of the mapped file.
    pub mapped_bytes: u64,
    /// Rows SQLite inserts in the paging-cost measure.
    pub sqlite_rows: u64,
    /// Bytes of text gzip compresses in the paging-cost measure.
    pub text_bytes: usize,
}

impl VmOptions {
    pub fn new(quick: bool) -> VmOptions {
        let scale = if quick { 4 } else { 1 };
        VmOptions {
            quick,
            scratch: PathBuf::from("target/vino-bench"),
            rounds: if quick { 2 } else { 5 },
            touch_bytes: (64 << 20) / scale,
            swap_limit_bytes: (32 << 20) / scale,
            swap_working_bytes: (64 << 20) / scale,
            swap_file_bytes: (128 << 20) / scale,
            mapped_bytes: (64 << 20) / scale,
            sqlite_rows: if quick { 5_000 } else { 100_000 },
            text_bytes: if quick { 1 << 20 } else { 20 << 20 },
        }
    }

    fn check(&self) -> Result<()> {
        ensure!(self.rounds > 0, "at least one round");
        for (what, bytes) in [
            ("touched", self.touch_bytes),
            ("swap limit", self.swap_limit_bytes),
            ("mapped", self.mapped_bytes),
        ] {
            ensure!(bytes >= PAGE, "{what}: {bytes} bytes is less than a page");
        }
        ensure!(
            self.swap_working_bytes > self.swap_limit_bytes,
            "the swap-in working set ({} bytes) must exceed the cgroup's limit ({} bytes)",
            self.swap_working_bytes,
            self.swap_limit_bytes
        );
        ensure!(
            self.swap_file_bytes >= self.swap_working_bytes,
            "the swap file ({} bytes) must hold the working set ({} bytes)",
            self.swap_file_bytes,
            self.swap_working_bytes
        );
        Ok(())
    }
}

/// What is measured: a mode of vm.c.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Measure {
    Touch,
    Uffd,
    UffdOneCpu,
    SwapIn,
    MappedCold,
    MappedHot,
}

impl Measure {
    const ALL: [Measure; 6] = [
        Measure::Touch,
        Measure::Uffd,
        Measure::UffdOneCpu,
        Measure::SwapIn,
        Measure::MappedCold,
        Measure::MappedHot,
    ];

    /// The row's key, shared with the VINO side's row for the same work.
    fn key(self) -> &'static str {
        match self {
            Measure::Touch => "first-touch",
            Measure::Uffd => "uffd",
            Measure::UffdOneCpu => "uffd-one-cpu",
            Measure::SwapIn => "swap-in",
            Measure::MappedCold => "mapped-cold",
            Measure::MappedHot => "mapped-hot",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Measure::Touch => "first touch of anonymous memory",
            Measure::Uffd => "userfaultfd round trip, UFFDIO_COPY of a zeroed page",
            Measure::UffdOneCpu => "userfaultfd round trip, both threads on one CPU",
            Measure::SwapIn => "swap-in: re-read in order, memory cgroup over its limit",
            Measure::MappedCold => "mmap'd ext4 file, cold (fadvise DONTNEED)",
            Measure::MappedHot => "mmap'd ext4 file, hot (in the page cache)",
        }
    }

    /// vm.c's arguments; `small` for the uncounted warm-up.
    fn args(self, opts: &VmOptions, mapped: &Path, small: bool) -> Vec<OsString> {
        let pages = |bytes: u64| if small { 64 } else { bytes / PAGE }.to_string();
        let v: Vec<OsString> = match self {
            Measure::Touch => vec!["touch".into(), pages(opts.touch_bytes).into()],
            Measure::Uffd => vec!["uffd".into(), pages(opts.touch_bytes).into()],
            Measure::UffdOneCpu => vec!["uffd".into(), pages(opts.touch_bytes).into(), "one-cpu".into()],
            Measure::SwapIn => vec!["reread".into(), pages(opts.swap_working_bytes).into(), "1".into()],
            Measure::MappedCold => vec!["mapfile".into(), mapped.into(), "cold".into()],
            Measure::MappedHot => vec!["mapfile".into(), mapped.into(), "hot".into()],
        };
        v
    }
}

/// Writes the file the VINO side maps (`bytes` of a pattern, so no page reads as zeros) onto
/// the image, made durable, with a kernel of its own: each measuring kernel starts with it
/// out of its cache.
fn write_vino_mapped(image: &Path, path: &Path, bytes: u64) -> Result<()> {
    let kernel = boot_vino(image, 1 << 30, 1 << 20)?;
    let root = kernel.spawn(vino_kernel::Credentials::root());
    let fd = root
        .open(&path.to_string_lossy(), vino_kernel::OpenFlags::create())
        .map_err(|e| anyhow!("creating {} on VINO: {e}", path.display()))?;
    let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8 + 1).collect();
    let mut done = 0;
    while done < bytes {
        let n = chunk.len().min((bytes - done) as usize);
        root.write(fd, &chunk[..n])
            .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
        done += n as u64;
    }
    root.fsync(fd).map_err(|e| anyhow!("fsync: {e}"))?;
    root.close(fd).map_err(|e| anyhow!("close: {e}"))?;
    kernel.exit(root.pid());
    kernel.shutdown().map_err(|e| anyhow!("shutting VINO down: {e}"))
}

/// One measure: the medians of the rounds, each round's figures, the ratio to the floor.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Shared by the two sides' rows for the same work (`first-touch`, `swap-in`,
    /// `mapped-cold`, `mapped-hot`; Linux also has `uffd`, `uffd-one-cpu`).
    pub key: String,
    pub measure: String,
    /// Pages timed per run.
    pub pages: u64,
    pub ns_per_page: f64,
    pub ns_per_page_rounds: Vec<f64>,
    /// Major faults per run (median; none where the program cannot count them).
    pub major_faults: Option<f64>,
    pub major_faults_rounds: Vec<f64>,
    pub minor_faults: Option<f64>,
    /// ns per page over the userfaultfd round trip's (Linux's `uffd` row).
    pub vs_uffd_floor: f64,
    /// ns per page over the round trip's with both threads on one CPU (`uffd-one-cpu`).
    pub vs_uffd_one_cpu: f64,
}

/// The Linux side: every row that ran, and why any did not.
#[derive(Clone, Debug, Serialize)]
pub struct LinuxSide {
    pub rows: Vec<Row>,
    /// Measures skipped, with the reason (the swap-in without root or a memory cgroup).
    pub skipped: Vec<Skipped>,
    /// How the swap-in ran (None if it did not).
    pub swap_setup: Option<SwapSetup>,
    pub clang: String,
    pub notes: Vec<String>,
}

/// The swap file and the memory cgroup the swap-in ran with (both gone after the run).
#[derive(Clone, Debug, Serialize)]
pub struct SwapSetup {
    pub swap_file: PathBuf,
    pub swap_file_bytes: u64,
    /// The cgroup made for the program.
    pub cgroup: PathBuf,
    /// Where the cgroup was made, and its version.
    pub controller: String,
    pub limit_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    pub key: String,
    pub measure: String,
    pub reason: String,
}

/// The VINO side, the same C as a VINO process paged by the kernel: rows keyed `first-touch`,
/// `swap-in` (from VINO's swap), `mapped-cold` and `mapped-hot` (a mapped VINO file), their
/// `vs_uffd_floor` against Linux's floor.
#[derive(Clone, Debug, Serialize)]
pub struct VinoSide {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VmReport {
    pub rounds: usize,
    pub page_bytes: u64,
    pub touch_bytes: u64,
    pub swap_limit_bytes: u64,
    pub swap_working_bytes: u64,
    pub swap_file_bytes: u64,
    pub mapped_bytes: u64,
    pub linux: LinuxSide,
    /// None until VINO's pager is measured in the same run.
    pub vino_side: Option<VinoSide>,
    /// What paging costs SQLite and gzip (None if not measured).
    pub paging_cost: Option<PagingCost>,
    pub notes: Vec<String>,
}

fn source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs").join("vm.c")
}

/// Builds vm.c for the host into `dir`: the program and the compiler's description.
fn build_native(dir: &Path) -> Result<(PathBuf, String)> {
    build_native_from(&source(), &dir.join("vm-native"))
}

/// Builds the C program `source` for the host as `exe`: the program and the compiler's
/// description.
pub(crate) fn build_native_from(source: &Path, exe: &Path) -> Result<(PathBuf, String)> {
    let opts = vino_sdk::BuildOptions::default();
    let tc = vino_sdk::find_toolchain(&opts).map_err(|e| anyhow!("{e}"))?;
    let exe = exe.to_path_buf();
    let mut cmd = Command::new(&tc.clang);
    cmd.arg(opts.opt_level.flag())
        .arg("-pthread")
        .arg(source)
        .arg("-o")
        .arg(&exe);
    let out = cmd
        .output()
        .with_context(|| format!("running {}", tc.clang.display()))?;
    ensure!(
        out.status.success(),
        "building {} for the host: {cmd:?}: {}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((exe, format!("{} {}", tc.clang.display(), opts.opt_level.flag())))
}

/// Builds vm.c for wasm32-wasi with the SDK (the VINO side's program): the module.
pub fn build_wasm(dir: &Path) -> Result<Vec<u8>> {
    let out = dir.join("vm.wasm");
    vino_sdk::build_program(&[source()], &out, &vino_sdk::BuildOptions::default())
        .map_err(|e| anyhow!("building vm.c for wasm32-wasi: {e}"))?;
    Ok(fs::read(&out)?)
}

/// The `key=value` figures on vm.c's result line.
pub fn parse_figures(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .find(|l| l.starts_with("ns_per_page="))
        .into_iter()
        .flat_map(|l| l.split_whitespace())
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            let v: f64 = v.parse().ok()?;
            v.is_finite().then(|| (k.to_string(), v))
        })
        .collect()
}

/// Runs the host's vm with `args`, in `cgroup` if given (a shell moves itself in first, so the
/// program starts there); its figures.
pub(crate) fn run_native(exe: &Path, args: &[OsString], cgroup: Option<&Cgroup>) -> Result<BTreeMap<String, f64>> {
    let mut cmd = match cgroup {
        Some(cg) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg("echo $$ > \"$0\" && exec \"$@\"")
                .arg(cg.dir.join("cgroup.procs"))
                .arg(exe);
            c
        }
        None => Command::new(exe),
    };
    let out = cmd
        .args(args)
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    let shown = args.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ");
    ensure!(
        out.status.success(),
        "vm {shown} on Linux: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let figures = parse_figures(&String::from_utf8_lossy(&out.stdout));
    ensure!(
        figures.get("ns_per_page").is_some_and(|v| *v > 0.0),
        "vm {shown} printed no ns_per_page: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    Ok(figures)
}

// ---- the swap file and its cgroup -----------------------------------------------------------

/// Set when SIGINT, SIGTERM or SIGHUP arrives while a `SwapRig` is up.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

const CAUGHT: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// While alive, SIGINT, SIGTERM and SIGHUP only set [`INTERRUPTED`] (the run then stops at the
/// next measure and the guards undo what they did); the former actions come back on drop.
pub(crate) struct Interrupts {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl Interrupts {
    fn catch() -> Result<Interrupts> {
        INTERRUPTED.store(false, Ordering::SeqCst);
        let mut guard = Interrupts { old: Vec::new() };
        for sig in CAUGHT {
            // SAFETY: a zeroed sigaction is a valid value; the handler only stores to an atomic,
            // which is async-signal-safe; `old` is written by the kernel.
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = note_interrupt as *const () as libc::sighandler_t;
                act.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut act.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &act, &mut old) != 0 {
                    bail!("sigaction: {}", std::io::Error::last_os_error());
                }
                guard.old.push((sig, old));
            }
        }
        Ok(guard)
    }

    pub(crate) fn check() -> Result<()> {
        ensure!(
            !INTERRUPTED.load(Ordering::SeqCst),
            "interrupted (the swap file and the cgroup are removed)"
        );
        Ok(())
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        for (sig, old) in self.old.drain(..) {
            // SAFETY: `old` is the action sigaction returned for this signal.
            unsafe {
                libc::sigaction(sig, &old, std::ptr::null_mut());
            }
        }
    }
}

/// A swap file switched on; switched off and removed on drop.
struct SwapFile {
    path: PathBuf,
    swapoff: PathBuf,
    on: bool,
}

impl SwapFile {
    fn make(path: &Path, bytes: u64) -> Result<SwapFile> {
        let (mkswap, swapon, swapoff) = (tool("mkswap")?, tool("swapon")?, tool("swapoff")?);
        let mut swap = SwapFile {
            path: path.to_path_buf(),
            swapoff,
            on: false,
        };
        let f = fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        f.set_permissions(fs::Permissions::from_mode(0o600))?;
        let len = libc::off_t::try_from(bytes).context("swap file size")?;
        // SAFETY: the descriptor is open for writing for the duration of the call.
        let r = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len) };
        ensure!(
            r == 0,
            "allocating {}: {}",
            path.display(),
            std::io::Error::from_raw_os_error(r)
        );
        f.sync_all()?;
        drop(f);
        run_tool(&mkswap, &["-q".as_ref(), path.as_os_str()])?;
        // The highest priority: the pages go to this file even where the machine has other swap.
        run_tool(&swapon, &["--priority".as_ref(), "32767".as_ref(), path.as_os_str()])?;
        swap.on = true;
        Ok(swap)
    }
}

impl Drop for SwapFile {
    fn drop(&mut self) {
        if self.on
            && let Err(e) = run_tool(&self.swapoff, &[self.path.as_os_str()])
        {
            eprintln!("vm: {e:#}; switch it off by hand: swapoff {}", self.path.display());
        }
        let _ = fs::remove_file(&self.path);
    }
}

fn tool(name: &str) -> Result<PathBuf> {
    find_tool(name).ok_or_else(|| anyhow!("{name} not found (Debian's util-linux)"))
}

/// What the swap-in runs in: a swap file switched on, a memory cgroup limited to L bytes, and
/// the signals caught meanwhile. Fields drop in order: the cgroup, the swap, the signals.
pub(crate) struct SwapRig {
    pub(crate) cgroup: Cgroup,
    _swap: SwapFile,
    _interrupts: Interrupts,
    pub(crate) setup: SwapSetup,
}

impl SwapRig {
    /// The rig, or why the swap-in cannot run here (Ok(Err(reason)): a skip, not a failure).
    pub(crate) fn make(opts: &VmOptions, dir: &Path) -> Result<std::result::Result<SwapRig, String>> {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            return Ok(Err(format!("not root (euid {euid}): cannot switch on a swap file")));
        }
        let (cap, site) = e9_linux::find_cgroup_site();
        let Some(site) = site else {
            return Ok(Err(format!("no memory cgroup to limit the program in: {}", cap.detail)));
        };
        let interrupts = Interrupts::catch()?;
        let path = dir.join("vm.swap");
        let swap = match SwapFile::make(&path, opts.swap_file_bytes) {
            Ok(s) => s,
            Err(e) => return Ok(Err(format!("cannot switch on a swap file: {e:#}"))),
        };
        let cgroup = site.create(&format!("vino-vm-{}", std::process::id()))?;
        cgroup.set_limit(opts.swap_limit_bytes)?;
        let setup = SwapSetup {
            swap_file: path,
            swap_file_bytes: opts.swap_file_bytes,
            cgroup: cgroup.dir.clone(),
            controller: cap.detail,
            limit_bytes: opts.swap_limit_bytes,
        };
        Ok(Ok(SwapRig {
            cgroup,
            _swap: swap,
            _interrupts: interrupts,
            setup,
        }))
    }
}

/// A file of `bytes` bytes of varied content, written and fsynced.
fn write_mapped(path: &Path, bytes: u64) -> Result<()> {
    use std::io::Write as _;
    let mut f = fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut block = vec![0u8; 1 << 20];
    let mut x: u32 = 1998;
    for b in block.iter_mut() {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        *b = (x >> 16) as u8 | 1;
    }
    let mut left = bytes;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n])?;
        left -= n as u64;
    }
    f.sync_all().with_context(|| format!("fsync of {}", path.display()))
}

/// Runs every Linux measure, `opts.rounds` times.
pub fn linux_side(opts: &VmOptions, progress: &mut dyn FnMut(&str)) -> Result<LinuxSide> {
    opts.check()?;
    let dir = front::scratch_dir(&opts.scratch)?;
    progress("building vm.c for the host");
    let (exe, clang) = build_native(dir.path())?;
    progress("writing the file to map");
    let mapped = dir.path().join("mapped");
    write_mapped(&mapped, opts.mapped_bytes)?;
    progress("switching on a swap file");
    let (rig, mut skipped) = match SwapRig::make(opts, dir.path())? {
        Ok(rig) => (Some(rig), Vec::new()),
        Err(reason) => (
            None,
            vec![Skipped {
                key: Measure::SwapIn.key().into(),
                measure: Measure::SwapIn.name().into(),
                reason,
            }],
        ),
    };
    let measures: Vec<Measure> = Measure::ALL
        .into_iter()
        .filter(|m| *m != Measure::SwapIn || rig.is_some())
        .collect();
    let measure = |m: Measure, small: bool| -> Result<BTreeMap<String, f64>> {
        let cgroup = (m == Measure::SwapIn)
            .then(|| rig.as_ref().map(|r| &r.cgroup))
            .flatten();
        let figures = run_native(&exe, &m.args(opts, &mapped, small), cgroup)?;
        Interrupts::check()?;
        Ok(figures)
    };
    progress("warming up");
    for &m in &measures {
        if m != Measure::SwapIn {
            measure(m, true)?;
        }
    }
    let mut samples: Vec<Vec<BTreeMap<String, f64>>> = vec![Vec::new(); measures.len()];
    for round in 0..opts.rounds {
        let mut order: Vec<usize> = (0..measures.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            progress(&format!(
                "round {} of {}: {}",
                round + 1,
                opts.rounds,
                measures[i].key()
            ));
            samples[i].push(measure(measures[i], false)?);
        }
    }
    let swap_setup = rig.as_ref().map(|r| r.setup.clone());
    drop(rig);
    let mut rows: Vec<Row> = measures.iter().zip(&samples).map(|(&m, s)| row(m, s)).collect();
    let floors = Floors::of(&rows);
    for r in &mut rows {
        floors.apply(r);
    }
    skipped.retain(|s| !rows.iter().any(|r| r.key == s.key));
    let notes = measures
        .iter()
        .zip(&samples)
        .filter(|(_, s)| s.iter().any(|f| f.contains_key("user_mode_only")))
        .map(|(m, _)| format!("{}: not root, so the region took user-mode faults only", m.key()))
        .collect();
    Ok(LinuxSide {
        rows,
        skipped,
        swap_setup,
        clang,
        notes,
    })
}

/// Linux's userfaultfd round trips, the denominators of every row's ratios (NaN if missing).
#[derive(Clone, Copy, Debug)]
pub struct Floors {
    pub uffd: f64,
    pub uffd_one_cpu: f64,
}

impl Floors {
    fn of(linux: &[Row]) -> Floors {
        let ns = |m: Measure| {
            linux
                .iter()
                .find(|r| r.key == m.key())
                .map_or(f64::NAN, |r| r.ns_per_page)
        };
        Floors {
            uffd: ns(Measure::Uffd),
            uffd_one_cpu: ns(Measure::UffdOneCpu),
        }
    }

    fn apply(self, r: &mut Row) {
        r.vs_uffd_floor = r.ns_per_page / self.uffd;
        r.vs_uffd_one_cpu = r.ns_per_page / self.uffd_one_cpu;
    }
}

/// The row of one measure from its rounds' figures.
fn row(m: Measure, samples: &[BTreeMap<String, f64>]) -> Row {
    let series = |k: &str| -> Vec<f64> { samples.iter().filter_map(|s| s.get(k).copied()).collect() };
    let median = |v: &[f64]| (!v.is_empty()).then(|| median_of(v.iter().copied()));
    let ns = series("ns_per_page");
    let (major, minor) = (series("majflt"), series("minflt"));
    Row {
        key: m.key().into(),
        measure: m.name().into(),
        pages: samples.first().and_then(|s| s.get("pages")).map_or(0, |p| *p as u64),
        ns_per_page: median_of(ns.iter().copied()),
        ns_per_page_rounds: ns,
        major_faults: median(&major),
        major_faults_rounds: major,
        minor_faults: median(&minor),
        vs_uffd_floor: f64::NAN,
        vs_uffd_one_cpu: f64::NAN,
    }
}

/// The machine's load averages (1, 5, 15 minutes), to say whether it was busy.
pub(crate) fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Boots a kernel on `image` whose processes keep `resident` bytes in frames.
pub(crate) fn boot_vino(image: &Path, resident: u64, swap: u64) -> Result<std::sync::Arc<vino_kernel::Kernel>> {
    use vino_kernel::account::{LimitsConfig, Resource};
    let dev = std::sync::Arc::new(vino_blockdev::FileDevice::open(image)?);
    let mut limits = LimitsConfig::default();
    limits.process.set(Resource::ResidentBytes, resident);
    limits.total.set(
        Resource::ResidentBytes,
        resident.max(limits.total.get(Resource::ResidentBytes)),
    );
    limits.user.set(Resource::SwapBytes, swap);
    limits.total.set(Resource::SwapBytes, swap);
    let config = vino_kernel::KernelConfig {
        limits,
        ..vino_kernel::KernelConfig::default()
    };
    vino_kernel::Kernel::boot(dev, &config).map_err(|e| anyhow!("booting VINO on {}: {e}", image.display()))
}

/// The VINO side: vm.c as a VINO process, its memory paged by the kernel.
pub fn vino_side(opts: &VmOptions, floors: Floors, progress: &mut dyn FnMut(&str)) -> Result<VinoSide> {
    opts.check()?;
    let dir = front::scratch_dir(&opts.scratch)?;
    progress("building vm.c for wasm32-wasi");
    let program = vino_wasi::Program::compile(&build_wasm(dir.path())?, vino_wasi::ProgramLimits::default())?;
    let image = dir.path().join("vino-vm.img");
    let image_bytes = (2 * opts.swap_file_bytes + (256 << 20)).next_multiple_of(1 << 20);
    {
        let dev = vino_blockdev::FileDevice::create(&image, image_bytes)?;
        vino_fs::mkfs(&dev, &vino_fs::MkfsOptions::default())?;
    }
    let mapped = Path::new("/mapped");
    write_vino_mapped(&image, mapped, opts.mapped_bytes)?;
    let measures = [
        (
            Measure::Touch,
            2 * opts.touch_bytes,
            "first touch of program memory (zeros through the pager)",
        ),
        (
            Measure::SwapIn,
            opts.swap_limit_bytes,
            "swap-in: re-read in order, resident limit L, VINO's swap",
        ),
        (
            Measure::MappedCold,
            2 * opts.mapped_bytes,
            "vino_mmap'd VINO file, cold (a kernel booted with an empty cache)",
        ),
        (
            Measure::MappedHot,
            2 * opts.mapped_bytes,
            "vino_mmap'd VINO file, hot (in VINO's page cache)",
        ),
    ];
    let mut samples: Vec<Vec<BTreeMap<String, f64>>> = vec![Vec::new(); measures.len()];
    let mut paged = true;
    let mut measure = |i: usize, small: bool| -> Result<BTreeMap<String, f64>> {
        let (m, resident, _) = measures[i];
        let kernel = boot_vino(&image, resident, opts.swap_file_bytes)?;
        let argv = std::iter::once(OsString::from("vm"))
            .chain(m.args(opts, mapped, small))
            .map(|a| a.into_encoded_bytes())
            .collect();
        let text =
            crate::e7_gunzip::run_printing(&kernel, &program, argv, &format!("vm {} as a VINO process", m.key()));
        let stats = kernel.pager_stats();
        kernel.shutdown().map_err(|e| anyhow!("shutting VINO down: {e}"))?;
        let mut figures = parse_figures(&text?);
        match stats {
            Some(s) if matches!(m, Measure::MappedCold | Measure::MappedHot) => {
                // Each fault reads the file (its page and up to 15 untouched ones after it).
                figures.insert("majflt".into(), s.faults as f64);
                figures.insert("minflt".into(), 0.0);
            }
            Some(s) => {
                figures.insert("majflt".into(), s.swap_reads as f64);
                figures.insert("minflt".into(), s.faults.saturating_sub(s.swap_reads) as f64);
            }
            None => paged = false,
        }
        Interrupts::check()?;
        Ok(figures)
    };
    progress("VINO: warming up");
    for i in 0..measures.len() {
        measure(i, true)?;
    }
    for round in 0..opts.rounds {
        let mut order: Vec<usize> = (0..measures.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            progress(&format!(
                "VINO round {} of {}: {}",
                round + 1,
                opts.rounds,
                measures[i].0.key()
            ));
            samples[i].push(measure(i, false)?);
        }
    }
    let rows = measures
        .iter()
        .zip(&samples)
        .map(|(&(m, _, name), s)| {
            let mut r = row(m, s);
            r.measure = name.into();
            floors.apply(&mut r);
            r
        })
        .collect();
    let mut notes = vec![format!(
        "VINO: vm.c for wasm32-wasi as a VINO process on a {} MiB image in the scratch directory (O_DIRECT), a \
         kernel booted per run; first touch with a resident limit of {} MiB, swap-in with {} MiB; major faults are \
         the pager's reads of swap (each brings the faulting page and up to 31 after it whose slots follow its \
         own), minor its other faults (zero fills, pages back from its inactive list)",
        image_bytes >> 20,
        (2 * opts.touch_bytes) >> 20,
        opts.swap_limit_bytes >> 20
    )];
    if !paged {
        notes.push("VINO: programs' memory was not paged (no userfaultfd): the rows measure Linux's paging".into());
    }
    Ok(VinoSide { rows, notes })
}

// ---- what paging costs a real program ------------------------------------------------------

/// The goal: a program whose memory the kernel pages within this factor of the same program's
/// time with its memory left to wasmtime (and Linux).
pub const GOAL_PAGED_VS_UNPAGED: f64 = 1.05;

/// The resident limit, per process and in total, of the paging-cost measure: far above SQLite's
/// and gzip's working sets, so the pager fills pages and never evicts.
pub const PAGING_RESIDENT_LIMIT: u64 = 1 << 30;

/// The in-memory disk each paging-cost run's kernel boots on, in 4 KiB blocks (256 MiB, only
/// SQLite's database written to it).
const PAGING_DEVICE_BLOCKS: u64 = 65_536;

/// VINO's page cache in the paging-cost runs, in 4 KiB frames (as `vino bench native`'s).
const PAGING_CACHE_FRAMES: usize = 32_768;

/// SQLite and gzip, paged against unpaged.
#[derive(Clone, Debug, Serialize)]
pub struct PagingCost {
    pub rows: Vec<PagingRow>,
    pub rounds: usize,
    pub sqlite_rows: u64,
    pub text_bytes: usize,
    pub resident_limit_bytes: u64,
    pub goal: f64,
    /// Whether the paged side's memory was the pager's (false without userfaultfd: then both
    /// sides are wasmtime's memory and the ratios measure nothing).
    pub paged: bool,
}

/// One program's times on both kernels.
#[derive(Clone, Debug, Serialize)]
pub struct PagingRow {
    pub program: String,
    pub step: String,
    pub command: String,
    /// Seconds from start to exit, the median of the rounds.
    pub paged_s: f64,
    pub unpaged_s: f64,
    pub paged_vs_unpaged: f64,
    pub meets_goal: bool,
    /// The pager's faults served during a paged run, and how many were swap-ins (medians).
    pub pager_faults: Option<f64>,
    pub swap_ins: Option<f64>,
    pub paged_s_rounds: Vec<f64>,
    pub unpaged_s_rounds: Vec<f64>,
}

/// Boots a kernel on a fresh in-memory disk, its programs' memory paged or not, the resident
/// limits at [`PAGING_RESIDENT_LIMIT`] either way.
fn boot_for_paging(paged: bool) -> Result<std::sync::Arc<vino_kernel::Kernel>> {
    use vino_kernel::account::{LimitsConfig, Resource};
    let dev = std::sync::Arc::new(vino_blockdev::MemDevice::new(PAGING_DEVICE_BLOCKS));
    vino_fs::mkfs(&*dev, &vino_fs::MkfsOptions::default())?;
    let mut limits = LimitsConfig::default();
    limits.process.set(Resource::ResidentBytes, PAGING_RESIDENT_LIMIT);
    limits.total.set(Resource::ResidentBytes, PAGING_RESIDENT_LIMIT);
    let config = vino_kernel::KernelConfig {
        limits,
        cache_frames: PAGING_CACHE_FRAMES,
        paged_memory: paged,
        ..vino_kernel::KernelConfig::default()
    };
    vino_kernel::Kernel::boot(dev, &config).map_err(|e| anyhow!("booting VINO on a memory disk: {e}"))
}

/// One run of a program: its seconds, and the pager's faults and swap-ins during it (None
/// unpaged).
#[derive(Clone, Copy, Debug)]
struct PagingRun {
    secs: f64,
    faults: Option<u64>,
    swap_ins: Option<u64>,
}

/// One run of `step` on a fresh kernel, its memory paged or not.
fn paging_run(vino: &crate::native::Vino, host: &Path, step: &crate::native::Step, paged: bool) -> Result<PagingRun> {
    let kernel = boot_for_paging(paged)?;
    let before = kernel.pager_stats();
    let secs = vino.run(&kernel, host, step);
    kernel.settle_memory();
    let after = kernel.pager_stats();
    kernel.shutdown().map_err(|e| anyhow!("shutting VINO down: {e}"))?;
    // The pager starts with the first program memory: none before it is no fault yet.
    let before = before.unwrap_or_default();
    ensure!(
        after.is_none() || paged,
        "{}: the kernel paged programs' memory with paged_memory off",
        step.name
    );
    Ok(PagingRun {
        secs: secs?,
        faults: after.map(|a| a.faults.saturating_sub(before.faults)),
        swap_ins: after.map(|a| a.swap_ins.saturating_sub(before.swap_ins)),
    })
}

/// SQLite inserting rows and gzip compressing text as VINO processes, with the kernel paging
/// their memory and without, the side that goes first alternating, `opts.rounds` rounds after one
/// uncounted run of each.
pub fn paging_cost(opts: &VmOptions, progress: &mut dyn FnMut(&str)) -> Result<PagingCost> {
    use crate::native;
    opts.check()?;
    let native_opts = native::NativeOptions {
        sqlite_rows: opts.sqlite_rows,
        text_bytes: opts.text_bytes,
        ..native::NativeOptions::new(opts.quick)
    };
    let steps: Vec<native::Step> = native::steps(&native_opts)
        .into_iter()
        .filter(|s| (s.program, s.kind) == ("sqlite3", "sql") || (s.program, s.kind) == ("gzip", "compute"))
        .collect();
    let mut wasm = Vec::new();
    for s in &steps {
        progress(&format!("building {} for wasm32-wasi", s.program));
        wasm.push((s.program, native::build_wasm(s.program)?));
    }
    progress("compiling SQLite and gzip for vino-wasi");
    let vino = native::Vino::compile(&wasm)?;
    let dir = front::scratch_dir(&opts.scratch)?;
    fs::write(dir.path().join(native::SCRIPT), native::sqlite_script(opts.sqlite_rows))?;
    fs::write(
        dir.path().join(native::TEXT),
        crate::e7_gunzip::generate_text(opts.text_bytes, 0xE11),
    )?;
    let host = dir.path();
    let mut runs: Vec<[Vec<PagingRun>; 2]> = vec![[Vec::new(), Vec::new()]; steps.len()];
    progress("paging cost: warming up");
    for s in &steps {
        for paged in [true, false] {
            paging_run(&vino, host, s, paged)?;
        }
    }
    for round in 0..opts.rounds {
        let order = if round % 2 == 0 { [true, false] } else { [false, true] };
        for (s, r) in steps.iter().zip(runs.iter_mut()) {
            for paged in order {
                progress(&format!(
                    "paging cost, round {} of {}: {} {}",
                    round + 1,
                    opts.rounds,
                    s.program,
                    if paged { "paged" } else { "unpaged" }
                ));
                r[usize::from(!paged)].push(paging_run(&vino, host, s, paged)?);
                Interrupts::check()?;
            }
        }
    }
    let rows = steps
        .iter()
        .zip(&runs)
        .map(|(s, [paged, unpaged])| paging_row(s, paged, unpaged))
        .collect();
    Ok(PagingCost {
        rows,
        rounds: opts.rounds,
        sqlite_rows: opts.sqlite_rows,
        text_bytes: opts.text_bytes,
        resident_limit_bytes: PAGING_RESIDENT_LIMIT,
        goal: GOAL_PAGED_VS_UNPAGED,
        paged: runs.iter().flat_map(|[p, _]| p).all(|r| r.faults.is_some()),
    })
}

fn paging_row(step: &crate::native::Step, paged: &[PagingRun], unpaged: &[PagingRun]) -> PagingRow {
    let secs = |runs: &[PagingRun]| -> Vec<f64> { runs.iter().map(|r| r.secs).collect() };
    let (p, u) = (secs(paged), secs(unpaged));
    let count = |pick: fn(&PagingRun) -> Option<u64>| -> Option<f64> {
        let v: Vec<f64> = paged.iter().filter_map(|r| pick(r).map(|n| n as f64)).collect();
        (!v.is_empty()).then(|| median_of(v))
    };
    let (paged_s, unpaged_s) = (median_of(p.iter().copied()), median_of(u.iter().copied()));
    let ratio = paged_s / unpaged_s;
    PagingRow {
        program: step.program.to_string(),
        step: step.name.clone(),
        command: step.args.join(" ") + if step.stdin.is_some() { " < input" } else { "" },
        paged_s,
        unpaged_s,
        paged_vs_unpaged: ratio,
        meets_goal: ratio <= GOAL_PAGED_VS_UNPAGED,
        pager_faults: count(|r| r.faults),
        swap_ins: count(|r| r.swap_ins),
        paged_s_rounds: p,
        unpaged_s_rounds: u,
    }
}

pub fn run(opts: &VmOptions, progress: &mut dyn FnMut(&str)) -> Result<VmReport> {
    let before = load_average();
    let linux = linux_side(opts, progress)?;
    let vino = vino_side(opts, Floors::of(&linux.rows), progress)?;
    let paging = paging_cost(opts, progress)?;
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    Ok(VmReport {
        rounds: opts.rounds,
        page_bytes: PAGE,
        touch_bytes: opts.touch_bytes,
        swap_limit_bytes: opts.swap_limit_bytes,
        swap_working_bytes: opts.swap_working_bytes,
        swap_file_bytes: opts.swap_file_bytes,
        mapped_bytes: opts.mapped_bytes,
        linux,
        vino_side: Some(vino),
        paging_cost: Some(paging),
        notes: vec![format!(
            "load average (1, 5, 15 min) before: {before}, after: {}; {cpus} CPUs",
            load_average()
        )],
    })
}

impl PagingCost {
    fn table(&self) -> Table {
        let mut t = Table::new(
            "What paging costs a real program: the kernel paging its memory against wasmtime's memory",
            &[
                "step",
                "paged s",
                "unpaged s",
                "paged / unpaged",
                "within 5%",
                "pager faults",
                "swap-ins",
            ],
        );
        for r in &self.rows {
            t.row([
                r.step.clone(),
                format!("{:.3}", r.paged_s),
                format!("{:.3}", r.unpaged_s),
                fmt_ratio(r.paged_vs_unpaged),
                if r.meets_goal { "yes" } else { "no" }.into(),
                fmt_faults(r.pager_faults),
                fmt_faults(r.swap_ins),
            ]);
        }
        t.note(format!(
            "the median of {} rounds, the side that goes first alternating, after one uncounted run of each; a \
             kernel booted for every run on an in-memory disk, paged_memory on or off, the resident limits {} MiB \
             per process and in total either way; wall-clock from start to exit",
            self.rounds,
            self.resident_limit_bytes >> 20
        ));
        for r in &self.rows {
            t.note(format!("{}: {}", r.step, r.command));
        }
        if !self.paged {
            t.note("programs' memory was not paged (no userfaultfd): both sides are wasmtime's memory");
        }
        t
    }
}

fn fmt_faults(f: Option<f64>) -> String {
    f.map_or("-".into(), |v| format!("{v:.0}"))
}

impl VmReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "Virtual memory: what a page fault costs, against the userfaultfd round trip",
            &[
                "side",
                "measure",
                "pages",
                "ns per page",
                "/ uffd floor",
                "/ one-CPU uffd",
                "major faults",
                "minor faults",
            ],
        );
        let sides =
            std::iter::once(("Linux", &self.linux.rows)).chain(self.vino_side.as_ref().map(|v| ("VINO", &v.rows)));
        for (side, rows) in sides {
            for r in rows {
                t.row([
                    side.to_string(),
                    r.measure.clone(),
                    r.pages.to_string(),
                    format!("{:.1}", r.ns_per_page),
                    fmt_ratio(r.vs_uffd_floor),
                    fmt_ratio(r.vs_uffd_one_cpu),
                    fmt_faults(r.major_faults),
                    fmt_faults(r.minor_faults),
                ]);
            }
        }
        for n in &self.linux.notes {
            t.note(format!("Linux {n}"));
        }
        for s in &self.linux.skipped {
            t.note(format!("Linux {} skipped: {}", s.key, s.reason));
        }
        t.note(format!(
            "median of {} rounds, the order of the measures reversed every other round; experiments/programs/vm.c \
             built by {} for the host, timing itself with clock_gettime(CLOCK_MONOTONIC), faults from getrusage over \
             the timed loop",
            self.rounds, self.linux.clang
        ));
        t.note(format!(
            "first touch and userfaultfd: {} MiB; swap-in: {} MiB written then re-read once in order in a memory \
             cgroup limited to {} MiB; mapped file: {} MiB, one read per page",
            self.touch_bytes >> 20,
            self.swap_working_bytes >> 20,
            self.swap_limit_bytes >> 20,
            self.mapped_bytes >> 20
        ));
        if let Some(s) = &self.linux.swap_setup {
            t.note(format!(
                "swap-in: a {} MiB swap file at {} (the scratch directory's disk, highest priority), a memory cgroup \
                 limited to {} MiB, {}",
                s.swap_file_bytes >> 20,
                s.swap_file.display(),
                s.limit_bytes >> 20,
                s.controller
            ));
        }
        t.note(
            "/ uffd floor: ns per page over the userfaultfd round trip's (the floor for a pager in user space); \
             a cold mapped file's major faults are fewer than its pages: read-ahead and fault-around map many \
             pages per fault; the two-thread round trip wakes the other CPU, dearer when it is idle (on a virtual \
             machine, halted), so it varies with the machine's load more than the one-CPU one",
        );
        match &self.vino_side {
            None => t.note("VINO side: not measured yet (its pager is not in this build)"),
            Some(v) => {
                for n in &v.notes {
                    t.note(n.clone());
                }
                &mut t
            }
        };
        for n in &self.notes {
            t.note(n.clone());
        }
        let mut tables = vec![t];
        tables.extend(self.paging_cost.as_ref().map(PagingCost::table));
        tables
    }

    /// Each measure's ns per page over the userfaultfd round trip's, per side (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let mut groups: Vec<(String, Vec<(String, f64)>)> = self
            .linux
            .rows
            .iter()
            .map(|r| (r.key.clone(), vec![("Linux".to_string(), r.vs_uffd_floor)]))
            .collect();
        for r in self.vino_side.iter().flat_map(|v| &v.rows) {
            let bar = ("VINO".to_string(), r.vs_uffd_floor);
            match groups.iter_mut().find(|(k, _)| *k == r.key) {
                Some((_, bars)) => bars.push(bar),
                None => groups.push((r.key.clone(), vec![bar])),
            }
        }
        bar_chart(
            path,
            "Virtual memory: ns per page over the userfaultfd round trip's (1 = the floor)",
            "ns per page / uffd round trip",
            &groups,
        )
    }
}
