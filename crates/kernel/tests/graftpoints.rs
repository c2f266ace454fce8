//! The registry of graftpoints against the kernel: it lists exactly the graftpoints a booted
//! kernel creates, who may graft each is what the slots enforce, and its checkers accept what the
//! kernel's slots load (the SDK's examples) and refuse what they refuse.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use vino_graft::{Access, LoadError, Runtime, WasmType};
use vino_kernel::graftpoints::{self, Grafter, Graftpoint};
use vino_kernel::{Credentials, Fd, Kernel, OpenFlags, Process};

fn boot() -> Arc<Kernel> {
    common::small_kernel(8192, Default::default())
}

/// A process of `kernel` with a file it created open on a descriptor.
fn with_open_file(kernel: &Arc<Kernel>, cred: Credentials, path: &str) -> (Arc<Process>, Fd) {
    let p = kernel.spawn(cred);
    let fd = p.open(path, OpenFlags::create()).unwrap();
    (p, fd)
}

#[test]
fn the_registry_lists_exactly_the_graftpoints_a_kernel_creates() {
    let kernel = boot();
    kernel.spawn(Credentials::root()).mkdir("/u", 0o777).unwrap();
    for (cred, path) in [(Credentials::root(), "/f"), (Credentials::user(1000, 1000), "/u/f")] {
        let privileged = cred.privileged;
        let (p, _fd) = with_open_file(&kernel, cred, path);
        let slots = p.graft_list();
        let mut created = BTreeSet::new();
        for slot in &slots {
            let entry = graftpoints::find(&slot.point)
                .unwrap_or_else(|| panic!("slot `{}` is no graftpoint of the registry", slot.point));
            created.insert(entry.name);
            let expected = match entry.who {
                // A user's verifier is no process's: the kernel keeps it for the user.
                Grafter::Privileged | Grafter::PrivilegedOrUser => Access::Privileged,
                // Every per-object graftpoint here is the process's own (it created the file).
                _ => Access::Process(p.pid()),
            };
            assert_eq!(slot.access, expected, "{}: {:?}", slot.point, entry.who);
        }
        // A stream codec is no process's slot: its owner binds it to a file (`stream_bind`); a
        // server's slot is made when a port is served (`net_serve`).
        let registered: BTreeSet<_> = graftpoints::all()
            .iter()
            .filter(|g| !matches!(g.who, Grafter::FileOwner | Grafter::DirectoryOwner | Grafter::Server))
            .map(|g| g.name)
            .collect();
        assert_eq!(created, registered, "privileged {privileged}");
    }
}

