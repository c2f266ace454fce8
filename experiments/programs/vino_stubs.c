/* vino_stubs.c: the `vino` import module's calls (vino_process.h) for a native build of a
 * program that uses them, as `vino bench native` builds sdk/programs/gzip.c for Linux. Outside
 * VINO there is no kernel to ask: each call fails with -ENOSYS, as a program asking for a call
 * the kernel does not have would see. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

int vino_graft_load(const char *point, size_t point_len, const void *wasm, size_t len) {
    (void)point, (void)point_len, (void)wasm, (void)len;
    return -ENOSYS;
}

int vino_graft_unload(const char *point, size_t point_len) {
    (void)point, (void)point_len;
    return -ENOSYS;
}

int vino_graft_call(const char *point, size_t point_len, const char *control, size_t control_len,
                    const int64_t *args, size_t nargs, int64_t *result) {
    (void)point, (void)point_len, (void)control, (void)control_len, (void)args, (void)nargs,
        (void)result;
    return -ENOSYS;
}

int vino_fd_chmod(int fd, unsigned mode) {
    (void)fd, (void)mode;
    return -ENOSYS;
}

int vino_fd_chown(int fd, int uid, int gid) {
    (void)fd, (void)uid, (void)gid;
    return -ENOSYS;
}

int vino_null(void) {
    return -ENOSYS;
}
