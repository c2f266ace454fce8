//! The program's linear memory as the system calls see it: every pointer and length it passes
//! is checked against the memory's size, and a bad one is `EFAULT` to the program, never a
//! fault in the kernel.

use crate::abi::{IOVEC_SIZE, WasiErrno};
use std::ops::Range;
use vino_kernel::memory::HostPin;

/// Most buffers one `readv`/`writev` takes (`IOV_MAX`).
pub const IOV_MAX: u32 = 1024;
/// Longest path a call takes (Linux's `PATH_MAX`).
pub const PATH_MAX: u32 = 4096;

/// A program's memory during one system call, and, where it maps files, its pin: a buffer
/// over a mapped page past the end of its file, or a store into a read-only mapping, is a
/// fault too (see `vino_vm::HostPin`).
pub struct Guest<'a>(pub &'a mut [u8], pub Option<&'a HostPin>);

pub type Result<T> = std::result::Result<T, WasiErrno>;

impl Guest<'_> {
    fn range(&self, ptr: u32, len: u32, store: bool) -> Result<Range<usize>> {
        let start = ptr as usize;
        let end = start.checked_add(len as usize).ok_or(WasiErrno::FAULT)?;
        if end > self.0.len() || self.1.is_some_and(|pin| !pin.check(start, len as usize, store)) {
            return Err(WasiErrno::FAULT);
        }
        Ok(start..end)
    }

    pub fn bytes(&self, ptr: u32, len: u32) -> Result<&[u8]> {
        let r = self.range(ptr, len, false)?;
        Ok(&self.0[r])
    }

    pub fn bytes_mut(&mut self, ptr: u32, len: u32) -> Result<&mut [u8]> {
        let r = self.range(ptr, len, true)?;
        Ok(&mut self.0[r])
    }

    pub fn u32(&self, ptr: u32) -> Result<u32> {
        let b = self.bytes(ptr, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&self, ptr: u32) -> Result<u64> {
        let b = self.bytes(ptr, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    pub fn u16(&self, ptr: u32) -> Result<u16> {
        let b = self.bytes(ptr, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u8(&self, ptr: u32) -> Result<u8> {
        Ok(self.bytes(ptr, 1)?[0])
    }

    pub fn put(&mut self, ptr: u32, data: &[u8]) -> Result<()> {
        let len = u32::try_from(data.len()).map_err(|_| WasiErrno::FAULT)?;
        self.bytes_mut(ptr, len)?.copy_from_slice(data);
        Ok(())
    }

    pub fn put_u8(&mut self, ptr: u32, v: u8) -> Result<()> {
        self.put(ptr, &[v])
    }

    pub fn put_u16(&mut self, ptr: u32, v: u16) -> Result<()> {
        self.put(ptr, &v.to_le_bytes())
    }

    pub fn put_u32(&mut self, ptr: u32, v: u32) -> Result<()> {
        self.put(ptr, &v.to_le_bytes())
    }

    pub fn put_u64(&mut self, ptr: u32, v: u64) -> Result<()> {
        self.put(ptr, &v.to_le_bytes())
    }

    /// The (pointer, length) pairs of an iovec array, each checked.
    pub fn iovecs(&self, ptr: u32, count: u32) -> Result<Vec<(u32, u32)>> {
        if count > IOV_MAX {
            return Err(WasiErrno::INVAL);
        }
        let mut v = Vec::with_capacity(count as usize);
        for i in 0..count {
            let at = ptr.checked_add(i * IOVEC_SIZE).ok_or(WasiErrno::FAULT)?;
            let (buf, len) = (self.u32(at)?, self.u32(at + 4)?);
            self.range(buf, len, false)?;
            v.push((buf, len));
        }
        Ok(v)
    }

    /// A path argument, copied out of the program's memory.
    pub fn path(&self, ptr: u32, len: u32) -> Result<Vec<u8>> {
        if len > PATH_MAX {
            return Err(WasiErrno::NAMETOOLONG);
        }
        Ok(self.bytes(ptr, len)?.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_past_the_end_and_overflowing_lengths_are_faults() {
        let mut mem = vec![0u8; 64];
        let mut g = Guest(&mut mem, None);
        assert_eq!(g.bytes(60, 4).map(<[u8]>::len), Ok(4));
        assert_eq!(g.bytes(61, 4), Err(WasiErrno::FAULT));
        assert_eq!(g.bytes(u32::MAX, 2), Err(WasiErrno::FAULT));
        assert_eq!(g.put_u64(57, 1), Err(WasiErrno::FAULT));
        assert_eq!(g.iovecs(0, IOV_MAX + 1), Err(WasiErrno::INVAL));
        g.put_u32(0, 8).unwrap();
        g.put_u32(4, 100).unwrap();
        assert_eq!(g.iovecs(0, 1), Err(WasiErrno::FAULT), "a buffer past the end");
        assert_eq!(g.path(0, PATH_MAX + 1), Err(WasiErrno::NAMETOOLONG));
    }
}
