/* What POSIX programs call and wasi-libc lacks: fchmod and fchown. Linked into the real
 * programs that need them (bzip2).
 *
 * Both succeed without changing anything. A program calls them to copy another file's mode
 * and owner, as read by stat; but WASI's stat has neither (wasi-libc reports permission bits
 * 0 and owner 0), so copying them would make every file mode 0 and root's. The new file keeps
 * the mode and owner the kernel gave it. A program that means to set a mode calls
 * vino_fd_chmod (vino_process.h) itself. */
#include <sys/stat.h>
#include <sys/types.h>

int fchmod(int fd, mode_t mode) {
    (void)fd;
    (void)mode;
    return 0;
}

int fchown(int fd, uid_t uid, gid_t gid) {
    (void)fd;
    (void)uid;
    (void)gid;
    return 0;
}
