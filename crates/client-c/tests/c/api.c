/* api.c -- exercises every call of vino.h against a running daemon ($VINO_SOCKET).
 *
 *   api GRAFT.wasm CODEC.wasm   (the hot-list eviction graft, sdk/grafts/hotlist_evict.c, and
 *                               the encrypting codec, sdk/grafts/chacha20poly1305_stream.c)
 *
 * Prints one line per checked step; exits 1 at the first failed check, saying why. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vino.h"

static vino_client *c;

/* The layouts libvino's Rust side has (crates/client-c/src/types.rs checks the same numbers). */
#define LAYOUT(name, cond) typedef char layout_##name[(cond) ? 1 : -1]
LAYOUT(stat_size, sizeof(struct vino_stat) == 88);
LAYOUT(stat_ctime, offsetof(struct vino_stat, ctime_ns) == 64);
LAYOUT(stat_rdev, offsetof(struct vino_stat, rdev) == 72);
LAYOUT(stat_generation, offsetof(struct vino_stat, generation) == 80);
LAYOUT(setattr_size, sizeof(struct vino_setattr) == 40);
LAYOUT(setattr_size_field, offsetof(struct vino_setattr, size) == 16);

#define CHECK(cond, ...)                                                                         \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "api.c:%d: check failed: %s (last error: %s)\n", __LINE__, #cond,   \
                    vino_last_error(c));                                                         \
            fprintf(stderr, __VA_ARGS__);                                                        \
            fputc('\n', stderr);                                                                 \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static void *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n);
    CHECK(buf != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n, "cannot read %s", path);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void connections(void) {
    CHECK(vino_connect("/nonexistent/vinod.sock") == NULL, "a connect to nowhere fails");
    CHECK(strstr(vino_last_error(NULL), "/nonexistent/vinod.sock") != NULL, "the message names the socket: %s",
          vino_last_error(NULL));
    c = vino_connect(NULL);
    CHECK(c != NULL, "connect: %s", vino_last_error(NULL));
    CHECK(vino_pid(c) > 0, "a kernel pid");
    CHECK(vino_null(c) == 0, "null");
    CHECK(vino_null(NULL) == -EINVAL, "a NULL client is refused");
    CHECK(strcmp(vino_last_error(c), "") == 0, "no error yet");
    printf("connect ok\n");
}

static void files(void) {
    int fd = vino_open(c, "/api.txt", VINO_O_RDWR | VINO_O_CREAT | VINO_O_EXCL, 0600);
    CHECK(fd >= 0, "open: %d", fd);
    CHECK(vino_open(c, "/api.txt", VINO_O_RDWR | VINO_O_CREAT | VINO_O_EXCL, 0600) == -EEXIST, "O_EXCL");
    CHECK(vino_open(c, NULL, VINO_O_READ, 0) == -EINVAL, "a NULL path");
    CHECK(strstr(vino_last_error(c), "path") != NULL, "the message names the argument");
    CHECK(vino_open(c, "/missing", VINO_O_READ, 0) == -ENOENT, "a missing file");
    CHECK(vino_open(c, "/x", 0x4000, 0) == -EINVAL, "unknown flags");

    CHECK(vino_write(c, fd, "0123456789", 10) == 10, "write");
    CHECK(vino_pwrite(c, fd, "ab", 2, 3) == 2, "pwrite");
    CHECK(vino_seek(c, fd, 2) == 0, "seek");
    char buf[32] = {0};
    CHECK(vino_read(c, fd, buf, 4) == 4 && memcmp(buf, "2ab5", 4) == 0, "read after seek: %.4s", buf);
    CHECK(vino_read(c, fd, NULL, 4) == -EINVAL, "a NULL buffer");
    CHECK(vino_read(c, fd, NULL, 0) == 0, "a NULL buffer of 0 bytes");
    CHECK(vino_pread(c, fd, buf, sizeof buf, 8) == 2 && memcmp(buf, "89", 2) == 0, "pread at 8");
    CHECK(vino_pread(c, fd, buf, sizeof buf, 100) == 0, "pread past the end");
    CHECK(vino_ftruncate(c, fd, 5) == 0, "ftruncate");
    CHECK(vino_fsync(c, fd) == 0, "fsync");
    struct vino_stat st;
    CHECK(vino_fstat(c, fd, &st) == 0 && st.size == 5 && st.kind == VINO_KIND_REGULAR, "fstat");
    CHECK((st.mode & 0777) == 0600, "mode %o", st.mode);
    CHECK(vino_fstat(c, fd, NULL) == -EINVAL, "a NULL stat");
    CHECK(vino_close(c, fd) == 0, "close");
    CHECK(vino_close(c, fd) == -EBADF, "a closed fd");
    CHECK(vino_close(c, -1) == -EBADF, "a negative fd");

    /* 64 KiB: through shared memory */
    size_t big = 64 << 10;
    unsigned char *out = malloc(big), *in = malloc(big);
    for (size_t i = 0; i < big; i++)
        out[i] = (unsigned char)(i * 7);
    fd = vino_open(c, "/big", VINO_O_RDWR | VINO_O_CREAT | VINO_O_TRUNC, 0644);
    CHECK(vino_pwrite(c, fd, out, big, 0) == (int64_t)big, "a big write");
    CHECK(vino_pread(c, fd, in, big, 0) == (int64_t)big && memcmp(in, out, big) == 0, "a big read");
    CHECK(vino_close(c, fd) == 0, "close");
    free(out);
    free(in);
    printf("files ok\n");
}

