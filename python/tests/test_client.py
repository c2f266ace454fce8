"""Tests of the Python client against a running daemon ($VINO_SOCKET; the library from $VINO_LIB).

    python3 -m pytest -q python/tests     # or, without pytest:  python3 python/tests/test_client.py

$VINO_TEST_GRAFT names the hot-list eviction graft (sdk/grafts/hotlist_evict.c, built) and
$VINO_TEST_CODEC the encrypting codec (sdk/grafts/chacha20poly1305_stream.c, built); the tests that
need them are skipped without them. `cargo test -p vino-client-c --test python_client` sets all
four.
"""

import errno
import os
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import vino  # noqa: E402

try:
    import pytest
except ImportError:  # run as a plain script
    pytest = None


class Skip(Exception):
    pass


def skip(why):
    if pytest is not None:
        pytest.skip(why)
    raise Skip(why)


def raises(exc_type, f, *args):
    """Calls f(*args), which must raise exc_type; returns the exception."""
    try:
        f(*args)
    except exc_type as e:
        return e
    raise AssertionError(f"{getattr(f, '__name__', f)}{args} did not raise {exc_type.__name__}")


def unique(name):
    """A path no other test (or run) uses."""
    return f"/py-{os.getpid()}-{name}"


def test_connect_and_null():
    with vino.Client() as c:
        assert c.pid > 0
        c.null()
        assert isinstance(c.privileged, bool)
    e = raises(OSError, c.null)
    assert e.errno == errno.EBADF


def test_a_missing_daemon_is_an_oserror_naming_the_socket():
    e = raises(OSError, vino.Client, "/nonexistent/vinod.sock")
    assert e.errno != 0
    assert "/nonexistent/vinod.sock" in e.strerror


def test_write_read_seek_truncate():
    path = unique("rw")
    with vino.Client() as c:
        fd = c.open(path, vino.O_RDWR | vino.O_CREAT | vino.O_EXCL, 0o600)
        assert c.write(fd, b"0123456789") == 10
        assert c.pwrite(fd, bytearray(b"ab"), 3) == 2
        c.seek(fd, 2)
        assert c.read(fd, 4) == b"2ab5"
        assert c.pread(fd, 100, 8) == b"89"
        assert c.pread(fd, 10, 100) == b""
        c.ftruncate(fd, 5)
        c.fsync(fd)
        st = c.fstat(fd)
        assert (st.size, st.kind, st.mode & 0o777) == (5, vino.KIND_REGULAR, 0o600)
        c.close(fd)
        assert (c.stat(path).ino, c.stat(path).size) == (st.ino, 5)
        raises(FileExistsError, c.open, path, vino.O_RDWR | vino.O_CREAT | vino.O_EXCL)
        e = raises(OSError, c.close, fd)
        assert e.errno == errno.EBADF
        c.unlink(path)


def test_bytes_with_every_value_and_a_large_write():
    path = unique("big")
    data = bytes(range(256)) * 1024  # 256 KiB, NULs included: through shared memory
    with vino.Client() as c:
        fd = c.open(path, vino.O_RDWR | vino.O_CREAT | vino.O_TRUNC)
        assert c.write(fd, data) == len(data)
        assert c.pread(fd, len(data), 0) == data
        c.close(fd)
        c.unlink(path)


def test_errors_carry_errno_and_message():
    with vino.Client() as c:
        e = raises(FileNotFoundError, c.open, unique("missing"))
        assert e.errno == errno.ENOENT
        assert e.strerror
        e = raises(OSError, c.open, unique("x"), 0x4000)
        assert e.errno == errno.EINVAL and "flags" in e.strerror


def test_directories():
    d = unique("dir")
    with vino.Client() as c:
        c.mkdir(d)
        raises(FileExistsError, c.mkdir, d)
        fd = c.open(d + "/a", vino.O_WRONLY | vino.O_CREAT)
        c.close(fd)
        c.rename(d + "/a", d + "/é")
        names = {e.name: e for e in c.readdir(d)}
        assert "é" in names and "a" not in names
        assert names["é"].kind == vino.KIND_REGULAR
        assert c.stat(d).kind == vino.KIND_DIRECTORY
        raises(OSError, c.rmdir, d)
        c.unlink(d + "/é")
        c.rmdir(d)
        raises(FileNotFoundError, c.stat, d)
        c.sync()


