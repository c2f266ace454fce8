//! A blocking client of `vinod`, the VINO daemon.
//!
//! ```no_run
//! use vino_client::{Client, OpenFlags};
//! let mut c = Client::connect_default()?;
//! let fd = c.open("/hello", OpenFlags::create())?;
//! c.write(fd, b"hello")?;
//! c.close(fd)?;
//! # Ok::<(), vino_client::ClientError>(())
//! ```
//!
//! A connection is one kernel process: its open files, grafts and locks go away when the
//! `Client` is dropped (or the program dies). Every method sends one request and waits for its
//! answer; errors carry the kernel's errno and message. Reads and writes of at least
//! [`SHM_THRESHOLD`] bytes go through shared memory when the connection has it.
//!
//! The socket is `$VINO_SOCKET`, or [`DEFAULT_SOCKET`] (`/run/vino/vinod.sock`).
//!
//! The `*_at` methods take paths as bytes (`&str`, `&[u8]`, `Vec<u8>`: a name need not be
//! UTF-8) and a starting directory: `None` for the root, `Some(fd)` for a directory opened with
//! [`OpenFlags::directory`]. An absolute path starts at the root either way.
//!
//! ```no_run
//! use vino_client::{Client, OpenFlags};
//! let mut c = Client::connect_default()?;
//! c.mkdir_at(None, "/d", 0o755)?;
//! let dir = c.open_at(None, "/d", OpenFlags::directory())?;
//! let fd = c.open_at(Some(dir), b"caf\xe9", OpenFlags::create())?;
//! c.symlink_at("caf\u{e9}", Some(dir), "link")?;
//! assert_eq!(c.readlink_at(Some(dir), "link")?, "caf\u{e9}".as_bytes());
//! # Ok::<(), vino_client::ClientError>(())
//! ```

mod shm;

pub use shm::SharedMemory;
pub use vino_proto::{
    CacheTop, DEFAULT_SOCKET, DirEntry, EgressTop, ErrorReply, Event, EventKind, FileKind, GraftInfo, GraftStats,
    GraftTop, Held, LockInfo, LockKind, MAX_DATA, MAX_RECORDING, MountTop, NetTop, OpenFlags, PipeStage, ProcessTop,
    ProgramSetup, ProgramSocket, RequestTop, SetAttrs, SetTime, SlotInfo, SocketTop, Stat, StreamFile, StreamInfo, Top,
    UserTop, XattrHow, errno,
};

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use std::fmt;
use std::io::{BufReader, IoSlice, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use vino_proto::{FrameError, MAX_FRAME, Payload, Request, Response, VERSION};

/// Reads and writes of at least this many bytes use shared memory, when there is some.
pub const SHM_THRESHOLD: usize = 16 << 10;
/// The shared memory a connection asks for by default.
pub const DEFAULT_SHM: usize = 1 << 20;

/// A failed call: the kernel's errno and message, or an I/O error on the connection (EIO or the
/// OS errno).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientError {
    pub errno: i32,
    pub message: String,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ClientError {}

impl From<std::io::Error> for ClientError {
    fn from(e: std::io::Error) -> Self {
        ClientError {
            errno: e.raw_os_error().unwrap_or(errno::EIO),
            message: e.to_string(),
        }
    }
}

impl From<nix::Error> for ClientError {
    fn from(e: nix::Error) -> Self {
        ClientError {
            errno: e as i32,
            message: e.desc().to_string(),
        }
    }
}

impl From<FrameError> for ClientError {
    fn from(e: FrameError) -> Self {
        let errno = match &e {
            FrameError::Io(io) => io.raw_os_error().unwrap_or(errno::EIO),
            FrameError::TooLarge { .. } => errno::EMSGSIZE,
            FrameError::Decode(_) => errno::EPROTO,
            FrameError::Closed | FrameError::Truncated => errno::EIO,
        };
        ClientError {
            errno,
            message: format!("vinod: {e}"),
        }
    }
}

impl From<ErrorReply> for ClientError {
    fn from(e: ErrorReply) -> Self {
        ClientError {
            errno: e.errno,
            message: e.message,
        }
    }
}

pub type Result<T> = std::result::Result<T, ClientError>;

/// How to connect.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// A name for `vino top`.
    pub client: String,
    /// Bytes of shared memory to pass the daemon (0: none, all data through the socket).
    pub shm: usize,
    /// How long to poll for an answer before sleeping on the socket (zero: sleep at once).
    pub spin: std::time::Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        let client = std::env::args()
            .next()
            .and_then(|a| Path::new(&a).file_name().map(|n| n.to_string_lossy().into_owned()));
        ConnectOptions {
            client: client.unwrap_or_else(|| "client".into()),
            shm: DEFAULT_SHM,
            spin: vino_proto::SPIN,
        }
    }
}

/// A connection to the daemon: one kernel process.
pub struct Client {
    stream: UnixStream,
    /// Reads answers from `stream`, a small one's header and body in one read.
    reader: BufReader<UnixStream>,
    buf: Vec<u8>,
    pid: u64,
    privileged: bool,
    shm: Option<SharedMemory>,
    shm_threshold: usize,
    spin: std::time::Duration,
    /// How long the last call took: a client whose answers come slowly (a busy daemon, a miss
    /// that goes to the device) sleeps at once instead of polling in vain.
    last_call: std::time::Duration,
}

fn unexpected(r: Response) -> ClientError {
    ClientError {
        errno: errno::EPROTO,
        message: format!("vinod: unexpected answer {r:?}"),
    }
}

/// A page of a directory listing: its entries, and the cookie of the next page (`None` at the
/// end).
pub type Page = (Vec<DirEntry>, Option<u64>);

macro_rules! expect {
    ($resp:expr, $pat:pat => $val:expr) => {
        match $resp {
            $pat => Ok($val),
            other => Err(unexpected(other)),
        }
    };
}

impl Client {
    /// Connects to the daemon at `path`, with shared memory.
    pub fn connect(path: impl AsRef<Path>) -> Result<Client> {
        Client::connect_with(path, &ConnectOptions::default())
    }

