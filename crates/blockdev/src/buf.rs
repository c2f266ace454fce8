//! Block buffers aligned for direct I/O.

use crate::BLOCK_SIZE;
use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// A zero-initialised heap buffer of whole blocks whose address is aligned to [`BLOCK_SIZE`], as
/// `O_DIRECT` requires of both the buffer and the length. It owns its memory, so it can be handed
/// to an asynchronous request and come back with the data (see [`crate::IoRequest`]).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer owns its allocation exclusively, like a `Vec<u8>`.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of `blocks` zeroed blocks. Zero blocks gives an empty buffer (no allocation).
    pub fn new(blocks: usize) -> AlignedBuf {
        let len = blocks.checked_mul(BLOCK_SIZE).expect("buffer size overflows usize");
        if len == 0 {
            // An aligned, never dereferenced address: empty slices may point anywhere non-null.
            return AlignedBuf {
                ptr: NonNull::new(std::ptr::without_provenance_mut(BLOCK_SIZE)).expect("non-null"),
                len,
            };
        }
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }

    /// A buffer holding a copy of `data`, padded with zeros to a whole number of blocks.
    pub fn from_slice(data: &[u8]) -> AlignedBuf {
        let mut buf = AlignedBuf::new(data.len().div_ceil(BLOCK_SIZE));
        buf[..data.len()].copy_from_slice(data);
        buf
    }

    /// Number of blocks.
    pub fn blocks(&self) -> usize {
        self.len / BLOCK_SIZE
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, BLOCK_SIZE).expect("a block-aligned layout")
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: allocated in `new` with this layout.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
        }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes owned by this buffer (or an empty slice).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        AlignedBuf::from_slice(self)
    }
}

impl PartialEq for AlignedBuf {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

impl Eq for AlignedBuf {}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedBuf({} blocks at {:p})", self.blocks(), self.ptr)
    }
}

/// True if `p` is aligned for direct I/O.
pub(crate) fn is_aligned(p: *const u8) -> bool {
    (p as usize).is_multiple_of(BLOCK_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_owned() {
        for blocks in [0, 1, 3, 16] {
            let mut b = AlignedBuf::new(blocks);
            assert_eq!(b.len(), blocks * BLOCK_SIZE);
            assert_eq!(b.blocks(), blocks);
            assert!(is_aligned(b.as_ptr()));
            assert!(b.iter().all(|&x| x == 0));
            b.fill(7);
            let c = b.clone();
            assert_eq!(b, c);
            assert!(is_aligned(c.as_ptr()));
        }
        let b = AlignedBuf::from_slice(&[1, 2, 3]);
        assert_eq!(b.len(), BLOCK_SIZE);
        assert_eq!(&b[..4], &[1, 2, 3, 0]);
    }
}
