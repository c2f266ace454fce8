"""Client of vinod, the VINO kernel daemon, over the C library libvino (ctypes).

A :class:`Client` is one connection, and so one kernel process: its open files, grafts and locks
go away when it is closed. Every method sends one request and waits for the answer; a failure
raises ``OSError(errno, message)``. Data is ``bytes``; paths are ``str`` or ``bytes`` (a name
need not be UTF-8: a ``str`` path is encoded with ``surrogateescape``, as ``os.fsencode`` does,
and names listed from a ``bytes`` path come back as ``bytes``, as with ``os.listdir``).

The ``*_at`` methods and those with a ``dir_fd`` argument walk the path from ``dir_fd``: None for
the root, or a directory opened with ``O_DIRECTORY``; an absolute path starts at the root.

The library is ``$VINO_LIB`` (the file, or a directory holding ``libvino.so``), else
``libvino.so`` next to this package, else the workspace's ``target/release`` (or
``$CARGO_TARGET_DIR/release``).
"""

import ctypes
import json
import os
from ctypes import POINTER, byref, c_char, c_char_p, c_int, c_int64, c_size_t, c_uint, c_uint32, c_uint64, c_void_p
from pathlib import Path
from typing import Iterable, List, NamedTuple, Optional, Union

__all__ = [
    "Client", "Stat", "DirEntry", "GraftInfo", "Lock", "Event", "find_library",
    "O_READ", "O_WRITE", "O_RDONLY", "O_WRONLY", "O_RDWR", "O_CREAT", "O_EXCL", "O_TRUNC", "O_APPEND",
    "O_NOFOLLOW", "O_DIRECTORY",
    "KIND_REGULAR", "KIND_DIRECTORY", "KIND_SYMLINK", "KIND_FIFO", "KIND_SOCKET", "KIND_CHAR_DEVICE",
    "KIND_BLOCK_DEVICE", "XATTR_CREATE", "XATTR_REPLACE", "UTIME_NOW", "FALLOC_FL_PUNCH_HOLE", "FALLOC_FL_ZERO_RANGE",
    "LOCK_UNLOCK", "LOCK_READ", "LOCK_WRITE",
    "EVENT_OPEN", "EVENT_CLOSE", "EVENT_CREATE", "EVENT_UNLINK", "EVENT_MODIFY", "EVENT_OVERFLOW",
    "EVENT_NAMES",
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
O_NOFOLLOW = 0x40  # fail with ELOOP if the last component is a symbolic link
O_DIRECTORY = 0x80  # fail with ENOTDIR unless a directory (open it read-only)

KIND_REGULAR = 1
KIND_DIRECTORY = 2
KIND_SYMLINK = 3
KIND_FIFO = 4
KIND_SOCKET = 5
KIND_CHAR_DEVICE = 6
KIND_BLOCK_DEVICE = 7

# Client.setxattr flags, as XATTR_CREATE / XATTR_REPLACE.
XATTR_CREATE = 1
XATTR_REPLACE = 2


class _Now:
    def __repr__(self):
        return "UTIME_NOW"


# A time for Client.setattr and Client.utime: the current time.
UTIME_NOW = _Now()

# The values of vino.h.
_AT_ROOT = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_AT_SYMLINK_FOLLOW = 0x400
_RENAME_NOREPLACE = 1
_FALLOC_KEEP_SIZE = 1
#: fallocate modes (Linux's flag bits).
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
_SET_MODE, _SET_UID, _SET_GID, _SET_SIZE = 0x01, 0x02, 0x04, 0x08
_SET_ATIME, _SET_MTIME, _SET_ATIME_NOW, _SET_MTIME_NOW = 0x10, 0x20, 0x40, 0x80

LOCK_UNLOCK = 0
LOCK_READ = 1
LOCK_WRITE = 2

EVENT_OPEN = 1
EVENT_CLOSE = 2
EVENT_CREATE = 3
EVENT_UNLINK = 4
EVENT_MODIFY = 5
# Not asked for: the marker event_wait returns in place of events dropped because the queue was
# full (ino, dir and pid 0, empty name); one per overflow, until the queue is read below its bound.
EVENT_OVERFLOW = 6

# The name of each EVENT_* kind.
EVENT_NAMES = {
    EVENT_OPEN: "open", EVENT_CLOSE: "close", EVENT_CREATE: "create", EVENT_UNLINK: "unlink",
    EVENT_MODIFY: "modify", EVENT_OVERFLOW: "overflow",
}

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
    rdev: int = 0  # the device a KIND_*_DEVICE node stands for
    generation: int = 0  # changes each time the inode number is reused


class DirEntry(NamedTuple):
    name: Union[str, bytes]  # bytes when listed from a bytes path
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
                ("rdev", c_uint64), ("generation", c_uint32), ("_pad2", c_uint32)]


