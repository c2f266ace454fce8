//! Variant (d): hardware isolation.  The native C workloads run in a separate
//! process (a user-level server); the host reaches them by an upcall through
//! a shared-memory channel: it writes the request, signals the server, and
//! waits for the reply.
//!
//! Two signalling disciplines are measured:
//! * futex wait/wake with both processes on the same CPU: every upcall costs
//!   two context switches, the realistic model of a uniprocessor upcall;
//! * spin-waiting on different CPUs: the best case, which burns a second
//!   core for the server.
//!
//! A futex round trip between two CPUs is measured for the null upcall.
//!
//! The server is forked from the host.  If the host already has other
//! threads (a test harness, wasmtime's compiler pool) this is still sound:
//! the child only runs the C workloads on its own copy of their globals and
//! on the shared mapping, and makes raw system calls (futex, prctl, getppid,
//! _exit); it never allocates, takes a lock, or returns into Rust code that
//! could.

use std::cell::UnsafeCell;
use std::mem::size_of;
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde::Serialize;

use super::native::ffi;
use super::workloads::{Extension, MD5_BYTES};

const OP_NOP: u32 = 0;
const OP_HL_SETUP: u32 = 1;
const OP_HL_PAGE: u32 = 2;
const OP_HL_PICK: u32 = 3;
const OP_MD5_BEGIN: u32 = 4;
const OP_MD5_FEED: u32 = 5;
const OP_MD5_END: u32 = 6;
const OP_LD_RESET: u32 = 7;
const OP_LD_WRITE: u32 = 8;
const OP_LD_CHECKSUM: u32 = 9;
const OP_LD_LIVE: u32 = 10;
const OP_EXIT: u32 = 99;

const WAIT_FUTEX: u32 = 0;
const WAIT_SPIN: u32 = 1;

const MAX_CAND: usize = 64;
const DATA_OFFSET: usize = 4096;
const DATA_SIZE: usize = MD5_BYTES;
const MAP_SIZE: usize = DATA_OFFSET + DATA_SIZE;

/// The request/reply channel at the start of the shared mapping.  The two
/// sequence words sit on their own cache lines.
#[repr(C, align(64))]
struct Channel {
    /// Bumped by the host after writing a request.
    req: AtomicU32,
    _pad0: [u8; 60],
    /// Set to the request's sequence number by the server when done.
    resp: AtomicU32,
    _pad1: [u8; 60],
    op: AtomicU32,
    wait: AtomicU32,
    a0: AtomicU32,
    a1: AtomicU32,
    a2: AtomicU32,
    status: AtomicU32,
    result: AtomicU64,
    digest: UnsafeCell<[u8; 16]>,
    cand: UnsafeCell<[u32; MAX_CAND]>,
}

const _: () = assert!(size_of::<Channel>() <= DATA_OFFSET);

/// How the host and the server signal each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UpcallMode {
    /// futex wait/wake, both processes pinned to one CPU.
    FutexSameCore,
    /// futex wait/wake, host and server on different CPUs.
    FutexCrossCore,
    /// Both sides spin on the channel, on different CPUs.
    Spin,
}

impl UpcallMode {
    fn wait(self) -> u32 {
        match self {
            UpcallMode::Spin => WAIT_SPIN,
            _ => WAIT_FUTEX,
        }
    }

    fn needs_two_cpus(self) -> bool {
        !matches!(self, UpcallMode::FutexSameCore)
    }
}

/// The forked server and the host's end of the channel.
pub struct UpcallServer {
    base: *mut u8,
    pid: libc::pid_t,
    alive: bool,
    mode: UpcallMode,
    /// The wait discipline the server uses until the next request.
    server_wait: u32,
    cpus: Vec<usize>,
    host_mask: Option<libc::cpu_set_t>,
    /// Set when pinning was impossible (the modes then run unpinned).
    pub pin_note: Option<String>,
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    // SAFETY: a futex wait on a word of the shared mapping (not private:
    // the word is shared between processes).
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        )
    };
    // true when the wait timed out
    r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT)
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: as above.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            1i32,
            0usize,
            0usize,
            0u32,
        );
    }
}

fn cpu_set_of(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data; the CPU_* helpers index within it.
    unsafe {
        let mut s: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut s);
        for &c in cpus {
            libc::CPU_SET(c, &mut s);
        }
        s
    }
}

