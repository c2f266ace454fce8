//! Recording a graft's inputs through the daemon and replaying them offline: the owner records
//! its own read-ahead graft on real reads and the replay gives every answer again; a user
//! cannot record a graftpoint it may not graft (another's process, a global one). And trying a
//! candidate in shadow on another process of the same user: what it would have done, beside
//! what the live policy did; never on another user's process.

mod common;

use common::{TestDaemon, all_refunded, is_root, spawn_child, wait_line};
use vino_client::{Client, OpenFlags};
use vino_graft::record::{Event, Recording};
use vino_graft::replay::{ReplayOptions, replay};
use vino_proto::errno;

const TEST: &str = "child_role";

/// Read-ahead that asks for the 8 KiB after each read with `vino_prefetch` while it is within
/// the file, and counts its calls in its memory (so the replay needs the recorded image).
const READ_AHEAD: &str = r#"(module
  (import "vino" "vino_prefetch" (func $prefetch (param i64 i64) (result i32)))
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "file_compute_ra") (param $off i64) (param $len i32) (param $size i64) (result i32)
    (local $next i64)
    (i32.store (i32.const 16) (i32.add (i32.load (i32.const 16)) (i32.const 1)))
    (local.set $next (i64.add (local.get $off) (i64.extend_i32_u (local.get $len))))
    (if (i64.le_u (i64.add (local.get $next) (i64.const 8192)) (local.get $size))
      (then (drop (call $prefetch (local.get $next) (i64.const 8192)))))
    (i32.const 0)))"#;

/// [`READ_AHEAD`]'s extents answered in the argument area (one extent: offset, length).
const AREA_AHEAD: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "file_compute_ra") (param $off i64) (param $len i32) (param $size i64) (result i32)
    (local $next i64)
    (local.set $next (i64.add (local.get $off) (i64.extend_i32_u (local.get $len))))
    (if (result i32) (i64.le_u (i64.add (local.get $next) (i64.const 8192)) (local.get $size))
      (then (i64.store (i32.const 1024) (local.get $next))
            (i64.store (i32.const 1032) (i64.const 8192))
            (i32.const 1))
      (else (i32.const 0)))))"#;

/// Reads nothing ahead.
const NONE_AHEAD: &str = r#"(module
  (memory (export "memory") 1)
  (global (export "vino_args") i32 (i32.const 1024))
  (func (export "file_compute_ra") (param i64 i32 i64) (result i32) (i32.const 0)))"#;

/// The roles children of this binary play (selected by `VINO_TEST_ROLE`); a no-op otherwise.
#[test]
fn child_role() {
    let Ok(role) = std::env::var("VINO_TEST_ROLE") else {
        return;
    };
    let socket = std::path::PathBuf::from(std::env::var("VINO_SOCKET").unwrap());
    let mut c = Client::connect(&socket).unwrap();
    if role == "record-global" {
        // A user may not record a global graftpoint: its inputs are every user's I/O.
        let e = c.graft_record("disk.pick_request", 1 << 20).unwrap_err();
        println!("errno={}", e.errno);
        // Nor the kernel's own decisions there.
        let e = c.graft_record_default("disk.pick_request", 1 << 20).unwrap_err();
        println!("default={}", e.errno);
    }
    if role == "try-other" {
        // Nor try a candidate on another user's process.
        let pid: u64 = std::env::var("VINO_TARGET").unwrap().parse().unwrap();
        let e = c
            .graft_try(Some(pid), "vas.pick_victim", READ_AHEAD.as_bytes(), 1)
            .unwrap_err();
        println!("errno={}", e.errno);
        // Nor the disk queue's, which holds every user's requests.
        let e = c
            .graft_try(None, "disk.pick_request", READ_AHEAD.as_bytes(), 1)
            .unwrap_err();
        println!("disk={}", e.errno);
        // Nor the CPU's turns between users, nor another user's threads.
        let e = c.graft_try(None, "sched.pick_next", PICK.as_bytes(), 0).unwrap_err();
        println!("next={}", e.errno);
        let e = c
            .graft_try(Some(pid), "sched.pick_thread", PICK.as_bytes(), 0)
            .unwrap_err();
        println!("thread={}", e.errno);
    }
    println!("DONE");
}