static void directories(void) {
    CHECK(vino_mkdir(c, "/d", 0755) == 0, "mkdir");
    CHECK(vino_mkdir(c, "/d", 0755) == -EEXIST, "mkdir twice");
    int fd = vino_open(c, "/d/a", VINO_O_WRITE | VINO_O_CREAT, 0644);
    CHECK(fd >= 0 && vino_close(c, fd) == 0, "a file in it");
    CHECK(vino_rename(c, "/d/a", "/d/b") == 0, "rename");
    struct vino_stat st;
    CHECK(vino_stat(c, "/d", &st) == 0 && st.kind == VINO_KIND_DIRECTORY, "stat a directory");
    CHECK(vino_stat(c, "/d/a", &st) == -ENOENT, "the old name is gone");

    struct vino_dirent *entries = NULL;
    int n = vino_readdir(c, "/d", &entries);
    CHECK(n >= 1, "readdir: %d", n);
    int found = 0;
    for (int i = 0; i < n; i++)
        found += strcmp(entries[i].name, "b") == 0 && entries[i].kind == VINO_KIND_REGULAR;
    CHECK(found == 1, "b is listed");
    vino_readdir_free(entries, (size_t)n);
    CHECK(vino_readdir(c, "/d", NULL) == -EINVAL, "a NULL array pointer");

    CHECK(vino_rmdir(c, "/d") < 0, "rmdir of a directory that is not empty");
    CHECK(vino_unlink(c, "/d/b") == 0, "unlink");
    CHECK(vino_rmdir(c, "/d") == 0, "rmdir");
    CHECK(vino_sync(c) == 0, "sync");
    printf("directories ok\n");
}

static int listed(struct vino_dirent *entries, int n, const char *name) {
    int found = 0;
    for (int i = 0; i < n; i++)
        found += strcmp(entries[i].name, name) == 0;
    return found;
}