fn set_affinity(pid: libc::pid_t, set: &libc::cpu_set_t) -> std::io::Result<()> {
    // SAFETY: passes a valid cpu_set_t of the right size.
    let r = unsafe { libc::sched_setaffinity(pid, size_of::<libc::cpu_set_t>(), set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl UpcallServer {
    /// Maps the channel and forks the server.
    pub fn spawn() -> Result<UpcallServer> {
        // SAFETY: an anonymous shared mapping, checked for failure.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                MAP_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            bail!("mmap of the upcall channel failed: {}", std::io::Error::last_os_error());
        }
        let base = base as *mut u8;

        // SAFETY: cpu_set_t is plain data (all zeros is the empty set); sched_getaffinity fills
        // the one passed with its true size; CPU_ISSET reads it within CPU_SETSIZE.
        let (cpus, host_mask) = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) == 0 {
                let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
                    .filter(|&c| libc::CPU_ISSET(c, &set))
                    .collect();
                (cpus, Some(set))
            } else {
                (Vec::new(), None)
            }
        };

        // SAFETY: getpid is a plain system call.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the child branch only touches the shared mapping and never returns (see the
        // module comment), so no state of other threads copied by fork is used in it.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: the mapping made above; no child shares it (fork failed).
            unsafe { libc::munmap(base as *mut libc::c_void, MAP_SIZE) };
            bail!("fork of the upcall server failed: {e}");
        }
        if pid == 0 {
            // SAFETY: the child only touches the mapping and the C globals.
            unsafe { server_main(base, parent) }
        }
        Ok(UpcallServer {
            base,
            pid,
            alive: true,
            mode: UpcallMode::FutexSameCore,
            server_wait: WAIT_FUTEX,
            cpus,
            host_mask,
            pin_note: None,
        })
    }

    /// Whether `mode` can run here (spinning and cross-CPU need two CPUs).
    pub fn supports(&self, mode: UpcallMode) -> bool {
        !mode.needs_two_cpus() || self.cpus.len() >= 2
    }

    /// The CPUs the host may run on.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// Switches the signalling discipline and pins both processes for it.
    pub fn set_mode(&mut self, mode: UpcallMode) -> Result<()> {
        if !self.supports(mode) {
            bail!("{mode:?} needs two CPUs; only {} available", self.cpus.len());
        }
        self.mode = mode;
        if self.cpus.is_empty() {
            self.pin_note = Some("CPU affinity unknown: upcall processes not pinned".into());
            return Ok(());
        }
        let host = cpu_set_of(&self.cpus[..1]);
        let server = if mode.needs_two_cpus() {
            cpu_set_of(&self.cpus[1..2])
        } else {
            host
        };
        if let Err(e) = set_affinity(0, &host).and_then(|_| set_affinity(self.pid, &server)) {
            self.pin_note = Some(format!("pinning failed ({e}): upcall processes not pinned"));
        }
        // Let the server settle on its CPU.
        self.call(OP_NOP, 0, 0, 0)?;
        Ok(())
    }

    /// Gives the host thread back its original CPU set.
    pub fn unpin(&mut self) {
        if let Some(m) = self.host_mask {
            let _ = set_affinity(0, &m);
            if self.alive {
                let _ = set_affinity(self.pid, &m);
            }
        }
    }

    fn ch(&self) -> &Channel {
        // SAFETY: the mapping starts with a Channel (all-zero is a valid
        // state) and lives as long as self.
        unsafe { &*(self.base as *const Channel) }
    }

    fn check_server(&mut self) -> Result<()> {
        let mut status = 0;
        // SAFETY: waitpid on our own child.
        let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        if r == self.pid {
            self.alive = false;
            bail!("the upcall server exited (wait status {status:#x})");
        }
        Ok(())
    }

    /// One upcall: returns the server's result.
    #[inline]
    pub fn call(&mut self, op: u32, a0: u32, a1: u32, a2: u32) -> Result<u64> {
        if !self.alive {
            bail!("the upcall server is gone");
        }
        let wait = self.mode.wait();
        let seq = {
            let ch = self.ch();
            ch.op.store(op, Ordering::Relaxed);
            ch.wait.store(wait, Ordering::Relaxed);
            ch.a0.store(a0, Ordering::Relaxed);
            ch.a1.store(a1, Ordering::Relaxed);
            ch.a2.store(a2, Ordering::Relaxed);
            let mut seq = ch.req.load(Ordering::Relaxed).wrapping_add(1);
            if seq == 0 {
                seq = 1;
            }
            ch.req.store(seq, Ordering::Release);
            if self.server_wait == WAIT_FUTEX {
                futex_wake(&ch.req);
            }
            seq
        };
        self.server_wait = wait;
        self.wait_reply(seq, wait)?;
        let ch = self.ch();
        if ch.status.load(Ordering::Relaxed) != 0 {
            bail!("upcall {op} rejected by the server");
        }
        Ok(ch.result.load(Ordering::Relaxed))
    }

    #[inline]
    fn wait_reply(&mut self, seq: u32, wait: u32) -> Result<()> {
        let mut spins: u32 = 0;
        loop {
            let cur = self.ch().resp.load(Ordering::Acquire);
            if cur == seq {
                return Ok(());
            }
            if wait == WAIT_SPIN {
                std::hint::spin_loop();
                spins = spins.wrapping_add(1);
                if spins & ((1 << 24) - 1) == 0 {
                    self.check_server()?;
                }
            } else if futex_wait(&self.ch().resp, cur, Duration::from_millis(50)) {
                self.check_server()?;
            }
        }
    }

    /// Asks the server to exit and reaps it (killing it if it does not go).
    pub fn shutdown(&mut self) {
        if self.alive {
            let ch = self.ch();
            ch.op.store(OP_EXIT, Ordering::Relaxed);
            ch.wait.store(WAIT_FUTEX, Ordering::Relaxed);
            let seq = ch.req.load(Ordering::Relaxed).wrapping_add(1).max(1);
            ch.req.store(seq, Ordering::Release);
            futex_wake(&ch.req);
            let deadline = Instant::now() + Duration::from_secs(2);
            let mut status = 0;
            loop {
                // SAFETY: waitpid/kill on our own child.
                let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
                if r == self.pid || r < 0 {
                    break;
                }
                if Instant::now() > deadline {
                    // SAFETY: kill and waitpid on our own child, not yet reaped.
                    unsafe {
                        libc::kill(self.pid, libc::SIGKILL);
                        libc::waitpid(self.pid, &mut status, 0);
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            self.alive = false;
        }
        self.unpin();
    }
}

impl Drop for UpcallServer {
    fn drop(&mut self) {
        self.shutdown();
        // SAFETY: the mapping is ours and no longer used.
        unsafe { libc::munmap(self.base as *mut libc::c_void, MAP_SIZE) };
    }
}

/// The server loop, in the child.  Never returns.
///
/// # Safety
///
/// `base` is the start of the shared upcall mapping of `MAP_SIZE` bytes, and the caller is the
/// child just forked, which runs nothing else.
unsafe fn server_main(base: *mut u8, parent: libc::pid_t) -> ! {
    // SAFETY: the mapping is valid and laid out as a `Channel` (the caller's contract).
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
        if libc::getppid() != parent {
            libc::_exit(0);
        }
        let ch = &*(base as *const Channel);
        let cand = ch.cand.get() as *const u32;
        let digest = ch.digest.get() as *mut u8;
        let data = base.add(DATA_OFFSET);
        let mut last = 0u32;
        let mut wait = WAIT_FUTEX;
        loop {
            let mut spins: u32 = 0;
            let seq = loop {
                let s = ch.req.load(Ordering::Acquire);
                if s != last {
                    break s;
                }
                if wait == WAIT_SPIN {
                    std::hint::spin_loop();
                    spins = spins.wrapping_add(1);
                    if spins & ((1 << 24) - 1) == 0 && libc::getppid() != parent {
                        libc::_exit(0);
                    }
                } else if futex_wait(&ch.req, last, Duration::from_millis(100)) && libc::getppid() != parent {
                    libc::_exit(0);
                }
            };
            let op = ch.op.load(Ordering::Relaxed);
            let (a0, a1, a2) = (
                ch.a0.load(Ordering::Relaxed),
                ch.a1.load(Ordering::Relaxed),
                ch.a2.load(Ordering::Relaxed),
            );
            let mut status = 0u32;
            let mut result = 0u64;
            match op {
                OP_NOP => result = ffi::vb_nop(a0) as u64,
                OP_HL_SETUP => result = ffi::vb_hl_setup(a0, a1, a2) as u64,
                OP_HL_PAGE => result = ffi::vb_hl_page(a0) as u64,
                OP_HL_PICK => {
                    if (a0 as usize) <= MAX_CAND {
                        result = ffi::vb_hl_pick_victim(cand, a0) as u64;
                    } else {
                        status = 1;
                    }
                }
                OP_MD5_BEGIN => ffi::vb_md5_begin(),
                OP_MD5_FEED => {
                    if (a0 as u64) + (a1 as u64) <= DATA_SIZE as u64 {
                        ffi::vb_md5_feed(data.add(a0 as usize), a1);
                    } else {
                        status = 1;
                    }
                }
                OP_MD5_END => ptr::copy_nonoverlapping(ffi::vb_md5_end(), digest, 16),
                OP_LD_RESET => ffi::vb_ld_reset(a0),
                OP_LD_WRITE => result = ffi::vb_ld_write_next(a0) as u64,
                OP_LD_CHECKSUM => result = ffi::vb_ld_checksum(),
                OP_LD_LIVE => result = ffi::vb_ld_live_total() as u64,
                OP_EXIT => {}
                _ => status = 2,
            }
            ch.status.store(status, Ordering::Relaxed);
            ch.result.store(result, Ordering::Relaxed);
            wait = ch.wait.load(Ordering::Relaxed);
            last = seq;
            ch.resp.store(seq, Ordering::Release);
            if wait == WAIT_FUTEX {
                futex_wake(&ch.resp);
            }
            if op == OP_EXIT {
                libc::_exit(0);
            }
        }
    }
}

impl Extension for UpcallServer {
    #[inline]
    fn nop(&mut self, x: u32) -> Result<u32> {
        Ok(self.call(OP_NOP, x, 0, 0)? as u32)
    }

    fn hl_setup(&mut self, n: u32, max_page: u32, seed: u32) -> Result<u32> {
        Ok(self.call(OP_HL_SETUP, n, max_page, seed)? as u32)
    }

    fn hl_page(&mut self, i: u32) -> Result<u32> {
        Ok(self.call(OP_HL_PAGE, i, 0, 0)? as u32)
    }

    #[inline]
    fn hl_pick(&mut self, cand: &[u32]) -> Result<u32> {
        if cand.len() > MAX_CAND {
            bail!("too many candidates: {}", cand.len());
        }
        // SAFETY: the candidate area holds MAX_CAND words; the server reads
        // it only while handling the request posted below.
        unsafe {
            let area = self.ch().cand.get() as *mut u32;
            ptr::copy_nonoverlapping(cand.as_ptr(), area, cand.len());
        }
        Ok(self.call(OP_HL_PICK, cand.len() as u32, 0, 0)? as u32)
    }

    fn md5_load(&mut self, data: &[u8]) -> Result<()> {
        if data.len() > DATA_SIZE {
            bail!(
                "md5 input of {} bytes exceeds the {DATA_SIZE} byte shared buffer",
                data.len()
            );
        }
        // SAFETY: the data area is DATA_SIZE bytes; the server is idle.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), self.base.add(DATA_OFFSET), data.len()) };
        Ok(())
    }

    fn md5_begin(&mut self) -> Result<()> {
        self.call(OP_MD5_BEGIN, 0, 0, 0).map(drop)
    }

    #[inline]
    fn md5_feed(&mut self, offset: u32, len: u32) -> Result<()> {
        self.call(OP_MD5_FEED, offset, len, 0).map(drop)
    }

    fn md5_end(&mut self) -> Result<[u8; 16]> {
        self.call(OP_MD5_END, 0, 0, 0)?;
        // SAFETY: the server wrote the digest before its release of `resp`,
        // which the call above acquired.
        Ok(unsafe { *self.ch().digest.get() })
    }

    fn ld_reset(&mut self, seed: u32) -> Result<()> {
        self.call(OP_LD_RESET, seed, 0, 0).map(drop)
    }

    #[inline]
    fn ld_write_next(&mut self, n: u32) -> Result<u32> {
        Ok(self.call(OP_LD_WRITE, n, 0, 0)? as u32)
    }

    fn ld_checksum(&mut self) -> Result<u64> {
        self.call(OP_LD_CHECKSUM, 0, 0, 0)
    }

    fn ld_live_total(&mut self) -> Result<u32> {
        Ok(self.call(OP_LD_LIVE, 0, 0, 0)? as u32)
    }
}
