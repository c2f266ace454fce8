//! The daemon's configuration (a TOML file; every key optional).
//!
//! ```toml
//! socket = "/run/vino/vinod.sock"
//! image = "/var/lib/vino/disk.img"
//! image_size = "1G"          # made with this size on first use
//! cache_size = "12%"          # the page cache: a size ("2G") or a share of the machine's memory
//! cache_frames = 262144       # or the same as a count of 4 KiB frames (cache_size wins)
//! dirty_percent = 25          # of the cache one process (a mount's user) may keep dirty;
//!                             # past half of it, its pages are written behind it
//! cache_warm_ahead = 8192     # free frames made ahead of need in the background (0: off)
//! privileged_group = "vino"   # members may graft global graftpoints (a name or a gid)
//! max_connections = 256
//! max_connections_per_user = 64   # for each uid but root's
//! root_reserved_connections = 8   # of max_connections, kept for root
//! frame_timeout = 10          # seconds a request may take to arrive once it has begun
//! commit_interval = 5         # seconds at most between journal commits (work not fsynced that a crash may lose)
//! shutdown_grace = 2          # seconds a stop waits for the mount's users to leave before cutting them off
//! event_queue_max = 4096      # events queued per listener before an overflow marker
//! socket_mode = 0o666
//! user_block_quota = "64M"    # disk space of each uid but root ("unlimited"; default: half)
//! user_inode_quota = 10000    # inodes of each uid but root ("unlimited"; default: half)
//! root_reserve_percent = 5    # of the disk's blocks and inodes, for root only
//! user_link_quota = 10000     # names beyond the first of each uid's files ("unlimited"; default: one per quota block)
//! protected_hardlinks = 1     # Linux's fs.protected_* rules, for every entry point (0: off)
//! protected_symlinks = 1
//! protected_fifos = 1         # 2: group-writable sticky directories too
//! protected_regular = 1
//! program_memory = "256M"     # linear memory a program run in the daemon may grow to
//! mount_transport = "auto"    # FUSE over "io_uring" or "dev_fuse"; auto: io_uring where offered
//! mount_ring_depth = 32       # io_uring entries per CPU, each with a 1 MiB buffer (at least 4)
//! mount_idle_poll_us = 200    # idle CPUs kept running this long after a mount request (0: off)
//! mount_page_cache = true     # Linux caches the mount's file data in front of VINO's cache
//! huge_pages = false          # let Linux back the daemon's memory with transparent huge pages
//!
//! [limits]                    # per principal; the defaults are vino_account's
//! descriptors_per_process = 1024
//! descriptors_per_user = 16384
//! grafts_per_user = 64
//! grafts_total = 4096
//! graft_memory_per_user = "256M"
//! graft_memory_total = "4G"
//! graft_code_per_user = "64M"
//! bindings_per_user = 64        # file-wide and dir.access graft bindings
//! subscriptions_per_user = 256  # event kinds subscribed, over all of a user's processes
//! request_buffers_per_user = "128M"
//! compiles_per_user = 2
//! control_calls_per_user = 1
//! lock_waits_per_user = 64      # blocking lock waits through the mount (each holds a thread)
//! programs_per_user = 4         # programs running in the daemon (`vino run --socket`)
//! programs_total = 16
//! threads_per_user = 64         # threads of those programs
//! threads_total = 512
//! program_memory_per_user = "2G" # linear memory of those programs (each at most 1 GiB)
//! program_memory_total = "8G"
//! resident_per_process = "512M" # program memory a process keeps in frames (the rest is paged)
//! resident_total = "2G"         # frames of all programs' memory together
//! swap_per_user = "1G"          # swap holding a user's programs' pages
//! swap_total = "4G"             # the swap area on the file system grows to this at most
//! event_filter_bytes_per_user = "4M" # names and inodes event subscribers filter on
//! event_filter_bytes_total = "256M"
//! lock_records_per_user = 16384  # byte-range locks held, over all of a user's processes
//! lock_records_total = 1048576
//! sockets_per_user = 1024       # network sockets (a listener's pool slots, connections)
//! sockets_total = 16384
//! socket_memory_per_user = "512M" # their send and receive buffers (256 KiB each per socket)
//! socket_memory_total = "4G"
//! root_reserve_percent = 5      # of each total, for root only
//!
//! [net]                       # the link to the host's network (none: VINO's loopback only)
//! link = "vino0"              # a TUN device, made at start and gone when the daemon ends
//! address = "10.77.0.2/24"    # VINO's address on it, and the network it reaches directly
//! host_address = "10.77.0.1"  # the host's side of the device, set by the daemon (or by root)
//! gateway = "10.77.0.1"       # where packets for beyond the network go (default: nowhere)
//! egress = ["10.77.0.0/24"]   # where users but root may send (default: nowhere)
//! mtu = 1500
//! rate_mbit = 100             # the way out's rate: VINO's queue shares it between users by
//!                             # their CPU tickets, in the order of net.pick_packet grafts
//!                             # (default: none; packets go out as they are sent)
//! queue_per_user = "1M"       # bytes a user may have waiting for it (default: 50 ms of it)
//! ```

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use vino_kernel::account::{LimitsConfig, Resource};

