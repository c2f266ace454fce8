//! Experiment E9: the modern peer of E4. The same Wisconsin query 6 on Linux's own storage stack:
//! the relation and its index in an ext4 file system on a loop device over an image file (the
//! same kind of device as E4's plain device: an image on the host's disk, read without the host's
//! page cache), and the page cache limited to E4's cache size by a memory cgroup holding the
//! process that runs the query.
//!
//! Runs:
//!
//! * **default**: Linux's own read-ahead (`POSIX_FADV_NORMAL`), which on random reads reads little
//!   or nothing ahead but may take a cached neighbourhood for a stream;
//! * **random**: `posix_fadvise(POSIX_FADV_RANDOM)`, no read-ahead at all (E4's LRU run);
//! * **willneed N**: `POSIX_FADV_RANDOM` plus `posix_fadvise(POSIX_FADV_WILLNEED)` on each of the
//!   next N records as the scan goes (the first N at the start, then record i + N after reading
//!   record i): Linux's answer to E4's read-ahead graft.
//!
//! Every capability is probed first ([`probe`]): root, `mkfs.ext4` (Debian's `e2fsprogs`), a loop
//! mount, a memory cgroup the experiment may create children in (v2 `memory.max`, or v1
//! `memory.limit_in_bytes`). Where one is missing the report says so and gives no numbers.
//!
//! # How a run is made
//!
//! Before a run the files' cached pages are dropped (`POSIX_FADV_DONTNEED`; `drop_caches` is often
//! not writable in a container or VM) and `mincore` confirms none is left. The query runs in a
//! forked child: it waits until the parent has moved it into a fresh child cgroup, touches its
//! buffers, and waits again while the parent sets the limit to the cache size plus what the child
//! itself then uses; only then does it read the index range and the selected records, checking the
//! `unique1` of each. After `fork` the child makes system calls only (no allocation, no locks), so
//! forking a threaded program is safe. Before each record it asks `mincore` whether the record's
//! pages are cached (or being read): a record that is not counts as a miss, like E4's misses. The
//! loop device's counters give the reads that reached the device.
//!
//! With VINO's side in the same run ([`E9Options::vino`]), the two sides take turns: each
//! repetition runs all of VINO's runs (E4 on the plain device, once each), then all of Linux's;
//! each run reported is its repetition of median time.

use std::fs;
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde::Serialize;

use crate::e4_wisconsin::{
    DeviceKind, Devices, E4Options, E4Report, FULL_FRAMES, FULL_TUPLES, Policy, Protection, scaled_lookaheads,
};
use crate::wisconsin::{Relation, TUPLE_BYTES, offset_of};
use vino_measure::report::{Table, fmt_count, fmt_ns};

const PAGE: u64 = 4096;

/// Options of E9.
#[derive(Clone, Debug)]
pub struct E9Options {
    /// 20,000 tuples with a proportionally smaller page cache (as E4's quick mode).
    pub quick: bool,
    /// Where the ext4 image and its mount point live.
    pub scratch_dir: PathBuf,
    /// Tuples (default 100,000; quick 20,000).
    pub tuples: Option<usize>,
    /// Page-cache limit in bytes (default 4 MB scaled with the relation, as E4's cache).
    pub cache_bytes: Option<u64>,
    /// WILLNEED windows in records (default 10..120, E4's read-ahead values).
    pub willneed: Option<Vec<u64>>,
    /// Timed repetitions of each run (median reported; default 3).
    pub repeats: Option<usize>,
    /// Only probe the machine, run nothing.
    pub probe_only: bool,
    /// Also run VINO's side in the same run, on an image in the same scratch directory: LRU,
    /// the read-ahead graft at the same windows, and the largest window with look-ahead
    /// eviction of the next 2048 records (scaled; it reads about a fifth fewer blocks; 4096
    /// reads fewer still, but its window no longer fits the cache and most evictions then
    /// look at every page).
    pub vino: bool,
    pub seed: u64,
    pub lo: u32,
}

impl Default for E9Options {
    fn default() -> Self {
        E9Options {
            quick: false,
            scratch_dir: PathBuf::from("target/vino-bench"),
            tuples: None,
            cache_bytes: None,
            willneed: None,
            repeats: None,
            probe_only: false,
            vino: false,
            seed: 1998,
            lo: 0,
        }
    }
}

impl E9Options {
    pub fn quick() -> Self {
        E9Options {
            quick: true,
            ..Self::default()
        }
    }
}

/// One capability of the machine.
#[derive(Clone, Debug, Serialize)]
pub struct Capability {
    pub available: bool,
    pub detail: String,
}

impl Capability {
    fn yes(detail: impl Into<String>) -> Self {
        Capability {
            available: true,
            detail: detail.into(),
        }
    }
    fn no(detail: impl Into<String>) -> Self {
        Capability {
            available: false,
            detail: detail.into(),
        }
    }
}

/// What the machine lets E9 do.
#[derive(Clone, Debug, Serialize)]
pub struct Capabilities {
    pub root: Capability,
    pub mkfs_ext4: Capability,
    pub loop_mount: Capability,
    pub loop_direct_io: Capability,
    pub memory_cgroup: Capability,
    pub drop_caches: Capability,
    /// Where children cgroups are made, if anywhere.
    #[serde(skip)]
    pub(crate) cgroup: Option<CgroupSite>,
}

