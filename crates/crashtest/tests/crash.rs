//! Crash tests: the crash workload runs in a child process on an image file, is killed with
//! SIGKILL at a random moment, and the image must then be clean for fsck (after journal replay)
//! and hold every byte that was fsync'd. Stream files are among those appended to (a compressor
//! and an integrity codec bound), and a file whose codec traps on some chunks is rewritten: none
//! of those chunks may be stored. Rounds: `VINO_CRASH_ROUNDS` (default 5; the full run uses 100).

use std::process::{Command, Stdio};
use std::time::Duration;

fn crashtest() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vino-crashtest"))
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
    // As `vino mkfs IMAGE --size 64M` makes it.
    let dev = vino_blockdev::FileDevice::create(&image, 64 << 20).unwrap();
    vino_fs::mkfs(&dev, &vino_fs::MkfsOptions::default()).unwrap();
    drop(dev);
    let codecs = dir.path().join("codecs");
    build_codecs(&codecs);
    let mut x = 0x2545F4914F6CDD1Du64;
    for round in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut child = crashtest()
            .args([
                "workload",
                image.to_str().unwrap(),
                "--log",
                log.to_str().unwrap(),
                "--seed",
                &(round + 1).to_string(),
                "--codecs",
                codecs.to_str().unwrap(),
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
        let out = crashtest()
            .args(["check", image.to_str().unwrap(), "--log", log.to_str().unwrap()])
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

/// The workload's stream codecs, as `<name>.wasm` in `dir`: built once, not in every round.
fn build_codecs(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    for name in ["lz4_stream", "crc32c_stream", "stream_partial_trap"] {
        let wasm = vino_sdk::build_example(name, &vino_sdk::BuildOptions::default()).unwrap();
        std::fs::write(dir.join(format!("{name}.wasm")), wasm).unwrap();
    }
}
