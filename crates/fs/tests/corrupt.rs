//! Damaged images: mount refuses them with a clear error or serves what is readable, nothing
//! panics, fsck finds the damage, and after fsck repairs it the image is clean and mounts.

mod common;
use common::*;
use std::sync::Arc;
use vino_blockdev::rng::SplitMix64;
use vino_blockdev::{BlockDevice, MemDevice};
use vino_fs::fsck::ProblemKind;
use vino_fs::layout::Geometry;
use vino_fs::*;

const BS: usize = 4096;

struct Sample {
    image: Vec<u8>,
    geo: Geometry,
    /// Metadata blocks by class.
    dirs: Vec<u64>,
    indirect: u64,
}

fn populated() -> Sample {
    let dev = fresh(4096, &small_opts(1024));
    let fs = mount(&dev);
    let who = NewFile::by(3);
    let a = fs.mkdir(fs.root(), "a", &who).unwrap();
    let b = fs.mkdir(a, "b", &who).unwrap();
    for i in 0..60 {
        let f = fs
            .create(if i % 2 == 0 { a } else { b }, format!("small-{i}"), &who)
            .unwrap();
        fs.write_at(f, 0, &pattern(i, 100 + i as usize * 37)).unwrap();
    }
    let big = fs.create(fs.root(), "big", &who).unwrap();
    fs.write_at(big, 0, &pattern(99, 40 * BS)).unwrap();
    let indirect = fs.block_map(big).unwrap()[12] - 1;
    let mut dirs = Vec::new();
    for d in [fs.root(), a, b] {
        dirs.extend(fs.block_map(d).unwrap());
    }
    let geo = fs.geometry().clone();
    fs.unmount().unwrap();
    assert_clean(&*dev, "sample");
    Sample {
        image: dev.image(),
        geo,
        dirs,
        indirect,
    }
}

/// Everything a user could do with a mounted image, none of which may panic. Returns how many
/// operations failed.
fn exercise(fs: &FileSystem) -> usize {
    let mut failures = 0;
    walk(fs, fs.root(), 0, &mut failures);
    let who = NewFile::by(1);
    let r = (|| -> Result<(), FsError> {
        let f = fs.create(fs.root(), "new", &who)?;
        fs.write_at(f, 0, &pattern(1, 70_000))?;
        fs.truncate(f, 10)?;
        Ok(())
    })();
    failures += usize::from(r.is_err());
    // These names may be gone after a repair (moved to lost+found): only other errors count.
    let gone = |r: Result<(), FsError>| r.is_err_and(|e| e.kind() != FsErrorKind::NotFound);
    failures += usize::from(gone(fs.rename_path("/a", "/renamed")));
    failures += usize::from(gone(fs.unlink(fs.root(), "big")));
    failures += usize::from(fs.sync().is_err());
    failures
}

fn walk(fs: &FileSystem, dir: u64, depth: usize, failures: &mut usize) {
    if depth > 8 {
        return;
    }
    let Ok(entries) = fs.readdir(dir) else {
        *failures += 1;
        return;
    };
    for e in entries {
        match fs.stat(e.ino) {
            Err(_) => *failures += 1,
            Ok(st) if st.kind == FileType::Directory => walk(fs, e.ino, depth + 1, failures),
            Ok(st) => {
                let mut buf = vec![0u8; st.size.min(1 << 20) as usize];
                if fs.read_at(e.ino, 0, &mut buf).is_err() {
                    *failures += 1;
                }
            }
        }
    }
}

/// Mounts (maybe), exercises, checks, repairs, checks again. Returns the first fsck report.
fn ordeal(image: Vec<u8>, context: &str) -> Option<FsckReport> {
    let dev = Arc::new(MemDevice::from_image(image.clone()).unwrap());
    let d: Arc<dyn BlockDevice> = dev.clone();
    if let Ok(fs) = FileSystem::mount(d, runtime(), &MountOptions::default()) {
        exercise(&fs);
    }
    let dev = Arc::new(MemDevice::from_image(image).unwrap());
    let report = match fsck(&*dev, false) {
        Ok(r) => r,
        Err(e) => {
            assert_eq!(e.kind(), FsErrorKind::Corrupt, "{context}: {e}");
            return None;
        }
    };
    let repaired = fsck(&*dev, true).unwrap();
    assert_eq!(
        repaired.problems.len(),
        report.problems.len(),
        "{context}: a check and a repair see the same"
    );
    let again = fsck(&*dev, false).unwrap();
    assert!(
        again.is_clean(),
        "{context}: still damaged after repair:\n{again}\nfirst:\n{report}"
    );
    let fs = mount(&dev);
    assert_eq!(exercise(&fs), 0, "{context}: after repair everything works");
    drop(fs);
    Some(report)
}

fn flip(image: &mut [u8], block: u64, rng: &mut SplitMix64, bytes: usize) {
    for _ in 0..bytes {
        let at = block as usize * BS + rng.below(BS as u64) as usize;
        image[at] ^= 1 + rng.below(255) as u8;
    }
}

