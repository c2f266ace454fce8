//! Programs run in the daemon (`Request::Run`): the connection's credentials, standard streams
//! both ways, the program's status, a kill or a client that goes ending it with nothing held,
//! the count of programs running, and modules that are no programs refused.
//!
//! The test with another user runs it as a child process of this binary (`child_role`) that
//! takes the user's credentials before it connects; skipped unless the tests run as root.

mod common;

use common::{TestDaemon, is_root, spawn_child, wait_line};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use vino_client::{Client, ProgramEvent, ProgramSetup, RunningProgram};

const TEST: &str = "child_role";

/// `crates/wasi/tests/programs/copy.c` built for wasm32-wasi, in a directory every user reads.
fn copy_program() -> (Vec<u8>, PathBuf) {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = LOCK.lock().unwrap();
    let dir = DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    });
    let out = dir.path().join("copy.wasm");
    if !out.exists() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wasi/tests/programs/copy.c");
        vino_sdk::build_program(&[src], &out, &Default::default()).unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    (std::fs::read(&out).unwrap(), out)
}

/// A setup with these arguments, no environment, the whole file system.
fn setup(a: &[&str]) -> ProgramSetup {
    ProgramSetup::new(a.iter().map(|s| s.as_bytes().to_vec()).collect(), Vec::new())
}

/// Sends `data` as the program's input, in 100 kB frames, then its end, from a thread.
fn feed(p: &RunningProgram, data: &[u8]) -> std::thread::JoinHandle<()> {
    let (control, data) = (p.control(), data.to_vec());
    std::thread::spawn(move || {
        for chunk in data.chunks(100_000) {
            control.input(chunk).unwrap();
        }
        control.input(&[]).unwrap();
    })
}

/// Reads the program's events to its end: (stdout, stderr, status).
fn finish(mut p: RunningProgram) -> (Vec<u8>, String, i32) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    loop {
        match p.next_event().unwrap() {
            ProgramEvent::Output { stream: 1, data } => out.extend(data),
            ProgramEvent::Output { data, .. } => err.extend(data),
            ProgramEvent::Exited { code, .. } => return (out, String::from_utf8_lossy(&err).into_owned(), code),
        }
    }
}

#[test]
fn a_program_runs_in_the_daemon_with_its_streams_and_status() {
    let d = TestDaemon::start();
    let (wasm, _) = copy_program();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    let p = d.client().run_program(&wasm, &setup(&["copy", "-", "/kept"])).unwrap();
    let feeder = feed(&p, &data);
    let (out, err, code) = finish(p);
    feeder.join().unwrap();
    assert_eq!((code, out.len()), (0, 0), "{err}");
    let p = d.client().run_program(&wasm, &setup(&["copy", "/kept", "-"])).unwrap();
    let (out, err, code) = finish(p);
    assert_eq!(code, 0, "{err}");
    assert!(out == data, "3 MB through the program's stdin, the file and its stdout");
    let p = d
        .client()
        .run_program(&wasm, &setup(&["copy", "/missing", "-"]))
        .unwrap();
    let (_, err, code) = finish(p);
    assert_eq!(code, 1);
    assert!(err.contains("/missing: No such file or directory"), "{err}");
    assert_eq!(
        d.handle().daemon().programs_compiled(),
        1,
        "compiled once, run three times"
    );
    d.wait_processes(0);
}

