//! Whether one user of vinod can hurt another: a victim user's operations timed alone, then while
//! an attacker (another uid) runs each attack against the same daemon.
//!
//! The daemon runs in this program (as [`crate::daemon`] starts it) on a fresh image. The victim
//! and the attacker are child processes of the benchmark's own program, re-run with `--role
//! victim` or `--role attacker --attack NAME`; when this program runs as root they take the
//! credentials of [`VICTIM_UID`] and [`ATTACKER_UID`] before they run, so they connect as those
//! users and the daemon's per-user limits apply to each. (Not root: both run as this program's
//! uid, and the report says so.)
//!
//! The victim, in a loop for the phase's time, each call timed on its own: open, read 4 KiB and
//! close its own file; lock and unlock a byte of its own file (a waiting request); an event round
//! trip (it listens for creates of one name and creates that file); loading and unloading a small
//! read-ahead graft (the SDK's `sequential_ra`).
//!
//! Each attack is compared with the victim alone measured just before it: on a small shared
//! machine the baseline moves between phases (a client call that misses its polling window
//! sleeps, and costs a wake-up) by more than the goal's factor of two.
//!
//! The daemon's configuration is the default one, limits included: the bench needs nothing
//! raised (the victim holds one connection; the attacker's 50 subscribers and 32 spinning
//! connections fit the default 64 connections per user). The image is 128 MiB so that the
//! disk-fill attack reaches its end (the user's block quota, by default half the disk, or a full
//! device) within seconds.

use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use vino_client::{Client, ClientError, ConnectOptions, EventKind, LockKind, OpenFlags, errno};
use vino_daemon::{Config, Handle};
use vino_measure::report::{self, Table, fmt_ns, fmt_ratio};
use vino_proto::{MAX_FRAME, Request, Response};

/// The victim's uid when the bench runs as root.
pub const VICTIM_UID: u32 = 1001;
/// The attacker's uid when the bench runs as root.
pub const ATTACKER_UID: u32 = 1000;
/// The goal: the victim's p99 under attack at most this many times its p99 alone.
pub const GOAL_RATIO: f64 = 2.0;
/// The baseline phase's name.
pub const ALONE: &str = "alone";
/// The phase after the attacks, alone again.
pub const ALONE_AFTER: &str = "alone, after";
/// The victim alone with the daemon and itself pinned to one core: its fair share of a machine
/// on which two users are busy, the baseline the goal is judged against.
pub const ALONE_ONE_CORE: &str = "alone, one core";
/// The victim's operations, in the order each loop runs them.
pub const VICTIM_OPS: [&str; 4] = [
    "open/read 4 KiB/close",
    "lock/unlock",
    "event round trip",
    "graft load/unload",
];

/// One attack, run by the attacker while the victim is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Attack {
    /// A `lock.grant` graft that spins to its budget on the attacker's file, and lock requests
    /// that conflict there so that it is called.
    LockGrantSpin,
    /// The same four connections contending on one byte, with no graft: what another user's
    /// lock traffic alone costs the victim (the control for [`Attack::LockGrantSpin`]).
    LockContend,
    /// 32 connections calling a control function that loops forever, back to back.
    ControlSpin,
    /// A slow `event.fs.create` graft, 50 subscribers that never wait, and creates.
    EventFlood,
    /// Grafts of 16 MiB of touched memory each, loaded until refused and kept.
    GraftHog,
    /// The costliest modules the limits let through, 3 at a time, their connections closed at once.
    CompileBomb,
    /// Connections until refused, each with a partial frame.
    ConnectionHog,
    /// Writes until refused.
    DiskFill,
    /// 4 KiB written and made durable, back to back on 4 connections: two `fsync` their own
    /// file, two ask for a `sync` of everything, so every call has something to flush.
    SyncStorm,
    /// Connections each setting the largest event filters a request carries (1,024 names of
    /// 4,000 bytes) on every kind, until refused, held while the victim runs.
    EventFilter,
    /// 3 connections, each sending a module of 250,000 functions and closed 50 ms later, over
    /// and over: the work the daemon does before it refuses, for clients that are gone.
    CompileChurn,
    /// Four connections holding as many byte-range locks as the user may on its own file,
    /// unlocking and relocking among them back to back.
    LockCount,
    /// A directory of 20,000 long names, listed whole (page by page) in loops on 4 connections.
    Listing,
    /// One empty file hard-linked under 250-byte names into root's sticky `/tmp` until
    /// refused: root's directory grows, charged to root, unless the names are bounded.
    LinkFill,
}

impl Attack {
    pub const ALL: [Attack; 14] = [
        Attack::LockGrantSpin,
        Attack::LockContend,
        Attack::ControlSpin,
        Attack::EventFlood,
        Attack::GraftHog,
        Attack::CompileBomb,
        Attack::ConnectionHog,
        Attack::DiskFill,
        Attack::SyncStorm,
        Attack::EventFilter,
        Attack::CompileChurn,
        Attack::LockCount,
        Attack::Listing,
        Attack::LinkFill,
    ];

    /// The attack's name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Attack::LockGrantSpin => "lock-grant-spin",
            Attack::LockContend => "lock-contend",
            Attack::ControlSpin => "control-spin",
            Attack::EventFlood => "event-flood",
            Attack::GraftHog => "graft-hog",
            Attack::CompileBomb => "compile-bomb",
            Attack::ConnectionHog => "connection-hog",
            Attack::DiskFill => "disk-fill",
            Attack::SyncStorm => "sync-storm",
            Attack::EventFilter => "event-filter",
            Attack::CompileChurn => "compile-churn",
            Attack::LockCount => "lock-count",
            Attack::Listing => "listing",
            Attack::LinkFill => "link-fill",
        }
    }

    /// The attack named `name`.
    pub fn parse(name: &str) -> Result<Attack, String> {
        Attack::ALL.into_iter().find(|a| a.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Attack::ALL.iter().map(|a| a.name()).collect();
            format!("no attack `{name}` (one of {})", names.join(", "))
        })
    }
}

/// How to run the benchmark.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long each phase (alone, each attack) measures the victim.
    pub phase: Duration,
    pub attacks: Vec<Attack>,
    /// Where the daemon's image goes (a fresh directory under it).
    pub scratch: PathBuf,
    /// The program that plays the roles: it must call [`role_main`] when given `--role`.
    pub program: PathBuf,
}

/// One victim operation's latencies in one phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OpStats {
    pub op: String,
    pub samples: usize,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Calls that failed (not in the samples).
    pub errors: u64,
    pub first_error: Option<String>,
}

/// What the victim measured in one phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VictimReport {
    pub ops: Vec<OpStats>,
    /// CPU time the victim's own process spent while it measured (its client side).
    #[serde(default)]
    pub cpu_ns: u64,
    /// Why the victim measured nothing (it could not connect or set up), if so.
    pub error: Option<String>,
}

/// One phase: the victim alone or under one attack.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// `alone`, or the attack's name.
    pub name: String,
    /// What the attack got once in place: how far it went and what the daemon refused it.
    pub note: String,
    /// What the attack did in all, as it ended.
    pub summary: String,
    pub victim: VictimReport,
    /// The daemon's resident memory at the end of the phase, and its peak so far (MiB).
    pub rss_mib: f64,
    pub peak_rss_mib: f64,
    /// Where the machine's CPU went while the victim measured (with separate users only).
    pub cpu: Option<CpuSplit>,
}

/// The CPU each user had while the victim measured, in cores (CPU seconds per second): its own
/// processes (the client side) and the daemon's work for it, as the daemon charged it.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuSplit {
    pub victim_client: f64,
    pub victim_daemon: f64,
    pub attacker_client: f64,
    pub attacker_daemon: f64,
    /// The cores the machine has.
    pub cores: f64,
}

impl CpuSplit {
    pub fn victim(&self) -> f64 {
        self.victim_client + self.victim_daemon
    }

    pub fn attacker(&self) -> f64 {
        self.attacker_client + self.attacker_daemon
    }
}

/// One row of the table: a victim operation in one phase, against the same operation alone.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub phase: String,
    pub op: String,
    pub samples: usize,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub errors: u64,
    /// The victim's p99 alone that this row is compared with: for an attack, measured just
    /// before it; otherwise the first alone phase's.
    pub alone_p99_ns: u64,
    /// p99 under this phase over `alone_p99_ns` (1 for the first alone phase).
    pub p99_ratio: f64,
    /// The victim's p99 alone on one core ([`ALONE_ONE_CORE`]): its fair share when two users
    /// are busy (0 when the machine could not be pinned).
    pub one_core_p99_ns: u64,
    /// p99 under this phase over `one_core_p99_ns`.
    pub one_core_ratio: f64,
    /// Under attack: p99 within [`GOAL_RATIO`] of the fair share (alone on one core; alone on
    /// every core where one core could not be had) and no failed call.
    pub pass: Option<bool>,
    pub rss_mib: f64,
    pub peak_rss_mib: f64,
    pub note: String,
}

