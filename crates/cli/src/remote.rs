//! The commands that talk to vinod: `vino daemon`, `vino mount`, `vino graft load|unload|list|stats`,
//! `vino top`.

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;
use vino_client::{Client, GraftTop, ProcessTop, RequestTop, Top, UserTop};

/// The graft commands served by the daemon.
#[derive(Subcommand)]
pub enum RemoteGraft {
    /// Load a graft through the daemon. It belongs to this command's kernel process, so it stays
    /// bound while the command runs: until Ctrl-C (or SIGTERM), or for `--for` seconds.
    Load {
        /// The module (.wasm).
        module: PathBuf,
        /// The graftpoint, e.g. disk.pick_request, cache.writeback, file.compute_ra.
        #[arg(long)]
        point: String,
        /// Bind to this file for every later open of it: a path in the VINO file system, or a
        /// file on a VINO mount (whose daemon is then the one asked).
        #[arg(long)]
        file: Option<String>,
        /// Keep the graft this many seconds, then exit (default: until interrupted).
        #[arg(long = "for", conflicts_with = "fd")]
        hold: Option<u64>,
        /// Graft this descriptor of a file on a VINO mount, inherited from the shell
        /// (`3< /mnt/vino/data vino graft load ra.wasm --point file.compute_ra --fd 3 -- prog`):
        /// the graft stays bound while the descriptor is open, and the command after `--`, if
        /// any, runs in this process's place with it.
        #[arg(long, conflicts_with = "file")]
        fd: Option<i32>,
        /// The command to run with the grafted descriptor (after `--`).
        #[arg(last = true, requires = "fd")]
        command: Vec<std::ffi::OsString>,
        /// Record the graft's inputs while it is bound, into this file when the command ends
        /// (for `vino graft replay`).
        #[arg(long, conflicts_with_all = ["fd", "file"])]
        record: Option<PathBuf>,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Try a candidate graft before binding it: the candidate runs in shadow beside the live
    /// policy (the default or a bound graft) at `vas.pick_victim` or `file.compute_ra/<fd>` of
    /// process `--pid` (yours, or any if privileged), on a ghost model that follows its answers,
    /// or at `disk.pick_request` (privileged), `lock.grant/<fd>`, `sched.pick_next`
    /// (privileged) or `sched.pick_thread` of `--pid`, judged by agreement with the live
    /// decisions;
    /// nothing it decides reaches the kernel. Prints live against candidate after `--for`
    /// seconds (or Ctrl-C).
    Try {
        /// The candidate module (.wasm, or .wat text).
        module: PathBuf,
        #[arg(long)]
        point: String,
        /// The VINO process whose graftpoint it is (`vino ps`); none for a global graftpoint.
        #[arg(long, conflicts_with = "fd")]
        pid: Option<u64>,
        /// An inherited descriptor of a file on a VINO mount whose graftpoint it is
        /// (`3< /mnt/vino/data vino graft try ra.wasm --point file.compute_ra --fd 3 --for 60`):
        /// file.compute_ra, lock.grant or vas.pick_victim, as `vino graft load --fd` binds.
        #[arg(long)]
        fd: Option<i32>,
        /// The file whose `lock.grant` it is tried at (every process's locks on it): a path in
        /// the VINO file system, or a file on a VINO mount.
        #[arg(long, conflicts_with_all = ["fd", "pid"])]
        file: Option<String>,
        #[arg(long = "for")]
        hold: Option<u64>,
        /// Follow 1 in N pages (vas.pick_victim; default all, exact) or 1 in N decisions (the
        /// graftpoints judged by agreement; default: the kernel chooses, to keep the shadow
        /// under its share of a core).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        sample: Option<u32>,
        #[arg(long)]
        json: bool,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Record the inputs of the graft bound at a graftpoint this command may graft (a global one
    /// when privileged; this user's own, `net.pick_packet/user`), for `vino graft replay`: until
    /// Ctrl-C (or SIGTERM), or for `--for` seconds.
    Record {
        #[arg(long)]
        point: String,
        /// The recording to write.
        #[arg(short, long)]
        output: PathBuf,
        /// Stop after this many seconds.
        #[arg(long = "for")]
        hold: Option<u64>,
        /// Most bytes the recording may hold (at most 16 MiB); it stops there and says so.
        #[arg(long, default_value_t = 16 << 20)]
        limit: u64,
        /// Record the kernel's own policy where nothing is bound (vas.pick_victim,
        /// file.compute_ra, disk.pick_request, lock.grant, sched.pick_next, sched.pick_thread):
        /// a replay of a candidate on it says what the candidate would have decided instead.
        #[arg(long)]
        default: bool,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Unload a global graft (privileged) or a file's graft (`--file`).
    Unload {
        #[arg(long)]
        point: String,
        #[arg(long)]
        file: Option<String>,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Every graft bound in the daemon, with its counters.
    List {
        #[arg(long)]
        json: bool,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// One graftpoint's state and counters.
    Stats {
        #[arg(long)]
        point: String,
        #[arg(long)]
        json: bool,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
}

pub fn connect(socket: Option<PathBuf>) -> Result<Client> {
    let path = vino_daemon::socket_path(socket);
    let opts = vino_client::ConnectOptions {
        client: "vino".into(),
        shm: 0,
        ..Default::default()
    };
    Client::connect_with(&path, &opts).with_context(|| format!("is vinod running on {}?", path.display()))
}

fn daemon_config(image: &Path, socket: Option<PathBuf>, config: Option<PathBuf>) -> Result<vino_daemon::Config> {
    let mut c = match config {
        Some(path) => vino_daemon::Config::load(&path).map_err(anyhow::Error::msg)?,
        None => vino_daemon::Config::default(),
    };
    c.image = image.to_path_buf();
    if let Some(s) = socket.or_else(|| std::env::var_os("VINO_SOCKET").map(PathBuf::from)) {
        c.socket = s;
    }
    Ok(c)
}

/// `vino daemon`: serves the kernel in the foreground until SIGTERM or SIGINT.
pub fn daemon(image: &Path, socket: Option<PathBuf>, config: Option<PathBuf>) -> Result<()> {
    Ok(vino_daemon::run(daemon_config(image, socket, config)?)?)
}

/// `vino mount`: with an image, serves it as `vino daemon` does and mounts it at `mountpoint`
/// until SIGTERM or SIGINT or until the mount goes; without one, has the running daemon mount
/// its file system.
pub fn mount(image: Option<&Path>, mountpoint: &Path, socket: Option<PathBuf>, config: Option<PathBuf>) -> Result<()> {
    let at = std::fs::canonicalize(mountpoint).with_context(|| format!("mount point {}", mountpoint.display()))?;
    match image {
        Some(image) => {
            let mut c = daemon_config(image, socket, config)?;
            c.mount = Some(at);
            Ok(vino_daemon::run_mounted(c)?)
        }
        None => Ok(connect(socket)?.mount(&at.to_string_lossy())?),
    }
}

/// `vino unmount`: has the running daemon undo a mount it made.
pub fn unmount(mountpoint: &Path, socket: Option<PathBuf>) -> Result<()> {
    let at = std::fs::canonicalize(mountpoint).with_context(|| format!("mount point {}", mountpoint.display()))?;
    let socket = socket.or_else(|| mount_of(&at).map(|(_, s)| s));
    Ok(connect(socket)?.unmount(&at.to_string_lossy())?)
}

/// `vino sync`: has a daemon make everything written to it durable (its `sync`).
pub fn sync(path: Option<&Path>, socket: Option<PathBuf>) -> Result<()> {
    let socket = match (socket, path) {
        (Some(s), _) => Some(s),
        (None, Some(p)) => {
            let at = std::fs::canonicalize(p).with_context(|| format!("{}", p.display()))?;
            let (_, s) = mount_of(&at).with_context(|| format!("{} is not on a VINO mount", p.display()))?;
            Some(s)
        }
        (None, None) => None,
    };
    Ok(connect(socket)?.sync()?)
}

/// The VINO FUSE mount holding `path` (an existing host path): the path below the mount point,
/// and the socket of the daemon serving it (the mount's source reads `vino:<socket>`).
fn mount_of(path: &Path) -> Option<(String, PathBuf)> {
    let path = std::fs::canonicalize(path).ok()?;
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let unescape = |s: &str| s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n");
    table
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = PathBuf::from(unescape(left.split(' ').nth(4)?));
            let mut r = right.split(' ');
            let (fstype, source) = (r.next()?, r.next()?);
            let socket = source.strip_prefix("vino:").filter(|_| fstype.starts_with("fuse"))?;
            let inside = path.strip_prefix(&point).ok()?;
            Some((format!("/{}", inside.display()), PathBuf::from(unescape(socket))))
        })
        .max_by_key(|(inside, _)| std::cmp::Reverse(inside.len()))
}

/// What `--file` names: a path in the VINO file system, or a host path inside a VINO mount
/// (then the daemon's socket comes from the mount unless `--socket` says otherwise).
pub(crate) fn file_arg(file: &str, socket: Option<PathBuf>) -> (String, Option<PathBuf>) {
    match mount_of(Path::new(file)) {
        Some((inside, mount_socket)) => (inside, socket.or(Some(mount_socket))),
        None => (file.to_string(), socket),
    }
}

pub fn graft(cmd: RemoteGraft) -> Result<()> {
    match cmd {
        RemoteGraft::Load {
            module,
            point,
            fd: Some(fd),
            command,
            socket,
            ..
        } => load_fd(&module, &point, fd, &command, socket),
        RemoteGraft::Load {
            module,
            point,
            file,
            hold,
            socket,
            fd: None,
            record,
            ..
        } => load(&module, &point, file.as_deref(), hold, record.as_deref(), socket),
        RemoteGraft::Try {
            module,
            point,
            pid,
            fd,
            file,
            hold,
            sample,
            json,
            socket,
        } => {
            let wasm = std::fs::read(&module).with_context(|| format!("reading {}", module.display()))?;
            let signals = block_stop_signals()?;
            let (mut c, pid, point) = match fd {
                None if file.is_some() => {
                    let lock_grant = <vino_kernel::graftpoints::LockGrant as vino_graft::GraftPoint>::NAME;
                    if point != lock_grant {
                        bail!(
                            "--file names a file's {lock_grant}; {point} is tried on an open file (--fd, or --pid \
                             with {point}/<fd>) or a process"
                        );
                    }
                    let (f, socket) = file_arg(file.as_deref().unwrap_or_default(), socket);
                    let mut c = connect(socket)?;
                    let fd = c
                        .open(&f, vino_client::OpenFlags::read_only())
                        .with_context(|| format!("opening {f}"))?;
                    let point = format!("{point}/{fd}");
                    c.graft_try(None, &point, &wasm, sample.unwrap_or(0))
                        .with_context(|| format!("trying {} at {point} ({f})", module.display()))?;
                    (c, None, point)
                }
                None => {
                    let mut c = connect(socket)?;
                    c.graft_try(pid, &point, &wasm, sample.unwrap_or(0))
                        .with_context(|| format!("trying {} at {point}", module.display()))?;
                    (c, pid, point)
                }
                Some(fd) => {
                    let (path, mut c) = mount_descriptor(fd, socket)?;
                    let (pid, at) = c.graft_try_mount_fd(fd, &point, &wasm).with_context(|| {
                        format!(
                            "trying {} at {point} on descriptor {fd} ({})",
                            module.display(),
                            path.display()
                        )
                    })?;
                    (c, Some(pid), at)
                }
            };
            hold_until(hold, &signals)?;
            let report = c.graft_try_stop(pid, &point)?;
            let report: serde_json::Value = serde_json::from_slice(&report)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", try_table(&report));
            }
            Ok(())
        }
        RemoteGraft::Record {
            point,
            output,
            hold,
            limit,
            default,
            socket,
        } => {
            let signals = block_stop_signals()?;
            let mut c = connect(socket)?;
            match default {
                true => c.graft_record_default(&point, limit),
                false => c.graft_record(&point, limit),
            }
            .with_context(|| format!("recording at {point}"))?;
            hold_until(hold, &signals)?;
            write_recording(&mut c, &point, &output)
        }
        RemoteGraft::Unload { point, file, socket } => {
            match file {
                Some(f) => {
                    let (f, socket) = file_arg(&f, socket);
                    connect(socket)?.graft_unload_file(&f, &point)?
                }
                None => connect(socket)?.graft_unload(&point)?,
            }
            Ok(())
        }
        RemoteGraft::List { json, socket } => {
            let top = connect(socket)?.top()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&top.grafts)?);
            } else {
                print!("{}", graft_table(&top.grafts));
            }
            Ok(())
        }
        RemoteGraft::Stats { point, json, socket } => {
            let slot = connect(socket)?.graft_stats(&point)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&slot)?);
            } else {
                let s = slot.stats.unwrap_or_default();
                println!(
                    "{}: {} ({}), {} invocations, {} aborts, {} changes made, {:.1} us in graft",
                    slot.point,
                    slot.policy,
                    slot.access,
                    s.invocations,
                    s.aborts,
                    s.changes,
                    s.time_ns as f64 / 1e3
                );
                if let Some(e) = s.last_error {
                    println!("last error: {e}");
                }
            }
            Ok(())
        }
    }
}

