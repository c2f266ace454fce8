//! Real programs that run as VINO processes (`vino run`), built for wasm32-wasi.
//!
//! From sources that crates ship: SQLite's amalgamation from `libsqlite3-sys` under a small
//! shell (`sdk/programs/sqlite3.c`), zlib from `libz-sys` under gzip/gunzip
//! (`sdk/programs/gzip.c`), and bzip2 1.0.8, the program itself, from `bzip2-sys`. The crates
//! are this crate's dependencies for the wasi target only, so `cargo fetch` puts their sources
//! in cargo's registry and nothing builds them for the host.
//!
//! From Debian bookworm's source packages, as their authors wrote them: lz4 1.9.4, zstd 1.5.4
//! and zlib 1.2.13's minigzip, fetched by `apt-get source` into [`sources_dir`] on first use.
//! Each builds with `vino build` flags only (the definitions its own Makefile or configure
//! would pass); none has a line of ours beyond the SDK's compatibility layer.

use crate::cc::build_program;
use crate::clang::{BuildError, BuildOptions, find_toolchain, io};
use std::path::{Path, PathBuf};

/// The programs [`build_named`] builds.
pub const PROGRAMS: &[&str] = &["sqlite3", "gzip", "bzip2", "lz4", "zstd", "minigzip"];

/// Debian bookworm's source packages of the programs built from them: program, source package,
/// and the directory `apt-get source` extracts it to (its upstream version).
const DEBIAN: &[(&str, &str, &str)] = &[
    ("lz4", "lz4", "lz4-1.9.4"),
    ("zstd", "libzstd", "libzstd-1.5.4"),
    ("minigzip", "zlib", "zlib-1.2.13"),
];

/// lz4's library sources (`lib/`) and its command (`programs/`).
const LZ4_FILES: &[&str] = &[
    "lib/lz4.c",
    "lib/lz4hc.c",
    "lib/lz4frame.c",
    "lib/xxhash.c",
    "programs/bench.c",
    "programs/datagen.c",
    "programs/lz4cli.c",
    "programs/lz4io.c",
];

/// zstd's library directories (`lib/`, every `.c` in each) and its command's sources.
const ZSTD_LIB_DIRS: &[&str] = &["lib/common", "lib/compress", "lib/decompress", "lib/dictBuilder"];
const ZSTD_PROGRAM_FILES: &[&str] = &[
    "programs/benchfn.c",
    "programs/benchzstd.c",
    "programs/datagen.c",
    "programs/dibio.c",
    "programs/fileio.c",
    "programs/fileio_asyncio.c",
    "programs/timefn.c",
    "programs/util.c",
    "programs/zstdcli.c",
    "programs/zstdcli_trace.c",
];

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

/// wasi-libc's emulations SQLite's Unix layer needs besides the defaults (mmap, signals).
const WASI_EMULATIONS: &[&str] = &["mman", "signal"];

/// What a program is made of: its C sources, include directories and definitions, the same for
/// every target, and what only its wasm32-wasi build adds (a native build of the same program,
/// for comparison, uses the first three).
#[derive(Debug, Clone, Default)]
pub struct ProgramSources {
    pub sources: Vec<PathBuf>,
    pub include_dirs: Vec<PathBuf>,
    pub defines: Vec<(String, Option<String>)>,
    /// Sources only the wasm32-wasi build links (none today: the SDK's compatibility layer
    /// covers what wasi-libc lacks).
    pub wasi_sources: Vec<PathBuf>,
    /// wasi-libc's emulations the wasm32-wasi build needs besides `vino build`'s defaults
    /// (`signal`, `mman`): `--emulate`, which defines `_WASI_EMULATED_<NAME>` and links
    /// `-lwasi-emulated-<name>`.
    pub wasi_emulations: Vec<&'static str>,
}

/// What program `name` (one of [`PROGRAMS`]) is made of. For a program built from Debian's
/// sources, fetches them first if [`sources_dir`] lacks them.
pub fn sources(name: &str) -> Result<ProgramSources, BuildError> {
    if let Some(s) = debian_program(name)? {
        return Ok(s);
    }
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
            s.include_dirs.push(dir);
            s.wasi_emulations.push("signal");
        }
        other => return Err(BuildError::UnknownProgram(other.to_string())),
    }
    Ok(s)
}