/// The benchmark's result.
#[derive(Debug, Clone, Serialize)]
pub struct IsolationReport {
    pub victim_uid: u32,
    pub attacker_uid: u32,
    /// False when the bench could not switch users (not root): both roles ran as one uid.
    pub separate_users: bool,
    pub phase_secs: f64,
    pub phases: Vec<Phase>,
    pub rows: Vec<Row>,
    /// The victim's slowest uncontended lock/unlock alone, and over how many calls.
    pub alone_lock_max_ns: u64,
    pub alone_lock_calls: usize,
    pub notes: Vec<String>,
}

// ---- the benchmark ------------------------------------------------------------------------------

/// Runs the alone phase, then each attack, and reports.
pub fn run(opts: &Options, progress: &mut dyn FnMut(&str)) -> Result<IsolationReport, String> {
    let root = is_root();
    let dir = scratch(&opts.scratch)?;
    // The socket in a directory every user may reach, whatever the scratch directory's parents.
    let sock_dir = tempfile::Builder::new()
        .prefix("vino-isolation")
        .tempdir()
        .map_err(|e| e.to_string())?;
    open_to_all(sock_dir.path())?;
    let graft = sock_dir.path().join("victim-ra.wasm");
    let ra = vino_sdk::build_example("sequential_ra", &Default::default()).map_err(|e| e.to_string())?;
    std::fs::write(&graft, ra).map_err(|e| format!("writing {}: {e}", graft.display()))?;
    open_to_all(&graft)?;
    let handle = start(dir.path(), sock_dir.path())?;
    make_homes(&handle, root)?;
    let mut phases = Vec::new();
    // Each attack against the victim alone just before it (this machine's load from elsewhere
    // moves the baseline between phases); after the attacks, alone again against the first.
    let mut plan: Vec<(String, Option<Attack>)> = Vec::new();
    for (i, a) in opts.attacks.iter().enumerate() {
        let alone = if i == 0 {
            ALONE.to_string()
        } else {
            format!("{ALONE} before {}", a.name())
        };
        plan.push((alone, None));
        plan.push((a.name().to_string(), Some(*a)));
    }
    if plan.is_empty() {
        plan.push((ALONE.to_string(), None));
    } else {
        plan.push((ALONE_AFTER.to_string(), None));
    }
    plan.insert(1, (ALONE_ONE_CORE.to_string(), None));
    for (i, (name, attack)) in plan.iter().enumerate() {
        progress(&format!("phase {}/{}: {name}", i + 1, plan.len()));
        let one_core = name == ALONE_ONE_CORE && pin_to_one_core(true);
        let mut p = phase(&handle, opts, &graft, *attack, root);
        if one_core {
            pin_to_one_core(false);
        }
        p.name = name.clone();
        phases.push(p);
        wait_idle(&handle);
    }
    handle.shutdown().map_err(|e| e.to_string())?;
    Ok(report(phases, opts.phase, root))
}

/// A fresh directory under `scratch`.
fn scratch(scratch: &Path) -> Result<tempfile::TempDir, String> {
    std::fs::create_dir_all(scratch).map_err(|e| format!("creating {}: {e}", scratch.display()))?;
    tempfile::tempdir_in(scratch).map_err(|e| e.to_string())
}

fn open_to_all(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = if path.is_dir() { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The daemon: default configuration and limits, a 128 MiB image.
fn start(dir: &Path, sock_dir: &Path) -> Result<Handle, String> {
    let config = Config {
        socket: sock_dir.join("vinod.sock"),
        image: dir.join("disk.img"),
        image_size: "128M".into(),
        ..Config::default()
    };
    vino_daemon::start(config).map_err(|e| e.to_string())
}

/// `/home<uid>` for each role, owned by its user: made by a root process of the daemon's kernel
/// (in this program), so that this works when the bench itself is not root.
fn make_homes(handle: &Handle, root: bool) -> Result<(), String> {
    let kernel = handle.kernel();
    let p = kernel.spawn(vino_kernel::Credentials::root());
    let made = (|| {
        for uid in role_uids(root) {
            let home = format!("/home{uid}");
            if p.stat(&home).is_err() {
                p.mkdir(&home, 0o755)?;
            }
            p.chown(&home, Some(uid), Some(uid))?;
        }
        // A shared sticky directory, as Linux's /tmp (for the link-fill attack).
        if p.stat("/tmp").is_err() {
            p.mkdir("/tmp", 0o1777)?;
        }
        Ok::<(), vino_kernel::SysError>(())
    })();
    kernel.exit(p.pid());
    made.map_err(|e| format!("making the home directories: {e}"))
}

/// The victim's and the attacker's uids: the configured ones as root, else this program's.
fn role_uids(root: bool) -> [u32; 2] {
    if root {
        [VICTIM_UID, ATTACKER_UID]
    } else {
        [current_uid(); 2]
    }
}

fn is_root() -> bool {
    current_uid() == 0
}

fn current_uid() -> u32 {
    // SAFETY: getuid takes no arguments, touches no memory of ours and cannot fail.
    unsafe { libc::getuid() }
}

/// Waits (10 s at most) until every connection of the phase has left the kernel.
fn wait_idle(handle: &Handle) {
    let until = Instant::now() + Duration::from_secs(10);
    while !handle.kernel().processes().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A role's child process, as `uid` when running as root.
fn role_command(opts: &Options, socket: &Path, role: &str, uid: Option<u32>) -> Command {
    let mut cmd = Command::new(&opts.program);
    cmd.arg("--role").arg(role).arg("--socket").arg(socket);
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    if let Some(uid) = uid {
        // Taken before the program runs, so it connects as that user (SO_PEERCRED).
        std::os::unix::process::CommandExt::uid(&mut cmd, uid);
        std::os::unix::process::CommandExt::gid(&mut cmd, uid);
    }
    cmd
}

/// The lines a child prints, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("stdout is piped");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The rest of the first line starting with `tag`, within `limit`.
fn wait_tag(lines: &mpsc::Receiver<String>, tag: &str, limit: Duration) -> Result<String, String> {
    let until = Instant::now() + limit;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(l) => {
                if let Some(rest) = l.strip_prefix(tag) {
                    return Ok(rest.trim().to_string());
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => return Err(format!("no {tag} within {limit:?}")),
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(format!("ended without {tag}")),
        }
    }
}

/// Kills and reaps a child that did not end by itself.
fn reap(mut child: Child, within: Duration) {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// One phase: the attack set up (if any), the victim measured, the daemon's memory read, the
/// attack stopped.
fn phase(handle: &Handle, opts: &Options, graft: &Path, attack: Option<Attack>, root: bool) -> Phase {
    let [victim_uid, attacker_uid] = role_uids(root);
    let uid = |u: u32| root.then_some(u);
    let (mut note, mut summary) = (String::new(), String::new());
    let mut attacker = attack.and_then(|a| {
        let mut cmd = role_command(opts, handle.socket(), "attacker", uid(attacker_uid));
        cmd.arg("--attack").arg(a.name()).stdin(Stdio::piped());
        match cmd.spawn() {
            Ok(mut child) => {
                let lines = lines_of(&mut child);
                match wait_tag(&lines, "STARTED", Duration::from_secs(60)) {
                    Ok(n) => note = n,
                    Err(e) => note = format!("attacker: {e}"),
                }
                Some((child, lines))
            }
            Err(e) => {
                note = format!("attacker not started: {e}");
                None
            }
        }
    });
    // Held for the phase, so each user's daemon-side CPU adds up in one account throughout.
    let accounts = handle.kernel().accounts();
    let (victim_acct, attacker_acct) = (accounts.user(victim_uid), accounts.user(attacker_uid));
    let attacker_pid = attacker.as_ref().map(|(c, _)| c.id());
    let before = (
        victim_acct.cpu_work_ns(),
        attacker_acct.cpu_work_ns(),
        attacker_pid.map_or(0, process_cpu_ns),
    );
    let t = Instant::now();
    let victim = run_victim(opts, handle.socket(), graft, uid(victim_uid));
    let secs = t.elapsed().as_secs_f64();
    let after = (
        victim_acct.cpu_work_ns(),
        attacker_acct.cpu_work_ns(),
        attacker_pid.map_or(0, process_cpu_ns),
    );
    let cores = |ns: u64| ns as f64 / 1e9 / secs;
    let cpu = root.then(|| CpuSplit {
        victim_client: cores(victim.cpu_ns),
        victim_daemon: cores(after.0 - before.0),
        attacker_client: cores(after.2.saturating_sub(before.2)),
        attacker_daemon: cores(after.1 - before.1),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
    });
    let (rss_mib, peak_rss_mib) = memory();
    if let Some((mut child, lines)) = attacker.take() {
        // Closing its stdin tells the attacker to stop, clean up and say what it did.
        drop(child.stdin.take());
        summary = wait_tag(&lines, "DONE", Duration::from_secs(30)).unwrap_or_else(|e| format!("attacker: {e}"));
        reap(child, Duration::from_secs(5));
    }
    Phase {
        name: attack.map_or("alone", Attack::name).to_string(),
        note,
        summary,
        victim,
        rss_mib,
        peak_rss_mib,
        cpu,
    }
}

/// CPU time of process `pid`, all its threads (from /proc, in clock ticks; 0 if gone).
fn process_cpu_ns(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, r)| r)
        .split_whitespace()
        .collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks * 1_000_000_000 / hz
}

/// CPU time this process has used so far, all threads.
fn own_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn join_notes(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else {
        format!("{a}; {b}")
    }
}

/// Runs the victim for the phase and reads its report.
fn run_victim(opts: &Options, socket: &Path, graft: &Path, uid: Option<u32>) -> VictimReport {
    let failed = |error: String| VictimReport {
        ops: Vec::new(),
        cpu_ns: 0,
        error: Some(error),
    };
    let mut cmd = role_command(opts, socket, "victim", uid);
    cmd.arg("--graft")
        .arg(graft)
        .arg("--secs")
        .arg(opts.phase.as_secs_f64().to_string());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return failed(format!("victim not started: {e}")),
    };
    let lines = lines_of(&mut child);
    let answer = wait_tag(&lines, "REPORT", opts.phase + Duration::from_secs(120));
    reap(child, Duration::from_secs(5));
    match answer {
        Ok(json) => serde_json::from_str(&json).unwrap_or_else(|e| failed(format!("victim's report: {e}"))),
        Err(e) => failed(format!("victim: {e}")),
    }
}

/// Pins every thread of this program (the daemon's included) to its first allowed core, or
/// gives them back every core this program may use. Children started while pinned (the
/// victim) inherit the one core. False if the machine has one core, or pinning failed.
fn pin_to_one_core(pin: bool) -> bool {
    // The mask this program started with, read before the first pin.
    static ALL: std::sync::OnceLock<Option<libc::cpu_set_t>> = std::sync::OnceLock::new();
    let Some(all) = *ALL.get_or_init(|| {
        // SAFETY: an all-zero cpu_set_t is a valid empty set.
        let mut all: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: sched_getaffinity writes at most the size it is given into the set.
        let ok = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut all) } == 0;
        ok.then_some(all)
    }) else {
        return false;
    };
    let allowed: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads the set given, at an index below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &all) })
        .collect();
    if allowed.len() < 2 {
        return false;
    }
    let mut mask = all;
    if pin {
        // SAFETY: CPU_ZERO and CPU_SET write the set given, at an index below CPU_SETSIZE.
        unsafe {
            libc::CPU_ZERO(&mut mask);
            libc::CPU_SET(allowed[0], &mut mask);
        }
    }
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return false;
    };
    for tid in tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<libc::pid_t>().ok())
    {
        // A thread that ended meanwhile fails with ESRCH: nothing to pin.
        // SAFETY: sched_setaffinity reads the set given, of the size given.
        unsafe { libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &mask) };
    }
    true
}

