//! What the VINO-process tests share: a kernel on an in-memory disk, the SDK's programs,
//! standard streams captured in memory, the host's tools to check against.
// Each test binary uses part of it.
#![allow(dead_code)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use vino_blockdev::{BlockDevice, MemDevice};
use vino_kernel::storage::{MkfsOptions, mkfs};
use vino_kernel::{Credentials, Kernel, KernelConfig};
use vino_wasi::{Exit, Program, ProgramLimits, Setup, Stdio};

/// A stream that keeps what is written to it.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }
}

/// Streams for a program: `stdin` to read, stdout and stderr kept.
pub fn stdio(stdin: Vec<u8>) -> (Stdio, Captured, Captured) {
    let (out, err) = (Captured::default(), Captured::default());
    let stdio = Stdio {
        stdin: Box::new(std::io::Cursor::new(stdin)),
        stdout: Box::new(out.clone()),
        stderr: Box::new(err.clone()),
        tty: [false; 3],
    };
    (stdio, out, err)
}

/// A kernel on a fresh 256 MiB in-memory disk with an 8 MiB page cache.
pub fn boot() -> (Arc<MemDevice>, Arc<Kernel>) {
    let dev = Arc::new(MemDevice::new(65536));
    mkfs(&*dev, &MkfsOptions::default()).unwrap();
    let config = KernelConfig {
        cache_frames: 2048,
        ..KernelConfig::default()
    };
    let kernel = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).unwrap();
    (dev, kernel)
}

/// One of the SDK's named programs, from its build cache (built once across runs).
pub fn program(name: &str) -> Program {
    let path = vino_sdk::programs::build_named_cached(name, &Default::default())
        .unwrap_or_else(|e| panic!("building {name}: {e}"));
    Program::compile(&std::fs::read(path).unwrap(), ProgramLimits::default()).unwrap()
}

/// Runs `p` as root with `args` (the first its name) and `stdin`: its exit, stdout, stderr.
pub fn run(k: &Arc<Kernel>, p: &Program, args: &[&str], stdin: Vec<u8>) -> (Exit, Vec<u8>, String) {
    let (stdio, out, err) = stdio(stdin);
    let args = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    let setup = Setup::new(args, Vec::new());
    let exit = p.run(k, Credentials::root(), setup, stdio, &p.kill_switch()).unwrap();
    (exit, out.bytes(), err.text())
}

/// The host's `tool` (gzip, bzip2, lz4, zstd: scripts/setup.sh installs them) with `args`,
/// given `input` on stdin: its output.
pub fn host(tool: &str, args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut child = std::process::Command::new(tool)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("the host's {tool}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "the host's {tool} {args:?} failed");
    out.stdout
}

/// After the last program: the kernel shut down and its image checked clean.
pub fn fsck(dev: &MemDevice, k: &Kernel) {
    assert!(k.processes().is_empty());
    k.shutdown().unwrap();
    let report = vino_kernel::storage::fsck(dev, false).unwrap();
    assert!(report.is_clean(), "{report:?}");
}