    /// Connects to `$VINO_SOCKET`, or [`DEFAULT_SOCKET`].
    pub fn connect_default() -> Result<Client> {
        Client::connect(default_socket())
    }

    pub fn connect_with(path: impl AsRef<Path>, opts: &ConnectOptions) -> Result<Client> {
        let path = path.as_ref();
        let stream = UnixStream::connect(path)
            .map_err(|e| ClientError::from(e).context(&format!("connecting to {}", path.display())))?;
        let shm = if opts.shm > 0 {
            Some(SharedMemory::new(opts.shm)?)
        } else {
            None
        };
        let reader = BufReader::with_capacity(64 << 10, stream.try_clone()?);
        let mut c = Client {
            stream,
            reader,
            buf: Vec::new(),
            pid: 0,
            privileged: false,
            shm,
            shm_threshold: SHM_THRESHOLD,
            spin: opts.spin,
            last_call: std::time::Duration::ZERO,
        };
        c.hello(&opts.client)?;
        Ok(c)
    }

    fn hello(&mut self, client: &str) -> Result<()> {
        let shm_len = self.shm.as_ref().map_or(0, |s| s.len() as u64);
        let frame = vino_proto::encode(&Request::Hello {
            version: VERSION,
            client: client.to_string(),
            shm_len,
        });
        match &self.shm {
            Some(shm) => send_with_fd(&self.stream, &frame, shm.fd())?,
            None => (&self.stream).write_all(&frame)?,
        }
        match self.receive()? {
            Response::Hello {
                pid, privileged, shm, ..
            } => {
                self.pid = pid;
                self.privileged = privileged;
                if !shm {
                    self.shm = None;
                }
                Ok(())
            }
            Response::Error(e) => Err(e.into()),
            other => Err(unexpected(other)),
        }
    }

    /// The kernel's id of this connection's process.
    pub fn pid(&self) -> u64 {
        self.pid
    }

    /// True if the daemon runs this process privileged (root, or the configured group).
    pub fn privileged(&self) -> bool {
        self.privileged
    }

    /// True if bulk data goes through shared memory.
    pub fn has_shm(&self) -> bool {
        self.shm.is_some()
    }

    /// Reads and writes of at least `bytes` use shared memory (`usize::MAX`: never).
    pub fn set_shm_threshold(&mut self, bytes: usize) {
        self.shm_threshold = bytes;
    }

    fn receive(&mut self) -> Result<Response> {
        vino_proto::read_frame(&mut self.reader, &mut self.buf, MAX_FRAME)?;
        Ok(vino_proto::decode(&self.buf)?)
    }

    /// Sends one request and returns its answer (an error answer as `Err`).
    pub fn call(&mut self, req: &Request) -> Result<Response> {
        // What the daemon would refuse (and hang up on) is refused here, with the reason,
        // instead of surfacing as a broken pipe half way through sending it.
        if let Err(why) = req.check() {
            return Err(ClientError {
                errno: errno::E2BIG,
                message: format!("{}: {why}, more than vinod accepts", req.name()),
            });
        }
        let started = std::time::Instant::now();
        vino_proto::write_frame(&mut self.stream, req)?;
        // Most answers come within microseconds: poll briefly before sleeping on the socket.
        if self.reader.buffer().is_empty() && !self.spin.is_zero() && self.last_call < 2 * self.spin {
            vino_proto::spin_until_readable(self.stream.as_fd(), self.spin);
        }
        let answer = self.receive();
        self.last_call = started.elapsed();
        match answer? {
            Response::Error(e) => Err(e.into()),
            r => Ok(r),
        }
    }

    fn ok(&mut self, req: Request) -> Result<()> {
        expect!(self.call(&req)?, Response::Ok => ())
    }

    /// A request that does nothing: the round trip alone.
    pub fn null(&mut self) -> Result<()> {
        self.ok(Request::Null)
    }

    // ---- files ------------------------------------------------------------------------------

    pub fn open(&mut self, path: &str, flags: OpenFlags) -> Result<u32> {
        expect!(self.call(&Request::Open { path: path.into(), flags })?, Response::Fd(fd) => fd)
    }

    pub fn close(&mut self, fd: u32) -> Result<()> {
        self.ok(Request::Close { fd })
    }

    /// Reads at the file offset; returns how many bytes (0 at the end).
    pub fn read(&mut self, fd: u32, buf: &mut [u8]) -> Result<usize> {
        self.read_at(fd, buf, None)
    }

    pub fn pread(&mut self, fd: u32, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.read_at(fd, buf, Some(offset))
    }

    fn use_shm(&self, len: usize) -> bool {
        len >= self.shm_threshold && self.shm.as_ref().is_some_and(|s| len <= s.len())
    }

    fn read_at(&mut self, fd: u32, buf: &mut [u8], offset: Option<u64>) -> Result<usize> {
        if self.use_shm(buf.len()) {
            let req = Request::Read {
                fd,
                len: buf.len() as u32,
                offset,
                to_shm: Some(0),
            };
            let n = expect!(self.call(&req)?, Response::Count(n) => n as usize)?;
            assert!(n <= buf.len(), "the daemon read more than asked");
            self.shm.as_ref().expect("checked").get(0, &mut buf[..n]);
            return Ok(n);
        }
        let len = buf.len().min(MAX_DATA) as u32;
        let data = expect!(self.call(&Request::Read { fd, len, offset, to_shm: None })?, Response::Data(d) => d)?;
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        Ok(n)
    }

    /// Writes at the file offset (or the end, if opened to append); returns how many bytes.
    pub fn write(&mut self, fd: u32, data: &[u8]) -> Result<usize> {
        self.write_at(fd, data, None)
    }

    pub fn pwrite(&mut self, fd: u32, data: &[u8], offset: u64) -> Result<usize> {
        self.write_at(fd, data, Some(offset))
    }

