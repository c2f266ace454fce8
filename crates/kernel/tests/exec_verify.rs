//! `exec.verify`: a module's bytes stream through the bound verifiers before it may run. The
//! SHA-256 allow-list graft allows what its owner listed (its digest is `sha256sum`'s) and
//! nothing else; only privileged processes bind the global verifier; a user's own binds only
//! that user's programs and outlives the process that bound it; a hostile verifier refuses
//! (fails closed) until the kernel unloads it, and gives back what it was charged.

mod common;

use std::sync::Arc;
use vino_kernel::account::LimitsConfig;
use vino_kernel::{Credentials, Errno, GraftEvent, Kernel, Process, Resource};
use vino_sdk::{BuildOptions, build_c_str, build_example};

fn boot() -> Arc<Kernel> {
    common::small_kernel(4096, LimitsConfig::default())
}

/// Bytes standing for a module (the verifier sees bytes, not Wasm): more than a chunk, and not a
/// multiple of one, so that the graft's partial blocks are exercised.
fn module(seed: u8) -> Vec<u8> {
    (0..200_003u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed)
        .collect()
}

/// `sha256sum` of `bytes` written to a file.
fn sha256sum(bytes: &[u8]) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("vino-exec-verify-{}-{n}", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let out = std::process::Command::new("sha256sum").arg(&path).output().unwrap();
    let _ = std::fs::remove_file(&path);
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// The four words `vino_ctl_allow` takes for the digest `hex`.
fn words(hex: &str) -> Vec<i64> {
    let bytes: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    bytes
        .chunks(8)
        .map(|w| i64::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

fn allow_list() -> Vec<u8> {
    build_example("sha256_allow", &BuildOptions::default()).unwrap()
}

fn allow(p: &Process, point: &str, wasm: &[u8]) {
    let n = p.graft_call(point, "allow", &words(&sha256sum(wasm))).unwrap();
    assert!(n >= 1);
}

#[test]
fn the_allow_list_runs_listed_modules_only_and_its_digest_is_sha256sum() {
    let k = boot();
    let root = k.spawn(Credentials::root());
    let user = k.spawn(Credentials::user(1000, 1000));
    let (listed, other) = (module(1), module(2));
    // Nothing bound: everything passes, the digest the kernel's SHA-256.
    let v = user.exec_verify("listed", &listed).unwrap();
    assert_eq!(vino_kernel::exec_hex(v.digest()), sha256sum(&listed));

    root.graft_load("exec.verify", &allow_list()).unwrap();
    // An empty list denies everything.
    let e = user.exec_verify("listed", &listed).unwrap_err();
    assert_eq!(e.errno, Errno::Acces);
    allow(&root, "exec.verify", &listed);
    let v = user.exec_verify("listed", &listed).unwrap();
    assert_eq!(vino_kernel::exec_hex(v.digest()), sha256sum(&listed));
    // Twice: the graft's state starts over with each module.
    user.exec_verify("listed", &listed).unwrap();
    let e = user.exec_verify("other", &other).unwrap_err();
    assert_eq!(e.errno, Errno::Acces);
    assert!(
        e.message.contains("exec.verify (global policy) denied program other")
            && e.message.contains(&sha256sum(&other)),
        "{}",
        e.message
    );
    // The proof starts only the module it was made for, for its own user.
    let v = user.exec_verify("listed", &listed).unwrap();
    let mut sha = *v.sha256();
    sha[0] ^= 1;
    assert_eq!(user.exec_start(v, &sha).unwrap_err().errno, Errno::Acces);
    let v = user.exec_verify("listed", &listed).unwrap();
    let sha = *v.sha256();
    assert_eq!(root.exec_start(v, &sha).unwrap_err().errno, Errno::Acces);
    let v = user.exec_verify("listed", &listed).unwrap();
    user.exec_start(v, &sha).unwrap();
    assert_eq!(user.exec_digest().unwrap(), sha256sum(&listed));
}

#[test]
fn only_privileged_processes_bind_the_global_verifier() {
    let k = boot();
    let user = k.spawn(Credentials::user(1000, 1000));
    let e = user.graft_load("exec.verify", &allow_list()).unwrap_err();
    assert_eq!(e.errno, Errno::Perm);
    user.exec_verify("any", &module(3)).unwrap();
}

#[test]
fn a_users_verifier_binds_its_programs_only_and_outlives_its_loader() {
    let k = boot();
    let alice = k.spawn(Credentials::user(1000, 1000));
    let bob = k.spawn(Credentials::user(1001, 1001));
    let (mine, other) = (module(4), module(5));
    let user_account = k.accounts().user(1000);
    alice.graft_load("exec.verify/user", &allow_list()).unwrap();
    assert_eq!(user_account.used(Resource::Grafts), 1);
    allow(&alice, "exec.verify/user", &mine);
    alice.exec_verify("mine", &mine).unwrap();
    let e = alice.exec_verify("other", &other).unwrap_err();
    assert_eq!(e.errno, Errno::Acces);
    assert!(e.message.contains("policy of uid 1000"), "{}", e.message);
    // Bob's programs are not alice's policy's business.
    bob.exec_verify("other", &other).unwrap();
    // Bob cannot reach alice's verifier through his own namespace: his slot is his user's.
    assert!(bob.graft_call("exec.verify/user", "clear", &[]).is_err());
    assert_eq!(alice.graft_call("exec.verify/user", "count", &[]).unwrap(), 1);
    // The loader goes; the policy stays, charged to the user.
    k.exit(alice.pid());
    let alice2 = k.spawn(Credentials::user(1000, 1000));
    assert_eq!(alice2.exec_verify("other", &other).unwrap_err().errno, Errno::Acces);
    assert_eq!(user_account.used(Resource::Grafts), 1);
    // Any process of the user may unload it; then its programs run, and nothing is held.
    alice2.graft_unload("exec.verify/user").unwrap();
    alice2.exec_verify("other", &other).unwrap();
    assert_eq!(user_account.used(Resource::Grafts), 0);
    assert_eq!(user_account.used(Resource::GraftCode), 0);
    assert_eq!(user_account.used(Resource::GraftMemory), 0);
}

/// A verifier that misbehaves at `op` (0 begin, 1 data, 2 end) by `body`.
fn hostile(body: &str) -> Vec<u8> {
    let src = format!(
        "#define VINO_EXEC_VERIFY_ARGS\n#include \"vino_graft.h\"\n\
         static volatile uint32_t spins;\n\
         VINO_GRAFT(exec_verify) int32_t exec_verify(int32_t op, int32_t len) {{\n\
             (void)len;\n {body}\n return 0;\n}}\n"
    );
    build_c_str("hostile_verify.c", &src, &BuildOptions::default()).unwrap()
}

#[test]
fn a_hostile_verifier_fails_closed_until_it_is_unloaded_and_leaks_nothing() {
    let k = boot();
    // Each case: what it does, and whether it fails at every module's begin (then the kernel
    // unloads it after eight; one failing later is one failure among successful calls, and its
    // owner unloads it).
    let cases = [
        ("loop", "if (op == 1) for (;;) spins++;", false),
        ("trap", "if (op == 2) __builtin_trap();", false),
        (
            "out of bounds",
            "if (op == 0) *(volatile uint32_t *)(uintptr_t)0xFFFFFFF0u = 1;",
            true,
        ),
        ("bad answer", "if (op == 2) return 7;", false),
        (
            "memory hog",
            "if (op == 0) while (__builtin_wasm_memory_grow(0, 16) != (size_t)-1) {}",
            true,
        ),
    ];
    let user_account = k.accounts().user(1000);
    for (what, body, unloaded) in cases {
        let p = k.spawn(Credentials::user(1000, 1000));
        p.graft_load("exec.verify/user", &hostile(body)).unwrap();
        let wasm = module(6);
        for _ in 0..8 {
            let e = p.exec_verify("victim", &wasm).unwrap_err();
            assert_eq!(e.errno, Errno::Acces, "{what}");
            assert!(e.message.contains("failed on program victim"), "{what}: {}", e.message);
        }
        let bound = p.graft_stats("exec.verify/user").unwrap().graft.is_some();
        assert_eq!(bound, !unloaded, "{what}");
        if unloaded {
            assert!(
                p.graft_events()
                    .iter()
                    .any(|e| matches!(e, GraftEvent::Unloaded { point, .. } if point == "exec.verify/user")),
                "{what}: the owner hears of the unload"
            );
        } else {
            p.graft_unload("exec.verify/user").unwrap();
        }
        // Unloaded: nothing is bound, so programs run; nothing stays charged.
        p.exec_verify("victim", &wasm).unwrap();
        for r in [Resource::Grafts, Resource::GraftCode, Resource::GraftMemory] {
            assert_eq!(user_account.used(r), 0, "{what}: {r:?} still charged");
        }
        k.exit(p.pid());
    }
}