#[test]
fn the_owner_records_its_graft_on_real_reads_and_the_replay_gives_every_answer_again() {
    let d = TestDaemon::start();
    let mut c = d.client();
    let fd = c.open("/data", OpenFlags::create()).unwrap();
    c.write(fd, &vec![7u8; 256 << 10]).unwrap();
    let point = format!("file.compute_ra/{fd}");
    c.graft_load(&point, READ_AHEAD.as_bytes()).unwrap();
    // Calls before the recording change the graft's memory: the replay starts from its image.
    let mut buf = vec![0u8; 4096];
    c.seek(fd, 0).unwrap();
    c.read(fd, &mut buf).unwrap();
    c.graft_record(&point, 1 << 20).unwrap();
    c.seek(fd, 0).unwrap();
    for _ in 0..40 {
        c.read(fd, &mut buf).unwrap();
    }
    let bytes = c.graft_record_stop(&point).unwrap();
    let recording = Recording::from_bytes(&bytes).unwrap();
    assert!(recording.invocations >= 40, "{} invocations", recording.invocations);
    let prefetches = recording
        .events
        .iter()
        .filter(|e| matches!(e, Event::Call { .. }))
        .count();
    assert!(prefetches >= 30, "its kernel calls are recorded: {prefetches}");
    let report = replay(&recording, READ_AHEAD.as_bytes(), ReplayOptions::default()).unwrap();
    assert!(report.exact(), "{report:#?}");
    // Other modules on the same reads, judged in read-ahead's ghost caches against the recorded
    // graft: the recorded module itself does exactly as it; one that answers the same extents
    // in the argument area is the same in the ghost; one that reads nothing ahead misses more.
    let ghost = |wasm: &str| {
        let options = ReplayOptions {
            decisions: true,
            ..Default::default()
        };
        let replayed = replay(&recording, wasm.as_bytes(), options).unwrap();
        let ghost = vino_kernel::graft_try::replayed_ghost(&recording, &replayed, wasm.as_bytes(), 64)
            .unwrap()
            .unwrap();
        serde_json::to_value(ghost).unwrap()
    };
    let same = ghost(READ_AHEAD);
    assert_eq!(same["live"], same["candidate"], "{same}");
    assert_eq!(same["reads"], recording.invocations, "{same}");
    assert!(same["live"]["prefetched"].as_u64().unwrap() > 0, "{same}");
    let area = ghost(AREA_AHEAD);
    assert_eq!(area["live"], area["candidate"], "{area}");
    let none = ghost(NONE_AHEAD);
    assert_eq!(none["candidate"]["prefetched"], 0, "{none}");
    assert!(
        none["candidate"]["misses"].as_u64() > none["live"]["misses"].as_u64(),
        "{none}"
    );
    // Nothing runs any more: a second stop has nothing to give.
    assert!(c.graft_record_stop(&point).is_err());
}

#[test]
fn a_process_cannot_record_a_graftpoint_it_may_not_graft() {
    let d = TestDaemon::start();
    let mut owner = d.client();
    let fd = owner.open("/data", OpenFlags::create()).unwrap();
    let point = format!("file.compute_ra/{fd}");
    owner.graft_load(&point, READ_AHEAD.as_bytes()).unwrap();
    // Another process (the same user) does not see the owner's graftpoint at all.
    let mut other = d.client();
    let e = other.graft_record(&point, 1 << 20).unwrap_err();
    assert_eq!(e.errno, errno::ENOENT, "{e}");
    // Nothing bound: nothing to record.
    let fd2 = owner.open("/other", OpenFlags::create()).unwrap();
    assert!(owner.graft_record(&format!("file.compute_ra/{fd2}"), 1 << 20).is_err());
    if !is_root() {
        return;
    }
    let mut child = spawn_child(TEST, "record-global", &d.socket(), &[], Some(1000));
    let lines = wait_line(&mut child, "DONE");
    let _ = child.wait();
    for want in [format!("errno={}", errno::EPERM), format!("default={}", errno::EPERM)] {
        assert!(lines.iter().any(|l| l.trim() == want), "{want}: {lines:?}");
    }
}

