//! The data the protocol carries.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How a file is opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[repr(C)]
pub struct OpenFlags {
    pub read: bool,
    pub write: bool,
    pub create: bool,
    /// With `create`: fail if the file exists.
    pub exclusive: bool,
    pub truncate: bool,
    pub append: bool,
    /// Permission bits of a file this open creates.
    pub mode: u16,
    /// Fail with `ELOOP` if the last component is a symbolic link (`O_NOFOLLOW`).
    pub nofollow: bool,
    /// Fail with `ENOTDIR` unless it is a directory (`O_DIRECTORY`); a directory opened so
    /// (read-only) is the starting point of `*at` requests and can be listed.
    pub directory: bool,
}

impl OpenFlags {
    pub fn read_only() -> Self {
        OpenFlags {
            read: true,
            ..Default::default()
        }
    }

    pub fn read_write() -> Self {
        OpenFlags {
            read: true,
            write: true,
            ..Default::default()
        }
    }

    /// Create (or truncate) for reading and writing, mode 0644.
    pub fn create() -> Self {
        OpenFlags {
            read: true,
            write: true,
            create: true,
            truncate: true,
            mode: 0o644,
            ..Default::default()
        }
    }

    /// A directory, read-only, to start `*at` requests from (`O_DIRECTORY`).
    pub fn directory() -> Self {
        OpenFlags {
            read: true,
            directory: true,
            ..Default::default()
        }
    }
}

/// What a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    Regular,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

/// A file's attributes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    pub ino: u64,
    pub kind: FileKind,
    /// Type and permission bits, as `st_mode`.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub blocks: u64,
    pub atime_ns: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    /// The device a character or block device node stands for (0 for other files).
    pub rdev: u64,
    /// Changes each time the inode number is reused for a new file.
    pub generation: u32,
}

/// A timestamp to set, as `utimensat` takes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetTime {
    /// Leave it as it is.
    #[default]
    Omit,
    /// The current time.
    Now,
    /// Nanoseconds since the Unix epoch.
    At(u64),
}

/// Attributes to change in one setattr (chmod, chown, truncate, utimes at once); `None` (or
/// [`SetTime::Omit`]) leaves one as it is. Each change needs its own right, as on Linux.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAttrs {
    /// Permission bits, `0o7777` at most.
    pub mode: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: SetTime,
    pub mtime: SetTime,
}

/// How a setxattr treats an attribute that exists or not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum XattrHow {
    /// Create or replace.
    #[default]
    Any,
    /// Fail with `EEXIST` if it exists (`XATTR_CREATE`).
    Create,
    /// Fail with `ENODATA` if it does not (`XATTR_REPLACE`).
    Replace,
}

/// A directory entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub kind: FileKind,
}

/// Facts about a loaded graft.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraftInfo {
    /// SHA-256 of the module, hex.
    pub hash: String,
    pub size: u64,
    /// The process that loaded it.
    pub owner: u64,
    pub cached: bool,
    pub compile_ns: u64,
    pub load_ns: u64,
}

/// A graft's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraftStats {
    pub invocations: u64,
    /// Invocations whose transaction aborted.
    pub aborts: u64,
    pub consecutive_aborts: u64,
    /// Changes to kernel state its committed calls made through graft-callable functions.
    pub changes: u64,
    pub time_ns: u64,
    pub last_error: Option<String>,
    pub last_log: Option<String>,
}

/// A graftpoint: who may graft it, what runs there, and its counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotInfo {
    pub point: String,
    /// `privileged`, or `process <pid>`.
    pub access: String,
    /// `default`, `native` or `wasm`.
    pub policy: String,
    pub graft: Option<GraftInfo>,
    pub stats: Option<GraftStats>,
}

/// A byte-range lock request's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockKind {
    Read,
    Write,
    Unlock,
}

/// A lock held by someone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    pub kind: LockKind,
    pub start: u64,
    pub len: u64,
    pub pid: u64,
}

/// File-system events (the `event.fs.*` graftpoints).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    Open,
    Close,
    Create,
    Unlink,
    Modify,
    /// Not an event one asks for: the marker that takes the place of the events dropped
    /// because the process's queue was full (its `ino`, `dir` and `pid` are 0, its name empty).
    /// A new marker comes only after the queue was read below its bound. Added after the
    /// others, so every other kind keeps its encoding.
    Overflow,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub kind: EventKind,
    pub ino: u64,
    /// The directory the name is in.
    pub dir: u64,
    /// The process that caused it.
    pub pid: u64,
    pub name: String,
}