/// The `mount_transport` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MountTransport {
    #[default]
    Auto,
    IoUring,
    DevFuse,
}

impl MountTransport {
    pub fn fuse(self) -> vino_fuse::Transport {
        match self {
            MountTransport::Auto => vino_fuse::Transport::Auto,
            MountTransport::IoUring => vino_fuse::Transport::Uring,
            MountTransport::DevFuse => vino_fuse::Transport::DevFuse,
        }
    }
}

/// How the daemon runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub socket: PathBuf,
    pub image: PathBuf,
    /// Size of an image made on first use, e.g. `256M`, `1G`.
    pub image_size: String,
    /// Frames (4 KiB) of the page cache; by default [`DEFAULT_CACHE_PERCENT`] of the machine's
    /// memory. Frames are made as the cache fills, so a large cache costs nothing until used.
    pub cache_frames: usize,
    /// The page cache as a size (`"2G"`) or a share of the machine's memory (`"25%"`); when
    /// set, it decides instead of `cache_frames`.
    pub cache_size: Option<String>,
    /// Percent of the cache one process's writes may keep dirty (a user of the mount is one
    /// process); past it the writer waits for its own pages to be written.
    pub dirty_percent: u8,
    /// Free frames of the cache a background thread keeps made (their memory touched) ahead
    /// of need, so that the cache's first fill costs writers no first-touch page faults
    /// (`CacheConfig::warm_ahead`); 0 makes each frame on first need.
    pub cache_warm_ahead: usize,
    /// A group (name or number) whose members are privileged, as root is.
    pub privileged_group: Option<String>,
    /// Connections at once, all users together.
    pub max_connections: usize,
    /// Connections at once of any one uid but root.
    pub max_connections_per_user: usize,
    /// Of `max_connections`, how many only root may use: the users other than root together
    /// have `max_connections - root_reserved_connections`.
    pub root_reserved_connections: usize,
    /// How long a frame may take to arrive once its first byte has (seconds in the file, e.g.
    /// `10` or `2.5`); a connection that takes longer is closed.
    #[serde(deserialize_with = "seconds")]
    pub frame_timeout: Duration,
    /// Longest time between journal commits while anything is uncommitted (seconds, as
    /// `frame_timeout`): what a crash may lose of work nobody fsynced. Commits run on the file
    /// system's own thread, off the requests' path ([`vino_kernel::storage::MountOptions::commit_interval`]).
    #[serde(deserialize_with = "seconds")]
    pub commit_interval: Duration,
    /// How long a stop (SIGTERM) waits for the mount's users to leave (seconds, as
    /// `frame_timeout`). Programs are killed and clients disconnected at once; a mount still
    /// in use after this is cut off (its users get `ENOTCONN`), so the daemon ends within
    /// about this long whatever its users do.
    #[serde(deserialize_with = "seconds")]
    pub shutdown_grace: Duration,
    /// Permission bits of the socket (who may connect).
    pub socket_mode: u32,
    /// Largest shared memory a client may pass.
    pub max_shm: u64,
    /// Where to mount the file system through FUSE (for unmodified programs), if anywhere.
    pub mount: Option<PathBuf>,
    /// How the mount's requests travel: `auto` (io_uring where Linux offers it; a daemon run
    /// as root turns the host's switch on), `io_uring` (or fail), `dev_fuse`.
    pub mount_transport: MountTransport,
    /// Entries of each CPU's io_uring queue: requests that CPU's callers may have in service at
    /// once. Each holds a 1 MiB buffer (touched as used), so a machine with many CPUs may want
    /// fewer (at least [`vino_fuse::MIN_RING_DEPTH`]).
    pub mount_ring_depth: usize,
    /// Microseconds idle CPUs are kept from halting after a request on the mount, by threads
    /// at idle priority (`vino_idlepoll`): a program woken with its answer then does not wait
    /// for its CPU to wake. Unset (the default): 200 over io_uring, by threads in an idle
    /// cgroup where the daemon can make one (root, cgroup v1's CPU controller), where they
    /// take no CPU time any other thread wants; none elsewhere, nor over `/dev/fuse`. Set: that
    /// long (0: off) over either transport, in the daemon's own group where there is no idle
    /// one, where they hold the daemon's share of the CPUs against other groups' threads (see
    /// docs/results/daemon.md, "Idle polling").
    pub mount_idle_poll_us: Option<u64>,
    /// Let Linux cache the mount's file data in its page cache, in front of VINO's cache (the
    /// default): warm reads then cost no request. False opens every file on the mount for
    /// direct I/O, so every read reaches VINO's cache and the policies grafted on it.
    pub mount_page_cache: bool,
    /// Events queued for one listener (each of its user-level and graft queues) before the
    /// rest are dropped behind an overflow marker.
    pub event_queue_max: usize,
    /// What each process and user may make the kernel hold.
    pub limits: LimitsFile,
    /// The `[net]` table.
    pub net: NetFile,
    /// Disk space (a size, or `unlimited`) each uid but root may hold in the file system; by
    /// default half of what root's reserve leaves (see [`vino_kernel::storage::Quota`]).
    pub user_block_quota: Option<Amount>,
    /// Inodes (a count, or `unlimited`) each uid but root may hold; by default half.
    pub user_inode_quota: Option<Amount>,
    /// Percent of the disk's blocks and inodes only root may allocate (at most 50).
    pub root_reserve_percent: u8,
    /// Names beyond the first (hard links) the files of each uid but root may have (a count,
    /// or `unlimited`); by default one per block of its block quota (see [`vino_kernel::storage::Quota`]).
    pub user_link_quota: Option<Amount>,
    /// Linux's `fs.protected_hardlinks` (0 or 1; see [`vino_kernel::Protected`]).
    pub protected_hardlinks: u8,
    /// Linux's `fs.protected_symlinks` (0 or 1).
    pub protected_symlinks: u8,
    /// Linux's `fs.protected_fifos` (0, 1 or 2).
    pub protected_fifos: u8,
    /// Linux's `fs.protected_regular` (0, 1 or 2).
    pub protected_regular: u8,
    /// Linear memory each program run in the daemon may grow to (`vino run --socket`).
    pub program_memory: String,
    /// Let Linux back the daemon's memory (the page cache's frames above all) with transparent
    /// huge pages. Off by default: the cache's frames are 4 KiB and touched one at a time, and
    /// on a virtual machine each first touch of a huge page waits for the host to back 2 MiB
    /// (a streaming `dd` onto a fresh mount spent most of its time there).
    pub huge_pages: bool,
}

