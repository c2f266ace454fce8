//! A VINO process's descriptor table: WASI descriptors onto the kernel's open files, with the
//! file position kept here (reads and writes go to the kernel as `pread`/`pwrite` at it, except
//! appends, which the kernel places at the end itself). Descriptors 0-2 are the standard
//! streams the runner was given; the preopened directories follow.

use crate::abi::WasiErrno;
use vino_kernel::Fd;

/// What a WASI descriptor stands for.
pub enum Entry {
    /// The runner's standard stream 0, 1 or 2 (shared by every process of its session).
    Stdio(u8),
    File(File),
    /// `/dev` (see `dev`).
    DevDir,
    /// A device of `/dev` served without the file system.
    Device(crate::dev::Device),
    /// One end of a pipe or FIFO (see `pipes`).
    Pipe(PipeFd),
    /// A TCP or UDP socket (see `sockets`).
    Socket(crate::sockets::SocketFd),
}

/// A pipe's end as a descriptor holds it: the end is shared by every descriptor `dup`ed or
/// inherited from this one (it closes with the last of them).
#[derive(Clone)]
pub struct PipeFd {
    pub end: std::sync::Arc<vino_kernel::PipeEnd>,
    /// `O_NONBLOCK`: `EAGAIN` instead of waiting.
    pub nonblock: bool,
}

impl Entry {
    /// A copy of an entry that holds no kernel descriptor (`None` for a file: the kernel opens
    /// another descriptor of it, see `spawn`; and for a socket, which is its process's alone).
    pub fn share(&self) -> Option<Entry> {
        Some(match self {
            Entry::Stdio(i) => Entry::Stdio(*i),
            Entry::File(_) => return None,
            Entry::DevDir => Entry::DevDir,
            Entry::Device(d) => Entry::Device(*d),
            Entry::Pipe(p) => Entry::Pipe(p.clone()),
            Entry::Socket(_) => return None,
        })
    }
}

/// A kernel file open for the program.
pub struct File {
    pub fd: Fd,
    pub pos: u64,
    pub append: bool,
    /// WASI's file type, found at open.
    pub filetype: u8,
    /// For a preopened directory: the name the program sees it by.
    pub preopen: Option<Vec<u8>>,
}

/// Most descriptors a process has open at once (the kernel limits its own opens too).
pub const FDS_MAX: usize = 4096;

#[derive(Default)]
pub struct FdTable {
    slots: Vec<Option<Entry>>,
}

impl FdTable {
    pub fn empty() -> FdTable {
        FdTable::default()
    }

    pub fn with_stdio() -> FdTable {
        FdTable {
            slots: (0..3).map(|i| Some(Entry::Stdio(i))).collect(),
        }
    }

    /// Puts `e` at the lowest free descriptor.
    pub fn insert(&mut self, e: Entry) -> Result<u32, WasiErrno> {
        let n = match self.slots.iter().position(Option::is_none) {
            Some(n) => n,
            None if self.slots.len() < FDS_MAX => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => return Err(WasiErrno::MFILE),
        };
        self.slots[n] = Some(e);
        Ok(n as u32)
    }

    pub fn get(&self, fd: u32) -> Result<&Entry, WasiErrno> {
        self.slots
            .get(fd as usize)
            .and_then(Option::as_ref)
            .ok_or(WasiErrno::BADF)
    }

    pub fn get_mut(&mut self, fd: u32) -> Result<&mut Entry, WasiErrno> {
        self.slots
            .get_mut(fd as usize)
            .and_then(Option::as_mut)
            .ok_or(WasiErrno::BADF)
    }

    /// The kernel file behind `fd` (`EBADF` for the standard streams' calls that need one).
    pub fn file(&mut self, fd: u32) -> Result<&mut File, WasiErrno> {
        match self.get_mut(fd)? {
            Entry::File(f) => Ok(f),
            _ => Err(WasiErrno::BADF),
        }
    }

    pub fn remove(&mut self, fd: u32) -> Result<Entry, WasiErrno> {
        self.slots
            .get_mut(fd as usize)
            .and_then(Option::take)
            .ok_or(WasiErrno::BADF)
    }

    /// Puts `e` at descriptor `n` (growing the table up to [`FDS_MAX`]), returning what was
    /// there (for the caller to close).
    pub fn place(&mut self, n: u32, e: Entry) -> Result<Option<Entry>, WasiErrno> {
        let n = n as usize;
        if n >= FDS_MAX {
            return Err(WasiErrno::BADF);
        }
        if self.slots.len() <= n {
            self.slots.resize_with(n + 1, || None);
        }
        Ok(self.slots[n].replace(e))
    }

    /// Every descriptor and its entry, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Entry)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i as u32, e)))
    }

    /// Moves `from` to `to`, returning what `to` held (for the caller to close).
    pub fn renumber(&mut self, from: u32, to: u32) -> Result<Option<Entry>, WasiErrno> {
        self.get(from)?;
        self.get(to)?;
        if from == to {
            return Ok(None);
        }
        let e = self.remove(from)?;
        Ok(self.slots[to as usize].replace(e))
    }

    /// Whether `/dev` was given (it may have been closed since; then the root lists none).
    pub fn has_dev(&self) -> bool {
        self.slots.iter().any(|e| matches!(e, Some(Entry::DevDir)))
    }

    /// The kernel descriptor of the preopened directory seen as `name`.
    pub fn preopen_named(&self, name: &[u8]) -> Option<Fd> {
        self.slots.iter().find_map(|e| match e {
            Some(Entry::File(f)) if f.preopen.as_deref() == Some(name) => Some(f.fd),
            _ => None,
        })
    }

    /// Every kernel descriptor still open, for the process's exit.
    pub fn drain(&mut self) -> Vec<Fd> {
        self.slots
            .drain(..)
            .flatten()
            .filter_map(|e| match e {
                Entry::File(f) => Some(f.fd),
                _ => None,
            })
            .collect()
    }
}
