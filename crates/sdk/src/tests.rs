//! These tests need the system clang and lld (`clang --target=wasm32`).

use super::*;
use crate::wasm::{ExternKind, FuncType, ModuleInfo, ValType, parse};
use std::collections::BTreeSet;

use ValType::{I32, I64};

const ALWAYS: &[&str] = &["vino_now_ns", "vino_log"];
const TOY: &[&str] = &["vino_toy_get", "vino_toy_set", "vino_toy_call_inner"];
const EVENT: &[&str] = &["vino_file_write", "vino_file_fsync"];

fn ft(params: &[ValType], results: &[ValType]) -> FuncType {
    FuncType {
        params: params.to_vec(),
        results: results.to_vec(),
    }
}

/// The graftpoint function a graft exports and its type, per docs/graft-abi.md.
fn graftpoint(export: &str) -> FuncType {
    match export {
        "toy_apply" => ft(&[I64], &[I64]),
        "vas_pick_victim" => ft(&[I32], &[I32]),
        "file_compute_ra" => ft(&[I64, I32, I64], &[I32]),
        "disk_pick_request" => ft(&[I32, I64], &[I32]),
        "file_block_buddy" => ft(&[I64, I64, I64, I32, I32, I64], &[I64]),
        "event_fs_open" | "event_fs_close" | "event_fs_create" | "event_fs_unlink" | "event_fs_modify" => {
            ft(&[I32, I64, I64, I64, I64, I32], &[I32])
        }
        "lock_grant" => ft(&[I32, I32], &[I64]),
        "sched_pick_next" | "sched_pick_thread" | "net_pick_packet" => ft(&[I32, I32], &[I32]),
        "event_timer" => ft(&[I64, I64], &[I32]),
        "file_stream" => ft(&[I32, I64, I32], &[I32]),
        "dir_access" => ft(&[I32, I32, I32, I32, I64, I32, I64], &[I32]),
        "dir_lookup" => ft(&[I64, I32], &[I32]),
        "exec_verify" => ft(&[I32, I32], &[I32]),
        "net_congestion" => ft(&[I32, I64, I64, I64], &[I64]),
        "event_net_packet" => ft(&[I32, I32, I32], &[I32]),
        other => panic!("unknown graftpoint export {other}"),
    }
}

fn build(name: &str) -> (Vec<u8>, ModuleInfo) {
    let bytes = build_example(name, &BuildOptions::default()).unwrap_or_else(|e| panic!("building {name}: {e}"));
    assert!(bytes.starts_with(&wasm::MAGIC), "{name}: no wasm magic");
    let info = parse(&bytes).unwrap_or_else(|e| panic!("parsing {name}: {e}"));
    (bytes, info)
}

/// What every C graft built with the SDK must look like.
fn check_common(name: &str, m: &ModuleInfo, allowed_imports: &[&str]) {
    let mem = m.export("memory").unwrap_or_else(|| panic!("{name}: no memory export"));
    assert_eq!(mem.kind, ExternKind::Memory, "{name}");
    assert_eq!(m.memories.len(), 1, "{name}: one defined memory");
    assert_eq!(
        m.memories[0].maximum, None,
        "{name}: the kernel sets the cap, not the graft"
    );

    let args = m
        .export_global("vino_args")
        .unwrap_or_else(|| panic!("{name}: no vino_args"));
    assert_eq!(
        (args.ty, args.mutable),
        (I32, false),
        "{name}: vino_args is an immutable i32"
    );
    let addr = args
        .init
        .unwrap_or_else(|| panic!("{name}: vino_args has no constant address"));
    assert_eq!(addr % 16, 0, "{name}: vino_args is 16-aligned");
    let size = if m.export_func_type("file_stream").is_some() {
        STREAM_ARG_BYTES
    } else {
        ARG_BYTES
    };
    let end = addr as u64 + size as u64;
    assert!(
        end <= m.memories[0].initial * 65536,
        "{name}: vino_args inside the initial memory"
    );

    for imp in &m.imports {
        assert_eq!(imp.kind, ExternKind::Func, "{name}: imports only functions");
        assert_eq!(imp.module, "vino", "{name}: imports only from `vino`");
        assert!(
            ALWAYS.contains(&imp.name.as_str()) || allowed_imports.contains(&imp.name.as_str()),
            "{name}: import {} not allowed",
            imp.name
        );
    }
    for e in &m.exports {
        // Nothing of the header's plumbing leaks out.
        assert!(
            ![
                "memset",
                "memcpy",
                "memmove",
                "__stack_pointer",
                "__indirect_function_table"
            ]
            .contains(&e.name.as_str()),
            "{name}: exports {}",
            e.name
        );
        if let Some(ctl) = e.name.strip_prefix("vino_ctl_") {
            let ty = m.export_func_type(&e.name).unwrap_or_else(|| panic!("{name}: {ctl}"));
            assert!(ty.params.len() <= 8, "{name}: {ctl} takes at most 8 parameters");
            assert!(ty.params.iter().all(|t| matches!(t, I32 | I64)), "{name}: {ctl} {ty}");
            assert!(matches!(ty.results[..], [I32] | [I64]), "{name}: {ctl} {ty}");
        }
    }
}

