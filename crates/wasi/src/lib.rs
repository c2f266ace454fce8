//! VINO processes: programs compiled to WebAssembly against WASI preview 1 (as `clang
//! --target=wasm32-wasi` and wasi-libc build them) run inside the kernel, and their system
//! calls are the kernel's own: each WASI call is a function call into [`vino_kernel::Process`],
//! with the process's credentials and permissions, through VINO's page cache, file system,
//! events and grafts. Not wasmtime-wasi on the host's files: the host is reached only through
//! the three standard streams the runner hands over.
//!
//! A program is compiled once ([`Program::compile`], its size checked first) and run as a
//! kernel process ([`Program::run`]): descriptors 0-2 are the runner's streams, then the
//! directories it is given ([`Setup::dirs`]; the file system's root as `/` if none), which
//! wasi-libc resolves every path against and which no path may leave ([`vino_kernel::At::Beneath`]).
//! The working directory is passed as `PWD`, which the start-up code of `vino build` changes to
//! (wasi-libc keeps the working directory inside the program). The process exits with the program: its files are closed and its grafts unloaded, whether it
//! returned, called `exit`, trapped or was killed ([`KillSwitch`]).
//!
//! A bad pointer or length from the program is `EFAULT` to it (see `guest`); a call WASI has
//! but VINO does not serve (sockets, signals) is `ENOTSUP`/`ENOSYS`. Beyond WASI, the import
//! module `vino` lets a program graft its own objects from inside (see `vino`).

mod abi;
mod calls;
mod dev;
mod disk_cache;
mod fds;
mod guest;
mod memory;
mod pipeline;
mod pipes;
mod process_calls;
mod signals;
mod sockets;
mod spawn;
mod vino;

pub use abi::{MODULE, WasiErrno};
pub use disk_cache::DiskCache;
pub use pipeline::{Stage, pipefail_status, run_pipeline};
pub use sockets::{Proto as SocketProto, SocketSpec};
pub use vino_kernel::Verified;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use vino_kernel::account::{Growing, Resource};
use vino_kernel::{Credentials, Kernel};
use vino_sched::ThreadCtx;
use wasmtime::{Config, Engine, InstancePre, Linker, Module, ResourceLimiter, Store, Trap};

/// Bounds on one program (larger than a graft's: a real program has thousands of functions).
#[derive(Debug, Clone, Copy)]
pub struct ProgramLimits {
    /// Largest module accepted, checked before compiling.
    pub module_bytes: usize,
    /// Largest linear memory the program may grow to.
    pub memory_bytes: usize,
}

impl Default for ProgramLimits {
    fn default() -> Self {
        ProgramLimits {
            module_bytes: 64 << 20,
            memory_bytes: 1 << 30,
        }
    }
}

/// What a run starts with besides its code.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// Its arguments, the first its name.
    pub args: Vec<Vec<u8>>,
    /// Its environment, `NAME=value` each.
    pub env: Vec<Vec<u8>>,
    /// The directories it may reach (preopened, in this order); none means the whole file
    /// system, as `/`.
    pub dirs: Vec<Dir>,
    /// Its working directory (`PWD`), `/` if none.
    pub cwd: Option<Vec<u8>>,
    /// Sockets opened for it before it starts (`vino run --listen`, `--connect`), as the
    /// descriptors after its directories and `/dev`, in this order.
    pub sockets: Vec<SocketSpec>,
}

impl Setup {
    pub fn new(args: Vec<Vec<u8>>, env: Vec<Vec<u8>>) -> Setup {
        Setup {
            args,
            env,
            ..Setup::default()
        }
    }

    /// The environment the program sees: `env` with `PWD` set to the working directory.
    fn environment(&self) -> Vec<Vec<u8>> {
        let mut env: Vec<Vec<u8>> = self.env.iter().filter(|v| !v.starts_with(b"PWD=")).cloned().collect();
        let mut pwd = b"PWD=".to_vec();
        pwd.extend_from_slice(self.cwd.as_deref().unwrap_or(b"/"));
        env.push(pwd);
        env
    }
}