    fn write_at(&mut self, fd: u32, data: &[u8], offset: Option<u64>) -> Result<usize> {
        let payload = if self.use_shm(data.len()) {
            self.shm.as_mut().expect("checked").put(0, data);
            Payload::Shm {
                offset: 0,
                len: data.len() as u32,
            }
        } else {
            Payload::Inline(data[..data.len().min(MAX_DATA)].to_vec())
        };
        expect!(self.call(&Request::Write { fd, data: payload, offset })?, Response::Count(n) => n as usize)
    }

    pub fn seek(&mut self, fd: u32, offset: u64) -> Result<()> {
        self.ok(Request::Seek { fd, offset })
    }

    pub fn fsync(&mut self, fd: u32) -> Result<()> {
        self.ok(Request::Fsync { fd })
    }

    pub fn ftruncate(&mut self, fd: u32, size: u64) -> Result<()> {
        self.ok(Request::Ftruncate { fd, size })
    }

    pub fn fstat(&mut self, fd: u32) -> Result<Stat> {
        expect!(self.call(&Request::Fstat { fd })?, Response::Stat(s) => s)
    }

    pub fn stat(&mut self, path: &str) -> Result<Stat> {
        expect!(self.call(&Request::Stat { path: path.into() })?, Response::Stat(s) => s)
    }

    pub fn mkdir(&mut self, path: &str, mode: u16) -> Result<()> {
        self.ok(Request::Mkdir {
            path: path.into(),
            mode,
        })
    }

    pub fn rmdir(&mut self, path: &str) -> Result<()> {
        self.ok(Request::Rmdir { path: path.into() })
    }

    /// The entries of the directory at `path` (`.` and `..` left out), read page by page.
    pub fn readdir(&mut self, path: &str) -> Result<Vec<DirEntry>> {
        self.list(|cookie| Request::Readdir {
            path: path.into(),
            cookie,
        })
    }

    /// A page of the directory at `path` from `cookie` on (0: the start): its entries and the
    /// cookie of the next page, `None` at the end. An entry present throughout a listing is
    /// given exactly once, however the directory changes between pages.
    pub fn readdir_page(&mut self, path: &str, cookie: u64) -> Result<Page> {
        self.page(&Request::Readdir {
            path: path.into(),
            cookie,
        })
    }

    fn page(&mut self, req: &Request) -> Result<Page> {
        expect!(self.call(req)?, Response::Entries { entries, next } => (entries, next))
    }

    /// Every page of a listing, `req` asking for the one at a cookie.
    fn list(&mut self, req: impl Fn(u64) -> Request) -> Result<Vec<DirEntry>> {
        let (mut out, mut cookie) = (Vec::new(), 0);
        loop {
            let (entries, next) = self.page(&req(cookie))?;
            out.extend(entries);
            match next {
                Some(next) => cookie = next,
                None => return Ok(out),
            }
        }
    }

    pub fn unlink(&mut self, path: &str) -> Result<()> {
        self.ok(Request::Unlink { path: path.into() })
    }

    pub fn rename(&mut self, from: &str, to: &str) -> Result<()> {
        self.ok(Request::Rename {
            from: from.into(),
            to: to.into(),
        })
    }

    /// Writes everything to the device.
    pub fn sync(&mut self) -> Result<()> {
        self.ok(Request::Sync)
    }

    // ---- names, *at style -------------------------------------------------------------------

    fn stat_answer(&mut self, req: Request) -> Result<Stat> {
        expect!(self.call(&req)?, Response::Stat(s) => s)
    }

    /// Opens (or creates) `path` from `dirfd` (`None`: the root).
    pub fn open_at(&mut self, dirfd: Option<u32>, path: impl AsRef<[u8]>, flags: OpenFlags) -> Result<u32> {
        let req = Request::OpenAt {
            dirfd,
            path: path.as_ref().to_vec(),
            flags,
        };
        expect!(self.call(&req)?, Response::Fd(fd) => fd)
    }

    /// What `path` names; a trailing symbolic link is followed if `follow` (else `lstat`).
    pub fn stat_at(&mut self, dirfd: Option<u32>, path: impl AsRef<[u8]>, follow: bool) -> Result<Stat> {
        self.stat_answer(Request::StatAt {
            dirfd,
            path: path.as_ref().to_vec(),
            follow,
        })
    }

    /// The symbolic link itself, not what it points to.
    pub fn lstat(&mut self, path: impl AsRef<[u8]>) -> Result<Stat> {
        self.stat_at(None, path, false)
    }

    pub fn mkdir_at(&mut self, dirfd: Option<u32>, path: impl AsRef<[u8]>, mode: u16) -> Result<Stat> {
        self.stat_answer(Request::MkdirAt {
            dirfd,
            path: path.as_ref().to_vec(),
            mode,
        })
    }

    /// Makes a regular file, FIFO, socket, or (privileged) device node `rdev`.
    pub fn mknod_at(
        &mut self,
        dirfd: Option<u32>,
        path: impl AsRef<[u8]>,
        kind: FileKind,
        mode: u16,
        rdev: u64,
    ) -> Result<Stat> {
        self.stat_answer(Request::MknodAt {
            dirfd,
            path: path.as_ref().to_vec(),
            kind,
            mode,
            rdev,
        })
    }

    /// Makes a symbolic link at `path` holding `target` (which may dangle).
    pub fn symlink_at(&mut self, target: impl AsRef<[u8]>, dirfd: Option<u32>, path: impl AsRef<[u8]>) -> Result<Stat> {
        self.stat_answer(Request::SymlinkAt {
            target: target.as_ref().to_vec(),
            dirfd,
            path: path.as_ref().to_vec(),
        })
    }

    /// The target of the symbolic link at `path`.
    pub fn readlink_at(&mut self, dirfd: Option<u32>, path: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        let req = Request::ReadlinkAt {
            dirfd,
            path: path.as_ref().to_vec(),
        };
        expect!(self.call(&req)?, Response::Data(d) => d)
    }

    pub fn unlink_at(&mut self, dirfd: Option<u32>, path: impl AsRef<[u8]>) -> Result<()> {
        self.ok(Request::UnlinkAt {
            dirfd,
            path: path.as_ref().to_vec(),
        })
    }

