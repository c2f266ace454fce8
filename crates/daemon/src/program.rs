//! Programs run in the daemon (`vino run --socket`): a WebAssembly program (WASI preview 1)
//! sent over a connection runs as a VINO process with that connection's credentials, as a
//! thread on the kernel's CPU scheduler (the connection's thread waits for it and carries its
//! streams). The connection then belongs to the program: what it writes to its
//! standard output and error goes to the client as [`Response::Output`] frames, the client's
//! [`Request::Input`] frames are its standard input, and [`Request::Kill`] (or the client going
//! away) kills it. At its end the daemon sends [`Response::Exited`] and closes the connection.
//! A detached program (`vino run --detach`) answers its process id at once, ends the connection
//! and runs on without input or output, until it ends or [`Request::KillProgram`] stops it.
//!
//! Each program counts against its user's `programs_per_user` (and the daemon's
//! `programs_total`) while it runs, and its memory is capped at `program_memory`.

use crate::dispatch::Session;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use vino_kernel::account::Resource;
use vino_proto::{ErrorReply, MAX_FRAME, PipeStage, ProgramSetup, Request, Response};
use vino_wasi::{Dir, Exit, KillSwitch, Program, ProgramLimits, Setup, Stage, Stdio};

/// Compiled programs by their module's hash, so that a program run again (by anyone who sends
/// the same bytes) is not compiled again: sqlite3.wasm takes 0.7 s to compile. Bounded by
/// count and by compiled code, the least recently used going first.
#[derive(Default)]
pub(crate) struct ProgramCache {
    entries: Mutex<Vec<Cached>>,
    compiled: std::sync::atomic::AtomicU64,
}

struct Cached {
    hash: [u8; 32],
    program: Arc<Program>,
    used: u64,
}

/// Most programs the cache keeps, and most compiled code.
const CACHE_PROGRAMS: usize = 16;
const CACHE_CODE_BYTES: usize = 256 << 20;

impl ProgramCache {
    /// The compiled program of `wasm`, from the cache or compiled now for `process` (outside
    /// the cache's lock, so that one long compile holds up nobody else's run): on its thread,
    /// as one of its user's compiles in progress, its time added to its account.
    fn get_or_compile(
        &self,
        wasm: &[u8],
        memory_bytes: usize,
        process: &vino_kernel::Process,
    ) -> Result<Arc<Program>, ErrorReply> {
        use sha2::Digest;
        let hash: [u8; 32] = sha2::Sha256::digest(wasm).into();
        let tick = self.compiled.load(std::sync::atomic::Ordering::Relaxed);
        if let Some(c) = self.entries.lock().unwrap().iter_mut().find(|c| c.hash == hash) {
            c.used = tick;
            return Ok(c.program.clone());
        }
        let limits = ProgramLimits {
            module_bytes: vino_proto::MAX_MODULE,
            memory_bytes,
        };
        let compiling = process
            .compile_charge()
            .map_err(|e| ErrorReply::new(e.errno as i32, e.message))?;
        let started = std::time::Instant::now();
        let compiled = Program::compile(wasm, limits);
        process.account().add_cpu(started.elapsed());
        drop(compiling);
        let program = Arc::new(compiled.map_err(|e| ErrorReply::new(vino_proto::errno::EINVAL, e.to_string()))?);
        let tick = self.compiled.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let mut entries = self.entries.lock().unwrap();
        if !entries.iter().any(|c| c.hash == hash) && program.code_bytes() <= CACHE_CODE_BYTES {
            entries.push(Cached {
                hash,
                program: program.clone(),
                used: tick,
            });
            let code = |e: &Vec<Cached>| e.iter().map(|c| c.program.code_bytes()).sum::<usize>();
            while entries.len() > CACHE_PROGRAMS || code(&entries) > CACHE_CODE_BYTES {
                let oldest = (0..entries.len()).min_by_key(|&i| entries[i].used).expect("not empty");
                entries.swap_remove(oldest);
            }
        }
        Ok(program)
    }