def test_names_at_from_a_directory_descriptor_with_byte_names():
    d = unique("at")
    with vino.Client() as c:
        c.mkdir_at(d, 0o755)
        dfd = c.open_at(d, vino.O_RDONLY | vino.O_DIRECTORY)
        raw = b"caf\xe9"  # Latin-1, not UTF-8
        fd = c.open_at(raw, vino.O_RDWR | vino.O_CREAT | vino.O_EXCL, 0o640, dir_fd=dfd)
        c.write(fd, raw)
        c.close(fd)
        st = c.stat_at(raw, dir_fd=dfd)
        assert (st.size, st.mode & 0o7777, st.kind) == (4, 0o640, vino.KIND_REGULAR)
        assert st.generation > 0 and st.rdev == 0
        # Listed from a bytes path: bytes; from a str path: str that goes back to the same bytes.
        assert [e.name for e in c.readdir_at(os.fsencode(d))] == [raw]
        (name,) = [e.name for e in c.readdir(d)]
        assert isinstance(name, str) and c.stat(d + "/" + name).ino == st.ino
        assert [e.name for e in c.readdir_fd(dfd)] == [name]
        c.rename_at(raw, "renamed", src_dir_fd=dfd, dst_dir_fd=dfd)
        fd = c.open_at("renamed", dir_fd=dfd)
        assert c.read(fd, 10) == raw
        c.close(fd)
        c.mkdir_at("sub", dir_fd=dfd)
        e = raises(FileExistsError, c.rename_at, "renamed", "sub", dfd, dfd, True)
        assert e.errno == errno.EEXIST
        c.rmdir_at("sub", dir_fd=dfd)
        e = raises(NotADirectoryError, c.open_at, d + "/renamed", vino.O_RDONLY | vino.O_DIRECTORY)
        e = raises(OSError, c.stat_at, "x", 9999)
        assert e.errno == errno.EBADF
        c.unlink_at("renamed", dir_fd=dfd)
        c.close(dfd)
        c.rmdir_at(d)


def test_symbolic_links_and_hard_links():
    d = unique("links")
    with vino.Client() as c:
        c.mkdir(d)
        fd = c.open(d + "/target", vino.O_WRONLY | vino.O_CREAT)
        c.write(fd, b"T")
        c.close(fd)
        c.symlink("target", d + "/link")
        assert c.readlink(d + "/link") == "target"
        assert c.readlink(os.fsencode(d + "/link")) == b"target"
        long_target = "x" * 1000  # past readlink's first buffer
        c.symlink(long_target, d + "/long")
        assert c.readlink(d + "/long") == long_target
        assert c.lstat(d + "/link").kind == vino.KIND_SYMLINK
        assert c.stat_at(d + "/link").ino == c.stat(d + "/target").ino
        e = raises(OSError, c.open_at, d + "/link", vino.O_RDONLY | vino.O_NOFOLLOW)
        assert e.errno == errno.ELOOP
        c.symlink("b", d + "/a")
        c.symlink("a", d + "/b")
        e = raises(OSError, c.stat_at, d + "/a")
        assert e.errno == errno.ELOOP
        c.link(d + "/link", d + "/hard", follow_symlinks=True)
        assert c.stat(d + "/target").nlink == 2
        for n in ("link", "long", "a", "b", "hard", "target"):
            c.unlink_at(d + "/" + n)
        c.rmdir(d)


def test_setattr_access_and_fallocate():
    path = unique("attrs")
    with vino.Client() as c:
        fd = c.open(path, vino.O_RDWR | vino.O_CREAT | vino.O_EXCL, 0o644)
        assert not c.access(path, os.X_OK)  # nobody may execute it, root neither
        assert c.access(path, os.F_OK)
        st = c.chmod(path, 0o755)
        assert st.mode & 0o7777 == 0o755 and c.access(path, os.X_OK)
        raises(FileNotFoundError, c.access, unique("missing"), os.F_OK)
        st = c.setattr(path, size=10, atime_ns=1_000_000_000, mtime_ns=2_000_000_000)
        assert (st.size, st.atime_ns, st.mtime_ns) == (10, 1_000_000_000, 2_000_000_000)
        st = c.utime(path)
        assert st.mtime_ns > 2_000_000_000
        st = c.utime(path, (5, 6))
        assert (st.atime_ns, st.mtime_ns) == (5, 6)
        assert c.truncate(path, 3).size == 3
        assert c.fsetattr(fd, size=1, mtime_ns=vino.UTIME_NOW).size == 1
        st = c.chown(path, -1, -1)
        assert st.uid == c.fstat(fd).uid
        c.fallocate(fd, 0, 1 << 20)
        st = c.fstat(fd)
        assert st.size == 1 << 20 and st.blocks >= 256
        c.fallocate(fd, 1 << 20, 1 << 20, keep_size=True)
        assert c.fstat(fd).size == 1 << 20
        e = raises(OSError, c.fallocate, fd, 0, 0)
        assert e.errno == errno.EINVAL
        held = c.fstat(fd).blocks
        c.fallocate(fd, 1 << 20, 1 << 20, keep_size=True, mode=vino.FALLOC_FL_PUNCH_HOLE)
        assert c.fstat(fd).blocks == st.blocks < held
        c.fallocate(fd, 0, 4096, mode=vino.FALLOC_FL_ZERO_RANGE)
        e = raises(OSError, c.fallocate, fd, 0, 4096, False, vino.FALLOC_FL_PUNCH_HOLE)
        assert e.errno == errno.EOPNOTSUPP
        c.close(fd)
        c.unlink(path)