/// A directory given to a program: the file system's directory `path`, which the program
/// sees as `name` (`vino run --dir PATH[::NAME]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dir {
    pub path: Vec<u8>,
    pub name: Vec<u8>,
}

impl Dir {
    /// `PATH` or `PATH::NAME`, as `vino run --dir` (and wasmtime's `--dir`) takes it.
    pub fn parse(spec: &str) -> Dir {
        let (path, name) = spec.split_once("::").unwrap_or((spec, spec));
        Dir {
            path: path.as_bytes().to_vec(),
            name: name.as_bytes().to_vec(),
        }
    }
}

/// Why a program did not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the module is {size} bytes, more than the {max} a program may be")]
    TooLarge { size: usize, max: usize },
    #[error("not a program VINO can run: {0}")]
    Invalid(String),
    /// The kernel would not start its thread (the user's thread limit: `EAGAIN`).
    #[error("cannot start the program's thread: {0}")]
    Refused(#[from] vino_kernel::SysError),
    /// A directory it was to be given could not be opened with its credentials.
    #[error("cannot give the program the directory {path}: {error}")]
    Dir { path: String, error: vino_kernel::SysError },
    /// A socket it was to be given could not be opened (a port in use, a refused connect).
    #[error("cannot give the program the socket {spec}: {error}")]
    Socket { spec: String, error: vino_kernel::SysError },
}

impl RunError {
    /// The errno a client is told: the kernel's for a refusal, `EINVAL` for a bad module.
    pub fn errno(&self) -> i32 {
        match self {
            RunError::Refused(e) | RunError::Dir { error: e, .. } | RunError::Socket { error: e, .. } => e.errno as i32,
            RunError::TooLarge { .. } => 27, // EFBIG
            RunError::Invalid(_) => 22,      // EINVAL
        }
    }
}

/// How a program ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// It returned from `main` (0) or called `exit(code)`.
    Code(u32),
    /// It trapped (out-of-bounds access, unreachable, stack overflow, memory limit...).
    Trap(String),
    /// Its [`KillSwitch`] was thrown, or SIGKILL sent.
    Killed,
    /// A signal other than SIGKILL ended it (its default action, or a kill).
    Signaled(u8),
    /// The kernel ended it: its memory was over its share and no swap was left for its pages
    /// (its user's swap limit, or the swap area full). Others run on.
    OutOfSwap,
}

impl Exit {
    /// What a runner tells its user besides the status: a trap's message, or why the kernel
    /// ended it.
    pub fn reason(&self) -> Option<String> {
        match self {
            Exit::Trap(why) => Some(why.clone()),
            Exit::OutOfSwap => {
                Some("killed: out of swap (its memory was over its share and no swap was left for its pages)".into())
            }
            _ => None,
        }
    }

    /// The status a shell would see: the code, 134 for a trap (as an abort), 128 plus the
    /// signal if one ended it (137 if killed).
    pub fn status(&self) -> i32 {
        self.exit_status().shell_status()
    }

    /// As the kernel records it for a parent's `wait`: a trap is a death by SIGABRT.
    pub fn exit_status(&self) -> vino_kernel::ExitStatus {
        use vino_kernel::{ExitStatus, signal};
        match self {
            Exit::Code(c) => ExitStatus::Exited((*c & 0xff) as u8),
            Exit::Trap(_) => ExitStatus::Signaled(signal::SIGABRT),
            Exit::Killed | Exit::OutOfSwap => ExitStatus::Signaled(signal::SIGKILL),
            Exit::Signaled(sig) => ExitStatus::Signaled(*sig),
        }
    }
}

/// The streams a program's descriptors 0, 1 and 2 stand for.
pub struct Stdio {
    pub stdin: Box<dyn Read + Send>,
    pub stdout: Box<dyn Write + Send>,
    pub stderr: Box<dyn Write + Send>,
    /// Whether each is a terminal (the program's `isatty`, hence its buffering).
    pub tty: [bool; 3],
}