/// A quota in the configuration: a number, a size such as `"64M"`, or `"unlimited"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Amount {
    Count(u64),
    Text(String),
}

impl Amount {
    /// The amount, [`vino_kernel::storage::UNLIMITED`] for `unlimited`; a text is parsed with `parse`.
    fn resolve(&self, key: &str, parse: impl Fn(&str) -> Result<u64, String>) -> Result<u64, String> {
        match self {
            Amount::Count(n) => Ok(*n),
            Amount::Text(t) if t.trim().eq_ignore_ascii_case("unlimited") => Ok(vino_kernel::storage::UNLIMITED),
            Amount::Text(t) => parse(t).map_err(|e| format!("{key}: {e}")),
        }
    }
}

/// Which table of [`LimitsConfig`] a key sets.
#[derive(Clone, Copy)]
enum Scope {
    Process,
    User,
    Total,
}

impl Scope {
    fn of(self, l: &mut LimitsConfig) -> &mut vino_kernel::account::Table {
        match self {
            Scope::Process => &mut l.process,
            Scope::User => &mut l.user,
            Scope::Total => &mut l.total,
        }
    }
}

/// The `[net]` table: the host link, if root attaches one.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetFile {
    pub link: Option<String>,
    pub address: Option<String>,
    pub host_address: Option<String>,
    pub gateway: Option<String>,
    pub egress: Vec<String>,
    pub mtu: Option<usize>,
    pub rate_mbit: Option<u64>,
    pub queue_per_user: Option<String>,
}

impl NetFile {
    /// The host link's configuration (`None` without `link`).
    pub fn resolve(&self) -> Result<Option<vino_kernel::HostConfig>, String> {
        use vino_kernel::HostConfig;
        let Some(device) = &self.link else {
            let stray = self.address.is_some() || self.host_address.is_some() || self.gateway.is_some();
            let shaped = self.rate_mbit.is_some() || self.queue_per_user.is_some();
            if stray || shaped || !self.egress.is_empty() || self.mtu.is_some() {
                return Err("[net]: its keys need link (the TUN device to attach)".into());
            }
            return Ok(None);
        };
        let net = |e: String| format!("[net]: {e}");
        let (address, prefix) = HostConfig::parse_prefix(
            self.address
                .as_deref()
                .ok_or("[net]: link needs address (such as \"10.77.0.2/24\")")?,
        )
        .map_err(net)?;
        let single = |key: &str, v: &Option<String>| -> Result<Option<std::net::Ipv4Addr>, String> {
            v.as_deref()
                .map(|t| {
                    t.trim()
                        .parse()
                        .map_err(|_| format!("[net]: {key}: {t:?} is not an IPv4 address"))
                })
                .transpose()
        };
        let host_address = single("host_address", &self.host_address)?;
        let gateway = single("gateway", &self.gateway)?;
        if address.is_loopback() || address.is_unspecified() || prefix == 0 {
            return Err(format!("[net]: address {address}/{prefix} cannot be VINO's on a link"));
        }
        if let Some(h) = host_address.filter(|h| *h == address || !HostConfig::contains((address, prefix), *h)) {
            return Err(format!(
                "[net]: host_address {h} must be another address of {address}/{prefix}"
            ));
        }
        let egress = self
            .egress
            .iter()
            .map(|e| HostConfig::parse_prefix(e).map_err(net))
            .collect::<Result<_, _>>()?;
        let mtu = self.mtu.unwrap_or(1500);
        if !(576..=65535).contains(&mtu) {
            return Err(format!("[net]: mtu {mtu} is not 576 to 65535"));
        }
        let shaping = match (self.rate_mbit, &self.queue_per_user) {
            (None, None) => None,
            (None, Some(_)) => return Err("[net]: queue_per_user needs rate_mbit".into()),
            (Some(r), _) if !(1..=1_000_000).contains(&r) => {
                return Err(format!("[net]: rate_mbit {r} is not 1 to 1000000"));
            }
            (Some(r), queue) => {
                let mut shaping = vino_kernel::Shaping::rate(r * 125_000);
                if let Some(q) = queue {
                    let bytes = parse_size(q).map_err(net)? as usize;
                    if bytes < 2 * mtu {
                        return Err(format!(
                            "[net]: queue_per_user {q} is less than two packets ({} bytes)",
                            2 * mtu
                        ));
                    }
                    shaping.queue_bytes = bytes;
                }
                Some(shaping)
            }
        };
        Ok(Some(HostConfig {
            host_address,
            gateway,
            egress,
            mtu,
            shaping,
            ..HostConfig::new(device, address, prefix)
        }))
    }
}

