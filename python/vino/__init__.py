"""Client of vinod, the VINO kernel daemon, over the C library libvino (ctypes).

A :class:`Client` is one connection, and so one kernel process: its open files, grafts and locks
go away when it is closed. Every method sends one request and waits for the answer; a failure
raises ``OSError(errno, message)``. Data is ``bytes``; paths are ``str``.

The library is ``$VINO_LIB`` (the file, or a directory holding ``libvino.so``), else
``libvino.so`` next to this package, else the workspace's ``target/release`` (or
``$CARGO_TARGET_DIR/release``).
"""

import ctypes
import json
import os
from ctypes import POINTER, byref, c_char, c_char_p, c_int, c_int64, c_size_t, c_uint, c_uint32, c_uint64, c_void_p
from pathlib import Path
from typing import Iterable, List, NamedTuple, Optional

__all__ = [
    "Client", "Stat", "DirEntry", "GraftInfo", "Lock", "Event", "find_library",
    "O_READ", "O_WRITE", "O_RDONLY", "O_WRONLY", "O_RDWR", "O_CREAT", "O_EXCL", "O_TRUNC", "O_APPEND",
    "O_NOFOLLOW", "O_DIRECTORY", "AT_ROOT", "UTIME_NOW", "UTIME_OMIT", "XATTR_CREATE", "XATTR_REPLACE",
    "KIND_REGULAR", "KIND_DIRECTORY", "KIND_SYMLINK", "KIND_FIFO", "KIND_SOCKET", "KIND_CHAR_DEVICE",
    "KIND_BLOCK_DEVICE", "LOCK_UNLOCK", "LOCK_READ", "LOCK_WRITE",
    "EVENT_OPEN", "EVENT_CLOSE", "EVENT_CREATE", "EVENT_UNLINK", "EVENT_MODIFY",
]

# Flags of Client.open, as VINO_O_* in vino.h.
O_READ = 0x01
O_WRITE = 0x02
O_RDONLY = O_READ
O_WRONLY = O_WRITE
O_RDWR = O_READ | O_WRITE
O_CREAT = 0x04
O_EXCL = 0x08
O_TRUNC = 0x10
O_APPEND = 0x20
O_NOFOLLOW = 0x40
O_DIRECTORY = 0x80

# The dirfd of the *_at methods that starts paths at the root.
AT_ROOT = -100
# Client.utimens times besides nanoseconds since the epoch.
UTIME_NOW = -1
UTIME_OMIT = -2
# Client.setxattr flags.
XATTR_CREATE = 1
XATTR_REPLACE = 2

KIND_REGULAR = 1
KIND_DIRECTORY = 2
KIND_SYMLINK = 3
KIND_FIFO = 4
KIND_SOCKET = 5
KIND_CHAR_DEVICE = 6
KIND_BLOCK_DEVICE = 7

LOCK_UNLOCK = 0
LOCK_READ = 1
LOCK_WRITE = 2

EVENT_OPEN = 1
EVENT_CLOSE = 2
EVENT_CREATE = 3
EVENT_UNLINK = 4
EVENT_MODIFY = 5

_NAME_MAX = 255


class Stat(NamedTuple):
    """A file's attributes."""
    ino: int
    kind: int  # KIND_*
    mode: int  # type and permission bits, as st_mode
    nlink: int
    uid: int
    gid: int
    size: int
    blocks: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    rdev: int = 0  # the device of a device node


class DirEntry(NamedTuple):
    name: str
    ino: int
    kind: int


class GraftInfo(NamedTuple):
    """Facts about a graft just loaded."""
    hash: str  # SHA-256 of the module, hex
    cached: bool
    size: int
    owner: int  # kernel pid of the process that loaded it
    compile_ns: int
    load_ns: int


class Lock(NamedTuple):
    """A lock held by some process."""
    kind: int  # LOCK_READ or LOCK_WRITE
    start: int
    len: int
    pid: int


class Event(NamedTuple):
    kind: int  # EVENT_*
    ino: int
    dir: int
    pid: int
    name: str


# ---- the C structures of vino.h -------------------------------------------------------------

