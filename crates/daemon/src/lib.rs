//! `vinod`: the VINO kernel served to other processes over a Unix socket.
//!
//! The daemon boots a [`vino_kernel::Kernel`] on a disk image (made on first use) and listens on
//! a Unix socket. Each connection is a kernel process whose credentials come from the socket
//! as it connected (`SO_PEERCRED`, and `SO_PEERGROUPS` for the supplementary groups, which
//! grant group permissions and chgrp); it is privileged if root or a member of the configured
//! group. A thread serves each connection; whatever ends it (the client closing,
//! dying, or sending something malformed), its process exits: files closed, grafts unloaded.
//! `SIGTERM` or `SIGINT` stops the daemon cleanly: programs are killed, clients disconnected,
//! the mount given `shutdown_grace` for its users to leave (then cut off from them), the cache
//! written back and the file system unmounted. No user can hold the stop up for longer.
//!
//! The protocol is `vino-proto`; `vino-client` is its client library.

pub mod config;
mod conn;
mod dispatch;
mod hangup;
mod peer;
mod program;
mod shm;
mod top;

pub use config::Config;
pub use dispatch::{Account, EVENTS_PER_WAIT};
pub use peer::Peer;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vino_blockdev::{BLOCK_SIZE, BlockDevice, FileDevice};
use vino_kernel::account::LimitsConfig;
use vino_kernel::{Kernel, KernelConfig, Pid, Resource};
use vino_proto::{ErrorReply, Response, errno};

/// Why the daemon could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DaemonError(pub String);

type Result<T> = std::result::Result<T, DaemonError>;

fn err(what: impl std::fmt::Display) -> DaemonError {
    DaemonError(what.to_string())
}

/// A connected client.
pub(crate) struct ConnInfo {
    pub peer: Peer,
    pub client: String,
    pub account: Arc<Account>,
    /// A handle on the socket, to disconnect the client at shutdown.
    pub stream: UnixStream,
}

/// The daemon's shared state.
pub struct Daemon {
    kernel: Arc<Kernel>,
    config: Config,
    privileged_gid: Option<u32>,
    conns: Mutex<HashMap<Pid, ConnInfo>>,
    /// Connections that have not said Hello yet (closed at once by a stop), by a number.
    greeting: Mutex<HashMap<u64, UnixStream>>,
    next_greeting: std::sync::atomic::AtomicU64,
    /// Programs running in the daemon (`vino run`), by their kernel process.
    programs: Mutex<HashMap<Pid, program::Running>>,
    /// Compiled programs, by their module's hash.
    program_cache: program::ProgramCache,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stopping: AtomicBool,
    started: Instant,
    /// The listening socket, shut down to wake the accept loop at shutdown (none for a daemon
    /// [`Daemon::in_process`]).
    listener_fd: Option<RawFd>,
    /// FUSE mounts of the file system this daemon serves (unmounted at shutdown).
    mounts: Mutex<Vec<vino_fuse::Mount>>,
    /// Connection threads polling for their next request now, and how many may.
    spinning: AtomicUsize,
    max_spinning: usize,
    /// Clients in lock waits, watched for hanging up.
    hangups: hangup::HangupWatch,
}

/// A running daemon: its accept loop in a thread. [`Handle::shutdown`] stops it.
pub struct Handle {
    daemon: Arc<Daemon>,
    acceptor: Option<JoinHandle<()>>,
}

/// Opens the image, or makes it (with a fresh file system) if it does not exist.
fn open_image(config: &Config) -> Result<Arc<dyn BlockDevice>> {
    let path = &config.image;
    if path.exists() {
        let dev = FileDevice::open(path).map_err(|e| err(format!("opening {}: {e}", path.display())))?;
        return Ok(Arc::new(dev));
    }
    let bytes = config.image_bytes().map_err(err)?.div_ceil(BLOCK_SIZE as u64) * BLOCK_SIZE as u64;
    let dev = FileDevice::create(path, bytes).map_err(|e| err(format!("creating {}: {e}", path.display())))?;
    vino_kernel::storage::mkfs(&dev, &vino_kernel::storage::MkfsOptions::default())
        .map_err(|e| err(format!("making a file system on {}: {e}", path.display())))?;
    Ok(Arc::new(dev))
}

/// Binds the socket, replacing a stale one (refusing if a daemon answers there).
fn bind(path: &Path, mode: u32) -> Result<UnixListener> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(err(format!("a daemon already listens on {}", path.display())));
        }
        std::fs::remove_file(path).map_err(|e| err(format!("removing stale {}: {e}", path.display())))?;
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| err(format!("creating {}: {e}", dir.display())))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| err(format!("binding {}: {e}", path.display())))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| err(format!("setting the mode of {}: {e}", path.display())))?;
    Ok(listener)
}

