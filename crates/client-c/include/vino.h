/* vino.h -- the C client of vinod, the VINO kernel daemon (libvino.so / libvino.a). C99.
 *
 * A connection is one kernel process: its open files, grafts and locks go away when it is
 * disconnected (or the program dies). Each call sends one request to the daemon and waits for
 * its answer.
 *
 * Conventions
 *   - Calls return a value >= 0 on success and -errno (Linux numbering, e.g. -ENOENT) on failure;
 *     vino_last_error(client) then gives the daemon's (or the library's) message.
 *   - A NULL client or a NULL pointer where data is required fails with -EINVAL. Strings are
 *     NUL-terminated UTF-8, except the paths and names of the *_at calls, which are bytes (a
 *     POSIX name need not be UTF-8). A buffer may be NULL only when its length is 0.
 *   - The *_at calls walk `path` from `dirfd`: VINO_AT_ROOT for the root directory, or a
 *     directory opened with VINO_O_DIRECTORY. An absolute path starts at the root either way.
 *     Flags take Linux's values (VINO_AT_SYMLINK_NOFOLLOW is AT_SYMLINK_NOFOLLOW, ...).
 *   - A vino_client is not safe to use from two threads at once: give each thread its own, or
 *     lock around calls.
 *   - Memory the library hands out (readdir arrays, JSON strings) is freed with the matching
 *     vino_*_free function, never with free().
 *
 * Link with -lvino (and, for the static library, -lpthread -ldl -lm). */
#ifndef VINO_H
#define VINO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A connection to the daemon. Opaque. */
typedef struct vino_client vino_client;

/* vino_open flags (combine with |). One of READ / WRITE must be given. */
#define VINO_O_READ 0x01
#define VINO_O_WRITE 0x02
#define VINO_O_RDONLY VINO_O_READ
#define VINO_O_WRONLY VINO_O_WRITE
#define VINO_O_RDWR (VINO_O_READ | VINO_O_WRITE)
#define VINO_O_CREAT 0x04  /* create the file if it does not exist (with `mode`) */
#define VINO_O_EXCL 0x08   /* with VINO_O_CREAT: fail with -EEXIST if it exists */
#define VINO_O_TRUNC 0x10  /* truncate to 0 bytes */
#define VINO_O_APPEND 0x20 /* every write goes to the end */
#define VINO_O_NOFOLLOW 0x40  /* fail with -ELOOP if the last component is a symbolic link */
#define VINO_O_DIRECTORY 0x80 /* fail with -ENOTDIR unless a directory (open it read-only) */

/* The *_at calls. */
#define VINO_AT_ROOT (-100)               /* dirfd: the root directory */
#define VINO_AT_SYMLINK_NOFOLLOW 0x100    /* the last component's link itself */
#define VINO_AT_SYMLINK_FOLLOW 0x400      /* vino_link_at: follow a link at `from` */
#define VINO_RENAME_NOREPLACE 1           /* vino_rename_at: fail with -EEXIST, never replace */
#define VINO_XATTR_CREATE 1               /* vino_setxattr_at: fail with -EEXIST if it exists */
#define VINO_XATTR_REPLACE 2              /* vino_setxattr_at: fail with -ENODATA if it does not */
#define VINO_FALLOC_KEEP_SIZE 1           /* vino_fallocate: allocate, keep the size */
#define VINO_FALLOC_PUNCH_HOLE 0x02       /* vino_fallocate (with KEEP_SIZE): free, read zeros */
#define VINO_FALLOC_ZERO_RANGE 0x10       /* vino_fallocate: read zeros, stay allocated */

/* What struct vino_setattr changes (its `valid` bits). */
#define VINO_SET_MODE 0x01
#define VINO_SET_UID 0x02
#define VINO_SET_GID 0x04
#define VINO_SET_SIZE 0x08
#define VINO_SET_ATIME 0x10     /* to atime_ns */
#define VINO_SET_MTIME 0x20     /* to mtime_ns */
#define VINO_SET_ATIME_NOW 0x40 /* to the current time */
#define VINO_SET_MTIME_NOW 0x80