fn exports_of(m: &ModuleInfo, kind: ExternKind) -> BTreeSet<String> {
    m.exports
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.name.clone())
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn embedded_lists_match_the_source_tree() {
    let listed = |dir: &str, ext: &str| -> BTreeSet<String> {
        std::fs::read_dir(sdk_dir().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == ext))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    let names = |t: &[(&str, &str)]| t.iter().map(|(n, _)| n.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(listed("grafts", "c"), names(EXAMPLES));
    assert_eq!(listed("hostile", "c"), names(HOSTILE_C));
    assert_eq!(listed("hostile", "wat"), names(HOSTILE_WAT));
    for (n, src) in EXAMPLES {
        assert_eq!(std::fs::read_to_string(example_path(n)).unwrap(), *src);
    }
    for (n, src) in HOSTILE_C.iter().chain(HOSTILE_WAT) {
        assert_eq!(std::fs::read_to_string(hostile_path(n)).unwrap(), *src);
    }
    assert_eq!(
        std::fs::read_to_string(sdk_dir().join("include/vino_graft.h")).unwrap(),
        HEADER
    );
}

#[test]
fn examples_build_and_follow_the_abi() {
    // name, graftpoint export, extra imports allowed, control functions, shared data
    type Case = (
        &'static str,
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
        &'static [&'static str],
    );
    let cases: &[Case] = &[
        ("null", "toy_apply", &[], &[], &[]),
        ("toy_counter", "toy_apply", TOY, &[], &[]),
        (
            "hotlist_evict",
            "vas_pick_victim",
            TOY,
            &["hot_add", "hot_remove", "hot_clear"],
            &["hot_list"],
        ),
        (
            "index_readahead",
            "file_compute_ra",
            TOY,
            &["ra_push", "ra_reset", "ra_set_record_size", "ra_set_depth"],
            &["ra_params", "ra_index"],
        ),
        (
            "scan_evict",
            "vas_pick_victim",
            &["vino_page_hint"],
            &["scan_set"],
            &["scan"],
        ),
        (
            "index_prefetch",
            "file_compute_ra",
            &["vino_prefetch"],
            &["ip_push", "ip_cursor", "ip_fail"],
            &["ip_scan"],
        ),
        (
            "sequential_ra",
            "file_compute_ra",
            TOY,
            &["seq_set_blocks"],
            &["seq_params"],
        ),
        (
            "reverse_ra",
            "file_compute_ra",
            &[],
            &["rev_set_blocks"],
            &["rev_params"],
        ),
        ("randread_ra", "file_compute_ra", &[], &[], &[]),
        ("elevator", "disk_pick_request", &[], &["set_age_cap"], &[]),
        ("fifo", "disk_pick_request", &[], &[], &[]),
        ("noswitch", "file_block_buddy", &[], &[], &[]),
        (
            "lookahead_evict",
            "vas_pick_victim",
            &[],
            &["la_start", "la_stop", "la_set", "la_put", "la_cursor"],
            &["la_ctl", "la_plan"],
        ),
        (
            "wisc_readahead",
            "file_compute_ra",
            &[],
            &["wra_start", "wra_stop"],
            &["wra_ctl", "wra_plan"],
        ),
        ("unlink_log", "event_fs_unlink", EVENT, &["log_set_fd"], &[]),
        ("unlink_log_sync", "event_fs_unlink", EVENT, &["log_set_fd"], &[]),
        ("lock_fifo", "lock_grant", &[], &[], &[]),
        ("strict_priority", "sched_pick_thread", &[], &["set_priority"], &[]),
        ("multimedia", "sched_pick_thread", &[], &["set_period"], &[]),
        ("lz4_stream", "file_stream", &[], &[], &[]),
        (
            "chacha20poly1305_stream",
            "file_stream",
            &[],
            &["set_key", "forget_key"],
            &[],
        ),
        ("crc32c_stream", "file_stream", &[], &[], &[]),
        (
            "dir_hours",
            "dir_access",
            &[],
            &["set_owner", "set_hours", "ban"],
            &["policy"],
        ),
        ("count_access", "dir_access", &[], &[], &["asked", "name_bytes"]),
        ("private_tmp", "dir_lookup", &[], &[], &["private_tmp"]),
        (
            "sha256_allow",
            "exec_verify",
            &[],
            &["allow", "clear", "count"],
            &["sha256_allow_list", "sha256_allow_count"],
        ),
        ("reno_cc", "net_congestion", &[], &[], &[]),
        ("cubic_cc", "net_congestion", &[], &[], &[]),
        ("shared_cc", "net_congestion", &[], &["window", "connections"], &[]),
        (
            "http_server",
            "event_net_packet",
            &["vino_net_stat"],
            &[],
            &["http_root"],
        ),
        ("port_priority", "net_pick_packet", &[], &["set_port"], &[]),
        ("small_first", "net_pick_packet", &[], &[], &[]),
    ];
    assert_eq!(cases.len(), EXAMPLES.len());
    for &(name, point, allowed, controls, shared) in cases {
        let (_, m) = build(name);
        check_common(name, &m, allowed);
        assert_eq!(m.export_func_type(point), Some(&graftpoint(point)), "{name}: {point}");
        let mut funcs = set(&[point]);
        funcs.extend(controls.iter().map(|c| format!("vino_ctl_{c}")));
        assert_eq!(exports_of(&m, ExternKind::Func), funcs, "{name}: function exports");
        let mut globals = set(&["vino_args"]);
        globals.extend(shared.iter().map(|s| s.to_string()));
        assert_eq!(exports_of(&m, ExternKind::Global), globals, "{name}: global exports");
        for g in shared {
            let g = m.export_global(g).unwrap();
            assert_eq!(g.init.unwrap() % 8, 0, "{name}: shared data 8-aligned");
        }
    }
    // The toy-cell graft really calls the kernel.
    let (_, m) = build("toy_counter");
    let imports: BTreeSet<_> = m.imports.iter().map(|i| i.name.clone()).collect();
    assert_eq!(imports, set(&["vino_toy_get", "vino_toy_set"]));
    // The bookkeeping grafts write through the deferred file calls; only the sync one forces.
    let imports = |n| build(n).1.imports.into_iter().map(|i| i.name).collect::<BTreeSet<_>>();
    assert_eq!(imports("unlink_log"), set(&["vino_file_write"]));
    assert_eq!(imports("unlink_log_sync"), set(&["vino_file_write", "vino_file_fsync"]));
}

