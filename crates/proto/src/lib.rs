//! The protocol between `vinod` and its clients.
//!
//! A connection is one kernel process. The client speaks first with [`Request::Hello`] (the
//! protocol [`VERSION`], and optionally a sealed memfd passed alongside with `SCM_RIGHTS` for
//! bulk data); the daemon answers [`Response::Hello`] with the process id it was given. After
//! that each request gets exactly one response, in order.
//!
//! On the wire every message is a frame: a `u32` little-endian payload length, then the payload,
//! a `postcard` encoding of a [`Request`] or [`Response`]. A frame longer than [`MAX_FRAME`] is
//! refused from its header alone, before anything is allocated for it.
//!
//! The types here are the protocol's own (no dependency on the kernel), so that clients stay
//! light and the C and Python bindings have plain data to map.
//!
//! # Names
//!
//! The `*at` requests ([`Request::OpenAt`], [`Request::StatAt`], ...) take paths as bytes (a
//! POSIX name need not be UTF-8) and start from `dirfd`: `None` is the root directory, `Some(fd)`
//! a directory the connection has open (with [`OpenFlags::directory`]); an absolute path starts
//! at the root whatever `dirfd` says. A client never names an inode: what it may reach is what
//! its walks from the root, with search permission on every directory passed, reach. The older
//! path requests ([`Request::Open`], [`Request::Stat`], ...) remain, as the same calls from the
//! root with UTF-8 paths.

mod frame;
mod poll;
mod types;

pub use frame::{
    FrameError, ModuleFor, ModuleHead, bytes_frame_head, decode, encode, encode_into, module_head, read_frame,
    read_frame_after_header, read_frame_watching, write_frame,
};
pub use poll::{Polled, SPIN, poll_until_readable, spin_until_readable};
pub use types::*;

use serde::{Deserialize, Serialize};

/// The protocol version; the daemon refuses a Hello with another. Version 2: the `*at`
/// requests, [`OpenFlags`] with `nofollow` and `directory`, [`Stat`] with `rdev` and
/// `generation`, the new [`FileKind`]s (a version-1 peer would misread each of them). Version 3:
/// [`Request::Run`] with a [`ProgramSetup`], and a program's memory in [`ProcessTop`]. Version 4:
/// the daemon's FUSE mounts and their transports in [`Top`]. Version 5: directories listed in
/// pages ([`Response::Entries`] with a cookie), never whole. Version 6: [`ProgramSetup`] says
/// which of the client's standard streams are terminals. Version 7: [`Request::Run`] with the
/// further stages of a pipeline, and [`Request::Signal`]. Version 8: a program's paged memory in
/// [`ProcessTop`] ([`MemoryTop`]). Version 9: the changes a graft's committed calls made in
/// [`GraftStats`]. Version 10: sockets opened for a program ([`ProgramSetup::sockets`]), and a
/// process's sockets in [`ProcessTop`]. Version 11: [`Request::GraftRecord`],
/// [`Request::GraftRecordStop`], [`Request::GraftTry`] and [`Request::GraftTryStop`]. Version
/// 12: [`Request::GraftRecord`] of a graftpoint's default.
pub const VERSION: u32 = 12;
/// Largest recording of a graft's inputs a daemon keeps and sends (it fits one frame).
pub const MAX_RECORDING: usize = MAX_MODULE;
/// Largest graft module a client may send.
pub const MAX_MODULE: usize = 16 << 20;
/// Largest in-band data of one read, write or graft-memory request.
pub const MAX_DATA: usize = 1 << 20;
/// Largest frame: a maximal module plus room for the rest of its request.
pub const MAX_FRAME: usize = MAX_MODULE + (64 << 10);
/// Largest path or name in a request.
pub const MAX_PATH: usize = 4096;
/// Largest extended attribute value (Linux's `XATTR_SIZE_MAX`).
pub const MAX_XATTR: usize = 65536;
/// Largest list in a request (control-call arguments, event filters).
pub const MAX_LIST: usize = 1024;
/// Most bytes of names (plus [`ENTRY_OVERHEAD`] each) in one page of a directory listing: an
/// answer costs the daemon O(page) whatever the directory's size, far under [`MAX_FRAME`].
pub const PAGE_BYTES: usize = 64 << 10;
/// What a listed entry costs in a page besides its name (its encoded length, inode and kind).
pub const ENTRY_OVERHEAD: usize = 16;
/// Largest shared-memory area a client may pass in Hello.
pub const MAX_SHM: u64 = 256 << 20;
/// The extended attribute of a file or directory on the FUSE mount that is its stream codec:
/// reading it gives the codec module's SHA-256 in hex (`ENODATA` if none), setting it to such
/// a hash binds a codec the kernel holds already (one bound before by its bytes, through the
/// socket), removing it unbinds. Not listed, and not stored as an attribute.
pub const STREAM_XATTR: &str = "user.vino.stream";
/// The socket clients use when `VINO_SOCKET` is not set.
pub const DEFAULT_SOCKET: &str = "/run/vino/vinod.sock";