impl Stdio {
    /// The runner's own standard streams.
    pub fn inherit() -> Stdio {
        Stdio {
            stdin: Box::new(std::io::stdin()),
            stdout: Box::new(std::io::stdout()),
            stderr: Box::new(std::io::stderr()),
            tty: Stdio::terminals(),
        }
    }

    /// Which of the runner's standard streams are terminals.
    pub fn terminals() -> [bool; 3] {
        // SAFETY: isatty only inspects the descriptor number.
        let tty = |fd| unsafe { libc::isatty(fd) == 1 };
        [tty(0), tty(1), tty(2)]
    }
}

/// The runner's streams as the processes of its session share them (a child spawned with its
/// parent's descriptors writes to the same output).
pub(crate) struct Streams {
    pub stdin: parking_lot::Mutex<Box<dyn Read + Send>>,
    pub stdout: parking_lot::Mutex<Box<dyn Write + Send>>,
    pub stderr: parking_lot::Mutex<Box<dyn Write + Send>>,
    pub tty: [bool; 3],
}

impl From<Stdio> for Streams {
    fn from(s: Stdio) -> Streams {
        Streams {
            stdin: parking_lot::Mutex::new(s.stdin),
            stdout: parking_lot::Mutex::new(s.stdout),
            stderr: parking_lot::Mutex::new(s.stderr),
            tty: s.tty,
        }
    }
}

/// Stops one run of a program ([`Program::kill_switch`]) at its next loop or call, or at once
/// if it is asleep in `poll_oneoff`. Other runs of the same program go on: a kill ticks the
/// engine's epoch, and each run's store asks its own switch whether that tick was for it.
#[derive(Clone)]
pub struct KillSwitch {
    engine: Engine,
    killed: Arc<AtomicBool>,
    /// The process the run is in, once it runs: a kill reaches it too, so that its blocked
    /// calls (a pipe, a wait) wake and see it.
    process: Arc<parking_lot::Mutex<std::sync::Weak<vino_kernel::Process>>>,
}

impl KillSwitch {
    pub fn kill(&self) {
        if self.killed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.engine.increment_epoch();
        let process = self.process.lock().upgrade();
        if let Some(p) = process {
            p.kill();
        }
    }

    fn killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }

    fn bind(&self, process: &Arc<vino_kernel::Process>) {
        *self.process.lock() = Arc::downgrade(process);
    }
}

/// A compiled program. One may run many times, at once on several threads (a cache of
/// compiled programs shares them), each run with its own [`KillSwitch`].
#[derive(Clone)]
pub struct Program {
    engine: Engine,
    module: Module,
    /// The module linked against the system calls once, so each run only instantiates.
    pre: InstancePre<Ctx>,
    limits: ProgramLimits,
    /// Its compiled form came from a [`DiskCache`].
    cached: bool,
    /// The module's bytes, streamed through `exec.verify` before every run (a compiled program
    /// kept in a cache is verified again each time), and their SHA-256.
    wasm: Arc<[u8]>,
    sha256: [u8; 32],
}

/// The engine every program is compiled and run by: asynchronous, so that a program is a
/// thread the CPU scheduler can preempt (at an epoch tick) and park while it sleeps.
fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = Config::new();
        config.epoch_interruption(true);
        // A thread's stack holds the program's frames (up to `max_wasm_stack`) and the
        // kernel's below them, a graft invoked from a system call included.
        config.max_wasm_stack(1 << 20);
        config.async_stack_size(8 << 20);
        // A compile runs on the thread that asked for it: in the daemon, a thread whose CPU is
        // charged to the program's user (and lowered when that user is heavy), not on a pool
        // of every core that nobody's share accounts for.
        config.parallel_compilation(false);
        // Programs' memories are the kernel's, paged by it (see `memory`); wasmtime's
        // copy-on-write images would map files over them.
        config.with_host_memory(Arc::new(memory::KernelMemories));
        config.memory_init_cow(false);
        // `VINO_PERFMAP=1`: programs' functions named for `perf` (/tmp/perf-PID.map).
        if std::env::var_os("VINO_PERFMAP").is_some() {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        Engine::new(&config).expect("the programs' engine configuration is valid")
    })
}

