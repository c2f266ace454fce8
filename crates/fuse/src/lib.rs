//! The VINO kernel mounted through FUSE, so ordinary programs (cp, tar, git, sqlite) use it.
//!
//! Every request is served by system calls of a kernel [`vino_kernel::Process`]: one per
//! caller's credentials (uid, gid and supplementary groups; uid 0 privileged), made on first
//! use. Permission checks, graft events and per-file grafts (`file.compute_ra/<fd>` of the
//! descriptor a FUSE open makes) therefore apply exactly as for any other client of the kernel.
//! Requests name files by handle (node id = inode number, with its generation), never by path:
//! the mount's table ([`nodes`]) only counts Linux's lookups, each node holding its inode in the
//! kernel.
//!
//! The mount asks Linux to check permissions too (`default_permissions`): Linux walks cached
//! entries without asking, so only its own checks can hold once entries are cached. The
//! kernel's change notices keep those caches current when other clients change the file
//! system ([`invalidate`]).
//!
//! File data is cached by Linux in front of VINO's cache ([`MountConfig::page_cache`]): a
//! file is opened with `FOPEN_KEEP_CACHE`, so what Linux read stays valid from one open to the
//! next. A descriptor open for reading only reads through Linux's cache; one open for writing
//! is served directly (`FOPEN_DIRECT_IO` too), so VINO sees every write as it is made, and
//! Linux drops the cached pages a write covers. When another client of the kernel changes a file, the
//! change notice drops Linux's copy of its pages ([`invalidate`]). With the page cache off,
//! files are opened with `FOPEN_DIRECT_IO` and every read is served by VINO's cache, whose
//! policies grafts set. Locks (`fcntl`, and `flock`, which FUSE
//! passes the same way) go to the kernel's lock manager, shared with the socket's clients.
//! FIFOs and sockets made on the mount are served by Linux itself; device nodes may be made (by
//! root) but not used unless the mount allows devices ([`MountConfig::dev`]).
//!
//! Mounting needs `/dev/fuse` and root (the mount is made with `mount(2)` directly; no
//! `fusermount` helper or libfuse is used).

#![forbid(unsafe_code)]

pub mod bench;
mod invalidate;
pub mod nodes;
mod ops;
mod ring;
mod served;

pub use ring::{MIN_RING_DEPTH, Transport};
pub use served::Served;

use fuser::{Config, MountOption, Session, SessionACL};
use ops::{State, VinoFs};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use vino_kernel::{Kernel, Process};

/// How to mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountConfig {
    /// Let users other than the mounting one use the mount (`allow_other`); the kernel's own
    /// permission checks still apply to each of them.
    pub allow_other: bool,
    /// How long Linux may cache names and attributes. Other clients' changes reach Linux as
    /// invalidation notices at once, so this bounds staleness only for a notice dropped because
    /// the queue of notices was full.
    pub attr_ttl: Duration,
    /// The source shown in the mount table.
    pub fsname: String,
    /// Threads serving requests.
    pub threads: usize,
    /// Let device nodes on the mount be used (no `nodev`).
    pub dev: bool,
    /// Honour set-user-ID and set-group-ID bits when programs on the mount run (no `nosuid`).
    pub suid: bool,
    /// FUSE over io_uring or `/dev/fuse` (the default here; the daemon asks for io_uring where
    /// Linux offers it).
    pub transport: Transport,
    /// Ring entries per CPU: requests one CPU's callers may have in service at once (at least
    /// [`MIN_RING_DEPTH`]).
    pub ring_depth: usize,
    /// How long idle CPUs are kept from halting after the last request ([`vino_idlepoll`]):
    /// a program woken with its answer then finds its CPU running ([`IDLE_POLL`] by default;
    /// zero turns it off).
    pub idle_poll: Duration,
    /// Where the pollers may run: by default only in the idle cgroup, where they take no CPU
    /// time any other thread of the machine wants (none where there is no such group), and only
    /// while the mount is served over io_uring (over `/dev/fuse` they bring no gain);
    /// [`vino_idlepoll::Placement::AnyGroup`] also in the daemon's own group, where they hold
    /// its share against other groups' threads, and over either transport.
    pub idle_poll_placement: vino_idlepoll::Placement,
    /// Let Linux keep the mount's file data in its own page cache, in front of VINO's (the
    /// default): a read Linux holds costs no request, so warm reads run at the pace of any
    /// Linux file system. VINO's cache, and the policies grafted on it, then see only what
    /// Linux's cache misses. Off, files are opened for direct I/O and every read reaches
    /// VINO's cache, for measuring a grafted policy on every access.
    pub page_cache: bool,
    /// Other clients' changes waiting to be told to Linux, at most (a few MiB of names at
    /// worst; a change already waiting takes no second place; one user's changes hold at most
    /// half, and users' changes are sent in turn). Past it a change is not
    /// queued but its inode (a name's directory) marked in a fixed set of hashed buckets; once
    /// the queue is empty again, Linux is told to drop the attributes and data it holds of the
    /// nodes in marked buckets, and lost names stay stale for at most `attr_ttl`.
    pub notice_queue: usize,
    /// How long an unmount waits for the mount's users to leave (a shell's working directory,
    /// a file held open): past it the connection is aborted, they get `ENOTCONN`, and the
    /// unmount ends. No user holds the server (and a daemon's stop) longer.
    pub stop_grace: Duration,
}