/// The kernel's configuration from the daemon's.
fn kernel_config(config: &Config) -> Result<KernelConfig> {
    Ok(KernelConfig {
        cache_frames: config.cache_frames().map_err(err)?,
        dirty_percent: config.dirty_percent,
        cache_warm_ahead: config.cache_warm_ahead,
        limits: connection_limits(config, config.limits.resolve().map_err(err)?),
        event_queue_max: config.event_queue_max,
        protect: config.protect().map_err(err)?,
        mount: vino_kernel::storage::MountOptions {
            quota: config.quota().map_err(err)?,
            commit_interval: Some(config.commit_interval),
            ..Default::default()
        },
        net: vino_kernel::NetConfig {
            host: config.net.resolve().map_err(err)?,
            ..Default::default()
        },
        ..Default::default()
    })
}

/// The connection keys as the kernel's limits on [`Resource::Connections`]: the kernel charges
/// each connection to its user (see [`Kernel::connect`]).
fn connection_limits(config: &Config, mut limits: LimitsConfig) -> LimitsConfig {
    let r = Resource::Connections;
    limits.total.set(r, config.max_connections as u64);
    limits.user.set(r, config.max_connections_per_user as u64);
    limits.root_reserved.set(r, config.root_reserved_connections as u64);
    limits
}

impl Daemon {
    fn new(kernel: Arc<Kernel>, config: Config, privileged_gid: Option<u32>, listener_fd: Option<RawFd>) -> Daemon {
        Daemon {
            kernel,
            config,
            privileged_gid,
            conns: Mutex::new(HashMap::new()),
            greeting: Mutex::new(HashMap::new()),
            next_greeting: Default::default(),
            programs: Mutex::new(HashMap::new()),
            program_cache: program::ProgramCache::default(),
            threads: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
            started: Instant::now(),
            listener_fd,
            mounts: Mutex::new(Vec::new()),
            spinning: AtomicUsize::new(0),
            // Leave a CPU to the clients (which poll for their answers too).
            max_spinning: std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1)),
            hangups: hangup::HangupWatch::new(),
        }
    }

    /// A daemon without a socket or threads of its own, on a kernel booted by the caller
    /// (`config.image` and `config.socket` are not used): connections are handed to it with
    /// [`Daemon::serve`]. The protocol fuzzer drives the whole request path this way, from
    /// frame to system call and back, in one process.
    pub fn in_process(kernel: Arc<Kernel>, config: Config) -> Result<Arc<Daemon>> {
        let privileged_gid = config.privileged_gid().map_err(err)?;
        Ok(Arc::new(Daemon::new(kernel, config, privileged_gid, None)))
    }

    /// The kernel configuration a daemon with `config` boots (for [`Daemon::in_process`]).
    pub fn kernel_config(config: &Config) -> Result<KernelConfig> {
        kernel_config(config)
    }

    /// Serves one connection from `peer` on the calling thread until it ends, as the accept
    /// loop serves one from the socket: a connection slot first (refused with `EUSERS` past the
    /// limits), then the Hello exchange and the requests.
    pub fn serve(&self, mut stream: UnixStream, peer: Peer) {
        let _slot = match self.kernel.connect(peer.uid) {
            Ok(slot) => slot,
            Err(e) => {
                let refusal = Response::Error(ErrorReply::new(errno::EUSERS, e.message));
                let _ = vino_proto::write_frame(&mut stream, &refusal);
                return;
            }
        };
        conn::serve(self, stream, peer);
    }
}

/// Starts a daemon: boots the kernel on the image and serves the socket from a thread.
pub fn start(config: Config) -> Result<Handle> {
    let privileged_gid = config.privileged_gid().map_err(err)?;
    config::parse_size(&config.program_memory).map_err(|e| err(format!("program_memory: {e}")))?;
    let device = open_image(&config)?;
    let kconfig = kernel_config(&config)?;
    let kernel =
        Kernel::boot(device, &kconfig).map_err(|e| err(format!("booting on {}: {e}", config.image.display())))?;
    let listener = match bind(&config.socket, config.socket_mode) {
        Ok(l) => l,
        Err(e) => {
            let _ = kernel.shutdown();
            return Err(e);
        }
    };
    let listener_fd = Some(std::os::fd::AsRawFd::as_raw_fd(&listener));
    let daemon = Arc::new(Daemon::new(kernel, config, privileged_gid, listener_fd));
    if let Some(at) = daemon.config.mount.clone()
        && let Err(e) = daemon.mount(&at)
    {
        drop(listener);
        let _ = std::fs::remove_file(&daemon.config.socket);
        let _ = daemon.kernel.shutdown();
        return Err(err(e.message));
    }
    let d = daemon.clone();
    let acceptor = std::thread::Builder::new()
        .name("vinod-accept".into())
        .spawn(move || d.accept(listener))
        .map_err(|e| err(format!("starting the accept thread: {e}")))?;
    Ok(Handle {
        daemon,
        acceptor: Some(acceptor),
    })
}