/// Blocks SIGTERM and SIGINT, to wait for them in [`hold_until`].
fn block_stop_signals() -> Result<nix::sys::signal::SigSet> {
    use nix::sys::signal::{SigSet, Signal};
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    signals.thread_block()?;
    Ok(signals)
}

/// Waits `hold` seconds, or without one until SIGTERM or SIGINT.
fn hold_until(hold: Option<u64>, signals: &nix::sys::signal::SigSet) -> Result<()> {
    match hold {
        Some(secs) => std::thread::sleep(Duration::from_secs(secs)),
        None => {
            signals.wait()?;
        }
    }
    Ok(())
}

/// Stops the recording at `point` and writes it to `output`.
fn write_recording(c: &mut Client, point: &str, output: &Path) -> Result<()> {
    let bytes = c
        .graft_record_stop(point)
        .with_context(|| format!("taking the recording at {point}"))?;
    std::fs::write(output, &bytes).with_context(|| format!("writing {}", output.display()))
}

fn load(
    module: &Path,
    point: &str,
    file: Option<&str>,
    hold: Option<u64>,
    record: Option<&Path>,
    socket: Option<PathBuf>,
) -> Result<()> {
    let wasm = std::fs::read(module).with_context(|| format!("reading {}", module.display()))?;
    let signals = block_stop_signals()?;
    let (file, socket) = match file {
        Some(f) => {
            let (f, s) = file_arg(f, socket);
            (Some(f), s)
        }
        None => (None, socket),
    };
    let mut c = connect(socket)?;
    match &file {
        Some(f) => c.graft_load_file(f, point, &wasm),
        None => c.graft_load(point, &wasm),
    }
    .with_context(|| format!("loading {} at {point}", module.display()))?;
    if record.is_some() {
        c.graft_record(point, vino_client::MAX_RECORDING as u64)
            .with_context(|| format!("recording at {point}"))?;
    }
    hold_until(hold, &signals)?;
    if let Some(output) = record {
        write_recording(&mut c, point, output)?;
    }
    drop(c);
    Ok(())
}

