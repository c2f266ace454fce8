//! What serving the kernel from a daemon costs: a null system call's round trip through vinod
//! against a call in the caller's process, cached reads of 4 KiB and 64 KiB through the client
//! library over the socket and through shared memory, and through a FUSE mount of the same file
//! system; and a soak run of many clients with grafts.

use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};
use vino_client::{Client, ConnectOptions, LockKind, OpenFlags};
use vino_daemon::{Config, Handle};

/// One measured operation: nanoseconds per call (median of rounds).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub operation: String,
    pub path: String,
    pub ns_per_op: f64,
}

/// The spread of single calls: a slow call hidden in a median shows here.
#[derive(Debug, Clone, Serialize)]
pub struct Tail {
    pub operation: String,
    pub calls: usize,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// The daemon cost benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct DaemonReport {
    pub rows: Vec<Row>,
    /// Per-call latency of the null call and of byte-range locks through the socket.
    pub tails: Vec<Tail>,
    /// What could not be measured here, and why.
    pub notes: Vec<String>,
}

/// Starts a daemon on a fresh image in `dir`.
pub fn start_daemon(dir: &Path, cache_frames: usize) -> Result<Handle, String> {
    let config = Config {
        socket: dir.join("vinod.sock"),
        image: dir.join("disk.img"),
        image_size: "256M".into(),
        cache_frames,
        // The benchmarks' clients are all one user's: the per-user limit must not cap them.
        max_connections: 1024,
        max_connections_per_user: 1024,
        ..Config::default()
    };
    vino_daemon::start(config).map_err(|e| e.to_string())
}

/// Median ns per call of `f` over `rounds` rounds of `iters` calls (after up to 1,000 calls to
/// warm up).
pub fn time(rounds: usize, iters: u64, mut f: impl FnMut()) -> f64 {
    for _ in 0..iters.min(1000) {
        f();
    }
    let mut per: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect();
    per.sort_by(f64::total_cmp);
    per[per.len() / 2]
}

/// Times each of `calls` calls of `f` on its own.
fn tail(operation: &str, calls: usize, mut f: impl FnMut()) -> Tail {
    let mut ns: Vec<u64> = (0..calls)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_nanos() as u64
        })
        .collect();
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q) as usize];
    Tail {
        operation: operation.into(),
        calls,
        p50_ns: at(0.5),
        p99_ns: at(0.99),
        max_ns: at(1.0),
    }
}

fn row(operation: &str, path: &str, ns: f64) -> Row {
    Row {
        operation: operation.into(),
        path: path.into(),
        ns_per_op: ns,
    }
}