/// The `[limits]` table: every key optional, the rest from [`LimitsConfig::default`].
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsFile {
    pub descriptors_per_process: Option<u64>,
    pub descriptors_per_user: Option<u64>,
    pub grafts_per_user: Option<u64>,
    pub grafts_total: Option<u64>,
    pub graft_memory_per_user: Option<String>,
    pub graft_memory_total: Option<String>,
    pub graft_code_per_user: Option<String>,
    pub bindings_per_user: Option<u64>,
    pub subscriptions_per_user: Option<u64>,
    pub request_buffers_per_user: Option<String>,
    pub compiles_per_user: Option<u64>,
    pub control_calls_per_user: Option<u64>,
    pub lock_waits_per_user: Option<u64>,
    pub programs_per_user: Option<u64>,
    pub programs_total: Option<u64>,
    pub threads_per_user: Option<u64>,
    pub threads_total: Option<u64>,
    pub program_memory_per_user: Option<String>,
    pub program_memory_total: Option<String>,
    pub resident_per_process: Option<String>,
    pub resident_total: Option<String>,
    pub swap_per_user: Option<String>,
    pub swap_total: Option<String>,
    pub event_filter_bytes_per_user: Option<String>,
    pub event_filter_bytes_total: Option<String>,
    pub lock_records_per_user: Option<u64>,
    pub lock_records_total: Option<u64>,
    pub sockets_per_user: Option<u64>,
    pub sockets_total: Option<u64>,
    pub socket_memory_per_user: Option<String>,
    pub socket_memory_total: Option<String>,
    pub root_reserve_percent: Option<u8>,
    /// Nice value (0-19) of the threads serving a user that took more than its CPU share; 0
    /// only measures.
    pub cpu_heavy_nice: Option<i32>,
    /// Percent of one core a user's work may always take while others have work; above it, a
    /// user is heavy once it takes more than its share of the cores.
    pub cpu_heavy_percent: Option<u32>,
    /// The cores users share, each getting its part before it can be heavy (default: the
    /// machine's, as the daemon may use them).
    pub cpu_cores: Option<u32>,
}