#[test]
fn hostile_c_grafts_build() {
    for &(name, _) in HOSTILE_C {
        let (bytes, m) = build(name);
        let point = match name {
            "bad_victim" => "vas_pick_victim",
            "bad_readahead" | "change_then_fail" => "file_compute_ra",
            n if n.starts_with("stream_") => "file_stream",
            _ => "toy_apply",
        };
        assert_eq!(m.export_func_type(point), Some(&graftpoint(point)), "{name}: {point}");
        if name == "forbidden_import" {
            let imp = &m.imports[..];
            assert!(
                imp.iter().any(|i| i.module == "vino" && i.name == "vino_format_disk"),
                "{name}: {imp:?}"
            );
        } else if name == "change_then_fail" {
            check_common(name, &m, &["vino_prefetch"]);
        } else {
            check_common(name, &m, TOY);
        }
        assert!(bytes.len() < 4096, "{name}: {} bytes", bytes.len());
    }
    // The graft that changes kernel state and then fails builds for each of the four
    // graftpoints with such a function, importing just that one.
    for (point, entry, function) in [
        ("file.compute_ra", "file_compute_ra", "vino_prefetch"),
        ("vas.pick_victim", "vas_pick_victim", "vino_page_hint"),
        ("lock.grant", "lock_grant", "vino_lock_requeue"),
        ("sched.pick_thread", "sched_pick_thread", "vino_tickets_give"),
    ] {
        let m = parse(&crate::change_then_fail(point).unwrap()).unwrap();
        assert_eq!(m.export_func_type(entry), Some(&graftpoint(entry)), "{point}");
        check_common(point, &m, &[function]);
        let imports: Vec<_> = m.imports.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(imports, [function], "{point}");
    }
    assert!(crate::change_then_fail("toy.apply").is_err());
    // The writes the kernel must undo, and the calls whose arguments it must check, are there.
    let imports = |n| build(n).1.imports.into_iter().map(|i| i.name).collect::<Vec<_>>();
    assert_eq!(imports("lock_hog"), ["vino_toy_set"]);
    assert_eq!(imports("partial_then_trap"), ["vino_toy_set"]);
    assert_eq!(imports("bad_arg"), ["vino_toy_get"]);
    assert_eq!(imports("bad_log_ptr"), ["vino_log"]);
}

