//! The cached-read benchmark runs and reports every case (its numbers are not judged here).

use std::sync::Arc;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fuse::bench::{FILE_BYTES, READ_SIZES, cached_reads};
use vino_kernel::storage::{MkfsOptions, mkfs};
use vino_kernel::{Kernel, KernelConfig};

#[test]
fn cached_reads_measure_fuse_and_in_process_reads_of_each_size() {
    let dev = Arc::new(MemDevice::new(8192));
    mkfs(&*dev, &MkfsOptions::default()).unwrap();
    let kernel = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &KernelConfig::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = cached_reads(kernel.clone(), dir.path(), 1000).unwrap();
    assert_eq!((report.file_bytes, report.reads), (FILE_BYTES, 1000));
    for path in ["fuse", "in-process"] {
        for size in READ_SIZES {
            let cost = report.costs.iter().find(|c| c.path == path && c.size == size);
            assert!(
                cost.is_some_and(|c| c.ns_per_read > 0.0),
                "no {path} cost for {size} bytes: {report:?}"
            );
        }
    }
    let p = kernel.spawn(vino_kernel::Credentials::root());
    let left: Vec<String> = p.readdir("/").unwrap().iter().map(|e| e.name_lossy()).collect();
    assert_eq!(left, ["lost+found"], "the benchmark leaves no file behind");
    assert!(kernel.processes().len() == 1, "the benchmark ends its processes");
    kernel.exit(p.pid());
    kernel.shutdown().unwrap();
    let fsck = vino_kernel::storage::fsck(&*dev, false).unwrap();
    assert!(fsck.is_clean(), "{:?}", fsck.problems);
    if std::env::var_os("VINO_FUSE_BENCH_PRINT").is_some() {
        for c in &report.costs {
            eprintln!("{:>10} {:>6} B {:>10.0} ns/read", c.path, c.size, c.ns_per_read);
        }
    }
}