class _Stat(ctypes.Structure):
    _fields_ = [("ino", c_uint64), ("kind", c_uint32), ("mode", c_uint32), ("nlink", c_uint32),
                ("uid", c_uint32), ("gid", c_uint32), ("_pad", c_uint32), ("size", c_uint64),
                ("blocks", c_uint64), ("atime_ns", c_uint64), ("mtime_ns", c_uint64), ("ctime_ns", c_uint64),
                ("rdev", c_uint64)]


class _Dirent(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("ino", c_uint64), ("kind", c_uint32), ("_pad", c_uint32)]


class _GraftInfo(ctypes.Structure):
    _fields_ = [("hash", c_char * 65), ("cached", ctypes.c_uint8), ("_pad", ctypes.c_uint8 * 6),
                ("size", c_uint64), ("owner", c_uint64), ("compile_ns", c_uint64), ("load_ns", c_uint64)]


class _Lock(ctypes.Structure):
    _fields_ = [("kind", c_uint32), ("_pad", c_uint32), ("start", c_uint64), ("len", c_uint64),
                ("pid", c_uint64)]


class _Event(ctypes.Structure):
    _fields_ = [("kind", c_uint32), ("_pad", c_uint32), ("ino", c_uint64), ("dir", c_uint64),
                ("pid", c_uint64), ("name", c_char * (_NAME_MAX + 1))]


_CLIENT = c_void_p
# name: (result type, argument types)
_SIGNATURES = {
    "vino_connect": (c_void_p, [c_char_p]),
    "vino_disconnect": (None, [_CLIENT]),
    "vino_last_error": (c_char_p, [_CLIENT]),
    "vino_pid": (c_uint64, [_CLIENT]),
    "vino_privileged": (c_int, [_CLIENT]),
    "vino_null": (c_int, [_CLIENT]),
    "vino_open": (c_int, [_CLIENT, c_char_p, c_int, c_uint]),
    "vino_close": (c_int, [_CLIENT, c_int]),
    "vino_read": (c_int64, [_CLIENT, c_int, c_void_p, c_size_t]),
    "vino_pread": (c_int64, [_CLIENT, c_int, c_void_p, c_size_t, c_uint64]),
    "vino_write": (c_int64, [_CLIENT, c_int, c_char_p, c_size_t]),
    "vino_pwrite": (c_int64, [_CLIENT, c_int, c_char_p, c_size_t, c_uint64]),
    "vino_seek": (c_int, [_CLIENT, c_int, c_uint64]),
    "vino_fsync": (c_int, [_CLIENT, c_int]),
    "vino_ftruncate": (c_int, [_CLIENT, c_int, c_uint64]),
    "vino_fstat": (c_int, [_CLIENT, c_int, POINTER(_Stat)]),
    "vino_stat": (c_int, [_CLIENT, c_char_p, POINTER(_Stat)]),
    "vino_mkdir": (c_int, [_CLIENT, c_char_p, c_uint]),
    "vino_rmdir": (c_int, [_CLIENT, c_char_p]),
    "vino_unlink": (c_int, [_CLIENT, c_char_p]),
    "vino_rename": (c_int, [_CLIENT, c_char_p, c_char_p]),
    "vino_readdir": (c_int, [_CLIENT, c_char_p, POINTER(POINTER(_Dirent))]),
    "vino_readdir_free": (None, [POINTER(_Dirent), c_size_t]),
    "vino_sync": (c_int, [_CLIENT]),
    "vino_open_at": (c_int, [_CLIENT, c_int, c_char_p, c_int, c_uint]),
    "vino_stat_at": (c_int, [_CLIENT, c_int, c_char_p, c_int, POINTER(_Stat)]),
    "vino_mkdir_at": (c_int, [_CLIENT, c_int, c_char_p, c_uint]),
    "vino_mknod_at": (c_int, [_CLIENT, c_int, c_char_p, c_uint, c_uint, c_uint64]),
    "vino_symlink_at": (c_int, [_CLIENT, c_char_p, c_int, c_char_p]),
    "vino_readlink_at": (c_int64, [_CLIENT, c_int, c_char_p, c_void_p, c_size_t]),
    "vino_unlink_at": (c_int, [_CLIENT, c_int, c_char_p]),
    "vino_rmdir_at": (c_int, [_CLIENT, c_int, c_char_p]),
    "vino_rename_at": (c_int, [_CLIENT, c_int, c_char_p, c_int, c_char_p, c_int]),
    "vino_link_at": (c_int, [_CLIENT, c_int, c_char_p, c_int, c_char_p, c_int]),
    "vino_chmod": (c_int, [_CLIENT, c_char_p, c_uint]),
    "vino_chown": (c_int, [_CLIENT, c_char_p, c_int64, c_int64]),
    "vino_truncate": (c_int, [_CLIENT, c_char_p, c_uint64]),
    "vino_utimens": (c_int, [_CLIENT, c_char_p, c_int64, c_int64]),
    "vino_access_at": (c_int, [_CLIENT, c_int, c_char_p, c_uint]),
    "vino_getxattr": (c_int64, [_CLIENT, c_char_p, c_char_p, c_void_p, c_size_t]),
    "vino_setxattr": (c_int, [_CLIENT, c_char_p, c_char_p, c_char_p, c_size_t, c_int]),
    "vino_listxattr": (c_int64, [_CLIENT, c_char_p, c_void_p, c_size_t]),
    "vino_removexattr": (c_int, [_CLIENT, c_char_p, c_char_p]),
    "vino_fallocate": (c_int, [_CLIENT, c_int, c_int, c_uint64, c_uint64]),
    "vino_graft_load": (c_int, [_CLIENT, c_char_p, c_char_p, c_size_t, POINTER(_GraftInfo)]),
    "vino_graft_load_file": (c_int, [_CLIENT, c_char_p, c_char_p, c_char_p, c_size_t, POINTER(_GraftInfo)]),
    "vino_graft_unload": (c_int, [_CLIENT, c_char_p]),
    "vino_graft_unload_file": (c_int, [_CLIENT, c_char_p, c_char_p]),
    "vino_graft_write_memory": (c_int, [_CLIENT, c_char_p, c_uint32, c_char_p, c_size_t]),
    "vino_graft_symbol": (c_int64, [_CLIENT, c_char_p, c_char_p]),
    "vino_graft_call": (c_int, [_CLIENT, c_char_p, c_char_p, POINTER(c_int64), c_size_t, POINTER(c_int64)]),
    "vino_graft_list_json": (c_int, [_CLIENT, POINTER(c_void_p)]),
    "vino_graft_stats_json": (c_int, [_CLIENT, c_char_p, POINTER(c_void_p)]),
    "vino_lock": (c_int, [_CLIENT, c_int, c_int, c_uint64, c_uint64, c_int]),
    "vino_getlk": (c_int, [_CLIENT, c_int, c_int, c_uint64, c_uint64, POINTER(_Lock)]),
    "vino_event_filter": (c_int, [_CLIENT, c_int, POINTER(c_uint64), c_size_t, POINTER(c_char_p), c_size_t]),
    "vino_event_subscribe": (c_int, [_CLIENT, c_int]),
    "vino_event_wait": (c_int, [_CLIENT, c_uint32, POINTER(_Event), c_size_t]),
    "vino_top_json": (c_int, [_CLIENT, POINTER(c_void_p)]),
    "vino_string_free": (None, [c_void_p]),
}

