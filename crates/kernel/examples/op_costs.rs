//! What the kernel's namespace system calls cost on their own (no FUSE, no daemon), against the
//! file system's operations beneath them: makes N files in one directory, then stats and
//! unlinks them, each both ways, and prints the mean time of each.
//!
//!     cargo run --release -p vino-kernel --example op_costs [N]
//!
//! (An example of `vino-kernel`, not of `vino-fs`: the file system's own examples build with its
//! test features, which check the journal writer after every operation.)
use std::sync::Arc;
use std::time::Instant;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::{MkfsOptions, NewFile, mkfs};
use vino_kernel::{Credentials, Kernel, KernelConfig, OpenFlags};

fn main() {
    let n: usize = std::env::args().nth(1).map_or(12_000, |s| s.parse().expect("a count"));
    let dev = Arc::new(MemDevice::new(1 << 20));
    mkfs(&*dev, &MkfsOptions::default()).expect("mkfs");
    let config = KernelConfig {
        cache_frames: 16_384,
        ..KernelConfig::default()
    };
    let k = Kernel::boot(dev as Arc<dyn BlockDevice>, &config).expect("boot");
    let p = k.spawn(Credentials::root());
    let fs = k.fs();
    let time = |what: &str, f: &mut dyn FnMut(usize)| {
        let start = Instant::now();
        for i in 0..n {
            f(i);
        }
        let per = start.elapsed().as_nanos() as f64 / n as f64 / 1e3;
        println!("{what:24} {per:6.2} us");
    };
    p.mkdir("/k", 0o755).expect("mkdir");
    let dir = fs.mkdir(fs.root(), "f", &NewFile::by(1)).expect("mkdir");
    let name = |i: usize| format!("file-number-{i:06}.h");
    time("kernel open(O_CREAT)+close", &mut |i| {
        let fd = p.open(&format!("/k/{}", name(i)), OpenFlags::create()).expect("create");
        p.close(fd).expect("close");
    });
    time("fs create", &mut |i| {
        fs.create(dir, name(i), &NewFile::by(1)).expect("create");
    });
    time("kernel stat", &mut |i| {
        p.stat(&format!("/k/{}", name(i))).expect("stat");
    });
    time("fs lookup+stat", &mut |i| {
        fs.stat(fs.lookup(dir, name(i)).expect("lookup")).expect("stat");
    });
    // What a readdirplus of the mount does for each entry: a batch listed, then each entry
    // looked up by name from the directory's inode.
    let k_dir = p.stat("/k").expect("stat").ino;
    let at = vino_kernel::At::Inode {
        ino: k_dir,
        generation: fs.stat(k_dir).expect("stat").generation,
    };
    let mut listed = Vec::new();
    time("kernel readdir (per entry)", &mut |i| {
        if i % 128 == 0 {
            let from = listed
                .last()
                .map_or(0, |(pos, _): &(u64, vino_kernel::DirEntry)| pos + 1);
            listed.extend(p.readdir_from_at(at, b"", from, 128).expect("readdir"));
        }
    });
    time("kernel stat_at (one name)", &mut |i| {
        p.stat_at(at, name(i), false).expect("stat");
    });
    time("kernel unlink", &mut |i| {
        p.unlink(&format!("/k/{}", name(i))).expect("unlink")
    });
    time("fs unlink", &mut |i| fs.unlink(dir, name(i)).expect("unlink"));
}