/// What a process's system calls work on.
pub(crate) struct Ctx {
    pub process: Arc<vino_kernel::Process>,
    /// The VINO thread running the program (to sleep and yield).
    pub thread: ThreadCtx,
    pub fds: fds::FdTable,
    pub args: Vec<Vec<u8>>,
    pub env: Vec<Vec<u8>>,
    pub stdio: Arc<Streams>,
    /// This run's kill switch was thrown (a kill from the runner, which may not go through
    /// the kernel's process).
    pub killed: Arc<AtomicBool>,
    limits: MemoryLimits,
    /// The limits its children get (its own).
    pub program_limits: ProgramLimits,
    /// Where in its function table its signal trampoline is (see `signals`).
    pub trampoline: Option<u32>,
    /// Its exported memory, once instantiated.
    pub memory: Option<wasmtime::Memory>,
}

impl Ctx {
    /// Whether the run is to end: its switch thrown or its process killed.
    pub fn ending(&self) -> bool {
        self.killed.load(Ordering::SeqCst) || self.process.killed()
    }
}

/// What a program starts with: its descriptors, arguments, environment and streams.
pub(crate) struct Start {
    pub fds: fds::FdTable,
    pub args: Vec<Vec<u8>>,
    pub env: Vec<Vec<u8>>,
    pub stdio: Arc<Streams>,
}

/// A program's memory: at most its cap, and every byte charged to its process (so to its
/// user and to all users: `[limits] program_memory_*`). A growth refused is `-1` from
/// `memory.grow`, which `malloc` reports as `ENOMEM`: the program decides what to do.
struct MemoryLimits {
    cap: usize,
    charge: Growing,
    /// The process whose memory the next creation makes, until it is made.
    creating: Option<Arc<vino_kernel::Process>>,
}

impl ResourceLimiter for MemoryLimits {
    fn memory_growing(&mut self, current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        let more = desired.saturating_sub(current) as u64;
        let allowed = desired <= self.cap && (more == 0 || self.charge.grow(more).is_ok());
        // The store's first memory: the creator, called next on this thread, takes the process.
        if allowed && let Some(process) = self.creating.take() {
            memory::memory_for(&process);
        }
        Ok(allowed)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }

    fn instances(&self) -> usize {
        1
    }

    fn tables(&self) -> usize {
        4
    }

    fn memories(&self) -> usize {
        1
    }
}

/// The descriptor table a program starts with: its standard streams, then `dirs` (or the
/// root as `/`) opened with its credentials, then `/dev`. On an error, the table opened so far comes back
/// to be closed.
fn preopen(process: &Arc<vino_kernel::Process>, setup: &Setup) -> Result<fds::FdTable, (RunError, fds::FdTable)> {
    let mut fds = preopen_dirs(process, &setup.dirs)?;
    for spec in &setup.sockets {
        let opened = spec.open(process).and_then(|s| {
            fds.insert(fds::Entry::Socket(s))
                .map_err(|_| vino_kernel::SysError::new(vino_kernel::Errno::MFile, "too many descriptors"))
        });
        if let Err(error) = opened {
            let spec = format!("{spec}");
            return Err((RunError::Socket { spec, error }, fds));
        }
    }
    Ok(fds)
}