_LIB_NAME = "libvino.so"
_lib = None


def _candidates() -> List[Path]:
    """Where the library may be, in the order tried."""
    places = []
    env = os.environ.get("VINO_LIB")
    if env:
        p = Path(env)
        places.append(p / _LIB_NAME if p.is_dir() else p)
    here = Path(__file__).resolve().parent
    places.append(here / _LIB_NAME)
    target = os.environ.get("CARGO_TARGET_DIR")
    if target:
        places.append(Path(target) / "release" / _LIB_NAME)
    places.append(here.parent.parent / "target" / "release" / _LIB_NAME)
    return places


def find_library() -> Path:
    """The path of libvino.so that :class:`Client` loads; OSError if there is none."""
    places = _candidates()
    if os.environ.get("VINO_LIB"):
        # An explicit choice is not second-guessed.
        places = places[:1]
    for p in places:
        if p.is_file():
            return p
    tried = ", ".join(str(p) for p in places)
    raise OSError(2, f"libvino.so not found (tried {tried}); build it with "
                     "`cargo build --release -p vino-client-c` or set VINO_LIB")


def _library():
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(str(find_library()), use_errno=True)
        for name, (restype, argtypes) in _SIGNATURES.items():
            f = getattr(lib, name)
            f.restype = restype
            f.argtypes = argtypes
        _lib = lib
    return _lib


