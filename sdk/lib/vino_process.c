/* Processes on the kernel's own calls: process ids, posix_spawn, waitpid, pipes and FIFOs.
 * Part of the compatibility layer (compiled as one unit after vino_compat.c, whose
 * vino_result it uses); include/compat/ declares it.
 *
 * posix_spawn opens the module itself with open(), so its path resolves as any of the
 * program's paths do (working directory, preopened directories, permissions), and passes the
 * descriptor. The child starts in the parent's working directory: wasi-libc keeps that inside
 * the program, so it goes as PWD in the child's environment, which the start-up code enters.
 *
 * Built with VINO_COMPAT_PORTABLE, nothing here imports the kernel: the calls fail with ENOSYS
 * and getpid is wasi-libc's placeholder. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wasi/libc-find-relpath.h>

#include "vino_process.h"

extern char **environ; /* <unistd.h> declares it only for _GNU_SOURCE */

#ifdef VINO_COMPAT_PORTABLE
static int VINO_GETPPID(void) {
    return 0;
}
static int VINO_SPAWN(int fd, const char *argv, size_t argv_len, const char *envp, size_t envp_len,
                      const struct vino_spawn_action *actions, size_t nactions, const struct vino_spawn_attr *attr) {
    (void)fd, (void)argv, (void)argv_len, (void)envp, (void)envp_len, (void)actions, (void)nactions, (void)attr;
    return -ENOSYS;
}
static int VINO_WAIT(int pid, int options, int *status) {
    (void)pid, (void)options, (void)status;
    return -ENOSYS;
}
static int VINO_PIPE(int fds[2], uint32_t fdflags) {
    (void)fds, (void)fdflags;
    return -ENOSYS;
}
static int VINO_MKFIFO(int dir, const char *path, size_t len, uint32_t mode) {
    (void)dir, (void)path, (void)len, (void)mode;
    return -ENOSYS;
}
#else
#define VINO_GETPPID vino_getppid
#define VINO_SPAWN vino_spawn
#define VINO_WAIT vino_wait
#define VINO_PIPE vino_pipe
#define VINO_MKFIFO vino_mkfifo

/* The kernel's pid, not wasi-libc's placeholder (its emulation library is linked after this
 * and so never used). */
pid_t getpid(void) {
    return vino_getpid();
}
#endif

pid_t getppid(void) {
    return VINO_GETPPID();
}

int pipe2(int fds[2], int flags) {
    if (flags & ~(O_NONBLOCK | O_CLOEXEC)) {
        errno = EINVAL;
        return -1;
    }
    /* O_NONBLOCK is WASI's non-blocking fd flag; O_CLOEXEC is 0 (nothing is exec'd). */
    return vino_result(VINO_PIPE(fds, (uint32_t)(flags & O_NONBLOCK)));
}

int pipe(int fds[2]) {
    return pipe2(fds, 0);
}

int mkfifoat(int dir, const char *path, mode_t mode) {
    if (dir != AT_FDCWD) {
        /* wasi-libc resolves a path against a directory descriptor as given. */
        return vino_result(VINO_MKFIFO(dir, path, strlen(path), mode & 07777));
    }
    char buf[PATH_MAX];
    char *relative = buf;
    const char *prefix;
    int preopen = __wasilibc_find_relpath(path, &prefix, &relative, sizeof buf);
    if (preopen < 0)
        return -1;
    return vino_result(VINO_MKFIFO(preopen, relative, strlen(relative), mode & 07777));
}

int mkfifo(const char *path, mode_t mode) {
    return mkfifoat(AT_FDCWD, path, mode);
}

pid_t waitpid(pid_t pid, int *status, int options) {
    if (pid < -1) {
        /* A process group: VINO has none, so none of them has children of ours. */
        errno = ECHILD;
        return -1;
    }
    int got = 0;
    int r = VINO_WAIT(pid == 0 ? -1 : pid, options & WNOHANG ? VINO_WAIT_NOHANG : 0, &got);
    if (r < 0) {
        errno = -r;
        return -1;
    }
    if (status != NULL && r > 0)
        *status = got;
    return r;
}

pid_t wait(int *status) {
    return waitpid(-1, status, 0);
}

/* File actions: a growing array of the kernel's 28-byte records; open's paths are copies. */

int posix_spawn_file_actions_init(posix_spawn_file_actions_t *fa) {
    memset(fa, 0, sizeof *fa);
    return 0;
}

int posix_spawn_file_actions_destroy(posix_spawn_file_actions_t *fa) {
    for (int i = 0; i < fa->__count; i++)
        free((void *)(uintptr_t)fa->__actions[i].path_ptr);
    free(fa->__actions);
    memset(fa, 0, sizeof *fa);
    return 0;
}