impl LimitsFile {
    /// The kernel's limits: the defaults with this table's keys over them.
    pub fn resolve(&self) -> Result<LimitsConfig, String> {
        let mut l = LimitsConfig::default();
        let size = |key: &str, v: &Option<String>| -> Result<Option<u64>, String> {
            v.as_deref()
                .map(parse_size)
                .transpose()
                .map_err(|e| format!("limits.{key}: {e}"))
        };
        use Scope::*;
        let counts = [
            (Process, Resource::Descriptors, self.descriptors_per_process),
            (User, Resource::Descriptors, self.descriptors_per_user),
            (User, Resource::Grafts, self.grafts_per_user),
            (Total, Resource::Grafts, self.grafts_total),
            (User, Resource::Bindings, self.bindings_per_user),
            (User, Resource::Subscriptions, self.subscriptions_per_user),
            (User, Resource::Compiles, self.compiles_per_user),
            (User, Resource::ControlCalls, self.control_calls_per_user),
            (User, Resource::LockWaits, self.lock_waits_per_user),
            (User, Resource::Programs, self.programs_per_user),
            (Total, Resource::Programs, self.programs_total),
            (User, Resource::Threads, self.threads_per_user),
            (Total, Resource::Threads, self.threads_total),
            (User, Resource::LockRecords, self.lock_records_per_user),
            (Total, Resource::LockRecords, self.lock_records_total),
            (User, Resource::Sockets, self.sockets_per_user),
            (Total, Resource::Sockets, self.sockets_total),
        ];
        for (scope, r, v) in counts {
            if let Some(n) = v {
                scope.of(&mut l).set(r, n);
            }
        }
        let sizes = [
            (
                "graft_memory_per_user",
                User,
                Resource::GraftMemory,
                &self.graft_memory_per_user,
            ),
            (
                "graft_memory_total",
                Total,
                Resource::GraftMemory,
                &self.graft_memory_total,
            ),
            (
                "graft_code_per_user",
                User,
                Resource::GraftCode,
                &self.graft_code_per_user,
            ),
            (
                "program_memory_per_user",
                User,
                Resource::ProgramMemory,
                &self.program_memory_per_user,
            ),
            (
                "program_memory_total",
                Total,
                Resource::ProgramMemory,
                &self.program_memory_total,
            ),
            (
                "resident_per_process",
                Process,
                Resource::ResidentBytes,
                &self.resident_per_process,
            ),
            ("resident_total", Total, Resource::ResidentBytes, &self.resident_total),
            ("swap_per_user", User, Resource::SwapBytes, &self.swap_per_user),
            ("swap_total", Total, Resource::SwapBytes, &self.swap_total),
            (
                "request_buffers_per_user",
                User,
                Resource::FrameBytes,
                &self.request_buffers_per_user,
            ),
            (
                "event_filter_bytes_per_user",
                User,
                Resource::EventFilterBytes,
                &self.event_filter_bytes_per_user,
            ),
            (
                "event_filter_bytes_total",
                Total,
                Resource::EventFilterBytes,
                &self.event_filter_bytes_total,
            ),
            (
                "socket_memory_per_user",
                User,
                Resource::SocketBytes,
                &self.socket_memory_per_user,
            ),
            (
                "socket_memory_total",
                Total,
                Resource::SocketBytes,
                &self.socket_memory_total,
            ),
        ];
        for (key, scope, r, v) in sizes {
            if let Some(n) = size(key, v)? {
                scope.of(&mut l).set(r, n);
            }
        }
        if let Some(p) = self.root_reserve_percent {
            if p > 50 {
                return Err(format!("limits.root_reserve_percent: {p} is more than 50"));
            }
            l.root_reserve_percent = p;
        }
        if let Some(n) = self.cpu_heavy_nice {
            if !(0..=19).contains(&n) {
                return Err(format!("limits.cpu_heavy_nice: {n} is not a nice value from 0 to 19"));
            }
            l.cpu.heavy_nice = n;
        }
        if let Some(p) = self.cpu_heavy_percent {
            if p == 0 {
                return Err("limits.cpu_heavy_percent: 0 would make every user heavy".into());
            }
            l.cpu.heavy_percent = p;
        }
        if let Some(n) = self.cpu_cores {
            if n == 0 {
                return Err("limits.cpu_cores: 0 cores leave nothing to share".into());
            }
            l.cpu.cores = n;
        }
        Ok(l)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            socket: PathBuf::from(vino_proto::DEFAULT_SOCKET),
            image: PathBuf::from("vino.img"),
            image_size: "256M".into(),
            cache_frames: default_cache_frames(),
            dirty_percent: vino_kernel::KernelConfig::default().dirty_percent,
            cache_warm_ahead: DEFAULT_CACHE_WARM_AHEAD,
            cache_size: None,
            privileged_group: None,
            max_connections: 256,
            max_connections_per_user: 64,
            root_reserved_connections: 8,
            frame_timeout: Duration::from_secs(10),
            commit_interval: Duration::from_secs(5),
            shutdown_grace: vino_fuse::MountConfig::default().stop_grace,
            socket_mode: 0o666,
            max_shm: vino_proto::MAX_SHM,
            mount: None,
            mount_transport: MountTransport::Auto,
            mount_ring_depth: vino_fuse::MountConfig::default().ring_depth,
            mount_idle_poll_us: None,
            mount_page_cache: true,
            event_queue_max: vino_kernel::EVENT_QUEUE_MAX,
            limits: LimitsFile::default(),
            net: NetFile::default(),
            user_block_quota: None,
            user_inode_quota: None,
            root_reserve_percent: 5,
            user_link_quota: None,
            protected_hardlinks: 1,
            protected_symlinks: 1,
            protected_fifos: vino_kernel::Protected::default().fifos,
            protected_regular: vino_kernel::Protected::default().regular,
            program_memory: "256M".into(),
            huge_pages: false,
        }
    }
}