def _path(p) -> bytes:
    return os.fsencode(p) if not isinstance(p, str) else p.encode("utf-8")


def _name(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


class Client:
    """A connection to vinod: one kernel process.

    ``socket`` is the daemon's socket; None means ``$VINO_SOCKET``, else /run/vino/vinod.sock.
    Not safe to share between threads without a lock.
    """

    def __init__(self, socket: Optional[str] = None):
        self._lib = _library()
        path = None if socket is None else _path(socket)
        handle = self._lib.vino_connect(path)
        if not handle:
            err = ctypes.get_errno() or 5
            raise OSError(err, _name(self._lib.vino_last_error(None) or b"cannot connect"))
        self._c = c_void_p(handle)

    # ---- the connection ---------------------------------------------------------------------

    def disconnect(self) -> None:
        """Closes the connection (its kernel process exits). Calling it again does nothing."""
        c, self._c = getattr(self, "_c", None), None
        if c is not None:
            self._lib.vino_disconnect(c)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.disconnect()

    def __del__(self):
        try:
            self.disconnect()
        except Exception:  # the interpreter may be shutting down
            pass

    def _handle(self) -> c_void_p:
        if self._c is None:
            raise OSError(9, "the client is disconnected")
        return self._c

    def _call(self, name: str, *args) -> int:
        """Calls vino_<name>; a negative answer raises OSError with the client's message."""
        c = self._handle()
        rc = getattr(self._lib, "vino_" + name)(c, *args)
        if rc < 0:
            raise OSError(-rc, _name(self._lib.vino_last_error(c)))
        return rc

    @property
    def pid(self) -> int:
        """The kernel's id of this connection's process."""
        return self._lib.vino_pid(self._handle())

    @property
    def privileged(self) -> bool:
        return bool(self._lib.vino_privileged(self._handle()))

    def null(self) -> None:
        """A request that does nothing: the round trip alone."""
        self._call("null")

    # ---- files ------------------------------------------------------------------------------

    def open(self, path: str, flags: int = O_RDONLY, mode: int = 0o644) -> int:
        """Opens a file (flags: O_*); returns its descriptor."""
        return self._call("open", _path(path), flags, mode)

    def close(self, fd: int) -> None:
        """Closes a file descriptor (see :meth:`disconnect` for the connection)."""
        self._call("close", fd)

    def read(self, fd: int, n: int) -> bytes:
        """Up to n bytes at the file offset (b"" at the end)."""
        buf = ctypes.create_string_buffer(n)
        got = self._call("read", fd, buf, n)
        return buf.raw[:got]

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        buf = ctypes.create_string_buffer(n)
        got = self._call("pread", fd, buf, n, offset)
        return buf.raw[:got]

    def write(self, fd: int, data: bytes) -> int:
        """Writes at the file offset (the end with O_APPEND); returns the bytes written."""
        data = bytes(data)
        return self._call("write", fd, data, len(data))

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        data = bytes(data)
        return self._call("pwrite", fd, data, len(data), offset)

    def seek(self, fd: int, offset: int) -> None:
        self._call("seek", fd, offset)

    def fsync(self, fd: int) -> None:
        self._call("fsync", fd)

    def ftruncate(self, fd: int, size: int) -> None:
        self._call("ftruncate", fd, size)

    @staticmethod
    def _stat(st: _Stat) -> Stat:
        return Stat(st.ino, st.kind, st.mode, st.nlink, st.uid, st.gid, st.size, st.blocks,
                    st.atime_ns, st.mtime_ns, st.ctime_ns, st.rdev)

    def fstat(self, fd: int) -> Stat:
        st = _Stat()
        self._call("fstat", fd, byref(st))
        return self._stat(st)

    def stat(self, path: str) -> Stat:
        st = _Stat()
        self._call("stat", _path(path), byref(st))
        return self._stat(st)

    def mkdir(self, path: str, mode: int = 0o755) -> None:
        self._call("mkdir", _path(path), mode)

    def rmdir(self, path: str) -> None:
        self._call("rmdir", _path(path))

    def unlink(self, path: str) -> None:
        self._call("unlink", _path(path))

    def rename(self, old: str, new: str) -> None:
        self._call("rename", _path(old), _path(new))

    def readdir(self, path: str) -> List[DirEntry]:
        entries = POINTER(_Dirent)()
        n = self._call("readdir", _path(path), byref(entries))
        try:
            return [DirEntry(_name(entries[i].name), entries[i].ino, entries[i].kind) for i in range(n)]
        finally:
            self._lib.vino_readdir_free(entries, n)

    def sync(self) -> None:
        """Writes everything to the device."""
        self._call("sync")

    # ---- the *_at calls: paths (str or bytes) from a directory descriptor (AT_ROOT: the root) -

    def open_at(self, dirfd: int, path, flags: int = O_RDONLY, mode: int = 0o644) -> int:
        return self._call("open_at", dirfd, _path(path), flags, mode)

    def stat_at(self, dirfd: int, path, follow: bool = True) -> Stat:
        """stat (follow) or lstat (not) of path from dirfd."""
        st = _Stat()
        self._call("stat_at", dirfd, _path(path), int(follow), byref(st))
        return self._stat(st)

    def lstat(self, path) -> Stat:
        return self.stat_at(AT_ROOT, path, follow=False)

    def mkdir_at(self, dirfd: int, path, mode: int = 0o755) -> None:
        self._call("mkdir_at", dirfd, _path(path), mode)

    def mknod_at(self, dirfd: int, path, kind: int, mode: int = 0o644, rdev: int = 0) -> None:
        """A regular file, FIFO, socket or (privileged) device node (kind: KIND_*)."""
        self._call("mknod_at", dirfd, _path(path), kind, mode, rdev)

    def symlink(self, target, path, dirfd: int = AT_ROOT) -> None:
        self._call("symlink_at", _path(target), dirfd, _path(path))

    def readlink(self, path, dirfd: int = AT_ROOT) -> bytes:
        return self._sized(lambda buf, n: self._call("readlink_at", dirfd, _path(path), buf, n))

    def unlink_at(self, dirfd: int, path) -> None:
        self._call("unlink_at", dirfd, _path(path))

    def rmdir_at(self, dirfd: int, path) -> None:
        self._call("rmdir_at", dirfd, _path(path))

    def rename_at(self, from_dirfd: int, old, to_dirfd: int, new, no_replace: bool = False) -> None:
        self._call("rename_at", from_dirfd, _path(old), to_dirfd, _path(new), int(no_replace))

    def link(self, old, new, follow: bool = False) -> None:
        self._call("link_at", AT_ROOT, _path(old), AT_ROOT, _path(new), int(follow))

    def chmod(self, path, mode: int) -> None:
        self._call("chmod", _path(path), mode)

    def chown(self, path, uid: int = -1, gid: int = -1) -> None:
        """-1 leaves the owner or group as it is."""
        self._call("chown", _path(path), uid, gid)

    def truncate(self, path, size: int) -> None:
        self._call("truncate", _path(path), size)

    def utimens(self, path, atime_ns: int = UTIME_NOW, mtime_ns: int = UTIME_NOW) -> None:
        self._call("utimens", _path(path), atime_ns, mtime_ns)

    def access(self, path, mode: int, dirfd: int = AT_ROOT) -> None:
        """Raises OSError unless mode (4 read, 2 write, 1 execute, 0 exists) is allowed."""
        self._call("access_at", dirfd, _path(path), mode)

    def _sized(self, call) -> bytes:
        """Asks a length-first call for the length, then for the bytes."""
        while True:
            n = call(None, 0)
            buf = ctypes.create_string_buffer(max(n, 1))
            try:
                got = call(buf, max(n, 1))
            except OSError as e:
                if e.errno == 34:  # ERANGE: it grew in between
                    continue
                raise
            return buf.raw[:got]

    def getxattr(self, path, name) -> bytes:
        return self._sized(lambda buf, n: self._call("getxattr", _path(path), _path(name), buf, n))

    def setxattr(self, path, name, value: bytes, flags: int = 0) -> None:
        """flags: 0, XATTR_CREATE or XATTR_REPLACE."""
        self._call("setxattr", _path(path), _path(name), value, len(value), flags)

    def listxattr(self, path) -> List[bytes]:
        raw = self._sized(lambda buf, n: self._call("listxattr", _path(path), buf, n))
        return [n for n in raw.split(b"\0") if n]

    def removexattr(self, path, name) -> None:
        self._call("removexattr", _path(path), _path(name))

    def fallocate(self, fd: int, offset: int, length: int, keep_size: bool = False) -> None:
        self._call("fallocate", fd, int(keep_size), offset, length)

    # ---- grafts -----------------------------------------------------------------------------

    @staticmethod
    def _graft_info(g: _GraftInfo) -> GraftInfo:
        return GraftInfo(g.hash.decode("ascii"), bool(g.cached), g.size, g.owner, g.compile_ns, g.load_ns)

    def graft_load(self, point: str, wasm: bytes) -> GraftInfo:
        """Loads a WebAssembly graft at a graftpoint ("vas.pick_victim", "file.compute_ra/<fd>")."""
        wasm, info = bytes(wasm), _GraftInfo()
        self._call("graft_load", _path(point), wasm, len(wasm), byref(info))
        return self._graft_info(info)

    def graft_load_file(self, path: str, point: str, wasm: bytes) -> GraftInfo:
        """Binds a graft to a file: every later open of it by any process runs it at point."""
        wasm, info = bytes(wasm), _GraftInfo()
        self._call("graft_load_file", _path(path), _path(point), wasm, len(wasm), byref(info))
        return self._graft_info(info)

    def graft_unload(self, point: str) -> None:
        self._call("graft_unload", _path(point))

    def graft_unload_file(self, path: str, point: str) -> None:
        self._call("graft_unload_file", _path(path), _path(point))

    def graft_write_memory(self, point: str, offset: int, data: bytes) -> None:
        """Writes into the graft's memory (its shared state, e.g. a hot list)."""
        data = bytes(data)
        self._call("graft_write_memory", _path(point), offset, data, len(data))

    def graft_symbol(self, point: str, symbol: str) -> int:
        """The address of a data symbol the graft exports."""
        return self._call("graft_symbol", _path(point), _path(symbol))

    def graft_call(self, point: str, control: str, *args: int) -> int:
        """Calls one of the graft's exported control functions; returns its answer."""
        argv = (c_int64 * len(args))(*args)
        result = c_int64()
        self._call("graft_call", _path(point), _path(control), argv, len(args), byref(result))
        return result.value

    def _json(self, name: str, *args):
        s = c_void_p()
        self._call(name, *args, byref(s))
        try:
            return json.loads(ctypes.string_at(s).decode("utf-8"))
        finally:
            self._lib.vino_string_free(s)

    def graft_list(self) -> list:
        """The graftpoints this process may graft, each a dict."""
        return self._json("graft_list_json")

    def graft_stats(self, point: str) -> dict:
        return self._json("graft_stats_json", _path(point))

    # ---- locks and events -------------------------------------------------------------------

    def lock(self, fd: int, kind: int, start: int = 0, length: int = 0, wait: bool = True) -> None:
        """Takes (LOCK_READ / LOCK_WRITE) or drops (LOCK_UNLOCK) a byte-range lock (length 0: to
        the end)."""
        self._call("lock", fd, kind, start, length, int(wait))

    def getlk(self, fd: int, kind: int, start: int = 0, length: int = 0) -> Optional[Lock]:
        """The first lock that would block this one, or None."""
        held = _Lock()
        if self._call("getlk", fd, kind, start, length, byref(held)) == 0:
            return None
        return Lock(held.kind, held.start, held.len, held.pid)

    def event_filter(self, kind: int, inodes: Iterable[int] = (), names: Iterable[str] = ()) -> None:
        inodes, names = list(inodes), [_path(n) for n in names]
        ino = (c_uint64 * len(inodes))(*inodes)
        nm = (c_char_p * len(names))(*names)
        self._call("event_filter", kind, ino, len(inodes), nm, len(names))

    def event_subscribe(self, kind: int) -> None:
        self._call("event_subscribe", kind)

    def event_wait(self, timeout_ms: int, max_events: int = 64) -> List[Event]:
        """Waits up to timeout_ms for events; returns those that came (maybe none)."""
        buf = (_Event * max_events)()
        n = self._call("event_wait", timeout_ms, buf, max_events)
        return [Event(e.kind, e.ino, e.dir, e.pid, _name(e.name)) for e in buf[:n]]

    # ---- accounts ---------------------------------------------------------------------------

    def top(self) -> dict:
        """Every process and bound graft with their counters, as `vino top` shows them."""
        return self._json("top_json")
