//! `vino bench native`: real programs as VINO processes against the same programs on Linux,
//! on stock wasmtime and on Node's WASI.
//!
//! The programs are the SDK's (`vino_sdk::programs`: SQLite under a small shell, gzip over zlib,
//! bzip2 1.0.8, and lz4, zstd and zlib's minigzip where the SDK builds them), each run four ways
//! on the same inputs:
//!
//! * VINO: the wasm32-wasi build run by vino-wasi as a VINO process on the kernel of a daemon
//!   started on a fresh image (its files in VINO's file system and page cache);
//! * wasmtime: the same `.wasm` run by stock wasmtime-wasi (preview 1) under the Config VINO's
//!   programs are compiled with (Cranelift at its default level, epoch interruption on, a
//!   thread ticking the epoch every millisecond as VINO's CPU ticks do), the host directory
//!   preopened as `/`;
//! * Node: the same `.wasm` on Node's `node:wasi` (preview 1), when `node` is on the PATH;
//! * native: the same C sources (same definitions, `-O2`) compiled for the host by the same
//!   clang, run on Linux in a directory of the host's file system.
//!
//! The steps: SQLite inserting rows one `INSERT` each in one transaction (the script on standard
//! input); then for each compressor, compressing generated text (E7's) in place and restoring it
//! (file steps: the program's own file I/O included), and compressing it from standard input to
//! a discarded standard output (the compute step: the same work without the file system, the
//! input a host file on every side). The restored text is compared with the original on every
//! side. The sides alternate, one round each, three rounds; each time is the median of its
//! rounds, wall-clock from start to exit, compiling excluded (the native build, the `.wasm`
//! compiled once per runtime beforehand).
//!
//! Beside it, what wasmtime's settings change for one module: its compute step on stock
//! wasmtime under other Configs (no epoch interruption, Cranelift without optimization or for
//! size too, explicit bounds checks in place of guard pages, SIMD off).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, ensure};
use parking_lot::Mutex;
use serde::Serialize;
use vino_kernel::Credentials;
use vino_measure::report::{Table, bar_chart, fmt_ratio};

use crate::daemon;
use crate::e7_gunzip::{SharedBuf, generate_text};

/// The goal: a VINO process within this factor of the same program on Linux.
pub const GOAL_VS_NATIVE: f64 = 1.5;
/// The goal: a VINO process within this factor of the same module on stock wasmtime (VINO's
/// kernel adds nothing to compute).
pub const GOAL_VS_WASMTIME: f64 = 1.1;

#[derive(Clone, Debug)]
pub struct NativeOptions {
    pub quick: bool,
    /// Where the daemon's image and the host's directory go (a real disk, not tmpfs).
    pub scratch: PathBuf,
    /// Rows SQLite inserts.
    pub sqlite_rows: u64,
    /// Bytes of text compressed and restored.
    pub text_bytes: usize,
    /// VINO's page cache, in 4 KiB frames.
    pub cache_frames: usize,
    /// Rounds, the sides alternating within each.
    pub rounds: usize,
    /// Run Node's WASI too, if `node` is there.
    pub node: bool,
    /// Measure what wasmtime's settings change.
    pub settings: bool,
}

impl NativeOptions {
    pub fn new(quick: bool) -> NativeOptions {
        NativeOptions {
            quick,
            scratch: PathBuf::from("target/vino-bench"),
            sqlite_rows: if quick { 5_000 } else { 100_000 },
            text_bytes: if quick { 1 << 20 } else { 20 << 20 },
            cache_frames: 32_768,
            rounds: if quick { 1 } else { 3 },
            node: true,
            settings: !quick,
        }
    }
}

/// One step's times on each side (seconds, the median of the rounds), and the ratios.
#[derive(Clone, Debug, Serialize)]
pub struct StepResult {
    pub step: String,
    pub program: String,
    /// `sql`, `file` (the program's own file I/O included) or `compute` (standard input to a
    /// discarded standard output).
    pub kind: &'static str,
    pub command: String,
    pub vino_s: f64,
    pub native_s: f64,
    pub wasmtime_s: f64,
    pub node_s: Option<f64>,
    pub vino_vs_native: f64,
    pub vino_vs_wasmtime: f64,
    pub wasmtime_vs_native: f64,
    pub node_vs_native: Option<f64>,
    pub meets_goal: bool,
    pub meets_wasmtime_goal: bool,
    /// Every round's time per side: VINO, wasmtime, native, Node.
    pub rounds: Vec<[Option<f64>; 4]>,
}