static void names_at(void) {
    CHECK(vino_mkdir_at(c, VINO_AT_ROOT, "/at", 0755) == 0, "mkdir_at");
    int dir = vino_open_at(c, VINO_AT_ROOT, "/at", VINO_O_READ | VINO_O_DIRECTORY, 0);
    CHECK(dir >= 0, "open_at a directory: %d", dir);
    CHECK(vino_open_at(c, VINO_AT_ROOT, "/api.txt", VINO_O_READ | VINO_O_DIRECTORY, 0) == -ENOTDIR,
          "O_DIRECTORY on a file");
    CHECK(vino_open_at(c, -5, "x", VINO_O_READ, 0) == -EBADF, "a bad dirfd");

    /* A name that is not UTF-8, relative to the directory. */
    const char *name = "caf\xe9";
    int fd = vino_open_at(c, dir, name, VINO_O_RDWR | VINO_O_CREAT | VINO_O_EXCL, 0640);
    CHECK(fd >= 0, "open_at a byte name: %d", fd);
    CHECK(vino_write(c, fd, "bytes", 5) == 5, "write");
    struct vino_stat st;
    CHECK(vino_stat_at(c, dir, name, &st, 0) == 0 && st.size == 5 && (st.mode & 0777) == 0640, "stat_at");
    CHECK(st.generation != 0 && st.rdev == 0, "generation %u rdev %llu", st.generation, (unsigned long long)st.rdev);
    CHECK(vino_stat_at(c, dir, name, &st, 0x8000) == -EINVAL, "unknown stat flags");
    struct vino_dirent *entries = NULL;
    int n = vino_readdir_fd(c, dir, &entries);
    CHECK(n == 1 && listed(entries, n, name) == 1, "readdir_fd: %d", n);
    vino_readdir_free(entries, (size_t)n);

    /* Symbolic links. */
    CHECK(vino_symlink_at(c, name, dir, "link") == 0, "symlink_at");
    char target[16];
    CHECK(vino_readlink_at(c, dir, "link", target, sizeof target) == 4 && memcmp(target, name, 4) == 0, "readlink_at");
    CHECK(vino_readlink_at(c, dir, "link", target, 2) == 4, "a cut readlink gives the whole length");
    CHECK(vino_stat_at(c, dir, "link", &st, VINO_AT_SYMLINK_NOFOLLOW) == 0 && st.kind == VINO_KIND_SYMLINK, "lstat");
    CHECK(vino_stat_at(c, dir, "link", &st, 0) == 0 && st.kind == VINO_KIND_REGULAR, "stat through the link");
    CHECK(vino_open_at(c, dir, "link", VINO_O_READ | VINO_O_NOFOLLOW, 0) == -ELOOP, "O_NOFOLLOW");
    CHECK(vino_link_at(c, dir, "link", VINO_AT_ROOT, "/at/hard", VINO_AT_SYMLINK_FOLLOW) == 0, "link_at");
    CHECK(vino_stat_at(c, VINO_AT_ROOT, "/at/hard", &st, 0) == 0 && st.nlink == 2, "nlink %u", st.nlink);

    /* Nodes. */
    CHECK(vino_mknod_at(c, dir, "fifo", VINO_KIND_FIFO, 0600, 0) == 0, "mknod_at a FIFO");
    if (vino_privileged(c)) {
        CHECK(vino_mknod_at(c, dir, "null", VINO_KIND_CHAR_DEVICE, 0666, (1 << 8) | 3) == 0, "mknod_at a device");
        CHECK(vino_stat_at(c, dir, "null", &st, 0) == 0 && st.kind == VINO_KIND_CHAR_DEVICE &&
                  st.rdev == ((1 << 8) | 3),
              "the device node");
    } else {
        CHECK(vino_mknod_at(c, dir, "null", VINO_KIND_CHAR_DEVICE, 0666, (1 << 8) | 3) == -EPERM, "devices: root's");
        CHECK(vino_mknod_at(c, dir, "null", VINO_KIND_SOCKET, 0600, 0) == 0, "mknod_at a socket");
    }
    CHECK(vino_mknod_at(c, dir, "x", 42, 0600, 0) == -EINVAL, "an unknown kind");

    /* Attributes. */
    struct vino_setattr sa = {0};
    sa.valid = VINO_SET_MODE | VINO_SET_SIZE | VINO_SET_MTIME;
    sa.mode = 0600;
    sa.size = 2;
    sa.mtime_ns = 1000000000ull;
    CHECK(vino_setattr_at(c, dir, name, 0, &sa, &st) == 0, "setattr_at");
    CHECK((st.mode & 07777) == 0600 && st.size == 2 && st.mtime_ns == 1000000000ull, "after setattr");
    sa.valid = VINO_SET_SIZE;
    sa.size = 1;
    CHECK(vino_fsetattr(c, fd, &sa, NULL) == 0, "fsetattr");
    CHECK(vino_fstat(c, fd, &st) == 0 && st.size == 1, "after fsetattr");
    sa.valid = VINO_SET_ATIME | VINO_SET_ATIME_NOW;
    CHECK(vino_fsetattr(c, fd, &sa, NULL) == -EINVAL, "a time both given and now");
    CHECK(vino_setattr_at(c, dir, name, 0, NULL, NULL) == -EINVAL, "NULL attributes");
    CHECK(vino_access_at(c, dir, name, 6, 0) == 0, "access_at");
    CHECK(vino_access_at(c, dir, "missing", 0, 0) == -ENOENT, "access_at a missing file");

    /* Extended attributes. */
    CHECK(vino_setxattr_at(c, dir, name, 0, "user.k", "value", 5, VINO_XATTR_CREATE) == 0, "setxattr_at");
    CHECK(vino_setxattr_at(c, dir, name, 0, "user.k", "v", 1, VINO_XATTR_CREATE) == -EEXIST, "XATTR_CREATE");
    CHECK(vino_setxattr_at(c, dir, name, 0, "trusted.k", "v", 1, 0) == -EOPNOTSUPP, "trusted.");
    char value[16];
    CHECK(vino_getxattr_at(c, dir, name, 0, "user.k", NULL, 0) == 5, "the size of a value");
    CHECK(vino_getxattr_at(c, dir, name, 0, "user.k", value, 2) == -ERANGE, "a short buffer");
    CHECK(vino_getxattr_at(c, dir, name, 0, "user.k", value, sizeof value) == 5 && memcmp(value, "value", 5) == 0,
          "getxattr_at");
    char names[64];
    int64_t len = vino_listxattr_at(c, dir, name, 0, names, sizeof names);
    CHECK(len == 7 && strcmp(names, "user.k") == 0, "listxattr_at: %lld", (long long)len);
    CHECK(vino_removexattr_at(c, dir, name, 0, "user.k") == 0, "removexattr_at");
    CHECK(vino_getxattr_at(c, dir, name, 0, "user.k", NULL, 0) == -ENODATA, "a removed attribute");

    /* fallocate */
    CHECK(vino_fallocate(c, fd, 0, 0, 65536) == 0, "fallocate");
    CHECK(vino_fstat(c, fd, &st) == 0 && st.size == 65536 && st.blocks >= 16, "allocated");
    CHECK(vino_fallocate(c, fd, VINO_FALLOC_KEEP_SIZE, 65536, 65536) == 0 && vino_fstat(c, fd, &st) == 0 &&
              st.size == 65536,
          "FALLOC_FL_KEEP_SIZE");
    CHECK(vino_fallocate(c, fd, 8, 0, 1) == -EOPNOTSUPP, "an unknown fallocate mode");
    uint64_t held = st.blocks;
    CHECK(vino_fallocate(c, fd, VINO_FALLOC_PUNCH_HOLE | VINO_FALLOC_KEEP_SIZE, 65536, 65536) == 0 &&
              vino_fstat(c, fd, &st) == 0 && st.size == 65536 && st.blocks == held - 16,
          "FALLOC_FL_PUNCH_HOLE frees the preallocation");
    CHECK(vino_fallocate(c, fd, VINO_FALLOC_ZERO_RANGE, 0, 4096) == 0, "FALLOC_FL_ZERO_RANGE");
    CHECK(vino_fallocate(c, fd, VINO_FALLOC_PUNCH_HOLE, 0, 4096) == -EOPNOTSUPP, "a punch that would change the size");
    CHECK(vino_close(c, fd) == 0, "close");

    /* Renames and removals. */
    CHECK(vino_rename_at(c, dir, name, dir, "fifo", VINO_RENAME_NOREPLACE) == -EEXIST, "RENAME_NOREPLACE");
    CHECK(vino_rename_at(c, dir, name, VINO_AT_ROOT, "/at/renamed", 0) == 0, "rename_at");
    CHECK(vino_mkdir_at(c, dir, "sub", 0755) == 0, "mkdir_at from a descriptor");
    n = vino_readdir_at(c, VINO_AT_ROOT, "/at", &entries);
    CHECK(n == 6 && listed(entries, n, "renamed") && listed(entries, n, "sub") && !listed(entries, n, name),
          "readdir_at: %d", n);
    vino_readdir_free(entries, (size_t)n);
    CHECK(vino_rmdir_at(c, dir, "sub") == 0, "rmdir_at");
    const char *gone[] = {"renamed", "link", "hard", "fifo", "null"};
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        CHECK(vino_unlink_at(c, dir, gone[i]) == 0, "unlink_at %s", gone[i]);
    CHECK(vino_close(c, dir) == 0, "close the directory");
    CHECK(vino_rmdir_at(c, VINO_AT_ROOT, "/at") == 0, "rmdir_at the emptied directory");
    printf("names at ok\n");
}

