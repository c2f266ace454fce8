//! The client's side of the shared memory: a sealed memfd, mapped here and in the daemon.

use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

/// A memfd of fixed size (sealed against shrinking and growing, so neither side can be made to
/// fault on it) mapped shared.
pub struct SharedMemory {
    fd: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
}

// The mapping is plain memory; access goes through `&self`/`&mut self` of its owner.
unsafe impl Send for SharedMemory {}

impl SharedMemory {
    pub fn new(len: usize) -> std::io::Result<SharedMemory> {
        let size = NonZeroUsize::new(len).ok_or_else(|| std::io::Error::other("empty shared memory"))?;
        let fd = memfd_create(c"vino-shm", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)?;
        nix::unistd::ftruncate(&fd, len as i64)?;
        let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(seals))?;
        // SAFETY: a fresh shared mapping of a file we sized; nothing else refers to it yet.
        let ptr = unsafe {
            mmap(
                None,
                size,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                &fd,
                0,
            )?
        };
        Ok(SharedMemory {
            fd,
            ptr: ptr.cast(),
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Copies `src` into the area at `offset`.
    pub fn put(&mut self, offset: usize, src: &[u8]) {
        assert!(offset + src.len() <= self.len, "write past the shared memory");
        // SAFETY: in bounds (checked); the daemon reads this area only while we wait for its answer.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len()) };
    }

    /// Copies the area at `offset` into `dst`.
    pub fn get(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset + dst.len() <= self.len, "read past the shared memory");
        // SAFETY: in bounds (checked); the daemon wrote this area before it answered.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) };
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe {
            let _ = munmap(self.ptr.cast(), self.len);
        }
    }
}