/// The window [`MountConfig::idle_poll`] is tried with: longer than the gap between a
/// program's requests while it works through files (tens of microseconds), short enough that
/// the pollers stop soon after it is done.
pub const IDLE_POLL: Duration = Duration::from_micros(200);

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            allow_other: false,
            attr_ttl: Duration::from_secs(30),
            fsname: "vino".into(),
            threads: 2,
            dev: false,
            suid: false,
            transport: Transport::default(),
            ring_depth: 32,
            idle_poll: IDLE_POLL,
            idle_poll_placement: vino_idlepoll::Placement::IdleGroup,
            page_cache: true,
            notice_queue: 16384,
            stop_grace: Duration::from_secs(2),
        }
    }
}

fn session_config(config: &MountConfig) -> Config {
    assert!(config.threads >= 1, "a mount needs at least one thread");
    let mut c = Config::default();
    c.mount_options = vec![
        MountOption::FSName(config.fsname.clone()),
        MountOption::Subtype("vino".into()),
        MountOption::DefaultPermissions,
    ];
    if !config.dev {
        c.mount_options.push(MountOption::NoDev);
    }
    if !config.suid {
        c.mount_options.push(MountOption::NoSuid);
    }
    c.acl = if config.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    c.n_threads = Some(config.threads);
    c
}

type Serving = (Session<VinoFs>, Arc<State>, invalidate::Invalidator);

fn session(kernel: Arc<Kernel>, mountpoint: &Path, config: &MountConfig) -> io::Result<Serving> {
    let ring = ring::RingState::new(config.transport, config.ring_depth)?;
    let state = State::new(kernel.clone(), config, ring).map_err(|e| io::Error::other(e.to_string()))?;
    let state = Arc::new(state);
    let mut session = Session::new(VinoFs(state.clone()), mountpoint, &session_config(config))
        .map_err(|e| io::Error::new(e.kind(), format!("mounting VINO on {}: {e}", mountpoint.display())))?;
    let granted = state.ring.granted.load(std::sync::atomic::Ordering::Relaxed);
    if config.transport == Transport::Uring && !granted {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "Linux did not offer FUSE over io_uring for this mount",
        ));
    }
    if granted {
        let s = state.clone();
        session.set_extra_loops(Box::new(move |dispatcher| ring::start(dispatcher, &s)));
    }
    let invalidator = invalidate::start(kernel, &state, session.notifier(), config.notice_queue.max(1))?;
    Ok((session, state, invalidator))
}

/// A mounted kernel, served by background threads. Dropping it unmounts.
pub struct Mount {
    session: Option<fuser::BackgroundSession>,
    state: Arc<State>,
    invalidator: Option<invalidate::Invalidator>,
    mountpoint: PathBuf,
    stop_grace: Duration,
    /// The FUSE connection's number (the minor of the mount's device), to abort it by.
    connection: Option<u64>,
}

