//! The link from VINO's network to the host's: a Linux TUN device ([`Tun`]), a network
//! interface of the host whose packets are read and written by VINO instead of a driver.
//!
//! Why TUN: it is an IP link (no Ethernet header, so no ARP on it), which is what VINO's stack
//! runs on its loopback too, so one interface serves both. The device is made without
//! `IFF_PERSIST`: it is the host's only as long as VINO holds it open, so a crash or kill of the
//! daemon leaves nothing behind that the next start trips on. A device root made persistent
//! (`ip tuntap add`) is attached to instead, and stays.
//!
//! One read of a TUN device returns one packet, so packets move in batches another way
//! ([`batch`]): many reads and writes in flight in an io_uring, entered once per batch. Where
//! io_uring is not allowed, the same calls fall back to a read or write per packet.
//!
//! This crate is the network's only unsafe code (the device's ioctls and the ring's buffers);
//! everything above it (`vino-net`) forbids it.

pub mod batch;
pub mod netns;

use std::ffi::CStr;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `TUNSETIFF`, `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// `struct ifreq` as the ioctls below use it: a name and one union member.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    /// The union: flags (a short), the MTU (an int) or an address (a `sockaddr_in`).
    data: [u8; 24],
}

impl IfReq {
    fn new(name: &str) -> io::Result<IfReq> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['/', '\0', ' ']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not a network interface name (1-15 bytes, no '/' or space)"),
            ));
        }
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            data: [0; 24],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        Ok(req)
    }

    fn set_short(&mut self, v: libc::c_short) {
        self.data[..2].copy_from_slice(&v.to_ne_bytes());
    }

    fn short(&self) -> libc::c_short {
        libc::c_short::from_ne_bytes([self.data[0], self.data[1]])
    }

    fn set_int(&mut self, v: libc::c_int) {
        self.data[..4].copy_from_slice(&v.to_ne_bytes());
    }

    fn set_addr(&mut self, a: Ipv4Addr) {
        // A sockaddr_in: family, port, address.
        self.data = [0; 24];
        self.data[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        self.data[4..8].copy_from_slice(&a.octets());
    }
}

fn ioctl(fd: RawFd, request: libc::c_ulong, req: &mut IfReq) -> io::Result<()> {
    // SAFETY: every request passed here reads and writes at most a `struct ifreq`, which `req`
    // is, and it outlives the call.
    let r = unsafe { libc::ioctl(fd, request as _, req as *mut IfReq) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// An open TUN device: IP packets, no packet-information header.
pub struct Tun {
    fd: OwnedFd,
    name: String,
}

impl Tun {
    /// Makes the TUN device `name` (or attaches to it, if root made it persistent). Needs
    /// `CAP_NET_ADMIN`.
    pub fn open(name: &str) -> io::Result<Tun> {
        let mut req = IfReq::new(name)?;
        let path = c"/dev/net/tun";
        // SAFETY: a NUL-terminated path; the descriptor returned is owned below.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("/dev/net/tun: {e}")));
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        req.set_short(IFF_TUN | IFF_NO_PI);
        ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req)
            .map_err(|e| io::Error::new(e.kind(), format!("TUNSETIFF {name}: {e}")))?;
        let name = CStr::from_bytes_until_nul(&req.name)
            .map_err(|_| io::Error::other("the kernel gave an interface name without its NUL"))?
            .to_string_lossy()
            .into_owned();
        Ok(Tun { fd, name })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the device's MTU, gives the host's side `host` (its address and prefix length) if
    /// asked, and brings the device up: the host then routes the prefix to VINO.
    pub fn configure(&self, mtu: usize, host: Option<(Ipv4Addr, u8)>) -> io::Result<()> {
        configure(&self.name, mtu, host)
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Configures interface `name` of the calling thread's network namespace: see
/// [`Tun::configure`]. (A device moved to another namespace is configured from a thread there.)
pub fn configure(name: &str, mtu: usize, host: Option<(Ipv4Addr, u8)>) -> io::Result<()> {
    // SAFETY: plain socket(2); the descriptor is owned below.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `s` was just made and nothing else owns it.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    let fd = s.as_raw_fd();
    let named = |what: &str, e: io::Error| io::Error::new(e.kind(), format!("{what} {name}: {e}"));
    let mut req = IfReq::new(name)?;
    req.set_int(mtu as libc::c_int);
    ioctl(fd, libc::SIOCSIFMTU, &mut req).map_err(|e| named("setting the MTU of", e))?;
    if let Some((addr, prefix)) = host {
        let mut req = IfReq::new(name)?;
        req.set_addr(addr);
        ioctl(fd, libc::SIOCSIFADDR, &mut req).map_err(|e| named("setting the address of", e))?;
        let mask = u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0);
        let mut req = IfReq::new(name)?;
        req.set_addr(Ipv4Addr::from(mask));
        ioctl(fd, libc::SIOCSIFNETMASK, &mut req).map_err(|e| named("setting the netmask of", e))?;
    }
    let mut req = IfReq::new(name)?;
    ioctl(fd, libc::SIOCGIFFLAGS, &mut req).map_err(|e| named("reading the flags of", e))?;
    let flags = req.short() | libc::IFF_UP as libc::c_short;
    req.set_short(flags);
    ioctl(fd, libc::SIOCSIFFLAGS, &mut req).map_err(|e| named("bringing up", e))
}