/// The daemon's (this program's) resident and peak resident memory, MiB.
fn memory() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
}

/// The rows, each phase's against the alone phase.
fn report(phases: Vec<Phase>, phase: Duration, root: bool) -> IsolationReport {
    let [victim_uid, attacker_uid] = role_uids(root);
    let alone: Vec<OpStats> = phases
        .iter()
        .find(|p| p.name == ALONE)
        .map(|p| p.victim.ops.clone())
        .unwrap_or_default();
    let one_core: Vec<OpStats> = phases
        .iter()
        .find(|p| p.name == ALONE_ONE_CORE)
        .map(|p| p.victim.ops.clone())
        .unwrap_or_default();
    let mut rows = Vec::new();
    let mut before: &[OpStats] = &alone;
    for p in &phases {
        if p.name == ALONE || p.name == ALONE_AFTER || p.name == ALONE_ONE_CORE {
            rows.extend(phase_rows(p, &alone, &one_core));
        } else if p.name.starts_with(ALONE) {
            // A baseline of the next attack: in the JSON, not in the table.
            before = &p.victim.ops;
        } else {
            rows.extend(phase_rows(p, before, &one_core));
            before = &alone;
        }
    }
    let lock = alone
        .iter()
        .find(|o| o.op == VICTIM_OPS[1])
        .cloned()
        .unwrap_or_default();
    let mut notes = vec![format!(
        "victim uid {victim_uid}, attacker uid {attacker_uid}; daemon with default limits; {} s per phase",
        phase.as_secs_f64()
    )];
    notes.push("daemon RSS and peak: this program's (the daemon runs in it), read at the end of each phase".into());
    if !root {
        notes.push("not root: victim and attacker ran as one uid, so the per-user limits were shared".into());
    }
    IsolationReport {
        victim_uid,
        attacker_uid,
        separate_users: root,
        phase_secs: phase.as_secs_f64(),
        phases,
        rows,
        alone_lock_max_ns: lock.max_ns,
        alone_lock_calls: lock.samples,
        notes,
    }
}

/// `o`'s p99 over its operation's p99 in `base` (and that p99; NaN where either is missing).
fn ratio_to(o: &OpStats, base: &[OpStats]) -> (u64, f64) {
    let p99 = base.iter().find(|a| a.op == o.op).map_or(0, |a| a.p99_ns);
    if p99 > 0 && o.samples > 0 {
        (p99, o.p99_ns as f64 / p99 as f64)
    } else {
        (p99, f64::NAN)
    }
}

/// A phase's rows: one per victim operation (one row with the error if it measured nothing),
/// each against the victim alone (`alone`) and alone on one core (`one_core`).
fn phase_rows(p: &Phase, alone: &[OpStats], one_core: &[OpStats]) -> Vec<Row> {
    let attacked = !p.name.starts_with(ALONE);
    let row = |o: &OpStats, note: String| {
        let (base, ratio) = ratio_to(o, alone);
        let (one_core_p99_ns, one_core_ratio) = ratio_to(o, one_core);
        let goal_ratio = if one_core_p99_ns > 0 { one_core_ratio } else { ratio };
        Row {
            phase: p.name.clone(),
            op: o.op.clone(),
            samples: o.samples,
            p50_ns: o.p50_ns,
            p99_ns: o.p99_ns,
            max_ns: o.max_ns,
            errors: o.errors,
            alone_p99_ns: base,
            p99_ratio: ratio,
            one_core_p99_ns,
            one_core_ratio,
            pass: attacked.then_some(goal_ratio <= GOAL_RATIO && o.errors == 0 && o.samples > 0),
            rss_mib: p.rss_mib,
            peak_rss_mib: p.peak_rss_mib,
            note,
        }
    };
    if let Some(e) = &p.victim.error {
        let empty = OpStats {
            op: "(all)".into(),
            ..Default::default()
        };
        return vec![row(&empty, join_notes(&p.note, &format!("victim: {e}")))];
    }
    p.victim
        .ops
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let mut note = if i == 0 { p.note.clone() } else { String::new() };
            if let Some(e) = &o.first_error {
                note = join_notes(&note, &format!("victim error: {e}"));
            }
            row(o, note)
        })
        .collect()
}