/// One process's accounts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessTop {
    /// The kernel's process id.
    pub pid: u64,
    /// The client's process id on the host (0 if not a daemon client).
    pub host_pid: u32,
    pub uid: u32,
    pub gid: u32,
    pub privileged: bool,
    pub client: String,
    pub syscalls: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub open_files: u64,
    /// Grafts this process loaded and that are bound now.
    pub grafts: u64,
    pub graft_invocations: u64,
    pub graft_time_ns: u64,
    pub graft_aborts: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Cache frames holding this process's pages now.
    pub cache_frames: u64,
    /// For a program running in the daemon (`vino run`): its name (its first argument).
    pub program: Option<String>,
    /// For a program: the CPU time it has used, in nanoseconds.
    pub cpu_ns: u64,
    /// Its CPU tickets in its user's currency (`vino nice`), and its threads on the CPU
    /// scheduler.
    pub tickets: u32,
    pub threads: u64,
    /// Bytes of linear memory its program holds (charged to its user).
    pub memory_bytes: u64,
    /// Its program's memory as the kernel pages it (zero where it is not paged).
    pub memory: MemoryTop,
    /// The digest of the program it runs, hex: `exec.verify`'s verifier's, else the kernel's
    /// SHA-256 of the module.
    #[serde(default)]
    pub digest: Option<String>,
    /// Its network sockets.
    #[serde(default)]
    pub sockets: Vec<SocketTop>,
}

/// One network socket of a process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketTop {
    /// `tcp` or `udp`.
    pub proto: String,
    /// `address:port`.
    pub local: String,
    /// A connection's peer, `address:port`.
    pub remote: Option<String>,
    /// `bound`, `listen`, or a TCP state (`established`, `close-wait`...).
    pub state: String,
    /// A listener's connections waiting to be accepted.
    pub pending: u64,
}

/// A program's memory as the kernel's pager sees it (pages of 4 KiB).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryTop {
    /// Pages in frames (in its memory, or taken out to test them but not yet evicted).
    pub resident: u64,
    pub swapped: u64,
    /// Faults: first touches (zeros), pages back from the inactive list, pages read from swap.
    pub zero_faults: u64,
    pub minor_faults: u64,
    pub swap_ins: u64,
    pub swap_outs: u64,
    /// Its grafts' decisions: pages brought in by `vm.fault_around` beyond the one touched,
    /// evictions where `vas.pick_victim` chose another page than the default, answers refused.
    pub faulted_around: u64,
    pub evicted_by_graft: u64,
    pub graft_refused: u64,
}

/// How a program run in the daemon starts (`vino run`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramSetup {
    /// Its arguments, the first its name.
    pub args: Vec<Vec<u8>>,
    /// Its environment, `NAME=value` each.
    pub env: Vec<Vec<u8>>,
    /// The directories it may reach, each the file system's path and the name the program sees
    /// it by; none: the whole file system, as `/`.
    pub dirs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Its working directory; none: `/`.
    pub cwd: Option<Vec<u8>>,
    /// Whether the client's standard input, output and error are terminals: the program's
    /// `isatty` (so its buffering) and its `/dev/tty`.
    pub tty: [bool; 3],
    /// Sockets opened for it before it starts, its descriptors after the directories', in
    /// this order (the first program of a pipeline gets them).
    pub sockets: Vec<ProgramSocket>,
}

/// A socket the daemon opens for a program before it starts, with the program's credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProgramSocket {
    /// `tcp:PORT` (a listening socket) or `udp:PORT` (a bound one).
    Listen(String),
    /// `HOST:PORT`: a TCP connection.
    Connect(String),
}

/// A further program of a pipeline: its module and its arguments (the first its name).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipeStage {
    #[serde(with = "serde_bytes")]
    pub wasm: Vec<u8>,
    pub args: Vec<Vec<u8>>,
}

impl ProgramSetup {
    /// A setup with only arguments and environment.
    pub fn new(args: Vec<Vec<u8>>, env: Vec<Vec<u8>>) -> ProgramSetup {
        ProgramSetup {
            args,
            env,
            ..ProgramSetup::default()
        }
    }
}

