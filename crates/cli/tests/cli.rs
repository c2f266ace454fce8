//! The `vino` command as a user runs it: exit codes, quiet success, errors on stderr.

use std::path::Path;
use std::process::{Command, Output};

fn vino(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vino"))
        .args(args)
        .output()
        .expect("vino runs")
}

fn sdk(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../sdk")
        .join(path)
        .display()
        .to_string()
}

#[test]
fn graft_build_is_quiet_and_writes_a_module_that_checks() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hot.wasm");
    let o = vino(&[
        "graft",
        "build",
        &sdk("grafts/hotlist_evict.c"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.is_empty() && o.stderr.is_empty(), "quiet on success");
    assert_eq!(&std::fs::read(&out).unwrap()[..4], b"\0asm");
    let o = vino(&["graft", "check", out.to_str().unwrap(), "--point", "vas.pick_victim"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.is_empty() && o.stderr.is_empty(), "quiet on success");
    let o = vino(&["graft", "check", out.to_str().unwrap(), "--point", "lock.grant"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("lock_grant") && err.contains("(i32, i32) -> i64"), "{err}");
}

#[test]
fn graft_check_knows_every_graftpoint_of_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("unlink_log.wasm");
    let o = vino(&[
        "graft",
        "build",
        &sdk("grafts/unlink_log.c"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = vino(&["graft", "check", out.to_str().unwrap(), "--point", "event.fs.unlink"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Its file writes are allowed at event graftpoints only.
    let o = vino(&["graft", "check", out.to_str().unwrap(), "--point", "vas.pick_victim"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("vino.vino_file_write"));
    // The toy kernel's functions are the toy's: the kernel's graftpoints refuse them.
    let toy = dir.path().join("toy_get.wat");
    std::fs::write(
        &toy,
        r#"(module (import "vino" "vino_toy_get" (func (param i32) (result i64)))
            (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
            (func (export "vas_pick_victim") (param i32) (result i32) i32.const 0))"#,
    )
    .unwrap();
    let o = vino(&["graft", "check", toy.to_str().unwrap(), "--point", "vas.pick_victim"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("vino.vino_toy_get") && err.contains("does not allow"),
        "{err}"
    );
    // So are the toy's graftpoints.
    let o = vino(&["graft", "check", toy.to_str().unwrap(), "--point", "toy.pick_victim"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown graftpoint `toy.pick_victim`"), "{err}");
}

#[test]
fn graft_points_lists_the_registry() {
    let o = vino(&["graft", "points"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    for line in [
        "vas.pick_victim",
        "vas_pick_victim(i32) -> i32",
        "vino_file_write",
        "10 ms",
    ] {
        assert!(out.contains(line), "{out}");
    }
    let o = vino(&["graft", "points", "--json"]);
    let points: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = points
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 22);
    assert!(names.contains(&"dir.access") && names.contains(&"dir.lookup"));
    assert!(names.contains(&"net.congestion") && names.contains(&"event.net.packet"));
    assert!(names.contains(&"net.pick_packet"));
    assert!(names.contains(&"vm.fault_around") && names.contains(&"file.stream"));
    assert!(names.contains(&"event.fs.modify") && names.contains(&"disk.pick_request"));
    assert!(names.contains(&"sched.pick_next") && names.contains(&"sched.pick_thread"));
    assert_eq!(points[0]["signature"], "(i32) -> i32");
    assert_eq!(
        points[0]["budget_ns"], 200_000,
        "vas.pick_victim walks pages of candidates"
    );
    let o = vino(&["graft", "points", "--markdown"]);
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/graft-abi.md")).unwrap();
    assert!(
        doc.contains(&*String::from_utf8_lossy(&o.stdout)),
        "the ABI doc holds the table"
    );
}

#[test]
fn graft_build_reports_compile_errors_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("broken.c");
    std::fs::write(&src, "int toy_apply(long long x) { return x +; }\n").unwrap();
    let o = vino(&["graft", "build", src.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("vino: ") && err.contains("error"), "{err}");
    assert!(o.stdout.is_empty());
}

#[test]
fn graft_check_refuses_forbidden_imports_and_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let o = vino(&[
        "graft",
        "check",
        &sdk("hostile/forbidden_import_env.wat"),
        "--point",
        "vas.pick_victim",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("does not allow"));
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"\0asm\x01\0\0\0garbage").unwrap();
    let o = vino(&["graft", "check", junk.to_str().unwrap(), "--point", "vas.pick_victim"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a valid WebAssembly module"));
    let o = vino(&["graft", "check", junk.to_str().unwrap(), "--point", "no.such"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unknown graftpoint `no.such`")
            && err.contains("vas.pick_victim")
            && err.contains("event.fs.unlink"),
        "lists the known ones: {err}"
    );
    let o = vino(&["graft", "check", "/nonexistent.wasm", "--point", "vas.pick_victim"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent.wasm"));
}

#[test]
fn demo_runs_and_contains_every_hostile_graft() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let image = dir.path().join("demo.img");
    let o = vino(&["demo", "--no-bench", "--image", image.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Hostile grafts") && out.contains("evict page 102"),
        "{out}"
    );
    assert!(out.contains("fsck after unmount: clean"), "{out}");
    assert!(
        !out.contains("FAILED") && !out.contains("LEAKED") && !out.contains("CHANGED"),
        "{out}"
    );
}

/// `vino` alone in a directory of its own, as if the experiments had not been built: a hard link
/// (or a copy) in a fresh directory.
fn lonely_vino(dir: &Path) -> std::path::PathBuf {
    let exe = dir.join("vino");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_vino"), &exe).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_vino"), &exe).unwrap();
    }
    exe
}

#[test]
fn bench_without_the_experiment_program_says_how_to_build_it() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let o = Command::new(lonely_vino(dir.path()))
        .args(["bench", "e4", "--quick"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("vino-bench-wisconsin") && err.contains("cargo build --release -p vino-experiments"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn bench_runs_the_experiment_program_beside_it_with_the_arguments_as_given() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let vino = lonely_vino(dir.path());
    let fake = dir.path().join("vino-bench-core");
    std::fs::write(&fake, "#!/bin/sh\nfor a in \"$@\"; do echo \"[$a]\"; done\nexit 3\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = Command::new(&vino)
        .args(["bench", "core", "--quick", "--part", "costs", "two words", "--help"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "[--quick]\n[--part]\n[costs]\n[two words]\n[--help]\n"
    );
    let o = Command::new(&vino).args(["bench", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    for name in [
        "core",
        "wisconsin",
        "events",
        "layout",
        "gunzip",
        "locks",
        "linux",
        "daemon",
        "soak",
        "isolation",
    ] {
        assert!(help.contains(name), "{help}");
    }
}

/// `vino daemon` on a new image in `dir`, once its socket is there: the child and the socket.
fn start_daemon(dir: &Path) -> (std::process::Child, std::path::PathBuf) {
    let (image, socket) = (dir.join("disk.img"), dir.join("vinod.sock"));
    let daemon = Command::new(env!("CARGO_BIN_EXE_vino"))
        .args([
            "daemon",
            "--image",
            image.to_str().unwrap(),
            "--socket",
            socket.to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !socket.exists() {
        assert!(std::time::Instant::now() < until, "the daemon did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    (daemon, socket)
}

fn vino_cmd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vino"))
}

#[test]
fn fsck_reports_a_corrupt_image_and_mkfs_refuses_nonsense() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let image = dir.path().join("bad.img");
    let out = vino_cmd().args(["mkfs", image.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--size"));
    let out = vino_cmd()
        .args(["mkfs", image.to_str().unwrap(), "--size", "12Q"])
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("unknown unit"));
    assert!(
        vino_cmd()
            .args(["mkfs", image.to_str().unwrap(), "--size", "16M"])
            .status()
            .unwrap()
            .success()
    );
    let clean = vino_cmd()
        .args(["fsck", image.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert_eq!(clean.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&clean.stdout).unwrap();
    assert_eq!(v["clean"], true);
    // Scribble over the superblock: fsck cannot check it, and says so.
    let mut bytes = std::fs::read(&image).unwrap();
    bytes[..64].fill(0xAB);
    std::fs::write(&image, &bytes).unwrap();
    let out = vino_cmd().args(["fsck", image.to_str().unwrap()]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(!out.stderr.is_empty());
}

#[test]
fn fsck_upgrade_brings_an_old_image_to_this_format() {
    use vino_fs::layout::{BS, Superblock};
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let image = dir.path().join("old.img");
    let img = image.to_str().unwrap();
    assert!(
        vino_cmd()
            .args(["mkfs", img, "--size", "16M"])
            .status()
            .unwrap()
            .success()
    );
    // As a VINO of format version 1 made it.
    let mut bytes = std::fs::read(&image).unwrap();
    let (sb, v) = Superblock::decode_any(&bytes[..BS]).unwrap();
    assert_eq!(v, vino_fs::VERSION);
    let old = sb.encode_as(1);
    bytes[..BS].copy_from_slice(&old[..]);
    bytes[BS..2 * BS].copy_from_slice(&old[..]);
    std::fs::write(&image, &bytes).unwrap();
    let out = vino_cmd().args(["fsck", img]).output().unwrap();
    assert_eq!(out.status.code(), Some(8));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "format version 1 is older than this VINO ({}): run `vino fsck --upgrade IMAGE`",
            vino_fs::VERSION
        )),
        "{err}"
    );
    let out = vino_cmd().args(["fsck", "--upgrade", img]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let said = format!("upgraded from format version 1 to {}", vino_fs::VERSION);
    assert!(err.contains(&said), "{err}");
    let out = vino_cmd().args(["fsck", "--upgrade", img]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty(), "nothing to upgrade, nothing said");
    let out = vino_cmd().args(["fsck", img, "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
}

/// `tests/programs/copy.c` of the VINO-process crate, built by `vino build` into `dir`.
fn copy_program(dir: &Path) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wasi/tests/programs/copy.c");
    let out = dir.join("copy.wasm");
    let o = vino(&["build", src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.is_empty() && o.stderr.is_empty(), "quiet on success");
    out
}

#[test]
fn run_executes_a_wasm_program_as_a_vino_process_on_an_image() {
    use std::io::Write;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("disk.img");
    let img = image.to_str().unwrap();
    assert!(vino(&["mkfs", img, "--size", "64M"]).status.success());
    let copy = copy_program(dir.path());
    let prog = copy.to_str().unwrap();

    // The standard input into a file on the image, then the file to the standard output.
    let mut child = Command::new(env!("CARGO_BIN_EXE_vino"))
        .args(["run", "--image", img, prog, "-", "/kept"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"through the kernel\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.is_empty() && o.stderr.is_empty(), "quiet on success");
    let o = vino(&["run", "--image", img, prog, "/kept", "-"]);
    assert_eq!(o.stdout, b"through the kernel\n", "the file outlived the first process");
    // A directory given by name, entered as the working directory: a relative path starts there.
    let o = vino(&["run", "--image", img, "--dir", "/::/", "--cwd", "/", prog, "kept", "-"]);
    assert_eq!(
        o.stdout,
        b"through the kernel\n",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = vino(&["run", "--image", img, "--dir", "/missing", prog, "kept", "-"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot give the program the directory /missing"));

    // The program's own exit status and its error on stderr.
    let o = vino(&["run", "--image", img, prog, "/missing", "-"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/missing: No such file or directory"));

    // Ctrl-C kills the VINO process: 128 + SIGINT, and the image stays consistent.
    let child = Command::new(env!("CARGO_BIN_EXE_vino"))
        .args(["run", "--image", img, prog, "--sleep", "60"])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: kill on the child's pid, which has not been reaped yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130));
    assert!(vino(&["fsck", img]).status.success());

    // Not a program: a clear error, status 1.
    let bad = dir.path().join("bad.wasm");
    std::fs::write(&bad, b"\0asm\x01\0\0\0\x05").unwrap();
    let o = vino(&["run", "--image", img, bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a program VINO can run"));
}

#[test]
fn run_without_an_image_runs_the_program_inside_the_daemon() {
    use std::io::Write;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, socket) = start_daemon(dir.path());
    // Huge pages are off by default (`huge_pages`), for the whole daemon.
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.id())).unwrap();
    assert!(status.contains("THP_enabled:\t0"), "{status}");
    let copy = copy_program(dir.path());
    let (sock, prog) = (socket.to_str().unwrap(), copy.to_str().unwrap());
    let mut child = Command::new(env!("CARGO_BIN_EXE_vino"))
        .args(["run", "--socket", sock, prog, "-", "/kept"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"inside vinod\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = vino(&["run", "--socket", sock, prog, "/kept", "-"]);
    assert_eq!(o.stdout, b"inside vinod\n");
    let o = vino(&["run", "--socket", sock, "--dir", "/", "--cwd", "/", prog, "kept", "-"]);
    assert_eq!(o.stdout, b"inside vinod\n", "{}", String::from_utf8_lossy(&o.stderr));
    let o = vino(&["run", "--socket", sock, "--dir", "/missing", prog, "kept", "-"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("/missing"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = vino(&["run", "--socket", sock, prog, "/missing", "-"]);
    assert_eq!(o.status.code(), Some(1));
    // Ctrl-C kills the program in the daemon: 128 + SIGINT.
    let child = Command::new(env!("CARGO_BIN_EXE_vino"))
        .args(["run", "--socket", sock, prog, "--sleep", "60"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let o = vino(&["ps", "--socket", sock]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("copy.wasm"),
        "vino ps lists it"
    );
    // SAFETY: kill on the children's pids, which have not been reaped yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(130));
    // Detached: its pid printed, then killed by it.
    let o = vino(&["run", "--socket", sock, "--detach", prog, "--sleep", "60"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pid = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(pid.parse::<u64>().is_ok(), "{pid}");
    let o = vino(&["kill", "--socket", sock, &pid]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = vino(&["kill", "--socket", sock, "999999"]);
    assert_eq!(o.status.code(), Some(1));
    // SAFETY: as above.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    assert!(daemon.wait().unwrap().success());
    assert!(
        vino(&["fsck", dir.path().join("disk.img").to_str().unwrap()])
            .status
            .success()
    );
}

#[test]
fn build_shows_clangs_warnings_and_names_the_source_that_failed() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let main = write(
        "main.c",
        "#include <stdio.h>\nint helper(void);\nint main(void) { printf(\"%d\\n\", \"x\"); return helper(); }\n",
    );
    let helper = write("helper.c", "int helper(void) { return 0; }\n");
    let broken = write("broken.c", "int helper(void) { return lseek(0, 0, 0) > 0; }\n");
    let out = dir.path().join("prog.wasm");
    let out = out.to_str().unwrap();
    // A warning is shown and the build goes on.
    let o = vino(&["build", &main, &helper, "-o", out]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("main.c:3") && err.contains("warning: format specifies type 'int'"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
    // An implicit declaration stops it, naming the file among several.
    let o = vino(&["build", &main, &broken, &helper, "-o", out]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("failed to build") && err.contains("broken.c"), "{err}");
    assert!(err.contains("implicit declaration of function 'lseek'"), "{err}");
}

#[test]
fn build_passes_definitions_libraries_and_clangs_flags_through() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("main.c");
    std::fs::write(&main, "int main(void) { return VALUE; }\n").unwrap();
    let out = dir.path().join("prog.wasm");
    let (main, out) = (main.to_str().unwrap(), out.to_str().unwrap());
    let o = vino(&[
        "build",
        main,
        "-o",
        out,
        "-DVALUE=0",
        "-Wall",
        "--std",
        "c99",
        "-f",
        "wrapv",
        "-L",
        "/nonexistent",
        "-lm",
        "--emulate",
        "signal,mman",
        "--",
        "-Wl,--export=main",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
    // A library that is not there is the linker's error, shown.
    let o = vino(&["build", main, "-o", out, "-DVALUE=0", "-lnosuchlibrary"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("failed to link") && err.contains("nosuchlibrary"), "{err}");
    // `vino cc` takes clang's own command line.
    let obj = dir.path().join("main.o");
    let obj = obj.to_str().unwrap();
    let o = vino(&["cc", "-DVALUE=1", "-std=c99", "-c", main, "-o", obj]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = vino(&["cc", obj, "-o", out, "-lm"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(&std::fs::read(out).unwrap()[..4], b"\0asm");
}

#[test]
fn build_help_lists_every_program() {
    let o = vino(&["build", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    for p in ["sqlite3", "gzip", "bzip2", "lz4", "zstd", "minigzip"] {
        assert!(help.contains(p), "{p}: {help}");
    }
}

/// A read-ahead graft for `toy.compute_ra` that answers one extent after each read and counts
/// its calls in memory.
const TOY_RA: &str = vino_toykernel::NEXT_BLOCK_RA;

#[test]
fn graft_replay_checks_a_recording_offline_and_says_where_it_differs() {
    use std::sync::Arc;
    use vino_graft::record::Event;
    use vino_graft::{Access, GraftSlot, Owner, Runtime};
    use vino_toykernel::{Read, ToyComputeRa, ToyFile};
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let runtime = Runtime::default();
    let slot = GraftSlot::<ToyComputeRa>::new(&runtime, Arc::new(ToyFile::new(1 << 20)), Access::Process(1), None);
    slot.load(TOY_RA.as_bytes(), Owner::process(1)).unwrap();
    slot.record_start(1 << 20).unwrap();
    for i in 0..50u64 {
        slot.invoke(&Read {
            offset: i * 8192,
            len: 4096,
        });
    }
    let recording = slot.record_stop().unwrap();
    let (rec, module) = (dir.path().join("ra.rec"), dir.path().join("ra.wat"));
    std::fs::write(&rec, recording.to_bytes()).unwrap();
    std::fs::write(&module, TOY_RA).unwrap();
    let (rec_s, module_s) = (rec.to_str().unwrap(), module.to_str().unwrap());
    let o = vino(&["graft", "replay", rec_s, module_s]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.is_empty() && o.stderr.is_empty(), "quiet on success");
    let o = vino(&["graft", "replay", rec_s, module_s, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["invocations"], 50);
    assert_eq!(v["matched"], 50);
    assert_eq!(v["same_module"], true);
    // An argument changed in the file: the replay stops there and says where, on stderr.
    let mut changed = recording.clone();
    let invokes = changed.events.iter_mut().filter_map(|e| match e {
        Event::Invoke { params, .. } => Some(params),
        _ => None,
    });
    invokes.skip(7).take(1).for_each(|p| p[0] += 4096);
    std::fs::write(&rec, changed.to_bytes()).unwrap();
    let o = vino(&["graft", "replay", rec_s, module_s]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("differs from the recording at invocation 7"), "{err}");
    // Not a recording at all.
    std::fs::write(&rec, b"nonsense").unwrap();
    let o = vino(&["graft", "replay", rec_s, module_s]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a VINO graft recording"));
}

#[test]
fn graft_replay_judges_another_read_ahead_module_in_the_ghost_caches() {
    // Reads ahead the 8 KiB after each read; and a module that reads nothing ahead.
    const AHEAD: &str = r#"(module
      (import "vino" "vino_prefetch" (func $prefetch (param i64 i64) (result i32)))
      (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
      (func (export "file_compute_ra") (param $off i64) (param $len i32) (param $size i64) (result i32)
        (local $next i64)
        (local.set $next (i64.add (local.get $off) (i64.extend_i32_u (local.get $len))))
        (if (i64.le_u (i64.add (local.get $next) (i64.const 8192)) (local.get $size))
          (then (drop (call $prefetch (local.get $next) (i64.const 8192)))))
        (i32.const 0)))"#;
    const NONE: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
      (func (export "file_compute_ra") (param i64 i32 i64) (result i32) (i32.const 0)))"#;
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, socket) = start_daemon(dir.path());
    let mut c = vino_client::Client::connect(&socket).unwrap();
    let fd = c.open("/data", vino_client::OpenFlags::create()).unwrap();
    c.write(fd, &vec![5u8; 256 << 10]).unwrap();
    let point = format!("file.compute_ra/{fd}");
    c.graft_load(&point, AHEAD.as_bytes()).unwrap();
    c.graft_record(&point, 1 << 20).unwrap();
    c.seek(fd, 0).unwrap();
    let mut buf = vec![0u8; 4096];
    for _ in 0..40 {
        c.read(fd, &mut buf).unwrap();
    }
    let rec = dir.path().join("ra.rec");
    std::fs::write(&rec, c.graft_record_stop(&point).unwrap()).unwrap();
    let none = dir.path().join("none.wat");
    std::fs::write(&none, NONE).unwrap();
    let (rec_s, none_s) = (rec.to_str().unwrap(), none.to_str().unwrap());
    let o = vino(&["graft", "replay", rec_s, none_s, "--frames", "64"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("LIVE") && table.contains("read ahead, used"), "{table}");
    let o = vino(&["graft", "replay", rec_s, none_s, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["same_module"], false);
    assert_eq!(v["ghost"]["model"], "read_ahead");
    assert_eq!(v["ghost"]["candidate"]["prefetched"], 0);
    assert!(v["ghost"]["live"]["prefetched"].as_u64().unwrap() > 0, "{v}");
    assert!(v.get("decisions").is_none(), "decisions only when asked");
    // The kernel's own eviction recorded for the same process holds its page accesses: another
    // module replays on the ghost of its pages.
    c.graft_record_default("vas.pick_victim", 1 << 20).unwrap();
    c.seek(fd, 0).unwrap();
    for _ in 0..20 {
        c.read(fd, &mut buf).unwrap();
    }
    let vrec = dir.path().join("victim.rec");
    std::fs::write(&vrec, c.graft_record_stop("vas.pick_victim").unwrap()).unwrap();
    let newest = dir.path().join("newest.wat");
    std::fs::write(
        &newest,
        r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 0))
          (func (export "vas_pick_victim") (param $n i32) (result i32) (i32.sub (local.get $n) (i32.const 1))))"#,
    )
    .unwrap();
    let (vrec_s, newest_s) = (vrec.to_str().unwrap(), newest.to_str().unwrap());
    let o = vino(&["graft", "replay", vrec_s, newest_s]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("misses"));
    let o = vino(&["graft", "replay", vrec_s, newest_s, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ghost"]["model"], "victim", "{v}");
    assert!(v["ghost"]["accesses"].as_u64().unwrap() >= 20, "{v}");
    // A file's lock grants tried by its path; read-ahead is per open file, said so.
    let grant = dir.path().join("grant.wat");
    std::fs::write(
        &grant,
        r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 0))
          (func (export "lock_grant") (param i32 i32) (result i64) (i64.const 1)))"#,
    )
    .unwrap();
    let (grant_s, sock) = (grant.to_str().unwrap(), socket.to_str().unwrap());
    let o = vino(&[
        "graft",
        "try",
        grant_s,
        "--point",
        "lock.grant",
        "--file",
        "/data",
        "--for",
        "0",
        "--json",
        "--socket",
        sock,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["model"], "lock", "{v}");
    assert!(v["point"].as_str().unwrap().starts_with("lock.grant/"), "{v}");
    let o = vino(&[
        "graft",
        "try",
        none_s,
        "--point",
        "file.compute_ra",
        "--file",
        "/data",
        "--for",
        "0",
        "--socket",
        sock,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("tried on an open file"));
    // SAFETY: kill on the daemon child, not reaped yet.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    daemon.wait().unwrap();
}

#[test]
fn graft_load_records_a_global_graft_through_the_daemon() {
    if !nix_is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, socket) = start_daemon(dir.path());
    let sock = socket.to_str().unwrap();
    let fifo = dir.path().join("fifo.wat");
    std::fs::write(
        &fifo,
        r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
          (func (export "disk_pick_request") (param i32 i64) (result i32) (i32.const 0)))"#,
    )
    .unwrap();
    let rec = dir.path().join("disk.rec");
    let o = vino(&[
        "graft",
        "load",
        fifo.to_str().unwrap(),
        "--point",
        "disk.pick_request",
        "--for",
        "1",
        "--record",
        rec.to_str().unwrap(),
        "--socket",
        sock,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = vino(&[
        "graft",
        "replay",
        rec.to_str().unwrap(),
        fifo.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["invocations"], v["matched"]);
    // `vino graft record` on a graftpoint nothing is bound to: a clear error.
    let o = vino(&[
        "graft",
        "record",
        "--point",
        "disk.pick_request",
        "-o",
        rec.to_str().unwrap(),
        "--for",
        "0",
        "--socket",
        sock,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("recording at disk.pick_request"));
    // The same module tried in shadow beside the disk queue's elevator, its report as JSON;
    // and one beside the CPU's turns between users, offered as many decisions as the kernel
    // chooses.
    let fifo_s = fifo.to_str().unwrap();
    let pick = dir.path().join("pick.wat");
    std::fs::write(
        &pick,
        r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
          (func (export "sched_pick_next") (param i32 i32) (result i32) (i32.const 0)))"#,
    )
    .unwrap();
    for (module, point, model) in [
        (fifo_s, "disk.pick_request", "disk"),
        (pick.to_str().unwrap(), "sched.pick_next", "sched"),
    ] {
        let o = vino(&[
            "graft", "try", module, "--point", point, "--for", "0", "--json", "--socket", sock,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["model"], model);
        assert_eq!(v["point"], point);
        assert_eq!(v["sample_auto"], true);
    }
    // A graftpoint with no model: said, with what to use instead.
    let o = vino(&[
        "graft",
        "try",
        fifo_s,
        "--point",
        "cache.writeback",
        "--for",
        "0",
        "--socket",
        sock,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("record and replay"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // SAFETY: kill on the daemon child, not reaped yet.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    daemon.wait().unwrap();
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