class _SetAttr(ctypes.Structure):
    _fields_ = [("valid", c_uint32), ("mode", c_uint32), ("uid", c_uint32), ("gid", c_uint32),
                ("size", c_uint64), ("atime_ns", c_uint64), ("mtime_ns", c_uint64)]


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
    "vino_stat_at": (c_int, [_CLIENT, c_int, c_char_p, POINTER(_Stat), c_int]),
    "vino_mkdir_at": (c_int, [_CLIENT, c_int, c_char_p, c_uint]),
    "vino_mknod_at": (c_int, [_CLIENT, c_int, c_char_p, c_int, c_uint, c_uint64]),
    "vino_symlink_at": (c_int, [_CLIENT, c_char_p, c_int, c_char_p]),
    "vino_readlink_at": (c_int64, [_CLIENT, c_int, c_char_p, c_void_p, c_size_t]),
    "vino_unlink_at": (c_int, [_CLIENT, c_int, c_char_p]),
    "vino_rmdir_at": (c_int, [_CLIENT, c_int, c_char_p]),
    "vino_rename_at": (c_int, [_CLIENT, c_int, c_char_p, c_int, c_char_p, c_uint]),
    "vino_link_at": (c_int, [_CLIENT, c_int, c_char_p, c_int, c_char_p, c_int]),
    "vino_setattr_at": (c_int, [_CLIENT, c_int, c_char_p, c_int, POINTER(_SetAttr), POINTER(_Stat)]),
    "vino_fsetattr": (c_int, [_CLIENT, c_int, POINTER(_SetAttr), POINTER(_Stat)]),
    "vino_access_at": (c_int, [_CLIENT, c_int, c_char_p, c_int, c_int]),
    "vino_readdir_at": (c_int, [_CLIENT, c_int, c_char_p, POINTER(POINTER(_Dirent))]),
    "vino_readdir_fd": (c_int, [_CLIENT, c_int, POINTER(POINTER(_Dirent))]),
    "vino_getxattr_at": (c_int64, [_CLIENT, c_int, c_char_p, c_int, c_char_p, c_void_p, c_size_t]),
    "vino_setxattr_at": (c_int, [_CLIENT, c_int, c_char_p, c_int, c_char_p, c_char_p, c_size_t, c_int]),
    "vino_listxattr_at": (c_int64, [_CLIENT, c_int, c_char_p, c_int, c_void_p, c_size_t]),
    "vino_removexattr_at": (c_int, [_CLIENT, c_int, c_char_p, c_int, c_char_p]),
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
    "vino_stream_bind": (c_int, [_CLIENT, c_char_p, c_char_p, c_size_t]),
    "vino_stream_key": (c_int, [_CLIENT, c_char_p, c_char_p]),
    "vino_stream_ctl": (c_int, [_CLIENT, c_char_p, c_char_p, POINTER(c_int64), c_size_t, POINTER(c_int64)]),
    "vino_stream_status_json": (c_int, [_CLIENT, c_char_p, POINTER(c_void_p)]),
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
    """A path (or name) as the bytes the daemon sees: str as UTF-8 (surrogateescape, so a name
    read as str from a non-UTF-8 one goes back as it was), bytes as they are."""
    if isinstance(p, str):
        return p.encode("utf-8", "surrogateescape")
    return os.fsencode(p)


def _check_range(what: str, value: int, low: int, high: int) -> None:
    """Raises OSError(EINVAL) unless low <= value <= high."""
    if not isinstance(value, int) or not low <= value <= high:
        raise OSError(22, f"{what} {value!r} is outside {low}..{high}")


