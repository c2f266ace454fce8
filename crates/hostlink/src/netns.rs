//! Network namespaces, for what puts Linux's own stack at the far end of the host link: the
//! link's tests and `vino bench net`. A [`Netns`] is made with ip(8) and deleted when dropped;
//! threads enter it with `setns` ([`Netns::spawn`]), so one process drives both ends.

use std::io;
use std::os::fd::AsRawFd;
use std::process::Command;

/// A network namespace made for the caller, deleted on drop.
pub struct Netns {
    name: String,
}

/// Runs ip(8) with `args`; its complaint, if any, is the error.
pub fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("ip: {e} (is iproute2 installed?)")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl Netns {
    /// Makes namespace `name` (one left by a run that was killed is deleted first), with its
    /// loopback up. Needs `CAP_SYS_ADMIN`.
    pub fn new(name: &str) -> io::Result<Netns> {
        let _ = ip(&["netns", "del", name]);
        ip(&["netns", "add", name])?;
        let ns = Netns { name: name.to_owned() };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME args...`.
    pub fn ip(&self, args: &[&str]) -> io::Result<()> {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Moves interface `device` of the caller's namespace into this one, gives it `addr`
    /// (`a.b.c.d/len`) and brings it up.
    pub fn adopt(&self, device: &str, addr: &str) -> io::Result<()> {
        ip(&["link", "set", "dev", device, "netns", &self.name])?;
        self.ip(&["addr", "add", addr, "dev", device])?;
        self.ip(&["link", "set", device, "up"])
    }

    /// Moves the calling thread into this namespace (its sockets from then on are this
    /// namespace's; threads it starts are in it too).
    pub fn enter(&self) -> io::Result<()> {
        let f = std::fs::File::open(format!("/run/netns/{}", self.name))?;
        // SAFETY: setns with a descriptor of a namespace file, alive for the call; it changes
        // only the calling thread's namespace.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Runs `f` on a thread of its own inside this namespace; the thread's result is `f`'s,
    /// or why it could not enter the namespace (then `f` does not run).
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<std::thread::JoinHandle<io::Result<T>>> {
        let file = std::fs::File::open(format!("/run/netns/{}", self.name))?;
        std::thread::Builder::new()
            .name(format!("netns-{}", self.name))
            .spawn(move || {
                // SAFETY: as in `enter`.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
                    return Err(io::Error::last_os_error());
                }
                drop(file);
                Ok(f())
            })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}