/// `-DVINO_TOY` turns a graft written for the page cache's graftpoints into one for the toy
/// kernel's, which have the same signatures: only the entry point's name changes.
#[test]
fn vino_toy_renames_the_real_entry_points_to_the_toys() {
    let toy = BuildOptions {
        defines: vec![("VINO_TOY".into(), None)],
        ..BuildOptions::default()
    };
    for (name, real, renamed) in [
        ("hotlist_evict", "vas_pick_victim", "toy_pick_victim"),
        ("sequential_ra", "file_compute_ra", "toy_compute_ra"),
        ("bad_victim", "vas_pick_victim", "toy_pick_victim"),
    ] {
        let (_, m) = build(name);
        let bytes = build_example(name, &toy).unwrap_or_else(|e| panic!("building {name} for the toy: {e}"));
        let t = parse(&bytes).unwrap();
        assert_eq!(t.export_func_type(renamed), m.export_func_type(real), "{name}");
        assert!(t.export(real).is_none() && m.export(renamed).is_none(), "{name}");
        let others = |m: &ModuleInfo, skip: &str| {
            let mut e = exports_of(m, ExternKind::Func);
            e.remove(skip);
            e
        };
        assert_eq!(others(&t, renamed), others(&m, real), "{name}: the rest is the same");
    }
    // Grafts for other graftpoints are untouched.
    let plain = build("elevator").0;
    assert_eq!(build_example("elevator", &toy).unwrap(), plain);
}

/// The .wat hostile grafts are compiled by the kernel (wasmtime's `wat` feature); here they are
/// checked with wabt's wat2wasm when it is installed.
#[test]
fn hostile_wat_grafts_say_what_they_test() {
    let tmp = tempfile::tempdir().unwrap();
    for &(name, text) in HOSTILE_WAT {
        assert!(text.starts_with(";;"), "{name}: opening comment");
        let out = tmp.path().join(format!("{name}.wasm"));
        let status = std::process::Command::new("wat2wasm")
            .arg(hostile_path(name))
            .arg("-o")
            .arg(&out)
            .status();
        let Ok(status) = status else {
            eprintln!("wat2wasm not installed: not checking {name}");
            continue;
        };
        assert!(status.success(), "{name}: wat2wasm failed");
        let m = parse(&std::fs::read(&out).unwrap()).unwrap();
        match name {
            "forbidden_import_env" => {
                assert_eq!(m.imports[0].module, "env");
                assert_eq!(m.export_func_type("toy_apply"), Some(&graftpoint("toy_apply")));
            }
            "wrong_export" => {
                assert!(m.export("toy_apply").is_none());
                assert!(m.export("memory").is_some());
            }
            "wrong_signature" => {
                assert_eq!(m.export_func_type("toy_apply"), Some(&ft(&[I32], &[I32])));
            }
            other => panic!("no check for {other}"),
        }
    }
}

#[test]
fn build_c_writes_a_file_and_build_c_bytes_returns_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("null.wasm");
    build_c(&example_path("null"), &out, &BuildOptions::default()).unwrap();
    let from_file = std::fs::read(&out).unwrap();
    assert!(from_file.starts_with(&wasm::MAGIC));
    let bytes = build_c_bytes(&example_path("null.c"), &BuildOptions::default()).unwrap();
    assert_eq!(bytes, from_file, "builds are deterministic");
    let hostile = build_c_bytes(&hostile_path("div_zero"), &BuildOptions::default()).unwrap();
    assert!(hostile.starts_with(&wasm::MAGIC));
}