/// The file behind inherited descriptor `fd`, and a connection to the daemon of its mount
/// (or `socket`).
fn mount_descriptor(fd: i32, socket: Option<PathBuf>) -> Result<(PathBuf, Client)> {
    let path = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .with_context(|| format!("descriptor {fd} is not open (open it in the shell: `{fd}< FILE`)"))?;
    let socket = socket.or_else(|| mount_of(&path).map(|(_, s)| s));
    Ok((path, connect(socket)?))
}

/// `vino graft load --fd`: grafts an inherited descriptor of a file on a mount through the
/// mount's ioctl, then runs the command, if any, in this process's place.
fn load_fd(module: &Path, point: &str, fd: i32, command: &[std::ffi::OsString], socket: Option<PathBuf>) -> Result<()> {
    let wasm = std::fs::read(module).with_context(|| format!("reading {}", module.display()))?;
    let (path, mut c) = mount_descriptor(fd, socket)?;
    c.graft_mount_fd(fd, point, &wasm).with_context(|| {
        format!(
            "grafting {} at {point} on descriptor {fd} ({})",
            module.display(),
            path.display()
        )
    })?;
    drop(c);
    let Some((program, args)) = command.split_first() else {
        return Ok(());
    };
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(program).args(args).exec();
    Err(e).with_context(|| format!("running {}", program.to_string_lossy()))
}

