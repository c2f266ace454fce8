//! `vino run`: a program compiled to WebAssembly (WASI preview 1) runs as a VINO process, on a
//! disk image with the kernel in this process (`--image`), or inside the running daemon with
//! this user's credentials; `|` among the arguments makes a pipeline of several. Its standard
//! streams are this command's; Ctrl-C or SIGTERM is sent on to every VINO process it started,
//! whose default is to end (status 128 + the signal, as a shell reports it).

use anyhow::{Context, Result, bail};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use vino_kernel::{Credentials, Kernel, KernelConfig};
use vino_wasi::{Dir, DiskCache, Program, ProgramLimits, Setup, SocketSpec, Stage, Stdio};

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
    /// `--listen` and `--connect`, in order: sockets the first program gets.
    pub sockets: &'a [(bool, String)],
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

/// One program of the command line: its file and its arguments.
struct StageArgs {
    program: std::path::PathBuf,
    args: Vec<OsString>,
}

/// The programs of the command line: the first and its arguments, then after each `|`
/// argument the next; each program a .wasm file or the name of one the SDK builds.
fn stages(a: &RunArgs<'_>) -> Result<Vec<StageArgs>> {
    let mut out = vec![StageArgs {
        program: a.program.to_path_buf(),
        args: Vec::new(),
    }];
    let mut words = a.args.iter();
    while let Some(w) = words.next() {
        if w.as_bytes() == b"|" {
            let Some(next) = words.next() else {
                bail!("a `|` with no program after it");
            };
            out.push(StageArgs {
                program: next.into(),
                args: Vec::new(),
            });
        } else {
            out.last_mut().expect("one stage at least").args.push(w.clone());
        }
    }
    for s in &mut out {
        s.program = resolve(&s.program)?;
    }
    Ok(out)
}

/// A program's module: the file, or for a bare name that is no file, the SDK's build of that
/// program (built from its Debian sources the first time, then cached).
fn resolve(program: &Path) -> Result<std::path::PathBuf> {
    let name = program.to_string_lossy();
    if program.exists() || name.contains('/') || !vino_sdk::programs::PROGRAMS.contains(&name.as_ref()) {
        return Ok(program.to_path_buf());
    }
    vino_sdk::programs::build_named_cached(&name, &vino_sdk::BuildOptions::default())
        .with_context(|| format!("building {name} with the SDK"))
}

/// How a program starts: its file name then its arguments, the environment, the directories
/// and working directory.
fn program_setup(a: &RunArgs<'_>, stage: &StageArgs) -> Setup {
    let name = stage.program.file_name().unwrap_or(stage.program.as_os_str());
    let mut args = vec![name.as_bytes().to_vec()];
    args.extend(stage.args.iter().map(|s| s.as_bytes().to_vec()));
    Setup {
        args,
        env: a.env.iter().map(|e| e.as_bytes().to_vec()).collect(),
        dirs: a.dirs.iter().map(|d| Dir::parse(d)).collect(),
        cwd: a.cwd.map(|c| c.as_bytes().to_vec()),
        sockets: Vec::new(),
    }
}

