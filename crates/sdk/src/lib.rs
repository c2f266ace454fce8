//! The VINO graft SDK.
//!
//! A graft is a core WebAssembly module (see `docs/graft-abi.md`). This crate carries the C side
//! of that contract and the means to use it from anywhere:
//!
//! - [`HEADER`]: `vino_graft.h`, embedded, written out to a temporary directory for every build so
//!   a `vino` binary needs no SDK checkout next to it;
//! - [`build_c`], [`build_c_bytes`], [`build_c_str`]: drive the system clang
//!   (`--target=wasm32`, no libc) to turn a C file into a graft;
//! - [`EXAMPLES`], [`HOSTILE_C`], [`HOSTILE_WAT`]: the example and hostile graft sources, embedded,
//!   and [`example_path`] / [`hostile_path`] for their files in the source tree;
//! - [`wasm`]: a minimal reader of a module's imports, exports, function types and globals, enough
//!   to check a build against the ABI without a Wasm engine.
//!
//! ```no_run
//! use std::path::Path;
//! let opts = vino_sdk::BuildOptions::default();
//! vino_sdk::build_c(Path::new("my_graft.c"), Path::new("my_graft.wasm"), &opts)?;
//! let null = vino_sdk::build_example("null", &opts)?; // embedded, works from any directory
//! let info = vino_sdk::wasm::parse(&null).expect("clang wrote a module");
//! assert!(info.export_func_type("toy_apply").is_some());
//! # Ok::<(), vino_sdk::BuildError>(())
//! ```

#![forbid(unsafe_code)]

mod cc;
mod clang;
pub mod programs;
pub mod wasm;

pub use cc::{
    COMPAT_HEADERS, COMPAT_SOURCE, DEFAULT_EMULATIONS, EMULATIONS, PORTING_ERRORS, build_program, cc, check_emulations,
    emulation_define, is_link_flag,
};
pub use clang::{
    BuildError, BuildOptions, OptLevel, Toolchain, build_c, build_c_bytes, build_c_str, clang_args, find_toolchain,
};

use std::path::{Path, PathBuf};

/// The C header for grafts, `sdk/include/vino_graft.h`.
pub const HEADER: &str = include_str!("../../../sdk/include/vino_graft.h");

/// The file name the header is included by: `#include "vino_graft.h"`.
pub const HEADER_NAME: &str = "vino_graft.h";

/// The header of programs that run as VINO processes (`vino_process.h`): the `vino` import
/// module, for grafting from inside. [`build_program`] puts it on the include path.
pub const PROCESS_HEADER: &str = include_str!("../../../sdk/include/vino_process.h");
/// The process header's file name.
pub const PROCESS_HEADER_NAME: &str = "vino_process.h";
/// Start-up code [`build_program`] links into every program: it changes to the working
/// directory `vino run --cwd` passes as `PWD` (wasi-libc itself starts at `/`).
pub const PROCESS_START: &str = include_str!("../../../sdk/lib/vino_start.c");

/// Size of the argument area (`vino_args`) every graft exports (but stream grafts, built with
/// `VINO_STREAM_ARGS`: [`STREAM_ARG_BYTES`]).
pub const ARG_BYTES: usize = 4096;

/// Size of a stream graft's argument area (`file.stream`): a 64-byte header and two chunks of
/// 64 KiB + 4 KiB.
pub const STREAM_ARG_BYTES: usize = 64 + 2 * (65536 + 4096);

/// Third-party C sources every build finds on its include path, path → text: LZ4 1.9.4
/// (`vendor/lz4`, BSD-2-Clause), which `lz4_stream.c` includes as `"lz4/lz4.c"`.
pub const BUNDLED: &[(&str, &str)] = &[
    ("lz4/lz4.h", include_str!("../../../vendor/lz4/lz4.h")),
    ("lz4/lz4.c", include_str!("../../../vendor/lz4/lz4.c")),
    ("lz4/LICENSE", include_str!("../../../vendor/lz4/LICENSE")),
];

