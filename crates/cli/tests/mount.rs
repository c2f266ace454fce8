//! `vino mount` as a user runs it: the image served and mounted, ordinary programs on it, a
//! read-ahead graft bound to one file from the command line and used by those programs' reads,
//! `vino top` and `vino graft list --json`, then SIGTERM: unmounted, and fsck finds it clean.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn vino(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vino"))
        .args(args)
        .output()
        .expect("vino runs")
}

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_vino"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vino starts")
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn mounted(at: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    table.lines().any(|l| l.split(' ').nth(4) == Some(at.to_str().unwrap()))
}

fn sigterm(child: &mut Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

/// Invocations of the file-wide read-ahead graft, from `vino graft list --json`.
fn file_graft_invocations(socket: &str) -> Option<u64> {
    let list: serde_json::Value =
        serde_json::from_str(&ok(&vino(&["graft", "list", "--json", "--socket", socket]))).ok()?;
    list.as_array()?
        .iter()
        .filter(|g| g.to_string().contains("/big.txt"))
        .map(|g| g["invocations"].as_u64().unwrap_or(0))
        .max()
}

/// Where a mount test's image, mount point (made, empty) and socket go.
struct Scratch {
    dir: tempfile::TempDir,
    image: String,
    mnt: std::path::PathBuf,
    socket: String,
}

/// A [`Scratch`]; the mount tests need root and /dev/fuse, and fail without them.
fn scratch() -> Scratch {
    if !Path::new("/dev/fuse").exists() || !nix::unistd::geteuid().is_root() {
        panic!("this test needs root and /dev/fuse (FUSE mounts are part of the tests)");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let (image, socket) = (path("disk.img"), path("s.sock"));
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    Scratch {
        dir,
        image,
        mnt,
        socket,
    }
}

#[test]
fn mount_serves_programs_and_a_per_file_graft_from_the_command_line() {
    let Scratch {
        dir,
        image,
        mnt,
        socket,
    } = scratch();
    let (image, socket_s) = (image.as_str(), socket.as_str());
    let mut daemon = spawn(&["mount", image, mnt.to_str().unwrap(), "--socket", socket_s]);
    wait_for("the mount", || mounted(&mnt));

    // More than the cache (4 MB) holds: reading it again goes to the device and asks read-ahead.
    let big = mnt.join("big.txt");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("seq 1 1500000 > {}", big.display()))
        .output()
        .unwrap();
    ok(&o);
    let module = dir.path().join("ra.wasm");
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/grafts/sequential_ra.c");
    ok(&vino(&[
        "graft",
        "build",
        sdk.to_str().unwrap(),
        "-o",
        module.to_str().unwrap(),
    ]));
    // Read once, so that Linux's page cache holds it: binding the graft drops those pages, and
    // the reads below come to VINO (and the graft) again.
    ok(&Command::new("cat")
        .arg(&big)
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap());
    let mut loader = spawn(&[
        "graft",
        "load",
        "--file",
        big.to_str().unwrap(),
        "--point",
        "file.compute_ra",
        module.to_str().unwrap(),
    ]);
    wait_for("the file graft", || file_graft_invocations(socket_s).is_some());

    let o = Command::new("wc").arg("-l").arg(&big).output().unwrap();
    assert!(ok(&o).starts_with("1500000 "), "wc read the file through the mount");
    let invoked = file_graft_invocations(socket_s).unwrap();
    assert!(invoked > 0, "the reads through the mount used the file's graft");
    let top = ok(&vino(&["top", "--once", "--json", "--socket", socket_s]));
    let top: serde_json::Value = serde_json::from_str(&top).unwrap();
    assert!(top["processes"].as_array().is_some_and(|p| !p.is_empty()), "{top}");
    // `vino mount` run as root serves over io_uring wherever Linux has it (turning the host's
    // switch on where it can), and says which transport serves.
    let transport = top["mounts"][0]["transport"].as_str().unwrap_or_default();
    let switch = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").unwrap_or_default();
    if switch.trim() == "Y" {
        assert!(transport.starts_with("io_uring"), "{top}");
    } else {
        assert_eq!(transport, "/dev/fuse", "{top}");
    }
    // And whether idle CPUs are kept running for it: by default only by pollers in the idle
    // cgroup, so where the daemon can make one there are pollers, and elsewhere it says why not.
    let idle_poll = top["mounts"][0]["idle_poll"].as_str().unwrap_or_default();
    if let Some(why) = idle_poll.strip_prefix("off (no idle cgroup: ") {
        assert_eq!(Err(why.trim_end_matches(')').to_string()), vino_idlepoll::idle_group());
    } else {
        assert!(
            idle_poll.ends_with(" pollers") || idle_poll.starts_with("off ("),
            "{top}"
        );
    }
    // What it served (root sees the counts): the writes of `seq` among them, and the text view
    // says it in a line of its own.
    let requests = top["mounts"][0]["requests"].as_array().cloned().unwrap_or_default();
    assert!(
        requests
            .iter()
            .any(|r| r["op"] == "write" && r["count"].as_u64() > Some(0)),
        "{top}"
    );
    let text = ok(&vino(&["top", "--once", "--socket", socket_s]));
    assert!(text.contains(" requests, served in "), "{text}");
    // And how it caches file data: Linux's page cache in front of VINO's by default.
    assert_eq!(
        top["mounts"][0]["data_cache"].as_str(),
        Some("Linux's page cache in front of VINO's"),
        "{top}"
    );

    // The graft goes with the command that loaded it.
    sigterm(&mut loader);
    assert!(loader.wait().unwrap().success());
    wait_for("the graft to go", || file_graft_invocations(socket_s).is_none());

    // A descriptor the shell opened, grafted through the mount's ioctl, then used by the
    // command `vino graft load --fd` runs in its place.
    let vino_bin = env!("CARGO_BIN_EXE_vino");
    let script = format!(
        "exec 3< {big}; exec {vino_bin} graft load {module} --point file.compute_ra --fd 3 --socket {socket_s} -- \
         sh -c 'cat <&3 | wc -c; {vino_bin} graft list --json --socket {socket_s}'",
        big = big.display(),
        module = module.display(),
    );
    let out = ok(&Command::new("sh").arg("-c").arg(&script).output().unwrap());
    let (count, list) = out.split_once('\n').unwrap();
    assert_eq!(count.trim(), std::fs::metadata(&big).unwrap().len().to_string());
    let list: serde_json::Value = serde_json::from_str(list).unwrap();
    let ran = list.as_array().unwrap().iter().any(|g| {
        g["point"].as_str().is_some_and(|p| p.starts_with("file.compute_ra/")) && g["invocations"].as_u64() > Some(0)
    });
    assert!(ran, "the descriptor's graft served its reads: {list}");
    // A descriptor that is not on a VINO mount is refused, with the reason.
    let o = Command::new(vino_bin)
        .args([
            "graft",
            "load",
            module.to_str().unwrap(),
            "--point",
            "file.compute_ra",
            "--fd",
            "0",
            "--socket",
            socket_s,
        ])
        .stdin(std::fs::File::open(image).unwrap())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a file on a VINO mount"),
        "{o:?}"
    );

    sigterm(&mut daemon);
    let out = daemon.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!mounted(&mnt), "unmounted at exit");
    let o = vino(&["fsck", image]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));
}