impl Capabilities {
    /// Why E9 cannot give comparable numbers here, if it cannot.
    pub fn blocker(&self) -> Option<String> {
        if !self.root.available {
            return Some(format!(
                "not root ({}): cannot mount a loop device or create cgroups",
                self.root.detail
            ));
        }
        if !self.mkfs_ext4.available {
            return Some(format!(
                "{}: install Debian's e2fsprogs (apt-get install -y e2fsprogs); .ci/run would need it too",
                self.mkfs_ext4.detail
            ));
        }
        if !self.loop_mount.available {
            return Some(format!("cannot loop-mount an ext4 image: {}", self.loop_mount.detail));
        }
        if !self.memory_cgroup.available {
            return Some(format!(
                "cgroup memory limit unavailable ({}): the page cache would not be limited, so E9 numbers would not be comparable with E4's",
                self.memory_cgroup.detail
            ));
        }
        None
    }

    pub fn table(&self) -> Table {
        let mut t = Table::new("E9: what this machine allows", &["capability", "available", "detail"]);
        for (name, c) in [
            ("root", &self.root),
            ("mkfs.ext4", &self.mkfs_ext4),
            ("loop mount", &self.loop_mount),
            ("loop direct I/O", &self.loop_direct_io),
            ("memory cgroup", &self.memory_cgroup),
            ("drop_caches", &self.drop_caches),
        ] {
            t.row([
                name.to_string(),
                if c.available { "yes" } else { "no" }.to_string(),
                c.detail.clone(),
            ]);
        }
        if let Some(b) = self.blocker() {
            t.note(format!("E9 skipped: {b}"));
        }
        t
    }
}

// ---- cgroups --------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub(crate) struct CgroupSite {
    /// The directory children are made in (this process's own cgroup).
    parent: PathBuf,
    v2: bool,
}

pub(crate) struct Cgroup {
    pub(crate) dir: PathBuf,
    v2: bool,
}

impl CgroupSite {
    pub(crate) fn create(&self, name: &str) -> Result<Cgroup> {
        let dir = self.parent.join(name);
        fs::create_dir(&dir).with_context(|| format!("creating the cgroup {}", dir.display()))?;
        Ok(Cgroup { dir, v2: self.v2 })
    }
}

impl Cgroup {
    fn write(&self, file: &str, value: &str) -> Result<()> {
        let path = self.dir.join(file);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        f.write_all(value.as_bytes())
            .with_context(|| format!("writing {value:?} to {}", path.display()))
    }

    fn read_u64(&self, file: &str) -> Option<u64> {
        fs::read_to_string(self.dir.join(file)).ok()?.trim().parse().ok()
    }

    fn add(&self, pid: libc::pid_t) -> Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }

    pub(crate) fn set_limit(&self, bytes: u64) -> Result<()> {
        self.write(
            if self.v2 { "memory.max" } else { "memory.limit_in_bytes" },
            &bytes.to_string(),
        )
    }

    fn usage(&self) -> Option<u64> {
        self.read_u64(if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        })
    }

    pub(crate) fn peak(&self) -> Option<u64> {
        self.read_u64(if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        })
    }

    /// Times the limit was hit.
    fn limit_hits(&self) -> Option<u64> {
        if self.v2 {
            let events = fs::read_to_string(self.dir.join("memory.events")).ok()?;
            events
                .lines()
                .find_map(|l| l.strip_prefix("max "))
                .and_then(|v| v.trim().parse().ok())
        } else {
            self.read_u64("memory.failcnt")
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The child has exited; an emptied cgroup can go (its remaining charges move up).
        for _ in 0..50 {
            if fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// The memory cgroup this process may make children in, or why there is none.
pub(crate) fn find_cgroup_site() -> (Capability, Option<CgroupSite>) {
    let Ok(own) = fs::read_to_string("/proc/self/cgroup") else {
        return (Capability::no("/proc/self/cgroup is unreadable"), None);
    };
    let Ok(mountinfo) = fs::read_to_string("/proc/self/mountinfo") else {
        return (Capability::no("/proc/self/mountinfo is unreadable"), None);
    };
    // (mount point, fs type, super options) of every cgroup mount.
    let mounts: Vec<(String, String, String)> = mountinfo
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let point = pre.split_whitespace().nth(4)?.to_string();
            let mut post = post.split_whitespace();
            let fstype = post.next()?.to_string();
            let opts = post.nth(1).unwrap_or("").to_string();
            fstype.starts_with("cgroup").then_some((point, fstype, opts))
        })
        .collect();
    let mut why = Vec::new();
    // cgroup v2: our cgroup must already delegate the memory controller to its children (we do
    // not change our own cgroup's settings).
    if let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) {
        if let Some((point, _, _)) = mounts.iter().find(|(_, t, _)| t == "cgroup2") {
            let dir = Path::new(point).join(path.trim_start_matches('/'));
            let subtree = fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            if subtree.split_whitespace().any(|c| c == "memory") {
                let site = CgroupSite {
                    parent: dir.clone(),
                    v2: true,
                };
                return match try_site(&site) {
                    Ok(()) => (
                        Capability::yes(format!("cgroup v2 at {} (memory.max)", dir.display())),
                        Some(site),
                    ),
                    Err(e) => (Capability::no(format!("cgroup v2 at {}: {e:#}", dir.display())), None),
                };
            }
            why.push(format!(
                "cgroup v2 at {}: the memory controller is not enabled for its children",
                dir.display()
            ));
        } else {
            why.push("no cgroup v2 mount".to_string());
        }
    }
    // cgroup v1: the memory hierarchy.
    let v1_path = own.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers.split(',').any(|c| c == "memory").then(|| path.to_string())
    });
    if let Some(path) = v1_path {
        if let Some((point, _, _)) = mounts
            .iter()
            .find(|(_, t, o)| t == "cgroup" && o.split(',').any(|x| x == "memory"))
        {
            let dir = Path::new(point).join(path.trim_start_matches('/'));
            let site = CgroupSite {
                parent: dir.clone(),
                v2: false,
            };
            return match try_site(&site) {
                Ok(()) => (
                    Capability::yes(format!(
                        "cgroup v1 memory controller at {} (memory.limit_in_bytes)",
                        dir.display()
                    )),
                    Some(site),
                ),
                Err(e) => (Capability::no(format!("cgroup v1 at {}: {e:#}", dir.display())), None),
            };
        }
        why.push("the v1 memory hierarchy is not mounted".to_string());
    } else {
        why.push("no v1 memory controller".to_string());
    }
    (Capability::no(why.join("; ")), None)
}

