//! Idle polling: while a server is busy, one thread per CPU keeps that CPU from halting for a
//! short window after the server's last request, so that a program woken with its answer, or
//! a server thread woken with the next request, lands on a CPU that is already running.
//!
//! Why a server needs it: a FUSE request is two wake-ups (the server's thread, then the
//! program), and Linux places a woken program on an idle CPU rather than on the busy one whose
//! thread just answered it, so every round trip wakes an idle CPU however the server's threads
//! are pinned. Where waking a halted CPU is dear (a virtual machine whose idle CPUs halt at
//! once, without the guest polling first, where the host must schedule the virtual CPU again),
//! that wake dominates: one FUSE round trip took 44 µs with the CPUs halting and 16 µs with
//! them kept running, and `tar x` of 12,000 files 5.5 s against 2.45 s (docs/results/daemon.md has the
//! measurements). This is what Linux's own halt-polling (`cpuidle-haltpoll`) does inside the
//! kernel, here only while the server has work and only for its window.
//!
//! The pollers run at `SCHED_IDLE`: Linux runs them only when nothing else on their CPU wants
//! it (within its scheduling group, below), preempts them for any thread that does, and counts
//! a CPU that runs only `SCHED_IDLE` threads as idle when it places a woken thread. What they
//! cost is then CPU time nobody else wanted (power; on a shared host, the host's CPU). They
//! stop within the window of the last request; there are none when the process may use one CPU
//! only, or when its cgroup has a CPU quota, which spinning would spend.
//!
//! `SCHED_IDLE` is idle only among the threads of one scheduling group, though: Linux shares a
//! CPU between groups first (cgroups, and autogroups, one per session), so pollers left in a
//! daemon's group hold that group's share against other groups' threads (measured: 40-60% of
//! the CPU taken from a CPU-bound loop in another session). So the pollers move into a group of
//! their own at the top of the CPU controller's hierarchy, marked idle (`cpu.idle`, Linux 5.15):
//! the whole group is then idle against every other group, and its threads run only on a CPU
//! nobody else wants (measured: a poller beside another session's CPU-bound loop ran 10 ms in
//! 3 s in the idle group, 110-140 ms in the daemon's). Only cgroup v1's CPU hierarchy places
//! single threads in another group; under cgroup v2 a process's threads share its domain, and
//! [`Placement::IdleGroup`] then starts no pollers.
//!
//! Two choices come from measurements on such a machine. A poller spins by yielding
//! (`sched_yield`), entering the kernel each round, not with `pause` in user space: a virtual
//! CPU that stays in user space takes a wake-up sent to it late (one trace had a thread woken
//! by an I/O completion wait 1.4 ms behind a user-space spinner on its CPU), and an `fsync`
//! through the mount took 35% longer beside such pollers. And a request wakes sleeping pollers
//! only when it follows another within the window: waking them costs that request a wake-up
//! of each halted CPU, which pays only if more requests follow soon.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

/// The pollers of a server; dropping it stops them.
pub struct IdlePoll {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// What a server's threads call as each request arrives ([`Activity::busy`]). Cloned into each
/// of them; a no-op when there are no pollers.
#[derive(Clone, Default)]
pub struct Activity(Option<Arc<Shared>>);

struct Shared {
    /// Requests seen: a poller spins while this moves, and sleeps once it has stood still for
    /// `window`.
    served: AtomicU64,
    /// Pollers asleep (their `asleep` flag set): a request wakes them only when this is not 0.
    sleepers: AtomicUsize,
    /// When the last request came while the pollers slept (nanoseconds since `began`): they
    /// wake only for a request that follows another within the window. Waking them costs the
    /// request that does it a wake-up of each (on a virtual machine, of a halted CPU), which
    /// pays only if more requests follow soon; a lone request after a quiet spell (an `fsync`
    /// every few hundred microseconds) would pay it every time.
    last_lone: AtomicU64,
    began: Instant,
    pollers: Vec<Poller>,
    stop: AtomicBool,
    window: Duration,
}

struct Poller {
    asleep: AtomicBool,
    thread: OnceLock<Thread>,
}

/// Why there are no pollers, if there are none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Off {
    /// The window is zero (turned off).
    Disabled,
    /// The process may run on one CPU only: the server and its callers share it anyway.
    OneCpu,
    /// The process's cgroup (or one above it) limits its CPU time (v2 `cpu.max`, v1
    /// `cpu.cfs_quota_us`): the file and its limit.
    CpuQuota(String),
    /// [`Placement::IdleGroup`] was asked for and there is no idle group: why.
    NoIdleGroup(String),
    /// The server judged pollers of no use to it: why.
    NoGain(&'static str),
}

/// Where the pollers may run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// Only in the idle group ([`IDLE_GROUP`]), idle against every other group's threads;
    /// no pollers where there is none.
    #[default]
    IdleGroup,
    /// In the idle group where there is one, else in the process's own scheduling group, idle
    /// only against the process's own threads (an administrator's explicit choice).
    AnyGroup,
}

