//! Driving the system clang to build C grafts.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Environment variable naming the clang to use, before any on `PATH`.
pub const CLANG_ENV: &str = "VINO_CLANG";

/// Clang binaries tried, in order, after `$VINO_CLANG`.
const CANDIDATES: &[&str] = &[
    "clang", "clang-21", "clang-20", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14",
];

/// Optimisation level passed to clang.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OptLevel {
    O0,
    O1,
    #[default]
    O2,
    O3,
    Os,
    Oz,
}

impl OptLevel {
    /// Clang's option for it (`-O2`...).
    pub fn flag(self) -> &'static str {
        match self {
            OptLevel::O0 => "-O0",
            OptLevel::O1 => "-O1",
            OptLevel::O2 => "-O2",
            OptLevel::O3 => "-O3",
            OptLevel::Os => "-Os",
            OptLevel::Oz => "-Oz",
        }
    }
}

/// How to build a graft.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Default `-O2`.
    pub opt_level: OptLevel,
    /// Size of the shadow stack in linear memory (`-z stack-size`); default 64 KiB.
    pub stack_size: u32,
    /// Keep DWARF (`-g`, no `--strip-debug`). The `name` section (function names in traps) is
    /// kept either way.
    pub debug: bool,
    /// `-D` definitions: `("NAME", None)` or `("NAME", Some("value"))`.
    pub defines: Vec<(String, Option<String>)>,
    /// Further `-I` directories (the header's directory is always first).
    pub include_dirs: Vec<PathBuf>,
    /// Passed to clang verbatim, after the SDK's own flags (so they may override them).
    pub extra_args: Vec<OsString>,
    /// A clang to use instead of searching `$VINO_CLANG`, `clang`, `clang-N`.
    pub clang: Option<PathBuf>,
    /// Programs only: passed to the link alone (`-lz`, `-L dir`, `-Wl,...`).
    pub link_args: Vec<OsString>,
    /// Programs only: wasi-libc's emulations to link besides the defaults (`signal`, `mman`...).
    pub emulate: Vec<String>,
    /// Programs only: link the SDK's compatibility layer (`sdk/lib/vino_compat.c`); default on.
    pub compat: bool,
    /// Programs only: the compatibility layer without the kernel's calls, so the module runs
    /// on any WASI runtime (chmod and chown then succeed without effect); default off.
    pub portable: bool,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            opt_level: OptLevel::O2,
            stack_size: 64 * 1024,
            debug: false,
            defines: Vec::new(),
            include_dirs: Vec::new(),
            extra_args: Vec::new(),
            clang: None,
            link_args: Vec::new(),
            emulate: Vec::new(),
            compat: true,
            portable: false,
        }
    }
}

/// Why a graft did not build.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("no usable clang found (tried {tried}): install clang and lld, or set VINO_CLANG")]
    ClangNotFound { tried: String },
    #[error(
        "{} cannot link WebAssembly: wasm-ld not found; install clang and lld (e.g. `apt install clang lld`)",
        clang.display()
    )]
    WasmLdNotFound { clang: PathBuf },
    #[error("{context}: {error}")]
    Io {
        context: String,
        #[source]
        error: std::io::Error,
    },
    #[error("clang failed to build {} ({status}):\n{stderr}", path.display())]
    Compile {
        path: PathBuf,
        status: String,
        /// The command line, for reproducing the failure by hand.
        command: String,
        stderr: String,
    },
    #[error("clang failed to link {} ({status}):\n{stderr}", path.display())]
    Link {
        path: PathBuf,
        status: String,
        /// The command line, for reproducing the failure by hand.
        command: String,
        stderr: String,
    },
    /// clang, asked something other than a build, said why on stderr.
    #[error("clang failed ({status})")]
    Clang { status: String },
    #[error("no wasi-libc emulation named `{0}` (signal, mman, process-clocks, getpid)")]
    UnknownEmulation(String),
    #[error("the sources of {what} are missing: {why}")]
    SourcesMissing { what: String, why: String },
    #[error("clang reported success but {} is not a WebAssembly module", path.display())]
    BadOutput { path: PathBuf },
    #[error("no example or hostile C graft named `{0}`")]
    UnknownExample(String),
    #[error("no program named `{0}` (sqlite3, gzip, bzip2, lz4, zstd, minigzip)")]
    UnknownProgram(String),
    #[error("the sources of {what} are not in cargo's registry ({looked}): run `cargo fetch` in VINO's source tree")]
    SourcesNotFound { what: String, looked: String },
}

pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BuildError {
    let context = context.into();
    move |error| BuildError::Io { context, error }
}

/// A clang that can target wasm32 and the wasm-ld it links with.
#[derive(Debug, Clone)]
pub struct Toolchain {
    pub clang: PathBuf,
    pub wasm_ld: PathBuf,
    /// First line of `clang --version`.
    pub version: String,
}

/// Finds clang: `opts.clang` if given, else `$VINO_CLANG` if set, else the first of `clang`,
/// `clang-21` … `clang-14` on `PATH` that also finds a `wasm-ld`.
pub fn find_toolchain(opts: &BuildOptions) -> Result<Toolchain, BuildError> {
    let explicit = opts
        .clang
        .clone()
        .map(OsString::from)
        .or_else(|| std::env::var_os(CLANG_ENV).filter(|v| !v.is_empty()));
    let candidates: Vec<OsString> = match explicit {
        Some(c) => vec![c],
        None => CANDIDATES.iter().map(OsString::from).collect(),
    };
    let mut without_ld = None;
    for cand in &candidates {
        let Some(version) = clang_version(cand) else {
            continue;
        };
        match wasm_ld_of(cand) {
            Some(wasm_ld) => {
                return Ok(Toolchain {
                    clang: PathBuf::from(cand),
                    wasm_ld,
                    version,
                });
            }
            None => {
                without_ld.get_or_insert_with(|| PathBuf::from(cand));
            }
        }
    }
    if let Some(clang) = without_ld {
        return Err(BuildError::WasmLdNotFound { clang });
    }
    let tried = candidates
        .iter()
        .map(|c| c.to_string_lossy())
        .collect::<Vec<_>>()
        .join(", ");
    Err(BuildError::ClangNotFound { tried })
}

fn clang_version(clang: &OsStr) -> Option<String> {
    let out = Command::new(clang)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or("").trim();
    first.contains("clang").then(|| first.to_owned())
}

/// Asks clang where its wasm-ld is: it searches its own directory and `PATH`, and echoes the bare
/// name back when it finds nothing.
fn wasm_ld_of(clang: &OsStr) -> Option<PathBuf> {
    let out = Command::new(clang)
        .args(["--target=wasm32", "-print-prog-name=wasm-ld"])
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && path.is_absolute() && path.is_file()).then_some(path)
}

/// The arguments (after the clang binary itself) that build `source` into the graft `output`,
/// with `include_dir` holding `vino_graft.h`.
pub fn clang_args(source: &Path, output: &Path, include_dir: &Path, opts: &BuildOptions) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![
        "--target=wasm32".into(),
        opts.opt_level.flag().into(),
        // No libc, no crt, no start files; the header provides memset/memcpy/memmove.
        "-nostdlib".into(),
        // Also implies -fno-builtin: library calls are not assumed to exist.
        "-ffreestanding".into(),
        // Only what the header's macros mark is exported (graftpoints, controls, shared data).
        "-fvisibility=hidden".into(),
        // 128-bit SIMD, as a native x86-64 build has SSE2: fixed-cost instructions (fuel counts
        // each as one, like any other). Not -mbulk-memory: grafts may not use those.
        "-msimd128".into(),
    ];
    a.push("-I".into());
    a.push(include_dir.into());
    push_includes_and_defines(&mut a, opts);
    if opts.debug {
        a.push("-g".into());
    }
    // A library, not a command: no _start.
    a.push("-Wl,--no-entry".into());
    // Export default-visibility symbols: the graftpoint and control functions (export_name does
    // that anyway), and data (vino_args, VINO_SHARED) as i32 globals holding their addresses.
    a.push("-Wl,--export-dynamic".into());
    // The shadow stack goes below the data, at address 0 upwards: an overflow runs the stack
    // pointer below 0 and the next access traps, instead of silently overwriting the graft's data.
    a.push("-Wl,--stack-first".into());
    a.push(format!("-Wl,-z,stack-size={}", opts.stack_size).into());
    if !opts.debug {
        a.push("-Wl,--strip-debug".into());
    }
    // No --initial-memory / --max-memory: the kernel caps memory.
    a.extend(opts.extra_args.iter().cloned());
    a.push(source.into());
    a.push("-o".into());
    a.push(output.into());
    a
}