/// Mounts `kernel` on `mountpoint` and serves it in background threads.
pub fn mount(kernel: Arc<Kernel>, mountpoint: &Path, config: &MountConfig) -> io::Result<Mount> {
    let (session, state, invalidator) = session(kernel, mountpoint, config)?;
    let session = Some(session.spawn()?);
    // The ring's queues start on the session's thread; Linux holds requests until they have.
    if state.ring.granted.load(std::sync::atomic::Ordering::Relaxed) {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while state.ring.ring.get().is_none() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let connection = std::fs::metadata(mountpoint)
        .ok()
        .map(|m| nix::sys::stat::minor(std::os::unix::fs::MetadataExt::dev(&m)));
    Ok(Mount {
        session,
        state,
        invalidator: Some(invalidator),
        mountpoint: mountpoint.to_path_buf(),
        stop_grace: config.stop_grace,
        connection,
    })
}

/// Mounts `kernel` on `mountpoint` and serves it on this thread until it is unmounted (by
/// `umount` or `fusermount -u`).
pub fn serve_foreground(kernel: Arc<Kernel>, mountpoint: &Path, config: &MountConfig) -> io::Result<()> {
    let (session, state, invalidator) = session(kernel, mountpoint, config)?;
    let served = session.run();
    drop(invalidator);
    state.release_all();
    served
}

impl Mount {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The kernel processes made for the callers so far (one per set of credentials).
    pub fn processes(&self) -> Vec<Arc<Process>> {
        self.state.processes()
    }

    /// Which transport serves the mount: "io_uring, N queues" or "/dev/fuse".
    pub fn transport(&self) -> String {
        self.state.ring.describe()
    }

    /// Idle polling ([`MountConfig::idle_poll`]): "N pollers", or off and why.
    pub fn idle_poll(&self) -> String {
        self.state.describe_idle_poll()
    }

    /// How file data is cached ([`MountConfig::page_cache`]).
    pub fn data_cache(&self) -> &'static str {
        if self.state.page_cache() {
            "Linux's page cache in front of VINO's"
        } else {
            "VINO's only (direct I/O)"
        }
    }

    /// The requests served so far, by kind (most served first), and the daemon's time on them.
    pub fn served(&self) -> Vec<Served> {
        self.state.served.snapshot()
    }

    /// Requests served through the ring so far (none on `/dev/fuse`).
    pub fn ring_served(&self) -> u64 {
        self.state.ring.served()
    }

    /// Nodes Linux holds now (each holds its inode in the kernel), the root not counted.
    pub fn nodes(&self) -> usize {
        self.state.nodes.len()
    }

    /// True once the mount is gone from under its server (`umount`, `fusermount -u`): Linux
    /// ended the session and the serving thread returned.
    pub fn ended(&self) -> bool {
        self.session.as_ref().is_none_or(|s| s.guard.is_finished())
    }

    /// Unmounts, waits for the serving threads, closes what is still open and ends the mount's
    /// kernel processes. A mount still in use after [`MountConfig::stop_grace`] is cut off
    /// from its users (its connection aborted, then detached); where that cannot be done (not
    /// root), its serving threads are left to end with the last user and this says so.
    pub fn unmount(mut self) -> io::Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> io::Result<()> {
        if let Some(session) = self.session.take() {
            // Unmounted from outside already: only the thread is left to collect, and the path
            // is not unmounted again (something else may be mounted there by now).
            let joined = if session.guard.is_finished() {
                session.join()
            } else {
                match unmount_patiently(&self.mountpoint, self.stop_grace) {
                    Ok(true) => session.join(),
                    Ok(false) => self.cut_off(session),
                    // Not ours to unmount (a mount made through fusermount): fuser's way.
                    Err(_) => session.umount_and_join(),
                }
            };
            joined.map_err(|e| io::Error::new(e.kind(), format!("unmounting {}: {e}", self.mountpoint.display())))?;
        }
        self.invalidator.take();
        self.state.release_all();
        Ok(())
    }

    /// Ends a mount whose users stay: aborts its connection (their next access gets
    /// `ENOTCONN`; the serving threads see the end at once) and detaches it. Without an abort
    /// the serving threads are not waited for: they end when the last user leaves.
    fn cut_off(&self, session: fuser::BackgroundSession) -> io::Result<()> {
        let aborted = self
            .connection
            .ok_or_else(|| io::Error::other("its connection is not known"))
            .and_then(abort_connection);
        let _ = nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH);
        match aborted {
            Ok(()) => session.join(),
            Err(e) => Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!("still in use, detached, and not aborted ({e})"),
            )),
        }
    }
}

/// Unmounts `at`, trying again until `grace` has passed while Linux says it is busy: a user
/// may be leaving, and any fork of any thread of this process holds the descriptors it had
/// open on the mount until the child execs (they are close-on-exec), so an unmount racing a
/// fork elsewhere may find the mount busy for a moment. False if it is still busy.
fn unmount_patiently(at: &Path, grace: Duration) -> Result<bool, nix::errno::Errno> {
    use nix::errno::Errno;
    use nix::mount::{MntFlags, umount2};
    let until = std::time::Instant::now() + grace;
    loop {
        match umount2(at, MntFlags::empty()) {
            Err(Errno::EBUSY) if std::time::Instant::now() >= until => return Ok(false),
            Err(Errno::EBUSY) => std::thread::sleep(Duration::from_millis(10)),
            other => return other.map(|()| true),
        }
    }
}

/// Where Linux's FUSE control file system is (or is mounted, by root, when first needed).
const FUSECTL: &str = "/sys/fs/fuse/connections";

/// Aborts FUSE connection `minor` through the control file system, mounting it if it is not.
fn abort_connection(minor: u64) -> io::Result<()> {
    let dir = Path::new(FUSECTL).join(minor.to_string());
    if !dir.exists() {
        // Not mounted yet, most likely (the write below says if it still cannot be reached).
        let _ = nix::mount::mount(
            Some("fusectl"),
            FUSECTL,
            Some("fusectl"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        );
    }
    std::fs::write(dir.join("abort"), b"1").map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("vino-fuse: {e}");
        }
    }
}