/// A try's report, live against candidate.
pub(crate) fn try_table(r: &serde_json::Value) -> String {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    // Each row: its label, the live value's and the candidate's paths, and a divisor (1000: ns
    // shown in us).
    let rows: Vec<(&str, &[&str], &[&str], f64)> = match r["model"].as_str() {
        Some("victim") => {
            let mut rows = vec![
                ("accesses", &["accesses"][..], &["accesses"][..], 1.0),
                ("misses", &["live_misses"], &["would_be_misses"], 1.0),
            ];
            if r["memory_decisions"].as_u64() > Some(0) {
                rows.push(("memory evictions alike", &["memory_decisions"], &["memory_agreed"], 1.0));
                rows.push((
                    "memory victim (index)",
                    &["memory_live_index"],
                    &["memory_candidate_index"],
                    1.0,
                ));
            }
            rows
        }
        Some("disk") => vec![
            ("decisions alike", &["followed"], &["agreed"], 1.0),
            (
                "seek (blocks, mean)",
                &["live_seek_blocks"],
                &["candidate_seek_blocks"],
                1.0,
            ),
            ("waited (us, mean)", &["live_waited_ns"], &["candidate_waited_ns"], 1e3),
        ],
        Some("lock") => vec![
            ("decisions alike", &["followed"], &["agreed"], 1.0),
            ("waiters granted", &["live_granted"], &["candidate_granted"], 1.0),
            (
                "their wait (us, mean)",
                &["live_granted_waited_ns"],
                &["candidate_granted_waited_ns"],
                1e3,
            ),
        ],
        Some("sched") => vec![
            ("decisions alike", &["followed"], &["agreed"], 1.0),
            ("waited (us, mean)", &["live_waited_ns"], &["candidate_waited_ns"], 1e3),
            ("longest waiting run", &["live_oldest"], &["candidate_oldest"], 1.0),
        ],
        _ => vec![
            ("hits", &["live", "hits"], &["candidate", "hits"], 1.0),
            ("misses", &["live", "misses"], &["candidate", "misses"], 1.0),
            ("read ahead", &["live", "prefetched"], &["candidate", "prefetched"], 1.0),
            ("read ahead, used", &["live", "used"], &["candidate", "used"], 1.0),
            ("read ahead, wasted", &["live", "wasted"], &["candidate", "wasted"], 1.0),
        ],
    };
    let at = |path: &[&str]| path.iter().fold(r, |v, k| &v[*k]);
    let mut out = format!("{:<24} {:>12} {:>12}\n", "", "LIVE", "CANDIDATE");
    for (label, live, candidate, div) in rows {
        out += &format!(
            "{:<24} {:>12.0} {:>12.0}\n",
            label,
            f(at(live)) / div,
            f(at(candidate)) / div
        );
    }
    out += &format!(
        "candidate: {} decisions, {} failed, {:.0} ns a decision; {} offered events dropped\n",
        n(&r["decisions"]),
        n(&r["failures"]),
        f(&r["candidate_ns_per_decision"]),
        n(&r["queue_drops"])
    );
    if r["held_back_ms"].as_u64().unwrap_or(0) > 0 {
        out += &format!(
            "the candidate was held back {} ms to keep under its share of a core\n",
            n(&r["held_back_ms"])
        );
    }
    if r["sample_auto"].as_bool() == Some(true) {
        out += &format!("1 in {} decisions offered, as the kernel chose\n", n(&r["sample"]));
    }
    if let Some(why) = r["dropped"].as_str() {
        out += &format!("the candidate was dropped: {why}\n");
    }
    out
}