/// One bound graft.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraftTop {
    pub point: String,
    /// The process that loaded it.
    pub owner: u64,
    /// Where it is bound: `global`, `process <pid>`, or `file <path>`.
    pub scope: String,
    pub hash: String,
    pub invocations: u64,
    pub time_ns: u64,
    pub aborts: u64,
}

/// What one user holds of the kernel, against its limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserTop {
    pub uid: u32,
    /// Per resource (`grafts`, `graft_memory`, ...): in use and the limit (`u64::MAX`: none).
    pub held: Vec<Held>,
    /// CPU spent in its grafts, control calls and compiles.
    pub cpu_ns: u64,
    /// CPU the daemon's threads spent working for it (its requests and the grafts they ran),
    /// as the CPU-share sampler charges it; polling for a client's next message not counted.
    pub work_ns: u64,
}

/// One resource of an account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub resource: String,
    pub used: u64,
    pub limit: u64,
}

/// The whole cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheTop {
    pub frames: u64,
    pub resident: u64,
    pub dirty: u64,
    pub hits: u64,
    pub misses: u64,
}

/// A snapshot of the daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Top {
    pub uptime_ms: u64,
    pub connections: u64,
    pub processes: Vec<ProcessTop>,
    pub grafts: Vec<GraftTop>,
    pub cache: CacheTop,
    /// The users with an account (only the viewer's own, unless it is privileged).
    pub users: Vec<UserTop>,
    /// The daemon's FUSE mounts (public, as the host's mount table is).
    pub mounts: Vec<MountTop>,
    /// The host link, if root attached one: for a privileged viewer only (its counts are every
    /// user's traffic).
    #[serde(default)]
    pub net: Option<NetTop>,
}

/// What the host link moved, and its way out's queues when it has a rate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetTop {
    pub sent: u64,
    pub refused: u64,
    pub received: u64,
    pub martians: u64,
    /// The way out's queues (`None`: no rate, packets go out as they are sent).
    pub shaped: Option<EgressTop>,
}

/// The rated way out: packets queued, sent on and dropped (a user's queue full), the decisions
/// `net.pick_packet` grafts made, and what waits now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressTop {
    pub queued: u64,
    pub sent: u64,
    pub dropped: u64,
    pub user_picks: u64,
    pub link_picks: u64,
    pub users_waiting: u64,
    pub waiting_bytes: u64,
}

/// A FUSE mount the daemon serves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountTop {
    pub path: String,
    /// "io_uring, N queues" or "/dev/fuse".
    pub transport: String,
    /// Idle polling of the mount: "N pollers", or "off" and why.
    pub idle_poll: String,
    /// How file data is cached: Linux's page cache in front of VINO's, or VINO's only.
    #[serde(default)]
    pub data_cache: String,
    /// The requests the mount served, by kind, most served first: for a privileged viewer only
    /// (they count every user's activity on the mount); empty for others.
    #[serde(default)]
    pub requests: Vec<RequestTop>,
}

/// Requests of one kind a FUSE mount served, and the daemon's time on them (from dispatch
/// until the operation returned).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestTop {
    /// FUSE's name of the operation (`lookup`, `write`, ...).
    pub op: String,
    pub count: u64,
    pub ns: u64,
}

/// The stream codec bound to a file or directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInfo {
    /// SHA-256 of the codec's module, hex (its name in the kernel's module store).
    pub module: String,
    /// Whether the owner's codec is loaded now (it loads on the first access after a mount).
    pub loaded: bool,
}

/// A file or directory that depends on a stream codec module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamFile {
    pub ino: u64,
    pub uid: u32,
    /// `regular` or `directory`.
    pub kind: String,
    /// SHA-256 of the module, hex.
    pub module: String,
    /// Whether its owner's codec is loaded now.
    pub loaded: bool,
}

/// A failed request: an errno (Linux numbering) and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    pub errno: i32,
    pub message: String,
}

impl ErrorReply {
    pub fn new(errno: i32, message: impl Into<String>) -> Self {
        ErrorReply {
            errno,
            message: message.into(),
        }
    }
}

impl fmt::Display for ErrorReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (errno {})", self.message, self.errno)
    }
}

impl std::error::Error for ErrorReply {}