/// Measures the daemon's costs against the in-process kernel.
pub fn run(dir: &Path, quick: bool) -> Result<DaemonReport, String> {
    let (rounds, iters) = if quick { (3, 2_000) } else { (7, 20_000) };
    let handle = start_daemon(dir, 1024)?;
    let e = |e: vino_client::ClientError| e.to_string();
    let mut c = Client::connect(handle.socket()).map_err(e)?;
    let fd = c.open("/bench", OpenFlags::create()).map_err(e)?;
    c.write(fd, &vec![0x5a; 64 << 10]).map_err(e)?;
    let p = handle.kernel().spawn(vino_kernel::Credentials::root());
    let kfd = p
        .open("/bench", vino_kernel::OpenFlags::read_only())
        .map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    rows.push(row(
        "null call",
        "daemon (socket)",
        time(rounds, iters, || c.null().unwrap()),
    ));
    // The same client sleeping on the socket at once, as a FUSE request's caller does.
    let sleepy = ConnectOptions {
        spin: Duration::ZERO,
        ..ConnectOptions::default()
    };
    let mut s = Client::connect_with(handle.socket(), &sleepy).map_err(e)?;
    let sfd = s.open("/bench", OpenFlags::read_only()).map_err(e)?;
    s.set_shm_threshold(0);
    rows.push(row(
        "null call",
        "daemon (socket, no polling)",
        time(rounds, iters, || s.null().unwrap()),
    ));
    rows.push(row(
        "fstat",
        "daemon (socket)",
        time(rounds, iters, || {
            std::hint::black_box(c.fstat(fd).unwrap());
        }),
    ));
    rows.push(row(
        "fstat",
        "in-process",
        time(rounds, iters, || {
            std::hint::black_box(p.fstat(kfd).unwrap());
        }),
    ));
    for size in [4usize << 10, 64 << 10] {
        let name = format!("cached read {} KiB", size >> 10);
        let mut buf = vec![0u8; size];
        let n = iters / if size > 4096 { 8 } else { 1 };
        c.set_shm_threshold(usize::MAX);
        rows.push(row(
            &name,
            "daemon (socket)",
            time(rounds, n, || assert_eq!(c.pread(fd, &mut buf, 0).unwrap(), size)),
        ));
        c.set_shm_threshold(0);
        rows.push(row(
            &name,
            "daemon (shared memory)",
            time(rounds, n, || assert_eq!(c.pread(fd, &mut buf, 0).unwrap(), size)),
        ));
        rows.push(row(
            &name,
            "daemon (shared memory, no polling)",
            time(rounds, n, || assert_eq!(s.pread(sfd, &mut buf, 0).unwrap(), size)),
        ));
        rows.push(row(
            &name,
            "in-process",
            time(rounds, n, || assert_eq!(p.pread(kfd, &mut buf, 0).unwrap(), size)),
        ));
    }
    drop(s);
    let calls = if quick { 1_000 } else { 5_000 };
    let tails = vec![
        tail("null call", calls, || c.null().unwrap()),
        tail("lock, waiting allowed (F_SETLKW)", calls, || {
            c.lock(fd, LockKind::Write, 0, 1, true).unwrap();
            c.lock(fd, LockKind::Unlock, 0, 1, false).unwrap();
        }),
        tail("lock, no wait (F_SETLK)", calls, || {
            c.lock(fd, LockKind::Write, 0, 1, false).unwrap();
            c.lock(fd, LockKind::Unlock, 0, 1, false).unwrap();
        }),
    ];
    let mut notes = Vec::new();
    if let Err(why) = fuse_reads(&handle, dir, rounds, iters, &mut rows) {
        notes.push(format!("no FUSE rows: {why}"));
    }
    drop(c);
    handle.kernel().exit(p.pid());
    handle.shutdown().map_err(|e| e.to_string())?;
    Ok(DaemonReport { rows, tails, notes })
}

/// The same cached reads through a FUSE mount of the daemon's file system, by an unmodified
/// program's system calls (needs root and `/dev/fuse`): over each transport Linux offers with
/// every read a request (direct I/O, as with `mount_page_cache = false`), then once as mounted
/// by default, where Linux's page cache serves them after the first.
fn fuse_reads(handle: &Handle, dir: &Path, rounds: usize, iters: u64, rows: &mut Vec<Row>) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    use vino_fuse::Transport;
    let mut mounts = vec![(Transport::DevFuse, false, "FUSE mount (/dev/fuse)")];
    if vino_fuse_uring::switch_on() {
        mounts.insert(0, (Transport::Uring, false, "FUSE mount (io_uring)"));
    }
    let default = handle.daemon().config().mount_transport.fuse();
    mounts.push((default, true, "FUSE mount, Linux's page cache in front"));
    for (transport, page_cache, path) in mounts {
        let mount = FuseMount::mount_with(handle, dir, transport, page_cache)?;
        let measured = (|| {
            let file = std::fs::File::open(mount.dir().join("bench")).map_err(|e| e.to_string())?;
            for size in [4usize << 10, 64 << 10] {
                let mut buf = vec![0u8; size];
                let n = iters / if size > 4096 { 8 } else { 1 };
                let ns = time(rounds, n, || assert_eq!(file.read_at(&mut buf, 0).unwrap(), size));
                rows.push(row(&format!("cached read {} KiB", size >> 10), path, ns));
            }
            Ok::<(), String>(())
        })();
        mount.unmount()?;
        measured?;
    }
    Ok(())
}

/// A FUSE mount of a daemon's file system at `<dir>/mnt` (needs root and `/dev/fuse`),
/// unmounted by [`FuseMount::unmount`] or, failing that, when dropped.
pub struct FuseMount<'a> {
    handle: &'a Handle,
    dir: std::path::PathBuf,
    mounted: bool,
}

impl<'a> FuseMount<'a> {
    /// A mount over a given transport (io_uring turns the host's switch on, as root), with
    /// Linux's page cache in front of VINO's or not.
    pub fn mount_with(
        handle: &'a Handle,
        dir: &Path,
        transport: vino_fuse::Transport,
        page_cache: bool,
    ) -> Result<FuseMount<'a>, String> {
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
        handle
            .daemon()
            .mount_with(&mnt, transport, page_cache)
            .map_err(|e| e.message)?;
        Ok(FuseMount {
            handle,
            dir: mnt,
            mounted: true,
        })
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn unmount(mut self) -> Result<(), String> {
        self.mounted = false;
        self.handle.daemon().unmount(&self.dir).map_err(|e| e.message)
    }
}

