//! Stream layers on sockets (`Process::socket_push`/`socket_pop`): the stream grafts of files
//! (compression, ChaCha20-Poly1305) on a connection's bytes, between two users' processes over
//! loopback; a peer without the layer sees only frames, and what it forges, truncates or
//! malforms is refused; hostile layers fail their own calls and send nothing half-made; a
//! socket's layers leave no graft or charge behind.

mod common;

use common::small_kernel;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::Duration;
use vino_kernel::account::{LimitsConfig, Resource};
use vino_kernel::socket_layers::{FRAME_HEADER, MAX_LAYERS};
use vino_kernel::{Credentials, Errno, Kernel, LOOPBACK, Process, SocketId, SocketWait};
use vino_sdk::BuildOptions;

const PATIENCE: SocketWait = SocketWait::For(Duration::from_secs(20));

fn example(name: &str) -> Vec<u8> {
    vino_sdk::build_example(name, &BuildOptions::default()).unwrap()
}

fn hostile(name: &str) -> Vec<u8> {
    vino_sdk::build_c_bytes(&vino_sdk::hostile_path(name), &BuildOptions::default()).unwrap()
}

/// Two users' processes and a connection between them: (server, its end, client, its end).
fn pair(k: &Arc<Kernel>, port: u16) -> (Arc<Process>, SocketId, Arc<Process>, SocketId) {
    let server = k.spawn(Credentials::user(1000, 1000));
    let client = k.spawn(Credentials::user(2000, 2000));
    let listener = server.tcp_listen(port, 1).unwrap();
    let conn = client.tcp_connect(SocketAddrV4::new(LOOPBACK, port), PATIENCE).unwrap();
    let (accepted, _) = server.tcp_accept(listener, PATIENCE).unwrap();
    server.socket_close(listener).unwrap();
    (server, accepted, client, conn)
}

fn send_all(p: &Process, s: SocketId, mut data: &[u8]) {
    while !data.is_empty() {
        let n = p.socket_send(s, data, PATIENCE).unwrap();
        data = &data[n..];
    }
}

fn recv_exact(p: &Process, s: SocketId, n: usize) -> Vec<u8> {
    let (mut got, mut buf) = (Vec::new(), vec![0u8; 40_000]);
    while got.len() < n {
        let want = (n - got.len()).min(buf.len());
        let k = p.socket_recv(s, &mut buf[..want], PATIENCE).unwrap();
        assert!(k > 0, "the stream ended after {} of {n} bytes", got.len());
        got.extend_from_slice(&buf[..k]);
    }
    got
}

/// The key of the example encryptor, word by word, by control calls on the layer.
fn give_key(p: &Process, layer: &str) {
    for word in 0..4 {
        p.graft_call(layer, "set_key", &[word, 0x0123_4567_89ab_cdef ^ word])
            .unwrap();
    }
}

fn sample(n: usize) -> Vec<u8> {
    // Half text that compresses, half bytes that do not.
    let mut x = 0x9e37_79b9_u32;
    (0..n)
        .map(|i| {
            if (i / 4096) % 2 == 0 {
                b"the quick brown fox "[i % 20]
            } else {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            }
        })
        .collect()
}

#[test]
fn a_conversation_goes_plain_then_compressed_and_sealed_then_plain_again() {
    let k = small_kernel(4096, LimitsConfig::default());
    let (server, s, client, c) = pair(&k, 7200);
    // In the clear first, then both push at the same point of the stream (as STARTTLS).
    send_all(&client, c, b"STARTLAYERS\n");
    assert_eq!(recv_exact(&server, s, 12), b"STARTLAYERS\n");
    let (lz4, chacha) = (example("lz4_stream"), example("chacha20poly1305_stream"));
    for (p, sock) in [(&server, s), (&client, c)] {
        assert_eq!(p.socket_push(sock, &lz4).unwrap(), format!("net.stream/{sock}/0"));
        let sealed = p.socket_push(sock, &chacha).unwrap();
        give_key(p, &sealed);
        assert_eq!(p.socket_layer_count(sock), 2);
    }
    // Both ways at once, more than a frame at a time, from threads of their own.
    let (up, down) = (sample(300_000), sample(150_001));
    let sender = std::thread::spawn({
        let (client, up) = (client.clone(), up.clone());
        move || send_all(&client, c, &up)
    });
    let replier = std::thread::spawn({
        let (server, down) = (server.clone(), down.clone());
        move || send_all(&server, s, &down)
    });
    assert_eq!(recv_exact(&server, s, up.len()), up);
    assert_eq!(recv_exact(&client, c, down.len()), down);
    sender.join().unwrap();
    replier.join().unwrap();
    // Pop both layers on both sides: the clear again.
    for (p, sock) in [(&server, s), (&client, c)] {
        p.socket_pop(sock).unwrap();
        p.socket_pop(sock).unwrap();
        assert_eq!(p.socket_pop(sock).unwrap_err().errno, Errno::Inval);
    }
    send_all(&server, s, b"bye");
    assert_eq!(recv_exact(&client, c, 3), b"bye");
    client.socket_close(c).unwrap();
    assert_eq!(server.socket_recv(s, &mut [0u8; 8], PATIENCE).unwrap(), 0);
    for p in [&server, &client] {
        k.exit(p.pid());
    }
    for uid in [1000, 2000] {
        let account = k.accounts().user(uid);
        assert_eq!(account.used(Resource::SocketBytes), 0, "uid {uid}");
        assert_eq!(account.used(Resource::Grafts), 0, "uid {uid}");
    }
}