/// The sockets of `--listen` and `--connect`, checked.
fn socket_specs(a: &RunArgs<'_>) -> Result<Vec<SocketSpec>> {
    a.sockets
        .iter()
        .map(|(listen, spec)| SocketSpec::parse(spec, *listen).map_err(anyhow::Error::msg))
        .collect()
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
    let stages = stages(a)?;
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
    let mut programs = Vec::new();
    let mut sockets = Some(socket_specs(a)?);
    for s in &stages {
        let wasm = std::fs::read(&s.program).with_context(|| format!("reading {}", s.program.display()))?;
        let program =
            Program::compile_cached(&wasm, limits, cache.as_ref()).with_context(|| s.program.display().to_string())?;
        let mut setup = program_setup(a, s);
        // The first program's.
        setup.sockets = sockets.take().unwrap_or_default();
        programs.push(Stage { program, setup });
    }
    if !image.exists() {
        bail!(
            "{} does not exist: make one with `vino mkfs {0} --size 256M`",
            image.display()
        );
    }
    let dev: Arc<dyn vino_blockdev::BlockDevice> = Arc::new(vino_blockdev::FileDevice::open(image)?);
    let kernel = Kernel::boot(dev, &KernelConfig::default()).with_context(|| format!("booting {}", image.display()))?;
    let leader = kernel.spawn(credentials());
    let session = leader.pid();
    // Ctrl-C and SIGTERM go to every process of the session, as a terminal's would.
    let k = kernel.clone();
    std::thread::spawn(move || {
        while let Ok(sig) = signals.wait() {
            k.signal_session(session, sig as u8);
        }
    });
    let kill = programs[0].program.kill_switch();
    let exits = if programs.len() == 1 {
        let only = programs.pop().expect("one stage");
        only.program
            .run_in(leader.clone(), only.setup, Stdio::inherit(), &kill)
            .map(|e| vec![e])
    } else {
        vino_wasi::run_pipeline(&leader, programs, Stdio::inherit(), &kill)
    };
    kernel.exit(session);
    kernel
        .shutdown()
        .with_context(|| format!("writing {} back", image.display()))?;
    let exits = exits?;
    for (exit, s) in exits.iter().zip(&stages) {
        if let Some(why) = exit.reason() {
            eprintln!("vino: {}: {why}", s.program.display());
        }
    }
    Ok(vino_wasi::pipefail_status(&exits))
}

/// How long `vino run` waits for a killed program's end before it leaves.
const GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Sends the program (or pipeline) to the daemon, which runs it with this user's credentials;
/// forwards the standard streams both ways, and a Ctrl-C or SIGTERM as that signal to every
/// process it started (a second one kills them).
fn run_in_daemon(a: &RunArgs<'_>) -> Result<i32> {
    use std::io::Write;
    let signals = block_signals()?;
    if a.memory.is_some() {
        bail!("--memory applies to --image; the daemon's program_memory sets it there");
    }
    let stages = stages(a)?;
    let read = |s: &StageArgs| std::fs::read(&s.program).with_context(|| format!("reading {}", s.program.display()));
    let wasm = read(&stages[0])?;
    let s = program_setup(a, &stages[0]);
    let setup = vino_client::ProgramSetup {
        args: s.args,
        env: s.env,
        dirs: s.dirs.into_iter().map(|d| (d.path, d.name)).collect(),
        cwd: s.cwd,
        tty: Stdio::terminals(),
        sockets: socket_specs(a)?
            .iter()
            .zip(a.sockets)
            .map(|(_, (listen, spec))| {
                if *listen {
                    vino_client::ProgramSocket::Listen(spec.clone())
                } else {
                    vino_client::ProgramSocket::Connect(spec.clone())
                }
            })
            .collect(),
    };
    let mut then = Vec::new();
    for stage in &stages[1..] {
        then.push(vino_client::PipeStage {
            wasm: read(stage)?,
            args: program_setup(a, stage).args,
        });
    }
    let client = crate::remote::connect(a.socket.clone())?;
    if a.detach {
        if !then.is_empty() {
            bail!("--detach runs one program, not a pipeline");
        }
        let pid = client
            .run_detached(&wasm, &setup)
            .with_context(|| a.program.display().to_string())?;
        println!("{pid}");
        return Ok(0);
    }
    let mut running = client
        .run_pipeline(&wasm, &setup, then)
        .with_context(|| a.program.display().to_string())?;
    let control = running.control();
    let input = control.clone();
    std::thread::spawn(move || input.forward_input(&mut std::io::stdin().lock()));
    std::thread::spawn(move || {
        let Ok(sig) = signals.wait() else { return };
        // The signal goes on the connection, behind any input still queued there.
        let _ = control.signal(sig as u8);
        let Ok(again) = signals.wait() else { return };
        // A second one kills. If the programs have not ended within GRACE (the daemon may have
        // stopped reading a client whose program does not read its input), leaving ends them:
        // the daemon kills what a client that goes was running.
        std::thread::spawn(move || control.kill());
        std::thread::sleep(GRACE);
        std::process::exit(128 + again as i32);
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
                return Ok(code);
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
