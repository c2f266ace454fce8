//! `vino bench native`: real programs as VINO processes against the same programs on Linux.
//!
//! The programs are the SDK's (`vino_sdk::programs`: SQLite under a small shell, gzip over zlib,
//! bzip2 1.0.8), each run three ways on the same inputs, one after the other:
//!
//! * VINO: the wasm32-wasi build run by vino-wasi as a VINO process on the kernel of a daemon
//!   started on a fresh image (its files in VINO's file system and page cache);
//! * native: the same C sources (same definitions, `-O2`) compiled for the host by the same
//!   clang, run on Linux in a directory of the host's file system;
//! * wasmtime-wasi: the same `.wasm` run by stock wasmtime-wasi (preview 1) with that host
//!   directory preopened as `/`.
//!
//! The steps: SQLite inserting rows one `INSERT` each in one transaction (the script on standard
//! input), then gzip, gunzip, bzip2 and bunzip2 of generated text (E7's), each file compressed in
//! place and restored; the restored text is compared with the original on every side. Times are
//! wall-clock, from start to exit, compiling excluded (the native build, the `.wasm` compiled
//! once per runtime beforehand).

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
}

impl NativeOptions {
    pub fn new(quick: bool) -> NativeOptions {
        NativeOptions {
            quick,
            scratch: PathBuf::from("target/vino-bench"),
            sqlite_rows: if quick { 5_000 } else { 100_000 },
            text_bytes: if quick { 1 << 20 } else { 20 << 20 },
            cache_frames: 32_768,
        }
    }
}