    pub fn rmdir_at(&mut self, dirfd: Option<u32>, path: impl AsRef<[u8]>) -> Result<()> {
        self.ok(Request::RmdirAt {
            dirfd,
            path: path.as_ref().to_vec(),
        })
    }

    /// Renames atomically; with `no_replace` an existing `to` fails with `EEXIST`.
    pub fn rename_at(
        &mut self,
        from_dirfd: Option<u32>,
        from: impl AsRef<[u8]>,
        to_dirfd: Option<u32>,
        to: impl AsRef<[u8]>,
        no_replace: bool,
    ) -> Result<()> {
        self.ok(Request::RenameAt {
            from_dirfd,
            from: from.as_ref().to_vec(),
            to_dirfd,
            to: to.as_ref().to_vec(),
            no_replace,
        })
    }

    /// Gives the file at `from` a second name `to`; `follow`: a symbolic link at `from` is
    /// followed. The file's attributes after.
    pub fn link_at(
        &mut self,
        from_dirfd: Option<u32>,
        from: impl AsRef<[u8]>,
        to_dirfd: Option<u32>,
        to: impl AsRef<[u8]>,
        follow: bool,
    ) -> Result<Stat> {
        self.stat_answer(Request::LinkAt {
            from_dirfd,
            from: from.as_ref().to_vec(),
            to_dirfd,
            to: to.as_ref().to_vec(),
            follow,
        })
    }

    /// Changes mode, owner, size and times at once (each as its own right allows); the
    /// attributes after.
    pub fn setattr_at(
        &mut self,
        dirfd: Option<u32>,
        path: impl AsRef<[u8]>,
        follow: bool,
        attrs: SetAttrs,
    ) -> Result<Stat> {
        self.stat_answer(Request::SetattrAt {
            dirfd,
            path: path.as_ref().to_vec(),
            follow,
            attrs,
        })
    }

    /// [`Client::setattr_at`] on an open file.
    pub fn fsetattr(&mut self, fd: u32, attrs: SetAttrs) -> Result<Stat> {
        self.stat_answer(Request::Fsetattr { fd, attrs })
    }

    /// Sets the permission bits (`0o7777` at most).
    pub fn chmod(&mut self, path: impl AsRef<[u8]>, mode: u16) -> Result<Stat> {
        let attrs = SetAttrs {
            mode: Some(mode),
            ..SetAttrs::default()
        };
        self.setattr_at(None, path, true, attrs)
    }

    /// Changes the owner and/or group (`None` leaves one as it is).
    pub fn chown(&mut self, path: impl AsRef<[u8]>, uid: Option<u32>, gid: Option<u32>) -> Result<Stat> {
        let attrs = SetAttrs {
            uid,
            gid,
            ..SetAttrs::default()
        };
        self.setattr_at(None, path, true, attrs)
    }

    /// Sets the access and modification times.
    pub fn utimes(&mut self, path: impl AsRef<[u8]>, atime: SetTime, mtime: SetTime) -> Result<Stat> {
        let attrs = SetAttrs {
            atime,
            mtime,
            ..SetAttrs::default()
        };
        self.setattr_at(None, path, true, attrs)
    }

    /// Sets the size of the file at `path` (write permission needed).
    pub fn truncate(&mut self, path: impl AsRef<[u8]>, size: u64) -> Result<Stat> {
        let attrs = SetAttrs {
            size: Some(size),
            ..SetAttrs::default()
        };
        self.setattr_at(None, path, true, attrs)
    }

    /// Checks `mode` (4 read, 2 write, 1 execute; 0: the file exists): `EACCES` if refused.
    pub fn access_at(&mut self, dirfd: Option<u32>, path: impl AsRef<[u8]>, mode: u32, follow: bool) -> Result<()> {
        self.ok(Request::AccessAt {
            dirfd,
            path: path.as_ref().to_vec(),
            mode,
            follow,
        })
    }

    /// The entries of a directory, read page by page.
    pub fn readdir_at(&mut self, dirfd: Option<u32>, path: impl AsRef<[u8]>) -> Result<Vec<DirEntry>> {
        let path = path.as_ref();
        self.list(|cookie| Request::ReaddirAt {
            dirfd,
            path: path.to_vec(),
            cookie,
        })
    }

    /// A page of a directory from `cookie` on (see [`Client::readdir_page`]).
    pub fn readdir_at_page(&mut self, dirfd: Option<u32>, path: impl AsRef<[u8]>, cookie: u64) -> Result<Page> {
        self.page(&Request::ReaddirAt {
            dirfd,
            path: path.as_ref().to_vec(),
            cookie,
        })
    }

    /// The entries of the directory open as `fd`, read page by page.
    pub fn readdir_fd(&mut self, fd: u32) -> Result<Vec<DirEntry>> {
        self.list(|cookie| Request::ReaddirFd { fd, cookie })
    }

    /// A page of the directory open as `fd` from `cookie` on (see [`Client::readdir_page`]).
    pub fn readdir_fd_page(&mut self, fd: u32, cookie: u64) -> Result<Page> {
        self.page(&Request::ReaddirFd { fd, cookie })
    }

    /// The value of extended attribute `name` (`ENODATA` if there is none).
    pub fn getxattr(
        &mut self,
        dirfd: Option<u32>,
        path: impl AsRef<[u8]>,
        follow: bool,
        name: impl AsRef<[u8]>,
    ) -> Result<Vec<u8>> {
        let req = Request::GetXattr {
            dirfd,
            path: path.as_ref().to_vec(),
            follow,
            name: name.as_ref().to_vec(),
        };
        expect!(self.call(&req)?, Response::Data(d) => d)
    }

    /// Sets extended attribute `name` (only `user.` names are supported).
    pub fn setxattr(
        &mut self,
        dirfd: Option<u32>,
        path: impl AsRef<[u8]>,
        follow: bool,
        name: impl AsRef<[u8]>,
        value: &[u8],
        how: XattrHow,
    ) -> Result<()> {
        self.ok(Request::SetXattr {
            dirfd,
            path: path.as_ref().to_vec(),
            follow,
            name: name.as_ref().to_vec(),
            value: value.to_vec(),
            how,
        })
    }

