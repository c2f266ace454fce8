//! Block buffers aligned for direct I/O.

use crate::BLOCK_SIZE;
use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Size in blocks of the buffers kept for reuse: 1 MiB, the largest request the I/O scheduler
/// makes by merging and the cache's write-back makes. Freed memory of that size went back to the
/// system and every new one was faulted in and zeroed by Linux again, a fifth of the daemon's
/// CPU while a large file was written.
const POOLED_BLOCKS: usize = 256;

/// Most freed buffers kept (16 MiB).
const POOL_MAX: usize = 16;

/// A freed buffer's memory, owned by the pool.
struct Pooled(NonNull<u8>);

// SAFETY: the pool owns each allocation exclusively, like a `Vec<u8>`.
unsafe impl Send for Pooled {}

static POOL: parking_lot::Mutex<Vec<Pooled>> = parking_lot::const_mutex(Vec::new());

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
        if let Some(mut buf) = Self::pooled(len) {
            buf.fill(0);
            return buf;
        }
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }

    /// A buffer of `len` bytes from the pool, if it keeps that size and has one. Its bytes are
    /// initialised (a pooled buffer was one before).
    fn pooled(len: usize) -> Option<AlignedBuf> {
        if len != POOLED_BLOCKS * BLOCK_SIZE {
            return None;
        }
        let Pooled(ptr) = POOL.lock().pop()?;
        Some(AlignedBuf { ptr, len })
    }

    /// A buffer holding a copy of `data`, padded with zeros to a whole number of blocks.
    pub fn from_slice(data: &[u8]) -> AlignedBuf {
        AlignedBuf::gather(data.len().div_ceil(BLOCK_SIZE), [data])
    }

    /// A buffer of `blocks` blocks holding `parts` one after another, the rest zeroed. Each byte
    /// is written once: write-back copies every dirty page on its way to the device, and zeroing
    /// the buffer first (as [`AlignedBuf::new`] must) doubled that work.
    ///
    /// Panics if the parts do not fit.
    pub fn gather<'a>(blocks: usize, parts: impl IntoIterator<Item = &'a [u8]>) -> AlignedBuf {
        let len = blocks.checked_mul(BLOCK_SIZE).expect("buffer size overflows usize");
        if len == 0 {
            let mut parts = parts.into_iter();
            assert!(parts.all(|p| p.is_empty()), "parts larger than the buffer");
            return AlignedBuf::new(0);
        }
        let buf = Self::pooled(len).unwrap_or_else(|| {
            let layout = Self::layout(len);
            // SAFETY: the layout has a non-zero size.
            let raw = unsafe { alloc::alloc(layout) };
            let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
            // Owned from here on, so a panic below frees it: dropping reads none of its bytes,
            // and a buffer dropped while panicking is freed, never pooled.
            AlignedBuf { ptr, len }
        });
        let raw = buf.ptr.as_ptr();
        let mut at = 0;
        for part in parts {
            assert!(part.len() <= len - at, "parts larger than the buffer");
            // SAFETY: `at + part.len() <= len`, inside the allocation, which this buffer owns
            // alone and so does not overlap a borrowed slice.
            unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), raw.add(at), part.len()) };
            at += part.len();
        }
        // SAFETY: `at <= len`: the tail lies inside the allocation. Every byte is now written.
        unsafe { std::ptr::write_bytes(raw.add(at), 0, len - at) };
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
        if self.len == 0 {
            return;
        }
        if self.len == POOLED_BLOCKS * BLOCK_SIZE && !std::thread::panicking() {
            let mut pool = POOL.lock();
            if pool.len() < POOL_MAX {
                pool.push(Pooled(self.ptr));
                return;
            }
        }
        // SAFETY: allocated in `new` or `gather` with this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
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
        let g = AlignedBuf::gather(3, [&[5u8; 4096][..], &[6u8; 10][..]]);
        assert!(is_aligned(g.as_ptr()));
        assert!(g[..4096].iter().all(|&x| x == 5));
        assert!(g[4096..4106].iter().all(|&x| x == 6));
        assert!(g[4106..].iter().all(|&x| x == 0));
        assert_eq!(AlignedBuf::gather(0, []).len(), 0);
    }

    #[test]
    #[should_panic(expected = "parts larger than the buffer")]
    fn gather_refuses_parts_that_do_not_fit() {
        AlignedBuf::gather(1, [&[1u8; 4096][..], &[2u8][..]]);
    }
}