/// One step's times on the three sides, seconds, and the ratios.
#[derive(Clone, Debug, Serialize)]
pub struct StepResult {
    pub step: String,
    pub command: String,
    pub vino_s: f64,
    pub native_s: f64,
    pub wasmtime_s: f64,
    pub vino_vs_native: f64,
    pub vino_vs_wasmtime: f64,
    pub wasmtime_vs_native: f64,
    pub meets_goal: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct NativeReport {
    pub sqlite_rows: u64,
    pub text_bytes: usize,
    pub cache_frames: usize,
    pub clang: String,
    pub steps: Vec<StepResult>,
}

/// A step: the program, its arguments (the first its name; `/x` is file `x` of the side's file
/// system), and the file on its standard input, if any.
struct Step {
    name: String,
    program: &'static str,
    args: Vec<&'static str>,
    stdin: Option<&'static str>,
}

/// The SQLite script, made a host file for every side's standard input.
const SCRIPT: &str = "insert.sql";
/// The text's name in every side's file system.
const TEXT: &str = "text";

fn steps(opts: &NativeOptions) -> Vec<Step> {
    let step = |name: String, program, args: &[&'static str], stdin| Step {
        name,
        program,
        args: args.to_vec(),
        stdin,
    };
    vec![
        step(
            format!("sqlite3: {} inserts in a transaction", opts.sqlite_rows),
            "sqlite3",
            &["sqlite3", "/bench.db"],
            Some(SCRIPT),
        ),
        step("gzip -6".into(), "gzip", &["gzip", "-6", "/text"], None),
        step("gunzip".into(), "gzip", &["gunzip", "/text.gz"], None),
        step("bzip2 -9".into(), "bzip2", &["bzip2", "-9", "/text"], None),
        step("bunzip2".into(), "bzip2", &["bzip2", "-d", "/text.bz2"], None),
    ]
}

/// One INSERT a row, in one transaction, and a check the program prints.
fn sqlite_script(rows: u64) -> String {
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

fn build(dir: &Path, progress: &mut dyn FnMut(&str)) -> Result<Built> {
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
    for name in vino_sdk::programs::PROGRAMS {
        progress(&format!("building {name} for wasm32-wasi"));
        let out = dir.join(format!("{name}.wasm"));
        vino_sdk::programs::build_named(name, &out, &opts).map_err(|e| anyhow!("building {name}.wasm: {e}"))?;
        built.wasm.push((name, fs::read(&out)?));
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

/// The side's path of a program's argument: `/x` is `x` in `root`.
fn host_arg(root: &Path, a: &str) -> std::ffi::OsString {
    match a.strip_prefix('/') {
        Some(rel) => root.join(rel).into_os_string(),
        None => a.into(),
    }
}

fn run_native(exe: &Path, root: &Path, step: &Step) -> Result<f64> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg0(step.args[0])
        .args(step.args[1..].iter().map(|a| host_arg(root, a)))
        .current_dir(root)
        .stdout(std::process::Stdio::null());
    cmd.stdin(match step.stdin {
        Some(f) => fs::File::open(root.join(f))?.into(),
        None => std::process::Stdio::null(),
    });
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

/// Stock wasmtime-wasi (preview 1) with `root` preopened as `/`.
struct Wasmtime {
    engine: wasmtime::Engine,
    modules: Vec<(&'static str, wasmtime::Module)>,
}

impl Wasmtime {
    fn new(built: &Built) -> Result<Wasmtime> {
        let engine = wasmtime::Engine::default();
        let modules = built
            .wasm
            .iter()
            .map(|(n, w)| Ok((*n, wasmtime::Module::new(&engine, w)?)))
            .collect::<Result<_>>()?;
        Ok(Wasmtime { engine, modules })
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

/// The VINO side: the programs compiled once, run on a daemon's kernel.
struct Vino {
    programs: Vec<(&'static str, vino_wasi::Program)>,
}

impl Vino {
    fn new(built: &Built) -> Result<Vino> {
        let programs = built
            .wasm
            .iter()
            .map(|(n, w)| Ok((*n, vino_wasi::Program::compile(w, vino_wasi::ProgramLimits::default())?)))
            .collect::<Result<_>>()?;
        Ok(Vino { programs })
    }

    fn run(&self, kernel: &Arc<vino_kernel::Kernel>, host: &Path, step: &Step) -> Result<f64> {
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

/// A file of the VINO side, written or read by a kernel process of its own.
fn vino_file(kernel: &Arc<vino_kernel::Kernel>, path: &str, write: Option<&[u8]>) -> Result<Vec<u8>> {
    let p = kernel.spawn(Credentials::root());
    let r = (|| -> Result<Vec<u8>> {
        let e = |e: vino_kernel::SysError| anyhow!("{path} in VINO: {e}");
        if let Some(data) = write {
            let fd = p.open(path, vino_kernel::OpenFlags::create()).map_err(e)?;
            let mut done = 0;
            while done < data.len() {
                done += p.pwrite(fd, &data[done..], done as u64).map_err(e)?;
            }
            p.close(fd).map_err(e)?;
            return Ok(Vec::new());
        }
        let fd = p.open(path, vino_kernel::OpenFlags::read_only()).map_err(e)?;
        let mut all = vec![0u8; p.fstat(fd).map_err(e)?.size as usize];
        let n = p.pread(fd, &mut all, 0).map_err(e)?;
        all.truncate(n);
        p.close(fd).map_err(e)?;
        Ok(all)
    })();
    kernel.exit(p.pid());
    r
}

pub fn run(opts: &NativeOptions, progress: &mut dyn FnMut(&str)) -> Result<NativeReport> {
    fs::create_dir_all(&opts.scratch).with_context(|| format!("creating {}", opts.scratch.display()))?;
    let dir = tempfile::tempdir_in(&opts.scratch)?;
    let built = build(&dir.path().join("build"), progress)?;
    progress("compiling the programs for vino-wasi and wasmtime-wasi");
    let vino = Vino::new(&built)?;
    let wasmtime = Wasmtime::new(&built)?;
    progress("generating the inputs");
    let text = generate_text(opts.text_bytes, 0xE11);
    let script = sqlite_script(opts.sqlite_rows);
    let steps = steps(opts);
    // The host's two directories (native, wasmtime-wasi), each with the inputs.
    let mut host_times = Vec::new();
    for side in ["native", "wasmtime"] {
        let root = dir.path().join(side);
        fs::create_dir_all(&root)?;
        fs::write(root.join(SCRIPT), &script)?;
        fs::write(root.join(TEXT), &text)?;
        let mut times = Vec::new();
        for step in &steps {
            progress(&format!("{side}: {}", step.name));
            times.push(if side == "native" {
                let exe = &built.native.iter().find(|n| n.0 == step.program).expect("built").1;
                run_native(exe, &root, step)?
            } else {
                wasmtime.run(&root, step)?
            });
        }
        ensure!(
            fs::read(root.join(TEXT))? == text,
            "{side}: the text restored is not the original"
        );
        host_times.push(times);
    }
    progress("starting a daemon on a fresh image");
    let vdir = dir.path().join("vino");
    fs::create_dir_all(&vdir)?;
    fs::write(vdir.join(SCRIPT), &script)?;
    let handle = daemon::start_daemon(&vdir, opts.cache_frames).map_err(anyhow::Error::msg)?;
    let vino_times = (|| -> Result<Vec<f64>> {
        let kernel = handle.kernel();
        vino_file(kernel, &format!("/{TEXT}"), Some(&text))?;
        let mut times = Vec::new();
        for step in &steps {
            progress(&format!("VINO: {}", step.name));
            times.push(vino.run(kernel, &vdir, step)?);
        }
        ensure!(
            vino_file(kernel, &format!("/{TEXT}"), None)? == text,
            "VINO: the text restored is not the original"
        );
        Ok(times)
    })();
    handle
        .shutdown()
        .map_err(|e| anyhow!("shutting the daemon down: {e}"))?;
    let vino_times = vino_times?;
    let steps = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let (v, n, w) = (vino_times[i], host_times[0][i], host_times[1][i]);
            StepResult {
                step: s.name.clone(),
                command: s.args.join(" ") + if s.stdin.is_some() { " < script" } else { "" },
                vino_s: v,
                native_s: n,
                wasmtime_s: w,
                vino_vs_native: v / n,
                vino_vs_wasmtime: v / w,
                wasmtime_vs_native: w / n,
                meets_goal: v / n <= GOAL_VS_NATIVE,
            }
        })
        .collect();
    Ok(NativeReport {
        sqlite_rows: opts.sqlite_rows,
        text_bytes: opts.text_bytes,
        cache_frames: opts.cache_frames,
        clang: built.clang,
        steps,
    })
}

impl NativeReport {
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            "Real programs: VINO processes against the same C on Linux and the same .wasm on wasmtime-wasi",
            &[
                "step",
                "VINO s",
                "native s",
                "wasmtime-wasi s",
                "VINO / native",
                "VINO / wasmtime",
                "wasmtime / native",
                "within 1.5x",
            ],
        );
        for s in &self.steps {
            t.row([
                s.step.clone(),
                format!("{:.3}", s.vino_s),
                format!("{:.3}", s.native_s),
                format!("{:.3}", s.wasmtime_s),
                fmt_ratio(s.vino_vs_native),
                fmt_ratio(s.vino_vs_wasmtime),
                fmt_ratio(s.wasmtime_vs_native),
                if s.meets_goal { "yes".into() } else { "no".into() },
            ]);
        }
        t.note(format!(
            "one run; {} MiB of text (E7's generator); VINO: a daemon's kernel on a fresh image, {} MiB page cache; \
             native and wasmtime-wasi: a directory on the host's file system",
            self.text_bytes >> 20,
            (self.cache_frames * 4096) >> 20
        ));
        t.note(format!(
            "native: the same sources and definitions at -O2 by {} (gzip's vino_* calls stubbed); \
             wasmtime-wasi: stock preview 1, the host directory preopened as /",
            self.clang
        ));
        t.note("goal: VINO within 1.5x of native");
        for s in &self.steps {
            t.note(format!("{}: {}", s.step, s.command));
        }
        vec![t]
    }

    /// Each step's time over native's, per side (SVG).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = self
            .steps
            .iter()
            .map(|s| {
                (
                    s.step.clone(),
                    vec![
                        ("VINO".to_string(), s.vino_vs_native),
                        ("wasmtime-wasi".to_string(), s.wasmtime_vs_native),
                    ],
                )
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
