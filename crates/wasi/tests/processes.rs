//! The process model from C: programs built with the SDK spawn, wait for, pipe to and signal
//! one another as VINO processes (posix_spawn, waitpid, pipe, sigaction, kill, popen, system
//! in the compatibility layer, on the kernel's `vino` calls). Each program spawns itself,
//! installed on the disk, to play its children, checks as it goes and exits non-zero at the
//! first failure, printing what failed.

mod common;

use std::path::Path;
use std::sync::Arc;
use vino_kernel::{Credentials, Kernel, OpenFlags};
use vino_wasi::{Exit, Program, ProgramLimits, Setup};

/// Builds `tests/programs/<name>.c` with the SDK, as `vino build` does.
fn build(name: &str) -> Vec<u8> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("{name}.wasm"));
    if let Err(e) = vino_sdk::build_program(&[src], &out, &Default::default()) {
        panic!("building {name}.c (needs Debian's wasi-libc and libclang-rt-dev-wasm32): {e}");
    }
    std::fs::read(out).unwrap()
}

/// Puts `wasm` on the disk at `path` (in `dir`, made if missing), executable by all.
fn install(k: &Arc<Kernel>, dir: &str, path: &str, wasm: &[u8]) {
    let root = k.spawn(Credentials::root());
    let _ = root.mkdir(dir, 0o755);
    let fd = root.open(path, OpenFlags::create()).unwrap();
    let mut done = 0;
    while done < wasm.len() {
        done += root.write(fd, &wasm[done..]).unwrap();
    }
    root.close(fd).unwrap();
    root.chmod(path, 0o755).unwrap();
    k.exit(root.pid());
}

/// Installs `tests/programs/<name>.c` as `/bin/<name>` and runs it as root by the name
/// `argv0`, in the working directory `cwd`: its exit, stdout and stderr.
fn run_installed(k: &Arc<Kernel>, name: &str, argv0: &str, cwd: &str) -> (Exit, String, String) {
    let wasm = build(name);
    install(k, "/bin", &format!("/bin/{name}"), &wasm);
    let program = Program::compile(&wasm, ProgramLimits::default()).unwrap();
    let (stdio, out, err) = common::stdio(Vec::new());
    let setup = Setup {
        cwd: Some(cwd.as_bytes().to_vec()),
        ..Setup::new(vec![argv0.as_bytes().to_vec()], Vec::new())
    };
    let exit = program
        .run(k, Credentials::root(), setup, stdio, &program.kill_switch())
        .unwrap();
    (exit, out.text(), err.text())
}

/// Every child was reaped and every file closed: the kernel shut down, its image clean.
fn finish(dev: &vino_blockdev::MemDevice, k: &Kernel) {
    assert_eq!(k.referenced_inodes(), 0, "a file stayed open");
    common::fsck(dev, k);
}

#[test]
fn a_program_spawns_waits_for_and_pipes_to_its_children() {
    let (dev, k) = common::boot();
    let root = k.spawn(Credentials::root());
    root.mkdir("/work", 0o755).unwrap();
    k.exit(root.pid());
    let (exit, out, err) = run_installed(&k, "spawn", "/bin/spawn", "/work");
    assert_eq!(exit, Exit::Code(0), "stdout:\n{out}\nstderr:\n{err}");
    for line in [
        "ok exit status 7",
        "ok the child's line through the pipe, in the parent's directory",
        "ok WNOHANG before the end of its input is 0",
        "ok 100000 bytes through a pipe",
        "ok the child's line in the file",
        "ok 16 bytes through the FIFO",
        "ok killed by SIGKILL",
        "ok no children left: ECHILD",
        "ok posix_spawnp through PATH: ENOENT",
        "spawn done",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}\nstderr:\n{err}");
    }
    assert!(out.contains(", cwd /work, PWD /work\n"), "{out}");
    finish(&dev, &k);
}