/// One module's compute step on stock wasmtime under one Config.
#[derive(Clone, Debug, Serialize)]
pub struct SettingResult {
    pub setting: String,
    pub seconds: f64,
    /// Over the same step under VINO's Config.
    pub vs_vino_config: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct NativeReport {
    pub sqlite_rows: u64,
    pub text_bytes: usize,
    pub cache_frames: usize,
    pub rounds: usize,
    pub clang: String,
    /// `node --version`, if Node ran.
    pub node: Option<String>,
    pub steps: Vec<StepResult>,
    /// The step the settings were measured on.
    pub settings_step: Option<String>,
    pub settings: Vec<SettingResult>,
}

/// A step: the program, its arguments (the first its name; `/x` is file `x` of the side's file
/// system), and the file on its standard input, if any.
pub(crate) struct Step {
    pub(crate) name: String,
    pub(crate) program: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) args: Vec<&'static str>,
    pub(crate) stdin: Option<&'static str>,
}

/// A compressor: its program, the arguments that compress `/text` in place and restore it, and
/// those that compress standard input to standard output.
struct Codec {
    program: &'static str,
    compress: &'static [&'static str],
    decompress: &'static [&'static str],
    stream: &'static [&'static str],
}

/// The compressors, each run where the SDK builds it.
const CODECS: &[Codec] = &[
    Codec {
        program: "gzip",
        compress: &["gzip", "-6", "/text"],
        decompress: &["gunzip", "/text.gz"],
        stream: &["gzip", "-6", "-c"],
    },
    Codec {
        program: "bzip2",
        compress: &["bzip2", "-9", "/text"],
        decompress: &["bzip2", "-d", "/text.bz2"],
        stream: &["bzip2", "-9", "-c"],
    },
    Codec {
        program: "minigzip",
        compress: &["minigzip", "-6", "/text"],
        decompress: &["minigzip", "-d", "/text.gz"],
        stream: &["minigzip", "-6"],
    },
    Codec {
        program: "lz4",
        compress: &["lz4", "-q", "--rm", "/text", "/text.lz4"],
        decompress: &["lz4", "-d", "-q", "--rm", "/text.lz4", "/text"],
        stream: &["lz4", "-q", "-c"],
    },
    Codec {
        program: "zstd",
        compress: &["zstd", "-q", "--rm", "/text"],
        decompress: &["zstd", "-d", "-q", "--rm", "/text.zst"],
        stream: &["zstd", "-q", "-c"],
    },
];

/// The SQLite script, made a host file for every side's standard input.
pub(crate) const SCRIPT: &str = "insert.sql";
/// The text's name in every side's file system.
pub(crate) const TEXT: &str = "text";
/// SQLite's database, removed between rounds.
const DB: &str = "bench.db";

pub(crate) fn steps(opts: &NativeOptions) -> Vec<Step> {
    let built = |p: &str| vino_sdk::programs::PROGRAMS.contains(&p);
    let step = |name: String, program, kind, args: &[&'static str], stdin| Step {
        name,
        program,
        kind,
        args: args.to_vec(),
        stdin,
    };
    let mut steps = vec![step(
        format!("sqlite3: {} inserts in a transaction", opts.sqlite_rows),
        "sqlite3",
        "sql",
        &["sqlite3", "/bench.db"],
        Some(SCRIPT),
    )];
    for c in CODECS.iter().filter(|c| built(c.program)) {
        steps.push(step(label(c.compress), c.program, "file", c.compress, None));
        steps.push(step(label(c.decompress), c.program, "file", c.decompress, None));
        steps.push(step(
            label(c.stream) + " < text",
            c.program,
            "compute",
            c.stream,
            Some(TEXT),
        ));
    }
    steps
}

/// A step's name: its command without the file names.
fn label(args: &[&str]) -> String {
    let words: Vec<&str> = args.iter().copied().filter(|a| !a.starts_with('/')).collect();
    words.join(" ")
}

/// One INSERT a row, in one transaction, and a check the program prints.
pub(crate) fn sqlite_script(rows: u64) -> String {
    let mut s = String::from("CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT);\nBEGIN;\n");
    for i in 0..rows {
        let k = i.wrapping_mul(2_654_435_761) % 1_000_003;
        s.push_str(&format!(
            "INSERT INTO t(k, v) VALUES({k}, 'row {i} of the benchmark table');\n"
        ));
    }
    s.push_str("COMMIT;\nSELECT count(*) FROM t;\n");
    s
}

