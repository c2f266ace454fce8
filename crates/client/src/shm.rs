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

// SAFETY: the mapping is plain memory that only this value refers to in this process (the
// pointer is never handed out), and the descriptor is owned: moving both to another thread is
// like moving a `Vec<u8>`.
unsafe impl Send for SharedMemory {}

impl SharedMemory {
    pub fn new(len: usize) -> std::io::Result<SharedMemory> {
        let size = NonZeroUsize::new(len).ok_or_else(|| std::io::Error::other("empty shared memory"))?;
        let fd = memfd_create(c"vino-shm", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)?;
        nix::unistd::ftruncate(&fd, len as i64)?;
        let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(seals))?;
        // SAFETY: a new mapping chosen by the kernel (no address is asked for, so nothing of this
        // process is replaced) of `len` bytes of a memfd just sized to `len` and sealed against
        // shrinking, so every page of the mapping stays backed.
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

    /// True if `len` bytes at `offset` lie inside the mapping.
    fn fits(&self, offset: usize, len: usize) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// Copies `src` into the area at `offset`.
    pub fn put(&mut self, offset: usize, src: &[u8]) {
        assert!(self.fits(offset, src.len()), "write past the shared memory");
        // SAFETY: `offset..offset + src.len()` lies in the mapping (checked without overflow), and
        // `src` is ordinary memory of this process, so the two cannot overlap. Only plain bytes
        // are copied, and no reference into the mapping is made; the daemon reads the area only
        // while this client waits for its answer.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len()) };
    }

    /// Copies the area at `offset` into `dst`.
    pub fn get(&self, offset: usize, dst: &mut [u8]) {
        assert!(self.fits(offset, dst.len()), "read past the shared memory");
        // SAFETY: `offset..offset + dst.len()` lies in the mapping (checked without overflow),
        // and `dst` is ordinary memory of this process, so the two cannot overlap. Any byte is a
        // valid `u8`; the daemon wrote this area before it answered.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) };
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of `len` bytes, unmapped once; no reference into it
        // exists (`put` and `get` copy).
        unsafe {
            let _ = munmap(self.ptr.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{AssertUnwindSafe, catch_unwind};

    #[test]
    fn copies_in_and_out_and_refuses_ranges_past_the_end_even_if_they_wrap() {
        let mut m = SharedMemory::new(4096).unwrap();
        m.put(4090, b"abcdef");
        let mut out = [0u8; 6];
        m.get(4090, &mut out);
        assert_eq!(&out, b"abcdef");
        assert!(catch_unwind(AssertUnwindSafe(|| m.put(4091, b"abcdef"))).is_err());
        assert!(catch_unwind(AssertUnwindSafe(|| m.put(usize::MAX, b"x"))).is_err());
        assert!(catch_unwind(AssertUnwindSafe(|| m.get(usize::MAX - 1, &mut out))).is_err());
    }
}