/// Builds program `name` (one of [`PROGRAMS`]) into `output`, portable: the module imports
/// nothing of the kernel's, so the same module runs on stock WASI runtimes (`vino bench
/// native`). It loses nothing: these programs call chmod and chown only to copy a mode and owner
/// from WASI's stat, which has none.
pub fn build_named(name: &str, output: &Path, opts: &BuildOptions) -> Result<(), BuildError> {
    let s = sources(name)?;
    let mut opts = opts.clone();
    opts.portable = true;
    opts.include_dirs.extend(s.include_dirs);
    opts.defines.extend(s.defines);
    opts.emulate.extend(s.wasi_emulations.iter().map(|e| e.to_string()));
    let mut all = s.sources;
    all.extend(s.wasi_sources);
    build_program(&all, output, &opts)
}

/// What a program built from Debian's sources is made of: the flags are the ones its own build
/// passes (or its configure would find), given to `vino build` as `-D`/`-I`/`--emulate`.
fn debian_program(name: &str) -> Result<Option<ProgramSources>, BuildError> {
    let Some(&(_, package, dir_name)) = DEBIAN.iter().find(|(p, _, _)| *p == name) else {
        return Ok(None);
    };
    let root = debian_source(package, dir_name)?;
    let mut s = ProgramSources::default();
    match name {
        "lz4" => {
            s.sources = LZ4_FILES.iter().map(|f| root.join(f)).collect();
            s.include_dirs.push(root.join("lib"));
        }
        "zstd" => {
            for dir in ZSTD_LIB_DIRS {
                s.sources.extend(c_files(&root.join(dir))?);
            }
            s.sources.extend(ZSTD_PROGRAM_FILES.iter().map(|f| root.join(f)));
            s.include_dirs.extend([root.join("lib"), root.join("lib/common")]);
            // No x86 assembly (its Makefile's ZSTD_NO_ASM); a POSIX system, which zstd
            // guesses from __unix__, and clang does not define that for wasm32-wasi; no
            // setpriority (its benchmark's), which WASI lacks.
            for d in [
                "ZSTD_DISABLE_ASM",
                "PLATFORM_POSIX_VERSION=200809L",
                "ZSTD_SETPRIORITY_SUPPORT=0",
            ] {
                s.defines.push(define(d));
            }
            // It restores the terminal on Ctrl-C.
            s.wasi_emulations.push("signal");
        }
        "minigzip" => {
            s.sources = std::iter::once(root.join("test/minigzip.c"))
                .chain(ZLIB_FILES.iter().map(|f| root.join(f)))
                .collect();
            s.include_dirs.push(root.clone());
            // What zlib's configure writes into zconf.h on a system with <unistd.h>: without
            // it, gzlib.c calls lseek undeclared.
            s.defines.push(define("Z_HAVE_UNISTD_H"));
        }
        _ => unreachable!("every entry of DEBIAN is built"),
    }
    Ok(Some(s))
}

/// The `.c` files of `dir`, sorted.
fn c_files(dir: &Path) -> Result<Vec<PathBuf>, BuildError> {
    let entries = std::fs::read_dir(dir).map_err(io(format!("listing {}", dir.display())))?;
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .collect();
    files.sort();
    Ok(files)
}

/// Where Debian's sources are kept: `$VINO_SOURCES`, else `$XDG_CACHE_HOME/vino/sources`, else
/// `~/.cache/vino/sources`.
pub fn sources_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("VINO_SOURCES").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    cache_dir().join("sources")
}

/// `$XDG_CACHE_HOME/vino`, else `~/.cache/vino`.
fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    base.join("vino")
}

/// The extracted source package `package` (`<sources_dir>/<dir_name>*`), fetched with
/// `apt-get source` if missing: into a directory of its own first, so that two builds
/// fetching at once each see a whole tree or none.
fn debian_source(package: &str, dir_name: &str) -> Result<PathBuf, BuildError> {
    let base = sources_dir();
    if let Some(found) = find_extracted(&base, dir_name) {
        return Ok(found);
    }
    std::fs::create_dir_all(&base).map_err(io(format!("creating {}", base.display())))?;
    let tmp = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempdir_in(&base)
        .map_err(io(format!("creating a directory in {}", base.display())))?;
    let missing = |why: String| BuildError::SourcesMissing {
        what: format!("{package} (Debian bookworm)"),
        why,
    };
    let out = std::process::Command::new("apt-get")
        .args(["source", "--quiet", "--quiet", package])
        .current_dir(tmp.path())
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| missing(format!("running apt-get: {e}")))?;
    if !out.status.success() {
        return Err(missing(format!(
            "`apt-get source {package}` failed (scripts/setup.sh adds a deb-src line for bookworm and installs dpkg-dev):
{}",
            String::from_utf8_lossy(&out.stderr).trim_end()
        )));
    }
    let fetched = find_extracted(tmp.path(), dir_name)
        .ok_or_else(|| missing(format!("`apt-get source {package}` gave no {dir_name}* directory")))?;
    let target = base.join(fetched.file_name().expect("a directory's name"));
    // Another build may have put it there first; either tree is the same.
    if std::fs::rename(&fetched, &target).is_err() && !target.is_dir() {
        return Err(missing(format!("could not move the sources to {}", target.display())));
    }
    Ok(target)
}