/// The idle group's name, at the top of cgroup v1's CPU hierarchy. Made (and marked idle) by
/// the first server that needs it, kept for the next; it needs root.
pub const IDLE_GROUP: &str = "vino-idle-poll";

/// As `vino top` shows it: "off", and why if not turned off. A quota's limit without its
/// cgroup's path (any user may look).
impl std::fmt::Display for Off {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Off::Disabled => write!(f, "off"),
            Off::OneCpu => write!(f, "off (one CPU)"),
            Off::CpuQuota(q) => write!(f, "off (CPU quota {})", q.rsplit(": ").next().unwrap_or(q)),
            Off::NoIdleGroup(why) => write!(f, "off (no idle cgroup: {why})"),
            Off::NoGain(why) => write!(f, "off ({why})"),
        }
    }
}

impl IdlePoll {
    /// Starts one poller per CPU this process may use, each spinning for `window` after the
    /// last [`Activity::busy`], placed as `placement` says. `Err` says why none were started.
    pub fn start(window: Duration, placement: Placement) -> Result<IdlePoll, Off> {
        if window.is_zero() {
            return Err(Off::Disabled);
        }
        let cpus = allowed_cpus();
        if cpus.len() < 2 {
            return Err(Off::OneCpu);
        }
        if let Some(limit) = cgroup_cpu_quota() {
            return Err(Off::CpuQuota(limit));
        }
        let group: Option<Arc<Path>> = match idle_group() {
            Ok(g) => Some(g.into()),
            Err(why) if placement == Placement::IdleGroup => return Err(Off::NoIdleGroup(why)),
            Err(_) => None,
        };
        let shared = Arc::new(Shared {
            served: AtomicU64::new(0),
            sleepers: AtomicUsize::new(cpus.len()),
            last_lone: AtomicU64::new(0),
            began: Instant::now(),
            pollers: cpus
                .iter()
                .map(|_| Poller {
                    asleep: AtomicBool::new(true),
                    thread: OnceLock::new(),
                })
                .collect(),
            stop: AtomicBool::new(false),
            window,
        });
        let spawned: Vec<(usize, JoinHandle<()>)> = cpus
            .iter()
            .enumerate()
            .filter_map(|(i, &cpu)| {
                let shared = shared.clone();
                let group = group.clone();
                let t = thread::Builder::new()
                    .name(format!("vino-idle-poll{cpu}"))
                    .spawn(move || poll(&shared, i, cpu, group.as_deref(), placement))
                    .ok()?;
                Some((i, t))
            })
            .collect();
        // Each poller has started (named, placed, registered) or ended before this returns, so
        // that what the pollers are is settled for whoever asks.
        for (i, t) in &spawned {
            while shared.pollers[*i].thread.get().is_none() && !t.is_finished() {
                thread::yield_now();
            }
        }
        let threads = spawned.into_iter().map(|(_, t)| t).collect();
        Ok(IdlePoll { shared, threads })
    }

    /// The handle the server's threads signal activity through.
    pub fn activity(&self) -> Activity {
        Activity(Some(self.shared.clone()))
    }

    /// Pollers running (one per CPU; one that could not take idle priority, or join the idle
    /// group it had to, has ended).
    pub fn pollers(&self) -> usize {
        self.threads.iter().filter(|t| !t.is_finished()).count()
    }
}

impl Drop for IdlePoll {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        for p in &self.shared.pollers {
            if let Some(t) = p.thread.get() {
                t.unpark();
            }
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Activity {
    /// A request arrived: pollers keep spinning, and sleeping ones wake if this request follows
    /// another within the window. Costs one shared atomic add while they spin.
    #[inline]
    pub fn busy(&self) {
        let Some(s) = &self.0 else { return };
        s.served.fetch_add(1, SeqCst);
        if s.sleepers.load(SeqCst) > 0 {
            s.wake_if_busy();
        }
    }
}

impl Shared {
    #[cold]
    fn wake_if_busy(&self) {
        let now = self.began.elapsed().as_nanos() as u64;
        let before = self.last_lone.swap(now, SeqCst);
        if now.saturating_sub(before) <= self.window.as_nanos() as u64 {
            self.wake();
        }
    }

