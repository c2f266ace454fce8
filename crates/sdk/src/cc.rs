//! Building programs that run as VINO processes: clang for wasm32-wasi against wasi-libc, each
//! source compiled on its own (so a failure names its file), then one link.

use crate::clang::{BuildError, BuildOptions, Toolchain, find_toolchain, io, looks_like_missing_linker};
use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Warnings that are errors in every program: each is a bug on wasm32 that C lets through (an
/// undeclared function is assumed to return `int`, and a call through the wrong type traps at
/// run time instead of failing to link).
pub const PORTING_ERRORS: &[&str] = &[
    "-Werror=implicit-function-declaration",
    "-Werror=implicit-int",
    "-Werror=int-conversion",
    "-Werror=incompatible-pointer-types",
];

/// Bytes of stack every program is linked with.
pub const PROGRAM_STACK: usize = 1 << 20;

/// wasi-libc's emulations every program gets: `clock`, `times`, `getrusage` on the wall clock,
/// and `getpid`'s declaration (the compatibility layer's `getpid` answers the kernel's pid; the
/// emulation's placeholder only links into a `--portable` or `--no-compat` build). Both only
/// link when called.
pub const DEFAULT_EMULATIONS: &[&str] = &["process-clocks", "getpid"];

/// wasi-libc's emulation libraries (`--emulate`, `-lwasi-emulated-<name>`).
pub const EMULATIONS: &[&str] = &["signal", "mman", "process-clocks", "getpid"];

/// The compatibility layer's C source: `sdk/lib/vino_compat.c` and the files after it, compiled
/// as one unit (`#line` keeps each file's own name and lines in clang's messages).
pub const COMPAT_SOURCE: &str = concat!(
    "#line 1 \"sdk/lib/vino_compat.c\"\n",
    include_str!("../../../sdk/lib/vino_compat.c"),
    "#line 1 \"sdk/lib/vino_process.c\"\n",
    include_str!("../../../sdk/lib/vino_process.c"),
    "#line 1 \"sdk/lib/vino_signal.c\"\n",
    include_str!("../../../sdk/lib/vino_signal.c"),
    "#line 1 \"sdk/lib/vino_shell.c\"\n",
    include_str!("../../../sdk/lib/vino_shell.c"),
    "#line 1 \"sdk/lib/vino_mman.c\"\n",
    include_str!("../../../sdk/lib/vino_mman.c"),
    "#line 1 \"sdk/lib/vino_socket.c\"\n",
    include_str!("../../../sdk/lib/vino_socket.c"),
);

/// The compatibility layer's headers (`sdk/include/compat/`), path → text: each includes
/// wasi-libc's header of the same name and declares what it leaves out.
pub const COMPAT_HEADERS: &[(&str, &str)] = &[
    (
        "__typedef_sigset_t.h",
        include_str!("../../../sdk/include/compat/__typedef_sigset_t.h"),
    ),
    ("signal.h", include_str!("../../../sdk/include/compat/signal.h")),
    ("spawn.h", include_str!("../../../sdk/include/compat/spawn.h")),
    ("stdio.h", include_str!("../../../sdk/include/compat/stdio.h")),
    ("sys/socket.h", include_str!("../../../sdk/include/compat/sys/socket.h")),
    ("sys/stat.h", include_str!("../../../sdk/include/compat/sys/stat.h")),
    ("sys/wait.h", include_str!("../../../sdk/include/compat/sys/wait.h")),
    ("unistd.h", include_str!("../../../sdk/include/compat/unistd.h")),
];

/// The SDK's files for one build, in a temporary directory gone with it.
struct Sdk {
    _tmp: tempfile::TempDir,
    /// Holds `vino_process.h`.
    include: PathBuf,
    /// Holds the compatibility headers.
    compat_include: PathBuf,
    /// Start-up code and compatibility layer, compiled with the program.
    start: PathBuf,
    compat: PathBuf,
    objects: PathBuf,
}

impl Sdk {
    fn write() -> Result<Sdk, BuildError> {
        let tmp = tempfile::Builder::new()
            .prefix("vino-cc-")
            .tempdir()
            .map_err(io("creating a temporary directory"))?;
        let root = tmp.path().to_owned();
        let sdk = Sdk {
            include: root.join("include"),
            compat_include: root.join("compat"),
            start: root.join("vino_start.c"),
            compat: root.join("vino_compat.c"),
            objects: root.join("objects"),
            _tmp: tmp,
        };
        write(&sdk.include.join(crate::PROCESS_HEADER_NAME), crate::PROCESS_HEADER)?;
        for (name, text) in COMPAT_HEADERS {
            write(&sdk.compat_include.join(name), text)?;
        }
        write(&sdk.start, crate::PROCESS_START)?;
        write(&sdk.compat, COMPAT_SOURCE)?;
        std::fs::create_dir_all(&sdk.objects).map_err(io(format!("creating {}", sdk.objects.display())))?;
        Ok(sdk)
    }
}

fn write(path: &Path, text: &str) -> Result<(), BuildError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    }
    std::fs::write(path, text).map_err(io(format!("writing {}", path.display())))
}

