//! Errors of the file system, with the errno a system-call layer (FUSE) would return.

use std::io;

/// What went wrong. Every kind maps to an errno ([`FsError::errno`]).
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory: {0}")]
    NotFound(String),
    #[error("file exists: {0}")]
    Exists(String),
    #[error("not a directory: {0}")]
    NotADirectory(String),
    #[error("is a directory: {0}")]
    IsADirectory(String),
    #[error("directory not empty: {0}")]
    NotEmpty(String),
    #[error("name too long: {0} bytes (at most 255)")]
    NameTooLong(usize),
    #[error("no space left on device")]
    NoSpace,
    #[error("no free inodes left on device")]
    NoInodes,
    /// The owner's quota of blocks or inodes is used up (see [`crate::Quota`]).
    #[error("disk quota exceeded")]
    QuotaExceeded,
    #[error("file too large")]
    FileTooLarge,
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("no such attribute: {0}")]
    NoData(String),
    #[error("out of range: {0}")]
    Range(String),
    #[error("unsupported format: {0}")]
    Version(String),
    #[error("corrupt file system: {0}")]
    Corrupt(String),
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

/// The kind of an [`FsError`], without its details (comparable, copyable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FsErrorKind {
    NotFound,
    Exists,
    NotADirectory,
    IsADirectory,
    NotEmpty,
    NameTooLong,
    NoSpace,
    NoInodes,
    QuotaExceeded,
    FileTooLarge,
    InvalidArgument,
    NoData,
    Range,
    Version,
    Corrupt,
    Io,
}

impl FsErrorKind {
    /// The Linux errno for errors of this kind.
    pub fn errno(self) -> i32 {
        match self {
            FsErrorKind::NotFound => 2,         // ENOENT
            FsErrorKind::Exists => 17,          // EEXIST
            FsErrorKind::NotADirectory => 20,   // ENOTDIR
            FsErrorKind::IsADirectory => 21,    // EISDIR
            FsErrorKind::NotEmpty => 39,        // ENOTEMPTY
            FsErrorKind::NameTooLong => 36,     // ENAMETOOLONG
            FsErrorKind::NoSpace => 28,         // ENOSPC
            FsErrorKind::NoInodes => 28,        // ENOSPC
            FsErrorKind::QuotaExceeded => 122,  // EDQUOT
            FsErrorKind::FileTooLarge => 27,    // EFBIG
            FsErrorKind::InvalidArgument => 22, // EINVAL
            FsErrorKind::NoData => 61,          // ENODATA
            FsErrorKind::Range => 34,           // ERANGE
            FsErrorKind::Version => 22,         // EINVAL
            FsErrorKind::Corrupt => 117,        // EUCLEAN, as Linux file systems report corruption
            FsErrorKind::Io => 5,               // EIO
        }
    }
}

impl FsError {
    pub fn kind(&self) -> FsErrorKind {
        match self {
            FsError::NotFound(_) => FsErrorKind::NotFound,
            FsError::Exists(_) => FsErrorKind::Exists,
            FsError::NotADirectory(_) => FsErrorKind::NotADirectory,
            FsError::IsADirectory(_) => FsErrorKind::IsADirectory,
            FsError::NotEmpty(_) => FsErrorKind::NotEmpty,
            FsError::NameTooLong(_) => FsErrorKind::NameTooLong,
            FsError::NoSpace => FsErrorKind::NoSpace,
            FsError::NoInodes => FsErrorKind::NoInodes,
            FsError::QuotaExceeded => FsErrorKind::QuotaExceeded,
            FsError::FileTooLarge => FsErrorKind::FileTooLarge,
            FsError::InvalidArgument(_) => FsErrorKind::InvalidArgument,
            FsError::NoData(_) => FsErrorKind::NoData,
            FsError::Range(_) => FsErrorKind::Range,
            FsError::Version(_) => FsErrorKind::Version,
            FsError::Corrupt(_) => FsErrorKind::Corrupt,
            FsError::Io(_) => FsErrorKind::Io,
        }
    }

    /// The Linux errno for this error.
    pub fn errno(&self) -> i32 {
        self.kind().errno()
    }
}

impl From<FsError> for io::Error {
    fn from(e: FsError) -> io::Error {
        let kind = match e.kind() {
            FsErrorKind::NotFound => io::ErrorKind::NotFound,
            FsErrorKind::Exists => io::ErrorKind::AlreadyExists,
            FsErrorKind::InvalidArgument => io::ErrorKind::InvalidInput,
            FsErrorKind::Corrupt => io::ErrorKind::InvalidData,
            FsErrorKind::NoSpace | FsErrorKind::NoInodes => io::ErrorKind::StorageFull,
            FsErrorKind::QuotaExceeded => io::ErrorKind::QuotaExceeded,
            FsErrorKind::FileTooLarge => io::ErrorKind::FileTooLarge,
            FsErrorKind::NotADirectory => io::ErrorKind::NotADirectory,
            FsErrorKind::IsADirectory => io::ErrorKind::IsADirectory,
            FsErrorKind::NotEmpty => io::ErrorKind::DirectoryNotEmpty,
            FsErrorKind::NameTooLong => io::ErrorKind::InvalidFilename,
            FsErrorKind::NoData => io::ErrorKind::NotFound,
            FsErrorKind::Range => io::ErrorKind::InvalidInput,
            FsErrorKind::Version => io::ErrorKind::Unsupported,
            FsErrorKind::Io => io::ErrorKind::Other,
        };
        match e {
            FsError::Io(e) => e,
            other => io::Error::new(kind, other.to_string()),
        }
    }
}

pub type Result<T, E = FsError> = std::result::Result<T, E>;

/// Shorthand for corruption found in the image.
pub(crate) fn corrupt(why: impl Into<String>) -> FsError {
    FsError::Corrupt(why.into())
}
