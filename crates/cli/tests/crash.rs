//! Crash tests: the crash workload runs in a child process on an image file, is killed with
//! SIGKILL at a random moment, and the image must then be clean for fsck (after journal replay)
//! and hold every byte that was fsync'd. Rounds: `VINO_CRASH_ROUNDS` (default 5; the full run
//! uses 100).

use std::process::{Command, Stdio};
use std::time::Duration;

fn vino() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vino"))
}

#[test]
fn killed_at_random_moments_the_file_system_stays_consistent_and_keeps_fsynced_data() {
    let rounds: u64 = std::env::var("VINO_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    // Not a tmpfs: the image is written with O_DIRECT like a real device.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let image = dir.path().join("crash.img");
    let log = dir.path().join("fsynced.log");
    let status = vino()
        .args(["mkfs", image.to_str().unwrap(), "--size", "64M"])
        .status()
        .unwrap();
    assert!(status.success());
    let mut x = 0x2545F4914F6CDD1Du64;
    for round in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut child = vino()
            .args([
                "crash-workload",
                image.to_str().unwrap(),
                "--log",
                log.to_str().unwrap(),
                "--seed",
                &(round + 1).to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Let it boot and work for 50-800 ms, then pull the plug.
        std::thread::sleep(Duration::from_millis(50 + x % 750));
        if let Ok(Some(status)) = child.try_wait() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "round {round}: the workload stopped by itself ({status}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // SAFETY: kill touches no memory; the child has not been waited for, so its pid still
        // names it (at worst as a zombie) and no other process.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        let out = vino()
            .args(["crash-check", image.to_str().unwrap(), "--log", log.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.lines().count() as u64 >= rounds,
        "the workload fsync'd too rarely to test anything:\n{text}"
    );
}

#[test]
fn fsck_reports_a_corrupt_image_and_mkfs_refuses_nonsense() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let image = dir.path().join("bad.img");
    let out = vino().args(["mkfs", image.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--size"));
    let out = vino()
        .args(["mkfs", image.to_str().unwrap(), "--size", "12Q"])
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("unknown unit"));
    assert!(
        vino()
            .args(["mkfs", image.to_str().unwrap(), "--size", "16M"])
            .status()
            .unwrap()
            .success()
    );
    let clean = vino()
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
    let out = vino().args(["fsck", image.to_str().unwrap()]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(!out.stderr.is_empty());
}