/// Whether clang uses `arg` only when linking (`-lz`, `-L dir`, `-Wl,...`): such flags stay out
/// of the compile steps, where clang would warn that they go unused.
pub fn is_link_flag(arg: &OsStr) -> bool {
    let a = arg.to_string_lossy();
    a.starts_with("-l")
        || a.starts_with("-L")
        || a.starts_with("-Wl,")
        || a.starts_with("-Xlinker")
        || a.starts_with("-z")
        || matches!(&*a, "-static" | "-s" | "-shared" | "-rdynamic")
}

/// Splits `args` into compile flags and link flags; a link flag's separate value (`-L dir`,
/// `-Xlinker x`, `-z x`) goes with it.
fn split_flags(args: &[OsString]) -> (Vec<OsString>, Vec<OsString>) {
    let (mut compile, mut link) = (Vec::new(), Vec::new());
    let mut value_of_link_flag = false;
    for a in args {
        if value_of_link_flag {
            link.push(a.clone());
            value_of_link_flag = false;
        } else if is_link_flag(a) {
            value_of_link_flag = matches!(a.to_str(), Some("-L" | "-l" | "-Xlinker" | "-z"));
            link.push(a.clone());
        } else {
            compile.push(a.clone());
        }
    }
    (compile, link)
}

/// The wasi-libc emulations a build uses: the defaults, `opts.emulate`, and any named by a
/// `-lwasi-emulated-<name>` among the arguments.
fn emulations(opts: &BuildOptions) -> Vec<String> {
    let mut all: Vec<String> = DEFAULT_EMULATIONS.iter().map(|e| e.to_string()).collect();
    all.extend(opts.emulate.iter().cloned());
    for a in opts.extra_args.iter().chain(&opts.link_args) {
        if let Some(name) = a.to_str().and_then(|a| a.strip_prefix("-lwasi-emulated-")) {
            all.push(name.to_string());
        }
    }
    let mut seen = Vec::new();
    for e in all {
        if !seen.contains(&e) {
            seen.push(e);
        }
    }
    seen
}

/// Checks the names `--emulate` was given.
pub fn check_emulations(names: &[String]) -> Result<(), BuildError> {
    match names.iter().find(|n| !EMULATIONS.contains(&n.as_str())) {
        Some(bad) => Err(BuildError::UnknownEmulation(bad.clone())),
        None => Ok(()),
    }
}

/// `_WASI_EMULATED_<NAME>` for wasi-libc's emulation `name` (`process-clocks`...).
pub fn emulation_define(name: &str) -> String {
    format!("-D_WASI_EMULATED_{}", name.replace('-', "_").to_uppercase())
}

/// The flags the SDK's own files are compiled with: target, SDK headers, emulations.
fn sdk_flags(sdk: &Sdk, opts: &BuildOptions) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec!["--target=wasm32-wasi".into(), opts.opt_level.flag().into()];
    a.push("-I".into());
    a.push(sdk.include.clone().into());
    if opts.compat {
        // After the user's -I directories, before wasi-libc's own headers.
        a.push("-isystem".into());
        a.push(sdk.compat_include.clone().into());
    }
    for e in emulations(opts) {
        a.push(emulation_define(&e).into());
    }
    if opts.portable {
        a.push("-DVINO_COMPAT_PORTABLE".into());
    }
    a
}

/// The flags every compile of the user's sources gets, before the source: the SDK's, the
/// porting errors, the user's definitions and flags.
fn compile_flags(sdk: &Sdk, opts: &BuildOptions) -> Vec<OsString> {
    let mut a = sdk_flags(sdk, opts);
    a.extend(PORTING_ERRORS.iter().map(OsString::from));
    crate::clang::push_includes_and_defines(&mut a, opts);
    if opts.debug {
        a.push("-g".into());
    }
    a.extend(split_flags(&opts.extra_args).0);
    a
}