/* What a name is (vino_stat.kind, vino_dirent.kind). */
#define VINO_KIND_REGULAR 1
#define VINO_KIND_DIRECTORY 2
#define VINO_KIND_SYMLINK 3
#define VINO_KIND_FIFO 4
#define VINO_KIND_SOCKET 5
#define VINO_KIND_CHAR_DEVICE 6
#define VINO_KIND_BLOCK_DEVICE 7

/* Byte-range lock kinds (vino_lock, vino_getlk). */
#define VINO_LOCK_UNLOCK 0
#define VINO_LOCK_READ 1
#define VINO_LOCK_WRITE 2

/* File-system event kinds (vino_event_*). */
#define VINO_EVENT_OPEN 1
#define VINO_EVENT_CLOSE 2
#define VINO_EVENT_CREATE 3
#define VINO_EVENT_UNLINK 4
#define VINO_EVENT_MODIFY 5
/* Not asked for: the marker vino_event_wait returns in place of events dropped because the
 * queue was full (ino, dir and pid 0, empty name); one per overflow, until the queue is read
 * below its bound again. */
#define VINO_EVENT_OVERFLOW 6

/* Longest file name, in bytes (without the NUL). */
#define VINO_NAME_MAX 255

/* A file's attributes. */
struct vino_stat {
    uint64_t ino;
    uint32_t kind;  /* VINO_KIND_* */
    uint32_t mode;  /* type and permission bits, as st_mode */
    uint32_t nlink;
    uint32_t uid;
    uint32_t gid;
    uint32_t _pad;
    uint64_t size;
    uint64_t blocks;
    uint64_t atime_ns; /* nanoseconds since the Unix epoch */
    uint64_t mtime_ns;
    uint64_t ctime_ns;
    /* Since protocol 2 (the fields above keep their offsets): */
    uint64_t rdev;       /* the device of a VINO_KIND_*_DEVICE node */
    uint32_t generation; /* changes each time the inode number is reused */
    uint32_t _pad2;
};

/* Attributes to change (vino_setattr_at, vino_fsetattr): those `valid` names. */
struct vino_setattr {
    uint32_t valid; /* VINO_SET_* */
    uint32_t mode;  /* permission bits, 07777 at most */
    uint32_t uid;
    uint32_t gid;
    uint64_t size;
    uint64_t atime_ns; /* nanoseconds since the Unix epoch */
    uint64_t mtime_ns;
};

/* A directory entry (vino_readdir, vino_readdir_at, vino_readdir_fd). */
struct vino_dirent {
    char *name; /* NUL-terminated bytes */
    uint64_t ino;
    uint32_t kind; /* VINO_KIND_* */
    uint32_t _pad;
};

/* Facts about a graft just loaded. */
struct vino_graft_info {
    char hash[65]; /* SHA-256 of the module, hex, NUL-terminated */
    uint8_t cached; /* 1 if the compiled module came from the cache */
    uint8_t _pad[6];
    uint64_t size;  /* bytes of the module */
    uint64_t owner; /* kernel pid of the process that loaded it */
    uint64_t compile_ns;
    uint64_t load_ns;
};

/* A lock held by someone (vino_getlk). */
struct vino_lock {
    uint32_t kind; /* VINO_LOCK_READ or VINO_LOCK_WRITE */
    uint32_t _pad;
    uint64_t start;
    uint64_t len; /* 0: to the end of the file */
    uint64_t pid; /* kernel pid of the holder */
};

/* One file-system event (vino_event_wait). */
struct vino_event {
    uint32_t kind; /* VINO_EVENT_* */
    uint32_t _pad;
    uint64_t ino;
    uint64_t dir; /* the directory the name is in */
    uint64_t pid; /* kernel pid of the process that caused it */
    char name[VINO_NAME_MAX + 1]; /* NUL-terminated (cut at VINO_NAME_MAX bytes) */
};

/* ---- connections ------------------------------------------------------------------------- */

/* Connects to the daemon at `socket_path`, or, if NULL, at $VINO_SOCKET or the default
 * /run/vino/vinod.sock. Returns NULL on failure, with errno set; vino_last_error(NULL) then
 * gives the message (per thread). */