/// The directory of `base` whose name starts with `dir_name`.
fn find_extracted(base: &Path, dir_name: &str) -> Option<PathBuf> {
    let entries = std::fs::read_dir(base).ok()?;
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(dir_name))
        })
        .collect();
    found.sort();
    found.pop()
}

/// Builds program `name` unless a build of the same sources with the same options and clang
/// is in the cache (`$XDG_CACHE_HOME/vino/built`, else `~/.cache/vino/built`); the module's
/// path either way. The key hashes every source, the headers beside them and under the include
/// directories, the SDK's own files, the options and clang's version. A cache directory or
/// module another user owns or may write is refused: it could hold a module of theirs.
pub fn build_named_cached(name: &str, opts: &BuildOptions) -> Result<PathBuf, BuildError> {
    let key = cache_key(name, opts)?;
    let dir = cache_dir().join("built");
    let path = dir.join(format!("{name}-{key:016x}.wasm"));
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let tmp = tempfile::Builder::new()
        .prefix(".build-")
        .suffix(".wasm")
        .tempfile_in(&dir)
        .map_err(io(format!("creating a file in {}", dir.display())))?;
    // The owner of a file just made is this user.
    let me = std::os::unix::fs::MetadataExt::uid(&tmp.as_file().metadata().map_err(io("reading a new file"))?);
    for p in [&dir, &path] {
        if let Ok(meta) = std::fs::symlink_metadata(p)
            && !private(&meta, me)
        {
            return Err(BuildError::Io {
                context: format!("using the build cache {}", p.display()),
                error: std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "another user owns it or may write it",
                ),
            });
        }
    }
    if path.is_file() {
        return Ok(path);
    }
    build_named(name, tmp.path(), opts)?;
    tmp.persist(&path)
        .map_err(|e| io(format!("writing {}", path.display()))(e.error))?;
    Ok(path)
}

/// Owned by `uid`, written by nobody else, and no symbolic link.
pub(crate) fn private(meta: &std::fs::Metadata, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    !meta.file_type().is_symlink() && meta.uid() == uid && meta.mode() & 0o022 == 0
}

fn cache_key(name: &str, opts: &BuildOptions) -> Result<u64, BuildError> {
    use std::hash::{Hash, Hasher};
    let s = sources(name)?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    format!("{opts:?}").hash(&mut h);
    format!("{s:?}").hash(&mut h);
    find_toolchain(opts)?.version.hash(&mut h);
    for text in [crate::PROCESS_HEADER, crate::PROCESS_START, crate::cc::COMPAT_SOURCE] {
        text.hash(&mut h);
    }
    crate::cc::COMPAT_HEADERS.hash(&mut h);
    let mut files: Vec<PathBuf> = s.sources.iter().chain(&s.wasi_sources).cloned().collect();
    let mut header_dirs: Vec<PathBuf> = s.include_dirs.clone();
    header_dirs.extend(s.sources.iter().filter_map(|p| p.parent().map(Path::to_owned)));
    header_dirs.sort();
    header_dirs.dedup();
    for dir in &header_dirs {
        headers_under(dir, &mut files, 3);
    }
    for f in &files {
        f.hash(&mut h);
        std::fs::read(f)
            .map_err(io(format!("reading {}", f.display())))?
            .hash(&mut h);
    }
    Ok(h.finish())
}

/// Adds the `.h` files under `dir` (to `depth` levels) to `files`.
fn headers_under(dir: &Path, files: &mut Vec<PathBuf>, depth: u32) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() && depth > 0 {
            headers_under(&p, files, depth - 1);
        } else if p.extension().is_some_and(|e| e == "h") {
            files.push(p);
        }
    }
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
