/* What POSIX programs call and wasi-libc (as Debian bookworm ships it) leaves out, on the
 * kernel's own calls where it has them. `vino build` links this into every program
 * (`--no-compat` leaves it out); include/compat/ declares it.
 *
 * Modes and owners go to the kernel through the `vino` import module (vino_fd_chmod,
 * vino_fd_chown), by descriptor: a call by path opens the file first, so it needs read (or
 * write) permission on it, which chmod(2) does not. A mode of 0 is left alone: WASI's stat has
 * no permission bits (wasi-libc reports 0), so a program copying one file's mode to another,
 * as compressors do, would otherwise make every file it writes unreadable. umask is remembered
 * and returned, as POSIX has it, but the kernel chooses the mode of a new file (WASI's open
 * carries none).
 *
 * Built with VINO_COMPAT_PORTABLE (`vino build --portable`), it imports nothing of the kernel's,
 * so the module runs on any WASI runtime too: modes and owners are then left as they are and the
 * calls succeed. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vino_process.h"

#ifdef VINO_COMPAT_PORTABLE
#define VINO_FD_CHMOD(fd, mode) ((void)(fd), (void)(mode), 0)
#define VINO_FD_CHOWN(fd, uid, gid) ((void)(fd), (void)(uid), (void)(gid), 0)
#else
#define VINO_FD_CHMOD vino_fd_chmod
#define VINO_FD_CHOWN vino_fd_chown
#endif

/* A kernel result (0 or a negative errno) as libc returns it. */
static int vino_result(int r) {
    if (r < 0) {
        errno = -r;
        return -1;
    }
    return 0;
}

/* Opens `path` (relative to `dir`) to change its attributes: for reading, else for writing. */
static int vino_open_for_attrs(int dir, const char *path, int flags) {
    int fd = openat(dir, path, O_RDONLY | flags);
    if (fd < 0 && (errno == EACCES || errno == EISDIR))
        fd = openat(dir, path, O_WRONLY | flags);
    return fd;
}

int fchmod(int fd, mode_t mode) {
    if ((mode & 07777) == 0)
        return 0;
    return vino_result(VINO_FD_CHMOD(fd, mode & 07777));
}

int fchown(int fd, uid_t uid, gid_t gid) {
    return vino_result(VINO_FD_CHOWN(fd, (int)uid, (int)gid));
}

/* Calls `change` on `path` opened relative to `dir`, then closes it, keeping its errno. */
static int vino_change_at(int dir, const char *path, int flags, int (*change)(int, unsigned, unsigned),
                          unsigned a, unsigned b) {
    int fd = vino_open_for_attrs(dir, path, flags);
    if (fd < 0)
        return -1;
    int r = change(fd, a, b);
    int saved = errno;
    close(fd);
    errno = saved;
    return r;
}

static int vino_chmod_fd(int fd, unsigned mode, unsigned unused) {
    (void)unused;
    return fchmod(fd, (mode_t)mode);
}

static int vino_chown_fd(int fd, unsigned uid, unsigned gid) {
    return fchown(fd, (uid_t)uid, (gid_t)gid);
}

int fchmodat(int dir, const char *path, mode_t mode, int flag) {
    /* Linux refuses to change a symbolic link's mode too. */
    if (flag & AT_SYMLINK_NOFOLLOW) {
        errno = EOPNOTSUPP;
        return -1;
    }
    if ((mode & 07777) == 0)
        return 0;
    return vino_change_at(dir, path, 0, vino_chmod_fd, mode, 0);
}

int chmod(const char *path, mode_t mode) {
    return fchmodat(AT_FDCWD, path, mode, 0);
}

int fchownat(int dir, const char *path, uid_t uid, gid_t gid, int flag) {
    int flags = (flag & AT_SYMLINK_NOFOLLOW) ? O_NOFOLLOW : 0;
    return vino_change_at(dir, path, flags, vino_chown_fd, uid, gid);
}

int chown(const char *path, uid_t uid, gid_t gid) {
    return fchownat(AT_FDCWD, path, uid, gid, 0);
}

/* A symbolic link's own owner: WASI has no descriptor for a link itself, so opening one with
 * O_NOFOLLOW fails (ELOOP) and only a file that is not a link changes. */
int lchown(const char *path, uid_t uid, gid_t gid) {
    return fchownat(AT_FDCWD, path, uid, gid, AT_SYMLINK_NOFOLLOW);
}

static mode_t vino_umask = 022;

mode_t umask(mode_t mask) {
    mode_t old = vino_umask;
    vino_umask = mask & 0777;
    return old;
}