/// The smallest module for `g`: memory and the argument area if it uses one, an entry point that
/// answers 0, and `extra` (imports) first.
fn minimal(g: &Graftpoint, extra: &str) -> Vec<u8> {
    let ty = |t: &WasmType| t.name();
    let params: Vec<&str> = g.signature.params.iter().map(ty).collect();
    let result = match g.signature.results {
        [WasmType::I32] => "(result i32) i32.const 0",
        [WasmType::I64] => "(result i64) i64.const 0",
        other => panic!("{}: results {other:?}", g.name),
    };
    let area = if g.uses_arg_area {
        let pages = (1024 + g.arg_bytes).div_ceil(65536);
        format!(r#"(memory (export "memory") {pages}) (global (export "vino_args") i32 (i32.const 1024))"#)
    } else {
        String::new()
    };
    format!(
        r#"(module {extra} {area} (func (export "{}") (param {}) {result}))"#,
        g.export(),
        params.join(" ")
    )
    .into_bytes()
}

/// Where each graftpoint is reached in the namespace of a process holding file `fd`.
fn slot_name(g: &Graftpoint, fd: Fd) -> String {
    match g.who {
        Grafter::Opener | Grafter::FileCreator | Grafter::FileCreatorOrPrivileged => format!("{}/{fd}", g.name),
        _ => g.name.to_string(),
    }
}

/// Loads `wasm` at `g` for process `p` holding `fd`, open on `/f`: into the process's slot, or,
/// for a stream codec, bound to an empty file of its own.
/// The port a server graft is bound to here.
const SERVED_PORT: u16 = 9300;

fn load_at(p: &Process, g: &Graftpoint, fd: Fd, wasm: &[u8]) -> vino_kernel::SysResult<()> {
    if g.who == Grafter::FileOwner {
        p.open("/codec", OpenFlags::create())?;
        return p.stream_bind("/codec", Some(wasm));
    }
    if g.who == Grafter::DirectoryOwner {
        return p.graft_load(&format!("{}/{}", g.name, dir_fd(p)), wasm).map(drop);
    }
    if g.who == Grafter::Server {
        let p = p.kernel().process(p.pid()).expect("alive");
        return p.net_serve(SERVED_PORT, 4, wasm);
    }
    p.graft_load(&slot_name(g, fd), wasm).map(drop)
}

/// A descriptor of the directory `/d` (made if need be), which `p` owns.
fn dir_fd(p: &Process) -> Fd {
    let _ = p.mkdir("/d", 0o755);
    p.open("/d", OpenFlags::directory()).unwrap()
}

fn unload_at(p: &Process, g: &Graftpoint, fd: Fd) {
    if g.who == Grafter::FileOwner {
        p.stream_bind("/codec", None).unwrap();
    } else if g.who == Grafter::DirectoryOwner {
        p.graft_unload(&format!("{}/{}", g.name, dir_fd(p))).unwrap();
    } else if g.who == Grafter::Server {
        p.net_unserve(SERVED_PORT).unwrap();
    } else {
        p.graft_unload(&slot_name(g, fd)).unwrap();
    }
}

#[test]
fn every_graftpoint_checks_and_loads_a_minimal_graft_and_refuses_the_toys_imports() {
    let rt = Runtime::default();
    let kernel = boot();
    let (p, fd) = with_open_file(&kernel, Credentials::root(), "/f");
    let toy_import = r#"(import "vino" "vino_toy_get" (func (param i32) (result i64)))"#;
    for g in graftpoints::all() {
        let good = minimal(g, "");
        let summary = (g.check)(&rt, &good).unwrap_or_else(|e| panic!("{}: {e}", g.name));
        assert_eq!((summary.point.as_str(), summary.entry.as_str()), (g.name, &*g.export()));
        load_at(&p, g, fd, &good)
            .unwrap_or_else(|e| panic!("{}: the checker passed what the slot refuses: {e}", g.name));
        unload_at(&p, g, fd);

        let toy = minimal(g, toy_import);
        let err = (g.check)(&rt, &toy).unwrap_err();
        assert!(
            matches!(&err, LoadError::ForbiddenImport { name, point, .. } if name == "vino_toy_get" && point == g.name),
            "{}: {err}",
            g.name
        );
        let loaded = load_at(&p, g, fd, &toy).unwrap_err();
        assert!(loaded.to_string().contains("vino.vino_toy_get"), "{}: {loaded}", g.name);

        let empty = b"(module)".to_vec();
        assert!(
            matches!((g.check)(&rt, &empty), Err(LoadError::MissingEntry { .. })),
            "{}",
            g.name
        );
    }
}

/// The SDK's examples for the kernel's graftpoints, by graftpoint.
const EXAMPLES: &[(&str, &[&str])] = &[
    ("vas.pick_victim", &["hotlist_evict", "lookahead_evict", "scan_evict"]),
    (
        "file.compute_ra",
        &[
            "sequential_ra",
            "reverse_ra",
            "index_readahead",
            "index_prefetch",
            "wisc_readahead",
            "randread_ra",
        ],
    ),
    ("file.block_buddy", &["noswitch"]),
    ("disk.pick_request", &["elevator", "fifo"]),
    ("lock.grant", &["lock_fifo"]),
    ("sched.pick_thread", &["strict_priority", "multimedia"]),
    ("event.fs.unlink", &["unlink_log", "unlink_log_sync"]),
    (
        "file.stream",
        &["lz4_stream", "chacha20poly1305_stream", "crc32c_stream"],
    ),
    ("dir.access", &["dir_hours", "count_access"]),
    ("dir.lookup", &["private_tmp"]),
    ("exec.verify", &["sha256_allow"]),
    ("net.congestion", &["reno_cc", "cubic_cc", "shared_cc"]),
    ("event.net.packet", &["http_server"]),
    ("net.pick_packet", &["port_priority", "small_first"]),
];

/// The SDK's examples for the toy kernel.
const TOY_EXAMPLES: &[&str] = &["null", "toy_counter"];

#[test]
fn the_sdk_examples_check_at_their_graftpoint_and_load_there() {
    let listed: BTreeSet<&str> = EXAMPLES.iter().flat_map(|(_, e)| e.iter().copied()).collect();
    for (name, _) in vino_sdk::EXAMPLES {
        assert!(
            listed.contains(name) || TOY_EXAMPLES.contains(name),
            "example {name}: which graftpoint is it for?"
        );
    }
    let rt = Runtime::default();
    let kernel = boot();
    let (p, fd) = with_open_file(&kernel, Credentials::root(), "/f");
    let opts = vino_sdk::BuildOptions::default();
    for (point, examples) in EXAMPLES {
        let g = graftpoints::find(point).unwrap();
        for example in *examples {
            let wasm = vino_sdk::build_example(example, &opts).unwrap();
            let summary = (g.check)(&rt, &wasm).unwrap_or_else(|e| panic!("{example} at {point}: {e}"));
            assert_eq!(summary.signature, g.signature);
            load_at(&p, g, fd, &wasm).unwrap_or_else(|e| panic!("{example} at {point}: {e}"));
            if g.who == Grafter::FileOwner {
                unload_at(&p, g, fd);
            }
            // Built for one graftpoint, an example does not pass for another.
            let other = graftpoints::all().iter().find(|o| o.signature != g.signature).unwrap();
            assert!((other.check)(&rt, &wasm).is_err(), "{example} at {}", other.name);
        }
    }
    // The toy kernel's examples import the toy's functions: the kernel refuses them.
    let counter = vino_sdk::build_example("toy_counter", &opts).unwrap();
    for g in graftpoints::all() {
        assert!((g.check)(&rt, &counter).is_err(), "toy_counter at {}", g.name);
    }
}

/// The C header declares every graftpoint's entry with the types the kernel checks at load
/// (`int32_t` for i32, `int64_t` for i64), so a graft written against it loads.
#[test]
fn the_sdk_header_declares_every_graftpoint_with_its_signature() {
    let c = |t: &WasmType| match t {
        WasmType::I32 => "int32_t",
        WasmType::I64 => "int64_t",
    };
    let header = vino_sdk::HEADER;
    for p in graftpoints::all() {
        let export = p.name.replace('.', "_");
        let [result] = p.signature.results else {
            panic!("{}: one result expected", p.name)
        };
        let line = header
            .lines()
            .find(|l| l.contains(&format!(" {export}(")) && l.trim_end().ends_with(");"))
            .unwrap_or_else(|| panic!("vino_graft.h declares no `{export}`"));
        let params: Vec<&str> = line[line.find('(').unwrap() + 1..line.rfind(')').unwrap()]
            .split(',')
            .map(|a| a.split_whitespace().next().unwrap_or(""))
            .collect();
        let want: Vec<&str> = p.signature.params.iter().map(c).collect();
        assert!(
            line.trim_start().starts_with(c(result)),
            "{}: `{line}` returns the wrong type",
            p.name
        );
        assert_eq!(params, want, "{}: `{line}` takes the wrong parameters", p.name);
    }
}

#[test]
fn grafts_kept_with_a_file_go_when_their_loader_exits() {
    // file.block_buddy and lock.grant are kept with the file, not the descriptor: closing the
    // descriptor leaves the graft bound, and the exit of the process that loaded it unloads it
    // (root grafting another process's file included), releasing every charge.
    let kernel = boot();
    kernel.spawn(Credentials::root()).chmod("/", 0o777).unwrap();
    let grafts = || kernel.accounts().total().used(vino_kernel::Resource::Grafts);
    let creator = kernel.spawn(Credentials::user(1000, 1000));
    let fd = creator.open("/mine", OpenFlags::create()).unwrap();
    for point in ["file.block_buddy", "lock.grant"] {
        let g = graftpoints::find(point).unwrap();
        creator.graft_load(&slot_name(g, fd), &minimal(g, "")).unwrap();
    }
    creator.close(fd).unwrap();
    assert_eq!(grafts(), 2, "bound after the close");
    kernel.exit(creator.pid());
    assert_eq!(grafts(), 0, "the creator's grafts outlived it");

    let root = kernel.spawn(Credentials::root());
    let fd = root.open("/mine", OpenFlags::read_write()).unwrap();
    let g = graftpoints::find("lock.grant").unwrap();
    root.graft_load(&slot_name(g, fd), &minimal(g, "")).unwrap();
    root.close(fd).unwrap();
    assert_eq!(grafts(), 1);
    kernel.exit(root.pid());
    assert_eq!(grafts(), 0, "root's graft on another's file outlived it");
}