/// Makes a child cgroup, sets a limit, removes it.
fn try_site(site: &CgroupSite) -> Result<()> {
    let cg = site.create(&format!("vino-e9-probe-{}", std::process::id()))?;
    cg.set_limit(4 << 20)?;
    drop(cg);
    Ok(())
}

// ---- external tools -------------------------------------------------------------------------

pub(crate) fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/sbin", "/usr/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

pub(crate) fn run_tool(program: impl AsRef<std::ffi::OsStr>, args: &[&std::ffi::OsStr]) -> Result<String> {
    let program = program.as_ref();
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {}", program.to_string_lossy()))?;
    if !out.status.success() {
        bail!(
            "{} {} failed ({}): {}",
            program.to_string_lossy(),
            args.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// An ext4 file system on a loop device over an image, mounted; undone on drop.
pub(crate) struct Mounted {
    image: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) loop_dev: String,
    mounted: bool,
}

impl Mounted {
    pub(crate) fn make(mkfs: &Path, image: &Path, dir: &Path, bytes: u64) -> Result<Mounted> {
        let f = fs::File::create(image).with_context(|| format!("creating {}", image.display()))?;
        f.set_len(bytes)?;
        drop(f);
        let mut m = Mounted {
            image: image.to_path_buf(),
            dir: dir.to_path_buf(),
            loop_dev: String::new(),
            mounted: false,
        };
        run_tool(
            mkfs,
            &[
                "-q".as_ref(),
                "-F".as_ref(),
                "-b".as_ref(),
                "4096".as_ref(),
                "-E".as_ref(),
                "lazy_itable_init=0,lazy_journal_init=0".as_ref(),
                image.as_os_str(),
            ],
        )?;
        m.loop_dev = run_tool(
            "losetup",
            &[
                "--find".as_ref(),
                "--show".as_ref(),
                "--direct-io=on".as_ref(),
                image.as_os_str(),
            ],
        )?;
        fs::create_dir_all(dir)?;
        m.mount()?;
        Ok(m)
    }

    /// Mounts the loop device's ext4 at the directory.
    fn mount(&mut self) -> Result<()> {
        run_tool(
            "mount",
            &[
                "-t".as_ref(),
                "ext4".as_ref(),
                "-o".as_ref(),
                "noatime".as_ref(),
                self.loop_dev.as_ref(),
                self.dir.as_os_str(),
            ],
        )?;
        self.mounted = true;
        Ok(())
    }

    /// Unmounts and mounts again: Linux's caches of the file system are empty after.
    pub(crate) fn remount(&mut self) -> Result<()> {
        run_tool("umount", &[self.dir.as_os_str()])?;
        self.mounted = false;
        self.mount()
    }

    fn sys_block(&self, file: &str) -> Option<String> {
        let name = Path::new(&self.loop_dev).file_name()?.to_string_lossy().to_string();
        fs::read_to_string(format!("/sys/block/{name}/{file}"))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// (read requests, sectors read) of the loop device.
    fn reads(&self) -> (u64, u64) {
        let stat = self.sys_block("stat").unwrap_or_default();
        let f: Vec<u64> = stat.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        (f.first().copied().unwrap_or(0), f.get(2).copied().unwrap_or(0))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.mounted {
            let _ = run_tool("umount", &[self.dir.as_os_str()]);
        }
        if !self.loop_dev.is_empty() {
            let _ = run_tool("losetup", &["-d".as_ref(), self.loop_dev.as_ref()]);
        }
        let _ = fs::remove_dir(&self.dir);
        let _ = fs::remove_file(&self.image);
    }
}

/// Probes what the machine allows. Makes (and removes) a small image under `scratch_dir` to try
/// a loop mount, and a child cgroup to try a memory limit.
pub fn probe(scratch_dir: &Path) -> Capabilities {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let root = if euid == 0 {
        Capability::yes("euid 0")
    } else {
        Capability::no(format!("euid {euid}"))
    };
    let mkfs = find_tool("mkfs.ext4");
    let mkfs_ext4 = match &mkfs {
        Some(p) => {
            let version = Command::new(p)
                .arg("-V")
                .output()
                .map(|o| {
                    String::from_utf8_lossy(&o.stderr)
                        .lines()
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_string()
                })
                .unwrap_or_default();
            Capability::yes(format!("{} ({version})", p.display()))
        }
        None => Capability::no("mkfs.ext4 not found (Debian package e2fsprogs)"),
    };
    let (mut loop_mount, mut loop_direct_io) = (Capability::no("not tried"), Capability::no("not tried"));
    if euid != 0 {
        loop_mount = Capability::no("needs root");
    } else if !Path::new("/dev/loop-control").exists() {
        loop_mount = Capability::no("/dev/loop-control is missing (no loop driver)");
    } else if let Some(mkfs) = &mkfs {
        let tag = format!("e9-probe-{}", std::process::id());
        let attempt = fs::create_dir_all(scratch_dir)
            .map_err(anyhow::Error::from)
            .and_then(|_| {
                Mounted::make(
                    mkfs,
                    &scratch_dir.join(format!("{tag}.img")),
                    &scratch_dir.join(format!("{tag}-mnt")),
                    16 << 20,
                )
            });
        match attempt {
            Ok(m) => {
                loop_mount = Capability::yes(format!("{} mounted at {}", m.loop_dev, m.dir.display()));
                loop_direct_io = match m.sys_block("loop/dio").as_deref() {
                    Some("1") => Capability::yes(
                        "losetup --direct-io=on: the image is read with O_DIRECT, the host caches nothing",
                    ),
                    Some(v) => Capability::no(format!(
                        "loop/dio is {v}: reads of the image go through the host's page cache"
                    )),
                    None => Capability::no("loop/dio unreadable"),
                };
            }
            Err(e) => loop_mount = Capability::no(format!("{e:#}")),
        }
    }
    let (memory_cgroup, cgroup) = if euid == 0 {
        find_cgroup_site()
    } else {
        (Capability::no("needs root"), None)
    };
    let drop_caches = match fs::OpenOptions::new().write(true).open("/proc/sys/vm/drop_caches") {
        Ok(_) => Capability::yes("writable (E9 still drops only its own files, with POSIX_FADV_DONTNEED)"),
        Err(e) => Capability::no(format!(
            "{e}: E9 drops its files' pages with POSIX_FADV_DONTNEED instead"
        )),
    };
    Capabilities {
        root,
        mkfs_ext4,
        loop_mount,
        loop_direct_io,
        memory_cgroup,
        drop_caches,
        cgroup,
    }
}

// ---- runs -----------------------------------------------------------------------------------

/// How the query asks Linux to read ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// `POSIX_FADV_NORMAL`: Linux's own read-ahead heuristics.
    Default,
    /// `POSIX_FADV_RANDOM`: no read-ahead.
    Random,
    /// `POSIX_FADV_RANDOM` and `POSIX_FADV_WILLNEED` on the next N records.
    WillNeed(u64),
}

impl Mode {
    pub fn label(self) -> String {
        match self {
            Mode::Default => "default read-ahead".into(),
            Mode::Random => "FADV_RANDOM (no read-ahead)".into(),
            Mode::WillNeed(n) => format!("FADV_WILLNEED, next {n} records"),
        }
    }
}

/// One run of query 6 on Linux.
#[derive(Clone, Debug, Serialize)]
pub struct E9Run {
    pub mode: Mode,
    pub records: u64,
    /// Records whose page (or one of two) was neither cached nor being read when the query came
    /// to it.
    pub miss_records: u64,
    pub miss_pages: u64,
    /// Query time (median of the repetitions), ns.
    pub time_ns: u64,
    pub time_min_ns: u64,
    pub time_max_ns: u64,
    pub repeats: usize,
    /// Read requests and 4 KB pages the loop device served.
    pub device_reads: u64,
    pub device_pages: u64,
    /// The child cgroup: its limit, its peak usage, how often the limit was hit.
    pub limit_bytes: u64,
    pub peak_bytes: Option<u64>,
    pub limit_hits: Option<u64>,
    /// Pages of the relation cached when the run started (should be 0).
    pub resident_at_start: u64,
}

/// What was run.
#[derive(Clone, Debug, Serialize)]
pub struct E9Config {
    pub quick: bool,
    pub tuples: usize,
    pub selected: usize,
    pub lo: u32,
    pub cache_bytes: u64,
    pub seed: u64,
    pub repeats: usize,
    pub loop_device: String,
    pub loop_scheduler: String,
    pub loop_read_ahead_kb: String,
    pub kernel: String,
}

/// The report of E9.
#[derive(Clone, Debug, Serialize)]
pub struct E9Report {
    pub capabilities: Capabilities,
    /// Why nothing was measured, if nothing was.
    pub skipped: Option<String>,
    pub config: Option<E9Config>,
    pub runs: Vec<E9Run>,
    pub notes: Vec<String>,
    /// VINO's runs of the same query in the same run ([`E9Options::vino`]), on the plain device.
    pub vino: Option<E4Report>,
}

/// Runs E9 (or only probes, or reports why it cannot run).
pub fn run(opts: &E9Options, progress: &mut dyn FnMut(&str)) -> Result<E9Report> {
    fs::create_dir_all(&opts.scratch_dir).with_context(|| format!("creating {}", opts.scratch_dir.display()))?;
    progress("E9: probing the machine (root, mkfs.ext4, loop mount, memory cgroup)");
    let capabilities = probe(&opts.scratch_dir);
    let mut report = E9Report {
        skipped: capabilities.blocker(),
        capabilities,
        config: None,
        runs: Vec::new(),
        notes: Vec::new(),
        vino: None,
    };
    if opts.probe_only && report.skipped.is_none() {
        report.skipped = Some("probe only".into());
    }
    if let Some(why) = &report.skipped {
        progress(&format!("E9 skipped: {why}"));
        return Ok(report);
    }
    let site = report
        .capabilities
        .cgroup
        .clone()
        .expect("a cgroup site when not blocked");
    let mkfs = find_tool("mkfs.ext4").expect("found by the probe");

    let tuples = opts.tuples.unwrap_or(if opts.quick { 20_000 } else { FULL_TUPLES });
    let cache_bytes = opts
        .cache_bytes
        .unwrap_or_else(|| ((FULL_FRAMES as f64 * tuples as f64 / FULL_TUPLES as f64).round() as u64).max(16) * PAGE);
    let repeats = opts.repeats.unwrap_or(3).max(1);
    let relation = Relation::generate(tuples, opts.seed);
    let selection = relation.query6(opts.lo);
    let lo = relation.unique1[selection[0] as usize];

    let tag = format!("e9-ext4-{}", std::process::id());
    let bytes = ((relation.bytes() as f64 * 1.5) as u64 + (32 << 20)).div_ceil(4 << 20) * (4 << 20);
    progress(&format!(
        "E9: mkfs.ext4 on a {} MB image, loop mount, writing the relation ({tuples} tuples)",
        bytes >> 20
    ));
    let m = Mounted::make(
        &mkfs,
        &opts.scratch_dir.join(format!("{tag}.img")),
        &opts.scratch_dir.join(format!("{tag}-mnt")),
        bytes,
    )?;
    let rel_path = m.dir.join("relation");
    let idx_path = m.dir.join("unique1.idx");
    for (path, data) in [
        (&rel_path, relation.file()),
        (
            &idx_path,
            relation.index().iter().flat_map(|p| p.to_le_bytes()).collect(),
        ),
    ] {
        let mut f = fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        f.write_all(&data)?;
        f.sync_all()?;
    }
    let config = E9Config {
        quick: opts.quick,
        tuples,
        selected: selection.len(),
        lo,
        cache_bytes,
        seed: opts.seed,
        repeats,
        loop_device: m.loop_dev.clone(),
        loop_scheduler: m.sys_block("queue/scheduler").unwrap_or_default(),
        loop_read_ahead_kb: m.sys_block("queue/read_ahead_kb").unwrap_or_default(),
        kernel: fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
    };
    // As in E4: a window over about half the cache makes the cache evict hinted pages before
    // their records come, so the defaults stop at 40% of it (nothing is cut at 4 MB).
    let windows = opts.willneed.clone().unwrap_or_else(|| {
        let pages = cache_bytes / PAGE;
        [10, 20, 40, 60, 80, 100, 120]
            .into_iter()
            .filter(|&n| n as f64 <= 0.4 * pages as f64)
            .collect()
    });
    let e4 = opts.vino.then(|| E4Options {
        quick: opts.quick,
        scratch_dir: opts.scratch_dir.clone(),
        devices: Devices::Plain,
        tuples: Some(tuples),
        cache_frames: Some((cache_bytes / PAGE) as usize),
        lookaheads: Some(Vec::new()),
        readaheads: Some(windows.clone()),
        plain_repeats: Some(1),
        fifo_comparison: false,
        both: windows.iter().max().map(|&ra| vec![(ra, scaled_lookaheads(tuples)[5])]),
        seed: opts.seed,
        lo: opts.lo,
        ..E4Options::default()
    });
    let mut modes = vec![Mode::Default, Mode::Random];
    modes.extend(windows.iter().filter(|&&n| n > 0).map(|&n| Mode::WillNeed(n)));
    let q = LinuxQuery {
        rel: &rel_path,
        idx: &idx_path,
        lo,
        count: selection.len(),
        relation_bytes: relation.bytes(),
    };
    // The two sides take turns, one repetition of every run each: a slow spell of a shared
    // machine then falls on both rather than on whichever side ran through it.
    let mut vino_reps = Vec::new();
    let mut linux_reps: Vec<Vec<E9Run>> = vec![Vec::new(); modes.len()];
    for r in 0..repeats {
        if let Some(e4) = &e4 {
            progress(&format!(
                "E9 repetition {} of {repeats}: VINO's runs (E4 on the plain device)",
                r + 1
            ));
            vino_reps.push(crate::e4_wisconsin::run(e4, progress).context("VINO's side (E4)")?);
        }
        for (i, &mode) in modes.iter().enumerate() {
            let name = format!("vino-e9-{}-{i}-{r}", std::process::id());
            let run =
                run_child(&q, mode, &site, &name, cache_bytes, &m).with_context(|| format!("E9 {}", mode.label()))?;
            progress(&format!(
                "E9 repetition {} of {repeats} [{}/{}] {}: {} missed records, {}",
                r + 1,
                i + 1,
                modes.len(),
                mode.label(),
                run.miss_records,
                fmt_ns(run.time_ns as f64)
            ));
            linux_reps[i].push(run);
        }
    }
    report.vino = E4Report::merge(vino_reps);
    for mut runs in linux_reps {
        let mut times: Vec<u64> = runs.iter().map(|r| r.time_ns).collect();
        times.sort_unstable();
        // The repetition of median time stands for the run, with the range of all.
        let median = times[times.len() / 2];
        let at = runs
            .iter()
            .position(|r| r.time_ns == median)
            .expect("the median is one of them");
        let mut run = runs.swap_remove(at);
        run.time_min_ns = times[0];
        run.time_max_ns = times[times.len() - 1];
        run.repeats = repeats;
        report.runs.push(run);
    }
    report.notes = vec![
        format!("ext4 (4 KB blocks) on {} over an image under {} with direct I/O: the host's page cache holds none of the image", config.loop_device, opts.scratch_dir.display()),
        format!("page cache limited by a child memory cgroup ({}) to {} KB plus what the query process itself uses before it starts; the files' pages are dropped with POSIX_FADV_DONTNEED before each run", report.capabilities.memory_cgroup.detail, cache_bytes / 1024),
        "misses: records whose page was neither cached nor being read when the query reached them (mincore), the analogue of E4's misses; device pages: what the loop device read".into(),
        format!("loop device: I/O scheduler {}, read_ahead_kb {}; Linux {}", config.loop_scheduler, config.loop_read_ahead_kb, config.kernel),
    ];
    report.config = Some(config);
    drop(m);
    Ok(report)
}

struct LinuxQuery<'a> {
    rel: &'a Path,
    idx: &'a Path,
    lo: u32,
    count: usize,
    relation_bytes: u64,
}

/// What the child writes back.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ChildOut {
    elapsed_ns: u64,
    records: u64,
    wrong: u64,
    miss_records: u64,
    miss_pages: u64,
    /// errno of the first failed call, 0 if none.
    errno: u64,
}

