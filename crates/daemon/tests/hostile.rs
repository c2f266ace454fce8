//! Hostile clients (garbage, truncated and oversized frames, wrong version, bad shared memory)
//! while a good client keeps working; 64 concurrent clients with no lost update and no leak.

mod common;

use common::{TestDaemon, graft};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use vino_client::{Client, ConnectOptions, OpenFlags, errno};
use vino_proto::{MAX_FRAME, Payload, Request, Response};

/// The daemon's answer on a raw connection, or `None` if it closed without one.
fn answer(s: &mut UnixStream) -> Option<Response> {
    let mut buf = Vec::new();
    vino_proto::read_frame(s, &mut buf, MAX_FRAME).ok()?;
    vino_proto::decode(&buf).ok()
}

/// True if the daemon closed the connection (after whatever answer it sent).
fn closed(s: &mut UnixStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => return e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut,
        }
    }
}

fn errno_of(r: Option<Response>) -> Option<i32> {
    match r {
        Some(Response::Error(e)) => Some(e.errno),
        _ => None,
    }
}

fn hello(s: &mut UnixStream) {
    vino_proto::write_frame(
        s,
        &Request::Hello {
            version: vino_proto::VERSION,
            client: "raw".into(),
            shm_len: 0,
        },
    )
    .unwrap();
    assert!(matches!(answer(s), Some(Response::Hello { .. })));
}