#[test]
fn signals_reach_handlers_masks_and_default_actions_across_processes() {
    let (dev, k) = common::boot();
    let (exit, out, err) = run_installed(&k, "signals", "/bin/signals", "/");
    assert_eq!(exit, Exit::Code(0), "stdout:\n{out}\nstderr:\n{err}");
    for line in [
        "ok raise runs the handler",
        "ok the handler ran by the next safe point",
        "ok delivered on unblocking",
        "ok the handler ran once, with si_signo",
        "ok sigsuspend: the child's SIGUSR1",
        "ok SIGCHLD on the child's exit",
        "term child wrote: buffered output and flushed on SIGTERM",
        "ok the SIGTERM child exited 0",
        "ok SIGPIPE ignored: EPIPE",
        "ok an ignored signal stays ignored in the child",
        "ok SIGPIPE by default kills",
        "signals done",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}\nstderr:\n{err}");
    }
    finish(&dev, &k);
}

#[test]
fn system_and_popen_run_commands_without_a_shell() {
    let (dev, k) = common::boot();
    let (exit, out, err) = run_installed(&k, "popen", "popen", "/");
    assert_eq!(exit, Exit::Code(0), "stdout:\n{out}\nstderr:\n{err}");
    for line in [
        "ok system: exit status 3, found on PATH",
        "ok system: no such program is 127, as sh",
        "ok system: a pipe needs a shell: ENOTSUP",
        "child said: [a b][c \"d\"][e f][|][*]",
        "ok pclose: its exit status",
        "ok pclose: the child read all 10000 bytes",
        "popen done",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}\nstderr:\n{err}");
    }
    finish(&dev, &k);
}

/// A kernel whose users may each run `programs` programs at once.
fn boot_limited(programs: u64) -> (Arc<vino_blockdev::MemDevice>, Arc<Kernel>) {
    use vino_kernel::account::{LimitsConfig, Resource};
    let dev = Arc::new(vino_blockdev::MemDevice::new(65536));
    vino_kernel::storage::mkfs(&*dev, &Default::default()).unwrap();
    let config = vino_kernel::KernelConfig {
        cache_frames: 2048,
        limits: LimitsConfig {
            user: LimitsConfig::default().user.with(Resource::Programs, programs),
            ..LimitsConfig::default()
        },
        ..Default::default()
    };
    let k = Kernel::boot(dev.clone() as Arc<dyn vino_blockdev::BlockDevice>, &config).unwrap();
    (dev, k)
}

/// `hostile` (tests/programs/hostile.c) installed at /bin/hostile and compiled.
fn hostile(k: &Arc<Kernel>) -> Program {
    static WASM: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let wasm = WASM.get_or_init(|| build("hostile"));
    install(k, "/bin", "/bin/hostile", wasm);
    Program::compile(wasm, ProgramLimits::default()).unwrap()
}

/// Runs `program` as `cred` with `args` (after its name) and `dirs`: exit and stdout.
fn run_as(k: &Arc<Kernel>, program: &Program, cred: Credentials, args: &[&str], dirs: &[&str]) -> (Exit, String) {
    let (stdio, out, _err) = common::stdio(Vec::new());
    let mut argv = vec![b"/bin/hostile".to_vec()];
    argv.extend(args.iter().map(|a| a.as_bytes().to_vec()));
    let setup = Setup {
        dirs: dirs.iter().map(|d| vino_wasi::Dir::parse(d)).collect(),
        ..Setup::new(argv, Vec::new())
    };
    let exit = program.run(k, cred, setup, stdio, &program.kill_switch()).unwrap();
    (exit, out.text())
}

