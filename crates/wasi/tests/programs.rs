//! VINO processes: real C programs built with clang for wasm32-wasi run on the kernel, and
//! hostile modules (bad pointers, loops, memory hogs) end as errors or traps, never as faults.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_kernel::storage::{MkfsOptions, mkfs};
use vino_kernel::{Credentials, Kernel, KernelConfig};
use vino_wasi::{Dir, Exit, KillSwitch, Program, ProgramLimits, Setup};

struct Booted {
    dev: Arc<MemDevice>,
    kernel: Arc<Kernel>,
}

fn boot() -> Booted {
    let dev = Arc::new(MemDevice::new(16384));
    mkfs(&*dev, &MkfsOptions::default()).unwrap();
    let config = KernelConfig {
        cache_frames: 512,
        writeback_every: None,
        ..KernelConfig::default()
    };
    let kernel = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap();
    Booted { dev, kernel }
}

impl Booted {
    /// Shuts the kernel down and checks the image.
    fn fsck(self) {
        self.kernel.shutdown().unwrap();
        let report = vino_kernel::storage::fsck(&*self.dev, false).unwrap();
        assert!(report.is_clean(), "{report:?}");
    }
}

/// Builds `tests/programs/<name>.c` for wasm32-wasi (wasi-libc, as scripts/setup.sh installs).
fn build(name: &str) -> Vec<u8> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    let dir = tempfile::tempdir().unwrap();
    let out: PathBuf = dir.path().join(format!("{name}.wasm"));
    if let Err(e) = vino_sdk::build_program(&[src], &out, &Default::default()) {
        panic!("building {name}.c (needs Debian's wasi-libc and libclang-rt-dev-wasm32): {e}");
    }
    std::fs::read(out).unwrap()
}

struct Run {
    exit: Exit,
    /// The standard output as it came, and as text.
    raw: Vec<u8>,
    out: String,
    err: String,
}

fn run_as(k: &Arc<Kernel>, wasm: &[u8], cred: Credentials, args: &[&str], stdin: &[u8]) -> Run {
    let program = Program::compile(wasm, ProgramLimits::default()).unwrap();
    run_program(k, &program, cred, args, stdin)
}

fn run_program(k: &Arc<Kernel>, program: &Program, cred: Credentials, args: &[&str], stdin: &[u8]) -> Run {
    run_killable(k, program, cred, args, stdin, &program.kill_switch())
}

fn run_killable(
    k: &Arc<Kernel>,
    program: &Program,
    cred: Credentials,
    args: &[&str],
    stdin: &[u8],
    kill: &KillSwitch,
) -> Run {
    run_set_up(
        k,
        program,
        cred,
        Setup::new(strings(args), vec![b"GREETING=hello".to_vec()]),
        stdin,
        kill,
    )
    .unwrap()
}

fn strings(args: &[&str]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.as_bytes().to_vec()).collect()
}

fn run_set_up(
    k: &Arc<Kernel>,
    program: &Program,
    cred: Credentials,
    setup: Setup,
    stdin: &[u8],
    kill: &KillSwitch,
) -> Result<Run, vino_wasi::RunError> {
    let (stdio, out, err) = common::stdio(stdin.to_vec());
    let exit = program.run(k, cred, setup, stdio, kill)?;
    let raw = out.bytes();
    Ok(Run {
        exit,
        out: String::from_utf8_lossy(&raw).into_owned(),
        raw,
        err: err.text(),
    })
}

/// Every process has exited and closed every file: nothing held after a program ends.
fn assert_nothing_held(k: &Kernel) {
    assert!(k.processes().is_empty(), "a process outlived its program");
    assert_eq!(k.referenced_inodes(), 0, "a file stayed open");
}

#[test]
fn a_c_program_does_file_work_through_the_kernel() {
    let b = boot();
    let k = &b.kernel;
    let r = run_as(k, &build("files"), Credentials::root(), &["files", "one", "two"], b"");
    assert_eq!(r.exit, Exit::Code(0), "stdout:\n{}\nstderr:\n{}", r.out, r.err);
    assert!(r.out.contains("argc 3 [files] [one] [two]"), "{}", r.out);
    assert!(r.out.contains("env hello"), "{}", r.out);
    assert!(r.out.contains("size 98890"), "{}", r.out);
    assert!(r.out.contains("at 70: line 10"), "{}", r.out);
    assert!(
        r.out.contains("entry b.txt") && r.out.contains("entry link"),
        "{}",
        r.out
    );
    assert!(
        r.out.contains("many 2000"),
        "every name of a long directory once: {}",
        r.out
    );
    assert_nothing_held(k);
    b.fsck();
}

#[test]
fn standard_streams_and_files_round_trip_and_permissions_hold() {
    let b = boot();
    let k = &b.kernel;
    let copy = build("copy");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let r = run_as(k, &copy, Credentials::root(), &["copy", "-", "/data"], &data);
    assert_eq!(r.exit, Exit::Code(0), "{}", r.err);
    let r = run_as(k, &copy, Credentials::root(), &["copy", "/data", "-"], b"");
    assert_eq!(r.exit, Exit::Code(0), "{}", r.err);
    assert!(r.raw == data, "the file came back as it went in");

    // Root's private file: another user's program is refused by the kernel, with the errno.
    let root = k.spawn(Credentials::root());
    let fd = root.open("/secret", vino_kernel::OpenFlags::create()).unwrap();
    root.write(fd, b"root only").unwrap();
    root.close(fd).unwrap();
    root.chmod("/secret", 0o600).unwrap();
    k.exit(root.pid());
    let user = Credentials::user(1000, 1000);
    let r = run_as(k, &copy, user.clone(), &["copy", "/secret", "-"], b"");
    assert_eq!(r.exit, Exit::Code(1));
    assert!(r.err.contains("/secret: Permission denied"), "{}", r.err);
    assert!(r.out.is_empty());
    let r = run_as(k, &copy, user, &["copy", "-", "/mine"], b"x");
    assert!(
        r.err.contains("/mine: Permission denied"),
        "the root directory is root's: {}",
        r.err
    );
    assert_nothing_held(k);
    b.fsck();
}