/// Builds a program that runs as a VINO process (`vino run`): each of `sources` compiled on
/// its own for wasm32-wasi (clang's warnings go to stderr; the first failure names its file),
/// then linked against wasi-libc as a WASI preview 1 command (`_start`) with the start-up code,
/// the compatibility layer unless `opts.compat` is off, and wasi-libc's emulations.
/// `vino_process.h` (the `vino` import module) is on the include path. Sources that are not C
/// (`.o`, `.a`) go to the link as they are.
pub fn build_program(sources: &[PathBuf], output: &Path, opts: &BuildOptions) -> Result<(), BuildError> {
    for s in sources {
        std::fs::metadata(s).map_err(io(format!("reading {}", s.display())))?;
    }
    check_emulations(&opts.emulate)?;
    let tc = find_toolchain(opts)?;
    let sdk = Sdk::write()?;
    let (flags, own) = (compile_flags(&sdk, opts), sdk_flags(&sdk, opts));
    let mut inputs: Vec<Compile<'_>> = Vec::new();
    let mut objects = Vec::new();
    for (i, s) in sources.iter().enumerate() {
        if is_compiled(s) {
            let stem = s.file_stem().unwrap_or(OsStr::new("source")).to_string_lossy();
            let object = sdk.objects.join(format!("{i}-{stem}.o"));
            inputs.push((s.clone(), object.clone(), &flags));
            objects.push(object);
        } else {
            objects.push(s.clone());
        }
    }
    // The SDK's own files, without the user's flags (its warnings are not the user's).
    let mut own_files = vec![&sdk.start];
    if opts.compat {
        own_files.push(&sdk.compat);
    }
    for file in own_files {
        let object = sdk.objects.join(file.file_name().expect("a file")).with_extension("o");
        inputs.push((file.clone(), object.clone(), &own));
        objects.push(object);
    }
    compile_all(&tc, &inputs)?;
    link(&tc, &objects, output, opts)
}

/// Whether clang compiles `path` (by its extension) rather than passing it to the linker.
fn is_compiled(path: &Path) -> bool {
    let ext = path.extension().and_then(OsStr::to_str).unwrap_or("");
    matches!(ext, "c" | "cc" | "cpp" | "cxx" | "C" | "c++" | "i" | "s" | "S")
}

/// A source, the object to compile it into, and the flags to do it with.
type Compile<'a> = (PathBuf, PathBuf, &'a Vec<OsString>);

/// Compiles each of `inputs`, a few at a time; clang's warnings are printed as each finishes,
/// and the first failure in `inputs`' order is returned.
fn compile_all(tc: &Toolchain, inputs: &[Compile<'_>]) -> Result<(), BuildError> {
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
    for chunk in inputs.chunks(jobs) {
        let results: Vec<Result<(), BuildError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|(src, obj, flags)| scope.spawn(move || compile_one(tc, flags, src, obj)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a compile thread panicked"))
                .collect()
        });
        results.into_iter().collect::<Result<Vec<()>, _>>()?;
    }
    Ok(())
}

fn compile_one(tc: &Toolchain, flags: &[OsString], source: &Path, object: &Path) -> Result<(), BuildError> {
    let mut args = flags.to_vec();
    args.extend(["-c".into(), source.into(), "-o".into(), object.into()]);
    let stderr = run(tc, &args, source, false)?;
    // Warnings, as clang would show them.
    eprint!("{stderr}");
    Ok(())
}

/// Links `objects` into the command `output`.
fn link(tc: &Toolchain, objects: &[PathBuf], output: &Path, opts: &BuildOptions) -> Result<(), BuildError> {
    let mut a: Vec<OsString> = vec!["--target=wasm32-wasi".into(), opts.opt_level.flag().into()];
    // The compile flags come along (-flto, -O, -g matter to both); the rest clang ignores.
    // Libraries go after the objects, which they resolve.
    a.push("-Qunused-arguments".into());
    let (compile, link) = split_flags(&opts.extra_args);
    a.extend(compile);
    a.extend(objects.iter().map(OsString::from));
    a.extend(link);
    a.extend(opts.link_args.iter().cloned());
    for e in emulations(opts) {
        a.push(format!("-lwasi-emulated-{e}").into());
    }
    if !opts.debug {
        a.push("-Wl,--strip-debug".into());
    }
    // A C program expects a stack of megabytes (Linux gives 8 MiB), where wasm-ld's default is
    // 64 KiB placed below the data: a 64 KiB buffer on the stack then overwrote libc's own
    // data and crashed far away. 1 MiB, and first in memory, so that running past it traps at
    // once instead of corrupting anything.
    a.push("-Wl,--stack-first".into());
    a.push(format!("-Wl,-z,stack-size={PROGRAM_STACK}").into());
    if opts.compat && !opts.portable {
        // The kernel runs signal handlers through the function table (the handler's index is
        // what the compatibility layer registers); exporting a function instead would make
        // wasm-ld wrap every export of a command in its constructors and destructors.
        a.push("-Wl,--export-table".into());
    }
    a.push("-o".into());
    a.push(output.into());
    let stderr = run(tc, &a, output, true)?;
    eprint!("{stderr}");
    crate::clang::check_module(output)
}