impl Drop for FuseMount<'_> {
    fn drop(&mut self) {
        if self.mounted {
            let _ = self.handle.daemon().unmount(&self.dir);
        }
    }
}

/// What a soak run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SoakReport {
    pub clients: usize,
    pub secs: u64,
    pub ops: u64,
    pub records: u64,
    /// Graft invocations the clients' read-ahead grafts served (counted before they left).
    pub graft_invocations: u64,
    /// Invariants that failed (empty: all held).
    pub problems: Vec<String>,
}

/// How the soak's clients run.
pub enum SoakClients<'a> {
    /// Threads of this program, each with a connection of its own.
    Threads,
    /// Separate programs: `command(id, socket, secs, graft)` makes the command line of one, which
    /// must call [`soak_client_main`] and print its answer.
    Processes(&'a dyn Fn(usize, &Path, u64, &Path) -> std::process::Command),
}

/// `clients` clients for `secs` seconds against one daemon: each appends numbered records to a
/// shared file, grafts read-ahead on its own file and reads it back, and reconnects now and
/// then. At the end every record must be present, and no process, open file or graft left.
/// `tick` is called about four times a second with the operations done so far.
pub fn soak(
    dir: &Path,
    clients: usize,
    secs: u64,
    how: SoakClients<'_>,
    mut tick: impl FnMut(u64, u64),
) -> Result<SoakReport, String> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    const REC: usize = 16;
    // Every connection grafts read-ahead on its own file: load, invocation on each read and
    // unload at exit all happen under load.
    let ra: Arc<[u8]> = vino_sdk::build_example("sequential_ra", &Default::default())
        .map_err(|e| e.to_string())?
        .into();
    let handle = start_daemon(dir, 1024)?;
    let ops = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(secs);
    let mut report = SoakReport {
        clients,
        secs,
        ..Default::default()
    };
    let results: Vec<Result<(u64, u64), String>> = match how {
        SoakClients::Threads => {
            let workers: Vec<_> = (0..clients)
                .map(|id| {
                    let (socket, ops, ra) = (handle.socket().to_path_buf(), ops.clone(), ra.clone());
                    std::thread::spawn(move || soak_client(&socket, id, until, &ops, &ra))
                })
                .collect();
            while Instant::now() < until {
                std::thread::sleep(Duration::from_millis(250).min(until.saturating_duration_since(Instant::now())));
                tick(ops.load(Ordering::Relaxed), secs);
            }
            let joined = workers
                .into_iter()
                .map(|w| w.join().unwrap_or_else(|_| Err("a client thread panicked".into())));
            joined.collect()
        }
        SoakClients::Processes(command) => {
            let graft = dir.join("soak-ra.wasm");
            std::fs::write(&graft, &ra).map_err(|e| format!("writing {}: {e}", graft.display()))?;
            let children: Vec<_> = (0..clients)
                .map(|id| {
                    let mut cmd = command(id, handle.socket(), secs, &graft);
                    cmd.stdout(std::process::Stdio::piped())
                        .spawn()
                        .map_err(|e| format!("starting client {id}: {e}"))
                })
                .collect::<Result<_, _>>()?;
            while Instant::now() < until {
                std::thread::sleep(Duration::from_millis(250).min(until.saturating_duration_since(Instant::now())));
                tick(handle.daemon().top().processes.iter().map(|p| p.syscalls).sum(), secs);
            }
            children
                .into_iter()
                .enumerate()
                .map(|(id, c)| child_answer(id, c, &ops))
                .collect()
        }
    };
    for r in results {
        match r {
            Ok((n, invoked)) => {
                report.records += n;
                report.graft_invocations += invoked;
            }
            Err(e) => report.problems.push(e),
        }
    }
    report.ops = ops.load(Ordering::Relaxed);
    check_soak(&handle, clients, report.records, REC, &mut report.problems);
    handle.shutdown().map_err(|e| e.to_string())?;
    Ok(report)
}

