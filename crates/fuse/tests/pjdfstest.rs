//! pjdfstest, the POSIX file-system suite (its Rust port, `pjdfstest` 0.2.2, installed by
//! `scripts/setup.sh`), run as root against the mount. Every case must pass except those listed
//! in `pjdfstest-expected-failures.txt`, each with the reason a FUSE file system cannot pass it;
//! a listed case that passes fails the test too, so the list stays exact.
//!
//! `VINO_PJDFSTEST_WRITE_EXPECTED=1` rewrites the list from a run instead of judging it (the
//! reasons are then to be written again by hand). `VINO_PJDFSTEST_PRINT=1` prints the counts.

mod common;

use common::Mounted;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The users the suite switches to: Debian's `nobody`/`nogroup` and `daemon`.
const CONFIG: &str = r#"
[features]
posix_fallocate = {}
rename_ctime = {}
utime_now = {}
utimensat = {}

[settings]
# Longer than the mount's timestamp granularity (nanoseconds) and Linux's coarse clock ticks.
naptime = 0.01
# The EROFS cases remount with mount(8), which for a FUSE subtype runs a mount helper (here
# `vino`, which is not one): they stay skipped.
allow_remount = false

[dummy_auth]
entries = [
  ["nobody", "nogroup"],
  ["daemon", "daemon"],
]
"#;

/// The longest the suite may take (it takes seconds).
const LIMIT: Duration = Duration::from_secs(600);

fn expected_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pjdfstest-expected-failures.txt")
}

/// The case names of the list: one per line, `#` comments and blank lines ignored.
fn expected_failures() -> BTreeSet<String> {
    let text = std::fs::read_to_string(expected_path()).unwrap_or_default();
    text.lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

fn pjdfstest() -> PathBuf {
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|d| d.join("bin/pjdfstest"));
    match cargo_bin {
        Some(p) if p.exists() => p,
        _ => PathBuf::from("pjdfstest"),
    }
}

/// Each case's verdict: `ok`, `FAILED` or `skipped`.
fn parse(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let (name, verdict) = (words.next()?, words.next()?);
            (words.next().is_none() && name.contains("::") && matches!(verdict, "ok" | "FAILED" | "skipped"))
                .then(|| (name.to_string(), verdict.to_string()))
        })
        .collect()
}

#[test]
fn pjdfstest_passes_but_for_the_listed_cases() {
    let m = Mounted::new();
    let conf = m.dir.path().join("pjdfstest.toml");
    std::fs::write(&conf, CONFIG).unwrap();
    let secondary = m.host("secondary");
    let mut child = Command::new(pjdfstest())
        .arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(m.mnt())
        // The EXDEV cases need a second file system: the host's, beside the image.
        .arg("-s")
        .arg(&secondary)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pjdfstest 0.2.2 is installed by scripts/setup.sh (cargo install pjdfstest)");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("pjdfstest ran past {LIMIT:?} on the mount");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let cases = parse(&stdout);
    assert!(
        cases.len() > 300,
        "pjdfstest ran too few cases:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let failed: BTreeSet<String> = cases
        .iter()
        .filter(|(_, v)| v == "FAILED")
        .map(|(n, _)| n.clone())
        .collect();
    let count = |v: &str| cases.iter().filter(|(_, x)| x == v).count();
    let summary = format!(
        "pjdfstest on the mount: {} cases, {} passed, {} failed, {} skipped",
        cases.len(),
        count("ok"),
        failed.len(),
        count("skipped")
    );
    if std::env::var_os("VINO_PJDFSTEST_WRITE_EXPECTED").is_some() {
        let mut text =
            String::from("# pjdfstest cases a FUSE file system cannot pass (see the README for the reasons).\n");
        for name in &failed {
            text.push_str(name);
            text.push('\n');
        }
        std::fs::write(expected_path(), text).unwrap();
        eprintln!("{summary}; the list of expected failures is rewritten");
    } else {
        let expected = expected_failures();
        let unexpected: Vec<_> = failed.difference(&expected).collect();
        let fixed: Vec<_> = expected.difference(&failed).collect();
        assert!(
            unexpected.is_empty(),
            "{summary}; failed but not expected to: {unexpected:?}\n{stdout}"
        );
        assert!(
            fixed.is_empty(),
            "{summary}; listed as failing but passed or did not run (take them off the list): {fixed:?}"
        );
        if std::env::var_os("VINO_PJDFSTEST_PRINT").is_some() {
            eprintln!("{summary}, all {} failures expected\n{stdout}", failed.len());
        }
    }
    m.finish();
}