/// Evicts the most recently used of the first page of candidates.
const NEWEST: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 0))
  (func (export "vas_pick_victim") (param $n i32) (result i32) (i32.sub (local.get $n) (i32.const 1))))"#;

#[test]
fn a_candidate_is_tried_on_another_process_of_the_user_without_touching_it() {
    let d = TestDaemon::with(|c| c.cache_frames = 64);
    let mut app = d.client();
    let fd = app.open("/data", OpenFlags::create()).unwrap();
    app.write(fd, &vec![1u8; 400 * 4096]).unwrap();
    app.fsync(fd).unwrap();
    let mut tool = d.client();
    let point = format!("file.compute_ra/{fd}");
    tool.graft_try(Some(app.pid()), &point, READ_AHEAD.as_bytes(), 1)
        .unwrap();
    tool.graft_try(Some(app.pid()), "vas.pick_victim", NEWEST.as_bytes(), 1)
        .unwrap();
    // The tried process cannot talk to a candidate another process started (it would spend
    // the starter's charges).
    let e = app.graft_call("vas.pick_victim#try", "x", &[]).unwrap_err();
    assert_eq!(e.errno, errno::ENOENT, "{e}");
    let mut buf = vec![0u8; 4096];
    for round in 0..3 {
        for b in (0..96u64).chain((0..100).map(|k| (k * 37) % 96)) {
            app.seek(fd, b * 4096 + round).unwrap();
            app.read(fd, &mut buf[..4096 - round as usize]).unwrap();
        }
    }
    let ra: serde_json::Value = serde_json::from_slice(&tool.graft_try_stop(Some(app.pid()), &point).unwrap()).unwrap();
    assert_eq!(ra["model"], "read_ahead");
    assert_eq!(ra["reads"], 3 * 196);
    assert!(ra["candidate"]["prefetched"].as_u64().unwrap() > 0, "{ra}");
    let victim: serde_json::Value =
        serde_json::from_slice(&tool.graft_try_stop(Some(app.pid()), "vas.pick_victim").unwrap()).unwrap();
    assert_eq!(victim["model"], "victim");
    assert!(victim["accesses"].as_u64().unwrap() >= 3 * 196, "{victim}");
    assert!(victim["would_be_misses"].as_u64().unwrap() > 0, "{victim}");
    // Nothing the candidates decided reached the process: no graft is bound there.
    assert!(app.graft_stats(&point).unwrap().graft.is_none());
    // Only the ghosts and the disk queue's agreement have models.
    let e = tool
        .graft_try(None, "cache.writeback", NEWEST.as_bytes(), 1)
        .unwrap_err();
    assert_eq!(e.errno, errno::EOPNOTSUPP, "{e}");
    if is_root() {
        let target = app.pid().to_string();
        let mut child = spawn_child(TEST, "try-other", &d.socket(), &[("VINO_TARGET", &target)], Some(1000));
        let lines = wait_line(&mut child, "DONE");
        let _ = child.wait();
        assert!(
            lines.iter().any(|l| l.trim() == format!("errno={}", errno::ESRCH)),
            "{lines:?}"
        );
        for want in [
            format!("disk={}", errno::EPERM),
            format!("next={}", errno::EPERM),
            format!("thread={}", errno::ESRCH),
        ] {
            assert!(lines.iter().any(|l| l.trim() == want), "{want}: {lines:?}");
        }
    }
}

/// Runs the first runnable thread, and keeps a word of memory its owner writes.
const PICK: &str = r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 1024))
  (func (export "sched_pick_thread") (param i32 i32) (result i32) (i32.const 0))
  (func (export "sched_pick_next") (param i32 i32) (result i32) (i32.const 0)))"#;

