//! `exec.verify`'s digest rate (Small 1998, 4.2's executable fingerprints): the SHA-256
//! allow-list graft (`sdk/grafts/sha256_allow.c`) verifying a real module through
//! `Process::exec_verify`, the way every program start does, against `sha256sum` (GNU coreutils)
//! on the same bytes, side by side in each round. The module alone (a few MB: the start of a
//! program pays this), then the module repeated to about 64 MiB (what a process start of
//! `sha256sum` costs falls away).

use anyhow::{Context, Result, ensure};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use vino_kernel::{Credentials, Kernel, KernelConfig};
use vino_measure::report::{ChartOptions, Table, bar_chart_with};

pub struct Options {
    pub quick: bool,
    /// The module (default: the SDK's `sqlite3` program, else its `copy` test program).
    pub module: Option<PathBuf>,
    pub scratch: PathBuf,
}

#[derive(Serialize)]
pub struct Row {
    /// `module` or `module x N`.
    pub input: String,
    pub bytes: u64,
    pub rounds: usize,
    /// exec.verify through the graft: MB/s at the median round, the slowest and the fastest.
    pub verify_mb_s: f64,
    pub verify_mb_s_min: f64,
    pub verify_mb_s_max: f64,
    /// sha256sum on a file of the same bytes (its process start included).
    pub sha256sum_mb_s: f64,
    pub sha256sum_mb_s_min: f64,
    pub sha256sum_mb_s_max: f64,
    /// sha256sum's median time over exec.verify's: below 1, exec.verify is slower.
    pub verify_vs_sha256sum: f64,
    /// The median of each round's ratio of the two times (exec.verify / sha256sum).
    pub time_ratio_median: f64,
}

#[derive(Serialize)]
pub struct Report {
    pub module: String,
    pub module_bytes: u64,
    pub sha256sum_version: String,
    pub rows: Vec<Row>,
}

fn boot() -> Result<Arc<Kernel>> {
    crate::mem_kernel(
        4096,
        &KernelConfig {
            cache_frames: 64,
            writeback_every: None,
            ..KernelConfig::default()
        },
    )
}

fn default_module() -> Result<PathBuf> {
    for name in ["sqlite3", "copy"] {
        if let Ok(p) = vino_sdk::programs::build_named_cached(name, &Default::default()) {
            return Ok(p);
        }
    }
    anyhow::bail!("no module to verify: pass --module FILE.wasm")
}

fn words(digest: &[u8; 32]) -> Vec<i64> {
    digest
        .chunks(8)
        .map(|w| i64::from_le_bytes(w.try_into().expect("8 bytes")))
        .collect()
}