def test_nodes_and_extended_attributes():
    d = unique("nodes")
    with vino.Client() as c:
        c.mkdir(d)
        c.mknod(d + "/fifo", vino.KIND_FIFO, 0o600)
        assert c.stat(d + "/fifo").kind == vino.KIND_FIFO
        e = raises(OSError, c.open, d + "/fifo")
        assert e.errno == errno.ENXIO
        if c.privileged:
            c.mknod(d + "/null", vino.KIND_CHAR_DEVICE, 0o666, (1 << 8) | 3)
            st = c.stat(d + "/null")
            assert (st.kind, st.rdev) == (vino.KIND_CHAR_DEVICE, (1 << 8) | 3)
            c.unlink(d + "/null")
        else:
            raises(PermissionError, c.mknod, d + "/null", vino.KIND_CHAR_DEVICE, 0o666, 259)
        f = d + "/f"
        c.close(c.open(f, vino.O_WRONLY | vino.O_CREAT))
        value = bytes(range(256))
        c.setxattr(f, "user.all", value, vino.XATTR_CREATE)
        raises(FileExistsError, c.setxattr, f, "user.all", b"x", vino.XATTR_CREATE)
        e = raises(OSError, c.setxattr, f, "user.none", b"x", vino.XATTR_REPLACE)
        assert e.errno == errno.ENODATA
        c.setxattr(f, "user.empty", b"")
        assert c.getxattr(f, "user.all") == value and c.getxattr(f, "user.empty") == b""
        assert sorted(c.listxattr(f)) == ["user.all", "user.empty"]
        assert sorted(c.listxattr(os.fsencode(f))) == [b"user.all", b"user.empty"]
        e = raises(OSError, c.setxattr, f, "trusted.x", b"1")
        assert e.errno == errno.EOPNOTSUPP
        c.removexattr(f, "user.all")
        e = raises(OSError, c.getxattr, f, "user.all")
        assert e.errno == errno.ENODATA
        for n in ("fifo", "f"):
            c.unlink(d + "/" + n)
        c.rmdir(d)


def test_top_lists_this_process():
    with vino.Client() as c:
        fd = c.open(unique("top"), vino.O_RDWR | vino.O_CREAT)
        c.write(fd, b"xyz")
        top = c.top()
        me = [p for p in top["processes"] if p["pid"] == c.pid]
        assert len(me) == 1 and me[0]["bytes_written"] >= 3 and me[0]["open_files"] == 1
        c.close(fd)


def graft():
    path = os.environ.get("VINO_TEST_GRAFT")
    if not path:
        skip("VINO_TEST_GRAFT is not set")
    return Path(path).read_bytes()


def test_graft_load_call_memory_unload():
    wasm = graft()
    point = "vas.pick_victim"
    with vino.Client() as c:
        info = c.graft_load(point, wasm)
        assert len(info.hash) == 64 and info.size == len(wasm) and info.owner == c.pid
        assert c.graft_call(point, "hot_add", 42) == 1
        assert c.graft_call(point, "hot_add", 43) == 2
        at = c.graft_symbol(point, "hot_list")
        c.graft_write_memory(point, at, struct.pack("<Q", 0))  # empty the list
        assert c.graft_call(point, "hot_add", 42) == 1
        # Out of range, refused rather than wrapped or truncated.
        e = raises(OSError, c.graft_write_memory, point, 2**32 + at, b"x")
        assert e.errno == errno.EINVAL
        e = raises(OSError, c.graft_call, point, "hot_add", 2**64 + 42)
        assert e.errno == errno.EINVAL
        assert c.graft_call(point, "hot_add", 43) == 2, "nothing was written by the refused calls"
        stats = c.graft_stats(point)
        assert stats["point"] == point and stats["policy"] == "wasm"
        assert any(s["point"] == point for s in c.graft_list())
        c.graft_unload(point)
        raises(OSError, c.graft_call, point, "hot_add", 1)
        raises(OSError, c.graft_load, point, b"not wasm")
        # Too large: said so (not "Broken pipe").
        e = raises(OSError, c.graft_load, point, bytes(16 * 2**20 + 1))
        assert e.errno == errno.E2BIG and "16777217 bytes" in e.strerror, e