/// A module in the text format calling WASI directly.
fn wat(body: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "hello")
  {body})"#
    ))
    .unwrap()
}

#[test]
fn bad_pointers_are_efault_to_the_program_and_nothing_else() {
    let b = boot();
    let k = &b.kernel;
    // An iovec array past the end of memory; then one whose buffer runs past it; then a path
    // whose length runs past it; each call's errno is passed to exit in turn.
    let m = wat(r#"(func (export "_start")
    (if (i32.ne (call $fd_write (i32.const 1) (i32.const 65532) (i32.const 1) (i32.const 0)) (i32.const 21))
      (then (call $exit (i32.const 1))))
    (i32.store (i32.const 0) (i32.const 65000))
    (i32.store (i32.const 4) (i32.const 1000))
    (if (i32.ne (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)) (i32.const 21))
      (then (call $exit (i32.const 2))))
    (if (i32.ne (call $path_open (i32.const 3) (i32.const 1) (i32.const 65530) (i32.const 100)
                  (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 8)) (i32.const 21))
      (then (call $exit (i32.const 3))))
    (if (i32.ne (call $fd_write (i32.const 77) (i32.const 0) (i32.const 1) (i32.const 8)) (i32.const 8))
      (then (call $exit (i32.const 4))))
    (call $exit (i32.const 42)))"#);
    let r = run_as(k, &m, Credentials::root(), &["bad"], b"");
    assert_eq!(r.exit, Exit::Code(42), "{}", r.err);

    // A poll on a descriptor that is not open: the call succeeds, that event carries EBADF.
    let poll = wat::parse_str(
        r#"(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (i64.store (i32.const 0) (i64.const 7))          ;; userdata
    (i32.store8 (i32.const 8) (i32.const 1))         ;; FD_READ
    (i32.store (i32.const 16) (i32.const 77))        ;; a descriptor not open
    (if (i32.ne (call $poll (i32.const 0) (i32.const 100) (i32.const 1) (i32.const 200)) (i32.const 0))
      (then (call $exit (i32.const 1))))
    (if (i32.ne (i32.load (i32.const 200)) (i32.const 1)) (then (call $exit (i32.const 2))))
    (if (i64.ne (i64.load (i32.const 100)) (i64.const 7)) (then (call $exit (i32.const 3))))
    (call $exit (i32.load16_u (i32.const 108)))))"#,
    )
    .unwrap();
    let r = run_as(k, &poll, Credentials::root(), &["poll"], b"");
    assert_eq!(r.exit, Exit::Code(u32::from(vino_wasi::WasiErrno::BADF.0)), "{}", r.err);
    assert!(r.out.is_empty());
    assert_nothing_held(k);
}

#[test]
fn traps_loops_and_memory_hogs_end_the_process_and_free_everything() {
    let b = boot();
    let k = &b.kernel;
    // Opens a file (so the process holds one), then traps out of bounds.
    let trap = wat(r#"(data (i32.const 200) "f")
  (func (export "_start")
    (drop (call $path_open (i32.const 3) (i32.const 1) (i32.const 200) (i32.const 1)
            (i32.const 1) (i64.const 64) (i64.const 0) (i32.const 0) (i32.const 8)))
    (drop (i32.load (i32.const 70000))))"#);
    let r = run_as(k, &trap, Credentials::root(), &["trap"], b"");
    assert!(
        matches!(&r.exit, Exit::Trap(m) if m.contains("out of bounds")),
        "{:?}",
        r.exit
    );
    assert_eq!(r.exit.status(), 134);
    assert_nothing_held(k);

    // Grows memory past the limit: memory.grow fails (-1) and the program says so.
    let hog = wat(r#"(func (export "_start")
    (if (i32.eq (memory.grow (i32.const 2000)) (i32.const -1)) (then (call $exit (i32.const 7))))
    (call $exit (i32.const 0)))"#);
    let limits = ProgramLimits {
        memory_bytes: 64 << 20,
        ..ProgramLimits::default()
    };
    let program = Program::compile(&hog, limits).unwrap();
    let r = run_program(k, &program, Credentials::root(), &["hog"], b"");
    assert_eq!(r.exit, Exit::Code(7), "64 MiB allowed, 125 MiB asked");

    // Recurses without end: the stack runs out, a trap, not a fault of the kernel's thread.
    let deep = wat(r#"(func $f (call $f)) (func (export "_start") (call $f))"#);
    let r = run_as(k, &deep, Credentials::root(), &["deep"], b"");
    assert!(
        matches!(&r.exit, Exit::Trap(m) if m.contains("call stack exhausted")),
        "{:?}",
        r.exit
    );

    // Loops forever until killed from another thread.
    let spin = wat(r#"(func (export "_start") (loop (br 0)))"#);
    let program = Program::compile(&spin, ProgramLimits::default()).unwrap();
    let kill = program.kill_switch();
    let killer = {
        let kill = kill.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            kill.kill();
        })
    };
    let r = run_killable(k, &program, Credentials::root(), &["spin"], b"", &kill);
    killer.join().unwrap();
    assert_eq!(r.exit, Exit::Killed);
    assert_nothing_held(k);
    b.fsck();
}

#[test]
fn a_sleeping_program_is_killed_at_once() {
    let b = boot();
    let program = Program::compile(&build("copy"), ProgramLimits::default()).unwrap();
    let kill = program.kill_switch();
    let started = std::time::Instant::now();
    let killer = kill.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(100));
        killer.kill();
    });
    let r = run_killable(
        &b.kernel,
        &program,
        Credentials::root(),
        &["copy", "--sleep", "100"],
        b"",
        &kill,
    );
    assert_eq!(r.exit, Exit::Killed);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "the sleep was cut short"
    );
    assert_nothing_held(&b.kernel);
}