/// Example grafts (`sdk/grafts/<name>.c`), name → C source.
pub const EXAMPLES: &[(&str, &str)] = &[
    ("null", include_str!("../../../sdk/grafts/null.c")),
    ("toy_counter", include_str!("../../../sdk/grafts/toy_counter.c")),
    ("hotlist_evict", include_str!("../../../sdk/grafts/hotlist_evict.c")),
    ("scan_evict", include_str!("../../../sdk/grafts/scan_evict.c")),
    ("index_readahead", include_str!("../../../sdk/grafts/index_readahead.c")),
    ("index_prefetch", include_str!("../../../sdk/grafts/index_prefetch.c")),
    ("sequential_ra", include_str!("../../../sdk/grafts/sequential_ra.c")),
    ("reverse_ra", include_str!("../../../sdk/grafts/reverse_ra.c")),
    ("randread_ra", include_str!("../../../sdk/grafts/randread_ra.c")),
    ("elevator", include_str!("../../../sdk/grafts/elevator.c")),
    ("fifo", include_str!("../../../sdk/grafts/fifo.c")),
    ("noswitch", include_str!("../../../sdk/grafts/noswitch.c")),
    ("lookahead_evict", include_str!("../../../sdk/grafts/lookahead_evict.c")),
    ("wisc_readahead", include_str!("../../../sdk/grafts/wisc_readahead.c")),
    ("unlink_log", include_str!("../../../sdk/grafts/unlink_log.c")),
    ("unlink_log_sync", include_str!("../../../sdk/grafts/unlink_log_sync.c")),
    ("lock_fifo", include_str!("../../../sdk/grafts/lock_fifo.c")),
    ("strict_priority", include_str!("../../../sdk/grafts/strict_priority.c")),
    ("multimedia", include_str!("../../../sdk/grafts/multimedia.c")),
    ("lz4_stream", include_str!("../../../sdk/grafts/lz4_stream.c")),
    (
        "chacha20poly1305_stream",
        include_str!("../../../sdk/grafts/chacha20poly1305_stream.c"),
    ),
    ("crc32c_stream", include_str!("../../../sdk/grafts/crc32c_stream.c")),
    ("dir_hours", include_str!("../../../sdk/grafts/dir_hours.c")),
    ("count_access", include_str!("../../../sdk/grafts/count_access.c")),
    ("private_tmp", include_str!("../../../sdk/grafts/private_tmp.c")),
    ("sha256_allow", include_str!("../../../sdk/grafts/sha256_allow.c")),
    ("reno_cc", include_str!("../../../sdk/grafts/reno_cc.c")),
    ("cubic_cc", include_str!("../../../sdk/grafts/cubic_cc.c")),
    ("shared_cc", include_str!("../../../sdk/grafts/shared_cc.c")),
    ("http_server", include_str!("../../../sdk/grafts/http_server.c")),
    ("port_priority", include_str!("../../../sdk/grafts/port_priority.c")),
    ("small_first", include_str!("../../../sdk/grafts/small_first.c")),
];

/// Hostile grafts written in C (`sdk/hostile/<name>.c`), name → C source. Each file's opening
/// comment says what it tests.
pub const HOSTILE_C: &[(&str, &str)] = &[
    ("infinite_loop", include_str!("../../../sdk/hostile/infinite_loop.c")),
    ("oob_store", include_str!("../../../sdk/hostile/oob_store.c")),
    ("memory_hog", include_str!("../../../sdk/hostile/memory_hog.c")),
    ("deep_recursion", include_str!("../../../sdk/hostile/deep_recursion.c")),
    (
        "forbidden_import",
        include_str!("../../../sdk/hostile/forbidden_import.c"),
    ),
    ("lock_hog", include_str!("../../../sdk/hostile/lock_hog.c")),
    (
        "partial_then_trap",
        include_str!("../../../sdk/hostile/partial_then_trap.c"),
    ),
    ("bad_result", include_str!("../../../sdk/hostile/bad_result.c")),
    ("bad_victim", include_str!("../../../sdk/hostile/bad_victim.c")),
    ("bad_readahead", include_str!("../../../sdk/hostile/bad_readahead.c")),
    ("bad_arg", include_str!("../../../sdk/hostile/bad_arg.c")),
    ("bad_log_ptr", include_str!("../../../sdk/hostile/bad_log_ptr.c")),
    ("bad_indirect", include_str!("../../../sdk/hostile/bad_indirect.c")),
    ("div_zero", include_str!("../../../sdk/hostile/div_zero.c")),
    (
        "corrupt_then_trap",
        include_str!("../../../sdk/hostile/corrupt_then_trap.c"),
    ),
    (
        "change_then_fail",
        include_str!("../../../sdk/hostile/change_then_fail.c"),
    ),
    (
        "stream_overflow",
        include_str!("../../../sdk/hostile/stream_overflow.c"),
    ),
    ("stream_loop", include_str!("../../../sdk/hostile/stream_loop.c")),
    (
        "stream_partial_trap",
        include_str!("../../../sdk/hostile/stream_partial_trap.c"),
    ),
    (
        "stream_wrong_length",
        include_str!("../../../sdk/hostile/stream_wrong_length.c"),
    ),
    ("stream_clock", include_str!("../../../sdk/hostile/stream_clock.c")),
];