static void grafts(const char *wasm_path) {
    size_t len;
    void *wasm = read_file(wasm_path, &len);
    struct vino_graft_info info;
    CHECK(vino_graft_load(c, "vas.pick_victim", wasm, len, &info) == 0, "graft_load");
    CHECK(strlen(info.hash) == 64 && info.size == len && info.owner == vino_pid(c), "graft info");
    CHECK(vino_graft_load(c, "vas.pick_victim", "junk", 4, NULL) < 0, "a module that is not Wasm");

    int64_t result = 0;
    int64_t page = 42;
    CHECK(vino_graft_call(c, "vas.pick_victim", "hot_add", &page, 1, &result) == 0 && result == 1, "hot_add");
    int64_t at = vino_graft_symbol(c, "vas.pick_victim", "hot_list");
    CHECK(at > 0, "graft_symbol: %lld", (long long)at);
    CHECK(vino_graft_symbol(c, "vas.pick_victim", "no_such_symbol") < 0, "a missing symbol");
    uint64_t count = 0;
    CHECK(vino_graft_write_memory(c, "vas.pick_victim", (uint32_t)at, &count, sizeof count) == 0, "write_memory");
    CHECK(vino_graft_call(c, "vas.pick_victim", "hot_add", &page, 1, &result) == 0 && result == 1,
          "the list was cleared through memory: %lld", (long long)result);

    char *json = NULL;
    CHECK(vino_graft_stats_json(c, "vas.pick_victim", &json) > 0 && strstr(json, "\"policy\"") != NULL, "stats");
    vino_string_free(json);
    CHECK(vino_graft_list_json(c, &json) > 0 && strstr(json, "vas.pick_victim") != NULL, "list");
    vino_string_free(json);
    CHECK(vino_graft_unload(c, "vas.pick_victim") == 0, "graft_unload");
    CHECK(vino_graft_call(c, "vas.pick_victim", "hot_add", &page, 1, &result) < 0, "no graft after unload");

    int fd = vino_open(c, "/grafted", VINO_O_RDWR | VINO_O_CREAT, 0644);
    CHECK(fd >= 0 && vino_close(c, fd) == 0, "a file to graft");
    int rc = vino_graft_load_file(c, "/grafted", "vas.pick_victim", wasm, len, &info);
    if (rc == 0)
        CHECK(vino_graft_unload_file(c, "/grafted", "vas.pick_victim") == 0, "graft_unload_file");
    else
        CHECK(strlen(vino_last_error(c)) > 0, "a refused file graft says why");
    free(wasm);
    printf("grafts ok\n");
}