fn sha256sum(path: &Path) -> Result<(String, f64)> {
    let started = Instant::now();
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .context("running sha256sum")?;
    let secs = started.elapsed().as_secs_f64();
    ensure!(out.status.success(), "sha256sum failed");
    Ok((String::from_utf8_lossy(&out.stdout)[..64].to_string(), secs))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub fn run(opts: &Options, progress: &mut dyn FnMut(&str)) -> Result<Report> {
    let module_path = match &opts.module {
        Some(p) => p.clone(),
        None => default_module()?,
    };
    let module = std::fs::read(&module_path).with_context(|| module_path.display().to_string())?;
    let repeat = (vino_kernel::exec_verify_max() / module.len()).max(1);
    let big: Vec<u8> = module.iter().copied().cycle().take(module.len() * repeat).collect();
    let kernel = boot()?;
    let root = kernel.spawn(Credentials::root());
    let user = kernel.spawn(Credentials::user(1000, 1000));
    let graft = vino_sdk::build_example("sha256_allow", &Default::default())?;
    root.graft_load("exec.verify", &graft)?;
    std::fs::create_dir_all(&opts.scratch)?;
    let dir = tempfile::tempdir_in(&opts.scratch)?;
    let rounds = if opts.quick { 3 } else { 11 };
    let mut rows = Vec::new();
    for (input, bytes) in [("module".to_string(), &module), (format!("module x {repeat}"), &big)] {
        progress(&format!("{input}: {} bytes, {rounds} rounds", bytes.len()));
        let file = dir.path().join("module.bin");
        std::fs::write(&file, bytes)?;
        // Listed, so that each verification takes the path a program that runs takes.
        use sha2::Digest;
        let digest: [u8; 32] = sha2::Sha256::digest(bytes).into();
        root.graft_call("exec.verify", "allow", &words(&digest))?;
        let (mut verify, mut sum, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        // One of each first, unmeasured: the file in the page cache, the graft's memory grown.
        user.exec_verify("bench", bytes)?;
        sha256sum(&file)?;
        for _ in 0..rounds {
            let started = Instant::now();
            let v = user.exec_verify("bench", bytes)?;
            let v_secs = started.elapsed().as_secs_f64();
            let (hex, s_secs) = sha256sum(&file)?;
            ensure!(
                vino_kernel::exec_hex(v.digest()) == hex,
                "the graft's digest is not sha256sum's"
            );
            verify.push(v_secs);
            sum.push(s_secs);
            ratio.push(v_secs / s_secs);
        }
        let mb = bytes.len() as f64 / 1e6;
        let rate = |v: &[f64]| {
            let mut v = v.to_vec();
            let m = median(&mut v);
            (mb / m, mb / v[v.len() - 1], mb / v[0], m)
        };
        let (v_med, v_min, v_max, v_t) = rate(&verify);
        let (s_med, s_min, s_max, s_t) = rate(&sum);
        rows.push(Row {
            input,
            bytes: bytes.len() as u64,
            rounds,
            verify_mb_s: v_med,
            verify_mb_s_min: v_min,
            verify_mb_s_max: v_max,
            sha256sum_mb_s: s_med,
            sha256sum_mb_s_min: s_min,
            sha256sum_mb_s_max: s_max,
            verify_vs_sha256sum: s_t / v_t,
            time_ratio_median: median(&mut ratio),
        });
    }
    kernel.exit(root.pid());
    kernel.exit(user.pid());
    kernel.shutdown()?;
    let version = std::process::Command::new("sha256sum")
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    Ok(Report {
        module: module_path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        module_bytes: module.len() as u64,
        sha256sum_version: version,
        rows,
    })
}

impl Report {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            format!(
                "exec.verify (sha256_allow.c, through Process::exec_verify) against {} on {} ({} bytes)",
                self.sha256sum_version, self.module, self.module_bytes
            ),
            &[
                "input",
                "bytes",
                "rounds",
                "exec.verify MB/s (min-max)",
                "sha256sum MB/s (min-max)",
                "exec.verify time / sha256sum",
            ],
        );
        for r in &self.rows {
            t.row([
                r.input.clone(),
                r.bytes.to_string(),
                r.rounds.to_string(),
                format!(
                    "{:.0} ({:.0}-{:.0})",
                    r.verify_mb_s, r.verify_mb_s_min, r.verify_mb_s_max
                ),
                format!(
                    "{:.0} ({:.0}-{:.0})",
                    r.sha256sum_mb_s, r.sha256sum_mb_s_min, r.sha256sum_mb_s_max
                ),
                format!("{:.2}x", r.time_ratio_median),
            ]);
        }
        vec![t]
    }

    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = self
            .rows
            .iter()
            .map(|r| {
                (
                    r.input.clone(),
                    vec![
                        ("exec.verify (Wasm)".to_string(), r.verify_mb_s),
                        ("sha256sum".to_string(), r.sha256sum_mb_s),
                    ],
                )
            })
            .collect();
        bar_chart_with(
            path,
            "exec.verify's SHA-256 allow-list graft against sha256sum",
            "MB/s (median)",
            &groups,
            &ChartOptions {
                value_labels: true,
                log_scale: Some(false),
                ..ChartOptions::default()
            },
        )
    }
}