/// The programs built both ways.
struct Built {
    wasm: Vec<(&'static str, Vec<u8>)>,
    native: Vec<(&'static str, PathBuf)>,
    clang: String,
}

fn build(dir: &Path, programs: &[&'static str], progress: &mut dyn FnMut(&str)) -> Result<Built> {
    let opts = vino_sdk::BuildOptions::default();
    let tc = vino_sdk::find_toolchain(&opts).map_err(|e| anyhow!("{e}"))?;
    let include = dir.join("include");
    fs::create_dir_all(&include)?;
    fs::write(include.join(vino_sdk::PROCESS_HEADER_NAME), vino_sdk::PROCESS_HEADER)?;
    let stubs = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/vino_stubs.c");
    let mut built = Built {
        wasm: Vec::new(),
        native: Vec::new(),
        clang: tc.clang.display().to_string(),
    };
    for &name in programs {
        progress(&format!("building {name} for wasm32-wasi"));
        built.wasm.push((name, build_wasm(name)?));
        progress(&format!("building {name} for the host"));
        let s = vino_sdk::programs::sources(name).map_err(|e| anyhow!("{e}"))?;
        let exe = dir.join(format!("{name}-native"));
        let mut cmd = std::process::Command::new(&tc.clang);
        cmd.arg(opts.opt_level.flag()).arg("-w").arg("-I").arg(&include);
        for d in &s.include_dirs {
            cmd.arg("-I").arg(d);
        }
        for (n, v) in &s.defines {
            cmd.arg(match v {
                Some(v) => format!("-D{n}={v}"),
                None => format!("-D{n}"),
            });
        }
        cmd.args(&s.sources).arg(&stubs).arg("-o").arg(&exe).arg("-lm");
        let out = cmd
            .output()
            .with_context(|| format!("running {}", tc.clang.display()))?;
        ensure!(
            out.status.success(),
            "building {name} for the host: {cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        built.native.push((name, exe));
    }
    Ok(built)
}

/// The SDK's program `name` for wasm32-wasi: its module. The SDK's cache keeps it between runs
/// (keyed by its sources and flags).
pub(crate) fn build_wasm(name: &str) -> Result<Vec<u8>> {
    let out = vino_sdk::programs::build_named_cached(name, &vino_sdk::BuildOptions::default())
        .map_err(|e| anyhow!("building {name}.wasm: {e}"))?;
    Ok(fs::read(&out)?)
}

/// The side's path of a program's argument: `/x` is `x` in `root`.
fn host_arg(root: &Path, a: &str) -> std::ffi::OsString {
    match a.strip_prefix('/') {
        Some(rel) => root.join(rel).into_os_string(),
        None => a.into(),
    }
}

fn stdin_file(root: &Path, step: &Step) -> Result<std::process::Stdio> {
    Ok(match step.stdin {
        Some(f) => fs::File::open(root.join(f))?.into(),
        None => std::process::Stdio::null(),
    })
}

fn run_native(exe: &Path, root: &Path, step: &Step) -> Result<f64> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg0(step.args[0])
        .args(step.args[1..].iter().map(|a| host_arg(root, a)))
        .current_dir(root)
        .stdin(stdin_file(root, step)?)
        .stdout(std::process::Stdio::null());
    let t = Instant::now();
    let out = cmd.output()?;
    let s = t.elapsed().as_secs_f64();
    ensure!(
        out.status.success(),
        "{} natively: {}: {}",
        step.name,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(s)
}

/// How stock wasmtime compiles: VINO's programs' Config (Cranelift's default level, epoch
/// interruption, the same stack), or one setting changed from it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Setting {
    VinoConfig,
    NoEpochs,
    OptNone,
    OptSpeedAndSize,
    BoundsChecks,
    NoSimd,
}

impl Setting {
    const ALL: [Setting; 6] = [
        Setting::VinoConfig,
        Setting::NoEpochs,
        Setting::OptNone,
        Setting::OptSpeedAndSize,
        Setting::BoundsChecks,
        Setting::NoSimd,
    ];

    fn describe(self) -> &'static str {
        match self {
            Setting::VinoConfig => "VINO's Config: Cranelift speed, epoch interruption, guard pages",
            Setting::NoEpochs => "no epoch interruption",
            Setting::OptNone => "Cranelift opt level none",
            Setting::OptSpeedAndSize => "Cranelift opt level speed and size",
            Setting::BoundsChecks => "explicit bounds checks (no reservation, no guard pages)",
            Setting::NoSimd => "Wasm SIMD off",
        }
    }

    fn config(self) -> wasmtime::Config {
        let mut c = wasmtime::Config::new();
        c.epoch_interruption(self != Setting::NoEpochs);
        c.max_wasm_stack(1 << 20);
        match self {
            Setting::OptNone => {
                c.cranelift_opt_level(wasmtime::OptLevel::None);
            }
            Setting::OptSpeedAndSize => {
                c.cranelift_opt_level(wasmtime::OptLevel::SpeedAndSize);
            }
            Setting::BoundsChecks => {
                c.memory_reservation(0).memory_guard_size(0);
            }
            Setting::NoSimd => {
                c.wasm_relaxed_simd(false).wasm_simd(false);
            }
            Setting::VinoConfig | Setting::NoEpochs => {}
        }
        c
    }
}

/// Stock wasmtime-wasi (preview 1) with `root` preopened as `/`, its epoch ticked every
/// millisecond by a thread of its own (as VINO's CPU ticks tick its programs' engine).
struct Wasmtime {
    engine: wasmtime::Engine,
    modules: Vec<(&'static str, wasmtime::Module)>,
    ticking: Arc<std::sync::atomic::AtomicBool>,
}

impl Wasmtime {
    fn new(wasm: &[(&'static str, Vec<u8>)], setting: Setting) -> Result<Wasmtime> {
        let engine = wasmtime::Engine::new(&setting.config())?;
        let modules = wasm
            .iter()
            .map(|(n, w)| Ok((*n, wasmtime::Module::new(&engine, w)?)))
            .collect::<Result<_>>()?;
        let ticking = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (e, on) = (engine.clone(), ticking.clone());
        std::thread::spawn(move || {
            while on.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(1));
                e.increment_epoch();
            }
        });
        Ok(Wasmtime {
            engine,
            modules,
            ticking,
        })
    }

    fn run(&self, root: &Path, step: &Step) -> Result<f64> {
        use wasmtime_wasi::cli::{InputFile, OutputFile};
        let module = &self.modules.iter().find(|m| m.0 == step.program).expect("built").1;
        let err_file = root.join("wasmtime-stderr");
        let mut b = wasmtime_wasi::WasiCtxBuilder::new();
        b.args(&step.args)
            .stdout(std::io::empty())
            .stderr(OutputFile::new(fs::File::create(&err_file)?))
            .preopened_dir(root, "/", wasmtime_wasi::FsPerms::ReadWrite)?;
        if let Some(f) = step.stdin {
            b.stdin(InputFile::new(fs::File::open(root.join(f))?));
        }
        let t = Instant::now();
        let mut store = wasmtime::Store::new(&self.engine, b.build_p1());
        // Every tick a check and on, as a VINO program's slice that is not over.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|_| Ok(wasmtime::UpdateDeadline::Continue(1)));
        let mut linker = wasmtime::Linker::new(&self.engine);
        wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |c| c)?;
        // The `vino` import module (gzip's --ra-graft, not used here) is VINO's: a trap here.
        linker.define_unknown_imports_as_traps(module)?;
        let instance = linker.instantiate(&mut store, module)?;
        let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
        let code = match start.call(&mut store, ()) {
            Ok(()) => 0,
            Err(e) => match e.downcast_ref::<wasmtime_wasi::I32Exit>() {
                Some(x) => x.0,
                None => return Err(anyhow::Error::from(e).context(format!("{} on wasmtime-wasi", step.name))),
            },
        };
        let s = t.elapsed().as_secs_f64();
        ensure!(
            code == 0,
            "{} on wasmtime-wasi exited {code}: {}",
            step.name,
            fs::read_to_string(&err_file).unwrap_or_default()
        );
        Ok(s)
    }
}

impl Drop for Wasmtime {
    fn drop(&mut self) {
        self.ticking.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Node's `node:wasi`: a script that compiles the module, then times `wasi.start` alone.
const NODE_RUNNER: &str = r#"
import { readFileSync, openSync } from 'node:fs';
import { WASI } from 'node:wasi';
const [wasm, root, stdin, ...args] = process.argv.slice(2);
const module = await WebAssembly.compile(readFileSync(wasm));
const wasi = new WASI({
  version: 'preview1', args, env: {}, preopens: { '/': root }, returnOnExit: true,
  stdin: openSync(stdin === '-' ? '/dev/null' : stdin, 'r'), stdout: openSync('/dev/null', 'w'), stderr: 2,
});
const imports = wasi.getImportObject();
for (const i of WebAssembly.Module.imports(module)) {
  if (!(i.module in imports)) imports[i.module] = {};
  if (!(i.name in imports[i.module])) imports[i.module][i.name] = () => { throw new Error(`${i.module}.${i.name}`); };
}
const instance = await WebAssembly.instantiate(module, imports);
const t = process.hrtime.bigint();
const code = wasi.start(instance);
const s = Number(process.hrtime.bigint() - t) / 1e9;
process.stdout.write(`${code} ${s}\n`);
"#;

/// Node, if it is on the PATH: its version and the runner script's path.
struct Node {
    version: String,
    runner: PathBuf,
    wasm: Vec<(&'static str, PathBuf)>,
}

impl Node {
    fn find(dir: &Path, built: &Built) -> Result<Option<Node>> {
        let Ok(out) = std::process::Command::new("node").arg("--version").output() else {
            return Ok(None);
        };
        if !out.status.success() {
            return Ok(None);
        }
        let runner = dir.join("wasi-runner.mjs");
        fs::write(&runner, NODE_RUNNER)?;
        let mut wasm = Vec::new();
        for (name, bytes) in &built.wasm {
            let path = dir.join(format!("{name}.node.wasm"));
            fs::write(&path, bytes)?;
            wasm.push((*name, path));
        }
        Ok(Some(Node {
            version: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            runner,
            wasm,
        }))
    }

    fn run(&self, root: &Path, step: &Step) -> Result<f64> {
        let wasm = &self.wasm.iter().find(|m| m.0 == step.program).expect("built").1;
        let stdin = step.stdin.map_or_else(|| "-".into(), |f| root.join(f).into_os_string());
        let out = std::process::Command::new("node")
            .args(["--no-warnings", "--experimental-wasi-unstable-preview1"])
            .arg(&self.runner)
            .arg(wasm)
            .arg(root)
            .arg(stdin)
            .args(&step.args)
            .output()
            .context("running node")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let (code, secs) = text
            .trim()
            .split_once(' ')
            .ok_or_else(|| anyhow!("{} on Node: {}", step.name, String::from_utf8_lossy(&out.stderr)))?;
        ensure!(
            out.status.success() && code == "0",
            "{} on Node exited {code}: {}",
            step.name,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(secs.parse()?)
    }
}

/// The VINO side: the programs compiled once, run on a daemon's kernel.
pub(crate) struct Vino {
    programs: Vec<(&'static str, vino_wasi::Program)>,
}

impl Vino {
    fn new(built: &Built) -> Result<Vino> {
        Vino::compile(&built.wasm)
    }

    /// The modules `wasm` (each with its program's name) compiled for vino-wasi.
    pub(crate) fn compile(wasm: &[(&'static str, Vec<u8>)]) -> Result<Vino> {
        let programs = wasm
            .iter()
            .map(|(n, w)| Ok((*n, vino_wasi::Program::compile(w, vino_wasi::ProgramLimits::default())?)))
            .collect::<Result<_>>()?;
        Ok(Vino { programs })
    }

    /// Runs `step` on `kernel` as root, its standard input from `host`: seconds from start to exit.
    pub(crate) fn run(&self, kernel: &Arc<vino_kernel::Kernel>, host: &Path, step: &Step) -> Result<f64> {
        let program = &self.programs.iter().find(|m| m.0 == step.program).expect("built").1;
        let err = Arc::new(Mutex::new(Vec::new()));
        let stdin: Box<dyn std::io::Read + Send> = match step.stdin {
            Some(f) => Box::new(fs::File::open(host.join(f))?),
            None => Box::new(std::io::empty()),
        };
        let stdio = vino_wasi::Stdio {
            stdin,
            stdout: Box::new(std::io::sink()),
            stderr: Box::new(SharedBuf(err.clone())),
            tty: [false; 3],
        };
        let args = step.args.iter().map(|a| a.as_bytes().to_vec()).collect();
        let t = Instant::now();
        let exit = program.run(
            kernel,
            Credentials::root(),
            vino_wasi::Setup::new(args, Vec::new()),
            stdio,
            &program.kill_switch(),
        )?;
        let s = t.elapsed().as_secs_f64();
        ensure!(
            exit == vino_wasi::Exit::Code(0),
            "{} as a VINO process ended {exit:?}: {}",
            step.name,
            String::from_utf8_lossy(&err.lock())
        );
        Ok(s)
    }
}

/// A file of the VINO side, written, read or removed by a kernel process of its own.
enum FileOp<'a> {
    Write(&'a [u8]),
    Read,
    Remove,
}

fn vino_file(kernel: &Arc<vino_kernel::Kernel>, path: &str, op: FileOp<'_>) -> Result<Vec<u8>> {
    let p = kernel.spawn(Credentials::root());
    let r = (|| -> Result<Vec<u8>> {
        let e = |e: vino_kernel::SysError| anyhow!("{path} in VINO: {e}");
        match op {
            FileOp::Write(data) => {
                let fd = p.open(path, vino_kernel::OpenFlags::create()).map_err(e)?;
                let mut done = 0;
                while done < data.len() {
                    done += p.pwrite(fd, &data[done..], done as u64).map_err(e)?;
                }
                p.close(fd).map_err(e)?;
                Ok(Vec::new())
            }
            FileOp::Read => {
                let fd = p.open(path, vino_kernel::OpenFlags::read_only()).map_err(e)?;
                let mut all = vec![0u8; p.fstat(fd).map_err(e)?.size as usize];
                let n = p.pread(fd, &mut all, 0).map_err(e)?;
                all.truncate(n);
                p.close(fd).map_err(e)?;
                Ok(all)
            }
            FileOp::Remove => {
                // Absent before the first round.
                let _ = p.unlink(path);
                Ok(Vec::new())
            }
        }
    })();
    kernel.exit(p.pid());
    r
}

/// The sides, in the order each round runs them.
const SIDES: [&str; 4] = ["VINO", "wasmtime", "native", "Node"];

/// The median of the times there are.
fn median(times: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let mut v: Vec<f64> = times.flatten().collect();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[v.len() / 2])
}

/// One round of one host side (native, wasmtime, Node) in `root`, which holds the inputs.
fn host_round(root: &Path, steps: &[Step], text: &[u8], run: &dyn Fn(&Step) -> Result<f64>) -> Result<Vec<f64>> {
    let _ = fs::remove_file(root.join(DB));
    let times = steps.iter().map(run).collect::<Result<Vec<_>>>()?;
    ensure!(
        fs::read(root.join(TEXT))? == text,
        "the text restored is not the original"
    );
    Ok(times)
}

pub fn run(opts: &NativeOptions, progress: &mut dyn FnMut(&str)) -> Result<NativeReport> {
    fs::create_dir_all(&opts.scratch).with_context(|| format!("creating {}", opts.scratch.display()))?;
    let dir = tempfile::tempdir_in(&opts.scratch)?;
    let steps = steps(opts);
    let mut programs: Vec<&'static str> = steps.iter().map(|s| s.program).collect();
    programs.dedup();
    let built = build(&dir.path().join("build"), &programs, progress)?;
    progress("compiling the programs for vino-wasi and wasmtime-wasi");
    let vino = Vino::new(&built)?;
    let wasmtime = Wasmtime::new(&built.wasm, Setting::VinoConfig)?;
    let node = if opts.node {
        Node::find(&dir.path().join("build"), &built)?
    } else {
        None
    };
    progress("generating the inputs");
    let text = generate_text(opts.text_bytes, 0xE11);
    let script = sqlite_script(opts.sqlite_rows);
    // Each side's directory with the inputs: the host's, and the one VINO's daemon runs in
    // (its standard inputs come from there; its files are in the image).
    let root = |side: &str| -> Result<PathBuf> {
        let r = dir.path().join(side);
        fs::create_dir_all(&r)?;
        fs::write(r.join(SCRIPT), &script)?;
        fs::write(r.join(TEXT), &text)?;
        Ok(r)
    };
    let roots: Vec<PathBuf> = SIDES.iter().map(|s| root(s)).collect::<Result<_>>()?;
    progress("starting a daemon on a fresh image");
    let handle = daemon::start_daemon(&roots[0], opts.cache_frames).map_err(anyhow::Error::msg)?;
    let mut times: Vec<Vec<[Option<f64>; 4]>> = vec![Vec::new(); steps.len()];
    let rounds = (|| -> Result<()> {
        let kernel = handle.kernel();
        vino_file(kernel, &format!("/{TEXT}"), FileOp::Write(&text))?;
        for round in 0..opts.rounds.max(1) {
            let mut row: Vec<[Option<f64>; 4]> = vec![[None; 4]; steps.len()];
            for (i, side) in SIDES.iter().enumerate() {
                progress(&format!("round {}: {side}", round + 1));
                let got = match i {
                    0 => {
                        vino_file(kernel, &format!("/{DB}"), FileOp::Remove)?;
                        let t = steps
                            .iter()
                            .map(|s| vino.run(kernel, &roots[0], s))
                            .collect::<Result<Vec<_>>>()?;
                        ensure!(
                            vino_file(kernel, &format!("/{TEXT}"), FileOp::Read)? == text,
                            "VINO: the text restored is not the original"
                        );
                        t
                    }
                    1 => host_round(&roots[1], &steps, &text, &|s| wasmtime.run(&roots[1], s)).context("wasmtime")?,
                    2 => host_round(&roots[2], &steps, &text, &|s| {
                        let exe = &built.native.iter().find(|n| n.0 == s.program).expect("built").1;
                        run_native(exe, &roots[2], s)
                    })
                    .context("native")?,
                    _ => match &node {
                        Some(n) => host_round(&roots[3], &steps, &text, &|s| n.run(&roots[3], s)).context("Node")?,
                        None => continue,
                    },
                };
                for (r, t) in row.iter_mut().zip(got) {
                    r[i] = Some(t);
                }
            }
            for (all, r) in times.iter_mut().zip(row) {
                all.push(r);
            }
        }
        Ok(())
    })();
    handle
        .shutdown()
        .map_err(|e| anyhow!("shutting the daemon down: {e}"))?;
    rounds?;
    drop(wasmtime);
    let steps: Vec<StepResult> = steps
        .iter()
        .zip(times)
        .map(|(s, rounds)| {
            let side = |i: usize| median(rounds.iter().map(|r| r[i]));
            let (v, w, n) = (side(0).unwrap_or(0.0), side(1).unwrap_or(0.0), side(2).unwrap_or(0.0));
            let node_s = side(3);
            StepResult {
                step: s.name.clone(),
                program: s.program.to_string(),
                kind: s.kind,
                command: s.args.join(" ") + if s.stdin.is_some() { " < input" } else { "" },
                vino_s: v,
                native_s: n,
                wasmtime_s: w,
                node_s,
                vino_vs_native: v / n,
                vino_vs_wasmtime: v / w,
                wasmtime_vs_native: w / n,
                node_vs_native: node_s.map(|x| x / n),
                meets_goal: v / n <= GOAL_VS_NATIVE,
                meets_wasmtime_goal: v / w <= GOAL_VS_WASMTIME,
                rounds,
            }
        })
        .collect();
    let (settings_step, settings) = if opts.settings {
        progress("wasmtime's settings");
        settings(opts, &built, &dir.path().join("settings"), &text, progress)?
    } else {
        (None, Vec::new())
    };
    Ok(NativeReport {
        sqlite_rows: opts.sqlite_rows,
        text_bytes: opts.text_bytes,
        cache_frames: opts.cache_frames,
        rounds: opts.rounds.max(1),
        clang: built.clang,
        node: node.map(|n| n.version),
        steps,
        settings_step,
        settings,
    })
}

/// The compute step of lz4 (else gzip) on stock wasmtime under each [`Setting`], each the
/// median of the rounds, the settings alternating within a round.
fn settings(
    opts: &NativeOptions,
    built: &Built,
    root: &Path,
    text: &[u8],
    progress: &mut dyn FnMut(&str),
) -> Result<(Option<String>, Vec<SettingResult>)> {
    let all = steps(opts);
    let Some(step) = ["lz4", "gzip"]
        .iter()
        .find_map(|p| all.iter().find(|s| s.program == *p && s.kind == "compute"))
    else {
        return Ok((None, Vec::new()));
    };
    fs::create_dir_all(root)?;
    fs::write(root.join(TEXT), text)?;
    let wasm: Vec<_> = built.wasm.iter().filter(|w| w.0 == step.program).cloned().collect();
    // A setting the module does not validate under (SIMD off for a module that uses it) is left out.
    let engines: Vec<(Setting, Wasmtime)> = Setting::ALL
        .iter()
        .filter_map(|&s| Wasmtime::new(&wasm, s).ok().map(|w| (s, w)))
        .collect();
    let mut times = vec![Vec::new(); engines.len()];
    for round in 0..opts.rounds.max(1) {
        progress(&format!("settings, round {}", round + 1));
        for (i, (_, w)) in engines.iter().enumerate() {
            times[i].push(Some(w.run(root, step)?));
        }
    }
    let base = median(times[0].iter().copied()).unwrap_or(f64::NAN);
    let results = engines
        .iter()
        .zip(times)
        .map(|((s, _), t)| {
            let seconds = median(t.into_iter()).unwrap_or(f64::NAN);
            SettingResult {
                setting: s.describe().to_string(),
                seconds,
                vs_vino_config: seconds / base,
            }
        })
        .collect();
    Ok((Some(step.name.clone()), results))
}

fn fmt_opt(x: Option<f64>, f: impl Fn(f64) -> String) -> String {
    x.map_or_else(|| "-".into(), f)
}

impl NativeReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "Real programs: a VINO process against the same .wasm on stock wasmtime and Node, and the same C on Linux",
            &[
                "step",
                "kind",
                "VINO s",
                "wasmtime s",
                "native s",
                "Node s",
                "VINO / wasmtime",
                "VINO / native",
                "wasmtime / native",
                "Node / native",
                "within 1.1x of wasmtime",
            ],
        );
        for s in &self.steps {
            t.row([
                s.step.clone(),
                s.kind.to_string(),
                format!("{:.3}", s.vino_s),
                format!("{:.3}", s.wasmtime_s),
                format!("{:.3}", s.native_s),
                fmt_opt(s.node_s, |x| format!("{x:.3}")),
                fmt_ratio(s.vino_vs_wasmtime),
                fmt_ratio(s.vino_vs_native),
                fmt_ratio(s.wasmtime_vs_native),
                fmt_opt(s.node_vs_native, fmt_ratio),
                if s.meets_wasmtime_goal {
                    "yes".into()
                } else {
                    "no".into()
                },
            ]);
        }
        t.note(format!(
            "the median of {} rounds, the sides alternating (VINO, wasmtime, native, Node) within each; {} MiB of \
             text (E7's generator); VINO: a daemon's kernel on a fresh image, {} MiB page cache; the others: a \
             directory on the host's file system",
            self.rounds,
            self.text_bytes >> 20,
            (self.cache_frames * 4096) >> 20
        ));
        t.note(format!(
            "native: the same sources and definitions at -O2 by {} (gzip's vino_* calls stubbed); wasmtime: stock \
             wasmtime-wasi preview 1 under VINO's Config (epoch interruption, ticked every millisecond); Node: {}",
            self.clang,
            self.node.as_deref().unwrap_or("not found")
        ));
        t.note(
            "kind: file = the program's own file I/O included; compute = standard input to a discarded standard \
             output, no file system on any side (the file steps' excess over it is their I/O)",
        );
        t.note("goals: VINO within 1.1x of wasmtime (the floor for the same module) and within 1.5x of native");
        for s in &self.steps {
            t.note(format!("{}: {}", s.step, s.command));
        }
        let mut tables = vec![t];
        if let Some(step) = &self.settings_step {
            let mut w = Table::new(
                format!("What wasmtime's settings change: `{step}` on stock wasmtime"),
                &["setting", "s", "vs VINO's Config"],
            );
            for s in &self.settings {
                w.row([
                    s.setting.clone(),
                    format!("{:.3}", s.seconds),
                    fmt_ratio(s.vs_vino_config),
                ]);
            }
            w.note(format!(
                "the median of {} rounds, the settings alternating",
                self.rounds
            ));
            tables.push(w);
        }
        tables
    }

    /// Each step's time over native's, per side (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = self
            .steps
            .iter()
            .map(|s| {
                let mut bars = vec![
                    ("VINO".to_string(), s.vino_vs_native),
                    ("wasmtime".to_string(), s.wasmtime_vs_native),
                ];
                if let Some(n) = s.node_vs_native {
                    bars.push(("Node".to_string(), n));
                }
                (s.step.clone(), bars)
            })
            .collect();
        bar_chart(
            path,
            "Real programs: time over the same program on Linux",
            "time / native",
            &groups,
        )
    }
}