impl IsolationReport {
    /// The table, the goal under it and the alone lock/unlock maximum.
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "Isolation: the victim's latency alone and under each attack by another user",
            &[
                "phase",
                "victim op",
                "calls",
                "p50",
                "p99",
                "max",
                "alone p99",
                "p99 / alone",
                "1-core p99",
                "p99 / 1-core",
                "errors",
                "daemon RSS MiB",
                "peak MiB",
                "goal",
                "note",
            ],
        );
        for r in &self.rows {
            let goal = match r.pass {
                None => "-",
                Some(true) => "PASS",
                Some(false) => "FAIL",
            };
            t.row([
                r.phase.clone(),
                r.op.clone(),
                r.samples.to_string(),
                fmt_ns(r.p50_ns as f64),
                fmt_ns(r.p99_ns as f64),
                fmt_ns(r.max_ns as f64),
                fmt_ns(r.alone_p99_ns as f64),
                fmt_ratio(r.p99_ratio),
                fmt_ns(r.one_core_p99_ns as f64),
                fmt_ratio(r.one_core_ratio),
                r.errors.to_string(),
                format!("{:.0}", r.rss_mib),
                format!("{:.0}", r.peak_rss_mib),
                goal.to_string(),
                r.note.clone(),
            ]);
        }
        let judged: Vec<&Row> = self.rows.iter().filter(|r| r.pass.is_some()).collect();
        let passed = judged.iter().filter(|r| r.pass == Some(true)).count();
        let verdict = if passed == judged.len() { "PASS" } else { "FAIL" };
        t.note(format!(
            "goal: victim p99 within {GOAL_RATIO}x of its fair share (alone on one core) under every \
             attack (and no failed call): {verdict} ({passed} of {} rows pass; informational)",
            judged.len()
        ));
        t.note(
            "alone p99: each attack against the victim alone just before it; alone, after: against the first alone"
                .to_string(),
        );
        t.note(format!(
            "1-core p99: the victim alone with it and the daemon pinned to one core ({ALONE_ONE_CORE}), \
             its fair share when two users are busy; the goal is judged against it"
        ));
        t.note(format!(
            "alone: uncontended lock/unlock max {} over {} calls",
            fmt_ns(self.alone_lock_max_ns as f64),
            self.alone_lock_calls
        ));
        for p in self.phases.iter().filter(|p| !p.summary.is_empty()) {
            t.note(format!("{}: {}", p.name, p.summary));
        }
        for n in &self.notes {
            t.note(n.clone());
        }
        let mut tables = vec![t];
        tables.extend(self.cpu_table());
        tables
    }

    /// Where the CPU went in each phase, if the roles ran as separate users.
    fn cpu_table(&self) -> Option<Table> {
        let split: Vec<(&str, CpuSplit)> = self
            .phases
            .iter()
            .filter_map(|p| Some((p.name.as_str(), p.cpu?)))
            .collect();
        let cores = split.first()?.1.cores;
        let mut t = Table::new(
            format!("CPU per user while the victim measured, in cores of this machine's {cores}"),
            &[
                "phase",
                "victim: own process",
                "victim: daemon",
                "victim",
                "attacker: own processes",
                "attacker: daemon",
                "attacker",
            ],
        );
        for (name, c) in split {
            let f = |x: f64| format!("{x:.2}");
            t.row([
                name.to_string(),
                f(c.victim_client),
                f(c.victim_daemon),
                f(c.victim()),
                f(c.attacker_client),
                f(c.attacker_daemon),
                f(c.attacker()),
            ]);
        }
        t.note("daemon: the CPU the daemon charged to the user (its requests, grafts and compiles)".to_string());
        t.note("own processes: the user's programs themselves, outside the daemon (from /proc)".to_string());
        Some(t)
    }

    /// Bars of the victim's p99 ratio per attack and operation (nothing to draw: no file).
    pub fn plot(&self, path: &Path) -> anyhow::Result<()> {
        let mut groups: Vec<(String, Vec<(String, f64)>)> = Vec::new();
        for r in self.rows.iter().filter(|r| r.pass.is_some()) {
            // Against the fair share where the bench could pin one core, as the goal is judged.
            let ratio = if r.one_core_ratio.is_finite() {
                r.one_core_ratio
            } else {
                r.p99_ratio
            };
            if !ratio.is_finite() {
                continue;
            }
            match groups.iter_mut().find(|g| g.0 == r.phase) {
                Some(g) => g.1.push((r.op.clone(), ratio)),
                None => groups.push((r.phase.clone(), vec![(r.op.clone(), ratio)])),
            }
        }
        if groups.is_empty() {
            return Ok(());
        }
        report::bar_chart_with(
            path,
            "Isolation: victim p99 under attack / alone on one core (goal: at most 2)",
            "p99 ratio",
            &groups,
            &report::ChartOptions {
                reference: Some(GOAL_RATIO),
                value_labels: true,
                ..Default::default()
            },
        )
    }
}

// ---- the roles ----------------------------------------------------------------------------------

/// What a role's program was asked to do.
pub struct RoleArgs {
    /// `victim` or `attacker`.
    pub role: String,
    pub socket: PathBuf,
    pub attack: Option<String>,
    pub graft: Option<PathBuf>,
    pub secs: f64,
}

/// The body of a role's program: the victim prints `REPORT <json>`; the attacker prints
/// `STARTED <note>` once its attack is in place, stops when its stdin closes and prints
/// `DONE <note>`.
pub fn role_main(args: &RoleArgs) -> Result<(), String> {
    let home = format!("/home{}", current_uid());
    match args.role.as_str() {
        "victim" => {
            let graft = args.graft.as_deref().ok_or("the victim needs --graft")?;
            let wasm = std::fs::read(graft).map_err(|e| format!("reading {}: {e}", graft.display()))?;
            let until = Instant::now() + Duration::from_secs_f64(args.secs);
            let report = victim(&args.socket, &home, &wasm, until);
            println!("REPORT {}", serde_json::to_string(&report).map_err(|e| e.to_string())?);
            Ok(())
        }
        "attacker" => {
            let attack = Attack::parse(args.attack.as_deref().ok_or("the attacker needs --attack")?)?;
            attacker(&args.socket, &home, attack);
            Ok(())
        }
        other => Err(format!("no role `{other}` (victim or attacker)")),
    }
}

/// Latencies of one operation.
struct Samples {
    ns: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
}

impl Samples {
    fn new() -> Samples {
        Samples {
            ns: Vec::new(),
            errors: 0,
            first_error: None,
        }
    }

    /// Times `f`; a failure is counted, with the first one's message.
    fn time(&mut self, f: impl FnOnce() -> Result<(), String>) {
        let t = Instant::now();
        match f() {
            Ok(()) => self.ns.push(t.elapsed().as_nanos() as u64),
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
                // A refused call returns at once: do not spin on it.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    fn stats(mut self, op: &str) -> OpStats {
        self.ns.sort_unstable();
        let at = |q: f64| {
            if self.ns.is_empty() {
                0
            } else {
                self.ns[((self.ns.len() - 1) as f64 * q).round() as usize]
            }
        };
        OpStats {
            op: op.to_string(),
            samples: self.ns.len(),
            p50_ns: at(0.5),
            p99_ns: at(0.99),
            max_ns: at(1.0),
            errors: self.errors,
            first_error: self.first_error.take(),
        }
    }
}

fn text(e: ClientError) -> String {
    match errno::name(e.errno) {
        Some(name) => format!("{name}: {}", e.message),
        None => e.message,
    }
}

/// The victim's files and connection.
struct Victim {
    c: Client,
    home: String,
    lock_fd: u32,
    ra_fd: u32,
    wasm: Vec<u8>,
}

const EVENT_NAME: &str = "victim-ev";

impl Victim {
    fn setup(socket: &Path, home: &str, wasm: &[u8]) -> Result<Victim, ClientError> {
        let opts = ConnectOptions {
            client: "victim".into(),
            ..Default::default()
        };
        let mut c = Client::connect_with(socket, &opts)?;
        // Written once: a later phase's setup needs no space (the disk may be full).
        let fd = c.open(&format!("{home}/data"), OpenFlags::create())?;
        if c.fstat(fd)?.size < 4096 {
            c.pwrite(fd, &[0x5a; 4096], 0)?;
        }
        c.close(fd)?;
        match c.mkdir(&format!("{home}/ev"), 0o755) {
            Err(e) if e.errno != errno::EEXIST => return Err(e),
            _ => {}
        }
        let lock_fd = c.open(&format!("{home}/lock"), OpenFlags::create())?;
        let ra_fd = c.open(&format!("{home}/ra"), OpenFlags::create())?;
        c.event_subscribe(EventKind::Create)?;
        c.event_filter(EventKind::Create, &[], &[EVENT_NAME.to_string()])?;
        Ok(Victim {
            c,
            home: home.to_string(),
            lock_fd,
            ra_fd,
            wasm: wasm.to_vec(),
        })
    }