static int vino_add_action(posix_spawn_file_actions_t *fa, struct vino_spawn_action a) {
    if (fa->__count == fa->__capacity) {
        int capacity = fa->__capacity ? fa->__capacity * 2 : 4;
        struct vino_spawn_action *grown = realloc(fa->__actions, (size_t)capacity * sizeof *grown);
        if (grown == NULL)
            return ENOMEM;
        fa->__actions = grown;
        fa->__capacity = capacity;
    }
    fa->__actions[fa->__count++] = a;
    return 0;
}

int posix_spawn_file_actions_addclose(posix_spawn_file_actions_t *fa, int fd) {
    if (fd < 0)
        return EBADF;
    return vino_add_action(fa, (struct vino_spawn_action){.kind = VINO_SPAWN_CLOSE, .fd = (uint32_t)fd});
}

int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t *fa, int fd, int newfd) {
    if (fd < 0 || newfd < 0)
        return EBADF;
    return vino_add_action(fa, (struct vino_spawn_action){
                                   .kind = VINO_SPAWN_DUP2, .fd = (uint32_t)fd, .newfd = (uint32_t)newfd});
}

/* `path` made absolute against the working directory, which the kernel does not know; malloc'd. */
static char *vino_absolute(const char *path) {
    if (path[0] == '/')
        return strdup(path);
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == NULL)
        return NULL;
    size_t n = strlen(cwd), m = strlen(path);
    char *abs = malloc(n + 1 + m + 1);
    if (abs == NULL)
        return NULL;
    memcpy(abs, cwd, n);
    if (n == 0 || abs[n - 1] != '/')
        abs[n++] = '/';
    memcpy(abs + n, path, m + 1);
    return abs;
}

int posix_spawn_file_actions_addopen(posix_spawn_file_actions_t *__restrict fa, int fd,
                                     const char *__restrict path, int oflag, mode_t mode) {
    if (fd < 0)
        return EBADF;
    char *abs = vino_absolute(path);
    if (abs == NULL)
        return errno ? errno : ENOMEM;
    struct vino_spawn_action a = {
        .kind = VINO_SPAWN_OPEN,
        .newfd = (uint32_t)fd,
        .oflag = (uint32_t)oflag,
        .mode = (uint32_t)mode,
        .path_ptr = (uint32_t)(uintptr_t)abs,
        .path_len = (uint32_t)strlen(abs),
    };
    int r = vino_add_action(fa, a);
    if (r != 0)
        free(abs);
    return r;
}

/* Attributes. */

int posix_spawnattr_init(posix_spawnattr_t *attr) {
    memset(attr, 0, sizeof *attr);
    return 0;
}

int posix_spawnattr_destroy(posix_spawnattr_t *attr) {
    (void)attr;
    return 0;
}

int posix_spawnattr_setflags(posix_spawnattr_t *attr, short flags) {
    const int known = POSIX_SPAWN_RESETIDS | POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                      POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSID;
    if (flags & ~known)
        return EINVAL;
    attr->__flags = flags;
    return 0;
}

int posix_spawnattr_getflags(const posix_spawnattr_t *__restrict attr, short *__restrict flags) {
    *flags = (short)attr->__flags;
    return 0;
}

int posix_spawnattr_setpgroup(posix_spawnattr_t *attr, pid_t pgroup) {
    attr->__pgroup = pgroup;
    return 0;
}

int posix_spawnattr_getpgroup(const posix_spawnattr_t *__restrict attr, pid_t *__restrict pgroup) {
    *pgroup = attr->__pgroup;
    return 0;
}

int posix_spawnattr_setsigmask(posix_spawnattr_t *__restrict attr, const sigset_t *__restrict mask) {
    attr->__mask = *mask;
    return 0;
}

int posix_spawnattr_getsigmask(const posix_spawnattr_t *__restrict attr, sigset_t *__restrict mask) {
    *mask = attr->__mask;
    return 0;
}

int posix_spawnattr_setsigdefault(posix_spawnattr_t *__restrict attr, const sigset_t *__restrict set) {
    attr->__default = *set;
    return 0;
}

int posix_spawnattr_getsigdefault(const posix_spawnattr_t *__restrict attr, sigset_t *__restrict set) {
    *set = attr->__default;
    return 0;
}

/* Strings laid end to end, each with its NUL, as the kernel takes argv and envp; with `pwd`,
 * any PWD= in `list` is left out and `pwd` added last. NULL if out of memory. */