def _name(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _like(b: bytes, model):
    """`b` as bytes if `model` (the path asked about) is bytes, else as str."""
    return b if isinstance(model, (bytes, bytearray)) else _name(b)


def _dirfd(dir_fd: Optional[int]) -> int:
    return _AT_ROOT if dir_fd is None else dir_fd


def _nofollow(follow_symlinks: bool) -> int:
    return 0 if follow_symlinks else _AT_SYMLINK_NOFOLLOW


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

    # The path calls are the *_at calls from the root, so that their paths may be bytes too.

    def open(self, path, flags: int = O_RDONLY, mode: int = 0o644) -> int:
        """Opens a file (flags: O_*); returns its descriptor."""
        return self.open_at(path, flags, mode)

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
                    st.atime_ns, st.mtime_ns, st.ctime_ns, st.rdev, st.generation)

    def fstat(self, fd: int) -> Stat:
        st = _Stat()
        self._call("fstat", fd, byref(st))
        return self._stat(st)

    def stat(self, path: str) -> Stat:
        return self.stat_at(path)

    def mkdir(self, path: str, mode: int = 0o755) -> None:
        self.mkdir_at(path, mode)

    def rmdir(self, path: str) -> None:
        self.rmdir_at(path)

    def unlink(self, path: str) -> None:
        self.unlink_at(path)

    def rename(self, old: str, new: str) -> None:
        self.rename_at(old, new)

    def readdir(self, path: str) -> List[DirEntry]:
        return self.readdir_at(path)

    def _entries(self, model, name: str, *args) -> List[DirEntry]:
        entries = POINTER(_Dirent)()
        n = self._call(name, *args, byref(entries))
        try:
            return [DirEntry(_like(entries[i].name, model), entries[i].ino, entries[i].kind) for i in range(n)]
        finally:
            self._lib.vino_readdir_free(entries, n)

    def sync(self) -> None:
        """Writes everything to the device."""
        self._call("sync")

    # ---- names, *at style -------------------------------------------------------------------

    def open_at(self, path, flags: int = O_RDONLY, mode: int = 0o644, dir_fd: Optional[int] = None) -> int:
        """Opens path from dir_fd (flags: O_*, O_NOFOLLOW and O_DIRECTORY included)."""
        return self._call("open_at", _dirfd(dir_fd), _path(path), flags, mode)

    def stat_at(self, path, dir_fd: Optional[int] = None, follow_symlinks: bool = True) -> Stat:
        st = _Stat()
        self._call("stat_at", _dirfd(dir_fd), _path(path), byref(st), _nofollow(follow_symlinks))
        return self._stat(st)

    def lstat(self, path, dir_fd: Optional[int] = None) -> Stat:
        """The symbolic link itself, not what it points to."""
        return self.stat_at(path, dir_fd, follow_symlinks=False)

    def mkdir_at(self, path, mode: int = 0o755, dir_fd: Optional[int] = None) -> None:
        self._call("mkdir_at", _dirfd(dir_fd), _path(path), mode)

    def mknod(self, path, kind: int = KIND_REGULAR, mode: int = 0o600, rdev: int = 0,
              dir_fd: Optional[int] = None) -> None:
        """Makes a KIND_REGULAR, _FIFO, _SOCKET or (privileged) _CHAR_DEVICE / _BLOCK_DEVICE node."""
        self._call("mknod_at", _dirfd(dir_fd), _path(path), kind, mode, rdev)

    def symlink(self, target, path, dir_fd: Optional[int] = None) -> None:
        """Makes a symbolic link at path holding target."""
        self._call("symlink_at", _path(target), _dirfd(dir_fd), _path(path))

    def readlink(self, path, dir_fd: Optional[int] = None):
        """The target of a symbolic link: bytes for a bytes path, else str (as os.readlink)."""
        size = 256
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self._call("readlink_at", _dirfd(dir_fd), _path(path), buf, size)
            if n <= size:
                return _like(buf.raw[:n], path)
            size = n

    def unlink_at(self, path, dir_fd: Optional[int] = None) -> None:
        self._call("unlink_at", _dirfd(dir_fd), _path(path))

    def rmdir_at(self, path, dir_fd: Optional[int] = None) -> None:
        self._call("rmdir_at", _dirfd(dir_fd), _path(path))

    def rename_at(self, src, dst, src_dir_fd: Optional[int] = None, dst_dir_fd: Optional[int] = None,
                  noreplace: bool = False) -> None:
        """Renames atomically; with noreplace an existing dst raises FileExistsError."""
        flags = _RENAME_NOREPLACE if noreplace else 0
        self._call("rename_at", _dirfd(src_dir_fd), _path(src), _dirfd(dst_dir_fd), _path(dst), flags)

    def link(self, src, dst, src_dir_fd: Optional[int] = None, dst_dir_fd: Optional[int] = None,
             follow_symlinks: bool = False) -> None:
        """A second name dst for the file at src (follow_symlinks: a link at src is followed)."""
        flags = _AT_SYMLINK_FOLLOW if follow_symlinks else 0
        self._call("link_at", _dirfd(src_dir_fd), _path(src), _dirfd(dst_dir_fd), _path(dst), flags)

    @staticmethod
    def _setattr(mode, uid, gid, size, atime_ns, mtime_ns) -> _SetAttr:
        a = _SetAttr()
        for value, bit, field in ((mode, _SET_MODE, "mode"), (uid, _SET_UID, "uid"), (gid, _SET_GID, "gid"),
                                  (size, _SET_SIZE, "size")):
            if value is not None:
                a.valid |= bit
                setattr(a, field, value)
        for value, at, now, field in ((atime_ns, _SET_ATIME, _SET_ATIME_NOW, "atime_ns"),
                                      (mtime_ns, _SET_MTIME, _SET_MTIME_NOW, "mtime_ns")):
            if value is UTIME_NOW:
                a.valid |= now
            elif value is not None:
                a.valid |= at
                setattr(a, field, value)
        return a

    def setattr(self, path, mode: Optional[int] = None, uid: Optional[int] = None, gid: Optional[int] = None,
                size: Optional[int] = None, atime_ns=None, mtime_ns=None, dir_fd: Optional[int] = None,
                follow_symlinks: bool = True) -> Stat:
        """Changes what is not None (times: nanoseconds or UTIME_NOW) at once; the attributes after."""
        a, st = self._setattr(mode, uid, gid, size, atime_ns, mtime_ns), _Stat()
        self._call("setattr_at", _dirfd(dir_fd), _path(path), _nofollow(follow_symlinks), byref(a), byref(st))
        return self._stat(st)

    def fsetattr(self, fd: int, mode: Optional[int] = None, uid: Optional[int] = None, gid: Optional[int] = None,
                 size: Optional[int] = None, atime_ns=None, mtime_ns=None) -> Stat:
        a, st = self._setattr(mode, uid, gid, size, atime_ns, mtime_ns), _Stat()
        self._call("fsetattr", fd, byref(a), byref(st))
        return self._stat(st)

    def chmod(self, path, mode: int, dir_fd: Optional[int] = None) -> Stat:
        return self.setattr(path, mode=mode, dir_fd=dir_fd)

    def chown(self, path, uid: int = -1, gid: int = -1, dir_fd: Optional[int] = None) -> Stat:
        """Changes the owner and/or group (-1 leaves one as it is, as os.chown)."""
        return self.setattr(path, uid=None if uid == -1 else uid, gid=None if gid == -1 else gid, dir_fd=dir_fd)

    def utime(self, path, ns=None, dir_fd: Optional[int] = None) -> Stat:
        """Sets (atime_ns, mtime_ns), or both to now if ns is None (as os.utime)."""
        atime, mtime = (UTIME_NOW, UTIME_NOW) if ns is None else ns
        return self.setattr(path, atime_ns=atime, mtime_ns=mtime, dir_fd=dir_fd)

    def truncate(self, path, size: int, dir_fd: Optional[int] = None) -> Stat:
        return self.setattr(path, size=size, dir_fd=dir_fd)

    def access(self, path, mode: int, dir_fd: Optional[int] = None, follow_symlinks: bool = True) -> bool:
        """True if this process may access path as mode asks (os.R_OK | os.W_OK | os.X_OK, or
        os.F_OK); other failures (a missing file...) raise."""
        try:
            self._call("access_at", _dirfd(dir_fd), _path(path), mode, _nofollow(follow_symlinks))
            return True
        except PermissionError:
            return False

    def readdir_at(self, path, dir_fd: Optional[int] = None) -> List[DirEntry]:
        return self._entries(path, "readdir_at", _dirfd(dir_fd), _path(path))

    def readdir_fd(self, fd: int) -> List[DirEntry]:
        """The entries of the directory open as fd (names as str)."""
        return self._entries("", "readdir_fd", fd)

    def _sized(self, name: str, *args) -> bytes:
        """Calls a vino_*xattr_at that answers a size with a NULL buffer, until the buffer fits."""
        while True:
            size = self._call(name, *args, None, 0)
            buf = ctypes.create_string_buffer(max(size, 1))
            try:
                n = self._call(name, *args, buf, max(size, 1))
            except OSError as e:
                if e.errno == 34:  # ERANGE: it grew meanwhile
                    continue
                raise
            return buf.raw[:n]

    def getxattr(self, path, name, dir_fd: Optional[int] = None, follow_symlinks: bool = True) -> bytes:
        """The value of extended attribute name (only "user." names are supported)."""
        return self._sized("getxattr_at", _dirfd(dir_fd), _path(path), _nofollow(follow_symlinks), _path(name))

    def setxattr(self, path, name, value: bytes, flags: int = 0, dir_fd: Optional[int] = None,
                 follow_symlinks: bool = True) -> None:
        """Sets extended attribute name (flags: 0, XATTR_CREATE or XATTR_REPLACE)."""
        value = bytes(value)
        self._call("setxattr_at", _dirfd(dir_fd), _path(path), _nofollow(follow_symlinks), _path(name),
                   value, len(value), flags)

    def listxattr(self, path, dir_fd: Optional[int] = None, follow_symlinks: bool = True) -> list:
        """The names of the file's extended attributes: bytes for a bytes path, else str."""
        raw = self._sized("listxattr_at", _dirfd(dir_fd), _path(path), _nofollow(follow_symlinks))
        return [_like(n, path) for n in raw.split(b"\0")[:-1]]

    def removexattr(self, path, name, dir_fd: Optional[int] = None, follow_symlinks: bool = True) -> None:
        self._call("removexattr_at", _dirfd(dir_fd), _path(path), _nofollow(follow_symlinks), _path(name))

    def fallocate(self, fd: int, offset: int, length: int, keep_size: bool = False, mode: int = 0) -> None:
        """Allocates length bytes from offset in the file open for writing as fd; the size grows
        to cover them unless keep_size. mode adds Linux's other flags: FALLOC_FL_PUNCH_HOLE
        (with keep_size) frees the range's blocks, FALLOC_FL_ZERO_RANGE zeroes it."""
        self._call("fallocate", fd, mode | (_FALLOC_KEEP_SIZE if keep_size else 0), offset, length)

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
        # The C call takes a 32-bit offset: ctypes would wrap a larger one silently.
        _check_range("offset", offset, 0, 2**32 - 1)
        self._call("graft_write_memory", _path(point), offset, data, len(data))

    def graft_symbol(self, point: str, symbol: str) -> int:
        """The address of a data symbol the graft exports."""
        return self._call("graft_symbol", _path(point), _path(symbol))

    def graft_call(self, point: str, control: str, *args: int) -> int:
        """Calls one of the graft's exported control functions; returns its answer."""
        return self._control("graft_call", point, control, args)

    def _control(self, name: str, target: str, control: str, args) -> int:
        for i, a in enumerate(args):
            # Each argument is a 64-bit integer: ctypes would truncate a larger one silently.
            _check_range(f"argument {i}", a, -2**63, 2**63 - 1)
        argv = (c_int64 * len(args))(*args)
        result = c_int64()
        self._call(name, _path(target), _path(control), argv, len(args), byref(result))
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

    # ---- stream codecs ----------------------------------------------------------------------

    def stream_bind(self, path: str, wasm: bytes) -> None:
        """Binds a codec (a file.stream graft) to an empty file or a directory (files made in it
        get it); only the owner may."""
        wasm = bytes(wasm)
        if not wasm:
            raise ValueError("an empty module: use stream_unbind")
        self._call("stream_bind", _path(path), wasm, len(wasm))

    def stream_unbind(self, path: str) -> None:
        self._call("stream_bind", _path(path), None, 0)

    def stream_key(self, path: str, key: bytes) -> None:
        """Gives the codec of a stream file its 256-bit key (32 bytes)."""
        key = bytes(key)
        if len(key) != 32:
            raise ValueError(f"a key is 32 bytes, not {len(key)}")
        self._call("stream_key", _path(path), key)

    def stream_ctl(self, path: str, control: str, *args: int) -> int:
        """Calls one of the codec's control functions (without vino_ctl_); returns its answer."""
        return self._control("stream_ctl", path, control, args)

    def stream_status(self, path: str) -> Optional[dict]:
        """The codec bound to a file or directory (its module, whether loaded), or None."""
        return self._json("stream_status_json", _path(path))

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