/// Waits (bounded) until the kernel has no process left: children a session left end with it.
fn all_gone(k: &Kernel) {
    for _ in 0..1000 {
        if k.processes().is_empty() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!(
        "processes left: {:?}",
        k.processes().iter().map(|p| p.pid()).collect::<Vec<_>>()
    );
}

#[test]
fn a_spawn_loop_meets_eagain_at_its_users_limit_and_leaves_others_theirs() {
    let (dev, k) = boot_limited(4);
    let p = hostile(&k);
    for uid in [1000, 2000] {
        let (exit, out) = run_as(&k, &p, Credentials::user(uid, uid), &["spawnloop", "/bin/hostile"], &[]);
        assert_eq!(exit, Exit::Code(0), "{out}");
        // EAGAIN is 6 in wasi-libc's numbering.
        assert!(out.contains("spawned 4, then errno 6 "), "user {uid}: {out}");
        assert!(out.contains("reaped 4 killed"), "{out}");
    }
    all_gone(&k);
    finish(&dev, &k);
}

#[test]
fn a_child_reaches_no_directory_its_parent_was_not_given() {
    let (dev, k) = common::boot();
    let p = hostile(&k);
    let root = k.spawn(Credentials::root());
    let fd = root.open("/secret", OpenFlags::create()).unwrap();
    root.close(fd).unwrap();
    root.mkdir("/jail", 0o755).unwrap();
    root.mkdir("/jail/bin", 0o755).unwrap();
    k.exit(root.pid());
    install(&k, "/jail/bin", "/jail/bin/hostile", &build("hostile"));
    let jail = ["/jail::/"];
    let (_, out) = run_as(
        &k,
        &p,
        Credentials::root(),
        &["child", "/bin/hostile", "peek", "/bin/hostile"],
        &jail,
    );
    assert!(
        out.contains("open /bin/hostile: 0"),
        "inside its parent's directory: {out}"
    );
    for outside in ["/secret", "/../secret", "/jail/../secret"] {
        let (_, out) = run_as(
            &k,
            &p,
            Credentials::root(),
            &["child", "/bin/hostile", "peek", outside],
            &jail,
        );
        assert!(!out.contains(": 0\n"), "{outside} reached from a child: {out}");
    }
    all_gone(&k);
    finish(&dev, &k);
}

#[test]
fn orphans_end_with_the_session_that_left_them() {
    let (dev, k) = common::boot();
    let p = hostile(&k);
    let (exit, out) = run_as(&k, &p, Credentials::user(1000, 1000), &["orphan", "/bin/hostile"], &[]);
    assert_eq!(exit, Exit::Code(0), "{out}");
    all_gone(&k);
    finish(&dev, &k);
}

#[test]
fn signals_do_not_cross_users_and_a_stalled_pipe_holds_up_only_its_writer() {
    let (dev, k) = common::boot();
    let p = hostile(&k);
    let kill = p.kill_switch();
    std::thread::scope(|s| {
        let (k2, p2, kill2) = (k.clone(), p.clone(), kill.clone());
        let victim = s.spawn(move || {
            let (stdio, _, _) = common::stdio(Vec::new());
            let setup = Setup::new(
                vec![b"/bin/hostile".to_vec(), b"flood".to_vec(), b"/bin/hostile".to_vec()],
                Vec::new(),
            );
            p2.run(&k2, Credentials::user(1000, 1000), setup, stdio, &kill2)
                .unwrap()
        });
        // The flooder and its child are up (the flooder blocked on its full pipe).
        let mut pid = None;
        for _ in 0..1000 {
            let mine: Vec<_> = k
                .processes()
                .into_iter()
                .filter(|q| q.credentials().uid == 1000)
                .collect();
            if mine.len() == 2 {
                pid = mine.iter().map(|q| q.pid()).min();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let pid = pid.expect("the flooder and its child run");
        // Another user is not held up by the stalled pipe, and may not signal it (EPERM: 63).
        let (exit, out) = run_as(&k, &p, Credentials::user(2000, 2000), &["kill", &pid.to_string()], &[]);
        assert_eq!((exit, out.trim()), (Exit::Code(0), "kill: 63"));
        kill.kill();
        assert_eq!(victim.join().unwrap(), Exit::Killed);
    });
    all_gone(&k);
    finish(&dev, &k);
}