/// Hostile grafts C cannot express (`sdk/hostile/<name>.wat`), name → WebAssembly text. wasmtime
/// (with its `wat` feature) loads these directly.
pub const HOSTILE_WAT: &[(&str, &str)] = &[
    (
        "forbidden_import_env",
        include_str!("../../../sdk/hostile/forbidden_import_env.wat"),
    ),
    ("wrong_export", include_str!("../../../sdk/hostile/wrong_export.wat")),
    (
        "wrong_signature",
        include_str!("../../../sdk/hostile/wrong_signature.wat"),
    ),
];

/// The `sdk/` directory of the source tree this crate was built from. Only meaningful where that
/// tree exists (tests, development); the embedded constants work anywhere.
pub fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk")
}

/// `sdk/grafts/<name>.c` in the source tree (`name` may carry its extension already).
pub fn example_path(name: &str) -> PathBuf {
    with_ext(sdk_dir().join("grafts").join(name), "c")
}

/// `sdk/hostile/<name>.c`, or `<name>.wat` for a [`HOSTILE_WAT`] entry (`name` may carry its
/// extension already).
pub fn hostile_path(name: &str) -> PathBuf {
    let ext = if lookup(HOSTILE_WAT, name).is_some() {
        "wat"
    } else {
        "c"
    };
    with_ext(sdk_dir().join("hostile").join(name), ext)
}

/// The embedded C source of an example or hostile C graft, by name.
pub fn example_source(name: &str) -> Option<&'static str> {
    lookup(EXAMPLES, name).or_else(|| lookup(HOSTILE_C, name))
}

/// Builds an embedded example or hostile C graft ([`EXAMPLES`], [`HOSTILE_C`]) by name.
pub fn build_example(name: &str, opts: &BuildOptions) -> Result<Vec<u8>, BuildError> {
    let source = example_source(name).ok_or_else(|| BuildError::UnknownExample(name.to_owned()))?;
    build_c_str(&format!("{}.c", strip_ext(name)), source, opts)
}

/// The ways `sdk/hostile/change_then_fail.c` ends a call after asking for its change (the value
/// for its `vino_ctl_fail`), each with a word of the failure the kernel records for it.
pub const CHANGE_THEN_FAIL_MODES: [(i64, &str); 3] = [(1, "unreachable"), (2, "budget"), (3, "invalid result")];

/// `sdk/hostile/change_then_fail.c` built for `graftpoint`: `file.compute_ra`,
/// `vas.pick_victim`, `lock.grant` or `sched.pick_thread` (the graftpoints whose grafts may
/// change kernel state).
pub fn change_then_fail(graftpoint: &str) -> Result<Vec<u8>, BuildError> {
    let define = match graftpoint {
        "vas.pick_victim" => Some("CHANGE_VICTIM"),
        "lock.grant" => Some("CHANGE_GRANT"),
        "sched.pick_thread" => Some("CHANGE_THREAD"),
        "file.compute_ra" => None,
        other => return Err(BuildError::UnknownExample(format!("change_then_fail for {other}"))),
    };
    let opts = BuildOptions {
        defines: define.map(|d| (d.to_string(), None)).into_iter().collect(),
        ..BuildOptions::default()
    };
    build_example("change_then_fail", &opts)
}

/// Writes the header into `dir` (created if missing) and returns the path of the file.
pub fn write_header(dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(HEADER_NAME);
    std::fs::write(&path, HEADER)?;
    Ok(path)
}

fn strip_ext(name: &str) -> &str {
    name.strip_suffix(".c")
        .or_else(|| name.strip_suffix(".wat"))
        .unwrap_or(name)
}

fn lookup(table: &[(&str, &'static str)], name: &str) -> Option<&'static str> {
    let name = strip_ext(name);
    table.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

fn with_ext(path: PathBuf, ext: &str) -> PathBuf {
    if path.extension().is_some() {
        path
    } else {
        path.with_extension(ext)
    }
}

#[cfg(test)]
mod tests;
