//! The daemon's side of a client's shared memory: a sealed memfd, mapped while it is connected.

use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};
use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;

/// A client's memory, mapped. The client may change it at any time: the daemon only copies in
/// and out of it, never hands out references into it.
pub struct ClientMemory {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone (the pointer is never handed out) and only
// raw copies go through it, so it may move to another thread like a `Vec<u8>`. It is not `Sync`:
// `copy_in` writes through `&self`.
unsafe impl Send for ClientMemory {}

impl ClientMemory {
    /// Maps `fd`, which must be a memfd of `len` bytes (at most `max`) that can neither shrink
    /// nor grow: a file that shrank under the mapping would fault the daemon.
    pub fn map(fd: OwnedFd, len: u64, max: u64) -> Result<ClientMemory, String> {
        if len == 0 || len > max {
            return Err(format!("shared memory of {len} bytes (1 to {max})"));
        }
        let seals =
            fcntl(&fd, FcntlArg::F_GET_SEALS).map_err(|e| format!("shared memory is not a sealed memfd: {e}"))?;
        let seals = SealFlag::from_bits_truncate(seals);
        if !seals.contains(SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW) {
            return Err("shared memory must be sealed against shrinking and growing".into());
        }
        let size = nix::sys::stat::fstat(&fd)
            .map_err(|e| format!("shared memory: {e}"))?
            .st_size as u64;
        if size != len {
            return Err(format!("shared memory is {size} bytes, Hello said {len}"));
        }
        let n = NonZeroUsize::new(len as usize).expect("checked above");
        // SAFETY: a new mapping chosen by the kernel (no address is asked for, so nothing of the
        // daemon is replaced) of exactly the file's size, which its seals keep from shrinking, so
        // every page stays backed and touching it cannot fault.
        let ptr = unsafe {
            mmap(
                None,
                n,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                &fd,
                0,
            )
        }
        .map_err(|e| format!("mapping shared memory: {e}"))?;
        Ok(ClientMemory {
            ptr: ptr.cast(),
            len: len as usize,
        })
    }

    fn range(&self, offset: u64, len: usize) -> Result<usize, String> {
        match usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(len).map(|end| (o, end)))
        {
            Some((o, end)) if end <= self.len => Ok(o),
            _ => Err(format!(
                "{len} bytes at {offset} are outside the shared memory ({} bytes)",
                self.len
            )),
        }
    }

    /// Copies `len` bytes at `offset` into `out` (replacing its contents).
    pub fn copy_out(&self, offset: u64, len: usize, out: &mut Vec<u8>) -> Result<(), String> {
        let o = self.range(offset, len)?;
        out.clear();
        out.reserve(len);
        // SAFETY: `o..o + len` lies in the mapping (`range` checks it without overflow), and `out`
        // has room for `len` bytes after `reserve`; a heap buffer of this process cannot overlap
        // the mapping. Any byte is a valid `u8`, so `set_len` exposes initialised values only.
        // The client may write the area at the same time; that can only change which bytes are
        // copied, since no reference into the mapping is made and every byte value is valid.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(o), out.as_mut_ptr(), len);
            out.set_len(len);
        }
        Ok(())
    }

    /// Copies `data` to `offset`.
    pub fn copy_in(&self, offset: u64, data: &[u8]) -> Result<(), String> {
        let o = self.range(offset, data.len())?;
        // SAFETY: `o..o + data.len()` lies in the mapping (`range` checks it without overflow), and
        // `data` is memory of this process, which cannot overlap the mapping.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(o), data.len()) };
        Ok(())
    }
}

impl Drop for ClientMemory {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, of `len` bytes, unmapped once; no reference into it
        // exists (the copies are raw).
        unsafe {
            let _ = munmap(self.ptr.cast(), self.len);
        }
    }
}
