//! Memory shared with Linux: zeroed, 8-byte aligned, at an address that never moves.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

pub(crate) struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Region is plain memory; who may touch which part when is the queue's protocol
// (see `Queue`), not the Region's.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// `len` zeroed bytes, or ENOMEM: a ring too deep for the machine's memory must fail to
    /// start (and the mount fall back to `/dev/fuse`), not abort the daemon.
    pub(crate) fn new(len: usize) -> std::io::Result<Region> {
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Region { ptr, len })
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len.max(8), 8).expect("region size")
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}