fn preopen_dirs(process: &vino_kernel::Process, dirs: &[Dir]) -> Result<fds::FdTable, (RunError, fds::FdTable)> {
    let root = [Dir::parse("/")];
    let dirs = if dirs.is_empty() { &root[..] } else { dirs };
    let mut fds = fds::FdTable::with_stdio();
    for d in dirs {
        let path = String::from_utf8_lossy(&d.path).into_owned();
        match process.open_at(vino_kernel::At::Root, &d.path, vino_kernel::OpenFlags::directory()) {
            Ok(fd) => {
                let entry = fds::Entry::File(fds::File {
                    fd,
                    pos: 0,
                    append: false,
                    filetype: abi::filetype::DIRECTORY,
                    preopen: Some(d.name.clone()),
                });
                if fds.insert(entry).is_err() {
                    let _ = process.close(fd);
                    let error = vino_kernel::SysError::new(vino_kernel::Errno::MFile, "too many directories");
                    return Err((RunError::Dir { path, error }, fds));
                }
            }
            Err(error) => return Err((RunError::Dir { path, error }, fds)),
        }
    }
    // `/dev` beside them, unless the runner gave a directory by that name.
    if !dirs.iter().any(|d| d.name == dev::DIR_NAME) && fds.insert(fds::Entry::DevDir).is_err() {
        let error = vino_kernel::SysError::new(vino_kernel::Errno::MFile, "too many directories");
        return Err((
            RunError::Dir {
                path: "/dev".into(),
                error,
            },
            fds,
        ));
    }
    Ok(fds)
}

impl Program {
    /// Checks and compiles `wasm` (binary or text format).
    pub fn compile(wasm: &[u8], limits: ProgramLimits) -> Result<Program, RunError> {
        Program::compile_cached(wasm, limits, None)
    }

    /// As [`Program::compile`], taking the compiled form from `cache` if it holds it (the
    /// checks before compiling are made all the same), and leaving it there if not.
    pub fn compile_cached(wasm: &[u8], limits: ProgramLimits, cache: Option<&DiskCache>) -> Result<Program, RunError> {
        if wasm.len() > limits.module_bytes {
            return Err(RunError::TooLarge {
                size: wasm.len(),
                max: limits.module_bytes,
            });
        }
        // What compiling would cost, checked before any.
        let module = vino_graft::ModuleLimits::program(limits.module_bytes);
        // (A module in the text format, as tests write them, is parsed by wasmtime itself.)
        if wasm.starts_with(b"\0asm")
            && let Err(e) = vino_graft::precheck(wasm, &module)
        {
            return Err(RunError::Invalid(e.to_string()));
        }
        let engine = engine().clone();
        let loaded = cache.and_then(|c| c.load(&engine, wasm));
        let cached = loaded.is_some();
        let module = match loaded {
            Some(m) => m,
            None => Module::new(&engine, wasm).map_err(|e| RunError::Invalid(format!("{e:#}")))?,
        };
        if module.get_export("_start").is_none() {
            return Err(RunError::Invalid(
                "no `_start` export: build it as a command (crt1-command)".into(),
            ));
        }
        let mut linker = Linker::new(&engine);
        calls::define(&mut linker)
            .and_then(|()| vino::define(&mut linker))
            .map_err(|e| RunError::Invalid(e.to_string()))?;
        let pre = linker
            .instantiate_pre(&module)
            .map_err(|e| RunError::Invalid(format!("{e:#}")))?;
        // Kept only once it is known to be a program this kernel runs.
        if let (Some(c), false) = (cache, cached) {
            c.store(&engine, wasm, &module);
        }
        use sha2::Digest;
        Ok(Program {
            engine,
            module,
            pre,
            limits,
            cached,
            sha256: sha2::Sha256::digest(wasm).into(),
            wasm: wasm.into(),
        })
    }

    /// Whether its compiled form came from a [`DiskCache`] (not compiled this time).
    pub fn from_cache(&self) -> bool {
        self.cached
    }

    /// A new switch, for one run ([`Program::run`] takes it).
    pub fn kill_switch(&self) -> KillSwitch {
        KillSwitch {
            engine: self.engine.clone(),
            killed: Arc::new(AtomicBool::new(false)),
            process: Arc::default(),
        }
    }

