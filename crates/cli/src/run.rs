//! `vino run`: a program compiled to WebAssembly (WASI preview 1) runs as a VINO process on a
//! disk image, the kernel in this process. Its standard streams are this command's; Ctrl-C or
//! SIGTERM kills the VINO process (status 128 + the signal, as a shell reports it).

use anyhow::{Context, Result, bail};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use vino_kernel::{Credentials, Kernel, KernelConfig};
use vino_wasi::{Exit, Program, ProgramLimits, Stdio};

pub struct RunArgs<'a> {
    pub image: &'a Path,
    pub program: &'a Path,
    pub args: &'a [OsString],
    pub env: &'a [String],
    pub memory: Option<u64>,
}

/// Runs the program; its exit status.
pub fn run(a: &RunArgs<'_>) -> Result<i32> {
    use nix::sys::signal::{SigSet, Signal};
    // Blocked before any thread starts (the kernel's threads inherit the mask), so the waiter
    // below is the only one that receives them.
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    signals.thread_block()?;

    let wasm = std::fs::read(a.program).with_context(|| format!("reading {}", a.program.display()))?;
    let mut limits = ProgramLimits::default();
    if let Some(m) = a.memory {
        limits.memory_bytes = usize::try_from(m).context("--memory is too large")?;
    }
    let program = Program::compile(&wasm, limits).with_context(|| a.program.display().to_string())?;
    if !a.image.exists() {
        bail!(
            "{} does not exist: make one with `vino mkfs {0} --size 256M`",
            a.image.display()
        );
    }
    let dev: Arc<dyn vino_blockdev::BlockDevice> = Arc::new(vino_blockdev::FileDevice::open(a.image)?);
    let kernel =
        Kernel::boot(dev, &KernelConfig::default()).with_context(|| format!("booting {}", a.image.display()))?;

    let signalled = Arc::new(AtomicI32::new(0));
    let (kill, seen) = (program.kill_switch(), signalled.clone());
    std::thread::spawn(move || {
        if let Ok(sig) = signals.wait() {
            seen.store(sig as i32, Ordering::SeqCst);
            kill.kill();
        }
    });

    let name = a.program.file_name().unwrap_or(a.program.as_os_str());
    let mut args = vec![name.as_bytes().to_vec()];
    args.extend(a.args.iter().map(|s| s.as_bytes().to_vec()));
    let env = a.env.iter().map(|e| e.as_bytes().to_vec()).collect();
    let exit = program.run(&kernel, credentials(), args, env, Stdio::inherit());
    kernel
        .shutdown()
        .with_context(|| format!("writing {} back", a.image.display()))?;
    let exit = exit?;
    if let Exit::Trap(why) = &exit {
        eprintln!("vino: {}: {why}", a.program.display());
    }
    Ok(match (exit, signalled.load(Ordering::SeqCst)) {
        (Exit::Killed, sig) if sig > 0 => 128 + sig,
        (exit, _) => exit.status(),
    })
}

/// The caller's own user, groups included; root is privileged, as in the daemon.
fn credentials() -> Credentials {
    let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
    if uid == 0 {
        return Credentials::root();
    }
    let groups = nix::unistd::getgroups().unwrap_or_default();
    Credentials::user(uid, gid).with_groups(groups.into_iter().map(|g| g.as_raw()).collect())
}