    fn wake(&self) {
        for p in &self.pollers {
            if p.asleep.swap(false, SeqCst) {
                self.sleepers.fetch_sub(1, SeqCst);
                // A poller not yet registered has not parked either: it sees the flag.
                if let Some(t) = p.thread.get() {
                    t.unpark();
                }
            }
        }
    }
}

/// A poller's thread: on its CPU at idle priority, in the idle group if there is one, asleep
/// until a request, then spinning until requests have stopped for the window.
fn poll(shared: &Shared, me: usize, cpu: usize, group: Option<&Path>, placement: Placement) {
    let p = &shared.pollers[me];
    pin_to_cpu(cpu);
    if !set_idle_priority() {
        // Never spin at normal priority: that would take the CPU from real work.
        return;
    }
    let joined = group.is_some_and(|g| join_group(g).is_ok());
    if !joined && placement == Placement::IdleGroup {
        return;
    }
    // Registered once placed: `start` returns when every poller is, or has ended.
    p.thread.get_or_init(thread::current);
    loop {
        while p.asleep.load(SeqCst) && !shared.stop.load(SeqCst) {
            thread::park();
        }
        if shared.stop.load(SeqCst) {
            return;
        }
        spin(shared, p);
    }
}

/// Spins while requests keep coming; returns asleep (flag set and counted) once none came for
/// the window.
fn spin(shared: &Shared, p: &Poller) {
    let mut seen = shared.served.load(SeqCst);
    let mut quiet_since = Instant::now();
    loop {
        yield_cpu();
        let now = shared.served.load(SeqCst);
        if now != seen {
            seen = now;
            quiet_since = Instant::now();
            continue;
        }
        if shared.stop.load(SeqCst) {
            return;
        }
        if quiet_since.elapsed() < shared.window {
            continue;
        }
        // Going to sleep: a request counted after the load below finds us counted as a
        // sleeper and wakes us; one counted before it is seen here.
        p.asleep.store(true, SeqCst);
        shared.sleepers.fetch_add(1, SeqCst);
        if shared.served.load(SeqCst) == seen {
            return;
        }
        if p.asleep.swap(false, SeqCst) {
            shared.sleepers.fetch_sub(1, SeqCst);
        }
        quiet_since = Instant::now();
    }
}

/// Pins the calling thread to `cpu` (left where it was if that fails: CPU offline, or beyond
/// the set's size).
pub fn pin_to_cpu(cpu: usize) {
    if cpu >= libc::CPU_SETSIZE as usize {
        return;
    }
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET stays within it for cpu < CPU_SETSIZE; the
    // call reads the set only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the zeroed set it is given, of the size given; CPU_ISSET
    // reads within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Enters the kernel and gives the CPU to any thread that wants it.
fn yield_cpu() {
    // SAFETY: sched_yield takes no arguments and touches no memory of ours.
    unsafe { libc::sched_yield() };
}

/// The idle group, made and marked idle if need be: `Err` says why there is none.
pub fn idle_group() -> Result<PathBuf, String> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("mountinfo: {e}"))?;
    let top = cpu_hierarchy(&mounts)?;
    let group = top.join(IDLE_GROUP);
    match std::fs::create_dir(&group) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make {}: {e}", group.display())),
    }
    let idle = group.join("cpu.idle");
    std::fs::write(&idle, "1").map_err(|e| format!("cannot mark {} idle: {e}", group.display()))?;
    Ok(group)
}

/// Where cgroup v1's CPU controller is mounted (its top as this process sees it), from
/// `/proc/self/mountinfo`'s lines.
fn cpu_hierarchy(mountinfo: &str) -> Result<PathBuf, String> {
    let mut unified = false;
    for line in mountinfo.lines() {
        // "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu": the mount point
        // is the fifth field; after " - ", the type, the source and the super options.
        let Some((mount, fs)) = line.split_once(" - ") else {
            continue;
        };
        let mut fs = fs.split(' ');
        let (kind, options) = (fs.next(), fs.nth(1).unwrap_or(""));
        match kind {
            Some("cgroup") if options.split(',').any(|o| o == "cpu") => {
                if let Some(at) = mount.split(' ').nth(4) {
                    return Ok(PathBuf::from(at));
                }
            }
            Some("cgroup2") => unified = true,
            _ => {}
        }
    }
    Err(if unified {
        "cgroup v2 keeps a process's threads in its own domain".into()
    } else {
        "no CPU controller mounted".into()
    })
}