#[test]
fn a_scheduler_candidate_is_tried_on_another_process_of_the_user_and_its_owner_talks_to_it() {
    let d = TestDaemon::start();
    let app = d.client();
    let mut tool = d.client();
    // The kernel chooses how many decisions to offer (0).
    tool.graft_try(Some(app.pid()), "sched.pick_thread", PICK.as_bytes(), 0)
        .unwrap();
    // The starter's calls reach its candidate on the other process; the tried process's do not.
    tool.graft_write_memory("sched.pick_thread#try", 0, &[1, 2, 3, 4])
        .unwrap();
    let mut app = app;
    let e = app.graft_write_memory("sched.pick_thread#try", 0, &[1]).unwrap_err();
    assert_eq!(e.errno, errno::ENOENT, "{e}");
    let r: serde_json::Value =
        serde_json::from_slice(&tool.graft_try_stop(Some(app.pid()), "sched.pick_thread").unwrap()).unwrap();
    assert_eq!(r["model"], "sched", "{r}");
    assert_eq!(r["sample_auto"], true, "{r}");
    assert_eq!(r["failures"], 0, "{r}");
    let e = tool.graft_try_stop(Some(app.pid()), "sched.pick_thread").unwrap_err();
    assert_eq!(e.errno, errno::ENOENT, "{e}");
}

#[test]
fn hostile_candidates_and_recorders_leave_the_live_path_and_the_accounts_as_they_were() {
    use vino_kernel::Resource;
    let d = TestDaemon::with(|c| c.cache_frames = 64);
    let mut app = d.client();
    let fd = app.open("/data", OpenFlags::create()).unwrap();
    app.write(fd, &vec![3u8; 200 * 4096]).unwrap();
    let reads = |app: &mut Client| {
        let mut buf = vec![0u8; 4096];
        for b in (0..200u64).chain((0..200).map(|k| (k * 37) % 200)) {
            app.seek(fd, b * 4096).unwrap();
            assert_eq!(app.read(fd, &mut buf).unwrap(), 4096);
            assert!(buf.iter().all(|&x| x == 3), "the live path's answers are right");
        }
    };
    let point = format!("file.compute_ra/{fd}");
    let hostile = [
        // Loops forever on every call.
        r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 0))
          (func (export "vas_pick_victim") (param i32) (result i32) (loop (br 0)) (i32.const 0)))"#,
        // Traps after writing its memory.
        r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 0))
          (func (export "vas_pick_victim") (param i32) (result i32) (i32.store (i32.const 8) (i32.const 1)) unreachable))"#,
        // Grows its memory to the cap.
        r#"(module (memory (export "memory") 1) (global (export "vino_args") i32 (i32.const 0))
          (func (export "vas_pick_victim") (param i32) (result i32) (drop (memory.grow (i32.const 4096))) (i32.const 0)))"#,
    ];
    let mut tool = d.client();
    for wat in hostile {
        tool.graft_try(Some(app.pid()), "vas.pick_victim", wat.as_bytes(), 1)
            .unwrap();
        reads(&mut app);
        let r: serde_json::Value =
            serde_json::from_slice(&tool.graft_try_stop(Some(app.pid()), "vas.pick_victim").unwrap()).unwrap();
        assert!(r["failures"].as_u64().unwrap() > 0 || r["dropped"].is_string(), "{r}");
    }
    // A candidate left running when its starter goes: stopped, and nothing stays charged.
    tool.graft_try(Some(app.pid()), "vas.pick_victim", hostile[0].as_bytes(), 1)
        .unwrap();
    tool.graft_try(Some(app.pid()), &point, READ_AHEAD.as_bytes(), 1)
        .unwrap();
    reads(&mut app);
    drop(tool);
    // A recording left running when its graft's owner goes.
    app.graft_load(&point, READ_AHEAD.as_bytes()).unwrap();
    app.graft_record(&point, 1 << 20).unwrap();
    reads(&mut app);
    drop(app);
    for r in [Resource::Grafts, Resource::GraftMemory, Resource::GraftCode] {
        all_refunded(&d, r);
    }
}