#[test]
fn modules_that_are_no_programs_are_refused_with_the_reason() {
    let small = ProgramLimits {
        module_bytes: 100,
        ..ProgramLimits::default()
    };
    let big = wat(r#"(func (export "_start"))"#);
    assert!(matches!(
        Program::compile(&[0u8; 200], small),
        Err(vino_wasi::RunError::TooLarge { size: 200, max: 100 })
    ));
    let e = Program::compile(b"\0asm garbage", ProgramLimits::default())
        .err()
        .unwrap();
    assert!(e.to_string().starts_with("not a program VINO can run"), "{e}");
    // A compile bomb: more functions than a program may have, refused before compiling.
    let bomb = wat::parse_str(format!(
        "(module (memory (export \"memory\") 1) (func (export \"_start\")) {})",
        "(func)".repeat(70_000)
    ))
    .unwrap();
    let e = Program::compile(&bomb, ProgramLimits::default()).err().unwrap();
    assert!(e.to_string().contains("70001 functions"), "{e}");
    let library = wat::parse_str(r#"(module (memory (export "memory") 1))"#).unwrap();
    let e = Program::compile(&library, ProgramLimits::default()).err().unwrap();
    assert!(e.to_string().contains("_start"), "{e}");
    let unknown = wat::parse_str(
        r#"(module (import "env" "launch_missiles" (func)) (memory (export "memory") 1) (func (export "_start")))"#,
    )
    .unwrap();
    // An import the kernel does not serve is refused when the program is linked, at compile.
    let b = boot();
    let e = Program::compile(&unknown, ProgramLimits::default()).err().unwrap();
    assert!(e.to_string().contains("launch_missiles"), "{e}");
    assert_nothing_held(&b.kernel);
    drop(big);
}

#[test]
fn programs_run_side_by_side_on_one_kernel() {
    let b = boot();
    let program = Arc::new(Program::compile(&build("copy"), ProgramLimits::default()).unwrap());
    let inputs: Vec<Vec<u8>> = (0..4u8)
        .map(|i| (0..200_000u32).map(|j| (j as u8).wrapping_mul(i + 3)).collect())
        .collect();
    std::thread::scope(|s| {
        for (i, data) in inputs.iter().enumerate() {
            let (k, program) = (&b.kernel, &program);
            s.spawn(move || {
                let dst = format!("/c{i}");
                for _ in 0..3 {
                    let r = run_program(k, program, Credentials::root(), &["copy", "-", &dst], data);
                    assert_eq!(r.exit, Exit::Code(0), "{}", r.err);
                }
            });
        }
    });
    for (i, data) in inputs.iter().enumerate() {
        let r = run_program(
            &b.kernel,
            &program,
            Credentials::root(),
            &["copy", &format!("/c{i}"), "-"],
            b"",
        );
        assert!(r.raw == *data, "process {i}'s file");
    }
    assert_nothing_held(&b.kernel);
    b.fsck();
}

#[test]
fn a_program_grafts_its_own_file_from_inside() {
    let b = boot();
    let k = &b.kernel;
    // A 4 MiB file and the read-ahead graft's module, on the image.
    let root = k.spawn(Credentials::root());
    let fd = root.open("/big", vino_kernel::OpenFlags::create()).unwrap();
    root.write(fd, &vec![7u8; 4 << 20]).unwrap();
    root.close(fd).unwrap();
    let module = vino_sdk::build_example("sequential_ra", &Default::default()).unwrap();
    let fd = root.open("/ra.wasm", vino_kernel::OpenFlags::create()).unwrap();
    root.write(fd, &module).unwrap();
    root.close(fd).unwrap();
    k.exit(root.pid());
    // A cold cache, so that the reads miss and the graft's read-ahead is what serves them.
    let dev = b.dev.clone();
    b.fsck();
    let config = KernelConfig {
        cache_frames: 512,
        writeback_every: None,
        ..KernelConfig::default()
    };
    let k = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap();
    let before = k.cache_stats().total;
    let r = run_as(
        &k,
        &build("graft"),
        Credentials::root(),
        &["graft", "/big", "/ra.wasm"],
        b"",
    );
    assert_eq!(r.exit, Exit::Code(0), "{}", r.err);
    let errno = |e: vino_wasi::WasiErrno| -i32::from(e.0);
    let expect = format!(
        "bad module {}\nbad descriptor {}\nno such point {}\nload 0\ncall 0 -> 0 -1\ncall 64 -> 0 0\n\
         read {}\nunload 0\nunload again {}\nchmod 0\nchown 0\nchmod bad fd {}\nnull 0\n",
        errno(vino_wasi::WasiErrno::INVAL),
        errno(vino_wasi::WasiErrno::BADF),
        errno(vino_wasi::WasiErrno::NOENT),
        4 << 20,
        errno(vino_wasi::WasiErrno::NOENT),
        errno(vino_wasi::WasiErrno::BADF),
    );
    assert_eq!(r.out, expect);
    let looker = k.spawn(Credentials::root());
    let st = looker.stat("/big").unwrap();
    k.exit(looker.pid());
    assert_eq!(
        (st.mode & 0o7777, st.uid),
        (0o600, 1000),
        "set from inside, through the kernel"
    );
    let after = k.cache_stats().total;
    assert!(after.prefetched > before.prefetched, "the graft's read-ahead ran");
    assert_nothing_held(&k);
    Booted { dev, kernel: k }.fsck();
}

#[test]
fn a_program_binds_an_access_graft_on_its_directory_and_the_binding_outlives_it() {
    use vino_kernel::{Errno, OpenFlags};
    const OWNER: u32 = 1000;
    const OTHER: u32 = 1001;
    let b = boot();
    let k = &b.kernel;
    let root = k.spawn(Credentials::root());
    root.mkdir("/shared", 0o755).unwrap();
    root.chown("/shared", Some(OWNER), Some(OWNER)).unwrap();
    k.exit(root.pid());
    let owner = k.spawn(Credentials::user(OWNER, OWNER));
    for f in ["/shared/f", "/shared/.hidden"] {
        owner.close(owner.open(f, OpenFlags::create()).unwrap()).unwrap();
    }
    let fd = owner.open("/shared/guard.wasm", OpenFlags::create()).unwrap();
    owner
        .write(fd, &vino_sdk::build_example("dir_hours", &Default::default()).unwrap())
        .unwrap();
    owner.close(fd).unwrap();
    let guard = build("dir_guard");
    let args = |what| ["dir_guard", "/shared", "/shared/guard.wasm", what];
    let errno = |e: vino_wasi::WasiErrno| -i32::from(e.0);

    let r = run_as(k, &guard, Credentials::user(OTHER, OTHER), &args("bind"), b"");
    assert_eq!(
        r.out,
        format!("load {}\n", errno(vino_wasi::WasiErrno::PERM)),
        "only the owner binds"
    );
    let r = run_as(k, &guard, Credentials::user(OWNER, OWNER), &args("bind"), b"");
    assert_eq!((r.exit, r.out.as_str()), (Exit::Code(0), "load 0\n"), "{}", r.err);

    // The program has exited; its user's binding governs the tree.
    let other = k.spawn(Credentials::user(OTHER, OTHER));
    assert_eq!(other.stat("/shared/.hidden").unwrap_err().errno, Errno::Acces);
    assert_eq!(
        other.open("/shared/.hidden", OpenFlags::read_only()).unwrap_err().errno,
        Errno::Acces
    );
    assert!(other.stat("/shared/f").is_ok());
    assert_eq!(owner.dir_access_list().len(), 1);

    let r = run_as(k, &guard, Credentials::user(OWNER, OWNER), &args("unbind"), b"");
    assert_eq!(r.out, "unload 0\n", "{}", r.err);
    assert!(
        other.stat("/shared/.hidden").is_ok(),
        "unbound from inside a program too"
    );
    assert!(owner.dir_access_list().is_empty());
    k.exit(other.pid());
    k.exit(owner.pid());
    assert_nothing_held(k);
    b.fsck();
}

#[test]
fn a_kill_stops_its_own_run_and_not_the_others_of_the_same_program() {
    let b = boot();
    let k = &b.kernel;
    let spin = spin_program();
    let (first, second) = (spin.kill_switch(), spin.kill_switch());
    std::thread::scope(|s| {
        let one = s.spawn(|| run_killable(k, &spin, Credentials::root(), &["one"], b"", &first));
        let two = s.spawn(|| run_killable(k, &spin, Credentials::root(), &["two"], b"", &second));
        std::thread::sleep(std::time::Duration::from_millis(100));
        first.kill();
        assert_eq!(one.join().unwrap().exit, Exit::Killed);
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!two.is_finished(), "the other run goes on");
        second.kill();
        assert_eq!(two.join().unwrap().exit, Exit::Killed);
    });
    assert_nothing_held(k);
}

/// A program that computes forever.
fn spin_program() -> Program {
    Program::compile(
        &wat(r#"(func (export "_start") (loop (br 0)))"#),
        ProgramLimits::default(),
    )
    .unwrap()
}

/// A kernel whose CPU scheduler has one worker, so programs compete for it.
#[test]
fn a_program_binds_a_stream_codec_to_its_own_file() {
    let b = boot();
    let k = &b.kernel;
    let root = k.spawn(Credentials::root());
    for path in ["/s", "/other", "/lz4.wasm"] {
        let fd = root.open(path, vino_kernel::OpenFlags::create()).unwrap();
        root.close(fd).unwrap();
    }
    let module = vino_sdk::build_example("lz4_stream", &Default::default()).unwrap();
    let fd = root.open("/lz4.wasm", vino_kernel::OpenFlags::read_write()).unwrap();
    root.write(fd, &module).unwrap();
    root.close(fd).unwrap();
    let to_alice = vino_kernel::Attrs {
        uid: Some(1000),
        ..Default::default()
    };
    root.setattr_at(vino_kernel::At::Root, "/other", true, &to_alice)
        .unwrap();
    let r = run_as(
        k,
        &build("stream"),
        Credentials::root(),
        &["stream", "/", "s", "other", "/lz4.wasm"],
        b"",
    );
    assert_eq!(r.exit, Exit::Code(0), "{}", r.err);
    let errno = |e: vino_wasi::WasiErrno| -i32::from(e.0);
    let expect = format!(
        "not a codec {inval}\nnot the owner {}\nbind 0\nfsync 0\nwrote 200000 read 200000 same 1\n\
         unbind with data {inval}\n",
        errno(vino_wasi::WasiErrno::PERM),
        inval = errno(vino_wasi::WasiErrno::INVAL),
    );
    assert_eq!(r.out, expect);
    let status = root.stream_status("/s").unwrap().expect("a stream file");
    assert_eq!(
        status.module,
        vino_kernel::module_name(&vino_kernel::module_id(&module))
    );
    k.exit(root.pid());
}

fn boot_one_worker(limits: Option<vino_kernel::account::LimitsConfig>) -> Booted {
    let dev = Arc::new(MemDevice::new(16384));
    mkfs(&*dev, &MkfsOptions::default()).unwrap();
    let mut config = KernelConfig {
        cache_frames: 512,
        writeback_every: None,
        cpu: vino_kernel::CpuSchedConfig {
            workers: 1,
            ..Default::default()
        },
        ..KernelConfig::default()
    };
    if let Some(limits) = limits {
        config.limits = limits;
    }
    let kernel = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap();
    Booted { dev, kernel }
}

#[test]
fn spinning_programs_share_one_worker_by_their_tickets() {
    let b = boot_one_worker(None);
    let k = &b.kernel;
    let spin = spin_program();
    let procs: Vec<_> = [300u32, 200, 100]
        .iter()
        .map(|&t| {
            let p = k.spawn(Credentials::root());
            p.set_tickets(t).unwrap();
            p
        })
        .collect();
    let kills: Vec<KillSwitch> = procs.iter().map(|_| spin.kill_switch()).collect();
    std::thread::scope(|s| {
        for (p, kill) in procs.iter().zip(&kills) {
            let (spin, p) = (&spin, p.clone());
            s.spawn(move || {
                let (stdio, _, _) = common::stdio(Vec::new());
                let exit = spin
                    .run_in(p.clone(), Setup::new(vec![b"spin".to_vec()], vec![]), stdio, kill)
                    .unwrap();
                assert_eq!(exit, Exit::Killed);
                p.kernel().exit(p.pid());
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let cpu: Vec<f64> = procs.iter().map(|p| p.cpu_time().unwrap().as_secs_f64()).collect();
        for kill in &kills {
            kill.kill();
        }
        let total: f64 = cpu.iter().sum();
        for (got, want) in cpu.iter().zip([0.5, 1.0 / 3.0, 1.0 / 6.0]) {
            assert!(
                (got / total - want).abs() / want < 0.2,
                "CPU {cpu:?} s for tickets 3:2:1"
            );
        }
    });
    assert_nothing_held(k);
}

#[test]
fn a_program_that_never_yields_is_preempted_and_others_run() {
    let b = boot_one_worker(None);
    let k = &b.kernel;
    let spin = spin_program();
    let kill = spin.kill_switch();
    std::thread::scope(|s| {
        let spinner = s.spawn(|| run_killable(k, &spin, Credentials::root(), &["spin"], b"", &kill));
        std::thread::sleep(std::time::Duration::from_millis(50));
        // On the one worker the spinner holds, a real program runs to its end.
        let r = run_as(k, &build("files"), Credentials::root(), &["files", "a"], b"");
        assert_eq!(r.exit, Exit::Code(0), "{}", r.err);
        kill.kill();
        assert_eq!(spinner.join().unwrap().exit, Exit::Killed);
    });
    assert!(k.cpu_stats().switches > 2, "{:?}", k.cpu_stats());
    assert_nothing_held(k);
}

#[test]
fn a_user_past_its_thread_limit_is_refused_with_eagain() {
    use vino_kernel::account::{LimitsConfig, Resource};
    let mut limits = LimitsConfig::default();
    limits.user.set(Resource::Threads, 1);
    let b = boot_one_worker(Some(limits));
    let k = &b.kernel;
    let spin = spin_program();
    let kill = spin.kill_switch();
    let user = Credentials::user(1000, 1000);
    std::thread::scope(|s| {
        let first = s.spawn(|| run_killable(k, &spin, user.clone(), &["spin"], b"", &kill));
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (stdio, _, _) = common::stdio(Vec::new());
        let e = spin
            .run(k, user.clone(), Setup::default(), stdio, &spin.kill_switch())
            .unwrap_err();
        assert!(
            matches!(&e, vino_wasi::RunError::Refused(s) if s.errno == vino_kernel::Errno::Again),
            "{e}"
        );
        kill.kill();
        assert_eq!(first.join().unwrap().exit, Exit::Killed);
    });
    // Its thread ended: the user may start another.
    let r = run_as(k, &wat(r#"(func (export "_start"))"#), user, &["nothing"], b"");
    assert_eq!(r.exit, Exit::Code(0));
    assert_nothing_held(k);
}

#[test]
fn a_program_runs_its_own_timer_graft() {
    let b = boot();
    let k = &b.kernel;
    let counter = wat::parse_str(
        r#"(module (memory (export "memory") 1)
            (global $n (mut i64) (i64.const 0))
            (func (export "event_timer") (param i64 i64) (result i32) (global.set $n (local.get 0)) (i32.const 0))
            (func (export "vino_ctl_count") (result i64) (global.get $n)))"#,
    )
    .unwrap();
    let root = k.spawn(Credentials::root());
    let fd = root.open("/timer.wasm", vino_kernel::OpenFlags::create()).unwrap();
    root.write(fd, &counter).unwrap();
    root.close(fd).unwrap();
    k.exit(root.pid());
    let r = run_as(k, &build("timer"), Credentials::root(), &["timer", "/timer.wasm"], b"");
    assert_eq!(r.exit, Exit::Code(0), "{}", r.err);
    let inval = -i32::from(vino_wasi::WasiErrno::INVAL.0);
    assert!(
        r.out
            .starts_with(&format!("load 0\ntoo short {inval}\nstart 0\nstop 0\ncount 0 ")),
        "{}",
        r.out
    );
    let count: i64 = r.out.trim_end().rsplit(' ').next().unwrap().parse().unwrap();
    assert!((8..=21).contains(&count), "fired {count} times in 100 ms at 5 ms");
    assert_nothing_held(k);
    b.fsck();
}

#[test]
fn a_program_reaches_only_the_directories_it_is_given_from_its_working_directory() {
    let b = boot();
    let k = &b.kernel;
    let root = k.spawn(Credentials::root());
    root.mkdir("/data", 0o755).unwrap();
    root.mkdir("/data/sub", 0o755).unwrap();
    root.mkdir("/private", 0o700).unwrap();
    for (path, text) in [
        ("/data/in.txt", "inside"),
        ("/data/sub/deep.txt", "deep"),
        ("/secret.txt", "TOPSECRET"),
    ] {
        let fd = root.open(path, vino_kernel::OpenFlags::create()).unwrap();
        root.write(fd, text.as_bytes()).unwrap();
        root.close(fd).unwrap();
    }
    root.symlink("/secret.txt", "/data/abs").unwrap();
    root.symlink("../secret.txt", "/data/up").unwrap();
    k.exit(root.pid());
    let program = Program::compile(&build("dirs"), ProgramLimits::default()).unwrap();
    let user = Credentials::user(1000, 1000);
    let run = |dirs: &[&str], cwd: Option<&str>, paths: &[&str]| {
        let mut args = vec!["dirs"];
        args.extend_from_slice(paths);
        let setup = Setup {
            args: strings(&args),
            env: vec![b"PWD=/ignored".to_vec()],
            dirs: dirs.iter().map(|d| Dir::parse(d)).collect(),
            cwd: cwd.map(|c| c.as_bytes().to_vec()),
            sockets: Vec::new(),
        };
        run_set_up(k, &program, user.clone(), setup, b"", &program.kill_switch())
    };

    // Given /data, working in /data/sub: relative paths start there, and nothing outside
    // /data is reached, by name, by `..` or through a link.
    let escapes = [
        "/secret.txt",
        "../../secret.txt",
        "/data/abs",
        "/data/up",
        "/data/sub/../../secret.txt",
    ];
    let mut paths = vec!["deep.txt", "../in.txt", "/data/in.txt"];
    paths.extend_from_slice(&escapes);
    let r = run(&["/data"], Some("/data/sub"), &paths).unwrap();
    assert_eq!(r.exit, Exit::Code(0), "{}", r.err);
    let lines: Vec<&str> = r.out.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "cwd /data/sub",
            "deep.txt: deep",
            "../in.txt: inside",
            "/data/in.txt: inside"
        ]
    );
    for (line, path) in lines[4..].iter().zip(escapes) {
        assert!(
            *line == format!("{path}: EXDEV") || *line == format!("{path}: ENOTCAPABLE"),
            "{line}"
        );
    }
    assert!(!r.out.contains("TOPSECRET"), "{}", r.out);

    // /data seen as `/`: its files by their names there, nothing else at all.
    let r = run(
        &["/data::/"],
        None,
        &["/in.txt", "sub/deep.txt", "/secret.txt", "../secret.txt"],
    )
    .unwrap();
    assert_eq!(
        r.out,
        "cwd /\n/in.txt: inside\nsub/deep.txt: deep\n/secret.txt: ENOENT\n../secret.txt: EXDEV\n"
    );

    // Without directories: the whole file system, from `/`; the runner's PWD does not leak in.
    let r = run(&[], None, &["secret.txt", "data/in.txt"]).unwrap();
    assert_eq!(r.out, "cwd /\nsecret.txt: TOPSECRET\ndata/in.txt: inside\n");

    // A directory the user may not search, or that is not there, is refused before it starts.
    for (dir, errno) in [
        ("/private", vino_kernel::Errno::Acces),
        ("/missing", vino_kernel::Errno::NoEnt),
    ] {
        match run(&[dir], None, &[]) {
            Err(vino_wasi::RunError::Dir { error, .. }) => assert_eq!(error.errno, errno, "{dir}"),
            other => panic!("{dir}: {:?}", other.map(|r| r.exit)),
        }
    }
    assert_nothing_held(k);
    b.fsck();
}

#[test]
fn program_memory_is_charged_to_its_user_and_refused_past_the_limit() {
    use vino_kernel::account::{LimitsConfig, Resource};
    let mut limits = LimitsConfig::default();
    limits.user.set(Resource::ProgramMemory, 32 << 20);
    let b = boot_one_worker(Some(limits));
    let k = &b.kernel;
    let user = Credentials::user(1000, 1000);
    // Grows by `pages` (64 KiB each): on a refusal exits 7, else spins until killed (holding it).
    let grow = |pages: u32| {
        let body = format!(
            r#"(func (export "_start")
    (if (i32.eq (memory.grow (i32.const {pages})) (i32.const -1)) (then (call $exit (i32.const 7))))
    (loop (br 0)))"#
        );
        Program::compile(&wat(&body), ProgramLimits::default()).unwrap()
    };
    let used = || k.accounts().user(1000).used(Resource::ProgramMemory);
    let holder = grow(320); // 20 MiB, and the page it starts with
    let kill = holder.kill_switch();
    std::thread::scope(|s| {
        let held = s.spawn(|| run_killable(k, &holder, user.clone(), &["holder"], b"", &kill));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while used() < 20 << 20 {
            assert!(std::time::Instant::now() < deadline, "the holder never grew");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(used(), (320 + 1) << 16);
        // Another program of the same user: 20 MiB more would pass the user's 32 MiB.
        let r = run_as(k, &grow_exit(320), user.clone(), &["second"], b"");
        assert_eq!(r.exit, Exit::Code(7), "a second 20 MiB passed the user's limit");
        // Another user is not held back by this one.
        let r = run_as(k, &grow_exit(320), Credentials::user(1001, 1001), &["other"], b"");
        assert_eq!(r.exit, Exit::Code(0));
        kill.kill();
        assert_eq!(held.join().unwrap().exit, Exit::Killed);
    });
    // Everything it held went back with it; now the same growth fits.
    assert_eq!(used(), 0);
    let r = run_as(k, &grow_exit(320), user, &["third"], b"");
    assert_eq!(r.exit, Exit::Code(0));
    assert_eq!(k.accounts().total().used(Resource::ProgramMemory), 0);
    assert_nothing_held(k);
}

/// Grows by `pages` and exits 0, or 7 if refused.
fn grow_exit(pages: u32) -> Vec<u8> {
    wat(&format!(
        r#"(func (export "_start")
    (if (i32.eq (memory.grow (i32.const {pages})) (i32.const -1)) (then (call $exit (i32.const 7))))
    (call $exit (i32.const 0)))"#
    ))
}

#[test]
fn a_compiled_program_is_kept_on_disk_only_where_nobody_else_can_write() {
    use std::os::unix::fs::PermissionsExt;
    use vino_wasi::DiskCache;
    let b = boot();
    let k = &b.kernel;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("programs");
    let cache = DiskCache::open(&dir).expect("a new private directory");
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    let wasm = wat(r#"(func (export "_start") (call $exit (i32.const 3)))"#);
    let compile = |cache: Option<&DiskCache>| Program::compile_cached(&wasm, ProgramLimits::default(), cache).unwrap();
    let first = compile(Some(&cache));
    assert!(!first.from_cache());
    let second = compile(Some(&cache));
    assert!(second.from_cache(), "the second compile is a load");
    assert_eq!(
        run_program(k, &second, Credentials::root(), &["c"], b"").exit,
        Exit::Code(3)
    );
    let file = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();

    // A damaged file is compiled over, not run.
    std::fs::write(&file, b"not machine code").unwrap();
    let again = compile(Some(&cache));
    assert!(!again.from_cache());
    assert_eq!(
        run_program(k, &again, Credentials::root(), &["c"], b"").exit,
        Exit::Code(3)
    );
    assert!(compile(Some(&cache)).from_cache(), "and kept again");

    // A file others may write is never loaded; nor is a directory others may write used.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(!compile(Some(&cache)).from_cache());
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(DiskCache::open(&dir).is_none());
    // A temporary file a dead run left an hour ago goes at the next store; a fresh one stays.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (stale, fresh) = (dir.join("x.cwasm.tmp99"), dir.join("y.cwasm.tmp98"));
    std::fs::write(&stale, b"half").unwrap();
    std::fs::write(&fresh, b"half").unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let other = wat(r#"(func (export "_start") (call $exit (i32.const 4)))"#);
    assert!(
        !Program::compile_cached(&other, ProgramLimits::default(), DiskCache::open(&dir).as_ref())
            .unwrap()
            .from_cache()
    );
    assert!(!stale.exists() && fresh.exists());
    std::fs::remove_file(&fresh).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    // A module that is no program is not kept.
    let before = std::fs::read_dir(&dir).unwrap().count();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let cache = DiskCache::open(&dir).unwrap();
    let library = wat::parse_str(r#"(module (memory (export "memory") 1))"#).unwrap();
    assert!(Program::compile_cached(&library, ProgramLimits::default(), Some(&cache)).is_err());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), before);
    assert_nothing_held(k);
}

/// A name created and renamed, one made 30 steps before unlinked; of varied lengths, so that
/// freed records and new entries land anywhere in the directory.
fn churn_step(p: &vino_kernel::Process, dir: &str, i: usize) {
    let names = |i: usize| {
        let pad = "y".repeat(i * 37 % 200);
        (format!("{dir}/c{i}-{pad}"), format!("{dir}/r{i}-{pad}"))
    };
    let (made, renamed) = names(i);
    p.close(p.open(&made, vino_kernel::OpenFlags::create()).unwrap())
        .unwrap();
    p.rename(&made, &renamed).unwrap();
    if i >= 30 {
        p.unlink(&names(i - 30).1).unwrap();
    }
}

#[test]
fn fd_readdir_lists_every_lasting_entry_once_under_another_users_churn() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let b = boot();
    let k = &b.kernel;
    let root = k.spawn(Credentials::root());
    root.mkdir("/shared", 0o777).unwrap();
    let mode = vino_kernel::Attrs {
        mode: Some(0o1777),
        ..Default::default()
    };
    root.setattr_at(vino_kernel::At::Root, "/shared", true, &mode).unwrap();
    let lasting: Vec<String> = (0..2000).map(|i| format!("{i:05}-{}", "x".repeat(194))).collect();
    for n in &lasting {
        root.close(
            root.open(&format!("/shared/{n}"), vino_kernel::OpenFlags::create())
                .unwrap(),
        )
        .unwrap();
    }
    k.exit(root.pid());
    let bob = k.spawn(Credentials::user(1001, 1001));
    let (stop, steps) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let churn = {
        let (stop, steps) = (stop.clone(), steps.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                churn_step(&bob, "/shared", steps.fetch_add(1, Ordering::Relaxed));
            }
            bob.kernel().exit(bob.pid());
        })
    };
    let r = run_as(
        k,
        &build("list"),
        Credentials::user(1000, 1000),
        &["list", "/shared", "3"],
        b"",
    );
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    assert_eq!(r.exit, Exit::Code(0), "stderr:\n{}", r.err);
    assert!(
        steps.load(Ordering::Relaxed) > 0,
        "the directory changed during the listings"
    );
    let listings: Vec<&str> = r.out.split_terminator("end\n").collect();
    assert_eq!(listings.len(), 3);
    for l in listings {
        let mut count = std::collections::BTreeMap::<&str, usize>::new();
        for n in l.lines() {
            *count.entry(n).or_default() += 1;
        }
        let twice: Vec<_> = count.iter().filter(|(_, c)| **c > 1).collect();
        assert!(twice.is_empty(), "listed more than once: {twice:?}");
        let missing = lasting.iter().filter(|n| !count.contains_key(n.as_str())).count();
        assert_eq!(missing, 0, "{missing} lasting names not listed");
    }
    assert_nothing_held(k);
    b.fsck();
}

/// What `dev.c` prints when it has no terminal; `root` is how `ls /` ends (the program's root
/// lists `dev` after its own names).
fn dev_expected(root: &str) -> String {
    let zero = 1 << 20;
    format!(
        "null: wrote 9 read 0\n\
         zero: read {zero} zeros {zero}\n\
         full: write -1 No space left on device\n\
         urandom: read 64 mixed\n\
         stat /dev/null: chr ino 259\n\
         stat /dev/zero: chr ino 261\n\
         stat /dev/full: chr ino 263\n\
         stat /dev/random: chr ino 264\n\
         stat /dev/urandom: chr ino 265\n\
         stat /dev: dir ino 1\n\
         stat /dev/tty: No such file or directory\n\
         stat /dev/sda: No such file or directory\n\
         stdin: 6 hello\n\n\
         stdout: through /dev/stdout\n\
         create: Permission denied\n\
         dotdot: No such file or directory\n\
         unlink: Permission denied\n\
         mkdir: Permission denied\n\
         list /dev: . .. full null random stderr stdin stdout urandom zero\n\
         list /: {root}\n"
    )
}

#[test]
fn dev_holds_the_devices_and_leads_nowhere_else() {
    let b = boot();
    let k = &b.kernel;
    let root = k.spawn(Credentials::root());
    root.mkdir("/data", 0o755).unwrap();
    // A disk's own /dev is not the program's: its listing of `/` shows one `dev`, the given one.
    root.mkdir("/dev", 0o755).unwrap();
    let fd = root.open("/dev/sda", vino_kernel::OpenFlags::create()).unwrap();
    root.close(fd).unwrap();
    k.exit(root.pid());
    let program = Program::compile(&build("dev"), ProgramLimits::default()).unwrap();
    let run = |dirs: &[&str]| {
        let setup = Setup {
            args: strings(&["dev"]),
            dirs: dirs.iter().map(|d| Dir::parse(d)).collect(),
            ..Setup::default()
        };
        let user = Credentials::user(1000, 1000);
        run_set_up(k, &program, user, setup, b"hello\n", &program.kill_switch()).unwrap()
    };
    // The whole file system.
    let r = run(&[]);
    assert_eq!(r.exit, Exit::Code(0), "{}", r.err);
    assert_eq!(r.out, dev_expected(". .. data dev lost+found"));
    // Confined to /data seen as itself, and as `/`: /dev all the same, and nothing more.
    let r = run(&["/data"]);
    assert_eq!(r.exit, Exit::Code(0), "{}", r.err);
    assert_eq!(r.out, dev_expected("Capabilities insufficient"));
    let r = run(&["/data::/"]);
    assert_eq!(r.out, dev_expected(". .. dev"));

    // With a terminal attached, /dev/tty is it.
    let (mut stdio, out, _) = common::stdio(b"hello\n".to_vec());
    stdio.tty = [true, true, false];
    let setup = Setup::new(strings(&["dev"]), Vec::new());
    let exit = program.run(k, Credentials::user(1000, 1000), setup, stdio, &program.kill_switch());
    assert_eq!(exit.unwrap(), Exit::Code(0));
    let out = String::from_utf8(out.bytes()).unwrap();
    assert!(out.contains("stat /dev/tty: chr ino 1280\n"), "{out}");
    assert!(
        out.contains("list /dev: . .. full null random stderr stdin stdout tty urandom zero\n"),
        "{out}"
    );
    assert_nothing_held(k);
    b.fsck();
}