    /// Modules compiled so far (cache misses).
    pub fn compiled(&self) -> u64 {
        self.compiled.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// What `vino ps` shows of a running program beyond its kernel process's accounts.
pub(crate) struct Running {
    /// Its name (its first argument).
    pub name: String,
    /// Its user, who may kill it (as may the privileged).
    pub uid: u32,
    /// Its kernel process, whose threads the CPU scheduler accounts for.
    process: Arc<vino_kernel::Process>,
    /// The connection of a program whose client stays, read for its input.
    input: Option<UnixStream>,
}

impl Running {
    /// Kills the program; one waiting for its input is woken too, with the input's end (no
    /// more of the client's frames are read).
    pub fn kill(&self) {
        self.process.kill();
        if let Some(c) = &self.input {
            let _ = c.shutdown(std::net::Shutdown::Read);
        }
    }

    /// CPU time the program's threads have used, as the CPU scheduler charged it, in
    /// nanoseconds.
    pub fn cpu_ns(&self) -> u64 {
        let p = &self.process;
        p.cpu_time().map_or(0, |d| d.as_nanos() as u64)
    }
}

/// Input frames (each at most `MAX_DATA`) queued for a program before the daemon stops reading
/// the client's: a program that does not read its input holds at most this many.
const INPUT_FRAMES: usize = 8;

/// Runs the program the client sent (with the further stages of its pipeline, if any), until
/// it ends; the connection ends with it.
pub(crate) fn run(
    stream: &mut UnixStream,
    reader: impl Read + Send,
    session: &Session<'_>,
    (wasm, then): (Vec<u8>, Vec<PipeStage>),
    setup: ProgramSetup,
    detach: bool,
) {
    let refuse = |stream: &mut UnixStream, errno: i32, msg: String| {
        let _ = vino_proto::write_frame(stream, &Response::Error(ErrorReply::new(errno, msg)));
    };
    let _running = match session.process.account().charge(Resource::Programs, 1) {
        Ok(c) => c,
        Err(e) => return refuse(stream, e.errno(), e.to_string()),
    };
    let daemon = session.daemon;
    let mut programs = Vec::with_capacity(1 + then.len());
    for (module, args) in std::iter::once((wasm, None)).chain(then.into_iter().map(|t| (t.wasm, Some(t.args)))) {
        match daemon
            .program_cache
            .get_or_compile(&module, daemon.program_memory(), &session.process)
        {
            Ok(p) => programs.push((p, args)),
            Err(e) => return refuse(stream, e.errno, e.message),
        }
    }
    let (Ok(out), Ok(watch)) = (stream.try_clone(), stream.try_clone()) else {
        return;
    };
    // Checked before a process is made for it.
    let sockets = match setup.sockets.iter().map(socket_spec).collect::<Result<Vec<_>, _>>() {
        Ok(s) => s,
        Err(why) => return refuse(stream, vino_proto::errno::EINVAL, why),
    };
    let kernel = daemon.kernel().clone();
    let cred = session.process.credentials().clone();
    let uid = cred.uid;
    let process = kernel.spawn(cred);
    let pid = process.pid();
    let tty = setup.tty;
    let setup = Setup {
        args: setup.args,
        env: setup.env,
        dirs: setup.dirs.into_iter().map(|(path, name)| Dir { path, name }).collect(),
        cwd: setup.cwd,
        sockets: Vec::new(),
    };
    // The stages of a pipeline: each its program and arguments, the rest of the first's setup.
    let stages: Vec<Stage> = programs
        .iter()
        .map(|(p, args)| Stage {
            program: (**p).clone(),
            setup: Setup {
                args: args.clone().unwrap_or_else(|| setup.args.clone()),
                ..setup.clone()
            },
        })
        .collect();
    // The sockets are the first program's.
    let mut stages = stages;
    stages[0].setup.sockets = sockets;
    let program = programs[0].0.clone();
    let name = setup
        .args
        .first()
        .map_or_else(String::new, |a| String::from_utf8_lossy(a).into_owned());
    let kill = program.kill_switch();
    // Every module passes `exec.verify` before the client hears that it runs: a cached compile
    // is streamed through it again (a pipeline's stages are verified again on their own
    // processes when they start).
    let mut verified = Vec::with_capacity(stages.len());
    for stage in &stages {
        let stage_name = stage
            .setup
            .args
            .first()
            .map_or_else(|| name.clone(), |a| String::from_utf8_lossy(a).into_owned());
        match stage.program.verify(&process, &stage_name) {
            Ok(v) => verified.push(v),
            Err(e) => {
                kernel.exit(pid);
                return refuse(stream, e.errno(), e.to_string());
            }
        }
    }
    let verified = if stages.len() == 1 { verified.pop() } else { None };
    daemon.programs.lock().insert(
        pid,
        Running {
            name,
            uid,
            process: process.clone(),
            input: if detach { None } else { stream.try_clone().ok() },
        },
    );
    if detach {
        // The client has its answer and goes; the program runs on without it.
        let answered = vino_proto::write_frame(stream, &Response::Value(pid as i64));
        let _ = stream.shutdown(std::net::Shutdown::Both);
        drop(reader);
        let stdio = Stdio {
            stdin: Box::new(io::empty()),
            stdout: Box::new(io::sink()),
            stderr: Box::new(io::sink()),
            tty: [false; 3],
        };
        if answered.is_ok() {
            let _ = run_stages(stages, verified, process, stdio, &kill);
        }
    } else {
        attached(stream, reader, &watch, out, (stages, verified), process, tty, &kill);
    }
    daemon.programs.lock().remove(&pid);
    kernel.exit(pid);
}

/// Runs one program in `process`, or a pipeline with `process` holding its session: each
/// stage's exit.
fn run_stages(
    mut stages: Vec<Stage>,
    verified: Option<vino_wasi::Verified>,
    process: Arc<vino_kernel::Process>,
    stdio: Stdio,
    kill: &KillSwitch,
) -> Result<Vec<Exit>, vino_wasi::RunError> {
    if stages.len() == 1 {
        let only = stages.pop().expect("one stage");
        return match verified {
            Some(v) => only.program.run_verified_in(process, v, only.setup, stdio, kill),
            None => only.program.run_in(process, only.setup, stdio, kill),
        }
        .map(|e| vec![e]);
    }
    vino_wasi::run_pipeline(&process, stages, stdio, kill)
}

/// A program whose client stays: its streams over the connection, its end answered.
#[allow(clippy::too_many_arguments)]
fn attached(
    stream: &UnixStream,
    reader: impl Read + Send,
    watch: &UnixStream,
    out: UnixStream,
    (stages, verified): (Vec<Stage>, Option<vino_wasi::Verified>),
    process: Arc<vino_kernel::Process>,
    tty: [bool; 3],
    kill: &KillSwitch,
) {
    // Room for a batch or two in the socket, so that a send seldom waits for the client's
    // next read (the kernel caps it at net.core.wmem_max; bounded either way).
    let _ = nix::sys::socket::setsockopt(&out, nix::sys::socket::sockopt::SndBuf, &SOCKET_BUFFER);
    let out = Arc::new(Output::new(out));
    if out.send(&Response::Ok, true).is_err() {
        return;
    }
    let input = Arc::new(InputQueue::default());
    let stdio = Stdio {
        stdin: Box::new(QueueReader {
            queue: input.clone(),
            output: out.clone(),
            pending: Vec::new(),
            at: 0,
        }),
        stdout: Box::new(FrameWriter {
            out: out.clone(),
            stream: 1,
        }),
        stderr: Box::new(FrameWriter {
            out: out.clone(),
            stream: 2,
        }),
        tty,
    };
    let ended = std::sync::atomic::AtomicBool::new(false);
    let exit = std::thread::scope(|s| {
        let signalled = process.clone();
        s.spawn(move || client_frames(reader, watch, &input, kill, &signalled));
        s.spawn(|| out.linger(&ended));
        let exit = run_stages(stages, verified, process, stdio, kill);
        ended.store(true, std::sync::atomic::Ordering::Release);
        // Ends the client-frame reader (it sees the end of the stream) and the connection.
        let _ = stream.shutdown(std::net::Shutdown::Read);
        exit
    });
    let answer = match exit {
        Ok(exits) => Response::Exited {
            code: vino_wasi::pipefail_status(&exits),
            trap: exits.iter().find_map(Exit::reason),
        },
        Err(e) => Response::Error(ErrorReply::new(e.errno(), e.to_string())),
    };
    let _ = out.send(&answer, true);
}

/// The client's frames while its program runs: input, a kill, or the end of the connection
/// (which kills the program too: nobody is left to read what it writes).
fn client_frames(
    mut reader: impl Read,
    watch: &UnixStream,
    input: &InputQueue,
    kill: &KillSwitch,
    process: &vino_kernel::Process,
) {
    let mut buf = Vec::new();
    loop {
        let frame = vino_proto::read_frame(&mut reader, &mut buf, MAX_FRAME).and_then(|()| vino_proto::decode(&buf));
        match frame {
            Ok(Request::Input { data }) if data.is_empty() => input.end(),
            Ok(Request::Signal { sig }) => process.kernel().signal_session(process.pid(), sig),
            Ok(Request::Input { data }) => {
                if !input.push(data, watch) {
                    // The client hung up while its program's input was full.
                    input.end();
                    kill.kill();
                    return;
                }
            }
            Ok(_) | Err(_) => {
                // A kill, something else (the program owns the connection), or the client gone.
                input.end();
                kill.kill();
                if !matches!(frame, Ok(Request::Kill)) {
                    return;
                }
            }
        }
    }
}

/// The program's standard input on its way from the client: at most [`INPUT_FRAMES`] frames
/// queued, the client's connection read no further while it is full.
#[derive(Default)]
struct InputQueue {
    state: parking_lot::Mutex<InputState>,
    changed: parking_lot::Condvar,
}

#[derive(Default)]
struct InputState {
    frames: std::collections::VecDeque<Vec<u8>>,
    /// The client ended its input (or went).
    ended: bool,
    /// The program's end of it is gone: what comes is dropped.
    closed: bool,
}

/// How often a full queue looks whether its client hung up.
const HANGUP_CHECK: std::time::Duration = std::time::Duration::from_millis(50);

impl InputQueue {
    /// Queues `data` for the program; while the queue is full, waits for room (woken at once
    /// when the program takes a frame) and watches the client's end of the connection instead
    /// of reading it (it may not read ahead), so that a client that goes is still noticed.
    /// False if the client hung up; true once queued, or if the program no longer takes input.
    fn push(&self, data: Vec<u8>, watch: &UnixStream) -> bool {
        let mut s = self.state.lock();
        while s.frames.len() >= INPUT_FRAMES && !s.closed {
            if self.changed.wait_for(&mut s, HANGUP_CHECK).timed_out() && hung_up(watch, 0) {
                return false;
            }
        }
        if !s.closed && !s.ended {
            s.frames.push_back(data);
            self.changed.notify_all();
        }
        true
    }

    /// No more input: the program reads its end once the queue is drained.
    fn end(&self) {
        self.state.lock().ended = true;
        self.changed.notify_all();
    }

    /// The next frame, waiting for one; `None` at the end.
    fn pop(&self) -> Option<Vec<u8>> {
        let mut s = self.state.lock();
        loop {
            if let Some(f) = s.frames.pop_front() {
                self.changed.notify_all();
                return Some(f);
            }
            if s.ended {
                return None;
            }
            self.changed.wait(&mut s);
        }
    }

    /// The next frame if one is queued (`Some(None)`: the end).
    fn try_pop(&self) -> Option<Option<Vec<u8>>> {
        let mut s = self.state.lock();
        match s.frames.pop_front() {
            Some(f) => {
                self.changed.notify_all();
                Some(Some(f))
            }
            None if s.ended => Some(None),
            None => None,
        }
    }

    /// The program is gone: queued frames are freed and a waiting client reader goes on.
    fn close(&self) {
        let mut s = self.state.lock();
        s.closed = true;
        s.frames.clear();
        self.changed.notify_all();
    }
}

/// True if the peer of `s` has closed its end (or the socket failed), waiting up to `ms`.
fn hung_up(s: &UnixStream, ms: i32) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call's duration; the descriptor is open (borrowed).
    let n = unsafe { libc::poll(&raw mut p, 1, ms) };
    n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// The program's standard input: the client's input frames, in order; the end when the client
/// says so, goes, or the program is killed.
struct QueueReader {
    queue: Arc<InputQueue>,
    /// Sent before the program waits for input (a prompt shows before its answer is awaited).
    output: Arc<Output>,
    pending: Vec<u8>,
    at: usize,
}

impl Read for QueueReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at == self.pending.len() {
            // Nothing queued: the wait lasts until the client sends, so the program's worker
            // goes to other threads at once (vino_sched::blocking) instead of after two ticks.
            let next = match self.queue.try_pop() {
                Some(got) => got,
                None => {
                    let _ = self.output.flush();
                    vino_kernel::blocking_wait(|| self.queue.pop())
                }
            };
            match next {
                Some(data) => (self.pending, self.at) = (data, 0),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.pending.len() - self.at);
        buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Drop for QueueReader {
    fn drop(&mut self) {
        self.queue.close();
    }
}

/// What a program writes, on its way to the client: frames gathered into one buffer (so one
/// send carries many of the program's writes) and sent once it holds [`OUTPUT_BATCH`] bytes,
/// when the program writes to its standard error, before it waits for input, at its end, and
/// by [`Output::linger`] otherwise, so nothing waits long. A client that does not read holds
/// up the program's next send, never the daemon's memory: the buffer is bounded.
struct Output {
    state: Mutex<OutputState>,
}

struct OutputState {
    stream: UnixStream,
    frames: Vec<u8>,
}

/// Bytes of output gathered before they are sent.
const OUTPUT_BATCH: usize = 256 << 10;

/// The send buffer a program's connection asks for.
const SOCKET_BUFFER: usize = 2 << 20;

/// Longest a program's output waits in the buffer.
const OUTPUT_LINGER: std::time::Duration = std::time::Duration::from_millis(10);

impl Output {
    fn new(stream: UnixStream) -> Output {
        Output {
            state: Mutex::new(OutputState {
                stream,
                frames: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> io::Result<std::sync::MutexGuard<'_, OutputState>> {
        self.state
            .lock()
            .map_err(|_| io::Error::other("the connection's writer"))
    }

    /// Queues `msg`; sends what is gathered if `now` or once there is enough.
    fn send(&self, msg: &Response, now: bool) -> io::Result<()> {
        let mut s = self.lock()?;
        vino_proto::encode_into(msg, &mut s.frames);
        s.sent(now)
    }

    /// Queues `data` as an output frame of `stream`, copied once, from the program's memory.
    fn output(&self, stream: u8, data: &[u8]) -> io::Result<()> {
        let empty = Response::Output {
            stream,
            data: Vec::new(),
        };
        let mut s = self.lock()?;
        s.frames
            .extend_from_slice(&vino_proto::bytes_frame_head(&empty, data.len()));
        s.frames.extend_from_slice(data);
        s.sent(stream == 2)
    }

    fn flush(&self) -> io::Result<()> {
        self.lock()?.flush()
    }

    /// Sends what is gathered every [`OUTPUT_LINGER`] until `done`.
    fn linger(&self, done: &std::sync::atomic::AtomicBool) {
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::sleep(OUTPUT_LINGER);
            if self.flush().is_err() {
                return;
            }
        }
    }
}

impl OutputState {
    /// Sends what is gathered if `now` or once there is enough.
    fn sent(&mut self, now: bool) -> io::Result<()> {
        if now || self.frames.len() >= OUTPUT_BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.frames.is_empty() {
            return Ok(());
        }
        let sent = self.stream.write_all(&self.frames);
        self.frames.clear();
        if self.frames.capacity() > 2 * OUTPUT_BATCH + vino_proto::MAX_DATA {
            self.frames = Vec::new();
        }
        sent
    }
}

/// The program's standard output or error: each write a frame to the client.
struct FrameWriter {
    out: Arc<Output>,
    stream: u8,
}

impl Write for FrameWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(vino_proto::MAX_DATA);
        self.out.output(self.stream, &buf[..n])?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// A socket the client asked for, as the runner opens it.
fn socket_spec(s: &vino_proto::ProgramSocket) -> Result<vino_wasi::SocketSpec, String> {
    match s {
        vino_proto::ProgramSocket::Listen(spec) => vino_wasi::SocketSpec::parse(spec, true),
        vino_proto::ProgramSocket::Connect(spec) => vino_wasi::SocketSpec::parse(spec, false),
    }
}