/// Runs clang with `args` for `what` (the source compiled, or the program linked); its stderr.
fn run(tc: &Toolchain, args: &[OsString], what: &Path, linking: bool) -> Result<String, BuildError> {
    let out = Command::new(&tc.clang)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(io(format!("running {}", tc.clang.display())))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        return Ok(stderr);
    }
    if linking && looks_like_missing_linker(&stderr) {
        return Err(BuildError::WasmLdNotFound {
            clang: tc.clang.clone(),
        });
    }
    let mut command = tc.clang.display().to_string();
    for a in args {
        let _ = write!(command, " {}", a.to_string_lossy());
    }
    let (path, status) = (what.to_owned(), out.status.to_string());
    Err(if linking {
        BuildError::Link {
            path,
            status,
            command,
            stderr,
        }
    } else {
        BuildError::Compile {
            path,
            status,
            command,
            stderr,
        }
    })
}

/// Options of clang's that take their value as the next argument.
const TAKES_VALUE: &[&str] = &[
    "-o",
    "-I",
    "-L",
    "-l",
    "-D",
    "-U",
    "-include",
    "-isystem",
    "-idirafter",
    "-iquote",
    "-MF",
    "-MT",
    "-MQ",
    "-x",
    "-Xlinker",
    "-Xclang",
    "-z",
    "-target",
    "-arch",
];

/// Options that stop clang before the link.
const NO_LINK: &[&str] = &["-c", "-S", "-E", "-M", "-MM", "-fsyntax-only"];

/// A clang-compatible driver for makefiles and configure scripts (`CC="vino cc"`): `args` are
/// clang's, without a target. With `-c`, `-S`, `-E` or `-M` it is one clang run with the SDK's
/// headers, the emulation definitions and the porting errors; otherwise each C source among
/// `args` is compiled on its own and all linked as [`build_program`] does, into `-o` (default
/// `a.out`). `--emulate=NAME[,NAME]`, `--no-compat` and `--portable` are the driver's own; `-lwasi-emulated-*`
/// also defines the emulation's `_WASI_EMULATED_*`.
pub fn cc(args: &[OsString], opts: &BuildOptions) -> Result<(), BuildError> {
    let mut opts = opts.clone();
    let mut clang_args = Vec::new();
    for a in args {
        match a.to_str() {
            Some("--no-compat") => opts.compat = false,
            Some("--portable") => opts.portable = true,
            Some(s) if s.starts_with("--emulate=") => {
                let names = s["--emulate=".len()..].split(',').filter(|n| !n.is_empty());
                opts.emulate.extend(names.map(str::to_string));
            }
            _ => clang_args.push(a.clone()),
        }
    }
    check_emulations(&opts.emulate)?;
    let tc = find_toolchain(&opts)?;
    let sdk = Sdk::write()?;
    let parsed = Parsed::of(&clang_args);
    if parsed.inputs.is_empty() {
        // `--version`, `-dumpmachine`, `-print-search-dirs`: what configure scripts ask.
        return ask(&tc, &clang_args);
    }
    opts.extra_args = parsed.flags;
    if clang_args.iter().any(|a| NO_LINK.iter().any(|n| a == *n)) {
        let mut all = compile_flags(&sdk, &opts);
        all.extend(parsed.inputs.iter().map(OsString::from));
        if let Some(out) = &parsed.output {
            all.extend(["-o".into(), out.into()]);
        }
        let what = parsed.inputs.first().cloned().unwrap_or_default();
        eprint!("{}", run(&tc, &all, &what, false)?);
        return Ok(());
    }
    let output = parsed.output.unwrap_or_else(|| PathBuf::from("a.out"));
    build_program(&parsed.inputs, &output, &opts)
}

/// Runs clang for wasm32-wasi with `args` and its output as it is.
fn ask(tc: &Toolchain, args: &[OsString]) -> Result<(), BuildError> {
    let status = Command::new(&tc.clang)
        .arg("--target=wasm32-wasi")
        .args(args)
        .status()
        .map_err(io(format!("running {}", tc.clang.display())))?;
    if status.success() {
        return Ok(());
    }
    Err(BuildError::Clang {
        status: status.to_string(),
    })
}

/// A clang command line taken apart: its input files, its `-o`, the rest.
struct Parsed {
    inputs: Vec<PathBuf>,
    output: Option<PathBuf>,
    flags: Vec<OsString>,
}

impl Parsed {
    fn of(args: &[OsString]) -> Parsed {
        let mut p = Parsed {
            inputs: Vec::new(),
            output: None,
            flags: Vec::new(),
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let s = a.to_string_lossy();
            if s == "-o" {
                p.output = it.next().map(PathBuf::from);
            } else if TAKES_VALUE.contains(&&*s) {
                p.flags.push(a.clone());
                p.flags.extend(it.next().cloned());
            } else if s.starts_with('-') && s.len() > 1 {
                p.flags.push(a.clone());
            } else {
                p.inputs.push(PathBuf::from(a));
            }
        }
        p
    }
}