    /// The names of the file's extended attributes.
    pub fn listxattr(&mut self, dirfd: Option<u32>, path: impl AsRef<[u8]>, follow: bool) -> Result<Vec<Vec<u8>>> {
        let req = Request::ListXattr {
            dirfd,
            path: path.as_ref().to_vec(),
            follow,
        };
        expect!(self.call(&req)?, Response::Names(n) => n)
    }

    pub fn removexattr(
        &mut self,
        dirfd: Option<u32>,
        path: impl AsRef<[u8]>,
        follow: bool,
        name: impl AsRef<[u8]>,
    ) -> Result<()> {
        self.ok(Request::RemoveXattr {
            dirfd,
            path: path.as_ref().to_vec(),
            follow,
            name: name.as_ref().to_vec(),
        })
    }

    /// Allocates `len` bytes from `offset` in the file open (for writing) as `fd`; the size
    /// grows to cover them unless `keep_size`.
    pub fn fallocate(&mut self, fd: u32, keep_size: bool, offset: u64, len: u64) -> Result<()> {
        self.ok(Request::Fallocate {
            fd,
            keep_size,
            offset,
            len,
        })
    }

    /// fallocate(2) in `mode` (Linux's flag bits: `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`
    /// punches a hole, `FALLOC_FL_ZERO_RANGE` zeroes a range) on `len` bytes from `offset` of
    /// the file open (for writing) as `fd`. Modes 0 and `KEEP_SIZE` go as
    /// [`Client::fallocate`], which any daemon knows.
    pub fn fallocate_mode(&mut self, fd: u32, mode: u32, offset: u64, len: u64) -> Result<()> {
        const KEEP_SIZE: u32 = 1;
        if mode & !KEEP_SIZE == 0 {
            return self.fallocate(fd, mode == KEEP_SIZE, offset, len);
        }
        self.ok(Request::FallocateMode { fd, mode, offset, len })
    }

    // ---- stream files -----------------------------------------------------------------------

    /// A stream request: a daemon that predates stream files refuses it as undecodable
    /// (`EPROTO`, and it hangs up), which is said plainly here.
    fn stream_call(&mut self, req: Request) -> Result<Response> {
        self.call(&req).map_err(|e| match e.errno {
            errno::EPROTO => ClientError {
                errno: errno::EOPNOTSUPP,
                message: format!("{}: this vinod predates stream files ({})", req.name(), e.message),
            },
            _ => e,
        })
    }

    /// Binds the stream codec `wasm` (a `file.stream` graft) to the empty regular file or the
    /// directory at `path` (new files in a directory get its codec). Only the file's owner may.
    pub fn stream_bind(&mut self, path: &str, wasm: &[u8]) -> Result<()> {
        let req = Request::StreamBind {
            path: path.into(),
            wasm: Some(wasm.to_vec()),
        };
        expect!(self.stream_call(req)?, Response::Ok => ())
    }

    /// Unbinds the stream codec of the file or directory at `path`.
    pub fn stream_unbind(&mut self, path: &str) -> Result<()> {
        let req = Request::StreamBind {
            path: path.into(),
            wasm: None,
        };
        expect!(self.stream_call(req)?, Response::Ok => ())
    }

    /// The stream codec of the file or directory at `path`, if it has one.
    pub fn stream_status(&mut self, path: &str) -> Result<Option<StreamInfo>> {
        expect!(self.stream_call(Request::StreamStatus { path: path.into() })?, Response::Stream(s) => s)
    }

    /// Which files and directories depend on which stream codec module: the caller's own, or
    /// all for a privileged caller.
    pub fn stream_files(&mut self) -> Result<Vec<StreamFile>> {
        expect!(self.stream_call(Request::StreamFiles)?, Response::StreamFiles(f) => f)
    }

    /// Removes the stored codec modules no file names any more (privileged); how many went.
    pub fn stream_collect(&mut self) -> Result<u64> {
        expect!(self.stream_call(Request::StreamCollect)?, Response::Value(n) => n as u64)
    }

    /// Calls control function `name` (without its `vino_ctl_` prefix) of the owner's codec of
    /// the stream file at `path`.
    pub fn stream_control(&mut self, path: &str, name: &str, args: &[i64]) -> Result<i64> {
        let req = Request::StreamControl {
            path: path.into(),
            name: name.into(),
            args: args.to_vec(),
        };
        expect!(self.stream_call(req)?, Response::Value(v) => v)
    }

    /// Gives the codec of the stream file at `path` a 256-bit key, as [`stream_key_words`]
    /// splits it: `set_key(word, value)` for words 0 to 3. A codec that refuses a word (a
    /// result other than 0) is `EINVAL`.
    pub fn stream_set_key(&mut self, path: &str, key: &[u8; 32]) -> Result<()> {
        for (word, value) in stream_key_words(key).into_iter().enumerate() {
            let r = self.stream_control(path, "set_key", &[word as i64, value])?;
            if r != 0 {
                return Err(ClientError {
                    errno: errno::EINVAL,
                    message: format!("the stream codec of {path} refused key word {word} (it answered {r})"),
                });
            }
        }
        Ok(())
    }

    // ---- grafts -----------------------------------------------------------------------------

    /// Loads a graft at a graftpoint of this process (`vas.pick_victim`, `file.compute_ra/<fd>`)
    /// or a global one (privileged).
    pub fn graft_load(&mut self, point: &str, wasm: &[u8]) -> Result<GraftInfo> {
        expect!(self.call(&Request::GraftLoad { point: point.into(), wasm: wasm.to_vec() })?, Response::Graft(g) => g)
    }