/// Runs a daemon in the foreground until SIGTERM or SIGINT, then stops it cleanly.
pub fn run(config: Config) -> Result<()> {
    serve(config, false)
}

/// [`run`] for `vino mount IMAGE DIR`: also stops, as a FUSE file system's own process does,
/// when its mount goes (`umount`, `fusermount -u`, `vino unmount`).
pub fn run_mounted(config: Config) -> Result<()> {
    serve(config, true)
}

fn serve(config: Config, until_unmounted: bool) -> Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    // Blocked before any thread starts, so that every thread inherits the mask and the signal
    // waits for `wait` below.
    signals
        .thread_block()
        .map_err(|e| err(format!("blocking signals: {e}")))?;
    // Per process, so here where the daemon owns the process rather than in `start`, which
    // benchmarks and tests call inside their own.
    if !config.huge_pages {
        nix::sys::prctl::set_thp_disable(true).map_err(|e| err(format!("turning huge pages off: {e}")))?;
    }
    let handle = start(config)?;
    wait_for_end(&signals, || until_unmounted && handle.daemon.mounts_gone())?;
    handle.shutdown()
}

/// Waits for one of `signals`, or until `gone()` says there is nothing left to serve (asked
/// five times a second).
fn wait_for_end(signals: &nix::sys::signal::SigSet, gone: impl Fn() -> bool) -> Result<()> {
    use nix::errno::Errno;
    let timeout = libc::timespec {
        tv_sec: 0,
        tv_nsec: 200_000_000,
    };
    loop {
        // SAFETY: a valid signal set and timeout; the signal's details are not asked for.
        let r = unsafe { libc::sigtimedwait(signals.as_ref(), std::ptr::null_mut(), &timeout) };
        if r > 0 {
            return Ok(());
        }
        match Errno::last() {
            Errno::EAGAIN if gone() => return Ok(()),
            Errno::EAGAIN | Errno::EINTR => {}
            e => return Err(err(format!("waiting for a signal: {e}"))),
        }
    }
}

impl Handle {
    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.daemon.kernel
    }

    pub fn socket(&self) -> &Path {
        &self.daemon.config.socket
    }

    /// The daemon's state (for `top` without a connection).
    pub fn daemon(&self) -> &Arc<Daemon> {
        &self.daemon
    }

    /// Stops accepting, kills every program, disconnects every client (their processes exit),
    /// unmounts (cutting off users still in the mount after `shutdown_grace`) and writes
    /// everything back.
    pub fn shutdown(mut self) -> Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> Result<()> {
        let Some(acceptor) = self.acceptor.take() else {
            return Ok(());
        };
        let d = &self.daemon;
        let until = Instant::now() + d.config.shutdown_grace;
        d.stopping.store(true, Ordering::SeqCst);
        // Programs, detached or not, and any started from now on: none may hold the stop up.
        d.kernel.kill_all();
        // Wakes the accept loop (the listener stays open until the loop ends, so the fd is valid).
        if let Some(fd) = d.listener_fd {
            let _ = nix::sys::socket::shutdown(fd, nix::sys::socket::Shutdown::Both);
        }
        let _ = acceptor.join();
        d.disconnect_all();
        d.join_connections(until);
        for m in std::mem::take(&mut *d.mounts.lock()) {
            let at = m.mountpoint().display().to_string();
            if let Err(e) = m.unmount() {
                eprintln!("vinod: unmounting {at}: {e}");
            }
        }
        let _ = std::fs::remove_file(&d.config.socket);
        d.kernel
            .shutdown()
            .map_err(|e| err(format!("unmounting {}: {e}", d.config.image.display())))
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("vinod: {e}");
        }
    }
}

/// A connection before its Hello: forgotten by the daemon when dropped.
pub(crate) struct Greeting<'a> {
    daemon: &'a Daemon,
    id: u64,
}

impl Drop for Greeting<'_> {
    fn drop(&mut self) {
        self.daemon.greeting.lock().remove(&self.id);
    }
}

