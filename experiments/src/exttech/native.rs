//! Variant (a): the C workloads compiled natively and called directly, with
//! no protection at all (the thesis' "unsafe C" baseline).

use std::sync::{Mutex, MutexGuard};

use anyhow::{Result, bail};

use super::workloads::Extension;

/// The natively compiled workloads (`workloads/*.c`, built by build.rs).
pub(crate) mod ffi {
    unsafe extern "C" {
        pub fn vb_nop(x: u32) -> u32;

        pub fn vb_hl_args() -> *mut u32;
        pub fn vb_hl_args_capacity() -> u32;
        pub fn vb_hl_setup(n: u32, max_page: u32, seed: u32) -> u32;
        pub fn vb_hl_page(i: u32) -> u32;
        pub fn vb_hl_pick_victim(cand: *const u32, n: u32) -> u32;

        pub fn vb_md5_begin();
        pub fn vb_md5_feed(data: *const u8, len: u32);
        pub fn vb_md5_end() -> *const u8;

        pub fn vb_ld_reset(seed: u32);
        pub fn vb_ld_write_next(n: u32) -> u32;
        pub fn vb_ld_checksum() -> u64;
        pub fn vb_ld_live_total() -> u32;
    }
}

/// The C workloads keep their state in globals; one user at a time.
static NATIVE_LOCK: Mutex<()> = Mutex::new(());

/// Direct calls into the native library.
pub struct Native {
    input: Vec<u8>,
    _guard: MutexGuard<'static, ()>,
}

impl Native {
    pub fn new() -> Native {
        let guard = NATIVE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        Native {
            input: Vec::new(),
            _guard: guard,
        }
    }
}

impl Default for Native {
    fn default() -> Self {
        Native::new()
    }
}

impl Extension for Native {
    #[inline]
    fn nop(&mut self, x: u32) -> Result<u32> {
        // SAFETY: a pure C function.
        Ok(unsafe { ffi::vb_nop(x) })
    }

    fn hl_setup(&mut self, n: u32, max_page: u32, seed: u32) -> Result<u32> {
        // SAFETY: touches only the library's own globals, which we hold the lock for.
        Ok(unsafe { ffi::vb_hl_setup(n, max_page, seed) })
    }

    fn hl_page(&mut self, i: u32) -> Result<u32> {
        // SAFETY: as above.
        Ok(unsafe { ffi::vb_hl_page(i) })
    }

    #[inline]
    fn hl_pick(&mut self, cand: &[u32]) -> Result<u32> {
        // SAFETY: the argument area holds vb_hl_args_capacity() words; we copy
        // at most that many.
        unsafe {
            if cand.len() > ffi::vb_hl_args_capacity() as usize {
                bail!("too many candidates: {}", cand.len());
            }
            let args = ffi::vb_hl_args();
            std::ptr::copy_nonoverlapping(cand.as_ptr(), args, cand.len());
            Ok(ffi::vb_hl_pick_victim(args, cand.len() as u32))
        }
    }

    fn md5_load(&mut self, data: &[u8]) -> Result<()> {
        self.input.clear();
        self.input.extend_from_slice(data);
        Ok(())
    }

    fn md5_begin(&mut self) -> Result<()> {
        // SAFETY: library globals only.
        unsafe { ffi::vb_md5_begin() };
        Ok(())
    }

    #[inline]
    fn md5_feed(&mut self, offset: u32, len: u32) -> Result<()> {
        let (o, l) = (offset as usize, len as usize);
        let Some(chunk) = self.input.get(o..o + l) else {
            bail!("md5 feed {o}+{l} outside the {} loaded bytes", self.input.len());
        };
        // SAFETY: the pointer and length describe a live slice.
        unsafe { ffi::vb_md5_feed(chunk.as_ptr(), len) };
        Ok(())
    }

    fn md5_end(&mut self) -> Result<[u8; 16]> {
        let mut d = [0u8; 16];
        // SAFETY: vb_md5_end returns the address of a static 16-byte digest.
        unsafe { std::ptr::copy_nonoverlapping(ffi::vb_md5_end(), d.as_mut_ptr(), 16) };
        Ok(d)
    }

    fn ld_reset(&mut self, seed: u32) -> Result<()> {
        // SAFETY: library globals only.
        unsafe { ffi::vb_ld_reset(seed) };
        Ok(())
    }

    #[inline]
    fn ld_write_next(&mut self, n: u32) -> Result<u32> {
        // SAFETY: library globals only.
        Ok(unsafe { ffi::vb_ld_write_next(n) })
    }

    fn ld_checksum(&mut self) -> Result<u64> {
        // SAFETY: library globals only.
        Ok(unsafe { ffi::vb_ld_checksum() })
    }

    fn ld_live_total(&mut self) -> Result<u32> {
        // SAFETY: library globals only.
        Ok(unsafe { ffi::vb_ld_live_total() })
    }
}
