//! `vino bench programs`: unmodified programs on the VINO mount against the same programs on
//! ext4, in one run.
//!
//! The VINO side is `vino mount` of a fresh image with a page cache of `--cache` bytes; the ext4
//! side is ext4 on a loop device over an image file of the same size on the same disk
//! (`losetup --direct-io=on`, so the host caches nothing), its programs run in a memory cgroup
//! limited to the same bytes plus [`PROGRAM_HEADROOM`] for the programs themselves. Both sides
//! run the same steps in the same order; every step that writes ends with the file system made
//! durable (the daemon's `sync` for VINO, `sync -f` for ext4), inside the step's time. "Cold"
//! steps run on a file system mounted again just before (VINO: the daemon restarted; ext4:
//! unmounted and mounted), "warm" ones right after the cold one.
//!
//! The tree is made by the program (seeded, so every run and machine gets the same): source-like
//! text files in nested directories, packed with `tar` once on the scratch disk.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde::Serialize;
use vino_measure::report::{Table, bar_chart};

use crate::e9_linux::{self, Cgroup, Mounted};

/// Memory the ext4 side's cgroup allows beyond the cache, for the programs' own memory.
pub const PROGRAM_HEADROOM: u64 = 64 << 20;

#[derive(Clone, Debug)]
pub struct ProgramsOptions {
    pub quick: bool,
    /// Where the images, the tree and the mount points go (a real disk, not tmpfs).
    pub scratch: PathBuf,
    /// Page cache of each side, bytes.
    pub cache: u64,
    /// Image size of each side, bytes.
    pub image: u64,
    /// Whole runs of both sides; each step's median is reported.
    pub repeats: usize,
    /// Only these steps (by name), if any.
    pub only: Vec<String>,
    /// The VINO side's FUSE transports (`io_uring`, `dev_fuse`), each a run of its own; the
    /// first is the one reported as VINO's.
    pub transports: Vec<String>,
    /// The VINO side's `cache_warm_ahead` (free frames made ahead of need); `None`: the
    /// daemon's default.
    pub warm_ahead: Option<usize>,
}

impl ProgramsOptions {
    pub fn new(quick: bool) -> ProgramsOptions {
        ProgramsOptions {
            quick,
            scratch: PathBuf::from("target/vino-bench"),
            cache: if quick { 64 << 20 } else { 256 << 20 },
            image: if quick { 1 << 30 } else { 4 << 30 },
            repeats: 1,
            only: Vec::new(),
            transports: default_transports(),
            warm_ahead: None,
        }
    }

    fn tree(&self) -> TreeShape {
        if self.quick {
            TreeShape {
                files: 1_500,
                mean_bytes: 16 << 10,
            }
        } else {
            TreeShape {
                files: 15_000,
                mean_bytes: 22 << 10,
            }
        }
    }

    fn big_mib(&self) -> u64 {
        if self.quick { 64 } else { 512 }
    }

    fn random_reads(&self) -> u64 {
        if self.quick { 2_000 } else { 20_000 }
    }

    fn sqlite_rows(&self) -> u64 {
        if self.quick { 30_000 } else { 300_000 }
    }
}

/// Both transports where Linux has FUSE over io_uring (turning the host's switch on, as the
/// daemon run as root would), else `/dev/fuse` alone.
fn default_transports() -> Vec<String> {
    let mut t = vec!["dev_fuse".to_string()];
    if vino_fuse_uring::switch_on() {
        t.insert(0, "io_uring".into());
    }
    t
}

/// A `--transport` value: the transport, and the mount's idle polling: as configured by
/// default (pollers only in the idle cgroup), off (`_no_idle_poll`), or on wherever the
/// pollers can run (`_idle_poll`, `mount_idle_poll_us` set).
fn variant(t: &str) -> (&str, Option<u128>) {
    if let Some(transport) = t.strip_suffix("_no_idle_poll") {
        (transport, Some(0))
    } else if let Some(transport) = t.strip_suffix("_idle_poll") {
        (transport, Some(vino_fuse::IDLE_POLL.as_micros()))
    } else {
        (t, None)
    }
}