vino_client *vino_connect(const char *socket_path);

/* Closes the connection (the kernel process exits) and frees the client. NULL is ignored. */
void vino_disconnect(vino_client *client);

/* The message of the client's last failed call ("" if none). With NULL: of this thread's last
 * failed vino_connect. Valid until the next call on the same client (or thread). */
const char *vino_last_error(const vino_client *client);

/* The kernel's id of this connection's process (0 for NULL). */
uint64_t vino_pid(const vino_client *client);

/* 1 if the daemon runs this process privileged, else 0. */
int vino_privileged(const vino_client *client);

/* A request that does nothing: the round trip alone. */
int vino_null(vino_client *client);

/* ---- files -------------------------------------------------------------------------------- */

/* Opens `path` with VINO_O_* `flags`; `mode` gives the permission bits of a created file.
 * Returns a file descriptor. */
int vino_open(vino_client *client, const char *path, int flags, unsigned mode);
int vino_close(vino_client *client, int fd);

/* Read at the file offset, or at `offset`: the bytes read (0 at the end; may be fewer than
 * asked, e.g. more than 1 MiB without shared memory). */
int64_t vino_read(vino_client *client, int fd, void *buf, size_t len);
int64_t vino_pread(vino_client *client, int fd, void *buf, size_t len, uint64_t offset);

/* Write at the file offset (the end, if opened with VINO_O_APPEND), or at `offset`: the bytes
 * written (may be fewer than given). */
int64_t vino_write(vino_client *client, int fd, const void *buf, size_t len);
int64_t vino_pwrite(vino_client *client, int fd, const void *buf, size_t len, uint64_t offset);

/* Sets the file offset. */
int vino_seek(vino_client *client, int fd, uint64_t offset);
int vino_fsync(vino_client *client, int fd);
int vino_ftruncate(vino_client *client, int fd, uint64_t size);
int vino_fstat(vino_client *client, int fd, struct vino_stat *st);
int vino_stat(vino_client *client, const char *path, struct vino_stat *st);
int vino_mkdir(vino_client *client, const char *path, unsigned mode);
int vino_rmdir(vino_client *client, const char *path);
int vino_unlink(vino_client *client, const char *path);
int vino_rename(vino_client *client, const char *from, const char *to);

/* Lists a directory into a new array, stored in *entries; returns the number of entries.
 * Free it with vino_readdir_free(*entries, count). The daemon answers in pages that the library
 * reads one after another: an entry present throughout is listed exactly once, however the
 * directory changes meanwhile. */
int vino_readdir(vino_client *client, const char *path, struct vino_dirent **entries);
void vino_readdir_free(struct vino_dirent *entries, size_t count);

/* Writes everything to the device. */
int vino_sync(vino_client *client);

/* ---- names, *at style ---------------------------------------------------------------------- */

/* Opens `path` from `dirfd` (VINO_O_* flags, VINO_O_NOFOLLOW and VINO_O_DIRECTORY included). */
int vino_open_at(vino_client *client, int dirfd, const char *path, int flags, unsigned mode);

/* What `path` names; `flags` VINO_AT_SYMLINK_NOFOLLOW: a symbolic link itself (lstat). */
int vino_stat_at(vino_client *client, int dirfd, const char *path, struct vino_stat *st, int flags);
int vino_mkdir_at(vino_client *client, int dirfd, const char *path, unsigned mode);

/* Makes a node of VINO_KIND_REGULAR, _FIFO, _SOCKET, or (privileged: else -EPERM)
 * _CHAR_DEVICE / _BLOCK_DEVICE standing for `rdev`. */
int vino_mknod_at(vino_client *client, int dirfd, const char *path, int kind, unsigned mode, uint64_t rdev);

/* Makes a symbolic link at `path` holding `target` (which may dangle). */
int vino_symlink_at(vino_client *client, const char *target, int dirfd, const char *path);

/* The target of the link at `path`: returns its length and copies at most `len` bytes of it
 * to `buf`, without a NUL (a result over `len` means it was cut). */