fn graft_table(grafts: &[GraftTop]) -> String {
    let mut out = format!(
        "{:<26} {:<22} {:>6} {:>12} {:>8} {:>12}\n",
        "GRAFTPOINT", "BOUND TO", "OWNER", "INVOCATIONS", "ABORTS", "TIME (ms)"
    );
    for g in grafts {
        out += &format!(
            "{:<26} {:<22} {:>6} {:>12} {:>8} {:>12.3}\n",
            g.point,
            g.scope,
            g.owner,
            g.invocations,
            g.aborts,
            g.time_ns as f64 / 1e6
        );
    }
    out
}

fn process_table(procs: &[ProcessTop]) -> String {
    let mut out = format!(
        "{:>5} {:>7} {:>5} {:<12} {:>8} {:>10} {:>10} {:>5} {:>6} {:>10} {:>8} {:>9} {:>8} {:>8} {:>6} {:>6} {:>6}\n",
        "PID",
        "HOSTPID",
        "UID",
        "CLIENT",
        "SYSCALLS",
        "READ",
        "WRITTEN",
        "FILES",
        "GRAFTS",
        "INVOKED",
        "ABORTS",
        "GRAFT ms",
        "HITS",
        "MISSES",
        "FRAMES",
        "RES",
        "SWAP"
    );
    for p in procs {
        out += &format!(
            "{:>5} {:>7} {:>5} {:<12} {:>8} {:>10} {:>10} {:>5} {:>6} {:>10} {:>8} {:>9.3} {:>8} {:>8} {:>6} {:>6} {:>6}\n",
            p.pid,
            p.host_pid,
            p.uid,
            // A program running in the daemon has no client of its own: its name instead.
            p.program
                .as_deref()
                .unwrap_or(&p.client)
                .chars()
                .take(12)
                .collect::<String>(),
            p.syscalls,
            p.bytes_read,
            p.bytes_written,
            p.open_files,
            p.grafts,
            p.graft_invocations,
            p.graft_aborts,
            p.graft_time_ns as f64 / 1e6,
            p.cache_hits,
            p.cache_misses,
            p.cache_frames,
            // Pages of its program's memory in frames and in swap.
            p.memory.resident,
            p.memory.swapped
        );
    }
    out
}