/// What the child needs, all allocated before `fork`.
struct ChildArgs {
    rel_fd: libc::c_int,
    idx_fd: libc::c_int,
    map: *mut libc::c_void,
    index: Vec<u8>,
    index_offset: u64,
    lo: u32,
    window: u64,
    advice: libc::c_int,
    go: libc::c_int,
    ready: libc::c_int,
    out: libc::c_int,
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn errno() -> u64 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as u64
}

/// The child's side: system calls only, on memory allocated before the fork; never returns.
fn child_main(a: &mut ChildArgs) -> ! {
    let mut byte = [0u8; 1];
    let mut out = ChildOut::default();
    // SAFETY: plain system calls on descriptors and buffers the parent prepared; every pointer
    // passed stays within the buffer it points into.
    unsafe {
        // Wait to be moved into the cgroup, then touch what the query will write, then wait for
        // the limit.
        libc::read(a.go, byte.as_mut_ptr().cast(), 1);
        for b in a.index.iter_mut() {
            std::ptr::write_volatile(b, 0);
        }
        libc::write(a.ready, byte.as_ptr().cast(), 1);
        libc::read(a.go, byte.as_mut_ptr().cast(), 1);

        let rs = TUPLE_BYTES as u64;
        let t0 = now_ns();
        libc::posix_fadvise(a.rel_fd, 0, 0, a.advice);
        let mut got = 0usize;
        while got < a.index.len() {
            let n = libc::pread(
                a.idx_fd,
                a.index.as_mut_ptr().add(got).cast(),
                a.index.len() - got,
                (a.index_offset + got as u64) as libc::off_t,
            );
            if n <= 0 {
                out.errno = if n < 0 { errno() } else { libc::EIO as u64 };
                break;
            }
            got += n as usize;
        }
        let count = got / 4;
        let pos = |i: usize| -> u64 {
            let p = a.index.as_ptr().add(i * 4);
            offset_of(u64::from(u32::from_le_bytes([*p, *p.add(1), *p.add(2), *p.add(3)])))
        };
        if a.window > 0 {
            for j in 0..count.min(a.window as usize) {
                libc::posix_fadvise(
                    a.rel_fd,
                    pos(j) as libc::off_t,
                    rs as libc::off_t,
                    libc::POSIX_FADV_WILLNEED,
                );
            }
        }
        let mut tuple = [0u8; TUPLE_BYTES];
        let mut vec = [0u8; 2];
        for i in 0..count {
            let off = pos(i);
            let (first, last) = (off / PAGE, (off + rs - 1) / PAGE);
            let pages = (last - first + 1) as usize;
            if libc::mincore(
                a.map.cast::<u8>().add((first * PAGE) as usize).cast(),
                pages * PAGE as usize,
                vec.as_mut_ptr(),
            ) == 0
            {
                let missing = vec[..pages].iter().filter(|&&v| v & 1 == 0).count() as u64;
                if missing > 0 {
                    out.miss_records += 1;
                    out.miss_pages += missing;
                }
            } else if out.errno == 0 {
                out.errno = errno();
            }
            let n = libc::pread(a.rel_fd, tuple.as_mut_ptr().cast(), TUPLE_BYTES, off as libc::off_t);
            let key = u32::from_le_bytes([tuple[0], tuple[1], tuple[2], tuple[3]]);
            if n != TUPLE_BYTES as isize || key != a.lo + i as u32 {
                out.wrong += 1;
            }
            out.records += 1;
            if a.window > 0 && i + (a.window as usize) < count {
                libc::posix_fadvise(
                    a.rel_fd,
                    pos(i + a.window as usize) as libc::off_t,
                    rs as libc::off_t,
                    libc::POSIX_FADV_WILLNEED,
                );
            }
        }
        out.elapsed_ns = now_ns() - t0;
        libc::write(a.out, (&out as *const ChildOut).cast(), std::mem::size_of::<ChildOut>());
        libc::_exit(0)
    }
}

