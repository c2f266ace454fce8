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
