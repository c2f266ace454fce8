//! The program target: a VINO process confined to one directory makes a sequence of WASI
//! system calls whose arguments come from the input: descriptors (the preopened directory, ones
//! it may have opened, nonsense), paths from a table of escapes (`..`, absolute paths, links
//! that climb or point outside) and pointers and lengths that may run anywhere. The program is
//! Wasm text the target writes, so every call reaches the kernel as the input says.
//!
//! Whatever the calls, the kernel must not panic; the program must end; nothing outside the
//! directory it was given may change (the files and names there are checked); and once it has
//! ended nothing may be held for it, and the image must check clean.

use arbitrary::Unstructured;
use std::fmt::Write as _;
use std::sync::Arc;
use vino_blockdev::BlockDevice;
use vino_kernel::{Credentials, Kernel, KernelConfig, OpenFlags};
use vino_wasi::{Dir, Program, ProgramLimits, Setup};

/// Calls one input makes at most.
const MAX_CALLS: usize = 48;

/// Paths the calls name: within the directory, and every way out of it.
const PATHS: &[&str] = &[
    "a",
    "sub",
    "sub/b",
    "new",
    "sub/new",
    ".",
    "",
    "..",
    "../secret",
    "/secret",
    "../outside/x",
    "sub/../../secret",
    "abs",
    "up",
    "abs/x",
    "up/x",
    "sub/..",
    "link",
    "//secret",
    "a/",
];
/// Where the path strings start in the program's memory.
const PATHS_AT: u32 = 256;
/// An iovec (at 64: buffer 2048, 64 bytes) and scratch for results.
const IOVEC_AT: u32 = 64;
const SCRATCH_AT: u32 = 1024;

/// The calls, with how each argument is drawn.
#[derive(Clone, Copy)]
enum Arg {
    Fd,
    /// A path: two arguments, pointer and length.
    Path,
    /// An iovec array: pointer and count.
    Iovs,
    Out,
    I32,
    I64,
}

const CALLS: &[(&str, &[Arg])] = {
    use Arg::*;
    &[
        ("path_open", &[Fd, I32, Path, I32, I64, I64, I32, Out]),
        ("path_create_directory", &[Fd, Path]),
        ("path_unlink_file", &[Fd, Path]),
        ("path_remove_directory", &[Fd, Path]),
        ("path_rename", &[Fd, Path, Fd, Path]),
        ("path_symlink", &[Path, Fd, Path]),
        ("path_link", &[Fd, I32, Path, Fd, Path]),
        ("path_filestat_get", &[Fd, I32, Path, Out]),
        ("path_filestat_set_times", &[Fd, I32, Path, I64, I64, I32]),
        ("path_readlink", &[Fd, Path, Out, I32, Out]),
        ("fd_write", &[Fd, Iovs, Out]),
        ("fd_read", &[Fd, Iovs, Out]),
        ("fd_pwrite", &[Fd, Iovs, I64, Out]),
        ("fd_seek", &[Fd, I64, I32, Out]),
        ("fd_readdir", &[Fd, Out, I32, I64, Out]),
        ("fd_filestat_set_size", &[Fd, I64]),
        ("fd_renumber", &[Fd, Fd]),
        ("fd_close", &[Fd]),
    ]
};

/// Runs one input (see the module documentation); panics if the kernel misbehaved.
pub fn run(data: &[u8]) {
    let Ok(wat) = program(&mut Unstructured::new(data)) else {
        return;
    };
    let dev = crate::small_disk(4096, 7);
    let config = crate::stepped(KernelConfig {
        cache_frames: 64,
        ..KernelConfig::default()
    });
    let kernel = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config).expect("boot");
    let outside = populate(&kernel);
    let program = Program::compile(wat.as_bytes(), ProgramLimits::default())
        .unwrap_or_else(|e| panic!("the target's own program was refused: {e}\n{wat}"));
    let setup = Setup {
        args: vec![b"fuzz".to_vec()],
        dirs: vec![Dir::parse("/jail::/")],
        ..Setup::default()
    };
    let stdio = vino_wasi::Stdio {
        stdin: Box::new(std::io::empty()),
        stdout: Box::new(std::io::sink()),
        stderr: Box::new(std::io::sink()),
        tty: [false; 3],
    };
    let user = Credentials::user(1000, 1000);
    program
        .run(&kernel, user, setup, stdio, &program.kill_switch())
        .expect("the program ran");
    assert!(kernel.processes().is_empty(), "a process outlived its program");
    assert_eq!(kernel.referenced_inodes(), 0, "a file stayed open");
    assert_eq!(
        populate_view(&kernel),
        outside,
        "something outside /jail changed\n{wat}"
    );
    kernel.shutdown().expect("unmount");
    let report = vino_fs::fsck(&*dev, false).expect("fsck");
    assert!(report.is_clean(), "the image after the program:\n{report}");
}