static void streams(const char *codec_path) {
    size_t len;
    void *wasm = read_file(codec_path, &len);
    int fd = vino_open(c, "/sealed", VINO_O_RDWR | VINO_O_CREAT, 0600);
    CHECK(fd >= 0, "a file to seal");
    char *json = NULL;
    CHECK(vino_stream_status_json(c, "/sealed", &json) > 0 && strcmp(json, "null") == 0, "no codec yet: %s", json);
    vino_string_free(json);
    CHECK(vino_stream_bind(c, "/sealed", "junk", 4) < 0, "a module that is not Wasm");
    CHECK(vino_stream_bind(c, "/sealed", wasm, len) == 0, "stream_bind");
    CHECK(vino_stream_status_json(c, "/sealed", &json) > 0 && strstr(json, "\"module\"") != NULL, "stream status");
    vino_string_free(json);
    /* The encryptor refuses to store anything without a key (the key belongs to the user's codec
     * instance, shared by its files: forgotten first, whatever ran before). */
    int64_t forgot = -1;
    CHECK(vino_stream_ctl(c, "/sealed", "forget_key", NULL, 0, &forgot) == 0 && forgot == 0, "forget_key");
    CHECK(vino_write(c, fd, "secret", 6) == 6, "a write is taken into the cache");
    CHECK(vino_fsync(c, fd) < 0, "no key: write-back fails");
    uint8_t key[32];
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)(i * 7 + 1);
    CHECK(vino_stream_key(c, "/sealed", key) == 0, "stream_key");
    CHECK(vino_fsync(c, fd) == 0, "with its key the data is stored");
    char back[6];
    CHECK(vino_pread(c, fd, back, sizeof back, 0) == 6 && memcmp(back, "secret", 6) == 0, "read back");
    int64_t word = 9, value = 1, result = 0;
    int64_t args[2] = {word, value};
    CHECK(vino_stream_ctl(c, "/sealed", "set_key", args, 2, &result) == 0 && result != 0,
          "a control call reaches the codec (key word 9 refused: %lld)", (long long)result);
    CHECK(vino_stream_ctl(c, "/sealed", "no_such_control", NULL, 0, &result) < 0, "a missing control");
    CHECK(vino_close(c, fd) == 0, "close");
    fd = vino_open(c, "/unsealed", VINO_O_RDWR | VINO_O_CREAT, 0600);
    CHECK(fd >= 0 && vino_close(c, fd) == 0, "an empty file");
    CHECK(vino_stream_bind(c, "/unsealed", wasm, len) == 0, "bind to the empty file");
    CHECK(vino_stream_bind(c, "/unsealed", NULL, 0) == 0, "stream unbind");
    CHECK(vino_stream_status_json(c, "/unsealed", &json) > 0 && strcmp(json, "null") == 0, "unbound: %s", json);
    vino_string_free(json);
    free(wasm);
    printf("streams ok\n");
}