/// Errno values the daemon and its kernel return (Linux numbering). An error travels as its
/// number ([`ErrorReply::errno`]), so any of them reaches the client as it is.
pub mod errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const ESRCH: i32 = 3;
    pub const EINTR: i32 = 4;
    pub const EIO: i32 = 5;
    pub const ENXIO: i32 = 6;
    pub const E2BIG: i32 = 7;
    pub const ENOEXEC: i32 = 8;
    pub const EBADF: i32 = 9;
    pub const ECHILD: i32 = 10;
    pub const EAGAIN: i32 = 11;
    pub const ENOMEM: i32 = 12;
    pub const EACCES: i32 = 13;
    pub const EBUSY: i32 = 16;
    pub const EEXIST: i32 = 17;
    pub const EXDEV: i32 = 18;
    pub const ENOTDIR: i32 = 20;
    pub const EISDIR: i32 = 21;
    pub const EINVAL: i32 = 22;
    pub const ENFILE: i32 = 23;
    pub const EMFILE: i32 = 24;
    pub const EFBIG: i32 = 27;
    pub const ENOSPC: i32 = 28;
    pub const EPIPE: i32 = 32;
    pub const ERANGE: i32 = 34;
    pub const EDEADLK: i32 = 35;
    pub const ENAMETOOLONG: i32 = 36;
    pub const ENOLCK: i32 = 37;
    pub const ENOSYS: i32 = 38;
    pub const ENOTEMPTY: i32 = 39;
    pub const ELOOP: i32 = 40;
    pub const ENODATA: i32 = 61;
    pub const EPROTO: i32 = 71;
    pub const EUSERS: i32 = 87;
    pub const EMSGSIZE: i32 = 90;
    pub const EOPNOTSUPP: i32 = 95;
    pub const EADDRINUSE: i32 = 98;
    pub const EADDRNOTAVAIL: i32 = 99;
    pub const ENETUNREACH: i32 = 101;
    pub const ECONNRESET: i32 = 104;
    pub const ENOBUFS: i32 = 105;
    pub const EISCONN: i32 = 106;
    pub const ENOTCONN: i32 = 107;
    pub const ETIMEDOUT: i32 = 110;
    pub const ECONNREFUSED: i32 = 111;
    pub const ESTALE: i32 = 116;
    pub const EUCLEAN: i32 = 117;
    pub const EDQUOT: i32 = 122;

    /// Every errno named here, with its name.
    pub const ALL: [(i32, &str); 48] = [
        (EPERM, "EPERM"),
        (ENOENT, "ENOENT"),
        (ESRCH, "ESRCH"),
        (EINTR, "EINTR"),
        (EIO, "EIO"),
        (ENXIO, "ENXIO"),
        (E2BIG, "E2BIG"),
        (ENOEXEC, "ENOEXEC"),
        (EBADF, "EBADF"),
        (ECHILD, "ECHILD"),
        (EAGAIN, "EAGAIN"),
        (ENOMEM, "ENOMEM"),
        (EACCES, "EACCES"),
        (EBUSY, "EBUSY"),
        (EEXIST, "EEXIST"),
        (EXDEV, "EXDEV"),
        (ENOTDIR, "ENOTDIR"),
        (EISDIR, "EISDIR"),
        (EINVAL, "EINVAL"),
        (ENFILE, "ENFILE"),
        (EMFILE, "EMFILE"),
        (EFBIG, "EFBIG"),
        (ENOSPC, "ENOSPC"),
        (EPIPE, "EPIPE"),
        (ERANGE, "ERANGE"),
        (EDEADLK, "EDEADLK"),
        (ENAMETOOLONG, "ENAMETOOLONG"),
        (ENOLCK, "ENOLCK"),
        (ENOSYS, "ENOSYS"),
        (ENOTEMPTY, "ENOTEMPTY"),
        (ELOOP, "ELOOP"),
        (ENODATA, "ENODATA"),
        (EPROTO, "EPROTO"),
        (EUSERS, "EUSERS"),
        (EMSGSIZE, "EMSGSIZE"),
        (EOPNOTSUPP, "EOPNOTSUPP"),
        (EADDRINUSE, "EADDRINUSE"),
        (EADDRNOTAVAIL, "EADDRNOTAVAIL"),
        (ENETUNREACH, "ENETUNREACH"),
        (ECONNRESET, "ECONNRESET"),
        (ENOBUFS, "ENOBUFS"),
        (EISCONN, "EISCONN"),
        (ENOTCONN, "ENOTCONN"),
        (ETIMEDOUT, "ETIMEDOUT"),
        (ECONNREFUSED, "ECONNREFUSED"),
        (ESTALE, "ESTALE"),
        (EUCLEAN, "EUCLEAN"),
        (EDQUOT, "EDQUOT"),
    ];

    /// The name of errno `n` (`"EACCES"`), if it is one of these.
    pub fn name(n: i32) -> Option<&'static str> {
        ALL.iter().find(|(e, _)| *e == n).map(|(_, name)| *name)
    }
}