static char *vino_pack(char *const list[], const char *pwd, size_t *len) {
    size_t total = pwd ? strlen(pwd) + 1 : 0;
    for (size_t i = 0; list != NULL && list[i] != NULL; i++)
        total += strlen(list[i]) + 1;
    char *buf = malloc(total ? total : 1), *end = buf;
    if (buf == NULL)
        return NULL;
    for (size_t i = 0; list != NULL && list[i] != NULL; i++) {
        if (pwd && strncmp(list[i], "PWD=", 4) == 0)
            continue;
        size_t n = strlen(list[i]) + 1;
        memcpy(end, list[i], n);
        end += n;
    }
    if (pwd) {
        size_t n = strlen(pwd) + 1;
        memcpy(end, pwd, n);
        end += n;
    }
    *len = (size_t)(end - buf);
    return buf;
}

/* The kernel's attributes for `attr` (NULL for none). */
static const struct vino_spawn_attr *vino_kernel_attr(const posix_spawnattr_t *attr, struct vino_spawn_attr *out) {
    if (attr == NULL)
        return NULL;
    memset(out, 0, sizeof *out);
    if (attr->__flags & POSIX_SPAWN_SETSIGMASK)
        out->flags |= VINO_SPAWN_SETSIGMASK;
    if (attr->__flags & POSIX_SPAWN_SETSIGDEF)
        out->flags |= VINO_SPAWN_SETSIGDEF;
    if (attr->__flags & (POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSID))
        out->flags |= VINO_SPAWN_SETPGROUP;
    out->sigmask = attr->__mask;
    out->sigdefault = attr->__default;
    return out;
}

/* The kernel's spawn of the module open as `module`: 0 or an errno. */
static int vino_spawn_fd(pid_t *pid, int module, const posix_spawn_file_actions_t *fa,
                         const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    char cwd[PATH_MAX + 4] = "PWD=";
    if (getcwd(cwd + 4, sizeof cwd - 4) == NULL)
        return errno;
    size_t argv_len = 0, envp_len = 0;
    char *args = vino_pack(argv, NULL, &argv_len);
    char *env = vino_pack(envp, cwd, &envp_len);
    struct vino_spawn_attr kernel_attr;
    int r = -ENOMEM;
    if (args != NULL && env != NULL)
        r = VINO_SPAWN(module, args, argv_len, env, envp_len, fa ? fa->__actions : NULL,
                       fa ? (size_t)fa->__count : 0, vino_kernel_attr(attr, &kernel_attr));
    free(args);
    free(env);
    if (r < 0)
        return -r;
    if (pid != NULL)
        *pid = r;
    return 0;
}

int posix_spawn(pid_t *__restrict pid, const char *__restrict path, const posix_spawn_file_actions_t *fa,
                const posix_spawnattr_t *__restrict attr, char *const argv[__restrict],
                char *const envp[__restrict]) {
    int module = open(path, O_RDONLY);
    if (module < 0)
        return errno;
    int r = vino_spawn_fd(pid, module, fa, attr, argv, envp ? envp : environ);
    close(module);
    return r;
}

/* posix_spawn of `file` looked up in PATH ("/bin:/usr/bin" if unset) unless it has a slash;
 * a directory that has no such program (or one not to be run) is passed over. */
int posix_spawnp(pid_t *__restrict pid, const char *__restrict file, const posix_spawn_file_actions_t *fa,
                 const posix_spawnattr_t *__restrict attr, char *const argv[__restrict],
                 char *const envp[__restrict]) {
    if (strchr(file, '/') != NULL)
        return posix_spawn(pid, file, fa, attr, argv, envp);
    if (file[0] == '\0')
        return ENOENT;
    const char *path = getenv("PATH");
    if (path == NULL)
        path = "/bin:/usr/bin";
    size_t flen = strlen(file);
    int denied = 0;
    for (const char *dir = path;; dir++) {
        const char *end = strchr(dir, ':');
        if (end == NULL)
            end = dir + strlen(dir);
        size_t dlen = (size_t)(end - dir);
        char candidate[PATH_MAX];
        if (dlen + 1 + flen < sizeof candidate) {
            /* An empty entry is the working directory. */
            memcpy(candidate, dlen ? dir : ".", dlen ? dlen : 1);
            size_t n = dlen ? dlen : 1;
            candidate[n] = '/';
            memcpy(candidate + n + 1, file, flen + 1);
            int r = posix_spawn(pid, candidate, fa, attr, argv, envp);
            if (r == EACCES)
                denied = 1;
            else if (r != ENOENT && r != ENOTDIR)
                return r;
        }
        dir = end;
        if (*end == '\0')
            break;
    }
    return denied ? EACCES : ENOENT;
}
