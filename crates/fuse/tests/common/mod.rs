//! What the mount tests share: an image, the kernel booted on it and its mount.

#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use tempfile::TempDir;
use vino_blockdev::{BlockDevice, FileDevice};
use vino_fuse::{Mount, MountConfig, mount};
use vino_kernel::storage::{MkfsOptions, fsck, mkfs};
use vino_kernel::{Kernel, KernelConfig};

const IMAGE_BYTES: u64 = 128 << 20;

/// An image, the kernel booted on it and its mount.
pub struct Mounted {
    pub dir: TempDir,
    pub image: PathBuf,
    pub kernel: Arc<Kernel>,
    pub mount: Option<Mount>,
}

impl Mounted {
    pub fn new() -> Mounted {
        Self::with_config(MountConfig {
            allow_other: true,
            ..MountConfig::default()
        })
    }

    /// A mount open to every user (`allow_other`) of a kernel booted with `kernel`.
    pub fn for_all(kernel: &KernelConfig) -> Mounted {
        Self::with_kernel(
            kernel,
            MountConfig {
                allow_other: true,
                ..MountConfig::default()
            },
        )
    }

    pub fn with_config(config: MountConfig) -> Mounted {
        Self::with_kernel(&KernelConfig::default(), config)
    }

    /// A mount of a kernel booted with `kernel` (its limits, its file system's options).
    pub fn with_kernel(kernel: &KernelConfig, config: MountConfig) -> Mounted {
        let dir = tempfile::tempdir().unwrap();
        // Other users must reach the mount point.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let image = dir.path().join("disk.img");
        let dev = FileDevice::create(&image, IMAGE_BYTES).unwrap();
        mkfs(&dev, &MkfsOptions::default()).unwrap();
        let dev: Arc<dyn BlockDevice> = Arc::new(dev);
        let kernel = Kernel::boot(dev, kernel).unwrap();
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        let mount = mount(kernel.clone(), &mnt, &config).expect("mounting needs root and /dev/fuse");
        let table = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let line = table.lines().find(|l| l.contains(&format!(" {} ", mnt.display())));
        assert!(
            line.is_some_and(|l| l.contains(" - fuse") && l.contains(" vino ")),
            "{} is not a VINO mount:\n{table}",
            mnt.display()
        );
        Mounted {
            dir,
            image,
            kernel,
            mount: Some(mount),
        }
    }

    /// What the kernel itself says of a path on the mount.
    pub fn kernel_stat(&self, path: &str) -> vino_kernel::Stat {
        let p = self.kernel.spawn(vino_kernel::Credentials::root());
        let st = p.stat(path).unwrap();
        self.kernel.exit(p.pid());
        st
    }

    pub fn mnt(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    /// Runs `script` with `sh` in the mount; panics with its stderr if it fails. Its stdout.
    pub fn sh(&self, script: &str) -> String {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(self.mnt())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A directory outside the mount, for programs' inputs and outputs.
    pub fn host(&self, name: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        fs::create_dir_all(&p).unwrap();
        p
    }

    /// Unmounts, shuts the kernel down, and checks the image.
    pub fn finish(mut self) {
        self.mount.take().unwrap().unmount().unwrap();
        self.kernel.shutdown().unwrap();
        // The kernel holds the image (and its lock) until it is gone.
        let Mounted { kernel, image, dir, .. } = self;
        // The mount's threads may hold it a moment longer after they are told to end.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while Arc::strong_count(&kernel) > 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(Arc::strong_count(&kernel), 1, "something still holds the kernel");
        drop(kernel);
        let report = fsck(&FileDevice::open(&image).unwrap(), false).unwrap();
        assert!(report.is_clean(), "fsck after unmount: {:?}", report.problems);
        drop(dir);
    }
}

/// The system's Python running `script` as `uid` (group `uid`, no supplementary groups), under
/// `setpriv`. The system's, because a per-user install (pyenv) may not be reachable by others.
pub fn python_as(uid: u32, script: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args([
        format!("--reuid={uid}"),
        format!("--regid={uid}"),
        "--clear-groups".into(),
    ])
    .args(["/usr/bin/python3", "-c", script]);
    cmd
}

/// Starts `n` children as `uid` that each wait for a write lock on `path` (`lockf`), all kept on
/// CPU 0 when `on_cpu0` (so on one queue of a ring-served mount), and prints `REFUSED k` once
/// the `refused` first to end have (counting those refused with `ENOLCK`), then `GRANTED g`
/// when the rest have had the lock.
pub fn lock_waiters(uid: u32, path: &str, n: usize, refused: usize, on_cpu0: bool) -> std::process::Child {
    let pin = if on_cpu0 { "os.sched_setaffinity(0, {0})\n" } else { "" };
    let script = format!(
        "import fcntl, os, sys\n{pin}kids = []\nfor i in range({n}):\n    pid = os.fork()\n    if pid == 0:\n        fd = os.open('{path}', os.O_RDWR)\n        try:\n            fcntl.lockf(fd, fcntl.LOCK_EX)\n            os._exit(0)\n        except OSError as e:\n            os._exit(e.errno)\n    kids.append(pid)\ncodes = []\nwhile len(codes) < {refused}:\n    codes.append(os.waitstatus_to_exitcode(os.wait()[1]))\nprint('REFUSED', sum(1 for c in codes if c == 37), flush=True)\nwhile len(codes) < {n}:\n    codes.append(os.waitstatus_to_exitcode(os.wait()[1]))\nprint('GRANTED', sum(1 for c in codes if c == 0), flush=True)\n"
    );
    python_as(uid, &script)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("setpriv and python3 run programs as other users")
}

/// The next line a child printed.
pub fn line(child: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let mut l = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut l)
        .unwrap();
    l.trim().to_string()
}

/// A file `/shared` on the mount that every user may open, its whole-file write lock held by a
/// root process of the kernel (through the socket's side): the process, the descriptor and the
/// file's host path.
pub fn locked_file(m: &Mounted) -> (Arc<vino_kernel::Process>, vino_kernel::Fd, String) {
    let f = m.mnt().join("shared");
    fs::write(&f, b"x").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o666)).unwrap();
    let holder = m.kernel.spawn(vino_kernel::Credentials::root());
    let fd = holder.open("/shared", vino_kernel::OpenFlags::read_write()).unwrap();
    holder.lock(fd, vino_kernel::LockRequest::write(0, 0), false).unwrap();
    (holder, fd, f.display().to_string())
}

/// Turns the host's switch for FUSE over io_uring on; false (the test is skipped, saying so)
/// where that cannot be.
pub fn ring_available() -> bool {
    let on = vino_fuse_uring::switch_on();
    if !on {
        eprintln!("skipped: no FUSE over io_uring here (or its switch cannot be turned on)");
    }
    on
}