/// Builds the C graft `source` into the Wasm module `output`.
pub fn build_c(source: &Path, output: &Path, opts: &BuildOptions) -> Result<(), BuildError> {
    std::fs::metadata(source).map_err(io(format!("reading {}", source.display())))?;
    let tc = find_toolchain(opts)?;
    let (_tmp, include) = temp_include(crate::HEADER_NAME, crate::HEADER)?;
    run_clang(&tc, &clang_args(source, output, &include, opts), source, output)
}

/// A temporary include directory holding the header `name` and the sources the SDK bundles
/// ([`crate::BUNDLED`]) (gone with the returned guard).
fn temp_include(name: &str, text: &str) -> Result<(tempfile::TempDir, PathBuf), BuildError> {
    let tmp = tempfile::Builder::new()
        .prefix("vino-sdk-")
        .tempdir()
        .map_err(io("creating a temporary directory"))?;
    let include = tmp.path().join("include");
    for (file, contents) in std::iter::once((name, text)).chain(crate::BUNDLED.iter().copied()) {
        let path = include.join(file);
        path.parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, contents))
            .map_err(io(format!("writing {file} to {}", include.display())))?;
    }
    Ok((tmp, include))
}

/// `-I` for each of `opts.include_dirs`, `-D` for each definition.
pub(crate) fn push_includes_and_defines(a: &mut Vec<OsString>, opts: &BuildOptions) {
    for dir in &opts.include_dirs {
        a.push("-I".into());
        a.push(dir.into());
    }
    for (name, value) in &opts.defines {
        a.push(match value {
            Some(v) => format!("-D{name}={v}").into(),
            None => format!("-D{name}").into(),
        });
    }
}

/// Runs clang with `args` and checks that it wrote a module to `output`.
fn run_clang(tc: &Toolchain, args: &[OsString], source: &Path, output: &Path) -> Result<(), BuildError> {
    let out = Command::new(&tc.clang)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(io(format!("running {}", tc.clang.display())))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if looks_like_missing_linker(&stderr) {
            return Err(BuildError::WasmLdNotFound {
                clang: tc.clang.clone(),
            });
        }
        let mut command = tc.clang.display().to_string();
        for a in args {
            let _ = write!(command, " {}", a.to_string_lossy());
        }
        return Err(BuildError::Compile {
            path: source.to_owned(),
            status: out.status.to_string(),
            command,
            stderr,
        });
    }
    check_module(output)
}

/// Checks that clang wrote a WebAssembly module to `output`.
pub(crate) fn check_module(output: &Path) -> Result<(), BuildError> {
    let head = std::fs::read(output).map_err(io(format!("reading {}", output.display())))?;
    if !head.starts_with(&crate::wasm::MAGIC) {
        return Err(BuildError::BadOutput {
            path: output.to_owned(),
        });
    }
    Ok(())
}

/// Clang found no wasm-ld after all (the check in [`find_toolchain`] is a guess at its search).
pub(crate) fn looks_like_missing_linker(stderr: &str) -> bool {
    stderr.contains("wasm-ld")
        && [
            "doesn't exist",
            "not found",
            "No such file",
            "unable to execute",
            "invalid linker name",
        ]
        .iter()
        .any(|m| stderr.contains(m))
        && !stderr.contains("undefined symbol")
}

/// Builds the C graft `source` and returns the module's bytes.
pub fn build_c_bytes(source: &Path, opts: &BuildOptions) -> Result<Vec<u8>, BuildError> {
    let tmp = tempfile::Builder::new()
        .prefix("vino-sdk-out-")
        .tempdir()
        .map_err(io("creating a temporary directory"))?;
    let output = tmp.path().join("graft.wasm");
    build_c(source, &output, opts)?;
    std::fs::read(&output).map_err(io(format!("reading {}", output.display())))
}

/// Builds C source held in memory; `file_name` (e.g. `"my_graft.c"`) names it in clang's
/// messages and chooses the language by its extension.
pub fn build_c_str(file_name: &str, source: &str, opts: &BuildOptions) -> Result<Vec<u8>, BuildError> {
    let name = Path::new(file_name).file_name().unwrap_or(OsStr::new("graft.c"));
    let tmp = tempfile::Builder::new()
        .prefix("vino-sdk-src-")
        .tempdir()
        .map_err(io("creating a temporary directory"))?;
    let path = tmp.path().join(name);
    std::fs::write(&path, source).map_err(io(format!("writing {}", path.display())))?;
    build_c_bytes(&path, opts)
}