#[test]
fn header_plumbing_works_and_stays_private() {
    // A struct copy makes clang call memcpy; an array zeroing, memset. Controls with 8 params.
    let src = r#"
        #include "vino_graft.h"
        struct big { uint64_t v[64]; };
        VINO_SHARED struct big table;
        static struct big scratch;
        VINO_CONTROL(copy) int32_t copy(int32_t i) {
            struct big b = table;
            b.v[i & 63] += 1;
            scratch = b;
            return (int32_t)scratch.v[0];
        }
        VINO_CONTROL(eight) int64_t eight(int32_t a, int64_t b, int32_t c, int64_t d,
                                          int32_t e, int64_t f, int32_t g, int64_t h) {
            return a + b + c + d + e + f + g + h;
        }
        VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t arg) {
            uint8_t buf[300];
            __builtin_memset(buf, (int)arg, sizeof buf);
            vino_log_str("toy_apply called");
            vino_log((const char *)buf, 10);
            return arg + vino_now_ns() + buf[299];
        }
    "#;
    for file in ["plumbing.c", "plumbing.cpp"] {
        let bytes = build_c_str(file, src, &BuildOptions::default()).unwrap();
        let m = parse(&bytes).unwrap();
        check_common(file, &m, &[]);
        assert_eq!(
            exports_of(&m, ExternKind::Func),
            set(&["toy_apply", "vino_ctl_copy", "vino_ctl_eight"]),
            "{file}"
        );
        assert_eq!(
            exports_of(&m, ExternKind::Global),
            set(&["table", "vino_args"]),
            "{file}"
        );
        assert_eq!(m.export_func_type("vino_ctl_eight").unwrap().params.len(), 8);
    }
}

#[test]
fn a_graftpoint_prototype_catches_a_wrong_signature() {
    let src = "#include \"vino_graft.h\"\nVINO_GRAFT(toy_apply) int32_t toy_apply(int32_t a) { return a; }\n";
    let err = build_c_str("wrong.c", src, &BuildOptions::default()).unwrap_err();
    assert!(err.to_string().contains("conflicting types"), "{err}");
    // ... unless the graft asks for the freedom.
    let opts = BuildOptions {
        defines: vec![("VINO_NO_GRAFTPOINT_PROTOTYPES".into(), None)],
        ..BuildOptions::default()
    };
    let m = parse(&build_c_str("wrong.c", src, &opts).unwrap()).unwrap();
    assert_eq!(m.export_func_type("toy_apply"), Some(&ft(&[I32], &[I32])));
}

