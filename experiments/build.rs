//! Builds the extension-technology workloads (`workloads/*.c`) twice from the
//! same source with the same clang at -O2: natively, as a static library
//! linked into this crate, and to wasm32 modules written into `OUT_DIR` (the
//! crate embeds them with `include_bytes!`).
//!
//! Also builds the example stream grafts (`sdk/grafts/*_stream.c`) natively with
//! the same clang at -O2, the SDK's level for grafts (`vino bench streams`
//! measures them against themselves in Wasm, built by the SDK at run time):
//! each in a library of its own, its symbols prefixed so the three link together.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// The workloads, each becoming one Wasm module of the same name.
const WORKLOADS: &[&str] = &["hotlist", "md5", "logdisk"];
/// Support code for the wasm32 build only (memset/memcpy: no libc there).
const WASM_RUNTIME: &str = "wasm_rt";

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let dir = manifest.join("workloads");

    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-changed={}", dir.join("workload.h").display());
    println!(
        "cargo:rerun-if-changed={}",
        dir.join(format!("{WASM_RUNTIME}.c")).display()
    );
    for w in WORKLOADS {
        println!("cargo:rerun-if-changed={}", dir.join(format!("{w}.c")).display());
    }

    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let version = clang_version(&clang);
    println!("cargo:rustc-env=VINO_BENCH_CLANG_VERSION={version}");

    // Native: one static library with every workload.
    let mut native = cc::Build::new();
    native
        .compiler(&clang)
        .opt_level(2)
        .debug(false)
        .warnings(true)
        .flag("-std=c11")
        .include(&dir);
    for w in WORKLOADS {
        native.file(dir.join(format!("{w}.c")));
    }
    native.compile("vino_bench_workloads");

    build_native_streams(&clang, &manifest);

    // wasm32: the runtime support object first, then one module per workload.
    let rt_obj = out.join(format!("{WASM_RUNTIME}.o"));
    run(
        &clang,
        Command::new(&clang)
            .args(["--target=wasm32", "-O2", "-ffreestanding", "-fno-builtin", "-nostdlib"])
            .args(["-fvisibility=hidden", "-std=c11", "-c"])
            .arg(dir.join(format!("{WASM_RUNTIME}.c")))
            .arg("-o")
            .arg(&rt_obj),
    );
    for w in WORKLOADS {
        let wasm = out.join(format!("{w}.wasm"));
        run(
            &clang,
            Command::new(&clang)
                .args(["--target=wasm32", "-O2", "-nostdlib", "-ffreestanding"])
                .args(["-fvisibility=hidden", "-std=c11", "-Wall", "-Wextra"])
                .args(["-Wl,--no-entry", "-Wl,--export-dynamic"])
                .arg("-I")
                .arg(&dir)
                .arg(dir.join(format!("{w}.c")))
                .arg(&rt_obj)
                .arg("-o")
                .arg(&wasm),
        );
    }
}

/// The stream grafts built natively: (file stem in `sdk/grafts`, symbol prefix).
const STREAM_GRAFTS: &[(&str, &str)] = &[
    ("lz4_stream", "lz4"),
    ("chacha20poly1305_stream", "chacha"),
    ("crc32c_stream", "crc"),
];

/// Each stream graft as a native static library `vino_stream_<prefix>`, its entry point and
/// argument area renamed `<prefix>_file_stream` and `<prefix>_vino_args` (and its key control
/// `<prefix>_set_key`), compiled against the SDK header in its native mode.
fn build_native_streams(clang: &str, manifest: &std::path::Path) {
    let root = manifest.join("..");
    let include = root.join("sdk/include");
    let vendor = root.join("vendor");
    println!("cargo:rerun-if-changed={}", include.join("vino_graft.h").display());
    println!("cargo:rerun-if-changed={}", vendor.join("lz4/lz4.c").display());
    for (stem, prefix) in STREAM_GRAFTS {
        let source = root.join(format!("sdk/grafts/{stem}.c"));
        println!("cargo:rerun-if-changed={}", source.display());
        let mut b = cc::Build::new();
        b.compiler(clang)
            .opt_level(2)
            .debug(false)
            .warnings(true)
            .flag("-std=c11")
            .include(&include)
            .include(&vendor)
            .define("VINO_GRAFT_NATIVE", None);
        for symbol in ["file_stream", "vino_args", "set_key", "forget_key"] {
            b.define(symbol, Some(format!("{prefix}_{symbol}").as_str()));
        }
        b.file(&source).compile(&format!("vino_stream_{prefix}"));
    }
}

/// The first line of `clang --version`; fails the build with an explanation
/// if clang cannot be run.
fn clang_version(clang: &str) -> String {
    match Command::new(clang).arg("--version").output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap_or("clang")
            .trim()
            .to_string(),
        Ok(o) => missing_clang(clang, &format!("`{clang} --version` exited with {}", o.status)),
        Err(e) => missing_clang(clang, &format!("cannot run `{clang}`: {e}")),
    }
}

fn missing_clang(clang: &str, why: &str) -> ! {
    panic!(
        "\n\nvino-experiments: {why}.\n\
         The benchmark workloads are C compiled both natively and to wasm32, which needs\n\
         clang with the WebAssembly target and the wasm-ld linker (Debian/Ubuntu:\n\
         `apt-get install clang lld`). Set CLANG=/path/to/clang to use another clang\n\
         (currently `{clang}`).\n"
    )
}

fn run(clang: &str, cmd: &mut Command) {
    let status = cmd
        .status()
        .unwrap_or_else(|e| missing_clang(clang, &format!("cannot run `{clang}`: {e}")));
    if !status.success() {
        panic!(
            "\n\nvino-experiments: `{:?}` failed ({status}).\n\
             Building the wasm32 workloads needs clang's WebAssembly target and wasm-ld\n\
             (Debian/Ubuntu: `apt-get install clang lld`).\n",
            cmd
        );
    }
}
