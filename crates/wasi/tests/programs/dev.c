/* Exercises /dev as Unix programs use it, printing one line per check ("name: result"), so that
 * a host can compare the whole output: the devices' reads, writes and stats, /dev/stdin and
 * /dev/stdout as the program's own streams, and names that must not exist. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *err(int e) { return e == 0 ? "ok" : strerror(e); }

/* Opens `path` with `flags`: the descriptor, or prints the error and returns -1. */
static int open_or_say(const char *what, const char *path, int flags) {
    int fd = open(path, flags, 0644);
    if (fd < 0) printf("%s: %s\n", what, err(errno));
    return fd;
}

static void stat_dev(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        printf("stat %s: %s\n", path, err(errno));
        return;
    }
    printf("stat %s: %s ino %llu\n", path, S_ISCHR(st.st_mode) ? "chr" : S_ISDIR(st.st_mode) ? "dir" : "other",
           (unsigned long long)st.st_ino);
}

/* Each name in `dir`, sorted, on one line. */
static void list(const char *dir) {
    char names[64][32];
    int n = 0;
    DIR *d = opendir(dir);
    if (d == NULL) {
        printf("list %s: %s\n", dir, err(errno));
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 64) snprintf(names[n++], 32, "%s", e->d_name);
    closedir(d);
    qsort(names, n, 32, (int (*)(const void *, const void *))strcmp);
    printf("list %s:", dir);
    for (int i = 0; i < n; i++) printf(" %s", names[i]);
    printf("\n");
}

int main(void) {
    static char big[1 << 20];
    int fd = open_or_say("null", "/dev/null", O_WRONLY); /* as lz4 -t does */
    if (fd >= 0) {
        ssize_t w = write(fd, "discarded", 9);
        close(fd);
        fd = open("/dev/null", O_RDONLY);
        ssize_t r = read(fd, big, sizeof big);
        printf("null: wrote %zd read %zd\n", w, r);
        close(fd);
    }
    if ((fd = open_or_say("zero", "/dev/zero", O_RDONLY)) >= 0) {
        memset(big, 1, sizeof big);
        ssize_t r = read(fd, big, sizeof big);
        size_t zeros = 0;
        for (size_t i = 0; i < sizeof big; i++) zeros += big[i] == 0;
        printf("zero: read %zd zeros %zu\n", r, zeros);
        close(fd);
    }
    if ((fd = open_or_say("full", "/dev/full", O_WRONLY)) >= 0) {
        ssize_t w = write(fd, "x", 1);
        printf("full: write %zd %s\n", w, err(w < 0 ? errno : 0));
        close(fd);
    }
    if ((fd = open_or_say("urandom", "/dev/urandom", O_RDONLY)) >= 0) {
        unsigned char r[64] = {0};
        ssize_t got = read(fd, r, sizeof r);
        int nonzero = 0;
        for (int i = 0; i < 64; i++) nonzero |= r[i];
        printf("urandom: read %zd %s\n", got, nonzero ? "mixed" : "zeros");
        close(fd);
    }
    stat_dev("/dev/null");
    stat_dev("/dev/zero");
    stat_dev("/dev/full");
    stat_dev("/dev/random");
    stat_dev("/dev/urandom");
    stat_dev("/dev");
    stat_dev("/dev/tty");
    stat_dev("/dev/sda");
    if ((fd = open_or_say("stdin", "/dev/stdin", O_RDONLY)) >= 0) {
        char line[64] = {0};
        ssize_t r = read(fd, line, sizeof line - 1);
        printf("stdin: %zd %s\n", r, line);
        close(fd);
    }
    fflush(stdout); /* what printf holds goes first */
    if ((fd = open_or_say("stdout", "/dev/stdout", O_WRONLY)) >= 0) {
        write(fd, "stdout: through /dev/stdout\n", 28);
        close(fd);
    }
    fd = open("/dev/newfile", O_WRONLY | O_CREAT, 0644);
    printf("create: %s\n", err(fd < 0 ? errno : 0));
    fd = open("/dev/../../etc/passwd", O_RDONLY);
    printf("dotdot: %s\n", err(fd < 0 ? errno : 0));
    printf("unlink: %s\n", err(unlink("/dev/null") ? errno : 0));
    printf("mkdir: %s\n", err(mkdir("/dev/d", 0755) ? errno : 0));
    list("/dev");
    list("/");
    return 0;
}
