//! System-call errors: an errno and a message that says what was wrong.

use std::fmt;
use std::io;
use vino_fs::FsError;
use vino_graft::{GraftError, LoadError};

/// The errno values the kernel returns (Linux numbering, so FUSE and clients can pass them on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Errno {
    Perm = 1,
    NoEnt = 2,
    Intr = 4,
    Io = 5,
    BadF = 9,
    Again = 11,
    Acces = 13,
    Exist = 17,
    NotDir = 20,
    IsDir = 21,
    Inval = 22,
    FBig = 27,
    NoSpc = 28,
    Deadlk = 35,
    NameTooLong = 36,
    NotEmpty = 39,
    UClean = 117,
}

/// A failed system call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysError {
    pub errno: Errno,
    pub message: String,
}

impl SysError {
    pub fn new(errno: Errno, message: impl Into<String>) -> Self {
        SysError {
            errno,
            message: message.into(),
        }
    }
}

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SysError {}

pub type SysResult<T> = Result<T, SysError>;

impl From<FsError> for SysError {
    fn from(e: FsError) -> Self {
        let errno = match e.errno() {
            2 => Errno::NoEnt,
            17 => Errno::Exist,
            20 => Errno::NotDir,
            21 => Errno::IsDir,
            39 => Errno::NotEmpty,
            36 => Errno::NameTooLong,
            28 => Errno::NoSpc,
            27 => Errno::FBig,
            22 => Errno::Inval,
            117 => Errno::UClean,
            _ => Errno::Io,
        };
        SysError::new(errno, e.to_string())
    }
}

impl From<io::Error> for SysError {
    fn from(e: io::Error) -> Self {
        let errno = match e.kind() {
            io::ErrorKind::NotFound => Errno::NoEnt,
            io::ErrorKind::InvalidInput => Errno::Inval,
            io::ErrorKind::StorageFull => Errno::NoSpc,
            io::ErrorKind::PermissionDenied => Errno::Acces,
            _ => Errno::Io,
        };
        SysError::new(errno, e.to_string())
    }
}

impl From<GraftError> for SysError {
    fn from(e: GraftError) -> Self {
        let errno = match &e {
            GraftError::UnknownGraftpoint(_) | GraftError::NotLoaded(_) | GraftError::NoSymbol(_) => Errno::NoEnt,
            GraftError::PermissionDenied { .. } => Errno::Perm,
            _ => Errno::Inval,
        };
        SysError::new(errno, e.to_string())
    }
}

impl From<LoadError> for SysError {
    fn from(e: LoadError) -> Self {
        SysError::from(GraftError::Load(e))
    }
}

impl From<vino_locks::LockError> for SysError {
    fn from(e: vino_locks::LockError) -> Self {
        use vino_locks::LockError as L;
        let errno = match &e {
            L::WouldBlock { .. } | L::TimedOut => Errno::Again,
            L::Deadlock { .. } => Errno::Deadlk,
            L::Cancelled => Errno::Intr,
            L::Invalid(_) => Errno::Inval,
        };
        SysError::new(errno, e.to_string())
    }
}
