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
    Srch = 3,
    Intr = 4,
    Io = 5,
    NxIo = 6,
    TooBig = 7,
    NoExec = 8,
    BadF = 9,
    Child = 10,
    Again = 11,
    NoMem = 12,
    Acces = 13,
    Busy = 16,
    Exist = 17,
    XDev = 18,
    NotDir = 20,
    IsDir = 21,
    Inval = 22,
    NFile = 23,
    MFile = 24,
    FBig = 27,
    NoSpc = 28,
    Pipe = 32,
    Range = 34,
    Deadlk = 35,
    NameTooLong = 36,
    NoLck = 37,
    NotEmpty = 39,
    Loop = 40,
    NoData = 61,
    Proto = 71,
    Users = 87,
    MsgSize = 90,
    NotSup = 95,
    AddrInUse = 98,
    AddrNotAvail = 99,
    NetUnreach = 101,
    ConnReset = 104,
    NoBufs = 105,
    IsConn = 106,
    NotConn = 107,
    TimedOut = 110,
    ConnRefused = 111,
    Stale = 116,
    UClean = 117,
    DQuot = 122,
}

impl Errno {
    /// Every errno the kernel returns.
    pub const ALL: [Errno; 47] = [
        Errno::Perm,
        Errno::NoEnt,
        Errno::Srch,
        Errno::Intr,
        Errno::Io,
        Errno::NxIo,
        Errno::TooBig,
        Errno::NoExec,
        Errno::BadF,
        Errno::Child,
        Errno::Again,
        Errno::NoMem,
        Errno::Acces,
        Errno::Busy,
        Errno::Exist,
        Errno::XDev,
        Errno::NotDir,
        Errno::IsDir,
        Errno::Inval,
        Errno::NFile,
        Errno::MFile,
        Errno::FBig,
        Errno::NoSpc,
        Errno::Pipe,
        Errno::Range,
        Errno::Deadlk,
        Errno::NameTooLong,
        Errno::NoLck,
        Errno::NotEmpty,
        Errno::Loop,
        Errno::NoData,
        Errno::Proto,
        Errno::Users,
        Errno::MsgSize,
        Errno::NotSup,
        Errno::AddrInUse,
        Errno::AddrNotAvail,
        Errno::NetUnreach,
        Errno::ConnReset,
        Errno::NoBufs,
        Errno::IsConn,
        Errno::NotConn,
        Errno::TimedOut,
        Errno::ConnRefused,
        Errno::Stale,
        Errno::UClean,
        Errno::DQuot,
    ];

    /// The errno with Linux number `n`, if the kernel knows it.
    pub fn from_number(n: i32) -> Option<Errno> {
        Errno::ALL.into_iter().find(|e| *e as i32 == n)
    }
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
        let errno = Errno::from_number(e.errno()).unwrap_or(Errno::Io);
        SysError::new(errno, e.to_string())
    }
}

impl From<io::Error> for SysError {
    fn from(e: io::Error) -> Self {
        let errno = match e.kind() {
            io::ErrorKind::NotFound => Errno::NoEnt,
            io::ErrorKind::InvalidInput => Errno::Inval,
            io::ErrorKind::StorageFull => Errno::NoSpc,
            io::ErrorKind::QuotaExceeded => Errno::DQuot,
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
            GraftError::Load(LoadError::Limit(x)) => Errno::from_number(x.errno()).unwrap_or(Errno::Again),
            GraftError::Load(LoadError::Busy(_)) => Errno::Again,
            GraftError::Load(LoadError::TooLarge(_)) => Errno::TooBig,
            GraftError::Load(LoadError::Cancelled) => Errno::Intr,
            GraftError::InUse(_) => Errno::Busy,
            _ => Errno::Inval,
        };
        SysError::new(errno, e.to_string())
    }
}

impl From<vino_net::NetError> for SysError {
    fn from(e: vino_net::NetError) -> Self {
        SysError::new(Errno::from_number(e.errno()).unwrap_or(Errno::Inval), e.to_string())
    }
}

impl From<vino_graft::account::Exceeded> for SysError {
    fn from(e: vino_graft::account::Exceeded) -> Self {
        SysError::new(Errno::from_number(e.errno()).unwrap_or(Errno::Again), e.to_string())
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
            L::Limit(x) => Errno::from_number(x.errno()).unwrap_or(Errno::NoLck),
        };
        SysError::new(errno, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_quota_exceeded_is_edquot() {
        assert_eq!(SysError::from(FsError::QuotaExceeded).errno, Errno::DQuot);
        assert_eq!(
            SysError::from(io::Error::from(FsError::QuotaExceeded)).errno,
            Errno::DQuot
        );
        assert_eq!(SysError::from(FsError::NoSpace).errno, Errno::NoSpc);
    }
}