def test_stream_bind_key_control_unbind():
    path = os.environ.get("VINO_TEST_CODEC")
    if not path:
        skip("VINO_TEST_CODEC is not set")
    wasm = Path(path).read_bytes()
    sealed, empty = unique("sealed"), unique("unsealed")
    with vino.Client() as c:
        fd = c.open(sealed, vino.O_RDWR | vino.O_CREAT, 0o600)
        assert c.stream_status(sealed) is None
        raises(OSError, c.stream_bind, sealed, b"not wasm")
        c.stream_bind(sealed, wasm)
        assert len(c.stream_status(sealed)["module"]) == 64
        # The key belongs to the user's codec instance, shared by its files: an earlier run of
        # this suite against the same daemon may have given it one.
        assert c.stream_ctl(sealed, "forget_key") == 0
        c.write(fd, b"secret")
        raises(OSError, c.fsync, fd)  # the encryptor stores nothing without its key
        c.stream_key(sealed, bytes(range(32)))
        c.fsync(fd)
        assert c.pread(fd, 6, 0) == b"secret"
        assert c.stream_ctl(sealed, "set_key", 9, 1) != 0, "key word 9 is refused by the codec"
        raises(OSError, c.stream_ctl, sealed, "no_such_control")
        raises(ValueError, c.stream_key, sealed, b"short")
        c.close(fd)
        c.close(c.open(empty, vino.O_RDWR | vino.O_CREAT, 0o600))
        c.stream_bind(empty, wasm)
        c.stream_unbind(empty)
        assert c.stream_status(empty) is None


def test_locks_conflict_between_two_clients():
    with vino.Client() as a, vino.Client() as b:
        name = unique("lock")
        fa = a.open(name, vino.O_RDWR | vino.O_CREAT)
        fb = b.open(name, vino.O_RDWR)
        a.lock(fa, vino.LOCK_WRITE, 0, 10, wait=False)
        e = raises(OSError, lambda: b.lock(fb, vino.LOCK_READ, 0, 1, wait=False))
        assert e.errno == errno.EAGAIN
        held = b.getlk(fb, vino.LOCK_READ, 0, 1)
        assert held is not None and held.pid == a.pid and held.start == 0 and held.len == 10
        assert a.getlk(fa, vino.LOCK_WRITE, 0, 10) is None
        a.lock(fa, vino.LOCK_UNLOCK, 0, 0)
        b.lock(fb, vino.LOCK_READ, 0, 1, wait=False)
        e = raises(OSError, a.lock, fa, 7)
        assert e.errno == errno.EINVAL
        a.close(fa)
        b.close(fb)


def test_events_reach_a_subscribed_client_through_its_filter():
    with vino.Client() as watcher, vino.Client() as actor:
        name = unique("watched")
        watcher.event_subscribe(vino.EVENT_CREATE)
        watcher.event_filter(vino.EVENT_CREATE, [], [name.lstrip("/")])
        for path in (unique("other"), name):
            actor.close(actor.open(path, vino.O_RDWR | vino.O_CREAT))
        got = watcher.event_wait(5000)
        assert [(e.kind, e.name, e.pid) for e in got] == [(vino.EVENT_CREATE, name.lstrip("/"), actor.pid)], got
        assert watcher.event_wait(100) == []
        e = raises(OSError, watcher.event_subscribe, vino.EVENT_OVERFLOW)
        assert e.errno == errno.EINVAL
        assert vino.EVENT_NAMES[vino.EVENT_OVERFLOW] == "overflow"


def test_library_lookup_honours_vino_lib():
    old = os.environ.get("VINO_LIB")
    try:
        os.environ["VINO_LIB"] = "/nonexistent/libvino.so"
        e = raises(OSError, vino.find_library)
        assert "/nonexistent/libvino.so" in e.strerror
    finally:
        if old is None:
            del os.environ["VINO_LIB"]
        else:
            os.environ["VINO_LIB"] = old


def main():
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_") and callable(f)]
    failed = 0
    for name, f in tests:
        try:
            f()
            print(f"ok      {name}")
        except Skip as s:
            print(f"skipped {name}: {s}")
        except Exception as e:  # report every failure, then fail
            failed += 1
            print(f"FAILED  {name}: {type(e).__name__}: {e}")
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