static void locks_and_events(void) {
    int fd = vino_open(c, "/locked", VINO_O_RDWR | VINO_O_CREAT, 0644);
    CHECK(fd >= 0, "open");
    CHECK(vino_lock(c, fd, VINO_LOCK_WRITE, 0, 10, 0) == 0, "lock: %s", vino_last_error(c));
    struct vino_lock holder;
    /* A process's own locks never block it. */
    CHECK(vino_getlk(c, fd, VINO_LOCK_WRITE, 0, 10, &holder) == 0, "getlk: %s", vino_last_error(c));
    CHECK(vino_lock(c, fd, VINO_LOCK_UNLOCK, 0, 0, 0) == 0, "unlock");
    CHECK(vino_lock(c, fd, 7, 0, 10, 0) == -EINVAL, "an unknown lock kind");
    CHECK(vino_close(c, fd) == 0, "close");

    CHECK(vino_event_subscribe(c, VINO_EVENT_CREATE) == 0, "event_subscribe: %s", vino_last_error(c));
    const char *names[] = {"watched-by-c"};
    CHECK(vino_event_filter(c, VINO_EVENT_CREATE, NULL, 0, names, 1) == 0, "event_filter: %s", vino_last_error(c));
    CHECK(vino_event_filter(c, VINO_EVENT_CREATE, NULL, 2, NULL, 0) == -EINVAL, "NULL inodes");
    CHECK(vino_event_subscribe(c, 99) == -EINVAL, "an unknown event kind");
    CHECK(vino_event_subscribe(c, VINO_EVENT_OVERFLOW) == -EINVAL, "overflow is not asked for");
    int made = vino_open(c, "/not-watched", VINO_O_RDWR | VINO_O_CREAT, 0644);
    CHECK(made >= 0 && vino_close(c, made) == 0, "create a file the filter rejects");
    made = vino_open(c, "/watched-by-c", VINO_O_RDWR | VINO_O_CREAT, 0644);
    CHECK(made >= 0 && vino_close(c, made) == 0, "create the watched file");
    struct vino_event events[4];
    int rc = vino_event_wait(c, 5000, events, 4);
    CHECK(rc == 1, "event_wait: %d (%s)", rc, vino_last_error(c));
    CHECK(events[0].kind == VINO_EVENT_CREATE && strcmp(events[0].name, "watched-by-c") == 0, "the create event");
    CHECK(events[0].pid == vino_pid(c), "raised by this process");
    printf("locks and events ok\n");
}

static void top(void) {
    char *json = NULL;
    int n = vino_top_json(c, &json);
    CHECK(n > 0 && json != NULL && strstr(json, "\"processes\"") != NULL, "top");
    CHECK((size_t)n == strlen(json), "the length returned");
    vino_string_free(json);
    printf("top ok\n");
}

int main(int argc, char **argv) {
    CHECK(argc == 3, "usage: api GRAFT.wasm CODEC.wasm");
    connections();
    files();
    directories();
    names_at();
    grafts(argv[1]);
    streams(argv[2]);
    locks_and_events();
    top();
    vino_disconnect(c);
    vino_disconnect(NULL);
    printf("all ok\n");
    return 0;
}