/// What each user holds against its limits: grafts, graft memory, code, descriptors, CPU.
fn user_table(users: &[UserTop]) -> String {
    let held = |u: &UserTop, r: &str, unit: u64| {
        u.held.iter().find(|h| h.resource == r).map_or("-".to_string(), |h| {
            let limit = if h.limit == u64::MAX {
                "-".to_string()
            } else {
                (h.limit / unit).to_string()
            };
            format!("{}/{limit}", h.used.div_ceil(unit))
        })
    };
    let mut out = format!(
        "{:>6} {:>12} {:>14} {:>12} {:>12} {:>13} {:>10}\n",
        "UID", "GRAFTS", "GRAFT MEM MiB", "CODE MiB", "FILES", "DAEMON CPU ms", "GRAFT CPU ms"
    );
    for u in users {
        out += &format!(
            "{:>6} {:>12} {:>14} {:>12} {:>12} {:>13.1} {:>10.1}\n",
            u.uid,
            held(u, "Grafts", 1),
            held(u, "GraftMemory", 1 << 20),
            held(u, "GraftCode", 1 << 20),
            held(u, "Descriptors", 1),
            u.work_ns as f64 / 1e6,
            u.cpu_ns as f64 / 1e6
        );
    }
    out
}

/// A mount's requests: the total, the daemon's time on them, and the most served kinds with
/// their mean time. Empty when none were shown (nothing served, or the viewer is not
/// privileged).
fn requests_line(requests: &[RequestTop]) -> String {
    const SHOWN: usize = 8;
    if requests.is_empty() {
        return String::new();
    }
    let count: u64 = requests.iter().map(|r| r.count).sum();
    let ns: u64 = requests.iter().map(|r| r.ns).sum();
    let kinds: Vec<String> = requests
        .iter()
        .take(SHOWN)
        .map(|r| {
            format!(
                "{} {} ({:.1} µs)",
                r.op,
                r.count,
                r.ns as f64 / r.count.max(1) as f64 / 1e3
            )
        })
        .collect();
    format!(
        "  {count} requests, served in {:.1} ms: {}\n",
        ns as f64 / 1e6,
        kinds.join(", ")
    )
}