#[test]
fn a_peer_without_the_layer_sees_sealed_frames_and_what_it_forges_is_refused() {
    let k = small_kernel(4096, LimitsConfig::default());
    let (server, s, client, c) = pair(&k, 7201);
    let sealed = client.socket_push(c, &example("chacha20poly1305_stream")).unwrap();
    // No key yet: the send is refused and nothing goes out.
    let secret = b"attack at dawn, attack at dawn".repeat(10);
    assert_eq!(
        client.socket_send(c, &secret, PATIENCE).unwrap_err().errno,
        Errno::Acces
    );
    give_key(&client, &sealed);
    send_all(&client, c, &secret);
    // The server reads a frame: a header, then ciphertext and a tag.
    let header = recv_exact(&server, s, FRAME_HEADER);
    let coded = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
    let plain = u32::from_le_bytes(header[4..8].try_into().unwrap()) as usize;
    assert_eq!((plain, coded), (secret.len(), secret.len() + 16));
    let body = recv_exact(&server, s, coded);
    assert!(
        !body.windows(6).any(|w| w == b"attack"),
        "the plaintext is not on the wire"
    );
    // It replays the frame back: the index's direction differs, the tag fails, the stream
    // is broken for good.
    send_all(&server, s, &header);
    send_all(&server, s, &body);
    let mut buf = [0u8; 64];
    assert_eq!(client.socket_recv(c, &mut buf, PATIENCE).unwrap_err().errno, Errno::Io);
    assert_eq!(client.socket_recv(c, &mut buf, PATIENCE).unwrap_err().errno, Errno::Io);

    // A raw frame (plaintext the encryptor never made) is the encryptor's to refuse.
    let (server, s, client, c) = pair(&k, 7202);
    let sealed = client.socket_push(c, &example("chacha20poly1305_stream")).unwrap();
    give_key(&client, &sealed);
    send_all(&server, s, &frame(true, b"hello", b"hello".len()));
    assert_eq!(client.socket_recv(c, &mut buf, PATIENCE).unwrap_err().errno, Errno::Io);
}

/// A frame as a peer would write it by hand.
fn frame(raw: bool, body: &[u8], plain_len: usize) -> Vec<u8> {
    let mut f = Vec::new();
    let flag = if raw { 1u32 << 31 } else { 0 };
    f.extend_from_slice(&(body.len() as u32 | flag).to_le_bytes());
    f.extend_from_slice(&(plain_len as u32).to_le_bytes());
    f.extend_from_slice(&[0u8; FRAME_HEADER - 8]);
    f.extend_from_slice(body);
    f
}

