//! Block buffers aligned for direct I/O.

use crate::BLOCK_SIZE;
use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Buffers of 2 to 256 blocks (1 MiB, the largest request the I/O scheduler makes by merging
/// and the cache's write-back makes) are kept for reuse when freed, in classes of powers of two.
/// Freed memory went back to the system and every new buffer was faulted in and zeroed by Linux
/// again: a fifth of the daemon's CPU while a large file was written, and a tenth while many
/// small ones were (their write-back buffers).
const POOL_CLASSES: usize = 8;
const POOL_MIN_BLOCKS: usize = 2;

/// Most freed buffers kept per class (at most 32 MiB in all).
const POOL_MAX: usize = 16;

/// A freed buffer's memory, owned by the pool.
struct Pooled(NonNull<u8>);

// SAFETY: the pool owns each allocation exclusively, like a `Vec<u8>`.
unsafe impl Send for Pooled {}

#[allow(clippy::declare_interior_mutable_const)] // each class's pool starts empty
const EMPTY_CLASS: parking_lot::Mutex<Vec<Pooled>> = parking_lot::const_mutex(Vec::new());
static POOL: [parking_lot::Mutex<Vec<Pooled>>; POOL_CLASSES] = [EMPTY_CLASS; POOL_CLASSES];

/// The pool class of a buffer of `len` bytes, if it is kept for reuse, and the bytes of that
/// class's allocations.
fn pool_class(len: usize) -> Option<(usize, usize)> {
    let blocks = len.div_ceil(BLOCK_SIZE).max(POOL_MIN_BLOCKS).next_power_of_two();
    let class = (blocks / POOL_MIN_BLOCKS).trailing_zeros() as usize;
    (len > BLOCK_SIZE && class < POOL_CLASSES).then_some((class, blocks * BLOCK_SIZE))
}

/// A zero-initialised heap buffer of whole blocks whose address is aligned to [`BLOCK_SIZE`], as
/// `O_DIRECT` requires of both the buffer and the length. It owns its memory, so it can be handed
/// to an asynchronous request and come back with the data (see [`crate::IoRequest`]).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// Bytes allocated: `len`, or a pool class's size (see [`pool_class`]).
    cap: usize,
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
                cap: 0,
            };
        }
        if let Some(buf) = Self::pooled(len) {
            // SAFETY: `len <= cap` bytes of an allocation the buffer owns alone (written through
            // the pointer: bytes past an earlier, shorter use were never initialised).
            unsafe { std::ptr::write_bytes(buf.ptr.as_ptr(), 0, len) };
            return buf;
        }
        let cap = pool_class(len).map_or(len, |(_, cap)| cap);
        let layout = Self::layout(cap);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len, cap }
    }

    /// A buffer of `len` bytes from the pool, if its class has one. Its bytes may be
    /// uninitialised: the caller writes all `len` through the pointer before handing it out.
    fn pooled(len: usize) -> Option<AlignedBuf> {
        let (class, cap) = pool_class(len)?;
        let Pooled(ptr) = POOL[class].lock().pop()?;
        Some(AlignedBuf { ptr, len, cap })
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
            let cap = pool_class(len).map_or(len, |(_, cap)| cap);
            let layout = Self::layout(cap);
            // SAFETY: the layout has a non-zero size.
            let raw = unsafe { alloc::alloc(layout) };
            let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
            // Owned from here on, so a panic below frees it: dropping reads none of its bytes,
            // and a buffer dropped while panicking is freed, never pooled.
            AlignedBuf { ptr, len, cap }
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
        if self.cap == 0 {
            return;
        }
        if let Some((class, cap)) = pool_class(self.len)
            && cap == self.cap
            && !std::thread::panicking()
        {
            let mut pool = POOL[class].lock();
            if pool.len() < POOL_MAX {
                pool.push(Pooled(self.ptr));
                return;
            }
        }
        // SAFETY: allocated in `new` or `gather` with this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.cap)) }
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
    fn freed_buffers_are_reused_by_size_class_and_handed_out_clean() {
        assert_eq!(
            pool_class(BLOCK_SIZE),
            None,
            "single blocks (cache frames) are not pooled"
        );
        assert_eq!(pool_class(2 * BLOCK_SIZE), Some((0, 2 * BLOCK_SIZE)));
        assert_eq!(pool_class(3 * BLOCK_SIZE), Some((1, 4 * BLOCK_SIZE)));
        assert_eq!(pool_class(256 * BLOCK_SIZE), Some((7, 256 * BLOCK_SIZE)));
        assert_eq!(pool_class(257 * BLOCK_SIZE), None);
        // A 5-block write-back buffer, freed, serves a 7-block zeroed one (class of 8): the
        // bytes past the first use come out zeroed too. (Other tests share the pool, so only
        // what any buffer must be is asserted.)
        let dirty = AlignedBuf::gather(5, [&[9u8; 5 * BLOCK_SIZE][..]]);
        assert_eq!(dirty.cap, 8 * BLOCK_SIZE);
        drop(dirty);
        for blocks in [7, 5, 8, 2, 3] {
            let b = AlignedBuf::new(blocks);
            assert_eq!((b.len(), b.cap), (blocks * BLOCK_SIZE, pool_class(b.len()).unwrap().1));
            assert!(
                b.iter().all(|&x| x == 0),
                "a reused buffer of {blocks} blocks is zeroed"
            );
            let g = AlignedBuf::gather(blocks, [&[1u8; 10][..]]);
            assert!(g[..10].iter().all(|&x| x == 1) && g[10..].iter().all(|&x| x == 0));
        }
    }

    #[test]
    #[should_panic(expected = "parts larger than the buffer")]
    fn gather_refuses_parts_that_do_not_fit() {
        AlignedBuf::gather(1, [&[1u8; 4096][..], &[2u8][..]]);
    }
}