/// Where the bytes of a write are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Payload {
    /// In the request itself (at most [`MAX_DATA`]).
    Inline(#[serde(with = "serde_bytes")] Vec<u8>),
    /// In the shared memory passed in Hello, at `offset`.
    Shm { offset: u64, len: u32 },
}

impl Payload {
    pub fn len(&self) -> usize {
        match self {
            Payload::Inline(v) => v.len(),
            Payload::Shm { len, .. } => *len as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A request: one system call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// First message. `shm_len` > 0: a sealed memfd of that size comes with this frame.
    Hello {
        version: u32,
        client: String,
        shm_len: u64,
    },
    /// Does nothing (measures the round trip).
    Null,
    Open {
        path: String,
        flags: OpenFlags,
    },
    Close {
        fd: u32,
    },
    /// Reads up to `len` bytes at `offset` (or the file offset). With `to_shm`, the bytes go to
    /// the shared memory at that offset and the answer is only their count.
    Read {
        fd: u32,
        len: u32,
        offset: Option<u64>,
        to_shm: Option<u64>,
    },
    Write {
        fd: u32,
        data: Payload,
        offset: Option<u64>,
    },
    Seek {
        fd: u32,
        offset: u64,
    },
    Fsync {
        fd: u32,
    },
    Ftruncate {
        fd: u32,
        size: u64,
    },
    Fstat {
        fd: u32,
    },
    Stat {
        path: String,
    },
    Mkdir {
        path: String,
        mode: u16,
    },
    Rmdir {
        path: String,
    },
    /// A page of the directory's entries from `cookie` on (0: the start):
    /// [`Response::Entries`].
    Readdir {
        path: String,
        cookie: u64,
    },
    Unlink {
        path: String,
    },
    Rename {
        from: String,
        to: String,
    },
    Sync,
    GraftLoad {
        point: String,
        #[serde(with = "serde_bytes")]
        wasm: Vec<u8>,
    },
    /// Binds a graft to a file: every later open of `path` by any process gets it.
    GraftLoadFile {
        path: String,
        point: String,
        #[serde(with = "serde_bytes")]
        wasm: Vec<u8>,
    },
    GraftUnload {
        point: String,
    },
    GraftUnloadFile {
        path: String,
        point: String,
    },
    GraftWriteMemory {
        point: String,
        offset: u32,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    GraftSymbol {
        point: String,
        symbol: String,
    },
    GraftCall {
        point: String,
        control: String,
        args: Vec<i64>,
    },
    GraftList,
    GraftStats {
        point: String,
    },
    /// What happened to this process's grafts since the last call.
    GraftEvents,
    /// A byte-range lock (`wait`: block until granted).
    Lock {
        fd: u32,
        kind: LockKind,
        start: u64,
        len: u64,
        wait: bool,
    },
    /// The first lock that would block this one, if any.
    GetLk {
        fd: u32,
        kind: LockKind,
        start: u64,
        len: u64,
    },
    EventFilter {
        kind: EventKind,
        inodes: Vec<u64>,
        names: Vec<String>,
    },
    EventSubscribe {
        kind: EventKind,
    },
    EventWait {
        timeout_ms: u32,
    },
    /// A snapshot of the processes and bound grafts the caller may see (all of them if it is
    /// privileged; its own uid's otherwise).
    Top,
    /// Mount the file system through FUSE at this absolute path (privileged).
    Mount {
        path: String,
    },
    /// Undo a [`Request::Mount`] (privileged).
    Unmount {
        path: String,
    },

    // ---- the *at requests (see "Names" above) ------------------------------------------------
    /// Opens (or creates) `path`: [`Response::Fd`].
    OpenAt {
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
        flags: OpenFlags,
    },
    /// What `path` names; a trailing symbolic link followed if `follow`: [`Response::Stat`].
    StatAt {
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
        follow: bool,
    },
    /// Makes a directory: [`Response::Stat`] of it.
    MkdirAt {
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
        mode: u16,
    },
    /// Makes a regular file, FIFO, socket or device node (devices: privileged only):
    /// [`Response::Stat`].
    MknodAt {
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
        kind: FileKind,
        mode: u16,
        rdev: u64,
    },
    /// Makes a symbolic link at `path` holding `target`: [`Response::Stat`].
    SymlinkAt {
        #[serde(with = "serde_bytes")]
        target: Vec<u8>,
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
    },
    /// The target of a symbolic link: [`Response::Data`].
    ReadlinkAt {
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
    },
    UnlinkAt {
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
    },
    RmdirAt {
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
    },
    /// Renames atomically; with `no_replace`, fails with `EEXIST` rather than replace.
    RenameAt {
        from_dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        from: Vec<u8>,
        to_dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        to: Vec<u8>,
        no_replace: bool,
    },
    /// A second name for a file; `follow`: a symbolic link at `from` is followed
    /// (`AT_SYMLINK_FOLLOW`). [`Response::Stat`] of the file.
    LinkAt {
        from_dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        from: Vec<u8>,
        to_dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        to: Vec<u8>,
        follow: bool,
    },
    /// chmod, chown, truncate and utimes in one: [`Response::Stat`] after.
    SetattrAt {
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
        follow: bool,
        attrs: SetAttrs,
    },
    /// [`Request::SetattrAt`] on an open file (a size change needs it open for writing).
    Fsetattr {
        fd: u32,
        attrs: SetAttrs,
    },
    /// Checks `mode` (4 read, 2 write, 1 execute; 0: exists) for this process: [`Response::Ok`]
    /// or `EACCES`.
    AccessAt {
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
        mode: u32,
        follow: bool,
    },
    /// A page of a directory's entries from `cookie` on: [`Response::Entries`].
    ReaddirAt {
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
        cookie: u64,
    },
    /// A page of the entries of the directory open as `fd` from `cookie` on.
    ReaddirFd {
        fd: u32,
        cookie: u64,
    },
    /// An extended attribute's value: [`Response::Data`] (`ENODATA` if there is none).
    GetXattr {
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
        follow: bool,
        #[serde(with = "serde_bytes")]
        name: Vec<u8>,
    },
    SetXattr {
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
        follow: bool,
        #[serde(with = "serde_bytes")]
        name: Vec<u8>,
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        how: XattrHow,
    },
    /// The names of a file's extended attributes: [`Response::Names`].
    ListXattr {
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
        follow: bool,
    },
    RemoveXattr {
        dirfd: Option<u32>,
        #[serde(with = "serde_bytes")]
        path: Vec<u8>,
        follow: bool,
        #[serde(with = "serde_bytes")]
        name: Vec<u8>,
    },
    /// Allocates `len` bytes from `offset` in the file open (for writing) as `fd`; the size
    /// grows to cover them unless `keep_size` (`FALLOC_FL_KEEP_SIZE`).
    Fallocate {
        fd: u32,
        keep_size: bool,
        offset: u64,
        len: u64,
    },
    /// Keeps a graft module for an ioctl on the FUSE mount to bind (FUSE's ioctls are too
    /// small to carry one); answered with its token as a `Value`.
    GraftStage {
        #[serde(with = "serde_bytes")]
        wasm: Vec<u8>,
    },
    /// Runs a WebAssembly program (WASI preview 1) as a VINO process in the daemon, with this
    /// connection's credentials. Answered [`Response::Ok`] once it starts; from then on the
    /// connection belongs to the program: the daemon sends [`Response::Output`] as it writes and
    /// one [`Response::Exited`] at its end, then closes; the client sends [`Request::Input`] and
    /// may send [`Request::Kill`]. A client that goes kills it.
    ///
    /// With `detach`, the program outlives the connection instead: the answer is its process id
    /// as a [`Response::Value`], its standard input is empty, what it writes goes nowhere, and
    /// the connection ends; [`Request::KillProgram`] stops it.
    Run {
        #[serde(with = "serde_bytes")]
        wasm: Vec<u8>,
        /// Its arguments, environment, directories and working directory.
        setup: ProgramSetup,
        detach: bool,
        /// Programs its standard output feeds, each the next's (`a | b | c`): a pipeline, run
        /// as one session (same environment, directories and working directory); its status
        /// is the last stage's that is not 0. The modules together are at most `MAX_MODULE`.
        then: Vec<PipeStage>,
    },
    /// Kills a program running in the daemon, by its process id (`vino ps`): the caller's own,
    /// or any if privileged; `ESRCH` otherwise.
    KillProgram {
        pid: u64,
    },
    /// Sets CPU tickets (`vino nice`): with `uid`, that user's tickets in the base currency
    /// (privileged only, `EPERM` otherwise); else the tickets of process `pid` in its user's
    /// currency (the caller's own processes, any if privileged; `ESRCH` otherwise), or of the
    /// connection's own process without a pid.
    SetTickets {
        pid: Option<u64>,
        uid: Option<u32>,
        tickets: u32,
    },
    /// Bytes for a running program's standard input; empty: the end of it.
    Input {
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Kills the connection's running program.
    Kill,
    /// Sends signal `sig` to every process of the connection's running program's session (its
    /// pipeline and what they spawned): Ctrl-C at `vino run`.
    Signal {
        sig: u8,
    },
    /// fallocate(2) in any `mode`, Linux's flag bits: [`Request::Fallocate`]'s modes (0 and
    /// `FALLOC_FL_KEEP_SIZE`), `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE` and
    /// `FALLOC_FL_ZERO_RANGE` (with `KEEP_SIZE` or not); any other is `EOPNOTSUPP` (or `EINVAL`,
    /// as Linux). A request of its own, last, so that every earlier request keeps its encoding:
    /// a daemon that predates it refuses it as an unknown request, nothing else changes.
    FallocateMode {
        fd: u32,
        mode: u32,
        offset: u64,
        len: u64,
    },
    /// Binds the stream codec `wasm` (a `file.stream` graft, at most [`MAX_MODULE`]) to the
    /// empty regular file or the directory at `path`; `None` unbinds it. Only the file's owner
    /// may (`EPERM`); a module that is no stream codec is `EINVAL`. The stream requests come
    /// after the others, so that every earlier request keeps its encoding.
    StreamBind {
        path: String,
        #[serde(with = "serde_bytes")]
        wasm: Option<Vec<u8>>,
    },
    /// The stream codec of the file or directory at `path`: [`Response::Stream`].
    StreamStatus {
        path: String,
    },
    /// Calls control function `name` of the owner's codec of the stream file at `path` (a
    /// key, `vino_ctl_set_key`): its result as a [`Response::Value`]. Only the owner may.
    StreamControl {
        path: String,
        name: String,
        args: Vec<i64>,
    },
    /// Which files and directories depend on which stream codec module (the caller's own, or
    /// all for a privileged caller): [`Response::StreamFiles`].
    StreamFiles,
    /// Removes the stored codec modules no file names any more (privileged): how many, as a
    /// [`Response::Value`].
    StreamCollect,
    /// Starts recording the inputs of the graft at `point` (at most `limit` bytes, cut to
    /// [`MAX_RECORDING`]), for a later replay; only a process that may bind there may. With
    /// `default`, the kernel's own decisions where nothing is bound.
    GraftRecord {
        point: String,
        limit: u64,
        default: bool,
    },
    /// Stops the recording at `point`: the recording's bytes, as [`Response::Data`].
    GraftRecordStop {
        point: String,
    },
    /// Runs `wasm` in shadow beside the live policy at `point` (a graftpoint `vino graft try`
    /// names) of process `pid` (the caller's own if `None`; another of its user, or any if
    /// privileged), following 1 in `sample` pages or decisions (0: every page; decisions as
    /// many as the kernel chooses).
    GraftTry {
        pid: Option<u64>,
        point: String,
        #[serde(with = "serde_bytes")]
        wasm: Vec<u8>,
        sample: u32,
    },
    /// Stops the shadow at `point` of `pid`: what it found, a JSON document, as
    /// [`Response::Data`].
    GraftTryStop {
        pid: Option<u64>,
        point: String,
    },
}

impl Request {
    /// Checks the limits a decoded request must respect; the reason if it does not.
    pub fn check(&self) -> Result<(), String> {
        let bytes = |p: &[u8]| {
            if p.len() > MAX_PATH {
                Err(format!("a path of {} bytes", p.len()))
            } else {
                Ok(())
            }
        };
        let path = |p: &str| bytes(p.as_bytes());
        let data = |n: usize, max: usize| {
            if n > max {
                Err(format!("{n} bytes of data (at most {max})"))
            } else {
                Ok(())
            }
        };
        let list = |n: usize| {
            if n > MAX_LIST {
                Err(format!("a list of {n} items (at most {MAX_LIST})"))
            } else {
                Ok(())
            }
        };
        match self {
            Request::Hello { client, .. } => path(client),
            Request::Open { path: p, .. }
            | Request::Stat { path: p }
            | Request::Mkdir { path: p, .. }
            | Request::Rmdir { path: p }
            | Request::Readdir { path: p, .. }
            | Request::Unlink { path: p }
            | Request::GraftUnload { point: p }
            | Request::GraftStats { point: p }
            | Request::GraftRecord { point: p, .. }
            | Request::GraftRecordStop { point: p }
            | Request::GraftTryStop { point: p, .. }
            | Request::Mount { path: p }
            | Request::Unmount { path: p } => path(p),
            Request::Rename { from, to } => path(from).and(path(to)),
            Request::Read { len, to_shm: None, .. } => data(*len as usize, MAX_DATA),
            Request::Write {
                data: Payload::Inline(d),
                ..
            } => data(d.len(), MAX_DATA),
            Request::GraftLoad { point, wasm } => path(point).and(data(wasm.len(), MAX_MODULE)),
            Request::GraftStage { wasm } => data(wasm.len(), MAX_MODULE),
            Request::GraftTry { point, wasm, .. } => path(point).and(data(wasm.len(), MAX_MODULE)),
            Request::Run { wasm, setup, then, .. } => {
                let modules = wasm.len() + then.iter().map(|t| t.wasm.len()).sum::<usize>();
                data(modules, MAX_MODULE)?;
                list(then.len())?;
                for t in then {
                    list(t.args.len())?;
                    t.args.iter().try_for_each(|a| bytes(a))?;
                }
                let s = setup;
                list(s.args.len()).and(list(s.env.len())).and(list(s.dirs.len()))?;
                s.args.iter().chain(&s.env).try_for_each(|a| bytes(a))?;
                s.dirs.iter().try_for_each(|(p, n)| bytes(p).and(bytes(n)))?;
                s.cwd.as_deref().map_or(Ok(()), bytes)
            }
            Request::Input { data: d } => data(d.len(), MAX_DATA),
            Request::GraftLoadFile { path: p, point, wasm } => {
                path(p).and(path(point)).and(data(wasm.len(), MAX_MODULE))
            }
            Request::GraftUnloadFile { path: p, point } => path(p).and(path(point)),
            Request::GraftWriteMemory { point, data: d, .. } => path(point).and(data(d.len(), MAX_DATA)),
            Request::GraftSymbol { point, symbol } => path(point).and(path(symbol)),
            Request::GraftCall { point, control, args } => path(point).and(path(control)).and(list(args.len())),
            Request::EventFilter { inodes, names, .. } => {
                list(inodes.len()).and(list(names.len()))?;
                names.iter().try_for_each(|n| path(n))
            }
            Request::OpenAt { path: p, .. }
            | Request::StatAt { path: p, .. }
            | Request::MkdirAt { path: p, .. }
            | Request::MknodAt { path: p, .. }
            | Request::ReadlinkAt { path: p, .. }
            | Request::UnlinkAt { path: p, .. }
            | Request::RmdirAt { path: p, .. }
            | Request::SetattrAt { path: p, .. }
            | Request::AccessAt { path: p, .. }
            | Request::ReaddirAt { path: p, .. }
            | Request::ListXattr { path: p, .. } => bytes(p),
            Request::SymlinkAt { target, path: p, .. } => bytes(target).and(bytes(p)),
            Request::RenameAt { from, to, .. } | Request::LinkAt { from, to, .. } => bytes(from).and(bytes(to)),
            Request::GetXattr { path: p, name, .. } | Request::RemoveXattr { path: p, name, .. } => {
                bytes(p).and(bytes(name))
            }
            Request::SetXattr {
                path: p, name, value, ..
            } => bytes(p).and(bytes(name)).and(data(value.len(), MAX_XATTR)),
            Request::StreamBind { path: p, wasm } => path(p).and(data(wasm.as_ref().map_or(0, Vec::len), MAX_MODULE)),
            Request::StreamStatus { path: p } => path(p),
            Request::StreamControl { path: p, name, args } => path(p).and(path(name)).and(list(args.len())),
            _ => Ok(()),
        }
    }

    /// The request's name, for accounts and messages.
    pub fn name(&self) -> &'static str {
        macro_rules! names {
            ($($v:ident),*) => { match self { $(Request::$v { .. } => stringify!($v),)* } };
        }
        names!(
            Hello,
            Null,
            Open,
            Close,
            Read,
            Write,
            Seek,
            Fsync,
            Ftruncate,
            Fstat,
            Stat,
            Mkdir,
            Rmdir,
            Readdir,
            Unlink,
            Rename,
            Sync,
            GraftLoad,
            GraftLoadFile,
            GraftUnload,
            GraftUnloadFile,
            GraftWriteMemory,
            GraftSymbol,
            GraftCall,
            GraftList,
            GraftStats,
            GraftEvents,
            Lock,
            GetLk,
            EventFilter,
            EventSubscribe,
            EventWait,
            Top,
            Mount,
            Unmount,
            OpenAt,
            StatAt,
            MkdirAt,
            MknodAt,
            SymlinkAt,
            ReadlinkAt,
            UnlinkAt,
            RmdirAt,
            RenameAt,
            LinkAt,
            SetattrAt,
            Fsetattr,
            AccessAt,
            ReaddirAt,
            ReaddirFd,
            GetXattr,
            SetXattr,
            ListXattr,
            RemoveXattr,
            Fallocate,
            GraftStage,
            Run,
            Input,
            Kill,
            Signal,
            KillProgram,
            SetTickets,
            FallocateMode,
            StreamBind,
            StreamStatus,
            StreamControl,
            StreamFiles,
            StreamCollect,
            GraftRecord,
            GraftRecordStop,
            GraftTry,
            GraftTryStop
        )
    }
}

/// A response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Hello {
        version: u32,
        pid: u64,
        privileged: bool,
        shm: bool,
    },
    Ok,
    Fd(u32),
    /// A byte count (a read into shared memory, a write).
    Count(u64),
    Data(#[serde(with = "serde_bytes")] Vec<u8>),
    Stat(Stat),
    /// A page of a listing (`.` and `..` left out), at most [`PAGE_BYTES`] of entries; `next`
    /// is the cookie that continues it, `None` at the end. A cookie stays valid while the
    /// directory changes: an entry present throughout a listing is given exactly once.
    Entries {
        entries: Vec<DirEntry>,
        next: Option<u64>,
    },
    Graft(GraftInfo),
    Slots(Vec<SlotInfo>),
    Slot(SlotInfo),
    Value(i64),
    Address(u32),
    GraftEvents(Vec<String>),
    Lock(Option<LockInfo>),
    Events(Vec<Event>),
    Top(Top),
    Error(ErrorReply),
    /// Names (of extended attributes), each as bytes.
    Names(Vec<Vec<u8>>),
    /// What a running program wrote: `stream` 1 (standard output) or 2 (standard error).
    Output {
        stream: u8,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// A program ended: its exit `code` (the status a shell sees: 134 if it trapped, 137 if
    /// killed), and the trap's message if it trapped.
    Exited {
        code: i32,
        trap: Option<String>,
    },
    /// The stream codec of a file or directory, if it has one ([`Request::StreamStatus`]).
    Stream(Option<StreamInfo>),
    /// The files that depend on stream codec modules ([`Request::StreamFiles`]).
    StreamFiles(Vec<StreamFile>),
}

/// The ioctls the FUSE mount answers on an open file. FUSE passes only restricted ioctls: the
/// size and direction are encoded in the command, and the kernel copies that many bytes in.
pub mod ioctl {
    /// Bytes of the graftpoint's name in [`FdGraft`], NUL-padded.
    pub const POINT_BYTES: usize = 56;
    /// Size of `struct vino_fd_graft { uint64_t token; char point[56]; }`.
    pub const FD_GRAFT_BYTES: usize = 8 + POINT_BYTES;
    /// `_IOW('V', 1, struct vino_fd_graft)`: binds the module staged under `token` (a client's
    /// `graft_stage`) to the descriptor, at `point`: `file.compute_ra` (this descriptor's
    /// read-ahead), `file.block_buddy` or `lock.grant` (the file's), or `vas.pick_victim` (the
    /// caller's pages on the mount).
    pub const GRAFT: u32 = (1 << 30) | ((FD_GRAFT_BYTES as u32) << 16) | ((b'V' as u32) << 8) | 1;

    /// `_IOWR('V', 2, struct vino_fd_graft)`: starts the module staged under `token` in shadow
    /// (`vino graft try`) beside the live policy at `point` of the descriptor, as [`GRAFT`]
    /// would bind it (`file.compute_ra`, `lock.grant`, `vas.pick_victim`); the kernel chooses
    /// the sample. Answers where the shadow is, in the same struct: the mount's process that
    /// holds the descriptor (in `token`) and the graftpoint's name there, for the caller to stop
    /// it through its client connection (`graft_try_stop`).
    pub const TRY: u32 = (3 << 30) | ((FD_GRAFT_BYTES as u32) << 16) | ((b'V' as u32) << 8) | 2;

    /// What [`GRAFT`] carries.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct FdGraft {
        pub token: u64,
        pub point: String,
    }

    impl FdGraft {
        /// The ioctl's argument; `None` if the name does not fit.
        pub fn encode(&self) -> Option<[u8; FD_GRAFT_BYTES]> {
            let name = self.point.as_bytes();
            if name.is_empty() || name.len() >= POINT_BYTES || name.contains(&0) {
                return None;
            }
            let mut out = [0u8; FD_GRAFT_BYTES];
            out[..8].copy_from_slice(&self.token.to_ne_bytes());
            out[8..8 + name.len()].copy_from_slice(name);
            Some(out)
        }

        /// Reads the argument back; `None` unless it is exactly the size and the name is
        /// NUL-terminated UTF-8.
        pub fn decode(bytes: &[u8]) -> Option<FdGraft> {
            if bytes.len() != FD_GRAFT_BYTES {
                return None;
            }
            let token = u64::from_ne_bytes(bytes[..8].try_into().ok()?);
            let name = &bytes[8..];
            let end = name.iter().position(|&b| b == 0)?;
            let point = std::str::from_utf8(&name[..end]).ok()?.to_string();
            (!point.is_empty()).then_some(FdGraft { token, point })
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn fd_graft_round_trips_and_refuses_bad_names() {
            let g = FdGraft {
                token: 0x1234_5678_9abc_def0,
                point: "file.compute_ra".into(),
            };
            assert_eq!(FdGraft::decode(&g.encode().unwrap()), Some(g));
            let long = FdGraft {
                token: 1,
                point: "x".repeat(POINT_BYTES),
            };
            assert_eq!(long.encode(), None);
            assert_eq!(FdGraft::decode(&[0u8; FD_GRAFT_BYTES]), None, "empty name");
            assert_eq!(FdGraft::decode(&[b'a'; FD_GRAFT_BYTES]), None, "no NUL");
            assert_eq!(FdGraft::decode(&[0u8; 8]), None, "short");
            // _IOW('V', 1, 64 bytes), as the C header computes it.
            assert_eq!(GRAFT, 0x4040_5601);
        }
    }
}