#[test]
fn compile_errors_carry_clangs_message() {
    let err = build_c_str("broken.c", "int x = ;\n", &BuildOptions::default()).unwrap_err();
    match &err {
        BuildError::Compile {
            stderr, command, path, ..
        } => {
            assert!(stderr.contains("broken.c:1:9: error"), "{stderr}");
            assert!(command.contains("--target=wasm32"), "{command}");
            assert!(path.ends_with("broken.c"));
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("expected expression"), "{err}");
}

#[test]
fn calling_libc_is_a_link_error() {
    let src = "#include \"vino_graft.h\"\nint32_t strlen(const char *);\n\
               VINO_GRAFT(toy_apply) int64_t toy_apply(int64_t a) { return strlen(\"x\") + a; }\n";
    let err = build_c_str("libc.c", src, &BuildOptions::default()).unwrap_err();
    assert!(err.to_string().contains("undefined symbol: strlen"), "{err}");
    assert!(matches!(err, BuildError::Compile { .. }));
}

#[test]
fn missing_clang_and_missing_source_are_clear() {
    let opts = BuildOptions {
        clang: Some("/nonexistent/clang-0".into()),
        ..Default::default()
    };
    let err = build_c_bytes(&example_path("null"), &opts).unwrap_err();
    assert!(matches!(err, BuildError::ClangNotFound { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("install clang and lld") && msg.contains("/nonexistent/clang-0"),
        "{msg}"
    );

    let err = build_c_bytes(Path::new("/nonexistent/graft.c"), &BuildOptions::default());
    assert!(matches!(err, Err(BuildError::Io { .. })), "{err:?}");
    let err = build_example("no_such_graft", &BuildOptions::default()).unwrap_err();
    assert!(matches!(err, BuildError::UnknownExample(_)), "{err:?}");
}

#[test]
fn toolchain_and_command_line() {
    let tc = find_toolchain(&BuildOptions::default()).unwrap();
    assert!(tc.version.contains("clang"), "{tc:?}");
    assert!(tc.wasm_ld.is_file(), "{tc:?}");
    let args = clang_args(
        Path::new("g.c"),
        Path::new("g.wasm"),
        Path::new("/inc"),
        &BuildOptions {
            stack_size: 8192,
            ..Default::default()
        },
    );
    let args: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    for want in [
        "--target=wasm32",
        "-nostdlib",
        "-ffreestanding",
        "-Wl,-z,stack-size=8192",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} missing from {args:?}");
    }
    assert!(
        !args.iter().any(|a| a.contains("memory")),
        "memory is the kernel's to cap: {args:?}"
    );
    assert_eq!(&args[args.len() - 3..], ["g.c", "-o", "g.wasm"]);
}

#[test]
fn stack_size_option_moves_the_data() {
    let small = BuildOptions {
        stack_size: 16 * 1024,
        ..Default::default()
    };
    let m = parse(&build_example("null", &small).unwrap()).unwrap();
    // --stack-first: the data (here vino_args) starts right after the stack.
    assert_eq!(m.export_global("vino_args").unwrap().init, Some(16 * 1024));
    let m = parse(&build_example("null", &BuildOptions::default()).unwrap()).unwrap();
    assert_eq!(m.export_global("vino_args").unwrap().init, Some(64 * 1024));
}

#[test]
fn the_reader_refuses_garbage_without_panicking() {
    assert!(parse(b"").is_err());
    assert!(parse(b"garbage!").is_err());
    assert!(parse(b"\0asm\x02\0\0\0").is_err());
    let (good, _) = build("hotlist_evict");
    // Truncations and byte flips: an error or a (wrong) answer, never a panic or a hang.
    for cut in 0..good.len() {
        let _ = parse(&good[..cut]);
    }
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for _ in 0..2000 {
        let mut bad = good.clone();
        for _ in 0..4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x % bad.len() as u64) as usize;
            bad[i] = (x >> 32) as u8;
        }
        let _ = parse(&bad);
    }
}

/// Writes an executable script at `path` through a child process, so that no descriptor open
/// for writing on it ever exists in this process: a thread of another test forking meanwhile
/// would hand one to its child until that child's exec, and executing the script then fails
/// with ETXTBSY ("text file busy").
#[cfg(unix)]
fn write_script(path: &std::path::Path, text: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("cat > \"$1\" && chmod 755 \"$1\"")
        .arg("sh")
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .expect("sh runs");
    child
        .stdin
        .take()
        .expect("a pipe to sh")
        .write_all(text.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "writing {}", path.display());
}

#[cfg(unix)]
#[test]
fn a_clang_without_wasm_ld_says_so() {
    // A "clang" that answers --version but, like clang without lld, echoes the bare linker name.
    let tmp = tempfile::tempdir().unwrap();
    let fake = tmp.path().join("clang");
    write_script(
        &fake,
        "#!/bin/sh\ncase \"$*\" in\n*--version*) echo 'clang version 99.0.0';;\n\
         *print-prog-name*) echo wasm-ld;;\n*) exit 1;;\nesac\n",
    );
    let opts = BuildOptions {
        clang: Some(fake.clone()),
        ..Default::default()
    };
    let err = build_example("null", &opts).unwrap_err();
    assert!(
        matches!(&err, BuildError::WasmLdNotFound { clang } if *clang == fake),
        "{err:?}"
    );
    assert!(err.to_string().contains("install clang and lld"), "{err}");
}

/// Writes C sources `(name, text)` into a new directory: the directory and the paths.
fn sources_in(files: &[(&str, &str)]) -> (tempfile::TempDir, Vec<std::path::PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let paths = files
        .iter()
        .map(|(name, text)| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        })
        .collect();
    (dir, paths)
}

/// Builds `files` into a program: the module's exports or the error.
fn build_program_of(files: &[(&str, &str)], opts: &BuildOptions) -> Result<BTreeSet<String>, BuildError> {
    let (dir, paths) = sources_in(files);
    let out = dir.path().join("prog.wasm");
    build_program(&paths, &out, opts)?;
    let m = parse(&std::fs::read(&out).unwrap()).unwrap();
    Ok(exports_of(&m, ExternKind::Func))
}

const MAIN: &str = "int helper(void);\nint main(void) { return helper(); }\n";