#[test]
fn mount_reports_a_missing_mount_point_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("disk.img");
    let o = vino(&["mount", image.to_str().unwrap(), "/nonexistent/vino-mnt"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("vino: ") && err.contains("/nonexistent/vino-mnt"),
        "{err}"
    );
}

#[test]
fn mount_ends_cleanly_when_unmounted_from_outside() {
    // Bound, so the directory lives to the end of the test.
    let Scratch {
        dir: _dir,
        image,
        mnt,
        socket,
    } = scratch();
    let (image, socket_s) = (image.as_str(), socket.as_str());
    let args = ["mount", image, mnt.to_str().unwrap(), "--socket", socket_s];
    let mut daemon = spawn(&args);
    wait_for("the mount", || mounted(&mnt));
    std::fs::write(mnt.join("kept.txt"), b"written before the unmount\n").unwrap();
    // As a user ends any FUSE file system: the serving process then writes back and exits.
    let o = Command::new("umount").arg(&mnt).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Something else mounted there at once, before vino notices its mount went: vino must not
    // unmount it on its way out.
    let o = Command::new("mount")
        .args(["-t", "tmpfs", "other", mnt.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(mnt.join("other.txt"), b"not vino's").unwrap();
    let mut status = None;
    let waited = Instant::now();
    while status.is_none() && waited.elapsed() < Duration::from_secs(30) {
        status = daemon.try_wait().unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let Some(status) = status else {
        let _ = daemon.kill();
        let _ = daemon.wait();
        panic!("vino mount still runs 30 s after its mount went");
    };
    let stderr = std::io::read_to_string(daemon.stderr.take().unwrap()).unwrap();
    assert!(status.success(), "{stderr}");
    assert_eq!(
        std::fs::read(mnt.join("other.txt")).ok().as_deref(),
        Some(&b"not vino's"[..]),
        "the file system mounted after vino's is still there"
    );
    let o = Command::new("umount").arg(&mnt).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = vino(&["fsck", image]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(
        read_when_mounted_again(&args, &mnt, "kept.txt"),
        b"written before the unmount\n"
    );
    assert!(!mounted(&mnt), "unmounted at exit");
}

/// Mounts with `args` again, reads `name` from the mount, and ends the mount with SIGTERM.
fn read_when_mounted_again(args: &[&str], mnt: &Path, name: &str) -> Vec<u8> {
    let mut again = spawn(args);
    wait_for("the mount again", || mounted(mnt));
    let data = std::fs::read(mnt.join(name)).unwrap();
    sigterm(&mut again);
    assert!(again.wait().unwrap().success());
    data
}

#[test]
fn vino_sync_makes_what_was_written_to_the_mount_survive_a_kill() {
    let Scratch {
        dir,
        image,
        mnt,
        socket,
    } = scratch();
    // No periodic commit within the test's time: only the sync makes the file durable.
    let config = dir.path().join("vino.toml");
    std::fs::write(&config, "commit_interval = 3600\n").unwrap();
    let (image, socket_s, config_s) = (image.as_str(), socket.as_str(), config.to_str().unwrap());
    let args = [
        "mount",
        image,
        mnt.to_str().unwrap(),
        "--socket",
        socket_s,
        "--config",
        config_s,
    ];
    let mut daemon = spawn(&args);
    wait_for("the mount", || mounted(&mnt));
    std::fs::write(mnt.join("synced.txt"), b"made durable by vino sync\n").unwrap();
    // Linux sends a FUSE file system nothing for `sync -f`; `vino sync` finds the daemon from
    // the path.
    ok(&vino(&["sync", mnt.to_str().unwrap()]));
    // Killed without writing back: what survives is what the sync made durable.
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    let o = Command::new("umount").arg("-l").arg(&mnt).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = vino(&["fsck", image]);
    assert!(
        matches!(o.status.code(), Some(0) | Some(1)),
        "fsck after the kill: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(
        read_when_mounted_again(&args, &mnt, "synced.txt"),
        b"made durable by vino sync\n"
    );

    // A path on no VINO mount is refused with a clear error.
    let o = vino(&["sync", dir.path().to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("is not on a VINO mount"), "{err}");
}