    fn open_read_close(&mut self) -> Result<(), String> {
        let fd = self
            .c
            .open(&format!("{}/data", self.home), OpenFlags::read_only())
            .map_err(text)?;
        let mut buf = [0u8; 4096];
        let n = self.c.pread(fd, &mut buf, 0).map_err(text);
        self.c.close(fd).map_err(text)?;
        match n? {
            4096 => Ok(()),
            n => Err(format!("read {n} bytes of 4096")),
        }
    }

    fn lock_unlock(&mut self) -> Result<(), String> {
        self.c.lock(self.lock_fd, LockKind::Write, 0, 1, true).map_err(text)?;
        self.c.lock(self.lock_fd, LockKind::Unlock, 0, 1, false).map_err(text)
    }

    /// Creates the watched name and waits for its event (5 s at most).
    fn event_round_trip(&mut self) -> Result<(), String> {
        let path = format!("{}/ev/{EVENT_NAME}", self.home);
        let fd = self.c.open(&path, OpenFlags::create()).map_err(text)?;
        self.c.close(fd).map_err(text)?;
        let until = Instant::now() + Duration::from_secs(5);
        let mut seen = false;
        while !seen && Instant::now() < until {
            let events = self.c.event_wait(1000).map_err(text)?;
            seen = events
                .iter()
                .any(|e| e.kind == EventKind::Create && e.name == EVENT_NAME);
        }
        if !seen {
            return Err("no create event within 5 s".into());
        }
        Ok(())
    }

    fn graft_load_unload(&mut self) -> Result<(), String> {
        let point = format!("file.compute_ra/{}", self.ra_fd);
        self.c.graft_load(&point, &self.wasm).map_err(text)?;
        self.c.graft_unload(&point).map_err(text)
    }

    /// Undoes what the event round trip made, untimed.
    fn tidy(&mut self) {
        let _ = self.c.unlink(&format!("{}/ev/{EVENT_NAME}", self.home));
    }
}

/// The victim's loop until `until`: each operation once per round, the first round a warm-up.
fn victim(socket: &Path, home: &str, wasm: &[u8], until: Instant) -> VictimReport {
    let mut v = match Victim::setup(socket, home, wasm) {
        Ok(v) => v,
        Err(e) => {
            return VictimReport {
                ops: Vec::new(),
                cpu_ns: 0,
                error: Some(text(e)),
            };
        }
    };
    let mut s: Vec<Samples> = VICTIM_OPS.iter().map(|_| Samples::new()).collect();
    let mut round = 0u64;
    let cpu = own_cpu_ns();
    while round == 0 || Instant::now() < until {
        let mut warm: Vec<Samples> = VICTIM_OPS.iter().map(|_| Samples::new()).collect();
        let into = if round == 0 { &mut warm } else { &mut s };
        into[0].time(|| v.open_read_close());
        into[1].time(|| v.lock_unlock());
        into[2].time(|| v.event_round_trip());
        v.tidy();
        into[3].time(|| v.graft_load_unload());
        round += 1;
    }
    VictimReport {
        ops: s.into_iter().zip(VICTIM_OPS).map(|(s, op)| s.stats(op)).collect(),
        cpu_ns: own_cpu_ns() - cpu,
        error: None,
    }
}

// ---- the attacker -------------------------------------------------------------------------------

/// What every attack shares: where it works and when to stop.
struct Ctx {
    socket: PathBuf,
    home: String,
    stop: Arc<AtomicBool>,
}

impl Ctx {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn connect(&self, name: &str) -> Result<Client, ClientError> {
        let opts = ConnectOptions {
            client: name.into(),
            shm: 0,
            // Sleep on the socket at once: the attacker's own polling is not the attack.
            spin: Duration::ZERO,
        };
        Client::connect_with(&self.socket, &opts)
    }

    /// Waits until told to stop.
    fn hold(&self) {
        while !self.stopped() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Runs `attack` until stdin closes. Prints `STARTED <note>` when it is in place (or refused)
/// and `DONE <note>` at the end.
fn attacker(socket: &Path, home: &str, attack: Attack) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        // EOF (or an error): the bench is done with this phase, or gone.
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        flag.store(true, Ordering::Relaxed);
    });
    let ctx = Ctx {
        socket: socket.to_path_buf(),
        home: home.to_string(),
        stop,
    };
    let announced = AtomicBool::new(false);
    let started = |note: &str| {
        if !announced.swap(true, Ordering::Relaxed) {
            println!("STARTED {note}");
            let _ = std::io::stdout().flush();
        }
    };
    let done = match attack {
        Attack::LockGrantSpin => lock_contention(&ctx, &started, true),
        Attack::LockContend => lock_contention(&ctx, &started, false),
        Attack::ControlSpin => control_spin(&ctx, &started),
        Attack::EventFlood => event_flood(&ctx, &started),
        Attack::GraftHog => graft_hog(&ctx, &started),
        Attack::CompileBomb => compile_bomb(&ctx, &started),
        Attack::ConnectionHog => connection_hog(&ctx, &started),
        Attack::DiskFill => disk_fill(&ctx, &started),
        Attack::SyncStorm => sync_storm(&ctx, &started),
        Attack::EventFilter => event_filter(&ctx, &started),
        Attack::CompileChurn => compile_churn(&ctx, &started),
        Attack::LockCount => lock_count(&ctx, &started),
        Attack::Listing => listing(&ctx, &started),
        Attack::LinkFill => link_fill(&ctx, &started),
    };
    let note = done.unwrap_or_else(|e| format!("attack failed: {e}"));
    // Refused before it was in place: the refusal is the note, and the victim runs anyway.
    started(&note);
    ctx.hold();
    println!("DONE {note}");
}

type Started<'a> = &'a dyn Fn(&str);

/// A module in the text format, as the daemon takes it.
fn wasm(wat: &str) -> Vec<u8> {
    wat::parse_str(wat).expect("the bench's own modules are valid")
}

/// `lock.grant` that spins until its budget stops it.
const SPIN_LOCK_GRANT: &str = r#"(module (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "lock_grant") (param i32 i32) (result i64) (loop (br 0)) (i64.const 0)))"#;

/// `event.fs.create` that spins until its budget stops it.
const SPIN_EVENT: &str = r#"(module (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "event_fs_create") (param i32 i64 i64 i64 i64 i32) (result i32) (loop (br 0)) (i32.const 0)))"#;

/// A read-ahead graft of `pages` 64 KiB pages with control functions: `spin` loops forever,
/// `touch` writes every 4 KiB of its memory (so the memory is really there).
fn hog(pages: u32) -> String {
    let bytes = pages * 65536;
    format!(
        r#"(module (memory (export "memory") {pages})
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "file_compute_ra") (param i64 i32 i64) (result i32) (i32.const 0))
  (func (export "vino_ctl_spin") (result i32) (loop (br 0)) (i32.const 0))
  (func (export "vino_ctl_touch") (result i32) (local i32)
    (loop (i32.store8 (local.get 0) (i32.const 1))
      (local.set 0 (i32.add (local.get 0) (i32.const 4096)))
      (br_if 0 (i32.lt_u (local.get 0) (i32.const {bytes}))))
    (i32.const 0)))"#
    )
}