#[test]
fn a_program_build_names_the_source_that_failed() {
    let err = build_program_of(
        &[
            ("main.c", MAIN),
            ("helper.c", "int helper(void) { return lseek_typo(0); }\n"),
            ("other.c", "int other(void) { return 1; }\n"),
        ],
        &BuildOptions::default(),
    )
    .unwrap_err();
    match &err {
        BuildError::Compile { path, stderr, .. } => {
            assert!(path.ends_with("helper.c"), "{path:?}");
            assert!(
                stderr.contains("implicit declaration of function 'lseek_typo'"),
                "{stderr}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("helper.c"), "{err}");
    let ok = ("helper.c", "int helper(void) { return 0; }\n");
    let exports = build_program_of(&[("main.c", MAIN), ok], &BuildOptions::default()).unwrap();
    assert!(exports.contains("_start"), "{exports:?}");
}

#[test]
fn warnings_that_hide_wasi_porting_bugs_are_errors() {
    for (flag, body) in [
        ("implicit-function-declaration", "int f(void) { return undeclared(); }"),
        ("implicit-int", "static x = 1; int f(void) { return x; }"),
        ("int-conversion", "int *f(void) { return 5; }"),
        ("incompatible-pointer-types", "long *f(int *p) { return p; }"),
    ] {
        let src = format!("int main(void) {{ return 0; }}\n{body}\n");
        let err = build_program_of(&[("bug.c", &src)], &BuildOptions::default()).unwrap_err();
        assert!(err.to_string().contains(&format!("-Werror,-W{flag}")), "{flag}: {err}");
    }
}

#[test]
fn link_flags_and_libraries_reach_the_linker() {
    let (dir, paths) = sources_in(&[("lib.c", "int helper(void) { return 7; }\n")]);
    let object = dir.path().join("lib.o");
    let args: Vec<std::ffi::OsString> = vec!["-c".into(), paths[0].clone().into(), "-o".into(), object.clone().into()];
    cc(&args, &BuildOptions::default()).unwrap();
    let ar = std::process::Command::new("llvm-ar")
        .arg("rcs")
        .arg(dir.path().join("libhelper.a"))
        .arg(&object)
        .status();
    if !ar.is_ok_and(|s| s.success()) {
        eprintln!("skipped: llvm-ar is needed to make a library");
        return;
    }
    let opts = BuildOptions {
        link_args: vec![format!("-L{}", dir.path().display()).into(), "-lhelper".into()],
        ..Default::default()
    };
    build_program_of(&[("main.c", MAIN)], &opts).unwrap();
    // Without the library the link fails, and says so.
    let err = build_program_of(&[("main.c", MAIN)], &BuildOptions::default()).unwrap_err();
    assert!(matches!(err, BuildError::Link { .. }), "{err:?}");
    assert!(err.to_string().contains("undefined symbol: helper"), "{err}");
    // `-l` given among the extra arguments goes after the objects too.
    let opts = BuildOptions {
        extra_args: vec![format!("-L{}", dir.path().display()).into(), "-lhelper".into()],
        ..Default::default()
    };
    build_program_of(&[("main.c", MAIN)], &opts).unwrap();
}

#[test]
fn emulations_are_asked_for_by_name_or_by_library() {
    let src = "#include <signal.h>\n#include <sys/mman.h>\n\
               int main(void) { signal(SIGINT, SIG_IGN); return mmap(0, 1, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED; }\n";
    let err = build_program_of(&[("sig.c", src)], &BuildOptions::default()).unwrap_err();
    assert!(err.to_string().contains("-D_WASI_EMULATED_MMAN"), "{err}");
    let opts = BuildOptions {
        emulate: vec!["signal".into(), "mman".into()],
        ..Default::default()
    };
    build_program_of(&[("sig.c", src)], &opts).unwrap();
    let opts = BuildOptions {
        link_args: vec!["-lwasi-emulated-signal".into(), "-lwasi-emulated-mman".into()],
        ..Default::default()
    };
    build_program_of(&[("sig.c", src)], &opts).unwrap();
    let opts = BuildOptions {
        emulate: vec!["fork".into()],
        ..Default::default()
    };
    let err = build_program_of(&[("sig.c", src)], &opts).unwrap_err();
    assert!(matches!(err, BuildError::UnknownEmulation(_)), "{err:?}");
}

#[test]
fn the_compatibility_layer_declares_and_defines_what_wasi_libc_lacks() {
    let src = "#include <sys/stat.h>\n#include <unistd.h>\n#include <time.h>\n\
               int main(void) { umask(022); return chmod(\"f\", 0600) + fchmod(1, 0600) + chown(\"f\", 1, 1) \
               + fchown(1, -1, -1) + lchown(\"f\", 1, 1) + (int)clock() + getpid(); }\n";
    let exports = build_program_of(&[("compat.c", src)], &BuildOptions::default()).unwrap();
    assert!(exports.contains("_start"));
    let opts = BuildOptions {
        compat: false,
        ..Default::default()
    };
    let err = build_program_of(&[("compat.c", src)], &opts).unwrap_err();
    assert!(
        err.to_string().contains("implicit declaration of function 'umask'"),
        "{err}"
    );
}

#[test]
fn cc_takes_clangs_command_line() {
    let (dir, paths) = sources_in(&[("main.c", MAIN), ("helper.c", "int helper(void) { return HELPER; }\n")]);
    let os = |s: &str| std::ffi::OsString::from(s);
    let object = dir.path().join("helper.o");
    let compile = [
        os("-DHELPER=3"),
        os("-O1"),
        os("-c"),
        paths[1].clone().into(),
        os("-o"),
        object.clone().into(),
    ];
    cc(&compile, &BuildOptions::default()).unwrap();
    let out = dir.path().join("prog");
    let link = [
        paths[0].clone().into(),
        object.into(),
        os("-o"),
        out.clone().into(),
        os("-Wl,--export=helper"),
    ];
    cc(&link, &BuildOptions::default()).unwrap();
    let m = parse(&std::fs::read(&out).unwrap()).unwrap();
    assert!(exports_of(&m, ExternKind::Func).contains("helper"));
    // Questions without inputs go to clang as they are.
    cc(&[os("--version")], &BuildOptions::default()).unwrap();
    // Without -DHELPER the compile names the file.
    let err = cc(&[os("-c"), paths[1].clone().into()], &BuildOptions::default()).unwrap_err();
    assert!(err.to_string().contains("helper.c"), "{err}");
}

#[test]
fn link_flags_are_told_from_compile_flags() {
    for f in ["-lz", "-L/x", "-Wl,--export=f", "-static", "-Xlinker"] {
        assert!(is_link_flag(std::ffi::OsStr::new(f)), "{f}");
    }
    for f in ["-Wall", "-DX", "-I/x", "-O2", "-std=c99", "-fno-strict-aliasing"] {
        assert!(!is_link_flag(std::ffi::OsStr::new(f)), "{f}");
    }
}

#[test]
fn every_program_is_listed_and_an_unknown_one_refused() {
    assert_eq!(
        programs::PROGRAMS,
        &["sqlite3", "gzip", "bzip2", "lz4", "zstd", "minigzip"]
    );
    let err = programs::sources("nethack").unwrap_err();
    assert!(err.to_string().contains("lz4, zstd, minigzip"), "{err}");
}

#[test]
fn the_build_cache_is_used_only_where_nobody_else_can_write() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let me = std::fs::metadata(dir.path()).unwrap().uid();
    let file = dir.path().join("m.wasm");
    std::fs::write(&file, b"\0asm").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(programs::private(&std::fs::symlink_metadata(&file).unwrap(), me));
    assert!(!programs::private(&std::fs::symlink_metadata(&file).unwrap(), me + 1));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(!programs::private(&std::fs::symlink_metadata(&file).unwrap(), me));
    let link = dir.path().join("link.wasm");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    assert!(!programs::private(&std::fs::symlink_metadata(&link).unwrap(), me));
}

#[test]
fn a_portable_program_imports_nothing_of_the_kernels() {
    let src = "#include <sys/stat.h>\n#include <unistd.h>\n\
               int main(void) { return fchmod(1, 0600) + chown(\"f\", 1, 1); }\n";
    let imports = |opts: &BuildOptions| {
        let (dir, paths) = sources_in(&[("p.c", src)]);
        let out = dir.path().join("p.wasm");
        build_program(&paths, &out, opts).unwrap();
        let m = parse(&std::fs::read(&out).unwrap()).unwrap();
        m.imports.iter().map(|i| i.module.clone()).collect::<BTreeSet<String>>()
    };
    assert!(imports(&BuildOptions::default()).contains("vino"));
    let portable = BuildOptions {
        portable: true,
        ..Default::default()
    };
    assert_eq!(imports(&portable), set(&["wasi_snapshot_preview1"]));
}
