//! Servers in the kernel: `http_server.c` bound to a port with `Process::net_serve` answers
//! another user's HTTP/1.1 requests (keep-alive, pipelining, ranges, HEAD, 403 and 404 from the
//! serving process's own permissions) from files it sends out of the page cache; hostile server
//! grafts close only their own connections and are unloaded; a server that ends leaves nothing;
//! a `dir.access` graft on the served tree runs nested inside the server graft's calls.

mod common;

use common::small_kernel;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vino_kernel::account::LimitsConfig;
use vino_kernel::{Credentials, Errno, Kernel, LOOPBACK, OpenFlags, Process, SocketWait};

const PATIENCE: SocketWait = SocketWait::For(Duration::from_secs(20));
const OWNER: u32 = 1000;

fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn put(p: &Process, path: &str, data: &[u8]) {
    let fd = p.open(path, OpenFlags::create()).unwrap();
    p.pwrite(fd, data, 0).unwrap();
    p.close(fd).unwrap();
}

/// A kernel whose user 1000 serves `/www` (a 4 KiB file, a 300 KiB one, an index) on `port`
/// with `http_server.c`; root owns `/www/secret`, which user 1000 may not read.
fn server(port: u16) -> (Arc<Kernel>, Arc<Process>) {
    let k = small_kernel(8192, LimitsConfig::default());
    let root = k.spawn(Credentials::root());
    root.mkdir("/www", 0o777).unwrap();
    put(&root, "/www/secret", b"root's only");
    root.chmod("/www/secret", 0o600).unwrap();
    k.exit(root.pid());
    let owner = k.spawn(Credentials::user(OWNER, OWNER));
    put(&owner, "/www/small", &content(4096, 1));
    put(&owner, "/www/big", &content(300 * 1024, 2));
    owner.mkdir("/www/docs", 0o755).unwrap();
    put(&owner, "/www/docs/index.html", b"<p>hello</p>\n");
    let wasm = vino_sdk::build_example("http_server", &vino_sdk::BuildOptions::default()).unwrap();
    owner.net_serve(port, 16, &wasm).unwrap();
    (k, owner)
}

/// One HTTP response: status, headers (lower-case names), body.
#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A client connection that keeps what it read past one response for the next.
struct Client {
    p: Arc<Process>,
    conn: u64,
    pending: Vec<u8>,
}

impl Client {
    fn connect(k: &Arc<Kernel>, port: u16) -> Client {
        let p = k.spawn(Credentials::user(2000, 2000));
        let conn = p.tcp_connect(SocketAddrV4::new(LOOPBACK, port), PATIENCE).unwrap();
        Client {
            p,
            conn,
            pending: Vec::new(),
        }
    }

    fn send(&self, request: &str) {
        let mut sent = 0;
        while sent < request.len() {
            sent += self
                .p
                .socket_send(self.conn, &request.as_bytes()[sent..], PATIENCE)
                .unwrap();
        }
    }

    /// More bytes; false at the end of the stream (a reset ends it too: a server that closes
    /// with a request unread resets).
    fn fill(&mut self) -> bool {
        let mut buf = vec![0u8; 64 * 1024];
        match self.p.socket_recv(self.conn, &mut buf, PATIENCE) {
            Ok(n) => {
                self.pending.extend_from_slice(&buf[..n]);
                n > 0
            }
            Err(e) if e.errno == Errno::ConnReset => false,
            Err(e) => panic!("recv: {e:?}"),
        }
    }

    /// The next response (`head`: to a HEAD request, so no body whatever Content-Length says).
    fn response(&mut self, head: bool) -> Response {
        let end = loop {
            if let Some(i) = self.pending.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            assert!(
                self.fill(),
                "the stream ended inside a head: {:?}",
                String::from_utf8_lossy(&self.pending)
            );
        };
        let text = String::from_utf8(self.pending[..end].to_vec()).unwrap();
        let mut lines = text.split("\r\n");
        let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        let headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (n, v) = l.split_once(':').unwrap();
                (n.to_ascii_lowercase(), v.trim().to_string())
            })
            .collect();
        self.pending.drain(..end);
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map_or(0, |(_, v)| v.parse().unwrap());
        let len = if head { 0 } else { len };
        while self.pending.len() < len {
            assert!(self.fill(), "the stream ended inside a body");
        }
        let body = self.pending.drain(..len).collect();
        Response { status, headers, body }
    }

    fn get(&mut self, path: &str, extra: &str) -> Response {
        self.send(&format!("GET {path} HTTP/1.1\r\nHost: vino\r\n{extra}\r\n"));
        self.response(false)
    }

    /// True once the server has closed the connection (all that was sent read).
    fn closed(&mut self) -> bool {
        !self.fill() && self.pending.is_empty()
    }
}