    /// Bytes of compiled code the program holds, with its module's (for a cache's bound).
    pub fn code_bytes(&self) -> usize {
        let r = self.module.image_range();
        (r.end as usize).saturating_sub(r.start as usize) + self.wasm.len()
    }

    /// SHA-256 of the module.
    pub fn sha256(&self) -> &[u8; 32] {
        &self.sha256
    }

    /// Streams the module through `exec.verify` for `process`'s user, `name` naming it in a
    /// refusal (`EACCES`): what every run does before it starts.
    pub fn verify(&self, process: &vino_kernel::Process, name: &str) -> Result<Verified, RunError> {
        Ok(process.exec_verify(name, &self.wasm)?)
    }

    /// Runs the program as a new kernel process with `cred` and `setup`, until it ends or
    /// `kill` is thrown. The process exits when it does.
    pub fn run(
        &self,
        kernel: &Arc<Kernel>,
        cred: Credentials,
        setup: Setup,
        stdio: Stdio,
        kill: &KillSwitch,
    ) -> Result<Exit, RunError> {
        let process = kernel.spawn(cred);
        let pid = process.pid();
        let result = self.run_in(process, setup, stdio, kill);
        kernel.exit(pid);
        result
    }

    /// Runs the program in `process`, a kernel process the caller spawned (and makes exit
    /// afterwards): for a caller that keeps its own records of the process while it runs. The
    /// program runs as a thread of the process on the kernel's CPU scheduler; the calling
    /// thread (never one of the scheduler's workers) waits for it. A process that leads its
    /// session (one the caller spawned, not a child) ends the session with it: what its
    /// children still run is killed.
    pub fn run_in(
        &self,
        process: Arc<vino_kernel::Process>,
        setup: Setup,
        stdio: Stdio,
        kill: &KillSwitch,
    ) -> Result<Exit, RunError> {
        let verified = match self.verify(&process, &program_name(&setup.args)) {
            Ok(v) => v,
            Err(e) => {
                if process.session() == process.pid() {
                    process.kernel().end_session(process.pid());
                }
                return Err(e);
            }
        };
        self.run_verified_in(process, verified, setup, stdio, kill)
    }

    /// As [`Program::run_in`], with the module verified already (by [`Program::verify`]),
    /// for a caller that must know before it answers that the program may run.
    pub fn run_verified_in(
        &self,
        process: Arc<vino_kernel::Process>,
        verified: Verified,
        setup: Setup,
        stdio: Stdio,
        kill: &KillSwitch,
    ) -> Result<Exit, RunError> {
        let start = match preopen(&process, &setup) {
            Ok(fds) => Start {
                fds,
                env: setup.environment(),
                args: setup.args,
                stdio: Arc::new(Streams::from(stdio)),
            },
            Err((error, mut opened)) => {
                for fd in opened.drain() {
                    let _ = process.close(fd);
                }
                return Err(error);
            }
        };
        let exit = self.run_start(process.clone(), verified, start, kill);
        if process.session() == process.pid() {
            process.kernel().end_session(process.pid());
        }
        exit
    }

