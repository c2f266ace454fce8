//! The inputs each fuzz target starts from: real request sequences, images with a few
//! patches, modules of every graftpoint. `scripts/fuzz.sh` writes them into the corpus before
//! a run; the corpus test runs them on stable.

use vino_blockdev::rng::SplitMix64;
use vino_kernel::graftpoints::{self, Grafter};
use vino_proto::{EventKind, LockKind, OpenFlags, Payload, Request, XattrHow};
use vino_sim::grafts::{self, Behaviour};

/// The seeds of target `name`.
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    match name {
        "protocol" => protocol(),
        "image" => image(),
        "graft" => graft(),
        "program" => program(),
        "frames" => frames(),
        "recording" => recording(),
        other => panic!("no fuzz target {other}"),
    }
}

/// `count` inputs of up to `max_len` pseudo-random bytes (from `seed`).
pub fn random(seed: u64, count: usize, max_len: usize) -> Vec<Vec<u8>> {
    let mut rng = SplitMix64::new(seed);
    (0..count)
        .map(|_| {
            let len = rng.below(max_len as u64 + 1) as usize;
            (0..len).map(|_| rng.next_u64() as u8).collect()
        })
        .collect()
}

fn protocol() -> Vec<Vec<u8>> {
    use crate::protocol::input;
    let s = |p: &str| p.to_string();
    let b = |p: &str| p.as_bytes().to_vec();
    let rw = OpenFlags::read_write();
    let files = vec![
        Request::Null,
        Request::Open {
            path: s("/a"),
            flags: rw,
        },
        Request::Read {
            fd: 0,
            len: 4096,
            offset: Some(100),
            to_shm: None,
        },
        Request::Write {
            fd: 0,
            data: Payload::Inline(vec![1; 3000]),
            offset: Some(4000),
        },
        Request::Seek { fd: 0, offset: 10 },
        Request::Ftruncate { fd: 0, size: 20_000 },
        Request::Fallocate {
            fd: 0,
            keep_size: true,
            offset: 0,
            len: 40_000,
        },
        Request::FallocateMode {
            fd: 0,
            mode: 0x03,
            offset: 4096,
            len: 8192,
        },
        Request::Fsync { fd: 0 },
        Request::Fstat { fd: 0 },
        Request::Close { fd: 0 },
        Request::Stat { path: s("/d/f") },
        Request::StreamStatus { path: s("/d/f") },
        Request::Sync,
    ];
    let names = vec![
        Request::Mkdir {
            path: s("/x"),
            mode: 0o755,
        },
        Request::Open {
            path: s("/x/y"),
            flags: OpenFlags::create(),
        },
        Request::Rename {
            from: s("/x/y"),
            to: s("/x/z"),
        },
        Request::Readdir {
            path: s("/x"),
            cookie: 0,
        },
        Request::OpenAt {
            dirfd: None,
            path: b("/x"),
            flags: OpenFlags::directory(),
        },
        Request::MkdirAt {
            dirfd: Some(1),
            path: b("sub"),
            mode: 0o700,
        },
        Request::SymlinkAt {
            target: b("/a"),
            dirfd: Some(1),
            path: b("ln"),
        },
        Request::ReadlinkAt {
            dirfd: Some(1),
            path: b("ln"),
        },
        Request::StatAt {
            dirfd: Some(1),
            path: b("ln"),
            follow: true,
        },
        Request::LinkAt {
            from_dirfd: None,
            from: b("/x/z"),
            to_dirfd: Some(1),
            to: b("hard"),
            follow: false,
        },
        Request::RenameAt {
            from_dirfd: Some(1),
            from: b("sub"),
            to_dirfd: None,
            to: b("/sub2"),
            no_replace: true,
        },
        Request::SetXattr {
            dirfd: None,
            path: b("/x/z"),
            follow: true,
            name: b("user.k"),
            value: b("v"),
            how: XattrHow::Create,
        },
        Request::ListXattr {
            dirfd: None,
            path: b("/x/z"),
            follow: true,
        },
        Request::AccessAt {
            dirfd: None,
            path: b("/p"),
            mode: 4,
            follow: true,
        },
        Request::ReaddirFd { fd: 1, cookie: 0 },
        Request::UnlinkAt {
            dirfd: Some(1),
            path: b("hard"),
        },
        Request::Unlink { path: s("/x/z") },
        Request::RmdirAt {
            dirfd: None,
            path: b("/sub2"),
        },
    ];
    let locks = vec![
        Request::Open {
            path: s("/d/f"),
            flags: rw,
        },
        Request::Lock {
            fd: 0,
            kind: LockKind::Write,
            start: 0,
            len: 100,
            wait: false,
        },
        Request::GetLk {
            fd: 0,
            kind: LockKind::Read,
            start: 50,
            len: 10,
        },
        Request::Lock {
            fd: 0,
            kind: LockKind::Unlock,
            start: 0,
            len: 0,
            wait: true,
        },
        Request::EventFilter {
            kind: EventKind::Modify,
            inodes: Vec::new(),
            names: vec![s("f")],
        },
        Request::EventSubscribe {
            kind: EventKind::Modify,
        },
        Request::Write {
            fd: 0,
            data: Payload::Inline(b"x".to_vec()),
            offset: None,
        },
        Request::EventWait { timeout_ms: 0 },
        Request::Top,
    ];
    let mut out = vec![input(0, &files), input(1, &files), input(0, &names), input(0, &locks)];
    // A graft at every graftpoint the fuzzed user may bind, its list, stats, a control call,
    // and the unload; per-file graftpoints on descriptor 0.
    for g in graftpoints::all() {
        let (slot, open) = match g.who {
            // Privileged, or bound only by serving a port.
            Grafter::Privileged | Grafter::Server => continue,
            Grafter::Opener => (
                format!("{}/0", g.name),
                Some(Request::Open {
                    path: s("/a"),
                    flags: rw,
                }),
            ),
            // A file of the client's own making, which it may graft.
            Grafter::FileCreator | Grafter::FileCreatorOrPrivileged | Grafter::FileOwner => (
                format!("{}/0", g.name),
                Some(Request::Open {
                    path: s("/mine"),
                    flags: OpenFlags::create(),
                }),
            ),
            Grafter::PageOwner | Grafter::Listener | Grafter::Process => (g.name.to_string(), None),
            // A directory of the client's own making, its descriptor 0.
            Grafter::DirectoryOwner => (
                format!("{}/0", g.name),
                Some(Request::Open {
                    path: s("/mydir"),
                    flags: OpenFlags::directory(),
                }),
            ),
            // The user's own verifier.
            Grafter::PrivilegedOrUser => (format!("{}/user", g.name), None),
        };
        let wasm = grafts::module(g, Behaviour::Zero);
        let mut reqs: Vec<Request> = Vec::new();
        if g.who == Grafter::DirectoryOwner {
            reqs.push(Request::Mkdir {
                path: s("/mydir"),
                mode: 0o755,
            });
        }
        reqs.extend(open);
        reqs.extend([
            Request::GraftLoad {
                point: slot.clone(),
                wasm,
            },
            Request::GraftList,
            Request::GraftStats { point: slot.clone() },
            Request::GraftCall {
                point: slot.clone(),
                control: s("none"),
                args: vec![1, 2],
            },
            Request::GraftEvents,
            Request::Read {
                fd: 0,
                len: 100,
                offset: Some(0),
                to_shm: None,
            },
            Request::GraftUnload { point: slot },
        ]);
        out.push(input(0, &reqs));
    }
    out.extend(random(0x09e0_70c0, 8, 200));
    out
}