/// The host link's line (and its way out's, with a rate).
fn net_line(n: &vino_client::NetTop) -> String {
    let shaped = n.shaped.as_ref().map_or_else(
        || "no rate".to_string(),
        |e| {
            format!(
                "way out: {} packets queued, {} sent, {} dropped, {} bytes of {} users waiting; net.pick_packet decided {} (users') and {} (the link's)",
                e.queued, e.sent, e.dropped, e.waiting_bytes, e.users_waiting, e.user_picks, e.link_picks
            )
        },
    );
    format!(
        "host link: {} packets out ({} refused), {} in ({} martians); {shaped}\n",
        n.sent, n.refused, n.received, n.martians
    )
}

fn render(top: &Top) -> String {
    let c = &top.cache;
    let mounts: String = top
        .mounts
        .iter()
        .map(|m| {
            format!(
                "mounted on {} through {}, idle polling {}, file data in {}\n{}",
                m.path,
                m.transport,
                m.idle_poll,
                m.data_cache,
                requests_line(&m.requests)
            )
        })
        .collect();
    let net = top.net.as_ref().map_or_else(String::new, net_line);
    format!(
        "vinod: up {:.0} s, {} clients; cache {}/{} frames ({} dirty), {} hits, {} misses\n{net}{mounts}\n{}\n{}\n{}",
        top.uptime_ms as f64 / 1e3,
        top.connections,
        c.resident,
        c.frames,
        c.dirty,
        c.hits,
        c.misses,
        process_table(&top.processes),
        graft_table(&top.grafts),
        user_table(&top.users)
    )
}

/// `vino top`: the daemon's processes and grafts, refreshed every second (or once).
pub fn top(socket: Option<PathBuf>, once: bool, json: bool, interval_ms: u64) -> Result<()> {
    let mut c = connect(socket)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&c.top()?)?);
        return Ok(());
    }
    if once {
        print!("{}", render(&c.top()?));
        return Ok(());
    }
    if interval_ms == 0 {
        bail!("--interval must be above 0");
    }
    let mut out = std::io::stdout();
    loop {
        let screen = render(&c.top()?);
        // Home the cursor and clear the screen, then draw.
        write!(out, "\x1b[H\x1b[2J{screen}")?;
        out.flush()?;
        std::thread::sleep(Duration::from_millis(interval_ms));
    }
}

