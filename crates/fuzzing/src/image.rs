//! The on-disk structures target: a small file system image, taken while it was mounted (so
//! its journal holds transactions to replay), with the input's patches written over its
//! metadata blocks (stream files' chunk maps among them). Then:
//!
//! - fsck without repair must report, never panic;
//! - a mount of the mutated image must succeed or refuse, never panic, and a walk of whatever
//!   it mounted (lookups, reads, a new file) must end in answers or errors;
//! - fsck with repair must leave an image that checks clean, mounts, takes a new file, and
//!   checks clean again after the unmount.

use std::sync::{Arc, OnceLock};
use vino_blockdev::{BLOCK_SIZE, BlockDevice, MemDevice};
use vino_fs::layout::ChunkMap;
use vino_fs::{ChunkEntry, FileType, MAX_CODED, fsck};
use vino_kernel::{Credentials, Kernel, KernelConfig, OpenFlags, Process};

/// Blocks of the image (4 MiB, two groups).
const DISK_BLOCKS: u64 = 1024;

/// Most bytes a walk reads of one file (a mutated size can be anything).
const READ_MAX: usize = 64 << 10;

/// Most directory entries a walk visits in all (a mutated tree can be wide or cyclic).
const VISIT_MAX: usize = 256;

/// The image every input starts from, and its blocks that are not all zeros (the ones a patch
/// lands on: superblocks, group descriptors, bitmaps, inodes, directories, chunk maps, the
/// journal).
struct Template {
    image: Vec<u8>,
    used: Vec<u64>,
    /// The stream files' inode numbers (a chunk map is sealed with its file's).
    stream_inodes: Vec<u64>,
}

fn template() -> &'static Template {
    static TEMPLATE: OnceLock<Template> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        // A chunk's nonce is on the disk: drawn from a seed, the template is the same every time.
        vino_stream::seed_nonces(Some(7));
        let template = make_template();
        vino_stream::seed_nonces(None);
        template
    })
}

fn make_template() -> Template {
    let dev = crate::small_disk(DISK_BLOCKS, 7);
    let kernel = Kernel::boot(dev.clone() as Arc<dyn BlockDevice>, &config()).expect("boot");
    let p = kernel.spawn(Credentials::root());
    let write = |path: &str, len: usize| {
        let fd = p.open(path, OpenFlags::create()).expect("create");
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        p.pwrite(fd, &bytes, 0).expect("write");
        p.fsync(fd).expect("fsync");
        p.close(fd).expect("close");
    };
    p.mkdir("/d", 0o755).expect("mkdir");
    p.mkdir("/d/e", 0o700).expect("mkdir");
    write("/small", 100);
    write("/d/big", 200_000);
    write("/d/e/f", 5000);
    p.symlink_at("/d/big", vino_kernel::At::Root, "/link").expect("symlink");
    // Stream files (three chunks, the last partial; part of one), made in a directory bound
    // to a codec: their chunk maps are blocks a patch lands on.
    p.mkdir("/z", 0o755).expect("mkdir");
    p.stream_bind("/z", Some(&vino_sim::grafts::stream_codec()))
        .expect("bind");
    write("/z/s", 150_000);
    write("/z/t", 3000);
    kernel.sync().expect("sync");
    // After the checkpoint, more transactions that only the journal holds.
    write("/late", 9000);
    p.rename("/small", "/d/small").expect("rename");
    p.unlink("/d/e/f").expect("unlink");
    // A chunk rewritten out of place: its new map only in the journal.
    let fd = p.open("/z/s", OpenFlags::read_write()).expect("open");
    p.pwrite(fd, b"rewritten", 70_000).expect("write");
    p.fsync(fd).expect("fsync");
    p.close(fd).expect("close");
    let stream_inodes = ["/z/s", "/z/t"].map(|f| p.stat(f).expect("stat").ino).to_vec();
    let fd = p.open("/late", OpenFlags::read_write()).expect("open");
    p.fsync(fd).expect("fsync");
    p.close(fd).expect("close");
    let image = dev.durable_image();
    kernel.exit(p.pid());
    let used = image
        .chunks(BLOCK_SIZE)
        .enumerate()
        .filter(|(_, b)| b.iter().any(|&x| x != 0))
        .map(|(i, _)| i as u64)
        .collect();
    Template {
        image,
        used,
        stream_inodes,
    }
}

/// Inputs that rewrite one entry of a chunk map (every copy the template holds: its home and
/// the journal's) into what a corrupted disk could hold, sealed again so that the checks past
/// the checksum see it: lengths out of range, unknown flags, a raw chunk of two lengths, block
/// pointers that are zero, out of the device, into the metadata or shared by two chunks, and
/// a map that says it is another.
pub fn chunk_map_inputs() -> Vec<Vec<u8>> {
    let t = template();
    let mut inputs = Vec::new();
    // A patch names its block by one byte.
    for (used_at, &block) in t.used.iter().enumerate().take(256) {
        let at = block as usize * BLOCK_SIZE;
        let bytes = &t.image[at..at + BLOCK_SIZE];
        let Some((ino, map)) = t
            .stream_inodes
            .iter()
            .find_map(|&ino| ChunkMap::decode(bytes, ino, 0).ok().map(|m| (ino, m)))
        else {
            continue;
        };
        for (index, broken) in broken_maps(&map) {
            let mut sealed = vec![0u8; BLOCK_SIZE];
            broken.encode(&mut sealed, ino, index);
            // A hole's entry stays a hole whatever its lengths.
            if sealed != bytes {
                inputs.push(patches(used_at, bytes, &sealed));
            }
        }
    }
    inputs
}