    /// Keeps a graft module in the kernel for an ioctl on the FUSE mount to bind to a
    /// descriptor ([`vino_proto::ioctl`]); returns the token the ioctl carries. Good once, for
    /// this user, for a minute.
    pub fn graft_stage(&mut self, wasm: &[u8]) -> Result<u64> {
        expect!(self.call(&Request::GraftStage { wasm: wasm.to_vec() })?, Response::Value(t) => t as u64)
    }

    /// Grafts a file this program opened on the daemon's FUSE mount (`fd`: an ordinary
    /// descriptor of this program, not one of the daemon's): stages the module over this connection, then binds it with an
    /// ioctl on `fd` that carries the token. `point` is `file.compute_ra` (this descriptor's
    /// read-ahead), `file.block_buddy` or `lock.grant` (the file's), or `vas.pick_victim` (this
    /// user's pages on the mount).
    pub fn graft_mount_fd(&mut self, fd: std::os::fd::RawFd, point: &str, wasm: &[u8]) -> Result<()> {
        self.mount_fd_ioctl(fd, vino_proto::ioctl::GRAFT, "grafting", point, wasm)
            .map(drop)
    }

    /// Starts `wasm` in shadow (`vino graft try`) beside the live policy at `point` of `fd`, an
    /// open file on a VINO mount (`VINO_IOC_TRY`). Returns where the shadow is, for
    /// [`Client::graft_try_stop`]: the mount's process that holds the descriptor and the
    /// graftpoint's name there.
    pub fn graft_try_mount_fd(&mut self, fd: std::os::fd::RawFd, point: &str, wasm: &[u8]) -> Result<(u64, String)> {
        let out = self.mount_fd_ioctl(fd, vino_proto::ioctl::TRY, "trying", point, wasm)?;
        let at = vino_proto::ioctl::FdGraft::decode(&out).ok_or_else(|| ClientError {
            errno: errno::EIO,
            message: "the mount's answer to VINO_IOC_TRY is malformed".into(),
        })?;
        Ok((at.token, at.point))
    }

    /// Stages `wasm` and sends `cmd` (`VINO_IOC_GRAFT` or `VINO_IOC_TRY`) on `fd` with its
    /// token and `point`; the argument as the ioctl left it.
    fn mount_fd_ioctl(
        &mut self,
        fd: std::os::fd::RawFd,
        cmd: u32,
        doing: &str,
        point: &str,
        wasm: &[u8],
    ) -> Result<[u8; vino_proto::ioctl::FD_GRAFT_BYTES]> {
        let too_long = || ClientError {
            errno: errno::EINVAL,
            message: format!("graftpoint name `{point}` is empty or too long"),
        };
        let arg = vino_proto::ioctl::FdGraft {
            token: 0,
            point: point.into(),
        };
        arg.encode().ok_or_else(too_long)?;
        let token = self.graft_stage(wasm)?;
        let mut arg = vino_proto::ioctl::FdGraft { token, ..arg }
            .encode()
            .ok_or_else(too_long)?;
        // SAFETY: `arg` is the ioctl's whole argument (its size is in the command) and lives
        // across the call; the kernel reads it (and writes it back, for a read-write command),
        // and checks `fd` (EBADF).
        let r = unsafe { nix::libc::ioctl(fd, cmd as _, arg.as_mut_ptr()) };
        nix::errno::Errno::result(r).map_err(|e| ClientError {
            errno: e as i32,
            message: match e {
                nix::errno::Errno::ENOTTY => "the descriptor is not a file on a VINO mount".into(),
                nix::errno::Errno::EPERM => format!(
                    "{doing} {point} on this descriptor: not permitted (opened by another user, or the file's graftpoint is not this user's)"
                ),
                other => format!("{doing} {point} on this descriptor: {}", other.desc()),
            },
        })?;
        Ok(arg)
    }

    /// Binds a graft to a file: every later open of `path` by any process runs it at `point`.
    pub fn graft_load_file(&mut self, path: &str, point: &str, wasm: &[u8]) -> Result<GraftInfo> {
        let req = Request::GraftLoadFile {
            path: path.into(),
            point: point.into(),
            wasm: wasm.to_vec(),
        };
        expect!(self.call(&req)?, Response::Graft(g) => g)
    }

    pub fn graft_unload(&mut self, point: &str) -> Result<()> {
        self.ok(Request::GraftUnload { point: point.into() })
    }

    pub fn graft_unload_file(&mut self, path: &str, point: &str) -> Result<()> {
        self.ok(Request::GraftUnloadFile {
            path: path.into(),
            point: point.into(),
        })
    }

    /// Writes into the graft's memory (its shared state, e.g. a hot list).
    pub fn graft_write_memory(&mut self, point: &str, offset: u32, data: &[u8]) -> Result<()> {
        self.ok(Request::GraftWriteMemory {
            point: point.into(),
            offset,
            data: data.to_vec(),
        })
    }

    /// The address of a data symbol the graft exports.
    pub fn graft_symbol(&mut self, point: &str, symbol: &str) -> Result<u32> {
        expect!(self.call(&Request::GraftSymbol { point: point.into(), symbol: symbol.into() })?, Response::Address(a) => a)
    }

    /// Calls one of the graft's exported control functions.
    pub fn graft_call(&mut self, point: &str, control: &str, args: &[i64]) -> Result<i64> {
        let req = Request::GraftCall {
            point: point.into(),
            control: control.into(),
            args: args.to_vec(),
        };
        expect!(self.call(&req)?, Response::Value(v) => v)
    }

    pub fn graft_list(&mut self) -> Result<Vec<SlotInfo>> {
        expect!(self.call(&Request::GraftList)?, Response::Slots(s) => s)
    }

    pub fn graft_stats(&mut self, point: &str) -> Result<SlotInfo> {
        expect!(self.call(&Request::GraftStats { point: point.into() })?, Response::Slot(s) => s)
    }

    /// Starts recording the inputs of the graft at `point`, at most `limit` bytes.
    pub fn graft_record(&mut self, point: &str, limit: u64) -> Result<()> {
        self.record(point, limit, false)
    }