/// `vino ps`: the programs running in the daemon that this user may see (its own; all if
/// privileged), with their accounts.
pub fn ps(socket: Option<PathBuf>, json: bool) -> Result<()> {
    let mut c = connect(socket)?;
    let top = c.top()?;
    let programs: Vec<&vino_client::ProcessTop> = top.processes.iter().filter(|p| p.program.is_some()).collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&programs)?);
        return Ok(());
    }
    let mut t = crate::table::Table::new(
        "Programs running in vinod",
        &[
            "PID",
            "UID",
            "TICKETS",
            "THREADS",
            "CPU s",
            "MEM MiB",
            "RES MiB",
            "SWAP MiB",
            "FAULTS",
            "SWAP-INS",
            "READ MiB",
            "WRITTEN MiB",
            "FILES",
            "HITS",
            "MISSES",
            "GRAFTS",
            "SOCKETS",
            "DIGEST",
            "PROGRAM",
        ],
    );
    for p in &programs {
        t.row([
            p.pid.to_string(),
            p.uid.to_string(),
            p.tickets.to_string(),
            p.threads.to_string(),
            format!("{:.2}", p.cpu_ns as f64 / 1e9),
            format!("{:.1}", p.memory_bytes as f64 / (1 << 20) as f64),
            format!("{:.1}", p.memory.resident as f64 / 256.0),
            format!("{:.1}", p.memory.swapped as f64 / 256.0),
            (p.memory.zero_faults + p.memory.minor_faults + p.memory.swap_ins).to_string(),
            p.memory.swap_ins.to_string(),
            format!("{:.1}", p.bytes_read as f64 / (1 << 20) as f64),
            format!("{:.1}", p.bytes_written as f64 / (1 << 20) as f64),
            p.open_files.to_string(),
            p.cache_hits.to_string(),
            p.cache_misses.to_string(),
            p.grafts.to_string(),
            p.sockets.len().to_string(),
            // The first 12 hex digits, as git shortens a hash.
            p.digest
                .as_deref()
                .map_or_else(String::new, |d| d.chars().take(12).collect()),
            p.program.clone().unwrap_or_default(),
        ]);
    }
    print!("{}", t.render());
    if programs.iter().any(|p| !p.sockets.is_empty()) {
        let mut s = crate::table::Table::new(
            "Their sockets",
            &["PID", "PROTO", "LOCAL", "REMOTE", "STATE", "PENDING"],
        );
        for p in &programs {
            for k in &p.sockets {
                s.row([
                    p.pid.to_string(),
                    k.proto.clone(),
                    k.local.clone(),
                    k.remote.clone().unwrap_or_default(),
                    k.state.clone(),
                    k.pending.to_string(),
                ]);
            }
        }
        print!("{}", s.render());
    }
    Ok(())
}

/// `vino kill PID`: kills a program running in the daemon.
/// `vino nice TICKETS PID` or `vino nice --user UID TICKETS`.
pub fn nice(socket: Option<PathBuf>, tickets: u32, pid: Option<u64>, user: Option<u32>) -> Result<()> {
    let mut c = connect(socket)?;
    match (user, pid) {
        (Some(uid), _) => c
            .set_user_tickets(uid, tickets)
            .with_context(|| format!("setting user {uid}'s tickets")),
        (None, Some(pid)) => c
            .set_tickets(Some(pid), tickets)
            .with_context(|| format!("setting process {pid}'s tickets")),
        (None, None) => anyhow::bail!("say whose tickets: a process id, or --user UID"),
    }
}

pub fn kill(socket: Option<PathBuf>, pid: u64) -> Result<()> {
    connect(socket)?
        .kill_program(pid)
        .with_context(|| format!("killing program {pid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_links_line_shows_its_way_out_when_it_has_a_rate() {
        let mut n = vino_client::NetTop {
            sent: 10,
            refused: 1,
            received: 7,
            martians: 2,
            shaped: None,
        };
        assert_eq!(
            net_line(&n),
            "host link: 10 packets out (1 refused), 7 in (2 martians); no rate\n"
        );
        n.shaped = Some(vino_client::EgressTop {
            queued: 12,
            sent: 10,
            dropped: 3,
            user_picks: 4,
            link_picks: 0,
            users_waiting: 1,
            waiting_bytes: 3000,
        });
        let line = net_line(&n);
        assert!(
            line.contains("12 packets queued, 10 sent, 3 dropped, 3000 bytes of 1 users waiting"),
            "{line}"
        );
        assert!(line.contains("decided 4 (users') and 0 (the link's)"), "{line}");
    }
}