/// `map` broken in each way [`chunk_map_inputs`] names, with the map index each is sealed as.
fn broken_maps(map: &ChunkMap) -> Vec<(u64, ChunkMap)> {
    let first = &map.entries[0];
    let with = |f: &dyn Fn(&mut ChunkEntry)| {
        let mut m = map.clone();
        f(&mut m.entries[0]);
        (0, m)
    };
    vec![
        with(&|e| e.coded_len = MAX_CODED as u32 + 1),
        with(&|e| e.coded_len = 1),
        with(&|e| e.plain_len = 0),
        with(&|e| e.plain_len = e.valid_len / 2),
        with(&|e| e.valid_len = e.plain_len + 1),
        with(&|e| e.flags = 0x80),
        with(&|e| {
            e.flags = vino_fs::layout::CHUNK_RAW;
            e.coded_len -= 1;
        }),
        with(&|e| e.blocks[0] = 0),
        with(&|e| e.blocks[0] = 1),
        with(&|e| e.blocks[0] = DISK_BLOCKS + 5),
        with(&|e| {
            e.blocks.pop();
        }),
        with(&|e| *e = ChunkEntry::default()),
        with(&|e| e.nonce[0] ^= 1),
        {
            let mut m = map.clone();
            m.entries[1].blocks = first.blocks.clone();
            (0, m)
        },
        (1, map.clone()),
    ]
}

/// Patches (see [`mutate`]) turning `old`, used block number `used_at`, into `new`: one per run
/// of differing bytes, at most 255 bytes each.
fn patches(used_at: usize, old: &[u8], new: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < old.len() {
        if old[i] == new[i] {
            i += 1;
            continue;
        }
        let end = (i..old.len().min(i + 255))
            .rfind(|&j| old[j] != new[j])
            .expect("a difference at i")
            + 1;
        out.push(used_at as u8);
        out.extend_from_slice(&(i as u16).to_le_bytes());
        out.push((end - i) as u8);
        out.extend_from_slice(&new[i..end]);
        i = end;
    }
    out
}

fn config() -> KernelConfig {
    crate::stepped(KernelConfig {
        cache_frames: 32,
        ..KernelConfig::default()
    })
}

/// The template with the input's patches: each is a block (an index into the used blocks), a
/// little-endian offset in it, a length and that many bytes.
pub fn mutate(data: &[u8]) -> Vec<u8> {
    let t = template();
    let mut image = t.image.clone();
    let mut rest = data;
    while rest.len() >= 4 {
        let block = t.used[rest[0] as usize % t.used.len()];
        let offset = u16::from_le_bytes([rest[1], rest[2]]) as usize % BLOCK_SIZE;
        let len = (rest[3] as usize).min(rest.len() - 4).min(BLOCK_SIZE - offset);
        let at = block as usize * BLOCK_SIZE + offset;
        image[at..at + len].copy_from_slice(&rest[4..4 + len]);
        rest = &rest[4 + len..];
    }
    image
}

/// Runs one input (see the module documentation); panics if something misbehaved.
pub fn run(data: &[u8]) {
    let image = mutate(data);
    let disk = || Arc::new(MemDevice::from_image(image.clone()).expect("an image of whole blocks"));

    let _ = fsck(&*disk(), false);

    let mounted = disk();
    if let Ok(kernel) = Kernel::boot(mounted.clone() as Arc<dyn BlockDevice>, &config()) {
        exercise(&kernel);
        let _ = kernel.shutdown();
    }

    let repaired = disk();
    if fsck(&*repaired, true).is_err() {
        // No superblock to go by, or another format: refused, not repaired.
        return;
    }
    let again = fsck(&*repaired, false).expect("fsck after a repair");
    assert!(again.is_clean(), "a repaired image does not check clean:\n{again}");
    let kernel = Kernel::boot(repaired.clone() as Arc<dyn BlockDevice>, &config())
        .unwrap_or_else(|e| panic!("a repaired image does not mount: {e}"));
    let created = exercise(&kernel);
    kernel.shutdown().expect("unmount the repaired image");
    let after = fsck(&*repaired, false).expect("fsck after using the repaired image");
    assert!(
        after.is_clean(),
        "the repaired image after use (created: {created}):\n{after}"
    );
}

/// Walks the tree (bounded), reads what it finds, and makes a file; true if the file was made.
fn exercise(kernel: &Arc<Kernel>) -> bool {
    let p = kernel.spawn(Credentials::root());
    let mut visited = 0;
    walk(&p, "/".to_string(), 0, &mut visited);
    let made = (|| {
        let fd = p.open("/fuzz-new", OpenFlags::create())?;
        p.pwrite(fd, &[7u8; 3000], 0)?;
        p.fsync(fd)?;
        p.close(fd)
    })()
    .is_ok();
    let _ = kernel.sync();
    kernel.exit(p.pid());
    made
}

fn walk(p: &Process, dir: String, depth: usize, visited: &mut usize) {
    let Ok(entries) = p.readdir(&dir) else { return };
    for e in entries {
        if *visited >= VISIT_MAX || depth > 8 {
            return;
        }
        *visited += 1;
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let path = format!("{}/{}", dir.trim_end_matches('/'), e.name_lossy());
        let _ = p.lstat(&path);
        match e.kind {
            FileType::Directory => walk(p, path, depth + 1, visited),
            FileType::Regular => read_some(p, &path),
            _ => {}
        }
    }
}

fn read_some(p: &Process, path: &str) {
    let Ok(fd) = p.open(path, OpenFlags::read_only()) else {
        return;
    };
    let mut buf = vec![0u8; 8192];
    let mut at = 0;
    while at < READ_MAX {
        match p.pread(fd, &mut buf, at as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => at += n,
        }
    }
    let _ = p.close(fd);
}