#[test]
fn a_graft_serves_http_from_the_page_cache_with_its_owners_permissions() {
    let (k, owner) = server(8080);
    let mut c = Client::connect(&k, 8080);
    // Keep-alive: every request on one connection.
    let r = c.get("/small", "");
    assert_eq!((r.status, r.body.as_slice()), (200, content(4096, 1).as_slice()));
    let r = c.get("/big", "");
    assert_eq!(r.status, 200);
    assert!(r.body == content(300 * 1024, 2), "300 KiB whole");
    let r = c.get("/big", "Range: bytes=1000-1999\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 1000-1999/307200"));
    assert!(r.body == content(300 * 1024, 2)[1000..2000]);
    let r = c.get("/small", "Range: bytes=-10\r\n");
    assert_eq!((r.status, r.body.as_slice()), (206, &content(4096, 1)[4086..]));
    let r = c.get("/small", "Range: bytes=5000-\r\n");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */4096"));
    assert_eq!(c.get("/missing", "").status, 404);
    assert_eq!(c.get("/secret", "").status, 403, "the owner may not read it");
    assert_eq!(c.get("/../etc", "").status, 403);
    let r = c.get("/docs/", "");
    assert_eq!((r.status, r.body.as_slice()), (200, b"<p>hello</p>\n".as_slice()));
    // HEAD: the head alone.
    c.send("HEAD /big HTTP/1.1\r\nHost: vino\r\n\r\n");
    let r = c.response(true);
    assert_eq!((r.status, r.header("content-length")), (200, Some("307200")));
    // Pipelined: three requests in one send, three answers in order.
    c.send("GET /small HTTP/1.1\r\n\r\nGET /docs/index.html HTTP/1.1\r\n\r\nGET /missing HTTP/1.1\r\n\r\n");
    assert_eq!(c.response(false).body.len(), 4096);
    assert_eq!(c.response(false).body, b"<p>hello</p>\n");
    assert_eq!(c.response(false).status, 404);
    // Connection: close ends it after the answer.
    let r = c.get("/small", "Connection: close\r\n");
    assert_eq!(r.status, 200);
    assert!(c.closed(), "closed after the answer");
    let slot = owner
        .graft_list()
        .into_iter()
        .find(|s| s.point == "event.net.packet/8080")
        .expect("the server's slot is listed");
    assert_eq!(slot.stats.unwrap().failures, 0);
    // Another process may not serve the same port; the owner may not serve it twice.
    let wasm = vino_sdk::build_example("http_server", &vino_sdk::BuildOptions::default()).unwrap();
    assert_eq!(owner.net_serve(8080, 4, &wasm).unwrap_err().errno, Errno::AddrInUse);
    assert_eq!(c.p.net_serve(8080, 4, &wasm).unwrap_err().errno, Errno::AddrInUse);
    assert_eq!(c.p.net_serve(80, 4, &wasm).unwrap_err().errno, Errno::Acces);
    // The server's process ends: its listener, connections and thread go with it.
    let mut c2 = Client::connect(&k, 8080);
    assert_eq!(c2.get("/small", "").status, 200);
    k.exit(owner.pid());
    assert!(c2.closed());
    k.exit(c.p.pid());
    k.exit(c2.p.pid());
    let until = Instant::now() + Duration::from_secs(20);
    while k.net_stats().unwrap().stack_sockets > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(k.net_stats().unwrap(), vino_kernel::NetStats::default());
}

#[test]
fn a_hostile_server_graft_closes_only_its_own_connections_and_is_unloaded() {
    let (k, _owner) = server(8081);
    let other = k.spawn(Credentials::user(3000, 3000));
    for (port, wat) in [(9001u16, LOOP), (9002, TRAP), (9003, BAD_ACTION)] {
        let wasm = wat::parse_str(wat).unwrap();
        other.net_serve(port, 4, &wasm).unwrap();
        let mut failed = 0;
        // Enough for the slot's rule (16 failures in a minute, half of its calls) when every
        // connection's accept succeeds and its bytes fail.
        for _ in 0..20 {
            let mut c = Client::connect(&k, port);
            c.send("GET / HTTP/1.1\r\n\r\n");
            assert!(c.closed(), "port {port}: the connection is closed");
            failed += 1;
            k.exit(c.p.pid());
        }
        assert_eq!(failed, 20);
        let slot = other
            .graft_list()
            .into_iter()
            .find(|s| s.point == format!("event.net.packet/{port}"))
            .unwrap();
        assert!(slot.graft.is_none(), "port {port}: unloaded after its failures");
        // The well-behaved server of another user answered all along.
        let mut c = Client::connect(&k, 8081);
        assert_eq!(c.get("/small", "").status, 200);
        k.exit(c.p.pid());
        other.net_unserve(port).unwrap();
    }
    assert_eq!(other.net_unserve(9001).unwrap_err().errno, Errno::NoEnt);
}