#[test]
fn a_lock_grant_candidate_is_tried_on_the_callers_own_descriptor() {
    let d = TestDaemon::start();
    let mut app = d.client();
    let fd = app.open("/locked", OpenFlags::create()).unwrap();
    let wasm = vino_sdk::build_example("lock_fifo", &Default::default()).unwrap();
    let point = format!("lock.grant/{fd}");
    app.graft_try(None, &point, &wasm, 1).unwrap();
    let r: serde_json::Value = serde_json::from_slice(&app.graft_try_stop(None, &point).unwrap()).unwrap();
    assert_eq!(r["model"], "lock");
    assert_eq!(r["point"], format!("lock.grant/{}", app.fstat(fd).unwrap().ino));
    // Another process names its own descriptors: this one is not its.
    let mut other = d.client();
    assert!(other.graft_try(None, &point, &wasm, 1).is_err());
}

/// The kernel's own read-ahead, recorded where nothing is bound, and a candidate replayed on it
/// in the ghost caches: what it would have read ahead where the default did.
#[test]
fn the_default_is_recorded_and_a_candidate_replayed_against_it() {
    use vino_kernel::Resource;
    let d = TestDaemon::start();
    let mut c = d.client();
    let fd = c.open("/data", OpenFlags::create()).unwrap();
    c.write(fd, &vec![9u8; 512 << 10]).unwrap();
    let point = format!("file.compute_ra/{fd}");
    c.graft_record_default(&point, 1 << 20).unwrap();
    c.seek(fd, 0).unwrap();
    let mut buf = vec![0u8; 4096];
    for _ in 0..64 {
        c.read(fd, &mut buf).unwrap();
    }
    let recording = Recording::from_bytes(&c.graft_record_stop(&point).unwrap()).unwrap();
    assert!(recording.invocations >= 64, "{} invocations", recording.invocations);
    assert!(recording.header.module_sha256.is_empty(), "no module: the default's");
    let options = ReplayOptions {
        decisions: true,
        ..Default::default()
    };
    let replayed = replay(&recording, READ_AHEAD.as_bytes(), options).unwrap();
    assert!(!replayed.same_module && replayed.failed == 0, "{replayed:?}");
    let ghost = vino_kernel::graft_try::replayed_ghost(&recording, &replayed, READ_AHEAD.as_bytes(), 64)
        .unwrap()
        .unwrap();
    let ghost = serde_json::to_value(ghost).unwrap();
    assert_eq!(ghost["reads"], recording.invocations, "{ghost}");
    assert!(
        ghost["live"]["prefetched"].as_u64().unwrap() > 0,
        "the default reads ahead: {ghost}"
    );
    assert!(ghost["candidate"]["prefetched"].as_u64().unwrap() > 0, "{ghost}");
    // With a graft bound the graft is what is recorded; binding one ends the default's.
    c.graft_record_default(&point, 1 << 20).unwrap();
    c.graft_load(&point, READ_AHEAD.as_bytes()).unwrap();
    let e = c.graft_record_default(&point, 1 << 20).unwrap_err();
    assert!(e.message.contains("a graft is bound"), "{e}");
    let ended = Recording::from_bytes(&c.graft_record_stop(&point).unwrap()).unwrap();
    assert_eq!(ended.ended.as_deref(), Some("a graft was bound"));
    c.graft_unload(&point).unwrap();
    // A recording of the default that reaches its limit stops there and says so (and the
    // reads go back to the default decided inline).
    c.graft_record_default(&point, 64).unwrap();
    for _ in 0..16 {
        c.read(fd, &mut buf).unwrap();
    }
    let full = Recording::from_bytes(&c.graft_record_stop(&point).unwrap()).unwrap();
    assert!(
        full.truncated && full.invocations < 16,
        "{} invocations",
        full.invocations
    );
    // A graftpoint whose default has no graft form.
    let e = c
        .graft_record_default(&format!("file.block_buddy/{fd}"), 1 << 20)
        .unwrap_err();
    assert!(e.message.contains("cannot be put as a graft's answers"), "{e}");
    // A recording left running when its starter goes is dropped with its charge.
    c.graft_record_default(&point, 1 << 20).unwrap();
    for _ in 0..8 {
        c.read(fd, &mut buf).unwrap();
    }
    drop(c);
    for r in [Resource::Grafts, Resource::GraftMemory] {
        all_refunded(&d, r);
    }
}