    /// Runs the program in `process` from `start`, on a thread of the process; waits for it.
    /// Every run comes here, with the proof that `exec.verify` let the module run.
    pub(crate) fn run_start(
        &self,
        process: Arc<vino_kernel::Process>,
        verified: Verified,
        mut start: Start,
        kill: &KillSwitch,
    ) -> Result<Exit, RunError> {
        if let Err(e) = process.exec_start(verified, &self.sha256) {
            for fd in start.fds.drain() {
                let _ = process.close(fd);
            }
            return Err(e.into());
        }
        let engine = self.engine.clone();
        process
            .kernel()
            .on_cpu_tick("vino-wasi programs", Arc::new(move || engine.increment_epoch()));
        // A kill of the process (`vino kill`, a shutdown, a signal) throws this run's switch.
        let switch = kill.clone();
        process.set_killer(Arc::new(move || switch.kill()));
        kill.bind(&process);
        if kill.killed() {
            // Thrown before the run had a process: the process learns it now.
            process.kill();
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (program, kill, runner) = (self.clone(), kill.clone(), process.clone());
        let thread = process.spawn_thread(move |thread| async move {
            let outcome = program.run_thread(runner, start, &kill, thread).await;
            let _ = tx.send(outcome);
        })?;
        thread.join();
        rx.recv()
            .unwrap_or_else(|_| Err(RunError::Invalid("the program's thread ended without a result".into())))
    }

    /// The program's main thread.
    async fn run_thread(
        &self,
        process: Arc<vino_kernel::Process>,
        start: Start,
        kill: &KillSwitch,
        thread: ThreadCtx,
    ) -> Result<Exit, RunError> {
        let Start { fds, args, env, stdio } = start;
        let limits = MemoryLimits {
            cap: self.limits.memory_bytes,
            charge: Growing::new(process.account().clone(), Resource::ProgramMemory),
            creating: Some(process.clone()),
        };
        let ctx = Ctx {
            process: process.clone(),
            thread: thread.clone(),
            fds,
            args,
            env,
            stdio,
            killed: kill.killed.clone(),
            limits,
            program_limits: self.limits,
            trampoline: None,
            memory: None,
        };
        let mut store = Store::new(&self.engine, ctx);
        store.limiter(|c| &mut c.limits);
        store.set_epoch_deadline(1);
        let mine = kill.clone();
        // Every tick: a kill ends the run; a slice used up gives the worker back.
        let stoppable = process.clone();
        store.epoch_deadline_callback(move |_| {
            if mine.killed() {
                Err(Trap::Interrupt.into())
            } else if stoppable.take_stop() {
                // SIGSTOP (or another stop): the thread waits, off its worker, for a SIGCONT.
                let p = stoppable.clone();
                let continued = std::future::poll_fn(move |cx| p.poll_continued(cx));
                Ok(wasmtime::UpdateDeadline::YieldCustom(1, Box::pin(continued)))
            } else if thread.slice_over() {
                Ok(wasmtime::UpdateDeadline::Yield(1))
            } else {
                Ok(wasmtime::UpdateDeadline::Continue(1))
            }
        });
        let outcome = match self.pre.instantiate_async(&mut store).await {
            // A kill that landed while it was being made (its memory's pages faulting in): it
            // ends as killed, not as a program that could not start.
            Err(e) if kill.killed() || process.killed() => Ok(Err(e)),
            Err(e) => Err(RunError::Invalid(format!("{e:#}"))),
            Ok(instance) => {
                store.data_mut().memory = instance.get_memory(&mut store, "memory");
                match instance.get_typed_func::<(), ()>(&mut store, "_start") {
                    Err(e) => Err(RunError::Invalid(format!("`_start`: {e}"))),
                    Ok(start) => Ok(start.call_async(&mut store, ()).await),
                }
            }
        };
        let ctx = store.data_mut();
        let _ = ctx.stdio.stdout.lock().flush();
        let _ = ctx.stdio.stderr.lock().flush();
        for fd in ctx.fds.drain() {
            let _ = process.close(fd);
        }
        Ok(match outcome? {
            Ok(()) => Exit::Code(0),
            Err(e) => {
                if let Some(calls::ProcExit(code)) = e.downcast_ref::<calls::ProcExit>() {
                    Exit::Code(*code)
                } else if process.ran_out_of_swap() {
                    Exit::OutOfSwap
                } else if kill.killed() || e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
                    match process.killed_by() {
                        Some(sig) if sig != vino_kernel::signal::SIGKILL => Exit::Signaled(sig),
                        _ => Exit::Killed,
                    }
                } else {
                    Exit::Trap(format!("{e:#}"))
                }
            }
        })
    }
}

/// A program's name for messages: its first argument.
pub(crate) fn program_name(args: &[Vec<u8>]) -> String {
    args.first()
        .map_or_else(|| "(unnamed)".into(), |a| String::from_utf8_lossy(a).into_owned())
}