fn pipe() -> Result<(libc::c_int, libc::c_int)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

fn close(fd: libc::c_int) {
    // SAFETY: closing a descriptor this function's caller owns.
    unsafe { libc::close(fd) };
}

/// Pages of the first `bytes` of the file mapped at `map` that are in the page cache.
fn resident(map: *mut libc::c_void, bytes: u64) -> u64 {
    let pages = bytes.div_ceil(PAGE) as usize;
    let mut vec = vec![0u8; pages];
    // SAFETY: the mapping covers `bytes`; vec has a byte per page.
    if unsafe { libc::mincore(map, bytes as usize, vec.as_mut_ptr()) } != 0 {
        return u64::MAX;
    }
    vec.iter().filter(|&&v| v & 1 != 0).count() as u64
}

fn drop_pages(file: &fs::File) {
    // SAFETY: advice on a descriptor we own.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

fn run_child(
    q: &LinuxQuery,
    mode: Mode,
    site: &CgroupSite,
    name: &str,
    cache_bytes: u64,
    m: &Mounted,
) -> Result<E9Run> {
    let rel = fs::File::open(q.rel).with_context(|| format!("opening {}", q.rel.display()))?;
    let idx = fs::File::open(q.idx).with_context(|| format!("opening {}", q.idx.display()))?;
    rel.sync_all()?;
    drop_pages(&rel);
    drop_pages(&idx);
    // SAFETY: a read-only shared mapping of the whole relation, never touched: mincore only.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            q.relation_bytes as usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            rel.as_raw_fd(),
            0,
        )
    };
    ensure!(
        map != libc::MAP_FAILED,
        "mmap of the relation: {}",
        std::io::Error::last_os_error()
    );
    struct Unmap(*mut libc::c_void, usize);
    impl Drop for Unmap {
        fn drop(&mut self) {
            // SAFETY: the mapping made above.
            unsafe { libc::munmap(self.0, self.1) };
        }
    }
    let _unmap = Unmap(map, q.relation_bytes as usize);
    let resident_at_start = resident(map, q.relation_bytes);

    let cg = site.create(name)?;
    let (go_r, go_w) = pipe()?;
    let (ready_r, ready_w) = pipe()?;
    let (out_r, out_w) = pipe()?;
    let (window, advice) = match mode {
        Mode::Default => (0, libc::POSIX_FADV_NORMAL),
        Mode::Random => (0, libc::POSIX_FADV_RANDOM),
        Mode::WillNeed(n) => (n, libc::POSIX_FADV_RANDOM),
    };
    let mut args = ChildArgs {
        rel_fd: rel.as_raw_fd(),
        idx_fd: idx.as_raw_fd(),
        map,
        index: vec![0u8; q.count * 4],
        index_offset: u64::from(q.lo) * 4,
        lo: q.lo,
        window,
        advice,
        go: go_r,
        ready: ready_w,
        out: out_w,
    };
    let (reads0, sectors0) = m.reads();
    // SAFETY: the child runs only child_main, which makes system calls on memory prepared above.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid == 0 {
        child_main(&mut args);
    }
    for fd in [go_r, ready_w, out_w] {
        close(fd);
    }
    let result = (|| -> Result<(ChildOut, u64, u64)> {
        let signal = |fd: libc::c_int| -> Result<()> {
            // SAFETY: one byte from a live buffer to a pipe we own.
            let n = unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
            ensure!(n == 1, "signalling the child");
            Ok(())
        };
        let wait_byte = |fd: libc::c_int| -> Result<()> {
            let mut b = [0u8; 1];
            // SAFETY: one byte into a live buffer from a pipe we own.
            let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
            ensure!(n == 1, "the child did not answer");
            Ok(())
        };
        cg.add(pid)?;
        signal(go_w)?;
        wait_byte(ready_r)?;
        let base = cg.usage().unwrap_or(0);
        let limit = (cache_bytes + base).div_ceil(PAGE) * PAGE;
        cg.set_limit(limit)?;
        signal(go_w)?;
        let mut out = ChildOut::default();
        // SAFETY: reading the child's plain-old-data answer into a value of the same layout.
        let n = unsafe {
            libc::read(
                out_r,
                (&mut out as *mut ChildOut).cast(),
                std::mem::size_of::<ChildOut>(),
            )
        };
        ensure!(
            n == std::mem::size_of::<ChildOut>() as isize,
            "the query process ended without an answer (killed by the memory limit?)"
        );
        Ok((out, limit, base))
    })();
    if result.is_err() {
        // SAFETY: killing the child we forked, by its id.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let mut status = 0;
    // SAFETY: reaping the child we forked.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    for fd in [go_w, ready_r, out_r] {
        close(fd);
    }
    let (out, limit, _base) = result?;
    let (reads1, sectors1) = m.reads();
    ensure!(
        out.errno == 0,
        "a system call in the query failed: {}",
        std::io::Error::from_raw_os_error(out.errno as i32)
    );
    ensure!(
        out.wrong == 0 && out.records == q.count as u64,
        "{} of {} records read back wrong",
        out.wrong,
        out.records
    );
    let run = E9Run {
        mode,
        records: out.records,
        miss_records: out.miss_records,
        miss_pages: out.miss_pages,
        time_ns: out.elapsed_ns,
        time_min_ns: out.elapsed_ns,
        time_max_ns: out.elapsed_ns,
        repeats: 1,
        device_reads: reads1 - reads0,
        device_pages: (sectors1 - sectors0) / 8,
        limit_bytes: limit,
        peak_bytes: cg.peak(),
        limit_hits: cg.limit_hits(),
        resident_at_start,
    };
    drop_pages(&rel);
    drop_pages(&idx);
    drop(cg);
    Ok(run)
}