#[test]
fn a_kill_or_a_client_that_goes_ends_the_program_with_nothing_held() {
    let d = TestDaemon::start();
    let (wasm, _) = copy_program();
    let p = d
        .client()
        .run_program(&wasm, &setup(&["copy", "--sleep", "100"]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // A second run of the same (cached, shared) program is not touched by the first's kill.
    let other = d
        .client()
        .run_program(&wasm, &setup(&["copy", "--sleep", "1"]))
        .unwrap();
    let started = Instant::now();
    p.control().kill().unwrap();
    let (_, _, code) = finish(p);
    assert_eq!(code, vino_wasi_killed());
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(finish(other).2, 0, "the other run slept its second and ended");
    // The client goes without a word: the program goes with it.
    let p = d.client().run_program(&wasm, &setup(&["copy", "-", "/f"])).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // Waiting for input it gave its worker to others at once.
    let stats = d.handle().kernel().cpu_stats();
    assert!(stats.handoffs >= 1, "{stats:?}");
    // What it wrote shows in its account (`vino ps`).
    p.control().input(b"eleven byte").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let top = d.client().top().unwrap();
        let row = top
            .processes
            .iter()
            .find(|r| r.program.is_some())
            .expect("the program is listed");
        if row.bytes_written == 11 {
            assert!(row.memory_bytes > 0, "{row:?}");
            // Its memory is the kernel's, paged in as it was touched (where the host gives the
            // pager userfaultfd).
            if d.handle().kernel().pager_stats().is_some() {
                assert!(row.memory.resident > 0 && row.memory.zero_faults > 0, "{row:?}");
            }
            break;
        }
        assert!(Instant::now() < deadline, "{row:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(p);
    d.wait_processes(0);
    assert_eq!(d.handle().kernel().referenced_inodes(), 0, "its files were closed");
}

#[test]
fn a_kill_from_elsewhere_wakes_a_program_waiting_for_its_input() {
    // The program's client stays and sends nothing: only the kill can end its wait.
    let d = TestDaemon::start();
    let (wasm, _) = copy_program();
    let p = d.client().run_program(&wasm, &setup(&["copy", "-", "/f"])).unwrap();
    let daemon = d.handle().daemon();
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = loop {
        if let Some(row) = daemon.top().processes.iter().find(|r| r.program.is_some()) {
            break row.pid;
        }
        assert!(Instant::now() < deadline, "the program is listed");
        std::thread::sleep(Duration::from_millis(10));
    };
    std::thread::sleep(Duration::from_millis(100));
    d.client().kill_program(pid).unwrap();
    assert_eq!(finish(p).2, vino_wasi_killed());
    d.wait_processes(0);
}

#[test]
fn a_detached_program_outlives_its_client_and_only_its_user_may_kill_it() {
    let d = TestDaemon::start();
    let (wasm, _) = copy_program();
    let pid = d
        .client()
        .run_detached(&wasm, &setup(&["copy", "--sleep", "100"]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let daemon = d.handle().daemon();
    let running = |pid: u64| {
        daemon
            .top()
            .processes
            .iter()
            .any(|p| p.pid == pid && p.program.is_some())
    };
    assert!(running(pid), "it runs on after its client went");
    // Another user may neither see it nor kill it; its own may.
    let other = vino_kernel::Credentials::user(1000, 1000);
    let e = daemon.kill_program(pid, &other).unwrap_err();
    assert_eq!(e.errno, vino_proto::errno::ESRCH);
    assert!(running(pid));
    let e = d.client().kill_program(pid + 1000).unwrap_err();
    assert_eq!(e.errno, vino_proto::errno::ESRCH, "no such program");
    d.client().kill_program(pid).unwrap();
    d.wait_processes(0);
    // A detached program that ends by itself leaves nothing either.
    let pid = d.client().run_detached(&wasm, &setup(&["copy", "-", "/out"])).unwrap();
    assert!(pid > 0);
    d.wait_processes(0);
    let st = d.client().stat("/out").unwrap();
    assert_eq!(st.size, 0, "no input: an empty file");
}

#[test]
fn tickets_are_set_by_a_processs_user_and_a_users_by_the_privileged() {
    use vino_proto::errno::{EINVAL, EPERM, ESRCH};
    let d = TestDaemon::start();
    let (wasm, _) = copy_program();
    let pid = d
        .client()
        .run_detached(&wasm, &setup(&["copy", "--sleep", "100"]))
        .unwrap();
    let daemon = d.handle().daemon();
    let kernel = d.handle().kernel();
    d.client().set_tickets(Some(pid), 300).unwrap();
    assert_eq!(kernel.process(pid).unwrap().tickets(), Some(300));
    // The program's thread is made once its module is instantiated, after the call returned.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let row = loop {
        let row = daemon.top().processes.into_iter().find(|p| p.pid == pid).unwrap();
        if row.threads > 0 || std::time::Instant::now() > until {
            break row;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert_eq!(
        (row.tickets, row.threads),
        (300, 1),
        "vino ps shows its tickets and thread"
    );
    // Another user's process is not there for it; a user's share is for the privileged.
    let other = d.handle().kernel().spawn(vino_kernel::Credentials::user(1000, 1000));
    assert_eq!(other.set_tickets_of(pid, 5).unwrap_err().errno as i32, ESRCH);
    assert_eq!(other.set_user_tickets(1000, 5).unwrap_err().errno as i32, EPERM);
    d.handle().kernel().exit(other.pid());
    assert_eq!(kernel.process(pid).unwrap().tickets(), Some(300));
    assert_eq!(d.client().set_tickets(Some(pid), 0).unwrap_err().errno, EINVAL);
    d.client().set_user_tickets(1000, 50).unwrap();
    assert_eq!(kernel.user_tickets(1000), 50);
    // Without a pid: the connection's own process.
    d.client().set_tickets(None, 7).unwrap();
    d.client().kill_program(pid).unwrap();
    d.wait_processes(0);
}

/// The status of a killed program (`vino_wasi::Exit::Killed`).
fn vino_wasi_killed() -> i32 {
    137
}

#[test]
fn programs_are_counted_and_bad_modules_refused() {
    // Root has no per-user limits: the daemon's total holds it (and every user) to two.
    let d = TestDaemon::with(|c| c.limits.programs_total = Some(2));
    let (wasm, _) = copy_program();
    let sleepers: Vec<RunningProgram> = (0..2)
        .map(|_| {
            d.client()
                .run_program(&wasm, &setup(&["copy", "--sleep", "100"]))
                .unwrap()
        })
        .collect();
    let e = d
        .client()
        .run_program(&wasm, &setup(&["copy", "--sleep", "1"]))
        .err()
        .expect("a third program is refused");
    assert_eq!(e.errno, vino_proto::errno::EAGAIN, "{}", e.message);
    for p in sleepers {
        p.control().kill().unwrap();
        finish(p);
    }
    let p = d
        .client()
        .run_program(&wasm, &setup(&["copy", "--sleep", "0"]))
        .unwrap();
    assert_eq!(finish(p).2, 0, "a place again once the others ended");
    let e = d.client().run_program(b"\0asm junk", &setup(&["junk"])).err().unwrap();
    assert_eq!(e.errno, vino_proto::errno::EINVAL);
    assert!(e.message.contains("not a program VINO can run"), "{}", e.message);
    d.wait_processes(0);
}

#[test]
fn a_program_has_its_users_permissions_not_the_daemons() {
    if !is_root() {
        eprintln!("skipped: needs root to run a client as another user");
        return;
    }
    let d = TestDaemon::start();
    let (_, path) = copy_program();
    let mut root: Client = d.client();
    root.mkdir("/home1000", 0o755).unwrap();
    root.chown("/home1000", Some(1000), Some(1000)).unwrap();
    let fd = root.open("/secret", vino_client::OpenFlags::create()).unwrap();
    root.write(fd, b"root only").unwrap();
    root.close(fd).unwrap();
    root.chmod("/secret", 0o600).unwrap();
    let env = [("COPY_WASM", path.to_str().unwrap())];
    let mut child = spawn_child(TEST, "user", &d.socket(), &env, Some(1000));
    let lines = wait_line(&mut child, "DONE");
    assert!(child.wait().unwrap().success());
    assert!(lines.iter().any(|l| l.trim() == "own 0"), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("secret 1 ") && l.contains("Permission denied")),
        "{lines:?}"
    );
    let st = root.stat("/home1000/mine").unwrap();
    assert_eq!((st.uid, st.size), (1000, 4), "made by the program as its user");
}

#[test]
fn a_client_that_floods_a_program_that_never_reads_and_goes_leaves_nothing() {
    // The program's input queue fills and the daemon stops reading the client; the client is
    // then killed without a word. The daemon notices the hang-up all the same.
    let d = TestDaemon::start();
    let (_, path) = copy_program();
    let env = [("COPY_WASM", path.to_str().unwrap())];
    let mut child = spawn_child(TEST, "flood", &d.socket(), &env, None);
    wait_line(&mut child, "FLOODING");
    std::thread::sleep(Duration::from_millis(300));
    d.wait_processes(2); // the client's connection and its program
    child.kill().unwrap();
    child.wait().unwrap();
    d.wait_processes(0);
}

#[test]
fn stdin_arrives_whole_and_in_order_and_a_program_that_ignores_it_still_ends() {
    use sha2::Digest;
    use std::io::Write;
    let d = TestDaemon::start();
    let (wasm, _) = copy_program();
    // 8 MB through a pipe, forwarded as `vino run` forwards its stdin (frames of what is there).
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..8 << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let p = d.client().run_program(&wasm, &setup(&["copy", "-", "-"])).unwrap();
    let control = p.control();
    let (mut source, mut sink) = std::io::pipe().unwrap();
    let writer = {
        let data = data.clone();
        std::thread::spawn(move || {
            // Uneven writes, so frames come in every size.
            for chunk in data.chunks(77_777) {
                sink.write_all(chunk).unwrap();
            }
        })
    };
    let feeder = std::thread::spawn(move || control.forward_input(&mut source).unwrap());
    let (out, err, code) = finish(p);
    writer.join().unwrap();
    feeder.join().unwrap();
    // It ended by itself: the end of the input reached it.
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.len(), data.len());
    assert_eq!(
        sha2::Sha256::digest(&out),
        sha2::Sha256::digest(&data),
        "bytes in order"
    );

    // A program that never reads its input ends while its client still holds the input open
    // (with more of it sent), and frees its place: the next runs.
    let p = d
        .client()
        .run_program(&wasm, &setup(&["copy", "--sleep", "0"]))
        .unwrap();
    // (The program may be gone already, the connection with it.)
    let _ = p.control().input(&[7; 100_000]);
    assert_eq!(finish(p).2, 0);
    d.wait_processes(0);
    let p = d
        .client()
        .run_program(&wasm, &setup(&["copy", "--sleep", "0"]))
        .unwrap();
    assert_eq!(finish(p).2, 0);
    d.wait_processes(0);
}

/// Roles run in a child process (see `spawn_child`).
#[test]
fn child_role() {
    let Ok(role) = std::env::var("VINO_TEST_ROLE") else {
        return;
    };
    if role == "flood" {
        let socket = std::env::var("VINO_SOCKET").unwrap();
        let wasm = std::fs::read(std::env::var("COPY_WASM").unwrap()).unwrap();
        let p = Client::connect(&socket)
            .unwrap()
            .run_program(&wasm, &setup(&["copy", "--sleep", "100"]))
            .unwrap();
        println!("FLOODING");
        let chunk = vec![0u8; 1 << 20];
        while p.control().input(&chunk).is_ok() {}
        return;
    }
    assert_eq!(role, "user");
    let socket = std::env::var("VINO_SOCKET").unwrap();
    let wasm = std::fs::read(std::env::var("COPY_WASM").unwrap()).unwrap();
    let run = |a: &[&str], input: &[u8]| {
        let p = Client::connect(&socket).unwrap().run_program(&wasm, &setup(a)).unwrap();
        // The program may have ended (and the daemon closed the connection) before its input
        // is sent: the input is then refused, which is not the test's business.
        let _ = p.control().input(input);
        let _ = p.control().input(&[]);
        finish(p)
    };
    let (_, err, code) = run(&["copy", "-", "/home1000/mine"], b"mine");
    println!("own {code} {err}");
    let (_, err, code) = run(&["copy", "/secret", "-"], b"");
    println!("secret {code} {}", err.trim());
    println!("DONE");
}

#[test]
fn a_pipeline_runs_in_the_daemon_as_one_session_and_a_signal_reaches_it() {
    let d = TestDaemon::start();
    let (wasm, _) = copy_program();
    // copy - - | copy - - | copy - /piped: the client's input through two kernel pipes.
    let stage = |args: &[&str]| vino_client::PipeStage {
        wasm: wasm.clone(),
        args: args.iter().map(|a| a.as_bytes().to_vec()).collect(),
    };
    let p = d
        .client()
        .run_pipeline(
            &wasm,
            &setup(&["copy", "-", "-"]),
            vec![stage(&["copy", "-", "-"]), stage(&["copy", "-", "-"])],
        )
        .unwrap();
    let data: Vec<u8> = (0..300_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let feeder = feed(&p, &data);
    let (out, err, code) = finish(p);
    feeder.join().unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(out == data, "1.2 MB through three programs and two pipes");
    // The status is the last failing stage's: copy of a missing file fails with 1.
    let p = d
        .client()
        .run_pipeline(
            &wasm,
            &setup(&["copy", "/missing", "-"]),
            vec![stage(&["copy", "-", "-"])],
        )
        .unwrap();
    assert_eq!(finish(p).2, 1, "pipefail");
    // Ctrl-C at `vino run`: SIGTERM here, to every process of the session; its default ends
    // them, and the status says which signal.
    let p = d
        .client()
        .run_pipeline(
            &wasm,
            &setup(&["copy", "--sleep", "100"]),
            vec![stage(&["copy", "--sleep", "100"])],
        )
        .unwrap();
    // Signalled once both stages exist (a signal before would find only the holder).
    let kernel = d.handle().kernel();
    let until = Instant::now() + Duration::from_secs(10);
    while kernel.processes().iter().filter(|q| q.ppid() != 0).count() < 2 {
        assert!(Instant::now() < until, "the pipeline's stages never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    p.control().signal(15).unwrap();
    assert_eq!(finish(p).2, 128 + 15);
    d.wait_processes(0);
}

#[test]
fn a_program_gets_the_sockets_its_client_asked_for() {
    use vino_client::ProgramSocket;
    let d = TestDaemon::start();
    let (wasm, _) = copy_program();
    let with = |args: &[&str], sockets: Vec<ProgramSocket>| ProgramSetup { sockets, ..setup(args) };
    let listen = |spec: &str| vec![ProgramSocket::Listen(spec.into())];
    // A socket that is no socket: refused before anything runs.
    let e = d
        .client()
        .run_program(&wasm, &with(&["copy"], listen("tcp:http")))
        .err()
        .expect("a bad port was taken");
    assert!(format!("{e:#}").contains("not a port"), "{e:#}");
    // One program listens on 9300 while it runs...
    let p = d
        .client()
        .run_program(&wasm, &with(&["copy", "--sleep", "2"], listen("tcp:9300")))
        .unwrap();
    let kernel = d.handle().daemon().kernel().clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    while kernel.net_stats().is_none_or(|s| s.listeners == 0) {
        assert!(Instant::now() < deadline, "the program's socket never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    // `ps` shows it to its user (and root), and not to another.
    let daemon = d.handle().daemon();
    let listens = |top: &vino_proto::Top| {
        top.processes.iter().any(|r| {
            r.sockets
                .iter()
                .any(|s| s.proto == "tcp" && s.local == "0.0.0.0:9300" && s.state == "listen")
        })
    };
    assert!(listens(&daemon.top()), "{:?}", daemon.top().processes);
    assert!(!listens(&daemon.top_for(&vino_kernel::Credentials::user(4321, 4321))));
    // ...so another cannot have the port: its run ends with the reason.
    let mut q = d
        .client()
        .run_program(&wasm, &with(&["copy"], listen("tcp:9300")))
        .unwrap();
    let refused = loop {
        match q.next_event() {
            Ok(ProgramEvent::Exited { code, .. }) => panic!("ran with a port in use (status {code})"),
            Ok(_) => {}
            Err(e) => break format!("{e:#}"),
        }
    };
    assert!(refused.contains("9300"), "{refused}");
    drop(q);
    let (_, err, code) = finish(p);
    assert_eq!(code, 0, "{err}");
    d.wait_processes(0);
    assert_eq!(
        kernel.net_stats().unwrap_or_default().listeners,
        0,
        "its socket closed with it"
    );
}