int64_t vino_readlink_at(vino_client *client, int dirfd, const char *path, char *buf, size_t len);
int vino_unlink_at(vino_client *client, int dirfd, const char *path);
int vino_rmdir_at(vino_client *client, int dirfd, const char *path);

/* Renames atomically: `to` names the old file or the moved one at every instant.
 * `flags`: 0 or VINO_RENAME_NOREPLACE. */
int vino_rename_at(vino_client *client, int from_dirfd, const char *from, int to_dirfd, const char *to,
                   unsigned flags);

/* A second name `to` for the file at `from`; `flags`: 0 or VINO_AT_SYMLINK_FOLLOW. */
int vino_link_at(vino_client *client, int from_dirfd, const char *from, int to_dirfd, const char *to,
                 int flags);

/* Changes what `attrs->valid` names (chmod, chown, truncate, utimes at once), each as its own
 * right allows; the attributes after go to *st unless it is NULL. `flags`: 0 or
 * VINO_AT_SYMLINK_NOFOLLOW. */
int vino_setattr_at(vino_client *client, int dirfd, const char *path, int flags,
                    const struct vino_setattr *attrs, struct vino_stat *st);
int vino_fsetattr(vino_client *client, int fd, const struct vino_setattr *attrs, struct vino_stat *st);

/* 0 if this process may access `path` as `mode` asks (4 read, 2 write, 1 execute; 0: it
 * exists), else -EACCES. */
int vino_access_at(vino_client *client, int dirfd, const char *path, int mode, int flags);

/* As vino_readdir, for the directory at `path` from `dirfd`, or the one open as `fd`. */
int vino_readdir_at(vino_client *client, int dirfd, const char *path, struct vino_dirent **entries);
int vino_readdir_fd(vino_client *client, int fd, struct vino_dirent **entries);

/* Extended attributes (only "user." names; others: -EOPNOTSUPP). vino_getxattr_at returns the
 * value's size and, if `len` > 0, copies it to `buf` (-ERANGE if it does not fit);
 * vino_listxattr_at does the same with the names, each NUL-terminated, one after the other.
 * `how`: 0, VINO_XATTR_CREATE or VINO_XATTR_REPLACE. */
int64_t vino_getxattr_at(vino_client *client, int dirfd, const char *path, int flags, const char *name,
                         void *buf, size_t len);
int vino_setxattr_at(vino_client *client, int dirfd, const char *path, int flags, const char *name,
                     const void *value, size_t len, int how);
int64_t vino_listxattr_at(vino_client *client, int dirfd, const char *path, int flags, char *buf, size_t len);
int vino_removexattr_at(vino_client *client, int dirfd, const char *path, int flags, const char *name);

/* fallocate(2) on `len` bytes from `offset` in the file open for writing as `fd`. `mode` 0
 * allocates them, so writes there cannot fail for want of space, the size growing to cover
 * them (not with VINO_FALLOC_KEEP_SIZE); VINO_FALLOC_PUNCH_HOLE | VINO_FALLOC_KEEP_SIZE frees
 * their blocks (partial edge blocks zeroed); VINO_FALLOC_ZERO_RANGE (KEEP_SIZE or not) makes
 * them read as zeros, allocated. Other modes: -EOPNOTSUPP (or -EINVAL), as Linux. */
int vino_fallocate(vino_client *client, int fd, int mode, uint64_t offset, uint64_t len);

/* ---- grafts ------------------------------------------------------------------------------- */

/* Loads a WebAssembly graft at a graftpoint of this process ("vas.pick_victim",
 * "file.compute_ra/<fd>") or a global one (privileged). `info` may be NULL. */
int vino_graft_load(vino_client *client, const char *point, const void *wasm, size_t len,
                    struct vino_graft_info *info);

/* Grafts a file this program opened on the daemon's FUSE mount (an ordinary descriptor `fd`):
 * the module goes over the connection, then an ioctl on `fd` binds it. `point`: "file.compute_ra"
 * (this descriptor's read-ahead), "file.block_buddy" or "lock.grant" (the file's), or
 * "vas.pick_victim" (this user's pages on the mount). -ENOTTY: not a file on a VINO mount;
 * -EPERM: opened by another user, or the file's graftpoint is not this user's. */