// ---- tables ---------------------------------------------------------------------------------

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:.1}%", x * 100.0)
    } else {
        "-".into()
    }
}

impl E9Report {
    pub fn tables(&self) -> Vec<Table> {
        let mut out = vec![self.capabilities.table()];
        if self.runs.is_empty() {
            return out;
        }
        let c = self.config.as_ref().expect("runs have a config");
        let mut t = Table::new(
            "E9: Wisconsin query 6 on Linux (ext4, page cache, posix_fadvise)",
            &[
                "run",
                "missed records",
                "device reads",
                "device pages",
                "time",
                "% FADV_RANDOM",
                "cgroup peak",
                "limit hits",
            ],
        );
        let base = self
            .runs
            .iter()
            .find(|r| r.mode == Mode::Random)
            .map_or(f64::NAN, |r| r.time_ns as f64);
        for r in &self.runs {
            t.row([
                r.mode.label(),
                fmt_count(r.miss_records as f64),
                fmt_count(r.device_reads as f64),
                fmt_count(r.device_pages as f64),
                format!(
                    "{} ({}-{})",
                    fmt_ns(r.time_ns as f64),
                    fmt_ns(r.time_min_ns as f64),
                    fmt_ns(r.time_max_ns as f64)
                ),
                pct(r.time_ns as f64 / base),
                r.peak_bytes.map_or("-".into(), |b| format!("{} KB", b / 1024)),
                r.limit_hits.map_or("-".into(), |h| fmt_count(h as f64)),
            ]);
        }
        t.note(format!(
            "{} tuples, {} records selected (unique1 {}..), page cache limited to {} KB; median of {} runs (min-max)",
            c.tuples,
            c.selected,
            c.lo,
            c.cache_bytes / 1024,
            c.repeats
        ));
        for n in &self.notes {
            t.note(n.clone());
        }
        if self.runs.iter().any(|r| r.resident_at_start > 0) {
            t.note("some runs started with pages of the relation cached (see resident_at_start in the JSON)");
        }
        out.push(t);
        if let Some(vino) = &self.vino {
            out.push(compare(vino, self));
        }
        out
    }