/// The program an input stands for, as Wasm text.
pub fn program(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    let mut imports = String::new();
    for (name, args) in CALLS {
        let params: String = args
            .iter()
            .flat_map(|a| match a {
                Arg::Path | Arg::Iovs => ["i32", "i32"].as_slice(),
                Arg::I64 => ["i64"].as_slice(),
                _ => ["i32"].as_slice(),
            })
            .map(|t| format!(" {t}"))
            .collect();
        let _ = writeln!(
            imports,
            r#"  (import "wasi_snapshot_preview1" "{name}" (func ${name} (param{params}) (result i32)))"#
        );
    }
    let mut data = String::new();
    let mut at = PATHS_AT;
    let mut spans = Vec::new();
    for p in PATHS {
        let _ = writeln!(data, r#"  (data (i32.const {at}) "{p}")"#);
        spans.push((at, p.len() as u32));
        at += p.len() as u32 + 1;
    }
    let mut body = String::new();
    let calls = u.int_in_range(1..=MAX_CALLS)?;
    for _ in 0..calls {
        let (name, args) = u.choose(CALLS)?;
        let mut operands = String::new();
        for a in *args {
            match a {
                Arg::Fd => {
                    let fd: u32 = if u.ratio(7, 8)? {
                        u.int_in_range(0..=8)?
                    } else {
                        u.arbitrary()?
                    };
                    let _ = write!(operands, " (i32.const {})", fd as i32);
                }
                Arg::Path => {
                    let (ptr, len) = if u.ratio(7, 8)? {
                        *u.choose(&spans)?
                    } else {
                        (u.arbitrary()?, u.int_in_range(0..=70_000)?)
                    };
                    let _ = write!(operands, " (i32.const {}) (i32.const {})", ptr as i32, len as i32);
                }
                Arg::Iovs => {
                    let (ptr, n) = if u.ratio(3, 4)? {
                        (IOVEC_AT, 1u32)
                    } else {
                        (u.arbitrary()?, u.int_in_range(0..=1100)?)
                    };
                    let _ = write!(operands, " (i32.const {}) (i32.const {})", ptr as i32, n as i32);
                }
                Arg::Out => {
                    let out: u32 = if u.ratio(3, 4)? { SCRATCH_AT } else { u.arbitrary()? };
                    let _ = write!(operands, " (i32.const {})", out as i32);
                }
                Arg::I32 => {
                    let v: i32 = if u.ratio(1, 2)? {
                        u.int_in_range(0..=64)?
                    } else {
                        u.arbitrary()?
                    };
                    let _ = write!(operands, " (i32.const {v})");
                }
                Arg::I64 => {
                    let v: i64 = if u.ratio(1, 2)? {
                        u.int_in_range(0..=70_000)?
                    } else {
                        u.arbitrary()?
                    };
                    let _ = write!(operands, " (i64.const {v})");
                }
            }
        }
        let _ = writeln!(body, "    (drop (call ${name}{operands}))");
    }
    Ok(format!(
        "(module\n{imports}  (memory (export \"memory\") 1)\n  (data (i32.const {IOVEC_AT}) \"\\00\\08\\00\\00\\40\\00\\00\\00\")\n{data}  (func (export \"_start\")\n{body}  ))\n"
    ))
}

/// Makes `/jail` (the user's, where the program works: a file, a directory, links out of it)
/// and, outside it, `/secret` and `/outside` (root's, readable and writable by everyone, so
/// only the confinement keeps the program off them). Returns what is outside, to compare.
fn populate(kernel: &Arc<Kernel>) -> Vec<(String, Vec<u8>)> {
    let root = kernel.spawn(Credentials::root());
    root.mkdir("/jail", 0o755).expect("mkdir");
    root.chown("/jail", Some(1000), Some(1000)).expect("chown");
    root.mkdir("/jail/sub", 0o777).expect("mkdir");
    root.mkdir("/outside", 0o777).expect("mkdir");
    for (path, text) in [("/jail/a", "in the jail"), ("/secret", "secret"), ("/outside/x", "x")] {
        let fd = root.open(path, OpenFlags::create()).expect("create");
        root.write(fd, text.as_bytes()).expect("write");
        root.close(fd).expect("close");
        root.chmod(path, 0o666).expect("chmod");
    }
    root.chmod("/", 0o777).expect("chmod");
    root.symlink("/secret", "/jail/abs").expect("symlink");
    root.symlink("../secret", "/jail/up").expect("symlink");
    kernel.exit(root.pid());
    populate_view(kernel)
}

/// Every name outside `/jail` with its content (a directory's: nothing), sorted.
fn populate_view(kernel: &Arc<Kernel>) -> Vec<(String, Vec<u8>)> {
    let root = kernel.spawn(Credentials::root());
    let mut seen = Vec::new();
    let mut dirs = vec!["/".to_string()];
    while let Some(dir) = dirs.pop() {
        let mut names: Vec<String> = root
            .readdir(&dir)
            .expect("readdir")
            .into_iter()
            .map(|e| String::from_utf8_lossy(&e.name).into_owned())
            .filter(|n| n != "." && n != "..")
            .collect();
        names.sort();
        for name in names {
            let path = format!("{}/{name}", dir.trim_end_matches('/'));
            if path == "/jail" {
                continue;
            }
            let st = root.lstat(&path).expect("lstat");
            let content = match st.kind {
                vino_kernel::FileType::Directory => {
                    dirs.push(path.clone());
                    Vec::new()
                }
                vino_kernel::FileType::Regular => {
                    let fd = root.open(&path, OpenFlags::read_only()).expect("open");
                    let mut buf = vec![0u8; st.size as usize];
                    let n = root.read(fd, &mut buf).expect("read");
                    root.close(fd).expect("close");
                    buf.truncate(n);
                    buf
                }
                _ => format!("{:?}", st.kind).into_bytes(),
            };
            seen.push((path, content));
        }
    }
    kernel.exit(root.pid());
    seen
}