#[test]
fn superblock_damage() {
    let s = populated();
    let mut img = s.image.clone();
    img[100] ^= 0xff;
    let r = ordeal(img.clone(), "primary superblock").unwrap();
    assert_eq!(r.count(ProblemKind::Superblock), 1, "{r}");
    let dev = Arc::new(MemDevice::from_image(img.clone()).unwrap());
    let d: Arc<dyn BlockDevice> = dev.clone();
    assert!(
        FileSystem::mount(d, runtime(), &MountOptions::default()).is_ok(),
        "the backup serves"
    );
    img[BS + 100] ^= 0xff;
    let dev = Arc::new(MemDevice::from_image(img.clone()).unwrap());
    let d: Arc<dyn BlockDevice> = dev.clone();
    let e = FileSystem::mount(d, runtime(), &MountOptions::default())
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.kind(), FsErrorKind::Corrupt);
    assert!(e.to_string().contains("no valid superblock"), "{e}");
    assert!(ordeal(img, "both superblocks").is_none());
}

#[test]
fn group_header_damage_is_refused_at_mount_and_repaired() {
    let s = populated();
    let mut img = s.image.clone();
    img[s.geo.header(2) as usize * BS + 9] ^= 0x10;
    let dev = Arc::new(MemDevice::from_image(img.clone()).unwrap());
    let d: Arc<dyn BlockDevice> = dev.clone();
    let e = FileSystem::mount(d, runtime(), &MountOptions::default())
        .map(|_| ())
        .unwrap_err();
    assert!(e.to_string().contains("group 2"), "{e}");
    let r = ordeal(img, "group header").unwrap();
    assert_eq!(r.count(ProblemKind::GroupHeader), 1, "{r}");
}

#[test]
fn root_inode_damage() {
    let s = populated();
    let mut img = s.image.clone();
    let (b, off) = s.geo.inode_location(ROOT_INO);
    img[b as usize * BS + off + 20] ^= 0x01;
    let dev = Arc::new(MemDevice::from_image(img.clone()).unwrap());
    let d: Arc<dyn BlockDevice> = dev.clone();
    let e = FileSystem::mount(d, runtime(), &MountOptions::default())
        .map(|_| ())
        .unwrap_err();
    assert!(e.to_string().contains("inode 1"), "{e}");
    let r = ordeal(img.clone(), "root inode").unwrap();
    assert!(
        r.count(ProblemKind::Orphan) >= 3,
        "a, big and lost+found come back through lost+found: {r}"
    );
    // The repaired tree still has every file, under lost+found.
    let dev = Arc::new(MemDevice::from_image(img).unwrap());
    fsck(&*dev, true).unwrap();
    let fs = mount(&dev);
    let lf = fs.readdir_path("/lost+found").unwrap();
    assert!(
        lf.iter()
            .any(|e| e.kind == FileType::Directory && fs.lookup(e.ino, "b").is_ok()),
        "{lf:?}"
    );
}

#[test]
fn every_kind_of_metadata_damage_is_found_and_repaired() {
    let s = populated();
    let g = &s.geo;
    let mut classes: Vec<(&str, Vec<u64>)> = vec![
        ("group header", (0..g.groups).map(|i| g.header(i)).collect()),
        ("inode bitmap", (0..g.groups).map(|i| g.inode_bitmap(i)).collect()),
        ("block bitmap", (0..g.groups).map(|i| g.block_bitmap(i)).collect()),
        (
            "inode table",
            (0..g.groups)
                .flat_map(|i| (0..4).map(move |k| g.itable(i) + k))
                .collect(),
        ),
        ("directory", s.dirs.clone()),
        ("indirect", vec![s.indirect]),
    ];
    classes.push(("superblock", vec![0]));
    let mut rng = SplitMix64::new(2024);
    for round in 0..120 {
        let (class, blocks) = &classes[round % classes.len()];
        let block = blocks[rng.below(blocks.len() as u64) as usize];
        let mut img = s.image.clone();
        let n = 1 + rng.below(6) as usize;
        flip(&mut img, block, &mut rng, n);
        let context = format!("round {round}: {class} block {block}");
        let r = ordeal(img, &context).unwrap_or_else(|| panic!("{context}: fsck gave up"));
        assert!(!r.is_clean(), "{context}: damage not found");
    }
}

#[test]
fn garbage_anywhere_never_panics() {
    let s = populated();
    let mut rng = SplitMix64::new(77);
    for round in 0..60 {
        let mut img = s.image.clone();
        for _ in 0..1 + rng.below(12) {
            let block = rng.below(s.geo.block_count);
            if rng.chance(0.3) {
                let at = block as usize * BS;
                for b in &mut img[at..at + BS] {
                    *b = rng.next_u64() as u8;
                }
            } else {
                let n = 1 + rng.below(30) as usize;
                flip(&mut img, block, &mut rng, n);
            }
        }
        ordeal(img, &format!("garbage round {round}"));
    }
}

#[test]
fn a_damaged_journal_header_is_refused_and_reset() {
    let s = populated();
    let mut img = s.image.clone();
    for slot in [2usize, 3] {
        img[slot * BS + 40] ^= 0x55;
    }
    let dev = Arc::new(MemDevice::from_image(img.clone()).unwrap());
    let d: Arc<dyn BlockDevice> = dev.clone();
    let e = FileSystem::mount(d, runtime(), &MountOptions::default())
        .map(|_| ())
        .unwrap_err();
    assert!(e.to_string().contains("journal header"), "{e}");
    let r = ordeal(img, "journal header").unwrap();
    assert_eq!(r.count(ProblemKind::Journal), 1, "{r}");
}