#[test]
fn malformed_and_truncated_streams_are_protocol_errors() {
    let k = small_kernel(4096, LimitsConfig::default());
    let lz4 = example("lz4_stream");
    let mut buf = [0u8; 64];
    // A compressor takes its peer's raw frames as they are.
    let (server, s, client, c) = pair(&k, 7203);
    client.socket_push(c, &lz4).unwrap();
    send_all(&server, s, &frame(true, b"hello", 5));
    assert_eq!(recv_exact(&client, c, 5), b"hello");
    // A peer that trickles a frame does not hold a receive past its wait; what came is kept.
    let (server2, s2, client2, c2) = pair(&k, 7208);
    client2.socket_push(c2, &lz4).unwrap();
    let trickle = std::thread::spawn(move || {
        for b in frame(true, b"slow!", 5) {
            server2.socket_send(s2, &[b], PATIENCE).unwrap();
            std::thread::sleep(Duration::from_millis(25));
        }
    });
    let short = SocketWait::For(Duration::from_millis(150));
    assert_eq!(
        client2.socket_recv(c2, &mut buf, short).unwrap_err().errno,
        Errno::TimedOut
    );
    assert_eq!(recv_exact(&client2, c2, 5), b"slow!");
    trickle.join().unwrap();
    // A header past the bounds: EPROTO, and the stream stays broken.
    send_all(&server, s, &frame(false, b"", 1 << 20));
    assert_eq!(
        client.socket_recv(c, &mut buf, PATIENCE).unwrap_err().errno,
        Errno::Proto
    );
    assert_eq!(
        client.socket_recv(c, &mut buf, PATIENCE).unwrap_err().errno,
        Errno::Proto
    );
    // A raw frame whose lengths disagree.
    let (server, s, client, c) = pair(&k, 7204);
    client.socket_push(c, &lz4).unwrap();
    send_all(&server, s, &frame(true, b"hello", 4));
    assert_eq!(
        client.socket_recv(c, &mut buf, PATIENCE).unwrap_err().errno,
        Errno::Proto
    );
    // Half a frame, then the end: no clean end but EPROTO.
    let (server, s, client, c) = pair(&k, 7205);
    client.socket_push(c, &lz4).unwrap();
    let whole = frame(true, b"hello", 5);
    send_all(&server, s, &whole[..FRAME_HEADER + 2]);
    // The reader takes in what came; a pop with part of a frame in is refused.
    for _ in 0..400 {
        if client.socket_layer_bytes(c) == FRAME_HEADER + 2 {
            break;
        }
        let e = client.socket_recv(c, &mut buf, SocketWait::For(Duration::from_millis(50)));
        assert_eq!(e.unwrap_err().errno, Errno::TimedOut);
    }
    assert_eq!(client.socket_layer_bytes(c), FRAME_HEADER + 2);
    assert_eq!(client.socket_pop(c).unwrap_err().errno, Errno::Busy);
    server.socket_close(s).unwrap();
    assert_eq!(
        client.socket_recv(c, &mut buf, PATIENCE).unwrap_err().errno,
        Errno::Proto
    );
}

#[test]
fn hostile_layers_fail_their_own_calls_and_leave_nothing() {
    let k = small_kernel(4096, LimitsConfig::default());
    let (server, s, client, c) = pair(&k, 7206);
    let account = k.accounts().user(2000);
    let socket_bytes = account.used(Resource::SocketBytes);
    let mut buf = [0u8; 64];
    // Looping past the budget, claiming too many bytes, trapping half-way: the send fails
    // (EIO) and nothing reaches the peer; the next send through a sound layer goes whole.
    for (name, lethal) in [
        ("stream_loop", b"Loop"),
        ("stream_overflow", b"Over"),
        ("stream_partial_trap", b"Trap"),
    ] {
        let layer = client.socket_push(c, &hostile(name)).unwrap();
        assert_eq!(
            client.socket_send(c, lethal, PATIENCE).unwrap_err().errno,
            Errno::Io,
            "{layer}"
        );
        client.socket_pop(c).unwrap();
        assert_eq!(
            server.socket_recv(s, &mut buf, SocketWait::No).unwrap_err().errno,
            Errno::Again
        );
    }
    // A module that is no stream graft is refused at push.
    let e = client.socket_push(c, &example("reno_cc")).unwrap_err();
    assert_eq!(e.errno, Errno::Inval, "{e}");
    assert_eq!(client.socket_layer_count(c), 0);
    // At most MAX_LAYERS layers.
    let lz4 = example("lz4_stream");
    for _ in 0..MAX_LAYERS {
        client.socket_push(c, &lz4).unwrap();
    }
    assert_eq!(client.socket_push(c, &lz4).unwrap_err().errno, Errno::NoBufs);
    // Four layers deep, a frame still goes through (the server takes the same four).
    for _ in 0..MAX_LAYERS {
        server.socket_push(s, &lz4).unwrap();
    }
    let data = sample(70_000);
    send_all(&client, c, &data);
    assert_eq!(recv_exact(&server, s, data.len()), data);
    // Only a connection has layers; only its owner's process reaches them.
    let listener = server.tcp_listen(7207, 1).unwrap();
    assert_eq!(server.socket_push(listener, &lz4).unwrap_err().errno, Errno::Inval);
    let datagrams = server.udp_bind(0).unwrap();
    assert_eq!(server.socket_push(datagrams, &lz4).unwrap_err().errno, Errno::Inval);
    let unconnected = server.tcp_bind(0).unwrap();
    assert_eq!(server.socket_push(unconnected, &lz4).unwrap_err().errno, Errno::NotConn);
    assert_eq!(server.socket_push(c, &lz4).unwrap_err().errno, Errno::BadF);
    assert!(
        server
            .graft_call(&format!("net.stream/{c}/0"), "set_key", &[0, 0])
            .is_err()
    );
    // Closing takes the layers off and gives their charges back (the socket's own buffers
    // go when its connection has ended).
    assert!(account.used(Resource::Grafts) >= MAX_LAYERS as u64);
    assert!(account.used(Resource::SocketBytes) > socket_bytes);
    client.socket_close(c).unwrap();
    assert_eq!(account.used(Resource::Grafts), 0);
    assert!(account.used(Resource::SocketBytes) <= socket_bytes);
}
