//! What a cached read costs through the mount, against the same read as a system call in
//! process: the file is in VINO's cache, so the difference is FUSE's round trip (two context
//! switches and copies through `/dev/fuse`) and the request's dispatch.

use crate::{MountConfig, mount};
use serde::Serialize;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use vino_kernel::{Credentials, Fd, Kernel, OpenFlags, Process, SysError};

/// The file read: small enough for the kernel's default cache (4 MB) to hold it whole.
pub const FILE_BYTES: usize = 1 << 20;
/// Read sizes measured.
pub const READ_SIZES: [usize; 2] = [4096, 65536];
const NAME: &str = "vino-fuse-bench";

/// One measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReadCost {
    /// `"fuse"` (pread on the mount) or `"in-process"` (`Process::pread`).
    pub path: &'static str,
    /// Bytes per read.
    pub size: usize,
    pub ns_per_read: f64,
}

/// Every measurement of [`cached_reads`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CachedReads {
    pub file_bytes: usize,
    pub reads: usize,
    pub costs: Vec<ReadCost>,
}

fn sys(e: SysError) -> io::Error {
    io::Error::other(format!("{e} (errno {})", e.errno as i32))
}

/// Offset of the `i`-th read of `size` bytes: the reads walk the file round and round.
fn offset(i: usize, size: usize) -> u64 {
    ((i * size) % FILE_BYTES) as u64
}

fn time_reads(reads: usize, size: usize, mut read: impl FnMut(&mut [u8], u64) -> io::Result<usize>) -> io::Result<f64> {
    let mut buf = vec![0u8; size];
    let start = Instant::now();
    for i in 0..reads {
        let n = read(&mut buf, offset(i, size))?;
        assert_eq!(n, size, "a cached read came back short");
    }
    Ok(start.elapsed().as_nanos() as f64 / reads.max(1) as f64)
}

/// Writes the file and reads it once, so every later read hits VINO's cache.
fn prepare(p: &Process) -> io::Result<Fd> {
    let fd = p.open(&format!("/{NAME}"), OpenFlags::create()).map_err(sys)?;
    let data: Vec<u8> = (0..FILE_BYTES).map(|i| (i % 251) as u8).collect();
    p.pwrite(fd, &data, 0).map_err(sys)?;
    let mut back = vec![0u8; FILE_BYTES];
    p.pread(fd, &mut back, 0).map_err(sys)?;
    assert!(back == data, "the benchmark file did not read back as written");
    Ok(fd)
}

/// Measures `reads` cached reads of each size in [`READ_SIZES`], through a mount of `kernel`
/// made on `mountpoint` (an empty directory) and in process. Needs root and `/dev/fuse`.
pub fn cached_reads(kernel: Arc<Kernel>, mountpoint: &Path, reads: usize) -> io::Result<CachedReads> {
    let p = kernel.spawn(Credentials::root());
    let fd = prepare(&p)?;
    let mut costs = Vec::new();
    for size in READ_SIZES {
        let ns = time_reads(reads, size, |buf, at| p.pread(fd, buf, at).map_err(sys))?;
        costs.push(ReadCost {
            path: "in-process",
            size,
            ns_per_read: ns,
        });
    }
    let mounted = mount(kernel.clone(), mountpoint, &MountConfig::default())?;
    let through_fuse = (|| {
        let file = File::open(mountpoint.join(NAME))?;
        time_reads(FILE_BYTES / READ_SIZES[1], READ_SIZES[1], |buf, at| {
            file.read_at(buf, at)
        })?;
        READ_SIZES
            .iter()
            .map(|&size| time_reads(reads, size, |buf, at| file.read_at(buf, at)))
            .collect::<io::Result<Vec<f64>>>()
    })();
    mounted.unmount()?;
    for (size, ns) in READ_SIZES.into_iter().zip(through_fuse?) {
        costs.push(ReadCost {
            path: "fuse",
            size,
            ns_per_read: ns,
        });
    }
    p.close(fd).map_err(sys)?;
    p.unlink(&format!("/{NAME}")).map_err(sys)?;
    kernel.exit(p.pid());
    Ok(CachedReads {
        file_bytes: FILE_BYTES,
        reads,
        costs,
    })
}