    /// Starts recording the kernel's own decisions at `point` (nothing bound there), at most
    /// `limit` bytes.
    pub fn graft_record_default(&mut self, point: &str, limit: u64) -> Result<()> {
        self.record(point, limit, true)
    }

    fn record(&mut self, point: &str, limit: u64, default: bool) -> Result<()> {
        let req = Request::GraftRecord {
            point: point.into(),
            limit,
            default,
        };
        expect!(self.call(&req)?, Response::Ok => ())
    }

    /// Stops the recording at `point`: its bytes (`vino_graft::record::Recording::from_bytes`).
    pub fn graft_record_stop(&mut self, point: &str) -> Result<Vec<u8>> {
        expect!(self.call(&Request::GraftRecordStop { point: point.into() })?, Response::Data(d) => d)
    }

    /// Runs `wasm` in shadow beside the live policy at `point` of process `pid` (this
    /// connection's if `None`), following 1 in `sample` pages or decisions (0: all pages; decisions as the kernel chooses).
    pub fn graft_try(&mut self, pid: Option<u64>, point: &str, wasm: &[u8], sample: u32) -> Result<()> {
        let req = Request::GraftTry {
            pid,
            point: point.into(),
            wasm: wasm.to_vec(),
            sample,
        };
        expect!(self.call(&req)?, Response::Ok => ())
    }

    /// Stops the shadow at `point` of `pid`: what it found, as JSON.
    pub fn graft_try_stop(&mut self, pid: Option<u64>, point: &str) -> Result<Vec<u8>> {
        let req = Request::GraftTryStop {
            pid,
            point: point.into(),
        };
        expect!(self.call(&req)?, Response::Data(d) => d)
    }

    /// What happened to this process's grafts (unloaded for failing) since the last call.
    pub fn graft_events(&mut self) -> Result<Vec<String>> {
        expect!(self.call(&Request::GraftEvents)?, Response::GraftEvents(e) => e)
    }

    // ---- locks and events -------------------------------------------------------------------

    /// Takes, or with [`LockKind::Unlock`] drops, a byte-range lock (`len` 0: to the end).
    pub fn lock(&mut self, fd: u32, kind: LockKind, start: u64, len: u64, wait: bool) -> Result<()> {
        self.ok(Request::Lock {
            fd,
            kind,
            start,
            len,
            wait,
        })
    }

    /// The first lock that would block this one, if any.
    pub fn getlk(&mut self, fd: u32, kind: LockKind, start: u64, len: u64) -> Result<Option<LockInfo>> {
        expect!(self.call(&Request::GetLk { fd, kind, start, len })?, Response::Lock(l) => l)
    }

    pub fn event_filter(&mut self, kind: EventKind, inodes: &[u64], names: &[String]) -> Result<()> {
        self.ok(Request::EventFilter {
            kind,
            inodes: inodes.to_vec(),
            names: names.to_vec(),
        })
    }

    pub fn event_subscribe(&mut self, kind: EventKind) -> Result<()> {
        self.ok(Request::EventSubscribe { kind })
    }

    /// Waits up to `timeout_ms` for events; returns those that came (maybe none). An
    /// [`EventKind::Overflow`] among them stands for events dropped because the queue was full.
    pub fn event_wait(&mut self, timeout_ms: u32) -> Result<Vec<Event>> {
        expect!(self.call(&Request::EventWait { timeout_ms })?, Response::Events(e) => e)
    }

    /// Has the daemon mount its file system through FUSE at `path` (absolute; privileged).
    pub fn mount(&mut self, path: &str) -> Result<()> {
        self.ok(Request::Mount { path: path.to_string() })
    }

    /// Undoes [`Client::mount`].
    pub fn unmount(&mut self, path: &str) -> Result<()> {
        self.ok(Request::Unmount { path: path.to_string() })
    }

    /// Every process and bound graft, with their counters.
    pub fn top(&mut self) -> Result<Top> {
        expect!(self.call(&Request::Top)?, Response::Top(t) => t)
    }
}

impl ClientError {
    fn context(mut self, what: &str) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

/// A 256-bit stream key as the example codecs take it: four 64-bit words, word `w` the key's
/// bytes `8w..8w+8` read little-endian (so the codec holds the key's bytes in their order).
pub fn stream_key_words(key: &[u8; 32]) -> [i64; 4] {
    std::array::from_fn(|w| i64::from_le_bytes(key[8 * w..8 * w + 8].try_into().expect("8 bytes")))
}

/// A 256-bit key written as 64 hex digits (the key's bytes in order).
pub fn parse_stream_key(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut key = [0u8; 32];
    for (i, b) in key.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(key)
}

/// `$VINO_SOCKET`, or [`DEFAULT_SOCKET`].
pub fn default_socket() -> std::path::PathBuf {
    std::env::var_os("VINO_SOCKET").map_or_else(|| DEFAULT_SOCKET.into(), Into::into)
}

/// Sends `frame` with `fd` attached (SCM_RIGHTS).
fn send_with_fd(stream: &UnixStream, frame: &[u8], fd: BorrowedFd<'_>) -> Result<()> {
    let fds = [fd.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let sent = sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(frame)],
        &cmsg,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    // The fd went with the first byte; the rest may follow as plain data.
    (&*stream).write_all(&frame[sent..])?;
    Ok(())
}

/// A program running in the daemon on this connection ([`Client::run_program`]).
pub struct RunningProgram {
    client: Client,
    /// Writes input and kills; shared so that another thread may send them while this one
    /// reads the program's output.
    writer: std::sync::Arc<std::sync::Mutex<UnixStream>>,
}

/// What a running program did next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgramEvent {
    /// It wrote `data` to stream 1 (standard output) or 2 (standard error).
    Output { stream: u8, data: Vec<u8> },
    /// It ended: its status as a shell sees it, and a trap's message if it trapped.
    Exited { code: i32, trap: Option<String> },
}

/// Sends input and kills to a running program, from any thread.
#[derive(Clone)]
pub struct ProgramControl {
    writer: std::sync::Arc<std::sync::Mutex<UnixStream>>,
}

