//! `vino mkfs` and `vino fsck`.

use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use vino_blockdev::{BLOCK_SIZE, BlockDevice, FileDevice};
use vino_fs::{MkfsOptions, mkfs};

/// Parses a size such as `64M`, `2G`, `4096`.
pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .with_context(|| format!("`{text}` is not a size (e.g. 64M, 2G)"))?;
    let mult = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => bail!("`{text}`: unknown unit `{unit}` (K, M, G)"),
    };
    Ok(n * mult)
}

/// Makes a file system on `image`, creating the image file of `size` bytes if it does not exist.
pub fn run_mkfs(image: &Path, size: Option<u64>, blocks_per_group: Option<u32>, json: bool) -> Result<()> {
    let dev: Arc<dyn BlockDevice> = if image.exists() {
        Arc::new(FileDevice::open(image)?)
    } else {
        let Some(size) = size else {
            bail!("{} does not exist: give --size to create it", image.display())
        };
        Arc::new(FileDevice::create(
            image,
            size.div_ceil(BLOCK_SIZE as u64) * BLOCK_SIZE as u64,
        )?)
    };
    let mut opts = MkfsOptions::default();
    if let Some(b) = blocks_per_group {
        opts.blocks_per_group = b;
    }
    let report = mkfs(&*dev, &opts).with_context(|| format!("making a file system on {}", image.display()))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&MkfsJson::from(&report))?);
    }
    Ok(())
}

#[derive(Serialize)]
struct MkfsJson {
    block_count: u64,
    groups: u32,
    blocks_per_group: u32,
    inodes: u64,
    journal_blocks: u32,
    free_blocks: u64,
}

impl From<&vino_fs::MkfsReport> for MkfsJson {
    fn from(r: &vino_fs::MkfsReport) -> Self {
        MkfsJson {
            block_count: r.block_count,
            groups: r.groups,
            blocks_per_group: r.blocks_per_group,
            inodes: r.inodes,
            journal_blocks: r.journal_blocks,
            free_blocks: r.free_blocks,
        }
    }
}

/// fsck's exit status, as e2fsck: 0 clean, 1 problems repaired, 4 problems left, 8 could not check.
/// With `upgrade`, an image of an older format version is upgraded first. A check that changes
/// nothing opens the image read only.
pub fn run_fsck(image: &Path, repair: bool, upgrade: bool, json: bool) -> Result<i32> {
    let dev = FileDevice::open_with(
        image,
        vino_blockdev::FileOptions {
            read_only: !repair && !upgrade,
            ..Default::default()
        },
    )?;
    if upgrade {
        match vino_fs::upgrade(&dev) {
            Ok(v) if v < vino_fs::VERSION => {
                eprintln!(
                    "vino: fsck {}: upgraded from format version {v} to {}",
                    image.display(),
                    vino_fs::VERSION
                );
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("vino: fsck {}: {e}", image.display());
                return Ok(8);
            }
        }
    }
    let report = match vino_fs::fsck(&dev, repair) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vino: fsck {}: {e}", image.display());
            return Ok(8);
        }
    };
    let status = if report.is_clean() {
        0
    } else if report.problems.iter().all(|p| p.fixed) {
        1
    } else {
        4
    };
    if json {
        let problems: Vec<_> = report
            .problems
            .iter()
            .map(|p| serde_json::json!({"kind": format!("{:?}", p.kind), "detail": p.detail, "fixed": p.fixed}))
            .collect();
        let out = serde_json::json!({
            "clean": report.is_clean(), "status": status, "replayed": report.replayed,
            "was_mounted": report.was_mounted, "files": report.files, "directories": report.directories,
            "used_blocks": report.used_blocks, "free_blocks": report.free_blocks, "orphans": report.orphans,
            "problems": problems,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for p in &report.problems {
            let fixed = if p.fixed { " (fixed)" } else { "" };
            eprintln!("{}: {:?}: {}{fixed}", image.display(), p.kind, p.detail);
        }
    }
    Ok(status)
}