fn image() -> Vec<Vec<u8>> {
    let mut out = vec![
        Vec::new(),
        // The primary superblock's first bytes.
        vec![0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0],
    ];
    // A few bytes somewhere in each of the first used blocks.
    for block in 0..16u8 {
        out.push(vec![block, 40, 0, 4, 0xde, 0xad, 0xbe, 0xef]);
    }
    out.extend(random(0x1a6e, 16, 64));
    out.extend(crate::image::chunk_map_inputs());
    out
}

fn graft() -> Vec<Vec<u8>> {
    random(0x6aaf7, 24, 2000)
}

/// Real recordings, replayed on the module recorded and on another, and some cut short.
fn recording() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for reads in [0, 1, 20] {
        let rec = crate::recording::recorded(reads);
        for which in [0u8, 1] {
            let mut input = vec![which];
            input.extend_from_slice(&rec);
            seeds.push(input.clone());
            input.truncate(input.len() / 2);
            seeds.push(input);
        }
    }
    // Recordings with page accesses, replayed on the victim ghost too.
    for (reads, pages, resident) in [(0, 8, 4), (20, 64, 16)] {
        let rec = crate::recording::with_accesses(reads, pages, resident);
        for which in [2u8, 3] {
            let mut input = vec![which];
            input.extend_from_slice(&rec);
            seeds.push(input);
        }
    }
    seeds.extend(random(0x7ec0, 8, 300));
    seeds
}

/// Bytes only: the program target reads its calls and their arguments out of any input.
fn program() -> Vec<Vec<u8>> {
    let mut seeds = random(0x9e0c, 16, 400);
    seeds.push(vec![0; 64]);
    seeds.push(vec![0xff; 256]);
    seeds.push((0..=255).collect());
    seeds
}

/// Well-formed packets to the stack's sockets: a SYN to the listener, a datagram to the UDP
/// socket, an ICMP echo request, a RST and a FIN to no connection, and one IPv4 header with
/// options.
fn frames() -> Vec<Vec<u8>> {
    use crate::frames::{TCP_PORT, UDP_PORT, input};
    let ip = |proto: u8, body: &[u8]| {
        let len = (20 + body.len()) as u16;
        let mut p = vec![0x45, 0];
        p.extend_from_slice(&len.to_be_bytes());
        p.extend_from_slice(&[0, 1, 0x40, 0, 64, proto, 0, 0, 127, 0, 0, 2, 127, 0, 0, 1]);
        p.extend_from_slice(body);
        p
    };
    let tcp = |flags: u8| {
        let mut t = vec![0xc0, 0x01];
        t.extend_from_slice(&TCP_PORT.to_be_bytes());
        t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        ip(6, &t)
    };
    let mut udp = vec![0xc0, 0x02];
    udp.extend_from_slice(&UDP_PORT.to_be_bytes());
    udp.extend_from_slice(&[0, 12, 0, 0, b'p', b'i', b'n', b'g']);
    let echo = ip(1, &[8, 0, 0, 0, 0, 1, 0, 1, b'h', b'i']);
    let mut options = ip(17, &udp);
    options[0] = 0x46;
    options.splice(20..20, [1, 1, 1, 0]);
    vec![
        input(&[tcp(0x02)]),
        input(&[ip(17, &udp)]),
        input(&[echo]),
        input(&[tcp(0x04), tcp(0x01), tcp(0x12)]),
        input(&[options]),
        input(&[tcp(0x02), ip(17, &udp), tcp(0x10)]),
    ]
}
