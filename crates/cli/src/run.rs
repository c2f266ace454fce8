//! `vino run`: a program compiled to WebAssembly (WASI preview 1) runs as a VINO process, on a
//! disk image with the kernel in this process (`--image`), or inside the running daemon with
//! this user's credentials. Its standard streams are this command's; Ctrl-C or SIGTERM kills the
//! VINO process (status 128 + the signal, as a shell reports it).

use anyhow::{Context, Result, bail};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use vino_kernel::{Credentials, Kernel, KernelConfig};
use vino_wasi::{Dir, DiskCache, Exit, Program, ProgramLimits, Setup, Stdio};

pub struct RunArgs<'a> {
    /// The image to run on; `None`: in the daemon at `socket`.
    pub image: Option<&'a Path>,
    pub socket: Option<std::path::PathBuf>,
    /// In the daemon, without waiting for it (its process id is printed).
    pub detach: bool,
    pub program: &'a Path,
    pub args: &'a [OsString],
    pub env: &'a [String],
    pub memory: Option<u64>,
    /// `--dir PATH[::NAME]`, each.
    pub dirs: &'a [String],
    pub cwd: Option<&'a str>,
    /// Compile without the user's cache of compiled programs.
    pub no_cache: bool,
}

/// Blocks SIGINT and SIGTERM in this thread (and so in every thread it starts) for a waiter.
fn block_signals() -> Result<nix::sys::signal::SigSet> {
    use nix::sys::signal::{SigSet, Signal};
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    signals.thread_block()?;
    Ok(signals)
}

/// How the program starts: its file name then the user's arguments, its environment, its
/// directories and working directory.
fn program_setup(a: &RunArgs<'_>) -> Setup {
    let name = a.program.file_name().unwrap_or(a.program.as_os_str());
    let mut args = vec![name.as_bytes().to_vec()];
    args.extend(a.args.iter().map(|s| s.as_bytes().to_vec()));
    Setup {
        args,
        env: a.env.iter().map(|e| e.as_bytes().to_vec()).collect(),
        dirs: a.dirs.iter().map(|d| Dir::parse(d)).collect(),
        cwd: a.cwd.map(|c| c.as_bytes().to_vec()),
    }
}

/// Runs the program; its exit status.
pub fn run(a: &RunArgs<'_>) -> Result<i32> {
    match a.image {
        Some(image) => run_on_image(a, image),
        None => run_in_daemon(a),
    }
}

fn run_on_image(a: &RunArgs<'_>, image: &Path) -> Result<i32> {
    // Blocked before any thread starts (the kernel's threads inherit the mask), so the waiter
    // below is the only one that receives them.
    let signals = block_signals()?;
    let wasm = std::fs::read(a.program).with_context(|| format!("reading {}", a.program.display()))?;
    let mut limits = ProgramLimits::default();
    if let Some(m) = a.memory {
        limits.memory_bytes = usize::try_from(m).context("--memory is too large")?;
    }
    // The user's own cache of compiled programs (the daemon keeps its own in memory).
    let cache = if a.no_cache {
        None
    } else {
        DiskCache::default_dir().and_then(|d| DiskCache::open(&d))
    };
    let program =
        Program::compile_cached(&wasm, limits, cache.as_ref()).with_context(|| a.program.display().to_string())?;
    if !image.exists() {
        bail!(
            "{} does not exist: make one with `vino mkfs {0} --size 256M`",
            image.display()
        );
    }
    let dev: Arc<dyn vino_blockdev::BlockDevice> = Arc::new(vino_blockdev::FileDevice::open(image)?);
    let kernel = Kernel::boot(dev, &KernelConfig::default()).with_context(|| format!("booting {}", image.display()))?;

    let signalled = Arc::new(AtomicI32::new(0));
    let kill = program.kill_switch();
    let (killer, seen) = (kill.clone(), signalled.clone());
    std::thread::spawn(move || {
        if let Ok(sig) = signals.wait() {
            seen.store(sig as i32, Ordering::SeqCst);
            killer.kill();
        }
    });

    let exit = program.run(&kernel, credentials(), program_setup(a), Stdio::inherit(), &kill);
    kernel
        .shutdown()
        .with_context(|| format!("writing {} back", image.display()))?;
    let exit = exit?;
    if let Exit::Trap(why) = &exit {
        eprintln!("vino: {}: {why}", a.program.display());
    }
    Ok(match (exit, signalled.load(Ordering::SeqCst)) {
        (Exit::Killed, sig) if sig > 0 => 128 + sig,
        (exit, _) => exit.status(),
    })
}

/// How long `vino run` waits for a killed program's end before it leaves.
const GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Sends the program to the daemon, which runs it with this user's credentials; forwards the
/// standard streams both ways and a Ctrl-C as a kill.
fn run_in_daemon(a: &RunArgs<'_>) -> Result<i32> {
    use std::io::Write;
    let signals = block_signals()?;
    if a.memory.is_some() {
        bail!("--memory applies to --image; the daemon's program_memory sets it there");
    }
    let wasm = std::fs::read(a.program).with_context(|| format!("reading {}", a.program.display()))?;
    let s = program_setup(a);
    let setup = vino_client::ProgramSetup {
        args: s.args,
        env: s.env,
        dirs: s.dirs.into_iter().map(|d| (d.path, d.name)).collect(),
        cwd: s.cwd,
        tty: Stdio::terminals(),
    };
    let client = crate::remote::connect(a.socket.clone())?;
    if a.detach {
        let pid = client
            .run_detached(&wasm, &setup)
            .with_context(|| a.program.display().to_string())?;
        println!("{pid}");
        return Ok(0);
    }
    let mut running = client
        .run_program(&wasm, &setup)
        .with_context(|| a.program.display().to_string())?;
    let control = running.control();
    let input = control.clone();
    std::thread::spawn(move || input.forward_input(&mut std::io::stdin().lock()));
    let signalled = Arc::new(AtomicI32::new(0));
    let seen = signalled.clone();
    std::thread::spawn(move || {
        if let Ok(sig) = signals.wait() {
            seen.store(sig as i32, Ordering::SeqCst);
            // The kill goes on the connection, behind any input still queued there; if the
            // program has not ended within GRACE (the daemon may have stopped reading a client
            // whose program does not read its input), leaving ends it: the daemon kills a
            // program whose client goes.
            std::thread::spawn(move || control.kill());
            std::thread::sleep(GRACE);
            std::process::exit(128 + sig as i32);
        }
    });
    loop {
        match running.next_event().context("the daemon")? {
            vino_client::ProgramEvent::Output { stream: 2, data } => std::io::stderr().write_all(&data)?,
            vino_client::ProgramEvent::Output { data, .. } => {
                let mut out = std::io::stdout().lock();
                out.write_all(&data)?;
                out.flush()?;
            }
            vino_client::ProgramEvent::Exited { code, trap } => {
                if let Some(why) = trap {
                    eprintln!("vino: {}: {why}", a.program.display());
                }
                let sig = signalled.load(Ordering::SeqCst);
                return Ok(if sig > 0 && code == Exit::Killed.status() {
                    128 + sig
                } else {
                    code
                });
            }
        }
    }
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