int vino_fd_graft(vino_client *client, int fd, const char *point, const void *wasm, size_t len);

/* Binds a graft to a file: every later open of `path` by any process runs it at `point`. */
int vino_graft_load_file(vino_client *client, const char *path, const char *point, const void *wasm,
                         size_t len, struct vino_graft_info *info);
int vino_graft_unload(vino_client *client, const char *point);
int vino_graft_unload_file(vino_client *client, const char *path, const char *point);

/* Writes into the graft's memory at `offset` (its shared state, e.g. a hot list). */
int vino_graft_write_memory(vino_client *client, const char *point, uint32_t offset, const void *data,
                            size_t len);

/* The address of a data symbol the graft exports (>= 0). */
int64_t vino_graft_symbol(vino_client *client, const char *point, const char *symbol);

/* Calls one of the graft's exported control functions with `nargs` arguments; its answer goes to
 * *result (which may be NULL). Returns 0. */
int vino_graft_call(vino_client *client, const char *point, const char *control, const int64_t *args,
                    size_t nargs, int64_t *result);

/* The graftpoints this process may graft, or one graftpoint, as a JSON string in *json (free it
 * with vino_string_free). Returns the string's length. */
int vino_graft_list_json(vino_client *client, char **json);
int vino_graft_stats_json(vino_client *client, const char *point, char **json);

/* ---- stream codecs ----------------------------------------------------------------------- */

/* Binds the codec (wasm, len) to the empty file or the directory at `path` (files made in it get
 * the codec; docs/streams.md). Only the owner may. With len 0, unbinds it. */
int vino_stream_bind(vino_client *client, const char *path, const void *wasm, size_t len);

/* Gives the codec of the stream file at `path` its 256-bit key (32 bytes). Only the owner may. */
int vino_stream_key(vino_client *client, const char *path, const uint8_t key[32]);

/* Calls control function `name` (without its vino_ctl_ prefix) of the codec of the stream file at
 * `path` with `nargs` arguments; its answer goes to *result (which may be NULL). Returns 0. */
int vino_stream_ctl(vino_client *client, const char *path, const char *name, const int64_t *args, size_t nargs,
                    int64_t *result);

/* The codec bound to the file or directory at `path` (null for none) as a JSON string in *json
 * (free it with vino_string_free). Returns the string's length. */
int vino_stream_status_json(vino_client *client, const char *path, char **json);

/* ---- locks and events --------------------------------------------------------------------- */

/* Takes (VINO_LOCK_READ / VINO_LOCK_WRITE), or drops (VINO_LOCK_UNLOCK), a byte-range lock on
 * [start, start + len) (len 0: to the end). With `wait` 0 a conflict fails at once (-EAGAIN). */
int vino_lock(vino_client *client, int fd, int kind, uint64_t start, uint64_t len, int wait);

/* The first lock that would block this one: returns 1 and fills *holder (which may be NULL), or
 * 0 if none would. */
int vino_getlk(vino_client *client, int fd, int kind, uint64_t start, uint64_t len, struct vino_lock *holder);

/* Limits events of `kind` to these inodes and names (either list may be empty). */
int vino_event_filter(vino_client *client, int kind, const uint64_t *inodes, size_t ninodes,
                      const char *const *names, size_t nnames);

/* Asks for events of `kind`. */
int vino_event_subscribe(vino_client *client, int kind);

/* Waits up to `timeout_ms` for events and stores up to `max` of them; returns how many (0 if
 * none came). Events beyond `max` are kept for the next call, which then does not wait. */
int vino_event_wait(vino_client *client, uint32_t timeout_ms, struct vino_event *events, size_t max);

/* ---- accounts ----------------------------------------------------------------------------- */

/* Every process and bound graft with their counters (as `vino top` shows them), as a JSON
 * object in *json (free it with vino_string_free). Returns the string's length. */
int vino_top_json(vino_client *client, char **json);

/* Frees a string from vino_*_json. NULL is ignored. */
void vino_string_free(char *s);

#ifdef __cplusplus
}
#endif

#endif /* VINO_H */