impl ProgramControl {
    /// Bytes for the program's standard input; empty ends it.
    pub fn input(&self, data: &[u8]) -> Result<()> {
        for chunk in data
            .chunks(vino_proto::MAX_DATA)
            .chain(data.is_empty().then_some(&[][..]))
        {
            // The frame's head, then the bytes from where they are.
            let head = vino_proto::bytes_frame_head(&Request::Input { data: Vec::new() }, chunk.len());
            let mut w = self
                .writer
                .lock()
                .map_err(|_| ClientError::from(std::io::Error::other("writer")))?;
            w.write_all(&head)?;
            w.write_all(chunk)?;
        }
        Ok(())
    }

    /// Sends everything `src` holds as the program's standard input, then its end (also if
    /// `src` fails). Each frame carries what `src` has at once, up to [`MAX_DATA`]: a fast pipe
    /// goes in large frames, a line typed at a terminal at once.
    pub fn forward_input(&self, src: &mut (impl std::io::Read + std::os::fd::AsRawFd)) -> Result<()> {
        let mut buf = vec![0u8; MAX_DATA];
        loop {
            let (n, end) = gather(src, &mut buf);
            if n > 0 {
                self.input(&buf[..n])?;
            }
            if end {
                return self.input(&[]);
            }
        }
    }

    /// Kills the program.
    pub fn kill(&self) -> Result<()> {
        self.send(&Request::Kill)
    }

    /// Sends `sig` to every process of the program's session (Ctrl-C: SIGINT).
    pub fn signal(&self, sig: u8) -> Result<()> {
        self.send(&Request::Signal { sig })
    }

    fn send(&self, req: &Request) -> Result<()> {
        let mut w = self
            .writer
            .lock()
            .map_err(|_| ClientError::from(std::io::Error::other("writer")))?;
        Ok(vino_proto::write_frame(&mut *w, req)?)
    }
}

/// Reads `src` into `buf`: one read, which waits, then more while more is there at once. The
/// bytes read, and whether `src` ended (or failed).
fn gather(src: &mut (impl std::io::Read + std::os::fd::AsRawFd), buf: &mut [u8]) -> (usize, bool) {
    let mut n = 0;
    loop {
        match src.read(&mut buf[n..]) {
            Ok(0) | Err(_) => return (n, true),
            Ok(got) => n += got,
        }
        let mut p = nix::libc::pollfd {
            fd: src.as_raw_fd(),
            events: nix::libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the call's duration; the descriptor is borrowed, open.
        let ready = unsafe { nix::libc::poll(&raw mut p, 1, 0) } == 1;
        if n == buf.len() || !ready {
            return (n, false);
        }
    }
}

impl Client {
    /// Runs `wasm` (a WASI preview 1 program) in the daemon as a VINO process with this
    /// connection's credentials; the connection is the program's until it ends. `args` start
    /// with its name; `env` is `NAME=value` each.
    pub fn run_program(self, wasm: &[u8], setup: &ProgramSetup) -> Result<RunningProgram> {
        self.run_pipeline(wasm, setup, Vec::new())
    }

    /// As [`Client::run_program`], `wasm`'s output feeding the programs of `then`, each the
    /// next's, as one session (a pipeline: `a | b | c`).
    pub fn run_pipeline(mut self, wasm: &[u8], setup: &ProgramSetup, then: Vec<PipeStage>) -> Result<RunningProgram> {
        let req = Request::Run {
            wasm: wasm.to_vec(),
            setup: setup.clone(),
            detach: false,
            then,
        };
        expect!(self.call(&req)?, Response::Ok => ())?;
        // Room for a frame or two of input in the socket, so that a send seldom waits for the
        // daemon's next read (the kernel caps it at net.core.wmem_max).
        let _ = nix::sys::socket::setsockopt(&self.stream, nix::sys::socket::sockopt::SndBuf, &(2 << 20));
        let writer = std::sync::Arc::new(std::sync::Mutex::new(self.stream.try_clone()?));
        Ok(RunningProgram { client: self, writer })
    }
}

impl Client {
    /// Runs `wasm` in the daemon detached: it outlives this connection (which it ends), with no
    /// input and its output going nowhere. Its process id, for `vino ps` and
    /// [`Client::kill_program`].
    pub fn run_detached(mut self, wasm: &[u8], setup: &ProgramSetup) -> Result<u64> {
        let req = Request::Run {
            wasm: wasm.to_vec(),
            setup: setup.clone(),
            detach: true,
            then: Vec::new(),
        };
        expect!(self.call(&req)?, Response::Value(pid) => pid as u64)
    }

    /// Kills program `pid` running in the daemon (this user's own, any if privileged).
    pub fn kill_program(&mut self, pid: u64) -> Result<()> {
        self.ok(Request::KillProgram { pid })
    }

    /// Sets the CPU tickets of process `pid` (this user's own, any if privileged; `None`: this
    /// connection's process), in its user's currency: its part of what the user gets.
    pub fn set_tickets(&mut self, pid: Option<u64>, tickets: u32) -> Result<()> {
        self.ok(Request::SetTickets {
            pid,
            uid: None,
            tickets,
        })
    }

    /// Sets user `uid`'s CPU tickets against the other users' (privileged only).
    pub fn set_user_tickets(&mut self, uid: u32, tickets: u32) -> Result<()> {
        self.ok(Request::SetTickets {
            pid: None,
            uid: Some(uid),
            tickets,
        })
    }
}

impl RunningProgram {
    pub fn control(&self) -> ProgramControl {
        ProgramControl {
            writer: self.writer.clone(),
        }
    }

    /// Waits for the program's next output or its end.
    pub fn next_event(&mut self) -> Result<ProgramEvent> {
        match self.client.receive()? {
            Response::Output { stream, data } => Ok(ProgramEvent::Output { stream, data }),
            Response::Exited { code, trap } => Ok(ProgramEvent::Exited { code, trap }),
            Response::Error(e) => Err(e.into()),
            r => Err(unexpected(r)),
        }
    }
}