    /// Time (% of FADV_RANDOM) against the WILLNEED window.
    pub fn plot(&self, path: &Path) -> Result<()> {
        let base = self
            .runs
            .iter()
            .find(|r| r.mode == Mode::Random)
            .ok_or_else(|| anyhow!("E9 plot: no runs"))?;
        let pts = |f: &dyn Fn(&E9Run) -> f64| -> Vec<(f64, f64)> {
            self.runs
                .iter()
                .filter_map(|r| match r.mode {
                    Mode::WillNeed(n) => Some((n as f64, 100.0 * f(r))),
                    Mode::Random => Some((0.0, 100.0)),
                    Mode::Default => None,
                })
                .collect()
        };
        let series = vec![
            ("time".to_string(), pts(&|r| r.time_ns as f64 / base.time_ns as f64)),
            (
                "missed records".to_string(),
                pts(&|r| r.miss_records as f64 / base.miss_records.max(1) as f64),
            ),
        ];
        vino_measure::report::line_chart(
            path,
            "E9: Linux, FADV_WILLNEED window (% of FADV_RANDOM)",
            "WILLNEED window (records)",
            "% of FADV_RANDOM",
            &series,
            false,
        )
    }
}

/// E9 beside E4's read-ahead results on the plain device: the same query, VINO's read-ahead
/// graft against Linux's hints.
pub fn compare(e4: &E4Report, e9: &E9Report) -> Table {
    let mut t = Table::new(
        "E4 vs E9: read-ahead for query 6, VINO grafts and Linux hints on the same kind of device",
        &[
            "system",
            "read-ahead",
            "N",
            "misses",
            "device reads",
            "time",
            "% no read-ahead",
        ],
    );
    if let Some(d) = e4.device(DeviceKind::Plain)
        && let Some(lru) = d.lru()
    {
        t.row([
            "VINO".to_string(),
            "none (LRU)".into(),
            "-".into(),
            fmt_count(lru.cache.misses as f64),
            fmt_count(lru.device_reads as f64),
            fmt_ns(lru.time_ns as f64),
            "100.0%".into(),
        ]);
        for r in d.series(Policy::ReadAhead, Protection::Protected) {
            t.row([
                "VINO".to_string(),
                "wisc_readahead graft (protected)".into(),
                r.param.unwrap_or(0).to_string(),
                fmt_count(r.cache.misses as f64),
                fmt_count(r.device_reads as f64),
                fmt_ns(r.time_ns as f64),
                pct(r.time_ns as f64 / lru.time_ns as f64),
            ]);
        }
        for r in d.series(Policy::Both, Protection::Protected) {
            t.row([
                "VINO".to_string(),
                format!(
                    "wisc_readahead + lookahead_evict {} records (protected)",
                    r.lookahead.unwrap_or(0)
                ),
                r.param.unwrap_or(0).to_string(),
                fmt_count(r.cache.misses as f64),
                fmt_count(r.device_reads as f64),
                fmt_ns(r.time_ns as f64),
                pct(r.time_ns as f64 / lru.time_ns as f64),
            ]);
        }
    }
    let base = e9.runs.iter().find(|r| r.mode == Mode::Random);
    for r in &e9.runs {
        t.row([
            "Linux".to_string(),
            r.mode.label(),
            match r.mode {
                Mode::WillNeed(n) => n.to_string(),
                _ => "-".into(),
            },
            fmt_count(r.miss_records as f64),
            fmt_count(r.device_reads as f64),
            fmt_ns(r.time_ns as f64),
            base.map_or("-".into(), |b| pct(r.time_ns as f64 / b.time_ns as f64)),
        ]);
    }
    if let Some(why) = &e9.skipped {
        t.note(format!("Linux rows missing: {why}"));
    }
    if let Some(c) = &e9.config
        && (c.tuples != e4.config.tuples || c.cache_bytes != e4.config.cache_frames as u64 * PAGE)
    {
        t.note(format!(
            "sizes differ: E4 {} tuples with {} KB of cache, E9 {} tuples with {} KB",
            e4.config.tuples,
            e4.config.cache_frames * 4,
            c.tuples,
            c.cache_bytes / 1024
        ));
    }
    let vino_best = e4.device(DeviceKind::Plain).and_then(|d| {
        d.series(Policy::ReadAhead, Protection::Protected)
            .into_iter()
            .chain(d.series(Policy::Both, Protection::Protected))
            .filter(|r| r.param.unwrap_or(0) > 0)
            .map(|r| r.time_ns)
            .min()
    });
    let linux_best = e9
        .runs
        .iter()
        .filter(|r| matches!(r.mode, Mode::WillNeed(_)))
        .map(|r| r.time_ns)
        .min();
    if let (Some(v), Some(l)) = (vino_best, linux_best) {
        t.note(format!(
            "fastest VINO run with grafts {} against Linux's fastest FADV_WILLNEED run {}: {:.2}x (goal: at most 0.8x)",
            fmt_ns(v as f64),
            fmt_ns(l as f64),
            v as f64 / l as f64
        ));
    }
    t.note("VINO N: blocks of read-ahead kept outstanding by the graft; Linux N: records hinted ahead with FADV_WILLNEED (one block each); VINO misses are page misses, Linux misses are records not cached when read; Linux's no-read-ahead reference is FADV_RANDOM");
    t
}