impl Daemon {
    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.kernel
    }

    /// Kills program `pid` for `caller`: its own, or any if privileged; `ESRCH` for a program
    /// that does not run or is not the caller's to see.
    pub fn kill_program(
        &self,
        pid: Pid,
        caller: &vino_kernel::Credentials,
    ) -> std::result::Result<(), vino_proto::ErrorReply> {
        match self.programs.lock().get(&pid) {
            Some(p) if caller.privileged || p.uid == caller.uid => {
                p.kill();
                Ok(())
            }
            _ => Err(vino_proto::ErrorReply::new(
                vino_proto::errno::ESRCH,
                format!("no program {pid} of yours runs"),
            )),
        }
    }

    /// Programs compiled since the daemon started (a program run again comes from a cache).
    pub fn programs_compiled(&self) -> u64 {
        self.program_cache.compiled()
    }

    /// Linear memory a program run in the daemon may grow to (checked at start).
    pub fn program_memory(&self) -> usize {
        config::parse_size(&self.config.program_memory).map_or(256 << 20, |n| n as usize)
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Closes every connection, those still to say Hello included (they would otherwise hold
    /// the stop for their Hello timeout).
    fn disconnect_all(&self) {
        for s in self.greeting.lock().values() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for c in self.conns.lock().values() {
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Waits for the connections' threads to end, until `until` (or a moment more, for those
    /// just told to): one that does not is left behind rather than hold the stop.
    fn join_connections(&self, until: Instant) {
        let threads = std::mem::take(&mut *self.threads.lock());
        let until = until.max(Instant::now() + Duration::from_millis(500));
        while threads.iter().any(|t| !t.is_finished()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let (done, busy): (Vec<_>, Vec<_>) = threads.into_iter().partition(|t| t.is_finished());
        for t in done {
            let _ = t.join();
        }
        if !busy.is_empty() {
            eprintln!(
                "vinod: {} connection threads still busy at shutdown, not waited for",
                busy.len()
            );
        }
    }

    /// Registers a connection that has yet to say Hello, for [`Daemon::disconnect_all`];
    /// `None` if the daemon is stopping (the connection then ends).
    pub(crate) fn greeting(&self, stream: &UnixStream) -> Option<Greeting<'_>> {
        let id = self.next_greeting.fetch_add(1, Ordering::Relaxed);
        self.greeting.lock().insert(id, stream.try_clone().ok()?);
        let g = Greeting { daemon: self, id };
        // After registering: a stop either sees this connection or is seen here.
        (!self.stopping()).then_some(g)
    }

    /// Mounts the file system at `at` through FUSE: programs that know nothing of VINO use it
    /// there, through the same kernel (its cache, its grafts) as the daemon's clients.
    pub fn mount(&self, at: &Path) -> std::result::Result<(), ErrorReply> {
        self.mount_with(at, self.config.mount_transport.fuse(), self.config.mount_page_cache)
    }

    /// [`Daemon::mount`] over a given transport (as the `mount_transport` key says), with
    /// Linux's page cache in front or not (`mount_page_cache`).
    pub fn mount_with(
        &self,
        at: &Path,
        transport: vino_fuse::Transport,
        page_cache: bool,
    ) -> std::result::Result<(), ErrorReply> {
        if transport != vino_fuse::Transport::DevFuse {
            offer_uring();
        }
        let config = vino_fuse::MountConfig {
            allow_other: true,
            fsname: format!("vino:{}", self.config.socket.display()),
            transport,
            ring_depth: self.config.mount_ring_depth,
            page_cache,
            // Unset, the mount's default: pollers only in the idle cgroup. Set, the
            // administrator's choice, wherever they can run.
            idle_poll: self
                .config
                .mount_idle_poll_us
                .map_or(vino_fuse::IDLE_POLL, Duration::from_micros),
            idle_poll_placement: match self.config.mount_idle_poll_us {
                None => vino_idlepoll::Placement::IdleGroup,
                Some(_) => vino_idlepoll::Placement::AnyGroup,
            },
            stop_grace: self.config.shutdown_grace,
            ..Default::default()
        };
        let m = vino_fuse::mount(self.kernel.clone(), at, &config)
            .map_err(|e| ErrorReply::new(e.raw_os_error().unwrap_or(errno::EIO), e.to_string()))?;
        self.mounts.lock().push(m);
        Ok(())
    }

    /// Each FUSE mount this daemon made: where, which transport serves it, its idle polling,
    /// how it caches file data, and (`with_requests`) the requests it served.
    pub fn mounts(&self, with_requests: bool) -> Vec<vino_proto::MountTop> {
        self.mounts
            .lock()
            .iter()
            .map(|m| vino_proto::MountTop {
                path: m.mountpoint().display().to_string(),
                transport: m.transport(),
                idle_poll: m.idle_poll(),
                data_cache: m.data_cache().to_string(),
                requests: if with_requests {
                    m.served()
                        .into_iter()
                        .map(|s| vino_proto::RequestTop {
                            op: s.op.to_string(),
                            count: s.count,
                            ns: u64::try_from(s.time.as_nanos()).unwrap_or(u64::MAX),
                        })
                        .collect()
                } else {
                    Vec::new()
                },
            })
            .collect()
    }

    /// Unmounts a FUSE mount this daemon made.
    pub fn unmount(&self, at: &Path) -> std::result::Result<(), ErrorReply> {
        let mut mounts = self.mounts.lock();
        let Some(i) = mounts.iter().position(|m| m.mountpoint() == at) else {
            return Err(ErrorReply::new(
                errno::EINVAL,
                format!("{}: not mounted by this daemon", at.display()),
            ));
        };
        let m = mounts.remove(i);
        drop(mounts);
        m.unmount()
            .map_err(|e| ErrorReply::new(e.raw_os_error().unwrap_or(errno::EIO), e.to_string()))
    }

    /// True when none of this daemon's FUSE mounts is still mounted.
    pub fn mounts_gone(&self) -> bool {
        self.mounts.lock().iter().all(|m| m.ended())
    }

    /// Where this daemon has mounted the file system.
    pub fn mountpoints(&self) -> Vec<PathBuf> {
        self.mounts
            .lock()
            .iter()
            .map(|m| m.mountpoint().to_path_buf())
            .collect()
    }

    /// Takes one of the few places for a connection thread to poll for its next request.
    pub(crate) fn try_spin(&self) -> bool {
        self.spinning
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_spinning).then_some(n + 1)
            })
            .is_ok()
    }

    pub(crate) fn end_spin(&self) {
        self.spinning.fetch_sub(1, Ordering::AcqRel);
    }

    /// Clients connected now (their Hello done).
    pub fn connections(&self) -> usize {
        self.conns.lock().len()
    }

    fn accept(self: Arc<Self>, listener: UnixListener) {
        for stream in listener.incoming() {
            if self.stopping() {
                break;
            }
            let Ok(mut stream) = stream else { continue };
            let refuse = |stream: &mut UnixStream, code, why| {
                let _ = vino_proto::write_frame(stream, &Response::Error(ErrorReply::new(code, why)));
            };
            // Who connected, from the socket, before anything is read from it.
            let peer = match Peer::of(&stream) {
                Ok(p) => p,
                Err(e) => {
                    refuse(&mut stream, errno::EIO, format!("cannot tell who connected: {e}"));
                    continue;
                }
            };
            let uid = peer.uid;
            // Its place, given back when its thread ends (or if it cannot start).
            let slot = match self.kernel.connect(uid) {
                Ok(slot) => slot,
                Err(e) => {
                    refuse(&mut stream, errno::EUSERS, e.message);
                    continue;
                }
            };
            let d = self.clone();
            let spawned = std::thread::Builder::new().name("vinod-conn".into()).spawn(move || {
                let _slot = slot;
                conn::serve(&d, stream, peer);
            });
            let mut threads = self.threads.lock();
            threads.retain(|t| !t.is_finished());
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    eprintln!("vinod: cannot start a connection thread: {e}");
                }
            }
        }
    }
}

/// The socket path a CLI should use: the flag, else `$VINO_SOCKET`, else the default.
pub fn socket_path(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| std::env::var_os("VINO_SOCKET").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(vino_proto::DEFAULT_SOCKET))
}

/// FUSE over io_uring is a host-wide switch, off by default: a daemon run as root turns it on
/// (it affects only mounts made from then on) and says so; otherwise it says how, once.
fn offer_uring() {
    use vino_fuse_uring::Availability;
    static SAID: std::sync::Once = std::sync::Once::new();
    if vino_fuse_uring::availability() != Availability::Disabled {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    match root.then(vino_fuse_uring::enable) {
        Some(Ok(())) => eprintln!(
            "vinod: turned FUSE over io_uring on for this host ({} = Y)",
            vino_fuse_uring::parameter()
        ),
        _ => SAID.call_once(|| {
            eprintln!(
                "vinod: FUSE over io_uring is off on this host; the mount uses /dev/fuse (as root: echo Y > {})",
                vino_fuse_uring::parameter()
            )
        }),
    }
}