/// Moves the calling thread into `group` (cgroup v1's `tasks` takes one thread).
fn join_group(group: &Path) -> std::io::Result<()> {
    // SAFETY: gettid takes no arguments and touches no memory.
    let tid = unsafe { libc::gettid() };
    std::fs::write(group.join("tasks"), tid.to_string())
}

fn set_idle_priority() -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param; pid 0 is the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) == 0 }
}

/// The first CPU limit of this process's cgroup or one above it, as "path: limit": cgroup v2's
/// `cpu.max` other than "max ...", or cgroup v1's `cpu.cfs_quota_us` other than -1.
fn cgroup_cpu_quota() -> Option<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    quota_of(&own, std::path::Path::new("/sys/fs/cgroup"))
}

/// [`cgroup_cpu_quota`] for the membership `own` (as `/proc/self/cgroup` lists it) under the
/// cgroup file system mounted at `mounted`.
fn quota_of(own: &str, mounted: &std::path::Path) -> Option<String> {
    let v1 = mounted.join("cpu");
    own.lines().find_map(|line| {
        // "0::/path" (v2), or "N:cpu,cpuacct:/path" (v1, the controller that limits CPU time).
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let (top, file, unlimited): (&std::path::Path, &str, fn(&str) -> bool) = if controllers.is_empty() {
            (mounted, "cpu.max", |v| v.starts_with("max"))
        } else if controllers.split(',').any(|c| c == "cpu") {
            (&v1, "cpu.cfs_quota_us", |v| v == "-1")
        } else {
            return None;
        };
        let mut dir = top.join(path.trim().trim_start_matches('/'));
        loop {
            if let Ok(v) = std::fs::read_to_string(dir.join(file))
                && !unlimited(v.trim())
            {
                return Some(format!("{}: {}", dir.join(file).display(), v.trim()));
            }
            if dir == top || !dir.pop() {
                return None;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_quota_above_the_process_is_found() {
        let root = std::env::temp_dir().join(format!("vino-idlepoll-{}", std::process::id()));
        let put = |rel: &str, v: &str| {
            let f = root.join(rel);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, v).unwrap();
        };
        put("cpu.max", "max 100000\n");
        put("a/cpu.max", "max 100000\n");
        put("a/b/cpu.max", "max 100000\n");
        assert_eq!(quota_of("0::/a/b\n", &root), None, "no limit anywhere");
        put("a/cpu.max", "50000 100000\n");
        let found = quota_of("0::/a/b\n", &root).unwrap();
        assert!(found.ends_with("a/cpu.max: 50000 100000"), "{found}");
        // cgroup v1: the cpu controller's hierarchy, -1 meaning no quota.
        put("cpu/x/cpu.cfs_quota_us", "-1\n");
        let v1 = "5:memory:/x\n4:cpu,cpuacct:/x\n";
        assert_eq!(quota_of(v1, &root), None);
        put("cpu/x/cpu.cfs_quota_us", "20000\n");
        assert!(quota_of(v1, &root).unwrap().ends_with("cpu.cfs_quota_us: 20000"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn off_when_the_window_is_zero() {
        assert_eq!(
            IdlePoll::start(Duration::ZERO, Placement::AnyGroup).err(),
            Some(Off::Disabled)
        );
        assert_eq!(Off::Disabled.to_string(), "off");
        let quota = Off::CpuQuota("/sys/fs/cgroup/a/cpu.max: 50000 100000".into());
        assert_eq!(
            quota.to_string(),
            "off (CPU quota 50000 100000)",
            "no cgroup path shown"
        );
        Activity::default().busy();
    }

    #[test]
    fn pollers_sleep_when_requests_stop_and_wake_with_the_next() {
        // A window far longer than a preemption of this thread on a loaded machine, so that
        // the two requests below count as one following the other.
        let window = Duration::from_millis(50);
        let Ok(poll) = IdlePoll::start(window, Placement::AnyGroup) else {
            return; // one CPU, or a quota: nothing to test here
        };
        let n = poll.pollers();
        let s = poll.shared.clone();
        let all_asleep = |s: &Shared| {
            let until = Instant::now() + Duration::from_secs(10);
            while s.sleepers.load(SeqCst) != n {
                assert!(Instant::now() < until, "pollers never slept");
                thread::sleep(Duration::from_millis(1));
            }
        };
        all_asleep(&s);
        let a = poll.activity();
        // A lone request after a quiet spell wakes none; one soon after it wakes them all.
        thread::sleep(2 * window);
        a.busy();
        assert_eq!(s.sleepers.load(SeqCst), n, "a lone request wakes no poller");
        a.busy();
        assert_eq!(s.sleepers.load(SeqCst), 0, "a second request wakes every poller");
        assert!(s.pollers.iter().all(|p| !p.asleep.load(SeqCst)));
        // Activity from many threads at once, then quiet: every poller ends asleep and counted
        // once (the flag and the count agree).
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let a = a.clone();
                thread::spawn(move || {
                    for i in 0..20_000 {
                        a.busy();
                        if i % 1000 == 0 {
                            thread::sleep(Duration::from_micros(300));
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        all_asleep(&s);
        assert!(s.pollers.iter().all(|p| p.asleep.load(SeqCst)));
        drop(poll);
    }

    #[test]
    fn pollers_run_at_idle_priority() {
        let Ok(poll) = IdlePoll::start(Duration::from_millis(50), Placement::AnyGroup) else {
            return;
        };
        poll.activity().busy();
        poll.activity().busy();
        thread::sleep(Duration::from_millis(5));
        // Every poller thread of this process has policy SCHED_IDLE (5) in /proc. Other tests
        // of this binary may have pollers of their own starting, named before they take idle
        // priority: look again until those have too.
        let policies = || -> Vec<(String, u32)> {
            let mut found = Vec::new();
            for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
                let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
                let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
                    continue;
                };
                if comm.starts_with("vino-idle-poll") {
                    // Fields after the command's closing parenthesis; policy is field 41.
                    let rest = &stat[stat.rfind(')').unwrap() + 2..];
                    let policy = rest.split(' ').nth(41 - 3).unwrap().parse().unwrap();
                    found.push((comm.trim().to_string(), policy));
                }
            }
            found
        };
        let until = Instant::now() + Duration::from_secs(5);
        let mut found = policies();
        while found.iter().any(|(_, p)| *p != libc::SCHED_IDLE as u32) && Instant::now() < until {
            thread::sleep(Duration::from_millis(5));
            found = policies();
        }
        for (comm, policy) in &found {
            assert_eq!(*policy, libc::SCHED_IDLE as u32, "{comm}");
        }
        assert!(found.len() >= poll.pollers(), "{} pollers found", found.len());
    }

    #[test]
    fn the_cpu_hierarchy_is_found_in_mountinfo() {
        let v1 = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                  32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n\
                  35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";
        assert_eq!(cpu_hierarchy(v1), Ok(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")));
        let v1_other = "35 31 0:32 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n";
        assert_eq!(cpu_hierarchy(v1_other), Err("no CPU controller mounted".into()));
        let v2 = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert!(cpu_hierarchy(v2).unwrap_err().contains("cgroup v2"));
    }

    /// Where there is an idle group (root, cgroup v1's CPU controller), every poller runs in
    /// it; where there is none, pollers that must run there do not start.
    #[test]
    fn pollers_run_only_in_the_idle_group_when_they_must() {
        match IdlePoll::start(Duration::from_millis(50), Placement::IdleGroup) {
            Err(Off::NoIdleGroup(why)) => assert_eq!(Err(why), idle_group()),
            Err(_) => {} // one CPU or a quota
            Ok(poll) => {
                let group = idle_group().unwrap();
                assert_eq!(std::fs::read_to_string(group.join("cpu.idle")).unwrap().trim(), "1");
                let members = std::fs::read_to_string(group.join("tasks")).unwrap();
                // (Other tests of this binary may have pollers of their own starting.)
                let mut found = 0;
                for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
                    let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
                    let tid = task.file_name().into_string().unwrap();
                    let member = members.lines().any(|m| m == tid);
                    if comm.starts_with("vino-idle-poll") {
                        found += usize::from(member);
                    } else {
                        assert!(!member, "{comm} {tid} moved too");
                    }
                }
                assert!(
                    found >= poll.pollers() && poll.pollers() > 0,
                    "{found} pollers in the group"
                );
            }
        }
    }
}