impl Config {
    /// Reads a configuration file.
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The file system's quotas: a size in bytes becomes whole 4 KiB blocks.
    pub fn quota(&self) -> Result<vino_kernel::storage::Quota, String> {
        if self.root_reserve_percent > 50 {
            return Err(format!(
                "root_reserve_percent: {} is more than 50",
                self.root_reserve_percent
            ));
        }
        let bytes = |t: &str| parse_size(t);
        let blocks = self
            .user_block_quota
            .as_ref()
            .map(|a| a.resolve("user_block_quota", bytes))
            .transpose()?
            .map(|b| {
                if b == vino_kernel::storage::UNLIMITED {
                    b
                } else {
                    b / vino_kernel::storage::BS as u64
                }
            });
        let count = |t: &str| t.trim().parse::<u64>().map_err(|_| format!("`{t}` is not a count"));
        let inodes = self
            .user_inode_quota
            .as_ref()
            .map(|a| a.resolve("user_inode_quota", count))
            .transpose()?;
        let links = self
            .user_link_quota
            .as_ref()
            .map(|a| a.resolve("user_link_quota", count))
            .transpose()?;
        Ok(vino_kernel::storage::Quota {
            user_blocks: blocks,
            user_inodes: inodes,
            root_reserve_percent: self.root_reserve_percent,
            user_links: links,
        })
    }

    /// The `protected_*` keys, as the kernel's rules.
    pub fn protect(&self) -> Result<vino_kernel::Protected, String> {
        let flag = |key: &str, v: u8| match v {
            0 | 1 => Ok(v == 1),
            _ => Err(format!("{key}: {v} (0 or 1)")),
        };
        let level = |key: &str, v: u8| match v {
            0..=2 => Ok(v),
            _ => Err(format!("{key}: {v} (0, 1 or 2)")),
        };
        Ok(vino_kernel::Protected {
            hardlinks: flag("protected_hardlinks", self.protected_hardlinks)?,
            symlinks: flag("protected_symlinks", self.protected_symlinks)?,
            fifos: level("protected_fifos", self.protected_fifos)?,
            regular: level("protected_regular", self.protected_regular)?,
        })
    }

    /// Frames of the page cache: `cache_size` if set, else `cache_frames`.
    pub fn cache_frames(&self) -> Result<usize, String> {
        let Some(size) = &self.cache_size else {
            return Ok(self.cache_frames);
        };
        let bytes = match size.trim().strip_suffix('%') {
            Some(p) => {
                let p: f64 = p
                    .trim()
                    .parse()
                    .ok()
                    .filter(|p| (0.0..=90.0).contains(p))
                    .ok_or_else(|| format!("cache_size: `{size}` is not a percentage from 0 to 90"))?;
                (machine_memory() as f64 * p / 100.0) as u64
            }
            None => parse_size(size).map_err(|e| format!("cache_size: {e}"))?,
        };
        Ok(usize::try_from(bytes / vino_kernel::storage::BS as u64)
            .unwrap_or(usize::MAX)
            .clamp(MIN_CACHE_FRAMES, MAX_CACHE_FRAMES))
    }

    /// The image size in bytes.
    pub fn image_bytes(&self) -> Result<u64, String> {
        parse_size(&self.image_size)
    }

    /// The privileged group's id, if one is configured.
    pub fn privileged_gid(&self) -> Result<Option<u32>, String> {
        let Some(g) = &self.privileged_group else {
            return Ok(None);
        };
        if let Ok(gid) = g.parse::<u32>() {
            return Ok(Some(gid));
        }
        match nix::unistd::Group::from_name(g) {
            Ok(Some(group)) => Ok(Some(group.gid.as_raw())),
            Ok(None) => Err(format!("privileged_group: no group named `{g}`")),
            Err(e) => Err(format!("privileged_group `{g}`: {e}")),
        }
    }
}

/// A positive number of seconds.
fn seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = f64::deserialize(d)?;
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| serde::de::Error::custom(format!("{s} is not a positive number of seconds")))
}

/// Parses a size such as `64M`, `2G`, `4096`.
/// The page cache's default share of the machine's memory, in percent.
pub const DEFAULT_CACHE_PERCENT: u64 = 12;

/// Free frames made ahead of need by default: 32 MiB, about a second of a writer filling the
/// cache through the mount (`tar x`), so the background thread has time to keep ahead.
pub const DEFAULT_CACHE_WARM_AHEAD: usize = 8192;

/// The smallest page cache (the thesis' 4 MB).
pub const MIN_CACHE_FRAMES: usize = 1024;

/// The largest page cache (frame numbers are 32 bits; 64 GiB).
pub const MAX_CACHE_FRAMES: usize = 1 << 24;

/// [`DEFAULT_CACHE_PERCENT`] of the machine's memory, in frames.
fn default_cache_frames() -> usize {
    let frames = machine_memory() / 100 * DEFAULT_CACHE_PERCENT / vino_kernel::storage::BS as u64;
    usize::try_from(frames)
        .unwrap_or(usize::MAX)
        .clamp(MIN_CACHE_FRAMES, MAX_CACHE_FRAMES)
}

/// The machine's memory in bytes (`MemTotal` of /proc/meminfo; 1 GiB if it cannot be read).
fn machine_memory() -> u64 {
    let kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| {
        text.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    });
    kib.map_or(1 << 30, |k| k * 1024)
}

pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size (e.g. 64M, 2G)"))?;
    let mult = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => return Err(format!("`{text}`: unknown unit `{unit}` (K, M, G)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("`{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_file_reads_and_unknown_keys_are_refused() {
        let c: Config = toml::from_str("socket = \"/tmp/s\"\ncache_frames = 64\nprivileged_group = \"0\"").unwrap();
        assert_eq!(c.socket, PathBuf::from("/tmp/s"));
        assert_eq!(c.cache_frames().unwrap(), 64);
        assert_eq!(c.privileged_gid().unwrap(), Some(0));
        assert_eq!(c.cache_warm_ahead, DEFAULT_CACHE_WARM_AHEAD);
        let off: Config = toml::from_str("cache_warm_ahead = 0").unwrap();
        assert_eq!(off.cache_warm_ahead, 0);
        assert!(toml::from_str::<Config>("sockets = 1").is_err());
        let c: Config = toml::from_str("frame_timeout = 3\nmax_connections_per_user = 4").unwrap();
        assert_eq!(
            (c.frame_timeout, c.max_connections_per_user),
            (Duration::from_secs(3), 4)
        );
        let c: Config = toml::from_str("frame_timeout = 0.25").unwrap();
        assert_eq!(c.frame_timeout, Duration::from_millis(250));
        assert!(toml::from_str::<Config>("frame_timeout = 0").is_err());
        assert!(toml::from_str::<Config>("frame_timeout = -1").is_err());
        let c: Config = toml::from_str("mount_ring_depth = 8\nmount_idle_poll_us = 0").unwrap();
        assert_eq!((c.mount_ring_depth, c.mount_idle_poll_us), (8, Some(0)));
        assert_eq!(Config::default().mount_idle_poll_us, None, "the mount's own choice");
        assert!(Config::default().mount_page_cache);
        assert!(
            !toml::from_str::<Config>("mount_page_cache = false")
                .unwrap()
                .mount_page_cache
        );
        let c: Config = toml::from_str("commit_interval = 0.5").unwrap();
        assert_eq!(c.commit_interval, Duration::from_millis(500));
        assert_eq!(Config::default().commit_interval, Duration::from_secs(5));
        assert!(toml::from_str::<Config>("commit_interval = 0").is_err());
        let c: Config = toml::from_str("shutdown_grace = 0.5").unwrap();
        assert_eq!(c.shutdown_grace, Duration::from_millis(500));
        assert_eq!(Config::default().shutdown_grace, Duration::from_secs(2));
        let d = Config::default();
        assert_eq!((d.max_connections_per_user, d.root_reserved_connections), (64, 8));
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        let c: Config = toml::from_str("[limits]\ngrafts_per_user = 3\ngraft_memory_total = \"1G\"").unwrap();
        let l = c.limits.resolve().unwrap();
        assert_eq!(l.user.get(Resource::Grafts), 3);
        assert_eq!(l.total.get(Resource::GraftMemory), 1 << 30);
        assert!(toml::from_str::<Config>("[limits]\ngrafts = 3").is_err());
        let bad: Config = toml::from_str("[limits]\ngraft_code_per_user = \"lots\"").unwrap();
        assert!(bad.limits.resolve().unwrap_err().contains("graft_code_per_user"));
        assert!(parse_size("12Q").is_err());
    }

    #[test]
    fn socket_limits_are_keys_of_the_limits_table() {
        let c: Config =
            toml::from_str("[limits]\nsockets_per_user = 8\nsocket_memory_per_user = \"1M\"\nsockets_total = 64")
                .unwrap();
        let l = c.limits.resolve().unwrap();
        assert_eq!(l.user.get(Resource::Sockets), 8);
        assert_eq!(l.user.get(Resource::SocketBytes), 1 << 20);
        assert_eq!(l.total.get(Resource::Sockets), 64);
        let bad: Config = toml::from_str("[limits]\nsocket_memory_total = \"lots\"").unwrap();
        assert!(bad.limits.resolve().unwrap_err().contains("socket_memory_total"));
    }

    #[test]
    fn the_net_table_attaches_a_host_link_or_says_what_is_wrong() {
        let net = |text: &str| toml::from_str::<Config>(text).unwrap().net.resolve();
        assert_eq!(net("").unwrap(), None);
        let h = net("[net]\nlink = \"vino0\"\naddress = \"10.77.0.2/24\"\nhost_address = \"10.77.0.1\"\negress = [\"10.77.0.0/24\", \"192.0.2.7\"]")
            .unwrap()
            .unwrap();
        assert_eq!(
            (h.device.to_string(), h.address, h.prefix, h.mtu),
            ("vino0".to_string(), "10.77.0.2".parse().unwrap(), 24, 1500)
        );
        assert_eq!(h.host_address, Some("10.77.0.1".parse().unwrap()));
        assert_eq!(h.shaping, None);
        let shaped =
            net("[net]\nlink = \"vino0\"\naddress = \"10.77.0.2/24\"\nrate_mbit = 100\nqueue_per_user = \"1M\"")
                .unwrap()
                .unwrap();
        assert_eq!(
            shaped.shaping,
            Some(vino_kernel::Shaping {
                rate: 12_500_000,
                queue_bytes: 1 << 20
            })
        );
        assert_eq!(
            h.egress,
            vec![("10.77.0.0".parse().unwrap(), 24), ("192.0.2.7".parse().unwrap(), 32)]
        );
        for (bad, says) in [
            ("[net]\naddress = \"10.77.0.2/24\"", "need link"),
            ("[net]\nlink = \"vino0\"", "needs address"),
            ("[net]\nlink = \"vino0\"\naddress = \"127.0.0.2/8\"", "cannot be VINO's"),
            ("[net]\nlink = \"vino0\"\naddress = \"10.77.0.2/33\"", "0 to 32"),
            (
                "[net]\nlink = \"vino0\"\naddress = \"10.77.0.2/24\"\nhost_address = \"10.78.0.1\"",
                "another address",
            ),
            (
                "[net]\nlink = \"vino0\"\naddress = \"10.77.0.2/24\"\nmtu = 100",
                "576 to 65535",
            ),
            (
                "[net]\nlink = \"vino0\"\naddress = \"10.77.0.2/24\"\nqueue_per_user = \"1M\"",
                "needs rate_mbit",
            ),
            (
                "[net]\nlink = \"vino0\"\naddress = \"10.77.0.2/24\"\nrate_mbit = 0",
                "1 to 1000000",
            ),
            (
                "[net]\nlink = \"vino0\"\naddress = \"10.77.0.2/24\"\nrate_mbit = 10\nqueue_per_user = \"1K\"",
                "two packets",
            ),
            (
                "[net]\nlink = \"vino0\"\naddress = \"10.77.0.2/24\"\negress = [\"ten\"]",
                "not an IPv4",
            ),
        ] {
            let e = net(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(toml::from_str::<Config>("[net]\nlinks = 1").is_err());
    }

    #[test]
    fn the_cache_is_a_size_or_a_share_of_memory() {
        let frames = |text: &str| toml::from_str::<Config>(text).unwrap().cache_frames();
        assert_eq!(frames("cache_size = \"64M\"").unwrap(), 16384);
        assert_eq!(
            frames("cache_size = \"64M\"\ncache_frames = 5").unwrap(),
            16384,
            "the size wins"
        );
        assert_eq!(
            frames("cache_size = \"1K\"").unwrap(),
            MIN_CACHE_FRAMES,
            "at least 4 MB"
        );
        let share = frames("cache_size = \"50%\"").unwrap();
        let default = Config::default().cache_frames().unwrap();
        assert!(
            share >= default,
            "50% of memory ({share}) is less than the default ({default})"
        );
        assert!(default >= MIN_CACHE_FRAMES);
        for bad in ["cache_size = \"lots\"", "cache_size = \"95%\"", "cache_size = \"-1%\""] {
            assert!(frames(bad).unwrap_err().contains("cache_size"), "{bad}");
        }
    }

    #[test]
    fn protected_keys_are_on_by_default_and_checked() {
        assert_eq!(Config::default().protect().unwrap(), vino_kernel::Protected::default());
        let c: Config = toml::from_str("protected_hardlinks = 0\nprotected_regular = 0").unwrap();
        let p = c.protect().unwrap();
        assert!(!p.hardlinks && p.symlinks && p.regular == 0);
        let bad: Config = toml::from_str("protected_fifos = 3").unwrap();
        assert!(bad.protect().unwrap_err().contains("protected_fifos"));
        let c: Config = toml::from_str("user_link_quota = 7").unwrap();
        assert_eq!(c.quota().unwrap().user_links, Some(7));
    }

    #[test]
    fn quota_keys_read_as_blocks_inodes_and_a_reserve() {
        let q = Config::default().quota().unwrap();
        assert_eq!(q, vino_kernel::storage::Quota::default());
        let c: Config =
            toml::from_str("user_block_quota = \"64M\"\nuser_inode_quota = 100\nroot_reserve_percent = 10").unwrap();
        let q = c.quota().unwrap();
        assert_eq!(
            (q.user_blocks, q.user_inodes, q.root_reserve_percent),
            (Some(16384), Some(100), 10)
        );
        let c: Config = toml::from_str("user_block_quota = \"unlimited\"\nuser_inode_quota = \"unlimited\"").unwrap();
        let q = c.quota().unwrap();
        assert_eq!(
            (q.user_blocks, q.user_inodes),
            (
                Some(vino_kernel::storage::UNLIMITED),
                Some(vino_kernel::storage::UNLIMITED)
            )
        );
        let bad: Config = toml::from_str("user_block_quota = \"lots\"").unwrap();
        assert!(bad.quota().unwrap_err().contains("user_block_quota"));
        let bad: Config = toml::from_str("root_reserve_percent = 60").unwrap();
        assert!(bad.quota().is_err());
    }
}