#[test]
fn hostile_clients_are_cut_off_and_nobody_else_notices() {
    let d = TestDaemon::start();
    let socket = d.socket();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let good = {
        let (socket, stop, done) = (socket.clone(), stop.clone(), done.clone());
        std::thread::spawn(move || {
            let mut c = Client::connect(&socket).unwrap();
            let fd = c.open("/good", OpenFlags::create()).unwrap();
            let mut buf = [0u8; 8];
            while !stop.load(Ordering::Relaxed) {
                let n = done.fetch_add(1, Ordering::Relaxed);
                c.pwrite(fd, &n.to_le_bytes(), 0).unwrap();
                c.pread(fd, &mut buf, 0).unwrap();
                assert_eq!(u64::from_le_bytes(buf), n);
            }
        })
    };
    let connect = || UnixStream::connect(&socket).unwrap();

    // Garbage: its first four bytes read as a huge length.
    let mut s = connect();
    s.write_all(&[0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7]).unwrap();
    assert_eq!(errno_of(answer(&mut s)), Some(errno::EMSGSIZE));
    assert!(closed(&mut s));

    // A length just over the limit, refused from the header alone.
    let mut s = connect();
    hello(&mut s);
    s.write_all(&((MAX_FRAME + 1) as u32).to_le_bytes()).unwrap();
    assert_eq!(errno_of(answer(&mut s)), Some(errno::EMSGSIZE));
    assert!(closed(&mut s));

    // A valid length with a payload that decodes to nothing.
    let mut s = connect();
    hello(&mut s);
    s.write_all(&[6, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).unwrap();
    assert_eq!(errno_of(answer(&mut s)), Some(errno::EPROTO));
    assert!(closed(&mut s));

    // Truncated: half a frame, then gone.
    let mut s = connect();
    hello(&mut s);
    s.write_all(&[100, 0, 0, 0, 1, 2, 3]).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(closed(&mut s));

    // Another protocol version, and a request before Hello.
    let mut s = connect();
    vino_proto::write_frame(
        &mut s,
        &Request::Hello {
            version: 999,
            client: "x".into(),
            shm_len: 0,
        },
    )
    .unwrap();
    assert_eq!(errno_of(answer(&mut s)), Some(errno::EPROTO));
    assert!(closed(&mut s));
    let mut s = connect();
    vino_proto::write_frame(&mut s, &Request::Null).unwrap();
    assert_eq!(errno_of(answer(&mut s)), Some(errno::EPROTO));

    // Shared memory announced but not passed.
    let mut s = connect();
    vino_proto::write_frame(
        &mut s,
        &Request::Hello {
            version: vino_proto::VERSION,
            client: "x".into(),
            shm_len: 4096,
        },
    )
    .unwrap();
    assert_eq!(errno_of(answer(&mut s)), Some(errno::EINVAL));

    // In-band data over the limit.
    let mut s = connect();
    hello(&mut s);
    let big = Request::Write {
        fd: 0,
        data: Payload::Inline(vec![0; vino_proto::MAX_DATA + 1]),
        offset: None,
    };
    vino_proto::write_frame(&mut s, &big).unwrap();
    assert_eq!(errno_of(answer(&mut s)), Some(errno::E2BIG));
    assert!(closed(&mut s));

    // Shared-memory offsets outside the area.
    let mut c = d.client();
    let fd = c.open("/shm", OpenFlags::create()).unwrap();
    let bad = Request::Write {
        fd,
        data: Payload::Shm {
            offset: u64::MAX - 10,
            len: 100,
        },
        offset: None,
    };
    assert_eq!(c.call(&bad).unwrap_err().errno, errno::EINVAL);
    let bad = Request::Read {
        fd,
        len: 100,
        offset: Some(0),
        to_shm: Some(u64::MAX),
    };
    assert_eq!(c.call(&bad).unwrap_err().errno, errno::EINVAL);
    c.null().unwrap();
    drop(c);

    // Random bytes, many times.
    let mut seed = 0x1234_5678_u64;
    for _ in 0..50 {
        let mut s = connect();
        let bytes: Vec<u8> = (0..64)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let _ = s.write_all(&bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        assert!(closed(&mut s));
    }

    let before = done.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    good.join().expect("the good client kept working");
    assert!(done.load(Ordering::Relaxed) > before);
    d.wait_processes(0);
}

#[test]
fn shared_memory_carries_big_reads_and_writes() {
    let d = TestDaemon::start();
    let mut c = d.client();
    assert!(c.has_shm());
    let data: Vec<u8> = (0..(256 << 10)).map(|i: u32| (i * 7 + i / 4096) as u8).collect();
    let fd = c.open("/big", OpenFlags::create()).unwrap();
    assert_eq!(c.write(fd, &data).unwrap(), data.len());
    let mut back = vec![0u8; data.len()];
    assert_eq!(c.pread(fd, &mut back, 0).unwrap(), data.len());
    assert!(back == data, "the bytes through shared memory differ");
    // The same through the socket alone.
    let mut plain = Client::connect_with(
        d.socket(),
        &ConnectOptions {
            shm: 0,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(!plain.has_shm());
    let pfd = plain.open("/big", OpenFlags::read_only()).unwrap();
    let mut back2 = vec![0u8; 64 << 10];
    assert_eq!(plain.pread(pfd, &mut back2, 4096).unwrap(), 64 << 10);
    assert_eq!(back2[..], data[4096..4096 + (64 << 10)]);
}

#[test]
fn sixty_four_clients_lose_no_update_and_leak_nothing() {
    const CLIENTS: u64 = 64;
    const REC: usize = 16;
    let d = TestDaemon::start();
    let (ra, _) = graft("sequential_ra");
    let until = Instant::now() + Duration::from_secs(3);
    let threads: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let (socket, ra) = (d.socket(), ra.clone());
            std::thread::spawn(move || {
                let opts = ConnectOptions {
                    client: format!("c{id}"),
                    shm: if id % 2 == 0 { 64 << 10 } else { 0 },
                    ..Default::default()
                };
                let mut c = Client::connect_with(&socket, &opts).unwrap();
                let log = OpenFlags {
                    create: true,
                    write: true,
                    read: true,
                    append: true,
                    mode: 0o644,
                    ..Default::default()
                };
                let fd = c.open("/log", log).unwrap();
                if id % 4 == 0 {
                    c.graft_load(&format!("file.compute_ra/{fd}"), &ra).unwrap();
                }
                let mut n = 0u64;
                while Instant::now() < until {
                    let rec = format!("{id:05} {n:09}\n");
                    assert_eq!(rec.len(), REC);
                    assert_eq!(c.write(fd, rec.as_bytes()).unwrap(), REC);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let counts: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    d.wait_processes(0);
    let kernel = d.handle().kernel();
    assert!(kernel.file_grafts().is_empty());
    assert!(kernel.global_grafts().iter().all(|s| s.graft.is_none()));
    let mut c = d.client();
    let fd = c.open("/log", OpenFlags::read_only()).unwrap();
    let size = c.fstat(fd).unwrap().size as usize;
    assert_eq!(
        size,
        counts.iter().sum::<u64>() as usize * REC,
        "every record is there, none torn"
    );
    let mut all = vec![0u8; size];
    let mut got = 0;
    while got < size {
        let n = c
            .pread(fd, &mut all[got..(got + (1 << 20)).min(size)], got as u64)
            .unwrap();
        assert!(n > 0);
        got += n;
    }
    let mut next = vec![0u64; CLIENTS as usize];
    for rec in all.chunks(REC) {
        let text = std::str::from_utf8(rec).unwrap();
        let (id, n) = text.trim_end().split_once(' ').unwrap();
        let (id, n): (usize, u64) = (id.parse().unwrap(), n.parse().unwrap());
        assert_eq!(n, next[id], "client {id}'s records out of order or missing");
        next[id] += 1;
    }
    assert_eq!(next, counts);
    let top = c.top().unwrap();
    assert_eq!(top.processes.len(), 1, "only the checker is left");
    assert_eq!(top.processes[0].open_files, 1);
    assert!(top.grafts.is_empty());
}

#[test]
fn a_module_too_large_is_refused_with_its_reason_and_the_connection_lives() {
    let d = TestDaemon::start();
    let mut c = d.client();
    let huge = vec![0u8; vino_proto::MAX_MODULE + 1];
    let e = c.graft_load("vas.pick_victim", &huge).unwrap_err();
    assert_eq!(e.errno, errno::E2BIG, "{e}");
    assert!(e.message.contains("more than vinod accepts"), "not a broken pipe: {e}");
    c.null().expect("the connection is still usable");
}
