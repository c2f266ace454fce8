//! Limits per principal through the mount: programs of one user that hold many files open get
//! `EMFILE` at their limit (the kernel process of their credentials is charged), while another
//! user's programs open files as before, and what the first held is given back when its
//! programs end. (Run as root; the users' programs run under `setpriv`.)

mod common;

use common::Mounted;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use vino_fuse::MountConfig;
use vino_kernel::KernelConfig;
use vino_kernel::account::{LimitsConfig, Resource};

const ALICE: u32 = 1000;
const BOB: u32 = 1001;

/// Opens files in `dir` as `uid` until refused; prints how many and the error.
fn open_until_refused(uid: u32, dir: &str) -> Output {
    let script = format!(
        "import os\nfds = []\ntry:\n    while len(fds) < 5000:\n        fds.append(os.open('{dir}/f%d' % len(fds), os.O_CREAT | os.O_RDWR, 0o644))\nexcept OSError as e:\n    print(len(fds), e.errno)\n"
    );
    Command::new("setpriv")
        .args([
            format!("--reuid={uid}"),
            format!("--regid={uid}"),
            "--clear-groups".into(),
        ])
        // The system's Python: a per-user install (pyenv) may not be reachable by other users.
        .args(["/usr/bin/python3", "-c", &script])
        .output()
        .expect("setpriv and python3 run programs as other users")
}

#[test]
fn a_users_open_files_through_the_mount_are_limited_and_anothers_are_not() {
    let mut limits = LimitsConfig::default();
    limits.process.set(Resource::Descriptors, 64);
    let kernel = KernelConfig {
        limits,
        ..KernelConfig::default()
    };
    let m = Mounted::with_kernel(
        &kernel,
        MountConfig {
            allow_other: true,
            ..MountConfig::default()
        },
    );
    let mnt = m.mnt();
    for uid in [ALICE, BOB] {
        let home = mnt.join(format!("home{uid}"));
        fs::create_dir(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(uid), Some(uid)).unwrap();
        fs::set_permissions(&home, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let emfile = libc::EMFILE.to_string();
    for uid in [ALICE, BOB] {
        let out = open_until_refused(uid, &mnt.join(format!("home{uid}")).display().to_string());
        let text = String::from_utf8_lossy(&out.stdout);
        let words: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(words, ["64", emfile.as_str()], "uid {uid}: {out:?}");
    }
    // Everything the programs held is given back once Linux releases their files.
    let total = m.kernel.accounts().total().clone();
    let until = Instant::now() + Duration::from_secs(10);
    while total.used(Resource::Descriptors) != 0 {
        assert!(
            Instant::now() < until,
            "{} descriptors still charged",
            total.used(Resource::Descriptors)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    m.finish();
}