/// Loads `wasm` at `point` again if the kernel unloaded it (a graft that fails every call is).
fn reload_if_gone(c: &mut Client, point: &str, wasm: &[u8], reloads: &AtomicU64) {
    if c.graft_stats(point).map(|s| s.graft.is_none()).unwrap_or(true) && c.graft_load(point, wasm).is_ok() {
        reloads.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts of outcomes by name (errno names, "ok").
#[derive(Default)]
struct Tally(std::sync::Mutex<std::collections::BTreeMap<String, u64>>);

impl Tally {
    fn add(&self, what: &str) {
        *self.0.lock().unwrap().entry(what.to_string()).or_default() += 1;
    }

    fn err(&self, e: &ClientError) {
        self.add(errno::name(e.errno).unwrap_or("error"));
    }

    fn summary(&self) -> String {
        let m = self.0.lock().unwrap();
        let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k} {v}")).collect();
        parts.join(", ")
    }
}

/// Four connections contending on one byte of the attacker's file, with the spinning
/// `lock.grant` graft bound on it if `graft`.
fn lock_contention(ctx: &Ctx, started: Started<'_>, graft: bool) -> Result<String, String> {
    // A file of its own for each variant, made by this phase's owner: only a file's creator may
    // graft its lock.grant, so a file left by the other variant's phase could not be grafted.
    let path = format!("{}/lockfile-{}", ctx.home, if graft { "grafted" } else { "plain" });
    let mut owner = ctx.connect("lock-owner").map_err(text)?;
    let fd = owner.open(&path, OpenFlags::create()).map_err(text)?;
    let point = format!("lock.grant/{fd}");
    let spin = wasm(SPIN_LOCK_GRANT);
    if graft && let Err(e) = owner.graft_load(&point, &spin) {
        return Ok(format!("lock.grant graft refused: {}", text(e)));
    }
    let (cycles, reloads, tally) = (AtomicU64::new(0), AtomicU64::new(0), Tally::default());
    std::thread::scope(|s| {
        for i in 0..4 {
            let (path, cycles, tally) = (&path, &cycles, &tally);
            s.spawn(move || {
                let Ok(mut c) = ctx.connect(&format!("locker{i}")) else {
                    return tally.add("connect refused");
                };
                let Ok(fd) = c.open(path, OpenFlags::read_write()) else {
                    return tally.add("open refused");
                };
                while !ctx.stopped() {
                    // Four processes on one byte: each release finds waiters, so the graft decides.
                    match c.lock(fd, LockKind::Write, 0, 1, true) {
                        Ok(()) => {
                            let _ = c.lock(fd, LockKind::Unlock, 0, 1, false);
                            cycles.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => tally.err(&e),
                    }
                }
            });
        }
        if graft {
            started("spinning lock.grant graft bound; 4 connections contend on one byte");
        } else {
            started("no graft; 4 connections contend on one byte");
        }
        while !ctx.stopped() {
            if graft {
                reload_if_gone(&mut owner, &point, &spin, &reloads);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let _ = owner.unlink(&path);
    let cycles = cycles.load(Ordering::Relaxed);
    if !graft {
        return Ok(format!("{cycles} lock cycles{}", errors_suffix(&tally)));
    }
    // Each reload follows an unload for failing every call: the graft spun to its budget.
    Ok(format!(
        "{cycles} lock cycles; the graft was unloaded for failing and loaded again {} times{}",
        reloads.load(Ordering::Relaxed),
        errors_suffix(&tally)
    ))
}

fn errors_suffix(t: &Tally) -> String {
    let s = t.summary();
    if s.is_empty() { s } else { format!("; refused: {s}") }
}

fn control_spin(ctx: &Ctx, started: Started<'_>) -> Result<String, String> {
    let module = wasm(&hog(1));
    let (calls, reloads, tally) = (AtomicU64::new(0), AtomicU64::new(0), Tally::default());
    let ready = AtomicU64::new(0);
    std::thread::scope(|s| {
        for i in 0..32 {
            let (module, calls, reloads, tally, ready) = (&module, &calls, &reloads, &tally, &ready);
            s.spawn(move || {
                let setup = (|| {
                    let mut c = ctx.connect(&format!("spin{i}"))?;
                    let fd = c.open(&format!("{}/spin{i}", ctx.home), OpenFlags::create())?;
                    let point = format!("file.compute_ra/{fd}");
                    c.graft_load(&point, module)?;
                    Ok::<_, ClientError>((c, point))
                })();
                ready.fetch_add(1, Ordering::Relaxed);
                let (mut c, point) = match setup {
                    Ok(x) => x,
                    Err(e) => return tally.err(&e),
                };
                while !ctx.stopped() {
                    match c.graft_call(&point, "spin", &[]) {
                        Ok(_) => tally.add("returned"),
                        Err(e) if e.errno == errno::EAGAIN => tally.add("EAGAIN"),
                        Err(_) => {
                            calls.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    reload_if_gone(&mut c, &point, module, reloads);
                }
            });
        }
        while ready.load(Ordering::Relaxed) < 32 && !ctx.stopped() {
            std::thread::sleep(Duration::from_millis(10));
        }
        started("32 connections calling an endless control function");
    });
    Ok(format!(
        "{} calls aborted at the budget, {} reloads; other outcomes: {}",
        calls.load(Ordering::Relaxed),
        reloads.load(Ordering::Relaxed),
        tally.summary()
    ))
}

fn event_flood(ctx: &Ctx, started: Started<'_>) -> Result<String, String> {
    let mut main = ctx.connect("flood").map_err(text)?;
    let dir = format!("{}/flood", ctx.home);
    match main.mkdir(&dir, 0o755) {
        Err(e) if e.errno != errno::EEXIST => return Err(text(e)),
        _ => {}
    }
    let tally = Tally::default();
    let spin = wasm(SPIN_EVENT);
    let point = "event.fs.create";
    let mut note = Vec::new();
    if let Err(e) = main.event_subscribe(EventKind::Create) {
        note.push(format!("subscribe refused: {}", text(e)));
    }
    if let Err(e) = main.graft_load(point, &spin) {
        note.push(format!("event graft refused: {}", text(e)));
    }
    // Fifty listeners that never wait: their queues fill.
    let mut subscribers = Vec::new();
    for i in 0..50 {
        match ctx
            .connect(&format!("listener{i}"))
            .and_then(|mut c| c.event_subscribe(EventKind::Create).map(|_| c))
        {
            Ok(c) => subscribers.push(c),
            Err(e) => tally.err(&e),
        }
    }
    note.push(format!("{} idle subscribers", subscribers.len()));
    started(&note.join("; "));
    let (mut created, reloads) = (0u64, AtomicU64::new(0));
    while !ctx.stopped() {
        let path = format!("{dir}/f{}", created % 64);
        match main.open(&path, OpenFlags::create()) {
            Ok(fd) => {
                let _ = main.close(fd);
                let _ = main.unlink(&path);
                created += 1;
            }
            Err(e) => {
                tally.err(&e);
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        if created.is_multiple_of(32) {
            reload_if_gone(&mut main, point, &spin, &reloads);
        }
    }
    note.push(format!(
        "{created} files created, {} graft reloads",
        reloads.load(Ordering::Relaxed)
    ));
    Ok(format!("{}{}", note.join("; "), errors_suffix(&tally)))
}

fn graft_hog(ctx: &Ctx, started: Started<'_>) -> Result<String, String> {
    let mut c = ctx.connect("graft-hog").map_err(text)?;
    let module = wasm(&hog(256));
    let mut loaded = 0;
    let refusal = loop {
        if ctx.stopped() || loaded >= 1000 {
            break "not refused".to_string();
        }
        let fd = match c.open(&format!("{}/hog{loaded}", ctx.home), OpenFlags::create()) {
            Ok(fd) => fd,
            Err(e) => break format!("open: {}", text(e)),
        };
        let point = format!("file.compute_ra/{fd}");
        match c.graft_load(&point, &module) {
            Ok(_) => {
                loaded += 1;
                // Really there: every page of its 16 MiB written.
                if let Err(e) = c.graft_call(&point, "touch", &[]) {
                    break format!("touch: {}", text(e));
                }
            }
            Err(e) => break text(e),
        }
    };
    let note = format!("{loaded} grafts of 16 MiB held; then {refusal}");
    started(&note);
    Ok(note)
}

/// The costliest modules the default module limits let through (each sent with bytes of its
/// own: see [`unique`]): the most functions, one body
/// nested as deep as allowed and as long, and the most bytes of such bodies.
fn bombs() -> Vec<Vec<u8>> {
    let limits = vino_graft::ModuleLimits::default();
    let entry = r#"(memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
      (func (export "vas_pick_victim") (param i32) (result i32) (i32.const 0))"#;
    let funcs = format!(
        "(module {entry}{})",
        " (func)".repeat(limits.max_functions as usize - 1)
    );
    let depth = limits.max_nesting as usize - 1;
    let mut body = format!("(func (local i32) {}", "(block ".repeat(depth));
    // About 7 bytes of code per statement: the body up to its limit, with room to spare.
    let statements = (limits.max_body_bytes - 2048) / 7;
    body.push_str(&" (local.set 0 (i32.add (local.get 0) (i32.const 7)))".repeat(statements));
    body.push_str(&")".repeat(depth));
    body.push(')');
    let deep = format!("(module {entry} {body})");
    let n = (limits.max_bytes / limits.max_body_bytes).saturating_sub(1).max(1);
    let many = format!("(module {entry} {})", body.repeat(n));
    [funcs, deep, many].iter().map(|w| wasm(w)).collect()
}

/// `module` with a custom section holding `n`: the same code, other bytes, so that no cache of
/// compiled modules spares the daemon the compile.
fn unique(module: &[u8], n: u64) -> Vec<u8> {
    let mut m = module.to_vec();
    // Section id 0 (custom), 13 bytes: the name "uniq" (length 4) and `n`.
    m.extend_from_slice(&[0, 13, 4]);
    m.extend_from_slice(b"uniq");
    m.extend_from_slice(&n.to_le_bytes());
    m
}

/// A raw connection that has said Hello, or the daemon's refusal.
fn raw(socket: &Path) -> Result<UnixStream, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let hello = Request::Hello {
        version: vino_proto::VERSION,
        client: "raw".into(),
        shm_len: 0,
    };
    // A refused connection may be closed already; its answer is still there to read.
    let _ = vino_proto::write_frame(&mut s, &hello);
    match answer(&mut s) {
        Some(Response::Hello { .. }) => Ok(s),
        Some(Response::Error(e)) => Err(format!("{}: {}", errno::name(e.errno).unwrap_or("error"), e.message)),
        other => Err(format!("no welcome: {other:?}")),
    }
}

fn answer(s: &mut UnixStream) -> Option<Response> {
    let mut buf = Vec::new();
    vino_proto::read_frame(s, &mut buf, MAX_FRAME).ok()?;
    vino_proto::decode(&buf).ok()
}

fn compile_bomb(ctx: &Ctx, started: Started<'_>) -> Result<String, String> {
    let modules = bombs();
    let (sent, tally) = (AtomicU64::new(0), Tally::default());
    std::thread::scope(|s| {
        for t in 0..3 {
            let (modules, sent, tally) = (&modules, &sent, &tally);
            s.spawn(move || {
                let mut i = t;
                while !ctx.stopped() {
                    let mut conn = match raw(&ctx.socket) {
                        Ok(c) => c,
                        Err(e) => {
                            tally.add(&format!("connect {}", e.split(':').next().unwrap_or("")));
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        }
                    };
                    let req = Request::GraftLoad {
                        point: "vas.pick_victim".into(),
                        wasm: unique(&modules[i % modules.len()], i as u64),
                    };
                    if vino_proto::write_frame(&mut conn, &req).is_err() {
                        tally.add("send failed");
                        continue;
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                    // One in four waits for its answer, to see what the daemon says; the
                    // others hang up at once, leaving the compile unwanted.
                    if i.is_multiple_of(4) {
                        match answer(&mut conn) {
                            Some(Response::Graft(_)) => tally.add("loaded"),
                            Some(Response::Error(e)) => tally.add(errno::name(e.errno).unwrap_or("error")),
                            _ => tally.add("no answer"),
                        }
                    }
                    i += 3;
                }
            });
        }
        started("3 senders of the costliest modules the limits allow");
    });
    Ok(format!(
        "{} modules sent; answers seen: {}",
        sent.load(Ordering::Relaxed),
        tally.summary()
    ))
}

fn connection_hog(ctx: &Ctx, started: Started<'_>) -> Result<String, String> {
    let mut held: Vec<UnixStream> = Vec::new();
    let mut refusal = None;
    let (mut opened, mut replaced) = (0u64, 0u64);
    let mut fill = |held: &mut Vec<UnixStream>, refusal: &mut Option<String>| {
        while held.len() < 4096 {
            match raw(&ctx.socket) {
                Ok(mut s) => {
                    opened += 1;
                    // Every other one starts a frame it never finishes.
                    if held.len().is_multiple_of(2) {
                        let _ = s.write_all(&(1u32 << 20).to_le_bytes());
                        let _ = s.write_all(&[1, 2, 3]);
                    }
                    held.push(s);
                }
                Err(e) => {
                    refusal.get_or_insert(e);
                    break;
                }
            }
        }
    };
    fill(&mut held, &mut refusal);
    let note = format!(
        "{} connections held, then {}",
        held.len(),
        refusal.clone().unwrap_or_else(|| "not refused".into())
    );
    started(&note);
    while !ctx.stopped() {
        std::thread::sleep(Duration::from_millis(200));
        // Those the daemon closed (a frame too slow) are opened again.
        let before = held.len();
        held.retain(|s| !closed(s));
        replaced += (before - held.len()) as u64;
        fill(&mut held, &mut refusal);
    }
    Ok(format!(
        "{note}; {opened} opened in all, {replaced} closed by the daemon"
    ))
}

/// True if the daemon closed `s`.
fn closed(s: &UnixStream) -> bool {
    let mut b = [0u8; 256];
    let _ = s.set_nonblocking(true);
    let r = (&*s).read(&mut b);
    let _ = s.set_nonblocking(false);
    match r {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

fn disk_fill(ctx: &Ctx, started: Started<'_>) -> Result<String, String> {
    let opts = ConnectOptions {
        client: "disk-fill".into(),
        spin: Duration::ZERO,
        ..Default::default()
    };
    let mut c = Client::connect_with(&ctx.socket, &opts).map_err(text)?;
    let chunk = vec![0xa5u8; 1 << 20];
    let (mut written, mut files) = (0u64, Vec::new());
    let mut refusal = None;
    let mut fd = None;
    let started_at = Instant::now();
    while !ctx.stopped() && refusal.is_none() {
        let f = match fd {
            Some(f) => f,
            None => {
                let path = format!("{}/fill{}", ctx.home, files.len());
                match c.open(&path, OpenFlags::create()) {
                    Ok(f) => {
                        files.push(path);
                        fd = Some(f);
                        f
                    }
                    Err(e) => {
                        refusal = Some(format!("open: {}", text(e)));
                        break;
                    }
                }
            }
        };
        match c.write(f, &chunk) {
            Ok(n) => written += n as u64,
            // A file at its largest size: go on in another.
            Err(e) if e.errno == errno::EFBIG => fd = None,
            Err(e) => refusal = Some(text(e)),
        }
    }
    let note = format!(
        "{} MiB written in {:.1} s, then {}",
        written >> 20,
        started_at.elapsed().as_secs_f64(),
        refusal.unwrap_or_else(|| "not refused".into())
    );
    started(&note);
    // Keep the device full: whatever frees up is taken again.
    while !ctx.stopped() {
        if let Some(f) = fd {
            let _ = c.write(f, &chunk[..4096]);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for f in &files {
        let _ = c.unlink(f);
    }
    Ok(note)
}

fn sync_storm(ctx: &Ctx, started: Started<'_>) -> Result<String, String> {
    let (fsyncs, syncs, tally) = (AtomicU64::new(0), AtomicU64::new(0), Tally::default());
    std::thread::scope(|s| {
        for i in 0..4u64 {
            let (fsyncs, syncs, tally) = (&fsyncs, &syncs, &tally);
            s.spawn(move || {
                let Ok(mut c) = ctx.connect(&format!("syncer{i}")) else {
                    return tally.add("connect refused");
                };
                let path = format!("{}/synced{i}", ctx.home);
                let Ok(fd) = c.open(&path, OpenFlags::create()) else {
                    return tally.add("open refused");
                };
                let block = vec![i as u8; 4096];
                let mut n = 0u64;
                while !ctx.stopped() {
                    // A new block each time (a small file's worth, round and round), so that
                    // each call has a page to write and a commit to make.
                    if let Err(e) = c.pwrite(fd, &block, (n % 256) * 4096) {
                        tally.err(&e);
                        continue;
                    }
                    let done = if i % 2 == 0 { c.fsync(fd) } else { c.sync() };
                    match done {
                        Ok(()) if i % 2 == 0 => drop(fsyncs.fetch_add(1, Ordering::Relaxed)),
                        Ok(()) => drop(syncs.fetch_add(1, Ordering::Relaxed)),
                        Err(e) => tally.err(&e),
                    }
                    n += 1;
                }
                let _ = c.unlink(&path);
            });
        }
        started("4 connections writing 4 KiB and syncing, back to back");
    });
    Ok(format!(
        "{} fsyncs, {} syncs{}",
        fsyncs.load(Ordering::Relaxed),
        syncs.load(Ordering::Relaxed),
        errors_suffix(&tally)
    ))
}

fn event_filter(ctx: &Ctx, started: Started<'_>) -> Result<String, String> {
    use EventKind::{Close, Create, Modify, Open, Unlink};
    let names: Vec<String> = (0..1024).map(|j| format!("{j:04}{}", "x".repeat(3996))).collect();
    let (mut held, mut kept) = (Vec::new(), 0u64);
    let mut refusal = None;
    'fill: for i in 0..64 {
        let mut c = match ctx.connect(&format!("filter{i}")) {
            Ok(c) => c,
            Err(e) => {
                refusal = Some(text(e));
                break;
            }
        };
        for kind in [Open, Close, Create, Unlink, Modify] {
            // Subscribed, so that every event walks the filter too (until subscriptions run out).
            let _ = c.event_subscribe(kind);
            if let Err(e) = c.event_filter(kind, &[], &names) {
                refusal = Some(text(e));
                held.push(c);
                break 'fill;
            }
            kept += 1;
        }
        held.push(c);
    }
    let note = format!(
        "{kept} filters of 4 MB kept on {} connections, then {}",
        held.len(),
        refusal.unwrap_or_else(|| "not refused".into())
    );
    started(&note);
    ctx.hold();
    Ok(note)
}

/// A binary module of `n` empty functions, built directly (the text format takes seconds).
fn empty_functions(n: u32) -> Vec<u8> {
    fn leb(out: &mut Vec<u8>, mut v: u32) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            out.push(if v == 0 { byte } else { byte | 0x80 });
            if v == 0 {
                break;
            }
        }
    }
    let section = |out: &mut Vec<u8>, id: u8, body: Vec<u8>| {
        out.push(id);
        leb(out, body.len() as u32);
        out.extend_from_slice(&body);
    };
    let mut m = b"\0asm\x01\0\0\0".to_vec();
    // One type, () -> ().
    section(&mut m, 1, vec![1, 0x60, 0, 0]);
    let mut funcs = Vec::new();
    leb(&mut funcs, n);
    funcs.resize(funcs.len() + n as usize, 0);
    section(&mut m, 3, funcs);
    let mut code = Vec::new();
    leb(&mut code, n);
    for _ in 0..n {
        // Body of 2 bytes: no locals, `end`.
        code.extend_from_slice(&[2, 0, 0x0b]);
    }
    section(&mut m, 10, code);
    m
}

fn compile_churn(ctx: &Ctx, started: Started<'_>) -> Result<String, String> {
    let module = empty_functions(250_000);
    let (sent, tally) = (AtomicU64::new(0), Tally::default());
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (module, sent, tally) = (&module, &sent, &tally);
            s.spawn(move || {
                let mut i = t;
                while !ctx.stopped() {
                    let mut conn = match raw(&ctx.socket) {
                        Ok(c) => c,
                        Err(e) => {
                            tally.add(&format!("connect {}", e.split(':').next().unwrap_or("")));
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        }
                    };
                    let req = Request::GraftLoad {
                        point: "vas.pick_victim".into(),
                        wasm: unique(module, i),
                    };
                    // A daemon that refuses before reading it all may close first.
                    match vino_proto::write_frame(&mut conn, &req) {
                        Ok(()) => tally.add("sent"),
                        Err(_) => tally.add("cut off"),
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(50));
                    drop(conn);
                    i += 3;
                }
            });
        }
        started("3 connections each sending 250,000 functions, closed 50 ms later");
    });
    Ok(format!(
        "{} modules started; {}",
        sent.load(Ordering::Relaxed),
        tally.summary()
    ))
}

/// Four connections fill the user's lock records on one file of its own, one byte apart (each
/// a record of its own), until refused; then each unlocks and relocks its bytes in turn.
fn lock_count(ctx: &Ctx, started: Started<'_>) -> Result<String, String> {
    let path = format!("{}/lockcount", ctx.home);
    let (held, cycles, tally, ready) = (
        AtomicU64::new(0),
        AtomicU64::new(0),
        Tally::default(),
        AtomicU64::new(0),
    );
    std::thread::scope(|s| {
        for i in 0..4u64 {
            let (path, held, cycles, tally, ready) = (&path, &held, &cycles, &tally, &ready);
            s.spawn(move || {
                let setup = (|| {
                    let mut c = ctx.connect(&format!("locks{i}"))?;
                    let fd = c.open(path, OpenFlags::create())?;
                    Ok::<_, ClientError>((c, fd))
                })();
                let (mut c, fd) = match setup {
                    Ok(x) => x,
                    Err(e) => {
                        ready.fetch_add(1, Ordering::Relaxed);
                        return tally.err(&e);
                    }
                };
                // Connection i takes bytes 8k + 2i: records of all four interleave.
                let byte = |k: u64| 8 * k + 2 * i;
                let mut mine = 0;
                while !ctx.stopped() {
                    match c.lock(fd, LockKind::Write, byte(mine), 1, false) {
                        Ok(()) => mine += 1,
                        Err(e) => {
                            tally.err(&e);
                            break;
                        }
                    }
                }
                held.fetch_add(mine, Ordering::Relaxed);
                ready.fetch_add(1, Ordering::Relaxed);
                // Relock only once all are full: a slot freed now would go to one still filling.
                while ready.load(Ordering::Relaxed) < 4 && !ctx.stopped() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let mut k = 0;
                while !ctx.stopped() && mine > 0 {
                    let _ = c.lock(fd, LockKind::Unlock, byte(k), 1, false);
                    if let Err(e) = c.lock(fd, LockKind::Write, byte(k), 1, false) {
                        tally.err(&e);
                    }
                    cycles.fetch_add(1, Ordering::Relaxed);
                    k = (k + 97) % mine;
                }
            });
        }
        while ready.load(Ordering::Relaxed) < 4 && !ctx.stopped() {
            std::thread::sleep(Duration::from_millis(10));
        }
        started(&format!(
            "4 connections hold {} lock records on one file, relocking among them",
            held.load(Ordering::Relaxed)
        ));
    });
    let _ = ctx.connect("lock-tidy").and_then(|mut c| c.unlink(&path));
    Ok(format!(
        "{} records held, {} unlock/relock cycles; refused: {}",
        held.load(Ordering::Relaxed),
        cycles.load(Ordering::Relaxed),
        tally.summary()
    ))
}

/// Fills a directory with long names (until refused), then lists it whole on 4 connections,
/// back to back: each answer is a page, so a listing costs the daemon O(page) per request.
fn listing(ctx: &Ctx, started: Started<'_>) -> Result<String, String> {
    let dir = format!("{}/many", ctx.home);
    let mut c = ctx.connect("lister-fill").map_err(text)?;
    if let Err(e) = c.mkdir(&dir, 0o755)
        && e.errno != errno::EEXIST
    {
        return Err(text(e));
    }
    let pad = "n".repeat(200);
    let (mut made, mut refusal) = (0, String::new());
    while made < 20_000 && !ctx.stopped() {
        match c.open(&format!("{dir}/{made:05}{pad}"), OpenFlags::create()) {
            Ok(fd) => {
                let _ = c.close(fd);
            }
            Err(e) => {
                refusal = format!(", then {}", text(e));
                break;
            }
        }
        made += 1;
    }
    let (lists, tally) = (AtomicU64::new(0), Tally::default());
    std::thread::scope(|s| {
        for i in 0..4 {
            let (lists, tally, dir) = (&lists, &tally, &dir);
            s.spawn(move || {
                let Ok(mut c) = ctx.connect(&format!("lister{i}")) else {
                    return tally.add("connect refused");
                };
                while !ctx.stopped() {
                    match c.readdir(dir) {
                        Ok(_) => drop(lists.fetch_add(1, Ordering::Relaxed)),
                        Err(e) => tally.err(&e),
                    }
                }
            });
        }
        started(&format!("{made} entries made{refusal}; 4 connections listing them"));
    });
    // Tidy, so that the attacks after this one start from the same quota.
    for n in 0..made {
        let _ = c.unlink(&format!("{dir}/{n:05}{pad}"));
    }
    let _ = c.rmdir(&dir);
    Ok(format!(
        "{made} entries{refusal}, {} whole listings{}",
        lists.load(Ordering::Relaxed),
        errors_suffix(&tally)
    ))
}

fn link_fill(ctx: &Ctx, started: Started<'_>) -> Result<String, String> {
    let mut c = ctx.connect("link-fill").map_err(text)?;
    let seed = format!("/tmp/link-fill-{}", current_uid());
    let fd = c.open(&seed, OpenFlags::create()).map_err(text)?;
    c.close(fd).map_err(text)?;
    let name = |n: u64| format!("{seed}-{n:0>230}");
    let (mut made, mut refusal) = (0u64, None);
    let started_at = Instant::now();
    while !ctx.stopped() && refusal.is_none() {
        match c.link_at(None, &seed, None, name(made), false) {
            Ok(_) => made += 1,
            Err(e) => refusal = Some(text(e)),
        }
    }
    let note = format!(
        "{made} names in {:.1} s, then {}",
        started_at.elapsed().as_secs_f64(),
        refusal.unwrap_or_else(|| "not refused".into())
    );
    started(&note);
    ctx.hold();
    for n in 0..made {
        let _ = c.unlink(&name(n));
    }
    let _ = c.unlink(&seed);
    Ok(note)
}