/// A soak client program's answer: `records graft-calls operations` on its last line.
fn child_answer(
    id: usize,
    child: std::process::Child,
    ops: &std::sync::atomic::AtomicU64,
) -> Result<(u64, u64), String> {
    let out = child.wait_with_output().map_err(|e| format!("client {id}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let nums: Vec<u64> = text.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    match (out.status.success(), nums.as_slice()) {
        (true, &[n, invoked, done]) => {
            ops.fetch_add(done, std::sync::atomic::Ordering::Relaxed);
            Ok((n, invoked))
        }
        _ => Err(format!("client {id} ({}): {}", out.status, text.trim())),
    }
}

/// The body of one soak client program (see [`SoakClients::Processes`]): runs for `secs`
/// seconds and returns the line to print.
pub fn soak_client_main(socket: &Path, id: usize, secs: u64, graft: &Path) -> Result<String, String> {
    let ra = std::fs::read(graft).map_err(|e| format!("reading {}: {e}", graft.display()))?;
    let ops = std::sync::atomic::AtomicU64::new(0);
    let (n, invoked) = soak_client(socket, id, Instant::now() + Duration::from_secs(secs), &ops, &ra)?;
    Ok(format!(
        "{n} {invoked} {}",
        ops.load(std::sync::atomic::Ordering::Relaxed)
    ))
}

fn soak_client(
    socket: &Path,
    id: usize,
    until: Instant,
    ops: &std::sync::atomic::AtomicU64,
    ra: &[u8],
) -> Result<(u64, u64), String> {
    let e = |e: vino_client::ClientError| format!("client {id}: {e}");
    let log = OpenFlags {
        create: true,
        write: true,
        append: true,
        mode: 0o644,
        ..Default::default()
    };
    let (mut n, mut invoked) = (0u64, 0u64);
    let own = format!("/soak{id}");
    while Instant::now() < until {
        let opts = ConnectOptions {
            client: format!("soak{id}"),
            shm: if id.is_multiple_of(2) { 128 << 10 } else { 0 },
            ..Default::default()
        };
        let mut c = Client::connect_with(socket, &opts).map_err(e)?;
        let fd = c.open("/soak-log", log).map_err(e)?;
        let mine = c.open(&own, OpenFlags::create()).map_err(e)?;
        let point = format!("file.compute_ra/{mine}");
        c.graft_load(&point, ra).map_err(e)?;
        for _ in 0..200 {
            if Instant::now() >= until {
                break;
            }
            c.write(fd, format!("{id:05} {n:09}\n").as_bytes()).map_err(e)?;
            n += 1;
            let block = vec![(n % 251) as u8; 8192];
            c.pwrite(mine, &block, 0).map_err(e)?;
            let mut back = vec![0u8; 8192];
            c.pread(mine, &mut back, 0).map_err(e)?;
            if back != block {
                return Err(format!("client {id}: read back other bytes"));
            }
            ops.fetch_add(3, std::sync::atomic::Ordering::Relaxed);
        }
        invoked += c.graft_stats(&point).map_err(e)?.stats.map_or(0, |s| s.invocations);
    }
    Ok((n, invoked))
}

fn check_soak(handle: &Handle, clients: usize, records: u64, rec: usize, problems: &mut Vec<String>) {
    let kernel = handle.kernel();
    let until = Instant::now() + Duration::from_secs(10);
    while !kernel.processes().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    if !kernel.processes().is_empty() {
        problems.push(format!(
            "{} processes left after every client left",
            kernel.processes().len()
        ));
    }
    if !kernel.file_grafts().is_empty() || kernel.global_grafts().iter().any(|s| s.graft.is_some()) {
        problems.push("grafts left bound".into());
    }
    let p = kernel.spawn(vino_kernel::Credentials::root());
    let Ok(fd) = p.open("/soak-log", vino_kernel::OpenFlags::read_only()) else {
        problems.push("no log".into());
        return;
    };
    let size = p.fstat(fd).map(|s| s.size).unwrap_or(0) as usize;
    let mut all = vec![0u8; size];
    let got = p.pread(fd, &mut all, 0).unwrap_or(0);
    if got != size || size != records as usize * rec {
        problems.push(format!("log has {size} bytes, {records} records were written"));
    }
    let mut next = vec![0u64; clients];
    for r in all[..got].chunks(rec) {
        let text = String::from_utf8_lossy(r);
        let parsed = text
            .trim_end()
            .split_once(' ')
            .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<u64>().ok()?)));
        match parsed {
            Some((id, n)) if id < clients && next[id] == n => next[id] += 1,
            _ => {
                problems.push(format!("a record out of place: {text:?}"));
                break;
            }
        }
    }
    kernel.exit(p.pid());
}
