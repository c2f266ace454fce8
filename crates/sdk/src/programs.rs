//! Real programs that run as VINO processes (`vino run`), built for wasm32-wasi from sources
//! that crates ship: SQLite's amalgamation from `libsqlite3-sys` under a small shell
//! (`sdk/programs/sqlite3.c`), zlib from `libz-sys` under gzip/gunzip
//! (`sdk/programs/gzip.c`), and bzip2 1.0.8, the program itself, from `bzip2-sys` (with
//! `sdk/programs/wasi_compat.c` for the two calls wasi-libc lacks). The crates are this crate's dependencies for the wasi target only,
//! so `cargo fetch` puts their sources in cargo's registry and nothing builds them for the host.

use crate::clang::{BuildError, BuildOptions, build_program};
use std::path::{Path, PathBuf};

/// The programs [`build_named`] builds.
pub const PROGRAMS: &[&str] = &["sqlite3", "gzip", "bzip2"];

/// The crates whose sources the programs use, as pinned in this crate's Cargo.toml.
const SQLITE_CRATE: &str = "libsqlite3-sys-0.35.0";
const ZLIB_CRATE: &str = "libz-sys-1.1.31";
const BZIP2_CRATE: &str = "bzip2-sys-0.1.13+1.0.8";

/// bzip2's sources (`bzip2-1.0.8/` of bzip2-sys): the program and its library.
const BZIP2_FILES: &[&str] = &[
    "bzip2.c",
    "blocksort.c",
    "bzlib.c",
    "compress.c",
    "crctable.c",
    "decompress.c",
    "huffman.c",
    "randtable.c",
];

/// zlib's library sources (`src/zlib/` of libz-sys).
const ZLIB_FILES: &[&str] = &[
    "adler32.c",
    "compress.c",
    "crc32.c",
    "deflate.c",
    "gzclose.c",
    "gzlib.c",
    "gzread.c",
    "gzwrite.c",
    "infback.c",
    "inffast.c",
    "inflate.c",
    "inftrees.c",
    "trees.c",
    "uncompr.c",
    "zutil.c",
];

/// wasi-libc's emulations SQLite's Unix layer needs (mmap, getpid, signals, process clocks).
const WASI_EMULATIONS: &[&str] = &["mman", "getpid", "signal", "process-clocks"];

/// What a program is made of: its C sources, include directories and definitions, the same for
/// every target, and what only its wasm32-wasi build adds (a native build of the same program,
/// for comparison, uses the first three).
#[derive(Debug, Clone, Default)]
pub struct ProgramSources {
    pub sources: Vec<PathBuf>,
    pub include_dirs: Vec<PathBuf>,
    pub defines: Vec<(String, Option<String>)>,
    /// Sources only the wasm32-wasi build links: calls wasi-libc lacks.
    pub wasi_sources: Vec<PathBuf>,
    /// wasi-libc's emulations the wasm32-wasi build needs (`mman`, `getpid`...): each defines
    /// `_WASI_EMULATED_<NAME>` and links `-lwasi-emulated-<name>`.
    pub wasi_emulations: Vec<&'static str>,
}

/// What program `name` (one of [`PROGRAMS`]) is made of.
pub fn sources(name: &str) -> Result<ProgramSources, BuildError> {
    let program = crate::sdk_dir().join("programs").join(format!("{name}.c"));
    let mut s = ProgramSources {
        sources: vec![program],
        ..ProgramSources::default()
    };
    match name {
        "sqlite3" => {
            let dir = crate_source(SQLITE_CRATE)?.join("sqlite3");
            s.sources.push(dir.join("sqlite3.c"));
            s.include_dirs.push(dir);
            // One thread, no extensions, no WAL (its shared memory needs a real mmap), temporary
            // tables and sorts in memory (its Unix layer would fchmod a temporary file, which
            // WASI has not).
            for d in [
                "SQLITE_THREADSAFE=0",
                "SQLITE_OMIT_LOAD_EXTENSION",
                "SQLITE_OMIT_WAL",
                "SQLITE_TEMP_STORE=3",
                "LONGDOUBLE_TYPE=double",
            ] {
                s.defines.push(define(d));
            }
            s.wasi_emulations.extend(WASI_EMULATIONS);
        }
        "gzip" => {
            let dir = crate_source(ZLIB_CRATE)?.join("src/zlib");
            s.sources.extend(ZLIB_FILES.iter().map(|f| dir.join(f)));
            s.include_dirs.push(dir);
            s.defines.push(define("Z_HAVE_UNISTD_H"));
        }
        "bzip2" => {
            // The program is bzip2's own: no front end of ours, only the compatibility calls.
            let dir = crate_source(BZIP2_CRATE)?.join("bzip2-1.0.8");
            s.sources = BZIP2_FILES.iter().map(|f| dir.join(f)).collect();
            s.wasi_sources.push(crate::sdk_dir().join("programs/wasi_compat.c"));
            s.include_dirs.push(dir);
            s.wasi_emulations.extend(["signal", "process-clocks"]);
        }
        other => return Err(BuildError::UnknownProgram(other.to_string())),
    }
    Ok(s)
}

/// Builds program `name` (one of [`PROGRAMS`]) into `output`.
pub fn build_named(name: &str, output: &Path, opts: &BuildOptions) -> Result<(), BuildError> {
    let s = sources(name)?;
    let mut opts = opts.clone();
    opts.include_dirs.extend(s.include_dirs);
    opts.defines.extend(s.defines);
    for e in &s.wasi_emulations {
        opts.defines.push(emulation_define(e));
        opts.extra_args.push(format!("-lwasi-emulated-{e}").into());
    }
    let mut all = s.sources;
    all.extend(s.wasi_sources);
    build_program(&all, output, &opts)
}

/// `_WASI_EMULATED_<NAME>` for wasi-libc's emulation `name` (`process-clocks`...).
fn emulation_define(name: &str) -> (String, Option<String>) {
    (
        format!("_WASI_EMULATED_{}", name.replace('-', "_").to_uppercase()),
        None,
    )
}

fn define(d: &str) -> (String, Option<String>) {
    match d.split_once('=') {
        Some((n, v)) => (n.to_string(), Some(v.to_string())),
        None => (d.to_string(), None),
    }
}

/// `$CARGO_HOME/registry/src/<index>/<crate>`, the first index that has it.
fn crate_source(krate: &str) -> Result<PathBuf, BuildError> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from(".cargo"));
    let registry = home.join("registry/src");
    let found = std::fs::read_dir(&registry)
        .ok()
        .and_then(|indexes| indexes.flatten().map(|i| i.path().join(krate)).find(|p| p.is_dir()));
    found.ok_or_else(|| BuildError::SourcesNotFound {
        what: krate.to_string(),
        looked: registry.join("*").join(krate).display().to_string(),
    })
}