fn transport_name(t: &str) -> String {
    let (transport, idle_poll) = variant(t);
    let name = if transport == "dev_fuse" {
        "/dev/fuse"
    } else {
        transport
    };
    match idle_poll {
        None => name.to_string(),
        Some(0) => format!("{name}, no idle polling"),
        Some(_) => format!("{name}, idle polling anywhere"),
    }
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct TreeShape {
    pub files: usize,
    pub mean_bytes: u64,
}

/// One step's times on both sides (medians over the repeats), seconds.
#[derive(Clone, Debug, Serialize)]
pub struct StepResult {
    pub step: String,
    pub command: String,
    pub vino_s: f64,
    pub ext4_s: f64,
    /// VINO's time over ext4's.
    pub ratio: f64,
    /// VINO's time with each transport run (the first is `vino_s`).
    pub by_transport: Vec<TransportTime>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TransportTime {
    pub transport: String,
    pub seconds: f64,
    /// The requests the step made of the mount and the daemon's time on them (medians over the
    /// repeats, each taken alone).
    pub served: Option<Served>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProgramsReport {
    pub cache_bytes: u64,
    pub image_bytes: u64,
    pub tree: TreeShape,
    pub tree_bytes: u64,
    pub repeats: usize,
    /// How the ext4 side's memory was limited, or why it was not.
    pub ext4_memory: String,
    /// The VINO side's programs' memory cgroup (Linux's cache of the mount is charged there;
    /// the daemon's own cache is `cache_bytes` besides).
    pub vino_memory: String,
    pub steps: Vec<StepResult>,
    pub skipped: Vec<String>,
}

/// A step: a shell command run in the mount (`$M` is the mount point, `$T` the tree's tar file,
/// `$B` this program), whether it runs on a freshly mounted file system, and whether it ends
/// with a sync.
struct Step {
    name: &'static str,
    command: String,
    cold: bool,
    sync: bool,
    needs: Option<&'static str>,
}

fn steps(opts: &ProgramsOptions) -> Vec<Step> {
    let step = |name, command: String, cold, sync| Step {
        name,
        command,
        cold,
        sync,
        needs: None,
    };
    let big = opts.big_mib();
    let reads = opts.random_reads();
    let rows = opts.sqlite_rows();
    vec![
        step("tar x", "tar xf \"$T\" -C \"$M\"".into(), false, true),
        step("cp -a", "cp -a \"$M/tree\" \"$M/copy\"".into(), true, true),
        step("du (cold)", "du -s \"$M\" > /dev/null".into(), true, false),
        step("du (warm)", "du -s \"$M\" > /dev/null".into(), false, false),
        step("find (cold)", "find \"$M\" > /dev/null".into(), true, false),
        step("find (warm)", "find \"$M\" > /dev/null".into(), false, false),
        step(
            "sha256sum (cold)",
            "find \"$M/tree\" -type f -print0 | xargs -0 sha256sum > /dev/null".into(),
            true,
            false,
        ),
        step(
            "sha256sum (warm)",
            "find \"$M/tree\" -type f -print0 | xargs -0 sha256sum > /dev/null".into(),
            false,
            false,
        ),
        step("diff -r (cold)", "diff -r \"$M/tree\" \"$M/copy\"".into(), true, false),
        Step {
            needs: Some("git"),
            ..step(
                "git add/commit",
                // No automatic gc: it would go on in the background into the next step.
                "cd \"$M/copy\" && git init -q && git -c user.name=b -c user.email=b@b -c gc.auto=0 add -A && git -c user.name=b -c user.email=b@b -c gc.auto=0 commit -qm tree".into(),
                false,
                true,
            )
        },
        step("rm -rf", "rm -rf \"$M/tree\" \"$M/copy\"".into(), false, true),
        Step {
            needs: Some("python3"),
            ..step(
                "sqlite inserts",
                format!("\"$B\" sqlite \"$M/db.sqlite\" {rows}"),
                false,
                true,
            )
        },
        step(
            "dd write",
            format!("dd if=/dev/zero of=\"$M/big\" bs=1M count={big} conv=fsync status=none"),
            false,
            true,
        ),
        step(
            "dd read (cold)",
            "dd if=\"$M/big\" of=/dev/null bs=1M status=none".into(),
            true,
            false,
        ),
        step("cat (warm)", "cat \"$M/big\" > /dev/null".into(), false, false),
        step(
            "random 4K reads (cold)",
            format!("\"$B\" randread \"$M/big\" {reads}"),
            true,
            false,
        ),
        step(
            "random 4K reads (warm)",
            format!("\"$B\" randread \"$M/big\" {reads}"),
            false,
            false,
        ),
        // The same reads through a descriptor the shell opened; on the VINO mount `$G` grafts
        // it with randread_ra.c (which knows the tool's sequence) before running the tool, on
        // ext4 it only runs the tool.
        step(
            "random 4K reads, read-ahead graft (cold)",
            format!("exec 3< \"$M/big\"; \"$G\" \"$B\" randread-fd 3 {reads}"),
            true,
            false,
        ),
    ]
}

/// One side: where it is mounted, how to mount it again cold, how to make it durable, and how
/// to run a command in it.
trait Side {
    fn mount_point(&self) -> &Path;
    /// A script that runs its arguments with descriptor 3 grafted (VINO) or as they are (ext4).
    fn graft_wrapper(&self) -> &Path;
    fn remount(&mut self) -> Result<()>;
    fn sync(&mut self) -> Result<()>;
    /// The requests the mount has served so far and the daemon's time on them (VINO only).
    fn served(&mut self) -> Result<Option<Served>> {
        Ok(None)
    }
    fn command(&self, script: &str) -> Command;
}

struct VinoSide {
    wrapper: PathBuf,
    vino: PathBuf,
    image: PathBuf,
    config: PathBuf,
    socket: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
    /// The programs' memory cgroup: Linux's cache of the mount is charged to the programs
    /// reading it, as ext4's is.
    cgroup: Option<Cgroup>,
}

impl VinoSide {
    fn start(&mut self) -> Result<()> {
        let child = Command::new(&self.vino)
            .arg("mount")
            .arg("--config")
            .arg(&self.config)
            .arg(&self.image)
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {} mount", self.vino.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !is_mount_point(&self.dir) {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!("vino mount exited before mounting ({status})");
            }
            ensure!(Instant::now() < deadline, "vino mount did not mount in 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // SAFETY: kill with a pid we spawned and have not reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        let status = child.wait()?;
        ensure!(status.success(), "vino mount ended with {status}");
        ensure!(
            !is_mount_point(&self.dir),
            "vino mount left {} mounted",
            self.dir.display()
        );
        Ok(())
    }
}

impl Drop for VinoSide {
    fn drop(&mut self) {
        if self.stop().is_err() {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

impl Side for VinoSide {
    fn mount_point(&self) -> &Path {
        &self.dir
    }
    fn graft_wrapper(&self) -> &Path {
        &self.wrapper
    }
    fn remount(&mut self) -> Result<()> {
        self.stop()?;
        self.start()
    }
    fn sync(&mut self) -> Result<()> {
        let mut client = vino_client::Client::connect(&self.socket).context("connecting to the daemon")?;
        client.sync().context("the daemon's sync")?;
        Ok(())
    }
    fn served(&mut self) -> Result<Option<Served>> {
        let mut client = vino_client::Client::connect(&self.socket).context("connecting to the daemon")?;
        let top = client.top().context("the daemon's top")?;
        // Forgets have no caller waiting for them: their work (freeing what `rm -rf` unlinked)
        // runs beside the program, not in its round trips.
        let all = top
            .mounts
            .iter()
            .flat_map(|m| &m.requests)
            .filter(|r| !matches!(r.op.as_str(), "forget" | "batch_forget"));
        Ok(Some(all.fold(Served::default(), |s, r| Served {
            requests: s.requests + r.count,
            seconds: s.seconds + r.ns as f64 / 1e9,
        })))
    }
    fn command(&self, script: &str) -> Command {
        shell_in(self.cgroup.as_ref(), script)
    }
}

/// `sh -c script`, moved into `cgroup` first if there is one.
fn shell_in(cgroup: Option<&Cgroup>, script: &str) -> Command {
    let mut c = Command::new("sh");
    match cgroup {
        // The shell moves itself into the cgroup, then runs the step.
        Some(cg) => c.arg("-c").arg(format!(
            "echo $$ > \"{}\" && {script}",
            cg.dir.join("cgroup.procs").display()
        )),
        None => c.arg("-c").arg(script),
    };
    c
}

/// A memory cgroup for one side's programs, limited to the cache size plus
/// [`PROGRAM_HEADROOM`], and what the report says of it.
fn programs_cgroup(caps: &e9_linux::Capabilities, name: &str, cache: u64) -> Result<(Option<Cgroup>, String)> {
    Ok(match &caps.cgroup {
        Some(site) => {
            let cg = site.create(&format!("vino-programs-{}-{name}", std::process::id()))?;
            cg.set_limit(cache + PROGRAM_HEADROOM)?;
            let said = format!(
                "memory cgroup limit {} MiB (cache {} MiB + {} MiB for the programs)",
                (cache + PROGRAM_HEADROOM) >> 20,
                cache >> 20,
                PROGRAM_HEADROOM >> 20
            );
            (Some(cg), said)
        }
        None => (None, format!("not limited: {}", caps.memory_cgroup.detail)),
    })
}

struct Ext4Side {
    wrapper: PathBuf,
    mounted: Mounted,
    cgroup: Option<Cgroup>,
}

impl Side for Ext4Side {
    fn mount_point(&self) -> &Path {
        &self.mounted.dir
    }
    fn graft_wrapper(&self) -> &Path {
        &self.wrapper
    }
    fn remount(&mut self) -> Result<()> {
        self.mounted.remount()
    }
    fn sync(&mut self) -> Result<()> {
        let status = Command::new("sync").arg("-f").arg(&self.mounted.dir).status()?;
        ensure!(status.success(), "sync -f failed");
        Ok(())
    }
    fn command(&self, script: &str) -> Command {
        shell_in(self.cgroup.as_ref(), script)
    }
}

fn is_mount_point(dir: &Path) -> bool {
    let Ok(canon) = dir.canonicalize() else { return false };
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    info.lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .any(|p| Path::new(p) == canon)
}

/// Requests a mount served and the daemon's time on them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Served {
    pub requests: u64,
    pub seconds: f64,
}

/// One run of a step on one side: its time in seconds (the sync included), and on VINO's side
/// the requests it made of the mount.
struct StepRun {
    seconds: f64,
    served: Option<Served>,
}

/// Runs one step on one side.
fn run_step(side: &mut dyn Side, step: &Step, tar: &Path, me: &Path) -> Result<StepRun> {
    if step.cold {
        side.remount()
            .with_context(|| format!("mounting again before {}", step.name))?;
    }
    let before = side.served()?;
    let mut cmd = side.command(&step.command);
    cmd.env("M", side.mount_point())
        .env("T", tar)
        .env("B", me)
        .env("G", side.graft_wrapper())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let start = Instant::now();
    let status = cmd.status().with_context(|| format!("running {}", step.name))?;
    ensure!(status.success(), "{} failed ({status}): {}", step.name, step.command);
    if step.sync {
        side.sync()?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let served = match (before, side.served()?) {
        (Some(b), Some(a)) => Some(Served {
            requests: a.requests.saturating_sub(b.requests),
            seconds: (a.seconds - b.seconds).max(0.0),
        }),
        _ => None,
    };
    Ok(StepRun { seconds, served })
}

/// A seeded generator (SplitMix64) for the tree.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Makes the tree under `root/tree` and packs it into `tar`; returns its bytes.
fn make_tree(shape: TreeShape, root: &Path, tar: &Path) -> Result<u64> {
    const WORDS: &[&str] = &[
        "fn", "let", "mut", "struct", "impl", "return", "match", "self", "page", "block", "cache", "graft", "kernel",
        "lock", "read", "write", "the", "of", "if", "else", "for", "in", "0", "1", "{", "}", "(", ")", ";", "->",
    ];
    let tree = root.join("tree");
    let mut rng = Rng(1998);
    let mut dirs = vec![tree.clone()];
    fs::create_dir_all(&tree)?;
    let mut bytes = 0u64;
    for i in 0..shape.files {
        // A new directory every 8 files on average, under a random existing one.
        if rng.below(8) == 0 {
            let parent = dirs[rng.below(dirs.len() as u64) as usize].clone();
            let d = parent.join(format!("d{i}"));
            fs::create_dir(&d)?;
            dirs.push(d);
        }
        let dir = &dirs[rng.below(dirs.len() as u64) as usize];
        // Sizes spread from a few hundred bytes to ~8x the mean, most below it.
        let size = (shape.mean_bytes / 4 + rng.below(shape.mean_bytes / 2 + 1)) << (rng.below(4) as u32) >> 1;
        let mut text = Vec::with_capacity(size as usize + 16);
        while (text.len() as u64) < size {
            text.extend_from_slice(WORDS[rng.below(WORDS.len() as u64) as usize].as_bytes());
            text.push(if rng.below(12) == 0 { b'\n' } else { b' ' });
        }
        bytes += text.len() as u64;
        fs::File::create(dir.join(format!("f{i}.rs")))?.write_all(&text)?;
    }
    let status = Command::new("tar")
        .arg("cf")
        .arg(tar)
        .arg("-C")
        .arg(root)
        .arg("tree")
        .status()?;
    ensure!(status.success(), "packing the tree with tar failed");
    fs::remove_dir_all(&tree)?;
    Ok(bytes)
}

fn has_tool(name: &str) -> bool {
    e9_linux::find_tool(name).is_some()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(opts: &ProgramsOptions, progress: &mut dyn FnMut(&str)) -> Result<ProgramsReport> {
    let caps = e9_linux::probe(&opts.scratch);
    ensure!(
        caps.root.available,
        "needs root (a loop mount and FUSE): {}",
        caps.root.detail
    );
    ensure!(caps.mkfs_ext4.available, "{}", caps.mkfs_ext4.detail);
    ensure!(caps.loop_mount.available, "no loop mount: {}", caps.loop_mount.detail);
    let me = std::env::current_exe()?;
    let vino = me.with_file_name("vino");
    ensure!(
        vino.is_file(),
        "{} is missing: build it with cargo build --release -p vino",
        vino.display()
    );
    let work = crate::front::scratch_dir(&opts.scratch)?;
    let root = work.path().to_path_buf();
    progress("making the tree");
    let tar = root.join("tree.tar");
    let tree_bytes = make_tree(opts.tree(), &root, &tar)?;
    progress("building the read-ahead graft");
    let module = root.join("randread_ra.wasm");
    let wasm =
        vino_sdk::build_example("randread_ra", &vino_sdk::BuildOptions::default()).context("building randread_ra.c")?;
    fs::write(&module, wasm)?;
    let plain_wrapper = wrapper(&root.join("run.sh"), "exec \"$@\"")?;

    let mut skipped = Vec::new();
    let all: Vec<Step> = steps(opts)
        .into_iter()
        .filter(|s| opts.only.is_empty() || opts.only.iter().any(|o| o == s.name))
        .filter(|s| match s.needs {
            Some(tool) if !has_tool(tool) => {
                skipped.push(format!("{}: {tool} is not installed", s.name));
                false
            }
            _ => true,
        })
        .collect();
    ensure!(!opts.transports.is_empty(), "no transport to run the VINO side with");
    // Per step: VINO's times per transport, ext4's times.
    let mut times: Vec<(Vec<Vec<f64>>, Vec<f64>)> =
        vec![(vec![Vec::new(); opts.transports.len()], Vec::new()); all.len()];
    let mut served: Vec<Vec<Vec<Served>>> = vec![vec![Vec::new(); opts.transports.len()]; all.len()];
    let (mut ext4_memory, mut vino_memory) = (String::new(), String::new());
    for round in 0..opts.repeats {
        // The VINO sides take turns going first, round by round: the first of two mounts in a
        // row was measured slower at writing than the second, whichever it was.
        let n = opts.transports.len();
        for ti in (0..n).map(|k| (k + round) % n) {
            let transport = &opts.transports[ti];
            // VINO.
            let image = root.join("vino.img");
            let _ = fs::remove_file(&image);
            let config = root.join("vino.toml");
            let socket = root.join("vino.sock");
            let (mount_transport, idle_poll) = variant(transport);
            fs::write(
                &config,
                format!(
                    "socket = \"{}\"\ncache_size = \"{}\"\nimage_size = \"{}\"\nmount_transport = \"{mount_transport}\"\n{}{}",
                    socket.display(),
                    opts.cache,
                    opts.image,
                    idle_poll.map_or(String::new(), |us| format!("mount_idle_poll_us = {us}\n")),
                    opts.warm_ahead
                        .map_or(String::new(), |n| format!("cache_warm_ahead = {n}\n"))
                ),
            )?;
            let dir = root.join("vino-mnt");
            fs::create_dir_all(&dir)?;
            let graft_wrapper = wrapper(
                &root.join("graft.sh"),
                &format!(
                    "exec \"{}\" graft load \"{}\" --point file.compute_ra --fd 3 --socket \"{}\" -- \"$@\"",
                    vino.display(),
                    module.display(),
                    socket.display()
                ),
            )?;
            let (cgroup, said) = programs_cgroup(&caps, "vino", opts.cache)?;
            vino_memory = said;
            let mut vino_side = VinoSide {
                wrapper: graft_wrapper,
                vino: vino.clone(),
                image: image.clone(),
                config,
                socket,
                dir,
                child: None,
                cgroup,
            };
            vino_side.start()?;
            for (i, s) in all.iter().enumerate() {
                progress(&format!(
                    "round {}/{}: VINO ({}): {}",
                    round + 1,
                    opts.repeats,
                    transport_name(transport),
                    s.name
                ));
                let run = run_step(&mut vino_side, s, &tar, &me)?;
                times[i].0[ti].push(run.seconds);
                served[i][ti].extend(run.served);
            }
            drop(vino_side);
            let _ = fs::remove_file(&image);
        }

        // ext4, the programs in a memory cgroup of the same cache size.
        let mkfs = e9_linux::find_tool("mkfs.ext4").expect("probed");
        let mounted = Mounted::make(&mkfs, &root.join("ext4.img"), &root.join("ext4-mnt"), opts.image)?;
        let (cgroup, said) = programs_cgroup(&caps, "ext4", opts.cache)?;
        ext4_memory = said;
        let mut ext4 = Ext4Side {
            wrapper: plain_wrapper.clone(),
            mounted,
            cgroup,
        };
        for (i, s) in all.iter().enumerate() {
            progress(&format!("round {}/{}: ext4: {}", round + 1, opts.repeats, s.name));
            times[i].1.push(run_step(&mut ext4, s, &tar, &me)?.seconds);
        }
    }
    let steps = all
        .iter()
        .zip(times)
        .zip(served)
        .map(|((s, (v, e)), served)| {
            let by_transport: Vec<TransportTime> = opts
                .transports
                .iter()
                .zip(v)
                .zip(served)
                .map(|((t, v), served)| TransportTime {
                    transport: t.clone(),
                    seconds: median(v),
                    served: (!served.is_empty()).then(|| Served {
                        requests: median(served.iter().map(|s| s.requests as f64).collect()) as u64,
                        seconds: median(served.iter().map(|s| s.seconds).collect()),
                    }),
                })
                .collect();
            let (vino_s, ext4_s) = (by_transport[0].seconds, median(e));
            StepResult {
                step: s.name.to_string(),
                command: s.command.clone(),
                vino_s,
                ext4_s,
                ratio: vino_s / ext4_s.max(1e-6),
                by_transport,
            }
        })
        .collect();
    Ok(ProgramsReport {
        cache_bytes: opts.cache,
        image_bytes: opts.image,
        tree: opts.tree(),
        tree_bytes,
        repeats: opts.repeats,
        ext4_memory,
        vino_memory,
        steps,
        skipped,
    })
}

impl ProgramsReport {
    pub fn tables(&self) -> Vec<Table> {
        let transports: Vec<String> = self
            .steps
            .first()
            .map(|s| s.by_transport.iter().map(|t| transport_name(&t.transport)).collect())
            .unwrap_or_default();
        let mut headers = vec!["step".to_string()];
        headers.extend(transports.iter().map(|t| format!("VINO, {t}")));
        headers.push("ext4".into());
        headers.extend(transports.iter().map(|t| format!("{t} / ext4")));
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        let mut t = Table::new(
            format!(
                "Programs on the VINO mount and on ext4 (tree: {} files, {} MiB; cache {} MiB each)",
                self.tree.files,
                self.tree_bytes >> 20,
                self.cache_bytes >> 20
            ),
            &headers,
        );
        for s in &self.steps {
            let mut row = vec![s.step.clone()];
            row.extend(s.by_transport.iter().map(|t| format!("{:.3} s", t.seconds)));
            row.push(format!("{:.3} s", s.ext4_s));
            row.extend(
                s.by_transport
                    .iter()
                    .map(|t| format!("{:.1}x", t.seconds / s.ext4_s.max(1e-6))),
            );
            t.row(row);
        }
        t.note(format!("ext4 side: {}", self.ext4_memory));
        t.note(format!(
            "VINO side: the daemon's cache {} MiB; its programs (and Linux's cache of the mount) in a {}",
            self.cache_bytes >> 20,
            self.vino_memory
        ));
        t.note("steps that write end with a sync of the file system, inside their time");
        for s in &self.skipped {
            t.note(format!("skipped {s}"));
        }
        vec![t, self.requests_table()]
    }

    /// Where VINO's time went, step by step, over the first transport: the requests the step
    /// made of the mount, and the daemon's time on them (the rest is the round trips and the
    /// program's own work).
    fn requests_table(&self) -> Table {
        let transport = self
            .steps
            .first()
            .and_then(|s| s.by_transport.first())
            .map(|t| transport_name(&t.transport))
            .unwrap_or_default();
        let mut t = Table::new(
            format!("Requests to the mount ({transport})"),
            &["step", "requests", "daemon time", "per request", "share of the step"],
        );
        for s in &self.steps {
            let Some((time, Some(served))) = s.by_transport.first().map(|t| (t.seconds, t.served)) else {
                continue;
            };
            t.row(vec![
                s.step.clone(),
                served.requests.to_string(),
                format!("{:.3} s", served.seconds),
                format!("{:.1} µs", served.seconds * 1e6 / served.requests.max(1) as f64),
                format!("{:.0}%", 100.0 * served.seconds / time.max(1e-9)),
            ]);
        }
        t.note("requests: those a caller waits for (forgets aside, which free unlinked files beside the program)");
        t.note("daemon time: from each request's dispatch until its operation returned (a lock wait's reply may come later); requests served at once on several threads may add up to more than the step's time");
        t.note("medians over the repeats, each column alone");
        t
    }

    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = self
            .steps
            .iter()
            .map(|s| {
                let bars = s
                    .by_transport
                    .iter()
                    .map(|t| {
                        let name = format!("VINO ({}) / ext4", transport_name(&t.transport));
                        (name, t.seconds / s.ext4_s.max(1e-6))
                    })
                    .collect();
                (s.step.clone(), bars)
            })
            .collect();
        bar_chart(
            path,
            "Programs: VINO mount time over ext4's",
            "time ratio (1 = ext4)",
            &groups,
        )
    }
}

/// Writes an executable shell script that runs `line`.
fn wrapper(path: &Path, line: &str) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    fs::write(path, format!("#!/bin/sh\n{line}\n"))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))?;
    Ok(path.to_path_buf())
}

/// `randread FILE N`: N random 4 KiB reads of FILE (a seeded order), one `pread` each.
pub fn random_reads(path: &Path, n: u64) -> Result<()> {
    let f = fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    random_reads_from(&f, n)
}

/// `randread-fd FD N`: the same reads through descriptor FD (inherited, perhaps grafted).
pub fn random_reads_fd(fd: i32, n: u64) -> Result<()> {
    use std::os::fd::FromRawFd;
    ensure!(
        fs::read_link(format!("/proc/self/fd/{fd}")).is_ok(),
        "descriptor {fd} is not open"
    );
    // SAFETY: the descriptor is open (checked above) and this process's to use until it exits.
    let f = unsafe { fs::File::from_raw_fd(fd) };
    random_reads_from(&f, n)
}

fn random_reads_from(f: &fs::File, n: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let pages = f.metadata()?.len() / 4096;
    ensure!(pages > 0, "the file is empty");
    let mut rng = Rng(7);
    let mut buf = vec![0u8; 4096];
    for _ in 0..n {
        f.read_exact_at(&mut buf, rng.below(pages) * 4096)?;
    }
    Ok(())
}

/// `sqlite DB ROWS`: ROWS inserts into a fresh SQLite database through Python's sqlite3 module
/// (the SQLite library itself), committed every 1,000 rows.
pub fn sqlite_inserts(db: &Path, rows: u64) -> Result<()> {
    let script = format!(
        "import sqlite3\n\
         c = sqlite3.connect({db:?})\n\
         c.execute('create table t (id integer primary key, name text, value integer)')\n\
         for i in range({rows}):\n\
         \x20   c.execute('insert into t (name, value) values (?, ?)', ('row%d' % i, i * 7))\n\
         \x20   if i % 1000 == 999: c.commit()\n\
         c.commit()\n\
         assert c.execute('pragma integrity_check').fetchone()[0] == 'ok'\n",
        db = db.display().to_string()
    );
    let status = Command::new("python3").arg("-c").arg(script).status()?;
    ensure!(status.success(), "the SQLite inserts failed ({status})");
    Ok(())
}