/// Loops on every call.
/// A `dir.access` graft bound on the served tree runs nested inside the server graft's
/// transaction (its `vino_net_stat` walks the path) and again at the kernel's open of the file:
/// one that allows changes no answer, one that fails refuses (403), and neither counts as the
/// server graft's failure; unbound, the tree is served again.
#[test]
fn a_dir_access_graft_on_the_served_tree_runs_inside_the_server_graft() {
    let (k, owner) = server(8082);
    let mut c = Client::connect(&k, 8082);
    let options = vino_sdk::BuildOptions::default();
    let allow = vino_sdk::build_example("count_access", &options).unwrap();
    let trap = vino_sdk::build_c_str(
        "trap_access.c",
        "#include \"vino_graft.h\"\n\
         VINO_GRAFT(dir_access) int32_t dir_access(int32_t op, int32_t uid, int32_t gid, int32_t flags, \
         int64_t dir, int32_t name_len, int64_t now_s) {\n\
         (void)op, (void)uid, (void)gid, (void)flags, (void)dir, (void)name_len, (void)now_s;\n\
         __builtin_trap();\n}\n",
        &options,
    )
    .unwrap();
    let index = b"<p>hello</p>\n".as_slice();
    owner
        .dir_access_bind_at(vino_kernel::At::Root, b"/www/docs", Some(&allow))
        .unwrap();
    let r = c.get("/docs/index.html", "");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, index),
        "an allowing graft changes nothing"
    );
    owner
        .dir_access_bind_at(vino_kernel::At::Root, b"/www/docs", Some(&trap))
        .unwrap();
    assert_eq!(c.get("/docs/index.html", "").status, 403, "a failing graft refuses");
    let r = c.get("/small", "");
    assert_eq!(
        (r.status, r.body.len()),
        (200, 4096),
        "outside its tree, nothing changes"
    );
    owner
        .dir_access_bind_at(vino_kernel::At::Root, b"/www/docs", None)
        .unwrap();
    let r = c.get("/docs/index.html", "");
    assert_eq!((r.status, r.body.as_slice()), (200, index));
    let slot = owner
        .graft_list()
        .into_iter()
        .find(|s| s.point == "event.net.packet/8082")
        .expect("the server's slot is listed");
    assert_eq!(
        slot.stats.unwrap().failures,
        0,
        "the nested graft's failure is not the server's"
    );
    k.exit(c.p.pid());
    k.exit(owner.pid());
}

const LOOP: &str = r#"(module
  (memory (export "memory") 2)
  (global (export "vino_args") i32 (i32.const 0))
  (func (export "event_net_packet") (param i32 i32 i32) (result i32) (loop (br 0)) (i32.const 0)))"#;

/// Accepts, then traps on the bytes.
const TRAP: &str = r#"(module
  (memory (export "memory") 2)
  (global (export "vino_args") i32 (i32.const 0))
  (func (export "event_net_packet") (param i32 i32 i32) (result i32)
    (if (i32.eq (local.get 0) (i32.const 1)) (then unreachable))
    (i32.const 0)))"#;

/// Answers one action of a kind that does not exist.
const BAD_ACTION: &str = r#"(module
  (memory (export "memory") 2)
  (global (export "vino_args") i32 (i32.const 0))
  (func (export "event_net_packet") (param i32 i32 i32) (result i32)
    (i32.store (i32.const 49152) (i32.const 99))
    (i32.const 1)))"#;

/// Clients that ask for large files and never read hold the server's turns to send file bytes
/// only for a while: another client's response comes whole meanwhile.
#[test]
fn clients_that_never_read_do_not_hold_up_the_others() {
    let (k, owner) = server(8082);
    put(&owner, "/www/huge", &content(2 << 20, 3));
    let stuck: Vec<Client> = (0..3)
        .map(|_| {
            let c = Client::connect(&k, 8082);
            c.send("GET /huge HTTP/1.1\r\n\r\n");
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut c = Client::connect(&k, 8082);
    let r = c.get("/huge", "");
    assert_eq!(r.status, 200);
    assert!(r.body == content(2 << 20, 3), "2 MiB whole");
    for s in stuck {
        k.exit(s.p.pid());
    }
}
